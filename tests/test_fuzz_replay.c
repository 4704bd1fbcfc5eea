/* The fuzz harnesses (tests/fuzz/) replayed on fixed inputs in every `make test`: the reference
 * files and test inputs they are seeded with, their committed corpora (tests/fuzz/corpus/NAME/),
 * truncations and bit flips of them, and the inputs that once found bugs. This keeps the
 * harnesses building and their invariants holding in CI, which has no clang to run libFuzzer;
 * `make fuzz` does the searching. Each harness is compiled with its entry points renamed
 * (Makefile) so that all link here; a harness aborts on a broken invariant, which fails this
 * suite. */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <math.h>

#include <cmocka.h>

#include "format/gguf.h"
#include "support/numerical_check.h"
#include "support/fixtures.h"
#include "format/quant.h"
#include "support/shared_data.h"

int fuzz_gguf_input(const uint8_t *data, size_t size);
int fuzz_tokenize_init(int *argc, char ***argv);
int fuzz_tokenize_input(const uint8_t *data, size_t size);
int fuzz_chat_parse_init(int *argc, char ***argv);
int fuzz_chat_parse_input(const uint8_t *data, size_t size);
int fuzz_grammar_init(int *argc, char ***argv);
int fuzz_grammar_input(const uint8_t *data, size_t size);
int fuzz_json_schema_input(const uint8_t *data, size_t size);
int fuzz_saved_state_init(int *argc, char ***argv);
int fuzz_saved_state_input(const uint8_t *data, size_t size);
int fuzz_adapter_init(int *argc, char ***argv);
int fuzz_adapter_input(const uint8_t *data, size_t size);
int fuzz_chat_init(int *argc, char ***argv);
int fuzz_chat_input(const uint8_t *data, size_t size);

typedef int (*fuzz_input_fn)(const uint8_t *data, size_t size);

/* The input whole, then cut at a few lengths and with a byte flipped at a few places: the
 * damage a harness's checks must survive, on every run. */
static void replay_damaged(fuzz_input_fn input, const uint8_t *data, size_t n) {
    input(data, n);
    const size_t cuts[] = {n - n / 5, n / 2, 97, 33, 16, 1};
    for (size_t k = 0; k < ARRAY_LEN(cuts); k++)
        if (cuts[k] < n) input(data, cuts[k]);
    uint8_t *copy = malloc(n + 1);
    assert_non_null(copy);
    for (size_t at = 8; at < n; at = at * 3 + 1) {
        memcpy(copy, data, n);
        copy[at] ^= 0x5a;
        input(copy, n);
    }
    free(copy);
}

/* Every file of a harness's committed corpus (tests/fuzz/corpus/NAME/), whole, and damaged too
 * where the harness is fast enough for it (the grammar corpora hold grammars that spend the
 * matcher's step limit on every byte). Returns the number of files. */
static size_t replay_corpus(const char *name, fuzz_input_fn input, int damaged) {
    char dir[256];
    snprintf(dir, sizeof dir, "tests/fuzz/corpus/%s", name);
    DIR *d = opendir(dir);
    if (!d) fail_msg("cannot open %s (run from the repository root)", dir);
    size_t files = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        if (e->d_name[0] == '.') continue;
        char path[512];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        size_t n = 0;
        uint8_t *data = (uint8_t *)read_whole_file(path, &n);
        if (!data) fail_msg("cannot read %s", path);
        if (damaged) replay_damaged(input, data, n);
        else input(data, n);
        free(data);
        files++;
    }
    closedir(d);
    assert_true(files > 0);
    return files;
}

static void test_gguf_harness_on_reference_files(void **state) {
    (void)state;
    static const char *const files[] = {"models/stories260K.gguf", "models/stories260K-q4_0.gguf",
                                        "models/stories260K-q8_0.gguf", "models/llama-2-tiny-random.gguf",
                                        "vocab/ggml-vocab-llama-spm.gguf"};
    for (size_t i = 0; i < ARRAY_LEN(files); i++) {
        char path[1024];
        size_t n = 0;
        uint8_t *data = (uint8_t *)read_whole_file(shared_path(path, sizeof path, files[i]), &n);
        if (!data) fail_msg("cannot read %s", path);
        /* whole, then cut inside the tensor data and inside the metadata */
        const size_t lengths[] = {n, n - n / 7, n / 3, 200, 24};
        for (size_t k = 0; k < ARRAY_LEN(lengths); k++) fuzz_gguf_input(data, lengths[k] < n ? lengths[k] : n);
        free(data);
    }
    replay_corpus("gguf", fuzz_gguf_input, 1);
}

/* A model with some final norm weights NaN, so some operands of the output matmul are. The AVX2
 * and AVX-512 quantizers once gave such blocks a sum near INT_MIN, and the int8 kernels'
 * 16 x or 128 x sum overflowed (reported by `make test SANITIZE=address,undefined`). */
static void test_gguf_harness_on_nan_activations(void **state) {
    (void)state;
    static const char *const files[] = {"models/stories260K-q4_0.gguf", "models/stories260K-q8_0.gguf"};
    for (size_t i = 0; i < ARRAY_LEN(files); i++) {
        /* one NaN per 32 values, so that the other values of each block keep the scale finite */
        size_t n = 0;
        uint8_t *data = read_model_with_bad_norm(files[i], NAN, 32, &n);
        fuzz_gguf_input(data, n);
        free(data);
    }
}

/* The shared file rel behind two bytes the caller sets (the harnesses' selector bytes). */
static uint8_t *file_behind_two_bytes(const char *rel, size_t *size) {
    char path[1024];
    size_t n = 0;
    char *text = read_whole_file(shared_path(path, sizeof path, rel), &n);
    if (!text) fail_msg("cannot read %s", path);
    uint8_t *input = malloc(n + 2);
    assert_non_null(input);
    memcpy(input + 2, text, n);
    free(text);
    *size = n + 2;
    return input;
}

static void test_tokenize_harness_on_test_inputs(void **state) {
    (void)state;
    fuzz_tokenize_init(NULL, NULL);
    /* tests/fuzz/tokenize.c's vocabulary order */
    static const char *const vocabs[] = {"llama-spm", "llama-bpe", "qwen2", "gpt-2", "falcon", "deepseek-llm",
                                         "starcoder"};
    for (size_t v = 0; v < ARRAY_LEN(vocabs); v++) {
        char rel[128];
        snprintf(rel, sizeof rel, "vocab/ggml-vocab-%s.gguf.inp", vocabs[v]);
        size_t size = 0;
        uint8_t *input = file_behind_two_bytes(rel, &size);
        /* every flag combination, a different chat format each */
        for (unsigned flags = 0; flags < 4; flags++) {
            input[0] = (uint8_t)v;
            input[1] = (uint8_t)(flags | (v * 4 + flags) << 2);
            fuzz_tokenize_input(input, size);
        }
        free(input);
    }
    /* found by make fuzz: a size query over pieces that render empty (NULL + 0) */
    static const uint8_t detokenize_null_buffer[] = {0x00, 0x56, 0xb4, 0x5f, 0x1f, 0x67, 0x02, 0x67};
    fuzz_tokenize_input(detokenize_null_buffer, sizeof detokenize_null_buffer);
    assert_true(replay_corpus("tokenize", fuzz_tokenize_input, 1) >= 8);
}

static void test_saved_state_harness_on_corpus(void **state) {
    (void)state;
    fuzz_saved_state_init(NULL, NULL);
    replay_corpus("saved_state", fuzz_saved_state_input, 1);
}

static void test_adapter_harness_on_corpus_and_shared_adapters(void **state) {
    (void)state;
    fuzz_adapter_init(NULL, NULL);
    replay_corpus("adapter", fuzz_adapter_input, 1);
    static const char *const files[] = {"lora/stories260K-lora-r8.gguf", "lora/stories260K-lora-r4-attn-f16.gguf"};
    for (size_t i = 0; i < ARRAY_LEN(files); i++) {
        char path[1024];
        size_t n = 0;
        uint8_t *data = (uint8_t *)read_whole_file(shared_path(path, sizeof path, files[i]), &n);
        if (!data) fail_msg("cannot read %s", path);
        replay_damaged(fuzz_adapter_input, data, n);
        free(data);
    }
}

/* The fused-layout seed must stay an adapter tiny-phi3 loads (and stories260K refuses), or the
 * harness's fused path would go unreplayed and unseeded without anyone noticing. */
static void test_adapter_harness_seed_fits_the_fused_model(void **state) {
    (void)state;
    size_t n = 0;
    char *data = read_whole_file("tests/fuzz/corpus/adapter/phi3-fused-qkv-gate-up-rank2.gguf", &n);
    if (!data) fail_msg("cannot read the phi3 adapter seed (run from the repository root)");
    llmm_model *phi3 = load_model("golden/arch/tiny-phi3.gguf", NULL), *stories = load_model("stories260K.gguf", NULL);
    llmm_adapter *a = NULL;
    assert_int_equal(llmm_adapter_load_memory(phi3, data, n, &a), LLMM_OK);
    llmm_adapter_info info = {.size = sizeof info};
    assert_int_equal(llmm_adapter_get_info(a, &info), LLMM_OK);
    assert_int_equal(info.n_tensors, 2);
    assert_int_equal(info.rank, 2);
    llmm_adapter_free(a);
    a = NULL;
    assert_int_equal(llmm_adapter_load_memory(stories, data, n, &a), LLMM_ERR_BAD_FILE);
    assert_null(a);
    fuzz_adapter_init(NULL, NULL);
    replay_damaged(fuzz_adapter_input, (const uint8_t *)data, n);
    llmm_model_free(phi3);
    llmm_model_free(stories);
    free(data);
}

static void test_chat_harness_on_corpus(void **state) {
    (void)state;
    fuzz_chat_init(NULL, NULL);
    replay_corpus("chat", fuzz_chat_input, 1);
}

/* Every reference parse file's raw output, for every family and split, thinking or not; then the
 * committed corpus. */
static void test_chat_parse_harness_on_reference_outputs(void **state) {
    (void)state;
    fuzz_chat_parse_init(NULL, NULL);
    static const char *const files[] = {"qwen2_5.4", "qwen3.4", "qwen3.5", "hermes3.3", "granite4.5", "llama3_1.4",
                                        "llama3_2.5", "mistral_nemo.3", "mistral_nemo.5", "smollm3.2", "qwen3_5.2",
                                        "gemma4.2", "lfm2_5.2"};
    for (size_t f = 0; f < ARRAY_LEN(files); f++) {
        char rel[128];
        snprintf(rel, sizeof rel, "chat/parse/%s.json", files[f]);
        size_t size = 0;
        uint8_t *input = file_behind_two_bytes(rel, &size); /* the whole JSON file as output */
        for (unsigned pick = 0; pick < 32; pick++) {
            input[0] = (uint8_t)pick;
            input[1] = (uint8_t)(pick * 5);
            fuzz_chat_parse_input(input, size);
        }
        free(input);
    }
    assert_true(replay_corpus("chat_parse", fuzz_chat_parse_input, 1) >= 7);
}

static void test_grammar_harness_on_corpus(void **state) {
    (void)state;
    fuzz_grammar_init(NULL, NULL);
    assert_true(replay_corpus("grammar", fuzz_grammar_input, 0) >= 20);
}

static void test_json_schema_harness_on_corpus(void **state) {
    (void)state;
    assert_true(replay_corpus("json_schema", fuzz_json_schema_input, 0) >= 12);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gguf_harness_on_reference_files),
        cmocka_unit_test(test_gguf_harness_on_nan_activations),
        cmocka_unit_test(test_tokenize_harness_on_test_inputs),
        cmocka_unit_test(test_saved_state_harness_on_corpus),
        cmocka_unit_test(test_adapter_harness_on_corpus_and_shared_adapters),
        cmocka_unit_test(test_adapter_harness_seed_fits_the_fused_model),
        cmocka_unit_test(test_chat_harness_on_corpus),
        cmocka_unit_test(test_chat_parse_harness_on_reference_outputs),
        cmocka_unit_test(test_grammar_harness_on_corpus),
        cmocka_unit_test(test_json_schema_harness_on_corpus),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
