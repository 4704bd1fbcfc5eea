/* y = W x for a batch of rows: the one op that reads the weights, so the one that sets decode
 * speed. Activations are converted once per call to the weight type's dot operand (its
 * trait's operand_type: Q8_0, Q8_1 or Q8_K for the quantized types, as the reference engine
 * does); weight rows are then split into one contiguous stretch per thread (the pool's
 * segments), each cut into chunks of halving size (chunk_tiles), each chunk computing its rows
 * for every activation row. So a thread streams
 * its stretch front to back, the kernels prefetching across chunk boundaries, and a thread
 * that finishes early takes the small chunks at the back of another's stretch.
 *
 * Two paths: the kernel table's gemm for the types it has (SIMD tiles that load each weight
 * block once per tile of activation rows), and the generic path through the type table's
 * vec_dot for every other type and for the scalar table. Both give each output from its own
 * weight row and activation row alone, so results do not depend on the thread count.
 *
 * Where the table has a kernel for packed copies of a type (packed_tiles.h) and the weight a
 * copy slot (weight_copy.h), a decode step's matmul makes the copy (within the step's budget,
 * cpu_backend.h): each chunk
 * packs its tiles, drops the file pages it copied, and computes from the copy. Every later
 * matmul by it, of any context, reads the copy (bit for bit the same results). */
#include <string.h>

#include "cpu_backend.h"
#include "packed_tiles.h"
#include "format/quant.h"
#include "weight_copy.h"

/* Chunks per thread segment (sizes 1/2, 1/4, ... 1/32 of it, and the rest), weights one task
 * holds at most (Q/K/V, gate/up), and the rows chunks are counted in: the tallest kernel tile
 * (AVX-512's 16 rows, arch/x86/gemm_rows16.h), so no chunk ends inside one. */
enum { SEGMENT_CHUNKS = 6, MATMUL_MAX_PARTS = 4, TILE_ROWS = 16 };

/* One weight of a task, its rows numbered in tiles of TILE_ROWS from first_tile on. */
typedef struct matmul_part {
    const llmm_tensor *w;
    float *out;
    cpu_gemm_fn gemm; /* kernel path; NULL: the generic path */
    size_t first_tile;
    /* rows [0, packed.ne1) from the packed copy packed.data through gemm_packed (packed.ne1
     * 0: none); packing: this task makes the copy */
    cpu_gemm_fn gemm_packed;
    llmm_tensor packed;
    int packing;
    void (*pack)(const llmm_tensor *w, size_t t0, size_t t1, uint8_t *copy); /* the table's, or the reference */
} matmul_part;

typedef struct matmul_task {
    matmul_part part[MATMUL_MAX_PARTS];
    size_t n_parts, n_tiles, n_rows;
    size_t n_segments, segment_chunks; /* chunks: n_segments x segment_chunks */
    cpu_operand x;       /* kernel path */
    llmm_vec_dot_fn dot; /* generic path */
    const void *xq;      /* n_rows operand rows of xq_row_bytes */
    size_t xq_row_bytes;
} matmul_task;

/* Tiles [t0, t1) of chunk c: segment c / segment_chunks holds tiles [s0, s0 + n) of the task
 * (one per thread of the pool, as its segments); its chunk k starts where all but n >> k of
 * them are taken, so the owner's first chunk is half its stretch and the thieves, who take
 * from the back, get the smallest. Below the parallel cut-off: one segment of one chunk. */
static void chunk_tiles(const matmul_task *t, size_t c, size_t *t0, size_t *t1) {
    const size_t seg = c / t->segment_chunks, k = c % t->segment_chunks;
    const size_t s0 = t->n_tiles * seg / t->n_segments, n = t->n_tiles * (seg + 1) / t->n_segments - s0;
    const size_t left_before = n >> k, left_after = k + 1 == t->segment_chunks ? 0 : n >> (k + 1);
    *t0 = s0 + n - left_before;
    *t1 = s0 + n - left_after;
}

static void plan_chunks(const cpu_state *s, matmul_task *t) {
    size_t work = 0;
    for (size_t i = 0; i < t->n_parts; i++) work += (size_t)t->part[i].w->ne0 * (size_t)t->part[i].w->ne1;
    const size_t nth = (size_t)llmm__threadpool_size(s->pool);
    const int parallel = nth > 1 && work * t->n_rows >= CPU_PARALLEL_MIN_WORK && t->n_tiles > 1;
    t->n_segments = parallel ? nth : 1;
    t->segment_chunks = parallel ? SEGMENT_CHUNKS : 1;
}

/* Source bytes packed at a time while making a copy: each slice's copy pages are faulted in by
 * one call (MADV_POPULATE_WRITE, cheaper than a fault per page), its file pages dropped and its
 * rows computed while still in cache, so the
 * resident set grows by a slice, not by a chunk (a first chunk of the 0.5B models' output
 * matrix is 36 MB); 1 MiB slices made no difference. */
enum { PACK_SLICE_BYTES = 256 << 10 };

/* Rows [r0, end) of a weight whose copy this task makes (whole tiles), for every operand row. */
static void pack_and_run(const matmul_task *t, const matmul_part *p, size_t r0, size_t end) {
    const llmm_tensor *w = p->w;
    llmm_weight_copy *c = cpu_weight_copy(w);
    const size_t rb = w->row_bytes;
    const size_t step = LLMM_MAX((size_t)1, PACK_SLICE_BYTES / (PACKED_TILE_ROWS * rb)) * PACKED_TILE_ROWS;
    for (size_t a = r0; a < end; a += step) {
        const size_t b = LLMM_MIN(end, a + step);
        llmm__mem_populate((uint8_t *)c->data + a * rb, (b - a) * rb, 1);
        p->pack(w, a / PACKED_TILE_ROWS, b / PACKED_TILE_ROWS, c->data);
        if (c->release_source) llmm__packed_tiles_drop_source((const uint8_t *)w->data + a * rb, (b - a) * rb);
        p->gemm_packed(&p->packed, a, b, &t->x, t->n_rows, p->out, (size_t)w->ne1);
    }
}

/* Rows [r0, r1) of one weight, for every operand row. */
static void run_rows(const matmul_task *t, const matmul_part *p, size_t r0, size_t r1) {
    const llmm_tensor *w = p->w;
    const size_t ne1 = (size_t)w->ne1, ne0 = (size_t)w->ne0;
    if (p->gemm) {
        if (r0 < (size_t)p->packed.ne1) { /* chunks start at tiles of TILE_ROWS, as the copy's */
            const size_t end = LLMM_MIN(r1, (size_t)p->packed.ne1);
            if (p->packing) pack_and_run(t, p, r0, end);
            else p->gemm_packed(&p->packed, r0, end, &t->x, t->n_rows, p->out, ne1);
            r0 = end;
        }
        if (r0 < r1) p->gemm(w, r0, r1, &t->x, t->n_rows, p->out, ne1);
        return;
    }
    const uint8_t *wbase = w->data;
    for (size_t j = r0; j < r1; j++) {
        const void *wrow = wbase + j * w->row_bytes;
        for (size_t r = 0; r < t->n_rows; r++)
            p->out[r * ne1 + j] = t->dot(wrow, (const uint8_t *)t->xq + r * t->xq_row_bytes, ne0);
    }
}

/* A chunk's tiles, split at the weights' boundaries. */
static void matmul_chunk(void *arg, size_t chunk, int ith) {
    (void)ith;
    const matmul_task *t = arg;
    size_t t0, t1;
    chunk_tiles(t, chunk, &t0, &t1);
    for (size_t i = 0; i < t->n_parts && t0 < t1; i++) {
        const matmul_part *p = &t->part[i];
        const size_t end = i + 1 < t->n_parts ? t->part[i + 1].first_tile : t->n_tiles;
        if (t0 >= end) continue;
        const size_t r0 = (t0 - p->first_tile) * TILE_ROWS;
        const size_t r1 = LLMM_MIN((size_t)p->w->ne1, (LLMM_MIN(t1, end) - p->first_tile) * TILE_ROWS);
        if (r0 < r1) run_rows(t, p, r0, r1);
        t0 = end;
    }
}

/* Within forward steps, the decode steps make missing copies, whatever their number of
 * sequences; a prompt's matmuls (its last-position logits too) stay on the original until a
 * decode step has made the copy, so the first token comes no later. (A rule by row count
 * would leave batches of many sequences without copies and make short prompts pay for them.)
 * A matmul outside a step (a direct call) makes one when it has up to
 * PACK_MAX_ROWS operand rows. */
#define PACK_MAX_ROWS 4

/* Whether part p reads its weight's packed copy, claiming the making of it for this task when
 * there is none yet and this matmul may make it. A weight with no whole tile, or no memory for
 * its copy, is marked NEVER and keeps the original. */
static void use_copy(cpu_state *s, matmul_part *p, size_t n_rows) {
    const llmm_tensor *w = p->w;
    llmm_weight_copy *c = cpu_weight_copy(w);
    const cpu_gemm_fn packed_fn = s->k->matmul_packed[w->type];
    if (!c || !packed_fn || !p->gemm) return;
    const size_t rows = llmm__packed_tiles_rows(w);
    uint32_t state = atomic_load_explicit(&c->state, memory_order_acquire);
    const size_t bytes = rows * w->row_bytes;
    /* within a step, the budget (cpu_backend.h) bounds the copies made: whole matrices, and a
     * larger one only as the step's first; outside steps (direct calls) there is none */
    const int in_step = s->step != CPU_STEP_NONE;
    const int affordable = !in_step || bytes <= s->pack_budget || s->pack_budget == s->pack_step_bytes;
    const int may_make = in_step ? s->step == CPU_STEP_DECODE : n_rows <= PACK_MAX_ROWS;
    if (state == LLMM_COPY_NONE && may_make && affordable) {
        if (!atomic_compare_exchange_strong(&c->state, &state, LLMM_COPY_MAKING)) return; /* another's */
        if (in_step) s->pack_budget = bytes < s->pack_budget ? s->pack_budget - bytes : 0;
        c->bytes = bytes;
        c->data = rows ? llmm__packed_tiles_alloc(c->bytes) : NULL;
        if (!c->data) {
            atomic_store_explicit(&c->state, LLMM_COPY_NEVER, memory_order_release);
            return;
        }
        c->layout = PACKED_LAYOUT_ROWS16;
        c->free_data = llmm__packed_tiles_free;
        p->packing = 1;
        p->pack = s->k->pack_tiles ? s->k->pack_tiles : llmm__packed_tiles_pack;
    } else if (state != LLMM_COPY_READY || c->layout != PACKED_LAYOUT_ROWS16) {
        return;
    }
    p->gemm_packed = packed_fn;
    p->packed = *w;
    p->packed.data = c->data;
    p->packed.ne1 = (int64_t)rows;
}

/* Lays the weights out in one tile space and runs the task over the pool. */
static void run_task(cpu_state *s, matmul_task *t, const llmm_tensor *const *w, size_t n_w, float *const *out) {
    t->n_parts = n_w;
    t->n_tiles = 0;
    for (size_t i = 0; i < n_w; i++) {
        t->part[i] = (matmul_part){
            .w = w[i], .out = out[i], .gemm = s->k->matmul[w[i]->type], .first_tile = t->n_tiles};
        use_copy(s, &t->part[i], t->n_rows);
        t->n_tiles += ((size_t)w[i]->ne1 + TILE_ROWS - 1) / TILE_ROWS;
    }
    plan_chunks(s, t);
    llmm__threadpool_run(s->pool, matmul_chunk, t, t->n_segments * t->segment_chunks);
    for (size_t i = 0; i < n_w; i++) {
        const matmul_part *p = &t->part[i];
        if (!p->packing) continue;
        /* the pages at the slices' edges, which no slice held whole */
        llmm_weight_copy *c = cpu_weight_copy(p->w);
        if (c->release_source) llmm__packed_tiles_drop_source(p->w->data, (size_t)p->packed.ne1 * p->w->row_bytes);
        atomic_store_explicit(&c->state, LLMM_COPY_READY, memory_order_release);
    }
}

/* In blocks of eight, which GCC vectorizes at -O2, where the type table's converter goes
 * value by value: BF16 prompts round every operand value. */
void llmm__cpu_round_bf16(const float *x, float *out, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint32_t u[8];
        memcpy(u, x + i, sizeof u);
        for (size_t k = 0; k < 8; k++) u[k] = llmm_bf16_round_bits(u[k]);
        memcpy(out + i, u, sizeof u);
    }
    for (; i < n; i++) {
        uint32_t u;
        memcpy(&u, x + i, sizeof u);
        u = llmm_bf16_round_bits(u);
        memcpy(out + i, &u, sizeof u);
    }
}

/* One row as Q8_K through the type table's quantizer, split by field: the path of tables
 * without quantize_q8k (the scalar one), and the reference that slot must match bit for bit.
 * Not free: over ten times the SIMD tables' quantize_q8k per value, a measurable part of a
 * K-quant decode step (docs/performance.md, "CPU kernel choices"). Decode's one row stays on the
 * calling thread (spreading it over the threads made no measurable difference); a prompt's rows go
 * to the threads (operand_fill). */
static void quantize_row_q8k(const float *x, int8_t *qs, float *d, int16_t *bsums, size_t n) {
    block_q8_K blk;
    for (size_t b = 0; b < n / QK_K; b++) {
        llmm__quantize_row_q8_K(x + b * QK_K, &blk, QK_K);
        d[b] = blk.d;
        memcpy(qs + b * QK_K, blk.qs, sizeof blk.qs);
        memcpy(bsums + b * (QK_K / 16), blk.bsums, sizeof blk.bsums);
    }
}

/* Operand rows from a prompt's worth on go to the threads (llmm__cpu_parallel_range), so that
 * quantizing a prompt's rows for each matmul does not run on the calling thread while the
 * others wait. */
#define OPERAND_PARALLEL_MIN_ROWS 16

/* The fields one operand is written to (cpu_operand's, writable) and how. */
typedef struct operand_rows {
    const cpu_kernels *k;
    cpu_operand_kind kind;
    const float *x;
    size_t n;
    float *half;
    int8_t *qs;
    float *d, *sd;
    int32_t *sum;
    int16_t *bsums;
} operand_rows;

static void operand_rows_range(void *arg, size_t r0, size_t r1) {
    const operand_rows *t = arg;
    const size_t n = t->n;
    for (size_t r = r0; r < r1; r++) {
        const float *x = t->x + r * n;
        switch (t->kind) {
        case CPU_OPERAND_F16: t->k->round_f16(x, t->half + r * n, n); break;
        case CPU_OPERAND_BF16: llmm__cpu_round_bf16(x, t->half + r * n, n); break;
        case CPU_OPERAND_Q8K: {
            const size_t nb = n / QK_K, ng = n / 16;
            if (t->k->quantize_q8k) t->k->quantize_q8k(x, t->qs + r * n, t->d + r * nb, t->bsums + r * ng, n);
            else quantize_row_q8k(x, t->qs + r * n, t->d + r * nb, t->bsums + r * ng, n);
            break;
        }
        case CPU_OPERAND_Q8_1: {
            const size_t nb = n / QK8_1;
            if (t->k->quantize_q8_1) {
                t->k->quantize_q8_1(x, t->qs + r * n, t->d + r * nb, t->sd + r * nb, n);
                break;
            }
            block_q8_1 blk;
            for (size_t b = 0; b < nb; b++) {
                llmm__quantize_row_q8_1(x + b * QK8_1, &blk, QK8_1);
                t->d[r * nb + b] = llmm__f16_to_f32(blk.d);
                t->sd[r * nb + b] = llmm__f16_to_f32(blk.s);
                memcpy(t->qs + r * n + b * QK8_1, blk.qs, sizeof blk.qs);
            }
            break;
        }
        case CPU_OPERAND_Q8: {
            const size_t nb = n / QK8_0;
            t->k->quantize_q8(x, t->qs + r * n, t->d + r * nb, t->sum + r * nb, n);
            break;
        }
        case CPU_OPERAND_F32: break;
        }
    }
}

static void operand_fill(cpu_state *s, operand_rows *t, size_t n_rows) {
    llmm__cpu_parallel_range(s, n_rows, 1, OPERAND_PARALLEL_MIN_ROWS, operand_rows_range, t);
}

static llmm_status prepare_q8k(cpu_state *s, const float *x, size_t n_rows, size_t n, cpu_operand *op) {
    const size_t nb = n / QK_K, ng = n / 16;
    uint8_t *p = llmm__cpu_scratch(s, n_rows * (nb * sizeof(float) + ng * sizeof(int16_t) + n));
    if (!p) return LLMM_ERR_NO_MEMORY;
    operand_rows t = {.k = s->k, .kind = CPU_OPERAND_Q8K, .x = x, .n = n, .d = (float *)(void *)p,
                      .bsums = (int16_t *)(void *)(p + n_rows * nb * sizeof(float)),
                      .qs = (int8_t *)(p + n_rows * (nb * sizeof(float) + ng * sizeof(int16_t)))};
    operand_fill(s, &t, n_rows);
    *op = (cpu_operand){.n = n, .qs = t.qs, .d = t.d, .bsums = t.bsums};
    return LLMM_OK;
}

/* Q8_1 rows through the type table's quantizer, split by field (as Q8_K above). */
static llmm_status prepare_q8_1(cpu_state *s, const float *x, size_t n_rows, size_t n, cpu_operand *op) {
    const size_t nb = n / QK8_1;
    uint8_t *p = llmm__cpu_scratch(s, n_rows * (2 * nb * sizeof(float) + n));
    if (!p) return LLMM_ERR_NO_MEMORY;
    float *d = (float *)(void *)p;
    operand_rows t = {.k = s->k, .kind = CPU_OPERAND_Q8_1, .x = x, .n = n, .d = d, .sd = d + n_rows * nb,
                      .qs = (int8_t *)(p + 2 * n_rows * nb * sizeof(float))};
    operand_fill(s, &t, n_rows);
    *op = (cpu_operand){.n = n, .qs = t.qs, .d = t.d, .s = t.sd};
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
    if (kind == CPU_OPERAND_F16 || kind == CPU_OPERAND_BF16) {
        float *half = llmm__cpu_scratch(s, n_rows * n * sizeof(float));
        if (!half) return LLMM_ERR_NO_MEMORY;
        operand_rows t = {.k = s->k, .kind = kind, .x = x, .n = n, .half = half};
        operand_fill(s, &t, n_rows);
        op->f32 = half;
        return LLMM_OK;
    }
    if (kind == CPU_OPERAND_Q8K) return prepare_q8k(s, x, n_rows, n, op);
    if (kind == CPU_OPERAND_Q8_1) return prepare_q8_1(s, x, n_rows, n, op);
    const size_t nb = n / QK8_0;
    uint8_t *p = llmm__cpu_scratch(s, n_rows * (nb * (sizeof(float) + sizeof(int32_t)) + n));
    if (!p) return LLMM_ERR_NO_MEMORY;
    operand_rows t = {.k = s->k, .kind = CPU_OPERAND_Q8, .x = x, .n = n, .d = (float *)(void *)p,
                      .sum = (int32_t *)(void *)(p + n_rows * nb * sizeof(float)),
                      .qs = (int8_t *)(p + n_rows * nb * (sizeof(float) + sizeof(int32_t)))};
    operand_fill(s, &t, n_rows);
    *op = (cpu_operand){.n = n, .qs = t.qs, .d = t.d, .sum = t.sum};
    return LLMM_OK;
}

static llmm_status prepare_generic(cpu_state *s, const llmm_type_traits *tt, const float *x, size_t n_rows,
                                   size_t ne0, matmul_task *t) {
    t->dot = tt->vec_dot;
    if (tt->operand_type == LLMM_TYPE_F32) {
        t->xq = x;
        t->xq_row_bytes = ne0 * sizeof(float);
        return LLMM_OK;
    }
    const llmm_type_traits *op = llmm__type_get(tt->operand_type);
    t->xq_row_bytes = llmm__row_bytes(tt->operand_type, ne0);
    void *xq = llmm__cpu_scratch(s, t->xq_row_bytes * n_rows);
    if (!xq) return LLMM_ERR_NO_MEMORY;
    for (size_t r = 0; r < n_rows; r++) op->from_float(x + r * ne0, (uint8_t *)xq + r * t->xq_row_bytes, ne0);
    t->xq = xq;
    return LLMM_OK;
}

/* Several weights over one operand in one dispatch, their rows in one tile space. */
llmm_status llmm__cpu_matmul_multi(void *state, const llmm_tensor *const *w, size_t n_w, const float *x, size_t n_rows,
                             float *const *out) {
    cpu_state *s = state;
    int one_operand = n_w >= 1 && n_w <= MATMUL_MAX_PARTS;
    for (size_t i = 0; i < n_w && one_operand; i++)
        one_operand = s->k->matmul[w[i]->type] && cpu_operand_of(w[i]->type) == cpu_operand_of(w[0]->type) &&
                      w[i]->ne0 == w[0]->ne0;
    if (!one_operand) { /* types without a kernel, or wanting different operands: one by one */
        for (size_t i = 0; i < n_w; i++) {
            llmm_status st = llmm__cpu_matmul(state, w[i], x, n_rows, out[i]);
            if (st) return st;
        }
        return LLMM_OK;
    }
    matmul_task t = {.n_rows = n_rows};
    llmm_status st = prepare_operand(s, cpu_operand_of(w[0]->type), x, n_rows, (size_t)w[0]->ne0, &t.x);
    if (st) return st;
    run_task(s, &t, w, n_w, out);
    return LLMM_OK;
}

llmm_status llmm__cpu_matmul(void *state, const llmm_tensor *w, const float *x, size_t n_rows, float *out) {
    cpu_state *s = state;
    const llmm_type_traits *tt = llmm__type_get(w->type);
    if (!tt || !tt->vec_dot) return LLMM_ERR_UNSUPPORTED;
    const size_t ne0 = (size_t)w->ne0;
    matmul_task t = {.n_rows = n_rows};
    llmm_status st = s->k->matmul[w->type] ? prepare_operand(s, cpu_operand_of(w->type), x, n_rows, ne0, &t.x)
                                           : prepare_generic(s, tt, x, n_rows, ne0, &t);
    if (st) return st;
    run_task(s, &t, &w, 1, &out);
    return LLMM_OK;
}
