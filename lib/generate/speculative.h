/* Speculative decoding (docs/api.md "Speculative decoding"): proposers behind one small
 * interface, the verify step over several sequences' guesses and the acceptance rules. */
#ifndef LLMM_SPECULATIVE_H
#define LLMM_SPECULATIVE_H

#include "context/context.h"

typedef struct spec_proposer spec_proposer;

/* What every proposer does. A new kind of proposer is a file with a constructor that fills
 * one of these; the speculator (lib/speculative.c) knows nothing else about it. */
typedef struct spec_proposer_ops {
    const char *name;
    /* Guesses for what follows history[0, n) of seq: up to max ids into out, their count into
     * *n_out. A proposer that draws its guesses also writes each one's distribution into q
     * ((max, n_vocab) floats; set spec_proposer.draws for that); a deterministic one ignores q. */
    llmm_status (*propose)(spec_proposer *p, llmm_seq_id seq, const llmm_token *history, size_t n, size_t max,
                           llmm_token *out, float *q, size_t *n_out);
    void (*destroy)(spec_proposer *p);
} spec_proposer_ops;

/* The common head of every proposer (its first member). */
struct spec_proposer {
    const spec_proposer_ops *ops;
    int draws;        /* guesses are drawn from the distributions written to q (sampled draft) */
    double ms;        /* time spent in propose, summed */
};

/* Prompt lookup (lib/spec_proposer_ngram.c): the tokens that followed the most recent earlier
 * occurrence of the history's last n tokens, n from max_ngram down to min_ngram. */
llmm_status llmm__spec_ngram_create(const llmm_allocator *alloc, uint32_t max_ngram, uint32_t min_ngram,
                              spec_proposer **out);

/* A draft model (lib/spec_proposer_draft.c) in a context of its own, like target's, whose
 * sequence seq follows the target's seq. sampling NULL or greedy: the draft's argmax. A
 * vocabulary that differs from the target's is INVALID_ARG with the difference in d. */
llmm_status llmm__spec_draft_create(llmm_context *target, const llmm_model *draft, const llmm_sampler_params *sampling,
                              spec_proposer **out, llmm_diag *d);

/* Sampled acceptance (Leviathan et al. / Chen et al. 2023) of a guess drawn from q, for a
 * target whose distribution is p, both over n ids (q NULL: the guess was certain, q one-hot).
 * Keep the guess when u * q(guess) < p(guess), u uniform in [0, 1): probability min(1, p/q).
 * Otherwise the token comes from the residual max(p - q, 0), normalized (llmm__spec_residual writes
 * it, unnormalized, into r; p itself when rounding left it empty). Together the kept guess or
 * the residual's draw is distributed exactly as p. */
int llmm__spec_keep_guess(const float *p, const float *q, llmm_token guess, double u);
void llmm__spec_residual(const float *p, const float *q, size_t n, llmm_token guess, float *r);
/* A draw from the weights w[0..n), normalized, with u uniform in [0, 1): the first id at which
 * the running sum exceeds u * sum(w) (the last positive one when rounding leaves u beyond). */
llmm_token llmm__spec_draw(const float *w, size_t n, double u);

/* llmm_generate's use (lib/generate.c): a speculator from its params, or NULL when they ask
 * for none (*out NULL, LLMM_OK). */
llmm_status llmm__spec_for_generate(llmm_context *ctx, const llmm_generate_params *p, llmm_speculator **out);
/* One round for seq: propose, verify and accept; out (1 + LLMM_SPEC_MAX_TOKENS) receives the
 * kept guesses and the next token, each already accepted into sampler. With no guess it is
 * llmm_decode_sample of pending. */
llmm_status llmm__spec_round(llmm_speculator *s, llmm_seq_id seq, llmm_token pending, llmm_sampler *sampler,
                       llmm_token *out, size_t *n_out);
/* The counters of llmm_generate_stats' spec_* fields. */
void llmm__spec_counters(const llmm_speculator *s, uint64_t *proposed, uint64_t *accepted, uint64_t *steps,
                   double *draft_ms);

#endif
