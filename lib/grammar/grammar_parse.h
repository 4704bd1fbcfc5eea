/* GBNF text to the rule tables of grammar_rules.h: groups and repetitions become generated
 * rules; undefined rules and left recursion are refused. */
#ifndef LLMM_GRAMMAR_PARSE_H
#define LLMM_GRAMMAR_PARSE_H

#include "grammar_rules.h"

/* Parse GBNF text (len bytes, need not be NUL-terminated) with start rule root (NULL = "root").
 * Errors: INVALID_ARG with "line L, column C: ..." in d (columns count code points from 1),
 * for syntax errors, undefined rules, a missing start rule and left recursion; NO_MEMORY. */
llmm_status llmm__grammar_parse(const char *text, size_t len, const char *root, const llmm_allocator *alloc,
                          grammar_rules *out, llmm_diag *d);

#endif
