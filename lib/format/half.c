#include "half.h"

#include <string.h>

static inline float f32_from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

float llmm__f16_to_f32(llmm_f16 h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    if (exp == 0x1f) return f32_from_bits(sign | 0x7f800000u | (man << 13));
    if (exp == 0) {
        /* subnormal: value = man * 2^-24 */
        float v = (float)man * 5.9604644775390625e-8f;
        return sign ? -v : v;
    }
    return f32_from_bits(sign | ((exp + 112) << 23) | (man << 13));
}

/* Round to nearest even, with overflow to infinity and gradual underflow, as the hardware
 * conversion (and so the reference engine) does. */
llmm_f16 llmm__f32_to_f16(float f) {
    uint32_t x = f32_bits(f);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t abs = x & 0x7fffffffu;
    if (abs >= 0x7f800000u) /* inf or nan */
        return (llmm_f16)(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0));
    if (abs >= 0x477ff000u) return (llmm_f16)(sign | 0x7c00u); /* rounds past 65504 */
    if (abs < 0x38800000u) {
        /* result is subnormal or zero: add 0.5 as float magic to get RNE in the low bits */
        float v = f32_from_bits(abs) + 0.5f;
        return (llmm_f16)(sign | (f32_bits(v) - 0x3f000000u));
    }
    uint32_t mant_odd = (abs >> 13) & 1u;
    abs += 0xc8000fffu + mant_odd; /* rebias exponent (-112 << 23) and round */
    return (llmm_f16)(sign | (abs >> 13));
}

float llmm__bf16_to_f32(llmm_bf16 h) { return f32_from_bits((uint32_t)h << 16); }
