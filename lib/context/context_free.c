/* Tearing a context down: adapters, activations, the KV pool, the prepared weights, then the
 * backend and its module, in that order. */
#include "context.h"

#include "adapter_ctx.h"
#include "backend/select.h"

static void free_activations(llmm_context *ctx) {
    float **bufs[] = {&ctx->act.x, &ctx->act.xb, &ctx->act.q, &ctx->act.k, &ctx->act.v,
                      &ctx->act.att, &ctx->act.gate, &ctx->act.up, &ctx->act.logits, &ctx->act.mix};
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

void llmm__ctx_teardown(llmm_context *ctx) {
    if (ctx->be_state) {
        llmm__lora_free(ctx);
        llmm__adapter_cache_free(ctx);
        free_activations(ctx);
        llmm__kv_free(&ctx->kv);
        llmm__recurrent_free(ctx);
        release_weights(ctx);
        ctx->be->shutdown(ctx->be_state);
    }
    /* the module's code and table stay mapped until its backend has shut down */
    backend_ref ref = {ctx->be, ctx->be_module};
    llmm__backend_release(&ref);
}

LLMM_API void llmm_context_free(llmm_context *ctx) {
    if (!ctx) return;
    llmm__ctx_teardown(ctx);
    llmm__mem_free(ctx->model->alloc, ctx);
}
