/* Building the sorted token table of token_trie.h from a model's vocabulary. */
#include "token_trie.h"

#include <stdlib.h>
#include <string.h>

#include "model/model.h"

typedef struct token_bytes {
    const char *p;
    uint32_t len;
    llmm_token id;
} token_bytes;

static int cmp_token_bytes(const void *pa, const void *pb) {
    const token_bytes *a = pa, *b = pb;
    int c = memcmp(a->p, b->p, LLMM_MIN(a->len, b->len));
    if (c) return c;
    if (a->len != b->len) return a->len < b->len ? -1 : 1;
    return (a->id > b->id) - (a->id < b->id);
}

/* Every token's bytes, one after another, into t->bytes; offset (n_vocab + 1) by id. */
static llmm_status collect_pieces(token_trie *t, const llmm_model *m, uint32_t *offset, const llmm_allocator *alloc,
                                  llmm_diag *d) {
    size_t cap = (size_t)t->n_vocab * 8 + 64, used = 0;
    t->bytes = llmm__mem_alloc(alloc, cap);
    if (!t->bytes) return llmm__diag_fail(d, LLMM_ERR_NO_MEMORY, "out of memory for the token table");
    for (uint32_t id = 0; id < t->n_vocab; id++) {
        size_t n = 0;
        llmm_status st = llmm_token_to_piece(m, (llmm_token)id, 0, t->bytes + used, cap - used, &n);
        if (st == LLMM_ERR_BUFFER_TOO_SMALL) {
            size_t grown = 2 * cap + n;
            char *b = llmm__mem_grow(alloc, t->bytes, used, grown);
            if (!b || grown >= UINT32_MAX) return llmm__diag_fail(d, LLMM_ERR_NO_MEMORY, "out of memory for the token table");
            t->bytes = b;
            cap = grown;
            st = llmm_token_to_piece(m, (llmm_token)id, 0, t->bytes + used, cap - used, &n);
        }
        if (st) return llmm__diag_fail(d, st, "token %u has no text", id);
        offset[id] = (uint32_t)used;
        used += n;
        if (used >= UINT32_MAX) return llmm__diag_fail(d, LLMM_ERR_NO_MEMORY, "the vocabulary's text is too large");
    }
    offset[t->n_vocab] = (uint32_t)used;
    return LLMM_OK;
}

/* Order the tokens with bytes by their bytes. */
static llmm_status sort_tokens(token_trie *t, const uint32_t *offset, const llmm_allocator *alloc, llmm_diag *d) {
    size_t n_alloc = t->n_vocab ? t->n_vocab : 1;
    token_bytes *all = llmm__mem_calloc(alloc, n_alloc, sizeof *all);
    t->ids = llmm__mem_calloc(alloc, n_alloc, sizeof *t->ids);
    t->start = llmm__mem_calloc(alloc, n_alloc, sizeof *t->start);
    t->length = llmm__mem_calloc(alloc, n_alloc, sizeof *t->length);
    t->shared = llmm__mem_calloc(alloc, n_alloc, sizeof *t->shared);
    t->rank = llmm__mem_calloc(alloc, n_alloc, sizeof *t->rank);
    if (!all || !t->ids || !t->start || !t->length || !t->shared || !t->rank) {
        llmm__mem_free(alloc, all);
        return llmm__diag_fail(d, LLMM_ERR_NO_MEMORY, "out of memory for the token table");
    }
    uint32_t n = 0;
    for (uint32_t id = 0; id < t->n_vocab; id++) {
        t->rank[id] = UINT32_MAX;
        uint32_t len = offset[id + 1] - offset[id];
        if (len) all[n++] = (token_bytes){t->bytes + offset[id], len, (llmm_token)id};
    }
    qsort(all, n, sizeof *all, cmp_token_bytes);
    for (uint32_t k = 0; k < n; k++) {
        t->ids[k] = all[k].id;
        t->rank[all[k].id] = k;
        t->start[k] = (uint32_t)(all[k].p - t->bytes);
        t->length[k] = all[k].len;
        t->max_len = LLMM_MAX(t->max_len, all[k].len);
        uint32_t same = 0;
        if (k > 0)
            while (same < all[k].len && same < all[k - 1].len && all[k].p[same] == all[k - 1].p[same]) same++;
        t->shared[k] = same;
    }
    t->n = n;
    llmm__mem_free(alloc, all);
    return LLMM_OK;
}

static llmm_status find_eos(token_trie *t, const llmm_vocab *v, const llmm_allocator *alloc, llmm_diag *d) {
    for (uint32_t id = 0; id < t->n_vocab; id++) t->n_eos += (v->attrs[id] & LLMM_TOKEN_ATTR_EOS) != 0;
    t->eos = llmm__mem_calloc(alloc, t->n_eos ? t->n_eos : 1, sizeof *t->eos);
    if (!t->eos) return llmm__diag_fail(d, LLMM_ERR_NO_MEMORY, "out of memory for the token table");
    t->n_eos = 0;
    for (uint32_t id = 0; id < t->n_vocab; id++)
        if (v->attrs[id] & LLMM_TOKEN_ATTR_EOS) t->eos[t->n_eos++] = (llmm_token)id;
    return LLMM_OK;
}

llmm_status llmm__token_trie_build(token_trie *t, const llmm_model *model, const llmm_allocator *alloc, llmm_diag *d) {
    memset(t, 0, sizeof *t);
    const llmm_vocab *v = &model->vocab;
    if (v->n_tokens > (uint32_t)INT32_MAX)
        return llmm__diag_fail(d, LLMM_ERR_INVALID_ARG, "the vocabulary is too large for a grammar");
    t->n_vocab = v->n_tokens;
    uint32_t *offset = llmm__mem_calloc(alloc, (size_t)t->n_vocab + 1, sizeof *offset);
    llmm_status st = offset ? collect_pieces(t, model, offset, alloc, d)
                            : llmm__diag_fail(d, LLMM_ERR_NO_MEMORY, "out of memory for the token table");
    if (!st) st = sort_tokens(t, offset, alloc, d);
    if (!st) st = find_eos(t, v, alloc, d);
    llmm__mem_free(alloc, offset);
    if (st) llmm__token_trie_free(t, alloc);
    return st;
}

void llmm__token_trie_free(token_trie *t, const llmm_allocator *alloc) {
    llmm__mem_free(alloc, t->ids);
    llmm__mem_free(alloc, t->start);
    llmm__mem_free(alloc, t->length);
    llmm__mem_free(alloc, t->shared);
    llmm__mem_free(alloc, t->rank);
    llmm__mem_free(alloc, t->bytes);
    llmm__mem_free(alloc, t->eos);
    memset(t, 0, sizeof *t);
}
