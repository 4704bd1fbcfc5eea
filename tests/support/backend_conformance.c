/* The backend conformance suite (backend_conformance.h). Each check starts the backend (one
 * and two threads), allocates and uploads its inputs (seeded random values, never zero, odd
 * sizes), prepares weights built in test memory, begins a step it describes, runs one op,
 * downloads and compares with a reference written here in plain C (doubles), then ends the
 * step, releases the weights, frees the buffers and shuts down. Buffers are only ever reached
 * through upload/download (a backend may hand out device memory or opaque handles).
 *
 * Tolerances are those of the kernel suites (test_weight_formats.c, test_cpu_attention.c), stated
 * at each check; u = 2^-24.
 * Matmul references use the operand the CPU backend quantizes the activations to
 * (the type's operand_type, format/quant.h): that is the contract a backend's matmul is held to, whatever its kernels. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "support/backend_conformance.h"
#include "support/alloc.h"
#include "support/fixtures.h"
#include "support/numeric.h"
#include "support/rng.h"
#include "format/quant.h"

enum {
    CF_WEIGHTS = 32, /* llmm_backend_config.n_weights of every run */
    CF_BUFFERS = 256,/* buffers one check holds at most */
    CF_ROWS = 32,    /* rows of one step at most */
};

static const int k_threads[] = {1, 2};

/* The data stream: every check seeds it (rng_seed) before drawing. */
static test_rng rng;

/* A random permutation of 0 .. n-1: block tables taken from it are non-contiguous and
 * disjoint between sequences. */
static void shuffled_ids(uint32_t *ids, uint32_t n) {
    for (uint32_t i = 0; i < n; i++) ids[i] = i;
    for (uint32_t i = n - 1; i > 0; i--) {
        const uint32_t j = rng_below(&rng, i + 1), t = ids[i];
        ids[i] = ids[j];
        ids[j] = t;
    }
}

/* ------------------------------------------------------------------ a started backend */

/* One init of the backend with everything the check gave it, so that a failure anywhere
 * still names the run, and cf_close undoes it all in the order backend.h asks. */
typedef struct cf {
    const conformance_target *t;
    const llmm_backend_ops *be;
    void *st;
    int n_threads;
    int in_step;
    llmm_backend_shared shared;
    llmm_tensor w[CF_WEIGHTS]; /* prepared */
    void *host[CF_WEIGHTS];    /* the host bytes behind w[i] when the check gave a copy */
    size_t n_w;
    void *buf[CF_BUFFERS];
    size_t n_buf;
    const char *op;
    char what[200];
} cf;

static unsigned long n_cases; /* cases run, for the summary line */

/* Names the op and case the next failure is about. */
static void cf_case(cf *c, const char *op, const char *fmt, ...) {
    n_cases++;
    c->op = op;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->what, sizeof c->what, fmt, ap);
    va_end(ap);
}

static void cf_fail(const cf *c, const char *fmt, ...) {
    char detail[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    fail_msg("[%s, %d thread%s] %s (%s): %s", c->t->label, c->n_threads, c->n_threads == 1 ? "" : "s",
             c->op ? c->op : "-", c->what, detail);
}

static void cf_ok(const cf *c, llmm_status st, const char *call) {
    if (st != LLMM_OK) cf_fail(c, "%s returned %d (%s)", call, (int)st, llmm_status_str(st));
}

/* |got - ref| <= tol, else a failure naming the value. */
static void cf_close_to(const cf *c, double got, double ref, double tol, const char *fmt, ...) {
    if (fabs(got - ref) <= tol) return;
    char where[160];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(where, sizeof where, fmt, ap);
    va_end(ap);
    cf_fail(c, "%s: got %.9g ref %.9g |diff| %.3g tol %.3g", where, got, ref, fabs(got - ref), tol);
}

/* mapped: the weights are a read-only file mapping and may be repacked (the CPU's copies). */
static void cf_open(cf *c, const conformance_target *t, int n_threads, int mapped) {
    memset(c, 0, sizeof *c);
    c->t = t;
    c->be = t->be;
    c->n_threads = n_threads;
    if (pthread_mutex_init(&c->shared.lock, NULL) != 0) fail_msg("pthread_mutex_init failed");
    if (t->before_init) t->before_init();
    const llmm_backend_config cfg = {.n_threads = n_threads, .n_weights = CF_WEIGHTS, .shared = &c->shared,
                                     .weights_mapped = mapped, .repack_weights = mapped};
    cf_case(c, "init", "weights_mapped %d", mapped);
    cf_ok(c, c->be->init(&cfg, &c->st), "init");
}

static void cf_end(cf *c) {
    if (!c->in_step) return;
    c->in_step = 0;
    cf_ok(c, c->be->step_end(c->st), "step_end");
}

static void cf_close(cf *c) {
    cf_end(c);
    for (size_t i = 0; i < c->n_w; i++) c->be->release_weight(c->st, &c->w[i]);
    for (size_t i = 0; i < c->n_buf; i++) c->be->buffer_free(c->st, c->buf[i]);
    c->be->shutdown(c->st);
    for (size_t i = 0; i < c->n_w; i++) free(c->host[i]);
    /* model.h: the backend frees what it hung on the share when its last user leaves */
    if (c->shared.data || c->shared.users) cf_fail(c, "the model's share still holds data after shutdown");
    pthread_mutex_destroy(&c->shared.lock);
}

static void *cf_alloc(cf *c, size_t bytes) {
    if (c->n_buf == CF_BUFFERS) fail_msg("conformance: too many buffers in one check");
    void *b = NULL;
    cf_ok(c, c->be->buffer_alloc(c->st, bytes, &b), "buffer_alloc");
    if (!b) cf_fail(c, "buffer_alloc gave NULL");
    return c->buf[c->n_buf++] = b;
}

static void *cf_put(cf *c, const void *host, size_t bytes) {
    void *b = cf_alloc(c, bytes);
    cf_ok(c, c->be->upload(c->st, b, host, bytes), "upload");
    return b;
}

static void cf_get(cf *c, void *host, const void *buf, size_t bytes) {
    cf_ok(c, c->be->download(c->st, host, buf, bytes), "download");
}

/* A prepared weight over host bytes the caller keeps alive until cf_close (a mapping), or
 * over a copy cf keeps (copy set). */
static const llmm_tensor *cf_weight_at(cf *c, llmm_weight_role role, const llmm_tensor *host) {
    if (c->n_w == CF_WEIGHTS) fail_msg("conformance: too many weights in one check");
    llmm_tensor *out = &c->w[c->n_w];
    cf_ok(c, c->be->prepare_weight(c->st, c->n_w, role, host, out), "prepare_weight");
    c->n_w++;
    return out;
}

static const llmm_tensor *cf_weight(cf *c, llmm_weight_role role, uint32_t type, size_t ne0, size_t ne1,
                                    const void *bytes) {
    const size_t rb = llmm__row_bytes(type, ne0);
    void *copy = xmalloc(rb * ne1);
    memcpy(copy, bytes, rb * ne1);
    c->host[c->n_w] = copy;
    const llmm_tensor host = {.data = copy, .type = type, .ne0 = (int64_t)ne0, .ne1 = (int64_t)ne1, .row_bytes = rb};
    return cf_weight_at(c, role, &host);
}

/* A prepared f32 vector (norm weight, bias, rope factors): the buffer the ops take. */
static const float *cf_vector(cf *c, const float *v, size_t n) {
    return cf_weight(c, LLMM_WEIGHT_VECTOR, LLMM_TYPE_F32, n, 1, v)->data;
}

/* ------------------------------------------------------------------ KV pools and steps */

/* A pool in the core's layout (kvcache.c kv_layout: rows of a block back to back, blocks of
 * one ({K, V}, layer, head) region back to back, regions in that order), in a buffer. */
static llmm_kv_layout cf_pool(cf *c, uint32_t type, uint32_t n_layer, uint32_t n_head_kv, uint32_t head_dim,
                              uint32_t block_size, uint32_t n_blocks, size_t *bytes) {
    llmm_kv_layout kv = {.layout = LLMM_KV_LAYOUT_HEAD_REGIONS, .n_layer = n_layer, .n_head_kv = n_head_kv,
                         .head_dim = head_dim, .type = type, .block_size = block_size, .n_blocks = n_blocks};
    while ((1u << kv.block_shift) < block_size) kv.block_shift++;
    kv.row_bytes = kv_row_bytes(type, head_dim);
    kv.block_stride = kv.row_bytes * block_size;
    kv.head_stride = kv.block_stride * n_blocks;
    *bytes = 2 * (size_t)n_layer * n_head_kv * kv.head_stride;
    kv.pool = cf_alloc(c, *bytes);
    return kv;
}

/* Byte offset in the pool of head h's row at position p in layer l of K (which 0) or V (1),
 * for a sequence whose block table is blocks: backend.h's formula, written out again. */
static size_t pool_offset(const llmm_kv_layout *kv, int which, uint32_t l, uint32_t h, const uint32_t *blocks,
                          uint32_t p) {
    return (((size_t)which * kv->n_layer + l) * kv->n_head_kv + h) * kv->head_stride +
           (size_t)blocks[p / kv->block_size] * kv->block_stride + (size_t)(p % kv->block_size) * kv->row_bytes;
}

/* Value e of a stored row (at row), decoded per backend.h's row formats. */
static double row_value(uint32_t type, const uint8_t *row, size_t e) {
    if (type == LLMM_KV_F32) {
        float f;
        memcpy(&f, row + 4 * e, sizeof f);
        return f;
    }
    if (type == LLMM_KV_F16) {
        llmm_f16 h;
        memcpy(&h, row + 2 * e, sizeof h);
        return llmm__f16_to_f32(h);
    }
    float scale;
    memcpy(&scale, row, sizeof scale);
    return (double)scale * (int8_t)row[4 + e];
}

/* A step descriptor and the arrays it points to. */
typedef struct cf_step {
    llmm_step s;
    llmm_token tokens[CF_ROWS];
    int32_t pos[CF_ROWS];
    uint32_t row_seq[CF_ROWS];
    llmm_seq_id seq_ids[CF_ROWS];
    const uint32_t *tables[CF_ROWS];
    uint32_t n_blocks[CF_ROWS];
} cf_step;

/* A decode step: row i is sequence i (id 100 + i, table tables[i] of n_blocks[i]) at pos[i]. */
static void step_decode(cf_step *s, const llmm_kv_layout *kv, size_t n_rows, const llmm_token *tokens,
                        const int32_t *pos, const uint32_t *const *tables, const uint32_t *n_blocks) {
    memset(s, 0, sizeof *s);
    for (size_t i = 0; i < n_rows; i++) {
        s->tokens[i] = tokens ? tokens[i] : (llmm_token)i;
        s->pos[i] = pos[i];
        s->row_seq[i] = (uint32_t)i;
        s->seq_ids[i] = (llmm_seq_id)(100 + i);
        s->tables[i] = tables[i];
        s->n_blocks[i] = n_blocks[i];
    }
    s->s = (llmm_step){.kind = LLMM_STEP_DECODE, .n_rows = n_rows, .tokens = s->tokens, .pos = s->pos,
                       .row_seq = s->row_seq, .n_seqs = (uint32_t)n_rows, .seq_ids = s->seq_ids,
                       .block_tables = s->tables, .n_blocks = s->n_blocks, .kv = kv};
}

/* A prompt step: n_rows rows of one sequence (id 7) at pos[i]. */
static void step_prompt(cf_step *s, const llmm_kv_layout *kv, size_t n_rows, const llmm_token *tokens,
                        const int32_t *pos, const uint32_t *table, uint32_t n_blocks) {
    memset(s, 0, sizeof *s);
    for (size_t i = 0; i < n_rows; i++) {
        s->tokens[i] = tokens ? tokens[i] : (llmm_token)i;
        s->pos[i] = pos[i];
    }
    s->seq_ids[0] = 7;
    s->tables[0] = table;
    s->n_blocks[0] = n_blocks;
    s->s = (llmm_step){.kind = LLMM_STEP_PROMPT, .n_rows = n_rows, .tokens = s->tokens, .pos = s->pos,
                       .row_seq = s->row_seq, .n_seqs = 1, .seq_ids = s->seq_ids, .block_tables = s->tables,
                       .n_blocks = s->n_blocks, .kv = kv};
}

static void cf_begin(cf *c, const cf_step *s) {
    cf_ok(c, c->be->step_begin(c->st, &s->s), "step_begin");
    c->in_step = 1;
}

/* The step for ops that read no KV (embed, rope, the element-wise ops): a small pool whose one
 * block table (identity, 16 blocks of 256) covers positions 0 .. 4095, every row on it. A
 * decode step (one sequence per row, all sharing the table) for up to 4 rows, as the core's
 * decode; a prompt step beyond. */
static const uint32_t k_identity16[16] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};

typedef struct cf_simple {
    llmm_kv_layout kv;
    cf_step step;
} cf_simple;

static void cf_simple_pool(cf *c, cf_simple *sp) {
    if (sp->kv.pool) return;
    size_t bytes;
    sp->kv = cf_pool(c, LLMM_KV_F32, 1, 1, 4, 256, 16, &bytes);
}

static void cf_simple_begin(cf *c, cf_simple *sp, size_t n_rows, const llmm_token *tokens, const int32_t *pos,
                            int decode) {
    cf_simple_pool(c, sp);
    int32_t zero[CF_ROWS] = {0};
    const uint32_t *tables[CF_ROWS];
    uint32_t n_blocks[CF_ROWS];
    for (size_t i = 0; i < n_rows; i++) tables[i] = k_identity16, n_blocks[i] = 16;
    if (decode) step_decode(&sp->step, &sp->kv, n_rows, tokens, pos ? pos : zero, tables, n_blocks);
    else step_prompt(&sp->step, &sp->kv, n_rows, tokens, pos ? pos : zero, k_identity16, 16);
    cf_begin(c, &sp->step);
}

/* ------------------------------------------------------------------ weight references */

/* Row bytes of type for n values, failing the test for a size the type cannot take. */
static size_t row_bytes(uint32_t type, size_t n) {
    const size_t rb = llmm__row_bytes(type, n);
    if (!rb) fail_msg("conformance: %zu values are no whole row of type %u", n, type);
    return rb;
}

/* A weight type's rows from random floats, through its reference encoder. */
static uint8_t *encode_rows(uint32_t type, const float *x, size_t ne0, size_t ne1) {
    const llmm_type_traits *tt = llmm__type_get(type);
    const size_t rb = row_bytes(type, ne0);
    uint8_t *q = xmalloc(rb * ne1);
    for (size_t j = 0; j < ne1; j++) tt->from_float(x + j * ne0, q + j * rb, ne0);
    return q;
}

/* The exact values of rows of a weight type (the type table's dequantization: every value
 * is a float exactly). */
static double *decode_rows(uint32_t type, const uint8_t *q, size_t ne0, size_t ne1) {
    const llmm_type_traits *tt = llmm__type_get(type);
    const size_t rb = row_bytes(type, ne0);
    float *f = xmalloc(ne0 * sizeof *f);
    double *d = xmalloc(ne0 * ne1 * sizeof *d);
    for (size_t j = 0; j < ne1; j++) {
        tt->dequant_row(q + j * rb, f, ne0);
        for (size_t i = 0; i < ne0; i++) d[j * ne0 + i] = f[i];
    }
    free(f);
    return d;
}

/* The activations of one matmul row as the backend's dot takes them: the exact values of the
 * operand row (F32 as is, F16/BF16 rounded, Q8_0 / Q8_1 / Q8_K quantized: d * q), and for the
 * offset formats with a Q8_1 operand (Q4_1, Q5_1) the per-block correction that the dot's
 * use of the operand's f16 sum s (in place of d * sum(q), quant.h) makes. */
typedef struct operand_ref {
    double *x;   /* (ne0) */
    double *s_err; /* (ne0 / 32) Q8_1: s - d * sum(q) per block; else NULL */
} operand_ref;

static operand_ref make_operand_ref(uint32_t wtype, const float *x, size_t n) {
    const uint32_t ot = llmm__type_get(wtype)->operand_type;
    operand_ref r = {.x = xmalloc(n * sizeof(double)), .s_err = NULL};
    if (ot == LLMM_TYPE_F32) {
        for (size_t i = 0; i < n; i++) r.x[i] = x[i];
        return r;
    }
    const size_t rb = row_bytes(ot, n);
    uint8_t *q = xmalloc(rb);
    llmm__type_get(ot)->from_float(x, q, n);
    if (ot == LLMM_TYPE_Q8_1) {
        r.s_err = xmalloc(n / QK8_1 * sizeof(double));
        const block_q8_1 *b = (const block_q8_1 *)(const void *)q;
        for (size_t k = 0; k < n / QK8_1; k++) {
            const double d = llmm__f16_to_f32(b[k].d);
            long sum = 0;
            for (int j = 0; j < QK8_1; j++) {
                r.x[k * QK8_1 + j] = d * b[k].qs[j];
                sum += b[k].qs[j];
            }
            r.s_err[k] = (double)llmm__f16_to_f32(b[k].s) - d * (double)sum;
        }
    } else if (ot == LLMM_TYPE_Q8_K) {
        const block_q8_K *b = (const block_q8_K *)(const void *)q;
        for (size_t k = 0; k < n / QK_K; k++)
            for (int j = 0; j < QK_K; j++) r.x[k * QK_K + j] = (double)b[k].d * b[k].qs[j];
    } else {
        double *d = decode_rows(ot, q, n, 1); /* F16, BF16, Q8_0: the type table decodes them */
        memcpy(r.x, d, n * sizeof *d);
        free(d);
    }
    free(q);
    return r;
}

static void operand_ref_free(operand_ref *r) {
    free(r->x);
    free(r->s_err);
}

/* The min m of a Q4_1 / Q5_1 block (both keep f16 d then f16 m first, quant.h). */
static double block_min(const uint8_t *block) {
    llmm_f16 m;
    memcpy(&m, block + sizeof(llmm_f16), sizeof m);
    return llmm__f16_to_f32(m);
}

/* Tolerance of one matmul output against the float64 dot of the exact operand values, as
 * test_weight_formats.c states it: the f32 dot keeps 8 float partial sums, (n/8 + 10) u; the
 * f16/bf16 dots 16 float lanes, (n/16 + 20) u; the quantized dots add one scale product and
 * one float sum per block of 32 (integer block sums are exact), (n/32 + 3) u; all times
 * sum |w_i x_i|. The K-quants (integer sub-block sums scaled per super-block) stay within the
 * quantized types' bound on every case here; a wrong operand or a dropped term misses it by
 * orders of magnitude. */
static double matmul_tol(uint32_t type, size_t n, double sum_abs) {
    switch (type) {
    case LLMM_TYPE_F32: return ((double)(n / 8) + 10.0) * U_F32 * sum_abs;
    case LLMM_TYPE_F16:
    case LLMM_TYPE_BF16: return ((double)(n / 16) + 20.0) * U_F32 * sum_abs;
    default: return ((double)(n / 32) + 3.0) * U_F32 * sum_abs;
    }
}

/* out[r][j] against the reference for every row and output. */
static void check_matmul_out(const cf *c, uint32_t type, const uint8_t *wq, const double *wd, size_t ne0, size_t ne1,
                             const operand_ref *xr, size_t n_rows, const float *out) {
    const size_t rb = llmm__row_bytes(type, ne0);
    for (size_t r = 0; r < n_rows; r++)
        for (size_t j = 0; j < ne1; j++) {
            double exact = 0, sum_abs = 0;
            for (size_t i = 0; i < ne0; i++) {
                const double t = wd[j * ne0 + i] * xr[r].x[i];
                exact += t;
                sum_abs += fabs(t);
            }
            if (xr[r].s_err) {
                const size_t bb = llmm__type_get(type)->block_bytes;
                for (size_t k = 0; k < ne0 / QK8_1; k++) {
                    const double m = block_min(wq + j * rb + k * bb);
                    exact += m * xr[r].s_err[k];
                    sum_abs += fabs(m * xr[r].s_err[k]);
                }
            }
            cf_close_to(c, out[r * ne1 + j], exact, matmul_tol(type, ne0, sum_abs), "out[%zu][%zu]", r, j);
        }
}

/* A value rounded to F16 (as llmm__cu_gemm rounds activations and dequantized weights). */
static double round_f16(double v) { return llmm__f16_to_f32(llmm__f32_to_f16((float)v)); }

/* The F16 GEMM contract (conformance_target.f16_gemm_min_rows): out[r][j] against the float64
 * dot of F16-rounded weights and activations. */
static void check_f16_gemm_out(const cf *c, const double *wd, size_t ne0, size_t ne1, const float *x, size_t n_rows,
                               const float *out) {
    for (size_t r = 0; r < n_rows; r++)
        for (size_t j = 0; j < ne1; j++) {
            double exact = 0, sum_abs = 0;
            for (size_t i = 0; i < ne0; i++) {
                const double t = round_f16(wd[j * ne0 + i]) * round_f16(x[r * ne0 + i]);
                exact += t;
                sum_abs += fabs(t);
            }
            cf_close_to(c, out[r * ne1 + j], exact, ((double)ne0 + 10.0) * U_F32 * sum_abs, "out[%zu][%zu] (F16 GEMM)",
                        r, j);
        }
}

/* ------------------------------------------------------------------ the table, buffers */

/* The table fills every required slot and names the core's layout; upload/download round-trip
 * odd sizes; copy moves exactly its bytes, between offsets into buffers (as the KV store's
 * copy-on-write does). */
static void check_buffers(const conformance_target *t) {
    if (!llmm__backend_table_ok(t->be)) fail_msg("[%s] backend_table_ok refuses the table", t->label);
    if (!t->be->available()) fail_msg("[%s] available() is 0", t->label);
    rng_seed(&rng, 11);
    enum { N = 1001, DST_AT = 3, SRC_AT = 5, LEN = 777 };
    for (size_t ti = 0; ti < ARRAY_LEN(k_threads); ti++) {
        cf c;
        cf_open(&c, t, k_threads[ti], 0);
        uint8_t a[N], b[N], back[N];
        for (size_t i = 0; i < N; i++) a[i] = (uint8_t)(rng_u64(&rng) | 1), b[i] = (uint8_t)(rng_u64(&rng) | 1);
        cf_case(&c, "upload/download", "%d bytes", N);
        void *ba = cf_put(&c, a, N), *bb = cf_put(&c, b, N);
        cf_get(&c, back, ba, N);
        if (memcmp(back, a, N) != 0) cf_fail(&c, "downloaded bytes differ from the uploaded ones");
        cf_get(&c, back, (const uint8_t *)ba + SRC_AT, 1); /* a download at an offset */
        if (back[0] != a[SRC_AT]) cf_fail(&c, "download at offset %d", SRC_AT);

        cf_case(&c, "copy", "%d bytes from offset %d to offset %d", LEN, SRC_AT, DST_AT);
        cf_ok(&c, t->be->copy(c.st, (uint8_t *)bb + DST_AT, (const uint8_t *)ba + SRC_AT, LEN), "copy");
        cf_get(&c, back, bb, N);
        for (size_t i = 0; i < N; i++) {
            const uint8_t want = i >= DST_AT && i < DST_AT + LEN ? a[i - DST_AT + SRC_AT] : b[i];
            if (back[i] != want) cf_fail(&c, "byte %zu is %u, want %u", i, back[i], want);
        }
        cf_close(&c);
    }
}

/* ------------------------------------------------------------------ embed */

/* Rows of a table, as a TABLE and as a MATRIX (the tied output matrix), for every type the
 * backend takes: exactly the type table's dequantized rows (every such value is a float). A
 * token out of range fails the op (or the step), and the step ends cleanly after it; the next
 * step works. */
static void check_embed(const conformance_target *t) {
    rng_seed(&rng, 21);
    enum { NE1 = 11, N_IDS = 6 };
    const llmm_token ids[N_IDS] = {0, 10, 5, 5, 3, 7};
    for (size_t ti = 0; ti < ARRAY_LEN(k_threads); ti++) {
        cf c;
        cf_open(&c, t, k_threads[ti], 0);
        cf_simple sp = {0};
        for (uint32_t type = 0; type < LLMM_TYPE_COUNT; type++) {
            if (!t->be->supports_type(type)) continue;
            const llmm_type_traits *tt = llmm__type_get(type);
            const size_t ne0 = tt->block_size == 256 ? 256 : tt->block_size == 32 ? 96 : 33;
            float *f = rng_floats(&rng, ne0 * NE1, -2.0f, 2.0f);
            uint8_t *q = encode_rows(type, f, ne0, NE1);
            double *want = decode_rows(type, q, ne0, NE1);
            float *got = xmalloc(N_IDS * ne0 * sizeof *got);
            float *out = cf_alloc(&c, N_IDS * ne0 * sizeof *got);
            for (int role = 0; role < 2; role++) {
                const llmm_tensor *w =
                    cf_weight(&c, role ? LLMM_WEIGHT_MATRIX : LLMM_WEIGHT_TABLE, type, ne0, NE1, q);
                cf_case(&c, "embed", "%s %s, %d ids, %s step", tt->name, role ? "matrix" : "table", N_IDS,
                        ti ? "prompt" : "decode");
                cf_simple_begin(&c, &sp, N_IDS, ids, NULL, ti == 0);
                cf_ok(&c, t->be->embed(c.st, w, out), "embed");
                cf_end(&c);
                cf_get(&c, got, out, N_IDS * ne0 * sizeof *got);
                for (size_t i = 0; i < N_IDS; i++)
                    for (size_t e = 0; e < ne0; e++)
                        if (!((double)got[i * ne0 + e] == want[(size_t)ids[i] * ne0 + e]))
                            cf_fail(&c, "id %d value %zu: %.9g want %.9g", ids[i], e, (double)got[i * ne0 + e],
                                    want[(size_t)ids[i] * ne0 + e]);
            }
            if (c.n_w + 2 > CF_WEIGHTS) { /* a fresh run for the next types: weights are per init */
                cf_close(&c);
                cf_open(&c, t, k_threads[ti], 0);
                memset(&sp, 0, sizeof sp);
            }
            free(f);
            free(q);
            free(want);
            free(got);
        }
        /* tokens out of range: the op (or the step) fails; step_end then works, and so does
         * the next step */
        const float row[32] = {1, 2, 3};
        const llmm_tensor *w = cf_weight(&c, LLMM_WEIGHT_TABLE, LLMM_TYPE_F32, 32, 1, row);
        float *out = cf_alloc(&c, 2 * 32 * sizeof(float));
        const llmm_token bad[] = {-1, 1, 2, INT32_MIN, INT32_MAX};
        for (size_t k = 0; k < ARRAY_LEN(bad); k++) {
            cf_case(&c, "embed", "token %d of a 1-row table", bad[k]);
            const llmm_token two[2] = {0, bad[k]};
            const int32_t pos[2] = {0, 0};
            cf_simple_pool(&c, &sp);
            step_decode(&sp.step, &sp.kv, 2, two, pos, (const uint32_t *const[]){k_identity16, k_identity16},
                        (const uint32_t[]){16, 16});
            if (t->be->step_begin(c.st, &sp.step.s) != LLMM_OK) continue; /* refused up front: fine */
            c.in_step = 1;
            if (t->be->embed(c.st, w, out) == LLMM_OK) cf_fail(&c, "embed accepted it");
            cf_end(&c);
        }
        cf_case(&c, "embed", "a step after failed ones");
        const llmm_token good[2] = {0, 0};
        float got[64];
        cf_simple_begin(&c, &sp, 2, good, NULL, 1);
        cf_ok(&c, t->be->embed(c.st, w, out), "embed");
        cf_end(&c);
        cf_get(&c, got, out, sizeof got);
        if (got[32] != 1.0f || got[33] != 2.0f || got[34] != 3.0f) cf_fail(&c, "wrong row after failed steps");
        cf_close(&c);
    }
}

/* ------------------------------------------------------------------ rms_norm */

/* out = x / sqrt(mean(x^2) + eps) * w: at most 7 float roundings, tolerance 10u |ref|. */
static void check_rms_norm(const conformance_target *t) {
    rng_seed(&rng, 31);
    const size_t dims[] = {1, 7, 33, 173, 1001}, rows[] = {1, 3, 5, 17};
    const float eps_list[] = {1e-5f, 1e-6f};
    for (size_t ti = 0; ti < ARRAY_LEN(k_threads); ti++) {
        cf c;
        cf_open(&c, t, k_threads[ti], 0);
        cf_simple sp = {0};
        for (size_t di = 0; di < ARRAY_LEN(dims); di++)
            for (size_t ri = 0; ri < ARRAY_LEN(rows); ri++) {
                const size_t dim = dims[di], n_rows = rows[ri];
                const float eps = eps_list[(di + ri) % 2];
                float *x = rng_floats(&rng, dim * n_rows, -2.0f, 2.0f), *wt = rng_floats(&rng, dim, -2.0f, 2.0f);
                float *got = xmalloc(dim * n_rows * sizeof *got);
                const float *wb = cf_vector(&c, wt, dim);
                const float *xb = cf_put(&c, x, dim * n_rows * sizeof *x);
                float *ob = cf_alloc(&c, dim * n_rows * sizeof *got);
                cf_case(&c, "rms_norm", "dim %zu, %zu rows, eps %g", dim, n_rows, (double)eps);
                cf_simple_begin(&c, &sp, n_rows, NULL, NULL, n_rows <= 4);
                cf_ok(&c, t->be->rms_norm(c.st, xb, wb, ob, n_rows, dim, eps), "rms_norm");
                cf_end(&c);
                cf_get(&c, got, ob, dim * n_rows * sizeof *got);
                for (size_t r = 0; r < n_rows; r++) {
                    double ss = 0;
                    for (size_t i = 0; i < dim; i++) ss += (double)x[r * dim + i] * x[r * dim + i];
                    const double inv = 1.0 / sqrt(ss / (double)dim + (double)eps);
                    for (size_t i = 0; i < dim; i++) {
                        const double ref = (double)x[r * dim + i] * inv * wt[i];
                        cf_close_to(&c, got[r * dim + i], ref, 10 * U_F32 * fabs(ref), "row %zu value %zu", r, i);
                    }
                }
                free(x);
                free(wt);
                free(got);
                cf_close(&c); /* a fresh run per case keeps the weight and buffer counts small */
                cf_open(&c, t, k_threads[ti], 0);
                memset(&sp, 0, sizeof sp);
            }
        cf_close(&c);
    }
}

/* ------------------------------------------------------------------ matmul */

/* One weight type's shapes: ne0 odd multiples of its block (odd counts for F32/F16/BF16),
 * ne1 with a partial 16-row tile and without a whole one. */
static size_t matmul_ne0s(uint32_t type, size_t out[3]) {
    const uint32_t bs = llmm__type_get(type)->block_size;
    if (bs == 1) out[0] = 7, out[1] = 33, out[2] = 173;
    else if (bs == 32) out[0] = 32, out[1] = 96, out[2] = 224;
    else out[0] = 256, out[1] = 768, out[2] = 0;
    return out[2] ? 3 : 2;
}

/* y = W x for every weight type the backend takes, checked against the float64 dot of the
 * exact weight values and operand values (matmul_tol). Decode steps for up to 4 rows,
 * prompt steps beyond. */
static void check_matmul(const conformance_target *t) {
    rng_seed(&rng, 41);
    const size_t ne1s[] = {37, 5}, rows[] = {1, 3, 4, 17};
    for (size_t ti = 0; ti < ARRAY_LEN(k_threads); ti++) {
        for (uint32_t type = 0; type < LLMM_TYPE_COUNT; type++) {
            if (!t->be->supports_type(type)) continue;
            const llmm_type_traits *tt = llmm__type_get(type);
            if (!tt || !tt->from_float || !tt->dequant_row || !tt->vec_dot)
                fail_msg("[%s] supports_type(%u) but the type table cannot encode it", t->label, type);
            cf c;
            cf_open(&c, t, k_threads[ti], 0);
            cf_simple sp = {0};
            size_t ne0s[3];
            const size_t n_ne0 = matmul_ne0s(type, ne0s);
            for (size_t a = 0; a < n_ne0; a++)
                for (size_t b = 0; b < ARRAY_LEN(ne1s); b++) {
                    const size_t ne0 = ne0s[a], ne1 = ne1s[b];
                    float *wf = rng_floats(&rng, ne0 * ne1, -2.0f, 2.0f);
                    uint8_t *wq = encode_rows(type, wf, ne0, ne1);
                    double *wd = decode_rows(type, wq, ne0, ne1);
                    const llmm_tensor *w = cf_weight(&c, LLMM_WEIGHT_MATRIX, type, ne0, ne1, wq);
                    for (size_t d = 0; d < ARRAY_LEN(rows); d++) {
                        const size_t n_rows = rows[d];
                        float *x = rng_floats(&rng, n_rows * ne0, -2.0f, 2.0f);
                        float *got = xmalloc(n_rows * ne1 * sizeof *got);
                        operand_ref xr[CF_ROWS];
                        for (size_t r = 0; r < n_rows; r++) xr[r] = make_operand_ref(type, x + r * ne0, ne0);
                        const float *xb = cf_put(&c, x, n_rows * ne0 * sizeof *x);
                        float *ob = cf_alloc(&c, n_rows * ne1 * sizeof *got);
                        cf_case(&c, "matmul", "%s ne0 %zu ne1 %zu, %zu rows", tt->name, ne0, ne1, n_rows);
                        cf_simple_begin(&c, &sp, n_rows, NULL, NULL, n_rows <= 4);
                        cf_ok(&c, t->be->matmul(c.st, w, xb, n_rows, ob), "matmul");
                        cf_end(&c);
                        cf_get(&c, got, ob, n_rows * ne1 * sizeof *got);
                        const int f16_gemm = t->f16_gemm_min_rows && n_rows >= t->f16_gemm_min_rows &&
                                             n_rows > 4 && (t->f16_gemm_types >> type & 1);
                        if (f16_gemm) check_f16_gemm_out(&c, wd, ne0, ne1, x, n_rows, got);
                        else check_matmul_out(&c, type, wq, wd, ne0, ne1, xr, n_rows, got);
                        for (size_t r = 0; r < n_rows; r++) operand_ref_free(&xr[r]);
                        free(x);
                        free(got);
                    }
                    free(wf);
                    free(wq);
                    free(wd);
                }
            cf_close(&c);
        }
    }
}

/* matmul_multi: each output bit for bit what matmul gives for its weight alone, for weights
 * sharing one operand (Q4_0 x3, Q8_0 with Q4_0, Q4_K with Q6_K as in Q4_K_M files), wanting
 * different ones (F16, Q4_0, F32) and more weights than one dispatch of the CPU takes. */
static void check_matmul_multi(const conformance_target *t) {
    if (!t->be->matmul_multi) return;
    rng_seed(&rng, 42);
    enum { NE0 = 256, MAX_W = 5 };
    const uint32_t sets[][MAX_W] = {
        {LLMM_TYPE_Q4_0, LLMM_TYPE_Q4_0, LLMM_TYPE_Q4_0},
        {LLMM_TYPE_Q8_0, LLMM_TYPE_Q4_0},
        {LLMM_TYPE_Q4_K, LLMM_TYPE_Q4_K, LLMM_TYPE_Q6_K},
        {LLMM_TYPE_F16, LLMM_TYPE_Q4_0, LLMM_TYPE_F32},
        {LLMM_TYPE_Q8_0, LLMM_TYPE_Q8_0, LLMM_TYPE_Q8_0, LLMM_TYPE_Q8_0, LLMM_TYPE_Q8_0},
    };
    const size_t set_len[] = {3, 2, 3, 3, 5}, ne1s[MAX_W] = {37, 8, 5, 64, 1}, rows[] = {1, 3, 17};
    for (size_t ti = 0; ti < ARRAY_LEN(k_threads); ti++)
        for (size_t si = 0; si < ARRAY_LEN(sets); si++) {
            int ok = 1;
            for (size_t i = 0; i < set_len[si]; i++) ok &= t->be->supports_type(sets[si][i]);
            if (!ok) continue;
            cf c;
            cf_open(&c, t, k_threads[ti], 0);
            cf_simple sp = {0};
            const llmm_tensor *w[MAX_W];
            for (size_t i = 0; i < set_len[si]; i++) {
                float *wf = rng_floats(&rng, NE0 * ne1s[i], -2.0f, 2.0f);
                uint8_t *wq = encode_rows(sets[si][i], wf, NE0, ne1s[i]);
                w[i] = cf_weight(&c, LLMM_WEIGHT_MATRIX, sets[si][i], NE0, ne1s[i], wq);
                free(wf);
                free(wq);
            }
            for (size_t d = 0; d < ARRAY_LEN(rows); d++) {
                const size_t n_rows = rows[d];
                float *x = rng_floats(&rng, n_rows * NE0, -2.0f, 2.0f);
                const float *xb = cf_put(&c, x, n_rows * NE0 * sizeof *x);
                float *out[MAX_W], *want[MAX_W];
                for (size_t i = 0; i < set_len[si]; i++) {
                    out[i] = cf_alloc(&c, n_rows * ne1s[i] * sizeof(float));
                    want[i] = cf_alloc(&c, n_rows * ne1s[i] * sizeof(float));
                }
                cf_case(&c, "matmul_multi", "set %zu (%zu weights), %zu rows", si, set_len[si], n_rows);
                cf_simple_begin(&c, &sp, n_rows, NULL, NULL, n_rows <= 4);
                for (size_t i = 0; i < set_len[si]; i++)
                    cf_ok(&c, t->be->matmul(c.st, w[i], xb, n_rows, want[i]), "matmul");
                cf_ok(&c, t->be->matmul_multi(c.st, w, set_len[si], xb, n_rows, out), "matmul_multi");
                cf_end(&c);
                for (size_t i = 0; i < set_len[si]; i++) {
                    const size_t n = n_rows * ne1s[i];
                    float *g = xmalloc(n * sizeof *g), *m = xmalloc(n * sizeof *m);
                    cf_get(&c, g, out[i], n * sizeof *g);
                    cf_get(&c, m, want[i], n * sizeof *m);
                    for (size_t k = 0; k < n; k++)
                        if (bits_of_f32(g[k]) != bits_of_f32(m[k]))
                            cf_fail(&c, "weight %zu (%s) output %zu: %.9g, matmul gives %.9g", i,
                                    llmm__type_get(sets[si][i])->name, k, (double)g[k], (double)m[k]);
                    free(g);
                    free(m);
                }
                free(x);
            }
            cf_close(&c);
        }
}

/* ------------------------------------------------------------------ weights in a file mapping */

/* A read-only private mapping of a temp file holding n tensors' bytes, each at a 64-byte
 * aligned offset (as GGUF aligns them); offsets[i] gets tensor i's. The file is unlinked at
 * once: the mapping keeps it. */
static uint8_t *map_weights(uint8_t *const *data, const size_t *bytes, size_t n, size_t *offsets, size_t *total) {
    char path[] = "/tmp/llmm-conformance-XXXXXX";
    const int fd = mkstemp(path);
    if (fd < 0) fail_msg("mkstemp failed");
    unlink(path);
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        offsets[i] = at;
        at = (at + bytes[i] + 63) / 64 * 64;
    }
    *total = at;
    uint8_t *file = calloc(1, at);
    if (!file) fail_msg("out of memory");
    for (size_t i = 0; i < n; i++) memcpy(file + offsets[i], data[i], bytes[i]);
    const int wrote = write(fd, file, at) == (ssize_t)at;
    free(file);
    void *map = wrote ? mmap(NULL, at, PROT_READ, MAP_PRIVATE, fd, 0) : MAP_FAILED;
    close(fd);
    if (map == MAP_FAILED) fail_msg("cannot write or map the weights file");
    return map;
}

/* The weights as the model hands them over when it maps its file and lets the backend
 * repack (weights_mapped = repack_weights = 1): the CPU makes packed copies in decode steps of
 * 1-4 rows and then reads them, also for a tied embedding table; vectors are copied out of
 * the mapping. Matmuls of prompt steps (before and after the copies), of decode steps (making
 * and reading them), embed rows from every weight and rms_norm by a mapped vector: all
 * against the references. */
static void check_mapped(const conformance_target *t) {
    rng_seed(&rng, 51);
    enum { NE1 = 37, MAX_T = LLMM_TYPE_COUNT, DIM = 96 };
    uint32_t types[MAX_T];
    size_t n_types = 0;
    for (uint32_t type = 0; type < LLMM_TYPE_COUNT; type++)
        if (t->be->supports_type(type)) types[n_types++] = type;
    if (n_types + 1 > CF_WEIGHTS) fail_msg("conformance: more types than weights per run");
    uint8_t *data[MAX_T + 1];
    double *wd[MAX_T];
    size_t bytes[MAX_T + 1], ne0[MAX_T], offsets[MAX_T + 1], total;
    for (size_t i = 0; i < n_types; i++) {
        const uint32_t bs = llmm__type_get(types[i])->block_size;
        ne0[i] = bs == 256 ? 256 : bs == 32 ? 96 : 33;
        float *f = rng_floats(&rng, ne0[i] * NE1, -2.0f, 2.0f);
        data[i] = encode_rows(types[i], f, ne0[i], NE1);
        wd[i] = decode_rows(types[i], data[i], ne0[i], NE1);
        bytes[i] = llmm__row_bytes(types[i], ne0[i]) * NE1;
        free(f);
    }
    float *norm = rng_floats(&rng, DIM, -2.0f, 2.0f);
    data[n_types] = (uint8_t *)norm;
    bytes[n_types] = DIM * sizeof(float);
    uint8_t *map = map_weights(data, bytes, n_types + 1, offsets, &total);
    for (size_t ti = 0; ti < ARRAY_LEN(k_threads); ti++) {
        cf c;
        cf_open(&c, t, k_threads[ti], 1);
        cf_simple sp = {0};
        const llmm_tensor *w[MAX_T];
        for (size_t i = 0; i < n_types; i++) {
            const llmm_tensor host = {.data = map + offsets[i], .type = types[i], .ne0 = (int64_t)ne0[i],
                                      .ne1 = NE1, .row_bytes = llmm__row_bytes(types[i], ne0[i])};
            w[i] = cf_weight_at(&c, LLMM_WEIGHT_MATRIX, &host);
        }
        const llmm_tensor vhost = {.data = map + offsets[n_types], .type = LLMM_TYPE_F32, .ne0 = DIM, .ne1 = 1,
                                   .row_bytes = DIM * sizeof(float)};
        const float *nb = cf_weight_at(&c, LLMM_WEIGHT_VECTOR, &vhost)->data;
        /* prompt (originals), decode 1..4 rows (copies made in the first, read after), prompt
         * again (the copies, where the backend reads them in prompts) */
        const size_t passes[][2] = {{3, 0}, {1, 1}, {2, 1}, {3, 1}, {4, 1}, {5, 0}};
        for (size_t pi = 0; pi < ARRAY_LEN(passes); pi++) {
            const size_t n_rows = passes[pi][0];
            const int decode = (int)passes[pi][1];
            float *x = rng_floats(&rng, n_rows * 256, -2.0f, 2.0f);
            const float *xb = cf_put(&c, x, n_rows * 256 * sizeof *x);
            float *ob[MAX_T];
            for (size_t i = 0; i < n_types; i++) ob[i] = cf_alloc(&c, n_rows * NE1 * sizeof(float));
            cf_case(&c, "matmul", "mapped weights, %s step of %zu rows", decode ? "decode" : "prompt", n_rows);
            cf_simple_begin(&c, &sp, n_rows, NULL, NULL, decode);
            for (size_t i = 0; i < n_types; i++) {
                /* x rows are ne0 apart for this weight: the first n_rows * ne0 values */
                cf_ok(&c, t->be->matmul(c.st, w[i], xb, n_rows, ob[i]), "matmul");
            }
            cf_end(&c);
            for (size_t i = 0; i < n_types; i++) {
                float got[5 * NE1];
                operand_ref xr[5];
                for (size_t r = 0; r < n_rows; r++) xr[r] = make_operand_ref(types[i], x + r * ne0[i], ne0[i]);
                cf_get(&c, got, ob[i], n_rows * NE1 * sizeof(float));
                cf_case(&c, "matmul", "mapped %s ne0 %zu ne1 %d, %s step of %zu rows", llmm__type_get(types[i])->name,
                        ne0[i], NE1, decode ? "decode" : "prompt", n_rows);
                check_matmul_out(&c, types[i], map + offsets[i], wd[i], ne0[i], NE1, xr, n_rows, got);
                for (size_t r = 0; r < n_rows; r++) operand_ref_free(&xr[r]);
            }
            free(x);
        }
        /* every weight as a tied embedding table, rows in whole tiles and in the tail */
        const llmm_token ids[4] = {0, 17, 31, 36};
        float *eb = cf_alloc(&c, 4 * 256 * sizeof(float));
        for (size_t i = 0; i < n_types; i++) {
            float got[4 * 256];
            cf_case(&c, "embed", "mapped %s as a tied table", llmm__type_get(types[i])->name);
            cf_simple_begin(&c, &sp, 4, ids, NULL, 1);
            cf_ok(&c, t->be->embed(c.st, w[i], eb), "embed");
            cf_end(&c);
            cf_get(&c, got, eb, 4 * ne0[i] * sizeof(float));
            for (size_t r = 0; r < 4; r++)
                for (size_t e = 0; e < ne0[i]; e++)
                    if (!((double)got[r * ne0[i] + e] == wd[i][(size_t)ids[r] * ne0[i] + e]))
                        cf_fail(&c, "id %d value %zu: %.9g want %.9g", ids[r], e, (double)got[r * ne0[i] + e],
                                wd[i][(size_t)ids[r] * ne0[i] + e]);
        }
        /* a norm by a mapped vector */
        float x[DIM], got[DIM];
        for (size_t i = 0; i < DIM; i++) x[i] = rng_float(&rng, -2.0f, 2.0f);
        const float *xb = cf_put(&c, x, sizeof x);
        float *ob = cf_alloc(&c, sizeof got);
        cf_case(&c, "rms_norm", "mapped weight vector");
        cf_simple_begin(&c, &sp, 1, NULL, NULL, 1);
        cf_ok(&c, t->be->rms_norm(c.st, xb, nb, ob, 1, DIM, 1e-5f), "rms_norm");
        cf_end(&c);
        cf_get(&c, got, ob, sizeof got);
        double ss = 0;
        for (size_t i = 0; i < DIM; i++) ss += (double)x[i] * x[i];
        for (size_t i = 0; i < DIM; i++) {
            const double ref = x[i] / sqrt(ss / DIM + 1e-5) * norm[i];
            cf_close_to(&c, got[i], ref, 10 * U_F32 * fabs(ref), "value %zu", i);
        }
        cf_close(&c);
    }
    munmap(map, total);
    for (size_t i = 0; i < n_types; i++) {
        free(data[i]);
        free(wd[i]);
    }
    free(norm);
}

/* ------------------------------------------------------------------ rope */

/* Pair i of the first n_rot values of a head rotates by theta_i = pos * freq_scale *
 * base^(-2i/n_rot) / ff_i, cos and sin scaled by mscale: ADJACENT pairs (2i, 2i+1), NEOX
 * pairs (i, i + n_rot/2); values past n_rot are untouched. The bound: theta_i
 * built by i float multiplications carries (i (3 + 2 ln(base)/n_rot) + 1) u relative, the
 * frequency scale and factor two more roundings; cos/sin, mscale and the rotation a few u:
 * |err| <= mscale (|x0| + |x1|) (2 |d theta_i| + 8u). */
static void check_rope(const conformance_target *t) {
    rng_seed(&rng, 61);
    const size_t shapes[][2] = {{8, 8}, {64, 64}, {10, 6}, {64, 32}, {2, 2}, {24, 24}, {12, 4}};
    const float bases[] = {10000.0f, 1000000.0f};
    enum { N_ROWS = 7, N_HEADS = 3 };
    for (size_t ti = 0; ti < ARRAY_LEN(k_threads); ti++)
        for (int kind = 0; kind < 2; kind++) {
            cf c;
            cf_open(&c, t, k_threads[ti], 0);
            cf_simple sp = {0};
            for (size_t sh = 0; sh < ARRAY_LEN(shapes); sh++)
                for (size_t bi = 0; bi < ARRAY_LEN(bases); bi++) {
                    const size_t hd = shapes[sh][0], n_rot = shapes[sh][1], n = (size_t)N_ROWS * N_HEADS * hd;
                    const int scaled = (int)((sh + bi) % 2); /* freq factors, freq_scale, mscale */
                    const int32_t pos[N_ROWS] = {0, 1, 7, 101, 1023, 3999, (int32_t)(2 * rng_below(&rng, 2000) + 1)};
                    float ff[64];
                    for (size_t i = 0; i < n_rot / 2; i++) ff[i] = rng_float(&rng, 1.0f, 8.0f);
                    float *x = rng_floats(&rng, n, -2.0f, 2.0f), *y = xmalloc(n * sizeof *y);
                    float *xb = cf_put(&c, x, n * sizeof *x);
                    const llmm_rope_params rp = {.n_rot = (uint32_t)n_rot, .base = bases[bi],
                                                 .freq_scale = scaled ? 0.25f : 1.0f, .mscale = scaled ? 1.25f : 1.0f,
                                                 .kind = (llmm_rope_kind)kind,
                                                 .freq_factors = scaled ? cf_vector(&c, ff, n_rot / 2) : NULL};
                    cf_case(&c, "rope", "%s hd %zu n_rot %zu base %g%s", kind ? "neox" : "adjacent", hd, n_rot,
                            (double)bases[bi], scaled ? ", factors, freq_scale 0.25, mscale 1.25" : "");
                    cf_simple_begin(&c, &sp, N_ROWS, NULL, pos, sh % 2);
                    cf_ok(&c, t->be->rope(c.st, xb, N_HEADS, hd, &rp), "rope");
                    cf_end(&c);
                    cf_get(&c, y, xb, n * sizeof *y);
                    for (size_t r = 0; r < N_ROWS; r++)
                        for (size_t h = 0; h < N_HEADS; h++) {
                            const float *xv = x + (r * N_HEADS + h) * hd, *yv = y + (r * N_HEADS + h) * hd;
                            for (size_t i = 0; i < n_rot / 2; i++) {
                                const size_t a = kind ? i : 2 * i, b = kind ? i + n_rot / 2 : 2 * i + 1;
                                const double base = bases[bi];
                                const double th = (double)pos[r] * rp.freq_scale *
                                                  pow(base, -2.0 * (double)i / (double)n_rot) / (scaled ? ff[i] : 1.0);
                                const double cs = cos(th) * rp.mscale, sn = sin(th) * rp.mscale;
                                const double dth =
                                    th * ((double)i * (3.0 + 2.0 * log(base) / (double)n_rot) + 3.0) * U_F32;
                                const double tol = rp.mscale * (fabs(xv[a]) + fabs(xv[b])) * (2 * dth + 8 * U_F32);
                                cf_close_to(&c, yv[a], xv[a] * cs - xv[b] * sn, tol, "pos %d head %zu pair %zu", pos[r],
                                            h, i);
                                cf_close_to(&c, yv[b], xv[a] * sn + xv[b] * cs, tol, "pos %d head %zu pair %zu", pos[r],
                                            h, i);
                            }
                            for (size_t i = n_rot; i < hd; i++)
                                if (bits_of_f32(yv[i]) != bits_of_f32(xv[i]))
                                    cf_fail(&c, "pos %d head %zu: value %zu past n_rot changed", pos[r], h, i);
                        }
                    free(x);
                    free(y);
                }
            cf_close(&c);
        }
}

/* ------------------------------------------------------------------ element-wise ops */

static const size_t k_elem_sizes[] = {1, 7, 31, 33, 173, 1001, 70001}; /* the last: the CPU's threads */

static const char *const k_act_names[] = {"silu", "gelu_tanh", "sigmoid"};

/* silu(g) * up = g / (1 + e^-g) * up and sigmoid(g) * up = up / (1 + e^-g) (e^-g within a few
 * ulps, then three roundings): tolerance 8u |ref|. gelu_tanh(g) * up = 0.5 g (1 +
 * tanh(z)) up, z = sqrt(2/pi) (g + 0.044715 g^3): z carries ~5 roundings and 1 + tanh(z)
 * cancels for negative g, so |err| <= 0.5 |g up| (5u |z| + 4u) + 6u |ref|. Sigmoid only where
 * the backend has the gated_delta_net slot (tensor.h: only those meet it). */
static void check_glu(const conformance_target *t) {
    rng_seed(&rng, 71);
    const int n_acts = t->be->gated_delta_net ? 3 : 2;
    for (size_t ti = 0; ti < ARRAY_LEN(k_threads); ti++) {
        cf c;
        cf_open(&c, t, k_threads[ti], 0);
        cf_simple sp = {0};
        for (int act = 0; act < n_acts; act++)
            for (size_t si = 0; si < ARRAY_LEN(k_elem_sizes); si++) {
                const size_t n = k_elem_sizes[si];
                const float range = si % 2 ? 8.0f : 2.0f; /* [-8, 8] saturates */
                float *g = rng_floats(&rng, n, -range, range), *up = rng_floats(&rng, n, -2.0f, 2.0f);
                float *got = xmalloc(n * sizeof *got);
                float *gb = cf_put(&c, g, n * sizeof *g);
                const float *ub = cf_put(&c, up, n * sizeof *up);
                cf_case(&c, "glu", "%s, %zu values", k_act_names[act], n);
                cf_simple_begin(&c, &sp, 1, NULL, NULL, 1);
                cf_ok(&c, t->be->glu(c.st, gb, ub, n, (llmm_activation)act), "glu");
                cf_end(&c);
                cf_get(&c, got, gb, n * sizeof *got);
                for (size_t i = 0; i < n; i++) {
                    const double gd = g[i], ud = up[i];
                    double ref, tol;
                    if (act == LLMM_ACT_SILU || act == LLMM_ACT_SIGMOID) {
                        ref = (act == LLMM_ACT_SILU ? gd : 1.0) / (1.0 + exp(-gd)) * ud;
                        tol = 8 * U_F32 * fabs(ref);
                    } else {
                        const double z = 0.79788456080286535588 * (gd + 0.044715 * gd * gd * gd);
                        ref = 0.5 * gd * (1.0 + tanh(z)) * ud;
                        tol = 0.5 * fabs(gd * ud) * (5 * U_F32 * fabs(z) + 4 * U_F32) + 6 * U_F32 * fabs(ref);
                    }
                    cf_close_to(&c, got[i], ref, tol, "value %zu (gate %.9g)", i, gd);
                }
                free(g);
                free(up);
                free(got);
            }
        cf_close(&c);
    }
}

/* add, add_rows (bias a prepared vector) and scale: one float operation per value, exact
 * against it. softcap: cap * tanh(x / cap) with the quotient rounded twice (reciprocal,
 * product) and tanh within two ulps: |err| <= 4u (|x| + |ref|). */
static void check_elementwise(const conformance_target *t) {
    rng_seed(&rng, 72);
    for (size_t ti = 0; ti < ARRAY_LEN(k_threads); ti++) {
        cf c;
        cf_open(&c, t, k_threads[ti], 0);
        cf_simple sp = {0};
        for (size_t si = 0; si < ARRAY_LEN(k_elem_sizes); si++) {
            const size_t n = k_elem_sizes[si];
            float *a = rng_floats(&rng, n, -50.0f, 50.0f), *b = rng_floats(&rng, n, -2.0f, 2.0f);
            float *got = xmalloc(n * sizeof *got);
            float *ab = cf_put(&c, a, n * sizeof *a);
            const float *bb = cf_put(&c, b, n * sizeof *b);
            cf_case(&c, "add", "%zu values", n);
            cf_simple_begin(&c, &sp, 1, NULL, NULL, 1);
            cf_ok(&c, t->be->add(c.st, ab, bb, n), "add");
            cf_end(&c);
            cf_get(&c, got, ab, n * sizeof *got);
            for (size_t i = 0; i < n; i++)
                if (got[i] != a[i] + b[i])
                    cf_fail(&c, "value %zu: %.9g want %.9g", i, (double)got[i], (double)(a[i] + b[i]));

            const float s = rng_float(&rng, -3.0f, 3.0f);
            float *xb = cf_put(&c, a, n * sizeof *a);
            cf_case(&c, "scale", "%zu values by %g", n, (double)s);
            cf_simple_begin(&c, &sp, 1, NULL, NULL, 1);
            cf_ok(&c, t->be->scale(c.st, xb, n, s), "scale");
            cf_end(&c);
            cf_get(&c, got, xb, n * sizeof *got);
            for (size_t i = 0; i < n; i++)
                if (got[i] != a[i] * s) cf_fail(&c, "value %zu: %.9g want %.9g", i, (double)got[i], (double)(a[i] * s));

            const float cap = si % 2 ? 30.0f : 5.0f;
            float *cb = cf_put(&c, a, n * sizeof *a);
            cf_case(&c, "softcap", "%zu values, cap %g", n, (double)cap);
            cf_simple_begin(&c, &sp, 1, NULL, NULL, 1);
            cf_ok(&c, t->be->softcap(c.st, cb, n, cap), "softcap");
            cf_end(&c);
            cf_get(&c, got, cb, n * sizeof *got);
            for (size_t i = 0; i < n; i++) {
                const double ref = cap * tanh((double)a[i] / cap);
                cf_close_to(&c, got[i], ref, 4 * U_F32 * (fabs(a[i]) + fabs(ref)), "value %zu (x %.9g)", i,
                            (double)a[i]);
            }
            free(a);
            free(b);
            free(got);
        }
        const size_t dims[] = {1, 7, 33, 173}, rows[] = {1, 3, 17};
        for (size_t di = 0; di < ARRAY_LEN(dims); di++)
            for (size_t ri = 0; ri < ARRAY_LEN(rows); ri++) {
                const size_t dim = dims[di], n_rows = rows[ri], n = dim * n_rows;
                float *x = rng_floats(&rng, n, -2.0f, 2.0f), *bias = rng_floats(&rng, dim, -2.0f, 2.0f);
                float *got = xmalloc(n * sizeof *got);
                const float *bv = cf_vector(&c, bias, dim);
                float *xb = cf_put(&c, x, n * sizeof *x);
                cf_case(&c, "add_rows", "dim %zu, %zu rows", dim, n_rows);
                cf_simple_begin(&c, &sp, n_rows, NULL, NULL, n_rows <= 4);
                cf_ok(&c, t->be->add_rows(c.st, xb, bv, n_rows, dim), "add_rows");
                cf_end(&c);
                cf_get(&c, got, xb, n * sizeof *got);
                for (size_t i = 0; i < n; i++)
                    if (got[i] != x[i] + bias[i % dim])
                        cf_fail(&c, "row %zu value %zu: %.9g want %.9g", i / dim, i % dim, (double)got[i],
                                (double)(x[i] + bias[i % dim]));
                free(x);
                free(bias);
                free(got);
            }
        cf_close(&c);
    }
}

/* split_halves: rows of 2 * width values into their first halves (a) and second halves (b),
 * moved exactly; the optional slot of the backends that run qwen35. */
static void check_split_halves(const conformance_target *t) {
    if (!t->be->split_halves) return;
    rng_seed(&rng, 73);
    const size_t widths[] = {1, 16, 33, 128}, groups[] = {1, 5, 64};
    for (size_t ti = 0; ti < ARRAY_LEN(k_threads); ti++) {
        cf c;
        cf_open(&c, t, k_threads[ti], 0);
        cf_simple sp = {0};
        for (size_t wi = 0; wi < ARRAY_LEN(widths); wi++)
            for (size_t gi = 0; gi < ARRAY_LEN(groups); gi++) {
                const size_t width = widths[wi], n_groups = groups[gi], n = n_groups * width;
                float *src = rng_floats(&rng, 2 * n, -4.0f, 4.0f);
                float *got_a = xmalloc(n * sizeof *got_a), *got_b = xmalloc(n * sizeof *got_b);
                const float *sb = cf_put(&c, src, 2 * n * sizeof *src);
                float *ab = cf_alloc(&c, n * sizeof *ab), *bb = cf_alloc(&c, n * sizeof *bb);
                cf_case(&c, "split_halves", "%zu groups of 2 x %zu", n_groups, width);
                cf_simple_begin(&c, &sp, 1, NULL, NULL, 1);
                cf_ok(&c, t->be->split_halves(c.st, sb, ab, bb, n_groups, width), "split_halves");
                cf_end(&c);
                cf_get(&c, got_a, ab, n * sizeof *got_a);
                cf_get(&c, got_b, bb, n * sizeof *got_b);
                for (size_t g = 0; g < n_groups; g++)
                    for (size_t i = 0; i < width; i++)
                        if (got_a[g * width + i] != src[2 * g * width + i] ||
                            got_b[g * width + i] != src[2 * g * width + width + i])
                            cf_fail(&c, "group %zu value %zu: a %.9g b %.9g want %.9g %.9g", g, i,
                                    (double)got_a[g * width + i], (double)got_b[g * width + i],
                                    (double)src[2 * g * width + i], (double)src[2 * g * width + width + i]);
                free(src);
                free(got_a);
                free(got_b);
            }
        cf_close(&c);
    }
}

/* ------------------------------------------------------------------ recurrent layers */

/* The sequences of a recurrent op's step: n_rows[i] consecutive rows of sequence i from
 * position first[i] on; one sequence makes a prompt step (id 7), several a decode step (ids
 * 100 + i), as the core's prompt, decode and speculative verify steps are. */
typedef struct cf_rec_case {
    size_t n_seqs;
    uint32_t first[4];
    uint32_t n_rows[4];
} cf_rec_case;

static const cf_rec_case k_rec_cases[] = {
    {1, {0}, {1}}, {1, {0}, {9}}, {1, {1}, {4}}, {1, {5}, {7}}, {1, {3}, {21}}, /* prompt steps, from a state at 1, 3, 5 */
    {3, {0, 2, 7}, {1, 1, 1}},                                       /* a decode step at mixed positions */
    {3, {3, 0, 1}, {2, 4, 3}},                                       /* a verify step of three sequences */
};

/* The step of case rc over cf_simple's pool, and in seq_ids the sequence id of each sequence;
 * returns the rows. */
static size_t cf_rec_begin(cf *c, cf_simple *sp, const cf_rec_case *rc, llmm_seq_id *seq_ids) {
    cf_simple_pool(c, sp);
    cf_step *s = &sp->step;
    memset(s, 0, sizeof *s);
    size_t r = 0;
    for (size_t q = 0; q < rc->n_seqs; q++) {
        seq_ids[q] = rc->n_seqs == 1 ? 7 : (llmm_seq_id)(100 + q);
        s->seq_ids[q] = seq_ids[q];
        s->tables[q] = k_identity16;
        s->n_blocks[q] = 16;
        for (uint32_t i = 0; i < rc->n_rows[q]; i++, r++) {
            s->tokens[r] = (llmm_token)r;
            s->pos[r] = (int32_t)(rc->first[q] + i);
            s->row_seq[r] = (uint32_t)q;
        }
    }
    s->s = (llmm_step){.kind = rc->n_seqs == 1 ? LLMM_STEP_PROMPT : LLMM_STEP_DECODE, .n_rows = r,
                       .tokens = s->tokens, .pos = s->pos, .row_seq = s->row_seq, .n_seqs = (uint32_t)rc->n_seqs,
                       .seq_ids = s->seq_ids, .block_tables = s->tables, .n_blocks = s->n_blocks, .kv = &sp->kv};
    cf_begin(c, s);
    return r;
}

/* Floats of the state slots for sequence ids up to 103 (the cases' ids), seq_stride apart. */
#define CF_REC_SEQ_IDS 104

/* short_conv against a double reference of backend.h's llmm_conv_batch: u = B * X (one
 * rounding: within u |u|), y[c] = sum over the kernel's taps of tap * u, out = C * y: the sum
 * of kernel products and two more products carry at most (kernel + 3) roundings of
 * sum |C tap u|, doubled for margin. The state after the call: each sequence's last
 * kernel - 1 u rows (those at positions >= 0) within u |u|; the other sequences' slots as
 * they were. */
static void check_short_conv(const conformance_target *t) {
    if (!t->be->short_conv) return;
    rng_seed(&rng, 74);
    const uint32_t dims[] = {1, 33, 64}, kernels[] = {1, 3, 4};
    /* one backend start per shape: its cases' weights stay within CF_WEIGHTS */
    for (size_t ti = 0; ti < ARRAY_LEN(k_threads); ti++)
        for (size_t di = 0; di < ARRAY_LEN(dims); di++)
            for (size_t ki = 0; ki < ARRAY_LEN(kernels); ki++) {
                cf c;
                cf_open(&c, t, k_threads[ti], 0);
                cf_simple sp = {0};
                for (size_t ci = 0; ci < ARRAY_LEN(k_rec_cases); ci++) {
                    const cf_rec_case *rc = &k_rec_cases[ci];
                    const uint32_t dim = dims[di], kernel = kernels[ki];
                    const size_t stride = (size_t)(kernel - 1) * dim + 1; /* + 1: slots not packed */
                    const size_t state_n = stride * CF_REC_SEQ_IDS;
                    size_t n_rows = 0;
                    for (size_t q = 0; q < rc->n_seqs; q++) n_rows += rc->n_rows[q];
                    float *bcx = rng_floats(&rng, n_rows * 3 * dim, -2.0f, 2.0f);
                    float *taps = rng_floats(&rng, (size_t)dim * kernel, -1.0f, 1.0f);
                    float *states = rng_floats(&rng, state_n, -2.0f, 2.0f);
                    float *got = xmalloc(n_rows * dim * sizeof *got), *got_states = xmalloc(state_n * sizeof *got_states);
                    const float *bb = cf_put(&c, bcx, n_rows * 3 * dim * sizeof *bcx);
                    float *ob = cf_alloc(&c, n_rows * dim * sizeof *ob);
                    float *stb = cf_put(&c, states, state_n * sizeof *states);
                    const float *tv = cf_vector(&c, taps, (size_t)dim * kernel);
                    cf_case(&c, "short_conv", "dim %u, kernel %u, case %zu", dim, kernel, ci);
                    llmm_seq_id ids[4];
                    cf_rec_begin(&c, &sp, rc, ids);
                    const llmm_conv_batch b = {.bcx = bb, .out = ob, .taps = tv, .states = stb, .seq_stride = stride,
                                               .n_rows = n_rows, .dim = dim, .kernel = kernel};
                    cf_ok(&c, t->be->short_conv(c.st, &b), "short_conv");
                    cf_end(&c);
                    cf_get(&c, got, ob, n_rows * dim * sizeof *got);
                    cf_get(&c, got_states, stb, state_n * sizeof *got_states);
                    /* u of a sequence's positions first - (kernel - 1) .. last, zero below 0 */
                    double *u = xmalloc((kernel - 1 + CF_ROWS) * (size_t)dim * sizeof *u);
                    char *is_seq = calloc(CF_REC_SEQ_IDS, 1);
                    for (size_t q = 0, r0 = 0; q < rc->n_seqs; r0 += rc->n_rows[q], q++) {
                        const float *slot = states + (size_t)ids[q] * stride;
                        is_seq[ids[q]] = 1;
                        for (uint32_t h = 0; h < kernel - 1; h++) /* history row h: position first - (kernel - 1) + h */
                            for (uint32_t ch = 0; ch < dim; ch++) {
                                const int64_t p = (int64_t)rc->first[q] - (kernel - 1) + h;
                                u[(size_t)h * dim + ch] = p < 0 ? 0.0 : slot[(size_t)h * dim + ch];
                            }
                        for (uint32_t i = 0; i < rc->n_rows[q]; i++) {
                            const float *row = bcx + (r0 + i) * 3 * dim;
                            for (uint32_t ch = 0; ch < dim; ch++)
                                u[(size_t)(kernel - 1 + i) * dim + ch] = (double)row[ch] * row[2 * dim + ch];
                            for (uint32_t ch = 0; ch < dim; ch++) {
                                double y = 0, mag = 0;
                                for (uint32_t j = 0; j < kernel; j++) {
                                    const double term = (double)taps[(size_t)ch * kernel + j] * u[(size_t)(i + j) * dim + ch];
                                    y += term;
                                    mag += fabs(term);
                                }
                                const double cval = row[dim + ch];
                                cf_close_to(&c, got[(r0 + i) * dim + ch], cval * y,
                                            2 * (kernel + 3) * U_F32 * fabs(cval) * mag + 1e-30,
                                            "seq %zu row %u channel %u", q, i, ch);
                            }
                        }
                        const uint32_t last = rc->first[q] + rc->n_rows[q] - 1;
                        const float *got_slot = got_states + (size_t)ids[q] * stride;
                        for (uint32_t h = 0; h < kernel - 1; h++) {
                            const int64_t p = (int64_t)last - (kernel - 2) + h;
                            if (p < 0) continue;
                            const size_t ui = (size_t)(p - ((int64_t)rc->first[q] - (kernel - 1)));
                            for (uint32_t ch = 0; ch < dim; ch++) {
                                const double ref = u[ui * dim + ch];
                                cf_close_to(&c, got_slot[(size_t)h * dim + ch], ref, U_F32 * fabs(ref),
                                            "seq %zu state row %u (position %lld) channel %u", q, h, (long long)p, ch);
                            }
                        }
                    }
                    for (size_t id = 0; id < CF_REC_SEQ_IDS; id++)
                        if (!is_seq[id] && memcmp(got_states + id * stride, states + id * stride, stride * sizeof *states))
                            cf_fail(&c, "the state slot of sequence id %zu, not in the step, changed", id);
                    free(u);
                    free(is_seq);
                    free(bcx);
                    free(taps);
                    free(states);
                    free(got);
                    free(got_states);
                }
                cf_close(&c);
            }
}

/* One sequence of a gated_delta_net case in doubles, per backend.h's llmm_delta_batch: its rows
 * r0 .. r0 + n - 1 from the state slot (conv inputs, then the matrices; both zero from
 * position 0), the outputs into out and the state it leaves into slot_out. */
typedef struct delta_shape {
    uint32_t nk, nv, hd, kernel;
} delta_shape;

static double sigmoid_d(double x) { return 1.0 / (1.0 + exp(-x)); }

static void delta_reference(const delta_shape *sh, const llmm_delta_batch *hb, size_t r0, uint32_t n, uint32_t first,
                            const float *slot, double *out, double *slot_out) {
    const size_t hd = sh->hd, C = (2 * (size_t)sh->nk + sh->nv) * hd, hist = sh->kernel - 1, V = sh->nv;
    double *in = xmalloc((hist + n) * C * sizeof *in), *S = xmalloc(V * hd * hd * sizeof *S);
    double *x = xmalloc(C * sizeof *x), *o = xmalloc(hd * sizeof *o), *d = xmalloc(hd * sizeof *d);
    for (size_t i = 0; i < hist * C; i++) in[i] = first >= hist - i / C ? slot[i] : 0.0;
    for (size_t i = 0; i < V * hd * hd; i++) S[i] = first ? slot[hist * C + i] : 0.0;
    for (uint32_t t = 0; t < n; t++) {
        const size_t r = r0 + t;
        for (size_t ch = 0; ch < C; ch++) in[(hist + t) * C + ch] = hb->qkv[r * C + ch];
        for (size_t ch = 0; ch < C; ch++) {
            double y = 0;
            for (uint32_t j = 0; j < sh->kernel; j++) y += (double)hb->taps[ch * sh->kernel + j] * in[(t + j) * C + ch];
            x[ch] = y * sigmoid_d(y);
        }
        for (size_t h = 0; h < 2 * (size_t)sh->nk; h++) { /* query heads, then key heads */
            double sum = 0;
            for (size_t i = 0; i < hd; i++) sum += x[h * hd + i] * x[h * hd + i];
            const double scale = 1.0 / fmax(sqrt(sum), hb->eps);
            for (size_t i = 0; i < hd; i++) x[h * hd + i] *= scale;
        }
        for (size_t j = 0; j < V; j++) {
            const double *q = x + (j % sh->nk) * hd, *k = x + (sh->nk + j % sh->nk) * hd;
            const double *v = x + 2 * (size_t)sh->nk * hd + j * hd;
            const double beta = sigmoid_d(hb->beta_raw[r * V + j]);
            const double sp_in = (double)hb->alpha_raw[r * V + j] + hb->dt_bias[j];
            const double g = (sp_in > 20 ? sp_in : log1p(exp(sp_in))) * hb->a[j];
            double *Sj = S + j * hd * hd;
            for (size_t i = 0; i < hd * hd; i++) Sj[i] *= exp(g);
            for (size_t c = 0; c < hd; c++) {
                double sk = 0;
                for (size_t i = 0; i < hd; i++) sk += Sj[i * hd + c] * k[i];
                d[c] = beta * (v[c] - sk);
            }
            for (size_t i = 0; i < hd; i++)
                for (size_t c = 0; c < hd; c++) Sj[i * hd + c] += k[i] * d[c];
            double ms = 0;
            for (size_t c = 0; c < hd; c++) {
                double sq = 0;
                for (size_t i = 0; i < hd; i++) sq += Sj[i * hd + c] * q[i];
                o[c] = sq / sqrt((double)hd);
                ms += o[c] * o[c];
            }
            const double inv = 1.0 / sqrt(ms / (double)hd + hb->eps);
            for (size_t c = 0; c < hd; c++) {
                const double z = hb->z[r * V * hd + j * hd + c];
                out[t * V * hd + j * hd + c] = o[c] * inv * hb->norm[c] * z * sigmoid_d(z);
            }
        }
    }
    for (size_t i = 0; i < hist * C; i++) slot_out[i] = in[n * C + i];
    memcpy(slot_out + hist * C, S, V * hd * hd * sizeof *S);
    free(in), free(S), free(x), free(o), free(d);
}

/* gated_delta_net against delta_reference. The chunked form a backend may use for prompt rows
 * and the step-by-step recurrence round differently; both are held to what the model suites hold
 * them to (test_recurrent: chunked and token-by-token logits within 1e-4): each output and
 * state matrix value within 1e-4 (1 + |ref|). The state's convolution inputs are copies: exact
 * (those of positions below 0 are not compared). Other sequences' slots unchanged. */
static void check_gated_delta_net(const conformance_target *t) {
    if (!t->be->gated_delta_net) return;
    rng_seed(&rng, 75);
    /* 40: a CPU SIMD table's column blocks, single vectors and a column tail (kernels/delta_tiles.h) */
    static const delta_shape shapes[] = {{2, 4, 16, 4}, {1, 3, 8, 2}, {2, 2, 32, 1}, {1, 2, 40, 3}};
    for (size_t ti = 0; ti < ARRAY_LEN(k_threads); ti++)
        for (size_t si = 0; si < ARRAY_LEN(shapes); si++) {
            cf c;
            cf_open(&c, t, k_threads[ti], 0); /* per shape: its cases' weights stay within CF_WEIGHTS */
            cf_simple sp = {0};
            for (size_t ci = 0; ci < ARRAY_LEN(k_rec_cases); ci++) {
                const delta_shape *sh = &shapes[si];
                const cf_rec_case *rc = &k_rec_cases[ci];
                const size_t hd = sh->hd, V = sh->nv, C = (2 * (size_t)sh->nk + V) * hd, hist = sh->kernel - 1;
                const size_t slot_n = hist * C + V * hd * hd, stride = slot_n + 3, state_n = stride * CF_REC_SEQ_IDS;
                size_t n_rows = 0;
                for (size_t q = 0; q < rc->n_seqs; q++) n_rows += rc->n_rows[q];
                float *qkv = rng_floats(&rng, n_rows * C, -2.0f, 2.0f), *z = rng_floats(&rng, n_rows * V * hd, -3.0f, 3.0f);
                float *beta = rng_floats(&rng, n_rows * V, -3.0f, 3.0f), *alpha = rng_floats(&rng, n_rows * V, -3.0f, 3.0f);
                float *taps = rng_floats(&rng, C * sh->kernel, -1.0f, 1.0f), *dt = rng_floats(&rng, V, -1.0f, 1.0f);
                float *a = rng_floats(&rng, V, -1.5f, -0.1f), *norm = rng_floats(&rng, hd, 0.5f, 1.5f);
                float *states = rng_floats(&rng, state_n, -0.5f, 0.5f);
                float *got = xmalloc(n_rows * V * hd * sizeof *got), *got_states = xmalloc(state_n * sizeof *got_states);
                const llmm_delta_batch host = {.qkv = qkv, .z = z, .beta_raw = beta, .alpha_raw = alpha, .taps = taps,
                                               .dt_bias = dt, .a = a, .norm = norm, .n_k_heads = sh->nk,
                                               .n_v_heads = sh->nv, .head_dim = sh->hd, .kernel = sh->kernel, .eps = 1e-6f};
                llmm_delta_batch b = host;
                b.qkv = cf_put(&c, qkv, n_rows * C * sizeof *qkv);
                b.work = cf_alloc(&c, n_rows * C * sizeof *b.work);
                b.z = cf_put(&c, z, n_rows * V * hd * sizeof *z);
                b.beta_raw = cf_put(&c, beta, n_rows * V * sizeof *beta);
                b.alpha_raw = cf_put(&c, alpha, n_rows * V * sizeof *alpha);
                b.taps = cf_vector(&c, taps, C * sh->kernel);
                b.dt_bias = cf_vector(&c, dt, V);
                b.a = cf_vector(&c, a, V);
                b.norm = cf_vector(&c, norm, hd);
                b.out = cf_alloc(&c, n_rows * V * hd * sizeof *b.out);
                b.states = cf_put(&c, states, state_n * sizeof *states);
                b.seq_stride = stride;
                b.n_rows = n_rows;
                cf_case(&c, "gated_delta_net", "%u key heads, %u value heads of %u, kernel %u, case %zu", sh->nk, sh->nv,
                        sh->hd, sh->kernel, ci);
                llmm_seq_id ids[4];
                cf_rec_begin(&c, &sp, rc, ids);
                cf_ok(&c, t->be->gated_delta_net(c.st, &b), "gated_delta_net");
                cf_end(&c);
                cf_get(&c, got, b.out, n_rows * V * hd * sizeof *got);
                cf_get(&c, got_states, b.states, state_n * sizeof *got_states);
                double *ref = xmalloc(CF_ROWS * V * hd * sizeof *ref), *ref_slot = xmalloc(slot_n * sizeof *ref_slot);
                char *is_seq = calloc(CF_REC_SEQ_IDS, 1);
                for (size_t q = 0, r0 = 0; q < rc->n_seqs; r0 += rc->n_rows[q], q++) {
                    is_seq[ids[q]] = 1;
                    delta_reference(sh, &host, r0, rc->n_rows[q], rc->first[q], states + (size_t)ids[q] * stride, ref,
                                    ref_slot);
                    for (size_t i = 0; i < rc->n_rows[q] * V * hd; i++)
                        cf_close_to(&c, got[r0 * V * hd + i], ref[i], 1e-4 * (1 + fabs(ref[i])),
                                    "seq %zu row %zu value head %zu dim %zu", q, i / (V * hd), i / hd % V, i % hd);
                    const float *gs = got_states + (size_t)ids[q] * stride;
                    const uint32_t last = rc->first[q] + rc->n_rows[q] - 1;
                    for (size_t i = 0; i < hist * C; i++)
                        if (last + 1 >= hist - i / C && gs[i] != ref_slot[i])
                            cf_fail(&c, "seq %zu state convolution input row %zu channel %zu: %.9g want %.9g", q, i / C,
                                    i % C, (double)gs[i], ref_slot[i]);
                    for (size_t i = hist * C; i < slot_n; i++)
                        cf_close_to(&c, gs[i], ref_slot[i], 1e-4 * (1 + fabs(ref_slot[i])), "seq %zu state value %zu",
                                    q, i - hist * C);
                }
                for (size_t id = 0; id < CF_REC_SEQ_IDS; id++)
                    if (!is_seq[id] && memcmp(got_states + id * stride, states + id * stride, stride * sizeof *states))
                        cf_fail(&c, "the state slot of sequence id %zu, not in the step, changed", id);
                free(ref), free(ref_slot), free(is_seq);
                free(qkv), free(z), free(beta), free(alpha), free(taps), free(dt), free(a), free(norm), free(states);
                free(got), free(got_states);
            }
            cf_close(&c);
        }
}

/* ------------------------------------------------------------------ kv_write */

static const uint32_t k_kv_types[] = {LLMM_KV_F32, LLMM_KV_F16, LLMM_KV_Q8};
static const char *const k_kv_names[] = {"f32", "f16", "q8"};

/* The pool after a kv_write of the step s in layer l: each row's K and V vectors (kv_dim
 * values, head after head) at their block and slot, F32 exact, F16 the nearest half, Q8
 * within half a step of a scale no coarser than the position's largest |value| / 127 (one
 * scale per position, all heads, as the CPU stores it; a finer one passes too); every other
 * byte as it was (before). */
static void check_kv_pool(const cf *c, const llmm_kv_layout *kv, const uint8_t *got, const uint8_t *before,
                          const cf_step *s, uint32_t l, const float *k, const float *v, size_t pool_bytes) {
    const size_t hd = kv->head_dim, kv_dim = (size_t)kv->n_head_kv * hd;
    uint8_t *written = calloc(1, pool_bytes);
    if (!written) fail_msg("out of memory");
    for (size_t r = 0; r < s->s.n_rows; r++)
        for (int which = 0; which < 2; which++) {
            const float *x = (which ? v : k) + r * kv_dim;
            double amax = 0;
            for (size_t e = 0; e < kv_dim; e++) amax = fmax(amax, fabs(x[e]));
            for (uint32_t h = 0; h < kv->n_head_kv; h++) {
                const size_t off =
                    pool_offset(kv, which, l, h, s->s.block_tables[s->s.row_seq[r]], (uint32_t)s->s.pos[r]);
                memset(written + off, 1, kv->row_bytes);
                float scale = 0;
                memcpy(&scale, got + off, sizeof scale);
                if (kv->type == LLMM_KV_Q8 && !(scale > 0 && scale <= amax / 127 * (1 + 1e-6)))
                    cf_fail(c, "row %zu %c head %u: Q8 scale %.9g for largest |value| %.9g", r, which ? 'V' : 'K', h,
                            (double)scale, amax);
                for (size_t e = 0; e < hd; e++) {
                    const double want = x[h * hd + e], val = row_value(kv->type, got + off, e);
                    const int ok = kv->type == LLMM_KV_F32   ? val == want
                                   : kv->type == LLMM_KV_F16 ? val == llmm__f16_to_f32(llmm__f32_to_f16((float)want))
                                                             : fabs(val - want) <= scale * (0.5 + 1e-5);
                    if (!ok)
                        cf_fail(c, "row %zu (pos %d) %c head %u value %zu: stored %.9g for %.9g", r, s->s.pos[r],
                                which ? 'V' : 'K', h, e, val, want);
                }
            }
        }
    for (size_t i = 0; i < pool_bytes; i++)
        if (!written[i] && got[i] != before[i]) cf_fail(c, "pool byte %zu changed outside the written rows", i);
    free(written);
}

/* kv_write of each KV type: a decode step of 4 sequences at different positions (layer 1),
 * a prompt step of 5 consecutive positions of one sequence (layer 0), through shuffled,
 * disjoint block tables; a layer past the pool's fails. */
static void check_kv_write(const conformance_target *t) {
    rng_seed(&rng, 81);
    enum { NL = 2, NHKV = 2, HD = 11, KVD = NHKV * HD, BS = 4, NB = 16 };
    for (size_t ti = 0; ti < ARRAY_LEN(k_threads); ti++)
        for (size_t ki = 0; ki < ARRAY_LEN(k_kv_types); ki++) {
            cf c;
            cf_open(&c, t, k_threads[ti], 0);
            size_t bytes;
            const llmm_kv_layout kv = cf_pool(&c, k_kv_types[ki], NL, NHKV, HD, BS, NB, &bytes);
            uint8_t *before = xmalloc(bytes), *got = xmalloc(bytes);
            for (size_t i = 0; i < bytes; i++) before[i] = (uint8_t)rng_u64(&rng);
            uint32_t perm[NB];
            shuffled_ids(perm, NB);
            for (int prompt = 0; prompt < 2; prompt++) {
                cf_ok(&c, t->be->upload(c.st, kv.pool, before, bytes), "upload");
                cf_step s;
                const int32_t dpos[4] = {0, 5, 9, 14}, ppos[5] = {2, 3, 4, 5, 6};
                const uint32_t *tables[4] = {perm, perm + 1, perm + 3, perm + 6}, n_blocks[4] = {1, 2, 3, 4};
                if (prompt) step_prompt(&s, &kv, 5, NULL, ppos, perm + 10, 2);
                else step_decode(&s, &kv, 4, NULL, dpos, tables, n_blocks);
                const uint32_t layer = prompt ? 0 : 1;
                const size_t n_rows = s.s.n_rows;
                float *k = rng_floats(&rng, n_rows * KVD, -3.0f, 3.0f), *v = rng_floats(&rng, n_rows * KVD, -3.0f, 3.0f);
                const float *kb = cf_put(&c, k, n_rows * KVD * sizeof *k),
                            *vb = cf_put(&c, v, n_rows * KVD * sizeof *v);
                cf_case(&c, "kv_write", "%s pool, %s step of %zu rows, layer %u", k_kv_names[ki],
                        prompt ? "prompt" : "decode", n_rows, layer);
                cf_begin(&c, &s);
                cf_ok(&c, t->be->kv_write(c.st, layer, kb, vb), "kv_write");
                if (t->be->kv_write(c.st, NL, kb, vb) == LLMM_OK)
                    cf_fail(&c, "kv_write accepted layer %d of %d", NL, NL);
                cf_end(&c);
                cf_get(&c, got, kv.pool, bytes);
                check_kv_pool(&c, &kv, got, before, &s, layer, k, v, bytes);
                free(k);
                free(v);
            }
            free(before);
            free(got);
            cf_close(&c);
        }
}

/* ------------------------------------------------------------------ attention */

/* Every row of the pool random and valid for its type (F16 from random floats, Q8 random
 * quants under a random scale), so a read of a wrong block, slot, head or layer sees other
 * values than the reference. */
static uint8_t *random_pool(const llmm_kv_layout *kv, size_t bytes) {
    uint8_t *p = xmalloc(bytes);
    memset(p, 0, bytes);
    const size_t n_rows = bytes / kv->row_bytes;
    for (size_t r = 0; r < n_rows; r++) {
        uint8_t *row = p + r * kv->row_bytes;
        for (size_t e = 0; e < kv->head_dim; e++) {
            const float f = rng_float(&rng, -2.0f, 2.0f);
            if (kv->type == LLMM_KV_F32) memcpy(row + 4 * e, &f, 4);
            else if (kv->type == LLMM_KV_F16) {
                const llmm_f16 h = llmm__f32_to_f16(f);
                memcpy(row + 2 * e, &h, 2);
            } else row[4 + e] = (uint8_t)(int8_t)((int)rng_below(&rng, 255) - 127);
        }
        if (kv->type == LLMM_KV_Q8) {
            const float scale = rng_float(&rng, 0.004f, 0.016f);
            memcpy(row, &scale, 4);
        }
    }
    return p;
}

typedef struct attn_case {
    const char *name;
    int prompt;
    uint32_t window;
    float softcap;
    float scale_mul; /* of 1/sqrt(head_dim) */
} attn_case;

/* One row's output against float64 softmax attention over the stored values (test_cpu_attention.c's
 * bound): a score is off by at most ds = scale (hd/8 + 10) u sum|q k| + u |s| (8-lane float
 * dot, then the scale; soft-capping adds 4u (|s| + |capped s|)); each softmax weight then by
 * 2 ds + 4u relative, and the float sum over the n positions adds (n + 1) u:
 *     |err| <= sum_p w_p |v_p| (2 ds + (n + 6) u),  one more u for Q8's scale * q. */
static void check_attn_row(const cf *c, const llmm_kv_layout *kv, const uint8_t *pool, uint32_t l,
                           const uint32_t *table, int32_t pos, const llmm_attn_batch *b, const float *q,
                           const float *out) {
    const size_t hd = b->head_dim;
    const uint32_t n_kv = (uint32_t)pos + 1, start = b->window && n_kv > b->window ? n_kv - b->window : 0;
    const double q8 = kv->type == LLMM_KV_Q8;
    double s[64];
    for (uint32_t h = 0; h < b->n_head; h++) {
        const uint32_t kvh = h / (b->n_head / b->n_head_kv);
        double smax = -INFINITY, sum = 0, ds = 0;
        for (uint32_t p = start; p < n_kv; p++) {
            const uint8_t *krow = pool + pool_offset(kv, 0, l, kvh, table, p);
            double dot = 0, abs_dot = 0;
            for (size_t d = 0; d < hd; d++) {
                const double x = (double)q[h * hd + d] * row_value(kv->type, krow, d);
                dot += x;
                abs_dot += fabs(x);
            }
            const double raw = dot * b->scale;
            s[p - start] = b->softcap > 0 ? b->softcap * tanh(raw / b->softcap) : raw;
            double e = b->scale * ((double)(hd / 8) + 10 + q8) * U_F32 * abs_dot + U_F32 * fabs(raw);
            if (b->softcap > 0) e += 4 * U_F32 * (fabs(raw) + fabs(s[p - start]));
            ds = fmax(ds, e);
            smax = fmax(smax, s[p - start]);
        }
        for (uint32_t p = start; p < n_kv; p++) sum += (s[p - start] = exp(s[p - start] - smax));
        for (size_t d = 0; d < hd; d++) {
            double ref = 0, mag = 0;
            for (uint32_t p = start; p < n_kv; p++) {
                const double vv = row_value(kv->type, pool + pool_offset(kv, 1, l, kvh, table, p), d);
                ref += s[p - start] / sum * vv;
                mag += s[p - start] / sum * fabs(vv);
            }
            cf_close_to(c, out[h * hd + d], ref, mag * (2 * ds + (n_kv - start + 6.0 + q8) * U_F32),
                        "pos %d head %u value %zu", pos, h, d);
        }
    }
}

/* Attention of each KV type, GQA (4 query heads over 2 K/V heads), head sizes 24 and 40:
 * decode steps of 4 sequences of different lengths (1..38 positions) and a prompt step of 20
 * causal rows of one sequence (positions 18..37, the CPU's row blocks), through shuffled,
 * disjoint block tables of 8-position blocks, in layer 1 of 2; plain, with a sliding window
 * (5 and 9 positions), soft-capped. The pool is uploaded, not written by kv_write. */
static void check_attention(const conformance_target *t) {
    rng_seed(&rng, 91);
    enum { NL = 2, NH = 4, NHKV = 2, BS = 8, NB = 24, P_ROWS = 20 };
    const uint32_t hds[] = {24, 40};
    const attn_case cases[] = {
        {"plain", 0, 0, 0.0f, 1.0f},    {"window 5", 0, 5, 0.0f, 1.0f}, {"softcap 2", 0, 0, 2.0f, 4.0f},
        {"plain", 1, 0, 0.0f, 1.0f},    {"window 9", 1, 9, 0.0f, 1.0f}, {"softcap 3", 1, 0, 3.0f, 2.0f},
    };
    for (size_t ti = 0; ti < ARRAY_LEN(k_threads); ti++)
        for (size_t ki = 0; ki < ARRAY_LEN(k_kv_types); ki++)
            for (size_t hi = 0; hi < ARRAY_LEN(hds); hi++) {
                const uint32_t hd = hds[hi], qd = NH * hd;
                cf c;
                cf_open(&c, t, k_threads[ti], 0);
                size_t bytes;
                const llmm_kv_layout kv = cf_pool(&c, k_kv_types[ki], NL, NHKV, hd, BS, NB, &bytes);
                uint8_t *pool = random_pool(&kv, bytes);
                cf_ok(&c, t->be->upload(c.st, kv.pool, pool, bytes), "upload");
                uint32_t perm[NB];
                shuffled_ids(perm, NB);
                const int32_t dpos[4] = {0, 6, 17, 37};
                const uint32_t *tables[4] = {perm, perm + 1, perm + 2, perm + 5}, n_blocks[4] = {1, 1, 3, 5};
                int32_t ppos[P_ROWS];
                for (int i = 0; i < P_ROWS; i++) ppos[i] = 18 + i;
                float *q = rng_floats(&rng, P_ROWS * qd, -2.0f, 2.0f), *got = xmalloc(P_ROWS * qd * sizeof *got);
                const float *qb = cf_put(&c, q, P_ROWS * qd * sizeof *q);
                float *ob = cf_alloc(&c, P_ROWS * qd * sizeof *got);
                for (size_t ci = 0; ci < ARRAY_LEN(cases); ci++) {
                    const attn_case *ac = &cases[ci];
                    cf_step s;
                    if (ac->prompt) step_prompt(&s, &kv, P_ROWS, NULL, ppos, perm + 10, 5);
                    else step_decode(&s, &kv, 4, NULL, dpos, tables, n_blocks);
                    const llmm_attn_batch b = {.q = qb, .out = ob, .n_rows = s.s.n_rows, .n_head = NH,
                                               .n_head_kv = NHKV, .head_dim = hd, .window = ac->window,
                                               .scale = ac->scale_mul / sqrtf((float)hd), .softcap = ac->softcap};
                    cf_case(&c, "attention", "%s pool, head_dim %u, %s step of %zu rows, %s", k_kv_names[ki], hd,
                            ac->prompt ? "prompt" : "decode", s.s.n_rows, ac->name);
                    cf_begin(&c, &s);
                    cf_ok(&c, t->be->attention(c.st, 1, &b), "attention");
                    cf_end(&c);
                    cf_get(&c, got, ob, s.s.n_rows * qd * sizeof *got);
                    for (size_t r = 0; r < s.s.n_rows; r++)
                        check_attn_row(&c, &kv, pool, 1, s.s.block_tables[s.s.row_seq[r]], s.s.pos[r], &b,
                                       q + r * qd, got + r * qd);
                }
                free(pool);
                free(q);
                free(got);
                cf_close(&c);
            }
}

/* ------------------------------------------------------------------ LoRA deltas */

enum { LD_ADAPTERS = 3, LD_PARTS = 2, LD_ROWS = 11, LD_MAX_RANK = 12 };

/* One adapter's operands for one part, as the core lays them out (backend.h): A rows, B
 * transposed in panels; the values they hold, for the reference. */
typedef struct ld_operands {
    double *a, *b; /* (rank, n_in), (n_out, rank) */
    llmm_tensor ta, tbt;
} ld_operands;

static void ld_make(cf *c, ld_operands *o, uint32_t type, size_t n_in, size_t n_out, size_t rank) {
    float *af = rng_floats(&rng, rank * n_in, -0.5f, 0.5f), *bf = rng_floats(&rng, n_out * rank, -0.5f, 0.5f);
    uint8_t *ea = encode_rows(type, af, n_in, rank), *eb = encode_rows(type, bf, rank, n_out);
    o->a = decode_rows(type, ea, n_in, rank);
    o->b = decode_rows(type, eb, rank, n_out);
    for (size_t o0 = 0; o0 < n_out; o0 += LLMM_LORA_PANEL) { /* exact: the values are the type's */
        const size_t w = n_out - o0 < LLMM_LORA_PANEL ? n_out - o0 : LLMM_LORA_PANEL;
        for (size_t r = 0; r < rank; r++)
            for (size_t j = 0; j < w; j++) bf[o0 * rank + r * w + j] = (float)o->b[(o0 + j) * rank + r];
    }
    uint8_t *ep = encode_rows(type, bf, n_out * rank, 1);
    o->ta = (llmm_tensor){.data = cf_put(c, ea, rank * row_bytes(type, n_in)), .type = type, .ne0 = (int64_t)n_in,
                          .ne1 = (int64_t)rank, .row_bytes = row_bytes(type, n_in)};
    o->tbt = (llmm_tensor){.data = cf_put(c, ep, row_bytes(type, n_out * rank)), .type = type,
                           .ne0 = (int64_t)n_out, .ne1 = (int64_t)rank, .row_bytes = row_bytes(type, n_out)};
    free(af);
    free(bf);
    free(ea);
    free(eb);
    free(ep);
}

/* Which step rows use which adapter: disjoint, or with rows 2 and 9 in two groups (their deltas
 * summed in group order). Row 10 runs without an adapter in the first part. */
typedef struct ld_layout {
    const char *name;
    uint32_t rows[LD_ADAPTERS][LD_ROWS];
    size_t count[LD_ADAPTERS];
} ld_layout;

static const ld_layout k_ld_layouts[] = {
    {"disjoint groups", {{0, 2, 3, 5, 6, 7, 9}, {1, 4, 8}, {10}}, {7, 3, 1}},
    {"rows in two groups", {{0, 2, 3, 5, 6, 7, 9}, {1, 2, 4, 8, 9}, {10}}, {7, 5, 1}},
};

/* The groups of part pi (the first part skips the last adapter), restricted to row only (or all
 * rows when only is LD_ROWS); returns their number. */
static size_t ld_groups(const ld_layout *lay, ld_operands ops[LD_PARTS][LD_ADAPTERS], size_t pi, const float *scales,
                        size_t only, uint32_t rows[LD_ADAPTERS][LD_ROWS], float sc[LD_ADAPTERS][LD_ROWS],
                        llmm_lora_group *g) {
    size_t n = 0;
    for (size_t a = 0; a < (pi == 0 ? LD_ADAPTERS - 1 : LD_ADAPTERS); a++) {
        size_t k = 0;
        for (size_t i = 0; i < lay->count[a]; i++)
            if (only == LD_ROWS || lay->rows[a][i] == only) {
                sc[a][k] = scales[a * LD_ROWS + i];
                rows[a][k++] = lay->rows[a][i];
            }
        if (k) g[n++] = (llmm_lora_group){.a = &ops[pi][a].ta, .bt = &ops[pi][a].tbt, .rows = rows[a],
                                          .scales = sc[a], .count = k};
    }
    return n;
}

/* One case of the LoRA checks: operands of every part and adapter, a scale per (adapter, row of
 * the layout), the input rows and two copies of random output rows (out for the whole batch,
 * alone for each row on its own). */
typedef struct ld_case {
    ld_operands ops[LD_PARTS][LD_ADAPTERS];
    float scales[LD_ADAPTERS * LD_ROWS];
    float *x;
    const float *xb;
    float *y0[LD_PARTS], *out[LD_PARTS], *alone[LD_PARTS];
} ld_case;

static const size_t k_ld_outs[LD_PARTS] = {200, 24}, k_ld_ranks[LD_ADAPTERS] = {12, 4, 8};

static void ld_case_make(cf *c, ld_case *k, uint32_t type, size_t n_in) {
    for (size_t pi = 0; pi < LD_PARTS; pi++)
        for (size_t a = 0; a < LD_ADAPTERS; a++) ld_make(c, &k->ops[pi][a], type, n_in, k_ld_outs[pi], k_ld_ranks[a]);
    for (size_t i = 0; i < ARRAY_LEN(k->scales); i++) k->scales[i] = rng_float(&rng, -2.0f, 2.0f);
    k->x = rng_floats(&rng, LD_ROWS * n_in, -1.0f, 1.0f);
    k->xb = cf_put(c, k->x, LD_ROWS * n_in * sizeof *k->x);
    for (size_t pi = 0; pi < LD_PARTS; pi++) {
        k->y0[pi] = rng_floats(&rng, LD_ROWS * k_ld_outs[pi], -1.0f, 1.0f);
        k->out[pi] = cf_put(c, k->y0[pi], LD_ROWS * k_ld_outs[pi] * sizeof(float));
        k->alone[pi] = cf_put(c, k->y0[pi], LD_ROWS * k_ld_outs[pi] * sizeof(float));
    }
}

/* Each part's rows (out, as the batch left them) against a double reference of y0 + m B (A x)
 * summed over the row's adapters in the layout, m the use's multiplier (mult[a * LD_ROWS + i]
 * for adapter a's row i; the first part skips the last adapter), and each row bit for bit the
 * same as in alone, where that row was the call's only one; then the case is freed. */
static void ld_verify(cf *c, const ld_layout *lay, ld_case *k, const float *mult, size_t n_in) {
    for (size_t pi = 0; pi < LD_PARTS; pi++) {
        const size_t n_out = k_ld_outs[pi], n = LD_ROWS * n_out;
        float *got = xmalloc(n * sizeof *got), *one = xmalloc(n * sizeof *one);
        cf_get(c, got, k->out[pi], n * sizeof *got);
        cf_get(c, one, k->alone[pi], n * sizeof *one);
        for (size_t r = 0; r < LD_ROWS; r++) {
            double ref[256] = {0}, mag[256] = {0};
            for (size_t a = 0; a < (pi == 0 ? LD_ADAPTERS - 1 : LD_ADAPTERS); a++)
                for (size_t i = 0; i < lay->count[a]; i++) {
                    if (lay->rows[a][i] != r) continue;
                    const ld_operands *o = &k->ops[pi][a];
                    const double m = mult[a * LD_ROWS + i];
                    const size_t rank = k_ld_ranks[a];
                    for (size_t q = 0; q < rank; q++) {
                        double tq = 0, tm = 0;
                        for (size_t d = 0; d < n_in; d++) {
                            tq += o->a[q * n_in + d] * k->x[r * n_in + d];
                            tm += fabs(o->a[q * n_in + d] * k->x[r * n_in + d]);
                        }
                        for (size_t j = 0; j < n_out; j++) {
                            ref[j] += m * tq * o->b[j * rank + q];
                            mag[j] += fabs(m * o->b[j * rank + q]) * tm;
                        }
                    }
                }
            for (size_t j = 0; j < n_out; j++) {
                const double want = k->y0[pi][r * n_out + j] + ref[j];
                const double tol = 2.4e-7 * ((double)n_in + LD_MAX_RANK) * (mag[j] + 1) + 1e-6;
                cf_close_to(c, got[r * n_out + j], want, tol, "part %zu row %zu column %zu", pi, r, j);
                if (bits_of_f32(got[r * n_out + j]) != bits_of_f32(one[r * n_out + j]))
                    cf_fail(c, "part %zu row %zu column %zu: %.9g in the batch, %.9g alone", pi, r, j,
                            (double)got[r * n_out + j], (double)one[r * n_out + j]);
            }
        }
        free(got);
        free(one);
        free(k->y0[pi]);
    }
    for (size_t pi = 0; pi < LD_PARTS; pi++)
        for (size_t a = 0; a < LD_ADAPTERS; a++) free(k->ops[pi][a].a), free(k->ops[pi][a].b);
    free(k->x);
}

/* The cases of the LoRA checks: thread counts, operand types, input widths and layouts. */
typedef void (*ld_check_fn)(const conformance_target *t, cf *c, const ld_layout *lay, ld_case *k, size_t n_in);

static void ld_for_each_case(const conformance_target *t, const char *op, ld_check_fn check) {
    rng_seed(&rng, 17);
    const size_t n_ins[] = {40, 1100};
    const uint32_t types[] = {LLMM_TYPE_F32, LLMM_TYPE_F16};
    for (size_t ti = 0; ti < ARRAY_LEN(k_threads); ti++)
        for (size_t ty = 0; ty < ARRAY_LEN(types); ty++)
            for (size_t ii = 0; ii < ARRAY_LEN(n_ins); ii++)
                for (size_t li = 0; li < ARRAY_LEN(k_ld_layouts); li++) {
                    cf c;
                    cf_open(&c, t, k_threads[ti], 0);
                    ld_case k;
                    ld_case_make(&c, &k, types[ty], n_ins[ii]);
                    cf_case(&c, op, "%s, n_in %zu, %s operands", k_ld_layouts[li].name, n_ins[ii],
                            llmm__type_get(types[ty])->name);
                    check(t, &c, &k_ld_layouts[li], &k, n_ins[ii]);
                    cf_close(&c);
                }
}

/* lora_delta against a double reference of s B (A x) added in group order, and each row's
 * result bit for bit the same when the call holds that row alone (the slot's contract). */
static void lora_delta_case(const conformance_target *t, cf *c, const ld_layout *lay, ld_case *k, size_t n_in) {
    cf_simple sp = {0};
    float *tb = cf_alloc(c, LD_ROWS * LD_ADAPTERS * LD_MAX_RANK * sizeof(float));
    for (size_t only = 0; only <= LD_ROWS; only++) { /* each row alone, then all together */
        uint32_t rows[LD_PARTS][LD_ADAPTERS][LD_ROWS];
        float sc[LD_PARTS][LD_ADAPTERS][LD_ROWS];
        llmm_lora_group g[LD_PARTS][LD_ADAPTERS];
        llmm_lora_part parts[LD_PARTS];
        size_t n_parts = 0;
        for (size_t pi = 0; pi < LD_PARTS; pi++) {
            const size_t n_groups = ld_groups(lay, k->ops, pi, k->scales, only, rows[pi], sc[pi], g[pi]);
            if (n_groups)
                parts[n_parts++] = (llmm_lora_part){.out = only == LD_ROWS ? k->out[pi] : k->alone[pi],
                                                    .n_out = k_ld_outs[pi], .groups = g[pi], .n_groups = n_groups};
        }
        if (!n_parts) continue;
        cf_simple_begin(c, &sp, LD_ROWS, NULL, NULL, 0);
        cf_ok(c, t->be->lora_delta(c->st, k->xb, n_in, parts, n_parts, tb), "lora_delta");
        cf_end(c);
    }
    ld_verify(c, lay, k, k->scales, n_in);
}

static void check_lora_delta(const conformance_target *t) {
    if (t->be->lora_delta) ld_for_each_case(t, "lora_delta", lora_delta_case);
}

/* The table entry of adapter a: reversed, and entry 0 left empty, so that a kernel reading the
 * adapter's index or entry 0 in place of the step's entry shows. */
static uint32_t ld_entry(size_t a) { return (uint32_t)(LD_ADAPTERS - a); }
/* Adapter 0 has an alpha (its multiplier is scale * alpha / rank), the others none. */
static float ld_alpha(size_t a) { return a == 0 ? 6.0f : 0.0f; }

/* lora_rows: the adapters made resident in a table, each row's uses (its adapters in layout
 * order) in a decode step's descriptor; the same reference and row independence as
 * lora_delta's (rows alone: every other row without adapters), the multiplier the host's. */
static void lora_rows_case(const conformance_target *t, cf *c, const ld_layout *lay, ld_case *k, size_t n_in) {
    enum { USES = 2 }; /* the layouts put a row in two adapters at most */
    cf_ok(c, t->be->lora_table_reserve(c->st, LD_ADAPTERS + 1, LD_PARTS, LD_ROWS), "lora_table_reserve");
    for (size_t a = 0; a < LD_ADAPTERS; a++) {
        llmm_lora_operands slots[LD_PARTS] = {{0}};
        for (size_t pi = 0; pi < LD_PARTS; pi++)
            if (pi != 0 || a != LD_ADAPTERS - 1)
                slots[pi] =
                    (llmm_lora_operands){.a = &k->ops[pi][a].ta, .bt = &k->ops[pi][a].tbt, .alpha = ld_alpha(a)};
        cf_ok(c, t->be->lora_table_set(c->st, ld_entry(a), slots), "lora_table_set");
    }
    float mult[LD_ADAPTERS * LD_ROWS];
    for (size_t a = 0; a < LD_ADAPTERS; a++)
        for (size_t i = 0; i < LD_ROWS; i++) /* as the host's llmm__lora_scale, in float */
            mult[a * LD_ROWS + i] = ld_alpha(a) != 0.f ? k->scales[a * LD_ROWS + i] * ld_alpha(a) / (float)k_ld_ranks[a]
                                                       : k->scales[a * LD_ROWS + i];
    float *tb = cf_alloc(c, LD_PARTS * LD_ROWS * LLMM_LORA_MAX_USES * LD_MAX_RANK * sizeof(float));
    cf_simple sp = {0};
    cf_simple_pool(c, &sp);
    int32_t pos[LD_ROWS] = {0};
    const uint32_t *tables[LD_ROWS];
    uint32_t n_blocks[LD_ROWS];
    for (size_t i = 0; i < LD_ROWS; i++) tables[i] = k_identity16, n_blocks[i] = 16;
    for (size_t only = 0; only <= LD_ROWS; only++) { /* each row alone, then all together */
        uint32_t entry[LD_ROWS * USES];
        float scale[LD_ROWS * USES];
        for (size_t i = 0; i < LD_ROWS * USES; i++) entry[i] = LLMM_LORA_NO_ENTRY, scale[i] = 0.f;
        for (size_t a = 0; a < LD_ADAPTERS; a++)
            for (size_t i = 0; i < lay->count[a]; i++) {
                const uint32_t r = lay->rows[a][i];
                if (only != LD_ROWS && r != only) continue;
                size_t u = 0;
                while (entry[r * USES + u] != LLMM_LORA_NO_ENTRY) u++;
                entry[r * USES + u] = ld_entry(a);
                scale[r * USES + u] = k->scales[a * LD_ROWS + i];
            }
        llmm_lora_slot_part parts[LD_PARTS];
        for (size_t pi = 0; pi < LD_PARTS; pi++)
            parts[pi] = (llmm_lora_slot_part){.slot = (uint32_t)pi, .out = only == LD_ROWS ? k->out[pi] : k->alone[pi],
                                              .n_out = k_ld_outs[pi]};
        step_decode(&sp.step, &sp.kv, LD_ROWS, NULL, pos, tables, n_blocks);
        sp.step.s.lora_uses = USES;
        sp.step.s.lora_entry = entry;
        sp.step.s.lora_scale = scale;
        cf_begin(c, &sp.step);
        cf_ok(c, t->be->lora_rows(c->st, k->xb, n_in, parts, LD_PARTS, 0, tb, LD_MAX_RANK), "lora_rows");
        cf_end(c);
    }
    ld_verify(c, lay, k, mult, n_in);
}

static void check_lora_rows(const conformance_target *t) {
    if (t->be->lora_rows) ld_for_each_case(t, "lora_rows", lora_rows_case);
}

/* ------------------------------------------------------------------ the step's rules */

/* The ops that read the step fail cleanly outside one (no crash, status not OK), and a step
 * after them works. */
static void check_outside_step(const conformance_target *t) {
    cf c;
    cf_open(&c, t, 1, 0);
    cf_simple sp = {0};
    float row[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    const llmm_tensor *w = cf_weight(&c, LLMM_WEIGHT_TABLE, LLMM_TYPE_F32, 8, 1, row);
    float *x = cf_put(&c, row, sizeof row), *out = cf_alloc(&c, sizeof row);
    const llmm_rope_params rp = {.n_rot = 8, .base = 10000.0f, .freq_scale = 1.0f, .mscale = 1.0f};
    const llmm_attn_batch b = {.q = x, .out = out, .n_rows = 1, .n_head = 1, .n_head_kv = 1, .head_dim = 8,
                               .scale = 0.5f};
    cf_case(&c, "ops outside a step", "embed, rope, kv_write, attention");
    if (t->be->embed(c.st, w, out) == LLMM_OK) cf_fail(&c, "embed succeeded");
    if (t->be->rope(c.st, x, 1, 8, &rp) == LLMM_OK) cf_fail(&c, "rope succeeded");
    if (t->be->kv_write(c.st, 0, x, x) == LLMM_OK) cf_fail(&c, "kv_write succeeded");
    if (t->be->attention(c.st, 0, &b) == LLMM_OK) cf_fail(&c, "attention succeeded");
    cf_case(&c, "embed", "a step after ops outside one");
    const llmm_token id = 0;
    cf_simple_begin(&c, &sp, 1, &id, NULL, 1);
    cf_ok(&c, t->be->embed(c.st, w, out), "embed");
    cf_end(&c);
    float got[8];
    cf_get(&c, got, out, sizeof got);
    if (memcmp(got, row, sizeof row) != 0) cf_fail(&c, "wrong row");
    cf_close(&c);
}

/* ------------------------------------------------------------------ the run */

void conformance_run(const conformance_target *t) {
    n_cases = 0;
    check_buffers(t);
    check_outside_step(t);
    check_embed(t);
    check_rms_norm(t);
    check_matmul(t);
    check_matmul_multi(t);
    check_mapped(t);
    check_rope(t);
    check_glu(t);
    check_elementwise(t);
    check_split_halves(t);
    check_short_conv(t);
    check_gated_delta_net(t);
    check_kv_write(t);
    check_attention(t);
    check_lora_delta(t);
    check_lora_rows(t);
    int n_types = 0;
    for (uint32_t type = 0; type < LLMM_TYPE_COUNT; type++) n_types += t->be->supports_type(type);
    print_message("[%s] %lu cases passed, %d weight types\n", t->label, n_cases, n_types);
}
