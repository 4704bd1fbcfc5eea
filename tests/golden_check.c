#include "golden_check.h"

#include <stdarg.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <string.h>

const golden_case golden_cases[] = {
    {"stories260K.gguf", "stories260K.f32.once", "Once upon a time", 64},
    {"stories260K.gguf", "stories260K.f32.dog", "The little dog", 64},
    {"stories260K.gguf", "stories260K.f32.empty", "", 64},
    {"stories260K-q8_0.gguf", "stories260K.q8_0.once", "Once upon a time", 64},
    {"stories260K-q8_0.gguf", "stories260K.q8_0.dog", "The little dog", 64},
    {"stories260K-q8_0.gguf", "stories260K.q8_0.empty", "", 64},
    {"stories260K-q4_0.gguf", "stories260K.q4_0.once", "Once upon a time", 57},
    {"llama-2-tiny-random.gguf", "llama-2-tiny-random.f16.once", "Once upon a time", 1},
};
const size_t n_golden_cases = sizeof golden_cases / sizeof *golden_cases;

golden_result golden_compare(const llmm_model *m, llmm_context *c, const golden_run *g, const char *prompt) {
    golden_result r = {0, 0};
    llmm_token ids[GOLDEN_MAX_IDS];
    size_t n = 0;
    assert_int_equal(llmm_tokenize(m, prompt, strlen(prompt), LLMM_TOKENIZE_ADD_SPECIAL, ids, GOLDEN_MAX_IDS, &n),
                     LLMM_OK);
    assert_int_equal(n, g->n_prompt);
    assert_memory_equal(ids, g->prompt, n * sizeof *ids);
    assert_int_equal(llmm_prefill(c, 0, ids, n, 0), LLMM_OK);
    const float *logits;
    size_t n_vocab;
    assert_int_equal(llmm_logits(c, 0, &logits, &n_vocab), LLMM_OK);
    assert_int_equal(n_vocab, g->n_logits);
    for (size_t i = 0; i < n_vocab; i++) r.max_logit_diff = fmax(r.max_logit_diff, fabs((double)logits[i] - g->logits[i]));

    llmm_sampler_params sp;
    llmm_sampler_params_default(&sp, sizeof sp);
    sp.temperature = 0;
    llmm_generate_params gp;
    llmm_generate_params_default(&gp, sizeof gp);
    gp.sampling = &sp;
    gp.max_tokens = (int32_t)g->n_generated;
    llmm_token out[GOLDEN_MAX_IDS];
    gp.out_tokens = out;
    gp.out_capacity = GOLDEN_MAX_IDS;
    llmm_generate_stats st = {.size = sizeof st};
    assert_int_equal(llmm_generate(c, prompt, &gp, &st), LLMM_OK);
    assert_int_equal(st.n_prompt, n);
    while (r.agree < st.n_generated && r.agree < g->n_generated && out[r.agree] == g->generated[r.agree]) r.agree++;
    return r;
}
