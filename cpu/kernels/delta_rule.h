/* The Gated DeltaNet state kernels (cpu_kernels' delta_step, delta_read, delta_update) over a
 * range of columns: the scalar table's kernels, and the columns past a SIMD table's last whole
 * vector (kernels/delta_tiles.h). S is one value head's d x d state, row i the key dimension.
 * Every value is one chain of fused multiply-adds in a fixed order (reads over i ascending,
 * updates over s ascending), each column alone: a SIMD table whose lanes are columns rounds
 * exactly as these loops do, so every table gives the same bits. The loops walk S by rows (the
 * column chains are independent, so the order of columns within a row changes nothing). */
#ifndef LLMM_CPU_DELTA_RULE_H
#define LLMM_CPU_DELTA_RULE_H

#include <math.h>
#include <stddef.h>

#include "backend/backend.h"

static inline void delta_step_cols(float *S, size_t d, size_t j0, size_t j1, const float *k, const float *q,
                                   const float *v, float beta, float decay, float kq, float *o) {
    float kv[LLMM_MAX_SSM_HEAD], sq[LLMM_MAX_SSM_HEAD], delta[LLMM_MAX_SSM_HEAD];
    for (size_t j = j0; j < j1; j++) kv[j] = sq[j] = 0.f;
    for (size_t i = 0; i < d; i++)
        for (size_t j = j0; j < j1; j++) {
            kv[j] = fmaf(k[i], S[i * d + j], kv[j]);
            sq[j] = fmaf(q[i], S[i * d + j], sq[j]);
        }
    for (size_t j = j0; j < j1; j++) {
        delta[j] = beta * (v[j] - decay * kv[j]);
        o[j] = fmaf(kq, delta[j], decay * sq[j]);
    }
    for (size_t i = 0; i < d; i++)
        for (size_t j = j0; j < j1; j++) S[i * d + j] = fmaf(k[i], delta[j], decay * S[i * d + j]);
}

static inline void delta_read_cols(const float *S, size_t d, size_t j0, size_t j1, const float *const *x, size_t n,
                                   float *y) {
    for (size_t c = 0; c < n; c++)
        for (size_t j = j0; j < j1; j++) y[c * d + j] = 0.f;
    for (size_t i = 0; i < d; i++)
        for (size_t c = 0; c < n; c++)
            for (size_t j = j0; j < j1; j++) y[c * d + j] = fmaf(x[c][i], S[i * d + j], y[c * d + j]);
}

static inline void delta_update_cols(float *S, size_t d, size_t j0, size_t j1, float decay, const float *a,
                                     const float *u, size_t n) {
    for (size_t i = 0; i < d; i++)
        for (size_t j = j0; j < j1; j++) {
            float acc = decay * S[i * d + j];
            for (size_t s = 0; s < n; s++) acc = fmaf(a[s * d + i], u[s * d + j], acc);
            S[i * d + j] = acc;
        }
}

#endif
