/* K-quant weights (Q2_K .. Q6_K) times Q8_K operand rows, for the x86 kernel files. Included
 * after gemm_int8.h, whose tile shape (Q_ROWS), next-tile prefetch and lane gathering
 * (block_sums) it shares. The including file defines first:
 *   __m256i kq_madd_acc(__m256i acc, __m256i p, __m256i s)   acc + madd(p, s): int16 pairs
 *                      multiplied and summed into int32 lanes, added to acc
 *   KQ_TILE_X          operand rows per tile (registers permitting)
 *   KQ_ROW_AVX512      (optional, AVX-512 BW files) Q2_K / Q3_K rows of one operand row on
 *                      512-bit vectors
 * and gets gemm_q2_K, gemm_q3_K, gemm_q4_K, gemm_q5_K, gemm_q6_K (cpu_gemm_fn).
 *
 * Numerics: the scalar kq_block_dot (lib/format/quant_k.c) computes per super-block two integer sums,
 * sum_q = sum_s sc_s (q . x)_s and sum_m = sum_s m_s bsum_s, then
 * sum += x_d * (d * sum_q - dmin * sum_m). The integer sums are exact in any order (|sum_q| <=
 * 256 x 128 x 63 x 128 < 2^31 even with the unsigned quants used here); the float part runs lane
 * by lane (lane i = weight row i) in block order, in the same operation order and without FMA,
 * so every output is bit-identical to the type's vec_dot.
 *
 * Layout of the work: a tile is 8 weight rows times up to KQ_TILE_X operand rows. Per super-
 * block, each weight row's quants are unpacked 32 at a time into unsigned bytes, with the
 * sub-block scales spread over int16 lanes by a byte shuffle, and dotted with every operand row
 * of the tile: maddubs (u8 x s8, adjacent pairs into int16: at most 2 x 63 x 128 = 16128, so it
 * never saturates), then madd by the scales into int32 lanes. A super-block (8 vectors per
 * row) does not fit the registers the way a Q4_0 block does, so rows are done one at a time and
 * their lane vectors gathered (block_sums) once all 8 are done.
 * The symmetric types store q + o unsigned (o = 4 for Q3_K, 32 for Q6_K) and dot those; the
 * offset comes back out through the operand's group sums: sum_s sc_s (q - o) . x =
 * sum_s sc_s q . x - o sum_s sc_s bsum_s, one madd per row and operand row. */
#ifndef LLMM_GEMM_KQUANT_X86_H
#define LLMM_GEMM_KQUANT_X86_H

#ifndef LLMM_GEMM_INT8_X86_H
#error "include gemm_int8.h before gemm_kquant.h"
#endif

#include "kernels/block_kinds.h"

/* One weight row's super-block against the tile's operand rows: xq is the first operand row's
 * quants of this super-block, bs its 16 group sums, the next rows xs and bss further on. */
typedef struct kq_x {
    const int8_t *xq;
    const int16_t *bs;
    size_t xs, bss;
} kq_x;

/* Shuffle control that spreads int16 element e of each 128-bit half over that half. */
SIMD_ALWAYS_INLINE __m256i spread16(int e) { return _mm256_set1_epi16((short)(0x0100 + 0x0202 * e)); }
/* The same with element e_lo in the lower half and e_hi in the upper. */
SIMD_ALWAYS_INLINE __m256i spread16_pair(int e_lo, int e_hi) {
    return _mm256_set_m128i(_mm_set1_epi16((short)(0x0100 + 0x0202 * e_hi)),
                            _mm_set1_epi16((short)(0x0100 + 0x0202 * e_lo)));
}

/* acc += scales x (32 unsigned quants w . the operand's 32 quants at x) */
SIMD_ALWAYS_INLINE __m256i kq_dot32(__m256i acc, __m256i w, const int8_t *x, __m256i scales) {
    return kq_madd_acc(acc, _mm256_maddubs_epi16(w, load_256(x)), scales);
}

/* Q4_K and Q5_K: 8 sub-blocks of 32 with 6-bit scales and mins packed in 12 bytes (quant.h).
 * Read as three little-endian words u0..u2: scales 0-3 are u0's low 6 bits per byte, mins 0-3
 * u1's; scales 4-7 are u2's low nibbles with u0's top 2 bits per byte above them, mins 4-7
 * u2's high nibbles with u1's top bits. */
SIMD_ALWAYS_INLINE void k4_unpack_scales(const uint8_t *p, __m128i *sc8, __m128i *m8) {
    /* lanes [s03, m03, s47, m47] = [u0, u1, u2, u2 >> 4] & [3f, 3f, 0f, 0f] | [0, 0, u0 >> 2,
     * u1 >> 2] & 0x30, then split (vector ops instead of scalar words and four inserts) */
    uint32_t u2;
    memcpy(&u2, p + 8, sizeof u2);
    const __m128i v = _mm_insert_epi32(_mm_loadl_epi64((const __m128i *)(const void *)p), (int)u2, 2);
    const __m128i a = _mm_and_si128(_mm_srlv_epi32(_mm_shuffle_epi32(v, _MM_SHUFFLE(2, 2, 1, 0)), _mm_setr_epi32(0, 0, 0, 4)),
                                    _mm_setr_epi32(0x3f3f3f3f, 0x3f3f3f3f, 0x0f0f0f0f, 0x0f0f0f0f));
    const __m128i b = _mm_and_si128(_mm_srli_epi32(_mm_shuffle_epi32(v, _MM_SHUFFLE(1, 0, 1, 0)), 2),
                                    _mm_setr_epi32(0, 0, 0x30303030, 0x30303030));
    const __m128i w = _mm_or_si128(a, b);
    *sc8 = _mm_shuffle_epi32(w, _MM_SHUFFLE(3, 3, 2, 0)); /* lanes 2, 3 unused */
    *m8 = _mm_shuffle_epi32(w, _MM_SHUFFLE(3, 3, 3, 1));
}

/* Chunk c of 64 weights: the low nibbles are sub-block 2c, the high ones 2c+1; Q5_K's 5th bit
 * of sub-block s is bit s of qh[l], brought to bit 4 by shifting qh down 2 per chunk (16-bit
 * shifts: the bits that cross a byte boundary land above bit 4 and are masked off). */
SIMD_ALWAYS_INLINE void kq_row_k4(const uint8_t *blk, const kq_x *x, size_t nx, int q5, __m256i vq[KQ_TILE_X],
                                  __m256i vm[KQ_TILE_X]) {
    const uint8_t *qs = blk + (q5 ? offsetof(block_q5_K, qs) : offsetof(block_q4_K, qs));
    __m128i sc8, m8;
    k4_unpack_scales(blk + offsetof(block_q4_K, scales), &sc8, &m8);
    const __m256i sc16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(sc8));
    /* each min twice: one per group of 16, matching the operand's group sums */
    const __m256i m16 = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(m8, m8));
    for (size_t r = 0; r < nx; r++) {
        vm[r] = _mm256_madd_epi16(m16, load_256(x->bs + r * x->bss));
        vq[r] = _mm256_setzero_si256();
    }
    const __m256i low4 = _mm256_set1_epi8(0x0f), bit4 = _mm256_set1_epi8(0x10);
    __m256i qh = q5 ? load_256(blk + offsetof(block_q5_K, qh)) : _mm256_setzero_si256();
#pragma GCC unroll 4
    for (int c = 0; c < 4; c++) {
        const __m256i w = load_256(qs + 32 * c);
        __m256i lo = _mm256_and_si256(w, low4), hi = _mm256_and_si256(_mm256_srli_epi16(w, 4), low4);
        if (q5) {
            lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_slli_epi16(qh, 4), bit4));
            hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_slli_epi16(qh, 3), bit4));
            qh = _mm256_srli_epi16(qh, 2);
        }
        const __m256i s_lo = _mm256_shuffle_epi8(sc16, spread16(2 * c));
        const __m256i s_hi = _mm256_shuffle_epi8(sc16, spread16(2 * c + 1));
#pragma GCC unroll 4
        for (size_t r = 0; r < nx; r++) {
            const int8_t *xr = x->xq + r * x->xs + 64 * c;
            vq[r] = kq_dot32(kq_dot32(vq[r], lo, xr, s_lo), hi, xr + 32, s_hi);
        }
    }
}

/* Q6_K: per half h, 32 low-nibble bytes A (weights 0-31 low, 64-95 high) and B (32-63, 96-127),
 * and 32 bytes H holding the top 2 bits of weights l, l+32, l+64, l+96 in bit pairs 0..3 of
 * H[l]. Each 32-weight vector covers two sub-blocks of 16 (one per 128-bit half). */
SIMD_ALWAYS_INLINE void kq_row_q6(const uint8_t *blk, const kq_x *x, size_t nx, __m256i vq[KQ_TILE_X]) {
    /* fields by offset: weight rows are packed blocks, so no block struct is dereferenced */
    const uint8_t *ql = blk + offsetof(block_q6_K, ql), *qh = blk + offsetof(block_q6_K, qh);
    const uint8_t *scales = blk + offsetof(block_q6_K, scales);
    const __m256i sc16 = _mm256_cvtepi8_epi16(load_128(scales));
    for (size_t r = 0; r < nx; r++) /* the offset 32 of every quant */
        vq[r] = _mm256_sub_epi32(_mm256_setzero_si256(),
                                 _mm256_slli_epi32(_mm256_madd_epi16(sc16, load_256(x->bs + r * x->bss)), 5));
    const __m256i low4 = _mm256_set1_epi8(0x0f), top2 = _mm256_set1_epi8(0x30);
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
        const __m256i sch = _mm256_broadcastsi128_si256(
            _mm_cvtepi8_epi16(_mm_loadl_epi64((const __m128i *)(const void *)(scales + 8 * h))));
        const __m256i A = load_256(ql + 64 * h), B = load_256(ql + 64 * h + 32), H = load_256(qh + 32 * h);
        const __m256i q[4] = {
            _mm256_or_si256(_mm256_and_si256(A, low4), _mm256_and_si256(_mm256_slli_epi16(H, 4), top2)),
            _mm256_or_si256(_mm256_and_si256(B, low4), _mm256_and_si256(_mm256_slli_epi16(H, 2), top2)),
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(A, 4), low4), _mm256_and_si256(H, top2)),
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(B, 4), low4),
                            _mm256_and_si256(_mm256_srli_epi16(H, 2), top2)),
        };
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) {
            const __m256i s = _mm256_shuffle_epi8(sch, spread16_pair(2 * k, 2 * k + 1));
#pragma GCC unroll 4
            for (size_t r = 0; r < nx; r++) vq[r] = kq_dot32(vq[r], q[k], x->xq + r * x->xs + 128 * h + 32 * k, s);
        }
    }
}

/* Q2_K and Q3_K: per half h, one 32-byte vector Q holds 2-bit fields of weights l + 32k at bits
 * 2k of Q[l]; Q3_K's third bit of weight 32m + l is bit m of hmask[l], brought down one bit per
 * 32 weights as Q5_K's. sc16 holds the 16 sub-block scales in order (int16), offset the
 * quants' unsigned offset (4 for Q3_K, 0 for Q2_K). */
#if defined(KQ_ROW_AVX512)
/* kq_row_2bit for one operand row on 512-bit vectors: both halves h at once (qs[0..63] in one
 * vector, hmask's bits 4h + k brought to the same shift by a copy moved down 4, the scales of
 * sub-blocks 2k, 2k+1 | 8+2k, 8+2k+1 spread over the four 128-bit lanes), so each step k
 * unpacks and dots 64 weights. The lane sums end in the same 8 int32 lanes (the halves added),
 * and integer sums are exact in any order: the same result. */
SIMD_ALWAYS_INLINE __m256i kq_row_2bit_one(const uint8_t *qs, const uint8_t *hmask, __m256i sc16, int offset_shift,
                                           const kq_x *x) {
    __m512i acc = _mm512_setzero_si512();
    const __m512i three = _mm512_set1_epi8(3), bit2 = _mm512_set1_epi8(4);
    const __m512i Q = _mm512_loadu_si512(qs);
    __m512i hm = _mm512_setzero_si512();
    if (hmask) {
        const __m256i h = load_256(hmask);
        hm = _mm512_inserti64x4(_mm512_castsi256_si512(h), _mm256_srli_epi16(h, 4), 1);
    }
    /* lanes: scales 0-7, 0-7, 8-15, 8-15 (int16) */
    const __m512i sc = _mm512_permutexvar_epi64(_mm512_set_epi64(3, 2, 3, 2, 1, 0, 1, 0),
                                                _mm512_castsi256_si512(sc16));
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) {
        __m512i q = _mm512_and_si512(k == 0 ? Q : _mm512_srli_epi16(Q, (unsigned)(2 * k)), three);
        if (hmask) {
            const __m512i hb = k <= 2 ? _mm512_slli_epi16(hm, (unsigned)(2 - k)) : _mm512_srli_epi16(hm, 1);
            q = _mm512_or_si512(q, _mm512_and_si512(hb, bit2));
        }
        const __m512i s = _mm512_shuffle_epi8(sc, _mm512_broadcast_i64x4(spread16_pair(2 * k, 2 * k + 1)));
        const __m512i xv = _mm512_inserti64x4(_mm512_castsi256_si512(load_256(x->xq + 32 * k)),
                                              load_256(x->xq + 128 + 32 * k), 1);
        acc = _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_maddubs_epi16(q, xv), s));
    }
    __m256i v = _mm256_add_epi32(_mm512_castsi512_si256(acc), _mm512_extracti64x4_epi64(acc, 1));
    if (offset_shift)
        v = _mm256_sub_epi32(v, _mm256_slli_epi32(_mm256_madd_epi16(sc16, load_256(x->bs)), offset_shift));
    return v;
}
#endif

SIMD_ALWAYS_INLINE void kq_row_2bit(const uint8_t *qs, const uint8_t *hmask, __m256i sc16, int offset_shift,
                                    const kq_x *x, size_t nx, __m256i vq[KQ_TILE_X]) {
#if defined(KQ_ROW_AVX512)
    if (nx == 1) {
        vq[0] = kq_row_2bit_one(qs, hmask, sc16, offset_shift, x);
        return;
    }
#endif
    for (size_t r = 0; r < nx; r++)
        vq[r] = offset_shift ? _mm256_sub_epi32(_mm256_setzero_si256(),
                                                _mm256_slli_epi32(_mm256_madd_epi16(sc16, load_256(x->bs + r * x->bss)),
                                                                  offset_shift))
                             : _mm256_setzero_si256();
    const __m256i two = _mm256_set1_epi8(3), bit2 = _mm256_set1_epi8(4);
    __m256i hm = hmask ? load_256(hmask) : _mm256_setzero_si256();
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
        /* the immediate a literal in each branch: clang checks it before unrolling */
        const __m256i sch =
            h ? _mm256_permute2x128_si256(sc16, sc16, 0x11) : _mm256_permute2x128_si256(sc16, sc16, 0x00);
        const __m256i Q = load_256(qs + 32 * h);
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) {
            __m256i q = _mm256_and_si256(k == 0 ? Q : _mm256_srli_epi16(Q, 2 * k), two);
            if (hmask) {
                q = _mm256_or_si256(q, _mm256_and_si256(_mm256_slli_epi16(hm, 2), bit2));
                hm = _mm256_srli_epi16(hm, 1);
            }
            const __m256i s = _mm256_shuffle_epi8(sch, spread16_pair(2 * k, 2 * k + 1));
#pragma GCC unroll 4
            for (size_t r = 0; r < nx; r++) vq[r] = kq_dot32(vq[r], q, x->xq + r * x->xs + 128 * h + 32 * k, s);
        }
    }
}

SIMD_ALWAYS_INLINE void kq_row_q2(const uint8_t *blk, const kq_x *x, size_t nx, __m256i vq[KQ_TILE_X],
                                  __m256i vm[KQ_TILE_X]) {
    const __m128i s = load_128(blk + offsetof(block_q2_K, scales)); /* scale: low nibble, min: high */
    const __m256i sc16 = _mm256_cvtepu8_epi16(_mm_and_si128(s, _mm_set1_epi8(0x0f)));
    const __m256i m16 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(s, 4), _mm_set1_epi8(0x0f)));
    for (size_t r = 0; r < nx; r++) vm[r] = _mm256_madd_epi16(m16, load_256(x->bs + r * x->bss));
    kq_row_2bit(blk + offsetof(block_q2_K, qs), NULL, sc16, 0, x, nx, vq);
}

/* Q3_K's 6-bit scales (quant.h), read as words u0..u2: the low nibbles of scales 0-7 are the
 * low nibbles of u0, u1, of 8-15 their high nibbles; the top 2 bits of scale j are the bit pair
 * j/4 of byte j%4 of u2. Stored with +32. */
SIMD_ALWAYS_INLINE __m256i q3_unpack_scales(const uint8_t *p) {
    /* the four words s03, s47, s8b, scf in one vector: lanes [u0, u1, u0 >> 4, u1 >> 4] & 0x0f
     * and [u2 << 4, u2 << 2, u2, u2 >> 2] & 0x30 (in scalar code with four inserts this was
     * a fifth of Q3_K decode's instructions) */
    uint32_t u2;
    memcpy(&u2, p + 8, sizeof u2);
    const __m128i v = _mm_insert_epi32(_mm_loadl_epi64((const __m128i *)(const void *)p), (int)u2, 2);
    const __m128i lo = _mm_and_si128(_mm_srlv_epi32(_mm_shuffle_epi32(v, _MM_SHUFFLE(1, 0, 1, 0)), _mm_setr_epi32(0, 0, 4, 4)),
                                     _mm_set1_epi32(0x0f0f0f0f));
    const __m128i w2 = _mm_shuffle_epi32(v, _MM_SHUFFLE(2, 2, 2, 2));
    const __m128i hi = _mm_and_si128(
        _mm_srlv_epi32(_mm_sllv_epi32(w2, _mm_setr_epi32(4, 2, 0, 0)), _mm_setr_epi32(0, 0, 0, 2)),
        _mm_set1_epi32(0x30303030));
    return _mm256_sub_epi16(_mm256_cvtepu8_epi16(_mm_or_si128(lo, hi)), _mm256_set1_epi16(32));
}

SIMD_ALWAYS_INLINE void kq_row_q3(const uint8_t *blk, const kq_x *x, size_t nx, __m256i vq[KQ_TILE_X]) {
    kq_row_2bit(blk + offsetof(block_q3_K, qs), blk + offsetof(block_q3_K, hmask),
                q3_unpack_scales(blk + offsetof(block_q3_K, scales)), 2, x, nx, vq);
}

SIMD_ALWAYS_INLINE void kq_row(kq_kind kind, const uint8_t *blk, const kq_x *x, size_t nx, __m256i vq[KQ_TILE_X],
                               __m256i vm[KQ_TILE_X]) {
    switch (kind) {
    case KQ_Q2: kq_row_q2(blk, x, nx, vq, vm); break;
    case KQ_Q3: kq_row_q3(blk, x, nx, vq); break;
    case KQ_Q4: kq_row_k4(blk, x, nx, 0, vq, vm); break;
    case KQ_Q5: kq_row_k4(blk, x, nx, 1, vq, vm); break;
    case KQ_Q6: kq_row_q6(blk, x, nx, vq); break;
    }
}

/* The eight rows' f16 field at off of super-block b, as floats (lane i = row i). */
SIMD_ALWAYS_INLINE __m256 kq_row_halves(const uint8_t *blk0, size_t rb, size_t off) {
    const uint8_t *p = blk0 + off;
    return _mm256_cvtph_ps(_mm_setr_epi16((short)load_u16(p), (short)load_u16(p + rb), (short)load_u16(p + 2 * rb),
                                          (short)load_u16(p + 3 * rb), (short)load_u16(p + 4 * rb),
                                          (short)load_u16(p + 5 * rb), (short)load_u16(p + 6 * rb),
                                          (short)load_u16(p + 7 * rb)));
}

/* Operand rows r0 .. r0+nx-1 against the 8 weight rows base + i * rb; nx is a constant at
 * every call site. */
SIMD_ALWAYS_INLINE void kq_tile(kq_kind kind, const uint8_t *base, size_t rb, const uint8_t *next,
                                const cpu_operand *x, size_t r0, size_t nx, __m256 acc[KQ_TILE_X]) {
    const size_t nb = x->n / QK_K, ng = x->n / 16, bb = kq_block_bytes(kind);
    for (size_t r = 0; r < nx; r++) acc[r] = _mm256_setzero_ps();
    for (size_t b = 0; b < nb; b++) {
        if (next && r0 == 0) prefetch_next(next, b, bb);
        const kq_x xb = {x->qs + r0 * x->n + b * QK_K, x->bsums + r0 * ng + b * (QK_K / 16), x->n, ng};
        __m256i vq[KQ_TILE_X][Q_ROWS], vm[KQ_TILE_X][Q_ROWS];
        const uint8_t *blk0 = base + b * bb;
#pragma GCC unroll 1
        for (int i = 0; i < Q_ROWS; i++) {
            __m256i q[KQ_TILE_X], m[KQ_TILE_X];
            kq_row(kind, blk0 + i * rb, &xb, nx, q, m);
            for (size_t r = 0; r < nx; r++) {
                vq[r][i] = q[r];
                if (kq_has_min(kind)) vm[r][i] = m[r];
            }
        }
        const __m256 d_w = kq_row_halves(blk0, rb, kq_d_offset(kind));
        const __m256 dmin_w = kq_has_min(kind) ? kq_row_halves(blk0, rb, kq_dmin_offset(kind)) : _mm256_setzero_ps();
        for (size_t r = 0; r < nx; r++) {
            /* x_d * (d * sum_q - dmin * sum_m): the scalar's order (the symmetric types'
             * dmin * sum_m is +0, which leaves every value, -0 included, unchanged) */
            __m256 f = _mm256_mul_ps(d_w, _mm256_cvtepi32_ps(block_sums(vq[r])));
            if (kq_has_min(kind)) f = _mm256_sub_ps(f, _mm256_mul_ps(dmin_w, _mm256_cvtepi32_ps(block_sums(vm[r]))));
            acc[r] = _mm256_add_ps(acc[r], _mm256_mul_ps(_mm256_set1_ps(x->d[(r0 + r) * nb + b]), f));
        }
    }
}

/* All operand rows against the 8 weight rows base + i * rb; lanes [l0, l0 + nl) go to out
 * columns j ... */
SIMD_ALWAYS_INLINE void kq_rows(kq_kind kind, const uint8_t *base, size_t rb, const uint8_t *next, size_t l0,
                                size_t nl, size_t j, const cpu_operand *x, size_t n_rows, float *out, size_t ldo) {
    for (size_t r0 = 0; r0 < n_rows; r0 += KQ_TILE_X) {
        __m256 acc[KQ_TILE_X];
        const size_t nx = LLMM_MIN((size_t)KQ_TILE_X, n_rows - r0);
        if (nx == KQ_TILE_X) kq_tile(kind, base, rb, next, x, r0, KQ_TILE_X, acc);
        else if (nx == 1) kq_tile(kind, base, rb, next, x, r0, 1, acc);
        else kq_tile(kind, base, rb, next, x, r0, nx, acc);
        for (size_t r = 0; r < nx; r++) store_lanes(out + (r0 + r) * ldo + j, acc[r], l0, nl);
    }
}

/* Tiles of 8 rows (kernels/gemm_tiles.h). */
SIMD_ALWAYS_INLINE void gemm_kq(kq_kind kind, const llmm_tensor *w, size_t j0, size_t j1, const cpu_operand *x,
                                size_t n_rows, float *out, size_t ldo) {
#define KQ_ROWS_CALL(base, rb, next, l0, nl, j) kq_rows(kind, base, rb, next, l0, nl, j, x, n_rows, out, ldo)
    GEMM_WALK_TILES(w, j0, j1, Q_ROWS, KQ_ROWS_CALL);
#undef KQ_ROWS_CALL
}

GEMM_FN_FOR_KIND(gemm_q2_K, gemm_kq, KQ_Q2)
GEMM_FN_FOR_KIND(gemm_q3_K, gemm_kq, KQ_Q3)
GEMM_FN_FOR_KIND(gemm_q4_K, gemm_kq, KQ_Q4)
GEMM_FN_FOR_KIND(gemm_q5_K, gemm_kq, KQ_Q5)
GEMM_FN_FOR_KIND(gemm_q6_K, gemm_kq, KQ_Q6)

#endif
