/* Fuzz harness for saved states, the bytes an app may read back from disk or a cache it does not
 * fully trust: the input is a state image, loaded with llmm_seq_load_buffer into a live context
 * of stories260K over a sequence that already holds tokens, and over an empty one. A refused
 * state must leave the sequence as it was (its length, and a decode step that still works); an
 * accepted one must give a sequence within n_ctx that decodes. Seeds: states the replay suite
 * saves (tests/fuzz/corpus/saved_state/). libFuzzer entry point; `make fuzz`. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "llmmini.h"
#include "stories_model.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

enum { N_CTX = 64 };
static const llmm_token k_held[4] = {1, 403, 261, 29};

/* loaded once for the process; the fuzzer never frees them (it exits) */
static llmm_model *g_model;
static llmm_context *g_ctx;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    g_model = fuzz_stories_model("saved_state", 0);
    g_ctx = fuzz_stories_context(g_model, N_CTX);
    return 0;
}

static size_t length_of(llmm_seq_id seq) {
    size_t n = 0;
    if (llmm_seq_length(g_ctx, seq, &n) != LLMM_OK) abort();
    return n;
}

/* One decode step on seq: it must work on whatever a load left (full sequences excepted). */
static void decode_one(llmm_seq_id seq) {
    const llmm_token t = 42;
    const size_t len = length_of(seq);
    const llmm_status st = llmm_decode(g_ctx, &seq, &t, 1);
    if (len >= N_CTX ? st != LLMM_ERR_CONTEXT_FULL : st != LLMM_OK) abort();
    if (!st && length_of(seq) != len + 1) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (llmm_seq_clear(g_ctx, 0) || llmm_seq_clear(g_ctx, 1) || llmm_prefill(g_ctx, 1, k_held, 4, 0)) abort();
    for (llmm_seq_id seq = 0; seq < 2; seq++) {
        const size_t before = length_of(seq);
        const llmm_status st = llmm_seq_load_buffer(g_ctx, seq, data, size);
        if (st == LLMM_OK) {
            if (length_of(seq) > N_CTX) abort();
        } else if (st == LLMM_ERR_BAD_FILE || st == LLMM_ERR_CONTEXT_FULL || st == LLMM_ERR_NO_MEMORY) {
            if (length_of(seq) != before) abort(); /* a refused state changes nothing */
        } else {
            abort();
        }
        decode_one(seq);
    }
    return 0;
}
