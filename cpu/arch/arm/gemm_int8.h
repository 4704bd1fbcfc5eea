/* Q4_0 and Q8_0 weights times Q8 operand rows, for the aarch64 kernel files. The including
 * file defines its instruction set's one piece first:
 *   int32x4_t dot_block(int8x16_t w0, int8x16_t w1, int8x16_t x0, int8x16_t x1)
 *                      partial sums of the 32 products of a weight block (quants 0-15 in w0,
 *                      16-31 in w1, signed) and an operand block: the four lanes add up to
 *                      the block's integer dot
 *   Q_TILE_X           operand rows per tile
 * and gets gemm_q4_0, gemm_q8_0 and gemm_iq4_nl (cpu_gemm_fn). IQ4_NL is Q4_0's layout with
 * each nibble an index into a codebook of int8 values, looked up by one table instruction
 * per 16 weights.
 *
 * Layout of the work: a tile is 4 weight rows, one per float lane of an accumulator, times up
 * to Q_TILE_X operand rows. Per block, each weight row's quants are loaded (and for Q4_0
 * unpacked) once and dotted with every operand row of the tile; the four rows' partial sums
 * are reduced by two rounds of pairwise adds into one vector (lane i = weight row i), scaled
 * and added to that operand row's accumulator. So each row's float sum runs over the blocks in
 * order, exactly as the scalar vec_dot's `sum += (float)isum * (d_w * d_x)`, without FMA:
 * bit-identical results. Q4_0's nibbles are made signed (nibble - 8) before the dot rather
 * than corrected afterwards with the operand's block sum, as the x86 kernels must for their
 * unsigned x signed multiply: here both multiplies are signed, and the subtraction costs two
 * instructions per weight block against two per operand row and block. */
#ifndef LLMM_GEMM_INT8_NEON_H
#define LLMM_GEMM_INT8_NEON_H

#include "kernel_table.h"
#include "simd.h"
#include "kernels/block_kinds.h"
#include "kernels/gemm_tiles.h"

#define Q_ROWS 4 /* weight rows per tile: one per float lane */

/* Lane i: weight row i's block sum, from the four rows' partial sums v[i]. */
SIMD_ALWAYS_INLINE int32x4_t block_sums(const int32x4_t v[Q_ROWS]) {
    return vpaddq_s32(vpaddq_s32(v[0], v[1]), vpaddq_s32(v[2], v[3]));
}

/* acc += float(isum) * (d_w * d_x), lane by lane (the scalar's order). */
SIMD_ALWAYS_INLINE float32x4_t fold_block(float32x4_t acc, int32x4_t sums, float32x4_t d_w, float d_x) {
    return vaddq_f32(acc, vmulq_f32(vcvtq_f32_s32(sums), vmulq_n_f32(d_w, d_x)));
}

/* One weight block's 32 quants as signed values: Q8_0 as stored; Q4_0's low nibbles (values
 * 0-15) then high nibbles (16-31), minus 8; IQ4_NL's nibbles in the same order, looked up in
 * the codebook. */
SIMD_ALWAYS_INLINE void load_weight_block(const uint8_t *q, q_kind kind, int8x16_t *w0, int8x16_t *w1) {
    if (kind == Q_Q4_0) {
        const uint8x16_t raw = vld1q_u8(q);
        const int8x16_t eight = vdupq_n_s8(8);
        *w0 = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(raw, vdupq_n_u8(0x0f))), eight);
        *w1 = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(raw, 4)), eight);
    } else if (kind == Q_IQ4_NL) {
        const uint8x16_t raw = vld1q_u8(q);
        const int8x16_t values = vld1q_s8(llmm__iq4_values);
        *w0 = vqtbl1q_s8(values, vandq_u8(raw, vdupq_n_u8(0x0f)));
        *w1 = vqtbl1q_s8(values, vshrq_n_u8(raw, 4));
    } else {
        *w0 = vld1q_s8((const int8_t *)q);
        *w1 = vld1q_s8((const int8_t *)q + 16);
    }
}

/* The f16 scales of blocks [b0, b0 + n) of the four rows, transposed to dws[block][row], so
 * the dot loop loads a block's four scales as one vector instead of assembling them from four
 * scattered 2-byte loads per block and operand tile. */
#define SCALE_SEG 256

SIMD_ALWAYS_INLINE void gather_scales(const uint8_t *base, size_t rb, size_t block_bytes, size_t b0, size_t n,
                                      uint16_t dws[SCALE_SEG][Q_ROWS]) {
    for (int i = 0; i < Q_ROWS; i++) {
        const uint8_t *p = base + i * rb + b0 * block_bytes;
        for (size_t k = 0; k < n; k++) dws[k][i] = load_u16(p + k * block_bytes);
    }
}

/* Blocks [b0, b0 + n) of one tile: weight rows base + i * rb (i < 4), operand rows
 * r0 .. r0+nx-1. kind and nx are constants at every call site, so the branches on them fold. */
SIMD_ALWAYS_INLINE void q_tile_seg(const uint8_t *base, size_t rb, size_t nb, size_t b0, size_t n,
                                   const uint16_t dws[SCALE_SEG][Q_ROWS], const cpu_operand *x, size_t r0, size_t nx,
                                   q_kind kind, float32x4_t acc[Q_TILE_X]) {
    const size_t block_bytes = q_block_bytes(kind);
    for (size_t b = b0; b < b0 + n; b++) {
        const size_t off = b * block_bytes + 2; /* the quants, after the f16 scale */
        int8x16_t w0[Q_ROWS], w1[Q_ROWS];
#pragma GCC unroll 4
        for (int i = 0; i < Q_ROWS; i++) load_weight_block(base + i * rb + off, kind, &w0[i], &w1[i]);
        const float32x4_t d_w = f16x4_to_f32(vld1_u16(dws[b - b0]));
#pragma GCC unroll 4
        for (size_t r = 0; r < nx; r++) {
            const size_t xb = (r0 + r) * nb + b;
            const int8_t *xq = x->qs + xb * QK8_0;
            const int8x16_t x0 = vld1q_s8(xq), x1 = vld1q_s8(xq + 16);
            int32x4_t v[Q_ROWS];
#pragma GCC unroll 4
            for (int i = 0; i < Q_ROWS; i++) v[i] = dot_block(w0[i], w1[i], x0, x1);
            acc[r] = fold_block(acc[r], block_sums(v), d_w, x->d[xb]);
        }
    }
}

/* Operand rows r0 .. r0+nx-1 against the tile, a segment of scales at a time (gathered here
 * unless have_scales says dws already holds the only segment). */
SIMD_ALWAYS_INLINE void q_tile(const uint8_t *base, size_t rb, size_t nb, uint16_t dws[SCALE_SEG][Q_ROWS],
                               int have_scales, const cpu_operand *x, size_t r0, size_t nx, q_kind kind,
                               float32x4_t acc[Q_TILE_X]) {
    const size_t block_bytes = q_block_bytes(kind);
    for (size_t r = 0; r < nx; r++) acc[r] = vdupq_n_f32(0.0f);
    for (size_t b0 = 0; b0 < nb; b0 += SCALE_SEG) {
        const size_t n = LLMM_MIN((size_t)SCALE_SEG, nb - b0);
        if (!have_scales) gather_scales(base, rb, block_bytes, b0, n, dws);
        q_tile_seg(base, rb, nb, b0, n, (const uint16_t(*)[Q_ROWS])dws, x, r0, nx, kind, acc);
    }
}

/* All operand rows against the 4 weight rows base + i * rb; lanes [l0, l0 + nl) go to out
 * columns j ... Rows of up to SCALE_SEG blocks (8192 values) have their scales gathered once
 * for all operand tiles. */
SIMD_ALWAYS_INLINE void q_rows(const uint8_t *base, size_t rb, size_t l0, size_t nl, size_t j, const cpu_operand *x,
                               size_t n_rows, float *out, size_t ldo, q_kind kind) {
    const size_t nb = x->n / QK8_0;
    const int one_seg = nb <= SCALE_SEG;
    uint16_t dws[SCALE_SEG][Q_ROWS];
    if (one_seg) gather_scales(base, rb, q_block_bytes(kind), 0, nb, dws);
    for (size_t r0 = 0; r0 < n_rows; r0 += Q_TILE_X) {
        float32x4_t acc[Q_TILE_X];
        const size_t nx = LLMM_MIN((size_t)Q_TILE_X, n_rows - r0);
        if (nx == Q_TILE_X) q_tile(base, rb, nb, dws, one_seg, x, r0, Q_TILE_X, kind, acc);
        else if (nx == 1) q_tile(base, rb, nb, dws, one_seg, x, r0, 1, kind, acc);
        else q_tile(base, rb, nb, dws, one_seg, x, r0, nx, kind, acc);
        for (size_t r = 0; r < nx; r++) store_lanes(out + (r0 + r) * ldo + j, acc[r], l0, nl);
    }
}

/* Tiles of 4 rows, walked as every kernel walks them (kernels/gemm_tiles.h). */
SIMD_ALWAYS_INLINE void gemm_q(q_kind kind, const llmm_tensor *w, size_t j0, size_t j1, const cpu_operand *x,
                               size_t n_rows, float *out, size_t ldo) {
#define Q_ROWS_CALL(base, rb, next, l0, nl, j) q_rows(base, rb, l0, nl, j, x, n_rows, out, ldo, kind)
    GEMM_WALK_TILES(w, j0, j1, Q_ROWS, Q_ROWS_CALL);
#undef Q_ROWS_CALL
}

GEMM_FN_FOR_KIND(gemm_q4_0, gemm_q, Q_Q4_0)
GEMM_FN_FOR_KIND(gemm_q8_0, gemm_q, Q_Q8_0)
GEMM_FN_FOR_KIND(gemm_iq4_nl, gemm_q, Q_IQ4_NL)

#endif
