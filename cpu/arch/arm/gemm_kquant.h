/* K-quant weights (Q2_K .. Q6_K) times Q8_K operand rows, for the aarch64 kernel files.
 * Included after gemm_int8.h, whose tile shape (Q_ROWS) and lane gathering (block_sums)
 * it shares. The including file defines first:
 *   int32x4_t dot16_acc(int32x4_t acc, int8x16_t w, int8x16_t x)
 *                      acc plus partial sums of the 16 signed products w . x (the four lanes
 *                      added up give the dot)
 *   KQ_TILE_X          operand rows per tile
 * and gets gemm_q2_K, gemm_q3_K, gemm_q4_K, gemm_q5_K, gemm_q6_K (cpu_gemm_fn).
 *
 * Numerics: the scalar kq_block_dot (lib/format/quant_k.c) computes per super-block two integer sums,
 * sum_q = sum_s sc_s (q . x)_s and sum_m = sum_s m_s bsum_s, then
 * sum += x_d * (d * sum_q - dmin * sum_m). The integer sums here are the same integers, added in
 * another order (exact: |sum_q| < 2^28); the float part runs lane by lane (lane i = weight row
 * i) in block order, in the scalar's operation order, without FMA: every output is
 * bit-identical to the type's vec_dot.
 *
 * Layout of the work: a tile is 4 weight rows times up to KQ_TILE_X operand rows. Per super-
 * block, each weight row is decoded once into 256 signed quants (16 vectors in weight order,
 * the symmetric types' offsets 4 and 32 already subtracted: both multiplies are signed here,
 * so no correction through the group sums is needed as on x86) and its scales, then dotted
 * with every operand row of the tile. A super-block does not fit the registers for four rows
 * at once, so rows go one at a time and their lane vectors are gathered by block_sums once all
 * four are done. Products stay within int16 for the base table's pairwise widening: |q| <= 32,
 * |x| <= 128, 2 x 32 x 128 = 8192. */
#ifndef LLMM_GEMM_KQUANT_NEON_H
#define LLMM_GEMM_KQUANT_NEON_H

#ifndef LLMM_GEMM_INT8_NEON_H
#error "include gemm_int8.h before gemm_kquant.h"
#endif

#include "kernels/block_kinds.h"

#define KQ_VECS (QK_K / 16) /* 16-quant vectors per super-block */

/* 16-quant vectors per sub-block: Q4_K and Q5_K have 8 sub-blocks of 32, the others 16 of 16 */
SIMD_ALWAYS_INLINE int kq_sub_vecs(kq_kind k) { return k == KQ_Q4 || k == KQ_Q5 ? 2 : 1; }

/* One weight row's super-block, decoded. */
typedef struct kq_dec {
    int8x16_t q[KQ_VECS]; /* quants 16v .. 16v+15 in q[v], offsets removed */
    int32_t sc[KQ_VECS];  /* sub-block scales (the first 8 only for Q4_K/Q5_K) */
    int16x8_t m[2];       /* mins per group of 16 (Q4_K/Q5_K: each sub-block's min twice),
                           * matching the operand's group sums */
} kq_dec;

/* Bits set in byte k of v where bit `bit` of byte k of h is set. */
SIMD_ALWAYS_INLINE uint8x16_t kq_bit(uint8x16_t h, int bit, uint8_t v) {
    return vandq_u8(vtstq_u8(h, vdupq_n_u8((uint8_t)(1u << bit))), vdupq_n_u8(v));
}

/* Q4_K and Q5_K: chunk c of 64 weights is the low nibbles (weights 64c .. 64c+31) then the high
 * nibbles of qs[32c .. 32c+31]; Q5_K's 5th bit of weight i is bit i/32 of qh[i%32]. The 6-bit
 * scales and mins as lib/format/quant_k.c's k4_scale_min. */
SIMD_ALWAYS_INLINE void kq_decode_k4(const uint8_t *blk, int q5, kq_dec *w) {
    const uint8_t *sc = blk + offsetof(block_q4_K, scales);
    int16_t mins[KQ_VECS];
    for (int j = 0; j < 8; j++) {
        const int lo = j < 4;
        w->sc[j] = lo ? sc[j] & 63 : (sc[j + 4] & 15) | (sc[j - 4] >> 6) << 4;
        mins[2 * j] = mins[2 * j + 1] = (int16_t)(lo ? sc[j + 4] & 63 : (sc[j + 4] >> 4) | (sc[j] >> 6) << 4);
    }
    w->m[0] = vld1q_s16(mins);
    w->m[1] = vld1q_s16(mins + 8);
    const uint8_t *qs = blk + (q5 ? offsetof(block_q5_K, qs) : offsetof(block_q4_K, qs));
    const uint8x16_t low4 = vdupq_n_u8(0x0f);
    uint8x16_t h[2] = {vdupq_n_u8(0), vdupq_n_u8(0)};
    if (q5) {
        h[0] = vld1q_u8(blk + offsetof(block_q5_K, qh));
        h[1] = vld1q_u8(blk + offsetof(block_q5_K, qh) + 16);
    }
#pragma GCC unroll 4
    for (int c = 0; c < 4; c++) {
        for (int p = 0; p < 2; p++) {
            const uint8x16_t raw = vld1q_u8(qs + 32 * c + 16 * p);
            uint8x16_t lo = vandq_u8(raw, low4), hi = vshrq_n_u8(raw, 4);
            if (q5) {
                lo = vorrq_u8(lo, kq_bit(h[p], 2 * c, 16));
                hi = vorrq_u8(hi, kq_bit(h[p], 2 * c + 1, 16));
            }
            w->q[4 * c + p] = vreinterpretq_s8_u8(lo);
            w->q[4 * c + 2 + p] = vreinterpretq_s8_u8(hi);
        }
    }
}

/* Q6_K: in half h, weights 128h + 16v (v < 8) take their low 4 bits from the low (v < 4) or
 * high nibbles of ql[64h + 16(v%4) ..], their top 2 bits from bits 2(v/2) of
 * qh[32h + 16(v%2) ..]. */
SIMD_ALWAYS_INLINE void kq_decode_q6(const uint8_t *blk, kq_dec *w) {
    const uint8_t *ql = blk + offsetof(block_q6_K, ql), *qh = blk + offsetof(block_q6_K, qh);
    const int8_t *sc = (const int8_t *)(blk + offsetof(block_q6_K, scales));
    for (int j = 0; j < KQ_VECS; j++) w->sc[j] = sc[j];
    const uint8x16_t low4 = vdupq_n_u8(0x0f), top2 = vdupq_n_u8(0x30);
    const int8x16_t offset = vdupq_n_s8(32);
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
        uint8x16_t L[4], H[2];
        for (int k = 0; k < 4; k++) L[k] = vld1q_u8(ql + 64 * h + 16 * k);
        for (int p = 0; p < 2; p++) H[p] = vld1q_u8(qh + 32 * h + 16 * p);
#pragma GCC unroll 8
        for (int v = 0; v < 8; v++) {
            const uint8x16_t lo = v < 4 ? vandq_u8(L[v], low4) : vshrq_n_u8(L[v - 4], 4);
            /* bits 2(v/2), 2(v/2)+1 to bits 4, 5: a left shift by 4 - 2(v/2), negative = right */
            const uint8x16_t hi = vandq_u8(vshlq_u8(H[v % 2], vdupq_n_s8((int8_t)(4 - 2 * (v / 2)))), top2);
            w->q[8 * h + v] = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(lo, hi)), offset);
        }
    }
}

/* Q2_K and Q3_K: weight 16v (v < 16) takes its 2-bit field from bits 2((v%8)/2) of
 * qs[32(v/8) + 16(v%2) ..]; Q3_K's third bit is bit v/2 of hmask[16(v%2) ..] and its quants are
 * stored with +4. */
SIMD_ALWAYS_INLINE void kq_decode_2bit(const uint8_t *qs, const uint8_t *hmask, kq_dec *w) {
    const uint8x16_t two = vdupq_n_u8(3);
    uint8x16_t hm[2] = {vdupq_n_u8(0), vdupq_n_u8(0)};
    if (hmask) {
        hm[0] = vld1q_u8(hmask);
        hm[1] = vld1q_u8(hmask + 16);
    }
#pragma GCC unroll 16
    for (int v = 0; v < KQ_VECS; v++) {
        const uint8x16_t raw = vld1q_u8(qs + 32 * (v / 8) + 16 * (v % 2));
        uint8x16_t q = vandq_u8(vshlq_u8(raw, vdupq_n_s8((int8_t)(-2 * ((v % 8) / 2)))), two);
        if (hmask) q = vorrq_u8(q, kq_bit(hm[v % 2], v / 2, 4));
        w->q[v] = hmask ? vsubq_s8(vreinterpretq_s8_u8(q), vdupq_n_s8(4)) : vreinterpretq_s8_u8(q);
    }
}

/* Q2_K: scales[j] holds sub-block j's scale (low nibble) and min (high nibble). */
SIMD_ALWAYS_INLINE void kq_decode_q2(const uint8_t *blk, kq_dec *w) {
    const uint8x16_t s = vld1q_u8(blk + offsetof(block_q2_K, scales));
    uint8_t sc[KQ_VECS];
    vst1q_u8(sc, vandq_u8(s, vdupq_n_u8(0x0f)));
    for (int j = 0; j < KQ_VECS; j++) w->sc[j] = sc[j];
    const uint8x16_t m = vshrq_n_u8(s, 4);
    w->m[0] = vreinterpretq_s16_u16(vmovl_u8(vget_low_u8(m)));
    w->m[1] = vreinterpretq_s16_u16(vmovl_high_u8(m));
    kq_decode_2bit(blk + offsetof(block_q2_K, qs), NULL, w);
}

/* Q3_K: 6-bit scales stored with +32, as lib/format/quant_k.c's q3_scale. */
SIMD_ALWAYS_INLINE void kq_decode_q3(const uint8_t *blk, kq_dec *w) {
    const uint8_t *sc = blk + offsetof(block_q3_K, scales);
    for (int j = 0; j < KQ_VECS; j++) {
        const int lo = j < 8 ? sc[j] & 15 : sc[j - 8] >> 4;
        w->sc[j] = (lo | ((sc[8 + j % 4] >> (2 * (j / 4))) & 3) << 4) - 32;
    }
    kq_decode_2bit(blk + offsetof(block_q3_K, qs), blk + offsetof(block_q3_K, hmask), w);
}

SIMD_ALWAYS_INLINE void kq_decode(kq_kind kind, const uint8_t *blk, kq_dec *w) {
    switch (kind) {
    case KQ_Q2: kq_decode_q2(blk, w); break;
    case KQ_Q3: kq_decode_q3(blk, w); break;
    case KQ_Q4: kq_decode_k4(blk, 0, w); break;
    case KQ_Q5: kq_decode_k4(blk, 1, w); break;
    case KQ_Q6: kq_decode_q6(blk, w); break;
    }
}

/* Lanes adding up to sum_s sc_s (q . x)_s for one decoded row and the operand quants xq. */
SIMD_ALWAYS_INLINE int32x4_t kq_dot_q(kq_kind kind, const kq_dec *w, const int8_t *xq) {
    const int per = kq_sub_vecs(kind);
    int32x4_t acc = vdupq_n_s32(0);
#pragma GCC unroll 16
    for (int s = 0; s < KQ_VECS / per; s++) {
        int32x4_t d = dot16_acc(vdupq_n_s32(0), w->q[per * s], vld1q_s8(xq + 16 * per * s));
        if (per == 2) d = dot16_acc(d, w->q[per * s + 1], vld1q_s8(xq + 16 * per * s + 16));
        acc = vmlaq_n_s32(acc, d, w->sc[s]);
    }
    return acc;
}

/* Lanes adding up to sum_m = sum_g m_g bsum_g (|m_g bsum_g| <= 63 x 2048). */
SIMD_ALWAYS_INLINE int32x4_t kq_dot_m(const kq_dec *w, const int16_t *bs) {
    const int16x8_t b0 = vld1q_s16(bs), b1 = vld1q_s16(bs + 8);
    int32x4_t v = vmull_s16(vget_low_s16(w->m[0]), vget_low_s16(b0));
    v = vmlal_high_s16(v, w->m[0], b0);
    v = vmlal_s16(v, vget_low_s16(w->m[1]), vget_low_s16(b1));
    return vmlal_high_s16(v, w->m[1], b1);
}

/* The four rows' f16 field at off of a super-block, as floats (lane i = row i). */
SIMD_ALWAYS_INLINE float32x4_t kq_row_halves(const uint8_t *blk0, size_t rb, size_t off) {
    const uint16_t h[Q_ROWS] = {load_u16(blk0 + off), load_u16(blk0 + rb + off), load_u16(blk0 + 2 * rb + off),
                                load_u16(blk0 + 3 * rb + off)};
    return f16x4_to_f32(vld1_u16(h));
}

/* Operand rows r0 .. r0+nx-1 against the 4 weight rows base + i * rb; nx is a constant at
 * every call site. */
SIMD_ALWAYS_INLINE void kq_tile(kq_kind kind, const uint8_t *base, size_t rb, const cpu_operand *x, size_t r0,
                                size_t nx, float32x4_t acc[KQ_TILE_X]) {
    const size_t nb = x->n / QK_K, ng = x->n / 16, bb = kq_block_bytes(kind);
    for (size_t r = 0; r < nx; r++) acc[r] = vdupq_n_f32(0.0f);
    for (size_t b = 0; b < nb; b++) {
        const uint8_t *blk0 = base + b * bb;
        int32x4_t vq[KQ_TILE_X][Q_ROWS], vm[KQ_TILE_X][Q_ROWS];
#pragma GCC unroll 1
        for (int i = 0; i < Q_ROWS; i++) {
            kq_dec w;
            kq_decode(kind, blk0 + i * rb, &w);
            for (size_t r = 0; r < nx; r++) {
                vq[r][i] = kq_dot_q(kind, &w, x->qs + (r0 + r) * x->n + b * QK_K);
                if (kq_has_min(kind)) vm[r][i] = kq_dot_m(&w, x->bsums + (r0 + r) * ng + b * KQ_VECS);
            }
        }
        const float32x4_t d_w = kq_row_halves(blk0, rb, kq_d_offset(kind));
        const float32x4_t dmin_w = kq_has_min(kind) ? kq_row_halves(blk0, rb, kq_dmin_offset(kind)) : vdupq_n_f32(0);
        for (size_t r = 0; r < nx; r++) {
            /* x_d * (d * sum_q - dmin * sum_m): the scalar's order (the symmetric types'
             * dmin * sum_m is +0, which leaves every value, -0 included, unchanged) */
            float32x4_t f = vmulq_f32(d_w, vcvtq_f32_s32(block_sums(vq[r])));
            if (kq_has_min(kind)) f = vsubq_f32(f, vmulq_f32(dmin_w, vcvtq_f32_s32(block_sums(vm[r]))));
            acc[r] = vaddq_f32(acc[r], vmulq_n_f32(f, x->d[(r0 + r) * nb + b]));
        }
    }
}

/* All operand rows against the 4 weight rows base + i * rb; lanes [l0, l0 + nl) go to out
 * columns j ... */
SIMD_ALWAYS_INLINE void kq_rows(kq_kind kind, const uint8_t *base, size_t rb, size_t l0, size_t nl, size_t j,
                                const cpu_operand *x, size_t n_rows, float *out, size_t ldo) {
    for (size_t r0 = 0; r0 < n_rows; r0 += KQ_TILE_X) {
        float32x4_t acc[KQ_TILE_X];
        const size_t nx = LLMM_MIN((size_t)KQ_TILE_X, n_rows - r0);
        if (nx == KQ_TILE_X) kq_tile(kind, base, rb, x, r0, KQ_TILE_X, acc);
        else if (nx == 1) kq_tile(kind, base, rb, x, r0, 1, acc);
        else kq_tile(kind, base, rb, x, r0, nx, acc);
        for (size_t r = 0; r < nx; r++) store_lanes(out + (r0 + r) * ldo + j, acc[r], l0, nl);
    }
}

/* Tiles of 4 rows (kernels/gemm_tiles.h). */
SIMD_ALWAYS_INLINE void gemm_kq(kq_kind kind, const llmm_tensor *w, size_t j0, size_t j1, const cpu_operand *x,
                                size_t n_rows, float *out, size_t ldo) {
#define KQ_ROWS_CALL(base, rb, next, l0, nl, j) kq_rows(kind, base, rb, l0, nl, j, x, n_rows, out, ldo)
    GEMM_WALK_TILES(w, j0, j1, Q_ROWS, KQ_ROWS_CALL);
#undef KQ_ROWS_CALL
}

GEMM_FN_FOR_KIND(gemm_q2_K, gemm_kq, KQ_Q2)
GEMM_FN_FOR_KIND(gemm_q3_K, gemm_kq, KQ_Q3)
GEMM_FN_FOR_KIND(gemm_q4_K, gemm_kq, KQ_Q4)
GEMM_FN_FOR_KIND(gemm_q5_K, gemm_kq, KQ_Q5)
GEMM_FN_FOR_KIND(gemm_q6_K, gemm_kq, KQ_Q6)

#endif
