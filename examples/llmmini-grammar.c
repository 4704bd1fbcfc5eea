/* llmmini-grammar: check texts against a GBNF grammar or a JSON Schema, and measure what
 * masking costs: for every byte position of a text, the time of a full token mask (the first
 * time a state is met, and again from the cache) and of checking one token. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli_files.h"
#include "llmmini.h"

static void usage(FILE *out) {
    fprintf(out,
            "usage: llmmini-grammar (--grammar FILE | --json-schema FILE) [-m MODEL] [--root NAME] TEXT_FILE...\n"
            "       llmmini-grammar (--grammar FILE | --json-schema FILE) -m MODEL --bench TEXT_FILE\n"
            "  TEXT_FILE...   print 'ok' or where each file leaves the grammar; exit status 1 if any does\n"
            "  --bench FILE   time a full mask of the model's vocabulary at every byte position of FILE\n"
            "                 (uncached, then cached) and the check of a single token\n");
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* 0 when the whole text is a sentence of g; else 1 with the reason printed. */
static int check_text(const llmm_grammar *g, const char *path) {
    size_t len = 0;
    char *text = cli_read_file("llmmini-grammar", path, &len);
    if (!text) return 1;
    llmm_grammar_state *s = NULL;
    int bad = 1, can_end = 0;
    if (llmm_grammar_state_create(g, &s) == LLMM_OK) {
        size_t at = 0;
        while (at < len && llmm_grammar_state_accept_bytes(s, text + at, 1) == LLMM_OK) at++;
        llmm_grammar_state_can_end(s, &can_end, NULL);
        if (at < len) printf("%s: byte %zu does not fit the grammar\n", path, at);
        else if (!can_end) printf("%s: ends before the grammar does\n", path);
        else printf("%s: ok\n", path), bad = 0;
    }
    llmm_grammar_state_free(s);
    free(text);
    return bad;
}

static int bench(const llmm_grammar *g, const llmm_model *m, const char *path) {
    size_t len = 0;
    char *text = cli_read_file("llmmini-grammar", path, &len);
    llmm_model_info info = {.size = sizeof info};
    if (!text || llmm_model_get_info(m, &info)) return free(text), 1;
    float *logits = malloc(info.n_vocab * sizeof *logits);
    llmm_grammar_state *s = NULL;
    if (!logits || llmm_grammar_state_create(g, &s)) return free(text), free(logits), 1;
    double miss_sum = 0, miss_max = 0, hit_sum = 0, check_sum = 0;
    size_t positions = 0;
    for (size_t at = 0; at <= len; at++) {
        for (size_t i = 0; i < info.n_vocab; i++) logits[i] = 0.0f;
        double t0 = now_ms();
        llmm_grammar_state_mask(s, logits, info.n_vocab);
        double t1 = now_ms();
        llmm_grammar_state_mask(s, logits, info.n_vocab);
        double t2 = now_ms();
        int allowed;
        llmm_grammar_state_allows(s, (llmm_token)(at * 7919 % info.n_vocab), &allowed);
        double t3 = now_ms();
        size_t n_allowed = 0;
        for (size_t i = 0; i < info.n_vocab; i++) n_allowed += logits[i] == 0.0f;
        printf("byte %4zu  mask %8.3f ms (cached %6.3f)  check %6.4f ms  allowed %zu\n", at, t1 - t0, t2 - t1, t3 - t2,
               n_allowed);
        miss_sum += t1 - t0;
        miss_max = t1 - t0 > miss_max ? t1 - t0 : miss_max;
        hit_sum += t2 - t1;
        check_sum += t3 - t2;
        positions++;
        if (at < len && llmm_grammar_state_accept_bytes(s, text + at, 1)) {
            printf("byte %zu does not fit the grammar\n", at);
            break;
        }
    }
    printf("%zu positions: first mask %.3f ms mean, %.3f ms max (cached states included); cached %.3f ms; "
           "token check %.4f ms\n",
           positions, miss_sum / (double)positions, miss_max, hit_sum / (double)positions, check_sum / (double)positions);
    llmm_grammar_state_free(s);
    free(logits);
    free(text);
    return 0;
}

int main(int argc, char **argv) {
    const char *grammar_path = NULL, *schema_path = NULL, *model_path = NULL, *root = "root", *bench_path = NULL;
    int first_text = argc;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--grammar") && v) grammar_path = argv[++i];
        else if (!strcmp(a, "--json-schema") && v) schema_path = argv[++i];
        else if (!strcmp(a, "-m") && v) model_path = argv[++i];
        else if (!strcmp(a, "--root") && v) root = argv[++i];
        else if (!strcmp(a, "--bench") && v) bench_path = argv[++i];
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) return usage(stdout), 0;
        else if (a[0] == '-') return usage(stderr), 2;
        else {
            first_text = i;
            break;
        }
    }
    if (!grammar_path == !schema_path || (bench_path && !model_path) || (!bench_path && first_text == argc))
        return usage(stderr), 2;
    llmm_model *m = NULL;
    if (model_path) {
        llmm_model_params mp;
        llmm_model_params_default(&mp, sizeof mp);
        mp.vocab_only = 1;
        llmm_status st = llmm_model_load(model_path, &mp, &m);
        if (st) return fprintf(stderr, "llmmini-grammar: cannot load '%s': %s\n", model_path, llmm_status_str(st)), 1;
    }
    size_t len = 0;
    char *text = cli_read_file("llmmini-grammar", grammar_path ? grammar_path : schema_path, &len), err[512] = "";
    llmm_grammar *g = NULL;
    llmm_status st = LLMM_ERR_IO;
    double t0 = now_ms();
    if (text)
        st = grammar_path ? llmm_grammar_create(m, text, len, root, &g, err, sizeof err)
                          : llmm_grammar_from_json_schema(m, text, len, &g, err, sizeof err);
    free(text);
    int rc = 1;
    if (st) {
        fprintf(stderr, "llmmini-grammar: %s: %s (%s)\n", grammar_path ? grammar_path : schema_path, err,
                llmm_status_str(st));
    } else if (bench_path) {
        printf("compiled with the token table in %.1f ms\n", now_ms() - t0);
        rc = bench(g, m, bench_path);
    } else {
        rc = 0;
        for (int i = first_text; i < argc; i++) rc |= check_text(g, argv[i]);
    }
    llmm_grammar_free(g);
    llmm_model_free(m);
    return rc;
}
