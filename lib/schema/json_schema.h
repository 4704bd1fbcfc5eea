/* JSON Schema (a common subset) to a GBNF grammar whose sentences are JSON texts that
 * validate against the schema. The subset and its limits: docs/grammars.md, "JSON Schema". */
#ifndef LLMM_JSON_SCHEMA_H
#define LLMM_JSON_SCHEMA_H

#include <stddef.h>

#include "llmmini.h"

/* Convert schema[0..len) (JSON text, need not be NUL-terminated) into GBNF text with a
 * `root` rule. On LLMM_OK *gbnf_out is a NUL-terminated string owned by the caller (release
 * with free()). On failure *gbnf_out is NULL and err (when err_size > 0) holds a message:
 * LLMM_ERR_INVALID_ARG for malformed JSON ("JSON error at line L, column C: ..."), for a
 * keyword outside the subset ("unsupported keyword 'allOf' at #/properties/a") or a schema
 * that cannot be expressed; LLMM_ERR_NO_MEMORY when an allocation fails. The input is
 * untrusted: nesting is bounded and nothing recurses without a limit. Thread-safe (no
 * shared state). */
llmm_status llmm__json_schema_to_gbnf(const char *schema, size_t len, char **gbnf_out, char *err, size_t err_size);
/* The same with a choice of whitespace between tokens: compact != 0 allows none (ws ::= ""),
 * 0 the bounded free whitespace above (the reference converter's form). */
llmm_status llmm__json_schema_to_gbnf_ws(const char *schema, size_t len, int compact, char **gbnf_out, char *err,
                                         size_t err_size);

/* The same, compact, with the root written as Python keyword arguments instead of a JSON
 * object: `location="Paris", days=2` (the inside of an LFM2 call's parentheses); the values
 * stay JSON, which Python-literal parsers read too (true/false/null as the parser allows).
 * INVALID_ARG beyond the above for a root that is no object schema, a property name that is no
 * Python identifier, and a "$ref" to the root. */
llmm_status llmm__json_schema_to_kwargs_gbnf(const char *schema, size_t len, char **gbnf_out, char *err,
                                             size_t err_size);

/* The built-in grammar for any JSON value (objects, arrays, strings, numbers, true, false,
 * null; whitespace between tokens bounded), as static GBNF text with a `root` rule. */
const char *llmm__json_any_value_gbnf(void);

#endif
