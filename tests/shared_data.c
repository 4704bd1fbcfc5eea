#include "shared_data.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *shared_path(char *buf, size_t size, const char *rel) {
    const char *root = getenv("LLMM_SHARED");
    snprintf(buf, size, "%s/%s", root && *root ? root : "../shared", rel);
    return buf;
}

char *read_whole_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    if (fseek(f, 0, SEEK_END) != 0) {
        fclose(f);
        return NULL;
    }
    long n = ftell(f);
    rewind(f);
    char *buf = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (!buf) return NULL;
    buf[n] = '\0';
    if (len) *len = (size_t)n;
    return buf;
}

#define SEPARATOR "\n__ggml_vocab_test__\n"

int vocab_cases_load(const char *inp_path, const char *out_path, vocab_cases *vc) {
    memset(vc, 0, sizeof *vc);
    size_t inp_len, out_len;
    vc->inp_buf = read_whole_file(inp_path, &inp_len);
    vc->out_buf = read_whole_file(out_path, &out_len);
    if (!vc->inp_buf || !vc->out_buf) goto fail;
    size_t cap = 1;
    for (const char *p = vc->inp_buf; (p = strstr(p, SEPARATOR)); p++) cap++;
    vc->text = calloc(cap, sizeof *vc->text);
    vc->text_len = calloc(cap, sizeof *vc->text_len);
    vc->expected = calloc(cap, sizeof *vc->expected);
    if (!vc->text || !vc->text_len || !vc->expected) goto fail;
    char *p = vc->inp_buf, *end = vc->inp_buf + inp_len;
    while (p < end) {
        char *sep = strstr(p, SEPARATOR);
        size_t n = sep ? (size_t)(sep - p) : (size_t)(end - p);
        vc->text[vc->n] = p;
        vc->text_len[vc->n] = n;
        vc->n++;
        if (!sep) break;
        p = sep + strlen(SEPARATOR);
    }
    char *line = vc->out_buf;
    for (size_t i = 0; i < vc->n; i++) {
        if (!line || line >= vc->out_buf + out_len) goto fail;
        char *nl = strchr(line, '\n');
        if (nl) *nl = '\0';
        vc->expected[i] = line;
        line = nl ? nl + 1 : NULL;
    }
    return 0;
fail:
    vocab_cases_free(vc);
    return -1;
}

void vocab_cases_free(vocab_cases *vc) {
    free(vc->inp_buf);
    free(vc->out_buf);
    free(vc->text);
    free(vc->text_len);
    free(vc->expected);
    memset(vc, 0, sizeof *vc);
}
