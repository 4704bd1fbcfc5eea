/* Tokenizing a vocab's text: special-token partitioning, then the vocab's algorithm; and the
 * reverse, ids to bytes. */
#include "tokenizer.h"

#include <string.h>

#include "tokenizer_bpe.h"
#include "tokenizer_spm.h"

#define SPM_SPACE "\xe2\x96\x81" /* U+2581, SentencePiece's visible space */
#define UNKNOWN_PIECE "\xe2\x96\x85"

/* A slice of the input: raw text to tokenize, or an already-recognized special token. */
typedef struct fragment {
    int32_t token; /* -1 for raw text */
    size_t off, len;
} fragment;

typedef struct fragment_list {
    fragment *items;
    size_t n, cap;
} fragment_list;

static llmm_status frag_push(fragment_list *l, const llmm_allocator *a, fragment f) {
    if (f.token < 0 && f.len == 0) return LLMM_OK;
    void *items = l->items;
    llmm_status st = llmm__mem_reserve(a, &items, &l->cap, l->n + 1, sizeof *l->items);
    if (st) return st;
    l->items = items;
    l->items[l->n++] = f;
    return LLMM_OK;
}

static const char *find_bytes(const char *hay, size_t n, const char *needle, size_t m) {
    if (m > n) return NULL;
    for (size_t i = 0; i + m <= n; i++) {
        const char *p = memchr(hay + i, needle[0], n - m - i + 1);
        if (!p) return NULL;
        if (memcmp(p, needle, m) == 0) return p;
        i = (size_t)(p - hay);
    }
    return NULL;
}

/* Split raw fragments at every occurrence of one special token. */
static llmm_status split_on_token(const char *text, const gguf_str tok, int32_t id, fragment_list *in,
                                  fragment_list *out, const llmm_allocator *a) {
    out->n = 0;
    llmm_status st = LLMM_OK;
    for (size_t i = 0; i < in->n && !st; i++) {
        fragment f = in->items[i];
        if (f.token >= 0) {
            st = frag_push(out, a, f);
            continue;
        }
        size_t pos = f.off, end = f.off + f.len;
        const char *hit;
        while (!st && (hit = find_bytes(text + pos, end - pos, tok.ptr, (size_t)tok.len))) {
            size_t at = (size_t)(hit - text);
            st = frag_push(out, a, (fragment){-1, pos, at - pos});
            if (!st) st = frag_push(out, a, (fragment){id, at, (size_t)tok.len});
            pos = at + (size_t)tok.len;
        }
        if (!st) st = frag_push(out, a, (fragment){-1, pos, end - pos});
    }
    return st;
}

/* User-defined tokens are always matched; control and unknown ones only on request. */
static llmm_status partition(const llmm_vocab *v, const char *text, size_t len, int parse_special,
                             fragment_list *frags, const llmm_allocator *a) {
    fragment_list spare = {0};
    llmm_status st = frag_push(frags, a, (fragment){-1, 0, len});
    for (uint32_t k = 0; k < v->n_special_by_len && !st; k++) {
        uint32_t id = v->special_by_len[k];
        if (!parse_special && (v->attrs[id] & (LLMM_TOKEN_ATTR_CONTROL | LLMM_TOKEN_ATTR_UNKNOWN))) continue;
        st = split_on_token(text, v->text[id], (int32_t)id, frags, &spare, a);
        fragment_list t = *frags;
        *frags = spare;
        spare = t;
    }
    llmm__mem_free(a, spare.items);
    return st;
}

/* SPM escaping: optional leading space, every space as U+2581. */
static llmm_status spm_fragment(const llmm_vocab *v, const char *p, size_t n, int prefix, token_list *out) {
    size_t spaces = prefix;
    for (size_t i = 0; i < n; i++) spaces += p[i] == ' ';
    size_t cap;
    if (!size_mul_ok(spaces, 2, &cap) || n > SIZE_MAX - cap - (size_t)prefix) return LLMM_ERR_NO_MEMORY;
    char *buf = llmm__mem_alloc(out->alloc, n + cap + (size_t)prefix);
    if (!buf) return LLMM_ERR_NO_MEMORY;
    size_t w = 0;
    if (prefix) {
        memcpy(buf, SPM_SPACE, 3);
        w = 3;
    }
    for (size_t i = 0; i < n; i++) {
        if (p[i] == ' ') {
            memcpy(buf + w, SPM_SPACE, 3);
            w += 3;
        } else {
            buf[w++] = p[i];
        }
    }
    llmm_status st = llmm__spm_tokenize(v, buf, w, out);
    llmm__mem_free(out->alloc, buf);
    return st;
}

static llmm_status tokenize_spm(const llmm_vocab *v, const char *text, const fragment_list *frags,
                                int add_special, token_list *out) {
    llmm_status st = LLMM_OK;
    int prev_special = 1; /* the first text gets the space prefix */
    if (add_special && v->add_bos) st = llmm__token_list_push(out, v->special[LLMM_SPECIAL_BOS]);
    for (size_t i = 0; i < frags->n && !st; i++) {
        const fragment *f = &frags->items[i];
        if (f->token >= 0) {
            st = llmm__token_list_push(out, f->token);
            prev_special = 1;
        } else {
            st = spm_fragment(v, text + f->off, f->len, v->add_space_prefix && prev_special, out);
            prev_special = 0;
        }
    }
    if (!st && add_special && v->add_eos) st = llmm__token_list_push(out, v->special[LLMM_SPECIAL_EOS]);
    return st;
}

/* BPE has no space prefix: fragments are tokenized as they are. */
static llmm_status tokenize_bpe(const llmm_vocab *v, const char *text, const fragment_list *frags,
                                int add_special, token_list *out) {
    llmm_status st = LLMM_OK;
    if (add_special && v->add_bos) st = llmm__token_list_push(out, v->special[LLMM_SPECIAL_BOS]);
    for (size_t i = 0; i < frags->n && !st; i++) {
        const fragment *f = &frags->items[i];
        st = f->token >= 0 ? llmm__token_list_push(out, f->token) : llmm__bpe_tokenize(v, text + f->off, f->len, out);
    }
    if (!st && add_special && v->add_eos) st = llmm__token_list_push(out, v->special[LLMM_SPECIAL_EOS]);
    return st;
}

llmm_status llmm__vocab_tokenize(const llmm_vocab *v, const llmm_allocator *a, const char *text, size_t text_len,
                                 uint32_t flags, token_list *out) {
    fragment_list frags = {0};
    llmm_status st = LLMM_OK;
    if (text_len > 0) st = partition(v, text, text_len, (flags & LLMM_TOKENIZE_PARSE_SPECIAL) != 0, &frags, a);
    if (!st) {
        int add_special = (flags & LLMM_TOKENIZE_ADD_SPECIAL) != 0;
        st = v->kind == LLMM_TOKENIZER_BPE ? tokenize_bpe(v, text, &frags, add_special, out)
                                           : tokenize_spm(v, text, &frags, add_special, out);
    }
    llmm__mem_free(a, frags.items);
    return st;
}

size_t llmm__vocab_piece(const llmm_vocab *v, llmm_token t, uint32_t flags, char *scratch, size_t scratch_cap) {
    uint32_t attr = v->attrs[t];
    gguf_str s = v->text[t];
    size_t n = 0;
    if (attr & LLMM_TOKEN_ATTR_BYTE) {
        unsigned b = 0;
        for (size_t i = 3; i + 1 < s.len; i++) {
            char c = s.ptr[i];
            b = b * 16 + (unsigned)(c >= 'a' ? c - 'a' + 10 : c >= 'A' ? c - 'A' + 10 : c - '0');
        }
        scratch[n++] = (char)b;
    } else if ((attr & LLMM_TOKEN_ATTR_UNKNOWN) && v->kind == LLMM_TOKENIZER_SPM) {
        memcpy(scratch, UNKNOWN_PIECE, 3);
        n = 3;
    } else if (attr & (LLMM_TOKEN_ATTR_CONTROL | LLMM_TOKEN_ATTR_UNUSED | LLMM_TOKEN_ATTR_UNKNOWN)) {
        if (!(flags & LLMM_PIECE_RENDER_SPECIAL)) return 0;
        n = (size_t)LLMM_MIN(s.len, scratch_cap);
        memcpy(scratch, s.ptr, n);
    } else if (v->kind == LLMM_TOKENIZER_BPE && (attr & LLMM_TOKEN_ATTR_USER_DEFINED)) {
        n = (size_t)LLMM_MIN(s.len, scratch_cap); /* added text such as "<think>" is stored as is */
        memcpy(scratch, s.ptr, n);
    } else if (v->kind == LLMM_TOKENIZER_BPE) {
        n = llmm__bpe_decode_piece(s.ptr, (size_t)LLMM_MIN(s.len, scratch_cap), scratch);
    } else {
        for (size_t i = 0; i < s.len && n < scratch_cap; i++) {
            if (i + 3 <= s.len && memcmp(s.ptr + i, SPM_SPACE, 3) == 0) {
                scratch[n++] = ' ';
                i += 2;
            } else {
                scratch[n++] = s.ptr[i];
            }
        }
    }
    if ((flags & LLMM_PIECE_STRIP_SPACE) && n > 0 && scratch[0] == ' ') {
        memmove(scratch, scratch + 1, --n);
    }
    return n;
}
