/* The online softmax's per-element math, shared by attention.cu's kernels (nvcc), their
 * emulated build and the tests (the host C++ compiler): one definition, so a partial computed
 * on the device and one merged in a test follow the same rules.
 *
 * A partial (m, l, a) summarises the positions one piece of work has seen, for one output
 * value: m their largest score, l = sum of e^(s - m), a = sum of e^(s - m) v. Two partials of
 * disjoint position sets merge into the partial of their union by rescaling both to the larger
 * maximum; the softmax-weighted value is a / l. Merging is associative and commutative up to
 * rounding, so the attention kernel may split a row's positions among blocks in any way.
 *
 * The empty partial (m = -inf, l = 0, a = 0) is the identity: a split that saw no position
 * contributes nothing, and no e^(-inf - -inf) = NaN is ever formed. */
#ifndef LLMM_CUDA_SOFTMAX_MERGE_CUH
#define LLMM_CUDA_SOFTMAX_MERGE_CUH

#include <math.h>

#if defined(__CUDACC__)
#define SM_FN __host__ __device__ __forceinline__
#else
#define SM_FN static inline
#endif

typedef struct sm_partial {
    float m, l, a;
} sm_partial;

SM_FN sm_partial sm_empty(void) {
    sm_partial p = {-INFINITY, 0.0f, 0.0f};
    return p;
}

/* The factor that rescales sums taken relative to m_old to sums relative to m_new >= m_old:
 * 0 when nothing was summed yet (m_old = -inf), whatever m_new is. */
SM_FN float sm_rescale(float m_old, float m_new) { return m_old == -INFINITY ? 0.0f : expf(m_old - m_new); }

/* The partial of the union of x's and y's positions. */
SM_FN sm_partial sm_merge(sm_partial x, sm_partial y) {
    if (y.m == -INFINITY) return x;
    if (x.m == -INFINITY) return y;
    const float m = fmaxf(x.m, y.m);
    const float cx = sm_rescale(x.m, m), cy = sm_rescale(y.m, m);
    sm_partial r = {m, x.l * cx + y.l * cy, x.a * cx + y.a * cy};
    return r;
}

/* The softmax-weighted value of a non-empty partial. */
SM_FN float sm_result(sm_partial p) { return p.a / p.l; }

/* A score from its dot product q.k, in the CPU backend's order (cpu/ops/attention.c
 * scale_and_max): scaled, then soft-capped as softcap * tanh(score / softcap) with the
 * quotient taken as a product by 1 / softcap. */
SM_FN float sm_score(float dot, float scale, float softcap) {
    return softcap > 0.0f ? tanhf(dot * scale * (1.0f / softcap)) * softcap : dot * scale;
}

#endif
