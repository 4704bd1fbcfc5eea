/* IEEE half and bfloat16 conversions, rounding as the hardware (and the reference engine) do. */
#ifndef LLMM_HALF_H
#define LLMM_HALF_H

#include <stdint.h>

#include "blocks.h"

float llmm__f16_to_f32(llmm_f16 h);
llmm_f16 llmm__f32_to_f16(float f);
float llmm__bf16_to_f32(llmm_bf16 h);

/* A float's bits (u) rounded to bf16 and widened back to float bits: nearest even, a NaN
 * quieted. The one rounding rule of the type table's from_float and of the CPU backend's
 * vectorized operand rounding; the magnitude is compared as a signed int because SSE2 has
 * only a signed 32-bit compare, which lets GCC vectorize loops over it. */
static inline uint32_t llmm_bf16_round_bits(uint32_t u) {
    const int nan = (int32_t)(u & 0x7fffffffu) > (int32_t)0x7f800000;
    return nan ? (u | 0x00400000u) & 0xffff0000u : (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
}

#endif
