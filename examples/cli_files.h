/* Reading a whole text file (a grammar, a schema, a text to check) for the example programs. */
#ifndef LLMM_EXAMPLES_CLI_FILES_H
#define LLMM_EXAMPLES_CLI_FILES_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The file at path, NUL-terminated, its length in *len; NULL with a message on stderr, prefixed
 * by tool, when it cannot be read. Free with free(). */
static inline char *cli_read_file(const char *tool, const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "%s: cannot open '%s': %s\n", tool, path, strerror(errno));
        return NULL;
    }
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    for (size_t got; buf && (got = fread(buf + n, 1, cap - n - 1, f)) > 0;) {
        n += got;
        if (n + 1 == cap) {
            char *grown = realloc(buf, cap *= 2);
            if (!grown) free(buf);
            buf = grown;
        }
    }
    fclose(f);
    if (!buf) fprintf(stderr, "%s: out of memory reading '%s'\n", tool, path);
    else buf[n] = '\0';
    *len = n;
    return buf;
}

#endif
