/* Speculative decoding (lib/speculative.c): greedy output identical to plain greedy decoding
 * for prompt lookup, a same-model draft and a random same-vocabulary draft, k = 1..8, one
 * sequence (llmm_generate) and several verified in one step (the llmm_speculator calls);
 * rollback releasing exactly the rejected positions' blocks, forked sequences included; the
 * sampled acceptance rule's distribution (chi-square, with a biased rule that must fail); a
 * draft of another vocabulary refused; the calls' argument and state errors; older params and
 * stats sizes still accepted. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "llmmini.h"
#include "support/shared_data.h"
#include "support/fixtures.h"
#include "support/rng.h"
#include "generate/speculative.h"
#include "sampling/sampler.h"

#define MAX_OUT 96
#define N_GEN 64

static char draft_path[128]; /* the random same-vocabulary draft, made once by llmmini-synth */
static char synth_tool[1024];

static llmm_context *spec_context(llmm_model *m, uint32_t n_seq, uint32_t block_size) {
    llmm_context_params p;
    llmm_context_params_default(&p, sizeof p);
    p.n_ctx = 256;
    p.n_seq_max = n_seq;
    p.n_threads = 2;
    p.kv_type = LLMM_KV_F32;
    p.kv_block_size = block_size;
    return make_context(m, &p);
}

typedef struct spec_config {
    const llmm_model *draft;
    int32_t k, ngram;
} spec_config;

/* Greedy llmm_generate of N_GEN tokens with the given speculation (NULL: none). */
static size_t generate(llmm_context *c, const char *prompt, const spec_config *sc, llmm_token *out,
                       llmm_generate_stats *stats) {
    llmm_sampler_params sp;
    llmm_generate_params gp = greedy_params(&sp, out, N_GEN);
    gp.out_capacity = MAX_OUT;
    if (sc) {
        gp.spec_draft_model = sc->draft;
        gp.spec_max_tokens = sc->k;
        gp.spec_ngram = sc->ngram;
    }
    *stats = (llmm_generate_stats){.size = sizeof *stats};
    llmm_status st = llmm_generate(c, prompt, &gp, stats);
    if (st) fail_msg("llmm_generate: %s", llmm_context_last_error(c));
    return stats->n_generated;
}

/* Plain greedy output of the model, then the same with each k in 1..8 under sc; returns the
 * acceptance summed over the runs (proposed, accepted). */
static void check_identical(llmm_model *m, const char *prompt, spec_config sc, uint64_t *proposed,
                            uint64_t *accepted) {
    llmm_context *c = spec_context(m, 1, 16);
    llmm_token plain[MAX_OUT], spec[MAX_OUT];
    llmm_generate_stats ps, ss;
    const size_t n = generate(c, prompt, NULL, plain, &ps);
    size_t plain_len, spec_len;
    assert_int_equal(llmm_seq_length(c, 0, &plain_len), LLMM_OK);
    for (sc.k = 1; sc.k <= 8; sc.k++) {
        assert_int_equal(generate(c, prompt, &sc, spec, &ss), n);
        assert_int_equal(ss.stop_reason, ps.stop_reason);
        for (size_t i = 0; i < n; i++)
            if (spec[i] != plain[i]) fail_msg("'%s' k %d: token %zu is %d, plain %d", prompt, sc.k, i, spec[i], plain[i]);
        /* the sequence ends as plain decoding leaves it */
        assert_int_equal(llmm_seq_length(c, 0, &spec_len), LLMM_OK);
        assert_int_equal(spec_len, plain_len);
        assert_true(ss.n_target_steps > 0 && ss.n_target_steps <= n);
        *proposed += ss.spec_proposed;
        *accepted += ss.spec_accepted;
    }
    llmm_context_free(c);
}

static const char *const models[] = {"models/stories260K.gguf", "models/stories260K-q8_0.gguf",
                                     "models/stories260K-q4_0.gguf", "golden/arch/tiny-llama.gguf",
                                     "golden/arch/tiny-qwen2.gguf", "golden/arch/tiny-qwen3.gguf",
                                     "golden/arch/tiny-phi3.gguf", "golden/arch/tiny-gemma2.gguf"};
static const char *const prompts[] = {"Once upon a time", "The little dog"};

static void test_lookup_greedy_identical(void **state) {
    (void)state;
    for (size_t mi = 0; mi < sizeof models / sizeof *models; mi++) {
        llmm_model *m = load_model(models[mi], NULL);
        uint64_t proposed = 0, accepted = 0;
        for (size_t pi = 0; pi < 2; pi++) check_identical(m, prompts[pi], (spec_config){.ngram = 3}, &proposed, &accepted);
        print_message("%s: prompt lookup kept %llu of %llu guesses\n", models[mi], (unsigned long long)accepted,
                      (unsigned long long)proposed);
        assert_true(proposed > 0);
        llmm_model_free(m);
    }
}

static void test_same_model_draft_greedy_identical(void **state) {
    (void)state;
    for (size_t mi = 0; mi < 3; mi++) {
        llmm_model *m = load_model(models[mi], NULL);
        uint64_t proposed = 0, accepted = 0;
        for (size_t pi = 0; pi < 2; pi++) check_identical(m, prompts[pi], (spec_config){.draft = m}, &proposed, &accepted);
        print_message("%s as its own draft: kept %llu of %llu guesses\n", models[mi], (unsigned long long)accepted,
                      (unsigned long long)proposed);
        assert_true(proposed > 0);
        assert_true(accepted == proposed);
        llmm_model_free(m);
    }
}

static void test_random_draft_greedy_identical(void **state) {
    (void)state;
    llmm_model *draft = load_model(draft_path, NULL);
    for (size_t mi = 0; mi < 3; mi++) {
        llmm_model *m = load_model(models[mi], NULL);
        uint64_t proposed = 0, accepted = 0;
        for (size_t pi = 0; pi < 2; pi++)
            check_identical(m, prompts[pi], (spec_config){.draft = draft}, &proposed, &accepted);
        print_message("%s with a random draft: kept %llu of %llu guesses\n", models[mi], (unsigned long long)accepted,
                      (unsigned long long)proposed);
        assert_true(proposed > 0);
        assert_true(accepted * 2 < proposed);
        llmm_model_free(m);
    }
    llmm_model_free(draft);
}

/* Three sequences driven through propose/verify/accept, verified together in one step each
 * round, against each one's plain greedy tokens. */
static void run_batch(llmm_model *m, const llmm_speculator_params *sp, const llmm_token plain[3][MAX_OUT],
                      const llmm_token ids[3][64], const size_t n_ids[3]) {
    llmm_context *c = spec_context(m, 3, 16);
    llmm_speculator *spec = NULL;
    assert_int_equal(llmm_speculator_create(c, sp, &spec), LLMM_OK);
    llmm_sampler *smp[3];
    llmm_token got[3][MAX_OUT + LLMM_SPEC_MAX_TOKENS + 1], pending[3];
    size_t n_got[3];
    for (int s = 0; s < 3; s++) {
        smp[s] = greedy_sampler();
        assert_int_equal(llmm_prefill(c, s, ids[s], n_ids[s], 0), LLMM_OK);
        const float *l;
        size_t nv;
        assert_int_equal(llmm_logits(c, 0, &l, &nv), LLMM_OK);
        assert_int_equal(llmm_sample(smp[s], l, nv, &pending[s]), LLMM_OK);
        assert_int_equal(llmm_sampler_accept(smp[s], pending[s]), LLMM_OK);
        got[s][0] = pending[s];
        n_got[s] = 1;
    }
    llmm_token guess[3][LLMM_SPEC_MAX_TOKENS];
    while (n_got[0] < N_GEN || n_got[1] < N_GEN || n_got[2] < N_GEN) {
        llmm_spec_item items[3];
        for (int s = 0; s < 3; s++) {
            size_t n = 0;
            assert_int_equal(llmm_speculator_propose(spec, s, pending[s], guess[s], LLMM_SPEC_MAX_TOKENS, &n), LLMM_OK);
            items[s] = (llmm_spec_item){.seq = s, .pending = pending[s], .draft = guess[s], .n_draft = n};
        }
        assert_int_equal(llmm_speculator_verify(spec, items, 3), LLMM_OK);
        for (int s = 0; s < 3; s++) {
            size_t n_out = 0;
            assert_int_equal(
                llmm_speculator_accept(spec, (size_t)s, smp[s], got[s] + n_got[s], LLMM_SPEC_MAX_TOKENS + 1, &n_out),
                LLMM_OK);
            assert_true(n_out >= 1 && n_out <= items[s].n_draft + 1);
            n_got[s] += n_out;
            pending[s] = got[s][n_got[s] - 1];
            size_t len;
            assert_int_equal(llmm_seq_length(c, s, &len), LLMM_OK);
            assert_int_equal(len, n_ids[s] + n_got[s] - 1);
        }
    }
    for (int s = 0; s < 3; s++) {
        for (size_t i = 0; i < N_GEN; i++)
            if (got[s][i] != plain[s][i])
                fail_msg("batch k %d seq %d token %zu: %d, plain %d", sp->max_tokens, s, i, got[s][i], plain[s][i]);
        llmm_sampler_free(smp[s]);
    }
    llmm_speculator_free(spec);
    llmm_context_free(c);
}

static void test_batch_verify_identical(void **state) {
    (void)state;
    llmm_model *m = load_model("models/stories260K.gguf", NULL);
    llmm_model *draft = load_model(draft_path, NULL);
    const char *texts[3] = {"Once upon a time", "The little dog", "Lily and Ben went to the park"};
    llmm_token ids[3][64], plain[3][MAX_OUT];
    size_t n_ids[3];
    llmm_context *c = spec_context(m, 1, 16);
    for (int s = 0; s < 3; s++) {
        n_ids[s] = tokenize(m, texts[s], ids[s], 64);
        llmm_generate_stats st;
        assert_int_equal(generate(c, texts[s], NULL, plain[s], &st), N_GEN);
    }
    llmm_context_free(c);
    for (int32_t k = 1; k <= 8; k++) {
        llmm_speculator_params sp;
        llmm_speculator_params_default(&sp, sizeof sp);
        sp.max_tokens = k;
        sp.ngram = 2;
        run_batch(m, &sp, plain, ids, n_ids);
        sp.ngram = 0;
        sp.draft_model = k % 2 ? m : draft; /* always right, or mostly wrong */
        run_batch(m, &sp, plain, ids, n_ids);
    }
    llmm_model_free(draft);
    llmm_model_free(m);
}

static uint64_t blocks_used(llmm_context *c) {
    llmm_context_stats s = {.size = sizeof s};
    assert_int_equal(llmm_context_get_stats(c, &s), LLMM_OK);
    return s.blocks_used;
}

/* Verify pending + k wrong guesses on seq (a guess is wrong when it differs from the greedy
 * choice the verify's logits give: accept then keeps none), accept, and return the kept count. */
static size_t verify_wrong(llmm_context *c, llmm_speculator *spec, llmm_seq_id seq, llmm_token pending, size_t k) {
    llmm_token guess[LLMM_SPEC_MAX_TOKENS], out[LLMM_SPEC_MAX_TOKENS + 1];
    for (size_t i = 0; i < k; i++) guess[i] = 3 + (llmm_token)i;
    const llmm_spec_item item = {.seq = seq, .pending = pending, .draft = guess, .n_draft = k};
    assert_int_equal(llmm_speculator_verify(spec, &item, 1), LLMM_OK);
    const float *l;
    size_t nv, n_out = 0;
    assert_int_equal(llmm_logits(c, 0, &l, &nv), LLMM_OK);
    assert_true(argmax(l, nv) != guess[0]);
    llmm_sampler *smp = greedy_sampler();
    assert_int_equal(llmm_speculator_accept(spec, 0, smp, out, sizeof out / sizeof *out, &n_out), LLMM_OK);
    llmm_sampler_free(smp);
    return n_out - 1;
}

/* Blocks of 4 positions: rejected guesses spanning two block boundaries give their blocks
 * back, and a fork sharing the blocks keeps its own copy only of the block it wrote. */
static void test_rollback_frees_rejected_blocks(void **state) {
    (void)state;
    llmm_model *m = load_model("models/stories260K.gguf", NULL);
    llmm_context *c = spec_context(m, 2, 4);
    llmm_speculator *spec = NULL;
    assert_int_equal(llmm_speculator_create(c, NULL, &spec), LLMM_OK);
    llmm_token ids[64];
    const size_t n = tokenize(m, "Once upon a time there", ids, 64);
    assert_int_equal(llmm_prefill(c, 0, ids, n, 0), LLMM_OK);
    const uint64_t before = blocks_used(c); /* ceil(n / 4) */
    assert_int_equal(before, (n + 3) / 4);
    /* n + 1 + 8 positions during the step: two or three more blocks, then only pending's */
    assert_int_equal(verify_wrong(c, spec, 0, 10, 8), 0);
    size_t len;
    assert_int_equal(llmm_seq_length(c, 0, &len), LLMM_OK);
    assert_int_equal(len, n + 1);
    assert_int_equal(blocks_used(c), (n + 1 + 3) / 4);
    /* a fork shares every block; its verify copies the partly filled tail (if any) and adds
     * blocks, and its rollback leaves it the shared full blocks plus what pending needs */
    llmm_seq_id fork;
    assert_int_equal(llmm_seq_fork(c, 0, &fork), LLMM_OK);
    const uint64_t shared = blocks_used(c);
    assert_int_equal(shared, (n + 1 + 3) / 4);
    assert_int_equal(verify_wrong(c, spec, fork, 11, 7), 0);
    const size_t fork_len = n + 2, full_shared = (n + 1) / 4;
    const uint64_t own = (fork_len + 3) / 4 - full_shared;
    assert_int_equal(blocks_used(c), shared + own);
    assert_int_equal(llmm_seq_length(c, fork, &len), LLMM_OK);
    assert_int_equal(len, fork_len);
    /* the original is untouched by the fork's rounds */
    assert_int_equal(llmm_seq_length(c, 0, &len), LLMM_OK);
    assert_int_equal(len, n + 1);
    llmm_speculator_free(spec);
    llmm_context_free(c);
    llmm_model_free(m);
}

/* ---------------------------------------------------------------- sampled acceptance */

#define N_IDS 6
#define N_DRAWS 20000

/* The biased rule some implementations use: on rejection, draw from p again instead of the
 * residual, which favours the guesses' likely tokens. */
static llmm_token biased_rejection(const float *p, const float *q, llmm_token g, double u1, double u2) {
    (void)q;
    return llmm__spec_keep_guess(p, q, g, u1) ? g : llmm__sample_draw(p, N_IDS, u2);
}

static llmm_token correct_rejection(const float *p, const float *q, llmm_token g, double u1, double u2) {
    float r[N_IDS];
    if (llmm__spec_keep_guess(p, q, g, u1)) return g;
    llmm__spec_residual(p, q, N_IDS, g, r);
    return llmm__sample_draw(r, N_IDS, u2);
}

/* Chi-square of N_DRAWS outputs of rule against p, guesses drawn from q (NULL: always id 2). */
static double chi_square(llmm_token (*rule)(const float *, const float *, llmm_token, double, double), const float *p,
                         const float *q) {
    test_rng rng = {.state = 12345}; /* the raw state the chi-square bounds were set with */
    unsigned count[N_IDS] = {0};
    for (int i = 0; i < N_DRAWS; i++) {
        const llmm_token g = q ? llmm__sample_draw(q, N_IDS, rng_unit(&rng)) : 2;
        const double u1 = rng_unit(&rng), u2 = rng_unit(&rng);
        count[rule(p, q, g, u1, u2)]++;
    }
    double chi = 0;
    for (int t = 0; t < N_IDS; t++) {
        const double e = N_DRAWS * (double)p[t];
        chi += (count[t] - e) * (count[t] - e) / e;
    }
    return chi;
}

/* 5 degrees of freedom: chi-square above 30 has probability below 2e-5 for a correct rule;
 * the biased one lands in the hundreds. */
static void test_sampled_acceptance_distribution(void **state) {
    (void)state;
    const float p[N_IDS] = {0.30f, 0.05f, 0.25f, 0.10f, 0.20f, 0.10f};
    const float q[N_IDS] = {0.05f, 0.40f, 0.10f, 0.25f, 0.05f, 0.15f};
    const double threshold = 30.0;
    const double good = chi_square(correct_rejection, p, q), good_certain = chi_square(correct_rejection, p, NULL);
    const double bad = chi_square(biased_rejection, p, q), bad_certain = chi_square(biased_rejection, p, NULL);
    print_message("chi-square over %d draws: correct %.2f (certain guess %.2f), biased %.1f (%.1f)\n", N_DRAWS, good,
                  good_certain, bad, bad_certain);
    assert_true(good < threshold && good_certain < threshold);
    assert_true(bad > threshold && bad_certain > threshold);
}

/* End to end through a sampling draft: the model itself with a flat distribution (temperature
 * 3) guessing for the target at temperature 1.2, so that many guesses are rejected and the
 * residual is drawn from. The first token each round returns must follow the target's
 * distribution after prompt + pending: chi-square over N_ROUNDS rounds, tokens of p >= 0.4 %
 * (at least 24 expected) binned alone and the rest together. With the biased rule of the test
 * above in lib/speculative.c this gave 828 against a threshold of 64 (and 17 as it is). */
#define N_ROUNDS 6000
static void test_sampled_rounds_follow_target(void **state) {
    (void)state;
    llmm_model *m = load_model("models/stories260K.gguf", NULL);
    llmm_context *c = spec_context(m, 2, 16);
    llmm_token ids[64];
    const size_t n = tokenize(m, "Once upon a time", ids, 63);
    const llmm_token pending = 261;
    /* the target's distribution after prompt + pending, from sequence 1 */
    ids[n] = pending;
    assert_int_equal(llmm_prefill(c, 1, ids, n + 1, 0), LLMM_OK);
    const float *l;
    size_t nv;
    assert_int_equal(llmm_logits(c, 0, &l, &nv), LLMM_OK);
    double *p = calloc(nv, sizeof *p), sum = 0, max = l[0];
    for (size_t i = 1; i < nv; i++) max = l[i] > max ? l[i] : max;
    for (size_t i = 0; i < nv; i++) sum += p[i] = exp((l[i] - max) / 1.2);
    for (size_t i = 0; i < nv; i++) p[i] /= sum;
    llmm_sampler_params target_sp, draft_sp;
    llmm_sampler_params_default(&target_sp, sizeof target_sp);
    target_sp.temperature = 1.2f;
    target_sp.top_k = 0;
    target_sp.top_p = 1;
    target_sp.min_p = 0;
    target_sp.seed = 11;
    draft_sp = target_sp;
    draft_sp.temperature = 3.0f;
    llmm_speculator_params sp;
    llmm_speculator_params_default(&sp, sizeof sp);
    sp.draft_model = m;
    sp.max_tokens = 4;
    sp.sampling = &draft_sp;
    llmm_speculator *spec = NULL;
    assert_int_equal(llmm_speculator_create(c, &sp, &spec), LLMM_OK);
    llmm_sampler *smp;
    assert_int_equal(llmm_sampler_create(&target_sp, &smp), LLMM_OK);
    assert_int_equal(llmm_prefill(c, 0, ids, n, 0), LLMM_OK);
    unsigned *count = calloc(nv, sizeof *count);
    size_t proposed = 0, kept = 0;
    for (int r = 0; r < N_ROUNDS; r++) {
        llmm_token guess[4], out[5];
        size_t g = 0, n_out = 0;
        do assert_int_equal(llmm_speculator_propose(spec, 0, pending, guess, 4, &g), LLMM_OK);
        while (g == 0); /* a paused round guesses nothing */
        const llmm_spec_item item = {.seq = 0, .pending = pending, .draft = guess, .n_draft = g};
        assert_int_equal(llmm_speculator_verify(spec, &item, 1), LLMM_OK);
        assert_int_equal(llmm_speculator_accept(spec, 0, smp, out, 5, &n_out), LLMM_OK);
        count[out[0]]++;
        proposed += g;
        kept += n_out - 1;
        assert_int_equal(llmm_seq_truncate(c, 0, n), LLMM_OK);
    }
    double chi = 0, rest_p = 0, rest_n = 0;
    int bins = 0;
    for (size_t i = 0; i < nv; i++) {
        if (p[i] >= 0.004) {
            const double e = N_ROUNDS * p[i];
            chi += (count[i] - e) * (count[i] - e) / e;
            bins++;
        } else {
            rest_p += p[i];
            rest_n += count[i];
        }
    }
    chi += (rest_n - N_ROUNDS * rest_p) * (rest_n - N_ROUNDS * rest_p) / (N_ROUNDS * rest_p);
    /* bins degrees of freedom: mean bins, standard deviation sqrt(2 bins); 6 of those is far
     * beyond chance and well below what a wrong rule gives (hundreds, as above) */
    const double threshold = bins + 6 * sqrt(2.0 * bins);
    print_message("sampled draft rounds: %zu of %zu guesses kept; first token chi-square %.1f over %d bins + rest "
                  "(threshold %.1f)\n", kept, proposed, chi, bins, threshold);
    assert_true(kept > 0 && kept < proposed);
    assert_true(chi < threshold);
    free(count);
    free(p);
    llmm_sampler_free(smp);
    llmm_speculator_free(spec);
    llmm_context_free(c);
    llmm_model_free(m);
}

/* Sampled llmm_generate with prompt lookup runs end to end, seeded: the same seed twice gives
 * the same text. */
static void test_sampled_generate_reproducible(void **state) {
    (void)state;
    llmm_model *m = load_model("models/stories260K.gguf", NULL);
    llmm_model *draft = load_model(draft_path, NULL);
    llmm_context *c = spec_context(m, 1, 16);
    llmm_sampler_params sp;
    llmm_sampler_params_default(&sp, sizeof sp);
    sp.seed = 7;
    for (int which = 0; which < 2; which++) {
        llmm_token out[2][MAX_OUT];
        llmm_generate_stats st[2];
        for (int run = 0; run < 2; run++) {
            llmm_generate_params gp;
            llmm_generate_params_default(&gp, sizeof gp);
            gp.max_tokens = N_GEN;
            gp.sampling = &sp;
            gp.out_tokens = out[run];
            gp.out_capacity = MAX_OUT;
            gp.spec_ngram = which == 0 ? 2 : 0;
            gp.spec_draft_model = which == 1 ? draft : NULL;
            st[run] = (llmm_generate_stats){.size = sizeof st[run]};
            assert_int_equal(llmm_generate(c, "Once upon a time", &gp, &st[run]), LLMM_OK);
        }
        assert_int_equal(st[0].n_generated, st[1].n_generated);
        assert_memory_equal(out[0], out[1], st[0].n_generated * sizeof(llmm_token));
        assert_true(st[0].spec_proposed > 0);
    }
    llmm_context_free(c);
    llmm_model_free(draft);
    llmm_model_free(m);
}

/* Another vocabulary, of another size (llama-2-tiny-random, 32000 tokens) or of the same size
 * with other tokens (a synthetic 512-token one), is refused with a message. */
static void check_refused(llmm_model *m, const llmm_model *other, const char *why) {
    llmm_context *c = spec_context(m, 1, 16);
    llmm_speculator_params sp;
    llmm_speculator_params_default(&sp, sizeof sp);
    sp.draft_model = other;
    llmm_speculator *spec = (llmm_speculator *)1;
    assert_int_equal(llmm_speculator_create(c, &sp, &spec), LLMM_ERR_INVALID_ARG);
    assert_null(spec);
    print_message("refused: %s\n", llmm_context_last_error(c));
    assert_non_null(strstr(llmm_context_last_error(c), why));
    llmm_generate_params gp;
    llmm_generate_params_default(&gp, sizeof gp);
    gp.spec_draft_model = other;
    assert_int_equal(llmm_generate(c, "Once", &gp, NULL), LLMM_ERR_INVALID_ARG);
    assert_non_null(strstr(llmm_context_last_error(c), why));
    llmm_context_free(c);
}

static void test_vocab_mismatch_refused(void **state) {
    (void)state;
    llmm_model *m = load_model("models/stories260K.gguf", NULL), *other = load_model("models/llama-2-tiny-random.gguf", NULL);
    check_refused(m, other, "vocabularies differ");
    llmm_model_free(other);
    char path[160], cmd[2048];
    snprintf(path, sizeof path, "%s.other", draft_path);
    const char *runner = getenv("TEST_RUNNER");
    snprintf(cmd, sizeof cmd, "%s '%s' -o '%s' --n-vocab 512 --type f32 --dim 32 --layers 1 --heads 2 --kv-heads 2 "
             "--ff 64 >/dev/null", runner ? runner : "", synth_tool, path);
    assert_int_equal(system(cmd), 0);
    other = load_model(path, NULL);
    unlink(path);
    check_refused(m, other, "draft model");
    llmm_model_free(other);
    llmm_model_free(m);
}

/* The calls' contracts: bad params, a sequence twice, no room (nothing changes), a small out
 * buffer, an item decided twice or after the context computed again. */
static void test_speculator_errors(void **state) {
    (void)state;
    llmm_model *m = load_model("models/stories260K.gguf", NULL);
    llmm_context *c = spec_context(m, 2, 16);
    llmm_speculator_params sp;
    llmm_speculator_params_default(&sp, sizeof sp);
    llmm_speculator *spec = NULL;
    sp.max_tokens = 0;
    assert_int_equal(llmm_speculator_create(c, &sp, &spec), LLMM_ERR_INVALID_ARG);
    sp.max_tokens = 8;
    sp.ngram = 2;
    sp.min_ngram = 3;
    assert_int_equal(llmm_speculator_create(c, &sp, &spec), LLMM_ERR_INVALID_ARG);
    sp.min_ngram = 1;
    assert_int_equal(llmm_speculator_create(c, &sp, &spec), LLMM_OK);
    llmm_token ids[256], guess[4] = {5, 6, 7, 8}, out[5];
    for (int i = 0; i < 256; i++) ids[i] = 1 + i % 50; /* period 50: the lookup finds repeats */
    assert_int_equal(llmm_prefill(c, 0, ids, 250, 0), LLMM_OK);
    llmm_spec_item items[2] = {{.seq = 0, .pending = 9, .draft = guess, .n_draft = 4},
                               {.seq = 0, .pending = 9, .draft = guess, .n_draft = 1}};
    assert_int_equal(llmm_speculator_verify(spec, items, 2), LLMM_ERR_INVALID_ARG);
    /* 250 + 1 + 4 fits n_ctx 256, 250 + 1 + 6 does not */
    items[0].n_draft = 6;
    items[0].draft = ids;
    size_t len, n_out;
    assert_int_equal(llmm_speculator_verify(spec, items, 1), LLMM_ERR_CONTEXT_FULL);
    assert_int_equal(llmm_seq_length(c, 0, &len), LLMM_OK);
    assert_int_equal(len, 250);
    items[0].n_draft = 4;
    items[0].draft = guess;
    assert_int_equal(llmm_speculator_verify(spec, items, 1), LLMM_OK);
    llmm_sampler *smp = greedy_sampler();
    assert_int_equal(llmm_speculator_accept(spec, 0, smp, out, 4, &n_out), LLMM_ERR_BUFFER_TOO_SMALL);
    assert_int_equal(llmm_speculator_accept(spec, 1, smp, out, 5, &n_out), LLMM_ERR_INVALID_ARG);
    assert_int_equal(llmm_speculator_accept(spec, 0, smp, out, 5, &n_out), LLMM_OK);
    assert_int_equal(llmm_speculator_accept(spec, 0, smp, out, 5, &n_out), LLMM_ERR_INVALID_ARG);
    /* a decode between verify and accept voids the verify */
    items[0].seq = 1;
    assert_int_equal(llmm_speculator_verify(spec, items, 1), LLMM_OK);
    const llmm_seq_id seq0 = 0;
    assert_int_equal(llmm_decode(c, &seq0, &out[n_out - 1], 1), LLMM_OK);
    assert_int_equal(llmm_speculator_accept(spec, 0, smp, out, 5, &n_out), LLMM_ERR_INVALID_ARG);
    assert_non_null(strstr(llmm_context_last_error(c), "computed since"));
    /* proposals stop where the context would overflow */
    size_t n = 1;
    assert_int_equal(llmm_seq_clear(c, 1), LLMM_OK);
    assert_int_equal(llmm_prefill(c, 1, ids, 255, 0), LLMM_OK);
    assert_int_equal(llmm_speculator_propose(spec, 1, ids[5], guess, 4, &n), LLMM_OK);
    assert_int_equal(n, 0);
    assert_int_equal(llmm_seq_truncate(c, 1, 100), LLMM_OK); /* room again */
    assert_int_equal(llmm_speculator_propose(spec, 1, ids[100], guess, 4, &n), LLMM_OK);
    assert_int_equal(n, 4);
    assert_memory_equal(guess, ids + 101, 4 * sizeof *guess);
    llmm_sampler_free(smp);
    llmm_speculator_free(spec);
    llmm_context_free(c);
    llmm_model_free(m);
}

/* A caller built before speculative decoding passes the shorter params and stats. */
static void test_older_struct_sizes(void **state) {
    (void)state;
    const size_t old_params = offsetof(llmm_generate_params, spec_draft_model);
    const size_t old_stats = offsetof(llmm_generate_stats, spec_proposed);
    union {
        llmm_generate_params p;
        unsigned char bytes[sizeof(llmm_generate_params) + 64];
    } gp;
    memset(&gp, 0xAB, sizeof gp);
    assert_int_equal(llmm_generate_params_default(&gp.p, old_params), LLMM_OK);
    assert_int_equal(gp.p.size, old_params);
    assert_int_equal(gp.bytes[old_params], 0xAB); /* nothing written past the caller's struct */
    assert_int_equal(llmm_generate_params_default(&gp.p, old_params - 1), LLMM_ERR_INVALID_ARG);
    gp.p.max_tokens = 8;
    llmm_model *m = load_model("models/stories260K.gguf", NULL);
    llmm_context *c = spec_context(m, 1, 16);
    union {
        llmm_generate_stats s;
        unsigned char bytes[sizeof(llmm_generate_stats) + 64];
    } st;
    memset(&st, 0xCD, sizeof st);
    st.s.size = (uint32_t)old_stats;
    assert_int_equal(llmm_generate(c, "Once upon a time", &gp.p, &st.s), LLMM_OK);
    assert_int_equal(st.s.n_generated, 8);
    assert_int_equal(st.s.size, old_stats);
    assert_int_equal(st.bytes[old_stats], 0xCD);
    st.s.size = (uint32_t)old_stats - 1;
    assert_int_equal(llmm_generate(c, "Once upon a time", &gp.p, &st.s), LLMM_ERR_INVALID_ARG);
    llmm_context_free(c);
    llmm_model_free(m);
}

/* The random draft: llmmini-synth next to this test, with stories260K's vocabulary. */
static int make_draft(const char *argv0) {
    char dir[900], vocab[1024], cmd[4096];
    snprintf(dir, sizeof dir, "%s", argv0);
    char *slash = strrchr(dir, '/');
    if (slash) *slash = '\0';
    else snprintf(dir, sizeof dir, "build/tests");
    snprintf(synth_tool, sizeof synth_tool, "%s/../llmmini-synth", dir);
    snprintf(draft_path, sizeof draft_path, "/tmp/llmm-spec-draft-%ld.gguf", (long)getpid());
    const char *runner = getenv("TEST_RUNNER");
    snprintf(cmd, sizeof cmd,
             "%s '%s' -o '%s' --vocab '%s' --type f32 --dim 32 --layers 1 --heads 2 --kv-heads 2 --ff 64 --seed 3 "
             ">/dev/null",
             runner ? runner : "", synth_tool, draft_path, shared_path(vocab, sizeof vocab, "models/stories260K.gguf"));
    int st = system(cmd);
    return st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

int main(int argc, char **argv) {
    (void)argc;
    if (!make_draft(argv[0])) {
        fprintf(stderr, "test_speculative: %s could not make the draft model\n", synth_tool);
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lookup_greedy_identical),
        cmocka_unit_test(test_same_model_draft_greedy_identical),
        cmocka_unit_test(test_random_draft_greedy_identical),
        cmocka_unit_test(test_batch_verify_identical),
        cmocka_unit_test(test_rollback_frees_rejected_blocks),
        cmocka_unit_test(test_sampled_acceptance_distribution),
        cmocka_unit_test(test_sampled_rounds_follow_target),
        cmocka_unit_test(test_sampled_generate_reproducible),
        cmocka_unit_test(test_vocab_mismatch_refused),
        cmocka_unit_test(test_speculator_errors),
        cmocka_unit_test(test_older_struct_sizes),
    };
    const int failed = cmocka_run_group_tests(tests, NULL, NULL);
    unlink(draft_path);
    return failed;
}
