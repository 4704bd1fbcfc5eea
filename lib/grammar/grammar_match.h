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

/* The most expansion steps (an element reached with a stack below it, each distinct pair once)
 * one level may take: a bound on the work, the new nodes and the stacks of each byte matched,
 * whatever the grammar. Nested optional repetitions reach a number of distinct stacks that is
 * the product of their counts (`(("a"?){0,300}){0,300}`: 90,000); the JSON grammars of
 * examples/grammars take under 100 steps a byte. */
#define GSTACK_STEP_MAX 65536u

/* Why a level is incomplete (gstacks.failed). */
enum { GSTACKS_OK = 0, GSTACKS_NO_MEMORY = 1, GSTACKS_TOO_COMPLEX = 2 };

/* A character whose first bytes were seen: need more bytes, value holds the bits so far, and
 * smallest is the least code point its length may encode (shorter forms are overlong). */
typedef struct gutf8 {
    uint32_t value;
    uint32_t need;
    uint32_t smallest;
} gutf8;

/* Nodes are unique: a (position, parent) pair is made once and found again through a chained
 * hash (node_next, buckets), so equal stacks are equal node ids. Chains are prepended to, so the
 * newest node is first in its chain and truncating the pool unlinks from the front. */
typedef struct gstacks {
    const grammar_rules *g;
    const llmm_allocator *alloc;
    uint32_t *node_pos;    /* (cap_nodes) element position: a GELEM_CHARS for a top, else a return point */
    uint32_t *node_parent; /* (cap_nodes) node below, or GSTACK_NONE */
    uint32_t *node_next;   /* (cap_nodes) next node of the same hash chain, or GSTACK_NONE */
    size_t n_nodes, cap_nodes;
    uint32_t *buckets;     /* (cap_nodes) first node of each chain, or GSTACK_NONE */
    uint32_t *heads;       /* (cap_heads) top nodes of the stacks of every level, one level after another */
    size_t n_heads, cap_heads;
    /* one expansion: the (position, parent) pairs already expanded while making the current
     * level, valid where seen_stamp equals stamp, and the pairs still to expand */
    uint64_t *seen_pair;
    uint32_t *seen_stamp;
    size_t seen_cap, seen_n;
    uint32_t stamp;
    uint64_t *todo;
    size_t n_todo, cap_todo;
    size_t step_work;      /* expansion steps the last level made took (tests bound it) */
    int end_pushed;        /* the current level holds GSTACK_NONE */
    int failed;            /* GSTACKS_*: results are incomplete */
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
/* Forget every head and node made after the first n_heads heads and n_nodes nodes. */
void llmm__gstacks_truncate_to(gstacks *gs, size_t n_heads, size_t n_nodes);
/* Copy the stacks of levels[0 .. n_levels) into a fresh pool of their own, in that order,
 * dropping every other node: what a state keeps between tokens. Replaces gs's contents; each
 * levels[i] becomes its copy. 0 when out of memory: gs and levels are then unchanged. */
int llmm__gstacks_compact(gstacks *gs, glevel *levels, size_t n_levels);
/* Whether the text so far may end here: a finished stack and no character in progress. */
int llmm__glevel_can_end(const gstacks *gs, const glevel *level);
/* Whether some stack may take more input. */
int llmm__glevel_can_continue(const gstacks *gs, const glevel *level);
/* Longest key of a level, in words: the stacks of a level may be many and deep, and a key that
 * long is not worth caching (its walk's cost per byte is bounded anyway). */
#define GLEVEL_KEY_MAX (1u << 20)

/* The level as a canonical key (each stack's positions top to bottom, UINT32_MAX after each,
 * then the partial character): appended to key[*n..], grown through gs->alloc. 0 when out of
 * memory or longer than GLEVEL_KEY_MAX words. */
int llmm__glevel_key(const gstacks *gs, const glevel *level, uint32_t **key, size_t *n, size_t *cap);
/* The status of a failed level (gs->failed set) with its message in d, doing naming the call's
 * work ("advancing the grammar"); clears gs->failed. NO_MEMORY, or INVALID_ARG when a level
 * would pass GSTACK_STEP_MAX. */
llmm_status llmm__gstacks_failure(gstacks *gs, llmm_diag *d, const char *doing);
/* Copy src's pool and heads into dst (initialized for the same grammar). 0 on failure. */
int llmm__gstacks_copy(gstacks *dst, const gstacks *src);

#endif
