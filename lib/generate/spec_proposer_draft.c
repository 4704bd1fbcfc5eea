/* A draft model as proposer: a smaller model with the target's vocabulary guesses the next
 * tokens one decode at a time in a context of its own. Its sequence follows the target's
 * history lazily: before guessing it keeps the longest prefix it shares with the history and
 * prefills the rest (after a round usually the last kept guess and the new token). */
#include <string.h>

#include "sampling/sampler.h"
#include "proposer.h"

typedef struct draft_proposer {
    spec_proposer base;
    const llmm_allocator *alloc;
    llmm_context *ctx;     /* the draft's */
    llmm_sampler *sampler; /* draws guesses when base.draws, else NULL (argmax) */
} draft_proposer;

/* Same token count, texts, attributes and special ids: ids mean the same to both models. */
static llmm_status check_vocab(const llmm_vocab *t, const llmm_vocab *dv, llmm_diag *d) {
    if (t->n_tokens != dv->n_tokens)
        return llmm__diag_fail(d, LLMM_ERR_INVALID_ARG, "the draft model has %u tokens, the target %u: their vocabularies differ",
                         dv->n_tokens, t->n_tokens);
    for (size_t i = 0; i < sizeof t->special / sizeof *t->special; i++)
        if (t->special[i] != dv->special[i])
            return llmm__diag_fail(d, LLMM_ERR_INVALID_ARG, "the draft model's special token %zu is %d, the target's %d", i,
                             dv->special[i], t->special[i]);
    for (uint32_t i = 0; i < t->n_tokens; i++)
        if (t->text[i].len != dv->text[i].len || memcmp(t->text[i].ptr, dv->text[i].ptr, t->text[i].len) != 0 ||
            t->attrs[i] != dv->attrs[i])
            return llmm__diag_fail(d, LLMM_ERR_INVALID_ARG, "token %u differs between the draft model and the target", i);
    return LLMM_OK;
}

static size_t argmax_id(const float *l, size_t n) {
    size_t best = 0;
    for (size_t i = 1; i < n; i++)
        if (l[i] > l[best]) best = i;
    return best;
}

/* The draft's seq made to hold history[0, n - 1) and its logits to follow history[n - 1]. A
 * draft with a recurrent state goes back to the checkpoint taken when it started guessing and
 * computes the kept guesses again; without a usable one it starts over from nothing. */
static llmm_status catch_up(draft_proposer *dp, llmm_seq_id seq, const llmm_token *history, size_t n) {
    const kv_seq *held = &dp->ctx->kv.seqs[seq];
    size_t common = 0;
    while (common < held->len && common < n && held->tokens[common] == history[common]) common++;
    if (common == n) common = n - 1; /* the last token's logits are needed again */
    llmm_status st = llmm__seq_rewind(dp->ctx, seq, (uint32_t)common);
    if (st == LLMM_ERR_UNSUPPORTED) st = llmm__seq_rewind(dp->ctx, seq, (uint32_t)(common = 0));
    if (!st) st = llmm_prefill(dp->ctx, seq, history + common, n - common, 0);
    return st ? st : llmm__checkpoint_take(dp->ctx, &seq, 1);
}

static llmm_status draft_propose(spec_proposer *base, llmm_seq_id seq, const llmm_token *history, size_t n,
                                 size_t max, llmm_token *out, float *q, size_t *n_out) {
    draft_proposer *dp = (draft_proposer *)base;
    llmm_context *c = dp->ctx;
    *n_out = 0;
    if (n == 0 || n + max > c->params.n_ctx) return LLMM_OK;
    llmm_status st = catch_up(dp, seq, history, n);
    for (size_t i = 0; !st && i < max; i++) {
        const float *logits;
        size_t nv;
        if ((st = llmm_logits(c, 0, &logits, &nv))) break;
        if (dp->sampler) {
            float *qi = q + i * nv;
            if ((st = llmm__sampler_probs(dp->sampler, logits, nv, qi))) break;
            out[i] = llmm__sample_draw(qi, nv, llmm__sampler_uniform(dp->sampler));
        } else {
            out[i] = (llmm_token)argmax_id(logits, nv);
        }
        *n_out = i + 1;
        /* the last guess is decoded only if the target keeps it: the next catch-up does that */
        if (i + 1 < max) st = llmm_decode(c, &seq, &out[i], 1);
    }
    return st;
}

static void draft_destroy(spec_proposer *base) {
    draft_proposer *dp = (draft_proposer *)base;
    llmm_context_free(dp->ctx);
    llmm_sampler_free(dp->sampler);
    llmm__mem_free(dp->alloc, dp);
}

static const spec_proposer_ops draft_ops = {.name = "draft model", .propose = draft_propose, .destroy = draft_destroy};

/* The draft's context: the target's shape, so that every target sequence has its draft twin. */
static llmm_status draft_context(llmm_context *target, const llmm_model *draft, llmm_context **out) {
    llmm_context_params p;
    llmm_context_params_default(&p, sizeof p);
    const llmm_context_params *t = &target->params;
    p.n_ctx = t->n_ctx;
    p.n_seq_max = t->n_seq_max;
    p.n_threads = t->n_threads;
    p.backend = target->be->kind;
    p.kv_type = t->kv_type;
    p.device = t->device;
    p.log = t->log;
    p.log_user = t->log_user;
    p.log_level = t->log_level;
    return llmm_context_create(draft, &p, out);
}

llmm_status llmm__spec_draft_create(llmm_context *target, const llmm_model *draft, const llmm_sampler_params *sampling,
                              spec_proposer **out, llmm_diag *d) {
    llmm_status st = check_vocab(&target->model->vocab, &draft->vocab, d);
    if (st) return st;
    const llmm_allocator *alloc = target->model->alloc;
    draft_proposer *dp = llmm__mem_calloc(alloc, 1, sizeof *dp);
    if (!dp) return llmm__diag_fail(d, LLMM_ERR_NO_MEMORY, "out of memory for the draft proposer");
    dp->base.ops = &draft_ops;
    dp->alloc = alloc;
    if (sampling && sampling->temperature > 0) {
        llmm_sampler_params sp;
        llmm_sampler_params_default(&sp, sizeof sp);
        if (!llmm__struct_import(&sp, sizeof sp, sampling, sizeof sp)) {
            draft_destroy(&dp->base);
            return llmm__diag_fail(d, LLMM_ERR_INVALID_ARG, "the draft's sampling params: size too small");
        }
        sp.penalty_last_n = 0; /* the guesses' distribution must be known exactly: no history */
        sp.seed = sampling->seed + 1;
        st = llmm__sampler_create(&sp, alloc, &dp->sampler, d);
        dp->base.draws = 1;
    }
    if (!st && (st = draft_context(target, draft, &dp->ctx))) {
        char msg[256];
        llmm_model_last_error(draft, msg, sizeof msg);
        llmm__diag_fail(d, st, "the draft model's context: %s", msg);
    }
    if (st) {
        draft_destroy(&dp->base);
        return st;
    }
    *out = &dp->base;
    return LLMM_OK;
}
