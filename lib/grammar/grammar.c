/* The public grammar calls: compiling, a state's lifecycle, accepting tokens and bytes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar_mask.h"
#include "grammar_parse.h"
#include "schema/json_schema.h"
#include "model/model.h"

/* ---------------------------------------------------------------- grammar */

static void copy_error(const llmm_diag *d, char *err, size_t err_size) {
    if (err && err_size) snprintf(err, err_size, "%s", d->msg);
}

/* Expand the start state once, so that a grammar whose very start passes GSTACK_STEP_MAX is
 * refused here rather than by every state made from it. */
static llmm_status check_start(const llmm_grammar *g, llmm_diag *d) {
    gstacks gs;
    glevel start;
    llmm__gstacks_init(&gs, &g->rules, g->alloc);
    llmm__gstacks_start(&gs, &start);
    llmm_status st = gs.failed ? llmm__gstacks_failure(&gs, d, "expanding the grammar's start") : LLMM_OK;
    llmm__gstacks_free(&gs);
    return st;
}

LLMM_API llmm_status llmm_grammar_create(const llmm_model *model, const char *gbnf, size_t len, const char *root,
                                         llmm_grammar **out, char *err, size_t err_size) {
    llmm_diag d = {{0}};
    if (err && err_size) err[0] = '\0';
    if (!out || (!gbnf && len)) {
        llmm__diag_fail(&d, LLMM_ERR_INVALID_ARG, "llmm_grammar_create: NULL out or grammar text");
        copy_error(&d, err, err_size);
        return LLMM_ERR_INVALID_ARG;
    }
    *out = NULL;
    const llmm_allocator *alloc = model ? model->alloc : NULL;
    llmm_grammar *g = llmm__mem_calloc(alloc, 1, sizeof *g);
    if (!g) {
        llmm__diag_fail(&d, LLMM_ERR_NO_MEMORY, "out of memory for the grammar");
        copy_error(&d, err, err_size);
        return LLMM_ERR_NO_MEMORY;
    }
    if (alloc) {
        g->alloc_copy = *alloc;
        g->alloc = &g->alloc_copy;
    }
    llmm_status st = llmm__grammar_parse(gbnf ? gbnf : "", len, root, g->alloc, &g->rules, &d);
    if (!st) st = check_start(g, &d);
    if (!st && model) {
        st = llmm__token_trie_build(&g->trie, model, g->alloc, &d);
        g->has_vocab = st == LLMM_OK;
        g->model = model;
        g->mask_words = ((size_t)g->trie.n_vocab + 31) / 32;
        if (!st && (st = llmm__mask_cache_create(&g->cache, g->alloc)))
            llmm__diag_fail(&d, st, "out of memory for the grammar's mask cache");
    }
    if (st) {
        copy_error(&d, err, err_size);
        llmm_grammar_free(g);
        return st;
    }
    *out = g;
    return LLMM_OK;
}

LLMM_API llmm_status llmm_grammar_from_json_schema_ws(const llmm_model *model, const char *schema, size_t len,
                                                      llmm_json_whitespace whitespace, llmm_grammar **out, char *err,
                                                      size_t err_size) {
    if (!out || !schema || (whitespace != LLMM_JSON_WS_COMPACT && whitespace != LLMM_JSON_WS_FREE)) {
        if (err && err_size) snprintf(err, err_size, "llmm_grammar_from_json_schema: NULL schema or out, or bad whitespace");
        return LLMM_ERR_INVALID_ARG;
    }
    *out = NULL;
    char *gbnf = NULL;
    llmm_status st =
        llmm__json_schema_to_gbnf_ws(schema, len, whitespace == LLMM_JSON_WS_COMPACT, &gbnf, err, err_size);
    if (st) return st;
    st = llmm_grammar_create(model, gbnf, strlen(gbnf), "root", out, err, err_size);
    free(gbnf);
    return st;
}

LLMM_API llmm_status llmm_grammar_from_json_schema(const llmm_model *model, const char *schema, size_t len,
                                                   llmm_grammar **out, char *err, size_t err_size) {
    return llmm_grammar_from_json_schema_ws(model, schema, len, LLMM_JSON_WS_COMPACT, out, err, err_size);
}

int llmm__grammar_serves_model(const llmm_grammar *g, const llmm_model *model) {
    return g->has_vocab && g->model == model;
}

LLMM_API void llmm_grammar_free(llmm_grammar *grammar) {
    if (!grammar) return;
    llmm_allocator copy = grammar->alloc_copy;
    const llmm_allocator *a = grammar->alloc ? &copy : NULL;
    llmm__grammar_rules_free(&grammar->rules, a);
    llmm__token_trie_free(&grammar->trie, a);
    if (grammar->cache) llmm__mask_cache_free(grammar->cache, a);
    llmm__mem_free(a, grammar);
}

/* ---------------------------------------------------------------- state */

static void state_release(llmm_grammar_state *s) {
    const llmm_allocator *a = s->grammar->alloc;
    llmm__gstacks_free(&s->stacks);
    llmm__mem_free(a, s->levels);
    llmm__mem_free(a, s->bits);
    llmm__mem_free(a, s->masked);
    llmm__mem_free(a, s->masked_ids);
    llmm__walk_memo_free(&s->memo, a);
    llmm__mem_free(a, s->key);
    llmm__mem_free(a, s);
}

static llmm_status state_alloc(const llmm_grammar *g, llmm_grammar_state **out) {
    const llmm_allocator *a = g->alloc;
    llmm_grammar_state *s = llmm__mem_calloc(a, 1, sizeof *s);
    if (!s) return LLMM_ERR_NO_MEMORY;
    s->grammar = g;
    llmm__gstacks_init(&s->stacks, &g->rules, a);
    if (g->has_vocab) {
        s->levels = llmm__mem_calloc(a, (size_t)g->trie.max_len + 1, sizeof *s->levels);
        s->bits = llmm__mem_calloc(a, g->mask_words ? g->mask_words : 1, sizeof *s->bits);
        if (!s->levels || !s->bits) {
            state_release(s);
            return LLMM_ERR_NO_MEMORY;
        }
    }
    *out = s;
    return LLMM_OK;
}

static llmm_status state_restart(llmm_grammar_state *s) {
    llmm__gstacks_clear(&s->stacks);
    llmm__gstacks_start(&s->stacks, &s->now);
    if (s->stacks.failed) return llmm__gstacks_failure(&s->stacks, &s->error, "starting the grammar state");
    return LLMM_OK;
}

LLMM_API llmm_status llmm_grammar_state_create(const llmm_grammar *grammar, llmm_grammar_state **out) {
    if (!grammar || !out) return LLMM_ERR_INVALID_ARG;
    *out = NULL;
    llmm_grammar_state *s;
    llmm_status st = state_alloc(grammar, &s);
    if (!st && (st = state_restart(s))) state_release(s);
    if (!st) *out = s;
    return st;
}

LLMM_API llmm_status llmm_grammar_state_clone(const llmm_grammar_state *state, llmm_grammar_state **out) {
    if (!state || !out) return LLMM_ERR_INVALID_ARG;
    *out = NULL;
    llmm_grammar_state *s;
    llmm_status st = state_alloc(state->grammar, &s);
    if (st) return st;
    if (!llmm__gstacks_copy(&s->stacks, &state->stacks)) {
        state_release(s);
        return LLMM_ERR_NO_MEMORY;
    }
    s->now = state->now;
    *out = s;
    return LLMM_OK;
}

LLMM_API llmm_status llmm_grammar_state_reset(llmm_grammar_state *state) {
    if (!state) return LLMM_ERR_INVALID_ARG;
    return state_restart(state);
}

LLMM_API void llmm_grammar_state_free(llmm_grammar_state *state) {
    if (state) state_release(state);
}

LLMM_API const char *llmm_grammar_state_last_error(const llmm_grammar_state *state) {
    return state ? state->error.msg : "";
}

/* ---------------------------------------------------------------- accepting */

/* Walk n bytes from the current level; on success the state moves there. */
static llmm_status advance(llmm_grammar_state *s, const uint8_t *bytes, size_t n) {
    gstacks *gs = &s->stacks;
    glevel cur = s->now, next;
    size_t kept = gs->n_nodes; /* after the last compaction: deep stacks are not copied per byte */
    for (size_t i = 0; i < n; i++) {
        llmm__gstacks_advance_byte(gs, &cur, bytes[i], &next);
        if (gs->failed || next.n == 0) {
            llmm__gstacks_truncate(gs, &s->now);
            if (gs->failed) return llmm__gstacks_failure(gs, &s->error, "advancing the grammar");
            return llmm__diag_fail(&s->error, LLMM_ERR_INVALID_ARG, "the grammar does not allow byte %zu (0x%02X) here", i,
                             bytes[i]);
        }
        cur = next;
        /* a long text keeps only where it started and the level it has reached, so the pool
         * stays bounded; out of memory, the last compaction below reports it */
        glevel both[2] = {s->now, cur};
        if (gs->n_nodes > kept + 4 * (size_t)GSTACK_STEP_MAX && llmm__gstacks_compact(gs, both, 2)) {
            s->now = both[0];
            cur = both[1];
            kept = gs->n_nodes;
        }
    }
    if (!llmm__gstacks_compact(gs, &cur, 1)) {
        llmm__gstacks_truncate(gs, &s->now);
        return llmm__diag_fail(&s->error, LLMM_ERR_NO_MEMORY, "out of memory advancing the grammar");
    }
    s->now = cur;
    return LLMM_OK;
}

LLMM_API llmm_status llmm_grammar_state_accept_bytes(llmm_grammar_state *state, const char *bytes, size_t n) {
    if (!state || (!bytes && n)) return LLMM_ERR_INVALID_ARG;
    return advance(state, (const uint8_t *)bytes, n);
}

static llmm_status check_token(llmm_grammar_state *s, llmm_token token, const char *call) {
    if (!s->grammar->has_vocab)
        return llmm__diag_fail(&s->error, LLMM_ERR_INVALID_ARG, "%s: the grammar was compiled without a model", call);
    if (token < 0 || (uint32_t)token >= s->grammar->trie.n_vocab)
        return llmm__diag_fail(&s->error, LLMM_ERR_INVALID_ARG, "%s: token %d is out of range", call, (int)token);
    return LLMM_OK;
}

LLMM_API llmm_status llmm_grammar_state_accept_token(llmm_grammar_state *state, llmm_token token) {
    if (!state) return LLMM_ERR_INVALID_ARG;
    llmm_status st = check_token(state, token, "llmm_grammar_state_accept_token");
    if (st) return st;
    const token_trie *t = &state->grammar->trie;
    if (llmm__token_trie_is_eos(t, token)) {
        if (llmm__glevel_can_end(&state->stacks, &state->now)) return LLMM_OK;
        return llmm__diag_fail(&state->error, LLMM_ERR_INVALID_ARG, "end of generation before the grammar is complete");
    }
    uint32_t k = t->rank[token];
    if (k == UINT32_MAX)
        return llmm__diag_fail(&state->error, LLMM_ERR_INVALID_ARG, "token %d has no bytes to match", (int)token);
    double t0 = llmm__time_now_ms();
    st = advance(state, (const uint8_t *)t->bytes + t->start[k], t->length[k]);
    state->spent_ms += llmm__time_now_ms() - t0;
    return st;
}

LLMM_API llmm_status llmm_grammar_state_allows(llmm_grammar_state *state, llmm_token token, int *allowed) {
    if (!state || !allowed) return LLMM_ERR_INVALID_ARG;
    llmm_status st = check_token(state, token, "llmm_grammar_state_allows");
    if (st) return st;
    return llmm__grammar_state_allows(state, token, allowed);
}

LLMM_API llmm_status llmm_grammar_state_can_end(const llmm_grammar_state *state, int *can_end, int *must_end) {
    if (!state) return LLMM_ERR_INVALID_ARG;
    int end = llmm__glevel_can_end(&state->stacks, &state->now);
    if (can_end) *can_end = end;
    if (must_end) *must_end = end && !llmm__glevel_can_continue(&state->stacks, &state->now);
    return LLMM_OK;
}
