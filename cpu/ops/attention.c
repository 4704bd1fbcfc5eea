/* Causal attention over the KV store. A work item is one row (a block of consecutive rows in
 * a prompt, see cpu_attn_rows_per_item) and one group of query heads that share a K/V head
 * (grouped-query attention), so each K row is converted from the cache's element type once
 * per item instead of once per query head and row: with Qwen2.5-0.5B's 7 query heads per K/V
 * head, the per-head form spent a quarter of a 512-token prefill in those conversions. Items
 * are handed out to the threads in chunks; when there are too few rows to keep the threads
 * busy (decode) the groups are split into smaller runs of heads. Scores are softmaxed with a
 * double-precision sum, as the reference engine does; the dot products, the exponentials and
 * the V accumulation go through the kernel table, in the same order for every head as when
 * heads and rows were separate items, so results do not depend on the split. */
#include <math.h>
#include <string.h>

#include "cpu_backend.h"
#include "kv_rows.h"
#include "format/quant.h"

typedef struct attn_task {
    const cpu_attn_batch *b;
    const cpu_kernels *k;
    float *scratch;     /* per thread: attn_scratch_floats */
    size_t max_kv;
    uint32_t heads_per_item; /* query heads per item, at most a group (n_head / n_head_kv) */
    uint32_t items_per_group;
    uint32_t rows_per_item; /* consecutive rows per item (cpu_attn_rows_per_item) */
    size_t items_per_chunk;
} attn_task;

/* kv_row, with F16 rows widened by the kernel table's converter where it has one (the same
 * exact values, in a single instruction per vector). */
static inline const float *kv_row_fast(const cpu_kernels *kern, const llmm_kv_view *view, const void *base,
                                       uint32_t p, uint32_t h, float *buf) {
    if (view->type != LLMM_KV_F16 || !kern->f16_to_f32) return kv_row(view, base, p, h, buf);
    kern->f16_to_f32((const uint16_t *)(const void *)((const uint8_t *)base + kv_row_offset(view, p, h)), buf,
                     view->head_dim);
    return buf;
}

/* Head h's rows at positions [p, p + n) of the view's K or V (base), as float pointers: into
 * the pool for F32 rows, else into buf (n x head_dim floats). F16 rows of one block reach
 * here only for tables without the F16 attention kernels (f16_stretch comes first). */
static void chunk_rows(const cpu_kernels *kern, const llmm_kv_view *kv, const void *base, uint32_t p, size_t n,
                       uint32_t h, float *buf, const float **rows) {
    const size_t hd = kv->head_dim;
    for (size_t j = 0; j < n; j++) rows[j] = kv_row_fast(kern, kv, base, p + (uint32_t)j, h, buf + j * hd);
}

/* Head h's rows at positions [p, p + n) as one stretch of halves in the pool, hd apart, for
 * the kernels that widen F16 rows in registers (writing a widened chunk and reading it back
 * costs a visible part of decode at long contexts): NULL unless the rows are F16 and lie back to back
 * (same block, head-major layout). */
static const uint16_t *f16_stretch(const llmm_kv_view *kv, const void *base, uint32_t p, size_t n, uint32_t h) {
    if (kv->type != LLMM_KV_F16 || kv->row_bytes != (size_t)kv->head_dim * sizeof(uint16_t) ||
        (p & (kv->block_size - 1)) + n > kv->block_size)
        return NULL;
    return (const uint16_t *)(const void *)((const uint8_t *)base + kv_row_offset(kv, p, h));
}

void llmm__cpu_scores_rows(const cpu_kernels *kern, const float *q, size_t nh, size_t hd, const float *const *rows,
                           size_t n, float *scores, size_t ld) {
    if (kern->attn_scores) {
        kern->attn_scores(q, nh, hd, rows, n, scores, ld);
        return;
    }
    for (size_t i = 0; i < nh; i++)
        for (size_t j = 0; j < n; j++) scores[i * ld + j] = kern->dot_f32(q + i * hd, rows[j], hd);
}

void llmm__cpu_values_rows(const cpu_kernels *kern, float *out, size_t nh, size_t hd, const float *w, size_t ld,
                           const float *const *rows, size_t n) {
    if (kern->attn_values) {
        kern->attn_values(out, nh, hd, w, ld, rows, n);
        return;
    }
    for (size_t j = 0; j < n; j++)
        for (size_t i = 0; i < nh; i++) kern->axpy(out + i * hd, w[i * ld + j], rows[j], hd);
}

/* s = s * scale (then soft-capped when softcap > 0); returns the largest. Loops over blocks
 * of eight that GCC vectorizes at -O2 (its cheapest cost model leaves loops of unknown length
 * scalar): written plainly, the scaling and the normalization below were a large part of a
 * prompt's attention, one scalar multiply and store per score. */
static float scale_and_max(float *s, size_t n, float scale, float softcap) {
    float lane[8] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY};
    size_t p = 0;
    if (softcap > 0.f) {
        for (size_t i = 0; i < n; i++) s[i] = tanhf(s[i] * scale * (1.0f / softcap)) * softcap;
        for (; p + 8 <= n; p += 8)
            for (size_t k = 0; k < 8; k++) lane[k] = s[p + k] > lane[k] ? s[p + k] : lane[k];
    } else {
        for (; p + 8 <= n; p += 8)
            for (size_t k = 0; k < 8; k++) {
                s[p + k] *= scale;
                lane[k] = s[p + k] > lane[k] ? s[p + k] : lane[k];
            }
        for (size_t i = p; i < n; i++) s[i] *= scale;
    }
    float max = -INFINITY;
    for (; p < n; p++) max = s[p] > max ? s[p] : max;
    for (size_t k = 0; k < 8; k++) max = lane[k] > max ? lane[k] : max;
    return max;
}

/* s *= f, in blocks of eight as above. */
static void scale_scores(float *s, size_t n, float f) {
    size_t p = 0;
    for (; p + 8 <= n; p += 8)
        for (size_t k = 0; k < 8; k++) s[p + k] *= f;
    for (; p < n; p++) s[p] *= f;
}

/* Scores of nq query vectors (q, hd apart) against K head kvh's positions [p0, p1), over
 * chunks of LLMM_ATTN_CHUNK positions: vector i's to scores + i * max_kv + p. Each chunk's
 * rows are converted once and go to the kernel table once for all the vectors (one call per
 * head and position, with a shuffle tree per score, had cost as much as the arithmetic). */
static void scores_pass(const cpu_kernels *kern, const llmm_kv_view *kv, uint32_t kvh, const float *q, size_t nq,
                        size_t hd, uint32_t p0, uint32_t p1, float *scores, size_t max_kv, float *row_buf) {
    const float *rows[LLMM_ATTN_CHUNK];
    for (uint32_t p = p0; p < p1; p += LLMM_ATTN_CHUNK) {
        const size_t n = LLMM_MIN((size_t)LLMM_ATTN_CHUNK, (size_t)(p1 - p));
        const uint16_t *f16 = kern->attn_scores_f16 ? f16_stretch(kv, kv->k, p, n, kvh) : NULL;
        if (f16) {
            kern->attn_scores_f16(q, nq, hd, f16, hd, n, scores + p, max_kv);
            continue;
        }
        chunk_rows(kern, kv, kv->k, p, n, kvh, row_buf, rows);
        llmm__cpu_scores_rows(kern, q, nq, hd, rows, n, scores + p, max_kv);
    }
}

/* Row r's query heads [h0, h1), all in K/V head kvh's group, from their scores (head i's at
 * scores + i * max_kv): softmax, then the weighted sum of the V rows into b->out. */
static void softmax_values(const cpu_kernels *kern, const cpu_attn_batch *b, size_t r, uint32_t kvh, uint32_t h0,
                           uint32_t h1, float *scores, size_t max_kv, float *row_buf) {
    const cpu_attn_row *row = &b->rows[r];
    const size_t hd = b->head_dim, q_dim = (size_t)b->n_head * hd;
    const llmm_kv_view *kv = &row->kv;
    const uint32_t p0 = row->kv_start, nh = h1 - h0;
    const float *rows[LLMM_ATTN_CHUNK];
    float *out = b->out + r * q_dim + (size_t)h0 * hd;
    for (uint32_t i = 0; i < nh; i++) {
        float *s = scores + i * max_kv;
        const float max = scale_and_max(s + p0, row->n_kv - p0, b->scale, b->softcap);
        const float inv = (float)(1.0 / kern->exp_sub_sum(s + p0, row->n_kv - p0, max));
        scale_scores(s + p0, row->n_kv - p0, inv);
        for (size_t d = 0; d < hd; d++) out[i * hd + d] = 0;
    }
    for (uint32_t p = p0; p < row->n_kv; p += LLMM_ATTN_CHUNK) {
        const size_t n = LLMM_MIN((size_t)LLMM_ATTN_CHUNK, (size_t)(row->n_kv - p));
        const uint16_t *f16 = kern->attn_values_f16 ? f16_stretch(kv, kv->v, p, n, kvh) : NULL;
        if (f16) {
            kern->attn_values_f16(out, nh, hd, scores + p, max_kv, f16, hd, n);
            continue;
        }
        chunk_rows(kern, kv, kv->v, p, n, kvh, row_buf, rows);
        llmm__cpu_values_rows(kern, out, nh, hd, scores + p, max_kv, rows, n);
    }
}

/* Whether rows a and b read the same K/V positions from the same place (a prompt's rows). */
static int same_kv(const cpu_attn_row *a, const cpu_attn_row *b) {
    const llmm_kv_view *x = &a->kv, *y = &b->kv;
    return a->kv_start == b->kv_start && x->k == y->k && x->v == y->v && x->blocks == y->blocks &&
           x->block_size == y->block_size && x->block_stride == y->block_stride &&
           x->head_stride == y->head_stride && x->row_bytes == y->row_bytes && x->type == y->type;
}

/* Query heads [h0, h1) of K/V head kvh's group for rows [r0, r0 + nr). Rows that share their
 * K/V (a prompt's) get their scores in one pass, all nr x nh query vectors against each chunk
 * of K rows, so a chunk is converted (and, with many vectors, transposed) once for all of
 * them; the scores past a row's own positions are computed and not used. */
static void attend_rows(const cpu_kernels *kern, const cpu_attn_batch *b, size_t r0, size_t nr, uint32_t kvh,
                        uint32_t h0, uint32_t h1, float *scores, float *qbuf, size_t max_kv, float *row_buf) {
    const size_t hd = b->head_dim, q_dim = (size_t)b->n_head * hd, nh = h1 - h0;
    const cpu_attn_row *first = &b->rows[r0];
    uint32_t p1 = first->n_kv;
    for (size_t k = 1; k < nr; k++) {
        if (!same_kv(first, &b->rows[r0 + k])) p1 = 0;
        if (p1 && b->rows[r0 + k].n_kv > p1) p1 = b->rows[r0 + k].n_kv;
    }
    if (nr > 1 && p1) {
        for (size_t k = 0; k < nr; k++)
            memcpy(qbuf + k * nh * hd, b->q + (r0 + k) * q_dim + (size_t)h0 * hd, nh * hd * sizeof *qbuf);
        scores_pass(kern, &first->kv, kvh, qbuf, nr * nh, hd, first->kv_start, p1, scores, max_kv, row_buf);
        for (size_t k = 0; k < nr; k++)
            softmax_values(kern, b, r0 + k, kvh, h0, h1, scores + k * nh * max_kv, max_kv, row_buf);
        return;
    }
    for (size_t k = 0; k < nr; k++) {
        const cpu_attn_row *row = &b->rows[r0 + k];
        scores_pass(kern, &row->kv, kvh, b->q + (r0 + k) * q_dim + (size_t)h0 * hd, nh, hd, row->kv_start,
                    row->n_kv, scores, max_kv, row_buf);
        softmax_values(kern, b, r0 + k, kvh, h0, h1, scores, max_kv, row_buf);
    }
}

static size_t attn_scratch_floats(const attn_task *t, size_t hd) {
    return cpu_attn_scratch_floats(t->rows_per_item, t->heads_per_item, t->max_kv, hd);
}

static void attn_chunk(void *arg, size_t chunk, int ith) {
    const attn_task *t = arg;
    const cpu_attn_batch *b = t->b;
    const uint32_t group = b->n_head / b->n_head_kv;
    const size_t items_per_block = (size_t)b->n_head_kv * t->items_per_group;
    const size_t n_blocks = (b->n_rows + t->rows_per_item - 1) / t->rows_per_item;
    const size_t n_items = n_blocks * items_per_block;
    const size_t i0 = chunk * t->items_per_chunk, i1 = LLMM_MIN(n_items, i0 + t->items_per_chunk);
    const size_t nq = (size_t)t->rows_per_item * t->heads_per_item;
    float *scores = t->scratch + (size_t)ith * attn_scratch_floats(t, b->head_dim);
    float *qbuf = scores + nq * t->max_kv, *row_buf = qbuf + nq * b->head_dim;
    for (size_t i = i0; i < i1; i++) {
        const size_t r0 = i / items_per_block * t->rows_per_item, in_block = i % items_per_block;
        const size_t nr = LLMM_MIN((size_t)t->rows_per_item, b->n_rows - r0);
        const uint32_t kvh = (uint32_t)(in_block / t->items_per_group);
        const uint32_t part = (uint32_t)(in_block % t->items_per_group);
        const uint32_t h0 = kvh * group + part * t->heads_per_item;
        const uint32_t h1 = LLMM_MIN(h0 + t->heads_per_item, (kvh + 1) * group);
        attend_rows(t->k, b, r0, nr, kvh, h0, h1, scores, qbuf, t->max_kv, row_buf);
    }
}

llmm_status llmm__cpu_attend(cpu_state *s, const cpu_attn_batch *b) {
    if (b->n_head_kv == 0 || b->n_head % b->n_head_kv != 0) return LLMM_ERR_UNSUPPORTED;
    size_t max_kv = 1;
    for (size_t r = 0; r < b->n_rows; r++) {
        const cpu_attn_row *row = &b->rows[r];
        if (!kv_type_known(row->kv.type) || row->kv_start >= row->n_kv || row->kv.head_dim != b->head_dim ||
            row->kv.n_head_kv != b->n_head_kv)
            return LLMM_ERR_UNSUPPORTED;
        if (row->n_kv > max_kv) max_kv = row->n_kv;
    }
    const size_t nth = (size_t)llmm__threadpool_size(s->pool);
    const uint32_t group = b->n_head / b->n_head_kv;
    /* whole groups when there are rows enough for two items per thread, else halve them */
    uint32_t hpi = LLMM_MIN(group, (uint32_t)LLMM_MAX_HEADS_PER_ITEM);
    while (hpi > 1 && b->n_rows * b->n_head_kv * ((group + hpi - 1) / hpi) < 2 * nth) hpi = (hpi + 1) / 2;
    attn_task t = {.b = b, .k = s->k, .max_kv = max_kv, .heads_per_item = hpi,
                   .items_per_group = (group + hpi - 1) / hpi, .rows_per_item = 1};
    t.rows_per_item = (uint32_t)cpu_attn_rows_per_item(b->n_rows, hpi);
    t.scratch = llmm__cpu_scratch(s, nth * attn_scratch_floats(&t, b->head_dim) * sizeof(float));
    if (!t.scratch) return LLMM_ERR_NO_MEMORY;
    const size_t n_blocks = (b->n_rows + t.rows_per_item - 1) / t.rows_per_item;
    const size_t n_items = n_blocks * b->n_head_kv * t.items_per_group;
    t.items_per_chunk = cpu_chunk_items(s, n_items, b->n_rows * b->n_head * max_kv * b->head_dim, 1);
    llmm__threadpool_run(s->pool, attn_chunk, &t, (n_items + t.items_per_chunk - 1) / t.items_per_chunk);
    return LLMM_OK;
}

llmm_status llmm__cpu_attention(void *state, uint32_t layer, const llmm_attn_batch *batch) {
    cpu_state *s = state;
    if (s->step == CPU_STEP_NONE || layer >= s->desc.kv->n_layer || batch->n_rows != s->desc.n_rows)
        return LLMM_ERR_INVALID_ARG;
    llmm__cpu_step_views(s, layer);
    for (size_t r = 0; r < batch->n_rows; r++) {
        const uint32_t n_kv = (uint32_t)s->desc.pos[r] + 1, w = batch->window;
        s->attn_rows[r] = (cpu_attn_row){s->views[r], n_kv, w && n_kv > w ? n_kv - w : 0};
    }
    const cpu_attn_batch b = {
        .q = batch->q, .out = batch->out, .n_rows = batch->n_rows, .rows = s->attn_rows,
        .n_head = batch->n_head, .n_head_kv = batch->n_head_kv, .head_dim = batch->head_dim,
        .scale = batch->scale, .softcap = batch->softcap,
    };
    return llmm__cpu_attend(s, &b);
}
