/* Tool calling in each family's own template syntax (see chat_tools.h). The families whose
 * templates share one shape (a system turn carrying the tool list as JSON lines in <tools>,
 * calls as JSON in <tool_call> blocks, results as <tool_response> blocks in a user turn) are
 * rows of data over one renderer; the strings are the templates' own. */
#include "text/chat_tools.h"

#include <string.h>

#include "base/json_value.h"
#include "base/json_write.h"
#include "text/chat.h"

/* ---------------------------------------------------------------- the tagged-JSON families */

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

/* ---------------------------------------------------------------- the family table */

typedef struct family_row {
    tool_family_info info;
    const tagged_format *tagged; /* NULL: not rendered */
    const char *markers[3];      /* all occur in the family's template text */
    const char *absent;          /* and this does not (NULL: no condition) */
} family_row;

/* Detection tries the rows in order; the first whose markers all occur, and whose `absent`
 * marker does not, wins. */
static const family_row families[] = {
    {{"qwen2_5", TOOL_SYNTAX_TAGGED_JSON, REASONING_NONE},
     &qwen2_5_format,
     {"<|im_start|>", "<tool_call>", "You are Qwen, created by Alibaba Cloud"},
     NULL},
    {{"qwen3", TOOL_SYNTAX_TAGGED_JSON, REASONING_THINK_TRIMMED},
     &qwen3_format,
     {"<|im_start|>", "<tool_call>", "<think>"},
     "<function="}, /* Qwen3.5's template has every Qwen3 marker, and XML-style calls */
    {{"hermes3", TOOL_SYNTAX_TAGGED_JSON, REASONING_NONE}, NULL, {"<|im_start|>", "<tool_call>"}, "<think>"},
    {{"granite4", TOOL_SYNTAX_TAGGED_JSON, REASONING_NONE},
     &granite4_format,
     {"<|start_of_role|>", "<tool_call>"},
     NULL},
    {{"smollm3", TOOL_SYNTAX_NONE, REASONING_THINK_RAW}, NULL, {"<|im_start|>", "Reasoning Mode"}, "<tool_call>"},
};
#define N_FAMILIES (sizeof families / sizeof *families)

/* The names in table order, from the second byte. */
static const char families_csv[] = ",qwen2_5,qwen3,hermes3,granite4,smollm3";

const tool_family_info *llmm__tool_family_find(const char *name) {
    for (size_t i = 0; name && i < N_FAMILIES; i++)
        if (strcmp(families[i].info.name, name) == 0) return &families[i].info;
    return NULL;
}

const char *llmm__tool_families_csv(void) { return families_csv + 1; }

const tool_family_info *llmm__tool_family_detect(const char *text) {
    for (size_t i = 0; text && i < N_FAMILIES; i++) {
        const family_row *r = &families[i];
        int all = 1;
        for (size_t k = 0; k < 3 && all; k++)
            if (r->markers[k] && !strstr(text, r->markers[k])) all = 0;
        if (all && (!r->absent || !strstr(text, r->absent))) return &r->info;
    }
    return NULL;
}

static const family_row *row_of(const tool_family_info *f) {
    return (const family_row *)((const char *)f - offsetof(family_row, info));
}

/* ---------------------------------------------------------------- checking a request */

/* The request's tool schemas and call arguments, parsed once. */
typedef struct parsed_request {
    json_doc *schemas;   /* one per tool; an empty doc (n_nodes 0) for parameters == NULL */
    json_doc **args;     /* per message, per call; n_nodes 0 when the text is not JSON */
    size_t n_schemas, n_messages;
} parsed_request;

static void parsed_free(parsed_request *p, const llmm_chat_request *r) {
    for (size_t i = 0; p->schemas && i < p->n_schemas; i++) llmm__json_doc_free(&p->schemas[i]);
    llmm__mem_free(NULL, p->schemas);
    for (size_t i = 0; p->args && i < p->n_messages; i++) {
        for (size_t k = 0; p->args[i] && k < r->messages[i].n_tool_calls; k++) llmm__json_doc_free(&p->args[i][k]);
        llmm__mem_free(NULL, p->args[i]);
    }
    llmm__mem_free(NULL, p->args);
    memset(p, 0, sizeof *p);
}

static int name_ok(const char *s) {
    size_t n = 0;
    for (; s[n]; n++) {
        char c = s[n];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-'))
            return 0;
        if (n >= 64) return 0;
    }
    return n > 0;
}

static int depth_of(const json_doc *doc, size_t at) {
    int deepest = 0;
    for (size_t c = doc->nodes[at].first; c != JSON_NONE; c = doc->nodes[c].next) {
        int d = depth_of(doc, c);
        if (d > deepest) deepest = d;
    }
    return deepest + 1;
}

static llmm_status check_tool(const llmm_tool *t, size_t i, json_doc *schema, llmm_diag *d) {
    if (!t->name || !name_ok(t->name))
        return llmm__diag_fail(d, LLMM_ERR_INVALID_ARG, "tool %zu: the name must be 1 to 64 of [A-Za-z0-9_-]", i);
    if (!t->parameters) return LLMM_OK;
    size_t len = strlen(t->parameters);
    if (len > LLMM_TOOL_SCHEMA_MAX_BYTES)
        return llmm__diag_fail(d, LLMM_ERR_INVALID_ARG, "tool '%s': the parameters schema is %zu bytes (at most %d)",
                               t->name, len, LLMM_TOOL_SCHEMA_MAX_BYTES);
    char err[128];
    llmm_status st = llmm__json_parse(schema, t->parameters, len, err, sizeof err);
    if (st == LLMM_ERR_NO_MEMORY) return llmm__diag_fail(d, st, "tool '%s': out of memory", t->name);
    if (st) return llmm__diag_fail(d, st, "tool '%s': the parameters are not JSON: %s", t->name, err);
    if (schema->nodes[0].kind != JSON_OBJECT)
        return llmm__diag_fail(d, LLMM_ERR_INVALID_ARG, "tool '%s': the parameters schema is not an object", t->name);
    if (depth_of(schema, 0) > LLMM_TOOL_SCHEMA_MAX_DEPTH)
        return llmm__diag_fail(d, LLMM_ERR_INVALID_ARG, "tool '%s': the parameters schema nests deeper than %d",
                               t->name, LLMM_TOOL_SCHEMA_MAX_DEPTH);
    return LLMM_OK;
}

static int role_known(const char *role) {
    static const char *const roles[] = {"system", "user", "assistant", "tool"};
    for (size_t i = 0; i < 4; i++)
        if (strcmp(role, roles[i]) == 0) return 1;
    return 0;
}

static llmm_status check_message(const llmm_chat_turn *m, size_t i, json_doc *args, llmm_diag *d) {
    if (!m->role || !role_known(m->role))
        return llmm__diag_fail(d, LLMM_ERR_INVALID_ARG, "message %zu: role must be system, user, assistant or tool",
                               i);
    if (m->n_tool_calls && (!m->tool_calls || strcmp(m->role, "assistant") != 0))
        return llmm__diag_fail(d, LLMM_ERR_INVALID_ARG, "message %zu: only an assistant message carries calls", i);
    for (size_t k = 0; k < m->n_tool_calls; k++) {
        const llmm_tool_call *c = &m->tool_calls[k];
        if (!c->name || !name_ok(c->name) || !c->arguments)
            return llmm__diag_fail(d, LLMM_ERR_INVALID_ARG,
                                   "message %zu, call %zu: a name of [A-Za-z0-9_-] and arguments are required", i, k);
        char err[128];
        llmm_status st = llmm__json_parse(&args[k], c->arguments, strlen(c->arguments), err, sizeof err);
        if (st == LLMM_ERR_NO_MEMORY) return llmm__diag_fail(d, st, "message %zu: out of memory", i);
        /* arguments that are not JSON are pasted verbatim, as templates paste a string */
    }
    return LLMM_OK;
}

static llmm_status parse_request(const llmm_chat_request *r, parsed_request *p, llmm_diag *d) {
    if ((r->n_messages && !r->messages) || (r->n_tools && !r->tools))
        return llmm__diag_fail(d, LLMM_ERR_INVALID_ARG, "llmm_chat_format_request: NULL messages or tools with n > 0");
    if (r->n_tools > LLMM_TOOLS_MAX)
        return llmm__diag_fail(d, LLMM_ERR_INVALID_ARG, "%zu tools (at most %d)", r->n_tools, LLMM_TOOLS_MAX);
    p->schemas = llmm__mem_calloc(NULL, r->n_tools + 1, sizeof *p->schemas);
    p->args = llmm__mem_calloc(NULL, r->n_messages + 1, sizeof *p->args);
    if (!p->schemas || !p->args) return llmm__diag_fail(d, LLMM_ERR_NO_MEMORY, "out of memory");
    p->n_schemas = r->n_tools;
    p->n_messages = r->n_messages;
    for (size_t i = 0; i < r->n_tools; i++) {
        llmm_status st = check_tool(&r->tools[i], i, &p->schemas[i], d);
        if (st) return st;
    }
    for (size_t i = 0; i < r->n_messages; i++) {
        const llmm_chat_turn *m = &r->messages[i];
        if (m->n_tool_calls > LLMM_TOOLS_MAX)
            return llmm__diag_fail(d, LLMM_ERR_INVALID_ARG, "message %zu: %zu calls (at most %d)", i,
                                   m->n_tool_calls, LLMM_TOOLS_MAX);
        p->args[i] = llmm__mem_calloc(NULL, m->n_tool_calls + 1, sizeof **p->args);
        if (!p->args[i]) return llmm__diag_fail(d, LLMM_ERR_NO_MEMORY, "out of memory");
        llmm_status st = check_message(m, i, p->args[i], d);
        if (st) return st;
    }
    return LLMM_OK;
}

/* ---------------------------------------------------------------- rendering */

static void sink_out(void *ctx, const char *bytes, size_t n) { llmm__chat_out_bytes(ctx, bytes, n); }

static void out_json_string(chat_out *o, const char *s) {
    llmm__json_write_string(s ? s : "", s ? strlen(s) : 0, sink_out, o);
}

/* {"type": "function", "function": {"name", "description", "parameters"}}: the object the
 * reference rebuilds from each tool before a template's tojson sees it. */
static void out_tool(chat_out *o, const llmm_tool *t, const json_doc *schema) {
    llmm__chat_out_str(o, "{\"type\": \"function\", \"function\": {\"name\": ");
    out_json_string(o, t->name);
    llmm__chat_out_str(o, ", \"description\": ");
    out_json_string(o, t->description);
    llmm__chat_out_str(o, ", \"parameters\": ");
    if (schema->n_nodes) llmm__json_write(schema, 0, &llmm__json_style_python, sink_out, o);
    else llmm__chat_out_str(o, "{}");
    llmm__chat_out_str(o, "}}");
}

static void out_args(chat_out *o, const llmm_tool_call *c, const json_doc *args) {
    if (args->n_nodes) llmm__json_write(args, 0, &llmm__json_style_python, sink_out, o);
    else llmm__chat_out_str(o, c->arguments);
}

static const char *text_of(const char *s) { return s ? s : ""; }

static int is_role(const llmm_chat_turn *m, const char *role) { return strcmp(m->role, role) == 0; }

static void out_turn_open(chat_out *o, const tagged_format *f, const char *role) {
    llmm__chat_out_str(o, f->role_open);
    llmm__chat_out_str(o, role);
    llmm__chat_out_str(o, f->role_close);
}

static void out_system_turn(chat_out *o, const tagged_format *f, const llmm_chat_request *r, const parsed_request *p) {
    const char *system = r->n_messages && is_role(&r->messages[0], "system") ? text_of(r->messages[0].content) : NULL;
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
        out_tool(o, &r->tools[i], &p->schemas[i]);
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
        const char *c = text_of(m->content);
        if (is_role(m, "user") && !(starts_with(c, "<tool_response>") && ends_with(c, "</tool_response>"))) return i;
    }
    return r->n_messages - 1;
}

typedef struct span {
    const char *s;
    size_t n;
} span;

static span strip_newlines(span t, int front, int back) {
    while (front && t.n && t.s[0] == '\n') t.s++, t.n--;
    while (back && t.n && t.s[t.n - 1] == '\n') t.n--;
    return t;
}

static const char *last_occurrence(const char *s, size_t n, const char *needle) {
    const char *found = NULL;
    size_t k = strlen(needle);
    for (size_t i = 0; i + k <= n; i++)
        if (memcmp(s + i, needle, k) == 0) found = s + i;
    return found;
}

/* Qwen3's split of an assistant message into reasoning and answer: reasoning_content when
 * given, else what a "</think>" in the content separates (the template's own string surgery). */
static void split_reasoning(const llmm_chat_turn *m, span *reasoning, span *content) {
    const char *c = text_of(m->content);
    *content = (span){c, strlen(c)};
    *reasoning = (span){"", 0};
    if (m->reasoning_content) {
        *reasoning = (span){m->reasoning_content, strlen(m->reasoning_content)};
        return;
    }
    const char *first_end = strstr(c, "</think>");
    if (!first_end) return;
    const char *last_end = last_occurrence(c, content->n, "</think>");
    *content = strip_newlines((span){last_end + 8, strlen(last_end + 8)}, 1, 0);
    span before = strip_newlines((span){c, (size_t)(first_end - c)}, 0, 1);
    const char *open = last_occurrence(before.s, before.n, "<think>");
    if (open) before = (span){open + 7, before.n - (size_t)(open + 7 - before.s)};
    *reasoning = strip_newlines(before, 1, 0);
}

static void out_assistant(chat_out *o, const tagged_format *f, const llmm_chat_request *r, size_t i,
                          const json_doc *args) {
    const llmm_chat_turn *m = &r->messages[i];
    span reasoning = {"", 0}, content = {text_of(m->content), strlen(text_of(m->content))};
    out_turn_open(o, f, "assistant");
    if (f->think_history) {
        split_reasoning(m, &reasoning, &content);
        if (i > last_query_index(r) && (i + 1 == r->n_messages || reasoning.n)) {
            span inner = strip_newlines(reasoning, 1, 1);
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
        out_args(o, &m->tool_calls[k], &args[k]);
        llmm__chat_out_str(o, "}\n</tool_call>");
    }
    llmm__chat_out_str(o, f->turn_end);
}

static void render_tagged(const tagged_format *f, const llmm_chat_request *r, const parsed_request *p, chat_out *o) {
    out_system_turn(o, f, r, p);
    for (size_t i = 0; i < r->n_messages; i++) {
        const llmm_chat_turn *m = &r->messages[i];
        if (is_role(m, "user") || (is_role(m, "system") && i > 0)) {
            out_turn_open(o, f, m->role);
            llmm__chat_out_str(o, text_of(m->content));
            llmm__chat_out_str(o, f->turn_end);
        } else if (is_role(m, "assistant")) {
            out_assistant(o, f, r, i, p->args[i]);
        } else if (is_role(m, "tool")) {
            if (i == 0 || !is_role(&r->messages[i - 1], "tool")) llmm__chat_out_str(o, f->tool_group_open);
            llmm__chat_out_str(o, "\n<tool_response>\n");
            llmm__chat_out_str(o, text_of(m->content));
            llmm__chat_out_str(o, "\n</tool_response>");
            if (i + 1 == r->n_messages || !is_role(&r->messages[i + 1], "tool")) llmm__chat_out_str(o, f->turn_end);
        }
    }
    if (r->add_generation_prompt) {
        out_turn_open(o, f, "assistant");
        if (r->enable_thinking == 0) llmm__chat_out_str(o, f->no_think_gen);
    }
}

llmm_status llmm__chat_tools_render(const tool_family_info *f, const llmm_chat_request *request, char *buf,
                                    size_t capacity, size_t *needed, llmm_diag *d) {
    const family_row *row = row_of(f);
    if (!row->tagged)
        return llmm__diag_fail(d, LLMM_ERR_UNSUPPORTED,
                               "the '%s' family's output can be parsed, but llmmini does not render its template yet",
                               f->name);
    parsed_request p = {0};
    llmm_status st = parse_request(request, &p, d);
    if (!st) {
        chat_out o = {.buf = buf, .cap = capacity};
        render_tagged(row->tagged, request, &p, &o);
        st = llmm__chat_out_finish(&o, "llmm_chat_format_request", needed, d);
    }
    parsed_free(&p, request);
    return st;
}

LLMM_API llmm_status llmm_chat_tool_families(const char **names_csv) {
    if (!names_csv) return LLMM_ERR_INVALID_ARG;
    *names_csv = llmm__tool_families_csv();
    return LLMM_OK;
}
