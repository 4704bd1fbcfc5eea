/* Test helpers: locating ../shared (or $LLMM_SHARED) and reading whole files. */
#ifndef LLMM_TEST_SHARED_DATA_H
#define LLMM_TEST_SHARED_DATA_H

#include <stddef.h>
#include <stdint.h>

/* Path of rel inside the shared data folder, in a static-free caller buffer. */
const char *shared_path(char *buf, size_t size, const char *rel);
/* 1 when the tests run under an emulator ($TEST_RUNNER set, as make test-arm sets it to
 * qemu-aarch64): suites whose model work is slow there run fewer of their repetitions. */
int under_emulator(void);
/* Whole file into a malloc'd, NUL-terminated buffer; NULL if unreadable. */
char *read_whole_file(const char *path, size_t *len);

/* The reference tokenizer's test vectors: inputs split on "\n__ggml_vocab_test__\n". */
typedef struct vocab_cases {
    size_t n;
    char **text;
    size_t *text_len;
    char **expected; /* one line of space-separated ids per case */
    char *inp_buf, *out_buf;
} vocab_cases;

/* The reference engine's output for one case (golden/README.md): NAME.ids, NAME.logits and,
 * from NAME.json, the continuation when .ids lacks it and reliable_steps when present. */
#define GOLDEN_MAX_IDS 256
typedef struct golden_run {
    int32_t prompt[GOLDEN_MAX_IDS], generated[GOLDEN_MAX_IDS];
    size_t n_prompt, n_generated;
    float *logits;
    size_t n_logits;
    long reliable_steps; /* -1 when the file does not say */
} golden_run;

int golden_load(const char *dir_rel, const char *name, golden_run *g);
void golden_free(golden_run *g);

int vocab_cases_load(const char *inp_path, const char *out_path, vocab_cases *vc);
void vocab_cases_free(vocab_cases *vc);
/* 1 when ids[0..n) are exactly case i's expected ids. */
int vocab_case_matches(const vocab_cases *vc, size_t i, const int32_t *ids, size_t n);

#endif
