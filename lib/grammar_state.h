/* The public grammar handles' insides, shared by the lifecycle and accepting code (grammar.c)
 * and the masking code (grammar_mask.c). */
#ifndef LLMM_GRAMMAR_STATE_H
#define LLMM_GRAMMAR_STATE_H

#include <pthread.h>

#include "grammar.h"
#include "grammar_match.h"
#include "token_trie.h"

/* Masks of states already walked, keyed by the state (glevel_key). States repeat: every
 * position inside a JSON string at the same depth is one state. Shared by all the states of a
 * grammar, so it is locked. */
typedef struct mask_entry {
    uint32_t *key;
    size_t key_len;
    uint64_t hash;
    uint32_t *bits; /* (mask_words) bit id set: token id allowed */
} mask_entry;

typedef struct mask_cache {
    pthread_mutex_t lock;
    mask_entry *entries; /* (MASK_CACHE_SLOTS) */
    size_t n_used, next_victim;
} mask_cache;

struct llmm_grammar {
    grammar_rules rules;
    token_trie trie;
    int has_vocab;
    size_t mask_words;       /* 32-bit words of a vocabulary mask */
    llmm_allocator alloc_copy;
    const llmm_allocator *alloc; /* &alloc_copy or NULL */
    mask_cache *cache;       /* NULL without a vocabulary */
};

struct llmm_grammar_state {
    const llmm_grammar *grammar;
    gstacks stacks; /* holds exactly `now` between calls */
    glevel now;
    glevel *levels; /* (trie.max_len + 1) the walk's level per byte of the token */
    uint32_t *bits; /* (mask_words) the last mask */
    float *masked;  /* (masked_cap) llmm_grammar_sample's masked copy of the logits */
    size_t masked_cap;
    uint32_t *key;  /* the state's cache key */
    size_t key_len, key_cap;
    llmm_diag error;
};

/* Whether the state may take token next (no bounds check on token). -1 when out of memory. */
int grammar_state_allows(llmm_grammar_state *s, llmm_token token);
/* The mask of the tokens allowed next into s->bits. Errors: NO_MEMORY. */
llmm_status grammar_state_fill_mask(llmm_grammar_state *s);

llmm_status mask_cache_create(mask_cache **out, const llmm_allocator *alloc);
void mask_cache_free(mask_cache *c, const llmm_allocator *alloc);

#endif
