/* The speculator: guesses from a proposer, one verify step over the guesses of several
 * sequences, and the acceptance that keeps what the target would have produced, with the
 * rejected positions rolled back (their blocks go back to the pool). A recurrent state cannot be
 * rolled back by position: the verify step takes a state checkpoint before the guesses, and a
 * round that rejects some goes back to it and computes the kept tokens again (checkpoint.c). */
#include <string.h>

#include "context/forward.h"
#include "sampling/sampler.h"
#include "speculative.h"

/* A sequence's speculation state. */
typedef struct spec_seq {
    uint32_t k;                             /* current draft length, in [1, k_max] */
    uint32_t pause, backoff;                /* rounds left without guesses; the last pause's length */
    llmm_token guess[LLMM_SPEC_MAX_TOKENS]; /* the last proposal */
    size_t n_guess;
    float *q;                               /* (k_max, n_vocab) its distributions, when drawn */
} spec_seq;

/* One item of the last verify step. */
typedef struct spec_verified {
    llmm_seq_id seq;
    size_t row;                             /* its first logits row */
    uint32_t start_len;                     /* the sequence's length before the step */
    llmm_token draft[LLMM_SPEC_MAX_TOKENS];
    size_t n_draft;
    const float *q;                         /* the drafts' distributions, or NULL: certain guesses */
    int decided;
} spec_verified;

struct llmm_speculator {
    llmm_context *ctx;
    const llmm_allocator *alloc;
    spec_proposer *proposer; /* NULL: the app makes the guesses */
    uint32_t k_max;
    spec_seq *seqs;          /* (n_seq_max) */
    spec_verified *items;    /* (n_seq_max) the last verify's */
    size_t n_items;
    uint64_t work_mark;      /* ctx's tokens computed after the last verify: any later step voids it */
    llmm_token *history;     /* (n_ctx + 1) a sequence's tokens and its pending one */
    llmm_token *rows;        /* (max_rows) the verify step's tokens */
    float *p, *residual;     /* (n_vocab) scratch of sampled acceptance */
    uint64_t proposed, accepted, steps;
};

/* ---------------------------------------------------------------- acceptance rules */

int llmm__spec_keep_guess(const float *p, const float *q, llmm_token guess, double u) {
    const double qg = q ? q[guess] : 1.0;
    return qg > 0 && u * qg < (double)p[guess];
}

void llmm__spec_residual(const float *p, const float *q, size_t n, llmm_token guess, float *r) {
    double sum = 0;
    for (size_t i = 0; i < n; i++) {
        const float qi = q ? q[i] : (float)((llmm_token)i == guess);
        r[i] = p[i] > qi ? p[i] - qi : 0.0f;
        sum += r[i];
    }
    if (sum <= 0) memcpy(r, p, n * sizeof *r);
}

/* ---------------------------------------------------------------- lifetime */

LLMM_API llmm_status llmm_speculator_params_default(llmm_speculator_params *params, size_t struct_size) {
    if (!params || struct_size < sizeof *params || struct_size > UINT32_MAX) return LLMM_ERR_INVALID_ARG;
    memset(params, 0, struct_size);
    params->size = (uint32_t)struct_size;
    params->max_tokens = 8;
    params->min_ngram = 1;
    return LLMM_OK;
}

LLMM_API void llmm_speculator_free(llmm_speculator *s) {
    if (!s) return;
    if (s->proposer) s->proposer->ops->destroy(s->proposer);
    for (uint32_t i = 0; s->seqs && i < s->ctx->params.n_seq_max; i++) llmm__mem_free(s->alloc, s->seqs[i].q);
    llmm__mem_free(s->alloc, s->seqs);
    llmm__mem_free(s->alloc, s->items);
    llmm__mem_free(s->alloc, s->history);
    llmm__mem_free(s->alloc, s->rows);
    llmm__mem_free(s->alloc, s->p);
    llmm__mem_free(s->alloc, s->residual);
    llmm__mem_free(s->alloc, s);
}

static const char *params_problem(const llmm_speculator_params *p) {
    if (p->max_tokens < 1 || p->max_tokens > LLMM_SPEC_MAX_TOKENS) return "max_tokens must be in 1..32";
    if (p->ngram < 0 || p->min_ngram < 1 || (p->ngram > 0 && p->min_ngram > p->ngram))
        return "ngram must be >= 0 and min_ngram in 1..ngram";
    return NULL;
}

static llmm_status make_proposer(llmm_speculator *s, const llmm_speculator_params *p) {
    llmm_diag d = {{0}};
    llmm_status st = LLMM_OK;
    if (p->draft_model) st = llmm__spec_draft_create(s->ctx, p->draft_model, p->sampling, &s->proposer, &d);
    else if (p->ngram > 0) st = llmm__spec_ngram_create(s->alloc, (uint32_t)p->ngram, (uint32_t)p->min_ngram, &s->proposer);
    if (st) return llmm__ctx_fail(s->ctx, st, "speculator: %s", d.msg[0] ? d.msg : llmm_status_str(st));
    return LLMM_OK;
}

LLMM_API llmm_status llmm_speculator_create(llmm_context *ctx, const llmm_speculator_params *params,
                                            llmm_speculator **out) {
    if (!ctx) return LLMM_ERR_INVALID_ARG;
    if (!out) return llmm__ctx_fail(ctx, LLMM_ERR_INVALID_ARG, "llmm_speculator_create: NULL out");
    *out = NULL;
    llmm_speculator_params p;
    llmm_speculator_params_default(&p, sizeof p);
    if (params && !llmm__struct_import(&p, sizeof p, params, sizeof p))
        return llmm__ctx_fail(ctx, LLMM_ERR_INVALID_ARG, "llmm_speculator_create: params->size too small");
    const char *problem = params_problem(&p);
    if (problem) return llmm__ctx_fail(ctx, LLMM_ERR_INVALID_ARG, "llmm_speculator_create: %s", problem);
    const llmm_allocator *a = ctx->model->alloc;
    llmm_speculator *s = llmm__mem_calloc(a, 1, sizeof *s);
    if (!s) return llmm__ctx_fail(ctx, LLMM_ERR_NO_MEMORY, "out of memory for the speculator");
    s->ctx = ctx;
    s->alloc = a;
    s->k_max = (uint32_t)p.max_tokens;
    const size_t n_seq = ctx->params.n_seq_max, nv = ctx->model->vocab.n_tokens;
    s->seqs = llmm__mem_calloc(a, n_seq, sizeof *s->seqs);
    s->items = llmm__mem_calloc(a, n_seq, sizeof *s->items);
    s->history = llmm__mem_calloc(a, (size_t)ctx->params.n_ctx + 1, sizeof *s->history);
    s->rows = llmm__mem_calloc(a, ctx->max_rows, sizeof *s->rows);
    s->p = llmm__mem_calloc(a, nv, sizeof *s->p);
    s->residual = llmm__mem_calloc(a, nv, sizeof *s->residual);
    if (!s->seqs || !s->items || !s->history || !s->rows || !s->p || !s->residual) {
        llmm_speculator_free(s);
        return llmm__ctx_fail(ctx, LLMM_ERR_NO_MEMORY, "out of memory for the speculator");
    }
    for (size_t i = 0; i < n_seq; i++) s->seqs[i].k = s->k_max;
    llmm_status st = make_proposer(s, &p);
    if (st) {
        llmm_speculator_free(s);
        return st;
    }
    *out = s;
    return LLMM_OK;
}

/* ---------------------------------------------------------------- propose */

static llmm_status propose(llmm_speculator *s, llmm_seq_id seq, llmm_token pending, llmm_token *out, size_t max,
                           size_t *n) {
    llmm_context *ctx = s->ctx;
    spec_seq *sq = &s->seqs[seq];
    sq->n_guess = 0;
    *n = 0;
    max = LLMM_MIN(max, (size_t)sq->k);
    if (!s->proposer || max == 0) return LLMM_OK;
    if (sq->pause > 0) {
        sq->pause--;
        return LLMM_OK;
    }
    const size_t nv = ctx->model->vocab.n_tokens;
    if (s->proposer->draws && !sq->q && !(sq->q = llmm__mem_calloc(s->alloc, (size_t)s->k_max * nv, sizeof *sq->q)))
        return llmm__ctx_fail(ctx, LLMM_ERR_NO_MEMORY, "out of memory for the draft's distributions");
    const kv_seq *held = &ctx->kv.seqs[seq];
    memcpy(s->history, held->tokens, held->len * sizeof *s->history);
    s->history[held->len] = pending;
    const double t0 = llmm__time_now_ms();
    llmm_status st = s->proposer->ops->propose(s->proposer, seq, s->history, held->len + 1, max, sq->guess, sq->q, n);
    s->proposer->ms += llmm__time_now_ms() - t0;
    if (st) return llmm__ctx_fail(ctx, st, "the %s proposer failed: %s", s->proposer->ops->name, llmm_status_str(st));
    sq->n_guess = *n;
    memcpy(out, sq->guess, *n * sizeof *out);
    return LLMM_OK;
}

LLMM_API llmm_status llmm_speculator_propose(llmm_speculator *s, llmm_seq_id seq, llmm_token pending,
                                             llmm_token *out, size_t capacity, size_t *n) {
    if (!s) return LLMM_ERR_INVALID_ARG;
    llmm_context *ctx = s->ctx;
    if (!n || (!out && capacity)) return llmm__ctx_fail(ctx, LLMM_ERR_INVALID_ARG, "llmm_speculator_propose: NULL out or n");
    llmm_status st = llmm__ctx_check_seq(ctx, seq);
    if (st) return st;
    if (pending < 0 || (uint32_t)pending >= ctx->model->vocab.n_tokens)
        return llmm__ctx_fail(ctx, LLMM_ERR_INVALID_ARG, "llmm_speculator_propose: token %d is out of range", pending);
    const uint32_t len = ctx->kv.seqs[seq].len;
    const size_t room = len + 1 < ctx->params.n_ctx ? ctx->params.n_ctx - len - 1 : 0;
    return propose(s, seq, pending, out, LLMM_MIN(capacity, room), n);
}

/* ---------------------------------------------------------------- verify */

static llmm_status check_items(llmm_speculator *s, const llmm_spec_item *items, size_t n, size_t *total) {
    llmm_context *ctx = s->ctx;
    const uint32_t nv = ctx->model->vocab.n_tokens;
    *total = 0;
    if (!items || n == 0 || n > ctx->params.n_seq_max)
        return llmm__ctx_fail(ctx, LLMM_ERR_INVALID_ARG, "llmm_speculator_verify: %zu items (1..n_seq_max)", n);
    for (size_t i = 0; i < n; i++) {
        const llmm_spec_item *it = &items[i];
        llmm_status st = llmm__ctx_check_seq(ctx, it->seq);
        if (st) return st;
        for (size_t j = 0; j < i; j++)
            if (items[j].seq == it->seq)
                return llmm__ctx_fail(ctx, LLMM_ERR_INVALID_ARG, "llmm_speculator_verify: sequence %d appears twice", it->seq);
        if (it->n_draft > LLMM_SPEC_MAX_TOKENS || (it->n_draft && !it->draft))
            return llmm__ctx_fail(ctx, LLMM_ERR_INVALID_ARG, "llmm_speculator_verify: item %zu: bad draft", i);
        if (it->pending < 0 || (uint32_t)it->pending >= nv)
            return llmm__ctx_fail(ctx, LLMM_ERR_INVALID_ARG, "llmm_speculator_verify: item %zu: token out of range", i);
        for (size_t j = 0; j < it->n_draft; j++)
            if (it->draft[j] < 0 || (uint32_t)it->draft[j] >= nv)
                return llmm__ctx_fail(ctx, LLMM_ERR_INVALID_ARG, "llmm_speculator_verify: item %zu: guess %zu out of range",
                                i, j);
        if (ctx->kv.seqs[it->seq].len + 1 + it->n_draft > ctx->params.n_ctx)
            return llmm__ctx_fail(ctx, LLMM_ERR_CONTEXT_FULL, "sequence %d has no room for %zu more tokens (n_ctx %u)",
                            it->seq, 1 + it->n_draft, ctx->params.n_ctx);
        *total += 1 + it->n_draft;
    }
    if (*total > ctx->params.n_outputs_max)
        return llmm__ctx_fail(ctx, LLMM_ERR_INVALID_ARG,
                        "llmm_speculator_verify: %zu rows, more than the %u rows of logits a step has (n_outputs_max)",
                        *total, ctx->params.n_outputs_max);
    return LLMM_OK;
}

/* Positions for every item's rows, undone on failure. */
static llmm_status reserve_items(llmm_context *ctx, const llmm_spec_item *items, size_t n) {
    /* the pool is checked first: running out halfway would leave copy-on-write blocks behind */
    size_t rows = 0;
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j <= items[i].n_draft; j++) ctx->row_seq[rows++] = items[i].seq;
    if (llmm__kv_blocks_needed(&ctx->kv, ctx->row_seq, rows) > llmm__kv_available(&ctx->kv))
        return llmm__ctx_fail(ctx, LLMM_ERR_CONTEXT_FULL, "the KV pool has no room for the %zu rows of this step", rows);
    for (size_t i = 0; i < n; i++) {
        llmm_status st = llmm__kv_reserve(&ctx->kv, (uint32_t)items[i].seq, (uint32_t)(1 + items[i].n_draft));
        if (st) {
            for (size_t j = 0; j <= i; j++)
                llmm__kv_truncate(&ctx->kv, (uint32_t)items[j].seq, ctx->kv.seqs[items[j].seq].len);
            if (st == LLMM_ERR_CONTEXT_FULL)
                return llmm__ctx_fail(ctx, st, "the KV pool has no room for %zu more tokens of sequence %d",
                                1 + items[i].n_draft, items[i].seq);
            return llmm__ctx_fail(ctx, st, "reserving KV blocks failed: %s", llmm_status_str(st));
        }
    }
    return LLMM_OK;
}

/* The step's rows: each item's pending token and guesses at the positions after its tokens. */
static void lay_out_rows(llmm_speculator *s, const llmm_spec_item *items, size_t n) {
    llmm_context *ctx = s->ctx;
    size_t r = 0;
    for (size_t i = 0; i < n; i++) {
        const llmm_spec_item *it = &items[i];
        const uint32_t len = ctx->kv.seqs[it->seq].len;
        spec_verified *v = &s->items[i];
        const spec_seq *sq = &s->seqs[it->seq];
        *v = (spec_verified){.seq = it->seq, .row = r, .start_len = len, .n_draft = it->n_draft};
        memcpy(v->draft, it->draft, it->n_draft * sizeof *v->draft);
        /* the proposer's distributions hold for these guesses only if they are its own */
        if (sq->q && it->n_draft <= sq->n_guess && !memcmp(it->draft, sq->guess, it->n_draft * sizeof *it->draft))
            v->q = sq->q;
        for (size_t j = 0; j <= it->n_draft; j++, r++) {
            s->rows[r] = j == 0 ? it->pending : it->draft[j - 1];
            ctx->pos[r] = (int32_t)(len + j);
            ctx->row_seq[r] = it->seq;
        }
    }
}

static void commit_items(llmm_speculator *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        const spec_verified *v = &s->items[i];
        llmm__kv_commit(&s->ctx->kv, (uint32_t)v->seq, s->rows + v->row, (uint32_t)(1 + v->n_draft));
    }
}

static llmm_status verify(llmm_speculator *s, const llmm_spec_item *items, size_t n) {
    llmm_context *ctx = s->ctx;
    size_t total;
    llmm_status st = check_items(s, items, n, &total);
    if (!st) st = llmm__ctx_ensure_logit_rows(ctx, total);
    if (st) return st;
    s->n_items = 0;
    const double t0 = llmm__time_now_ms();
    ctx->logits_rows = 0;
    ctx->logits_on_device = 0;
    for (size_t i = 0; i < n; i++)
        if ((st = llmm__checkpoint_take(ctx, &items[i].seq, 1)))
            return llmm__ctx_fail(ctx, st, "taking the state checkpoint of sequence %d failed", items[i].seq);
    if ((st = reserve_items(ctx, items, n))) return st;
    lay_out_rows(s, items, n);
    st = llmm__forward_step(ctx, LLMM_STEP_PROMPT, s->rows, ctx->row_seq, ctx->pos, total, 0);
    if (!st) st = llmm__ctx_fetch_logits(ctx, 0, total);
    ctx->decode_ms += llmm__time_now_ms() - t0;
    if (st) {
        /* the checkpoints were just taken at each start_len: the state goes back with the K/V */
        for (size_t i = 0; i < n; i++)
            if (!ctx->rec.states || llmm__checkpoint_return(ctx, items[i].seq))
                llmm__kv_truncate(&ctx->kv, (uint32_t)items[i].seq, s->items[i].start_len);
        if (st == LLMM_ERR_ABORTED) return llmm__ctx_fail(ctx, st, "aborted by the abort callback");
        return llmm__ctx_fail(ctx, st, "the %s backend failed: %s", ctx->be->name, llmm_status_str(st));
    }
    commit_items(s, n);
    llmm__ctx_note_step(ctx, t0);
    ctx->logits_rows = total;
    ctx->tokens_decoded += total;
    s->n_items = n;
    s->steps++;
    s->work_mark = ctx->tokens_decoded + ctx->tokens_prefilled;
    return LLMM_OK;
}

LLMM_API llmm_status llmm_speculator_verify(llmm_speculator *s, const llmm_spec_item *items, size_t n) {
    if (!s) return LLMM_ERR_INVALID_ARG;
    return verify(s, items, n);
}

/* ---------------------------------------------------------------- accept */

/* Row i of item v: the target's choice after pending and the first i guesses. *kept = 1 when
 * guess i stays, else *next is the token chosen in its place (or after the last guess); the
 * token that stands is accepted into the sampler, so row i + 1 sees it in the penalties. */
static llmm_status judge_row(llmm_speculator *s, const spec_verified *v, size_t i, llmm_sampler *sampler, int *kept,
                             llmm_token *next) {
    const size_t nv = s->ctx->model->vocab.n_tokens;
    const float *logits = s->ctx->logits + (v->row + i) * nv;
    const int has_guess = i < v->n_draft;
    const llmm_token guess = has_guess ? v->draft[i] : -1;
    *kept = 0;
    llmm_status st;
    if (llmm__sampler_is_greedy(sampler)) {
        if ((st = llmm_sample(sampler, logits, nv, next))) return st;
        *kept = has_guess && *next == guess;
    } else {
        if ((st = llmm__sampler_probs(sampler, logits, nv, s->p))) return st;
        const float *q = v->q ? v->q + i * nv : NULL;
        if (has_guess && llmm__spec_keep_guess(s->p, q, guess, llmm__sampler_uniform(sampler))) {
            *kept = 1;
        } else {
            const float *w = s->p;
            if (has_guess) {
                llmm__spec_residual(s->p, q, nv, guess, s->residual);
                w = s->residual;
            }
            *next = llmm__sample_draw(w, nv, llmm__sampler_uniform(sampler));
        }
    }
    return llmm_sampler_accept(sampler, *kept ? guess : *next);
}

/* Draft length after a round that kept `kept` of n guesses: one more after a full round, else
 * what was kept plus one. A round that kept nothing also pauses the guessing for 1, 2, 4, ...
 * up to SPEC_MAX_PAUSE rounds (reset by any kept guess): a useless proposer then costs one
 * guess, one more verify row and its own time once in that many steps, not in every one
 * (what a never-right draft costs with and without pauses: docs/performance.md
 * "Speculative decoding"). */
#define SPEC_MAX_PAUSE 16u
static void adapt(llmm_speculator *s, spec_seq *sq, size_t n, size_t kept) {
    if (n == 0) return;
    sq->k = kept == n ? LLMM_MIN(sq->k + 1, s->k_max) : (uint32_t)LLMM_MAX(kept + 1, (size_t)1);
    sq->backoff = kept ? 0 : LLMM_MIN(LLMM_MAX(2 * sq->backoff, 1u), SPEC_MAX_PAUSE);
    sq->pause = sq->backoff;
}

static llmm_status accept(llmm_speculator *s, size_t item, llmm_sampler *sampler, llmm_token *out, size_t *n_out) {
    llmm_context *ctx = s->ctx;
    spec_verified *v = &s->items[item];
    size_t kept = 0;
    llmm_status st = LLMM_OK;
    for (size_t i = 0; i <= v->n_draft; i++) {
        int keep;
        llmm_token next = -1;
        if ((st = judge_row(s, v, i, sampler, &keep, &next))) break;
        if (!keep) {
            out[kept] = next;
            break;
        }
        out[kept++] = v->draft[i];
    }
    v->decided = 1;
    /* pending and the kept guesses stay; the rejected positions' blocks go back (and a
     * recurrent state is computed again over the kept tokens from the verify's checkpoint) */
    llmm_status back = llmm__seq_rewind(ctx, v->seq, v->start_len + 1 + (uint32_t)kept);
    if (st) return llmm__ctx_fail(ctx, st, "llmm_speculator_accept: %s", llmm_sampler_last_error(sampler));
    if (back) return back; /* recorded: the sequence is back where the verify step began */
    *n_out = kept + 1;
    adapt(s, &s->seqs[v->seq], v->n_draft, kept);
    s->proposed += v->n_draft;
    s->accepted += kept;
    return LLMM_OK;
}

LLMM_API llmm_status llmm_speculator_accept(llmm_speculator *s, size_t item, llmm_sampler *sampler, llmm_token *out,
                                            size_t capacity, size_t *n_out) {
    if (!s) return LLMM_ERR_INVALID_ARG;
    llmm_context *ctx = s->ctx;
    if (!sampler || !out || !n_out)
        return llmm__ctx_fail(ctx, LLMM_ERR_INVALID_ARG, "llmm_speculator_accept: NULL sampler, out or n_out");
    if (item >= s->n_items || s->items[item].decided || s->work_mark != ctx->tokens_decoded + ctx->tokens_prefilled)
        return llmm__ctx_fail(ctx, LLMM_ERR_INVALID_ARG,
                        "llmm_speculator_accept: no undecided item %zu of the last verify (or the context computed since)",
                        item);
    if (capacity < 1 + s->items[item].n_draft)
        return llmm__ctx_fail(ctx, LLMM_ERR_BUFFER_TOO_SMALL, "llmm_speculator_accept: capacity %zu < %zu", capacity,
                        1 + s->items[item].n_draft);
    return accept(s, item, sampler, out, n_out);
}

/* ---------------------------------------------------------------- llmm_generate's rounds */

llmm_status llmm__spec_for_generate(llmm_context *ctx, const llmm_generate_params *g, llmm_speculator **out) {
    *out = NULL;
    if (!g->spec_draft_model && g->spec_ngram == 0) return LLMM_OK;
    llmm_speculator_params p;
    llmm_speculator_params_default(&p, sizeof p);
    p.draft_model = g->spec_draft_model;
    p.max_tokens = g->spec_max_tokens;
    p.ngram = g->spec_ngram;
    p.min_ngram = g->spec_min_ngram;
    p.sampling = g->sampling;
    return llmm_speculator_create(ctx, &p, out);
}

llmm_status llmm__spec_round(llmm_speculator *s, llmm_seq_id seq, llmm_token pending, llmm_sampler *sampler,
                       llmm_token *out, size_t *n_out) {
    llmm_context *ctx = s->ctx;
    const uint32_t len = ctx->kv.seqs[seq].len;
    const size_t room = len + 1 < ctx->params.n_ctx ? ctx->params.n_ctx - len - 1 : 0;
    llmm_token guess[LLMM_SPEC_MAX_TOKENS];
    size_t n = 0;
    llmm_status st = propose(s, seq, pending, guess, LLMM_MIN(room, (size_t)LLMM_SPEC_MAX_TOKENS), &n);
    if (st) return st;
    if (n > 0) {
        const llmm_spec_item item = {.seq = seq, .pending = pending, .draft = guess, .n_draft = n};
        st = verify(s, &item, 1);
        if (!st) return accept(s, 0, sampler, out, n_out);
        if (st != LLMM_ERR_CONTEXT_FULL) return st;
        /* the KV pool has no blocks for the guesses; the plain step may still fit */
    }
    /* nothing to check: the plain step, so its numbers and its device sampling are plain's */
    if ((st = llmm_decode_sample(ctx, &seq, &pending, 1, &sampler, out))) return st;
    s->steps++;
    *n_out = 1;
    return llmm_sampler_accept(sampler, out[0]);
}

void llmm__spec_counters(const llmm_speculator *s, uint64_t *proposed, uint64_t *accepted, uint64_t *steps,
                   double *draft_ms) {
    *proposed = s->proposed;
    *accepted = s->accepted;
    *steps = s->steps;
    *draft_ms = s->proposer ? s->proposer->ms : 0;
}
