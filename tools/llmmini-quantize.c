/* llmmini-quantize: rewrite a GGUF model with its weights in another type, or in one of the
 * reference engine's mixed recipes (q4_k_m, q5_k_m). The rules for which tensor gets which
 * type are in lib/offline/quantize_file.c and docs/quantization.md. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "format/gguf.h"
#include "format/quant.h"
#include "offline/quantize_file.h"

typedef struct options {
    const char *in, *out;
    const llmm_quant_recipe *recipe;
    int n_threads;
} options;

static int usage(int rc) {
    FILE *f = rc ? stderr : stdout;
    fprintf(f, "usage: llmmini-quantize IN.gguf OUT.gguf TYPE [--threads N]\n"
               "Writes IN with its 2-D weights converted to TYPE; norms stay F32, metadata is copied.\n"
               "TYPE:");
    for (size_t i = 0; i < llmm__quant_recipe_count(); i++) fprintf(f, " %s", llmm__quant_recipe_at(i)->name);
    fprintf(f, "\n  q4_k_m, q5_k_m: the reference engine's mixes (output and some attn_v/ffn_down in q6_k)\n"
               "  --threads N     convert rows with N threads (default: all online CPUs)\n");
    return rc;
}

static int default_threads(void) {
    const long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > 64 ? 64 : (int)n;
}

static int parse_threads(const char *s, int *out) {
    char *end;
    const long n = strtol(s, &end, 10);
    if (end == s || *end || n < 1 || n > 256) {
        fprintf(stderr, "llmmini-quantize: --threads wants a number in 1..256, not '%s'\n", s);
        return -1;
    }
    *out = (int)n;
    return 0;
}

static int parse_args(int argc, char **argv, options *o) {
    const char *pos[3];
    int n_pos = 0;
    o->n_threads = default_threads();
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(0);
            return -1;
        }
        if (!strcmp(argv[i], "--threads") || !strcmp(argv[i], "-t")) {
            if (parse_threads(i + 1 < argc ? argv[++i] : "", &o->n_threads)) return 2;
        } else if (n_pos < 3) {
            pos[n_pos++] = argv[i];
        } else {
            return usage(2);
        }
    }
    if (n_pos != 3) return usage(2);
    o->in = pos[0];
    o->out = pos[1];
    o->recipe = llmm__quant_recipe_find(pos[2]);
    if (!o->recipe) {
        fprintf(stderr, "llmmini-quantize: unknown type '%s'\n", pos[2]);
        return usage(2);
    }
    return 0;
}

/* Writing over the input would truncate the file being read through the mapping. */
static int same_file(const char *a, const char *b) {
    struct stat sa, sb;
    return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

typedef struct totals {
    uint64_t bytes_in, bytes_out, n_fallback;
} totals;

static void on_progress(void *user, const llmm_quant_progress *p) {
    totals *t = user;
    const gguf_tensor *g = p->tensor;
    t->bytes_in += p->bytes_in;
    t->bytes_out += p->bytes_out;
    t->n_fallback += (uint64_t)p->choice.fell_back;
    fprintf(stderr, "[%4zu/%4zu] %-36.*s %-5s -> %-5s [%lld x %lld]", p->index + 1, p->count, (int)g->name.len,
            g->name.ptr, llmm__type_get(g->type)->name, llmm__type_get(p->choice.type)->name, (long long)g->ne[0],
            (long long)(g->n_elements / (uint64_t)(g->ne[0] ? g->ne[0] : 1)));
    if (p->choice.fell_back)
        fprintf(stderr, "  (rows of %lld do not fit %s blocks)", (long long)g->ne[0],
                llmm__type_get(p->choice.wanted)->name);
    fputc('\n', stderr);
}

/* A partial output is removed after a failure, but only a regular file: OUT may name a
 * device or a pipe, which must survive. */
static int is_regular(FILE *f) {
    struct stat st;
    return fstat(fileno(f), &st) == 0 && S_ISREG(st.st_mode);
}

static int convert(const options *o, const gguf_file *in) {
    FILE *out = fopen(o->out, "wb");
    if (!out) {
        fprintf(stderr, "llmmini-quantize: cannot create '%s': %s\n", o->out, strerror(errno));
        return 1;
    }
    const int removable = is_regular(out);
    totals t = {0, 0, 0};
    llmm_quant_params p = {o->recipe, o->n_threads, on_progress, &t};
    llmm_diag d = {""};
    llmm_status st = llmm__quantize_model(in, &p, out, &d);
    if (fclose(out) != 0 && !st) st = llmm__diag_fail(&d, LLMM_ERR_IO, "closing the output failed: %s", strerror(errno));
    if (st) {
        fprintf(stderr, "llmmini-quantize: %s: %s\n", llmm_status_str(st), d.msg);
        if (removable) remove(o->out);
        return 1;
    }
    fprintf(stderr, "llmmini-quantize: wrote %s (%s): tensor data %.2f MiB -> %.2f MiB, %llu fallback%s\n", o->out,
            o->recipe->name, (double)t.bytes_in / (1 << 20), (double)t.bytes_out / (1 << 20),
            (unsigned long long)t.n_fallback, t.n_fallback == 1 ? "" : "s");
    return 0;
}

int main(int argc, char **argv) {
    options o = {0};
    const int rc = parse_args(argc, argv, &o);
    if (rc) return rc < 0 ? 0 : rc;
    if (same_file(o.in, o.out)) {
        fprintf(stderr, "llmmini-quantize: output '%s' is the input file\n", o.out);
        return 2;
    }
    gguf_file *in = NULL;
    llmm_diag d = {""};
    llmm_status st = llmm__gguf_open_file(o.in, 1, NULL, &in, &d);
    if (st) {
        fprintf(stderr, "llmmini-quantize: cannot read '%s': %s: %s\n", o.in, llmm_status_str(st), d.msg);
        return 1;
    }
    fprintf(stderr, "llmmini-quantize: %s -> %s as %s, %llu tensors, %d thread%s\n", o.in, o.out, o.recipe->name,
            (unsigned long long)in->n_tensors, o.n_threads, o.n_threads == 1 ? "" : "s");
    const int result = convert(&o, in);
    llmm__gguf_close(in);
    return result;
}
