/* Which tokens a grammar state allows: one token (a walk of its bytes) or the whole
 * vocabulary as a mask (a walk of the token trie, memoised per state and cached per grammar). */
#ifndef LLMM_GRAMMAR_MASK_H
#define LLMM_GRAMMAR_MASK_H

#include "grammar_state.h"

/* Whether the state may take token next, into *allowed (no bounds check on token). Errors:
 * NO_MEMORY, INVALID_ARG past GSTACK_STEP_MAX; the message in s->error. */
llmm_status llmm__grammar_state_allows(llmm_grammar_state *s, llmm_token token, int *allowed);
/* The mask of the tokens allowed next into s->bits. Errors: NO_MEMORY, INVALID_ARG past
 * GSTACK_STEP_MAX. */
llmm_status llmm__grammar_state_fill_mask(llmm_grammar_state *s);

void llmm__walk_memo_free(walk_memo *m, const llmm_allocator *alloc);
llmm_status llmm__mask_cache_create(mask_cache **out, const llmm_allocator *alloc);
void llmm__mask_cache_free(mask_cache *c, const llmm_allocator *alloc);

#endif
