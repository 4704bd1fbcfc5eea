/* Fuzz harness for the model loader, the entry point an app hands an untrusted file to: the
 * input is a GGUF file. It is written to a temp file (the API loads by path), loaded as a
 * vocabulary and then whole, and a model that loads must also tokenize, format a chat with the
 * file's template, prefill, decode and generate (sampling, stop strings) a few tokens. Errors
 * are expected; crashes, leaks and undefined behaviour are the findings. libFuzzer entry
 * point; `make fuzz` builds and runs it (seeds: $LLMM_SHARED/models, and a
 * 579-byte vocabulary in tests/fuzz/corpus/gguf/ whose metadata most mutations reach). */
#define _POSIX_C_SOURCE 200809L /* mkstemp, ftruncate, pwrite */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "llmmini.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char k_text[] = "Once upon a time, a dog said \"don't\" \xe2\x9c\x93 <s> 1234  \t\n";

static void use_model(llmm_model *m, int vocab_only) {
    llmm_token toks[64];
    size_t nt = 0;
    if (llmm_tokenize(m, k_text, sizeof k_text - 1, 0, toks, 64, &nt) != LLMM_OK || nt == 0) return;
    char text[512];
    size_t len;
    (void)llmm_detokenize(m, toks, nt, 0, text, sizeof text, &len);
    /* the file's chat template picks the format */
    const llmm_chat_message chat[2] = {{"system", "Be brief."}, {"user", "Hi"}};
    (void)llmm_chat_format(m, NULL, chat, 2, 1, text, sizeof text, &len);
    if (vocab_only) return;
    llmm_context_params cp;
    llmm_context_params_default(&cp, sizeof cp);
    cp.n_ctx = 32;
    cp.n_seq_max = 2;
    llmm_context *ctx = NULL;
    if (llmm_context_create(m, &cp, &ctx) != LLMM_OK) return;
    if (llmm_prefill(ctx, 0, toks, nt < 8 ? nt : 8, 0) == LLMM_OK) {
        const llmm_seq_id seq = 0;
        for (size_t step = 0; step < 2; step++) (void)llmm_decode(ctx, &seq, &toks[step % nt], 1);
    }
    /* the sampler and the streaming detokenizer over whatever logits the file gives */
    llmm_generate_params gp;
    llmm_generate_params_default(&gp, sizeof gp);
    static const char *const stops[] = {"e", "\n"};
    gp.seq = 1;
    gp.max_tokens = 3;
    gp.stop_strings = stops;
    gp.n_stop = 2;
    (void)llmm_generate(ctx, "Once", &gp, NULL);
    llmm_context_free(ctx);
}

/* one temp file for the process, rewritten per input and removed at exit */
static char g_path[] = "/tmp/llmm_fuzz_gguf_XXXXXX";
static void remove_temp(void) { unlink(g_path); }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static int fd = -1;
    if (fd < 0) {
        if ((fd = mkstemp(g_path)) < 0) abort();
        atexit(remove_temp);
    }
    if (ftruncate(fd, 0) != 0 || pwrite(fd, data, size, 0) != (ssize_t)size) abort();
    for (int vocab_only = 1; vocab_only >= 0; vocab_only--) {
        llmm_model_params mp;
        llmm_model_params_default(&mp, sizeof mp);
        mp.vocab_only = vocab_only;
        llmm_model *m = NULL;
        if (llmm_model_load(g_path, &mp, &m) != LLMM_OK) {
            if (m) abort(); /* a failed load must leave *out NULL */
            return 0;       /* not loadable as a vocabulary: not as a model either */
        }
        use_model(m, vocab_only);
        llmm_model_free(m);
    }
    return 0;
}
