/* Inline helpers shared by the aarch64 kernel files (neon.c, dotprod.c),
 * each of which gets its own copy compiled for its instruction set. Advanced SIMD is part of
 * every AArch64 CPU that runs a general-purpose OS, so these need no target flags. */
#ifndef LLMM_SIMD_NEON_H
#define LLMM_SIMD_NEON_H

#if !defined(__aarch64__)
#error "simd.h is for aarch64 builds only"
#endif

#include <arm_neon.h>
#include <string.h>

#include "base/common.h"

#define SIMD_ALWAYS_INLINE static inline __attribute__((always_inline))

SIMD_ALWAYS_INLINE uint16_t load_u16(const uint8_t *p) {
    uint16_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* Four f16 bit patterns to floats (FCVTL: exact, subnormals and infinities included). */
SIMD_ALWAYS_INLINE float32x4_t f16x4_to_f32(uint16x4_t h) { return vcvt_f32_f16(vreinterpret_f16_u16(h)); }

/* Lanes [l0, l0 + n) of v to out[0 .. n). */
SIMD_ALWAYS_INLINE void store_lanes(float *out, float32x4_t v, size_t l0, size_t n) {
    if (n == 4) {
        vst1q_f32(out, v);
        return;
    }
    float tmp[4];
    vst1q_f32(tmp, v);
    for (size_t i = 0; i < n; i++) out[i] = tmp[l0 + i];
}

/* Squares (or any float values) added into two double accumulators, lanes 0-1 and 2-3. */
SIMD_ALWAYS_INLINE void add_widened(float64x2_t acc[2], float32x4_t v) {
    acc[0] = vaddq_f64(acc[0], vcvt_f64_f32(vget_low_f32(v)));
    acc[1] = vaddq_f64(acc[1], vcvt_high_f64_f32(v));
}

/* Eight double lanes, lo = {0-1, 2-3} and hi = {4-5, 6-7}, added as the scalar table's and
 * the x86 tables' tree: ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)). */
SIMD_ALWAYS_INLINE double sum_tree_f64x8(const float64x2_t lo[2], const float64x2_t hi[2]) {
    return vaddvq_f64(vaddq_f64(vaddq_f64(lo[0], hi[0]), vaddq_f64(lo[1], hi[1])));
}

/* e^x, within 2 ulp of expf over the whole float range (tests/test_simd_kernels.c measures it): the
 * x86 kernels' algorithm (arch/x86/simd.h), with the same fused steps, so both give the same bits.
 * x = n ln2 + r with |r| <= ln2/2 (ln2 in two parts, so r is exact to float rounding), e^r by
 * the Cephes degree-6 polynomial, then 2^n as two power-of-two factors so that n from -151 to
 * 129 neither wraps the exponent field nor loses the gradual underflow. */
SIMD_ALWAYS_INLINE float32x4_t exp_f32x4(float32x4_t x) {
    x = vminq_f32(vmaxq_f32(x, vdupq_n_f32(-104.0f)), vdupq_n_f32(89.0f));
    const float32x4_t n = vrndnq_f32(vmulq_f32(x, vdupq_n_f32(1.44269504088896341f)));
    float32x4_t r = vfmsq_f32(x, n, vdupq_n_f32(0.693359375f));
    r = vfmsq_f32(r, n, vdupq_n_f32(-2.12194440e-4f));
    float32x4_t p = vdupq_n_f32(1.9875691500e-4f);
    p = vfmaq_f32(vdupq_n_f32(1.3981999507e-3f), p, r);
    p = vfmaq_f32(vdupq_n_f32(8.3334519073e-3f), p, r);
    p = vfmaq_f32(vdupq_n_f32(4.1665795894e-2f), p, r);
    p = vfmaq_f32(vdupq_n_f32(1.6666665459e-1f), p, r);
    p = vfmaq_f32(vdupq_n_f32(5.0000001201e-1f), p, r);
    p = vfmaq_f32(vaddq_f32(r, vdupq_n_f32(1.0f)), p, vmulq_f32(r, r));
    const int32x4_t ni = vcvtq_s32_f32(n); /* n is integral already */
    const int32x4_t n1 = vshrq_n_s32(ni, 1), n2 = vsubq_s32(ni, n1);
    const float32x4_t s1 = vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(n1, vdupq_n_s32(127)), 23));
    const float32x4_t s2 = vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(n2, vdupq_n_s32(127)), 23));
    return vmulq_f32(vmulq_f32(p, s1), s2);
}

#endif
