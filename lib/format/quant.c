#include "quant.h"

#include <math.h>
#include <string.h>

/* ---------------------------------------------------------------- scalar conversions */

static inline float f32_from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

float llmm__f16_to_f32(llmm_f16 h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    if (exp == 0x1f) return f32_from_bits(sign | 0x7f800000u | (man << 13));
    if (exp == 0) {
        /* subnormal: value = man * 2^-24 */
        float v = (float)man * 5.9604644775390625e-8f;
        return sign ? -v : v;
    }
    return f32_from_bits(sign | ((exp + 112) << 23) | (man << 13));
}

/* Round to nearest even, with overflow to infinity and gradual underflow, as the hardware
 * conversion (and so the reference engine) does. */
llmm_f16 llmm__f32_to_f16(float f) {
    uint32_t x = f32_bits(f);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t abs = x & 0x7fffffffu;
    if (abs >= 0x7f800000u) /* inf or nan */
        return (llmm_f16)(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0));
    if (abs >= 0x477ff000u) return (llmm_f16)(sign | 0x7c00u); /* rounds past 65504 */
    if (abs < 0x38800000u) {
        /* result is subnormal or zero: add 0.5 as float magic to get RNE in the low bits */
        float v = f32_from_bits(abs) + 0.5f;
        return (llmm_f16)(sign | (f32_bits(v) - 0x3f000000u));
    }
    uint32_t mant_odd = (abs >> 13) & 1u;
    abs += 0xc8000fffu + mant_odd; /* rebias exponent (-112 << 23) and round */
    return (llmm_f16)(sign | (abs >> 13));
}

float llmm__bf16_to_f32(llmm_bf16 h) { return f32_from_bits((uint32_t)h << 16); }

static llmm_bf16 bf16_from_f32(float f) { return (llmm_bf16)(llmm_bf16_round_bits(f32_bits(f)) >> 16); }

/* ---------------------------------------------------------------- F32 / F16 / BF16 */

static void dequant_f32(const void *src, float *dst, size_t n) { memcpy(dst, src, n * sizeof(float)); }

static void dequant_f16(const void *src, float *dst, size_t n) {
    const llmm_f16 *s = src;
    for (size_t i = 0; i < n; i++) dst[i] = llmm__f16_to_f32(s[i]);
}

static void dequant_bf16(const void *src, float *dst, size_t n) {
    const llmm_bf16 *s = src;
    for (size_t i = 0; i < n; i++) dst[i] = llmm__bf16_to_f32(s[i]);
}

static void from_float_f32(const float *src, void *dst, size_t n) { memcpy(dst, src, n * sizeof(float)); }

static void from_float_f16(const float *src, void *dst, size_t n) {
    llmm_f16 *d = dst;
    for (size_t i = 0; i < n; i++) d[i] = llmm__f32_to_f16(src[i]);
}

static void from_float_bf16(const float *src, void *dst, size_t n) {
    llmm_bf16 *d = dst;
    for (size_t i = 0; i < n; i++) d[i] = bf16_from_f32(src[i]);
}

/* Eight partial sums, as an 8-lane SIMD accumulator would keep, so the scalar reference and
 * the vector kernels round alike. */
float llmm__dot_f32(const void *w, const void *x, size_t n) {
    const float *a = w, *b = x;
    float acc[8] = {0};
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; l++) acc[l] += a[i + l] * b[i + l];
    float sum = 0;
    for (; i < n; i++) sum += a[i] * b[i];
    for (int l = 0; l < 8; l++) sum += acc[l];
    return sum;
}

/* F16 and BF16 dots: the products of two halves are exact in float (11 + 11 significant
 * bits for f16, 8 + 8 for bf16), summed in float in 16 lanes: lane l takes positions l,
 * l + 16, ... below n - n % 16 in order; the lanes are then added pairwise (l + 8 into l,
 * then + 4, + 2, + 1) and the tail positions after, in order. That is the order a 512-bit
 * vector (or two 256-bit, or four 128-bit ones) keeps, so every kernel table gives these bits,
 * and the float sum runs at twice the rate of the double sum this replaced (which made F16
 * prompts half as fast as the reference engine's float sums). Within (n / 16 + 20) u sum|w x|
 * of the exact dot. */
#define HALF_DOT_LANES 16

static float half_dot(const uint16_t *w, const uint16_t *x, size_t n, float (*widen)(uint16_t)) {
    float lane[HALF_DOT_LANES] = {0};
    const size_t n16 = n - n % HALF_DOT_LANES;
    for (size_t i = 0; i < n16; i += HALF_DOT_LANES)
        for (int l = 0; l < HALF_DOT_LANES; l++) lane[l] += widen(w[i + l]) * widen(x[i + l]);
    for (int half = HALF_DOT_LANES / 2; half >= 1; half /= 2)
        for (int l = 0; l < half; l++) lane[l] += lane[l + half];
    float sum = lane[0];
    for (size_t i = n16; i < n; i++) sum += widen(w[i]) * widen(x[i]);
    return sum;
}

static float widen_f16(uint16_t h) { return llmm__f16_to_f32(h); }
static float widen_bf16(uint16_t h) { return llmm__bf16_to_f32(h); }

float llmm__vec_dot_f16(const void *w, const void *x, size_t n) { return half_dot(w, x, n, widen_f16); }
float llmm__vec_dot_bf16(const void *w, const void *x, size_t n) { return half_dot(w, x, n, widen_bf16); }

/* ---------------------------------------------------------------- Q8_0 / Q4_0 */

void llmm__quantize_row_q8_0(const float *src, void *dst, size_t n) {
    block_q8_0 *y = dst;
    for (size_t b = 0; b < n / QK8_0; b++) {
        const float *x = src + b * QK8_0;
        float amax = 0;
        for (int j = 0; j < QK8_0; j++) amax = fmaxf(amax, fabsf(x[j]));
        const float d = amax / 127.f;
        const float id = amax != 0.f ? 127.f / amax : 0.f;
        y[b].d = llmm__f32_to_f16(d);
        /* nearest-even, as the reference's SIMD quantizer rounds */
        for (int j = 0; j < QK8_0; j++) y[b].qs[j] = (int8_t)llmm_round_clamp(x[j] * id, -127, 127);
    }
}

/* The reference quantizer's encoding: the signed value of largest magnitude maps to -8, so
 * the range is used asymmetrically exactly as files from the reference tools are. */
void llmm__quantize_row_q4_0(const float *src, void *dst, size_t n) {
    block_q4_0 *y = dst;
    for (size_t b = 0; b < n / QK4_0; b++) {
        const float *x = src + b * QK4_0;
        float amax;
        const float d = llmm_signed_absmax(x, QK4_0, &amax) / -8.f;
        const float id = d != 0.f ? 1.0f / d : 0.f;
        y[b].d = llmm__f32_to_f16(d);
        for (int j = 0; j < QK4_0 / 2; j++) {
            const int lo = llmm_trunc_clamp(x[j] * id + 8.5f, 0, 15);
            const int hi = llmm_trunc_clamp(x[j + QK4_0 / 2] * id + 8.5f, 0, 15);
            y[b].qs[j] = (uint8_t)(lo | hi << 4);
        }
    }
}

static void dequant_q8_0(const void *src, float *dst, size_t n) {
    const block_q8_0 *x = src;
    for (size_t b = 0; b < n / QK8_0; b++) {
        const float d = llmm__f16_to_f32(x[b].d);
        for (int j = 0; j < QK8_0; j++) dst[b * QK8_0 + j] = d * (float)x[b].qs[j];
    }
}

static void dequant_q4_0(const void *src, float *dst, size_t n) {
    const block_q4_0 *x = src;
    for (size_t b = 0; b < n / QK4_0; b++) {
        const float d = llmm__f16_to_f32(x[b].d);
        for (int j = 0; j < QK4_0 / 2; j++) {
            dst[b * QK4_0 + j] = d * (float)((x[b].qs[j] & 0x0f) - 8);
            dst[b * QK4_0 + j + QK4_0 / 2] = d * (float)((x[b].qs[j] >> 4) - 8);
        }
    }
}

/* Integer dot per block, scaled by both block scales: the reference engine's formula. */
float llmm__vec_dot_q8_0_q8_0(const void *w, const void *x, size_t n) {
    const block_q8_0 *a = w, *b = x;
    float sum = 0;
    for (size_t i = 0; i < n / QK8_0; i++) {
        int32_t s = 0;
        for (int j = 0; j < QK8_0; j++) s += (int32_t)a[i].qs[j] * b[i].qs[j];
        sum += (float)s * (llmm__f16_to_f32(a[i].d) * llmm__f16_to_f32(b[i].d));
    }
    return sum;
}

float llmm__vec_dot_q4_0_q8_0(const void *w, const void *x, size_t n) {
    const block_q4_0 *a = w;
    const block_q8_0 *b = x;
    float sum = 0;
    for (size_t i = 0; i < n / QK4_0; i++) {
        int32_t s = 0;
        for (int j = 0; j < QK4_0 / 2; j++) {
            s += ((a[i].qs[j] & 0x0f) - 8) * b[i].qs[j];
            s += ((a[i].qs[j] >> 4) - 8) * b[i].qs[j + QK4_0 / 2];
        }
        sum += (float)s * (llmm__f16_to_f32(a[i].d) * llmm__f16_to_f32(b[i].d));
    }
    return sum;
}

/* ---------------------------------------------------------------- the table */

/* Block sizes and bytes of every ggml type id (from the published block structs), so a file
 * of any type is size-checked even before its math exists here. */
static const llmm_type_traits type_table[LLMM_TYPE_COUNT] = {
    [LLMM_TYPE_F32] = {"f32", 1, 4, dequant_f32, from_float_f32},
    [LLMM_TYPE_F16] = {"f16", 1, 2, dequant_f16, from_float_f16},
    [LLMM_TYPE_Q4_0] = {"q4_0", 32, 18, dequant_q4_0, llmm__quantize_row_q4_0},
    [LLMM_TYPE_Q4_1] = {"q4_1", 32, 20, llmm__dequant_row_q4_1, llmm__quantize_row_q4_1},
    [LLMM_TYPE_Q5_0] = {"q5_0", 32, 22, llmm__dequant_row_q5_0, llmm__quantize_row_q5_0},
    [LLMM_TYPE_Q5_1] = {"q5_1", 32, 24, llmm__dequant_row_q5_1, llmm__quantize_row_q5_1},
    [LLMM_TYPE_Q8_0] = {"q8_0", 32, 34, dequant_q8_0, llmm__quantize_row_q8_0},
    [LLMM_TYPE_Q8_1] = {"q8_1", 32, 36, NULL, llmm__quantize_row_q8_1}, /* activations only */
    [LLMM_TYPE_Q2_K] = {"q2_k", 256, 84, llmm__dequant_row_q2_K, llmm__quantize_row_q2_K},
    [LLMM_TYPE_Q3_K] = {"q3_k", 256, 110, llmm__dequant_row_q3_K, llmm__quantize_row_q3_K},
    [LLMM_TYPE_Q4_K] = {"q4_k", 256, 144, llmm__dequant_row_q4_K, llmm__quantize_row_q4_K},
    [LLMM_TYPE_Q5_K] = {"q5_k", 256, 176, llmm__dequant_row_q5_K, llmm__quantize_row_q5_K},
    [LLMM_TYPE_Q6_K] = {"q6_k", 256, 210, llmm__dequant_row_q6_K, llmm__quantize_row_q6_K},
    [LLMM_TYPE_Q8_K] = {"q8_k", 256, 292, NULL, llmm__quantize_row_q8_K}, /* activations only */
    [LLMM_TYPE_IQ2_XXS] = {"iq2_xxs", 256, 66, NULL, NULL},
    [LLMM_TYPE_IQ2_XS] = {"iq2_xs", 256, 74, NULL, NULL},
    [LLMM_TYPE_IQ3_XXS] = {"iq3_xxs", 256, 98, NULL, NULL},
    [LLMM_TYPE_IQ1_S] = {"iq1_s", 256, 50, NULL, NULL},
    [LLMM_TYPE_IQ4_NL] = {"iq4_nl", 32, 18, llmm__dequant_row_iq4_nl, llmm__quantize_row_iq4_nl},
    [LLMM_TYPE_IQ3_S] = {"iq3_s", 256, 110, NULL, NULL},
    [LLMM_TYPE_IQ2_S] = {"iq2_s", 256, 82, NULL, NULL},
    [LLMM_TYPE_IQ4_XS] = {"iq4_xs", 256, 136, llmm__dequant_row_iq4_xs, llmm__quantize_row_iq4_xs},
    [LLMM_TYPE_I8] = {"i8", 1, 1, NULL, NULL},
    [LLMM_TYPE_I16] = {"i16", 1, 2, NULL, NULL},
    [LLMM_TYPE_I32] = {"i32", 1, 4, NULL, NULL},
    [LLMM_TYPE_I64] = {"i64", 1, 8, NULL, NULL},
    [LLMM_TYPE_F64] = {"f64", 1, 8, NULL, NULL},
    [LLMM_TYPE_IQ1_M] = {"iq1_m", 256, 56, NULL, NULL},
    [LLMM_TYPE_BF16] = {"bf16", 1, 2, dequant_bf16, from_float_bf16},
    [LLMM_TYPE_TQ1_0] = {"tq1_0", 256, 54, NULL, NULL},
    [LLMM_TYPE_TQ2_0] = {"tq2_0", 256, 66, NULL, NULL},
    [LLMM_TYPE_MXFP4] = {"mxfp4", 32, 17, NULL, NULL},
};

const llmm_type_traits *llmm__type_get(uint32_t type) {
    if (type >= LLMM_TYPE_COUNT || type_table[type].block_size == 0) return NULL;
    return &type_table[type];
}

size_t llmm__row_bytes(uint32_t type, uint64_t n) {
    const llmm_type_traits *t = llmm__type_get(type);
    if (!t || n % t->block_size != 0) return 0;
    return (size_t)(n / t->block_size) * t->block_bytes;
}
