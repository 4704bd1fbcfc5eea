/* Test helper: a broken model never yields a token. stories260K (F32) with NaN, or +inf, in its
 * final norm weights makes every logit non-finite; llmm_sample, llmm_decode_sample and
 * llmm_generate must return LLMM_ERR_NUMERICAL with the position and sequence in the message
 * instead of a token drawn from garbage. The damaged copy is written to a temp file and loaded
 * as an app would load it. Shared by the CPU suite (test_numerical.c) and the CUDA module suite
 * (test_cuda_module.c), where llmm_decode_sample samples on the (emulated) device. */
#ifndef LLMM_TEST_NUMERICAL_CHECK_H
#define LLMM_TEST_NUMERICAL_CHECK_H

#include <stddef.h>
#include <stdint.h>

#include "llmmini.h"

/* The model file rel (in the shared data) read into a malloc'd buffer (*n bytes), with every
 * stride-th value of its F32 output_norm.weight set to bad; the caller frees it. */
uint8_t *read_model_with_bad_norm(const char *rel, float bad, size_t stride, size_t *n);

/* Every check above on contexts made from p (n_ctx >= 16). */
void check_numerical_errors(const llmm_context_params *p);

#endif
