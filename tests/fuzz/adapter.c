/* Fuzz harness for LoRA adapters past the GGUF reader: the input is an adapter file, loaded from
 * memory (llmm_adapter_load_memory, which checks it against the model: architecture, tensor
 * names, shapes, ranks, types) against two models of different layouts: stories260K (llama:
 * separate Q, K, V, gate and up weights) and tiny-phi3 (fused: one attn_qkv and one ffn_up
 * holding gate and up, whose adapters the forward pass splits into row ranges). An adapter that
 * loads must report sane facts and run: a sequence using it at two scales prefills and decodes
 * (its numbers may be anything, NaN included: the weights are the input's). Seeds:
 * $LLMM_SHARED/lora and tests/fuzz/corpus/adapter/. libFuzzer entry point; `make fuzz`. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "llmmini.h"
#include "stories_model.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const k_models[] = {"models/stories260K.gguf", "golden/arch/tiny-phi3.gguf"};
#define N_MODELS (sizeof k_models / sizeof *k_models)

/* loaded once for the process; the fuzzer never frees them (it exits) */
static llmm_model *g_models[N_MODELS];
static llmm_context *g_ctxs[N_MODELS];

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    if (g_models[0]) return 0; /* test_fuzz_replay calls it from more than one test */
    for (size_t i = 0; i < N_MODELS; i++) {
        g_models[i] = fuzz_shared_model("adapter", k_models[i], 0);
        g_ctxs[i] = fuzz_stories_context(g_models[i], 16);
    }
    return 0;
}

/* Both models have 512-token vocabularies, so the same ids serve. */
static void run_adapter(llmm_context *ctx, llmm_adapter *a) {
    llmm_adapter_info info = {.size = sizeof info};
    if (llmm_adapter_get_info(a, &info) != LLMM_OK || info.rank == 0 || info.n_tensors == 0) abort();
    static const llmm_token prompt[3] = {1, 403, 261};
    const float scales[2] = {1.0f, -0.5f};
    for (int i = 0; i < 2; i++) {
        const llmm_seq_id seq = i;
        if (llmm_seq_clear(ctx, seq) || llmm_seq_set_adapters(ctx, seq, &a, &scales[i], 1)) abort();
        if (llmm_prefill(ctx, seq, prompt, 3, 0) != LLMM_OK) abort();
    }
    /* both sequences in one step: rows of one adapter at two scales */
    const llmm_seq_id seqs[2] = {0, 1};
    const llmm_token next[2] = {29, 29};
    if (llmm_decode(ctx, seqs, next, 2) != LLMM_OK) abort();
    const float *logits = NULL;
    size_t nv = 0;
    if (llmm_logits(ctx, 1, &logits, &nv) != LLMM_OK || !logits) abort();
    for (llmm_seq_id seq = 0; seq < 2; seq++)
        if (llmm_seq_set_adapters(ctx, seq, NULL, NULL, 0)) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    for (size_t i = 0; i < N_MODELS; i++) {
        llmm_adapter *a = NULL;
        const llmm_status st = llmm_adapter_load_memory(g_models[i], data, size, &a);
        if (st != LLMM_OK) {
            if (a || (st != LLMM_ERR_BAD_FILE && st != LLMM_ERR_NO_MEMORY && st != LLMM_ERR_UNSUPPORTED)) abort();
            continue;
        }
        run_adapter(g_ctxs[i], a);
        llmm_adapter_free(a);
    }
    return 0;
}
