/* JSON Schema "pattern" (an ECMA-262 regular expression) as a GBNF expression over the
 * JSON-encoded inside of a string. The subset: literals, escapes of punctuation, \d \w \s and
 * their negations, \n \t \r \f \v \xHH \uHHHH, '.', classes with ranges and negation, groups
 * (capturing, (?:...) and named), '|', quantifiers * + ? {m} {m,} {m,n} (lazy or not: the
 * language is the same), ^ at the start and $ at the end of a top-level branch. Refused:
 * lookaround, backreferences, word boundaries, \p{...}, anchors elsewhere.
 *
 * A decoded character maps to its shortest JSON form: '"' to \", '\' to \\, controls to
 * their escapes; the rest stand for themselves. A negated class or '.' yields no control
 * characters (a restriction: such strings still match the pattern).
 * Recursion (groups) is bounded by PATTERN_MAX_DEPTH. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "json_schema_parts.h"
#include "base/unicode.h"

#define PATTERN_MAX_DEPTH 32
#define PATTERN_MAX_REPEAT 1000
#define PATTERN_MAX_RANGES 64

typedef struct cp_range {
    uint32_t lo, hi;
} cp_range;

typedef struct pattern_reader {
    const char *s;
    size_t n, pos;
    gbnf_text *out;
    char *err;
    size_t err_size;
    int failed;
} pattern_reader;

static int refuse(pattern_reader *p, size_t at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int refuse(pattern_reader *p, size_t at, const char *fmt, ...) {
    if (p->failed) return 0;
    p->failed = 1;
    char what[160];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    if (p->err && p->err_size) snprintf(p->err, p->err_size, "pattern: %s (offset %zu)", what, at);
    return 0;
}

static int more(const pattern_reader *p) { return p->pos < p->n; }
static char cur(const pattern_reader *p) { return more(p) ? p->s[p->pos] : '\0'; }

static uint32_t next_cp(pattern_reader *p) {
    uint32_t cp;
    p->pos += llmm__utf8_decode((const uint8_t *)p->s + p->pos, p->n - p->pos, &cp);
    return cp;
}

/* ------------------------------------------------------------------ characters in JSON form */

static const char *control_escape(uint32_t cp) {
    switch (cp) {
    case '\b': return "\\b";
    case '\f': return "\\f";
    case '\n': return "\\n";
    case '\r': return "\\r";
    case '\t': return "\\t";
    default: return NULL;
    }
}

/* The JSON text of one decoded character, as a GBNF literal. */
static void json_char_literal(gbnf_text *out, uint32_t cp) {
    char buf[8];
    size_t n;
    if (cp == '"' || cp == '\\') buf[0] = '\\', buf[1] = (char)cp, n = 2;
    else if (cp < 0x20) n = control_escape(cp) ? (size_t)snprintf(buf, sizeof buf, "%s", control_escape(cp))
                                               : (size_t)snprintf(buf, sizeof buf, "\\u%04x", (unsigned)cp);
    else n = llmm__utf8_encode(cp, buf);
    llmm__gbnf_text_literal(out, buf, n);
}

/* Characters that JSON writes as themselves. */
static int plain(uint32_t cp) { return cp >= 0x20 && cp != '"' && cp != '\\'; }

/* A class: its plain part as [..] and '"', '\' and controls as escaped literals, so that the
 * alternatives together are one GBNF term. */
static void emit_class(gbnf_text *out, const cp_range *r, size_t n_ranges) {
    gbnf_text body = {0};
    size_t n_terms = 0, n_plain = 0;
    for (size_t i = 0; i < n_ranges; i++) {
        /* the plain stretches of [lo, hi]: cut out controls, '"' and '\' */
        uint32_t lo = r[i].lo < 0x20 ? 0x20 : r[i].lo;
        while (lo <= r[i].hi) {
            if (!plain(lo)) {
                lo++;
                continue;
            }
            uint32_t hi = lo > '\\' ? r[i].hi : lo; /* above '\\' every character is plain */
            while (hi < r[i].hi && plain(hi + 1)) hi++;
            llmm__gbnf_text_class_char(&body, lo);
            if (hi > lo) {
                llmm__gbnf_text_str(&body, "-");
                llmm__gbnf_text_class_char(&body, hi);
            }
            n_plain++;
            lo = hi + 1;
        }
    }
    gbnf_text terms = {0};
    if (n_plain) {
        llmm__gbnf_text_str(&terms, "[");
        llmm__gbnf_text_bytes(&terms, body.data, body.len);
        llmm__gbnf_text_str(&terms, "]");
        n_terms++;
    }
    for (size_t i = 0; i < n_ranges; i++)
        for (uint32_t cp = r[i].lo; cp <= r[i].hi && cp < 0x80; cp++) {
            if (plain(cp)) continue;
            if (n_terms++) llmm__gbnf_text_str(&terms, " | ");
            json_char_literal(&terms, cp);
        }
    if (body.failed || terms.failed) out->failed = 1;
    if (n_terms > 1) llmm__gbnf_text_str(out, "(");
    if (!terms.failed && terms.len) llmm__gbnf_text_bytes(out, terms.data, terms.len);
    if (n_terms > 1) llmm__gbnf_text_str(out, ")");
    llmm__gbnf_text_free(&body);
    llmm__gbnf_text_free(&terms);
}

/* A negated class (or '.'): any plain character outside the ranges, and \" or \\ unless
 * excluded. */
static void emit_negated_class(gbnf_text *out, const cp_range *r, size_t n_ranges) {
    int allow_quote = 1, allow_backslash = 1;
    llmm__gbnf_text_str(out, "([^");
    for (size_t i = 0; i < n_ranges; i++) {
        if (r[i].lo <= '"' && '"' <= r[i].hi) allow_quote = 0;
        if (r[i].lo <= '\\' && '\\' <= r[i].hi) allow_backslash = 0;
        llmm__gbnf_text_class_char(out, r[i].lo);
        if (r[i].hi > r[i].lo) {
            llmm__gbnf_text_str(out, "-");
            llmm__gbnf_text_class_char(out, r[i].hi);
        }
    }
    llmm__gbnf_text_str(out, "\"\\\\\\x00-\\x1F]");
    if (allow_quote) llmm__gbnf_text_str(out, " | \"\\\\\\\"\"");
    if (allow_backslash) llmm__gbnf_text_str(out, " | \"\\\\\\\\\"");
    llmm__gbnf_text_str(out, ")");
}

/* ------------------------------------------------------------------ escapes and classes */

static const cp_range digit_ranges[] = {{'0', '9'}};
static const cp_range word_ranges[] = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
static const cp_range space_ranges[] = {{'\t', '\r'}, {' ', ' '}};

typedef struct class_escape {
    char letter;
    const cp_range *ranges;
    size_t n;
} class_escape;

static const class_escape class_escapes[] = {
    {'d', digit_ranges, 1}, {'w', word_ranges, 4}, {'s', space_ranges, 2},
};

static const class_escape *find_class_escape(char c) {
    char lower = (char)(c | 0x20);
    for (size_t i = 0; i < sizeof class_escapes / sizeof *class_escapes; i++)
        if (class_escapes[i].letter == lower) return &class_escapes[i];
    return NULL;
}

static int hex_value(char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* A single-character escape after '\' (p->pos is past the '\'): \n \t \r \f \v \0 \xHH
 * \uHHHH or escaped punctuation. Returns 0 after refusing anything else. */
static int read_char_escape(pattern_reader *p, uint32_t *cp) {
    size_t at = p->pos - 1;
    char c = cur(p);
    static const char simple_from[] = "ntrfv0", simple_to[] = "\n\t\r\f\v";
    const char *hit = c ? strchr(simple_from, c) : NULL;
    if (hit) {
        p->pos++;
        *cp = (uint32_t)(unsigned char)simple_to[hit - simple_from];
        return 1;
    }
    if (c == 'x' || c == 'u') {
        size_t digits = c == 'x' ? 2 : 4;
        uint32_t v = 0;
        if (p->n - p->pos < digits + 1) return refuse(p, at, "'\\%c' needs %zu hex digits", c, digits);
        for (size_t i = 1; i <= digits; i++) {
            int h = hex_value(p->s[p->pos + i]);
            if (h < 0) return refuse(p, at, "'\\%c' needs %zu hex digits", c, digits);
            v = v * 16 + (uint32_t)h;
        }
        if (v >= 0xD800 && v <= 0xDFFF) return refuse(p, at, "surrogate '\\u%04X'", (unsigned)v);
        p->pos += digits + 1;
        *cp = v;
        return 1;
    }
    if (!more(p)) return refuse(p, at, "'\\' at the end");
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))
        return refuse(p, at, "unsupported escape '\\%c'", c);
    *cp = next_cp(p); /* escaped punctuation stands for itself */
    return 1;
}

static int add_range(pattern_reader *p, cp_range *r, size_t *n, uint32_t lo, uint32_t hi) {
    if (*n == PATTERN_MAX_RANGES) return refuse(p, p->pos, "class with more than %d items", PATTERN_MAX_RANGES);
    r[(*n)++] = (cp_range){lo, hi};
    return 1;
}

/* [...] after the '['. */
static int read_class(pattern_reader *p) {
    size_t start = p->pos - 1;
    cp_range r[PATTERN_MAX_RANGES];
    size_t n = 0;
    int negated = cur(p) == '^';
    if (negated) p->pos++;
    while (more(p) && cur(p) != ']') {
        uint32_t lo;
        if (cur(p) == '\\') {
            p->pos++;
            const class_escape *ce = find_class_escape(cur(p));
            if (ce && cur(p) != ce->letter) return refuse(p, p->pos - 1, "'\\%c' inside a class", cur(p));
            if (ce) {
                p->pos++;
                for (size_t i = 0; i < ce->n; i++)
                    if (!add_range(p, r, &n, ce->ranges[i].lo, ce->ranges[i].hi)) return 0;
                continue;
            }
            if (cur(p) == 'b') { /* inside a class \b is a backspace */
                p->pos++, lo = '\b';
            } else if (!read_char_escape(p, &lo)) {
                return 0;
            }
        } else {
            lo = next_cp(p);
        }
        uint32_t hi = lo;
        if (cur(p) == '-' && p->pos + 1 < p->n && p->s[p->pos + 1] != ']') {
            p->pos++;
            if (cur(p) == '\\') {
                p->pos++;
                if (find_class_escape(cur(p))) return refuse(p, p->pos - 1, "class escape as a range end");
                if (!read_char_escape(p, &hi)) return 0;
            } else {
                hi = next_cp(p);
            }
            if (hi < lo) return refuse(p, p->pos, "range out of order");
        }
        if (!add_range(p, r, &n, lo, hi)) return 0;
    }
    if (!more(p)) return refuse(p, start, "unterminated '['");
    p->pos++;
    if (n == 0) return refuse(p, start, "empty class");
    if (negated) emit_negated_class(p->out, r, n);
    else emit_class(p->out, r, n);
    return 1;
}

/* ------------------------------------------------------------------ structure */

static int read_alternation(pattern_reader *p, int depth, int top);

static int read_number(pattern_reader *p, size_t *v) {
    size_t start = p->pos, value = 0;
    while (cur(p) >= '0' && cur(p) <= '9') {
        value = value * 10 + (size_t)(cur(p) - '0');
        if (value > PATTERN_MAX_REPEAT) return refuse(p, start, "repeat count above %d", PATTERN_MAX_REPEAT);
        p->pos++;
    }
    *v = value;
    return p->pos > start;
}

/* A quantifier after an atom, if any, appended to the atom's term. */
static int read_quantifier(pattern_reader *p) {
    char c = cur(p);
    if (c == '*' || c == '+' || c == '?') {
        p->pos++;
        llmm__gbnf_text_bytes(p->out, &c, 1);
    } else if (c == '{') {
        size_t at = p->pos, lo, hi;
        p->pos++;
        if (!read_number(p, &lo)) return p->failed ? 0 : refuse(p, at, "'{' that is not a quantifier");
        hi = lo;
        int open = 0;
        if (cur(p) == ',') {
            p->pos++;
            if (!read_number(p, &hi)) {
                if (p->failed) return 0;
                open = 1;
            }
        }
        if (cur(p) != '}') return refuse(p, at, "'{' that is not a quantifier");
        p->pos++;
        if (!open && hi < lo) return refuse(p, at, "quantifier {%zu,%zu} out of order", lo, hi);
        if (open) llmm__gbnf_text_fmt(p->out, "{%zu,}", lo);
        else if (hi == lo) llmm__gbnf_text_fmt(p->out, "{%zu}", lo);
        else llmm__gbnf_text_fmt(p->out, "{%zu,%zu}", lo, hi);
    } else {
        return 1;
    }
    if (cur(p) == '?') p->pos++; /* lazy: the same set of strings */
    c = cur(p);
    if (c == '*' || c == '+' || c == '?' || c == '{') return refuse(p, p->pos, "nothing to repeat");
    return 1;
}

static int read_group(pattern_reader *p, int depth) {
    size_t at = p->pos - 1;
    if (cur(p) == '?') {
        const char *rest = p->s + p->pos, *end = p->s + p->n;
        if (end - rest >= 2 && rest[1] == ':') {
            p->pos += 2;
        } else if (end - rest >= 3 && rest[1] == '<' && rest[2] != '=' && rest[2] != '!') {
            const char *close = memchr(rest, '>', (size_t)(end - rest));
            if (!close) return refuse(p, at, "unterminated group name");
            p->pos += (size_t)(close - rest) + 1;
        } else {
            return refuse(p, at, "lookaround '(?%c' is not supported", end - rest >= 2 ? rest[1] : '?');
        }
    }
    llmm__gbnf_text_str(p->out, "(");
    if (!read_alternation(p, depth + 1, 0)) return 0;
    if (cur(p) != ')') return refuse(p, at, "unterminated '('");
    p->pos++;
    llmm__gbnf_text_str(p->out, ")");
    return 1;
}

static int read_atom(pattern_reader *p, int depth) {
    size_t at = p->pos;
    char c = cur(p);
    if (c == '(') {
        p->pos++;
        return read_group(p, depth);
    }
    if (c == '[') {
        p->pos++;
        return read_class(p);
    }
    if (c == '.') {
        static const cp_range line_ends[] = {{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}};
        p->pos++;
        emit_negated_class(p->out, line_ends, 3);
        return 1;
    }
    if (c == '*' || c == '+' || c == '?' || c == '{') return refuse(p, at, "nothing to repeat");
    if (c == ')') return refuse(p, at, "unmatched ')'");
    if (c == '^' || c == '$') return refuse(p, at, "anchor '%c' inside the pattern", c);
    if (c == ']' || c == '}') return refuse(p, at, "unescaped '%c'", c);
    uint32_t cp;
    if (c == '\\') {
        p->pos++;
        const class_escape *ce = find_class_escape(cur(p));
        if (ce) {
            int negated = cur(p) != ce->letter;
            p->pos++;
            if (negated) emit_negated_class(p->out, ce->ranges, ce->n);
            else emit_class(p->out, ce->ranges, ce->n);
            return 1;
        }
        if (cur(p) == 'b' || cur(p) == 'B') return refuse(p, at, "word boundary '\\%c'", cur(p));
        if (cur(p) >= '1' && cur(p) <= '9') return refuse(p, at, "backreference '\\%c'", cur(p));
        if (!read_char_escape(p, &cp)) return 0;
    } else {
        cp = next_cp(p);
    }
    json_char_literal(p->out, cp);
    return 1;
}

/* One branch; at the top level it may start with ^ and end with $, and an unanchored end
 * matches any characters there. */
static int read_sequence(pattern_reader *p, int depth, int top) {
    int anchored_start = top && cur(p) == '^', anchored_end = 0;
    if (anchored_start) p->pos++;
    if (top && !anchored_start) llmm__gbnf_text_str(p->out, "char* ");
    while (more(p) && cur(p) != '|' && cur(p) != ')') {
        if (top && cur(p) == '$' && (p->pos + 1 == p->n || p->s[p->pos + 1] == '|')) {
            p->pos++;
            anchored_end = 1;
            break;
        }
        if (!read_atom(p, depth) || !read_quantifier(p)) return 0;
        llmm__gbnf_text_str(p->out, " ");
    }
    if (top && !anchored_end) llmm__gbnf_text_str(p->out, "char*");
    return 1;
}

static int read_alternation(pattern_reader *p, int depth, int top) {
    if (depth > PATTERN_MAX_DEPTH) return refuse(p, p->pos, "groups nested deeper than %d", PATTERN_MAX_DEPTH);
    for (;;) {
        if (!read_sequence(p, depth, top)) return 0;
        if (cur(p) != '|') return 1;
        p->pos++;
        llmm__gbnf_text_str(p->out, "| ");
    }
}

int llmm__gbnf_from_pattern(gbnf_text *out, const char *pattern, size_t len, char *err, size_t err_size) {
    pattern_reader p = {.s = pattern, .n = len, .out = out, .err = err, .err_size = err_size};
    llmm__gbnf_text_str(out, "(");
    if (!read_alternation(&p, 0, 1)) return 0;
    if (more(&p)) return refuse(&p, p.pos, "unmatched ')'");
    llmm__gbnf_text_str(out, ")");
    return 1;
}
