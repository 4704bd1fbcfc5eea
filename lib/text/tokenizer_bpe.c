#include "tokenizer_bpe.h"

#include <string.h>

#include "base/unicode.h"

#define MAX_MERGES (1u << 24) /* more than any real vocabulary; bounds what a file can make us allocate */

/* ---- loading ---- */

static uint32_t pair_hash(uint32_t left, uint32_t right) {
    uint64_t k = ((uint64_t)left << 32) | right; /* a 64-bit finalizer (murmur3's fmix64) */
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    return (uint32_t)k;
}

/* Rank of the merge (left, right), or -1. */
static int64_t find_merge(const bpe_model *b, uint32_t left, uint32_t right) {
    uint32_t mask = b->slot_cap - 1;
    for (uint32_t i = pair_hash(left, right) & mask;; i = (i + 1) & mask) {
        uint32_t slot = b->slots[i];
        if (slot == 0) return -1;
        const bpe_merge *m = &b->merges[slot - 1];
        if (m->left == left && m->right == right) return slot - 1;
    }
}

/* The first occurrence of a pair keeps its rank, as in the reference engine. */
static void add_merge(bpe_model *b, bpe_merge m) {
    uint32_t mask = b->slot_cap - 1;
    for (uint32_t i = pair_hash(m.left, m.right) & mask;; i = (i + 1) & mask) {
        uint32_t slot = b->slots[i];
        if (slot != 0 && b->merges[slot - 1].left == m.left && b->merges[slot - 1].right == m.right) return;
        if (slot == 0) {
            b->merges[b->n_merges++] = m;
            b->slots[i] = b->n_merges;
            return;
        }
    }
}

/* "left right" as token ids. The split is at the first space after the first byte (a space is
 * never part of a GPT-2 symbol). A merge naming text that is not a token is dropped, returning
 * 0: symbols here are always tokens. (The reference would apply it and then spell the result in
 * single bytes; Hugging Face refuses such files, and a load warning counts them.) */
static int parse_merge(const llmm_vocab *v, gguf_str s, char *concat, bpe_merge *m) {
    const char *space = s.len > 1 ? memchr(s.ptr + 1, ' ', (size_t)s.len - 1) : NULL;
    if (!space) return 0;
    size_t left_len = (size_t)(space - s.ptr), right_len = (size_t)s.len - left_len - 1;
    memcpy(concat, s.ptr, left_len);
    memcpy(concat + left_len, space + 1, right_len);
    int32_t left = llmm__vocab_find(v, s.ptr, left_len), right = llmm__vocab_find(v, space + 1, right_len);
    int32_t result = llmm__vocab_find(v, concat, left_len + right_len);
    if (left < 0 || right < 0 || result < 0) return 0;
    *m = (bpe_merge){(uint32_t)left, (uint32_t)right, (uint32_t)result};
    return 1;
}

static const gguf_kv *find_merges_kv(const gguf_file *f, llmm_diag *d, llmm_status *st) {
    const gguf_kv *kv = llmm__gguf_find_kv(f, "tokenizer.ggml.merges");
    *st = LLMM_OK;
    if (!kv) *st = llmm__diag_fail(d, LLMM_ERR_BAD_FILE, "tokenizer.ggml.merges is missing (a gpt2 tokenizer needs it)");
    else if (kv->type != GGUF_TYPE_ARRAY || kv->v.arr.elem_type != GGUF_TYPE_STRING)
        *st = llmm__diag_fail(d, LLMM_ERR_BAD_FILE, "tokenizer.ggml.merges must be an array of strings");
    else if (kv->v.arr.count > MAX_MERGES)
        *st = llmm__diag_fail(d, LLMM_ERR_BAD_FILE, "tokenizer.ggml.merges has %llu entries (at most %u allowed)",
                        (unsigned long long)kv->v.arr.count, MAX_MERGES);
    return *st ? NULL : kv;
}

static size_t longest_string(const gguf_array *a) {
    const uint8_t *cur = a->data;
    uint64_t longest = 0;
    for (uint64_t i = 0; i < a->count; i++) {
        uint64_t len = llmm__gguf_array_next_str(&cur).len;
        longest = LLMM_MAX(longest, len);
    }
    return (size_t)longest; /* the reader checked every string fits in the mapped file */
}

static llmm_status load_merges(const llmm_vocab *v, bpe_model *b, const gguf_file *f,
                               const llmm_allocator *alloc, const llmm_logger *log, llmm_diag *d) {
    llmm_status st;
    const gguf_kv *kv = find_merges_kv(f, d, &st);
    if (st) return st;
    uint32_t count = (uint32_t)kv->v.arr.count;
    b->slot_cap = 2;
    while (b->slot_cap < 2 * count) b->slot_cap <<= 1;
    b->merges = llmm__mem_calloc(alloc, count ? count : 1, sizeof *b->merges);
    b->slots = llmm__mem_calloc(alloc, b->slot_cap, sizeof *b->slots);
    char *concat = llmm__mem_alloc(alloc, longest_string(&kv->v.arr));
    if (!b->merges || !b->slots || !concat) {
        llmm__mem_free(alloc, concat);
        return llmm__diag_fail(d, LLMM_ERR_NO_MEMORY, "out of memory for %u BPE merges", count);
    }
    const uint8_t *cur = kv->v.arr.data;
    uint32_t dropped = 0;
    for (uint32_t i = 0; i < count; i++) {
        bpe_merge m;
        if (parse_merge(v, llmm__gguf_array_next_str(&cur), concat, &m)) add_merge(b, m);
        else dropped++;
    }
    llmm__mem_free(alloc, concat);
    if (dropped)
        llmm__log_msg(log, LLMM_LOG_WARN, "%u of %u BPE merges name text that is not a token: ignored", dropped, count);
    return LLMM_OK;
}

static llmm_status choose_family(bpe_model *b, const gguf_file *f, const llmm_logger *log, llmm_diag *d) {
    const gguf_kv *kv = llmm__gguf_find_kv(f, "tokenizer.ggml.pre");
    if (!kv) {
        llmm__log_msg(log, LLMM_LOG_WARN, "no tokenizer.ggml.pre: using the 'default' pre-tokenizer (output may differ "
                                    "from the model's own tokenizer; reconvert the model)");
        b->family = llmm__pretok_family_default();
        return LLMM_OK;
    }
    if (kv->type != GGUF_TYPE_STRING) return llmm__diag_fail(d, LLMM_ERR_BAD_FILE, "tokenizer.ggml.pre must be a string");
    b->family = llmm__pretok_family_find(kv->v.str.ptr, (size_t)kv->v.str.len);
    if (b->family) return LLMM_OK;
    char known[400];
    llmm__pretok_family_list(known, sizeof known);
    return llmm__diag_fail(d, LLMM_ERR_UNSUPPORTED, "pre-tokenizer '%.*s' is not supported (supported: %s)",
                     (int)LLMM_MIN(kv->v.str.len, 64u), kv->v.str.ptr, known);
}

/* A byte's symbol must be a normal token: DeepSeek reuses the symbols of the 13 bytes that
 * never occur in UTF-8 (such as U+00FE for 0xFE) as added tokens meaning the characters
 * themselves, and a token cannot decode to both. */
static void find_byte_tokens(const llmm_vocab *v, bpe_model *b, const llmm_logger *log) {
    int missing = 0;
    for (int byte = 0; byte < 256; byte++) {
        char sym[4];
        size_t n = llmm__utf8_encode(llmm__gpt2_byte_to_cp((uint8_t)byte), sym);
        int32_t id = llmm__vocab_find(v, sym, n);
        b->byte_token[byte] = id >= 0 && (v->attrs[id] & LLMM_TOKEN_ATTR_NORMAL) ? id : -1;
        missing += b->byte_token[byte] < 0;
    }
    if (missing)
        llmm__log_msg(log, LLMM_LOG_WARN, "the BPE vocabulary lacks %d of the 256 byte symbols: those bytes are dropped "
                                    "when tokenizing, as the reference engine does", missing);
}

llmm_status llmm__bpe_load(llmm_vocab *v, const gguf_file *f, const llmm_allocator *alloc, const llmm_logger *log,
                     llmm_diag *d) {
    bpe_model *b = llmm__mem_calloc(alloc, 1, sizeof *b);
    if (!b) return llmm__diag_fail(d, LLMM_ERR_NO_MEMORY, "out of memory for the BPE tokenizer");
    v->bpe = b;
    llmm_status st = choose_family(b, f, log, d);
    if (!st) st = llmm__pretok_compile(&b->pre, b->family, alloc, d);
    if (!st) st = load_merges(v, b, f, alloc, log, d);
    if (st) return st; /* llmm__vocab_load frees what was built */
    find_byte_tokens(v, b, log);
    v->add_bos = b->family->add_bos; /* tokenizer.ggml.add_bos_token, read later, overrides */
    return LLMM_OK;
}

void llmm__bpe_free(llmm_vocab *v, const llmm_allocator *alloc) {
    bpe_model *b = v->bpe;
    if (!b) return;
    llmm__pretok_free(&b->pre, alloc);
    llmm__mem_free(alloc, b->merges);
    llmm__mem_free(alloc, b->slots);
    llmm__mem_free(alloc, b);
    v->bpe = NULL;
}

/* ---- tokenizing ---- */

/* A run of a word's bytes that is one token; merged-away symbols have len 0. */
typedef struct bpe_symbol {
    int32_t id;
    int32_t prev, next; /* neighbours in the word, -1 at the ends */
    uint32_t len;       /* bytes */
} bpe_symbol;

/* A candidate merge of two adjacent symbols, stale once either side changed (grew or died). */
typedef struct bpe_pair {
    uint32_t rank;
    int32_t left, right;
    uint32_t len; /* left.len + right.len when it was queued */
} bpe_pair;

/* Per-call scratch, reused from word to word. */
typedef struct bpe_work {
    const llmm_vocab *v;
    const bpe_model *b;
    token_list *out;
    bpe_symbol *sym;
    size_t sym_cap;
    bpe_pair *heap; /* min-heap on (rank, left) */
    size_t heap_n, heap_cap;
    char *spelled; /* the word in GPT-2 symbols, for whole-word lookups */
    size_t spelled_cap;
} bpe_work;

/* Lowest rank first; on a tie the leftmost pair, as in the reference engine. */
static int pair_before(const bpe_pair *a, const bpe_pair *b) {
    return a->rank < b->rank || (a->rank == b->rank && a->left < b->left);
}

static llmm_status heap_push(bpe_work *w, bpe_pair p) {
    void *items = w->heap;
    llmm_status st = llmm__mem_reserve(w->out->alloc, &items, &w->heap_cap, w->heap_n + 1, sizeof *w->heap);
    if (st) return st;
    w->heap = items;
    size_t i = w->heap_n++;
    while (i > 0 && pair_before(&p, &w->heap[(i - 1) / 2])) {
        w->heap[i] = w->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    w->heap[i] = p;
    return LLMM_OK;
}

static bpe_pair heap_pop(bpe_work *w) {
    bpe_pair top = w->heap[0], last = w->heap[--w->heap_n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= w->heap_n) break;
        if (c + 1 < w->heap_n && pair_before(&w->heap[c + 1], &w->heap[c])) c++;
        if (!pair_before(&w->heap[c], &last)) break;
        w->heap[i] = w->heap[c];
        i = c;
    }
    if (w->heap_n) w->heap[i] = last;
    return top;
}

static llmm_status queue_pair(bpe_work *w, int32_t left, int32_t right) {
    if (left < 0 || right < 0 || w->sym[left].id < 0 || w->sym[right].id < 0) return LLMM_OK;
    int64_t rank = find_merge(w->b, (uint32_t)w->sym[left].id, (uint32_t)w->sym[right].id);
    if (rank < 0) return LLMM_OK;
    return heap_push(w, (bpe_pair){(uint32_t)rank, left, right, w->sym[left].len + w->sym[right].len});
}

static void merge_pair(bpe_work *w, const bpe_pair *p) {
    bpe_symbol *l = &w->sym[p->left], *r = &w->sym[p->right];
    l->id = (int32_t)w->b->merges[p->rank].result;
    l->len += r->len;
    r->len = 0;
    l->next = r->next;
    if (r->next >= 0) w->sym[r->next].prev = p->left;
}

/* One symbol per byte, then merges until no adjacent pair has one. A byte whose symbol the
 * vocabulary lacks keeps id -1: it merges with nothing and is left out of the output. */
static llmm_status merge_word(bpe_work *w, const uint8_t *word, size_t n) {
    void *items = w->sym;
    llmm_status st = llmm__mem_reserve(w->out->alloc, &items, &w->sym_cap, n, sizeof *w->sym);
    if (st) return st;
    w->sym = items;
    for (size_t i = 0; i < n; i++)
        w->sym[i] = (bpe_symbol){w->b->byte_token[word[i]], (int32_t)i - 1, i + 1 < n ? (int32_t)i + 1 : -1, 1};
    w->heap_n = 0;
    for (size_t i = 1; i < n && !st; i++) st = queue_pair(w, (int32_t)i - 1, (int32_t)i);
    while (!st && w->heap_n > 0) {
        bpe_pair p = heap_pop(w);
        const bpe_symbol *l = &w->sym[p.left], *r = &w->sym[p.right];
        if (l->len == 0 || r->len == 0 || l->len + r->len != p.len) continue;
        merge_pair(w, &p);
        st = queue_pair(w, w->sym[p.left].prev, p.left);
        if (!st) st = queue_pair(w, p.left, w->sym[p.left].next);
    }
    for (int32_t i = 0; i >= 0 && !st; i = w->sym[i].next)
        if (w->sym[i].id >= 0) st = llmm__token_list_push(w->out, w->sym[i].id);
    return st;
}

/* Families with ignore_merges emit a word that is a token as is, even where the merges would
 * split it differently (the reference engine does so for llama3 and tekken). *id = -1 if not. */
static llmm_status whole_word_token(bpe_work *w, const uint8_t *word, size_t n, int32_t *id) {
    size_t need; /* every GPT-2 symbol is 1 or 2 bytes of UTF-8 */
    void *items = w->spelled;
    llmm_status st = size_mul_ok(n, 2, &need) ? llmm__mem_reserve(w->out->alloc, &items, &w->spelled_cap, need, 1)
                                              : LLMM_ERR_NO_MEMORY;
    if (st) return st;
    w->spelled = items;
    size_t len = 0;
    for (size_t i = 0; i < n; i++) len += llmm__utf8_encode(llmm__gpt2_byte_to_cp(word[i]), w->spelled + len);
    *id = llmm__vocab_find(w->v, w->spelled, len);
    return LLMM_OK;
}

static llmm_status tokenize_word(void *user, const char *word, size_t n) {
    bpe_work *w = user;
    const uint8_t *bytes = (const uint8_t *)word;
    if (n == 1 && w->b->byte_token[bytes[0]] >= 0) return llmm__token_list_push(w->out, w->b->byte_token[bytes[0]]);
    if (n > INT32_MAX) return LLMM_ERR_NO_MEMORY; /* symbols are indexed by int32: a 2 GiB word is too much */
    if (w->b->family->ignore_merges) {
        int32_t id;
        llmm_status st = whole_word_token(w, bytes, n, &id);
        if (st || id >= 0) return st ? st : llmm__token_list_push(w->out, id);
    }
    return merge_word(w, bytes, n);
}

llmm_status llmm__bpe_tokenize(const llmm_vocab *v, const char *text, size_t len, token_list *out) {
    bpe_work w = {.v = v, .b = v->bpe, .out = out};
    llmm_status st = llmm__pretok_split(&v->bpe->pre, text, len, out->alloc, tokenize_word, &w);
    llmm__mem_free(out->alloc, w.sym);
    llmm__mem_free(out->alloc, w.heap);
    llmm__mem_free(out->alloc, w.spelled);
    return st;
}

size_t llmm__bpe_decode_piece(const char *text, size_t len, char *out) {
    size_t n = 0;
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        size_t k = llmm__utf8_decode((const uint8_t *)text + i, len - i, &cp);
        int byte = llmm__gpt2_cp_to_byte(cp);
        if (byte >= 0) {
            out[n++] = (char)byte;
        } else {
            memcpy(out + n, text + i, k);
            n += k;
        }
        i += k;
    }
    return n;
}
