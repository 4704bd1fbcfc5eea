/* parallel: several conversations served by one context, each a sequence, all advanced by one
 * batched llmm_decode_sample per step, so the weights are read once per step however many
 * conversations are running (a server's or a game's many NPCs' shape).
 *     usage: parallel MODEL.gguf [-n MAX_TOKENS] [--temp T] [PROMPT...]
 *
 * Each conversation has its own sampler (seeded by its index), its own stopping point (end of
 * text or MAX_TOKENS) and leaves the batch when it ends; its sequence id goes back to the
 * context. With --temp 0 every conversation's text is exactly the text it would get alone
 * (sequences decoded together get the same logits as each decoded alone). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llmmini.h"

enum { MAX_CONVERSATIONS = 16 };

typedef struct conversation {
    const char *prompt;
    llmm_seq_id seq;
    llmm_sampler *sampler;
    llmm_token next;  /* sampled, not yet decoded */
    int n_generated;
    int done;
    char *text;       /* the continuation so far, NUL-terminated */
    size_t text_len;
} conversation;

static const char *const default_prompts[] = {"Once upon a time", "The little dog", "Tom and Sue went to the park",
                                              "One day, a cat"};

/* Tokenize prompt (BOS as the model asks) into a malloc'd array. */
static llmm_status tokenize(const llmm_model *model, const char *prompt, llmm_token **ids, size_t *n) {
    size_t len = strlen(prompt);
    llmm_status st = llmm_tokenize(model, prompt, len, LLMM_TOKENIZE_ADD_SPECIAL, NULL, 0, n);
    if (st != LLMM_ERR_BUFFER_TOO_SMALL && st != LLMM_OK) return st;
    *ids = malloc((*n + 1) * sizeof **ids);
    if (!*ids) return LLMM_ERR_NO_MEMORY;
    return llmm_tokenize(model, prompt, len, LLMM_TOKENIZE_ADD_SPECIAL, *ids, *n, n);
}

/* Record conversation c's newest token: its text, or the end of the conversation. */
static llmm_status accept_token(const llmm_model *model, conversation *c, int max_tokens) {
    uint32_t attrs = 0;
    llmm_status st = llmm_sampler_accept(c->sampler, c->next);
    if (st == LLMM_OK) st = llmm_token_attrs(model, c->next, &attrs);
    if (st != LLMM_OK || (attrs & LLMM_TOKEN_ATTR_EOS)) return c->done = 1, st;
    char piece[256];
    size_t n = 0;
    if ((st = llmm_token_to_piece(model, c->next, 0, piece, sizeof piece, &n)) != LLMM_OK) return st;
    char *text = realloc(c->text, c->text_len + n + 1);
    if (!text) return LLMM_ERR_NO_MEMORY;
    memcpy(text + c->text_len, piece, n);
    c->text = text;
    c->text_len += n;
    text[c->text_len] = '\0';
    c->done = ++c->n_generated >= max_tokens;
    return LLMM_OK;
}

/* A sequence and a sampler for c, its prompt prefilled and its first token sampled. */
static llmm_status start(llmm_context *ctx, const llmm_model *model, const llmm_sampler_params *sp,
                         conversation *c, int max_tokens) {
    llmm_token *ids = NULL;
    size_t n = 0;
    const float *logits;
    size_t n_vocab;
    llmm_status st = llmm_seq_create(ctx, &c->seq);
    if (st == LLMM_OK) st = tokenize(model, c->prompt, &ids, &n);
    if (st == LLMM_OK) st = llmm_prefill(ctx, c->seq, ids, n, 0);
    free(ids);
    if (st == LLMM_OK) st = llmm_sampler_create(sp, &c->sampler);
    if (st == LLMM_OK) st = llmm_logits(ctx, 0, &logits, &n_vocab);
    if (st == LLMM_OK) st = llmm_sample(c->sampler, logits, n_vocab, &c->next);
    return st == LLMM_OK ? accept_token(model, c, max_tokens) : st;
}

/* One decode step over every running conversation: each row appends that conversation's last
 * token and samples its next. Returns the rows decoded in *n_rows (0: all are done). */
static llmm_status step(llmm_context *ctx, const llmm_model *model, conversation *convs, int n_convs,
                        int max_tokens, int *n_rows) {
    llmm_seq_id seqs[MAX_CONVERSATIONS];
    llmm_token tokens[MAX_CONVERSATIONS], next[MAX_CONVERSATIONS];
    llmm_sampler *samplers[MAX_CONVERSATIONS];
    conversation *rows[MAX_CONVERSATIONS];
    int n = 0;
    for (int i = 0; i < n_convs; i++) {
        if (convs[i].done) continue;
        rows[n] = &convs[i];
        seqs[n] = convs[i].seq;
        tokens[n] = convs[i].next;
        samplers[n++] = convs[i].sampler;
    }
    *n_rows = n;
    if (n == 0) return LLMM_OK;
    llmm_status st = llmm_decode_sample(ctx, seqs, tokens, (size_t)n, samplers, next);
    for (int r = 0; r < n && st == LLMM_OK; r++) {
        rows[r]->next = next[r];
        st = accept_token(model, rows[r], max_tokens);
        if (rows[r]->done) llmm_seq_free(ctx, rows[r]->seq); /* its blocks go back to the pool */
    }
    return st;
}

static int usage(void) {
    fprintf(stderr, "usage: parallel MODEL.gguf [-n MAX_TOKENS] [--temp T] [PROMPT...] (at most %d prompts)\n",
            MAX_CONVERSATIONS);
    return 2;
}

int main(int argc, char **argv) {
    int max_tokens = 48, n_convs = 0, arg = 2;
    conversation convs[MAX_CONVERSATIONS] = {{0}};
    llmm_sampler_params sp;
    llmm_sampler_params_default(&sp, sizeof sp);
    for (; arg + 1 < argc && argv[arg][0] == '-'; arg += 2) {
        if (!strcmp(argv[arg], "-n")) max_tokens = atoi(argv[arg + 1]);
        else if (!strcmp(argv[arg], "--temp")) sp.temperature = (float)atof(argv[arg + 1]);
        else return usage();
    }
    if (argc < 2 || max_tokens < 1 || argc - arg > MAX_CONVERSATIONS) return usage();
    for (; arg < argc; arg++) convs[n_convs++].prompt = argv[arg];
    if (n_convs == 0)
        for (; n_convs < (int)(sizeof default_prompts / sizeof *default_prompts); n_convs++)
            convs[n_convs].prompt = default_prompts[n_convs];

    llmm_model *model = NULL;
    llmm_context *ctx = NULL;
    llmm_context_params cp;
    llmm_context_params_default(&cp, sizeof cp);
    cp.n_seq_max = (uint32_t)n_convs;
    cp.n_ctx = 512;
    llmm_status st = llmm_model_load(argv[1], NULL, &model);
    if (st == LLMM_OK) st = llmm_context_create(model, &cp, &ctx);
    for (int i = 0; i < n_convs && st == LLMM_OK; i++) {
        sp.seed = (uint64_t)i;
        st = start(ctx, model, &sp, &convs[i], max_tokens);
    }
    int n_steps = 0, n_rows = 1, rows_total = 0;
    while (st == LLMM_OK && n_rows > 0) {
        st = step(ctx, model, convs, n_convs, max_tokens, &n_rows);
        n_steps += n_rows > 0;
        rows_total += n_rows;
    }
    for (int i = 0; i < n_convs && st == LLMM_OK; i++)
        printf("--- conversation %d ---\n%s%s\n", i, convs[i].prompt, convs[i].text ? convs[i].text : "");
    llmm_context_stats stats = {.size = sizeof stats};
    if (st == LLMM_OK && llmm_context_get_stats(ctx, &stats) == LLMM_OK)
        fprintf(stderr, "[%d conversations, %d batched decode steps of %.1f rows on average, %.1f tokens/s]\n",
                n_convs, n_steps, n_steps ? (double)rows_total / n_steps : 0.0,
                stats.decode_ms > 0 ? (double)stats.tokens_decoded * 1e3 / stats.decode_ms : 0.0);
    if (st != LLMM_OK)
        fprintf(stderr, "parallel: %s: %s\n", llmm_status_str(st), ctx ? llmm_context_last_error(ctx) : argv[1]);
    for (int i = 0; i < n_convs; i++) {
        llmm_sampler_free(convs[i].sampler);
        free(convs[i].text);
    }
    llmm_context_free(ctx);
    llmm_model_free(model);
    return st == LLMM_OK ? 0 : 1;
}
