/* GBNF text -> grammar_rules. A recursive-descent parser over the syntax llama.cpp documents
 * (grammars/README.md there): rules `name ::= ...`, alternatives, groups, literals, character
 * classes, '.', comments and the repetitions * + ? {m} {m,} {m,n}. Groups and repetitions
 * become generated rules; afterwards the rules are checked (all defined, the start rule
 * present, no left recursion, which would make the matcher expand forever) and laid out flat. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar_parse.h"

#define REPEAT_MAX 10000u      /* bound of {m,n}: every count costs elements or a rule */
#define NESTING_MAX 256        /* parentheses: the parser recurses once per level */
#define CODEPOINT_MAX 0x10FFFFu
#define ELEMS_MAX (1u << 22)   /* compiled elements (8 bytes each): repetitions multiply a short text */

typedef struct elem_vec {
    gelem *v;
    size_t n, cap;
} elem_vec;

typedef struct prule {
    const char *name;     /* in the source: the rule's own name, or for a generated rule the */
    size_t name_len;      /* named rule it was generated in */
    uint32_t serial;      /* 0 for a named rule, else 1, 2, ... within its named rule */
    const char *where;    /* its definition, or its first use while undefined */
    int defined;
    uint32_t n_generated; /* named rules: how many rules were generated inside it */
    elem_vec body;        /* alternatives, each closed by GELEM_END */
} prule;

typedef struct parser {
    const char *text, *p, *end;
    const llmm_allocator *alloc;
    llmm_diag *d;
    llmm_status st; /* the first failure; every step stops once it is set */
    prule *rules;
    size_t n_rules, cap_rules;
    gcharset *sets;
    size_t n_sets, cap_sets;
    gchar_range *ranges;
    size_t n_ranges, cap_ranges;
    size_t current; /* the named rule being defined */
    int depth;
    size_t n_elems; /* in every rule's body */
    uint32_t *name_slots; /* (n_slots) named rules by name hash, open addressing: rule + 1, 0 = empty */
    size_t n_slots, n_named;
} parser;

/* ---------------------------------------------------------------- errors */

static int fail_at(parser *ps, const char *where, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static int fail_at(parser *ps, const char *where, const char *fmt, ...) {
    if (ps->st) return 0;
    size_t line = 1, col = 1;
    for (const char *q = ps->text; q < where; q++) {
        if (*q == '\n') line++, col = 1;
        else if (((unsigned char)*q & 0xC0) != 0x80) col++;
    }
    char what[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    ps->st = llmm__diag_fail(ps->d, LLMM_ERR_INVALID_ARG, "line %zu, column %zu: %s", line, col, what);
    return 0;
}

static int fail_memory(parser *ps) {
    if (!ps->st) ps->st = llmm__diag_fail(ps->d, LLMM_ERR_NO_MEMORY, "out of memory compiling the grammar");
    return 0;
}

/* What the character at p is, for messages. */
static const char *describe(const parser *ps, const char *p, char buf[16]) {
    if (p >= ps->end) return "the end of the grammar";
    if (*p == '\n') return "the end of the line";
    unsigned char c = (unsigned char)*p;
    if (c < 0x20 || c >= 0x7F) snprintf(buf, 16, "byte 0x%02X", c);
    else snprintf(buf, 16, "'%c'", c);
    return buf;
}

/* ---------------------------------------------------------------- growing tables */

static int push_elem(parser *ps, size_t rule, uint32_t kind, uint32_t arg) {
    elem_vec *b = &ps->rules[rule].body;
    if (++ps->n_elems > ELEMS_MAX)
        return fail_at(ps, ps->p, "the grammar compiles to more than %u elements (repetitions count each copy)",
                       ELEMS_MAX);
    if (llmm__mem_reserve(ps->alloc, (void **)&b->v, &b->cap, b->n + 1, sizeof *b->v)) return fail_memory(ps);
    b->v[b->n++] = (gelem){kind, arg};
    return 1;
}

static uint64_t name_hash(const char *name, size_t len) {
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
    for (size_t i = 0; i < len; i++) h = (h ^ (unsigned char)name[i]) * 0x100000001b3ull;
    return h;
}

/* The slot of the named rule called name, or the empty slot where it would go. */
static size_t name_slot(const parser *ps, const char *name, size_t len) {
    size_t i = (size_t)name_hash(name, len) & (ps->n_slots - 1);
    for (; ps->name_slots[i]; i = (i + 1) & (ps->n_slots - 1)) {
        const prule *r = &ps->rules[ps->name_slots[i] - 1];
        if (r->name_len == len && !memcmp(r->name, name, len)) break;
    }
    return i;
}

/* Index named rule r by its name (which is not yet indexed): the lookups of references stay
 * constant time however many rules a grammar has. */
static int index_name(parser *ps, size_t r) {
    if (2 * (ps->n_named + 1) > ps->n_slots) {
        size_t old = ps->n_slots, cap = old ? 2 * old : 64;
        uint32_t *slots = llmm__mem_calloc(ps->alloc, cap, sizeof *slots), *prev = ps->name_slots;
        if (!slots) return fail_memory(ps);
        ps->name_slots = slots;
        ps->n_slots = cap;
        for (size_t i = 0; i < old; i++)
            if (prev[i]) {
                const prule *x = &ps->rules[prev[i] - 1];
                slots[name_slot(ps, x->name, x->name_len)] = prev[i];
            }
        llmm__mem_free(ps->alloc, prev);
    }
    ps->name_slots[name_slot(ps, ps->rules[r].name, ps->rules[r].name_len)] = (uint32_t)r + 1;
    ps->n_named++;
    return 1;
}

static size_t add_rule(parser *ps, const char *name, size_t name_len, uint32_t serial, const char *where) {
    if (ps->n_rules >= UINT32_MAX / 2 ||
        llmm__mem_reserve(ps->alloc, (void **)&ps->rules, &ps->cap_rules, ps->n_rules + 1, sizeof *ps->rules)) {
        fail_memory(ps);
        return SIZE_MAX;
    }
    ps->rules[ps->n_rules] = (prule){.name = name, .name_len = name_len, .serial = serial, .where = where};
    if (serial == 0 && !index_name(ps, ps->n_rules)) return SIZE_MAX;
    return ps->n_rules++;
}

/* A new rule for a group or repetition inside the named rule being defined. */
static size_t generated_rule(parser *ps, const char *where) {
    prule *owner = &ps->rules[ps->current];
    uint32_t serial = ++owner->n_generated;
    size_t r = add_rule(ps, owner->name, owner->name_len, serial, where);
    if (r != SIZE_MAX) ps->rules[r].defined = 1;
    return r;
}

static size_t find_rule(const parser *ps, const char *name, size_t len) {
    if (!ps->n_slots) return SIZE_MAX;
    uint32_t r = ps->name_slots[name_slot(ps, name, len)];
    return r ? r - 1 : SIZE_MAX;
}

static int cmp_ranges(const void *a, const void *b) {
    const gchar_range *x = a, *y = b;
    return (x->lo > y->lo) - (x->lo < y->lo);
}

/* Sort and merge ranges[first..) (the ones just added) and make them a set. Returns its index
 * or UINT32_MAX. */
static uint32_t finish_set(parser *ps, size_t first, int negated) {
    size_t n = ps->n_ranges - first, kept = 0;
    gchar_range *r = n ? ps->ranges + first : NULL; /* '.' has none, and may come before any range */
    if (n) qsort(r, n, sizeof *r, cmp_ranges);
    for (size_t i = 0; i < n; i++) {
        if (kept && r[i].lo <= r[kept - 1].hi + 1) {
            if (r[i].hi > r[kept - 1].hi) r[kept - 1].hi = r[i].hi;
        } else {
            r[kept++] = r[i];
        }
    }
    ps->n_ranges = first + kept;
    if (ps->n_sets >= UINT32_MAX / 2 ||
        llmm__mem_reserve(ps->alloc, (void **)&ps->sets, &ps->cap_sets, ps->n_sets + 1, sizeof *ps->sets)) {
        fail_memory(ps);
        return UINT32_MAX;
    }
    gcharset *s = &ps->sets[ps->n_sets];
    *s = (gcharset){.first_range = (uint32_t)first, .n_ranges = (uint32_t)kept, .negated = (uint32_t)negated};
    for (size_t i = 0; i < kept; i++)
        for (uint32_t c = r[i].lo; c <= r[i].hi && c < 128; c++) s->ascii[c >> 5] |= 1u << (c & 31);
    if (negated)
        for (int i = 0; i < 4; i++) s->ascii[i] = ~s->ascii[i];
    return (uint32_t)ps->n_sets++;
}

static int add_range(parser *ps, uint32_t lo, uint32_t hi) {
    if (llmm__mem_reserve(ps->alloc, (void **)&ps->ranges, &ps->cap_ranges, ps->n_ranges + 1, sizeof *ps->ranges))
        return fail_memory(ps);
    ps->ranges[ps->n_ranges++] = (gchar_range){lo, hi};
    return 1;
}

static int push_char_set(parser *ps, size_t rule, uint32_t lo, uint32_t hi, int negated) {
    size_t first = ps->n_ranges;
    if (!add_range(ps, lo, hi)) return 0;
    uint32_t s = finish_set(ps, first, negated);
    return s != UINT32_MAX && push_elem(ps, rule, GELEM_CHARS, s);
}

/* '.': the negation of the empty set. */
static int push_any_char(parser *ps, size_t rule) {
    uint32_t s = finish_set(ps, ps->n_ranges, 1);
    return s != UINT32_MAX && push_elem(ps, rule, GELEM_CHARS, s);
}

/* ---------------------------------------------------------------- lexical pieces */

static int is_name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

/* Spaces, tabs, carriage returns and comments; newlines too when newlines != 0. */
static void skip_space(parser *ps, int newlines) {
    while (ps->p < ps->end) {
        char c = *ps->p;
        if (c == ' ' || c == '\t' || c == '\r' || (c == '\n' && newlines)) {
            ps->p++;
        } else if (c == '#') {
            while (ps->p < ps->end && *ps->p != '\n') ps->p++;
        } else {
            return;
        }
    }
}

static int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* One UTF-8 character of the source at ps->p; 0 on malformed UTF-8. */
static int decode_source_char(parser *ps, uint32_t *cp) {
    const unsigned char *s = (const unsigned char *)ps->p;
    size_t left = (size_t)(ps->end - ps->p);
    int n = s[0] < 0x80 ? 1 : (s[0] & 0xE0) == 0xC0 ? 2 : (s[0] & 0xF0) == 0xE0 ? 3 : (s[0] & 0xF8) == 0xF0 ? 4 : 0;
    static const uint32_t lead_mask[5] = {0, 0x7F, 0x1F, 0x0F, 0x07};
    static const uint32_t smallest[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (n == 0 || (size_t)n > left) return fail_at(ps, ps->p, "invalid UTF-8");
    uint32_t v = s[0] & lead_mask[n];
    for (int i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80) return fail_at(ps, ps->p, "invalid UTF-8");
        v = (v << 6) | (s[i] & 0x3F);
    }
    if (v < smallest[n] || v > CODEPOINT_MAX || (v >= 0xD800 && v <= 0xDFFF)) return fail_at(ps, ps->p, "invalid UTF-8");
    ps->p += n;
    *cp = v;
    return 1;
}

/* One character of a literal or class: an escape or a UTF-8 character. */
static int parse_char(parser *ps, uint32_t *cp) {
    if (*ps->p != '\\') return decode_source_char(ps, cp);
    const char *esc = ps->p;
    if (esc + 1 >= ps->end) return fail_at(ps, esc, "expected an escaped character after '\\'");
    char c = esc[1];
    static const char simple_from[] = "nrt\\\"[]-^", simple_to[] = "\n\r\t\\\"[]-^";
    const char *simple = strchr(simple_from, c);
    if (simple && c) {
        *cp = (uint32_t)(unsigned char)simple_to[simple - simple_from];
        ps->p += 2;
        return 1;
    }
    int digits = c == 'x' ? 2 : c == 'u' ? 4 : c == 'U' ? 8 : 0;
    char shown[16];
    if (!digits) return fail_at(ps, esc, "unknown escape '\\' followed by %s", describe(ps, esc + 1, shown));
    uint32_t v = 0;
    for (int i = 0; i < digits; i++) {
        const char *h = esc + 2 + i;
        if (h >= ps->end || hex_value(*h) < 0)
            return fail_at(ps, h, "expected %d hex digits after '\\%c'", digits, c);
        v = (v << 4) | (uint32_t)hex_value(*h);
    }
    if (v > CODEPOINT_MAX) return fail_at(ps, esc, "code point U+%X is beyond U+10FFFF", v);
    *cp = v;
    ps->p = esc + 2 + digits;
    return 1;
}

/* ---------------------------------------------------------------- items */

static int parse_literal(parser *ps, size_t rule) {
    const char *open = ps->p++;
    while (ps->p < ps->end && *ps->p != '"') {
        uint32_t cp;
        if (!parse_char(ps, &cp) || !push_char_set(ps, rule, cp, cp, 0)) return 0;
    }
    if (ps->p >= ps->end) return fail_at(ps, open, "unterminated string literal");
    ps->p++;
    return 1;
}

static int parse_class(parser *ps, size_t rule) {
    const char *open = ps->p++;
    int negated = ps->p < ps->end && *ps->p == '^';
    if (negated) ps->p++;
    size_t first = ps->n_ranges;
    while (ps->p < ps->end && *ps->p != ']') {
        const char *start = ps->p;
        uint32_t lo, hi;
        if (!parse_char(ps, &lo)) return 0;
        hi = lo;
        if (ps->p + 1 < ps->end && *ps->p == '-' && ps->p[1] != ']') {
            ps->p++;
            if (!parse_char(ps, &hi)) return 0;
            if (hi < lo) return fail_at(ps, start, "character range ends before it starts");
        }
        if (!add_range(ps, lo, hi)) return 0;
    }
    if (ps->p >= ps->end) return fail_at(ps, open, "unterminated character class");
    ps->p++;
    uint32_t s = finish_set(ps, first, negated);
    return s != UINT32_MAX && push_elem(ps, rule, GELEM_CHARS, s);
}

static int parse_reference(parser *ps, size_t rule) {
    const char *name = ps->p;
    while (ps->p < ps->end && is_name_char(*ps->p)) ps->p++;
    size_t len = (size_t)(ps->p - name), r = find_rule(ps, name, len);
    if (r == SIZE_MAX) r = add_rule(ps, name, len, 0, name);
    return r != SIZE_MAX && push_elem(ps, rule, GELEM_REF, (uint32_t)r);
}

static int parse_alternates(parser *ps, size_t rule, int nested);

static int parse_group(parser *ps, size_t rule) {
    const char *open = ps->p++;
    if (++ps->depth > NESTING_MAX) return fail_at(ps, open, "groups nested deeper than %d", NESTING_MAX);
    skip_space(ps, 1);
    size_t g = generated_rule(ps, open);
    if (g == SIZE_MAX || !parse_alternates(ps, g, 1)) return 0;
    char shown[16];
    if (ps->p >= ps->end || *ps->p != ')')
        return fail_at(ps, ps->p, "expected ')' to close the group, found %s", describe(ps, ps->p, shown));
    ps->p++;
    ps->depth--;
    return push_elem(ps, rule, GELEM_REF, (uint32_t)g);
}

/* ---------------------------------------------------------------- repetition */

static int parse_count(parser *ps, uint32_t *v) {
    const char *start = ps->p;
    uint64_t x = 0;
    while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9') {
        x = x * 10 + (uint64_t)(*ps->p++ - '0');
        if (x > REPEAT_MAX) return fail_at(ps, start, "repetition count above %u", REPEAT_MAX);
    }
    char shown[16];
    if (ps->p == start) return fail_at(ps, ps->p, "expected a number, found %s", describe(ps, ps->p, shown));
    *v = (uint32_t)x;
    return 1;
}

/* The bounds of the repetition operator at ps->p: max = UINT32_MAX for no upper bound. */
static int parse_repetition_bounds(parser *ps, uint32_t *min, uint32_t *max) {
    char op = *ps->p++;
    if (op != '{') {
        *min = op == '+';
        *max = op == '?' ? 1 : UINT32_MAX;
        return 1;
    }
    skip_space(ps, 0);
    if (!parse_count(ps, min)) return 0;
    skip_space(ps, 0);
    *max = *min;
    if (ps->p < ps->end && *ps->p == ',') {
        ps->p++;
        skip_space(ps, 0);
        *max = UINT32_MAX;
        if (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9') {
            const char *at = ps->p;
            if (!parse_count(ps, max)) return 0;
            if (*max < *min) return fail_at(ps, at, "repetition maximum %u is below its minimum %u", *max, *min);
            skip_space(ps, 0);
        }
    }
    char shown[16];
    if (ps->p >= ps->end || *ps->p != '}')
        return fail_at(ps, ps->p, "expected '}' to close the repetition, found %s", describe(ps, ps->p, shown));
    ps->p++;
    return 1;
}

/* Rewrite the item body[start..] of rule as min copies followed by a rule for the rest:
 *   unbounded:  S ::= item S |          (right recursion; the matcher pops it as a tail call)
 *   k optional: O1 ::= item | ,  Ok ::= item O(k-1) |  */
static int apply_repetition(parser *ps, size_t rule, size_t start) {
    const char *at = ps->p;
    uint32_t min, max;
    if (!parse_repetition_bounds(ps, &min, &max)) return 0;
    elem_vec *b = &ps->rules[rule].body;
    size_t n_item = b->n - start;
    if (n_item == 0) return 1; /* a repeated empty literal is empty */
    gelem unit = b->v[start];
    if (n_item > 1) {
        size_t g = generated_rule(ps, at);
        if (g == SIZE_MAX) return 0;
        b = &ps->rules[rule].body;
        for (size_t i = start; i < b->n; i++)
            if (!push_elem(ps, g, b->v[i].kind, b->v[i].arg)) return 0;
        if (!push_elem(ps, g, GELEM_END, 0)) return 0;
        unit = (gelem){GELEM_REF, (uint32_t)g};
    }
    ps->rules[rule].body.n = start;
    for (uint32_t i = 0; i < min; i++)
        if (!push_elem(ps, rule, unit.kind, unit.arg)) return 0;
    if (max == min) return 1;
    uint32_t optional = max == UINT32_MAX ? 1 : max - min;
    size_t prev = SIZE_MAX;
    for (uint32_t k = 0; k < optional; k++) {
        size_t r = generated_rule(ps, at);
        if (r == SIZE_MAX || !push_elem(ps, r, unit.kind, unit.arg)) return 0;
        size_t next = max == UINT32_MAX ? r : prev;
        if (next != SIZE_MAX && !push_elem(ps, r, GELEM_REF, (uint32_t)next)) return 0;
        if (!push_elem(ps, r, GELEM_END, 0) || !push_elem(ps, r, GELEM_END, 0)) return 0;
        prev = r;
    }
    return push_elem(ps, rule, GELEM_REF, (uint32_t)prev);
}

/* ---------------------------------------------------------------- rules */

/* Items up to '|', ')', the end of the line (when not nested) or the end of the grammar. */
static int parse_sequence(parser *ps, size_t rule, int nested) {
    size_t last = SIZE_MAX;
    while (ps->p < ps->end && !ps->st) {
        char c = *ps->p;
        size_t here = ps->rules[rule].body.n;
        if (c == '"') last = here, parse_literal(ps, rule);
        else if (c == '[') last = here, parse_class(ps, rule);
        else if (c == '.') last = here, ps->p++, push_any_char(ps, rule);
        else if (c == '(') last = here, parse_group(ps, rule);
        else if (is_name_char(c)) last = here, parse_reference(ps, rule);
        else if (c == '*' || c == '+' || c == '?' || c == '{') {
            if (last == SIZE_MAX) return fail_at(ps, ps->p, "'%c' must follow an item to repeat", c);
            apply_repetition(ps, rule, last);
        } else {
            break;
        }
        skip_space(ps, nested);
    }
    return !ps->st;
}

/* At a newline after a top-level alternative: whether the next line continues it with '|'. */
static const char *continuation_bar(const parser *ps) {
    const char *q = ps->p;
    while (q < ps->end) {
        if (*q == ' ' || *q == '\t' || *q == '\r' || *q == '\n') q++;
        else if (*q == '#') while (q < ps->end && *q != '\n') q++;
        else return *q == '|' ? q : NULL;
    }
    return NULL;
}

static int parse_alternates(parser *ps, size_t rule, int nested) {
    for (;;) {
        if (!parse_sequence(ps, rule, nested) || !push_elem(ps, rule, GELEM_END, 0)) return 0;
        const char *bar = ps->p < ps->end && *ps->p == '|' ? ps->p : NULL;
        if (!bar && !nested && ps->p < ps->end && *ps->p == '\n') bar = continuation_bar(ps);
        if (!bar) return 1;
        ps->p = bar + 1;
        skip_space(ps, 1);
    }
}

static int parse_rule(parser *ps) {
    const char *name = ps->p;
    while (ps->p < ps->end && is_name_char(*ps->p)) ps->p++;
    size_t len = (size_t)(ps->p - name);
    char shown[16];
    if (len == 0) return fail_at(ps, name, "expected a rule name, found %s", describe(ps, name, shown));
    skip_space(ps, 0);
    if ((size_t)(ps->end - ps->p) < 3 || memcmp(ps->p, "::=", 3))
        return fail_at(ps, ps->p, "expected '::=' after the rule name, found %s", describe(ps, ps->p, shown));
    ps->p += 3;
    skip_space(ps, 1);
    size_t r = find_rule(ps, name, len);
    if (r != SIZE_MAX && ps->rules[r].defined)
        return fail_at(ps, name, "rule '%.*s' is defined twice", (int)len, name);
    if (r == SIZE_MAX && (r = add_rule(ps, name, len, 0, name)) == SIZE_MAX) return 0;
    ps->rules[r].defined = 1;
    ps->rules[r].where = name;
    ps->current = r;
    if (!parse_alternates(ps, r, 0)) return 0;
    if (ps->p < ps->end && *ps->p != '\n')
        return fail_at(ps, ps->p, "expected an item, '|' or the end of the line, found %s", describe(ps, ps->p, shown));
    return 1;
}

/* ---------------------------------------------------------------- checks */

static int rule_name(const parser *ps, size_t r, char *buf, size_t size) {
    const prule *x = &ps->rules[r];
    if (x->serial) return snprintf(buf, size, "%.*s-%u", (int)x->name_len, x->name, x->serial);
    return snprintf(buf, size, "%.*s", (int)x->name_len, x->name);
}

static int check_defined(parser *ps) {
    for (size_t i = 0; i < ps->n_rules; i++)
        if (!ps->rules[i].defined)
            return fail_at(ps, ps->rules[i].where, "undefined rule '%.*s'", (int)ps->rules[i].name_len,
                           ps->rules[i].name);
    return 1;
}

/* Rules that can match the empty string, by fixpoint: an alternative is nullable when all its
 * elements are nullable rule references. */
static void find_nullable(const parser *ps, uint8_t *nullable) {
    for (int changed = 1; changed;) {
        changed = 0;
        for (size_t r = 0; r < ps->n_rules; r++) {
            if (nullable[r]) continue;
            const elem_vec *b = &ps->rules[r].body;
            int all = 1;
            for (size_t i = 0; i < b->n && !nullable[r]; i++) {
                if (b->v[i].kind == GELEM_END) {
                    if (all) nullable[r] = 1, changed = 1;
                    all = 1;
                } else if (b->v[i].kind == GELEM_CHARS || !nullable[b->v[i].arg]) {
                    all = 0;
                }
            }
        }
    }
}

/* The left corners of every rule as adjacency lists: rule r references rule s with only
 * nullable elements before it in some alternative. first has n_rules + 1 entries. */
static int left_corners(parser *ps, const uint8_t *nullable, size_t **first, uint32_t **to) {
    size_t n_elems = 0;
    for (size_t r = 0; r < ps->n_rules; r++) n_elems += ps->rules[r].body.n;
    *first = llmm__mem_calloc(ps->alloc, ps->n_rules + 1, sizeof **first);
    *to = llmm__mem_calloc(ps->alloc, n_elems + 1, sizeof **to);
    if (!*first || !*to) return fail_memory(ps);
    size_t n = 0;
    for (size_t r = 0; r < ps->n_rules; r++) {
        const elem_vec *b = &ps->rules[r].body;
        (*first)[r] = n;
        int corner = 1;
        for (size_t i = 0; i < b->n; i++) {
            const gelem *e = &b->v[i];
            if (e->kind == GELEM_END) {
                corner = 1;
                continue;
            }
            if (corner && e->kind == GELEM_REF) (*to)[n++] = e->arg;
            if (e->kind == GELEM_CHARS || !nullable[e->arg]) corner = 0;
        }
    }
    (*first)[ps->n_rules] = n;
    return 1;
}

static int report_cycle(parser *ps, const size_t *stack, size_t top, size_t target) {
    char path[300] = "", name[80];
    size_t from = top;
    while (from > 0 && stack[from - 1] != target) from--;
    for (size_t k = from - 1; k < top; k++) {
        rule_name(ps, stack[k], name, sizeof name);
        snprintf(path + strlen(path), sizeof path - strlen(path), "%s -> ", name);
    }
    rule_name(ps, target, name, sizeof name);
    snprintf(path + strlen(path), sizeof path - strlen(path), "%s", name);
    return fail_at(ps, ps->rules[target].where, "left recursion (%s): a rule reaches itself without consuming input",
                   path);
}

/* Left recursion would make the matcher expand forever: found as a cycle of left corners by an
 * iterative depth-first search, so that a long chain of rules cannot overflow the C stack. */
static int check_left_recursion(parser *ps) {
    size_t n = ps->n_rules, *first = NULL, *stack = llmm__mem_calloc(ps->alloc, n, sizeof *stack);
    size_t *next = llmm__mem_calloc(ps->alloc, n, sizeof *next);
    uint32_t *to = NULL;
    uint8_t *nullable = llmm__mem_calloc(ps->alloc, n, 1), *color = llmm__mem_calloc(ps->alloc, n, 1);
    int ok = nullable && color && stack && next ? 1 : fail_memory(ps);
    if (ok) find_nullable(ps, nullable);
    if (ok) ok = left_corners(ps, nullable, &first, &to);
    for (size_t start = 0; ok && start < n; start++) {
        if (color[start]) continue;
        size_t top = 0;
        stack[top++] = start;
        color[start] = 1;
        next[start] = first[start];
        while (ok && top) {
            size_t r = stack[top - 1];
            if (next[r] == first[r + 1]) {
                color[r] = 2;
                top--;
                continue;
            }
            size_t target = to[next[r]++];
            if (color[target] == 1) {
                ok = report_cycle(ps, stack, top, target);
            } else if (color[target] == 0) {
                color[target] = 1;
                next[target] = first[target];
                stack[top++] = target;
            }
        }
    }
    llmm__mem_free(ps->alloc, nullable);
    llmm__mem_free(ps->alloc, color);
    llmm__mem_free(ps->alloc, stack);
    llmm__mem_free(ps->alloc, next);
    llmm__mem_free(ps->alloc, first);
    llmm__mem_free(ps->alloc, to);
    return ok;
}

/* ---------------------------------------------------------------- layout */

static int lay_out(parser *ps, size_t root, grammar_rules *g) {
    size_t n_elems = 0, n_alts = 0;
    for (size_t r = 0; r < ps->n_rules; r++) {
        n_elems += ps->rules[r].body.n;
        for (size_t i = 0; i < ps->rules[r].body.n; i++) n_alts += ps->rules[r].body.v[i].kind == GELEM_END;
    }
    if (n_elems >= UINT32_MAX) return fail_at(ps, ps->end, "the grammar is too large");
    g->elems = llmm__mem_calloc(ps->alloc, n_elems, sizeof *g->elems);
    g->alt_start = llmm__mem_calloc(ps->alloc, n_alts, sizeof *g->alt_start);
    g->rule_first_alt = llmm__mem_calloc(ps->alloc, ps->n_rules + 1, sizeof *g->rule_first_alt);
    if (!g->elems || !g->alt_start || !g->rule_first_alt) return fail_memory(ps);
    size_t e = 0, a = 0;
    for (size_t r = 0; r < ps->n_rules; r++) {
        const elem_vec *b = &ps->rules[r].body;
        g->rule_first_alt[r] = (uint32_t)a;
        for (size_t i = 0; i < b->n; i++) {
            if (i == 0 || b->v[i - 1].kind == GELEM_END) g->alt_start[a++] = (uint32_t)(e + i);
            g->elems[e + i] = b->v[i];
        }
        e += b->n;
    }
    g->rule_first_alt[ps->n_rules] = (uint32_t)a;
    g->n_elems = (uint32_t)n_elems;
    g->n_alts = (uint32_t)n_alts;
    g->n_rules = (uint32_t)ps->n_rules;
    g->sets = ps->sets;
    g->n_sets = (uint32_t)ps->n_sets;
    g->ranges = ps->ranges;
    g->n_ranges = (uint32_t)ps->n_ranges;
    g->root = (uint32_t)root;
    ps->sets = NULL;
    ps->ranges = NULL;
    return 1;
}

llmm_status llmm__grammar_parse(const char *text, size_t len, const char *root, const llmm_allocator *alloc,
                          grammar_rules *out, llmm_diag *d) {
    memset(out, 0, sizeof *out);
    if (!root) root = "root";
    parser ps = {.text = text, .p = text, .end = text + len, .alloc = alloc, .d = d};
    skip_space(&ps, 1);
    while (ps.p < ps.end && parse_rule(&ps)) skip_space(&ps, 1);
    size_t r = SIZE_MAX;
    if (!ps.st && check_defined(&ps)) {
        r = find_rule(&ps, root, strlen(root));
        if (r == SIZE_MAX) ps.st = llmm__diag_fail(d, LLMM_ERR_INVALID_ARG, "the grammar has no rule named '%s'", root);
    }
    if (!ps.st && check_left_recursion(&ps)) lay_out(&ps, r, out);
    for (size_t i = 0; i < ps.n_rules; i++) llmm__mem_free(alloc, ps.rules[i].body.v);
    llmm__mem_free(alloc, ps.rules);
    llmm__mem_free(alloc, ps.name_slots);
    llmm__mem_free(alloc, ps.sets);
    llmm__mem_free(alloc, ps.ranges);
    if (ps.st) llmm__grammar_rules_free(out, alloc);
    return ps.st;
}
