/* LoRA adapters: the math against merged weights, the reference engine's greedy continuations,
 * mixed-adapter batches, hot swaps, hostile files and allocation failures. */
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

#include "support/alloc_hooks.h"
#include "backend/backend.h"
#include "context/context.h"
#include "format/gguf.h"
#include "support/gguf_builder.h"
#include "llmmini.h"
#include "format/quant.h"
#include "support/fixtures.h"
#include "support/rng.h"
#include "support/shared_data.h"

#define R8 "lora/stories260K-lora-r8.gguf"
#define R4F16 "lora/stories260K-lora-r4-attn-f16.gguf"
#define STORIES "models/stories260K.gguf"
#define PHI3 "golden/arch/tiny-phi3.gguf"

static llmm_adapter *load_adapter(const llmm_model *m, const char *rel) {
    char path[1024];
    llmm_adapter *a = NULL;
    assert_int_equal(llmm_adapter_load(m, shared_path(path, sizeof path, rel), &a), LLMM_OK);
    return a;
}

/* A context on backend be (NULL: the default one). */
static llmm_context *make_ctx_on(const llmm_model *m, uint32_t n_seq, const llmm_backend_ops *be) {
    llmm_context_params cp;
    llmm_context_params_default(&cp, sizeof cp);
    cp.n_ctx = 128;
    cp.n_seq_max = n_seq;
    cp.n_threads = 1;
    cp.kv_type = LLMM_KV_F32;
    if (!be) return make_context(m, &cp);
    llmm_context *c = NULL;
    assert_int_equal(llmm__context_create_on(m, &cp, be, &c), LLMM_OK);
    return c;
}

static llmm_context *make_ctx(const llmm_model *m, uint32_t n_seq) { return make_ctx_on(m, n_seq, NULL); }

/* ---------------------------------------------------------------- crafting adapter files */

typedef struct tensor_spec {
    char name[96];
    uint32_t type;
    uint64_t ne0, ne1;
    void *data; /* malloc'd */
    size_t bytes;
} tensor_spec;

typedef struct file_spec {
    const char *general_type, *adapter_type, *arch; /* NULL: key left out */
    int alpha_kind;                                 /* 0: none, 1: f32, 2: a string */
    float alpha;
    size_t n;
    tensor_spec t[64];
} file_spec;

/* The adapters' values: seeded in main, and again by the tests whose values matter. */
static test_rng rng;

/* A tensor of random (or zero) values in type (F32 or F16, or raw bytes for other types). */
static void add_tensor(file_spec *f, const char *name, uint32_t type, uint64_t ne0, uint64_t ne1, float amp) {
    tensor_spec *t = &f->t[f->n++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->type = type;
    t->ne0 = ne0;
    t->ne1 = ne1;
    size_t rb = llmm__row_bytes(type, ne0);
    if (rb == 0) rb = ne0 * 4; /* a deliberately misfit row: any bytes */
    t->bytes = rb * ne1;
    t->data = calloc(1, t->bytes ? t->bytes : 1);
    assert_non_null(t->data);
    const llmm_type_traits *tt = llmm__type_get(type);
    if (amp == 0.f || !tt || !tt->from_float || llmm__row_bytes(type, ne0) == 0) return;
    float *row = malloc(ne0 * sizeof *row);
    assert_non_null(row);
    for (uint64_t r = 0; r < ne1; r++) {
        for (uint64_t i = 0; i < ne0; i++) row[i] = amp * rng_float(&rng, -0.5f, 0.5f);
        tt->from_float(row, (uint8_t *)t->data + r * rb, ne0);
    }
    free(row);
}

/* The A and B of one base tensor: [n_in, rank] and [rank, n_out] (embd: [rank, n_vocab] and
 * [rank, n_embd], passed as n_in = n_vocab, n_out = n_embd). */
static void add_pair(file_spec *f, const char *base, uint64_t n_in, uint64_t n_out, uint64_t rank, int embd,
                     float amp_b) {
    char name[96];
    snprintf(name, sizeof name, "%s.lora_a", base);
    if (embd) add_tensor(f, name, LLMM_TYPE_F32, rank, n_in, 0.5f);
    else add_tensor(f, name, LLMM_TYPE_F32, n_in, rank, 0.5f);
    snprintf(name, sizeof name, "%s.lora_b", base);
    add_tensor(f, name, LLMM_TYPE_F32, rank, n_out, amp_b);
}

/* add_pair in another type for both halves */
static void add_pair_typed(file_spec *f, const char *base, uint64_t n_in, uint64_t n_out, uint64_t rank, uint32_t type) {
    char name[96];
    snprintf(name, sizeof name, "%s.lora_a", base);
    add_tensor(f, name, type, n_in, rank, 0.5f);
    snprintf(name, sizeof name, "%s.lora_b", base);
    add_tensor(f, name, type, rank, n_out, 0.5f);
}

static void spec_init(file_spec *f, const char *arch, float alpha) {
    memset(f, 0, sizeof *f);
    f->general_type = "adapter";
    f->adapter_type = "lora";
    f->arch = arch;
    f->alpha_kind = 1;
    f->alpha = alpha;
}

static void spec_free(file_spec *f) {
    for (size_t i = 0; i < f->n; i++) free(f->t[i].data);
    f->n = 0;
}

static void spec_write(const file_spec *f, gguf_builder *b) {
    gb_init(b);
    const uint64_t n_kv = (f->general_type != NULL) + (f->adapter_type != NULL) + (f->arch != NULL) + (f->alpha_kind != 0);
    gb_header(b, 3, f->n, n_kv);
    if (f->general_type) gb_kv_str(b, "general.type", f->general_type);
    if (f->adapter_type) gb_kv_str(b, "adapter.type", f->adapter_type);
    if (f->arch) gb_kv_str(b, "general.architecture", f->arch);
    if (f->alpha_kind == 1) gb_kv_f32(b, "adapter.lora.alpha", f->alpha);
    if (f->alpha_kind == 2) gb_kv_str(b, "adapter.lora.alpha", "sixteen");
    uint64_t off = 0;
    for (size_t i = 0; i < f->n; i++) {
        const uint64_t ne[2] = {f->t[i].ne0, f->t[i].ne1};
        gb_tensor_info(b, f->t[i].name, 2, ne, f->t[i].type, off);
        off += (f->t[i].bytes + 31) / 32 * 32;
    }
    gb_pad_to(b, 32);
    for (size_t i = 0; i < f->n; i++) {
        gb_bytes(b, f->t[i].data, f->t[i].bytes);
        gb_pad_to(b, 32);
    }
    assert_true(gb_finish(b));
}

static llmm_status load_spec(const llmm_model *m, const file_spec *f, llmm_adapter **out) {
    gguf_builder b;
    spec_write(f, &b);
    const llmm_status st = llmm_adapter_load_memory(m, b.bytes, b.len, out);
    gb_free(&b);
    return st;
}

/* ---------------------------------------------------------------- merged reference models */

/* Read a whole adapter (a shared file or a crafted image) as floats and fold scale * B A into
 * the F32 weights of the model image. */
static void merge_adapter(uint8_t *model_bytes, const gguf_file *mf, const void *ad_bytes, size_t ad_len, float user_scale) {
    gguf_file *af = NULL;
    llmm_diag d;
    assert_int_equal(llmm__gguf_open_memory(ad_bytes, ad_len, NULL, &af, &d), LLMM_OK);
    double alpha = 0;
    const gguf_kv *kv = llmm__gguf_find_kv(af, "adapter.lora.alpha");
    if (kv) assert_true(llmm__gguf_kv_as_float(kv, &alpha));
    for (uint64_t i = 0; i < af->n_tensors; i++) {
        const gguf_tensor *ta = &af->tensors[i];
        if (ta->name.len < 7 || memcmp(ta->name.ptr + ta->name.len - 7, ".lora_a", 7) != 0) continue;
        char base[96], nb[112];
        snprintf(base, sizeof base, "%.*s", (int)ta->name.len - 7, ta->name.ptr);
        snprintf(nb, sizeof nb, "%s.lora_b", base);
        const gguf_tensor *tb = llmm__gguf_find_tensor(af, nb), *bt = llmm__gguf_find_tensor(mf, base);
        assert_non_null(tb);
        assert_non_null(bt);
        assert_int_equal(bt->type, LLMM_TYPE_F32);
        const int embd = strcmp(base, "token_embd.weight") == 0;
        const size_t na = (size_t)(ta->ne[0] * ta->ne[1]), nbv = (size_t)(tb->ne[0] * tb->ne[1]);
        float *A = malloc(na * sizeof *A), *B = malloc(nbv * sizeof *B);
        assert_non_null(A);
        assert_non_null(B);
        llmm__type_get(ta->type)->dequant_row(ta->data, A, na);
        llmm__type_get(tb->type)->dequant_row(tb->data, B, nbv);
        const size_t rank = (size_t)tb->ne[0];
        const float scale = alpha != 0 ? user_scale * (float)alpha / (float)rank : user_scale;
        float *W = (float *)(model_bytes + ((const uint8_t *)bt->data - mf->bytes));
        const size_t n_in = (size_t)bt->ne[0], n_rows = (size_t)bt->ne[1];
        for (size_t o = 0; o < n_rows; o++)
            for (size_t c = 0; c < n_in; c++) {
                float acc = 0;
                for (size_t r = 0; r < rank; r++)
                    acc += embd ? B[c * rank + r] * A[o * rank + r] : B[o * rank + r] * A[r * n_in + c];
                W[o * n_in + c] += scale * acc;
            }
        free(A);
        free(B);
    }
    llmm__gguf_close(af);
}

typedef struct merge_input {
    const void *bytes;
    size_t len;
    float scale;
} merge_input;

/* The model at rel with the adapters merged into its weights, as a temporary file. */
static llmm_model *merged_model(const char *rel, const merge_input *in, size_t n, char *tmp) {
    char path[1024];
    size_t len;
    uint8_t *bytes = (uint8_t *)read_whole_file(shared_path(path, sizeof path, rel), &len);
    assert_non_null(bytes);
    gguf_file *mf = NULL;
    llmm_diag d;
    uint8_t *orig = malloc(len);
    assert_non_null(orig);
    memcpy(orig, bytes, len);
    assert_int_equal(llmm__gguf_open_memory(orig, len, NULL, &mf, &d), LLMM_OK);
    for (size_t i = 0; i < n; i++) merge_adapter(bytes, mf, in[i].bytes, in[i].len, in[i].scale);
    llmm__gguf_close(mf);
    free(orig);
    strcpy(tmp, "/tmp/llmm-lora-XXXXXX");
    const int fd = mkstemp(tmp);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, bytes, len), (ssize_t)len);
    close(fd);
    free(bytes);
    return load_model(tmp, NULL);
}

static const char *const PROMPT = "Once upon a time, a little dog";

/* All of a prompt's logits, for seq 0 of a fresh context with the given adapters. */
static float *prompt_logits(const llmm_model *m, llmm_adapter *const *ads, const float *scales, size_t n_ads,
                            size_t *n_rows, size_t *n_vocab) {
    llmm_context *c = make_ctx(m, 1);
    assert_int_equal(llmm_seq_set_adapters(c, 0, ads, scales, n_ads), LLMM_OK);
    llmm_token ids[64];
    const size_t n = tokenize(m, PROMPT, ids, 64);
    assert_int_equal(llmm_prefill(c, 0, ids, n, LLMM_PREFILL_ALL_LOGITS), LLMM_OK);
    const float *row;
    assert_int_equal(llmm_logits(c, 0, &row, n_vocab), LLMM_OK);
    float *all = malloc(n * *n_vocab * sizeof *all);
    assert_non_null(all);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(llmm_logits(c, i, &row, n_vocab), LLMM_OK);
        memcpy(all + i * *n_vocab, row, *n_vocab * sizeof *all);
    }
    /* one decode step too: the single-row path */
    assert_int_equal(llmm_decode(c, (llmm_seq_id[]){0}, (llmm_token[]){ids[1]}, 1), LLMM_OK);
    all = realloc(all, (n + 1) * *n_vocab * sizeof *all);
    assert_non_null(all);
    assert_int_equal(llmm_logits(c, 0, &row, n_vocab), LLMM_OK);
    memcpy(all + n * *n_vocab, row, *n_vocab * sizeof *all);
    *n_rows = n + 1;
    llmm_context_free(c);
    return all;
}

/* Largest |a - b|, NaN when a difference is NaN. A branch, not fmax: aarch64 gcc 12's
 * vectorizer fails with an internal error on the fmax reduction once inlined with a constant n. */
static double max_diff(const float *a, const float *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        const double d = fabs((double)a[i] - b[i]);
        if (isnan(d)) return d;
        if (d > m) m = d;
    }
    return m;
}

/* Adapted logits against the merged model's, and against the base's (the adapter must matter). */
static void check_against_merged_tol(const llmm_model *m, const char *model_rel, llmm_adapter *const *ads,
                                     const float *scales, size_t n_ads, const merge_input *in, double rel_tol) {
    char tmp[64];
    llmm_model *merged = merged_model(model_rel, in, n_ads, tmp);
    size_t rows, nv, rows2, nv2, rows3, nv3;
    float *got = prompt_logits(m, ads, scales, n_ads, &rows, &nv);
    float *want = prompt_logits(merged, NULL, NULL, 0, &rows2, &nv2);
    float *base = prompt_logits(m, NULL, NULL, 0, &rows3, &nv3);
    assert_int_equal(rows, rows2);
    assert_int_equal(nv, nv2);
    const double diff = max_diff(got, want, rows * nv), moved = max_diff(got, base, rows * nv);
    print_message("%s: max |adapted - merged| %.2e, max |adapted - base| %.2e\n", model_rel, diff, moved);
    /* rel_tol 0: F32 math, within 1e-4; else the backend's operand rounding for the type
     * (activations as Q8_0 or BF16, as the reference engine does) within a share of the effect */
    assert_true(rel_tol == 0 ? diff <= 1e-4 : diff <= rel_tol * moved);
    assert_true(moved > 1e-2);
    free(got);
    free(want);
    free(base);
    llmm_model_free(merged);
    unlink(tmp);
}

static void check_against_merged(const llmm_model *m, const char *model_rel, llmm_adapter *const *ads,
                                 const float *scales, size_t n_ads, const merge_input *in) {
    check_against_merged_tol(m, model_rel, ads, scales, n_ads, in, 0);
}

/* ---------------------------------------------------------------- tests */

static void test_info(void **state) {
    (void)state;
    llmm_model *m = load_model(STORIES, NULL);
    llmm_adapter *a = load_adapter(m, R8), *b = load_adapter(m, R4F16);
    llmm_adapter_info ia = {.size = sizeof ia}, ib = {.size = sizeof ib};
    assert_int_equal(llmm_adapter_get_info(a, &ia), LLMM_OK);
    assert_int_equal(llmm_adapter_get_info(b, &ib), LLMM_OK);
    assert_int_equal(ia.rank, 8);
    assert_true(ia.alpha == 16.f);
    assert_int_equal(ia.n_tensors, 5 * 7);
    assert_int_equal(ib.rank, 4);
    assert_true(ib.alpha == 0.f);
    assert_int_equal(ib.n_tensors, 5 * 4);
    /* per layer, F16: A and B of q and o 2 x 512 bytes each, of k and v 512 + 256; and B
     * transposed (the CPU's operand) once more: 512, 512, 256, 256 */
    assert_int_equal(ib.bytes, 5 * (2 * 1024 + 2 * 768) + 5 * (2 * 512 + 2 * 256));
    assert_true(ia.fingerprint != ib.fingerprint);
    llmm_adapter_info small = {.size = 4};
    assert_int_equal(llmm_adapter_get_info(a, &small), LLMM_ERR_INVALID_ARG);
    assert_int_equal(llmm_adapter_get_info(NULL, &ia), LLMM_ERR_INVALID_ARG);
    llmm_adapter_free(a);
    llmm_adapter_free(b);
    llmm_adapter_free(NULL);
    llmm_model_free(m);
}

static void test_merged_stories(void **state) {
    (void)state;
    char path[1024];
    size_t len;
    char *r8 = read_whole_file(shared_path(path, sizeof path, R8), &len);
    assert_non_null(r8);
    llmm_model *m = load_model(STORIES, NULL);
    llmm_adapter *a = NULL;
    assert_int_equal(llmm_adapter_load_memory(m, r8, len, &a), LLMM_OK);
    /* a second adapter on what r8 leaves alone: the output and the embedding table */
    file_spec f;
    rng_seed(&rng, 7);
    spec_init(&f, "llama", 0.f);
    add_pair(&f, "output.weight", 64, 512, 4, 0, 0.5f);
    add_pair(&f, "token_embd.weight", 512, 64, 4, 1, 0.5f);
    add_pair(&f, "blk.2.attn_q.weight", 64, 64, 4, 0, 0.5f);
    gguf_builder b;
    spec_write(&f, &b);
    llmm_adapter *e = NULL;
    assert_int_equal(llmm_adapter_load_memory(m, b.bytes, b.len, &e), LLMM_OK);
    const merge_input one[] = {{r8, len, 0.75f}};
    check_against_merged(m, STORIES, (llmm_adapter *[]){a}, (float[]){0.75f}, 1, one);
    const merge_input two[] = {{r8, len, 1.0f}, {b.bytes, b.len, 0.6f}};
    check_against_merged(m, STORIES, (llmm_adapter *[]){a, e}, (float[]){1.0f, 0.6f}, 2, two);
    llmm_adapter_free(a);
    llmm_adapter_free(e);
    llmm_model_free(m);
    gb_free(&b);
    spec_free(&f);
    free(r8);
}

/* phi3: fused Q/K/V and gate/up tensors, each adapted as one */
static void test_merged_tiny_phi3(void **state) {
    (void)state;
    llmm_model *m = load_model(PHI3, NULL);
    file_spec f;
    rng_seed(&rng, 99);
    spec_init(&f, "phi3", 8.f);
    for (int il = 0; il < 2; il++) {
        char name[64];
        snprintf(name, sizeof name, "blk.%d.attn_qkv.weight", il);
        add_pair(&f, name, 64, 128, 4, 0, 0.5f);
        snprintf(name, sizeof name, "blk.%d.attn_output.weight", il);
        add_pair(&f, name, 64, 64, 4, 0, 0.5f);
        snprintf(name, sizeof name, "blk.%d.ffn_up.weight", il);
        add_pair(&f, name, 64, 320, 4, 0, 0.5f);
        snprintf(name, sizeof name, "blk.%d.ffn_down.weight", il);
        add_pair(&f, name, 160, 64, 4, 0, 0.5f);
    }
    add_pair(&f, "output.weight", 64, 512, 4, 0, 0.5f);
    add_pair(&f, "token_embd.weight", 512, 64, 4, 1, 0.5f);
    gguf_builder b;
    spec_write(&f, &b);
    llmm_adapter *a = NULL;
    assert_int_equal(llmm_adapter_load_memory(m, b.bytes, b.len, &a), LLMM_OK);
    llmm_adapter_info info = {.size = sizeof info};
    assert_int_equal(llmm_adapter_get_info(a, &info), LLMM_OK);
    assert_int_equal(info.n_tensors, 10);
    const merge_input in[] = {{b.bytes, b.len, 0.8f}};
    check_against_merged(m, PHI3, (llmm_adapter *[]){a}, (float[]){0.8f}, 1, in);
    llmm_adapter_free(a);
    llmm_model_free(m);
    gb_free(&b);
    spec_free(&f);
}

/* A zero B, or a scale of 0, leaves the base logits bit for bit. */
static void test_zero_b_and_zero_scale_are_exact(void **state) {
    (void)state;
    llmm_model *m = load_model(STORIES, NULL);
    file_spec f;
    spec_init(&f, "llama", 16.f);
    add_pair(&f, "blk.0.attn_q.weight", 64, 64, 8, 0, 0.f);
    add_pair(&f, "blk.3.ffn_down.weight", 172, 64, 8, 0, 0.f);
    add_pair(&f, "output.weight", 64, 512, 8, 0, 0.f);
    llmm_adapter *zero = NULL, *r8 = load_adapter(m, R8);
    assert_int_equal(load_spec(m, &f, &zero), LLMM_OK);
    size_t rows, nv, rows2, nv2, rows3, nv3;
    float *base = prompt_logits(m, NULL, NULL, 0, &rows, &nv);
    float *z = prompt_logits(m, (llmm_adapter *[]){zero}, NULL, 1, &rows2, &nv2);
    float *s0 = prompt_logits(m, (llmm_adapter *[]){r8}, (float[]){0.f}, 1, &rows3, &nv3);
    assert_memory_equal(base, z, rows * nv * sizeof *base);
    assert_memory_equal(base, s0, rows * nv * sizeof *base);
    free(base);
    free(z);
    free(s0);
    llmm_adapter_free(zero);
    llmm_adapter_free(r8);
    spec_free(&f);
    llmm_model_free(m);
}

/* The reference engine's greedy continuations (lora/golden.tsv), token for token as text. */
#define GOLDEN_NEAR_TIE 0.02f
#define GOLDEN_TOKENS 48

typedef struct golden_outcome {
    int diverged_at; /* -1: the whole continuation is the reference's */
    float margin;    /* there: our best logit minus the second best */
} golden_outcome;

/* Greedy decoding (lowest id on ties, as the sampler) of prompt in seq 0, piece by piece
 * against the reference text (newlines written as \n). */
static golden_outcome greedy_against(const llmm_model *m, llmm_context *c, const char *prompt, const char *want) {
    assert_int_equal(llmm_seq_clear(c, 0), LLMM_OK);
    llmm_token ids[128];
    const size_t n = tokenize(m, prompt, ids, 128);
    assert_int_equal(llmm_prefill(c, 0, ids, n, 0), LLMM_OK);
    const size_t want_len = strlen(want);
    size_t at = 0;
    for (int step = 0; step < GOLDEN_TOKENS; step++) {
        const float *l;
        size_t nv;
        assert_int_equal(llmm_logits(c, 0, &l, &nv), LLMM_OK);
        size_t best = 0, second = 1;
        for (size_t i = 1; i < nv; i++)
            if (l[i] > l[best]) best = i;
        if (best == 1) second = 0;
        for (size_t i = 0; i < nv; i++)
            if (i != best && l[i] > l[second]) second = i;
        char piece[64], esc[128];
        size_t nb = 0, k = 0;
        assert_int_equal(llmm_token_to_piece(m, (llmm_token)best, 0, piece, sizeof piece, &nb), LLMM_OK);
        for (size_t i = 0; i < nb; i++) {
            if (piece[i] == '\n') esc[k++] = '\\', esc[k++] = 'n';
            else esc[k++] = piece[i];
        }
        if (at + k > want_len || memcmp(want + at, esc, k) != 0)
            return (golden_outcome){step, l[best] - l[second]};
        at += k;
        const llmm_seq_id seq = 0;
        const llmm_token t = (llmm_token)best;
        assert_int_equal(llmm_decode(c, &seq, &t, 1), LLMM_OK);
    }
    assert_int_equal(at, want_len);
    return (golden_outcome){-1, 0.f};
}

static void test_reference_goldens(void **state) {
    (void)state;
    char path[1024];
    size_t len;
    char *tsv = read_whole_file(shared_path(path, sizeof path, "lora/golden.tsv"), &len);
    assert_non_null(tsv);
    llmm_model *m = load_model(STORIES, NULL);
    llmm_adapter *r8 = load_adapter(m, R8), *r4 = load_adapter(m, R4F16);
    llmm_context *c = make_ctx(m, 1);
    size_t checked = 0, mismatches = 0;
    char *save = NULL;
    strtok_r(tsv, "\n", &save); /* header */
    for (char *line = strtok_r(NULL, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char *tab1 = strchr(line, '\t'), *tab2 = tab1 ? strchr(tab1 + 1, '\t') : NULL;
        assert_non_null(tab2);
        *tab1 = *tab2 = '\0';
        const char *spec = line, *prompt = tab1 + 1, *want = tab2 + 1;
        llmm_adapter *ads[2];
        float scales[2];
        size_t n = 0;
        if (strcmp(spec, "none") != 0) {
            char buf[256], *s2 = NULL;
            snprintf(buf, sizeof buf, "%s", spec);
            for (char *item = strtok_r(buf, ",", &s2); item; item = strtok_r(NULL, ",", &s2)) {
                char *colon = strrchr(item, ':');
                assert_non_null(colon);
                *colon = '\0';
                ads[n] = strstr(item, "r8") ? r8 : r4;
                scales[n++] = strtof(colon + 1, NULL);
            }
        }
        assert_int_equal(llmm_seq_set_adapters(c, 0, ads, scales, n), LLMM_OK);
        const golden_outcome o = greedy_against(m, c, prompt, want);
        if (o.diverged_at >= 0)
            print_message("adapters %s, prompt '%s': diverges at token %d, where our top two logits are %.4f apart\n",
                          spec, prompt, o.diverged_at, o.margin);
        /* the reference sums in another order: only a near-tie may go the other way */
        assert_true(o.diverged_at < 0 || o.margin < GOLDEN_NEAR_TIE);
        mismatches += o.diverged_at >= 0;
        checked++;
    }
    assert_int_equal(checked, 10);
    print_message("lora goldens: %zu of %zu continuations equal token for token, the rest part at near-ties\n",
                  checked - mismatches, checked);
    llmm_context_free(c);
    llmm_adapter_free(r8);
    llmm_adapter_free(r4);
    llmm_model_free(m);
    free(tsv);
}

/* Logits of n sequences after prefilling each with its own prompt and decoding steps tokens. */
enum { MIX_SEQS = 8, MIX_STEPS = 3 };

static void mixed_setup(llmm_context *c, const llmm_model *m, llmm_adapter *const *ads, size_t n_seq,
                        llmm_seq_id first, size_t count) {
    (void)m;
    for (size_t s = first; s < first + count; s++) {
        llmm_adapter *a = ads[s % n_seq];
        assert_int_equal(llmm_seq_set_adapters(c, (llmm_seq_id)s, a ? &a : NULL, (float[]){1.f - 0.1f * (float)s},
                                               a ? 1 : 0),
                         LLMM_OK);
        const llmm_token prompt[4] = {1, (llmm_token)(10 + s), (llmm_token)(20 + 3 * s), 7};
        assert_int_equal(llmm_prefill(c, (llmm_seq_id)s, prompt, 4, 0), LLMM_OK);
    }
}

/* A third adapter for the mixed batches: an FFN weight, the output matrix and the embedding
 * table (its flipped layout), random with this seed; f keeps its tensors until spec_free. */
static llmm_adapter *load_third(const llmm_model *m, uint64_t seed, file_spec *f) {
    llmm_adapter *third = NULL;
    rng_seed(&rng, seed);
    spec_init(f, "llama", 4.f);
    add_pair(f, "blk.1.ffn_up.weight", 64, 172, 2, 0, 0.5f);
    add_pair(f, "output.weight", 64, 512, 2, 0, 0.5f);
    add_pair(f, "token_embd.weight", 512, 64, 2, 1, 0.5f);
    assert_int_equal(load_spec(m, f, &third), LLMM_OK);
    return third;
}

/* The mixed batch against each sequence decoded alone, and against a backend without
 * lora_delta, which gets the deltas composed from matmul, copy, scale and add. The composed
 * path hands F16 adapter tensors activations rounded to F16 (the matmul's F16 operand),
 * lora_delta keeps them in F32, hence a bound above float noise for it: 1e-3 on logits of
 * magnitude ~10. */
static void test_mixed_batch_equals_alone(void **state) {
    (void)state;
    llmm_model *m = load_model(STORIES, NULL);
    llmm_adapter *r8 = load_adapter(m, R8), *r4 = load_adapter(m, R4F16);
    file_spec f;
    llmm_adapter *third = load_third(m, 3, &f);
    /* seqs 0..7: r8, r4, third, none, r8, r4, third, none (scales differ per sequence) */
    llmm_adapter *const ads[MIX_SEQS] = {r8, r4, third, NULL, r8, r4, third, NULL};
    llmm_backend_ops composed = llmm__cpu_backend;
    composed.lora_delta = NULL;
    llmm_context *together = make_ctx(m, MIX_SEQS), *alone = make_ctx(m, MIX_SEQS);
    llmm_context *comp = make_ctx_on(m, MIX_SEQS, &composed);
    mixed_setup(together, m, ads, MIX_SEQS, 0, MIX_SEQS);
    mixed_setup(alone, m, ads, MIX_SEQS, 0, MIX_SEQS);
    mixed_setup(comp, m, ads, MIX_SEQS, 0, MIX_SEQS);
    llmm_seq_id seqs[MIX_SEQS];
    for (int s = 0; s < MIX_SEQS; s++) seqs[s] = s;
    double worst = 0, worst_composed = 0;
    for (int step = 0; step < MIX_STEPS; step++) {
        llmm_token toks[MIX_SEQS];
        for (int s = 0; s < MIX_SEQS; s++) toks[s] = (llmm_token)(30 + 5 * s + step);
        assert_int_equal(llmm_decode(together, seqs, toks, MIX_SEQS), LLMM_OK);
        assert_int_equal(llmm_decode(comp, seqs, toks, MIX_SEQS), LLMM_OK);
        for (int s = 0; s < MIX_SEQS; s++) {
            const float *lt, *la, *lc;
            size_t nv;
            assert_int_equal(llmm_logits(comp, (size_t)s, &lc, &nv), LLMM_OK);
            assert_int_equal(llmm_logits(together, (size_t)s, &lt, &nv), LLMM_OK);
            float *keep = malloc(nv * sizeof *keep);
            assert_non_null(keep);
            memcpy(keep, lt, nv * sizeof *keep);
            worst_composed = fmax(worst_composed, max_diff(keep, lc, nv));
            assert_int_equal(llmm_decode(alone, &seqs[s], &toks[s], 1), LLMM_OK);
            assert_int_equal(llmm_logits(alone, 0, &la, &nv), LLMM_OK);
            worst = fmax(worst, max_diff(keep, la, nv));
            free(keep);
        }
    }
    print_message("mixed batch: max |together - alone| %.2e, |lora_delta - composed| %.2e\n", worst,
                  worst_composed);
    assert_true(worst <= 1e-5);
    assert_true(worst_composed <= 1e-3);
    llmm_context_free(together);
    llmm_context_free(comp);
    llmm_context_free(alone);
    llmm_adapter_free(r8);
    llmm_adapter_free(r4);
    llmm_adapter_free(third);
    spec_free(&f);
    llmm_model_free(m);
}

/* Seq 1 swaps adapters between decode steps; the other sequences' logits do not move. */
static void test_hot_swap_leaves_others(void **state) {
    (void)state;
    llmm_model *m = load_model(STORIES, NULL);
    llmm_adapter *r8 = load_adapter(m, R8), *r4 = load_adapter(m, R4F16);
    llmm_adapter *const ads[4] = {r8, r4, NULL, r8};
    llmm_context *swap = make_ctx(m, 4), *keep = make_ctx(m, 4);
    mixed_setup(swap, m, ads, 4, 0, 4);
    mixed_setup(keep, m, ads, 4, 0, 4);
    const llmm_seq_id seqs[4] = {0, 1, 2, 3};
    int changed = 0;
    for (int step = 0; step < 4; step++) {
        const llmm_token toks[4] = {40, (llmm_token)(41 + step), 42, 43};
        if (step == 1) assert_int_equal(llmm_seq_set_adapters(swap, 1, (llmm_adapter *[]){r8}, (float[]){2.f}, 1), LLMM_OK);
        if (step == 2) assert_int_equal(llmm_seq_set_adapters(swap, 1, NULL, NULL, 0), LLMM_OK);
        if (step == 3) assert_int_equal(llmm_seq_set_adapters(swap, 1, (llmm_adapter *[]){r4, r8}, (float[]){1.f, 0.5f}, 2), LLMM_OK);
        assert_int_equal(llmm_decode(swap, seqs, toks, 4), LLMM_OK);
        assert_int_equal(llmm_decode(keep, seqs, toks, 4), LLMM_OK);
        for (size_t s = 0; s < 4; s++) {
            const float *a, *b;
            size_t nv;
            assert_int_equal(llmm_logits(swap, s, &a, &nv), LLMM_OK);
            float *ka = malloc(nv * sizeof *ka);
            assert_non_null(ka);
            memcpy(ka, a, nv * sizeof *ka);
            assert_int_equal(llmm_logits(keep, s, &b, &nv), LLMM_OK);
            if (s != 1) assert_memory_equal(ka, b, nv * sizeof *ka);
            else if (step > 0) changed |= memcmp(ka, b, nv * sizeof *ka) != 0;
            free(ka);
        }
    }
    assert_true(changed);
    llmm_adapter *got[2];
    float sc[2];
    size_t n = 0;
    assert_int_equal(llmm_seq_get_adapters(swap, 1, got, sc, 2, &n), LLMM_OK);
    assert_int_equal(n, 2);
    assert_ptr_equal(got[0], r4);
    assert_ptr_equal(got[1], r8);
    assert_true(sc[1] == 0.5f);
    assert_int_equal(llmm_seq_get_adapters(swap, 1, got, sc, 1, &n), LLMM_ERR_BUFFER_TOO_SMALL);
    assert_int_equal(n, 2);
    llmm_context_free(swap);
    llmm_context_free(keep);
    llmm_adapter_free(r8);
    llmm_adapter_free(r4);
    llmm_model_free(m);
}

/* A valid two-pair adapter for stories260K, for the hostile cases to break. */
static void good_spec(file_spec *f) {
    spec_init(f, "llama", 8.f);
    add_pair(f, "blk.0.attn_q.weight", 64, 64, 4, 0, 0.5f);
    add_pair(f, "blk.1.ffn_down.weight", 172, 64, 4, 0, 0.5f);
}

static void expect_refused(const llmm_model *m, file_spec *f, const char *what, const char *msg_part) {
    llmm_adapter *a = (llmm_adapter *)(uintptr_t)1;
    const llmm_status st = load_spec(m, f, &a);
    char err[512];
    llmm_model_last_error(m, err, sizeof err);
    print_message("%-28s -> %s: %s\n", what, llmm_status_str(st), err);
    assert_int_equal(st, LLMM_ERR_BAD_FILE);
    assert_null(a);
    if (msg_part) assert_non_null(strstr(err, msg_part));
    spec_free(f);
}

static void test_hostile_files(void **state) {
    (void)state;
    llmm_model *m = load_model(STORIES, NULL);
    file_spec f;
    int cases = 0;

    good_spec(&f);
    llmm_adapter *ok = NULL;
    assert_int_equal(load_spec(m, &f, &ok), LLMM_OK); /* the base of every case below loads */
    llmm_adapter_free(ok);
    spec_free(&f);

    good_spec(&f), f.general_type = "model", expect_refused(m, &f, "general.type model", "general.type"), cases++;
    good_spec(&f), f.general_type = NULL, expect_refused(m, &f, "no general.type", "general.type"), cases++;
    good_spec(&f), f.adapter_type = "control_vector", expect_refused(m, &f, "adapter.type", "adapter.type"), cases++;
    good_spec(&f), f.arch = "qwen2", expect_refused(m, &f, "other architecture", "qwen2"), cases++;
    good_spec(&f), f.arch = NULL, expect_refused(m, &f, "no architecture", "architecture"), cases++;
    good_spec(&f), f.alpha_kind = 2, expect_refused(m, &f, "alpha a string", "alpha"), cases++;
    good_spec(&f), f.alpha = NAN, expect_refused(m, &f, "alpha NaN", "alpha"), cases++;
    good_spec(&f), f.alpha = INFINITY, expect_refused(m, &f, "alpha inf", "alpha"), cases++;

    good_spec(&f), add_pair(&f, "blk.9.attn_q.weight", 64, 64, 4, 0, 0.5f);
    expect_refused(m, &f, "no such base tensor", "matches no tensor"), cases++;
    good_spec(&f), add_pair(&f, "blk.0.attn_norm.weight", 64, 1, 1, 0, 0.5f);
    expect_refused(m, &f, "not a matmul weight", NULL), cases++;
    good_spec(&f), add_tensor(&f, "blk.2.attn_k.weight.lora_a", LLMM_TYPE_F32, 64, 4, 0.5f);
    expect_refused(m, &f, "missing lora_b", "no lora_b"), cases++;
    good_spec(&f), add_tensor(&f, "blk.2.attn_k.weight.lora_b", LLMM_TYPE_F32, 4, 32, 0.5f);
    expect_refused(m, &f, "missing lora_a", "no lora_a"), cases++;
    good_spec(&f), add_tensor(&f, "blk.2.attn_k.weight", LLMM_TYPE_F32, 64, 32, 0.5f);
    expect_refused(m, &f, "neither a nor b", "neither"), cases++;
    good_spec(&f), add_pair(&f, "blk.2.attn_k.weight", 64, 64, 4, 0, 0.5f); /* B's n_out 64, not 32 */
    expect_refused(m, &f, "B shape", "do not fit"), cases++;
    good_spec(&f), add_pair(&f, "blk.2.attn_k.weight", 48, 32, 4, 0, 0.5f); /* A's n_in 48, not 64 */
    expect_refused(m, &f, "A shape", "do not fit"), cases++;
    good_spec(&f), add_tensor(&f, "blk.2.attn_k.weight.lora_a", LLMM_TYPE_F32, 64, 4, 0.5f);
    add_tensor(&f, "blk.2.attn_k.weight.lora_b", LLMM_TYPE_F32, 8, 32, 0.5f);
    expect_refused(m, &f, "ranks differ", "rank"), cases++;
    good_spec(&f), add_tensor(&f, "blk.2.attn_k.weight.lora_a", LLMM_TYPE_F32, 64, 0, 0.5f);
    add_tensor(&f, "blk.2.attn_k.weight.lora_b", LLMM_TYPE_F32, 0, 32, 0.5f);
    expect_refused(m, &f, "rank 0", NULL), cases++;
    good_spec(&f), add_pair(&f, "blk.2.attn_k.weight", 64, 32, 128, 0, 0.5f);
    expect_refused(m, &f, "rank beyond width", "exceeds"), cases++;
    good_spec(&f), add_tensor(&f, "blk.2.attn_k.weight.lora_a", LLMM_TYPE_Q4_0, 64, 4, 0.f);
    add_tensor(&f, "blk.2.attn_k.weight.lora_b", LLMM_TYPE_F32, 4, 32, 0.5f);
    expect_refused(m, &f, "Q4_0 A", "type"), cases++;
    good_spec(&f), add_tensor(&f, "blk.2.attn_k.weight.lora_a", LLMM_TYPE_F32, 64, 4, 0.5f);
    add_tensor(&f, "blk.2.attn_k.weight.lora_b", LLMM_TYPE_Q8_0, 4, 32, 0.f); /* rows of 4 in 32-blocks */
    expect_refused(m, &f, "Q8_0 B of rank 4", NULL), cases++;
    spec_init(&f, "llama", 8.f), expect_refused(m, &f, "no tensors", "adapts no tensor"), cases++;

    /* bytes that are no GGUF at all, and a truncated adapter */
    llmm_adapter *a = NULL;
    assert_int_equal(llmm_adapter_load_memory(m, "not a gguf file at all", 22, &a), LLMM_ERR_BAD_FILE), cases++;
    good_spec(&f);
    gguf_builder b;
    spec_write(&f, &b);
    assert_int_equal(llmm_adapter_load_memory(m, b.bytes, b.len - 40, &a), LLMM_ERR_BAD_FILE), cases++;
    assert_null(a);
    gb_free(&b);
    spec_free(&f);
    /* a model file is not an adapter */
    char path[1024];
    assert_int_equal(llmm_adapter_load(m, shared_path(path, sizeof path, STORIES), &a), LLMM_ERR_BAD_FILE), cases++;
    assert_int_equal(llmm_adapter_load(m, "/nonexistent/adapter.gguf", &a), LLMM_ERR_IO);
    assert_true(cases >= 15);
    llmm_model_free(m);
}

/* Every allocation of a load failing in turn: an error, and nothing left allocated. */
typedef struct fail_count {
    long allowed;
    size_t allocs, frees;
} fail_count;

static void *fc_alloc(void *user, size_t size) {
    fail_count *f = user;
    if (f->allowed == 0) return NULL;
    if (f->allowed > 0) f->allowed--;
    void *p = NULL;
    if (posix_memalign(&p, 64, size) != 0) return NULL;
    f->allocs++;
    return p;
}

static void fc_free(void *user, void *p) {
    ((fail_count *)user)->frees++;
    free(p);
}

static void test_alloc_failure_leaks_nothing(void **state) {
    (void)state;
    fail_count fc = {.allowed = -1};
    const llmm_allocator al = {fc_alloc, fc_free, &fc};
    llmm_model_params mp;
    llmm_model_params_default(&mp, sizeof mp);
    mp.allocator = &al;
    char path[1024];
    llmm_model *m = load_model(STORIES, &mp);
    size_t len;
    char *bytes = read_whole_file(shared_path(path, sizeof path, R8), &len);
    assert_non_null(bytes);
    int failures = 0;
    for (long k = 0;; k++) {
        const size_t allocs = fc.allocs, frees = fc.frees;
        fc.allowed = k;
        llmm_adapter *a = NULL;
        llmm_status st = (k & 1) ? llmm_adapter_load(m, shared_path(path, sizeof path, R8), &a)
                                 : llmm_adapter_load_memory(m, bytes, len, &a);
        fc.allowed = -1;
        if (st == LLMM_OK) {
            llmm_adapter_free(a);
            assert_int_equal(fc.allocs - allocs, fc.frees - frees);
            if (k > 1) break;
            continue;
        }
        assert_int_equal(st, LLMM_ERR_NO_MEMORY);
        assert_null(a);
        assert_int_equal(fc.allocs - allocs, fc.frees - frees);
        failures++;
    }
    assert_true(failures >= 3);
    /* attaching under failing allocations: an error, the sequence unchanged, nothing leaked */
    llmm_adapter *a = NULL;
    assert_int_equal(llmm_adapter_load_memory(m, bytes, len, &a), LLMM_OK);
    for (long k = 0;; k++) {
        llmm_context *c = make_ctx(m, 2);
        fc.allowed = k;
        llmm_status st = llmm_seq_set_adapters(c, 1, &a, NULL, 1);
        fc.allowed = -1;
        size_t n = 9;
        assert_int_equal(llmm_seq_get_adapters(c, 1, NULL, NULL, 0, &n), st == LLMM_OK ? LLMM_ERR_BUFFER_TOO_SMALL : LLMM_OK);
        assert_int_equal(n, st == LLMM_OK ? 1 : 0);
        llmm_context_free(c);
        if (st == LLMM_OK) break;
        assert_int_equal(st, LLMM_ERR_NO_MEMORY);
    }
    llmm_adapter_free(a);
    free(bytes);
    llmm_model_free(m);
    assert_int_equal(fc.allocs, fc.frees);
}

/* Freeing an attached adapter defers until its last sequence lets go; bad arguments refused. */
static void test_refcount_and_arguments(void **state) {
    (void)state;
    counting_alloc ca = {0};
    const llmm_allocator al = counting_allocator(&ca);
    llmm_model_params mp;
    llmm_model_params_default(&mp, sizeof mp);
    mp.allocator = &al;
    llmm_model *m = load_model(STORIES, &mp), *other = load_model(PHI3, NULL);
    llmm_adapter *a = load_adapter(m, R8), *b = load_adapter(m, R4F16), *foreign = NULL;
    llmm_context *c = make_ctx(m, 3);
    assert_int_equal(llmm_seq_set_adapters(c, 0, &a, NULL, 1), LLMM_OK);
    llmm_seq_id forked;
    const llmm_token prompt[3] = {1, 20, 30};
    assert_int_equal(llmm_prefill(c, 0, prompt, 3, 0), LLMM_OK);
    assert_int_equal(llmm_seq_fork(c, 0, &forked), LLMM_OK); /* the fork runs with a too */
    llmm_adapter *got = NULL;
    size_t n = 0;
    assert_int_equal(llmm_seq_get_adapters(c, forked, &got, NULL, 1, &n), LLMM_OK);
    assert_int_equal(n, 1);
    assert_ptr_equal(got, a);
    const size_t frees_before = ca.frees;
    llmm_adapter_free(a); /* still attached twice: nothing freed */
    assert_int_equal(ca.frees, frees_before);
    assert_int_equal(llmm_decode(c, (llmm_seq_id[]){0, forked}, (llmm_token[]){5, 5}, 2), LLMM_OK);
    assert_int_equal(llmm_seq_set_adapters(c, 0, NULL, NULL, 0), LLMM_OK);
    assert_int_equal(ca.frees, frees_before);
    assert_int_equal(llmm_seq_free(c, forked), LLMM_OK); /* the last holder: now freed */
    assert_true(ca.frees > frees_before);

    /* arguments */
    llmm_adapter *twice[2] = {b, b};
    assert_int_equal(llmm_seq_set_adapters(NULL, 0, &b, NULL, 1), LLMM_ERR_INVALID_ARG);
    assert_int_equal(llmm_seq_set_adapters(c, 3, &b, NULL, 1), LLMM_ERR_INVALID_ARG);
    assert_int_equal(llmm_seq_set_adapters(c, -1, &b, NULL, 1), LLMM_ERR_INVALID_ARG);
    assert_int_equal(llmm_seq_set_adapters(c, 0, NULL, NULL, 1), LLMM_ERR_INVALID_ARG);
    assert_int_equal(llmm_seq_set_adapters(c, 0, twice, NULL, 2), LLMM_ERR_INVALID_ARG);
    assert_int_equal(llmm_seq_set_adapters(c, 0, &b, (float[]){NAN}, 1), LLMM_ERR_INVALID_ARG);
    llmm_adapter *many[LLMM_MAX_SEQ_ADAPTERS + 1] = {0};
    assert_int_equal(llmm_seq_set_adapters(c, 0, many, NULL, LLMM_MAX_SEQ_ADAPTERS + 1), LLMM_ERR_INVALID_ARG);
    llmm_adapter *null_one = NULL;
    assert_int_equal(llmm_seq_set_adapters(c, 0, &null_one, NULL, 1), LLMM_ERR_INVALID_ARG);
    file_spec f;
    spec_init(&f, "phi3", 0.f);
    add_pair(&f, "blk.0.attn_output.weight", 64, 64, 2, 0, 0.5f);
    assert_int_equal(load_spec(other, &f, &foreign), LLMM_OK);
    assert_int_equal(llmm_seq_set_adapters(c, 0, &foreign, NULL, 1), LLMM_ERR_INVALID_ARG);
    assert_non_null(strstr(llmm_context_last_error(c), "another model"));
    assert_int_equal(llmm_seq_get_adapters(c, 0, NULL, NULL, 0, NULL), LLMM_ERR_INVALID_ARG);
    assert_int_equal(llmm_adapter_load(NULL, "x", &a), LLMM_ERR_INVALID_ARG);
    assert_int_equal(llmm_adapter_load(m, NULL, &a), LLMM_ERR_INVALID_ARG);
    assert_int_equal(llmm_adapter_load(m, "x", NULL), LLMM_ERR_INVALID_ARG);
    assert_int_equal(llmm_adapter_load_memory(m, NULL, 10, &a), LLMM_ERR_INVALID_ARG);
    /* b stays attached to seq 2 until the context goes */
    assert_int_equal(llmm_seq_set_adapters(c, 2, &b, NULL, 1), LLMM_OK);
    llmm_adapter_free(b);
    llmm_context_free(c);
    llmm_adapter_free(foreign);
    spec_free(&f);
    llmm_model_free(m);
    llmm_model_free(other);
    assert_int_equal(ca.allocs, ca.frees);
}

/* The prefix cache shares blocks only between sequences with the same adapters and scales. */
static void test_prefix_cache_knows_adapters(void **state) {
    (void)state;
    llmm_model *m = load_model(STORIES, NULL);
    llmm_adapter *r8 = load_adapter(m, R8);
    llmm_context_params cp;
    llmm_context_params_default(&cp, sizeof cp);
    cp.n_ctx = 64;
    cp.n_seq_max = 5;
    cp.n_threads = 1;
    cp.kv_type = LLMM_KV_F32;
    cp.kv_block_size = 4;
    cp.prefix_cache = 1;
    llmm_context *c = make_context(m, &cp), *fresh = make_ctx(m, 1);
    const llmm_token prompt[13] = {1, 20, 30, 40, 50, 60, 70, 80, 90, 100, 110, 120, 130};
    llmm_context_stats st = {.size = sizeof st};
    float *logits[5];
    /* seq: 0 r8 x1 (computes), 1 none (must not reuse), 2 r8 x1 (reuses), 3 r8 x0.5 (must not),
     * 4 none (reuses seq 1's) */
    const float scales[5] = {1.f, 0.f, 1.f, 0.5f, 0.f};
    const uint64_t want_hits[5] = {0, 0, 12, 12, 24};
    for (llmm_seq_id s = 0; s < 5; s++) {
        if (scales[s] != 0.f) assert_int_equal(llmm_seq_set_adapters(c, s, &r8, &scales[s], 1), LLMM_OK);
        assert_int_equal(llmm_prefill(c, s, prompt, 13, 0), LLMM_OK);
        assert_int_equal(llmm_context_get_stats(c, &st), LLMM_OK);
        assert_int_equal(st.prefix_hits, want_hits[s]);
        const float *l;
        size_t nv;
        assert_int_equal(llmm_logits(c, 0, &l, &nv), LLMM_OK);
        logits[s] = malloc(nv * sizeof(float));
        assert_non_null(logits[s]);
        memcpy(logits[s], l, nv * sizeof(float));
    }
    const size_t nv = 512;
    assert_true(max_diff(logits[0], logits[2], nv) <= 1e-5);
    assert_true(max_diff(logits[1], logits[4], nv) <= 1e-5);
    assert_true(max_diff(logits[0], logits[1], nv) > 1e-2);
    assert_true(max_diff(logits[0], logits[3], nv) > 1e-3);
    /* seq 1's logits are the base model's */
    assert_int_equal(llmm_prefill(fresh, 0, prompt, 13, 0), LLMM_OK);
    const float *l;
    size_t n_vocab;
    assert_int_equal(llmm_logits(fresh, 0, &l, &n_vocab), LLMM_OK);
    assert_true(max_diff(logits[1], l, nv) <= 1e-5);
    /* a sequence whose adapters change while it holds tokens publishes nothing more: seq 1
     * (none, its 3 blocks cached) turns to r8 and fills a 4th block, which a sequence without
     * adapters must not reuse */
    assert_int_equal(llmm_seq_set_adapters(c, 1, &r8, NULL, 1), LLMM_OK);
    const llmm_token more[5] = {140, 150, 160, 170, 180};
    assert_int_equal(llmm_prefill(c, 1, more, 5, 0), LLMM_OK); /* 18 tokens: block 3 full */
    llmm_token longer[18];
    memcpy(longer, prompt, sizeof prompt);
    memcpy(longer + 13, more, sizeof more);
    assert_int_equal(llmm_seq_clear(c, 4), LLMM_OK);
    assert_int_equal(llmm_context_get_stats(c, &st), LLMM_OK);
    const uint64_t hits_before = st.prefix_hits;
    assert_int_equal(llmm_prefill(c, 4, longer, 18, 0), LLMM_OK);
    assert_int_equal(llmm_context_get_stats(c, &st), LLMM_OK);
    assert_int_equal(st.prefix_hits - hits_before, 12);
    for (int s = 0; s < 5; s++) free(logits[s]);
    llmm_context_free(c);
    llmm_context_free(fresh);
    llmm_adapter_free(r8);
    llmm_model_free(m);
}

/* A saved state records the adapters it was computed with. */
static void test_saved_state_knows_adapters(void **state) {
    (void)state;
    llmm_model *m = load_model(STORIES, NULL);
    llmm_adapter *r8 = load_adapter(m, R8), *r4 = load_adapter(m, R4F16);
    llmm_context *c = make_ctx(m, 4);
    const llmm_token prompt[6] = {1, 20, 30, 40, 50, 60};
    assert_int_equal(llmm_seq_set_adapters(c, 0, &r8, NULL, 1), LLMM_OK);
    assert_int_equal(llmm_prefill(c, 0, prompt, 6, 0), LLMM_OK);
    size_t cap = 0, n = 0;
    assert_int_equal(llmm_seq_save_buffer(c, 0, 0, NULL, 0, &cap), LLMM_ERR_BUFFER_TOO_SMALL);
    uint8_t *buf = malloc(cap);
    assert_non_null(buf);
    assert_int_equal(llmm_seq_save_buffer(c, 0, 0, buf, cap, &n), LLMM_OK);
    assert_int_equal(llmm_seq_load_buffer(c, 1, buf, n), LLMM_ERR_BAD_FILE); /* seq 1 has no adapters */
    print_message("%s\n", llmm_context_last_error(c));
    assert_non_null(strstr(llmm_context_last_error(c), "adapters"));
    assert_int_equal(llmm_seq_set_adapters(c, 2, &r4, NULL, 1), LLMM_OK);
    assert_int_equal(llmm_seq_load_buffer(c, 2, buf, n), LLMM_ERR_BAD_FILE);
    assert_non_null(strstr(llmm_context_last_error(c), "adapters"));
    assert_int_equal(llmm_seq_set_adapters(c, 2, &r8, (float[]){0.5f}, 1), LLMM_OK);
    assert_int_equal(llmm_seq_load_buffer(c, 2, buf, n), LLMM_ERR_BAD_FILE); /* another scale */
    assert_int_equal(llmm_seq_set_adapters(c, 2, &r8, NULL, 1), LLMM_OK);
    assert_int_equal(llmm_seq_load_buffer(c, 2, buf, n), LLMM_OK);
    /* the restored sequence continues exactly as the original */
    const llmm_token next = 77;
    const float *a, *b;
    size_t nv;
    assert_int_equal(llmm_decode(c, (llmm_seq_id[]){0}, &next, 1), LLMM_OK);
    assert_int_equal(llmm_logits(c, 0, &a, &nv), LLMM_OK);
    float *keep = malloc(nv * sizeof *keep);
    assert_non_null(keep);
    memcpy(keep, a, nv * sizeof *keep);
    assert_int_equal(llmm_decode(c, (llmm_seq_id[]){2}, &next, 1), LLMM_OK);
    assert_int_equal(llmm_logits(c, 0, &b, &nv), LLMM_OK);
    assert_memory_equal(keep, b, nv * sizeof *keep);
    /* a state without adapters loads into a sequence without adapters, as before */
    assert_int_equal(llmm_prefill(c, 3, prompt, 6, 0), LLMM_OK);
    assert_int_equal(llmm_seq_save_buffer(c, 3, 0, buf, cap, &n), LLMM_OK);
    assert_int_equal(llmm_seq_load_buffer(c, 1, buf, n), LLMM_OK);
    assert_int_equal(llmm_seq_load_buffer(c, 2, buf, n), LLMM_ERR_BAD_FILE);
    free(keep);
    free(buf);
    llmm_context_free(c);
    llmm_adapter_free(r8);
    llmm_adapter_free(r4);
    llmm_model_free(m);
}

/* The cache holds its budget (below three adapters) over a workload touching four, evicting
 * least recently used adapters but never one a sequence runs with; hits allocate nothing. */
static void test_adapter_cache_budget(void **state) {
    (void)state;
    counting_alloc ca = {0};
    const llmm_allocator al = counting_allocator(&ca);
    llmm_model_params mp;
    llmm_model_params_default(&mp, sizeof mp);
    mp.allocator = &al;
    char files[4][64];
    llmm_model *m = load_model(STORIES, &mp);
    /* rank 4 on one 64 x 64 weight, F32: A, B and B transposed */
    const uint64_t each = 3 * 64 * 4 * sizeof(float);
    for (int i = 0; i < 4; i++) {
        file_spec f;
        rng_seed(&rng, 1000 + (uint64_t)i);
        spec_init(&f, "llama", 0.f);
        add_pair(&f, "blk.0.attn_q.weight", 64, 64, 4, 0, 0.5f);
        gguf_builder b;
        spec_write(&f, &b);
        assert_int_equal(gb_write_temp(&b, files[i], sizeof files[i]), 0);
        gb_free(&b);
        spec_free(&f);
    }
    llmm_context_params cp;
    llmm_context_params_default(&cp, sizeof cp);
    cp.n_ctx = 64;
    cp.n_seq_max = 3;
    cp.n_threads = 1;
    cp.adapter_budget_bytes = each * 5 / 2;
    llmm_context *c = make_context(m, &cp);
    int32_t id[4];
    for (int i = 0; i < 4; i++) assert_int_equal(llmm_adapter_register(c, files[i], &id[i]), LLMM_OK);
    int32_t again = -1;
    assert_int_equal(llmm_adapter_register(c, files[2], &again), LLMM_OK);
    assert_int_equal(again, id[2]);
    llmm_adapter_cache_stats st = {.size = sizeof st};
    const llmm_token t1 = 9;
    const llmm_seq_id s0 = 0, s1 = 1, s2 = 2;

    assert_int_equal(llmm_seq_use_adapters(c, s0, &id[0], NULL, 1), LLMM_OK);
    assert_int_equal(llmm_seq_use_adapters(c, s1, &id[1], NULL, 1), LLMM_OK);
    assert_int_equal(llmm_seq_use_adapters(c, s2, &id[2], NULL, 1), LLMM_OK); /* 3 loaded, all attached */
    assert_int_equal(llmm_adapter_cache_get_stats(c, &st), LLMM_OK);
    assert_int_equal(st.loads, 3);
    assert_int_equal(st.evictions, 0);
    assert_int_equal(st.n_loaded, 3);
    assert_int_equal(st.bytes, 3 * each); /* over budget: nothing may go */
    assert_int_equal(llmm_decode(c, &s0, &t1, 1), LLMM_OK);

    assert_int_equal(llmm_seq_use_adapters(c, s0, &id[3], NULL, 1), LLMM_OK); /* 0 detached: evicted */
    assert_int_equal(llmm_adapter_cache_get_stats(c, &st), LLMM_OK);
    assert_int_equal(st.loads, 4);
    assert_int_equal(st.evictions, 1);
    assert_int_equal(st.bytes, 3 * each);
    llmm_adapter_cache_entry e = {.size = sizeof e};
    assert_int_equal(llmm_adapter_cache_get_entry(c, id[0], &e), LLMM_OK);
    assert_int_equal(e.loaded, 0);
    assert_int_equal(llmm_adapter_cache_get_entry(c, id[1], &e), LLMM_OK);
    assert_int_equal(e.loaded, 1); /* attached to seq 1 */

    assert_int_equal(llmm_seq_use_adapters(c, s1, NULL, NULL, 0), LLMM_OK);
    assert_int_equal(llmm_seq_use_adapters(c, s1, &id[0], NULL, 1), LLMM_OK); /* reload 0, evict 1 */
    assert_int_equal(llmm_adapter_cache_get_stats(c, &st), LLMM_OK);
    assert_int_equal(st.loads, 5);
    assert_int_equal(st.evictions, 2);
    assert_int_equal(llmm_adapter_cache_get_entry(c, id[1], &e), LLMM_OK);
    assert_int_equal(e.loaded, 0);
    assert_int_equal(llmm_adapter_cache_get_entry(c, id[0], &e), LLMM_OK);
    assert_int_equal(e.loads, 2);
    assert_true(e.load_ms >= e.last_load_ms && e.last_load_ms >= 0);
    assert_string_equal(e.path, files[0]);

    /* seq 2 turns to adapter 3 (a hit: on seq 0 already), which leaves adapter 2 unattached
     * with the cache over budget: it goes */
    assert_int_equal(llmm_seq_use_adapters(c, s2, &id[3], NULL, 1), LLMM_OK);
    assert_int_equal(llmm_adapter_cache_get_stats(c, &st), LLMM_OK);
    assert_int_equal(st.evictions, 3);
    assert_int_equal(st.bytes, 2 * each);
    /* hits within the budget: swaps that allocate nothing */
    const size_t allocs = ca.allocs;
    assert_int_equal(llmm_seq_use_adapters(c, s2, &id[0], (float[]){0.5f}, 1), LLMM_OK);
    assert_int_equal(llmm_seq_use_adapters(c, s2, &id[3], NULL, 1), LLMM_OK);
    assert_int_equal(ca.allocs, allocs);
    assert_int_equal(llmm_adapter_cache_get_stats(c, &st), LLMM_OK);
    assert_int_equal(st.hits, 3);
    assert_int_equal(st.loads, 5);
    assert_int_equal(st.evictions, 3);
    assert_int_equal(llmm_decode(c, (llmm_seq_id[]){0, 1, 2}, (llmm_token[]){3, 4, 5}, 3), LLMM_OK);
    assert_int_equal(llmm_seq_use_adapters(c, s2, (int32_t[]){7}, NULL, 1), LLMM_ERR_INVALID_ARG);
    assert_int_equal(llmm_adapter_cache_get_entry(c, 7, &e), LLMM_ERR_NOT_FOUND);
    llmm_context_free(c);
    llmm_model_free(m);
    assert_int_equal(ca.allocs, ca.frees);
    for (int i = 0; i < 4; i++) unlink(files[i]);
}

/* A and B in BF16 and Q8_0 (rank 32: Q8_0 rows are 32-blocks) */
static void test_merged_bf16_q8_0(void **state) {
    (void)state;
    llmm_model *m = load_model(STORIES, NULL);
    const uint32_t types[2] = {LLMM_TYPE_BF16, LLMM_TYPE_Q8_0};
    for (int k = 0; k < 2; k++) {
        file_spec f;
        rng_seed(&rng, 500 + (uint64_t)k);
        spec_init(&f, "llama", 32.f);
        add_pair_typed(&f, "blk.0.attn_v.weight", 64, 32, 32, types[k]);
        add_pair_typed(&f, "blk.3.ffn_up.weight", 64, 172, 32, types[k]);
        add_pair_typed(&f, "output.weight", 64, 512, 32, types[k]);
        gguf_builder b;
        spec_write(&f, &b);
        llmm_adapter *a = NULL;
        assert_int_equal(llmm_adapter_load_memory(m, b.bytes, b.len, &a), LLMM_OK);
        const merge_input in[] = {{b.bytes, b.len, 1.0f}};
        check_against_merged_tol(m, STORIES, &a, NULL, 1, in, 0.05);
        llmm_adapter_free(a);
        gb_free(&b);
        spec_free(&f);
    }
    llmm_model_free(m);
}

int main(void) {
    rng_seed(&rng, 12345);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_info),
        cmocka_unit_test(test_merged_stories),
        cmocka_unit_test(test_merged_tiny_phi3),
        cmocka_unit_test(test_merged_bf16_q8_0),
        cmocka_unit_test(test_zero_b_and_zero_scale_are_exact),
        cmocka_unit_test(test_reference_goldens),
        cmocka_unit_test(test_mixed_batch_equals_alone),
        cmocka_unit_test(test_hot_swap_leaves_others),
        cmocka_unit_test(test_hostile_files),
        cmocka_unit_test(test_alloc_failure_leaks_nothing),
        cmocka_unit_test(test_refcount_and_arguments),
        cmocka_unit_test(test_prefix_cache_knows_adapters),
        cmocka_unit_test(test_saved_state_knows_adapters),
        cmocka_unit_test(test_adapter_cache_budget),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
