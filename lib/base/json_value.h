/* A strict JSON reader for untrusted text (RFC 8259): the whole document into a tree of
 * nodes, nesting bounded, errors with line and column. */
#ifndef LLMM_JSON_VALUE_H
#define LLMM_JSON_VALUE_H

#include <stddef.h>

#include "llmmini.h"

/* Deeper documents are refused, so every walk of the tree may recurse. */
#define JSON_MAX_DEPTH 64
#define JSON_NONE ((size_t)-1)

typedef enum json_kind {
    JSON_NULL,
    JSON_FALSE,
    JSON_TRUE,
    JSON_NUMBER,
    JSON_STRING,
    JSON_ARRAY,
    JSON_OBJECT
} json_kind;

/* Nodes refer to each other by index into json_doc.nodes; children form a list. */
typedef struct json_node {
    json_kind kind;
    size_t src, src_len;     /* the value's text in the source (a number's literal) */
    size_t str, str_len;     /* JSON_STRING: decoded UTF-8 bytes in json_doc.strings */
    size_t key, key_len;     /* member of an object: its decoded key in json_doc.strings */
    size_t first, next;      /* first child, next sibling; JSON_NONE when none */
    size_t n_children;
} json_node;

typedef struct json_doc {
    const char *src;
    size_t src_len;
    json_node *nodes; /* nodes[0] is the root */
    size_t n_nodes, cap_nodes;
    char *strings; /* decoded strings and keys; not NUL-separated, use the lengths */
    size_t n_strings, cap_strings;
} json_doc;

/* Parse src[0..len) (it need not be NUL-terminated; src must outlive doc). Rejects what RFC
 * 8259 rejects (trailing commas, leading zeros, bare control characters, lone surrogates,
 * invalid UTF-8, trailing text), duplicate keys in one object and nesting deeper than
 * JSON_MAX_DEPTH. On failure err holds "line L, column C: what" and doc holds nothing.
 * Returns LLMM_OK, LLMM_ERR_INVALID_ARG or LLMM_ERR_NO_MEMORY. */
llmm_status llmm__json_parse(json_doc *doc, const char *src, size_t len, char *err, size_t err_size);
void llmm__json_doc_free(json_doc *doc);

/* The member named key of object node obj, or JSON_NONE. */
size_t llmm__json_member(const json_doc *doc, size_t obj, const char *key);
/* The key's bytes of member node m. */
static inline const char *json_key(const json_doc *doc, size_t m) { return doc->strings + doc->nodes[m].key; }
/* The decoded bytes of string node s. */
static inline const char *json_str(const json_doc *doc, size_t s) { return doc->strings + doc->nodes[s].str; }

#endif
