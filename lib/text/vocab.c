#include "vocab.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>


/* GGUF tokenizer.ggml.token_type values */
enum { TOKTYPE_UNDEFINED, TOKTYPE_NORMAL, TOKTYPE_UNKNOWN, TOKTYPE_CONTROL, TOKTYPE_USER_DEFINED,
       TOKTYPE_UNUSED, TOKTYPE_BYTE };

static const uint32_t attr_of_type[] = {
    [TOKTYPE_UNDEFINED] = LLMM_TOKEN_ATTR_NORMAL, [TOKTYPE_NORMAL] = LLMM_TOKEN_ATTR_NORMAL,
    [TOKTYPE_UNKNOWN] = LLMM_TOKEN_ATTR_UNKNOWN,  [TOKTYPE_CONTROL] = LLMM_TOKEN_ATTR_CONTROL,
    [TOKTYPE_USER_DEFINED] = LLMM_TOKEN_ATTR_USER_DEFINED, [TOKTYPE_UNUSED] = LLMM_TOKEN_ATTR_UNUSED,
    [TOKTYPE_BYTE] = LLMM_TOKEN_ATTR_BYTE,
};

/* Keys of the special ids, by llmm_special_token. The reference engine spells "seperator". */
static const char *const special_keys[6][2] = {
    [LLMM_SPECIAL_BOS] = {"tokenizer.ggml.bos_token_id", NULL},
    [LLMM_SPECIAL_EOS] = {"tokenizer.ggml.eos_token_id", NULL},
    [LLMM_SPECIAL_UNK] = {"tokenizer.ggml.unknown_token_id", NULL},
    [LLMM_SPECIAL_PAD] = {"tokenizer.ggml.padding_token_id", NULL},
    [LLMM_SPECIAL_SEP] = {"tokenizer.ggml.seperator_token_id", "tokenizer.ggml.separator_token_id"},
    [LLMM_SPECIAL_EOT] = {"tokenizer.ggml.eot_token_id", NULL},
};

typedef struct tokenizer_model {
    const char *name;
    llmm_tokenizer_kind kind;
    int32_t default_special[6]; /* used when the metadata names none */
    int add_bos, add_eos, add_space_prefix;
} tokenizer_model;

static const tokenizer_model tokenizer_models[] = {
    {"llama", LLMM_TOKENIZER_SPM, {1, 2, 0, -1, -1, -1}, 1, 0, 1},
    /* the reference's BPE defaults (11 is Falcon's <|endoftext|>); add_bos comes from the
     * pre-tokenizer family, then from the file */
    {"gpt2", LLMM_TOKENIZER_BPE, {11, 11, -1, -1, -1, -1}, 0, 0, 0},
};

/* Tokens that end a turn in common chat formats. Converters rarely record them all, so the
 * reference engine finds them by text: they stop generation (LLMM_TOKEN_ATTR_EOS) and, being
 * markup, are control tokens even where a file typed them otherwise. The first one present
 * that may be an EOT becomes the EOT id when the metadata names none. */
static const struct {
    const char *text;
    int may_be_eot;
} end_of_turn_tokens[] = {
    {"<|eot_id|>", 1},
    {"<|im_end|>", 1},
    {"<|end|>", 1},
    {"<end_of_turn>", 1},
    {"<|endoftext|>", 1},
    {"<|end_of_text|>", 1},
    {"<EOT>", 1},
    {"_<EOT>", 1},
    {"<end_of_utterance>", 1},
    {"<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>", 1}, /* DeepSeek's: U+FF5C, U+2581 */
    {"<|eom_id|>", 0},
};

static uint32_t hash_bytes(const char *s, size_t n) {
    uint32_t h = 2166136261u; /* FNV-1a */
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 16777619u;
    return h;
}

int32_t llmm__vocab_find(const llmm_vocab *v, const char *text, size_t len) {
    uint32_t mask = v->hash_cap - 1;
    for (uint32_t i = hash_bytes(text, len) & mask;; i = (i + 1) & mask) {
        uint32_t slot = v->hash[i];
        if (slot == 0) return -1;
        gguf_str t = v->text[slot - 1];
        if (t.len == len && memcmp(t.ptr, text, len) == 0) return (int32_t)(slot - 1);
    }
}

static void hash_insert(llmm_vocab *v, uint32_t id) {
    uint32_t mask = v->hash_cap - 1;
    gguf_str t = v->text[id];
    for (uint32_t i = hash_bytes(t.ptr, (size_t)t.len) & mask;; i = (i + 1) & mask) {
        uint32_t slot = v->hash[i];
        if (slot == 0 || (v->text[slot - 1].len == t.len && memcmp(v->text[slot - 1].ptr, t.ptr, t.len) == 0)) {
            v->hash[i] = id + 1; /* a later duplicate replaces the earlier one */
            return;
        }
    }
}

static llmm_status load_tokens(llmm_vocab *v, const gguf_file *f, const llmm_allocator *alloc, llmm_diag *d) {
    const gguf_kv *kv = llmm__gguf_find_kv(f, "tokenizer.ggml.tokens");
    if (!kv) return llmm__diag_fail(d, LLMM_ERR_BAD_FILE, "tokenizer.ggml.tokens is missing");
    if (kv->type != GGUF_TYPE_ARRAY || kv->v.arr.elem_type != GGUF_TYPE_STRING)
        return llmm__diag_fail(d, LLMM_ERR_BAD_FILE, "tokenizer.ggml.tokens must be an array of strings");
    if (kv->v.arr.count == 0 || kv->v.arr.count > (1u << 24))
        return llmm__diag_fail(d, LLMM_ERR_BAD_FILE, "tokenizer.ggml.tokens has %llu entries (1..16777216 allowed)",
                         (unsigned long long)kv->v.arr.count);
    v->n_tokens = (uint32_t)kv->v.arr.count;
    v->hash_cap = 1;
    while (v->hash_cap < 2 * v->n_tokens) v->hash_cap <<= 1;
    v->text = llmm__mem_calloc(alloc, v->n_tokens, sizeof *v->text);
    v->score = llmm__mem_calloc(alloc, v->n_tokens, sizeof *v->score);
    v->attrs = llmm__mem_calloc(alloc, v->n_tokens, sizeof *v->attrs);
    v->hash = llmm__mem_calloc(alloc, v->hash_cap, sizeof *v->hash);
    if (!v->text || !v->score || !v->attrs || !v->hash)
        return llmm__diag_fail(d, LLMM_ERR_NO_MEMORY, "out of memory for a vocabulary of %u tokens", v->n_tokens);
    const uint8_t *cur = kv->v.arr.data;
    for (uint32_t i = 0; i < v->n_tokens; i++) {
        v->text[i] = llmm__gguf_array_next_str(&cur);
        v->attrs[i] = LLMM_TOKEN_ATTR_NORMAL;
        hash_insert(v, i);
    }
    return LLMM_OK;
}

/* An optional per-token numeric array: absent is fine, present must match the vocab. */
static llmm_status find_token_array(const gguf_file *f, const char *key, uint32_t n, int want_float,
                                    const gguf_array **out, llmm_diag *d) {
    *out = NULL;
    const gguf_kv *kv = llmm__gguf_find_kv(f, key);
    if (!kv) return LLMM_OK;
    if (kv->type != GGUF_TYPE_ARRAY || !llmm__gguf_scalar_size(kv->v.arr.elem_type))
        return llmm__diag_fail(d, LLMM_ERR_BAD_FILE, "%s must be a numeric array", key);
    uint32_t et = kv->v.arr.elem_type;
    int is_float = et == GGUF_TYPE_F32 || et == GGUF_TYPE_F64;
    if (is_float != want_float)
        return llmm__diag_fail(d, LLMM_ERR_BAD_FILE, "%s must be an array of %s", key, want_float ? "floats" : "integers");
    if (kv->v.arr.count != n)
        return llmm__diag_fail(d, LLMM_ERR_BAD_FILE, "%s has %llu entries but the vocabulary has %u", key,
                         (unsigned long long)kv->v.arr.count, n);
    *out = &kv->v.arr;
    return LLMM_OK;
}

static llmm_status load_scores_and_types(llmm_vocab *v, const gguf_file *f, llmm_diag *d) {
    const gguf_array *scores, *types;
    llmm_status st = find_token_array(f, "tokenizer.ggml.scores", v->n_tokens, 1, &scores, d);
    if (!st) st = find_token_array(f, "tokenizer.ggml.token_type", v->n_tokens, 0, &types, d);
    if (st) return st;
    for (uint32_t i = 0; i < v->n_tokens; i++) {
        if (scores) v->score[i] = (float)llmm__gguf_array_get_f64(scores, i);
        if (types) {
            int64_t t = llmm__gguf_array_get_i64(types, i);
            if (t < 0 || t > TOKTYPE_BYTE)
                return llmm__diag_fail(d, LLMM_ERR_BAD_FILE, "token %u has unknown token type %lld", i, (long long)t);
            v->attrs[i] = attr_of_type[t];
        }
    }
    return LLMM_OK;
}

static void load_flag(const gguf_file *f, const char *key, int *flag, const llmm_logger *log) {
    const gguf_kv *kv = llmm__gguf_find_kv(f, key);
    if (!kv) return;
    if (kv->type != GGUF_TYPE_BOOL) {
        llmm__log_msg(log, LLMM_LOG_WARN, "ignoring %s: not a bool", key);
        return;
    }
    *flag = kv->v.u64 != 0;
}

static void mark_end_of_turn_tokens(llmm_vocab *v) {
    const uint32_t end_of_turn = LLMM_TOKEN_ATTR_CONTROL | LLMM_TOKEN_ATTR_EOS;
    for (size_t k = 0; k < sizeof end_of_turn_tokens / sizeof *end_of_turn_tokens; k++) {
        int32_t id = llmm__vocab_find(v, end_of_turn_tokens[k].text, strlen(end_of_turn_tokens[k].text));
        if (id >= 0) v->attrs[id] = (v->attrs[id] & ~LLMM_TOKEN_ATTR_NORMAL) | end_of_turn;
    }
}

static int32_t find_end_of_turn_token(const llmm_vocab *v) {
    for (size_t k = 0; k < sizeof end_of_turn_tokens / sizeof *end_of_turn_tokens; k++) {
        int32_t id = llmm__vocab_find(v, end_of_turn_tokens[k].text, strlen(end_of_turn_tokens[k].text));
        if (id >= 0 && end_of_turn_tokens[k].may_be_eot) return id;
    }
    return -1;
}

static void load_special_ids(llmm_vocab *v, const gguf_file *f, const tokenizer_model *tm, const llmm_logger *log) {
    for (int s = 0; s < 6; s++) {
        v->special[s] = tm->default_special[s];
        for (int k = 0; k < 2 && special_keys[s][k]; k++) {
            const gguf_kv *kv = llmm__gguf_find_kv(f, special_keys[s][k]);
            int64_t id;
            if (!kv) continue;
            if (!llmm__gguf_kv_as_int(kv, &id) || id < 0 || id >= v->n_tokens) {
                llmm__log_msg(log, LLMM_LOG_WARN, "ignoring %s: not a valid token id", special_keys[s][k]);
                v->special[s] = -1;
                continue;
            }
            v->special[s] = (int32_t)id;
        }
        if (v->special[s] >= (int32_t)v->n_tokens) v->special[s] = -1;
    }
    if (v->special[LLMM_SPECIAL_EOT] < 0) v->special[LLMM_SPECIAL_EOT] = find_end_of_turn_token(v);
    if (v->special[LLMM_SPECIAL_BOS] >= 0) v->attrs[v->special[LLMM_SPECIAL_BOS]] |= LLMM_TOKEN_ATTR_BOS;
    if (v->special[LLMM_SPECIAL_EOS] >= 0) v->attrs[v->special[LLMM_SPECIAL_EOS]] |= LLMM_TOKEN_ATTR_EOS;
    if (v->special[LLMM_SPECIAL_EOT] >= 0) v->attrs[v->special[LLMM_SPECIAL_EOT]] |= LLMM_TOKEN_ATTR_EOS;
}

typedef struct len_sort {
    uint32_t id;
    uint64_t len;
} len_sort;

static int cmp_len_desc(const void *a, const void *b) {
    const len_sort *x = a, *y = b;
    if (x->len != y->len) return x->len < y->len ? 1 : -1;
    return x->id < y->id ? -1 : x->id > y->id;
}

/* Tokens matched in raw text before the tokenizer runs, longest first so "<|im_start|>"
 * wins over a shorter special that is its prefix. */
static llmm_status index_specials(llmm_vocab *v, const llmm_allocator *alloc, llmm_diag *d) {
    const uint32_t mask = LLMM_TOKEN_ATTR_CONTROL | LLMM_TOKEN_ATTR_USER_DEFINED | LLMM_TOKEN_ATTR_UNKNOWN;
    uint32_t n = 0;
    for (uint32_t i = 0; i < v->n_tokens; i++)
        if ((v->attrs[i] & mask) && v->text[i].len > 0) n++;
    v->special_by_len = llmm__mem_calloc(alloc, n ? n : 1, sizeof *v->special_by_len);
    len_sort *tmp = llmm__mem_calloc(alloc, n ? n : 1, sizeof *tmp);
    if (!v->special_by_len || !tmp) {
        llmm__mem_free(alloc, tmp);
        return llmm__diag_fail(d, LLMM_ERR_NO_MEMORY, "out of memory indexing special tokens");
    }
    n = 0;
    for (uint32_t i = 0; i < v->n_tokens; i++)
        if ((v->attrs[i] & mask) && v->text[i].len > 0) tmp[n++] = (len_sort){i, v->text[i].len};
    qsort(tmp, n, sizeof *tmp, cmp_len_desc);
    for (uint32_t i = 0; i < n; i++) v->special_by_len[i] = tmp[i].id;
    v->n_special_by_len = n;
    llmm__mem_free(alloc, tmp);
    return LLMM_OK;
}

static void index_byte_tokens(llmm_vocab *v) {
    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        v->byte_token[b] = llmm__vocab_find(v, name, 6);
    }
}

llmm_status llmm__vocab_load_tokens(llmm_vocab *v, const gguf_file *f, const llmm_allocator *alloc,
                                    const llmm_logger *log, llmm_diag *d) {
    memset(v, 0, sizeof *v);
    for (int s = 0; s < 6; s++) v->special[s] = -1;
    for (int b = 0; b < 256; b++) v->byte_token[b] = -1;
    const gguf_kv *kv = llmm__gguf_find_kv(f, "tokenizer.ggml.model");
    if (!kv) {
        llmm__log_msg(log, LLMM_LOG_WARN, "no tokenizer.ggml.model: the model has no tokenizer");
        return LLMM_OK;
    }
    if (kv->type != GGUF_TYPE_STRING)
        return llmm__diag_fail(d, LLMM_ERR_BAD_FILE, "tokenizer.ggml.model must be a string");
    const tokenizer_model *tm = NULL;
    for (size_t i = 0; i < sizeof tokenizer_models / sizeof *tokenizer_models; i++)
        if (llmm__gguf_str_eq(kv->v.str, tokenizer_models[i].name)) tm = &tokenizer_models[i];
    if (!tm)
        return llmm__diag_fail(d, LLMM_ERR_UNSUPPORTED,
                         "tokenizer model '%.*s' is not supported (supported: llama = SentencePiece, gpt2 = "
                         "byte-level BPE)",
                         (int)LLMM_MIN(kv->v.str.len, 64u), kv->v.str.ptr);
    v->model = tm;
    v->kind = tm->kind;
    v->add_bos = tm->add_bos;
    v->add_eos = tm->add_eos;
    v->add_space_prefix = tm->add_space_prefix;
    llmm_status st = load_tokens(v, f, alloc, d);
    if (!st) st = load_scores_and_types(v, f, d);
    return st;
}

llmm_status llmm__vocab_load_finish(llmm_vocab *v, const gguf_file *f, const llmm_allocator *alloc,
                                    const llmm_logger *log, llmm_diag *d) {
    if (!v->model) return LLMM_OK;
    mark_end_of_turn_tokens(v); /* before the index: it may make tokens control tokens */
    llmm_status st = index_specials(v, alloc, d);
    if (st) return st;
    load_flag(f, "tokenizer.ggml.add_bos_token", &v->add_bos, log);
    load_flag(f, "tokenizer.ggml.add_eos_token", &v->add_eos, log);
    load_flag(f, "tokenizer.ggml.add_space_prefix", &v->add_space_prefix, log);
    load_special_ids(v, f, v->model, log);
    if (v->add_bos && v->special[LLMM_SPECIAL_BOS] < 0) v->add_bos = 0;
    if (v->add_eos && v->special[LLMM_SPECIAL_EOS] < 0) v->add_eos = 0;
    index_byte_tokens(v);
    return LLMM_OK;
}

void llmm__vocab_release(llmm_vocab *v, const llmm_allocator *alloc) {
    llmm__mem_free(alloc, v->text);
    llmm__mem_free(alloc, v->score);
    llmm__mem_free(alloc, v->attrs);
    llmm__mem_free(alloc, v->hash);
    llmm__mem_free(alloc, v->special_by_len);
    memset(v, 0, sizeof *v);
}

llmm_status llmm__token_list_push(token_list *l, llmm_token id) {
    void *items = l->ids;
    llmm_status st = llmm__mem_reserve(l->alloc, &items, &l->cap, l->n + 1, sizeof *l->ids);
    if (st) return st;
    l->ids = items;
    l->ids[l->n++] = id;
    return LLMM_OK;
}

void llmm__token_list_free(token_list *l) {
    llmm__mem_free(l->alloc, l->ids);
    l->ids = NULL;
    l->n = l->cap = 0;
}
