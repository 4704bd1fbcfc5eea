/* llmmini-perplexity: the perplexity of a text under a model, teacher-forced in windows of
 * N_CTX tokens; optionally saves a compact summary of every position's logits, or compares the
 * run with a saved one (KL divergence, top-1 agreement, logit differences). docs/tools.md. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../examples/cli_names.h"
#include "offline/fidelity.h"
#include "llmmini.h"

typedef struct options {
    const char *model, *text_path, *save_path, *compare_path;
    int n_ctx, n_threads, n_batch, top_k;
    llmm_backend_kind backend;
    llmm_kv_type kv_type;
} options;

static void usage(FILE *out) {
    fprintf(out,
            "usage: llmmini-perplexity -m MODEL -f TEXT [-c N_CTX] [-b N_BATCH] [--kv-type T] [--backend B]\n"
            "                          [--threads N] [--save-logits FILE [--top-k K]] [--compare FILE]\n"
            "  -c N_CTX            window in tokens, BOS included (default 512, at most the model's context)\n"
            "  -b N_BATCH          prefill chunk in tokens (default N_CTX: one chunk a window)\n"
            "  --kv-type T         KV cache element type: f16 (default), q8 or f32\n"
            "  --backend B         auto (default), cpu or cuda\n"
            "  --threads N, -t N   CPU threads (default: physical cores)\n"
            "  --save-logits FILE  write each position's top-K logits and log-sum-exp (docs/tools.md)\n"
            "  --top-k K           logits kept a position by --save-logits (default 32)\n"
            "  --compare FILE      compare with a saved run of the same text, vocabulary and N_CTX:\n"
            "                      KL divergence (mean, p99, max), top-1 agreement, max |logit diff|\n"
            "The CPU kernel table follows LLMM_CPU_KERNELS (scalar, avx2, avxvnni, avx512, neon, dotprod).\n");
}

static int parse_int(const char *s, int *out) {
    char *end;
    errno = 0;
    const long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < 0 || v > 1 << 30) return 0;
    *out = (int)v;
    return 1;
}

/* Returns 0 on success, 2 on a usage error (message printed). */
static int parse_args(int argc, char **argv, options *o) {
    *o = (options){.n_ctx = 512, .top_k = 32, .kv_type = LLMM_KV_F16};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        int *num = !strcmp(a, "-c") ? &o->n_ctx : !strcmp(a, "-b") ? &o->n_batch
                   : !strcmp(a, "-t") || !strcmp(a, "--threads") ? &o->n_threads
                   : !strcmp(a, "--top-k") ? &o->top_k : NULL;
        if (num) {
            if (!val || !parse_int(val, num)) {
                fprintf(stderr, "llmmini-perplexity: %s needs a non-negative number\n", a);
                return 2;
            }
            i++;
        } else if (!strcmp(a, "-m") && val) o->model = argv[++i];
        else if (!strcmp(a, "-f") && val) o->text_path = argv[++i];
        else if (!strcmp(a, "--save-logits") && val) o->save_path = argv[++i];
        else if (!strcmp(a, "--compare") && val) o->compare_path = argv[++i];
        else if (!strcmp(a, "--kv-type") && val) {
            if (!parse_kv_type(argv[++i], &o->kv_type)) {
                fprintf(stderr, "llmmini-perplexity: --kv-type must be f16, q8 or f32, not '%s'\n", argv[i]);
                return 2;
            }
        } else if (!strcmp(a, "--backend") && val) {
            if (!parse_backend(argv[++i], &o->backend)) {
                fprintf(stderr, "llmmini-perplexity: --backend must be auto, cpu or cuda, not '%s'\n", argv[i]);
                return 2;
            }
        } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            exit(0);
        } else {
            fprintf(stderr, "llmmini-perplexity: unknown or incomplete option '%s' (see --help)\n", a);
            return 2;
        }
    }
    if (!o->model || !o->text_path) {
        fprintf(stderr, "llmmini-perplexity: need -m MODEL and -f TEXT (see --help)\n");
        return 2;
    }
    if (o->n_ctx < 2 || o->top_k < 1) {
        fprintf(stderr, "llmmini-perplexity: -c must be >= 2 and --top-k >= 1\n");
        return 2;
    }
    return 0;
}

static char *read_text(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = NULL;
    size_t cap = 0;
    *len = 0;
    for (;;) {
        if (*len + 65536 > cap) {
            char *p = realloc(buf, cap = 2 * cap + 65536);
            if (!p) break;
            buf = p;
        }
        const size_t got = fread(buf + *len, 1, cap - *len, f);
        *len += got;
        if (got == 0) {
            fclose(f);
            return buf;
        }
    }
    fclose(f);
    free(buf);
    return NULL;
}

/* The text's tokens (no BOS: llmm__fidelity_run gives every window its own) into *out. */
static llmm_status tokenize_file(const llmm_model *m, const char *path, llmm_token **out, size_t *n) {
    size_t len;
    char *text = read_text(path, &len);
    if (!text) {
        fprintf(stderr, "llmmini-perplexity: cannot read '%s': %s\n", path, strerror(errno));
        return LLMM_ERR_IO;
    }
    llmm_status st = llmm_tokenize(m, text, len, 0, NULL, 0, n);
    if (st == LLMM_ERR_BUFFER_TOO_SMALL || st == LLMM_OK) {
        *out = malloc((*n + 1) * sizeof **out);
        st = *out ? llmm_tokenize(m, text, len, 0, *out, *n, n) : LLMM_ERR_NO_MEMORY;
    }
    free(text);
    return st;
}

/* BOS when the model's tokenizer adds one, else -1. */
static llmm_token model_bos(const llmm_model *m) {
    llmm_token ids[4];
    size_t n = 0;
    if (llmm_tokenize(m, "", 0, LLMM_TOKENIZE_ADD_SPECIAL, ids, 4, &n) || n == 0) return -1;
    return ids[0];
}

/* Every position goes to the records and, with --compare, to the comparison. */
typedef struct run_sinks {
    fidelity_records *records;
    fidelity_compare *compare;
} run_sinks;

static llmm_status sink_row(void *user, size_t index, const float *logits, size_t n_vocab) {
    run_sinks *s = user;
    llmm_status st = llmm__fidelity_records_put(s->records, index, logits, n_vocab);
    if (!st && s->compare) st = llmm__fidelity_compare_put(s->compare, index, logits, n_vocab);
    return st;
}

static int show_progress(void *user, size_t done, size_t total) {
    const fidelity_records *r = user;
    fprintf(stderr, "\r[%zu/%zu tokens] perplexity so far %.4f", done, total, llmm__fidelity_records_perplexity(r));
    return 0;
}

static int fail(const char *what, llmm_status st, const char *detail) {
    fprintf(stderr, "llmmini-perplexity: %s: %s%s%s\n", what, llmm_status_str(st), detail && *detail ? ": " : "",
            detail ? detail : "");
    return 1;
}

/* Load the saved run and check that it was made on the same text, vocabulary and windows. */
static int load_reference(const options *o, const fidelity_file_info *mine, const llmm_token *text, size_t n,
                          fidelity_records *ref) {
    fidelity_file_info theirs;
    llmm_diag d = {""};
    llmm_status st = llmm__fidelity_load(o->compare_path, ref, &theirs, &d);
    if (st) return fail("--compare", st, d.msg);
    char why[96] = "";
    if (theirs.vocab_hash != mine->vocab_hash) snprintf(why, sizeof why, "another vocabulary");
    else if (theirs.window != mine->window) snprintf(why, sizeof why, "-c %u (this run: -c %u)", theirs.window, mine->window);
    else if (theirs.bos != mine->bos) snprintf(why, sizeof why, "another BOS");
    else if (ref->n != n || memcmp(ref->target, text, n * sizeof *text)) snprintf(why, sizeof why, "another text");
    if (*why) {
        fprintf(stderr, "llmmini-perplexity: %s was made with %s\n", o->compare_path, why);
        llmm__fidelity_records_free(ref);
        return 1;
    }
    if (theirs.model_hash != mine->model_hash)
        fprintf(stderr, "llmmini-perplexity: note: %s comes from another model file\n", o->compare_path);
    return 0;
}

static void print_summary(fidelity_summary s) {
    printf("compared positions: %zu\n", s.n);
    printf("perplexity: reference %.4f, this run %.4f (ln ratio %+.5f)\n", s.ppl_ref, s.ppl_test,
           log(s.ppl_test / s.ppl_ref));
    printf("KL divergence (nats): mean %.3e, p99 %.3e, max %.3e\n", s.kld_mean, s.kld_p99, s.kld_max);
    printf("top-1 agreement: %.3f %%\n", 100 * s.top1_agree);
    printf("max |logit diff| over the reference's top-k: %.4f\n", s.max_dlogit);
    printf("same top token as the text: reference %.3f %%, this run %.3f %%\n", 100 * s.ref_top1_text,
           100 * s.test_top1_text);
}

static int measure(const options *o, llmm_model *m, llmm_context *ctx, const llmm_token *text, size_t n) {
    llmm_model_info info = {.size = sizeof info};
    llmm_model_get_info(m, &info);
    fidelity_file_info mine = {.window = (uint32_t)o->n_ctx, .bos = model_bos(m)};
    llmm_status st = llmm__fidelity_model_fingerprint(m, &mine);
    if (st) return fail("fingerprint", st, NULL);
    fidelity_records ref = {0}, rec;
    fidelity_compare cmp = {0};
    if (o->compare_path && load_reference(o, &mine, text, n, &ref)) return 1;
    const uint32_t k = (uint32_t)o->top_k < info.n_vocab ? (uint32_t)o->top_k : info.n_vocab;
    if ((st = llmm__fidelity_records_init(&rec, text, n, k, info.n_vocab)) ||
        (o->compare_path && (st = llmm__fidelity_compare_init(&cmp, &ref)))) {
        llmm__fidelity_records_free(&ref);
        llmm__fidelity_records_free(&rec);
        return fail("memory", st, NULL);
    }
    run_sinks sinks = {&rec, o->compare_path ? &cmp : NULL};
    const fidelity_run_params rp = {.window = (size_t)o->n_ctx, .bos = mine.bos, .feed = FIDELITY_FEED_PREFILL,
                                    .progress = show_progress, .progress_user = &rec};
    st = llmm__fidelity_run(ctx, text, n, &rp, sink_row, &sinks);
    fprintf(stderr, "\n");
    int rc = 0;
    if (st) {
        rc = fail("run failed", st, llmm_context_last_error(ctx));
    } else {
        printf("perplexity: %.4f over %zu tokens (windows of %d, KV %s)\n", llmm__fidelity_records_perplexity(&rec),
               llmm__fidelity_records_count(&rec), o->n_ctx, kv_type_name(o->kv_type));
        if (o->compare_path) print_summary(llmm__fidelity_compare_summary(&cmp));
        llmm_diag d = {""};
        if (o->save_path && (st = llmm__fidelity_save(o->save_path, &rec, &mine, &d))) rc = fail("--save-logits", st, d.msg);
    }
    llmm__fidelity_compare_free(&cmp);
    llmm__fidelity_records_free(&ref);
    llmm__fidelity_records_free(&rec);
    return rc;
}

int main(int argc, char **argv) {
    options o;
    int rc = parse_args(argc, argv, &o);
    if (rc) return rc;
    char err[512] = "";
    llmm_model_params mp;
    llmm_model_params_default(&mp, sizeof mp);
    mp.error_buf = err;
    mp.error_buf_size = sizeof err;
    llmm_model *m = NULL;
    llmm_status st = llmm_model_load(o.model, &mp, &m);
    if (st) return fail("cannot load the model", st, err);
    llmm_model_info info = {.size = sizeof info};
    llmm_model_get_info(m, &info);
    if (info.n_ctx_train && (uint32_t)o.n_ctx > info.n_ctx_train) {
        fprintf(stderr, "llmmini-perplexity: -c %d exceeds the model's context (%u)\n", o.n_ctx, info.n_ctx_train);
        llmm_model_free(m);
        return 2;
    }
    llmm_token *text = NULL;
    size_t n = 0;
    if ((st = tokenize_file(m, o.text_path, &text, &n)) || n < 2) {
        free(text);
        llmm_model_free(m);
        return st ? fail("tokenizing the text", st, NULL) : fail("the text", LLMM_ERR_INVALID_ARG, "under 2 tokens");
    }
    llmm_context_params cp;
    llmm_context_params_default(&cp, sizeof cp);
    cp.n_ctx = (uint32_t)o.n_ctx;
    cp.n_batch = (uint32_t)(o.n_batch ? o.n_batch : o.n_ctx);
    cp.n_threads = o.n_threads;
    cp.kv_type = o.kv_type;
    cp.backend = o.backend;
    llmm_context *ctx = NULL;
    if ((st = llmm_context_create(m, &cp, &ctx))) {
        rc = fail("cannot create the context", st, NULL);
    } else {
        fprintf(stderr, "%zu tokens, windows of %d, KV %s, backend %s\n", n, o.n_ctx, kv_type_name(o.kv_type),
                backend_name(o.backend));
        rc = measure(&o, m, ctx, text, n);
    }
    llmm_context_free(ctx);
    free(text);
    llmm_model_free(m);
    return rc;
}
