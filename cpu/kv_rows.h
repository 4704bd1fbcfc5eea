/* Reading and writing rows of the paged KV cache (see llmm_kv_view in backend.h): the one
 * place the CPU backend knows the block layout and the element formats. */
#ifndef LLMM_CPU_KV_ROWS_H
#define LLMM_CPU_KV_ROWS_H

#include <math.h>
#include <string.h>

#include "backend/backend.h"
#include "format/quant.h"

/* IEEE half to float without branches on the value, exact for every pattern (subnormals,
 * infinities, NaN): the exponent is rebiased by a float multiply, subnormals come from a
 * magic-number subtraction (the method of Maratos' FP16 library). Inline because attention
 * converts every K and V value it reads: the out-of-line llmm__f16_to_f32 made F16 attention
 * several times slower than F32 over long contexts. */
typedef union kv_bits {
    uint32_t u;
    float f;
} kv_bits;

static inline float kv_half_to_float(uint16_t h) {
    const uint32_t w = (uint32_t)h << 16, sign = w & 0x80000000u, two_w = w + w;
    kv_bits normal = {.u = (two_w >> 4) + (0xe0u << 23)}, denormal = {.u = (two_w >> 17) | (126u << 23)};
    normal.f *= 0x1.0p-112f;
    denormal.f -= 0.5f;
    /* a select by mask, not a branch, so that loops of conversions vectorize */
    const uint32_t is_denormal = 0u - (uint32_t)(two_w < (1u << 27));
    const kv_bits out = {.u = sign | (denormal.u & is_denormal) | (normal.u & ~is_denormal)};
    return out.f;
}

/* Head h's row at position p (base: view->k or view->v) as head_dim floats: a pointer into
 * the pool for F32 rows, else the values converted into buf (head_dim floats). */
static inline const float *kv_row(const llmm_kv_view *view, const void *base, uint32_t p, uint32_t h, float *buf) {
    const uint8_t *row = (const uint8_t *)base + kv_row_offset(view, p, h);
    const size_t n = view->head_dim;
    if (view->type == LLMM_KV_F32) return (const float *)(const void *)row;
    if (view->type == LLMM_KV_F16) {
        const llmm_f16 *hv = (const llmm_f16 *)(const void *)row;
        size_t i = 0;
        /* fixed-count groups of 8: the compiler turns them into vector code at -O2 */
        for (; i + 8 <= n; i += 8)
            for (size_t j = 0; j < 8; j++) buf[i + j] = kv_half_to_float(hv[i + j]);
        for (; i < n; i++) buf[i] = kv_half_to_float(hv[i]);
        return buf;
    }
    float scale;
    memcpy(&scale, row, sizeof scale);
    const int8_t *q = (const int8_t *)(row + sizeof scale);
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (size_t j = 0; j < 8; j++) buf[i + j] = scale * (float)q[i + j];
    for (; i < n; i++) buf[i] = scale * (float)q[i];
    return buf;
}

/* Q8 head row of n values: q = round(x * 127 / amax), stored after scale = amax / 127, where
 * amax is the largest |value| of the whole position's K (or V) vector, all heads: one scale
 * per position. Per-head scales give smaller logit errors on most golden cases but moved two
 * greedy continuations off the reference's at near-ties within the Q8 golden bar, so the
 * scaling stays per position. */
static inline void kv_store_q8(uint8_t *row, const float *x, size_t n, float amax) {
    const float scale = amax / 127.0f, inv = amax > 0 ? 127.0f / amax : 0.0f;
    memcpy(row, &scale, sizeof scale);
    int8_t *q = (int8_t *)(row + sizeof scale);
    for (size_t i = 0; i < n; i++) q[i] = (int8_t)lrintf(fminf(127.0f, fmaxf(-127.0f, x[i] * inv)));
}

/* Store n_head_kv * head_dim floats (head after head) as position p's rows (base: view->k or
 * view->v), in the view's type. */
static inline void kv_store(const llmm_kv_view *view, void *base, uint32_t p, const float *x) {
    const size_t n = view->head_dim;
    float amax = 0;
    if (view->type == LLMM_KV_Q8)
        for (size_t i = 0; i < n * view->n_head_kv; i++) amax = fmaxf(amax, fabsf(x[i]));
    for (uint32_t h = 0; h < view->n_head_kv; h++, x += n) {
        uint8_t *row = (uint8_t *)base + kv_row_offset(view, p, h);
        if (view->type == LLMM_KV_F32) memcpy(row, x, n * sizeof *x);
        else if (view->type == LLMM_KV_F16)
            for (size_t i = 0; i < n; i++) ((llmm_f16 *)(void *)row)[i] = llmm__f32_to_f16(x[i]);
        else kv_store_q8(row, x, n, amax);
    }
}

static inline int kv_type_known(uint32_t type) {
    return type == LLMM_KV_F32 || type == LLMM_KV_F16 || type == LLMM_KV_Q8;
}

#endif
