/* Grammars (GBNF) inside the library: the compiled rule tables the parser produces and the
 * matcher walks. A grammar is a list of rules; a rule a list of alternatives; an alternative a
 * sequence of elements (character sets and rule references) closed by GELEM_END. Groups and
 * repetitions of the source are rewritten into generated rules, so the matcher knows only
 * these three element kinds. */
#ifndef LLMM_GRAMMAR_RULES_H
#define LLMM_GRAMMAR_RULES_H

#include <stdint.h>

#include "base/common.h"

typedef enum gelem_kind {
    GELEM_END = 0,   /* closes an alternative */
    GELEM_REF = 1,   /* arg: rule index */
    GELEM_CHARS = 2  /* arg: character set index; matches one code point */
} gelem_kind;

typedef struct gelem {
    uint32_t kind; /* gelem_kind */
    uint32_t arg;
} gelem;

typedef struct gchar_range {
    uint32_t lo, hi; /* code points, inclusive */
} gchar_range;

/* A character class, a literal's character or '.': sorted, merged ranges, possibly negated.
 * ASCII membership (negation applied) is also kept as a bitmap: most grammar text is ASCII and
 * the token walk tests a character set once per byte. */
typedef struct gcharset {
    uint32_t ascii[4];
    uint32_t first_range, n_ranges; /* into grammar_rules.ranges */
    uint32_t negated;
} gcharset;

typedef struct grammar_rules {
    gelem *elems;            /* (n_elems) every rule's alternatives, one after another */
    uint32_t *alt_start;     /* (n_alts) position in elems of each alternative's first element */
    uint32_t *rule_first_alt;/* (n_rules + 1) rule r's alternatives are alt_start[first[r] .. first[r+1]) */
    gcharset *sets;          /* (n_sets) */
    gchar_range *ranges;     /* (n_ranges) */
    uint32_t n_elems, n_alts, n_rules, n_sets, n_ranges;
    uint32_t root;           /* index of the start rule */
} grammar_rules;

/* Free a grammar's tables (grammar_parse.h made them). */
void llmm__grammar_rules_free(grammar_rules *g, const llmm_allocator *alloc);

/* Whether code point cp is in the set. */
static inline int gcharset_has(const grammar_rules *g, const gcharset *s, uint32_t cp) {
    if (cp < 128) return (int)((s->ascii[cp >> 5] >> (cp & 31)) & 1u);
    if (s->n_ranges == 0) return (int)s->negated; /* '.' alone: a grammar may have no ranges at all */
    const gchar_range *r = g->ranges + s->first_range;
    uint32_t lo = 0, hi = s->n_ranges;
    while (lo < hi) {
        uint32_t mid = (lo + hi) / 2;
        if (r[mid].hi < cp) lo = mid + 1;
        else hi = mid;
    }
    int in = lo < s->n_ranges && r[lo].lo <= cp;
    return in ^ (int)s->negated;
}

/* Whether some code point in [lo, hi] is in the set (for a character whose first bytes are known). */
int llmm__gcharset_meets(const grammar_rules *g, const gcharset *s, uint32_t lo, uint32_t hi);

#endif
