/* llmm_decode_sample against the host sampler (decode_sample_check.h). */
#include "support/decode_sample_check.h"
#include "support/fixtures.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

enum { N_ROWS = 3, MAX_PROMPT = 64 };

static llmm_sampler *make_sampler(int row, uint64_t seed) {
    llmm_sampler_params sp;
    llmm_sampler_params_default(&sp, sizeof sp);
    sp.seed = seed;
    if (row == 0) {
        sp.temperature = 0;
    } else if (row == 1) {
        sp.temperature = 1.1f;
        sp.top_k = 20;
        sp.top_p = 0.9f;
        sp.min_p = 0;
    } else {
        sp.temperature = 0.9f;
        sp.top_k = 0;
        sp.top_p = 1;
        sp.min_p = 0.02f;
        sp.repeat_penalty = 1.3f;
        sp.frequency_penalty = 0.2f;
        sp.presence_penalty = 0.1f;
        sp.penalty_last_n = 16;
    }
    llmm_sampler *s = NULL;
    assert_int_equal(llmm_sampler_create(&sp, &s), LLMM_OK);
    return s;
}

size_t check_decode_sample(llmm_model *m, const llmm_context_params *p, int steps) {
    static const char *const prompts[N_ROWS] = {"Once upon a time", "The little dog", "Lily and Tom went to the"};
    llmm_context *dev = make_context(m, p), *host = make_context(m, p);
    llmm_sampler *sd[N_ROWS], *sh[N_ROWS];
    llmm_token next_d[N_ROWS], next_h[N_ROWS];
    const llmm_seq_id seqs[N_ROWS] = {1, 0, 2};
    for (int i = 0; i < N_ROWS; i++) {
        llmm_token ids[MAX_PROMPT];
        const size_t n = tokenize(m, prompts[i], ids, MAX_PROMPT);
        assert_int_equal(llmm_prefill(dev, seqs[i], ids, n, 0), LLMM_OK);
        assert_int_equal(llmm_prefill(host, seqs[i], ids, n, 0), LLMM_OK);
        next_d[i] = next_h[i] = ids[n - 1];
        sd[i] = make_sampler(i, 7 + (uint64_t)i);
        sh[i] = make_sampler(i, 7 + (uint64_t)i);
    }

    /* argument errors: nothing decoded, the sequences keep their lengths */
    llmm_context_stats before = {.size = sizeof before}, after = {.size = sizeof after};
    assert_int_equal(llmm_context_get_stats(dev, &before), LLMM_OK);
    llmm_token out[N_ROWS];
    assert_int_equal(llmm_decode_sample(dev, seqs, next_d, N_ROWS, NULL, out), LLMM_ERR_INVALID_ARG);
    assert_int_equal(llmm_decode_sample(dev, seqs, next_d, N_ROWS, sd, NULL), LLMM_ERR_INVALID_ARG);
    llmm_sampler *with_null[N_ROWS] = {sd[0], NULL, sd[2]};
    assert_int_equal(llmm_decode_sample(dev, seqs, next_d, N_ROWS, with_null, out), LLMM_ERR_INVALID_ARG);
    assert_non_null(strstr(llmm_context_last_error(dev), "samplers[1]"));
    assert_int_equal(llmm_decode_sample(NULL, seqs, next_d, N_ROWS, sd, out), LLMM_ERR_INVALID_ARG);
    assert_int_equal(llmm_context_get_stats(dev, &after), LLMM_OK);
    assert_int_equal(after.tokens_decoded, before.tokens_decoded);

    size_t compared = 0;
    llmm_model_info info = {.size = sizeof info};
    assert_int_equal(llmm_model_get_info(m, &info), LLMM_OK);
    const size_t nv = info.n_vocab;
    for (int step = 0; step < steps; step++) {
        assert_int_equal(llmm_decode_sample(dev, seqs, next_d, N_ROWS, sd, out), LLMM_OK);
        assert_int_equal(llmm_decode(host, seqs, next_h, N_ROWS), LLMM_OK);
        for (int i = 0; i < N_ROWS; i++) {
            const float *lh = NULL, *ld = NULL;
            size_t n_vocab = 0;
            assert_int_equal(llmm_logits(host, (size_t)i, &lh, &n_vocab), LLMM_OK);
            assert_int_equal(n_vocab, nv);
            assert_int_equal(llmm_sample(sh[i], lh, n_vocab, &next_h[i]), LLMM_OK);
            /* the same backend, the same kernels: the same logits, copied back on request */
            assert_int_equal(llmm_logits(dev, (size_t)i, &ld, &n_vocab), LLMM_OK);
            assert_memory_equal(ld, lh, nv * sizeof *ld);
            assert_int_equal(out[i], next_h[i]);
            next_d[i] = out[i];
            assert_int_equal(llmm_sampler_accept(sd[i], out[i]), LLMM_OK);
            assert_int_equal(llmm_sampler_accept(sh[i], next_h[i]), LLMM_OK);
            compared++;
        }
    }
    assert_int_equal(llmm_logits(dev, N_ROWS, &(const float *){NULL}, NULL), LLMM_ERR_NOT_FOUND);
    for (int i = 0; i < N_ROWS; i++) {
        llmm_sampler_free(sd[i]);
        llmm_sampler_free(sh[i]);
    }
    llmm_context_free(dev);
    llmm_context_free(host);
    return compared;
}
