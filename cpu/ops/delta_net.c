/* qwen35's Gated DeltaNet layers (backend.h llmm_delta_batch) and the split of its gated query
 * rows. A decode row runs the recurrence one token at a time; a sequence's prompt rows run the
 * chunked form of the delta rule (below), equal within float rounding. The state matrices'
 * arithmetic is the kernel table's (delta_step, delta_read, delta_update: SIMD in every SIMD
 * table, bit for bit the scalar table's), the convolution on q, k and v the table's conv_rows;
 * a prompt's rows (convolution, SiLU, q/k norms) and then the value heads go to the context's
 * threads. */
#include <math.h>
#include <string.h>

#include "cpu_backend.h"

typedef struct split_task {
    const float *src;
    float *a, *b;
    size_t width;
} split_task;

static void split_range(void *arg, size_t g0, size_t g1) {
    const split_task *t = arg;
    for (size_t g = g0; g < g1; g++) {
        memcpy(t->a + g * t->width, t->src + 2 * g * t->width, t->width * sizeof *t->a);
        memcpy(t->b + g * t->width, t->src + (2 * g + 1) * t->width, t->width * sizeof *t->b);
    }
}

/* A prompt's groups (one per row and head) go to the threads from SPLIT_PARALLEL_MIN_GROUPS on,
 * as the norms' rows do: a 64-token prompt of Qwen3.5 0.8B moves 1 MiB per gated attention
 * layer, which had been copied on the calling thread alone. */
#define SPLIT_PARALLEL_MIN_GROUPS 16

llmm_status llmm__cpu_split_halves(void *state, const float *src, float *a, float *b, size_t n_groups, size_t width) {
    split_task t = {src, a, b, width};
    llmm__cpu_parallel_range(state, n_groups, 1, SPLIT_PARALLEL_MIN_GROUPS, split_range, &t);
    return LLMM_OK;
}

/* x = SiLU(x) through the kernel table's silu_mul (its vector exp, the same bits in every table),
 * in pieces against a row of ones: the SiLUs were a fifth of the mixer's instructions through
 * libm's expf. */
#define SILU_PIECE 256
static void silu_inplace(const cpu_kernels *kern, float *x, size_t n) {
    float ones[SILU_PIECE];
    for (size_t i = 0; i < SILU_PIECE; i++) ones[i] = 1.0f;
    for (size_t i = 0; i < n; i += SILU_PIECE) kern->silu_mul(x + i, ones, LLMM_MIN((size_t)SILU_PIECE, n - i));
}

/* The per-head vector loops below, in blocks of eight that GCC vectorizes at -O2 (plain loops
 * of unknown length stay scalar; restrict spares it the overlap check): per value the same
 * one or two operations as one at a time, so the same bits. Written plainly they were a third
 * of a prompt's mixer instructions once the state kernels and the convolution were SIMD. */
static void scale_inplace(float *x, float a, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (size_t k = 0; k < 8; k++) x[i + k] *= a;
    for (; i < n; i++) x[i] *= a;
}

/* dst = a src */
static void scale_into(float *restrict dst, float a, const float *restrict src, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (size_t k = 0; k < 8; k++) dst[i + k] = a * src[i + k];
    for (; i < n; i++) dst[i] = a * src[i];
}

/* dst = v - a w */
static void sub_scaled(float *restrict dst, const float *restrict v, float a, const float *restrict w, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (size_t k = 0; k < 8; k++) dst[i + k] = v[i + k] - a * w[i + k];
    for (; i < n; i++) dst[i] = v[i] - a * w[i];
}

/* x = x a w, left to right */
static void scale_weighted(float *restrict x, float a, const float *restrict w, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (size_t k = 0; k < 8; k++) x[i + k] = x[i + k] * a * w[i + k];
    for (; i < n; i++) x[i] = x[i] * a * w[i];
}

static float softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

/* The sum of squares through the table's dot_f32 (eight lanes, the same bits in every table):
 * as one chain of scalar adds, the norms were a quarter of the mixer's own (non-kernel) time
 * in a prompt. */
static void l2_normalize(const cpu_kernels *kern, float *x, size_t n, float eps) {
    scale_inplace(x, 1.0f / fmaxf(sqrtf(kern->dot_f32(x, x, n)), eps), n);
}

/* Row r's q and k heads L2-normalized in place; its value head j's update rate beta and log
 * decay g (the state is multiplied by exp(g)). */
static void normalize_qk(const cpu_kernels *kern, const llmm_delta_batch *b, size_t conv_dim, size_t r) {
    const size_t d = b->head_dim, G = b->n_k_heads;
    float *x = b->work + r * conv_dim;
    for (size_t h = 0; h < 2 * G; h++) l2_normalize(kern, x + h * d, d, b->eps);
}

/* Rows [r0 + t0, r0 + t1) of one sequence through the convolution (the table's conv_rows over
 * the sequence's window of input rows), SiLU and the q/k norms into work. Each row reads only
 * inputs and writes only its own work row, so the context's threads share a prompt's rows out
 * (one thread had run them while the other waited: the serial part of a Qwen3.5 prompt). */
typedef struct conv_rows_task {
    const cpu_kernels *kern;
    const llmm_delta_batch *b;
    size_t conv_dim, r0;
    const float *const *window;
} conv_rows_task;

static void conv_rows_range(void *arg, size_t t0, size_t t1) {
    const conv_rows_task *t = arg;
    const llmm_delta_batch *b = t->b;
    t->kern->conv_rows(b->work + (t->r0 + t0) * t->conv_dim, t->conv_dim, t->window + t0, t1 - t0, b->taps,
                       b->kernel, 0, t->conv_dim);
    for (size_t r = t->r0 + t0; r < t->r0 + t1; r++) {
        silu_inplace(t->kern, b->work + r * t->conv_dim, t->conv_dim);
        normalize_qk(t->kern, b, t->conv_dim, r);
    }
}

/* One sequence's rows [r0, r1) through the convolution, SiLU and norms (above); then its
 * convolution state moves to the last row. */
static llmm_status conv_sequence(cpu_state *s, const llmm_delta_batch *b, size_t conv_dim, size_t r0, size_t r1,
                                 float *state) {
    const size_t K = b->kernel, n = r1 - r0;
    const float **window = llmm__cpu_scratch(s, (n + K - 1) * sizeof *window);
    if (!window) return LLMM_ERR_NO_MEMORY;
    llmm__cpu_conv_window(b->qkv, state, conv_dim, K, s->desc.pos, r0, r1, window);
    conv_rows_task t = {s->k, b, conv_dim, r0, window};
    llmm__cpu_parallel_range(s, n, 1, CPU_CONV_PARALLEL_MIN_ROWS, conv_rows_range, &t);
    llmm__cpu_conv_state_shift(state, conv_dim, K, window, n);
    return LLMM_OK;
}

static void head_gates(const llmm_delta_batch *b, size_t r, size_t j, float *beta, float *g) {
    const size_t V = b->n_v_heads;
    *beta = 1.0f / (1.0f + expf(-b->beta_raw[r * V + j]));
    *g = softplus(b->alpha_raw[r * V + j] + b->dt_bias[j]) * b->a[j];
}

/* Row r's head j output: RMS-normalized, scaled by the norm weights and gated by SiLU(z). */
static void gated_norm(const cpu_kernels *kern, const llmm_delta_batch *b, size_t r, size_t j) {
    const size_t d = b->head_dim, V = b->n_v_heads;
    float *o = b->out + r * V * d + j * d, gate[LLMM_MAX_SSM_HEAD];
    const float inv = 1.0f / sqrtf(kern->dot_f32(o, o, d) / (float)d + b->eps);
    memcpy(gate, b->z + r * V * d + j * d, d * sizeof *gate);
    scale_weighted(o, inv, b->norm, d);
    kern->silu_mul(gate, o, d);
    memcpy(o, gate, d * sizeof *o);
}

/* Value head j of a decode row (q and k normalized): its update, read out with q, and its gated
 * norm. The state is read once (kernel_table.h delta_step): o = S_new^T q is taken as
 * decay S^T q + (k . q) delta, both parts from the one pass that also gives S^T k. */
static void delta_row_head(const cpu_kernels *kern, const llmm_delta_batch *b, size_t conv_dim, size_t r, size_t j,
                           float *S) {
    const size_t d = b->head_dim, G = b->n_k_heads, V = b->n_v_heads;
    const float *x = b->work + r * conv_dim, *q = x + (j % G) * d, *k = x + G * d + (j % G) * d;
    float beta, g;
    head_gates(b, r, j, &beta, &g);
    float *o = b->out + r * V * d + j * d;
    kern->delta_step(S + j * d * d, d, k, q, x + 2 * G * d + j * d, beta, expf(g), kern->dot_f32(k, q, d), o);
    scale_inplace(o, 1.0f / sqrtf((float)d), d);
    gated_norm(kern, b, r, j);
}

/* The chunked form of the delta rule for prompt rows. Over a chunk of C rows starting from
 * state S0, with G_t the running sum of the log decays, S_t = e^G_t S0 + sum_{s<=t}
 * e^(G_t - G_s) k_s u_s^T, where the updates u solve the lower-triangular system
 *   u_t = beta_t (v_t - e^G_t S0^T k_t - sum_{s<t} e^(G_t - G_s) (k_s . k_t) u_s)
 * and o_t = S_t^T q_t. S0 is read once per chunk for all C keys and queries (delta_read) and
 * updated once at its end (delta_update, a rank-C update), not rewritten per token; the rest
 * is C x C dot products of head_dim. It equals the token-by-token recurrence within float
 * rounding (tests/test_recurrent.c: a prompt whole, in chunks of 3 and token by token). The
 * per-head buffers (y, u: 3 C head_dim floats, 48 KiB at the largest head) are on the stack.
 * C is LLMM_DELTA_CHUNK (backend.h), the rows the CUDA module chunks too. */

/* Value head j over rows [r0, r0 + n), n <= LLMM_DELTA_CHUNK, their q and k normalized. */
static void delta_head_chunk(const cpu_kernels *kern, const llmm_delta_batch *b, size_t conv_dim, size_t r0, size_t n,
                             size_t j, float *S) {
    const size_t d = b->head_dim, G = b->n_k_heads, V = b->n_v_heads;
    const size_t qo = (j % G) * d, ko = G * d + (j % G) * d, vo = 2 * G * d + j * d;
    /* y: S0^T k_t in rows [0, n), S0^T q_t in rows [n, 2n); then the scaled keys of the update */
    float y[2 * LLMM_DELTA_CHUNK * LLMM_MAX_SSM_HEAD], u[LLMM_DELTA_CHUNK * LLMM_MAX_SSM_HEAD];
    float cum[LLMM_DELTA_CHUNK];
    const float *kq_rows[2 * LLMM_DELTA_CHUNK];
    for (size_t t = 0; t < n; t++) {
        kq_rows[t] = b->work + (r0 + t) * conv_dim + ko;
        kq_rows[n + t] = b->work + (r0 + t) * conv_dim + qo;
    }
    kern->delta_read(S, d, kq_rows, 2 * n, y);
    const float scale = 1.0f / sqrtf((float)d);
    for (size_t t = 0; t < n; t++) {
        const float *x = b->work + (r0 + t) * conv_dim;
        float beta, g, *ut = u + t * d;
        head_gates(b, r0 + t, j, &beta, &g);
        cum[t] = (t ? cum[t - 1] : 0.f) + g;
        const float e = expf(cum[t]);
        sub_scaled(ut, x + vo, e, y + t * d, d);
        for (size_t s = 0; s < t; s++)
            kern->axpy(ut, -expf(cum[t] - cum[s]) * kern->dot_f32(kq_rows[s], kq_rows[t], d), u + s * d, d);
        scale_inplace(ut, beta, d);
        float *o = b->out + (r0 + t) * V * d + j * d;
        scale_into(o, e, y + (n + t) * d, d);
        for (size_t s = 0; s <= t; s++)
            kern->axpy(o, expf(cum[t] - cum[s]) * kern->dot_f32(kq_rows[s], kq_rows[n + t], d), u + s * d, d);
        scale_inplace(o, scale, d);
    }
    for (size_t s = 0; s < n; s++) scale_into(y + s * d, expf(cum[n - 1] - cum[s]), kq_rows[s], d);
    kern->delta_update(S, d, expf(cum[n - 1]), y, u, n);
}

/* Value head j over rows [r0, r1) of one sequence's prompt (q and k normalized), in chunks. */
static void delta_prompt_head(const cpu_kernels *kern, const llmm_delta_batch *b, size_t conv_dim, size_t r0,
                              size_t r1, size_t j, float *S) {
    const size_t d = b->head_dim;
    for (size_t c0 = r0; c0 < r1; c0 += LLMM_DELTA_CHUNK)
        delta_head_chunk(kern, b, conv_dim, c0, LLMM_MIN((size_t)LLMM_DELTA_CHUNK, r1 - c0), j, S + j * d * d);
    for (size_t r = r0; r < r1; r++) gated_norm(kern, b, r, j);
}

/* One sequence's rows [r0, r1) of a call, its matrices S: the value heads are independent
 * (each reads shared q and k, and writes its own matrix and outputs), so the context's threads
 * share them out, and every head is computed as a single thread would: the same results
 * whatever the thread count. The mixer was 43 % of a Qwen3.5 0.8B Q4_0 run's cycles on one
 * thread of two (perf, -p 64 -n 8) in scalar loops; the table's kernels cut its instructions
 * 10-12x (docs/performance.md, "The DeltaNet mixer in SIMD"). */
typedef struct delta_heads_task {
    const cpu_kernels *kern;
    const llmm_delta_batch *b;
    size_t conv_dim, r0, r1;
    float *S;
} delta_heads_task;

static void delta_heads_range(void *arg, size_t j0, size_t j1) {
    const delta_heads_task *t = arg;
    for (size_t j = j0; j < j1; j++) {
        if (t->r1 - t->r0 > 1) delta_prompt_head(t->kern, t->b, t->conv_dim, t->r0, t->r1, j, t->S);
        else delta_row_head(t->kern, t->b, t->conv_dim, t->r0, j, t->S);
    }
}

llmm_status llmm__cpu_gated_delta_net(void *st, const llmm_delta_batch *b) {
    cpu_state *s = st;
    if (s->step == CPU_STEP_NONE || b->n_rows != s->desc.n_rows || b->kernel == 0 || b->n_k_heads == 0 ||
        b->head_dim == 0 || b->head_dim > LLMM_MAX_SSM_HEAD)
        return LLMM_ERR_INVALID_ARG;
    const llmm_step *step = &s->desc;
    const size_t conv_dim = 2 * (size_t)b->n_k_heads * b->head_dim + (size_t)b->n_v_heads * b->head_dim;
    for (size_t r0 = 0; r0 < b->n_rows;) {
        size_t r1 = r0 + 1;
        while (r1 < b->n_rows && step->row_seq[r1] == step->row_seq[r0]) r1++;
        float *state = b->states + (size_t)step->seq_ids[step->row_seq[r0]] * b->seq_stride;
        const llmm_status conv = conv_sequence(s, b, conv_dim, r0, r1, state);
        if (conv != LLMM_OK) return conv;
        float *S = state + (size_t)(b->kernel - 1) * conv_dim;
        /* a sequence starting at position 0 starts from empty matrices, whatever its slot held */
        if (step->pos[r0] == 0) memset(S, 0, (size_t)b->n_v_heads * b->head_dim * b->head_dim * sizeof *S);
        delta_heads_task t = {s->k, b, conv_dim, r0, r1, S};
        llmm__cpu_parallel_range(s, b->n_v_heads, 1, 2, delta_heads_range, &t);
        r0 = r1;
    }
    return LLMM_OK;
}
