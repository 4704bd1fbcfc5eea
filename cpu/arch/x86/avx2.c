/* AVX2 + FMA + F16C kernels. Compiled with those target flags (Makefile); called only after
 * llmm__cpu_kernels_get(CPU_ISA_AVX2) checked the CPU. Empty on other architectures. */
#include "kernel_table.h"

#if defined(__x86_64__)

#include <math.h>
#include <string.h>

#include "kernels/exp_poly.h"
#include "kernels/gelu_poly.h"
#include "table.h"
#include "simd.h"

/* ---------------------------------------------------------------- int8 dots */

/* maddubs adds pairs of u8 x s8 products into int16 with saturation; no pair can saturate
 * here: |Q8_0 weight quant| <= 128 (-128 from a file becomes 128 unsigned), |x quant| <= 127,
 * 2 * 128 * 127 = 32512 < 32767. */
static inline __m256i dot_u8s8(__m256i u, __m256i s) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}

static inline void prep_q4_0_pair(const uint8_t *qa, const uint8_t *qb, __m256i *lo, __m256i *hi) {
    const __m256i q = _mm256_loadu2_m128i((const __m128i *)(const void *)qb, (const __m128i *)(const void *)qa);
    const __m256i mask = _mm256_set1_epi8(0x0f);
    *lo = _mm256_and_si256(q, mask);
    *hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), mask);
}

/* Each maddubs pair sum is at most 2 * 15 * 127 = 3810, the two added 7620 < 32767: one madd
 * widens both. */
static inline __m256i dot_q4_0_pair(__m256i lo, __m256i hi, __m256i x_lo, __m256i x_hi) {
    const __m256i s16 = _mm256_add_epi16(_mm256_maddubs_epi16(lo, x_lo), _mm256_maddubs_epi16(hi, x_hi));
    return _mm256_madd_epi16(s16, _mm256_set1_epi16(1));
}
#define Q4_0_PAIR_X16 0

/* Signed x signed through the unsigned-signed multiply: |w| times x with w's sign. */
static inline __m256i prep_q8_0(__m256i w) { return w; }
static inline __m256i dot_q8_0(__m256i w, __m256i x) {
    return dot_u8s8(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
}
#define Q8_0_OFFSET 0
/* 8 prepared weight blocks and their 8 products fill the 16 registers already */
#define Q_TILE_X 2
/* Steps of 3-16 operand rows take one pass over the blocks instead of one per Q_TILE_X rows:
 * each block's 8 weight rows unpacked once and applied to every operand row, their
 * accumulators in L1 rather than registers. Unpacking is a fixed cost per block and pass, so
 * this pays most where it is dear (Q5_0's 5th bits). One matmul of 896 x 4864 (callgrind,
 * millions of instructions, 4 / 8 / 16 rows): Q4_0 4.20 / 7.81 / 15.03 -> 3.98 / 6.41 / 11.27,
 * Q8_0 5.10 / 9.57 / 18.50 -> 4.83 / 8.00 / 14.36. The K-quant kernels keep their two rows
 * per pass: their unpacked super-block does not stay in registers, and counted 1.0-1.4x the
 * instructions with all rows in one pass. */
#define Q_BATCH_X 16

#include "gemm_int8.h"
#include "gemm_iq4_xs.h"

static inline __m256i kq_madd_acc(__m256i acc, __m256i p, __m256i s) {
    return _mm256_add_epi32(acc, _mm256_madd_epi16(p, s));
}
/* with one operand row the 8 rows' lane vectors and the unpacked quants fit; two spill some */
#define KQ_TILE_X 2

#include "gemm_kquant.h"

/* each pair sum at most 2 x 31 x 127, the two added 15748 < 32767: one madd widens both */
static inline __m256i dot_u5_pair(__m256i lo, __m256i hi, __m256i x_lo, __m256i x_hi) {
    return dot_q4_0_pair(lo, hi, x_lo, x_hi);
}

/* Each byte picks the qh byte holding its bit, then tests its own bit. */
static inline void add_bit4_pair(__m256i *lo, __m256i *hi, uint32_t ha, uint32_t hb) {
    const __m256i h = _mm256_set_m128i(_mm_cvtsi32_si128((int)hb), _mm_cvtsi32_si128((int)ha));
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull), b16 = _mm256_set1_epi8(0x10);
    const __m256i pick_lo = _mm256_set_epi64x(0x0101010101010101ll, 0, 0x0101010101010101ll, 0);
    const __m256i pick_hi = _mm256_set_epi64x(0x0303030303030303ll, 0x0202020202020202ll, 0x0303030303030303ll,
                                              0x0202020202020202ll);
    const __m256i h_lo = _mm256_cmpeq_epi8(_mm256_and_si256(_mm256_shuffle_epi8(h, pick_lo), bit), bit);
    const __m256i h_hi = _mm256_cmpeq_epi8(_mm256_and_si256(_mm256_shuffle_epi8(h, pick_hi), bit), bit);
    *lo = _mm256_or_si256(*lo, _mm256_and_si256(h_lo, b16));
    *hi = _mm256_or_si256(*hi, _mm256_and_si256(h_hi, b16));
}

#include "gemm_legacy.h"
#include "gemm_packed8.h"

PK_GEMM_AS_STORED(gemm_q4_0_avx2, gemm_q4_0, PK_Q4_0)
PK_GEMM_AS_STORED(gemm_q5_0_avx2, gemm_q5_0, PK_Q5_0)
PK_GEMM_AS_STORED(gemm_q4_1_avx2, gemm_q4_1, PK_Q4_1)
PK_GEMM_AS_STORED(gemm_q5_1_avx2, gemm_q5_1, PK_Q5_1)
PK_GEMM_AS_STORED(gemm_q8_0_avx2, gemm_q8_0, PK_Q8_0)
PK_GEMM_AS_STORED(gemm_iq4_nl_avx2, gemm_iq4_nl, PK_IQ4_NL)
PK_GEMM_AS_STORED(gemm_q4_K_avx2, gemm_q4_K, PK_Q4_K)
PK_GEMM_AS_STORED(gemm_q5_K_avx2, gemm_q5_K, PK_Q5_K)
PK_GEMM_AS_STORED(gemm_q6_K_avx2, gemm_q6_K, PK_Q6_K)

/* ---------------------------------------------------------------- operands */

/* llmm__quantize_row_q8_0 bit for bit: amax, d = amax / 127 stored as f16 (round to nearest
 * even, the hardware conversion), quants round(x * 127 / amax) to nearest even
 * (cvtps_epi32 under the default rounding mode, as nearbyintf). */
/* The quants of block xb at inverse scale id into qb (nearest even), their 8-lane partial sums
 * returned, clamped to [-127, 127] as the scalar's llmm_round_clamp. With finite values the
 * clamp moves nothing (id = 127 / amax). A block with a NaN (an activation gone NaN or
 * infinite, from a damaged file) can convert to INT_MIN (a NaN product) or far above 127 (max_ps
 * returns its second operand for a NaN, so amax can miss the largest value); the packs
 * saturated those in the quants while the sums kept them, and the kernels' 128 * sum then
 * overflowed. Two integer ops per 8 values: negligible next to a decode step. */
SIMD_ALWAYS_INLINE __m256i quantize_q8_quants(const float *xb, __m256 id, int8_t *qb) {
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    const __m256i lo = _mm256_set1_epi32(-127), hi = _mm256_set1_epi32(127);
    __m256i q[4];
    for (int k = 0; k < 4; k++) {
        const __m256i v = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(xb + 8 * k), id));
        q[k] = _mm256_max_epi32(_mm256_min_epi32(v, hi), lo);
    }
    /* the packs interleave 4-value groups across the 128-bit halves; the permute restores order */
    const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
    _mm256_storeu_si256((__m256i *)(void *)qb, _mm256_permutevar8x32_epi32(p, order));
    return _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
}

/* Lane i: the largest lane of m[i] (max is exact in any order). */
SIMD_ALWAYS_INLINE __m256 lane_maxes(const __m256 m[8]) {
#define PAIR_MAX(a, b) _mm256_max_ps(_mm256_shuffle_ps(a, b, 0x88), _mm256_shuffle_ps(a, b, 0xdd))
    const __m256 q0 = PAIR_MAX(PAIR_MAX(m[0], m[1]), PAIR_MAX(m[2], m[3]));
    const __m256 q1 = PAIR_MAX(PAIR_MAX(m[4], m[5]), PAIR_MAX(m[6], m[7]));
#undef PAIR_MAX
    return _mm256_max_ps(_mm256_permute2f128_ps(q0, q1, 0x20), _mm256_permute2f128_ps(q0, q1, 0x31));
}

/* llmm__quantize_row_q8_0 bit for bit: amax, d = amax / 127 stored as f16 (round to nearest
 * even, the hardware conversion), quants round(x * 127 / amax) to nearest even
 * (cvtps_epi32 under the default rounding mode, as nearbyintf). Eight blocks at a time: their
 * maxima, scales and inverse scales as one vector each and their sums by one reduction tree,
 * where block by block two scalar divisions and two horizontal reductions made the quantizer a
 * large share of the calling thread's work between the matmuls of a decode step. With s,
 * also llmm__quantize_row_q8_1's s = sum * d (d before its f16 rounding) as f16, widened; sum
 * and s may each be NULL. */
SIMD_ALWAYS_INLINE void quantize_q8_fields(const float *x, int8_t *qs, float *d, int32_t *sum, float *s, size_t n) {
    const __m256 sign = _mm256_set1_ps(-0.0f), v127 = _mm256_set1_ps(127.f), zero = _mm256_setzero_ps();
    const size_t nb = n / QK8_0;
    size_t b = 0;
    for (; b + 8 <= nb; b += 8) {
        const float *xg = x + b * QK8_0;
        __m256 m[8];
        for (int i = 0; i < 8; i++) {
            const float *xb = xg + i * QK8_0;
            const __m256 m01 = _mm256_max_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(xb)),
                                             _mm256_andnot_ps(sign, _mm256_loadu_ps(xb + 8)));
            const __m256 m23 = _mm256_max_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(xb + 16)),
                                             _mm256_andnot_ps(sign, _mm256_loadu_ps(xb + 24)));
            m[i] = _mm256_max_ps(m01, m23);
        }
        const __m256 amax = lane_maxes(m);
        /* id = amax != 0 ? 127 / amax : 0 (unordered counts as != 0, as in C) */
        const __m256 id = _mm256_and_ps(_mm256_div_ps(v127, amax), _mm256_cmp_ps(amax, zero, _CMP_NEQ_UQ));
        const __m256 dv = _mm256_div_ps(amax, v127);
        _mm256_storeu_ps(d + b, _mm256_cvtph_ps(_mm256_cvtps_ph(dv, _MM_FROUND_TO_NEAREST_INT)));
        __m256i part[8];
        for (int i = 0; i < 8; i++)
            part[i] = quantize_q8_quants(xg + i * QK8_0, _mm256_permutevar8x32_ps(id, _mm256_set1_epi32(i)),
                                         qs + (b + i) * QK8_0);
        const __m256i sums = block_sums(part);
        if (sum) _mm256_storeu_si256((__m256i *)(void *)(sum + b), sums);
        if (s) {
            const __m256 sd = _mm256_mul_ps(_mm256_cvtepi32_ps(sums), dv);
            _mm256_storeu_ps(s + b, _mm256_cvtph_ps(_mm256_cvtps_ph(sd, _MM_FROUND_TO_NEAREST_INT)));
        }
    }
    for (; b < nb; b++) {
        const float *xb = x + b * QK8_0;
        __m256 v[4];
        for (int k = 0; k < 4; k++) v[k] = _mm256_andnot_ps(sign, _mm256_loadu_ps(xb + 8 * k));
        const float amax = hmax_ps(_mm256_max_ps(_mm256_max_ps(v[0], v[1]), _mm256_max_ps(v[2], v[3])));
        d[b] = _cvtsh_ss(_cvtss_sh(amax / 127.f, _MM_FROUND_TO_NEAREST_INT));
        const int32_t isum =
            hsum_epi32(quantize_q8_quants(xb, _mm256_set1_ps(amax != 0.f ? 127.f / amax : 0.f), qs + b * QK8_0));
        if (sum) sum[b] = isum;
        if (s) s[b] = _cvtsh_ss(_cvtss_sh((float)isum * (amax / 127.f), _MM_FROUND_TO_NEAREST_INT));
    }
}

void llmm__avx2_quantize_q8(const float *x, int8_t *qs, float *d, int32_t *sum, size_t n) {
    quantize_q8_fields(x, qs, d, sum, NULL, n);
}

/* Q8_1 operands (Q4_1, Q5_1 weights), vectorized like Q8_0's: block by block through the type
 * table's quantizer, fmaxf and nearbyintf library calls made them a visible part of decode. */
void llmm__avx2_quantize_q8_1(const float *x, int8_t *qs, float *d, float *s, size_t n) {
    quantize_q8_fields(x, qs, d, NULL, s, n);
}

/* The first value of largest magnitude in a Q8_K super-block (amax > 0 its magnitude): the
 * scalar's running strict > keeps the first of equal magnitudes, so with both +a and -a in a
 * block the earlier one sets the scale's sign. */
static float first_of_magnitude(const float *xb, float amax) {
    const __m256 sign = _mm256_set1_ps(-0.0f), a = _mm256_set1_ps(amax);
    for (int k = 0; k < QK_K / 8; k++) {
        const __m256 v = _mm256_andnot_ps(sign, _mm256_loadu_ps(xb + 8 * k));
        if (_mm256_movemask_ps(_mm256_cmp_ps(v, a, _CMP_EQ_OQ)))
            for (int i = 8 * k;; i++)
                if (fabsf(xb[i]) == amax) return xb[i];
    }
    return 0.0f; /* not reached: amax is one of the magnitudes */
}

/* llmm__quantize_row_q8_K bit for bit: iscale = -127 / (the signed value of largest magnitude)
 * and d = 1 / iscale as the scalar divides, quants iscale * x clamped to [-128, 127] then
 * rounded to nearest even (cvtps_epi32 under the default rounding mode, as nearbyintf). max_ps
 * and min_ps return their second operand for a NaN, so 0 * inf (a block whose largest value
 * is subnormal makes iscale infinite) gives -128 as the scalar's !(v > -128) does. The group
 * sums are exact integer sums in any order. */
void llmm__avx2_quantize_q8k(const float *x, int8_t *qs, float *d, int16_t *bsums, size_t n) {
    const __m256 sign = _mm256_set1_ps(-0.0f), lo = _mm256_set1_ps(-128.0f), hi = _mm256_set1_ps(127.0f);
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (size_t b = 0; b < n / QK_K; b++) {
        const float *xb = x + b * QK_K;
        int8_t *qb = qs + b * QK_K;
        int16_t *sb = bsums + b * (QK_K / 16);
        __m256 m[4];
        for (int k = 0; k < 4; k++) m[k] = _mm256_andnot_ps(sign, _mm256_loadu_ps(xb + 8 * k));
        for (int k = 4; k < QK_K / 8; k++)
            m[k % 4] = _mm256_max_ps(m[k % 4], _mm256_andnot_ps(sign, _mm256_loadu_ps(xb + 8 * k)));
        const float amax = hmax_ps(_mm256_max_ps(_mm256_max_ps(m[0], m[1]), _mm256_max_ps(m[2], m[3])));
        if (amax == 0.0f) {
            d[b] = 0.0f;
            memset(qb, 0, QK_K);
            memset(sb, 0, QK_K / 16 * sizeof *sb);
            continue;
        }
        const float iscale = -127.0f / first_of_magnitude(xb, amax);
        const __m256 vs = _mm256_set1_ps(iscale);
        __m128i g[4]; /* the sums of groups 4c .. 4c + 3 */
        for (int c = 0; c < 4; c++) {
            __m256i q[8];
            for (int k = 0; k < 8; k++) {
                const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(xb + 64 * c + 8 * k), vs);
                q[k] = _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(v, lo), hi));
            }
            /* the packs interleave 4-value groups across the 128-bit halves; the permute restores order */
            for (int h = 0; h < 2; h++) {
                const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(q[4 * h], q[4 * h + 1]),
                                                     _mm256_packs_epi32(q[4 * h + 2], q[4 * h + 3]));
                _mm256_storeu_si256((__m256i *)(void *)(qb + 64 * c + 32 * h), _mm256_permutevar8x32_epi32(p, order));
            }
            /* two hadds leave group j's partial sums in lane j of each half */
            const __m256i s01 = _mm256_hadd_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
            const __m256i s23 = _mm256_hadd_epi32(_mm256_add_epi32(q[4], q[5]), _mm256_add_epi32(q[6], q[7]));
            const __m256i s = _mm256_hadd_epi32(s01, s23);
            g[c] = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
        }
        /* |group sum| <= 16 * 128: the saturating packs never clip */
        _mm_storeu_si128((__m128i *)(void *)sb, _mm_packs_epi32(g[0], g[1]));
        _mm_storeu_si128((__m128i *)(void *)(sb + 8), _mm_packs_epi32(g[2], g[3]));
        d[b] = 1.0f / iscale;
    }
}

void llmm__avx2_round_f16(const float *x, float *out, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT)));
    for (; i < n; i++) out[i] = _cvtsh_ss(_cvtss_sh(x[i], _MM_FROUND_TO_NEAREST_INT));
}

/* ---------------------------------------------------------------- F32 weights */

#define F32_ROWS 4
#define F32_TILE_X 2

/* 4 weight rows x nx operand rows, one 8-lane sum per pair: llmm__dot_f32's partial sums.
 * next: the next tile's first row (rows are contiguous), prefetched along; NULL for none. */
SIMD_ALWAYS_INLINE void f32_tile(const float *const w[F32_ROWS], const float *next, size_t rb,
                                 const float *const x[F32_TILE_X], size_t n8, size_t nx,
                                 __m256 acc[F32_ROWS][F32_TILE_X]) {
    for (int k = 0; k < F32_ROWS; k++)
        for (size_t r = 0; r < nx; r++) acc[k][r] = _mm256_setzero_ps();
    for (size_t i = 0; i < n8; i += 8) {
        if (next) /* the next tile's share: 8 values of 4 rows' worth */
            prefetch_span((uintptr_t)next + i * F32_ROWS * sizeof(float), 8 * F32_ROWS * sizeof(float),
                          F32_ROWS * rb > PF_L1_MAX_TILE);
        __m256 xv[F32_TILE_X];
        for (size_t r = 0; r < nx; r++) xv[r] = _mm256_loadu_ps(x[r] + i);
#pragma GCC unroll 4
        for (int k = 0; k < F32_ROWS; k++) {
            const __m256 wv = _mm256_loadu_ps(w[k] + i);
            for (size_t r = 0; r < nx; r++) acc[k][r] = _mm256_add_ps(acc[k][r], _mm256_mul_ps(wv, xv[r]));
        }
    }
}

/* llmm__dot_f32's ending: the tail first, then the eight lanes in order. */
static float f32_finish(__m256 acc, const float *w, const float *x, size_t n8, size_t n) {
    float sum = 0, lanes[8];
    for (size_t i = n8; i < n; i++) sum += w[i] * x[i];
    _mm256_storeu_ps(lanes, acc);
    for (int l = 0; l < 8; l++) sum += lanes[l];
    return sum;
}

void llmm__avx2_gemm_f32(const llmm_tensor *w, size_t j0, size_t j1, const cpu_operand *x, size_t n_rows, float *out,
                   size_t ldo) {
    const size_t n = x->n, n8 = n / 8 * 8;
    for (size_t j = j0; j < j1; j += F32_ROWS) {
        const size_t nj = LLMM_MIN((size_t)F32_ROWS, j1 - j);
        const float *rows[F32_ROWS];
        for (size_t k = 0; k < F32_ROWS; k++)
            rows[k] = (const float *)((const uint8_t *)w->data + (j + LLMM_MIN(k, nj - 1)) * w->row_bytes);
        const float *next =
            j + F32_ROWS < j1 ? (const float *)((const uint8_t *)w->data + (j + F32_ROWS) * w->row_bytes) : NULL;
        for (size_t r0 = 0; r0 < n_rows; r0 += F32_TILE_X) {
            const size_t nx = LLMM_MIN((size_t)F32_TILE_X, n_rows - r0);
            const float *xr[F32_TILE_X] = {x->f32 + r0 * n, x->f32 + (r0 + nx - 1) * n};
            const float *pf = r0 == 0 ? next : NULL;
            __m256 acc[F32_ROWS][F32_TILE_X];
            if (nx == 1) f32_tile(rows, pf, w->row_bytes, xr, n8, 1, acc);
            else f32_tile(rows, pf, w->row_bytes, xr, n8, F32_TILE_X, acc);
            for (size_t k = 0; k < nj; k++)
                for (size_t r = 0; r < nx; r++)
                    out[(r0 + r) * ldo + j + k] = f32_finish(acc[k][r], rows[k], xr[r], n8, n);
        }
    }
}

/* ---------------------------------------------------------------- F16 / BF16 weights */

/* The type table's order (lib/format/quant.c, half_dot): per (weight row, operand row) pair, 16
 * float lanes, 0-7 in one vector and 8-15 in another. A product of two halves is exact in
 * float, so fma(w, x, acc) adds exactly what the scalar's `lane += w * x` adds; adding the
 * two vectors and then hsum_ps pairs the lanes as the scalar does (l + 8, + 4, + 2, + 1). */

#define HALF_ROWS 4

SIMD_ALWAYS_INLINE __m256 load_bf16x8(const uint16_t *p) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(load_128(p)), 16));
}
SIMD_ALWAYS_INLINE __m256 load_half8(const uint16_t *p, int bf16) { return bf16 ? load_bf16x8(p) : load_f16x8(p); }
SIMD_ALWAYS_INLINE float half_to_float(uint16_t h, int bf16) { return bf16 ? llmm__bf16_to_f32(h) : _cvtsh_ss(h); }

typedef __m256 half_acc[2]; /* one (weight row, operand row) pair's 16 lanes */

/* 4 weight rows x one operand row. next: the next tile's first row, prefetched along; NULL
 * for none. */
SIMD_ALWAYS_INLINE void half_tile(const uint16_t *const w[HALF_ROWS], const uint16_t *next, size_t rb, const float *x,
                                  size_t n16, int bf16, half_acc acc[HALF_ROWS]) {
    for (int k = 0; k < HALF_ROWS; k++) acc[k][0] = acc[k][1] = _mm256_setzero_ps();
    for (size_t i = 0; i < n16; i += 16) {
        if (next)
            prefetch_span((uintptr_t)next + i * HALF_ROWS * sizeof(uint16_t), 16 * HALF_ROWS * sizeof(uint16_t),
                          HALF_ROWS * rb > PF_L1_MAX_TILE);
        const __m256 xlo = _mm256_loadu_ps(x + i), xhi = _mm256_loadu_ps(x + i + 8);
#pragma GCC unroll 4
        for (int k = 0; k < HALF_ROWS; k++) {
            acc[k][0] = _mm256_fmadd_ps(load_half8(w[k] + i, bf16), xlo, acc[k][0]);
            acc[k][1] = _mm256_fmadd_ps(load_half8(w[k] + i + 8, bf16), xhi, acc[k][1]);
        }
    }
}

SIMD_ALWAYS_INLINE float half_finish(const half_acc acc, const uint16_t *w, const float *x, size_t n16, size_t n,
                                     int bf16) {
    float sum = hsum_ps(_mm256_add_ps(acc[0], acc[1]));
    for (size_t i = n16; i < n; i++) sum += half_to_float(w[i], bf16) * x[i];
    return sum;
}

/* Several operand rows (prefill): tiles of 2 weight rows x 2 operand rows, so each widened
 * weight vector serves two prompt rows (8 accumulators, 4 weight vectors, 2 operand vectors
 * of the 16 registers), over blocks of HALF_BLOCK x HALF_BLOCK rows that stay in L2. Each
 * pair's lanes sum the same positions in the same order as half_tile's: the same bits. */
#define HALF_TILE_X 2
#define HALF_BLOCK 16

SIMD_ALWAYS_INLINE void half_tile_2x2(const uint16_t *const w[2], const float *const x[HALF_TILE_X], size_t n16,
                                      int bf16, half_acc acc[2][HALF_TILE_X]) {
    __m256 a[2][HALF_TILE_X][2];
    for (int k = 0; k < 2; k++)
        for (int r = 0; r < HALF_TILE_X; r++) a[k][r][0] = a[k][r][1] = _mm256_setzero_ps();
    for (size_t i = 0; i < n16; i += 16) {
        __m256 wv[2][2];
#pragma GCC unroll 2
        for (int k = 0; k < 2; k++) {
            wv[k][0] = load_half8(w[k] + i, bf16);
            wv[k][1] = load_half8(w[k] + i + 8, bf16);
        }
#pragma GCC unroll 2
        for (int r = 0; r < HALF_TILE_X; r++) {
            const __m256 xlo = _mm256_loadu_ps(x[r] + i), xhi = _mm256_loadu_ps(x[r] + i + 8);
#pragma GCC unroll 2
            for (int k = 0; k < 2; k++) {
                a[k][r][0] = _mm256_fmadd_ps(wv[k][0], xlo, a[k][r][0]);
                a[k][r][1] = _mm256_fmadd_ps(wv[k][1], xhi, a[k][r][1]);
            }
        }
    }
    for (int k = 0; k < 2; k++)
        for (int r = 0; r < HALF_TILE_X; r++) acc[k][r][0] = a[k][r][0], acc[k][r][1] = a[k][r][1];
}

#include "kernels/gemm_half_tiles.h"

SIMD_ALWAYS_INLINE void gemm_half(const llmm_tensor *w, size_t j0, size_t j1, const cpu_operand *x, size_t n_rows,
                                  float *out, size_t ldo, int bf16) {
    if (n_rows > 1) {
        half_gemm_rows(w, j0, j1, x, n_rows, out, ldo, bf16);
        return;
    }
    /* one operand row (decode): 4 weight rows per tile */
    const size_t n = x->n, n16 = n / 16 * 16;
    for (size_t j = j0; j < j1; j += HALF_ROWS) {
        const size_t nj = LLMM_MIN((size_t)HALF_ROWS, j1 - j);
        const uint16_t *rows[HALF_ROWS];
        for (size_t k = 0; k < HALF_ROWS; k++)
            rows[k] = (const uint16_t *)((const uint8_t *)w->data + (j + LLMM_MIN(k, nj - 1)) * w->row_bytes);
        const uint16_t *next =
            j + HALF_ROWS < j1 ? (const uint16_t *)((const uint8_t *)w->data + (j + HALF_ROWS) * w->row_bytes) : NULL;
        half_acc acc[HALF_ROWS];
        half_tile(rows, next, w->row_bytes, x->f32, n16, bf16, acc);
        for (size_t k = 0; k < nj; k++) out[j + k] = half_finish(acc[k], rows[k], x->f32, n16, n, bf16);
    }
}

void llmm__avx2_gemm_f16(const llmm_tensor *w, size_t j0, size_t j1, const cpu_operand *x, size_t n_rows, float *out,
                   size_t ldo) {
    gemm_half(w, j0, j1, x, n_rows, out, ldo, 0);
}

void llmm__avx2_gemm_bf16(const llmm_tensor *w, size_t j0, size_t j1, const cpu_operand *x, size_t n_rows, float *out,
                    size_t ldo) {
    gemm_half(w, j0, j1, x, n_rows, out, ldo, 1);
}

/* ---------------------------------------------------------------- elementwise */

/* Squares in float, their sum in double (four lanes at a time), then the scalar's float
 * scale and left-to-right products x * scale * w. */
void llmm__avx2_rms_norm_row(const float *x, const float *w, float *out, size_t dim, float eps) {
    __m256d s0 = _mm256_setzero_pd(), s1 = _mm256_setzero_pd();
    size_t i = 0;
    for (; i + 8 <= dim; i += 8) {
        const __m256 v = _mm256_loadu_ps(x + i), sq = _mm256_mul_ps(v, v);
        s0 = _mm256_add_pd(s0, widen_lo(sq));
        s1 = _mm256_add_pd(s1, widen_hi(sq));
    }
    double sum = hsum_pd(_mm256_add_pd(s0, s1));
    for (size_t t = i; t < dim; t++) sum += (double)(x[t] * x[t]);
    const float mean = (float)(sum / (double)dim);
    const float scale = 1.0f / sqrtf(mean + eps);
    const __m256 vs = _mm256_set1_ps(scale);
    for (i = 0; i + 8 <= dim; i += 8)
        _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), vs), _mm256_loadu_ps(w + i)));
    for (; i < dim; i++) out[i] = x[i] * scale * w[i];
}

/* gate / (1 + e^-gate) * up, in the scalar's operation order. */
void llmm__avx2_silu_mul(float *gate, const float *up, size_t n) {
    const __m256 one = _mm256_set1_ps(1.0f), sign = _mm256_set1_ps(-0.0f);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 g = _mm256_loadu_ps(gate + i);
        const __m256 s = _mm256_div_ps(g, _mm256_add_ps(one, exp256_ps(_mm256_xor_ps(g, sign))));
        _mm256_storeu_ps(gate + i, _mm256_mul_ps(s, _mm256_loadu_ps(up + i)));
    }
    for (; i < n; i++) gate[i] = gate[i] / (1.0f + llmm_exp_poly(-gate[i])) * up[i];
}

/* gelu_tanh(gate) * up, in kernels/gelu_poly.h's steps. */
void llmm__avx2_gelu_mul(float *gate, const float *up, size_t n) {
    const __m256 one = _mm256_set1_ps(1.0f), minus_two_k = _mm256_set1_ps(LLMM_GELU_MINUS_TWO_K);
    const __m256 cubic = _mm256_set1_ps(LLMM_GELU_CUBIC);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 g = _mm256_loadu_ps(gate + i);
        const __m256 inner = _mm256_add_ps(one, _mm256_mul_ps(cubic, _mm256_mul_ps(g, g)));
        const __m256 z = _mm256_mul_ps(_mm256_mul_ps(g, minus_two_k), inner);
        const __m256 s = _mm256_div_ps(g, _mm256_add_ps(one, exp256_ps(z)));
        _mm256_storeu_ps(gate + i, _mm256_mul_ps(s, _mm256_loadu_ps(up + i)));
    }
    for (; i < n; i++) gate[i] = llmm_gelu_poly(gate[i]) * up[i];
}

double llmm__avx2_exp_sub_sum(float *s, size_t n, float max) {
    const __m256 vmax = _mm256_set1_ps(max);
    __m256d s0 = _mm256_setzero_pd(), s1 = _mm256_setzero_pd();
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 e = exp256_ps(_mm256_sub_ps(_mm256_loadu_ps(s + i), vmax));
        _mm256_storeu_ps(s + i, e);
        s0 = _mm256_add_pd(s0, widen_lo(e));
        s1 = _mm256_add_pd(s1, widen_hi(e));
    }
    double sum = hsum_pd(_mm256_add_pd(s0, s1));
    for (; i < n; i++) {
        s[i] = llmm_exp_poly(s[i] - max);
        sum += s[i];
    }
    return sum;
}

/* F16C's vcvtph2ps: one instruction per 8 values, where the portable converter takes a
 * dozen integer and float operations per vector. */
void llmm__avx2_f16_to_f32(const uint16_t *h, float *out, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, _mm256_cvtph_ps(load_128((const uint8_t *)(h + i))));
    for (; i < n; i++) out[i] = _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h[i])));
}

void llmm__avx2_axpy(float *y, float a, const float *x, size_t n) {
    const __m256 va = _mm256_set1_ps(a);
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    for (; i < n; i++) y[i] = fmaf(a, x[i], y[i]);
}

#define ATTN_SCORE_HEADS 2 /* 8 FMA chains and 4 rows: AVX2's 16 registers */
#define ATTN_TRANSPOSED 0
#define ATTN_VALUE_HEADS 0 /* no 512-bit values tile */
#include "attention.h"

float llmm__avx2_dot_f32(const float *a, const float *b, size_t n) {
    return dot_row(a, &(cpu_attn_rows){.f32 = &b}, 0, n, 0);
}

void llmm__avx2_attn_scores(const float *q, size_t nh, size_t hd, const float *const *rows, size_t n, float *scores,
                      size_t ld) {
    attn_scores_rows(q, nh, hd, &(cpu_attn_rows){.f32 = rows}, n, scores, ld, 0);
}

void llmm__avx2_attn_values(float *out, size_t nh, size_t hd, const float *w, size_t ld, const float *const *rows,
                      size_t n) {
    attn_values_rows(out, nh, hd, w, ld, &(cpu_attn_rows){.f32 = rows}, n, 0);
}

/* The F16 K/V rows of a block read where they lie (ops/attention.c does not widen them into scratch
 * and read them back): the same loops as over widened rows, so the same bits. */
void llmm__avx2_attn_scores_f16(const float *q, size_t nh, size_t hd, const uint16_t *rows, size_t row_stride, size_t n,
                          float *scores, size_t ld) {
    attn_scores_rows(q, nh, hd, &(cpu_attn_rows){.f16 = rows, .stride = row_stride}, n, scores, ld, 1);
}

void llmm__avx2_attn_values_f16(float *out, size_t nh, size_t hd, const float *w, size_t ld, const uint16_t *rows,
                          size_t row_stride, size_t n) {
    attn_values_rows(out, nh, hd, w, ld, &(cpu_attn_rows){.f16 = rows, .stride = row_stride}, n, 1);
}

/* ---------------------------------------------------------------- the table */

const cpu_kernels llmm__cpu_kernels_avx2 = {
    .name = "avx2",
    .isa = CPU_ISA_AVX2,
    .matmul =
        {
            AVX2_FLOAT_MATMULS,
            [LLMM_TYPE_Q4_0] = gemm_q4_0_avx2,
            [LLMM_TYPE_Q8_0] = gemm_q8_0_avx2,
            [LLMM_TYPE_Q5_0] = gemm_q5_0_avx2,
            [LLMM_TYPE_IQ4_NL] = gemm_iq4_nl_avx2,
            [LLMM_TYPE_IQ4_XS] = gemm_iq4_xs,
            [LLMM_TYPE_Q4_1] = gemm_q4_1_avx2,
            [LLMM_TYPE_Q5_1] = gemm_q5_1_avx2,
            [LLMM_TYPE_Q2_K] = gemm_q2_K,
            [LLMM_TYPE_Q3_K] = gemm_q3_K,
            [LLMM_TYPE_Q4_K] = gemm_q4_K_avx2,
            [LLMM_TYPE_Q5_K] = gemm_q5_K_avx2,
            [LLMM_TYPE_Q6_K] = gemm_q6_K_avx2,
        },
    PK_PACKED8_ENTRIES,
    AVX2_ROW_KERNELS,
    AVX2_ATTENTION_KERNELS,
    AVX2_DELTA_KERNELS,
};

#endif
