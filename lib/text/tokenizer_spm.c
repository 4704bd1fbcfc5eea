#include "tokenizer_spm.h"

#include <string.h>

/* A run of text that is, or may become, one token. Merged symbols keep the left one's start;
 * the right one gets n = 0. */
typedef struct symbol {
    size_t start, n;
    int32_t prev, next;
} symbol;

/* A candidate merge of two adjacent symbols, stale once either side changed size. */
typedef struct bigram {
    float score;
    int32_t left, right;
    size_t size;
} bigram;

typedef struct spm_state {
    const llmm_vocab *v;
    const char *text;
    symbol *sym;
    bigram *heap;
    size_t heap_n, heap_cap;
    const llmm_allocator *alloc;
} spm_state;

size_t llmm__utf8_seq_len(uint8_t lead) {
    static const uint8_t by_high_nibble[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return by_high_nibble[lead >> 4];
}

/* Highest score first; on equal scores the leftmost pair, so merges are deterministic. */
static int bigram_before(const bigram *a, const bigram *b) {
    return a->score > b->score || (a->score == b->score && a->left < b->left);
}

static llmm_status heap_push(spm_state *s, bigram b) {
    void *items = s->heap;
    llmm_status st = llmm__mem_reserve(s->alloc, &items, &s->heap_cap, s->heap_n + 1, sizeof *s->heap);
    if (st) return st;
    s->heap = items;
    size_t i = s->heap_n++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!bigram_before(&b, &s->heap[parent])) break;
        s->heap[i] = s->heap[parent];
        i = parent;
    }
    s->heap[i] = b;
    return LLMM_OK;
}

static bigram heap_pop(spm_state *s) {
    bigram top = s->heap[0];
    bigram last = s->heap[--s->heap_n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= s->heap_n) break;
        if (c + 1 < s->heap_n && bigram_before(&s->heap[c + 1], &s->heap[c])) c++;
        if (!bigram_before(&s->heap[c], &last)) break;
        s->heap[i] = s->heap[c];
        i = c;
    }
    if (s->heap_n) s->heap[i] = last;
    return top;
}

static llmm_status try_add_bigram(spm_state *s, int32_t left, int32_t right) {
    if (left < 0 || right < 0) return LLMM_OK;
    size_t size = s->sym[left].n + s->sym[right].n;
    int32_t id = llmm__vocab_find(s->v, s->text + s->sym[left].start, size);
    if (id < 0) return LLMM_OK;
    return heap_push(s, (bigram){s->v->score[id], left, right, size});
}

static llmm_status emit_bytes(const llmm_vocab *v, const char *p, size_t n, token_list *out) {
    for (size_t i = 0; i < n; i++) {
        uint8_t b = (uint8_t)p[i];
        int32_t id = v->byte_token[b];
        if (id < 0) id = llmm__vocab_find(v, (const char *)&p[i], 1);
        if (id < 0) id = v->special[LLMM_SPECIAL_UNK];
        if (id < 0) return LLMM_ERR_UNSUPPORTED;
        llmm_status st = llmm__token_list_push(out, id);
        if (st) return st;
    }
    return LLMM_OK;
}

llmm_status llmm__spm_tokenize(const llmm_vocab *v, const char *text, size_t len, token_list *out) {
    if (len == 0) return LLMM_OK;
    spm_state s = {.v = v, .text = text, .alloc = out->alloc};
    s.sym = llmm__mem_calloc(s.alloc, len, sizeof *s.sym);
    if (!s.sym) return LLMM_ERR_NO_MEMORY;
    int32_t n_sym = 0;
    for (size_t off = 0; off < len; n_sym++) {
        size_t n = LLMM_MIN(llmm__utf8_seq_len((uint8_t)text[off]), len - off);
        s.sym[n_sym] = (symbol){off, n, n_sym - 1, off + n == len ? -1 : n_sym + 1};
        off += n;
    }
    llmm_status st = LLMM_OK;
    for (int32_t i = 1; i < n_sym && !st; i++) st = try_add_bigram(&s, i - 1, i);
    while (!st && s.heap_n > 0) {
        bigram b = heap_pop(&s);
        symbol *l = &s.sym[b.left], *r = &s.sym[b.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != b.size) continue;
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) s.sym[r->next].prev = b.left;
        st = try_add_bigram(&s, l->prev, b.left);
        if (!st) st = try_add_bigram(&s, b.left, l->next);
    }
    for (int32_t i = 0; i != -1 && !st; i = s.sym[i].next) {
        const char *p = text + s.sym[i].start;
        int32_t id = llmm__vocab_find(v, p, s.sym[i].n);
        st = id >= 0 ? llmm__token_list_push(out, id) : emit_bytes(v, p, s.sym[i].n, out);
    }
    llmm__mem_free(s.alloc, s.sym);
    llmm__mem_free(s.alloc, s.heap);
    return st;
}
