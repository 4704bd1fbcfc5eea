/* llmmini-bench: prompt and decode speed of a model, set against the host's memory bandwidth;
 * with --parallel S, the aggregate decode speed of S sequences forked from one prompt.
 * Progress goes to stderr; the result (a table, or one JSON object with --json) to stdout. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "llmmini.h"

#define BANDWIDTH_PASSES 5
#define MIB (1024.0 * 1024.0)

typedef struct options {
    const char *model;
    int n_prompt, n_gen, n_threads, repeats, no_bandwidth, json;
    int parallel;          /* 0: the single-sequence benchmark; S: S sequences decoded together */
    int save_load;         /* also time saving the prompt's state and loading it back */
    int block_size;        /* KV block size (0: the library's default) */
    llmm_kv_type kv_type;
} options;

/* Best and median of the repeats of one measurement. */
typedef struct speed {
    double best, median;
} speed;

typedef struct results {
    const char *model_file;
    llmm_model_info info;
    int n_threads;
    double load_ms;
    speed prompt_tps, decode_tps;
    double measured_gbs; /* 0 when skipped or unavailable */
    double bytes_per_token;
    int output_tied;
    /* --parallel */
    speed aggregate_tps;   /* tokens/s over all sequences */
    double fork_us;        /* mean time of one fork of the prompt */
    size_t fork_bytes;     /* bytes the library allocated during all the forks */
    /* --save-load */
    size_t state_bytes;
    double save_ms, state_load_ms, prefill_ms; /* best of the repeats */
    int prompt_tokens;
} results;

/* Counts the library's allocations, to show that a fork copies no K/V. */
typedef struct alloc_counter {
    size_t bytes, calls;
} alloc_counter;

static void *counted_alloc(void *user, size_t size) {
    alloc_counter *c = user;
    void *p = NULL;
    if (posix_memalign(&p, 64, size ? size : 1) != 0) return NULL;
    c->bytes += size;
    c->calls++;
    return p;
}

static void counted_free(void *user, void *p) {
    (void)user;
    free(p);
}

static void usage(FILE *out) {
    fprintf(out,
            "usage: llmmini-bench -m MODEL [-p PROMPT_TOKENS] [-n GEN_TOKENS] [-t THREADS] [-r REPEATS]\n"
            "                     [--parallel S] [--save-load] [--kv-type f16|q8|f32] [--block-size N]\n"
            "                     [--no-bandwidth] [--json]\n"
            "  -p PROMPT_TOKENS   tokens in the synthetic prompt (default 128)\n"
            "  -n GEN_TOKENS      tokens decoded one at a time after it (default 64)\n"
            "  -t THREADS         CPU threads (default: physical cores)\n"
            "  -r REPEATS         runs of each measurement; best and median are reported (default 3)\n"
            "  --parallel S       prefill the prompt once, fork it into S sequences, decode them together\n"
            "                     (reports aggregate tokens/s and the cost of a fork)\n"
            "  --save-load        also save the prompt's state (zstd level 3) and time loading it against\n"
            "                     prefilling the prompt\n"
            "  --kv-type T        KV cache element type (default f16)\n"
            "  --block-size N     positions per KV block (default 16)\n"
            "  --no-bandwidth     skip the memory bandwidth measurement (and the efficiency figure)\n"
            "  --json             print one JSON object instead of the table\n");
}

static int parse_count(const char *s, int *out) {
    char *end;
    errno = 0;
    long v = s ? strtol(s, &end, 10) : 0;
    if (!s || errno || end == s || *end || v < 1 || v > 1000000) return 0;
    *out = (int)v;
    return 1;
}

/* Returns 0 on success, 2 on a usage error (message printed). */
static int parse_args(int argc, char **argv, options *o) {
    *o = (options){.n_prompt = 128, .n_gen = 64, .repeats = 3, .kv_type = LLMM_KV_F16};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
        int *count = !strcmp(a, "-p") ? &o->n_prompt
                     : !strcmp(a, "-n") ? &o->n_gen
                     : !strcmp(a, "-t") ? &o->n_threads
                     : !strcmp(a, "-r") ? &o->repeats
                     : !strcmp(a, "--parallel") ? &o->parallel
                     : !strcmp(a, "--block-size") ? &o->block_size
                                        : NULL;
        if (count) {
            if (!parse_count(val, count)) {
                fprintf(stderr, "llmmini-bench: %s needs a whole number >= 1\n", a);
                return 2;
            }
            i++;
        } else if (!strcmp(a, "-m") && val) o->model = argv[++i];
        else if (!strcmp(a, "--kv-type") && val) {
            const char *t = argv[++i];
            if (!strcmp(t, "f16")) o->kv_type = LLMM_KV_F16;
            else if (!strcmp(t, "q8")) o->kv_type = LLMM_KV_Q8;
            else if (!strcmp(t, "f32")) o->kv_type = LLMM_KV_F32;
            else {
                fprintf(stderr, "llmmini-bench: --kv-type takes f16, q8 or f32\n");
                return 2;
            }
        }
        else if (!strcmp(a, "--no-bandwidth")) o->no_bandwidth = 1;
        else if (!strcmp(a, "--json")) o->json = 1;
        else if (!strcmp(a, "--save-load")) o->save_load = 1;
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            exit(0);
        } else {
            fprintf(stderr, "llmmini-bench: unknown or incomplete option '%s' (see --help)\n", a);
            return 2;
        }
    }
    if (!o->model) {
        fprintf(stderr, "llmmini-bench: need -m MODEL (see --help)\n");
        return 2;
    }
    return 0;
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int fail(const char *what, llmm_status st, const char *detail) {
    fprintf(stderr, "llmmini-bench: %s: %s%s%s\n", what, llmm_status_str(st), detail && *detail ? ": " : "",
            detail ? detail : "");
    return 1;
}

/* ---------------------------------------------------------------- threads */

/* Physical cores, counted as distinct (package, core) pairs in sysfs: the library's own default
 * for n_threads = 0. Resolved here so that the bandwidth probe and the context use the same
 * count, and the table can say which. */
static int physical_cores(void) {
    long logical = sysconf(_SC_NPROCESSORS_ONLN);
    if (logical < 1) return 1;
    if (logical > 1024) return (int)logical;
    int keys[1024], n_keys = 0;
    for (long cpu = 0; cpu < logical; cpu++) {
        char path[128];
        int core = -1, pkg = 0;
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%ld/topology/core_id", cpu);
        FILE *f = fopen(path, "r");
        if (!f || fscanf(f, "%d", &core) != 1) core = -1;
        if (f) fclose(f);
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%ld/topology/physical_package_id", cpu);
        f = fopen(path, "r");
        if (f && fscanf(f, "%d", &pkg) != 1) pkg = 0;
        if (f) fclose(f);
        if (core < 0) return (int)logical;
        int key = pkg * 4096 + core, seen = 0;
        for (int i = 0; i < n_keys; i++) seen |= keys[i] == key;
        if (!seen) keys[n_keys++] = key;
    }
    return n_keys > 0 ? n_keys : (int)logical;
}

/* ---------------------------------------------------------------- memory bandwidth */

typedef struct slice {
    uint64_t *words;
    size_t n;
    int fill; /* 1: write the slice (first touch), 0: read it */
    uint64_t sum;
} slice;

/* Four accumulators so the adds do not serialize on one register: the loop must be limited by
 * memory, not by add latency. */
static uint64_t sum_words(const uint64_t *w, size_t n) {
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
        s0 += w[i];
        s1 += w[i + 1];
        s2 += w[i + 2];
        s3 += w[i + 3];
    }
    for (; i < n; i++) s0 += w[i];
    return s0 + s1 + s2 + s3;
}

static void *slice_main(void *p) {
    slice *s = p;
    if (s->fill) {
        for (size_t i = 0; i < s->n; i++) s->words[i] = i;
    } else {
        s->sum = sum_words(s->words, s->n);
    }
    return NULL;
}

/* Each thread writes or reads its own slice. Filling with the same threads and slices places
 * the pages near the thread that later reads them (first-touch NUMA policy). Returns the sum of
 * all slices; *ok is 0 when a thread could not start. */
static uint64_t run_slices(uint64_t *words, size_t n_words, int n_threads, int fill, int *ok) {
    slice *s = calloc((size_t)n_threads, sizeof *s);
    pthread_t *tid = calloc((size_t)n_threads, sizeof *tid);
    int started = 0;
    *ok = s && tid;
    for (int t = 0; *ok && t < n_threads; t++) {
        size_t begin = n_words * (size_t)t / (size_t)n_threads, end = n_words * (size_t)(t + 1) / (size_t)n_threads;
        s[t] = (slice){words + begin, end - begin, fill, 0};
        *ok = pthread_create(&tid[t], NULL, slice_main, &s[t]) == 0;
        started += *ok;
    }
    uint64_t sum = 0;
    for (int t = 0; t < started; t++) {
        pthread_join(tid[t], NULL);
        sum += s[t].sum;
    }
    free(s);
    free(tid);
    return sum;
}

/* Stores the read sums so the compiler must compute them. */
static volatile uint64_t bandwidth_sink;

/* Best read bandwidth in GB/s (1e9 bytes) over several passes of a buffer far larger than any
 * CPU cache; 0 when the buffer or the threads are unavailable (a warning is printed). */
static double measure_bandwidth(int n_threads) {
    size_t bytes = (size_t)1 << 30;
    uint64_t *buf = malloc(bytes);
    if (!buf) buf = malloc(bytes = (size_t)256 << 20);
    if (!buf) {
        fprintf(stderr, "llmmini-bench: warning: no memory for the bandwidth buffer; skipping it\n");
        return 0;
    }
    fprintf(stderr, "measuring memory read bandwidth: %zu MiB, threads: %d, best of %d passes\n", bytes >> 20,
            n_threads, BANDWIDTH_PASSES);
    size_t n_words = bytes / sizeof *buf;
    int ok;
    run_slices(buf, n_words, n_threads, 1, &ok);
    double best_ms = 0;
    for (int pass = 0; ok && pass < BANDWIDTH_PASSES; pass++) {
        double t0 = now_ms();
        bandwidth_sink += run_slices(buf, n_words, n_threads, 0, &ok);
        double ms = now_ms() - t0;
        if (pass == 0 || ms < best_ms) best_ms = ms;
    }
    free(buf);
    if (!ok || best_ms <= 0) {
        fprintf(stderr, "llmmini-bench: warning: could not start the bandwidth threads; skipping it\n");
        return 0;
    }
    return (double)bytes / (best_ms * 1e-3) / 1e9;
}

/* ---------------------------------------------------------------- weights read per token */

/* Elements of a llama model apart from its token embedding table and output head: per layer
 * wq, wo (n_embd x q_dim), wk, wv (n_embd x kv_dim), three FFN matrices and two norms; plus the
 * output norm. Compared with n_params, it tells whether the output head is its own tensor. */
static double llama_params_besides_vocab(const llmm_model_info *i) {
    double q_dim = (double)i->n_head * i->head_dim, kv_dim = (double)i->n_head_kv * i->head_dim;
    double per_layer = 2.0 * i->n_embd * q_dim + 2.0 * i->n_embd * kv_dim + 3.0 * i->n_embd * i->n_ff + 2.0 * i->n_embd;
    return i->n_layer * per_layer + i->n_embd;
}

/* An ESTIMATE of the weight bytes one decode step streams, from the public API alone (it does
 * not expose tensor sizes). Every weight is read once per token, except the token embedding
 * table, of which a single row is read, unless the output head is tied to it (then the whole
 * table is read as the head). Its byte share is taken as its element share of n_params at the
 * file's average bytes per element, and weight bytes as file bytes (the GGUF header and
 * vocabulary are small next to the weights, except in toy models). Mixed quant types per
 * tensor, and the KV cache, which decode also reads, are not counted. */
static double weight_bytes_per_token(const llmm_model_info *i, int *output_tied) {
    double n_params = (double)i->n_params, table = (double)i->n_vocab * i->n_embd;
    double rest = llama_params_besides_vocab(i);
    double miss_tied = n_params - (rest + table), miss_untied = n_params - (rest + 2 * table);
    *output_tied = miss_tied * miss_tied < miss_untied * miss_untied;
    double bytes_per_param = n_params > 0 ? (double)i->file_bytes / n_params : 0;
    double skipped = *output_tied ? 0 : table * bytes_per_param;
    return (double)i->file_bytes - skipped + i->n_embd * bytes_per_param;
}

/* ---------------------------------------------------------------- benchmarks */

static int compare_doubles(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Sorts v in place. */
static speed best_and_median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, compare_doubles);
    double median = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
    return (speed){v[n - 1], median};
}

/* BOS (when the model has one), then ids stepping through [3, n_vocab) by a prime stride: real
 * ids, reproducible, and not a single repeated token. Ids 0-2 are usually unk/bos/eos. */
static void build_prompt(const llmm_model *m, uint32_t n_vocab, llmm_token *ids, int n) {
    uint32_t first = n_vocab > 3 ? 3 : 0, range = n_vocab - first;
    int i = 0;
    llmm_token bos;
    if (llmm_model_special_token(m, LLMM_SPECIAL_BOS, &bos) == LLMM_OK) ids[i++] = bos;
    for (uint64_t k = 0; i < n; i++, k++) ids[i] = (llmm_token)(first + (k * 7919u) % range);
}

static llmm_status greedy_next(llmm_context *ctx, llmm_token *out) {
    const float *logits;
    size_t n_vocab;
    llmm_status st = llmm_logits(ctx, 0, &logits, &n_vocab);
    if (st) return st;
    size_t best = 0;
    for (size_t i = 1; i < n_vocab; i++)
        if (logits[i] > logits[best]) best = i;
    *out = (llmm_token)best;
    return LLMM_OK;
}

/* Runs the prompt o->repeats times from an empty sequence, after one untimed single-token pass
 * that faults in the mapped weights (otherwise the first repeat measures the disk). Leaves the
 * sequence holding the prompt and *next the greedy token after it. */
static llmm_status bench_prefill(llmm_context *ctx, const llmm_token *prompt, const options *o, double *tps,
                                 llmm_token *next) {
    llmm_status st = llmm_prefill(ctx, 0, prompt, 1, 0);
    for (int r = 0; !st && r < o->repeats; r++) {
        st = llmm_seq_clear(ctx, 0);
        double t0 = now_ms();
        if (!st) st = llmm_prefill(ctx, 0, prompt, (size_t)o->n_prompt, 0);
        double ms = now_ms() - t0;
        if (st) break;
        tps[r] = o->n_prompt / (ms * 1e-3);
        fprintf(stderr, "prefill %d/%d: %d tokens in %.2f ms, %.1f tok/s\n", r + 1, o->repeats, o->n_prompt, ms,
                tps[r]);
    }
    return st ? st : greedy_next(ctx, next);
}

/* Decodes o->n_gen tokens after the prompt, feeding back the argmax, o->repeats times; every
 * repeat starts from the same state (prompt only, same first token), so all do the same work. */
static llmm_status bench_decode(llmm_context *ctx, llmm_token first, const options *o, double *tps) {
    const llmm_seq_id seq = 0;
    llmm_status st = LLMM_OK;
    for (int r = 0; !st && r < o->repeats; r++) {
        llmm_token tok = first;
        st = llmm_seq_truncate(ctx, seq, (size_t)o->n_prompt);
        double t0 = now_ms();
        for (int k = 0; !st && k < o->n_gen; k++) {
            st = llmm_decode(ctx, &seq, &tok, 1);
            if (!st) st = greedy_next(ctx, &tok);
        }
        double ms = now_ms() - t0;
        if (st) break;
        tps[r] = o->n_gen / (ms * 1e-3);
        fprintf(stderr, "decode %d/%d: %d tokens in %.2f ms, %.1f tok/s, %.3f ms/token\n", r + 1, o->repeats,
                o->n_gen, ms, tps[r], ms / o->n_gen);
    }
    return st;
}

static llmm_status bench_context(llmm_context *ctx, const llmm_model *m, const options *o, results *res) {
    llmm_token *prompt = malloc((size_t)o->n_prompt * sizeof *prompt);
    double *tps = malloc((size_t)o->repeats * sizeof *tps);
    llmm_status st = prompt && tps ? LLMM_OK : LLMM_ERR_NO_MEMORY;
    llmm_token next = 0;
    if (!st) {
        build_prompt(m, res->info.n_vocab, prompt, o->n_prompt);
        st = bench_prefill(ctx, prompt, o, tps, &next);
    }
    if (!st) {
        res->prompt_tps = best_and_median(tps, o->repeats);
        st = bench_decode(ctx, next, o, tps);
    }
    if (!st) res->decode_tps = best_and_median(tps, o->repeats);
    free(prompt);
    free(tps);
    return st;
}

/* ---------------------------------------------------------------- saved states */

/* Saves seq 0 (cut back to the prompt) into memory, then o->repeats times loads it back into an
 * emptied sequence, and as often prefills the prompt from scratch for comparison. */
static llmm_status bench_state(llmm_context *ctx, const llmm_model *m, const options *o, results *res) {
    size_t cap = 0;
    llmm_status st = llmm_seq_truncate(ctx, 0, (size_t)o->n_prompt); /* drop the decoded tokens */
    if (!st) st = llmm_seq_save_buffer(ctx, 0, 0, NULL, 0, &cap);
    void *buf = st == LLMM_ERR_BUFFER_TOO_SMALL ? malloc(cap) : NULL;
    llmm_token *prompt = malloc((size_t)o->n_prompt * sizeof *prompt);
    if (!buf || !prompt) st = LLMM_ERR_NO_MEMORY;
    else {
        build_prompt(m, res->info.n_vocab, prompt, o->n_prompt);
        double t0 = now_ms();
        st = llmm_seq_save_buffer(ctx, 0, 0, buf, cap, &res->state_bytes);
        res->save_ms = now_ms() - t0;
    }
    for (int r = 0; !st && r < o->repeats; r++) {
        double t0 = now_ms();
        st = llmm_seq_load_buffer(ctx, 0, buf, res->state_bytes);
        const double load = now_ms() - t0;
        if (!st) st = llmm_seq_clear(ctx, 0);
        t0 = now_ms();
        if (!st) st = llmm_prefill(ctx, 0, prompt, (size_t)o->n_prompt, 0);
        const double prefill = now_ms() - t0;
        if (r == 0 || load < res->state_load_ms) res->state_load_ms = load;
        if (r == 0 || prefill < res->prefill_ms) res->prefill_ms = prefill;
        fprintf(stderr, "state %d/%d: load %.3f ms, prefill %.2f ms (%zu bytes, saved in %.3f ms)\n", r + 1,
                o->repeats, load, prefill, res->state_bytes, res->save_ms);
    }
    free(buf);
    free(prompt);
    return st;
}

/* ---------------------------------------------------------------- parallel sequences */

/* Forks seq 0 (holding the prompt) into S - 1 new sequences; times them and counts the bytes
 * the library allocated meanwhile (a fork shares blocks: no K/V is copied). */
static llmm_status fork_prompt(llmm_context *ctx, const options *o, const alloc_counter *counter, llmm_seq_id *seqs,
                               results *res) {
    seqs[0] = 0;
    const size_t bytes0 = counter->bytes;
    const double t0 = now_ms();
    for (int s = 1; s < o->parallel; s++) {
        llmm_status st = llmm_seq_fork(ctx, 0, &seqs[s]);
        if (st) return st;
    }
    const double ms = now_ms() - t0;
    res->fork_us = o->parallel > 1 ? ms * 1e3 / (o->parallel - 1) : 0;
    res->fork_bytes = counter->bytes - bytes0;
    fprintf(stderr, "forked a %d-token sequence %d times: %.2f us each, %zu bytes allocated\n", o->n_prompt,
            o->parallel - 1, res->fork_us, res->fork_bytes);
    return LLMM_OK;
}

/* Greedy next token of every row; row s starts from first + s so the sequences diverge. */
static llmm_status next_tokens(llmm_context *ctx, int n, llmm_token *toks) {
    for (int s = 0; s < n; s++) {
        const float *logits;
        size_t n_vocab;
        llmm_status st = llmm_logits(ctx, (size_t)s, &logits, &n_vocab);
        if (st) return st;
        size_t best = 0;
        for (size_t i = 1; i < n_vocab; i++)
            if (logits[i] > logits[best]) best = i;
        toks[s] = (llmm_token)best;
    }
    return LLMM_OK;
}

/* o->repeats runs of o->n_gen steps that decode all S sequences together, each run from the
 * prompt (the forks keep sharing its blocks). */
static llmm_status bench_parallel_decode(llmm_context *ctx, const llmm_model *m, llmm_token first, const options *o,
                                         const llmm_seq_id *seqs, llmm_token *toks, double *tps) {
    llmm_model_info info = {.size = sizeof info};
    llmm_status st = llmm_model_get_info(m, &info);
    const int S = o->parallel;
    for (int r = 0; !st && r < o->repeats; r++) {
        for (int s = 0; !st && s < S; s++) st = llmm_seq_truncate(ctx, seqs[s], (size_t)o->n_prompt);
        for (int s = 0; s < S; s++) toks[s] = (llmm_token)(((uint32_t)first + (uint32_t)s) % info.n_vocab);
        const double t0 = now_ms();
        for (int k = 0; !st && k < o->n_gen; k++) {
            st = llmm_decode(ctx, seqs, toks, (size_t)S);
            if (!st) st = next_tokens(ctx, S, toks);
        }
        const double ms = now_ms() - t0;
        if (st) break;
        tps[r] = (double)S * o->n_gen / (ms * 1e-3);
        fprintf(stderr, "parallel decode %d/%d: %d sequences x %d tokens in %.1f ms, %.1f tok/s aggregate\n", r + 1,
                o->repeats, S, o->n_gen, ms, tps[r]);
    }
    return st;
}

static llmm_status bench_parallel(llmm_context *ctx, const llmm_model *m, const options *o,
                                  const alloc_counter *counter, results *res) {
    llmm_token *prompt = malloc((size_t)o->n_prompt * sizeof *prompt);
    double *tps = malloc((size_t)o->repeats * sizeof *tps);
    llmm_seq_id *seqs = malloc((size_t)o->parallel * sizeof *seqs);
    llmm_token *toks = malloc((size_t)o->parallel * sizeof *toks);
    llmm_status st = prompt && tps && seqs && toks ? LLMM_OK : LLMM_ERR_NO_MEMORY;
    llmm_token next = 0;
    if (!st) {
        build_prompt(m, res->info.n_vocab, prompt, o->n_prompt);
        st = bench_prefill(ctx, prompt, o, tps, &next);
    }
    if (!st) {
        res->prompt_tps = best_and_median(tps, o->repeats);
        st = fork_prompt(ctx, o, counter, seqs, res);
    }
    if (!st) st = bench_parallel_decode(ctx, m, next, o, seqs, toks, tps);
    if (!st) res->aggregate_tps = best_and_median(tps, o->repeats);
    free(prompt);
    free(tps);
    free(seqs);
    free(toks);
    return st;
}

/* ---------------------------------------------------------------- report */

static const char *base_name(const char *path) {
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

static void format_count(uint64_t n, char *buf, size_t size) {
    if (n >= 1000000000) snprintf(buf, size, "%.2fB", n / 1e9);
    else if (n >= 1000000) snprintf(buf, size, "%.2fM", n / 1e6);
    else if (n >= 1000) snprintf(buf, size, "%.1fK", n / 1e3);
    else snprintf(buf, size, "%llu", (unsigned long long)n);
}

static double effective_gbs(const results *r) { return r->decode_tps.best * r->bytes_per_token / 1e9; }

#define N_COLUMNS 14

/* Header and value cells of the table, in column order; values written into cells. */
static void table_cells(const results *r, const char **head, char cells[N_COLUMNS][48]) {
    static const char *const names[N_COLUMNS] = {
        "model",          "params",           "file MiB",          "threads",          "prompt tok/s best",
        "prompt tok/s med", "decode tok/s best", "decode tok/s med", "ms/token",        "bytes/token MiB (est.)",
        "effective GB/s", "measured GB/s",    "efficiency %",      "load ms"};
    for (int c = 0; c < N_COLUMNS; c++) head[c] = names[c];
    int measured = r->measured_gbs > 0; /* else the last two columns say n/a */
    snprintf(cells[0], 48, "%.47s", base_name(r->model_file));
    format_count(r->info.n_params, cells[1], 48);
    snprintf(cells[2], 48, "%.2f", r->info.file_bytes / MIB);
    snprintf(cells[3], 48, "%d", r->n_threads);
    snprintf(cells[4], 48, "%.1f", r->prompt_tps.best);
    snprintf(cells[5], 48, "%.1f", r->prompt_tps.median);
    snprintf(cells[6], 48, "%.1f", r->decode_tps.best);
    snprintf(cells[7], 48, "%.1f", r->decode_tps.median);
    snprintf(cells[8], 48, "%.3f", 1e3 / r->decode_tps.best);
    snprintf(cells[9], 48, "%.3f", r->bytes_per_token / MIB);
    snprintf(cells[10], 48, "%.2f", effective_gbs(r));
    snprintf(cells[11], 48, "n/a");
    snprintf(cells[12], 48, "n/a");
    if (measured) snprintf(cells[11], 48, "%.2f", r->measured_gbs);
    if (measured) snprintf(cells[12], 48, "%.1f", 100 * effective_gbs(r) / r->measured_gbs);
    snprintf(cells[13], 48, "%.1f", r->load_ms);
}

static void print_table(const results *r) {
    const char *head[N_COLUMNS];
    char cells[N_COLUMNS][48];
    table_cells(r, head, cells);
    int width[N_COLUMNS];
    for (int c = 0; c < N_COLUMNS; c++) {
        int h = (int)strlen(head[c]), v = (int)strlen(cells[c]);
        width[c] = h > v ? h : v;
    }
    printf("decode is memory-bound on CPU: every weight is read once per token, so efficiency =\n"
           "effective / measured bandwidth is the figure that matters. bytes/token is an ESTIMATE of the\n"
           "weights streamed per token (file bytes, less the token embedding table unless it is also the\n"
           "output head (%s here), plus one row of it); effective GB/s = best decode tok/s x bytes/token.\n"
           "Models smaller than the CPU caches can exceed 100%%. ms/token is from the best decode run.\n\n",
           r->output_tied ? "tied" : "not tied");
    for (int c = 0; c < N_COLUMNS; c++) printf("| %-*s ", width[c], head[c]);
    printf("|\n");
    static const char dashes[] = "--------------------------------------------------";
    for (int c = 0; c < N_COLUMNS; c++) printf("|%.*s", width[c] + 2, dashes);
    printf("|\n");
    for (int c = 0; c < N_COLUMNS; c++) printf(c ? "| %*s " : "| %-*s ", width[c], cells[c]);
    printf("|\n");
    if (r->state_bytes)
        printf("\nsaved state of the %d-token prompt: %zu bytes, saved in %.3f ms; load %.3f ms vs prefill %.2f ms: "
               "%.0fx faster\n",
               r->prompt_tokens, r->state_bytes, r->save_ms, r->state_load_ms, r->prefill_ms,
               r->prefill_ms / r->state_load_ms);
}

static void print_json_string(const char *s) {
    putchar('"');
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\') printf("\\%c", ch);
        else if (ch < 0x20) printf("\\u%04x", ch);
        else putchar(ch);
    }
    putchar('"');
}

/* NaN and infinity are not JSON: a figure that was not measured is null. */
static void print_json_number(const char *key, double v, int measured) {
    printf(",\"%s\":", key);
    if (measured) printf("%.6g", v);
    else printf("null");
}

static void print_json(const results *r, const options *o) {
    int measured = r->measured_gbs > 0;
    printf("{\"model\":");
    print_json_string(base_name(r->model_file));
    printf(",\"params\":%llu,\"file_bytes\":%llu", (unsigned long long)r->info.n_params,
           (unsigned long long)r->info.file_bytes);
    print_json_number("file_mib", r->info.file_bytes / MIB, 1);
    printf(",\"threads\":%d,\"prompt_tokens\":%d,\"gen_tokens\":%d,\"repeats\":%d", r->n_threads, o->n_prompt,
           o->n_gen, o->repeats);
    print_json_number("load_ms", r->load_ms, 1);
    print_json_number("prompt_tok_s_best", r->prompt_tps.best, 1);
    print_json_number("prompt_tok_s_median", r->prompt_tps.median, 1);
    print_json_number("decode_tok_s_best", r->decode_tps.best, 1);
    print_json_number("decode_tok_s_median", r->decode_tps.median, 1);
    print_json_number("ms_per_token", 1e3 / r->decode_tps.best, 1);
    print_json_number("bytes_per_token_estimate", r->bytes_per_token, 1);
    print_json_number("bytes_per_token_mib_estimate", r->bytes_per_token / MIB, 1);
    printf(",\"output_tied\":%s", r->output_tied ? "true" : "false");
    print_json_number("effective_gb_s", effective_gbs(r), 1);
    print_json_number("measured_gb_s", r->measured_gbs, measured);
    print_json_number("efficiency_pct", measured ? 100 * effective_gbs(r) / r->measured_gbs : 0, measured);
    if (r->state_bytes) {
        printf(",\"state_bytes\":%zu", r->state_bytes);
        print_json_number("state_save_ms", r->save_ms, 1);
        print_json_number("state_load_ms", r->state_load_ms, 1);
        print_json_number("state_prefill_ms", r->prefill_ms, 1);
        print_json_number("state_load_speedup", r->prefill_ms / r->state_load_ms, 1);
    }
    printf("}\n");
}

static const char *kv_type_name(llmm_kv_type t) { return t == LLMM_KV_Q8 ? "q8" : t == LLMM_KV_F32 ? "f32" : "f16"; }

static void print_parallel_table(const results *r, const options *o) {
    printf("%d sequences forked from one %d-token prompt, decoded together (one forward step per token\n"
           "for all of them); aggregate = sequences x tokens / time. KV %s, block size %d.\n\n",
           o->parallel, o->n_prompt, kv_type_name(o->kv_type), o->block_size ? o->block_size : 16);
    printf("| model | threads | S | prompt tok/s | aggregate tok/s best | aggregate tok/s med | per sequence tok/s |"
           " fork us | fork bytes |\n|---|---|---|---|---|---|---|---|---|\n");
    printf("| %s | %d | %d | %.1f | %.1f | %.1f | %.2f | %.2f | %zu |\n", base_name(r->model_file), r->n_threads,
           o->parallel, r->prompt_tps.best, r->aggregate_tps.best, r->aggregate_tps.median,
           r->aggregate_tps.best / o->parallel, r->fork_us, r->fork_bytes);
}

static void print_parallel_json(const results *r, const options *o) {
    printf("{\"model\":");
    print_json_string(base_name(r->model_file));
    printf(",\"threads\":%d,\"parallel\":%d,\"prompt_tokens\":%d,\"gen_tokens\":%d,\"repeats\":%d", r->n_threads,
           o->parallel, o->n_prompt, o->n_gen, o->repeats);
    printf(",\"kv_type\":\"%s\",\"kv_block_size\":%d", kv_type_name(o->kv_type), o->block_size ? o->block_size : 16);
    print_json_number("prompt_tok_s_best", r->prompt_tps.best, 1);
    print_json_number("aggregate_tok_s", r->aggregate_tps.best, 1);
    print_json_number("aggregate_tok_s_median", r->aggregate_tps.median, 1);
    print_json_number("per_sequence_tok_s", r->aggregate_tps.best / o->parallel, 1);
    print_json_number("fork_us", r->fork_us, 1);
    printf(",\"fork_bytes\":%zu}\n", r->fork_bytes);
}

/* ---------------------------------------------------------------- main */

static llmm_status load_model(const char *path, const llmm_allocator *alloc, llmm_model **m, double *ms, char *err,
                              size_t err_size) {
    llmm_model_params mp;
    llmm_model_params_default(&mp, sizeof mp);
    mp.allocator = alloc;
    mp.error_buf = err;
    mp.error_buf_size = err_size;
    fprintf(stderr, "loading %s\n", path);
    double t0 = now_ms();
    llmm_status st = llmm_model_load(path, &mp, m);
    *ms = now_ms() - t0;
    return st;
}

/* n_ctx leaves a little room past prompt + generation; n_batch covers a short prompt in one
 * chunk and caps a long one at 512 tokens. */
static llmm_status create_context(const llmm_model *m, const options *o, int n_threads, llmm_context **ctx) {
    llmm_context_params cp;
    llmm_context_params_default(&cp, sizeof cp);
    cp.n_ctx = (uint32_t)(o->n_prompt + o->n_gen + 8);
    cp.n_batch = (uint32_t)(o->n_prompt < 512 ? o->n_prompt : 512);
    cp.n_threads = n_threads;
    cp.kv_type = o->kv_type;
    if (o->block_size) cp.kv_block_size = (uint32_t)o->block_size;
    if (o->parallel) cp.n_seq_max = (uint32_t)o->parallel;
    return llmm_context_create(m, &cp, ctx);
}

static int run(const options *o, llmm_model *m, const alloc_counter *counter, results *res) {
    char err[512] = "";
    res->info.size = sizeof res->info;
    llmm_status st = llmm_model_get_info(m, &res->info);
    if (st) {
        llmm_model_last_error(m, err, sizeof err);
        return fail("cannot read model info", st, err);
    }
    res->bytes_per_token = weight_bytes_per_token(&res->info, &res->output_tied);
    llmm_context *ctx = NULL;
    st = create_context(m, o, res->n_threads, &ctx);
    if (st) {
        llmm_model_last_error(m, err, sizeof err);
        return fail("cannot create context", st, err);
    }
    /* After the context, so that a bad setting fails before a second of probing; its idle
     * workers sleep after a short spin, so they do not compete with the probe. */
    if (!o->no_bandwidth) res->measured_gbs = measure_bandwidth(res->n_threads);
    if (res->measured_gbs > 0) fprintf(stderr, "memory read bandwidth: %.2f GB/s\n", res->measured_gbs);
    st = o->parallel ? bench_parallel(ctx, m, o, counter, res) : bench_context(ctx, m, o, res);
    if (!st && o->save_load) st = bench_state(ctx, m, o, res);
    int rc = st ? fail("benchmark failed", st, llmm_context_last_error(ctx)) : 0;
    llmm_context_free(ctx);
    return rc;
}

int main(int argc, char **argv) {
    options o;
    int rc = parse_args(argc, argv, &o);
    if (rc) return rc;
    results res = {.model_file = o.model, .n_threads = o.n_threads ? o.n_threads : physical_cores(),
                   .prompt_tokens = o.n_prompt};
    char err[512] = "";
    llmm_model *m = NULL;
    alloc_counter counter = {0};
    const llmm_allocator alloc = {counted_alloc, counted_free, &counter};
    llmm_status st = load_model(o.model, &alloc, &m, &res.load_ms, err, sizeof err);
    if (st) return fail("cannot load model", st, err);
    fprintf(stderr, "loaded in %.1f ms; threads: %d\n", res.load_ms, res.n_threads);
    rc = run(&o, m, &counter, &res);
    llmm_model_free(m);
    if (rc) return rc;
    if (o.parallel && o.json) print_parallel_json(&res, &o);
    else if (o.parallel) print_parallel_table(&res, &o);
    else if (o.json) print_json(&res, &o);
    else print_table(&res);
    return 0;
}
