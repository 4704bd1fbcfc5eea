/* Adapters in a context: which adapters each sequence runs with, and the low-rank deltas the
 * forward pass adds after its matmuls.
 *
 * A step's rows are grouped by adapter once (llmm__lora_plan), S-LoRA/Punica style: the base
 * matmul runs once over all rows, then every adapter's rows get their deltas in one call of
 * the backend's lora_delta (each row read where it lies, no gather). A backend without that
 * slot gets them composed from its own slots: per adapter, its rows gathered (copy), passed
 * through A and B as two small matmuls, scaled and added back; the embedding table's deltas
 * are always composed so (embed of A's rows, matmul by B). A and B are host memory (the file,
 * or the copies made at load); a backend with device memory gets the operands copied into its
 * own buffers per context (adapter_device.c) and must have lora_delta or a table of resident
 * adapters (backend.h lora_table_*): then each row names its adapters as entries of that table
 * in the step's descriptor, and one lora_rows call per group of matmuls serves every row,
 * whatever adapters the rows take, so the step's calls do not follow the rows' choices. */
#include <math.h>
#include <string.h>

#include "adapter/adapter.h"
#include "adapter_ctx.h"
#include "context.h"

#define TRY(call)                                \
    do {                                         \
        llmm_status st_ = (call);                \
        if (st_ != LLMM_OK) return st_;          \
    } while (0)

/* The widest matmul input and output of the model (a fused tensor's slices are narrower). */
static size_t model_max_in(const llmm_hparams *hp) {
    return LLMM_MAX(LLMM_MAX((size_t)hp->n_embd, (size_t)hp->n_head * hp->head_dim), (size_t)hp->n_ff);
}
static size_t model_max_out(const llmm_model *m) {
    return LLMM_MAX(model_max_in(&m->hp), (size_t)m->vocab.n_tokens);
}

static llmm_status lora_ctx_create(llmm_context *ctx) {
    const llmm_allocator *al = ctx->model->alloc;
    llmm__lora_ctx *L = llmm__mem_calloc(al, 1, sizeof *L);
    if (!L) return LLMM_ERR_NO_MEMORY;
    const size_t uses = ctx->max_rows * LLMM__MAX_SEQ_ADAPTERS;
    L->seqs = llmm__mem_calloc(al, ctx->params.n_seq_max, sizeof *L->seqs);
    L->used = llmm__mem_calloc(al, uses, sizeof *L->used);
    L->first = llmm__mem_calloc(al, uses + 1, sizeof *L->first);
    L->count = llmm__mem_calloc(al, uses, sizeof *L->count);
    L->rows = llmm__mem_calloc(al, uses, sizeof *L->rows);
    L->row_scale = llmm__mem_calloc(al, uses, sizeof *L->row_scale);
    L->groups = llmm__mem_calloc(al, LLMM__LORA_MAX_PARTS * uses, sizeof *L->groups);
    L->call_rows = llmm__mem_calloc(al, LLMM__LORA_MAX_PARTS * uses, sizeof *L->call_rows);
    L->call_scale = llmm__mem_calloc(al, LLMM__LORA_MAX_PARTS * uses, sizeof *L->call_scale);
    ctx->lora = L; /* llmm__lora_free releases what was allocated, also on failure here */
    if (!L->seqs || !L->used || !L->first || !L->count || !L->rows || !L->row_scale || !L->groups || !L->call_rows ||
        !L->call_scale)
        return LLMM_ERR_NO_MEMORY;
    /* with lora_delta only the embedding's delta is composed: A rows of rank <= n_embd gathered,
     * B (A x) of n_embd; without it every matmul's is, up to the output's n_vocab columns */
    const int composed = ctx->be->lora_delta == NULL;
    L->x_cols = composed ? model_max_in(&ctx->model->hp) : ctx->model->hp.n_embd;
    L->y_cols = composed ? model_max_out(ctx->model) : ctx->model->hp.n_embd;
    llmm_status st = ctx->be->buffer_alloc(ctx->be_state, ctx->max_rows * L->x_cols * sizeof(float), (void **)&L->xg);
    if (!st) st = ctx->be->buffer_alloc(ctx->be_state, ctx->max_rows * L->y_cols * sizeof(float), (void **)&L->yg);
    if (!st) st = llmm__lora_table_create(ctx);
    return st;
}

void llmm__lora_free(llmm_context *ctx) {
    llmm__lora_ctx *L = ctx->lora;
    if (!L) return;
    const llmm_allocator *al = ctx->model->alloc;
    llmm__lora_dev_free(ctx);
    if (L->seqs)
        for (uint32_t s = 0; s < ctx->params.n_seq_max; s++)
            for (uint32_t i = 0; i < L->seqs[s].n; i++) llmm__adapter_release(L->seqs[s].a[i]);
    if (L->xg) ctx->be->buffer_free(ctx->be_state, L->xg);
    if (L->yg) ctx->be->buffer_free(ctx->be_state, L->yg);
    if (L->tg) ctx->be->buffer_free(ctx->be_state, L->tg);
    llmm__mem_free(al, L->seqs);
    llmm__mem_free(al, L->used);
    llmm__mem_free(al, L->first);
    llmm__mem_free(al, L->count);
    llmm__mem_free(al, L->rows);
    llmm__mem_free(al, L->row_scale);
    llmm__mem_free(al, L->groups);
    llmm__mem_free(al, L->call_rows);
    llmm__mem_free(al, L->call_scale);
    llmm__mem_free(al, L->slot_users);
    llmm__mem_free(al, L->step_entry);
    llmm__mem_free(al, L->step_scale);
    llmm__mem_free(al, L);
    ctx->lora = NULL;
}

/* Room for rank columns in the A-output buffer (only grows): a row for every use of an
 * adapter by a step row in each of the matmuls of one lora_delta call, which its groups need
 * together. */
static llmm_status reserve_rank(llmm_context *ctx, uint32_t rank) {
    llmm__lora_ctx *L = ctx->lora;
    if (rank <= L->t_cols) return LLMM_OK;
    float *t = NULL;
    TRY(ctx->be->buffer_alloc(ctx->be_state,
                              LLMM__LORA_MAX_PARTS * ctx->max_rows * LLMM__MAX_SEQ_ADAPTERS * rank * sizeof(float),
                              (void **)&t));
    if (L->tg) ctx->be->buffer_free(ctx->be_state, L->tg);
    L->tg = t;
    L->t_cols = rank;
    return LLMM_OK;
}

static llmm_status check_adapter(llmm_context *ctx, const llmm_adapter *a, size_t i) {
    if (!a) return llmm__ctx_fail(ctx, LLMM_ERR_INVALID_ARG, "llmm_seq_set_adapters: adapters[%zu] is NULL", i);
    if (a->model != ctx->model)
        return llmm__ctx_fail(ctx, LLMM_ERR_INVALID_ARG, "llmm_seq_set_adapters: adapters[%zu] is of another model", i);
    if (ctx->be->flags & LLMM_BACKEND_DEVICE_MEMORY) {
        /* the device runs the deltas through lora_rows or lora_delta only; the embedding's are
         * composed on the host's A rows */
        if (!ctx->be->lora_delta && !ctx->be->lora_rows)
            return llmm__ctx_fail(ctx, LLMM_ERR_UNSUPPORTED,
                                  "the %s backend cannot run LoRA adapters (no lora_rows or lora_delta)", ctx->be->name);
        if (a->slots[llmm__lora_global_slot(a, LLMM__LORA_EMBD)].a.data)
            return llmm__ctx_fail(ctx, LLMM_ERR_UNSUPPORTED,
                                  "llmm_seq_set_adapters: adapters[%zu] adapts token_embd, which the %s backend "
                                  "cannot run (matmul weights only)", i, ctx->be->name);
        return LLMM_OK;
    }
    for (size_t s = 0; s < a->n_slots; s++) {
        const llmm__lora_pair *p = &a->slots[s];
        if (p->a.data && (!ctx->be->supports_type(p->a.type) || !ctx->be->supports_type(p->b.type)))
            return llmm__ctx_fail(ctx, LLMM_ERR_UNSUPPORTED, "the %s backend cannot compute adapter tensors of type %u/%u",
                            ctx->be->name, p->a.type, p->b.type);
    }
    return LLMM_OK;
}

static llmm_status check_set_args(llmm_context *ctx, llmm_seq_id seq, llmm_adapter *const *adapters,
                                  const float *scales, size_t n) {
    TRY(llmm__ctx_check_seq(ctx, seq));
    if (n > LLMM__MAX_SEQ_ADAPTERS)
        return llmm__ctx_fail(ctx, LLMM_ERR_INVALID_ARG, "llmm_seq_set_adapters: %zu adapters, at most %d", n,
                        LLMM__MAX_SEQ_ADAPTERS);
    if (n && !adapters) return llmm__ctx_fail(ctx, LLMM_ERR_INVALID_ARG, "llmm_seq_set_adapters: NULL adapters");
    for (size_t i = 0; i < n; i++) {
        TRY(check_adapter(ctx, adapters[i], i));
        for (size_t j = 0; j < i; j++)
            if (adapters[j] == adapters[i])
                return llmm__ctx_fail(ctx, LLMM_ERR_INVALID_ARG, "llmm_seq_set_adapters: adapter %zu repeats %zu", i, j);
        if (scales && !isfinite(scales[i]))
            return llmm__ctx_fail(ctx, LLMM_ERR_INVALID_ARG, "llmm_seq_set_adapters: scales[%zu] is not finite", i);
    }
    return LLMM_OK;
}

/* The prefix cache keys a sequence's blocks from its adapters and scales (kvcache.h kv_seq). */
static void set_prefix_seed(llmm_context *ctx, llmm_seq_id seq, llmm_adapter *const *adapters, const float *scales,
                            size_t n) {
    uint64_t h = 0;
    for (size_t i = 0; i < n; i++) {
        const float s = scales ? scales[i] : 1.0f;
        if (s == 0.f) continue; /* as if absent: the forward pass skips it */
        uint32_t bits;
        memcpy(&bits, &s, sizeof bits);
        h = (h ^ adapters[i]->fingerprint) * 0x100000001b3ull + bits;
        h ^= h >> 31;
    }
    kv_seq *s = &ctx->kv.seqs[seq];
    if (h != s->key_seed && s->len > 0) s->prefix_off = 1;
    s->key_seed = h;
}

LLMM_API llmm_status llmm_seq_set_adapters(llmm_context *ctx, llmm_seq_id seq, llmm_adapter *const *adapters,
                                           const float *scales, size_t n) {
    if (!ctx) return LLMM_ERR_INVALID_ARG;
    TRY(check_set_args(ctx, seq, adapters, scales, n));
    if (n == 0 && !ctx->lora) return LLMM_OK;
    llmm_status st = LLMM_OK;
    if (!ctx->lora && (st = lora_ctx_create(ctx))) {
        llmm__lora_free(ctx);
        return llmm__ctx_fail(ctx, st, "out of memory for adapter working buffers");
    }
    uint32_t rank = 0;
    for (size_t i = 0; i < n; i++) rank = LLMM_MAX(rank, adapters[i]->rank);
    if ((st = reserve_rank(ctx, rank))) return llmm__ctx_fail(ctx, st, "out of memory for adapter working buffers");
    if ((ctx->be->flags & LLMM_BACKEND_DEVICE_MEMORY) && (st = llmm__lora_dev_attach(ctx, adapters, n))) {
        if (st == LLMM_ERR_CONTEXT_FULL) return st; /* the table's message stands */
        return llmm__ctx_fail(ctx, st, "cannot copy the adapters to the %s backend's memory", ctx->be->name);
    }
    ctx->lora->uses = LLMM_MAX(ctx->lora->uses, (uint32_t)n);
    llmm__seq_adapters *sa = &ctx->lora->seqs[seq];
    set_prefix_seed(ctx, seq, adapters, scales, n);
    /* take the new references before dropping the old: an adapter may be in both */
    for (size_t i = 0; i < n; i++) llmm__adapter_retain(adapters[i]);
    for (uint32_t i = 0; i < sa->n; i++) llmm__adapter_release(sa->a[i]);
    sa->n = (uint32_t)n;
    for (size_t i = 0; i < n; i++) {
        sa->a[i] = adapters[i];
        sa->scale[i] = scales ? scales[i] : 1.0f;
    }
    llmm__lora_dev_sweep(ctx);
    return LLMM_OK;
}

LLMM_API llmm_status llmm_seq_get_adapters(llmm_context *ctx, llmm_seq_id seq, llmm_adapter **adapters,
                                           float *scales, size_t capacity, size_t *n) {
    if (!ctx) return LLMM_ERR_INVALID_ARG;
    TRY(llmm__ctx_check_seq(ctx, seq));
    if (!n) return llmm__ctx_fail(ctx, LLMM_ERR_INVALID_ARG, "llmm_seq_get_adapters: NULL n");
    const llmm__seq_adapters *sa = ctx->lora ? &ctx->lora->seqs[seq] : NULL;
    *n = sa ? sa->n : 0;
    if (*n > capacity)
        return llmm__ctx_fail(ctx, LLMM_ERR_BUFFER_TOO_SMALL, "llmm_seq_get_adapters: %zu adapters, capacity %zu", *n,
                        capacity);
    for (size_t i = 0; i < *n; i++) {
        if (adapters) adapters[i] = sa->a[i];
        if (scales) scales[i] = sa->scale[i];
    }
    return LLMM_OK;
}

const llmm__seq_adapters *llmm__lora_seq(const llmm_context *ctx, llmm_seq_id seq) {
    return ctx->lora && ctx->lora->seqs[seq].n ? &ctx->lora->seqs[seq] : NULL;
}

void llmm__lora_seq_drop(llmm_context *ctx, llmm_seq_id seq) {
    if (!ctx->lora) return;
    ctx->kv.seqs[seq].key_seed = 0;
    llmm__seq_adapters *sa = &ctx->lora->seqs[seq];
    for (uint32_t i = 0; i < sa->n; i++) llmm__adapter_release(sa->a[i]);
    sa->n = 0;
    llmm__lora_dev_sweep(ctx);
}

void llmm__lora_seq_copy(llmm_context *ctx, llmm_seq_id src, llmm_seq_id dst) {
    if (!ctx->lora) return;
    llmm__seq_adapters *d = &ctx->lora->seqs[dst];
    const llmm__seq_adapters *s = &ctx->lora->seqs[src];
    for (uint32_t i = 0; i < s->n; i++) llmm__adapter_retain(s->a[i]);
    for (uint32_t i = 0; i < d->n; i++) llmm__adapter_release(d->a[i]);
    *d = *s;
}

/* Index of adapter a among the step's, added when new. */
static uint32_t use_index(llmm__lora_ctx *L, llmm_adapter *a) {
    for (uint32_t u = 0; u < L->n_used; u++)
        if (L->used[u] == a) return u;
    L->used[L->n_used] = a;
    L->count[L->n_used] = 0;
    return L->n_used++;
}

/* Each row's uses as entries of the table of resident adapters, in its sequence's order, every
 * row with the context's uses (the rest LLMM_LORA_NO_ENTRY): the step names them as data. */
static void describe_uses(const llmm__lora_ctx *L, const llmm_context *ctx, const llmm_seq_id *seqs, size_t n,
                          llmm_step *step) {
    const uint32_t uses = L->uses;
    for (size_t r = 0; r < n; r++) {
        const llmm__seq_adapters *sa = &L->seqs[seqs[r]];
        for (uint32_t u = 0; u < uses; u++) {
            const int runs = u < sa->n && sa->scale[u] != 0.f;
            L->step_entry[r * uses + u] = runs ? llmm__lora_dev_entry(ctx, sa->a[u]) : LLMM_LORA_NO_ENTRY;
            L->step_scale[r * uses + u] = runs ? sa->scale[u] : 0.f;
        }
    }
    step->lora_uses = uses;
    step->lora_entry = L->step_entry;
    step->lora_scale = L->step_scale;
}

void llmm__lora_plan(llmm_context *ctx, const llmm_seq_id *seqs, size_t n, llmm_step *step) {
    llmm__lora_ctx *L = ctx->lora;
    if (!L) return;
    if (L->table_cap && L->n_dev && L->uses) describe_uses(L, ctx, seqs, n, step);
    L->n_used = 0;
    for (size_t r = 0; r < n; r++) {
        const llmm__seq_adapters *sa = &L->seqs[seqs[r]];
        for (uint32_t i = 0; i < sa->n; i++)
            if (sa->scale[i] != 0.f) L->count[use_index(L, sa->a[i])]++;
    }
    if (!L->n_used) return;
    L->first[0] = 0;
    for (uint32_t u = 0; u < L->n_used; u++) {
        L->first[u + 1] = L->first[u] + L->count[u];
        L->count[u] = 0;
    }
    /* rows in ascending order within each adapter's run */
    for (size_t r = 0; r < n; r++) {
        const llmm__seq_adapters *sa = &L->seqs[seqs[r]];
        for (uint32_t i = 0; i < sa->n; i++) {
            if (sa->scale[i] == 0.f) continue;
            const uint32_t u = use_index(L, sa->a[i]), k = L->first[u] + L->count[u]++;
            L->rows[k] = (uint32_t)r;
            L->row_scale[k] = sa->scale[i];
        }
    }
}

/* out rows += scale_i * y rows: in one call when every row of the step is there with one scale */
static llmm_status scatter_add(llmm_context *ctx, const llmm_adapter *a, const llmm__lora_pair *p,
                               const uint32_t *rows, const float *scales, size_t c, int whole, size_t row0,
                               float *out, size_t n_out) {
    const llmm_backend_ops *be = ctx->be;
    void *s = ctx->be_state;
    float *y = ctx->lora->yg;
    int one_scale = 1;
    for (size_t i = 1; i < c; i++) one_scale &= scales[i] == scales[0];
    if (whole && one_scale) {
        TRY(be->scale(s, y, c * n_out, llmm__lora_scale(a, p, scales[0])));
        return be->add(s, out, y, c * n_out);
    }
    for (size_t i = 0; i < c; i++) {
        TRY(be->scale(s, y + i * n_out, n_out, llmm__lora_scale(a, p, scales[i])));
        TRY(be->add(s, out + (rows[i] - row0) * n_out, y + i * n_out, n_out));
    }
    return LLMM_OK;
}

/* Rows rows[0..c) (step rows, minus row0) of x (width cols) as the operand: x itself when they
 * are all the rows in order, else a gathered copy. */
static llmm_status gather(llmm_context *ctx, const float *x, size_t cols, const uint32_t *rows, size_t c, int whole,
                          size_t row0, const float **in) {
    if (whole) {
        *in = x;
        return LLMM_OK;
    }
    float *g = ctx->lora->xg;
    for (size_t i = 0; i < c; i++)
        TRY(ctx->be->copy(ctx->be_state, g + i * cols, x + (rows[i] - row0) * cols, cols * sizeof(float)));
    *in = g;
    return LLMM_OK;
}

/* The first of an adapter's rows at or after row0. */
static size_t skip_rows_before(const uint32_t *rows, size_t c, size_t row0) {
    size_t k = 0;
    while (k < c && rows[k] < row0) k++;
    return k;
}

/* Adapter u's rows of the step from row0 on that slot adapts: their count (0 when the adapter
 * leaves the slot alone), the first at *k0, the slot's pair in *p. */
static size_t slot_rows(const llmm__lora_ctx *L, uint32_t u, size_t slot, size_t row0, const llmm__lora_pair **p,
                        size_t *k0) {
    *p = &L->used[u]->slots[slot];
    if (!(*p)->a.data) return 0;
    *k0 = L->first[u] + skip_rows_before(L->rows + L->first[u], L->first[u + 1] - L->first[u], row0);
    return L->first[u + 1] - *k0;
}

/* The groups of slot's adapters (rows from row0 on) into groups, their rows and scales from *k
 * on in the call buffers; returns how many. */
static size_t add_groups(const llmm_context *ctx, size_t slot, size_t row0, llmm_lora_group *groups, size_t *k) {
    llmm__lora_ctx *L = ctx->lora;
    const int dev = (ctx->be->flags & LLMM_BACKEND_DEVICE_MEMORY) != 0;
    size_t n_groups = 0;
    for (uint32_t u = 0; u < L->n_used; u++) {
        const llmm_adapter *a = L->used[u];
        const llmm__lora_pair *p;
        size_t k0;
        const size_t c = slot_rows(L, u, slot, row0, &p, &k0);
        if (c == 0) continue;
        for (size_t i = 0; i < c; i++) {
            L->call_rows[*k + i] = L->rows[k0 + i] - (uint32_t)row0;
            L->call_scale[*k + i] = llmm__lora_scale(a, p, L->row_scale[k0 + i]);
        }
        const llmm__lora_pair *op = dev ? &llmm__lora_dev_slots(ctx, a)[slot] : p; /* attach made it */
        groups[n_groups++] = (llmm_lora_group){
            .a = &op->a_rows, .bt = &op->bt, .rows = L->call_rows + *k, .scales = L->call_scale + *k, .count = c};
        *k += c;
    }
    return n_groups;
}

/* Every adapter's deltas of the slots in one lora_delta call. */
static llmm_status apply_delta(llmm_context *ctx, const llmm__lora_out *outs, size_t n_outs, const float *x,
                               size_t n_in, size_t row0) {
    llmm__lora_ctx *L = ctx->lora;
    llmm_lora_part parts[LLMM__LORA_MAX_PARTS];
    size_t n_parts = 0, k = 0, g0 = 0;
    for (size_t i = 0; i < n_outs; i++) {
        const size_t n_groups = add_groups(ctx, outs[i].slot, row0, L->groups + g0, &k);
        if (n_groups)
            parts[n_parts++] = (llmm_lora_part){.out = outs[i].out, .n_out = outs[i].n_out, .groups = L->groups + g0,
                                                .n_groups = n_groups};
        g0 += n_groups;
    }
    if (n_parts == 0) return LLMM_OK;
    return ctx->be->lora_delta(ctx->be_state, x, n_in, parts, n_parts, L->tg);
}

/* One slot's deltas composed from the backend's matmul, copy, scale and add. */
static llmm_status apply_composed(llmm_context *ctx, size_t slot, const float *x, size_t n_in, float *out,
                                  size_t n_out, size_t row0, size_t n) {
    llmm__lora_ctx *L = ctx->lora;
    const llmm_backend_ops *be = ctx->be;
    for (uint32_t u = 0; u < L->n_used; u++) {
        const llmm_adapter *a = L->used[u];
        const llmm__lora_pair *p;
        size_t k0;
        const size_t c = slot_rows(L, u, slot, row0, &p, &k0);
        if (c == 0) continue;
        const int whole = c == n - row0;
        const float *in;
        TRY(gather(ctx, x, n_in, L->rows + k0, c, whole, row0, &in));
        TRY(be->matmul(ctx->be_state, &p->a, in, c, L->tg)); /* (c, rank) */
        TRY(be->matmul(ctx->be_state, &p->b, L->tg, c, L->yg)); /* (c, n_out) */
        TRY(scatter_add(ctx, a, p, L->rows + k0, L->row_scale + k0, c, whole, row0, out, n_out));
    }
    return LLMM_OK;
}

/* Every row's deltas of the slots that some resident adapter adapts, in one lora_rows call. It
 * is made whether or not the step's rows run with adapters, so that a decode step's launches
 * depend on its rows and on the resident set only: the rows' choices are the step's data. */
static llmm_status apply_table(llmm_context *ctx, const llmm__lora_out *outs, size_t n_outs, const float *x,
                               size_t n_in, size_t row0) {
    llmm__lora_ctx *L = ctx->lora;
    llmm_lora_slot_part parts[LLMM__LORA_MAX_PARTS];
    size_t n_parts = 0;
    for (size_t i = 0; i < n_outs; i++)
        if (L->slot_users[outs[i].slot])
            parts[n_parts++] =
                (llmm_lora_slot_part){.slot = (uint32_t)outs[i].slot, .out = outs[i].out, .n_out = outs[i].n_out};
    if (n_parts == 0) return LLMM_OK;
    return ctx->be->lora_rows(ctx->be_state, x, n_in, parts, n_parts, row0, L->tg, L->t_cols);
}

llmm_status llmm__lora_apply_outs(llmm_context *ctx, const llmm__lora_out *outs, size_t n_outs, const float *x,
                                  size_t n_in, size_t row0, size_t n) {
    llmm__lora_ctx *L = ctx->lora;
    if (L && L->table_cap) return L->n_dev && L->uses ? apply_table(ctx, outs, n_outs, x, n_in, row0) : LLMM_OK;
    if (!L || !L->n_used) return LLMM_OK;
    if (ctx->be->lora_delta) return apply_delta(ctx, outs, n_outs, x, n_in, row0);
    for (size_t i = 0; i < n_outs; i++)
        TRY(apply_composed(ctx, outs[i].slot, x, n_in, outs[i].out, outs[i].n_out, row0, n));
    return LLMM_OK;
}

llmm_status llmm__lora_apply(llmm_context *ctx, size_t slot, const float *x, size_t n_in, float *out, size_t n_out,
                             size_t row0, size_t n) {
    const llmm__lora_out one = {.slot = slot, .out = out, .n_out = n_out};
    return llmm__lora_apply_outs(ctx, &one, 1, x, n_in, row0, n);
}

llmm_status llmm__lora_apply_embd(llmm_context *ctx, float *x, size_t n) {
    llmm__lora_ctx *L = ctx->lora;
    if (!L || !L->n_used) return LLMM_OK;
    const llmm_backend_ops *be = ctx->be;
    const size_t n_embd = ctx->model->hp.n_embd;
    for (uint32_t u = 0; u < L->n_used; u++) {
        const llmm_adapter *a = L->used[u];
        const llmm__lora_pair *p = &a->slots[llmm__lora_global_slot(a, LLMM__LORA_EMBD)];
        if (!p->a.data) continue;
        const size_t k0 = L->first[u], c = L->first[u + 1] - k0;
        const int whole = c == n;
        TRY(be->embed(ctx->be_state, &p->a, L->tg)); /* (n, rank): A's rows of every row's token */
        const float *in;
        TRY(gather(ctx, L->tg, p->rank, L->rows + k0, c, whole, 0, &in));
        TRY(be->matmul(ctx->be_state, &p->b, in, c, L->yg)); /* (c, n_embd) */
        TRY(scatter_add(ctx, a, p, L->rows + k0, L->row_scale + k0, c, whole, 0, x, n_embd));
    }
    return LLMM_OK;
}
