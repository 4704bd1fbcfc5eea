/* y = W x for a batch of rows: the one op that reads the weights, so the one that sets decode
 * speed. Activations are converted once per call to the weight type's dot operand (Q8_0 for
 * the quantized types, as the reference engine does); weight rows are then handed out to the
 * threads in guided chunks (plan_chunks), each chunk computing its rows for every activation
 * row. Guided against equal chunks (4 per thread), alternating runs of the 0.5B files, 2
 * threads, 128-token prompt and 128 decoded: Q4_0 decode median 77 -> 83 tok/s (6 of 8 pairs
 * faster), Q4_K_M 58 -> 61, Q8_0 unchanged (51-55); one chunk per thread had helped Q4_0
 * decode too but slowed prefill.
 *
 * Two paths: the kernel table's gemm for the types it has (SIMD tiles that load each weight
 * block once per tile of activation rows), and the generic path through the type table's
 * vec_dot for every other type and for the scalar table. Both give each output from its own
 * weight row and activation row alone, so results do not depend on the thread count. */
#include <string.h>

#include "cpu_backend.h"
#include "quant.h"

/* Chunks one matmul's rows are split into at most. */
enum { MATMUL_MAX_CHUNKS = 64 };

typedef struct matmul_task {
    const llmm_tensor *w;
    size_t n_rows;
    float *out;
    size_t n_chunks;
    size_t bounds[MATMUL_MAX_CHUNKS + 1]; /* chunk c: weight rows [bounds[c], bounds[c + 1]) */
    cpu_gemm_fn gemm; /* kernel path */
    cpu_operand x;
    llmm_vec_dot_fn dot; /* generic path */
    const void *xq;      /* n_rows operand rows of xq_row_bytes */
    size_t xq_row_bytes;
} matmul_task;

static void chunk_rows(const matmul_task *t, size_t chunk, size_t *j0, size_t *j1) {
    *j0 = t->bounds[chunk];
    *j1 = t->bounds[chunk + 1];
}

/* Guided chunks: each takes 1/(2 x threads) of the rows not yet assigned (whole 8-row tiles,
 * at least one), so the first chunks are long (unbroken prefetch runs, few claims) and the
 * last are single tiles (the threads finish together). The split depends only on the row and
 * thread counts. Below the parallel cut-off, one chunk. */
static void plan_chunks(const cpu_state *s, matmul_task *t, size_t work) {
    const size_t ne1 = (size_t)t->w->ne1, nth = (size_t)threadpool_size(s->pool), tile = 8;
    t->bounds[0] = 0;
    t->n_chunks = 0;
    if (nth == 1 || work < CPU_PARALLEL_MIN_WORK || ne1 <= tile) {
        t->bounds[++t->n_chunks] = ne1;
        return;
    }
    for (size_t done = 0; done < ne1;) {
        const size_t left = (ne1 - done + tile - 1) / tile;
        const size_t tiles = t->n_chunks + 1 == MATMUL_MAX_CHUNKS ? left : (left + 2 * nth - 1) / (2 * nth);
        done = LLMM_MIN(ne1, done + tiles * tile);
        t->bounds[++t->n_chunks] = done;
    }
}

static void kernel_chunk(void *arg, size_t chunk, int ith) {
    (void)ith;
    const matmul_task *t = arg;
    size_t j0, j1;
    chunk_rows(t, chunk, &j0, &j1);
    t->gemm(t->w, j0, j1, &t->x, t->n_rows, t->out, (size_t)t->w->ne1);
}

static void generic_chunk(void *arg, size_t chunk, int ith) {
    (void)ith;
    const matmul_task *t = arg;
    size_t j0, j1;
    chunk_rows(t, chunk, &j0, &j1);
    const uint8_t *wbase = t->w->data;
    const size_t ne1 = (size_t)t->w->ne1, ne0 = (size_t)t->w->ne0;
    for (size_t j = j0; j < j1; j++) {
        const void *wrow = wbase + j * t->w->row_bytes;
        for (size_t r = 0; r < t->n_rows; r++)
            t->out[r * ne1 + j] = t->dot(wrow, (const uint8_t *)t->xq + r * t->xq_row_bytes, ne0);
    }
}

/* bf16 rounding has no vector kernel (a rare weight type): through the type table, widened. */
static void round_bf16_f64(const float *x, double *out, size_t n) {
    const llmm_type_traits *bf16 = llmm_type_get(LLMM_TYPE_BF16);
    llmm_bf16 tmp[64];
    for (size_t i = 0; i < n; i += 64) {
        const size_t m = LLMM_MIN((size_t)64, n - i);
        bf16->from_float(x + i, tmp, m);
        for (size_t k = 0; k < m; k++) out[i + k] = llmm_bf16_to_f32(tmp[k]);
    }
}

/* One row as Q8_K through the type table's quantizer (so the quants are the scalar path's by
 * construction), split by field. Not free: 4.2 ns per value on the dev VM, 20 us of a ~150 us
 * one-thread decode matmul with a 4864 x 896 Q4_K weight (1.3 ms of ~7 ms for 64 rows); a
 * vectorized quantizer needs a kernel-table slot. Spreading these rows over the threads
 * (chunks of 1024 values) made no difference measurable on the busy VM (0.5B Q4_K_M, Q6_K,
 * 2 threads, load 3.6-4.7), so they stay on the calling thread. */
static void quantize_row_q8k(const float *x, int8_t *qs, float *d, int16_t *bsums, size_t n) {
    block_q8_K blk;
    for (size_t b = 0; b < n / QK_K; b++) {
        llmm_quantize_row_q8_K(x + b * QK_K, &blk, QK_K);
        d[b] = blk.d;
        memcpy(qs + b * QK_K, blk.qs, sizeof blk.qs);
        memcpy(bsums + b * (QK_K / 16), blk.bsums, sizeof blk.bsums);
    }
}

static llmm_status prepare_q8k(cpu_state *s, const float *x, size_t n_rows, size_t n, cpu_operand *op) {
    const size_t nb = n / QK_K, ng = n / 16;
    uint8_t *p = cpu_scratch(s, n_rows * (nb * sizeof(float) + ng * sizeof(int16_t) + n));
    if (!p) return LLMM_ERR_NO_MEMORY;
    float *d = (float *)(void *)p;
    int16_t *bsums = (int16_t *)(void *)(p + n_rows * nb * sizeof(float));
    int8_t *qs = (int8_t *)(p + n_rows * (nb * sizeof(float) + ng * sizeof(int16_t)));
    for (size_t r = 0; r < n_rows; r++) quantize_row_q8k(x + r * n, qs + r * n, d + r * nb, bsums + r * ng, n);
    *op = (cpu_operand){.n = n, .qs = qs, .d = d, .bsums = bsums};
    return LLMM_OK;
}

/* Q8_1 rows through the type table's quantizer, split by field (as Q8_K above). */
static llmm_status prepare_q8_1(cpu_state *s, const float *x, size_t n_rows, size_t n, cpu_operand *op) {
    const size_t nb = n / QK8_1;
    uint8_t *p = cpu_scratch(s, n_rows * (2 * nb * sizeof(float) + n));
    if (!p) return LLMM_ERR_NO_MEMORY;
    float *d = (float *)(void *)p, *sd = d + n_rows * nb;
    int8_t *qs = (int8_t *)(p + 2 * n_rows * nb * sizeof(float));
    block_q8_1 blk;
    for (size_t r = 0; r < n_rows; r++)
        for (size_t b = 0; b < nb; b++) {
            llmm_quantize_row_q8_1(x + r * n + b * QK8_1, &blk, QK8_1);
            d[r * nb + b] = llmm_f16_to_f32(blk.d);
            sd[r * nb + b] = llmm_f16_to_f32(blk.s);
            memcpy(qs + r * n + b * QK8_1, blk.qs, sizeof blk.qs);
        }
    *op = (cpu_operand){.n = n, .qs = qs, .d = d, .s = sd};
    return LLMM_OK;
}

/* The operand rows the kernel asked for, in scratch (grown once, then reused). Q8 fields are
 * carved with the 4-byte arrays first so every field stays aligned. */
static llmm_status prepare_operand(cpu_state *s, cpu_operand_kind kind, const float *x, size_t n_rows, size_t n,
                                   cpu_operand *op) {
    *op = (cpu_operand){.n = n};
    if (kind == CPU_OPERAND_F32) {
        op->f32 = x;
        return LLMM_OK;
    }
    if (kind == CPU_OPERAND_F64_F16 || kind == CPU_OPERAND_F64_BF16) {
        double *f64 = cpu_scratch(s, n_rows * n * sizeof(double));
        if (!f64) return LLMM_ERR_NO_MEMORY;
        for (size_t r = 0; r < n_rows; r++) {
            if (kind == CPU_OPERAND_F64_F16) s->k->round_f16_f64(x + r * n, f64 + r * n, n);
            else round_bf16_f64(x + r * n, f64 + r * n, n);
        }
        op->f64 = f64;
        return LLMM_OK;
    }
    if (kind == CPU_OPERAND_Q8K) return prepare_q8k(s, x, n_rows, n, op);
    if (kind == CPU_OPERAND_Q8_1) return prepare_q8_1(s, x, n_rows, n, op);
    const size_t nb = n / QK8_0;
    uint8_t *p = cpu_scratch(s, n_rows * (nb * (sizeof(float) + sizeof(int32_t)) + n));
    if (!p) return LLMM_ERR_NO_MEMORY;
    float *d = (float *)(void *)p;
    int32_t *sum = (int32_t *)(void *)(p + n_rows * nb * sizeof(float));
    int8_t *qs = (int8_t *)(p + n_rows * nb * (sizeof(float) + sizeof(int32_t)));
    for (size_t r = 0; r < n_rows; r++) s->k->quantize_q8(x + r * n, qs + r * n, d + r * nb, sum + r * nb, n);
    *op = (cpu_operand){.n = n, .qs = qs, .d = d, .sum = sum};
    return LLMM_OK;
}

static llmm_status prepare_generic(cpu_state *s, const llmm_type_traits *tt, const float *x, size_t n_rows,
                                   size_t ne0, matmul_task *t) {
    t->dot = tt->vec_dot;
    if (tt->vec_dot_type == LLMM_TYPE_F32) {
        t->xq = x;
        t->xq_row_bytes = ne0 * sizeof(float);
        return LLMM_OK;
    }
    const llmm_type_traits *op = llmm_type_get(tt->vec_dot_type);
    t->xq_row_bytes = llmm_row_bytes(tt->vec_dot_type, ne0);
    void *xq = cpu_scratch(s, t->xq_row_bytes * n_rows);
    if (!xq) return LLMM_ERR_NO_MEMORY;
    for (size_t r = 0; r < n_rows; r++) op->from_float(x + r * ne0, (uint8_t *)xq + r * t->xq_row_bytes, ne0);
    t->xq = xq;
    return LLMM_OK;
}

/* Several weights over one operand in one dispatch: chunk c belongs to the weight whose
 * first chunk is the largest first[i] <= c. */
enum { MULTI_MAX = 4 };
typedef struct multi_task {
    matmul_task part[MULTI_MAX];
    size_t first[MULTI_MAX + 1];
    size_t n_w;
} multi_task;

static void multi_chunk(void *arg, size_t chunk, int ith) {
    const multi_task *m = arg;
    size_t i = 0;
    while (chunk >= m->first[i + 1]) i++;
    kernel_chunk((void *)&m->part[i], chunk - m->first[i], ith);
}

llmm_status cpu_matmul_multi(void *state, const llmm_tensor *const *w, size_t n_w, const float *x, size_t n_rows,
                             float *const *out) {
    cpu_state *s = state;
    int one_operand = n_w >= 1 && n_w <= MULTI_MAX;
    for (size_t i = 0; i < n_w && one_operand; i++) {
        const cpu_matmul_kernel *k = &s->k->matmul[w[i]->type];
        one_operand = k->gemm && k->operand == s->k->matmul[w[0]->type].operand && w[i]->ne0 == w[0]->ne0;
    }
    if (!one_operand) { /* types without a kernel, or wanting different operands: one by one */
        for (size_t i = 0; i < n_w; i++) {
            llmm_status st = cpu_matmul(state, w[i], x, n_rows, out[i]);
            if (st) return st;
        }
        return LLMM_OK;
    }
    multi_task m = {.n_w = n_w};
    const size_t ne0 = (size_t)w[0]->ne0;
    cpu_operand op;
    llmm_status st = prepare_operand(s, s->k->matmul[w[0]->type].operand, x, n_rows, ne0, &op);
    if (st) return st;
    for (size_t i = 0; i < n_w; i++) {
        const size_t ne1 = (size_t)w[i]->ne1;
        m.part[i] = (matmul_task){.w = w[i], .n_rows = n_rows, .out = out[i], .gemm = s->k->matmul[w[i]->type].gemm,
                                  .x = op};
        plan_chunks(s, &m.part[i], ne0 * ne1 * n_rows);
        m.first[i + 1] = m.first[i] + m.part[i].n_chunks;
    }
    threadpool_run(s->pool, multi_chunk, &m, m.first[n_w]);
    return LLMM_OK;
}

llmm_status cpu_matmul(void *state, const llmm_tensor *w, const float *x, size_t n_rows, float *out) {
    cpu_state *s = state;
    const llmm_type_traits *tt = llmm_type_get(w->type);
    if (!tt || !tt->vec_dot) return LLMM_ERR_UNSUPPORTED;
    const size_t ne0 = (size_t)w->ne0, ne1 = (size_t)w->ne1;
    const cpu_matmul_kernel *kern = &s->k->matmul[w->type];
    matmul_task t = {.w = w, .n_rows = n_rows, .out = out, .gemm = kern->gemm};
    llmm_status st = kern->gemm ? prepare_operand(s, kern->operand, x, n_rows, ne0, &t.x)
                                : prepare_generic(s, tt, x, n_rows, ne0, &t);
    if (st) return st;
    plan_chunks(s, &t, ne0 * ne1 * n_rows);
    threadpool_run(s->pool, kern->gemm ? kernel_chunk : generic_chunk, &t, t.n_chunks);
    return LLMM_OK;
}
