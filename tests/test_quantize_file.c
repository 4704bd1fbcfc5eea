/* Whole-model quantization (lib/offline/quantize_file.c, llmmini-quantize): which weight type
 * each recipe gives each tensor, and its fallbacks where a type does not fit a row; the
 * converted file against the reference engine's encoding of the same model; and stories260K
 * quantized to each type and recipe, run greedy. (The formats themselves: test_weight_formats.c.)
 *
 * Tolerances: a quantized stories260K must agree with the F32 run for at least 16 leading
 * greedy tokens. stories260K's rows (64, 172) cannot hold 256-blocks, so the K-quants and
 * IQ4_XS are also run on the same model embedded in 256-wide matrices (zero padding, exact in
 * F32; see pad_stories). */
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

#include "format/gguf.h"
#include "format/quant.h"
#include "llmmini.h"
#include "offline/quantize_file.h"
#include "support/fixtures.h"
#include "support/gguf_builder.h"
#include "support/quant_temp.h"
#include "support/shared_data.h"

#define MAX_IDS 128

/* ================================================================== recipes */

/* A llama-shaped file with 8 layers of 256-wide weights (2 rows each: only names and row
 * lengths matter to the recipes), as a gguf_file in memory. tied: no output.weight. */
static gguf_file *open_plan_model(gguf_builder *b, int tied, int fused_qkv) {
    static const char *const per_layer[] = {"attn_norm", "attn_q", "attn_k", "attn_v", "attn_output",
                                            "ffn_norm", "ffn_gate", "ffn_up", "ffn_down"};
    const int n_layers = 8;
    const uint64_t n_tensors = 3 + (uint64_t)n_layers * ARRAY_LEN(per_layer) - (tied ? 1 : 0);
    gb_init(b);
    gb_header(b, 3, n_tensors, 1);
    gb_kv_str(b, "general.architecture", "llama");
    uint64_t off = 0;
    const uint64_t mat[2] = {256, 2}, vec[1] = {256}, down[2] = {512, 2};
    gb_tensor_info(b, "token_embd.weight", 2, mat, LLMM_TYPE_F32, off);
    gb_tensor_info(b, "output_norm.weight", 1, vec, LLMM_TYPE_F32, off + 2048);
    off += 3072;
    if (!tied) {
        gb_tensor_info(b, "output.weight", 2, mat, LLMM_TYPE_F32, off);
        off += 2048;
    }
    for (int l = 0; l < n_layers; l++)
        for (size_t k = 0; k < ARRAY_LEN(per_layer); k++) {
            char name[64];
            const char *suffix = fused_qkv && k == 1 ? "attn_qkv" : per_layer[k];
            snprintf(name, sizeof name, "blk.%d.%s.weight", l, suffix);
            const int is_vec = strstr(suffix, "norm") != NULL, is_down = !strcmp(suffix, "ffn_down");
            gb_tensor_info(b, name, is_vec ? 1 : 2, is_vec ? vec : is_down ? down : mat, LLMM_TYPE_F32, off);
            off += is_vec ? 1024 : is_down ? 4096 : 2048;
        }
    gb_pad_to(b, 32);
    gb_fill(b, 0, (size_t)off);
    assert_true(gb_finish(b));
    gguf_file *f = NULL;
    llmm_diag d;
    if (llmm__gguf_open_memory(b->bytes, b->len, NULL, &f, &d)) fail_msg("plan model: %s", d.msg);
    return f;
}

static uint32_t planned(const gguf_file *f, const char *recipe, const char *name) {
    const gguf_tensor *t = llmm__gguf_find_tensor(f, name);
    assert_non_null(t);
    const llmm_quant_recipe *r = llmm__quant_recipe_find(recipe);
    assert_non_null(r);
    return llmm__quant_choose(r, f, t).type;
}

/* The reference's use_more_bits with 8 layers: layers 0 and 7 (first and last eighth) and
 * 3, 6 ((i - 1) % 3 == 2) get Q6_K attn_v and ffn_down in q4_k_m and q5_k_m. */
static void test_recipe_mixes(void **state) {
    (void)state;
    gguf_builder b;
    gguf_file *f = open_plan_model(&b, 0, 0);
    const int more_bits[8] = {1, 0, 0, 1, 0, 0, 1, 1};
    const char *const mixes[] = {"q4_k_m", "q5_k_m"};
    const uint32_t base[] = {LLMM_TYPE_Q4_K, LLMM_TYPE_Q5_K};
    for (size_t m = 0; m < 2; m++) {
        for (int l = 0; l < 8; l++) {
            char v[64], down[64], q[64], norm[64];
            snprintf(v, sizeof v, "blk.%d.attn_v.weight", l);
            snprintf(down, sizeof down, "blk.%d.ffn_down.weight", l);
            snprintf(q, sizeof q, "blk.%d.attn_q.weight", l);
            snprintf(norm, sizeof norm, "blk.%d.ffn_norm.weight", l);
            const uint32_t want = more_bits[l] ? LLMM_TYPE_Q6_K : base[m];
            assert_int_equal(planned(f, mixes[m], v), want);
            assert_int_equal(planned(f, mixes[m], down), want);
            assert_int_equal(planned(f, mixes[m], q), base[m]);
            assert_int_equal(planned(f, mixes[m], norm), LLMM_TYPE_F32);
        }
        assert_int_equal(planned(f, mixes[m], "output.weight"), LLMM_TYPE_Q6_K);
        assert_int_equal(planned(f, mixes[m], "token_embd.weight"), base[m]);
    }
    /* pure recipes: every weight the same type */
    assert_int_equal(planned(f, "q4_k", "output.weight"), LLMM_TYPE_Q4_K);
    assert_int_equal(planned(f, "q2_k", "blk.0.attn_v.weight"), LLMM_TYPE_Q2_K);
    assert_int_equal(planned(f, "f16", "blk.7.ffn_down.weight"), LLMM_TYPE_F16);
    llmm__gguf_close(f);
    gb_free(&b);

    f = open_plan_model(&b, 1, 1); /* tied embeddings, fused qkv */
    assert_int_equal(planned(f, "q4_k_m", "token_embd.weight"), LLMM_TYPE_Q6_K);
    assert_int_equal(planned(f, "q4_k_m", "blk.2.attn_qkv.weight"), LLMM_TYPE_Q5_K);
    assert_int_equal(planned(f, "q5_k_m", "blk.2.attn_qkv.weight"), LLMM_TYPE_Q6_K);
    llmm__gguf_close(f);
    gb_free(&b);
}

static gguf_file *open_shared_model(const char *rel) {
    char path[1024];
    gguf_file *f = NULL;
    llmm_diag d;
    if (llmm__gguf_open_file(shared_path(path, sizeof path, rel), 1, NULL, &f, &d)) return NULL;
    return f;
}

/* stories260K: rows of 64 fall back Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0, Q2_K/Q3_K ->
 * Q4_0, IQ4_XS -> IQ4_NL; rows of 172 fit no block and become F16. */
static void test_recipe_fallbacks(void **state) {
    (void)state;
    gguf_file *f = open_shared_model("models/stories260K.gguf");
    if (!f) skip();
    const struct {
        const char *recipe, *tensor;
        uint32_t wanted, type;
    } rows[] = {
        {"q4_k", "blk.0.attn_q.weight", LLMM_TYPE_Q4_K, LLMM_TYPE_Q5_0},
        {"q5_k", "blk.0.attn_q.weight", LLMM_TYPE_Q5_K, LLMM_TYPE_Q5_1},
        {"q6_k", "blk.0.attn_q.weight", LLMM_TYPE_Q6_K, LLMM_TYPE_Q8_0},
        {"q2_k", "blk.0.attn_q.weight", LLMM_TYPE_Q2_K, LLMM_TYPE_Q4_0},
        {"q3_k", "token_embd.weight", LLMM_TYPE_Q3_K, LLMM_TYPE_Q4_0},
        {"q4_k", "blk.0.ffn_down.weight", LLMM_TYPE_Q4_K, LLMM_TYPE_F16},
        {"q4_0", "blk.0.ffn_down.weight", LLMM_TYPE_Q4_0, LLMM_TYPE_F16},
        {"q4_k_m", "blk.2.attn_v.weight", LLMM_TYPE_Q6_K, LLMM_TYPE_Q8_0},
        {"q4_k_m", "blk.1.attn_v.weight", LLMM_TYPE_Q4_K, LLMM_TYPE_Q5_0},
        {"q4_k_m", "output.weight", LLMM_TYPE_Q8_0, LLMM_TYPE_Q8_0}, /* 64 % 256: the reference's Q8_0 */
        {"q8_0", "output_norm.weight", LLMM_TYPE_F32, LLMM_TYPE_F32},
        {"f16", "blk.0.ffn_down.weight", LLMM_TYPE_F16, LLMM_TYPE_F16},
        {"iq4_xs", "blk.0.attn_q.weight", LLMM_TYPE_IQ4_XS, LLMM_TYPE_IQ4_NL},
        {"iq4_xs", "blk.0.ffn_down.weight", LLMM_TYPE_IQ4_XS, LLMM_TYPE_F16},
        {"iq4_nl", "blk.0.ffn_down.weight", LLMM_TYPE_IQ4_NL, LLMM_TYPE_F16},
    };
    for (size_t i = 0; i < ARRAY_LEN(rows); i++) {
        const llmm_quant_choice c =
            llmm__quant_choose(llmm__quant_recipe_find(rows[i].recipe), f, llmm__gguf_find_tensor(f, rows[i].tensor));
        if (c.wanted != rows[i].wanted || c.type != rows[i].type || c.fell_back != (c.type != c.wanted))
            fail_msg("%s %s: wanted %u type %u fell_back %d", rows[i].recipe, rows[i].tensor, c.wanted, c.type,
                     c.fell_back);
    }
    llmm__gguf_close(f);
}

/* The recurrent layers' convolution taps stay as they are (F32, which the loader requires) under
 * every recipe: lfm2's shortconv.conv and qwen35's ssm_conv1d, 2-D weights of 3 and 4 taps. */
static void test_convolution_taps_kept(void **state) {
    (void)state;
    static const char *const files[] = {"golden/arch/tiny-lfm2.gguf", "golden/arch/tiny-qwen35.gguf"};
    static const char *const taps[] = {"blk.0.shortconv.conv.weight", "blk.0.ssm_conv1d.weight"};
    static const char *const recipes[] = {"q4_k_m", "q4_0", "q8_0", "f16"};
    for (size_t i = 0; i < ARRAY_LEN(files); i++) {
        gguf_file *f = open_shared_model(files[i]);
        if (!f) skip();
        const gguf_tensor *t = llmm__gguf_find_tensor(f, taps[i]);
        assert_non_null(t);
        assert_int_equal(t->type, LLMM_TYPE_F32);
        for (size_t r = 0; r < ARRAY_LEN(recipes); r++) {
            const llmm_quant_choice c = llmm__quant_choose(llmm__quant_recipe_find(recipes[r]), f, t);
            if (c.type != LLMM_TYPE_F32 || c.fell_back) fail_msg("%s %s: type %u", recipes[r], taps[i], c.type);
        }
        llmm__gguf_close(f);
    }
}

/* ================================================================== whole models */

/* Greedy continuation of "Once upon a time"; returns the number of tokens. */
static size_t greedy(const char *model_path, llmm_token *out, size_t n_predict) {
    llmm_model *m = load_model(model_path, NULL);
    llmm_context_params cp;
    llmm_context_params_default(&cp, sizeof cp);
    cp.n_ctx = 256;
    cp.n_threads = 2;
    llmm_context *c = make_context(m, &cp);
    const size_t n = generate_greedy(c, "Once upon a time", out, n_predict, NULL);
    llmm_context_free(c);
    llmm_model_free(m);
    return n;
}

static size_t leading_agreement(const llmm_token *a, size_t na, const llmm_token *b, size_t nb) {
    size_t k = 0;
    while (k < na && k < nb && a[k] == b[k]) k++;
    return k;
}

typedef struct agreement_case {
    const char *recipe;
    size_t required; /* leading tokens that must agree with F32; 0: reported only */
} agreement_case;

static void check_agreement(const gguf_file *src, const char *src_path, const agreement_case *cases, size_t n_cases,
                            size_t n_predict, const char *label) {
    llmm_token ref[MAX_IDS], got[MAX_IDS];
    const size_t n_ref = greedy(src_path, ref, n_predict);
    assert_true(n_ref > 16);
    for (size_t i = 0; i < n_cases; i++) {
        char path[64];
        quantize_to_temp(src, cases[i].recipe, path, sizeof path);
        const size_t n = greedy(path, got, n_predict);
        unlink(path);
        const size_t agree = leading_agreement(ref, n_ref, got, n);
        print_message("%s %-7s greedy agreement with F32: %2zu/%zu leading tokens%s\n", label, cases[i].recipe, agree,
                      n_ref, cases[i].required ? " (required >= 16)" : "");
        if (agree < cases[i].required) fail_msg("%s %s: only %zu leading tokens agree", label, cases[i].recipe, agree);
    }
}

/* Every type and recipe: the bar (16 leading tokens). The K-quants fall back to
 * 32-blocks on stories260K's 64-wide rows, as the reference does, and IQ4_XS to IQ4_NL (so
 * both convert every matrix alike; they agree for exactly 16 tokens, scalar, AVX2, AVX-512). */
static const agreement_case k_stories_cases[] = {
    {"f16", 16},  {"bf16", 16}, {"q8_0", 16}, {"q4_0", 16}, {"q4_1", 16},   {"q5_0", 16},   {"q5_1", 16},
    {"q2_k", 16}, {"q3_k", 16}, {"q4_k", 16}, {"q5_k", 16}, {"q6_k", 16}, {"q4_k_m", 16}, {"q5_k_m", 16},
    {"iq4_nl", 16}, {"iq4_xs", 16},
};

static void test_stories_greedy_agreement(void **state) {
    (void)state;
    char path[1024];
    shared_path(path, sizeof path, "models/stories260K.gguf");
    gguf_file *f = open_shared_model("models/stories260K.gguf");
    if (!f) skip();
    check_agreement(f, path, k_stories_cases, ARRAY_LEN(k_stories_cases), 64, "stories260K");
    llmm__gguf_close(f);
}

/* The reference's own q8_0/q4_0 conversions of stories260K (shared/models): every tensor they
 * quantized must come out of llmmini byte for byte, the reference encoding. */
static void compare_with_reference_file(const gguf_file *src, const char *recipe, const char *ref_rel) {
    gguf_file *ref = open_shared_model(ref_rel);
    if (!ref) return;
    char path[64];
    quantize_to_temp(src, recipe, path, sizeof path);
    gguf_file *ours = NULL;
    llmm_diag d;
    if (llmm__gguf_open_file(path, 1, NULL, &ours, &d)) fail_msg("reopen: %s", d.msg);
    size_t compared = 0;
    for (uint64_t i = 0; i < ref->n_tensors; i++) {
        const gguf_tensor *r = &ref->tensors[i];
        char name[GGUF_MAX_NAME];
        snprintf(name, sizeof name, "%.*s", (int)r->name.len, r->name.ptr);
        const gguf_tensor *o = llmm__gguf_find_tensor(ours, name);
        assert_non_null(o);
        if (r->type != o->type || r->type == LLMM_TYPE_F32) continue;
        assert_int_equal(r->n_bytes, o->n_bytes);
        if (memcmp(r->data, o->data, (size_t)r->n_bytes))
            fail_msg("%s: tensor %s differs from the reference's", recipe, name);
        compared++;
    }
    print_message("%s: %zu quantized tensors byte-identical to %s\n", recipe, compared, ref_rel);
    assert_true(compared >= 30); /* all but the F32-kept ffn_down of 5 layers */
    llmm__gguf_close(ours);
    unlink(path);
    llmm__gguf_close(ref);
}

static void test_reference_encoding(void **state) {
    (void)state;
    gguf_file *f = open_shared_model("models/stories260K.gguf");
    if (!f) skip();
    compare_with_reference_file(f, "q8_0", "models/stories260K-q8_0.gguf");
    compare_with_reference_file(f, "q4_0", "models/stories260K-q4_0.gguf");
    llmm__gguf_close(f);
}

/* ------------------------------------------------------------------ stories260K, 256 wide
 * The same network embedded in 256-wide matrices so every K-quant applies without fallback:
 * n_embd 64 -> 256 and n_ff 172 -> 256 with zero rows and columns; heads 8 -> 32 dims each
 * (the first 8 real, rope.dimension_count stays 8 so the rotation is unchanged). Norm
 * weights are halved and eps quartered (the mean of squares over 256 is a quarter of that
 * over 64), q is doubled (1/sqrt(32) vs 1/sqrt(8)): all exact scalings, so the F32 model
 * computes what stories260K computes. */

typedef enum dim_kind { DIM_EMBD, DIM_Q, DIM_KV, DIM_FF, DIM_SAME } dim_kind;

static int64_t padded_size(dim_kind k, int64_t old) {
    switch (k) {
    case DIM_EMBD: return 256;
    case DIM_Q: return 8 * 32;
    case DIM_KV: return 4 * 32;
    case DIM_FF: return 256;
    default: return old;
    }
}

/* The old index a new index comes from, or -1 for padding. */
static int64_t padded_source(dim_kind k, int64_t i) {
    switch (k) {
    case DIM_EMBD: return i < 64 ? i : -1;
    case DIM_Q:
    case DIM_KV: return i % 32 < 8 ? (i / 32) * 8 + i % 32 : -1;
    case DIM_FF: return i < 172 ? i : -1;
    default: return i;
    }
}

typedef struct pad_rule {
    const char *suffix;
    dim_kind in, out; /* ne0, ne1 */
    float scale;
} pad_rule;

static const pad_rule k_pad_rules[] = {
    {"attn_output.weight", DIM_Q, DIM_EMBD, 1},    {"token_embd.weight", DIM_EMBD, DIM_SAME, 1},
    {"output.weight", DIM_EMBD, DIM_SAME, 1},      {"_norm.weight", DIM_EMBD, DIM_SAME, 0.5f},
    {"attn_q.weight", DIM_EMBD, DIM_Q, 2},         {"attn_k.weight", DIM_EMBD, DIM_KV, 1},
    {"attn_v.weight", DIM_EMBD, DIM_KV, 1},        {"ffn_gate.weight", DIM_EMBD, DIM_FF, 1},
    {"ffn_up.weight", DIM_EMBD, DIM_FF, 1},        {"ffn_down.weight", DIM_FF, DIM_EMBD, 1},
};

/* The first rule whose suffix ends the name (attn_output before output). */
static const pad_rule *pad_rule_for(gguf_str name) {
    for (size_t i = 0; i < ARRAY_LEN(k_pad_rules); i++) {
        const size_t n = strlen(k_pad_rules[i].suffix);
        if (name.len >= n && !memcmp(name.ptr + name.len - n, k_pad_rules[i].suffix, n)) return &k_pad_rules[i];
    }
    fail_msg("no padding rule for %.*s", (int)name.len, name.ptr);
    return NULL;
}

static void write_padded_kv(gguf_builder *b, const gguf_kv *kv) {
    static const struct {
        const char *key;
        float value;
    } changed[] = {{"llama.embedding_length", 256}, {"llama.feed_forward_length", 256}};
    for (size_t i = 0; i < ARRAY_LEN(changed); i++)
        if (llmm__gguf_str_eq(kv->key, changed[i].key)) {
            gb_kv_u32(b, changed[i].key, (uint32_t)changed[i].value);
            return;
        }
    if (llmm__gguf_str_eq(kv->key, "llama.attention.layer_norm_rms_epsilon")) {
        gb_kv_f32(b, "llama.attention.layer_norm_rms_epsilon", (float)kv->v.f64 / 4);
        return;
    }
    size_t value_bytes = kv->type == GGUF_TYPE_STRING ? 8 + (size_t)kv->v.str.len
                         : kv->type == GGUF_TYPE_ARRAY ? 12 + (size_t)kv->v.arr.bytes
                                                       : llmm__gguf_scalar_size(kv->type);
    gb_bytes(b, (const uint8_t *)kv->key.ptr - 8, 8 + (size_t)kv->key.len + 4 + value_bytes);
}

static void write_padded_data(gguf_builder *b, const gguf_tensor *t, const pad_rule *r, int64_t ne0, int64_t ne1) {
    const float *src = t->data;
    for (int64_t row = 0; row < ne1; row++)
        for (int64_t col = 0; col < ne0; col++) {
            const int64_t sr = padded_source(r->out, row), sc = padded_source(r->in, col);
            gb_f32(b, sr < 0 || sc < 0 ? 0.0f : src[sr * t->ne[0] + sc] * r->scale);
        }
    gb_pad_to(b, 32);
}

static gguf_file *pad_stories(const gguf_file *src, gguf_builder *b) {
    gb_init(b);
    gb_header(b, 3, src->n_tensors, src->n_kv);
    for (uint64_t i = 0; i < src->n_kv; i++) write_padded_kv(b, &src->kv[i]);
    uint64_t off = 0;
    for (uint64_t i = 0; i < src->n_tensors; i++) {
        const gguf_tensor *t = &src->tensors[i];
        const pad_rule *r = pad_rule_for(t->name);
        const uint64_t ne[2] = {(uint64_t)padded_size(r->in, t->ne[0]), (uint64_t)padded_size(r->out, t->ne[1])};
        char name[GGUF_MAX_NAME];
        snprintf(name, sizeof name, "%.*s", (int)t->name.len, t->name.ptr);
        gb_tensor_info(b, name, t->n_dims, ne, LLMM_TYPE_F32, off);
        off += (ne[0] * ne[1] * 4 + 31) / 32 * 32;
    }
    gb_pad_to(b, 32);
    for (uint64_t i = 0; i < src->n_tensors; i++) {
        const gguf_tensor *t = &src->tensors[i];
        const pad_rule *r = pad_rule_for(t->name);
        write_padded_data(b, t, r, padded_size(r->in, t->ne[0]), padded_size(r->out, t->ne[1]));
    }
    assert_true(gb_finish(b));
    gguf_file *f = NULL;
    llmm_diag d;
    if (llmm__gguf_open_memory(b->bytes, b->len, NULL, &f, &d)) fail_msg("padded model: %s", d.msg);
    return f;
}

static const agreement_case k_padded_cases[] = {
    {"q8_0", 16}, {"q6_k", 16}, {"q5_k", 0}, {"q4_k", 0}, {"q3_k", 0}, {"q2_k", 0}, {"q4_k_m", 0}, {"q5_k_m", 0},
    {"iq4_xs", 16},
};

static void test_padded_stories_greedy_agreement(void **state) {
    (void)state;
    gguf_file *src = open_shared_model("models/stories260K.gguf");
    if (!src) skip();
    char orig_path[1024];
    shared_path(orig_path, sizeof orig_path, "models/stories260K.gguf");
    gguf_builder b;
    gguf_file *padded = pad_stories(src, &b);
    char path[64] = "/tmp/llmm-padded-XXXXXX";
    assert_true(gb_write_temp(&b, path, sizeof path) == 0);
    /* the padded F32 model is the same network */
    llmm_token a[MAX_IDS], p[MAX_IDS];
    const size_t na = greedy(orig_path, a, 64), np = greedy(path, p, 64);
    print_message("stories260K padded to 256: F32 agrees with the original for %zu/%zu tokens\n",
                  leading_agreement(a, na, p, np), na);
    assert_true(leading_agreement(a, na, p, np) >= 32);
    /* 32 tokens: the bar is 16, and the scalar K-quant dots make longer runs slow */
    check_agreement(padded, path, k_padded_cases, ARRAY_LEN(k_padded_cases), 32, "stories260K-256");
    unlink(path);
    llmm__gguf_close(padded);
    gb_free(&b);
    llmm__gguf_close(src);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_recipe_mixes),
        cmocka_unit_test(test_recipe_fallbacks),
        cmocka_unit_test(test_convolution_taps_kept),
        cmocka_unit_test(test_reference_encoding),
        cmocka_unit_test(test_stories_greedy_agreement),
        cmocka_unit_test(test_padded_stories_greedy_agreement),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
