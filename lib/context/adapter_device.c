/* Adapters on a backend with device memory: a context keeps, per adapter its sequences run
 * with, one backend buffer holding every slot's lora_delta operands (a_rows, bt), uploaded when
 * a sequence of the context first attaches the adapter. The copy holds a reference to the
 * adapter and stays while anyone else holds one too (the app's handle, a sequence, the adapter
 * cache), so switching a sequence between loaded adapters uploads nothing; it goes when the
 * context is the last holder (llmm__lora_dev_sweep) or is freed. */
#include <string.h>

#include "adapter/adapter.h"
#include "adapter_ctx.h"
#include "context.h"

struct llmm__lora_dev {
    llmm_adapter *adapter;  /* a reference held */
    void *buffer;           /* backend buffer: the slots' operands */
    llmm__lora_pair *slots; /* (adapter->n_slots) a_rows and bt pointing into buffer */
};

static void dev_release(llmm_context *ctx, llmm__lora_dev *d) {
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

llmm_status llmm__lora_dev_attach(llmm_context *ctx, llmm_adapter *a) {
    llmm__lora_ctx *L = ctx->lora;
    if (llmm__lora_dev_slots(ctx, a)) return LLMM_OK;
    llmm_status st = llmm__mem_reserve(ctx->model->alloc, (void **)&L->dev, &L->dev_cap, L->n_dev + 1, sizeof *L->dev);
    if (st) return st;
    llmm__lora_dev *d = &L->dev[L->n_dev];
    *d = (llmm__lora_dev){.adapter = a};
    llmm__adapter_retain(a);
    if ((st = upload(ctx, d))) {
        dev_release(ctx, d);
        return st;
    }
    L->n_dev++;
    return LLMM_OK;
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
