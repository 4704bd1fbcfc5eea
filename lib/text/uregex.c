#include "uregex.h"

#include <string.h>

#include "base/unicode.h"

#define RE_MAX_GROUP_ALTS 16 /* alternatives in one group */
#define RE_MAX_DEPTH 256     /* recursion bound: sequences are short, so only odd patterns reach it */
#define RE_NO_MATCH SIZE_MAX

/* ---- compiling ---- */

typedef struct re_parser {
    const char *s;
    size_t i, n;
    re_prog *p;
    const char *err; /* the first error; parsing stops at it */
} re_parser;

static uint16_t parse_alternatives(re_parser *ps, uint16_t group);

static void parse_fail(re_parser *ps, const char *msg) {
    if (!ps->err) ps->err = msg;
}

static int peek(const re_parser *ps, char c) {
    return ps->i < ps->n && ps->s[ps->i] == c;
}

static uint16_t new_node(re_parser *ps, uint8_t kind) {
    if (ps->p->n_nodes >= RE_MAX_NODES) {
        parse_fail(ps, "too many nodes");
        return RE_NONE;
    }
    uint16_t k = ps->p->n_nodes++;
    ps->p->nodes[k] = (re_node){.kind = kind, .next = RE_NONE, .min = 1, .max = 1};
    return k;
}

static re_class *new_class(re_parser *ps, uint16_t *index) {
    if (ps->p->n_classes >= RE_MAX_CLASSES) {
        parse_fail(ps, "too many classes");
        return NULL;
    }
    *index = ps->p->n_classes++;
    re_class *c = &ps->p->classes[*index];
    memset(c, 0, sizeof *c);
    c->first_range = ps->p->n_ranges;
    return c;
}

/* Ranges of one class are contiguous because classes never nest. */
static void class_add_range(re_parser *ps, re_class *c, uint32_t lo, uint32_t hi) {
    if (hi < lo) {
        parse_fail(ps, "reversed range");
        return;
    }
    for (uint32_t cp = lo; cp <= hi && cp < 128; cp++) c->ascii[cp >> 5] |= 1u << (cp & 31);
    if (hi < 128) return;
    if (ps->p->n_ranges >= RE_MAX_RANGES) {
        parse_fail(ps, "too many ranges");
        return;
    }
    ps->p->ranges[ps->p->n_ranges][0] = LLMM_MAX(lo, 128u);
    ps->p->ranges[ps->p->n_ranges][1] = hi;
    ps->p->n_ranges++;
    c->n_ranges++;
}

static uint32_t parse_utf8_char(re_parser *ps) {
    uint32_t cp;
    ps->i += llmm__utf8_decode((const uint8_t *)ps->s + ps->i, ps->n - ps->i, &cp);
    return cp;
}

static uint16_t property_bits(const char *name, size_t len) {
    static const struct {
        const char *name;
        uint16_t bits;
    } props[] = {{"L", UNI_L},   {"Lu", UNI_LU}, {"Ll", UNI_LL}, {"Lt", UNI_LT}, {"Lm", UNI_LM}, {"Lo", UNI_LO},
                 {"M", UNI_M},   {"N", UNI_N},   {"P", UNI_P},   {"S", UNI_S},   {"Z", UNI_Z},   {"C", UNI_C}};
    for (size_t k = 0; k < sizeof props / sizeof *props; k++)
        if (strlen(props[k].name) == len && memcmp(props[k].name, name, len) == 0) return props[k].bits;
    return 0;
}

static void parse_property(re_parser *ps, re_class *c) {
    const char *close = ps->i < ps->n && ps->s[ps->i] == '{' ? memchr(ps->s + ps->i, '}', ps->n - ps->i) : NULL;
    uint16_t bits = close ? property_bits(ps->s + ps->i + 1, (size_t)(close - ps->s) - ps->i - 1) : 0;
    if (!bits) {
        parse_fail(ps, "unknown \\p{} property");
        return;
    }
    c->props |= bits;
    ps->i = (size_t)(close - ps->s) + 1;
}

static int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

/* \x{HHHH}: written so, the patterns stay ASCII and no editor can normalize a literal (several
 * letters of the deepseek class are NFC singletons such as U+212A KELVIN SIGN). */
static uint32_t parse_hex_code_point(re_parser *ps) {
    uint32_t v = 0;
    size_t digits = 0;
    if (!peek(ps, '{')) parse_fail(ps, "\\x needs {hex}");
    for (ps->i++; ps->i < ps->n && ps->s[ps->i] != '}' && digits < 7; ps->i++, digits++) {
        int h = hex_digit(ps->s[ps->i]);
        if (h < 0) break;
        v = v * 16 + (uint32_t)h;
    }
    if (!peek(ps, '}') || digits == 0 || v > 0x10FFFF) parse_fail(ps, "bad \\x{} code point");
    ps->i++;
    return v;
}

/* After a backslash: either a set (\s, \S, \d, \p{..}) added to c, returning 0, or a literal
 * stored in *lit, returning 1. \S only makes sense as a whole class of its own. */
static int parse_escape(re_parser *ps, re_class *c, int in_class, uint32_t *lit) {
    if (ps->i >= ps->n) {
        parse_fail(ps, "trailing backslash");
        return 0;
    }
    char e = ps->s[ps->i++];
    switch (e) {
    case 's': c->props |= UNI_WS; return 0;
    case 'S':
        if (in_class || c->props) parse_fail(ps, "\\S inside a class");
        c->props |= UNI_WS;
        c->negated = 1;
        return 0;
    case 'd': class_add_range(ps, c, '0', '9'); return 0;
    case 'p': parse_property(ps, c); return 0;
    case 'r': *lit = '\r'; return 1;
    case 'n': *lit = '\n'; return 1;
    case 't': *lit = '\t'; return 1;
    case 'f': *lit = '\f'; return 1;
    case 'v': *lit = '\v'; return 1;
    case 'x': *lit = parse_hex_code_point(ps); return 1;
    default:
        if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z') || (e >= '0' && e <= '9') || (unsigned char)e >= 128)
            parse_fail(ps, "unsupported escape");
        *lit = (uint8_t)e;
        return 1;
    }
}

/* One class member: a set, a literal or a range lo-hi. */
static void parse_class_item(re_parser *ps, re_class *c) {
    uint32_t lo, hi;
    if (ps->s[ps->i] == '\\') {
        ps->i++;
        if (!parse_escape(ps, c, 1, &lo)) return;
    } else {
        lo = parse_utf8_char(ps);
    }
    hi = lo;
    if (peek(ps, '-') && ps->i + 1 < ps->n && ps->s[ps->i + 1] != ']') {
        ps->i++;
        if (ps->s[ps->i] == '\\') {
            ps->i++;
            if (!parse_escape(ps, c, 1, &hi)) parse_fail(ps, "a range must end in a literal");
        } else {
            hi = parse_utf8_char(ps);
        }
    }
    class_add_range(ps, c, lo, hi);
}

static uint16_t parse_class(re_parser *ps) {
    uint16_t index = 0;
    re_class *c = new_class(ps, &index);
    if (!c) return RE_NONE;
    if (peek(ps, '^')) {
        c->negated = 1;
        ps->i++;
    }
    while (!ps->err && ps->i < ps->n && ps->s[ps->i] != ']') parse_class_item(ps, c);
    if (!peek(ps, ']')) parse_fail(ps, "unterminated class");
    ps->i++;
    return index;
}

static uint16_t class_node(re_parser *ps, uint16_t class_index) {
    uint16_t k = new_node(ps, RE_CLASS);
    if (k != RE_NONE) ps->p->nodes[k].arg = class_index;
    return k;
}

static uint16_t parse_group(re_parser *ps) {
    uint8_t kind = RE_GROUP;
    if (peek(ps, '?')) {
        char c = ps->i + 1 < ps->n ? ps->s[ps->i + 1] : 0;
        kind = c == ':' ? RE_GROUP : c == '=' ? RE_AHEAD : c == '!' ? RE_NOT_AHEAD : 0xFF;
        if (kind == 0xFF) {
            parse_fail(ps, "unsupported group");
            return RE_NONE;
        }
        ps->i += 2;
    }
    uint16_t k = new_node(ps, kind);
    if (k == RE_NONE) return RE_NONE;
    parse_alternatives(ps, k);
    if (!peek(ps, ')')) parse_fail(ps, "unbalanced parenthesis");
    ps->i++;
    return k;
}

static uint16_t parse_atom(re_parser *ps) {
    char c = ps->s[ps->i++];
    uint16_t index = 0;
    re_class *cls;
    uint32_t lit;
    switch (c) {
    case '(': return parse_group(ps);
    case '[': return class_node(ps, parse_class(ps));
    case '$': return new_node(ps, RE_END);
    case '\\':
        if (!(cls = new_class(ps, &index))) return RE_NONE;
        if (parse_escape(ps, cls, 0, &lit)) class_add_range(ps, cls, lit, lit);
        return class_node(ps, index);
    case '*': case '+': case '?': case '{': case '^': case '.':
        parse_fail(ps, "unsupported or misplaced operator");
        return RE_NONE;
    default:
        ps->i--;
        lit = parse_utf8_char(ps);
        if (!(cls = new_class(ps, &index))) return RE_NONE;
        class_add_range(ps, cls, lit, lit);
        return class_node(ps, index);
    }
}

static uint32_t parse_number(re_parser *ps) {
    uint32_t v = 0;
    if (ps->i >= ps->n || ps->s[ps->i] < '0' || ps->s[ps->i] > '9') parse_fail(ps, "bad repetition count");
    while (ps->i < ps->n && ps->s[ps->i] >= '0' && ps->s[ps->i] <= '9' && v < 10000)
        v = v * 10 + (uint32_t)(ps->s[ps->i++] - '0');
    return v;
}

static void parse_quantifier(re_parser *ps, re_node *nd) {
    if (ps->i >= ps->n) return;
    char c = ps->s[ps->i];
    if (c != '?' && c != '*' && c != '+' && c != '{') return;
    if (nd->kind == RE_END || nd->kind == RE_AHEAD || nd->kind == RE_NOT_AHEAD) {
        parse_fail(ps, "quantifier on an assertion");
        return;
    }
    ps->i++;
    if (c == '?') nd->min = 0, nd->max = 1;
    else if (c == '*') nd->min = 0, nd->max = RE_INF;
    else if (c == '+') nd->min = 1, nd->max = RE_INF;
    else {
        nd->min = nd->max = parse_number(ps);
        if (peek(ps, ',')) {
            ps->i++;
            nd->max = peek(ps, '}') ? RE_INF : parse_number(ps);
        }
        if (!peek(ps, '}') || nd->max < nd->min) parse_fail(ps, "bad repetition");
        ps->i++;
    }
    if (peek(ps, '?') || peek(ps, '+')) parse_fail(ps, "lazy and possessive quantifiers are unsupported");
}

/* Atoms up to '|' or ')', linked through next; returns the first (RE_NONE when empty). */
static uint16_t parse_sequence(re_parser *ps) {
    uint16_t head = RE_NONE, tail = RE_NONE;
    while (!ps->err && ps->i < ps->n && ps->s[ps->i] != '|' && ps->s[ps->i] != ')') {
        uint16_t k = parse_atom(ps);
        if (ps->err) break;
        parse_quantifier(ps, &ps->p->nodes[k]);
        if (tail == RE_NONE) head = k;
        else ps->p->nodes[tail].next = k;
        tail = k;
    }
    return head;
}

/* Alternatives of a group are stored contiguously once all are parsed, since nested groups
 * take alts slots of their own while we go. */
static uint16_t parse_alternatives(re_parser *ps, uint16_t group) {
    uint16_t heads[RE_MAX_GROUP_ALTS];
    uint16_t n = 0;
    for (;;) {
        if (n == RE_MAX_GROUP_ALTS) {
            parse_fail(ps, "too many alternatives in a group");
            return group;
        }
        heads[n++] = parse_sequence(ps);
        if (ps->err || !peek(ps, '|')) break;
        ps->i++;
    }
    re_prog *p = ps->p;
    if (p->n_alts + n > RE_MAX_ALTS) {
        parse_fail(ps, "too many alternatives");
        return group;
    }
    p->nodes[group].arg = p->n_alts;
    p->nodes[group].n_alts = n;
    memcpy(p->alts + p->n_alts, heads, n * sizeof *heads);
    p->n_alts += n;
    return group;
}

static long seq_width(const re_prog *p, uint16_t i);

/* Code points one repetition of a node consumes, or -1 when that varies. */
static long once_width(const re_prog *p, const re_node *nd) {
    if (nd->kind == RE_CLASS) return 1;
    if (nd->kind != RE_GROUP) return 0;
    long w = -1;
    for (uint16_t a = 0; a < nd->n_alts; a++) {
        long wa = seq_width(p, p->alts[nd->arg + a]);
        if (wa < 0 || (a > 0 && wa != w)) return -1;
        w = wa;
    }
    return w;
}

static long seq_width(const re_prog *p, uint16_t i) {
    long total = 0;
    for (; i != RE_NONE; i = p->nodes[i].next) {
        const re_node *nd = &p->nodes[i];
        long w = once_width(p, nd);
        if (w < 0 || (w > 0 && nd->min != nd->max)) return -1;
        total += w * (long)nd->min;
    }
    return total;
}

llmm_status llmm__re_compile(re_prog *p, const char *pattern, llmm_diag *d) {
    memset(p, 0, sizeof *p);
    re_parser ps = {.s = pattern, .n = strlen(pattern), .p = p};
    p->root = new_node(&ps, RE_GROUP);
    parse_alternatives(&ps, p->root);
    if (!ps.err && ps.i < ps.n) parse_fail(&ps, "unbalanced parenthesis");
    if (ps.err)
        return llmm__diag_fail(d, LLMM_ERR_INTERNAL, "pre-tokenizer regex '%.80s': %s at offset %zu", pattern, ps.err, ps.i);
    for (uint16_t k = 0; k < p->n_nodes; k++) p->nodes[k].width1 = once_width(p, &p->nodes[k]) == 1;
    return LLMM_OK;
}

/* ---- matching ---- */

/* What follows the end of a group's alternative: the group's next iteration or its sequence. */
typedef struct re_cont {
    uint16_t group;
    uint32_t count;    /* iterations done once this alternative ends */
    size_t iter_start; /* where this iteration began, to stop empty iterations */
    const struct re_cont *up;
} re_cont;

static size_t match_seq(const re_prog *p, const re_input *in, uint16_t i, size_t pos, const re_cont *k,
                        unsigned depth);

static int class_has(const re_prog *p, const re_class *c, uint32_t cp, uint16_t props) {
    int in = (props & c->props) != 0;
    if (!in && cp < 128) in = (c->ascii[cp >> 5] >> (cp & 31)) & 1u;
    for (uint16_t r = c->first_range; !in && r < c->first_range + c->n_ranges; r++)
        in = cp >= p->ranges[r][0] && cp <= p->ranges[r][1];
    return in != c->negated;
}

/* End of the first alternative of a group or lookahead matching at pos, on its own. */
static size_t match_alts(const re_prog *p, const re_input *in, const re_node *nd, size_t pos, unsigned depth) {
    for (uint16_t a = 0; a < nd->n_alts; a++) {
        size_t end = match_seq(p, in, p->alts[nd->arg + a], pos, NULL, depth + 1);
        if (end != RE_NO_MATCH) return end;
    }
    return RE_NO_MATCH;
}

static int matches_one(const re_prog *p, const re_input *in, const re_node *nd, size_t pos, unsigned depth) {
    if (pos >= in->end) return 0;
    if (nd->kind == RE_CLASS) return class_has(p, &p->classes[nd->arg], in->cp[pos], in->props[pos]);
    return match_alts(p, in, nd, pos, depth) != RE_NO_MATCH;
}

/* A width-1 node: take as many as allowed, then give back one at a time (greedy). */
static size_t match_counted(const re_prog *p, const re_input *in, const re_node *nd, size_t pos, const re_cont *k,
                            unsigned depth) {
    size_t count = 0;
    while ((nd->max == RE_INF || count < nd->max) && matches_one(p, in, nd, pos + count, depth)) count++;
    for (size_t c = count + 1; c-- > nd->min;) {
        size_t end = match_seq(p, in, nd->next, pos + c, k, depth + 1);
        if (end != RE_NO_MATCH) return end;
    }
    return RE_NO_MATCH;
}

/* A group of varying width, `done` iterations in: try one more (greedy), else move on. */
static size_t match_group(const re_prog *p, const re_input *in, uint16_t g, uint32_t done, size_t pos,
                          const re_cont *k, unsigned depth) {
    const re_node *nd = &p->nodes[g];
    if (depth > RE_MAX_DEPTH) return RE_NO_MATCH;
    if (nd->max == RE_INF || done < nd->max) {
        re_cont next = {g, done + 1, pos, k};
        for (uint16_t a = 0; a < nd->n_alts; a++) {
            size_t end = match_seq(p, in, p->alts[nd->arg + a], pos, &next, depth + 1);
            if (end != RE_NO_MATCH) return end;
        }
    }
    return done >= nd->min ? match_seq(p, in, nd->next, pos, k, depth + 1) : RE_NO_MATCH;
}

static size_t match_seq(const re_prog *p, const re_input *in, uint16_t i, size_t pos, const re_cont *k,
                        unsigned depth) {
    if (depth > RE_MAX_DEPTH) return RE_NO_MATCH;
    if (i == RE_NONE) {
        if (!k) return pos;
        /* an empty iteration past the minimum would loop forever: ECMAScript rejects it */
        if (pos == k->iter_start && k->count > p->nodes[k->group].min) return RE_NO_MATCH;
        return match_group(p, in, k->group, k->count, pos, k->up, depth + 1);
    }
    const re_node *nd = &p->nodes[i];
    switch (nd->kind) {
    case RE_END: return pos == in->end ? match_seq(p, in, nd->next, pos, k, depth + 1) : RE_NO_MATCH;
    case RE_AHEAD:
    case RE_NOT_AHEAD: {
        int found = match_alts(p, in, nd, pos, depth) != RE_NO_MATCH;
        if (found != (nd->kind == RE_AHEAD)) return RE_NO_MATCH;
        return match_seq(p, in, nd->next, pos, k, depth + 1);
    }
    default:
        if (nd->width1) return match_counted(p, in, nd, pos, k, depth);
        return match_group(p, in, i, 0, pos, k, depth);
    }
}

/* Where an alternative that failed at start s cannot match either. When it begins with an
 * unbounded width-1 node that matched s..e, a later start in (s, e] gives that node a suffix of
 * the same run, and the rest of the alternative (which sees positions, never the start) only
 * the positions already tried and failed. Skipping them keeps a search linear where retrying
 * would be quadratic: "\s+$" over a long run of spaces not at the end of its piece. */
static size_t failed_through(const re_prog *p, const re_input *in, uint16_t first, size_t s) {
    if (first == RE_NONE) return s;
    const re_node *nd = &p->nodes[first];
    if (!nd->width1 || nd->max != RE_INF) return s;
    size_t e = s;
    while (matches_one(p, in, nd, e, 0)) e++;
    return e;
}

int llmm__re_search(const re_prog *p, const re_input *in, size_t from, size_t *match_start, size_t *match_end) {
    const re_node *root = &p->nodes[p->root];
    size_t dead_until[RE_MAX_GROUP_ALTS] = {0}; /* alternative a cannot start before dead_until[a] */
    for (size_t s = from; s < in->end; s++) {
        for (uint16_t a = 0; a < root->n_alts; a++) {
            if (s < dead_until[a]) continue;
            uint16_t first = p->alts[root->arg + a];
            size_t end = match_seq(p, in, first, s, NULL, 0);
            if (end != RE_NO_MATCH && end > s) {
                *match_start = s;
                *match_end = end;
                return 1;
            }
            if (end == RE_NO_MATCH) dead_until[a] = failed_through(p, in, first, s) + 1;
        }
    }
    return 0;
}
