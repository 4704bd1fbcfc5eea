/* Fidelity: how far one configuration's next-token distributions are from a reference run's
 * over the same text. Both runs are teacher-forced (every position reads the text's tokens,
 * never a sampled one), so the measures compare distributions position by position and do not
 * compound. Used by llmmini-perplexity and tests/test_fidelity.c; docs/performance.md "Fidelity"
 * holds the measured figures.
 *
 * A text of n tokens is cut into windows; each window starts from an empty sequence. Every
 * position of a window predicts the text token after it: with a BOS prefix, the window's first
 * input is BOS and every text token is predicted exactly once; without one, text token 0 is
 * never predicted (nothing precedes it) and the others are. Positions are named by the index
 * of the text token they predict. */
#ifndef LLMM_FIDELITY_H
#define LLMM_FIDELITY_H

#include <stddef.h>
#include <stdint.h>

#include "base/common.h"
#include "llmmini.h"

/* How a window's tokens reach the model. */
typedef enum fidelity_feed {
    FIDELITY_FEED_PREFILL = 0, /* one llmm_prefill per window, all logits (the context's n_batch chunks it) */
    FIDELITY_FEED_DECODE = 1   /* one llmm_decode row per token; n_parallel windows share each step */
} fidelity_feed;

typedef struct fidelity_run_params {
    size_t window;        /* positions per window (<= the context's n_ctx) */
    llmm_token bos;       /* the first input of every window, or -1 for none */
    fidelity_feed feed;
    size_t n_parallel;    /* FIDELITY_FEED_DECODE: windows decoded together, as sequences
                             0..n_parallel-1 (<= the context's n_seq_max); 0 means 1 */
    /* optional, after each window (or group of parallel windows): positions done of all;
     * non-zero stops the run with LLMM_ERR_ABORTED */
    int (*progress)(void *user, size_t done, size_t total);
    void *progress_user;
} fidelity_run_params;

/* Receives the logits (n_vocab floats, valid during the call) of the position predicting text
 * token `index`. Called once per predicted token, in window order (interleaved across windows
 * with n_parallel > 1). Returns LLMM_OK or an error that stops the run. */
typedef llmm_status (*fidelity_row_fn)(void *user, size_t index, const float *logits, size_t n_vocab);

/* Run text[0..n) through ctx as params say, calling row for every predicted token. Uses and
 * clears sequences 0..n_parallel-1 of ctx. Errors: INVALID_ARG (bad params, empty text), those
 * of llmm_prefill/llmm_decode (message in llmm_context_last_error), row's, ABORTED. */
llmm_status llmm__fidelity_run(llmm_context *ctx, const llmm_token *text, size_t n, const fidelity_run_params *params,
                         fidelity_row_fn row, void *user);

/* ---------------------------------------------------------------- a run's summary */

/* Per predicted position: the log-sum-exp of its logits, the logit of the text's token, and the
 * top_k largest logits with their ids (descending; the lowest id first on ties, as greedy
 * sampling picks). A position never predicted has top_id[k * i] = -1. */
typedef struct fidelity_records {
    size_t n;            /* positions: the text's tokens */
    uint32_t top_k, n_vocab;
    llmm_token *target;  /* (n) the text's tokens */
    double *lse;         /* (n) in double: 1 - the top_k's mass must be exact to 1e-12 */
    float *target_logit; /* (n) */
    int32_t *top_id;     /* (n, top_k) */
    float *top_logit;    /* (n, top_k) */
} fidelity_records;

/* Allocate records for a text of n tokens (copied; NULL leaves the targets 0 for a reader to
 * fill) and top_k ids a position (1..n_vocab), no position predicted yet.
 * Errors: INVALID_ARG (also a token outside the vocabulary), NO_MEMORY. */
llmm_status llmm__fidelity_records_init(fidelity_records *r, const llmm_token *text, size_t n, uint32_t top_k,
                                  uint32_t n_vocab);
void llmm__fidelity_records_free(fidelity_records *r);
/* Summarize one position's logits into r; a fidelity_row_fn with user = the records. */
llmm_status llmm__fidelity_records_put(void *records, size_t index, const float *logits, size_t n_vocab);
/* Positions predicted, and the perplexity over them: exp(mean(lse - target_logit)). */
size_t llmm__fidelity_records_count(const fidelity_records *r);
double llmm__fidelity_records_perplexity(const fidelity_records *r);

/* ---------------------------------------------------------------- comparing with a reference */

/* Compares a test run's logits with reference records position by position. */
typedef struct fidelity_compare {
    const fidelity_records *ref;
    double *kld;          /* (ref->n) KL(reference || test) per position */
    size_t n, top1_same, ref_top1_text, test_top1_text;
    double nll_ref, nll_test, max_dlogit;
} fidelity_compare;

/* What a comparison found, over the positions both runs predicted. */
typedef struct fidelity_summary {
    size_t n;
    double ppl_ref, ppl_test;
    double kld_mean, kld_p99, kld_max; /* nats */
    double top1_agree;                 /* fraction of positions whose argmax is the reference's */
    double max_dlogit;                 /* max |test - reference| over the reference's top_k logits */
    double ref_top1_text, test_top1_text; /* fraction whose argmax is the text's next token */
} fidelity_summary;

llmm_status llmm__fidelity_compare_init(fidelity_compare *c, const fidelity_records *ref);
void llmm__fidelity_compare_free(fidelity_compare *c);
/* Compare one position of the test run (a fidelity_row_fn with user = the comparison). The KL
 * divergence sums p log(p/q) over the reference's top_k ids plus one term for the probability
 * outside them taken as one outcome: exact when top_k = n_vocab, otherwise a lower bound that
 * approaches the full divergence as the top_k hold the mass. Errors: NOT_FOUND (the reference
 * did not predict this position), INVALID_ARG (n_vocab differs, index out of range, or more
 * positions than the reference has). */
llmm_status llmm__fidelity_compare_put(void *compare, size_t index, const float *logits, size_t n_vocab);
/* The summary of the positions compared so far (sorts c->kld's used part for the percentile). */
fidelity_summary llmm__fidelity_compare_summary(fidelity_compare *c);

/* ---------------------------------------------------------------- saved runs (fidelity_file.c) */

/* What identifies the model and the run a saved file came from. */
typedef struct fidelity_file_info {
    uint64_t vocab_hash;  /* the vocabulary's pieces: must match to compare */
    uint64_t model_hash;  /* architecture, shape and file size: tells whether the file is the same */
    uint32_t window;      /* the run's window: must match to compare */
    int32_t bos;          /* the run's BOS input, -1 for none: must match */
} fidelity_file_info;

/* The fingerprints of a loaded model (fills vocab_hash and model_hash only). */
llmm_status llmm__fidelity_model_fingerprint(const llmm_model *m, fidelity_file_info *info);

/* Write records and info to path (replaced). Format in fidelity_file.c. Errors: IO, NO_MEMORY. */
llmm_status llmm__fidelity_save(const char *path, const fidelity_records *r, const fidelity_file_info *info,
                          llmm_diag *d);
/* Read a file llmm__fidelity_save wrote into *r (initialized here; free with llmm__fidelity_records_free) and
 * *info. Every field is checked: errors IO, BAD_FILE (wrong magic or version, sizes that do not
 * fit the file, ids out of range), NO_MEMORY; the message goes to d. */
llmm_status llmm__fidelity_load(const char *path, fidelity_records *r, fidelity_file_info *info, llmm_diag *d);

#endif
