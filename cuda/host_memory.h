/* Host memory of the CUDA module: from the app's allocator hooks (llmm_model_params.allocator,
 * handed over in llmm_backend_config.alloc) when it set them, else malloc, as the core does;
 * the module links no part of the core, so it cannot call the core's wrappers. */
#ifndef LLMM_CUDA_HOST_MEMORY_H
#define LLMM_CUDA_HOST_MEMORY_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "llmmini.h"

static inline void *cu_host_alloc(const llmm_allocator *al, size_t bytes) {
    if (al && al->alloc) return al->alloc(al->user, bytes ? bytes : 1);
    return malloc(bytes ? bytes : 1);
}

static inline void cu_host_free(const llmm_allocator *al, void *p) {
    if (!p) return;
    if (al && al->free) al->free(al->user, p);
    else free(p);
}

static inline void *cu_host_calloc(const llmm_allocator *al, size_t n, size_t size) {
    if (size && n > SIZE_MAX / size) return NULL;
    void *p = cu_host_alloc(al, n * size);
    if (p) memset(p, 0, n * size);
    return p;
}

#endif
