/* Which tokens may come next, and sampling under that constraint. The cost is kept small by
 * design: the sampled token is checked first (one walk of its bytes) and the full mask is made
 * only when it is refused; a full mask walks the sorted token table (token_trie.h) once,
 * sharing the work of common prefixes and skipping every token under a refused prefix; and
 * masks are cached per state, since states repeat. */
#include <math.h>
#include <string.h>

#include "grammar_state.h"
#include "sampler.h"

#define MASK_CACHE_SLOTS 128 /* 128 masks of a 150k vocabulary: 2.4 MiB */

/* ---------------------------------------------------------------- cache */

llmm_status mask_cache_create(mask_cache **out, const llmm_allocator *alloc) {
    mask_cache *c = mem_calloc(alloc, 1, sizeof *c);
    if (!c) return LLMM_ERR_NO_MEMORY;
    c->entries = mem_calloc(alloc, MASK_CACHE_SLOTS, sizeof *c->entries);
    if (!c->entries || pthread_mutex_init(&c->lock, NULL)) {
        mem_free(alloc, c->entries);
        mem_free(alloc, c);
        return LLMM_ERR_NO_MEMORY;
    }
    *out = c;
    return LLMM_OK;
}

void mask_cache_free(mask_cache *c, const llmm_allocator *alloc) {
    for (size_t i = 0; i < MASK_CACHE_SLOTS; i++) {
        mem_free(alloc, c->entries[i].key);
        mem_free(alloc, c->entries[i].bits);
    }
    pthread_mutex_destroy(&c->lock);
    mem_free(alloc, c->entries);
    mem_free(alloc, c);
}

static uint64_t hash_key(const uint32_t *key, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a over the words */
    for (size_t i = 0; i < n; i++) h = (h ^ key[i]) * 0x100000001b3ull;
    return h;
}

static int cache_lookup(mask_cache *c, const uint32_t *key, size_t n, uint64_t hash, uint32_t *bits, size_t words) {
    int found = 0;
    pthread_mutex_lock(&c->lock);
    for (size_t i = 0; i < c->n_used && !found; i++) {
        const mask_entry *e = &c->entries[i];
        if (e->hash == hash && e->key_len == n && !memcmp(e->key, key, n * sizeof *key)) {
            memcpy(bits, e->bits, words * sizeof *bits);
            found = 1;
        }
    }
    pthread_mutex_unlock(&c->lock);
    return found;
}

/* Keep a copy of the mask; when memory is short the mask is simply not kept. */
static void cache_insert(mask_cache *c, const llmm_allocator *alloc, const uint32_t *key, size_t n, uint64_t hash,
                         const uint32_t *bits, size_t words) {
    uint32_t *k = mem_alloc(alloc, n * sizeof *k), *b = mem_alloc(alloc, words * sizeof *b);
    if (!k || !b) {
        mem_free(alloc, k);
        mem_free(alloc, b);
        return;
    }
    memcpy(k, key, n * sizeof *k);
    memcpy(b, bits, words * sizeof *b);
    pthread_mutex_lock(&c->lock);
    size_t slot = c->n_used < MASK_CACHE_SLOTS ? c->n_used++ : c->next_victim++ % MASK_CACHE_SLOTS;
    mask_entry *e = &c->entries[slot];
    uint32_t *old_key = e->key, *old_bits = e->bits;
    *e = (mask_entry){k, n, hash, b};
    pthread_mutex_unlock(&c->lock);
    mem_free(alloc, old_key);
    mem_free(alloc, old_bits);
}

/* ---------------------------------------------------------------- the walk */

/* Every token with bytes, in byte order: levels[d] is the state after the current token's first
 * d bytes, valid for d <= depth; a token reuses the levels of the prefix it shares with the one
 * before. */
static void walk_tokens(llmm_grammar_state *s) {
    const token_trie *t = &s->grammar->trie;
    gstacks *gs = &s->stacks;
    glevel *lv = s->levels;
    lv[0] = s->now;
    uint32_t depth = 0;
    for (uint32_t k = 0; k < t->n && !gs->failed;) {
        uint32_t d = LLMM_MIN(t->shared[k], depth), len = t->length[k];
        const uint8_t *b = (const uint8_t *)t->bytes + t->start[k];
        gstacks_truncate(gs, &lv[d]);
        while (d < len) {
            gstacks_advance_byte(gs, &lv[d], b[d], &lv[d + 1]);
            if (lv[d + 1].n == 0) break;
            d++;
        }
        if (d == len) {
            s->bits[t->ids[k] >> 5] |= 1u << (t->ids[k] & 31);
            depth = len;
            k++;
            continue;
        }
        /* the first d + 1 bytes are refused: so is every following token that starts with them */
        depth = d;
        for (k++; k < t->n && t->shared[k] > d; k++) {
        }
    }
    gstacks_truncate(gs, &s->now);
}

llmm_status grammar_state_fill_mask(llmm_grammar_state *s) {
    const llmm_grammar *g = s->grammar;
    s->key_len = 0;
    if (!glevel_key(&s->stacks, &s->now, &s->key, &s->key_len, &s->key_cap))
        return diag_fail(&s->error, LLMM_ERR_NO_MEMORY, "out of memory for a grammar mask");
    uint64_t hash = hash_key(s->key, s->key_len);
    if (cache_lookup(g->cache, s->key, s->key_len, hash, s->bits, g->mask_words)) return LLMM_OK;
    memset(s->bits, 0, g->mask_words * sizeof *s->bits);
    walk_tokens(s);
    if (s->stacks.failed) {
        s->stacks.failed = 0;
        return diag_fail(&s->error, LLMM_ERR_NO_MEMORY, "out of memory for a grammar mask");
    }
    if (glevel_can_end(&s->stacks, &s->now))
        for (uint32_t i = 0; i < g->trie.n_eos; i++) s->bits[g->trie.eos[i] >> 5] |= 1u << (g->trie.eos[i] & 31);
    cache_insert(g->cache, g->alloc, s->key, s->key_len, hash, s->bits, g->mask_words);
    return LLMM_OK;
}

/* ---------------------------------------------------------------- public calls */

static llmm_status check_vocab(llmm_grammar_state *s, size_t n_vocab, const char *call) {
    if (!s->grammar->has_vocab)
        return diag_fail(&s->error, LLMM_ERR_INVALID_ARG, "%s: the grammar was compiled without a model", call);
    if (n_vocab < s->grammar->trie.n_vocab || n_vocab > (size_t)INT32_MAX)
        return diag_fail(&s->error, LLMM_ERR_INVALID_ARG, "%s: n_vocab %zu is not the vocabulary's %u", call, n_vocab,
                         s->grammar->trie.n_vocab);
    return LLMM_OK;
}

/* Copy (or, when src == dst, edit) logits with the tokens outside s->bits at -inf; returns how
 * many are allowed. Ids beyond the vocabulary (padded output rows) are never allowed. */
static size_t apply_mask(const llmm_grammar_state *s, const float *src, float *dst, size_t n_vocab) {
    size_t allowed = 0, n_tokens = s->grammar->trie.n_vocab;
    for (size_t i = 0; i < n_vocab; i++) {
        int ok = i < n_tokens && ((s->bits[i >> 5] >> (i & 31)) & 1u);
        allowed += (size_t)ok;
        dst[i] = ok ? src[i] : -INFINITY;
    }
    return allowed;
}

LLMM_API llmm_status llmm_grammar_state_mask(llmm_grammar_state *state, float *logits, size_t n_vocab) {
    if (!state || !logits) return LLMM_ERR_INVALID_ARG;
    llmm_status st = check_vocab(state, n_vocab, "llmm_grammar_state_mask");
    if (!st) st = grammar_state_fill_mask(state);
    if (!st) apply_mask(state, logits, logits, n_vocab);
    return st;
}

LLMM_API llmm_status llmm_grammar_sample(llmm_sampler *sampler, llmm_grammar_state *state, const float *logits,
                                         size_t n_vocab, llmm_token *out) {
    if (!sampler || !state || !logits || !out) return LLMM_ERR_INVALID_ARG;
    llmm_status st = check_vocab(state, n_vocab, "llmm_grammar_sample");
    if (st) return st;
    llmm_token first;
    if ((st = llmm_sample(sampler, logits, n_vocab, &first))) return st;
    int ok = (size_t)first < state->grammar->trie.n_vocab ? grammar_state_allows(state, first) : 0;
    if (ok < 0) return diag_fail(&state->error, LLMM_ERR_NO_MEMORY, "out of memory checking a token");
    if (ok) {
        *out = first;
        return LLMM_OK;
    }
    if ((st = grammar_state_fill_mask(state))) return st;
    if (n_vocab > state->masked_cap) {
        float *grown = mem_grow(state->grammar->alloc, state->masked, 0, n_vocab * sizeof *grown);
        if (!grown) return diag_fail(&state->error, LLMM_ERR_NO_MEMORY, "out of memory for the masked logits");
        state->masked = grown;
        state->masked_cap = n_vocab;
    }
    if (apply_mask(state, logits, state->masked, n_vocab) == 0)
        return diag_fail(&state->error, LLMM_ERR_NOT_FOUND, "no token of the vocabulary may continue the grammar here");
    return llmm_sample(sampler, state->masked, n_vocab, out);
}
