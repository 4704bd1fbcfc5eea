/* Q4_0, Q5_0, Q8_0 and IQ4_NL weights times Q8 operand rows, and Q4_1 and Q5_1 times Q8_1 ones,
 * on 512-bit vectors, 16 weight rows per tile, one row per int32 lane: for avx512.c,
 * included after gemm_int8.h (whose scale gather order, prefetch and tile walk it
 * follows); gives gemm_q4_0_rows16, gemm_q5_0_rows16, gemm_q8_0_rows16, gemm_q4_1_rows16,
 * gemm_q5_1_rows16 and gemm_iq4_nl_rows16 (cpu_gemm_fn). Used for two operand rows and more (prefill, several
 * sequences), and for Q5_0, Q4_1 and Q5_1 always (see avx512.c). The same tiles over
 * packed copies (packed_tiles.h), whose blocks need loads where these transpose, are the
 * gemm_*_packed16 kernels, and their packer pack_tiles_rows16 the transposition, stored.
 *
 * Why: the 8-row tiles of gemm_int8.h put two weight rows (or one) in a 256-bit vector, so
 * every block's eight row sums must be gathered from four (or eight) lanes each with
 * horizontal adds, and a 256-bit vpdpbusd does half the work of a 512-bit one at about the same
 * rate on Zen 4, where vphaddd costs twice either. Here each
 * block of the 16 rows is transposed in registers, four bytes at a time (lane q of D_j below
 * holds bytes 4j..4j+3 of row rows16_row(q)), so vpdpbusd against the operand's bytes
 * 4j..4j+3, broadcast, adds four products of one row into that row's own lane: eight of them
 * leave every row's block sum in its lane, with no horizontal step. The transposition (loads
 * with inserts, then unpacks) is paid once per block and shared by all the operand rows of a
 * tile; for one operand row it costs more than it saves for Q4_0 and Q8_0, whose decode keeps
 * the 8-row tiles (docs/performance.md, "CPU kernel choices").
 *
 * Numerics are the 8-row kernels': per lane (one weight row), blocks in order,
 * sum += (float)(isum - o sum(x)) * (d_w * d_x) without FMA, o the offset that made the
 * quants unsigned (8, 16, 128), or for Q4_1 / Q5_1 sum += (float)isum * (d_w * d_x) + m_w *
 * s_x, so bit-identical to the scalar vec_dot. Q4_0's quants are kept
 * times 16 by masks, as prep_q4_0_pair does (at most 32 x 240 x 128 per block sum), and
 * divided out before the conversion. */
#ifndef LLMM_GEMM_ROWS16_AVX512_H
#define LLMM_GEMM_ROWS16_AVX512_H

#ifndef LLMM_GEMM_INT8_X86_H
#error "include gemm_int8.h before gemm_rows16.h"
#endif

#include "kernels/block_kinds.h"
#include "packed_tiles.h"

#define R16_ROWS PACKED_TILE_ROWS
/* operand rows per tile: 16 accumulators, the block's 8 weight vectors and one dot chain fit
 * the 32 registers, and 16 rows measured faster than Q_TILE_X's 8 (docs/performance.md, "CPU kernel choices, measured");
 * the K-quant tiles, with twice the accumulators, keep Q_TILE_X */
#define R16_TILE_X 16
/* blocks whose scales are gathered at a time: 2 KiB on the stack (a row of 64 blocks, 2048
 * values, is gathered once per tile; longer rows once per segment and tile of operand rows) */
#define R16_SEG 64

SIMD_ALWAYS_INLINE int r16_nibbles_x16(r16_kind k) { return k == R16_Q4_0 || k == R16_Q4_1; }
/* the types whose one-row (decode) tiles take their scales from the block heads, transposed
 * per block (rows16_q5_0_head, rows16_min_head), instead of a gather pass per tile */
SIMD_ALWAYS_INLINE int r16_heads_per_block(r16_kind k) { return k == R16_Q5_0 || r16_has_min(k); }

/* The row whose values lane q holds after the transposition (and the lane of row q: the
 * mapping is its own inverse): 128-bit lane l of the m-th loaded vector holds row 4m + l, and
 * the unpacks leave row l + 4p at position 4l + p. Packed copies keep the same order. */
SIMD_ALWAYS_INLINE size_t rows16_row(size_t q) { return packed_lane_row(q); }

/* The f16 scales (and mins) of blocks [b0, b0 + n) of the 16 rows, and for Q5_0 / Q5_1 their
 * 32-bit words of 5th bits, row by row in address order (the tile's first touch, see
 * gather_scales), each row's stored at its lane. Not for one-row tiles of the types
 * r16_heads_per_block names. */
SIMD_ALWAYS_INLINE void gather_fields16(r16_kind kind, const uint8_t *base, size_t rb, size_t b0, size_t n,
                                        uint16_t dws[R16_SEG][R16_ROWS], uint16_t mws[R16_SEG][R16_ROWS],
                                        uint32_t qhs[R16_SEG][R16_ROWS]) {
    const size_t bb = r16_block_bytes(kind);
    for (size_t i = 0; i < R16_ROWS; i++) {
        const uint8_t *p = base + i * rb + b0 * bb;
        uint16_t *restrict d = &dws[0][rows16_row(i)];
        if (r16_has_min(kind)) {
            uint16_t *restrict m = &mws[0][rows16_row(i)];
            uint32_t *restrict h = &qhs[0][rows16_row(i)];
#pragma GCC unroll 4
            for (size_t k = 0; k < n; k++) {
                d[k * R16_ROWS] = load_u16(p + k * bb);
                m[k * R16_ROWS] = load_u16(p + k * bb + offsetof(block_q4_1, m));
                if (r16_five_bits(kind)) memcpy(&h[k * R16_ROWS], p + k * bb + r16_qh_offset(kind), sizeof *h);
            }
        } else if (kind == R16_Q5_0) {
            uint32_t *restrict h = &qhs[0][rows16_row(i)];
#pragma GCC unroll 4
            for (size_t k = 0; k < n; k++) {
                d[k * R16_ROWS] = load_u16(p + k * bb);
                memcpy(&h[k * R16_ROWS], p + k * bb + offsetof(block_q5_0, qh), sizeof *h);
            }
        } else {
#pragma GCC unroll 4
            for (size_t k = 0; k < n; k++) d[k * R16_ROWS] = load_u16(p + k * bb);
        }
    }
}

/* d[j]: lane q holds bytes 4j..4j+3 of the 16 bytes at p + rows16_row(q) * rb. */
SIMD_ALWAYS_INLINE void rows16_transpose(const uint8_t *p, size_t rb, __m512i d[4]) {
    __m512i z[4];
#pragma GCC unroll 4
    for (int m = 0; m < 4; m++) {
        const uint8_t *r = p + (size_t)(4 * m) * rb;
        __m512i v = _mm512_castsi128_si512(load_128(r));
        v = _mm512_inserti32x4(v, load_128(r + rb), 1);
        v = _mm512_inserti32x4(v, load_128(r + 2 * rb), 2);
        z[m] = _mm512_inserti32x4(v, load_128(r + 3 * rb), 3);
    }
    const __m512i a = _mm512_unpacklo_epi32(z[0], z[1]), c = _mm512_unpacklo_epi32(z[2], z[3]);
    const __m512i b = _mm512_unpackhi_epi32(z[0], z[1]), e = _mm512_unpackhi_epi32(z[2], z[3]);
    d[0] = _mm512_unpacklo_epi64(a, c);
    d[1] = _mm512_unpackhi_epi64(a, c);
    d[2] = _mm512_unpacklo_epi64(b, e);
    d[3] = _mm512_unpackhi_epi64(b, e);
}

/* Q5_0 decode: the scales (widened) and 5th-bit words of one block of the 16 rows, by lane,
 * from the block's first 8 bytes (d, then qh) transposed like the quants. With one operand row
 * the gather pass (two stores per row and block) cost a few per cent of a Q5_0-heavy decode;
 * with many it is shared by all of them, and the transposition per block and tile of operand
 * rows would cost more. */
SIMD_ALWAYS_INLINE void rows16_q5_0_head(const uint8_t *blk, size_t rb, __m512 *d_w, __m512i *qh) {
    __m512i d[4];
    rows16_transpose(blk, rb, d); /* d[2], d[3] unused: the compiler drops them */
    *d_w = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(d[0]));
    *qh = _mm512_or_si512(_mm512_srli_epi32(d[0], 16), _mm512_slli_epi32(d[1], 16));
}

/* Q4_1 / Q5_1 decode: as rows16_q5_0_head, the scale, min (and Q5_1's 5th-bit words) of one
 * block of the 16 rows from the block's first 8 bytes (d, m, then qh). */
SIMD_ALWAYS_INLINE void rows16_min_head(const uint8_t *blk, size_t rb, __m512 *d_w, __m512 *m_w, __m512i *qh) {
    __m512i d[4];
    rows16_transpose(blk, rb, d); /* d[2], d[3] (and for Q4_1 d[1]) unused */
    *d_w = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(d[0]));
    *m_w = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(d[0], 16)));
    *qh = d[1];
}

/* The 5th bits of the 16 rows' words h (by lane) as byte masks: m[j] bit 4q + k = bit 4j + k
 * of lane q's word (the weights of w[j] below), m[j + 4] bit 16 + 4j + k. Weight 4j + k of a
 * row has bit 4j + k of its word: byte j / 2 of the lane, copied to all four bytes of the lane
 * by the shuffle, then bit k + 4 (j % 2) of byte k tested. */
SIMD_ALWAYS_INLINE void rows16_fifth_bits(__m512i h, __mmask64 m[8]) {
    /* by[c]: byte c of each lane's word in all four bytes of the lane (the shuffle indexes
     * within 128 bits: lane i of a 128-bit part starts at byte 4i) */
    const __m512i first = _mm512_set4_epi32(0x0c0c0c0c, 0x08080808, 0x04040404, 0x00000000);
    __m512i by[4];
#pragma GCC unroll 4
    for (int c = 0; c < 4; c++)
        by[c] = _mm512_shuffle_epi8(h, _mm512_add_epi8(first, _mm512_set1_epi8((char)c)));
    const __m512i bits_lo = _mm512_set1_epi32(0x08040201), bits_hi = _mm512_set1_epi32((int)0x80402010);
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) {
        m[j] = _mm512_test_epi8_mask(by[j / 2], (j & 1) ? bits_hi : bits_lo);
        m[j + 4] = _mm512_test_epi8_mask(by[2 + j / 2], (j & 1) ? bits_hi : bits_lo);
    }
}

/* Block b of the 16 rows as unsigned bytes, transposed: w[j] holds each row's weights 4j..4j+3
 * (for the nibble types w[j + 4] is the high nibbles of w[j]'s bytes). h: the rows' 5th-bit
 * words (Q5_0, Q5_1), by lane. Q4_0 and Q4_1 come out times 16 (see the top). */
SIMD_ALWAYS_INLINE void rows16_block(r16_kind kind, const uint8_t *blk, size_t rb, __m512i h, __m512i w[8]) {
    __m512i d[4];
    rows16_transpose(blk + r16_qs_offset(kind), rb, d);
    if (kind == R16_Q8_0) {
        /* + 128 (the sign bit flipped), as prep_q8_0 */
        const __m512i sign = _mm512_set1_epi8((char)0x80);
        __m512i d_hi[4];
        rows16_transpose(blk + r16_qs_offset(kind) + 16, rb, d_hi);
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++) {
            w[j] = _mm512_xor_si512(d[j], sign);
            w[j + 4] = _mm512_xor_si512(d_hi[j], sign);
        }
        return;
    }
    if (kind == R16_IQ4_NL) {
        /* the codebook's int8 values + 128 (sign bit flipped), as Q8_0's quants, looked up by
         * nibble; the shuffle indexes within each 128-bit part, so the table is in all four */
        const __m512i values = _mm512_xor_si512(_mm512_broadcast_i32x4(load_128(llmm__iq4_values)),
                                                _mm512_set1_epi8((char)0x80));
        const __m512i low4 = _mm512_set1_epi8(0x0f);
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++) {
            w[j] = _mm512_shuffle_epi8(values, _mm512_and_si512(d[j], low4));
            w[j + 4] = _mm512_shuffle_epi8(values, _mm512_and_si512(_mm512_srli_epi16(d[j], 4), low4));
        }
        return;
    }
    if (r16_nibbles_x16(kind)) {
        const __m512i mask = _mm512_set1_epi8((char)0xf0);
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++) {
            w[j] = _mm512_and_si512(_mm512_slli_epi16(d[j], 4), mask);
            w[j + 4] = _mm512_and_si512(d[j], mask);
        }
        return;
    }
    /* Q5_0, Q5_1: nibbles as they are, plus 16 where the 5th bit is set */
    const __m512i low4 = _mm512_set1_epi8(0x0f), b16 = _mm512_set1_epi8(0x10);
    __mmask64 m[8];
    rows16_fifth_bits(h, m);
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) {
        const __m512i lo = _mm512_and_si512(d[j], low4), hi = _mm512_and_si512(_mm512_srli_epi16(d[j], 4), low4);
        w[j] = _mm512_mask_add_epi8(lo, m[j], lo, b16);
        w[j + 4] = _mm512_mask_add_epi8(hi, m[j + 4], hi, b16);
    }
}

/* Block b of the 16 rows from a packed copy (packed_tiles.h; v: the group after its scales and
 * mins), as rows16_block leaves it: plain loads where rows16_block transposes. */
SIMD_ALWAYS_INLINE void rows16_packed_block(r16_kind kind, const uint8_t *v, __m512i w[8]) {
    if (kind == R16_Q8_0) {
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++) w[j] = _mm512_loadu_si512(v + 64 * j);
        return;
    }
    const uint8_t *quants = v + (r16_five_bits(kind) ? 64 : 0);
    const __m512i low4 = _mm512_set1_epi8(0x0f), b16 = _mm512_set1_epi8(0x10);
    const __m512i high4 = _mm512_set1_epi8((char)0xf0);
    const __m512i values = _mm512_xor_si512(_mm512_broadcast_i32x4(load_128(llmm__iq4_values)),
                                            _mm512_set1_epi8((char)0x80));
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) {
        const __m512i d = _mm512_loadu_si512(quants + 64 * j);
        if (r16_nibbles_x16(kind)) { /* times 16, as rows16_block */
            w[j] = _mm512_and_si512(_mm512_slli_epi16(d, 4), high4);
            w[j + 4] = _mm512_and_si512(d, high4);
            continue;
        }
        w[j] = _mm512_and_si512(d, low4);
        w[j + 4] = _mm512_and_si512(_mm512_srli_epi16(d, 4), low4);
        if (kind == R16_IQ4_NL) {
            w[j] = _mm512_shuffle_epi8(values, w[j]);
            w[j + 4] = _mm512_shuffle_epi8(values, w[j + 4]);
        } else { /* Q5_0, Q5_1 */
            __mmask64 m_lo, m_hi;
            memcpy(&m_lo, v + 8 * j, sizeof m_lo);
            memcpy(&m_hi, v + 8 * (j + 4), sizeof m_hi);
            w[j] = _mm512_mask_add_epi8(w[j], m_lo, w[j], b16);
            w[j + 4] = _mm512_mask_add_epi8(w[j + 4], m_hi, w[j + 4], b16);
        }
    }
}

/* One tile (16 rows of rb bytes, nb blocks) packed into out with the transposition above,
 * stored: byte for byte llmm__packed_tiles_pack's layout, at a third of that scalar reference's
 * cost. */
SIMD_ALWAYS_INLINE void rows16_pack_tile(r16_kind kind, const uint8_t *tile, size_t rb, size_t nb, uint8_t *out) {
    const size_t bb = r16_block_bytes(kind), qs = r16_qs_offset(kind);
    const __m512i flip = _mm512_set1_epi8(kind == R16_Q8_0 ? (char)0x80 : 0);
    for (size_t b = 0; b < nb; b++, out += R16_ROWS * bb) {
        const uint8_t *blk = tile + b * bb;
        __m512i head[4], d[4];
        rows16_transpose(blk, rb, head); /* lane word 0: d, then Q5_0's qh or the min m */
        _mm256_storeu_si256((__m256i *)(void *)out, _mm512_cvtepi32_epi16(head[0]));
        uint8_t *v = out + 2 * R16_ROWS;
        if (r16_has_min(kind)) {
            _mm256_storeu_si256((__m256i *)(void *)v, _mm512_cvtepi32_epi16(_mm512_srli_epi32(head[0], 16)));
            v += 2 * R16_ROWS;
        }
        if (r16_five_bits(kind)) {
            __mmask64 m[8];
            const __m512i qh = kind == R16_Q5_1 ? head[1] /* after d and m */
                                                : _mm512_or_si512(_mm512_srli_epi32(head[0], 16),
                                                                  _mm512_slli_epi32(head[1], 16));
            rows16_fifth_bits(qh, m);
            for (int j = 0; j < 8; j++) memcpy(v + 8 * j, &m[j], sizeof m[j]);
            v += 64;
        }
        rows16_transpose(blk + qs, rb, d);
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++) _mm512_storeu_si512(v + 64 * j, _mm512_xor_si512(d[j], flip));
        if (kind == R16_Q8_0) {
            rows16_transpose(blk + qs + 16, rb, d);
#pragma GCC unroll 4
            for (int j = 0; j < 4; j++) _mm512_storeu_si512(v + 64 * (j + 4), _mm512_xor_si512(d[j], flip));
        }
    }
}

/* The transposition of bytes [off, off + 16) of the 16 rows' super-block (rows16_transpose), for
 * the K-quant and IQ4_XS tiles: from the rows (blk their first row's block, rb apart) or,
 * packed, loaded from the block's group (blk), which stores it at byte `at` (packed_tiles.h:
 * 16 off for the pieces kept in order). pf: the same group of the next tile, whose same bytes
 * are prefetched to L2 along (NULL: none). Per piece, not a whole group per super-block as the
 * unpacked tiles do: a burst of 53 lines per step left the packed Q6_K tile slower from memory
 * than the unpacked 8-row kernel; spread, it is faster. */
SIMD_ALWAYS_INLINE void rows16_piece_at(int packed, const uint8_t *blk, size_t rb, size_t off, size_t at,
                                        const uint8_t *pf, __m512i d[4]) {
    if (!packed) {
        rows16_transpose(blk + off, rb, d);
        return;
    }
    if (pf) prefetch_span((uintptr_t)pf + at, R16_ROWS * 16, 1);
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) d[j] = _mm512_loadu_si512(blk + at + 64 * j);
}
SIMD_ALWAYS_INLINE void rows16_piece(int packed, const uint8_t *blk, size_t rb, size_t off, const uint8_t *pf,
                                     __m512i d[4]) {
    rows16_piece_at(packed, blk, rb, off, R16_ROWS * off, pf, d);
}

/* Block b's share of the next 16-row tile (blocks of bb bytes), to L2: see prefetch_next. */
SIMD_ALWAYS_INLINE void rows16_prefetch(const uint8_t *next, size_t b, size_t bb) {
    prefetch_span((uintptr_t)next + b * R16_ROWS * bb, R16_ROWS * bb, 1);
}

/* acc + vpdpbusd(w, the 4 bytes at x in every lane), the bytes taken by the instruction's
 * own broadcast from memory: from the intrinsics GCC 12 loads them with a separate
 * vpbroadcastd, one more uop per dot. */
SIMD_ALWAYS_INLINE __m512i dpbusd_bcast(__m512i acc, __m512i w, const int8_t *x) {
    __asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*(const int32_t *)(const void *)x));
    return acc;
}

/* init + each lane's block sum against one operand block's quants xq: one chain per operand
 * row (the 16 rows of a tile are independent chains), started at the offset correction so
 * that it needs no subtraction and no second register. */
SIMD_ALWAYS_INLINE __m512i rows16_dot(const __m512i w[8], const int8_t *xq, __m512i init) {
    __m512i s = init;
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++) s = dpbusd_bcast(s, w[j], xq + 4 * j);
    return s;
}

/* Blocks [b0, b0 + n) of the tile against operand rows r0 .. r0+nx-1 (nx a constant for full
 * operand tiles and for one row); packed: base is a tile of a packed copy. */
SIMD_ALWAYS_INLINE void rows16_tile_seg(r16_kind kind, int packed, const uint8_t *base, size_t rb, const uint8_t *next,
                                        size_t nb, size_t b0, size_t n, const uint16_t dws[R16_SEG][R16_ROWS],
                                        const uint16_t mws[R16_SEG][R16_ROWS], const uint32_t qhs[R16_SEG][R16_ROWS],
                                        const cpu_operand *x, size_t r0, size_t nx, __m512 acc_io[R16_TILE_X]) {
    const size_t bb = r16_block_bytes(kind);
    /* in registers for the segment: through acc_io they would live on the stack, a load and a
     * store per operand row and block (measurably slower, Q8_0 most) */
    __m512 acc[R16_TILE_X];
#pragma GCC unroll 16
    for (size_t r = 0; r < R16_TILE_X; r++) acc[r] = b0 == 0 ? _mm512_setzero_ps() : acc_io[r];
    for (size_t b = b0; b < b0 + n; b++) {
        if (next && r0 == 0) rows16_prefetch(next, b, bb);
        __m512 d_w, m_w = _mm512_setzero_ps();
        __m512i h = _mm512_setzero_si512(), w[8];
        if (packed) {
            const uint8_t *g = base + b * R16_ROWS * bb;
            d_w = _mm512_cvtph_ps(load_256(g));
            if (r16_has_min(kind)) m_w = _mm512_cvtph_ps(load_256(g + 2 * R16_ROWS));
            rows16_packed_block(kind, g + (r16_has_min(kind) ? 4 : 2) * R16_ROWS, w);
        } else if (kind == R16_Q5_0 && nx == 1) {
            rows16_q5_0_head(base + b * bb, rb, &d_w, &h);
        } else if (r16_has_min(kind) && nx == 1) {
            rows16_min_head(base + b * bb, rb, &d_w, &m_w, &h);
        } else {
            d_w = _mm512_cvtph_ps(load_256(dws[b - b0]));
            if (r16_has_min(kind)) m_w = _mm512_cvtph_ps(load_256(mws[b - b0]));
            if (r16_five_bits(kind)) h = _mm512_loadu_si512(qhs[b - b0]);
        }
        if (!packed) rows16_block(kind, base + b * bb, rb, h, w);
#pragma GCC unroll 16
        for (size_t r = 0; r < nx; r++) {
            const size_t xb = (r0 + r) * nb + b;
            /* Q4_0's sums are times 16, its correction too (exact: both are multiples of 16);
             * the types with a min have no correction (and their Q8_1 operand no sum) */
            const int32_t correction =
                r16_has_min(kind) ? 0 : (kind == R16_Q4_0 ? 16 : 1) * r16_offset(kind) * x->sum[xb];
            __m512i isum = rows16_dot(w, x->qs + xb * QK8_0, _mm512_set1_epi32(-correction));
            if (r16_nibbles_x16(kind)) isum = _mm512_srai_epi32(isum, 4);
            const __m512 scale = _mm512_mul_ps(d_w, _mm512_set1_ps(x->d[xb]));
            const __m512 dot = _mm512_mul_ps(_mm512_cvtepi32_ps(isum), scale);
            /* Q4_1, Q5_1: sum += dot + m * s_x, as the scalar offset_block_dot */
            if (r16_has_min(kind))
                acc[r] = _mm512_add_ps(acc[r], _mm512_add_ps(dot, _mm512_mul_ps(m_w, _mm512_set1_ps(x->s[xb]))));
            else acc[r] = _mm512_add_ps(acc[r], dot);
        }
    }
#pragma GCC unroll 16
    for (size_t r = 0; r < R16_TILE_X; r++) acc_io[r] = acc[r];
}

/* acc (lanes in tile order) to o[0 .. nl) in row order, starting at the tile's row l0. */
SIMD_ALWAYS_INLINE void rows16_store(__m512 acc, float *o, size_t l0, size_t nl) {
    /* lane i of v takes lane rows16_row(i) of acc */
    const __m512i to_rows = _mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0);
    const __m512 v = _mm512_permutexvar_ps(to_rows, acc);
    if (nl == R16_ROWS) {
        _mm512_storeu_ps(o, v);
        return;
    }
    float tmp[R16_ROWS];
    _mm512_storeu_ps(tmp, v);
    for (size_t i = 0; i < nl; i++) o[i] = tmp[l0 + i];
}

/* All operand rows against the 16 weight rows base + i * rb; lanes [l0, l0 + nl) (in row
 * order) go to out columns j ... */
SIMD_ALWAYS_INLINE void rows16_rows(r16_kind kind, int packed, const uint8_t *base, size_t rb, const uint8_t *next,
                                    size_t l0, size_t nl, size_t j, const cpu_operand *x, size_t n_rows, float *out,
                                    size_t ldo) {
    const size_t nb = x->n / QK8_0;
    uint16_t dws[R16_SEG][R16_ROWS], mws[R16_SEG][R16_ROWS];
    uint32_t qhs[R16_SEG][R16_ROWS];
    for (size_t r0 = 0; r0 < n_rows; r0 += R16_TILE_X) {
        __m512 acc[R16_TILE_X]; /* set by the first segment */
        const size_t nx = LLMM_MIN((size_t)R16_TILE_X, n_rows - r0);
        for (size_t b0 = 0; b0 < nb; b0 += R16_SEG) {
            const size_t n = LLMM_MIN((size_t)R16_SEG, nb - b0);
            if (!packed && !(r16_heads_per_block(kind) && n_rows == 1) && (r0 == 0 || nb > R16_SEG))
                gather_fields16(kind, base, rb, b0, n, dws, mws, qhs);
            const uint16_t(*d)[R16_ROWS] = (const uint16_t(*)[R16_ROWS])dws;
            const uint16_t(*m)[R16_ROWS] = (const uint16_t(*)[R16_ROWS])mws;
            const uint32_t(*h)[R16_ROWS] = (const uint32_t(*)[R16_ROWS])qhs;
            if (nx == R16_TILE_X)
                rows16_tile_seg(kind, packed, base, rb, next, nb, b0, n, d, m, h, x, r0, R16_TILE_X, acc);
            else if (nx == 1) rows16_tile_seg(kind, packed, base, rb, next, nb, b0, n, d, m, h, x, r0, 1, acc);
            else rows16_tile_seg(kind, packed, base, rb, next, nb, b0, n, d, m, h, x, r0, nx, acc);
        }
        for (size_t r = 0; r < nx; r++) rows16_store(acc[r], out + (r0 + r) * ldo + j, l0, nl);
    }
}

/* Tiles of 16 rows (kernels/gemm_tiles.h), of the weights as stored or (packed) of a packed copy:
 * w->data the copy, w->ne1 its whole tiles' rows; the tile walk finds each tile at the bytes
 * its rows had (packed_tiles.h). */
SIMD_ALWAYS_INLINE void rows16_walk(r16_kind kind, int packed, const llmm_tensor *w, size_t j0, size_t j1,
                                    const cpu_operand *x, size_t n_rows, float *out, size_t ldo) {
#define ROWS16_CALL(base, rb, next, l0, nl, j) \
    rows16_rows(kind, packed, base, rb, next, l0, nl, j, x, n_rows, out, ldo)
    GEMM_WALK_TILES(w, j0, j1, R16_ROWS, ROWS16_CALL);
#undef ROWS16_CALL
}
SIMD_ALWAYS_INLINE void gemm_rows16(r16_kind kind, const llmm_tensor *w, size_t j0, size_t j1, const cpu_operand *x,
                                    size_t n_rows, float *out, size_t ldo) {
    rows16_walk(kind, 0, w, j0, j1, x, n_rows, out, ldo);
}
SIMD_ALWAYS_INLINE void gemm_rows16_packed(r16_kind kind, const llmm_tensor *w, size_t j0, size_t j1,
                                           const cpu_operand *x, size_t n_rows, float *out, size_t ldo) {
    rows16_walk(kind, 1, w, j0, j1, x, n_rows, out, ldo);
}

GEMM_FN_FOR_KIND(gemm_q4_0_rows16, gemm_rows16, R16_Q4_0)
GEMM_FN_FOR_KIND(gemm_q5_0_rows16, gemm_rows16, R16_Q5_0)
GEMM_FN_FOR_KIND(gemm_q8_0_rows16, gemm_rows16, R16_Q8_0)
GEMM_FN_FOR_KIND(gemm_q4_1_rows16, gemm_rows16, R16_Q4_1)
GEMM_FN_FOR_KIND(gemm_q5_1_rows16, gemm_rows16, R16_Q5_1)
GEMM_FN_FOR_KIND(gemm_iq4_nl_rows16, gemm_rows16, R16_IQ4_NL)

/* One tile of a K-quant or IQ4_XS (bb bytes, nb super-blocks per row) packed whole: each
 * 16-byte piece transposed and stored (in the order pieces gives, or NULL: in order), then
 * the bytes after the last whole piece: with pieces (Q6_K's d) each row's in lane order;
 * without, their whole 4-byte words as vectors (IQ4_XS's last 8 bytes, Q2_K's d and dmin,
 * Q3_K's 12 scale bytes) and what is left (Q3_K's d) in lane order (packed_tiles.h). */
SIMD_ALWAYS_INLINE void rows16_pack_tile_whole(const uint8_t *tile, size_t rb, size_t nb, size_t bb,
                                               const uint8_t *pieces, uint8_t *out) {
    const size_t at = bb / 16 * 16, n_words = pieces ? 0 : (bb - at) / 4, rest = bb - at - 4 * n_words;
    for (size_t b = 0; b < nb; b++, out += R16_ROWS * bb) {
        for (size_t p = 0; p < bb / 16; p++) {
            __m512i d[4];
            rows16_transpose(tile + b * bb + 16 * (pieces ? pieces[p] : p), rb, d);
#pragma GCC unroll 4
            for (int j = 0; j < 4; j++) _mm512_storeu_si512(out + R16_ROWS * 16 * p + 64 * j, d[j]);
        }
        if (n_words) { /* the 16 bytes that end with the words: they lie within the block */
            __m512i d[4];
            rows16_transpose(tile + b * bb + at + 4 * n_words - 16, rb, d);
            for (size_t j = 0; j < n_words; j++) _mm512_storeu_si512(out + R16_ROWS * at + 64 * j, d[4 - n_words + j]);
        }
        const size_t from = at + 4 * n_words;
        for (size_t q = 0; q < R16_ROWS && rest; q++)
            memcpy(out + R16_ROWS * from + rest * q, tile + b * bb + packed_lane_row(q) * rb + from, rest);
    }
}

/* cpu_kernels.pack_tiles for the types gemm_*_packed16 read (kind a constant in each branch,
 * as in every instantiation here) */
static void pack_tiles_rows16(const llmm_tensor *w, size_t t0, size_t t1, uint8_t *copy) {
    const size_t rb = w->row_bytes, nb = (size_t)w->ne0 / 32, n_super = (size_t)w->ne0 / QK_K;
    const size_t tile = R16_ROWS * rb;
    for (size_t t = t0; t < t1; t++) {
        const uint8_t *src = (const uint8_t *)w->data + t * tile;
        uint8_t *out = copy + t * tile;
        if (w->type == LLMM_TYPE_Q2_K) rows16_pack_tile_whole(src, rb, n_super, sizeof(block_q2_K), NULL, out);
        else if (w->type == LLMM_TYPE_Q3_K) rows16_pack_tile_whole(src, rb, n_super, sizeof(block_q3_K), NULL, out);
        else if (w->type == LLMM_TYPE_Q4_K) rows16_pack_tile_whole(src, rb, n_super, sizeof(block_q4_K), NULL, out);
        else if (w->type == LLMM_TYPE_Q5_K) rows16_pack_tile_whole(src, rb, n_super, sizeof(block_q5_K), NULL, out);
        else if (w->type == LLMM_TYPE_IQ4_XS)
            rows16_pack_tile_whole(src, rb, n_super, sizeof(block_iq4_xs), NULL, out);
        else if (w->type == LLMM_TYPE_Q6_K)
            rows16_pack_tile_whole(src, rb, n_super, sizeof(block_q6_K), packed_q6_k_pieces, out);
        else if (w->type == LLMM_TYPE_Q4_0) rows16_pack_tile(R16_Q4_0, src, rb, nb, out);
        else if (w->type == LLMM_TYPE_Q5_0) rows16_pack_tile(R16_Q5_0, src, rb, nb, out);
        else if (w->type == LLMM_TYPE_Q8_0) rows16_pack_tile(R16_Q8_0, src, rb, nb, out);
        else if (w->type == LLMM_TYPE_Q4_1) rows16_pack_tile(R16_Q4_1, src, rb, nb, out);
        else if (w->type == LLMM_TYPE_Q5_1) rows16_pack_tile(R16_Q5_1, src, rb, nb, out);
        else rows16_pack_tile(R16_IQ4_NL, src, rb, nb, out);
    }
}

GEMM_FN_FOR_KIND(gemm_q4_0_packed16, gemm_rows16_packed, R16_Q4_0)
GEMM_FN_FOR_KIND(gemm_q5_0_packed16, gemm_rows16_packed, R16_Q5_0)
GEMM_FN_FOR_KIND(gemm_q8_0_packed16, gemm_rows16_packed, R16_Q8_0)
GEMM_FN_FOR_KIND(gemm_iq4_nl_packed16, gemm_rows16_packed, R16_IQ4_NL)
GEMM_FN_FOR_KIND(gemm_q4_1_packed16, gemm_rows16_packed, R16_Q4_1)
GEMM_FN_FOR_KIND(gemm_q5_1_packed16, gemm_rows16_packed, R16_Q5_1)

#endif
