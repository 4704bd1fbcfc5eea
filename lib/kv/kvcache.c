/* The paged KV cache: block pool, block tables, refcounts, copy-on-write. See kvcache.h for
 * the layout and the invariants. Nothing here allocates after llmm__kv_init. */
#include "kvcache.h"

#include <string.h>

size_t llmm__kv_block_bytes(const kv_config *c) {
    return 2 * (size_t)c->n_layer * c->n_head_kv * c->block_size * kv_row_bytes(c->type, c->head_dim);
}

int llmm__kv_pool_bytes(const kv_config *c, size_t *out) {
    const size_t row = kv_row_bytes(c->type, c->head_dim);
    size_t segments, rows, block;
    if (!size_mul_ok(2 * (size_t)c->n_layer, c->n_head_kv, &segments)) return 0;
    if (!size_mul_ok(segments, c->block_size, &rows) || !size_mul_ok(rows, row, &block)) return 0;
    return size_mul_ok(block, c->n_blocks, out);
}

static uint32_t blocks_per_seq(const kv_config *c) { return (c->n_ctx + c->block_size - 1) / c->block_size; }

/* Smallest power of two >= n (n >= 1), for the prefix cache's hash table. */
static uint32_t pow2_at_least(uint32_t n) {
    uint32_t p = 1;
    while (p < n && p < (1u << 31)) p <<= 1;
    return p;
}

size_t llmm__kv_host_bytes(const kv_config *c) {
    size_t bytes = (size_t)c->n_seq * sizeof(kv_seq);
    bytes += (size_t)c->n_seq * blocks_per_seq(c) * sizeof(uint32_t);
    bytes += (size_t)c->n_seq * c->n_ctx * sizeof(llmm_token);
    bytes += 3 * (size_t)c->n_blocks * sizeof(uint32_t); /* refcount, free stack, fill */
    if (c->prefix_cache)
        bytes += (size_t)c->n_blocks * sizeof(kv_prefix_entry) + pow2_at_least(c->n_blocks) * sizeof(uint32_t);
    return bytes;
}

static uint32_t log2_u32(uint32_t pow2) {
    uint32_t s = 0;
    while ((1u << s) < pow2) s++;
    return s;
}

static llmm_status alloc_tables(llmm_kv_store *kv) {
    const kv_config *c = &kv->cfg;
    const llmm_allocator *a = kv->alloc;
    kv->refcount = llmm__mem_calloc(a, c->n_blocks, sizeof *kv->refcount);
    kv->free_ids = llmm__mem_calloc(a, c->n_blocks, sizeof *kv->free_ids);
    kv->fill = llmm__mem_calloc(a, c->n_blocks, sizeof *kv->fill);
    kv->seqs = llmm__mem_calloc(a, c->n_seq, sizeof *kv->seqs);
    kv->table_mem = llmm__mem_calloc(a, (size_t)c->n_seq * kv->max_blocks, sizeof *kv->table_mem);
    kv->token_mem = llmm__mem_calloc(a, (size_t)c->n_seq * c->n_ctx, sizeof *kv->token_mem);
    if (!kv->refcount || !kv->free_ids || !kv->fill || !kv->seqs || !kv->table_mem || !kv->token_mem)
        return LLMM_ERR_NO_MEMORY;
    for (uint32_t s = 0; s < c->n_seq; s++) {
        kv->seqs[s].blocks = kv->table_mem + (size_t)s * kv->max_blocks;
        kv->seqs[s].tokens = kv->token_mem + (size_t)s * c->n_ctx;
    }
    /* highest id on the bottom of the stack, so blocks are handed out from 0 upwards */
    for (uint32_t i = 0; i < c->n_blocks; i++) kv->free_ids[i] = c->n_blocks - 1 - i;
    kv->n_free = c->n_blocks;
    return llmm__kv_prefix_init(kv);
}

llmm_status llmm__kv_init(llmm_kv_store *kv, const llmm_backend_ops *be, void *be_state, const llmm_allocator *alloc,
                    const kv_config *cfg, llmm_diag *d) {
    *kv = (llmm_kv_store){.be = be, .be_state = be_state, .alloc = alloc, .cfg = *cfg};
    kv->block_shift = log2_u32(cfg->block_size);
    kv->max_blocks = blocks_per_seq(cfg);
    kv->row_bytes = kv_row_bytes(cfg->type, cfg->head_dim);
    size_t pool_bytes;
    if (!kv->row_bytes || cfg->n_layer == 0 || cfg->n_head_kv == 0 || cfg->n_blocks == 0 || cfg->n_blocks >= KV_NO_BLOCK ||
        !llmm__kv_pool_bytes(cfg, &pool_bytes))
        return llmm__diag_fail(d, LLMM_ERR_INVALID_ARG, "KV pool of %u blocks is invalid or overflows", cfg->n_blocks);
    kv->segment_bytes = kv->row_bytes * cfg->block_size;
    kv->region_bytes = kv->segment_bytes * cfg->n_blocks;
    kv->block_bytes = llmm__kv_block_bytes(cfg);
    if (alloc_tables(kv)) {
        llmm__kv_free(kv);
        return llmm__diag_fail(d, LLMM_ERR_NO_MEMORY, "out of memory for the KV block tables");
    }
    if (be->buffer_alloc(be_state, pool_bytes, &kv->pool)) {
        llmm__kv_free(kv);
        return llmm__diag_fail(d, LLMM_ERR_NO_MEMORY, "cannot allocate a KV pool of %zu bytes (%u blocks of %zu)",
                         pool_bytes, cfg->n_blocks, kv->block_bytes);
    }
    return LLMM_OK;
}

void llmm__kv_free(llmm_kv_store *kv) {
    if (kv->pool) kv->be->buffer_free(kv->be_state, kv->pool);
    llmm__kv_prefix_free(kv);
    const llmm_allocator *a = kv->alloc;
    llmm__mem_free(a, kv->refcount);
    llmm__mem_free(a, kv->free_ids);
    llmm__mem_free(a, kv->fill);
    llmm__mem_free(a, kv->seqs);
    llmm__mem_free(a, kv->table_mem);
    llmm__mem_free(a, kv->token_mem);
    kv->pool = NULL;
    kv->refcount = kv->free_ids = kv->fill = kv->table_mem = NULL;
    kv->seqs = NULL;
    kv->token_mem = NULL;
}

uint8_t *llmm__kv_segment(const llmm_kv_store *kv, int which, uint32_t layer, uint32_t head, uint32_t block) {
    const size_t region = ((size_t)which * kv->cfg.n_layer + layer) * kv->cfg.n_head_kv + head;
    return (uint8_t *)kv->pool + region * kv->region_bytes + (size_t)block * kv->segment_bytes;
}

llmm_kv_layout llmm__kv_layout(const llmm_kv_store *kv) {
    return (llmm_kv_layout){
        .layout = LLMM_KV_LAYOUT_HEAD_REGIONS,
        .pool = kv->pool,
        .n_layer = kv->cfg.n_layer,
        .n_head_kv = kv->cfg.n_head_kv,
        .head_dim = kv->cfg.head_dim,
        .type = kv->cfg.type,
        .block_size = kv->cfg.block_size,
        .block_shift = kv->block_shift,
        .n_blocks = kv->cfg.n_blocks,
        .row_bytes = kv->row_bytes,
        .block_stride = kv->segment_bytes,
        .head_stride = kv->region_bytes,
    };
}

uint32_t llmm__kv_available(const llmm_kv_store *kv) { return kv->n_free + kv->n_evictable; }

/* A block with refcount 1 for the caller; the caller checked llmm__kv_available() first. */
static uint32_t take_block(llmm_kv_store *kv) {
    uint32_t b = kv->n_free ? kv->free_ids[--kv->n_free] : llmm__kv_prefix_evict(kv);
    if (b != KV_NO_BLOCK) kv->refcount[b] = 1;
    return b;
}

static void release_block(llmm_kv_store *kv, uint32_t b) {
    if (--kv->refcount[b] == 0) {
        llmm__kv_prefix_on_release(kv, b);
        kv->free_ids[kv->n_free++] = b;
    } else if (kv->refcount[b] == 1) {
        llmm__kv_prefix_on_release(kv, b);
    }
}

/* Replace seq's block-table entry i (shared) by a private copy. */
static llmm_status copy_on_write(llmm_kv_store *kv, kv_seq *s, uint32_t i) {
    const uint32_t old = s->blocks[i], b = take_block(kv);
    llmm_status st = LLMM_OK;
    for (int which = 0; which < 2 && !st; which++)
        for (uint32_t l = 0; l < kv->cfg.n_layer && !st; l++)
            for (uint32_t h = 0; h < kv->cfg.n_head_kv && !st; h++)
                st = kv->be->copy(kv->be_state, llmm__kv_segment(kv, which, l, h, b), llmm__kv_segment(kv, which, l, h, old),
                                  kv->segment_bytes);
    if (st) {
        release_block(kv, b);
        return st;
    }
    release_block(kv, old);
    s->blocks[i] = b;
    return LLMM_OK;
}

llmm_status llmm__kv_reserve(llmm_kv_store *kv, uint32_t seq, uint32_t n) {
    kv_seq *s = &kv->seqs[seq];
    const uint32_t bs = kv->cfg.block_size;
    const uint32_t want = (s->len + n + bs - 1) >> kv->block_shift;
    const uint32_t grow = want > s->n_blocks ? want - s->n_blocks : 0;
    /* the tail block is written from slot len % bs on: it must not be shared */
    const int cow = n > 0 && (s->len & (bs - 1)) && kv->refcount[s->blocks[s->n_blocks - 1]] > 1;
    if (grow + (uint32_t)cow > llmm__kv_available(kv)) return LLMM_ERR_CONTEXT_FULL;
    if (cow) {
        llmm_status st = copy_on_write(kv, s, s->n_blocks - 1);
        if (st) return st;
    }
    for (uint32_t i = 0; i < grow; i++) s->blocks[s->n_blocks++] = take_block(kv);
    return LLMM_OK;
}

/* The partly filled tail block seq would write into, else KV_NO_BLOCK. */
static uint32_t partial_tail(const llmm_kv_store *kv, uint32_t seq) {
    const kv_seq *s = &kv->seqs[seq];
    return (s->len & (kv->cfg.block_size - 1)) ? s->blocks[s->n_blocks - 1] : KV_NO_BLOCK;
}

uint32_t llmm__kv_blocks_needed(const llmm_kv_store *kv, const llmm_seq_id *rows, size_t n_rows) {
    uint32_t need = 0;
    for (size_t i = 0, n; i < n_rows; i += n) {
        const uint32_t seq = (uint32_t)rows[i];
        for (n = 1; i + n < n_rows && rows[i + n] == rows[i];) n++;
        const kv_seq *s = &kv->seqs[seq];
        const uint32_t want = (s->len + (uint32_t)n + kv->cfg.block_size - 1) >> kv->block_shift;
        need += want > s->n_blocks ? want - s->n_blocks : 0;
        const uint32_t tail = partial_tail(kv, seq);
        if (tail == KV_NO_BLOCK || kv->refcount[tail] < 2) continue;
        /* this tail's writers in the step, and whether this one is the last of them */
        uint32_t writers = 0, later = 0;
        for (size_t j = 0; j < n_rows; j++) {
            if ((j > 0 && rows[j] == rows[j - 1]) || partial_tail(kv, (uint32_t)rows[j]) != tail) continue;
            writers++;
            later += j > i;
        }
        need += later > 0 || kv->refcount[tail] > writers; /* the last writer keeps it unless others hold it */
    }
    return need;
}

void llmm__kv_commit(llmm_kv_store *kv, uint32_t seq, const llmm_token *tokens, uint32_t n) {
    kv_seq *s = &kv->seqs[seq];
    const uint32_t first_new_full = s->len >> kv->block_shift;
    memcpy(s->tokens + s->len, tokens, n * sizeof *tokens);
    s->len += n;
    if (kv->prefix) llmm__kv_prefix_publish(kv, seq, first_new_full);
}

void llmm__kv_truncate(llmm_kv_store *kv, uint32_t seq, uint32_t n_keep) {
    kv_seq *s = &kv->seqs[seq];
    const uint32_t keep = (n_keep + kv->cfg.block_size - 1) >> kv->block_shift;
    while (s->n_blocks > keep) release_block(kv, s->blocks[--s->n_blocks]);
    if (n_keep < s->len) s->len = n_keep;
    if (s->len == 0) s->prefix_off = 0; /* nothing left computed under other adapters */
}

void llmm__kv_fork(llmm_kv_store *kv, uint32_t src, uint32_t dst) {
    const kv_seq *a = &kv->seqs[src];
    kv_seq *b = &kv->seqs[dst];
    for (uint32_t i = 0; i < a->n_blocks; i++) {
        b->blocks[i] = a->blocks[i];
        kv->refcount[a->blocks[i]]++;
    }
    b->n_blocks = a->n_blocks;
    memcpy(b->tokens, a->tokens, a->len * sizeof *a->tokens);
    b->len = a->len;
    b->key_seed = a->key_seed;
    b->prefix_off = a->prefix_off;
}

int32_t llmm__kv_unused_seq(const llmm_kv_store *kv) {
    for (uint32_t s = 0; s < kv->cfg.n_seq; s++)
        if (!kv->seqs[s].created && kv->seqs[s].len == 0) return (int32_t)s;
    return -1;
}

/* Per block, the highest number of slots any holder uses (into kv->fill); returns the
 * number of blocks some sequence holds, and of those held by several, in *shared. */
static uint32_t count_holders(llmm_kv_store *kv, uint32_t *shared) {
    const uint32_t bs = kv->cfg.block_size;
    uint32_t used = 0;
    *shared = 0;
    memset(kv->fill, 0, kv->cfg.n_blocks * sizeof *kv->fill);
    for (uint32_t q = 0; q < kv->cfg.n_seq; q++) {
        const kv_seq *s = &kv->seqs[q];
        for (uint32_t i = 0; i < s->n_blocks; i++) {
            const uint32_t b = s->blocks[i], slots = LLMM_MIN(bs, s->len - i * bs);
            if (kv->fill[b] == 0) used++;
            const uint32_t seq_refs = kv->refcount[b] - (kv->prefix && kv->prefix[b].key ? 1u : 0u);
            if (kv->fill[b] == 0 && seq_refs > 1) (*shared)++;
            if (slots > kv->fill[b]) kv->fill[b] = slots;
        }
    }
    return used;
}

void llmm__kv_stats(llmm_kv_store *kv, llmm_context_stats *s) {
    const uint32_t bs = kv->cfg.block_size;
    uint32_t shared;
    const uint32_t used = count_holders(kv, &shared);
    uint64_t unused_slots = 0;
    for (uint32_t b = 0; b < kv->cfg.n_blocks; b++)
        if (kv->fill[b]) unused_slots += bs - kv->fill[b];
    uint32_t n_used_seq = 0;
    for (uint32_t q = 0; q < kv->cfg.n_seq; q++) n_used_seq += kv->seqs[q].created || kv->seqs[q].len;
    s->kv_type = (llmm_kv_type)kv->cfg.type;
    s->block_size = bs;
    s->n_seq_used = n_used_seq;
    s->blocks_total = kv->cfg.n_blocks;
    s->blocks_used = used;
    s->blocks_free = llmm__kv_available(kv);
    s->blocks_shared = shared;
    s->blocks_cached = kv->n_evictable;
    s->block_bytes = kv->block_bytes;
    s->kv_bytes = (uint64_t)kv->block_bytes * kv->cfg.n_blocks;
    s->fragmentation = used ? (double)unused_slots / ((double)used * bs) : 0.0;
}
