/* Allocation in tests: the test's own buffers, never NULL. A failed allocation fails the running
 * cmocka test (naming the size) instead of crashing it later. (Allocators handed to the library,
 * failing or counting, are alloc_hooks.h's.) C and C++. */
#ifndef LLMM_TEST_SUPPORT_ALLOC_H
#define LLMM_TEST_SUPPORT_ALLOC_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* malloc(bytes), at least 1 byte (so 0 gives a pointer to free, not NULL). */
void *xmalloc(size_t bytes);
/* calloc(n, size), at least 1 byte, zeroed. */
void *xcalloc(size_t n, size_t size);

#ifdef __cplusplus
}
#endif

#endif
