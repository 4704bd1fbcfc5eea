/* llmmini-run: generate text from a prompt, streaming it to stdout; stats go to stderr. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llmmini.h"

typedef struct options {
    const char *model, *prompt, *dump_logits;
    int n_predict, n_threads, no_bos, print_ids;
    llmm_sampler_params sampling;
} options;

static void usage(FILE *out) {
    fprintf(out,
            "usage: llmmini-run -m MODEL -p PROMPT [-n N] [--temp T] [--top-k K] [--top-p P] [--min-p P]\n"
            "                   [--seed S] [-t THREADS] [--no-bos] [--ids] [--dump-logits PATH]\n"
            "  -n N               tokens to generate (default 128)\n"
            "  --temp T           temperature; 0 is greedy (default 0.8)\n"
            "  --top-k K          keep the K most likely tokens, 0 = off (default 40)\n"
            "  --top-p P          nucleus sampling, 1 = off (default 0.95)\n"
            "  --min-p P          drop tokens below P x the best probability (default 0.05)\n"
            "  --seed S           random seed (default 0)\n"
            "  -t THREADS         CPU threads (default: physical cores)\n"
            "  --no-bos           do not add BOS to the prompt\n"
            "  --ids              print 'prompt: <ids>' and 'generated: <ids>' instead of text\n"
            "  --dump-logits PATH write the last prompt position's logits, one per line, first\n");
}

static int parse_number(const char *s, double *out) {
    char *end;
    errno = 0;
    *out = strtod(s, &end);
    return errno == 0 && end != s && *end == '\0';
}

/* Returns 0 on success, 2 on a usage error (message printed). */
static int parse_args(int argc, char **argv, options *o) {
    llmm_sampler_params_default(&o->sampling, sizeof o->sampling);
    o->n_predict = 128;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
        double num = 0;
        int takes_number = !strcmp(a, "-n") || !strcmp(a, "--temp") || !strcmp(a, "--top-k") || !strcmp(a, "--top-p") ||
                           !strcmp(a, "--min-p") || !strcmp(a, "--seed") || !strcmp(a, "-t");
        if (takes_number && (!val || !parse_number(val, &num))) {
            fprintf(stderr, "llmmini-run: %s needs a number\n", a);
            return 2;
        }
        if (!strcmp(a, "-m") && val) o->model = argv[++i];
        else if (!strcmp(a, "-p") && val) o->prompt = argv[++i];
        else if (!strcmp(a, "--dump-logits") && val) o->dump_logits = argv[++i];
        else if (!strcmp(a, "-n")) o->n_predict = (int)num, i++;
        else if (!strcmp(a, "--temp")) o->sampling.temperature = (float)num, i++;
        else if (!strcmp(a, "--top-k")) o->sampling.top_k = (int)num, i++;
        else if (!strcmp(a, "--top-p")) o->sampling.top_p = (float)num, i++;
        else if (!strcmp(a, "--min-p")) o->sampling.min_p = (float)num, i++;
        else if (!strcmp(a, "--seed")) o->sampling.seed = (uint64_t)num, i++;
        else if (!strcmp(a, "-t")) o->n_threads = (int)num, i++;
        else if (!strcmp(a, "--no-bos")) o->no_bos = 1;
        else if (!strcmp(a, "--ids")) o->print_ids = 1;
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            exit(0);
        } else {
            fprintf(stderr, "llmmini-run: unknown or incomplete option '%s' (see --help)\n", a);
            return 2;
        }
    }
    if (!o->model || !o->prompt) {
        fprintf(stderr, "llmmini-run: need -m MODEL and -p PROMPT (see --help)\n");
        return 2;
    }
    if (o->n_predict < 0) {
        fprintf(stderr, "llmmini-run: -n must be >= 0\n");
        return 2;
    }
    return 0;
}

static int stream_to_stdout(void *user, const char *bytes, size_t n, int complete_utf8) {
    (void)user;
    fwrite(bytes, 1, n, stdout);
    if (complete_utf8) fflush(stdout);
    return 0;
}

static void print_ids(const char *label, const llmm_token *ids, size_t n) {
    printf("%s:", label);
    for (size_t i = 0; i < n; i++) printf(" %d", ids[i]);
    printf("\n");
}

static llmm_status dump_logits(llmm_context *ctx, const llmm_token *ids, size_t n, const char *path) {
    llmm_status st = llmm_prefill(ctx, 0, ids, n, 0);
    const float *logits;
    size_t n_vocab;
    if (!st) st = llmm_logits(ctx, 0, &logits, &n_vocab);
    if (st) return st;
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "llmmini-run: cannot write '%s': %s\n", path, strerror(errno));
        return LLMM_ERR_IO;
    }
    for (size_t i = 0; i < n_vocab; i++) fprintf(f, "%.6f\n", logits[i]);
    return fclose(f) == 0 ? LLMM_OK : LLMM_ERR_IO;
}

static int fail(const char *what, llmm_status st, const char *detail) {
    fprintf(stderr, "llmmini-run: %s: %s%s%s\n", what, llmm_status_str(st), detail && *detail ? ": " : "",
            detail ? detail : "");
    return 1;
}

static int run(const options *o, llmm_model *m, llmm_context *ctx) {
    uint32_t tok_flags = o->no_bos ? 0 : LLMM_TOKENIZE_ADD_SPECIAL;
    size_t n_prompt = 0;
    llmm_status st = llmm_tokenize(m, o->prompt, strlen(o->prompt), tok_flags, NULL, 0, &n_prompt);
    llmm_token *prompt = malloc((n_prompt + 1) * sizeof *prompt);
    llmm_token *out = malloc(((size_t)o->n_predict + 1) * sizeof *out);
    if (!prompt || !out) {
        free(prompt);
        free(out);
        return fail("memory", LLMM_ERR_NO_MEMORY, NULL);
    }
    st = llmm_tokenize(m, o->prompt, strlen(o->prompt), tok_flags, prompt, n_prompt, &n_prompt);
    if (!st && o->dump_logits) st = dump_logits(ctx, prompt, n_prompt, o->dump_logits);
    llmm_generate_params gp;
    llmm_generate_params_default(&gp, sizeof gp);
    gp.max_tokens = o->n_predict;
    gp.tokenize_flags = tok_flags;
    gp.sampling = &o->sampling;
    gp.on_bytes = o->print_ids ? NULL : stream_to_stdout;
    gp.out_tokens = out;
    gp.out_capacity = (size_t)o->n_predict;
    llmm_generate_stats stats = {.size = sizeof stats};
    if (!st) st = llmm_generate(ctx, o->prompt, &gp, &stats);
    int rc = 0;
    if (st) {
        rc = fail("generation failed", st, llmm_context_last_error(ctx));
    } else {
        if (o->print_ids) {
            print_ids("prompt", prompt, n_prompt);
            print_ids("generated", out, stats.n_generated);
        } else {
            printf("\n");
        }
        static const char *const reasons[] = {"none", "max tokens", "end of text", "stop string", "callback",
                                              "context full"};
        fprintf(stderr,
                "\nload %.1f ms | prompt %zu tokens, %.1f ms (%.1f tok/s) | first token %.1f ms | "
                "generated %zu tokens, %.1f ms (%.1f tok/s) | stop: %s\n",
                stats.load_ms, stats.n_prompt, stats.prompt_ms, stats.prompt_tokens_per_s, stats.first_token_ms,
                stats.n_generated, stats.generate_ms, stats.generate_tokens_per_s, reasons[stats.stop_reason % 6]);
    }
    free(prompt);
    free(out);
    return rc;
}

int main(int argc, char **argv) {
    options o = {0};
    int rc = parse_args(argc, argv, &o);
    if (rc) return rc;
    char err[512] = "";
    llmm_model_params mp;
    llmm_model_params_default(&mp, sizeof mp);
    mp.error_buf = err;
    mp.error_buf_size = sizeof err;
    llmm_model *m = NULL;
    llmm_status st = llmm_model_load(o.model, &mp, &m);
    if (st) return fail("cannot load model", st, err);
    llmm_context_params cp;
    llmm_context_params_default(&cp, sizeof cp);
    cp.n_threads = o.n_threads;
    llmm_context *ctx = NULL;
    st = llmm_context_create(m, &cp, &ctx);
    if (st) {
        llmm_model_last_error(m, err, sizeof err);
        llmm_model_free(m);
        return fail("cannot create context", st, err);
    }
    rc = run(&o, m, ctx);
    llmm_context_free(ctx);
    llmm_model_free(m);
    return rc;
}
