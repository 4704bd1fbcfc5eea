/* qwen35's Gated DeltaNet layers (backend.h llmm_delta_batch) and the split of its gated query
 * rows. A decode row runs the recurrence one token at a time; a sequence's prompt rows run the
 * chunked form of the delta rule (below), equal within float rounding. Their cost per token is
 * heads x head_dim^2 (plus chunk x head_dim for the chunked form), small beside the layer's
 * matmuls at these sizes, so it runs on the calling thread. */
#include <math.h>
#include <string.h>

#include "cpu_backend.h"

llmm_status llmm__cpu_split_halves(void *state, const float *src, float *a, float *b, size_t n_groups, size_t width) {
    (void)state;
    for (size_t g = 0; g < n_groups; g++) {
        memcpy(a + g * width, src + 2 * g * width, width * sizeof *a);
        memcpy(b + g * width, src + (2 * g + 1) * width, width * sizeof *b);
    }
    return LLMM_OK;
}

static float silu(float x) { return x / (1.0f + expf(-x)); }
static float softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

/* The convolution input of position q, channel c: rows of the step from p0 on, the state
 * (kernel - 1 rows, ending at p0 - 1) before, zero before position 0. */
static float conv_in(const llmm_delta_batch *b, size_t conv_dim, const float *state, size_t r0, int64_t p0,
                     int64_t q, size_t c) {
    if (q < 0) return 0.f;
    if (q >= p0) return b->qkv[(r0 + (size_t)(q - p0)) * conv_dim + c];
    return state[(size_t)((int64_t)b->kernel - 1 - (p0 - q)) * conv_dim + c];
}

/* Rows [r0, r1) of one sequence through the convolution and SiLU into work; then its
 * convolution state moves to the last row (ascending: a row still needed sits higher). */
static void conv_rows(const llmm_delta_batch *b, size_t conv_dim, const int32_t *pos, size_t r0, size_t r1,
                      float *state) {
    const size_t K = b->kernel;
    const int64_t p0 = pos[r0];
    for (size_t r = r0; r < r1; r++)
        for (size_t c = 0; c < conv_dim; c++) {
            float y = 0.f;
            for (size_t j = 0; j < K; j++)
                y += conv_in(b, conv_dim, state, r0, p0, (int64_t)pos[r] - (int64_t)K + 1 + (int64_t)j, c) *
                     b->taps[c * K + j];
            b->work[r * conv_dim + c] = silu(y);
        }
    const int64_t p_last = pos[r1 - 1];
    for (size_t i = 0; i + 1 < K; i++)
        for (size_t c = 0; c < conv_dim; c++)
            state[i * conv_dim + c] = conv_in(b, conv_dim, state, r0, p0, p_last - (int64_t)K + 2 + (int64_t)i, c);
}

static void l2_normalize(float *x, size_t n, float eps) {
    float sum = 0.f;
    for (size_t i = 0; i < n; i++) sum += x[i] * x[i];
    const float scale = 1.0f / fmaxf(sqrtf(sum), eps);
    for (size_t i = 0; i < n; i++) x[i] *= scale;
}

/* One value head of one row: the state matrix S (d x d) decays, takes the delta-rule update
 * and is read out with q; o gets the head's d outputs before the norm. */
static void delta_head(float *S, const float *q, const float *k, const float *v, float beta, float decay, size_t d,
                       float *o) {
    float delta[LLMM_MAX_SSM_HEAD];
    for (size_t i = 0; i < d * d; i++) S[i] *= decay;
    for (size_t j = 0; j < d; j++) {
        float kv = 0.f; /* (S^T k)[j] */
        for (size_t i = 0; i < d; i++) kv += S[i * d + j] * k[i];
        delta[j] = beta * (v[j] - kv);
    }
    for (size_t i = 0; i < d; i++)
        for (size_t j = 0; j < d; j++) S[i * d + j] += k[i] * delta[j];
    const float scale = 1.0f / sqrtf((float)d);
    for (size_t j = 0; j < d; j++) {
        float acc = 0.f;
        for (size_t i = 0; i < d; i++) acc += S[i * d + j] * q[i];
        o[j] = acc * scale;
    }
}

/* Row r's q and k heads L2-normalized in place; its value head j's update rate beta and log
 * decay g (the state is multiplied by exp(g)). */
static void normalize_qk(const llmm_delta_batch *b, size_t conv_dim, size_t r) {
    const size_t d = b->head_dim, G = b->n_k_heads;
    float *x = b->work + r * conv_dim;
    for (size_t h = 0; h < 2 * G; h++) l2_normalize(x + h * d, d, b->eps);
}

static void head_gates(const llmm_delta_batch *b, size_t r, size_t j, float *beta, float *g) {
    const size_t V = b->n_v_heads;
    *beta = 1.0f / (1.0f + expf(-b->beta_raw[r * V + j]));
    *g = softplus(b->alpha_raw[r * V + j] + b->dt_bias[j]) * b->a[j];
}

/* Row r's head j output: RMS-normalized, scaled by the norm weights and gated by SiLU(z). */
static void gated_norm(const llmm_delta_batch *b, size_t r, size_t j) {
    const size_t d = b->head_dim, V = b->n_v_heads;
    float *o = b->out + r * V * d + j * d;
    float sum = 0.f;
    for (size_t i = 0; i < d; i++) sum += o[i] * o[i];
    const float inv = 1.0f / sqrtf(sum / (float)d + b->eps);
    const float *z = b->z + r * V * d + j * d;
    for (size_t i = 0; i < d; i++) o[i] = o[i] * inv * b->norm[i] * silu(z[i]);
}

/* Value head j of a decode row (q and k normalized): its update and gated norm. */
static void delta_row_head(const llmm_delta_batch *b, size_t conv_dim, size_t r, size_t j, float *S) {
    const size_t d = b->head_dim, G = b->n_k_heads, V = b->n_v_heads;
    float *x = b->work + r * conv_dim, *q = x, *k = x + G * d, *v = x + 2 * G * d;
    float beta, g;
    head_gates(b, r, j, &beta, &g);
    delta_head(S + j * d * d, q + (j % G) * d, k + (j % G) * d, v + j * d, beta, expf(g), d, b->out + r * V * d + j * d);
    gated_norm(b, r, j);
}

/* The chunked form of the delta rule for prompt rows. Over a chunk of C rows starting from
 * state S0, with G_t the running sum of the log decays, S_t = e^G_t S0 + sum_{s<=t}
 * e^(G_t - G_s) k_s u_s^T, where the updates u solve the lower-triangular system
 *   u_t = beta_t (v_t - e^G_t S0^T k_t - sum_{s<t} e^(G_t - G_s) (k_s . k_t) u_s)
 * and o_t = S_t^T q_t. S0 is read C times for k and q and written once at the chunk's end, not
 * rewritten per token; the rest is C x C dot products of head_dim. It equals the token-by-token
 * recurrence within float rounding (tests/test_recurrent.c: a prompt whole, in chunks of 3 and
 * token by token). */
#define DELTA_CHUNK LLMM_DELTA_CHUNK

static float dot(const float *a, const float *b, size_t n) {
    float acc = 0.f;
    for (size_t i = 0; i < n; i++) acc += a[i] * b[i];
    return acc;
}

/* (S^T x)[jj] for the d x d matrix S. */
static void read_out(const float *S, const float *x, size_t d, float *y) {
    for (size_t jj = 0; jj < d; jj++) y[jj] = 0.f;
    for (size_t i = 0; i < d; i++)
        for (size_t jj = 0; jj < d; jj++) y[jj] += S[i * d + jj] * x[i];
}

/* Value head j over rows [r0, r0 + n), n <= DELTA_CHUNK, their q and k normalized. */
static void delta_head_chunk(const llmm_delta_batch *b, size_t conv_dim, size_t r0, size_t n, size_t j, float *S) {
    const size_t d = b->head_dim, G = b->n_k_heads, V = b->n_v_heads;
    const size_t qo = (j % G) * d, ko = G * d + (j % G) * d, vo = 2 * G * d + j * d;
    float u[DELTA_CHUNK][LLMM_MAX_SSM_HEAD], cum[DELTA_CHUNK], w[LLMM_MAX_SSM_HEAD];
    const float scale = 1.0f / sqrtf((float)d);
    for (size_t t = 0; t < n; t++) {
        const float *x = b->work + (r0 + t) * conv_dim;
        float beta, g;
        head_gates(b, r0 + t, j, &beta, &g);
        cum[t] = (t ? cum[t - 1] : 0.f) + g;
        read_out(S, x + ko, d, w);
        const float e = expf(cum[t]);
        for (size_t jj = 0; jj < d; jj++) u[t][jj] = x[vo + jj] - e * w[jj];
        for (size_t s = 0; s < t; s++) {
            const float c = expf(cum[t] - cum[s]) * dot(b->work + (r0 + s) * conv_dim + ko, x + ko, d);
            for (size_t jj = 0; jj < d; jj++) u[t][jj] -= c * u[s][jj];
        }
        for (size_t jj = 0; jj < d; jj++) u[t][jj] *= beta;
        float *o = b->out + (r0 + t) * V * d + j * d;
        read_out(S, x + qo, d, w);
        for (size_t jj = 0; jj < d; jj++) o[jj] = e * w[jj];
        for (size_t s = 0; s <= t; s++) {
            const float c = expf(cum[t] - cum[s]) * dot(b->work + (r0 + s) * conv_dim + ko, x + qo, d);
            for (size_t jj = 0; jj < d; jj++) o[jj] += c * u[s][jj];
        }
        for (size_t jj = 0; jj < d; jj++) o[jj] *= scale;
    }
    const float e_end = expf(cum[n - 1]);
    for (size_t i = 0; i < d * d; i++) S[i] *= e_end;
    for (size_t s = 0; s < n; s++) {
        const float *k = b->work + (r0 + s) * conv_dim + ko;
        const float c = expf(cum[n - 1] - cum[s]);
        for (size_t i = 0; i < d; i++)
            for (size_t jj = 0; jj < d; jj++) S[i * d + jj] += c * k[i] * u[s][jj];
    }
}

/* Value head j over rows [r0, r1) of one sequence's prompt (q and k normalized), in chunks. */
static void delta_prompt_head(const llmm_delta_batch *b, size_t conv_dim, size_t r0, size_t r1, size_t j, float *S) {
    const size_t d = b->head_dim;
    for (size_t c0 = r0; c0 < r1; c0 += DELTA_CHUNK)
        delta_head_chunk(b, conv_dim, c0, LLMM_MIN((size_t)DELTA_CHUNK, r1 - c0), j, S + j * d * d);
    for (size_t r = r0; r < r1; r++) gated_norm(b, r, j);
}

/* One sequence's rows [r0, r1) of a call, its matrices S: the value heads are independent
 * (each reads shared q and k, and writes its own matrix and outputs), so the context's threads
 * share them out, and every head is computed as a single thread would: the same results
 * whatever the thread count. The mixer was 43 % of a Qwen3.5 0.8B Q4_0 run's cycles on one
 * thread of two (perf, -p 64 -n 8). */
typedef struct delta_heads_task {
    const llmm_delta_batch *b;
    size_t conv_dim, r0, r1;
    float *S;
} delta_heads_task;

static void delta_heads_range(void *arg, size_t j0, size_t j1) {
    const delta_heads_task *t = arg;
    for (size_t j = j0; j < j1; j++) {
        if (t->r1 - t->r0 > 1) delta_prompt_head(t->b, t->conv_dim, t->r0, t->r1, j, t->S);
        else delta_row_head(t->b, t->conv_dim, t->r0, j, t->S);
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
        conv_rows(b, conv_dim, step->pos, r0, r1, state);
        float *S = state + (size_t)(b->kernel - 1) * conv_dim;
        /* a sequence starting at position 0 starts from empty matrices, whatever its slot held */
        if (step->pos[r0] == 0) memset(S, 0, (size_t)b->n_v_heads * b->head_dim * b->head_dim * sizeof *S);
        for (size_t r = r0; r < r1; r++) normalize_qk(b, conv_dim, r);
        delta_heads_task t = {b, conv_dim, r0, r1, S};
        llmm__cpu_parallel_range(s, b->n_v_heads, 1, 2, delta_heads_range, &t);
        r0 = r1;
    }
    return LLMM_OK;
}
