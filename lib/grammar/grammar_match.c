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
    llmm__mem_free(gs->alloc, gs->heads);
    llmm__gstacks_init(gs, gs->g, gs->alloc);
}

void llmm__gstacks_clear(gstacks *gs) {
    gs->n_nodes = 0;
    gs->n_heads = 0;
    gs->failed = 0;
}

static uint32_t new_node(gstacks *gs, uint32_t pos, uint32_t parent) {
    if (gs->n_nodes == gs->cap_nodes) {
        size_t cap = gs->cap_nodes ? 2 * gs->cap_nodes : 256;
        uint32_t *p = llmm__mem_grow(gs->alloc, gs->node_pos, gs->cap_nodes * sizeof *p, cap * sizeof *p);
        if (p) gs->node_pos = p;
        uint32_t *q = p ? llmm__mem_grow(gs->alloc, gs->node_parent, gs->cap_nodes * sizeof *q, cap * sizeof *q) : NULL;
        if (q) gs->node_parent = q;
        if (!p || !q || cap >= GSTACK_NONE) {
            gs->failed = 1;
            return GSTACK_NONE;
        }
        gs->cap_nodes = cap;
    }
    gs->node_pos[gs->n_nodes] = pos;
    gs->node_parent[gs->n_nodes] = parent;
    return (uint32_t)gs->n_nodes++;
}

static void push_head(gstacks *gs, uint32_t node) {
    if (gs->failed) return;
    if (llmm__mem_reserve(gs->alloc, (void **)&gs->heads, &gs->cap_heads, gs->n_heads + 1, sizeof *gs->heads)) {
        gs->failed = 1;
        return;
    }
    gs->heads[gs->n_heads++] = node;
}

/* Add the stacks that continue at element pos with parent below it: descend into rule
 * references until every stack's top is a character set, and pop finished alternatives. A
 * reference followed by the end of its alternative pushes no return point (a tail call), so
 * right-recursive repetitions run in constant depth. Terminates because the parser refused
 * left recursion. */
static void expand(gstacks *gs, uint32_t pos, uint32_t parent) {
    const grammar_rules *g = gs->g;
    for (;;) {
        const gelem *e = &g->elems[pos];
        if (e->kind == GELEM_CHARS) {
            uint32_t top = new_node(gs, pos, parent);
            push_head(gs, top);
            return;
        }
        if (e->kind == GELEM_END) {
            if (parent == GSTACK_NONE) {
                push_head(gs, GSTACK_NONE);
                return;
            }
            pos = gs->node_pos[parent];
            parent = gs->node_parent[parent];
            continue;
        }
        uint32_t below = parent;
        if (g->elems[pos + 1].kind != GELEM_END) below = new_node(gs, pos + 1, parent);
        if (gs->failed) return;
        for (uint32_t a = g->rule_first_alt[e->arg]; a < g->rule_first_alt[e->arg + 1]; a++)
            expand(gs, g->alt_start[a], below);
        return;
    }
}

static int same_stack(const gstacks *gs, uint32_t a, uint32_t b) {
    while (a != b) {
        if (a == GSTACK_NONE || b == GSTACK_NONE || gs->node_pos[a] != gs->node_pos[b]) return 0;
        a = gs->node_parent[a];
        b = gs->node_parent[b];
    }
    return 1;
}

/* Drop repeated stacks among heads[first..]: an ambiguous grammar would otherwise double them
 * at every step. */
static void dedup(gstacks *gs, size_t first) {
    size_t kept = first;
    for (size_t i = first; i < gs->n_heads; i++) {
        size_t j = first;
        while (j < kept && !same_stack(gs, gs->heads[j], gs->heads[i])) j++;
        if (j == kept) gs->heads[kept++] = gs->heads[i];
    }
    gs->n_heads = kept;
}

static void finish_level(gstacks *gs, size_t first, gutf8 partial, glevel *out) {
    if (gs->failed) gs->n_heads = first;
    dedup(gs, first);
    *out = (glevel){.first = first, .n = gs->n_heads - first, .nodes_end = gs->n_nodes, .partial = partial};
}

void llmm__gstacks_start(gstacks *gs, glevel *out) {
    size_t first = gs->n_heads;
    const grammar_rules *g = gs->g;
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
    gs->n_heads = level->first + level->n;
    gs->n_nodes = level->nodes_end;
}

/* Copy the chain under node into the pool of dst, bottom first; returns its new top. */
static uint32_t copy_chain(gstacks *dst, const gstacks *src, uint32_t node, uint32_t *scratch, size_t depth_max) {
    size_t depth = 0;
    for (uint32_t n = node; n != GSTACK_NONE && depth < depth_max; n = src->node_parent[n]) scratch[depth++] = n;
    uint32_t top = GSTACK_NONE;
    while (depth-- > 0) top = new_node(dst, src->node_pos[scratch[depth]], top);
    return top;
}

int llmm__gstacks_compact(gstacks *gs, glevel *level) {
    gstacks fresh;
    llmm__gstacks_init(&fresh, gs->g, gs->alloc);
    uint32_t *scratch = llmm__mem_calloc(gs->alloc, gs->n_nodes + 1, sizeof *scratch);
    if (!scratch) fresh.failed = 1;
    for (size_t i = 0; i < level->n && !fresh.failed; i++) {
        uint32_t h = gs->heads[level->first + i];
        push_head(&fresh, h == GSTACK_NONE ? h : copy_chain(&fresh, gs, h, scratch, gs->n_nodes));
    }
    llmm__mem_free(gs->alloc, scratch);
    if (fresh.failed) {
        llmm__gstacks_free(&fresh);
        return 0;
    }
    llmm__gstacks_free(gs);
    *gs = fresh;
    *level = (glevel){.first = 0, .n = gs->n_heads, .nodes_end = gs->n_nodes, .partial = level->partial};
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

int llmm__gstacks_copy(gstacks *dst, const gstacks *src) {
    llmm__gstacks_clear(dst);
    size_t nodes = src->n_nodes ? src->n_nodes : 1, heads = src->n_heads ? src->n_heads : 1;
    if (nodes > dst->cap_nodes) {
        uint32_t *p = llmm__mem_grow(dst->alloc, dst->node_pos, 0, nodes * sizeof *p);
        if (p) dst->node_pos = p;
        uint32_t *q = p ? llmm__mem_grow(dst->alloc, dst->node_parent, 0, nodes * sizeof *q) : NULL;
        if (q) dst->node_parent = q;
        if (!p || !q) return 0;
        dst->cap_nodes = nodes;
    }
    if (llmm__mem_reserve(dst->alloc, (void **)&dst->heads, &dst->cap_heads, heads, sizeof *dst->heads)) return 0;
    memcpy(dst->node_pos, src->node_pos, src->n_nodes * sizeof *src->node_pos);
    memcpy(dst->node_parent, src->node_parent, src->n_nodes * sizeof *src->node_parent);
    memcpy(dst->heads, src->heads, src->n_heads * sizeof *src->heads);
    dst->n_nodes = src->n_nodes;
    dst->n_heads = src->n_heads;
    return 1;
}
