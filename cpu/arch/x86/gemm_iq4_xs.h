/* IQ4_XS weights times Q8_K operand rows, for the x86 kernel files: included after
 * gemm_int8.h, whose 8-row tiles, IQ4_NL codebook lookup (prep_iq4_nl_pair), pair sums
 * and next-tile prefetch it reuses, and gets gemm_iq4_xs (cpu_gemm_fn).
 *
 * A super-block is eight IQ4_NL-like sub-blocks of 32 whose scales are small integers (ls -
 * 32) under one f16 d. Per sub-block, the 8 rows' integer sums against the operand land in
 * one vector (lane i = weight row i) as IQ4_NL's do; they are multiplied by the rows' factors
 * and summed over the super-block in int32 (exact: |sum| <= 8 x 32 x 32 x 127 x 127 < 2^31),
 * then scaled once, sum += (float)isum * (d_w * d_x) lane by lane in block order without FMA:
 * bit-identical to the type's vec_dot. The factors and d of a tile's super-block are
 * decoded from the 8 rows' block heads first (8 bytes per row and 256 weights). */
#ifndef LLMM_GEMM_IQ4_XS_X86_H
#define LLMM_GEMM_IQ4_XS_X86_H

#ifndef LLMM_GEMM_INT8_X86_H
#error "include gemm_int8.h before gemm_iq4_xs.h"
#endif

#define XS_SUBS (QK_K / 32)

/* The scale words of super-block blk of the 8 rows blk + i * rb, by row lane: scales_l (sub-
 * block ib's low 4 bits at bit 4ib) and scales_h (its top 2 bits at bit 2ib); d by row. */
SIMD_ALWAYS_INLINE void xs_heads(const uint8_t *blk, size_t rb, uint16_t dw[Q_ROWS], __m256i *low, __m256i *high) {
    int32_t l[Q_ROWS], h[Q_ROWS];
    for (int i = 0; i < Q_ROWS; i++) {
        const uint8_t *p = blk + i * rb;
        dw[i] = load_u16(p);
        h[i] = load_u16(p + offsetof(block_iq4_xs, scales_h));
        memcpy(&l[i], p + offsetof(block_iq4_xs, scales_l), sizeof l[i]);
    }
    *low = _mm256_loadu_si256((const __m256i *)(const void *)l);
    *high = _mm256_loadu_si256((const __m256i *)(const void *)h);
}

/* Sub-block ib's factors ls - 32 of the 8 rows, from xs_heads' words (llmm_iq4_xs_scale's
 * decoding, 8 rows at once: decoding them one by one cost more than the dots). */
SIMD_ALWAYS_INLINE __m256i xs_factors(__m256i low, __m256i high, int ib) {
    const __m256i lo4 = _mm256_and_si256(_mm256_srli_epi32(low, 4 * ib), _mm256_set1_epi32(15));
    const __m256i hi2 = _mm256_and_si256(_mm256_srli_epi32(high, 2 * ib), _mm256_set1_epi32(3));
    return _mm256_sub_epi32(_mm256_or_si256(lo4, _mm256_slli_epi32(hi2, 4)), _mm256_set1_epi32(32));
}

/* All super-blocks of the tile's 8 rows against operand rows r0 .. r0+nx-1 (nx a constant at
 * every call site). */
SIMD_ALWAYS_INLINE void xs_tile(const uint8_t *base, size_t rb, const uint8_t *next, const cpu_operand *x,
                                size_t r0, size_t nx, __m256 acc[Q_TILE_X]) {
    const size_t nb = x->n / QK_K, ng = x->n / 16;
    for (size_t r = 0; r < nx; r++) acc[r] = _mm256_setzero_ps();
    for (size_t b = 0; b < nb; b++) {
        const uint8_t *blk = base + b * sizeof(block_iq4_xs);
        if (next && r0 == 0) prefetch_next(next, b, sizeof(block_iq4_xs));
        uint16_t dw[Q_ROWS];
        __m256i low, high;
        xs_heads(blk, rb, dw, &low, &high);
        __m256i isum[Q_TILE_X];
        for (size_t r = 0; r < nx; r++) isum[r] = _mm256_setzero_si256();
#pragma GCC unroll 8
        for (int ib = 0; ib < XS_SUBS; ib++) {
            const size_t off = offsetof(block_iq4_xs, qs) + (size_t)ib * 16;
            __m256i lo[4], hi[4];
#pragma GCC unroll 4
            for (int k = 0; k < 4; k++) prep_iq4_nl_pair(blk + k * rb + off, blk + (k + 4) * rb + off, &lo[k], &hi[k]);
            const __m256i factors = xs_factors(low, high, ib);
#pragma GCC unroll 4
            for (size_t r = 0; r < nx; r++) {
                const int8_t *xq = x->qs + (r0 + r) * x->n + b * QK_K + (size_t)ib * 32;
                const __m256i x_lo = _mm256_broadcastsi128_si256(load_128(xq));
                const __m256i x_hi = _mm256_broadcastsi128_si256(load_128(xq + 16));
                __m256i v[4];
#pragma GCC unroll 4
                for (int k = 0; k < 4; k++) v[k] = dot_iq4_nl_pair(lo[k], hi[k], x_lo, x_hi);
                __m256i sums = pair_sums(v, 0);
                if (Q8_0_OFFSET) {
                    /* the operand's sum over these 32 quants: two of its groups of 16 */
                    const int16_t *bs = x->bsums + (r0 + r) * ng + b * 16 + (size_t)ib * 2;
                    sums = _mm256_sub_epi32(sums, _mm256_set1_epi32(Q8_0_OFFSET * (bs[0] + bs[1])));
                }
                isum[r] = _mm256_add_epi32(isum[r], _mm256_mullo_epi32(sums, factors));
            }
        }
        const __m256 d_w = _mm256_cvtph_ps(load_128(dw));
        for (size_t r = 0; r < nx; r++) acc[r] = fold_block(acc[r], isum[r], 0, d_w, x->d[(r0 + r) * nb + b]);
    }
}

SIMD_ALWAYS_INLINE void xs_rows(const uint8_t *base, size_t rb, const uint8_t *next, size_t l0, size_t nl, size_t j,
                                const cpu_operand *x, size_t n_rows, float *out, size_t ldo) {
    for (size_t r0 = 0; r0 < n_rows; r0 += Q_TILE_X) {
        __m256 acc[Q_TILE_X];
        const size_t nx = LLMM_MIN((size_t)Q_TILE_X, n_rows - r0);
        if (nx == Q_TILE_X) xs_tile(base, rb, next, x, r0, Q_TILE_X, acc);
        else if (nx == 1) xs_tile(base, rb, next, x, r0, 1, acc);
        else xs_tile(base, rb, next, x, r0, nx, acc);
        for (size_t r = 0; r < nx; r++) store_lanes(out + (r0 + r) * ldo + j, acc[r], l0, nl);
    }
}

static void gemm_iq4_xs(const llmm_tensor *w, size_t j0, size_t j1, const cpu_operand *x, size_t n_rows, float *out,
                        size_t ldo) {
#define XS_ROWS_CALL(base, rb, next, l0, nl, j) xs_rows(base, rb, next, l0, nl, j, x, n_rows, out, ldo)
    GEMM_WALK_TILES(w, j0, j1, Q_ROWS, XS_ROWS_CALL);
#undef XS_ROWS_CALL
}

#endif
