/* Adapters on a backend with device memory: a context keeps, per adapter its sequences run
 * with, one backend buffer holding every slot's lora_delta operands (a_rows, bt), uploaded when
 * a sequence of the context first attaches the adapter. The copy holds a reference to the
 * adapter and stays while anyone else holds one too (the app's handle, a sequence, the adapter
 * cache), so switching a sequence between loaded adapters uploads nothing; it goes when the
 * context is the last holder (llmm__lora_dev_sweep) or is freed.
 *
 * On a backend with a table of resident adapters (backend.h lora_table_*) each copy also holds
 * an entry of that table, set when the copy is made and cleared when it goes; the table has
 * room for every adapter the context's sequences can run with at once, up to
 * LLMM__LORA_TABLE_MAX entries. When it is full, a copy no sequence runs with (one kept only
 * because the app or the adapter cache still holds the adapter) gives its entry up, least
 * recently made first, and is uploaded again at its next attach; when every entry is run with,
 * the attach fails with LLMM_ERR_CONTEXT_FULL. */
#include <string.h>

#include "adapter/adapter.h"
#include "adapter_ctx.h"
#include "context.h"

struct llmm__lora_dev {
    llmm_adapter *adapter;  /* a reference held */
    void *buffer;           /* backend buffer: the slots' operands */
    llmm__lora_pair *slots; /* (adapter->n_slots) a_rows and bt pointing into buffer */
    uint32_t entry;         /* its entry in the backend's table (table_cap > 0) */
    int in_table;           /* the entry is set */
};

/* Devices hold a few megabytes per hundred entries (an entry is a slot's operands per weight
 * slot): a bound on what a context with many sequences reserves. */
#define LLMM__LORA_TABLE_MAX 256

/* The slot the forward pass adapts with a's deltas on a device: every slot but the embedding's
 * (refused on a device: adapter_apply.c check_adapter). */
static int device_slot(const llmm_adapter *a, size_t s) {
    return a->slots[s].a.data && s != llmm__lora_global_slot(a, LLMM__LORA_EMBD);
}

/* d's entry of the table cleared and its slots no longer counted. */
static void table_clear(llmm_context *ctx, const llmm__lora_dev *d) {
    llmm__lora_ctx *L = ctx->lora;
    if (!d->in_table) return;
    ctx->be->lora_table_set(ctx->be_state, d->entry, NULL);
    for (size_t s = 0; s < d->adapter->n_slots; s++)
        if (device_slot(d->adapter, s)) L->slot_users[s]--;
}

static void dev_release(llmm_context *ctx, llmm__lora_dev *d) {
    table_clear(ctx, d);
    if (d->buffer) ctx->be->buffer_free(ctx->be_state, d->buffer);
    llmm__mem_free(ctx->model->alloc, d->slots);
    llmm__adapter_release(d->adapter);
}

static size_t operand_bytes(const llmm_tensor *t) { return t->row_bytes * (size_t)t->ne1; }

/* The next 256-byte aligned stretch from base on for a host operand, uploaded there (base NULL:
 * only measured; an upload is skipped once *st holds a failure). */
static const void *place(llmm_context *ctx, const llmm_tensor *host, uint8_t *base, size_t *end, llmm_status *st) {
    uint8_t *dst = base ? base + *end : NULL;
    *end += (operand_bytes(host) + 255) / 256 * 256;
    if (dst && !*st) *st = ctx->be->upload(ctx->be_state, dst, host->data, operand_bytes(host));
    return dst;
}

/* Lay the slots' operands out from base on and upload them (base NULL: only measure); returns
 * the bytes used. A fused tensor's slots share one A, as on the host. */
static size_t lay_out(llmm_context *ctx, llmm__lora_dev *d, uint8_t *base, llmm_status *st) {
    const llmm_adapter *a = d->adapter;
    const size_t embd_slot = llmm__lora_global_slot(a, LLMM__LORA_EMBD);
    size_t end = 0;
    for (size_t s = 0; s < a->n_slots; s++) {
        const llmm__lora_pair *h = &a->slots[s];
        if (s == embd_slot || !h->a.data) continue;
        llmm__lora_pair *p = &d->slots[s];
        *p = *h;
        size_t e = 0;
        while (e < s && a->slots[e].a_rows.data != h->a_rows.data) e++;
        p->a_rows.data = e < s ? d->slots[e].a_rows.data : place(ctx, &h->a_rows, base, &end, st);
        p->bt.data = place(ctx, &h->bt, base, &end, st);
    }
    return end;
}

/* One adapter's operands uploaded into d (d->adapter set, nothing else). */
static llmm_status upload(llmm_context *ctx, llmm__lora_dev *d) {
    llmm_status st = LLMM_OK;
    d->slots = llmm__mem_calloc(ctx->model->alloc, d->adapter->n_slots, sizeof *d->slots);
    if (!d->slots) return LLMM_ERR_NO_MEMORY;
    const size_t bytes = lay_out(ctx, d, NULL, &st);
    if ((st = ctx->be->buffer_alloc(ctx->be_state, bytes ? bytes : 1, &d->buffer))) return st;
    lay_out(ctx, d, d->buffer, &st);
    return st;
}

llmm_status llmm__lora_table_create(llmm_context *ctx) {
    llmm__lora_ctx *L = ctx->lora;
    const llmm_backend_ops *be = ctx->be;
    if (!be->lora_table_reserve || !(be->flags & LLMM_BACKEND_DEVICE_MEMORY)) return LLMM_OK;
    const llmm_allocator *al = ctx->model->alloc;
    L->n_slots = (size_t)ctx->model->hp.n_layer * LLMM__LORA_PER_LAYER + LLMM__LORA_GLOBALS;
    const size_t uses = ctx->max_rows * LLMM__MAX_SEQ_ADAPTERS;
    L->slot_users = llmm__mem_calloc(al, L->n_slots, sizeof *L->slot_users);
    L->step_entry = llmm__mem_calloc(al, uses, sizeof *L->step_entry);
    L->step_scale = llmm__mem_calloc(al, uses, sizeof *L->step_scale);
    if (!L->slot_users || !L->step_entry || !L->step_scale) return LLMM_ERR_NO_MEMORY;
    const uint64_t want = ((uint64_t)ctx->params.n_seq_max + 1) * LLMM__MAX_SEQ_ADAPTERS;
    const uint32_t cap = (uint32_t)LLMM_MIN(want, (uint64_t)LLMM__LORA_TABLE_MAX);
    llmm_status st = be->lora_table_reserve(ctx->be_state, cap, L->n_slots, ctx->max_rows);
    if (!st) L->table_cap = cap;
    return st;
}

static int runs_with(const llmm_context *ctx, const llmm_adapter *a) {
    for (uint32_t q = 0; q < ctx->params.n_seq_max; q++)
        for (uint32_t i = 0; i < ctx->lora->seqs[q].n; i++)
            if (ctx->lora->seqs[q].a[i] == a) return 1;
    return 0;
}

static int in_list(llmm_adapter *const *list, size_t n, const llmm_adapter *a) {
    for (size_t i = 0; i < n; i++)
        if (list[i] == a) return 1;
    return 0;
}

/* A free entry of the table in *entry: one no copy holds, else the entry of the oldest copy
 * that no sequence runs with and that is not among the adapters being attached (released). */
static llmm_status free_entry(llmm_context *ctx, llmm_adapter *const *attaching, size_t n, uint32_t *entry) {
    llmm__lora_ctx *L = ctx->lora;
    for (uint32_t e = 0; e < L->table_cap; e++) {
        size_t i = 0;
        while (i < L->n_dev && L->dev[i].entry != e) i++;
        if (i == L->n_dev) {
            *entry = e;
            return LLMM_OK;
        }
    }
    for (size_t i = 0; i < L->n_dev; i++) {
        llmm__lora_dev *d = &L->dev[i];
        if (runs_with(ctx, d->adapter) || in_list(attaching, n, d->adapter)) continue;
        *entry = d->entry;
        dev_release(ctx, d);
        memmove(d, d + 1, (L->n_dev - i - 1) * sizeof *d);
        L->n_dev--;
        return LLMM_OK;
    }
    return llmm__ctx_fail(ctx, LLMM_ERR_CONTEXT_FULL,
                          "the %s backend's table of resident adapters is full: its %u entries are all run with",
                          ctx->be->name, L->table_cap);
}

/* d's operands into its entry of the table, its slots counted. */
static llmm_status table_set(llmm_context *ctx, llmm__lora_dev *d) {
    llmm__lora_ctx *L = ctx->lora;
    const llmm_adapter *a = d->adapter;
    llmm_lora_operands *ops = llmm__mem_calloc(ctx->model->alloc, a->n_slots, sizeof *ops);
    if (!ops) return LLMM_ERR_NO_MEMORY;
    for (size_t s = 0; s < a->n_slots; s++)
        if (device_slot(a, s))
            ops[s] = (llmm_lora_operands){.a = &d->slots[s].a_rows, .bt = &d->slots[s].bt, .alpha = a->alpha};
    llmm_status st = ctx->be->lora_table_set(ctx->be_state, d->entry, ops);
    llmm__mem_free(ctx->model->alloc, ops);
    if (st) return st;
    for (size_t s = 0; s < a->n_slots; s++)
        if (device_slot(a, s)) L->slot_users[s]++;
    d->in_table = 1;
    return LLMM_OK;
}

static llmm_status attach_one(llmm_context *ctx, llmm_adapter *a, llmm_adapter *const *attaching, size_t n) {
    llmm__lora_ctx *L = ctx->lora;
    if (llmm__lora_dev_slots(ctx, a)) return LLMM_OK;
    uint32_t entry = 0;
    llmm_status st = L->table_cap ? free_entry(ctx, attaching, n, &entry) : LLMM_OK;
    if (!st) st = llmm__mem_reserve(ctx->model->alloc, (void **)&L->dev, &L->dev_cap, L->n_dev + 1, sizeof *L->dev);
    if (st) return st;
    llmm__lora_dev *d = &L->dev[L->n_dev];
    *d = (llmm__lora_dev){.adapter = a, .entry = entry};
    llmm__adapter_retain(a);
    if (!(st = upload(ctx, d)) && L->table_cap) st = table_set(ctx, d);
    if (st) {
        dev_release(ctx, d);
        return st;
    }
    L->n_dev++;
    return LLMM_OK;
}

llmm_status llmm__lora_dev_attach(llmm_context *ctx, llmm_adapter *const *adapters, size_t n) {
    for (size_t i = 0; i < n; i++) {
        const llmm_status st = attach_one(ctx, adapters[i], adapters, n);
        if (st) return st;
    }
    return LLMM_OK;
}

uint32_t llmm__lora_dev_entry(const llmm_context *ctx, const llmm_adapter *a) {
    const llmm__lora_ctx *L = ctx->lora;
    for (size_t i = 0; i < L->n_dev; i++)
        if (L->dev[i].adapter == a) return L->dev[i].entry;
    return LLMM_LORA_NO_ENTRY;
}

const llmm__lora_pair *llmm__lora_dev_slots(const llmm_context *ctx, const llmm_adapter *a) {
    const llmm__lora_ctx *L = ctx->lora;
    for (size_t i = 0; L && i < L->n_dev; i++)
        if (L->dev[i].adapter == a) return L->dev[i].slots;
    return NULL;
}

void llmm__lora_dev_sweep(llmm_context *ctx) {
    llmm__lora_ctx *L = ctx->lora;
    if (!L) return;
    size_t kept = 0;
    for (size_t i = 0; i < L->n_dev; i++) {
        /* refs 1: the copy's own; no sequence, cache or app handle can reach the adapter any more */
        if (atomic_load_explicit(&L->dev[i].adapter->refs, memory_order_acquire) == 1) dev_release(ctx, &L->dev[i]);
        else L->dev[kept++] = L->dev[i];
    }
    L->n_dev = kept;
}

void llmm__lora_dev_free(llmm_context *ctx) {
    llmm__lora_ctx *L = ctx->lora;
    for (size_t i = 0; i < L->n_dev; i++) dev_release(ctx, &L->dev[i]);
    llmm__mem_free(ctx->model->alloc, L->dev);
    L->dev = NULL;
    L->n_dev = L->dev_cap = 0;
}
