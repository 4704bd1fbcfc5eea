/* The Gated DeltaNet state kernels (kernel_table.h delta_step, delta_read, delta_update) in
 * vectors whose lanes are columns of S: for arch/x86/delta_avx2.c, delta_avx512.c and
 * arch/arm/delta_neon.c. Each lane runs the column chain of kernels/delta_rule.h with the same
 * operations in the same order, so the results are the scalar table's bit for bit; columns
 * past the last whole vector take delta_rule.h's loops. The including file defines first:
 *   dt_vec, DT_LANES       a vector of floats and its width
 *   dt_load, dt_store, dt_set1, dt_zero, dt_mul, dt_sub, and dt_fma(a, b, c) = a b + c fused
 *   DT_STEP_U              vectors of columns per delta_step block
 *   DT_READ_R, DT_READ_U   vectors x[c] times vectors of columns per delta_read tile
 *   DT_UPDATE_R, DT_UPDATE_U  rows of S times vectors of columns per delta_update tile
 *   DT_NAME(kernel)        the exported name of each kernel (llmm__avx2_##kernel)
 *   SIMD_ALWAYS_INLINE     (arch/x86/simd.h, arch/arm/simd.h)
 * and gets the kernels DT_NAME(delta_step), DT_NAME(delta_read), DT_NAME(delta_update), which
 * the architecture's table.h declares.
 * A delta_step block is d rows by DT_STEP_U vectors (16 KiB at d = 128 and 32 columns): read
 * once from memory for kv and sq, then updated from L1, so a decode token reads the state
 * once. The tiles of delta_read and delta_update keep R x U accumulators in registers, each S
 * or u vector loaded once per R broadcasts. */
#ifndef LLMM_DELTA_TILES_H
#define LLMM_DELTA_TILES_H

#include "kernels/delta_rule.h"

/* Columns [j, j + nu DT_LANES) of delta_step. */
SIMD_ALWAYS_INLINE void dt_step_block(float *S, size_t d, size_t j, size_t nu, const float *k, const float *q,
                                      const float *v, float beta, float decay, float kq, float *o) {
    dt_vec kv[DT_STEP_U], sq[DT_STEP_U], delta[DT_STEP_U];
#pragma GCC unroll 8
    for (size_t u = 0; u < nu; u++) kv[u] = sq[u] = dt_zero();
    for (size_t i = 0; i < d; i++) {
        const dt_vec kb = dt_set1(k[i]), qb = dt_set1(q[i]);
        const float *row = S + i * d + j;
#pragma GCC unroll 8
        for (size_t u = 0; u < nu; u++) {
            const dt_vec s = dt_load(row + u * DT_LANES);
            kv[u] = dt_fma(kb, s, kv[u]);
            sq[u] = dt_fma(qb, s, sq[u]);
        }
    }
    const dt_vec dec = dt_set1(decay), bv = dt_set1(beta), kqv = dt_set1(kq);
#pragma GCC unroll 8
    for (size_t u = 0; u < nu; u++) {
        delta[u] = dt_mul(bv, dt_sub(dt_load(v + j + u * DT_LANES), dt_mul(dec, kv[u])));
        dt_store(o + j + u * DT_LANES, dt_fma(kqv, delta[u], dt_mul(dec, sq[u])));
    }
    for (size_t i = 0; i < d; i++) {
        const dt_vec kb = dt_set1(k[i]);
        float *row = S + i * d + j;
#pragma GCC unroll 8
        for (size_t u = 0; u < nu; u++)
            dt_store(row + u * DT_LANES, dt_fma(kb, delta[u], dt_mul(dec, dt_load(row + u * DT_LANES))));
    }
}

void DT_NAME(delta_step)(float *S, size_t d, const float *k, const float *q, const float *v, float beta, float decay,
                         float kq, float *o) {
    size_t j = 0;
    for (; j + DT_STEP_U * DT_LANES <= d; j += DT_STEP_U * DT_LANES)
        dt_step_block(S, d, j, DT_STEP_U, k, q, v, beta, decay, kq, o);
    for (; j + DT_LANES <= d; j += DT_LANES) dt_step_block(S, d, j, 1, k, q, v, beta, decay, kq, o);
    if (j < d) delta_step_cols(S, d, j, d, k, q, v, beta, decay, kq, o);
}

/* y rows [0, nr) (of x[0 .. nr)), columns [j, j + nu DT_LANES). */
SIMD_ALWAYS_INLINE void dt_read_tile(const float *S, size_t d, size_t j, size_t nu, const float *const *x, size_t nr,
                                     float *y) {
    dt_vec acc[DT_READ_R][DT_READ_U];
#pragma GCC unroll 8
    for (size_t r = 0; r < nr; r++)
#pragma GCC unroll 8
        for (size_t u = 0; u < nu; u++) acc[r][u] = dt_zero();
    for (size_t i = 0; i < d; i++) {
        dt_vec s[DT_READ_U];
#pragma GCC unroll 8
        for (size_t u = 0; u < nu; u++) s[u] = dt_load(S + i * d + j + u * DT_LANES);
#pragma GCC unroll 8
        for (size_t r = 0; r < nr; r++) {
            const dt_vec b = dt_set1(x[r][i]);
#pragma GCC unroll 8
            for (size_t u = 0; u < nu; u++) acc[r][u] = dt_fma(b, s[u], acc[r][u]);
        }
    }
#pragma GCC unroll 8
    for (size_t r = 0; r < nr; r++)
#pragma GCC unroll 8
        for (size_t u = 0; u < nu; u++) dt_store(y + r * d + j + u * DT_LANES, acc[r][u]);
}

/* Columns [j, j + nu DT_LANES) of every y row. */
SIMD_ALWAYS_INLINE void dt_read_columns(const float *S, size_t d, size_t j, size_t nu, const float *const *x, size_t n,
                                        float *y) {
    size_t c = 0;
    for (; c + DT_READ_R <= n; c += DT_READ_R) dt_read_tile(S, d, j, nu, x + c, DT_READ_R, y + c * d);
    for (; c < n; c++) dt_read_tile(S, d, j, nu, x + c, 1, y + c * d);
}

void DT_NAME(delta_read)(const float *S, size_t d, const float *const *x, size_t n, float *y) {
    size_t j = 0;
    for (; j + DT_READ_U * DT_LANES <= d; j += DT_READ_U * DT_LANES) dt_read_columns(S, d, j, DT_READ_U, x, n, y);
    for (; j + DT_LANES <= d; j += DT_LANES) dt_read_columns(S, d, j, 1, x, n, y);
    if (j < d) delta_read_cols(S, d, j, d, x, n, y);
}

/* S rows [i0, i0 + nr), columns [j, j + nu DT_LANES). */
SIMD_ALWAYS_INLINE void dt_update_tile(float *S, size_t d, size_t i0, size_t nr, size_t j, size_t nu, float decay,
                                       const float *a, const float *u, size_t n) {
    const dt_vec dec = dt_set1(decay);
    dt_vec acc[DT_UPDATE_R][DT_UPDATE_U];
#pragma GCC unroll 8
    for (size_t r = 0; r < nr; r++)
#pragma GCC unroll 8
        for (size_t w = 0; w < nu; w++) acc[r][w] = dt_mul(dec, dt_load(S + (i0 + r) * d + j + w * DT_LANES));
    for (size_t s = 0; s < n; s++) {
        dt_vec uv[DT_UPDATE_U];
#pragma GCC unroll 8
        for (size_t w = 0; w < nu; w++) uv[w] = dt_load(u + s * d + j + w * DT_LANES);
#pragma GCC unroll 8
        for (size_t r = 0; r < nr; r++) {
            const dt_vec b = dt_set1(a[s * d + i0 + r]);
#pragma GCC unroll 8
            for (size_t w = 0; w < nu; w++) acc[r][w] = dt_fma(b, uv[w], acc[r][w]);
        }
    }
#pragma GCC unroll 8
    for (size_t r = 0; r < nr; r++)
#pragma GCC unroll 8
        for (size_t w = 0; w < nu; w++) dt_store(S + (i0 + r) * d + j + w * DT_LANES, acc[r][w]);
}

/* Columns [j, j + nu DT_LANES) of every S row. */
SIMD_ALWAYS_INLINE void dt_update_columns(float *S, size_t d, size_t j, size_t nu, float decay, const float *a,
                                          const float *u, size_t n) {
    size_t i = 0;
    for (; i + DT_UPDATE_R <= d; i += DT_UPDATE_R) dt_update_tile(S, d, i, DT_UPDATE_R, j, nu, decay, a, u, n);
    for (; i < d; i++) dt_update_tile(S, d, i, 1, j, nu, decay, a, u, n);
}

void DT_NAME(delta_update)(float *S, size_t d, float decay, const float *a, const float *u, size_t n) {
    size_t j = 0;
    for (; j + DT_UPDATE_U * DT_LANES <= d; j += DT_UPDATE_U * DT_LANES)
        dt_update_columns(S, d, j, DT_UPDATE_U, decay, a, u, n);
    for (; j + DT_LANES <= d; j += DT_LANES) dt_update_columns(S, d, j, 1, decay, a, u, n);
    if (j < d) delta_update_cols(S, d, j, d, decay, a, u, n);
}

#endif
