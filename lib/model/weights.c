#include "weights.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "backend/backend.h"
#include "format/quant.h"

#define MAX_LAYERS 4096

typedef enum bind_kind {
    BIND_MATRIX,   /* used by matmul (or the embedding lookup) */
    BIND_VECTOR,   /* norms, biases, rope factors: f32 */
} bind_kind;

typedef struct bind_spec {
    const char *name;
    int64_t ne0, ne1;
    bind_kind kind;
    int optional;
    llmm_tensor *dst;
} bind_spec;

/* A binding in progress: the source and the architecture's row. */
typedef struct bind_ctx {
    const gguf_file *gguf;
    const llmm_hparams *hp;
    uint32_t n_vocab;
    const llmm_arch *arch;
} bind_ctx;

static llmm_status bind(const bind_ctx *m, const bind_spec *s, llmm_diag *d) {
    const gguf_tensor *t = llmm__gguf_find_tensor(m->gguf, s->name);
    s->dst->data = NULL;
    if (!t) return s->optional ? LLMM_OK : llmm__diag_fail(d, LLMM_ERR_BAD_FILE, "tensor '%s' is missing", s->name);
    if (t->ne[0] != s->ne0 || t->ne[1] != s->ne1 || t->ne[2] != 1 || t->ne[3] != 1)
        return llmm__diag_fail(d, LLMM_ERR_BAD_FILE, "tensor '%s' has shape [%lld, %lld, %lld, %lld], expected [%lld, %lld]",
                         s->name, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2], (long long)t->ne[3],
                         (long long)s->ne0, (long long)s->ne1);
    /* whether a backend computes a matrix's type is asked at context creation, of the
     * backend that will (llmm_context_create) */
    const llmm_type_traits *tt = llmm__type_get(t->type);
    if (s->kind == BIND_VECTOR && t->type != LLMM_TYPE_F32)
        return llmm__diag_fail(d, LLMM_ERR_UNSUPPORTED, "tensor '%s' has type %s, expected f32", s->name, tt->name);
    *s->dst = (llmm_tensor){.data = t->data,
                            .type = t->type,
                            .ne0 = s->ne0,
                            .ne1 = s->ne1,
                            .row_bytes = llmm__row_bytes(t->type, (uint64_t)s->ne0)};
    return LLMM_OK;
}

static llmm_status bind_all(const bind_ctx *m, const bind_spec *specs, size_t n, llmm_diag *d) {
    for (size_t i = 0; i < n; i++) {
        llmm_status st = bind(m, &specs[i], d);
        if (st) return st;
    }
    return LLMM_OK;
}

llmm_tensor llmm__tensor_rows(const llmm_tensor *t, int64_t first, int64_t n) {
    llmm_tensor v = *t;
    v.data = (const uint8_t *)t->data + (size_t)first * t->row_bytes;
    v.ne1 = n;
    return v;
}

static llmm_status check_hparams(const bind_ctx *m, llmm_diag *d) {
    const llmm_hparams *hp = m->hp;
    if (hp->n_embd == 0 || hp->n_layer == 0 || hp->n_head == 0 || hp->n_head_kv == 0 || hp->n_ff == 0 ||
        hp->head_dim == 0)
        return llmm__diag_fail(d, LLMM_ERR_BAD_FILE, "missing hyper-parameters (embedding, layers, heads, feed-forward)");
    if (hp->n_layer > MAX_LAYERS) return llmm__diag_fail(d, LLMM_ERR_BAD_FILE, "%u layers is implausible", hp->n_layer);
    if (hp->n_head % hp->n_head_kv != 0)
        return llmm__diag_fail(d, LLMM_ERR_BAD_FILE, "head count %u is not a multiple of the KV head count %u", hp->n_head,
                         hp->n_head_kv);
    if (hp->n_rot > hp->head_dim || hp->n_rot % 2 != 0)
        return llmm__diag_fail(d, LLMM_ERR_BAD_FILE, "rope dimension %u does not fit head size %u", hp->n_rot, hp->head_dim);
    if (!(hp->norm_eps > 0.f) || !(hp->rope_base > 0.f) || !(hp->rope_base_swa >= 0.f) || !(hp->attn_softcap >= 0.f) ||
        !(hp->final_softcap >= 0.f) || !isfinite(hp->rope_base) || !isfinite(hp->rope_base_swa))
        return llmm__diag_fail(d, LLMM_ERR_BAD_FILE,
                               "norm epsilon and rope bases must be positive and finite, soft-caps not negative");
    if (!(hp->rope_freq_scale > 0.f) || !isfinite(hp->rope_freq_scale))
        return llmm__diag_fail(d, LLMM_ERR_BAD_FILE, "rope scaling factor must be positive and finite");
    if (m->n_vocab == 0) return llmm__diag_fail(d, LLMM_ERR_BAD_FILE, "the model has no vocabulary");
    return LLMM_OK;
}

/* Q, K, V (and gate, up) as views when the file fuses them into one tensor. */
static llmm_status bind_fused(const bind_ctx *m, uint32_t il, llmm_layer_weights *l, llmm_diag *d) {
    const llmm_hparams *hp = m->hp;
    const uint32_t flags = m->arch->flags;
    const int64_t E = hp->n_embd, Q = (int64_t)hp->n_head * hp->head_dim, KV = (int64_t)hp->n_head_kv * hp->head_dim;
    const int64_t F = hp->n_ff;
    char name[GGUF_MAX_NAME];
    llmm_status st;
    if (flags & LLMM_ARCH_FUSED_QKV) {
        llmm_tensor qkv;
        snprintf(name, sizeof name, "blk.%u.attn_qkv.weight", il);
        if ((st = bind(m, &(bind_spec){name, E, Q + 2 * KV, BIND_MATRIX, 0, &qkv}, d))) return st;
        l->wq = llmm__tensor_rows(&qkv, 0, Q);
        l->wk = llmm__tensor_rows(&qkv, Q, KV);
        l->wv = llmm__tensor_rows(&qkv, Q + KV, KV);
    }
    if (flags & LLMM_ARCH_FUSED_GATE_UP) {
        llmm_tensor gate_up;
        snprintf(name, sizeof name, "blk.%u.ffn_up.weight", il);
        if ((st = bind(m, &(bind_spec){name, E, 2 * F, BIND_MATRIX, 0, &gate_up}, d))) return st;
        l->w_gate = llmm__tensor_rows(&gate_up, 0, F);
        l->w_up = llmm__tensor_rows(&gate_up, F, F);
    }
    return LLMM_OK;
}

/* How a layer sees positions: its attention window and its rotation (arch.h). */
static void layer_positions(const llmm_arch *a, const llmm_hparams *hp, uint32_t il, llmm_layer_weights *l) {
    const int local = hp->sliding_window && (a->swa_period == 0 || il % a->swa_period < a->swa_local);
    l->sliding_window = local ? hp->sliding_window : 0;
    l->rope_off = a->nope_period && (il + 1) % a->nope_period == 0;
    l->rope_base = hp->rope_base;
    l->rope_freq_scale = hp->rope_freq_scale;
    if (local && a->swa_rope_base > 0.f) {
        l->rope_base = hp->rope_base_swa > 0.f ? hp->rope_base_swa : a->swa_rope_base;
        l->rope_freq_scale = 1.f;
    }
}

/* Layer il's KV heads: the per-layer entry when the file has an array (model.c checked it),
 * else the model's count. */
static uint32_t layer_kv_heads(const bind_ctx *m, uint32_t il) {
    char key[128];
    snprintf(key, sizeof key, "%s.attention.head_count_kv", m->arch->name);
    const gguf_kv *kv = llmm__gguf_find_kv(m->gguf, key);
    if (!kv || kv->type != GGUF_TYPE_ARRAY) return m->hp->n_head_kv;
    return (uint32_t)llmm__gguf_array_get_i64(&kv->v.arr, il);
}

/* The tensors of a short-convolution layer (LFM2): in_proj to B, C, X, the depthwise taps,
 * out_proj; then the FFN as in every layer. */
typedef struct layer_spec {
    const char *suffix;
    int64_t ne0, ne1;
    bind_kind kind;
    llmm_tensor *dst;
} layer_spec;

/* Required tensors blk.{il}.{suffix}. */
static llmm_status bind_layer_specs(const bind_ctx *m, uint32_t il, const layer_spec *spec, size_t n, llmm_diag *d) {
    for (size_t i = 0; i < n; i++) {
        char name[GGUF_MAX_NAME];
        snprintf(name, sizeof name, "blk.%u.%s", il, spec[i].suffix);
        const bind_spec bs = {name, spec[i].ne0, spec[i].ne1, spec[i].kind, 0, spec[i].dst};
        llmm_status st = bind(m, &bs, d);
        if (st) return st;
    }
    return LLMM_OK;
}

/* The FFN of a recurrent layer: its norm (under the architecture's name) and SwiGLU. */
static llmm_status bind_ffn(const bind_ctx *m, uint32_t il, llmm_layer_weights *l, llmm_diag *d) {
    const int64_t E = m->hp->n_embd, F = m->hp->n_ff;
    const layer_spec spec[] = {
        {m->arch->ffn_norm ? m->arch->ffn_norm : "ffn_norm.weight", E, 1, BIND_VECTOR, &l->ffn_norm},
        {"ffn_gate.weight", E, F, BIND_MATRIX, &l->w_gate},
        {"ffn_up.weight", E, F, BIND_MATRIX, &l->w_up},
        {"ffn_down.weight", F, E, BIND_MATRIX, &l->w_down},
    };
    return bind_layer_specs(m, il, spec, sizeof spec / sizeof *spec, d);
}

static llmm_status bind_short_conv(const bind_ctx *m, uint32_t il, llmm_layer_weights *l, llmm_diag *d) {
    const int64_t E = m->hp->n_embd, L = m->hp->conv_kernel;
    const layer_spec spec[] = {
        {"attn_norm.weight", E, 1, BIND_VECTOR, &l->attn_norm},
        {"shortconv.in_proj.weight", E, 3 * E, BIND_MATRIX, &l->conv_in},
        {"shortconv.conv.weight", L, E, BIND_VECTOR, &l->conv_taps},
        {"shortconv.out_proj.weight", E, E, BIND_MATRIX, &l->conv_out},
    };
    llmm_status st = bind_layer_specs(m, il, spec, sizeof spec / sizeof *spec, d);
    if (!st) st = bind_ffn(m, il, l, d);
    l->kind = LLMM_LAYER_SHORT_CONV;
    return st;
}

/* The tensors of a Gated DeltaNet layer (qwen35), then its FFN. */
static llmm_status bind_delta_net(const bind_ctx *m, uint32_t il, llmm_layer_weights *l, llmm_diag *d) {
    const llmm_hparams *hp = m->hp;
    const int64_t E = hp->n_embd, V = hp->ssm_v_heads, I = hp->ssm_inner, S = hp->ssm_state;
    const int64_t C = 2 * (int64_t)hp->ssm_k_heads * S + I; /* conv_dim */
    const layer_spec spec[] = {
        {"attn_norm.weight", E, 1, BIND_VECTOR, &l->attn_norm},
        {"attn_qkv.weight", E, C, BIND_MATRIX, &l->ssm_qkv},
        {"attn_gate.weight", E, I, BIND_MATRIX, &l->ssm_z},
        {"ssm_conv1d.weight", hp->ssm_conv_kernel, C, BIND_VECTOR, &l->conv_taps},
        {"ssm_dt.bias", V, 1, BIND_VECTOR, &l->ssm_dt_bias},
        {"ssm_a", V, 1, BIND_VECTOR, &l->ssm_a},
        {"ssm_beta.weight", E, V, BIND_MATRIX, &l->ssm_beta},
        {"ssm_alpha.weight", E, V, BIND_MATRIX, &l->ssm_alpha},
        {"ssm_norm.weight", S, 1, BIND_VECTOR, &l->ssm_norm},
        {"ssm_out.weight", I, E, BIND_MATRIX, &l->ssm_out},
    };
    llmm_status st = bind_layer_specs(m, il, spec, sizeof spec / sizeof *spec, d);
    if (!st) st = bind_ffn(m, il, l, d);
    l->kind = LLMM_LAYER_DELTA_NET;
    return st;
}

/* Which kind layer il is: attention, or (LLMM_ARCH_SHORT_CONV, 0 KV heads) a short
 * convolution. Every attention layer has the model's KV heads: the cache has one layout. */
static llmm_status check_layer_kind(const bind_ctx *m, uint32_t il, llmm_layer_kind *kind, llmm_diag *d) {
    const uint32_t kv_heads = layer_kv_heads(m, il);
    if (m->arch->flags & LLMM_ARCH_DELTA_NET) {
        /* the interval and the DeltaNet sizes were checked once (check_delta_net) */
        *kind = (il + 1) % m->hp->full_attn_interval == 0 ? LLMM_LAYER_ATTENTION : LLMM_LAYER_DELTA_NET;
        return LLMM_OK;
    }
    const int conv_layer = kv_heads == 0 && (m->arch->flags & LLMM_ARCH_SHORT_CONV);
    *kind = conv_layer ? LLMM_LAYER_SHORT_CONV : LLMM_LAYER_ATTENTION;
    if (conv_layer && (m->hp->conv_kernel < 1 || m->hp->conv_kernel > LLMM_MAX_CONV_KERNEL))
        return llmm__diag_fail(d, LLMM_ERR_BAD_FILE, "short convolution of %u taps (layer %u): expected 1..%u",
                               m->hp->conv_kernel, il, LLMM_MAX_CONV_KERNEL);
    if (!conv_layer && kv_heads != m->hp->n_head_kv)
        return llmm__diag_fail(d, LLMM_ERR_BAD_FILE, "layer %u has %u KV heads, the others %u: not supported for %s", il,
                               kv_heads, m->hp->n_head_kv, m->arch->name);
    return LLMM_OK;
}

static llmm_status bind_layer(const bind_ctx *m, uint32_t il, llmm_layer_weights *l, llmm_diag *d) {
    const llmm_hparams *hp = m->hp;
    const llmm_arch *a = m->arch;
    llmm_layer_kind kind;
    llmm_status st0 = check_layer_kind(m, il, &kind, d);
    if (st0) return st0;
    if (kind == LLMM_LAYER_SHORT_CONV) return bind_short_conv(m, il, l, d);
    if (kind == LLMM_LAYER_DELTA_NET) return bind_delta_net(m, il, l, d);
    l->gated_q = (a->flags & LLMM_ARCH_GATED_Q) != 0;
    const int64_t E = hp->n_embd, Q = (int64_t)hp->n_head * hp->head_dim, KV = (int64_t)hp->n_head_kv * hp->head_dim;
    const int64_t F = hp->n_ff, HD = hp->head_dim;
    const int fused_qkv = (a->flags & LLMM_ARCH_FUSED_QKV) != 0, fused_ffn = (a->flags & LLMM_ARCH_FUSED_GATE_UP) != 0;
    const int qk_norm = (a->flags & LLMM_ARCH_QK_NORM) != 0, post = (a->flags & LLMM_ARCH_POST_NORMS) != 0;
    struct {
        const char *suffix;
        int64_t ne0, ne1;
        bind_kind kind;
        int wanted, optional;
        llmm_tensor *dst;
    } spec[] = {
        {"attn_norm.weight", E, 1, BIND_VECTOR, 1, 0, &l->attn_norm},
        {"attn_q.weight", E, (a->flags & LLMM_ARCH_GATED_Q) ? 2 * Q : Q, BIND_MATRIX, !fused_qkv, 0, &l->wq},
        {"attn_k.weight", E, KV, BIND_MATRIX, !fused_qkv, 0, &l->wk},
        {"attn_v.weight", E, KV, BIND_MATRIX, !fused_qkv, 0, &l->wv},
        {"attn_q.bias", Q, 1, BIND_VECTOR, 1, 1, &l->bq},
        {"attn_k.bias", KV, 1, BIND_VECTOR, 1, 1, &l->bk},
        {"attn_v.bias", KV, 1, BIND_VECTOR, 1, 1, &l->bv},
        {"attn_q_norm.weight", HD, 1, BIND_VECTOR, qk_norm, 0, &l->q_norm},
        {"attn_k_norm.weight", HD, 1, BIND_VECTOR, qk_norm, 0, &l->k_norm},
        {"attn_output.weight", Q, E, BIND_MATRIX, 1, 0, &l->wo},
        {a->post_attn_norm, E, 1, BIND_VECTOR, post, 0, &l->post_attn_norm},
        {a->ffn_norm ? a->ffn_norm : "ffn_norm.weight", E, 1, BIND_VECTOR, 1, 0, &l->ffn_norm},
        {"ffn_gate.weight", E, F, BIND_MATRIX, !fused_ffn, 0, &l->w_gate},
        {"ffn_up.weight", E, F, BIND_MATRIX, !fused_ffn, 0, &l->w_up},
        {"ffn_down.weight", F, E, BIND_MATRIX, 1, 0, &l->w_down},
        {a->post_ffn_norm, E, 1, BIND_VECTOR, post, 0, &l->post_ffn_norm},
    };
    for (size_t i = 0; i < sizeof spec / sizeof *spec; i++) {
        if (!spec[i].wanted) continue;
        char name[GGUF_MAX_NAME];
        snprintf(name, sizeof name, "blk.%u.%s", il, spec[i].suffix);
        bind_spec s = {name, spec[i].ne0, spec[i].ne1, spec[i].kind, spec[i].optional, spec[i].dst};
        llmm_status st = bind(m, &s, d);
        if (st) return st;
    }
    layer_positions(a, hp, il, l);
    return bind_fused(m, il, l, d);
}

int llmm__weights_tied(const llmm_weights *w) { return w->tok_embd.data == w->output.data; }

/* Appends the present ones of cands with role to out (when not NULL) from index n, adding
 * their bytes to *bytes; returns the new count. */
static size_t take_present(llmm_tensor *const *cands, size_t n_cands, uint32_t role, llmm_weight_ref *out,
                           size_t n, size_t *bytes) {
    for (size_t i = 0; i < n_cands; i++)
        if (cands[i]->data) {
            if (out) out[n] = (llmm_weight_ref){cands[i], role};
            *bytes += cands[i]->row_bytes * (size_t)cands[i]->ne1;
            n++;
        }
    return n;
}

static size_t weights_walk(llmm_weights *w, uint32_t n_layer, llmm_weight_ref *out, size_t *bytes) {
    llmm_tensor *const output[] = {&w->output};
    size_t n = take_present(output, 1, LLMM_WEIGHT_MATRIX, out, 0, bytes);
    if (!llmm__weights_tied(w)) {
        llmm_tensor *const table[] = {&w->tok_embd};
        n = take_present(table, 1, LLMM_WEIGHT_TABLE, out, n, bytes);
    }
    llmm_tensor *const globals[] = {&w->output_norm, &w->rope_freqs, &w->rope_factors_short, &w->rope_factors_long};
    n = take_present(globals, sizeof globals / sizeof *globals, LLMM_WEIGHT_VECTOR, out, n, bytes);
    for (uint32_t il = 0; il < n_layer; il++) {
        llmm_layer_weights *l = &w->layers[il];
        llmm_tensor *const mats[] = {&l->wq, &l->wk, &l->wv, &l->wo, &l->w_gate, &l->w_up, &l->w_down,
                                     &l->conv_in, &l->conv_out, &l->ssm_qkv, &l->ssm_z, &l->ssm_beta,
                                     &l->ssm_alpha, &l->ssm_out};
        llmm_tensor *const vecs[] = {&l->attn_norm, &l->bq, &l->bk, &l->bv, &l->q_norm, &l->k_norm,
                                     &l->post_attn_norm, &l->ffn_norm, &l->post_ffn_norm, &l->conv_taps,
                                     &l->ssm_dt_bias, &l->ssm_a, &l->ssm_norm};
        n = take_present(mats, sizeof mats / sizeof *mats, LLMM_WEIGHT_MATRIX, out, n, bytes);
        n = take_present(vecs, sizeof vecs / sizeof *vecs, LLMM_WEIGHT_VECTOR, out, n, bytes);
    }
    return n;
}

size_t llmm__weights_list(llmm_weights *w, uint32_t n_layer, llmm_weight_ref *out) {
    size_t bytes = 0;
    return weights_walk(w, n_layer, out, &bytes);
}

size_t llmm__weights_bytes(llmm_weights *w, uint32_t n_layer) {
    size_t bytes = 0;
    weights_walk(w, n_layer, NULL, &bytes);
    return bytes;
}

/* Gated DeltaNet sizes (qwen35): each bounded, and the derived ones consistent. */
static llmm_status check_delta_net(const llmm_hparams *hp, llmm_diag *d) {
    if (hp->full_attn_interval < 1 || hp->full_attn_interval > MAX_LAYERS)
        return llmm__diag_fail(d, LLMM_ERR_BAD_FILE, "full_attention_interval %u is not in 1..%u", hp->full_attn_interval,
                               MAX_LAYERS);
    if (hp->ssm_conv_kernel < 1 || hp->ssm_conv_kernel > LLMM_MAX_CONV_KERNEL)
        return llmm__diag_fail(d, LLMM_ERR_BAD_FILE, "ssm.conv_kernel %u is not in 1..%u", hp->ssm_conv_kernel,
                               LLMM_MAX_CONV_KERNEL);
    if (hp->ssm_state < 1 || hp->ssm_state > LLMM_MAX_SSM_HEAD || hp->ssm_k_heads < 1 || hp->ssm_k_heads > 4096 ||
        hp->ssm_v_heads < 1 || hp->ssm_v_heads > 4096)
        return llmm__diag_fail(d, LLMM_ERR_BAD_FILE,
                               "ssm.state_size %u, group_count %u, time_step_rank %u: expected 1..%u, 1..4096, 1..4096",
                               hp->ssm_state, hp->ssm_k_heads, hp->ssm_v_heads, LLMM_MAX_SSM_HEAD);
    if ((uint64_t)hp->ssm_v_heads * hp->ssm_state != hp->ssm_inner)
        return llmm__diag_fail(d, LLMM_ERR_BAD_FILE, "ssm.inner_size %u is not time_step_rank %u x state_size %u",
                               hp->ssm_inner, hp->ssm_v_heads, hp->ssm_state);
    return LLMM_OK;
}

/* Per recurrent layer and sequence, the state's floats; per row, the mixer scratch (forward.c
 * lays both out). */
static void size_mixers(const llmm_hparams *hp, llmm_weights *w) {
    const size_t E = hp->n_embd, Q = (size_t)hp->n_head * hp->head_dim;
    const size_t conv_dim = 2 * (size_t)hp->ssm_k_heads * hp->ssm_state + hp->ssm_inner;
    for (uint32_t il = 0; il < hp->n_layer; il++) {
        const llmm_layer_weights *l = &w->layers[il];
        size_t state = 0, mixer = 0;
        if (l->kind == LLMM_LAYER_SHORT_CONV) {
            state = (size_t)(hp->conv_kernel - 1) * E;
            mixer = 3 * E;
        } else if (l->kind == LLMM_LAYER_DELTA_NET) {
            state = (size_t)(hp->ssm_conv_kernel - 1) * conv_dim + (size_t)hp->ssm_v_heads * hp->ssm_state * hp->ssm_state;
            mixer = 2 * conv_dim + 2 * (size_t)hp->ssm_inner + 2 * (size_t)hp->ssm_v_heads;
        } else if (l->gated_q) {
            mixer = 3 * Q; /* queries with their gates, then the gates alone */
        }
        w->state_floats = LLMM_MAX(w->state_floats, state);
        w->mixer_floats = LLMM_MAX(w->mixer_floats, mixer);
    }
}

llmm_status llmm__weights_bind(const llmm_weights_source *src, llmm_weights **out, llmm_diag *d) {
    *out = NULL;
    const llmm_arch *arch = src->arch;
    const bind_ctx b = {src->gguf, src->hp, src->n_vocab, arch}, *m = &b;
    llmm_status st = check_hparams(m, d);
    if (!st && (arch->flags & LLMM_ARCH_DELTA_NET)) st = check_delta_net(m->hp, d);
    if (st) return st;
    llmm_weights *w = llmm__mem_calloc(src->alloc, 1, sizeof *w);
    if (!w) return llmm__diag_fail(d, LLMM_ERR_NO_MEMORY, "out of memory");
    *out = w;
    w->arch = arch;
    w->layers = llmm__mem_calloc(src->alloc, m->hp->n_layer, sizeof *w->layers);
    if (!w->layers) return llmm__diag_fail(d, LLMM_ERR_NO_MEMORY, "out of memory");
    const int64_t E = m->hp->n_embd, V = m->n_vocab, R = m->hp->n_rot / 2;
    const bind_spec globals[] = {
        {"token_embd.weight", E, V, BIND_MATRIX, 0, &w->tok_embd},
        {arch->output_norm ? arch->output_norm : "output_norm.weight", E, 1, BIND_VECTOR, 0, &w->output_norm},
        {"output.weight", E, V, BIND_MATRIX, 1, &w->output},
        {"rope_freqs.weight", R, 1, BIND_VECTOR, 1, &w->rope_freqs},
        {"rope_factors_short.weight", R, 1, BIND_VECTOR, 1, &w->rope_factors_short},
        {"rope_factors_long.weight", R, 1, BIND_VECTOR, 1, &w->rope_factors_long},
    };
    if ((st = bind_all(m, globals, sizeof globals / sizeof *globals, d))) return st;
    if (!w->output.data) w->output = w->tok_embd; /* tied embeddings */
    for (uint32_t il = 0; il < m->hp->n_layer; il++) {
        if ((st = bind_layer(m, il, &w->layers[il], d))) return st;
        if (llmm_layer_recurrent(&w->layers[il])) w->layers[il].state_index = w->n_recurrent++;
        else w->layers[il].kv_index = w->n_kv_layers++;
    }
    size_mixers(m->hp, w);
    return LLMM_OK;
}

void llmm__weights_free(llmm_weights *w, const llmm_allocator *alloc) {
    if (!w) return;
    llmm__mem_free(alloc, w->layers);
    llmm__mem_free(alloc, w);
}
