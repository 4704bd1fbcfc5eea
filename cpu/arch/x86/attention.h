/* Attention over a chunk of K/V rows (q.k scores, then the weighted sum of V rows) for the
 * x86 kernel files, on F32 rows or F16 rows widened in registers (exact: vcvtph2ps). The
 * including file defines
 *   ATTN_SCORE_HEADS  query heads per score tile: 4 positions x this many heads are
 *                     independent FMA chains, each row slice widened once for all of them
 *                     (2 for AVX2's 16 registers, 4 for AVX-512's 32)
 *   ATTN_VALUE_HEADS  0, or (AVX-512) heads per 512-bit values tile: each V row widened once
 *                     for that many heads, instead of once per head
 *   ATTN_TRANSPOSED   1 (AVX-512) for the transposed score path of many query vectors at once
 *                     (scores_transposed), else 0
 * and gets attn_scores_rows, attn_values_rows and dot_row.
 *
 * Numerics, whatever the tile: each score is one 8-lane FMA accumulator fed in d order and
 * summed by hsum4_ps / hsum_ps, which is llmm__avx2_dot_f32; each output value gets w * v added in
 * position order by one fused multiply-add, which is llmm__avx2_axpy (and the scalar table's). So
 * the AVX2 and AVX-512 tables give the same bits, and ops/attention.c's split of heads into
 * items does not matter. */
#ifndef LLMM_CPU_X86_ATTENTION_H
#define LLMM_CPU_X86_ATTENTION_H

#include <math.h>

#include "kernel_table.h"
#include "simd.h"

#if !defined(ATTN_SCORE_HEADS) || !defined(ATTN_VALUE_HEADS) || !defined(ATTN_TRANSPOSED)
#error "define ATTN_SCORE_HEADS, ATTN_VALUE_HEADS and ATTN_TRANSPOSED before including attention.h"
#endif

/* Four 8-lane dot accumulators to their four sums, each added in hsum_ps's order (halves,
 * then lanes 0+2 and 1+3, then those two), so a score equals llmm__avx2_dot_f32's bit for bit. */
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

#if ATTN_VALUE_HEADS > 0 || ATTN_TRANSPOSED
/* Sixteen values of row j from d on. */
SIMD_ALWAYS_INLINE __m512 row_load16(const cpu_attn_rows *rows, size_t j, size_t d, int f16) {
    return f16 ? _mm512_cvtph_ps(load_256(rows->f16 + j * rows->stride + d)) : _mm512_loadu_ps(rows->f32[j] + d);
}

#endif

/* Attention's q.k, bit for bit the scalar table's (kernel_table.c): eight FMA partial sums
 * and hsum_ps's tree (not the matmul's eight sequential lane adds, whose 8-add dependency
 * chain costs as much as the products at small head sizes), then the tail in order.
 * q . row j of rows. */
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
 * are independent FMA chains. Two heads per tile on AVX2 measured faster than one
 * (docs/performance.md, "CPU kernel choices, measured"). */
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

#if ATTN_TRANSPOSED
/* Positions per transposed chunk (one per float lane of a 512-bit vector), the largest head
 * size taken (a chunk is ATTN_T_MAX_HD x 16 floats on the stack) and the fewest query
 * vectors that pay for the transposition (prefill's blocks of rows x a group of heads). */
#define ATTN_T_POS 16
#define ATTN_T_MAX_HD 256
#define ATTN_T_MIN_HEADS 8

/* c[k] = lane k of every r[j]: a 16 x 16 float transpose (unpacks within 128-bit lanes, then
 * two rounds of 128-bit lane shuffles). */
SIMD_ALWAYS_INLINE void transpose16x16(const __m512 r[16], __m512 c[16]) {
    __m512 t[16], u[16];
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
        const __m512d a = _mm512_castps_pd(t[4 * i]), b = _mm512_castps_pd(t[4 * i + 1]);
        const __m512d c2 = _mm512_castps_pd(t[4 * i + 2]), d = _mm512_castps_pd(t[4 * i + 3]);
        u[4 * i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c2));
        u[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c2));
        u[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
        u[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
    }
    /* u[4i + k], 128-bit lane l: value 4l + k of rows 4i .. 4i+3 */
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) {
        const __m512 v0 = _mm512_shuffle_f32x4(u[k], u[4 + k], 0x88), v1 = _mm512_shuffle_f32x4(u[k], u[4 + k], 0xdd);
        const __m512 w0 = _mm512_shuffle_f32x4(u[8 + k], u[12 + k], 0x88);
        const __m512 w1 = _mm512_shuffle_f32x4(u[8 + k], u[12 + k], 0xdd);
        c[k] = _mm512_shuffle_f32x4(v0, w0, 0x88);
        c[8 + k] = _mm512_shuffle_f32x4(v0, w0, 0xdd);
        c[4 + k] = _mm512_shuffle_f32x4(v1, w1, 0x88);
        c[12 + k] = _mm512_shuffle_f32x4(v1, w1, 0xdd);
    }
}

/* kt[d * 16 + j] = value d of row j0 + j (widened), for j < m; zero for j >= m. */
SIMD_ALWAYS_INLINE void transpose_chunk(const cpu_attn_rows *rows, size_t j0, size_t m, size_t hd, float *kt, int f16) {
    for (size_t d = 0; d < hd; d += 16) {
        __m512 r[16], c[16];
#pragma GCC unroll 16
        for (size_t j = 0; j < 16; j++) r[j] = j < m ? row_load16(rows, j0 + j, d, f16) : _mm512_setzero_ps();
        transpose16x16(r, c);
#pragma GCC unroll 16
        for (int k = 0; k < 16; k++) _mm512_storeu_ps(kt + (d + (size_t)k) * ATTN_T_POS, c[k]);
    }
}

/* acc + k * (*q in every lane), the broadcast taken by the FMA from memory: from the
 * intrinsics GCC 12 keeps the broadcast in a register and folds the load of k into each FMA
 * instead, loading k once per query vector. */
SIMD_ALWAYS_INLINE __m512 fmadd_bcast(__m512 acc, __m512 k, const float *q) {
    __asm__("vfmadd231ps %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(k), "m"(*q));
    return acc;
}

/* nq (1 or 2, a constant) query vectors against the 16 positions of kt, each position in its
 * own lane: lane class l (values l, l + 8, ...) of vector v in accumulator a[v][l], FMAs in d
 * order, then the classes added as hsum_ps adds the lanes of dot_row's accumulator. So every
 * score is dot_row's, bit for bit, without a horizontal step per score. Two vectors per pass
 * share each load of kt (with one, the loads of kt and of the broadcasts bound the loop: 512-row
 * prefill attention was slower than on the 4 x 4 tiles). hd % 16 == 0: no tail. */
SIMD_ALWAYS_INLINE void scores_t16(const float *q, size_t nq, const float *kt, size_t hd, float *scores, size_t ld,
                                   __mmask16 keep) {
    __m512 a[2][8];
#pragma GCC unroll 2
    for (size_t v = 0; v < nq; v++)
#pragma GCC unroll 8
        for (int l = 0; l < 8; l++) a[v][l] = _mm512_setzero_ps();
    for (size_t d = 0; d < hd; d += 8)
#pragma GCC unroll 8
        for (int l = 0; l < 8; l++) {
            const __m512 k = _mm512_loadu_ps(kt + (d + (size_t)l) * ATTN_T_POS);
#pragma GCC unroll 2
            for (size_t v = 0; v < nq; v++)
                a[v][l] = fmadd_bcast(a[v][l], k, q + v * hd + d + (size_t)l);
        }
#pragma GCC unroll 2
    for (size_t v = 0; v < nq; v++) {
        const __m512 s = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a[v][0], a[v][4]), _mm512_add_ps(a[v][2], a[v][6])),
                                       _mm512_add_ps(_mm512_add_ps(a[v][1], a[v][5]), _mm512_add_ps(a[v][3], a[v][7])));
        _mm512_mask_storeu_ps(scores + v * ld, keep, s);
    }
}

/* attn_scores_rows for many query vectors (nh >= ATTN_T_MIN_HEADS, hd % 16 == 0): each chunk
 * of 16 rows is transposed once (values across lanes cost a horizontal sum per score; positions
 * across lanes cost nothing per score) and serves all nh vectors. */
SIMD_ALWAYS_INLINE void scores_transposed(const float *q, size_t nh, size_t hd, const cpu_attn_rows *rows, size_t n,
                                          float *scores, size_t ld, int f16) {
    float kt[ATTN_T_MAX_HD * ATTN_T_POS];
    for (size_t j0 = 0; j0 < n; j0 += ATTN_T_POS) {
        const size_t m = LLMM_MIN((size_t)ATTN_T_POS, n - j0);
        const __mmask16 keep = (__mmask16)((1u << m) - 1);
        transpose_chunk(rows, j0, m, hd, kt, f16);
        size_t i = 0;
        for (; i + 2 <= nh; i += 2) scores_t16(q + i * hd, 2, kt, hd, scores + i * ld + j0, ld, keep);
        if (i < nh) scores_t16(q + i * hd, 1, kt, hd, scores + i * ld + j0, ld, keep);
    }
}
#endif

/* scores[i * ld + j] = q_i . row j: whole tiles of heads, then one tile of the rest. */
SIMD_ALWAYS_INLINE void attn_scores_rows(const float *q, size_t nh, size_t hd, const cpu_attn_rows *rows, size_t n,
                                         float *scores, size_t ld, int f16) {
#if ATTN_TRANSPOSED
    if (nh >= ATTN_T_MIN_HEADS && hd % 16 == 0 && hd <= ATTN_T_MAX_HD) {
        scores_transposed(q, nh, hd, rows, n, scores, ld, f16);
        return;
    }
#endif
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

/* out_i += w_ij * rows[j] for j in order, one fused multiply-add per value as llmm__avx2_axpy.
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
        else if (ATTN_VALUE_HEADS > 2 && rest == 2)
            values_tile512(out + i * hd, 2, hd, d, w + i * ld, ld, rows, n, f16);
        else if (rest == 1) values_tile512(out + i * hd, 1, hd, d, w + i * ld, ld, rows, n, f16);
    }
#endif
    for (; d + 64 <= hd; d += 64)
        for (size_t i = 0; i < nh; i++) {
            float *o = out + i * hd + d;
            /* unrolled so acc stays in registers (a rolled loop kept it on the stack, several times
             * slower) */
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
