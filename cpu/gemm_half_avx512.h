/* F16 and BF16 weights times double operand rows (CPU_OPERAND_F64_F16 / _BF16) on 512-bit
 * vectors: for kernels_avx512.c; gives gemm_f16_rows_avx512 and gemm_bf16_rows_avx512
 * (cpu_gemm_fn).
 *
 * Why: the AVX2 kernel took one operand row at a time (it now takes 2 x 2 tiles), so every
 * weight was widened to double again for each prompt row, and a 256-bit FMA adds 4 products:
 * 0.097 ns per weight and row, 92 % of a 0.5B F16 prefill. Here a tile is 4 weight rows x 4 operand rows: each 8 weights of
 * a row are widened once (vcvtph2ps, then vcvtps2pd to 8 doubles) for 4 operand rows, and each
 * 512-bit FMA adds 8 products. The weights and operand rows of a block of 16 x 16 stay in L2
 * while the tiles run over it (a double operand row of 4864 values is 38 KiB). One operand row
 * (decode) takes the same tiles with one column of accumulators, streaming the weights with
 * the AVX2 kernel's prefetch: fewer instructions per weight than the AVX2 kernel's two 4-double
 * halves (one core, 896 x 4864: 0.092 -> 0.075 ns per weight from cache, 19.7-20.6 -> 22.0-22.9
 * GB/s streamed; 0.5B F16 decode, 2 threads, per-token A/B: 0.98-0.99 of the time per token).
 *
 * Numerics as avx2_gemm_f16 (and so the scalar vec_dot): a product of two f16 (or two bf16)
 * values is exact in double, so each FMA adds what `sum += (double)w * x` adds; lane l sums
 * the values at positions l mod 8 in order, exactly as the AVX2 kernel's lanes (its two
 * 4-double accumulators are this vector's halves), then the halves are added and summed as
 * hsum_pd does, and the tail past a multiple of 8 is added in order: bit-identical. */
#ifndef LLMM_GEMM_HALF_AVX512_H
#define LLMM_GEMM_HALF_AVX512_H

#include "cpu_kernels.h"
#include "gemm_tiles.h"
#include "kernels_x86.h"
#include "simd_x86.h"

#define H512_ROWS 4    /* weight rows per tile */
#define H512_TILE_X 4  /* operand rows per tile: 16 accumulators, 4 weight and 4 operand vectors */
#define H512_BLOCK 16  /* weight rows and operand rows per L2 block */

/* Weights i .. i+7 of a row, widened to double. */
SIMD_ALWAYS_INLINE __m512d h512_load(const uint16_t *p, int bf16) {
    const __m128i h = load_128(p);
    const __m256 f = bf16 ? _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)) : _mm256_cvtph_ps(h);
    return _mm512_cvtps_pd(f);
}

/* The dot of weight row w and operand row x from the tile's accumulator (positions below n8)
 * and the tail, in avx2_gemm_f16's order. */
SIMD_ALWAYS_INLINE float h512_finish(__m512d acc, const uint16_t *w, const double *x, size_t n8, size_t n, int bf16) {
    double sum = hsum_pd(_mm256_add_pd(_mm512_castpd512_pd256(acc), _mm512_extractf64x4_pd(acc, 1)));
    for (size_t i = n8; i < n; i++) sum += (double)(bf16 ? llmm_bf16_to_f32(w[i]) : _cvtsh_ss(w[i])) * x[i];
    return (float)sum;
}

/* H512_ROWS weight rows x nxc operand rows (H512_TILE_X or 1, a constant at each call) over
 * positions [0, n8); next: the next tile's first row, prefetched along (rows rb bytes apart),
 * or NULL. */
SIMD_ALWAYS_INLINE void h512_tile(const uint16_t *const w[H512_ROWS], const double *const x[H512_TILE_X], size_t n8,
                                  int bf16, int nxc, const uint16_t *next, size_t rb, __m512d acc[H512_ROWS][H512_TILE_X]) {
    __m512d a[H512_ROWS][H512_TILE_X];
#pragma GCC unroll 4
    for (int k = 0; k < H512_ROWS; k++)
#pragma GCC unroll 4
        for (int r = 0; r < nxc; r++) a[k][r] = _mm512_setzero_pd();
    for (size_t i = 0; i < n8; i += 8) {
        if (next)
            prefetch_span((uintptr_t)next + i * H512_ROWS * sizeof(uint16_t), 8 * H512_ROWS * sizeof(uint16_t),
                          H512_ROWS * rb > PF_L1_MAX_TILE);
        __m512d wv[H512_ROWS];
#pragma GCC unroll 4
        for (int k = 0; k < H512_ROWS; k++) wv[k] = h512_load(w[k] + i, bf16);
#pragma GCC unroll 4
        for (int r = 0; r < nxc; r++) {
            const __m512d xv = _mm512_loadu_pd(x[r] + i);
#pragma GCC unroll 4
            for (int k = 0; k < H512_ROWS; k++) a[k][r] = _mm512_fmadd_pd(wv[k], xv, a[k][r]);
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
    const size_t n = x->n, n8 = n / 8 * 8;
    const uint16_t *rows[H512_ROWS];
    h512_rows(w, j, nj, rows);
    const double *xr[H512_TILE_X];
    for (size_t t = 0; t < H512_TILE_X; t++) xr[t] = x->f64 + (r + LLMM_MIN(t, nx - 1)) * n;
    __m512d acc[H512_ROWS][H512_TILE_X];
    h512_tile(rows, xr, n8, bf16, H512_TILE_X, NULL, 0, acc);
    for (size_t k = 0; k < nj; k++)
        for (size_t t = 0; t < nx; t++) out[(r + t) * ldo + j + k] = h512_finish(acc[k][t], rows[k], xr[t], n8, n, bf16);
}

/* One operand row against weight rows [j0, j1). */
SIMD_ALWAYS_INLINE void h512_one(const llmm_tensor *w, size_t j0, size_t j1, const cpu_operand *x, float *out, int bf16) {
    const size_t n = x->n, n8 = n / 8 * 8;
    for (size_t j = j0; j < j1; j += H512_ROWS) {
        const size_t nj = LLMM_MIN((size_t)H512_ROWS, j1 - j);
        const uint16_t *rows[H512_ROWS];
        h512_rows(w, j, nj, rows);
        const uint16_t *next =
            j + H512_ROWS < j1 ? (const uint16_t *)((const uint8_t *)w->data + (j + H512_ROWS) * w->row_bytes) : NULL;
        const double *xr[H512_TILE_X] = {x->f64};
        __m512d acc[H512_ROWS][H512_TILE_X];
        h512_tile(rows, xr, n8, bf16, 1, next, w->row_bytes, acc);
        for (size_t k = 0; k < nj; k++) out[j + k] = h512_finish(acc[k][0], rows[k], x->f64, n8, n, bf16);
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
