/* JSON text out of a parsed tree (json_value.h), in the spacing a template engine's tojson
 * writes: chat templates paste tool schemas and call arguments into prompts this way, and a
 * prompt must match the reference's bytes. */
#ifndef LLMM_JSON_WRITE_H
#define LLMM_JSON_WRITE_H

#include <stddef.h>

#include "base/json_value.h"

/* Where the bytes go: called with each piece in order. */
typedef void (*json_sink_fn)(void *sink, const char *bytes, size_t n);

typedef struct json_style {
    const char *item_sep; /* between array items and object members: ", " (Python) or "," */
    const char *key_sep;  /* between a key and its value: ": " or ":" */
    int indent;           /* > 0: one item per line, indented this many spaces a level
                             (then item_sep should be ","), as Python's json.dumps(indent=) */
} json_style;

extern const json_style llmm__json_style_python;  /* ", " and ": ", one line */
extern const json_style llmm__json_style_compact; /* "," and ":" */

/* Numbers keep their source literal, strings are escaped as JSON requires (", \, control
 * characters) and otherwise kept as UTF-8, members keep their order. */
void llmm__json_write(const json_doc *doc, size_t node, const json_style *style, json_sink_fn sink, void *ctx);
/* A JSON string literal of n bytes of UTF-8. */
void llmm__json_write_string(const char *s, size_t n, json_sink_fn sink, void *ctx);

#endif
