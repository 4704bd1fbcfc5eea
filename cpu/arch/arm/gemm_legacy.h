/* Q5_0, Q4_1 and Q5_1 weights times Q8_0 (Q5_0) or Q8_1 (Q4_1, Q5_1) operand rows, for the
 * aarch64 kernel files. Included after gemm_int8.h, whose dot_block, tile shape, scale
 * gathering and lane gathering it shares: these are Q4_0's tiles with a 5th bit (Q5_0, Q5_1)
 * or a per-block min (Q4_1, Q5_1). Gets gemm_q5_0, gemm_q4_1, gemm_q5_1 (cpu_gemm_fn).
 *
 * Numerics, as the scalar dots in lib/format/quant_legacy.c, lane i = weight row i, blocks in order,
 * no FMA, so bit for bit the type's vec_dot:
 *   Q5_0: sum += (float)((q - 16) . x) * (d * d_x)   (q - 16 made signed before the dot)
 *   Q4_1, Q5_1: sum += (float)(q . x) * (d * d_x) + m * s_x   (s_x: the operand's d sum(x))
 * The base table's int16 pairs hold at most 2 x 31 x 127 = 7874. */
#ifndef LLMM_GEMM_LEGACY_NEON_H
#define LLMM_GEMM_LEGACY_NEON_H

#ifndef LLMM_GEMM_INT8_NEON_H
#error "include gemm_int8.h before gemm_legacy.h"
#endif

#include "kernels/block_kinds.h"

/* Bytes k of the result: 16 where bit k of the little-endian 16-bit h is set. */
SIMD_ALWAYS_INLINE uint8x16_t lq_bit4(uint32_t h) {
    const uint8x16_t bytes = vcombine_u8(vdup_n_u8((uint8_t)h), vdup_n_u8((uint8_t)(h >> 8)));
    const uint8x16_t sel = vreinterpretq_u8_u64(vdupq_n_u64(0x8040201008040201ull)); /* 1 << (k % 8) */
    return vandq_u8(vtstq_u8(bytes, sel), vdupq_n_u8(16));
}

/* One block's 32 quants as signed values, weights 0-15 in w0 and 16-31 in w1: the nibbles, the
 * 5th bit (bit j of the little-endian qh word, weight j) added as 16, Q5_0's 16 subtracted. */
SIMD_ALWAYS_INLINE void lq_load_block(lq_kind kind, const uint8_t *blk, int8x16_t *w0, int8x16_t *w1) {
    const uint8x16_t raw = vld1q_u8(blk + lq_qs_offset(kind));
    uint8x16_t lo = vandq_u8(raw, vdupq_n_u8(0x0f)), hi = vshrq_n_u8(raw, 4);
    if (kind != LQ_Q4_1) {
        uint32_t h;
        memcpy(&h, blk + lq_qh_offset(kind), sizeof h);
        lo = vorrq_u8(lo, lq_bit4(h));
        hi = vorrq_u8(hi, lq_bit4(h >> 16));
    }
    *w0 = vreinterpretq_s8_u8(lo);
    *w1 = vreinterpretq_s8_u8(hi);
    if (kind == LQ_Q5_0) {
        *w0 = vsubq_s8(*w0, vdupq_n_s8(16));
        *w1 = vsubq_s8(*w1, vdupq_n_s8(16));
    }
}

/* Blocks [b0, b0 + n) of one tile (weight rows base + i * rb, operand rows r0 .. r0+nx-1);
 * dws and mws hold the rows' d and m of those blocks. */
SIMD_ALWAYS_INLINE void lq_tile_seg(lq_kind kind, const uint8_t *base, size_t rb, size_t nb, size_t b0, size_t n,
                                    const uint16_t dws[SCALE_SEG][Q_ROWS], const uint16_t mws[SCALE_SEG][Q_ROWS],
                                    const cpu_operand *x, size_t r0, size_t nx, float32x4_t acc[Q_TILE_X]) {
    const size_t bb = lq_block_bytes(kind);
    for (size_t b = b0; b < b0 + n; b++) {
        int8x16_t w0[Q_ROWS], w1[Q_ROWS];
#pragma GCC unroll 4
        for (int i = 0; i < Q_ROWS; i++) lq_load_block(kind, base + i * rb + b * bb, &w0[i], &w1[i]);
        const float32x4_t d_w = f16x4_to_f32(vld1_u16(dws[b - b0]));
        const float32x4_t m_w = kind == LQ_Q5_0 ? vdupq_n_f32(0) : f16x4_to_f32(vld1_u16(mws[b - b0]));
#pragma GCC unroll 4
        for (size_t r = 0; r < nx; r++) {
            const size_t xb = (r0 + r) * nb + b;
            const int8_t *xq = x->qs + xb * QK8_0;
            const int8x16_t x0 = vld1q_s8(xq), x1 = vld1q_s8(xq + 16);
            int32x4_t v[Q_ROWS];
#pragma GCC unroll 4
            for (int i = 0; i < Q_ROWS; i++) v[i] = dot_block(w0[i], w1[i], x0, x1);
            if (kind == LQ_Q5_0) {
                acc[r] = fold_block(acc[r], block_sums(v), d_w, x->d[xb]);
            } else {
                const float32x4_t dot = vmulq_f32(vcvtq_f32_s32(block_sums(v)), vmulq_n_f32(d_w, x->d[xb]));
                acc[r] = vaddq_f32(acc[r], vaddq_f32(dot, vmulq_n_f32(m_w, x->s[xb])));
            }
        }
    }
}

SIMD_ALWAYS_INLINE void lq_tile(lq_kind kind, const uint8_t *base, size_t rb, size_t nb,
                                uint16_t dws[SCALE_SEG][Q_ROWS], uint16_t mws[SCALE_SEG][Q_ROWS], int have_scales,
                                const cpu_operand *x, size_t r0, size_t nx, float32x4_t acc[Q_TILE_X]) {
    const size_t bb = lq_block_bytes(kind);
    for (size_t r = 0; r < nx; r++) acc[r] = vdupq_n_f32(0.0f);
    for (size_t b0 = 0; b0 < nb; b0 += SCALE_SEG) {
        const size_t n = LLMM_MIN((size_t)SCALE_SEG, nb - b0);
        if (!have_scales) {
            gather_scales(base, rb, bb, b0, n, dws);
            if (kind != LQ_Q5_0) gather_scales(base + offsetof(block_q4_1, m), rb, bb, b0, n, mws);
        }
        lq_tile_seg(kind, base, rb, nb, b0, n, (const uint16_t(*)[Q_ROWS])dws, (const uint16_t(*)[Q_ROWS])mws, x, r0,
                    nx, acc);
    }
}

/* As q_rows (gemm_int8.h), with the mins gathered along with the scales. */
SIMD_ALWAYS_INLINE void lq_rows(lq_kind kind, const uint8_t *base, size_t rb, size_t l0, size_t nl, size_t j,
                                const cpu_operand *x, size_t n_rows, float *out, size_t ldo) {
    const size_t nb = x->n / QK8_0, bb = lq_block_bytes(kind);
    const int one_seg = nb <= SCALE_SEG;
    uint16_t dws[SCALE_SEG][Q_ROWS], mws[SCALE_SEG][Q_ROWS];
    if (one_seg) {
        gather_scales(base, rb, bb, 0, nb, dws);
        if (kind != LQ_Q5_0) gather_scales(base + offsetof(block_q4_1, m), rb, bb, 0, nb, mws);
    }
    for (size_t r0 = 0; r0 < n_rows; r0 += Q_TILE_X) {
        float32x4_t acc[Q_TILE_X];
        const size_t nx = LLMM_MIN((size_t)Q_TILE_X, n_rows - r0);
        if (nx == Q_TILE_X) lq_tile(kind, base, rb, nb, dws, mws, one_seg, x, r0, Q_TILE_X, acc);
        else if (nx == 1) lq_tile(kind, base, rb, nb, dws, mws, one_seg, x, r0, 1, acc);
        else lq_tile(kind, base, rb, nb, dws, mws, one_seg, x, r0, nx, acc);
        for (size_t r = 0; r < nx; r++) store_lanes(out + (r0 + r) * ldo + j, acc[r], l0, nl);
    }
}

/* Tiles of 4 rows (kernels/gemm_tiles.h). */
SIMD_ALWAYS_INLINE void gemm_lq(lq_kind kind, const llmm_tensor *w, size_t j0, size_t j1, const cpu_operand *x,
                                size_t n_rows, float *out, size_t ldo) {
#define LQ_ROWS_CALL(base, rb, next, l0, nl, j) lq_rows(kind, base, rb, l0, nl, j, x, n_rows, out, ldo)
    GEMM_WALK_TILES(w, j0, j1, Q_ROWS, LQ_ROWS_CALL);
#undef LQ_ROWS_CALL
}

GEMM_FN_FOR_KIND(gemm_q5_0, gemm_lq, LQ_Q5_0)
GEMM_FN_FOR_KIND(gemm_q4_1, gemm_lq, LQ_Q4_1)
GEMM_FN_FOR_KIND(gemm_q5_1, gemm_lq, LQ_Q5_1)

#endif
