#include "backend.h"

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

const llmm_backend_ops *backend_select(llmm_backend_kind kind) {
    for (size_t i = 0; i < sizeof backends / sizeof *backends; i++) {
        const llmm_backend_ops *b = backends[i];
        if ((kind == LLMM_BACKEND_AUTO || kind == b->kind) && b->available()) return b;
    }
    return NULL;
}
