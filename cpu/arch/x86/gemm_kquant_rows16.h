/* K-quant weights (Q2_K .. Q6_K) times Q8_K operand rows on 512-bit vectors, 16 weight rows per
 * tile, one row per int32 lane, for two operand rows and more (prefill): for avx512.c,
 * included after gemm_rows16.h (whose transposition, lane order and broadcast dot it
 * uses) and gemm_kquant.h (kq_kind); gives gemm_q2_K_rows16 .. gemm_q6_K_rows16
 * (cpu_gemm_fn), and gemm_q2_K_packed16 .. gemm_q6_K_packed16 over packed copies
 * (packed_tiles.h), for any number of operand rows. For prompts they are two to three times
 * faster than the 8-row tiles. With one operand row (decode) and no copy the 8-row tiles stay:
 * the 16-row ones were no faster streamed. From a copy, where each transposition is four
 * loads, the 16-row tile of one row computes up to twice as fast as the 8-row one (least for
 * Q3_K, whose bit unpacking, not the transposition, is most of its work; docs/performance.md, "CPU
 * kernel choices").
 *
 * As for Q4_0 (gemm_rows16.h): each 16-byte piece of the 16 rows' super-blocks is
 * transposed in registers so that a 512-bit vpdpbusd against four operand bytes, broadcast,
 * adds four products of one row into that row's lane. Per super-block the head (d, dmin and
 * the 12 bytes of packed 6-bit scales and mins) is one such piece, so the scales are unpacked
 * lane by lane with the bit operations of k4_unpack_scales; a sub-block's dot is multiplied by
 * its scale in each lane (vpmulld), and the mins meet the operand's group sums in vpdpwssd with
 * each min duplicated into both 16-bit halves of its lane.
 *
 * Numerics: the integer sums are exact in any order (gemm_kquant.h), and per lane the float
 * part is the scalar's x_d * (d * sum_q - dmin * sum_m), added to the row's sum super-block by
 * super-block without FMA: bit-identical to the type's vec_dot. */
#ifndef LLMM_GEMM_KQUANT_ROWS16_AVX512_H
#define LLMM_GEMM_KQUANT_ROWS16_AVX512_H

#ifndef LLMM_GEMM_ROWS16_AVX512_H
#error "include gemm_rows16.h before gemm_kquant_rows16.h"
#endif

/* acc + vpdpwssd(a, the two int16 at b in every lane) */
SIMD_ALWAYS_INLINE __m512i dpwssd_bcast(__m512i acc, __m512i a, const int16_t *b) {
    __asm__("vpdpwssd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(a), "m"(*(const int32_t *)(const void *)b));
    return acc;
}

/* Byte k of each 32-bit lane: zero-extended (k4_byte), or into both 16-bit halves (k4_byte2). */
SIMD_ALWAYS_INLINE __m512i k4_byte(__m512i v, int k) {
    const int z = (int)0x80808000;
    return _mm512_shuffle_epi8(v, _mm512_set4_epi32(z | (12 + k), z | (8 + k), z | (4 + k), z | k));
}
SIMD_ALWAYS_INLINE __m512i k4_byte2(__m512i v, int k) {
    const int z = (int)0x80008000;
    return _mm512_shuffle_epi8(v, _mm512_set4_epi32(z | (12 + k) * 0x10001, z | (8 + k) * 0x10001,
                                                     z | (4 + k) * 0x10001, z | k * 0x10001));
}

/* Bit k of every byte of v moved to bit 4, the other bits cleared (16-bit shifts: for k <= 4 bit 4
 * of a byte comes from bit 4 - k of the same byte, for k > 4 from bit k < 8 of it). */
SIMD_ALWAYS_INLINE __m512i bit_to_16(__m512i v, int k) {
    const __m512i b4 = _mm512_set1_epi8(0x10);
    return _mm512_and_si512(k <= 4 ? _mm512_slli_epi16(v, (unsigned)(4 - k)) : _mm512_srli_epi16(v, (unsigned)(k - 4)),
                            b4);
}

/* Q4_K and Q5_K (q5), operand rows r0 .. r0+nx-1 against the 16 rows at base (nx a constant
 * for full operand tiles), or against a tile of a packed copy (packed: base its first group).
 * Q5_K's 5th bit of weight l of sub-block s is bit s of qh[l]. */
SIMD_ALWAYS_INLINE void k4r16_tile(int q5, int packed, const uint8_t *base, size_t rb, const uint8_t *next,
                                   const cpu_operand *x, size_t r0, size_t nx, __m512 acc[Q_TILE_X]) {
    const size_t nb = x->n / QK_K, ng = x->n / 16, bb = q5 ? sizeof(block_q5_K) : sizeof(block_q4_K);
    const size_t qs_off = q5 ? offsetof(block_q5_K, qs) : offsetof(block_q4_K, qs);
    const __m512i k3f = _mm512_set1_epi32(0x3f3f3f3f), k0f = _mm512_set1_epi32(0x0f0f0f0f);
    const __m512i k30 = _mm512_set1_epi32(0x30303030), low4 = _mm512_set1_epi8(0x0f);
    for (size_t r = 0; r < nx; r++) acc[r] = _mm512_setzero_ps();
    for (size_t b = 0; b < nb; b++) {
        const uint8_t *blk = base + b * (packed ? R16_ROWS : 1) * bb;
        const uint8_t *pf = packed && next && r0 == 0 ? next + b * R16_ROWS * bb : NULL;
        if (next && r0 == 0 && !pf) rows16_prefetch(next, b, bb);
        /* head: d | dmin << 16, then the scale words u0, u1, u2 (k4_unpack_scales) */
        __m512i hd[4];
        rows16_piece(packed, blk, rb, 0, pf, hd);
        const __m512 d_w = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(hd[0]));
        const __m512 dmin_w = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(hd[0], 16)));
        const __m512i s03 = _mm512_and_si512(hd[1], k3f), m03 = _mm512_and_si512(hd[2], k3f);
        const __m512i s47 = _mm512_or_si512(_mm512_and_si512(hd[3], k0f),
                                            _mm512_and_si512(_mm512_srli_epi32(hd[1], 2), k30));
        const __m512i m47 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(hd[3], 4), k0f),
                                            _mm512_and_si512(_mm512_srli_epi32(hd[2], 2), k30));
        __m512i sum_q[Q_TILE_X], sum_m[Q_TILE_X], qh[2][4];
        for (size_t r = 0; r < nx; r++) sum_q[r] = sum_m[r] = _mm512_setzero_si512();
        if (q5) /* every chunk's 5th bits: one transposition per half of qh */
            for (int h = 0; h < 2; h++) rows16_piece(packed, blk, rb, offsetof(block_q5_K, qh) + 16 * h, pf, qh[h]);
        /* chunk c of 64 weights: byte l of its 32 holds weight l of sub-block 2c (low nibble)
         * and of 2c+1 (high); half h is bytes 16h .. 16h+15 */
#pragma GCC unroll 1
        for (int c = 0; c < 4; c++) {
            const __m512i sv = c < 2 ? s03 : s47;
            const __m512i sc_lo = k4_byte(sv, (2 * c) & 3), sc_hi = k4_byte(sv, (2 * c + 1) & 3);
            /* both halves first: they share the two scales, so each operand row's two dots run
             * over all 64 weights before the two multiplies (per half: twice the vpmulld) */
            __m512i lo[8], hi[8];
#pragma GCC unroll 2
            for (int h = 0; h < 2; h++) {
                __m512i d[4];
                rows16_piece(packed, blk, rb, qs_off + 32 * c + 16 * h, pf, d);
#pragma GCC unroll 4
                for (int j = 0; j < 4; j++) {
                    lo[4 * h + j] = _mm512_and_si512(d[j], low4);
                    hi[4 * h + j] = _mm512_and_si512(_mm512_srli_epi16(d[j], 4), low4);
                    if (q5) {
                        lo[4 * h + j] = _mm512_or_si512(lo[4 * h + j], bit_to_16(qh[h][j], 2 * c));
                        hi[4 * h + j] = _mm512_or_si512(hi[4 * h + j], bit_to_16(qh[h][j], 2 * c + 1));
                    }
                }
            }
#pragma GCC unroll 8
            for (size_t r = 0; r < nx; r++) {
                const int8_t *xq = x->qs + (r0 + r) * x->n + b * QK_K + 64 * c;
                __m512i dl = _mm512_setzero_si512(), dh = _mm512_setzero_si512();
#pragma GCC unroll 8
                for (int j = 0; j < 8; j++) {
                    const int at = 16 * (j / 4) + 4 * (j % 4);
                    dl = dpbusd_bcast(dl, lo[j], xq + at);
                    dh = dpbusd_bcast(dh, hi[j], xq + 32 + at);
                }
                sum_q[r] = _mm512_add_epi32(sum_q[r],
                                            _mm512_add_epi32(_mm512_mullo_epi32(dl, sc_lo), _mm512_mullo_epi32(dh, sc_hi)));
            }
        }
        /* sum_m: min s against the operand's group sums 2s and 2s+1 */
#pragma GCC unroll 8
        for (int s = 0; s < 8; s++) {
            const __m512i m2 = k4_byte2(s < 4 ? m03 : m47, s & 3);
#pragma GCC unroll 8
            for (size_t r = 0; r < nx; r++)
                sum_m[r] = dpwssd_bcast(sum_m[r], m2, x->bsums + (r0 + r) * ng + b * (QK_K / 16) + 2 * s);
        }
#pragma GCC unroll 8
        for (size_t r = 0; r < nx; r++) {
            const __m512 f = _mm512_sub_ps(_mm512_mul_ps(d_w, _mm512_cvtepi32_ps(sum_q[r])),
                                           _mm512_mul_ps(dmin_w, _mm512_cvtepi32_ps(sum_m[r])));
            acc[r] = _mm512_add_ps(acc[r], _mm512_mul_ps(_mm512_set1_ps(x->d[(r0 + r) * nb + b]), f));
        }
    }
}

/* Signed byte k of each 32-bit lane (k < 4), sign-extended: moved to the top byte, shifted
 * down. */
SIMD_ALWAYS_INLINE __m512i k6_sbyte(__m512i v, int k) {
    const int z = 0x808080;
    return _mm512_srai_epi32(_mm512_shuffle_epi8(v, _mm512_set4_epi32(z | (12 + k) << 24, z | (8 + k) << 24,
                                                                     z | (4 + k) << 24, z | k << 24)),
                             24);
}

/* Signed bytes 2k and 2k+1 of each 32-bit lane (k < 2) as its two int16 halves. */
SIMD_ALWAYS_INLINE __m512i k6_spair(__m512i v, int k) {
    const int a = 2 * k, b = 2 * k + 1;
    return _mm512_srai_epi16(_mm512_shuffle_epi8(v, _mm512_set4_epi32((12 + b) << 24 | 0x800000 | (12 + a) << 8 | 0x80,
                                                                      (8 + b) << 24 | 0x800000 | (8 + a) << 8 | 0x80,
                                                                      (4 + b) << 24 | 0x800000 | (4 + a) << 8 | 0x80,
                                                                      b << 24 | 0x800000 | a << 8 | 0x80)),
                             8);
}

/* Q6_K, operand rows r0 .. r0+nx-1 against the 16 rows at base. Per half h (128 weights) and
 * piece p (positions l = 16p .. 16p+15 of its 32): A = ql[64h + l], B = ql[64h + 32 + l] and
 * H = qh[32h + l] transposed; weight 128h + 32k + l (k = 0..3, the kind) is the low (k < 2) or
 * high nibble of A (k even) or B (k odd), as q6_level, with bits 2k, 2k+1 of H on top, and lies
 * in group 8h + 2k + p of 16, whose int8 scale multiplies its dot in each lane. The quants are
 * unsigned (q + 32): the offset comes back out as 32 sum_g sc_g bsum_g, through vpdpwssd. */
SIMD_ALWAYS_INLINE void k6r16_tile(int packed, const uint8_t *base, size_t rb, const uint8_t *next,
                                   const cpu_operand *x, size_t r0, size_t nx, __m512 acc[Q_TILE_X]) {
    const size_t nb = x->n / QK_K, ng = x->n / 16, bb = sizeof(block_q6_K);
    const __m512i low4 = _mm512_set1_epi8(0x0f), top2 = _mm512_set1_epi8(0x30);
    for (size_t r = 0; r < nx; r++) acc[r] = _mm512_setzero_ps();
    for (size_t b = 0; b < nb; b++) {
        const uint8_t *blk = base + b * (packed ? R16_ROWS : 1) * bb;
        const uint8_t *pf = packed && next && r0 == 0 ? next + b * R16_ROWS * bb : NULL;
        if (next && r0 == 0 && !pf) rows16_prefetch(next, b, bb);
        if (pf) _mm_prefetch((const char *)(pf + R16_ROWS * offsetof(block_q6_K, d)), _MM_HINT_T1);
        /* the 16 scales (lane word i: scales 4i .. 4i+3); a copy holds the pieces in the
         * order they are read here (packed_q6_k_pieces) */
        __m512i sc[4];
        rows16_piece_at(packed, blk, rb, offsetof(block_q6_K, scales), 0, pf, sc);
        __m512i sum_q[Q_TILE_X];
        for (size_t r = 0; r < nx; r++) sum_q[r] = _mm512_setzero_si512();
        /* the offset: sum_q starts at -32 sum_g sc_g bsum_g */
#pragma GCC unroll 8
        for (int k = 0; k < 8; k++) {
            const __m512i sp = k6_spair(sc[k / 2], k % 2);
#pragma GCC unroll 8
            for (size_t r = 0; r < nx; r++)
                sum_q[r] = dpwssd_bcast(sum_q[r], sp, x->bsums + (r0 + r) * ng + b * (QK_K / 16) + 2 * k);
        }
        for (size_t r = 0; r < nx; r++)
            sum_q[r] = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(sum_q[r], 5));
#pragma GCC unroll 1
        for (int hp = 0; hp < 4; hp++) {
            const int h = hp / 2, p = hp % 2;
            __m512i hb[4];
            rows16_piece_at(packed, blk, rb, offsetof(block_q6_K, qh) + 32 * h + 16 * p, 256 * (1 + 3 * (size_t)hp),
                            pf, hb);
#pragma GCC unroll 1
            for (int ab = 0; ab < 2; ab++) { /* A (kinds 0, 2), then B (kinds 1, 3) */
                __m512i lb[4];
                rows16_piece_at(packed, blk, rb, offsetof(block_q6_K, ql) + 64 * h + 32 * ab + 16 * p,
                                256 * (2 + 3 * (size_t)hp + (size_t)ab), pf, lb);
#pragma GCC unroll 2
                for (int hi = 0; hi < 2; hi++) {
                    const int kind = ab + 2 * hi, g = 8 * h + 2 * kind + p;
                    __m512i q[4];
#pragma GCC unroll 4
                    for (int j = 0; j < 4; j++) {
                        const __m512i nib = hi ? _mm512_and_si512(_mm512_srli_epi16(lb[j], 4), low4)
                                               : _mm512_and_si512(lb[j], low4);
                        /* bits 2 kind, 2 kind + 1 of H to bits 4, 5 */
                        const __m512i top = kind == 0   ? _mm512_slli_epi16(hb[j], 4)
                                            : kind == 1 ? _mm512_slli_epi16(hb[j], 2)
                                            : kind == 2 ? hb[j]
                                                        : _mm512_srli_epi16(hb[j], 2);
                        q[j] = _mm512_or_si512(nib, _mm512_and_si512(top, top2));
                    }
                    const __m512i scg = k6_sbyte(sc[g / 4], g % 4);
#pragma GCC unroll 8
                    for (size_t r = 0; r < nx; r++) {
                        const int8_t *xq = x->qs + (r0 + r) * x->n + b * QK_K + 128 * h + 32 * kind + 16 * p;
                        __m512i dq = _mm512_setzero_si512();
#pragma GCC unroll 4
                        for (int j = 0; j < 4; j++) dq = dpbusd_bcast(dq, q[j], xq + 4 * j);
                        sum_q[r] = _mm512_add_epi32(sum_q[r], _mm512_mullo_epi32(dq, scg));
                    }
                }
            }
        }
        /* d: the last 2 of the 16 bytes that end where the block does, or in a copy the 16
         * halves after the pieces */
        __m512 d_w;
        if (packed) {
            d_w = _mm512_cvtph_ps(load_256(blk + R16_ROWS * offsetof(block_q6_K, d)));
        } else {
            __m512i tail[4];
            rows16_transpose(blk + offsetof(block_q6_K, d) + 2 - 16, rb, tail);
            d_w = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(tail[3], 16)));
        }
        /* x_d * (d * sum_q - dmin * sum_m) with dmin and sum_m zero (see kq_tile) */
#pragma GCC unroll 8
        for (size_t r = 0; r < nx; r++)
            acc[r] = _mm512_add_ps(acc[r], _mm512_mul_ps(_mm512_set1_ps(x->d[(r0 + r) * nb + b]),
                                                         _mm512_mul_ps(d_w, _mm512_cvtepi32_ps(sum_q[r]))));
    }
}

/* Unsigned bytes 2k and 2k+1 of each 32-bit lane (k < 2) as its two int16 halves. */
SIMD_ALWAYS_INLINE __m512i k2_upair(__m512i v, int k) {
    const int a = 2 * k, b = 2 * k + 1, z = (int)0x80008000;
    return _mm512_shuffle_epi8(v, _mm512_set4_epi32(z | (12 + b) << 16 | (12 + a), z | (8 + b) << 16 | (8 + a),
                                                    z | (4 + b) << 16 | (4 + a), z | b << 16 | a));
}

/* Bit `from` of every byte of v moved to bit `to`, the other bits cleared (16-bit shifts: a bit
 * that crosses into the other byte of a pair is masked off). */
SIMD_ALWAYS_INLINE __m512i bit_to(__m512i v, int from, int to) {
    const __m512i moved = from >= to ? _mm512_srli_epi16(v, (unsigned)(from - to)) : _mm512_slli_epi16(v, (unsigned)(to - from));
    return _mm512_and_si512(moved, _mm512_set1_epi8((char)(1 << to)));
}

/* Q2_K and Q3_K (q3), operand rows r0 .. r0+nx-1 against the 16 rows at base, or against a tile
 * of a packed copy (packed: base its first group; its d and dmin, or scales and d, loaded last
 * or first as whole vectors). Per piece p of 16 qs bytes (h = p / 2, e = p % 2; the transposed
 * words hold qs[32h + l], l = 16e .. 16e+15),
 * weight 128h + 32k + l is bits 2k, 2k+1 of its byte (and for Q3_K bit 4h + k of hmask[l] on
 * top), and lies in sub-block 8h + 2k + e, whose scale multiplies its dot in each lane. The
 * scale words sw[j] hold sub-blocks 4j .. 4j+3 (unsigned; Q3_K's stored with +32); Q2_K's mins
 * meet the operand's group sums in vpdpwssd, as do Q3_K's scales for the quants' offset 4
 * (sum_q starts at -4 sum_s sc_s bsum_s, as kq_row_2bit). */
SIMD_ALWAYS_INLINE void k2r16_tile(int q3, int packed, const uint8_t *base, size_t rb, const uint8_t *next,
                                   const cpu_operand *x, size_t r0, size_t nx, __m512 acc[Q_TILE_X]) {
    const size_t nb = x->n / QK_K, ng = x->n / 16, bb = q3 ? sizeof(block_q3_K) : sizeof(block_q2_K);
    const size_t qs_off = q3 ? offsetof(block_q3_K, qs) : offsetof(block_q2_K, qs);
    const __m512i k0f = _mm512_set1_epi32(0x0f0f0f0f), k30 = _mm512_set1_epi32(0x30303030);
    const __m512i three = _mm512_set1_epi8(3), off32 = _mm512_set1_epi16(32);
    for (size_t r = 0; r < nx; r++) acc[r] = _mm512_setzero_ps();
    for (size_t b = 0; b < nb; b++) {
        const uint8_t *blk = base + b * (packed ? R16_ROWS : 1) * bb;
        const uint8_t *pf = packed && next && r0 == 0 ? next + b * R16_ROWS * bb : NULL;
        if (next && r0 == 0 && !pf) rows16_prefetch(next, b, bb);
        __m512i sw[4], mw[4], t[4];
        __m512 d_w = _mm512_setzero_ps(), dmin_w = _mm512_setzero_ps();
        if (q3) {
            /* the 12 scale bytes as words u0, u1, u2, and d: in a copy three vectors and 16
             * halves at byte 96 on; as stored, bytes 94 .. 109 (not reading past the block) */
            __m512i u0, u1, u2;
            if (packed) {
                const size_t at = R16_ROWS * offsetof(block_q3_K, scales);
                if (pf) prefetch_span((uintptr_t)pf + at, R16_ROWS * sizeof(block_q3_K) - at, 1);
                u0 = _mm512_loadu_si512(blk + at);
                u1 = _mm512_loadu_si512(blk + at + 64);
                u2 = _mm512_loadu_si512(blk + at + 128);
                d_w = _mm512_cvtph_ps(load_256(blk + R16_ROWS * offsetof(block_q3_K, d)));
            } else {
                rows16_transpose(blk + offsetof(block_q3_K, d) + 2 - 16, rb, t);
                u0 = _mm512_or_si512(_mm512_srli_epi32(t[0], 16), _mm512_slli_epi32(t[1], 16));
                u1 = _mm512_or_si512(_mm512_srli_epi32(t[1], 16), _mm512_slli_epi32(t[2], 16));
                u2 = _mm512_or_si512(_mm512_srli_epi32(t[2], 16), _mm512_slli_epi32(t[3], 16));
                d_w = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(t[3], 16)));
            }
            sw[0] = _mm512_or_si512(_mm512_and_si512(u0, k0f), _mm512_and_si512(_mm512_slli_epi32(u2, 4), k30));
            sw[1] = _mm512_or_si512(_mm512_and_si512(u1, k0f), _mm512_and_si512(_mm512_slli_epi32(u2, 2), k30));
            sw[2] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(u0, 4), k0f), _mm512_and_si512(u2, k30));
            sw[3] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(u1, 4), k0f),
                                    _mm512_and_si512(_mm512_srli_epi32(u2, 2), k30));
        } else {
            rows16_piece(packed, blk, rb, offsetof(block_q2_K, scales), pf, t);
#pragma GCC unroll 4
            for (int j = 0; j < 4; j++) {
                sw[j] = _mm512_and_si512(t[j], k0f);
                mw[j] = _mm512_and_si512(_mm512_srli_epi32(t[j], 4), k0f);
            }
            if (!packed) { /* word 3 of the last 16 bytes: d | dmin << 16 (a copy's: after the qs) */
                rows16_transpose(blk + sizeof(block_q2_K) - 16, rb, t);
                d_w = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(t[3]));
                dmin_w = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(t[3], 16)));
            }
        }
        /* Q2_K: sum_m = sum_s m_s bsum_s; Q3_K: the offset, -4 sum_s (sc_s - 32) bsum_s */
        __m512i sum_q[Q_TILE_X], sum_m[Q_TILE_X];
        for (size_t r = 0; r < nx; r++) sum_m[r] = _mm512_setzero_si512();
#pragma GCC unroll 8
        for (int g = 0; g < 8; g++) {
            const __m512i pair = q3 ? _mm512_sub_epi16(k2_upair(sw[g / 2], g % 2), off32) : k2_upair(mw[g / 2], g % 2);
#pragma GCC unroll 8
            for (size_t r = 0; r < nx; r++)
                sum_m[r] = dpwssd_bcast(sum_m[r], pair, x->bsums + (r0 + r) * ng + b * (QK_K / 16) + 2 * g);
        }
        for (size_t r = 0; r < nx; r++) {
            sum_q[r] = q3 ? _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(sum_m[r], 2))
                          : _mm512_setzero_si512();
        }
        __m512i hm[2][4];
        if (q3)
            for (int e = 0; e < 2; e++) rows16_piece(packed, blk, rb, offsetof(block_q3_K, hmask) + 16 * e, pf, hm[e]);
#pragma GCC unroll 1
        for (int p = 0; p < 4; p++) {
            const int h = p / 2, e = p % 2;
            __m512i d[4];
            rows16_piece(packed, blk, rb, qs_off + 16 * p, pf, d);
#pragma GCC unroll 4
            for (int k = 0; k < 4; k++) {
                const int sub = 8 * h + 2 * k + e;
                __m512i sc = k4_byte(sw[sub / 4], sub % 4);
                if (q3) sc = _mm512_sub_epi32(sc, _mm512_set1_epi32(32));
                __m512i q[4];
#pragma GCC unroll 4
                for (int j = 0; j < 4; j++) {
                    q[j] = _mm512_and_si512(k == 0 ? d[j] : _mm512_srli_epi16(d[j], (unsigned)(2 * k)), three);
                    if (q3) q[j] = _mm512_or_si512(q[j], bit_to(hm[e][j], 4 * h + k, 2));
                }
#pragma GCC unroll 8
                for (size_t r = 0; r < nx; r++) {
                    const int8_t *xq = x->qs + (r0 + r) * x->n + b * QK_K + 128 * h + 32 * k + 16 * e;
                    __m512i dq = _mm512_setzero_si512();
#pragma GCC unroll 4
                    for (int j = 0; j < 4; j++) dq = dpbusd_bcast(dq, q[j], xq + 4 * j);
                    sum_q[r] = _mm512_add_epi32(sum_q[r], _mm512_mullo_epi32(dq, sc));
                }
            }
        }
        if (packed && !q3) { /* Q2_K's d | dmin << 16, the copy's last vector */
            const size_t at = R16_ROWS * offsetof(block_q2_K, d);
            if (pf) prefetch_span((uintptr_t)pf + at, 64, 1);
            const __m512i dd = _mm512_loadu_si512(blk + at);
            d_w = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dd));
            dmin_w = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(dd, 16)));
        }
        /* x_d * (d * sum_q - dmin * sum_m); Q3_K: dmin and its sum_m are zero (see kq_tile) */
#pragma GCC unroll 8
        for (size_t r = 0; r < nx; r++) {
            __m512 f = _mm512_mul_ps(d_w, _mm512_cvtepi32_ps(sum_q[r]));
            if (!q3) f = _mm512_sub_ps(f, _mm512_mul_ps(dmin_w, _mm512_cvtepi32_ps(sum_m[r])));
            acc[r] = _mm512_add_ps(acc[r], _mm512_mul_ps(_mm512_set1_ps(x->d[(r0 + r) * nb + b]), f));
        }
    }
}

/* All operand rows against the 16 weight rows base + i * rb, or (packed) a tile of a packed
 * copy; lanes [l0, l0 + nl) (in row order) go to out columns j ... (any K-quant kind). One
 * operand row is a tile of its own only from a copy: without one, decode takes the 8-row
 * kernels (see the top). */
SIMD_ALWAYS_INLINE void kr16_rows(kq_kind kind, int packed, const uint8_t *base, size_t rb, const uint8_t *next,
                                  size_t l0, size_t nl, size_t j, const cpu_operand *x, size_t n_rows, float *out,
                                  size_t ldo) {
    const int q5 = kind == KQ_Q5;
    for (size_t r0 = 0; r0 < n_rows; r0 += Q_TILE_X) {
        __m512 acc[Q_TILE_X];
        const size_t nx = LLMM_MIN((size_t)Q_TILE_X, n_rows - r0);
        const int q3 = kind == KQ_Q3;
        if ((kind == KQ_Q2 || q3) && nx == Q_TILE_X) k2r16_tile(q3, packed, base, rb, next, x, r0, Q_TILE_X, acc);
        else if ((kind == KQ_Q2 || q3) && packed && nx == 1) k2r16_tile(q3, 1, base, rb, next, x, r0, 1, acc);
        else if (kind == KQ_Q2 || q3) k2r16_tile(q3, packed, base, rb, next, x, r0, nx, acc);
        else if (kind == KQ_Q6 && nx == Q_TILE_X) k6r16_tile(packed, base, rb, next, x, r0, Q_TILE_X, acc);
        else if (kind == KQ_Q6 && packed && nx == 1) k6r16_tile(1, base, rb, next, x, r0, 1, acc);
        else if (kind == KQ_Q6) k6r16_tile(packed, base, rb, next, x, r0, nx, acc);
        else if (nx == Q_TILE_X) k4r16_tile(q5, packed, base, rb, next, x, r0, Q_TILE_X, acc);
        else if (packed && nx == 1) k4r16_tile(q5, 1, base, rb, next, x, r0, 1, acc);
        else k4r16_tile(q5, packed, base, rb, next, x, r0, nx, acc);
        for (size_t r = 0; r < nx; r++) rows16_store(acc[r], out + (r0 + r) * ldo + j, l0, nl);
    }
}

/* The tiles of rows [j0, j1) (kernels/gemm_tiles.h), of the weights as stored or (packed) of a packed
 * copy: w->data the copy, w->ne1 its whole tiles' rows. From a copy the
 * one-row tile computes twice as fast as the 8-row kernel (see the top). */
SIMD_ALWAYS_INLINE void kr16_walk(kq_kind kind, int packed, const llmm_tensor *w, size_t j0, size_t j1,
                                  const cpu_operand *x, size_t n_rows, float *out, size_t ldo) {
#define KR16_CALL(base, rb, next, l0, nl, j) kr16_rows(kind, packed, base, rb, next, l0, nl, j, x, n_rows, out, ldo)
    GEMM_WALK_TILES(w, j0, j1, R16_ROWS, KR16_CALL);
#undef KR16_CALL
}
SIMD_ALWAYS_INLINE void gemm_kr16(kq_kind kind, const llmm_tensor *w, size_t j0, size_t j1, const cpu_operand *x,
                                  size_t n_rows, float *out, size_t ldo) {
    kr16_walk(kind, 0, w, j0, j1, x, n_rows, out, ldo);
}
SIMD_ALWAYS_INLINE void gemm_kr16_packed(kq_kind kind, const llmm_tensor *w, size_t j0, size_t j1,
                                         const cpu_operand *x, size_t n_rows, float *out, size_t ldo) {
    kr16_walk(kind, 1, w, j0, j1, x, n_rows, out, ldo);
}

GEMM_FN_FOR_KIND(gemm_q2_K_packed16, gemm_kr16_packed, KQ_Q2)
GEMM_FN_FOR_KIND(gemm_q3_K_packed16, gemm_kr16_packed, KQ_Q3)
GEMM_FN_FOR_KIND(gemm_q4_K_packed16, gemm_kr16_packed, KQ_Q4)
GEMM_FN_FOR_KIND(gemm_q5_K_packed16, gemm_kr16_packed, KQ_Q5)
GEMM_FN_FOR_KIND(gemm_q6_K_packed16, gemm_kr16_packed, KQ_Q6)
GEMM_FN_FOR_KIND(gemm_q2_K_rows16, gemm_kr16, KQ_Q2)
GEMM_FN_FOR_KIND(gemm_q3_K_rows16, gemm_kr16, KQ_Q3)
GEMM_FN_FOR_KIND(gemm_q4_K_rows16, gemm_kr16, KQ_Q4)
GEMM_FN_FOR_KIND(gemm_q5_K_rows16, gemm_kr16, KQ_Q5)
GEMM_FN_FOR_KIND(gemm_q6_K_rows16, gemm_kr16, KQ_Q6)

#endif
