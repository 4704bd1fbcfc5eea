/* y = W x for a batch of rows: the one op that reads the weights, so the one that sets decode
 * speed. Activations are converted once per row to the weight type's dot operand (Q8_0 for
 * the quantized types, as the reference engine does), then output rows are split by thread. */
#include "cpu_backend.h"
#include "quant.h"

typedef struct matmul_task {
    const llmm_tensor *w;
    const void *xq;       /* n_rows operand rows of xq_row_bytes */
    size_t xq_row_bytes;
    size_t n_rows;
    float *out;
    llmm_vec_dot_fn dot;
} matmul_task;

static void matmul_worker(void *arg, int ith, int nth) {
    const matmul_task *t = arg;
    size_t j0, j1;
    cpu_split((size_t)t->w->ne1, ith, nth, &j0, &j1);
    const uint8_t *wbase = t->w->data;
    const size_t ne1 = (size_t)t->w->ne1, ne0 = (size_t)t->w->ne0;
    for (size_t j = j0; j < j1; j++) {
        const void *wrow = wbase + j * t->w->row_bytes;
        for (size_t r = 0; r < t->n_rows; r++)
            t->out[r * ne1 + j] = t->dot(wrow, (const uint8_t *)t->xq + r * t->xq_row_bytes, ne0);
    }
}

llmm_status cpu_matmul(void *state, const llmm_tensor *w, const float *x, size_t n_rows, float *out) {
    cpu_state *s = state;
    const llmm_type_traits *tt = llmm_type_get(w->type);
    if (!tt || !tt->vec_dot) return LLMM_ERR_UNSUPPORTED;
    const llmm_type_traits *op = llmm_type_get(tt->vec_dot_type);
    const size_t ne0 = (size_t)w->ne0;
    matmul_task t = {.w = w, .n_rows = n_rows, .out = out, .dot = tt->vec_dot};
    if (tt->vec_dot_type == LLMM_TYPE_F32) {
        t.xq = x;
        t.xq_row_bytes = ne0 * sizeof(float);
    } else {
        t.xq_row_bytes = llmm_row_bytes(tt->vec_dot_type, ne0);
        void *xq = cpu_scratch(s, t.xq_row_bytes * n_rows);
        if (!xq) return LLMM_ERR_NO_MEMORY;
        for (size_t r = 0; r < n_rows; r++) op->from_float(x + r * ne0, (uint8_t *)xq + r * t.xq_row_bytes, ne0);
        t.xq = xq;
    }
    /* waking the pool costs more than a few thousand multiply-adds */
    if ((size_t)w->ne0 * (size_t)w->ne1 * n_rows < CPU_PARALLEL_MIN_WORK) matmul_worker(&t, 0, 1);
    else threadpool_run(s->pool, matmul_worker, &t);
    return LLMM_OK;
}
