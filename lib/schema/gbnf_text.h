/* Growing text for emitted GBNF grammars, with GBNF's escaping of literals and classes. */
#ifndef LLMM_GBNF_TEXT_H
#define LLMM_GBNF_TEXT_H

#include <stddef.h>
#include <stdint.h>

/* A failed allocation is sticky: later appends do nothing and `failed` stays set, so a
 * writer appends freely and checks once at the end. */
typedef struct gbnf_text {
    char *data; /* NUL-terminated while !failed; owned, released with llmm__gbnf_text_free */
    size_t len, cap;
    int failed;
} gbnf_text;

void llmm__gbnf_text_bytes(gbnf_text *t, const char *bytes, size_t n);
void llmm__gbnf_text_str(gbnf_text *t, const char *s);
void llmm__gbnf_text_fmt(gbnf_text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A double-quoted GBNF literal matching exactly these bytes. */
void llmm__gbnf_text_literal(gbnf_text *t, const char *bytes, size_t n);
/* One code point as it may stand inside [...] ([, ], \, ^, - and controls escaped). */
void llmm__gbnf_text_class_char(gbnf_text *t, uint32_t cp);
void llmm__gbnf_text_free(gbnf_text *t);

#endif
