/* Which tokens may come next, and sampling under that constraint. The cost is kept small by
 * design: the sampled token is checked first (one walk of its bytes) and the full mask is made
 * only when it is refused; a full mask walks the sorted token table (token_trie.h) once,
 * sharing the work of common prefixes and skipping every token under a refused prefix; and
 * masks are cached per state, since states repeat. */
#include <math.h>
#include <string.h>

#include "grammar_mask.h"
#include "sampling/sampler.h"

#define MASK_CACHE_SLOTS 128 /* 128 masks of a 150k vocabulary: 2.4 MiB */

/* ---------------------------------------------------------------- cache */

llmm_status llmm__mask_cache_create(mask_cache **out, const llmm_allocator *alloc) {
    mask_cache *c = llmm__mem_calloc(alloc, 1, sizeof *c);
    if (!c) return LLMM_ERR_NO_MEMORY;
    c->entries = llmm__mem_calloc(alloc, MASK_CACHE_SLOTS, sizeof *c->entries);
    if (!c->entries || pthread_mutex_init(&c->lock, NULL)) {
        llmm__mem_free(alloc, c->entries);
        llmm__mem_free(alloc, c);
        return LLMM_ERR_NO_MEMORY;
    }
    *out = c;
    return LLMM_OK;
}

void llmm__mask_cache_free(mask_cache *c, const llmm_allocator *alloc) {
    for (size_t i = 0; i < MASK_CACHE_SLOTS; i++) {
        llmm__mem_free(alloc, c->entries[i].key);
        llmm__mem_free(alloc, c->entries[i].bits);
    }
    pthread_mutex_destroy(&c->lock);
    llmm__mem_free(alloc, c->entries);
    llmm__mem_free(alloc, c);
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
    uint32_t *k = llmm__mem_alloc(alloc, n * sizeof *k), *b = llmm__mem_alloc(alloc, words * sizeof *b);
    if (!k || !b) {
        llmm__mem_free(alloc, k);
        llmm__mem_free(alloc, b);
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
    llmm__mem_free(alloc, old_key);
    llmm__mem_free(alloc, old_bits);
}

/* ---------------------------------------------------------------- the walk */

#define WALK_UNKNOWN (-2)
#define WALK_DEAD (-1)
#define WALK_ERROR (-3)   /* out of memory, or more states than WALK_STATES_MAX */
#define WALK_STATES_MAX 16384 /* 16 MiB of transitions; beyond it the plain walk is used */
#define WALK_NODES_MAX (1u << 21) /* the memo's states stay in the pool: 2M nodes (32 MiB), then the plain walk */

void llmm__walk_memo_free(walk_memo *m, const llmm_allocator *alloc) {
    llmm__mem_free(alloc, m->rep);
    llmm__mem_free(alloc, m->hash);
    llmm__mem_free(alloc, m->key_first);
    llmm__mem_free(alloc, m->trans);
    llmm__mem_free(alloc, m->keys);
    llmm__mem_free(alloc, m->slots);
    memset(m, 0, sizeof *m);
}

static int memo_reserve(walk_memo *m, const llmm_allocator *a) {
    if (m->n < m->cap) return 1;
    size_t cap = m->cap ? 2 * m->cap : 256;
    if (cap > WALK_STATES_MAX) return 0;
    glevel *rep = llmm__mem_grow(a, m->rep, m->cap * sizeof *rep, cap * sizeof *rep);
    if (rep) m->rep = rep;
    uint64_t *hash = rep ? llmm__mem_grow(a, m->hash, m->cap * sizeof *hash, cap * sizeof *hash) : NULL;
    if (hash) m->hash = hash;
    size_t *first = hash ? llmm__mem_grow(a, m->key_first, (m->cap + 1) * sizeof *first, (cap + 1) * sizeof *first) : NULL;
    if (first) m->key_first = first;
    int32_t *trans = first ? llmm__mem_grow(a, m->trans, m->cap * 256 * sizeof *trans, cap * 256 * sizeof *trans) : NULL;
    if (trans) m->trans = trans;
    uint32_t *slots = trans ? llmm__mem_calloc(a, 2 * cap, sizeof *slots) : NULL;
    if (!slots) return 0;
    llmm__mem_free(a, m->slots);
    m->slots = slots;
    m->n_slots = 2 * cap;
    m->cap = cap;
    for (size_t id = 0; id < m->n; id++) { /* rehash */
        size_t i = m->hash[id] & (m->n_slots - 1);
        while (m->slots[i]) i = (i + 1) & (m->n_slots - 1);
        m->slots[i] = (uint32_t)id + 1;
    }
    return 1;
}

/* The id of level's stacks, adding them when new. -1 on failure; *added tells which. */
static int32_t memo_intern(llmm_grammar_state *s, const glevel *level, int *added) {
    walk_memo *m = &s->memo;
    const llmm_allocator *a = s->grammar->alloc;
    size_t start = m->keys_len;
    if (!llmm__glevel_key(&s->stacks, level, &m->keys, &m->keys_len, &m->keys_cap) || !memo_reserve(m, a)) return -1;
    size_t n = m->keys_len - start;
    uint64_t h = hash_key(m->keys + start, n);
    size_t i = h & (m->n_slots - 1);
    for (; m->slots[i]; i = (i + 1) & (m->n_slots - 1)) {
        uint32_t id = m->slots[i] - 1;
        size_t f = m->key_first[id], len = m->key_first[id + 1] - f;
        if (m->hash[id] == h && len == n && !memcmp(m->keys + f, m->keys + start, n * sizeof *m->keys)) {
            m->keys_len = start;
            *added = 0;
            return (int32_t)id;
        }
    }
    size_t id = m->n++;
    m->slots[i] = (uint32_t)id + 1;
    m->rep[id] = *level;
    m->hash[id] = h;
    m->key_first[id] = start;
    m->key_first[id + 1] = m->keys_len;
    for (int b = 0; b < 256; b++) m->trans[id * 256 + (size_t)b] = WALK_UNKNOWN;
    *added = 1;
    return (int32_t)id;
}

/* The state after byte from state id. */
static int32_t memo_step(llmm_grammar_state *s, int32_t id, uint8_t byte) {
    int32_t next = s->memo.trans[(size_t)id * 256 + byte];
    if (next != WALK_UNKNOWN) return next;
    gstacks *gs = &s->stacks;
    size_t heads_mark = gs->n_heads, nodes_mark = gs->n_nodes;
    if (nodes_mark > WALK_NODES_MAX) return WALK_ERROR;
    glevel out;
    llmm__gstacks_advance_byte(gs, &s->memo.rep[id], byte, &out);
    if (gs->failed) return WALK_ERROR;
    int added = 0;
    if (out.n == 0) {
        next = WALK_DEAD;
    } else if ((next = memo_intern(s, &out, &added)) < 0) {
        return WALK_ERROR;
    }
    if (!added) llmm__gstacks_truncate_to(gs, heads_mark, nodes_mark);
    s->memo.trans[(size_t)id * 256 + byte] = next;
    return next;
}

/* After token k of the walk got through d of its bytes: allow it when that is all of them,
 * else skip every following token that starts with its refused first d + 1 bytes. Returns the
 * next token to walk and sets the depth whose states stay valid. */
static uint32_t token_walked(llmm_grammar_state *s, uint32_t k, uint32_t d, uint32_t *depth) {
    const token_trie *t = &s->grammar->trie;
    *depth = d;
    if (d == t->length[k]) {
        s->bits[t->ids[k] >> 5] |= 1u << (t->ids[k] & 31);
        return k + 1;
    }
    for (k++; k < t->n && t->shared[k] > d; k++) {
    }
    return k;
}

/* Every token with bytes, in byte order: state[d] is the memo id after the current token's first
 * d bytes, valid for d <= depth; a token reuses the ids of the prefix it shares with the one
 * before, and a refused prefix skips every token that starts with it. Returns 0 when the memo
 * cannot go on (see WALK_ERROR); the mask is then incomplete. */
static int walk_tokens_memo(llmm_grammar_state *s, int32_t *state) {
    const token_trie *t = &s->grammar->trie;
    s->memo.n = 0;
    s->memo.keys_len = 0;
    if (s->memo.n_slots) memset(s->memo.slots, 0, s->memo.n_slots * sizeof *s->memo.slots);
    int added;
    if ((state[0] = memo_intern(s, &s->now, &added)) < 0) return 0;
    uint32_t depth = 0;
    for (uint32_t k = 0; k < t->n;) {
        uint32_t d = LLMM_MIN(t->shared[k], depth), len = t->length[k];
        const uint8_t *b = (const uint8_t *)t->bytes + t->start[k];
        while (d < len) {
            int32_t next = memo_step(s, state[d], b[d]);
            if (next == WALK_ERROR) return 0;
            if (next == WALK_DEAD) break;
            state[++d] = next;
        }
        k = token_walked(s, k, d, &depth);
    }
    return 1;
}

/* The same without the memo: every prefix advanced on the stacks themselves, levels[d] after d
 * bytes. Slower inside strings, but bounded in memory whatever the grammar. */
static void walk_tokens_plain(llmm_grammar_state *s) {
    const token_trie *t = &s->grammar->trie;
    gstacks *gs = &s->stacks;
    glevel *lv = s->levels;
    lv[0] = s->now;
    uint32_t depth = 0;
    for (uint32_t k = 0; k < t->n && !gs->failed;) {
        uint32_t d = LLMM_MIN(t->shared[k], depth), len = t->length[k];
        const uint8_t *b = (const uint8_t *)t->bytes + t->start[k];
        llmm__gstacks_truncate(gs, &lv[d]);
        while (d < len) {
            llmm__gstacks_advance_byte(gs, &lv[d], b[d], &lv[d + 1]);
            if (lv[d + 1].n == 0) break;
            d++;
        }
        k = token_walked(s, k, d, &depth);
    }
}

static void walk_tokens(llmm_grammar_state *s) {
    gstacks *gs = &s->stacks;
    /* the memo's ids per depth live in the plain walk's level array, which is as long */
    int32_t *ids = (int32_t *)(void *)s->levels;
    int done = walk_tokens_memo(s, ids), why = gs->failed;
    gs->failed = why == GSTACKS_TOO_COMPLEX ? why : GSTACKS_OK; /* the plain walk would meet it again */
    llmm__gstacks_truncate(gs, &s->now);
    if (!done && !gs->failed) {
        memset(s->bits, 0, s->grammar->mask_words * sizeof *s->bits);
        walk_tokens_plain(s);
    }
    llmm__gstacks_truncate(gs, &s->now);
}

llmm_status llmm__grammar_state_fill_mask(llmm_grammar_state *s) {
    const llmm_grammar *g = s->grammar;
    s->key_len = 0;
    /* without a key (too long, or no memory for it) the mask is made but not cached; the memo
     * walk then fails too and the plain walk runs */
    int keyed = llmm__glevel_key(&s->stacks, &s->now, &s->key, &s->key_len, &s->key_cap);
    uint64_t hash = keyed ? hash_key(s->key, s->key_len) : 0;
    if (keyed && cache_lookup(g->cache, s->key, s->key_len, hash, s->bits, g->mask_words)) return LLMM_OK;
    memset(s->bits, 0, g->mask_words * sizeof *s->bits);
    walk_tokens(s);
    if (s->stacks.failed) return llmm__gstacks_failure(&s->stacks, &s->error, "making a grammar mask");
    if (llmm__glevel_can_end(&s->stacks, &s->now))
        for (uint32_t i = 0; i < g->trie.n_eos; i++) s->bits[g->trie.eos[i] >> 5] |= 1u << (g->trie.eos[i] & 31);
    if (keyed) cache_insert(g->cache, g->alloc, s->key, s->key_len, hash, s->bits, g->mask_words);
    return LLMM_OK;
}

/* ---------------------------------------------------------------- public calls */

static llmm_status check_vocab(llmm_grammar_state *s, size_t n_vocab, const char *call) {
    if (!s->grammar->has_vocab)
        return llmm__diag_fail(&s->error, LLMM_ERR_INVALID_ARG, "%s: the grammar was compiled without a model", call);
    if (n_vocab < s->grammar->trie.n_vocab || n_vocab > (size_t)INT32_MAX)
        return llmm__diag_fail(&s->error, LLMM_ERR_INVALID_ARG, "%s: n_vocab %zu is not the vocabulary's %u", call, n_vocab,
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
    if (!st) st = llmm__grammar_state_fill_mask(state);
    if (!st) apply_mask(state, logits, logits, n_vocab);
    return st;
}

static llmm_status ensure_masked(llmm_grammar_state *s, size_t n_vocab) {
    if (n_vocab <= s->masked_cap) return LLMM_OK;
    const llmm_allocator *a = s->grammar->alloc;
    float *grown = llmm__mem_grow(a, s->masked, 0, n_vocab * sizeof *grown);
    if (grown) s->masked = grown;
    llmm_token *ids = grown ? llmm__mem_grow(a, s->masked_ids, 0, n_vocab * sizeof *ids) : NULL;
    if (ids) s->masked_ids = ids;
    if (!grown || !ids) return llmm__diag_fail(&s->error, LLMM_ERR_NO_MEMORY, "out of memory for the masked logits");
    s->masked_cap = n_vocab;
    return LLMM_OK;
}

/* The allowed tokens' logits in id order into s->masked, their ids into s->masked_ids. */
static size_t compact_allowed(llmm_grammar_state *s, const float *logits) {
    size_t n = 0, words = s->grammar->mask_words;
    for (size_t w = 0; w < words; w++)
        for (uint32_t bits = s->bits[w]; bits; bits &= bits - 1) {
            size_t id = w * 32 + (size_t)__builtin_ctz(bits);
            s->masked[n] = logits[id];
            s->masked_ids[n++] = (llmm_token)id;
        }
    return n;
}

/* The choice after the sampler's first draw: keep it when allowed, else mask and draw again. */
static llmm_status check_or_resample(llmm_sampler *sampler, llmm_grammar_state *state, const float *logits,
                                     size_t n_vocab, llmm_token first, llmm_token *out) {
    int ok = 0;
    llmm_status st = (size_t)first < state->grammar->trie.n_vocab ? llmm__grammar_state_allows(state, first, &ok) : LLMM_OK;
    if (st) return st;
    if (ok) {
        *out = first;
        return LLMM_OK;
    }
    if ((st = llmm__grammar_state_fill_mask(state)) || (st = ensure_masked(state, n_vocab))) return st;
    /* Without penalties only the order of ids matters to the sampler, so it samples just the
     * allowed tokens (usually few) instead of a vocabulary of mostly -inf: the same distribution
     * (the same token too, unless top-k or top-p reorder the candidates). */
    if (!llmm__sampler_uses_token_ids(sampler)) {
        size_t n = compact_allowed(state, logits);
        if (n == 0) return llmm__diag_fail(&state->error, LLMM_ERR_NOT_FOUND, "no token of the vocabulary may continue the grammar here");
        llmm_token k;
        if ((st = llmm_sample(sampler, state->masked, n, &k))) return st;
        *out = state->masked_ids[k];
        return LLMM_OK;
    }
    if (apply_mask(state, logits, state->masked, n_vocab) == 0)
        return llmm__diag_fail(&state->error, LLMM_ERR_NOT_FOUND, "no token of the vocabulary may continue the grammar here");
    return llmm_sample(sampler, state->masked, n_vocab, out);
}

LLMM_API llmm_status llmm_grammar_sample(llmm_sampler *sampler, llmm_grammar_state *state, const float *logits,
                                         size_t n_vocab, llmm_token *out) {
    if (!sampler || !state || !logits || !out) return LLMM_ERR_INVALID_ARG;
    llmm_status st = check_vocab(state, n_vocab, "llmm_grammar_sample");
    if (st) return st;
    state->error.msg[0] = '\0';
    llmm_token first;
    if ((st = llmm_sample(sampler, logits, n_vocab, &first))) return st;
    /* the first draw is what sampling costs anyway; the rest is the grammar's */
    double t0 = llmm__time_now_ms();
    st = check_or_resample(sampler, state, logits, n_vocab, first, out);
    state->spent_ms += llmm__time_now_ms() - t0;
    return st;
}

llmm_status llmm__grammar_state_allows(llmm_grammar_state *s, llmm_token token, int *allowed) {
    const token_trie *t = &s->grammar->trie;
    *allowed = 0;
    if (llmm__token_trie_is_eos(t, token)) {
        *allowed = llmm__glevel_can_end(&s->stacks, &s->now);
        return LLMM_OK;
    }
    uint32_t k = t->rank[token];
    if (k == UINT32_MAX) return LLMM_OK;
    gstacks *gs = &s->stacks;
    const uint8_t *b = (const uint8_t *)t->bytes + t->start[k];
    glevel cur = s->now, next;
    int ok = 1;
    for (uint32_t i = 0; i < t->length[k] && ok && !gs->failed; i++) {
        llmm__gstacks_advance_byte(gs, &cur, b[i], &next);
        ok = next.n > 0;
        cur = next;
    }
    llmm__gstacks_truncate(gs, &s->now);
    if (gs->failed) return llmm__gstacks_failure(gs, &s->error, "checking a token");
    *allowed = ok;
    return LLMM_OK;
}
