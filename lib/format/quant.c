#include "quant.h"

#include <math.h>
#include <string.h>

static inline uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

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

/* Every ggml type id, sizes from the published block structs (so a file of any type is
 * size-checked even before its math exists here), from the rows of blocks.h. */
#define TRAIT_ROW(T, id, name, block, bytes, operand, family, dequant, quantize, dot) \
    [LLMM_TYPE_##T] = {name, block, bytes, LLMM_TYPE_##operand, LLMM_FAMILY_##family, dequant, quantize, dot},
static const llmm_type_traits type_table[LLMM_TYPE_COUNT] = {LLMM_WEIGHT_TYPES(TRAIT_ROW)};
#undef TRAIT_ROW

const llmm_type_traits *llmm__type_get(uint32_t type) {
    if (type >= LLMM_TYPE_COUNT || type_table[type].block_size == 0) return NULL;
    return &type_table[type];
}

size_t llmm__row_bytes(uint32_t type, uint64_t n) {
    const llmm_type_traits *t = llmm__type_get(type);
    if (!t || n % t->block_size != 0) return 0;
    return (size_t)(n / t->block_size) * t->block_bytes;
}
