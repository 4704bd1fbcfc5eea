/* The step calls: prefill and decode over the KV store (forward.c), sampling a decode step
 * where its logits are, and handing out logits. */
#include "context.h"

#include <string.h>

#include "forward.h"
#include "sampling/sampler.h"

static llmm_status check_tokens(llmm_context *ctx, const llmm_token *tokens, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (tokens[i] < 0 || (uint32_t)tokens[i] >= ctx->model->vocab.n_tokens)
            return llmm__ctx_fail(ctx, LLMM_ERR_INVALID_ARG, "token %d at index %zu is out of range", tokens[i], i);
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

/* Run tokens [done, n) of a prefill into seq in chunks of n_batch, committing each chunk. */
static llmm_status prefill_chunks(llmm_context *ctx, llmm_seq_id seq, const llmm_token *tokens, size_t done, size_t n,
                                  int all) {
    llmm_kv_store *kv = &ctx->kv;
    const size_t first_done = done;
    while (done < n) {
        if (done > first_done && ctx->params.abort && ctx->params.abort(ctx->params.abort_user))
            return LLMM_ERR_ABORTED;
        /* with every position's logits, a chunk is no longer than the logits rows a step has */
        const size_t chunk = all ? LLMM_MIN(ctx->params.n_batch, ctx->params.n_outputs_max) : ctx->params.n_batch;
        const size_t m = LLMM_MIN(chunk, n - done);
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
    /* every position's logits need every position computed: no prefix reuse then; with
     * recurrent layers only up to a prefix whose end state is stored (prefix_state.c) */
    size_t reused = 0, stop = 0;
    if ((st = llmm__recurrent_save(ctx, &seq, 1))) return step_failed(ctx, st);
    if (!all && ctx->rec.states) {
        reused = llmm__prefix_state_attach(ctx, seq, tokens, (uint32_t)n);
        stop = llmm__prefix_state_boundary(ctx, seq, (uint32_t)reused, (uint32_t)n);
    } else if (!all) {
        reused = llmm__kv_prefix_attach(kv, (uint32_t)seq, tokens, (uint32_t)n);
    }
    st = llmm__kv_reserve(kv, (uint32_t)seq, (uint32_t)(n - reused));
    if (st == LLMM_ERR_CONTEXT_FULL) {
        llmm__kv_truncate(kv, (uint32_t)seq, start);
        llmm__recurrent_restore(ctx, &seq, 1);
        return pool_full(ctx, seq, n);
    }
    /* stopping at the prompt's last full block stores the state there for later prompts */
    if (!st && stop && !(st = prefill_chunks(ctx, seq, tokens, reused, stop, 0))) llmm__prefix_state_store(ctx, seq);
    if (!st) st = prefill_chunks(ctx, seq, tokens, stop ? stop : reused, n, all);
    ctx->prefill_ms += llmm__time_now_ms() - t0;
    if (st) {
        llmm__kv_truncate(kv, (uint32_t)seq, start);
        llmm__recurrent_restore(ctx, &seq, 1);
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

/* Reserve one position in each sequence; on failure undo those reserved. The pool is checked
 * first, so that a step it cannot hold leaves no copy-on-write block behind. */
static llmm_status reserve_rows(llmm_context *ctx, const llmm_seq_id *seqs, size_t n) {
    if (llmm__kv_blocks_needed(&ctx->kv, seqs, n) > llmm__kv_available(&ctx->kv)) return pool_full(ctx, seqs[0], 1);
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
    if ((st = llmm__recurrent_save(ctx, seqs, n))) return step_failed(ctx, st);
    if ((st = reserve_rows(ctx, seqs, n))) return st;
    st = llmm__forward_step(ctx, LLMM_STEP_DECODE, tokens, seqs, ctx->pos, n, 0);
    if (!st && fetch) st = llmm__ctx_fetch_logits(ctx, 0, n);
    if (st) {
        llmm__recurrent_restore(ctx, seqs, n);
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

void llmm__ctx_note_step(llmm_context *ctx, double t0) {
    if (!ctx->warming) llmm__latency_add(&ctx->step_latency, llmm__time_now_ms() - t0);
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
    const double t0 = llmm__time_now_ms();
    llmm_status st = check_decode(ctx, "llmm_decode", seqs, tokens, n);
    if (!st && !(st = decode_rows(ctx, seqs, tokens, n, 1))) llmm__ctx_note_step(ctx, t0);
    return st;
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
    const double t_step = llmm__time_now_ms();
    if ((st = decode_rows(ctx, seqs, tokens, n, !on_backend))) return st;
    const double t0 = llmm__time_now_ms();
    st = on_backend ? sample_on_backend(ctx, seqs, samplers, n, out) : sample_on_host(ctx, seqs, samplers, n, out);
    ctx->decode_ms += llmm__time_now_ms() - t0;
    if (!st) llmm__ctx_note_step(ctx, t_step);
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
