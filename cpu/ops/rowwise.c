/* Ops some architectures add to the common path: per-row bias, scaling, soft-capping. */
#include <math.h>

#include "cpu_backend.h"

llmm_status llmm__cpu_add_rows(void *state, float *x, const float *bias, size_t n_rows, size_t dim) {
    (void)state;
    for (size_t r = 0; r < n_rows; r++) llmm__cpu_add_floats(x + r * dim, bias, dim);
    return LLMM_OK;
}

llmm_status llmm__cpu_scale(void *state, float *x, size_t n, float s) {
    (void)state;
    for (size_t i = 0; i < n; i++) x[i] *= s;
    return LLMM_OK;
}

/* Divide, tanh, multiply: the reference's three ops, in its order, so values round alike. */
llmm_status llmm__cpu_softcap(void *state, float *x, size_t n, float cap) {
    (void)state;
    const float inv = 1.0f / cap;
    for (size_t i = 0; i < n; i++) x[i] = tanhf(x[i] * inv) * cap;
    return LLMM_OK;
}
