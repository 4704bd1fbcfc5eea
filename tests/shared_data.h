/* Test helpers: locating ../shared (or $LLMM_SHARED) and reading whole files. */
#ifndef LLMM_TEST_SHARED_DATA_H
#define LLMM_TEST_SHARED_DATA_H

#include <stddef.h>

/* Path of rel inside the shared data folder, in a static-free caller buffer. */
const char *shared_path(char *buf, size_t size, const char *rel);
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

int vocab_cases_load(const char *inp_path, const char *out_path, vocab_cases *vc);
void vocab_cases_free(vocab_cases *vc);

#endif
