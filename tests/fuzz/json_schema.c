/* Fuzz harness for JSON Schemas (llmm_grammar_from_json_schema: schema text from anyone). The
 * input is the schema up to its first NUL byte, then an instance: the schema is converted to
 * GBNF and compiled, and a state is fed the instance bytes (in chunks of up to 8 bytes) and a
 * few fixed JSON texts. A refusal must be INVALID_ARG or NO_MEMORY with a message; a refused
 * chunk must leave the state unchanged. libFuzzer entry point; `make fuzz`. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "llmmini.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_INSTANCE 512

static void check(int ok) {
    if (!ok) abort();
}

/* Feed n bytes in chunks; 1 when all were taken. */
static int feed(llmm_grammar_state *s, const char *bytes, size_t n) {
    for (size_t i = 0; i < n;) {
        size_t len = n - i < 8 ? n - i : 8;
        int before = 0, after = 0;
        check(llmm_grammar_state_can_end(s, &before, NULL) == LLMM_OK);
        llmm_status st = llmm_grammar_state_accept_bytes(s, bytes + i, len);
        if (st != LLMM_OK) {
            check(st == LLMM_ERR_INVALID_ARG || st == LLMM_ERR_NO_MEMORY);
            check(llmm_grammar_state_last_error(s)[0] != '\0');
            check(llmm_grammar_state_can_end(s, &after, NULL) == LLMM_OK && after == before);
            return 0;
        }
        i += len;
    }
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *nul = memchr(data, 0, size);
    size_t schema_len = nul ? (size_t)(nul - data) : size;
    const char *instance = nul ? (const char *)nul + 1 : NULL;
    size_t instance_len = nul ? size - schema_len - 1 : 0;
    if (instance_len > MAX_INSTANCE) instance_len = MAX_INSTANCE;
    llmm_grammar *g = NULL;
    char err[256];
    memset(err, 'x', sizeof err);
    llmm_status st = llmm_grammar_from_json_schema(NULL, (const char *)data, schema_len, &g, err, sizeof err);
    check(memchr(err, 0, sizeof err) != NULL);
    if (st != LLMM_OK) {
        check(g == NULL && err[0] != '\0');
        check(st == LLMM_ERR_INVALID_ARG || st == LLMM_ERR_NO_MEMORY);
        return 0;
    }
    check(g != NULL);
    llmm_grammar_state *s = NULL;
    st = llmm_grammar_state_create(g, &s);
    if (st == LLMM_OK) {
        if (instance) feed(s, instance, instance_len);
        static const char *const texts[] = {"{}", "[]", "\"\"", "0", "-1.5e3", "null", "true", "\"a\"",
                                            "{\"a\":1}", "[1,\"x\",{}]", "{\"name\":\"x\",\"n\":[true]}"};
        for (size_t i = 0; i < sizeof texts / sizeof *texts; i++) {
            check(llmm_grammar_state_reset(s) == LLMM_OK);
            feed(s, texts[i], strlen(texts[i]));
        }
        llmm_grammar_state_free(s);
    } else {
        check(st == LLMM_ERR_INVALID_ARG || st == LLMM_ERR_NO_MEMORY);
    }
    llmm_grammar_free(g);
    return 0;
}
