/* llmm_generate: the convenience loop over tokenize, prefill, sample, decode and streaming. */
#include <stddef.h>
#include <string.h>

#include "context/context.h"
#include "grammar/grammar_state.h"
#include "sampling/sampler.h"
#include "speculative.h"
#include "text_stream.h"

/* What callers built before speculative decoding pass: the fields up to out_capacity, and the
 * stats up to stop_reason. */
#define GENERATE_PARAMS_V1_SIZE offsetof(llmm_generate_params, spec_draft_model)
#define GENERATE_STATS_V1_SIZE offsetof(llmm_generate_stats, spec_proposed)

typedef struct gen_run {
    llmm_context *ctx;
    llmm_generate_params p;
    llmm_generate_stats s;
    llmm_sampler *sampler;
    text_stream stream;
    int stream_ready;
    llmm_token next;  /* sampled with the last decode (llmm_decode_sample), when have_next */
    int have_next;
    llmm_speculator *spec; /* speculative decoding, or NULL */
    llmm_token queued[1 + LLMM_SPEC_MAX_TOKENS]; /* chosen and accepted by the last round, not yet streamed */
    size_t n_queued, next_queued;
    size_t n_chosen;  /* tokens chosen so far, streamed or not */
    llmm_grammar *own_grammar;  /* compiled from params grammar_text */
    llmm_grammar_state *grammar; /* the sequence's position in the grammar, or NULL */
    const llmm_grammar *lazy;    /* with grammar_trigger: the grammar, until the trigger starts it */
    char *recent;                /* lazy: the output's last bytes, where the trigger is looked for */
    size_t n_recent, recent_cap;
    llmm_token *prompt;
    char *piece;
    size_t piece_cap;
    double t_start;
    double t_last_token;         /* when the last streamed token was chosen */
    llmm_latency_histogram inter_token; /* this call's gaps between streamed tokens */
    llmm_status tool_feed; /* the tool parser's first failure to take bytes */
} gen_run;

/* Between the text stream and the app's on_bytes: the tool parser sees what the app sees. */
static int stream_out(void *user, const char *bytes, size_t n, int complete_utf8) {
    gen_run *g = user;
    if (g->p.tool_parser && !g->tool_feed) g->tool_feed = llmm_chat_parser_feed(g->p.tool_parser, bytes, n);
    if (g->tool_feed) return 1;
    return g->p.on_bytes ? g->p.on_bytes(g->p.user, bytes, n, complete_utf8) : 0;
}

/* The calls the tool parser holds once the output has ended. */
static llmm_status count_tool_calls(gen_run *g) {
    if (g->tool_feed)
        return llmm__ctx_fail(g->ctx, g->tool_feed, "llmm_generate: tool_parser: %s",
                              llmm_chat_parser_last_error(g->p.tool_parser));
    llmm_chat_parse_result r = {.size = sizeof r};
    llmm_status st = llmm_chat_parser_result(g->p.tool_parser, 1, &r);
    if (st)
        return llmm__ctx_fail(g->ctx, st, "llmm_generate: tool_parser: %s",
                              llmm_chat_parser_last_error(g->p.tool_parser));
    for (size_t i = 0; i < r.n_calls; i++) g->s.n_tool_calls += r.calls[i].complete != 0;
    g->s.tool_malformed = r.malformed;
    return LLMM_OK;
}

static llmm_status tokenize_prompt(gen_run *g, const char *text) {
    const llmm_model *m = g->ctx->model;
    size_t n = 0, len = strlen(text);
    llmm_status st = llmm_tokenize(m, text, len, g->p.tokenize_flags, NULL, 0, &n);
    if (st != LLMM_OK && st != LLMM_ERR_BUFFER_TOO_SMALL) return llmm__ctx_fail(g->ctx, st, "tokenizing the prompt failed");
    if (n == 0) return llmm__ctx_fail(g->ctx, LLMM_ERR_INVALID_ARG, "the prompt gives no tokens (empty, without BOS)");
    g->prompt = llmm__mem_calloc(m->alloc, n, sizeof *g->prompt);
    if (!g->prompt) return llmm__ctx_fail(g->ctx, LLMM_ERR_NO_MEMORY, "out of memory for %zu prompt tokens", n);
    g->s.n_prompt = n;
    return llmm_tokenize(m, text, len, g->p.tokenize_flags, g->prompt, n, &n);
}

/* The token's bytes into g->piece; returns their count. */
static llmm_status piece_of(gen_run *g, llmm_token t, size_t *n) {
    llmm_status st = llmm_token_to_piece(g->ctx->model, t, 0, g->piece, g->piece_cap, n);
    if (st != LLMM_ERR_BUFFER_TOO_SMALL) return st;
    char *p = llmm__mem_grow(g->ctx->model->alloc, g->piece, 0, *n);
    if (!p) return LLMM_ERR_NO_MEMORY;
    g->piece = p;
    g->piece_cap = *n;
    return llmm_token_to_piece(g->ctx->model, t, 0, g->piece, g->piece_cap, n);
}

/* ---------------------------------------------------------------- grammar */

static llmm_status grammar_setup(gen_run *g) {
    const llmm_grammar *grammar = g->p.grammar;
    if (!grammar && g->p.grammar_text) {
        char err[400];
        const char *t = g->p.grammar_text;
        llmm_status st = llmm_grammar_create(g->ctx->model, t, strlen(t), "root", &g->own_grammar, err, sizeof err);
        if (st) return llmm__ctx_fail(g->ctx, st, "llmm_generate: grammar_text: %s", err);
        grammar = g->own_grammar;
    }
    if (!grammar) return LLMM_OK;
    if (!llmm__grammar_serves_model(grammar, g->ctx->model))
        return llmm__ctx_fail(g->ctx, LLMM_ERR_INVALID_ARG, "llmm_generate: the grammar was compiled for another model");
    if (g->p.grammar_trigger) {
        g->lazy = grammar; /* the state is made when the trigger appears */
        return LLMM_OK;
    }
    llmm_status st = llmm_grammar_state_create(grammar, &g->grammar);
    return st ? llmm__ctx_fail(g->ctx, st, "out of memory for the grammar state") : LLMM_OK;
}

/* Lazy grammar: the output's bytes are watched for the trigger; when it appears (possibly
 * inside a token, or across two), the grammar starts there and is fed the bytes from the
 * trigger's first one, which the free sampling already chose. Only the trigger's length less
 * one byte is kept between tokens. */
static llmm_status lazy_watch(gen_run *g, const char *piece, size_t n) {
    const char *trigger = g->p.grammar_trigger;
    size_t k = strlen(trigger);
    if (g->n_recent + n > g->recent_cap) {
        char *grown = llmm__mem_grow(g->ctx->model->alloc, g->recent, g->recent_cap, g->n_recent + n);
        if (!grown) return llmm__ctx_fail(g->ctx, LLMM_ERR_NO_MEMORY, "out of memory watching for the trigger");
        g->recent = grown;
        g->recent_cap = g->n_recent + n;
    }
    memcpy(g->recent + g->n_recent, piece, n);
    g->n_recent += n;
    for (size_t i = 0; i + k <= g->n_recent; i++) {
        if (memcmp(g->recent + i, trigger, k) != 0) continue;
        llmm_status st = llmm_grammar_state_create(g->lazy, &g->grammar);
        if (st) return llmm__ctx_fail(g->ctx, st, "out of memory for the grammar state");
        g->lazy = NULL;
        st = llmm_grammar_state_accept_bytes(g->grammar, g->recent + i, g->n_recent - i);
        if (st)
            return llmm__ctx_fail(g->ctx, st, "grammar: the text from the trigger on is no start of a sentence: %s",
                                  llmm_grammar_state_last_error(g->grammar));
        return LLMM_OK;
    }
    if (g->n_recent >= k) { /* keep the last k - 1 bytes: the trigger may be completed later */
        memmove(g->recent, g->recent + g->n_recent - (k - 1), k - 1);
        g->n_recent = k - 1;
    }
    return LLMM_OK;
}

static llmm_status grammar_step(gen_run *g, const float *logits, size_t n_vocab, llmm_token *tok) {
    llmm_status st = llmm_grammar_sample(g->sampler, g->grammar, logits, n_vocab, tok);
    if (!st) st = llmm_grammar_state_accept_token(g->grammar, *tok);
    g->s.grammar_ms = g->grammar->spent_ms;
    return st;
}

static int grammar_complete(const gen_run *g) {
    int must_end = 0;
    return g->grammar && !llmm_grammar_state_can_end(g->grammar, NULL, &must_end) && must_end;
}

/* One step: sample from the current logits, stream the token, decode it unless this is the
 * last. Sets stop_reason when generation ends. */
static llmm_status step(gen_run *g, int is_last) {
    const float *logits;
    size_t n_vocab, n;
    llmm_token tok = g->next;
    llmm_status st = LLMM_OK;
    const int from_queue = g->next_queued < g->n_queued;
    if (from_queue) tok = g->queued[g->next_queued++];
    else if (!g->have_next) {
        st = llmm_logits(g->ctx, 0, &logits, &n_vocab);
        if (!st) st = g->grammar ? grammar_step(g, logits, n_vocab, &tok) : llmm_sample(g->sampler, logits, n_vocab, &tok);
    }
    g->have_next = 0;
    g->n_chosen++;
    if (st && g->grammar && *llmm_grammar_state_last_error(g->grammar))
        return llmm__ctx_fail(g->ctx, st, "grammar: %s", llmm_grammar_state_last_error(g->grammar));
    if (!st && !from_queue) st = llmm_sampler_accept(g->sampler, tok);
    if (st)
        return llmm__ctx_fail(g->ctx, st, "sampling (sequence %d, position %zu) failed: %s", (int)g->p.seq,
                        g->s.n_prompt + g->s.n_generated, llmm_sampler_last_error(g->sampler));
    const double now = llmm__time_now_ms();
    if (g->s.n_generated == 0) {
        g->s.first_token_ms = now - g->t_start;
        llmm__latency_add(&g->ctx->request_first_token, g->s.first_token_ms);
    }
    if (g->ctx->model->vocab.attrs[tok] & LLMM_TOKEN_ATTR_EOS) {
        g->s.stop_reason = LLMM_STOP_EOS;
        return LLMM_OK;
    }
    if (g->s.n_generated > 0) {
        llmm__latency_add(&g->inter_token, now - g->t_last_token);
        llmm__latency_add(&g->ctx->inter_token, now - g->t_last_token);
    }
    g->t_last_token = now;
    if (g->p.out_tokens && g->s.n_generated < g->p.out_capacity) g->p.out_tokens[g->s.n_generated] = tok;
    g->s.n_generated++;
    if ((st = piece_of(g, tok, &n))) return llmm__ctx_fail(g->ctx, st, "converting token %d to text failed", tok);
    if (g->lazy && (st = lazy_watch(g, g->piece, n))) return st;
    int stop_index = -1, cancelled = 0;
    st = llmm__text_stream_push(&g->stream, g->piece, n, stream_out, g, &stop_index, &cancelled);
    if (st) return llmm__ctx_fail(g->ctx, st, "out of memory streaming text");
    if (g->tool_feed) return count_tool_calls(g);
    if (stop_index >= 0) g->s.stop_reason = LLMM_STOP_STRING;
    else if (cancelled) g->s.stop_reason = LLMM_STOP_CALLBACK;
    else if (is_last) g->s.stop_reason = LLMM_STOP_MAX_TOKENS;
    else if (grammar_complete(g)) g->s.stop_reason = LLMM_STOP_GRAMMAR;
    if (g->s.stop_reason != LLMM_STOP_NONE) return LLMM_OK;
    if (g->next_queued < g->n_queued) return LLMM_OK;
    /* the next token is chosen with the decode: on a device only its id comes back; a grammar
     * needs the logits */
    llmm_seq_id seq = g->p.seq;
    if (g->spec) {
        g->next_queued = g->n_queued = 0;
        st = llmm__spec_round(g->spec, seq, tok, g->sampler, g->queued, &g->n_queued);
        if (st == LLMM_ERR_CONTEXT_FULL) g->s.stop_reason = LLMM_STOP_CONTEXT_FULL;
        return st == LLMM_ERR_CONTEXT_FULL ? LLMM_OK : st;
    }
    g->s.n_target_steps++;
    if (g->grammar) st = llmm_decode(g->ctx, &seq, &tok, 1);
    else st = llmm_decode_sample(g->ctx, &seq, &tok, 1, &g->sampler, &g->next);
    if (st == LLMM_ERR_CONTEXT_FULL) {
        g->s.stop_reason = LLMM_STOP_CONTEXT_FULL;
        return LLMM_OK;
    }
    g->have_next = st == LLMM_OK && !g->grammar;
    return st;
}

/* The sequence as plain decoding leaves it (every chosen token but the last decoded), not
 * holding guesses kept beyond where generation stopped; and the speculation counters. */
static llmm_status spec_finish(gen_run *g) {
    size_t len, want = g->s.n_prompt + (g->n_chosen ? g->n_chosen - 1 : 0);
    llmm_status st = llmm_seq_length(g->ctx, g->p.seq, &len);
    /* a recurrent state goes back through the last verify step's checkpoint */
    if (!st && len > want) st = llmm__seq_rewind(g->ctx, g->p.seq, (uint32_t)want);
    llmm__spec_counters(g->spec, &g->s.spec_proposed, &g->s.spec_accepted, &g->s.n_target_steps, &g->s.spec_draft_ms);
    return st;
}

static llmm_status run(gen_run *g, const char *prompt) {
    llmm_context *ctx = g->ctx;
    llmm_status st = tokenize_prompt(g, prompt);
    if (st) return st;
    if ((st = llmm_seq_clear(ctx, g->p.seq))) return st;
    double t0 = llmm__time_now_ms();
    if ((st = llmm_prefill(ctx, g->p.seq, g->prompt, g->s.n_prompt, 0))) return st;
    g->s.prompt_ms = llmm__time_now_ms() - t0;
    llmm_diag d = {{0}};
    if ((st = llmm__sampler_create(g->p.sampling, ctx->model->alloc, &g->sampler, &d)))
        return llmm__ctx_fail(ctx, st, "sampling parameters: %s", d.msg);
    if ((st = llmm__spec_for_generate(ctx, &g->p, &g->spec))) return st;
    if ((st = llmm__text_stream_init(&g->stream, g->p.stop_strings, g->p.n_stop, ctx->model->alloc)))
        return llmm__ctx_fail(ctx, st, "out of memory for stop strings");
    g->stream_ready = 1;
    if ((st = grammar_setup(g))) return st;
    double t1 = llmm__time_now_ms();
    for (int32_t i = 0; i < g->p.max_tokens && g->s.stop_reason == LLMM_STOP_NONE; i++)
        if ((st = step(g, i + 1 == g->p.max_tokens))) return st;
    if (g->s.stop_reason == LLMM_STOP_NONE) g->s.stop_reason = LLMM_STOP_MAX_TOKENS;
    if (g->spec && (st = spec_finish(g))) return st;
    if (g->s.stop_reason != LLMM_STOP_STRING && g->s.stop_reason != LLMM_STOP_CALLBACK) {
        int cancelled = 0;
        if ((st = llmm__text_stream_finish(&g->stream, stream_out, g, &cancelled)))
            return llmm__ctx_fail(ctx, st, "out of memory streaming text");
    }
    g->s.generate_ms = llmm__time_now_ms() - t1;
    return g->p.tool_parser ? count_tool_calls(g) : LLMM_OK;
}

static void fill_rates(llmm_generate_stats *s, const llmm_model *m) {
    s->load_ms = m->load_ms;
    s->prompt_tokens_per_s = s->prompt_ms > 0 ? (double)s->n_prompt * 1e3 / s->prompt_ms : 0;
    s->generate_tokens_per_s = s->generate_ms > 0 ? (double)s->n_generated * 1e3 / s->generate_ms : 0;
    s->spec_acceptance = s->spec_proposed ? (double)s->spec_accepted / (double)s->spec_proposed : 0;
    if (s->spec_proposed && s->n_target_steps && s->generate_ms > 0)
        s->spec_speedup_estimate = (double)s->n_generated / (double)s->n_target_steps *
                                   LLMM_MAX(0.0, 1.0 - s->spec_draft_ms / s->generate_ms);
}

LLMM_API llmm_status llmm_generate(llmm_context *ctx, const char *prompt, const llmm_generate_params *params,
                                   llmm_generate_stats *stats) {
    if (!ctx) return LLMM_ERR_INVALID_ARG;
    gen_run g = {.ctx = ctx, .t_start = llmm__time_now_ms()};
    llmm_generate_params_default(&g.p, sizeof g.p);
    if (params && !llmm__struct_import(&g.p, sizeof g.p, params, GENERATE_PARAMS_V1_SIZE))
        return llmm__ctx_fail(ctx, LLMM_ERR_INVALID_ARG, "llmm_generate: params->size too small");
    if (!prompt) return llmm__ctx_fail(ctx, LLMM_ERR_INVALID_ARG, "llmm_generate: NULL prompt");
    if (g.p.max_tokens < 0 || (g.p.n_stop && !g.p.stop_strings) || (g.p.out_capacity && !g.p.out_tokens))
        return llmm__ctx_fail(ctx, LLMM_ERR_INVALID_ARG, "llmm_generate: invalid max_tokens, stop strings or out buffer");
    if ((g.p.grammar || g.p.grammar_text) && (g.p.spec_draft_model || g.p.spec_ngram > 0))
        return llmm__ctx_fail(ctx, LLMM_ERR_INVALID_ARG,
                        "llmm_generate: a grammar and speculative decoding in one call are not supported");
    if (g.p.grammar_trigger && (!(g.p.grammar || g.p.grammar_text) || !g.p.grammar_trigger[0] ||
                                strlen(g.p.grammar_trigger) > LLMM_GRAMMAR_TRIGGER_MAX))
        return llmm__ctx_fail(ctx, LLMM_ERR_INVALID_ARG,
                              "llmm_generate: grammar_trigger needs a grammar and 1 to %d bytes", LLMM_GRAMMAR_TRIGGER_MAX);
    if (stats && stats->size < GENERATE_STATS_V1_SIZE)
        return llmm__ctx_fail(ctx, LLMM_ERR_INVALID_ARG, "llmm_generate: stats->size too small");
    llmm_status st = run(&g, prompt);
    const llmm_allocator *a = ctx->model->alloc;
    if (g.stream_ready) llmm__text_stream_free(&g.stream);
    llmm_sampler_free(g.sampler);
    llmm_speculator_free(g.spec);
    llmm_grammar_state_free(g.grammar);
    llmm_grammar_free(g.own_grammar);
    llmm__mem_free(a, g.prompt);
    llmm__mem_free(a, g.piece);
    llmm__mem_free(a, g.recent);
    fill_rates(&g.s, ctx->model);
    llmm__latency_export(&g.inter_token, &g.s.inter_token_ms_p50, &g.s.inter_token_ms_p95, &g.s.inter_token_ms_p99,
                         &g.s.inter_token_ms_max);
    g.s.size = sizeof g.s;
    if (stats) llmm__struct_export(stats, &g.s, sizeof g.s, GENERATE_STATS_V1_SIZE);
    return st;
}
