/* A model's output in a tool family's syntax, split into content, reasoning and calls.
 * Lenient like the reference's parser: a call cut off inside its arguments is still a call
 * (with the arguments as written so far), and text that does not form a call stays content. */
#ifndef LLMM_CHAT_PARSE_H
#define LLMM_CHAT_PARSE_H

#include <stddef.h>

#include "base/common.h"
#include "text/chat_tools.h"

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
    char *converted; /* arguments the parser rewrote as JSON (TOOL_SYNTAX_PYTHON_CALL) */
    size_t n_converted, cap_converted;
    /* Set by the caller and kept across parses: the parameters whose schema says string, as
     * records "TOOL\0PARAM\0" back to back (n_string_params bytes; NULL: no tools known). */
    const char *string_params;
    size_t n_string_params;
} chat_parse;

/* Parse text[0..n). final == 0: more text may follow, so a possible start of a marker at the
 * end is held back. thinking: the prompt left the model inside its reasoning. The arrays of
 * out are reused across calls (free with llmm__chat_parse_free). NO_MEMORY only. */
llmm_status llmm__chat_parse(const tool_family_info *f, int thinking, const char *text, size_t n, int final,
                             chat_parse *out);
void llmm__chat_parse_free(chat_parse *p);

/* The string_params records for these tools (see chat_parse): owned by the caller (llmm__mem_free),
 * *out NULL when no parameter is a string. INVALID_ARG with the reason in d for a tool refused by
 * llmm__chat_tool_check; NO_MEMORY. */
llmm_status llmm__chat_string_params(const llmm_tool *tools, size_t n_tools, char **out, size_t *n_out, llmm_diag *d);

#endif
