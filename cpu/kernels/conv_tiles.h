/* The depthwise causal convolution (kernel_table.h conv_rows) in vectors whose lanes are
 * channels: for arch/x86/conv_avx2.c, conv_avx512.c and arch/arm/conv_neon.c. Each lane adds
 * the products of kernels/conv_rule.h in the same order from the same 0, so the results are
 * the scalar table's bit for bit; channels past the last whole vector take conv_rule.h's loop.
 * The taps are stored channel by channel (taps[c * n_taps + j]), strided for a vector of
 * channels, so a block of channels gathers its taps once, CV_TAP_GROUP at a time, and
 * reuses them for every output row: the ops' loop had read each tap at a stride of n_taps
 * floats for every row and channel. The including file defines first:
 *   cv_vec, CV_LANES     a vector of floats and its width
 *   cv_load, cv_store, cv_zero, cv_mul, cv_add
 *   CV_NAME(kernel)      the exported name (llmm__avx2_##kernel)
 *   SIMD_ALWAYS_INLINE   (arch/x86/simd.h, arch/arm/simd.h)
 * and gets CV_NAME(conv_rows), which the architecture's table.h declares. */
#ifndef LLMM_CONV_TILES_H
#define LLMM_CONV_TILES_H

#include "kernels/conv_rule.h"

/* taps gathered at a time: LFM2 and Qwen3.5 have 3 and 4; longer kernels take several
 * groups, the partial sums kept in y between them (a float stored and reloaded is exact) */
#define CV_TAP_GROUP 8

/* Channels [c, c + CV_LANES) of every output, taps [g0, g0 + ng). */
SIMD_ALWAYS_INLINE void cv_block(float *y, size_t ldy, const float *const *x, size_t n_out, const float *taps,
                                 size_t n_taps, size_t c, size_t g0, size_t ng) {
    float gathered[CV_TAP_GROUP][CV_LANES];
    for (size_t j = 0; j < ng; j++)
        for (size_t l = 0; l < CV_LANES; l++) gathered[j][l] = taps[(c + l) * n_taps + g0 + j];
    cv_vec tv[CV_TAP_GROUP];
    for (size_t j = 0; j < ng; j++) tv[j] = cv_load(gathered[j]);
    for (size_t t = 0; t < n_out; t++) {
        float *yt = y + t * ldy + c;
        cv_vec acc = g0 ? cv_load(yt) : cv_zero();
        for (size_t j = 0; j < ng; j++) {
            const float *in = x[t + g0 + j];
            acc = cv_add(acc, cv_mul(in ? cv_load(in + c) : cv_zero(), tv[j]));
        }
        cv_store(yt, acc);
    }
}

void CV_NAME(conv_rows)(float *y, size_t ldy, const float *const *x, size_t n_out, const float *taps, size_t n_taps,
                        size_t c0, size_t c1) {
    size_t c = c0;
    for (; c + CV_LANES <= c1; c += CV_LANES)
        for (size_t g0 = 0; g0 < n_taps; g0 += CV_TAP_GROUP)
            cv_block(y, ldy, x, n_out, taps, n_taps, c, g0,
                     n_taps - g0 < CV_TAP_GROUP ? n_taps - g0 : CV_TAP_GROUP);
    if (c < c1) conv_rows_cols(y, ldy, x, n_out, taps, n_taps, c, c1);
}

#endif
