/* The pushdown matcher of a compiled grammar: where a text may go on is a set of stacks (one
 * per way of having parsed it so far). A stack is a chain of nodes in a pool: its top node is
 * the character set to match next, the nodes below it the positions to return to when a rule's
 * alternative ends. Nodes are never changed once made, so stacks share their lower parts and a
 * step only adds nodes: a search (the token walk of grammar_mask.c) can go back to an earlier
 * set by truncating the pool and the head list. */
#ifndef LLMM_GRAMMAR_MATCH_H
#define LLMM_GRAMMAR_MATCH_H

#include <stdint.h>

#include "grammar_rules.h"

#define GSTACK_NONE UINT32_MAX /* as a head: a stack that finished the start rule (the text may end) */

/* A character whose first bytes were seen: need more bytes, value holds the bits so far, and
 * smallest is the least code point its length may encode (shorter forms are overlong). */
typedef struct gutf8 {
    uint32_t value;
    uint32_t need;
    uint32_t smallest;
} gutf8;

typedef struct gstacks {
    const grammar_rules *g;
    const llmm_allocator *alloc;
    uint32_t *node_pos;    /* (cap_nodes) element position: a GELEM_CHARS for a top, else a return point */
    uint32_t *node_parent; /* (cap_nodes) node below, or GSTACK_NONE */
    size_t n_nodes, cap_nodes;
    uint32_t *heads;       /* (cap_heads) top nodes of the stacks of every level, one level after another */
    size_t n_heads, cap_heads;
    int failed;            /* an allocation failed; results are incomplete */
} gstacks;

/* One set of stacks: heads[first .. first + n) and the character in progress. */
typedef struct glevel {
    size_t first, n;
    size_t nodes_end; /* the pool's size once the level was made */
    gutf8 partial;
} glevel;

void llmm__gstacks_init(gstacks *gs, const grammar_rules *g, const llmm_allocator *alloc);
void llmm__gstacks_free(gstacks *gs);
/* Discard every node and head. */
void llmm__gstacks_clear(gstacks *gs);
/* The stacks at the start of the grammar, appended as a new level. */
void llmm__gstacks_start(gstacks *gs, glevel *out);
/* Feed one byte to the set `from` (the last level made, or one before it after truncating to its
 * end): the stacks that accept it are appended as the level *out (n = 0 when none does). */
void llmm__gstacks_advance_byte(gstacks *gs, const glevel *from, uint8_t byte, glevel *out);
/* Forget the levels made after `level`. */
void llmm__gstacks_truncate(gstacks *gs, const glevel *level);
/* Copy `level`'s stacks into a fresh pool of their own, dropping every other node: what a
 * state keeps between tokens. Replaces gs's contents; *level becomes the copy's only level.
 * 0 when out of memory: gs and *level are then unchanged. */
int llmm__gstacks_compact(gstacks *gs, glevel *level);
/* Whether the text so far may end here: a finished stack and no character in progress. */
int llmm__glevel_can_end(const gstacks *gs, const glevel *level);
/* Whether some stack may take more input. */
int llmm__glevel_can_continue(const gstacks *gs, const glevel *level);
/* The level as a canonical key (each stack's positions top to bottom, UINT32_MAX after each,
 * then the partial character): appended to key[*n..], grown through gs->alloc. 0 on failure. */
int llmm__glevel_key(const gstacks *gs, const glevel *level, uint32_t **key, size_t *n, size_t *cap);
/* Copy src's pool and heads into dst (initialized for the same grammar). 0 on failure. */
int llmm__gstacks_copy(gstacks *dst, const gstacks *src);

#endif
