/* The families whose templates share one shape: a system turn carrying the tool list as JSON
 * lines in <tools>, calls as JSON in <tool_call> blocks, results as <tool_response> blocks in
 * a user turn (Qwen 2.5, Qwen3, Granite 4). Each is a row of the templates' own strings over
 * one renderer. */
#include "text/chat_render.h"

#include <string.h>

typedef struct tagged_format {
    const char *role_open;       /* before the role name */
    const char *role_close;      /* after it, where the content starts */
    const char *turn_end;        /* after a turn */
    const char *tool_group_open; /* opens the user turn that carries a run of tool results */
    const char *default_system;  /* written when the request has no system text (NULL: none) */
    int default_with_tools;      /* the default system text also heads the tool list */
    const char *tools_head;      /* before the tool lines, after the system text and "\n\n" */
    const char *tools_tail;      /* after them */
    int think_history;           /* Qwen3: assistant turns after the last query carry <think> */
    const char *no_think_gen;    /* appended to the generation prompt when thinking is off */
} tagged_format;

#define QWEN_TOOLS_HEAD                                                                    \
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"  \
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>"
#define QWEN_TOOLS_TAIL                                                                                    \
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments within " \
    "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "         \
    "<args-json-object>}\n</tool_call>"

static const tagged_format qwen2_5_format = {
    .role_open = "<|im_start|>", .role_close = "\n", .turn_end = "<|im_end|>\n",
    .tool_group_open = "<|im_start|>user",
    .default_system = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.",
    .default_with_tools = 1, .tools_head = QWEN_TOOLS_HEAD, .tools_tail = QWEN_TOOLS_TAIL};

static const tagged_format qwen3_format = {
    .role_open = "<|im_start|>", .role_close = "\n", .turn_end = "<|im_end|>\n",
    .tool_group_open = "<|im_start|>user", .tools_head = QWEN_TOOLS_HEAD, .tools_tail = QWEN_TOOLS_TAIL,
    .think_history = 1, .no_think_gen = "<think>\n\n</think>\n\n"};

static const tagged_format granite4_format = {
    .role_open = "<|start_of_role|>", .role_close = "<|end_of_role|>", .turn_end = "<|end_of_text|>\n",
    .tool_group_open = "<|start_of_role|>user<|end_of_role|>",
    .default_system = "You are a helpful assistant. Please ensure responses are professional, accurate, and safe.",
    .tools_head = "You are a helpful assistant with access to the following tools. You may call one or more "
                  "tools to assist with the user query.\n\nYou are provided with function signatures within "
                  "<tools></tools> XML tags:\n<tools>",
    .tools_tail = "\n</tools>\n\nFor each tool call, return a json object with function name and arguments "
                  "within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, "
                  "\"arguments\": <args-json-object>}\n</tool_call>. If a tool does not exist in the provided "
                  "list of tools, notify the user that you do not have the ability to fulfill the request."};

static void out_turn_open(chat_out *o, const tagged_format *f, const char *role) {
    llmm__chat_out_str(o, f->role_open);
    llmm__chat_out_str(o, role);
    llmm__chat_out_str(o, f->role_close);
}

static void out_system_turn(chat_out *o, const tagged_format *f, const llmm_chat_request *r, const parsed_request *p) {
    const char *system = r->n_messages && llmm__chat_is_role(&r->messages[0], "system") ? llmm__chat_text(r->messages[0].content) : NULL;
    if (!r->n_tools) {
        if (!system && !f->default_system) return;
        if (system && !*system && !f->default_with_tools && f->default_system) system = NULL; /* Granite: '' is none */
        out_turn_open(o, f, "system");
        llmm__chat_out_str(o, system ? system : f->default_system);
        llmm__chat_out_str(o, f->turn_end);
        return;
    }
    out_turn_open(o, f, "system");
    if (!system && f->default_with_tools) system = f->default_system;
    if (system) {
        llmm__chat_out_str(o, system);
        llmm__chat_out_str(o, "\n\n");
    }
    llmm__chat_out_str(o, f->tools_head);
    for (size_t i = 0; i < r->n_tools; i++) {
        llmm__chat_out_str(o, "\n");
        llmm__chat_out_json(o, &p->tools[i], 0, &llmm__json_style_python);
    }
    llmm__chat_out_str(o, f->tools_tail);
    llmm__chat_out_str(o, f->turn_end);
}

static int starts_with(const char *s, const char *prefix) { return strncmp(s, prefix, strlen(prefix)) == 0; }

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && memcmp(s + n - k, suffix, k) == 0;
}

/* Qwen3: the last user message that is a real query, not tool responses pasted as a user turn. */
static size_t last_query_index(const llmm_chat_request *r) {
    for (size_t i = r->n_messages; i-- > 0;) {
        const llmm_chat_turn *m = &r->messages[i];
        const char *c = llmm__chat_text(m->content);
        if (llmm__chat_is_role(m, "user") && !(starts_with(c, "<tool_response>") && ends_with(c, "</tool_response>"))) return i;
    }
    return r->n_messages - 1;
}

static chat_span strip_newlines(chat_span t, int front, int back) {
    while (front && t.n && t.s[0] == '\n') t.s++, t.n--;
    while (back && t.n && t.s[t.n - 1] == '\n') t.n--;
    return t;
}

static const char *first_occurrence(const char *s, size_t n, const char *needle) {
    size_t k = strlen(needle);
    for (size_t i = 0; i + k <= n; i++)
        if (memcmp(s + i, needle, k) == 0) return s + i;
    return NULL;
}

static const char *last_occurrence(const char *s, size_t n, const char *needle) {
    const char *found = NULL;
    size_t k = strlen(needle);
    for (size_t i = 0; i + k <= n; i++)
        if (memcmp(s + i, needle, k) == 0) found = s + i;
    return found;
}

chat_span llmm__chat_trim(chat_span t) {
    while (t.n && llmm__chat_is_trim_space(*t.s)) t.s++, t.n--;
    while (t.n && llmm__chat_is_trim_space(t.s[t.n - 1])) t.n--;
    return t;
}

void llmm__chat_split_reasoning(const llmm_chat_turn *m, chat_span c, chat_span *reasoning, chat_span *content) {
    *content = c;
    *reasoning = (chat_span){"", 0};
    if (m->reasoning_content) {
        *reasoning = (chat_span){m->reasoning_content, strlen(m->reasoning_content)};
        return;
    }
    const char *first_end = first_occurrence(c.s, c.n, "</think>");
    if (!first_end) return;
    const char *last_end = last_occurrence(c.s, c.n, "</think>");
    *content = strip_newlines((chat_span){last_end + 8, (size_t)(c.s + c.n - (last_end + 8))}, 1, 0);
    chat_span before = strip_newlines((chat_span){c.s, (size_t)(first_end - c.s)}, 0, 1);
    const char *open = last_occurrence(before.s, before.n, "<think>");
    if (open) before = (chat_span){open + 7, before.n - (size_t)(open + 7 - before.s)};
    *reasoning = strip_newlines(before, 1, 0);
}

static void out_assistant(chat_out *o, const tagged_format *f, const llmm_chat_request *r, const parsed_request *p,
                          size_t i) {
    const llmm_chat_turn *m = &r->messages[i];
    chat_span reasoning = {"", 0}, content = {llmm__chat_text(m->content), strlen(llmm__chat_text(m->content))};
    out_turn_open(o, f, "assistant");
    if (f->think_history) {
        llmm__chat_split_reasoning(m, content, &reasoning, &content);
        if (i > last_query_index(r) && (i + 1 == r->n_messages || reasoning.n)) {
            chat_span inner = strip_newlines(reasoning, 1, 1);
            llmm__chat_out_str(o, "<think>\n");
            llmm__chat_out_bytes(o, inner.s, inner.n);
            llmm__chat_out_str(o, "\n</think>\n\n");
            content = strip_newlines(content, 1, 0);
        }
    }
    llmm__chat_out_bytes(o, content.s, content.n);
    for (size_t k = 0; k < m->n_tool_calls; k++) {
        if (k > 0 || content.n) llmm__chat_out_str(o, "\n");
        llmm__chat_out_str(o, "<tool_call>\n{\"name\": \"");
        llmm__chat_out_str(o, m->tool_calls[k].name);
        llmm__chat_out_str(o, "\", \"arguments\": ");
        llmm__chat_out_args(o, r, p, i, k, &llmm__json_style_python);
        llmm__chat_out_str(o, "}\n</tool_call>");
    }
    llmm__chat_out_str(o, f->turn_end);
}

static void render_tagged(const tagged_format *f, const llmm_chat_request *r, const parsed_request *p, chat_out *o) {
    out_system_turn(o, f, r, p);
    for (size_t i = 0; i < r->n_messages; i++) {
        const llmm_chat_turn *m = &r->messages[i];
        if (llmm__chat_is_role(m, "user") || (llmm__chat_is_role(m, "system") && i > 0)) {
            out_turn_open(o, f, m->role);
            llmm__chat_out_str(o, llmm__chat_text(m->content));
            llmm__chat_out_str(o, f->turn_end);
        } else if (llmm__chat_is_role(m, "assistant")) {
            out_assistant(o, f, r, p, i);
        } else if (llmm__chat_is_role(m, "tool")) {
            if (i == 0 || !llmm__chat_is_role(&r->messages[i - 1], "tool")) llmm__chat_out_str(o, f->tool_group_open);
            llmm__chat_out_str(o, "\n<tool_response>\n");
            llmm__chat_out_str(o, llmm__chat_text(m->content));
            llmm__chat_out_str(o, "\n</tool_response>");
            if (i + 1 == r->n_messages || !llmm__chat_is_role(&r->messages[i + 1], "tool")) llmm__chat_out_str(o, f->turn_end);
        }
    }
    if (r->add_generation_prompt) {
        out_turn_open(o, f, "assistant");
        if (r->enable_thinking == 0) llmm__chat_out_str(o, f->no_think_gen);
    }
}

llmm_status llmm__render_qwen2_5(const llmm_chat_request *r, const parsed_request *p, chat_out *o, llmm_diag *d) {
    (void)d;
    render_tagged(&qwen2_5_format, r, p, o);
    return LLMM_OK;
}

llmm_status llmm__render_qwen3(const llmm_chat_request *r, const parsed_request *p, chat_out *o, llmm_diag *d) {
    (void)d;
    render_tagged(&qwen3_format, r, p, o);
    return LLMM_OK;
}

llmm_status llmm__render_granite4(const llmm_chat_request *r, const parsed_request *p, chat_out *o, llmm_diag *d) {
    (void)d;
    render_tagged(&granite4_format, r, p, o);
    return LLMM_OK;
}
