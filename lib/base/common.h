/* Shared internals: allocation through the app's hook, diagnostics, logging. */
#ifndef LLMM_COMMON_H
#define LLMM_COMMON_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "llmmini.h"

#define LLMM_UNUSED(x) ((void)(x))
#define LLMM_MIN(a, b) ((a) < (b) ? (a) : (b))
#define LLMM_MAX(a, b) ((a) > (b) ? (a) : (b))

/* Every host allocation goes through these so an app's allocator sees them all.
 * alloc == NULL means the C library (64-byte aligned, so SIMD loads may assume it). */
void *llmm__mem_alloc(const llmm_allocator *alloc, size_t size);
/* Zeroed array of count elements; NULL on overflow of count * size. */
void *llmm__mem_calloc(const llmm_allocator *alloc, size_t count, size_t size);
void llmm__mem_free(const llmm_allocator *alloc, void *ptr);
/* Grow a buffer from old_size to new_size bytes, keeping its contents. On failure the old
 * buffer is untouched and NULL is returned. */
void *llmm__mem_grow(const llmm_allocator *alloc, void *ptr, size_t old_size, size_t new_size);
/* Make room for need elements of elem_size in a growable array, doubling its capacity
 * (at least 16). *items and *cap change only on success. */
llmm_status llmm__mem_reserve(const llmm_allocator *alloc, void **items, size_t *cap, size_t need, size_t elem_size);
/* Fault in the pages of [p, p + n) in one call, for writing (fresh memory) or for reading (a
 * file mapping): one system call instead of a fault per page. Advice only: where the kernel
 * lacks it the pages fault in one by one when touched. */
void llmm__mem_populate(const void *p, size_t n, int write);
/* NUL-terminated copy of len bytes. */
char *llmm__mem_strndup(const llmm_allocator *alloc, const char *s, size_t len);

/* Where a failing internal call writes what went wrong, for llmm_*_last_error. */
typedef struct llmm_diag {
    char msg[512];
} llmm_diag;

/* Format the message into d (if not NULL) and return status: `return llmm__diag_fail(d, ...)`. */
llmm_status llmm__diag_fail(llmm_diag *d, llmm_status status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

typedef struct llmm_logger {
    llmm_log_fn fn;
    void *user;
    llmm_log_level level;
} llmm_logger;

void llmm__log_msg(const llmm_logger *logger, llmm_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Monotonic wall clock in milliseconds. */
double llmm__time_now_ms(void);

/* Checked size arithmetic: return 0 on overflow, else store the result. */
static inline int size_mul_ok(size_t a, size_t b, size_t *out) {
    if (a != 0 && b > SIZE_MAX / a) return 0;
    *out = a * b;
    return 1;
}

/* Size-prefixed structs (see the ABI rules in llmmini.h). The caller's struct may be older
 * (smaller) or newer (larger) than ours.
 * llmm__struct_import: `ours` holds defaults; copy the prefix the caller's struct covers over them.
 * Returns 0 when theirs is smaller than min_size (the first public version's size).
 * llmm__struct_export: copy our filled struct into the caller's, as far as theirs reaches, keeping
 * their size field. Returns 0 when theirs is smaller than min_size. */
int llmm__struct_import(void *ours, size_t our_size, const void *theirs, size_t min_size);
int llmm__struct_export(void *theirs, const void *ours, size_t our_size, size_t min_size);

#endif
