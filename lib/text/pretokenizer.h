/* BPE pre-tokenization: split text into words before merges, the way the reference engine's
 * pre-tokenizer family (tokenizer.ggml.pre) does. A family is data: a list of regexes applied
 * in sequence, each splitting every piece the previous one left into its matches and the gaps
 * between them. The regexes are compiled at load by a small backtracking matcher (the subset
 * the families use: classes with \p{..} categories, groups, lookahead, greedy quantifiers). */
#ifndef LLMM_PRETOKENIZER_H
#define LLMM_PRETOKENIZER_H

#include "base/common.h"

typedef struct pretok_family {
    const char *const *names;   /* tokenizer.ggml.pre values, NULL-terminated */
    const char *const *regexes; /* applied in order, NULL-terminated */
    int add_bos;                /* the reference's add_bos when the file does not say */
    int ignore_merges;          /* a word that is itself a token skips the merges */
} pretok_family;

/* The family of a tokenizer.ggml.pre value; NULL when unknown. */
const pretok_family *llmm__pretok_family_find(const char *name, size_t len);
/* The family used when a file has no tokenizer.ggml.pre ("default"). */
const pretok_family *llmm__pretok_family_default(void);
/* The known tokenizer.ggml.pre values, comma-separated into buf, for error messages. */
void llmm__pretok_family_list(char *buf, size_t cap);

struct re_prog;

/* A family's compiled regexes; read-only after llmm__pretok_compile, shared by threads. */
typedef struct pretokenizer {
    struct re_prog *progs;
    size_t n_progs;
} pretokenizer;

llmm_status llmm__pretok_compile(pretokenizer *pt, const pretok_family *fam, const llmm_allocator *alloc, llmm_diag *d);
void llmm__pretok_free(pretokenizer *pt, const llmm_allocator *alloc);

/* Receives each word (a non-empty byte range of the text) in order. */
typedef llmm_status (*pretok_word_fn)(void *user, const char *word, size_t len);

/* Split len bytes of text (any bytes: invalid UTF-8 is split as U+FFFD would be, but the words
 * keep the original bytes) and hand every word to fn. Allocates per call through alloc. */
llmm_status llmm__pretok_split(const pretokenizer *pt, const char *text, size_t len, const llmm_allocator *alloc,
                         pretok_word_fn fn, void *user);

#endif
