/* A strict JSON reader for untrusted text. Recursion is bounded by JSON_MAX_DEPTH. */
#include "json_value.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "common.h"
#include "unicode.h"

typedef struct reader {
    json_doc *doc;
    size_t pos;
    char *err;
    size_t err_size;
    llmm_status status;
    char found[16];
} reader;

static llmm_status fail_at(reader *r, size_t at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static llmm_status fail_at(reader *r, size_t at, const char *fmt, ...) {
    size_t line = 1, col = 1;
    for (size_t i = 0; i < at && i < r->doc->src_len; i++) {
        if (r->doc->src[i] == '\n') line++, col = 1;
        else if (((unsigned char)r->doc->src[i] & 0xC0) != 0x80) col++; /* columns count characters */
    }
    char what[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    if (r->err && r->err_size) snprintf(r->err, r->err_size, "JSON error at line %zu, column %zu: %s", line, col, what);
    return r->status = LLMM_ERR_INVALID_ARG;
}

static llmm_status out_of_memory(reader *r) {
    if (r->err && r->err_size) snprintf(r->err, r->err_size, "out of memory reading the JSON");
    return r->status = LLMM_ERR_NO_MEMORY;
}

static int at_end(const reader *r) { return r->pos >= r->doc->src_len; }
static unsigned char peek(const reader *r) { return at_end(r) ? 0 : (unsigned char)r->doc->src[r->pos]; }

static void skip_space(reader *r) {
    while (!at_end(r)) {
        unsigned char c = peek(r);
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
        r->pos++;
    }
}

/* What stands at the reading position, for messages (the text lives in the reader). */
static const char *describe(reader *r) {
    unsigned char c = peek(r);
    if (at_end(r)) return "end of input";
    if (c > 0x20 && c < 0x7F) snprintf(r->found, sizeof r->found, "'%c'", c);
    else snprintf(r->found, sizeof r->found, "byte 0x%02X", c);
    return r->found;
}

static llmm_status expect(reader *r, char c) {
    if (peek(r) == (unsigned char)c && !at_end(r)) {
        r->pos++;
        return LLMM_OK;
    }
    return fail_at(r, r->pos, "expected '%c', found %s", c, describe(r));
}

static size_t new_node(reader *r, json_kind kind) {
    json_doc *d = r->doc;
    if (llmm__mem_reserve(NULL, (void **)&d->nodes, &d->cap_nodes, d->n_nodes + 1, sizeof *d->nodes) != LLMM_OK) {
        out_of_memory(r);
        return JSON_NONE;
    }
    d->nodes[d->n_nodes] = (json_node){.kind = kind, .src = r->pos, .first = JSON_NONE, .next = JSON_NONE};
    return d->n_nodes++;
}

static int put_string_bytes(reader *r, const char *bytes, size_t n) {
    json_doc *d = r->doc;
    if (llmm__mem_reserve(NULL, (void **)&d->strings, &d->cap_strings, d->n_strings + n, 1) != LLMM_OK) {
        out_of_memory(r);
        return 0;
    }
    memcpy(d->strings + d->n_strings, bytes, n);
    d->n_strings += n;
    return 1;
}

/* Strict UTF-8: shortest form only, no surrogates, nothing above U+10FFFF. Returns the
 * sequence length, 0 when invalid. */
static size_t strict_utf8_length(const unsigned char *s, size_t n) {
    unsigned c = s[0];
    size_t len = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
    if (len == 0 || len > n) return 0;
    if (len == 1) return 1;
    uint32_t cp = c & (0x7Fu >> len);
    for (size_t k = 1; k < len; k++) {
        if ((s[k] & 0xC0) != 0x80) return 0;
        cp = (cp << 6) | (s[k] & 0x3Fu);
    }
    static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min_cp[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    return len;
}

static int read_hex4(reader *r, uint32_t *out) {
    if (r->doc->src_len - r->pos < 4) return 0;
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        unsigned char c = (unsigned char)r->doc->src[r->pos + (size_t)i];
        int digit = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (digit < 0) return 0;
        v = v * 16 + (uint32_t)digit;
    }
    r->pos += 4;
    *out = v;
    return 1;
}

/* \uXXXX, with a surrogate pair joined; r->pos is just past the 'u'. */
static llmm_status read_unicode_escape(reader *r, uint32_t *cp) {
    size_t at = r->pos - 2;
    uint32_t hi;
    if (!read_hex4(r, &hi)) return fail_at(r, at, "\\u needs four hex digits");
    if (hi >= 0xDC00 && hi <= 0xDFFF) return fail_at(r, at, "lone low surrogate \\u%04X", (unsigned)hi);
    if (hi < 0xD800 || hi > 0xDBFF) {
        *cp = hi;
        return LLMM_OK;
    }
    uint32_t lo;
    if (r->doc->src_len - r->pos < 2 || r->doc->src[r->pos] != '\\' || r->doc->src[r->pos + 1] != 'u')
        return fail_at(r, at, "high surrogate \\u%04X without a low one", (unsigned)hi);
    r->pos += 2;
    if (!read_hex4(r, &lo) || lo < 0xDC00 || lo > 0xDFFF)
        return fail_at(r, at, "high surrogate \\u%04X without a low one", (unsigned)hi);
    *cp = 0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00);
    return LLMM_OK;
}

/* A string's decoded bytes go to doc->strings; *at and *len say where. */
static llmm_status read_string(reader *r, size_t *at, size_t *len) {
    if (expect(r, '"') != LLMM_OK) return r->status;
    *at = r->doc->n_strings;
    const unsigned char *s = (const unsigned char *)r->doc->src;
    for (;;) {
        if (at_end(r)) return fail_at(r, r->pos, "unterminated string");
        unsigned char c = s[r->pos];
        if (c == '"') {
            r->pos++;
            break;
        }
        if (c < 0x20) return fail_at(r, r->pos, "control character 0x%02X in a string", c);
        if (c != '\\') {
            size_t n = strict_utf8_length(s + r->pos, r->doc->src_len - r->pos);
            if (n == 0) return fail_at(r, r->pos, "invalid UTF-8");
            if (!put_string_bytes(r, (const char *)s + r->pos, n)) return r->status;
            r->pos += n;
            continue;
        }
        if (r->doc->src_len - r->pos < 2) return fail_at(r, r->pos, "unterminated string");
        unsigned char e = s[r->pos + 1];
        static const char simple_from[] = "\"\\/bfnrt", simple_to[] = "\"\\/\b\f\n\r\t";
        const char *hit = e ? strchr(simple_from, e) : NULL;
        r->pos += 2;
        if (hit) {
            if (!put_string_bytes(r, simple_to + (hit - simple_from), 1)) return r->status;
            continue;
        }
        if (e != 'u') return fail_at(r, r->pos - 2, "unknown escape '\\%c'", e >= 0x20 && e < 0x7F ? e : '?');
        uint32_t cp = 0;
        if (read_unicode_escape(r, &cp) != LLMM_OK) return r->status;
        char utf8[4];
        if (!put_string_bytes(r, utf8, llmm__utf8_encode(cp, utf8))) return r->status;
    }
    *len = r->doc->n_strings - *at;
    return LLMM_OK;
}

static size_t digits(reader *r) {
    size_t n = 0;
    while (peek(r) >= '0' && peek(r) <= '9' && !at_end(r)) r->pos++, n++;
    return n;
}

static llmm_status read_number(reader *r) {
    size_t start = r->pos;
    if (peek(r) == '-') r->pos++;
    if (peek(r) == '0') {
        r->pos++;
        if (peek(r) >= '0' && peek(r) <= '9') return fail_at(r, start, "leading zero in a number");
    } else if (digits(r) == 0) {
        return fail_at(r, start, "expected a value, found %s", describe(r));
    }
    if (peek(r) == '.') {
        r->pos++;
        if (digits(r) == 0) return fail_at(r, r->pos, "expected a digit after '.'");
    }
    if (peek(r) == 'e' || peek(r) == 'E') {
        r->pos++;
        if (peek(r) == '+' || peek(r) == '-') r->pos++;
        if (digits(r) == 0) return fail_at(r, r->pos, "expected a digit in the exponent");
    }
    return LLMM_OK;
}

static llmm_status read_value(reader *r, size_t *out, int depth);

static void link_child(json_doc *d, size_t parent, size_t *last, size_t child) {
    if (*last == JSON_NONE) d->nodes[parent].first = child;
    else d->nodes[*last].next = child;
    *last = child;
    d->nodes[parent].n_children++;
}

static int key_taken(const json_doc *d, size_t obj, size_t key, size_t key_len) {
    for (size_t m = d->nodes[obj].first; m != JSON_NONE; m = d->nodes[m].next)
        if (d->nodes[m].key_len == key_len && memcmp(d->strings + d->nodes[m].key, d->strings + key, key_len) == 0)
            return 1;
    return 0;
}

static llmm_status read_members(reader *r, size_t obj, int depth) {
    size_t last = JSON_NONE;
    skip_space(r);
    if (peek(r) == '}' && !at_end(r)) return r->pos++, LLMM_OK;
    for (;;) {
        skip_space(r);
        size_t key_pos = r->pos, key, key_len, value;
        if (peek(r) != '"' || at_end(r)) return fail_at(r, r->pos, "expected a string key, found %s", describe(r));
        if (read_string(r, &key, &key_len) != LLMM_OK) return r->status;
        if (key_taken(r->doc, obj, key, key_len)) return fail_at(r, key_pos, "duplicate key");
        skip_space(r);
        if (expect(r, ':') != LLMM_OK || read_value(r, &value, depth + 1) != LLMM_OK) return r->status;
        r->doc->nodes[value].key = key;
        r->doc->nodes[value].key_len = key_len;
        link_child(r->doc, obj, &last, value);
        skip_space(r);
        if (peek(r) == '}' && !at_end(r)) return r->pos++, LLMM_OK;
        if (expect(r, ',') != LLMM_OK) return fail_at(r, r->pos, "expected ',' or '}', found %s", describe(r));
    }
}

static llmm_status read_items(reader *r, size_t arr, int depth) {
    size_t last = JSON_NONE;
    skip_space(r);
    if (peek(r) == ']' && !at_end(r)) return r->pos++, LLMM_OK;
    for (;;) {
        size_t value;
        if (read_value(r, &value, depth + 1) != LLMM_OK) return r->status;
        link_child(r->doc, arr, &last, value);
        skip_space(r);
        if (peek(r) == ']' && !at_end(r)) return r->pos++, LLMM_OK;
        if (expect(r, ',') != LLMM_OK) return fail_at(r, r->pos, "expected ',' or ']', found %s", describe(r));
    }
}

static llmm_status read_word(reader *r, const char *word) {
    size_t n = strlen(word);
    if (r->doc->src_len - r->pos < n || memcmp(r->doc->src + r->pos, word, n) != 0)
        return fail_at(r, r->pos, "expected a value, found %s", describe(r));
    r->pos += n;
    return LLMM_OK;
}

static llmm_status read_value(reader *r, size_t *out, int depth) {
    skip_space(r);
    if (depth > JSON_MAX_DEPTH) return fail_at(r, r->pos, "nesting deeper than %d", JSON_MAX_DEPTH);
    unsigned char c = peek(r);
    json_kind kind = at_end(r) ? JSON_NULL
                   : c == '{' ? JSON_OBJECT
                   : c == '[' ? JSON_ARRAY
                   : c == '"' ? JSON_STRING
                   : c == 't' ? JSON_TRUE
                   : c == 'f' ? JSON_FALSE
                   : c == 'n' ? JSON_NULL
                              : JSON_NUMBER;
    if (at_end(r)) return fail_at(r, r->pos, "expected a value, found end of input");
    size_t node = new_node(r, kind);
    if (node == JSON_NONE) return r->status;
    llmm_status st;
    switch (kind) {
    case JSON_OBJECT: r->pos++, st = read_members(r, node, depth); break;
    case JSON_ARRAY: r->pos++, st = read_items(r, node, depth); break;
    case JSON_STRING: {
        size_t at, len;
        st = read_string(r, &at, &len);
        r->doc->nodes[node].str = at;
        r->doc->nodes[node].str_len = len;
        break;
    }
    case JSON_TRUE: st = read_word(r, "true"); break;
    case JSON_FALSE: st = read_word(r, "false"); break;
    case JSON_NULL: st = read_word(r, "null"); break;
    default: st = read_number(r); break;
    }
    if (st != LLMM_OK) return st;
    r->doc->nodes[node].src_len = r->pos - r->doc->nodes[node].src;
    *out = node;
    return LLMM_OK;
}

llmm_status llmm__json_parse(json_doc *doc, const char *src, size_t len, char *err, size_t err_size) {
    *doc = (json_doc){.src = src, .src_len = len};
    reader r = {.doc = doc, .err = err, .err_size = err_size};
    size_t root;
    /* strings is never NULL, so that an empty string's bytes are a valid pointer */
    if (llmm__mem_reserve(NULL, (void **)&doc->strings, &doc->cap_strings, 1, 1) != LLMM_OK) out_of_memory(&r);
    else if (read_value(&r, &root, 1) == LLMM_OK) {
        skip_space(&r);
        if (!at_end(&r)) fail_at(&r, r.pos, "unexpected text after the value");
    }
    if (r.status != LLMM_OK) llmm__json_doc_free(doc);
    return r.status;
}

void llmm__json_doc_free(json_doc *doc) {
    llmm__mem_free(NULL, doc->nodes);
    llmm__mem_free(NULL, doc->strings);
    *doc = (json_doc){0};
}

size_t llmm__json_member(const json_doc *doc, size_t obj, const char *key) {
    size_t n = strlen(key);
    for (size_t m = doc->nodes[obj].first; m != JSON_NONE; m = doc->nodes[m].next)
        if (doc->nodes[m].key_len == n && memcmp(doc->strings + doc->nodes[m].key, key, n) == 0) return m;
    return JSON_NONE;
}
