/* The harnesses' models: stories260K (or another file) from the shared test data ($LLMM_SHARED,
 * else ../shared), loaded once per process, and a small CPU context on one. Harnesses build
 * alone (-Iinclude, no support code), so this is a header; a failure aborts, since no input can
 * run without it. */
#ifndef LLMM_FUZZ_STORIES_MODEL_H
#define LLMM_FUZZ_STORIES_MODEL_H

#include <stdio.h>
#include <stdlib.h>

#include "llmmini.h"

/* rel: a file of the shared test data ("models/stories260K.gguf") */
static inline llmm_model *fuzz_shared_model(const char *harness, const char *rel, int vocab_only) {
    const char *shared = getenv("LLMM_SHARED");
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", shared ? shared : "../shared", rel);
    llmm_model_params mp;
    llmm_model_params_default(&mp, sizeof mp);
    mp.vocab_only = vocab_only;
    llmm_model *m = NULL;
    if (llmm_model_load(path, &mp, &m) != LLMM_OK) {
        fprintf(stderr, "fuzz %s: cannot load %s (set LLMM_SHARED)\n", harness, path);
        abort();
    }
    return m;
}

static inline llmm_model *fuzz_stories_model(const char *harness, int vocab_only) {
    return fuzz_shared_model(harness, "models/stories260K.gguf", vocab_only);
}

/* n_seq_max 2, one thread: the sizes the harnesses' seeds were made with */
static inline llmm_context *fuzz_stories_context(llmm_model *m, uint32_t n_ctx) {
    llmm_context_params cp;
    llmm_context_params_default(&cp, sizeof cp);
    cp.n_ctx = n_ctx;
    cp.n_seq_max = 2;
    cp.n_threads = 1;
    cp.backend = LLMM_BACKEND_CPU;
    llmm_context *c = NULL;
    if (llmm_context_create(m, &cp, &c) != LLMM_OK) abort();
    return c;
}

#endif
