/* A context's own helpers: its error record, argument checks, host logits rows and counters. */
#include "context.h"

#include <stdio.h>
#include <string.h>

llmm_status llmm__ctx_fail(llmm_context *ctx, llmm_status status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ctx->last_error, sizeof ctx->last_error, fmt, ap);
    va_end(ap);
    llmm__log_msg(&ctx->log, LLMM_LOG_DEBUG, "%s", ctx->last_error);
    return status;
}

LLMM_API const char *llmm_context_last_error(const llmm_context *ctx) { return ctx ? ctx->last_error : ""; }

llmm_status llmm__ctx_check_seq(llmm_context *ctx, llmm_seq_id seq) {
    if (seq < 0 || (uint32_t)seq >= ctx->params.n_seq_max)
        return llmm__ctx_fail(ctx, LLMM_ERR_INVALID_ARG, "sequence %d not in 0..%u", seq, ctx->params.n_seq_max - 1);
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

llmm_status llmm__ctx_fetch_logits(llmm_context *ctx, size_t dst_row, size_t m) {
    const size_t nv = ctx->model->vocab.n_tokens;
    return ctx->be->download(ctx->be_state, ctx->logits + dst_row * nv, ctx->act.logits, m * nv * sizeof(float));
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
    s.n_requests = ctx->request_first_token.n;
    llmm__latency_export(&ctx->request_first_token, &s.request_first_token_ms_p50, &s.request_first_token_ms_p95,
                         &s.request_first_token_ms_p99, &s.request_first_token_ms_max);
    llmm__latency_export(&ctx->inter_token, &s.inter_token_ms_p50, &s.inter_token_ms_p95, &s.inter_token_ms_p99,
                         &s.inter_token_ms_max);
    llmm__latency_export(&ctx->step_latency, &s.step_ms_p50, &s.step_ms_p95, &s.step_ms_p99, &s.step_ms_max);
    llmm__struct_export(stats, &s, sizeof s, v1_size);
    return LLMM_OK;
}
