/* The gated short convolution of LFM2's recurrent layers (backend.h llmm_conv_batch): a
 * depthwise causal convolution over the last few positions, its history per sequence kept in
 * a state the core owns; and the window of input rows and the state's move that Gated
 * DeltaNet's convolution (ops/delta_net.c) shares. */
#include <string.h>

#include "cpu_backend.h"

/* dst = a * b and dst = c * dst, in blocks of eight, which GCC vectorizes at -O2 (the products
 * round as one at a time) */
static void products(float *restrict dst, const float *restrict a, const float *restrict b, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (size_t k = 0; k < 8; k++) dst[i + k] = a[i + k] * b[i + k];
    for (; i < n; i++) dst[i] = a[i] * b[i];
}

static void gate_inplace(float *restrict dst, const float *restrict c, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (size_t k = 0; k < 8; k++) dst[i + k] = c[i + k] * dst[i + k];
    for (; i < n; i++) dst[i] = c[i] * dst[i];
}

typedef struct conv_task {
    const cpu_kernels *kern;
    const llmm_conv_batch *b;
    float *u;                  /* (n_rows, dim) */
    const float *const *window; /* the sequence's, from its row r0 */
    size_t r0;
} conv_task;

static void gate_products_range(void *arg, size_t r0, size_t r1) {
    const conv_task *t = arg;
    const size_t dim = t->b->dim;
    for (size_t r = r0; r < r1; r++) {
        const float *row = t->b->bcx + r * 3 * dim;
        products(t->u + r * dim, row, row + 2 * dim, dim);
    }
}

static void conv_out_range(void *arg, size_t t0, size_t t1) {
    const conv_task *t = arg;
    const llmm_conv_batch *b = t->b;
    const size_t dim = b->dim;
    float *out = b->out + (t->r0 + t0) * dim;
    t->kern->conv_rows(out, dim, t->window + t0, t1 - t0, b->taps, b->kernel, 0, dim);
    for (size_t r = t->r0 + t0; r < t->r0 + t1; r++)
        gate_inplace(b->out + r * dim, b->bcx + r * 3 * dim + dim, dim);
}

/* The step's rows through the convolution in two passes over the threads: u = B * X for every
 * row (the convolution's input, which the state keeps), then per sequence its outputs, the
 * table's conv_rows over the sequence's window of u rows times C; each output row reads only u
 * and writes only itself. Neither pass runs on the calling thread alone. */
llmm_status llmm__cpu_short_conv(void *st, const llmm_conv_batch *b) {
    cpu_state *s = st;
    if (s->step == CPU_STEP_NONE || b->n_rows != s->desc.n_rows || b->kernel == 0) return LLMM_ERR_INVALID_ARG;
    const llmm_step *step = &s->desc;
    const size_t dim = b->dim, K = b->kernel;
    const float **window = llmm__cpu_scratch(s, (b->n_rows + K - 1) * sizeof *window + b->n_rows * dim * sizeof(float));
    if (!window) return LLMM_ERR_NO_MEMORY;
    conv_task t = {s->k, b, (float *)(void *)(window + b->n_rows + K - 1), window, 0};
    llmm__cpu_parallel_range(s, b->n_rows, 1, CPU_CONV_PARALLEL_MIN_ROWS, gate_products_range, &t);
    for (size_t r0 = 0; r0 < b->n_rows;) {
        size_t r1 = r0 + 1;
        while (r1 < b->n_rows && step->row_seq[r1] == step->row_seq[r0]) r1++;
        float *state = b->states + (size_t)step->seq_ids[step->row_seq[r0]] * b->seq_stride;
        llmm__cpu_conv_window(t.u, state, dim, K, step->pos, r0, r1, window);
        t.r0 = r0;
        llmm__cpu_parallel_range(s, r1 - r0, 1, CPU_CONV_PARALLEL_MIN_ROWS, conv_out_range, &t);
        llmm__cpu_conv_state_shift(state, dim, K, window, r1 - r0);
        r0 = r1;
    }
    return LLMM_OK;
}

void llmm__cpu_conv_window(const float *rows, const float *state, size_t dim, size_t kernel, const int32_t *pos,
                           size_t r0, size_t r1, const float **window) {
    const int64_t p0 = pos[r0];
    for (size_t i = 0; i < r1 - r0 + kernel - 1; i++) {
        const int64_t q = p0 - (int64_t)(kernel - 1) + (int64_t)i;
        if (q < 0) window[i] = NULL;
        else if (q >= p0) window[i] = rows + (r0 + (size_t)(q - p0)) * dim;
        else window[i] = state + (size_t)((int64_t)kernel - 1 - (p0 - q)) * dim;
    }
}

/* Ascending: a state row still to be read sits at a higher index than the one written. */
void llmm__cpu_conv_state_shift(float *state, size_t dim, size_t kernel, const float *const *window, size_t n_out) {
    for (size_t i = 0; i + 1 < kernel; i++) {
        const float *in = window[n_out + i];
        float *dst = state + i * dim;
        if (!in) memset(dst, 0, dim * sizeof *dst);
        else if (in != dst) memmove(dst, in, dim * sizeof *dst);
    }
}
