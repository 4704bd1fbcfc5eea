/* The forward pass, top to bottom as in the paper: embed, then per layer attention and
 * feed-forward blocks on the residual stream, then the final norm and the output head.
 * Architecture differences come from the weights' arch table, never from copies of this.
 * Weights come from the context's prepared table (ctx->w), never from the model's host
 * pointers, and per-row inputs reach the backend once, in the step descriptor. */
#include "forward.h"

#include <math.h>

#include "adapter_ctx.h"
#include "model/weights.h"

#define TRY(call)                                \
    do {                                         \
        llmm_status st_ = (call);                \
        if (st_ != LLMM_OK) return st_;          \
    } while (0)

static int aborted(const llmm_context *ctx) {
    return ctx->params.abort && ctx->params.abort(ctx->params.abort_user) != 0;
}

/* Rope settings for this context: LongRoPE files carry short and long factor sets, the long
 * one for contexts beyond the original training length. */
static llmm_rope_params rope_params(const llmm_context *ctx, const llmm_layer_weights *l) {
    const llmm_hparams *hp = &ctx->model->hp;
    const llmm_weights *w = &ctx->w;
    const float *factors = w->rope_freqs.data;
    if (w->rope_factors_long.data || w->rope_factors_short.data) {
        int use_long = hp->n_ctx_orig && ctx->params.n_ctx > hp->n_ctx_orig;
        factors = use_long && w->rope_factors_long.data ? w->rope_factors_long.data : w->rope_factors_short.data;
        if (!factors) factors = w->rope_factors_long.data;
    }
    return (llmm_rope_params){hp->n_rot, l->rope_base, l->rope_freq_scale, hp->rope_attn_factor, w->arch->rope,
                              factors};
}

/* out[i] = w[i] x for weights sharing the input x: one backend call where it takes several. */
static llmm_status matmuls(llmm_context *ctx, const llmm_tensor *const *w, size_t n_w, const float *x, size_t n,
                           float *const *out) {
    const llmm_backend_ops *be = ctx->be;
    if (be->matmul_multi) return be->matmul_multi(ctx->be_state, w, n_w, x, n, out);
    for (size_t i = 0; i < n_w; i++) TRY(be->matmul(ctx->be_state, w[i], x, n, out[i]));
    return LLMM_OK;
}

/* Q, K, V of every row: projections, optional biases and per-head norms, then RoPE. */
static llmm_status qkv_projections(llmm_context *ctx, const llmm_layer_weights *l, uint32_t il, size_t n) {
    const llmm_backend_ops *be = ctx->be;
    void *s = ctx->be_state;
    const llmm_hparams *hp = &ctx->model->hp;
    const llmm_activations *a = &ctx->act;
    const size_t q_dim = (size_t)hp->n_head * hp->head_dim, kv_dim = (size_t)hp->n_head_kv * hp->head_dim;

    /* q (n, n_head * head_dim), k and v (n, kv_dim); gated queries come with their gates, head
     * by head, in mix (n, 2 * q_dim) and are split into q and the gates (mix + max_rows * 2 * q_dim) */
    const llmm_tensor *const w_qkv[3] = {&l->wq, &l->wk, &l->wv};
    float *const qkv[3] = {l->gated_q ? a->mix : a->q, a->k, a->v};
    TRY(matmuls(ctx, w_qkv, 3, a->xb, n, qkv));
    if (l->gated_q)
        TRY(be->split_halves(s, a->mix, a->q, a->mix + ctx->max_rows * 2 * q_dim, n * hp->n_head, hp->head_dim));
    const llmm__lora_out lora_qkv[3] = {{llmm__lora_slot(il, LLMM__LORA_Q), a->q, q_dim},
                                        {llmm__lora_slot(il, LLMM__LORA_K), a->k, kv_dim},
                                        {llmm__lora_slot(il, LLMM__LORA_V), a->v, kv_dim}};
    TRY(llmm__lora_apply_outs(ctx, lora_qkv, 3, a->xb, hp->n_embd, 0, n));
    if (l->bq.data) TRY(be->add_rows(s, a->q, l->bq.data, n, q_dim));
    if (l->bk.data) TRY(be->add_rows(s, a->k, l->bk.data, n, kv_dim));
    if (l->bv.data) TRY(be->add_rows(s, a->v, l->bv.data, n, kv_dim));
    if (l->q_norm.data) TRY(be->rms_norm(s, a->q, l->q_norm.data, a->q, n * hp->n_head, hp->head_dim, hp->norm_eps));
    if (l->k_norm.data) TRY(be->rms_norm(s, a->k, l->k_norm.data, a->k, n * hp->n_head_kv, hp->head_dim, hp->norm_eps));
    if (l->rope_off) return LLMM_OK;
    const llmm_rope_params rp = rope_params(ctx, l);
    TRY(be->rope(s, a->q, hp->n_head, hp->head_dim, &rp));
    return be->rope(s, a->k, hp->n_head_kv, hp->head_dim, &rp);
}

/* x += Wo · attention(rope(Wq·norm(x)), rope(Wk·norm(x)), Wv·norm(x)) for every row */
static llmm_status attention_block(llmm_context *ctx, const llmm_layer_weights *l, uint32_t il, size_t n) {
    const llmm_backend_ops *be = ctx->be;
    void *s = ctx->be_state;
    const llmm_hparams *hp = &ctx->model->hp;
    const llmm_activations *a = &ctx->act;

    TRY(be->rms_norm(s, a->x, l->attn_norm.data, a->xb, n, hp->n_embd, hp->norm_eps));
    TRY(qkv_projections(ctx, l, il, n));
    TRY(be->kv_write(s, l->kv_index, a->k, a->v));
    const llmm_attn_batch batch = {
        .q = a->q, .out = a->att, .n_rows = n,
        .n_head = hp->n_head, .n_head_kv = hp->n_head_kv, .head_dim = hp->head_dim,
        .window = l->sliding_window, .scale = 1.0f / sqrtf((float)hp->head_dim), .softcap = hp->attn_softcap,
    };
    TRY(be->attention(s, l->kv_index, &batch));
    const size_t q_dim = (size_t)hp->n_head * hp->head_dim;
    if (l->gated_q) /* att *= sigmoid(gate), the gates where qkv_projections split them to */
        TRY(be->glu(s, a->mix + ctx->max_rows * 2 * q_dim, a->att, n * q_dim, LLMM_ACT_SIGMOID));
    const float *att = l->gated_q ? a->mix + ctx->max_rows * 2 * q_dim : a->att;
    TRY(be->matmul(s, &l->wo, att, n, a->xb));     /* (n, n_embd) */
    TRY(llmm__lora_apply(ctx, llmm__lora_slot(il, LLMM__LORA_O), att, q_dim, a->xb, hp->n_embd, 0, n));
    if (l->post_attn_norm.data)
        TRY(be->rms_norm(s, a->xb, l->post_attn_norm.data, a->xb, n, hp->n_embd, hp->norm_eps));
    return be->add(s, a->x, a->xb, n * hp->n_embd);
}

/* x += W_down · (act(W_gate·norm(x)) * W_up·norm(x)) */
static llmm_status ffn_block(llmm_context *ctx, const llmm_layer_weights *l, uint32_t il, size_t n) {
    const llmm_backend_ops *be = ctx->be;
    void *s = ctx->be_state;
    const llmm_hparams *hp = &ctx->model->hp;
    const llmm_activations *a = &ctx->act;

    TRY(be->rms_norm(s, a->x, l->ffn_norm.data, a->xb, n, hp->n_embd, hp->norm_eps));
    const llmm_tensor *const w_gate_up[2] = {&l->w_gate, &l->w_up};
    float *const gate_up[2] = {a->gate, a->up}; /* (n, n_ff) each */
    TRY(matmuls(ctx, w_gate_up, 2, a->xb, n, gate_up));
    const llmm__lora_out lora_gate_up[2] = {{llmm__lora_slot(il, LLMM__LORA_GATE), a->gate, hp->n_ff},
                                            {llmm__lora_slot(il, LLMM__LORA_UP), a->up, hp->n_ff}};
    TRY(llmm__lora_apply_outs(ctx, lora_gate_up, 2, a->xb, hp->n_embd, 0, n));
    TRY(be->glu(s, a->gate, a->up, n * hp->n_ff, ctx->w.arch->act));
    TRY(be->matmul(s, &l->w_down, a->gate, n, a->xb)); /* (n, n_embd) */
    TRY(llmm__lora_apply(ctx, llmm__lora_slot(il, LLMM__LORA_DOWN), a->gate, hp->n_ff, a->xb, hp->n_embd, 0, n));
    if (l->post_ffn_norm.data)
        TRY(be->rms_norm(s, a->xb, l->post_ffn_norm.data, a->xb, n, hp->n_embd, hp->norm_eps));
    return be->add(s, a->x, a->xb, n * hp->n_embd);
}

/* x += W_out · (C ⊙ conv(B ⊙ X)), [B; C; X] = W_in · norm(x): LFM2's gated short convolution,
 * its history in the sequences' recurrent state */
static llmm_status short_conv_block(llmm_context *ctx, const llmm_layer_weights *l, size_t n) {
    const llmm_backend_ops *be = ctx->be;
    void *s = ctx->be_state;
    const llmm_hparams *hp = &ctx->model->hp;
    const llmm_activations *a = &ctx->act;

    TRY(be->rms_norm(s, a->x, l->attn_norm.data, a->xb, n, hp->n_embd, hp->norm_eps));
    TRY(be->matmul(s, &l->conv_in, a->xb, n, a->mix)); /* (n, 3 * n_embd) */
    const llmm_conv_batch batch = {
        .bcx = a->mix, .out = a->xb, .taps = l->conv_taps.data,
        .states = ctx->rec.states + (size_t)l->state_index * ctx->rec.layer_floats,
        .seq_stride = ctx->rec.seq_floats, .n_rows = n, .dim = hp->n_embd, .kernel = hp->conv_kernel,
    };
    TRY(be->short_conv(s, &batch));                      /* xb (n, n_embd) */
    TRY(be->matmul(s, &l->conv_out, a->xb, n, a->mix)); /* (n, n_embd) */
    return be->add(s, a->x, a->mix, n * hp->n_embd);
}

/* x += W_out · gated_delta_net(W_qkv·h, W_z·h, W_beta·h, W_alpha·h), h = norm(x): qwen35's
 * linear attention, its convolution history and state matrices in the sequences' recurrent
 * state. mix holds, max_rows rows each: qkv, the backend's work (conv_dim), z, out (inner),
 * beta, alpha (v_heads). */
static llmm_status delta_net_block(llmm_context *ctx, const llmm_layer_weights *l, size_t n) {
    const llmm_backend_ops *be = ctx->be;
    void *s = ctx->be_state;
    const llmm_hparams *hp = &ctx->model->hp;
    const llmm_activations *a = &ctx->act;
    const size_t R = ctx->max_rows, conv_dim = 2 * (size_t)hp->ssm_k_heads * hp->ssm_state + hp->ssm_inner;
    float *qkv = a->mix, *work = qkv + R * conv_dim, *z = work + R * conv_dim, *out = z + R * hp->ssm_inner;
    float *beta = out + R * hp->ssm_inner, *alpha = beta + R * hp->ssm_v_heads;

    TRY(be->rms_norm(s, a->x, l->attn_norm.data, a->xb, n, hp->n_embd, hp->norm_eps));
    const llmm_tensor *const w_in[4] = {&l->ssm_qkv, &l->ssm_z, &l->ssm_beta, &l->ssm_alpha};
    float *const in[4] = {qkv, z, beta, alpha};
    TRY(matmuls(ctx, w_in, 4, a->xb, n, in));
    const llmm_delta_batch batch = {
        .qkv = qkv, .work = work, .z = z, .beta_raw = beta, .alpha_raw = alpha, .taps = l->conv_taps.data,
        .dt_bias = l->ssm_dt_bias.data, .a = l->ssm_a.data, .norm = l->ssm_norm.data, .out = out,
        .states = ctx->rec.states + (size_t)l->state_index * ctx->rec.layer_floats,
        .seq_stride = ctx->rec.seq_floats, .n_rows = n, .n_k_heads = hp->ssm_k_heads, .n_v_heads = hp->ssm_v_heads,
        .head_dim = hp->ssm_state, .kernel = hp->ssm_conv_kernel, .eps = hp->norm_eps,
    };
    TRY(be->gated_delta_net(s, &batch));
    TRY(be->matmul(s, &l->ssm_out, out, n, a->xb)); /* (n, n_embd) */
    return be->add(s, a->x, a->xb, n * hp->n_embd);
}

/* The step's sequences: consecutive rows of one sequence share its entry (a prompt's rows). */
static llmm_step describe_step(llmm_context *ctx, llmm_step_kind kind, const llmm_token *tokens,
                               const llmm_seq_id *seqs, const int32_t *pos, size_t n) {
    uint32_t n_seqs = 0;
    for (size_t r = 0; r < n; r++) {
        if (r == 0 || seqs[r] != seqs[r - 1]) {
            const kv_seq *sq = &ctx->kv.seqs[seqs[r]];
            ctx->step_seq_ids[n_seqs] = seqs[r];
            ctx->step_tables[n_seqs] = sq->blocks;
            ctx->step_n_blocks[n_seqs] = sq->n_blocks;
            n_seqs++;
        }
        ctx->step_row_seq[r] = n_seqs - 1;
    }
    ctx->kv_layout = llmm__kv_layout(&ctx->kv);
    return (llmm_step){.kind = kind, .n_rows = n, .tokens = tokens, .pos = pos, .row_seq = ctx->step_row_seq,
                       .n_seqs = n_seqs, .seq_ids = ctx->step_seq_ids, .block_tables = ctx->step_tables,
                       .n_blocks = ctx->step_n_blocks, .kv = &ctx->kv_layout, .warmup = ctx->warming};
}

/* Everything between step_begin and step_end. */
static llmm_status run_step(llmm_context *ctx, size_t n, size_t first_logit_row) {
    const llmm_backend_ops *be = ctx->be;
    void *s = ctx->be_state;
    const llmm_weights *w = &ctx->w;
    const llmm_hparams *hp = &ctx->model->hp;
    const llmm_activations *a = &ctx->act;

    TRY(be->embed(s, &w->tok_embd, a->x)); /* (n, n_embd) */
    TRY(llmm__lora_apply_embd(ctx, a->x, n));
    if (w->arch->flags & LLMM_ARCH_EMBED_SCALE) TRY(be->scale(s, a->x, n * hp->n_embd, sqrtf((float)hp->n_embd)));
    for (uint32_t il = 0; il < hp->n_layer; il++) {
        if (aborted(ctx)) return LLMM_ERR_ABORTED;
        const llmm_layer_weights *l = &w->layers[il];
        if (l->kind == LLMM_LAYER_SHORT_CONV) TRY(short_conv_block(ctx, l, n));
        else if (l->kind == LLMM_LAYER_DELTA_NET) TRY(delta_net_block(ctx, l, n));
        else TRY(attention_block(ctx, l, il, n));
        TRY(ffn_block(ctx, &w->layers[il], il, n));
    }
    if (first_logit_row < n) {
        const size_t m = n - first_logit_row;
        TRY(be->rms_norm(s, a->x + first_logit_row * hp->n_embd, w->output_norm.data, a->xb, m, hp->n_embd,
                         hp->norm_eps));
        TRY(be->matmul(s, &w->output, a->xb, m, a->logits)); /* (m, n_vocab) */
        TRY(llmm__lora_apply(ctx, llmm__lora_slot(hp->n_layer, 0) + LLMM__LORA_OUTPUT, a->xb, hp->n_embd, a->logits,
                             ctx->model->vocab.n_tokens, first_logit_row, n));
        if (hp->final_softcap > 0.f)
            TRY(be->softcap(s, a->logits, m * (size_t)ctx->model->vocab.n_tokens, hp->final_softcap));
    }
    return LLMM_OK;
}

/* step_end runs after every step_begin that succeeded, whatever the step's outcome: a GPU
 * backend capturing the step must end its capture. */
llmm_status llmm__forward_step(llmm_context *ctx, llmm_step_kind kind, const llmm_token *tokens, const llmm_seq_id *seqs,
                         const int32_t *pos, size_t n, size_t first_logit_row) {
    llmm_step step = describe_step(ctx, kind, tokens, seqs, pos, n);
    llmm__lora_plan(ctx, seqs, n, &step);
    TRY(ctx->be->step_begin(ctx->be_state, &step));
    const llmm_status st = run_step(ctx, n, first_logit_row);
    const llmm_status end = ctx->be->step_end(ctx->be_state);
    return st != LLMM_OK ? st : end;
}
