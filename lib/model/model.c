/* Model loading and the read-only queries on a loaded model. */
#include "model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arch.h"
#include "text/vocab_load.h"
#include "weights.h"

llmm_status llmm__model_fail(const llmm_model *m, llmm_status status, const char *fmt, ...) {
    /* the message buffer is the one mutable part of a shared model: guard it */
    llmm_model *mm = (llmm_model *)m;
    pthread_mutex_lock(&mm->error_lock);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(mm->last_error, sizeof mm->last_error, fmt, ap);
    va_end(ap);
    pthread_mutex_unlock(&mm->error_lock);
    return status;
}

LLMM_API size_t llmm_model_last_error(const llmm_model *model, char *buf, size_t size) {
    if (!model) return 0;
    llmm_model *mm = (llmm_model *)model;
    pthread_mutex_lock(&mm->error_lock);
    size_t n = strlen(mm->last_error);
    if (buf && size) snprintf(buf, size, "%s", mm->last_error);
    pthread_mutex_unlock(&mm->error_lock);
    return n;
}

static int report_progress(const llmm_model_params *p, float fraction) {
    return p->progress && p->progress(p->progress_user, fraction) != 0;
}

/* "{arch}.{suffix}" as an unsigned 32-bit value; absent leaves *out unchanged. */
static llmm_status arch_u32(llmm_model *m, const char *suffix, uint32_t *out, llmm_diag *d) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", m->architecture, suffix);
    const gguf_kv *kv = llmm__gguf_find_kv(m->gguf, key);
    int64_t v;
    if (!kv) return LLMM_OK;
    if (!llmm__gguf_kv_as_int(kv, &v) || v < 0 || v > UINT32_MAX)
        return llmm__diag_fail(d, LLMM_ERR_BAD_FILE, "%s must be a non-negative 32-bit integer", key);
    *out = (uint32_t)v;
    return LLMM_OK;
}

static llmm_status arch_f32(llmm_model *m, const char *suffix, float *out, llmm_diag *d) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", m->architecture, suffix);
    const gguf_kv *kv = llmm__gguf_find_kv(m->gguf, key);
    double v;
    if (!kv) return LLMM_OK;
    if (!llmm__gguf_kv_as_float(kv, &v)) return llmm__diag_fail(d, LLMM_ERR_BAD_FILE, "%s must be a float", key);
    *out = (float)v;
    return LLMM_OK;
}

static const char *meta_string_or(const llmm_model *m, const char *key, const char *fallback) {
    for (uint64_t i = 0; i < m->gguf->n_kv; i++)
        if (m->meta_strs[i] && strcmp(m->meta_keys[i], key) == 0) return m->meta_strs[i];
    return fallback;
}

/* Keys only some architectures or files have. */
static llmm_status read_optional_hparams(llmm_model *m, llmm_diag *d) {
    llmm_hparams *hp = &m->hp;
    float scaling_factor = 0.f;
    hp->rope_attn_factor = 1.f;
    llmm_status st;
    if ((st = arch_f32(m, "attn_logit_softcapping", &hp->attn_softcap, d)) ||
        (st = arch_f32(m, "final_logit_softcapping", &hp->final_softcap, d)) ||
        (st = arch_u32(m, "attention.sliding_window", &hp->sliding_window, d)) ||
        (st = arch_f32(m, "rope.freq_base_swa", &hp->rope_base_swa, d)) ||
        (st = arch_f32(m, "rope.scaling.attn_factor", &hp->rope_attn_factor, d)) ||
        (st = arch_u32(m, "rope.scaling.original_context_length", &hp->n_ctx_orig, d)) ||
        (st = arch_f32(m, "rope.scaling.factor", &scaling_factor, d)))
        return st;
    hp->rope_freq_scale = 1.f;
    char key[128];
    snprintf(key, sizeof key, "%s.rope.scaling.type", m->architecture);
    const char *type = meta_string_or(m, key, "");
    /* 0 (or absent) means no scaling, as the reference reads it */
    if (!(scaling_factor >= 0.f) || scaling_factor > 1e6f)
        return llmm__diag_fail(d, LLMM_ERR_BAD_FILE, "%s.rope.scaling.factor %g is not in 0..1e6", m->architecture,
                               (double)scaling_factor);
    if (strcmp(type, "linear") == 0 && scaling_factor > 0.f) hp->rope_freq_scale = 1.f / scaling_factor;
    return LLMM_OK;
}

/* attention.head_count_kv: one number, or (LFM2) one per layer, 0 for a layer without
 * attention; the widest layer's count sizes the KV cache (weights.c reads the entries). */
static llmm_status read_kv_heads(llmm_model *m, llmm_diag *d) {
    char key[128];
    snprintf(key, sizeof key, "%s.attention.head_count_kv", m->architecture);
    const gguf_kv *kv = llmm__gguf_find_kv(m->gguf, key);
    if (!kv || kv->type != GGUF_TYPE_ARRAY) return arch_u32(m, "attention.head_count_kv", &m->hp.n_head_kv, d);
    const gguf_array *a = &kv->v.arr;
    if (!llmm__gguf_scalar_size(a->elem_type) || a->elem_type == GGUF_TYPE_F32 || a->elem_type == GGUF_TYPE_F64 ||
        a->count != m->hp.n_layer)
        return llmm__diag_fail(d, LLMM_ERR_BAD_FILE, "%s must be an integer array of one entry per layer (%u)", key,
                               m->hp.n_layer);
    m->hp.n_head_kv = 0;
    for (uint64_t i = 0; i < a->count; i++) {
        const int64_t v = llmm__gguf_array_get_i64(a, i);
        if (v < 0 || v > UINT32_MAX) return llmm__diag_fail(d, LLMM_ERR_BAD_FILE, "%s[%llu] = %lld is out of range", key,
                                                           (unsigned long long)i, (long long)v);
        if ((uint32_t)v > m->hp.n_head_kv) m->hp.n_head_kv = (uint32_t)v;
    }
    return LLMM_OK;
}

static llmm_status read_hparams(llmm_model *m, llmm_diag *d) {
    llmm_hparams *hp = &m->hp;
    hp->rope_base = 10000.f;
    hp->norm_eps = 1e-5f;
    llmm_status st;
    if ((st = arch_u32(m, "context_length", &hp->n_ctx_train, d)) ||
        (st = arch_u32(m, "embedding_length", &hp->n_embd, d)) ||
        (st = arch_u32(m, "block_count", &hp->n_layer, d)) ||
        (st = arch_u32(m, "attention.head_count", &hp->n_head, d)) ||
        (st = arch_u32(m, "feed_forward_length", &hp->n_ff, d)) ||
        (st = arch_f32(m, "rope.freq_base", &hp->rope_base, d)) ||
        (st = arch_f32(m, "attention.layer_norm_rms_epsilon", &hp->norm_eps, d)))
        return st;
    hp->n_head_kv = hp->n_head;
    if ((st = read_kv_heads(m, d))) return st;
    if ((st = arch_u32(m, "shortconv.l_cache", &hp->conv_kernel, d)) ||
        (st = arch_u32(m, "full_attention_interval", &hp->full_attn_interval, d)) ||
        (st = arch_u32(m, "ssm.conv_kernel", &hp->ssm_conv_kernel, d)) ||
        (st = arch_u32(m, "ssm.state_size", &hp->ssm_state, d)) ||
        (st = arch_u32(m, "ssm.group_count", &hp->ssm_k_heads, d)) ||
        (st = arch_u32(m, "ssm.time_step_rank", &hp->ssm_v_heads, d)) ||
        (st = arch_u32(m, "ssm.inner_size", &hp->ssm_inner, d)))
        return st;
    hp->head_dim = hp->n_head ? hp->n_embd / hp->n_head : 0;
    if ((st = arch_u32(m, "attention.key_length", &hp->head_dim, d))) return st;
    hp->n_rot = hp->head_dim;
    if ((st = arch_u32(m, "rope.dimension_count", &hp->n_rot, d))) return st;
    return read_optional_hparams(m, d);
}

/* NUL-terminated copies of keys and string values, so lookups can hand out C strings. */
static llmm_status copy_metadata(llmm_model *m, llmm_diag *d) {
    const gguf_file *f = m->gguf;
    m->meta_keys = llmm__mem_calloc(m->alloc, (size_t)f->n_kv + 1, sizeof *m->meta_keys);
    m->meta_strs = llmm__mem_calloc(m->alloc, (size_t)f->n_kv + 1, sizeof *m->meta_strs);
    if (!m->meta_keys || !m->meta_strs) return llmm__diag_fail(d, LLMM_ERR_NO_MEMORY, "out of memory for metadata");
    for (uint64_t i = 0; i < f->n_kv; i++) {
        const gguf_kv *kv = &f->kv[i];
        m->meta_keys[i] = llmm__mem_strndup(m->alloc, kv->key.ptr, (size_t)kv->key.len);
        if (!m->meta_keys[i]) return llmm__diag_fail(d, LLMM_ERR_NO_MEMORY, "out of memory for metadata");
        if (kv->type == GGUF_TYPE_STRING) {
            m->meta_strs[i] = llmm__mem_strndup(m->alloc, kv->v.str.ptr, (size_t)kv->v.str.len);
            if (!m->meta_strs[i]) return llmm__diag_fail(d, LLMM_ERR_NO_MEMORY, "out of memory for metadata");
        }
    }
    return LLMM_OK;
}


static llmm_status load_into(llmm_model *m, const char *path, const llmm_model_params *p, llmm_diag *d) {
    llmm_status st = llmm__gguf_open_file(path, p->use_mmap, m->alloc, &m->gguf, d);
    if (st) return st;
    if (report_progress(p, 0.3f)) return llmm__diag_fail(d, LLMM_ERR_ABORTED, "load cancelled by the progress callback");
    if ((st = copy_metadata(m, d))) return st;
    const gguf_kv *arch = llmm__gguf_find_kv(m->gguf, "general.architecture");
    if (arch && arch->type != GGUF_TYPE_STRING)
        return llmm__diag_fail(d, LLMM_ERR_BAD_FILE, "general.architecture must be a string");
    m->architecture = llmm__mem_strndup(m->alloc, arch ? arch->v.str.ptr : "", arch ? (size_t)arch->v.str.len : 0);
    m->name = llmm__mem_strndup(m->alloc, meta_string_or(m, "general.name", ""), strlen(meta_string_or(m, "general.name", "")));
    if (!m->architecture || !m->name) return llmm__diag_fail(d, LLMM_ERR_NO_MEMORY, "out of memory");
    /* an architecture this build lacks is UNSUPPORTED whatever its keys hold (LFM2 stores
     * head_count_kv per layer): its hyper-parameters would only be misread */
    const llmm_arch *row = llmm__arch_find(m->architecture);
    if (!m->vocab_only && !row)
        return llmm__diag_fail(d, LLMM_ERR_UNSUPPORTED, "architecture '%s' is not supported (supported: %s)",
                               m->architecture, llmm__arch_supported_list());
    if ((st = read_hparams(m, d))) return st;
    for (uint64_t i = 0; i < m->gguf->n_tensors; i++) m->n_params += m->gguf->tensors[i].n_elements;
    if ((st = llmm__vocab_load(&m->vocab, m->gguf, m->alloc, &m->log, d))) return st;
    if (report_progress(p, 0.6f)) return llmm__diag_fail(d, LLMM_ERR_ABORTED, "load cancelled by the progress callback");
    const llmm_weights_source src = {m->gguf, &m->hp, m->vocab.n_tokens, row, m->alloc};
    if (!m->vocab_only && (st = llmm__weights_bind(&src, &m->weights, d))) return st;
    if (report_progress(p, 1.0f)) return llmm__diag_fail(d, LLMM_ERR_ABORTED, "load cancelled by the progress callback");
    return LLMM_OK;
}

static void model_release(llmm_model *m) {
    const llmm_allocator *a = m->alloc;
    llmm__weights_free(m->weights, m->alloc);
    m->weights = NULL;
    llmm__vocab_free(&m->vocab, a);
    if (m->gguf) {
        for (uint64_t i = 0; m->meta_keys && i < m->gguf->n_kv; i++) llmm__mem_free(a, m->meta_keys[i]);
        for (uint64_t i = 0; m->meta_strs && i < m->gguf->n_kv; i++) llmm__mem_free(a, m->meta_strs[i]);
    }
    llmm__mem_free(a, m->meta_keys);
    llmm__mem_free(a, m->meta_strs);
    llmm__mem_free(a, m->architecture);
    llmm__mem_free(a, m->name);
    llmm__gguf_close(m->gguf);
    pthread_mutex_destroy(&m->error_lock);
    for (size_t i = 0; i < LLMM_BACKEND_KINDS; i++) pthread_mutex_destroy(&m->backend_shared[i].lock);
    /* the struct itself came from the app's allocator, whose copy lives inside it */
    llmm_allocator copy = m->alloc_copy;
    llmm__mem_free(a ? &copy : NULL, m);
}

LLMM_API llmm_status llmm_model_load(const char *path, const llmm_model_params *params, llmm_model **out) {
    llmm_model_params p;
    llmm_model_params_default(&p, sizeof p);
    if (params && !llmm__struct_import(&p, sizeof p, params, sizeof p)) return LLMM_ERR_INVALID_ARG;
    if (!out) return LLMM_ERR_INVALID_ARG;
    *out = NULL;
    llmm_logger log = {p.log, p.log_user, p.log_level};
    llmm_diag d = {{0}};
    llmm_status st;
    double t0 = llmm__time_now_ms();
    llmm_model *m = NULL;
    if (!path) {
        st = llmm__diag_fail(&d, LLMM_ERR_INVALID_ARG, "llmm_model_load: path is NULL");
    } else if (p.allocator && (!p.allocator->alloc || !p.allocator->free)) {
        st = llmm__diag_fail(&d, LLMM_ERR_INVALID_ARG, "llmm_model_load: allocator needs both alloc and free");
    } else if (!(m = llmm__mem_calloc(p.allocator, 1, sizeof *m))) {
        st = llmm__diag_fail(&d, LLMM_ERR_NO_MEMORY, "out of memory");
    } else {
        if (p.allocator) {
            m->alloc_copy = *p.allocator;
            m->alloc = &m->alloc_copy;
        }
        m->log = log;
        m->vocab_only = p.vocab_only != 0;
        m->repack_weights = p.repack_weights != 0;
        pthread_mutex_init(&m->error_lock, NULL);
        for (size_t i = 0; i < LLMM_BACKEND_KINDS; i++) pthread_mutex_init(&m->backend_shared[i].lock, NULL);
        st = load_into(m, path, &p, &d);
    }
    if (st) {
        if (m) model_release(m);
        if (p.error_buf && p.error_buf_size) snprintf(p.error_buf, p.error_buf_size, "%s", d.msg);
        llmm__log_msg(&log, LLMM_LOG_ERROR, "loading '%s' failed: %s", path ? path : "(null)", d.msg);
        return st;
    }
    m->load_ms = llmm__time_now_ms() - t0;
    llmm__log_msg(&log, LLMM_LOG_INFO, "loaded '%s': %s, %u tensors, %.1f ms", path, m->architecture,
            (unsigned)m->gguf->n_tensors, m->load_ms);
    *out = m;
    return LLMM_OK;
}

LLMM_API void llmm_model_free(llmm_model *model) {
    if (model) model_release(model);
}

LLMM_API llmm_status llmm_model_get_info(const llmm_model *model, llmm_model_info *info) {
    if (!model || !info) return LLMM_ERR_INVALID_ARG;
    llmm_model_info i = {0};
    i.size = sizeof i;
    i.architecture = model->architecture;
    i.name = model->name;
    i.tokenizer = model->vocab.kind;
    i.vocab_only = model->vocab_only;
    i.n_vocab = model->vocab.n_tokens;
    i.n_ctx_train = model->hp.n_ctx_train;
    i.n_embd = model->hp.n_embd;
    i.n_layer = model->hp.n_layer;
    i.n_head = model->hp.n_head;
    i.n_head_kv = model->hp.n_head_kv;
    i.n_ff = model->hp.n_ff;
    i.head_dim = model->hp.head_dim;
    i.n_params = model->n_params;
    i.file_bytes = model->gguf->size;
    i.gguf_version = model->gguf->version;
    i.n_tensors = (uint32_t)model->gguf->n_tensors;
    i.load_ms = model->load_ms;
    if (!llmm__struct_export(info, &i, sizeof i, sizeof i))
        return llmm__model_fail(model, LLMM_ERR_INVALID_ARG, "llmm_model_get_info: info->size too small");
    return LLMM_OK;
}

static llmm_status find_meta(const llmm_model *model, const char *key, const void *out, const gguf_kv **kv,
                             uint64_t *index) {
    if (!model) return LLMM_ERR_INVALID_ARG;
    if (!key || !out) return llmm__model_fail(model, LLMM_ERR_INVALID_ARG, "metadata lookup: NULL key or out");
    for (uint64_t i = 0; i < model->gguf->n_kv; i++)
        if (strcmp(model->meta_keys[i], key) == 0) {
            *kv = &model->gguf->kv[i];
            *index = i;
            return LLMM_OK;
        }
    return llmm__model_fail(model, LLMM_ERR_NOT_FOUND, "no metadata key '%s'", key);
}

LLMM_API llmm_status llmm_model_meta_str(const llmm_model *model, const char *key, const char **out) {
    const gguf_kv *kv;
    uint64_t i;
    llmm_status st = find_meta(model, key, out, &kv, &i);
    if (st) return st;
    if (!model->meta_strs[i]) return llmm__model_fail(model, LLMM_ERR_WRONG_TYPE, "metadata '%s' is not a string", key);
    *out = model->meta_strs[i];
    return LLMM_OK;
}

LLMM_API llmm_status llmm_model_meta_int(const llmm_model *model, const char *key, int64_t *out) {
    const gguf_kv *kv;
    uint64_t i;
    llmm_status st = find_meta(model, key, out, &kv, &i);
    if (st) return st;
    if (!llmm__gguf_kv_as_int(kv, out))
        return llmm__model_fail(model, LLMM_ERR_WRONG_TYPE, "metadata '%s' is not an integer (or exceeds int64)", key);
    return LLMM_OK;
}

LLMM_API llmm_status llmm_model_meta_float(const llmm_model *model, const char *key, double *out) {
    const gguf_kv *kv;
    uint64_t i;
    llmm_status st = find_meta(model, key, out, &kv, &i);
    if (st) return st;
    if (!llmm__gguf_kv_as_float(kv, out)) return llmm__model_fail(model, LLMM_ERR_WRONG_TYPE, "metadata '%s' is not a float", key);
    return LLMM_OK;
}

LLMM_API llmm_status llmm_model_meta_count(const llmm_model *model, size_t *count) {
    if (!model || !count) return LLMM_ERR_INVALID_ARG;
    *count = (size_t)model->gguf->n_kv;
    return LLMM_OK;
}

LLMM_API llmm_status llmm_model_meta_key(const llmm_model *model, size_t index, const char **key) {
    if (!model || !key) return LLMM_ERR_INVALID_ARG;
    if (index >= model->gguf->n_kv)
        return llmm__model_fail(model, LLMM_ERR_INVALID_ARG, "metadata index %zu out of range", index);
    *key = model->meta_keys[index];
    return LLMM_OK;
}
