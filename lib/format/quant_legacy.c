/* The 32-weight formats beyond Q4_0/Q8_0: Q4_1 and Q5_1 (offset: w = d * q + m), Q5_0
 * (symmetric, 5 bits), and Q8_1, the activation format their dots take. Every kernel unpacks
 * a block into plain small integers first, so the bit layout is written once per format. */
#include <float.h>
#include <math.h>
#include <string.h>

#include "quant.h"

#define QK 32 /* every format here has 32-weight blocks */

/* ---------------------------------------------------------------- bit layout */

/* Low 4 bits: weight j < 16 in the low nibble of qs[j], weight j + 16 in its high nibble. */
static void unpack_nibbles(const uint8_t qs[QK / 2], int8_t q[QK]) {
    for (int j = 0; j < QK / 2; j++) {
        q[j] = (int8_t)(qs[j] & 0x0f);
        q[j + QK / 2] = (int8_t)(qs[j] >> 4);
    }
}

/* The 5th bit of weight j is bit j of qh read as a little-endian u32. */
static uint32_t load_qh(const uint8_t qh[4]) {
    return (uint32_t)qh[0] | (uint32_t)qh[1] << 8 | (uint32_t)qh[2] << 16 | (uint32_t)qh[3] << 24;
}

static void unpack_5bit(const uint8_t qs[QK / 2], const uint8_t qh[4], int8_t q[QK]) {
    unpack_nibbles(qs, q);
    const uint32_t h = load_qh(qh);
    for (int j = 0; j < QK; j++) q[j] = (int8_t)(q[j] | ((h >> j) & 1u) << 4);
}

/* q[j] in 0..31 into nibbles and the qh bit field. */
static void pack_5bit(const uint8_t q[QK], uint8_t qs[QK / 2], uint8_t qh[4]) {
    uint32_t h = 0;
    for (int j = 0; j < QK / 2; j++) qs[j] = (uint8_t)((q[j] & 0x0f) | (q[j + QK / 2] & 0x0f) << 4);
    for (int j = 0; j < QK; j++) h |= (uint32_t)(q[j] >> 4 & 1) << j;
    for (int k = 0; k < 4; k++) qh[k] = (uint8_t)(h >> (8 * k));
}

/* ---------------------------------------------------------------- quantizers */

static void block_min_max(const float *x, float *min, float *max) {
    *min = FLT_MAX;
    *max = -FLT_MAX;
    for (int j = 0; j < QK; j++) {
        *min = fminf(*min, x[j]);
        *max = fmaxf(*max, x[j]);
    }
}

/* The offset formats: d spans [min, max] in levels steps, q = trunc((x - min) / d + 0.5) as
 * the reference rounds (half away from zero on the non-negative values). */
static float quantize_offset_block(const float *x, int levels, uint8_t q[QK], llmm_f16 *d16, llmm_f16 *m16) {
    float min, max;
    block_min_max(x, &min, &max);
    const float d = (max - min) / (float)levels;
    const float id = d != 0.f ? 1.0f / d : 0.f;
    *d16 = llmm__f32_to_f16(d);
    *m16 = llmm__f32_to_f16(min);
    for (int j = 0; j < QK; j++) q[j] = (uint8_t)llmm_trunc_clamp((x[j] - min) * id + 0.5f, 0, levels);
    return d;
}

void llmm__quantize_row_q4_1(const float *src, void *dst, size_t n) {
    block_q4_1 *y = dst;
    uint8_t q[QK];
    for (size_t b = 0; b < n / QK; b++) {
        quantize_offset_block(src + b * QK, 15, q, &y[b].d, &y[b].m);
        llmm_pack_nibbles32(q, y[b].qs);
    }
}

void llmm__quantize_row_q5_1(const float *src, void *dst, size_t n) {
    block_q5_1 *y = dst;
    uint8_t q[QK];
    for (size_t b = 0; b < n / QK; b++) {
        quantize_offset_block(src + b * QK, 31, q, &y[b].d, &y[b].m);
        pack_5bit(q, y[b].qs, y[b].qh);
    }
}

/* As Q4_0 with 5 bits: the signed value of largest magnitude maps to -16, so the range is
 * used asymmetrically exactly as the reference's files are. */
void llmm__quantize_row_q5_0(const float *src, void *dst, size_t n) {
    block_q5_0 *y = dst;
    uint8_t q[QK];
    for (size_t b = 0; b < n / QK; b++) {
        const float *x = src + b * QK;
        float amax;
        const float d = llmm_signed_absmax(x, QK, &amax) / -16.f;
        const float id = d != 0.f ? 1.0f / d : 0.f;
        y[b].d = llmm__f32_to_f16(d);
        for (int j = 0; j < QK; j++) q[j] = (uint8_t)llmm_trunc_clamp(x[j] * id + 16.5f, 0, 31);
        pack_5bit(q, y[b].qs, y[b].qh);
    }
}

/* Activations: as Q8_0 (nearest-even, as the reference's SIMD quantizer rounds), plus
 * s = d * sum(q) from the unrounded d, as the reference computes it. */
void llmm__quantize_row_q8_1(const float *src, void *dst, size_t n) {
    block_q8_1 *y = dst;
    for (size_t b = 0; b < n / QK; b++) {
        const float *x = src + b * QK;
        float amax = 0;
        for (int j = 0; j < QK; j++) amax = fmaxf(amax, fabsf(x[j]));
        const float d = amax / 127.f;
        const float id = amax != 0.f ? 127.f / amax : 0.f;
        int sum = 0;
        for (int j = 0; j < QK; j++) {
            y[b].qs[j] = (int8_t)llmm_round_clamp(x[j] * id, -127, 127);
            sum += y[b].qs[j];
        }
        y[b].d = llmm__f32_to_f16(d);
        y[b].s = llmm__f32_to_f16((float)sum * d);
    }
}

/* ---------------------------------------------------------------- dequantization */

void llmm__dequant_row_q4_1(const void *src, float *dst, size_t n) {
    const block_q4_1 *x = src;
    int8_t q[QK];
    for (size_t b = 0; b < n / QK; b++) {
        const float d = llmm__f16_to_f32(x[b].d), m = llmm__f16_to_f32(x[b].m);
        unpack_nibbles(x[b].qs, q);
        for (int j = 0; j < QK; j++) dst[b * QK + j] = d * (float)q[j] + m;
    }
}

void llmm__dequant_row_q5_0(const void *src, float *dst, size_t n) {
    const block_q5_0 *x = src;
    int8_t q[QK];
    for (size_t b = 0; b < n / QK; b++) {
        const float d = llmm__f16_to_f32(x[b].d);
        unpack_5bit(x[b].qs, x[b].qh, q);
        for (int j = 0; j < QK; j++) dst[b * QK + j] = d * (float)(q[j] - 16);
    }
}

void llmm__dequant_row_q5_1(const void *src, float *dst, size_t n) {
    const block_q5_1 *x = src;
    int8_t q[QK];
    for (size_t b = 0; b < n / QK; b++) {
        const float d = llmm__f16_to_f32(x[b].d), m = llmm__f16_to_f32(x[b].m);
        unpack_5bit(x[b].qs, x[b].qh, q);
        for (int j = 0; j < QK; j++) dst[b * QK + j] = d * (float)q[j] + m;
    }
}

/* ---------------------------------------------------------------- dots */

static int32_t int_dot(const int8_t *a, const int8_t *b, int n) {
    int32_t s = 0;
    for (int j = 0; j < n; j++) s += (int32_t)a[j] * b[j];
    return s;
}

/* sum_j (d q_j + m) (dy qy_j) = d dy sum q qy + m s: the reference's formula, with s the
 * activation block's stored d * sum(qy). */
static float offset_block_dot(float d, float m, const int8_t q[QK], const block_q8_1 *y) {
    const float dy = llmm__f16_to_f32(y->d);
    return (float)int_dot(q, y->qs, QK) * (d * dy) + m * llmm__f16_to_f32(y->s);
}

float llmm__vec_dot_q4_1_q8_1(const void *w, const void *x, size_t n) {
    const block_q4_1 *a = w;
    const block_q8_1 *y = x;
    int8_t q[QK];
    float sum = 0;
    for (size_t b = 0; b < n / QK; b++) {
        unpack_nibbles(a[b].qs, q);
        sum += offset_block_dot(llmm__f16_to_f32(a[b].d), llmm__f16_to_f32(a[b].m), q, &y[b]);
    }
    return sum;
}

float llmm__vec_dot_q5_1_q8_1(const void *w, const void *x, size_t n) {
    const block_q5_1 *a = w;
    const block_q8_1 *y = x;
    int8_t q[QK];
    float sum = 0;
    for (size_t b = 0; b < n / QK; b++) {
        unpack_5bit(a[b].qs, a[b].qh, q);
        sum += offset_block_dot(llmm__f16_to_f32(a[b].d), llmm__f16_to_f32(a[b].m), q, &y[b]);
    }
    return sum;
}

float llmm__vec_dot_q5_0_q8_0(const void *w, const void *x, size_t n) {
    const block_q5_0 *a = w;
    const block_q8_0 *y = x;
    int8_t q[QK];
    float sum = 0;
    for (size_t b = 0; b < n / QK; b++) {
        unpack_5bit(a[b].qs, a[b].qh, q);
        for (int j = 0; j < QK; j++) q[j] = (int8_t)(q[j] - 16);
        sum += (float)int_dot(q, y[b].qs, QK) * (llmm__f16_to_f32(a[b].d) * llmm__f16_to_f32(y[b].d));
    }
    return sum;
}
