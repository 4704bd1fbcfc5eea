/* Byte-level BPE (tokenizer.ggml.model "gpt2"): text is split into words by the pre-tokenizer
 * family that tokenizer.ggml.pre names, each word's bytes become GPT-2 byte symbols, and
 * adjacent symbols merge in the order of tokenizer.ggml.merges (lowest rank first). */
#ifndef LLMM_TOKENIZER_BPE_H
#define LLMM_TOKENIZER_BPE_H

#include "pretokenizer.h"
#include "vocab.h"

typedef struct bpe_merge {
    uint32_t left, right, result; /* token ids: left + right merge into result */
} bpe_merge;

typedef struct bpe_model {
    const pretok_family *family;
    pretokenizer pre;
    bpe_merge *merges;       /* (n_merges) in rank order: the index is the rank */
    uint32_t n_merges;
    uint32_t *slots;         /* (slot_cap) open addressing on (left, right): rank + 1, 0 = empty */
    uint32_t slot_cap;       /* power of two >= 2 * n_merges */
    int32_t byte_token[256]; /* token of each byte's GPT-2 symbol; -1 when the vocab lacks it */
} bpe_model;

/* The BPE half of llmm__vocab_load, run once the tokens are loaded: the pre-tokenizer family (and
 * with it the default add_bos), the merge table, the byte symbols. Errors: BAD_FILE for missing
 * or malformed merges, UNSUPPORTED for an unknown tokenizer.ggml.pre. */
llmm_status llmm__bpe_load(llmm_vocab *v, const gguf_file *f, const llmm_allocator *alloc, const llmm_logger *log,
                     llmm_diag *d);
void llmm__bpe_free(llmm_vocab *v, const llmm_allocator *alloc);

/* Tokenize text that holds no special tokens and append the ids. Lossless when the vocab has
 * all 256 byte symbols (most do); a byte without one is dropped, as the reference engine does. */
llmm_status llmm__bpe_tokenize(const llmm_vocab *v, const char *text, size_t len, token_list *out);

/* A token's text back to bytes through the inverse byte map, into out (room for len bytes).
 * Characters outside the map, which normal tokens never hold, are copied unchanged. Returns
 * the number of bytes written. */
size_t llmm__bpe_decode_piece(const char *text, size_t len, char *out);

#endif
