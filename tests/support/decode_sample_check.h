/* Test helper: llmm_decode_sample against llmm_decode + llmm_logits + llmm_sample on the same
 * backend, the same prompts and the same seeds. Shared by the CPU suite (test_generate.c) and the
 * CUDA module suite (test_cuda_module.c), where the sampling runs on the (emulated) device. */
#ifndef LLMM_TEST_DECODE_SAMPLE_CHECK_H
#define LLMM_TEST_DECODE_SAMPLE_CHECK_H

#include "llmmini.h"

/* Three sequences decoded together for `steps` steps, each row with its own sampler settings
 * (greedy; temperature with top-k and top-p; min-p with penalties), in two contexts made from p:
 * one through llmm_decode_sample, one through llmm_decode and llmm_sample. Asserts equal tokens
 * row by row, logits readable after llmm_decode_sample and equal to the other context's, and
 * llmm_decode_sample's argument errors (nothing decoded). Returns the tokens compared. */
size_t check_decode_sample(llmm_model *m, const llmm_context_params *p, int steps);

#endif
