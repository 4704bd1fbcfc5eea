/* Fuzz harness for chat formatting, which renders an app user's messages: the input is a
 * conversation, messages separated by NUL bytes, each a role byte (0 system, 1 user, 2
 * assistant, 3 and up: the role is the rest of the message up to its first '\n', a role the call
 * must refuse unless it is one of the three) and content bytes of any value. The first byte's low
 * bit asks for the generation prompt. Every built-in format renders it: a size query, then the
 * exact size, whose text must be the size given and NUL-terminated with one byte more.
 * libFuzzer entry point; `make fuzz` (seeds: tests/fuzz/corpus/chat/). */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llmmini.h"
#include "stories_model.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

enum { MAX_MESSAGES = 16 };

/* loaded once for the process; the fuzzer never frees it (it exits) */
static llmm_model *g_model;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    g_model = fuzz_stories_model("chat", 1);
    return 0;
}

static int known_role(const char *role) {
    return !strcmp(role, "system") || !strcmp(role, "user") || !strcmp(role, "assistant");
}

/* One format over the messages: the size, then the text at exactly that size and one more. */
static void render(const char *format, const llmm_chat_message *m, size_t n, int add_prompt, int roles_ok) {
    size_t needed = 0;
    llmm_status st = llmm_chat_format(g_model, format, m, n, add_prompt, NULL, 0, &needed);
    if (!roles_ok) {
        if (st != LLMM_ERR_INVALID_ARG) abort();
        return;
    }
    if (st == LLMM_OK && needed == 0) return;
    if (st != LLMM_ERR_BUFFER_TOO_SMALL) abort();
    char *buf = malloc(needed + 1);
    if (!buf) abort();
    size_t got = 0;
    if (llmm_chat_format(g_model, format, m, n, add_prompt, buf, needed, &got) != LLMM_OK || got != needed) abort();
    if (llmm_chat_format(g_model, format, m, n, add_prompt, buf, needed + 1, &got) != LLMM_OK || got != needed ||
        buf[needed] != '\0')
        abort();
    free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    const int add_prompt = data[0] & 1;
    /* a NUL-terminated copy, cut into messages at its NULs */
    char *text = malloc(size + 1);
    if (!text) abort();
    memcpy(text, data + 1, size - 1);
    text[size - 1] = '\0';
    static const char *const roles[3] = {"system", "user", "assistant"};
    llmm_chat_message m[MAX_MESSAGES];
    size_t n = 0;
    int roles_ok = 1;
    for (char *p = text; p < text + size - 1 && n < MAX_MESSAGES; p += strlen(p) + 1) {
        if (!*p) continue; /* an empty piece carries no role byte */
        const unsigned char r = (unsigned char)*p;
        if (r < 3) {
            m[n] = (llmm_chat_message){roles[r], p + 1};
        } else {
            char *nl = strchr(p + 1, '\n');
            if (nl) *nl = '\0';
            m[n] = (llmm_chat_message){p + 1, nl ? nl + 1 : ""};
            roles_ok &= known_role(p + 1);
            if (nl) p = nl + 1; /* the content runs to the message's NUL */
        }
        n++;
    }
    const char *names;
    if (llmm_chat_template_names(&names) != LLMM_OK) abort();
    for (const char *s = names; *s;) {
        char name[64];
        const size_t len = strcspn(s, ",");
        if (len >= sizeof name) abort();
        memcpy(name, s, len);
        name[len] = '\0';
        render(name, m, n, add_prompt, roles_ok);
        s += len + (s[len] == ',');
    }
    free(text);
    return 0;
}
