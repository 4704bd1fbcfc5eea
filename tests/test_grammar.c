/* Grammars: the GBNF parser (every construct, malformed grammars with their exact error
 * positions) and the matcher, checked against a backtracking recogniser written here over the
 * test's own description of each grammar, on generated sentences and mutations of them; and
 * the token mask against checking every token of the Qwen2 vocabulary one by one. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llmmini.h"
#include "grammar/grammar_match.h"
#include "grammar/grammar_parse.h"
#include "support/fixtures.h"
#include "support/rng.h"

/* ---------------------------------------------------------------- helpers */

static llmm_grammar *compile(const char *gbnf) {
    llmm_grammar *g = NULL;
    char err[512];
    llmm_status st = llmm_grammar_create(NULL, gbnf, strlen(gbnf), NULL, &g, err, sizeof err);
    if (st) fail_msg("grammar failed to compile: %s\n%s", err, gbnf);
    return g;
}

/* 1 when text is a complete sentence of g. */
static int accepts(const llmm_grammar *g, const char *text, size_t len) {
    llmm_grammar_state *s = NULL;
    assert_int_equal(llmm_grammar_state_create(g, &s), LLMM_OK);
    int can_end = 0;
    llmm_status st = llmm_grammar_state_accept_bytes(s, text, len);
    if (st == LLMM_OK) assert_int_equal(llmm_grammar_state_can_end(s, &can_end, NULL), LLMM_OK);
    else assert_int_equal(st, LLMM_ERR_INVALID_ARG);
    llmm_grammar_state_free(s);
    return st == LLMM_OK && can_end;
}

static void expect_matches(const char *gbnf, const char *const *yes, const char *const *no) {
    llmm_grammar *g = compile(gbnf);
    for (; *yes; yes++)
        if (!accepts(g, *yes, strlen(*yes))) fail_msg("'%s' should match\n%s", *yes, gbnf);
    for (; *no; no++)
        if (accepts(g, *no, strlen(*no))) fail_msg("'%s' should not match\n%s", *no, gbnf);
    llmm_grammar_free(g);
}

#define LIST(...) ((const char *const[]){__VA_ARGS__, NULL})
#define NONE ((const char *const[]){NULL})

/* ---------------------------------------------------------------- constructs */

static void test_literals_and_escapes(void **state) {
    (void)state;
    expect_matches("root ::= \"abc\"", LIST("abc"), LIST("", "ab", "abcd", "abd"));
    expect_matches("root ::= \"\\n\\t\\r\\\\\\\"\\x41\\u00e9\\U0001F600\\[\\]\"", LIST("\n\t\r\\\"A\xc3\xa9\xf0\x9f\x98\x80[]"),
                   LIST("\n\t\r\\\"A"));
    expect_matches("root ::= \"h\xc3\xa9\xe2\x82\xac\"", LIST("h\xc3\xa9\xe2\x82\xac"), LIST("he\xe2\x82\xac", "h"));
    expect_matches("root ::= \"\"", LIST(""), LIST("a"));
}

static void test_alternatives_sequences_groups(void **state) {
    (void)state;
    expect_matches("root ::= \"a\" | \"bc\" | \"\"", LIST("a", "bc", ""), LIST("b", "abc", "c"));
    expect_matches("root ::= (\"a\" | \"b\") \"c\" (\"d\" (\"e\" | \"f\"))", LIST("acde", "bcdf"), LIST("acd", "cde", "abcde"));
    expect_matches("root ::= x y x\nx ::= \"1\"\ny ::= x | \"2\"", LIST("111", "121"), LIST("11", "131"));
}

static void test_character_classes(void **state) {
    (void)state;
    expect_matches("root ::= [a-cx]", LIST("a", "b", "c", "x"), LIST("d", "w", "", "ab"));
    expect_matches("root ::= [^a-c\\n]", LIST("d", "\xc3\xa9", "\xf0\x9f\x98\x80", "A"), LIST("a", "c", "\n", ""));
    expect_matches("root ::= [\\]\\-\\^\\x30-\\x32]", LIST("]", "-", "^", "0", "2"), LIST("3", "\\", "["));
    expect_matches("root ::= [-a]", LIST("-", "a"), LIST("b"));
    expect_matches("root ::= [\xce\xb1-\xcf\x89]+", LIST("\xce\xb1\xce\xb2", "\xcf\x89"), LIST("a", "\xce\x91"));
    expect_matches("root ::= [\\u4e00-\\u9fff]", LIST("\xe4\xb8\x80", "\xe9\xbf\xbf"), LIST("\xe3\x80\x80"));
    expect_matches("root ::= . .", LIST("ab", "\xc3\xa9\n", "\xf0\x9f\x98\x80x"), LIST("a", "abc"));
    /* overlong forms, surrogates and code points beyond U+10FFFF are no characters */
    expect_matches("root ::= .", LIST("\xed\x9f\xbf", "\xf4\x8f\xbf\xbf"),
                   LIST("\xc1\xbb", "\xe0\x81\xbb", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xf0\x80\x81\xbb", "\xff"));
    expect_matches("root ::= \"{\"", LIST("{"), LIST("\xc1\xbb"));
}

static void test_repetitions(void **state) {
    (void)state;
    expect_matches("root ::= \"a\"*", LIST("", "a", "aaaa"), LIST("b", "aab"));
    expect_matches("root ::= \"ab\"+", LIST("ab", "abab"), LIST("", "aba", "a"));
    expect_matches("root ::= \"a\"? \"b\"", LIST("ab", "b"), LIST("aab", "a"));
    expect_matches("root ::= [0-9]{3}", LIST("123"), LIST("12", "1234"));
    expect_matches("root ::= [0-9]{2,}", LIST("12", "12345"), LIST("1", ""));
    expect_matches("root ::= (\"x\" | \"yz\"){1,3}", LIST("x", "yzx", "xyzx"), LIST("", "xxxx", "y"));
    expect_matches("root ::= \"a\"{0,2} \"b\"{ 0 }", LIST("", "a", "aa"), LIST("aaa", "b"));
    expect_matches("root ::= (\"a\"*)? \"b\"", LIST("b", "aab"), LIST("a"));
}

static void test_layout_comments_and_names(void **state) {
    (void)state;
    const char *g = "# a comment line\n"
                    "root ::=  item (\n"
                    "   \",\" item   # inside a group, lines continue\n"
                    " )*\n"
                    "\n"
                    "item ::= \"x\"\n"
                    "       | my-rule_2   # an alternative on its own line\n"
                    "my-rule_2 ::=\n"
                    "  \"y\"\n";
    expect_matches(g, LIST("x", "x,y,x"), LIST("", "x,", "xy"));
    llmm_grammar *gr = NULL;
    assert_int_equal(llmm_grammar_create(NULL, "start ::= \"s\"\nroot ::= \"r\"", 26, "start", &gr, NULL, 0), LLMM_OK);
    assert_int_equal(accepts(gr, "s", 1), 1);
    assert_int_equal(accepts(gr, "r", 1), 0);
    llmm_grammar_free(gr);
}

static void test_split_utf8_and_state_calls(void **state) {
    (void)state;
    llmm_grammar *g = compile("root ::= \"\xe2\x82\xac\" [\xc3\xa0-\xc3\xbf]");
    llmm_grammar_state *s = NULL, *c = NULL;
    assert_int_equal(llmm_grammar_state_create(g, &s), LLMM_OK);
    assert_int_equal(llmm_grammar_state_accept_bytes(s, "\xe2", 1), LLMM_OK);
    int end = 1, must = 1;
    assert_int_equal(llmm_grammar_state_can_end(s, &end, &must), LLMM_OK);
    assert_int_equal(end, 0);
    assert_int_equal(llmm_grammar_state_accept_bytes(s, "\x83", 1), LLMM_ERR_INVALID_ARG); /* U+20C0.. is not U+20AC */
    assert_string_not_equal(llmm_grammar_state_last_error(s), "");
    assert_int_equal(llmm_grammar_state_accept_bytes(s, "\x82\xac\xc3", 3), LLMM_OK);
    assert_int_equal(llmm_grammar_state_clone(s, &c), LLMM_OK);
    /* 0xC3 0x80 is U+00C0, below the class: refused once complete */
    assert_int_equal(llmm_grammar_state_accept_bytes(c, "\x80", 1), LLMM_ERR_INVALID_ARG);
    assert_int_equal(llmm_grammar_state_accept_bytes(c, "\xa9", 1), LLMM_OK);
    assert_int_equal(llmm_grammar_state_can_end(c, &end, &must), LLMM_OK);
    assert_int_equal(end, 1);
    assert_int_equal(must, 1);
    /* the original is where it was: one byte into the last character */
    assert_int_equal(llmm_grammar_state_can_end(s, &end, NULL), LLMM_OK);
    assert_int_equal(end, 0);
    assert_int_equal(llmm_grammar_state_reset(c), LLMM_OK);
    assert_int_equal(llmm_grammar_state_accept_bytes(c, "\xe2\x82\xac\xc3\xbf", 5), LLMM_OK);
    /* without a vocabulary, token calls are refused */
    int allowed;
    assert_int_equal(llmm_grammar_state_accept_token(c, 0), LLMM_ERR_INVALID_ARG);
    assert_int_equal(llmm_grammar_state_allows(c, 0, &allowed), LLMM_ERR_INVALID_ARG);
    float logits[4] = {0};
    assert_int_equal(llmm_grammar_state_mask(c, logits, 4), LLMM_ERR_INVALID_ARG);
    assert_int_equal(llmm_grammar_state_create(NULL, &c), LLMM_ERR_INVALID_ARG);
    assert_int_equal(llmm_grammar_state_accept_bytes(NULL, "a", 1), LLMM_ERR_INVALID_ARG);
    llmm_grammar_state_free(c);
    llmm_grammar_state_free(s);
    llmm_grammar_free(g);
    llmm_grammar_free(NULL);
    llmm_grammar_state_free(NULL);
}

/* ---------------------------------------------------------------- malformed grammars */

typedef struct bad_grammar {
    const char *text;
    const char *message; /* the start of the error message */
} bad_grammar;

static void test_malformed_grammars(void **state) {
    (void)state;
    char deep[400];
    snprintf(deep, sizeof deep, "root ::= %0*d", 300, 0);
    memset(deep + 9, '(', 300);
    static const bad_grammar cases[] = {
        {"root ::= \"abc", "line 1, column 10: unterminated string literal"},
        {"root ::= [abc", "line 1, column 10: unterminated character class"},
        {"root \"a\"", "line 1, column 6: expected '::=' after the rule name, found '\"'"},
        {"root ::= foo", "line 1, column 10: undefined rule 'foo'"},
        {"foo ::= \"a\"", "the grammar has no rule named 'root'"},
        {"root ::= root \"a\"", "line 1, column 1: left recursion (root -> root)"},
        {"root ::= a\na ::= b \"x\"\nb ::= \"\"? a", "line 2, column 1: left recursion (a -> b -> a)"},
        {"root ::= *\"a\"", "line 1, column 10: '*' must follow an item to repeat"},
        {"root ::= \"a\"{3,2}", "line 1, column 16: repetition maximum 2 is below its minimum 3"},
        {"root ::= \"a\"{2", "line 1, column 15: expected '}' to close the repetition, found the end of the grammar"},
        {"root ::= \"a\"{x}", "line 1, column 14: expected a number, found 'x'"},
        {"root ::= \"\\q\"", "line 1, column 11: unknown escape '\\' followed by 'q'"},
        {"root ::= \"\\x4\"", "line 1, column 14: expected 2 hex digits after '\\x'"},
        {"root ::= (\"a\"", "line 1, column 14: expected ')' to close the group, found the end of the grammar"},
        {"root ::= \"a\")", "line 1, column 13: expected an item, '|' or the end of the line, found ')'"},
        {"root ::= [z-a]", "line 1, column 11: character range ends before it starts"},
        {"root ::= \"a\"\nroot ::= \"b\"", "line 2, column 1: rule 'root' is defined twice"},
        {" ::= \"a\"", "line 1, column 2: expected a rule name, found ':'"},
        {"root ::= \"\\U00110000\"", "line 1, column 11: code point U+110000 is beyond U+10FFFF"},
        {"root ::= \"a\"{10001}", "line 1, column 14: repetition count above 10000"},
        {"root ::= x*\nx ::= \"a\"?", "line 1, column 11: left recursion (root-1 -> root-1)"},
        {"root ::= \"a\" @", "line 1, column 14: expected an item, '|' or the end of the line, found '@'"},
        {"root ::= \"\xff\"", "line 1, column 11: invalid UTF-8"},
        {"root ::= \"a\"\n  b\nb ::= \"x\"", "line 2, column 4: expected '::=' after the rule name, found the end of the line"},
        {"root ::= \"\xc3\xa9\xc3\xa9\" [", "line 1, column 15: unterminated character class"},
        {"root ::= \"a\"\n\nx ::= y\n", "line 3, column 7: undefined rule 'y'"},
        {"", "the grammar has no rule named 'root'"},
    };
    size_t n = sizeof cases / sizeof *cases;
    for (size_t i = 0; i <= n; i++) {
        const char *text = i < n ? cases[i].text : deep;
        const char *want = i < n ? cases[i].message : "line 1, column 266: groups nested deeper than 256";
        llmm_grammar *g = (llmm_grammar *)1;
        char err[512] = "untouched";
        llmm_status st = llmm_grammar_create(NULL, text, strlen(text), NULL, &g, err, sizeof err);
        if (st != LLMM_ERR_INVALID_ARG || g != NULL || strncmp(err, want, strlen(want)))
            fail_msg("case %zu: status %d, error '%s', expected '%s'", i, st, err, want);
    }
    llmm_grammar *g = NULL;
    assert_int_equal(llmm_grammar_create(NULL, NULL, 1, NULL, &g, NULL, 0), LLMM_ERR_INVALID_ARG);
    assert_int_equal(llmm_grammar_create(NULL, "root ::= \"a\"", 12, NULL, NULL, NULL, 0), LLMM_ERR_INVALID_ARG);
    assert_int_equal(llmm_grammar_create(NULL, "root ::= \"a\"", 12, "nope", &g, NULL, 0), LLMM_ERR_INVALID_ARG);
}

/* ---------------------------------------------------------------- reference recogniser */

/* The test's own description of a grammar, from which it prints GBNF, generates sentences and
 * recognises strings by backtracking, independently of the library's parser and matcher. */
typedef enum node_kind { N_LIT, N_CLASS, N_ANY, N_SEQ, N_ALT, N_REP, N_REF } node_kind;

typedef struct node {
    node_kind kind;
    const char *lit;              /* N_LIT: UTF-8 */
    uint32_t ranges[8][2];        /* N_CLASS */
    int n_ranges, negated;
    const struct node *kids[6];   /* N_SEQ, N_ALT; N_REP: kids[0] */
    int n_kids;
    int min, max;                 /* N_REP; max -1 = unbounded */
    int rule;                     /* N_REF */
} node;

typedef struct ref_grammar {
    const node *rules[6];
    int n_rules;
} ref_grammar;

/* nodes live in a pool the test frees at the end */
static node pool[256];
static int pool_used;

static node *mk(node_kind k) {
    assert_true(pool_used < 256);
    node *n = &pool[pool_used++];
    memset(n, 0, sizeof *n);
    n->kind = k;
    return n;
}
static const node *lit(const char *s) {
    node *n = mk(N_LIT);
    n->lit = s;
    return n;
}
static const node *cls(int negated, int n_ranges, const uint32_t (*r)[2]) {
    node *n = mk(N_CLASS);
    n->negated = negated;
    n->n_ranges = n_ranges;
    memcpy(n->ranges, r, (size_t)n_ranges * sizeof *r);
    return n;
}
static const node *any(void) { return mk(N_ANY); }
static const node *group(node_kind k, int n_kids, ...) {
    node *n = mk(k);
    va_list ap;
    va_start(ap, n_kids);
    for (int i = 0; i < n_kids; i++) n->kids[i] = va_arg(ap, const node *);
    va_end(ap);
    n->n_kids = n_kids;
    return n;
}
static const node *rep(const node *kid, int min, int max) {
    node *n = mk(N_REP);
    n->kids[0] = kid;
    n->min = min;
    n->max = max;
    return n;
}
static const node *ref(int rule) {
    node *n = mk(N_REF);
    n->rule = rule;
    return n;
}

static size_t ref_utf8_encode(uint32_t cp, char *out) {
    if (cp < 0x80) return out[0] = (char)cp, 1;
    if (cp < 0x800) return out[0] = (char)(0xC0 | cp >> 6), out[1] = (char)(0x80 | (cp & 63)), 2;
    if (cp < 0x10000)
        return out[0] = (char)(0xE0 | cp >> 12), out[1] = (char)(0x80 | ((cp >> 6) & 63)), out[2] = (char)(0x80 | (cp & 63)), 3;
    out[0] = (char)(0xF0 | cp >> 18), out[1] = (char)(0x80 | ((cp >> 12) & 63));
    out[2] = (char)(0x80 | ((cp >> 6) & 63)), out[3] = (char)(0x80 | (cp & 63));
    return 4;
}

/* Decode one UTF-8 character (strictly); 0 when malformed or at the end. */
static size_t ref_utf8_decode(const char *s, size_t len, uint32_t *cp) {
    if (len == 0) return 0;
    unsigned char c = (unsigned char)s[0];
    size_t n = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
    if (n == 0 || n > len) return 0;
    uint32_t v = n == 1 ? c : c & (0x7F >> n);
    for (size_t i = 1; i < n; i++) {
        if (((unsigned char)s[i] & 0xC0) != 0x80) return 0;
        v = (v << 6) | ((unsigned char)s[i] & 63);
    }
    static const uint32_t smallest[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (v < smallest[n] || v > 0x10FFFF) return 0;
    *cp = v;
    return n;
}

static int class_has(const node *n, uint32_t cp) {
    int in = 0;
    for (int i = 0; i < n->n_ranges; i++) in |= cp >= n->ranges[i][0] && cp <= n->ranges[i][1];
    return in ^ n->negated;
}

/* GBNF text of a node (every class character as \U escape, so the printer needs no quoting rules). */
static void print_node(const node *n, char *out, size_t cap) {
    size_t len = strlen(out);
    char *p = out + len;
    size_t left = cap - len;
    switch (n->kind) {
    case N_LIT:
        snprintf(p, left, "\"");
        for (const char *c = n->lit; *c; c++)
            snprintf(out + strlen(out), cap - strlen(out), *c == '"' || *c == '\\' ? "\\%c" : "%c", *c);
        snprintf(out + strlen(out), cap - strlen(out), "\"");
        break;
    case N_CLASS:
        snprintf(p, left, "[%s", n->negated ? "^" : "");
        for (int i = 0; i < n->n_ranges; i++)
            snprintf(out + strlen(out), cap - strlen(out), "\\U%08X-\\U%08X", n->ranges[i][0], n->ranges[i][1]);
        snprintf(out + strlen(out), cap - strlen(out), "]");
        break;
    case N_ANY:
        snprintf(p, left, ".");
        break;
    case N_SEQ:
    case N_ALT:
        snprintf(p, left, "(");
        for (int i = 0; i < n->n_kids; i++) {
            if (i) snprintf(out + strlen(out), cap - strlen(out), n->kind == N_ALT ? " | " : " ");
            print_node(n->kids[i], out, cap);
        }
        snprintf(out + strlen(out), cap - strlen(out), ")");
        break;
    case N_REP:
        print_node(n->kids[0], out, cap);
        if (n->min == 0 && n->max == -1) snprintf(out + strlen(out), cap - strlen(out), "*");
        else if (n->min == 1 && n->max == -1) snprintf(out + strlen(out), cap - strlen(out), "+");
        else if (n->min == 0 && n->max == 1) snprintf(out + strlen(out), cap - strlen(out), "?");
        else if (n->max == -1) snprintf(out + strlen(out), cap - strlen(out), "{%d,}", n->min);
        else snprintf(out + strlen(out), cap - strlen(out), "{%d,%d}", n->min, n->max);
        break;
    case N_REF:
        if (n->rule) snprintf(p, left, "r%d", n->rule);
        else snprintf(p, left, "root");
        break;
    }
}

static void print_grammar(const ref_grammar *g, char *out, size_t cap) {
    out[0] = '\0';
    for (int r = 0; r < g->n_rules; r++) {
        snprintf(out + strlen(out), cap - strlen(out), r == 0 ? "root ::= " : "r%d ::= ", r);
        print_node(g->rules[r], out, cap);
        snprintf(out + strlen(out), cap - strlen(out), "\n");
    }
}

/* Backtracking with explicit continuations: match node at pos, then the rest (k) to the end. */
typedef struct cont {
    const node *n; /* N_SEQ: kids from index on; N_REP: more repetitions, count done so far */
    int index;
    const struct cont *next;
} cont;

typedef struct recogniser {
    const ref_grammar *g;
    const char *text;
    size_t len;
    long steps; /* bounded, so that a wrong grammar cannot hang the test */
} recogniser;

static int match(recogniser *r, const node *n, size_t pos, const cont *k);

static int run(recogniser *r, const cont *k, size_t pos) {
    if (!k) return pos == r->len;
    if (k->n->kind == N_SEQ) {
        if (k->index == k->n->n_kids) return run(r, k->next, pos);
        cont rest = {k->n, k->index + 1, k->next};
        return match(r, k->n->kids[k->index], pos, &rest);
    }
    /* N_REP after k->index repetitions */
    const node *n = k->n;
    if (k->index >= n->min && run(r, k->next, pos)) return 1;
    if (n->max != -1 && k->index >= n->max) return 0;
    cont more = {n, k->index + 1, k->next};
    return match(r, n->kids[0], pos, &more);
}

static int match(recogniser *r, const node *n, size_t pos, const cont *k) {
    assert_true(++r->steps < 50000000);
    uint32_t cp;
    size_t used;
    switch (n->kind) {
    case N_LIT: {
        size_t l = strlen(n->lit);
        return pos + l <= r->len && !memcmp(r->text + pos, n->lit, l) && run(r, k, pos + l);
    }
    case N_CLASS:
    case N_ANY:
        used = ref_utf8_decode(r->text + pos, r->len - pos, &cp);
        return used && (n->kind == N_ANY || class_has(n, cp)) && run(r, k, pos + used);
    case N_SEQ: {
        cont c = {n, 0, k};
        return run(r, &c, pos);
    }
    case N_ALT:
        for (int i = 0; i < n->n_kids; i++)
            if (match(r, n->kids[i], pos, k)) return 1;
        return 0;
    case N_REP: {
        cont c = {n, 0, k};
        return run(r, &c, pos);
    }
    case N_REF:
        return match(r, r->g->rules[n->rule], pos, k);
    }
    return 0;
}

static int recognises(const ref_grammar *g, const char *text, size_t len) {
    recogniser r = {g, text, len, 0};
    return match(&r, g->rules[0], 0, NULL);
}

/* ---------------------------------------------------------------- generator */

/* The generator's and the mutations' stream, seeded by each test that draws from it. */
static test_rng rng;

/* characters the generator draws from when a class is negated, and mutations insert */
static const uint32_t palette[] = {'a', 'b', 'c', 'x', 'y', 'z', '0', '5', '9', '"', '\\', ',', ':', '{', '}', '[', ']',
                                   '+', '-', '*', '(', ')', ' ', 0xE9, 0x3B1, 0x3C9, 0x20AC, 0x1F600};
#define PALETTE_N (sizeof palette / sizeof *palette)

static void emit(char *out, size_t *len, size_t cap, const char *s, size_t n) {
    if (*len + n < cap) memcpy(out + *len, s, n), *len += n;
}

/* A random sentence; past depth 6 the first alternative and the fewest repetitions are taken,
 * which every test grammar makes terminate. */
static void generate(const ref_grammar *g, const node *n, int depth, char *out, size_t *len, size_t cap) {
    char buf[4];
    int deep = depth > 6;
    switch (n->kind) {
    case N_LIT:
        emit(out, len, cap, n->lit, strlen(n->lit));
        break;
    case N_CLASS:
    case N_ANY:
        for (;;) {
            uint32_t cp;
            if (n->kind == N_CLASS && !n->negated) {
                int i = (int)rng_below(&rng, (uint32_t)n->n_ranges);
                cp = n->ranges[i][0] + rng_below(&rng, n->ranges[i][1] - n->ranges[i][0] + 1);
            } else {
                cp = palette[rng_below(&rng, PALETTE_N)];
            }
            if (n->kind == N_ANY || class_has(n, cp)) {
                emit(out, len, cap, buf, ref_utf8_encode(cp, buf));
                break;
            }
        }
        break;
    case N_SEQ:
        for (int i = 0; i < n->n_kids; i++) generate(g, n->kids[i], depth + 1, out, len, cap);
        break;
    case N_ALT:
        generate(g, n->kids[deep ? 0 : rng_below(&rng, (uint32_t)n->n_kids)], depth + 1, out, len, cap);
        break;
    case N_REP: {
        int max = n->max == -1 ? n->min + 3 : n->max;
        int count = deep ? n->min : n->min + (int)rng_below(&rng, (uint32_t)(max - n->min + 1));
        for (int i = 0; i < count; i++) generate(g, n->kids[0], depth + 1, out, len, cap);
        break;
    }
    case N_REF:
        generate(g, g->rules[n->rule], depth + 1, out, len, cap);
        break;
    }
}

static size_t mutate(char *s, size_t len, size_t cap) {
    char buf[4];
    size_t at = len ? rng_below(&rng, (uint32_t)len + 1) : 0;
    switch (rng_below(&rng, 4)) {
    case 0: /* delete a byte */
        if (len && at < len) memmove(s + at, s + at + 1, len - at - 1), len--;
        break;
    case 1: { /* insert a character */
        size_t n = ref_utf8_encode(palette[rng_below(&rng, PALETTE_N)], buf);
        if (len + n < cap) memmove(s + at + n, s + at, len - at), memcpy(s + at, buf, n), len += n;
        break;
    }
    case 2: /* replace a byte with an ASCII one */
        if (at < len) s[at] = (char)palette[rng_below(&rng, 23)];
        break;
    default: /* cut the end */
        len = at;
        break;
    }
    return len;
}

/* ---------------------------------------------------------------- reference grammars */

static const uint32_t DIGITS[][2] = {{'0', '9'}};
static const uint32_t STRING_CHARS[][2] = {{'"', '"'}, {'\\', '\\'}, {0, 0x1F}};
static const uint32_t GREEK[][2] = {{0x3B1, 0x3C9}};
static const uint32_t NOT_ASCII_LOWER[][2] = {{'a', 'z'}, {0, 0x7F}};
static const uint32_t ABC[][2] = {{'a', 'c'}};

static void build_reference_grammars(ref_grammar *out, int *n) {
    pool_used = 0;
    /* arithmetic: expr, term, factor */
    const node *num = rep(cls(0, 1, DIGITS), 1, -1);
    out[0] = (ref_grammar){{
        group(N_SEQ, 2, ref(1), rep(group(N_SEQ, 2, group(N_ALT, 2, lit("+"), lit("-")), ref(1)), 0, -1)),
        group(N_SEQ, 2, ref(2), rep(group(N_SEQ, 2, group(N_ALT, 2, lit("*"), lit("/")), ref(2)), 0, -1)),
        group(N_ALT, 2, num, group(N_SEQ, 3, lit("("), ref(0), lit(")"))),
    }, 3};
    /* a small JSON: value, object, array, string */
    const node *str = group(N_SEQ, 3, lit("\""), rep(cls(1, 3, STRING_CHARS), 0, 4), lit("\""));
    out[1] = (ref_grammar){{
        group(N_ALT, 6, ref(3), ref(1), ref(2), lit("true"), lit("null"),
              group(N_SEQ, 2, rep(lit("-"), 0, 1), rep(cls(0, 1, DIGITS), 1, 3))),
        group(N_SEQ, 3, lit("{"),
              rep(group(N_SEQ, 4, ref(3), lit(":"), ref(0), rep(group(N_SEQ, 4, lit(","), ref(3), lit(":"), ref(0)), 0, -1)),
                  0, 1),
              lit("}")),
        group(N_SEQ, 3, lit("["), rep(group(N_SEQ, 2, ref(0), rep(group(N_SEQ, 2, lit(","), ref(0)), 0, -1)), 0, 1),
              lit("]")),
        str,
    }, 4};
    /* ambiguous alternatives and repetitions */
    out[2] = (ref_grammar){{
        group(N_ALT, 2, group(N_SEQ, 2, rep(group(N_ALT, 2, lit("a"), lit("ab")), 0, -1), rep(lit("b"), 0, 1)),
              group(N_SEQ, 2, rep(lit("a"), 2, 4), lit("c"))),
    }, 1};
    /* non-ASCII classes and literals */
    out[3] = (ref_grammar){{
        group(N_SEQ, 2, rep(cls(0, 1, GREEK), 1, -1),
              rep(group(N_ALT, 2, lit("\xc3\xa9"), cls(1, 2, NOT_ASCII_LOWER)), 1, 2)),
    }, 1};
    /* bounded repetitions, optional parts and '.' */
    out[4] = (ref_grammar){{
        group(N_SEQ, 3, rep(group(N_SEQ, 2, lit("x"), rep(lit("y"), 0, 1)), 0, 3), rep(cls(0, 1, ABC), 2, 2),
              rep(any(), 0, 1)),
    }, 1};
    *n = 5;
}

static void test_matcher_agrees_with_backtracking(void **state) {
    (void)state;
    rng_seed(&rng, 1);
    ref_grammar gs[8];
    int n_grammars;
    build_reference_grammars(gs, &n_grammars);
    long checked = 0, positives = 0, agreed_rejections = 0;
    for (int gi = 0; gi < n_grammars; gi++) {
        char text[4096];
        print_grammar(&gs[gi], text, sizeof text);
        llmm_grammar *g = compile(text);
        for (int i = 0; i < 400; i++) {
            char s[512];
            size_t len = 0;
            generate(&gs[gi], gs[gi].rules[0], 0, s, &len, sizeof s);
            if (!recognises(&gs[gi], s, len)) fail_msg("generator bug: '%.*s'", (int)len, s);
            if (!accepts(g, s, len)) fail_msg("grammar %d refuses its sentence '%.*s'\n%s", gi, (int)len, s, text);
            positives++;
            for (int m = 0; m < 4; m++) {
                len = mutate(s, len, sizeof s);
                int want = recognises(&gs[gi], s, len), got = accepts(g, s, len);
                if (want != got)
                    fail_msg("grammar %d: '%.*s' recogniser %d, matcher %d\n%s", gi, (int)len, s, want, got, text);
                agreed_rejections += !want;
                checked++;
            }
        }
        llmm_grammar_free(g);
    }
    /* the mutations must have produced both outcomes often, or the test proves little */
    assert_true(agreed_rejections > checked / 5);
    assert_true(agreed_rejections < checked - checked / 10);
    print_message("%ld sentences, %ld mutations (%ld rejected by both)\n", positives, checked, agreed_rejections);
}

/* ---------------------------------------------------------------- token masks */

/* An object with one string member: strings cross every kind of token boundary. */
static const char NAME_OBJECT_GBNF[] = "root ::= \"{\" ws \"\\\"name\\\"\" ws \":\" ws str ws \"}\"\n"
                                       "str ::= \"\\\"\" ([^\"\\\\] | \"\\\\\" [\"\\\\n])* \"\\\"\"\n"
                                       "ws ::= [ \\n]{0,2}\n";

/* The mask of every state along a text must equal checking each token's bytes on a copy of
 * the state; EOS only where the text may end. */
static void test_mask_equals_per_token_check(void **state) {
    (void)state;
    llmm_model *m = load_vocab("vocab/ggml-vocab-qwen2.gguf");
    llmm_model_info info = {.size = sizeof info};
    assert_int_equal(llmm_model_get_info(m, &info), LLMM_OK);
    size_t n_vocab = info.n_vocab;
    const char *gbnf = NAME_OBJECT_GBNF;
    const char *text = "{ \"name\":\"h\xc3\xa9llo \\\"\xe4\xb8\x96\" }";
    llmm_grammar *g = NULL;
    char err[256];
    assert_int_equal(llmm_grammar_create(m, gbnf, strlen(gbnf), NULL, &g, err, sizeof err), LLMM_OK);
    float *logits = malloc(n_vocab * sizeof *logits);
    char *piece = malloc(4096);
    assert_non_null(logits);
    /* prefixes of the text, among them ones ending inside a UTF-8 character (11, 19, 20) */
    static const size_t prefixes[] = {0, 1, 2, 7, 8, 9, 10, 11, 12, 13, 17, 18, 19, 20, 21, 22, 23, 24, 25};
    assert_int_equal(strlen(text), 25);
    size_t total_allowed = 0;
    for (size_t p = 0; p < sizeof prefixes / sizeof *prefixes; p++) {
        llmm_grammar_state *s = NULL;
        assert_int_equal(llmm_grammar_state_create(g, &s), LLMM_OK);
        assert_int_equal(llmm_grammar_state_accept_bytes(s, text, prefixes[p]), LLMM_OK);
        for (size_t i = 0; i < n_vocab; i++) logits[i] = 1.0f;
        assert_int_equal(llmm_grammar_state_mask(s, logits, n_vocab), LLMM_OK);
        int can_end = 0;
        llmm_grammar_state_can_end(s, &can_end, NULL);
        for (size_t id = 0; id < n_vocab; id++) {
            size_t n = 0;
            assert_int_equal(llmm_token_to_piece(m, (llmm_token)id, 0, piece, 4096, &n), LLMM_OK);
            int want;
            uint32_t attrs = 0;
            assert_int_equal(llmm_token_attrs(m, (llmm_token)id, &attrs), LLMM_OK);
            if (attrs & LLMM_TOKEN_ATTR_EOS) {
                want = can_end;
            } else if (n == 0) {
                want = 0;
            } else {
                llmm_grammar_state *c = NULL;
                assert_int_equal(llmm_grammar_state_clone(s, &c), LLMM_OK);
                want = llmm_grammar_state_accept_bytes(c, piece, n) == LLMM_OK;
                llmm_grammar_state_free(c);
            }
            int got = logits[id] == 1.0f, allowed = -1;
            assert_int_equal(llmm_grammar_state_allows(s, (llmm_token)id, &allowed), LLMM_OK);
            if (want != got || allowed != want)
                fail_msg("after %zu bytes, token %zu '%.*s': bytes %d, mask %d, allows %d", prefixes[p], id, (int)n,
                         piece, want, got, allowed);
            total_allowed += (size_t)want;
        }
        llmm_grammar_state_free(s);
    }
    assert_true(total_allowed > 1000);
    llmm_grammar_free(g);
    free(logits);
    free(piece);
    llmm_model_free(m);
}

/* The allowed-token pattern of a state, as the mask writes it: 1 allowed, -inf refused. */
static void mask_of(llmm_grammar_state *s, float *out, size_t n_vocab) {
    for (size_t i = 0; i < n_vocab; i++) out[i] = 1.0f;
    assert_int_equal(llmm_grammar_state_mask(s, out, n_vocab), LLMM_OK);
}

/* A random token the mask allows, or -1 when none is. */
static llmm_token pick_allowed(const float *mask, size_t n_vocab) {
    size_t n_allowed = 0;
    for (size_t i = 0; i < n_vocab; i++) n_allowed += mask[i] == 1.0f;
    if (!n_allowed) return -1;
    size_t k = rng_below(&rng, (uint32_t)n_allowed);
    for (size_t i = 0; i < n_vocab; i++)
        if (mask[i] == 1.0f && k-- == 0) return (llmm_token)i;
    return -1;
}

/* What a speculative round does with grammar states: a clone walks the draft's proposals, the
 * target keeps a prefix of them and then a token of its own on another clone. The state the
 * draft was cloned from must allow exactly what it allowed before; the target's state, after
 * the kept prefix, exactly what the draft's allowed at that point; and it must go on after the
 * draft's state is freed. */
static void test_draft_clones_keep_independent_states(void **state) {
    (void)state;
    rng_seed(&rng, 2);
    enum { K = 6 };
    llmm_model *m = load_vocab("vocab/ggml-vocab-qwen2.gguf");
    llmm_model_info info = {.size = sizeof info};
    assert_int_equal(llmm_model_get_info(m, &info), LLMM_OK);
    size_t n_vocab = info.n_vocab;
    const char *gbnf = NAME_OBJECT_GBNF;
    llmm_grammar *g = NULL;
    assert_int_equal(llmm_grammar_create(m, gbnf, strlen(gbnf), NULL, &g, NULL, 0), LLMM_OK);
    float *before = malloc(n_vocab * sizeof *before), *now = malloc(n_vocab * sizeof *now);
    float *draft_masks = malloc((K + 1) * n_vocab * sizeof *draft_masks);
    assert_non_null(before);
    assert_non_null(now);
    assert_non_null(draft_masks);
    llmm_grammar_state *root = NULL;
    assert_int_equal(llmm_grammar_state_create(g, &root), LLMM_OK);
    assert_int_equal(llmm_grammar_state_accept_bytes(root, "{ \"name\":\"", 10), LLMM_OK);
    mask_of(root, before, n_vocab);
    int rounds_with_rejection = 0;
    for (int trial = 0; trial < 24; trial++) {
        llmm_grammar_state *draft = NULL, *target = NULL;
        assert_int_equal(llmm_grammar_state_clone(root, &draft), LLMM_OK);
        llmm_token proposed[K];
        size_t n_proposed = 0;
        mask_of(draft, draft_masks, n_vocab);
        while (n_proposed < K) {
            llmm_token t = pick_allowed(draft_masks + n_proposed * n_vocab, n_vocab);
            if (t < 0) break;
            assert_int_equal(llmm_grammar_state_accept_token(draft, t), LLMM_OK);
            proposed[n_proposed++] = t;
            mask_of(draft, draft_masks + n_proposed * n_vocab, n_vocab);
        }
        assert_true(n_proposed > 0);
        mask_of(root, now, n_vocab);
        assert_memory_equal(now, before, n_vocab * sizeof *now);

        size_t kept = rng_below(&rng, (uint32_t)n_proposed + 1);
        assert_int_equal(llmm_grammar_state_clone(root, &target), LLMM_OK);
        for (size_t i = 0; i < kept; i++) assert_int_equal(llmm_grammar_state_accept_token(target, proposed[i]), LLMM_OK);
        mask_of(target, now, n_vocab);
        assert_memory_equal(now, draft_masks + kept * n_vocab, n_vocab * sizeof *now);
        llmm_grammar_state_free(draft);
        if (kept < n_proposed) {
            /* the target's own token where it rejected the proposal */
            llmm_token own = pick_allowed(now, n_vocab);
            for (int tries = 0; own == proposed[kept] && tries < 8; tries++) own = pick_allowed(now, n_vocab);
            if (own >= 0 && own != proposed[kept]) {
                rounds_with_rejection++;
                assert_int_equal(llmm_grammar_state_accept_token(target, own), LLMM_OK);
                mask_of(target, now, n_vocab);
            }
        }
        llmm_grammar_state_free(target);
    }
    mask_of(root, now, n_vocab);
    assert_memory_equal(now, before, n_vocab * sizeof *now);
    print_message("24 draft rounds, %d with a rejection\n", rounds_with_rejection);
    assert_true(rounds_with_rejection > 0);
    llmm_grammar_state_free(root);
    llmm_grammar_free(g);
    free(before);
    free(now);
    free(draft_masks);
    llmm_model_free(m);
}

/* ---------------------------------------------------------------- hostile grammars */

/* Short grammars whose matching once cost without bound: the matcher expanded rule
 * references by recursion, once per path, so nested optional repetitions overflowed the C
 * stack or took exponential time, and `x?` repeated n times cost n^3 per byte. Each must now be
 * matched, or refused with a message, within the per-byte expansion limit. */

/* Compile gbnf; NULL when refused, which must be INVALID_ARG with a message. */
static llmm_grammar *compile_or_refuse(const char *gbnf, char *err, size_t err_size) {
    llmm_grammar *g = NULL;
    llmm_status st = llmm_grammar_create(NULL, gbnf, strlen(gbnf), NULL, &g, err, err_size);
    if (st) {
        assert_int_equal(st, LLMM_ERR_INVALID_ARG);
        assert_null(g);
        assert_true(err[0] != '\0');
    }
    return g;
}

/* The most expansion steps any position of text took (the matcher's per-byte work), matching it
 * with the library's own stacks; text must be accepted. */
static size_t most_steps(const char *gbnf, const char *text) {
    grammar_rules rules;
    llmm_diag d = {{0}};
    assert_int_equal(llmm__grammar_parse(gbnf, strlen(gbnf), NULL, NULL, &rules, &d), LLMM_OK);
    gstacks gs;
    llmm__gstacks_init(&gs, &rules, NULL);
    glevel level;
    llmm__gstacks_start(&gs, &level);
    size_t most = gs.step_work;
    for (const char *c = text; *c; c++) {
        glevel next;
        llmm__gstacks_advance_byte(&gs, &level, (uint8_t)*c, &next);
        assert_int_equal(gs.failed, GSTACKS_OK);
        assert_true(next.n > 0);
        most = LLMM_MAX(most, gs.step_work);
        level = next;
    }
    assert_true(llmm__glevel_can_end(&gs, &level));
    llmm__gstacks_free(&gs);
    llmm__grammar_rules_free(&rules, NULL);
    return most;
}

static char *repeated(const char *unit, size_t n, const char *tail) {
    size_t u = strlen(unit), t = strlen(tail);
    char *s = malloc(u * n + t + 1);
    assert_non_null(s);
    for (size_t i = 0; i < n; i++) memcpy(s + i * u, unit, u);
    memcpy(s + u * n, tail, t + 1);
    return s;
}

static void test_nested_optional_repetitions(void **state) {
    (void)state;
    char err[512] = "";
    /* 90,000 ways to be at the next "a": a stack overflow at ~175k frames before; now more
     * steps than the limit at the start, so refused when compiled */
    llmm_grammar *g = compile_or_refuse("root ::= ((\"a\"?){0,300}){0,300} \"z\"", err, sizeof err);
    assert_null(g);
    assert_non_null(strstr(err, "GSTACK_STEP_MAX"));
    /* 250 stacks: matched */
    g = compile("root ::= ((\"a\"?){0,25}){0,10} \"z\"");
    char *a250 = repeated("a", 250, "z"), *a251 = repeated("a", 251, "z");
    assert_true(accepts(g, a250, strlen(a250)));
    assert_false(accepts(g, a251, strlen(a251)));
    free(a250);
    free(a251);
    llmm_grammar_free(g);
    /* exponential before: 17 s to create a state */
    g = compile("root ::= ((\"a\"?){0,8}){0,8} \"z\"");
    char *a64 = repeated("a", 64, "z"), *a65 = repeated("a", 65, "z");
    assert_true(accepts(g, "z", 1));
    assert_true(accepts(g, "aaaaaaaaaaz", 11));
    assert_true(accepts(g, a64, strlen(a64)));
    assert_false(accepts(g, a65, strlen(a65)));
    assert_false(accepts(g, "aa", 2));
    /* 64 distinct stacks reach the next "a": a few steps each, not one per path */
    size_t steps = most_steps("root ::= ((\"a\"?){0,8}){0,8} \"z\"", a64);
    print_message("(a?){0,8}){0,8}: %zu steps at most per byte\n", steps);
    assert_true(steps <= 16 * 64);
    free(a64);
    free(a65);
    llmm_grammar_free(g);
    /* cubic per byte before: 29 s to accept one "a" */
    g = compile("root ::= (\"a\"?){0,3000} \"z\"");
    char *a3000 = repeated("a", 3000, "z"), *a3001 = repeated("a", 3001, "z");
    assert_true(accepts(g, "az", 2));
    assert_true(accepts(g, a3000, strlen(a3000)));
    assert_false(accepts(g, a3001, strlen(a3001)));
    steps = most_steps("root ::= (\"a\"?){0,3000} \"z\"", a3000);
    print_message("(a?){0,3000}: %zu steps at most per byte\n", steps);
    assert_true(steps <= 8 * 3000);
    free(a3000);
    free(a3001);
    llmm_grammar_free(g);
}

static void test_many_empty_references(void **state) {
    (void)state;
    /* 2^40 paths through `e` before: 10 GB after 40 s */
    char *gbnf = repeated("e ", 40, "\"x\" e\ne ::= |\n");
    char *text = malloc(strlen(gbnf) + 16);
    assert_non_null(text);
    snprintf(text, strlen(gbnf) + 16, "root ::= %s", gbnf);
    llmm_grammar *g = compile(text);
    assert_true(accepts(g, "x", 1));
    assert_false(accepts(g, "", 0));
    assert_false(accepts(g, "xx", 2));
    size_t steps = most_steps(text, "x");
    print_message("40 x e: %zu steps at most per byte\n", steps);
    assert_true(steps <= 8 * 40);
    llmm_grammar_free(g);
    free(text);
    free(gbnf);
}

static void test_long_rule_chain(void **state) {
    (void)state;
    /* r0 ::= r1, ..., r29999 ::= "x": the parser once scanned every rule per reference (2.6 s)
     * and the matcher recursed once per link */
    enum { N = 30000 };
    size_t cap = (size_t)N * 32, n = 0;
    char *text = malloc(cap);
    assert_non_null(text);
    n += (size_t)snprintf(text + n, cap - n, "root ::= r0 \"y\"\n");
    for (int i = 0; i < N - 1; i++) n += (size_t)snprintf(text + n, cap - n, "r%d ::= r%d\n", i, i + 1);
    n += (size_t)snprintf(text + n, cap - n, "r%d ::= \"x\"\n", N - 1);
    llmm_grammar *g = compile(text);
    assert_true(accepts(g, "xy", 2));
    assert_false(accepts(g, "x", 1));
    llmm_grammar_free(g);
    free(text);
}

/* A state whose stacks are deeper than a cache key may be long (GLEVEL_KEY_MAX words): its mask
 * is made without the cache and must still equal checking each token. */
static void test_mask_of_state_past_key_limit(void **state) {
    (void)state;
    llmm_model *m = load_vocab("models/stories260K.gguf");
    llmm_model_info info = {.size = sizeof info};
    assert_int_equal(llmm_model_get_info(m, &info), LLMM_OK);
    const char *gbnf = "root ::= \"(\" root \")\" | [a-z]+";
    llmm_grammar *g = NULL;
    assert_int_equal(llmm_grammar_create(m, gbnf, strlen(gbnf), NULL, &g, NULL, 0), LLMM_OK);
    llmm_grammar_state *s = NULL;
    assert_int_equal(llmm_grammar_state_create(g, &s), LLMM_OK);
    size_t depth = GLEVEL_KEY_MAX + 1000;
    char *open = malloc(depth);
    assert_non_null(open);
    memset(open, '(', depth);
    assert_int_equal(llmm_grammar_state_accept_bytes(s, open, depth), LLMM_OK);
    free(open);
    float *mask = malloc(info.n_vocab * sizeof *mask);
    assert_non_null(mask);
    mask_of(s, mask, info.n_vocab);
    size_t n_allowed = 0;
    for (uint32_t t = 0; t < info.n_vocab; t++) {
        int allowed = -1;
        assert_int_equal(llmm_grammar_state_allows(s, (llmm_token)t, &allowed), LLMM_OK);
        assert_int_equal(allowed, mask[t] == 1.0f);
        n_allowed += (size_t)allowed;
    }
    assert_true(n_allowed > 10 && n_allowed < info.n_vocab);
    free(mask);
    llmm_grammar_state_free(s);
    llmm_grammar_free(g);
    llmm_model_free(m);
}

/* Reported by clang's UBSan only: '.' alone has no ranges (an offset applied to NULL), and a
 * grammar that matches only "" has an empty pool that cloning copied from NULL. */
static void test_empty_tables(void **state) {
    (void)state;
    expect_matches("root ::= .", LIST("a", "\xc3\xa9", "\xf0\x9f\x98\x80"), LIST("", "ab"));
    llmm_grammar *g = compile("root ::= \"\"");
    llmm_grammar_state *s = NULL, *copy = NULL;
    assert_int_equal(llmm_grammar_state_create(g, &s), LLMM_OK);
    assert_int_equal(llmm_grammar_state_clone(s, &copy), LLMM_OK);
    int can_end = 0, must_end = 0;
    assert_int_equal(llmm_grammar_state_can_end(copy, &can_end, &must_end), LLMM_OK);
    assert_true(can_end && must_end);
    assert_int_equal(llmm_grammar_state_accept_bytes(copy, "a", 1), LLMM_ERR_INVALID_ARG);
    llmm_grammar_state_free(copy);
    llmm_grammar_state_free(s);
    llmm_grammar_free(g);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_literals_and_escapes),
        cmocka_unit_test(test_alternatives_sequences_groups),
        cmocka_unit_test(test_character_classes),
        cmocka_unit_test(test_repetitions),
        cmocka_unit_test(test_layout_comments_and_names),
        cmocka_unit_test(test_split_utf8_and_state_calls),
        cmocka_unit_test(test_malformed_grammars),
        cmocka_unit_test(test_matcher_agrees_with_backtracking),
        cmocka_unit_test(test_mask_equals_per_token_check),
        cmocka_unit_test(test_draft_clones_keep_independent_states),
        cmocka_unit_test(test_nested_optional_repetitions),
        cmocka_unit_test(test_many_empty_references),
        cmocka_unit_test(test_long_rule_chain),
        cmocka_unit_test(test_empty_tables),
        cmocka_unit_test(test_mask_of_state_past_key_limit),
    };
    return cmocka_run_group_tests_name("grammar", tests, NULL, NULL);
}
