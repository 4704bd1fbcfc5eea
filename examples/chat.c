/* chat: a multi-turn conversation in the model's chat format, one user message per line of
 * stdin, reusing the KV cache between turns.
 *     usage: chat MODEL.gguf [--template NAME] [-n MAX_REPLY_TOKENS] [-c N_CTX]
 *
 * Each turn renders the whole conversation with llmm_chat_format and tokenizes it, then keeps
 * the K/V of the tokens it shares with what sequence 0 already holds (the previous prompts
 * and the sampled replies) and prefills only the rest: the new user message and the format's
 * markers around it. Rendering the whole conversation rather than appending the new turn's
 * text is what keeps this right for every format: some formats rewrite earlier text (llama2's
 * "[INST]" depends on the previous message, llama3 trims replies), and a sampled reply's
 * tokens need not be what its text tokenizes to. Where they differ, prefilling restarts from
 * the first differing token. Each turn prints on stderr how many tokens it reused and
 * prefilled, checked against the context's own counter. */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L /* getline */
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llmmini.h"

typedef struct chat {
    const llmm_model *model;
    llmm_context *ctx;
    llmm_sampler *sampler;
    const char *template_name; /* NULL: the model's own */
    llmm_chat_message *messages;
    size_t n_messages;
    llmm_token *in_kv;         /* the tokens sequence 0 holds, in order (n_ctx of room) */
    size_t n_in_kv;
    llmm_token *prompt;        /* this turn's conversation as tokens (n_ctx of room) */
    size_t n_ctx;
    char *text;                /* this turn's conversation as text */
    size_t text_cap;
    char *reply;               /* the reply being generated, NUL-terminated */
    size_t reply_len;
    int max_reply;
} chat;

static llmm_status add_message(chat *c, const char *role, const char *content) {
    llmm_chat_message *m = realloc(c->messages, (c->n_messages + 1) * sizeof *m);
    if (!m) return LLMM_ERR_NO_MEMORY;
    c->messages = m;
    char *copy = malloc(strlen(content) + 1);
    if (!copy) return LLMM_ERR_NO_MEMORY;
    strcpy(copy, content);
    m[c->n_messages++] = (llmm_chat_message){role, copy};
    return LLMM_OK;
}

/* The conversation, rendered with the assistant's turn opened, into c->prompt (*n tokens). */
static llmm_status render_conversation(chat *c, size_t *n) {
    size_t len = 0;
    llmm_status st = llmm_chat_format(c->model, c->template_name, c->messages, c->n_messages, 1, c->text,
                                      c->text_cap, &len);
    if (st == LLMM_ERR_BUFFER_TOO_SMALL) {
        char *text = realloc(c->text, len + 1);
        if (!text) return LLMM_ERR_NO_MEMORY;
        c->text = text;
        c->text_cap = len + 1;
        st = llmm_chat_format(c->model, c->template_name, c->messages, c->n_messages, 1, c->text, c->text_cap,
                              &len);
    }
    /* the markers are special-token text; BOS is added as the model's metadata asks */
    if (st == LLMM_OK)
        st = llmm_tokenize(c->model, c->text, len, LLMM_TOKENIZE_PARSE_SPECIAL | LLMM_TOKENIZE_ADD_SPECIAL,
                           c->prompt, c->n_ctx, n);
    return st == LLMM_ERR_BUFFER_TOO_SMALL ? LLMM_ERR_CONTEXT_FULL : st;
}

/* Make sequence 0 hold the conversation: keep the common prefix, prefill the rest (at least
 * the last token, whose logits start the reply). */
static llmm_status prefill_new_tokens(chat *c, int turn) {
    size_t n = 0, keep = 0;
    llmm_status st = render_conversation(c, &n);
    if (st != LLMM_OK) return st;
    while (keep < c->n_in_kv && keep < n && c->in_kv[keep] == c->prompt[keep]) keep++;
    if (keep == n) keep--;
    llmm_context_stats before = {.size = sizeof before}, after = {.size = sizeof after};
    llmm_context_get_stats(c->ctx, &before);
    if ((st = llmm_seq_truncate(c->ctx, 0, keep)) != LLMM_OK) return st;
    c->n_in_kv = keep;
    if ((st = llmm_prefill(c->ctx, 0, c->prompt + keep, n - keep, 0)) != LLMM_OK) return st;
    memcpy(c->in_kv + keep, c->prompt + keep, (n - keep) * sizeof *c->prompt);
    c->n_in_kv = n;
    llmm_context_get_stats(c->ctx, &after);
    fprintf(stderr, "[turn %d: %zu tokens reused from the KV cache, %llu prefilled, %zu in the conversation]\n",
            turn, keep, (unsigned long long)(after.tokens_prefilled - before.tokens_prefilled), n);
    return LLMM_OK;
}

static llmm_status append_piece(chat *c, llmm_token token) {
    char piece[256];
    size_t n = 0;
    llmm_status st = llmm_token_to_piece(c->model, token, 0, piece, sizeof piece, &n);
    if (st != LLMM_OK) return st;
    char *reply = realloc(c->reply, c->reply_len + n + 1);
    if (!reply) return LLMM_ERR_NO_MEMORY;
    memcpy(reply + c->reply_len, piece, n);
    c->reply = reply;
    c->reply_len += n;
    reply[c->reply_len] = '\0';
    fwrite(piece, 1, n, stdout);
    fflush(stdout);
    return LLMM_OK;
}

/* Sample and decode until an end-of-turn token (not kept: its text is the format's, and the
 * next rendering brings it back), max_reply tokens or a full context. */
static llmm_status generate_reply(chat *c) {
    llmm_status st = LLMM_OK;
    c->reply_len = 0;
    for (int i = 0; st == LLMM_OK && i < c->max_reply; i++) {
        const float *logits;
        size_t n_vocab;
        llmm_token token;
        uint32_t attrs = 0;
        if ((st = llmm_logits(c->ctx, 0, &logits, &n_vocab)) != LLMM_OK) break;
        if ((st = llmm_sample(c->sampler, logits, n_vocab, &token)) != LLMM_OK) break;
        llmm_sampler_accept(c->sampler, token);
        if ((st = llmm_token_attrs(c->model, token, &attrs)) != LLMM_OK || (attrs & LLMM_TOKEN_ATTR_EOS)) break;
        if ((st = append_piece(c, token)) != LLMM_OK) break;
        if (c->n_in_kv == c->n_ctx) return LLMM_ERR_CONTEXT_FULL;
        llmm_seq_id seq = 0;
        if ((st = llmm_decode(c->ctx, &seq, &token, 1)) == LLMM_OK) c->in_kv[c->n_in_kv++] = token;
    }
    printf("\n");
    return st;
}

static llmm_status chat_turn(chat *c, const char *line, int turn) {
    llmm_status st = add_message(c, "user", line);
    if (st == LLMM_OK) st = prefill_new_tokens(c, turn);
    if (st == LLMM_OK) st = generate_reply(c);
    if (st == LLMM_OK) st = add_message(c, "assistant", c->reply_len ? c->reply : "");
    return st;
}

static llmm_status chat_loop(chat *c) {
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    llmm_status st = LLMM_OK;
    for (int turn = 1; st == LLMM_OK && (len = getline(&line, &cap, stdin)) >= 0;) {
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = '\0';
        if (len > 0) st = chat_turn(c, line, turn++);
    }
    free(line);
    if (st != LLMM_ERR_CONTEXT_FULL) return st;
    fprintf(stderr, "[context full: the conversation ends here; a larger -c holds more]\n");
    return LLMM_OK;
}

static void chat_free(chat *c) {
    for (size_t i = 0; i < c->n_messages; i++) free((char *)c->messages[i].content);
    free(c->messages);
    free(c->in_kv);
    free(c->prompt);
    free(c->text);
    free(c->reply);
    llmm_sampler_free(c->sampler);
    llmm_context_free(c->ctx);
}

static int usage(void) {
    const char *names = "";
    llmm_chat_template_names(&names);
    fprintf(stderr, "usage: chat MODEL.gguf [--template NAME] [-n MAX_REPLY_TOKENS] [-c N_CTX]\n"
                    "  one user message per line of stdin; NAME is one of %s\n", names);
    return 2;
}

int main(int argc, char **argv) {
    chat c = {.max_reply = 64, .n_ctx = 1024};
    for (int i = 2; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--template")) c.template_name = argv[i + 1];
        else if (!strcmp(argv[i], "-n")) c.max_reply = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-c")) c.n_ctx = (size_t)atoi(argv[i + 1]);
        else return usage();
    }
    if (argc < 2 || argc % 2 != 0 || c.max_reply < 1 || c.n_ctx < 16) return usage();
    llmm_model *model = NULL;
    llmm_status st = llmm_model_load(argv[1], NULL, &model);
    const char *name = c.template_name;
    if (st == LLMM_OK && !name && (st = llmm_chat_template_detect(model, &name)) != LLMM_OK) {
        char why[512];
        llmm_model_last_error(model, why, sizeof why);
        fprintf(stderr, "chat: %s\n", why); /* it names the formats --template accepts */
        llmm_model_free(model);
        return 2;
    }
    c.model = model;
    llmm_context_params cp;
    llmm_context_params_default(&cp, sizeof cp);
    cp.n_ctx = (uint32_t)c.n_ctx;
    llmm_sampler_params sp;
    llmm_sampler_params_default(&sp, sizeof sp);
    sp.temperature = 0; /* greedy: the same conversation on every run */
    c.in_kv = malloc(c.n_ctx * sizeof *c.in_kv);
    c.prompt = malloc(c.n_ctx * sizeof *c.prompt);
    if (st == LLMM_OK && (!c.in_kv || !c.prompt)) st = LLMM_ERR_NO_MEMORY;
    if (st == LLMM_OK) st = llmm_context_create(model, &cp, &c.ctx);
    if (st == LLMM_OK) st = llmm_sampler_create(&sp, &c.sampler);
    if (st == LLMM_OK) fprintf(stderr, "[chat format: %s]\n", name);
    if (st == LLMM_OK) st = chat_loop(&c);
    if (st != LLMM_OK)
        fprintf(stderr, "chat: %s: %s\n", llmm_status_str(st), c.ctx ? llmm_context_last_error(c.ctx) : argv[1]);
    chat_free(&c);
    llmm_model_free(model);
    return st == LLMM_OK ? 0 : 1;
}
