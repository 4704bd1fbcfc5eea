/* llmm_context_warmup: dummy steps that move a context's one-time costs (CUDA graph
 * captures and kernel loading, the CPU backend's packed weight copies, the first touch of the
 * buffers a step of many rows uses) out of its first request. A decode step of n rows is what a
 * backend captures per batch size, so the warm-up runs one of each size up to WARMUP_MAX_ROWS
 * on sequence ids nobody holds, at position 0, then one prompt step of up to
 * WARMUP_PROMPT_ROWS positions with every row's logits (the shape of a speculative verify
 * step, and of a short prompt chunk), and gives their blocks back: the sequences in use, the
 * logits and the work counters stay as they were. The steps are marked (llmm_step.warmup) so
 * that the CPU backend makes all its copies in the first one, where a normal step makes a
 * bounded share. */
#include "context.h"
#include "forward.h"

/* The batch sizes warmed: single-sequence decode and the small batches the decode kernels
 * are written for; larger batches are captured at their first step. */
#define WARMUP_MAX_ROWS 8
/* Positions of the prompt step: a verify step of 15 guesses (llmm_generate's largest draft). */
#define WARMUP_PROMPT_ROWS 16

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

/* One dummy prompt step of n positions from 0 on the empty sequence id, every row's logits
 * computed, the sequence empty again afterwards. */
static llmm_status warm_prompt(llmm_context *ctx, llmm_seq_id id, const llmm_token *tokens, size_t n) {
    llmm_kv_store *kv = &ctx->kv;
    for (size_t i = 0; i < n; i++) {
        ctx->pos[i] = (int32_t)i;
        ctx->row_seq[i] = id;
    }
    llmm_status st = llmm__kv_reserve(kv, (uint32_t)id, (uint32_t)n);
    if (!st) st = llmm__forward_step(ctx, LLMM_STEP_PROMPT, tokens, ctx->row_seq, ctx->pos, n, 0);
    llmm__kv_truncate(kv, (uint32_t)id, 0);
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
    const llmm_token tokens[WARMUP_PROMPT_ROWS] = {0}; /* every vocabulary has token 0 */
    /* the prompt step's positions fit in the blocks left free and in one step */
    const size_t prompt_rows = LLMM_MIN(LLMM_MIN((size_t)WARMUP_PROMPT_ROWS, ctx->max_rows),
                                        LLMM_MIN((size_t)kv->n_free * kv->cfg.block_size, (size_t)kv->cfg.n_ctx));
    ctx->warming = 1;
    for (size_t n = 1; n <= rows && !st; n++) st = warm_step(ctx, ids, tokens, n);
    if (!st && prompt_rows > 1) st = warm_prompt(ctx, ids[0], tokens, prompt_rows);
    ctx->warming = 0;
    ctx->warmup_ms += llmm__time_now_ms() - t0;
    if (st == LLMM_ERR_ABORTED) return llmm__ctx_fail(ctx, st, "llmm_context_warmup: aborted by the abort callback");
    if (st) return llmm__ctx_fail(ctx, st, "llmm_context_warmup: the %s backend failed: %s", ctx->be->name, llmm_status_str(st));
    return LLMM_OK;
}
