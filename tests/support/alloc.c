#include "support/alloc.h"

#include <stdarg.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdlib.h>

void *xmalloc(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) fail_msg("out of memory (%zu bytes)", bytes);
    return p;
}

void *xcalloc(size_t n, size_t size) {
    void *p = n && size ? calloc(n, size) : calloc(1, 1);
    if (!p) fail_msg("out of memory (%zu x %zu bytes)", n, size);
    return p;
}
