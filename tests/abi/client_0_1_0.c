/* An application built against release 0.1.0's header (tests/abi/0.1.0/llmmini.h, compiled
 * without include/) and run against the current libllmmini.so: the binary compatibility
 * promise of docs/abi.md. Every size-prefixed struct is the 0.1.0 layout, placed in front of
 * a guard area that the library must leave untouched, so that a library writing fields the
 * caller's size does not cover fails here. Exits non-zero on the first broken promise.
 * Usage: client_0_1_0 [MODEL]; default $LLMM_SHARED/models/stories260K.gguf. */
#include <llmmini.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GUARD_BYTES 64
#define GUARD_FILL 0xA5
#define N_GENERATE 24

#define CHECK(cond)                                                                          \
    do {                                                                                     \
        if (!(cond)) {                                                                       \
            fprintf(stderr, "client_0_1_0: %s:%d: %s\n", __FILE__, __LINE__, #cond);         \
            exit(1);                                                                         \
        }                                                                                    \
    } while (0)
#define CHECK_OK(call) CHECK((call) == LLMM_OK)

/* A 0.1.0 struct followed by bytes a newer library might wrongly write. */
#define GUARDED(type)                                                                        \
    struct {                                                                                 \
        type value;                                                                          \
        unsigned char guard[GUARD_BYTES];                                                    \
    }

static void guard_fill(unsigned char *guard) { memset(guard, GUARD_FILL, GUARD_BYTES); }

/* A result struct as a 0.1.0 caller prepares it: zeroed, .size = its 0.1.0 size. */
#define PREPARE_RESULT(g)                                                                    \
    do {                                                                                     \
        memset(&(g).value, 0, sizeof(g).value);                                              \
        guard_fill((g).guard);                                                               \
        (g).value.size = sizeof(g).value;                                                    \
    } while (0)

static int guard_intact(const unsigned char *guard) {
    for (size_t i = 0; i < GUARD_BYTES; i++)
        if (guard[i] != GUARD_FILL) return 0;
    return 1;
}

static llmm_token argmax(const float *logits, size_t n) {
    size_t best = 0;
    for (size_t i = 1; i < n; i++)
        if (logits[i] > logits[best]) best = i;
    return (llmm_token)best;
}

static llmm_model *load_model(const char *path) {
    GUARDED(llmm_model_params) params;
    guard_fill(params.guard);
    CHECK_OK(llmm_model_params_default(&params.value, sizeof params.value));
    CHECK(guard_intact(params.guard));
    CHECK(params.value.size == sizeof params.value);
    char error[256] = "";
    params.value.error_buf = error;
    params.value.error_buf_size = sizeof error;
    llmm_model *model = NULL;
    if (llmm_model_load(path, &params.value, &model) != LLMM_OK) {
        fprintf(stderr, "client_0_1_0: cannot load %s: %s\n", path, error);
        exit(1);
    }
    CHECK(guard_intact(params.guard));

    GUARDED(llmm_model_info) info;
    PREPARE_RESULT(info);
    CHECK_OK(llmm_model_get_info(model, &info.value));
    CHECK(guard_intact(info.guard));
    CHECK(strcmp(info.value.architecture, "llama") == 0);
    CHECK(info.value.n_vocab > 0 && info.value.n_layer > 0 && info.value.n_embd > 0);
    return model;
}

static llmm_context *create_context(const llmm_model *model) {
    GUARDED(llmm_context_params) params;
    guard_fill(params.guard);
    CHECK_OK(llmm_context_params_default(&params.value, sizeof params.value));
    CHECK(guard_intact(params.guard));
    params.value.n_ctx = 128;
    params.value.n_seq_max = 2;
    params.value.n_threads = 1;
    params.value.backend = LLMM_BACKEND_CPU;
    size_t bytes = 0;
    CHECK_OK(llmm_context_estimate(model, &params.value, &bytes));
    CHECK(bytes > 0);
    llmm_context *ctx = NULL;
    CHECK_OK(llmm_context_create(model, &params.value, &ctx));
    CHECK(guard_intact(params.guard));
    return ctx;
}

/* Greedy continuation through llmm_generate with 0.1.0's params, sampling and stats structs. */
static size_t generate_greedy(llmm_context *ctx, const char *prompt, llmm_token *out) {
    GUARDED(llmm_sampler_params) sampling;
    guard_fill(sampling.guard);
    CHECK_OK(llmm_sampler_params_default(&sampling.value, sizeof sampling.value));
    sampling.value.temperature = 0.0f;
    GUARDED(llmm_generate_params) params;
    guard_fill(params.guard);
    CHECK_OK(llmm_generate_params_default(&params.value, sizeof params.value));
    CHECK(guard_intact(params.guard));
    params.value.seq = 1;
    params.value.max_tokens = N_GENERATE;
    params.value.sampling = &sampling.value;
    params.value.out_tokens = out;
    params.value.out_capacity = N_GENERATE;
    GUARDED(llmm_generate_stats) stats;
    PREPARE_RESULT(stats);
    CHECK_OK(llmm_generate(ctx, prompt, &params.value, &stats.value));
    CHECK(guard_intact(sampling.guard) && guard_intact(params.guard) && guard_intact(stats.guard));
    CHECK(stats.value.n_generated > 0 && stats.value.n_generated <= N_GENERATE);
    return stats.value.n_generated;
}

/* The same continuation token by token: prefill, decode, argmax of llmm_logits. */
static void check_manual_matches(llmm_context *ctx, const llmm_model *model, const char *prompt,
                                 const llmm_token *expected, size_t n_expected) {
    llmm_token prompt_ids[64];
    size_t n_prompt = 0;
    CHECK_OK(llmm_tokenize(model, prompt, strlen(prompt), LLMM_TOKENIZE_ADD_SPECIAL, prompt_ids,
                           sizeof prompt_ids / sizeof prompt_ids[0], &n_prompt));
    CHECK_OK(llmm_prefill(ctx, 0, prompt_ids, n_prompt, 0));
    for (size_t i = 0; i < n_expected; i++) {
        const float *logits = NULL;
        size_t n_vocab = 0;
        CHECK_OK(llmm_logits(ctx, 0, &logits, &n_vocab));
        llmm_token next = argmax(logits, n_vocab);
        CHECK(next == expected[i]);
        llmm_seq_id seq = 0;
        CHECK_OK(llmm_decode(ctx, &seq, &next, 1));
    }
}

static void check_stats(llmm_context *ctx) {
    GUARDED(llmm_context_stats) stats;
    PREPARE_RESULT(stats);
    CHECK_OK(llmm_context_get_stats(ctx, &stats.value));
    CHECK(guard_intact(stats.guard));
    CHECK(stats.value.tokens_decoded > 0 && stats.value.blocks_used > 0);
}

int main(int argc, char **argv) {
    char default_path[4096];
    const char *shared = getenv("LLMM_SHARED");
    snprintf(default_path, sizeof default_path, "%s/models/stories260K.gguf", shared ? shared : "../shared");
    const char *path = argc > 1 ? argv[1] : default_path;

    CHECK(llmm_abi_version() == LLMM_ABI_VERSION);
    llmm_model *model = load_model(path);
    llmm_context *ctx = create_context(model);
    const char *prompt = "Once upon a time";
    llmm_token generated[N_GENERATE];
    size_t n_generated = generate_greedy(ctx, prompt, generated);
    check_manual_matches(ctx, model, prompt, generated, n_generated);
    check_stats(ctx);
    CHECK(strcmp(llmm_status_str(LLMM_ERR_INVALID_ARG), llmm_status_str(LLMM_OK)) != 0);
    CHECK(llmm_context_params_default(NULL, 0) == LLMM_ERR_INVALID_ARG);
    llmm_context_free(ctx);
    llmm_model_free(model);
    printf("client_0_1_0: library %s (ABI %u) runs a 0.1.0 client: %zu greedy tokens agree\n",
           llmm_version(), (unsigned)llmm_abi_version(), n_generated);
    return 0;
}
