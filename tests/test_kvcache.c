/* The paged KV cache: block allocator invariants under random operations (against a simple
 * model of each sequence's tokens), copy-on-write, batched decode, saved states and their
 * refusal when corrupted, pool exhaustion, memory estimates, stats and the prefix cache. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support/alloc_hooks.h"
#include "backend/select.h"
#include "context/context.h"
#include "cpu_backend.h"
#include "kv/kvcache.h"
#include "llmmini.h"
#include "support/fixtures.h"
#include "support/rng.h"

#define MAX_IDS 512

/* ================================================================== the allocator alone */

enum { A_LAYERS = 2, A_HEADS = 2, A_HEAD_DIM = 2, A_KV_DIM = A_HEADS * A_HEAD_DIM, A_BS = 4, A_SEQS = 8, A_CTX = 40, A_BLOCKS = 24 };

typedef struct model_seq {
    llmm_token tok[A_CTX];
    uint32_t len;
    int created;
} model_seq;

/* The operations' stream, seeded by each run. */
static test_rng rng;

typedef struct alloc_run {
    llmm_kv_store kv;
    void *be;
    model_seq m[A_SEQS];
    int full_refusals, forks;
    uint32_t reused; /* positions attached from the prefix cache */
} alloc_run;

static float k_tag(llmm_token t, uint32_t layer) { return (float)t + 0.25f * (float)layer; }
static float v_tag(llmm_token t, uint32_t layer) { return -(float)t - 0.25f * (float)layer; }

/* The value of position p's K or V row in layer l of seq, read through the view: every
 * element of every head holds the same tag, so a disagreement returns NaN. */
static float row_value(const llmm_kv_store *kv, uint32_t seq, uint32_t l, uint32_t p, int which) {
    const llmm_kv_layout layout = llmm__kv_layout(kv);
    const llmm_kv_view view = kv_layout_view(&layout, l, kv->seqs[seq].blocks);
    const float first = *(const float *)((const uint8_t *)(which ? view.v : view.k) + kv_row_offset(&view, p, 0));
    for (uint32_t h = 0; h < A_HEADS; h++) {
        const float *row = (const float *)((const uint8_t *)(which ? view.v : view.k) + kv_row_offset(&view, p, h));
        for (int e = 0; e < A_HEAD_DIM; e++)
            if (row[e] != first) return NAN;
    }
    return first;
}

/* Rows tagged with their token for positions [from, from + n) of seq, every layer. */
static void write_rows(alloc_run *r, uint32_t seq, const llmm_token *t, uint32_t from, uint32_t n) {
    for (uint32_t i = 0; i < n; i++)
        for (uint32_t l = 0; l < A_LAYERS; l++) {
            float k[A_KV_DIM], v[A_KV_DIM];
            for (int e = 0; e < A_KV_DIM; e++) k[e] = k_tag(t[i], l), v[e] = v_tag(t[i], l);
            const llmm_kv_layout layout = llmm__kv_layout(&r->kv);
            const llmm_kv_view view = kv_layout_view(&layout, l, r->kv.seqs[seq].blocks);
            const int32_t pos = (int32_t)(from + i);
            assert_int_equal(llmm__cpu_kv_store_rows(&view, &pos, 1, k, v, A_KV_DIM), LLMM_OK);
        }
}

static int is_cached(const llmm_kv_store *kv, uint32_t b) { return kv->prefix && kv->prefix[b].key != 0; }

/* Everything kvcache.h promises between steps, and every sequence's K/V matching its tokens. */
static void check_invariants(const alloc_run *r) {
    const llmm_kv_store *kv = &r->kv;
    uint32_t holders[A_BLOCKS] = {0}, seen_free[A_BLOCKS] = {0}, evictable = 0, in_use = 0;
    for (uint32_t q = 0; q < A_SEQS; q++) {
        const kv_seq *s = &kv->seqs[q];
        assert_int_equal(s->len, r->m[q].len);
        assert_int_equal(s->n_blocks, (s->len + A_BS - 1) / A_BS);
        assert_memory_equal(s->tokens, r->m[q].tok, s->len * sizeof(llmm_token));
        for (uint32_t i = 0; i < s->n_blocks; i++) holders[s->blocks[i]]++;
        for (uint32_t p = 0; p < s->len; p++)
            for (uint32_t l = 0; l < A_LAYERS; l++) {
                assert_true(row_value(kv, q, l, p, 0) == k_tag(s->tokens[p], l));
                assert_true(row_value(kv, q, l, p, 1) == v_tag(s->tokens[p], l));
            }
    }
    for (uint32_t b = 0; b < A_BLOCKS; b++) {
        assert_int_equal(kv->refcount[b], holders[b] + (uint32_t)is_cached(kv, b));
        in_use += kv->refcount[b] > 0;
        evictable += is_cached(kv, b) && kv->refcount[b] == 1;
    }
    for (uint32_t i = 0; i < kv->n_free; i++) {
        const uint32_t b = kv->free_ids[i];
        assert_true(b < A_BLOCKS);
        assert_int_equal(seen_free[b]++, 0); /* no double free */
        assert_int_equal(kv->refcount[b], 0);
    }
    assert_int_equal(kv->n_free + in_use, A_BLOCKS); /* no leak */
    assert_int_equal(kv->n_evictable, evictable);
}

static int32_t unused_seq(const alloc_run *r) {
    for (int32_t q = 0; q < A_SEQS; q++)
        if (!r->m[q].created && r->m[q].len == 0) return q;
    return -1;
}

static void op_append(alloc_run *r, uint32_t q, uint32_t n, uint32_t alphabet) {
    model_seq *m = &r->m[q];
    if (n > A_CTX - m->len) n = A_CTX - m->len;
    llmm_token t[A_CTX];
    for (uint32_t i = 0; i < n; i++) t[i] = 1 + (llmm_token)rng_below(&rng, alphabet);
    const uint32_t before = m->len;
    const uint32_t reused = llmm__kv_prefix_attach(&r->kv, q, t, n);
    llmm_status st = llmm__kv_reserve(&r->kv, q, n - reused);
    r->reused += st ? 0 : reused;
    if (st == LLMM_ERR_CONTEXT_FULL) {
        llmm__kv_truncate(&r->kv, q, before);
        r->full_refusals++;
        return;
    }
    assert_int_equal(st, LLMM_OK);
    write_rows(r, q, t + reused, before + reused, n - reused);
    llmm__kv_commit(&r->kv, q, t + reused, n - reused);
    memcpy(m->tok + before, t, n * sizeof *t);
    m->len += n;
}

static void random_step(alloc_run *r, uint32_t alphabet) {
    const uint32_t q = rng_below(&rng, A_SEQS);
    model_seq *m = &r->m[q];
    switch (rng_below(&rng, 6)) {
    case 0: { /* create */
        const int32_t id = unused_seq(r);
        assert_int_equal(llmm__kv_unused_seq(&r->kv), id);
        if (id >= 0) r->kv.seqs[id].created = r->m[id].created = 1;
        break;
    }
    case 1: { /* fork q */
        const int32_t dst = unused_seq(r);
        if (dst < 0 || (uint32_t)dst == q) break;
        llmm__kv_fork(&r->kv, q, (uint32_t)dst);
        r->m[dst] = *m;
        r->kv.seqs[dst].created = r->m[dst].created = 1;
        r->forks++;
        break;
    }
    case 2:
    case 3: /* append */
        op_append(r, q, 1 + rng_below(&rng, 9), alphabet);
        break;
    case 4: { /* truncate */
        const uint32_t keep = m->len ? rng_below(&rng, m->len + 1) : 0;
        llmm__kv_truncate(&r->kv, q, keep);
        m->len = keep;
        break;
    }
    default: /* free */
        llmm__kv_truncate(&r->kv, q, 0);
        r->kv.seqs[q].created = 0;
        m->len = 0;
        m->created = 0;
    }
}

static void run_allocator(int prefix_cache, unsigned seed) {
    alloc_run *r = calloc(1, sizeof *r);
    assert_non_null(r);
    const llmm_backend_config cfg = {.n_threads = 1};
    assert_int_equal(llmm__cpu_backend.init(&cfg, &r->be), LLMM_OK);
    const kv_config kc = {A_LAYERS, A_HEADS, A_HEAD_DIM, A_SEQS, A_CTX, A_BS, LLMM_KV_F32, A_BLOCKS, prefix_cache};
    llmm_diag d = {{0}};
    assert_int_equal(llmm__kv_init(&r->kv, &llmm__cpu_backend, r->be, NULL, &kc, &d), LLMM_OK);
    rng_seed(&rng, seed);
    /* a small alphabet makes prompts repeat, so the prefix cache finds blocks */
    const uint32_t alphabet = prefix_cache ? 2 : 1000;
    for (int step = 0; step < 4000; step++) {
        random_step(r, alphabet);
        check_invariants(r);
    }
    print_message("allocator%s: %d forks, %d refusals for a full pool, %u positions from the prefix cache\n",
                  prefix_cache ? " with prefix cache" : "", r->forks, r->full_refusals, r->reused);
    assert_true(r->forks > 50 && r->full_refusals > 10);
    assert_true(prefix_cache ? r->reused > 100 : r->reused == 0);
    for (uint32_t q = 0; q < A_SEQS; q++) llmm__kv_truncate(&r->kv, q, 0), r->m[q].len = 0;
    check_invariants(r);
    /* every cached block is evictable now; eviction hands each back with refcount 0 */
    for (uint32_t b; (b = llmm__kv_prefix_evict(&r->kv)) != KV_NO_BLOCK;) {
        assert_int_equal(r->kv.refcount[b], 0);
        r->kv.free_ids[r->kv.n_free++] = b;
    }
    assert_int_equal(r->kv.n_free, A_BLOCKS);
    llmm__kv_free(&r->kv);
    llmm__cpu_backend.shutdown(r->be);
    free(r);
}

static void test_allocator_random_ops(void **state) {
    (void)state;
    run_allocator(0, 1234);
}

static void test_allocator_random_ops_prefix_cache(void **state) {
    (void)state;
    run_allocator(1, 4321);
}

/* ================================================================== through the public API */

static llmm_model *load_model_with(const char *name, const llmm_allocator *alloc) {
    llmm_model_params mp;
    llmm_model_params_default(&mp, sizeof mp);
    mp.allocator = alloc;
    return load_model(name, &mp);
}

static llmm_context_params ctx_params(uint32_t n_ctx, uint32_t n_seq, llmm_kv_type kv_type) {
    llmm_context_params p;
    llmm_context_params_default(&p, sizeof p);
    p.n_ctx = n_ctx;
    p.n_seq_max = n_seq;
    p.n_batch = 64;
    p.n_threads = 1;
    p.kv_type = kv_type;
    return p;
}

static const float *logits_row(llmm_context *c, size_t i) {
    const float *l = NULL;
    assert_int_equal(llmm_logits(c, i, &l, NULL), LLMM_OK);
    return l;
}

static void copy_logits(llmm_context *c, size_t i, float *dst, size_t n_vocab) {
    memcpy(dst, logits_row(c, i), n_vocab * sizeof *dst);
}

static void decode_one(llmm_context *c, llmm_seq_id s, llmm_token t) {
    assert_int_equal(llmm_decode(c, &s, &t, 1), LLMM_OK);
}

#define N_VOCAB 512 /* stories260K */
static const char *const k_prompt = "Once upon a time there was a little dog who liked to run in the park."; /* 25 ids */

/* Largest |a - b| / max(1, |a|). A plain compare, not an fmax reduction: GCC 12's aarch64
 * vectorizer crashes (internal compiler error) on the fmax form of this loop. */
static double worst_relative_difference(const float *a, const float *b, size_t n) {
    double worst = 0;
    for (size_t k = 0; k < n; k++) {
        const double mag = fabs((double)a[k]) > 1.0 ? fabs((double)a[k]) : 1.0;
        const double rel = fabs((double)a[k] - (double)b[k]) / mag;
        if (rel > worst) worst = rel;
    }
    return worst;
}

/* Fork after a prompt whose last block is partly filled; both sides then append different
 * tokens (so the shared tail block is copied on write). Each side's logits must equal an
 * unforked run of the same tokens in a context of its own. */
static void test_fork_copy_on_write(void **state) {
    (void)state;
    llmm_model *m = load_model("stories260K.gguf", NULL);
    llmm_token ids[MAX_IDS];
    const size_t n = tokenize(m, k_prompt, ids, MAX_IDS);
    assert_true(n % 16 != 0);
    const llmm_token xs[4] = {30, 31, 32, 33}, ys[4] = {40, 41, 42, 43};
    llmm_context_params p = ctx_params(64, 4, LLMM_KV_F16);
    llmm_context *c = make_context(m, &p);
    assert_int_equal(llmm_prefill(c, 0, ids, n, 0), LLMM_OK);
    llmm_seq_id b = -1;
    assert_int_equal(llmm_seq_fork(c, 0, &b), LLMM_OK);
    assert_int_equal(b, 1);
    llmm_context_stats st = {.size = sizeof st};
    assert_int_equal(llmm_context_get_stats(c, &st), LLMM_OK);
    assert_int_equal(st.blocks_used, 2);
    assert_int_equal(st.blocks_shared, 2);
    float fx[N_VOCAB], fy[N_VOCAB];
    for (int i = 0; i < 4; i++) {
        const llmm_seq_id seqs[2] = {0, b};
        const llmm_token toks[2] = {xs[i], ys[i]};
        assert_int_equal(llmm_decode(c, seqs, toks, 2), LLMM_OK);
    }
    copy_logits(c, 0, fx, N_VOCAB);
    copy_logits(c, 1, fy, N_VOCAB);
    assert_int_equal(llmm_context_get_stats(c, &st), LLMM_OK);
    assert_int_equal(st.blocks_shared, 1); /* the full first block; the tail was copied */
    assert_int_equal(st.blocks_used, 3);
    for (int side = 0; side < 2; side++) {
        llmm_context *solo = make_context(m, &p);
        assert_int_equal(llmm_prefill(solo, 0, ids, n, 0), LLMM_OK);
        for (int i = 0; i < 4; i++) decode_one(solo, 0, side ? ys[i] : xs[i]);
        /* a batch of two rows may take other kernel tiles than a single row: equal within
         * float rounding, not bit for bit */
        const float *want = logits_row(solo, 0), *got = side ? fy : fx;
        const double worst = worst_relative_difference(want, got, N_VOCAB);
        if (worst > 0) print_message("fork side %d: max relative difference %.2e\n", side, worst);
        assert_true(worst < 1e-4);
        llmm_context_free(solo);
    }
    llmm_context_free(c);
    llmm_model_free(m);
}

/* S sequences decoded together give the logits each gives decoded alone (within 1e-4
 * relative), for S = 1, 4, 16, 64. The sequences have different lengths and tokens. */
static void test_batched_decode_matches_single(void **state) {
    (void)state;
    llmm_model *m = load_model("stories260K.gguf", NULL);
    llmm_token ids[MAX_IDS];
    const size_t n = tokenize(m, k_prompt, ids, MAX_IDS);
    const size_t sizes[] = {1, 4, 16, 64};
    llmm_context_params p = ctx_params(64, 64, LLMM_KV_F16);
    llmm_context_params p1 = ctx_params(64, 1, LLMM_KV_F16);
    llmm_context *solo = make_context(m, &p1);
    float *batched = malloc(64 * N_VOCAB * sizeof *batched);
    assert_non_null(batched);
    for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++) {
        const size_t S = sizes[si];
        llmm_context *c = make_context(m, &p);
        llmm_seq_id seqs[64];
        llmm_token next[64];
        for (size_t s = 0; s < S; s++) {
            seqs[s] = (llmm_seq_id)s;
            assert_int_equal(llmm_prefill(c, seqs[s], ids, 2 + s % (n - 2), 0), LLMM_OK);
            next[s] = (llmm_token)(5 + 7 * s);
        }
        for (int step = 0; step < 3; step++) {
            assert_int_equal(llmm_decode(c, seqs, next, S), LLMM_OK);
            for (size_t s = 0; s < S; s++) next[s] = (llmm_token)((next[s] * 13 + 1) % N_VOCAB);
        }
        for (size_t s = 0; s < S; s++) copy_logits(c, s, batched + s * N_VOCAB, N_VOCAB);
        double worst = 0;
        for (size_t s = 0; s < S; s++) {
            assert_int_equal(llmm_seq_clear(solo, 0), LLMM_OK);
            assert_int_equal(llmm_prefill(solo, 0, ids, 2 + s % (n - 2), 0), LLMM_OK);
            llmm_token t = (llmm_token)(5 + 7 * s);
            for (int step = 0; step < 3; step++, t = (llmm_token)((t * 13 + 1) % N_VOCAB)) decode_one(solo, 0, t);
            const float *one = logits_row(solo, 0);
            worst = fmax(worst, worst_relative_difference(one, batched + s * N_VOCAB, N_VOCAB));
        }
        print_message("batched decode S=%zu: worst relative logit difference to single decode %.2e\n", S, worst);
        assert_true(worst <= 1e-4);
        llmm_context_free(c);
    }
    free(batched);
    llmm_context_free(solo);
    llmm_model_free(m);
}

/* 256 sequence ids: create hands out unused ids, forks share one prompt, one decode step
 * runs all 256 rows, and freeing an id makes it available again. */
static void test_256_sequences(void **state) {
    (void)state;
    llmm_model *m = load_model("stories260K.gguf", NULL);
    llmm_token ids[MAX_IDS];
    const size_t n = tokenize(m, k_prompt, ids, MAX_IDS);
    llmm_context_params p = ctx_params(32, 256, LLMM_KV_Q8);
    p.n_ctx_total = 258 * 16; /* the shared full block, and a tail per sequence (+1) */
    llmm_context *c = make_context(m, &p);
    llmm_seq_id first;
    assert_int_equal(llmm_seq_create(c, &first), LLMM_OK);
    assert_int_equal(first, 0);
    assert_int_equal(llmm_prefill(c, first, ids, n, 0), LLMM_OK);
    llmm_seq_id seqs[256];
    llmm_token toks[256];
    seqs[0] = first;
    for (int i = 1; i < 256; i++) assert_int_equal(llmm_seq_fork(c, first, &seqs[i]), LLMM_OK);
    for (int i = 0; i < 256; i++) toks[i] = (llmm_token)(i + 3);
    llmm_seq_id extra;
    assert_int_equal(llmm_seq_create(c, &extra), LLMM_ERR_CONTEXT_FULL);
    assert_int_equal(llmm_decode(c, seqs, toks, 256), LLMM_OK);
    llmm_context_stats st = {.size = sizeof st};
    assert_int_equal(llmm_context_get_stats(c, &st), LLMM_OK);
    assert_int_equal(st.n_seq_used, 256);
    assert_int_equal(st.blocks_used, 1 + 256); /* the shared full block, a private tail each */
    float row200[N_VOCAB];
    copy_logits(c, 200, row200, N_VOCAB);
    assert_int_equal(llmm_seq_free(c, seqs[77]), LLMM_OK);
    assert_int_equal(llmm_seq_create(c, &extra), LLMM_OK);
    assert_int_equal(extra, seqs[77]);
    /* the same row alone */
    llmm_context_params p1 = ctx_params(32, 1, LLMM_KV_Q8);
    llmm_context *solo = make_context(m, &p1);
    assert_int_equal(llmm_prefill(solo, 0, ids, n, 0), LLMM_OK);
    decode_one(solo, 0, toks[200]);
    const float *one = logits_row(solo, 0);
    for (size_t k = 0; k < N_VOCAB; k++) assert_true(fabs(one[k] - row200[k]) <= 1e-4 * fmax(1.0, fabs(one[k])));
    llmm_context_free(solo);
    llmm_context_free(c);
    llmm_model_free(m);
}

/* ------------------------------------------------------------------ saved states */

static uint8_t *save_state(llmm_context *c, llmm_seq_id s, size_t *n) {
    size_t need = 0;
    assert_int_equal(llmm_seq_save_buffer(c, s, 0, NULL, 0, &need), LLMM_ERR_BUFFER_TOO_SMALL);
    uint8_t *buf = malloc(need);
    assert_non_null(buf);
    assert_int_equal(llmm_seq_save_buffer(c, s, 0, buf, need, n), LLMM_OK);
    assert_true(*n <= need);
    return buf;
}

/* Save after a prompt, load into another context (and another id); the next token's logits
 * are bit-identical, for each KV type, through a buffer and through a file. */
static void test_save_load_round_trip(void **state) {
    (void)state;
    llmm_model *m = load_model("stories260K.gguf", NULL);
    llmm_token ids[MAX_IDS];
    const size_t n = tokenize(m, k_prompt, ids, MAX_IDS);
    const llmm_kv_type types[] = {LLMM_KV_F32, LLMM_KV_F16, LLMM_KV_Q8};
    for (size_t ti = 0; ti < 3; ti++) {
        llmm_context_params p = ctx_params(64, 4, types[ti]);
        p.kv_block_size = ti == 1 ? 4 : 16; /* the layout does not depend on the block size */
        llmm_context *a = make_context(m, &p);
        p.kv_block_size = 16;
        llmm_context *b = make_context(m, &p);
        assert_int_equal(llmm_prefill(a, 0, ids, n, 0), LLMM_OK);
        size_t bytes;
        uint8_t *img = save_state(a, 0, &bytes);
        assert_int_equal(llmm_seq_load_buffer(b, 2, img, bytes), LLMM_OK);
        size_t len;
        assert_int_equal(llmm_seq_length(b, 2, &len), LLMM_OK);
        assert_int_equal(len, n);
        decode_one(a, 0, 77);
        decode_one(b, 2, 77);
        assert_memory_equal(logits_row(a, 0), logits_row(b, 0), N_VOCAB * sizeof(float));
        /* through a file, into a sequence that held other tokens */
        char path[] = "/tmp/llmm-test-state-XXXXXX";
        const int fd = mkstemp(path);
        assert_true(fd >= 0);
        assert_int_equal(llmm_seq_save(a, 0, path, 5), LLMM_OK);
        assert_int_equal(llmm_seq_load(b, 2, path), LLMM_OK);
        remove(path);
        decode_one(a, 0, 78);
        decode_one(b, 2, 78);
        assert_memory_equal(logits_row(a, 0), logits_row(b, 0), N_VOCAB * sizeof(float));
        print_message("saved state, KV %s: %zu tokens in %zu bytes\n", ti == 0 ? "f32" : ti == 1 ? "f16" : "q8", n,
                      bytes);
        free(img);
        llmm_context_free(a);
        llmm_context_free(b);
    }
    llmm_model_free(m);
}

/* A load that must be refused: BAD_FILE, a message containing `why`, seq 1 unchanged. */
static void expect_refused(llmm_context *c, const uint8_t *img, size_t n, const char *why) {
    assert_int_equal(llmm_seq_load_buffer(c, 1, img, n), LLMM_ERR_BAD_FILE);
    if (!strstr(llmm_context_last_error(c), why))
        fail_msg("expected '%s' in: %s", why, llmm_context_last_error(c));
    size_t len;
    assert_int_equal(llmm_seq_length(c, 1, &len), LLMM_OK);
    assert_int_equal(len, 3);
}

static void test_corrupted_states_refused(void **state) {
    (void)state;
    llmm_model *m = load_model("stories260K.gguf", NULL);
    llmm_token ids[MAX_IDS];
    const size_t n = tokenize(m, k_prompt, ids, MAX_IDS);
    llmm_context_params p = ctx_params(64, 2, LLMM_KV_F16);
    llmm_context *c = make_context(m, &p);
    assert_int_equal(llmm_prefill(c, 0, ids, n, 0), LLMM_OK);
    assert_int_equal(llmm_prefill(c, 1, ids, 3, 0), LLMM_OK); /* the target, must survive */
    size_t bytes;
    uint8_t *img = save_state(c, 0, &bytes);
    uint8_t *bad = malloc(bytes + 1);
    assert_non_null(bad);
    /* every header byte (magic, version, fingerprint, sizes, both checksums) */
    for (size_t i = 0; i < 112; i++) {
        memcpy(bad, img, bytes);
        bad[i] ^= 0x10;
        expect_refused(c, bad, bytes, i < 8 ? "magic" : i < 16 ? "version" : "checksum");
    }
    /* payload bytes: first, middle, last */
    const size_t at[3] = {112, 112 + (bytes - 112) / 2, bytes - 1};
    for (int i = 0; i < 3; i++) {
        memcpy(bad, img, bytes);
        bad[at[i]] ^= 0x01;
        expect_refused(c, bad, bytes, "payload checksum");
    }
    /* truncated anywhere, or with a byte appended */
    const size_t cuts[] = {0, 7, 111, 112, 113, bytes / 2, bytes - 1};
    for (size_t i = 0; i < sizeof cuts / sizeof *cuts; i++) expect_refused(c, img, cuts[i], "truncated");
    memcpy(bad, img, bytes);
    bad[bytes] = 0;
    expect_refused(c, bad, bytes + 1, "trailing");
    /* another KV type */
    llmm_context_params pq = ctx_params(64, 2, LLMM_KV_Q8);
    llmm_context *q8 = make_context(m, &pq);
    assert_int_equal(llmm_seq_load_buffer(q8, 0, img, bytes), LLMM_ERR_BAD_FILE);
    assert_non_null(strstr(llmm_context_last_error(q8), "KV type f16"));
    llmm_context_free(q8);
    /* other models: same shapes with other weights, and another shape */
    const char *others[2] = {"stories260K-q8_0.gguf", "llama-2-tiny-random.gguf"};
    for (int i = 0; i < 2; i++) {
        llmm_model *om = load_model(others[i], NULL);
        llmm_context *oc = make_context(om, &p);
        llmm_token oid[MAX_IDS];
        const size_t on = tokenize(om, "Once upon", oid, MAX_IDS);
        assert_int_equal(llmm_prefill(oc, 0, oid, on, 0), LLMM_OK);
        size_t ob;
        uint8_t *oimg = save_state(oc, 0, &ob);
        expect_refused(c, oimg, ob, "another model");
        free(oimg);
        llmm_context_free(oc);
        llmm_model_free(om);
    }
    /* files: missing, and truncated */
    assert_int_equal(llmm_seq_load(c, 1, "/nonexistent/state.bin"), LLMM_ERR_IO);
    char path[] = "/tmp/llmm-test-state-XXXXXX";
    const int fd = mkstemp(path);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(img, 1, bytes - 5, f), bytes - 5);
    fclose(f);
    assert_int_equal(llmm_seq_load(c, 1, path), LLMM_ERR_BAD_FILE);
    assert_non_null(strstr(llmm_context_last_error(c), "truncated"));
    remove(path);
    /* the intact image still loads */
    assert_int_equal(llmm_seq_load_buffer(c, 1, img, bytes), LLMM_OK);
    free(bad);
    free(img);
    llmm_context_free(c);
    llmm_model_free(m);
}

/* A version-2 state (from before the format carried recurrent state), written by that release
 * for stories260K: the saved-state fuzz seed with ten tokens, F16 K/V. It still loads into this
 * attention-only model, and the next token's logits equal those of the same ten tokens
 * prefilled here, within 1e-5 relative (kernels may round otherwise than that release's did). */
static void test_loads_format2_state(void **state) {
    (void)state;
    static const llmm_token k_saved[10] = {1, 403, 261, 29, 7, 300, 12, 99, 42, 5};
    static const char path[] = "tests/fuzz/corpus/saved_state/tokens-10";
    llmm_model *m = load_model("stories260K.gguf", NULL);
    llmm_context_params p = ctx_params(64, 2, LLMM_KV_F16);
    llmm_context *c = make_context(m, &p);
    if (llmm_seq_load(c, 0, path) != LLMM_OK) fail_msg("%s: %s", path, llmm_context_last_error(c));
    size_t len = 0;
    assert_int_equal(llmm_seq_length(c, 0, &len), LLMM_OK);
    assert_int_equal(len, 10);
    assert_int_equal(llmm_prefill(c, 1, k_saved, 10, 0), LLMM_OK);
    float loaded[N_VOCAB];
    decode_one(c, 0, 77);
    copy_logits(c, 0, loaded, N_VOCAB);
    decode_one(c, 1, 77);
    const double worst = worst_relative_difference(loaded, logits_row(c, 0), N_VOCAB);
    print_message("format 2 state vs prefilled: worst relative logit difference %.2e\n", worst);
    assert_true(worst <= 1e-5);
    llmm_context_free(c);
    llmm_model_free(m);
}

/* ------------------------------------------------------------------ pool limits */

/* A pool of 2 blocks of 16: a second sequence does not fit, decode stops at 32 positions,
 * a copy-on-write that needs a block fails; every failure leaves every sequence intact. */
static void test_pool_exhausted(void **state) {
    (void)state;
    llmm_model *m = load_model("stories260K.gguf", NULL);
    llmm_token ids[MAX_IDS];
    const size_t n = tokenize(m, k_prompt, ids, MAX_IDS); /* 25: a full block and 9 */
    llmm_context_params p = ctx_params(64, 4, LLMM_KV_F16);
    p.n_ctx_total = 32;
    llmm_context *c = make_context(m, &p);
    assert_int_equal(llmm_prefill(c, 0, ids, n, 0), LLMM_OK);
    float before[N_VOCAB];
    copy_logits(c, 0, before, N_VOCAB);
    assert_int_equal(llmm_prefill(c, 1, ids, n, 0), LLMM_ERR_CONTEXT_FULL);
    assert_non_null(strstr(llmm_context_last_error(c), "KV pool"));
    size_t len;
    assert_int_equal(llmm_seq_length(c, 1, &len), LLMM_OK);
    assert_int_equal(len, 0);
    /* fork shares both blocks; writing into the shared tail needs a third block */
    llmm_seq_id b;
    assert_int_equal(llmm_seq_fork(c, 0, &b), LLMM_OK);
    llmm_token t = 50;
    assert_int_equal(llmm_decode(c, &b, &t, 1), LLMM_ERR_CONTEXT_FULL);
    const llmm_seq_id both[2] = {0, b};
    const llmm_token tt[2] = {50, 50};
    assert_int_equal(llmm_decode(c, both, tt, 2), LLMM_ERR_CONTEXT_FULL);
    assert_int_equal(llmm_seq_length(c, 0, &len), LLMM_OK);
    assert_int_equal(len, n);
    assert_int_equal(llmm_seq_free(c, b), LLMM_OK);
    /* seq 0 goes on to 32 positions, then the pool is full */
    for (size_t i = n; i < 32; i++) decode_one(c, 0, t);
    assert_int_equal(llmm_decode(c, (const llmm_seq_id[]){0}, &t, 1), LLMM_ERR_CONTEXT_FULL);
    /* truncating gives the blocks back, and the same prompt reproduces its logits */
    assert_int_equal(llmm_seq_truncate(c, 0, n - 1), LLMM_OK);
    decode_one(c, 0, ids[n - 1]);
    assert_memory_equal(logits_row(c, 0), before, sizeof before);
    llmm_context_free(c);

    /* a byte budget that cannot hold one block */
    llmm_context_params tiny = ctx_params(64, 1, LLMM_KV_F16);
    tiny.kv_budget_bytes = 100;
    assert_int_equal(llmm_context_create(m, &tiny, &c), LLMM_ERR_NO_MEMORY);
    char msg[512];
    llmm_model_last_error(m, msg, sizeof msg);
    assert_non_null(strstr(msg, "need at least 10240 bytes")); /* 16 x 5 layers x 2 x 32 dims x 2 bytes */
    llmm_model_free(m);
}

/* ------------------------------------------------------------------ estimate and stats */

/* llmm_context_estimate against the bytes llmm_context_create actually requests from the
 * allocator, and after a full-size step (no step may allocate more). Stated margin: the
 * estimate leaves out only the backend's own small state (thread pool), so it must be within
 * 2 % + 16 KiB of what creation allocates, and never below what a step holds. */
static void test_estimate_matches_creation(void **state) {
    (void)state;
    counting_alloc counter = {0};
    const llmm_allocator al = counting_allocator(&counter);
    llmm_model *m = load_model_with("stories260K.gguf", &al);
    const llmm_kv_type types[] = {LLMM_KV_F32, LLMM_KV_Q8};
    for (int i = 0; i < 2; i++) {
        llmm_context_params p = ctx_params(256, 8, types[i]);
        p.n_threads = 2;
        p.prefix_cache = i;
        size_t est = 0;
        assert_int_equal(llmm_context_estimate(m, &p, &est), LLMM_OK);
        const size_t before = counter.bytes;
        llmm_context *c = make_context(m, &p);
        const size_t created = counter.bytes - before;
        llmm_token ids[MAX_IDS];
        for (size_t k = 0; k < 256; k++) ids[k] = (llmm_token)(1 + k % 500);
        assert_int_equal(llmm_prefill(c, 0, ids, 64, 0), LLMM_OK);
        assert_int_equal(llmm_prefill(c, 0, ids, 192, 0), LLMM_OK);
        const llmm_seq_id seqs[8] = {0, 1, 2, 3, 4, 5, 6, 7};
        assert_int_equal(llmm_decode(c, seqs + 1, ids, 7), LLMM_OK);
        const size_t after_steps = counter.bytes - before;
        print_message("estimate %zu bytes, creation allocated %zu, after full steps %zu\n", est, created,
                      after_steps);
        assert_int_equal(after_steps, created);
        assert_true(created <= est + 16384 && est <= created + created / 50 + 16384);
        llmm_context_stats st = {.size = sizeof st};
        assert_int_equal(llmm_context_get_stats(c, &st), LLMM_OK);
        assert_int_equal(st.blocks_total, 8 * 16);
        assert_int_equal(st.tokens_prefilled, 256);
        assert_int_equal(st.tokens_decoded, 7);
        assert_true(st.prefill_ms > 0 && st.decode_ms > 0);
        /* 256 tokens in 16 full blocks; 7 tails of 1 position in 16 slots */
        assert_int_equal(st.blocks_used, 16 + 7);
        assert_true(fabs(st.fragmentation - 7.0 * 15 / (23.0 * 16)) < 1e-9);
        assert_int_equal(st.kv_bytes, st.block_bytes * st.blocks_total);
        llmm_context_free(c);
    }
    /* a budget: the pool is what it buys */
    llmm_context_params p = ctx_params(256, 8, LLMM_KV_F16);
    p.kv_budget_bytes = 1 << 20;
    llmm_context *c = make_context(m, &p);
    llmm_context_stats st = {.size = sizeof st};
    assert_int_equal(llmm_context_get_stats(c, &st), LLMM_OK);
    assert_int_equal(st.blocks_total, (1 << 20) / st.block_bytes);
    assert_true(st.kv_bytes <= p.kv_budget_bytes);
    llmm_context_free(c);
    llmm_model_free(m);
}

/* The split by side on the CPU: everything is host memory, host_bytes is llmm_context_estimate's
 * number, the parts add up to it and the KV pool is the one a created context reports. */
static void test_estimate_memory_cpu(void **state) {
    (void)state;
    llmm_model *m = load_model("stories260K.gguf", NULL);
    for (int i = 0; i < 3; i++) {
        llmm_context_params p = ctx_params(256, 8, i == 1 ? LLMM_KV_Q8 : LLMM_KV_F16);
        p.prefix_cache = i == 1;
        if (i == 2) p.kv_budget_bytes = 1 << 20;
        size_t est = 0;
        assert_int_equal(llmm_context_estimate(m, &p, &est), LLMM_OK);
        llmm_context_memory mem = {.size = sizeof mem};
        assert_int_equal(llmm_context_estimate_memory(m, &p, &mem), LLMM_OK);
        assert_int_equal(mem.size, sizeof mem);
        assert_int_equal(mem.host_bytes, est);
        assert_int_equal(mem.device_bytes, 0);
        assert_int_equal(mem.weights_bytes, 0);
        assert_true(mem.kv_pool_bytes > 0 && mem.activations_bytes > 0 && mem.other_host_bytes > 0);
        assert_int_equal(mem.host_bytes + mem.device_bytes, mem.kv_pool_bytes + mem.weights_bytes +
                                                                mem.activations_bytes + mem.scratch_bytes +
                                                                mem.other_host_bytes);
        llmm_context *c = make_context(m, &p);
        llmm_context_stats st = {.size = sizeof st};
        assert_int_equal(llmm_context_get_stats(c, &st), LLMM_OK);
        assert_int_equal(mem.kv_pool_bytes, st.kv_bytes);
        llmm_context_free(c);
    }
    /* AUTO resolves as creation does: on a machine without CUDA, to the CPU */
    if (llmm__backend_select(LLMM_BACKEND_AUTO) == &llmm__cpu_backend) {
        llmm_context_params p = ctx_params(256, 8, LLMM_KV_F16);
        llmm_context_memory cpu = {.size = sizeof cpu}, aut = {.size = sizeof aut};
        p.backend = LLMM_BACKEND_CPU;
        assert_int_equal(llmm_context_estimate_memory(m, &p, &cpu), LLMM_OK);
        p.backend = LLMM_BACKEND_AUTO;
        assert_int_equal(llmm_context_estimate_memory(m, &p, &aut), LLMM_OK);
        assert_int_equal(aut.host_bytes, cpu.host_bytes);
        assert_int_equal(aut.device_bytes, 0);
        assert_int_equal(aut.scratch_bytes, cpu.scratch_bytes);
    }
    llmm_model_free(m);
}

/* The activations hold logits for n_outputs_max rows, not for every row of a step: by default
 * max(9 x n_seq_max, 1 + LLMM_SPEC_MAX_TOKENS), so with n_seq_max 1 and n_batch 256 the
 * estimate drops by 223 rows of n_vocab floats. A prefill asking for every position's logits is cut into chunks of that many
 * and gives the same logits; a verify step with more rows is refused. */
static void test_logits_rows_sized_by_outputs(void **state) {
    (void)state;
    llmm_model *m = load_model("stories260K.gguf", NULL);
    llmm_model_info info = {.size = sizeof info};
    assert_int_equal(llmm_model_get_info(m, &info), LLMM_OK);
    llmm_context_params p = ctx_params(64, 1, LLMM_KV_F32);
    p.n_batch = 256;
    llmm_context_memory by_default = {.size = sizeof by_default}, every_row = {.size = sizeof every_row};
    assert_int_equal(llmm_context_estimate_memory(m, &p, &by_default), LLMM_OK);
    p.n_outputs_max = 256;
    assert_int_equal(llmm_context_estimate_memory(m, &p, &every_row), LLMM_OK);
    assert_int_equal(every_row.activations_bytes - by_default.activations_bytes,
                     (uint64_t)(256 - (1 + LLMM_SPEC_MAX_TOKENS)) * info.n_vocab * sizeof(float));
    /* all logits of 10 positions through a context with 4 rows of logits per step */
    llmm_token tok[10];
    for (size_t i = 0; i < ARRAY_LEN(tok); i++) tok[i] = (llmm_token)(1 + 37 * i % 500);
    llmm_context *wide = make_context(m, &p);
    p.n_outputs_max = 4;
    llmm_context *narrow = make_context(m, &p);
    assert_int_equal(llmm_prefill(wide, 0, tok, ARRAY_LEN(tok), LLMM_PREFILL_ALL_LOGITS), LLMM_OK);
    assert_int_equal(llmm_prefill(narrow, 0, tok, ARRAY_LEN(tok), LLMM_PREFILL_ALL_LOGITS), LLMM_OK);
    for (size_t i = 0; i < ARRAY_LEN(tok); i++) {
        const float *a = NULL, *b = NULL;
        size_t nv = 0;
        assert_int_equal(llmm_logits(wide, i, &a, &nv), LLMM_OK);
        assert_int_equal(llmm_logits(narrow, i, &b, &nv), LLMM_OK);
        for (size_t t = 0; t < nv; t++) assert_true(fabsf(a[t] - b[t]) <= 1e-4f * (1 + fabsf(a[t])));
    }
    llmm_speculator *spec = NULL;
    assert_int_equal(llmm_speculator_create(narrow, NULL, &spec), LLMM_OK);
    const llmm_spec_item item = {0, 5, tok, 4}; /* 5 rows */
    assert_int_equal(llmm_speculator_verify(spec, &item, 1), LLMM_ERR_INVALID_ARG);
    const llmm_spec_item fits = {0, 5, tok, 3};
    assert_int_equal(llmm_speculator_verify(spec, &fits, 1), LLMM_OK);
    llmm_speculator_free(spec);
    llmm_context_free(narrow);
    llmm_context_free(wide);
    llmm_model_free(m);
}

static size_t fake_scratch_bytes(const llmm_step_shape *shape, int n_threads) {
    (void)n_threads;
    return 1000 + shape->max_rows;
}

/* Only what llmm__ctx_plan_for reads: the flags and the scratch size. */
static const llmm_backend_ops k_fake_device = {
    .api_version = LLMM_BACKEND_API_VERSION,
    .name = "fake-device",
    .kind = LLMM_BACKEND_CUDA,
    .flags = LLMM_BACKEND_DEVICE_MEMORY,
    .scratch_bytes = fake_scratch_bytes,
};

/* Bytes of the file's tensor of that name. */
static size_t file_tensor_bytes(const llmm_model *m, const char *name) {
    const gguf_tensor *t = llmm__gguf_find_tensor(m->gguf, name);
    assert_non_null(t);
    return (size_t)t->n_bytes;
}

/* The split on a backend whose buffers are device memory, through the planner (no such backend
 * is built here): the KV pool, activations, scratch and a copy of the weights go to the device,
 * the tables, row arrays, logits and the context struct stay on the host. Every tensor of the
 * stories260K files is one the forward pass reads (token_embd and output separate), so the
 * weights are the file's tensor bytes; tying output to token_embd counts those bytes once. */
static void test_estimate_device_split(void **state) {
    (void)state;
    const char *files[] = {"stories260K.gguf", "stories260K-q4_0.gguf"};
    for (size_t fi = 0; fi < 2; fi++) {
        llmm_model *m = load_model(files[fi], NULL);
        llmm_context_params p = ctx_params(256, 8, LLMM_KV_Q8), q = p;
        llmm_diag d = {{0}};
        ctx_plan cpu, dev;
        assert_int_equal(llmm__ctx_plan_for(m, &p, &llmm__cpu_backend, &cpu, &d), LLMM_OK);
        assert_int_equal(llmm__ctx_plan_for(m, &q, &k_fake_device, &dev, &d), LLMM_OK);
        assert_int_equal(cpu.device, 0);
        assert_int_equal(cpu.weights, 0);
        assert_int_equal(cpu.host, llmm__ctx_plan_total(&cpu));

        size_t file_bytes = 0;
        for (uint64_t i = 0; i < m->gguf->n_tensors; i++) file_bytes += (size_t)m->gguf->tensors[i].n_bytes;
        assert_int_equal(dev.weights, file_bytes);
        assert_int_equal(dev.scratch, 1000 + dev.shape.max_rows);
        assert_int_equal(dev.kv_pool, cpu.kv_pool);
        assert_int_equal(dev.activations, cpu.activations);
        assert_int_equal(dev.device, dev.kv_pool + dev.activations + dev.scratch + dev.weights);
        assert_int_equal(dev.host, dev.kv_host + dev.step_host + dev.logits + dev.fixed);
        assert_int_equal(dev.host, cpu.host - cpu.kv_pool - cpu.activations - cpu.scratch);
        assert_int_equal(dev.host + dev.device, llmm__ctx_plan_total(&dev));

        llmm_weights tied_w = *m->weights;
        tied_w.output = tied_w.tok_embd;
        llmm_model tied = *m;
        tied.weights = &tied_w;
        llmm_context_params r = ctx_params(256, 8, LLMM_KV_Q8);
        ctx_plan dev_tied;
        assert_int_equal(llmm__ctx_plan_for(&tied, &r, &k_fake_device, &dev_tied, &d), LLMM_OK);
        assert_int_equal(dev_tied.weights, file_bytes - file_tensor_bytes(m, "output.weight"));
        llmm_model_free(m);
    }
}

/* ------------------------------------------------------------------ prefix cache */

/* A second sequence with the same prompt reuses the first's full blocks (its prefill skips
 * them) and gets the same logits; the cached blocks outlive the sequence and are evicted,
 * least recently used first, when the pool runs out. */
static void test_prefix_cache(void **state) {
    (void)state;
    llmm_model *m = load_model("stories260K.gguf", NULL);
    llmm_token ids[MAX_IDS];
    size_t n = tokenize(m, k_prompt, ids, MAX_IDS);
    for (size_t k = n; k < 40; k++) ids[k] = (llmm_token)(100 + k);
    n = 40; /* two full blocks of 16, then 8 */
    llmm_context_params p = ctx_params(64, 4, LLMM_KV_F16);
    p.n_ctx_total = 96; /* 6 blocks */
    p.prefix_cache = 1;
    llmm_context *c = make_context(m, &p);
    assert_int_equal(llmm_prefill(c, 0, ids, n, 0), LLMM_OK);
    float first[N_VOCAB];
    copy_logits(c, 0, first, N_VOCAB);
    assert_int_equal(llmm_seq_free(c, 0), LLMM_OK);
    llmm_context_stats st = {.size = sizeof st};
    assert_int_equal(llmm_context_get_stats(c, &st), LLMM_OK);
    assert_int_equal(st.blocks_cached, 2);
    assert_int_equal(st.blocks_free, 6);
    assert_int_equal(llmm_prefill(c, 1, ids, n, 0), LLMM_OK);
    assert_memory_equal(logits_row(c, 0), first, sizeof first);
    assert_int_equal(llmm_context_get_stats(c, &st), LLMM_OK);
    assert_int_equal(st.prefix_hits, 32);
    assert_int_equal(st.tokens_prefilled, 40 + 8);
    /* another prompt fills the pool: the cached blocks only the cache holds are evicted */
    assert_int_equal(llmm_seq_free(c, 1), LLMM_OK);
    llmm_token other[64];
    for (size_t k = 0; k < 64; k++) other[k] = (llmm_token)(300 + k);
    assert_int_equal(llmm_prefill(c, 2, other, 64, 0), LLMM_OK); /* the 4 free blocks */
    assert_int_equal(llmm_context_get_stats(c, &st), LLMM_OK);
    assert_int_equal(st.blocks_free, 2); /* the first prompt's, evictable */
    assert_int_equal(llmm_prefill(c, 3, other, 33, 0), LLMM_OK); /* reuses 2, needs 1: evicts 1 */
    assert_int_equal(llmm_context_get_stats(c, &st), LLMM_OK);
    assert_int_equal(st.blocks_free, 1);
    assert_int_equal(st.prefix_hits, 64);
    /* the first prompt's second block went first (released after its parent, so least
     * recently used): its prefill now reuses only the first block */
    assert_int_equal(llmm_seq_free(c, 2), LLMM_OK);
    assert_int_equal(llmm_seq_free(c, 3), LLMM_OK);
    assert_int_equal(llmm_prefill(c, 0, ids, n, 0), LLMM_OK);
    assert_memory_equal(logits_row(c, 0), first, sizeof first);
    assert_int_equal(llmm_context_get_stats(c, &st), LLMM_OK);
    assert_int_equal(st.prefix_hits, 64 + 16);
    llmm_context_free(c);
    llmm_model_free(m);
}

/* ------------------------------------------------------------------ argument checks */

/* llmm_context_estimate_memory's size prefix: a caller of the first version gets that much
 * and nothing beyond; a newer caller's larger struct keeps its own fields. est: the default
 * params' llmm_context_estimate. */
static void estimate_memory_arguments(const llmm_model *m, size_t est) {
    const size_t v1 = offsetof(llmm_context_memory, other_host_bytes) + sizeof(uint64_t);
    union {
        llmm_context_memory mem;
        unsigned char bytes[sizeof(llmm_context_memory) + 16];
    } buf;
    const uint32_t sizes[] = {(uint32_t)v1, (uint32_t)sizeof buf};
    for (size_t i = 0; i < 2; i++) {
        memset(&buf, 0xA5, sizeof buf);
        buf.mem.size = sizes[i];
        assert_int_equal(llmm_context_estimate_memory(m, NULL, &buf.mem), LLMM_OK);
        assert_int_equal(buf.mem.size, sizes[i]);
        assert_int_equal(buf.mem.host_bytes, est);
        const size_t written = LLMM_MIN(sizes[i], sizeof(llmm_context_memory));
        for (size_t b = written; b < sizeof buf; b++) assert_int_equal(buf.bytes[b], 0xA5);
    }
    llmm_context_memory mem = {.size = sizeof mem};
    assert_int_equal(llmm_context_estimate_memory(NULL, NULL, &mem), LLMM_ERR_INVALID_ARG);
    assert_int_equal(llmm_context_estimate_memory(m, NULL, NULL), LLMM_ERR_INVALID_ARG);
    mem.size = 0;
    assert_int_equal(llmm_context_estimate_memory(m, NULL, &mem), LLMM_ERR_INVALID_ARG);
    mem.size = (uint32_t)v1 - 1;
    assert_int_equal(llmm_context_estimate_memory(m, NULL, &mem), LLMM_ERR_INVALID_ARG);
    char err[256];
    assert_true(llmm_model_last_error(m, err, sizeof err) > 0);
    assert_non_null(strstr(err, "out->size"));
    mem.size = sizeof mem;
    llmm_context_params p = ctx_params(32, 0, LLMM_KV_F16); /* n_seq_max 0: creation refuses it */
    assert_int_equal(llmm_context_estimate_memory(m, &p, &mem), LLMM_ERR_INVALID_ARG);
    p = ctx_params(32, 1, LLMM_KV_F16);
    p.backend = LLMM_BACKEND_CUDA;
    if (!llmm__backend_select(LLMM_BACKEND_CUDA)) /* where creation would fail, so does the estimate */
        assert_int_equal(llmm_context_estimate_memory(m, &p, &mem), LLMM_ERR_BACKEND);

    llmm_model *vocab = load_vocab("stories260K.gguf");
    assert_int_equal(llmm_context_estimate_memory(vocab, NULL, &mem), LLMM_ERR_VOCAB_ONLY);
    llmm_model_free(vocab);
}

static void test_sequence_arguments(void **state) {
    (void)state;
    llmm_model *m = load_model("stories260K.gguf", NULL);
    llmm_context_params p = ctx_params(32, 2, LLMM_KV_F16);
    llmm_context *c = make_context(m, &p);
    llmm_seq_id s;
    assert_int_equal(llmm_seq_create(NULL, &s), LLMM_ERR_INVALID_ARG);
    assert_int_equal(llmm_seq_create(c, NULL), LLMM_ERR_INVALID_ARG);
    assert_int_equal(llmm_seq_fork(c, 2, &s), LLMM_ERR_INVALID_ARG);
    assert_int_equal(llmm_seq_fork(c, 0, NULL), LLMM_ERR_INVALID_ARG);
    assert_int_equal(llmm_seq_free(c, -1), LLMM_ERR_INVALID_ARG);
    /* an id used without create is in use while it holds tokens */
    const llmm_token t[2] = {1, 20};
    assert_int_equal(llmm_prefill(c, 0, t, 2, 0), LLMM_OK);
    assert_int_equal(llmm_seq_create(c, &s), LLMM_OK);
    assert_int_equal(s, 1);
    assert_int_equal(llmm_seq_create(c, &s), LLMM_ERR_CONTEXT_FULL);
    assert_int_equal(llmm_seq_fork(c, 0, &s), LLMM_ERR_CONTEXT_FULL);
    size_t need;
    assert_int_equal(llmm_seq_save_buffer(c, 0, 99, NULL, 0, &need), LLMM_ERR_INVALID_ARG);
    assert_int_equal(llmm_seq_save_buffer(c, 0, 0, NULL, 0, NULL), LLMM_ERR_INVALID_ARG);
    assert_int_equal(llmm_seq_load_buffer(c, 0, NULL, 10), LLMM_ERR_INVALID_ARG);
    assert_int_equal(llmm_context_get_stats(c, NULL), LLMM_ERR_INVALID_ARG);
    llmm_context_stats small = {.size = 8};
    assert_int_equal(llmm_context_get_stats(c, &small), LLMM_ERR_INVALID_ARG);
    size_t est;
    assert_int_equal(llmm_context_estimate(m, NULL, NULL), LLMM_ERR_INVALID_ARG);
    assert_int_equal(llmm_context_estimate(m, NULL, &est), LLMM_OK);
    llmm_context_free(c);
    estimate_memory_arguments(m, est);
    /* a caller built against 0.1 passes the struct without the KV fields: defaults apply */
    llmm_context_params old = ctx_params(32, 2, LLMM_KV_Q8);
    old.size = (uint32_t)offsetof(llmm_context_params, kv_block_size);
    old.kv_block_size = 4; /* beyond the caller's size: must be ignored */
    assert_int_equal(llmm_context_create(m, &old, &c), LLMM_OK);
    llmm_context_stats st = {.size = sizeof st};
    assert_int_equal(llmm_context_get_stats(c, &st), LLMM_OK);
    assert_int_equal(st.block_size, 16);
    assert_int_equal(st.kv_type, LLMM_KV_Q8);
    assert_int_equal(st.blocks_total, 2 * 2);
    llmm_context_free(c);
    old.size = 8;
    assert_int_equal(llmm_context_create(m, &old, &c), LLMM_ERR_INVALID_ARG);
    llmm_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_allocator_random_ops),
        cmocka_unit_test(test_allocator_random_ops_prefix_cache),
        cmocka_unit_test(test_fork_copy_on_write),
        cmocka_unit_test(test_batched_decode_matches_single),
        cmocka_unit_test(test_256_sequences),
        cmocka_unit_test(test_save_load_round_trip),
        cmocka_unit_test(test_corrupted_states_refused),
        cmocka_unit_test(test_loads_format2_state),
        cmocka_unit_test(test_pool_exhausted),
        cmocka_unit_test(test_estimate_matches_creation),
        cmocka_unit_test(test_estimate_memory_cpu),
        cmocka_unit_test(test_logits_rows_sized_by_outputs),
        cmocka_unit_test(test_estimate_device_split),
        cmocka_unit_test(test_prefix_cache),
        cmocka_unit_test(test_sequence_arguments),
    };
    return cmocka_run_group_tests_name("kvcache", tests, NULL, NULL);
}
