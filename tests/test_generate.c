/* Generation against the reference engine's golden outputs, and the context contract:
 * chunked prefill, multi-sequence decode, truncation, overflow, abort, streaming. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "llmmini.h"
#include "support/golden_check.h"
#include "format/gguf.h"
#include "support/quant_temp.h"
#include "support/decode_sample_check.h"
#include "support/fixtures.h"
#include "support/shared_data.h"

#define MAX_IDS GOLDEN_MAX_IDS

static llmm_context *new_context_kv(llmm_model *m, uint32_t n_ctx, uint32_t n_seq, uint32_t n_batch, int threads,
                                    llmm_kv_type kv_type) {
    llmm_context_params p;
    llmm_context_params_default(&p, sizeof p);
    p.n_ctx = n_ctx;
    p.n_seq_max = n_seq;
    p.n_batch = n_batch;
    p.n_threads = threads;
    p.kv_type = kv_type;
    return make_context(m, &p);
}

/* A context with the default KV type (F16). */
static llmm_context *new_context(llmm_model *m, uint32_t n_ctx, uint32_t n_seq, uint32_t n_batch, int threads) {
    return new_context_kv(m, n_ctx, n_seq, n_batch, threads, LLMM_KV_F16);
}

static const char *const kv_names[] = {"f32", "f16", "q8"};

/* The golden outputs were made with an F32 KV cache: with LLMM_KV_F32 the logits must match
 * within 1e-3 and the greedy tokens up to the case's hard bar. With F16 or Q8 the figures are
 * reported, and the greedy continuation must agree for min(32, hard bar) tokens (the issue's
 * bar for Q8). */
static void check_golden_case(const golden_case *gc, llmm_kv_type kv_type) {
    golden_run g;
    assert_int_equal(golden_load("golden/stories260K", gc->golden, &g), 0);
    llmm_model *m = load_model(gc->model, NULL);
    llmm_context *c = new_context_kv(m, 256, 1, 256, 2, kv_type);
    const golden_result r = golden_compare(m, c, &g, gc->prompt);
    const double max_diff = r.max_logit_diff;
    const size_t agree = r.agree;
    print_message("%-30s KV %s: max |logit diff| %.2e, greedy agreement %zu/%zu (hard bar %zu)\n", gc->golden,
                  kv_names[kv_type], max_diff, agree, g.n_generated, gc->hard_steps);
    size_t bar = gc->hard_steps < g.n_generated ? gc->hard_steps : g.n_generated;
    if (kv_type == LLMM_KV_F32) assert_true(max_diff < 1e-3);
    else bar = bar < 32 ? bar : 32;
    assert_true(agree >= bar);
    golden_free(&g);
    llmm_context_free(c);
    llmm_model_free(m);
}

static void test_golden_outputs(void **state) {
    (void)state;
    for (size_t i = 0; i < n_golden_cases; i++) check_golden_case(&golden_cases[i], LLMM_KV_F32);
}

static void test_golden_outputs_f16_kv(void **state) {
    (void)state;
    for (size_t i = 0; i < n_golden_cases; i++) check_golden_case(&golden_cases[i], LLMM_KV_F16);
}

static void test_golden_outputs_q8_kv(void **state) {
    (void)state;
    for (size_t i = 0; i < n_golden_cases; i++) check_golden_case(&golden_cases[i], LLMM_KV_Q8);
}

/* Logits of position i of a prompt, computed in one batch, must not depend on how the prompt
 * is split into chunks or on the thread count. */
static void test_chunked_prefill_matches(void **state) {
    (void)state;
    llmm_model *m = load_model("stories260K.gguf", NULL);
    llmm_token ids[MAX_IDS];
    size_t n = tokenize(m, "Once upon a time there was a little dog who liked to run.", ids, MAX_IDS);
    llmm_context *one = new_context(m, 128, 1, 256, 1);
    llmm_context *chunked = new_context(m, 128, 1, 3, 2);
    assert_int_equal(llmm_prefill(one, 0, ids, n, LLMM_PREFILL_ALL_LOGITS), LLMM_OK);
    assert_int_equal(llmm_prefill(chunked, 0, ids, n, LLMM_PREFILL_ALL_LOGITS), LLMM_OK);
    for (size_t i = 0; i < n; i++) {
        const float *a, *b;
        size_t nv;
        assert_int_equal(llmm_logits(one, i, &a, &nv), LLMM_OK);
        assert_int_equal(llmm_logits(chunked, i, &b, &nv), LLMM_OK);
        for (size_t k = 0; k < nv; k++) assert_true(fabsf(a[k] - b[k]) < 1e-4f);
    }
    const float *x;
    assert_int_equal(llmm_logits(one, n, &x, NULL), LLMM_ERR_NOT_FOUND);
    llmm_context_free(one);
    llmm_context_free(chunked);
    llmm_model_free(m);
}

/* Packed weights (llmm_model_params.repack_weights) change no bit: a model that packs its
 * matrices during the first decode steps and one that never does give the same logits at
 * every step, and again for a second prompt prefilled after the packing (which reads the
 * copies). On a CPU without AVX-512 neither packs and the test only checks determinism;
 * test_simd_kernels checks the packed kernels themselves. */
/* file loaded twice, m[0] packing its weights and m[1] never, each with a context of n_seq
 * sequences on 2 threads. */
static void open_repack_pair(const char *file, uint32_t n_ctx, uint32_t n_seq, llmm_model *m[2], llmm_context *c[2]) {
    for (int i = 0; i < 2; i++) {
        llmm_model_params mp;
        llmm_model_params_default(&mp, sizeof mp);
        mp.repack_weights = i == 0;
        m[i] = load_model(file, &mp);
        c[i] = new_context(m[i], n_ctx, n_seq, 16, 2);
    }
}

static void close_pair(llmm_model *m[2], llmm_context *c[2]) {
    for (int i = 0; i < 2; i++) {
        llmm_context_free(c[i]);
        llmm_model_free(m[i]);
    }
}

static void check_repacked_same_logits(const char *file) {
    llmm_model *m[2];
    llmm_context *c[2];
    open_repack_pair(file, 96, 1, m, c);
    const char *prompts[] = {"Once upon a time", "The little dog saw a big red ball in the park and"};
    for (size_t pi = 0; pi < 2; pi++) {
        llmm_token ids[MAX_IDS];
        const size_t n = tokenize(m[0], prompts[pi], ids, MAX_IDS);
        const float *l[2];
        size_t nv = 0;
        for (int i = 0; i < 2; i++) {
            assert_int_equal(llmm_seq_clear(c[i], 0), LLMM_OK);
            assert_int_equal(llmm_prefill(c[i], 0, ids, n, LLMM_PREFILL_ALL_LOGITS), LLMM_OK);
        }
        for (size_t pos = 0; pos < n; pos++) {
            for (int i = 0; i < 2; i++) assert_int_equal(llmm_logits(c[i], pos, &l[i], &nv), LLMM_OK);
            if (memcmp(l[0], l[1], nv * sizeof *l[0]) != 0)
                fail_msg("%s prompt %zu position %zu differs", file, pi, pos);
        }
        llmm_token next = argmax(l[0], nv);
        for (int step = 0; step < 12; step++) {
            const llmm_seq_id seq = 0;
            for (int i = 0; i < 2; i++) {
                assert_int_equal(llmm_decode(c[i], &seq, &next, 1), LLMM_OK);
                assert_int_equal(llmm_logits(c[i], 0, &l[i], &nv), LLMM_OK);
            }
            if (memcmp(l[0], l[1], nv * sizeof *l[0]) != 0) fail_msg("%s decode step %d differs", file, step);
            next = argmax(l[0], nv);
        }
    }
    close_pair(m, c);
}

static void test_repacked_weights_same_logits(void **state) {
    (void)state;
    char path[1024];
    check_repacked_same_logits(shared_path(path, sizeof path, "models/stories260K-q4_0.gguf"));
    check_repacked_same_logits(shared_path(path, sizeof path, "models/stories260K-q8_0.gguf"));
    /* phi3's fused Q/K/V and gate/up: each row view of a fused matrix gets a copy of its own */
    gguf_file *src = NULL;
    llmm_diag d = {{0}};
    assert_int_equal(llmm__gguf_open_file(shared_path(path, sizeof path, "golden/arch/tiny-phi3.gguf"), 1, NULL, &src, &d),
                     LLMM_OK);
    const char *recipes[] = {"q8_0", "q5_0"};
    for (size_t i = 0; i < sizeof recipes / sizeof *recipes; i++) {
        char tmp[64];
        quantize_to_temp(src, recipes[i], tmp, sizeof tmp);
        check_repacked_same_logits(tmp);
        unlink(tmp);
    }
    llmm__gguf_close(src);
}

/* Eight sequences decoded together make the packed copies in their own steps (each chunk then
 * packs its tiles and computes eight operand rows from them): every sequence's logits at every
 * step equal those of a model that never packs. */
static void check_batched_repack_same_logits(const char *file) {
    enum { S = 8, STEPS = 10 };
    const char *prompts[S] = {"Once upon a time", "The dog", "A big red ball", "Lily",
                              "Tim and Sam",      "The sun", "She saw a bird", "One day"};
    llmm_model *m[2];
    llmm_context *c[2];
    open_repack_pair(file, 64, S, m, c);
    llmm_seq_id seqs[S];
    llmm_token next[S];
    for (int s = 0; s < S; s++) {
        llmm_token ids[MAX_IDS];
        const size_t n = tokenize(m[0], prompts[s], ids, MAX_IDS);
        seqs[s] = s;
        for (int i = 0; i < 2; i++) assert_int_equal(llmm_prefill(c[i], s, ids, n, 0), LLMM_OK);
        const float *l;
        size_t nv = 0;
        assert_int_equal(llmm_logits(c[0], 0, &l, &nv), LLMM_OK);
        next[s] = argmax(l, nv);
    }
    for (int step = 0; step < STEPS; step++) {
        for (int i = 0; i < 2; i++) assert_int_equal(llmm_decode(c[i], seqs, next, S), LLMM_OK);
        for (int s = 0; s < S; s++) {
            const float *l[2];
            size_t nv = 0;
            for (int i = 0; i < 2; i++) assert_int_equal(llmm_logits(c[i], (size_t)s, &l[i], &nv), LLMM_OK);
            if (memcmp(l[0], l[1], nv * sizeof *l[0]) != 0) fail_msg("%s step %d sequence %d differs", file, step, s);
            next[s] = argmax(l[0], nv);
        }
    }
    close_pair(m, c);
}

static void test_batched_repack_same_logits(void **state) {
    (void)state;
    char path[1024];
    check_batched_repack_same_logits(shared_path(path, sizeof path, "models/stories260K-q4_0.gguf"));
    check_batched_repack_same_logits(shared_path(path, sizeof path, "models/stories260K-q8_0.gguf"));
}

/* Contexts on two threads decoding one fresh model at once race to make its packed copies:
 * whichever claims a weight packs it while the other reads the original, and both must get
 * the logits of a model that never packs (ThreadSanitizer builds check the hand-over). */
typedef struct decode_job {
    llmm_context *ctx;
    float logits[8][512];
    size_t n_vocab;
    llmm_status status;
} decode_job;

static void *decode_eight(void *arg) {
    decode_job *j = arg;
    const llmm_token prompt[3] = {1, 403, 407};
    const llmm_seq_id seq = 0;
    j->status = llmm_prefill(j->ctx, 0, prompt, 3, 0);
    llmm_token next = 410;
    for (int step = 0; step < 8 && !j->status; step++) {
        const float *l;
        j->status = llmm_decode(j->ctx, &seq, &next, 1);
        if (!j->status) j->status = llmm_logits(j->ctx, 0, &l, &j->n_vocab);
        if (!j->status && j->n_vocab <= 512) memcpy(j->logits[step], l, j->n_vocab * sizeof *l);
        next = (llmm_token)(411 + step);
    }
    return NULL;
}

static void test_repacking_from_two_threads(void **state) {
    (void)state;
    llmm_model_params mp;
    llmm_model_params_default(&mp, sizeof mp);
    llmm_model *shared = load_model("stories260K-q8_0.gguf", &mp);
    mp.repack_weights = 0;
    llmm_model *plain = load_model("stories260K-q8_0.gguf", &mp);
    static decode_job jobs[3];
    jobs[0].ctx = new_context(shared, 64, 1, 16, 1);
    jobs[1].ctx = new_context(shared, 64, 1, 16, 1);
    jobs[2].ctx = new_context(plain, 64, 1, 16, 1);
    pthread_t th[2];
    for (int i = 0; i < 2; i++) assert_int_equal(pthread_create(&th[i], NULL, decode_eight, &jobs[i]), 0);
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    decode_eight(&jobs[2]);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(jobs[i].status, LLMM_OK);
        assert_true(jobs[i].n_vocab <= 512);
    }
    for (int i = 0; i < 2; i++) assert_memory_equal(jobs[i].logits, jobs[2].logits, sizeof jobs[2].logits);
    for (int i = 0; i < 3; i++) llmm_context_free(jobs[i].ctx);
    llmm_model_free(shared);
    llmm_model_free(plain);
}

/* Two sequences decoded in one batch give what each gives alone. */
static void test_multi_sequence_decode(void **state) {
    (void)state;
    llmm_model *m = load_model("stories260K-q8_0.gguf", NULL);
    llmm_token a[MAX_IDS], b[MAX_IDS];
    size_t na = tokenize(m, "Once upon a time", a, MAX_IDS), nb = tokenize(m, "The little dog", b, MAX_IDS);
    llmm_context *both = new_context(m, 64, 2, 16, 2);
    llmm_context *solo = new_context(m, 64, 1, 16, 2);
    assert_int_equal(llmm_prefill(both, 0, a, na, 0), LLMM_OK);
    assert_int_equal(llmm_prefill(both, 1, b, nb, 0), LLMM_OK);
    llmm_seq_id seqs[2] = {0, 1};
    llmm_token next[2] = {a[na - 1], b[nb - 1]};
    for (int step = 0; step < 8; step++) {
        assert_int_equal(llmm_decode(both, seqs, next, 2), LLMM_OK);
        const float *la, *lb;
        size_t nv;
        assert_int_equal(llmm_logits(both, 0, &la, &nv), LLMM_OK);
        assert_int_equal(llmm_logits(both, 1, &lb, &nv), LLMM_OK);
        next[0] = argmax(la, nv);
        next[1] = argmax(lb, nv);
    }
    size_t len;
    assert_int_equal(llmm_seq_length(both, 1, &len), LLMM_OK);
    assert_int_equal(len, nb + 8);
    /* replay sequence 1 alone and compare its last logits */
    llmm_token replay[MAX_IDS];
    memcpy(replay, b, nb * sizeof *b);
    assert_int_equal(llmm_prefill(solo, 0, replay, nb, 0), LLMM_OK);
    const float *ls;
    size_t nv;
    llmm_token t = b[nb - 1];
    for (int step = 0; step < 8; step++) {
        llmm_seq_id s0 = 0;
        assert_int_equal(llmm_decode(solo, &s0, &t, 1), LLMM_OK);
        assert_int_equal(llmm_logits(solo, 0, &ls, &nv), LLMM_OK);
        t = argmax(ls, nv);
    }
    assert_int_equal(t, next[1]);
    /* a sequence may appear once per batch */
    llmm_seq_id dup[2] = {0, 0};
    assert_int_equal(llmm_decode(both, dup, next, 2), LLMM_ERR_INVALID_ARG);
    llmm_context_free(both);
    llmm_context_free(solo);
    llmm_model_free(m);
}

static void test_context_full_and_truncate(void **state) {
    (void)state;
    llmm_model *m = load_model("stories260K.gguf", NULL);
    llmm_context *c = new_context(m, 8, 1, 4, 1);
    llmm_token ids[MAX_IDS];
    size_t n = tokenize(m, "Once upon a time", ids, MAX_IDS); /* 5 tokens */
    assert_int_equal(llmm_prefill(c, 0, ids, n, 0), LLMM_OK);
    const float *l;
    size_t nv;
    assert_int_equal(llmm_logits(c, 0, &l, &nv), LLMM_OK);
    float *before = malloc(nv * sizeof *before);
    assert_non_null(before);
    memcpy(before, l, nv * sizeof *before);
    assert_int_equal(llmm_prefill(c, 0, ids, n, 0), LLMM_ERR_CONTEXT_FULL);
    assert_non_null(strstr(llmm_context_last_error(c), "n_ctx"));
    size_t len;
    assert_int_equal(llmm_seq_length(c, 0, &len), LLMM_OK);
    assert_int_equal(len, n);
    llmm_seq_id s = 0;
    for (int i = 0; i < 3; i++) assert_int_equal(llmm_decode(c, &s, &ids[1], 1), LLMM_OK);
    assert_int_equal(llmm_decode(c, &s, &ids[1], 1), LLMM_ERR_CONTEXT_FULL);
    /* truncating back and re-running the last prompt token reproduces the logits */
    assert_int_equal(llmm_seq_truncate(c, 0, n - 1), LLMM_OK);
    assert_int_equal(llmm_decode(c, &s, &ids[n - 1], 1), LLMM_OK);
    assert_int_equal(llmm_logits(c, 0, &l, &nv), LLMM_OK);
    for (size_t k = 0; k < nv; k++) assert_true(fabsf(l[k] - before[k]) < 1e-5f);
    assert_int_equal(llmm_seq_truncate(c, 0, 100), LLMM_ERR_INVALID_ARG);
    assert_int_equal(llmm_seq_clear(c, 0), LLMM_OK);
    assert_int_equal(llmm_seq_length(c, 0, &len), LLMM_OK);
    assert_int_equal(len, 0);
    free(before);
    llmm_context_free(c);
    llmm_model_free(m);
}

static int abort_after(void *user) { return --*(int *)user < 0; }

static void test_abort_restores_sequence(void **state) {
    (void)state;
    llmm_model *m = load_model("stories260K.gguf", NULL);
    int budget = 2;
    llmm_context_params p;
    llmm_context_params_default(&p, sizeof p);
    p.n_ctx = 64;
    p.n_batch = 2;
    p.abort = abort_after;
    p.abort_user = &budget;
    llmm_context *c = make_context(m, &p);
    llmm_token ids[MAX_IDS];
    size_t n = tokenize(m, "Once upon a time there was", ids, MAX_IDS);
    assert_int_equal(llmm_prefill(c, 0, ids, n, 0), LLMM_ERR_ABORTED);
    size_t len;
    assert_int_equal(llmm_seq_length(c, 0, &len), LLMM_OK);
    assert_int_equal(len, 0);
    const float *l;
    assert_int_equal(llmm_logits(c, 0, &l, NULL), LLMM_ERR_NOT_FOUND);
    budget = 1000;
    assert_int_equal(llmm_prefill(c, 0, ids, n, 0), LLMM_OK);
    llmm_context_free(c);
    llmm_model_free(m);
}

static void test_context_bad_arguments(void **state) {
    (void)state;
    llmm_model *m = load_model("stories260K.gguf", NULL);
    llmm_context *c = NULL;
    assert_int_equal(llmm_context_create(NULL, NULL, &c), LLMM_ERR_INVALID_ARG);
    assert_int_equal(llmm_context_create(m, NULL, NULL), LLMM_ERR_INVALID_ARG);
    llmm_context_params p;
    llmm_context_params_default(&p, sizeof p);
    p.n_seq_max = 0;
    assert_int_equal(llmm_context_create(m, &p, &c), LLMM_ERR_INVALID_ARG);
    assert_null(c);
    llmm_context_params_default(&p, sizeof p);
    p.kv_type = (llmm_kv_type)7;
    assert_int_equal(llmm_context_create(m, &p, &c), LLMM_ERR_INVALID_ARG);
    llmm_context_params_default(&p, sizeof p);
    p.kv_block_size = 24; /* not a power of two */
    assert_int_equal(llmm_context_create(m, &p, &c), LLMM_ERR_INVALID_ARG);
    c = new_context(m, 16, 2, 8, 1);
    llmm_token t = 5, bad = 9999;
    llmm_seq_id s = 0, s_bad = 2;
    assert_int_equal(llmm_prefill(NULL, 0, &t, 1, 0), LLMM_ERR_INVALID_ARG);
    assert_int_equal(llmm_prefill(c, 0, NULL, 1, 0), LLMM_ERR_INVALID_ARG);
    assert_int_equal(llmm_prefill(c, 0, &t, 0, 0), LLMM_ERR_INVALID_ARG);
    assert_int_equal(llmm_prefill(c, 2, &t, 1, 0), LLMM_ERR_INVALID_ARG);
    assert_int_equal(llmm_prefill(c, -1, &t, 1, 0), LLMM_ERR_INVALID_ARG);
    assert_int_equal(llmm_prefill(c, 0, &bad, 1, 0), LLMM_ERR_INVALID_ARG);
    assert_int_equal(llmm_prefill(c, 0, &t, 1, 0x40), LLMM_ERR_INVALID_ARG);
    assert_int_equal(llmm_decode(c, &s_bad, &t, 1), LLMM_ERR_INVALID_ARG);
    assert_int_equal(llmm_decode(c, &s, &bad, 1), LLMM_ERR_INVALID_ARG);
    assert_int_equal(llmm_decode(c, &s, &t, 3), LLMM_ERR_INVALID_ARG);
    assert_int_equal(llmm_generate(c, NULL, NULL, NULL), LLMM_ERR_INVALID_ARG);
    assert_string_not_equal(llmm_context_last_error(c), "");
    assert_int_equal(llmm_seq_length(c, 0, NULL), LLMM_ERR_INVALID_ARG);
    llmm_context_free(c);
    llmm_context_free(NULL);
    llmm_model_free(m);
    /* a vocabulary-only model cannot compute */
    m = load_vocab("stories260K.gguf");
    assert_int_equal(llmm_context_create(m, NULL, &c), LLMM_ERR_VOCAB_ONLY);
    llmm_model_free(m);
}

typedef struct collected {
    char text[4096];
    size_t len;
    int calls, incomplete, stop_after;
} collected;

static int collect(void *user, const char *bytes, size_t n, int complete_utf8) {
    collected *c = user;
    assert_true(c->len + n < sizeof c->text);
    memcpy(c->text + c->len, bytes, n);
    c->len += n;
    c->calls++;
    c->incomplete += !complete_utf8;
    return c->stop_after && c->calls >= c->stop_after;
}

/* stories260K, a 256-position context on two threads and greedy parameters for 40 tokens:
 * what the streaming and latency tests start from (cmocka setup and teardown). */
typedef struct stream_run {
    llmm_model *m;
    llmm_context *c;
    llmm_sampler_params sp;
    llmm_token out[64];
    llmm_generate_params gp;
} stream_run;

static int stream_run_setup(void **state) {
    stream_run *r = calloc(1, sizeof *r);
    if (!r) return -1;
    r->m = load_model("stories260K.gguf", NULL);
    r->c = new_context(r->m, 256, 1, 64, 2);
    r->gp = greedy_params(&r->sp, r->out, 40);
    r->gp.out_capacity = ARRAY_LEN(r->out);
    *state = r;
    return 0;
}

static int stream_run_teardown(void **state) {
    stream_run *r = *state;
    llmm_context_free(r->c);
    llmm_model_free(r->m);
    free(r);
    return 0;
}

static void test_generate_streaming(void **state) {
    stream_run *r = *state;
    llmm_model *m = r->m;
    llmm_context *c = r->c;
    llmm_token *out = r->out;
    llmm_generate_params gp = r->gp;
    collected col = {0};
    gp.on_bytes = collect;
    gp.user = &col;
    llmm_generate_stats st = {.size = sizeof st};
    assert_int_equal(llmm_generate(c, "Once upon a time", &gp, &st), LLMM_OK);
    assert_int_equal(st.n_generated, 40);
    assert_int_equal(st.stop_reason, LLMM_STOP_MAX_TOKENS);
    assert_true(st.generate_tokens_per_s > 0 && st.prompt_ms >= 0 && st.first_token_ms > 0);
    char text[4096];
    size_t n;
    assert_int_equal(llmm_detokenize(m, out, 40, 0, text, sizeof text, &n), LLMM_OK);
    assert_int_equal(n, col.len);
    assert_memory_equal(text, col.text, n);
    assert_int_equal(col.incomplete, 0);

    /* a stop string cuts the text before it */
    const char *needle = "Lily";
    assert_non_null(strstr(text, needle));
    const char *stops[1] = {needle};
    gp.stop_strings = stops;
    gp.n_stop = 1;
    collected cut = {0};
    gp.user = &cut;
    assert_int_equal(llmm_generate(c, "Once upon a time", &gp, &st), LLMM_OK);
    assert_int_equal(st.stop_reason, LLMM_STOP_STRING);
    assert_int_equal(cut.len, (size_t)(strstr(text, needle) - text));
    assert_memory_equal(cut.text, text, cut.len);

    /* the callback cancels */
    gp.n_stop = 0;
    collected cancel = {.stop_after = 3};
    gp.user = &cancel;
    assert_int_equal(llmm_generate(c, "Once upon a time", &gp, &st), LLMM_OK);
    assert_int_equal(st.stop_reason, LLMM_STOP_CALLBACK);
    assert_int_equal(cancel.calls, 3);

    /* a full context ends generation without an error */
    llmm_context *small = new_context(m, 10, 1, 64, 1);
    gp.user = &(collected){0};
    assert_int_equal(llmm_generate(small, "Once upon a time", &gp, &st), LLMM_OK);
    assert_int_equal(st.stop_reason, LLMM_STOP_CONTEXT_FULL);
    assert_int_equal(st.n_generated, 6);
    llmm_context_free(small);
}

typedef struct stalled {
    int calls, stall_at;
} stalled;

/* The app stalls once, on its stall_at-th piece, for STALL_MS: one long gap between tokens. */
#define STALL_MS 200
static int stall_once(void *user, const char *bytes, size_t n, int complete_utf8) {
    (void)bytes, (void)n, (void)complete_utf8;
    stalled *s = user;
    struct timespec left = {0, STALL_MS * 1000000L};
    if (++s->calls == s->stall_at)
        while (nanosleep(&left, &left) == -1 && errno == EINTR) continue;
    return 0;
}

/* Inter-token percentiles: one stalled gap among 39 is the max and the p99, not the p95; the
 * context gathers every request's first token and gaps and every decode step. */
static void test_generate_latency_percentiles(void **state) {
    stream_run *r = *state;
    llmm_context *c = r->c;
    llmm_generate_params gp = r->gp;
    stalled app = {.stall_at = 20};
    gp.on_bytes = stall_once;
    gp.user = &app;
    llmm_generate_stats st = {.size = sizeof st};
    assert_int_equal(llmm_generate(c, "Once upon a time", &gp, &st), LLMM_OK);
    assert_int_equal(st.n_generated, 40);
    assert_true(st.inter_token_ms_max >= STALL_MS);
    assert_true(st.inter_token_ms_p99 >= STALL_MS * 0.96);
    assert_true(st.inter_token_ms_p95 < STALL_MS * 0.9);
    assert_true(st.inter_token_ms_p50 > 0 && st.inter_token_ms_p50 <= st.inter_token_ms_p95);

    app = (stalled){0};
    llmm_generate_stats second = {.size = sizeof second};
    assert_int_equal(llmm_generate(c, "Once upon a time", &gp, &second), LLMM_OK);
    assert_true(second.inter_token_ms_max < STALL_MS); /* per call: the first call's stall is not here */

    llmm_context_stats cs = {.size = sizeof cs};
    assert_int_equal(llmm_context_get_stats(c, &cs), LLMM_OK);
    assert_int_equal(cs.n_requests, 2);
    assert_true(cs.request_first_token_ms_max >= st.first_token_ms * 0.999 &&
                cs.request_first_token_ms_max >= second.first_token_ms * 0.999);
    assert_true(cs.inter_token_ms_max >= STALL_MS); /* over both requests: 78 gaps, one stalled */
    assert_true(cs.inter_token_ms_p95 < STALL_MS * 0.9);
    /* decode steps: the library's own time, without the app's stall */
    assert_true(cs.step_ms_p50 > 0 && cs.step_ms_p50 <= cs.step_ms_p99 && cs.step_ms_p99 <= cs.step_ms_max);
    assert_true(cs.step_ms_max < STALL_MS);

    /* a caller built before the percentiles: its struct ends before them and is not written past */
    llmm_generate_stats old;
    memset(&old, 0xee, sizeof old);
    old.size = (uint32_t)offsetof(llmm_generate_stats, inter_token_ms_p50);
    assert_int_equal(llmm_generate(c, "Once upon a time", &gp, &old), LLMM_OK);
    assert_true(old.inter_token_ms_p50 != 0); /* untouched: 0xee bytes */
}

/* Same seed, same text; the sampler is driven through llmm_generate. */
static void test_generate_seeded_sampling(void **state) {
    (void)state;
    llmm_model *m = load_model("stories260K.gguf", NULL);
    llmm_context *c = new_context(m, 256, 1, 64, 1);
    llmm_sampler_params sp;
    llmm_sampler_params_default(&sp, sizeof sp);
    sp.seed = 1234;
    llmm_generate_params gp;
    llmm_generate_params_default(&gp, sizeof gp);
    gp.sampling = &sp;
    gp.max_tokens = 30;
    llmm_token a[32], b[32];
    gp.out_tokens = a;
    gp.out_capacity = 32;
    assert_int_equal(llmm_generate(c, "The little dog", &gp, NULL), LLMM_OK);
    gp.out_tokens = b;
    assert_int_equal(llmm_generate(c, "The little dog", &gp, NULL), LLMM_OK);
    assert_memory_equal(a, b, sizeof a[0] * 30);
    llmm_context_free(c);
    llmm_model_free(m);
}

/* llmm_decode_sample on the CPU: the host sampler's tokens and RNG streams, logits readable. */
static void test_decode_sample(void **state) {
    (void)state;
    llmm_model *m = load_model("stories260K.gguf", NULL);
    llmm_context_params p;
    llmm_context_params_default(&p, sizeof p);
    p.n_ctx = 64;
    p.n_seq_max = 3;
    p.n_batch = 16;
    p.n_threads = 1;
    assert_int_equal(check_decode_sample(m, &p, 12), 36);
    llmm_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_golden_outputs),          cmocka_unit_test(test_golden_outputs_f16_kv),
        cmocka_unit_test(test_golden_outputs_q8_kv),    cmocka_unit_test(test_chunked_prefill_matches),
        cmocka_unit_test(test_repacked_weights_same_logits),
        cmocka_unit_test(test_batched_repack_same_logits),
        cmocka_unit_test(test_repacking_from_two_threads),
        cmocka_unit_test(test_multi_sequence_decode),   cmocka_unit_test(test_context_full_and_truncate),
        cmocka_unit_test(test_abort_restores_sequence), cmocka_unit_test(test_context_bad_arguments),
        cmocka_unit_test_setup_teardown(test_generate_streaming, stream_run_setup, stream_run_teardown),
        cmocka_unit_test(test_generate_seeded_sampling),
        cmocka_unit_test_setup_teardown(test_generate_latency_percentiles, stream_run_setup, stream_run_teardown),
        cmocka_unit_test(test_decode_sample),
    };
    return cmocka_run_group_tests_name("generate", tests, NULL, NULL);
}
