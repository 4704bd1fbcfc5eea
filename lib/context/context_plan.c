/* Memory planning of a context: parameter checks, the KV pool's size (from n_ctx_total or
 * kv_budget_bytes), and the bytes of every part and the side (host or device) it lives on, so
 * that the estimates and llmm_context_create agree by construction. */
#include "context.h"

#include "backend/select.h"

#define DEFAULT_CTX_CAP 4096
#define MAX_BLOCK_SIZE 1024

static int is_pow2(uint32_t x) { return x && !(x & (x - 1)); }

static llmm_status check_params(const llmm_model *m, llmm_context_params *p, llmm_diag *d) {
    if (p->n_ctx == 0) p->n_ctx = m->hp.n_ctx_train ? LLMM_MIN(m->hp.n_ctx_train, DEFAULT_CTX_CAP) : DEFAULT_CTX_CAP;
    if (p->n_seq_max == 0 || p->n_seq_max > 4096)
        return llmm__diag_fail(d, LLMM_ERR_INVALID_ARG, "n_seq_max %u not in 1..4096", p->n_seq_max);
    if (p->n_batch == 0 || p->n_batch > 65536)
        return llmm__diag_fail(d, LLMM_ERR_INVALID_ARG, "n_batch %u not in 1..65536", p->n_batch);
    if (p->n_threads < 0 || p->n_threads > 1024)
        return llmm__diag_fail(d, LLMM_ERR_INVALID_ARG, "n_threads %d not in 0..1024", p->n_threads);
    if (p->n_ctx > (1u << 24)) return llmm__diag_fail(d, LLMM_ERR_INVALID_ARG, "n_ctx %u is too large", p->n_ctx);
    if (p->kv_type != LLMM_KV_F32 && p->kv_type != LLMM_KV_F16 && p->kv_type != LLMM_KV_Q8)
        return llmm__diag_fail(d, LLMM_ERR_INVALID_ARG, "unknown KV type %d", p->kv_type);
    if (!is_pow2(p->kv_block_size) || p->kv_block_size > MAX_BLOCK_SIZE)
        return llmm__diag_fail(d, LLMM_ERR_INVALID_ARG, "kv_block_size %u is not a power of two in 1..%u", p->kv_block_size,
                         MAX_BLOCK_SIZE);
    if (p->prefix_cache != 0 && p->prefix_cache != 1)
        return llmm__diag_fail(d, LLMM_ERR_INVALID_ARG, "prefix_cache %d is not 0 or 1", p->prefix_cache);
    if ((int)p->backend < LLMM_BACKEND_AUTO || (int)p->backend >= LLMM_BACKEND_KINDS)
        return llmm__diag_fail(d, LLMM_ERR_INVALID_ARG, "unknown backend %d", p->backend);
    if (p->device < 0 || p->device > 1023)
        return llmm__diag_fail(d, LLMM_ERR_INVALID_ARG, "device %d not in 0..1023", p->device);
    /* logits rows one step computes: a decode of every sequence at least, a step's rows at most */
    const uint32_t max_rows = LLMM_MAX(p->n_batch, p->n_seq_max);
    /* by default a verify step of every sequence with the speculator's default 8 guesses, or one
     * sequence with the most guesses a round may hold */
    if (p->n_outputs_max == 0) p->n_outputs_max = LLMM_MAX(p->n_seq_max * (1u + 8u), 1u + LLMM_SPEC_MAX_TOKENS);
    p->n_outputs_max = LLMM_MIN(LLMM_MAX(p->n_outputs_max, p->n_seq_max), max_rows);
    return LLMM_OK;
}

/* Blocks in the pool: what kv_budget_bytes buys, else n_ctx_total tokens, else room for
 * every sequence to reach n_ctx (what the contiguous store of 0.1 reserved). */
static llmm_status pool_blocks(const llmm_context_params *p, kv_config *c, llmm_diag *d) {
    const size_t block = llmm__kv_block_bytes(c);
    const uint64_t per_seq = (c->n_ctx + (uint64_t)c->block_size - 1) / c->block_size;
    uint64_t n;
    if (p->kv_budget_bytes) {
        n = p->kv_budget_bytes / block;
        if (n == 0)
            return llmm__diag_fail(d, LLMM_ERR_NO_MEMORY,
                             "kv_budget_bytes %llu cannot hold one KV block: need at least %zu bytes (%u positions "
                             "x %u layers, K and V), %llu for one sequence of n_ctx %u",
                             (unsigned long long)p->kv_budget_bytes, block, c->block_size, c->n_layer,
                             (unsigned long long)(per_seq * block), c->n_ctx);
    } else if (p->n_ctx_total) {
        n = (p->n_ctx_total + (uint64_t)c->block_size - 1) / c->block_size;
    } else {
        n = per_seq * c->n_seq;
    }
    if (n >= KV_NO_BLOCK) return llmm__diag_fail(d, LLMM_ERR_INVALID_ARG, "a KV pool of %llu blocks is too large",
                                           (unsigned long long)n);
    c->n_blocks = (uint32_t)n;
    return LLMM_OK;
}

static void plan_sizes(const llmm_model *m, const llmm_context_params *p, const llmm_backend_ops *be, ctx_plan *pl) {
    const llmm_hparams *hp = &m->hp;
    const size_t q_dim = (size_t)hp->n_head * hp->head_dim, kv_dim = (size_t)hp->n_head_kv * hp->head_dim;
    const size_t n_vocab = m->vocab.n_tokens, rows = pl->shape.max_rows;
    /* x, xb, q, k, v, att, gate, up and act.mix per row, and n_outputs_max rows of logits: see
     * alloc_activations */
    const size_t widths = hp->n_embd + LLMM_MAX(hp->n_embd, q_dim) + 2 * q_dim + 2 * kv_dim + 2 * (size_t)hp->n_ff +
                          m->weights->mixer_floats;
    pl->activations = (rows * widths + (size_t)p->n_outputs_max * n_vocab) * sizeof(float);
    /* pos, row_seq, the step descriptor's arrays and llmm_decode_sample's (context.h) */
    pl->step_host = rows * (2 * sizeof(int32_t) + 2 * sizeof(llmm_seq_id) + 2 * sizeof(uint32_t) + sizeof(uint32_t *) +
                           sizeof(llmm_sample_request) + 4 * sizeof(uint64_t));
    pl->logits = (size_t)LLMM_MAX(p->n_seq_max, 1u) * n_vocab * sizeof(float);
    pl->kv_host = llmm__kv_host_bytes(&pl->kv);
    pl->scratch = be && be->scratch_bytes ? be->scratch_bytes(&pl->shape, p->n_threads) : 0;
    /* the context struct, and its prepared weights' table: the layers' structs and the list */
    pl->fixed = sizeof(llmm_context) + hp->n_layer * sizeof(llmm_layer_weights) +
                (pl->shape.n_weights + 1) * sizeof(llmm_weight_ref);
    /* a backend computing from its own memory holds its copy of the weights, as stored */
    const int on_device = be && (be->flags & LLMM_BACKEND_DEVICE_MEMORY);
    pl->weights = on_device ? llmm__weights_bytes(m->weights, hp->n_layer) : 0;
    pl->recurrent = llmm__recurrent_bytes(m, p->n_seq_max, p->prefix_cache);
    pl->device = on_device ? pl->kv_pool + pl->activations + pl->scratch + pl->weights + pl->recurrent : 0;
    pl->host = llmm__ctx_plan_total(pl) - pl->device;
}

/* Set of the matmul weights' types: a backend sizes its operand scratch by the widest. */
static uint64_t matmul_weight_types(const llmm_model *m) {
    const llmm_weights *w = m->weights;
    uint64_t set = 1ull << (w->output.type & 63);
    for (uint32_t il = 0; il < m->hp.n_layer; il++) {
        const llmm_layer_weights *l = &w->layers[il];
        const llmm_tensor *mats[] = {&l->wq, &l->wk, &l->wv, &l->wo, &l->w_gate, &l->w_up, &l->w_down,
                                     &l->conv_in, &l->conv_out, &l->ssm_qkv, &l->ssm_z, &l->ssm_beta,
                                     &l->ssm_alpha, &l->ssm_out};
        for (size_t i = 0; i < sizeof mats / sizeof mats[0]; i++) set |= 1ull << (mats[i]->type & 63);
    }
    return set;
}

llmm_status llmm__ctx_plan_for(const llmm_model *m, llmm_context_params *p, const llmm_backend_ops *be, ctx_plan *pl,
                         llmm_diag *d) {
    llmm_status st = check_params(m, p, d);
    if (st) return st;
    const llmm_hparams *hp = &m->hp;
    *pl = (ctx_plan){0};
    pl->kv = (kv_config){.n_layer = m->weights->n_kv_layers, .n_head_kv = hp->n_head_kv, .head_dim = hp->head_dim, .n_seq = p->n_seq_max,
                         .n_ctx = p->n_ctx, .block_size = p->kv_block_size, .type = (uint32_t)p->kv_type,
                         .prefix_cache = p->prefix_cache};
    if ((st = pool_blocks(p, &pl->kv, d))) return st;
    if (!llmm__kv_pool_bytes(&pl->kv, &pl->kv_pool)) return llmm__diag_fail(d, LLMM_ERR_INVALID_ARG, "KV pool size overflows");
    pl->shape = (llmm_step_shape){
        .max_rows = LLMM_MAX(p->n_batch, p->n_seq_max),
        .max_in = LLMM_MAX(LLMM_MAX((size_t)hp->n_embd, (size_t)hp->n_head * hp->head_dim),
                           LLMM_MAX((size_t)hp->n_ff, (size_t)hp->ssm_inner)),
        .max_kv = p->n_ctx,
        .head_dim = hp->head_dim,
        .heads_per_kv = hp->n_head_kv ? hp->n_head / hp->n_head_kv : 1,
        .n_head = hp->n_head,
        .weight_types = matmul_weight_types(m),
        .n_weights = llmm__weights_list(m->weights, hp->n_layer, NULL),
    };
    plan_sizes(m, p, be, pl);
    return LLMM_OK;
}

size_t llmm__ctx_plan_total(const ctx_plan *pl) {
    return pl->kv_pool + pl->kv_host + pl->activations + pl->step_host + pl->logits + pl->scratch + pl->fixed +
           pl->weights + pl->recurrent;
}

/* The plan llmm_context_create would make from these params, on the backend it would pick
 * (a module loaded for its table and unloaded again). Without a backend the plan has no
 * backend scratch, and unavailable (if not NULL) gets the reason; else it is left empty. */
static llmm_status estimate_plan(const llmm_model *model, const llmm_context_params *params, const char *fn,
                                 llmm_diag *unavailable, ctx_plan *plan) {
    if (model->vocab_only || !model->weights)
        return llmm__model_fail(model, LLMM_ERR_VOCAB_ONLY, "the model was loaded without weights (vocab_only)");
    llmm_context_params p;
    llmm_context_params_default(&p, sizeof p);
    if (params && !llmm__struct_import(&p, sizeof p, params, CTX_PARAMS_V1_SIZE))
        return llmm__model_fail(model, LLMM_ERR_INVALID_ARG, "%s: params->size too small", fn);
    backend_ref be;
    llmm_diag why = {{0}};
    /* silent: the INFO line of an AUTO fallback belongs to the context that falls back */
    llmm__backend_acquire(p.backend, NULL, &be, &why);
    llmm_diag d = {{0}};
    const llmm_status st = llmm__ctx_plan_for(model, &p, be.ops, plan, &d);
    if (unavailable) *unavailable = be.ops ? (llmm_diag){{0}} : why;
    llmm__backend_release(&be);
    if (st) return llmm__model_fail(model, LLMM_ERR_INVALID_ARG, "%s: %s", fn, d.msg);
    return LLMM_OK;
}

LLMM_API llmm_status llmm_context_estimate(const llmm_model *model, const llmm_context_params *params,
                                           size_t *bytes) {
    if (!model || !bytes) return LLMM_ERR_INVALID_ARG;
    ctx_plan plan;
    llmm_status st = estimate_plan(model, params, "llmm_context_estimate", NULL, &plan);
    if (st) return st;
    *bytes = llmm__ctx_plan_total(&plan);
    return LLMM_OK;
}

LLMM_API llmm_status llmm_context_estimate_memory(const llmm_model *model, const llmm_context_params *params,
                                                  llmm_context_memory *out) {
    if (!model) return LLMM_ERR_INVALID_ARG;
    /* the first version ends with other_host_bytes; later fields go after it */
    const size_t v1_size = offsetof(llmm_context_memory, other_host_bytes) + sizeof out->other_host_bytes;
    if (!out || out->size < v1_size)
        return llmm__model_fail(model, LLMM_ERR_INVALID_ARG,
                          "llmm_context_estimate_memory: NULL out or out->size too small");
    ctx_plan plan;
    llmm_diag unavailable;
    llmm_status st = estimate_plan(model, params, "llmm_context_estimate_memory", &unavailable, &plan);
    if (st) return st;
    /* which side a part is on is the backend's to say: without it there is no answer */
    if (unavailable.msg[0])
        return llmm__model_fail(model, LLMM_ERR_BACKEND, "llmm_context_estimate_memory: %s", unavailable.msg);
    llmm_context_memory mem = {
        .size = sizeof mem,
        .host_bytes = plan.host,
        .device_bytes = plan.device,
        .kv_pool_bytes = plan.kv_pool + plan.recurrent,
        .weights_bytes = plan.weights,
        .activations_bytes = plan.activations,
        .scratch_bytes = plan.scratch,
        .other_host_bytes = plan.kv_host + plan.step_host + plan.logits + plan.fixed,
    };
    llmm__struct_export(out, &mem, sizeof mem, v1_size);
    return LLMM_OK;
}
