/* Causal attention over the KV store, one (row, head) pair at a time per thread. Scores are
 * softmaxed with a double-precision sum, as the reference engine does. */
#include <math.h>

#include "cpu_backend.h"
#include "kv_rows.h"
#include "quant.h"

typedef struct attn_task {
    const llmm_attn_batch *b;
    float *scores; /* nth * (max_kv + head_dim): scores, then a K/V row converted to floats */
    size_t max_kv;
} attn_task;

static void attend_one(const llmm_attn_batch *b, size_t r, uint32_t h, float *scores, float *row_buf) {
    const llmm_attn_row *row = &b->rows[r];
    const size_t hd = b->head_dim, q_dim = (size_t)b->n_head * hd;
    const uint32_t kvh = h / (b->n_head / b->n_head_kv);
    const float *q = b->q + r * q_dim + h * hd;
    const llmm_kv_view *kv = &row->kv;
    float max = -INFINITY;
    const uint32_t p0 = row->kv_start;
    for (uint32_t p = p0; p < row->n_kv; p++) {
        float sc = llmm_dot_f32(q, kv_row(kv, kv->k, p, kvh * hd, hd, row_buf), hd) * b->scale;
        if (b->softcap > 0.f) sc = tanhf(sc * (1.0f / b->softcap)) * b->softcap;
        scores[p] = sc;
        if (sc > max) max = sc;
    }
    double sum = 0;
    for (uint32_t p = p0; p < row->n_kv; p++) {
        scores[p] = expf(scores[p] - max);
        sum += scores[p];
    }
    const float inv = (float)(1.0 / sum);
    float *out = b->out + r * q_dim + h * hd;
    for (size_t d = 0; d < hd; d++) out[d] = 0;
    for (uint32_t p = p0; p < row->n_kv; p++) {
        const float wgt = scores[p] * inv;
        const float *vp = kv_row(kv, kv->v, p, kvh * hd, hd, row_buf);
        for (size_t d = 0; d < hd; d++) out[d] += wgt * vp[d];
    }
}

static void attn_worker(void *arg, int ith, int nth) {
    const attn_task *t = arg;
    const llmm_attn_batch *b = t->b;
    size_t i0, i1;
    cpu_split(b->n_rows * b->n_head, ith, nth, &i0, &i1);
    float *scores = t->scores + (size_t)ith * (t->max_kv + b->head_dim);
    for (size_t i = i0; i < i1; i++) attend_one(b, i / b->n_head, (uint32_t)(i % b->n_head), scores, scores + t->max_kv);
}

llmm_status cpu_attention(void *state, const llmm_attn_batch *b) {
    cpu_state *s = state;
    size_t max_kv = 1;
    for (size_t r = 0; r < b->n_rows; r++) {
        if (!kv_type_known(b->rows[r].kv.type) || b->rows[r].kv_start >= b->rows[r].n_kv) return LLMM_ERR_UNSUPPORTED;
        if (b->rows[r].n_kv > max_kv) max_kv = b->rows[r].n_kv;
    }
    attn_task t = {b, NULL, max_kv};
    t.scores = cpu_scratch(s, (size_t)threadpool_size(s->pool) * (max_kv + b->head_dim) * sizeof(float));
    if (!t.scores) return LLMM_ERR_NO_MEMORY;
    if (b->n_rows * b->n_head * max_kv * b->head_dim < CPU_PARALLEL_MIN_WORK) attn_worker(&t, 0, 1);
    else threadpool_run(s->pool, attn_worker, &t);
    return LLMM_OK;
}
