/* AVX-512 kernels: the int8 dots through VNNI's vpdpbusd (four u8 x s8 products summed into
 * each int32 lane in one instruction, no int16 saturation step), at 256-bit width so the tile
 * code is shared with AVX2 (gemm_int8.h); the 32 vector registers hold an 8-row operand
 * tile, so each weight block is unpacked once per 8 prompt rows instead of 4 (docs/performance.md,
 * "CPU kernel choices"). Everything else is the AVX2 code (see
 * table.h). Compiled with the AVX-512 target flags (Makefile); called only after
 * llmm__cpu_kernels_get(CPU_ISA_AVX512) checked the CPU. The same file gives the AMX table: this one
 * with Q4_0, Q5_0 and Q8_0 prompts on AMX-INT8 tiles (gemm_amx.h), chosen only
 * after llmm__cpu_kernels_get(CPU_ISA_AMX) checked the CPU and obtained the OS's permission. */
#include "kernel_table.h"

#if defined(__x86_64__)

#if !defined(__AVX512F__) || !defined(__AVX512BW__) || !defined(__AVX512VL__) || !defined(__AVX512VNNI__)
#error "avx512.c needs -mavx512f -mavx512bw -mavx512vl -mavx512vnni (see the Makefile)"
#endif

#include "table.h"
#include "simd.h"

static inline __m256i dot_u8s8(__m256i u, __m256i s) { return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s); }

/* Nibbles kept in place by masks alone: the high nibble as it is (times 16), the low one
 * shifted up 4 (times 16 too), so that both dot products can accumulate into one register;
 * vpdpbusd takes products up to 240 x 127 without saturating (maddubs would not). */
static inline void prep_q4_0_pair(const uint8_t *qa, const uint8_t *qb, __m256i *lo, __m256i *hi) {
    const __m256i q = _mm256_loadu2_m128i((const __m128i *)(const void *)qb, (const __m128i *)(const void *)qa);
    const __m256i mask = _mm256_set1_epi8((char)0xf0);
    *lo = _mm256_and_si256(_mm256_slli_epi16(q, 4), mask);
    *hi = _mm256_and_si256(q, mask);
}

static inline __m256i dot_q4_0_pair(__m256i lo, __m256i hi, __m256i x_lo, __m256i x_hi) {
    return _mm256_dpbusd_epi32(_mm256_dpbusd_epi32(_mm256_setzero_si256(), lo, x_lo), hi, x_hi);
}
#define Q4_0_PAIR_X16 1

/* w + 128 as an unsigned byte (flipping the sign bit); the extra 128 * sum(x) is subtracted
 * after the block sum (Q8_0_OFFSET). */
static inline __m256i prep_q8_0(__m256i w) { return _mm256_xor_si256(w, _mm256_set1_epi8((char)0x80)); }
static inline __m256i dot_q8_0(__m256i w_plus_128, __m256i x) { return dot_u8s8(w_plus_128, x); }
#define Q8_0_OFFSET 128
#define Q_TILE_X 8 /* operand rows per tile (see the top) */

#include "gemm_int8.h"
#include "gemm_rows16.h"
#include "gemm_iq4_xs.h"
#include "gemm_iq4_xs_rows16.h"

/* For one operand row (decode) Q4_0 and Q8_0 stay on the 8-row tiles (see
 * gemm_rows16.h); from two rows on the 16-row tiles are faster. Q5_0 takes the 16-row
 * tiles for every row count: its 8-row tiles assemble the 5th-bit masks with scalar code, the
 * 16-row ones with one shuffle and one test per vector (docs/performance.md, "CPU kernel
 * choices"). */
#define GEMM_BY_ROWS(NAME, ONE_ROW, ROWS16)                                                                  \
    static void NAME(const llmm_tensor *w, size_t j0, size_t j1, const cpu_operand *x, size_t n_rows,      \
                     float *out, size_t ldo) {                                                             \
        if (n_rows == 1) ONE_ROW(w, j0, j1, x, n_rows, out, ldo);                                          \
        else ROWS16(w, j0, j1, x, n_rows, out, ldo);                                                       \
    }
GEMM_BY_ROWS(gemm_q4_0_avx512, gemm_q4_0, gemm_q4_0_rows16)
GEMM_BY_ROWS(gemm_q8_0_avx512, gemm_q8_0, gemm_q8_0_rows16)
GEMM_BY_ROWS(gemm_iq4_nl_avx512, gemm_iq4_nl, gemm_iq4_nl_rows16)
GEMM_BY_ROWS(gemm_iq4_xs_avx512, gemm_iq4_xs, gemm_iq4_xs_rows16)
#include "gemm_amx.h" /* after the rows16 functions it falls back on */

/* vpdpwssd: the K-quants' scale multiply and the add in one instruction */
static inline __m256i kq_madd_acc(__m256i acc, __m256i p, __m256i s) { return _mm256_dpwssd_epi32(acc, p, s); }
/* as Q_TILE_X: 8 operand rows per tile measured faster than 4 for every K-quant
 * (docs/performance.md, "CPU kernel choices, measured") */
#define KQ_TILE_X 8
#define KQ_ROW_AVX512 1 /* one operand row (decode) on 512-bit vectors (gemm_kquant.h) */

#include "gemm_kquant.h"
#include "gemm_kquant_rows16.h"

GEMM_BY_ROWS(gemm_q2_K_avx512, gemm_q2_K, gemm_q2_K_rows16)
GEMM_BY_ROWS(gemm_q3_K_avx512, gemm_q3_K, gemm_q3_K_rows16)
GEMM_BY_ROWS(gemm_q4_K_avx512, gemm_q4_K, gemm_q4_K_rows16)
GEMM_BY_ROWS(gemm_q5_K_avx512, gemm_q5_K, gemm_q5_K_rows16)
GEMM_BY_ROWS(gemm_q6_K_avx512, gemm_q6_K, gemm_q6_K_rows16)

static inline __m256i dot_u5_pair(__m256i lo, __m256i hi, __m256i x_lo, __m256i x_hi) {
    return _mm256_dpbusd_epi32(_mm256_dpbusd_epi32(_mm256_setzero_si256(), lo, x_lo), hi, x_hi);
}

/* The qh words are byte masks already: one masked add per vector, where AVX2 spends a
 * shuffle, a compare and two logic operations. */
static inline void add_bit4_pair(__m256i *lo, __m256i *hi, uint32_t ha, uint32_t hb) {
    const __m256i b16 = _mm256_set1_epi8(0x10);
    *lo = _mm256_mask_add_epi8(*lo, (__mmask32)((ha & 0xffffu) | hb << 16), *lo, b16);
    *hi = _mm256_mask_add_epi8(*hi, (__mmask32)(ha >> 16 | (hb & 0xffff0000u)), *hi, b16);
}

#include "gemm_legacy.h"

/* Q4_1 and Q5_1 (Q5_K_M files fall back to Q5_1 for rows not a multiple of 256) take the
 * 16-row tiles for every row count, decode included: with one row, their scales, mins (and
 * Q5_1's 5th bits) transposed from the block heads (rows16_min_head) still cost less than the
 * 8-row tiles' gathering of mins (docs/performance.md, "CPU kernel choices"). Unlike Q4_0, whose
 * 8-row tiles gather no mins. */
#include "gemm_half_512.h"

/* Attention on the AVX2 loops with wider tiles: 4 heads x 4 positions of score chains (the
 * 32 registers hold them) and 512-bit value tiles of 4 heads, each V row widened once for
 * them; the same bits as the AVX2 table (attention.h). */
#define ATTN_SCORE_HEADS 4
#define ATTN_TRANSPOSED 1
#define ATTN_VALUE_HEADS 4
#include "attention.h"

static void avx512_attn_scores(const float *q, size_t nh, size_t hd, const float *const *rows, size_t n,
                               float *scores, size_t ld) {
    attn_scores_rows(q, nh, hd, &(cpu_attn_rows){.f32 = rows}, n, scores, ld, 0);
}

static void avx512_attn_values(float *out, size_t nh, size_t hd, const float *w, size_t ld, const float *const *rows,
                               size_t n) {
    attn_values_rows(out, nh, hd, w, ld, &(cpu_attn_rows){.f32 = rows}, n, 0);
}

static void avx512_attn_scores_f16(const float *q, size_t nh, size_t hd, const uint16_t *rows, size_t row_stride,
                                   size_t n, float *scores, size_t ld) {
    attn_scores_rows(q, nh, hd, &(cpu_attn_rows){.f16 = rows, .stride = row_stride}, n, scores, ld, 1);
}

static void avx512_attn_values_f16(float *out, size_t nh, size_t hd, const float *w, size_t ld, const uint16_t *rows,
                                   size_t row_stride, size_t n) {
    attn_values_rows(out, nh, hd, w, ld, &(cpu_attn_rows){.f16 = rows, .stride = row_stride}, n, 1);
}

/* The AVX-512 table, and the same with AMX tiles for Q4_0, Q5_0 and Q8_0 prompts */
#define AVX512_TABLE(NAME, ISA, Q4_0, Q8_0, Q5_0, Q4_0_PACKED, Q8_0_PACKED, Q5_0_PACKED)                 \
    {                                                                                                    \
        .name = NAME,                                                                                    \
        .isa = ISA,                                                                                      \
        .matmul =                                                                                        \
            {                                                                                            \
                [LLMM_TYPE_F32] = llmm__avx2_gemm_f32,                                                   \
                [LLMM_TYPE_F16] = gemm_f16_rows_avx512,                                                  \
                [LLMM_TYPE_BF16] = gemm_bf16_rows_avx512,                                                \
                [LLMM_TYPE_Q4_0] = Q4_0,                                                                 \
                [LLMM_TYPE_Q8_0] = Q8_0,                                                                 \
                [LLMM_TYPE_Q5_0] = Q5_0,                                                                 \
                [LLMM_TYPE_Q4_1] = gemm_q4_1_rows16,                                                     \
                [LLMM_TYPE_Q5_1] = gemm_q5_1_rows16,                                                     \
                [LLMM_TYPE_IQ4_NL] = gemm_iq4_nl_avx512,                                                 \
                [LLMM_TYPE_IQ4_XS] = gemm_iq4_xs_avx512,                                                 \
                [LLMM_TYPE_Q2_K] = gemm_q2_K_avx512,                                                     \
                [LLMM_TYPE_Q3_K] = gemm_q3_K_avx512,                                                     \
                [LLMM_TYPE_Q4_K] = gemm_q4_K_avx512,                                                     \
                [LLMM_TYPE_Q5_K] = gemm_q5_K_avx512,                                                     \
                [LLMM_TYPE_Q6_K] = gemm_q6_K_avx512,                                                     \
            },                                                                                           \
        .matmul_packed =                                                                                 \
            {                                                                                            \
                [LLMM_TYPE_Q4_0] = Q4_0_PACKED,                                                          \
                [LLMM_TYPE_Q5_0] = Q5_0_PACKED,                                                          \
                [LLMM_TYPE_Q8_0] = Q8_0_PACKED,                                                          \
                [LLMM_TYPE_IQ4_NL] = gemm_iq4_nl_packed16,                                               \
                [LLMM_TYPE_Q4_1] = gemm_q4_1_packed16,                                                   \
                [LLMM_TYPE_Q5_1] = gemm_q5_1_packed16,                                                   \
                [LLMM_TYPE_Q2_K] = gemm_q2_K_packed16,                                                   \
                [LLMM_TYPE_Q3_K] = gemm_q3_K_packed16,                                                   \
                [LLMM_TYPE_Q4_K] = gemm_q4_K_packed16,                                                   \
                [LLMM_TYPE_Q5_K] = gemm_q5_K_packed16,                                                   \
                [LLMM_TYPE_Q6_K] = gemm_q6_K_packed16,                                                   \
                [LLMM_TYPE_IQ4_XS] = gemm_iq4_xs_packed16,                                               \
            },                                                                                           \
        .pack_tiles = pack_tiles_rows16,                                                                 \
        AVX2_ROW_KERNELS,                                                                                \
        .attn_scores = avx512_attn_scores,                                                               \
        .attn_values = avx512_attn_values,                                                               \
        .attn_scores_f16 = avx512_attn_scores_f16,                                                       \
        .attn_values_f16 = avx512_attn_values_f16,                                                       \
        AVX512_DELTA_KERNELS,                                                                            \
    }

const cpu_kernels llmm__cpu_kernels_avx512 = AVX512_TABLE("avx512", CPU_ISA_AVX512, gemm_q4_0_avx512, gemm_q8_0_avx512,
                                                     gemm_q5_0_rows16, gemm_q4_0_packed16, gemm_q8_0_packed16,
                                                     gemm_q5_0_packed16);
const cpu_kernels llmm__cpu_kernels_amx = AVX512_TABLE("amx", CPU_ISA_AMX, gemm_q4_0_amx_stored, gemm_q8_0_amx_stored,
                                                  gemm_q5_0_amx_stored, gemm_q4_0_amx, gemm_q8_0_amx,
                                                  gemm_q5_0_amx);

#endif
