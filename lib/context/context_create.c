/* Creating a context: its backend, the prepared weights, the KV pool and the activation
 * buffers, with AUTO's fallback to the CPU when an accelerator cannot take the model. */
#include "context.h"

#include <stdio.h>
#include <string.h>

#include "backend/select.h"
#include "format/quant.h"
#include "model/weights.h"

static llmm_status alloc_rows(llmm_context *ctx, float **buf, size_t rows, size_t width) {
    return ctx->be->buffer_alloc(ctx->be_state, rows * width * sizeof(float), (void **)buf);
}

static llmm_status alloc_activations(llmm_context *ctx) {
    const llmm_hparams *hp = &ctx->model->hp;
    const size_t q_dim = (size_t)hp->n_head * hp->head_dim, kv_dim = (size_t)hp->n_head_kv * hp->head_dim;
    llmm_activations *a = &ctx->act;
    llmm_status st;
    const size_t r = ctx->max_rows;
    if ((st = alloc_rows(ctx, &a->x, r, hp->n_embd)) || (st = alloc_rows(ctx, &a->xb, r, LLMM_MAX(hp->n_embd, q_dim))) ||
        (st = alloc_rows(ctx, &a->q, r, q_dim)) || (st = alloc_rows(ctx, &a->k, r, kv_dim)) ||
        (st = alloc_rows(ctx, &a->v, r, kv_dim)) || (st = alloc_rows(ctx, &a->att, r, q_dim)) ||
        (st = alloc_rows(ctx, &a->gate, r, hp->n_ff)) || (st = alloc_rows(ctx, &a->up, r, hp->n_ff)) ||
        /* only the rows a step asks logits for: n_outputs_max, not max_rows (llmm_context_params) */
        (st = alloc_rows(ctx, &a->logits, ctx->params.n_outputs_max, ctx->model->vocab.n_tokens)))
        return st;
    if (ctx->model->weights->mixer_floats && (st = alloc_rows(ctx, &a->mix, r, ctx->model->weights->mixer_floats)))
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
    if ((st = llmm__recurrent_init(ctx, d))) return st;
    if (m->hp.n_ctx_train && p->n_ctx > m->hp.n_ctx_train)
        llmm__log_msg(&ctx->log, LLMM_LOG_WARN, "n_ctx %u exceeds the training context %u", p->n_ctx, m->hp.n_ctx_train);
    llmm__log_msg(&ctx->log, LLMM_LOG_INFO, "context: backend %s, n_ctx %u, %u sequences, KV pool %u blocks of %u (%.1f MiB)",
            ctx->be->name, p->n_ctx, p->n_seq_max, plan.kv.n_blocks, plan.kv.block_size,
            (double)plan.kv_pool / (1 << 20));
    return LLMM_OK;
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
    llmm__ctx_teardown(ctx);
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
