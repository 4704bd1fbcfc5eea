/* A small backtracking regex matcher over code points, for the pre-tokenizer patterns.
 *
 * Supported: alternation; groups (?:..) and (..) (nothing is captured); lookahead (?=..) and
 * (?!..); classes [..] and [^..] with literals, ranges, \s, \d and \p{L,Lu,Ll,Lt,Lm,Lo,M,N,P,S,
 * Z,C}; \s \S \d \p{..} outside classes; literals, \r \n \t \f \v, \x{HHHH} and escaped
 * punctuation; the anchor $; greedy ? * + {n} {n,} {n,m}. Matching is leftmost-first with
 * backtracking, as in ECMAScript (std::regex) and the reference engine's hand-written splitters.
 * A pattern that can match the empty string is not supported (an empty match counts as none).
 *
 * Programs have fixed capacities (the patterns are compile-time data of lib/text/pretokenizer.c),
 * so compiling allocates nothing and a program is one flat, read-only struct. */
#ifndef LLMM_UREGEX_H
#define LLMM_UREGEX_H

#include "base/common.h"

#define RE_MAX_NODES 192
#define RE_MAX_ALTS 64
#define RE_MAX_CLASSES 96
#define RE_MAX_RANGES 192
#define RE_NONE 0xFFFFu
#define RE_INF UINT32_MAX

enum re_kind { RE_CLASS, RE_GROUP, RE_AHEAD, RE_NOT_AHEAD, RE_END };

typedef struct re_node {
    uint8_t kind;      /* enum re_kind */
    uint8_t width1;    /* every match is exactly one code point: repeated by counting, no recursion */
    uint16_t arg;      /* RE_CLASS: class index; groups and lookaheads: first entry in alts */
    uint16_t n_alts;   /* groups and lookaheads: how many alternatives */
    uint16_t next;     /* next node of the sequence; RE_NONE ends it */
    uint32_t min, max; /* repetition bounds; max RE_INF = unbounded */
} re_node;

typedef struct re_class {
    uint32_t ascii[4];   /* literal members below 128, one bit each */
    uint16_t props;      /* UNI_* bits: a code point with any of them is a member */
    uint16_t first_range;
    uint16_t n_ranges;   /* literal ranges at or above 128, in re_prog.ranges */
    uint8_t negated;
} re_class;

typedef struct re_prog {
    re_node nodes[RE_MAX_NODES];
    uint16_t alts[RE_MAX_ALTS]; /* first node of each alternative; RE_NONE for an empty one */
    re_class classes[RE_MAX_CLASSES];
    uint32_t ranges[RE_MAX_RANGES][2];
    uint16_t n_nodes, n_alts, n_classes, n_ranges;
    uint16_t root; /* group node of the top-level alternatives */
} re_prog;

llmm_status llmm__re_compile(re_prog *p, const char *pattern, llmm_diag *d);

/* The text as the matcher sees it. cp holds the code point for literal comparisons, with
 * non-ASCII White_Space mapped to U+000B the way the reference engine maps it before running
 * std::regex (so "[\r\n]" or a range never matches U+3000, but \s does). */
typedef struct re_input {
    const uint32_t *cp;
    const uint16_t *props; /* UNI_* bits of the original code point */
    size_t end;            /* the piece being split ends here: $ and lookahead stop at it */
} re_input;

/* Leftmost match starting at or after from; returns 0 when there is none. */
int llmm__re_search(const re_prog *p, const re_input *in, size_t from, size_t *match_start, size_t *match_end);

#endif
