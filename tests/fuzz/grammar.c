/* Fuzz harness for grammars (GBNF text from anyone: llmm_grammar_create,
 * llmm_generate_params.grammar_text). The input is the grammar text up to its first NUL byte,
 * then drive bytes. The text is compiled without a vocabulary; if it compiles, the drive bytes
 * are fed to a state in chunks (each chunk's first byte gives its length and whether to clone
 * or reset first), and each chunk must be taken whole exactly when it is taken byte by byte on
 * a clone, leave the state unchanged when refused, and agree on whether the text may end. Then
 * the text is compiled with the stories260K vocabulary and pairs of drive bytes pick tokens:
 * the state must accept a token exactly when it allows it and when its mask leaves it finite.
 * A compile failure must be INVALID_ARG or NO_MEMORY with a message. libFuzzer entry point;
 * `make fuzz`. */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llmmini.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_CHUNKS 48
#define MAX_TOKENS 24

/* loaded once for the process; the fuzzer never frees it (it exits) */
static llmm_model *g_vocab;
static uint32_t g_n_vocab;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    if (g_vocab) return 0;
    const char *shared = getenv("LLMM_SHARED");
    char path[1024];
    snprintf(path, sizeof path, "%s/models/stories260K.gguf", shared ? shared : "../shared");
    llmm_model_params mp;
    llmm_model_params_default(&mp, sizeof mp);
    mp.vocab_only = 1;
    llmm_model_info info = {.size = sizeof info};
    if (llmm_model_load(path, &mp, &g_vocab) != LLMM_OK || llmm_model_get_info(g_vocab, &info) != LLMM_OK) {
        fprintf(stderr, "fuzz grammar: cannot load %s (set LLMM_SHARED)\n", path);
        abort();
    }
    g_n_vocab = info.n_vocab;
    return 0;
}

static void check(int ok) {
    if (!ok) abort();
}

/* A failed call: a status the contract allows and a message. */
static void check_refusal(llmm_status st, const llmm_grammar_state *s) {
    check(st == LLMM_ERR_INVALID_ARG || st == LLMM_ERR_NO_MEMORY);
    check(llmm_grammar_state_last_error(s)[0] != '\0');
}

static void ends(const llmm_grammar_state *s, int out[2]) {
    check(llmm_grammar_state_can_end(s, &out[0], &out[1]) == LLMM_OK);
}

/* Compile text; NULL when refused, which must be with a documented status and a message. */
static llmm_grammar *compile(const llmm_model *vocab, const char *text, size_t len) {
    llmm_grammar *g = NULL;
    char err[256];
    memset(err, 'x', sizeof err);
    llmm_status st = llmm_grammar_create(vocab, text, len, NULL, &g, err, sizeof err);
    check(memchr(err, 0, sizeof err) != NULL);
    if (st == LLMM_OK) {
        check(g != NULL);
        return g;
    }
    check(g == NULL && err[0] != '\0');
    check(st == LLMM_ERR_INVALID_ARG || st == LLMM_ERR_NO_MEMORY);
    return NULL;
}

/* Feed the chunk to s whole and, on a clone made before, byte by byte: the same outcome. */
static void feed_chunk(llmm_grammar_state **s, const uint8_t *chunk, size_t n) {
    llmm_grammar_state *split = NULL;
    llmm_status cst = llmm_grammar_state_clone(*s, &split);
    if (cst != LLMM_OK) {
        check(cst == LLMM_ERR_NO_MEMORY);
        return;
    }
    int before[2], after[2], split_end[2];
    ends(*s, before);
    llmm_status st = llmm_grammar_state_accept_bytes(*s, (const char *)chunk, n);
    if (st != LLMM_OK) {
        check_refusal(st, *s);
        ends(*s, after);
        check(after[0] == before[0] && after[1] == before[1]); /* unchanged */
    }
    llmm_status split_st = LLMM_OK;
    for (size_t i = 0; i < n && split_st == LLMM_OK; i++)
        split_st = llmm_grammar_state_accept_bytes(split, (const char *)chunk + i, 1);
    check((st == LLMM_OK) == (split_st == LLMM_OK));
    if (st == LLMM_OK) {
        ends(*s, after);
        ends(split, split_end);
        check(after[0] == split_end[0] && after[1] == split_end[1]);
    }
    llmm_grammar_state_free(split);
}

static void drive_bytes(const llmm_grammar *g, const uint8_t *d, size_t n) {
    llmm_grammar_state *s = NULL;
    llmm_status st = llmm_grammar_state_create(g, &s);
    if (st != LLMM_OK) {
        check(st == LLMM_ERR_INVALID_ARG || st == LLMM_ERR_NO_MEMORY);
        return;
    }
    for (int chunks = 0; n > 0 && chunks < MAX_CHUNKS; chunks++) {
        uint8_t ctl = *d++;
        n--;
        size_t len = (size_t)(ctl & 7) + 1;
        if (len > n) len = n;
        if (ctl & 0x40) check(llmm_grammar_state_reset(s) == LLMM_OK);
        if (ctl & 0x80) { /* go on with a copy, the original freed */
            llmm_grammar_state *copy = NULL;
            if (llmm_grammar_state_clone(s, &copy) == LLMM_OK) {
                llmm_grammar_state_free(s);
                s = copy;
            }
        }
        feed_chunk(&s, d, len);
        d += len;
        n -= len;
    }
    llmm_grammar_state_free(s);
}

/* Tokens of the vocabulary picked by pairs of drive bytes: allowed, masked finite and accepted
 * must agree. A refused step (the expansion limit) must be refused by all three. */
static void drive_tokens(const llmm_grammar *g, const uint8_t *d, size_t n) {
    llmm_grammar_state *s = NULL;
    if (llmm_grammar_state_create(g, &s) != LLMM_OK) return;
    float *logits = malloc(g_n_vocab * sizeof *logits);
    check(logits != NULL);
    for (int k = 0; n >= 2 && k < MAX_TOKENS; k++, d += 2, n -= 2) {
        llmm_token t = (llmm_token)((d[0] | (uint32_t)d[1] << 8) % g_n_vocab);
        int allowed = -1;
        llmm_status ast = llmm_grammar_state_allows(s, t, &allowed);
        if (ast != LLMM_OK) check_refusal(ast, s);
        if (k < 4 || (d[0] & 1)) {
            for (uint32_t i = 0; i < g_n_vocab; i++) logits[i] = 0.0f;
            llmm_status mst = llmm_grammar_state_mask(s, logits, g_n_vocab);
            if (mst != LLMM_OK) check_refusal(mst, s);
            else if (ast == LLMM_OK) check((isfinite(logits[t]) != 0) == (allowed != 0));
        }
        llmm_status st = llmm_grammar_state_accept_token(s, t);
        if (ast == LLMM_OK) check((st == LLMM_OK) == (allowed != 0));
        if (st != LLMM_OK) check_refusal(st, s);
    }
    free(logits);
    llmm_grammar_state_free(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!g_vocab) LLVMFuzzerInitialize(NULL, NULL);
    const uint8_t *nul = memchr(data, 0, size);
    size_t text_len = nul ? (size_t)(nul - data) : size;
    const uint8_t *drive = nul ? nul + 1 : data + size;
    size_t drive_len = size - (size_t)(drive - data);
    llmm_grammar *g = compile(NULL, (const char *)data, text_len);
    if (!g) return 0;
    drive_bytes(g, drive, drive_len);
    llmm_grammar_free(g);
    g = compile(g_vocab, (const char *)data, text_len);
    check(g != NULL); /* compiled without a vocabulary, so with one too */
    drive_tokens(g, drive, drive_len);
    llmm_grammar_free(g);
    return 0;
}
