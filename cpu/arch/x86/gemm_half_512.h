/* F16 and BF16 weights times operand rows rounded to f16 / bf16 (CPU_OPERAND_F16 / _BF16) on
 * 512-bit vectors: for avx512.c; gives gemm_f16_rows_avx512 and gemm_bf16_rows_avx512
 * (cpu_gemm_fn).
 *
 * A tile is 4 weight rows x 4 operand rows: each 16 weights of a row are widened once
 * (vcvtph2ps, or a shift for bf16) for the 4 operand rows, and each 512-bit FMA adds 16
 * products. The weights and operand rows of a block of 16 x 16 stay in L2 while the tiles run
 * over it. One operand row (decode) takes the same tiles with one column of accumulators,
 * streaming the weights with the AVX2 kernel's prefetch.
 *
 * Numerics: the type's vec_dot bit for bit (lib/format/quant.c, half_dot). One vector is a
 * pair's 16 float lanes; a product of two halves is exact in float, so each FMA adds what the
 * scalar's `lane += w * x` adds; its two 256-bit halves added, then hsum_ps, pair the lanes
 * as the scalar does (l + 8, + 4, + 2, + 1), and the tail past a multiple of 16 is added in
 * order. Float, not double: a 512-bit FMA adds 16 floats but only 8 doubles. */
#ifndef LLMM_GEMM_HALF_512_X86_H
#define LLMM_GEMM_HALF_512_X86_H

#include "kernel_table.h"
#include "kernels/gemm_tiles.h"
#include "table.h"
#include "simd.h"

#define H512_ROWS 4    /* weight rows per tile */
#define H512_TILE_X 4  /* operand rows per tile: 16 accumulators, 4 weight and 1 operand vectors */
#define H512_BLOCK 16  /* weight rows and operand rows per L2 block */

/* Weights i .. i+15 of a row, as floats (exact). */
SIMD_ALWAYS_INLINE __m512 h512_load(const uint16_t *p, int bf16) {
    const __m256i h = _mm256_loadu_si256((const __m256i *)(const void *)p);
    return bf16 ? _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)) : _mm512_cvtph_ps(h);
}

/* The dot of weight row w and operand row x from the tile's accumulator (positions below
 * n16) and the tail. */
SIMD_ALWAYS_INLINE float h512_finish(__m512 acc, const uint16_t *w, const float *x, size_t n16, size_t n, int bf16) {
    float sum = hsum_ps(_mm256_add_ps(_mm512_castps512_ps256(acc),
                                      _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc), 1))));
    for (size_t i = n16; i < n; i++) sum += (bf16 ? llmm__bf16_to_f32(w[i]) : _cvtsh_ss(w[i])) * x[i];
    return sum;
}

/* H512_ROWS weight rows x nxc operand rows (H512_TILE_X or 1, a constant at each call) over
 * positions [0, n16); next: the next tile's first row, prefetched along (rows rb bytes apart),
 * or NULL. */
SIMD_ALWAYS_INLINE void h512_tile(const uint16_t *const w[H512_ROWS], const float *const x[H512_TILE_X], size_t n16,
                                  int bf16, int nxc, const uint16_t *next, size_t rb,
                                  __m512 acc[H512_ROWS][H512_TILE_X]) {
    __m512 a[H512_ROWS][H512_TILE_X];
#pragma GCC unroll 4
    for (int k = 0; k < H512_ROWS; k++)
#pragma GCC unroll 4
        for (int r = 0; r < nxc; r++) a[k][r] = _mm512_setzero_ps();
    for (size_t i = 0; i < n16; i += 16) {
        if (next)
            prefetch_span((uintptr_t)next + i * H512_ROWS * sizeof(uint16_t), 16 * H512_ROWS * sizeof(uint16_t),
                          H512_ROWS * rb > PF_L1_MAX_TILE);
        __m512 wv[H512_ROWS];
#pragma GCC unroll 4
        for (int k = 0; k < H512_ROWS; k++) wv[k] = h512_load(w[k] + i, bf16);
#pragma GCC unroll 4
        for (int r = 0; r < nxc; r++) {
            const __m512 xv = _mm512_loadu_ps(x[r] + i);
#pragma GCC unroll 4
            for (int k = 0; k < H512_ROWS; k++) a[k][r] = _mm512_fmadd_ps(wv[k], xv, a[k][r]);
        }
    }
#pragma GCC unroll 4
    for (int k = 0; k < H512_ROWS; k++)
#pragma GCC unroll 4
        for (int r = 0; r < nxc; r++) acc[k][r] = a[k][r];
}

/* The weight row pointers of the tile at row j with nj rows: rows past the end repeat its
 * last row. */
SIMD_ALWAYS_INLINE void h512_rows(const llmm_tensor *w, size_t j, size_t nj, const uint16_t *rows[H512_ROWS]) {
    for (size_t k = 0; k < H512_ROWS; k++)
        rows[k] = (const uint16_t *)((const uint8_t *)w->data + (j + LLMM_MIN(k, nj - 1)) * w->row_bytes);
}

/* Weight rows [j, j + nj) x operand rows [r, r + nx), one tile (GEMM_WALK_BLOCKS). */
SIMD_ALWAYS_INLINE void h512_tile_at(const llmm_tensor *w, const cpu_operand *x, size_t j, size_t nj, size_t r,
                                     size_t nx, float *out, size_t ldo, int bf16) {
    const size_t n = x->n, n16 = n / 16 * 16;
    const uint16_t *rows[H512_ROWS];
    h512_rows(w, j, nj, rows);
    const float *xr[H512_TILE_X];
    for (size_t t = 0; t < H512_TILE_X; t++) xr[t] = x->f32 + (r + LLMM_MIN(t, nx - 1)) * n;
    __m512 acc[H512_ROWS][H512_TILE_X];
    h512_tile(rows, xr, n16, bf16, H512_TILE_X, NULL, 0, acc);
    for (size_t k = 0; k < nj; k++)
        for (size_t t = 0; t < nx; t++)
            out[(r + t) * ldo + j + k] = h512_finish(acc[k][t], rows[k], xr[t], n16, n, bf16);
}

/* One operand row against weight rows [j0, j1). */
SIMD_ALWAYS_INLINE void h512_one(const llmm_tensor *w, size_t j0, size_t j1, const cpu_operand *x, float *out,
                                 int bf16) {
    const size_t n = x->n, n16 = n / 16 * 16;
    for (size_t j = j0; j < j1; j += H512_ROWS) {
        const size_t nj = LLMM_MIN((size_t)H512_ROWS, j1 - j);
        const uint16_t *rows[H512_ROWS];
        h512_rows(w, j, nj, rows);
        const uint16_t *next =
            j + H512_ROWS < j1 ? (const uint16_t *)((const uint8_t *)w->data + (j + H512_ROWS) * w->row_bytes) : NULL;
        const float *xr[H512_TILE_X] = {x->f32};
        __m512 acc[H512_ROWS][H512_TILE_X];
        h512_tile(rows, xr, n16, bf16, 1, next, w->row_bytes, acc);
        for (size_t k = 0; k < nj; k++) out[j + k] = h512_finish(acc[k][0], rows[k], x->f32, n16, n, bf16);
    }
}

SIMD_ALWAYS_INLINE void h512_gemm(const llmm_tensor *w, size_t j0, size_t j1, const cpu_operand *x, size_t n_rows,
                                  float *out, size_t ldo, int bf16) {
#define H512_TILE_CALL(j, nj, r, nx) h512_tile_at(w, x, j, nj, r, nx, out, ldo, bf16)
    GEMM_WALK_BLOCKS(j0, j1, n_rows, H512_BLOCK, H512_ROWS, H512_TILE_X, H512_TILE_CALL);
#undef H512_TILE_CALL
}

static void gemm_f16_rows_avx512(const llmm_tensor *w, size_t j0, size_t j1, const cpu_operand *x, size_t n_rows,
                                 float *out, size_t ldo) {
    if (n_rows == 1) h512_one(w, j0, j1, x, out, 0);
    else h512_gemm(w, j0, j1, x, n_rows, out, ldo, 0);
}

static void gemm_bf16_rows_avx512(const llmm_tensor *w, size_t j0, size_t j1, const cpu_operand *x, size_t n_rows,
                                  float *out, size_t ldo) {
    if (n_rows == 1) h512_one(w, j0, j1, x, out, 1);
    else h512_gemm(w, j0, j1, x, n_rows, out, ldo, 1);
}

#endif
