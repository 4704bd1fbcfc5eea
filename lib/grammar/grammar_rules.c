#include "grammar_rules.h"

#include <string.h>

void llmm__grammar_rules_free(grammar_rules *g, const llmm_allocator *alloc) {
    llmm__mem_free(alloc, g->elems);
    llmm__mem_free(alloc, g->alt_start);
    llmm__mem_free(alloc, g->rule_first_alt);
    llmm__mem_free(alloc, g->sets);
    llmm__mem_free(alloc, g->ranges);
    memset(g, 0, sizeof *g);
}

int llmm__gcharset_meets(const grammar_rules *g, const gcharset *s, uint32_t lo, uint32_t hi) {
    if (s->n_ranges == 0) return (int)s->negated;
    const gchar_range *r = g->ranges + s->first_range;
    for (uint32_t i = 0; i < s->n_ranges; i++) {
        if (s->negated && r[i].lo <= lo && r[i].hi >= hi) return 0; /* one merged range covers it all */
        if (!s->negated && r[i].lo <= hi && r[i].hi >= lo) return 1;
    }
    return (int)s->negated;
}
