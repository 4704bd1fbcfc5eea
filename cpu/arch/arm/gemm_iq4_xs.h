/* IQ4_XS weights times Q8_K operand rows, for the aarch64 kernel files: included after
 * gemm_int8.h, whose 4-row tiles, IQ4_NL codebook lookup (load_weight_block), block sums
 * and float fold it reuses, and gets gemm_iq4_xs (cpu_gemm_fn). The x86 version
 * (arch/x86/gemm_iq4_xs.h) says how: per sub-block of 32 the rows' integer sums, times the rows'
 * factors ls - 32, summed over the super-block in int32, then scaled once as the scalar dot
 * does, so bit-identical to the type's vec_dot. */
#ifndef LLMM_GEMM_IQ4_XS_NEON_H
#define LLMM_GEMM_IQ4_XS_NEON_H

#ifndef LLMM_GEMM_INT8_NEON_H
#error "include gemm_int8.h before gemm_iq4_xs.h"
#endif

#define XS_SUBS (QK_K / 32)

/* d and the scale words of super-block blk of the 4 rows blk + i * rb, by row lane */
SIMD_ALWAYS_INLINE void xs_heads(const uint8_t *blk, size_t rb, uint16_t dw[Q_ROWS], uint32x4_t *low,
                                 uint32x4_t *high) {
    uint32_t l[Q_ROWS], h[Q_ROWS];
    for (int i = 0; i < Q_ROWS; i++) {
        const uint8_t *p = blk + i * rb;
        dw[i] = load_u16(p);
        h[i] = load_u16(p + offsetof(block_iq4_xs, scales_h));
        memcpy(&l[i], p + offsetof(block_iq4_xs, scales_l), sizeof l[i]);
    }
    *low = vld1q_u32(l);
    *high = vld1q_u32(h);
}

/* Sub-block ib's factors ls - 32 of the 4 rows (llmm_iq4_xs_scale, 4 rows at once) */
SIMD_ALWAYS_INLINE int32x4_t xs_factors(uint32x4_t low, uint32x4_t high, int ib) {
    const uint32x4_t lo4 = vandq_u32(vshlq_u32(low, vdupq_n_s32(-4 * ib)), vdupq_n_u32(15));
    const uint32x4_t hi2 = vandq_u32(vshlq_u32(high, vdupq_n_s32(-2 * ib)), vdupq_n_u32(3));
    return vsubq_s32(vreinterpretq_s32_u32(vorrq_u32(lo4, vshlq_n_u32(hi2, 4))), vdupq_n_s32(32));
}

SIMD_ALWAYS_INLINE void xs_tile(const uint8_t *base, size_t rb, const cpu_operand *x, size_t r0, size_t nx,
                                float32x4_t acc[Q_TILE_X]) {
    const size_t nb = x->n / QK_K;
    for (size_t r = 0; r < nx; r++) acc[r] = vdupq_n_f32(0.0f);
    for (size_t b = 0; b < nb; b++) {
        const uint8_t *blk = base + b * sizeof(block_iq4_xs);
        uint16_t dw[Q_ROWS];
        uint32x4_t low, high;
        xs_heads(blk, rb, dw, &low, &high);
        int32x4_t isum[Q_TILE_X];
        for (size_t r = 0; r < nx; r++) isum[r] = vdupq_n_s32(0);
        for (int ib = 0; ib < XS_SUBS; ib++) {
            const size_t off = offsetof(block_iq4_xs, qs) + (size_t)ib * 16;
            int8x16_t w0[Q_ROWS], w1[Q_ROWS];
#pragma GCC unroll 4
            for (int i = 0; i < Q_ROWS; i++) load_weight_block(blk + i * rb + off, Q_IQ4_NL, &w0[i], &w1[i]);
            const int32x4_t factors = xs_factors(low, high, ib);
#pragma GCC unroll 4
            for (size_t r = 0; r < nx; r++) {
                const int8_t *xq = x->qs + (r0 + r) * x->n + b * QK_K + (size_t)ib * 32;
                const int8x16_t x0 = vld1q_s8(xq), x1 = vld1q_s8(xq + 16);
                int32x4_t v[Q_ROWS];
#pragma GCC unroll 4
                for (int i = 0; i < Q_ROWS; i++) v[i] = dot_block(w0[i], w1[i], x0, x1);
                isum[r] = vmlaq_s32(isum[r], block_sums(v), factors);
            }
        }
        const float32x4_t d_w = f16x4_to_f32(vld1_u16(dw));
        for (size_t r = 0; r < nx; r++) acc[r] = fold_block(acc[r], isum[r], d_w, x->d[(r0 + r) * nb + b]);
    }
}

SIMD_ALWAYS_INLINE void xs_rows(const uint8_t *base, size_t rb, size_t l0, size_t nl, size_t j, const cpu_operand *x,
                                size_t n_rows, float *out, size_t ldo) {
    for (size_t r0 = 0; r0 < n_rows; r0 += Q_TILE_X) {
        float32x4_t acc[Q_TILE_X];
        const size_t nx = LLMM_MIN((size_t)Q_TILE_X, n_rows - r0);
        if (nx == Q_TILE_X) xs_tile(base, rb, x, r0, Q_TILE_X, acc);
        else if (nx == 1) xs_tile(base, rb, x, r0, 1, acc);
        else xs_tile(base, rb, x, r0, nx, acc);
        for (size_t r = 0; r < nx; r++) store_lanes(out + (r0 + r) * ldo + j, acc[r], l0, nl);
    }
}

static void gemm_iq4_xs(const llmm_tensor *w, size_t j0, size_t j1, const cpu_operand *x, size_t n_rows, float *out,
                        size_t ldo) {
#define XS_ROWS_CALL(base, rb, next, l0, nl, j) xs_rows(base, rb, l0, nl, j, x, n_rows, out, ldo)
    GEMM_WALK_TILES(w, j0, j1, Q_ROWS, XS_ROWS_CALL);
#undef XS_ROWS_CALL
}

#endif
