/* Proposers of speculative decoding: what guesses the next tokens of a sequence. */
#ifndef LLMM_PROPOSER_H
#define LLMM_PROPOSER_H

#include "context/context.h"

typedef struct spec_proposer spec_proposer;

/* What every proposer does. A new kind of proposer is a file with a constructor that fills
 * one of these; the speculator (speculative.c) knows nothing else about it. */
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

/* Prompt lookup (spec_proposer_ngram.c): the tokens that followed the most recent earlier
 * occurrence of the history's last n tokens, n from max_ngram down to min_ngram. */
llmm_status llmm__spec_ngram_create(const llmm_allocator *alloc, uint32_t max_ngram, uint32_t min_ngram,
                              spec_proposer **out);

/* A draft model (spec_proposer_draft.c) in a context of its own, like target's, whose
 * sequence seq follows the target's seq. sampling NULL or greedy: the draft's argmax. A
 * vocabulary that differs from the target's is INVALID_ARG with the difference in d. */
llmm_status llmm__spec_draft_create(llmm_context *target, const llmm_model *draft, const llmm_sampler_params *sampling,
                              spec_proposer **out, llmm_diag *d);

#endif
