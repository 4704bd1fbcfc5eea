/* Fidelity measures (fidelity.h): teacher-forced runs in windows, per-position summaries and
 * their comparison with a reference run. Sums run in double: a KL divergence of 1e-6 is the
 * difference of two sums near 1. */
#include "fidelity.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "context/context.h"

/* ---------------------------------------------------------------- teacher-forced runs */

/* The window predicting text tokens [first, first + len): input i predicts text[first + i]. */
typedef struct fid_window {
    size_t first, len;
} fid_window;

static llmm_token window_input(const llmm_token *text, const fid_window *w, size_t i, llmm_token bos) {
    return i == 0 && bos >= 0 ? bos : text[w->first + i - 1];
}

static llmm_status run_prefill(llmm_context *ctx, const llmm_token *text, const fid_window *w, llmm_token bos,
                               llmm_token *inputs, fidelity_row_fn row, void *user) {
    for (size_t i = 0; i < w->len; i++) inputs[i] = window_input(text, w, i, bos);
    llmm_status st = llmm_seq_clear(ctx, 0);
    if (!st) st = llmm_prefill(ctx, 0, inputs, w->len, LLMM_PREFILL_ALL_LOGITS);
    for (size_t i = 0; !st && i < w->len; i++) {
        const float *logits;
        size_t n_vocab;
        st = llmm_logits(ctx, i, &logits, &n_vocab);
        if (!st) st = row(user, w->first + i, logits, n_vocab);
    }
    return st;
}

/* Windows w[0..nw) decoded side by side as sequences 0..nw-1, one row each a step while it has
 * inputs left. */
static llmm_status run_decode(llmm_context *ctx, const llmm_token *text, const fid_window *w, size_t nw,
                              llmm_token bos, llmm_seq_id *seqs, llmm_token *tokens, size_t *row_window,
                              fidelity_row_fn row, void *user) {
    llmm_status st = LLMM_OK;
    for (size_t s = 0; !st && s < nw; s++) st = llmm_seq_clear(ctx, (llmm_seq_id)s);
    for (size_t t = 0; !st && t < w[0].len; t++) { /* w[0] is the longest: only the last window is short */
        size_t rows = 0;
        for (size_t s = 0; s < nw; s++) {
            if (t >= w[s].len) continue;
            seqs[rows] = (llmm_seq_id)s;
            tokens[rows] = window_input(text, &w[s], t, bos);
            row_window[rows++] = s;
        }
        st = llmm_decode(ctx, seqs, tokens, rows);
        for (size_t r = 0; !st && r < rows; r++) {
            const float *logits;
            size_t n_vocab;
            st = llmm_logits(ctx, r, &logits, &n_vocab);
            if (!st) st = row(user, w[row_window[r]].first + t, logits, n_vocab);
        }
    }
    return st;
}

llmm_status llmm__fidelity_run(llmm_context *ctx, const llmm_token *text, size_t n, const fidelity_run_params *p,
                         fidelity_row_fn row, void *user) {
    if (!ctx || !text || !p || !row || n == 0 || p->window == 0 || p->window > ctx->params.n_ctx)
        return LLMM_ERR_INVALID_ARG;
    const size_t par = p->feed == FIDELITY_FEED_DECODE && p->n_parallel ? p->n_parallel : 1;
    if (par > ctx->params.n_seq_max || (p->feed != FIDELITY_FEED_PREFILL && p->feed != FIDELITY_FEED_DECODE))
        return LLMM_ERR_INVALID_ARG;
    const llmm_allocator *a = ctx->model->alloc;
    /* per parallel window: its bounds; per row: sequence, token, window (prefill uses tokens
     * for a whole window's inputs) */
    const size_t cap = LLMM_MAX(par, p->window);
    fid_window *w = llmm__mem_calloc(a, par, sizeof *w);
    llmm_seq_id *seqs = llmm__mem_calloc(a, par, sizeof *seqs);
    llmm_token *tokens = llmm__mem_calloc(a, cap, sizeof *tokens);
    size_t *row_window = llmm__mem_calloc(a, par, sizeof *row_window);
    llmm_status st = w && seqs && tokens && row_window ? LLMM_OK : LLMM_ERR_NO_MEMORY;
    const size_t first = p->bos >= 0 ? 0 : 1;
    for (size_t at = first; !st && at < n;) {
        size_t nw = 0;
        for (; nw < par && at < n; nw++, at += w[nw - 1].len) w[nw] = (fid_window){at, LLMM_MIN(p->window, n - at)};
        st = p->feed == FIDELITY_FEED_PREFILL
                 ? run_prefill(ctx, text, &w[0], p->bos, tokens, row, user)
                 : run_decode(ctx, text, w, nw, p->bos, seqs, tokens, row_window, row, user);
        if (!st && p->progress && p->progress(p->progress_user, at - first, n - first)) st = LLMM_ERR_ABORTED;
    }
    for (size_t s = 0; s < par; s++) llmm_seq_clear(ctx, (llmm_seq_id)s);
    llmm__mem_free(a, w);
    llmm__mem_free(a, seqs);
    llmm__mem_free(a, tokens);
    llmm__mem_free(a, row_window);
    return st;
}

/* ---------------------------------------------------------------- records */

llmm_status llmm__fidelity_records_init(fidelity_records *r, const llmm_token *text, size_t n, uint32_t top_k,
                                  uint32_t n_vocab) {
    if (!r || top_k == 0 || top_k > n_vocab) return LLMM_ERR_INVALID_ARG;
    for (size_t i = 0; text && i < n; i++)
        if (text[i] < 0 || (uint32_t)text[i] >= n_vocab) return LLMM_ERR_INVALID_ARG;
    memset(r, 0, sizeof *r);
    size_t cells;
    if (!size_mul_ok(n, top_k, &cells)) return LLMM_ERR_NO_MEMORY;
    r->n = n;
    r->top_k = top_k;
    r->n_vocab = n_vocab;
    r->target = llmm__mem_calloc(NULL, n ? n : 1, sizeof *r->target);
    r->lse = llmm__mem_calloc(NULL, n ? n : 1, sizeof *r->lse);
    r->target_logit = llmm__mem_calloc(NULL, n ? n : 1, sizeof *r->target_logit);
    r->top_id = llmm__mem_calloc(NULL, cells ? cells : 1, sizeof *r->top_id);
    r->top_logit = llmm__mem_calloc(NULL, cells ? cells : 1, sizeof *r->top_logit);
    if (!r->target || !r->lse || !r->target_logit || !r->top_id || !r->top_logit) {
        llmm__fidelity_records_free(r);
        return LLMM_ERR_NO_MEMORY;
    }
    if (text && n) memcpy(r->target, text, n * sizeof *text);
    for (size_t i = 0; i < n; i++) r->top_id[i * top_k] = -1;
    return LLMM_OK;
}

void llmm__fidelity_records_free(fidelity_records *r) {
    if (!r) return;
    llmm__mem_free(NULL, r->target);
    llmm__mem_free(NULL, r->lse);
    llmm__mem_free(NULL, r->target_logit);
    llmm__mem_free(NULL, r->top_id);
    llmm__mem_free(NULL, r->top_logit);
    memset(r, 0, sizeof *r);
}

static double log_sum_exp(const float *x, size_t n) {
    float max = x[0];
    for (size_t i = 1; i < n; i++)
        if (x[i] > max) max = x[i];
    double sum = 0;
    for (size_t i = 0; i < n; i++) sum += exp((double)x[i] - max);
    return max + log(sum);
}

/* The k largest of x (descending, lower id first on ties) into ids/vals, by insertion: k is
 * small next to n, so most values fail the first comparison. */
static void top_k(const float *x, size_t n, uint32_t k, int32_t *ids, float *vals) {
    size_t have = 0;
    for (size_t i = 0; i < n; i++) {
        if (have == k && !(x[i] > vals[k - 1])) continue;
        size_t j = have < k ? have++ : k - 1;
        for (; j > 0 && x[i] > vals[j - 1]; j--) {
            ids[j] = ids[j - 1];
            vals[j] = vals[j - 1];
        }
        ids[j] = (int32_t)i;
        vals[j] = x[i];
    }
}

llmm_status llmm__fidelity_records_put(void *records, size_t index, const float *logits, size_t n_vocab) {
    fidelity_records *r = records;
    if (index >= r->n || n_vocab != r->n_vocab) return LLMM_ERR_INVALID_ARG;
    r->lse[index] = log_sum_exp(logits, n_vocab);
    r->target_logit[index] = logits[r->target[index]];
    top_k(logits, n_vocab, r->top_k, r->top_id + index * r->top_k, r->top_logit + index * r->top_k);
    return LLMM_OK;
}

size_t llmm__fidelity_records_count(const fidelity_records *r) {
    size_t n = 0;
    for (size_t i = 0; i < r->n; i++) n += r->top_id[i * r->top_k] >= 0;
    return n;
}

double llmm__fidelity_records_perplexity(const fidelity_records *r) {
    double nll = 0;
    size_t n = 0;
    for (size_t i = 0; i < r->n; i++)
        if (r->top_id[i * r->top_k] >= 0) {
            nll += r->lse[i] - r->target_logit[i];
            n++;
        }
    return n ? exp(nll / (double)n) : NAN;
}

/* ---------------------------------------------------------------- comparison */

llmm_status llmm__fidelity_compare_init(fidelity_compare *c, const fidelity_records *ref) {
    if (!c || !ref) return LLMM_ERR_INVALID_ARG;
    memset(c, 0, sizeof *c);
    c->ref = ref;
    c->kld = llmm__mem_calloc(NULL, ref->n ? ref->n : 1, sizeof *c->kld);
    return c->kld ? LLMM_OK : LLMM_ERR_NO_MEMORY;
}

void llmm__fidelity_compare_free(fidelity_compare *c) {
    if (!c) return;
    llmm__mem_free(NULL, c->kld);
    memset(c, 0, sizeof *c);
}

static size_t argmax(const float *x, size_t n) {
    size_t best = 0;
    for (size_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

/* p log(p/q) summed over the reference's top ids, plus the rest of the mass as one outcome. */
static double kl_divergence(const fidelity_records *ref, size_t index, const float *logits, double test_lse,
                            double *max_dlogit) {
    const int32_t *ids = ref->top_id + index * ref->top_k;
    const float *vals = ref->top_logit + index * ref->top_k;
    double kl = 0, p_top = 0, q_top = 0;
    for (uint32_t j = 0; j < ref->top_k; j++) {
        const double log_p = (double)vals[j] - ref->lse[index], log_q = (double)logits[ids[j]] - test_lse;
        const double p = exp(log_p);
        kl += p * (log_p - log_q);
        p_top += p;
        q_top += exp(log_q);
        const double d = fabs((double)logits[ids[j]] - vals[j]);
        if (d > *max_dlogit) *max_dlogit = d;
    }
    /* below 1e-12 the rest is rounding of the sums, not probability */
    const double p_rest = 1.0 - p_top, q_rest = LLMM_MAX(1.0 - q_top, 1e-300);
    if (p_rest > 1e-12) kl += p_rest * log(p_rest / q_rest);
    return kl > 0 ? kl : 0; /* a divergence is >= 0; below, the sums' rounding */
}

llmm_status llmm__fidelity_compare_put(void *compare, size_t index, const float *logits, size_t n_vocab) {
    fidelity_compare *c = compare;
    const fidelity_records *ref = c->ref;
    if (n_vocab != ref->n_vocab || index >= ref->n || c->n == ref->n) return LLMM_ERR_INVALID_ARG;
    if (ref->top_id[index * ref->top_k] < 0) return LLMM_ERR_NOT_FOUND;
    const double test_lse = log_sum_exp(logits, n_vocab);
    const llmm_token target = ref->target[index];
    c->kld[c->n++] = kl_divergence(ref, index, logits, test_lse, &c->max_dlogit);
    const int32_t test_top = (int32_t)argmax(logits, n_vocab), ref_top = ref->top_id[index * ref->top_k];
    c->top1_same += test_top == ref_top;
    c->ref_top1_text += ref_top == target;
    c->test_top1_text += test_top == target;
    c->nll_ref += ref->lse[index] - ref->target_logit[index];
    c->nll_test += test_lse - logits[target];
    return LLMM_OK;
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

fidelity_summary llmm__fidelity_compare_summary(fidelity_compare *c) {
    fidelity_summary s = {.n = c->n};
    if (c->n == 0) return s;
    const double n = (double)c->n;
    double sum = 0;
    for (size_t i = 0; i < c->n; i++) sum += c->kld[i];
    qsort(c->kld, c->n, sizeof *c->kld, cmp_double);
    s.kld_mean = sum / n;
    s.kld_p99 = c->kld[(size_t)ceil(0.99 * n) - 1];
    s.kld_max = c->kld[c->n - 1];
    s.top1_agree = (double)c->top1_same / n;
    s.max_dlogit = c->max_dlogit;
    s.ref_top1_text = (double)c->ref_top1_text / n;
    s.test_top1_text = (double)c->test_top1_text / n;
    s.ppl_ref = exp(c->nll_ref / n);
    s.ppl_test = exp(c->nll_test / n);
    return s;
}
