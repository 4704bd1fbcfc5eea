/* e^x for one float, with the same steps and roundings as the SIMD tables' vector exp
 * (arch/x86/simd.h exp256_ps, arch/arm/simd.h exp_f32x4): the scalar table and the SIMD tables' tails
 * take it, so that softmax and SiLU give the same bits in every table, whatever the length of
 * a row (a tail of 5 on AVX2 is a vector and a tail of 1 on NEON). Within 2 ulp of expf
 * (tests/test_simd_kernels.c). For finite x; NaN stays NaN here (the x86 vector clamps it to -104). */
#ifndef LLMM_EXP_POLY_H
#define LLMM_EXP_POLY_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* 2^e for a biased exponent field in [1, 254] */
static inline float llmm_pow2_field(int32_t e) {
    const uint32_t bits = (uint32_t)e << 23;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

static inline float llmm_exp_poly(float x) {
    if (x != x) return x;
    x = x > -104.0f ? x : -104.0f;
    x = x < 89.0f ? x : 89.0f;
    const float n = nearbyintf(x * 1.44269504088896341f); /* ties to even, as the vector rounding */
    float r = fmaf(-n, 0.693359375f, x);
    r = fmaf(-n, -2.12194440e-4f, r);
    float p = 1.9875691500e-4f;
    p = fmaf(p, r, 1.3981999507e-3f);
    p = fmaf(p, r, 8.3334519073e-3f);
    p = fmaf(p, r, 4.1665795894e-2f);
    p = fmaf(p, r, 1.6666665459e-1f);
    p = fmaf(p, r, 5.0000001201e-1f);
    p = fmaf(p, r * r, r + 1.0f);
    const int32_t ni = (int32_t)n, n1 = (ni - (ni & 1)) / 2, n2 = ni - n1; /* n1 = floor(ni / 2) */
    return p * llmm_pow2_field(n1 + 127) * llmm_pow2_field(n2 + 127);
}

#endif
