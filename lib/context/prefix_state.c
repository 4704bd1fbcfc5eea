/* The prefix cache for models with recurrent layers. A cached block holds K/V, which is enough
 * for attention layers; a recurrent layer needs the state after the prefix, which no block
 * holds. So a prefill from an empty sequence stops once at the end of its prompt's last full
 * block and stores the state there under the block's cache key (one of n_seq_max slots, the
 * least recently used replaced), and a later prompt attaches cached blocks only up to the end of
 * the longest prefix whose state is stored, starting from that state: a hit then computes
 * exactly what a cold run computes after that point. */
#include "context.h"

static float *prefix_slot(const llmm_recurrent *rec, uint32_t i) {
    return rec->states + (3 * (size_t)rec->n_seq + i) * rec->seq_floats;
}

static float *live_slot(const llmm_recurrent *rec, llmm_seq_id seq) { return rec->states + (size_t)seq * rec->seq_floats; }

static int active(const llmm_context *ctx) { return ctx->rec.states && ctx->rec.prefix_key && ctx->kv.prefix; }

static uint32_t find(const llmm_recurrent *rec, uint64_t key) {
    for (uint32_t i = 0; i < rec->n_seq; i++)
        if (rec->prefix_key[i] == key) return i;
    return UINT32_MAX;
}

uint32_t llmm__prefix_state_attach(llmm_context *ctx, llmm_seq_id seq, const llmm_token *tokens, uint32_t n) {
    if (!active(ctx) || ctx->kv.seqs[seq].len) return 0;
    llmm_kv_store *kv = &ctx->kv;
    llmm_recurrent *rec = &ctx->rec;
    const uint32_t attached = llmm__kv_prefix_attach(kv, (uint32_t)seq, tokens, n);
    const uint32_t bs = kv->cfg.block_size;
    uint32_t best = 0, slot = UINT32_MAX;
    for (uint32_t j = 1; j * bs <= attached; j++) {
        const uint32_t i = find(rec, llmm__kv_prefix_key(kv, (uint32_t)seq, tokens, j));
        if (i != UINT32_MAX) best = j * bs, slot = i;
    }
    /* a failed copy is a miss: the prompt is then computed in full */
    if (best && ctx->be->copy(ctx->be_state, live_slot(rec, seq), prefix_slot(rec, slot), rec->seq_floats * sizeof(float)))
        best = 0;
    if (best) rec->prefix_used[slot] = ++rec->prefix_clock;
    llmm__kv_truncate(kv, (uint32_t)seq, best); /* the blocks past it go back to the cache */
    return best;
}

uint32_t llmm__prefix_state_boundary(const llmm_context *ctx, llmm_seq_id seq, uint32_t from, uint32_t n) {
    const llmm_kv_store *kv = &ctx->kv;
    /* only a prompt that starts the sequence: tokens[0, n) are then its positions */
    if (!active(ctx) || kv->seqs[seq].prefix_off || kv->seqs[seq].len != from || n < 2) return 0;
    /* the last block attach could take: it leaves at least one token to compute */
    const uint32_t end = (n - 1) / kv->cfg.block_size * kv->cfg.block_size;
    return end > from ? end : 0;
}

void llmm__prefix_state_store(llmm_context *ctx, llmm_seq_id seq) {
    llmm_recurrent *rec = &ctx->rec;
    const kv_seq *held = &ctx->kv.seqs[seq];
    const uint64_t key = llmm__kv_prefix_key(&ctx->kv, (uint32_t)seq, held->tokens, held->len / ctx->kv.cfg.block_size);
    uint32_t slot = find(rec, key);
    for (uint32_t i = 0; slot == UINT32_MAX && i < rec->n_seq; i++)
        if (!rec->prefix_key[i]) slot = i;
    if (slot == UINT32_MAX) {
        slot = 0;
        for (uint32_t i = 1; i < rec->n_seq; i++)
            if (rec->prefix_used[i] < rec->prefix_used[slot]) slot = i;
    }
    /* emptied first: a failed copy leaves no slot under a key it does not hold */
    rec->prefix_key[slot] = 0;
    if (ctx->be->copy(ctx->be_state, prefix_slot(rec, slot), live_slot(rec, seq), rec->seq_floats * sizeof(float))) return;
    rec->prefix_key[slot] = key;
    rec->prefix_used[slot] = ++rec->prefix_clock;
}
