/* Llama 3.1 and 3.2 tool prompts (their templates give the same bytes for every case here):
 * a system turn with the knowledge and today's date, the tools pretty-printed into the first
 * user message, a call as the whole assistant message in bare JSON with "parameters", and a
 * result as an ipython turn holding the result JSON-encoded as a string. */
#include "text/chat_render.h"

#include <string.h>

#define HEADER(role) "<|start_header_id|>" role "<|end_header_id|>\n\n"
#define EOT "<|eot_id|>"

/* the templates' tojson(indent=4): Python's json.dumps(indent=4) */
static const json_style indent4 = {",", ": ", 4};

static int ascii_space(char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

/* Jinja's |trim, on ASCII whitespace (the cases here have no other at their ends). */
static void out_trimmed(chat_out *o, const char *s) {
    s = llmm__chat_text(s);
    size_t n = strlen(s);
    while (n && ascii_space(*s)) s++, n--;
    while (n && ascii_space(s[n - 1])) n--;
    llmm__chat_out_bytes(o, s, n);
}

static void out_header(chat_out *o, const char *role) {
    llmm__chat_out_str(o, "<|start_header_id|>");
    llmm__chat_out_str(o, role);
    llmm__chat_out_str(o, "<|end_header_id|>\n\n");
}

static llmm_status check_turns(const llmm_chat_request *r, size_t first, llmm_diag *d) {
    if (r->n_tools && first >= r->n_messages)
        return llmm__diag_fail(d, LLMM_ERR_INVALID_ARG,
                               "llama3: tools go into the first user message, and there is none (the template's "
                               "refusal)");
    for (size_t i = 0; i < r->n_messages; i++)
        if (r->messages[i].n_tool_calls > 1)
            return llmm__diag_fail(d, LLMM_ERR_INVALID_ARG,
                                   "llama3: message %zu has %zu calls; the template allows one call per turn", i,
                                   r->messages[i].n_tool_calls);
    return LLMM_OK;
}

llmm_status llmm__render_llama3(const llmm_chat_request *r, const parsed_request *p, chat_out *o, llmm_diag *d) {
    size_t i = r->n_messages && llmm__chat_is_role(&r->messages[0], "system") ? 1 : 0;
    llmm_status st = check_turns(r, i, d);
    if (st) return st;
    llmm__chat_out_str(o, "<|begin_of_text|>" HEADER("system"));
    if (r->n_tools) llmm__chat_out_str(o, "Environment: ipython\n");
    llmm__chat_out_str(o, "Cutting Knowledge Date: December 2023\nToday Date: ");
    llmm__chat_out_str(o, r->date_string ? r->date_string : "26 Jul 2024");
    llmm__chat_out_str(o, "\n\n");
    if (i) out_trimmed(o, r->messages[0].content);
    llmm__chat_out_str(o, EOT);
    if (r->n_tools) {
        llmm__chat_out_str(o, HEADER("user") "Given the following functions, please respond with a JSON for a function "
                              "call with its proper arguments that best answers the given prompt.\n\nRespond in the "
                              "format {\"name\": function name, \"parameters\": dictionary of argument name and its "
                              "value}.Do not use variables.\n\n");
        for (size_t t = 0; t < r->n_tools; t++) {
            llmm__chat_out_json(o, &p->tools[t], 0, &indent4);
            llmm__chat_out_str(o, "\n\n");
        }
        out_trimmed(o, r->messages[i++].content);
        llmm__chat_out_str(o, EOT);
    }
    for (; i < r->n_messages; i++) {
        const llmm_chat_turn *m = &r->messages[i];
        if (m->n_tool_calls) {
            llmm__chat_out_str(o, HEADER("assistant") "{\"name\": \"");
            llmm__chat_out_str(o, m->tool_calls[0].name);
            llmm__chat_out_str(o, "\", \"parameters\": ");
            llmm__chat_out_args(o, r, p, i, 0, &llmm__json_style_python);
            llmm__chat_out_str(o, "}" EOT);
        } else if (llmm__chat_is_role(m, "tool")) {
            llmm__chat_out_str(o, HEADER("ipython"));
            llmm__chat_out_json_string(o, m->content); /* a string is "iterable": tojson'd */
            llmm__chat_out_str(o, EOT);
        } else {
            out_header(o, m->role);
            out_trimmed(o, m->content);
            llmm__chat_out_str(o, EOT);
        }
    }
    if (r->add_generation_prompt) llmm__chat_out_str(o, HEADER("assistant"));
    return LLMM_OK;
}
