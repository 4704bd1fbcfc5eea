#include "support/alloc_hooks.h"

#include <stdlib.h>

static void *aligned(size_t size) {
    void *p = NULL;
    return posix_memalign(&p, 64, size) == 0 ? p : NULL;
}

static void *fail_alloc(void *user, size_t size) {
    failing_alloc *f = user;
    if (f->allowed <= 0) {
        f->refused++;
        return NULL;
    }
    f->allowed--;
    return aligned(size);
}

static void plain_free(void *user, void *ptr) {
    (void)user;
    free(ptr);
}

static void *count_alloc(void *user, size_t size) {
    ((counting_alloc *)user)->allocs++;
    ((counting_alloc *)user)->bytes += size;
    return aligned(size);
}

static void count_free(void *user, void *ptr) {
    ((counting_alloc *)user)->frees++;
    free(ptr);
}

llmm_allocator failing_allocator(failing_alloc *f) { return (llmm_allocator){fail_alloc, plain_free, f}; }
llmm_allocator counting_allocator(counting_alloc *c) { return (llmm_allocator){count_alloc, count_free, c}; }
