/* Causal attention over the KV store. A work item is one row and one group of query heads
 * that share a K/V head (grouped-query attention), so each K and V row is converted from the
 * cache's element type once per item instead of once per query head: with Qwen2.5-0.5B's 7
 * query heads per K/V head, the per-head form spent a quarter of a 512-token prefill in those
 * conversions. Items are handed out to the threads in chunks; when there are too few rows to
 * keep the threads busy (decode) the groups are split into smaller runs of heads. Scores are
 * softmaxed with a double-precision sum, as the reference engine does; the dot products, the
 * exponentials and the V accumulation go through the kernel table, in the same order for
 * every head as when heads were separate items, so results do not depend on the split. */
#include <math.h>

#include "cpu_backend.h"
#include "kv_rows.h"
#include "quant.h"

typedef struct attn_task {
    const llmm_attn_batch *b;
    const cpu_kernels *k;
    float *scratch;     /* per thread: heads_per_item x max_kv scores, then one K/V row as floats */
    size_t max_kv;
    uint32_t heads_per_item; /* query heads per item, at most a group (n_head / n_head_kv) */
    uint32_t items_per_group;
    size_t items_per_chunk;
} attn_task;

/* kv_row, with F16 rows widened by the kernel table's converter where it has one (the same
 * exact values, in a single instruction per vector). */
static inline const float *kv_row_fast(const cpu_kernels *kern, const llmm_kv_view *view, const void *base,
                                       uint32_t p, size_t first, size_t n, float *buf) {
    if (view->type != LLMM_KV_F16 || !kern->f16_to_f32) return kv_row(view, base, p, first, n, buf);
    kern->f16_to_f32((const uint16_t *)(const void *)((const uint8_t *)base + kv_row_offset(view, p)) + first, buf, n);
    return buf;
}

/* Query heads [h0, h1), all in K/V head kvh's group, of row r. */
static void attend_heads(const cpu_kernels *kern, const llmm_attn_batch *b, size_t r, uint32_t kvh, uint32_t h0,
                         uint32_t h1, float *scores, size_t max_kv, float *row_buf) {
    const llmm_attn_row *row = &b->rows[r];
    const size_t hd = b->head_dim, q_dim = (size_t)b->n_head * hd;
    const llmm_kv_view *kv = &row->kv;
    const uint32_t p0 = row->kv_start, nh = h1 - h0;
    const float *q = b->q + r * q_dim + (size_t)h0 * hd;
    float max[LLMM_MAX_HEADS_PER_ITEM], inv[LLMM_MAX_HEADS_PER_ITEM];
    for (uint32_t i = 0; i < nh; i++) max[i] = -INFINITY;
    for (uint32_t p = p0; p < row->n_kv; p++) {
        const float *k = kv_row_fast(kern, kv, kv->k, p, kvh * hd, hd, row_buf);
        for (uint32_t i = 0; i < nh; i++) {
            float sc = kern->dot_f32(q + i * hd, k, hd) * b->scale;
            if (b->softcap > 0.f) sc = tanhf(sc * (1.0f / b->softcap)) * b->softcap;
            scores[i * max_kv + p] = sc;
            if (sc > max[i]) max[i] = sc;
        }
    }
    float *out = b->out + r * q_dim + (size_t)h0 * hd;
    for (uint32_t i = 0; i < nh; i++) {
        inv[i] = (float)(1.0 / kern->exp_sub_sum(scores + i * max_kv + p0, row->n_kv - p0, max[i]));
        for (size_t d = 0; d < hd; d++) out[i * hd + d] = 0;
    }
    for (uint32_t p = p0; p < row->n_kv; p++) {
        const float *v = kv_row_fast(kern, kv, kv->v, p, kvh * hd, hd, row_buf);
        for (uint32_t i = 0; i < nh; i++) kern->axpy(out + i * hd, scores[i * max_kv + p] * inv[i], v, hd);
    }
}

static void attn_chunk(void *arg, size_t chunk, int ith) {
    const attn_task *t = arg;
    const llmm_attn_batch *b = t->b;
    const uint32_t group = b->n_head / b->n_head_kv;
    const size_t items_per_row = (size_t)b->n_head_kv * t->items_per_group;
    const size_t n_items = b->n_rows * items_per_row;
    const size_t i0 = chunk * t->items_per_chunk, i1 = LLMM_MIN(n_items, i0 + t->items_per_chunk);
    float *scores = t->scratch + (size_t)ith * (t->heads_per_item * t->max_kv + b->head_dim);
    float *row_buf = scores + t->heads_per_item * t->max_kv;
    for (size_t i = i0; i < i1; i++) {
        const size_t r = i / items_per_row, in_row = i % items_per_row;
        const uint32_t kvh = (uint32_t)(in_row / t->items_per_group), part = (uint32_t)(in_row % t->items_per_group);
        const uint32_t h0 = kvh * group + part * t->heads_per_item;
        const uint32_t h1 = LLMM_MIN(h0 + t->heads_per_item, (kvh + 1) * group);
        attend_heads(t->k, b, r, kvh, h0, h1, scores, t->max_kv, row_buf);
    }
}

llmm_status cpu_attention(void *state, const llmm_attn_batch *b) {
    cpu_state *s = state;
    if (b->n_head_kv == 0 || b->n_head % b->n_head_kv != 0) return LLMM_ERR_UNSUPPORTED;
    size_t max_kv = 1;
    for (size_t r = 0; r < b->n_rows; r++) {
        if (!kv_type_known(b->rows[r].kv.type) || b->rows[r].kv_start >= b->rows[r].n_kv) return LLMM_ERR_UNSUPPORTED;
        if (b->rows[r].n_kv > max_kv) max_kv = b->rows[r].n_kv;
    }
    const size_t nth = (size_t)threadpool_size(s->pool);
    const uint32_t group = b->n_head / b->n_head_kv;
    /* whole groups when there are rows enough for two items per thread, else halve them */
    uint32_t hpi = LLMM_MIN(group, (uint32_t)LLMM_MAX_HEADS_PER_ITEM);
    while (hpi > 1 && b->n_rows * b->n_head_kv * ((group + hpi - 1) / hpi) < 2 * nth) hpi = (hpi + 1) / 2;
    attn_task t = {.b = b, .k = s->k, .max_kv = max_kv, .heads_per_item = hpi,
                   .items_per_group = (group + hpi - 1) / hpi};
    t.scratch = cpu_scratch(s, nth * (hpi * max_kv + b->head_dim) * sizeof(float));
    if (!t.scratch) return LLMM_ERR_NO_MEMORY;
    const size_t n_items = b->n_rows * b->n_head_kv * t.items_per_group;
    t.items_per_chunk = cpu_chunk_items(s, n_items, b->n_rows * b->n_head * max_kv * b->head_dim, 1);
    threadpool_run(s->pool, attn_chunk, &t, (n_items + t.items_per_chunk - 1) / t.items_per_chunk);
    return LLMM_OK;
}
