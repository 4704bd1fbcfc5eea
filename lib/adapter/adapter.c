/* LoRA adapter files: the GGUF layout the reference engine's converter writes, checked
 * against the base model before anything uses it. The A and B tensors stay in the file's
 * bytes (mapped, or the caller's copy); the operands of the backend's lora_delta (adapter.h)
 * are made from them once, at load. */
#include "adapter.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "backend/backend.h"
#include "format/quant.h"

static const char SUFFIX_A[] = ".lora_a", SUFFIX_B[] = ".lora_b";
#define SUFFIX_LEN (sizeof SUFFIX_A - 1)

void llmm__adapter_retain(llmm_adapter *a) { atomic_fetch_add_explicit(&a->refs, 1, memory_order_relaxed); }

/* Carving the operand copies out of one block (sized by a first pass over the slots), its pages
 * faulted in by one call: a page fault per 4 KiB page cost more than the copying itself. */
typedef struct copy_block {
    uint8_t *next; /* NULL in the sizing pass */
    size_t bytes;
} copy_block;

static void *copy_take(copy_block *cb, size_t bytes) {
    bytes = (bytes + 63) / 64 * 64; /* each copy at a cache line, where the SIMD loads like it */
    void *p = cb->next;
    cb->bytes += bytes;
    if (cb->next) cb->next += bytes;
    return p;
}

static void adapter_destroy(llmm_adapter *a) {
    const llmm_allocator *al = a->model->alloc;
    llmm__mem_free(al, a->copies);
    if (a->gguf) llmm__gguf_close(a->gguf);
    if (a->owned) llmm__mem_free(al, a->owned);
    llmm__mem_free(al, a->slots);
    llmm__mem_free(al, a);
}

void llmm__adapter_release(llmm_adapter *a) {
    if (atomic_fetch_sub_explicit(&a->refs, 1, memory_order_acq_rel) == 1) adapter_destroy(a);
}

/* A string key that must hold `want`. */
static llmm_status check_str(const gguf_file *f, const char *key, const char *want, llmm_diag *d) {
    const gguf_kv *kv = llmm__gguf_find_kv(f, key);
    if (!kv || kv->type != GGUF_TYPE_STRING)
        return llmm__diag_fail(d, LLMM_ERR_BAD_FILE, "not a LoRA adapter: string '%s' is missing", key);
    if (!llmm__gguf_str_eq(kv->v.str, want))
        return llmm__diag_fail(d, LLMM_ERR_BAD_FILE, "not a LoRA adapter: %s is '%.*s', expected '%s'", key,
                         (int)LLMM_MIN(kv->v.str.len, 64), kv->v.str.ptr, want);
    return LLMM_OK;
}

static llmm_status read_header(const llmm_model *m, const gguf_file *f, float *alpha, llmm_diag *d) {
    llmm_status st;
    if ((st = check_str(f, "general.type", "adapter", d)) || (st = check_str(f, "adapter.type", "lora", d))) return st;
    const gguf_kv *arch = llmm__gguf_find_kv(f, "general.architecture");
    if (!arch || arch->type != GGUF_TYPE_STRING)
        return llmm__diag_fail(d, LLMM_ERR_BAD_FILE, "the adapter names no architecture (general.architecture)");
    if (!llmm__gguf_str_eq(arch->v.str, m->architecture))
        return llmm__diag_fail(d, LLMM_ERR_BAD_FILE, "the adapter is for architecture '%.*s', the model is '%s'",
                         (int)LLMM_MIN(arch->v.str.len, 64), arch->v.str.ptr, m->architecture);
    *alpha = 0.f;
    const gguf_kv *kv = llmm__gguf_find_kv(f, "adapter.lora.alpha");
    if (kv) {
        double v;
        if (!llmm__gguf_kv_as_float(kv, &v)) return llmm__diag_fail(d, LLMM_ERR_BAD_FILE, "adapter.lora.alpha is not a float");
        if (!isfinite(v) || fabs(v) > 1e30)
            return llmm__diag_fail(d, LLMM_ERR_BAD_FILE, "adapter.lora.alpha %g is not a finite float", v);
        *alpha = (float)v;
    }
    return LLMM_OK;
}

/* The model's weights the forward pass multiplies by, by slot (NULL where absent). */
static void model_slots(const llmm_model *m, const llmm_tensor **views, size_t n_slots) {
    const llmm_weights *w = m->weights;
    for (uint32_t il = 0; il < m->hp.n_layer; il++) {
        const llmm_layer_weights *l = &w->layers[il];
        const llmm_tensor *per[LLMM__LORA_PER_LAYER] = {&l->wq, &l->wk, &l->wv, &l->wo, &l->w_gate, &l->w_up,
                                                        &l->w_down};
        for (int k = 0; k < LLMM__LORA_PER_LAYER; k++)
            views[llmm__lora_slot(il, (llmm__lora_kind)k)] = per[k]->data ? per[k] : NULL;
    }
    views[n_slots - LLMM__LORA_GLOBALS + LLMM__LORA_OUTPUT] = &w->output;
    views[n_slots - LLMM__LORA_GLOBALS + LLMM__LORA_EMBD] = &w->tok_embd;
}

static int type_ok(uint32_t type) {
    return type == LLMM_TYPE_F32 || type == LLMM_TYPE_F16 || type == LLMM_TYPE_BF16 || type == LLMM_TYPE_Q8_0;
}

/* An A or B tensor as a 2-D weight; BAD_FILE unless it is one of a type we run. */
static llmm_status as_matrix(const gguf_tensor *t, llmm_tensor *out, llmm_diag *d) {
    const int name_len = (int)t->name.len;
    if (t->ne[2] != 1 || t->ne[3] != 1)
        return llmm__diag_fail(d, LLMM_ERR_BAD_FILE, "adapter tensor '%.*s' has more than 2 dimensions", name_len,
                         t->name.ptr);
    if (!type_ok(t->type)) {
        const llmm_type_traits *tt = llmm__type_get(t->type);
        return llmm__diag_fail(d, LLMM_ERR_BAD_FILE, "adapter tensor '%.*s' has type %s (F32, F16, BF16 or Q8_0 expected)",
                         name_len, t->name.ptr, tt ? tt->name : "unknown");
    }
    const size_t rb = llmm__row_bytes(t->type, (uint64_t)t->ne[0]);
    if (rb == 0 || t->ne[0] <= 0 || t->ne[1] <= 0)
        return llmm__diag_fail(d, LLMM_ERR_BAD_FILE, "adapter tensor '%.*s' has rows of %lld values, which its type cannot "
                         "hold", name_len, t->name.ptr, (long long)t->ne[0]);
    *out = (llmm_tensor){.data = t->data, .type = t->type, .ne0 = t->ne[0], .ne1 = t->ne[1], .row_bytes = rb};
    return LLMM_OK;
}

/* The shapes of a pair against its base tensor bt: [n_in, rank] and [rank, n_out], or for the
 * embedding table [rank, n_vocab] and [rank, n_embd]. */
static llmm_status check_shapes(const char *base, const gguf_tensor *bt, const llmm_tensor *a, const llmm_tensor *b,
                                int embd, llmm_diag *d) {
    const int64_t rank = b->ne0;
    const int64_t a_in = embd ? a->ne1 : a->ne0, a_rank = embd ? a->ne0 : a->ne1;
    const int64_t n_in = embd ? bt->ne[1] : bt->ne[0], n_out = embd ? bt->ne[0] : bt->ne[1];
    if (a_rank != rank)
        return llmm__diag_fail(d, LLMM_ERR_BAD_FILE, "'%s': lora_a has rank %lld, lora_b %lld", base, (long long)a_rank,
                         (long long)rank);
    if (a_in != n_in || b->ne1 != n_out)
        return llmm__diag_fail(d, LLMM_ERR_BAD_FILE,
                         "'%s': lora_a [%lld, %lld] and lora_b [%lld, %lld] do not fit the base tensor [%lld, %lld]",
                         base, (long long)a->ne0, (long long)a->ne1, (long long)b->ne0, (long long)b->ne1,
                         (long long)bt->ne[0], (long long)bt->ne[1]);
    /* a rank beyond the input width expresses nothing a smaller one cannot, and would widen the
     * backend's operand scratch past what the context reserved */
    const int64_t width = bt->ne[0]; /* n_in, or n_embd for the table */
    if (rank > width)
        return llmm__diag_fail(d, LLMM_ERR_BAD_FILE, "'%s': rank %lld exceeds the input width %lld", base, (long long)rank,
                         (long long)width);
    return LLMM_OK;
}

/* Put the pair into every slot whose weight lies in the base tensor: a fused tensor (attn_qkv,
 * a fused gate/up) feeds several slots, each with its rows of B. */
static llmm_status place_pair(llmm_adapter *ad, const llmm_tensor *const *views, const char *base,
                              const gguf_tensor *bt, const llmm_tensor *a, const llmm_tensor *b, int embd,
                              llmm_diag *d) {
    const uint8_t *lo = bt->data, *hi = lo + bt->n_bytes;
    const size_t embd_slot = ad->n_slots - LLMM__LORA_GLOBALS + LLMM__LORA_EMBD;
    int placed = 0;
    for (size_t s = 0; s < ad->n_slots; s++) {
        const llmm_tensor *v = views[s];
        if (!v || (s == embd_slot) != embd) continue; /* a tied output is the table, adapted as one */
        const uint8_t *p = v->data;
        if (p < lo || p >= hi) continue;
        const int64_t row0 = (int64_t)((size_t)(p - lo) / v->row_bytes);
        ad->slots[s] = (llmm__lora_pair){.a = *a, .b = embd ? *b : llmm__tensor_rows(b, row0, v->ne1),
                                         .rank = (uint32_t)b->ne0};
        placed = 1;
    }
    if (!placed)
        return llmm__diag_fail(d, LLMM_ERR_BAD_FILE, "'%s' is not a weight the forward pass multiplies by", base);
    return LLMM_OK;
}

/* A 64-bit hash of bytes, 32 at a time in four independent lanes (one multiply chain would
 * take a third of an adapter's load time), the lanes folded into h at the end. */
static uint64_t hash_bytes(uint64_t h, const uint8_t *p, size_t n) {
    uint64_t lane[4] = {h, h ^ 0x9e3779b97f4a7c15ull, h ^ 0xbf58476d1ce4e5b9ull, h ^ 0x94d049bb133111ebull};
    size_t i = 0;
    for (; i + 32 <= n; i += 32)
        for (int k = 0; k < 4; k++) {
            uint64_t w;
            memcpy(&w, p + i + 8 * (size_t)k, 8);
            lane[k] = (lane[k] ^ w) * 0x100000001b3ull;
            lane[k] ^= lane[k] >> 29;
        }
    for (int k = 0; k < 4; k++) h = ((h ^ lane[k]) * 0x100000001b3ull) ^ (lane[k] >> 31);
    for (; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

/* One pair, found from its lora_a tensor. */
static llmm_status add_pair(llmm_adapter *ad, const llmm_tensor *const *views, const gguf_tensor *ta, llmm_diag *d) {
    const llmm_model *m = ad->model;
    char base[GGUF_MAX_NAME + 8], name_b[2 * GGUF_MAX_NAME + 16];
    const size_t base_len = (size_t)ta->name.len - SUFFIX_LEN;
    memcpy(base, ta->name.ptr, base_len);
    base[base_len] = '\0';
    snprintf(name_b, sizeof name_b, "%s%s", base, SUFFIX_B);
    const gguf_tensor *tb = llmm__gguf_find_tensor(ad->gguf, name_b);
    if (!tb) return llmm__diag_fail(d, LLMM_ERR_BAD_FILE, "'%s' has lora_a but no lora_b", base);
    const gguf_tensor *bt = llmm__gguf_find_tensor(m->gguf, base);
    if (!bt) return llmm__diag_fail(d, LLMM_ERR_BAD_FILE, "'%s' matches no tensor of the base model", base);
    const int embd = strcmp(base, "token_embd.weight") == 0;
    llmm_tensor a, b;
    llmm_status st;
    if ((st = as_matrix(ta, &a, d)) || (st = as_matrix(tb, &b, d))) return st;
    if ((st = check_shapes(base, bt, &a, &b, embd, d))) return st;
    if ((st = place_pair(ad, views, base, bt, &a, &b, embd, d))) return st;
    ad->rank = LLMM_MAX(ad->rank, (uint32_t)b.ne0);
    ad->n_tensors++;
    ad->bytes += ta->n_bytes + tb->n_bytes;
    ad->fingerprint = hash_bytes(ad->fingerprint, (const uint8_t *)ta->name.ptr, (size_t)ta->name.len);
    ad->fingerprint = hash_bytes(ad->fingerprint, ta->data, (size_t)ta->n_bytes);
    ad->fingerprint = hash_bytes(ad->fingerprint, tb->data, (size_t)tb->n_bytes);
    return LLMM_OK;
}

static int has_suffix(gguf_str s, const char *suffix) {
    return s.len > SUFFIX_LEN && memcmp(s.ptr + s.len - SUFFIX_LEN, suffix, SUFFIX_LEN) == 0;
}

/* Every tensor is half of a pair; pairs are built from their A halves. */
static llmm_status add_pairs(llmm_adapter *ad, const llmm_tensor *const *views, llmm_diag *d) {
    const gguf_file *f = ad->gguf;
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        if (has_suffix(t->name, SUFFIX_A)) {
            llmm_status st = add_pair(ad, views, t, d);
            if (st) return st;
        } else if (has_suffix(t->name, SUFFIX_B)) {
            char name_a[GGUF_MAX_NAME + 8];
            snprintf(name_a, sizeof name_a, "%.*s%s", (int)(t->name.len - SUFFIX_LEN), t->name.ptr, SUFFIX_A);
            if (!llmm__gguf_find_tensor(f, name_a))
                return llmm__diag_fail(d, LLMM_ERR_BAD_FILE, "'%.*s' has lora_b but no lora_a", (int)(t->name.len - SUFFIX_LEN),
                                 t->name.ptr);
        } else {
            return llmm__diag_fail(d, LLMM_ERR_BAD_FILE, "tensor '%.*s' is neither a lora_a nor a lora_b",
                             (int)LLMM_MIN(t->name.len, 64), t->name.ptr);
        }
    }
    if (ad->n_tensors == 0) return llmm__diag_fail(d, LLMM_ERR_BAD_FILE, "the adapter adapts no tensor");
    return LLMM_OK;
}

/* A's rows in F32 or F16: the file's, else widened once (a fused tensor's slots share one A). */
static void prepare_a(llmm_adapter *ad, size_t slot, copy_block *cb) {
    llmm__lora_pair *p = &ad->slots[slot];
    if (p->a.type == LLMM_TYPE_F32 || p->a.type == LLMM_TYPE_F16) {
        p->a_rows = p->a;
        return;
    }
    for (size_t s = 0; s < slot; s++)
        if (ad->slots[s].a.data == p->a.data) {
            p->a_rows = ad->slots[s].a_rows;
            return;
        }
    const size_t n_in = (size_t)p->a.ne0, rank = (size_t)p->a.ne1;
    float *rows = copy_take(cb, rank * n_in * sizeof(float));
    p->a_rows = (llmm_tensor){.data = rows, .type = LLMM_TYPE_F32, .ne0 = (int64_t)n_in, .ne1 = (int64_t)rank,
                              .row_bytes = n_in * sizeof(float)};
    if (!rows) return;
    const llmm_dequant_row_fn dequant = llmm__type_get(p->a.type)->dequant_row;
    for (size_t r = 0; r < rank; r++) dequant((const uint8_t *)p->a.data + r * p->a.row_bytes, rows + r * n_in, n_in);
}

/* B transposed into lora_delta's panels (backend.h, LLMM_LORA_PANEL): F16 when B is (moved as
 * bits), else F32. Each panel is made from LLMM_LORA_PANEL consecutive rows of B, so both sides
 * of the copy stay within a few cache lines. row: rank floats of scratch. */
static void prepare_bt(llmm_adapter *ad, size_t slot, copy_block *cb, float *row) {
    llmm__lora_pair *p = &ad->slots[slot];
    const size_t n_out = (size_t)p->b.ne1, rank = (size_t)p->b.ne0, rb = p->b.row_bytes;
    const uint8_t *b = p->b.data;
    const int f16 = p->b.type == LLMM_TYPE_F16;
    const size_t elem = f16 ? sizeof(uint16_t) : sizeof(float);
    uint8_t *bt = copy_take(cb, rank * n_out * elem);
    p->bt = (llmm_tensor){.data = bt, .type = f16 ? LLMM_TYPE_F16 : LLMM_TYPE_F32, .ne0 = (int64_t)n_out,
                          .ne1 = (int64_t)rank, .row_bytes = n_out * elem};
    if (!bt) return;
    const llmm_dequant_row_fn dequant = llmm__type_get(p->b.type)->dequant_row;
    for (size_t o0 = 0; o0 < n_out; o0 += LLMM_LORA_PANEL) {
        const size_t w = LLMM_MIN((size_t)LLMM_LORA_PANEL, n_out - o0);
        uint8_t *panel = bt + o0 * rank * elem;
        for (size_t j = 0; j < w; j++) {
            const uint8_t *src = b + (o0 + j) * rb;
            if (f16) {
                const uint16_t *h = (const uint16_t *)(const void *)src;
                for (size_t r = 0; r < rank; r++) ((uint16_t *)panel)[r * w + j] = h[r];
            } else {
                dequant(src, row, rank);
                for (size_t r = 0; r < rank; r++) ((float *)panel)[r * w + j] = row[r];
            }
        }
    }
}

/* The slots' operands, into cb (sizing only when cb->next is NULL). */
static void place_operands(llmm_adapter *ad, copy_block *cb, float *row) {
    const size_t embd_slot = llmm__lora_global_slot(ad, LLMM__LORA_EMBD);
    for (size_t s = 0; s < ad->n_slots; s++) {
        if (s == embd_slot || !ad->slots[s].a.data) continue;
        prepare_a(ad, s, cb);
        prepare_bt(ad, s, cb, row);
    }
}

/* The lora_delta operands of every adapted matmul slot (the embedding's are composed). */
static llmm_status prepare_operands(llmm_adapter *ad, llmm_diag *d) {
    const llmm_allocator *al = ad->model->alloc;
    copy_block cb = {0};
    place_operands(ad, &cb, NULL);
    if (cb.bytes == 0) return LLMM_OK;
    ad->copies = llmm__mem_alloc(al, cb.bytes + 64);
    float *row = llmm__mem_alloc(al, (size_t)ad->rank * sizeof(float));
    if (!ad->copies || !row) {
        llmm__mem_free(al, row);
        return llmm__diag_fail(d, LLMM_ERR_NO_MEMORY, "out of memory for an adapter's operands (%zu bytes)", cb.bytes);
    }
    llmm__mem_populate(ad->copies, cb.bytes + 64, 1);
    const size_t bytes = cb.bytes;
    cb = (copy_block){.next = (uint8_t *)(((uintptr_t)ad->copies + 63) / 64 * 64)};
    place_operands(ad, &cb, row);
    llmm__mem_free(al, row);
    ad->bytes += bytes;
    return LLMM_OK;
}

llmm_status llmm__adapter_from_gguf(const llmm_model *m, gguf_file *f, llmm_adapter **out, llmm_diag *d) {
    const llmm_allocator *al = m->alloc;
    *out = NULL;
    float alpha;
    llmm_status st = read_header(m, f, &alpha, d);
    if (st) {
        llmm__gguf_close(f);
        return st;
    }
    llmm_adapter *ad = llmm__mem_calloc(al, 1, sizeof *ad);
    if (!ad) {
        llmm__gguf_close(f);
        return llmm__diag_fail(d, LLMM_ERR_NO_MEMORY, "out of memory for an adapter");
    }
    ad->model = m;
    ad->gguf = f;
    atomic_init(&ad->refs, 1);
    ad->alpha = alpha;
    ad->fingerprint = hash_bytes(0xcbf29ce484222325ull, (const uint8_t *)&alpha, sizeof alpha);
    ad->n_slots = (size_t)m->hp.n_layer * LLMM__LORA_PER_LAYER + LLMM__LORA_GLOBALS;
    ad->slots = llmm__mem_calloc(al, ad->n_slots, sizeof *ad->slots);
    const llmm_tensor **views = llmm__mem_calloc(al, ad->n_slots, sizeof *views);
    if (!ad->slots || !views) {
        st = llmm__diag_fail(d, LLMM_ERR_NO_MEMORY, "out of memory for an adapter");
    } else {
        model_slots(m, views, ad->n_slots);
        if (f->mapping) llmm__mem_populate(f->bytes, (size_t)f->size, 0); /* every byte is read: hash, copies */
        st = add_pairs(ad, views, d);
        if (!st) st = prepare_operands(ad, d);
    }
    llmm__mem_free(al, views);
    if (st) {
        adapter_destroy(ad);
        return st;
    }
    *out = ad;
    return LLMM_OK;
}
