/* The cheap ops: embedding rows, norms, rotary embedding, gated activations, residuals,
 * K/V stores. Each follows the reference engine's float/double choices noted inline. */
#include <math.h>
#include <string.h>

#include "cpu_backend.h"
#include "kv_rows.h"
#include "packed_tiles.h"
#include "format/quant.h"

/* Rows of a table that is also the output matrix (tied embeddings) come from its packed copy
 * once there is one (packed_tiles.h), block by block. */
llmm_status llmm__cpu_embed_rows(const llmm_tensor *table, const llmm_token *ids, size_t n, float *out) {
    const llmm_type_traits *tt = llmm__type_get(table->type);
    if (!tt || !tt->dequant_row) return LLMM_ERR_UNSUPPORTED;
    const llmm_weight_copy *c = cpu_weight_copy(table);
    const int packed = c && atomic_load_explicit(&c->state, memory_order_acquire) == LLMM_COPY_READY &&
                       c->layout == PACKED_LAYOUT_ROWS16;
    const size_t packed_rows = packed ? llmm__packed_tiles_rows(table) : 0, ne0 = (size_t)table->ne0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= table->ne1) return LLMM_ERR_INVALID_ARG;
        const size_t row = (size_t)ids[i];
        if (row >= packed_rows) {
            tt->dequant_row((const uint8_t *)table->data + row * table->row_bytes, out + i * ne0, ne0);
            continue;
        }
        uint8_t block[PACKED_MAX_BLOCK_BYTES];
        for (size_t b = 0; b < ne0 / tt->block_size; b++) {
            llmm__packed_tiles_read_block(table, c->data, row, b, block);
            tt->dequant_row(block, out + i * ne0 + b * tt->block_size, tt->block_size);
        }
    }
    return LLMM_OK;
}

llmm_status llmm__cpu_embed(void *state, const llmm_tensor *table, float *out) {
    const cpu_state *s = state;
    if (s->step == CPU_STEP_NONE) return LLMM_ERR_INVALID_ARG;
    return llmm__cpu_embed_rows(table, s->desc.tokens, s->desc.n_rows, out);
}

#define ROWWISE_PARALLEL_MIN_ROWS 16

typedef struct norm_task {
    const cpu_kernels *k;
    const float *x, *weight;
    float *out;
    size_t dim;
    float eps;
} norm_task;

static void norm_range(void *arg, size_t r0, size_t r1) {
    const norm_task *t = arg;
    for (size_t r = r0; r < r1; r++)
        t->k->rms_norm_row(t->x + r * t->dim, t->weight, t->out + r * t->dim, t->dim, t->eps);
}

/* Sum of squares in double, scale in float: the reference's rms_norm, then the weight. Rows
 * from a prompt's worth on go to the threads, as the element-wise ops below, so the other
 * threads do not wait on the calling one. */
llmm_status llmm__cpu_rms_norm(void *state, const float *x, const float *weight, float *out, size_t n_rows, size_t dim,
                         float eps) {
    cpu_state *s = state;
    norm_task t = {s->k, x, weight, out, dim, eps};
    llmm__cpu_parallel_range(s, n_rows, 1, ROWWISE_PARALLEL_MIN_ROWS, norm_range, &t);
    return LLMM_OK;
}

/* theta for pair i is pos * base^(-2i/n_rot), built by repeated multiplication in float as
 * the reference does, so angles round the same way; then frequency scale and factors. The
 * angles depend on the position only, so cos and sin are computed once per row (ROPE_PAIRS
 * pairs at a time) for all its heads. */
#define ROPE_PAIRS 64

static inline void rotate_pair(float *a, float *b, float c, float s) {
    const float x0 = *a, x1 = *b;
    *a = x0 * c - x1 * s;
    *b = x0 * s + x1 * c;
}

/* Pairs (lo[i], hi[i]) rotated, in fixed groups of 4 that GCC vectorizes (lo and hi never
 * overlap); per value the same two products and one add or subtract as one at a time. */
static void rotate_halves(float *restrict lo, float *restrict hi, size_t m, const float *restrict c,
                          const float *restrict s) {
    size_t i = 0;
    for (; i + 4 <= m; i += 4)
        for (size_t k = i; k < i + 4; k++) rotate_pair(&lo[k], &hi[k], c[k], s[k]);
    for (; i < m; i++) rotate_pair(&lo[i], &hi[i], c[i], s[i]);
}

/* Adjacent pairs (v[2i], v[2i+1]) rotated, in fixed groups of 4 as above. */
static void rotate_adjacent(float *restrict v, size_t m, const float *restrict c, const float *restrict s) {
    size_t i = 0;
    for (; i + 4 <= m; i += 4)
        for (size_t k = i; k < i + 4; k++) rotate_pair(&v[2 * k], &v[2 * k + 1], c[k], s[k]);
    for (; i < m; i++) rotate_pair(&v[2 * i], &v[2 * i + 1], c[i], s[i]);
}

/* NEOX rotates value i with value i + n_rot/2; the original (NORM) layout adjacent pairs. */
static void rope_pairs(float *v, size_t i0, size_t m, size_t n_rot, const float *c, const float *s,
                       llmm_rope_kind kind) {
    if (kind == LLMM_ROPE_NEOX) rotate_halves(v + i0, v + i0 + n_rot / 2, m, c, s);
    else rotate_adjacent(v + 2 * i0, m, c, s);
}

llmm_status llmm__cpu_rope_rows(float *x, size_t n_rows, size_t n_heads, size_t head_dim, const int32_t *pos,
                          const llmm_rope_params *rp) {
    const size_t n_rot = rp->n_rot;
    const float theta_scale = powf(rp->base, -2.0f / (float)n_rot);
    float c[ROPE_PAIRS], s[ROPE_PAIRS];
    for (size_t r = 0; r < n_rows; r++) {
        float theta = (float)pos[r];
        for (size_t i0 = 0; i0 < n_rot / 2; i0 += ROPE_PAIRS) {
            const size_t m = LLMM_MIN((size_t)ROPE_PAIRS, n_rot / 2 - i0);
            for (size_t i = 0; i < m; i++) {
                const float ff = rp->freq_factors ? rp->freq_factors[i0 + i] : 1.0f;
                const float t = rp->freq_scale * (rp->freq_factors ? theta / ff : theta);
                c[i] = cosf(t) * rp->mscale;
                s[i] = sinf(t) * rp->mscale;
                theta *= theta_scale;
            }
            for (size_t h = 0; h < n_heads; h++)
                rope_pairs(x + (r * n_heads + h) * head_dim, i0, m, n_rot, c, s, rp->kind);
        }
    }
    return LLMM_OK;
}

/* Element-wise ops over a prompt's rows go to the threads from this many values on (16 rows
 * of a 4096-wide FFN), so that a prompt's SwiGLU does not run on the calling thread while the
 * others wait. A decode step's few thousand values stay on the caller.
 * The pieces are multiples of 8 values, the SIMD kernels' step, so every value takes the path
 * (vector or scalar tail) it takes in one call. */
#define ELEMENTWISE_PARALLEL_MIN 65536
#define ELEMENTWISE_ALIGN 8

typedef struct glu_task {
    const cpu_kernels *k;
    float *gate;
    const float *up;
    llmm_activation act;
} glu_task;

static void glu_range(void *arg, size_t i0, size_t i1) {
    const glu_task *t = arg;
    if (t->act == LLMM_ACT_SILU) t->k->silu_mul(t->gate + i0, t->up + i0, i1 - i0);
    else if (t->act == LLMM_ACT_SIGMOID)
        for (size_t i = i0; i < i1; i++) t->gate[i] = t->up[i] * (1.0f / (1.0f + expf(-t->gate[i])));
    else t->k->gelu_mul(t->gate + i0, t->up + i0, i1 - i0);
}

llmm_status llmm__cpu_glu(void *state, float *gate, const float *up, size_t n, llmm_activation act) {
    cpu_state *s = state;
    glu_task t = {s->k, gate, up, act};
    llmm__cpu_parallel_range(s, n, ELEMENTWISE_ALIGN, ELEMENTWISE_PARALLEL_MIN, glu_range, &t);
    return LLMM_OK;
}

typedef struct add_task {
    float *dst;
    const float *src;
} add_task;

/* In blocks of eight, which GCC vectorizes at -O2 (a plain loop of unknown length stays
 * scalar); restrict parameters spare it the overlap
 * check that its cheapest cost model refuses. */
void llmm__cpu_add_floats(float *restrict dst, const float *restrict src, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (size_t k = 0; k < 8; k++) dst[i + k] += src[i + k];
    for (; i < n; i++) dst[i] += src[i];
}

static void add_range(void *arg, size_t i0, size_t i1) {
    const add_task *t = arg;
    llmm__cpu_add_floats(t->dst + i0, t->src + i0, i1 - i0);
}

llmm_status llmm__cpu_add(void *state, float *dst, const float *src, size_t n) {
    add_task t = {dst, src};
    llmm__cpu_parallel_range(state, n, ELEMENTWISE_ALIGN, ELEMENTWISE_PARALLEL_MIN, add_range, &t);
    return LLMM_OK;
}

llmm_status llmm__cpu_kv_store_rows(const llmm_kv_view *views, const int32_t *pos, size_t n_rows, const float *k,
                              const float *v, size_t kv_dim) {
    for (size_t r = 0; r < n_rows; r++)
        if (!kv_type_known(views[r].type) || pos[r] < 0 || (size_t)views[r].n_head_kv * views[r].head_dim != kv_dim)
            return LLMM_ERR_UNSUPPORTED;
    for (size_t r = 0; r < n_rows; r++) {
        kv_store(&views[r], views[r].k, (uint32_t)pos[r], k + r * kv_dim);
        kv_store(&views[r], views[r].v, (uint32_t)pos[r], v + r * kv_dim);
    }
    return LLMM_OK;
}

typedef struct rope_task {
    float *x;
    size_t n_heads, head_dim;
    const int32_t *pos;
    const llmm_rope_params *rp;
} rope_task;

static void rope_range(void *arg, size_t r0, size_t r1) {
    const rope_task *t = arg;
    llmm__cpu_rope_rows(t->x + r0 * t->n_heads * t->head_dim, r1 - r0, t->n_heads, t->head_dim, t->pos + r0, t->rp);
}

/* A prompt's rows go to the threads as the norms' do: each row's angles (a cosf and a sinf per
 * pair) and rotations are its own, and on the calling thread alone they left the others
 * waiting for two calls per attention layer. */
llmm_status llmm__cpu_rope(void *state, float *x, size_t n_heads, size_t head_dim, const llmm_rope_params *rp) {
    cpu_state *s = state;
    if (s->step == CPU_STEP_NONE) return LLMM_ERR_INVALID_ARG;
    rope_task t = {x, n_heads, head_dim, s->desc.pos, rp};
    llmm__cpu_parallel_range(s, s->desc.n_rows, 1, ROWWISE_PARALLEL_MIN_ROWS, rope_range, &t);
    return LLMM_OK;
}

llmm_status llmm__cpu_kv_write(void *state, uint32_t layer, const float *k, const float *v) {
    cpu_state *s = state;
    if (s->step == CPU_STEP_NONE || layer >= s->desc.kv->n_layer) return LLMM_ERR_INVALID_ARG;
    const llmm_kv_layout *kv = s->desc.kv;
    llmm__cpu_step_views(s, layer);
    return llmm__cpu_kv_store_rows(s->views, s->desc.pos, s->desc.n_rows, k, v, (size_t)kv->n_head_kv * kv->head_dim);
}
