/* The depthwise causal convolution kernel (cpu_kernels' conv_rows) over a range of channels:
 * the scalar table's kernel, and the channels past a SIMD table's last whole vector
 * (kernels/conv_tiles.h). Every output starts from 0 and adds its taps' products in tap
 * order, each product rounded and then added (no fused multiply-add): a SIMD table whose
 * lanes are channels rounds exactly as this loop does, so every table gives the same bits,
 * and the same as the ops' loops before the slot (LFM2's and Gated DeltaNet's goldens). */
#ifndef LLMM_CPU_CONV_RULE_H
#define LLMM_CPU_CONV_RULE_H

#include <stddef.h>

static inline void conv_rows_cols(float *y, size_t ldy, const float *const *x, size_t n_out, const float *taps,
                                  size_t n_taps, size_t c0, size_t c1) {
    for (size_t t = 0; t < n_out; t++) {
        float *yt = y + t * ldy;
        for (size_t c = c0; c < c1; c++) yt[c] = 0.f;
        for (size_t j = 0; j < n_taps; j++) {
            const float *in = x[t + j];
            /* a missing row is a zero input, which still multiplies: 0 x an infinite tap is NaN */
            for (size_t c = c0; c < c1; c++) yt[c] += (in ? in[c] : 0.f) * taps[c * n_taps + j];
        }
    }
}

#endif
