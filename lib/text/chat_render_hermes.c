/* Hermes 3 (NousResearch's tool-use template): a fixed system turn that restates each tool with
 * a Python signature and an Args list built from its schema, then the conversation in ChatML;
 * an assistant turn that calls writes only its <tool_call> blocks, and tool results share one
 * `tool` turn. Written as the template does, including its unescaped description and its
 * missing newlines after tool turns. */
#include "text/chat_render.h"

#include <string.h>

#define HERMES_HEAD                                                                                          \
    "<|begin_of_text|><|im_start|>system\nYou are a function calling AI model. You are provided with "     \
    "function signatures within <tools></tools> XML tags. You may call one or more functions to assist "  \
    "with the user query. Don't make assumptions about what values to plug into functions. Here are the " \
    "available tools: <tools> "
#define HERMES_TAIL                                                                                              \
    " </tools>Use the following pydantic model json schema for each tool call you will make: {\"properties\": " \
    "{\"name\": {\"title\": \"Name\", \"type\": \"string\"}, \"arguments\": {\"title\": \"Arguments\", "       \
    "\"type\": \"object\"}}, \"required\": [\"name\", \"arguments\"], \"title\": \"FunctionCall\", \"type\": " \
    "\"object\"}}\nFor each function call return a json object with function name and arguments within "      \
    "<tool_call></tool_call> XML tags as follows:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "   \
    "<args-dict>}\n</tool_call><|im_end|>\n"

static int str_is(const json_doc *doc, size_t node, const char *word) {
    return node != JSON_NONE && doc->nodes[node].kind == JSON_STRING && doc->nodes[node].str_len == strlen(word) &&
           memcmp(json_str(doc, node), word, strlen(word)) == 0;
}

static void out_str_node(chat_out *o, const json_doc *doc, size_t node) {
    if (node != JSON_NONE && doc->nodes[node].kind == JSON_STRING)
        llmm__chat_out_bytes(o, json_str(doc, node), doc->nodes[node].str_len);
}

/* The template's json_to_python_type macro over the schema node spec. Jinja iterates a string
 * by its characters, so an unknown type name becomes a Union of one Any per character, as the
 * template writes it; an array's items reach the macro as a list of pairs, hence list[Any]. */
static void out_python_type(chat_out *o, const json_doc *doc, size_t spec) {
    static const char *const basic[][2] = {{"string", "str"}, {"number", "float"}, {"integer", "int"}, {"boolean", "bool"}};
    size_t type = spec != JSON_NONE && doc->nodes[spec].kind == JSON_OBJECT ? llmm__json_member(doc, spec, "type")
                                                                            : JSON_NONE;
    for (size_t i = 0; i < sizeof basic / sizeof *basic; i++)
        if (str_is(doc, type, basic[i][0])) {
            llmm__chat_out_str(o, basic[i][1]);
            return;
        }
    if (str_is(doc, type, "array")) {
        llmm__chat_out_str(o, "list[Any]");
    } else if (str_is(doc, type, "object")) {
        size_t extra = llmm__json_member(doc, spec, "additionalProperties");
        if (extra == JSON_NONE) {
            llmm__chat_out_str(o, "dict");
            return;
        }
        llmm__chat_out_str(o, "dict[str, ");
        out_python_type(o, doc, extra);
        llmm__chat_out_str(o, "]");
    } else if (type != JSON_NONE && (doc->nodes[type].kind == JSON_ARRAY || doc->nodes[type].kind == JSON_STRING)) {
        llmm__chat_out_str(o, "Union[");
        if (doc->nodes[type].kind == JSON_STRING) {
            for (size_t i = 0; i < doc->nodes[type].str_len; i++) llmm__chat_out_str(o, i ? ",Any" : "Any");
        } else {
            size_t k = 0;
            for (size_t t = doc->nodes[type].first; t != JSON_NONE; t = doc->nodes[t].next, k++) {
                if (k) llmm__chat_out_str(o, ",");
                int known = 0;
                for (size_t i = 0; i < sizeof basic / sizeof *basic && !known; i++)
                    if (str_is(doc, t, basic[i][0])) llmm__chat_out_str(o, basic[i][1]), known = 1;
                if (!known) llmm__chat_out_str(o, str_is(doc, t, "object") ? "dict" : str_is(doc, t, "array") ? "list[Any]" : "Any");
            }
        }
        llmm__chat_out_str(o, "]");
    } else {
        llmm__chat_out_str(o, "Any");
    }
}

static int is_trim_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r' || c == '\f' || c == '\v'; }

/* A parameter's description, trimmed as Jinja's trim does (ASCII whitespace here). */
static void out_trimmed(chat_out *o, const json_doc *doc, size_t node) {
    if (node == JSON_NONE || doc->nodes[node].kind != JSON_STRING) return;
    const char *s = json_str(doc, node);
    size_t a = 0, b = doc->nodes[node].str_len;
    while (a < b && is_trim_space(s[a])) a++;
    while (b > a && is_trim_space(s[b - 1])) b--;
    llmm__chat_out_bytes(o, s + a, b - a);
}

static void out_tool(chat_out *o, const json_doc *doc) {
    const size_t fn = llmm__json_member(doc, 0, "function");
    const size_t name = llmm__json_member(doc, fn, "name"), params = llmm__json_member(doc, fn, "parameters");
    const size_t props = params != JSON_NONE && doc->nodes[params].kind == JSON_OBJECT
                             ? llmm__json_member(doc, params, "properties")
                             : JSON_NONE;
    const size_t first = props != JSON_NONE && doc->nodes[props].kind == JSON_OBJECT ? doc->nodes[props].first : JSON_NONE;
    llmm__chat_out_str(o, "{\"type\": \"function\", \"function\": {\"name\": \"");
    out_str_node(o, doc, name);
    llmm__chat_out_str(o, "\", \"description\": \"");
    out_str_node(o, doc, name);
    llmm__chat_out_str(o, "(");
    for (size_t m = first; m != JSON_NONE; m = doc->nodes[m].next) {
        llmm__chat_out_bytes(o, json_key(doc, m), doc->nodes[m].key_len);
        llmm__chat_out_str(o, ": ");
        out_python_type(o, doc, m);
        if (doc->nodes[m].next != JSON_NONE) llmm__chat_out_str(o, ", ");
    }
    llmm__chat_out_str(o, ") - ");
    out_str_node(o, doc, llmm__json_member(doc, fn, "description"));
    llmm__chat_out_str(o, "\n\n");
    for (size_t m = first; m != JSON_NONE; m = doc->nodes[m].next) {
        if (m == first) llmm__chat_out_str(o, "    Args:\n");
        llmm__chat_out_str(o, "        ");
        llmm__chat_out_bytes(o, json_key(doc, m), doc->nodes[m].key_len);
        llmm__chat_out_str(o, "(");
        out_python_type(o, doc, m);
        llmm__chat_out_str(o, "): ");
        out_trimmed(o, doc, doc->nodes[m].kind == JSON_OBJECT ? llmm__json_member(doc, m, "description") : JSON_NONE);
    }
    llmm__chat_out_str(o, "\", \"parameters\": ");
    if (first == JSON_NONE) llmm__chat_out_str(o, "{}");
    else llmm__chat_out_json(o, doc, params, &llmm__json_style_python);
    llmm__chat_out_str(o, "}");
}

static void out_calls(chat_out *o, const llmm_chat_request *r, const parsed_request *p, size_t i) {
    const llmm_chat_turn *m = &r->messages[i];
    llmm__chat_out_str(o, "<|im_start|>assistant");
    for (size_t k = 0; k < m->n_tool_calls; k++) {
        llmm__chat_out_str(o, "\n<tool_call>\n{\"name\": \"");
        llmm__chat_out_str(o, m->tool_calls[k].name);
        llmm__chat_out_str(o, "\", \"arguments\": ");
        llmm__chat_out_args(o, r, p, i, k, &llmm__json_style_python);
        llmm__chat_out_str(o, "}\n</tool_call>");
    }
    llmm__chat_out_str(o, "<|im_end|>\n");
}

static void out_tool_result(chat_out *o, const llmm_chat_request *r, size_t i) {
    const int last = i + 1 == r->n_messages;
    if (i > 0 && !llmm__chat_is_role(&r->messages[i - 1], "tool")) llmm__chat_out_str(o, "<|im_start|>tool\n");
    llmm__chat_out_str(o, "<tool_response>\n");
    llmm__chat_out_str(o, llmm__chat_text(r->messages[i].content));
    llmm__chat_out_str(o, last ? "\n</tool_response>" : "\n</tool_response>\n");
    if (last || !llmm__chat_is_role(&r->messages[i + 1], "tool")) llmm__chat_out_str(o, "<|im_end|>");
}

llmm_status llmm__render_hermes3(const llmm_chat_request *r, const parsed_request *p, chat_out *o, llmm_diag *d) {
    (void)d;
    llmm__chat_out_str(o, HERMES_HEAD);
    for (size_t i = 0; i < r->n_tools; i++) {
        if (i) llmm__chat_out_str(o, "\n");
        out_tool(o, &p->tools[i]);
    }
    llmm__chat_out_str(o, HERMES_TAIL);
    for (size_t i = 0; i < r->n_messages; i++) {
        const llmm_chat_turn *m = &r->messages[i];
        if (llmm__chat_is_role(m, "assistant") && m->n_tool_calls) {
            out_calls(o, r, p, i);
        } else if (llmm__chat_is_role(m, "tool")) {
            out_tool_result(o, r, i);
        } else {
            llmm__chat_out_str(o, "<|im_start|>");
            llmm__chat_out_str(o, m->role);
            llmm__chat_out_str(o, "\n");
            llmm__chat_out_str(o, llmm__chat_text(m->content));
            llmm__chat_out_str(o, "<|im_end|>\n");
        }
    }
    if (r->add_generation_prompt) llmm__chat_out_str(o, "<|im_start|>assistant\n");
    return LLMM_OK;
}
