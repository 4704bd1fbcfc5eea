/* The core through the handle backend (handle_backend.c): the CPU's kernels behind buffers
 * that are not host addresses. If the core read or wrote a buffer, or handed an op a host
 * array in place of one, the run would fault or the op would fail and be counted; so the
 * golden continuations and bit-exact agreement with the plain CPU backend here show that only
 * buffers and the step descriptor cross the seam, as a GPU backend needs. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "context/context.h"
#include "cpu_backend.h"
#include "support/golden_check.h"
#include "support/fixtures.h"
#include "support/handle_backend.h"
#include "llmmini.h"
#include "format/quant.h"
#include "support/shared_data.h"

#define MAX_IDS GOLDEN_MAX_IDS

/* Violations are printed as they happen, so a failing test shows which op refused what. */
static void print_errors(void *user, llmm_log_level level, const char *message) {
    (void)user;
    if (level == LLMM_LOG_ERROR) print_message("%s\n", message);
}

/* name (a model of the shared data, as load_model takes it) packing its weights or not. */
static llmm_model *load_repacked(const char *name, int repack) {
    llmm_model_params mp;
    llmm_model_params_default(&mp, sizeof mp);
    mp.repack_weights = repack;
    return load_model(name, &mp);
}

/* A context on the handle backend (handles = 1) or the plain CPU one. */
static llmm_context *backend_context(const llmm_model *m, int handles, const llmm_context_params *base) {
    llmm_context_params p = *base;
    if (!p.log) p.log = print_errors;
    p.log_level = LLMM_LOG_ERROR;
    llmm_context *c = NULL;
    assert_int_equal(llmm__context_create_on(m, &p, handles ? handle_backend_ops() : NULL, &c), LLMM_OK);
    assert_string_equal(c->be->name, handles ? "handles" : "cpu");
    return c;
}

static llmm_context_params context_params(uint32_t n_ctx, uint32_t n_seq, uint32_t n_batch, llmm_kv_type kv_type) {
    llmm_context_params p;
    llmm_context_params_default(&p, sizeof p);
    p.n_ctx = n_ctx;
    p.n_seq_max = n_seq;
    p.n_batch = n_batch;
    p.n_threads = 2;
    p.kv_type = kv_type;
    return p;
}

/* ---------------------------------------------------------------- golden continuations */

/* The golden figures hold through handles as on the CPU: F32 KV, as the goldens were made. */
static void check_golden(const golden_case *gc, int repack) {
    golden_run g;
    assert_int_equal(golden_load("golden/stories260K", gc->golden, &g), 0);
    llmm_model *m = load_repacked(gc->model, repack);
    const llmm_context_params p = context_params(256, 1, 256, LLMM_KV_F32);
    llmm_context *c = backend_context(m, 1, &p);
    const golden_result r = golden_compare(m, c, &g, gc->prompt);
    const size_t bar = gc->hard_steps < g.n_generated ? gc->hard_steps : g.n_generated;
    if (r.max_logit_diff >= 1e-3 || r.agree < bar)
        fail_msg("%s (repack %d): max |logit diff| %.2e, greedy agreement %zu/%zu (hard bar %zu)", gc->golden, repack,
                 r.max_logit_diff, r.agree, g.n_generated, bar);
    golden_free(&g);
    llmm_context_free(c);
    llmm_model_free(m);
}

static void test_golden_through_handles(void **state) {
    (void)state;
    const unsigned long before = handle_backend_bad_pointers();
    for (int repack = 1; repack >= 0; repack--)
        for (size_t i = 0; i < n_golden_cases; i++) check_golden(&golden_cases[i], repack);
    assert_int_equal(handle_backend_bad_pointers(), before);
}

/* ---------------------------------------------------------------- the same bits as the CPU */

/* Every logits row a scenario reads, in order. */
typedef struct trace {
    float *v;
    size_t n, cap; /* floats */
} trace;

static void trace_row(llmm_context *c, trace *t, size_t row) {
    const float *l;
    size_t nv = 0;
    assert_int_equal(llmm_logits(c, row, &l, &nv), LLMM_OK);
    if (t->n + nv > t->cap) {
        const size_t cap = (t->n + nv) * 2;
        float *v = realloc(t->v, cap * sizeof *v);
        assert_non_null(v);
        t->v = v;
        t->cap = cap;
    }
    memcpy(t->v + t->n, l, nv * sizeof *l);
    t->n += nv;
}

/* The argmax of the last row traced (n_vocab values). */
static llmm_token trace_next(const trace *t, size_t n_vocab) { return argmax(t->v + t->n - n_vocab, n_vocab); }

typedef void (*scenario_fn)(llmm_context *c, const llmm_model *m, trace *t);

/* Packed weight copies the model holds now (made by the CPU state inside a handle backend when
 * it decodes first; none on CPUs without the packed kernels). */
static size_t packed_copies(const llmm_model *m) {
    const cpu_copy_set *set = m->backend_shared[LLMM_BACKEND_CPU].data;
    size_t n = 0;
    for (size_t i = 0; set && i < set->n; i++) n += atomic_load(&set->slot[i].state) == LLMM_COPY_READY;
    return n;
}

/* A scenario on the handle backend and on the CPU's, over one model: the same logits bit for bit
 * (the same kernels read the same bytes). The handle context goes first, so that with repack
 * on it is the one making the model's packed copies in its decode steps. */
static void check_same_bits(const char *file, int repack, const llmm_context_params *p, scenario_fn run) {
    llmm_model *m = load_repacked(file, repack);
    const unsigned long before = handle_backend_bad_pointers();
    trace t[2] = {{0}};
    for (int handles = 1; handles >= 0; handles--) {
        llmm_context *c = backend_context(m, handles, p);
        run(c, m, &t[handles]);
        if (handles && repack) print_message("%s: %zu packed copies made through handles\n", file, packed_copies(m));
        llmm_context_free(c);
    }
    assert_int_equal(handle_backend_bad_pointers(), before);
    assert_int_equal(t[0].n, t[1].n);
    assert_true(t[0].n > 0);
    if (memcmp(t[0].v, t[1].v, t[0].n * sizeof *t[0].v) != 0)
        fail_msg("%s (repack %d): logits through handles differ from the CPU's", file, repack);
    free(t[0].v);
    free(t[1].v);
    llmm_model_free(m);
}

static size_t n_vocab_of(const llmm_model *m) {
    llmm_model_info info = {.size = sizeof info};
    assert_int_equal(llmm_model_get_info(m, &info), LLMM_OK);
    return info.n_vocab;
}

/* Six sequences prefilled one by one, then decoded together: a decode step's descriptor
 * carries a block table per sequence, and the packed copies are made in these steps. */
static void batched_decode(llmm_context *c, const llmm_model *m, trace *t) {
    enum { S = 6, STEPS = 12 };
    const char *prompts[S] = {"Once upon a time", "The dog", "A big red ball", "Lily", "Tim and Sam", "One day"};
    const size_t nv = n_vocab_of(m);
    llmm_seq_id seqs[S];
    llmm_token next[S];
    for (int s = 0; s < S; s++) {
        llmm_token ids[MAX_IDS];
        const size_t n = tokenize(m, prompts[s], ids, MAX_IDS);
        seqs[s] = s;
        assert_int_equal(llmm_prefill(c, s, ids, n, LLMM_PREFILL_ALL_LOGITS), LLMM_OK);
        for (size_t i = 0; i < n; i++) trace_row(c, t, i);
        next[s] = trace_next(t, nv);
    }
    for (int step = 0; step < STEPS; step++) {
        /* sequences drop out and come back, so batches of every size from 3 to S run */
        const size_t n = S - (size_t)(step % 4);
        assert_int_equal(llmm_decode(c, seqs, next, n), LLMM_OK);
        for (size_t s = 0; s < n; s++) {
            trace_row(c, t, s);
            next[s] = trace_next(t, nv);
        }
    }
}

static void test_batched_decode_through_handles(void **state) {
    (void)state;
    const char *files[] = {"stories260K-q4_0.gguf", "stories260K-q8_0.gguf", "stories260K.gguf"};
    const llmm_kv_type kv[] = {LLMM_KV_Q8, LLMM_KV_F16, LLMM_KV_F32};
    for (int repack = 1; repack >= 0; repack--)
        for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
            /* blocks of 4 positions: prompts and decodes cross block boundaries */
            llmm_context_params p = context_params(64, 6, 5, kv[i]);
            p.kv_block_size = 4;
            check_same_bits(files[i], repack, &p, batched_decode);
        }
}

/* A fork shares the prompt's blocks and copies the partly filled last one when either side
 * writes it (the backend's copy on pool handles); a second sequence with the same prompt
 * takes full blocks from the prefix cache; a saved sequence comes back through download and
 * upload. */
static void fork_prefix_state(llmm_context *c, const llmm_model *m, trace *t) {
    const size_t nv = n_vocab_of(m);
    llmm_token ids[MAX_IDS];
    const size_t n = tokenize(m, "Once upon a time there was a little dog", ids, MAX_IDS);
    assert_true(n % 4 != 0); /* the last block is shared partly filled */
    assert_int_equal(llmm_prefill(c, 0, ids, n, 0), LLMM_OK);
    trace_row(c, t, 0);
    llmm_seq_id fork = -1;
    assert_int_equal(llmm_seq_fork(c, 0, &fork), LLMM_OK);
    llmm_seq_id both[2] = {0, fork};
    llmm_token next[2] = {trace_next(t, nv), ids[1]}; /* the fork goes its own way */
    for (int step = 0; step < 6; step++) {
        assert_int_equal(llmm_decode(c, both, next, 2), LLMM_OK);
        for (size_t s = 0; s < 2; s++) {
            trace_row(c, t, s);
            next[s] = trace_next(t, nv);
        }
    }
    /* the same prompt again: its full blocks come from the prefix cache */
    llmm_context_stats st = {.size = sizeof st};
    assert_int_equal(llmm_context_get_stats(c, &st), LLMM_OK);
    const uint64_t hits = st.prefix_hits;
    assert_int_equal(llmm_prefill(c, 2, ids, n, 0), LLMM_OK);
    trace_row(c, t, 0);
    assert_int_equal(llmm_context_get_stats(c, &st), LLMM_OK);
    assert_true(st.prefix_hits > hits);
    /* sequence 0 saved and loaded into sequence 3: both continue alike */
    size_t need = 0, bytes = 0;
    assert_int_equal(llmm_seq_save_buffer(c, 0, 1, NULL, 0, &need), LLMM_ERR_BUFFER_TOO_SMALL);
    void *buf = malloc(need);
    assert_non_null(buf);
    assert_int_equal(llmm_seq_save_buffer(c, 0, 1, buf, need, &bytes), LLMM_OK);
    assert_int_equal(llmm_seq_load_buffer(c, 3, buf, bytes), LLMM_OK);
    free(buf);
    llmm_seq_id pair[2] = {0, 3};
    llmm_token same[2] = {next[0], next[0]};
    assert_int_equal(llmm_decode(c, pair, same, 2), LLMM_OK);
    trace_row(c, t, 0);
    trace_row(c, t, 1);
    assert_memory_equal(t->v + t->n - 2 * nv, t->v + t->n - nv, nv * sizeof *t->v);
}

static void test_fork_prefix_cache_and_state_through_handles(void **state) {
    (void)state;
    llmm_context_params p = context_params(64, 4, 8, LLMM_KV_F16);
    p.kv_block_size = 4;
    p.prefix_cache = 1;
    check_same_bits("stories260K-q8_0.gguf", 1, &p, fork_prefix_state);
}

/* ---------------------------------------------------------------- abort */

static int abort_after(void *user) { return --*(int *)user < 0; }

/* An abort in the middle of a step still ends it (the handle backend refuses a step_begin
 * while one is open), and the prefill that follows gives the CPU's logits. */
static void test_abort_then_prefill(void **state) {
    (void)state;
    const unsigned long before = handle_backend_bad_pointers();
    llmm_model *m = load_repacked("stories260K.gguf", 1);
    llmm_token ids[MAX_IDS];
    const size_t n = tokenize(m, "Once upon a time there was", ids, MAX_IDS);
    int budget = 2;
    llmm_context_params p = context_params(64, 1, 4, LLMM_KV_F32);
    p.abort = abort_after;
    p.abort_user = &budget;
    llmm_context *c = backend_context(m, 1, &p);
    assert_int_equal(llmm_prefill(c, 0, ids, n, 0), LLMM_ERR_ABORTED);
    size_t len;
    assert_int_equal(llmm_seq_length(c, 0, &len), LLMM_OK);
    assert_int_equal(len, 0);
    budget = 1000;
    assert_int_equal(llmm_prefill(c, 0, ids, n, 0), LLMM_OK);
    const float *got;
    size_t nv;
    assert_int_equal(llmm_logits(c, 0, &got, &nv), LLMM_OK);

    llmm_context_params plain = context_params(64, 1, 4, LLMM_KV_F32);
    llmm_context *cpu = backend_context(m, 0, &plain);
    assert_int_equal(llmm_prefill(cpu, 0, ids, n, 0), LLMM_OK);
    const float *want;
    assert_int_equal(llmm_logits(cpu, 0, &want, &nv), LLMM_OK);
    assert_memory_equal(got, want, nv * sizeof *got);
    assert_int_equal(handle_backend_bad_pointers(), before);
    llmm_context_free(cpu);
    llmm_context_free(c);
    llmm_model_free(m);
}

/* ---------------------------------------------------------------- refusals */

/* The last error message logged, for the refusal test. */
typedef struct last_log {
    char msg[512];
    int errors;
} last_log;

static void keep_last(void *user, llmm_log_level level, const char *message) {
    last_log *l = user;
    if (level != LLMM_LOG_ERROR) return;
    snprintf(l->msg, sizeof l->msg, "%s", message);
    l->errors++;
}

/* The op failed with BACKEND, logged its name and counted one violation, in its state and
 * the process's. */
static void expect_refused(llmm_status st, const char *op, const void *be_state, last_log *log, unsigned long *count) {
    assert_int_equal(st, LLMM_ERR_BACKEND);
    char want[64];
    snprintf(want, sizeof want, ": %s: ", op);
    if (!strstr(log->msg, want)) fail_msg("op %s: the log says \"%s\"", op, log->msg);
    (*count)++;
    assert_int_equal(handle_backend_state_bad_pointers(be_state), *count);
    log->msg[0] = '\0';
}

/* Ops handed host pointers, freed handles or ranges past a buffer fail without touching them
 * (a fault would end the test); then the same ops on proper handles work. */
static void test_host_pointer_refused(void **state) {
    (void)state;
    enum { N = 37 };
    const llmm_backend_ops *be = handle_backend_ops();
    assert_true(llmm__backend_table_ok(be));
    last_log log = {{0}, 0};
    const llmm_logger logger = {keep_last, &log, LLMM_LOG_ERROR};
    const llmm_backend_config cfg = {.n_threads = 1, .log = &logger};
    void *s = NULL;
    assert_int_equal(be->init(&cfg, &s), LLMM_OK);
    const unsigned long total = handle_backend_bad_pointers();
    unsigned long count = 0;

    float host[N], back[N];
    for (int i = 0; i < N; i++) host[i] = (float)i * 0.5f - 3.0f;
    void *a = NULL, *b = NULL;
    assert_int_equal(be->buffer_alloc(s, N * sizeof(float), &a), LLMM_OK);
    assert_int_equal(be->buffer_alloc(s, N * sizeof(float), &b), LLMM_OK);
    assert_ptr_not_equal(a, b);

    expect_refused(be->add(s, host, b, N), "add", s, &log, &count);           /* host dst */
    expect_refused(be->add(s, a, host, N), "add", s, &log, &count);           /* host src */
    expect_refused(be->scale(s, (float *)a + 1, N, 2.0f), "scale", s, &log, &count); /* past the end */
    expect_refused(be->rms_norm(s, a, host, b, 1, N, 1e-5f), "rms_norm", s, &log, &count);
    expect_refused(be->upload(s, host, host, sizeof host), "upload", s, &log, &count);
    expect_refused(be->download(s, b, a, sizeof host), "download", s, &log, &count); /* handle as host dst */
    expect_refused(be->copy(s, a, host, sizeof host), "copy", s, &log, &count);
    llmm_tensor fake = {.data = host, .type = LLMM_TYPE_F32, .ne0 = N, .ne1 = 1, .row_bytes = sizeof host};
    expect_refused(be->matmul(s, &fake, a, 1, b), "matmul", s, &log, &count); /* not a prepared weight */
    expect_refused(be->kv_write(s, 0, a, b), "kv_write", s, &log, &count);    /* outside a step */
    expect_refused(be->step_end(s), "step_end", s, &log, &count);
    assert_int_equal(handle_backend_bad_pointers() - total, count);

    /* the proper calls: upload, b = a + a, download */
    assert_int_equal(be->upload(s, a, host, sizeof host), LLMM_OK);
    assert_int_equal(be->copy(s, b, a, sizeof host), LLMM_OK);
    assert_int_equal(be->add(s, b, a, N), LLMM_OK);
    assert_int_equal(be->scale(s, (float *)b + 1, N - 1, 0.5f), LLMM_OK); /* an offset handle */
    assert_int_equal(be->download(s, back, b, sizeof back), LLMM_OK);
    assert_true(back[0] == 2 * host[0]);
    for (int i = 1; i < N; i++) assert_true(back[i] == host[i]);

    /* a freed buffer's handle stays invalid */
    be->buffer_free(s, a);
    expect_refused(be->download(s, back, a, sizeof back), "download", s, &log, &count);
    be->buffer_free(s, b);
    assert_int_equal(handle_backend_state_bad_pointers(s), count);
    be->shutdown(s);
    assert_int_equal(handle_backend_bad_pointers() - total, count);
    assert_int_equal(log.errors, (int)count);
}

/* A violation inside a working context fails that op alone: the context goes on computing the
 * CPU's logits. */
static void test_refusal_inside_a_context(void **state) {
    (void)state;
    llmm_model *m = load_repacked("stories260K.gguf", 1);
    llmm_token ids[MAX_IDS];
    const size_t n = tokenize(m, "The little dog", ids, MAX_IDS);
    last_log log = {{0}, 0};
    llmm_context_params p = context_params(64, 1, 16, LLMM_KV_F32);
    p.log = keep_last;
    p.log_user = &log;
    llmm_context *c = backend_context(m, 1, &p);
    unsigned long count = handle_backend_state_bad_pointers(c->be_state);
    assert_int_equal(count, 0);
    assert_int_equal(llmm_prefill(c, 0, ids, n, 0), LLMM_OK);
    float x[64] = {1.0f};
    const size_t dim = m->hp.n_embd;
    assert_true(dim <= 64);
    expect_refused(c->be->rms_norm(c->be_state, x, c->w.output_norm.data, c->act.xb, 1, dim, 1e-5f), "rms_norm",
                   c->be_state, &log, &count);
    expect_refused(c->be->download(c->be_state, x, x, sizeof x), "download", c->be_state, &log, &count);
    const llmm_seq_id seq = 0;
    assert_int_equal(llmm_decode(c, &seq, &ids[1], 1), LLMM_OK);
    const float *got;
    size_t nv;
    assert_int_equal(llmm_logits(c, 0, &got, &nv), LLMM_OK);

    llmm_context *cpu = backend_context(m, 0, &p);
    assert_int_equal(llmm_prefill(cpu, 0, ids, n, 0), LLMM_OK);
    assert_int_equal(llmm_decode(cpu, &seq, &ids[1], 1), LLMM_OK);
    const float *want;
    assert_int_equal(llmm_logits(cpu, 0, &want, &nv), LLMM_OK);
    assert_memory_equal(got, want, nv * sizeof *got);
    assert_int_equal(handle_backend_state_bad_pointers(c->be_state), count);
    llmm_context_free(cpu);
    llmm_context_free(c);
    llmm_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_host_pointer_refused),
        cmocka_unit_test(test_refusal_inside_a_context),
        cmocka_unit_test(test_golden_through_handles),
        cmocka_unit_test(test_batched_decode_through_handles),
        cmocka_unit_test(test_fork_prefix_cache_and_state_through_handles),
        cmocka_unit_test(test_abort_then_prefill),
    };
    return cmocka_run_group_tests_name("backend_handles", tests, NULL, NULL);
}
