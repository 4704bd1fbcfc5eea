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

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* loaded once for the process; the fuzzer never frees them (it exits) */
static llmm_model *g_model;
static llmm_context *g_ctx;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    const char *shared = getenv("LLMM_SHARED");
    char path[1024];
    snprintf(path, sizeof path, "%s/models/stories260K.gguf", shared ? shared : "../shared");
    llmm_context_params cp;
    llmm_context_params_default(&cp, sizeof cp);
    cp.n_ctx = 16;
    cp.n_seq_max = 2;
    cp.n_threads = 1;
    cp.backend = LLMM_BACKEND_CPU;
    if (llmm_model_load(path, NULL, &g_model) != LLMM_OK || llmm_context_create(g_model, &cp, &g_ctx) != LLMM_OK) {
        fprintf(stderr, "fuzz adapter: cannot load %s (set LLMM_SHARED)\n", path);
        abort();
    }
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
