/* Growing text for emitted GBNF grammars. */
#include "gbnf_text.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/common.h"
#include "base/unicode.h"

static int reserve(gbnf_text *t, size_t extra) {
    if (t->failed) return 0;
    if (extra >= SIZE_MAX - t->len || llmm__mem_reserve(NULL, (void **)&t->data, &t->cap, t->len + extra + 1, 1) != LLMM_OK) {
        t->failed = 1;
        return 0;
    }
    return 1;
}

void llmm__gbnf_text_bytes(gbnf_text *t, const char *bytes, size_t n) {
    if (!reserve(t, n)) return;
    if (n) memcpy(t->data + t->len, bytes, n);
    t->len += n;
    t->data[t->len] = '\0';
}

void llmm__gbnf_text_str(gbnf_text *t, const char *s) { llmm__gbnf_text_bytes(t, s, strlen(s)); }

void llmm__gbnf_text_fmt(gbnf_text *t, const char *fmt, ...) {
    char small[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0) {
        t->failed = 1;
        return;
    }
    if ((size_t)n < sizeof small) {
        llmm__gbnf_text_bytes(t, small, (size_t)n);
        return;
    }
    if (!reserve(t, (size_t)n)) return;
    va_start(ap, fmt);
    vsnprintf(t->data + t->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    t->len += (size_t)n;
}

/* Escapes shared by literals and classes; other bytes stand for themselves (UTF-8 included,
 * which GBNF reads as code points). */
static int put_escape(gbnf_text *t, unsigned char c) {
    switch (c) {
    case '\\': llmm__gbnf_text_str(t, "\\\\"); return 1;
    case '\n': llmm__gbnf_text_str(t, "\\n"); return 1;
    case '\r': llmm__gbnf_text_str(t, "\\r"); return 1;
    case '\t': llmm__gbnf_text_str(t, "\\t"); return 1;
    default:
        if (c < 0x20 || c == 0x7F) {
            llmm__gbnf_text_fmt(t, "\\x%02X", c);
            return 1;
        }
        return 0;
    }
}

void llmm__gbnf_text_literal(gbnf_text *t, const char *bytes, size_t n) {
    llmm__gbnf_text_bytes(t, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)bytes[i];
        if (c == '"') llmm__gbnf_text_str(t, "\\\"");
        else if (!put_escape(t, c)) llmm__gbnf_text_bytes(t, (const char *)&c, 1);
    }
    llmm__gbnf_text_bytes(t, "\"", 1);
}

void llmm__gbnf_text_class_char(gbnf_text *t, uint32_t cp) {
    if (cp < 0x80) {
        unsigned char c = (unsigned char)cp;
        /* GBNF knows \[ and \] but not \^ or \-: those two go as hex */
        if (c == ']' || c == '[') {
            char esc[2] = {'\\', (char)c};
            llmm__gbnf_text_bytes(t, esc, 2);
        } else if (c == '^' || c == '-') {
            llmm__gbnf_text_fmt(t, "\\x%02X", c);
        } else if (!put_escape(t, c)) {
            llmm__gbnf_text_bytes(t, (const char *)&c, 1);
        }
        return;
    }
    char utf8[4];
    llmm__gbnf_text_bytes(t, utf8, llmm__utf8_encode(cp, utf8));
}

void llmm__gbnf_text_free(gbnf_text *t) {
    llmm__mem_free(NULL, t->data);
    *t = (gbnf_text){0};
}
