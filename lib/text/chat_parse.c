/* Parsing a model's output in its family's call syntax (see chat_parse.h), and the public
 * streaming parser over it. Streaming re-parses the whole text on each request: outputs are
 * short next to a decode step's cost, and one parse for both modes cannot disagree with itself. */
#include "text/chat_parse.h"

#include <stdio.h>
#include <string.h>

#include "base/json_value.h"
#include "base/json_write.h"
#include "text/chat_request.h"

#define CALL_OPEN "<tool_call>"
#define CALL_CLOSE "</tool_call>"
#define THINK_OPEN "<think>"
#define BARE_CALL_OPEN "{\"name\""
#define LIST_CALL_OPEN "[TOOL_CALLS]"
#define THINK_CLOSE "</think>"
#define PY_CALL_OPEN "<|tool_call_start|>"
#define PY_CALL_CLOSE "<|tool_call_end|>"
#define G4_CALL_OPEN "<|tool_call>call:"
#define G4_CALL_CLOSE "<tool_call|>"
#define G4_QUOTE "<|\"|>"
#define XML_FUNCTION_OPEN "<function="
#define XML_FUNCTION_CLOSE "</function>"
#define XML_PARAM_OPEN "<parameter="
#define XML_PARAM_CLOSE "</parameter>"

static int is_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

static size_t skip_space(const char *t, size_t n, size_t i) {
    while (i < n && is_space(t[i])) i++;
    return i;
}

/* First occurrence of marker in t[from, n), or n. */
static size_t find(const char *t, size_t n, size_t from, const char *marker) {
    size_t k = strlen(marker);
    for (size_t i = from; i + k <= n; i++)
        if (t[i] == marker[0] && memcmp(t + i, marker, k) == 0) return i;
    return n;
}

/* Length of the longest tail of t[from, n) that is a proper prefix of marker: text that may
 * become the marker when more arrives. */
static size_t partial_marker(const char *t, size_t n, size_t from, const char *marker) {
    size_t k = strlen(marker);
    for (size_t len = k - 1; len > 0; len--)
        if (n - from >= len && memcmp(t + n - len, marker, len) == 0) return len;
    return 0;
}

/* t[at, n) begins with the whole marker */
static int starts_at(const char *t, size_t n, size_t at, const char *marker) {
    size_t k = strlen(marker);
    return n - at >= k && memcmp(t + at, marker, k) == 0;
}

/* t[at, n) is all a beginning of marker (empty included): the marker may still be coming */
static int prefix_at(const char *t, size_t n, size_t at, const char *marker) {
    size_t k = strlen(marker);
    return n - at < k && memcmp(t + at, marker, n - at) == 0;
}

static llmm_status add_content(chat_parse *p, size_t at, size_t len) {
    if (len == 0) return LLMM_OK;
    if (llmm__mem_reserve(NULL, (void **)&p->content, &p->cap_content, p->n_content + 1, sizeof *p->content))
        return LLMM_ERR_NO_MEMORY;
    p->content[p->n_content++] = (text_span){at, len};
    return LLMM_OK;
}

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

static llmm_status add_call(chat_parse *p, const parsed_call *c) {
    if (llmm__mem_reserve(NULL, (void **)&p->calls, &p->cap_calls, p->n_calls + 1, sizeof *p->calls))
        return LLMM_ERR_NO_MEMORY;
    p->calls[p->n_calls++] = *c;
    return LLMM_OK;
}

/* Text from `at` on is no call. The reference refuses such output; llmmini flags it and, once
 * the output has ended, shows it as content (while streaming it stays held back, as the
 * reference's streaming view shows nothing of it). */
static llmm_status not_a_call(chat_parse *p, const char *t, size_t n, size_t at, int final) {
    (void)t;
    p->malformed = 1;
    return final ? add_content(p, at, n - at) : LLMM_OK;
}

/* ---------------------------------------------------------------- the syntaxes */

/* Content up to the marker's next occurrence from pos; returns where it starts, or n (then the
 * rest is content, less a tail that may become the marker while streaming). */
static size_t content_until(chat_parse *p, const char *t, size_t n, size_t pos, const char *marker, int final,
                            llmm_status *st) {
    size_t open = find(t, n, pos, marker);
    size_t held = open == n && !final ? partial_marker(t, n, pos, marker) : 0;
    *st = add_content(p, pos, open - pos - held);
    return open;
}

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

/* LFM2: content, then <|tool_call_start|>[name(key=value, ...)]<|tool_call_end|>, the values
 * Python literals (or JSON) rewritten as compact JSON arguments, {"key":value,...}, as the
 * reference returns them. One call per list: the reference refuses a second. A call cut off
 * keeps the arguments converted so far. */
static llmm_status emit(chat_parse *p, const char *s, size_t n) {
    if (llmm__mem_reserve(NULL, (void **)&p->converted, &p->cap_converted, p->n_converted + n + 1, 1))
        return LLMM_ERR_NO_MEMORY;
    memcpy(p->converted + p->n_converted, s, n);
    p->n_converted += n;
    return LLMM_OK;
}

static int is_word_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
           c == '.';
}

/* One Python or JSON value at t[i] as JSON into p->converted. Returns one past it, n when the
 * text ends inside it (what was converted so far stays), or (size_t)-1 when it is no value. */
static size_t convert_value(chat_parse *p, const char *t, size_t n, size_t i, int depth, llmm_status *st);

static size_t convert_string(chat_parse *p, const char *t, size_t n, size_t i, llmm_status *st) {
    const char quote = t[i];
    *st = emit(p, "\"", 1);
    for (i++; i < n && !*st; i++) {
        if (t[i] == quote) return (*st = emit(p, "\"", 1)), i + 1;
        if (t[i] == '\\') {
            if (i + 1 >= n) return n;
            /* \' needs no escape in JSON */
            *st = t[i + 1] == '\'' ? emit(p, "'", 1) : emit(p, t + i, 2);
            i++;
        } else {
            *st = t[i] == '"' ? emit(p, "\\\"", 2) : emit(p, t + i, 1);
        }
    }
    return n;
}

/* [v, ...] or {k: v, ...} */
static size_t convert_container(chat_parse *p, const char *t, size_t n, size_t i, int depth, llmm_status *st) {
    const char close = t[i] == '[' ? ']' : '}';
    int is_dict = close == '}';
    *st = emit(p, t + i, 1);
    i = skip_space(t, n, i + 1);
    if (i < n && t[i] == close) return (*st = emit(p, &close, 1)), i + 1;
    while (i < n && !*st) {
        if (is_dict) {
            if (t[i] != '"' && t[i] != '\'') return (size_t)-1;
            i = convert_string(p, t, n, i, st);
            i = skip_space(t, n, i);
            if (i >= n || *st) return n;
            if (t[i] != ':') return (size_t)-1;
            if ((*st = emit(p, ":", 1))) return n;
            i = skip_space(t, n, i + 1);
        }
        i = convert_value(p, t, n, i, depth + 1, st);
        if (i == (size_t)-1 || i >= n || *st) return i;
        i = skip_space(t, n, i);
        if (i >= n) return n;
        if (t[i] == close) return (*st = emit(p, &close, 1)), i + 1;
        if (t[i] != ',') return (size_t)-1;
        if ((*st = emit(p, ",", 1))) return n;
        i = skip_space(t, n, i + 1);
    }
    return n;
}

/* A number or keyword (Python's or JSON's) at t[i] as JSON. When it reaches the end of the text
 * and more may come (!final), nothing of it is emitted yet. */
static size_t convert_scalar(chat_parse *p, const char *t, size_t n, size_t i, int final, llmm_status *st) {
    static const char *const words[][2] = {{"True", "true"}, {"False", "false"}, {"None", "null"},
                                           {"true", "true"}, {"false", "false"}, {"null", "null"}};
    size_t end = i;
    while (end < n && (is_word_char(t[end]) || t[end] == '+')) end++;
    if (end == i) return (size_t)-1;
    if (end == n && !final) return n;
    for (size_t w = 0; w < sizeof words / sizeof *words; w++)
        if (end - i == strlen(words[w][0]) && memcmp(t + i, words[w][0], end - i) == 0)
            return (*st = emit(p, words[w][1], strlen(words[w][1]))), end;
    for (size_t k = i; k < end; k++)
        if (!((t[k] >= '0' && t[k] <= '9') || t[k] == '-' || t[k] == '+' || t[k] == '.' || t[k] == 'e' || t[k] == 'E'))
            return (size_t)-1;
    *st = emit(p, t + i, end - i);
    return end;
}

static size_t convert_value(chat_parse *p, const char *t, size_t n, size_t i, int depth, llmm_status *st) {
    if (i >= n) return n;
    if (depth > JSON_MAX_DEPTH) return (size_t)-1;
    if (t[i] == '"' || t[i] == '\'') return convert_string(p, t, n, i, st);
    if (t[i] == '[' || t[i] == '{') return convert_container(p, t, n, i, depth, st);
    return convert_scalar(p, t, n, i, 0, st);
}

/* name(key=value, ...) at t[i] into c, its arguments converted. Returns 1 and the end (one past
 * ')') when it closed, 0 when the text ended inside it, -1 when it is no call. */
static int scan_python_call(chat_parse *p, const char *t, size_t n, size_t i, parsed_call *c, size_t *end,
                            llmm_status *st) {
    size_t name = i;
    while (i < n && is_word_char(t[i])) i++;
    c->name = (text_span){name, i - name};
    if (i >= n) return c->name.len = 0, 0; /* the name may go on */
    if (!c->name.len || t[i] != '(') return -1;
    c->args_converted = 1;
    c->arguments = (text_span){p->n_converted, 0};
    if ((*st = emit(p, "{", 1))) return 0;
    for (i = skip_space(t, n, i + 1); i < n;) {
        if (t[i] == ')') {
            if ((*st = emit(p, "}", 1))) return 0;
            c->arguments.len = p->n_converted - c->arguments.at;
            *end = i + 1;
            return 1;
        }
        size_t key = i;
        while (i < n && is_word_char(t[i])) i++;
        if (i >= n) break;
        if (i == key || t[i] != '=') return -1;
        if ((*st = emit(p, "\"", 1)) || (*st = emit(p, t + key, i - key)) || (*st = emit(p, "\":", 2))) return 0;
        i = convert_value(p, t, n, skip_space(t, n, i + 1), 0, st);
        if (i == (size_t)-1) return -1;
        if (*st || i >= n) break;
        i = skip_space(t, n, i);
        if (i < n && t[i] == ',') {
            if ((*st = emit(p, ",", 1))) return 0;
            i = skip_space(t, n, i + 1);
        } else if (i < n && t[i] != ')') {
            return -1;
        }
    }
    c->arguments.len = p->n_converted - c->arguments.at;
    return 0;
}

static llmm_status parse_python_call(const char *t, size_t n, size_t pos, int final, chat_parse *p) {
    llmm_status st;
    size_t open = content_until(p, t, n, pos, PY_CALL_OPEN, final, &st);
    if (st || open == n) return st;
    size_t i = skip_space(t, n, open + strlen(PY_CALL_OPEN));
    if (i >= n) return final ? not_a_call(p, t, n, open, final) : LLMM_OK;
    if (t[i] != '[') return not_a_call(p, t, n, open, final);
    parsed_call c = {.complete = 0};
    size_t call_end = n;
    int got = scan_python_call(p, t, n, skip_space(t, n, i + 1), &c, &call_end, &st);
    if (st) return st;
    if (got < 0) return not_a_call(p, t, n, open, final);
    if (got == 0) return c.name.len ? add_call(p, &c) : final ? not_a_call(p, t, n, open, final) : LLMM_OK;
    i = skip_space(t, n, call_end);
    if (i < n && t[i] != ']') return not_a_call(p, t, n, open, final); /* a second call, or junk */
    size_t close = i < n ? skip_space(t, n, i + 1) : n;
    c.complete = i < n && starts_at(t, n, close, PY_CALL_CLOSE);
    if (i < n && !c.complete && !prefix_at(t, n, close, PY_CALL_CLOSE)) return not_a_call(p, t, n, open, final);
    if (add_call(p, &c)) return LLMM_ERR_NO_MEMORY;
    if (!c.complete) return LLMM_OK;
    p->call_end = close + strlen(PY_CALL_CLOSE);
    size_t rest = skip_space(t, n, p->call_end);
    return rest < n ? not_a_call(p, t, n, rest, final) : LLMM_OK;
}

/* Qwen3.5: content, then <tool_call>\n<function=NAME>\n<parameter=KEY>\nVALUE\n</parameter>\n...
 * </function>\n</tool_call> blocks, the values raw text. The reference converts each value with
 * the tool's schema: a parameter the schema types as string stays a string ("10" stays "10")
 * when the tools are known (string_params); any other value that is JSON (10, true, {...}) is
 * taken as JSON and anything else as a string, and the arguments come back as compact JSON
 * ({"location":"Paris","minutes":10}). A value cut off is a string left open ({"location":"Par),
 * or the literal so far when it starts like a number, object, array or keyword. */
typedef struct emit_sink {
    chat_parse *p;
    llmm_status st;
} emit_sink;

static void sink_emit(void *ctx, const char *bytes, size_t n) {
    emit_sink *s = ctx;
    if (!s->st) s->st = emit(s->p, bytes, n);
}

static int looks_like_json_literal(char c) {
    return (c >= '0' && c <= '9') || c == '-' || c == '{' || c == '[' || c == 't' || c == 'f' || c == 'n';
}

/* Whether the tools known say tool's parameter param is a string. */
static int is_string_param(const chat_parse *p, const char *tool, size_t tool_len, const char *param, size_t param_len) {
    for (const char *r = p->string_params, *end = r + p->n_string_params; r && r < end;) {
        const char *r_param = r + strlen(r) + 1, *next = r_param + strlen(r_param) + 1;
        if (strlen(r) == tool_len && !memcmp(r, tool, tool_len) && strlen(r_param) == param_len &&
            !memcmp(r_param, param, param_len))
            return 1;
        r = next;
    }
    return 0;
}

static llmm_status emit_xml_value(chat_parse *p, const char *v, size_t n, int closed, int is_string) {
    emit_sink sink = {p, LLMM_OK};
    json_doc doc;
    char err[64];
    if (!is_string && closed && n && looks_like_json_literal(v[0])) {
        llmm_status st = llmm__json_parse(&doc, v, n, err, sizeof err);
        if (st == LLMM_ERR_NO_MEMORY) return st;
        if (!st) {
            llmm__json_write(&doc, 0, &llmm__json_style_compact, sink_emit, &sink);
            llmm__json_doc_free(&doc);
            return sink.st;
        }
    }
    if (!is_string && !closed && n && looks_like_json_literal(v[0]) && v[0] != 't' && v[0] != 'f' && v[0] != 'n')
        return emit(p, v, n);
    llmm__json_write_string(v, n, sink_emit, &sink);
    if (!closed && !sink.st) p->n_converted--; /* the string is still open */
    return sink.st;
}

/* NAME> at t[i]: the name's end ('>'), n when it is still being written, or (size_t)-1. */
static size_t xml_name_end(const char *t, size_t n, size_t i) {
    size_t k = i;
    while (k < n && is_word_char(t[k])) k++;
    if (k == n) return n;
    return k > i && t[k] == '>' ? k : (size_t)-1;
}

/* The <parameter=...> blocks of a function from t[i] up to </function>, as a JSON object in
 * p->converted. Returns 1 and the end (one past </function>), 0 when the text ended first, -1
 * when it is no parameter list. */
static int scan_xml_parameters(chat_parse *p, const char *t, size_t n, text_span name, size_t i, int final,
                               size_t *end, llmm_status *st) {
    int first = 1;
    for (;;) {
        i = skip_space(t, n, i);
        if (starts_at(t, n, i, XML_FUNCTION_CLOSE)) {
            *end = i + strlen(XML_FUNCTION_CLOSE);
            return (*st = emit(p, "}", 1)) ? 0 : 1;
        }
        if (!starts_at(t, n, i, XML_PARAM_OPEN))
            return prefix_at(t, n, i, XML_PARAM_OPEN) || prefix_at(t, n, i, XML_FUNCTION_CLOSE) ? 0 : -1;
        size_t key = i + strlen(XML_PARAM_OPEN), key_end = xml_name_end(t, n, key);
        if (key_end == (size_t)-1) return -1;
        if (key_end == n) return 0;
        if ((*st = emit(p, first ? "\"" : ",\"", first ? 1 : 2)) || (*st = emit(p, t + key, key_end - key)) ||
            (*st = emit(p, "\":", 2)))
            return 0;
        first = 0;
        size_t v = key_end + 1;
        int is_string = is_string_param(p, t + name.at, name.len, t + key, key_end - key);
        if (v < n && t[v] == '\n') v++;
        size_t close = find(t, n, v, XML_PARAM_CLOSE);
        if (close == n) {
            size_t held = final ? 0 : partial_marker(t, n, v, "\n" XML_PARAM_CLOSE);
            *st = emit_xml_value(p, t + v, n - v - held, 0, is_string);
            return 0;
        }
        size_t v_end = close > v && t[close - 1] == '\n' ? close - 1 : close;
        if ((*st = emit_xml_value(p, t + v, v_end - v, 1, is_string))) return 0;
        i = close + strlen(XML_PARAM_CLOSE);
    }
}

static llmm_status parse_xml_call(const char *t, size_t n, size_t pos, int final, chat_parse *p) {
    for (;;) {
        llmm_status st;
        size_t open = content_until(p, t, n, pos, CALL_OPEN, final, &st);
        if (st || open == n) return st;
        size_t i = skip_space(t, n, open + strlen(CALL_OPEN));
        if (!starts_at(t, n, i, XML_FUNCTION_OPEN))
            return prefix_at(t, n, i, XML_FUNCTION_OPEN) && !final ? LLMM_OK : not_a_call(p, t, n, open, final);
        size_t name = i + strlen(XML_FUNCTION_OPEN), name_end = xml_name_end(t, n, name);
        if (name_end == (size_t)-1 || (name_end == n && final)) return not_a_call(p, t, n, open, final);
        if (name_end == n) return LLMM_OK; /* the name is still being written */
        parsed_call c = {.name = {name, name_end - name}, .args_converted = 1};
        c.arguments.at = p->n_converted;
        if ((st = emit(p, "{", 1))) return st;
        size_t fn_end = n;
        int got = scan_xml_parameters(p, t, n, c.name, name_end + 1, final, &fn_end, &st);
        if (st) return st;
        if (got < 0) return not_a_call(p, t, n, open, final);
        c.arguments.len = p->n_converted - c.arguments.at;
        size_t close = got == 1 ? skip_space(t, n, fn_end) : n;
        c.complete = got == 1 && starts_at(t, n, close, CALL_CLOSE);
        if (got == 1 && !c.complete && !prefix_at(t, n, close, CALL_CLOSE)) p->malformed = 1;
        if (add_call(p, &c)) return LLMM_ERR_NO_MEMORY;
        if (!c.complete) return LLMM_OK;
        p->call_end = close + strlen(CALL_CLOSE);
        pos = skip_space(t, n, p->call_end);
        if (pos == n || starts_at(t, n, pos, CALL_OPEN)) continue;
        if (!final && prefix_at(t, n, pos, CALL_OPEN)) return LLMM_OK;
        p->malformed = 1; /* the reference refuses text after a call; kept here as content */
        return add_content(p, pos, n - pos);
    }
}

/* Gemma 4: content, then <|tool_call>call:NAME{key:value,...}<tool_call|> blocks back to back,
 * the values in the template's dialect (strings between <|"|> marks, unescaped; bare keys;
 * numbers, true, false), rewritten as compact JSON ({"location":"Paris"}). A string cut off is
 * left open ({"location":"Par); a number or word cut off is left out until it ends. */
static size_t g4_value(chat_parse *p, const char *t, size_t n, size_t i, int depth, int final, llmm_status *st);

static size_t g4_string(chat_parse *p, const char *t, size_t n, size_t i, int final, llmm_status *st) {
    size_t start = i + strlen(G4_QUOTE), close = find(t, n, start, G4_QUOTE);
    size_t end = close < n ? close : n - (final ? 0 : partial_marker(t, n, start, G4_QUOTE));
    emit_sink sink = {p, LLMM_OK};
    llmm__json_write_string(t + start, end - start, sink_emit, &sink);
    *st = sink.st;
    if (close == n) {
        if (!*st) p->n_converted--; /* the string is still open */
        return n;
    }
    return close + strlen(G4_QUOTE);
}

/* A key (bare or quoted) and its ':' at t[i], emitted as "key": ; n when the text ends first. */
static size_t g4_key(chat_parse *p, const char *t, size_t n, size_t i, llmm_status *st) {
    size_t key = i, key_end;
    int quoted = starts_at(t, n, i, G4_QUOTE);
    if (quoted) {
        key = i + strlen(G4_QUOTE);
        key_end = find(t, n, key, G4_QUOTE);
        i = key_end + strlen(G4_QUOTE);
    } else {
        for (key_end = i; key_end < n && is_word_char(t[key_end]);) key_end++;
        if (key_end == key && key_end < n && !prefix_at(t, n, key_end, G4_QUOTE)) return (size_t)-1;
        i = key_end;
    }
    if (i >= n) return n;
    if (t[i] != ':') return (size_t)-1;
    emit_sink sink = {p, LLMM_OK};
    llmm__json_write_string(t + key, key_end - key, sink_emit, &sink);
    if (!sink.st) sink.st = emit(p, ":", 1);
    *st = sink.st;
    return i + 1;
}

/* {key:value,...} or [value,...] at t[i]. */
static size_t g4_container(chat_parse *p, const char *t, size_t n, size_t i, int depth, int final, llmm_status *st) {
    const char close = t[i] == '[' ? ']' : '}';
    if ((*st = emit(p, t + i, 1))) return n;
    for (i++; i < n && !*st;) {
        if (t[i] == close) return (*st = emit(p, &close, 1)), i + 1;
        if (close == '}') {
            i = g4_key(p, t, n, i, st);
            if (i == (size_t)-1 || i >= n || *st) return i;
        }
        i = g4_value(p, t, n, i, depth + 1, final, st);
        if (i == (size_t)-1 || i >= n || *st) return i;
        if (t[i] == ',') {
            if ((*st = emit(p, ",", 1))) return n;
            i++;
        } else if (t[i] != close) {
            return (size_t)-1;
        }
    }
    return n;
}

static size_t g4_value(chat_parse *p, const char *t, size_t n, size_t i, int depth, int final, llmm_status *st) {
    if (i >= n) return n;
    if (depth > JSON_MAX_DEPTH) return (size_t)-1;
    if (starts_at(t, n, i, G4_QUOTE)) return g4_string(p, t, n, i, final, st);
    if (prefix_at(t, n, i, G4_QUOTE)) return n;
    if (t[i] == '{' || t[i] == '[') return g4_container(p, t, n, i, depth, final, st);
    return convert_scalar(p, t, n, i, final, st);
}

static llmm_status parse_gemma4_call(const char *t, size_t n, size_t pos, int final, chat_parse *p) {
    for (;;) {
        llmm_status st;
        size_t open = content_until(p, t, n, pos, "<|tool_call>", final, &st);
        if (st || open == n) return st;
        if (!starts_at(t, n, open, G4_CALL_OPEN))
            return prefix_at(t, n, open, G4_CALL_OPEN) && !final ? LLMM_OK : not_a_call(p, t, n, open, final);
        size_t name = open + strlen(G4_CALL_OPEN), brace = name;
        while (brace < n && is_word_char(t[brace])) brace++;
        if (brace == n) return final ? not_a_call(p, t, n, open, final) : LLMM_OK; /* the name goes on */
        if (brace == name || t[brace] != '{') return not_a_call(p, t, n, open, final);
        parsed_call c = {.name = {name, brace - name}, .args_converted = 1};
        c.arguments.at = p->n_converted;
        size_t end = g4_container(p, t, n, brace, 0, final, &st);
        if (st) return st;
        if (end == (size_t)-1) return not_a_call(p, t, n, open, final);
        c.arguments.len = p->n_converted - c.arguments.at;
        c.complete = end < n && starts_at(t, n, end, G4_CALL_CLOSE);
        if (end < n && !c.complete && !prefix_at(t, n, end, G4_CALL_CLOSE)) return not_a_call(p, t, n, open, final);
        if (add_call(p, &c)) return LLMM_ERR_NO_MEMORY;
        if (!c.complete) return LLMM_OK;
        p->call_end = end + strlen(G4_CALL_CLOSE);
        pos = skip_space(t, n, p->call_end);
        if (pos == n || starts_at(t, n, pos, "<|tool_call>")) continue;
        if (!final && prefix_at(t, n, pos, "<|tool_call>")) return LLMM_OK;
        p->malformed = 1; /* the reference refuses text after a call; kept here as content */
        return add_content(p, pos, n - pos);
    }
}

/* A schema that says string: "type" "string", or an enum or const of strings only. */
static int schema_is_string(const json_doc *doc, size_t schema) {
    if (doc->nodes[schema].kind != JSON_OBJECT) return 0;
    size_t type = llmm__json_member(doc, schema, "type"), list = llmm__json_member(doc, schema, "enum");
    size_t single = llmm__json_member(doc, schema, "const");
    if (type != JSON_NONE)
        return doc->nodes[type].kind == JSON_STRING && doc->nodes[type].str_len == 6 && !memcmp(json_str(doc, type), "string", 6);
    if (single != JSON_NONE) return doc->nodes[single].kind == JSON_STRING;
    if (list == JSON_NONE || doc->nodes[list].kind != JSON_ARRAY || !doc->nodes[list].n_children) return 0;
    for (size_t v = doc->nodes[list].first; v != JSON_NONE; v = doc->nodes[v].next)
        if (doc->nodes[v].kind != JSON_STRING) return 0;
    return 1;
}

static llmm_status append_record(char **out, size_t *n, size_t *cap, const char *s, size_t len) {
    if (llmm__mem_reserve(NULL, (void **)out, cap, *n + len + 1, 1)) return LLMM_ERR_NO_MEMORY;
    memcpy(*out + *n, s, len);
    (*out)[*n + len] = '\0';
    *n += len + 1;
    return LLMM_OK;
}

llmm_status llmm__chat_string_params(const llmm_tool *tools, size_t n_tools, char **out, size_t *n_out, llmm_diag *d) {
    size_t cap = 0;
    *out = NULL;
    *n_out = 0;
    llmm_status st = LLMM_OK;
    for (size_t k = 0; k < n_tools && !st; k++) {
        st = llmm__chat_tool_check(&tools[k], k, d);
        if (st || !tools[k].parameters) continue;
        json_doc doc;
        char err[64];
        st = llmm__json_parse(&doc, tools[k].parameters, strlen(tools[k].parameters), err, sizeof err);
        if (st) break; /* checked above: only NO_MEMORY */
        size_t props = llmm__json_member(&doc, 0, "properties");
        for (size_t m = props != JSON_NONE && doc.nodes[props].kind == JSON_OBJECT ? doc.nodes[props].first : JSON_NONE;
             m != JSON_NONE && !st; m = doc.nodes[m].next) {
            if (!schema_is_string(&doc, m) || memchr(json_key(&doc, m), '\0', doc.nodes[m].key_len)) continue;
            st = append_record(out, n_out, &cap, tools[k].name, strlen(tools[k].name));
            if (!st) st = append_record(out, n_out, &cap, json_key(&doc, m), doc.nodes[m].key_len);
        }
        llmm__json_doc_free(&doc);
        if (st == LLMM_ERR_NO_MEMORY) llmm__diag_fail(d, st, "out of memory");
    }
    if (st) {
        llmm__mem_free(NULL, *out);
        *out = NULL;
        *n_out = 0;
    }
    return st;
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
    case TOOL_SYNTAX_PYTHON_CALL: return parse_python_call(text, n, pos, final, out);
    case TOOL_SYNTAX_XML_CALL: return parse_xml_call(text, n, pos, final, out);
    case TOOL_SYNTAX_GEMMA4_CALL: return parse_gemma4_call(text, n, pos, final, out);
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
