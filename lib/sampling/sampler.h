/* Internal entry point to the sampler for the library's own callers (llmm_generate). */
#ifndef LLMM_SAMPLER_H
#define LLMM_SAMPLER_H

#include "backend/backend.h"
#include "base/common.h"

/* llmm_sampler_create with an allocator (NULL = the C library; copied, so it need not
 * outlive the call, but its functions and user data must outlive the sampler) and a diag
 * (may be NULL) that receives why the params were rejected. */
llmm_status llmm__sampler_create(const llmm_sampler_params *params, const llmm_allocator *alloc,
                           llmm_sampler **out, llmm_diag *d);

/* What llmm_sample would do for this sampler now, as data for a backend's sample slot
 * (backend.h llmm_sample_request): its params, its penalty window as distinct ascending tokens
 * with counts (sampler-owned scratch, valid until the next call on s) and, when temperature > 0,
 * the draw llmm_sample would make (the RNG advances the same). INVALID_ARG for n_vocab as
 * llmm_sample refuses it, nothing drawn. */
llmm_status llmm__sampler_request(llmm_sampler *s, size_t n_vocab, llmm_sample_request *out);

/* Whether llmm_sample's result depends on token ids beyond their order (the penalties look
 * tokens up by id): if not, sampling a subset of the logits in id order gives the same token as
 * sampling all of them with the rest at -inf. */
int llmm__sampler_uses_token_ids(const llmm_sampler *s);

/* The sampler's RNG state, saved and put back: llmm_decode_sample rewinds the draws it made for
 * a device that could not sample, before it samples the same rows on the host. */
void llmm__sampler_rng_save(const llmm_sampler *s, uint64_t state[4]);
void llmm__sampler_rng_restore(llmm_sampler *s, const uint64_t state[4]);

/* The distribution llmm_sample draws from for these logits, over every id (0 for the ids that
 * penalties, top-k, top-p and min-p leave out; a one-hot argmax when greedy), into probs
 * (n_vocab). Draws nothing. Errors as llmm_sample's, recorded on s. Speculative decoding's
 * sampled acceptance (lib/generate/speculative.c) compares these with the proposer's. */
llmm_status llmm__sampler_probs(llmm_sampler *s, const float *logits, size_t n_vocab, float *probs);
/* The next number of the sampler's RNG stream, uniform in [0, 1). */
double llmm__sampler_uniform(llmm_sampler *s);
/* A draw from the weights w[0..n), normalized, with u uniform in [0, 1): the first id at which
 * the running sum exceeds u * sum(w) (the last positive one when rounding leaves u beyond).
 * Speculative decoding draws its guesses and residuals with it. */
llmm_token llmm__sample_draw(const float *w, size_t n, double u);
/* Temperature <= 0: llmm_sample takes the argmax and draws nothing. */
int llmm__sampler_is_greedy(const llmm_sampler *s);

#endif
