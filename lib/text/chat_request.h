/* A tool-calling request (llmm_chat_request) checked and parsed once, and the pieces every
 * tool family writes the same way (JSON in the templates' tojson spacing, the tool objects the
 * reference rebuilds). The families' renderers (chat_render_*.c) build on these. */
#ifndef LLMM_CHAT_REQUEST_H
#define LLMM_CHAT_REQUEST_H

#include <stddef.h>

#include "base/common.h"
#include "base/json_value.h"
#include "base/json_write.h"
#include "text/chat.h"

typedef struct parsed_request {
    json_doc *tools;  /* per tool: {"type": "function", "function": {"name", "description",
                         "parameters"}}, the object the reference rebuilds (parameters {} when
                         NULL), ready for each template's tojson */
    char **tool_text; /* the text those docs were parsed from (they point into it) */
    json_doc **args;  /* per message, per call; n_nodes 0 when the text is not JSON */
    size_t n_tools, n_messages;
} parsed_request;

/* A tool definition's checks (name, schema size, JSON, object, depth): INVALID_ARG with the
 * reason, NO_MEMORY. */
llmm_status llmm__chat_tool_check(const llmm_tool *t, size_t i, llmm_diag *d);

/* INVALID_ARG with the reason (a bad role, tool name, schema or call), NO_MEMORY. On failure
 * p still needs llmm__chat_request_free. */
llmm_status llmm__chat_request_parse(const llmm_chat_request *r, parsed_request *p, llmm_diag *d);
void llmm__chat_request_free(parsed_request *p, const llmm_chat_request *r);

/* A family's renderer: writes the request into o, or refuses what its template refuses. */
typedef llmm_status (*chat_render_fn)(const llmm_chat_request *r, const parsed_request *p, chat_out *o,
                                      llmm_diag *d);

const char *llmm__chat_text(const char *s); /* s, or "" for NULL */
/* What the renderers' trim removes: the C locale's whitespace (Jinja's trim also strips
 * Unicode spaces, which no reference case holds). */
int llmm__chat_is_trim_space(char c);
int llmm__chat_is_role(const llmm_chat_turn *m, const char *role);
void llmm__chat_out_json_string(chat_out *o, const char *s);
/* node of doc as JSON text in style. */
void llmm__chat_out_json(chat_out *o, const json_doc *doc, size_t node, const json_style *style);
/* Call k of message i: its arguments re-serialized in style when they parse, else verbatim. */
void llmm__chat_out_args(chat_out *o, const llmm_chat_request *r, const parsed_request *p, size_t i, size_t k,
                         const json_style *style);

#endif
