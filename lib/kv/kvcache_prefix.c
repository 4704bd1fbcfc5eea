/* Prefix cache: full KV blocks kept under a key that hashes the block's tokens together with
 * its parent's key, so a key names the whole token prefix up to the block's end (K/V of a
 * position depend on exactly that prefix). A later sequence whose prompt starts with the same
 * tokens attaches those blocks instead of computing them. The cache holds one reference on
 * each cached block; a block only the cache holds is "evictable" and sits on an LRU list,
 * from which take_block() reclaims it when the free stack is empty.
 * Keys are 64-bit hashes; two different prefixes sharing a key (odds about n^2 / 2^64) would
 * share K/V, which is accepted as the reference engines do. */
#include <string.h>

#include "kvcache.h"

static uint64_t mix64(uint64_t h, uint64_t v) {
    h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    h ^= h >> 31;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 27;
    return h;
}

static uint64_t block_key(uint64_t parent, const llmm_token *tokens, uint32_t n) {
    uint64_t h = mix64(parent, 0x5bd1e995u);
    for (uint32_t i = 0; i < n; i++) h = mix64(h, (uint32_t)tokens[i]);
    return h ? h : 1; /* 0 marks "not cached" */
}

static uint32_t bucket_of(const llmm_kv_store *kv, uint64_t key) { return (uint32_t)(key ^ (key >> 32)) & (kv->n_buckets - 1); }

llmm_status llmm__kv_prefix_init(llmm_kv_store *kv) {
    kv->lru_head = kv->lru_tail = KV_NO_BLOCK;
    if (!kv->cfg.prefix_cache) return LLMM_OK;
    uint32_t nb = 1;
    while (nb < kv->cfg.n_blocks && nb < (1u << 31)) nb <<= 1;
    kv->n_buckets = nb;
    kv->prefix = llmm__mem_calloc(kv->alloc, kv->cfg.n_blocks, sizeof *kv->prefix);
    kv->prefix_buckets = llmm__mem_calloc(kv->alloc, nb, sizeof *kv->prefix_buckets);
    if (!kv->prefix || !kv->prefix_buckets) return LLMM_ERR_NO_MEMORY;
    for (uint32_t i = 0; i < nb; i++) kv->prefix_buckets[i] = KV_NO_BLOCK;
    return LLMM_OK;
}

void llmm__kv_prefix_free(llmm_kv_store *kv) {
    llmm__mem_free(kv->alloc, kv->prefix);
    llmm__mem_free(kv->alloc, kv->prefix_buckets);
    kv->prefix = NULL;
    kv->prefix_buckets = NULL;
}

static uint32_t lookup(const llmm_kv_store *kv, uint64_t key) {
    uint32_t b = kv->prefix_buckets[bucket_of(kv, key)];
    while (b != KV_NO_BLOCK && kv->prefix[b].key != key) b = kv->prefix[b].hash_next;
    return b;
}

static void insert(llmm_kv_store *kv, uint32_t b, uint64_t key) {
    uint32_t *head = &kv->prefix_buckets[bucket_of(kv, key)];
    kv->prefix[b] = (kv_prefix_entry){key, KV_NO_BLOCK, KV_NO_BLOCK, *head};
    *head = b;
    kv->refcount[b]++;
    kv->n_cached++;
}

static void unhash(llmm_kv_store *kv, uint32_t b) {
    uint32_t *link = &kv->prefix_buckets[bucket_of(kv, kv->prefix[b].key)];
    while (*link != b) link = &kv->prefix[*link].hash_next;
    *link = kv->prefix[b].hash_next;
    kv->prefix[b].key = 0;
    kv->n_cached--;
}

static void lru_unlink(llmm_kv_store *kv, uint32_t b) {
    kv_prefix_entry *e = &kv->prefix[b];
    if (e->lru_prev != KV_NO_BLOCK) kv->prefix[e->lru_prev].lru_next = e->lru_next;
    else kv->lru_head = e->lru_next;
    if (e->lru_next != KV_NO_BLOCK) kv->prefix[e->lru_next].lru_prev = e->lru_prev;
    else kv->lru_tail = e->lru_prev;
    e->lru_prev = e->lru_next = KV_NO_BLOCK;
    kv->n_evictable--;
}

static void lru_push_tail(llmm_kv_store *kv, uint32_t b) {
    kv_prefix_entry *e = &kv->prefix[b];
    e->lru_prev = kv->lru_tail;
    e->lru_next = KV_NO_BLOCK;
    if (kv->lru_tail != KV_NO_BLOCK) kv->prefix[kv->lru_tail].lru_next = b;
    else kv->lru_head = b;
    kv->lru_tail = b;
    kv->n_evictable++;
}

void llmm__kv_prefix_on_release(llmm_kv_store *kv, uint32_t block) {
    if (kv->prefix && kv->prefix[block].key && kv->refcount[block] == 1) lru_push_tail(kv, block);
}

void llmm__kv_prefix_on_acquire(llmm_kv_store *kv, uint32_t block) {
    if (kv->prefix && kv->prefix[block].key && kv->refcount[block] == 1) lru_unlink(kv, block);
}

uint32_t llmm__kv_prefix_evict(llmm_kv_store *kv) {
    const uint32_t b = kv->lru_head;
    if (!kv->prefix || b == KV_NO_BLOCK) return KV_NO_BLOCK;
    lru_unlink(kv, b);
    unhash(kv, b);
    kv->refcount[b] = 0;
    return b;
}

uint32_t llmm__kv_prefix_attach(llmm_kv_store *kv, uint32_t seq, const llmm_token *tokens, uint32_t n) {
    kv_seq *s = &kv->seqs[seq];
    const uint32_t bs = kv->cfg.block_size;
    if (!kv->prefix || s->len != 0 || n == 0) return 0;
    uint64_t key = s->key_seed;
    uint32_t i = 0;
    /* (i + 1) * bs < n: at least one token stays to be computed, for its logits */
    for (; (uint64_t)(i + 1) * bs < n && i < kv->max_blocks; i++) {
        key = block_key(key, tokens + (size_t)i * bs, bs);
        const uint32_t b = lookup(kv, key);
        if (b == KV_NO_BLOCK) break;
        llmm__kv_prefix_on_acquire(kv, b);
        kv->refcount[b]++;
        s->blocks[s->n_blocks++] = b;
    }
    s->len = i * bs;
    memcpy(s->tokens, tokens, (size_t)s->len * sizeof *tokens);
    return s->len;
}

uint64_t llmm__kv_prefix_key(const llmm_kv_store *kv, uint32_t seq, const llmm_token *tokens, uint32_t n_blocks) {
    uint64_t key = kv->seqs[seq].key_seed;
    for (uint32_t i = 0; i < n_blocks; i++) key = block_key(key, tokens + (size_t)i * kv->cfg.block_size, kv->cfg.block_size);
    return key;
}

void llmm__kv_prefix_publish(llmm_kv_store *kv, uint32_t seq, uint32_t first_block) {
    const kv_seq *s = &kv->seqs[seq];
    const uint32_t bs = kv->cfg.block_size, full = s->len >> kv->block_shift;
    if (s->prefix_off) return;
    uint64_t key = s->key_seed;
    for (uint32_t i = 0; i < full; i++) {
        const uint32_t b = s->blocks[i];
        /* a cached block's key already names this prefix: no need to hash up to it again */
        key = kv->prefix[b].key ? kv->prefix[b].key : block_key(key, s->tokens + (size_t)i * bs, bs);
        if (i >= first_block && !kv->prefix[b].key && lookup(kv, key) == KV_NO_BLOCK) insert(kv, b, key);
    }
}
