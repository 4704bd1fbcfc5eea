/* What the kernel and weight-format suites share to check floats: the unit roundoff, bit views,
 * a NaN fill, a tolerance check that names the case, and float64 references of the half formats
 * (IEEE binary16 and bfloat16) written from their bit layouts, independent of lib/format/half.c.
 * C and C++. CHECK_CLOSE needs <cmocka.h> included before. */
#ifndef LLMM_TEST_SUPPORT_NUMERIC_H
#define LLMM_TEST_SUPPORT_NUMERIC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define U_F32 (1.0 / 16777216.0) /* 2^-24, the float unit roundoff */

/* |got - ref| <= tol, else prints the case (a printf format and its arguments), both values,
 * the difference and the tolerance, and fails the running test. NaN fails. */
#define CHECK_CLOSE(got, ref, tol, ...)                                                                  \
    do {                                                                                                 \
        const double g_ = (double)(got), r_ = (double)(ref), t_ = (double)(tol);                         \
        if (!(fabs(g_ - r_) <= t_)) {                                                                    \
            print_error(__VA_ARGS__);                                                                    \
            print_error(": got %.9g ref %.9g |diff| %.3g tol %.3g\n", g_, r_, fabs(g_ - r_), t_);        \
            fail();                                                                                      \
        }                                                                                                \
    } while (0)

uint32_t bits_of_f32(float f);
float f32_of_bits(uint32_t u);

/* Fills p[0..n) with a quiet NaN, so that any output a kernel forgets to write shows up. */
void fill_nan(float *p, size_t n);

/* Value of the IEEE half with bits h. */
double ref_half(uint16_t h);
int half_is_nan(uint16_t h);
/* Nearest half to a (non-NaN) float, ties to even, overflow to infinity: the largest finite
 * half is 65504 and the next step would be 65536, so values from the midpoint 65520 up round
 * to infinity (65504's mantissa is odd). Found by binary search over the ordered positive
 * patterns, not by bit tricks. */
uint16_t ref_f32_to_f16(float f);

/* Value of the bfloat16 with bits h (the high half of a float). */
double ref_bf16(uint16_t h);
/* Nearest bfloat16 to a (non-NaN) float, ties to even, overflow to infinity (the step above
 * the largest finite bfloat16 is 2^128). */
uint16_t ref_f32_to_bf16(float f);

#ifdef __cplusplus
}
#endif

#endif
