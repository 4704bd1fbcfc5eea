#include "weights.h"

#include <stdio.h>

#include "quant.h"

#define MAX_LAYERS 4096

static llmm_status bind(const llmm_model *m, const char *name, int64_t ne0, int64_t ne1, int need_dot,
                        int optional, llmm_tensor *out, llmm_diag *d) {
    const gguf_tensor *t = gguf_find_tensor(m->gguf, name);
    out->data = NULL;
    if (!t) {
        if (optional) return LLMM_OK;
        return diag_fail(d, LLMM_ERR_BAD_FILE, "tensor '%s' is missing", name);
    }
    if (t->ne[0] != ne0 || t->ne[1] != ne1 || t->ne[2] != 1 || t->ne[3] != 1)
        return diag_fail(d, LLMM_ERR_BAD_FILE, "tensor '%s' has shape [%lld, %lld, %lld, %lld], expected [%lld, %lld]",
                         name, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2], (long long)t->ne[3],
                         (long long)ne0, (long long)ne1);
    const llmm_type_traits *tt = llmm_type_get(t->type);
    if (!tt->dequant_row || (need_dot && !tt->vec_dot))
        return diag_fail(d, LLMM_ERR_UNSUPPORTED, "tensor '%s' has type %s, which this build cannot compute yet",
                         name, tt->name);
    if (!need_dot && t->type != LLMM_TYPE_F32)
        return diag_fail(d, LLMM_ERR_UNSUPPORTED, "norm tensor '%s' has type %s, expected f32", name, tt->name);
    *out = (llmm_tensor){t->data, t->type, ne0, ne1, llmm_row_bytes(t->type, (uint64_t)ne0)};
    return LLMM_OK;
}

static llmm_status check_hparams(const llmm_model *m, llmm_diag *d) {
    const llmm_hparams *hp = &m->hp;
    if (hp->n_embd == 0 || hp->n_layer == 0 || hp->n_head == 0 || hp->n_head_kv == 0 || hp->n_ff == 0 ||
        hp->head_dim == 0)
        return diag_fail(d, LLMM_ERR_BAD_FILE, "missing hyper-parameters (embedding, layers, heads, feed-forward)");
    if (hp->n_layer > MAX_LAYERS) return diag_fail(d, LLMM_ERR_BAD_FILE, "%u layers is implausible", hp->n_layer);
    if (hp->n_head % hp->n_head_kv != 0)
        return diag_fail(d, LLMM_ERR_BAD_FILE, "head count %u is not a multiple of the KV head count %u", hp->n_head,
                         hp->n_head_kv);
    if (hp->n_rot > hp->head_dim || hp->n_rot % 2 != 0)
        return diag_fail(d, LLMM_ERR_BAD_FILE, "rope dimension %u does not fit head size %u", hp->n_rot, hp->head_dim);
    if (!(hp->norm_eps > 0.f) || !(hp->rope_base > 0.f))
        return diag_fail(d, LLMM_ERR_BAD_FILE, "norm epsilon and rope base must be positive");
    if (m->vocab.n_tokens == 0) return diag_fail(d, LLMM_ERR_BAD_FILE, "the model has no vocabulary");
    return LLMM_OK;
}

static llmm_status bind_layer(const llmm_model *m, uint32_t il, llmm_layer_weights *l, llmm_diag *d) {
    const llmm_hparams *hp = &m->hp;
    int64_t E = hp->n_embd, Q = (int64_t)hp->n_head * hp->head_dim, KV = (int64_t)hp->n_head_kv * hp->head_dim;
    int64_t F = hp->n_ff;
    struct {
        const char *suffix;
        int64_t ne0, ne1;
        int need_dot;
        llmm_tensor *dst;
    } spec[] = {
        {"attn_norm", E, 1, 0, &l->attn_norm}, {"attn_q", E, Q, 1, &l->wq},     {"attn_k", E, KV, 1, &l->wk},
        {"attn_v", E, KV, 1, &l->wv},          {"attn_output", Q, E, 1, &l->wo}, {"ffn_norm", E, 1, 0, &l->ffn_norm},
        {"ffn_gate", E, F, 1, &l->w_gate},     {"ffn_up", E, F, 1, &l->w_up},   {"ffn_down", F, E, 1, &l->w_down},
    };
    for (size_t i = 0; i < sizeof spec / sizeof *spec; i++) {
        char name[GGUF_MAX_NAME];
        snprintf(name, sizeof name, "blk.%u.%s.weight", il, spec[i].suffix);
        llmm_status st = bind(m, name, spec[i].ne0, spec[i].ne1, spec[i].need_dot, 0, spec[i].dst, d);
        if (st) return st;
    }
    return LLMM_OK;
}

llmm_status weights_bind(llmm_model *m, llmm_diag *d) {
    const llmm_arch *arch = arch_find(m->architecture);
    if (!arch)
        return diag_fail(d, LLMM_ERR_UNSUPPORTED, "architecture '%s' is not supported (supported: %s)",
                         m->architecture, arch_supported_list());
    llmm_status st = check_hparams(m, d);
    if (st) return st;
    llmm_weights *w = mem_calloc(m->alloc, 1, sizeof *w);
    if (!w) return diag_fail(d, LLMM_ERR_NO_MEMORY, "out of memory");
    m->weights = w;
    w->arch = arch;
    w->layers = mem_calloc(m->alloc, m->hp.n_layer, sizeof *w->layers);
    if (!w->layers) return diag_fail(d, LLMM_ERR_NO_MEMORY, "out of memory");
    int64_t E = m->hp.n_embd, V = m->vocab.n_tokens;
    if ((st = bind(m, "token_embd.weight", E, V, 1, 0, &w->tok_embd, d)) ||
        (st = bind(m, "output_norm.weight", E, 1, 0, 0, &w->output_norm, d)) ||
        (st = bind(m, "output.weight", E, V, 1, 1, &w->output, d)))
        return st;
    if (!w->output.data) w->output = w->tok_embd; /* tied embeddings */
    for (uint32_t il = 0; il < m->hp.n_layer; il++)
        if ((st = bind_layer(m, il, &w->layers[il], d))) return st;
    return LLMM_OK;
}

void weights_free(llmm_model *m) {
    if (!m->weights) return;
    mem_free(m->alloc, m->weights->layers);
    mem_free(m->alloc, m->weights);
    m->weights = NULL;
}
