/* GELU (the tanh form) through the tables' one exp, for one float: the scalar table and the
 * SIMD tables' tails take it, so that a GELU gate gives the same bits in every table.
 * 0.5 x (1 + tanh(u)) = x / (1 + e^(-2u)), u = sqrt(2/pi) x (1 + 0.044715 x^2): the form of
 * SiLU, so one exp per value where libm's tanhf cost a call per value (docs/performance.md,
 * "Where a Gemma 3 prompt spends its time"). The vector kernels take these steps in this order. */
#ifndef LLMM_GELU_POLY_H
#define LLMM_GELU_POLY_H

#include "kernels/exp_poly.h"

#define LLMM_GELU_MINUS_TWO_K (-1.5957691216057308f) /* -2 sqrt(2/pi) */
#define LLMM_GELU_CUBIC 0.044715f

/* e^(-2u)'s argument */
static inline float llmm_gelu_exponent(float x) {
    return (x * LLMM_GELU_MINUS_TWO_K) * (1.0f + LLMM_GELU_CUBIC * (x * x));
}

static inline float llmm_gelu_poly(float x) { return x / (1.0f + llmm_exp_poly(llmm_gelu_exponent(x))); }

#endif
