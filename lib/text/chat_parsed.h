/* What a parse of a model's output holds (content, reasoning, calls), and what every call
 * syntax's parser (chat_parse.c, chat_parse_rewritten.c) shares to fill it: finding a family's
 * markers, and adding what is found. */
#ifndef LLMM_CHAT_PARSED_H
#define LLMM_CHAT_PARSED_H

#include <stddef.h>
#include <string.h>

#include "base/common.h"

typedef struct text_span {
    size_t at, len; /* bytes of the parsed text */
} text_span;

typedef struct parsed_call {
    text_span name, id, arguments; /* id.len == 0 when the model wrote none */
    int has_id;
    int complete;       /* the closing marker was seen */
    int args_converted; /* arguments index chat_parse.converted, not the text (Python-style calls) */
} parsed_call;

typedef struct chat_parse {
    text_span *content; /* pieces of content, in order */
    size_t n_content, cap_content;
    text_span reasoning;
    parsed_call *calls;
    size_t n_calls, cap_calls;
    int malformed; /* text after a call's opening marker was not a call */
    size_t call_end; /* where the last complete call's closing marker ends (0: none) */
    char *converted; /* arguments the parser rewrote as JSON (chat_parse_rewritten.h) */
    size_t n_converted, cap_converted;
    /* Set by the caller and kept across parses: the parameters whose schema says string, as
     * records "TOOL\0PARAM\0" back to back (n_string_params bytes; NULL: no tools known). */
    const char *string_params;
    size_t n_string_params;
} chat_parse;

#define CALL_OPEN "<tool_call>"
#define CALL_CLOSE "</tool_call>"

static inline int is_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

static inline size_t skip_space(const char *t, size_t n, size_t i) {
    while (i < n && is_space(t[i])) i++;
    return i;
}

/* First occurrence of marker in t[from, n), or n. */
static inline size_t find(const char *t, size_t n, size_t from, const char *marker) {
    size_t k = strlen(marker);
    for (size_t i = from; i + k <= n; i++)
        if (t[i] == marker[0] && memcmp(t + i, marker, k) == 0) return i;
    return n;
}

/* Length of the longest tail of t[from, n) that is a proper prefix of marker: text that may
 * become the marker when more arrives. */
static inline size_t partial_marker(const char *t, size_t n, size_t from, const char *marker) {
    size_t k = strlen(marker);
    for (size_t len = k - 1; len > 0; len--)
        if (n - from >= len && memcmp(t + n - len, marker, len) == 0) return len;
    return 0;
}

/* t[at, n) begins with the whole marker */
static inline int starts_at(const char *t, size_t n, size_t at, const char *marker) {
    size_t k = strlen(marker);
    return n - at >= k && memcmp(t + at, marker, k) == 0;
}

/* t[at, n) is all a beginning of marker (empty included): the marker may still be coming */
static inline int prefix_at(const char *t, size_t n, size_t at, const char *marker) {
    size_t k = strlen(marker);
    return n - at < k && memcmp(t + at, marker, n - at) == 0;
}

static inline llmm_status add_content(chat_parse *p, size_t at, size_t len) {
    if (len == 0) return LLMM_OK;
    if (llmm__mem_reserve(NULL, (void **)&p->content, &p->cap_content, p->n_content + 1, sizeof *p->content))
        return LLMM_ERR_NO_MEMORY;
    p->content[p->n_content++] = (text_span){at, len};
    return LLMM_OK;
}

static inline llmm_status add_call(chat_parse *p, const parsed_call *c) {
    if (llmm__mem_reserve(NULL, (void **)&p->calls, &p->cap_calls, p->n_calls + 1, sizeof *p->calls))
        return LLMM_ERR_NO_MEMORY;
    p->calls[p->n_calls++] = *c;
    return LLMM_OK;
}

/* Text from `at` on is no call. The reference refuses such output; llmmini flags it and, once
 * the output has ended, shows it as content (while streaming it stays held back, as the
 * reference's streaming view shows nothing of it). */
static inline llmm_status not_a_call(chat_parse *p, const char *t, size_t n, size_t at, int final) {
    (void)t;
    p->malformed = 1;
    return final ? add_content(p, at, n - at) : LLMM_OK;
}


/* Content up to the marker's next occurrence from pos; returns where it starts, or n (then the
 * rest is content, less a tail that may become the marker while streaming). */
static inline size_t content_until(chat_parse *p, const char *t, size_t n, size_t pos, const char *marker, int final,
                            llmm_status *st) {
    size_t open = find(t, n, pos, marker);
    size_t held = open == n && !final ? partial_marker(t, n, pos, marker) : 0;
    *st = add_content(p, pos, open - pos - held);
    return open;
}

#endif
