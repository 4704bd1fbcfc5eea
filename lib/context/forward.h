/* One transformer step over a batch of rows, written once against the backend table. */
#ifndef LLMM_FORWARD_H
#define LLMM_FORWARD_H

#include "context.h"

/* Row i is tokens[i] at position pos[i] of sequence seqs[i] (n <= ctx->max_rows); kind says
 * whether the rows are a prompt's or one new token per sequence (the backend's step_begin).
 * Writes the rows' K/V and leaves the logits of rows [first_logit_row, n) in ctx->act.logits.
 * Returns ABORTED when the abort callback fires between layers. */
llmm_status llmm__forward_step(llmm_context *ctx, llmm_step_kind kind, const llmm_token *tokens, const llmm_seq_id *seqs,
                         const int32_t *pos, size_t n, size_t first_logit_row);

#endif
