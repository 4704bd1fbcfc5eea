/* Text to token ids and back, over a vocabulary (the public calls that take a model are
 * model/model_text.c's). */
#ifndef LLMM_TOKENIZER_H
#define LLMM_TOKENIZER_H

#include "vocab.h"

/* Append the ids of text_len bytes of text to out; flags are LLMM_TOKENIZE_*. NO_MEMORY, or
 * another status when the vocabulary cannot represent a byte of the input. v has a
 * tokenizer (kind != NONE). */
llmm_status llmm__vocab_tokenize(const llmm_vocab *v, const llmm_allocator *a, const char *text, size_t text_len,
                                 uint32_t flags, token_list *out);

/* Token t's bytes (flags LLMM_PIECE_*) into scratch, at most scratch_cap of them: at most the
 * token's text length, or 3 bytes for the unknown marker. Returns the count. */
size_t llmm__vocab_piece(const llmm_vocab *v, llmm_token t, uint32_t flags, char *scratch, size_t scratch_cap);

#endif
