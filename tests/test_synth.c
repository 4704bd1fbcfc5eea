/* llmmini-synth as a user runs it: a model synthesized with another GGUF's tokenizer
 * (--vocab) loads, has that vocabulary's size, tokenizes exactly as the vocabulary file does
 * (the reference tokenizer's vectors), and generates; a bad --vocab fails before any output is
 * written. The tool is the one built next to this test (build/llmmini-synth for
 * build/tests/test_synth), run under $TEST_RUNNER when cross-built. */
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

#include "gguf.h"
#include "gguf_builder.h"
#include "llmmini.h"
#include "quant_temp.h"
#include "shared_data.h"

static char synth_tool[1024];

/* build/tests/test_synth -> build/llmmini-synth; a sanitizer or cross build has its own
 * build folder, and its tool sits in the same place relative to the test. */
static void locate_tool(const char *argv0) {
    char dir[900];
    snprintf(dir, sizeof dir, "%s", argv0);
    char *slash = strrchr(dir, '/');
    if (slash) *slash = '\0';
    else snprintf(dir, sizeof dir, "build/tests");
    snprintf(synth_tool, sizeof synth_tool, "%s/../llmmini-synth", dir);
}

typedef struct temp_files {
    char model[64], log[64];
} temp_files;

static void temp_names(temp_files *t) {
    static unsigned serial;
    snprintf(t->model, sizeof t->model, "/tmp/llmm-synth-%ld-%u.gguf", (long)getpid(), serial);
    snprintf(t->log, sizeof t->log, "/tmp/llmm-synth-%ld-%u.log", (long)getpid(), serial++);
}

static void temp_remove(const temp_files *t) {
    unlink(t->model);
    unlink(t->log);
}

/* Runs the tool with args and -o t->model, stderr into t->log; its exit status, or -1. */
static int run_synth(const temp_files *t, const char *args) {
    const char *runner = getenv("TEST_RUNNER");
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s '%s' -o '%s' %s 2>'%s'", runner ? runner : "", synth_tool, t->model, args, t->log);
    int st = system(cmd);
    return st != -1 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Whether the tool's stderr holds needle (NULL: never); shows that stderr when not. */
static int log_contains(const temp_files *t, const char *needle) {
    char *text = read_whole_file(t->log, NULL);
    int found = needle && text && strstr(text, needle) != NULL;
    if (!found) print_message("llmmini-synth said: %s\n", text ? text : "(nothing)");
    free(text);
    return found;
}

static llmm_model *load(const char *path, int vocab_only) {
    llmm_model_params p;
    llmm_model_params_default(&p, sizeof p);
    p.vocab_only = vocab_only;
    char err[512] = "";
    p.error_buf = err;
    p.error_buf_size = sizeof err;
    llmm_model *m = NULL;
    llmm_status st = llmm_model_load(path, &p, &m);
    if (st != LLMM_OK) print_message("%s: %s\n", path, err);
    assert_int_equal(st, LLMM_OK);
    return m;
}

static llmm_model_info info_of(const llmm_model *m) {
    llmm_model_info info;
    memset(&info, 0, sizeof info);
    info.size = sizeof info;
    assert_int_equal(llmm_model_get_info(m, &info), LLMM_OK);
    return info;
}

static size_t tokenize(const llmm_model *m, const char *text, size_t len, uint32_t flags, llmm_token *ids,
                       size_t cap) {
    size_t n = 0;
    assert_int_equal(llmm_tokenize(m, text, len, flags, ids, cap, &n), LLMM_OK);
    return n;
}

/* Every reference vector of the vocabulary, and one sentence with special tokens added,
 * give the same ids from the synthesized model as from the vocabulary file. */
static void assert_same_tokenizer(const llmm_model *synth, const llmm_model *ref, const char *vocab_name) {
    enum { CAP = 4096 };
    llmm_token *a = malloc(CAP * sizeof *a), *b = malloc(CAP * sizeof *b);
    assert_non_null(a);
    assert_non_null(b);
    static const char sentence[] = "Hello world, this is a test of the copied tokenizer: 3.14159!";
    for (uint32_t flags = 0; flags <= LLMM_TOKENIZE_ADD_SPECIAL; flags++) {
        size_t na = tokenize(synth, sentence, strlen(sentence), flags, a, CAP);
        size_t nb = tokenize(ref, sentence, strlen(sentence), flags, b, CAP);
        assert_true(na > 5);
        assert_int_equal(na, nb);
        assert_memory_equal(a, b, na * sizeof *a);
    }
    char inp[1024], out[1024], rel[256];
    snprintf(rel, sizeof rel, "vocab/%s.inp", vocab_name);
    shared_path(inp, sizeof inp, rel);
    snprintf(rel, sizeof rel, "vocab/%s.out", vocab_name);
    shared_path(out, sizeof out, rel);
    vocab_cases vc;
    assert_int_equal(vocab_cases_load(inp, out, &vc), 0);
    assert_true(vc.n > 10);
    for (size_t i = 0; i < vc.n; i++) {
        size_t na = tokenize(synth, vc.text[i], vc.text_len[i], 0, a, CAP);
        size_t nb = tokenize(ref, vc.text[i], vc.text_len[i], 0, b, CAP);
        assert_int_equal(na, nb);
        assert_memory_equal(a, b, na * sizeof *a);
    }
    vocab_cases_free(&vc);
    free(a);
    free(b);
}

/* A few greedy tokens, each inside the vocabulary, with finite logits over all of it. */
static void assert_generates(llmm_model *m, uint32_t n_vocab) {
    llmm_context_params cp;
    llmm_context_params_default(&cp, sizeof cp);
    cp.n_ctx = 64;
    llmm_context *ctx = NULL;
    assert_int_equal(llmm_context_create(m, &cp, &ctx), LLMM_OK);
    llmm_sampler_params sp;
    llmm_sampler_params_default(&sp, sizeof sp);
    sp.temperature = 0;
    llmm_generate_params gp;
    llmm_generate_params_default(&gp, sizeof gp);
    gp.max_tokens = 4;
    gp.sampling = &sp;
    llmm_token out[4];
    gp.out_tokens = out;
    gp.out_capacity = 4;
    llmm_generate_stats stats;
    memset(&stats, 0, sizeof stats);
    stats.size = sizeof stats;
    assert_int_equal(llmm_generate(ctx, "Once upon a time", &gp, &stats), LLMM_OK);
    assert_true(stats.n_prompt > 0);
    assert_true(stats.n_generated >= 1 && stats.n_generated <= 4);
    for (size_t i = 0; i < stats.n_generated; i++) assert_true(out[i] >= 0 && (uint32_t)out[i] < n_vocab);
    const float *logits = NULL;
    size_t n = 0;
    assert_int_equal(llmm_logits(ctx, 0, &logits, &n), LLMM_OK);
    assert_int_equal(n, n_vocab);
    for (size_t i = 0; i < n; i++) assert_true(isfinite(logits[i]));
    llmm_context_free(ctx);
}

/* Synthesizes with the vocabulary, then checks size, tokenizer and generation. extra: more
 * options; n_tensors: what the layout must come to (tied output, rope factors). */
static void check_copied_vocab(const char *vocab_name, const char *extra, uint32_t n_tensors) {
    char vocab_path[1024], rel[256], args[2048];
    snprintf(rel, sizeof rel, "vocab/%s", vocab_name);
    shared_path(vocab_path, sizeof vocab_path, rel);
    temp_files t;
    temp_names(&t);
    snprintf(args, sizeof args, "--vocab '%s' %s", vocab_path, extra);
    int rc = run_synth(&t, args);
    if (rc != 0) log_contains(&t, NULL);
    assert_int_equal(rc, 0);

    llmm_model *ref = load(vocab_path, 1), *m = load(t.model, 0);
    const llmm_model_info ri = info_of(ref), mi = info_of(m);
    assert_true(ri.n_vocab > 1000);
    assert_int_equal(mi.n_vocab, ri.n_vocab);
    assert_int_equal(mi.tokenizer, ri.tokenizer);
    assert_int_equal(mi.n_tensors, n_tensors);
    int64_t vocab_size = 0;
    char key[96];
    snprintf(key, sizeof key, "%s.vocab_size", mi.architecture);
    assert_int_equal(llmm_model_meta_int(m, key, &vocab_size), LLMM_OK);
    assert_int_equal(vocab_size, ri.n_vocab);
    const char *pre_a = NULL, *pre_b = NULL;
    if (llmm_model_meta_str(ref, "tokenizer.ggml.pre", &pre_b) == LLMM_OK) {
        assert_int_equal(llmm_model_meta_str(m, "tokenizer.ggml.pre", &pre_a), LLMM_OK);
        assert_string_equal(pre_a, pre_b);
    }
    assert_same_tokenizer(m, ref, vocab_name);
    assert_generates(m, mi.n_vocab);
    llmm_model_free(m);
    llmm_model_free(ref);
    temp_remove(&t);
}

/* Qwen2's byte-level BPE on the tiny llama shape: token_embd, output_norm, output and 9
 * tensors in each of the 2 layers. */
static void test_qwen2_vocab(void **state) {
    (void)state;
    check_copied_vocab("ggml-vocab-qwen2.gguf", "--preset tiny --type f16", 3 + 2 * 9);
}

/* The Llama 3.2 1B layout, narrowed: tied output (no output.weight) and the rope_freqs its
 * llama3 rope scaling needs, with the Llama 3 tokenizer. */
static void test_llama3_preset_with_llama_bpe_vocab(void **state) {
    (void)state;
    check_copied_vocab("ggml-vocab-llama-bpe.gguf",
                       "--preset llama-3.2-1b --dim 128 --heads 2 --kv-heads 1 --ff 256 --layers 1 --type f16",
                       3 + 1 * 9);
}

/* The SentencePiece vocabulary of Llama 2, into an F32 model. */
static void test_spm_vocab_f32(void **state) {
    (void)state;
    check_copied_vocab("ggml-vocab-llama-spm.gguf", "--preset tiny --type f32", 3 + 2 * 9);
}

static void assert_refused(const char *vocab_path, const char *message) {
    temp_files t;
    temp_names(&t);
    char args[1200];
    snprintf(args, sizeof args, "--preset tiny --type f32 --vocab '%s'", vocab_path);
    int rc = run_synth(&t, args);
    assert_true(rc > 0);
    assert_true(log_contains(&t, message));
    assert_int_equal(access(t.model, F_OK), -1); /* refused before the output was created */
    temp_remove(&t);
}

static void test_missing_vocab_file(void **state) {
    (void)state;
    assert_refused("/nonexistent/llmm-no-such-vocab.gguf", "cannot open");
}

static void test_vocab_file_without_tokens(void **state) {
    (void)state;
    gguf_builder b;
    gb_init(&b);
    gb_header(&b, 3, 0, 2);
    gb_kv_str(&b, "general.architecture", "llama");
    gb_kv_str(&b, "tokenizer.ggml.model", "gpt2");
    assert_true(gb_finish(&b));
    char path[64];
    assert_int_equal(gb_write_temp(&b, path, sizeof path), 0);
    gb_free(&b);
    assert_refused(path, "no tokenizer.ggml.tokens");
    unlink(path);
}

static void test_vocab_file_not_gguf(void **state) {
    (void)state;
    char path[1024];
    assert_refused(shared_path(path, sizeof path, "vocab/README.md"), "not a GGUF");
}

/* Without --vocab the synthetic SentencePiece vocabulary of the preset's size remains. */
static void test_synthetic_vocab(void **state) {
    (void)state;
    temp_files t;
    temp_names(&t);
    assert_int_equal(run_synth(&t, "--preset tiny --type f32 --n-vocab 400"), 0);
    llmm_model *m = load(t.model, 0);
    const llmm_model_info mi = info_of(m);
    assert_int_equal(mi.n_vocab, 400);
    assert_int_equal(mi.tokenizer, LLMM_TOKENIZER_SPM);
    assert_generates(m, mi.n_vocab);
    llmm_model_free(m);
    temp_remove(&t);
}

/* ------------------------------------------------------------ quantized synthetic models */

enum { QS_N = 24 }; /* positions compared: a 4-token prompt and 20 greedy F32 tokens */

/* The F32 file quantized with recipe into a temp file (path: >= 32 bytes). */
static void quantize_file(const char *src_path, const char *recipe, char *path, size_t size) {
    gguf_file *src = NULL;
    llmm_diag d = {""};
    if (llmm__gguf_open_file(src_path, 1, NULL, &src, &d)) fail_msg("open %s: %s", src_path, d.msg);
    quantize_to_temp(src, recipe, path, size);
    llmm__gguf_close(src);
}

/* A 64-position context with F32 K/V, so only the weights differ between the runs compared. */
static llmm_context *f32_kv_context(llmm_model *m) {
    llmm_context_params cp;
    llmm_context_params_default(&cp, sizeof cp);
    cp.n_ctx = 64;
    cp.kv_type = LLMM_KV_F32;
    llmm_context *ctx = NULL;
    assert_int_equal(llmm_context_create(m, &cp, &ctx), LLMM_OK);
    return ctx;
}

/* Logits of every position of ids (n_vocab each) into out. */
static void all_logits(const char *path, const llmm_token *ids, size_t n, float *out, uint32_t n_vocab) {
    llmm_model *m = load(path, 0);
    llmm_context *ctx = f32_kv_context(m);
    assert_int_equal(llmm_prefill(ctx, 0, ids, n, LLMM_PREFILL_ALL_LOGITS), LLMM_OK);
    for (size_t i = 0; i < n; i++) {
        const float *l;
        size_t nv;
        assert_int_equal(llmm_logits(ctx, i, &l, &nv), LLMM_OK);
        assert_int_equal(nv, n_vocab);
        memcpy(out + i * n_vocab, l, n_vocab * sizeof *l);
    }
    llmm_context_free(ctx);
    llmm_model_free(m);
}

static size_t argmax_of(const float *v, size_t n) {
    size_t best = 0;
    for (size_t i = 1; i < n; i++)
        if (v[i] > v[best]) best = i;
    return best;
}

/* ids[n .. n_total) = the model's greedy continuation of ids[0 .. n), one context. */
static void greedy_extend(const char *path, llmm_token *ids, size_t n, size_t n_total) {
    llmm_model *m = load(path, 0);
    llmm_context *ctx = f32_kv_context(m);
    assert_int_equal(llmm_prefill(ctx, 0, ids, n, 0), LLMM_OK);
    const llmm_seq_id seq = 0;
    for (; n < n_total; n++) {
        const float *l;
        size_t nv;
        assert_int_equal(llmm_logits(ctx, 0, &l, &nv), LLMM_OK);
        ids[n] = (llmm_token)argmax_of(l, nv);
        if (n + 1 < n_total) assert_int_equal(llmm_decode(ctx, &seq, &ids[n], 1), LLMM_OK);
    }
    llmm_context_free(ctx);
    llmm_model_free(m);
}

/* A random-weight model (rows of 256 and 768 values, so the K-quants apply) quantized with
 * every recipe, run on the F32 model's own greedy sequence (teacher-forced, so one flipped
 * near-tie cannot derail the rest): at every position the RMS logit error, relative to the
 * RMS of the F32 logits, stays within the recipe's bound. Free-running greedy agreement is no
 * check on such a model: random weights leave near-ties at most steps, and even Q8_0 leaves
 * the F32 continuation within a few tokens (docs/quantization.md), so the positions whose
 * argmax differs are printed, not asserted. Measured when written (worst position): f16
 * 0.0008, q8_0 0.017, q6_k 0.042, q5_k_m 0.070, q5_0 0.099, q4_k_m 0.137, q4_0 0.186, q3_k
 * 0.38, q2_k 0.60, iq4_nl 0.189, iq4_xs 0.190; the bounds are about 1.5x those. Unrelated
 * logits give about 1.4, zeros 1. */
static void test_quantized_synthetic_logits(void **state) {
    (void)state;
    static const struct {
        const char *recipe;
        double bound;
    } cases[] = {{"f16", 0.002}, {"q8_0", 0.03}, {"q6_k", 0.065}, {"q5_k_m", 0.11}, {"q5_0", 0.15},
                 {"q4_k_m", 0.2}, {"q4_0", 0.28}, {"q3_k", 0.57}, {"q2_k", 0.9}, {"iq4_nl", 0.28}, {"iq4_xs", 0.28}};
    temp_files t;
    temp_names(&t);
    assert_int_equal(run_synth(&t, "--preset tiny --type f32 --dim 256 --layers 4 --heads 4 --kv-heads 2 --ff 768 "
                                   "--n-vocab 512 --seed 11"), 0);
    llmm_model *m = load(t.model, 0);
    const uint32_t n_vocab = info_of(m).n_vocab;
    llmm_token ids[QS_N];
    size_t n = tokenize(m, "Once upon a", 11, LLMM_TOKENIZE_ADD_SPECIAL, ids, QS_N);
    assert_true(n >= 2 && n < QS_N);
    llmm_model_free(m);
    float *ref = malloc(QS_N * n_vocab * sizeof *ref), *got = malloc(QS_N * n_vocab * sizeof *got);
    assert_non_null(ref);
    assert_non_null(got);
    greedy_extend(t.model, ids, n, QS_N);
    n = QS_N;
    all_logits(t.model, ids, n, ref, n_vocab);
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        char path[64];
        quantize_file(t.model, cases[c].recipe, path, sizeof path);
        all_logits(path, ids, n, got, n_vocab);
        unlink(path);
        double worst = 0;
        size_t flips = 0;
        for (size_t i = 0; i < n; i++) {
            const float *r = ref + i * n_vocab, *g = got + i * n_vocab;
            double ss = 0, se = 0;
            for (uint32_t v = 0; v < n_vocab; v++) {
                const double e = (double)g[v] - r[v];
                ss += (double)r[v] * r[v];
                se += e * e;
            }
            worst = fmax(worst, sqrt(se / ss));
            flips += argmax_of(r, n_vocab) != argmax_of(g, n_vocab);
        }
        print_message("%-7s RMS logit error / RMS logit: worst position %.4f (bound %.3f); argmax differs at %zu of %zu\n",
                      cases[c].recipe, worst, cases[c].bound, flips, n);
        if (!(worst <= cases[c].bound))
            fail_msg("%s: relative logit error %.4f exceeds %.3f", cases[c].recipe, worst, cases[c].bound);
    }
    free(ref);
    free(got);
    temp_remove(&t);
}

int main(int argc, char **argv) {
    (void)argc;
    locate_tool(argv[0]);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_qwen2_vocab),
        cmocka_unit_test(test_llama3_preset_with_llama_bpe_vocab),
        cmocka_unit_test(test_spm_vocab_f32),
        cmocka_unit_test(test_missing_vocab_file),
        cmocka_unit_test(test_vocab_file_without_tokens),
        cmocka_unit_test(test_vocab_file_not_gguf),
        cmocka_unit_test(test_synthetic_vocab),
        cmocka_unit_test(test_quantized_synthetic_logits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
