/* Allocators for tests: one that fails after a budget, one that counts. */
#ifndef LLMM_TEST_ALLOC_HOOKS_H
#define LLMM_TEST_ALLOC_HOOKS_H

#include <stddef.h>

#include "llmmini.h"

typedef struct failing_alloc {
    int allowed; /* allocations that succeed before every later one fails */
    int refused; /* allocations refused so far: whether a failure was reached */
} failing_alloc;

typedef struct counting_alloc {
    size_t allocs, frees;
    size_t bytes; /* total requested by alloc (never decreases) */
} counting_alloc;

/* An llmm_allocator over f or c (user points at it). */
llmm_allocator failing_allocator(failing_alloc *f);
llmm_allocator counting_allocator(counting_alloc *c);

#endif
