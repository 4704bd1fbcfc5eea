/* Packed copies (packed_tiles.h) on 256-bit vectors, for the AVX2 and AVX-VNNI tables: Q4_0,
 * Q5_0, Q8_0, IQ4_NL, Q4_1 and Q5_1 times Q8 / Q8_1 operand rows, Q4_K, Q5_K, Q6_K and IQ4_XS
 * times Q8_K ones; gives gemm_q4_0_packed8 .. gemm_iq4_xs_packed8 (cpu_gemm_fn), for any number
 * of operand rows; and the same tiles for prompts over weights as stored, each segment of a tile
 * packed on the fly into a stack buffer (gemm_pk_fly, PK_GEMM_AS_STORED). For avx2.c
 * and avxvnni.c.
 *
 * Why: the AVX2 kernels as stored (gemm_int8.h, gemm_legacy.h, gemm_kquant.h) put
 * one or two weight rows in a vector, so every block's eight row sums are gathered from lanes
 * with horizontal adds, and the scales first in a pass of their own. One core from cache they
 * computed fewer bytes of weights per second than one core reads, so single-thread decode on
 * an AVX2-only CPU was arithmetic-bound. A packed group keeps each
 * row's four bytes in one 32-bit lane: each 64-byte vector of it is two 256-bit vectors of 8
 * rows (lanes 0-7 and 8-15 of the AVX-512 layout), and vpmaddubsw against four operand bytes,
 * broadcast, then vpmaddwd leave each row's sums in its own lane with no horizontal step.
 *
 * Sums: vpmaddubsw adds two u8 x s8 products into int16 with saturation, so the products are
 * summed in int16 only as far as they cannot saturate (operand quants within [-128, 127]):
 * eight 4-bit products' pairs (8 x 2 x 15 x 128 = 30720), four 5-bit ones' (31744), two 6-bit
 * ones' (32256), then widened by vpmaddwd, against ones or, for the K-quants, against each
 * lane's sub-block scale in both int16 halves (the scale's multiply for free). Q8_0's and
 * IQ4_NL's signed quants go through the sign trick, |w| times x with w's sign (exact because
 * the operand quants are within [-127, 127], llmm__quantize_row_q8_0's range), each pair sum
 * widened at once. The integer sums are exact, so in any order; the float part is the AVX-512
 * tiles' (gemm_rows16.h, gemm_kquant_rows16.h), lane by lane in block order
 * without FMA: bit-identical to the type's vec_dot.
 *
 * With PK_VNNI (avxvnni.c: AVX-VNNI, or its EVEX form on AVX-512 CPUs), pk_dpbusd sums
 * four u8 x s8 products into each int32 lane in one instruction: no int16 step, so no
 * saturation limit and no vpmaddwd; signed quants are taken as w + 128 (Q8_0's copy holds
 * them so; IQ4_NL's codebook is looked up + 128) and the offset comes back with the operand's
 * quant sums, as on the AVX-512 tiles; scales that vpmaddwd multiplied for free are applied by
 * one vpmulld per sub-block sum. The integer sums are the same, so the results are too.
 *
 * Not here: Q2_K and Q3_K (packed on no table). On the AVX2 table IQ4_XS prompts over weights
 * as stored keep its 8-row kernel: the tiles packed on the fly measured no faster, as its sign
 * trick and per-lane factors cost about what the 8-row kernel's horizontal sums do. With
 * PK_VNNI they take the tiles, which are then clearly faster. */
#ifndef LLMM_GEMM_PACKED8_X86_H
#define LLMM_GEMM_PACKED8_X86_H

#include <stdint.h>
#include <string.h>

#include "kernel_table.h"
#include "kernels/block_kinds.h"
#include "kernels/gemm_tiles.h"
#include "packed_tiles.h"
#include "simd.h"

#ifndef PK_VNNI
#define PK_VNNI 0
#endif

#define PK_ROWS PACKED_TILE_ROWS
/* operand rows per pass over a half tile (prompts): the K-quant tiles' int16 and int32 sums, the
 * weight vector and the broadcast operand bytes fill the 16 registers with 2; the legacy tiles
 * keep a half block's 8 weight vectors for 4 */
#define PK_TILE_X 2
#define PK_LEGACY_TILE_X 4
/* From PK_LEGACY_TILE_X + 1 to PK_BATCH_X operand rows (a verify step, a few sequences), the
 * legacy tiles take all of them in one pass per half: each half block's weight vectors made once
 * per step, the rows' sums in memory. One matmul of 896 x 4864 from a copy, AVX2 (callgrind,
 * millions of instructions, 8 / 16 rows): Q4_0 6.57 / 13.08 -> 6.19 / 11.46, Q8_0 11.98 /
 * 23.85 -> 11.27 / 21.15, Q5_0 8.38 / 16.67 -> 7.23 / 12.77. Up to 4 rows the registers hold
 * the sums, and one pass with them in memory counted 9-14 % more. */
#define PK_BATCH_X 16
/* accumulators of a K-quant tile call: PK_TILE_X rows of one half, or one row of both */
#define PK_ACC 2

/* the 4 bytes at p in every 32-bit lane */
SIMD_ALWAYS_INLINE __m256i pk_bcast32(const void *p) {
    int32_t v;
    memcpy(&v, p, sizeof v);
    return _mm256_set1_epi32(v);
}

/* A legacy group's 5th bits for one half: byte i 0x10 where bit i of the 32-bit word at p (the
 * half's part of a 64-bit mask, packed_tiles.h) is set. Each byte picks the word's byte that
 * holds its bit, then tests its own bit. */
SIMD_ALWAYS_INLINE __m256i pk_bits_x16(const uint8_t *p) {
    const __m256i pick = _mm256_setr_epi64x(0, 0x0101010101010101ll, 0x0202020202020202ll, 0x0303030303030303ll);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    const __m256i w = _mm256_shuffle_epi8(pk_bcast32(p), pick);
    return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(w, bit), bit), _mm256_set1_epi8(0x10));
}

/* A tile's results (lo: lanes 0-7, hi: lanes 8-15) in row order into o[0 .. nl), starting at
 * the tile's row l0. */
SIMD_ALWAYS_INLINE void pk_store(__m256 lo, __m256 hi, float *o, size_t l0, size_t nl) {
    if (nl == PK_ROWS) { /* rows 0-7 are lanes 0, 4, 8, 12, 1, 5, 9, 13; rows 8-15 the rest */
        const __m256i first = _mm256_setr_epi32(0, 4, 0, 4, 1, 5, 1, 5);
        const __m256i second = _mm256_setr_epi32(2, 6, 2, 6, 3, 7, 3, 7);
        _mm256_storeu_ps(o, _mm256_blend_ps(_mm256_permutevar8x32_ps(lo, first),
                                            _mm256_permutevar8x32_ps(hi, first), 0xcc));
        _mm256_storeu_ps(o + 8, _mm256_blend_ps(_mm256_permutevar8x32_ps(lo, second),
                                                _mm256_permutevar8x32_ps(hi, second), 0xcc));
        return;
    }
    float lanes[PK_ROWS];
    _mm256_storeu_ps(lanes, lo);
    _mm256_storeu_ps(lanes + 8, hi);
    for (size_t i = 0; i < nl; i++) o[i] = lanes[packed_lane_row(l0 + i)];
}

/* ---------------------------------------------------------------- Q4_0, Q5_0, Q4_1, Q5_1 */

/* Q8_0 and IQ4_NL: signed weights, multiplied by the sign trick (below), or as w + 128 (PK_VNNI) */
SIMD_ALWAYS_INLINE int pk_signed(r16_kind kind) { return kind == R16_Q8_0 || kind == R16_IQ4_NL; }

/* What a block's integer sum is off by, times the operand block's quant sum: Q4_0's and
 * Q5_0's unsigned quants (nibble - 8, - 16), the signed ones' 128 with PK_VNNI; none for them
 * with the sign trick and for Q4_1 and Q5_1, whose offset is their min's term. */
SIMD_ALWAYS_INLINE int pk_offset(r16_kind kind) {
    if (pk_signed(kind)) return PK_VNNI ? 128 : 0;
    return r16_has_min(kind) ? 0 : r16_offset(kind);
}

#if PK_VNNI
/* acc + four products of unsigned w with the operand bytes xb in each int32 lane */
SIMD_ALWAYS_INLINE __m256i pk_acc_u8(__m256i acc, __m256i w, __m256i xb) { return pk_dpbusd(acc, w, xb); }
/* a sub-block's lane sums times each lane's scale (pk_scale_bytes: one int32 per lane) */
SIMD_ALWAYS_INLINE __m256i pk_scaled(__m256i sums, __m256i scale) { return _mm256_mullo_epi32(sums, scale); }
#else
/* acc + w's u8 x s8 pair sums with the operand bytes xb, in int16 (see the top for how many
 * may be added before pk_scaled or pk_legacy_widen widens them) */
SIMD_ALWAYS_INLINE __m256i pk_acc_u8(__m256i acc, __m256i w, __m256i xb) {
    return _mm256_add_epi16(acc, _mm256_maddubs_epi16(w, xb));
}
/* the int16 pair sums times each lane's scale in both int16 halves (pk_scale_bytes), widened */
SIMD_ALWAYS_INLINE __m256i pk_scaled(__m256i sums, __m256i scale) { return _mm256_madd_epi16(sums, scale); }
#endif

/* acc + the products of weights lo (with the operand bytes xl) and up (with xh) */
SIMD_ALWAYS_INLINE __m256i pk_acc_pair(__m256i acc, __m256i lo, __m256i xl, __m256i up, __m256i xh) {
    if (PK_VNNI) return pk_acc_u8(pk_acc_u8(acc, lo, xl), up, xh);
    return _mm256_add_epi16(acc, _mm256_add_epi16(_mm256_maddubs_epi16(lo, xl), _mm256_maddubs_epi16(up, xh)));
}

/* Half h of vector j of a group's quants (v: the group after its scales and mins) as unsigned
 * bytes: the 8 rows' weights 4j .. 4j+3 (*lo) and 16 + 4j .. (*hi). */
SIMD_ALWAYS_INLINE void pk_legacy_weights(r16_kind kind, const uint8_t *v, int h, int j, __m256i *lo, __m256i *hi) {
    const uint8_t *quants = v + (r16_five_bits(kind) ? 64 : 0);
    const __m256i low4 = _mm256_set1_epi8(0x0f);
    const __m256i d = load_256(quants + 64 * j + 32 * h);
    *lo = _mm256_and_si256(d, low4);
    *hi = _mm256_and_si256(_mm256_srli_epi16(d, 4), low4);
    if (r16_five_bits(kind)) {
        *lo = _mm256_or_si256(*lo, pk_bits_x16(v + 8 * j + 4 * h));
        *hi = _mm256_or_si256(*hi, pk_bits_x16(v + 8 * (j + 4) + 4 * h));
    }
}

/* A block's lane sums from its two int16 partial sums (weights 4j.. and 16 + 4j.. for j < 2, and
 * for j >= 2): added in int16 for 4-bit quants, widened first for 5-bit ones (see the top); with
 * PK_VNNI already int32. */
SIMD_ALWAYS_INLINE __m256i pk_legacy_widen(r16_kind kind, __m256i a, __m256i c) {
    const __m256i ones = _mm256_set1_epi16(1);
    if (PK_VNNI) return _mm256_add_epi32(a, c);
    if (!r16_five_bits(kind)) return _mm256_madd_epi16(_mm256_add_epi16(a, c), ones);
    return _mm256_add_epi32(_mm256_madd_epi16(a, ones), _mm256_madd_epi16(c, ones));
}

/* acc + block xb's dot from its lane sums isum, for half h of group g: the scalar's
 * sum += (float)(isum - o sum(x)) * (d_w * d_x), or with a min sum += dot + m * s_x (as the
 * scalar offset_block_dot). */
SIMD_ALWAYS_INLINE __m256 pk_legacy_fold(r16_kind kind, const uint8_t *g, int h, size_t xb, const cpu_operand *x,
                                         __m256i isum, __m256 acc) {
    if (pk_offset(kind)) isum = _mm256_sub_epi32(isum, _mm256_set1_epi32(pk_offset(kind) * x->sum[xb]));
    const __m256 scale = _mm256_mul_ps(load_f16x8(g + 16 * h), _mm256_set1_ps(x->d[xb]));
    const __m256 dot = _mm256_mul_ps(_mm256_cvtepi32_ps(isum), scale);
    if (!r16_has_min(kind)) return _mm256_add_ps(acc, dot);
    const __m256 m_w = load_f16x8(g + 2 * PK_ROWS + 16 * h);
    return _mm256_add_ps(acc, _mm256_add_ps(dot, _mm256_mul_ps(m_w, _mm256_set1_ps(x->s[xb]))));
}

/* Block b of half h (group g, its quants at g + head) against operand rows r0 .. r0+nx-1 into
 * acc[r]: the half block's 8 weight vectors made once for all the rows (prompts). */
SIMD_ALWAYS_INLINE void pk_legacy_rows(r16_kind kind, const uint8_t *g, size_t head, int h, size_t b, size_t nb,
                                       const cpu_operand *x, size_t r0, size_t nx, __m256 *acc) {
    __m256i lo[4], up[4];
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) pk_legacy_weights(kind, g + head, h, j, &lo[j], &up[j]);
#pragma GCC unroll 4
    for (size_t r = 0; r < nx; r++) {
        const size_t xb = (r0 + r) * nb + b;
        const int8_t *xq = x->qs + xb * QK8_0;
        __m256i p[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++)
            p[j / 2] = pk_acc_pair(p[j / 2], lo[j], pk_bcast32(xq + 4 * j), up[j], pk_bcast32(xq + 16 + 4 * j));
        const __m256i isum = pk_legacy_widen(kind, p[0], p[1]);
        acc[r] = pk_legacy_fold(kind, g, h, xb, x, isum, acc[r]);
    }
}

/* Groups [b0, b1) of a tile (g: the group of b0; nb: blocks per row) against operand rows
 * r0 .. r0+nx-1, halves [h0, h0 + nh), added to acc[nh * r + h - h0]: one half for up to
 * PK_LEGACY_TILE_X rows (pk_legacy_rows), or both halves for one row (decode), the halves the
 * innermost loop so that the row's broadcast bytes serve both. nx and nh are constants at every
 * call site. */
SIMD_ALWAYS_INLINE void pk_legacy_tile(r16_kind kind, const uint8_t *g, const uint8_t *next, size_t nb, size_t b0,
                                       size_t b1, const cpu_operand *x, size_t r0, size_t nx, int h0, int nh,
                                       __m256 *acc) {
    const size_t gb = PK_ROWS * r16_block_bytes(kind), head = (r16_has_min(kind) ? 4 : 2) * PK_ROWS;
    const size_t na = nx * (size_t)nh;
    for (size_t b = b0; b < b1; b++, g += gb) {
        /* the next tile's group to L2, as the AVX-512 packed tiles do */
        if (next && r0 == 0 && h0 == 0) prefetch_span((uintptr_t)next + b * gb, gb, 1);
        if (nh == 1) { /* several rows of one half: its weights once, for all of them */
            pk_legacy_rows(kind, g, head, h0, b, nb, x, r0, nx, acc);
            continue;
        }
        /* sums of weights 4j .. 4j+3 and 16 + 4j .. for j in [2k, 2k + 2) (int16 without PK_VNNI) */
        __m256i p16[2][2];
        for (size_t i = 0; i < na; i++) p16[i][0] = p16[i][1] = _mm256_setzero_si256();
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++) {
            __m256i xl[PK_TILE_X], xh[PK_TILE_X];
            for (size_t r = 0; r < nx; r++) {
                const int8_t *xq = x->qs + ((r0 + r) * nb + b) * QK8_0 + 4 * j;
                xl[r] = pk_bcast32(xq);
                xh[r] = pk_bcast32(xq + 16);
            }
#pragma GCC unroll 2
            for (int hi = 0; hi < nh; hi++) {
                __m256i lo, up;
                pk_legacy_weights(kind, g + head, h0 + hi, j, &lo, &up);
                for (size_t r = 0; r < nx; r++) {
                    __m256i *p = &p16[r * (size_t)nh + (size_t)hi][j / 2];
                    *p = pk_acc_pair(*p, lo, xl[r], up, xh[r]);
                }
            }
        }
        for (size_t r = 0; r < nx; r++)
            for (int hi = 0; hi < nh; hi++) {
                const size_t i = r * (size_t)nh + (size_t)hi;
                acc[i] = pk_legacy_fold(kind, g, h0 + hi, (r0 + r) * nb + b, x,
                                        pk_legacy_widen(kind, p16[i][0], p16[i][1]), acc[i]);
            }
    }
}

/* ---------------------------------------------------------------- Q8_0, IQ4_NL */

/* A vector of 8 rows' signed weights w: with |w| as unsigned bytes (-128 becomes 128) for the
 * sign trick, or as u = w + 128 (PK_VNNI). */
typedef struct pk_signed_vec {
#if PK_VNNI
    __m256i u;
#else
    __m256i abs, w;
#endif
} pk_signed_vec;

SIMD_ALWAYS_INLINE pk_signed_vec pk_signed_of(__m256i w) {
#if PK_VNNI
    return (pk_signed_vec){w}; /* already + 128 */
#else
    return (pk_signed_vec){_mm256_sign_epi8(w, w), w};
#endif
}

/* Half h of vector pair j of a Q8_0 or IQ4_NL group's quants (v): the 8 rows' weights
 * 4j .. 4j+3 (*lo) and 16 + 4j .. (*hi). Q8_0's copy holds them plus 128 (its vectors j and
 * j + 4); IQ4_NL's, as Q4_0's, nibbles that index the codebook. */
SIMD_ALWAYS_INLINE void pk_signed_weights(r16_kind kind, const uint8_t *v, int h, int j, pk_signed_vec *lo,
                                          pk_signed_vec *hi) {
    const __m256i flip = _mm256_set1_epi8((char)0x80);
    __m256i a, b; /* w, or w + 128 with PK_VNNI */
    if (kind == R16_Q8_0) {
        a = load_256(v + 64 * j + 32 * h);
        b = load_256(v + 64 * (j + 4) + 32 * h);
        if (!PK_VNNI) {
            a = _mm256_xor_si256(a, flip);
            b = _mm256_xor_si256(b, flip);
        }
    } else {
        __m256i values = _mm256_broadcastsi128_si256(load_128(llmm__iq4_values));
        if (PK_VNNI) values = _mm256_xor_si256(values, flip);
        const __m256i low4 = _mm256_set1_epi8(0x0f), d = load_256(v + 64 * j + 32 * h);
        a = _mm256_shuffle_epi8(values, _mm256_and_si256(d, low4));
        b = _mm256_shuffle_epi8(values, _mm256_and_si256(_mm256_srli_epi16(d, 4), low4));
    }
    *lo = pk_signed_of(a);
    *hi = pk_signed_of(b);
}

#if PK_VNNI
/* acc + each lane's four products of w + 128 with the broadcast operand bytes xb (the offset
 * is taken back from the block sums) */
SIMD_ALWAYS_INLINE __m256i pk_signed_dot(__m256i acc, pk_signed_vec w, __m256i xb) { return pk_dpbusd(acc, w.u, xb); }
#else
/* acc + each lane's four products of w with the broadcast operand bytes xb, times the lane's
 * factor (both int16 halves of each lane of factor; ones, or IQ4_XS's sub-block factor): |w|
 * times xb with w's sign. vpmaddubsw's pair sums are at most 2 x 128 x 127 = 32512, so each is
 * widened at once (two added could saturate). */
SIMD_ALWAYS_INLINE __m256i pk_signed_dot_times(__m256i acc, pk_signed_vec w, __m256i xb, __m256i factor) {
    const __m256i p = _mm256_maddubs_epi16(w.abs, _mm256_sign_epi8(xb, w.w));
    return _mm256_add_epi32(acc, _mm256_madd_epi16(p, factor));
}

SIMD_ALWAYS_INLINE __m256i pk_signed_dot(__m256i acc, pk_signed_vec w, __m256i xb) {
    return pk_signed_dot_times(acc, w, xb, _mm256_set1_epi16(1));
}
#endif

/* Block b of half h (group g) against operand rows r0 .. r0+nx-1 into acc[r], as pk_legacy_rows:
 * the half block's weight vectors made once for all the rows, each row's int32 sum in a
 * register over the block. Summing into an array indexed by row and half instead counted
 * 1.4x the instructions (Q8_0 from a copy, 896 x 4864, 16 rows: 21.2 against 15.3 million). */
SIMD_ALWAYS_INLINE void pk_signed_rows(r16_kind kind, const uint8_t *g, int h, size_t b, size_t nb,
                                       const cpu_operand *x, size_t r0, size_t nx, __m256 *acc) {
    pk_signed_vec lo[4], up[4];
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) pk_signed_weights(kind, g + 2 * PK_ROWS, h, j, &lo[j], &up[j]);
    for (size_t r = 0; r < nx; r++) {
        const size_t xb = (r0 + r) * nb + b;
        const int8_t *xq = x->qs + xb * QK8_0;
        __m256i sum = _mm256_setzero_si256();
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++)
            sum = pk_signed_dot(pk_signed_dot(sum, lo[j], pk_bcast32(xq + 4 * j)), up[j], pk_bcast32(xq + 16 + 4 * j));
        acc[r] = pk_legacy_fold(kind, g, h, xb, x, sum, acc[r]);
    }
}

/* As pk_legacy_tile, for Q8_0 and IQ4_NL: each half's weight vectors made once for all the
 * operand rows, their int32 sums folded per block. */
SIMD_ALWAYS_INLINE void pk_signed_tile(r16_kind kind, const uint8_t *g, const uint8_t *next, size_t nb, size_t b0,
                                       size_t b1, const cpu_operand *x, size_t r0, size_t nx, int h0, int nh,
                                       __m256 *acc) {
    const size_t gb = PK_ROWS * r16_block_bytes(kind), head = 2 * PK_ROWS, na = nx * (size_t)nh;
    for (size_t b = b0; b < b1; b++, g += gb) {
        if (next && r0 == 0 && h0 == 0) prefetch_span((uintptr_t)next + b * gb, gb, 1);
        if (nh == 1) { /* several rows of one half */
            pk_signed_rows(kind, g, h0, b, nb, x, r0, nx, acc);
            continue;
        }
        __m256i sum[PK_BATCH_X];
        for (size_t i = 0; i < na; i++) sum[i] = _mm256_setzero_si256();
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++)
#pragma GCC unroll 2
            for (int hi = 0; hi < nh; hi++) {
                pk_signed_vec lo, up;
                pk_signed_weights(kind, g + head, h0 + hi, j, &lo, &up);
                for (size_t r = 0; r < nx; r++) {
                    const int8_t *xq = x->qs + ((r0 + r) * nb + b) * QK8_0 + 4 * j;
                    __m256i *s = &sum[r * (size_t)nh + (size_t)hi];
                    *s = pk_signed_dot(pk_signed_dot(*s, lo, pk_bcast32(xq)), up, pk_bcast32(xq + 16));
                }
            }
        for (size_t r = 0; r < nx; r++)
            for (int hi = 0; hi < nh; hi++) {
                const size_t i = r * (size_t)nh + (size_t)hi;
                acc[i] = pk_legacy_fold(kind, g, h0 + hi, (r0 + r) * nb + b, x, sum[i], acc[i]);
            }
    }
}

/* ---------------------------------------------------------------- Q4_K, Q5_K, Q6_K */

/* The f16 in the low (high: the upper) 16 bits of each lane, widened. */
SIMD_ALWAYS_INLINE __m256 pk_lane_halves(__m256i v, int high) {
    const __m128i lo = _mm_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, -1, -1, -1, -1, -1, -1, -1, -1);
    const __m128i up = _mm_setr_epi8(2, 3, 6, 7, 10, 11, 14, 15, -1, -1, -1, -1, -1, -1, -1, -1);
    const __m256i picked = _mm256_shuffle_epi8(v, _mm256_broadcastsi128_si256(high ? up : lo));
    /* qwords 0 and 2 (each 128-bit part's four halves) into the low 128 bits */
    return _mm256_cvtph_ps(_mm256_castsi256_si128(_mm256_permute4x64_epi64(picked, 0x08)));
}

/* Byte k of each lane zero-extended into both of its int16 halves (a scale for vpmaddwd). */
SIMD_ALWAYS_INLINE __m256i pk_byte2(__m256i v, int k) {
    const int z = (int)0x80008000;
    const __m128i pick = _mm_setr_epi32(z | k * 0x10001, z | (4 + k) * 0x10001, z | (8 + k) * 0x10001,
                                        z | (12 + k) * 0x10001);
    return _mm256_shuffle_epi8(v, _mm256_broadcastsi128_si256(pick));
}

/* A shuffle pattern word: bytes a and b of a lane into the upper bytes of its two int16 halves,
 * zero below them (an arithmetic shift by 8 then sign-extends them). */
SIMD_ALWAYS_INLINE int pk_upper_bytes(int a, int b) { return b << 24 | 0x800000 | a << 8 | 0x80; }

/* Signed bytes 2k and 2k+1 of each lane as its two int16 halves. */
SIMD_ALWAYS_INLINE __m256i pk_spair(__m256i v, int k) {
    const int a = 2 * k, b = 2 * k + 1;
    const __m128i pick = _mm_setr_epi32(pk_upper_bytes(a, b), pk_upper_bytes(4 + a, 4 + b),
                                        pk_upper_bytes(8 + a, 8 + b), pk_upper_bytes(12 + a, 12 + b));
    return _mm256_srai_epi16(_mm256_shuffle_epi8(v, _mm256_broadcastsi128_si256(pick)), 8);
}

/* Signed byte k of each lane into both of its int16 halves (a scale for vpmaddwd). */
SIMD_ALWAYS_INLINE __m256i pk_sbyte2(__m256i v, int k) {
    const __m128i pick = _mm_setr_epi32(pk_upper_bytes(k, k), pk_upper_bytes(4 + k, 4 + k),
                                        pk_upper_bytes(8 + k, 8 + k), pk_upper_bytes(12 + k, 12 + k));
    return _mm256_srai_epi16(_mm256_shuffle_epi8(v, _mm256_broadcastsi128_si256(pick)), 8);
}

/* Byte k of each lane as a scale for pk_scaled: zero-extended into the int32 lane (PK_VNNI), or
 * into both int16 halves; pk_sscale_bytes sign-extended. */
SIMD_ALWAYS_INLINE __m256i pk_scale_bytes(__m256i v, int k) {
    if (!PK_VNNI) return pk_byte2(v, k);
    const int z = (int)0x80808000;
    const __m128i pick = _mm_setr_epi32(z | k, z | (4 + k), z | (8 + k), z | (12 + k));
    return _mm256_shuffle_epi8(v, _mm256_broadcastsi128_si256(pick));
}

SIMD_ALWAYS_INLINE __m256i pk_sscale_bytes(__m256i v, int k) {
    if (!PK_VNNI) return pk_sbyte2(v, k);
    const int z = 0x808080;
    const __m128i pick = _mm_setr_epi32(z | k << 24, z | (4 + k) << 24, z | (8 + k) << 24, z | (12 + k) << 24);
    return _mm256_srai_epi32(_mm256_shuffle_epi8(v, _mm256_broadcastsi128_si256(pick)), 24);
}

/* Bit k of every byte of v moved to bit 4, the other bits cleared. */
SIMD_ALWAYS_INLINE __m256i pk_bit_to_16(__m256i v, int k) {
    return _mm256_and_si256(k <= 4 ? _mm256_slli_epi16(v, (int)(4 - k)) : _mm256_srli_epi16(v, (int)(k - 4)),
                            _mm256_set1_epi8(0x10));
}

/* Half h of the piece a group stores at byte `at`: vector j's 32 bytes (packed_tiles.h). */
SIMD_ALWAYS_INLINE __m256i pk_piece(const uint8_t *blk, size_t at, int h, int j) {
    return load_256(blk + at + 64 * j + 32 * h);
}

/* The piece at byte `at` of the next tile's group (pf; NULL: none) to L2, piece by piece as
 * rows16_piece_at does it. */
SIMD_ALWAYS_INLINE void pk_prefetch_piece(const uint8_t *pf, size_t at) {
    if (pf) prefetch_span((uintptr_t)pf + at, PK_ROWS * 16, 1);
}

/* Q4_K / Q5_K head words of half h: the 6-bit scales (mins: the mins) of sub-blocks 4q .. 4q+3,
 * one per byte (k4r16_tile's unpacking) */
SIMD_ALWAYS_INLINE __m256i pk_k4_scales(const uint8_t *g, int h, int q, int mins) {
    const __m256i k3f = _mm256_set1_epi32(0x3f3f3f3f), k0f = _mm256_set1_epi32(0x0f0f0f0f);
    const __m256i k30 = _mm256_set1_epi32(0x30303030);
    const __m256i low = pk_piece(g, 0, h, mins ? 2 : 1);
    if (q == 0) return _mm256_and_si256(low, k3f);
    const __m256i hd3 = pk_piece(g, 0, h, 3);
    return _mm256_or_si256(_mm256_and_si256(mins ? _mm256_srli_epi32(hd3, 4) : hd3, k0f),
                           _mm256_and_si256(_mm256_srli_epi32(low, 2), k30));
}

/* Q4_K and Q5_K (q5): groups [b0, b1) of a tile (g: the group of b0) against operand rows
 * r0 .. r0+nx-1, halves [h0, h0 + nh), added to acc[nh * r + h - h0] (nx * nh <= PK_ACC); the
 * arithmetic of k4r16_tile, with each sub-block's int16 sums widened against its scale. The
 * halves are the innermost loop, so that one operand row's broadcast bytes serve both (decode). */
SIMD_ALWAYS_INLINE void pk_k4_tile(int q5, const uint8_t *g, const uint8_t *next, size_t nb, size_t b0, size_t b1,
                                   const cpu_operand *x, size_t r0, size_t nx, int h0, int nh, __m256 *acc) {
    const size_t ng = x->n / 16, bb = q5 ? sizeof(block_q5_K) : sizeof(block_q4_K), gb = PK_ROWS * bb;
    const size_t qs_at = PK_ROWS * (q5 ? offsetof(block_q5_K, qs) : offsetof(block_q4_K, qs));
    const size_t qh_at = PK_ROWS * offsetof(block_q5_K, qh), na = nx * (size_t)nh;
    const __m256i low4 = _mm256_set1_epi8(0x0f);
    for (size_t b = b0; b < b1; b++, g += gb) {
        const uint8_t *pf = next && r0 == 0 && h0 == 0 ? next + b * gb : NULL;
        pk_prefetch_piece(pf, 0);
        if (q5)
            for (int p = 0; p < 2; p++) pk_prefetch_piece(pf, qh_at + 256 * (size_t)p);
        __m256i sum_q[PK_ACC], sum_m[PK_ACC];
        for (size_t i = 0; i < na; i++) sum_q[i] = sum_m[i] = _mm256_setzero_si256();
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++) {
            __m256i sc_lo[2], sc_hi[2], dl[PK_ACC], dh[PK_ACC];
            for (int hi = 0; hi < nh; hi++) {
                const __m256i sv = pk_k4_scales(g, h0 + hi, c / 2, 0);
                sc_lo[hi] = pk_scale_bytes(sv, (2 * c) & 3);
                sc_hi[hi] = pk_scale_bytes(sv, (2 * c + 1) & 3);
            }
            for (size_t i = 0; i < na; i++) dl[i] = dh[i] = _mm256_setzero_si256();
#pragma GCC unroll 2
            for (int p = 0; p < 2; p++) {
                const size_t at = qs_at + 256 * (size_t)(2 * c + p);
                pk_prefetch_piece(pf, at);
#pragma GCC unroll 4
                for (int j = 0; j < 4; j++) {
                    __m256i xl[PK_TILE_X], xh[PK_TILE_X];
                    for (size_t r = 0; r < nx; r++) {
                        const int8_t *xq = x->qs + (r0 + r) * x->n + b * QK_K + 64 * c + 16 * p + 4 * j;
                        xl[r] = pk_bcast32(xq);
                        xh[r] = pk_bcast32(xq + 32);
                    }
#pragma GCC unroll 2
                    for (int hi = 0; hi < nh; hi++) {
                        const __m256i d = pk_piece(g, at, h0 + hi, j);
                        __m256i lo = _mm256_and_si256(d, low4), hq = _mm256_and_si256(_mm256_srli_epi16(d, 4), low4);
                        if (q5) {
                            const __m256i qh = pk_piece(g, qh_at + 256 * (size_t)p, h0 + hi, j);
                            lo = _mm256_or_si256(lo, pk_bit_to_16(qh, 2 * c));
                            hq = _mm256_or_si256(hq, pk_bit_to_16(qh, 2 * c + 1));
                        }
                        for (size_t r = 0; r < nx; r++) {
                            const size_t i = r * (size_t)nh + (size_t)hi;
                            dl[i] = pk_acc_u8(dl[i], lo, xl[r]);
                            dh[i] = pk_acc_u8(dh[i], hq, xh[r]);
                        }
                    }
                }
                /* int16 sums: 4-bit eight pairs each, 5-bit four; int32 ones (PK_VNNI) the whole sub-block */
                if ((q5 && !PK_VNNI) || p == 1)
                    for (size_t i = 0; i < na; i++) {
                        const __m256i lo = pk_scaled(dl[i], sc_lo[i % nh]);
                        const __m256i up = pk_scaled(dh[i], sc_hi[i % nh]);
                        sum_q[i] = _mm256_add_epi32(sum_q[i], _mm256_add_epi32(lo, up));
                        dl[i] = dh[i] = _mm256_setzero_si256();
                    }
            }
        }
        /* sum_m: min s against the operand's group sums 2s and 2s+1 */
#pragma GCC unroll 2
        for (int q = 0; q < 2; q++) {
            __m256i mv[2];
            for (int hi = 0; hi < nh; hi++) mv[hi] = pk_k4_scales(g, h0 + hi, q, 1);
#pragma GCC unroll 4
            for (int s = 0; s < 4; s++)
                for (size_t r = 0; r < nx; r++) {
                    const __m256i bs = pk_bcast32(x->bsums + (r0 + r) * ng + b * (QK_K / 16) + 8 * q + 2 * s);
                    for (int hi = 0; hi < nh; hi++) {
                        const size_t i = r * (size_t)nh + (size_t)hi;
                        sum_m[i] = _mm256_add_epi32(sum_m[i], _mm256_madd_epi16(pk_byte2(mv[hi], s), bs));
                    }
                }
        }
        for (size_t r = 0; r < nx; r++)
            for (int hi = 0; hi < nh; hi++) {
                const size_t i = r * (size_t)nh + (size_t)hi;
                const __m256i hd0 = pk_piece(g, 0, h0 + hi, 0); /* d | dmin << 16 */
                const __m256 f = _mm256_sub_ps(_mm256_mul_ps(pk_lane_halves(hd0, 0), _mm256_cvtepi32_ps(sum_q[i])),
                                               _mm256_mul_ps(pk_lane_halves(hd0, 1), _mm256_cvtepi32_ps(sum_m[i])));
                acc[i] = _mm256_add_ps(acc[i], _mm256_mul_ps(_mm256_set1_ps(x->d[(r0 + r) * nb + b]), f));
            }
    }
}

/* Q6_K: as pk_k4_tile, the arithmetic of k6r16_tile (its pieces where packed_q6_k_pieces put
 * them); a group's 6-bit quants (q + 32) are summed two pairs per int16 sum. */
SIMD_ALWAYS_INLINE void pk_k6_tile(const uint8_t *g, const uint8_t *next, size_t nb, size_t b0, size_t b1,
                                   const cpu_operand *x, size_t r0, size_t nx, int h0, int nh, __m256 *acc) {
    const size_t ng = x->n / 16, gb = PK_ROWS * sizeof(block_q6_K), d_at = PK_ROWS * offsetof(block_q6_K, d);
    const size_t na = nx * (size_t)nh;
    const __m256i low4 = _mm256_set1_epi8(0x0f), top2 = _mm256_set1_epi8(0x30);
    for (size_t b = b0; b < b1; b++, g += gb) {
        const uint8_t *pf = next && r0 == 0 && h0 == 0 ? next + b * gb : NULL;
        if (pf) _mm_prefetch((const char *)(pf + d_at), _MM_HINT_T1);
        pk_prefetch_piece(pf, 0);
        /* the offset: sum_q starts at -32 sum_g sc_g bsum_g; the 16 scales are the group's first
         * piece (lane word i: scales 4i .. 4i+3) */
        __m256i sum_q[PK_ACC];
        for (size_t i = 0; i < na; i++) sum_q[i] = _mm256_setzero_si256();
#pragma GCC unroll 8
        for (int k = 0; k < 8; k++)
            for (size_t r = 0; r < nx; r++) {
                const __m256i bs = pk_bcast32(x->bsums + (r0 + r) * ng + b * (QK_K / 16) + 2 * k);
                for (int hi = 0; hi < nh; hi++) {
                    const size_t i = r * (size_t)nh + (size_t)hi;
                    const __m256i sp = pk_spair(pk_piece(g, 0, h0 + hi, k / 2), k % 2);
                    sum_q[i] = _mm256_add_epi32(sum_q[i], _mm256_madd_epi16(sp, bs));
                }
            }
        for (size_t i = 0; i < na; i++)
            sum_q[i] = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(sum_q[i], 5));
#pragma GCC unroll 4
        for (int hp = 0; hp < 4; hp++) {
            const int half = hp / 2, p = hp % 2;
            const size_t h_at = 256 * (1 + 3 * (size_t)hp);
            pk_prefetch_piece(pf, h_at);
#pragma GCC unroll 2
            for (int ab = 0; ab < 2; ab++) { /* A (kinds 0, 2), then B (kinds 1, 3) */
                const size_t l_at = 256 * (2 + 3 * (size_t)hp + (size_t)ab);
                pk_prefetch_piece(pf, l_at);
#pragma GCC unroll 2
                for (int up = 0; up < 2; up++) {
                    const int kind = ab + 2 * up, grp = 8 * half + 2 * kind + p;
                    __m256i dq[PK_ACC][2];
                    for (size_t i = 0; i < na; i++) dq[i][0] = dq[i][1] = _mm256_setzero_si256();
#pragma GCC unroll 4
                    for (int j = 0; j < 4; j++) {
                        __m256i xb[PK_TILE_X];
                        for (size_t r = 0; r < nx; r++)
                            xb[r] = pk_bcast32(x->qs + (r0 + r) * x->n + b * QK_K + 128 * half + 32 * kind + 16 * p +
                                               4 * j);
#pragma GCC unroll 2
                        for (int hi = 0; hi < nh; hi++) {
                            const __m256i lb = pk_piece(g, l_at, h0 + hi, j), hb = pk_piece(g, h_at, h0 + hi, j);
                            const __m256i nib = up ? _mm256_and_si256(_mm256_srli_epi16(lb, 4), low4)
                                                   : _mm256_and_si256(lb, low4);
                            /* bits 2 kind, 2 kind + 1 of H to bits 4, 5 */
                            const __m256i top = kind == 0   ? _mm256_slli_epi16(hb, 4)
                                                : kind == 1 ? _mm256_slli_epi16(hb, 2)
                                                : kind == 2 ? hb
                                                            : _mm256_srli_epi16(hb, 2);
                            const __m256i q = _mm256_or_si256(nib, _mm256_and_si256(top, top2));
                            for (size_t r = 0; r < nx; r++) {
                                __m256i *d = &dq[r * (size_t)nh + (size_t)hi][j / 2];
                                *d = pk_acc_u8(*d, q, xb[r]);
                            }
                        }
                    }
                    for (int hi = 0; hi < nh; hi++) {
                        const __m256i scg = pk_sscale_bytes(pk_piece(g, 0, h0 + hi, grp / 4), grp % 4);
                        for (size_t r = 0; r < nx; r++) {
                            const size_t i = r * (size_t)nh + (size_t)hi;
                            /* int32 sums (PK_VNNI) are added first: one multiply */
                            const __m256i sq = PK_VNNI ? pk_scaled(_mm256_add_epi32(dq[i][0], dq[i][1]), scg)
                                                       : _mm256_add_epi32(pk_scaled(dq[i][0], scg),
                                                                          pk_scaled(dq[i][1], scg));
                            sum_q[i] = _mm256_add_epi32(sum_q[i], sq);
                        }
                    }
                }
            }
        }
        for (size_t r = 0; r < nx; r++)
            for (int hi = 0; hi < nh; hi++) {
                const size_t i = r * (size_t)nh + (size_t)hi;
                const __m256 d_w = load_f16x8(g + d_at + 16 * (h0 + hi));
                acc[i] = _mm256_add_ps(acc[i], _mm256_mul_ps(_mm256_set1_ps(x->d[(r0 + r) * nb + b]),
                                                             _mm256_mul_ps(d_w, _mm256_cvtepi32_ps(sum_q[i]))));
            }
    }
}

/* ---------------------------------------------------------------- IQ4_XS */

/* IQ4_XS: as pk_k4_tile, the arithmetic of xs16_tile (gemm_iq4_xs_rows16.h). Each
 * sub-block is an IQ4_NL block (its 16 quant bytes, vectors 2 + 4 ib .. of the group), dotted
 * by the sign trick; vpmaddwd widens the pair sums against the lane's factor ls - 32 in both
 * int16 halves, so the factor's multiply is free, and the super-block's exact int32 sum is
 * scaled once, sum += (float)isum * (d_w * d_x). */
SIMD_ALWAYS_INLINE void pk_xs_tile(const uint8_t *g, const uint8_t *next, size_t nb, size_t b0, size_t b1,
                                   const cpu_operand *x, size_t r0, size_t nx, int h0, int nh, __m256 *acc) {
    const size_t gb = PK_ROWS * sizeof(block_iq4_xs), na = nx * (size_t)nh;
    const size_t qs_vec = offsetof(block_iq4_xs, qs) / 4; /* the group's vector of qs bytes 0-3 */
    for (size_t b = b0; b < b1; b++, g += gb) {
        if (next && r0 == 0 && h0 == 0) prefetch_span((uintptr_t)next + b * gb, gb, 1);
        __m256i isum[PK_ACC];
        for (size_t i = 0; i < na; i++) isum[i] = _mm256_setzero_si256();
#pragma GCC unroll 1
        for (int ib = 0; ib < QK_K / 32; ib++) {
            /* lane words d | scales_h << 16 (vector 0), then scales_l (vector 1) */
            __m256i factor[2];
            for (int hi = 0; hi < nh; hi++) {
                const __m256i hd = pk_piece(g, 0, h0 + hi, 0), low = pk_piece(g, 0, h0 + hi, 1);
                const __m256i lo4 = _mm256_and_si256(_mm256_srli_epi32(low, 4 * ib), _mm256_set1_epi32(15));
                const __m256i hi2 = _mm256_and_si256(_mm256_srli_epi32(hd, 16 + 2 * ib), _mm256_set1_epi32(3));
                const __m256i f = _mm256_sub_epi32(_mm256_or_si256(lo4, _mm256_slli_epi32(hi2, 4)),
                                                   _mm256_set1_epi32(32));
                factor[hi] = PK_VNNI ? f : _mm256_or_si256(_mm256_and_si256(f, _mm256_set1_epi32(0xffff)),
                                                           _mm256_slli_epi32(f, 16));
            }
#if PK_VNNI
            /* the sub-block's sums of (w + 128) x, less 128 times its operand quant sum, times the factor */
            __m256i sub[PK_ACC];
            for (size_t i = 0; i < na; i++) sub[i] = _mm256_setzero_si256();
#endif
#pragma GCC unroll 4
            for (int j = 0; j < 4; j++)
#pragma GCC unroll 2
                for (int hi = 0; hi < nh; hi++) {
                    pk_signed_vec lo, up;
                    pk_signed_weights(R16_IQ4_NL, g + 64 * (qs_vec + 4 * (size_t)ib), h0 + hi, j, &lo, &up);
                    for (size_t r = 0; r < nx; r++) {
                        const int8_t *xq = x->qs + (r0 + r) * x->n + b * QK_K + 32 * ib + 4 * j;
#if PK_VNNI
                        __m256i *s = &sub[r * (size_t)nh + (size_t)hi];
                        *s = pk_signed_dot(pk_signed_dot(*s, lo, pk_bcast32(xq)), up, pk_bcast32(xq + 16));
#else
                        __m256i *s = &isum[r * (size_t)nh + (size_t)hi];
                        *s = pk_signed_dot_times(pk_signed_dot_times(*s, lo, pk_bcast32(xq), factor[hi]), up,
                                                 pk_bcast32(xq + 16), factor[hi]);
#endif
                    }
                }
#if PK_VNNI
            for (size_t r = 0; r < nx; r++) {
                const int16_t *bs = x->bsums + (r0 + r) * (x->n / 16) + b * (QK_K / 16) + 2 * ib;
                const __m256i off = _mm256_set1_epi32(pk_offset(R16_IQ4_NL) * (bs[0] + bs[1]));
                for (int hi = 0; hi < nh; hi++) {
                    const size_t i = r * (size_t)nh + (size_t)hi;
                    isum[i] = _mm256_add_epi32(isum[i], pk_scaled(_mm256_sub_epi32(sub[i], off), factor[hi]));
                }
            }
#endif
        }
        for (size_t r = 0; r < nx; r++)
            for (int hi = 0; hi < nh; hi++) {
                const size_t i = r * (size_t)nh + (size_t)hi;
                const __m256 d_w = pk_lane_halves(pk_piece(g, 0, h0 + hi, 0), 0);
                const __m256 scale = _mm256_mul_ps(d_w, _mm256_set1_ps(x->d[(r0 + r) * nb + b]));
                acc[i] = _mm256_add_ps(acc[i], _mm256_mul_ps(_mm256_cvtepi32_ps(isum[i]), scale));
            }
    }
}

/* ---------------------------------------------------------------- the walk */

/* the legacy and IQ4_NL kinds (blocks of 32) first */
typedef enum pk_kind {
    PK_Q4_0, PK_Q5_0, PK_Q4_1, PK_Q5_1, PK_Q8_0, PK_IQ4_NL, PK_Q4_K, PK_Q5_K, PK_Q6_K, PK_IQ4_XS
} pk_kind;

SIMD_ALWAYS_INLINE int pk_legacy(pk_kind k) { return k <= PK_IQ4_NL; }

SIMD_ALWAYS_INLINE r16_kind pk_legacy_kind(pk_kind k) {
    static const r16_kind kinds[] = {[PK_Q4_0] = R16_Q4_0, [PK_Q5_0] = R16_Q5_0, [PK_Q4_1] = R16_Q4_1,
                                     [PK_Q5_1] = R16_Q5_1, [PK_Q8_0] = R16_Q8_0, [PK_IQ4_NL] = R16_IQ4_NL};
    return kinds[k];
}

SIMD_ALWAYS_INLINE size_t pk_block_size(pk_kind k) { return pk_legacy(k) ? QK8_0 : QK_K; }
SIMD_ALWAYS_INLINE size_t pk_tile_x(pk_kind k) { return pk_legacy(k) ? PK_LEGACY_TILE_X : PK_TILE_X; }

/* Groups [b0, b1) of one tile (g: the group of b0) against operand rows r0 .. r0+nx-1, halves
 * [h0, h0 + nh), added to acc. */
SIMD_ALWAYS_INLINE void pk_tile(pk_kind kind, const uint8_t *g, const uint8_t *next, size_t b0, size_t b1,
                                const cpu_operand *x, size_t r0, size_t nx, int h0, int nh, __m256 *acc) {
    const size_t nb = x->n / pk_block_size(kind);
    if (kind == PK_Q6_K) pk_k6_tile(g, next, nb, b0, b1, x, r0, nx, h0, nh, acc);
    else if (kind == PK_IQ4_XS) pk_xs_tile(g, next, nb, b0, b1, x, r0, nx, h0, nh, acc);
    else if (kind == PK_Q4_K || kind == PK_Q5_K)
        pk_k4_tile(kind == PK_Q5_K, g, next, nb, b0, b1, x, r0, nx, h0, nh, acc);
    else if (pk_signed(pk_legacy_kind(kind)))
        pk_signed_tile(pk_legacy_kind(kind), g, next, nb, b0, b1, x, r0, nx, h0, nh, acc);
    else pk_legacy_tile(pk_legacy_kind(kind), g, next, nb, b0, b1, x, r0, nx, h0, nh, acc);
}

/* All operand rows against one tile of a packed copy (base); lanes [l0, l0 + nl) in row order go
 * to out columns j ... One operand row (decode) takes both halves block by block, so the copy
 * streams through once; more take a half at a time, PK_TILE_X rows per pass (the legacy
 * kinds: PK_LEGACY_TILE_X, or all of up to PK_BATCH_X). */
SIMD_ALWAYS_INLINE void pk_rows(pk_kind kind, const uint8_t *base, const uint8_t *next, size_t l0, size_t nl, size_t j,
                                const cpu_operand *x, size_t n_rows, float *out, size_t ldo) {
    const size_t nb = x->n / pk_block_size(kind);
    const size_t tx = pk_tile_x(kind);
    if (n_rows == 1) {
        __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
        pk_tile(kind, base, next, 0, nb, x, 0, 1, 0, 2, acc);
        pk_store(acc[0], acc[1], out + j, l0, nl);
        return;
    }
    if (pk_legacy(kind) && n_rows > PK_LEGACY_TILE_X && n_rows <= PK_BATCH_X) {
        __m256 acc[2][PK_BATCH_X];
        for (int h = 0; h < 2; h++) {
            for (size_t r = 0; r < n_rows; r++) acc[h][r] = _mm256_setzero_ps();
            pk_tile(kind, base, next, 0, nb, x, 0, n_rows, h, 1, acc[h]);
        }
        for (size_t r = 0; r < n_rows; r++) pk_store(acc[0][r], acc[1][r], out + r * ldo + j, l0, nl);
        return;
    }
    for (size_t r0 = 0; r0 < n_rows; r0 += tx) {
        const size_t nx = LLMM_MIN(tx, n_rows - r0);
        __m256 acc[2][PK_LEGACY_TILE_X];
        for (int h = 0; h < 2; h++) {
            for (size_t r = 0; r < nx; r++) acc[h][r] = _mm256_setzero_ps();
            if (nx == tx) pk_tile(kind, base, next, 0, nb, x, r0, tx, h, 1, acc[h]);
            else pk_tile(kind, base, next, 0, nb, x, r0, nx, h, 1, acc[h]);
        }
        for (size_t r = 0; r < nx; r++) pk_store(acc[0][r], acc[1][r], out + (r0 + r) * ldo + j, l0, nl);
    }
}

/* The tiles of rows [j0, j1) of a packed copy (w->data the copy, w->ne1 its whole tiles' rows),
 * walked as every kernel walks them (kernels/gemm_tiles.h). */
SIMD_ALWAYS_INLINE void gemm_pk(pk_kind kind, const llmm_tensor *w, size_t j0, size_t j1, const cpu_operand *x,
                                size_t n_rows, float *out, size_t ldo) {
#define PK_CALL(base, rb, next, l0, nl, j) pk_rows(kind, base, next, l0, nl, j, x, n_rows, out, ldo)
    GEMM_WALK_TILES(w, j0, j1, PK_ROWS, PK_CALL);
#undef PK_CALL
}

/* ---------------------------------------------------------------- the packer */

/* packed_piece_fn on 256-bit vectors: half h of the group's vectors (lanes 8h .. 8h+7) holds
 * rows 2h + 4i (lanes 8h + i) and 2h + 1 + 4i (lanes 8h + 4 + i), i < 4, so each 128-bit part
 * is a 4 x 4 transposition of 32-bit words of four rows' pieces, two at once, where the scalar
 * reference moves 4 bytes lane by lane. Even so, page faults and the matrices not yet packed,
 * not this, take most of a step that packs. */
static void pk_pack_piece(const uint8_t *const blk[PACKED_TILE_ROWS], size_t at, uint32_t flip, uint8_t *out) {
    const __m256i x = _mm256_set1_epi32((int)flip);
    for (int h = 0; h < 2; h++) {
        __m256i z[4];
        for (int i = 0; i < 4; i++)
            z[i] = _mm256_loadu2_m128i((const __m128i *)(const void *)(blk[2 * h + 1 + 4 * i] + at),
                                       (const __m128i *)(const void *)(blk[2 * h + 4 * i] + at));
        const __m256i a = _mm256_unpacklo_epi32(z[0], z[1]), b = _mm256_unpackhi_epi32(z[0], z[1]);
        const __m256i c = _mm256_unpacklo_epi32(z[2], z[3]), e = _mm256_unpackhi_epi32(z[2], z[3]);
        const __m256i t[4] = {_mm256_unpacklo_epi64(a, c), _mm256_unpackhi_epi64(a, c), _mm256_unpacklo_epi64(b, e),
                              _mm256_unpackhi_epi64(b, e)};
        for (int j = 0; j < 4; j++)
            _mm256_storeu_si256((__m256i *)(void *)(out + 64 * j + 32 * h), _mm256_xor_si256(t[j], x));
    }
}

/* cpu_kernels.pack_tiles of the AVX2 table */
static void pack_tiles_packed8(const llmm_tensor *w, size_t t0, size_t t1, uint8_t *copy) {
    llmm__packed_tiles_pack_with(w, t0, t1, copy, pk_pack_piece);
}

/* ---------------------------------------------------------------- prompts without a copy */

/* Operand rows that share one packed segment of a tile, and the segment's bytes (on the stack,
 * with the rows' accumulators: 16 KiB). Packing a segment costs about one pass of
 * PK_LEGACY_TILE_X rows over it, so it is shared by many (with 64 rows it was still a visible
 * share of a prompt). */
#define PK_FLY_ROWS 128
#define PK_FLY_BYTES 8192

SIMD_ALWAYS_INLINE uint32_t pk_type(pk_kind k) {
    static const uint32_t types[] = {
        [PK_Q4_0] = LLMM_TYPE_Q4_0, [PK_Q5_0] = LLMM_TYPE_Q5_0,     [PK_Q4_1] = LLMM_TYPE_Q4_1,
        [PK_Q5_1] = LLMM_TYPE_Q5_1, [PK_Q8_0] = LLMM_TYPE_Q8_0,     [PK_IQ4_NL] = LLMM_TYPE_IQ4_NL,
        [PK_Q4_K] = LLMM_TYPE_Q4_K, [PK_Q5_K] = LLMM_TYPE_Q5_K,     [PK_Q6_K] = LLMM_TYPE_Q6_K,
        [PK_IQ4_XS] = LLMM_TYPE_IQ4_XS};
    return types[k];
}
SIMD_ALWAYS_INLINE size_t pk_block_bytes(pk_kind k) { return llmm_type_block_bytes(pk_type(k)); }

/* Fewer operand rows than this keep the 8-row kernels (a speculative verify step, a few sequences
 * decoded together, a prompt). Packing a tile on the fly costs a fixed amount per call (Q5_0
 * and Q5_1 the most: their 5th bits are regrouped lane by lane), and the packed tiles save a
 * little per operand row, so the switch pays only from the row count where the savings cover
 * the packing: for the K-quants at once (their 8-row kernels are the slowest per row), for Q4_0
 * from a prompt's worth. On the AVX2 table the other 32-quant kinds never switch: their 8-row
 * kernels take a prompt in batches of up to 16 rows per pass (q_batch_rows), which counted
 * 0.5-0.8x the instructions of the tiles packed on the fly at 16 to 128 rows (Q8_0 0.55, Q5_0
 * 0.56, Q5_1 0.55, IQ4_NL 0.63, Q4_1 0.77 at 128 rows; Q4_0 0.82, yet timed 4-8 % slower, so it
 * keeps its switch). Measured per kind on the 0.5B model's shapes, docs/performance.md ("Steps
 * of 2-16 rows", "AVX2 prompts"). */
#define PK_FLY_NEVER SIZE_MAX
SIMD_ALWAYS_INLINE size_t pk_fly_min_rows(pk_kind k) {
#if PK_VNNI
    static const size_t rows[] = {[PK_Q4_0] = 8,  [PK_Q5_0] = 24, [PK_Q4_1] = 8, [PK_Q5_1] = 24, [PK_Q8_0] = 12,
                                  [PK_IQ4_NL] = 8, [PK_Q4_K] = 4, [PK_Q5_K] = 4, [PK_Q6_K] = 8, [PK_IQ4_XS] = 4};
#else
    static const size_t rows[] = {[PK_Q4_0] = 24,           [PK_Q5_0] = PK_FLY_NEVER, [PK_Q4_1] = PK_FLY_NEVER,
                                  [PK_Q5_1] = PK_FLY_NEVER, [PK_Q8_0] = PK_FLY_NEVER, [PK_IQ4_NL] = PK_FLY_NEVER,
                                  [PK_Q4_K] = 12,           [PK_Q5_K] = 12,           [PK_Q6_K] = 32,
                                  [PK_IQ4_XS] = 4};
#endif
    return rows[k];
}

/* All operand rows against the 16 weight rows base + i * rb as stored: each segment of the
 * tile's blocks packed into a buffer (llmm__packed_tiles_pack_groups), once per PK_FLY_ROWS operand
 * rows, and the packed tiles run over it. For the first prompt, before decode steps make the
 * copies (or without them: repack_weights 0, no file mapping), on the AVX2 table, whose 8-row
 * kernels compute about half as fast. */
/* The source bytes of blocks [b0, b1) of rows [r0, r1) of the 16 at base (rb apart) to L2. */
SIMD_ALWAYS_INLINE void pk_fly_prefetch(const uint8_t *base, size_t rb, size_t bb, size_t b0, size_t b1, size_t r0,
                                        size_t r1) {
    for (size_t r = r0; r < r1; r++)
        for (size_t o = b0 * bb; o < b1 * bb; o += 64) _mm_prefetch((const char *)(base + r * rb + o), _MM_HINT_T1);
}

SIMD_ALWAYS_INLINE void pk_fly_rows(pk_kind kind, const uint8_t *base, size_t rb, const uint8_t *next, size_t l0,
                                    size_t nl, size_t j, const cpu_operand *x, size_t n_rows, float *out, size_t ldo) {
    const size_t nb = x->n / pk_block_size(kind), gb = PK_ROWS * pk_block_bytes(kind), tx = pk_tile_x(kind);
    const size_t seg = PK_FLY_BYTES / gb; /* at least 2: a Q6_K group is 3360 bytes */
    _Alignas(32) uint8_t buf[PK_FLY_BYTES];
    for (size_t rb0 = 0; rb0 < n_rows; rb0 += PK_FLY_ROWS) {
        const size_t nr = LLMM_MIN((size_t)PK_FLY_ROWS, n_rows - rb0);
        __m256 acc[2][PK_FLY_ROWS];
        for (size_t r = 0; r < nr; r++) acc[0][r] = acc[1][r] = _mm256_setzero_ps();
        for (size_t b0 = 0; b0 < nb; b0 += seg) {
            const size_t b1 = LLMM_MIN(nb, b0 + seg);
            llmm__packed_tiles_pack_groups(pk_type(kind), base, rb, b0, b1, pk_pack_piece, buf);
            /* what the next packing reads (the next segment, or the next tile's first), to L2 a
             * few rows per pass while the passes run over this one: without, the packer's loads
             * waited on memory (a third of its time in a 0.5B Q4_0 prompt); in one burst per
             * segment, no better */
            const uint8_t *pf_base = b1 < nb ? base : rb0 + PK_FLY_ROWS >= n_rows ? next : NULL;
            const size_t pf_b0 = b1 < nb ? b1 : 0, pf_rows = rb ? PK_ROWS : 1;
            const size_t passes = (nr + tx - 1) / tx, per_pass = (pf_rows + passes - 1) / passes;
            for (size_t r0 = rb0; r0 < rb0 + nr; r0 += tx) {
                const size_t nx = LLMM_MIN(tx, rb0 + nr - r0), pass = (r0 - rb0) / tx;
                if (pf_base && pass * per_pass < pf_rows)
                    pk_fly_prefetch(pf_base, rb, pk_block_bytes(kind), pf_b0, LLMM_MIN(nb, pf_b0 + seg),
                                    pass * per_pass, LLMM_MIN(pf_rows, (pass + 1) * per_pass));
                for (int h = 0; h < 2; h++) {
                    /* in registers over the segment (through acc, a load and a store per block) */
                    __m256 a[PK_LEGACY_TILE_X];
                    for (size_t r = 0; r < nx; r++) a[r] = acc[h][r0 - rb0 + r];
                    if (nx == tx) pk_tile(kind, buf, NULL, b0, b1, x, r0, tx, h, 1, a);
                    else pk_tile(kind, buf, NULL, b0, b1, x, r0, nx, h, 1, a);
                    for (size_t r = 0; r < nx; r++) acc[h][r0 - rb0 + r] = a[r];
                }
            }
        }
        for (size_t r = 0; r < nr; r++) pk_store(acc[0][r], acc[1][r], out + (rb0 + r) * ldo + j, l0, nl);
    }
}

/* The tiles of rows [j0, j1) of weights as stored through pk_fly_rows (kernels/gemm_tiles.h's walk). */
SIMD_ALWAYS_INLINE void gemm_pk_fly(pk_kind kind, const llmm_tensor *w, size_t j0, size_t j1, const cpu_operand *x,
                                    size_t n_rows, float *out, size_t ldo) {
#define PK_FLY_CALL(base, rb, next, l0, nl, j) pk_fly_rows(kind, base, rb, next, l0, nl, j, x, n_rows, out, ldo)
    GEMM_WALK_TILES(w, j0, j1, PK_ROWS, PK_FLY_CALL);
#undef PK_FLY_CALL
}

/* The AVX2 table's matmul for a packable type: ROWS8 (its 8-row kernel) for fewer than
 * pk_fly_min_rows(KIND) operand rows, gemm_pk_fly for more; both bit for bit the type table's. */
#define PK_GEMM_AS_STORED(NAME, ROWS8, KIND)                                                                 \
    static void NAME(const llmm_tensor *w, size_t j0, size_t j1, const cpu_operand *x, size_t n_rows,         \
                     float *out, size_t ldo) {                                                              \
        if (n_rows < pk_fly_min_rows(KIND)) ROWS8(w, j0, j1, x, n_rows, out, ldo);                           \
        else gemm_pk_fly(KIND, w, j0, j1, x, n_rows, out, ldo);                                              \
    }

GEMM_FN_FOR_KIND(gemm_q4_0_packed8, gemm_pk, PK_Q4_0)
GEMM_FN_FOR_KIND(gemm_q5_0_packed8, gemm_pk, PK_Q5_0)
GEMM_FN_FOR_KIND(gemm_q4_1_packed8, gemm_pk, PK_Q4_1)
GEMM_FN_FOR_KIND(gemm_q5_1_packed8, gemm_pk, PK_Q5_1)
GEMM_FN_FOR_KIND(gemm_q8_0_packed8, gemm_pk, PK_Q8_0)
GEMM_FN_FOR_KIND(gemm_iq4_nl_packed8, gemm_pk, PK_IQ4_NL)
GEMM_FN_FOR_KIND(gemm_q4_K_packed8, gemm_pk, PK_Q4_K)
GEMM_FN_FOR_KIND(gemm_q5_K_packed8, gemm_pk, PK_Q5_K)
GEMM_FN_FOR_KIND(gemm_q6_K_packed8, gemm_pk, PK_Q6_K)
GEMM_FN_FOR_KIND(gemm_iq4_xs_packed8, gemm_pk, PK_IQ4_XS)

/* A table's matmul_packed and pack_tiles entries (designated initializers of a cpu_kernels) */
#define PK_PACKED8_ENTRIES                                                                                  \
    .matmul_packed = {[LLMM_TYPE_Q4_0] = gemm_q4_0_packed8,   [LLMM_TYPE_Q5_0] = gemm_q5_0_packed8,           \
                      [LLMM_TYPE_Q4_1] = gemm_q4_1_packed8,   [LLMM_TYPE_Q5_1] = gemm_q5_1_packed8,           \
                      [LLMM_TYPE_Q8_0] = gemm_q8_0_packed8,   [LLMM_TYPE_IQ4_NL] = gemm_iq4_nl_packed8,       \
                      [LLMM_TYPE_Q4_K] = gemm_q4_K_packed8,   [LLMM_TYPE_Q5_K] = gemm_q5_K_packed8,           \
                      [LLMM_TYPE_Q6_K] = gemm_q6_K_packed8,   [LLMM_TYPE_IQ4_XS] = gemm_iq4_xs_packed8},      \
    .pack_tiles = pack_tiles_packed8

#endif
