/* Speculative decoding (docs/api.md "Speculative decoding"): proposers behind one small
 * interface, the verify step over several sequences' guesses and the acceptance rules. */
#ifndef LLMM_SPECULATIVE_H
#define LLMM_SPECULATIVE_H

#include "context/context.h"
#include "proposer.h"

/* Sampled acceptance (Leviathan et al. / Chen et al. 2023) of a guess drawn from q, for a
 * target whose distribution is p, both over n ids (q NULL: the guess was certain, q one-hot).
 * Keep the guess when u * q(guess) < p(guess), u uniform in [0, 1): probability min(1, p/q).
 * Otherwise the token comes from the residual max(p - q, 0), normalized (llmm__spec_residual writes
 * it, unnormalized, into r; p itself when rounding left it empty). Together the kept guess or
 * the residual's draw is distributed exactly as p. */
int llmm__spec_keep_guess(const float *p, const float *q, llmm_token guess, double u);
void llmm__spec_residual(const float *p, const float *q, size_t n, llmm_token guess, float *r);

/* llmm_generate's use (generate.c): a speculator from its params, or NULL when they ask
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
