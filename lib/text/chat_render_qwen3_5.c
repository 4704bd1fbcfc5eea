/* Qwen3.5: ChatML turns like Qwen3, but the tool list heads the system turn (the caller's text
 * follows the format reminder), every content is trimmed, calls are XML-style blocks with one
 * <parameter=KEY> per argument, every assistant turn after the last real query carries a think
 * block (empty when there was no reasoning), and the generation prompt opens <think>. */
#include "text/chat_render.h"

#include <string.h>

#define TOOLS_HEAD "# Tools\n\nYou have access to the following functions:\n\n<tools>"
#define TOOLS_TAIL                                                                                            \
    "\n</tools>\n\nIf you choose to call a function ONLY reply in the following format with NO suffix:\n\n" \
    "<tool_call>\n<function=example_function_name>\n<parameter=example_parameter_1>\nvalue_1\n</parameter>\n" \
    "<parameter=example_parameter_2>\nThis is the value for the second parameter\nthat can span\nmultiple "  \
    "lines\n</parameter>\n</function>\n</tool_call>\n\n<IMPORTANT>\nReminder:\n- Function calls MUST follow " \
    "the specified format: an inner <function=...></function> block must be nested within "                \
    "<tool_call></tool_call> XML tags\n- Required parameters MUST be specified\n- You may provide optional "   \
    "reasoning for your function call in natural language BEFORE the function call, but NOT after\n- If "     \
    "there is no function call available, answer the question like normal with your current knowledge and "  \
    "do not tell the user about function calls\n</IMPORTANT>"

static chat_span trimmed(const char *s) { return llmm__chat_trim((chat_span){s, strlen(s)}); }

static int span_starts(chat_span t, const char *prefix) {
    size_t k = strlen(prefix);
    return t.n >= k && memcmp(t.s, prefix, k) == 0;
}

static int span_ends(chat_span t, const char *suffix) {
    size_t k = strlen(suffix);
    return t.n >= k && memcmp(t.s + t.n - k, suffix, k) == 0;
}

/* The template's last_query_index: the last user turn that is not tool responses. */
static int last_query_index(const llmm_chat_request *r, size_t *index) {
    for (size_t i = r->n_messages; i-- > 0;) {
        chat_span c = trimmed(llmm__chat_text(r->messages[i].content));
        if (llmm__chat_is_role(&r->messages[i], "user") &&
            !(span_starts(c, "<tool_response>") && span_ends(c, "</tool_response>"))) {
            *index = i;
            return 1;
        }
    }
    return 0;
}

static void out_span(chat_out *o, chat_span t) { llmm__chat_out_bytes(o, t.s, t.n); }

static void out_system_turn(chat_out *o, const llmm_chat_request *r, const parsed_request *p) {
    int has_system = llmm__chat_is_role(&r->messages[0], "system");
    chat_span system = trimmed(has_system ? llmm__chat_text(r->messages[0].content) : "");
    if (!r->n_tools) {
        if (!has_system) return;
        llmm__chat_out_str(o, "<|im_start|>system\n");
        out_span(o, system);
        llmm__chat_out_str(o, "<|im_end|>\n");
        return;
    }
    llmm__chat_out_str(o, "<|im_start|>system\n" TOOLS_HEAD);
    for (size_t i = 0; i < r->n_tools; i++) {
        llmm__chat_out_str(o, "\n");
        llmm__chat_out_json(o, &p->tools[i], 0, &llmm__json_style_python);
    }
    llmm__chat_out_str(o, TOOLS_TAIL);
    if (system.n) {
        llmm__chat_out_str(o, "\n\n");
        out_span(o, system);
    }
    llmm__chat_out_str(o, "<|im_end|>\n");
}

/* One argument as the template writes it: objects and arrays as tojson, anything else through
 * Jinja's |string (a string unquoted, numbers as written, Python's True, False, None). */
static void out_parameter_value(chat_out *o, const json_doc *args, size_t v) {
    const json_node *n = &args->nodes[v];
    switch (n->kind) {
    case JSON_STRING: llmm__chat_out_bytes(o, json_str(args, v), n->str_len); break;
    case JSON_NUMBER: llmm__chat_out_bytes(o, args->src + n->src, n->src_len); break;
    case JSON_TRUE: llmm__chat_out_str(o, "True"); break;
    case JSON_FALSE: llmm__chat_out_str(o, "False"); break;
    case JSON_NULL: llmm__chat_out_str(o, "None"); break;
    default: llmm__chat_out_json(o, args, v, &llmm__json_style_python); break;
    }
}

static llmm_status out_calls(chat_out *o, const llmm_chat_turn *m, const json_doc *args, int after_content,
                             size_t index, llmm_diag *d) {
    for (size_t k = 0; k < m->n_tool_calls; k++) {
        if (!args[k].n_nodes || args[k].nodes[0].kind != JSON_OBJECT)
            return llmm__diag_fail(d, LLMM_ERR_INVALID_ARG,
                                   "message %zu, call %zu: qwen3_5 writes each argument as a <parameter>, so the "
                                   "arguments must be a JSON object",
                                   index, k);
        llmm__chat_out_str(o, k ? "\n<tool_call>\n<function=" : after_content ? "\n\n<tool_call>\n<function="
                                                                               : "<tool_call>\n<function=");
        llmm__chat_out_str(o, m->tool_calls[k].name);
        llmm__chat_out_str(o, ">\n");
        for (size_t a = args[k].nodes[0].first; a != JSON_NONE; a = args[k].nodes[a].next) {
            llmm__chat_out_str(o, "<parameter=");
            llmm__chat_out_bytes(o, json_key(&args[k], a), args[k].nodes[a].key_len);
            llmm__chat_out_str(o, ">\n");
            out_parameter_value(o, &args[k], a);
            llmm__chat_out_str(o, "\n</parameter>\n");
        }
        llmm__chat_out_str(o, "</function>\n</tool_call>");
    }
    return LLMM_OK;
}

static llmm_status out_assistant(chat_out *o, const llmm_chat_request *r, const parsed_request *p, size_t i,
                                 size_t last_query, llmm_diag *d) {
    const llmm_chat_turn *m = &r->messages[i];
    chat_span reasoning, content;
    llmm__chat_split_reasoning(m, trimmed(llmm__chat_text(m->content)), &reasoning, &content);
    llmm__chat_out_str(o, "<|im_start|>assistant\n");
    if (i > last_query) {
        llmm__chat_out_str(o, "<think>\n");
        out_span(o, llmm__chat_trim(reasoning));
        llmm__chat_out_str(o, "\n</think>\n\n");
    }
    out_span(o, content);
    llmm_status st = out_calls(o, m, p->args[i], llmm__chat_trim(content).n > 0, i, d);
    llmm__chat_out_str(o, "<|im_end|>\n");
    return st;
}

llmm_status llmm__render_qwen3_5(const llmm_chat_request *r, const parsed_request *p, chat_out *o, llmm_diag *d) {
    size_t last_query = 0;
    if (!r->n_messages) return llmm__diag_fail(d, LLMM_ERR_INVALID_ARG, "No messages provided.");
    if (!last_query_index(r, &last_query))
        return llmm__diag_fail(d, LLMM_ERR_INVALID_ARG, "No user query found in messages.");
    out_system_turn(o, r, p);
    for (size_t i = 0; i < r->n_messages; i++) {
        const llmm_chat_turn *m = &r->messages[i];
        chat_span content = trimmed(llmm__chat_text(m->content));
        if (llmm__chat_is_role(m, "system")) {
            if (i > 0) return llmm__diag_fail(d, LLMM_ERR_INVALID_ARG, "System message must be at the beginning.");
        } else if (llmm__chat_is_role(m, "user")) {
            llmm__chat_out_str(o, "<|im_start|>user\n");
            out_span(o, content);
            llmm__chat_out_str(o, "<|im_end|>\n");
        } else if (llmm__chat_is_role(m, "assistant")) {
            llmm_status st = out_assistant(o, r, p, i, last_query, d);
            if (st) return st;
        } else { /* tool: consecutive results share one user turn */
            if (i > 0 && !llmm__chat_is_role(&r->messages[i - 1], "tool")) llmm__chat_out_str(o, "<|im_start|>user");
            llmm__chat_out_str(o, "\n<tool_response>\n");
            out_span(o, content);
            llmm__chat_out_str(o, "\n</tool_response>");
            if (i + 1 == r->n_messages || !llmm__chat_is_role(&r->messages[i + 1], "tool"))
                llmm__chat_out_str(o, "<|im_end|>\n");
        }
    }
    if (r->add_generation_prompt)
        llmm__chat_out_str(o, r->enable_thinking == 0 ? "<|im_start|>assistant\n<think>\n\n</think>\n\n"
                                                      : "<|im_start|>assistant\n<think>\n");
    return LLMM_OK;
}
