/* Test helper: run a prompt the way the reference engine made its golden outputs and measure
 * how close we are. Shared by the golden suites (stories260K, the architecture models). */
#ifndef LLMM_TEST_GOLDEN_CHECK_H
#define LLMM_TEST_GOLDEN_CHECK_H

#include <stddef.h>

#include "llmmini.h"
#include "support/shared_data.h"

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

/* The golden/arch models, one per architecture (golden/arch/tiny-ARCH.gguf), and their prompts. */
typedef struct arch_case {
    const char *arch;
    double logit_tolerance; /* golden/README.md: 1e-3, gemma2 1e-2 (the reference's f16 GELU table) */
} arch_case;
extern const arch_case arch_cases[];
extern const size_t n_arch_cases;
/* Architectures of golden/arch models that llmmini does not load yet: each must be refused with
 * LLMM_ERR_UNSUPPORTED (check_arch_unsupported), so that loading one makes its test a row of
 * arch_cases. */
extern const char *const arch_unsupported[];
extern const size_t n_arch_unsupported;
/* 1 when golden/arch/FILE (tiny-ARCH.gguf) is of an arch_unsupported architecture and loads
 * with LLMM_ERR_UNSUPPORTED; fails the test when it is of one but loads; 0 when it is of none. */
int check_arch_unsupported(const char *file);
typedef struct golden_prompt {
    const char *name, *text;
} golden_prompt;
extern const golden_prompt arch_prompts[];
extern const size_t n_arch_prompts;

/* Asserts that the prompt tokenizes to the golden ids (add_special on), then prefills it in
 * sequence 0 of c, compares the last logits and generates g->n_generated greedy tokens. */
golden_result golden_compare(const llmm_model *m, llmm_context *c, const golden_run *g, const char *prompt);

/* golden/arch/tiny-ARCH.PROMPT_NAME through a context on the given backend with an F32 KV
 * cache (as the goldens were made): asserts the file's architecture, the logits within the
 * case's tolerance and the greedy tokens for the case's reliable steps; prints the figures
 * with label. */
golden_result check_arch_prompt(const arch_case *ac, const char *prompt_name, const char *prompt,
                                llmm_backend_kind backend, const char *label);

#endif
