#include "support/golden_check.h"
#include "support/fixtures.h"

#include <stdarg.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
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
    const size_t n = tokenize(m, prompt, ids, GOLDEN_MAX_IDS);
    assert_int_equal(n, g->n_prompt);
    assert_memory_equal(ids, g->prompt, n * sizeof *ids);
    assert_int_equal(llmm_prefill(c, 0, ids, n, 0), LLMM_OK);
    const float *logits;
    size_t n_vocab;
    assert_int_equal(llmm_logits(c, 0, &logits, &n_vocab), LLMM_OK);
    assert_int_equal(n_vocab, g->n_logits);
    for (size_t i = 0; i < n_vocab; i++) r.max_logit_diff = fmax(r.max_logit_diff, fabs((double)logits[i] - g->logits[i]));

    llmm_token out[GOLDEN_MAX_IDS];
    llmm_generate_stats st;
    generate_greedy(c, prompt, out, g->n_generated, &st);
    assert_int_equal(st.n_prompt, n);
    while (r.agree < st.n_generated && r.agree < g->n_generated && out[r.agree] == g->generated[r.agree]) r.agree++;
    return r;
}

const arch_case arch_cases[] = {
    {"llama", 1e-3}, {"qwen2", 1e-3}, {"qwen3", 1e-3}, {"phi3", 1e-3}, {"gemma2", 1e-2},
    {"gemma3", 1e-2}, {"smollm3", 1e-3}, {"lfm2", 1e-3}, {"qwen35", 1e-3},
};
const size_t n_arch_cases = sizeof arch_cases / sizeof *arch_cases;

/* none today: every golden/arch model has a row above (a C array cannot be empty) */
const char *const arch_unsupported[1] = {NULL};
const size_t n_arch_unsupported = 0;

int check_arch_unsupported(const char *file) {
    const size_t len = strlen(file);
    size_t a = 0;
    while (a < n_arch_unsupported && !(len == strlen(arch_unsupported[a]) + 10 &&
                                       strncmp(file + 5, arch_unsupported[a], len - 10) == 0))
        a++;
    if (a == n_arch_unsupported) return 0;
    char rel[256], path[1024];
    snprintf(rel, sizeof rel, "golden/arch/%s", file);
    llmm_model_params mp;
    llmm_model_params_default(&mp, sizeof mp);
    llmm_model *m = NULL;
    const llmm_status st = llmm_model_load(shared_path(path, sizeof path, rel), &mp, &m);
    if (m) llmm_model_free(m);
    if (st != LLMM_ERR_UNSUPPORTED)
        fail_msg("%s loads with status %d: give its architecture a row in arch_cases (golden_check.c)", rel, (int)st);
    return 1;
}

const golden_prompt arch_prompts[] = {{"once", "Once upon a time"}, {"dog", "The little dog"}};
const size_t n_arch_prompts = sizeof arch_prompts / sizeof *arch_prompts;

golden_result check_arch_prompt(const arch_case *ac, const char *prompt_name, const char *prompt,
                                llmm_backend_kind backend, const char *label) {
    char name[64], rel[256];
    snprintf(name, sizeof name, "tiny-%s.%s", ac->arch, prompt_name);
    golden_run g;
    assert_int_equal(golden_load("golden/arch", name, &g), 0);
    assert_true(g.reliable_steps >= 0);
    snprintf(rel, sizeof rel, "golden/arch/tiny-%s.gguf", ac->arch);
    llmm_model *m = load_model(rel, NULL);
    llmm_model_info info = {.size = sizeof info};
    assert_int_equal(llmm_model_get_info(m, &info), LLMM_OK);
    assert_string_equal(info.architecture, ac->arch);
    llmm_context_params cp;
    llmm_context_params_default(&cp, sizeof cp);
    cp.n_ctx = 128;
    cp.kv_type = LLMM_KV_F32; /* as the golden outputs were made */
    cp.backend = backend;
    llmm_context *c = make_context(m, &cp);

    const golden_result r = golden_compare(m, c, &g, prompt);
    print_message("%-18s %s max |logit diff| %.2e (tolerance %.0e), greedy agreement %zu/%zu (reliable %ld)\n", name,
                  label, r.max_logit_diff, ac->logit_tolerance, r.agree, g.n_generated, g.reliable_steps);
    assert_true(r.max_logit_diff < ac->logit_tolerance);
    assert_true(r.agree >= (size_t)g.reliable_steps);
    golden_free(&g);
    llmm_context_free(c);
    llmm_model_free(m);
    return r;
}
