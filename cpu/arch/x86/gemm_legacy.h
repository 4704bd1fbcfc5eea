/* Q5_0, Q4_1 and Q5_1 weights times Q8_0 (Q5_0) or Q8_1 (Q4_1, Q5_1) operand rows, for the x86
 * kernel files. Included after gemm_int8.h, whose tiles, prefetch, scale gathering and
 * pair sums it shares: these are Q4_0's tiles with a 5th bit (Q5_0, Q5_1) or a per-block min
 * (Q4_1, Q5_1). The including file defines first:
 *   __m256i dot_u5_pair(__m256i lo, __m256i hi, __m256i x_lo, __m256i x_hi)
 *                      as dot_q4_0_pair, for unsigned quants up to 31, sums not scaled
 *   void add_bit4_pair(__m256i *lo, __m256i *hi, uint32_t ha, uint32_t hb)
 *                      adds 16 to byte k of lo where bit k of [ha's low 16 | hb's low 16]
 *                      is set, and to byte k of hi for [ha's high 16 | hb's high 16]
 * and gets gemm_q5_0, gemm_q4_1, gemm_q5_1 (cpu_gemm_fn).
 *
 * Numerics, as the scalar dots in lib/format/quant_legacy.c, lane i = weight row i, blocks in order,
 * no FMA, so bit for bit the type's vec_dot:
 *   Q5_0: sum += (float)(q . x - 16 sum(x)) * (d * d_x)   (q unsigned, 0..31)
 *   Q4_1, Q5_1: sum += (float)(q . x) * (d * d_x) + m * s_x   (s_x: the operand's d sum(x)) */
#ifndef LLMM_GEMM_LEGACY_X86_H
#define LLMM_GEMM_LEGACY_X86_H

#ifndef LLMM_GEMM_INT8_X86_H
#error "include gemm_int8.h before gemm_legacy.h"
#endif

#include "kernels/block_kinds.h"

/* The quants of one block of rows a and b as prep_q4_0_pair lays them out ([a | b], weights
 * 0-15 in lo, 16-31 in hi), with the 5th bits (bit j of the little-endian qh word, weight j)
 * added as 16. */
SIMD_ALWAYS_INLINE void lq_prep_pair(lq_kind kind, const uint8_t *a, const uint8_t *b, __m256i *lo, __m256i *hi) {
    const size_t qs = lq_qs_offset(kind);
    const __m256i q =
        _mm256_loadu2_m128i((const __m128i *)(const void *)(b + qs), (const __m128i *)(const void *)(a + qs));
    const __m256i low4 = _mm256_set1_epi8(0x0f);
    *lo = _mm256_and_si256(q, low4);
    *hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), low4);
    if (kind == LQ_Q4_1) return;
    uint32_t ha, hb;
    memcpy(&ha, a + lq_qh_offset(kind), sizeof ha);
    memcpy(&hb, b + lq_qh_offset(kind), sizeof hb);
    add_bit4_pair(lo, hi, ha, hb);
}

/* Blocks [b0, b0 + n) of one tile (weight rows base + i * rb, operand rows r0 .. r0+nx-1);
 * dws and mws hold the rows' d and m of those blocks. */
SIMD_ALWAYS_INLINE void lq_tile_seg(lq_kind kind, const uint8_t *base, size_t rb, const uint8_t *next, size_t nb,
                                    size_t b0, size_t n, const uint16_t dws[SCALE_SEG][Q_ROWS],
                                    const uint16_t mws[SCALE_SEG][Q_ROWS], const cpu_operand *x, size_t r0, size_t nx,
                                    __m256 *acc) {
    const size_t bb = lq_block_bytes(kind);
    for (size_t b = b0; b < b0 + n; b++) {
        if (next && r0 == 0) prefetch_next(next, b, bb);
        __m256i lo[4], hi[4];
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++)
            lq_prep_pair(kind, base + k * rb + b * bb, base + (k + 4) * rb + b * bb, &lo[k], &hi[k]);
        const __m256 d_w = _mm256_cvtph_ps(load_128(dws[b - b0]));
        const __m256 m_w = kind == LQ_Q5_0 ? _mm256_setzero_ps() : _mm256_cvtph_ps(load_128(mws[b - b0]));
#pragma GCC unroll 4
        for (size_t r = 0; r < nx; r++) {
            const size_t xb = (r0 + r) * nb + b;
            const int8_t *xq = x->qs + xb * QK8_0;
            const __m256i x_lo = _mm256_broadcastsi128_si256(load_128(xq));
            const __m256i x_hi = _mm256_broadcastsi128_si256(load_128(xq + 16));
            __m256i v[4];
#pragma GCC unroll 4
            for (int k = 0; k < 4; k++) v[k] = dot_u5_pair(lo[k], hi[k], x_lo, x_hi);
            const __m256i sums = pair_sums(v, 0);
            if (kind == LQ_Q5_0) {
                acc[r] = fold_block(acc[r], sums, 16 * x->sum[xb], d_w, x->d[xb]);
            } else {
                const __m256 dot =
                    _mm256_mul_ps(_mm256_cvtepi32_ps(sums), _mm256_mul_ps(d_w, _mm256_set1_ps(x->d[xb])));
                acc[r] = _mm256_add_ps(acc[r], _mm256_add_ps(dot, _mm256_mul_ps(m_w, _mm256_set1_ps(x->s[xb]))));
            }
        }
    }
}

SIMD_ALWAYS_INLINE void lq_tile(lq_kind kind, const uint8_t *base, size_t rb, const uint8_t *next, size_t nb,
                                uint16_t dws[SCALE_SEG][Q_ROWS], uint16_t mws[SCALE_SEG][Q_ROWS], int have_scales,
                                const cpu_operand *x, size_t r0, size_t nx, __m256 *acc) {
    const size_t bb = lq_block_bytes(kind);
    for (size_t r = 0; r < nx; r++) acc[r] = _mm256_setzero_ps();
    for (size_t b0 = 0; b0 < nb; b0 += SCALE_SEG) {
        const size_t n = LLMM_MIN((size_t)SCALE_SEG, nb - b0);
        if (!have_scales) {
            gather_scales(base, rb, bb, b0, n, dws);
            if (kind != LQ_Q5_0) gather_scales(base + offsetof(block_q4_1, m), rb, bb, b0, n, mws);
        }
        lq_tile_seg(kind, base, rb, next, nb, b0, n, (const uint16_t(*)[Q_ROWS])dws, (const uint16_t(*)[Q_ROWS])mws,
                    x, r0, nx, acc);
    }
}

/* As q_rows (gemm_int8.h), with the mins gathered along with the scales. */
SIMD_ALWAYS_INLINE void lq_rows(lq_kind kind, const uint8_t *base, size_t rb, const uint8_t *next, size_t l0,
                                size_t nl, size_t j, const cpu_operand *x, size_t n_rows, float *out, size_t ldo) {
    const size_t nb = x->n / QK8_0, bb = lq_block_bytes(kind);
    const int one_seg = nb <= SCALE_SEG;
    uint16_t dws[SCALE_SEG][Q_ROWS], mws[SCALE_SEG][Q_ROWS];
    if (one_seg) {
        gather_scales(base, rb, bb, 0, nb, dws);
        if (kind != LQ_Q5_0) gather_scales(base + offsetof(block_q4_1, m), rb, bb, 0, nb, mws);
    }
    if (n_rows > Q_TILE_X && n_rows <= Q_BATCH_X) { /* a small batch: as in q_rows */
        __m256 acc[Q_BATCH_X];
        lq_tile(kind, base, rb, next, nb, dws, mws, one_seg, x, 0, n_rows, acc);
        for (size_t r = 0; r < n_rows; r++) store_lanes(out + r * ldo + j, acc[r], l0, nl);
        return;
    }
    if (Q_BATCH_X > Q_TILE_X && n_rows > Q_TILE_X) { /* a prompt: batches, as in q_rows */
        for (size_t r0 = 0, nx; r0 < n_rows; r0 += nx) {
            nx = q_batch_rows(n_rows, r0);
            __m256 acc[Q_BATCH_X];
            lq_tile(kind, base, rb, next, nb, dws, mws, one_seg, x, r0, nx, acc);
            for (size_t r = 0; r < nx; r++) store_lanes(out + (r0 + r) * ldo + j, acc[r], l0, nl);
        }
        return;
    }
    for (size_t r0 = 0; r0 < n_rows; r0 += Q_TILE_X) {
        __m256 acc[Q_TILE_X];
        const size_t nx = LLMM_MIN((size_t)Q_TILE_X, n_rows - r0);
        if (nx == Q_TILE_X) lq_tile(kind, base, rb, next, nb, dws, mws, one_seg, x, r0, Q_TILE_X, acc);
        else if (nx == 1) lq_tile(kind, base, rb, next, nb, dws, mws, one_seg, x, r0, 1, acc);
        else lq_tile(kind, base, rb, next, nb, dws, mws, one_seg, x, r0, nx, acc);
        for (size_t r = 0; r < nx; r++) store_lanes(out + (r0 + r) * ldo + j, acc[r], l0, nl);
    }
}

/* Tiles of 8 rows (kernels/gemm_tiles.h). */
SIMD_ALWAYS_INLINE void gemm_lq(lq_kind kind, const llmm_tensor *w, size_t j0, size_t j1, const cpu_operand *x,
                                size_t n_rows, float *out, size_t ldo) {
#define LQ_ROWS_CALL(base, rb, next, l0, nl, j) lq_rows(kind, base, rb, next, l0, nl, j, x, n_rows, out, ldo)
    GEMM_WALK_TILES(w, j0, j1, Q_ROWS, LQ_ROWS_CALL);
#undef LQ_ROWS_CALL
}

GEMM_FN_FOR_KIND(gemm_q5_0, gemm_lq, LQ_Q5_0)
GEMM_FN_FOR_KIND(gemm_q4_1, gemm_lq, LQ_Q4_1)
GEMM_FN_FOR_KIND(gemm_q5_1, gemm_lq, LQ_Q5_1)

#endif
