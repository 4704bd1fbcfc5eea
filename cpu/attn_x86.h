/* Attention over a chunk of K/V rows (q.k scores, then the weighted sum of V rows) for the
 * x86 kernel files, on F32 rows or F16 rows widened in registers (exact: vcvtph2ps). The
 * including file defines
 *   ATTN_SCORE_HEADS  query heads per score tile: 4 positions x this many heads are
 *                     independent FMA chains, each row slice widened once for all of them
 *                     (2 for AVX2's 16 registers, 4 for AVX-512's 32)
 *   ATTN_VALUE_HEADS  0, or (AVX-512) heads per 512-bit values tile: each V row widened once
 *                     for that many heads, instead of once per head
 * and gets attn_scores_rows, attn_values_rows and dot_row.
 *
 * Numerics, whatever the tile: each score is one 8-lane FMA accumulator fed in d order and
 * summed by hsum4_ps / hsum_ps, which is avx2_dot_f32; each output value gets w * v added in
 * position order by one fused multiply-add, which is avx2_axpy (and the scalar table's). So
 * the AVX2 and AVX-512 tables give the same bits, and ops_attention.c's split of heads into
 * items does not matter. */
#ifndef LLMM_ATTN_X86_H
#define LLMM_ATTN_X86_H

#include <math.h>

#include "cpu_kernels.h"
#include "simd_x86.h"

#if !defined(ATTN_SCORE_HEADS) || !defined(ATTN_VALUE_HEADS)
#error "define ATTN_SCORE_HEADS and ATTN_VALUE_HEADS before including attn_x86.h"
#endif

/* Four 8-lane dot accumulators to their four sums, each added in hsum_ps's order (halves,
 * then lanes 0+2 and 1+3, then those two), so a score equals avx2_dot_f32's bit for bit. */
SIMD_ALWAYS_INLINE __m128 hsum4_ps(__m256 a0, __m256 a1, __m256 a2, __m256 a3) {
    const __m128 s0 = _mm_add_ps(_mm256_castps256_ps128(a0), _mm256_extractf128_ps(a0, 1));
    const __m128 s1 = _mm_add_ps(_mm256_castps256_ps128(a1), _mm256_extractf128_ps(a1, 1));
    const __m128 s2 = _mm_add_ps(_mm256_castps256_ps128(a2), _mm256_extractf128_ps(a2, 1));
    const __m128 s3 = _mm_add_ps(_mm256_castps256_ps128(a3), _mm256_extractf128_ps(a3, 1));
    const __m128 t01 = _mm_add_ps(_mm_unpacklo_ps(s0, s1), _mm_unpackhi_ps(s0, s1));
    const __m128 t23 = _mm_add_ps(_mm_unpacklo_ps(s2, s3), _mm_unpackhi_ps(s2, s3));
    return _mm_add_ps(_mm_movelh_ps(t01, t23), _mm_movehl_ps(t23, t01));
}

/* Eight values of row j from d on. */
SIMD_ALWAYS_INLINE __m256 row_load8(const cpu_attn_rows *rows, size_t j, size_t d, int f16) {
    return f16 ? load_f16x8(rows->f16 + j * rows->stride + d) : _mm256_loadu_ps(rows->f32[j] + d);
}

SIMD_ALWAYS_INLINE float row_value(const cpu_attn_rows *rows, size_t j, size_t d, int f16) {
    return f16 ? _cvtsh_ss(rows->f16[j * rows->stride + d]) : rows->f32[j][d];
}

/* Attention's q.k: eight FMA partial sums and a shuffle tree, not the scalar's eight
 * sequential lane adds, whose 8-add dependency chain cost as much as the products at the
 * small head sizes of small models (head_dim 8 on stories260K). q . row j of rows. */
SIMD_ALWAYS_INLINE float dot_row(const float *q, const cpu_attn_rows *rows, size_t j, size_t n, int f16) {
    __m256 acc = _mm256_setzero_ps();
    size_t i = 0;
    for (; i + 8 <= n; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), row_load8(rows, j, i, f16), acc);
    float sum = hsum_ps(acc);
    for (; i < n; i++) sum += q[i] * row_value(rows, j, i, f16);
    return sum;
}

/* The hd % 8 tail of scores [j, j + 4) (their sums so far in out), in order, as dot_row. */
SIMD_ALWAYS_INLINE void scores_tail4(const float *q, size_t hd8, size_t hd, const cpu_attn_rows *rows, size_t j,
                                     float *out, int f16) {
    for (size_t k = 0; k < 4 && hd8 < hd; k++) {
        float sum = out[j + k];
        for (size_t d = hd8; d < hd; d++) sum += q[d] * row_value(rows, j + k, d, f16);
        out[j + k] = sum;
    }
}

/* Scores of nh heads (a constant at every call, at most ATTN_SCORE_HEADS) four positions at
 * a time: each row slice is loaded (for F16, widened) once for all of them, and the 4 nh sums
 * are independent FMA chains. Two heads per tile on AVX2: decode attention at 544 positions,
 * 1 thread, 1.02-1.41 -> 0.96-1.02 ms per token against one. */
SIMD_ALWAYS_INLINE void scores_tile(const float *q, size_t nh, size_t hd, const cpu_attn_rows *rows, size_t n,
                                    float *scores, size_t ld, int f16) {
    const size_t hd8 = hd & ~(size_t)7;
    size_t j = 0;
    for (; j + 4 <= n; j += 4) {
        __m256 acc[ATTN_SCORE_HEADS][4];
#pragma GCC unroll 4
        for (size_t i = 0; i < nh; i++)
#pragma GCC unroll 4
            for (int k = 0; k < 4; k++) acc[i][k] = _mm256_setzero_ps();
        for (size_t d = 0; d < hd8; d += 8) {
            __m256 r[4];
#pragma GCC unroll 4
            for (int k = 0; k < 4; k++) r[k] = row_load8(rows, j + (size_t)k, d, f16);
#pragma GCC unroll 4
            for (size_t i = 0; i < nh; i++) {
                const __m256 qv = _mm256_loadu_ps(q + i * hd + d);
#pragma GCC unroll 4
                for (int k = 0; k < 4; k++) acc[i][k] = _mm256_fmadd_ps(qv, r[k], acc[i][k]);
            }
        }
#pragma GCC unroll 4
        for (size_t i = 0; i < nh; i++) {
            _mm_storeu_ps(scores + i * ld + j, hsum4_ps(acc[i][0], acc[i][1], acc[i][2], acc[i][3]));
            scores_tail4(q + i * hd, hd8, hd, rows, j, scores + i * ld, f16);
        }
    }
    for (; j < n; j++)
        for (size_t i = 0; i < nh; i++) scores[i * ld + j] = dot_row(q + i * hd, rows, j, hd, f16);
}

/* scores[i * ld + j] = q_i . row j: whole tiles of heads, then one tile of the rest. */
SIMD_ALWAYS_INLINE void attn_scores_rows(const float *q, size_t nh, size_t hd, const cpu_attn_rows *rows, size_t n,
                                         float *scores, size_t ld, int f16) {
    size_t i = 0;
    for (; i + ATTN_SCORE_HEADS <= nh; i += ATTN_SCORE_HEADS)
        scores_tile(q + i * hd, ATTN_SCORE_HEADS, hd, rows, n, scores + i * ld, ld, f16);
    const size_t rest = nh - i;
    q += i * hd;
    scores += i * ld;
    if (ATTN_SCORE_HEADS > 3 && rest == 3) scores_tile(q, 3, hd, rows, n, scores, ld, f16);
    else if (ATTN_SCORE_HEADS > 2 && rest == 2) scores_tile(q, 2, hd, rows, n, scores, ld, f16);
    else if (rest == 1) scores_tile(q, 1, hd, rows, n, scores, ld, f16);
}

#if ATTN_VALUE_HEADS > 0
/* Sixteen values of row j from d on. */
SIMD_ALWAYS_INLINE __m512 row_load16(const cpu_attn_rows *rows, size_t j, size_t d, int f16) {
    return f16 ? _mm512_cvtph_ps(load_256(rows->f16 + j * rows->stride + d)) : _mm512_loadu_ps(rows->f32[j] + d);
}

/* Values [d, d + 64) of nh heads (a constant at every call, at most ATTN_VALUE_HEADS): out_i
 * += w[i * ld + j] * row j over the positions in order, 64 values of each head in registers,
 * each row slice loaded (widened) once for all the heads. */
SIMD_ALWAYS_INLINE void values_tile512(float *out, size_t nh, size_t hd, size_t d, const float *w, size_t ld,
                                       const cpu_attn_rows *rows, size_t n, int f16) {
    __m512 acc[ATTN_VALUE_HEADS][4];
#pragma GCC unroll 6
    for (size_t i = 0; i < nh; i++)
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++) acc[i][c] = _mm512_loadu_ps(out + i * hd + d + 16 * (size_t)c);
    for (size_t j = 0; j < n; j++) {
        __m512 r[4];
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++) r[c] = row_load16(rows, j, d + 16 * (size_t)c, f16);
#pragma GCC unroll 6
        for (size_t i = 0; i < nh; i++) {
            const __m512 wj = _mm512_set1_ps(w[i * ld + j]);
#pragma GCC unroll 4
            for (int c = 0; c < 4; c++) acc[i][c] = _mm512_fmadd_ps(wj, r[c], acc[i][c]);
        }
    }
#pragma GCC unroll 6
    for (size_t i = 0; i < nh; i++)
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++) _mm512_storeu_ps(out + i * hd + d + 16 * (size_t)c, acc[i][c]);
}
#endif

/* out_i += w_ij * rows[j] for j in order, one fused multiply-add per value as avx2_axpy.
 * With ATTN_VALUE_HEADS, blocks of 64 values go through values_tile512; otherwise 64 values
 * of one head at a time are held in registers across the chunk of positions. */
SIMD_ALWAYS_INLINE void attn_values_rows(float *out, size_t nh, size_t hd, const float *w, size_t ld,
                                         const cpu_attn_rows *rows, size_t n, int f16) {
    size_t d = 0;
#if ATTN_VALUE_HEADS > 0
    for (; d + 64 <= hd; d += 64) {
        size_t i = 0;
        for (; i + ATTN_VALUE_HEADS <= nh; i += ATTN_VALUE_HEADS)
            values_tile512(out + i * hd, ATTN_VALUE_HEADS, hd, d, w + i * ld, ld, rows, n, f16);
        const size_t rest = nh - i;
        if (ATTN_VALUE_HEADS > 3 && rest == 3) values_tile512(out + i * hd, 3, hd, d, w + i * ld, ld, rows, n, f16);
        else if (ATTN_VALUE_HEADS > 2 && rest == 2) values_tile512(out + i * hd, 2, hd, d, w + i * ld, ld, rows, n, f16);
        else if (rest == 1) values_tile512(out + i * hd, 1, hd, d, w + i * ld, ld, rows, n, f16);
    }
#endif
    for (; d + 64 <= hd; d += 64)
        for (size_t i = 0; i < nh; i++) {
            float *o = out + i * hd + d;
            /* unrolled so acc stays in registers (a rolled loop kept it on the stack: 4x slower) */
            __m256 acc[8];
#pragma GCC unroll 8
            for (int c = 0; c < 8; c++) acc[c] = _mm256_loadu_ps(o + 8 * c);
            for (size_t j = 0; j < n; j++) {
                const __m256 wj = _mm256_set1_ps(w[i * ld + j]);
#pragma GCC unroll 8
                for (int c = 0; c < 8; c++)
                    acc[c] = _mm256_fmadd_ps(wj, row_load8(rows, j, d + 8 * c, f16), acc[c]);
            }
#pragma GCC unroll 8
            for (int c = 0; c < 8; c++) _mm256_storeu_ps(o + 8 * c, acc[c]);
        }
    for (; d + 8 <= hd; d += 8)
        for (size_t i = 0; i < nh; i++) {
            __m256 acc = _mm256_loadu_ps(out + i * hd + d);
            for (size_t j = 0; j < n; j++)
                acc = _mm256_fmadd_ps(_mm256_set1_ps(w[i * ld + j]), row_load8(rows, j, d, f16), acc);
            _mm256_storeu_ps(out + i * hd + d, acc);
        }
    for (; d < hd; d++)
        for (size_t i = 0; i < nh; i++)
            for (size_t j = 0; j < n; j++)
                out[i * hd + d] = fmaf(w[i * ld + j], row_value(rows, j, d, f16), out[i * hd + d]);
}

#endif
