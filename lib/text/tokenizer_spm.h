/* SentencePiece-style tokenization: characters merged pairwise by the highest piece score. */
#ifndef LLMM_TOKENIZER_SPM_H
#define LLMM_TOKENIZER_SPM_H

#include "vocab.h"

/* Tokenize already-escaped text (spaces as U+2581, the space prefix already added) and
 * append the ids to out. Bytes that form no piece become byte tokens (or the unknown token). */
llmm_status llmm__spm_tokenize(const llmm_vocab *v, const char *text, size_t len, token_list *out);

/* Length of the UTF-8 sequence a lead byte announces (1 for stray continuation bytes). */
size_t llmm__utf8_seq_len(uint8_t lead);

#endif
