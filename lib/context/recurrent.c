/* The recurrent state of a context's sequences (context.h llmm_recurrent): a fixed-size state
 * per sequence id beside the KV pool, for models with recurrent layers (lfm2, qwen35). Unlike K/V
 * rows, which are kept per position, a state exists only for "after the last token": a fork
 * copies it, a failed step puts it back, and a truncation to an earlier position is served only
 * at the sequence's checkpoint (checkpoint.c). */
#include "context.h"

size_t llmm__recurrent_bytes(const llmm_model *m, uint32_t n_seq, int prefix_cache) {
    const llmm_weights *w = m->weights;
    if (!w || !w->n_recurrent) return 0;
    /* the factors are bounded at load (layers, widths, taps, heads) and n_seq by the params;
     * slots: live, before the step, checkpoint, and with the prefix cache a cached prefix's */
    return (prefix_cache ? 4 : 3) * (size_t)n_seq * w->n_recurrent * w->state_floats * sizeof(float);
}

/* The backend slots the model's layers need, by layer kind. */
static const char *missing_slot(const llmm_backend_ops *be, const llmm_weights *w, uint32_t n_layer) {
    for (uint32_t il = 0; il < n_layer; il++) {
        const llmm_layer_weights *l = &w->layers[il];
        if (l->kind == LLMM_LAYER_SHORT_CONV && !be->short_conv) return "short convolution (short_conv)";
        if (l->kind == LLMM_LAYER_DELTA_NET && !be->gated_delta_net) return "Gated DeltaNet (gated_delta_net)";
        if (l->gated_q && !be->split_halves) return "gated query split (split_halves)";
    }
    return NULL;
}

llmm_status llmm__recurrent_init(llmm_context *ctx, llmm_diag *d) {
    const llmm_model *m = ctx->model;
    const char *missing = missing_slot(ctx->be, m->weights, m->hp.n_layer);
    if (missing)
        return llmm__diag_fail(d, LLMM_ERR_UNSUPPORTED, "the %s backend has no %s, which %s layers need", ctx->be->name,
                               missing, m->architecture);
    if (!m->weights->n_recurrent) return LLMM_OK;
    llmm_recurrent *rec = &ctx->rec;
    rec->n_seq = ctx->params.n_seq_max;
    rec->layer_floats = m->weights->state_floats;
    rec->seq_floats = rec->layer_floats * m->weights->n_recurrent;
    rec->checkpoint_len = llmm__mem_alloc(m->alloc, rec->n_seq * sizeof *rec->checkpoint_len);
    if (!rec->checkpoint_len) return llmm__diag_fail(d, LLMM_ERR_NO_MEMORY, "out of memory for the state checkpoints");
    for (uint32_t s = 0; s < rec->n_seq; s++) rec->checkpoint_len[s] = LLMM__NO_CHECKPOINT;
    if (ctx->params.prefix_cache) {
        rec->prefix_key = llmm__mem_calloc(m->alloc, rec->n_seq, sizeof *rec->prefix_key);
        rec->prefix_used = llmm__mem_calloc(m->alloc, rec->n_seq, sizeof *rec->prefix_used);
        if (!rec->prefix_key || !rec->prefix_used)
            return llmm__diag_fail(d, LLMM_ERR_NO_MEMORY, "out of memory for the cached prefixes' states");
    }
    const size_t bytes = llmm__recurrent_bytes(m, rec->n_seq, ctx->params.prefix_cache);
    if (bytes && ctx->be->buffer_alloc(ctx->be_state, bytes, (void **)&rec->states))
        return llmm__diag_fail(d, LLMM_ERR_NO_MEMORY, "out of memory for %zu bytes of recurrent state", bytes);
    return LLMM_OK;
}

void llmm__recurrent_free(llmm_context *ctx) {
    if (ctx->rec.states) ctx->be->buffer_free(ctx->be_state, ctx->rec.states);
    ctx->rec.states = NULL;
    llmm__mem_free(ctx->model->alloc, ctx->rec.checkpoint_len);
    llmm__mem_free(ctx->model->alloc, ctx->rec.prefix_key);
    llmm__mem_free(ctx->model->alloc, ctx->rec.prefix_used);
    ctx->rec.checkpoint_len = NULL;
    ctx->rec.prefix_key = ctx->rec.prefix_used = NULL;
}

static float *seq_state(const llmm_recurrent *rec, size_t slot) { return rec->states + slot * rec->seq_floats; }

llmm_status llmm__recurrent_copy(llmm_context *ctx, llmm_seq_id src, llmm_seq_id dst) {
    const llmm_recurrent *rec = &ctx->rec;
    if (!rec->states) return LLMM_OK;
    return ctx->be->copy(ctx->be_state, seq_state(rec, (size_t)dst), seq_state(rec, (size_t)src),
                         rec->seq_floats * sizeof(float));
}

llmm_status llmm__recurrent_save(llmm_context *ctx, const llmm_seq_id *seqs, size_t n) {
    const llmm_recurrent *rec = &ctx->rec;
    for (size_t i = 0; rec->states && i < n; i++) {
        llmm_status st = ctx->be->copy(ctx->be_state, seq_state(rec, rec->n_seq + (size_t)seqs[i]),
                                       seq_state(rec, (size_t)seqs[i]), rec->seq_floats * sizeof(float));
        if (st) return st;
    }
    return LLMM_OK;
}

void llmm__recurrent_restore(llmm_context *ctx, const llmm_seq_id *seqs, size_t n) {
    const llmm_recurrent *rec = &ctx->rec;
    /* a copy within one buffer that already succeeded the other way: its status adds nothing */
    for (size_t i = 0; rec->states && i < n; i++)
        (void)ctx->be->copy(ctx->be_state, seq_state(rec, (size_t)seqs[i]), seq_state(rec, rec->n_seq + (size_t)seqs[i]),
                            rec->seq_floats * sizeof(float));
}
