/* Advancing a grammar's set of stacks by bytes (see grammar_match.h). Bytes are assembled into
 * UTF-8 characters; while a character is incomplete the stacks that no character with those
 * first bytes could continue are dropped, so a token ending inside a character is allowed
 * exactly when some completion of it is. */
#include <string.h>

#include "grammar_match.h"

void llmm__gstacks_init(gstacks *gs, const grammar_rules *g, const llmm_allocator *alloc) {
    memset(gs, 0, sizeof *gs);
    gs->g = g;
    gs->alloc = alloc;
}

void llmm__gstacks_free(gstacks *gs) {
    llmm__mem_free(gs->alloc, gs->node_pos);
    llmm__mem_free(gs->alloc, gs->node_parent);
    llmm__mem_free(gs->alloc, gs->node_next);
    llmm__mem_free(gs->alloc, gs->buckets);
    llmm__mem_free(gs->alloc, gs->heads);
    llmm__mem_free(gs->alloc, gs->seen_pair);
    llmm__mem_free(gs->alloc, gs->seen_stamp);
    llmm__mem_free(gs->alloc, gs->todo);
    llmm__gstacks_init(gs, gs->g, gs->alloc);
}

void llmm__gstacks_clear(gstacks *gs) {
    llmm__gstacks_truncate_to(gs, 0, 0);
    gs->failed = GSTACKS_OK;
}

/* ---------------------------------------------------------------- unique nodes */

static uint64_t mix(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return x;
}

static size_t node_bucket(const gstacks *gs, uint32_t pos, uint32_t parent) {
    return (size_t)mix(((uint64_t)pos << 32) | parent) & (gs->cap_nodes - 1);
}

static void link_node(gstacks *gs, uint32_t id) {
    size_t b = node_bucket(gs, gs->node_pos[id], gs->node_parent[id]);
    gs->node_next[id] = gs->buckets[b];
    gs->buckets[b] = id;
}

/* Room for cap nodes (a power of two), the chains rebuilt oldest first so that each stays
 * newest first. */
static int reserve_nodes(gstacks *gs, size_t cap) {
    if (cap <= gs->cap_nodes) return 1;
    if (cap >= GSTACK_NONE) return 0;
    size_t old = gs->cap_nodes * sizeof(uint32_t), size = cap * sizeof(uint32_t);
    uint32_t *p = llmm__mem_grow(gs->alloc, gs->node_pos, old, size);
    if (p) gs->node_pos = p;
    uint32_t *q = p ? llmm__mem_grow(gs->alloc, gs->node_parent, old, size) : NULL;
    if (q) gs->node_parent = q;
    uint32_t *n = q ? llmm__mem_grow(gs->alloc, gs->node_next, old, size) : NULL;
    if (n) gs->node_next = n;
    uint32_t *b = n ? llmm__mem_alloc(gs->alloc, size) : NULL;
    if (!b) return 0;
    llmm__mem_free(gs->alloc, gs->buckets);
    gs->buckets = b;
    gs->cap_nodes = cap;
    memset(b, 0xFF, size);
    for (size_t id = 0; id < gs->n_nodes; id++) link_node(gs, (uint32_t)id);
    return 1;
}

/* The node (pos, parent), made when new. */
static uint32_t new_node(gstacks *gs, uint32_t pos, uint32_t parent) {
    if (gs->cap_nodes) {
        for (uint32_t id = gs->buckets[node_bucket(gs, pos, parent)]; id != GSTACK_NONE; id = gs->node_next[id])
            if (gs->node_pos[id] == pos && gs->node_parent[id] == parent) return id;
    }
    if (gs->n_nodes == gs->cap_nodes && !reserve_nodes(gs, gs->cap_nodes ? 2 * gs->cap_nodes : 256)) {
        gs->failed = GSTACKS_NO_MEMORY;
        return GSTACK_NONE;
    }
    uint32_t id = (uint32_t)gs->n_nodes++;
    gs->node_pos[id] = pos;
    gs->node_parent[id] = parent;
    link_node(gs, id);
    return id;
}

void llmm__gstacks_truncate_to(gstacks *gs, size_t n_heads, size_t n_nodes) {
    gs->n_heads = n_heads;
    while (gs->n_nodes > n_nodes) {
        uint32_t id = (uint32_t)--gs->n_nodes;
        gs->buckets[node_bucket(gs, gs->node_pos[id], gs->node_parent[id])] = gs->node_next[id];
    }
}

static void push_head(gstacks *gs, uint32_t node) {
    if (gs->failed) return;
    if (llmm__mem_reserve(gs->alloc, (void **)&gs->heads, &gs->cap_heads, gs->n_heads + 1, sizeof *gs->heads)) {
        gs->failed = GSTACKS_NO_MEMORY;
        return;
    }
    gs->heads[gs->n_heads++] = node;
}

/* ---------------------------------------------------------------- expansion */

/* Start a level: no pair seen yet (a new stamp), no work done. */
static void begin_level(gstacks *gs) {
    if (++gs->stamp == 0) { /* wrapped: old stamps could read as current */
        if (gs->seen_stamp) memset(gs->seen_stamp, 0, gs->seen_cap * sizeof *gs->seen_stamp);
        gs->stamp = 1;
    }
    gs->seen_n = 0;
    gs->step_work = 0;
    gs->end_pushed = 0;
}

static int grow_seen(gstacks *gs) {
    size_t cap = gs->seen_cap ? 2 * gs->seen_cap : 1024;
    uint64_t *pair = llmm__mem_alloc(gs->alloc, cap * sizeof *pair);
    uint32_t *stamp = llmm__mem_calloc(gs->alloc, cap, sizeof *stamp);
    if (!pair || !stamp) {
        llmm__mem_free(gs->alloc, pair);
        llmm__mem_free(gs->alloc, stamp);
        return 0;
    }
    for (size_t i = 0; i < gs->seen_cap; i++) {
        if (gs->seen_stamp[i] != gs->stamp) continue;
        size_t j = (size_t)mix(gs->seen_pair[i]) & (cap - 1);
        while (stamp[j] == gs->stamp) j = (j + 1) & (cap - 1);
        pair[j] = gs->seen_pair[i];
        stamp[j] = gs->stamp;
    }
    llmm__mem_free(gs->alloc, gs->seen_pair);
    llmm__mem_free(gs->alloc, gs->seen_stamp);
    gs->seen_pair = pair;
    gs->seen_stamp = stamp;
    gs->seen_cap = cap;
    return 1;
}

/* Whether (pos, parent) is new to this level, counting it as one step; 0 when seen, or when the
 * level would pass GSTACK_STEP_MAX steps or memory (gs->failed says which). */
static int first_visit(gstacks *gs, uint32_t pos, uint32_t parent) {
    if (2 * (gs->seen_n + 1) > gs->seen_cap && !grow_seen(gs)) {
        gs->failed = GSTACKS_NO_MEMORY;
        return 0;
    }
    uint64_t pair = ((uint64_t)pos << 32) | parent;
    size_t i = (size_t)mix(pair) & (gs->seen_cap - 1);
    for (; gs->seen_stamp[i] == gs->stamp; i = (i + 1) & (gs->seen_cap - 1))
        if (gs->seen_pair[i] == pair) return 0;
    if (++gs->step_work > GSTACK_STEP_MAX) {
        gs->failed = GSTACKS_TOO_COMPLEX;
        return 0;
    }
    gs->seen_pair[i] = pair;
    gs->seen_stamp[i] = gs->stamp;
    gs->seen_n++;
    return 1;
}

static void push_todo(gstacks *gs, uint32_t pos, uint32_t parent) {
    if (llmm__mem_reserve(gs->alloc, (void **)&gs->todo, &gs->cap_todo, gs->n_todo + 1, sizeof *gs->todo)) {
        gs->failed = GSTACKS_NO_MEMORY;
        return;
    }
    gs->todo[gs->n_todo++] = ((uint64_t)pos << 32) | parent;
}

/* Add the stacks that continue at element pos with parent below it: descend into rule
 * references until every stack's top is a character set, and pop finished alternatives. A
 * reference followed by the end of its alternative pushes no return point (a tail call), so
 * right-recursive repetitions run in constant depth. Iterative, with each (position, parent)
 * pair expanded once per level: nodes are unique, so a pair stands for the same stacks however
 * it was reached, and the paths to it (exponentially many through nested optional items) are
 * not walked again. Terminates because the parser refused left recursion. */
static void expand(gstacks *gs, uint32_t pos, uint32_t parent) {
    const grammar_rules *g = gs->g;
    size_t base = gs->n_todo;
    push_todo(gs, pos, parent);
    while (gs->n_todo > base && !gs->failed) {
        uint64_t item = gs->todo[--gs->n_todo];
        pos = (uint32_t)(item >> 32);
        parent = (uint32_t)item;
        while (first_visit(gs, pos, parent)) {
            const gelem *e = &g->elems[pos];
            if (e->kind == GELEM_CHARS) {
                push_head(gs, new_node(gs, pos, parent));
                break;
            }
            if (e->kind == GELEM_END) {
                if (parent == GSTACK_NONE) {
                    if (!gs->end_pushed) push_head(gs, GSTACK_NONE);
                    gs->end_pushed = 1;
                    break;
                }
                pos = gs->node_pos[parent];
                parent = gs->node_parent[parent];
                continue;
            }
            uint32_t below = g->elems[pos + 1].kind == GELEM_END ? parent : new_node(gs, pos + 1, parent);
            /* last alternative first onto the list, so the first is expanded first */
            for (uint32_t a = g->rule_first_alt[e->arg + 1]; a-- > g->rule_first_alt[e->arg] && !gs->failed;)
                push_todo(gs, g->alt_start[a], below);
            break;
        }
    }
    gs->n_todo = base;
}

static void finish_level(gstacks *gs, size_t first, gutf8 partial, glevel *out) {
    if (gs->failed) gs->n_heads = first;
    *out = (glevel){.first = first, .n = gs->n_heads - first, .nodes_end = gs->n_nodes, .partial = partial};
}

void llmm__gstacks_start(gstacks *gs, glevel *out) {
    size_t first = gs->n_heads;
    const grammar_rules *g = gs->g;
    begin_level(gs);
    for (uint32_t a = g->rule_first_alt[g->root]; a < g->rule_first_alt[g->root + 1]; a++)
        expand(gs, g->alt_start[a], GSTACK_NONE);
    finish_level(gs, first, (gutf8){0, 0, 0}, out);
}

static void advance_char(gstacks *gs, const glevel *from, uint32_t cp) {
    const grammar_rules *g = gs->g;
    for (size_t i = 0; i < from->n; i++) {
        uint32_t h = gs->heads[from->first + i];
        if (h == GSTACK_NONE) continue;
        uint32_t pos = gs->node_pos[h];
        if (gcharset_has(g, &g->sets[g->elems[pos].arg], cp)) expand(gs, pos + 1, gs->node_parent[h]);
    }
}

/* The code points a character with these first bytes may still become: [*lo, *hi]; 0 when
 * none is valid UTF-8 (overlong forms, surrogates, beyond U+10FFFF). */
static int partial_range(gutf8 p, uint32_t *lo, uint32_t *hi) {
    uint32_t first = p.value << (6 * p.need), last = first | ((1u << (6 * p.need)) - 1);
    *lo = LLMM_MAX(first, p.smallest);
    *hi = LLMM_MIN(last, 0x10FFFFu);
    return *lo <= *hi && !(*lo >= 0xD800 && *hi <= 0xDFFF);
}

/* Keep the stacks whose next character set holds some character starting with the bytes seen. */
static void keep_possible(gstacks *gs, const glevel *from, gutf8 partial) {
    const grammar_rules *g = gs->g;
    uint32_t lo, hi;
    if (!partial_range(partial, &lo, &hi)) return;
    for (size_t i = 0; i < from->n; i++) {
        uint32_t h = gs->heads[from->first + i];
        if (h != GSTACK_NONE && llmm__gcharset_meets(g, &g->sets[g->elems[gs->node_pos[h]].arg], lo, hi)) push_head(gs, h);
    }
}

void llmm__gstacks_advance_byte(gstacks *gs, const glevel *from, uint8_t byte, glevel *out) {
    size_t first = gs->n_heads;
    begin_level(gs);
    gutf8 p = from->partial;
    if (p.need == 0 && byte < 0x80) {
        advance_char(gs, from, byte);
    } else if (p.need == 0) {
        int extra = (byte & 0xE0) == 0xC0 ? 1 : (byte & 0xF0) == 0xE0 ? 2 : (byte & 0xF8) == 0xF0 ? 3 : 0;
        static const uint8_t lead_mask[4] = {0, 0x1F, 0x0F, 0x07};
        static const uint32_t smallest[4] = {0, 0x80, 0x800, 0x10000};
        if (extra) {
            p = (gutf8){byte & lead_mask[extra], (uint32_t)extra, smallest[extra]};
            keep_possible(gs, from, p);
        }
    } else if ((byte & 0xC0) == 0x80) {
        p = (gutf8){(p.value << 6) | (byte & 0x3Fu), p.need - 1, p.smallest};
        uint32_t lo, hi;
        if (p.need > 0) {
            keep_possible(gs, from, p);
        } else {
            if (partial_range(p, &lo, &hi)) advance_char(gs, from, p.value);
            p = (gutf8){0, 0, 0}; /* complete: states after any character compare equal */
        }
    }
    finish_level(gs, first, p, out);
}

void llmm__gstacks_truncate(gstacks *gs, const glevel *level) {
    llmm__gstacks_truncate_to(gs, level->first + level->n, level->nodes_end);
}

/* Copy the chain under node into the pool of dst, bottom first; returns its new top. */
static uint32_t copy_chain(gstacks *dst, const gstacks *src, uint32_t node, uint32_t *scratch, size_t depth_max) {
    size_t depth = 0;
    for (uint32_t n = node; n != GSTACK_NONE && depth < depth_max; n = src->node_parent[n]) scratch[depth++] = n;
    uint32_t top = GSTACK_NONE;
    while (depth-- > 0) top = new_node(dst, src->node_pos[scratch[depth]], top);
    return top;
}

int llmm__gstacks_compact(gstacks *gs, glevel *levels, size_t n_levels) {
    gstacks fresh;
    llmm__gstacks_init(&fresh, gs->g, gs->alloc);
    uint32_t *scratch = llmm__mem_calloc(gs->alloc, gs->n_nodes + 1, sizeof *scratch);
    if (!scratch) fresh.failed = GSTACKS_NO_MEMORY;
    glevel *copied = llmm__mem_calloc(gs->alloc, n_levels, sizeof *copied);
    if (!copied) fresh.failed = GSTACKS_NO_MEMORY;
    for (size_t l = 0; l < n_levels && !fresh.failed; l++) {
        size_t first = fresh.n_heads;
        for (size_t i = 0; i < levels[l].n && !fresh.failed; i++) {
            uint32_t h = gs->heads[levels[l].first + i];
            push_head(&fresh, h == GSTACK_NONE ? h : copy_chain(&fresh, gs, h, scratch, gs->n_nodes));
        }
        copied[l] = (glevel){.first = first, .n = fresh.n_heads - first, .nodes_end = fresh.n_nodes,
                             .partial = levels[l].partial};
    }
    llmm__mem_free(gs->alloc, scratch);
    if (fresh.failed) {
        llmm__mem_free(gs->alloc, copied);
        llmm__gstacks_free(&fresh);
        return 0;
    }
    memcpy(levels, copied, n_levels * sizeof *levels);
    llmm__mem_free(gs->alloc, copied);
    fresh.step_work = gs->step_work;
    llmm__gstacks_free(gs);
    *gs = fresh;
    return 1;
}

int llmm__glevel_can_end(const gstacks *gs, const glevel *level) {
    if (level->partial.need) return 0;
    for (size_t i = 0; i < level->n; i++)
        if (gs->heads[level->first + i] == GSTACK_NONE) return 1;
    return 0;
}

int llmm__glevel_can_continue(const gstacks *gs, const glevel *level) {
    for (size_t i = 0; i < level->n; i++)
        if (gs->heads[level->first + i] != GSTACK_NONE) return 1;
    return 0;
}

static int key_push(const gstacks *gs, uint32_t v, uint32_t **key, size_t *n, size_t *cap) {
    if (*n >= GLEVEL_KEY_MAX) return 0;
    if (llmm__mem_reserve(gs->alloc, (void **)key, cap, *n + 1, sizeof **key)) return 0;
    (*key)[(*n)++] = v;
    return 1;
}

int llmm__glevel_key(const gstacks *gs, const glevel *level, uint32_t **key, size_t *n, size_t *cap) {
    for (size_t i = 0; i < level->n; i++) {
        for (uint32_t x = gs->heads[level->first + i]; x != GSTACK_NONE; x = gs->node_parent[x])
            if (!key_push(gs, gs->node_pos[x], key, n, cap)) return 0;
        if (!key_push(gs, UINT32_MAX, key, n, cap)) return 0;
    }
    const gutf8 *p = &level->partial;
    return key_push(gs, p->value, key, n, cap) && key_push(gs, p->need, key, n, cap) &&
           key_push(gs, p->smallest, key, n, cap);
}

llmm_status llmm__gstacks_failure(gstacks *gs, llmm_diag *d, const char *doing) {
    int why = gs->failed;
    gs->failed = GSTACKS_OK;
    if (why == GSTACKS_TOO_COMPLEX)
        return llmm__diag_fail(d, LLMM_ERR_INVALID_ARG,
                               "%s: more than %u expansion steps at one position (GSTACK_STEP_MAX); the grammar has too "
                               "many ways to reach its next character, as nested optional repetitions do",
                               doing, GSTACK_STEP_MAX);
    return llmm__diag_fail(d, LLMM_ERR_NO_MEMORY, "out of memory %s", doing);
}

int llmm__gstacks_copy(gstacks *dst, const gstacks *src) {
    llmm__gstacks_clear(dst);
    if (!reserve_nodes(dst, src->cap_nodes) ||
        llmm__mem_reserve(dst->alloc, (void **)&dst->heads, &dst->cap_heads, src->n_heads ? src->n_heads : 1,
                          sizeof *dst->heads))
        return 0;
    /* empty pools have no arrays to copy from */
    if (src->n_nodes) {
        memcpy(dst->node_pos, src->node_pos, src->n_nodes * sizeof *src->node_pos);
        memcpy(dst->node_parent, src->node_parent, src->n_nodes * sizeof *src->node_parent);
    }
    if (src->n_heads) memcpy(dst->heads, src->heads, src->n_heads * sizeof *src->heads);
    for (size_t id = 0; id < src->n_nodes; id++) link_node(dst, (uint32_t)id);
    dst->n_nodes = src->n_nodes;
    dst->n_heads = src->n_heads;
    return 1;
}
