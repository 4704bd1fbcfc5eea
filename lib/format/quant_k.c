/* K-quants (Q2_K..Q6_K) and Q8_K, the activation format their dots take.
 *
 * Every kernel decodes a 256-weight super-block into plain integers first (kq_ints: weight
 * i = d * scale[s] * q[i] - dmin * min[s] for its sub-block s), so each bit layout is written
 * once and dequantization and the dot share it. The quantizers follow the reference engine's
 * quantize_row_*_ref: fit each sub-block (a least-squares search over trial scales), quantize
 * the sub-block scales against one f16 super-scale, then requantize the weights with the
 * scales actually stored, so the levels match what a reader will decode. */
#include <math.h>
#include <string.h>

#include "quant.h"

#define GROUP_MAX_EPS 1e-15f /* below this a sub-block counts as all zero (the reference's bound) */
#define MAX_SUB (QK_K / 16)  /* sub-blocks per super-block, at most */

typedef struct kq_ints {
    int8_t q[QK_K];
    int16_t scale[MAX_SUB];
    int16_t min[MAX_SUB]; /* zero for the symmetric types (Q3_K, Q6_K) */
    int sub_len;          /* weights per sub-block: 16 or 32 */
    float d, dmin;
} kq_ints;

/* ================================================================ bit layout (see quant.h) */

/* 2-bit field of weight i (Q2_K, and the low bits of Q3_K). */
static int field_2bit(const uint8_t *qs, int i) { return (qs[32 * (i / 128) + i % 32] >> (2 * (i % 128 / 32))) & 3; }

/* Nibble of weight i (Q4_K, and the low bits of Q5_K). */
static int field_nibble(const uint8_t *qs, int i) { return (qs[32 * (i / 64) + i % 32] >> (i % 64 < 32 ? 0 : 4)) & 15; }

/* Extra high bit of weight i (Q3_K hmask, Q5_K qh). */
static int field_high_bit(const uint8_t *h, int i) { return (h[i % 32] >> (i / 32)) & 1; }

static int q6_level(const block_q6_K *b, int i) {
    const int half = i / 128, r = i % 128;
    const int lo = (b->ql[64 * half + r % 64] >> (r < 64 ? 0 : 4)) & 15;
    const int hi = (b->qh[32 * half + r % 32] >> (2 * (r / 32))) & 3;
    return lo | hi << 4;
}

/* 6-bit scale of Q3_K sub-block j, offset removed. */
static int q3_scale(const uint8_t sc[12], int j) {
    const int lo = j < 8 ? sc[j] & 15 : sc[j - 8] >> 4;
    const int hi = (sc[8 + j % 4] >> (2 * (j / 4))) & 3;
    return (lo | hi << 4) - 32;
}

static void q3_scale_put(uint8_t sc[12], int j, int level) {
    sc[j % 8] |= (uint8_t)((level & 15) << (j < 8 ? 0 : 4));
    sc[8 + j % 4] |= (uint8_t)((level >> 4) << (2 * (j / 4)));
}

/* 6-bit scale and min of Q4_K/Q5_K sub-block j. */
static void k4_scale_min(const uint8_t sc[K_SCALE_SIZE], int j, int *scale, int *min) {
    if (j < 4) {
        *scale = sc[j] & 63;
        *min = sc[j + 4] & 63;
    } else {
        *scale = (sc[j + 4] & 15) | (sc[j - 4] >> 6) << 4;
        *min = (sc[j + 4] >> 4) | (sc[j] >> 6) << 4;
    }
}

static void k4_scale_min_put(uint8_t sc[K_SCALE_SIZE], int j, int scale, int min) {
    if (j < 4) {
        sc[j] |= (uint8_t)scale;
        sc[j + 4] |= (uint8_t)min;
    } else {
        sc[j + 4] |= (uint8_t)((scale & 15) | (min & 15) << 4);
        sc[j - 4] |= (uint8_t)((scale >> 4) << 6);
        sc[j] |= (uint8_t)((min >> 4) << 6);
    }
}

static void pack_2bit(const uint8_t L[QK_K], uint8_t qs[QK_K / 4]) {
    for (int c = 0; c < QK_K; c += 128)
        for (int l = 0; l < 32; l++)
            qs[c / 4 + l] = (uint8_t)(L[c + l] | L[c + l + 32] << 2 | L[c + l + 64] << 4 | L[c + l + 96] << 6);
}

static void pack_nibbles(const uint8_t L[QK_K], uint8_t qs[QK_K / 2]) {
    for (int c = 0; c < QK_K; c += 64)
        for (int l = 0; l < 32; l++) qs[c / 2 + l] = (uint8_t)((L[c + l] & 15) | (L[c + l + 32] & 15) << 4);
}

/* Moves bit `bit` of every level into h (the layout of Q3_K hmask / Q5_K qh) and clears it. */
static void split_high_bit(uint8_t L[QK_K], int bit, uint8_t h[QK_K / 8]) {
    memset(h, 0, QK_K / 8);
    for (int i = 0; i < QK_K; i++)
        if (L[i] >> bit & 1) {
            h[i % 32] |= (uint8_t)(1u << (i / 32));
            L[i] = (uint8_t)(L[i] & ~(1u << bit));
        }
}

static void pack_q6(const uint8_t L[QK_K], block_q6_K *y) {
    for (int half = 0; half < 2; half++) {
        const uint8_t *l = L + 128 * half;
        uint8_t *ql = y->ql + 64 * half, *qh = y->qh + 32 * half;
        for (int r = 0; r < 32; r++) {
            ql[r] = (uint8_t)((l[r] & 15) | (l[r + 64] & 15) << 4);
            ql[r + 32] = (uint8_t)((l[r + 32] & 15) | (l[r + 96] & 15) << 4);
            qh[r] = (uint8_t)(l[r] >> 4 | (l[r + 32] >> 4) << 2 | (l[r + 64] >> 4) << 4 | (l[r + 96] >> 4) << 6);
        }
    }
}

/* ================================================================ decoding */

static void decode_q2_K(const void *block, kq_ints *u) {
    const block_q2_K *b = block;
    u->sub_len = 16;
    u->d = llmm__f16_to_f32(b->d);
    u->dmin = llmm__f16_to_f32(b->dmin);
    for (int j = 0; j < 16; j++) {
        u->scale[j] = b->scales[j] & 15;
        u->min[j] = b->scales[j] >> 4;
    }
    for (int i = 0; i < QK_K; i++) u->q[i] = (int8_t)field_2bit(b->qs, i);
}

static void decode_q3_K(const void *block, kq_ints *u) {
    const block_q3_K *b = block;
    u->sub_len = 16;
    u->d = llmm__f16_to_f32(b->d);
    u->dmin = 0;
    for (int j = 0; j < 16; j++) {
        u->scale[j] = (int16_t)q3_scale(b->scales, j);
        u->min[j] = 0;
    }
    for (int i = 0; i < QK_K; i++) u->q[i] = (int8_t)(field_2bit(b->qs, i) + 4 * field_high_bit(b->hmask, i) - 4);
}

static void decode_k4_scales(const uint8_t sc[K_SCALE_SIZE], kq_ints *u) {
    u->sub_len = 32;
    for (int j = 0; j < 8; j++) {
        int scale, min;
        k4_scale_min(sc, j, &scale, &min);
        u->scale[j] = (int16_t)scale;
        u->min[j] = (int16_t)min;
    }
}

static void decode_q4_K(const void *block, kq_ints *u) {
    const block_q4_K *b = block;
    u->d = llmm__f16_to_f32(b->d);
    u->dmin = llmm__f16_to_f32(b->dmin);
    decode_k4_scales(b->scales, u);
    for (int i = 0; i < QK_K; i++) u->q[i] = (int8_t)field_nibble(b->qs, i);
}

static void decode_q5_K(const void *block, kq_ints *u) {
    const block_q5_K *b = block;
    u->d = llmm__f16_to_f32(b->d);
    u->dmin = llmm__f16_to_f32(b->dmin);
    decode_k4_scales(b->scales, u);
    for (int i = 0; i < QK_K; i++) u->q[i] = (int8_t)(field_nibble(b->qs, i) + 16 * field_high_bit(b->qh, i));
}

static void decode_q6_K(const void *block, kq_ints *u) {
    const block_q6_K *b = block;
    u->sub_len = 16;
    u->d = llmm__f16_to_f32(b->d);
    u->dmin = 0;
    for (int j = 0; j < 16; j++) {
        u->scale[j] = b->scales[j];
        u->min[j] = 0;
    }
    for (int i = 0; i < QK_K; i++) u->q[i] = (int8_t)(q6_level(b, i) - 32);
}

/* ================================================================ rows: dequant and dot */

typedef void (*kq_decode_fn)(const void *block, kq_ints *u);

/* d * scale * q is exact in float for every K-quant (at most 24 significant bits), as is
 * dmin * min, so each weight is rounded once, by the subtraction. */
static void kq_dequant_row(kq_decode_fn decode, size_t block_bytes, const void *src, float *dst, size_t n) {
    kq_ints u;
    for (size_t b = 0; b < n / QK_K; b++) {
        decode((const uint8_t *)src + b * block_bytes, &u);
        float *y = dst + b * QK_K;
        for (int i = 0; i < QK_K; i++) {
            const int s = i / u.sub_len;
            y[i] = u.d * (float)u.scale[s] * (float)u.q[i] - u.dmin * (float)u.min[s];
        }
    }
}

static int32_t int_dot(const int8_t *a, const int8_t *b, int n) {
    int32_t s = 0;
    for (int j = 0; j < n; j++) s += (int32_t)a[j] * b[j];
    return s;
}

/* sum_i (d sc q_i - dmin m) dy y_i = dy (d sum_s sc_s (q . y)_s - dmin sum_s m_s bsum_s):
 * integer sums (|sum| < 2^28), then three float products per super-block. */
static float kq_block_dot(const kq_ints *u, const block_q8_K *y) {
    const int n_sub = QK_K / u->sub_len, bsums_per_sub = u->sub_len / 16;
    int32_t sum_q = 0, sum_m = 0;
    for (int s = 0; s < n_sub; s++) {
        sum_q += u->scale[s] * int_dot(u->q + s * u->sub_len, y->qs + s * u->sub_len, u->sub_len);
        int32_t bsum = 0;
        for (int k = 0; k < bsums_per_sub; k++) bsum += y->bsums[s * bsums_per_sub + k];
        sum_m += u->min[s] * bsum;
    }
    return y->d * (u->d * (float)sum_q - u->dmin * (float)sum_m);
}

static float kq_dot_row(kq_decode_fn decode, size_t block_bytes, const void *w, const void *x, size_t n) {
    const block_q8_K *y = x;
    kq_ints u;
    float sum = 0;
    for (size_t b = 0; b < n / QK_K; b++) {
        decode((const uint8_t *)w + b * block_bytes, &u);
        sum += kq_block_dot(&u, &y[b]);
    }
    return sum;
}

void llmm__dequant_row_q2_K(const void *src, float *dst, size_t n) {
    kq_dequant_row(decode_q2_K, sizeof(block_q2_K), src, dst, n);
}
void llmm__dequant_row_q3_K(const void *src, float *dst, size_t n) {
    kq_dequant_row(decode_q3_K, sizeof(block_q3_K), src, dst, n);
}
void llmm__dequant_row_q4_K(const void *src, float *dst, size_t n) {
    kq_dequant_row(decode_q4_K, sizeof(block_q4_K), src, dst, n);
}
void llmm__dequant_row_q5_K(const void *src, float *dst, size_t n) {
    kq_dequant_row(decode_q5_K, sizeof(block_q5_K), src, dst, n);
}
void llmm__dequant_row_q6_K(const void *src, float *dst, size_t n) {
    kq_dequant_row(decode_q6_K, sizeof(block_q6_K), src, dst, n);
}

float llmm__vec_dot_q2_K_q8_K(const void *w, const void *x, size_t n) {
    return kq_dot_row(decode_q2_K, sizeof(block_q2_K), w, x, n);
}
float llmm__vec_dot_q3_K_q8_K(const void *w, const void *x, size_t n) {
    return kq_dot_row(decode_q3_K, sizeof(block_q3_K), w, x, n);
}
float llmm__vec_dot_q4_K_q8_K(const void *w, const void *x, size_t n) {
    return kq_dot_row(decode_q4_K, sizeof(block_q4_K), w, x, n);
}
float llmm__vec_dot_q5_K_q8_K(const void *w, const void *x, size_t n) {
    return kq_dot_row(decode_q5_K, sizeof(block_q5_K), w, x, n);
}
float llmm__vec_dot_q6_K_q8_K(const void *w, const void *x, size_t n) {
    return kq_dot_row(decode_q6_K, sizeof(block_q6_K), w, x, n);
}

/* ================================================================ sub-block fits */

static float max_of(const float *v, int n) {
    float m = 0;
    for (int i = 0; i < n; i++) m = fmaxf(m, v[i]);
    return m;
}

/* --- offset sub-blocks (Q2_K, Q4_K, Q5_K): x ~ scale * L + min, L in 0..nmax, min <= 0 */

typedef struct offset_fit {
    float rmin, rdelta; /* trial i uses (nmax + rmin + rdelta * i) levels across the range */
    int n_trials;
    int use_mad;        /* weigh absolute errors (1) or squared errors (0) */
} offset_fit;

static void offset_levels(const float *x, int n, int nmax, float iscale, float min, uint8_t *L) {
    for (int i = 0; i < n; i++) L[i] = (uint8_t)llmm_round_clamp(iscale * (x[i] - min), 0, nmax);
}

static float offset_error(const float *x, const float *w, const uint8_t *L, int n, float scale, float min,
                          int use_mad) {
    float err = 0;
    for (int i = 0; i < n; i++) {
        const float diff = scale * L[i] + min - x[i];
        err += w[i] * (use_mad ? fabsf(diff) : diff * diff);
    }
    return err;
}

/* Weighted least squares for scale and min given the levels; min is held at 0 (and the scale
 * refit) when it comes out positive. 0 when the levels cannot determine both. */
static int offset_solve(const float *x, const float *w, const uint8_t *L, int n, float sum_w, float sum_x,
                        float *scale, float *min) {
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; i++) {
        const float l = L[i];
        sum_l += w[i] * l;
        sum_l2 += w[i] * l * l;
        sum_xl += w[i] * l * x[i];
    }
    const float det = sum_w * sum_l2 - sum_l * sum_l;
    if (!(det > 0)) return 0;
    *scale = (sum_w * sum_xl - sum_x * sum_l) / det;
    *min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
    if (*min > 0) {
        *min = 0;
        *scale = sum_xl / sum_l2;
    }
    return 1;
}

/* The reference's make_qkx2_quants: start from the min/max grid, then keep whichever trial
 * grid's least-squares (scale, min) has the lowest weighted error. Returns the scale and
 * stores -min (>= 0) in *neg_min. */
static float fit_offset(const float *x, const float *w, int n, int nmax, const offset_fit *fit, uint8_t *L,
                        float *neg_min) {
    uint8_t trial[32];
    float min = x[0], max = x[0], sum_w = 0, sum_x = 0;
    for (int i = 0; i < n; i++) {
        min = fminf(min, x[i]);
        max = fmaxf(max, x[i]);
        sum_w += w[i];
        sum_x += w[i] * x[i];
    }
    if (min > 0) min = 0;
    if (max == min) {
        memset(L, 0, (size_t)n);
        *neg_min = -min;
        return 0;
    }
    const float iscale = (float)nmax / (max - min);
    float scale = 1 / iscale;
    offset_levels(x, n, nmax, iscale, min, L);
    float best = offset_error(x, w, L, n, scale, min, fit->use_mad);
    for (int t = 0; t <= fit->n_trials; t++) {
        offset_levels(x, n, nmax, (fit->rmin + fit->rdelta * (float)t + (float)nmax) / (max - min), min, trial);
        float s, m;
        if (!offset_solve(x, w, trial, n, sum_w, sum_x, &s, &m)) continue;
        const float err = offset_error(x, w, trial, n, s, m, fit->use_mad);
        if (err < best) {
            memcpy(L, trial, (size_t)n);
            best = err;
            scale = s;
            min = m;
        }
    }
    *neg_min = -min;
    return scale;
}

/* --- symmetric sub-blocks (Q3_K, Q6_K): x ~ scale * l, l in -nmax..nmax-1, stored l + nmax */

/* The reference's make_q3_quants: levels from the largest value, then up to five passes of
 * moving single levels while that raises sumlx^2 / suml2 (weights x^2). */
static float fit_symmetric_refined(const float *x, int n, int nmax, uint8_t *L) {
    int8_t l[16];
    float amax;
    const float max = llmm_signed_absmax(x, n, &amax);
    if (amax < GROUP_MAX_EPS) {
        memset(L, 0, (size_t)n);
        return 0;
    }
    const float iscale = (float)-nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        l[i] = (int8_t)llmm_round_clamp(iscale * x[i], -nmax, nmax - 1);
        const float w = x[i] * x[i];
        sumlx += w * x[i] * l[i];
        suml2 += w * l[i] * l[i];
    }
    for (int pass = 0; pass < 5; pass++) {
        int moved = 0;
        for (int i = 0; i < n; i++) {
            const float w = x[i] * x[i];
            float slx = sumlx - w * x[i] * l[i];
            if (!(slx > 0)) continue;
            float sl2 = suml2 - w * l[i] * l[i];
            const int nl = llmm_round_clamp(x[i] * sl2 / slx, -nmax, nmax - 1);
            if (nl == l[i]) continue;
            slx += w * x[i] * nl;
            sl2 += w * nl * nl;
            if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
                l[i] = (int8_t)nl;
                sumlx = slx;
                suml2 = sl2;
                moved++;
            }
        }
        if (!moved) break;
    }
    for (int i = 0; i < n; i++) L[i] = (uint8_t)(l[i] + nmax);
    return suml2 > 0 ? sumlx / suml2 : 0;
}

/* Levels for one trial scale and their weighted sums (weights x^2). */
static void symmetric_levels(const float *x, int n, int nmax, float iscale, uint8_t *L, float *sumlx,
                             float *suml2) {
    *sumlx = *suml2 = 0;
    for (int i = 0; i < n; i++) {
        const int l = llmm_round_clamp(iscale * x[i], -nmax, nmax - 1);
        const float w = x[i] * x[i];
        *sumlx += w * x[i] * l;
        *suml2 += w * l * l;
        L[i] = (uint8_t)(l + nmax);
    }
}

/* The reference's make_qx_quants (weights x^2): of 19 trial scales around nmax / |max|, keep
 * the one whose least-squares scale fits best. */
static float fit_symmetric_search(const float *x, int n, int nmax, uint8_t *L) {
    uint8_t trial[16];
    float amax;
    const float max = llmm_signed_absmax(x, n, &amax);
    if (amax < GROUP_MAX_EPS) {
        memset(L, 0, (size_t)n);
        return 0;
    }
    float sumlx, suml2;
    symmetric_levels(x, n, nmax, (float)-nmax / max, L, &sumlx, &suml2);
    float scale = suml2 != 0 ? sumlx / suml2 : 0;
    float best = scale * sumlx;
    for (int t = -9; t <= 9; t++) {
        if (t == 0) continue;
        symmetric_levels(x, n, nmax, -((float)nmax + 0.1f * (float)t) / max, trial, &sumlx, &suml2);
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            memcpy(L, trial, (size_t)n);
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

/* ================================================================ requantization */

/* With the sub-block scales as stored (sub_d = d * sc, sub_m = dmin * m), each weight's level;
 * sub-blocks whose scale is zero keep the levels of their fit. */
static void requantize_offset(const float *x, int sub_len, int nmax, const float *sub_d, const float *sub_m,
                              uint8_t *L) {
    for (int s = 0; s < QK_K / sub_len; s++) {
        if (sub_d[s] == 0) continue;
        for (int i = s * sub_len; i < (s + 1) * sub_len; i++)
            L[i] = (uint8_t)llmm_round_clamp((x[i] + sub_m[s]) / sub_d[s], 0, nmax);
    }
}

static void requantize_symmetric(const float *x, int nmax, const float sub_d[16], uint8_t *L) {
    for (int s = 0; s < 16; s++) {
        if (sub_d[s] == 0) continue;
        for (int i = 16 * s; i < 16 * s + 16; i++)
            L[i] = (uint8_t)(llmm_round_clamp(x[i] / sub_d[s], -nmax, nmax - 1) + nmax);
    }
}

/* ================================================================ quantizers */

static void quantize_q2_K_block(const float *x, block_q2_K *y) {
    static const offset_fit fit = {-0.5f, 0.1f, 15, 1};
    uint8_t L[QK_K];
    float w[16], scales[16], mins[16], sub_d[16], sub_m[16];
    for (int j = 0; j < 16; j++) {
        for (int l = 0; l < 16; l++) w[l] = fabsf(x[16 * j + l]);
        scales[j] = fit_offset(x + 16 * j, w, 16, 3, &fit, L + 16 * j, &mins[j]);
    }
    const float max_scale = max_of(scales, 16), max_min = max_of(mins, 16);
    memset(y->scales, 0, sizeof y->scales);
    /* the 4-bit sub-block scales and mins span [0, largest] in 15 steps */
    for (int j = 0; j < 16 && max_scale > 0; j++)
        y->scales[j] = (uint8_t)llmm_round_clamp(15.f / max_scale * scales[j], 0, 15);
    for (int j = 0; j < 16 && max_min > 0; j++)
        y->scales[j] |= (uint8_t)(llmm_round_clamp(15.f / max_min * mins[j], 0, 15) << 4);
    y->d = llmm__f32_to_f16(max_scale > 0 ? max_scale / 15.f : 0.f);
    y->dmin = llmm__f32_to_f16(max_min > 0 ? max_min / 15.f : 0.f);
    for (int j = 0; j < 16; j++) {
        sub_d[j] = llmm__f16_to_f32(y->d) * (float)(y->scales[j] & 15);
        sub_m[j] = llmm__f16_to_f32(y->dmin) * (float)(y->scales[j] >> 4);
    }
    requantize_offset(x, 16, 3, sub_d, sub_m, L);
    pack_2bit(L, y->qs);
}

static void quantize_q3_K_block(const float *x, block_q3_K *y) {
    uint8_t L[QK_K];
    float scales[16], sub_d[16], amax = 0, max_scale = 0;
    for (int j = 0; j < 16; j++) {
        scales[j] = fit_symmetric_refined(x + 16 * j, 16, 4, L + 16 * j);
        if (fabsf(scales[j]) > amax) {
            amax = fabsf(scales[j]);
            max_scale = scales[j];
        }
    }
    memset(y->scales, 0, sizeof y->scales);
    y->d = 0;
    if (max_scale != 0) {
        /* signed 6-bit scales: the largest-magnitude one maps to -32 */
        const float iscale = -32.f / max_scale;
        for (int j = 0; j < 16; j++) q3_scale_put(y->scales, j, llmm_round_clamp(iscale * scales[j], -32, 31) + 32);
        y->d = llmm__f32_to_f16(1 / iscale);
    }
    for (int j = 0; j < 16; j++) sub_d[j] = llmm__f16_to_f32(y->d) * (float)q3_scale(y->scales, j);
    requantize_symmetric(x, 4, sub_d, L);
    split_high_bit(L, 2, y->hmask);
    pack_2bit(L, y->qs);
}

/* Q4_K and Q5_K share everything but the level count: 8 sub-blocks of 32, weights
 * (rms of the sub-block + |x|), 6-bit scales and mins against d and dmin. */
static void quantize_k32_offset(const float *x, int nmax, const offset_fit *fit, uint8_t sc[K_SCALE_SIZE],
                                llmm_f16 *d, llmm_f16 *dmin, uint8_t L[QK_K]) {
    float w[32], scales[8], mins[8], sub_d[8], sub_m[8];
    for (int j = 0; j < 8; j++) {
        const float *xs = x + 32 * j;
        float sum_x2 = 0;
        for (int l = 0; l < 32; l++) sum_x2 += xs[l] * xs[l];
        const float av_x = sqrtf(sum_x2 / 32);
        for (int l = 0; l < 32; l++) w[l] = av_x + fabsf(xs[l]);
        scales[j] = fit_offset(xs, w, 32, nmax, fit, L + 32 * j, &mins[j]);
    }
    const float max_scale = max_of(scales, 8), max_min = max_of(mins, 8);
    const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f, inv_min = max_min > 0 ? 63.f / max_min : 0.f;
    memset(sc, 0, K_SCALE_SIZE);
    for (int j = 0; j < 8; j++)
        k4_scale_min_put(sc, j, llmm_round_clamp(inv_scale * scales[j], 0, 63),
                         llmm_round_clamp(inv_min * mins[j], 0, 63));
    *d = llmm__f32_to_f16(max_scale / 63.f);
    *dmin = llmm__f32_to_f16(max_min / 63.f);
    for (int j = 0; j < 8; j++) {
        int s, m;
        k4_scale_min(sc, j, &s, &m);
        sub_d[j] = llmm__f16_to_f32(*d) * (float)s;
        sub_m[j] = llmm__f16_to_f32(*dmin) * (float)m;
    }
    requantize_offset(x, 32, nmax, sub_d, sub_m, L);
}

static void quantize_q4_K_block(const float *x, block_q4_K *y) {
    static const offset_fit fit = {-1.f, 0.1f, 20, 0};
    uint8_t L[QK_K];
    quantize_k32_offset(x, 15, &fit, y->scales, &y->d, &y->dmin, L);
    pack_nibbles(L, y->qs);
}

static void quantize_q5_K_block(const float *x, block_q5_K *y) {
    static const offset_fit fit = {-0.5f, 0.1f, 15, 0};
    uint8_t L[QK_K];
    quantize_k32_offset(x, 31, &fit, y->scales, &y->d, &y->dmin, L);
    split_high_bit(L, 4, y->qh);
    pack_nibbles(L, y->qs);
}

static void quantize_q6_K_block(const float *x, block_q6_K *y) {
    uint8_t L[QK_K];
    float scales[16], sub_d[16], amax = 0, max_scale = 0;
    for (int j = 0; j < 16; j++) {
        scales[j] = fit_symmetric_search(x + 16 * j, 16, 32, L + 16 * j);
        if (fabsf(scales[j]) > amax) {
            amax = fabsf(scales[j]);
            max_scale = scales[j];
        }
    }
    if (amax < GROUP_MAX_EPS) {
        memset(y, 0, sizeof *y);
        return;
    }
    /* int8 scales: the largest-magnitude one maps to -128 */
    const float iscale = -128.f / max_scale;
    y->d = llmm__f32_to_f16(1 / iscale);
    for (int j = 0; j < 16; j++) y->scales[j] = (int8_t)llmm_round_clamp(iscale * scales[j], -128, 127);
    for (int j = 0; j < 16; j++) sub_d[j] = llmm__f16_to_f32(y->d) * (float)y->scales[j];
    requantize_symmetric(x, 32, sub_d, L);
    pack_q6(L, y);
}

void llmm__quantize_row_q2_K(const float *src, void *dst, size_t n) {
    for (size_t b = 0; b < n / QK_K; b++) quantize_q2_K_block(src + b * QK_K, (block_q2_K *)dst + b);
}
void llmm__quantize_row_q3_K(const float *src, void *dst, size_t n) {
    for (size_t b = 0; b < n / QK_K; b++) quantize_q3_K_block(src + b * QK_K, (block_q3_K *)dst + b);
}
void llmm__quantize_row_q4_K(const float *src, void *dst, size_t n) {
    for (size_t b = 0; b < n / QK_K; b++) quantize_q4_K_block(src + b * QK_K, (block_q4_K *)dst + b);
}
void llmm__quantize_row_q5_K(const float *src, void *dst, size_t n) {
    for (size_t b = 0; b < n / QK_K; b++) quantize_q5_K_block(src + b * QK_K, (block_q5_K *)dst + b);
}
void llmm__quantize_row_q6_K(const float *src, void *dst, size_t n) {
    for (size_t b = 0; b < n / QK_K; b++) quantize_q6_K_block(src + b * QK_K, (block_q6_K *)dst + b);
}

/* Activations: one float scale per 256, the largest-magnitude value mapping to -127 (the
 * reference's convention: d = 1/iscale may be negative), nearest-even levels. */
void llmm__quantize_row_q8_K(const float *src, void *dst, size_t n) {
    block_q8_K *y = dst;
    for (size_t b = 0; b < n / QK_K; b++) {
        const float *x = src + b * QK_K;
        float amax;
        const float max = llmm_signed_absmax(x, QK_K, &amax);
        memset(&y[b], 0, sizeof y[b]);
        if (amax == 0) continue;
        const float iscale = -127.f / max;
        for (int i = 0; i < QK_K; i++) y[b].qs[i] = (int8_t)llmm_round_clamp(iscale * x[i], -128, 127);
        for (int i = 0; i < QK_K; i++) y[b].bsums[i / 16] = (int16_t)(y[b].bsums[i / 16] + y[b].qs[i]);
        y[b].d = 1 / iscale;
    }
}
