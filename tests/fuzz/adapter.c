/* Fuzz harness for LoRA adapters past the GGUF reader: the input is an adapter file, loaded from
 * memory against stories260K (llmm_adapter_load_memory, which checks it against the model:
 * tensor names, shapes, ranks, types). An adapter that loads must report sane facts and run: a
 * sequence using it at two scales prefills and decodes (its numbers may be anything, NaN
 * included: the weights are the input's). Seeds: $LLMM_SHARED/lora and
 * tests/fuzz/corpus/adapter/. libFuzzer entry point; `make fuzz`. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "llmmini.h"
#include "stories_model.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* loaded once for the process; the fuzzer never frees them (it exits) */
static llmm_model *g_model;
static llmm_context *g_ctx;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    g_model = fuzz_stories_model("adapter", 0);
    g_ctx = fuzz_stories_context(g_model, 16);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    llmm_adapter *a = NULL;
    const llmm_status st = llmm_adapter_load_memory(g_model, data, size, &a);
    if (st != LLMM_OK) {
        if (a || (st != LLMM_ERR_BAD_FILE && st != LLMM_ERR_NO_MEMORY && st != LLMM_ERR_UNSUPPORTED)) abort();
        return 0;
    }
    llmm_adapter_info info = {.size = sizeof info};
    if (llmm_adapter_get_info(a, &info) != LLMM_OK || info.rank == 0 || info.n_tensors == 0) abort();
    static const llmm_token prompt[3] = {1, 403, 261};
    const float scales[2] = {1.0f, -0.5f};
    for (int i = 0; i < 2; i++) {
        const llmm_seq_id seq = i;
        if (llmm_seq_clear(g_ctx, seq) || llmm_seq_set_adapters(g_ctx, seq, &a, &scales[i], 1)) abort();
        if (llmm_prefill(g_ctx, seq, prompt, 3, 0) != LLMM_OK) abort();
    }
    /* both sequences in one step: rows of one adapter at two scales */
    const llmm_seq_id seqs[2] = {0, 1};
    const llmm_token next[2] = {29, 29};
    if (llmm_decode(g_ctx, seqs, next, 2) != LLMM_OK) abort();
    const float *logits = NULL;
    size_t nv = 0;
    if (llmm_logits(g_ctx, 1, &logits, &nv) != LLMM_OK || !logits) abort();
    for (llmm_seq_id seq = 0; seq < 2; seq++)
        if (llmm_seq_set_adapters(g_ctx, seq, NULL, NULL, 0)) abort();
    llmm_adapter_free(a);
    return 0;
}
