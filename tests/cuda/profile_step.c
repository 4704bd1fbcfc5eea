/* profile_step: one measured step of a model on the profiled CUDA module (make cuda-profile,
 * scripts/cuda-profile.py). Loads MODEL on LLMM_BACKEND_CUDA (LLMM_CUDA_MODULE names
 * build/libllmmini-cuda-prof.so), runs a step of ROWS sequences of one token each (a decode
 * step: ROWS rows through the GEMV) or, with ROWS = 0, a prompt of PROMPT tokens in one chunk,
 * and writes the counters of that step alone to OUT (JSON lines, tests/simt/simt_profile.cpp):
 * the counters are reset after loading, so weight upload and context creation do not count.
 * SAMPLE > 1 emulates about one block in SAMPLE of each large launch and scales its counters
 * (simt_profile_set_block_sampling: estimates of steps too large to emulate whole), except the
 * launches WHOLE names (comma-separated launch names: kernels whose addresses depend on data).
 *   usage: profile_step MODEL ROWS PROMPT OUT [SAMPLE [WHOLE]] */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

#include "llmmini.h"

typedef void (*reset_fn)(void);
typedef int (*write_fn)(const char *path);
typedef void (*sampling_fn)(unsigned stride, const char *whole_kernels);

int main(int argc, char **argv) {
    if (argc < 5 || argc > 7) return fprintf(stderr, "usage: profile_step MODEL ROWS PROMPT OUT [SAMPLE [WHOLE]]\n"), 2;
    const int rows = atoi(argv[2]), prompt = atoi(argv[3]), sample = argc >= 6 ? atoi(argv[5]) : 1;
    const char *module = getenv("LLMM_CUDA_MODULE");
    if (rows < 0 || rows > 64 || prompt < 0 || prompt > 4096 || (rows == 0) == (prompt == 0) || !module ||
        sample < 1)
        return fprintf(stderr, "profile_step: ROWS 1-64 or PROMPT 1-4096, SAMPLE 1 or more, and LLMM_CUDA_MODULE\n"), 2;
    llmm_model *model = NULL;
    llmm_context *ctx = NULL;
    llmm_status st = llmm_model_load(argv[1], NULL, &model);
    llmm_context_params cp;
    llmm_context_params_default(&cp, sizeof cp);
    cp.backend = LLMM_BACKEND_CUDA;
    cp.n_seq_max = rows ? (uint32_t)rows : 1;
    cp.n_ctx = (uint32_t)(prompt + 16);
    cp.n_batch = prompt ? (uint32_t)prompt : 8;
    if (st == LLMM_OK) st = llmm_context_create(model, &cp, &ctx);
    /* the module is loaded by now: its counters are reached by name */
    void *self = dlopen(module, RTLD_NOW | RTLD_NOLOAD);
    reset_fn reset = self ? (reset_fn)(size_t)dlsym(self, "simt_profile_reset") : NULL;
    write_fn write = self ? (write_fn)(size_t)dlsym(self, "simt_profile_write") : NULL;
    sampling_fn sampling = self ? (sampling_fn)(size_t)dlsym(self, "simt_profile_set_block_sampling") : NULL;
    if (st == LLMM_OK && (!reset || !write || !sampling)) {
        fprintf(stderr, "profile_step: %s is not the profiled module\n", module);
        st = LLMM_ERR_BACKEND;
    }
    if (st == LLMM_OK) {
        reset();
        sampling((unsigned)sample, argc == 7 ? argv[6] : NULL);
        llmm_token tokens[4096];
        llmm_seq_id seqs[64];
        for (int i = 0; i < 4096; i++) tokens[i] = (llmm_token)(1 + i % 97);
        for (int i = 0; i < 64; i++) seqs[i] = i;
        st = rows ? llmm_decode(ctx, seqs, tokens, (size_t)rows) : llmm_prefill(ctx, 0, tokens, (size_t)prompt, 0);
        if (st == LLMM_OK && write(argv[4]) != 0) st = LLMM_ERR_IO;
    }
    if (st != LLMM_OK)
        fprintf(stderr, "profile_step: %s: %s\n", llmm_status_str(st), ctx ? llmm_context_last_error(ctx) : argv[1]);
    if (self) dlclose(self);
    llmm_context_free(ctx);
    llmm_model_free(model);
    return st == LLMM_OK ? 0 : 1;
}
