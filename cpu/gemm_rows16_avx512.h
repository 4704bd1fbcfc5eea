/* Q4_0 weights times Q8 operand rows on 512-bit vectors, 16 weight rows per tile, one row per
 * int32 lane: for kernels_avx512.c, included after gemm_int8_x86.h (whose scale gather order,
 * prefetch and tile walk it follows); gives gemm_q4_0_rows16 (cpu_gemm_fn). Used for two
 * operand rows and more (prefill, several sequences): one core, 896 x 2048 from cache, 64 rows
 * 1330 -> 934 us against the 8-row tiles; 0.5B Q4_0 prefill at 512 tokens, 2 threads, 3
 * alternations: 238-255 -> 346-396 tok/s.
 *
 * Why: the 8-row tiles of gemm_int8_x86.h put two weight rows in a 256-bit vector, so every
 * block's eight row sums must be gathered from four lanes each with horizontal adds, and a
 * 256-bit vpdpbusd does half the work of a 512-bit one at the same rate on Zen 4 (a throwaway
 * loop: 0.25 ns per ymm vpdpbusd, 0.28 per zmm; vphaddd 0.59). Here each block of the 16 rows
 * is transposed in registers, four bytes at a time (D_j below: lane q holds bytes 4j..4j+3 of
 * row rows16_row(q)), so vpdpbusd against the operand's bytes 4j..4j+3, broadcast, adds four
 * products of one row into that row's own lane: eight of them leave every row's block sum in
 * its lane, with no horizontal step. The transposition (4 loads with 12 inserts, 8 unpacks)
 * is paid once per block and shared by all the operand rows of a tile.
 *
 * Numerics are gemm_int8_x86.h's: per lane (one weight row), blocks in order,
 * sum += (float)(isum - 8 sum(x)) * (d_w * d_x) without FMA, so bit-identical to the scalar
 * vec_dot. The quants are kept times 16 by masks, as prep_q4_0_pair does (at most
 * 32 x 240 x 128 per block sum: no overflow), and divided out before the conversion. */
#ifndef LLMM_GEMM_ROWS16_AVX512_H
#define LLMM_GEMM_ROWS16_AVX512_H

#ifndef LLMM_GEMM_INT8_X86_H
#error "include gemm_int8_x86.h before gemm_rows16_avx512.h"
#endif

#define R16_ROWS 16

/* The row whose values lane q holds after the transposition (and the lane of row q: the
 * mapping is its own inverse): 128-bit lane l of the m-th loaded vector holds row 4m + l, and
 * the unpacks leave row l + 4p at position 4l + p. */
SIMD_ALWAYS_INLINE size_t rows16_row(size_t q) { return (q >> 2) + 4 * (q & 3); }

/* The f16 scales of blocks [b0, b0 + n) of the 16 rows, row by row in address order (see
 * gather_scales), each row's stored at its lane. */
SIMD_ALWAYS_INLINE void gather_scales16(const uint8_t *base, size_t rb, size_t b0, size_t n,
                                        uint16_t dws[SCALE_SEG][R16_ROWS]) {
    for (size_t i = 0; i < R16_ROWS; i++) {
        const uint8_t *p = base + i * rb + b0 * sizeof(block_q4_0);
        uint16_t *restrict d = &dws[0][rows16_row(i)];
#pragma GCC unroll 4
        for (size_t k = 0; k < n; k++) d[k * R16_ROWS] = load_u16(p + k * sizeof(block_q4_0));
    }
}

/* Block b's quants of the 16 rows, transposed: w[j] (j < 4) holds the low nibbles of bytes
 * 4j..4j+3 of each row (weights 4j..4j+3), w[j + 4] the high nibbles (weights 16+4j..),
 * both times 16. */
SIMD_ALWAYS_INLINE void rows16_q4_0_block(const uint8_t *qs, size_t rb, __m512i w[8]) {
    __m512i z[4];
#pragma GCC unroll 4
    for (int m = 0; m < 4; m++) {
        const uint8_t *p = qs + (size_t)(4 * m) * rb;
        __m512i v = _mm512_castsi128_si512(load_128(p));
        v = _mm512_inserti32x4(v, load_128(p + rb), 1);
        v = _mm512_inserti32x4(v, load_128(p + 2 * rb), 2);
        z[m] = _mm512_inserti32x4(v, load_128(p + 3 * rb), 3);
    }
    const __m512i a = _mm512_unpacklo_epi32(z[0], z[1]), c = _mm512_unpacklo_epi32(z[2], z[3]);
    const __m512i b = _mm512_unpackhi_epi32(z[0], z[1]), e = _mm512_unpackhi_epi32(z[2], z[3]);
    const __m512i d[4] = {_mm512_unpacklo_epi64(a, c), _mm512_unpackhi_epi64(a, c), _mm512_unpacklo_epi64(b, e),
                          _mm512_unpackhi_epi64(b, e)};
    const __m512i mask = _mm512_set1_epi8((char)0xf0);
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) {
        w[j] = _mm512_and_si512(_mm512_slli_epi16(d[j], 4), mask);
        w[j + 4] = _mm512_and_si512(d[j], mask);
    }
}

/* acc + vpdpbusd(w, the 4 bytes at x in every lane), the bytes taken by the instruction's
 * own broadcast from memory: from the intrinsics GCC 12 loads them with a separate
 * vpbroadcastd, one more uop per dot (one core, 896 x 2048, 64 rows: 977 -> 934 us). */
SIMD_ALWAYS_INLINE __m512i dpbusd_bcast(__m512i acc, __m512i w, const int8_t *x) {
    __asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*(const int32_t *)(const void *)x));
    return acc;
}

/* Each lane's block sum (times 16) against one operand block's quants xq. */
SIMD_ALWAYS_INLINE __m512i rows16_q4_0_dot(const __m512i w[8], const int8_t *xq) {
    __m512i lo = _mm512_setzero_si512(), hi = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) {
        lo = dpbusd_bcast(lo, w[j], xq + 4 * j);
        hi = dpbusd_bcast(hi, w[j + 4], xq + 16 + 4 * j);
    }
    return _mm512_add_epi32(lo, hi);
}

/* Blocks [b0, b0 + n) of the tile against operand rows r0 .. r0+nx-1 (nx a constant at every
 * call site). */
SIMD_ALWAYS_INLINE void rows16_tile_seg(const uint8_t *base, size_t rb, const uint8_t *next, size_t nb, size_t b0,
                                        size_t n, const uint16_t dws[SCALE_SEG][R16_ROWS], const cpu_operand *x,
                                        size_t r0, size_t nx, __m512 acc[Q_TILE_X]) {
    for (size_t b = b0; b < b0 + n; b++) {
        if (next && r0 == 0) {
            const size_t share = R16_ROWS * sizeof(block_q4_0);
            prefetch_span((uintptr_t)next + b * share, share, R16_ROWS * rb > PF_L1_MAX_TILE);
        }
        __m512i w[8];
        rows16_q4_0_block(base + b * sizeof(block_q4_0) + 2, rb, w);
        const __m512 d_w = _mm512_cvtph_ps(load_256(dws[b - b0]));
#pragma GCC unroll 8
        for (size_t r = 0; r < nx; r++) {
            const size_t xb = (r0 + r) * nb + b;
            const __m512i sums = _mm512_srai_epi32(rows16_q4_0_dot(w, x->qs + xb * QK8_0), 4);
            const __m512i isum = _mm512_sub_epi32(sums, _mm512_set1_epi32(8 * x->sum[xb]));
            const __m512 scale = _mm512_mul_ps(d_w, _mm512_set1_ps(x->d[xb]));
            acc[r] = _mm512_add_ps(acc[r], _mm512_mul_ps(_mm512_cvtepi32_ps(isum), scale));
        }
    }
}

/* All operand rows against the 16 weight rows base + i * rb; lanes [l0, l0 + nl) (in row
 * order) go to out columns j ... */
SIMD_ALWAYS_INLINE void rows16_rows(const uint8_t *base, size_t rb, const uint8_t *next, size_t l0, size_t nl,
                                    size_t j, const cpu_operand *x, size_t n_rows, float *out, size_t ldo) {
    const size_t nb = x->n / QK8_0;
    /* lane order to row order: row i is in lane rows16_row(i) */
    const __m512i to_rows = _mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0);
    uint16_t dws[SCALE_SEG][R16_ROWS];
    for (size_t r0 = 0; r0 < n_rows; r0 += Q_TILE_X) {
        __m512 acc[Q_TILE_X];
        const size_t nx = LLMM_MIN((size_t)Q_TILE_X, n_rows - r0);
        for (size_t r = 0; r < nx; r++) acc[r] = _mm512_setzero_ps();
        for (size_t b0 = 0; b0 < nb; b0 += SCALE_SEG) {
            const size_t n = LLMM_MIN((size_t)SCALE_SEG, nb - b0);
            /* one segment (rows up to 8192 values): gathered once for all operand tiles */
            if (r0 == 0 || nb > SCALE_SEG) gather_scales16(base, rb, b0, n, dws);
            const uint16_t(*d)[R16_ROWS] = (const uint16_t(*)[R16_ROWS])dws;
            if (nx == Q_TILE_X) rows16_tile_seg(base, rb, next, nb, b0, n, d, x, r0, Q_TILE_X, acc);
            else if (nx == 1) rows16_tile_seg(base, rb, next, nb, b0, n, d, x, r0, 1, acc);
            else rows16_tile_seg(base, rb, next, nb, b0, n, d, x, r0, nx, acc);
        }
        for (size_t r = 0; r < nx; r++) {
            const __m512 v = _mm512_permutexvar_ps(to_rows, acc[r]);
            float *o = out + (r0 + r) * ldo + j;
            if (nl == R16_ROWS) {
                _mm512_storeu_ps(o, v);
            } else {
                float tmp[R16_ROWS];
                _mm512_storeu_ps(tmp, v);
                for (size_t i = 0; i < nl; i++) o[i] = tmp[l0 + i];
            }
        }
    }
}

static void gemm_q4_0_rows16(const llmm_tensor *w, size_t j0, size_t j1, const cpu_operand *x, size_t n_rows,
                             float *out, size_t ldo) {
#define ROWS16_CALL(base, rb, next, l0, nl, j) rows16_rows(base, rb, next, l0, nl, j, x, n_rows, out, ldo)
    GEMM_WALK_TILES(w, j0, j1, R16_ROWS, ROWS16_CALL);
#undef ROWS16_CALL
}

#endif
