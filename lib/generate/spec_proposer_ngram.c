/* Prompt lookup: guesses copied from earlier text of the sequence itself. When the last n
 * tokens occurred before, what followed them then is proposed now; quotes, code edits and
 * summaries repeat their input, and greedy loops repeat themselves. Costs no model. */
#include "proposer.h"

typedef struct ngram_proposer {
    spec_proposer base;
    const llmm_allocator *alloc;
    uint32_t max_ngram, min_ngram;
} ngram_proposer;

/* Start of the most recent occurrence of h[n - len, n) that begins before n - len; -1 if none. */
static ptrdiff_t latest_match(const llmm_token *h, size_t n, size_t len) {
    const llmm_token *tail = h + n - len;
    for (size_t start = n - len; start-- > 0;) {
        size_t i = 0;
        while (i < len && h[start + i] == tail[i]) i++;
        if (i == len) return (ptrdiff_t)start;
    }
    return -1;
}

static llmm_status ngram_propose(spec_proposer *base, llmm_seq_id seq, const llmm_token *history, size_t n,
                                 size_t max, llmm_token *out, float *q, size_t *n_out) {
    const ngram_proposer *g = (const ngram_proposer *)base;
    (void)seq;
    (void)q;
    *n_out = 0;
    for (size_t len = LLMM_MIN((size_t)g->max_ngram, n > 0 ? n - 1 : 0); len >= g->min_ngram && len > 0; len--) {
        const ptrdiff_t start = latest_match(history, n, len);
        if (start < 0) continue;
        /* the continuation may run into the tail itself (a period shorter than the guesses):
         * it then goes on with the guesses already made, as the text would if it repeats */
        const size_t from = (size_t)start + len;
        for (size_t i = 0; i < max; i++) {
            const size_t at = from + i;
            out[i] = at < n ? history[at] : out[at - n];
        }
        *n_out = max;
        return LLMM_OK;
    }
    return LLMM_OK;
}

static void ngram_destroy(spec_proposer *base) {
    ngram_proposer *g = (ngram_proposer *)base;
    llmm__mem_free(g->alloc, g);
}

static const spec_proposer_ops ngram_ops = {.name = "prompt lookup", .propose = ngram_propose, .destroy = ngram_destroy};

llmm_status llmm__spec_ngram_create(const llmm_allocator *alloc, uint32_t max_ngram, uint32_t min_ngram,
                              spec_proposer **out) {
    ngram_proposer *g = llmm__mem_calloc(alloc, 1, sizeof *g);
    if (!g) return LLMM_ERR_NO_MEMORY;
    g->base.ops = &ngram_ops;
    g->alloc = alloc;
    g->max_ngram = max_ngram;
    g->min_ngram = LLMM_MAX(min_ngram, 1u);
    *out = &g->base;
    return LLMM_OK;
}
