#define _DEFAULT_SOURCE /* madvise */
#include "common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define LLMM_ALIGN 64

void *llmm__mem_alloc(const llmm_allocator *alloc, size_t size) {
    if (size == 0) size = 1;
    if (alloc && alloc->alloc) return alloc->alloc(alloc->user, size);
    void *p = NULL;
    if (posix_memalign(&p, LLMM_ALIGN, size) != 0) return NULL;
    return p;
}

void *llmm__mem_calloc(const llmm_allocator *alloc, size_t count, size_t size) {
    size_t bytes;
    if (!size_mul_ok(count, size, &bytes)) return NULL;
    void *p = llmm__mem_alloc(alloc, bytes);
    if (p) memset(p, 0, bytes);
    return p;
}

void llmm__mem_free(const llmm_allocator *alloc, void *ptr) {
    if (!ptr) return;
    if (alloc && alloc->free) {
        alloc->free(alloc->user, ptr);
        return;
    }
    free(ptr);
}

void *llmm__mem_grow(const llmm_allocator *alloc, void *ptr, size_t old_size, size_t new_size) {
    void *p = llmm__mem_alloc(alloc, new_size);
    if (!p) return NULL;
    if (ptr) {
        memcpy(p, ptr, LLMM_MIN(old_size, new_size));
        llmm__mem_free(alloc, ptr);
    }
    return p;
}

llmm_status llmm__mem_reserve(const llmm_allocator *alloc, void **items, size_t *cap, size_t need, size_t elem_size) {
    if (need <= *cap) return LLMM_OK;
    size_t new_cap = *cap ? *cap : 16, bytes, old_bytes = *cap * elem_size;
    while (new_cap < need) {
        if (new_cap > SIZE_MAX / 2) return LLMM_ERR_NO_MEMORY;
        new_cap *= 2;
    }
    if (!size_mul_ok(new_cap, elem_size, &bytes)) return LLMM_ERR_NO_MEMORY;
    void *p = llmm__mem_grow(alloc, *items, old_bytes, bytes);
    if (!p) return LLMM_ERR_NO_MEMORY;
    *items = p;
    *cap = new_cap;
    return LLMM_OK;
}

void llmm__mem_populate(const void *p, size_t n, int write) {
#if defined(MADV_POPULATE_WRITE) && defined(MADV_POPULATE_READ)
    const long page_l = sysconf(_SC_PAGESIZE);
    const uintptr_t page = page_l > 0 ? (uintptr_t)page_l : 4096;
    const uintptr_t begin = (uintptr_t)p / page * page, end = ((uintptr_t)p + n + page - 1) / page * page;
    /* advice only: where it fails the pages fault in one by one */
    if (end > begin) (void)madvise((void *)begin, end - begin, write ? MADV_POPULATE_WRITE : MADV_POPULATE_READ);
#else
    (void)p;
    (void)n;
    (void)write;
#endif
}

char *llmm__mem_strndup(const llmm_allocator *alloc, const char *s, size_t len) {
    if (len == SIZE_MAX) return NULL;
    char *p = llmm__mem_alloc(alloc, len + 1);
    if (!p) return NULL;
    if (len) memcpy(p, s, len);
    p[len] = '\0';
    return p;
}

llmm_status llmm__diag_fail(llmm_diag *d, llmm_status status, const char *fmt, ...) {
    if (d) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(d->msg, sizeof d->msg, fmt, ap);
        va_end(ap);
    }
    return status;
}

void llmm__log_msg(const llmm_logger *logger, llmm_log_level level, const char *fmt, ...) {
    if (!logger || !logger->fn || level > logger->level) return;
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    logger->fn(logger->user, level, buf);
}

double llmm__time_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

int llmm__struct_import(void *ours, size_t our_size, const void *theirs, size_t min_size) {
    uint32_t their_size;
    memcpy(&their_size, theirs, sizeof their_size);
    if (their_size < min_size) return 0;
    memcpy(ours, theirs, LLMM_MIN((size_t)their_size, our_size));
    uint32_t keep = (uint32_t)our_size;
    memcpy(ours, &keep, sizeof keep);
    return 1;
}

int llmm__struct_export(void *theirs, const void *ours, size_t our_size, size_t min_size) {
    uint32_t their_size;
    memcpy(&their_size, theirs, sizeof their_size);
    if (their_size < min_size) return 0;
    memcpy(theirs, ours, LLMM_MIN((size_t)their_size, our_size));
    memcpy(theirs, &their_size, sizeof their_size);
    return 1;
}
