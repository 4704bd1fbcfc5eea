/* The non-linear 4-bit formats: IQ4_NL (32-weight blocks, one f16 scale) and IQ4_XS (256-weight
 * super-blocks, an f16 scale and a 6-bit scale per 32 weights). A nibble indexes a fixed
 * 16-value codebook instead of a uniform grid, so small weights, the common ones, get finer
 * steps than Q4_0 gives them at the same size.
 *
 * The quantizers are this project's own: per 32 weights, the scale that minimizes the squared
 * error when every weight takes its nearest codebook value, searched over the 15 scales that
 * map the weight of largest magnitude to within 7 units of the codebook's end (-127), each
 * refined by least squares for the codes it gives. */
#include <math.h>
#include <string.h>

#include "quant.h"

#define QK 32          /* weights per block (IQ4_NL) and per sub-block (IQ4_XS) */
#define SCALE_TRIES 7  /* trial scales on each side of the plain one */
#define XS_SUBS (QK_K / QK)

/* The reference's kvalues_iq4nl: a file's nibbles mean these values. */
const int8_t llmm__iq4_values[16] = LLMM_IQ4_VALUES;

/* Midpoints between neighbouring codebook values: index k of the nearest value to v is the
 * number of midpoints below v (exact in float: halves of integers). */
static const float k_midpoints[15] = {-115.5f, -93.5f, -74.f, -57.f, -42.f, -28.5f, -16.f, -4.5f,
                                      7.f,     19.f,   31.5f, 45.5f, 61.f,  79.f,   101.f};

/* A binary search over the midpoints; NaN compares false and gives index 0. */
static int nearest_code_search(float v) {
    int k = 0;
    if (v > k_midpoints[k + 7]) k += 8;
    if (v > k_midpoints[k + 3]) k += 4;
    if (v > k_midpoints[k + 1]) k += 2;
    if (v > k_midpoints[k]) k += 1;
    return k;
}

/* The nearest code by half-units: every midpoint is a multiple of 1/2, so one code is nearest
 * on each interval [h/2, (h+1)/2) (ties at a midpoint go up). Built per quantizer call (no
 * global state); the search it replaces, 4 unpredictable branches per weight and trial scale,
 * made a 0.5B model take 40 s to quantize. Values reach +-134 (a trial scale maps the largest
 * weight to at most 127 + SCALE_TRIES); beyond the table they clamp to its ends. */
#define HALF_UNITS 140
typedef struct code_table {
    uint8_t code[4 * HALF_UNITS + 1];
} code_table;

static void code_table_init(code_table *t) {
    for (int h = -2 * HALF_UNITS; h <= 2 * HALF_UNITS; h++)
        t->code[h + 2 * HALF_UNITS] = (uint8_t)nearest_code_search((float)h * 0.5f + 0.25f);
}

static int nearest_code(const code_table *t, float v) {
    float u = 2.0f * v + (float)(2 * HALF_UNITS);
    if (!(u >= 0.f)) u = 0.f; /* NaN too */
    if (u > (float)(4 * HALF_UNITS)) u = (float)(4 * HALF_UNITS);
    return t->code[(int)u]; /* truncation: the floor, u >= 0 (floorf is a libm call here) */
}

/* Codes for x / d; code 8 (value 1, the nearest to 0) where d is 0. */
static void codes_for_scale(const code_table *t, const float *x, float d, uint8_t code[QK]) {
    const float id = d != 0.f ? 1.0f / d : 0.f;
    for (int j = 0; j < QK; j++) code[j] = d != 0.f ? (uint8_t)nearest_code(t, x[j] * id) : 8;
}

/* The scale d of one 32-weight block (x ~ d * value[code]) and its codes, see the top. The
 * plain scale maps the weight of largest magnitude to -127, the codebook's longer end. */
static float fit_block(const code_table *t, const float *x, uint8_t code[QK]) {
    float amax;
    const float max = llmm_signed_absmax(x, QK, &amax);
    if (!(amax > 0) || !isfinite(amax)) {
        codes_for_scale(t, x, 0.f, code);
        return 0.f;
    }
    float best_num = 0, best_den = 1; /* best score num / den = (sum q x)^2 / sum q^2 */
    float best_d = 0;
    uint8_t trial[QK];
    for (int k = -SCALE_TRIES; k <= SCALE_TRIES; k++) {
        const float id = ((float)llmm__iq4_values[0] + (float)k) / max;
        float sqx = 0, sq2 = 0;
        for (int j = 0; j < QK; j++) {
            trial[j] = (uint8_t)nearest_code(t, x[j] * id);
            const float q = llmm__iq4_values[trial[j]];
            sqx += q * x[j];
            sq2 += q * q;
        }
        if (sq2 > 0 && sqx * sqx * best_den > best_num * sq2) {
            best_num = sqx * sqx;
            best_den = sq2;
            best_d = sqx / sq2;
            memcpy(code, trial, QK);
        }
    }
    return best_d;
}

void llmm__quantize_row_iq4_nl(const float *src, void *dst, size_t n) {
    block_iq4_nl *y = dst;
    uint8_t code[QK];
    code_table t;
    code_table_init(&t);
    for (size_t b = 0; b < n / QK; b++) {
        const float *x = src + b * QK;
        y[b].d = llmm__f32_to_f16(fit_block(&t, x, code));
        /* the codes again for the scale as stored (rounded to f16): each weight's nearest */
        codes_for_scale(&t, x, llmm__f16_to_f32(y[b].d), code);
        llmm_pack_nibbles32(code, y[b].qs);
    }
}

/* Each sub-block's own best scale, then one f16 d for the super-block with the sub-block
 * scales as 6-bit multiples of it: the largest in magnitude maps to -32, as the reference's
 * encoding does, and the codes are taken again for the scales as stored. */
void llmm__quantize_row_iq4_xs(const float *src, void *dst, size_t n) {
    block_iq4_xs *y = dst;
    uint8_t code[QK];
    code_table t;
    code_table_init(&t);
    for (size_t b = 0; b < n / QK_K; b++) {
        const float *x = src + b * QK_K;
        float scale[XS_SUBS], amax;
        for (int ib = 0; ib < XS_SUBS; ib++) scale[ib] = fit_block(&t, x + ib * QK, code);
        const float d = llmm_signed_absmax(scale, XS_SUBS, &amax) / -32.f;
        const float id = d != 0.f ? 1.0f / d : 0.f;
        y[b].d = llmm__f32_to_f16(d);
        const float d_stored = llmm__f16_to_f32(y[b].d);
        y[b].scales_h = 0;
        memset(y[b].scales_l, 0, sizeof y[b].scales_l);
        for (int ib = 0; ib < XS_SUBS; ib++) {
            const int ls = llmm_round_clamp(scale[ib] * id, -32, 31) + 32;
            y[b].scales_l[ib / 2] |= (uint8_t)((ls & 15) << 4 * (ib % 2));
            y[b].scales_h |= (uint16_t)((ls >> 4) << 2 * ib);
            codes_for_scale(&t, x + ib * QK, d_stored * (float)(ls - 32), code);
            llmm_pack_nibbles32(code, y[b].qs + ib * (QK / 2));
        }
    }
}

/* value[code] of the 32 weights whose nibbles are qs[0..15] */
static void decode_values(const uint8_t qs[QK / 2], int8_t v[QK]) {
    for (int j = 0; j < QK / 2; j++) {
        v[j] = llmm__iq4_values[qs[j] & 15];
        v[j + QK / 2] = llmm__iq4_values[qs[j] >> 4];
    }
}

void llmm__dequant_row_iq4_nl(const void *src, float *dst, size_t n) {
    const block_iq4_nl *x = src;
    int8_t v[QK];
    for (size_t b = 0; b < n / QK; b++) {
        const float d = llmm__f16_to_f32(x[b].d);
        decode_values(x[b].qs, v);
        for (int j = 0; j < QK; j++) dst[b * QK + j] = d * (float)v[j];
    }
}

void llmm__dequant_row_iq4_xs(const void *src, float *dst, size_t n) {
    const block_iq4_xs *x = src;
    int8_t v[QK];
    for (size_t b = 0; b < n / QK_K; b++) {
        const float d = llmm__f16_to_f32(x[b].d);
        for (int ib = 0; ib < XS_SUBS; ib++) {
            const float dl = d * (float)(llmm_iq4_xs_scale((const uint8_t *)&x[b], ib) - 32);
            decode_values(x[b].qs + ib * (QK / 2), v);
            for (int j = 0; j < QK; j++) dst[b * QK_K + ib * QK + j] = dl * (float)v[j];
        }
    }
}

static int32_t block_int_dot(const uint8_t qs[QK / 2], const int8_t *x) {
    int8_t v[QK];
    decode_values(qs, v);
    int32_t s = 0;
    for (int j = 0; j < QK; j++) s += (int32_t)v[j] * x[j];
    return s;
}

/* As Q4_0's dot: the integer sum of value[code] * q_x per block, scaled by both scales. */
float llmm__vec_dot_iq4_nl_q8_0(const void *w, const void *x, size_t n) {
    const block_iq4_nl *a = w;
    const block_q8_0 *y = x;
    float sum = 0;
    for (size_t b = 0; b < n / QK; b++)
        sum += (float)block_int_dot(a[b].qs, y[b].qs) * (llmm__f16_to_f32(a[b].d) * llmm__f16_to_f32(y[b].d));
    return sum;
}

/* Per super-block one integer sum, each sub-block's times its scale - 32 (at most 8 * 32 *
 * 32 * 127 * 127: no overflow), then one float product, as the reference's dot. */
float llmm__vec_dot_iq4_xs_q8_K(const void *w, const void *x, size_t n) {
    const block_iq4_xs *a = w;
    const block_q8_K *y = x;
    float sum = 0;
    for (size_t b = 0; b < n / QK_K; b++) {
        int32_t isum = 0;
        for (int ib = 0; ib < XS_SUBS; ib++) {
            const int32_t factor = llmm_iq4_xs_scale((const uint8_t *)&a[b], ib) - 32;
            isum += factor * block_int_dot(a[b].qs + ib * (QK / 2), y[b].qs + ib * QK);
        }
        sum += (float)isum * (llmm__f16_to_f32(a[b].d) * y[b].d);
    }
    return sum;
}
