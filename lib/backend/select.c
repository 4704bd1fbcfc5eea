#include "backend.h"

#include "backend_module.h"
#include "model/model.h"

#ifdef LLMM_WITH_CUDA
extern const llmm_backend_ops llmm_cuda_backend;
#endif

/* Best first: AUTO takes the first available. */
static const llmm_backend_ops *const backends[] = {
#ifdef LLMM_WITH_CUDA
    &llmm_cuda_backend,
#endif
    &llmm__cpu_backend,
};

int llmm__backend_table_ok(const llmm_backend_ops *be) {
    if (be->api_version != LLMM_BACKEND_API_VERSION || !(be->kv_layouts & LLMM_KV_LAYOUT_HEAD_REGIONS)) return 0;
    if ((unsigned)be->kind >= LLMM_BACKEND_KINDS || be->kind == LLMM_BACKEND_AUTO) return 0;
    return be->available && be->supports_type && be->init && be->shutdown && be->buffer_alloc && be->buffer_free &&
           be->upload && be->download && be->prepare_weight && be->release_weight && be->step_begin &&
           be->step_end && be->embed && be->rms_norm && be->matmul && be->rope && be->glu && be->add &&
           be->add_rows && be->scale && be->softcap && be->kv_write && be->attention && be->copy;
}

const llmm_backend_ops *llmm__backend_select(llmm_backend_kind kind) {
    for (size_t i = 0; i < sizeof backends / sizeof *backends; i++) {
        const llmm_backend_ops *b = backends[i];
        if (!llmm__backend_table_ok(b)) continue;
        if ((kind == LLMM_BACKEND_AUTO || kind == b->kind) && b->available()) return b;
    }
    return NULL;
}

llmm_status llmm__backend_acquire(llmm_backend_kind kind, const llmm_logger *log, backend_ref *out, llmm_diag *d) {
    *out = (backend_ref){0};
    const llmm_backend_ops *builtin = llmm__backend_select(kind);
    /* a built-in table of the kind asked for wins; under AUTO the CPU is the last resort,
     * after the module */
    if (builtin && !(kind == LLMM_BACKEND_AUTO && builtin->kind == LLMM_BACKEND_CPU)) {
        out->ops = builtin;
        return LLMM_OK;
    }
    if (kind != LLMM_BACKEND_AUTO && kind != LLMM_BACKEND_CUDA)
        return llmm__diag_fail(d, LLMM_ERR_BACKEND, "backend %d is not available in this build or on this machine",
                         (int)kind);
    backend_module mod;
    llmm_diag why = {{0}};
    if (!llmm__backend_module_open(LLMM_BACKEND_CUDA, &mod, &why)) {
        *out = (backend_ref){mod.ops, mod.handle};
        return LLMM_OK;
    }
    if (kind == LLMM_BACKEND_CUDA)
        return llmm__diag_fail(d, LLMM_ERR_BACKEND, "the CUDA backend is not available: %s", why.msg);
    llmm__log_msg(log, LLMM_LOG_INFO, "backend: AUTO runs on the CPU: %s", why.msg);
    out->ops = llmm__backend_select(LLMM_BACKEND_CPU);
    return out->ops ? LLMM_OK : llmm__diag_fail(d, LLMM_ERR_BACKEND, "the CPU backend is not available");
}

void llmm__backend_release(backend_ref *ref) {
    backend_module mod = {ref->module, ref->ops};
    llmm__backend_module_close(&mod);
    *ref = (backend_ref){0};
}
