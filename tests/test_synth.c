/* llmmini-synth as a user runs it: a model synthesized with another GGUF's tokenizer
 * (--vocab) loads, has that vocabulary's size, tokenizes exactly as the vocabulary file does
 * (the reference tokenizer's vectors), and generates; a bad --vocab fails before any output is
 * written. Its LoRA adapters (--lora-rank) have the layout of the reference adapters in
 * $LLMM_SHARED/lora, key for key and tensor for tensor. The tool is the one built next to this
 * test (build/llmmini-synth for build/tests/test_synth), run under $TEST_RUNNER when
 * cross-built. */
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

#include "format/gguf.h"
#include "support/gguf_builder.h"
#include "llmmini.h"
#include "format/quant.h"
#include "support/quant_temp.h"
#include "support/fixtures.h"
#include "support/rng.h"
#include "support/shared_data.h"

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
    char model[64], adapter[64], log[64];
} temp_files;

static void temp_names(temp_files *t) {
    static unsigned serial;
    snprintf(t->model, sizeof t->model, "/tmp/llmm-synth-%ld-%u.gguf", (long)getpid(), serial);
    snprintf(t->adapter, sizeof t->adapter, "/tmp/llmm-synth-%ld-%u-lora.gguf", (long)getpid(), serial);
    snprintf(t->log, sizeof t->log, "/tmp/llmm-synth-%ld-%u.log", (long)getpid(), serial++);
}

static void temp_remove(const temp_files *t) {
    unlink(t->model);
    unlink(t->adapter);
    unlink(t->log);
}

/* Runs the tool with args alone, stderr into t->log; its exit status, or -1. */
static int run_tool(const temp_files *t, const char *args) {
    const char *runner = getenv("TEST_RUNNER");
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s '%s' %s 2>'%s'", runner ? runner : "", synth_tool, args, t->log);
    int st = system(cmd);
    return st != -1 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Runs the tool with args and -o t->model. */
static int run_synth(const temp_files *t, const char *args) {
    char all[3072];
    snprintf(all, sizeof all, "-o '%s' %s", t->model, args);
    return run_tool(t, all);
}

/* Whether the tool's stderr holds needle (NULL: never); shows that stderr when not. */
static int log_contains(const temp_files *t, const char *needle) {
    char *text = read_whole_file(t->log, NULL);
    int found = needle && text && strstr(text, needle) != NULL;
    if (!found) print_message("llmmini-synth said: %s\n", text ? text : "(nothing)");
    free(text);
    return found;
}

static llmm_model_info info_of(const llmm_model *m) {
    llmm_model_info info;
    memset(&info, 0, sizeof info);
    info.size = sizeof info;
    assert_int_equal(llmm_model_get_info(m, &info), LLMM_OK);
    return info;
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
        size_t na = tokenize_flags(synth, sentence, strlen(sentence), flags, a, CAP);
        size_t nb = tokenize_flags(ref, sentence, strlen(sentence), flags, b, CAP);
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
        size_t na = tokenize_flags(synth, vc.text[i], vc.text_len[i], 0, a, CAP);
        size_t nb = tokenize_flags(ref, vc.text[i], vc.text_len[i], 0, b, CAP);
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
    llmm_context *ctx = make_context(m, &cp);
    llmm_token out[4];
    llmm_generate_stats stats;
    generate_greedy(ctx, "Once upon a time", out, 4, &stats);
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

    llmm_model *ref = load_vocab(rel), *m = load_model(t.model, NULL);
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

/* The Gemma 3 1B layout, narrowed (Gemma's own 262k vocabulary is not in the shared data):
 * tied output, and per layer the 9 llama tensors plus Q/K norms and the post-attention and
 * post-FFN norms; the model loads as gemma3 and generates. */
static void test_gemma3_preset(void **state) {
    (void)state;
    check_copied_vocab("ggml-vocab-llama-spm.gguf",
                       "--preset gemma3-1b --dim 128 --heads 2 --kv-heads 1 --ff 256 --layers 6 --type f16",
                       2 + 6 * 13);
}

/* SmolLM3 3B narrowed, with the Llama 3 tokenizer it uses: tied output, llama's 9 tensors
 * per layer (its NoPE layers have no tensors of their own). */
static void test_smollm3_preset(void **state) {
    (void)state;
    check_copied_vocab("ggml-vocab-llama-bpe.gguf",
                       "--preset smollm3-3b --dim 128 --heads 2 --kv-heads 1 --ff 256 --layers 4 --type f16",
                       2 + 4 * 9);
}

/* LFM2 1.2B narrowed to 6 layers: attention in layers 2 and 5 (llama's 9 tensors and Q/K
 * norms), short convolutions in the others (norms, in_proj, F32 taps, out_proj, the FFN), the
 * final norm as token_embd_norm, tied output; it loads as lfm2 and generates. */
static void test_lfm2_preset(void **state) {
    (void)state;
    check_copied_vocab("ggml-vocab-llama-bpe.gguf",
                       "--preset lfm2-1.2b --dim 128 --heads 4 --kv-heads 2 --ff 256 --layers 6 --type f16",
                       2 + 2 * 11 + 4 * 8);
}

/* Qwen3.5 0.8B narrowed to 4 layers, with the Qwen2 tokenizer: Gated DeltaNet in layers 0-2
 * (norms, attn_qkv, attn_gate, F32 convolution taps, ssm_dt.bias, ssm_a, ssm_beta, ssm_alpha,
 * ssm_norm, ssm_out, the FFN), gated full attention in layer 3 (Q twice as wide, Q/K norms),
 * tied output; it loads as qwen35 and generates. */
static void test_qwen35_preset(void **state) {
    (void)state;
    check_copied_vocab("ggml-vocab-qwen2.gguf",
                       "--preset qwen3.5-0.8b --dim 128 --heads 2 --kv-heads 1 --ff 256 --layers 4 --type f16",
                       2 + 3 * 14 + 11);
}

static gguf_file *open_gguf(const char *path) {
    gguf_file *f = NULL;
    llmm_diag d = {""};
    if (llmm__gguf_open_file(path, 1, NULL, &f, &d)) fail_msg("open %s: %s", path, d.msg);
    return f;
}

/* The qwen35 file has the reference converter's layout: tensor names in the order of
 * golden/arch/tiny-qwen35 (4 layers; less its output.weight, as the preset ties the output)
 * and every qwen35.* key of it, of the same type. */
static void test_qwen35_preset_matches_converter_layout(void **state) {
    (void)state;
    temp_files t;
    temp_names(&t);
    assert_int_equal(run_synth(&t, "--preset qwen3.5-0.8b --dim 64 --heads 4 --kv-heads 2 --ff 160 --layers 4 "
                                   "--n-vocab 512 --type f32"),
                     0);
    char ref_path[1024];
    shared_path(ref_path, sizeof ref_path, "golden/arch/tiny-qwen35.gguf");
    gguf_file *ref = open_gguf(ref_path), *got = open_gguf(t.model);
    uint64_t j = 0;
    for (uint64_t i = 0; i < ref->n_tensors; i++) {
        const gguf_str name = ref->tensors[i].name;
        if (llmm__gguf_str_eq(name, "output.weight")) continue;
        if (j == got->n_tensors || name.len != got->tensors[j].name.len ||
            memcmp(name.ptr, got->tensors[j].name.ptr, (size_t)name.len))
            fail_msg("tensor %llu: the converter writes %.*s here", (unsigned long long)j, (int)name.len, name.ptr);
        j++;
    }
    assert_int_equal(j, got->n_tensors);
    for (uint64_t i = 0; i < ref->n_kv; i++) {
        const gguf_kv *kv = &ref->kv[i];
        if (kv->key.len < 7 || memcmp(kv->key.ptr, "qwen35.", 7)) continue;
        char key[128];
        snprintf(key, sizeof key, "%.*s", (int)kv->key.len, kv->key.ptr);
        const gguf_kv *mine = llmm__gguf_find_kv(got, key);
        if (!mine || mine->type != kv->type) fail_msg("%s missing or of another type", key);
    }
    llmm__gguf_close(ref);
    llmm__gguf_close(got);
    temp_remove(&t);
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
    llmm_model *m = load_model(t.model, NULL);
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
    return make_context(m, &cp);
}

/* Logits of every position of ids (n_vocab each) into out. */
static void all_logits(const char *path, const llmm_token *ids, size_t n, float *out, uint32_t n_vocab) {
    llmm_model *m = load_model(path, NULL);
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

/* ids[n .. n_total) = the model's greedy continuation of ids[0 .. n), one context. */
static void greedy_extend(const char *path, llmm_token *ids, size_t n, size_t n_total) {
    llmm_model *m = load_model(path, NULL);
    llmm_context *ctx = f32_kv_context(m);
    assert_int_equal(llmm_prefill(ctx, 0, ids, n, 0), LLMM_OK);
    const llmm_seq_id seq = 0;
    for (; n < n_total; n++) {
        const float *l;
        size_t nv;
        assert_int_equal(llmm_logits(ctx, 0, &l, &nv), LLMM_OK);
        ids[n] = argmax(l, nv);
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
    llmm_model *m = load_model(t.model, NULL);
    const uint32_t n_vocab = info_of(m).n_vocab;
    llmm_token ids[QS_N];
    size_t n = tokenize_flags(m, "Once upon a", 11, LLMM_TOKENIZE_ADD_SPECIAL, ids, QS_N);
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
            flips += argmax(r, n_vocab) != argmax(g, n_vocab);
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

/* ------------------------------------------------------------------------ LoRA adapters */

static void assert_kv_str(const gguf_file *f, const char *key, const char *want) {
    const gguf_kv *kv = llmm__gguf_find_kv(f, key);
    if (!kv || kv->type != GGUF_TYPE_STRING) fail_msg("no string %s", key);
    if (!llmm__gguf_str_eq(kv->v.str, want))
        fail_msg("%s is '%.*s', not '%s'", key, (int)kv->v.str.len, kv->v.str.ptr, want);
}

/* Whether the "blk.N.<stem>.weight" of name (a base tensor) has its stem in the comma list. */
static int stem_listed(const char *name, const char *stems) {
    const char *stem = strncmp(name, "blk.", 4) ? NULL : strchr(name + 4, '.');
    if (!stem) return 0;
    const size_t len = strlen(++stem) - strlen(".weight");
    for (const char *p = stems; *p;) {
        const size_t n = strcspn(p, ",");
        if (n == len && !strncmp(p, stem, n)) return 1;
        p += n + (p[n] == ',');
    }
    return 0;
}

/* What an adapter must hold for its base model. type: the requested one; rows that do not split
 * into its blocks are F16, as the reference converter writes them. */
typedef struct adapter_expect {
    uint32_t rank;
    double alpha;
    uint32_t type;
    size_t n_weights;
    const char *stems; /* the adapted tensors of a layer, comma-separated */
} adapter_expect;

/* One lora_a or lora_b tensor: its name, dims, type and byte size. */
static void assert_lora_tensor(const gguf_tensor *t, const char *name, int64_t ne0, int64_t ne1, uint32_t type) {
    if (!llmm__gguf_str_eq(t->name, name))
        fail_msg("tensor '%.*s', expected '%s'", (int)t->name.len, t->name.ptr, name);
    if (t->n_dims != 2 || t->ne[0] != ne0 || t->ne[1] != ne1)
        fail_msg("%s: dims [%lld, %lld] (%u), expected [%lld, %lld]", name, (long long)t->ne[0], (long long)t->ne[1],
                 t->n_dims, (long long)ne0, (long long)ne1);
    const uint32_t want = ne0 % llmm__type_get(type)->block_size ? LLMM_TYPE_F16 : type;
    if (t->type != want) fail_msg("%s: type %u, expected %u", name, t->type, want);
    assert_int_equal(t->n_bytes, llmm__row_bytes(want, (uint64_t)ne0) * (uint64_t)ne1);
}

/* The adapter as the reference engine reads it: exactly the four keys (alpha an F32),
 * general.architecture the base's, and for each adapted weight W (a 2-D tensor of the base,
 * GGUF dims [n_in, n_out], in the base's order) "W.lora_a" [n_in, rank] then "W.lora_b"
 * [rank, n_out]; data aligned to 32 and ending where the file does. */
static void assert_adapter_layout(const char *adapter_path, const char *base_path, const adapter_expect *e) {
    gguf_file *ad = open_gguf(adapter_path), *base = open_gguf(base_path);
    assert_int_equal(ad->version, 3);
    assert_int_equal(ad->n_kv, 4);
    assert_kv_str(ad, "general.type", "adapter");
    assert_kv_str(ad, "adapter.type", "lora");
    const gguf_kv *arch = llmm__gguf_find_kv(base, "general.architecture");
    assert_non_null(arch);
    char arch_name[64];
    snprintf(arch_name, sizeof arch_name, "%.*s", (int)arch->v.str.len, arch->v.str.ptr);
    assert_kv_str(ad, "general.architecture", arch_name);
    const gguf_kv *alpha = llmm__gguf_find_kv(ad, "adapter.lora.alpha");
    assert_non_null(alpha);
    assert_int_equal(alpha->type, GGUF_TYPE_F32);
    assert_true(alpha->v.f64 == e->alpha);
    assert_int_equal(ad->alignment, 32);
    assert_int_equal(ad->n_tensors, 2 * e->n_weights);

    uint64_t prev_base = 0, end = 0;
    for (size_t i = 0; i < e->n_weights; i++) {
        const gguf_tensor *a = &ad->tensors[2 * i], *b = &ad->tensors[2 * i + 1];
        char name[GGUF_MAX_NAME], want[GGUF_MAX_NAME + 8];
        assert_true(a->name.len > 7 && a->name.len - 7 < sizeof name);
        snprintf(name, sizeof name, "%.*s", (int)(a->name.len - 7), a->name.ptr);
        const gguf_tensor *w = llmm__gguf_find_tensor(base, name);
        if (!w) fail_msg("%.*s: the base has no %s", (int)a->name.len, a->name.ptr, name);
        if (!stem_listed(name, e->stems)) fail_msg("%s is adapted; expected only %s", name, e->stems);
        assert_int_equal(w->n_dims, 2);
        const uint64_t at = (uint64_t)(w - base->tensors);
        assert_true(i == 0 || at > prev_base); /* the base's order */
        prev_base = at;
        snprintf(want, sizeof want, "%s.lora_a", name);
        assert_lora_tensor(a, want, w->ne[0], e->rank, e->type);
        snprintf(want, sizeof want, "%s.lora_b", name);
        assert_lora_tensor(b, want, e->rank, w->ne[1], e->type);
        for (int k = 0; k < 2; k++) {
            const gguf_tensor *t = k ? b : a;
            assert_int_equal(t->offset % 32, 0);
            assert_true(t->offset >= end); /* in file order, no overlap */
            end = (t->offset + t->n_bytes + 31) / 32 * 32;
        }
    }
    assert_int_equal(ad->data_offset % 32, 0);
    assert_int_equal(ad->size, ad->data_offset + end);
    llmm__gguf_close(ad);
    llmm__gguf_close(base);
}

#define ALL_STEMS "attn_q,attn_k,attn_v,attn_output,ffn_gate,ffn_up,ffn_down"
#define ATTN_STEMS "attn_q,attn_k,attn_v,attn_output"

/* The check itself, on the reference adapters of stories260K: it passes on the converter's
 * files, so the files below that pass it have their layout. */
static void test_lora_reference_layout(void **state) {
    (void)state;
    char base[1024], r8[1024], r4[1024];
    shared_path(base, sizeof base, "models/stories260K.gguf");
    shared_path(r8, sizeof r8, "lora/stories260K-lora-r8.gguf");
    shared_path(r4, sizeof r4, "lora/stories260K-lora-r4-attn-f16.gguf");
    assert_adapter_layout(r8, base, &(adapter_expect){8, 16.0, LLMM_TYPE_F32, 5 * 7, ALL_STEMS});
    assert_adapter_layout(r4, base, &(adapter_expect){4, 0.0, LLMM_TYPE_F16, 5 * 4, ATTN_STEMS});
}

/* --lora-base on stories260K with the reference adapters' options: the header (keys, tensor
 * names, dims, types, offsets) is the reference's byte for byte and the files are the same
 * size; only the random values differ. */
static void assert_same_header_as(const char *ref_rel, const char *options) {
    char base[1024], ref_path[1024], args[3072];
    shared_path(base, sizeof base, "models/stories260K.gguf");
    shared_path(ref_path, sizeof ref_path, ref_rel);
    temp_files t;
    temp_names(&t);
    snprintf(args, sizeof args, "--lora-base '%s' --lora-out '%s' %s", base, t.adapter, options);
    const int rc = run_tool(&t, args);
    if (rc) log_contains(&t, NULL);
    assert_int_equal(rc, 0);
    size_t n_got = 0, n_ref = 0;
    char *got = read_whole_file(t.adapter, &n_got), *ref = read_whole_file(ref_path, &n_ref);
    assert_non_null(got);
    assert_non_null(ref);
    assert_int_equal(n_got, n_ref);
    gguf_file *f = open_gguf(ref_path);
    const size_t header = (size_t)f->data_offset;
    llmm__gguf_close(f);
    assert_memory_equal(got, ref, header);
    assert_memory_not_equal(got + header, ref + header, n_ref - header);
    free(got);
    free(ref);
    temp_remove(&t);
}

static void test_lora_base_file_has_reference_header(void **state) {
    (void)state;
    assert_same_header_as("lora/stories260K-lora-r8.gguf", "--lora-rank 8 --lora-alpha 16");
    assert_same_header_as("lora/stories260K-lora-r4-attn-f16.gguf",
                          "--lora-rank 4 --lora-alpha 0 --lora-type f16 --lora-targets q,k,v,o");
}

/* An adapter written with the synthesized tiny model, which still loads; the same adapter
 * written alone (no -o) is the same file, another --lora-seed another file of the size. */
static void test_lora_for_synth_model(void **state) {
    (void)state;
    temp_files t, u;
    temp_names(&t);
    temp_names(&u);
    char args[1024];
    snprintf(args, sizeof args, "--preset tiny --type f32 --n-vocab 400 --seed 5 --lora-rank 8 --lora-out '%s'",
             t.adapter);
    int rc = run_synth(&t, args);
    if (rc) log_contains(&t, NULL);
    assert_int_equal(rc, 0);
    assert_true(log_contains(&t, "LoRA adapter for llama, rank 8, alpha 16, f32, 14 weights"));
    assert_adapter_layout(t.adapter, t.model, &(adapter_expect){8, 16.0, LLMM_TYPE_F32, 2 * 7, ALL_STEMS});
    llmm_model_free(load_model(t.model, NULL));

    size_t n_a = 0, n_b = 0, n_c = 0;
    char *a = read_whole_file(t.adapter, &n_a);
    snprintf(args, sizeof args, "--preset tiny --n-vocab 400 --seed 5 --lora-rank 8 --lora-out '%s'", u.adapter);
    assert_int_equal(run_tool(&u, args), 0);
    assert_int_equal(access(u.model, F_OK), -1);
    char *b = read_whole_file(u.adapter, &n_b);
    snprintf(args, sizeof args, "--preset tiny --n-vocab 400 --seed 5 --lora-seed 6 --lora-rank 8 --lora-out '%s'",
             u.adapter);
    assert_int_equal(run_tool(&u, args), 0);
    char *c = read_whole_file(u.adapter, &n_c);
    assert_non_null(a);
    assert_non_null(b);
    assert_non_null(c);
    assert_int_equal(n_a, n_b);
    assert_memory_equal(a, b, n_a);
    assert_int_equal(n_a, n_c);
    assert_memory_not_equal(a, c, n_a);
    free(a);
    free(b);
    free(c);
    temp_remove(&t);
    temp_remove(&u);
}

/* Model and adapter for preset (narrowed by shape) with the given adapter options. */
static void synth_with_adapter(temp_files *t, const char *shape, const char *lora) {
    char args[2048];
    snprintf(args, sizeof args, "%s --lora-out '%s' %s", shape, t->adapter, lora);
    const int rc = run_synth(t, args);
    if (rc) log_contains(t, NULL);
    assert_int_equal(rc, 0);
}

/* The Qwen2.5-0.5B layout (Q/K/V biases, not adapted; K/V narrower than Q) narrowed, Q8_0:
 * lora_a rows (n_in) are Q8_0, lora_b rows (rank 16) F16 as the converter falls back, at rank
 * 32 Q8_0 as well; BF16 and F16 keep every row. */
static void test_lora_qwen2_shape_types(void **state) {
    (void)state;
    static const char shape[] =
        "--preset qwen2.5-0.5b --dim 128 --heads 4 --kv-heads 2 --ff 320 --layers 2 --n-vocab 400 --type q8_0";
    static const struct {
        const char *opts;
        adapter_expect e;
    } cases[] = {
        {"--lora-rank 16 --lora-type q8_0", {16, 32.0, LLMM_TYPE_Q8_0, 2 * 7, ALL_STEMS}},
        {"--lora-rank 32 --lora-type q8_0 --lora-alpha 8", {32, 8.0, LLMM_TYPE_Q8_0, 2 * 7, ALL_STEMS}},
        {"--lora-rank 3 --lora-type bf16 --lora-targets v,down", {3, 6.0, LLMM_TYPE_BF16, 2 * 2, "attn_v,ffn_down"}},
        {"--lora-rank 5 --lora-type f16 --lora-targets o", {5, 10.0, LLMM_TYPE_F16, 2, "attn_output"}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        temp_files t;
        temp_names(&t);
        synth_with_adapter(&t, shape, cases[i].opts);
        assert_adapter_layout(t.adapter, t.model, &cases[i].e);
        temp_remove(&t);
    }
}

/* Phi-3's fused layout: q, k, v adapt attn_qkv once, gate and up the fused ffn_up. */
static void test_lora_fused_layout(void **state) {
    (void)state;
    temp_files t;
    temp_names(&t);
    synth_with_adapter(&t, "--preset phi3-mini --dim 128 --heads 4 --kv-heads 4 --ff 256 --layers 2 --n-vocab 400 "
                           "--type f16", "--lora-rank 4");
    assert_adapter_layout(t.adapter, t.model,
                          &(adapter_expect){4, 8.0, LLMM_TYPE_F32, 2 * 4, "attn_qkv,attn_output,ffn_up,ffn_down"});
    temp_remove(&t);
}

static double rms_of(const float *v, size_t n) {
    double ss = 0;
    for (size_t i = 0; i < n; i++) ss += (double)v[i] * v[i];
    return sqrt(ss / (double)n);
}

/* The values: A's RMS is 1/sqrt(n_in), so A x keeps the RMS of x, and scale * B (A x) has 0.08
 * times the RMS of x (the reference adapters measure 0.07-0.08) whatever the rank and alpha:
 * the mean square ratio over every adapted weight and 8 random x each. W x of the synthesized
 * weights has 0.58 times it, so outputs change clearly without being swamped. */
static void assert_delta_scale(const char *opts, uint32_t rank, double scale) {
    enum { N_X = 8 };
    temp_files t;
    temp_names(&t);
    synth_with_adapter(&t, "--preset tiny --type f32 --dim 256 --ff 512 --n-vocab 400", opts);
    gguf_file *ad = open_gguf(t.adapter);
    test_rng rng = rng_seeded(12345);
    double sum_ratio2 = 0;
    for (size_t i = 0; i + 1 < ad->n_tensors; i += 2) {
        const gguf_tensor *a = &ad->tensors[i], *b = &ad->tensors[i + 1];
        const size_t n_in = (size_t)a->ne[0], n_out = (size_t)b->ne[1];
        const float *A = a->data, *B = b->data; /* [rank][n_in], [n_out][rank] */
        const double a_rms = rms_of(A, n_in * rank) * sqrt((double)n_in);
        if (fabs(a_rms - 1) > 0.1) fail_msg("%.*s: RMS x sqrt(n_in) %.3f", (int)a->name.len, a->name.ptr, a_rms);
        float x[512], ax[64], d[512];
        assert_true(n_in <= 512 && n_out <= 512 && rank <= 64);
        for (int rep = 0; rep < N_X; rep++) {
            for (size_t k = 0; k < n_in; k++)
                x[k] = rng_float(&rng, -0.5f, 0.5f);
            for (uint32_t r = 0; r < rank; r++) {
                double acc = 0;
                for (size_t k = 0; k < n_in; k++) acc += (double)A[r * n_in + k] * x[k];
                ax[r] = (float)acc;
            }
            for (size_t o = 0; o < n_out; o++) {
                double acc = 0;
                for (uint32_t r = 0; r < rank; r++) acc += (double)B[o * rank + r] * ax[r];
                d[o] = (float)(scale * acc);
            }
            const double rel = rms_of(d, n_out) / rms_of(x, n_in);
            sum_ratio2 += rel * rel;
        }
    }
    const double rel = sqrt(sum_ratio2 / (double)(ad->n_tensors / 2 * N_X));
    print_message("%s: delta RMS / input RMS %.4f\n", opts, rel);
    if (!(rel > 0.07 && rel < 0.09)) fail_msg("%s: delta RMS / input RMS %.4f, expected 0.08", opts, rel);
    llmm__gguf_close(ad);
    temp_remove(&t);
}

static void test_lora_delta_scale(void **state) {
    (void)state;
    assert_delta_scale("--lora-rank 8", 8, 16.0 / 8);
    assert_delta_scale("--lora-rank 32 --lora-alpha 8", 32, 8.0 / 32);
    assert_delta_scale("--lora-rank 4 --lora-alpha 0", 4, 1.0);
}

/* Bad combinations and values are refused with the reason, before any file is written.
 * base: a shared file for --lora-base, or NULL; every case but the first has --lora-out. */
static void test_lora_refusals(void **state) {
    (void)state;
    static const struct {
        const char *base, *args, *message;
    } cases[] = {
        {NULL, "--preset tiny --lora-rank 8", "--lora-rank needs --lora-out"},
        {NULL, "--preset tiny --lora-alpha 4", "need --lora-rank"},
        {NULL, "--preset tiny --lora-rank 0", "--lora-rank 0: give 1 to 4096"},
        {NULL, "--preset tiny --lora-rank 8x", "--lora-rank 8x"},
        {NULL, "--preset tiny --lora-rank 8 --lora-type q4_0", "--lora-type q4_0"},
        {NULL, "--preset tiny --lora-rank 8 --lora-alpha -1", "--lora-alpha -1"},
        {NULL, "--preset tiny --lora-rank 8 --lora-targets q,,v", "empty or overlong entry"},
        {NULL, "--preset tiny --lora-rank 8 --lora-targets q,qkv", "'qkv' matches no weight"},
        {NULL, "--preset tiny --lora-rank 8 --lora-rnak 8", "unknown option --lora-rnak"},
        {"models/stories260K.gguf", "-o /tmp/llmm-synth-never.gguf --lora-rank 8", "give no -o"},
        {"lora/README.md", "--lora-rank 8", "not a GGUF"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        temp_files t;
        temp_names(&t);
        char base[1024] = "", args[3072];
        if (cases[i].base) {
            char path[900];
            snprintf(base, sizeof base, "--lora-base '%s' ", shared_path(path, sizeof path, cases[i].base));
        }
        snprintf(args, sizeof args, "%s%s", base, cases[i].args);
        if (i > 0) snprintf(args + strlen(args), sizeof args - strlen(args), " --lora-out '%s'", t.adapter);
        const int rc = run_tool(&t, args);
        if (!(rc > 0)) fail_msg("'%s' exited with %d", args, rc);
        if (!log_contains(&t, cases[i].message)) fail_msg("'%s': no '%s'", args, cases[i].message);
        assert_int_equal(access(t.adapter, F_OK), -1);
        temp_remove(&t);
    }
}

int main(int argc, char **argv) {
    (void)argc;
    locate_tool(argv[0]);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_qwen2_vocab),
        cmocka_unit_test(test_llama3_preset_with_llama_bpe_vocab),
        cmocka_unit_test(test_gemma3_preset),
        cmocka_unit_test(test_smollm3_preset),
        cmocka_unit_test(test_lfm2_preset),
        cmocka_unit_test(test_qwen35_preset),
        cmocka_unit_test(test_qwen35_preset_matches_converter_layout),
        cmocka_unit_test(test_spm_vocab_f32),
        cmocka_unit_test(test_missing_vocab_file),
        cmocka_unit_test(test_vocab_file_without_tokens),
        cmocka_unit_test(test_vocab_file_not_gguf),
        cmocka_unit_test(test_synthetic_vocab),
        cmocka_unit_test(test_quantized_synthetic_logits),
        cmocka_unit_test(test_lora_reference_layout),
        cmocka_unit_test(test_lora_base_file_has_reference_header),
        cmocka_unit_test(test_lora_for_synth_model),
        cmocka_unit_test(test_lora_qwen2_shape_types),
        cmocka_unit_test(test_lora_fused_layout),
        cmocka_unit_test(test_lora_delta_scale),
        cmocka_unit_test(test_lora_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
