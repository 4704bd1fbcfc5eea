/* The vocabulary's token bytes laid out for walking against a grammar: the tokens sorted by
 * their bytes, each with the length of the prefix it shares with the one before. That is a
 * byte trie flattened in depth-first order: a walk keeps the grammar state of every prefix of
 * the current token, reuses the shared prefix for the next one, and when a prefix is refused
 * skips every following token that starts with it. */
#ifndef LLMM_TOKEN_TRIE_H
#define LLMM_TOKEN_TRIE_H

#include <stdint.h>

#include "base/common.h"

typedef struct token_trie {
    uint32_t n_vocab;
    uint32_t n;           /* tokens with non-empty bytes */
    llmm_token *ids;      /* (n) in byte order */
    uint32_t *start;      /* (n) token k's bytes are bytes[start[k] .. start[k] + length[k]) */
    uint32_t *length;     /* (n) */
    uint32_t *shared;     /* (n) bytes token k shares with token k - 1 (0 for k = 0) */
    uint32_t *rank;       /* (n_vocab) position of a token id in the order, UINT32_MAX when empty */
    char *bytes;
    uint32_t max_len;     /* longest token, in bytes */
    llmm_token *eos;      /* (n_eos) tokens that end generation */
    uint32_t n_eos;
} token_trie;

/* The bytes every token of model's vocabulary streams as (llmm_token_to_piece without flags:
 * control tokens have none). Errors: NO_MEMORY, INVALID_ARG (a vocabulary above 2^31 tokens). */
llmm_status llmm__token_trie_build(token_trie *t, const llmm_model *model, const llmm_allocator *alloc, llmm_diag *d);
void llmm__token_trie_free(token_trie *t, const llmm_allocator *alloc);

/* Whether token is one of the trie's end-of-generation tokens. */
static inline int llmm__token_trie_is_eos(const token_trie *t, llmm_token token) {
    for (uint32_t i = 0; i < t->n_eos; i++)
        if (t->eos[i] == token) return 1;
    return 0;
}

#endif
