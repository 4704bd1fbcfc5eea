/* Test helper: run a prompt the way the reference engine made its golden outputs and measure
 * how close we are. Shared by the golden suites (stories260K, the architecture models). */
#ifndef LLMM_TEST_GOLDEN_CHECK_H
#define LLMM_TEST_GOLDEN_CHECK_H

#include <stddef.h>

#include "llmmini.h"
#include "shared_data.h"

typedef struct golden_result {
    double max_logit_diff; /* over the last prompt position's logits */
    size_t agree;          /* leading greedy tokens equal to the reference's */
} golden_result;

typedef struct golden_case {
    const char *model;  /* under models/ */
    const char *golden; /* under golden/stories260K/, without extension */
    const char *prompt;
    size_t hard_steps;  /* leading greedy tokens that must match exactly (golden/README.md) */
} golden_case;

/* The golden/stories260K cases: every model file, every prompt (n_golden_cases of them). */
extern const golden_case golden_cases[];
extern const size_t n_golden_cases;

/* Asserts that the prompt tokenizes to the golden ids (add_special on), then prefills it in
 * sequence 0 of c, compares the last logits and generates g->n_generated greedy tokens. */
golden_result golden_compare(const llmm_model *m, llmm_context *c, const golden_run *g, const char *prompt);

#endif
