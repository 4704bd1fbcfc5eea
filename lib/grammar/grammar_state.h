/* The public grammar handles' insides, shared by the lifecycle and accepting code (grammar.c)
 * and the masking code (grammar_mask.c). */
#ifndef LLMM_GRAMMAR_STATE_H
#define LLMM_GRAMMAR_STATE_H

#include <pthread.h>

#include "grammar_rules.h"
#include "grammar_match.h"
#include "token_trie.h"

/* Masks of states already walked, keyed by the state (llmm__glevel_key). States repeat: every
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
    const llmm_model *model; /* whose vocabulary trie holds, or NULL */
    size_t mask_words;       /* 32-bit words of a vocabulary mask */
    llmm_allocator alloc_copy;
    const llmm_allocator *alloc; /* &alloc_copy or NULL */
    mask_cache *cache;       /* NULL without a vocabulary */
};

/* The walk's memo of transitions: every distinct set of stacks met while walking the token
 * table gets an id; trans[id * 256 + byte] is the id after that byte (WALK_UNKNOWN until
 * computed, WALK_DEAD when refused). Inside a JSON string nearly every token continues, but the
 * walk meets only a few hundred distinct states (the string state and partial UTF-8
 * characters), so most bytes of the table cost one array read. */
typedef struct walk_memo {
    glevel *rep;       /* (cap) the stacks of each id, kept in the state's pool during the walk */
    uint64_t *hash;    /* (cap) */
    size_t *key_first; /* (cap + 1) id's key is keys[key_first[id] .. key_first[id + 1]) */
    size_t n, cap;
    int32_t *trans;    /* (cap * 256) */
    uint32_t *keys;
    size_t keys_len, keys_cap;
    uint32_t *slots;   /* (n_slots) open addressing on hash: id + 1, 0 = empty */
    size_t n_slots;
} walk_memo;

struct llmm_grammar_state {
    const llmm_grammar *grammar;
    gstacks stacks; /* holds exactly `now` between calls */
    glevel now;
    glevel *levels; /* (trie.max_len + 1) the walk's level per byte of the token */
    uint32_t *bits; /* (mask_words) the last mask */
    float *masked;  /* (masked_cap) llmm_grammar_sample's masked copy of the logits */
    llmm_token *masked_ids; /* (masked_cap) the token of each entry when the copy is compacted */
    size_t masked_cap;
    uint32_t *key;  /* the state's cache key */
    size_t key_len, key_cap;
    walk_memo memo;
    double spent_ms; /* wall time of accept_token and of llmm_grammar_sample beyond its first draw */
    llmm_diag error;
};

/* Whether g masks the tokens of model's vocabulary. */
int llmm__grammar_serves_model(const llmm_grammar *g, const llmm_model *model);

#endif
