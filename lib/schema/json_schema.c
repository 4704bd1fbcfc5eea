/* JSON Schema to GBNF. Every accepted keyword is enforced by the grammar or refused; where
 * the grammar is stricter than the schema (member order, number forms, bounded whitespace)
 * its sentences still validate. The subset and those choices: docs/grammars.md.
 *
 * Sub-schemas become named rules (deduplicated by body); a $ref target becomes one rule,
 * named before its body is built, so recursive schemas give recursive rules. A $ref that
 * reaches a rule still being built without an object or array opened in between would be
 * left recursion and is refused. */
#include "json_schema.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/common.h"
#include "gbnf_text.h"
#include "json_schema_parts.h"
#include "base/json_value.h"
#include "base/unicode.h"

#define SCHEMA_MAX_DEPTH 64   /* nested sub-schemas, $ref hops included */
#define SCHEMA_MAX_COUNT 1000 /* minItems, maxItems, minLength, maxLength */
#define RULE_NAME_MAX 80

/* ------------------------------------------------------------------ primitive rules */

/* JSON whitespace between tokens, bounded so that a sampler cannot wander: a line break at most,
 * then an indentation */
#define WS_BODY "\"\\n\"? [ \\t]{0,20}"
/* Compact JSON: nothing between tokens. Fewer tokens, and a sampled model cannot spend them on
 * spaces (at temperature 1 a tiny model fills every gap it is allowed to). */
#define COMPACT_WS_BODY "\"\""
#define CHAR_BODY                                                                               \
    "[^\"\\\\\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" ([0-9a-cA-Ce-fE-F] [0-9a-fA-F]{3} " \
    "| [dD] [0-7] [0-9a-fA-F]{2}))"
#define STRING_BODY "\"\\\"\" char* \"\\\"\""
#define INTEGER_BODY "\"-\"? (\"0\" | [1-9] [0-9]{0,15})"
#define NUMBER_BODY INTEGER_BODY " (\".\" [0-9]{1,16})? ([eE] (\"+\" | \"-\")? [0-9]{1,3})?"
#define BOOLEAN_BODY "\"true\" | \"false\""
#define NULL_BODY "\"null\""
#define VALUE_BODY "object | array | string | number | boolean | null"
#define OBJECT_BODY "\"{\" ws (string ws \":\" ws value ws (\",\" ws string ws \":\" ws value ws)*)? \"}\""
#define ARRAY_BODY "\"[\" ws (value ws (\",\" ws value ws)*)? \"]\""
/* RFC 3339 full-date: the day checked against the month, February 29 only in leap years
 * (divisible by 4 but not 100, or by 400: read off the last two digits and the century) */
#define DATE_BODY                                                                                  \
    "[0-9]{4} \"-\" ((\"0\" [13578] | \"1\" [02]) \"-\" (\"0\" [1-9] | [12] [0-9] | \"3\" [01]) "            \
    "| (\"0\" [469] | \"11\") \"-\" (\"0\" [1-9] | [12] [0-9] | \"30\") "                                    \
    "| \"02-\" (\"0\" [1-9] | \"1\" [0-9] | \"2\" [0-8])) "                                                \
    "| ([0-9] [0-9] (\"0\" [48] | [2468] [048] | [13579] [26]) | ([02468] [048] | [13579] [26]) \"00\") \"-02-29\""
#define TIME_BODY                                                                         \
    "([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9] \":\" [0-5] [0-9] (\".\" [0-9]{1,9})? " \
    "(\"Z\" | (\"+\" | \"-\") ([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9])"
/* Strings that families write without escapes (Qwen3.5's parameter values, Gemma 4's <|"|>
 * strings): '<' never appears in them, so neither family's closing marker can */
#define RAW_CHAR_BODY "[^<]"
#define RAW_STRING_BODY "raw-char*"
#define G4_STRING_BODY "\"<|\\\"|>\" raw-char* \"<|\\\"|>\""
#define G4_KEY_BODY "[a-zA-Z0-9_.-]+"
#define G4_VALUE_BODY "g4-object | g4-array | g4-string | number | boolean | null"
#define G4_OBJECT_BODY "\"{\" (g4-key \":\" g4-value (\",\" g4-key \":\" g4-value)*)? \"}\""
#define G4_ARRAY_BODY "\"[\" (g4-value (\",\" g4-value)*)? \"]\""
#define UUID_BODY \
    "[0-9a-fA-F]{8} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{12}"

typedef struct primitive {
    const char *name, *body;
    const char *deps[6];
} primitive;

static const primitive primitives[] = {
    {"ws", WS_BODY, {0}},
    {"char", CHAR_BODY, {0}},
    {"string", STRING_BODY, {"char"}},
    {"integer", INTEGER_BODY, {0}},
    {"number", NUMBER_BODY, {0}},
    {"boolean", BOOLEAN_BODY, {0}},
    {"null", NULL_BODY, {0}},
    {"value", VALUE_BODY, {"object", "array", "string", "number", "boolean", "null"}},
    {"object", OBJECT_BODY, {"ws", "string", "value"}},
    {"array", ARRAY_BODY, {"ws", "value"}},
    {"date", DATE_BODY, {0}},
    {"time", TIME_BODY, {0}},
    {"uuid", UUID_BODY, {0}},
    {"raw-char", RAW_CHAR_BODY, {0}},
    {"raw-string", RAW_STRING_BODY, {"raw-char"}},
    {"g4-string", G4_STRING_BODY, {"raw-char"}},
    {"g4-key", G4_KEY_BODY, {0}},
    {"g4-value", G4_VALUE_BODY, {"g4-object", "g4-array", "g4-string", "number", "boolean", "null"}},
    {"g4-object", G4_OBJECT_BODY, {"g4-key", "g4-value"}},
    {"g4-array", G4_ARRAY_BODY, {"g4-value"}},
};
#define N_PRIMITIVES (sizeof primitives / sizeof *primitives)

const char *llmm__json_any_value_gbnf(void) {
    return "root ::= value\n"
           "value ::= " VALUE_BODY "\n"
           "object ::= " OBJECT_BODY "\n"
           "array ::= " ARRAY_BODY "\n"
           "string ::= " STRING_BODY "\n"
           "char ::= " CHAR_BODY "\n"
           "number ::= " NUMBER_BODY "\n"
           "boolean ::= " BOOLEAN_BODY "\n"
           "null ::= " NULL_BODY "\n"
           "ws ::= " WS_BODY "\n";
}

/* ------------------------------------------------------------------ keywords and types */

enum {
    T_NULL = 1,
    T_BOOLEAN = 2,
    T_INTEGER = 4,
    T_NUMBER = 8,
    T_STRING = 16,
    T_ARRAY = 32,
    T_OBJECT = 64,
};

/* Keywords that only describe and never constrain; definitions are reached through $ref. */
static const char *const annotation_keywords[] = {
    "title", "description", "$schema", "$id", "$comment", "examples", "default",
    "deprecated", "readOnly", "writeOnly", "definitions", "$defs",
};

/* Keywords that combine or pick values, whatever the type. */
static const char *const general_keywords[] = {"type", "enum", "const", "anyOf", "oneOf", "$ref"};

typedef struct typed_keyword {
    const char *name;
    unsigned types; /* the types it constrains */
} typed_keyword;

static const typed_keyword typed_keywords[] = {
    {"properties", T_OBJECT},           {"required", T_OBJECT},         {"additionalProperties", T_OBJECT},
    {"items", T_ARRAY},                 {"minItems", T_ARRAY},          {"maxItems", T_ARRAY},
    {"pattern", T_STRING},              {"format", T_STRING},           {"minLength", T_STRING},
    {"maxLength", T_STRING},            {"minimum", T_INTEGER | T_NUMBER}, {"maximum", T_INTEGER | T_NUMBER},
    {"exclusiveMinimum", T_INTEGER | T_NUMBER}, {"exclusiveMaximum", T_INTEGER | T_NUMBER},
};

static int in_list(const char *const *list, size_t n, const char *s, size_t len) {
    for (size_t i = 0; i < n; i++)
        if (strlen(list[i]) == len && memcmp(list[i], s, len) == 0) return 1;
    return 0;
}

static const typed_keyword *find_typed_keyword(const char *s, size_t len) {
    for (size_t i = 0; i < sizeof typed_keywords / sizeof *typed_keywords; i++)
        if (strlen(typed_keywords[i].name) == len && memcmp(typed_keywords[i].name, s, len) == 0)
            return &typed_keywords[i];
    return NULL;
}

/* ------------------------------------------------------------------ the converter */

typedef struct rule {
    char name[RULE_NAME_MAX];
    char *body; /* NULL while a $ref target's rule is being built */
} rule;

/* How values are written: JSON, or the call syntax of a tool family whose arguments are not
 * (only) JSON. */
typedef enum value_dialect {
    DIALECT_JSON,
    DIALECT_KWARGS,     /* LFM2: the root object as Python keyword arguments, the values JSON */
    DIALECT_XML_PARAMS, /* Qwen3.5: the root object as <parameter=KEY> blocks, a string value its raw
                           text, any other value JSON */
    DIALECT_GEMMA4,     /* Gemma 4: objects with bare keys, strings between <|"|> marks, unescaped */
} value_dialect;

typedef struct converter {
    json_doc doc;
    rule *rules; /* rules[0] is root */
    size_t n_rules, cap_rules;
    size_t *ref_rule;      /* per node: the rule a $ref gave it, JSON_NONE before */
    int *ref_open_depth;   /* per node: open_depth when that rule began */
    int open_depth;        /* objects and arrays opened on the way to the current schema */
    int depth;             /* nested sub-schemas being converted */
    char path[256];        /* JSON pointer of the current schema, for messages */
    size_t path_len;
    char *err;
    size_t err_size;
    llmm_status status;
    int compact; /* no whitespace between tokens: the ws rule matches nothing */
    value_dialect dialect;
    int raw_strings; /* converting a Qwen3.5 parameter whose value is a string: its raw text */
} converter;

/* The root is no value of its own but the inside of a call (keyword arguments, parameter blocks). */
static int root_is_call_inside(const converter *cv) {
    return cv->dialect == DIALECT_KWARGS || cv->dialect == DIALECT_XML_PARAMS;
}

static int fail(converter *cv, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(converter *cv, const char *fmt, ...) {
    if (cv->status != LLMM_OK) return 0;
    cv->status = LLMM_ERR_INVALID_ARG;
    if (!cv->err || !cv->err_size) return 0;
    char what[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    snprintf(cv->err, cv->err_size, "%s at %s", what, cv->path);
    return 0;
}

static int out_of_memory(converter *cv) {
    if (cv->status == LLMM_OK && cv->err && cv->err_size) snprintf(cv->err, cv->err_size, "out of memory");
    if (cv->status == LLMM_OK) cv->status = LLMM_ERR_NO_MEMORY;
    return 0;
}

static int text_ok(converter *cv, const gbnf_text *t) { return t->failed ? out_of_memory(cv) : 1; }

/* Append one JSON-pointer segment (~ and / escaped); returns the length to restore. A path
 * too long for the buffer is cut, which only shortens messages. */
static size_t path_push(converter *cv, const char *seg, size_t n) {
    size_t old = cv->path_len;
    char *p = cv->path;
    size_t cap = sizeof cv->path - 1;
    if (cv->path_len < cap) p[cv->path_len++] = '/';
    for (size_t i = 0; i < n && cv->path_len + 2 <= cap; i++) {
        if (seg[i] == '~' || seg[i] == '/') {
            p[cv->path_len++] = '~';
            p[cv->path_len++] = seg[i] == '~' ? '0' : '1';
        } else {
            p[cv->path_len++] = seg[i];
        }
    }
    p[cv->path_len] = '\0';
    return old;
}

static size_t path_push_index(converter *cv, size_t i) {
    char num[24];
    return path_push(cv, num, (size_t)snprintf(num, sizeof num, "%zu", i));
}

static void path_pop(converter *cv, size_t old) {
    cv->path_len = old;
    cv->path[old] = '\0';
}

static const json_node *node_at(const converter *cv, size_t i) { return &cv->doc.nodes[i]; }

static size_t member(const converter *cv, size_t obj, const char *key) { return llmm__json_member(&cv->doc, obj, key); }

/* ------------------------------------------------------------------ rules */

static int name_taken(const converter *cv, const char *name) {
    for (size_t i = 0; i < N_PRIMITIVES; i++)
        if (strcmp(primitives[i].name, name) == 0) return 1;
    for (size_t i = 0; i < cv->n_rules; i++)
        if (strcmp(cv->rules[i].name, name) == 0) return 1;
    return 0;
}

/* A new rule named after hint (letters, digits and '-' kept, the rest turned to '-'), made
 * unique with a number; its body is set by the caller. Returns its index or JSON_NONE. */
static size_t new_rule(converter *cv, const char *hint) {
    char base[RULE_NAME_MAX - 8], name[RULE_NAME_MAX];
    size_t n = 0;
    for (const char *h = hint; *h && n + 1 < sizeof base; h++) {
        char c = *h;
        int keep = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
        if (keep) base[n++] = c;
        else if (n > 0 && base[n - 1] != '-') base[n++] = '-';
    }
    while (n > 0 && base[n - 1] == '-') n--;
    if (n == 0) base[n++] = 'r';
    base[n] = '\0';
    snprintf(name, sizeof name, "%s", base);
    for (unsigned k = 2; name_taken(cv, name); k++) snprintf(name, sizeof name, "%s-%u", base, k);
    if (llmm__mem_reserve(NULL, (void **)&cv->rules, &cv->cap_rules, cv->n_rules + 1, sizeof *cv->rules) != LLMM_OK) {
        out_of_memory(cv);
        return JSON_NONE;
    }
    rule *r = &cv->rules[cv->n_rules];
    memcpy(r->name, name, sizeof name);
    r->body = NULL;
    return cv->n_rules++;
}

/* A rule with this body (an existing one with the same body if there is one); its name is
 * appended to out. Takes the body's text. */
static int add_rule(converter *cv, const char *hint, gbnf_text *body, gbnf_text *out) {
    if (!text_ok(cv, body)) return 0;
    for (size_t i = 0; i < cv->n_rules; i++)
        if (cv->rules[i].body && strcmp(cv->rules[i].body, body->data) == 0) {
            llmm__gbnf_text_free(body);
            llmm__gbnf_text_str(out, cv->rules[i].name);
            return text_ok(cv, out);
        }
    size_t r = new_rule(cv, hint);
    if (r == JSON_NONE) return 0;
    cv->rules[r].body = body->data;
    *body = (gbnf_text){0};
    llmm__gbnf_text_str(out, cv->rules[r].name);
    return text_ok(cv, out);
}

/* Names a primitive rule in out, adding it and what it refers to. The table's dependencies
 * end at rules already added, so the recursion is bounded by the table's size. */
static int add_primitive(converter *cv, const char *name, gbnf_text *out) {
    const primitive *p = NULL;
    for (size_t i = 0; i < N_PRIMITIVES && !p; i++)
        if (strcmp(primitives[i].name, name) == 0) p = &primitives[i];
    if (!p) return fail(cv, "internal: no primitive '%s'", name);
    if (out) llmm__gbnf_text_str(out, name);
    for (size_t i = 0; i < cv->n_rules; i++)
        if (strcmp(cv->rules[i].name, name) == 0) return out ? text_ok(cv, out) : 1;
    if (llmm__mem_reserve(NULL, (void **)&cv->rules, &cv->cap_rules, cv->n_rules + 1, sizeof *cv->rules) != LLMM_OK)
        return out_of_memory(cv);
    rule *r = &cv->rules[cv->n_rules];
    snprintf(r->name, sizeof r->name, "%s", name);
    const char *body = cv->compact && strcmp(name, "ws") == 0 ? COMPACT_WS_BODY : p->body;
    r->body = llmm__mem_strndup(NULL, body, strlen(body));
    if (!r->body) return out_of_memory(cv);
    cv->n_rules++;
    for (size_t i = 0; i < sizeof p->deps / sizeof *p->deps && p->deps[i]; i++)
        if (!add_primitive(cv, p->deps[i], NULL)) return 0;
    return out ? text_ok(cv, out) : 1;
}

/* The primitive that stands for a JSON one in the dialect being written. */
static const char *dialect_primitive(const converter *cv, const char *name) {
    static const char *const raw[][2] = {{"string", "raw-string"}, {"char", "raw-char"}};
    static const char *const gemma4[][2] = {
        {"string", "g4-string"}, {"char", "raw-char"}, {"value", "g4-value"}, {"object", "g4-object"}, {"array", "g4-array"}};
    const char *const(*map)[2] = cv->raw_strings ? raw : cv->dialect == DIALECT_GEMMA4 ? gemma4 : NULL;
    size_t n = cv->raw_strings ? sizeof raw / sizeof *raw : sizeof gemma4 / sizeof *gemma4;
    for (size_t i = 0; map && i < n; i++)
        if (strcmp(map[i][0], name) == 0) return map[i][1];
    return name;
}

static int use_primitive(converter *cv, const char *name, gbnf_text *out) {
    return add_primitive(cv, dialect_primitive(cv, name), out);
}

static int is_rule_name(const char *s) {
    if (!*s) return 0;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') || *s == '-'))
            return 0;
    return 1;
}

static int schema_expr(converter *cv, size_t node, const char *hint, gbnf_text *out);

/* The schema as a rule name in out: its own rule unless its expression is a name already. */
static int schema_rule(converter *cv, size_t node, const char *hint, gbnf_text *out) {
    gbnf_text e = {0};
    if (!schema_expr(cv, node, hint, &e) || !text_ok(cv, &e)) {
        llmm__gbnf_text_free(&e);
        return 0;
    }
    if (is_rule_name(e.data)) {
        llmm__gbnf_text_bytes(out, e.data, e.len);
        llmm__gbnf_text_free(&e);
        return text_ok(cv, out);
    }
    return add_rule(cv, hint, &e, out);
}

static void child_hint(char *buf, size_t size, const char *hint, const char *part, size_t part_len) {
    snprintf(buf, size, "%s-%.*s", hint, (int)LLMM_MIN(part_len, 40), part);
}

/* ------------------------------------------------------------------ JSON values as text */

static void write_json_string(gbnf_text *t, const char *s, size_t n) {
    llmm__gbnf_text_str(t, "\"");
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') llmm__gbnf_text_fmt(t, "\\%c", c);
        else if (c == '\n') llmm__gbnf_text_str(t, "\\n");
        else if (c == '\t') llmm__gbnf_text_str(t, "\\t");
        else if (c == '\r') llmm__gbnf_text_str(t, "\\r");
        else if (c == '\b') llmm__gbnf_text_str(t, "\\b");
        else if (c == '\f') llmm__gbnf_text_str(t, "\\f");
        else if (c < 0x20) llmm__gbnf_text_fmt(t, "\\u%04x", c);
        else llmm__gbnf_text_bytes(t, (const char *)&c, 1);
    }
    llmm__gbnf_text_str(t, "\"");
}

/* A Gemma 4 bare key, and a Qwen3.5 parameter name: what those parsers read as a name. */
static int is_word_name(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') || (s[i] >= '0' && s[i] <= '9') ||
              s[i] == '_' || s[i] == '-' || s[i] == '.'))
            return 0;
    return n > 0;
}

/* A string as the dialect writes it; 0 when it cannot be written there. */
static int write_string(const converter *cv, gbnf_text *t, const char *s, size_t n) {
    if (cv->raw_strings) { /* up to "</parameter>", as the parser reads it */
        for (size_t i = 0; i + 12 <= n; i++)
            if (memcmp(s + i, "</parameter>", 12) == 0) return 0;
        llmm__gbnf_text_bytes(t, s, n);
    } else if (cv->dialect == DIALECT_GEMMA4) { /* up to the next <|"|> */
        for (size_t i = 0; i + 5 <= n; i++)
            if (memcmp(s + i, "<|\"|>", 5) == 0) return 0;
        llmm__gbnf_text_str(t, "<|\"|>");
        llmm__gbnf_text_bytes(t, s, n);
        llmm__gbnf_text_str(t, "<|\"|>");
    } else {
        write_json_string(t, s, n);
    }
    return 1;
}

/* The value as the dialect writes it: compact JSON (no spaces, strings in their shortest
 * escapes, numbers as written), or Gemma 4's form of it (bare keys, <|"|> strings). 0 when a
 * string or key cannot be written in the dialect. Depth is bounded by the reader's
 * JSON_MAX_DEPTH. */
static int write_value(const converter *cv, size_t v, gbnf_text *t) {
    const json_node *n = node_at(cv, v);
    if (n->kind == JSON_STRING) return write_string(cv, t, json_str(&cv->doc, v), n->str_len);
    if (n->kind != JSON_ARRAY && n->kind != JSON_OBJECT) {
        llmm__gbnf_text_bytes(t, cv->doc.src + n->src, n->src_len);
        return 1;
    }
    llmm__gbnf_text_str(t, n->kind == JSON_ARRAY ? "[" : "{");
    for (size_t c = n->first; c != JSON_NONE; c = node_at(cv, c)->next) {
        if (c != n->first) llmm__gbnf_text_str(t, ",");
        if (n->kind == JSON_OBJECT) {
            const char *key = json_key(&cv->doc, c);
            size_t key_len = node_at(cv, c)->key_len;
            if (cv->dialect != DIALECT_GEMMA4) write_json_string(t, key, key_len);
            else if (is_word_name(key, key_len)) llmm__gbnf_text_bytes(t, key, key_len);
            else return 0;
            llmm__gbnf_text_str(t, ":");
        }
        if (!write_value(cv, c, t)) return 0;
    }
    llmm__gbnf_text_str(t, n->kind == JSON_ARRAY ? "]" : "}");
    return 1;
}

static unsigned value_type(const converter *cv, size_t v) {
    const json_node *n = node_at(cv, v);
    switch (n->kind) {
    case JSON_NULL: return T_NULL;
    case JSON_TRUE:
    case JSON_FALSE: return T_BOOLEAN;
    case JSON_STRING: return T_STRING;
    case JSON_ARRAY: return T_ARRAY;
    case JSON_OBJECT: return T_OBJECT;
    default: {
        const char *s = cv->doc.src + n->src;
        for (size_t i = 0; i < n->src_len; i++)
            if (s[i] == '.' || s[i] == 'e' || s[i] == 'E') return T_NUMBER;
        return T_NUMBER | T_INTEGER;
    }
    }
}

/* ------------------------------------------------------------------ numbers */

/* A bound written as a whole number of at most 15 digits ("3", "-2", "10.0"). */
static int read_bound(converter *cv, size_t v, const char *keyword, int64_t *out) {
    const json_node *n = node_at(cv, v);
    if (n->kind != JSON_NUMBER) return fail(cv, "'%s' must be a number", keyword);
    const char *s = cv->doc.src + n->src, *end = s + n->src_len;
    int negative = *s == '-';
    if (negative) s++;
    int64_t value = 0;
    size_t digits = 0;
    for (; s < end && *s >= '0' && *s <= '9'; s++, digits++) {
        if (digits == 15) return fail(cv, "'%s' beyond %lld is not supported", keyword, SCHEMA_MAX_INT_BOUND);
        value = value * 10 + (*s - '0');
    }
    if (s < end && *s == '.')
        for (s++; s < end && *s == '0'; s++) {}
    if (s != end) return fail(cv, "'%s' %.*s: only whole-number bounds are supported", keyword, (int)n->src_len, cv->doc.src + n->src);
    *out = negative ? -value : value;
    return 1;
}

typedef struct bounds {
    int has_min, has_max, exclusive_min, exclusive_max;
    int64_t min, max;
} bounds;

static int read_bounds(converter *cv, size_t node, bounds *b) {
    static const struct { const char *key; int is_max, exclusive; } keys[] = {
        {"minimum", 0, 0}, {"exclusiveMinimum", 0, 1}, {"maximum", 1, 0}, {"exclusiveMaximum", 1, 1}};
    *b = (bounds){0};
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++) {
        size_t v = member(cv, node, keys[i].key);
        if (v == JSON_NONE) continue;
        int64_t x;
        if (!read_bound(cv, v, keys[i].key, &x)) return 0;
        int *has = keys[i].is_max ? &b->has_max : &b->has_min;
        int *exclusive = keys[i].is_max ? &b->exclusive_max : &b->exclusive_min;
        int64_t *bound = keys[i].is_max ? &b->max : &b->min;
        /* both forms given: keep the tighter */
        int tighter = !*has || (keys[i].is_max ? x < *bound || (x == *bound && keys[i].exclusive)
                                               : x > *bound || (x == *bound && keys[i].exclusive));
        if (tighter) *has = 1, *bound = x, *exclusive = keys[i].exclusive;
    }
    return 1;
}

static int emit_integer(converter *cv, size_t node, const char *hint, gbnf_text *out) {
    LLMM_UNUSED(hint);
    bounds b;
    if (!read_bounds(cv, node, &b)) return 0;
    if (!b.has_min && !b.has_max) return use_primitive(cv, "integer", out);
    int64_t lo = b.min + b.exclusive_min, hi = b.max - b.exclusive_max;
    if (b.has_min && b.has_max && lo > hi) return fail(cv, "the integer bounds admit no value");
    llmm__gbnf_integer_range(out, b.has_min, lo, b.has_max, hi);
    return text_ok(cv, out);
}

/* Numbers within whole-number bounds, written without an exponent: the whole numbers in
 * range, and I.F with F ending in a non-zero digit (so I.F lies strictly between I and I+1,
 * and an exclusive bound needs no case of its own): for I.F >= 0, I in [lo, hi - 1]; for
 * -(I.F) < 0, I in [-hi, -lo - 1]. */
static int emit_number(converter *cv, size_t node, const char *hint, gbnf_text *out) {
    LLMM_UNUSED(hint);
    bounds b;
    if (!read_bounds(cv, node, &b)) return 0;
    if (!b.has_min && !b.has_max) return use_primitive(cv, "number", out);
    static const char fraction[] = " \".\" [0-9]{0,15} [1-9]";
    int64_t lo = b.min, hi = b.max;
    const char *sep = "";
    llmm__gbnf_text_str(out, "(");
    int64_t whole_lo = lo + b.exclusive_min, whole_hi = hi - b.exclusive_max;
    if (!(b.has_min && b.has_max && whole_lo > whole_hi)) {
        llmm__gbnf_integer_range(out, b.has_min, whole_lo, b.has_max, whole_hi);
        sep = " | ";
    }
    if (!b.has_max || hi > 0) { /* positive fractions */
        int64_t from = b.has_min && lo > 0 ? lo : 0;
        if (!b.has_max || from <= hi - 1) {
            llmm__gbnf_text_str(out, sep);
            llmm__gbnf_integer_range(out, 1, from, b.has_max, hi - 1);
            llmm__gbnf_text_str(out, fraction);
            sep = " | ";
        }
    }
    if (!b.has_min || lo < 0) { /* negative fractions */
        int64_t from = b.has_max && hi < 0 ? -hi : 0;
        if (!b.has_min || from <= -lo - 1) {
            llmm__gbnf_text_fmt(out, "%s\"-\" ", sep);
            llmm__gbnf_integer_range(out, 1, from, b.has_min, -lo - 1);
            llmm__gbnf_text_str(out, fraction);
            sep = " | ";
        }
    }
    llmm__gbnf_text_str(out, ")");
    if (!*sep) return fail(cv, "the number bounds admit no value");
    return text_ok(cv, out);
}

/* ------------------------------------------------------------------ other types */

static int emit_null(converter *cv, size_t node, const char *hint, gbnf_text *out) {
    LLMM_UNUSED(node), LLMM_UNUSED(hint);
    return use_primitive(cv, "null", out);
}

static int emit_boolean(converter *cv, size_t node, const char *hint, gbnf_text *out) {
    LLMM_UNUSED(node), LLMM_UNUSED(hint);
    return use_primitive(cv, "boolean", out);
}

/* A count keyword (minItems, maxLength, ...): a whole number in [0, SCHEMA_MAX_COUNT]. */
static int read_count(converter *cv, size_t node, const char *keyword, long *out) {
    size_t v = member(cv, node, keyword);
    if (v == JSON_NONE) return 1;
    int64_t x;
    if (!read_bound(cv, v, keyword, &x)) return 0;
    if (x < 0) return fail(cv, "'%s' must not be negative", keyword);
    if (x > SCHEMA_MAX_COUNT) return fail(cv, "'%s' above %d is not supported", keyword, SCHEMA_MAX_COUNT);
    *out = (long)x;
    return 1;
}

/* {min,max} after a term; max < 0 means no upper bound. */
static void put_repeat(gbnf_text *out, long min, long max) {
    if (max < 0) {
        if (min == 0) llmm__gbnf_text_str(out, "*");
        else if (min == 1) llmm__gbnf_text_str(out, "+");
        else llmm__gbnf_text_fmt(out, "{%ld,}", min);
    } else if (min == max) {
        if (min != 1) llmm__gbnf_text_fmt(out, "{%ld}", min);
    } else if (min == 0 && max == 1) {
        llmm__gbnf_text_str(out, "?");
    } else {
        llmm__gbnf_text_fmt(out, "{%ld,%ld}", min, max);
    }
}

typedef struct string_format {
    const char *name;
    const char *expr; /* inside the quotes */
    const char *uses[2];
} string_format;

static const string_format string_formats[] = {
    {"date", "date", {"date"}},
    {"time", "time", {"time"}},
    {"date-time", "date \"T\" time", {"date", "time"}},
    {"uuid", "uuid", {"uuid"}},
};

/* The GBNF literal around a string: JSON's quotes, Gemma 4's <|"|> marks, or nothing (Qwen3.5's
 * raw parameter text). */
static const char *string_quote(const converter *cv) {
    return cv->raw_strings ? "\"\"" : cv->dialect == DIALECT_GEMMA4 ? "\"<|\\\"|>\"" : "\"\\\"\"";
}

static int emit_string(converter *cv, size_t node, const char *hint, gbnf_text *out) {
    LLMM_UNUSED(hint);
    const char *quote = string_quote(cv);
    size_t pattern = member(cv, node, "pattern"), format = member(cv, node, "format");
    int has_length = member(cv, node, "minLength") != JSON_NONE || member(cv, node, "maxLength") != JSON_NONE;
    if (pattern != JSON_NONE && (format != JSON_NONE || has_length))
        return fail(cv, "'%s' alongside 'pattern' is not supported", format != JSON_NONE ? "format" : "minLength/maxLength");
    if (format != JSON_NONE && has_length) return fail(cv, "'minLength/maxLength' alongside 'format' is not supported");
    if (pattern != JSON_NONE) {
        if (node_at(cv, pattern)->kind != JSON_STRING) return fail(cv, "'pattern' must be a string");
        /* the pattern's grammar writes JSON's escapes, which these strings do not have */
        if (cv->raw_strings || cv->dialect == DIALECT_GEMMA4)
            return fail(cv, "'pattern' is not supported where strings are written without JSON escapes (%s)",
                        cv->raw_strings ? "qwen3_5 parameters" : "gemma4 strings");
        char why[200];
        llmm__gbnf_text_str(out, "\"\\\"\" ");
        if (!llmm__gbnf_from_pattern(out, json_str(&cv->doc, pattern), node_at(cv, pattern)->str_len, why, sizeof why))
            return fail(cv, "%s", why);
        llmm__gbnf_text_str(out, " \"\\\"\"");
        return use_primitive(cv, "char", NULL) && text_ok(cv, out);
    }
    if (format != JSON_NONE) {
        if (node_at(cv, format)->kind != JSON_STRING) return fail(cv, "'format' must be a string");
        const char *f = json_str(&cv->doc, format);
        size_t f_len = node_at(cv, format)->str_len;
        for (size_t i = 0; i < sizeof string_formats / sizeof *string_formats; i++) {
            const string_format *sf = &string_formats[i];
            if (strlen(sf->name) != f_len || memcmp(sf->name, f, f_len) != 0) continue;
            for (size_t k = 0; k < 2 && sf->uses[k]; k++)
                if (!use_primitive(cv, sf->uses[k], NULL)) return 0;
            llmm__gbnf_text_fmt(out, "%s %s %s", quote, sf->expr, quote);
            return text_ok(cv, out);
        }
        return fail(cv, "unsupported format '%.*s'", (int)LLMM_MIN(f_len, 40), f);
    }
    long min = 0, max = -1;
    if (!read_count(cv, node, "minLength", &min) || !read_count(cv, node, "maxLength", &max)) return 0;
    if (!has_length) return use_primitive(cv, "string", out);
    if (max >= 0 && min > max) return fail(cv, "'minLength' above 'maxLength' admits no value");
    llmm__gbnf_text_fmt(out, "%s %s", quote, dialect_primitive(cv, "char"));
    put_repeat(out, min, max);
    llmm__gbnf_text_fmt(out, " %s", quote);
    return use_primitive(cv, "char", NULL) && text_ok(cv, out);
}

static int emit_array(converter *cv, size_t node, const char *hint, gbnf_text *out) {
    long min = 0, max = -1;
    if (!read_count(cv, node, "minItems", &min) || !read_count(cv, node, "maxItems", &max)) return 0;
    if (max >= 0 && min > max) return fail(cv, "'minItems' above 'maxItems' admits no value");
    size_t items = member(cv, node, "items");
    if (items != JSON_NONE && node_at(cv, items)->kind == JSON_FALSE) {
        if (min > 0) return fail(cv, "'items': false with 'minItems' admits no value");
        max = 0;
    }
    if (items != JSON_NONE && node_at(cv, items)->kind == JSON_ARRAY)
        return fail(cv, "'items' as an array (tuples) is not supported");
    if (max == 0) {
        llmm__gbnf_text_str(out, "\"[\" ws \"]\"");
        return use_primitive(cv, "ws", NULL) && text_ok(cv, out);
    }
    gbnf_text item = {0};
    char item_hint[RULE_NAME_MAX];
    snprintf(item_hint, sizeof item_hint, "%s-item", hint);
    cv->open_depth++;
    size_t old = path_push(cv, "items", 5);
    int ok = items == JSON_NONE ? use_primitive(cv, "value", &item) : schema_rule(cv, items, item_hint, &item);
    path_pop(cv, old);
    cv->open_depth--;
    if (!ok || !use_primitive(cv, "ws", NULL)) {
        llmm__gbnf_text_free(&item);
        return 0;
    }
    /* "[" ws item ws ("," ws item ws){min-1,max-1} "]", the items optional when min is 0 */
    llmm__gbnf_text_fmt(out, "\"[\" ws %s%s ws (\",\" ws %s ws)", min == 0 ? "(" : "", item.data, item.data);
    put_repeat(out, min > 0 ? min - 1 : 0, max < 0 ? -1 : max - 1);
    llmm__gbnf_text_fmt(out, "%s \"]\"", min == 0 ? ")?" : "");
    llmm__gbnf_text_free(&item);
    return text_ok(cv, out);
}

/* How an object's members are written: as JSON; at the root of a call, as LFM2's Python keyword
 * arguments (`location="Paris", days=2`, its template's spacing) or Qwen3.5's parameter blocks;
 * or as Gemma 4's objects ({location:<|"|>Paris<|"|>}). Keys other than JSON's are written as
 * they are, between key_prefix and key_suffix, and must pass key_ok. */
typedef struct member_syntax {
    const char *open, *kv_sep, *after_value, *member_sep, *close, *empty; /* GBNF */
    const char *key_prefix, *key_suffix; /* text; NULL: the key is a JSON string */
    int (*key_ok)(const char *key, size_t len);
    const char *key_refused; /* why a key failing key_ok cannot be written */
} member_syntax;

static int is_identifier(const char *s, size_t n);

static const member_syntax json_members = {"\"{\" ws ", " ws \":\" ws ", " ws", "\",\" ws ", " \"}\"", "\"{\" ws \"}\"",
                                           NULL, NULL, NULL, NULL};
static const member_syntax kwargs_members = {"", " \"=\" ", "", "\", \" ", "", "\"\"",
                                             "", "", is_identifier, "cannot be a Python keyword argument"};
static const member_syntax xml_members = {"", " ", " \"\\n</parameter>\\n\"", "", "", "\"\"",
                                          "<parameter=", ">\n", is_word_name, "cannot be a qwen3_5 <parameter=NAME>"};
static const member_syntax gemma4_members = {"\"{\" ", " \":\" ", "", "\",\" ", " \"}\"", "\"{}\"",
                                             "", "", is_word_name, "cannot be a bare gemma4 key"};

/* Members in the order of "properties", each optional one skippable: the first member
 * present is one of the leading optional ones or the first required one, and each later one
 * is preceded by the separator; additional members (extra_kv, NULL when none) follow the
 * declared ones. */
static int emit_object_members(converter *cv, const member_syntax *syn, char (*kv)[RULE_NAME_MAX],
                               const unsigned char *required, size_t n, const char *extra_kv, gbnf_text *out) {
    int any_required = 0;
    for (size_t i = 0; i < n; i++) any_required |= required[i];
    llmm__gbnf_text_str(out, "(");
    for (size_t first = 0; first < n; first++) {
        if (first) llmm__gbnf_text_str(out, " | ");
        llmm__gbnf_text_str(out, kv[first]);
        for (size_t k = first + 1; k < n; k++)
            llmm__gbnf_text_fmt(out, required[k] ? " %s%s" : " (%s%s)?", syn->member_sep, kv[k]);
        if (extra_kv) llmm__gbnf_text_fmt(out, " (%s%s)*", syn->member_sep, extra_kv);
        if (required[first]) break;
    }
    if (extra_kv && !any_required)
        llmm__gbnf_text_fmt(out, "%s%s (%s%s)*", n ? " | " : "", extra_kv, syn->member_sep, extra_kv);
    llmm__gbnf_text_str(out, any_required ? ")" : ")?");
    return text_ok(cv, out);
}

/* The key of an additional member: a string other than every declared name, so that no member
 * is given twice. A trie of the declared names, one rule a node: at a node the key may end
 * (unless that spells a declared name), go on with a character no declared name continues
 * with (then anything), or follow a child. Keys are written without escapes, so a declared
 * name that needs escapes can never be spelled and is left out of the trie. */
typedef struct key_trie_node {
    uint32_t cp;
    size_t child, sibling, rule;
    int terminal;
} key_trie_node;

#define KEY_CHAR_CLASS_OPEN "[^\"\\\\\\x00-\\x1F"

static int key_trie_insert(converter *cv, key_trie_node **nodes, size_t *n, size_t *cap, const char *key, size_t len) {
    for (size_t i = 0; i < len; i++)
        if (key[i] == '"' || key[i] == '\\' || (unsigned char)key[i] < 0x20) return 1;
    size_t at = 0;
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        i += llmm__utf8_decode((const uint8_t *)key + i, len - i, &cp);
        size_t c = (*nodes)[at].child;
        while (c != JSON_NONE && (*nodes)[c].cp != cp) c = (*nodes)[c].sibling;
        if (c == JSON_NONE) {
            if (llmm__mem_reserve(NULL, (void **)nodes, cap, *n + 1, sizeof **nodes) != LLMM_OK) return out_of_memory(cv);
            c = (*n)++;
            (*nodes)[c] = (key_trie_node){.cp = cp, .child = JSON_NONE, .sibling = (*nodes)[at].child};
            (*nodes)[at].child = c;
        }
        at = c;
    }
    (*nodes)[at].terminal = 1;
    return 1;
}

static int key_trie_rules(converter *cv, const key_trie_node *nodes, size_t n) {
    for (size_t i = 0; i < n; i++) {
        gbnf_text body = {0};
        const char *sep = "";
        if (!nodes[i].terminal) llmm__gbnf_text_str(&body, "\"\\\"\""), sep = " | ";
        llmm__gbnf_text_fmt(&body, "%s" KEY_CHAR_CLASS_OPEN, sep);
        for (size_t c = nodes[i].child; c != JSON_NONE; c = nodes[c].sibling) llmm__gbnf_text_class_char(&body, nodes[c].cp);
        llmm__gbnf_text_str(&body, "] " KEY_CHAR_CLASS_OPEN "]* \"\\\"\"");
        for (size_t c = nodes[i].child; c != JSON_NONE; c = nodes[c].sibling) {
            char utf8[4];
            llmm__gbnf_text_str(&body, " | ");
            llmm__gbnf_text_literal(&body, utf8, llmm__utf8_encode(nodes[c].cp, utf8));
            llmm__gbnf_text_fmt(&body, " %s", cv->rules[nodes[c].rule].name);
        }
        if (!text_ok(cv, &body)) return 0;
        cv->rules[nodes[i].rule].body = body.data;
    }
    return 1;
}

static int other_key_expr(converter *cv, size_t props, const char *hint, gbnf_text *out) {
    key_trie_node *nodes = NULL;
    size_t n = 0, cap = 0;
    int ok = llmm__mem_reserve(NULL, (void **)&nodes, &cap, 1, sizeof *nodes) == LLMM_OK ? 1 : out_of_memory(cv);
    if (ok) nodes[n++] = (key_trie_node){.child = JSON_NONE, .sibling = JSON_NONE};
    for (size_t p = node_at(cv, props)->first; ok && p != JSON_NONE; p = node_at(cv, p)->next)
        ok = key_trie_insert(cv, &nodes, &n, &cap, json_key(&cv->doc, p), node_at(cv, p)->key_len);
    char key_hint[RULE_NAME_MAX + 12];
    snprintf(key_hint, sizeof key_hint, "%s-other-key", hint);
    for (size_t i = 0; ok && i < n; i++) ok = (nodes[i].rule = new_rule(cv, key_hint)) != JSON_NONE;
    if (ok) ok = key_trie_rules(cv, nodes, n);
    if (ok) llmm__gbnf_text_fmt(out, "\"\\\"\" %s", cv->rules[nodes[0].rule].name);
    llmm__mem_free(NULL, nodes);
    return ok && text_ok(cv, out);
}

/* The rule of one additional member (key, ':', a value of schema extra) into name. */
static int extra_member_rule(converter *cv, size_t extra, size_t props, const char *hint, gbnf_text *name) {
    gbnf_text value = {0}, body = {0};
    char extra_hint[RULE_NAME_MAX + 16];
    snprintf(extra_hint, sizeof extra_hint, "%s-additional", hint);
    size_t old = path_push(cv, "additionalProperties", 20);
    int ok = schema_rule(cv, extra, extra_hint, &value);
    path_pop(cv, old);
    if (ok) ok = props == JSON_NONE || node_at(cv, props)->n_children == 0 ? use_primitive(cv, "string", &body)
                                                                          : other_key_expr(cv, props, hint, &body);
    if (ok) {
        llmm__gbnf_text_fmt(&body, " ws \":\" ws %s ws", value.data);
        snprintf(extra_hint, sizeof extra_hint, "%s-additional-kv", hint);
        ok = add_rule(cv, extra_hint, &body, name);
    }
    llmm__gbnf_text_free(&value), llmm__gbnf_text_free(&body);
    return ok;
}

/* A Python identifier: what a keyword argument's name must be. */
static int is_identifier(const char *s, size_t n) {
    if (n == 0 || (s[0] >= '0' && s[0] <= '9')) return 0;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '_'))
            return 0;
    return 1;
}

/* Whether a schema constrains nothing: true, or only annotations. */
static int constrains_nothing(const converter *cv, size_t node) {
    const json_node *n = node_at(cv, node);
    if (n->kind == JSON_TRUE) return 1;
    if (n->kind != JSON_OBJECT) return 0;
    for (size_t m = n->first; m != JSON_NONE; m = node_at(cv, m)->next)
        if (!in_list(annotation_keywords, sizeof annotation_keywords / sizeof *annotation_keywords, json_key(&cv->doc, m),
                     node_at(cv, m)->key_len))
            return 0;
    return 1;
}

static size_t follow_refs(const converter *cv, size_t node);
static unsigned admitted_types(const converter *cv, size_t node);

/* A Qwen3.5 parameter's value. Its template writes a string as its raw text and anything else
 * as JSON, and the parser reads a value as JSON unless the tool's schema says string; so a
 * parameter whose schema admits only strings is raw text (no '<', so no closing marker), one
 * that admits no string is compact JSON, one that constrains nothing is raw text (whatever it
 * reads as is valid), and one that admits a string and something else is refused: its raw text
 * could not be told apart. */
static int parameter_value_rule(converter *cv, size_t prop, const char *hint, gbnf_text *out) {
    if (constrains_nothing(cv, prop)) return use_primitive(cv, "raw-string", out);
    size_t target = follow_refs(cv, prop);
    if (target == JSON_NONE) return schema_rule(cv, prop, hint, out); /* its own refusal, if any */
    unsigned types = admitted_types(cv, target);
    if (types && !(types & T_STRING)) return schema_rule(cv, prop, hint, out);
    if (types != T_STRING)
        return fail(cv, "qwen3_5 writes a string parameter as raw text, so a parameter that may be a string or "
                        "another type cannot be read back; give it one type");
    cv->raw_strings = 1; /* the target's own rule: a $ref elsewhere to it stays JSON */
    int ok = schema_rule(cv, target, hint, out);
    cv->raw_strings = 0;
    return ok;
}

static int object_member_rule(converter *cv, const member_syntax *syn, size_t prop, const char *hint, char *kv_name) {
    const json_node *p = node_at(cv, prop);
    const char *key_text = json_key(&cv->doc, prop);
    char prop_hint[RULE_NAME_MAX];
    child_hint(prop_hint, sizeof prop_hint, hint, key_text, p->key_len);
    size_t old = path_push(cv, key_text, p->key_len);
    gbnf_text key = {0}, body = {0}, name = {0};
    int ok = 1;
    if (syn->key_ok && !syn->key_ok(key_text, p->key_len))
        ok = fail(cv, "property '%.*s' %s", (int)LLMM_MIN(p->key_len, 40), key_text, syn->key_refused);
    else if (syn->key_prefix) llmm__gbnf_text_fmt(&key, "%s%.*s%s", syn->key_prefix, (int)p->key_len, key_text, syn->key_suffix);
    else write_json_string(&key, key_text, p->key_len);
    if (ok) ok = text_ok(cv, &key);
    if (ok) {
        llmm__gbnf_text_literal(&body, key.data, key.len);
        llmm__gbnf_text_str(&body, syn->kv_sep);
        ok = syn == &xml_members ? parameter_value_rule(cv, prop, prop_hint, &body)
                                 : schema_rule(cv, prop, prop_hint, &body);
    }
    if (ok) {
        llmm__gbnf_text_str(&body, syn->after_value);
        char kv_hint[RULE_NAME_MAX + 4];
        snprintf(kv_hint, sizeof kv_hint, "%s-kv", prop_hint);
        ok = add_rule(cv, kv_hint, &body, &name);
    }
    if (ok) snprintf(kv_name, RULE_NAME_MAX, "%s", name.data);
    llmm__gbnf_text_free(&key), llmm__gbnf_text_free(&body), llmm__gbnf_text_free(&name);
    path_pop(cv, old);
    return ok;
}

static int mark_required(converter *cv, size_t props, size_t req, unsigned char *required) {
    if (req == JSON_NONE) return 1;
    if (node_at(cv, req)->kind != JSON_ARRAY) return fail(cv, "'required' must be an array of strings");
    for (size_t r = node_at(cv, req)->first; r != JSON_NONE; r = node_at(cv, r)->next) {
        if (node_at(cv, r)->kind != JSON_STRING) return fail(cv, "'required' must be an array of strings");
        const char *name = json_str(&cv->doc, r);
        size_t len = node_at(cv, r)->str_len, i = 0, p;
        for (p = props == JSON_NONE ? JSON_NONE : node_at(cv, props)->first; p != JSON_NONE; p = node_at(cv, p)->next, i++)
            if (node_at(cv, p)->key_len == len && memcmp(json_key(&cv->doc, p), name, len) == 0) break;
        if (p == JSON_NONE) return fail(cv, "required property '%.*s' is not in 'properties'", (int)LLMM_MIN(len, 40), name);
        required[i] = 1;
    }
    return 1;
}

static int emit_object(converter *cv, size_t node, const char *hint, gbnf_text *out) {
    /* where the root is the inside of a call, it is the only object written so: a "$ref" to
     * "#" is refused there (ref_expr), so node 0 is reached only as the root */
    const member_syntax *syn = root_is_call_inside(cv) && node == 0
                                   ? (cv->dialect == DIALECT_KWARGS ? &kwargs_members : &xml_members)
                                   : cv->dialect == DIALECT_GEMMA4 ? &gemma4_members : &json_members;
    size_t props = member(cv, node, "properties"), req = member(cv, node, "required");
    size_t extra = member(cv, node, "additionalProperties");
    if (props != JSON_NONE && node_at(cv, props)->kind != JSON_OBJECT) return fail(cv, "'properties' must be an object");
    size_t n = props == JSON_NONE ? 0 : node_at(cv, props)->n_children;
    /* members beyond the declared ones are written only in JSON (the schema allows them, a call
     * needs none) */
    int extras = extra != JSON_NONE && node_at(cv, extra)->kind != JSON_FALSE && syn == &json_members;
    if (!use_primitive(cv, "ws", NULL)) return 0;
    unsigned char *required = llmm__mem_calloc(NULL, n ? n : 1, 1);
    char (*kv)[RULE_NAME_MAX] = llmm__mem_calloc(NULL, n ? n : 1, RULE_NAME_MAX);
    gbnf_text extra_kv = {0};
    int ok = required && kv ? mark_required(cv, props, req, required) : out_of_memory(cv);
    cv->open_depth++;
    size_t old = path_push(cv, "properties", 10), i = 0;
    for (size_t p = n ? node_at(cv, props)->first : JSON_NONE; ok && p != JSON_NONE; p = node_at(cv, p)->next, i++)
        ok = object_member_rule(cv, syn, p, hint, kv[i]);
    path_pop(cv, old);
    if (ok && extras) ok = extra_member_rule(cv, extra, props, hint, &extra_kv);
    if (ok && (n || extras)) {
        llmm__gbnf_text_str(out, syn->open);
        ok = emit_object_members(cv, syn, kv, required, n, extras ? extra_kv.data : NULL, out);
        llmm__gbnf_text_str(out, syn->close);
    } else if (ok) {
        llmm__gbnf_text_str(out, syn->empty);
    }
    cv->open_depth--;
    llmm__gbnf_text_free(&extra_kv);
    llmm__mem_free(NULL, required);
    llmm__mem_free(NULL, kv);
    return ok && text_ok(cv, out);
}

typedef int (*type_emitter)(converter *cv, size_t node, const char *hint, gbnf_text *out);

static const struct type_entry {
    const char *name;
    unsigned bit;
    type_emitter emit;
} type_table[] = {
    {"object", T_OBJECT, emit_object},   {"array", T_ARRAY, emit_array},       {"string", T_STRING, emit_string},
    {"number", T_NUMBER, emit_number},   {"integer", T_INTEGER, emit_integer}, {"boolean", T_BOOLEAN, emit_boolean},
    {"null", T_NULL, emit_null},
};
#define N_TYPES (sizeof type_table / sizeof *type_table)

/* ------------------------------------------------------------------ schema objects */

static int read_type(converter *cv, size_t v, unsigned *types) {
    const json_node *n = node_at(cv, v);
    size_t first = n->kind == JSON_ARRAY ? n->first : v;
    if (n->kind == JSON_ARRAY && n->n_children == 0) return fail(cv, "'type' is an empty array");
    for (size_t t = first; t != JSON_NONE; t = n->kind == JSON_ARRAY ? node_at(cv, t)->next : JSON_NONE) {
        if (node_at(cv, t)->kind != JSON_STRING) return fail(cv, "'type' must be a string or an array of strings");
        const char *name = json_str(&cv->doc, t);
        size_t len = node_at(cv, t)->str_len, i;
        for (i = 0; i < N_TYPES; i++)
            if (strlen(type_table[i].name) == len && memcmp(type_table[i].name, name, len) == 0) break;
        if (i == N_TYPES) return fail(cv, "unknown type '%.*s'", (int)LLMM_MIN(len, 40), name);
        *types |= type_table[i].bit;
    }
    return 1;
}

/* Every keyword known, placed where it may stand, and the types the schema allows (0: any;
 * without "type", the type its keywords constrain). */
static int check_keywords(converter *cv, size_t node, unsigned *types) {
    unsigned declared = 0, constrained = 0;
    const char *general = NULL, *typed = NULL;
    size_t type = member(cv, node, "type");
    if (type != JSON_NONE && !read_type(cv, type, &declared)) return 0;
    for (size_t m = node_at(cv, node)->first; m != JSON_NONE; m = node_at(cv, m)->next) {
        const char *key = json_key(&cv->doc, m);
        size_t len = node_at(cv, m)->key_len;
        if (in_list(annotation_keywords, sizeof annotation_keywords / sizeof *annotation_keywords, key, len)) continue;
        if (in_list(general_keywords, sizeof general_keywords / sizeof *general_keywords, key, len)) {
            if (len == 4 && memcmp(key, "type", 4) == 0) continue;
            /* $ref, anyOf, oneOf, enum, const each stand alone (beside "type" for enum/const) */
            for (size_t i = 0; i < sizeof general_keywords / sizeof *general_keywords; i++)
                if (strlen(general_keywords[i]) == len && memcmp(general_keywords[i], key, len) == 0) {
                    if (general) return fail(cv, "'%s' alongside '%s' is not supported", general_keywords[i], general);
                    general = general_keywords[i];
                }
            continue;
        }
        const typed_keyword *tk = find_typed_keyword(key, len);
        if (!tk) return fail(cv, "unsupported keyword '%.*s'", (int)LLMM_MIN(len, 60), key);
        if (declared && !(declared & tk->types)) return fail(cv, "'%s' does not apply to the type given", tk->name);
        if (constrained && !(constrained & tk->types))
            return fail(cv, "'%s' and '%s' constrain different types; give 'type'", typed, tk->name);
        constrained |= tk->types;
        typed = tk->name;
    }
    if (general && typed) return fail(cv, "'%s' alongside '%s' is not supported", typed, general);
    if (general && type != JSON_NONE && strcmp(general, "enum") != 0 && strcmp(general, "const") != 0)
        return fail(cv, "'type' alongside '%s' is not supported", general);
    *types = declared ? declared : constrained == (T_INTEGER | T_NUMBER) ? T_NUMBER : constrained;
    return 1;
}

static int typed_expr(converter *cv, size_t node, const char *hint, unsigned types, gbnf_text *out) {
    if (types & T_NUMBER) types &= ~(unsigned)T_INTEGER; /* numbers include the integers */
    size_t n = 0;
    for (size_t i = 0; i < N_TYPES; i++) n += (types & type_table[i].bit) != 0;
    if (n > 1) llmm__gbnf_text_str(out, "(");
    size_t k = 0;
    for (size_t i = 0; i < N_TYPES; i++) {
        if (!(types & type_table[i].bit)) continue;
        if (k++) llmm__gbnf_text_str(out, " | ");
        if (!type_table[i].emit(cv, node, hint, out)) return 0;
    }
    if (n > 1) llmm__gbnf_text_str(out, ")");
    return text_ok(cv, out);
}

static int enum_expr(converter *cv, size_t node, unsigned types, gbnf_text *out) {
    size_t list = member(cv, node, "enum"), single = member(cv, node, "const");
    if (list != JSON_NONE && node_at(cv, list)->kind != JSON_ARRAY) return fail(cv, "'enum' must be an array");
    if (list != JSON_NONE && node_at(cv, list)->n_children == 0) return fail(cv, "'enum' is empty");
    size_t first = list != JSON_NONE ? node_at(cv, list)->first : single, k = 0;
    llmm__gbnf_text_str(out, "(");
    for (size_t v = first; v != JSON_NONE; v = list != JSON_NONE ? node_at(cv, v)->next : JSON_NONE) {
        if (types && !(value_type(cv, v) & types)) continue;
        gbnf_text lit = {0};
        if (!write_value(cv, v, &lit)) {
            llmm__gbnf_text_free(&lit);
            return fail(cv, "'%s' value %zu cannot be written in this call syntax (a closing marker or a key that "
                            "is no bare name)", list != JSON_NONE ? "enum" : "const", k);
        }
        if (!text_ok(cv, &lit)) return 0;
        if (k++) llmm__gbnf_text_str(out, " | ");
        llmm__gbnf_text_literal(out, lit.data, lit.len);
        llmm__gbnf_text_free(&lit);
    }
    llmm__gbnf_text_str(out, ")");
    if (k == 0) return fail(cv, "no value of '%s' has the type given", list != JSON_NONE ? "enum" : "const");
    return text_ok(cv, out);
}

/* ------------------------------------------------------------------ oneOf */

/* oneOf wants exactly one branch to match, which a grammar cannot count; so oneOf is accepted
 * only when no value can match two branches, as far as this shows: branches that admit
 * disjoint types, disjoint enum/const values, or objects that require a common member whose
 * const/enum values are disjoint (a tagged union). Anything else is refused, never turned
 * into anyOf silently. */

static size_t pointer_target(const converter *cv, const char *s, size_t len);

/* The schema a chain of $refs ends at (bounded; JSON_NONE when it leaves the document). */
static size_t follow_refs(const converter *cv, size_t node) {
    for (int hops = 0; hops < SCHEMA_MAX_DEPTH && node != JSON_NONE && node_at(cv, node)->kind == JSON_OBJECT; hops++) {
        size_t ref = member(cv, node, "$ref");
        if (ref == JSON_NONE) return node;
        if (node_at(cv, ref)->kind != JSON_STRING) return JSON_NONE;
        node = pointer_target(cv, json_str(&cv->doc, ref), node_at(cv, ref)->str_len);
    }
    return node != JSON_NONE && node_at(cv, node)->kind == JSON_OBJECT ? node : JSON_NONE;
}

/* Numbers and integers overlap (1 is both), so they count as one kind here. */
static unsigned widen_numbers(unsigned types) {
    return types & (T_NUMBER | T_INTEGER) ? types | T_NUMBER | T_INTEGER : types;
}

/* The enum array or const value of a schema, as a list to walk: first node and whether to
 * follow .next. */
static size_t listed_values(const converter *cv, size_t node, int *is_list) {
    size_t list = member(cv, node, "enum"), single = member(cv, node, "const");
    *is_list = list != JSON_NONE && node_at(cv, list)->kind == JSON_ARRAY;
    if (*is_list) return node_at(cv, list)->first;
    return single;
}

/* The types a schema admits; 0 when it does not say or cannot be read here. */
static unsigned admitted_types(const converter *cv, size_t node) {
    int is_list;
    unsigned types = 0;
    size_t v = listed_values(cv, node, &is_list);
    if (v != JSON_NONE) {
        for (; v != JSON_NONE; v = is_list ? node_at(cv, v)->next : JSON_NONE) types |= value_type(cv, v);
        return widen_numbers(types);
    }
    if (member(cv, node, "anyOf") != JSON_NONE || member(cv, node, "oneOf") != JSON_NONE) return 0;
    size_t type = member(cv, node, "type");
    if (type != JSON_NONE) {
        const json_node *t = node_at(cv, type);
        for (size_t e = t->kind == JSON_ARRAY ? t->first : type; e != JSON_NONE; e = t->kind == JSON_ARRAY ? node_at(cv, e)->next : JSON_NONE)
            for (size_t i = 0; i < N_TYPES; i++)
                if (node_at(cv, e)->kind == JSON_STRING && strlen(type_table[i].name) == node_at(cv, e)->str_len &&
                    memcmp(type_table[i].name, json_str(&cv->doc, e), node_at(cv, e)->str_len) == 0)
                    types |= type_table[i].bit;
        return widen_numbers(types);
    }
    for (size_t m = node_at(cv, node)->first; m != JSON_NONE; m = node_at(cv, m)->next) {
        const typed_keyword *tk = find_typed_keyword(json_key(&cv->doc, m), node_at(cv, m)->key_len);
        if (tk) types |= tk->types;
    }
    types = widen_numbers(types);
    return types == T_OBJECT || types == T_ARRAY || types == T_STRING || types == (T_NUMBER | T_INTEGER) ? types : 0;
}

/* Whether two values may be equal: scalars compared (numbers by value), arrays and objects
 * assumed equal. */
static int may_equal(const converter *cv, size_t a, size_t b) {
    const json_node *x = node_at(cv, a), *y = node_at(cv, b);
    if (x->kind != y->kind) return 0;
    if (x->kind == JSON_STRING) return x->str_len == y->str_len && memcmp(json_str(&cv->doc, a), json_str(&cv->doc, b), x->str_len) == 0;
    if (x->kind == JSON_NUMBER) return strtod(cv->doc.src + x->src, NULL) == strtod(cv->doc.src + y->src, NULL);
    return 1;
}

static int values_disjoint(const converter *cv, size_t a, size_t b) {
    int a_list, b_list;
    size_t first_a = listed_values(cv, a, &a_list), first_b = listed_values(cv, b, &b_list);
    if (first_a == JSON_NONE || first_b == JSON_NONE) return 0;
    for (size_t x = first_a; x != JSON_NONE; x = a_list ? node_at(cv, x)->next : JSON_NONE)
        for (size_t y = first_b; y != JSON_NONE; y = b_list ? node_at(cv, y)->next : JSON_NONE)
            if (may_equal(cv, x, y)) return 0;
    return 1;
}

static int requires_member(const converter *cv, size_t node, const char *name, size_t len) {
    size_t req = member(cv, node, "required");
    if (req == JSON_NONE || node_at(cv, req)->kind != JSON_ARRAY) return 0;
    for (size_t r = node_at(cv, req)->first; r != JSON_NONE; r = node_at(cv, r)->next)
        if (node_at(cv, r)->kind == JSON_STRING && node_at(cv, r)->str_len == len && memcmp(json_str(&cv->doc, r), name, len) == 0)
            return 1;
    return 0;
}

static size_t property_schema(const converter *cv, size_t node, const char *name, size_t len) {
    size_t props = member(cv, node, "properties");
    if (props == JSON_NONE || node_at(cv, props)->kind != JSON_OBJECT) return JSON_NONE;
    for (size_t p = node_at(cv, props)->first; p != JSON_NONE; p = node_at(cv, p)->next)
        if (node_at(cv, p)->key_len == len && memcmp(json_key(&cv->doc, p), name, len) == 0) return follow_refs(cv, p);
    return JSON_NONE;
}

static int branches_disjoint(const converter *cv, size_t a, size_t b) {
    a = follow_refs(cv, a), b = follow_refs(cv, b);
    if (a == JSON_NONE || b == JSON_NONE) return 0;
    unsigned ta = admitted_types(cv, a), tb = admitted_types(cv, b);
    if (ta && tb && !(ta & tb)) return 1;
    if (values_disjoint(cv, a, b)) return 1;
    if (ta != T_OBJECT || tb != T_OBJECT) return 0;
    size_t req = member(cv, a, "required");
    if (req == JSON_NONE || node_at(cv, req)->kind != JSON_ARRAY) return 0;
    for (size_t r = node_at(cv, req)->first; r != JSON_NONE; r = node_at(cv, r)->next) {
        if (node_at(cv, r)->kind != JSON_STRING) continue;
        const char *name = json_str(&cv->doc, r);
        size_t len = node_at(cv, r)->str_len, pa, pb;
        if (!requires_member(cv, b, name, len)) continue;
        if ((pa = property_schema(cv, a, name, len)) != JSON_NONE && (pb = property_schema(cv, b, name, len)) != JSON_NONE &&
            values_disjoint(cv, pa, pb))
            return 1;
    }
    return 0;
}

static int check_one_of(converter *cv, size_t list) {
    size_t i = 0;
    for (size_t a = node_at(cv, list)->first; a != JSON_NONE; a = node_at(cv, a)->next, i++) {
        size_t j = i + 1;
        for (size_t b = node_at(cv, a)->next; b != JSON_NONE; b = node_at(cv, b)->next, j++)
            if (!branches_disjoint(cv, a, b))
                return fail(cv, "'oneOf' branches %zu and %zu may both match: tell them apart by type or by a required "
                                "member's const or enum, or use 'anyOf'", i, j);
    }
    return 1;
}

static int alternatives_expr(converter *cv, size_t list, const char *keyword, const char *hint, gbnf_text *out) {
    if (node_at(cv, list)->kind != JSON_ARRAY || node_at(cv, list)->n_children == 0)
        return fail(cv, "'%s' must be a non-empty array of schemas", keyword);
    if (strcmp(keyword, "oneOf") == 0 && !check_one_of(cv, list)) return 0;
    size_t old = path_push(cv, keyword, strlen(keyword)), i = 0;
    llmm__gbnf_text_str(out, "(");
    for (size_t s = node_at(cv, list)->first; s != JSON_NONE; s = node_at(cv, s)->next, i++) {
        char alt_hint[RULE_NAME_MAX];
        snprintf(alt_hint, sizeof alt_hint, "%s-%zu", hint, i);
        size_t at = path_push_index(cv, i);
        if (i) llmm__gbnf_text_str(out, " | ");
        int ok = schema_rule(cv, s, alt_hint, out);
        path_pop(cv, at);
        if (!ok) return 0;
    }
    llmm__gbnf_text_str(out, ")");
    path_pop(cv, old);
    return text_ok(cv, out);
}

static int target_rule(converter *cv, size_t target, const char *pointer, size_t pointer_len, const char *hint,
                       gbnf_text *out);

/* The node "#" or "#/a/b" (a JSON pointer, ~0 and ~1 unescaped) names in this document, or
 * JSON_NONE. */
static size_t pointer_target(const converter *cv, const char *s, size_t len) {
    const char *end = s + len, *seg = s + 1;
    if (len == 0 || *s != '#' || (len > 1 && s[1] != '/')) return JSON_NONE;
    size_t node = 0;
    while (seg < end && node != JSON_NONE) {
        seg++; /* the '/' */
        const char *seg_end = memchr(seg, '/', (size_t)(end - seg));
        if (!seg_end) seg_end = end;
        char key[256];
        size_t n = 0;
        for (const char *c = seg; c < seg_end && n < sizeof key; c++) {
            if (*c == '~' && c + 1 < seg_end && (c[1] == '0' || c[1] == '1')) key[n++] = c[1] == '0' ? '~' : '/', c++;
            else key[n++] = *c;
        }
        size_t next = JSON_NONE;
        const json_node *cur = node_at(cv, node);
        if (cur->kind == JSON_OBJECT) {
            for (size_t m = cur->first; m != JSON_NONE && next == JSON_NONE; m = node_at(cv, m)->next)
                if (node_at(cv, m)->key_len == n && memcmp(json_key(&cv->doc, m), key, n) == 0) next = m;
        } else if (cur->kind == JSON_ARRAY) {
            size_t index = 0, k = 0;
            int digits = n > 0 && n < 10 && (n == 1 || key[0] != '0');
            for (size_t i = 0; i < n; i++) digits &= key[i] >= '0' && key[i] <= '9', index = index * 10 + (size_t)(key[i] - '0');
            for (size_t m = cur->first; digits && m != JSON_NONE; m = node_at(cv, m)->next, k++)
                if (k == index) next = m;
        }
        node = next;
        seg = seg_end;
    }
    return node;
}

static int ref_expr(converter *cv, size_t ref, gbnf_text *out) {
    const json_node *r = node_at(cv, ref);
    if (r->kind != JSON_STRING) return fail(cv, "'$ref' must be a string");
    const char *s = json_str(&cv->doc, ref), *last = s + r->str_len;
    int shown = (int)LLMM_MIN(r->str_len, 80);
    if (r->str_len == 0 || *s != '#' || (r->str_len > 1 && s[1] != '/'))
        return fail(cv, "'$ref' '%.*s': only references within the document (#/...) are supported", shown, s);
    size_t node = pointer_target(cv, s, r->str_len);
    if (node == JSON_NONE) return fail(cv, "'$ref' '%.*s' points to nothing in the document", shown, s);
    if (node == 0 && root_is_call_inside(cv)) return fail(cv, "'$ref' '#': a call's arguments cannot contain themselves");
    while (last > s && last[-1] != '/') last--; /* the rule is named after the last segment */
    char hint[RULE_NAME_MAX];
    snprintf(hint, sizeof hint, "%.*s", (int)LLMM_MIN((size_t)(s + r->str_len - last), 40), last);
    return target_rule(cv, node, s, r->str_len, node == 0 ? "root" : hint, out);
}

/* The rule of a $ref target (or of the root schema), built on first use; messages from its
 * body name the target's pointer. */
static int target_rule(converter *cv, size_t target, const char *pointer, size_t pointer_len, const char *hint,
                       gbnf_text *out) {
    size_t r = cv->ref_rule[target];
    if (r != JSON_NONE) {
        if (!cv->rules[r].body && cv->ref_open_depth[target] == cv->open_depth)
            return fail(cv, "'$ref' cycle through '%s' reaches itself before any object or array opens", cv->rules[r].name);
        if (out) llmm__gbnf_text_str(out, cv->rules[r].name);
        return out ? text_ok(cv, out) : 1;
    }
    r = new_rule(cv, hint);
    if (r == JSON_NONE) return 0;
    cv->ref_rule[target] = r;
    cv->ref_open_depth[target] = cv->open_depth;
    char saved_path[sizeof cv->path];
    size_t saved_len = cv->path_len;
    memcpy(saved_path, cv->path, sizeof saved_path);
    cv->path_len = LLMM_MIN(pointer_len, sizeof cv->path - 1);
    memcpy(cv->path, pointer, cv->path_len);
    cv->path[cv->path_len] = '\0';
    char name[RULE_NAME_MAX]; /* cv->rules moves as rules are added */
    memcpy(name, cv->rules[r].name, sizeof name);
    gbnf_text body = {0};
    int ok = schema_expr(cv, target, name, &body) && text_ok(cv, &body);
    if (!ok) {
        llmm__gbnf_text_free(&body);
        return 0;
    }
    memcpy(cv->path, saved_path, sizeof saved_path);
    cv->path_len = saved_len;
    cv->rules[r].body = body.data;
    if (out) llmm__gbnf_text_str(out, cv->rules[r].name);
    return out ? text_ok(cv, out) : 1;
}

/* The root of a call's arguments outside JSON: an object schema (or one that constrains
 * nothing: no arguments). */
static int call_root_expr(converter *cv, size_t node, unsigned types, const char *hint, gbnf_text *out) {
    static const char *const alone[] = {"$ref", "anyOf", "oneOf", "enum", "const"};
    for (size_t i = 0; i < sizeof alone / sizeof *alone; i++)
        if (member(cv, node, alone[i]) != JSON_NONE)
            return fail(cv, "a call's arguments need an object schema, not '%s'", alone[i]);
    if (types & ~(unsigned)T_OBJECT) return fail(cv, "a call's arguments need an object schema ('type' \"object\")");
    if (types != 0) return emit_object(cv, node, hint, out);
    llmm__gbnf_text_str(out, cv->dialect == DIALECT_KWARGS       ? kwargs_members.empty
                             : cv->dialect == DIALECT_XML_PARAMS ? xml_members.empty
                                                                 : gemma4_members.empty);
    return text_ok(cv, out);
}

static int schema_object_expr(converter *cv, size_t node, const char *hint, gbnf_text *out) {
    unsigned types = 0;
    if (!check_keywords(cv, node, &types)) return 0;
    if (cv->dialect != DIALECT_JSON && node == 0) return call_root_expr(cv, node, types, hint, out);
    size_t ref = member(cv, node, "$ref"), any = member(cv, node, "anyOf"), one = member(cv, node, "oneOf");
    if (ref != JSON_NONE) return ref_expr(cv, ref, out);
    if (any != JSON_NONE) return alternatives_expr(cv, any, "anyOf", hint, out);
    if (one != JSON_NONE) return alternatives_expr(cv, one, "oneOf", hint, out);
    if (member(cv, node, "enum") != JSON_NONE || member(cv, node, "const") != JSON_NONE)
        return enum_expr(cv, node, types, out);
    if (types == 0) return use_primitive(cv, "value", out);
    return typed_expr(cv, node, hint, types, out);
}

static int schema_expr(converter *cv, size_t node, const char *hint, gbnf_text *out) {
    const json_node *n = node_at(cv, node);
    if (n->kind == JSON_TRUE) return use_primitive(cv, "value", out);
    if (n->kind == JSON_FALSE) return fail(cv, "schema false admits no value");
    if (n->kind != JSON_OBJECT) return fail(cv, "a schema must be an object or a boolean");
    if (cv->depth >= SCHEMA_MAX_DEPTH) return fail(cv, "schemas nested deeper than %d", SCHEMA_MAX_DEPTH);
    cv->depth++;
    int ok = schema_object_expr(cv, node, hint, out);
    cv->depth--;
    return ok;
}

/* ------------------------------------------------------------------ entry point */

static char *join_rules(converter *cv) {
    gbnf_text all = {0};
    for (size_t i = 0; i < cv->n_rules; i++) llmm__gbnf_text_fmt(&all, "%s ::= %s\n", cv->rules[i].name, cv->rules[i].body);
    if (!text_ok(cv, &all)) {
        llmm__gbnf_text_free(&all);
        return NULL;
    }
    return all.data;
}

static void converter_free(converter *cv) {
    for (size_t i = 0; i < cv->n_rules; i++) llmm__mem_free(NULL, cv->rules[i].body);
    llmm__mem_free(NULL, cv->rules);
    llmm__mem_free(NULL, cv->ref_rule);
    llmm__mem_free(NULL, cv->ref_open_depth);
    llmm__json_doc_free(&cv->doc);
}

llmm_status llmm__json_schema_to_gbnf(const char *schema, size_t len, char **gbnf_out, char *err, size_t err_size) {
    return llmm__json_schema_to_gbnf_ws(schema, len, 0, gbnf_out, err, err_size);
}

static llmm_status convert(const char *schema, size_t len, int compact, value_dialect dialect, char **gbnf_out,
                           char *err, size_t err_size);

llmm_status llmm__json_schema_to_gbnf_ws(const char *schema, size_t len, int compact, char **gbnf_out, char *err,
                                         size_t err_size) {
    return convert(schema, len, compact, DIALECT_JSON, gbnf_out, err, err_size);
}

llmm_status llmm__json_schema_to_call_gbnf(const char *schema, size_t len, schema_call_syntax syntax, char **gbnf_out,
                                           char *err, size_t err_size) {
    static const value_dialect dialects[] = {
        [SCHEMA_CALL_KWARGS] = DIALECT_KWARGS,
        [SCHEMA_CALL_XML_PARAMS] = DIALECT_XML_PARAMS,
        [SCHEMA_CALL_GEMMA4] = DIALECT_GEMMA4,
    };
    if ((unsigned)syntax >= sizeof dialects / sizeof *dialects) {
        if (err && err_size) snprintf(err, err_size, "unknown call syntax");
        return LLMM_ERR_INVALID_ARG;
    }
    return convert(schema, len, 1, dialects[syntax], gbnf_out, err, err_size);
}

static llmm_status convert(const char *schema, size_t len, int compact, value_dialect dialect, char **gbnf_out,
                           char *err, size_t err_size) {
    if (err && err_size) err[0] = '\0';
    if (!gbnf_out) return LLMM_ERR_INVALID_ARG;
    *gbnf_out = NULL;
    if (!schema) {
        if (err && err_size) snprintf(err, err_size, "no schema");
        return LLMM_ERR_INVALID_ARG;
    }
    converter cv = {.err = err, .err_size = err_size, .path = "#", .path_len = 1, .compact = compact != 0,
                    .dialect = dialect};
    cv.status = llmm__json_parse(&cv.doc, schema, len, err, err_size);
    if (cv.status != LLMM_OK) return cv.status;
    cv.ref_rule = llmm__mem_alloc(NULL, cv.doc.n_nodes * sizeof *cv.ref_rule);
    cv.ref_open_depth = llmm__mem_calloc(NULL, cv.doc.n_nodes, sizeof *cv.ref_open_depth);
    if (!cv.ref_rule || !cv.ref_open_depth) {
        out_of_memory(&cv);
    } else {
        for (size_t i = 0; i < cv.doc.n_nodes; i++) cv.ref_rule[i] = JSON_NONE;
        if (target_rule(&cv, 0, "#", 1, "root", NULL)) *gbnf_out = join_rules(&cv);
    }
    converter_free(&cv);
    return *gbnf_out ? LLMM_OK : cv.status != LLMM_OK ? cv.status : LLMM_ERR_INTERNAL;
}
