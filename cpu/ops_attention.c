/* Causal attention over the KV store, one (row, head) pair per work item, items handed out to
 * the threads in chunks. Scores are softmaxed with a double-precision sum, as the reference
 * engine does; the dot products, the exponentials and the V accumulation go through the
 * kernel table. */
#include <math.h>

#include "cpu_backend.h"
#include "kv_rows.h"
#include "quant.h"

typedef struct attn_task {
    const llmm_attn_batch *b;
    const cpu_kernels *k;
    float *scores; /* (threads, max_kv + head_dim): scores, then a K/V row converted to floats */
    size_t max_kv;
    size_t items_per_chunk;
} attn_task;

static void attend_one(const cpu_kernels *kern, const llmm_attn_batch *b, size_t r, uint32_t h, float *scores,
                       float *row_buf) {
    const llmm_attn_row *row = &b->rows[r];
    const size_t hd = b->head_dim, q_dim = (size_t)b->n_head * hd;
    const uint32_t kvh = h / (b->n_head / b->n_head_kv);
    const float *q = b->q + r * q_dim + h * hd;
    const llmm_kv_view *kv = &row->kv;
    float max = -INFINITY;
    const uint32_t p0 = row->kv_start;
    for (uint32_t p = p0; p < row->n_kv; p++) {
        float sc = kern->dot_f32(q, kv_row(kv, kv->k, p, kvh * hd, hd, row_buf), hd) * b->scale;
        if (b->softcap > 0.f) sc = tanhf(sc * (1.0f / b->softcap)) * b->softcap;
        scores[p] = sc;
        if (sc > max) max = sc;
    }
    const float inv = (float)(1.0 / kern->exp_sub_sum(scores + p0, row->n_kv - p0, max));
    float *out = b->out + r * q_dim + h * hd;
    for (size_t d = 0; d < hd; d++) out[d] = 0;
    for (uint32_t p = p0; p < row->n_kv; p++)
        kern->axpy(out, scores[p] * inv, kv_row(kv, kv->v, p, kvh * hd, hd, row_buf), hd);
}

static void attn_chunk(void *arg, size_t chunk, int ith) {
    const attn_task *t = arg;
    const llmm_attn_batch *b = t->b;
    const size_t n_items = b->n_rows * b->n_head;
    const size_t i0 = chunk * t->items_per_chunk, i1 = LLMM_MIN(n_items, i0 + t->items_per_chunk);
    float *scores = t->scores + (size_t)ith * (t->max_kv + b->head_dim);
    for (size_t i = i0; i < i1; i++)
        attend_one(t->k, b, i / b->n_head, (uint32_t)(i % b->n_head), scores, scores + t->max_kv);
}

llmm_status cpu_attention(void *state, const llmm_attn_batch *b) {
    cpu_state *s = state;
    size_t max_kv = 1;
    for (size_t r = 0; r < b->n_rows; r++) {
        if (!kv_type_known(b->rows[r].kv.type) || b->rows[r].kv_start >= b->rows[r].n_kv) return LLMM_ERR_UNSUPPORTED;
        if (b->rows[r].n_kv > max_kv) max_kv = b->rows[r].n_kv;
    }
    attn_task t = {.b = b, .k = s->k, .max_kv = max_kv};
    t.scores = cpu_scratch(s, (size_t)threadpool_size(s->pool) * (max_kv + b->head_dim) * sizeof(float));
    if (!t.scores) return LLMM_ERR_NO_MEMORY;
    const size_t n_items = b->n_rows * b->n_head;
    t.items_per_chunk = cpu_chunk_items(s, n_items, n_items * max_kv * b->head_dim, 1);
    threadpool_run(s->pool, attn_chunk, &t, (n_items + t.items_per_chunk - 1) / t.items_per_chunk);
    return LLMM_OK;
}
