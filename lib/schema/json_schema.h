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

/* How a call syntax writes its arguments, for llmm__json_schema_to_call_gbnf. */
typedef enum schema_call_syntax {
    /* LFM2: Python keyword arguments, `location="Paris", days=2` (the inside of the call's
     * parentheses); the values stay JSON, which Python-literal parsers read too */
    SCHEMA_CALL_KWARGS,
    /* Qwen3.5: `<parameter=KEY>\nVALUE\n</parameter>\n` per argument; a string value its raw text
     * (no '<'), any other value compact JSON */
    SCHEMA_CALL_XML_PARAMS,
    /* Gemma 4: `{key:value,...}` with bare keys, strings between <|"|> marks and unescaped (no
     * '<' inside), numbers, true, false, null as JSON */
    SCHEMA_CALL_GEMMA4,
} schema_call_syntax;

/* The same, compact, with the root written as a call syntax writes its arguments. INVALID_ARG
 * beyond the above for a root that is no object schema, a property name the syntax cannot
 * write, a "$ref" to the root where the root is no value of its own (keyword arguments,
 * parameter blocks), a "pattern" on a string written without escapes, and a Qwen3.5 parameter
 * that may be a string or another type. */
llmm_status llmm__json_schema_to_call_gbnf(const char *schema, size_t len, schema_call_syntax syntax, char **gbnf_out,
                                           char *err, size_t err_size);

/* The built-in grammar for any JSON value (objects, arrays, strings, numbers, true, false,
 * null; whitespace between tokens bounded), as static GBNF text with a `root` rule. */
const char *llmm__json_any_value_gbnf(void);

#endif
