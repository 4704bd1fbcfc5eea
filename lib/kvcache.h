/* The KV store of a context: per layer and sequence, the K and V rows of every position.
 * This first store is contiguous (n_ctx rows reserved per sequence); the paged store with
 * shared blocks replaces it behind the same calls. */
#ifndef LLMM_KVCACHE_H
#define LLMM_KVCACHE_H

#include "backend.h"

typedef struct llmm_kv_store {
    const llmm_backend_ops *be;
    void *be_state;
    uint32_t n_layer, n_seq, n_ctx, kv_dim;
    uint32_t type;      /* element type (LLMM_TYPE_F32) */
    void *k, *v;        /* buffers (n_layer, n_seq, n_ctx, kv_dim) */
    uint32_t *seq_len;  /* host (n_seq): positions held */
    const llmm_allocator *alloc;
} llmm_kv_store;

llmm_status kv_init(llmm_kv_store *kv, const llmm_backend_ops *be, void *be_state, const llmm_allocator *alloc,
                    uint32_t n_layer, uint32_t n_seq, uint32_t n_ctx, uint32_t kv_dim, llmm_diag *d);
void kv_free(llmm_kv_store *kv);
llmm_kv_view kv_view(const llmm_kv_store *kv, uint32_t layer, uint32_t seq);
/* Bytes the store holds in backend memory. */
size_t kv_bytes(const llmm_kv_store *kv);

#endif
