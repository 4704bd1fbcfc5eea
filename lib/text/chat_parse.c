/* Parsing a model's output in its family's call syntax (see chat_parse.h): the reasoning, the
 * syntaxes whose calls are JSON (those rewritten as JSON: chat_parse_rewritten.c), and the
 * public streaming parser over it. Streaming re-parses the whole text on each request: outputs are
 * short next to a decode step's cost, and one parse for both modes cannot disagree with itself. */
#include "text/chat_parse.h"

#include <stdio.h>
#include <string.h>

#include "text/chat_parse_rewritten.h"
#include "text/chat_parsed.h"

#define THINK_OPEN "<think>"
#define BARE_CALL_OPEN "{\"name\""
#define LIST_CALL_OPEN "[TOOL_CALLS]"
#define THINK_CLOSE "</think>"

/* ---------------------------------------------------------------- JSON scanning */

/* End of the JSON string starting at t[i] == '"' (one past the closing quote), or n when it
 * is not closed. */
static size_t string_end(const char *t, size_t n, size_t i) {
    for (i++; i < n; i++) {
        if (t[i] == '\\') i++;
        else if (t[i] == '"') return i + 1;
    }
    return n;
}

/* End of the JSON value starting at t[i]: one past it, or n when the text ends inside it.
 * Only the nesting is followed; what the value holds is checked by whoever uses it. */
static size_t value_end(const char *t, size_t n, size_t i) {
    size_t depth = 0;
    while (i < n) {
        char c = t[i];
        if (c == '"') {
            i = string_end(t, n, i);
            if (depth == 0) return i;
            continue;
        }
        if (c == '{' || c == '[') depth++;
        else if (c == '}' || c == ']') {
            if (depth == 0) return i; /* the enclosing object's end: a scalar ended here */
            if (--depth == 0) return i + 1;
        } else if (depth == 0 && (c == ',' || is_space(c))) {
            return i;
        }
        i++;
    }
    return n;
}

/* What a family's call object must hold. */
typedef struct call_rules {
    const char *args_key; /* "arguments" or "parameters" */
    int needs_id;         /* Mistral Nemo: a closed call without "id" is refused */
} call_rules;

static int key_is(const char *t, size_t key, size_t key_len, const char *word) {
    return key_len == strlen(word) && memcmp(t + key, word, key_len) == 0;
}

/* One call object {"name": ..., <args_key>: ..., "id": ...} at t[i]. Returns 1 and the end
 * (one past '}') when the object closed as a call, 0 when the text ended inside it, -1 when it
 * is not a call. Sets what it saw in c. */
static int scan_call_object(const char *t, size_t n, size_t i, const call_rules *rules, parsed_call *c,
                            size_t *end) {
    int has_args = 0;
    if (i >= n) return 0;
    if (t[i] != '{') return -1;
    i++;
    for (;;) {
        i = skip_space(t, n, i);
        if (i >= n) return 0;
        if (t[i] == '}') {
            *end = i + 1;
            return c->name.len && has_args && (c->has_id || !rules->needs_id) ? 1 : -1;
        }
        if (t[i] != '"') return -1;
        size_t key = i + 1, key_end = string_end(t, n, i);
        if (key_end >= n) return 0;
        size_t key_len = key_end - 1 - key;
        i = skip_space(t, n, key_end);
        if (i >= n) return 0;
        if (t[i] != ':') return -1;
        size_t v = skip_space(t, n, i + 1);
        if (v >= n) return 0;
        size_t v_end = value_end(t, n, v);
        if (key_is(t, key, key_len, rules->args_key)) {
            c->arguments = (text_span){v, v_end - v};
            has_args = 1;
        }
        if (v_end >= n) return 0;
        if (key_is(t, key, key_len, "name")) {
            if (t[v] != '"' || v_end - v < 2) return -1;
            c->name = (text_span){v + 1, v_end - v - 2};
        } else if (key_is(t, key, key_len, "id") && t[v] == '"') {
            c->id = (text_span){v + 1, v_end - v - 2};
            c->has_id = 1;
        }
        i = skip_space(t, n, v_end);
        if (i >= n) return 0;
        if (t[i] == ',') i++;
        else if (t[i] != '}') return -1;
    }
}

/* ---------------------------------------------------------------- the syntaxes */
/* <tool_call> JSON </tool_call> blocks from t[pos]; content before them. */
static llmm_status parse_tagged_json(const char *t, size_t n, size_t pos, int final, chat_parse *p) {
    static const call_rules rules = {"arguments", 0};
    for (;;) {
        llmm_status st;
        size_t open = content_until(p, t, n, pos, CALL_OPEN, final, &st);
        if (st || open == n) return st;
        parsed_call c = {.complete = 0};
        size_t body = skip_space(t, n, open + strlen(CALL_OPEN)), obj_end = n;
        int got = scan_call_object(t, n, body, &rules, &c, &obj_end);
        if (got < 0 || (got == 0 && c.name.len == 0 && final)) return not_a_call(p, t, n, open, final);
        if (got == 0 && c.name.len == 0) return LLMM_OK; /* its name is still being written */
        size_t close = got == 1 ? skip_space(t, n, obj_end) : n;
        c.complete = starts_at(t, n, close, CALL_CLOSE);
        if (got == 1 && !c.complete && !prefix_at(t, n, close, CALL_CLOSE)) p->malformed = 1;
        if (add_call(p, &c)) return LLMM_ERR_NO_MEMORY;
        if (!c.complete) return LLMM_OK;
        p->call_end = close + strlen(CALL_CLOSE);
        pos = skip_space(t, n, p->call_end); /* whitespace between or after calls is markup */
        if (pos == n || starts_at(t, n, pos, CALL_OPEN)) continue;
        if (!final && prefix_at(t, n, pos, CALL_OPEN)) return LLMM_OK;
        p->malformed = 1; /* the reference refuses text after a call; kept here as content */
        return add_content(p, pos, n - pos);
    }
}

/* Llama 3: content, then at most one bare {"name": ..., "parameters": ...} ending the message. */
static llmm_status parse_bare_json(const char *t, size_t n, size_t pos, int final, chat_parse *p) {
    static const call_rules rules = {"parameters", 0};
    llmm_status st;
    size_t open = content_until(p, t, n, pos, BARE_CALL_OPEN, final, &st);
    if (st || open == n) return st;
    parsed_call c = {.complete = 0};
    size_t obj_end = n;
    int got = scan_call_object(t, n, open, &rules, &c, &obj_end);
    if (got < 0 || (got == 0 && final && c.name.len == 0)) return not_a_call(p, t, n, open, final);
    if (got == 0 && (c.name.len == 0 || !c.arguments.len)) return LLMM_OK; /* not yet a call */
    c.complete = got == 1;
    if (add_call(p, &c)) return LLMM_ERR_NO_MEMORY;
    if (got == 1) {
        p->call_end = obj_end;
        size_t rest = skip_space(t, n, obj_end);
        if (rest < n) return not_a_call(p, t, n, rest, final);
    }
    return LLMM_OK;
}

/* Mistral Nemo: content, then [TOOL_CALLS][{...}, {...}]. */
static llmm_status parse_list_json(const char *t, size_t n, size_t pos, int final, chat_parse *p) {
    static const call_rules rules = {"arguments", 1};
    llmm_status st;
    size_t open = content_until(p, t, n, pos, LIST_CALL_OPEN, final, &st);
    if (st || open == n) return st;
    size_t i = skip_space(t, n, open + strlen(LIST_CALL_OPEN));
    if (i < n && t[i] != '[') return not_a_call(p, t, n, open, final);
    for (i++;;) {
        parsed_call c = {.complete = 0};
        size_t obj_end = n;
        int got = scan_call_object(t, n, skip_space(t, n, i), &rules, &c, &obj_end);
        if (got < 0) return not_a_call(p, t, n, open, final);
        if (got == 0 && c.name.len == 0) return final ? not_a_call(p, t, n, open, final) : LLMM_OK;
        c.complete = got == 1;
        if (add_call(p, &c)) return LLMM_ERR_NO_MEMORY;
        if (got == 0) return LLMM_OK;
        i = skip_space(t, n, obj_end);
        if (i < n && t[i] == ',') {
            i++;
            continue;
        }
        if (i < n && t[i] == ']') {
            p->call_end = i + 1;
            size_t rest = skip_space(t, n, i + 1);
            return rest < n ? not_a_call(p, t, n, rest, final) : LLMM_OK;
        }
        return i < n ? not_a_call(p, t, n, open, final) : LLMM_OK;
    }
}

/* The reasoning block at the start; returns where the rest starts. */
static size_t parse_reasoning(const tool_family_info *f, int thinking, const char *t, size_t n, int final,
                              chat_parse *p) {
    static const struct {
        const char *open, *close;
    } markers[] = {
        [REASONING_THINK_TRIMMED] = {THINK_OPEN, THINK_CLOSE},
        [REASONING_THINK_RAW] = {THINK_OPEN, THINK_CLOSE},
        [REASONING_CHANNEL] = {"<|channel>thought\n", "<channel|>"},
    };
    if (f->reasoning == REASONING_NONE) return 0;
    const char *open = markers[f->reasoning].open, *close_marker = markers[f->reasoning].close;
    size_t start = 0;
    /* Gemma 4's prompt never opens the channel (thinking on or off), so the model writes it */
    if (!thinking || f->reasoning == REASONING_CHANNEL) {
        size_t k = strlen(open);
        if (n < k) return (!final && memcmp(t, open, n) == 0) ? n : 0; /* may become the opening marker */
        if (memcmp(t, open, k) != 0) return 0;
        start = k;
    }
    int trimmed = f->reasoning == REASONING_THINK_TRIMMED;
    if (trimmed && start < n && t[start] == '\n') start++;
    size_t close = find(t, n, start, close_marker);
    if (close == n) {
        size_t held = final ? 0 : partial_marker(t, n, start, close_marker);
        p->reasoning = (text_span){start, n - start - held};
        return n;
    }
    p->reasoning = (text_span){start, close - start};
    size_t rest = close + strlen(close_marker);
    return trimmed ? skip_space(t, n, rest) : rest;
}

llmm_status llmm__chat_parse(const tool_family_info *f, int thinking, const char *text, size_t n, int final,
                             chat_parse *out) {
    out->n_content = out->n_calls = 0;
    out->reasoning = (text_span){0, 0};
    out->malformed = 0;
    out->call_end = 0;
    out->n_converted = 0;
    size_t pos = parse_reasoning(f, thinking, text, n, final, out);
    switch (f->syntax) {
    case TOOL_SYNTAX_TAGGED_JSON: return parse_tagged_json(text, n, pos, final, out);
    case TOOL_SYNTAX_BARE_JSON: return parse_bare_json(text, n, pos, final, out);
    case TOOL_SYNTAX_LIST_JSON: return parse_list_json(text, n, pos, final, out);
    case TOOL_SYNTAX_PYTHON_CALL: return llmm__chat_parse_python_call(text, n, pos, final, out);
    case TOOL_SYNTAX_XML_CALL: return llmm__chat_parse_xml_call(text, n, pos, final, out);
    case TOOL_SYNTAX_GEMMA4_CALL: return llmm__chat_parse_gemma4_call(text, n, pos, final, out);
    case TOOL_SYNTAX_NONE: break;
    }
    return add_content(out, pos, n - pos);
}

void llmm__chat_parse_free(chat_parse *p) {
    llmm__mem_free(NULL, p->content);
    llmm__mem_free(NULL, p->calls);
    llmm__mem_free(NULL, p->converted);
    memset(p, 0, sizeof *p);
}

/* ---------------------------------------------------------------- the public parser */

struct llmm_chat_parser {
    const tool_family_info *family;
    int thinking;
    char *text; /* everything fed so far */
    size_t len, cap;
    chat_parse parse;
    char *strings; /* the last result's strings, NUL-terminated */
    size_t strings_cap;
    llmm_chat_parsed_call *calls;
    size_t calls_cap;
    char *string_params; /* parse.string_params, owned */
    char error[sizeof ((llmm_diag *)0)->msg];
};

static llmm_status parser_fail(llmm_chat_parser *p, llmm_status st, const char *msg) {
    snprintf(p->error, sizeof p->error, "%s", msg);
    return st;
}

LLMM_API llmm_status llmm_chat_parser_create(const char *family, int thinking, llmm_chat_parser **out) {
    if (!out) return LLMM_ERR_INVALID_ARG;
    *out = NULL;
    if (!family) return LLMM_ERR_INVALID_ARG;
    const tool_family_info *f = llmm__tool_family_find(family);
    if (!f) return LLMM_ERR_UNSUPPORTED;
    llmm_chat_parser *p = llmm__mem_calloc(NULL, 1, sizeof *p);
    if (!p) return LLMM_ERR_NO_MEMORY;
    p->family = f;
    p->thinking = thinking != 0;
    *out = p;
    return LLMM_OK;
}

LLMM_API void llmm_chat_parser_free(llmm_chat_parser *p) {
    if (!p) return;
    llmm__mem_free(NULL, p->text);
    llmm__chat_parse_free(&p->parse);
    llmm__mem_free(NULL, p->strings);
    llmm__mem_free(NULL, p->calls);
    llmm__mem_free(NULL, p->string_params);
    llmm__mem_free(NULL, p);
}

LLMM_API llmm_status llmm_chat_parser_set_tools(llmm_chat_parser *p, const llmm_tool *tools, size_t n_tools) {
    if (!p) return LLMM_ERR_INVALID_ARG;
    if ((!tools && n_tools) || n_tools > LLMM_TOOLS_MAX)
        return parser_fail(p, LLMM_ERR_INVALID_ARG, "llmm_chat_parser_set_tools: NULL tools, or more than LLMM_TOOLS_MAX");
    llmm_diag d = {{0}};
    char *records = NULL;
    size_t n_records = 0;
    llmm_status st = llmm__chat_string_params(tools, n_tools, &records, &n_records, &d);
    if (st) return parser_fail(p, st, d.msg);
    llmm__mem_free(NULL, p->string_params);
    p->string_params = records;
    p->parse.string_params = records;
    p->parse.n_string_params = n_records;
    return LLMM_OK;
}

LLMM_API const char *llmm_chat_parser_last_error(const llmm_chat_parser *p) { return p ? p->error : ""; }

LLMM_API llmm_status llmm_chat_parser_feed(llmm_chat_parser *p, const char *text, size_t len) {
    if (!p) return LLMM_ERR_INVALID_ARG;
    if (!text && len) return parser_fail(p, LLMM_ERR_INVALID_ARG, "llmm_chat_parser_feed: NULL text with len > 0");
    if (len > SIZE_MAX - p->len - 1) return parser_fail(p, LLMM_ERR_INVALID_ARG, "llmm_chat_parser_feed: too long");
    if (llmm__mem_reserve(NULL, (void **)&p->text, &p->cap, p->len + len + 1, 1))
        return parser_fail(p, LLMM_ERR_NO_MEMORY, "out of memory");
    if (len) memcpy(p->text + p->len, text, len);
    p->len += len;
    p->text[p->len] = '\0';
    return LLMM_OK;
}

/* Copies of the parse's spans as NUL-terminated strings in p->strings. */
static size_t spans_size(const chat_parse *c) {
    size_t total = c->reasoning.len + 2;
    for (size_t i = 0; i < c->n_content; i++) total += c->content[i].len;
    for (size_t i = 0; i < c->n_calls; i++)
        total += c->calls[i].name.len + c->calls[i].id.len + c->calls[i].arguments.len + 3;
    return total;
}

static const char *put_span(char **w, const char *text, text_span s) {
    const char *start = *w;
    memcpy(*w, text + s.at, s.len);
    *w += s.len;
    *(*w)++ = '\0';
    return start;
}

LLMM_API llmm_status llmm_chat_parser_result(llmm_chat_parser *p, int final, llmm_chat_parse_result *out) {
    if (!p) return LLMM_ERR_INVALID_ARG;
    if (!out || out->size < sizeof *out)
        return parser_fail(p, LLMM_ERR_INVALID_ARG, "llmm_chat_parser_result: NULL out or out->size too small");
    const char *text = p->text ? p->text : "";
    chat_parse *c = &p->parse;
    if (llmm__chat_parse(p->family, p->thinking, text, p->len, final, c))
        return parser_fail(p, LLMM_ERR_NO_MEMORY, "out of memory");
    size_t need = spans_size(c);
    if (llmm__mem_reserve(NULL, (void **)&p->strings, &p->strings_cap, need, 1) ||
        llmm__mem_reserve(NULL, (void **)&p->calls, &p->calls_cap, c->n_calls + 1, sizeof *p->calls))
        return parser_fail(p, LLMM_ERR_NO_MEMORY, "out of memory");
    char *w = p->strings;
    const char *content = w;
    for (size_t i = 0; i < c->n_content; i++) {
        memcpy(w, text + c->content[i].at, c->content[i].len);
        w += c->content[i].len;
    }
    *w++ = '\0';
    const char *reasoning = put_span(&w, text, c->reasoning);
    for (size_t i = 0; i < c->n_calls; i++) {
        const parsed_call *pc = &c->calls[i];
        p->calls[i].name = put_span(&w, text, pc->name);
        p->calls[i].arguments = put_span(&w, pc->args_converted ? c->converted : text, pc->arguments);
        const char *id = put_span(&w, text, pc->id);
        p->calls[i].id = pc->has_id ? id : NULL;
        p->calls[i].complete = pc->complete;
    }
    out->content = content;
    out->reasoning = reasoning;
    out->calls = p->calls;
    out->n_calls = c->n_calls;
    out->malformed = c->malformed;
    return LLMM_OK;
}
