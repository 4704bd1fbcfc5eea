/* Memory planning of a context: parameter checks, the KV pool's size (from n_ctx_total or
 * kv_budget_bytes), and the bytes of every part, so that llmm_context_estimate and
 * llmm_context_create agree by construction. */
#include "context.h"

#define DEFAULT_CTX_CAP 4096
#define MAX_BLOCK_SIZE 1024

static int is_pow2(uint32_t x) { return x && !(x & (x - 1)); }

static llmm_status check_params(const llmm_model *m, llmm_context_params *p, llmm_diag *d) {
    if (p->n_ctx == 0) p->n_ctx = m->hp.n_ctx_train ? LLMM_MIN(m->hp.n_ctx_train, DEFAULT_CTX_CAP) : DEFAULT_CTX_CAP;
    if (p->n_seq_max == 0 || p->n_seq_max > 4096)
        return diag_fail(d, LLMM_ERR_INVALID_ARG, "n_seq_max %u not in 1..4096", p->n_seq_max);
    if (p->n_batch == 0 || p->n_batch > 65536)
        return diag_fail(d, LLMM_ERR_INVALID_ARG, "n_batch %u not in 1..65536", p->n_batch);
    if (p->n_threads < 0 || p->n_threads > 1024)
        return diag_fail(d, LLMM_ERR_INVALID_ARG, "n_threads %d not in 0..1024", p->n_threads);
    if (p->n_ctx > (1u << 24)) return diag_fail(d, LLMM_ERR_INVALID_ARG, "n_ctx %u is too large", p->n_ctx);
    if (p->kv_type != LLMM_KV_F32 && p->kv_type != LLMM_KV_F16 && p->kv_type != LLMM_KV_Q8)
        return diag_fail(d, LLMM_ERR_INVALID_ARG, "unknown KV type %d", p->kv_type);
    if (!is_pow2(p->kv_block_size) || p->kv_block_size > MAX_BLOCK_SIZE)
        return diag_fail(d, LLMM_ERR_INVALID_ARG, "kv_block_size %u is not a power of two in 1..%u", p->kv_block_size,
                         MAX_BLOCK_SIZE);
    if (p->prefix_cache != 0 && p->prefix_cache != 1)
        return diag_fail(d, LLMM_ERR_INVALID_ARG, "prefix_cache %d is not 0 or 1", p->prefix_cache);
    if ((int)p->backend < LLMM_BACKEND_AUTO || (int)p->backend > LLMM_BACKEND_CUDA)
        return diag_fail(d, LLMM_ERR_INVALID_ARG, "unknown backend %d", p->backend);
    return LLMM_OK;
}

/* Blocks in the pool: what kv_budget_bytes buys, else n_ctx_total tokens, else room for
 * every sequence to reach n_ctx (what the contiguous store of 0.1 reserved). */
static llmm_status pool_blocks(const llmm_context_params *p, kv_config *c, llmm_diag *d) {
    const size_t block = kv_block_bytes(c);
    const uint64_t per_seq = (c->n_ctx + (uint64_t)c->block_size - 1) / c->block_size;
    uint64_t n;
    if (p->kv_budget_bytes) {
        n = p->kv_budget_bytes / block;
        if (n == 0)
            return diag_fail(d, LLMM_ERR_NO_MEMORY,
                             "kv_budget_bytes %llu cannot hold one KV block: need at least %zu bytes (%u positions "
                             "x %u layers, K and V), %llu for one sequence of n_ctx %u",
                             (unsigned long long)p->kv_budget_bytes, block, c->block_size, c->n_layer,
                             (unsigned long long)(per_seq * block), c->n_ctx);
    } else if (p->n_ctx_total) {
        n = (p->n_ctx_total + (uint64_t)c->block_size - 1) / c->block_size;
    } else {
        n = per_seq * c->n_seq;
    }
    if (n >= KV_NO_BLOCK) return diag_fail(d, LLMM_ERR_INVALID_ARG, "a KV pool of %llu blocks is too large",
                                           (unsigned long long)n);
    c->n_blocks = (uint32_t)n;
    return LLMM_OK;
}

static void plan_sizes(const llmm_model *m, const llmm_context_params *p, const llmm_backend_ops *be, ctx_plan *pl) {
    const llmm_hparams *hp = &m->hp;
    const size_t q_dim = (size_t)hp->n_head * hp->head_dim, kv_dim = (size_t)hp->n_head_kv * hp->head_dim;
    const size_t n_vocab = m->vocab.n_tokens, rows = pl->shape.max_rows;
    /* x, xb, q, k, v, att, gate, up, logits: see alloc_activations */
    const size_t widths = hp->n_embd + LLMM_MAX(hp->n_embd, q_dim) + 2 * q_dim + 2 * kv_dim + 2 * (size_t)hp->n_ff +
                          n_vocab;
    pl->activations = rows * widths * sizeof(float);
    pl->step_host = rows * (sizeof(int32_t) + sizeof(llmm_seq_id) + sizeof(llmm_kv_view) + sizeof(llmm_attn_row));
    pl->logits = (size_t)LLMM_MAX(p->n_seq_max, 1u) * n_vocab * sizeof(float);
    pl->kv_host = kv_host_bytes(&pl->kv);
    pl->scratch = be && be->scratch_bytes ? be->scratch_bytes(&pl->shape, p->n_threads) : 0;
    pl->fixed = sizeof(llmm_context);
}

/* Set of the matmul weights' types: a backend sizes its operand scratch by the widest. */
static uint64_t matmul_weight_types(const llmm_model *m) {
    const llmm_weights *w = m->weights;
    uint64_t set = 1ull << (w->output.type & 63);
    for (uint32_t il = 0; il < m->hp.n_layer; il++) {
        const llmm_layer_weights *l = &w->layers[il];
        const llmm_tensor *mats[] = {&l->wq, &l->wk, &l->wv, &l->wo, &l->w_gate, &l->w_up, &l->w_down};
        for (size_t i = 0; i < sizeof mats / sizeof mats[0]; i++) set |= 1ull << (mats[i]->type & 63);
    }
    return set;
}

llmm_status ctx_plan_for(const llmm_model *m, llmm_context_params *p, const llmm_backend_ops *be, ctx_plan *pl,
                         llmm_diag *d) {
    llmm_status st = check_params(m, p, d);
    if (st) return st;
    const llmm_hparams *hp = &m->hp;
    *pl = (ctx_plan){0};
    pl->kv = (kv_config){.n_layer = hp->n_layer, .n_head_kv = hp->n_head_kv, .head_dim = hp->head_dim, .n_seq = p->n_seq_max,
                         .n_ctx = p->n_ctx, .block_size = p->kv_block_size, .type = (uint32_t)p->kv_type,
                         .prefix_cache = p->prefix_cache};
    if ((st = pool_blocks(p, &pl->kv, d))) return st;
    if (!kv_pool_bytes(&pl->kv, &pl->kv_pool)) return diag_fail(d, LLMM_ERR_INVALID_ARG, "KV pool size overflows");
    pl->shape = (llmm_step_shape){
        .max_rows = LLMM_MAX(p->n_batch, p->n_seq_max),
        .max_in = LLMM_MAX(LLMM_MAX((size_t)hp->n_embd, (size_t)hp->n_head * hp->head_dim), (size_t)hp->n_ff),
        .max_kv = p->n_ctx,
        .head_dim = hp->head_dim,
        .heads_per_kv = hp->n_head_kv ? hp->n_head / hp->n_head_kv : 1,
        .weight_types = matmul_weight_types(m),
    };
    plan_sizes(m, p, be, pl);
    return LLMM_OK;
}

size_t ctx_plan_total(const ctx_plan *pl) {
    return pl->kv_pool + pl->kv_host + pl->activations + pl->step_host + pl->logits + pl->scratch + pl->fixed;
}

LLMM_API llmm_status llmm_context_estimate(const llmm_model *model, const llmm_context_params *params,
                                           size_t *bytes) {
    if (!model || !bytes) return LLMM_ERR_INVALID_ARG;
    if (model->vocab_only || !model->weights)
        return model_fail(model, LLMM_ERR_VOCAB_ONLY, "the model was loaded without weights (vocab_only)");
    llmm_context_params p;
    llmm_context_params_default(&p, sizeof p);
    if (params && !struct_import(&p, sizeof p, params, CTX_PARAMS_V1_SIZE))
        return model_fail(model, LLMM_ERR_INVALID_ARG, "llmm_context_estimate: params->size too small");
    llmm_diag d = {{0}};
    ctx_plan plan;
    llmm_status st = ctx_plan_for(model, &p, backend_select(p.backend), &plan, &d);
    if (st) return model_fail(model, LLMM_ERR_INVALID_ARG, "llmm_context_estimate: %s", d.msg);
    *bytes = ctx_plan_total(&plan);
    return LLMM_OK;
}
