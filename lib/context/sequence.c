/* Sequence ids of a context: clear, truncate, length, create, free and fork. The blocks
 * behind them are kvcache.c's; here are the public checks and the id bookkeeping. */
#include "adapter_ctx.h"
#include "context.h"

LLMM_API llmm_status llmm_seq_clear(llmm_context *ctx, llmm_seq_id seq) { return llmm_seq_truncate(ctx, seq, 0); }

LLMM_API llmm_status llmm_seq_truncate(llmm_context *ctx, llmm_seq_id seq, size_t n_keep) {
    if (!ctx) return LLMM_ERR_INVALID_ARG;
    llmm_status st = llmm__ctx_check_seq(ctx, seq);
    if (st) return st;
    const uint32_t len = ctx->kv.seqs[seq].len;
    if (n_keep > len)
        return llmm__ctx_fail(ctx, LLMM_ERR_INVALID_ARG, "sequence %d holds %u tokens, cannot keep %zu", seq, len, n_keep);
    /* a recurrent state is the sequence's history folded into one state: the only earlier
     * position it can go back to is its checkpoint's (a cleared sequence starts from nothing) */
    if (ctx->rec.states && n_keep > 0 && n_keep < len) {
        if (n_keep != ctx->rec.checkpoint_len[seq])
            return llmm__ctx_fail(ctx, LLMM_ERR_UNSUPPORTED,
                                  "sequence %d: %s keeps a recurrent state, which cannot go back from %u tokens to %zu "
                                  "(no state checkpoint there; clear the sequence, or fork it before the tokens to drop)",
                                  seq, ctx->model->architecture, len, n_keep);
        if ((st = llmm__checkpoint_return(ctx, seq)))
            return llmm__ctx_fail(ctx, st, "sequence %d: copying the state checkpoint back failed", seq);
        return LLMM_OK;
    }
    if (n_keep == 0) llmm__checkpoint_forget(ctx, seq);
    llmm__kv_truncate(&ctx->kv, (uint32_t)seq, (uint32_t)n_keep);
    return LLMM_OK;
}

LLMM_API llmm_status llmm_seq_length(llmm_context *ctx, llmm_seq_id seq, size_t *n) {
    if (!ctx) return LLMM_ERR_INVALID_ARG;
    if (!n) return llmm__ctx_fail(ctx, LLMM_ERR_INVALID_ARG, "llmm_seq_length: NULL n");
    llmm_status st = llmm__ctx_check_seq(ctx, seq);
    if (st) return st;
    *n = ctx->kv.seqs[seq].len;
    return LLMM_OK;
}

/* The lowest unused id other than except (-1: none), marked created. */
static llmm_status take_unused_id(llmm_context *ctx, llmm_seq_id except, llmm_seq_id *out) {
    const llmm_kv_store *kv = &ctx->kv;
    for (uint32_t s = 0; s < kv->cfg.n_seq; s++) {
        if ((llmm_seq_id)s == except || kv->seqs[s].created || kv->seqs[s].len) continue;
        ctx->kv.seqs[s].created = 1;
        *out = (llmm_seq_id)s;
        return LLMM_OK;
    }
    return llmm__ctx_fail(ctx, LLMM_ERR_CONTEXT_FULL, "all %u sequence ids are in use (raise n_seq_max or free some)",
                    kv->cfg.n_seq);
}

LLMM_API llmm_status llmm_seq_create(llmm_context *ctx, llmm_seq_id *seq) {
    if (!ctx) return LLMM_ERR_INVALID_ARG;
    if (!seq) return llmm__ctx_fail(ctx, LLMM_ERR_INVALID_ARG, "llmm_seq_create: NULL seq");
    return take_unused_id(ctx, -1, seq);
}

LLMM_API llmm_status llmm_seq_free(llmm_context *ctx, llmm_seq_id seq) {
    if (!ctx) return LLMM_ERR_INVALID_ARG;
    llmm_status st = llmm__ctx_check_seq(ctx, seq);
    if (st) return st;
    llmm__kv_truncate(&ctx->kv, (uint32_t)seq, 0);
    llmm__checkpoint_forget(ctx, seq);
    ctx->kv.seqs[seq].created = 0;
    llmm__lora_seq_drop(ctx, seq);
    return LLMM_OK;
}

LLMM_API llmm_status llmm_seq_fork(llmm_context *ctx, llmm_seq_id src, llmm_seq_id *dst) {
    if (!ctx) return LLMM_ERR_INVALID_ARG;
    if (!dst) return llmm__ctx_fail(ctx, LLMM_ERR_INVALID_ARG, "llmm_seq_fork: NULL dst");
    llmm_status st = llmm__ctx_check_seq(ctx, src);
    if (!st) st = take_unused_id(ctx, src, dst);
    if (st) return st;
    if ((st = llmm__recurrent_copy(ctx, src, *dst))) {
        ctx->kv.seqs[*dst].created = 0;
        return llmm__ctx_fail(ctx, st, "llmm_seq_fork: copying the recurrent state failed");
    }
    llmm__checkpoint_forget(ctx, *dst); /* the source's is not copied: forks rarely go back */
    llmm__kv_fork(&ctx->kv, (uint32_t)src, (uint32_t)*dst);
    llmm__lora_seq_copy(ctx, src, *dst); /* its tokens were computed with src's adapters */
    return LLMM_OK;
}
