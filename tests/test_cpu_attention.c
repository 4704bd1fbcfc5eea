/* The CPU backend's KV store and attention (cpu/cpu_backend.c, kv_rows.h) over the views the
 * core builds and views it never builds (heads side by side, padded rows, rows of two sequences
 * in one attention block, shuffled block tables, F32, F16 and Q8 rows), checked against a
 * float64 softmax attention computed here on seeded random data (uniform in [-2, 2], never
 * zero). The SIMD tables' attention kernels against the scalar ones: test_simd_kernels.c; the
 * ops as the core calls them, through the backend table: the conformance suite
 * (support/backend_conformance.c, test_backend_conformance.c).
 *
 * Tolerances (u = 2^-24, the float unit roundoff; every bound is stated where it is used):
 *  - kv_write and the attention's inline half conversion: exact (bit or value equality).
 *  - attention: a few float roundings per output, the bound derived at check_attention,
 *    proportional to the magnitudes involved.
 * Threads: the attention kernels run with n_threads 1, 2 and 3; their outputs must be bitwise
 * identical across thread counts (each output is computed by one thread). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "cpu_backend.h"
#include "kv_rows.h"
#include "support/alloc.h"
#include "support/fixtures.h"
#include "support/numeric.h"
#include "support/rng.h"

static const int k_threads[] = {1, 2, 3};

/* The data stream: every test seeds it (rng_seed) before drawing. */
static test_rng rng;

static void *cpu_start(int n_threads) {
    const llmm_backend_config cfg = {.n_threads = n_threads};
    void *st = NULL;
    assert_int_equal(llmm__cpu_backend.init(&cfg, &st), LLMM_OK);
    assert_non_null(st);
    return st;
}

/* One block holding every position (block table {0}, block_size 1024), F32 rows stride
 * floats apart with the n_head_kv heads side by side in each (the other layout backend.h
 * allows; the KV store's own is the head-major one of paged_pool_make). */
static const uint32_t k_one_block[1] = {0};
static llmm_kv_view flat_view(void *k, void *v, size_t stride, uint32_t n_head_kv, uint32_t head_dim) {
    return (llmm_kv_view){.k = k, .v = v, .blocks = k_one_block, .block_size = 1024, .block_shift = 10,
                          .block_stride = 0, .head_stride = head_dim * sizeof(float),
                          .row_bytes = stride * sizeof(float), .n_head_kv = n_head_kv, .head_dim = head_dim,
                          .type = LLMM_KV_F32};
}

/* Value i (head i / head_dim, element i % head_dim) of position p in a view, decoded here from
 * the layout documented in backend.h (not through the kernels' kv_rows.h). */
static double view_value(const llmm_kv_view *view, const void *base, uint32_t p, size_t i) {
    const size_t h = i / view->head_dim, e = i % view->head_dim;
    const uint8_t *row = (const uint8_t *)base + h * view->head_stride +
                         (size_t)view->blocks[p / view->block_size] * view->block_stride +
                         (size_t)(p % view->block_size) * view->row_bytes;
    if (view->type == LLMM_KV_F32) return ((const float *)row)[e];
    if (view->type == LLMM_KV_F16) return ref_half(((const uint16_t *)row)[e]);
    float scale;
    memcpy(&scale, row, sizeof scale);
    return (double)scale * ((const int8_t *)(row + 4))[e];
}

static void test_kv_write(void **state) {
    (void)state;
    rng_seed(&rng, 701);
    enum { NHKV = 3, HD = 4, KV_DIM = NHKV * HD, STRIDE_A = 12, STRIDE_B = 17, CAP = 10, N_ROWS = 5 };
    const float sentinel = -12345.0f;
    for (size_t ti = 0; ti < ARRAY_LEN(k_threads); ti++) {
        void *st = cpu_start(k_threads[ti]);
        float *ka = xmalloc(CAP * STRIDE_A * sizeof(float)), *va = xmalloc(CAP * STRIDE_A * sizeof(float));
        float *kb = xmalloc(CAP * STRIDE_B * sizeof(float)), *vb = xmalloc(CAP * STRIDE_B * sizeof(float));
        for (size_t i = 0; i < CAP * STRIDE_A; i++) ka[i] = va[i] = sentinel;
        for (size_t i = 0; i < CAP * STRIDE_B; i++) kb[i] = vb[i] = sentinel;
        const llmm_kv_view a = flat_view(ka, va, STRIDE_A, NHKV, HD), b = flat_view(kb, vb, STRIDE_B, NHKV, HD);
        const llmm_kv_view views[N_ROWS] = {a, b, a, b, a};
        const int32_t pos[N_ROWS] = {3, 0, 9, 9, 0};
        float *k = rng_floats(&rng, N_ROWS * KV_DIM, -2.0f, 2.0f), *v = rng_floats(&rng, N_ROWS * KV_DIM, -2.0f, 2.0f);
        assert_int_equal(llmm__cpu_kv_store_rows(views, pos, N_ROWS, k, v, KV_DIM), LLMM_OK);
        for (int seq = 0; seq < 2; seq++) {
            const float *kk = seq ? kb : ka, *vv = seq ? vb : va;
            const size_t stride = seq ? STRIDE_B : STRIDE_A;
            for (size_t p = 0; p < CAP; p++) {
                int src = -1;
                for (int r = 0; r < N_ROWS; r++)
                    if ((r % 2 == seq) && (size_t)pos[r] == p) src = r;
                for (size_t i = 0; i < stride; i++) {
                    const float wk = src >= 0 && i < KV_DIM ? k[src * KV_DIM + i] : sentinel;
                    const float wv = src >= 0 && i < KV_DIM ? v[src * KV_DIM + i] : sentinel;
                    if (kk[p * stride + i] != wk || vv[p * stride + i] != wv)
                        fail_msg("kv_write seq %d pos %zu elem %zu: k %g (want %g) v %g (want %g)", seq, p, i,
                                 (double)kk[p * stride + i], (double)wk, (double)vv[p * stride + i], (double)wv);
                }
            }
        }
        llmm_kv_view bad = flat_view(ka, va, STRIDE_A, NHKV, HD);
        bad.type = 7;
        assert_int_equal(llmm__cpu_kv_store_rows(&bad, pos, 1, k, v, KV_DIM), LLMM_ERR_UNSUPPORTED);
        bad = flat_view(ka, va, STRIDE_A, NHKV, HD + 1); /* heads x head_dim != kv_dim */
        assert_int_equal(llmm__cpu_kv_store_rows(&bad, pos, 1, k, v, KV_DIM), LLMM_ERR_UNSUPPORTED);
        free(ka);
        free(va);
        free(kb);
        free(vb);
        free(k);
        free(v);
        llmm__cpu_backend.shutdown(st);
    }
}

/* A paged pool of n_blocks blocks in the KV store's layout (kvcache.h: one region per K/V
 * head of K, then of V, each holding that head's rows block after block; one layer) and a
 * shuffled block table, so neighbouring positions live in distant blocks. */
typedef struct paged_pool {
    uint8_t *mem;
    uint32_t *table;
    llmm_kv_view view;
} paged_pool;

static paged_pool paged_pool_make(uint32_t type, uint32_t n_head_kv, uint32_t head_dim, uint32_t block_size,
                                  uint32_t n_blocks) {
    paged_pool pp;
    const size_t row_bytes = kv_row_bytes(type, head_dim), segment = block_size * row_bytes;
    const size_t region = segment * n_blocks, total = 2 * n_head_kv * region;
    pp.mem = xmalloc(total);
    memset(pp.mem, 0x7f, total); /* unwritten F32/F16 rows read as NaN/huge */
    pp.table = xmalloc(n_blocks * sizeof *pp.table);
    for (uint32_t i = 0; i < n_blocks; i++) pp.table[i] = i;
    for (uint32_t i = n_blocks - 1; i > 0; i--) {
        uint32_t j = rng_u32(&rng) % (i + 1), t = pp.table[i];
        pp.table[i] = pp.table[j];
        pp.table[j] = t;
    }
    uint32_t shift = 0;
    while ((1u << shift) < block_size) shift++;
    pp.view = (llmm_kv_view){.k = pp.mem, .v = pp.mem + n_head_kv * region, .blocks = pp.table,
                             .block_size = block_size, .block_shift = shift, .block_stride = segment,
                             .head_stride = region, .row_bytes = row_bytes, .n_head_kv = n_head_kv,
                             .head_dim = head_dim, .type = type};
    return pp;
}

static void paged_pool_free(paged_pool *pp) {
    free(pp->mem);
    free(pp->table);
}

/* The attention's inline half conversion agrees with the reference on all 65536 patterns
 * (NaN stays NaN, with its sign). */
static void test_kv_half_to_float_all_patterns(void **state) {
    (void)state;
    for (uint32_t h = 0; h < 65536; h++) {
        const float got = kv_half_to_float((uint16_t)h);
        const double want = ref_half((uint16_t)h);
        if (half_is_nan((uint16_t)h)) assert_true(isnan(got) && !!signbit(got) == !!(h & 0x8000));
        else if (!((double)got == want && !!signbit(got) == !!(h & 0x8000)))
            fail_msg("half 0x%04x: %.9g want %.9g", h, (double)got, want);
    }
}

static void check_attention(const cpu_attn_batch *b, int n_threads);

/* One attention run on st (NaN-filled output first), checked against float64 when check is
 * set; the output becomes first when take is set, else must equal it bit for bit. */
static void attention_run(void *st, const cpu_attn_batch *b, int n_threads, int check, float *first, int take) {
    const size_t n = b->n_rows * b->n_head * b->head_dim;
    fill_nan(b->out, n);
    assert_int_equal(llmm__cpu_attend(st, b), LLMM_OK);
    if (check) check_attention(b, n_threads);
    if (take) memcpy(first, b->out, n * sizeof *first);
    else if (memcmp(first, b->out, n * sizeof *first) != 0)
        fail_msg("attention (%zu rows, threads %d) differs from the first run", b->n_rows, n_threads);
}

/* Attention through a shuffled block table, for each KV type and block sizes 4, 16 and 32:
 * rows see 1..37 positions of one sequence (so rows end inside and at the edges of blocks).
 * The reference reads the stored (rounded) values; the kernels must agree with it within
 * check_attention's bound and be bitwise identical across thread counts and block sizes. */
static void test_attention_paged(void **state) {
    (void)state;
    rng_seed(&rng, 803);
    enum { NH = 6, NHKV = 3, HD = 16, KVD = NHKV * HD, N_POS = 37, N_ROWS = 9, QD = NH * HD };
    const uint32_t types[] = {LLMM_KV_F32, LLMM_KV_F16, LLMM_KV_Q8}, block_sizes[] = {4, 16, 32};
    for (size_t ti = 0; ti < ARRAY_LEN(types); ti++) {
        float *k = rng_floats(&rng, N_POS * KVD, -2.0f, 2.0f), *v = rng_floats(&rng, N_POS * KVD, -2.0f, 2.0f);
        float *q = rng_floats(&rng, N_ROWS * QD, -2.0f, 2.0f);
        float *out = xmalloc(N_ROWS * QD * sizeof *out), *first = xmalloc(N_ROWS * QD * sizeof *first);
        /* block size 4: chunks of 16 positions span blocks (rows converted one by one); 16 and
         * 32: a chunk lies in one block (converted at once); the results must not differ */
        for (size_t bi = 0; bi < ARRAY_LEN(block_sizes); bi++) {
            const uint32_t bs = block_sizes[bi];
            paged_pool pp = paged_pool_make(types[ti], NHKV, HD, bs, (N_POS + bs - 1) / bs + 1);
            int32_t pos[N_POS];
            llmm_kv_view views[N_POS];
            for (int i = 0; i < N_POS; i++) pos[i] = i, views[i] = pp.view;
            assert_int_equal(llmm__cpu_kv_store_rows(views, pos, N_POS, k, v, KVD), LLMM_OK);
            const uint32_t n_kv[N_ROWS] = {1, 3, 4, 5, 8, 16, 17, 33, 37};
            cpu_attn_row rows[N_ROWS];
            for (int r = 0; r < N_ROWS; r++) rows[r] = (cpu_attn_row){pp.view, n_kv[r], 0};
            cpu_attn_batch batch = {q, out, N_ROWS, rows, NH, NHKV, HD, 1.0f / sqrtf((float)HD), 0.0f};
            for (size_t th = 0; th < ARRAY_LEN(k_threads); th++) {
                void *st = cpu_start(k_threads[th]);
                attention_run(st, &batch, k_threads[th], 1, first, th == 0 && bi == 0);
                llmm__cpu_backend.shutdown(st);
            }
            paged_pool_free(&pp);
        }
        free(k);
        free(v);
        free(q);
        free(out);
        free(first);
    }
}

/* A prompt's rows go to the threads in blocks of consecutive rows (cpu_attn_rows_per_item),
 * all the block's query vectors against each chunk of K rows at once: every row must get the
 * bits it gets alone. Groups of 7 query heads at head size 64 (AVX-512 takes its transposed
 * score path there) and of 2 at head size 8 (the tiles), F16 and F32 K/V, one and two
 * threads; rows 0..33 read sequence A, 34..39 sequence B, so one block holds both. */
static void test_attention_row_blocks(void **state) {
    (void)state;
    rng_seed(&rng, 805);
    enum { NHKV = 2, N_POS = 48, N_ROWS = 40, SPLIT = 34, BS = 16 };
    const uint32_t groups[] = {7, 2}, hds[] = {64, 8}, types[] = {LLMM_KV_F16, LLMM_KV_F32};
    for (size_t gi = 0; gi < ARRAY_LEN(groups); gi++)
        for (size_t ti = 0; ti < ARRAY_LEN(types); ti++) {
            const uint32_t nh = NHKV * groups[gi], hd = hds[gi], kvd = NHKV * hd, qd = nh * hd;
            paged_pool pa = paged_pool_make(types[ti], NHKV, hd, BS, N_POS / BS);
            paged_pool pb = paged_pool_make(types[ti], NHKV, hd, BS, N_POS / BS);
            float *k = rng_floats(&rng, N_POS * kvd, -2.0f, 2.0f), *v = rng_floats(&rng, N_POS * kvd, -2.0f, 2.0f);
            float *q = rng_floats(&rng, N_ROWS * qd, -2.0f, 2.0f);
            float *out = xmalloc(N_ROWS * qd * sizeof *out), *alone = xmalloc(qd * sizeof *alone);
            int32_t pos[N_POS];
            llmm_kv_view va[N_POS], vb[N_POS];
            for (int i = 0; i < N_POS; i++) pos[i] = i, va[i] = pa.view, vb[i] = pb.view;
            assert_int_equal(llmm__cpu_kv_store_rows(va, pos, N_POS, k, v, kvd), LLMM_OK);
            assert_int_equal(llmm__cpu_kv_store_rows(vb, pos, N_POS, v, k, kvd), LLMM_OK);
            cpu_attn_row rows[N_ROWS];
            for (int r = 0; r < N_ROWS; r++)
                rows[r] = r < SPLIT ? (cpu_attn_row){pa.view, (uint32_t)(8 + r), 0}
                                    : (cpu_attn_row){pb.view, (uint32_t)(r - SPLIT + 1), 0};
            for (size_t th = 0; th < ARRAY_LEN(k_threads); th++) {
                void *st = cpu_start(k_threads[th]);
                cpu_attn_batch batch = {q, out, N_ROWS, rows, nh, NHKV, hd, 1.0f / sqrtf((float)hd), 0.0f};
                fill_nan(out, N_ROWS * qd);
                assert_int_equal(llmm__cpu_attend(st, &batch), LLMM_OK);
                for (int r = 0; r < N_ROWS; r++) {
                    cpu_attn_batch one = {q + r * qd, alone, 1, &rows[r], nh, NHKV, hd, batch.scale, 0.0f};
                    fill_nan(alone, qd);
                    assert_int_equal(llmm__cpu_attend(st, &one), LLMM_OK);
                    if (memcmp(alone, out + r * qd, qd * sizeof *alone) != 0)
                        fail_msg("group %u hd %u kv type %u threads %d: row %d differs from the row alone",
                                 groups[gi], hd, types[ti], k_threads[th], r);
                }
                llmm__cpu_backend.shutdown(st);
            }
            paged_pool_free(&pa);
            paged_pool_free(&pb);
            free(k);
            free(v);
            free(q);
            free(out);
            free(alone);
        }
}

/* Check every output of an F32 attention batch against a float64 softmax attention.
 * Tolerance: a score q.k * scale is off by at most ds = scale (hd/8 + 10) u sum|q k| + u|s|
 * (8-lane float dot, then the scale); each softmax weight then by 2 ds + 4u relative (expf
 * of a difference of two such scores, the reciprocal of the double sum, the product), and
 * the float sum over n_kv positions adds (n_kv + 1) u: so
 *   |err| <= sum_p w_p |v_p| (2 ds + (n_kv + 6) u). */
static void check_attention(const cpu_attn_batch *b, int n_threads) {
    const size_t hd = b->head_dim, qd = (size_t)b->n_head * hd;
    for (size_t r = 0; r < b->n_rows; r++) {
        const llmm_kv_view *kv = &b->rows[r].kv;
        const uint32_t n_kv = b->rows[r].n_kv;
        const double q8 = kv->type == LLMM_KV_Q8; /* the kernel's float scale * q rounds once */
        double *s = xmalloc(n_kv * sizeof *s);
        for (uint32_t h = 0; h < b->n_head; h++) {
            const size_t kvh = h / (b->n_head / b->n_head_kv);
            const float *qv = b->q + r * qd + h * hd;
            double smax = -INFINITY, sum = 0, ds = 0;
            for (uint32_t p = 0; p < n_kv; p++) {
                double dot = 0, abs_dot = 0;
                for (size_t d = 0; d < hd; d++) {
                    const double t = (double)qv[d] * view_value(kv, kv->k, p, kvh * hd + d);
                    dot += t;
                    abs_dot += fabs(t);
                }
                s[p] = dot * b->scale;
                smax = fmax(smax, s[p]);
                ds = fmax(ds, b->scale * ((double)(hd / 8) + 10 + q8) * U_F32 * abs_dot + U_F32 * fabs(s[p]));
            }
            for (uint32_t p = 0; p < n_kv; p++) sum += (s[p] = exp(s[p] - smax));
            for (size_t d = 0; d < hd; d++) {
                double ref = 0, mag = 0;
                for (uint32_t p = 0; p < n_kv; p++) {
                    const double vpd = view_value(kv, kv->v, p, kvh * hd + d);
                    ref += s[p] / sum * vpd;
                    mag += s[p] / sum * fabs(vpd);
                }
                CHECK_CLOSE(b->out[r * qd + h * hd + d], ref, mag * (2 * ds + (n_kv + 6.0 + q8) * U_F32),
                            "attention row %zu (n_kv %u) head %u dim %zu threads=%d", r, n_kv, h, d, n_threads);
            }
        }
        free(s);
    }
}

/* Grouped-query attention: n_head 4 over n_head_kv 2 (heads 0,1 read kv head 0; 2,3 read 1),
 * head_dim 8, scale 1/sqrt(8). Two sequences with different row strides (padding and
 * positions past n_kv hold NaN, so reading them shows); rows 0..8 see 1..9 positions of
 * sequence A, rows 9..11 see 5, 2 and 3 of sequence B. Tolerance: see check_attention. */
static void test_attention_gqa(void **state) {
    (void)state;
    rng_seed(&rng, 801);
    enum { NH = 4, NHKV = 2, HD = 8, KVD = NHKV * HD, CAP_A = 9, CAP_B = 7, STRIDE_A = KVD, STRIDE_B = KVD + 5 };
    enum { N_ROWS = 12, QD = NH * HD };
    float *ka = rng_floats(&rng, CAP_A * STRIDE_A, -2.0f, 2.0f), *va = rng_floats(&rng, CAP_A * STRIDE_A, -2.0f, 2.0f);
    float *kb = rng_floats(&rng, CAP_B * STRIDE_B, -2.0f, 2.0f), *vb = rng_floats(&rng, CAP_B * STRIDE_B, -2.0f, 2.0f);
    const uint32_t n_kv[N_ROWS] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 5, 2, 3};
    for (size_t p = 0; p < CAP_B; p++)
        for (size_t i = 0; i < STRIDE_B; i++)
            if (i >= KVD || p >= 5) kb[p * STRIDE_B + i] = vb[p * STRIDE_B + i] = NAN;
    const llmm_kv_view a = flat_view(ka, va, STRIDE_A, NHKV, HD), b = flat_view(kb, vb, STRIDE_B, NHKV, HD);
    cpu_attn_row rows[N_ROWS];
    for (int r = 0; r < N_ROWS; r++) rows[r] = (cpu_attn_row){r < 9 ? a : b, n_kv[r], 0};
    float *q = rng_floats(&rng, N_ROWS * QD, -2.0f, 2.0f);
    float *out = xmalloc(N_ROWS * QD * sizeof *out), *first = xmalloc(N_ROWS * QD * sizeof *first);
    cpu_attn_batch batch = {q, out, N_ROWS, rows, NH, NHKV, HD, 1.0f / sqrtf((float)HD), 0.0f};
    for (size_t ti = 0; ti < ARRAY_LEN(k_threads); ti++) {
        void *st = cpu_start(k_threads[ti]);
        attention_run(st, &batch, k_threads[ti], 1, first, ti == 0);

        /* a single position returns its V row exactly (weight 1) */
        for (int h = 0; h < NH; h++)
            for (int d = 0; d < HD; d++) assert_true(out[h * HD + d] == va[(h / 2) * HD + d]);

        /* unsupported: an unknown KV type, an empty row */
        cpu_attn_row bad_rows[1] = {{a, 0, 0}};
        cpu_attn_batch bad = {q, out, 1, bad_rows, NH, NHKV, HD, batch.scale, 0.0f};
        assert_int_equal(llmm__cpu_attend(st, &bad), LLMM_ERR_UNSUPPORTED);
        bad_rows[0].n_kv = 1;
        bad_rows[0].kv.type = 7;
        assert_int_equal(llmm__cpu_attend(st, &bad), LLMM_ERR_UNSUPPORTED);
        llmm__cpu_backend.shutdown(st);
    }
    free(ka);
    free(va);
    free(kb);
    free(vb);
    free(q);
    free(out);
    free(first);
}

/* Long rows (n_kv 301..497) so the threads' score scratch is in use at the same time: a
 * shared or undersized per-thread scratch corrupts results here. Run several times on one
 * state so the scratch is also reused. n_head 8 over n_head_kv 2, head_dim 24 (a tail for
 * the 8-lane dot), one sequence with padded rows. */
static void test_attention_long(void **state) {
    (void)state;
    rng_seed(&rng, 802);
    enum { NH = 8, NHKV = 2, HD = 24, KVD = NHKV * HD, STRIDE = KVD + 3, CAP = 500, N_ROWS = 29, QD = NH * HD };
    float *k = rng_floats(&rng, CAP * STRIDE, -2.0f, 2.0f), *v = rng_floats(&rng, CAP * STRIDE, -2.0f, 2.0f);
    const llmm_kv_view view = flat_view(k, v, STRIDE, NHKV, HD);
    cpu_attn_row rows[N_ROWS];
    for (int r = 0; r < N_ROWS; r++) rows[r] = (cpu_attn_row){view, (uint32_t)(301 + 7 * r), 0};
    float *q = rng_floats(&rng, N_ROWS * QD, -2.0f, 2.0f);
    float *out = xmalloc(N_ROWS * QD * sizeof *out), *first = xmalloc(N_ROWS * QD * sizeof *first);
    const cpu_attn_batch batch = {q, out, N_ROWS, rows, NH, NHKV, HD, 1.0f / sqrtf((float)HD), 0.0f};
    for (size_t ti = 0; ti < ARRAY_LEN(k_threads); ti++) {
        void *st = cpu_start(k_threads[ti]);
        for (int rep = 0; rep < 8; rep++) attention_run(st, &batch, k_threads[ti], rep == 0, first, ti == 0 && rep == 0);
        llmm__cpu_backend.shutdown(st);
    }
    free(k);
    free(v);
    free(q);
    free(out);
    free(first);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kv_write),
        cmocka_unit_test(test_attention_gqa),
        cmocka_unit_test(test_attention_long),
        cmocka_unit_test(test_kv_half_to_float_all_patterns),
        cmocka_unit_test(test_attention_paged),
        cmocka_unit_test(test_attention_row_blocks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
