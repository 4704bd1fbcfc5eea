#include "kvcache.h"

#include "quant.h"

llmm_status kv_init(llmm_kv_store *kv, const llmm_backend_ops *be, void *be_state, const llmm_allocator *alloc,
                    uint32_t n_layer, uint32_t n_seq, uint32_t n_ctx, uint32_t kv_dim, llmm_diag *d) {
    *kv = (llmm_kv_store){.be = be, .be_state = be_state, .n_layer = n_layer, .n_seq = n_seq, .n_ctx = n_ctx,
                          .kv_dim = kv_dim, .type = LLMM_TYPE_F32, .alloc = alloc};
    size_t elems, bytes;
    if (!size_mul_ok((size_t)n_layer * n_seq, (size_t)n_ctx * kv_dim, &elems) ||
        !size_mul_ok(elems, sizeof(float), &bytes))
        return diag_fail(d, LLMM_ERR_INVALID_ARG, "KV store size overflows");
    kv->seq_len = mem_calloc(alloc, n_seq, sizeof *kv->seq_len);
    if (!kv->seq_len) return diag_fail(d, LLMM_ERR_NO_MEMORY, "out of memory");
    if (be->buffer_alloc(be_state, bytes, &kv->k) || be->buffer_alloc(be_state, bytes, &kv->v)) {
        kv_free(kv);
        return diag_fail(d, LLMM_ERR_NO_MEMORY, "cannot allocate a KV store of 2 x %zu bytes (n_ctx %u, %u sequences)",
                         bytes, n_ctx, n_seq);
    }
    return LLMM_OK;
}

void kv_free(llmm_kv_store *kv) {
    if (kv->k) kv->be->buffer_free(kv->be_state, kv->k);
    if (kv->v) kv->be->buffer_free(kv->be_state, kv->v);
    mem_free(kv->alloc, kv->seq_len);
    kv->k = kv->v = NULL;
    kv->seq_len = NULL;
}

llmm_kv_view kv_view(const llmm_kv_store *kv, uint32_t layer, uint32_t seq) {
    size_t first_row = ((size_t)layer * kv->n_seq + seq) * kv->n_ctx;
    size_t offset = first_row * kv->kv_dim;
    return (llmm_kv_view){(float *)kv->k + offset, (float *)kv->v + offset, kv->kv_dim, kv->type};
}

size_t kv_bytes(const llmm_kv_store *kv) {
    return 2 * (size_t)kv->n_layer * kv->n_seq * kv->n_ctx * kv->kv_dim * sizeof(float);
}
