/* F16 / BF16 weights times several operand rows (prefill), walked in tiles of 2 weight
 * rows x HALF_TILE_X operand rows over cache blocks (GEMM_WALK_BLOCKS): for arch/x86/avx2.c and
 * arch/arm/neon.c. The including file defines first:
 *   half_acc           one (weight row, operand row) pair's accumulators, an array type
 *   void half_tile_2x2(const uint16_t *const w[2], const float *const x[HALF_TILE_X], size_t n16,
 *                      int bf16, half_acc acc[2][HALF_TILE_X])
 *                      positions [0, n16) of the 2 x HALF_TILE_X pairs
 *   float half_finish(const half_acc acc, const uint16_t *w, const float *x, size_t n16, size_t n,
 *                     int bf16)
 *                      a pair's dot from its accumulators and the tail past n16
 *   HALF_TILE_X, HALF_BLOCK, SIMD_ALWAYS_INLINE (arch/x86/simd.h, arch/arm/simd.h)
 * and gets half_gemm_rows (a cpu_gemm_fn's body for n_rows > 1). */
#ifndef LLMM_GEMM_HALF_TILES_H
#define LLMM_GEMM_HALF_TILES_H

#include "kernel_table.h"
#include "gemm_tiles.h"

/* Weight rows [j, j + nj) x operand rows [r, r + nx), one tile; rows past either end repeat
 * the last one (computed, not stored). */
SIMD_ALWAYS_INLINE void half_tile_at(const llmm_tensor *w, const cpu_operand *x, size_t j, size_t nj, size_t r,
                                     size_t nx, float *out, size_t ldo, int bf16) {
    const size_t n = x->n, n16 = n / 16 * 16;
    const uint16_t *rows[2];
    for (size_t k = 0; k < 2; k++)
        rows[k] = (const uint16_t *)((const uint8_t *)w->data + (j + LLMM_MIN(k, nj - 1)) * w->row_bytes);
    const float *xr[HALF_TILE_X];
    for (size_t t = 0; t < HALF_TILE_X; t++) xr[t] = x->f32 + (r + LLMM_MIN(t, nx - 1)) * n;
    half_acc acc[2][HALF_TILE_X];
    half_tile_2x2(rows, xr, n16, bf16, acc);
    for (size_t k = 0; k < nj; k++)
        for (size_t t = 0; t < nx; t++)
            out[(r + t) * ldo + j + k] = half_finish(acc[k][t], rows[k], xr[t], n16, n, bf16);
}

SIMD_ALWAYS_INLINE void half_gemm_rows(const llmm_tensor *w, size_t j0, size_t j1, const cpu_operand *x,
                                       size_t n_rows, float *out, size_t ldo, int bf16) {
#define HALF_TILE_CALL(j, nj, r, nx) half_tile_at(w, x, j, nj, r, nx, out, ldo, bf16)
    GEMM_WALK_BLOCKS(j0, j1, n_rows, HALF_BLOCK, 2, HALF_TILE_X, HALF_TILE_CALL);
#undef HALF_TILE_CALL
}

#endif
