/* Fuzz harness for the tool-call parser (llmm_chat_parser_*), which reads a model's output:
 * text a sampled model may have written anything into. The input's first byte picks a tool
 * family (from llmm_chat_tool_families) and whether the prompt left the model thinking, the
 * second how the rest is split into feeds (and, from 0x80 on, that the parser is given tools,
 * which type qwen3_5's values); the rest is the output. After every feed the
 * streaming result is read, and at the end the final one; the invariants: every string is
 * NUL-terminated within what the parser owns, content and reasoning never exceed the text fed,
 * a call's name is part of it, and its arguments are too or, where the family writes Python
 * literals (lfm2_5), their JSON rewrite: at most two bytes per byte fed (a quote gains an escape)
 * and the braces; where it writes raw text values (qwen3_5, gemma4), at most six (a control byte
 * becomes \u00XX). libFuzzer entry point; `make fuzz`. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llmmini.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_FAMILIES 32
static char g_names[MAX_FAMILIES][32];
static size_t g_n_families;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    const char *csv = NULL;
    if (llmm_chat_tool_families(&csv) != LLMM_OK) abort();
    g_n_families = 0;
    for (const char *p = csv; *p && g_n_families < MAX_FAMILIES;) {
        size_t n = strcspn(p, ",");
        if (n == 0 || n >= sizeof g_names[0]) abort();
        memcpy(g_names[g_n_families], p, n);
        g_names[g_n_families++][n] = '\0';
        p += n + (p[n] == ',');
    }
    if (g_n_families == 0) abort();
    return 0;
}

/* Parameters named as the calls in the corpus name theirs, strings and not. */
static const llmm_tool g_tools[] = {
    {"f", NULL, "{\"type\": \"object\", \"properties\": {\"s\": {\"type\": \"string\"}, \"n\": {\"type\": \"integer\"}}}"},
    {"get_weather", NULL, "{\"type\": \"object\", \"properties\": {\"location\": {\"type\": \"string\"}, \"unit\": "
                          "{\"enum\": [\"celsius\", \"fahrenheit\"]}}}"},
};

static void check(const llmm_chat_parse_result *r, size_t fed, size_t growth) {
    if (!r->content || !r->reasoning || (r->n_calls && !r->calls)) abort();
    if (strlen(r->content) > fed || strlen(r->reasoning) > fed) abort();
    for (size_t i = 0; i < r->n_calls; i++) {
        if (!r->calls[i].name || !r->calls[i].arguments) abort();
        if (strlen(r->calls[i].name) > fed || strlen(r->calls[i].arguments) > growth * fed + 2) abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (g_n_families == 0) LLVMFuzzerInitialize(NULL, NULL);
    if (size < 2) return 0;
    const char *family = g_names[(data[0] >> 1) % g_n_families];
    int thinking = data[0] & 1;
    size_t growth = strcmp(family, "qwen3_5") == 0 || strcmp(family, "gemma4") == 0 ? 6 : 2;
    size_t chunk = (size_t)data[1] % 17 + 1; /* 1..17 bytes a feed */
    const char *text = (const char *)data + 2;
    size_t len = size - 2;
    llmm_chat_parser *p = NULL;
    if (llmm_chat_parser_create(family, thinking, &p) != LLMM_OK) abort();
    if (data[1] >= 0x80 && llmm_chat_parser_set_tools(p, g_tools, sizeof g_tools / sizeof *g_tools) != LLMM_OK) abort();
    llmm_chat_parse_result r = {.size = sizeof r};
    for (size_t at = 0; at < len; at += chunk) {
        size_t n = len - at < chunk ? len - at : chunk;
        if (llmm_chat_parser_feed(p, text + at, n) != LLMM_OK) abort();
        if (llmm_chat_parser_result(p, 0, &r) != LLMM_OK) abort();
        check(&r, at + n, growth);
    }
    if (llmm_chat_parser_result(p, 1, &r) != LLMM_OK) abort();
    check(&r, len, growth);
    llmm_chat_parser_free(p);
    return 0;
}
