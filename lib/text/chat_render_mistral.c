/* Mistral Nemo tool prompts: no system turn (the system text joins the last user message when
 * that message ends the conversation), [AVAILABLE_TOOLS] right before the last user message,
 * calls as a [TOOL_CALLS] JSON list with 9-character ids, results as [TOOL_RESULTS] objects
 * with the result pasted raw. The template enforces user/assistant alternation and the id
 * length; llmmini refuses the same requests, with the template's reasons. */
#include "text/chat_render.h"

#include <string.h>

static const int id_length = 9; /* the template refuses any other */

static llmm_status check_turns(const llmm_chat_request *r, size_t first, llmm_diag *d) {
    size_t turn = 0;
    for (size_t i = first; i < r->n_messages; i++) {
        const llmm_chat_turn *m = &r->messages[i];
        int is_user = llmm__chat_is_role(m, "user");
        if (!is_user && !llmm__chat_is_role(m, "assistant") && !llmm__chat_is_role(m, "tool"))
            return llmm__diag_fail(d, LLMM_ERR_INVALID_ARG,
                                   "mistral_nemo: message %zu: only user and assistant roles, with an optional first "
                                   "system message", i);
        for (size_t k = 0; k < m->n_tool_calls; k++)
            if (!m->tool_calls[k].id || strlen(m->tool_calls[k].id) != (size_t)id_length)
                return llmm__diag_fail(d, LLMM_ERR_INVALID_ARG, "mistral_nemo: message %zu: call ids must be %d "
                                       "characters", i, id_length);
        if (llmm__chat_is_role(m, "tool") &&
            (!m->tool_call_id || strlen(m->tool_call_id) != (size_t)id_length))
            return llmm__diag_fail(d, LLMM_ERR_INVALID_ARG, "mistral_nemo: message %zu: tool_call_id must be %d "
                                   "characters", i, id_length);
        if (llmm__chat_is_role(m, "tool") || m->n_tool_calls) continue;
        if (is_user != (turn % 2 == 0))
            return llmm__diag_fail(d, LLMM_ERR_INVALID_ARG,
                                   "mistral_nemo: message %zu: after the optional system message, roles must "
                                   "alternate user/assistant", i);
        turn++;
    }
    return LLMM_OK;
}

/* Each tool as the template writes it: string members pasted between quotes unescaped, the
 * parameters through tojson. */
static void out_tools(chat_out *o, const llmm_chat_request *r, const parsed_request *p) {
    llmm__chat_out_str(o, "[AVAILABLE_TOOLS][");
    for (size_t t = 0; t < r->n_tools; t++) {
        const json_doc *doc = &p->tools[t];
        size_t fn = llmm__json_member(doc, 0, "function");
        llmm__chat_out_str(o, "{\"type\": \"function\", \"function\": {\"name\": \"");
        llmm__chat_out_str(o, r->tools[t].name);
        llmm__chat_out_str(o, "\", \"description\": \"");
        llmm__chat_out_str(o, llmm__chat_text(r->tools[t].description));
        llmm__chat_out_str(o, "\", \"parameters\": ");
        llmm__chat_out_json(o, doc, llmm__json_member(doc, fn, "parameters"), &llmm__json_style_python);
        llmm__chat_out_str(o, t + 1 < r->n_tools ? "}}, " : "}}]");
    }
    llmm__chat_out_str(o, "[/AVAILABLE_TOOLS]");
}

static void out_calls(chat_out *o, const llmm_chat_request *r, const parsed_request *p, size_t i) {
    const llmm_chat_turn *m = &r->messages[i];
    llmm__chat_out_str(o, "[TOOL_CALLS][");
    for (size_t k = 0; k < m->n_tool_calls; k++) {
        llmm__chat_out_str(o, "{\"name\": ");
        llmm__chat_out_json_string(o, m->tool_calls[k].name);
        llmm__chat_out_str(o, ", \"arguments\": ");
        if (p->args[i][k].n_nodes) llmm__chat_out_args(o, r, p, i, k, &llmm__json_style_python);
        else llmm__chat_out_json_string(o, m->tool_calls[k].arguments); /* a string stays one */
        llmm__chat_out_str(o, ", \"id\": \"");
        llmm__chat_out_str(o, m->tool_calls[k].id);
        llmm__chat_out_str(o, k + 1 < m->n_tool_calls ? "\"}, " : "\"}]</s>");
    }
}

llmm_status llmm__render_mistral_nemo(const llmm_chat_request *r, const parsed_request *p, chat_out *o,
                                      llmm_diag *d) {
    size_t first = r->n_messages && llmm__chat_is_role(&r->messages[0], "system") ? 1 : 0;
    llmm_status st = check_turns(r, first, d);
    if (st) return st;
    size_t last_user = SIZE_MAX;
    for (size_t i = first; i < r->n_messages; i++)
        if (llmm__chat_is_role(&r->messages[i], "user")) last_user = i;
    llmm__chat_out_str(o, "<s>");
    for (size_t i = first; i < r->n_messages; i++) {
        const llmm_chat_turn *m = &r->messages[i];
        if (llmm__chat_is_role(m, "user")) {
            if (r->n_tools && i == last_user) out_tools(o, r, p);
            llmm__chat_out_str(o, "[INST]");
            if (first && i + 1 == r->n_messages) {
                llmm__chat_out_str(o, llmm__chat_text(r->messages[0].content));
                llmm__chat_out_str(o, "\n\n");
            }
            llmm__chat_out_str(o, llmm__chat_text(m->content));
            llmm__chat_out_str(o, "[/INST]");
        } else if (m->n_tool_calls) {
            out_calls(o, r, p, i);
        } else if (llmm__chat_is_role(m, "assistant")) {
            llmm__chat_out_str(o, llmm__chat_text(m->content));
            llmm__chat_out_str(o, "</s>");
        } else {
            llmm__chat_out_str(o, "[TOOL_RESULTS]{\"content\": ");
            llmm__chat_out_str(o, llmm__chat_text(m->content));
            llmm__chat_out_str(o, ", \"call_id\": \"");
            llmm__chat_out_str(o, m->tool_call_id);
            llmm__chat_out_str(o, "\"}[/TOOL_RESULTS]");
        }
    }
    return LLMM_OK; /* no generation prompt: the text already ends where the model answers */
}
