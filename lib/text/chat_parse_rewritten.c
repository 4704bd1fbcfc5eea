/* The call syntaxes whose arguments are not JSON as written (see chat_parse_rewritten.h):
 * each value is read in the family's own form and written out as compact JSON into
 * chat_parse.converted. */
#include "text/chat_parse_rewritten.h"

#include <string.h>

#include "base/json_value.h"
#include "base/json_write.h"
#include "text/chat_request.h"
#include "text/chat_parsed.h"

#define PY_CALL_OPEN "<|tool_call_start|>"
#define PY_CALL_CLOSE "<|tool_call_end|>"
#define G4_CALL_OPEN "<|tool_call>call:"
#define G4_CALL_CLOSE "<tool_call|>"
#define G4_QUOTE "<|\"|>"
#define XML_FUNCTION_OPEN "<function="
#define XML_FUNCTION_CLOSE "</function>"
#define XML_PARAM_OPEN "<parameter="
#define XML_PARAM_CLOSE "</parameter>"

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

llmm_status llmm__chat_parse_python_call(const char *t, size_t n, size_t pos, int final, chat_parse *p) {
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

llmm_status llmm__chat_parse_xml_call(const char *t, size_t n, size_t pos, int final, chat_parse *p) {
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

llmm_status llmm__chat_parse_gemma4_call(const char *t, size_t n, size_t pos, int final, chat_parse *p) {
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
