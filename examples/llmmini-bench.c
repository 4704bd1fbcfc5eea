/* llmmini-bench: prompt and decode speed of a model, its latency (time to first token, per-token
 * decode percentiles) and peak memory, set against the host's memory bandwidth; with
 * --parallel S, also the aggregate decode speed of S sequences forked from one prompt.
 * Progress goes to stderr; the result (tables, or one JSON object with --json) to stdout. */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "cli_names.h"
#include "llmmini.h"

#define BANDWIDTH_PASSES 5
#define TRIAD_PASSES 5
#define TRIAD_PAIRED_PASSES 3 /* the triad before each decode repeat */
#define TRIAD_SETTLE_NS 20000000L /* before it: the context's idle workers stop spinning */
#define TRIAD_SCALAR 3.0     /* STREAM's */
#define TRIAD_ARRAYS_COUNTED 3 /* bytes of a, b and c per pass; see measure_triad */
#define PROBE_BYTES ((size_t)1 << 30)
#define PROBE_FALLBACK_BYTES ((size_t)256 << 20)
#define MIB (1024.0 * 1024.0)

typedef struct options {
    const char *model;
    int n_prompt, n_gen, n_threads, repeats, no_bandwidth, json;
    int no_repack;         /* llmm_model_params.repack_weights = 0 */
    int parallel;          /* 0: the single-sequence benchmark only; S: then S sequences decoded together */
    int save_load;         /* also time saving the prompt's state and loading it back */
    int block_size;        /* KV block size (0: the library's default) */
    llmm_kv_type kv_type;
    llmm_backend_kind backend;
    int device;            /* llmm_context_params.device */
    /* speculative decoding (bench_speculative): --draft MODEL or --lookup N, on -f FILE */
    const char *draft, *prompt_file;
    int lookup, draft_max;
    const char *lora[4];   /* --lora FILE (up to 4): decode with and without adapters, swap latency */
    int n_lora;
} options;

/* Smallest, median and largest of the repeats of one measurement (for a speed, max is the best). */
typedef struct spread {
    double min, median, max;
} spread;

/* A step-time distribution, as a streaming app watches it. */
typedef struct latency {
    double p50, p95, p99, max;
} latency;

typedef struct results {
    const char *model_file;
    llmm_model_info info;
    int n_threads;
    double load_ms;
    spread prompt_tps, decode_tps, ttft_ms;
    latency decode_ms;      /* over every decoded token of every repeat */
    double first_decode_ms; /* the first decode step of the first repeat: it starts making packed copies */
    llmm_context_stats stats; /* the context's, after the benchmark: cold start and graph counters */
    uint64_t peak_rss_bytes;
    int rss_frozen; /* peak_rss_bytes was taken before the paired triads; ru_maxrss now counts them */
    double measured_gbs; /* read probe; 0 when skipped or unavailable */
    double triad_gbs;    /* STREAM triad probe; 0 when skipped or unavailable */
    double paired_triad_gbs;  /* median of the triads measured just before each decode repeat; 0: none */
    double paired_fraction;   /* median over the repeats of that repeat's decode GB/s / its triad */
    double bytes_per_token;    /* weights, estimated */
    double kv_mean_position;   /* positions one decode step attends to, on average */
    double kv_bytes_per_token; /* K/V one decode step reads at that position */
    int output_tied;
    /* --parallel */
    spread aggregate_tps;  /* tokens/s over all sequences */
    latency parallel_step_ms; /* each step of all S sequences, over every repeat */
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
            "usage: llmmini-bench -m MODEL [-p 512] [-n 64] [-r 3] [-t THREADS] [--parallel S] [--json]\n"
            "                     [--save-load] [--kv-type f16|q8|f32] [--block-size N] [--no-bandwidth]\n"
            "                     [--no-repack] [--backend auto|cpu|cuda] [--device N]\n"
            "       llmmini-bench -m MODEL (--draft MODEL [--draft-max K] | --lookup N) [-f FILE] [-n 64] [-r 3]\n"
            "  -p PROMPT_TOKENS   tokens in the synthetic prompt (default 512)\n"
            "  -n GEN_TOKENS      tokens decoded one at a time after it (default 64)\n"
            "  -r REPEATS         runs of each measurement; median, min and max are reported (default 3)\n"
            "  -t THREADS         CPU threads, for the model and the bandwidth probes (default: physical\n"
            "                     cores)\n"
            "  --parallel S       also fork the prompt into S sequences and decode them together\n"
            "                     (reports aggregate tokens/s and the cost of a fork)\n"
            "  --json             print one JSON object instead of the tables\n"
            "  --save-load        also save the prompt's state (zstd level 3) and time loading it against\n"
            "                     prefilling the prompt\n"
            "  --kv-type T        KV cache element type (default f16)\n"
            "  --block-size N     positions per KV block (default 16)\n"
            "  --no-bandwidth     skip the memory bandwidth probes (read, STREAM triad) and the\n"
            "                     figures made from them\n"
            "  --no-repack        compute from the file's bytes only (repack_weights = 0: no packed\n"
            "                     copies made during the first decode steps)\n"
            "  --device N         the accelerator a CUDA context runs on (default 0)\n"
            "  --backend B        auto, cpu or cuda (default auto: CUDA when its module loads and finds\n"
            "                     a device, else the CPU); cuda fails rather than fall back. The\n"
            "                     bandwidth probes measure the host's memory whatever the backend:\n"
            "                     pass --no-bandwidth on a GPU\n"
            "  --draft MODEL      speculative decoding instead of the tables above: greedy llmm_generate\n"
            "                     of -n tokens from the text of -f FILE, plain and with this draft model\n"
            "                     (same vocabulary); tokens/s of both, acceptance, identical output, and\n"
            "                     one verify step's time for 0..16 guesses against the bandwidth bound\n"
            "  --draft-max K      guesses per step at most (default 8)\n"
            "  --lookup N         the same with prompt lookup (n-gram N) instead of a draft model\n"
            "  -f FILE            the prompt's text (default: a short story opening)\n"
            "  --lora FILE        LoRA instead of the tables above: adapter load time, decode tokens/s of\n"
            "                     one sequence without and with the (first) adapter, the cost of\n"
            "                     swapping a loaded adapter, and with --parallel S, S sequences decoded\n"
            "                     together without adapters and with 4 adapters spread over them.\n"
            "                     Repeatable up to 4 files (fewer: the files are loaded again, as\n"
            "                     separate adapters, to make 4)\n");
}

static int parse_index(const char *s, int *out) {
    char *end;
    errno = 0;
    long v = s ? strtol(s, &end, 10) : -1;
    if (!s || errno || end == s || *end || v < 0 || v > 1023) return 0;
    *out = (int)v;
    return 1;
}

static int parse_count(const char *s, int *out) {
    char *end;
    errno = 0;
    long v = s ? strtol(s, &end, 10) : 0;
    if (!s || errno || end == s || *end || v < 1 || v > 1000000) return 0;
    *out = (int)v;
    return 1;
}

/* The option's count field, or NULL when a is not a counted option. */
static int *count_option(options *o, const char *a) {
    return !strcmp(a, "-p")             ? &o->n_prompt
           : !strcmp(a, "-n")           ? &o->n_gen
           : !strcmp(a, "-t")           ? &o->n_threads
           : !strcmp(a, "-r")           ? &o->repeats
           : !strcmp(a, "--parallel")   ? &o->parallel
           : !strcmp(a, "--block-size") ? &o->block_size
           : !strcmp(a, "--lookup")     ? &o->lookup
           : !strcmp(a, "--draft-max")  ? &o->draft_max
                                        : NULL;
}

/* Returns 0 on success, 2 on a usage error (message printed). */
static int parse_args(int argc, char **argv, options *o) {
    *o = (options){.n_prompt = 512, .n_gen = 64, .repeats = 3, .kv_type = LLMM_KV_F16, .backend = LLMM_BACKEND_AUTO};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
        int *count = count_option(o, a);
        if (count) {
            if (!parse_count(val, count)) {
                fprintf(stderr, "llmmini-bench: %s needs a whole number >= 1\n", a);
                return 2;
            }
            i++;
        } else if (!strcmp(a, "-m") && val) o->model = argv[++i];
        else if (!strcmp(a, "--draft") && val) o->draft = argv[++i];
        else if (!strcmp(a, "--lora") && val) {
            if (o->n_lora == 4) {
                fprintf(stderr, "llmmini-bench: at most 4 --lora files\n");
                return 2;
            }
            o->lora[o->n_lora++] = argv[++i];
        } else if (!strcmp(a, "-f") && val) o->prompt_file = argv[++i];
        else if (!strcmp(a, "--kv-type") && val) {
            if (!parse_kv_type(argv[++i], &o->kv_type)) {
                fprintf(stderr, "llmmini-bench: --kv-type takes f16, q8 or f32\n");
                return 2;
            }
        } else if (!strcmp(a, "--backend") && val) {
            if (!parse_backend(argv[++i], &o->backend)) {
                fprintf(stderr, "llmmini-bench: --backend takes auto, cpu or cuda\n");
                return 2;
            }
        } else if (!strcmp(a, "--device") && val) {
            if (!parse_index(argv[++i], &o->device)) {
                fprintf(stderr, "llmmini-bench: --device takes a device index 0..1023\n");
                return 2;
            }
        } else if (!strcmp(a, "--no-bandwidth")) o->no_bandwidth = 1;
        else if (!strcmp(a, "--no-repack")) o->no_repack = 1;
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

/* Peak resident set of the process so far (ru_maxrss is in KiB on Linux; it is VmHWM of
 * /proc/self/status). Touched pages of the mapped weights count: they are resident. */
static uint64_t peak_rss_bytes(void) {
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0) return 0;
    return (uint64_t)ru.ru_maxrss * 1024;
}

/* Resident set now, from /proc/self/statm (0 when unreadable). */
static uint64_t current_rss_bytes(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long long size = 0, resident = 0;
    if (!f) return 0;
    int ok = fscanf(f, "%llu %llu", &size, &resident) == 2;
    fclose(f);
    return ok ? resident * (uint64_t)sysconf(_SC_PAGESIZE) : 0;
}

/* ---------------------------------------------------------------- threads */

/* Physical cores, counted as distinct (package, core) pairs in sysfs: the library's own default
 * for n_threads = 0. Resolved here so that the bandwidth probes and the context use the same
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

/* ---------------------------------------------------------------- memory read bandwidth */

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

/* Stores the read sums (and a triad result) so the compiler must compute them. */
static volatile uint64_t bandwidth_sink;
static volatile double triad_sink;

/* A buffer of about PROBE_BYTES, far larger than any CPU cache, or a smaller fallback. */
static void *probe_buffer(size_t *bytes) {
    *bytes = PROBE_BYTES;
    void *buf = malloc(*bytes);
    if (!buf) buf = malloc(*bytes = PROBE_FALLBACK_BYTES);
    if (!buf) fprintf(stderr, "llmmini-bench: warning: no memory for the bandwidth buffer; skipping it\n");
    return buf;
}

/* Best read bandwidth in GB/s (1e9 bytes) over several passes of the probe buffer; 0 when the
 * buffer or the threads are unavailable (a warning is printed). */
static double measure_bandwidth(int n_threads) {
    size_t bytes;
    uint64_t *buf = probe_buffer(&bytes);
    if (!buf) return 0;
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

/* ---------------------------------------------------------------- STREAM triad */

/* The threads of one triad measurement. They wait at the gate (held by the starter) until all
 * have been created, so that a thread that fails to start cannot leave the others stuck in a
 * barrier that counts it; then every pass runs between two barriers, timed by member 0. */
typedef struct triad_team {
    double *a, *b, *c;
    size_t n; /* elements per array */
    int n_threads;
    int passes;
    pthread_mutex_t gate;
    int abort; /* written under the gate: a thread could not start */
    pthread_barrier_t barrier;
    double best_ms;
} triad_team;

typedef struct triad_member {
    triad_team *team;
    int index;
} triad_member;

static void triad(double *restrict a, const double *restrict b, const double *restrict c, double s, size_t n) {
    for (size_t i = 0; i < n; i++) a[i] = b[i] + s * c[i];
}

/* Member index's share of the three arrays: first touched by it (so that the pages sit near it,
 * as in the read probe), then streamed TRIAD_PASSES times in step with the others. */
static void triad_member_run(triad_team *tm, int index) {
    size_t begin = tm->n * (size_t)index / (size_t)tm->n_threads;
    size_t n = tm->n * (size_t)(index + 1) / (size_t)tm->n_threads - begin;
    double *a = tm->a + begin, *b = tm->b + begin, *c = tm->c + begin;
    for (size_t i = 0; i < n; i++) a[i] = 0, b[i] = 1, c[i] = 2;
    for (int pass = 0; pass < tm->passes; pass++) {
        pthread_barrier_wait(&tm->barrier);
        double t0 = now_ms();
        triad(a, b, c, TRIAD_SCALAR, n);
        pthread_barrier_wait(&tm->barrier);
        double ms = now_ms() - t0;
        if (index == 0 && (pass == 0 || ms < tm->best_ms)) tm->best_ms = ms;
    }
}

static void *triad_thread(void *p) {
    triad_member *m = p;
    pthread_mutex_lock(&m->team->gate);
    int abort = m->team->abort;
    pthread_mutex_unlock(&m->team->gate);
    if (!abort) triad_member_run(m->team, m->index);
    return NULL;
}

/* Runs the team: the calling thread is member 0. Returns 0 when a thread could not start. */
static int run_triad_team(triad_team *tm) {
    triad_member *members = calloc((size_t)tm->n_threads, sizeof *members);
    pthread_t *tid = calloc((size_t)tm->n_threads, sizeof *tid);
    int started = 1;
    pthread_mutex_init(&tm->gate, NULL);
    pthread_mutex_lock(&tm->gate);
    tm->abort = !members || !tid;
    while (!tm->abort && started < tm->n_threads) {
        members[started] = (triad_member){tm, started};
        if (pthread_create(&tid[started], NULL, triad_thread, &members[started]) != 0) tm->abort = 1;
        else started++;
    }
    if (!tm->abort) tm->abort = pthread_barrier_init(&tm->barrier, NULL, (unsigned)tm->n_threads) != 0;
    const int ran = !tm->abort;
    pthread_mutex_unlock(&tm->gate);
    if (ran) triad_member_run(tm, 0);
    for (int t = 1; t < started; t++) pthread_join(tid[t], NULL);
    if (ran) pthread_barrier_destroy(&tm->barrier);
    pthread_mutex_destroy(&tm->gate);
    free(members);
    free(tid);
    return ran;
}

/* STREAM-style triad a[i] = b[i] + s * c[i] over three double arrays of about PROBE_BYTES in
 * all, with n_threads threads; GB/s (1e9 bytes) of the best of TRIAD_PASSES passes, 0 when
 * unavailable. Traffic is counted as STREAM counts it, TRIAD_ARRAYS_COUNTED = 3 arrays per pass
 * (read b and c, write a), so that the figure compares with published STREAM results; a
 * write-allocate cache also reads a before writing it, so the bus moves 4/3 of that. */
static double measure_triad(int n_threads, int passes, int quiet) {
    size_t bytes;
    double *buf = probe_buffer(&bytes);
    if (!buf) return 0;
    triad_team tm = {.n = bytes / (3 * sizeof *buf), .n_threads = n_threads, .passes = passes};
    tm.a = buf, tm.b = buf + tm.n, tm.c = buf + 2 * tm.n;
    if (!quiet)
        fprintf(stderr,
                "measuring STREAM triad: 3 x %zu MiB, threads: %d, best of %d passes; traffic counted as %d arrays\n"
                "  (STREAM's convention; with write-allocate the bus moves 4)\n",
                (tm.n * sizeof *buf) >> 20, n_threads, passes, TRIAD_ARRAYS_COUNTED);
    int ok = run_triad_team(&tm);
    if (ok) triad_sink += tm.a[tm.n / 2];
    free(buf);
    if (!ok || tm.best_ms <= 0) {
        fprintf(stderr, "llmmini-bench: warning: could not start the triad threads; skipping it\n");
        return 0;
    }
    return TRIAD_ARRAYS_COUNTED * (double)(tm.n * sizeof *buf) / (tm.best_ms * 1e-3) / 1e9;
}

/* ---------------------------------------------------------------- bytes read per token */

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
 * tensor are not seen; the KV cache is counted apart (kv_bytes_per_token). */
static double weight_bytes_per_token(const llmm_model_info *i, int *output_tied) {
    double n_params = (double)i->n_params, table = (double)i->n_vocab * i->n_embd;
    double rest = llama_params_besides_vocab(i);
    double miss_tied = n_params - (rest + table), miss_untied = n_params - (rest + 2 * table);
    *output_tied = miss_tied * miss_tied < miss_untied * miss_untied;
    double bytes_per_param = n_params > 0 ? (double)i->file_bytes / n_params : 0;
    double skipped = *output_tied ? 0 : table * bytes_per_param;
    return (double)i->file_bytes - skipped + i->n_embd * bytes_per_param;
}

/* Bytes of one position's row of one K/V head of one layer, laid out as the library stores
 * it (lib/backend/backend.h kv_row_bytes, which the public header does not expose): f32 4 and f16 2
 * bytes per value; q8 one float scale, then one byte per value padded to 4 bytes. */
static double kv_row_bytes(llmm_kv_type type, uint32_t head_dim) {
    switch (type) {
    case LLMM_KV_F32: return 4.0 * head_dim;
    case LLMM_KV_F16: return 2.0 * head_dim;
    case LLMM_KV_Q8: return 4.0 + (head_dim + 3) / 4 * 4;
    }
    return 0;
}

/* The step that decodes the k-th generated token (k = 1..n_gen) attends to n_prompt + k
 * positions, its own included: n_prompt + (n_gen + 1) / 2 on average. */
static double mean_decode_position(const options *o) { return o->n_prompt + (o->n_gen + 1) / 2.0; }

/* K/V bytes one decode step reads at the mean position: every layer's K and V rows of every
 * position attended to (n_layer x 2 x n_head_kv x head_dim x bytes per value x positions).
 * Once a context exists, kv_bytes_per_position replaces the per-position part by the pool's:
 * a hybrid model's recurrent layers keep no K/V. */
static double kv_bytes_per_token(const llmm_model_info *i, const options *o) {
    return i->n_layer * 2.0 * i->n_head_kv * kv_row_bytes(o->kv_type, i->head_dim) * mean_decode_position(o);
}

/* K and V bytes of one position in every layer that has them: a KV block's bytes (the
 * context's stats) over its positions; 0 when the stats have no block. */
static double kv_bytes_per_position(llmm_context *ctx) {
    llmm_context_stats s = {.size = sizeof s};
    if (llmm_context_get_stats(ctx, &s) != LLMM_OK || !s.block_size) return 0;
    return (double)s.block_bytes / s.block_size;
}

/* ---------------------------------------------------------------- statistics */

static int compare_doubles(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Sorts v in place. */
static spread spread_of(double *v, size_t n) {
    qsort(v, n, sizeof *v, compare_doubles);
    double median = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
    return (spread){v[0], median, v[n - 1]};
}

/* Percentile p (0..100) of n sorted values, interpolated linearly between the two nearest ranks
 * (numpy's default), so that p50 is the median and a figure does not jump with n. */
static double percentile(const double *sorted, size_t n, double p) {
    double rank = p / 100 * (double)(n - 1);
    size_t lo = (size_t)rank;
    if (lo + 1 >= n) return sorted[n - 1];
    return sorted[lo] + (rank - (double)lo) * (sorted[lo + 1] - sorted[lo]);
}

/* p50/p95/p99/max of n step times (sorts them). */
static latency latency_of(double *ms, size_t n) {
    spread_of(ms, n);
    return (latency){percentile(ms, n, 50), percentile(ms, n, 95), percentile(ms, n, 99), ms[n - 1]};
}

/* ---------------------------------------------------------------- single sequence */

/* What the single-sequence benchmark records: one figure per repeat, and the time of every
 * decode step of every repeat. */
typedef struct samples {
    double *prefill_tps, *ttft_ms, *decode_tps; /* o->repeats each */
    double *triad_gbs;                           /* o->repeats: the triad just before each decode repeat */
    double *token_ms;                            /* o->repeats x o->n_gen */
} samples;

static int samples_alloc(samples *s, const options *o) {
    size_t n_rep = (size_t)o->repeats;
    double *all = malloc((4 * n_rep + n_rep * (size_t)o->n_gen) * sizeof *all);
    *s = (samples){all, all ? all + n_rep : NULL, all ? all + 2 * n_rep : NULL, all ? all + 3 * n_rep : NULL,
                   all ? all + 4 * n_rep : NULL};
    return all != NULL;
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

/* Largest of x[0 .. n), -inf when empty or all NaN: eight running maxima, a loop GCC
 * vectorizes at -O2. */
static float max_of(const float *x, size_t n) {
    float lane[8] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY};
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (size_t k = 0; k < 8; k++) lane[k] = x[i + k] > lane[k] ? x[i + k] : lane[k];
    float max = -INFINITY;
    for (; i < n; i++) max = x[i] > max ? x[i] : max;
    for (size_t k = 0; k < 8; k++) max = lane[k] > max ? lane[k] : max;
    return max;
}

/* Greedy next token of logits row `row`: argmax (lowest id on ties), the cheapest sampler, so
 * that the timings are the model's. The maximum of each stretch of 1024 logits, then the first
 * index holding the largest in the first stretch that has it: the one compare-and-index loop
 * over Qwen's 151936 logits was 0.7 % of decode samples. */
static llmm_status greedy_next(llmm_context *ctx, size_t row, llmm_token *out) {
    enum { STRETCH = 1024 };
    const float *logits;
    size_t n_vocab;
    llmm_status st = llmm_logits(ctx, row, &logits, &n_vocab);
    if (st) return st;
    float best_value = -INFINITY;
    size_t best_stretch = 0;
    for (size_t s0 = 0; s0 < n_vocab; s0 += STRETCH) {
        const float m = max_of(logits + s0, n_vocab - s0 < STRETCH ? n_vocab - s0 : STRETCH);
        if (m > best_value) best_value = m, best_stretch = s0;
    }
    size_t best = best_stretch;
    while (best < n_vocab && !(logits[best] == best_value)) best++;
    *out = (llmm_token)(best < n_vocab ? best : 0);
    return LLMM_OK;
}

/* Tokens of the untimed pass before the prompt repeats: enough that it is a prompt to the
 * backend (more than a decode step's few rows), so it faults in the mapped weights without
 * making packed copies; the first decode steps make them, as in an app. */
#define WARMUP_TOKENS 16

/* Runs the prompt o->repeats times from an empty sequence, after one untimed pass that faults
 * in the mapped weights (otherwise the first repeat measures the disk). Time to first token is
 * prefill plus choosing the first token (the ids are given, so no tokenizing). Leaves the
 * sequence holding the prompt and *next the greedy token after it. */
static llmm_status bench_prefill(llmm_context *ctx, const llmm_token *prompt, const options *o, samples *s,
                                 llmm_token *next) {
    const int warmup = o->n_prompt < WARMUP_TOKENS ? o->n_prompt : WARMUP_TOKENS;
    llmm_status st = llmm_prefill(ctx, 0, prompt, (size_t)warmup, 0);
    for (int r = 0; !st && r < o->repeats; r++) {
        st = llmm_seq_clear(ctx, 0);
        const double t0 = now_ms();
        if (!st) st = llmm_prefill(ctx, 0, prompt, (size_t)o->n_prompt, 0);
        const double t1 = now_ms();
        if (!st) st = greedy_next(ctx, 0, next);
        if (st) break;
        s->prefill_tps[r] = o->n_prompt / ((t1 - t0) * 1e-3);
        s->ttft_ms[r] = now_ms() - t0;
        fprintf(stderr, "prefill %d/%d: %d tokens in %.2f ms, %.1f tok/s; first token at %.2f ms\n", r + 1,
                o->repeats, o->n_prompt, t1 - t0, s->prefill_tps[r], s->ttft_ms[r]);
    }
    return st;
}

/* Decodes o->n_gen tokens after the prompt, feeding back the argmax, o->repeats times; every
 * repeat starts from the same state (prompt only, same first token), so all do the same work.
 * Each repeat runs on a fork of sequence 0, which keeps the prompt: a hybrid model's recurrent
 * state cannot be cut back to the prompt after decoding, a fork copies it (and shares the
 * prompt's K/V blocks; its first step copies the partly filled tail block). Each step (decode
 * and argmax) is timed on its own for the latency percentiles. */
static llmm_status bench_decode(llmm_context *ctx, llmm_token first, const options *o, int triad_threads,
                                samples *s) {
    llmm_status st = LLMM_OK;
    for (int r = 0; !st && r < o->repeats; r++) {
        s->triad_gbs[r] = 0;
        if (triad_threads > 0) { /* the machine's bandwidth now, to pair with this repeat */
            nanosleep(&(struct timespec){0, TRIAD_SETTLE_NS}, NULL);
            s->triad_gbs[r] = measure_triad(triad_threads, TRIAD_PAIRED_PASSES, 1);
        }
        double *step_ms = s->token_ms + (size_t)r * (size_t)o->n_gen;
        llmm_token tok = first;
        llmm_seq_id seq = -1;
        st = llmm_seq_fork(ctx, 0, &seq);
        const double t_run = now_ms();
        for (int k = 0; !st && k < o->n_gen; k++) {
            const double t0 = now_ms();
            st = llmm_decode(ctx, &seq, &tok, 1);
            if (!st) st = greedy_next(ctx, 0, &tok);
            step_ms[k] = now_ms() - t0;
        }
        const double ms = now_ms() - t_run;
        if (seq >= 0) {
            const llmm_status freed = llmm_seq_free(ctx, seq);
            if (!st) st = freed;
        }
        if (st) break;
        s->decode_tps[r] = o->n_gen / (ms * 1e-3);
        fprintf(stderr, "decode %d/%d: %d tokens in %.2f ms, %.1f tok/s, %.3f ms/token", r + 1, o->repeats, o->n_gen,
                ms, s->decode_tps[r], ms / o->n_gen);
        if (s->triad_gbs[r] > 0) fprintf(stderr, "; triad just before: %.2f GB/s", s->triad_gbs[r]);
        fprintf(stderr, "\n");
    }
    return st;
}

static double decode_bytes_per_token(const results *r);

static void summarize(samples *s, const options *o, results *res) {
    const size_t n_rep = (size_t)o->repeats, n_steps = n_rep * (size_t)o->n_gen;
    /* per repeat: its decode GB/s over the triad measured just before it (before the sorts) */
    double *fraction = malloc(n_rep * sizeof *fraction);
    size_t n_paired = 0;
    for (size_t r = 0; fraction && r < n_rep; r++)
        if (s->triad_gbs[r] > 0)
            fraction[n_paired++] = decode_bytes_per_token(res) * s->decode_tps[r] / 1e9 / s->triad_gbs[r];
    if (n_paired == n_rep) {
        res->paired_fraction = spread_of(fraction, n_rep).median;
        res->paired_triad_gbs = spread_of(s->triad_gbs, n_rep).median;
    }
    free(fraction);
    res->prompt_tps = spread_of(s->prefill_tps, n_rep);
    res->ttft_ms = spread_of(s->ttft_ms, n_rep);
    res->decode_tps = spread_of(s->decode_tps, n_rep);
    res->first_decode_ms = s->token_ms[0];
    res->decode_ms = latency_of(s->token_ms, n_steps);
}

/* The prompt and decode benchmark on sequence 0; *first receives the greedy token after the
 * prompt (--parallel starts its sequences from it). */
static llmm_status bench_single(llmm_context *ctx, const llmm_model *m, const options *o, results *res,
                                llmm_token *first) {
    llmm_token *prompt = malloc((size_t)o->n_prompt * sizeof *prompt);
    samples s;
    llmm_status st = samples_alloc(&s, o) && prompt ? LLMM_OK : LLMM_ERR_NO_MEMORY;
    if (!st) {
        build_prompt(m, res->info.n_vocab, prompt, o->n_prompt);
        st = bench_prefill(ctx, prompt, o, &s, first);
    }
    /* the paired triads' 1 GiB buffers must stay out of the peak RSS: it is taken here, after
     * the prefill, and completed with the resident set after the decode (which only adds K/V) */
    const int triad_threads = o->no_bandwidth ? 0 : res->n_threads;
    res->peak_rss_bytes = peak_rss_bytes();
    if (!st) st = bench_decode(ctx, *first, o, triad_threads, &s);
    const uint64_t rss_after = current_rss_bytes();
    if (rss_after > res->peak_rss_bytes) res->peak_rss_bytes = rss_after;
    res->rss_frozen = triad_threads > 0;
    if (!st) summarize(&s, o, res);
    free(prompt);
    free(s.prefill_tps);
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

/* Forks seq 0 (holding the prompt) into the S sequences of a run. With counter, times the forks
 * and counts the bytes the library allocated meanwhile (a fork shares blocks: no K/V is copied;
 * a hybrid model's fork copies the recurrent state). */
static llmm_status fork_prompt(llmm_context *ctx, const options *o, const alloc_counter *counter, llmm_seq_id *seqs,
                               results *res) {
    const size_t bytes0 = counter ? counter->bytes : 0;
    const double t0 = now_ms();
    for (int s = 0; s < o->parallel; s++) {
        llmm_status st = llmm_seq_fork(ctx, 0, &seqs[s]);
        if (st) {
            while (s-- > 0) llmm_seq_free(ctx, seqs[s]);
            return st;
        }
    }
    if (!counter) return LLMM_OK;
    const double ms = now_ms() - t0;
    res->fork_us = ms * 1e3 / o->parallel;
    res->fork_bytes = counter->bytes - bytes0;
    fprintf(stderr, "forked a %d-token sequence %d times: %.2f us each, %zu bytes allocated\n", o->n_prompt,
            o->parallel, res->fork_us, res->fork_bytes);
    return LLMM_OK;
}

/* Greedy next token of every row. */
static llmm_status next_tokens(llmm_context *ctx, int n, llmm_token *toks) {
    llmm_status st = LLMM_OK;
    for (int s = 0; !st && s < n; s++) st = greedy_next(ctx, (size_t)s, &toks[s]);
    return st;
}

/* o->repeats runs of o->n_gen steps that decode all S sequences together, each run on new forks
 * of the prompt (seq 0), freed after it: the runs start alike without cutting a sequence back,
 * which a model with recurrent state refuses (llmm_seq_truncate: no checkpoint there). Row s
 * starts from first + s so that the sequences diverge; the first run's forks are timed. */
static llmm_status bench_parallel_decode(llmm_context *ctx, uint32_t n_vocab, llmm_token first, const options *o,
                                         const alloc_counter *counter, llmm_seq_id *seqs, llmm_token *toks,
                                         double *tps, double *step_ms, results *res) {
    const int S = o->parallel;
    llmm_status st = LLMM_OK;
    for (int r = 0; !st && r < o->repeats; r++) {
        st = fork_prompt(ctx, o, r == 0 ? counter : NULL, seqs, res);
        if (st) break;
        for (int s = 0; s < S; s++) toks[s] = (llmm_token)(((uint32_t)first + (uint32_t)s) % n_vocab);
        const double t0 = now_ms();
        for (int k = 0; !st && k < o->n_gen; k++) {
            const double t_step = now_ms();
            st = llmm_decode(ctx, seqs, toks, (size_t)S);
            if (!st) st = next_tokens(ctx, S, toks);
            step_ms[(size_t)r * (size_t)o->n_gen + (size_t)k] = now_ms() - t_step;
        }
        const double ms = now_ms() - t0;
        for (int s = 0; s < S; s++) {
            const llmm_status freed = llmm_seq_free(ctx, seqs[s]);
            if (!st) st = freed;
        }
        if (st) break;
        tps[r] = (double)S * o->n_gen / (ms * 1e-3);
        fprintf(stderr, "parallel decode %d/%d: %d sequences x %d tokens in %.1f ms, %.1f tok/s aggregate\n", r + 1,
                o->repeats, S, o->n_gen, ms, tps[r]);
    }
    return st;
}

/* After bench_single (seq 0 holds the prompt): decodes S forks of it together. */
static llmm_status bench_parallel(llmm_context *ctx, llmm_token first, const options *o,
                                  const alloc_counter *counter, results *res) {
    const size_t n_steps = (size_t)o->repeats * (size_t)o->n_gen;
    double *tps = malloc((size_t)o->repeats * sizeof *tps);
    double *step_ms = malloc(n_steps * sizeof *step_ms);
    llmm_seq_id *seqs = malloc((size_t)o->parallel * sizeof *seqs);
    llmm_token *toks = malloc((size_t)o->parallel * sizeof *toks);
    llmm_status st = tps && step_ms && seqs && toks ? LLMM_OK : LLMM_ERR_NO_MEMORY;
    if (!st) st = bench_parallel_decode(ctx, res->info.n_vocab, first, o, counter, seqs, toks, tps, step_ms, res);
    if (!st) res->aggregate_tps = spread_of(tps, (size_t)o->repeats);
    if (!st) res->parallel_step_ms = latency_of(step_ms, n_steps);
    free(tps);
    free(step_ms);
    free(seqs);
    free(toks);
    return st;
}

/* ---------------------------------------------------------------- report */

static const char *base_name(const char *path) {
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}


static int kv_block_size(const options *o) { return o->block_size ? o->block_size : 16; }

static void format_count(uint64_t n, char *buf, size_t size) {
    if (n >= 1000000000) snprintf(buf, size, "%.2fB", n / 1e9);
    else if (n >= 1000000) snprintf(buf, size, "%.2fM", n / 1e6);
    else if (n >= 1000) snprintf(buf, size, "%.1fK", n / 1e3);
    else snprintf(buf, size, "%llu", (unsigned long long)n);
}

/* Weights only, at the best decode speed: the figure the tables have always shown. */
static double effective_gbs(const results *r) { return r->decode_tps.max * r->bytes_per_token / 1e9; }

static double decode_bytes_per_token(const results *r) { return r->bytes_per_token + r->kv_bytes_per_token; }

/* Weights and K/V, at the median decode speed. */
static double decode_gbs(const results *r) { return decode_bytes_per_token(r) * r->decode_tps.median / 1e9; }

#define MAX_COLUMNS 20
#define CELL_CHARS 48

/* One markdown table of a single row. */
typedef struct table {
    int n;
    const char *head[MAX_COLUMNS];
    char cell[MAX_COLUMNS][CELL_CHARS];
} table;

#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
static void add_cell(table *t, const char *head, const char *fmt, ...) {
    if (t->n == MAX_COLUMNS) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->cell[t->n], CELL_CHARS, fmt, ap);
    va_end(ap);
    t->head[t->n++] = head;
}

/* A figure from a bandwidth probe, or n/a when the probe did not run. */
static void add_measured(table *t, const char *head, const char *fmt, double v, int measured) {
    if (measured) add_cell(t, head, fmt, v);
    else add_cell(t, head, "n/a");
}

static void print_table(const table *t) {
    static const char dashes[] = "--------------------------------------------------";
    int width[MAX_COLUMNS];
    for (int c = 0; c < t->n; c++) {
        int h = (int)strlen(t->head[c]), v = (int)strlen(t->cell[c]);
        width[c] = h > v ? h : v;
    }
    for (int c = 0; c < t->n; c++) printf("| %-*s ", width[c], t->head[c]);
    printf("|\n");
    for (int c = 0; c < t->n; c++) printf("|%.*s", width[c] + 2, dashes);
    printf("|\n");
    for (int c = 0; c < t->n; c++) printf(c ? "| %*s " : "| %-*s ", width[c], t->cell[c]);
    printf("|\n");
}

static void print_speed_table(const results *r) {
    table t = {0};
    char params[CELL_CHARS];
    format_count(r->info.n_params, params, sizeof params);
    add_cell(&t, "model", "%.47s", base_name(r->model_file));
    add_cell(&t, "params", "%s", params);
    add_cell(&t, "file MiB", "%.2f", r->info.file_bytes / MIB);
    add_cell(&t, "threads", "%d", r->n_threads);
    add_cell(&t, "prompt tok/s best", "%.1f", r->prompt_tps.max);
    add_cell(&t, "prompt tok/s med", "%.1f", r->prompt_tps.median);
    add_cell(&t, "prompt tok/s min", "%.1f", r->prompt_tps.min);
    add_cell(&t, "TTFT ms med", "%.2f", r->ttft_ms.median);
    add_cell(&t, "decode tok/s best", "%.1f", r->decode_tps.max);
    add_cell(&t, "decode tok/s med", "%.1f", r->decode_tps.median);
    add_cell(&t, "decode tok/s min", "%.1f", r->decode_tps.min);
    add_cell(&t, "ms/token", "%.3f", 1e3 / r->decode_tps.max);
    add_cell(&t, "decode ms p50", "%.3f", r->decode_ms.p50);
    add_cell(&t, "decode ms p95", "%.3f", r->decode_ms.p95);
    add_cell(&t, "decode ms p99", "%.3f", r->decode_ms.p99);
    add_cell(&t, "decode ms max", "%.3f", r->decode_ms.max);
    add_cell(&t, "first decode ms", "%.2f", r->first_decode_ms);
    add_cell(&t, "load ms", "%.1f", r->load_ms);
    add_cell(&t, "peak RSS MiB", "%.1f", r->peak_rss_bytes / MIB);
    print_table(&t);
}

static void print_bandwidth_table(const results *r) {
    table t = {0};
    const int read = r->measured_gbs > 0, triad = r->triad_gbs > 0, paired = r->paired_fraction > 0;
    add_cell(&t, "model", "%.47s", base_name(r->model_file));
    add_cell(&t, "bytes/token MiB (est.)", "%.3f", r->bytes_per_token / MIB);
    add_cell(&t, "KV bytes/token MiB", "%.3f", r->kv_bytes_per_token / MIB);
    add_cell(&t, "effective GB/s", "%.2f", effective_gbs(r));
    add_measured(&t, "measured GB/s", "%.2f", r->measured_gbs, read);
    add_measured(&t, "efficiency %", "%.1f", read ? 100 * effective_gbs(r) / r->measured_gbs : 0, read);
    add_cell(&t, "decode GB/s (w+KV)", "%.2f", decode_gbs(r));
    add_measured(&t, "paired triad GB/s", "%.2f", r->paired_triad_gbs, paired);
    add_measured(&t, "of paired triad %", "%.1f", 100 * r->paired_fraction, paired);
    add_measured(&t, "triad after GB/s", "%.2f", r->triad_gbs, triad);
    add_measured(&t, "of triad after %", "%.1f", triad ? 100 * decode_gbs(r) / r->triad_gbs : 0, triad);
    print_table(&t);
}

static void print_parallel_table(const results *r, const options *o) {
    printf("\n%d sequences forked from one %d-token prompt, decoded together (one forward step per token\n"
           "for all of them); aggregate = sequences x tokens / time. KV %s, block size %d.\n\n",
           o->parallel, o->n_prompt, kv_type_name(o->kv_type), kv_block_size(o));
    printf("| model | threads | S | prompt tok/s | aggregate tok/s best | aggregate tok/s med | aggregate tok/s min |"
           " per sequence tok/s | step ms p50 | p95 | p99 | max | fork us | fork bytes |\n"
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    printf("| %s | %d | %d | %.1f | %.1f | %.1f | %.1f | %.2f | %.3f | %.3f | %.3f | %.3f | %.2f | %zu |\n",
           base_name(r->model_file), r->n_threads, o->parallel, r->prompt_tps.max, r->aggregate_tps.max,
           r->aggregate_tps.median, r->aggregate_tps.min, r->aggregate_tps.max / o->parallel, r->parallel_step_ms.p50,
           r->parallel_step_ms.p95, r->parallel_step_ms.p99, r->parallel_step_ms.max, r->fork_us, r->fork_bytes);
}

static void print_tables(const results *r, const options *o) {
    printf("%d-token prompt, then %d tokens decoded one at a time, %d repeats (best/median/min over them);\n"
           "TTFT = prefill + choosing the first token; decode ms p50/p95/p99/max over all %d decode steps.\n"
           "KV %s, block size %d; packed weights %s. Peak RSS is measured before the bandwidth probes.\n"
           "Backend asked for: %s.\n\n",
           o->n_prompt, o->n_gen, o->repeats, o->repeats * o->n_gen, kv_type_name(o->kv_type), kv_block_size(o),
           o->no_repack ? "off (--no-repack)" : "on (made during the first decode steps)", backend_name(o->backend));
    print_speed_table(r);
    printf("\ndecode is memory-bound on CPU: every weight is read once per token, so efficiency =\n"
           "effective / measured bandwidth is the figure that matters. bytes/token is an ESTIMATE of the\n"
           "weights streamed per token (file bytes, less the token embedding table unless it is also the\n"
           "output head (%s here), plus one row of it); effective GB/s = best decode tok/s x bytes/token;\n"
           "measured = multi-threaded read of a 1 GiB buffer. decode GB/s adds the K/V read at the mean\n"
           "position (%.1f) to bytes/token, at the median decode tok/s; triad = STREAM a = b + s*c,\n"
           "traffic counted as 3 arrays (STREAM's convention; 4 with write-allocate). Models smaller\n"
           "than the CPU caches can exceed 100%%. ms/token is from the best decode run.\n\n",
           r->output_tied ? "tied" : "not tied", r->kv_mean_position);
    print_bandwidth_table(r);
    if (o->parallel) print_parallel_table(r, o);
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

/* Keys of the first versions, kept as they were (best = the fastest repeat). */
static void print_json_speed(const results *r) {
    print_json_number("load_ms", r->load_ms, 1);
    print_json_number("prompt_tok_s_best", r->prompt_tps.max, 1);
    print_json_number("prompt_tok_s_median", r->prompt_tps.median, 1);
    print_json_number("decode_tok_s_best", r->decode_tps.max, 1);
    print_json_number("decode_tok_s_median", r->decode_tps.median, 1);
    print_json_number("ms_per_token", 1e3 / r->decode_tps.max, 1);
    /* medians, their spread, and latency */
    print_json_number("prefill_tok_s", r->prompt_tps.median, 1);
    print_json_number("prefill_tok_s_min", r->prompt_tps.min, 1);
    print_json_number("prefill_tok_s_max", r->prompt_tps.max, 1);
    print_json_number("decode_tok_s", r->decode_tps.median, 1);
    print_json_number("decode_tok_s_min", r->decode_tps.min, 1);
    print_json_number("decode_tok_s_max", r->decode_tps.max, 1);
    print_json_number("ttft_ms", r->ttft_ms.median, 1);
    print_json_number("decode_ms_p50", r->decode_ms.p50, 1);
    print_json_number("decode_ms_p95", r->decode_ms.p95, 1);
    print_json_number("decode_ms_p99", r->decode_ms.p99, 1);
    print_json_number("decode_ms_max", r->decode_ms.max, 1);
    print_json_number("first_decode_ms", r->first_decode_ms, 1);
    printf(",\"peak_rss_bytes\":%llu", (unsigned long long)r->peak_rss_bytes);
}

static void print_json_bandwidth(const results *r) {
    const int read = r->measured_gbs > 0, triad = r->triad_gbs > 0, paired = r->paired_fraction > 0;
    print_json_number("bytes_per_token_estimate", r->bytes_per_token, 1);
    print_json_number("bytes_per_token_mib_estimate", r->bytes_per_token / MIB, 1);
    printf(",\"output_tied\":%s", r->output_tied ? "true" : "false");
    print_json_number("effective_gb_s", effective_gbs(r), 1);
    print_json_number("measured_gb_s", r->measured_gbs, read);
    print_json_number("efficiency_pct", read ? 100 * effective_gbs(r) / r->measured_gbs : 0, read);
    print_json_number("kv_mean_position", r->kv_mean_position, 1);
    print_json_number("kv_bytes_per_token", r->kv_bytes_per_token, 1);
    print_json_number("decode_bytes_per_token", decode_bytes_per_token(r), 1);
    print_json_number("bandwidth_gb_s", decode_gbs(r), 1);
    print_json_number("stream_triad_gb_s", r->triad_gbs, triad);
    printf(",\"stream_triad_arrays_counted\":%d", TRIAD_ARRAYS_COUNTED);
    print_json_number("stream_triad_paired_gb_s", r->paired_triad_gbs, paired);
    print_json_number("bandwidth_fraction", paired ? r->paired_fraction : triad ? decode_gbs(r) / r->triad_gbs : 0,
                      paired || triad);
    print_json_number("bandwidth_fraction_after", triad ? decode_gbs(r) / r->triad_gbs : 0, triad);
}

static void print_json_parallel(const results *r, const options *o) {
    printf(",\"parallel\":%d", o->parallel);
    print_json_number("aggregate_tok_s", r->aggregate_tps.max, 1);
    print_json_number("aggregate_tok_s_median", r->aggregate_tps.median, 1);
    print_json_number("aggregate_tok_s_min", r->aggregate_tps.min, 1);
    print_json_number("per_sequence_tok_s", r->aggregate_tps.max / o->parallel, 1);
    print_json_number("parallel_step_ms_p50", r->parallel_step_ms.p50, 1);
    print_json_number("parallel_step_ms_p95", r->parallel_step_ms.p95, 1);
    print_json_number("parallel_step_ms_p99", r->parallel_step_ms.p99, 1);
    print_json_number("parallel_step_ms_max", r->parallel_step_ms.max, 1);
    print_json_number("fork_us", r->fork_us, 1);
    printf(",\"fork_bytes\":%zu", r->fork_bytes);
}

static void print_json_state(const results *r) {
    printf(",\"state_bytes\":%zu", r->state_bytes);
    print_json_number("state_save_ms", r->save_ms, 1);
    print_json_number("state_load_ms", r->state_load_ms, 1);
    print_json_number("state_prefill_ms", r->prefill_ms, 1);
    print_json_number("state_load_speedup", r->prefill_ms / r->state_load_ms, 1);
}

static void print_json(const results *r, const options *o) {
    printf("{\"model\":");
    print_json_string(base_name(r->model_file));
    printf(",\"params\":%llu,\"file_bytes\":%llu", (unsigned long long)r->info.n_params,
           (unsigned long long)r->info.file_bytes);
    print_json_number("file_mib", r->info.file_bytes / MIB, 1);
    printf(",\"threads\":%d,\"prompt_tokens\":%d,\"gen_tokens\":%d,\"repeats\":%d", r->n_threads, o->n_prompt,
           o->n_gen, o->repeats);
    printf(",\"kv_type\":\"%s\",\"kv_block_size\":%d", kv_type_name(o->kv_type), kv_block_size(o));
    printf(",\"repack_weights\":%s", o->no_repack ? "false" : "true");
    printf(",\"backend\":\"%s\",\"device\":%d", backend_name(o->backend), o->device);
    print_json_number("module_load_ms", r->stats.module_load_ms, 1);
    print_json_number("backend_init_ms", r->stats.backend_init_ms, 1);
    print_json_number("weights_ms", r->stats.weights_ms, 1);
    print_json_number("first_token_ms", r->stats.first_token_ms, 1);
    printf(",\"graphs\":%u,\"graph_replays\":%llu", r->stats.graphs, (unsigned long long)r->stats.graph_replays);
    print_json_number("graph_capture_ms", r->stats.graph_capture_ms, 1);
    print_json_speed(r);
    print_json_bandwidth(r);
    if (o->parallel) print_json_parallel(r, o);
    if (r->state_bytes) print_json_state(r);
    printf("}\n");
}

/* ---------------------------------------------------------------- main */

static llmm_status load_model(const char *path, int repack, const llmm_allocator *alloc, llmm_model **m, double *ms,
                              char *err, size_t err_size) {
    llmm_model_params mp;
    llmm_model_params_default(&mp, sizeof mp);
    mp.repack_weights = repack;
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
    cp.backend = o->backend;
    cp.device = o->device;
    if (o->block_size) cp.kv_block_size = (uint32_t)o->block_size;
    if (o->parallel > 1) { /* the prompt and its S forks */
        cp.n_seq_max = (uint32_t)o->parallel + 1;
    } else { /* the prompt and bench_decode's fork: one sequence's blocks, the fork's new ones and a copy */
        cp.n_seq_max = 2;
        cp.n_ctx_total = cp.n_ctx + (uint32_t)o->n_gen + 2 * cp.kv_block_size;
    }
    return llmm_context_create(m, &cp, ctx);
}

static llmm_status bench_all(llmm_context *ctx, const llmm_model *m, const options *o, const alloc_counter *counter,
                             results *res) {
    llmm_token first = 0;
    llmm_status st = bench_single(ctx, m, o, res, &first);
    if (!st && o->parallel) st = bench_parallel(ctx, first, o, counter, res);
    if (!st && o->save_load) st = bench_state(ctx, m, o, res);
    return st;
}

/* The bandwidth probes run last, after the context is freed: their 1 GiB buffers stay out of
 * the peak RSS, and the context's threads out of their way. */
static void measure_bandwidths(const options *o, results *res) {
    if (o->no_bandwidth) return;
    res->measured_gbs = measure_bandwidth(res->n_threads);
    if (res->measured_gbs > 0) fprintf(stderr, "memory read bandwidth: %.2f GB/s\n", res->measured_gbs);
    res->triad_gbs = measure_triad(res->n_threads, TRIAD_PASSES, 0);
    if (res->triad_gbs > 0) fprintf(stderr, "STREAM triad bandwidth: %.2f GB/s\n", res->triad_gbs);
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
    res->kv_mean_position = mean_decode_position(o);
    res->kv_bytes_per_token = kv_bytes_per_token(&res->info, o);
    llmm_context *ctx = NULL;
    st = create_context(m, o, res->n_threads, &ctx);
    if (st) {
        llmm_model_last_error(m, err, sizeof err);
        return fail("cannot create context", st, err);
    }
    const double kv_position = kv_bytes_per_position(ctx);
    if (kv_position > 0) res->kv_bytes_per_token = kv_position * res->kv_mean_position;
    st = bench_all(ctx, m, o, counter, res);
    res->stats.size = sizeof res->stats;
    if (!st) st = llmm_context_get_stats(ctx, &res->stats);
    if (!st)
        fprintf(stderr,
                "cold start: module %.1f ms, backend init %.1f ms, weights %.1f ms, first token %.1f ms; graphs: %u "
                "held, %llu replays, %.1f ms capturing\n",
                res->stats.module_load_ms, res->stats.backend_init_ms, res->stats.weights_ms,
                res->stats.first_token_ms, res->stats.graphs, (unsigned long long)res->stats.graph_replays,
                res->stats.graph_capture_ms);
    const uint64_t rss_now = res->rss_frozen ? current_rss_bytes() : peak_rss_bytes();
    if (rss_now > res->peak_rss_bytes) res->peak_rss_bytes = rss_now;
    int rc = st ? fail("benchmark failed", st, llmm_context_last_error(ctx)) : 0;
    llmm_context_free(ctx);
    if (!rc) measure_bandwidths(o, res);
    return rc;
}

/* ---------------------------------------------------------------- speculative decoding */

/* The prompt text of -f, or a default; malloc'd. */
static char *read_prompt(const options *o) {
    if (!o->prompt_file) return strdup("Once upon a time, there was a little girl named Lily. She liked to play");
    FILE *f = fopen(o->prompt_file, "rb");
    if (!f) return NULL;
    char *text = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len + 4096 + 1 > cap) {
            char *p = realloc(text, cap = 2 * cap + 4096 + 1);
            if (!p) break;
            text = p;
        }
        size_t got = fread(text + len, 1, cap - len - 1, f);
        len += got;
        if (got == 0) break;
    }
    fclose(f);
    if (text) text[len] = '\0';
    return text;
}

typedef struct spec_run {
    double tps;
    llmm_generate_stats stats;
} spec_run;

/* One greedy llmm_generate of o->n_gen tokens into out, with speculation when spec. */
static llmm_status spec_generate(llmm_context *ctx, const char *prompt, const options *o, const llmm_model *draft,
                                 int spec, llmm_token *out, spec_run *r) {
    llmm_sampler_params sp;
    llmm_sampler_params_default(&sp, sizeof sp);
    sp.temperature = 0;
    llmm_generate_params gp;
    llmm_generate_params_default(&gp, sizeof gp);
    gp.max_tokens = o->n_gen;
    gp.sampling = &sp;
    gp.out_tokens = out;
    gp.out_capacity = (size_t)o->n_gen;
    if (spec) {
        gp.spec_draft_model = draft;
        gp.spec_ngram = draft ? 0 : o->lookup;
        if (o->draft_max) gp.spec_max_tokens = o->draft_max;
    }
    r->stats = (llmm_generate_stats){.size = sizeof r->stats};
    llmm_status st = llmm_generate(ctx, prompt, &gp, &r->stats);
    r->tps = r->stats.generate_tokens_per_s;
    return st;
}

static int compare_runs(const void *a, const void *b) {
    const double x = ((const spec_run *)a)->tps, y = ((const spec_run *)b)->tps;
    return (x > y) - (x < y);
}

/* One verify step of pending + k guesses after the prompt, rolled back, best of repeats (ms). */
static llmm_status time_verify(llmm_context *ctx, llmm_speculator *spec, size_t n_prompt, size_t k, int repeats,
                               double *best) {
    llmm_token guess[LLMM_SPEC_MAX_TOKENS];
    for (size_t i = 0; i < k; i++) guess[i] = (llmm_token)(3 + i);
    const llmm_spec_item item = {.seq = 0, .pending = 3, .draft = guess, .n_draft = k};
    *best = 0;
    for (int r = 0; r < repeats + 1; r++) {
        const double t0 = now_ms();
        llmm_status st = llmm_speculator_verify(spec, &item, 1);
        const double ms = now_ms() - t0;
        if (!st) st = llmm_seq_truncate(ctx, 0, n_prompt);
        if (st) return st;
        if (r > 0 && (*best == 0 || ms < *best)) *best = ms; /* the first warms up */
    }
    return LLMM_OK;
}

static llmm_status bench_verify_cost(llmm_context *ctx, const llmm_model *m, const char *prompt, const options *o) {
    llmm_speculator *spec = NULL;
    size_t n = 0;
    llmm_status st = llmm_tokenize(m, prompt, strlen(prompt), LLMM_TOKENIZE_ADD_SPECIAL, NULL, 0, &n);
    llmm_token *ids = malloc((n + 1) * sizeof *ids);
    if (!ids) return LLMM_ERR_NO_MEMORY;
    st = llmm_tokenize(m, prompt, strlen(prompt), LLMM_TOKENIZE_ADD_SPECIAL, ids, n, &n);
    if (!st) st = llmm_seq_clear(ctx, 0);
    if (!st) st = llmm_prefill(ctx, 0, ids, n, 0);
    if (!st) st = llmm_speculator_create(ctx, NULL, &spec);
    static const size_t ks[] = {0, 1, 2, 4, 8, 16};
    double ms[sizeof ks / sizeof *ks];
    for (size_t i = 0; !st && i < sizeof ks / sizeof *ks; i++) st = time_verify(ctx, spec, n, ks[i], o->repeats, &ms[i]);
    if (!st) {
        printf("\n| guesses k | rows | verify step ms | x one-row step | ms per row |\n|---|---|---|---|---|\n");
        for (size_t i = 0; i < sizeof ks / sizeof *ks; i++)
            printf("| %zu | %zu | %.2f | %.2f | %.2f |\n", ks[i], ks[i] + 1, ms[i], ms[i] / ms[0], ms[i] / (ks[i] + 1));
    }
    if (!st && !o->no_bandwidth) {
        llmm_model_info info = {.size = sizeof info};
        int tied = 0;
        const double triad = llmm_model_get_info(m, &info) == LLMM_OK ? measure_triad(o->n_threads ? o->n_threads
                                                                                        : physical_cores(), TRIAD_PASSES, 1)
                                                                        : 0;
        const double bytes = weight_bytes_per_token(&info, &tied);
        if (triad > 0)
            printf("\nbandwidth bound: %.1f MB of weights per step / %.2f GB/s (STREAM triad) = %.2f ms a step, "
                   "whatever k\n", bytes / 1e6, triad, bytes / triad / 1e6);
    }
    llmm_speculator_free(spec);
    free(ids);
    return st;
}

static int bench_speculative(const options *o, llmm_model *m) {
    char err[512] = "";
    char *prompt = read_prompt(o);
    if (!prompt) return fail("cannot read the prompt file", LLMM_ERR_IO, o->prompt_file);
    llmm_model *draft = NULL;
    double draft_load_ms = 0;
    llmm_status st = o->draft ? load_model(o->draft, !o->no_repack, NULL, &draft, &draft_load_ms, err, sizeof err) : LLMM_OK;
    size_t n_prompt = 0;
    if (!st) st = llmm_tokenize(m, prompt, strlen(prompt), LLMM_TOKENIZE_ADD_SPECIAL, NULL, 0, &n_prompt);
    if (st == LLMM_ERR_BUFFER_TOO_SMALL) st = LLMM_OK;
    options co = *o;
    co.n_prompt = (int)n_prompt + LLMM_SPEC_MAX_TOKENS;
    llmm_context *ctx = NULL;
    if (!st && (st = create_context(m, &co, o->n_threads, &ctx))) llmm_model_last_error(m, err, sizeof err);
    spec_run *runs = calloc((size_t)o->repeats * 2, sizeof *runs);
    llmm_token *plain_out = calloc((size_t)o->n_gen * 2, sizeof *plain_out), *spec_out = plain_out + o->n_gen;
    if (!st && (!runs || !plain_out)) st = LLMM_ERR_NO_MEMORY;
    int identical = 1;
    /* plain and speculative alternate, each first in every other repeat, so that both see the
     * same machine */
    for (int r = 0; !st && r < o->repeats; r++) {
        for (int i = 0; !st && i < 2; i++) {
            const int spec = (i + r) % 2;
            st = spec_generate(ctx, prompt, o, draft, spec, spec ? spec_out : plain_out, &runs[spec * o->repeats + r]);
        }
        if (!st) identical &= runs[r].stats.n_generated == runs[o->repeats + r].stats.n_generated &&
                              !memcmp(plain_out, spec_out, runs[r].stats.n_generated * sizeof *plain_out);
        if (!st) fprintf(stderr, "repeat %d: plain %.1f tok/s, speculative %.1f tok/s\n", r + 1, runs[r].tps,
                         runs[o->repeats + r].tps);
    }
    if (!st) {
        qsort(runs, (size_t)o->repeats, sizeof *runs, compare_runs);
        qsort(runs + o->repeats, (size_t)o->repeats, sizeof *runs, compare_runs);
        const llmm_generate_stats *s = &runs[o->repeats + o->repeats / 2].stats;
        const double plain = runs[o->repeats / 2].tps, spec = runs[o->repeats + o->repeats / 2].tps;
        printf("| model | proposer | prompt tokens | generated | plain tok/s | speculative tok/s | speed-up | "
               "acceptance | tokens per target step | draft ms | identical |\n|---|---|---|---|---|---|---|---|---|---|---|\n");
        char proposer[600];
        if (draft) snprintf(proposer, sizeof proposer, "draft %s, k <= %d", base_name(o->draft), o->draft_max ? o->draft_max : 8);
        else snprintf(proposer, sizeof proposer, "lookup n=%d, k <= %d", o->lookup, o->draft_max ? o->draft_max : 8);
        printf("| %s | %s | %zu | %zu | %.1f | %.1f | %.2fx | %.1f %% | %.2f | %.1f | %s |\n", base_name(o->model),
               proposer, s->n_prompt, s->n_generated, plain, spec, plain > 0 ? spec / plain : 0,
               100.0 * s->spec_acceptance, s->n_target_steps ? (double)s->n_generated / (double)s->n_target_steps : 0,
               s->spec_draft_ms, identical ? "yes" : "NO");
        st = bench_verify_cost(ctx, m, prompt, o);
    }
    int rc = st ? fail("speculative benchmark failed", st, ctx ? llmm_context_last_error(ctx) : err) : 0;
    if (!rc && !identical) rc = fail("speculative output differs from plain greedy output", LLMM_ERR_INTERNAL, NULL);
    free(runs);
    free(plain_out);
    llmm_context_free(ctx);
    llmm_model_free(draft);
    free(prompt);
    return rc;
}

/* ---------------------------------------------------------------- LoRA */

enum { LORA_COPIES = 4, SWAPS = 2000 };

/* Tokens/s of decoding n_gen tokens in each of n_seq sequences together, after a -p token
 * prompt in each; sequence s runs with ads[s % n_ads] (n_ads 0: none). */
static llmm_status lora_decode_tps(llmm_context *ctx, const llmm_model *m, const options *o, int n_seq,
                                   llmm_adapter *const *ads, int n_ads, double *tps) {
    llmm_model_info info = {.size = sizeof info};
    llmm_status st = llmm_model_get_info(m, &info);
    llmm_token *prompt = calloc((size_t)o->n_prompt, sizeof *prompt);
    llmm_seq_id *seqs = calloc((size_t)n_seq, sizeof *seqs);
    llmm_token *toks = calloc((size_t)n_seq, sizeof *toks);
    if (!st && (!prompt || !seqs || !toks)) st = LLMM_ERR_NO_MEMORY;
    for (int i = 0; !st && i < o->n_prompt; i++) prompt[i] = (llmm_token)(1 + (i * 7) % (int)(info.n_vocab - 1));
    for (int s = 0; !st && s < n_seq; s++) {
        seqs[s] = s;
        toks[s] = (llmm_token)(1 + s);
        llmm_adapter *a = n_ads ? ads[s % n_ads] : NULL;
        if (!(st = llmm_seq_clear(ctx, s))) st = llmm_seq_set_adapters(ctx, s, a ? &a : NULL, NULL, a ? 1 : 0);
        if (!st) st = llmm_prefill(ctx, s, prompt, (size_t)o->n_prompt, 0);
    }
    const double t0 = now_ms();
    for (int i = 0; !st && i < o->n_gen; i++) st = llmm_decode(ctx, seqs, toks, (size_t)n_seq);
    *tps = st ? 0 : (double)o->n_gen * n_seq / ((now_ms() - t0) / 1000);
    free(prompt);
    free(seqs);
    free(toks);
    return st;
}

/* Median tokens/s without and with adapters, alternating so that both see the same machine. */
static llmm_status lora_pair(llmm_context *ctx, const llmm_model *m, const options *o, int n_seq,
                             llmm_adapter *const *ads, int n_ads, double *base, double *with) {
    double *v = calloc((size_t)o->repeats * 2, sizeof *v);
    if (!v) return LLMM_ERR_NO_MEMORY;
    llmm_status st = LLMM_OK;
    for (int r = 0; !st && r < o->repeats; r++) {
        st = lora_decode_tps(ctx, m, o, n_seq, ads, 0, &v[r]);
        if (!st) st = lora_decode_tps(ctx, m, o, n_seq, ads, n_ads, &v[o->repeats + r]);
    }
    if (!st) {
        *base = spread_of(v, (size_t)o->repeats).median;
        *with = spread_of(v + o->repeats, (size_t)o->repeats).median;
    }
    free(v);
    return st;
}

/* The size of a file in MB (0 when it cannot be read). */
static double file_mb(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    const long size = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    fclose(f);
    return size > 0 ? (double)size / 1e6 : 0;
}

static int bench_lora(const options *o, llmm_model *m) {
    llmm_adapter *ads[LORA_COPIES] = {0};
    char err[512] = "";
    llmm_status st = LLMM_OK;
    double load_ms = 0;
    for (int i = 0; !st && i < LORA_COPIES; i++) {
        const double t0 = now_ms();
        st = llmm_adapter_load(m, o->lora[i % o->n_lora], &ads[i]);
        if (i == 0) load_ms = now_ms() - t0; /* the first: the others find the file cached as well */
    }
    if (st) {
        llmm_model_last_error(m, err, sizeof err);
        return fail("cannot load the adapter", st, err);
    }
    llmm_adapter_info ai = {.size = sizeof ai};
    llmm_adapter_get_info(ads[0], &ai);
    options co = *o;
    co.parallel = o->parallel > 1 ? o->parallel : 1;
    llmm_context *ctx = NULL;
    if ((st = create_context(m, &co, o->n_threads, &ctx))) {
        llmm_model_last_error(m, err, sizeof err);
        return fail("cannot create context", st, err);
    }
    double base = 0, with = 0, pbase = 0, pwith = 0, swap_us = 0;
    st = lora_pair(ctx, m, o, 1, ads, 1, &base, &with);
    /* a swap of loaded adapters: attach, detach, as an app switching a sequence's adapter */
    if (!st) {
        const double t0 = now_ms();
        for (int i = 0; !st && i < SWAPS; i++) st = llmm_seq_set_adapters(ctx, 0, &ads[i % LORA_COPIES], NULL, 1);
        swap_us = (now_ms() - t0) * 1000 / SWAPS;
    }
    if (!st && o->parallel > 1) st = lora_pair(ctx, m, o, o->parallel, ads, LORA_COPIES, &pbase, &pwith);
    if (st) {
        int rc = fail("LoRA benchmark failed", st, llmm_context_last_error(ctx));
        llmm_context_free(ctx);
        for (int i = 0; i < LORA_COPIES; i++) llmm_adapter_free(ads[i]);
        return rc;
    }
    printf("| model | adapter | rank | file MB | MB held | load ms | decode tok/s base | with adapter | ratio | swap us |\n"
           "|---|---|---|---|---|---|---|---|---|---|\n");
    printf("| %s | %s | %u | %.2f | %.2f | %.2f | %.1f | %.1f | %.2f | %.2f |\n", base_name(o->model),
           base_name(o->lora[0]), ai.rank, file_mb(o->lora[0]), (double)ai.bytes / 1e6, load_ms, base, with,
           base > 0 ? with / base : 0, swap_us);
    if (o->parallel > 1)
        printf("\n| sequences | adapters | aggregate tok/s base | with adapters | ratio |\n|---|---|---|---|---|\n"
               "| %d | %d | %.1f | %.1f | %.2f |\n",
               o->parallel, LORA_COPIES, pbase, pwith, pbase > 0 ? pwith / pbase : 0);
    llmm_context_free(ctx);
    for (int i = 0; i < LORA_COPIES; i++) llmm_adapter_free(ads[i]);
    return 0;
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
    llmm_status st = load_model(o.model, !o.no_repack, &alloc, &m, &res.load_ms, err, sizeof err);
    if (st) return fail("cannot load model", st, err);
    fprintf(stderr, "loaded in %.1f ms; threads: %d\n", res.load_ms, res.n_threads);
    if (o.n_lora) {
        rc = bench_lora(&o, m);
        llmm_model_free(m);
        return rc;
    }
    if (o.draft || o.lookup) {
        rc = bench_speculative(&o, m);
        llmm_model_free(m);
        return rc;
    }
    rc = run(&o, m, &counter, &res);
    llmm_model_free(m);
    if (rc) return rc;
    if (o.json) print_json(&res, &o);
    else print_tables(&res, &o);
    return 0;
}
