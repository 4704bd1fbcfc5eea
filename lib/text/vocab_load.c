#include "vocab_load.h"

#include "tokenizer_bpe.h"

llmm_status llmm__vocab_load(llmm_vocab *v, const gguf_file *f, const llmm_allocator *alloc, const llmm_logger *log,
                             llmm_diag *d) {
    llmm_status st = llmm__vocab_load_tokens(v, f, alloc, log, d);
    if (!st && v->kind == LLMM_TOKENIZER_BPE) st = llmm__bpe_load(v, f, alloc, log, d);
    if (!st) st = llmm__vocab_load_finish(v, f, alloc, log, d);
    if (st) llmm__vocab_free(v, alloc);
    return st;
}

void llmm__vocab_free(llmm_vocab *v, const llmm_allocator *alloc) {
    llmm__bpe_free(v, alloc);
    llmm__vocab_release(v, alloc);
}
