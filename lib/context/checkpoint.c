/* State checkpoints of recurrent models (context.h llmm_recurrent): one per sequence id, the
 * state after the sequence's first checkpoint_len tokens. A speculative verify step takes one
 * before feeding its guesses; dropping the rejected ones then means going back to it and
 * computing the kept tokens again (llmm__seq_rewind), and llmm_seq_truncate can go back to it
 * exactly. A checkpoint stays valid while the tokens before it stay: appending leaves it,
 * truncating below it, clearing, loading a saved state or reusing the id forgets it. */
#include <string.h>

#include "context.h"
#include "forward.h"

static float *live_slot(const llmm_recurrent *rec, llmm_seq_id seq) { return rec->states + (size_t)seq * rec->seq_floats; }

static float *checkpoint_slot(const llmm_recurrent *rec, llmm_seq_id seq) {
    return rec->states + (2 * (size_t)rec->n_seq + (size_t)seq) * rec->seq_floats;
}

llmm_status llmm__checkpoint_take(llmm_context *ctx, const llmm_seq_id *seqs, size_t n) {
    llmm_recurrent *rec = &ctx->rec;
    for (size_t i = 0; rec->states && i < n; i++) {
        rec->checkpoint_len[seqs[i]] = LLMM__NO_CHECKPOINT; /* a failed copy leaves none half-written */
        llmm_status st = ctx->be->copy(ctx->be_state, checkpoint_slot(rec, seqs[i]), live_slot(rec, seqs[i]),
                                       rec->seq_floats * sizeof(float));
        if (st) return st;
        rec->checkpoint_len[seqs[i]] = ctx->kv.seqs[seqs[i]].len;
    }
    return LLMM_OK;
}

void llmm__checkpoint_forget(llmm_context *ctx, llmm_seq_id seq) {
    if (ctx->rec.states) ctx->rec.checkpoint_len[seq] = LLMM__NO_CHECKPOINT;
}

llmm_status llmm__checkpoint_return(llmm_context *ctx, llmm_seq_id seq) {
    const llmm_recurrent *rec = &ctx->rec;
    if (rec->states) {
        llmm_status st = ctx->be->copy(ctx->be_state, live_slot(rec, seq), checkpoint_slot(rec, seq),
                                       rec->seq_floats * sizeof(float));
        if (st) return st;
        llmm__kv_truncate(&ctx->kv, (uint32_t)seq, rec->checkpoint_len[seq]);
    }
    return LLMM_OK;
}

/* Tokens [len, len + n) of seq fed again in steps of at most max_rows, without logits. */
static llmm_status recompute(llmm_context *ctx, llmm_seq_id seq, const llmm_token *tokens, uint32_t n) {
    for (uint32_t done = 0; done < n;) {
        const uint32_t m = (uint32_t)LLMM_MIN((size_t)(n - done), ctx->max_rows);
        const uint32_t len = ctx->kv.seqs[seq].len;
        for (uint32_t r = 0; r < m; r++) {
            ctx->pos[r] = (int32_t)(len + r);
            ctx->row_seq[r] = seq;
        }
        /* the pool is checked first: running out halfway would leave copy-on-write blocks behind */
        if (llmm__kv_blocks_needed(&ctx->kv, ctx->row_seq, m) > llmm__kv_available(&ctx->kv)) return LLMM_ERR_CONTEXT_FULL;
        llmm_status st = llmm__kv_reserve(&ctx->kv, (uint32_t)seq, m);
        if (!st) st = llmm__forward_step(ctx, LLMM_STEP_PROMPT, tokens + done, ctx->row_seq, ctx->pos, m, m);
        if (st) return st;
        llmm__kv_commit(&ctx->kv, (uint32_t)seq, tokens + done, m);
        done += m;
    }
    return LLMM_OK;
}

llmm_status llmm__seq_rewind(llmm_context *ctx, llmm_seq_id seq, uint32_t n_keep) {
    const kv_seq *held = &ctx->kv.seqs[seq];
    if (!ctx->rec.states || n_keep == 0 || n_keep >= held->len) {
        if (n_keep == 0) llmm__checkpoint_forget(ctx, seq);
        llmm__kv_truncate(&ctx->kv, (uint32_t)seq, n_keep);
        return LLMM_OK;
    }
    const uint32_t at = ctx->rec.checkpoint_len[seq];
    if (at == LLMM__NO_CHECKPOINT || at > n_keep || n_keep - at > LLMM__REWIND_MAX)
        return llmm__ctx_fail(ctx, LLMM_ERR_UNSUPPORTED,
                              "sequence %d: no state checkpoint at most %u tokens before position %u to go back to", seq,
                              LLMM__REWIND_MAX, n_keep);
    /* copied before the truncation below gives their places back to the pool */
    llmm_token again[LLMM__REWIND_MAX];
    memcpy(again, held->tokens + at, (n_keep - at) * sizeof *again);
    llmm_status st = llmm__checkpoint_return(ctx, seq);
    if (!st) st = recompute(ctx, seq, again, n_keep - at);
    if (st) {
        /* the state may be partly advanced: the checkpoint is the last consistent point */
        if (llmm__checkpoint_return(ctx, seq)) llmm__seq_rewind(ctx, seq, 0);
        return llmm__ctx_fail(ctx, st, "sequence %d: computing %u kept tokens again from the state checkpoint at %u failed: %s",
                              seq, n_keep - at, at, llmm_status_str(st));
    }
    return LLMM_OK;
}
