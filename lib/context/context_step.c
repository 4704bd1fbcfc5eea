/* Contexts: creation, prefill and decode over the KV store, logits and sequence edits. */
#include "context.h"

#include <stdio.h>
#include <string.h>

#include "adapter_ctx.h"
#include "forward.h"
#include "format/quant.h"
#include "sampling/sampler.h"
#include "model/weights.h"

llmm_status llmm__ctx_fail(llmm_context *ctx, llmm_status status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ctx->last_error, sizeof ctx->last_error, fmt, ap);
    va_end(ap);
    llmm__log_msg(&ctx->log, LLMM_LOG_DEBUG, "%s", ctx->last_error);
    return status;
}

LLMM_API const char *llmm_context_last_error(const llmm_context *ctx) { return ctx ? ctx->last_error : ""; }

static llmm_status alloc_rows(llmm_context *ctx, float **buf, size_t width) {
    return ctx->be->buffer_alloc(ctx->be_state, ctx->max_rows * width * sizeof(float), (void **)buf);
}

static llmm_status alloc_activations(llmm_context *ctx) {
    const llmm_hparams *hp = &ctx->model->hp;
    const size_t q_dim = (size_t)hp->n_head * hp->head_dim, kv_dim = (size_t)hp->n_head_kv * hp->head_dim;
    llmm_activations *a = &ctx->act;
    llmm_status st;
    if ((st = alloc_rows(ctx, &a->x, hp->n_embd)) || (st = alloc_rows(ctx, &a->xb, LLMM_MAX(hp->n_embd, q_dim))) ||
        (st = alloc_rows(ctx, &a->q, q_dim)) || (st = alloc_rows(ctx, &a->k, kv_dim)) ||
        (st = alloc_rows(ctx, &a->v, kv_dim)) || (st = alloc_rows(ctx, &a->att, q_dim)) ||
        (st = alloc_rows(ctx, &a->gate, hp->n_ff)) || (st = alloc_rows(ctx, &a->up, hp->n_ff)) ||
        (st = alloc_rows(ctx, &a->logits, ctx->model->vocab.n_tokens)))
        return st;
    const llmm_allocator *al = ctx->model->alloc;
    ctx->pos = llmm__mem_calloc(al, ctx->max_rows, sizeof *ctx->pos);
    ctx->row_seq = llmm__mem_calloc(al, ctx->max_rows, sizeof *ctx->row_seq);
    ctx->step_row_seq = llmm__mem_calloc(al, ctx->max_rows, sizeof *ctx->step_row_seq);
    ctx->step_seq_ids = llmm__mem_calloc(al, ctx->max_rows, sizeof *ctx->step_seq_ids);
    ctx->step_tables = llmm__mem_calloc(al, ctx->max_rows, sizeof *ctx->step_tables);
    ctx->step_n_blocks = llmm__mem_calloc(al, ctx->max_rows, sizeof *ctx->step_n_blocks);
    ctx->sample_reqs = llmm__mem_calloc(al, ctx->max_rows, sizeof *ctx->sample_reqs);
    ctx->sampled = llmm__mem_calloc(al, ctx->max_rows, sizeof *ctx->sampled);
    ctx->sample_rng = llmm__mem_calloc(al, ctx->max_rows, sizeof *ctx->sample_rng);
    ctx->logits_cap = LLMM_MAX(ctx->params.n_seq_max, 1u);
    ctx->logits = llmm__mem_calloc(al, ctx->logits_cap * ctx->model->vocab.n_tokens, sizeof *ctx->logits);
    return ctx->pos && ctx->row_seq && ctx->step_row_seq && ctx->step_seq_ids && ctx->step_tables &&
                   ctx->step_n_blocks && ctx->sample_reqs && ctx->sampled && ctx->sample_rng &&
                   ctx->logits
               ? LLMM_OK
               : LLMM_ERR_NO_MEMORY;
}

static void free_activations(llmm_context *ctx) {
    float **bufs[] = {&ctx->act.x, &ctx->act.xb, &ctx->act.q, &ctx->act.k, &ctx->act.v,
                      &ctx->act.att, &ctx->act.gate, &ctx->act.up, &ctx->act.logits};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
        if (*bufs[i]) ctx->be->buffer_free(ctx->be_state, *bufs[i]);
    const llmm_allocator *al = ctx->model->alloc;
    llmm__mem_free(al, ctx->pos);
    llmm__mem_free(al, ctx->row_seq);
    llmm__mem_free(al, ctx->step_row_seq);
    llmm__mem_free(al, ctx->step_seq_ids);
    llmm__mem_free(al, ctx->step_tables);
    llmm__mem_free(al, ctx->step_n_blocks);
    llmm__mem_free(al, ctx->sample_reqs);
    llmm__mem_free(al, ctx->sampled);
    llmm__mem_free(al, ctx->sample_rng);
    llmm__mem_free(al, ctx->logits);
}

/* The name of a weight for messages: its tensor's in the file, found by its bytes. */
static const char *weight_name(const llmm_model *m, const llmm_tensor *t, char *buf, size_t cap) {
    snprintf(buf, cap, "?");
    for (uint64_t i = 0; i < m->gguf->n_tensors; i++) {
        const gguf_tensor *g = &m->gguf->tensors[i];
        const uint8_t *p = t->data, *g0 = g->data;
        if (p >= g0 && p < g0 + g->n_bytes) snprintf(buf, cap, "%.*s", (int)g->name.len, g->name.ptr);
    }
    return buf;
}

/* Every matrix and the embedding table must be of a type the backend computes. */
static llmm_status check_weight_types(const llmm_context *ctx, const llmm_weight_ref *list, size_t n, llmm_diag *d) {
    for (size_t i = 0; i < n; i++) {
        const llmm_tensor *t = list[i].t;
        if (list[i].role == LLMM_WEIGHT_VECTOR || ctx->be->supports_type(t->type)) continue;
        const llmm_type_traits *tt = llmm__type_get(t->type);
        char name[GGUF_MAX_NAME];
        return llmm__diag_fail(d, LLMM_ERR_UNSUPPORTED, "tensor '%s' has type %s, which the %s backend cannot compute",
                         weight_name(ctx->model, t, name, sizeof name), tt ? tt->name : "?", ctx->be->name);
    }
    return LLMM_OK;
}

/* ctx->w: the model's weights structure with each weight replaced by the backend's prepared
 * one; a tied embedding table is the prepared output matrix. */
static llmm_status prepare_weights(llmm_context *ctx, llmm_diag *d) {
    const llmm_model *m = ctx->model;
    const uint32_t n_layer = m->hp.n_layer;
    ctx->w = *m->weights;
    ctx->w.layers = llmm__mem_calloc(m->alloc, n_layer, sizeof *ctx->w.layers);
    if (!ctx->w.layers) return llmm__diag_fail(d, LLMM_ERR_NO_MEMORY, "out of memory");
    memcpy(ctx->w.layers, m->weights->layers, n_layer * sizeof *ctx->w.layers);
    const size_t n = llmm__weights_list(m->weights, n_layer, NULL);
    llmm_weight_ref *host = llmm__mem_calloc(m->alloc, n + 1, sizeof *host);
    llmm_weight_ref *mine = ctx->prepared = llmm__mem_calloc(m->alloc, n + 1, sizeof *mine);
    llmm_status st = host && mine ? LLMM_OK : llmm__diag_fail(d, LLMM_ERR_NO_MEMORY, "out of memory");
    if (!st) {
        llmm__weights_list(m->weights, n_layer, host);
        llmm__weights_list(&ctx->w, n_layer, mine);
        st = check_weight_types(ctx, host, n, d);
    }
    const llmm_context_params *p = &ctx->params;
    const double total = (double)llmm__weights_bytes(m->weights, n_layer);
    double done = 0;
    for (size_t i = 0; !st && i < n; i++) {
        st = ctx->be->prepare_weight(ctx->be_state, i, (llmm_weight_role)host[i].role, host[i].t, mine[i].t);
        if (st) {
            char name[GGUF_MAX_NAME];
            llmm__diag_fail(d, st, "the %s backend could not prepare tensor '%s' (%s)", ctx->be->name,
                      weight_name(m, host[i].t, name, sizeof name), llmm_status_str(st));
            break;
        }
        ctx->n_prepared = i + 1;
        done += (double)(host[i].t->row_bytes * (size_t)host[i].t->ne1);
        if (p->progress && p->progress(p->progress_user, total > 0 ? (float)LLMM_MIN(done / total, 1.0) : 1.0f)) {
            st = llmm__diag_fail(d, LLMM_ERR_ABORTED, "context creation cancelled by the progress callback");
            break;
        }
    }
    if (!st && llmm__weights_tied(m->weights)) ctx->w.tok_embd = ctx->w.output;
    llmm__mem_free(m->alloc, host);
    return st;
}

/* Before the backend shuts down: it frees what it prepared. */
static void release_weights(llmm_context *ctx) {
    const llmm_allocator *al = ctx->model->alloc;
    for (size_t i = 0; i < ctx->n_prepared; i++) ctx->be->release_weight(ctx->be_state, ctx->prepared[i].t);
    llmm__mem_free(al, ctx->prepared);
    llmm__mem_free(al, ctx->w.layers);
    ctx->prepared = NULL;
    ctx->w.layers = NULL;
    ctx->n_prepared = 0;
}

static llmm_status context_init(llmm_context *ctx, llmm_diag *d) {
    const llmm_model *m = ctx->model;
    llmm_context_params *p = &ctx->params;
    if (!ctx->be) {
        backend_ref ref;
        const double t0 = llmm__time_now_ms();
        llmm_status st = llmm__backend_acquire(p->backend, &ctx->log, &ref, d);
        if (st) return st;
        ctx->be = ref.ops;
        ctx->be_module = ref.module;
        if (ref.module) ctx->module_load_ms = llmm__time_now_ms() - t0;
    }
    if (!llmm__backend_table_ok(ctx->be))
        return llmm__diag_fail(d, LLMM_ERR_BACKEND, "the %s backend's table is of another version or incomplete",
                         ctx->be->name);
    ctx_plan plan;
    llmm_status st = llmm__ctx_plan_for(m, p, ctx->be, &plan, d);
    if (st) return st;
    llmm_backend_config cfg = {
        .n_threads = p->n_threads, .alloc = m->alloc, .log = &ctx->log,
        .n_weights = llmm__weights_list(m->weights, m->hp.n_layer, NULL),
        .shared = &((llmm_model *)m)->backend_shared[ctx->be->kind],
        .weights_mapped = m->gguf->mapping != NULL, .repack_weights = m->repack_weights, .device = p->device,
    };
    double t0 = llmm__time_now_ms();
    if ((st = ctx->be->init(&cfg, &ctx->be_state)))
        return llmm__diag_fail(d, st, "the %s backend failed to start on device %d", ctx->be->name, p->device);
    ctx->backend_init_ms = llmm__time_now_ms() - t0;
    t0 = llmm__time_now_ms();
    if ((st = prepare_weights(ctx, d))) return st;
    ctx->weights_ms = llmm__time_now_ms() - t0;
    ctx->max_rows = plan.shape.max_rows;
    if ((st = alloc_activations(ctx))) return llmm__diag_fail(d, st, "out of memory for activation buffers");
    if (ctx->be->reserve && (st = ctx->be->reserve(ctx->be_state, &plan.shape)))
        return llmm__diag_fail(d, st, "out of memory for %zu bytes of backend scratch", plan.scratch);
    if ((st = llmm__kv_init(&ctx->kv, ctx->be, ctx->be_state, m->alloc, &plan.kv, d))) return st;
    if (m->hp.n_ctx_train && p->n_ctx > m->hp.n_ctx_train)
        llmm__log_msg(&ctx->log, LLMM_LOG_WARN, "n_ctx %u exceeds the training context %u", p->n_ctx, m->hp.n_ctx_train);
    llmm__log_msg(&ctx->log, LLMM_LOG_INFO, "context: backend %s, n_ctx %u, %u sequences, KV pool %u blocks of %u (%.1f MiB)",
            ctx->be->name, p->n_ctx, p->n_seq_max, plan.kv.n_blocks, plan.kv.block_size,
            (double)plan.kv_pool / (1 << 20));
    return LLMM_OK;
}

/* Undo context_init, as far as it went. */
static void context_teardown(llmm_context *ctx) {
    if (ctx->be_state) {
        llmm__lora_free(ctx);
        llmm__adapter_cache_free(ctx);
        free_activations(ctx);
        llmm__kv_free(&ctx->kv);
        release_weights(ctx);
        ctx->be->shutdown(ctx->be_state);
    }
    /* the module's code and table stay mapped until its backend has shut down */
    backend_ref ref = {ctx->be, ctx->be_module};
    llmm__backend_release(&ref);
}

LLMM_API void llmm_context_free(llmm_context *ctx) {
    if (!ctx) return;
    context_teardown(ctx);
    llmm__mem_free(ctx->model->alloc, ctx);
}

/* AUTO's second chance: an accelerator that loaded but could not take this model (no driver
 * at init, too little device memory, a weight type it lacks) leaves the context to the CPU.
 * Parameter errors would only repeat there, and a cancelled creation stays cancelled. */
static llmm_status retry_on_cpu(llmm_context *ctx, llmm_status st, llmm_diag *d) {
    if (ctx->params.backend != LLMM_BACKEND_AUTO || !ctx->be || ctx->be->kind == LLMM_BACKEND_CPU ||
        st == LLMM_ERR_INVALID_ARG || st == LLMM_ERR_ABORTED)
        return st;
    llmm__log_msg(&ctx->log, LLMM_LOG_INFO, "backend: AUTO runs on the CPU: the %s backend failed: %s", ctx->be->name,
            d->msg);
    context_teardown(ctx);
    const llmm_context keep = *ctx;
    *ctx = (llmm_context){.model = keep.model, .params = keep.params, .log = keep.log};
    ctx->be = llmm__backend_select(LLMM_BACKEND_CPU);
    *d = (llmm_diag){{0}};
    return ctx->be ? context_init(ctx, d) : st;
}

llmm_status llmm__context_create_on(const llmm_model *model, const llmm_context_params *params, const llmm_backend_ops *be,
                              llmm_context **out) {
    if (!model || !out) return LLMM_ERR_INVALID_ARG;
    *out = NULL;
    if (model->vocab_only || !model->weights)
        return llmm__model_fail(model, LLMM_ERR_VOCAB_ONLY, "the model was loaded without weights (vocab_only)");
    llmm_context *ctx = llmm__mem_calloc(model->alloc, 1, sizeof *ctx);
    if (!ctx) return llmm__model_fail(model, LLMM_ERR_NO_MEMORY, "out of memory");
    ctx->model = model;
    ctx->be = be;
    llmm_context_params_default(&ctx->params, sizeof ctx->params);
    if (params && !llmm__struct_import(&ctx->params, sizeof ctx->params, params, CTX_PARAMS_V1_SIZE)) {
        llmm__mem_free(model->alloc, ctx);
        return llmm__model_fail(model, LLMM_ERR_INVALID_ARG, "llmm_context_create: params->size too small");
    }
    ctx->log = (llmm_logger){ctx->params.log, ctx->params.log_user, ctx->params.log_level};
    llmm_diag d = {{0}};
    llmm_status st = context_init(ctx, &d);
    if (st && !be) st = retry_on_cpu(ctx, st, &d);
    if (st) {
        llmm__model_fail(model, st, "%s", d.msg);
        llmm__log_msg(&ctx->log, LLMM_LOG_ERROR, "context creation failed: %s", d.msg);
        llmm_context_free(ctx);
        return st;
    }
    *out = ctx;
    return LLMM_OK;
}

LLMM_API llmm_status llmm_context_create(const llmm_model *model, const llmm_context_params *params,
                                         llmm_context **out) {
    return llmm__context_create_on(model, params, NULL, out);
}

llmm_status llmm__ctx_check_seq(llmm_context *ctx, llmm_seq_id seq) {
    if (seq < 0 || (uint32_t)seq >= ctx->params.n_seq_max)
        return llmm__ctx_fail(ctx, LLMM_ERR_INVALID_ARG, "sequence %d not in 0..%u", seq, ctx->params.n_seq_max - 1);
    return LLMM_OK;
}

static llmm_status check_tokens(llmm_context *ctx, const llmm_token *tokens, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (tokens[i] < 0 || (uint32_t)tokens[i] >= ctx->model->vocab.n_tokens)
            return llmm__ctx_fail(ctx, LLMM_ERR_INVALID_ARG, "token %d at index %zu is out of range", tokens[i], i);
    return LLMM_OK;
}

llmm_status llmm__ctx_ensure_logit_rows(llmm_context *ctx, size_t rows) {
    if (rows <= ctx->logits_cap) return LLMM_OK;
    size_t bytes;
    if (!size_mul_ok(rows, (size_t)ctx->model->vocab.n_tokens * sizeof(float), &bytes))
        return llmm__ctx_fail(ctx, LLMM_ERR_NO_MEMORY, "logits for %zu rows overflow", rows);
    float *p = llmm__mem_alloc(ctx->model->alloc, bytes);
    if (!p) return llmm__ctx_fail(ctx, LLMM_ERR_NO_MEMORY, "out of memory for logits of %zu rows", rows);
    llmm__mem_free(ctx->model->alloc, ctx->logits);
    ctx->logits = p;
    ctx->logits_cap = rows;
    return LLMM_OK;
}

static llmm_status step_failed(llmm_context *ctx, llmm_status st) {
    if (st == LLMM_ERR_ABORTED) return llmm__ctx_fail(ctx, st, "aborted by the abort callback");
    return llmm__ctx_fail(ctx, st, "the %s backend failed: %s", ctx->be->name, llmm_status_str(st));
}

static llmm_status pool_full(llmm_context *ctx, llmm_seq_id seq, size_t n) {
    return llmm__ctx_fail(ctx, LLMM_ERR_CONTEXT_FULL,
                    "the KV pool has no room for %zu more tokens of sequence %d (%u of %u blocks free; raise "
                    "n_ctx_total or kv_budget_bytes, or free sequences)",
                    n, seq, llmm__kv_available(&ctx->kv), ctx->kv.cfg.n_blocks);
}

/* The context's first call that computed logits, started at t0: what a first request pays. */
static void note_first_token(llmm_context *ctx, double t0) {
    if (ctx->first_token_ms == 0) ctx->first_token_ms = llmm__time_now_ms() - t0;
}

llmm_status llmm__ctx_fetch_logits(llmm_context *ctx, size_t dst_row, size_t m) {
    const size_t nv = ctx->model->vocab.n_tokens;
    return ctx->be->download(ctx->be_state, ctx->logits + dst_row * nv, ctx->act.logits, m * nv * sizeof(float));
}

/* Run tokens [done, n) of a prefill into seq in chunks of n_batch, committing each chunk. */
static llmm_status prefill_chunks(llmm_context *ctx, llmm_seq_id seq, const llmm_token *tokens, size_t done, size_t n,
                                  int all) {
    llmm_kv_store *kv = &ctx->kv;
    const size_t first_done = done;
    while (done < n) {
        if (done > first_done && ctx->params.abort && ctx->params.abort(ctx->params.abort_user))
            return LLMM_ERR_ABORTED;
        const size_t m = LLMM_MIN((size_t)ctx->params.n_batch, n - done);
        const int last = done + m == n;
        const uint32_t start = kv->seqs[seq].len;
        for (size_t i = 0; i < m; i++) ctx->pos[i] = (int32_t)(start + i);
        for (size_t i = 0; i < m; i++) ctx->row_seq[i] = seq;
        size_t first = all ? 0 : (last ? m - 1 : m);
        llmm_status st = llmm__forward_step(ctx, LLMM_STEP_PROMPT, tokens + done, ctx->row_seq, ctx->pos, m, first);
        if (!st && first < m) st = llmm__ctx_fetch_logits(ctx, all ? done : 0, m - first);
        if (st) return st;
        llmm__kv_commit(kv, (uint32_t)seq, tokens + done, (uint32_t)m);
        done += m;
    }
    return LLMM_OK;
}

LLMM_API llmm_status llmm_prefill(llmm_context *ctx, llmm_seq_id seq, const llmm_token *tokens, size_t n,
                                  uint32_t flags) {
    if (!ctx) return LLMM_ERR_INVALID_ARG;
    if (!tokens || n == 0) return llmm__ctx_fail(ctx, LLMM_ERR_INVALID_ARG, "llmm_prefill: no tokens");
    if (flags & ~LLMM_PREFILL_ALL_LOGITS) return llmm__ctx_fail(ctx, LLMM_ERR_INVALID_ARG, "llmm_prefill: unknown flags");
    llmm_status st;
    if ((st = llmm__ctx_check_seq(ctx, seq)) || (st = check_tokens(ctx, tokens, n))) return st;
    llmm_kv_store *kv = &ctx->kv;
    const uint32_t start = kv->seqs[seq].len;
    if (n > ctx->params.n_ctx - start)
        return llmm__ctx_fail(ctx, LLMM_ERR_CONTEXT_FULL, "sequence %d holds %u tokens; %zu more exceed n_ctx %u", seq, start,
                        n, ctx->params.n_ctx);
    const int all = (flags & LLMM_PREFILL_ALL_LOGITS) != 0;
    if ((st = llmm__ctx_ensure_logit_rows(ctx, all ? n : 1))) return st;
    const double t0 = llmm__time_now_ms();
    ctx->logits_rows = 0;
    ctx->logits_on_device = 0;
    /* every position's logits need every position computed: no prefix reuse then */
    const size_t reused = all ? 0 : llmm__kv_prefix_attach(kv, (uint32_t)seq, tokens, (uint32_t)n);
    st = llmm__kv_reserve(kv, (uint32_t)seq, (uint32_t)(n - reused));
    if (st == LLMM_ERR_CONTEXT_FULL) {
        llmm__kv_truncate(kv, (uint32_t)seq, start);
        return pool_full(ctx, seq, n);
    }
    if (!st) st = prefill_chunks(ctx, seq, tokens, reused, n, all);
    ctx->prefill_ms += llmm__time_now_ms() - t0;
    if (st) {
        llmm__kv_truncate(kv, (uint32_t)seq, start);
        return step_failed(ctx, st);
    }
    ctx->tokens_prefilled += n - reused;
    ctx->prefix_hits += reused;
    ctx->logits_rows = all ? n : 1;
    note_first_token(ctx, t0);
    return LLMM_OK;
}

static llmm_status check_decode_rows(llmm_context *ctx, const llmm_seq_id *seqs, size_t n) {
    llmm_status st;
    for (size_t i = 0; i < n; i++) {
        if ((st = llmm__ctx_check_seq(ctx, seqs[i]))) return st;
        for (size_t j = 0; j < i; j++)
            if (seqs[j] == seqs[i]) return llmm__ctx_fail(ctx, LLMM_ERR_INVALID_ARG, "sequence %d appears twice", seqs[i]);
        if (ctx->kv.seqs[seqs[i]].len >= ctx->params.n_ctx)
            return llmm__ctx_fail(ctx, LLMM_ERR_CONTEXT_FULL, "sequence %d is full (n_ctx %u)", seqs[i], ctx->params.n_ctx);
    }
    return LLMM_OK;
}

/* Reserve one position in each sequence; on failure undo those reserved. */
static llmm_status reserve_rows(llmm_context *ctx, const llmm_seq_id *seqs, size_t n) {
    for (size_t i = 0; i < n; i++) {
        ctx->pos[i] = (int32_t)ctx->kv.seqs[seqs[i]].len;
        llmm_status st = llmm__kv_reserve(&ctx->kv, (uint32_t)seqs[i], 1);
        if (st) {
            for (size_t j = 0; j < i; j++) llmm__kv_truncate(&ctx->kv, (uint32_t)seqs[j], (uint32_t)ctx->pos[j]);
            return st == LLMM_ERR_CONTEXT_FULL ? pool_full(ctx, seqs[i], 1) : step_failed(ctx, st);
        }
    }
    return LLMM_OK;
}

/* One decode step over n rows (checked by the caller); fetch: copy the logits to the host now,
 * else leave them in act.logits (llmm_decode_sample: llmm__ctx_settle_logits copies them when asked). */
static llmm_status decode_rows(llmm_context *ctx, const llmm_seq_id *seqs, const llmm_token *tokens, size_t n,
                               int fetch) {
    llmm_status st;
    const double t0 = llmm__time_now_ms();
    ctx->logits_rows = 0;
    ctx->logits_on_device = 0;
    if ((st = reserve_rows(ctx, seqs, n))) return st;
    st = llmm__forward_step(ctx, LLMM_STEP_DECODE, tokens, seqs, ctx->pos, n, 0);
    if (!st && fetch) st = llmm__ctx_fetch_logits(ctx, 0, n);
    if (st) {
        for (size_t i = 0; i < n; i++) llmm__kv_truncate(&ctx->kv, (uint32_t)seqs[i], (uint32_t)ctx->pos[i]);
        ctx->decode_ms += llmm__time_now_ms() - t0;
        return step_failed(ctx, st);
    }
    for (size_t i = 0; i < n; i++) llmm__kv_commit(&ctx->kv, (uint32_t)seqs[i], &tokens[i], 1);
    ctx->logits_rows = n;
    ctx->logits_on_device = !fetch;
    ctx->tokens_decoded += n;
    ctx->decode_ms += llmm__time_now_ms() - t0;
    note_first_token(ctx, t0);
    return LLMM_OK;
}

static llmm_status check_decode(llmm_context *ctx, const char *fn, const llmm_seq_id *seqs, const llmm_token *tokens,
                                size_t n) {
    if (!seqs || !tokens || n == 0) return llmm__ctx_fail(ctx, LLMM_ERR_INVALID_ARG, "%s: no tokens", fn);
    if (n > ctx->params.n_seq_max)
        return llmm__ctx_fail(ctx, LLMM_ERR_INVALID_ARG, "%s: %zu rows but n_seq_max is %u", fn, n, ctx->params.n_seq_max);
    llmm_status st;
    if ((st = check_tokens(ctx, tokens, n)) || (st = check_decode_rows(ctx, seqs, n))) return st;
    return LLMM_OK;
}

LLMM_API llmm_status llmm_decode(llmm_context *ctx, const llmm_seq_id *seqs, const llmm_token *tokens, size_t n) {
    if (!ctx) return LLMM_ERR_INVALID_ARG;
    llmm_status st = check_decode(ctx, "llmm_decode", seqs, tokens, n);
    return st ? st : decode_rows(ctx, seqs, tokens, n, 1);
}

llmm_status llmm__ctx_settle_logits(llmm_context *ctx) {
    if (!ctx->logits_on_device) return LLMM_OK;
    llmm_status st = llmm__ctx_fetch_logits(ctx, 0, ctx->logits_rows);
    if (st) {
        ctx->logits_rows = 0; /* act.logits is not trusted after a failed copy */
        ctx->logits_on_device = 0;
        return llmm__ctx_fail(ctx, st, "copying the logits from the %s backend failed: %s", ctx->be->name,
                        llmm_status_str(st));
    }
    ctx->logits_on_device = 0;
    return LLMM_OK;
}

/* Samplers of rows [0, n), in row order, over the host logits (the backend has no sample slot,
 * or one of its rows had no token to give: NaN or +inf logits, or all -inf; then the host
 * reports which, as llmm_sample does, with the row's sequence and the position of the token it
 * was to choose). */
static llmm_status sample_on_host(llmm_context *ctx, const llmm_seq_id *seqs, llmm_sampler *const *samplers, size_t n,
                                  llmm_token *out) {
    llmm_status st = llmm__ctx_settle_logits(ctx);
    const size_t nv = ctx->model->vocab.n_tokens;
    for (size_t i = 0; i < n && !st; i++) {
        st = llmm_sample(samplers[i], ctx->logits + i * nv, nv, &out[i]);
        if (st) {
            out[i] = -1;
            return llmm__ctx_fail(ctx, st, "llmm_decode_sample: row %zu (sequence %d, position %d): %s", i, (int)seqs[i],
                            (int)ctx->pos[i] + 1, llmm_sampler_last_error(samplers[i]));
        }
    }
    return st;
}

/* The backend's sample slot over the logits where the step left them; only the ids come back.
 * Anything else (a request refused, a row without a token: -1 for NaN or +inf logits or all
 * -inf) rewinds the samplers' RNGs and samples every row on the host, so that the error and the
 * RNG streams are exactly llmm_sample's (rewound in reverse row order: a sampler serving several
 * rows ends at its first row's state). */
static llmm_status sample_on_backend(llmm_context *ctx, const llmm_seq_id *seqs, llmm_sampler *const *samplers,
                                     size_t n, llmm_token *out) {
    const size_t nv = ctx->model->vocab.n_tokens;
    size_t drawn = 0;
    llmm_status st = LLMM_OK;
    for (; drawn < n; drawn++) {
        llmm__sampler_rng_save(samplers[drawn], ctx->sample_rng[drawn]);
        if ((st = llmm__sampler_request(samplers[drawn], nv, &ctx->sample_reqs[drawn]))) break;
    }
    if (!st) st = ctx->be->sample(ctx->be_state, ctx->act.logits, n, nv, ctx->sample_reqs, ctx->sampled);
    int all_found = !st;
    for (size_t i = 0; i < n && all_found; i++) all_found = ctx->sampled[i] >= 0 && (size_t)ctx->sampled[i] < nv;
    if (all_found) {
        for (size_t i = 0; i < n; i++) out[i] = ctx->sampled[i];
        return LLMM_OK;
    }
    for (size_t i = drawn < n ? drawn + 1 : n; i-- > 0;) llmm__sampler_rng_restore(samplers[i], ctx->sample_rng[i]);
    if (st == LLMM_ERR_BACKEND || st == LLMM_ERR_NO_MEMORY)
        return llmm__ctx_fail(ctx, st, "sampling on the %s backend failed: %s", ctx->be->name, llmm_status_str(st));
    return sample_on_host(ctx, seqs, samplers, n, out);
}

LLMM_API llmm_status llmm_decode_sample(llmm_context *ctx, const llmm_seq_id *seqs, const llmm_token *tokens, size_t n,
                                        llmm_sampler *const *samplers, llmm_token *out) {
    if (!ctx) return LLMM_ERR_INVALID_ARG;
    llmm_status st = check_decode(ctx, "llmm_decode_sample", seqs, tokens, n);
    if (st) return st;
    if (!samplers || !out) return llmm__ctx_fail(ctx, LLMM_ERR_INVALID_ARG, "llmm_decode_sample: NULL samplers or out");
    for (size_t i = 0; i < n; i++)
        if (!samplers[i]) return llmm__ctx_fail(ctx, LLMM_ERR_INVALID_ARG, "llmm_decode_sample: samplers[%zu] is NULL", i);
    const int on_backend = ctx->be->sample != NULL;
    if ((st = decode_rows(ctx, seqs, tokens, n, !on_backend))) return st;
    const double t0 = llmm__time_now_ms();
    st = on_backend ? sample_on_backend(ctx, seqs, samplers, n, out) : sample_on_host(ctx, seqs, samplers, n, out);
    ctx->decode_ms += llmm__time_now_ms() - t0;
    return st;
}

LLMM_API llmm_status llmm_logits(llmm_context *ctx, size_t i, const float **out, size_t *n_vocab) {
    if (!ctx) return LLMM_ERR_INVALID_ARG;
    if (!out) return llmm__ctx_fail(ctx, LLMM_ERR_INVALID_ARG, "llmm_logits: NULL out");
    if (i >= ctx->logits_rows)
        return llmm__ctx_fail(ctx, LLMM_ERR_NOT_FOUND, "no logits row %zu (the last step kept %zu)", i, ctx->logits_rows);
    llmm_status st = llmm__ctx_settle_logits(ctx);
    if (st) return st;
    const size_t nv = ctx->model->vocab.n_tokens;
    *out = ctx->logits + i * nv;
    if (n_vocab) *n_vocab = nv;
    return LLMM_OK;
}

LLMM_API llmm_status llmm_context_get_stats(llmm_context *ctx, llmm_context_stats *stats) {
    if (!ctx) return LLMM_ERR_INVALID_ARG;
    /* the first version ends with prefix_hits; later fields go after it */
    const size_t v1_size = offsetof(llmm_context_stats, prefix_hits) + sizeof stats->prefix_hits;
    if (!stats || stats->size < v1_size)
        return llmm__ctx_fail(ctx, LLMM_ERR_INVALID_ARG, "llmm_context_get_stats: NULL stats or stats->size too small");
    llmm_context_stats s = {.size = sizeof s};
    llmm__kv_stats(&ctx->kv, &s);
    s.tokens_prefilled = ctx->tokens_prefilled;
    s.tokens_decoded = ctx->tokens_decoded;
    s.prefill_ms = ctx->prefill_ms;
    s.decode_ms = ctx->decode_ms;
    s.prefix_hits = ctx->prefix_hits;
    s.module_load_ms = ctx->module_load_ms;
    s.backend_init_ms = ctx->backend_init_ms;
    s.weights_ms = ctx->weights_ms;
    s.warmup_ms = ctx->warmup_ms;
    s.first_token_ms = ctx->first_token_ms;
    if (ctx->be->stats) {
        llmm_backend_stats b = {0};
        ctx->be->stats(ctx->be_state, &b);
        s.graph_capture_ms = b.graph_capture_ms;
        s.graphs = b.graphs;
        s.graph_replays = b.graph_replays;
    }
    llmm__struct_export(stats, &s, sizeof s, v1_size);
    return LLMM_OK;
}
