/* IQ4_XS weights times Q8_K operand rows on 512-bit vectors, 16 weight rows per tile, one row
 * per int32 lane, for two operand rows and more (prefill): for avx512.c, included
 * after gemm_rows16.h (whose transposition, lane order, IQ4_NL codebook lookup and
 * broadcast dot it uses); gives gemm_iq4_xs_rows16 (cpu_gemm_fn). One operand row keeps the
 * 8-row tiles of gemm_iq4_xs.h, but for packed copies (packed_tiles.h), which
 * gemm_iq4_xs_packed16 reads for any number of rows.
 *
 * Per super-block the first 16 bytes of each row (d, scales_h, scales_l, 8 quant bytes) are
 * transposed like the quants, so every lane holds its row's scale words, and each sub-block's
 * factor ls - 32 is decoded lane by lane. A sub-block is an IQ4_NL block: its 16 quant bytes
 * are transposed, looked up in the codebook (+ 128, as Q8_0's quants) and dotted by vpdpbusd
 * against the operand's bytes broadcast, starting from -128 times the operand's sum over those
 * 32 quants (two of its group sums). Numerics as gemm_iq4_xs.h: per lane an exact int32
 * sum over the super-block, then sum += (float)isum * (d_w * d_x) without FMA, bit-identical
 * to the type's vec_dot. */
#ifndef LLMM_GEMM_IQ4_XS_ROWS16_AVX512_H
#define LLMM_GEMM_IQ4_XS_ROWS16_AVX512_H

#ifndef LLMM_GEMM_ROWS16_AVX512_H
#error "include gemm_rows16.h before gemm_iq4_xs_rows16.h"
#endif

/* Operand rows r0 .. r0+nx-1 against the 16 rows at base (nx a constant for full tiles), or
 * against a tile of a packed copy (packed: base its first group; packed_tiles.h). */
SIMD_ALWAYS_INLINE void xs16_tile(int packed, const uint8_t *base, size_t rb, const uint8_t *next,
                                  const cpu_operand *x, size_t r0, size_t nx, __m512 acc[Q_TILE_X]) {
    const size_t nb = x->n / QK_K, ng = x->n / 16, bb = sizeof(block_iq4_xs);
    const __m512i values =
        _mm512_xor_si512(_mm512_broadcast_i32x4(load_128(llmm__iq4_values)), _mm512_set1_epi8((char)0x80));
    const __m512i low4 = _mm512_set1_epi8(0x0f);
    for (size_t r = 0; r < nx; r++) acc[r] = _mm512_setzero_ps();
    for (size_t b = 0; b < nb; b++) {
        const uint8_t *blk = base + b * (packed ? R16_ROWS : 1) * bb;
        const uint8_t *pf = packed && next && r0 == 0 ? next + b * R16_ROWS * bb : NULL;
        if (next && r0 == 0 && !pf) rows16_prefetch(next, b, bb);
        /* head: lane words d | scales_h << 16, then scales_l */
        __m512i hd[4];
        rows16_piece(packed, blk, rb, 0, pf, hd);
        const __m512 d_w = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(hd[0]));
        const __m512i high = _mm512_srli_epi32(hd[0], 16), low = hd[1];
        __m512i isum[Q_TILE_X];
        for (size_t r = 0; r < nx; r++) isum[r] = _mm512_setzero_si512();
#pragma GCC unroll 1
        for (int ib = 0; ib < QK_K / 32; ib++) {
            const __m512i lo4 = _mm512_and_si512(_mm512_srli_epi32(low, (unsigned)(4 * ib)), _mm512_set1_epi32(15));
            const __m512i hi2 = _mm512_and_si512(_mm512_srli_epi32(high, (unsigned)(2 * ib)), _mm512_set1_epi32(3));
            const __m512i factors =
                _mm512_sub_epi32(_mm512_or_si512(lo4, _mm512_slli_epi32(hi2, 4)), _mm512_set1_epi32(32));
            __m512i d[4], w[8];
            rows16_piece(packed, blk, rb, offsetof(block_iq4_xs, qs) + 16 * (size_t)ib, pf, d);
#pragma GCC unroll 4
            for (int j = 0; j < 4; j++) {
                w[j] = _mm512_shuffle_epi8(values, _mm512_and_si512(d[j], low4));
                w[j + 4] = _mm512_shuffle_epi8(values, _mm512_and_si512(_mm512_srli_epi16(d[j], 4), low4));
            }
#pragma GCC unroll 8
            for (size_t r = 0; r < nx; r++) {
                const int16_t *bs = x->bsums + (r0 + r) * ng + b * (QK_K / 16) + 2 * ib;
                const __m512i s = rows16_dot(w, x->qs + (r0 + r) * x->n + b * QK_K + 32 * ib,
                                             _mm512_set1_epi32(-128 * (bs[0] + bs[1])));
                isum[r] = _mm512_add_epi32(isum[r], _mm512_mullo_epi32(s, factors));
            }
        }
#pragma GCC unroll 8
        for (size_t r = 0; r < nx; r++) {
            const __m512 scale = _mm512_mul_ps(d_w, _mm512_set1_ps(x->d[(r0 + r) * nb + b]));
            acc[r] = _mm512_add_ps(acc[r], _mm512_mul_ps(_mm512_cvtepi32_ps(isum[r]), scale));
        }
    }
}

/* packed: a tile of a copy, for any number of operand rows (one row a tile of its own) */
SIMD_ALWAYS_INLINE void xs16_rows(int packed, const uint8_t *base, size_t rb, const uint8_t *next, size_t l0,
                                  size_t nl, size_t j, const cpu_operand *x, size_t n_rows, float *out, size_t ldo) {
    for (size_t r0 = 0; r0 < n_rows; r0 += Q_TILE_X) {
        __m512 acc[Q_TILE_X];
        const size_t nx = LLMM_MIN((size_t)Q_TILE_X, n_rows - r0);
        if (nx == Q_TILE_X) xs16_tile(packed, base, rb, next, x, r0, Q_TILE_X, acc);
        else if (packed && nx == 1) xs16_tile(1, base, rb, next, x, r0, 1, acc);
        else xs16_tile(packed, base, rb, next, x, r0, nx, acc);
        for (size_t r = 0; r < nx; r++) rows16_store(acc[r], out + (r0 + r) * ldo + j, l0, nl);
    }
}

/* The tiles of rows [j0, j1) (kernels/gemm_tiles.h), of the weights as stored or (packed) of a packed
 * copy: w->data the copy, w->ne1 its whole tiles' rows. */
SIMD_ALWAYS_INLINE void xs16_walk(int packed, const llmm_tensor *w, size_t j0, size_t j1, const cpu_operand *x,
                                  size_t n_rows, float *out, size_t ldo) {
#define XS16_ROWS_CALL(base, rb, next, l0, nl, j) xs16_rows(packed, base, rb, next, l0, nl, j, x, n_rows, out, ldo)
    GEMM_WALK_TILES(w, j0, j1, R16_ROWS, XS16_ROWS_CALL);
#undef XS16_ROWS_CALL
}
static void gemm_iq4_xs_rows16(const llmm_tensor *w, size_t j0, size_t j1, const cpu_operand *x, size_t n_rows,
                               float *out, size_t ldo) {
    xs16_walk(0, w, j0, j1, x, n_rows, out, ldo);
}
static void gemm_iq4_xs_packed16(const llmm_tensor *w, size_t j0, size_t j1, const cpu_operand *x, size_t n_rows,
                                 float *out, size_t ldo) {
    xs16_walk(1, w, j0, j1, x, n_rows, out, ldo);
}

#endif
