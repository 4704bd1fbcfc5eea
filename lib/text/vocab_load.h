/* Loading a vocabulary with its tokenizer's data: the tokens (vocab.c), then what the
 * tokenizer kind needs (a BPE vocab's merges and pre-tokenizer: tokenizer_bpe.c), then the
 * special tokens and flags, which may override the tokenizer's defaults. */
#ifndef LLMM_VOCAB_LOAD_H
#define LLMM_VOCAB_LOAD_H

#include "vocab.h"

/* Read the tokenizer.ggml.* keys. Returns UNSUPPORTED for a tokenizer model (or BPE
 * pre-tokenizer) this build does not implement, BAD_FILE for malformed arrays (wrong element
 * type, wrong length) or merges. Nothing is held on failure. */
llmm_status llmm__vocab_load(llmm_vocab *v, const gguf_file *f, const llmm_allocator *alloc, const llmm_logger *log,
                             llmm_diag *d);
void llmm__vocab_free(llmm_vocab *v, const llmm_allocator *alloc);

#endif
