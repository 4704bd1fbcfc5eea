/* llmm_context_warmup: dummy decode steps that move a context's one-time costs (CUDA graph
 * captures and kernel loading, the CPU backend's packed weight copies) out of its first
 * request. A decode step of n rows is what a backend captures per batch size, so the warm-up
 * runs one of each size up to WARMUP_MAX_ROWS on sequence ids nobody holds, at position 0,
 * and gives their blocks back: the sequences in use, the logits and the work counters stay as
 * they were. The steps are marked (llmm_step.warmup) so that the CPU backend makes all its
 * copies in the first one, where a normal step makes a bounded share. */
#include "context.h"
#include "forward.h"

/* The batch sizes warmed: single-sequence decode and the small batches the decode kernels
 * are written for; larger batches are captured at their first step. */
#define WARMUP_MAX_ROWS 8

/* One dummy decode step of n rows on the sequences ids[0..n), all empty before and after. */
static llmm_status warm_step(llmm_context *ctx, const llmm_seq_id *ids, const llmm_token *tokens, size_t n) {
    llmm_kv_store *kv = &ctx->kv;
    size_t reserved = 0;
    llmm_status st = LLMM_OK;
    for (; reserved < n; reserved++) {
        ctx->pos[reserved] = 0;
        if ((st = llmm__kv_reserve(kv, (uint32_t)ids[reserved], 1))) break;
    }
    if (!st) st = llmm__forward_step(ctx, LLMM_STEP_DECODE, tokens, ids, ctx->pos, n, 0);
    for (size_t i = 0; i < reserved; i++) llmm__kv_truncate(kv, (uint32_t)ids[i], 0);
    return st;
}

LLMM_API llmm_status llmm_context_warmup(llmm_context *ctx) {
    if (!ctx) return LLMM_ERR_INVALID_ARG;
    /* the dummy steps overwrite the backend's logits rows: keep llmm_decode_sample's readable */
    llmm_status st = llmm__ctx_settle_logits(ctx);
    if (st) return st;
    const double t0 = llmm__time_now_ms();
    const llmm_kv_store *kv = &ctx->kv;
    llmm_seq_id ids[WARMUP_MAX_ROWS];
    size_t n_ids = 0;
    for (uint32_t s = 0; s < ctx->params.n_seq_max && n_ids < WARMUP_MAX_ROWS; s++)
        if (kv->seqs[s].len == 0 && kv->seqs[s].n_blocks == 0 && !kv->seqs[s].created) ids[n_ids++] = (llmm_seq_id)s;
    /* each dummy row takes one free block at position 0 (never a cached prefix's) */
    const size_t rows = LLMM_MIN(n_ids, (size_t)kv->n_free);
    if (rows == 0)
        return llmm__ctx_fail(ctx, LLMM_ERR_CONTEXT_FULL,
                        "llmm_context_warmup: no unused sequence id or free KV block to run a dummy step on");
    const llmm_token tokens[WARMUP_MAX_ROWS] = {0}; /* every vocabulary has token 0 */
    ctx->warming = 1;
    for (size_t n = 1; n <= rows && !st; n++) st = warm_step(ctx, ids, tokens, n);
    ctx->warming = 0;
    ctx->warmup_ms += llmm__time_now_ms() - t0;
    if (st == LLMM_ERR_ABORTED) return llmm__ctx_fail(ctx, st, "llmm_context_warmup: aborted by the abort callback");
    if (st) return llmm__ctx_fail(ctx, st, "llmm_context_warmup: the %s backend failed: %s", ctx->be->name, llmm_status_str(st));
    return LLMM_OK;
}
