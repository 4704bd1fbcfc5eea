/* Base NEON (Advanced SIMD) kernels, for every AArch64 CPU: called only after
 * llmm__cpu_kernels_get(CPU_ISA_NEON) checked the CPU. The dotprod table reuses all but the int8
 * dots (dotprod.c). Empty on other architectures. */
#include "kernel_table.h"

#if defined(__aarch64__)

#include <math.h>
#include <string.h>

#include "kernels/exp_poly.h"
#include "kernels/gelu_poly.h"
#include "table.h"
#include "simd.h"

/* ---------------------------------------------------------------- int8 dots */

/* Without SDOT: widening multiplies into int16 lanes, each holding two products, then a
 * pairwise widening add into int32. No int16 lane can overflow: |Q8_0 weight quant| <= 128,
 * |operand quant| <= 127 (the quantizer never makes -128), 2 * 128 * 127 = 32512 < 32767. */
static inline int32x4_t dot_block(int8x16_t w0, int8x16_t w1, int8x16_t x0, int8x16_t x1) {
    const int16x8_t p0 = vmlal_high_s8(vmull_s8(vget_low_s8(w0), vget_low_s8(x0)), w0, x0);
    const int16x8_t p1 = vmlal_high_s8(vmull_s8(vget_low_s8(w1), vget_low_s8(x1)), w1, x1);
    return vpadalq_s16(vpaddlq_s16(p0), p1);
}
/* 4 weight blocks (8 registers), the operand block, its products and 4 accumulators fit the
 * 32 registers with room to spare */
#define Q_TILE_X 4

#include "gemm_int8.h"
#include "gemm_iq4_xs.h"

/* As dot_block, 16 products into two per int16 lane: the K-quants' |q| <= 32 (and Q8_K's
 * |x| <= 128) keep each lane within 2 x 32 x 128 = 8192. */
static inline int32x4_t dot16_acc(int32x4_t acc, int8x16_t w, int8x16_t x) {
    return vpadalq_s16(acc, vmlal_high_s8(vmull_s8(vget_low_s8(w), vget_low_s8(x)), w, x));
}
/* a decoded super-block row is 16 registers, so the operand tile stays at 4 rows */
#define KQ_TILE_X 4

#include "gemm_kquant.h"
#include "gemm_legacy.h"

/* ---------------------------------------------------------------- operands */

/* One float rounded to f16 (nearest even, FCVTN under the default FPCR) and back. */
static inline float round_f16(float v) { return vgetq_lane_f32(vcvt_f32_f16(vcvt_f16_f32(vdupq_n_f32(v))), 0); }

/* llmm__quantize_row_q8_0 bit for bit: amax, d = amax / 127 stored as f16 (round to nearest
 * even), quants round(x * 127 / amax) to nearest even (FCVTNS, as nearbyintf under the default
 * rounding mode). |x * id| <= 127 up to a rounding, so the saturating narrows never clip a
 * value the scalar's clamp would not. */
void llmm__neon_quantize_q8(const float *x, int8_t *qs, float *d, int32_t *sum, size_t n) {
    for (size_t b = 0; b < n / QK8_0; b++) {
        const float *xb = x + b * QK8_0;
        float32x4_t v[8];
        for (int k = 0; k < 8; k++) v[k] = vld1q_f32(xb + 4 * k);
        float32x4_t m = vabsq_f32(v[0]);
        for (int k = 1; k < 8; k++) m = vmaxq_f32(m, vabsq_f32(v[k]));
        const float amax = vmaxvq_f32(m);
        const float id = amax != 0.f ? 127.f / amax : 0.f;
        d[b] = round_f16(amax / 127.f);
        int32x4_t s = vdupq_n_s32(0);
        int16x8_t h[4];
        for (int k = 0; k < 4; k++) {
            const int32x4_t q0 = vcvtnq_s32_f32(vmulq_n_f32(v[2 * k], id));
            const int32x4_t q1 = vcvtnq_s32_f32(vmulq_n_f32(v[2 * k + 1], id));
            s = vaddq_s32(s, vaddq_s32(q0, q1));
            h[k] = vcombine_s16(vqmovn_s32(q0), vqmovn_s32(q1));
        }
        vst1q_s8(qs + b * QK8_0, vcombine_s8(vqmovn_s16(h[0]), vqmovn_s16(h[1])));
        vst1q_s8(qs + b * QK8_0 + 16, vcombine_s8(vqmovn_s16(h[2]), vqmovn_s16(h[3])));
        sum[b] = vaddvq_s32(s);
    }
}

/* The first value of largest magnitude in a Q8_K super-block (amax > 0 its magnitude): the
 * scalar's running strict > keeps the first of equal magnitudes, so with both +a and -a in a
 * block the earlier one sets the scale's sign. */
static float first_of_magnitude(const float *xb, float amax) {
    for (int k = 0; k < QK_K / 4; k++)
        if (vmaxvq_u32(vceqq_f32(vabsq_f32(vld1q_f32(xb + 4 * k)), vdupq_n_f32(amax))))
            for (int i = 4 * k;; i++)
                if (fabsf(xb[i]) == amax) return xb[i];
    return 0.0f; /* not reached: amax is one of the magnitudes */
}

/* llmm__quantize_row_q8_K bit for bit: iscale = -127 / (the signed value of largest magnitude)
 * and d = 1 / iscale as the scalar divides, quants iscale * x clamped to [-128, 127] then
 * rounded to nearest even (FCVTNS, as nearbyintf under the default rounding mode). FMAXNM and
 * FMINNM return the number for a quiet NaN, so 0 * inf (a block whose largest value is
 * subnormal makes iscale infinite) gives -128 as the scalar's !(v > -128) does. Each group's
 * sum is one exact widening add across its 16 quants. */
void llmm__neon_quantize_q8k(const float *x, int8_t *qs, float *d, int16_t *bsums, size_t n) {
    const float32x4_t lo = vdupq_n_f32(-128.0f), hi = vdupq_n_f32(127.0f);
    for (size_t b = 0; b < n / QK_K; b++) {
        const float *xb = x + b * QK_K;
        int8_t *qb = qs + b * QK_K;
        int16_t *sb = bsums + b * (QK_K / 16);
        float32x4_t m[4];
        for (int k = 0; k < 4; k++) m[k] = vabsq_f32(vld1q_f32(xb + 4 * k));
        for (int k = 4; k < QK_K / 4; k++) m[k % 4] = vmaxq_f32(m[k % 4], vabsq_f32(vld1q_f32(xb + 4 * k)));
        const float amax = vmaxvq_f32(vmaxq_f32(vmaxq_f32(m[0], m[1]), vmaxq_f32(m[2], m[3])));
        if (amax == 0.0f) {
            d[b] = 0.0f;
            memset(qb, 0, QK_K);
            memset(sb, 0, QK_K / 16 * sizeof *sb);
            continue;
        }
        const float iscale = -127.0f / first_of_magnitude(xb, amax);
        for (int g = 0; g < QK_K / 16; g++) {
            int16x4_t h[4];
            for (int k = 0; k < 4; k++) {
                const float32x4_t v = vmulq_n_f32(vld1q_f32(xb + 16 * g + 4 * k), iscale);
                h[k] = vqmovn_s32(vcvtnq_s32_f32(vminnmq_f32(vmaxnmq_f32(v, lo), hi)));
            }
            const int8x16_t q = vcombine_s8(vqmovn_s16(vcombine_s16(h[0], h[1])), vqmovn_s16(vcombine_s16(h[2], h[3])));
            vst1q_s8(qb + 16 * g, q);
            sb[g] = vaddlvq_s8(q);
        }
        d[b] = 1.0f / iscale;
    }
}

void llmm__neon_round_f16(const float *x, float *out, size_t n) {
    size_t i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(out + i, vcvt_f32_f16(vcvt_f16_f32(vld1q_f32(x + i))));
    for (; i < n; i++) out[i] = round_f16(x[i]);
}

/* ---------------------------------------------------------------- F32 weights */

#define F32_ROWS 4
#define F32_TILE_X 2

/* 4 weight rows x nx operand rows, eight float lanes (two vectors) per pair: llmm__dot_f32's
 * eight partial sums. 16 accumulators, 4 operand and 2 weight vectors: 22 of 32 registers. */
SIMD_ALWAYS_INLINE void f32_tile(const float *const w[F32_ROWS], const float *const x[F32_TILE_X], size_t n8,
                                 size_t nx, float32x4_t acc[F32_ROWS][F32_TILE_X][2]) {
    for (int k = 0; k < F32_ROWS; k++)
        for (size_t r = 0; r < nx; r++) acc[k][r][0] = acc[k][r][1] = vdupq_n_f32(0.0f);
    for (size_t i = 0; i < n8; i += 8) {
        float32x4_t xv[F32_TILE_X][2];
        for (size_t r = 0; r < nx; r++) {
            xv[r][0] = vld1q_f32(x[r] + i);
            xv[r][1] = vld1q_f32(x[r] + i + 4);
        }
#pragma GCC unroll 4
        for (int k = 0; k < F32_ROWS; k++) {
            const float32x4_t w0 = vld1q_f32(w[k] + i), w1 = vld1q_f32(w[k] + i + 4);
            for (size_t r = 0; r < nx; r++) {
                acc[k][r][0] = vaddq_f32(acc[k][r][0], vmulq_f32(w0, xv[r][0]));
                acc[k][r][1] = vaddq_f32(acc[k][r][1], vmulq_f32(w1, xv[r][1]));
            }
        }
    }
}

/* llmm__dot_f32's ending: the tail first, then the eight lanes in order. */
static float f32_finish(const float32x4_t acc[2], const float *w, const float *x, size_t n8, size_t n) {
    float sum = 0, lanes[8];
    for (size_t i = n8; i < n; i++) sum += w[i] * x[i];
    vst1q_f32(lanes, acc[0]);
    vst1q_f32(lanes + 4, acc[1]);
    for (int l = 0; l < 8; l++) sum += lanes[l];
    return sum;
}

void llmm__neon_gemm_f32(const llmm_tensor *w, size_t j0, size_t j1, const cpu_operand *x, size_t n_rows, float *out,
                   size_t ldo) {
    const size_t n = x->n, n8 = n / 8 * 8;
    for (size_t j = j0; j < j1; j += F32_ROWS) {
        const size_t nj = LLMM_MIN((size_t)F32_ROWS, j1 - j);
        const float *rows[F32_ROWS];
        for (size_t k = 0; k < F32_ROWS; k++)
            rows[k] = (const float *)((const uint8_t *)w->data + (j + LLMM_MIN(k, nj - 1)) * w->row_bytes);
        for (size_t r0 = 0; r0 < n_rows; r0 += F32_TILE_X) {
            const size_t nx = LLMM_MIN((size_t)F32_TILE_X, n_rows - r0);
            const float *xr[F32_TILE_X] = {x->f32 + r0 * n, x->f32 + (r0 + nx - 1) * n};
            float32x4_t acc[F32_ROWS][F32_TILE_X][2];
            if (nx == 1) f32_tile(rows, xr, n8, 1, acc);
            else f32_tile(rows, xr, n8, F32_TILE_X, acc);
            for (size_t k = 0; k < nj; k++)
                for (size_t r = 0; r < nx; r++)
                    out[(r0 + r) * ldo + j + k] = f32_finish(acc[k][r], rows[k], xr[r], n8, n);
        }
    }
}

/* ---------------------------------------------------------------- F16 / BF16 weights */

/* The type table's order (lib/format/quant.c, half_dot): per (weight row, operand row) pair, 16
 * float lanes in four vectors (lanes 0-3, 4-7, 8-11, 12-15). A product of two halves is exact
 * in float, so fma(w, x, acc) adds exactly what the scalar's `lane += w * x` adds;
 * half_finish pairs the lanes as the scalar does (l + 8, + 4, + 2, + 1). */

#define HALF_ROWS 4

/* Eight f16 or bf16 weights as floats (both exact), lanes 0-3 in lo, 4-7 in hi. */
SIMD_ALWAYS_INLINE void load_half8(const uint16_t *p, int bf16, float32x4_t *lo, float32x4_t *hi) {
    const uint16x8_t h = vld1q_u16(p);
    if (bf16) {
        *lo = vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(h), 16));
        *hi = vreinterpretq_f32_u32(vshll_high_n_u16(h, 16));
    } else {
        const float16x8_t f = vreinterpretq_f16_u16(h);
        *lo = vcvt_f32_f16(vget_low_f16(f));
        *hi = vcvt_high_f32_f16(f);
    }
}

/* Sixteen weights as four float vectors. */
SIMD_ALWAYS_INLINE void load_half16(const uint16_t *p, int bf16, float32x4_t v[4]) {
    load_half8(p, bf16, &v[0], &v[1]);
    load_half8(p + 8, bf16, &v[2], &v[3]);
}

SIMD_ALWAYS_INLINE float half_to_float(uint16_t h, int bf16) {
    return bf16 ? llmm__bf16_to_f32(h) : llmm__f16_to_f32(h);
}

typedef float32x4_t half_acc[4]; /* one (weight row, operand row) pair's 16 lanes */

/* 4 weight rows x one operand row. */
SIMD_ALWAYS_INLINE void half_tile(const uint16_t *const w[HALF_ROWS], const float *x, size_t n16, int bf16,
                                  half_acc acc[HALF_ROWS]) {
    for (int k = 0; k < HALF_ROWS; k++)
        for (int l = 0; l < 4; l++) acc[k][l] = vdupq_n_f32(0.0f);
    for (size_t i = 0; i < n16; i += 16) {
        float32x4_t xv[4];
        for (int l = 0; l < 4; l++) xv[l] = vld1q_f32(x + i + 4 * l);
#pragma GCC unroll 4
        for (int k = 0; k < HALF_ROWS; k++) {
            float32x4_t wv[4];
            load_half16(w[k] + i, bf16, wv);
            for (int l = 0; l < 4; l++) acc[k][l] = vfmaq_f32(acc[k][l], wv[l], xv[l]);
        }
    }
}

SIMD_ALWAYS_INLINE float half_finish(const half_acc acc, const uint16_t *w, const float *x, size_t n16, size_t n,
                                     int bf16) {
    const float32x4_t t = vaddq_f32(vaddq_f32(acc[0], acc[2]), vaddq_f32(acc[1], acc[3]));
    float sum = vaddv_f32(vadd_f32(vget_low_f32(t), vget_high_f32(t)));
    for (size_t i = n16; i < n; i++) sum += half_to_float(w[i], bf16) * x[i];
    return sum;
}

/* Several operand rows (prefill): tiles of 2 weight rows x 2 operand rows, so each widened
 * weight vector serves two prompt rows (16 accumulators and 8 weight vectors of the 32
 * registers; the operand is loaded at each use), over blocks of HALF_BLOCK x HALF_BLOCK rows
 * that stay in cache. Each pair's lanes sum the same positions in the same order as
 * half_tile's: the same bits (test_simd_kernels compares each operand row alone with all at once).
 * Untimed: no ARM hardware here. */
#define HALF_TILE_X 2
#define HALF_BLOCK 16

SIMD_ALWAYS_INLINE void half_tile_2x2(const uint16_t *const w[2], const float *const x[HALF_TILE_X], size_t n16,
                                      int bf16, half_acc acc[2][HALF_TILE_X]) {
    float32x4_t a[2][HALF_TILE_X][4];
    for (int k = 0; k < 2; k++)
        for (int r = 0; r < HALF_TILE_X; r++)
            for (int l = 0; l < 4; l++) a[k][r][l] = vdupq_n_f32(0.0f);
    for (size_t i = 0; i < n16; i += 16) {
        float32x4_t wv[2][4];
#pragma GCC unroll 2
        for (int k = 0; k < 2; k++) load_half16(w[k] + i, bf16, wv[k]);
#pragma GCC unroll 2
        for (int r = 0; r < HALF_TILE_X; r++)
#pragma GCC unroll 4
            for (int l = 0; l < 4; l++) {
                const float32x4_t xv = vld1q_f32(x[r] + i + 4 * l);
                a[0][r][l] = vfmaq_f32(a[0][r][l], wv[0][l], xv);
                a[1][r][l] = vfmaq_f32(a[1][r][l], wv[1][l], xv);
            }
    }
    for (int k = 0; k < 2; k++)
        for (int r = 0; r < HALF_TILE_X; r++)
            for (int l = 0; l < 4; l++) acc[k][r][l] = a[k][r][l];
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
        half_acc acc[HALF_ROWS];
        half_tile(rows, x->f32, n16, bf16, acc);
        for (size_t k = 0; k < nj; k++) out[j + k] = half_finish(acc[k], rows[k], x->f32, n16, n, bf16);
    }
}

void llmm__neon_gemm_f16(const llmm_tensor *w, size_t j0, size_t j1, const cpu_operand *x, size_t n_rows, float *out,
                   size_t ldo) {
    gemm_half(w, j0, j1, x, n_rows, out, ldo, 0);
}

void llmm__neon_gemm_bf16(const llmm_tensor *w, size_t j0, size_t j1, const cpu_operand *x, size_t n_rows, float *out,
                    size_t ldo) {
    gemm_half(w, j0, j1, x, n_rows, out, ldo, 1);
}

/* ---------------------------------------------------------------- elementwise */

/* Squares in float, their sum in double in eight lanes and the scalar table's tree, then the
 * scalar's float scale and left-to-right products x * scale * w: its bits. */
void llmm__neon_rms_norm_row(const float *x, const float *w, float *out, size_t dim, float eps) {
    float64x2_t lo[2] = {vdupq_n_f64(0.0), vdupq_n_f64(0.0)}, hi[2] = {vdupq_n_f64(0.0), vdupq_n_f64(0.0)};
    size_t i = 0;
    for (; i + 8 <= dim; i += 8) {
        const float32x4_t v0 = vld1q_f32(x + i), v1 = vld1q_f32(x + i + 4);
        add_widened(lo, vmulq_f32(v0, v0));
        add_widened(hi, vmulq_f32(v1, v1));
    }
    double sum = sum_tree_f64x8(lo, hi);
    for (size_t t = i; t < dim; t++) sum += (double)(x[t] * x[t]);
    const float mean = (float)(sum / (double)dim);
    const float scale = 1.0f / sqrtf(mean + eps);
    for (i = 0; i + 4 <= dim; i += 4)
        vst1q_f32(out + i, vmulq_f32(vmulq_n_f32(vld1q_f32(x + i), scale), vld1q_f32(w + i)));
    for (; i < dim; i++) out[i] = x[i] * scale * w[i];
}

/* gate / (1 + e^-gate) * up, in the scalar's operation order. */
void llmm__neon_silu_mul(float *gate, const float *up, size_t n) {
    const float32x4_t one = vdupq_n_f32(1.0f);
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
        const float32x4_t g = vld1q_f32(gate + i);
        const float32x4_t s = vdivq_f32(g, vaddq_f32(one, exp_f32x4(vnegq_f32(g))));
        vst1q_f32(gate + i, vmulq_f32(s, vld1q_f32(up + i)));
    }
    for (; i < n; i++) gate[i] = gate[i] / (1.0f + llmm_exp_poly(-gate[i])) * up[i];
}

/* gelu_tanh(gate) * up, in kernels/gelu_poly.h's steps. */
void llmm__neon_gelu_mul(float *gate, const float *up, size_t n) {
    const float32x4_t one = vdupq_n_f32(1.0f), minus_two_k = vdupq_n_f32(LLMM_GELU_MINUS_TWO_K);
    const float32x4_t cubic = vdupq_n_f32(LLMM_GELU_CUBIC);
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
        const float32x4_t g = vld1q_f32(gate + i);
        const float32x4_t inner = vaddq_f32(one, vmulq_f32(cubic, vmulq_f32(g, g)));
        const float32x4_t z = vmulq_f32(vmulq_f32(g, minus_two_k), inner);
        const float32x4_t s = vdivq_f32(g, vaddq_f32(one, exp_f32x4(z)));
        vst1q_f32(gate + i, vmulq_f32(s, vld1q_f32(up + i)));
    }
    for (; i < n; i++) gate[i] = llmm_gelu_poly(gate[i]) * up[i];
}

/* Attention's q.k, bit for bit the scalar table's (kernel_table.c): two FMA accumulators (eight
 * lanes), the lanes added as a tree, then the tail in order. */
float llmm__neon_dot_f32(const float *a, const float *b, size_t n) {
    float32x4_t acc0 = vdupq_n_f32(0.0f), acc1 = vdupq_n_f32(0.0f);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        acc0 = vfmaq_f32(acc0, vld1q_f32(a + i), vld1q_f32(b + i));
        acc1 = vfmaq_f32(acc1, vld1q_f32(a + i + 4), vld1q_f32(b + i + 4));
    }
    const float32x4_t s = vaddq_f32(acc0, acc1);
    float sum = vpadds_f32(vadd_f32(vget_low_f32(s), vget_high_f32(s)));
    for (; i < n; i++) sum += a[i] * b[i];
    return sum;
}

/* The sum in eight double lanes and the scalar table's tree, then the tail in order: its bits. */
double llmm__neon_exp_sub_sum(float *s, size_t n, float max) {
    const float32x4_t vmax = vdupq_n_f32(max);
    float64x2_t lo[2] = {vdupq_n_f64(0.0), vdupq_n_f64(0.0)}, hi[2] = {vdupq_n_f64(0.0), vdupq_n_f64(0.0)};
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const float32x4_t e0 = exp_f32x4(vsubq_f32(vld1q_f32(s + i), vmax));
        const float32x4_t e1 = exp_f32x4(vsubq_f32(vld1q_f32(s + i + 4), vmax));
        vst1q_f32(s + i, e0);
        vst1q_f32(s + i + 4, e1);
        add_widened(lo, e0); /* lanes 0-1, 2-3 */
        add_widened(hi, e1); /* lanes 4-5, 6-7 */
    }
    double sum = sum_tree_f64x8(lo, hi);
    for (; i < n; i++) {
        s[i] = llmm_exp_poly(s[i] - max);
        sum += s[i];
    }
    return sum;
}

/* One fused multiply-add per value: the scalar's fmaf, bit for bit. */
void llmm__neon_axpy(float *y, float a, const float *x, size_t n) {
    size_t i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(y + i, vfmaq_n_f32(vld1q_f32(y + i), vld1q_f32(x + i), a));
    for (; i < n; i++) y[i] = fmaf(a, x[i], y[i]);
}

/* fcvtl: every ARMv8 core widens halves in hardware. */
void llmm__neon_f16_to_f32(const uint16_t *h, float *out, size_t n) {
    size_t i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(out + i, vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(h + i))));
    for (; i < n; i++) out[i] = vgetq_lane_f32(vcvt_f32_f16(vreinterpret_f16_u16(vdup_n_u16(h[i]))), 0);
}

/* ---------------------------------------------------------------- attention */

/* Four values of row j from d on, widened in the register for F16 rows (fcvtl: exact). */
SIMD_ALWAYS_INLINE float32x4_t row_load4(const cpu_attn_rows *rows, size_t j, size_t d, int f16) {
    return f16 ? vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(rows->f16 + j * rows->stride + d)))
               : vld1q_f32(rows->f32[j] + d);
}

SIMD_ALWAYS_INLINE float row_value(const cpu_attn_rows *rows, size_t j, size_t d, int f16) {
    return f16 ? vgetq_lane_f32(vcvt_f32_f16(vreinterpret_f16_u16(vdup_n_u16(rows->f16[j * rows->stride + d]))), 0)
               : rows->f32[j][d];
}

/* (a0 + a2, a1 + a3, b0 + b2, b1 + b3) */
SIMD_ALWAYS_INLINE float32x4_t add_halves(float32x4_t a, float32x4_t b) {
    const float64x2_t a64 = vreinterpretq_f64_f32(a), b64 = vreinterpretq_f64_f32(b);
    return vaddq_f32(vreinterpretq_f32_f64(vzip1q_f64(a64, b64)), vreinterpretq_f32_f64(vzip2q_f64(a64, b64)));
}

/* q . row r[k] for four rows, each with llmm__neon_dot_f32's lanes (two FMA accumulators over eight
 * values) and its reduction order, (l0 + l2) + (l1 + l3) of the halves' sums: the four rows'
 * halves paired by ZIP and added, then one FADDP adds each row's two partial sums, so four
 * scores take one reduction instead of one each. The tail (hd % 8 values) is the caller's. */
SIMD_ALWAYS_INLINE float32x4_t dot4_rows(const float *q, const cpu_attn_rows *rows, const size_t r[4], size_t hd8,
                                         int f16) {
    float32x4_t lo[4], hi[4];
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) lo[k] = hi[k] = vdupq_n_f32(0.0f);
    for (size_t d = 0; d < hd8; d += 8) {
        const float32x4_t q0 = vld1q_f32(q + d), q1 = vld1q_f32(q + d + 4);
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) {
            lo[k] = vfmaq_f32(lo[k], q0, row_load4(rows, r[k], d, f16));
            hi[k] = vfmaq_f32(hi[k], q1, row_load4(rows, r[k], d + 4, f16));
        }
    }
    float32x4_t s[4];
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) s[k] = vaddq_f32(lo[k], hi[k]);
    return vpaddq_f32(add_halves(s[0], s[1]), add_halves(s[2], s[3]));
}

/* Scores four positions at a time, bit for bit llmm__neon_dot_f32 per pair (its tail added after
 * the reduction, in order). A last group of fewer than four repeats its last row (as
 * llmm__neon_gemm_f32 pads its weight rows) and stores only its own lanes, so there is one code
 * path and no call per pair. */
SIMD_ALWAYS_INLINE void attn_scores_rows(const float *q, size_t nh, size_t hd, const cpu_attn_rows *rows, size_t n,
                                         float *scores, size_t ld, int f16) {
    const size_t hd8 = hd & ~(size_t)7;
    for (size_t i = 0; i < nh; i++, q += hd) {
        float *out = scores + i * ld;
        for (size_t j = 0; j < n; j += 4) {
            const size_t nj = LLMM_MIN((size_t)4, n - j);
            size_t r[4];
            for (size_t k = 0; k < 4; k++) r[k] = j + LLMM_MIN(k, nj - 1);
            const float32x4_t s = dot4_rows(q, rows, r, hd8, f16);
            if (nj == 4 && hd8 == hd) {
                vst1q_f32(out + j, s);
                continue;
            }
            float sum[4];
            vst1q_f32(sum, s);
            for (size_t k = 0; k < nj; k++) {
                for (size_t d = hd8; d < hd; d++) sum[k] += q[d] * row_value(rows, r[k], d, f16);
                out[j + k] = sum[k];
            }
        }
    }
}

/* nv vectors (4 nv values) of one head's output, o, += wi[j] * (row j + d) for j in order,
 * held in registers across the chunk. Each lane is one fused multiply-add per position, as in
 * llmm__neon_axpy, and lanes are independent, so the grouping changes no bit. */
SIMD_ALWAYS_INLINE void values_block(float *o, const float *wi, const cpu_attn_rows *rows, size_t d, size_t n, int nv,
                                     int f16) {
    float32x4_t acc[8];
#pragma GCC unroll 8
    for (int c = 0; c < nv; c++) acc[c] = vld1q_f32(o + 4 * c);
    for (size_t j = 0; j < n; j++) {
        const float a = wi[j];
#pragma GCC unroll 8
        for (int c = 0; c < nv; c++) acc[c] = vfmaq_n_f32(acc[c], row_load4(rows, j, d + 4 * c, f16), a);
    }
#pragma GCC unroll 8
    for (int c = 0; c < nv; c++) vst1q_f32(o + 4 * c, acc[c]);
}

/* out_i += w_ij * row j, bit for bit llmm__neon_axpy per pair in j order: 32 values of a head at a
 * time (8 accumulators; with 16, GCC 12 hoists all 16 row loads and spills a register per
 * position), then 4, then the scalar tail, as llmm__neon_axpy's. */
SIMD_ALWAYS_INLINE void attn_values_rows(float *out, size_t nh, size_t hd, const float *w, size_t ld,
                                         const cpu_attn_rows *rows, size_t n, int f16) {
    size_t d = 0;
    for (; d + 32 <= hd; d += 32)
        for (size_t i = 0; i < nh; i++) values_block(out + i * hd + d, w + i * ld, rows, d, n, 8, f16);
    for (; d + 4 <= hd; d += 4)
        for (size_t i = 0; i < nh; i++) values_block(out + i * hd + d, w + i * ld, rows, d, n, 1, f16);
    for (; d < hd; d++)
        for (size_t i = 0; i < nh; i++)
            for (size_t j = 0; j < n; j++)
                out[i * hd + d] = fmaf(w[i * ld + j], row_value(rows, j, d, f16), out[i * hd + d]);
}

void llmm__neon_attn_scores(const float *q, size_t nh, size_t hd, const float *const *rows, size_t n, float *scores,
                      size_t ld) {
    attn_scores_rows(q, nh, hd, &(cpu_attn_rows){.f32 = rows}, n, scores, ld, 0);
}

void llmm__neon_attn_values(float *out, size_t nh, size_t hd, const float *w, size_t ld, const float *const *rows,
                      size_t n) {
    attn_values_rows(out, nh, hd, w, ld, &(cpu_attn_rows){.f32 = rows}, n, 0);
}

/* The F16 K/V rows of a block read where they lie (ops/attention.c does not widen them into scratch
 * and read them back): the same loops as over widened rows, so the same bits. */
void llmm__neon_attn_scores_f16(const float *q, size_t nh, size_t hd, const uint16_t *rows, size_t row_stride, size_t n,
                          float *scores, size_t ld) {
    attn_scores_rows(q, nh, hd, &(cpu_attn_rows){.f16 = rows, .stride = row_stride}, n, scores, ld, 1);
}

void llmm__neon_attn_values_f16(float *out, size_t nh, size_t hd, const float *w, size_t ld, const uint16_t *rows,
                          size_t row_stride, size_t n) {
    attn_values_rows(out, nh, hd, w, ld, &(cpu_attn_rows){.f16 = rows, .stride = row_stride}, n, 1);
}

/* ---------------------------------------------------------------- the table */

const cpu_kernels llmm__cpu_kernels_neon = {
    .name = "neon",
    .isa = CPU_ISA_NEON,
    NEON_MATMUL_KERNELS,
    NEON_ROW_KERNELS,
    NEON_ATTENTION_KERNELS,
    NEON_DELTA_KERNELS,
};

#endif
