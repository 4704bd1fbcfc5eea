/* Agreement between configurations that should compute the same distributions, measured with
 * lib/fidelity.c over a text of more than 1,000 tokens (560 under an emulator), teacher-forced
 * in windows of 256: every SIMD kernel table against the scalar one, F16 and Q8 KV against F32
 * KV, decode batches against single rows and chunked prefill against whole, for stories260K
 * (F32, Q8_0, Q4_0) and the tiny model of each architecture family. The KL divergences are
 * exact (the reference keeps every logit). docs/performance.md "Fidelity" shows the figures
 * this prints.
 * Also the logits file of llmmini-perplexity: round trip and refusals. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernel_table.h"
#include "offline/fidelity.h"
#include "llmmini.h"
#include "support/shared_data.h"
#include "support/fixtures.h"

#define TEXT_TOKENS 1100 /* at least; make_text's stories come to 1,280 */
/* Under an emulator (make test-arm, qemu) the suite took 6-8 minutes: there the text is cut to
 * its first stories, at least this many tokens (3 windows), every check kept at half the time.
 * The bounds hold on it; the closest, Q4_0's F16 KV top-1, measured 97.7 % there (bound 97 %). */
#define TEXT_TOKENS_EMULATED 560
#define WINDOW 256

typedef struct bounds {
    double top1_min, kld_mean_max;
} bounds;

/* Bounds for paths that round differently but equally well (decode batches, prefill chunks)
 * and for F16 KV against F32 KV. The kernel tables meet them and more: they give the same logits
 * bit for bit, which test_kernel_tables_agree checks too. */
static const bounds k_same_math = {0.995, 1e-4};
#define F16_KV_BOUNDS {0.99, 1e-3}

/* A model and its bounds for the KV types, measured on 2026-12-05 (AMD EPYC, AVX-512 table; the
 * text of make_text; docs/performance.md "Fidelity") with about 2x margin on the divergence. */
typedef struct model_case {
    const char *path; /* under the shared folder */
    bounds f16_kv, q8_kv;
} model_case;

/* With Q8_0 and Q4_0 weights the activations are quantized to Q8_0 before every matmul (as the
 * reference engine does): a step function, so F16 K/V rounding moves some activations across a
 * step and the model's own quantization noise is drawn again. Measured F16 vs F32 KV: top-1
 * 98.4 % / 98.2 %, mean KL 5.9e-4 / 7.2e-4; the 99 % does not hold for them, and
 * test_f16_kv_adds_no_error shows what does: F16 KV takes them no further from F32 weights. */
#define F16_KV_QUANTIZED_BOUNDS {0.97, 1.5e-3}

/* All share stories260K's 512-token vocabulary, so one token text serves them all. Q8 KV
 * measured: stories260K F32 96.7 % / 2.7e-3, Q8_0 96.3 % / 3.4e-3, Q4_0 96.6 % / 5.3e-3; the
 * random-weight tiny models (nearly flat distributions) >= 99.4 % / <= 2.1e-5. */
static const model_case k_models[] = {
    {"models/stories260K.gguf", F16_KV_BOUNDS, {0.94, 6e-3}},
    {"models/stories260K-q8_0.gguf", F16_KV_QUANTIZED_BOUNDS, {0.94, 7e-3}},
    {"models/stories260K-q4_0.gguf", F16_KV_QUANTIZED_BOUNDS, {0.94, 1.1e-2}},
    {"golden/arch/tiny-llama.gguf", F16_KV_BOUNDS, {0.985, 5e-5}},
    {"golden/arch/tiny-qwen2.gguf", F16_KV_BOUNDS, {0.985, 5e-5}},
    {"golden/arch/tiny-qwen3.gguf", F16_KV_BOUNDS, {0.985, 5e-5}},
    {"golden/arch/tiny-phi3.gguf", F16_KV_BOUNDS, {0.985, 5e-5}},
    {"golden/arch/tiny-gemma2.gguf", F16_KV_BOUNDS, {0.985, 5e-5}},
};
#define N_MODELS (sizeof k_models / sizeof *k_models)

/* cpu/kernel_table.c's names for LLMM_CPU_KERNELS, by cpu_isa */
static const char *const k_isa_names[CPU_ISA_COUNT] = {"scalar", "avx2", "avxvnni", "avx512", "neon", "dotprod", "amx"};

/* One way to run the text. */
typedef struct run_config {
    const char *table;    /* LLMM_CPU_KERNELS, NULL: the best this CPU has */
    llmm_kv_type kv;
    fidelity_feed feed;
    size_t n_parallel;    /* decode: windows a step */
    uint32_t n_batch;     /* prefill chunk (0: the whole window) */
} run_config;

typedef struct fixture {
    llmm_token *text;
    size_t n;
    llmm_token bos;
} fixture;

static llmm_context *run_context(llmm_model *m, const run_config *rc) {
    llmm_context_params p;
    llmm_context_params_default(&p, sizeof p);
    p.n_ctx = WINDOW;
    p.n_seq_max = rc->n_parallel ? (uint32_t)rc->n_parallel : 1;
    p.n_batch = rc->n_batch ? rc->n_batch : WINDOW;
    p.n_threads = 1;
    p.kv_type = rc->kv;
    p.backend = LLMM_BACKEND_CPU;
    if (rc->table) setenv("LLMM_CPU_KERNELS", rc->table, 1);
    llmm_context *c = make_context(m, &p);
    unsetenv("LLMM_CPU_KERNELS");
    return c;
}

static void run(llmm_model *m, const fixture *fx, const run_config *rc, fidelity_row_fn row, void *user) {
    llmm_context *c = run_context(m, rc);
    const fidelity_run_params p = {.window = WINDOW, .bos = fx->bos, .feed = rc->feed, .n_parallel = rc->n_parallel};
    assert_int_equal(llmm__fidelity_run(c, fx->text, fx->n, &p, row, user), LLMM_OK);
    llmm_context_free(c);
}

/* Every logit of the reference run. */
static fidelity_records reference(llmm_model *m, const fixture *fx, const run_config *rc) {
    fidelity_records r;
    assert_int_equal(llmm__fidelity_records_init(&r, fx->text, fx->n, 512, 512), LLMM_OK);
    run(m, fx, rc, llmm__fidelity_records_put, &r);
    assert_int_equal(llmm__fidelity_records_count(&r), fx->n - (fx->bos < 0));
    return r;
}

static fidelity_summary compare(llmm_model *m, const fixture *fx, const fidelity_records *ref, const run_config *rc) {
    fidelity_compare c;
    assert_int_equal(llmm__fidelity_compare_init(&c, ref), LLMM_OK);
    run(m, fx, rc, llmm__fidelity_compare_put, &c);
    const fidelity_summary s = llmm__fidelity_compare_summary(&c);
    llmm__fidelity_compare_free(&c);
    assert_int_equal(s.n, llmm__fidelity_records_count(ref));
    return s;
}

static void check(const char *model, const char *what, fidelity_summary s, bounds b) {
    print_message("%-30s %-26s top-1 %7.3f %%  KL mean %.2e p99 %.2e max %.2e  max|dlogit| %.4f  ppl %.4f/%.4f\n",
                  model, what, 100 * s.top1_agree, s.kld_mean, s.kld_p99, s.kld_max, s.max_dlogit, s.ppl_ref,
                  s.ppl_test);
    if (s.top1_agree < b.top1_min || s.kld_mean > b.kld_mean_max)
        fail_msg("%s, %s: top-1 %.4f (bound %.4f), mean KL %.3e (bound %.1e)", model, what, s.top1_agree, b.top1_min,
                 s.kld_mean, b.kld_mean_max);
}

/* The text: stories from stories260K (F32 weights and KV, scalar kernels, so every machine makes
 * the same one), sampled at temperature 1 from a few seeds until TEXT_TOKENS tokens. */
static int make_text(void **state) {
    fixture *fx = calloc(1, sizeof *fx);
    assert_non_null(fx);
    fx->text = malloc((TEXT_TOKENS + 512) * sizeof *fx->text);
    assert_non_null(fx->text);
    llmm_model *m = load_model("models/stories260K.gguf", NULL);
    const run_config rc = {.table = "scalar", .kv = LLMM_KV_F32};
    llmm_context *c = run_context(m, &rc);
    llmm_sampler_params sp;
    llmm_sampler_params_default(&sp, sizeof sp);
    sp.temperature = 1.0f;
    sp.top_k = 0;
    sp.top_p = 1.0f;
    sp.min_p = 0.0f;
    llmm_generate_params gp;
    llmm_generate_params_default(&gp, sizeof gp);
    gp.sampling = &sp;
    gp.max_tokens = 400;
    gp.out_capacity = 400;
    assert_int_equal(tokenize(m, "", &fx->bos, 1), 1);
    const size_t text_tokens = under_emulator() ? TEXT_TOKENS_EMULATED : TEXT_TOKENS;
    for (uint64_t seed = 1; fx->n < text_tokens; seed++) {
        static const char prompt[] = "Once upon a time";
        const size_t np = tokenize_flags(m, prompt, strlen(prompt), 0, fx->text + fx->n, 16);
        sp.seed = seed;
        gp.out_tokens = fx->text + fx->n + np;
        llmm_generate_stats st = {.size = sizeof st};
        assert_int_equal(llmm_generate(c, prompt, &gp, &st), LLMM_OK);
        fx->n += np + st.n_generated;
    }
    llmm_context_free(c);
    llmm_model_free(m);
    *state = fx;
    return 0;
}

static int free_text(void **state) {
    fixture *fx = *state;
    free(fx->text);
    free(fx);
    return 0;
}

/* Every SIMD table this CPU has against the scalar one, F32 KV: matmuls, attention, softmax,
 * SiLU and RMSNorm are written to the scalar table's bits, so the logits are equal. */
static void test_kernel_tables_agree(void **state) {
    const fixture *fx = *state;
    for (size_t mi = 0; mi < N_MODELS; mi++) {
        llmm_model *m = load_model(k_models[mi].path, NULL);
        const run_config scalar = {.table = "scalar", .kv = LLMM_KV_F32};
        fidelity_records ref = reference(m, fx, &scalar);
        for (int isa = CPU_ISA_SCALAR + 1; isa < CPU_ISA_COUNT; isa++) {
            if (!llmm__cpu_kernels_get((cpu_isa)isa)) continue; /* the backend would fall back to another table */
            const run_config rc = {.table = k_isa_names[isa], .kv = LLMM_KV_F32};
            char what[64];
            snprintf(what, sizeof what, "%s vs scalar", k_isa_names[isa]);
            const fidelity_summary s = compare(m, fx, &ref, &rc);
            check(k_models[mi].path, what, s, k_same_math);
            /* more than the bound: every table computes the same bits (cpu/kernel_table.h) */
            if (s.max_dlogit != 0 || s.kld_max != 0)
                fail_msg("%s, %s: logits differ (max |dlogit| %.3g, max KL %.3g)", k_models[mi].path, what,
                         s.max_dlogit, s.kld_max);
        }
        llmm__fidelity_records_free(&ref);
        llmm_model_free(m);
    }
}

/* F16 and Q8 KV against F32 KV, the best table. */
static void test_kv_types_agree(void **state) {
    const fixture *fx = *state;
    for (size_t mi = 0; mi < N_MODELS; mi++) {
        llmm_model *m = load_model(k_models[mi].path, NULL);
        const run_config f32 = {.kv = LLMM_KV_F32}, f16 = {.kv = LLMM_KV_F16}, q8 = {.kv = LLMM_KV_Q8};
        fidelity_records ref = reference(m, fx, &f32);
        check(k_models[mi].path, "F16 KV vs F32 KV", compare(m, fx, &ref, &f16), k_models[mi].f16_kv);
        check(k_models[mi].path, "Q8 KV vs F32 KV", compare(m, fx, &ref, &q8), k_models[mi].q8_kv);
        llmm__fidelity_records_free(&ref);
        llmm_model_free(m);
    }
}

/* What F16 KV costs a quantized model: its distance from the F32 weights with F16 KV, against
 * the same with F32 KV. Measured mean KL 7.28e-4 with F16 KV vs 7.16e-4 with F32 KV (Q8_0),
 * 1.032e-1 vs 1.033e-1 (Q4_0). */
static void test_f16_kv_adds_no_error(void **state) {
    const fixture *fx = *state;
    llmm_model *f32 = load_model("models/stories260K.gguf", NULL);
    const run_config exact = {.kv = LLMM_KV_F32}, f16 = {.kv = LLMM_KV_F16};
    fidelity_records truth = reference(f32, fx, &exact);
    static const char *const quantized[] = {"models/stories260K-q8_0.gguf", "models/stories260K-q4_0.gguf"};
    for (size_t i = 0; i < 2; i++) {
        llmm_model *m = load_model(quantized[i], NULL);
        const fidelity_summary with_f32 = compare(m, fx, &truth, &exact), with_f16 = compare(m, fx, &truth, &f16);
        print_message("%-30s vs F32 weights: KL mean %.3e with F32 KV, %.3e with F16 KV; top-1 %.2f %% / %.2f %%\n",
                      quantized[i], with_f32.kld_mean, with_f16.kld_mean, 100 * with_f32.top1_agree,
                      100 * with_f16.top1_agree);
        assert_true(with_f16.kld_mean <= 1.1 * with_f32.kld_mean);
        assert_true(with_f16.top1_agree >= with_f32.top1_agree - 0.005);
        llmm_model_free(m);
    }
    llmm__fidelity_records_free(&truth);
    llmm_model_free(f32);
}

/* Decode steps of four rows against one row a step, and prefill in chunks of 7 (not a divisor
 * of anything) against whole windows; the default F16 KV. */
static void test_batching_agrees(void **state) {
    const fixture *fx = *state;
    for (size_t mi = 0; mi < N_MODELS; mi++) {
        llmm_model *m = load_model(k_models[mi].path, NULL);
        const run_config single = {.kv = LLMM_KV_F16, .feed = FIDELITY_FEED_DECODE, .n_parallel = 1};
        const run_config batched = {.kv = LLMM_KV_F16, .feed = FIDELITY_FEED_DECODE, .n_parallel = 4};
        fidelity_records ref = reference(m, fx, &single);
        check(k_models[mi].path, "decode 4 rows vs 1 row", compare(m, fx, &ref, &batched), k_same_math);
        llmm__fidelity_records_free(&ref);
        const run_config whole = {.kv = LLMM_KV_F16}, chunked = {.kv = LLMM_KV_F16, .n_batch = 7};
        ref = reference(m, fx, &whole);
        check(k_models[mi].path, "prefill chunks of 7 vs whole", compare(m, fx, &ref, &chunked), k_same_math);
        llmm__fidelity_records_free(&ref);
        llmm_model_free(m);
    }
}

/* The measures see a real difference (Q4_0 weights against F32), and top-k records give a KL
 * divergence at most the exact one and close to it. */
static void test_measures_discriminate(void **state) {
    const fixture *fx = *state;
    llmm_model *f32 = load_model("stories260K.gguf", NULL), *q4 = load_model("stories260K-q4_0.gguf", NULL);
    const run_config rc = {.kv = LLMM_KV_F32};
    fidelity_records full = reference(f32, fx, &rc), top;
    assert_int_equal(llmm__fidelity_records_init(&top, fx->text, fx->n, 32, 512), LLMM_OK);
    run(f32, fx, &rc, llmm__fidelity_records_put, &top);
    const fidelity_summary exact = compare(q4, fx, &full, &rc), approx = compare(q4, fx, &top, &rc);
    print_message("Q4_0 vs F32 weights: KL mean %.3e (top-32 records %.3e), top-1 %.2f %%\n", exact.kld_mean,
                  approx.kld_mean, 100 * exact.top1_agree);
    assert_true(exact.kld_mean > 1e-3 && exact.top1_agree < 0.99);
    assert_true(approx.kld_mean <= exact.kld_mean * (1 + 1e-9) && approx.kld_mean > 0.9 * exact.kld_mean);
    assert_true(fabs(exact.ppl_test - approx.ppl_test) < 1e-9 * exact.ppl_test);
    /* a run against itself */
    const fidelity_summary self = compare(f32, fx, &full, &rc);
    assert_true(self.kld_max < 1e-12 && self.top1_agree == 1.0 && self.max_dlogit == 0.0);
    llmm__fidelity_records_free(&top);
    llmm__fidelity_records_free(&full);
    llmm_model_free(q4);
    llmm_model_free(f32);
}

/* llmmini-perplexity's file: what is written is read back exactly; damaged files are refused. */
static void test_logits_file(void **state) {
    const fixture *fx = *state;
    llmm_model *m = load_model("models/stories260K.gguf", NULL);
    const run_config rc = {.kv = LLMM_KV_F32};
    fidelity_records r, back;
    assert_int_equal(llmm__fidelity_records_init(&r, fx->text, fx->n, 8, 512), LLMM_OK);
    run(m, fx, &rc, llmm__fidelity_records_put, &r);
    fidelity_file_info info = {.window = WINDOW, .bos = fx->bos}, got;
    assert_int_equal(llmm__fidelity_model_fingerprint(m, &info), LLMM_OK);
    char path[] = "/tmp/llmm-fidelity-XXXXXX";
    const int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    llmm_diag d = {""};
    assert_int_equal(llmm__fidelity_save(path, &r, &info, &d), LLMM_OK);
    assert_int_equal(llmm__fidelity_load(path, &back, &got, &d), LLMM_OK);
    assert_true(got.vocab_hash == info.vocab_hash && got.model_hash == info.model_hash);
    assert_int_equal(got.window, WINDOW);
    assert_int_equal(got.bos, fx->bos);
    assert_int_equal(back.n, r.n);
    assert_memory_equal(back.target, r.target, r.n * sizeof *r.target);
    assert_memory_equal(back.lse, r.lse, r.n * sizeof *r.lse);
    assert_memory_equal(back.top_id, r.top_id, r.n * 8 * sizeof *r.top_id);
    assert_memory_equal(back.top_logit, r.top_logit, r.n * 8 * sizeof *r.top_logit);
    llmm__fidelity_records_free(&back);
    size_t len;
    char *bytes = read_whole_file(path, &len);
    assert_non_null(bytes);
    /* a flipped header byte, a cut file, an id out of the vocabulary */
    const struct {
        size_t at;
        char value;
        size_t len;
    } damage[] = {{20, 9, len}, {0, 'L', len - 3}, {64 + 16 + 1, 0x7f, len}};
    for (size_t i = 0; i < sizeof damage / sizeof *damage; i++) {
        char *copy = malloc(len);
        assert_non_null(copy);
        memcpy(copy, bytes, len);
        copy[damage[i].at] = damage[i].value;
        FILE *f = fopen(path, "wb");
        assert_non_null(f);
        assert_int_equal(fwrite(copy, 1, damage[i].len, f), damage[i].len);
        fclose(f);
        free(copy);
        assert_int_equal(llmm__fidelity_load(path, &back, &got, &d), LLMM_ERR_BAD_FILE);
        print_message("damaged file %zu refused: %s\n", i, d.msg);
    }
    free(bytes);
    unlink(path);
    llmm__fidelity_records_free(&r);
    llmm_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kernel_tables_agree), cmocka_unit_test(test_kv_types_agree),
        cmocka_unit_test(test_f16_kv_adds_no_error), cmocka_unit_test(test_batching_agrees),
        cmocka_unit_test(test_measures_discriminate),
        cmocka_unit_test(test_logits_file),
    };
    return cmocka_run_group_tests_name("fidelity", tests, make_text, free_text);
}
