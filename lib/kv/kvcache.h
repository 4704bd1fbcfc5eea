/* The paged KV cache of a context (docs/api.md, "The KV cache"): a pool of fixed-size blocks
 * allocated once, per-sequence block tables, reference counts for blocks that forked sequences
 * share, and copy-on-write when a shared block is about to be written.
 *
 * Pool layout (one backend buffer): one region per (K or V, layer, K/V head), each holding
 * that head's rows of every block, block after block:
 *     ({K, V}, n_layer, n_head_kv, n_blocks, block_size, row_bytes)
 * with row_bytes one head row (kv_row_bytes of head_dim values) and n_layer the model's
 * attention layers only (llmm_layer_weights.kv_index maps a layer to its slot): a hybrid's
 * recurrent layers keep no K/V, and reserving rows for them would more than double LFM2's
 * pool. Attention over one head of a
 * sequence whose blocks were handed out in order therefore reads one dense stream, where a
 * block-major layout (all layers and heads of a block together) would read part of every row
 * and jump to another page every few positions, several times slower. A block is thus
 * 2 * n_layer * n_head_kv segments of block_size rows, one per region: copy-on-write and
 * saved states move those segments.
 *
 * Invariant between steps: a sequence of len tokens holds exactly ceil(len / block_size)
 * blocks; refcount[b] = number of block-table entries (over all sequences) naming b, plus 1
 * when the prefix cache keeps b; free blocks have refcount 0 and sit once in the free stack. */
#ifndef LLMM_KVCACHE_H
#define LLMM_KVCACHE_H

#include "backend/backend.h"

#define KV_NO_BLOCK UINT32_MAX

typedef struct kv_config {
    uint32_t n_layer;       /* layers with K/V: the attention layers */
    uint32_t n_head_kv, head_dim;
    uint32_t n_seq, n_ctx;  /* sequence ids, positions per sequence */
    uint32_t block_size;    /* positions per block, a power of two */
    uint32_t type;          /* enum llmm_kv_type */
    uint32_t n_blocks;      /* blocks in the pool */
    int prefix_cache;       /* keep full prompt blocks for reuse */
} kv_config;

typedef struct kv_seq {
    uint32_t *blocks;     /* (max_blocks) block ids of positions [i * block_size, (i+1) * block_size) */
    llmm_token *tokens;   /* (n_ctx) the tokens held */
    uint32_t n_blocks;    /* entries of blocks in use */
    uint32_t len;         /* positions held */
    int created;          /* handed out by create/fork and not freed since */
    /* prefix cache: the key its first block's is hashed from (0 without adapters, else the
     * adapters' and scales' hash: K/V computed under other adapters are other K/V), and 1 when
     * its adapters changed while it held tokens, so that its blocks are never published */
    uint64_t key_seed;
    int prefix_off;
} kv_seq;

/* Prefix cache entry for one block (kvcache_prefix.c): the block's key and LRU links. */
typedef struct kv_prefix_entry {
    uint64_t key;         /* hash(parent key, block tokens); 0 = not cached */
    uint32_t lru_prev, lru_next; /* among cached blocks no sequence holds */
    uint32_t hash_next;   /* chain of the hash table bucket */
} kv_prefix_entry;

typedef struct llmm_kv_store {
    const llmm_backend_ops *be;
    void *be_state;
    const llmm_allocator *alloc;
    kv_config cfg;
    uint32_t block_shift;  /* log2(block_size) */
    uint32_t max_blocks;   /* per sequence: ceil(n_ctx / block_size) */
    size_t row_bytes;      /* one position of one head of one layer, K or V */
    size_t segment_bytes;  /* block_size rows: one block's share of a region */
    size_t region_bytes;   /* n_blocks segments: one (K or V, layer, head)'s rows */
    size_t block_bytes;    /* 2 * n_layer * n_head_kv * segment_bytes, the memory of a block */
    void *pool;            /* buffer ({K, V}, n_layer, n_head_kv) regions */
    uint32_t *refcount;    /* host (n_blocks) */
    uint32_t *free_ids;    /* host (n_blocks) stack of free block ids */
    uint32_t n_free;
    kv_seq *seqs;          /* host (n_seq) */
    uint32_t *table_mem;   /* host (n_seq, max_blocks): the block tables */
    llmm_token *token_mem; /* host (n_seq, n_ctx): the token lists */
    uint32_t *fill;        /* host (n_blocks): scratch for the stats */
    /* prefix cache (kvcache_prefix.c), all NULL/0 when off */
    kv_prefix_entry *prefix;   /* host (n_blocks) */
    uint32_t *prefix_buckets;  /* host (n_buckets) heads of hash chains */
    uint32_t n_buckets;        /* power of two */
    uint32_t lru_head, lru_tail; /* least / most recently released cached block */
    uint32_t n_evictable;      /* cached blocks held only by the cache */
    uint32_t n_cached;         /* blocks in the cache, held or not */
} llmm_kv_store;

/* Bytes of one block (all layers, K and V), of the whole pool, and of the host-side tables
 * (block tables, token lists, refcounts, free stack, prefix cache) for a configuration. */
size_t llmm__kv_block_bytes(const kv_config *c);
int llmm__kv_pool_bytes(const kv_config *c, size_t *out); /* 0 on overflow */
size_t llmm__kv_host_bytes(const kv_config *c);

llmm_status llmm__kv_init(llmm_kv_store *kv, const llmm_backend_ops *be, void *be_state, const llmm_allocator *alloc,
                    const kv_config *cfg, llmm_diag *d);
void llmm__kv_free(llmm_kv_store *kv);

/* The pool's layout for the backend's step descriptors (backend.h). */
llmm_kv_layout llmm__kv_layout(const llmm_kv_store *kv);
/* Buffer: block's segment_bytes of K (which 0) or V (1) rows of one layer and K/V head. */
uint8_t *llmm__kv_segment(const llmm_kv_store *kv, int which, uint32_t layer, uint32_t head, uint32_t block);

/* Blocks a sequence could still obtain: free ones plus cached ones no sequence holds. */
uint32_t llmm__kv_available(const llmm_kv_store *kv);

/* Make positions [len, len + n) of seq writable: append blocks, and give seq its own copy of
 * a shared block it is about to write into. CONTEXT_FULL when the pool cannot supply the
 * blocks (seq is then unchanged); a failing copy returns the backend's status. len itself
 * does not move: llmm__kv_commit does that once the step has written the rows. The caller checks
 * len + n <= n_ctx. */
llmm_status llmm__kv_reserve(llmm_kv_store *kv, uint32_t seq, uint32_t n);
/* Blocks a step's reservations take from the pool: rows[0..n_rows) name each row's sequence,
 * the rows of one sequence next to each other (one reservation of that many positions each).
 * New blocks plus copies of shared tail blocks about to be written; a tail that only these
 * sequences share needs one copy fewer (the last to write keeps it). A step checks it against
 * llmm__kv_available() before reserving anything, so that running out of blocks halfway leaves
 * no copy behind: a refused step leaves the pool as it was. */
uint32_t llmm__kv_blocks_needed(const llmm_kv_store *kv, const llmm_seq_id *rows, size_t n_rows);
/* After a step wrote positions [len, len + n): record their tokens and advance len. */
void llmm__kv_commit(llmm_kv_store *kv, uint32_t seq, const llmm_token *tokens, uint32_t n);
/* Keep the first n_keep positions; release the blocks beyond them (n_keep <= len, or any
 * value after llmm__kv_reserve, to undo it). */
void llmm__kv_truncate(llmm_kv_store *kv, uint32_t seq, uint32_t n_keep);
/* dst (empty) shares all of src's blocks and copies its tokens. */
void llmm__kv_fork(llmm_kv_store *kv, uint32_t src, uint32_t dst);
/* Lowest id that is neither created nor holding tokens; -1 when none. */
int32_t llmm__kv_unused_seq(const llmm_kv_store *kv);

/* Occupancy figures for llmm_context_stats (fills the KV fields only). */
void llmm__kv_stats(llmm_kv_store *kv, llmm_context_stats *s);

/* Prefix cache (kvcache_prefix.c). No-ops when the cache is off. */
llmm_status llmm__kv_prefix_init(llmm_kv_store *kv);
void llmm__kv_prefix_free(llmm_kv_store *kv);
/* Attach to empty seq the cached blocks that hold a prefix of tokens[0, n), leaving at least
 * one token to compute; returns the positions attached (a multiple of block_size). */
uint32_t llmm__kv_prefix_attach(llmm_kv_store *kv, uint32_t seq, const llmm_token *tokens, uint32_t n);
/* The key of the prefix tokens[0, n_blocks * block_size) under seq's key seed: the key its last
 * block has (or would have) in the cache. */
uint64_t llmm__kv_prefix_key(const llmm_kv_store *kv, uint32_t seq, const llmm_token *tokens, uint32_t n_blocks);
/* Offer seq's full blocks in [first_block, last full block] to the cache. */
void llmm__kv_prefix_publish(llmm_kv_store *kv, uint32_t seq, uint32_t first_block);
/* A block's refcount fell to 1 (only the cache holds it) or 0: the cache's bookkeeping. */
void llmm__kv_prefix_on_release(llmm_kv_store *kv, uint32_t block);
/* Take the least recently used evictable block out of the cache; KV_NO_BLOCK when none. */
uint32_t llmm__kv_prefix_evict(llmm_kv_store *kv);
/* A sequence takes a reference to a cached block that only the cache held. */
void llmm__kv_prefix_on_acquire(llmm_kv_store *kv, uint32_t block);

#endif
