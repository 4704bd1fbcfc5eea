#include "backend.h"

#include "model.h"

#ifdef LLMM_WITH_CUDA
extern const llmm_backend_ops llmm_cuda_backend;
#endif

/* Best first: AUTO takes the first available. */
static const llmm_backend_ops *const backends[] = {
#ifdef LLMM_WITH_CUDA
    &llmm_cuda_backend,
#endif
    &llmm_cpu_backend,
};

int backend_table_ok(const llmm_backend_ops *be) {
    if (be->api_version != LLMM_BACKEND_API_VERSION || !(be->kv_layouts & LLMM_KV_LAYOUT_HEAD_REGIONS)) return 0;
    if ((unsigned)be->kind >= LLMM_BACKEND_KINDS || be->kind == LLMM_BACKEND_AUTO) return 0;
    return be->available && be->supports_type && be->init && be->shutdown && be->buffer_alloc && be->buffer_free &&
           be->upload && be->download && be->prepare_weight && be->release_weight && be->step_begin &&
           be->step_end && be->embed && be->rms_norm && be->matmul && be->rope && be->glu && be->add &&
           be->add_rows && be->scale && be->softcap && be->kv_write && be->attention && be->copy;
}

const llmm_backend_ops *backend_select(llmm_backend_kind kind) {
    for (size_t i = 0; i < sizeof backends / sizeof *backends; i++) {
        const llmm_backend_ops *b = backends[i];
        if (!backend_table_ok(b)) continue;
        if ((kind == LLMM_BACKEND_AUTO || kind == b->kind) && b->available()) return b;
    }
    return NULL;
}
