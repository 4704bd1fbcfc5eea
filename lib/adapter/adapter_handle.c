/* The public adapter handle: loading (from a path or memory), reference counting, info. */
#include <string.h>

#include "adapter.h"

static llmm_status load_failed(const llmm_model *m, llmm_status st, const llmm_diag *d) {
    llmm__log_msg(&m->log, LLMM_LOG_ERROR, "adapter load failed: %s", d->msg);
    return llmm__model_fail(m, st, "%s", d->msg);
}

static llmm_status check_load_args(const llmm_model *m, const void *src, llmm_adapter **out, const char *fn) {
    if (!m || !out) return LLMM_ERR_INVALID_ARG;
    *out = NULL;
    if (!src) return llmm__model_fail(m, LLMM_ERR_INVALID_ARG, "%s: NULL source", fn);
    if (m->vocab_only || !m->weights)
        return llmm__model_fail(m, LLMM_ERR_VOCAB_ONLY, "%s: the model was loaded without weights", fn);
    return LLMM_OK;
}

LLMM_API llmm_status llmm_adapter_load(const llmm_model *model, const char *path, llmm_adapter **out) {
    llmm_status st = check_load_args(model, path, out, "llmm_adapter_load");
    if (st) return st;
    llmm_diag d = {{0}};
    gguf_file *f = NULL;
    /* the model's own choice: where mapping misbehaves for it, it does for its adapters */
    const int use_mmap = model->gguf->mapping != NULL;
    if ((st = llmm__gguf_open_file(path, use_mmap, model->alloc, &f, &d))) return load_failed(model, st, &d);
    if ((st = llmm__adapter_from_gguf(model, f, out, &d))) return load_failed(model, st, &d);
    return LLMM_OK;
}

LLMM_API llmm_status llmm_adapter_load_memory(const llmm_model *model, const void *data, size_t size,
                                              llmm_adapter **out) {
    llmm_status st = check_load_args(model, data, out, "llmm_adapter_load_memory");
    if (st) return st;
    llmm_diag d = {{0}};
    /* a copy, so that the caller's buffer need not outlive the adapter */
    void *copy = llmm__mem_alloc(model->alloc, size ? size : 1);
    if (!copy) return llmm__model_fail(model, LLMM_ERR_NO_MEMORY, "out of memory for a %zu-byte adapter", size);
    memcpy(copy, data, size);
    gguf_file *f = NULL;
    if ((st = llmm__gguf_open_memory(copy, size, model->alloc, &f, &d))) {
        llmm__mem_free(model->alloc, copy);
        return load_failed(model, st, &d);
    }
    if ((st = llmm__adapter_from_gguf(model, f, out, &d))) {
        llmm__mem_free(model->alloc, copy);
        return load_failed(model, st, &d);
    }
    (*out)->owned = copy;
    (*out)->owned_size = size;
    return LLMM_OK;
}

LLMM_API void llmm_adapter_free(llmm_adapter *adapter) {
    if (adapter) llmm__adapter_release(adapter);
}

LLMM_API llmm_status llmm_adapter_get_info(const llmm_adapter *adapter, llmm_adapter_info *info) {
    if (!adapter || !info) return LLMM_ERR_INVALID_ARG;
    const llmm_adapter_info i = {.size = sizeof i, .rank = adapter->rank, .alpha = adapter->alpha,
                                 .n_tensors = adapter->n_tensors, .bytes = adapter->bytes,
                                 .fingerprint = adapter->fingerprint};
    if (!llmm__struct_export(info, &i, sizeof i, sizeof i))
        return llmm__model_fail(adapter->model, LLMM_ERR_INVALID_ARG, "llmm_adapter_get_info: info->size too small");
    return LLMM_OK;
}
