/* Fixtures every suite shares: models from the shared data, contexts, prompts as token ids,
 * the greedy token of a logits row, a clock. Each fails the running cmocka test, with the
 * library's message, where the suite would otherwise go on with a NULL handle; a test that
 * expects a failure calls the library itself. C and C++. */
#ifndef LLMM_TEST_SUPPORT_FIXTURES_H
#define LLMM_TEST_SUPPORT_FIXTURES_H

#include <stddef.h>
#include <stdint.h>

#include "llmmini.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* The model file name, loaded with params (NULL: the defaults). name is a file of the shared
 * data's models/ folder ("stories260K.gguf"), a path under the shared data folder
 * ("golden/arch/tiny-llama.gguf", shared_data.h), or a path as it stands: one starting with '/'
 * or '.' (a file the test wrote) or a shared_path result. */
llmm_model *load_model(const char *name, const llmm_model_params *params);
/* The same, vocabulary and metadata only (vocab_only, the other parameters their defaults). */
llmm_model *load_vocab(const char *name);

/* A context on m with p (NULL: the defaults). */
llmm_context *make_context(const llmm_model *m, const llmm_context_params *p);

/* A prompt as the suites feed one: the NUL-terminated text with the model's special tokens
 * added (LLMM_TOKENIZE_ADD_SPECIAL), at most cap ids into ids. Returns the count. */
size_t tokenize(const llmm_model *m, const char *text, llmm_token *ids, size_t cap);
/* len bytes of text (NULs allowed) with the given LLMM_TOKENIZE_* flags. Returns the count. */
size_t tokenize_flags(const llmm_model *m, const char *text, size_t len, uint32_t flags, llmm_token *ids,
                      size_t cap);

/* llmm_generate parameters for greedy generation: sp (filled here: temperature 0, the rest its
 * defaults) as the sampling, at most max_tokens tokens into out (room for max_tokens), every
 * other field its default. Asserts nothing, so a test's own threads may use it too. */
llmm_generate_params greedy_params(llmm_sampler_params *sp, llmm_token *out, size_t max_tokens);
/* Sampling with nothing cut off and no penalties: only the temperature and the seeded draw. */
llmm_sampler_params plain_sampling(float temperature, uint64_t seed);
/* A greedy sampler (temperature 0, the rest its defaults), asserted created. */
llmm_sampler *greedy_sampler(void);
/* llmm_generate with greedy_params after prompt; the run's figures into *stats unless stats is
 * NULL. Returns the tokens generated. */
size_t generate_greedy(llmm_context *c, const char *prompt, llmm_token *out, size_t max_tokens,
                       llmm_generate_stats *stats);

/* Index of the largest of v[0..n) (the first of equals): the greedy token of a logits row. */
llmm_token argmax(const float *v, size_t n);

/* The emulated CUDA module (libllmmini-cuda-emu.so) of the build a suite at argv0 belongs to:
 * $LLMM_CUDA_EMU_MODULE, else ../libllmmini-cuda-emu.so from the suite's folder, into path.
 * Returns 1 when that file is readable. */
int emulated_cuda_module(const char *argv0, char *path, size_t cap);

/* The build's program `tool` (llmmini-synth) for a suite at argv0: ../tool from the suite's
 * folder (build/tests when argv0 names no folder), into path. */
void build_tool_path(const char *argv0, const char *tool, char *path, size_t cap);

/* Run llmmini-synth (synth_tool, under $TEST_RUNNER) to write out_path with options (shell
 * words, quoted as needed) and the shared vocabulary vocab_rel (a path under ../shared) as its
 * --vocab; fails the test when it does not exit 0. */
void synth_model(const char *synth_tool, const char *out_path, const char *options, const char *vocab_rel);

/* Seconds on the monotonic clock, for durations. */
double now_s(void);

#ifdef __cplusplus
}
#endif

#endif
