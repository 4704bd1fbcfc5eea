/* Fuzz harness for the tokenizers and chat formatting, the calls that take an app user's text:
 * the input's first byte picks one of the reference vocabularies in $LLMM_SHARED/vocab
 * (SentencePiece and byte-level BPE families, loaded once, vocabulary only), the low two bits
 * of its second byte the flags and the rest of that byte a built-in chat format; the rest is
 * the text, any bytes (invalid UTF-8, NULs, special-token look-alikes). Each text is tokenized,
 * the tokens turned back into pieces and text, and the text tokenized again; then the text (up
 * to a NUL) is a user message, formatted as a chat and tokenized with special tokens parsed.
 * libFuzzer entry point; `make fuzz`. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llmmini.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const k_vocabs[] = {"llama-spm", "llama-bpe", "qwen2", "gpt-2", "falcon", "deepseek-llm",
                                       "starcoder"};
#define N_VOCABS (sizeof k_vocabs / sizeof k_vocabs[0])
/* loaded once for the process; the fuzzer never frees them (it exits) */
static llmm_model *g_models[N_VOCABS];

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    const char *shared = getenv("LLMM_SHARED");
    for (size_t i = 0; i < N_VOCABS; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/vocab/ggml-vocab-%s.gguf", shared ? shared : "../shared", k_vocabs[i]);
        llmm_model_params mp;
        llmm_model_params_default(&mp, sizeof mp);
        mp.vocab_only = 1;
        if (llmm_model_load(path, &mp, &g_models[i]) != LLMM_OK) {
            fprintf(stderr, "fuzz tokenize: cannot load %s (set LLMM_SHARED)\n", path);
            abort();
        }
    }
    return 0;
}

static llmm_token *tokenize(llmm_model *m, const char *text, size_t len, uint32_t flags, size_t *n) {
    *n = 0;
    const llmm_status st = llmm_tokenize(m, text, len, flags, NULL, 0, n);
    if (st != LLMM_ERR_BUFFER_TOO_SMALL && !(st == LLMM_OK && *n == 0)) abort();
    llmm_token *t = malloc((*n ? *n : 1) * sizeof *t);
    if (!t) abort();
    size_t got = 0;
    if (llmm_tokenize(m, text, len, flags, t, *n, &got) != LLMM_OK || got != *n) abort();
    return t;
}

/* The format_index-th built-in chat format (wrapping) over a system message and the text as a
 * user and an assistant message. */
static void chat(llmm_model *m, unsigned format_index, const char *text, size_t len) {
    const char *names;
    if (llmm_chat_template_names(&names) != LLMM_OK) abort();
    char name[64] = "";
    size_t count = 1;
    for (const char *c = names; *c; c++) count += *c == ',';
    const char *start = names;
    for (unsigned i = 0; i < format_index % count; i++) start = strchr(start, ',') + 1;
    const size_t name_len = strcspn(start, ",");
    if (name_len >= sizeof name) abort();
    memcpy(name, start, name_len);
    name[name_len] = 0;
    char *content = malloc(len + 1);
    if (!content) abort();
    memcpy(content, text, len);
    content[len] = 0;
    const llmm_chat_message msgs[3] = {{"system", "sys"}, {"user", content}, {"assistant", content}};
    size_t needed = 0;
    const llmm_status st = llmm_chat_format(m, name, msgs, 3, 1, NULL, 0, &needed);
    if (st != LLMM_ERR_BUFFER_TOO_SMALL && !(st == LLMM_OK && needed == 0)) abort();
    char *out = malloc(needed + 1);
    if (!out) abort();
    size_t got = 0;
    if (llmm_chat_format(m, name, msgs, 3, 1, out, needed + 1, &got) != LLMM_OK || got != needed) abort();
    size_t n;
    free(tokenize(m, out, got, LLMM_TOKENIZE_ADD_SPECIAL | LLMM_TOKENIZE_PARSE_SPECIAL, &n));
    free(out);
    free(content);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    llmm_model *m = g_models[data[0] % N_VOCABS];
    const uint32_t flags = data[1] & 3u; /* the tokenize and the piece flags are both bits 0-1 */
    const char *text = (const char *)(data + 2);
    const size_t len = size - 2;
    size_t n;
    llmm_token *toks = tokenize(m, text, len, flags, &n);
    char piece[256];
    for (size_t i = 0; i < n; i++) {
        size_t pl;
        const llmm_status st = llmm_token_to_piece(m, toks[i], flags, piece, sizeof piece, &pl);
        if (st != LLMM_OK && st != LLMM_ERR_BUFFER_TOO_SMALL) abort();
    }
    size_t out_len = 0;
    (void)llmm_detokenize(m, toks, n, flags, NULL, 0, &out_len);
    char *out = malloc(out_len + 1);
    if (!out) abort();
    size_t got = 0;
    if (llmm_detokenize(m, toks, n, flags, out, out_len + 1, &got) != LLMM_OK || got != out_len) abort();
    size_t n2;
    free(tokenize(m, out, got, flags, &n2));
    free(out);
    free(toks);
    chat(m, data[1] >> 2, text, len);
    return 0;
}
