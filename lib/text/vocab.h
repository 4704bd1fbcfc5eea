/* The vocabulary: token texts, scores, attributes and special ids read from GGUF metadata,
 * plus the text -> id hash the tokenizers look pieces up in. */
#ifndef LLMM_VOCAB_H
#define LLMM_VOCAB_H

#include <stdint.h>

#include "base/common.h"
#include "format/gguf.h"

typedef struct llmm_vocab {
    llmm_tokenizer_kind kind;
    uint32_t n_tokens;
    gguf_str *text;     /* (n_tokens) token texts, pointing into the GGUF file */
    float *score;       /* (n_tokens) SPM merge scores, 0 when absent */
    uint32_t *attrs;    /* (n_tokens) LLMM_TOKEN_ATTR_* bits */
    uint32_t *hash;     /* (hash_cap) open addressing: token id + 1, 0 = empty */
    uint32_t hash_cap;  /* power of two >= 2 * n_tokens */
    int32_t special[6]; /* by llmm_special_token; -1 = none */
    int32_t byte_token[256]; /* id of <0xNN>, or -1 */
    uint32_t *special_by_len; /* ids parsed out of text before tokenizing, longest first */
    uint32_t n_special_by_len;
    int add_bos, add_eos, add_space_prefix;
    struct bpe_model *bpe; /* merges and pre-tokenizer of a BPE vocab (tokenizer_bpe.h), else NULL */
    const struct tokenizer_model *model; /* the row of tokenizer.ggml.model (vocab.c); NULL: none */
} llmm_vocab;

/* The two halves of reading the tokenizer.ggml.* keys (vocab_load.h runs them, with the
 * tokenizer's own data between them). Tokens: the tokenizer model, texts, scores and types;
 * UNSUPPORTED for a tokenizer model this build does not implement, BAD_FILE for malformed
 * arrays (wrong element type, wrong length); no tokenizer.ggml.model leaves the vocab empty
 * (kind NONE). Finish: special tokens, flags and the byte tokens; nothing for an empty vocab. */
llmm_status llmm__vocab_load_tokens(llmm_vocab *v, const gguf_file *f, const llmm_allocator *alloc,
                                    const llmm_logger *log, llmm_diag *d);
llmm_status llmm__vocab_load_finish(llmm_vocab *v, const gguf_file *f, const llmm_allocator *alloc,
                                    const llmm_logger *log, llmm_diag *d);
/* Free what the vocab itself holds (not the tokenizer's data: llmm__vocab_free). */
void llmm__vocab_release(llmm_vocab *v, const llmm_allocator *alloc);

/* Id of the token whose text is exactly these bytes; -1 if none. With duplicate texts the
 * highest id wins, as in the reference engine. */
int32_t llmm__vocab_find(const llmm_vocab *v, const char *text, size_t len);

/* A growable list of token ids, built per call (so tokenizing needs no shared state). */
typedef struct token_list {
    llmm_token *ids;
    size_t n, cap;
    const llmm_allocator *alloc;
} token_list;

llmm_status llmm__token_list_push(token_list *l, llmm_token id);
void llmm__token_list_free(token_list *l);

#endif
