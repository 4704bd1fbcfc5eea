#include "support/shared_data.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *shared_path(char *buf, size_t size, const char *rel) {
    const char *root = getenv("LLMM_SHARED");
    snprintf(buf, size, "%s/%s", root && *root ? root : "../shared", rel);
    return buf;
}

int under_emulator(void) {
    const char *runner = getenv("TEST_RUNNER");
    return runner && *runner;
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

static size_t parse_ids(const char *text, int32_t *out, size_t cap) {
    size_t n = 0;
    char *end;
    for (const char *p = text; n < cap; p = end) {
        long v = strtol(p, &end, 10);
        if (end == p) break;
        out[n++] = (int32_t)v;
    }
    return n;
}

/* The integers of a JSON array that follows "key": [ ... ]. */
static size_t json_int_array(const char *json, const char *key, int32_t *out, size_t cap) {
    const char *p = strstr(json, key);
    if (!p || !(p = strchr(p, '['))) return 0;
    size_t n = 0;
    char *q = (char *)p + 1;
    while (n < cap && *q && *q != ']') {
        if ((*q >= '0' && *q <= '9') || *q == '-') out[n++] = (int32_t)strtol(q, &q, 10);
        else q++;
    }
    return n;
}

static int load_floats(const char *path, float **out, size_t *n) {
    char *text = read_whole_file(path, NULL);
    if (!text) return -1;
    size_t cap = 1024;
    float *v = malloc(cap * sizeof *v);
    *n = 0;
    char *end;
    for (char *q = text; v; q = end) {
        float x = strtof(q, &end);
        if (end == q) break;
        if (*n == cap) {
            float *grown = realloc(v, (cap *= 2) * sizeof *v);
            if (!grown) free(v);
            v = grown;
            if (!v) break;
        }
        v[(*n)++] = x;
    }
    free(text);
    *out = v;
    return v ? 0 : -1;
}

int golden_load(const char *dir_rel, const char *name, golden_run *g) {
    char rel[512], path[1024];
    memset(g, 0, sizeof *g);
    g->reliable_steps = -1;
    snprintf(rel, sizeof rel, "%s/%s.ids", dir_rel, name);
    char *ids = read_whole_file(shared_path(path, sizeof path, rel), NULL);
    snprintf(rel, sizeof rel, "%s/%s.json", dir_rel, name);
    char *json = read_whole_file(shared_path(path, sizeof path, rel), NULL);
    int rc = -1;
    if (ids && json) {
        char *p = strstr(ids, "prompt:"), *gen = strstr(ids, "generated:");
        if (p) g->n_prompt = parse_ids(p + 7, g->prompt, GOLDEN_MAX_IDS);
        g->n_generated = gen ? parse_ids(gen + 10, g->generated, GOLDEN_MAX_IDS)
                             : json_int_array(json, "\"generated_tokens\"", g->generated, GOLDEN_MAX_IDS);
        const char *rs = strstr(json, "\"reliable_steps\"");
        if (rs && (rs = strchr(rs, ':'))) g->reliable_steps = strtol(rs + 1, NULL, 10);
        snprintf(rel, sizeof rel, "%s/%s.logits", dir_rel, name);
        rc = p ? load_floats(shared_path(path, sizeof path, rel), &g->logits, &g->n_logits) : -1;
    }
    free(ids);
    free(json);
    return rc;
}

void golden_free(golden_run *g) {
    free(g->logits);
    g->logits = NULL;
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

int vocab_case_matches(const vocab_cases *vc, size_t i, const int32_t *ids, size_t n) {
    char *end;
    size_t k = 0;
    for (const char *p = vc->expected[i];; p = end) {
        const long v = strtol(p, &end, 10);
        if (end == p) break;
        if (k >= n || ids[k] != v) return 0;
        k++;
    }
    return k == n;
}
