/* The CUDA module (cuda/backend.cu) as the core loads it, built against the SIMT emulation
 * (build/libllmmini-cuda-emu.so, every kernel run on the CPU): its table through the backend
 * conformance suite, then whole models on LLMM_BACKEND_CUDA through LLMM_CUDA_MODULE: the
 * stories260K and architecture golden outputs; every stories260K file with every KV type
 * against the CPU backend on the same file; forked sequences (copy-on-write of device KV
 * blocks) against the CPU backend and against unforked runs; a batched decode of sequences
 * of different lengths against each alone; a model with NaN or +inf norm weights giving
 * LLMM_ERR_NUMERICAL through the device's sampling.
 *
 * The module is the file LLMM_CUDA_EMU_MODULE names, else libllmmini-cuda-emu.so in the
 * folder above this binary's ($(BUILD)/tests/ -> $(BUILD)/). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <dirent.h>
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "support/backend_conformance.h"
#include "backend/backend_module.h"
#include "support/decode_sample_check.h"
#include "support/fixtures.h"
#include "support/numerical_check.h"
#include "support/golden_check.h"
#include "format/quant.h"
#include "llmmini.h"
#include "model/model.h"
#include "support/shared_data.h"
#include "support/quant_temp.h"
#include "format/gguf.h"
#include <sys/wait.h>
#include <unistd.h>

#define MAX_IDS GOLDEN_MAX_IDS

static char module_path[4096];

static void find_module(const char *argv0) { emulated_cuda_module(argv0, module_path, sizeof module_path); }

/* llmmini-synth, built next to the module ($(BUILD)/tests/ -> $(BUILD)/). */
static char synth_tool[1024];
static void find_synth(const char *argv0) {
    const char *slash = strrchr(argv0, '/');
    const int dir_len = slash ? (int)(slash - argv0) : 1;
    snprintf(synth_tool, sizeof synth_tool, "%.*s/../llmmini-synth", dir_len, slash ? argv0 : ".");
}

/* ------------------------------------------------------------------ the table */

static void test_conformance(void **state) {
    (void)state;
    void *h = dlopen(module_path, RTLD_NOW | RTLD_LOCAL);
    if (!h) fail_msg("dlopen %s: %s", module_path, dlerror());
    llmm_backend_module_fn entry = (llmm_backend_module_fn)dlsym(h, LLMM_BACKEND_MODULE_ENTRY);
    assert_non_null(entry);
    assert_null(entry(LLMM_BACKEND_API_VERSION + 1));
    const llmm_backend_ops *be = entry(LLMM_BACKEND_API_VERSION);
    assert_non_null(be);
    assert_int_equal(be->api_version, LLMM_BACKEND_API_VERSION);
    assert_int_equal(be->kind, LLMM_BACKEND_CUDA);
    assert_string_equal(be->name, "cuda");
    assert_true(be->flags & LLMM_BACKEND_DEVICE_MEMORY);
    assert_true(llmm__backend_table_ok(be));
    const double t0 = now_s();
    /* prompt matmuls of more than 8 rows run llmm__cu_gemm (cuda/gemm.h) over F16, except for the
     * types llmm__cu_gemm_int8 takes (cuda/gemm_int8.h: Q4_0, Q5_0, Q8_0, IQ4_NL), which keep the CPU's
     * operand, and F32, F16 and BF16, whose operand llmm__cu_gemm shares with the CPU */
    uint64_t f16_types = 0;
    for (uint32_t type = 0; type < LLMM_TYPE_COUNT; type++) {
        const llmm_type_traits *tt = llmm__type_get(type);
        if (tt && tt->block_size > 1) f16_types |= 1ull << type;
    }
    f16_types &= ~(1ull << LLMM_TYPE_Q4_0 | 1ull << LLMM_TYPE_Q5_0 | 1ull << LLMM_TYPE_Q8_0 | 1ull << LLMM_TYPE_IQ4_NL);
    const conformance_target t = {
        .label = "cuda-emu", .be = be, .f16_gemm_min_rows = 9, .f16_gemm_types = f16_types};
    conformance_run(&t);
    print_message("conformance of the emulated CUDA module: %.1f s\n", now_s() - t0);
    dlclose(h);
}

/* Two states of one model's share prepare a weight index once: the second gets the first's
 * device copy, which stays until the last of them shuts down; then the share is empty. */
static void test_weight_sharing(void **state) {
    (void)state;
    void *h = dlopen(module_path, RTLD_NOW | RTLD_LOCAL);
    if (!h) fail_msg("dlopen %s: %s", module_path, dlerror());
    const llmm_backend_ops *be = ((llmm_backend_module_fn)dlsym(h, LLMM_BACKEND_MODULE_ENTRY))(LLMM_BACKEND_API_VERSION);
    assert_non_null(be);
    llmm_backend_shared shared = {.users = 0};
    assert_int_equal(pthread_mutex_init(&shared.lock, NULL), 0);
    const llmm_backend_config cfg = {.n_threads = 1, .n_weights = 2, .shared = &shared};
    void *st[2];
    for (int i = 0; i < 2; i++) assert_int_equal(be->init(&cfg, &st[i]), LLMM_OK);
    assert_int_equal(shared.users, 2);
    float row[2][8];
    for (int i = 0; i < 8; i++) row[0][i] = (float)i, row[1][i] = (float)(10 + i);
    llmm_tensor w[2][2];
    for (int s = 0; s < 2; s++)
        for (int i = 0; i < 2; i++) {
            const llmm_tensor host = {.data = row[i], .type = 0 /* F32 */, .ne0 = 8, .ne1 = 1, .row_bytes = 32};
            assert_int_equal(be->prepare_weight(st[s], (size_t)i, LLMM_WEIGHT_VECTOR, &host, &w[s][i]), LLMM_OK);
        }
    assert_ptr_equal(w[0][0].data, w[1][0].data);
    assert_ptr_equal(w[0][1].data, w[1][1].data);
    assert_ptr_not_equal(w[0][0].data, w[0][1].data);
    for (int i = 0; i < 2; i++) be->release_weight(st[0], &w[0][i]);
    be->shutdown(st[0]);
    assert_int_equal(shared.users, 1);
    assert_non_null(shared.data);
    float got[8];
    assert_int_equal(be->download(st[1], got, w[1][1].data, sizeof got), LLMM_OK);
    assert_memory_equal(got, row[1], sizeof got);
    for (int i = 0; i < 2; i++) be->release_weight(st[1], &w[1][i]);
    be->shutdown(st[1]);
    assert_int_equal(shared.users, 0);
    assert_null(shared.data);
    pthread_mutex_destroy(&shared.lock);
    dlclose(h);
}

/* ------------------------------------------------------------------ whole models */

static llmm_context_params context_params(llmm_backend_kind backend, uint32_t n_ctx, uint32_t n_seq, uint32_t n_batch,
                                          llmm_kv_type kv_type) {
    llmm_context_params p;
    llmm_context_params_default(&p, sizeof p);
    p.n_ctx = n_ctx;
    p.n_seq_max = n_seq;
    p.n_batch = n_batch;
    p.n_threads = 1;
    p.kv_type = kv_type;
    p.backend = backend;
    return p;
}

static llmm_context *cuda_context(llmm_model *m, uint32_t n_ctx, uint32_t n_seq, uint32_t n_batch,
                                  llmm_kv_type kv_type) {
    const llmm_context_params p = context_params(LLMM_BACKEND_CUDA, n_ctx, n_seq, n_batch, kv_type);
    return make_context(m, &p);
}

static size_t vocab_size(const llmm_model *m) {
    llmm_model_info info = {.size = sizeof info};
    assert_int_equal(llmm_model_get_info(m, &info), LLMM_OK);
    return info.n_vocab;
}

/* Largest |a - b|; infinite when either holds a NaN (which fmax alone would skip). */
static double max_abs_diff(const float *a, const float *b, size_t n) {
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        const double d = fabs((double)a[i] - b[i]);
        if (isnan(d)) return INFINITY;
        worst = fmax(worst, d);
    }
    return worst;
}

/* KL(p || q) in nats of the softmaxes of two logit rows. */
static double row_kl(const float *p_logits, const float *q_logits, size_t n) {
    double pmax = -INFINITY, qmax = -INFINITY, ps = 0, qs = 0, kl = 0;
    for (size_t i = 0; i < n; i++) pmax = fmax(pmax, p_logits[i]), qmax = fmax(qmax, q_logits[i]);
    for (size_t i = 0; i < n; i++) ps += exp(p_logits[i] - pmax), qs += exp(q_logits[i] - qmax);
    for (size_t i = 0; i < n; i++) {
        const double lp = p_logits[i] - pmax - log(ps), lq = q_logits[i] - qmax - log(qs);
        kl += exp(lp) * (lp - lq);
    }
    return kl;
}

/* As test_generate.c's F32 KV golden check: logits within 1e-3, greedy tokens up to the
 * case's hard bar. */
static void test_golden(void **state) {
    (void)state;
    size_t n = 0;
    const double t0 = now_s();
    {
        /* the CUDA backend resolves to the module, which keeps its buffers in device memory */
        llmm_model *m = load_model("stories260K.gguf", NULL);
        llmm_context_params p;
        llmm_context_params_default(&p, sizeof p);
        p.backend = LLMM_BACKEND_CUDA;
        llmm_context_memory mem = {.size = sizeof mem};
        assert_int_equal(llmm_context_estimate_memory(m, &p, &mem), LLMM_OK);
        assert_true(mem.device_bytes > 0);
        llmm_model_free(m);
    }
    for (size_t i = 0; i < n_golden_cases; i++) {
        const golden_case *gc = &golden_cases[i];
        if (strncmp(gc->model, "stories260K", 11) != 0) continue;
        golden_run g;
        assert_int_equal(golden_load("golden/stories260K", gc->golden, &g), 0);
        llmm_model *m = load_model(gc->model, NULL);
        llmm_context *c = cuda_context(m, 256, 1, 256, LLMM_KV_F32);
        const golden_result r = golden_compare(m, c, &g, gc->prompt);
        print_message("%-30s cuda-emu, KV f32: max |logit diff| %.2e, greedy agreement %zu/%zu (hard bar %zu)\n",
                      gc->golden, r.max_logit_diff, r.agree, g.n_generated, gc->hard_steps);
        const size_t bar = gc->hard_steps < g.n_generated ? gc->hard_steps : g.n_generated;
        assert_true(r.max_logit_diff < 1e-3);
        assert_true(r.agree >= bar);
        golden_free(&g);
        llmm_context_free(c);
        llmm_model_free(m);
        n++;
    }
    assert_true(n >= 7);
    print_message("golden cases on the emulated CUDA module: %.1f s\n", now_s() - t0);
}

/* ------------------------------------------------------------------ architectures */

/* Every model in golden/arch (tiny-ARCH.gguf) has a row in arch_cases, or is of an
 * architecture llmmini refuses (arch_unsupported), so none goes unchecked here; the rows then run on CUDA as test_arch runs them on the CPU: the tolerance of the row,
 * the greedy tokens for the file's reliable steps (all 32 in every file today). */
static void test_arch_golden(void **state) {
    (void)state;
    char dir[1024];
    DIR *d = opendir(shared_path(dir, sizeof dir, "golden/arch"));
    if (!d) fail_msg("cannot list %s", dir);
    size_t n_models = 0, n_refused = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        const size_t len = strlen(e->d_name);
        if (len < 10 || strncmp(e->d_name, "tiny-", 5) != 0 || strcmp(e->d_name + len - 5, ".gguf") != 0) continue;
        size_t a = 0;
        while (a < n_arch_cases && !(strlen(arch_cases[a].arch) == len - 10 &&
                                     strncmp(arch_cases[a].arch, e->d_name + 5, len - 10) == 0))
            a++;
        if (a < n_arch_cases) {
            n_models++;
        } else if (check_arch_unsupported(e->d_name)) {
            n_refused++;
        } else {
            fail_msg("golden/arch/%s has no row in arch_cases (golden_check.c)", e->d_name);
        }
    }
    closedir(d);
    assert_int_equal(n_models, n_arch_cases);
    if (n_refused) print_message("%zu golden architecture(s) refused as not supported yet\n", n_refused);
    const double t0 = now_s();
    for (size_t a = 0; a < n_arch_cases; a++)
        for (size_t p = 0; p < n_arch_prompts; p++)
            check_arch_prompt(&arch_cases[a], arch_prompts[p].name, arch_prompts[p].text, LLMM_BACKEND_CUDA,
                              "cuda-emu,");
    print_message("architecture goldens on the emulated CUDA module: %.1f s\n", now_s() - t0);
}

/* ------------------------------------------------------------------ against the CPU backend */

/* Logits row i of c's last step into row (n_vocab nv). */
static void copy_row(llmm_context *c, size_t i, float *row, size_t nv) {
    const float *l;
    size_t n;
    assert_int_equal(llmm_logits(c, i, &l, &n), LLMM_OK);
    assert_int_equal(n, nv);
    memcpy(row, l, nv * sizeof *l);
}

static const char *const kv_names[] = {"f32", "f16", "q8"};

/* CUDA against the CPU backend on the same file: with an F32 KV cache, the bar the CPU backend
 * itself is held to against the reference engine on every stories260K file (test_generate.c,
 * check_golden_case: 1e-3), for every logits row.
 * F16 and Q8 caches store each backend's own K/V rounded to the format, and the two backends'
 * K/V differ in the last float bits (sums in another order, within the conformance suite's
 * matmul tolerances): a value that lies that close to a rounding boundary of the format lands
 * on the other side of it (stories260K, F16: 1 of the 1088 values of layer 0), the next layers
 * then see inputs that differ by a step of the format, and the logits end up differing by
 * about as much as the format itself moves them. The CPU backend has no logits bound for those
 * types either (test_generate.c: greedy agreement). So there the bound is the F32 one plus
 * twice the format's own effect, measured on the CPU on the same tokens (max |logits with the
 * type - logits with F32 KV|), and the tight check is check_state_exchange.
 * The quantized files quantize the activations to Q8_0 before each matmul, which rounds away
 * such last-bit differences but amplifies the rare one that crosses a rounding boundary: a
 * single flipped activation in layer 0 moves the logits by ~0.25 even with F32 KV. These runs
 * were held to 1e-3 as "bit for bit the CPU's with F32 KV"; that held only while the emulator
 * used glibc's expf and tanhf: a device's (within 2 ulps, which the strict emulator now
 * reproduces) may flip such a step on any prompt (it does on test_prefill_whole_and_chunked's).
 * So quantized files are held to the bound of one flipped step, Q8_FLIP_TOLERANCE, with every
 * greedy token the CPU's (measured with the strict emulator: 0 here, 8e-2 there). */
#define CPU_LOGITS_TOLERANCE 1e-3
#define Q8_FLIP_TOLERANCE 0.5

static double kv_tolerance(int quantized, llmm_kv_type kv, double format_effect) {
    return (quantized ? Q8_FLIP_TOLERANCE : CPU_LOGITS_TOLERANCE) + (kv == LLMM_KV_F32 ? 0.0 : 2.0 * format_effect);
}

/* A prompt long enough to cross a KV block (16 positions by default) and to take two prefill
 * chunks of PREFILL_CHUNK, then greedy decode steps. */
static const char k_long_prompt[] = "Once upon a time, there was a little girl named Lily. She";
enum { PREFILL_CHUNK = 8, GREEDY_STEPS = 10 };

typedef struct greedy_trace {
    float *logits;                    /* (1 + GREEDY_STEPS, n_vocab): after the prefill, after each step */
    llmm_token tokens[GREEDY_STEPS];  /* fed after row i: argmax of row i, or the given feed */
    size_t n_vocab;
} greedy_trace;

/* The prompt, then GREEDY_STEPS decode steps of feed's tokens (NULL: each row's argmax). */
static void run_greedy(llmm_model *m, llmm_backend_kind backend, llmm_kv_type kv, const llmm_token *ids, size_t n,
                       const llmm_token *feed, greedy_trace *t) {
    const llmm_context_params p = context_params(backend, 64, 1, PREFILL_CHUNK, kv);
    llmm_context *c = make_context(m, &p);
    assert_int_equal(llmm_prefill(c, 0, ids, n, 0), LLMM_OK);
    const float *l;
    assert_int_equal(llmm_logits(c, 0, &l, &t->n_vocab), LLMM_OK);
    t->logits = malloc((1 + GREEDY_STEPS) * t->n_vocab * sizeof *t->logits);
    assert_non_null(t->logits);
    for (int step = 0;; step++) {
        memcpy(t->logits + (size_t)step * t->n_vocab, l, t->n_vocab * sizeof *l);
        if (step == GREEDY_STEPS) break;
        t->tokens[step] = feed ? feed[step] : argmax(l, t->n_vocab);
        const llmm_seq_id s0 = 0;
        assert_int_equal(llmm_decode(c, &s0, &t->tokens[step], 1), LLMM_OK);
        assert_int_equal(llmm_logits(c, 0, &l, NULL), LLMM_OK);
    }
    llmm_context_free(c);
}

/* Largest row difference of two traces; *row receives where. */
static double trace_diff(const greedy_trace *a, const greedy_trace *b, size_t *row) {
    double worst = 0;
    for (size_t r = 0; r <= GREEDY_STEPS; r++) {
        const double d = max_abs_diff(a->logits + r * a->n_vocab, b->logits + r * a->n_vocab, a->n_vocab);
        if (!(d <= worst)) worst = d, *row = r;
    }
    return worst;
}

/* Sequence 0's state in c, as llmm_seq_save_buffer writes it (malloc'd). */
static void *save_state(llmm_context *c, size_t *n_bytes) {
    size_t cap = 0;
    assert_int_equal(llmm_seq_save_buffer(c, 0, 1, NULL, 0, &cap), LLMM_ERR_BUFFER_TOO_SMALL);
    void *buf = malloc(cap);
    assert_non_null(buf);
    assert_int_equal(llmm_seq_save_buffer(c, 0, 1, buf, cap, n_bytes), LLMM_OK);
    return buf;
}

/* Each backend decodes one token on its own K/V of the prompt (sequence 0) and on the other
 * backend's (sequence 1, loaded from its saved state) in one batch. On the same K/V contents
 * the two must agree within CPU_LOGITS_TOLERANCE for every KV type: CUDA reads the pool the
 * CPU wrote as the CPU does, and the CPU reads the pool CUDA wrote as CUDA does. Only this
 * step's own K/V row is each backend's own. Returns the larger of the two differences. */
static double check_state_exchange(llmm_model *m, llmm_kv_type kv, const llmm_token *ids, size_t n, llmm_token next) {
    llmm_context *c[2];
    void *state[2];
    size_t state_bytes[2];
    for (int be = 0; be < 2; be++) {
        const llmm_context_params p =
            context_params(be ? LLMM_BACKEND_CUDA : LLMM_BACKEND_CPU, 64, 2, PREFILL_CHUNK, kv);
        c[be] = make_context(m, &p);
        assert_int_equal(llmm_prefill(c[be], 0, ids, n, 0), LLMM_OK);
        state[be] = save_state(c[be], &state_bytes[be]);
    }
    float *rows[2][2]; /* [backend][sequence] */
    const size_t nv = vocab_size(m);
    for (int be = 0; be < 2; be++) {
        assert_int_equal(llmm_seq_load_buffer(c[be], 1, state[1 - be], state_bytes[1 - be]), LLMM_OK);
        const llmm_seq_id seqs[2] = {0, 1};
        const llmm_token toks[2] = {next, next};
        assert_int_equal(llmm_decode(c[be], seqs, toks, 2), LLMM_OK);
        for (int s = 0; s < 2; s++) {
            rows[be][s] = malloc(nv * sizeof *rows[be][s]);
            assert_non_null(rows[be][s]);
            copy_row(c[be], (size_t)s, rows[be][s], nv);
        }
    }
    /* CUDA on the CPU's K/V against the CPU on its own, and the other way round */
    const double d = fmax(max_abs_diff(rows[1][1], rows[0][0], nv), max_abs_diff(rows[0][1], rows[1][0], nv));
    for (int be = 0; be < 2; be++) {
        for (int s = 0; s < 2; s++) free(rows[be][s]);
        free(state[be]);
        llmm_context_free(c[be]);
    }
    return d;
}

/* One file with one KV type on both backends: every logits row within kv_tolerance, the same
 * greedy tokens, and a decode on exchanged K/V within CPU_LOGITS_TOLERANCE. */
static void check_file_against_cpu(const char *file, llmm_kv_type kv) {
    llmm_model *m = load_model(file, NULL);
    llmm_token ids[MAX_IDS];
    const size_t n = tokenize(m, k_long_prompt, ids, MAX_IDS);
    assert_true(n > 16 && n > PREFILL_CHUNK);
    greedy_trace cpu, cuda, cpu_f32 = {.logits = NULL};
    run_greedy(m, LLMM_BACKEND_CPU, kv, ids, n, NULL, &cpu);
    run_greedy(m, LLMM_BACKEND_CUDA, kv, ids, n, NULL, &cuda);
    assert_int_equal(cpu.n_vocab, cuda.n_vocab);
    size_t worst_row = 0, effect_row = 0, agree = 0;
    double format_effect = 0;
    if (kv != LLMM_KV_F32) {
        run_greedy(m, LLMM_BACKEND_CPU, LLMM_KV_F32, ids, n, cpu.tokens, &cpu_f32);
        format_effect = trace_diff(&cpu, &cpu_f32, &effect_row);
    }
    const int quantized = strcmp(file, "stories260K.gguf") != 0;
    const double worst = trace_diff(&cpu, &cuda, &worst_row), tol = kv_tolerance(quantized, kv, format_effect);
    while (agree < GREEDY_STEPS && cpu.tokens[agree] == cuda.tokens[agree]) agree++;
    const double exchanged = check_state_exchange(m, kv, ids, n, cpu.tokens[0]);
    print_message("%-22s KV %-3s %zu+%d tokens: cuda-emu vs cpu max |logit diff| %.2e (row %zu; bound %.2e, KV "
                  "format's effect on the cpu %.2e), greedy %zu/%d; on exchanged K/V %.2e\n",
                  file, kv_names[kv], n, GREEDY_STEPS, worst, worst_row, tol, format_effect, agree, GREEDY_STEPS,
                  exchanged);
    assert_true(worst <= tol);
    assert_int_equal(agree, GREEDY_STEPS);
    assert_true(exchanged <= (quantized ? Q8_FLIP_TOLERANCE : CPU_LOGITS_TOLERANCE));
    free(cpu.logits);
    free(cuda.logits);
    free(cpu_f32.logits);
    llmm_model_free(m);
}

/* Every stories260K file in models/ (F32 and each quantized one) with every KV type. */
static void test_files_and_kv_types_match_cpu(void **state) {
    (void)state;
    char dir[1024];
    DIR *d = opendir(shared_path(dir, sizeof dir, "models"));
    if (!d) fail_msg("cannot list %s", dir);
    char files[16][256];
    size_t n_files = 0, n_quantized = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        const size_t len = strlen(e->d_name);
        if (strncmp(e->d_name, "stories260K", 11) != 0 || len < 16 || strcmp(e->d_name + len - 5, ".gguf") != 0)
            continue;
        assert_true(n_files < 16 && len < sizeof files[0]);
        snprintf(files[n_files++], sizeof files[0], "%s", e->d_name);
        n_quantized += strcmp(e->d_name, "stories260K.gguf") != 0;
    }
    closedir(d);
    assert_true(n_quantized >= 2); /* q8_0 and q4_0 (models/PROVENANCE.md) */
    const double t0 = now_s();
    for (size_t f = 0; f < n_files; f++)
        for (int kv = LLMM_KV_F32; kv <= LLMM_KV_Q8; kv++) check_file_against_cpu(files[f], (llmm_kv_type)kv);
    print_message("%zu files x 3 KV types against the CPU backend: %.1f s\n", n_files, now_s() - t0);
}

/* ------------------------------------------------------------------ fork, copy-on-write */

enum { FORK_BLOCK = 8, FORK_STEPS = 5, FORK_ROWS = 3 + 3 * FORK_STEPS };

/* The prompt fills FORK_BLOCK-position blocks up to the middle of one; fork a = fork(0) and
 * the fork writes first (a's decode copies the shared tail block); fork b = fork(0) and the
 * original writes first (0's decode copies, b keeps the old block); then all three decode
 * together, each its own tokens (fork_tokens[s] for sequence s: 0, a = 1, b = 2). Each
 * decode's logits go into rows (FORK_ROWS x n_vocab) in call order (fork_row). The same calls
 * on every backend. */
static const llmm_token fork_tokens[3][1 + FORK_STEPS] = {
    {300, 301, 302, 303, 304, 305}, {400, 401, 402, 403, 404, 405}, {200, 201, 202, 203, 204, 205}};

static void run_fork_scenario(llmm_context *c, const llmm_token *ids, size_t n, float *rows, size_t nv) {
    size_t r = 0;
    llmm_context_stats st = {.size = sizeof st};
    const uint64_t prompt_blocks = (n + FORK_BLOCK - 1) / FORK_BLOCK;
    assert_int_equal(llmm_prefill(c, 0, ids, n, 0), LLMM_OK);
    copy_row(c, 0, rows + r++ * nv, nv);
    llmm_seq_id a = -1, b = -1;
    assert_int_equal(llmm_seq_fork(c, 0, &a), LLMM_OK);
    assert_int_equal(a, 1);
    assert_int_equal(llmm_context_get_stats(c, &st), LLMM_OK);
    assert_int_equal(st.blocks_shared, prompt_blocks);
    assert_int_equal(llmm_decode(c, &a, &fork_tokens[1][0], 1), LLMM_OK);
    copy_row(c, 0, rows + r++ * nv, nv);
    assert_int_equal(llmm_context_get_stats(c, &st), LLMM_OK);
    assert_int_equal(st.blocks_shared, prompt_blocks - 1); /* a's tail is its own copy */
    assert_int_equal(llmm_seq_fork(c, 0, &b), LLMM_OK);
    assert_int_equal(b, 2);
    const llmm_seq_id s0 = 0;
    assert_int_equal(llmm_decode(c, &s0, &fork_tokens[0][0], 1), LLMM_OK);
    copy_row(c, 0, rows + r++ * nv, nv);
    assert_int_equal(llmm_context_get_stats(c, &st), LLMM_OK);
    assert_int_equal(st.blocks_shared, prompt_blocks - 1); /* 0's tail is a copy, b keeps the old */
    assert_int_equal(st.blocks_used, prompt_blocks + 2);
    /* the batch in another order than the ids, so a row mix-up cannot pass */
    const llmm_seq_id seqs[3] = {b, 0, a};
    for (int step = 1; step <= FORK_STEPS; step++) {
        const llmm_token toks[3] = {fork_tokens[2][step - 1], fork_tokens[0][step], fork_tokens[1][step]};
        assert_int_equal(llmm_decode(c, seqs, toks, 3), LLMM_OK);
        for (size_t i = 0; i < 3; i++) copy_row(c, i, rows + r++ * nv, nv);
    }
    assert_int_equal(r, FORK_ROWS);
}

/* Row (in run_fork_scenario's order) of sequence s's decode number k (0 = its first decode). */
static size_t fork_row(int s, int k) {
    static const size_t first[3] = {2, 1, 3}; /* 0, a, b's first decode; b's is in the batch */
    static const size_t lane[3] = {1, 2, 0};  /* position of s in the batch */
    if (s == 2) return first[2] + 3 * (size_t)k + lane[2];
    return k == 0 ? first[s] : 3 + 3 * (size_t)(k - 1) + lane[s];
}

static void check_fork(llmm_kv_type kv) {
    llmm_model *m = load_model("stories260K.gguf", NULL);
    llmm_token ids[MAX_IDS];
    const size_t n = tokenize(m, k_long_prompt, ids, MAX_IDS);
    assert_true(n % FORK_BLOCK != 0 && n > FORK_BLOCK); /* the fork's tail block is partly filled */
    llmm_context_params p = context_params(LLMM_BACKEND_CPU, 64, 4, 16, kv);
    p.kv_block_size = FORK_BLOCK;
    const size_t nv = vocab_size(m);
    /* the scenario on the CPU, on CUDA, and on the CPU with F32 KV (for kv_tolerance) */
    float *rows[3] = {NULL, NULL, NULL};
    for (int run = 0; run < (kv == LLMM_KV_F32 ? 2 : 3); run++) {
        p.backend = run == 1 ? LLMM_BACKEND_CUDA : LLMM_BACKEND_CPU;
        p.kv_type = run == 2 ? LLMM_KV_F32 : kv;
        llmm_context *c = make_context(m, &p);
        rows[run] = malloc(FORK_ROWS * nv * sizeof *rows[run]);
        assert_non_null(rows[run]);
        run_fork_scenario(c, ids, n, rows[run], nv);
        llmm_context_free(c);
    }
    p.kv_type = kv;
    double format_effect = 0;
    if (rows[2])
        for (size_t r = 0; r < FORK_ROWS; r++)
            format_effect = fmax(format_effect, max_abs_diff(rows[0] + r * nv, rows[2] + r * nv, nv));
    double vs_cpu = 0;
    for (size_t r = 0; r < FORK_ROWS; r++) vs_cpu = fmax(vs_cpu, max_abs_diff(rows[0] + r * nv, rows[1] + r * nv, nv));

    /* each sequence's rows against the same tokens decoded on CUDA in a sequence never forked */
    p.backend = LLMM_BACKEND_CUDA;
    llmm_context *solo = make_context(m, &p);
    float *row = malloc(nv * sizeof *row);
    assert_non_null(row);
    double vs_unforked = 0;
    for (int s = 0; s < 3; s++) {
        assert_int_equal(llmm_seq_clear(solo, 0), LLMM_OK);
        assert_int_equal(llmm_prefill(solo, 0, ids, n, 0), LLMM_OK);
        const int n_decodes = s == 2 ? FORK_STEPS : 1 + FORK_STEPS;
        for (int k = 0; k < n_decodes; k++) {
            const llmm_seq_id s0 = 0;
            assert_int_equal(llmm_decode(solo, &s0, &fork_tokens[s][k], 1), LLMM_OK);
            copy_row(solo, 0, row, nv);
            vs_unforked = fmax(vs_unforked, max_abs_diff(row, rows[1] + fork_row(s, k) * nv, nv));
        }
    }
    const double tol = kv_tolerance(0, kv, format_effect); /* stories260K.gguf: F32 weights */
    print_message("fork at %zu of %d-position blocks, KV %-3s: cuda-emu vs cpu max |logit diff| %.2e over %d rows "
                  "(bound %.2e), forked vs unforked on cuda-emu %.2e\n",
                  n, FORK_BLOCK, kv_names[kv], vs_cpu, FORK_ROWS, tol, vs_unforked);
    assert_true(vs_cpu <= tol);
    /* as test_batched_decode: a batch and a single row may sum in other orders */
    assert_true(vs_unforked <= 1e-4);
    free(row);
    for (int run = 0; run < 3; run++) free(rows[run]);
    llmm_context_free(solo);
    llmm_model_free(m);
}

static void test_fork_copy_on_write(void **state) {
    (void)state;
    const double t0 = now_s();
    for (int kv = LLMM_KV_F32; kv <= LLMM_KV_Q8; kv++) check_fork((llmm_kv_type)kv);
    print_message("fork / copy-on-write on the emulated CUDA module: %.1f s\n", now_s() - t0);
}

/* Prefill on the CUDA module in one chunk (prompt matmuls of more than 8 rows, attention of the
 * whole chunk at once) and in chunks of 3 (llmm__cu_matmul, each chunk attending to the earlier blocks
 * and to itself), every position's logits (LLMM_PREFILL_ALL_LOGITS) against the CPU's, for the
 * golden prompts on each stories260K file, with 8-position KV blocks and F32 KV.
 * F32 weights run an F32 GEMM: the CPU backend's 1e-3 bar. Q8_0 and Q4_0 run the int8
 * tensor-core GEMM by default (cuda/gemm_int8.h), the CPU's matmul numerics bit for bit; but the
 * activations it quantizes come through SiLU and softmax, whose expf is the device's (within
 * 2 ulps, tests/simt/simt_math.h), not glibc's, so now and then one of them lands on the other
 * side of a Q8 rounding step and moves the logits by ~0.1-0.25 (measured with the strict
 * emulator: 8.0e-2 on Q4_0's 17-token prompt, 0 elsewhere). This test once held these runs to
 * 1e-3 as "bit for bit": a device would have broken that. The bound is now the one of a flipped
 * step, 0.5, with every position's greedy token the CPU's and the mean KL of the rows' softmaxes
 * within 1e-3 (measured: at most 6.3e-5, on the lt path).
 * With LLMM_CUDA_GEMM=lt they run llmm__cu_gemm, which rounds activations and dequantized weights to
 * F16 where the CPU quantizes activations to Q8_0 (steps of |x|max / 127 per 32 values), so the
 * two differ by the CPU's own rounding, measured here as up to 0.2 on these logits (the size of
 * the ~0.1-0.25 moves one flipped Q8 step makes on stories260K): the same bounds there (a kernel
 * error moves logits by whole units). */
static void test_prefill_whole_and_chunked(void **state) {
    (void)state;
    static const char *const files[] = {"stories260K.gguf", "stories260K-q8_0.gguf", "stories260K-q4_0.gguf"};
    static const char *const prompts[] = {k_long_prompt, "Once upon a time", "The little dog"};
    static const char *const paths[] = {"default", "lt"};
    for (size_t f = 0; f < sizeof files / sizeof *files; f++) {
        llmm_model *m = load_model(files[f], NULL);
        const size_t nv = vocab_size(m);
        for (size_t pa = 0; pa < (f == 0 ? 1u : 2u); pa++) {
            const double bound = f == 0 ? CPU_LOGITS_TOLERANCE : Q8_FLIP_TOLERANCE;
            for (size_t pi = 0; pi < sizeof prompts / sizeof *prompts; pi++) {
                llmm_token ids[MAX_IDS];
                const size_t n = tokenize(m, prompts[pi], ids, MAX_IDS);
                double worst[2] = {0, 0}, kl[2] = {0, 0};
                size_t agree[2] = {0, 0};
                llmm_context_params p = context_params(LLMM_BACKEND_CPU, 64, 1, 64, LLMM_KV_F32);
                p.kv_block_size = 8;
                llmm_context *cpu = make_context(m, &p);
                assert_int_equal(llmm_prefill(cpu, 0, ids, n, LLMM_PREFILL_ALL_LOGITS), LLMM_OK);
                for (int chunked = 0; chunked < 2; chunked++) {
                    p.backend = LLMM_BACKEND_CUDA;
                    p.n_batch = chunked ? 3 : 64;
                    if (pa) setenv("LLMM_CUDA_GEMM", paths[pa], 1);
                    llmm_context *gpu = make_context(m, &p);
                    unsetenv("LLMM_CUDA_GEMM");
                    assert_int_equal(llmm_prefill(gpu, 0, ids, n, LLMM_PREFILL_ALL_LOGITS), LLMM_OK);
                    for (size_t i = 0; i < n; i++) {
                        const float *a, *b;
                        assert_int_equal(llmm_logits(cpu, i, &a, NULL), LLMM_OK);
                        assert_int_equal(llmm_logits(gpu, i, &b, NULL), LLMM_OK);
                        worst[chunked] = fmax(worst[chunked], max_abs_diff(a, b, nv));
                        kl[chunked] += row_kl(a, b, nv) / (double)n;
                        agree[chunked] += argmax(a, nv) == argmax(b, nv);
                    }
                    llmm_context_free(gpu);
                }
                print_message("%-22s %-7s %2zu-token prompt: cuda-emu vs cpu at every position: one chunk %.2e (greedy "
                              "%zu/%zu, mean KL %.1e), chunks of 3 %.2e (greedy %zu/%zu, mean KL %.1e); bound %.0e\n",
                              files[f], paths[pa], n, worst[0], agree[0], n, kl[0], worst[1], agree[1], n, kl[1], bound);
                assert_true(worst[0] <= bound && worst[1] <= bound);
                assert_true(kl[0] <= 1e-3 && kl[1] <= 1e-3);
                assert_int_equal(agree[0], n);
                assert_int_equal(agree[1], n);
                llmm_context_free(cpu);
            }
        }
        llmm_model_free(m);
    }
}

/* Three sequences of different lengths (1, 5 and 17 tokens: block tables of 1, 1 and 3 blocks
 * of 8 positions, each crossing into a new block while decoding, each row attending over its
 * own number of positions), decoded in one batch in another order than their ids, give the
 * logits each gives alone (within 1e-4), with both contexts of the model alive at once
 * (sharing its device weights). */
static void test_batched_decode(void **state) {
    (void)state;
    enum { STEPS = 8, N_SEQ = 3, BLOCK = 8 };
    llmm_model *m = load_model("stories260K-q8_0.gguf", NULL);
    const char *prompts[N_SEQ] = {"", "Once upon a time", k_long_prompt};
    llmm_token ids[N_SEQ][MAX_IDS];
    size_t n_ids[N_SEQ];
    for (int s = 0; s < N_SEQ; s++) n_ids[s] = tokenize(m, prompts[s], ids[s], MAX_IDS);
    assert_true(n_ids[0] < n_ids[1] && n_ids[1] < n_ids[2] && n_ids[2] > 2 * BLOCK);
    for (int s = 0; s < N_SEQ; s++) assert_true(n_ids[s] / BLOCK != (n_ids[s] + STEPS - 1) / BLOCK);
    llmm_context_params p = context_params(LLMM_BACKEND_CUDA, 64, N_SEQ, 32, LLMM_KV_F16);
    p.kv_block_size = BLOCK;
    llmm_context *both = make_context(m, &p);
    p.n_seq_max = 1;
    llmm_context *solo = make_context(m, &p);
    for (int s = 0; s < N_SEQ; s++) assert_int_equal(llmm_prefill(both, s, ids[s], n_ids[s], 0), LLMM_OK);
    const size_t nv = vocab_size(m);
    float *want = malloc((size_t)STEPS * N_SEQ * nv * sizeof *want);
    llmm_token fed[STEPS][N_SEQ];
    assert_non_null(want);
    /* batch row i holds sequence seqs[i] */
    const llmm_seq_id seqs[N_SEQ] = {2, 0, 1};
    llmm_token next[N_SEQ];
    for (int i = 0; i < N_SEQ; i++) next[i] = ids[seqs[i]][n_ids[seqs[i]] - 1];
    for (int step = 0; step < STEPS; step++) {
        assert_int_equal(llmm_decode(both, seqs, next, N_SEQ), LLMM_OK);
        for (int i = 0; i < N_SEQ; i++) {
            const llmm_seq_id s = seqs[i];
            fed[step][s] = next[i];
            float *w = want + ((size_t)step * N_SEQ + s) * nv;
            copy_row(both, (size_t)i, w, nv);
            next[i] = argmax(w, nv);
        }
    }
    double worst = 0;
    float *l = malloc(nv * sizeof *l);
    assert_non_null(l);
    for (int s = 0; s < N_SEQ; s++) {
        assert_int_equal(llmm_seq_clear(solo, 0), LLMM_OK);
        assert_int_equal(llmm_prefill(solo, 0, ids[s], n_ids[s], 0), LLMM_OK);
        for (int step = 0; step < STEPS; step++) {
            const llmm_seq_id s0 = 0;
            assert_int_equal(llmm_decode(solo, &s0, &fed[step][s], 1), LLMM_OK);
            copy_row(solo, 0, l, nv);
            worst = fmax(worst, max_abs_diff(l, want + ((size_t)step * N_SEQ + s) * nv, nv));
        }
    }
    print_message("batched (lengths %zu, %zu, %zu) vs single decode on the emulated CUDA module: max |logit diff| "
                  "%.2e\n",
                  n_ids[0], n_ids[1], n_ids[2], worst);
    assert_true(worst <= 1e-4);
    free(l);
    free(want);
    llmm_context_free(both);
    llmm_context_free(solo);
    llmm_model_free(m);
}

static llmm_context_stats stats_of(llmm_context *c) {
    llmm_context_stats st = {.size = sizeof st};
    assert_int_equal(llmm_context_get_stats(c, &st), LLMM_OK);
    return st;
}

/* 16 sequences of 16 different prompts (2 to 37 tokens, block tables of 1 to 6 blocks of 8),
 * decoded together, then 12 and 9 of them: every row's logits equal that sequence decoded alone
 * (within 1e-4), and the steps of 9 to 16 rows replay one graph, captured for the bucket of 16
 * rows (the padding rows store no K/V and are never read). */
static void test_sixteen_sequences(void **state) {
    (void)state;
    enum { N_SEQ = 16, BLOCK = 8, STEPS = 8 };
    static const size_t rows_at[STEPS] = {16, 16, 16, 16, 12, 12, 9, 9};
    static const char *const words[] = {"Once", "upon", "a", "time", "there", "was", "a", "little", "girl", "named",
                                        "Lily", "who", "liked", "to", "play", "in", "the", "park", "with", "her",
                                        "dog", "and", "her", "friend", "Tom", "."};
    llmm_model *m = load_model("stories260K-q8_0.gguf", NULL);
    const size_t nv = vocab_size(m);
    llmm_token ids[N_SEQ][MAX_IDS];
    size_t n_ids[N_SEQ];
    for (int s = 0; s < N_SEQ; s++) {
        char text[512] = "";
        const size_t n_words = 1 + (size_t)(s * 7) % (sizeof words / sizeof *words); /* 1 to 26 words */
        for (size_t w = 0; w < n_words; w++) {
            if (w) strcat(text, " ");
            strcat(text, words[(w + (size_t)s) % (sizeof words / sizeof *words)]);
        }
        n_ids[s] = tokenize(m, text, ids[s], MAX_IDS);
    }
    llmm_context_params p = context_params(LLMM_BACKEND_CUDA, 64, N_SEQ, 32, LLMM_KV_F16);
    p.kv_block_size = BLOCK;
    llmm_context *together = make_context(m, &p);
    p.n_seq_max = 1;
    llmm_context *alone = make_context(m, &p);
    for (int s = 0; s < N_SEQ; s++) assert_int_equal(llmm_prefill(together, s, ids[s], n_ids[s], 0), LLMM_OK);
    float *want = malloc((size_t)STEPS * N_SEQ * nv * sizeof *want), *l = malloc(nv * sizeof *l);
    assert_non_null(want);
    assert_non_null(l);
    llmm_token fed[STEPS][N_SEQ], next[N_SEQ];
    llmm_seq_id seqs[N_SEQ];
    /* row i holds sequence seqs[i]: ids reversed, so rows and ids differ */
    for (int i = 0; i < N_SEQ; i++) seqs[i] = N_SEQ - 1 - i;
    for (int i = 0; i < N_SEQ; i++) next[i] = ids[seqs[i]][n_ids[seqs[i]] - 1];
    const llmm_context_stats before = stats_of(together);
    for (int step = 0; step < STEPS; step++) {
        assert_int_equal(llmm_decode(together, seqs, next, rows_at[step]), LLMM_OK);
        for (size_t i = 0; i < rows_at[step]; i++) {
            fed[step][seqs[i]] = next[i];
            float *w = want + ((size_t)step * N_SEQ + (size_t)seqs[i]) * nv;
            copy_row(together, i, w, nv);
            next[i] = argmax(w, nv);
        }
    }
    const llmm_context_stats after = stats_of(together);
    double worst = 0;
    for (size_t i = 0; i < N_SEQ; i++) {
        const llmm_seq_id s = seqs[i], s0 = 0;
        assert_int_equal(llmm_seq_clear(alone, 0), LLMM_OK);
        assert_int_equal(llmm_prefill(alone, 0, ids[s], n_ids[s], 0), LLMM_OK);
        for (int step = 0; step < STEPS && i < rows_at[step]; step++) {
            assert_int_equal(llmm_decode(alone, &s0, &fed[step][s], 1), LLMM_OK);
            copy_row(alone, 0, l, nv);
            worst = fmax(worst, max_abs_diff(l, want + ((size_t)step * N_SEQ + (size_t)s) * nv, nv));
        }
    }
    size_t shortest = n_ids[0], longest = n_ids[0];
    for (int s = 1; s < N_SEQ; s++) {
        shortest = n_ids[s] < shortest ? n_ids[s] : shortest;
        longest = n_ids[s] > longest ? n_ids[s] : longest;
    }
    print_message("16 sequences (%zu to %zu tokens) decoded together, then 12 and 9, vs alone on the emulated CUDA "
                  "module: max |logit diff| %.2e; %u graph(s) for %d steps\n",
                  shortest, longest, worst, after.graphs - before.graphs, STEPS);
    assert_true(worst <= 1e-4);
    assert_int_equal(after.graphs - before.graphs, 1);
    assert_int_equal(after.graph_replays - before.graph_replays, STEPS - 1);
    free(l);
    free(want);
    llmm_context_free(together);
    llmm_context_free(alone);
    llmm_model_free(m);
}

/* n greedy decode steps after the prompt; rows (n, nv) get every step's logits. */
static void decode_greedy(llmm_context *c, const llmm_token *ids, size_t n_ids, int n, float *rows, size_t nv) {
    const llmm_seq_id s0 = 0;
    assert_int_equal(llmm_prefill(c, 0, ids, n_ids, 0), LLMM_OK);
    llmm_token next = ids[n_ids - 1];
    for (int i = 0; i < n; i++) {
        assert_int_equal(llmm_decode(c, &s0, &next, 1), LLMM_OK);
        copy_row(c, 0, rows + (size_t)i * nv, nv);
        next = argmax(rows + (size_t)i * nv, nv);
    }
}

/* Decode steps as graphs: llmm_context_warmup captures one per batch size up to n_seq_max,
 * the first real decode steps replay the warm-up's single-row graph (the record matches:
 * positions and tables are device data), and the logits equal those of launching every op as
 * it comes (LLMM_CUDA_GRAPHS=0) bit for bit: the same kernels on the same buffers. The dummy
 * steps leave no trace in the pool or the counters. */
static void test_graphs_and_warmup(void **state) {
    (void)state;
    enum { STEPS = 6, N_SEQ = 3 };
    llmm_model *m = load_model("stories260K-q8_0.gguf", NULL);
    llmm_token ids[MAX_IDS];
    const size_t n_ids = tokenize(m, "Once upon a time", ids, MAX_IDS), nv = vocab_size(m);
    float *graphed = malloc((size_t)STEPS * nv * sizeof *graphed), *eager = malloc((size_t)STEPS * nv * sizeof *eager);
    assert_non_null(graphed);
    assert_non_null(eager);

    llmm_context *c = cuda_context(m, 64, N_SEQ, 16, LLMM_KV_F16);
    llmm_context_stats st = stats_of(c);
    assert_true(st.module_load_ms > 0 && st.weights_ms > 0);
    assert_true(st.warmup_ms == 0 && st.first_token_ms == 0 && st.graphs == 0);
    assert_int_equal(llmm_context_warmup(c), LLMM_OK);
    st = stats_of(c);
    print_message("cold start on the emulated module: module %.2f ms, init %.2f ms, weights %.2f ms, warm-up %.1f ms "
                  "(%u graphs captured in %.1f ms)\n",
                  st.module_load_ms, st.backend_init_ms, st.weights_ms, st.warmup_ms, st.graphs, st.graph_capture_ms);
    assert_int_equal(st.graphs, N_SEQ);
    assert_true(st.warmup_ms > 0 && st.graph_capture_ms > 0);
    assert_true(st.graph_replays == 0 && st.blocks_used == 0 && st.n_seq_used == 0 && st.tokens_decoded == 0);
    decode_greedy(c, ids, n_ids, STEPS, graphed, nv);
    st = stats_of(c);
    assert_int_equal(st.graph_replays, STEPS);
    assert_int_equal(st.graphs, N_SEQ);
    assert_true(st.first_token_ms > 0);
    /* a second warm-up with sequence 0 in use warms on the others and replays what it made */
    assert_int_equal(llmm_context_warmup(c), LLMM_OK);
    assert_int_equal(stats_of(c).graph_replays, STEPS + N_SEQ - 1);
    llmm_context_free(c);

    setenv("LLMM_CUDA_GRAPHS", "0", 1);
    c = cuda_context(m, 64, N_SEQ, 16, LLMM_KV_F16);
    unsetenv("LLMM_CUDA_GRAPHS");
    assert_int_equal(llmm_context_warmup(c), LLMM_OK);
    decode_greedy(c, ids, n_ids, STEPS, eager, nv);
    st = stats_of(c);
    assert_true(st.graphs == 0 && st.graph_replays == 0 && st.graph_capture_ms == 0);
    assert_memory_equal(graphed, eager, (size_t)STEPS * nv * sizeof *graphed);
    llmm_context_free(c);
    free(graphed);
    free(eager);
    llmm_model_free(m);
}

/* Decode steps of the hybrid models (lfm2's short convolutions, qwen35's Gated DeltaNet and
 * gated attention) as graphs: each row's recurrent state slot is step data (cuda/backend.cu
 * stage_state_slots), so sequences at different positions decoded in a changing row order, then
 * fewer of them, replay one graph per row count: 3 rows, then 2 (two graphs captured); 12 rows,
 * then 10, replay the graph of the bucket of 16 (whose padding rows the recurrent kernels skip)
 * that the 9-row step feeding sequences 3 to 11 their first token captured, none captured. Every
 * step's logits equal those of launching each op as it comes (LLMM_CUDA_GRAPHS=0) bit for bit. */
typedef struct hybrid_batches {
    uint32_t n_seq, rows_first, rows_then, steps, graphs;
} hybrid_batches;

enum { HYBRID_MAX_SEQ = 12 };

/* b->steps decode steps of b's sequences, rows (steps, n_seq, nv) their logits (a row left out
 * of a step zero); the context's graph counters over the steps. */
static void hybrid_decode(llmm_model *m, const hybrid_batches *b, float *rows, size_t nv, uint64_t *captured,
                          uint64_t *replays) {
    llmm_context *c = cuda_context(m, 64, b->n_seq, 16, LLMM_KV_F32);
    llmm_token next[HYBRID_MAX_SEQ];
    llmm_seq_id rest[HYBRID_MAX_SEQ];
    uint32_t n_rest = 0;
    for (uint32_t s = 0; s < b->n_seq; s++) {
        const llmm_token prompt[4] = {(llmm_token)(1 + s), (llmm_token)(9 - s % 7), 3, (llmm_token)(4 + s % 5)};
        if (s < 3) assert_int_equal(llmm_prefill(c, (llmm_seq_id)s, prompt, 2 + s, 0), LLMM_OK);
        else rest[n_rest++] = (llmm_seq_id)s, next[s] = prompt[0]; /* fed in one step below: cheaper */
    }
    if (n_rest) assert_int_equal(llmm_decode(c, rest, next + 3, n_rest), LLMM_OK);
    for (uint32_t s = 0; s < b->n_seq; s++) next[s] = (llmm_token)(5 + s);
    const llmm_context_stats before = stats_of(c);
    for (uint32_t i = 0; i < b->steps; i++) {
        const uint32_t n = i < b->steps / 2 ? b->rows_first : b->rows_then;
        llmm_seq_id seqs[HYBRID_MAX_SEQ];
        llmm_token fed[HYBRID_MAX_SEQ];
        for (uint32_t r = 0; r < n; r++) { /* rotated: rows and sequences change every step */
            seqs[r] = (llmm_seq_id)((r + i) % b->n_seq);
            fed[r] = next[seqs[r]];
        }
        assert_int_equal(llmm_decode(c, seqs, fed, n), LLMM_OK);
        for (uint32_t r = 0; r < n; r++) {
            float *row = rows + ((size_t)i * b->n_seq + (size_t)seqs[r]) * nv;
            copy_row(c, r, row, nv);
            next[seqs[r]] = argmax(row, nv);
        }
    }
    const llmm_context_stats after = stats_of(c);
    *captured = after.graphs - before.graphs;
    *replays = after.graph_replays - before.graph_replays;
    llmm_context_free(c);
}

static void test_hybrid_decode_graphs(void **state) {
    (void)state;
    static const char *const files[] = {"golden/arch/tiny-lfm2.gguf", "golden/arch/tiny-qwen35.gguf"};
    static const hybrid_batches batches[] = {{3, 3, 2, 4, 2}, {HYBRID_MAX_SEQ, 12, 10, 2, 0}};
    if (under_emulator()) { /* qemu (make test-arm): tens of seconds there for what the host build shows */
        print_message("hybrid decode graphs: skipped under the emulator\n");
        skip();
    }
    for (size_t f = 0; f < ARRAY_LEN(files); f++) {
        llmm_model *m = load_model(files[f], NULL);
        for (size_t bi = 0; bi < ARRAY_LEN(batches); bi++) {
            const hybrid_batches *b = &batches[bi];
            const size_t nv = vocab_size(m), n = (size_t)b->steps * b->n_seq * nv;
            float *graphed = calloc(n, sizeof *graphed), *eager = calloc(n, sizeof *eager);
            assert_true(graphed && eager);
            uint64_t captured, replays, eager_captured, eager_replays;
            hybrid_decode(m, b, graphed, nv, &captured, &replays);
            /* a recorded step of more than 8 rows runs its matmuls on the decode GEMV (backend.cu
             * choose_gemm): so does the eager one here */
            setenv("LLMM_CUDA_GRAPHS", "0", 1);
            setenv("LLMM_CUDA_GEMM", "gemv", 1);
            hybrid_decode(m, b, eager, nv, &eager_captured, &eager_replays);
            unsetenv("LLMM_CUDA_GRAPHS");
            unsetenv("LLMM_CUDA_GEMM");
            print_message("%s on the emulated CUDA module: %u decode steps of %u, then %u rows: %llu graph(s) "
                          "captured, %llu replays; logits equal to launching op by op: %s\n",
                          files[f], b->steps, b->rows_first, b->rows_then, (unsigned long long)captured,
                          (unsigned long long)replays, memcmp(graphed, eager, n * sizeof *graphed) ? "no" : "yes");
            assert_true(captured == b->graphs && replays == b->steps - b->graphs);
            assert_true(eager_captured == 0 && eager_replays == 0);
            assert_memory_equal(graphed, eager, n * sizeof *graphed);
            free(graphed);
            free(eager);
        }
        llmm_model_free(m);
    }
}

/* A hybrid prompt on the CPU and the emulated module: 37 tokens in one step, whose DeltaNet rows
 * both backends run in chunks of LLMM_DELTA_CHUNK (16, 16, 5) with the same formulas and sums,
 * and whose short convolutions are bit for bit; every position's logits agree within 1e-4 (the
 * recurrent suites' bound: what is left differs through expf and the other transcendentals). */
static void test_hybrid_prompt_matches_cpu(void **state) {
    (void)state;
    enum { N = 37 };
    static const char *const files[] = {"golden/arch/tiny-lfm2.gguf", "golden/arch/tiny-qwen35.gguf"};
    llmm_token ids[N];
    for (int i = 0; i < N; i++) ids[i] = (llmm_token)(1 + (i * 7) % 50);
    for (size_t f = 0; f < ARRAY_LEN(files); f++) {
        llmm_model *m = load_model(files[f], NULL);
        const size_t nv = vocab_size(m);
        llmm_context_params p = context_params(LLMM_BACKEND_CPU, 64, 1, 64, LLMM_KV_F32);
        llmm_context *cpu = make_context(m, &p);
        p.backend = LLMM_BACKEND_CUDA;
        llmm_context *gpu = make_context(m, &p);
        assert_int_equal(llmm_prefill(cpu, 0, ids, N, LLMM_PREFILL_ALL_LOGITS), LLMM_OK);
        assert_int_equal(llmm_prefill(gpu, 0, ids, N, LLMM_PREFILL_ALL_LOGITS), LLMM_OK);
        double worst = 0;
        for (size_t r = 0; r < N; r++) {
            const float *a, *b;
            size_t na, nb;
            assert_int_equal(llmm_logits(cpu, r, &a, &na), LLMM_OK);
            assert_int_equal(llmm_logits(gpu, r, &b, &nb), LLMM_OK);
            assert_true(na == nv && nb == nv);
            worst = fmax(worst, max_abs_diff(a, b, nv));
        }
        print_message("%s, a %d-token prompt in one step: emulated CUDA vs CPU max |logit diff| %.2e (bound 1e-4)\n",
                      files[f], N, worst);
        assert_true(worst <= 1e-4);
        llmm_context_free(cpu);
        llmm_context_free(gpu);
        llmm_model_free(m);
    }
}

/* llmm_decode_sample on the CUDA module: sampled on the device (the module's sample slot), the
 * tokens and RNG streams of llmm_sample over the same logits on the host, three rows with
 * different sampler settings decoded together; the logits copied back when llmm_logits asks. */
static void test_decode_sample(void **state) {
    (void)state;
    llmm_model *m = load_model("stories260K-q8_0.gguf", NULL);
    const llmm_context_params p = context_params(LLMM_BACKEND_CUDA, 64, 3, 16, LLMM_KV_F16);
    assert_int_equal(check_decode_sample(m, &p, 12), 36);
    llmm_model_free(m);
}

/* NaN or +inf logits on the module (tests/numerical_check.h): the device's sample kernel gives no
 * token for such a row, and the host reports LLMM_ERR_NUMERICAL with the row's position. */
static void test_numerical_errors(void **state) {
    (void)state;
    const llmm_context_params p = context_params(LLMM_BACKEND_CUDA, 64, 1, 16, LLMM_KV_F16);
    check_numerical_errors(&p);
}

static void count_log(void *user, llmm_log_level level, const char *msg) {
    (void)level;
    if (strstr(msg, "AUTO runs on the CPU")) ++*(int *)user;
}

/* A device index the machine lacks (the emulation has one device): CUDA refuses it, AUTO says
 * why and runs on the CPU. */
static llmm_adapter *load_lora(const llmm_model *m, const char *rel) {
    char path[1024];
    llmm_adapter *a = NULL;
    assert_int_equal(llmm_adapter_load(m, shared_path(path, sizeof path, rel), &a), LLMM_OK);
    return a;
}

/* A CPU context (ctx[0]) and a CUDA one (ctx[1]) of one model decoding the same sequences, and
 * room for a row of logits of each. */
typedef struct lora_pair {
    llmm_context *ctx[2];
    llmm_seq_id seqs[4];
    llmm_token next[4];
    size_t n_seq, nv;
    float *rows;
} lora_pair;

/* Both contexts of m (n_seq_max sequences, 64 positions each), each of whose first n_seq
 * sequences takes n_ads[s] of ads[s] with scales[s] and is prefilled with the same prompt. */
static void lora_open(lora_pair *lp, llmm_model *m, size_t n_seq, uint32_t n_seq_max, llmm_adapter *const ads[][2],
                      const float scales[][2], const size_t *n_ads) {
    assert_true(n_seq <= 4 && n_seq <= n_seq_max);
    llmm_context_params p = context_params(LLMM_BACKEND_CPU, 64 * n_seq_max, n_seq_max, 32, LLMM_KV_F32);
    lp->ctx[0] = make_context(m, &p);
    p.backend = LLMM_BACKEND_CUDA;
    lp->ctx[1] = make_context(m, &p);
    llmm_token ids[MAX_IDS];
    const size_t n = tokenize(m, "Once upon a time", ids, MAX_IDS);
    for (int c = 0; c < 2; c++)
        for (size_t s = 0; s < n_seq; s++) {
            assert_int_equal(llmm_seq_set_adapters(lp->ctx[c], (llmm_seq_id)s, ads[s], scales[s], n_ads[s]), LLMM_OK);
            assert_int_equal(llmm_prefill(lp->ctx[c], (llmm_seq_id)s, ids, n, 0), LLMM_OK);
        }
    for (size_t s = 0; s < n_seq; s++) {
        lp->seqs[s] = (llmm_seq_id)s;
        lp->next[s] = (llmm_token)(40 + s);
    }
    lp->n_seq = n_seq;
    lp->nv = vocab_size(m);
    lp->rows = malloc(2 * lp->nv * sizeof *lp->rows);
    assert_non_null(lp->rows);
}

static void lora_close(lora_pair *lp) {
    free(lp->rows);
    for (int c = 0; c < 2; c++) llmm_context_free(lp->ctx[c]);
}

/* One decode step of the sequences on both contexts; next becomes the CPU's argmax of each row.
 * Returns the largest |logit difference|. */
static double lora_step(lora_pair *lp) {
    double worst = 0;
    for (int c = 0; c < 2; c++) assert_int_equal(llmm_decode(lp->ctx[c], lp->seqs, lp->next, lp->n_seq), LLMM_OK);
    for (size_t s = 0; s < lp->n_seq; s++) {
        copy_row(lp->ctx[0], s, lp->rows, lp->nv);
        copy_row(lp->ctx[1], s, lp->rows + lp->nv, lp->nv);
        worst = fmax(worst, max_abs_diff(lp->rows, lp->rows + lp->nv, lp->nv));
        lp->next[s] = argmax(lp->rows, lp->nv);
    }
    return worst;
}

/* LoRA adapters on the device (lora.cu through the lora_delta slot, operands copied per context)
 * against the CPU: four sequences with different adapters (one with two, one with none), each
 * prefilled and then decoded together, and a swap between steps; logits within 1e-3 (the
 * projection's sum order differs, as the base matmul's). */
static void test_lora_matches_cpu(void **state) {
    (void)state;
    enum { N_SEQ = 4, STEPS = 4 };
    llmm_model *m = load_model("stories260K.gguf", NULL);
    llmm_adapter *r8 = load_lora(m, "lora/stories260K-lora-r8.gguf");
    llmm_adapter *r4 = load_lora(m, "lora/stories260K-lora-r4-attn-f16.gguf");
    llmm_adapter *const ads[N_SEQ][2] = {{r8, NULL}, {r4, NULL}, {NULL, NULL}, {r8, r4}};
    const float scales[N_SEQ][2] = {{1.f, 0.f}, {1.5f, 0.f}, {0.f, 0.f}, {0.5f, 1.f}};
    const size_t n_ads[N_SEQ] = {1, 1, 0, 2};
    lora_pair lp;
    lora_open(&lp, m, N_SEQ, N_SEQ, ads, scales, n_ads);
    double worst = 0;
    for (int step = 0; step < STEPS; step++) {
        if (step == 2) /* sequence 2 takes r4, sequence 1 drops it: the device copy stays (r4 is held) */
            for (int c = 0; c < 2; c++) {
                assert_int_equal(llmm_seq_set_adapters(lp.ctx[c], 2, &r4, NULL, 1), LLMM_OK);
                assert_int_equal(llmm_seq_set_adapters(lp.ctx[c], 1, NULL, NULL, 0), LLMM_OK);
            }
        worst = fmax(worst, lora_step(&lp));
    }
    print_message("LoRA on the emulated CUDA module vs the CPU (4 sequences, 3 adapter sets, a swap): max |logit "
                  "diff| %.2e\n",
                  worst);
    assert_true(worst <= 1e-3);
    /* the app drops its handles while sequences still run with them; the context keeps them */
    llmm_adapter_free(r8);
    llmm_adapter_free(r4);
    assert_true(lora_step(&lp) <= 1e-3);
    lora_close(&lp);
    llmm_model_free(m);
}

/* Both contexts' sequence seq runs with the n adapters ads at scales (NULL: all 1). */
static void lora_set(lora_pair *lp, llmm_seq_id seq, llmm_adapter *const *ads, const float *scales, size_t n) {
    for (int c = 0; c < 2; c++) assert_int_equal(llmm_seq_set_adapters(lp->ctx[c], seq, ads, scales, n), LLMM_OK);
}

/* steps decode steps of both contexts; returns the CUDA context's replays among them and folds
 * the largest |logit difference| into *worst. */
static unsigned long long lora_steps(lora_pair *lp, int steps, double *worst) {
    const llmm_context_stats before = stats_of(lp->ctx[1]);
    for (int step = 0; step < steps; step++) *worst = fmax(*worst, lora_step(lp));
    return stats_of(lp->ctx[1]).graph_replays - before.graph_replays;
}

/* A decode batch of rows with adapter A, adapter B and none replays one graph: each row's
 * adapter is an entry of the device's table of resident adapters, named by the step's data
 * (cuda/backend.cu stage_lora_uses), and the LoRA launches depend on the rows only. With the
 * adapters resident before llmm_context_warmup, the very first adapter step replays what the
 * warm-up captured (nothing is allocated or captured in it); then the rows' adapters are permuted
 * and switched among the resident ones, at other scales, and every step still replays, never
 * captures; logits within 1e-3 of the CPU's throughout. */
static void test_lora_decode_replays_one_graph(void **state) {
    (void)state;
    enum { N_SEQ = 3 };
    const int STEPS = under_emulator() ? 2 : 4; /* qemu (make test-arm): fewer steps */
    llmm_model *m = load_model("stories260K.gguf", NULL);
    llmm_adapter *a = load_lora(m, "lora/stories260K-lora-r8.gguf");
    llmm_adapter *b = load_lora(m, "lora/stories260K-lora-r4-attn-f16.gguf");
    llmm_adapter *const ads[N_SEQ][2] = {{a, NULL}, {b, NULL}, {NULL, NULL}};
    const float scales[N_SEQ][2] = {{1.f, 0.f}, {1.5f, 0.f}, {0.f, 0.f}};
    const size_t n_ads[N_SEQ] = {1, 1, 0};
    lora_pair lp;
    lora_open(&lp, m, N_SEQ, 8, ads, scales, n_ads); /* 5 free ids: warm-up covers 3 rows */
    assert_int_equal(llmm_context_warmup(lp.ctx[1]), LLMM_OK);
    const uint32_t graphs = stats_of(lp.ctx[1]).graphs;
    double worst = 0;
    unsigned long long replays = lora_steps(&lp, STEPS, &worst);
    print_message("LoRA decode, rows with adapters A, B and none, after warm-up: %llu replays in %d steps, max "
                  "|logit diff| %.2e\n", replays, STEPS, worst);
    assert_int_equal(replays, STEPS);
    const float half = 0.5f, two = 2.f;
    lora_set(&lp, 0, &b, &two, 1); /* permuted: B, A, A */
    lora_set(&lp, 1, &a, NULL, 1);
    lora_set(&lp, 2, &a, &half, 1);
    replays = lora_steps(&lp, STEPS, &worst);
    lora_set(&lp, 0, NULL, NULL, 0); /* switched: none, B, A */
    lora_set(&lp, 1, &b, NULL, 1);
    replays += lora_steps(&lp, STEPS, &worst);
    print_message("LoRA decode, the rows' adapters permuted and switched: %llu replays in %d steps, %u graphs "
                  "before and %u after, max |logit diff| %.2e\n", replays, 2 * STEPS, graphs,
                  stats_of(lp.ctx[1]).graphs, worst);
    assert_int_equal(replays, 2 * STEPS);
    assert_int_equal(stats_of(lp.ctx[1]).graphs, graphs);
    assert_true(worst <= 1e-3);
    lora_close(&lp);
    llmm_adapter_free(a);
    llmm_adapter_free(b);
    llmm_model_free(m);
}

/* Hot swap: adapter A is detached everywhere and freed by the app (its device copy and table
 * entry go at the next attach), and C, loaded from the same file as A, is made resident in its
 * place while B stays where it was. The logits stay within 1e-3 of the CPU's, and since C adapts
 * the slots A did, the steps after the swap replay the graph of those before it. */
static void test_lora_hot_swap(void **state) {
    (void)state;
    enum { N_SEQ = 3, STEPS = 3 };
    llmm_model *m = load_model("stories260K.gguf", NULL);
    llmm_adapter *a = load_lora(m, "lora/stories260K-lora-r8.gguf");
    llmm_adapter *b = load_lora(m, "lora/stories260K-lora-r4-attn-f16.gguf");
    llmm_adapter *const ads[N_SEQ][2] = {{a, NULL}, {b, NULL}, {a, b}};
    const float scales[N_SEQ][2] = {{1.f, 0.f}, {1.f, 0.f}, {0.5f, 1.f}};
    const size_t n_ads[N_SEQ] = {1, 1, 2};
    lora_pair lp;
    lora_open(&lp, m, N_SEQ, N_SEQ, ads, scales, n_ads);
    double worst = 0;
    lora_steps(&lp, STEPS, &worst);
    lora_set(&lp, 0, NULL, NULL, 0);
    lora_set(&lp, 2, &b, NULL, 1);
    llmm_adapter_free(a); /* nobody holds A now: its device copy is released */
    llmm_adapter *c = load_lora(m, "lora/stories260K-lora-r8.gguf");
    llmm_adapter *const cb[2] = {c, b};
    const float cb_scales[2] = {0.5f, 1.f};
    lora_set(&lp, 0, &c, NULL, 1);
    lora_set(&lp, 2, cb, cb_scales, 2);
    const unsigned long long replays = lora_steps(&lp, STEPS, &worst);
    print_message("LoRA hot swap (A freed, C made resident): %llu replays in %d steps, max |logit diff| "
                  "%.2e\n", replays, STEPS, worst);
    assert_int_equal(replays, STEPS);
    assert_true(worst <= 1e-3);
    lora_close(&lp);
    llmm_adapter_free(b);
    llmm_adapter_free(c);
    llmm_model_free(m);
}

/* More adapters than the device's table holds. A context of one sequence has 16 entries: with
 * 18 adapters held by the app and attached one after another, the copies nobody runs with give
 * their entries up, oldest first, and an evicted adapter attached again is uploaded again; every
 * step matches the CPU. A context of 32 sequences has the table's bound, 256 entries: with all
 * of them run with (8 adapters on each sequence), attaching another is LLMM_ERR_CONTEXT_FULL with
 * the sequence's adapters unchanged, and fits again once a sequence lets its adapters go. */
static void test_lora_table_full(void **state) {
    (void)state;
    enum { N_HELD = 18, N_SEQ_WIDE = 32, N_WIDE = N_SEQ_WIDE * 8 + 8 };
    llmm_model *m = load_model("stories260K.gguf", NULL);
    llmm_adapter *held[N_HELD];
    for (int i = 0; i < N_HELD; i++)
        held[i] = load_lora(m, i % 2 ? "lora/stories260K-lora-r4-attn-f16.gguf" : "lora/stories260K-lora-r8.gguf");
    llmm_adapter *const none[1][2] = {{NULL, NULL}};
    const float no_scales[1][2] = {{0.f, 0.f}};
    const size_t n_none[1] = {0};
    lora_pair lp;
    lora_open(&lp, m, 1, 1, none, no_scales, n_none);
    double worst = 0;
    for (int i = 0; i <= N_HELD; i++) {
        lora_set(&lp, 0, &held[i % N_HELD], NULL, 1); /* the last: held[0] again, evicted before */
        if (!under_emulator() || i >= 15) lora_steps(&lp, 1, &worst); /* qemu: the evicting steps */
    }
    print_message("LoRA with %d adapters through a table of 16 entries: max |logit diff| %.2e\n", N_HELD, worst);
    assert_true(worst <= 1e-3);
    lora_close(&lp);
    for (int i = 0; i < N_HELD; i++) llmm_adapter_free(held[i]);

    llmm_adapter **wide = malloc(N_WIDE * sizeof *wide);
    assert_non_null(wide);
    for (int i = 0; i < N_WIDE; i++) wide[i] = load_lora(m, "lora/stories260K-lora-r4-attn-f16.gguf");
    llmm_context_params p = context_params(LLMM_BACKEND_CUDA, 64 * N_SEQ_WIDE, N_SEQ_WIDE, 32, LLMM_KV_F32);
    llmm_context *ctx = make_context(m, &p);
    for (int q = 0; q < N_SEQ_WIDE; q++)
        assert_int_equal(llmm_seq_set_adapters(ctx, q, wide + 8 * q, NULL, 8), LLMM_OK);
    llmm_adapter *const *extra = wide + 8 * N_SEQ_WIDE;
    assert_int_equal(llmm_seq_set_adapters(ctx, 0, extra, NULL, 8), LLMM_ERR_CONTEXT_FULL);
    assert_non_null(strstr(llmm_context_last_error(ctx), "table of resident adapters is full"));
    llmm_adapter *got[8];
    size_t n_got = 0;
    assert_int_equal(llmm_seq_get_adapters(ctx, 0, got, NULL, 8, &n_got), LLMM_OK);
    assert_int_equal(n_got, 8);
    assert_ptr_equal(got[0], wide[0]);
    assert_int_equal(llmm_seq_set_adapters(ctx, 1, NULL, NULL, 0), LLMM_OK);
    assert_int_equal(llmm_seq_set_adapters(ctx, 0, extra, NULL, 8), LLMM_OK);
    llmm_token ids[MAX_IDS];
    const size_t n = tokenize(m, "Once upon a time", ids, MAX_IDS);
    assert_int_equal(llmm_prefill(ctx, 0, ids, n, 0), LLMM_OK);
    llmm_context_free(ctx);
    for (int i = 0; i < N_WIDE; i++) llmm_adapter_free(wide[i]);
    free(wide);
    llmm_model_free(m);
}

static void test_missing_device(void **state) {
    (void)state;
    llmm_model *m = load_model("stories260K.gguf", NULL);
    llmm_context_params p = context_params(LLMM_BACKEND_CUDA, 32, 1, 8, LLMM_KV_F16);
    p.device = 1;
    llmm_context *c = NULL;
    assert_int_equal(llmm_context_create(m, &p, &c), LLMM_ERR_BACKEND);
    assert_null(c);
    int fallbacks = 0;
    p.backend = LLMM_BACKEND_AUTO;
    p.log = count_log;
    p.log_user = &fallbacks;
    p.log_level = LLMM_LOG_INFO;
    c = make_context(m, &p);
    assert_int_equal(fallbacks, 1);
    assert_true(stats_of(c).module_load_ms == 0); /* the context is the CPU's */
    llmm_context_free(c);
    p.device = -1;
    assert_int_equal(llmm_context_create(m, &p, &c), LLMM_ERR_INVALID_ARG);
    llmm_model_free(m);
}

/* The module present, no device (the emulated runtime told so: LLMM_SIMT_DEVICES=0, as the real
 * module with cudart on a machine without a GPU): 1,000 AUTO contexts each fall back to the CPU
 * at about the CPU's own cost and resident memory stays flat. The first load of the module
 * stays (-z nodelete); later contexts only count its references; the probe that fails frees
 * nothing it keeps. (What cudart itself costs per probe only a machine with the real module and
 * no GPU shows: tests/python/test_lifecycle.py there.) */
static long resident_kb(void) {
    long pages = 0, resident = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f) return -1;
    const int got = fscanf(f, "%ld %ld", &pages, &resident);
    fclose(f);
    return got == 2 ? resident * (sysconf(_SC_PAGESIZE) / 1024) : -1;
}

static int compare_doubles(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void test_auto_without_device(void **state) {
    (void)state;
    enum { CYCLES = 1000, SETTLE = 50 };
    setenv("LLMM_SIMT_DEVICES", "0", 1);
    llmm_model *m = load_model("stories260K.gguf", NULL);
    llmm_context_params p = context_params(LLMM_BACKEND_CUDA, 32, 1, 8, LLMM_KV_F32);
    llmm_context *c = NULL;
    assert_int_equal(llmm_context_create(m, &p, &c), LLMM_ERR_BACKEND); /* asked for: an error */
    p.backend = LLMM_BACKEND_AUTO;
    double first = now_s();
    c = make_context(m, &p);
    first = now_s() - first;
    assert_true(stats_of(c).module_load_ms == 0); /* the CPU's */
    llmm_context_free(c);
    static double ms[CYCLES];
    long rss_settled = 0;
    for (int i = 0; i < SETTLE + CYCLES; i++) {
        if (i == SETTLE) rss_settled = resident_kb();
        const double t0 = now_s();
        assert_int_equal(llmm_context_create(m, &p, &c), LLMM_OK);
        llmm_context_free(c);
        if (i >= SETTLE) ms[i - SETTLE] = (now_s() - t0) * 1e3;
    }
    const long rss_end = resident_kb();
    qsort(ms, CYCLES, sizeof *ms, compare_doubles);
    print_message("AUTO without a device: first context %.2f ms; %d more: median %.3f ms, p99 %.3f ms, max %.3f ms; "
                  "resident %ld -> %ld KiB\n",
                  first * 1e3, CYCLES, ms[CYCLES / 2], ms[CYCLES * 99 / 100], ms[CYCLES - 1], rss_settled, rss_end);
    unsetenv("LLMM_SIMT_DEVICES");
    /* under 1 ms a context, with the median as the bar: on a loaded machine (two cores shared
     * with other builds) the tail is scheduling delay, not the library's (measured there: median
     * 0.035 ms, p99 16 ms; resident +68 KiB over the 1,000) */
    if (!under_emulator()) assert_true(ms[CYCLES / 2] < 1.0); /* qemu (make test-arm): no timing */
    assert_true(rss_end - rss_settled < 512);
    llmm_model_free(m);
}

/* ------------------------------------------------------------------ large activations */

/* A llama-shaped model (llmmini-synth, n_embd 256, n_ff 512, two layers) whose layer-0
 * ffn_norm weights are scaled by LARGE_NORM_SCALE: the SwiGLU output that feeds ffn_down then
 * passes F16's largest finite value (65504), as in models whose activations have outliers
 * (the F16 file's logits are NaN on the CPU, whose F16 operand overflows: checked below).
 * Rounding such an activation to F16 makes it infinite, and the logits NaN. */
#define LARGE_NORM_SCALE 400.0f
enum { LARGE_PROMPT = 20, LARGE_STEPS = 4, LARGE_ROWS = LARGE_PROMPT + LARGE_STEPS };

/* The F32 synthesized model with its scaled norm, as file bytes (malloc'd, *n bytes). */
static uint8_t *large_activation_model(size_t *n) {
    char path[64], cmd[2048];
    snprintf(path, sizeof path, "/tmp/llmm-large-act-%ld.gguf", (long)getpid());
    const char *runner = getenv("TEST_RUNNER");
    snprintf(cmd, sizeof cmd,
             "%s '%s' -o '%s' --preset tiny --type f32 --dim 256 --layers 2 --heads 4 --kv-heads 2 --ff 512 "
             "--seed 7 >/dev/null 2>&1",
             runner ? runner : "", synth_tool, path);
    const int rc = system(cmd);
    assert_true(rc != -1 && WIFEXITED(rc) && WEXITSTATUS(rc) == 0);
    uint8_t *data = (uint8_t *)read_whole_file(path, n);
    unlink(path);
    assert_non_null(data);
    gguf_file *f = NULL;
    llmm_diag d = {{0}};
    assert_int_equal(llmm__gguf_open_memory(data, *n, NULL, &f, &d), LLMM_OK);
    const gguf_tensor *t = llmm__gguf_find_tensor(f, "blk.0.ffn_norm.weight");
    assert_non_null(t);
    assert_int_equal(t->type, LLMM_TYPE_F32);
    float *w = (float *)(data + ((const uint8_t *)t->data - data));
    for (size_t i = 0; i < t->n_elements; i++) w[i] *= LARGE_NORM_SCALE;
    llmm__gguf_close(f);
    return data;
}

/* Every logits row of a LARGE_PROMPT-token prompt in one step (n_batch 32: a prompt matmul of
 * more than 8 rows), then LARGE_STEPS decode steps of feed's tokens (NULL: each row's argmax,
 * written to feed_out). rows: LARGE_ROWS x nv. */
static void run_large(llmm_model *m, llmm_backend_kind backend, const char *gemm, const llmm_token *feed,
                      llmm_token *feed_out, float *rows, size_t nv) {
    llmm_token ids[LARGE_PROMPT];
    for (size_t i = 0; i < LARGE_PROMPT; i++) ids[i] = (llmm_token)(3 + (i * 37) % 500);
    llmm_context_params p = context_params(backend, 64, 1, 32, LLMM_KV_F32);
    if (gemm) setenv("LLMM_CUDA_GEMM", gemm, 1);
    llmm_context *c = make_context(m, &p);
    unsetenv("LLMM_CUDA_GEMM");
    assert_int_equal(llmm_prefill(c, 0, ids, LARGE_PROMPT, LLMM_PREFILL_ALL_LOGITS), LLMM_OK);
    for (size_t i = 0; i < LARGE_PROMPT; i++) copy_row(c, i, rows + i * nv, nv);
    for (size_t s = 0; s < LARGE_STEPS; s++) {
        const float *last = rows + (LARGE_PROMPT - 1 + s) * nv;
        const llmm_token tok = feed ? feed[s] : argmax(last, nv);
        if (feed_out) feed_out[s] = tok;
        const llmm_seq_id s0 = 0;
        assert_int_equal(llmm_decode(c, &s0, &tok, 1), LLMM_OK);
        copy_row(c, 0, rows + (LARGE_PROMPT + s) * nv, nv);
    }
    llmm_context_free(c);
}

static int all_finite(const float *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return 0;
    return 1;
}

/* The model in Q4_K_M, Q4_0, Q8_0 and F16, on the CPU and on the module with each prompt matmul
 * path (LLMM_CUDA_GEMM), and with cuBLASLt finding no algorithm (the emulated cuBLASLt told so:
 * the prompt's matmuls fall back to the int8 or GEMV path).
 * Quantized weights: the CPU's activation operand is Q8 with a float (Q8_K) or F16 (Q8_0: up to
 * 127 * 65504) scale, so it stays finite; so must every CUDA path. The GEMV and int8 paths (and the
 * fallback) are the CPU's matmul numerics (measured 2.4e-7 from the CPU's logits), but the device's
 * expf may flip a Q8 step (test_prefill_whole_and_chunked), so they are held to the bounds of
 * the cuBLASLt path, which rounds activations to F16 after a per-row power-of-two scale
 * (cuda/gemm.h) where the CPU quantizes them to Q8: a flipped step's 0.5 and, as this random
 * model's logits are nearly flat (top-1 margins of a few hundredths), top-1 agreement and KL as
 * test_fidelity measures them: measured for lt 22/24, 23/24, 24/24 rows and mean KL 5.9e-5,
 * 3.3e-5, 2.7e-5 (Q4_K_M, Q4_0, Q8_0); bounds 90 % and 2e-4. Before the scale, |x| > 65504 became inf there and the logits NaN for
 * Q4_K_M with every path but gemv (LLMM_CUDA_GEMM=int8 sends the K-quants, which int8 does not
 * take, to cuBLASLt) and for Q4_0 and Q8_0 with lt.
 * F16 weights: the CPU's operand is F16 (the reference engine's too), so such activations are
 * infinite on the CPU and every logit row is NaN (LLMM_ERR_NUMERICAL at sampling: test_numerical);
 * every CUDA path rounds to the same F16 operand and must give non-finite rows where the CPU
 * does, not a different finite answer. */
/* Whether the module is the emulated one (its runtime's counters are exported): its knobs
 * (LLMM_CUDA_EMU_LT_NO_ALGORITHM) do nothing on the real module. */
static int module_is_emulated(void) {
    void *h = dlopen(module_path, RTLD_NOW | RTLD_LOCAL);
    const int emulated = h && dlsym(h, "simt_pageable_async_copies") != NULL;
    if (h) dlclose(h);
    return emulated;
}

static void test_large_activations(void **state) {
    (void)state;
    const int emulated = module_is_emulated();
    static const char *const recipes[] = {"q4_k_m", "q4_0", "q8_0", "f16"};
    static const char *const paths[] = {"gemv", "lt", "int8", NULL, "lt"};
    enum { NO_ALGORITHM = 4 }; /* paths[NO_ALGORITHM]: lt with no algorithm */
    size_t n_bytes = 0;
    uint8_t *f32 = large_activation_model(&n_bytes);
    gguf_file *src = NULL;
    llmm_diag d = {{0}};
    assert_int_equal(llmm__gguf_open_memory(f32, n_bytes, NULL, &src, &d), LLMM_OK);
    const double t0 = now_s();
    for (size_t r = 0; r < sizeof recipes / sizeof *recipes; r++) {
        char path[64];
        quantize_to_temp(src, recipes[r], path, sizeof path);
        llmm_model *m = load_model(path, NULL);
        unlink(path);
        const size_t nv = vocab_size(m);
        const int f16 = strcmp(recipes[r], "f16") == 0;
        float *cpu = malloc(LARGE_ROWS * nv * sizeof *cpu), *gpu = malloc(LARGE_ROWS * nv * sizeof *gpu);
        assert_non_null(cpu);
        assert_non_null(gpu);
        llmm_token feed[LARGE_STEPS];
        run_large(m, LLMM_BACKEND_CPU, NULL, NULL, feed, cpu, nv);
        for (size_t i = 0; i < LARGE_ROWS; i++) assert_int_equal(all_finite(cpu + i * nv, nv), !f16);
        for (size_t pa = 0; pa < sizeof paths / sizeof *paths; pa++) {
            if (pa == NO_ALGORITHM && !emulated) continue;
            if (pa == NO_ALGORITHM) setenv("LLMM_CUDA_EMU_LT_NO_ALGORITHM", "1", 1);
            run_large(m, LLMM_BACKEND_CUDA, paths[pa], feed, NULL, gpu, nv);
            unsetenv("LLMM_CUDA_EMU_LT_NO_ALGORITHM");
            double worst = 0, kl = 0;
            size_t agree = 0, finite = 0;
            for (size_t i = 0; i < LARGE_ROWS; i++) {
                worst = fmax(worst, max_abs_diff(cpu + i * nv, gpu + i * nv, nv));
                if (!f16) kl += row_kl(cpu + i * nv, gpu + i * nv, nv) / LARGE_ROWS;
                agree += argmax(cpu + i * nv, nv) == argmax(gpu + i * nv, nv);
                finite += all_finite(gpu + i * nv, nv);
            }
            print_message("%-7s %-16s cuda-emu vs cpu, %d prompt + %d decode rows: max |logit diff| %.2e, greedy "
                          "%zu/%d, mean KL %.2e, finite rows %zu\n",
                          recipes[r], pa == NO_ALGORITHM ? "lt, no algorithm" : paths[pa] ? paths[pa] : "default",
                          LARGE_PROMPT, LARGE_STEPS, f16 ? 0.0 : worst, agree, LARGE_ROWS, kl, finite);
            if (f16) {
                assert_int_equal(finite, 0);
                continue;
            }
            assert_int_equal(finite, LARGE_ROWS);
            /* nearly flat random logits (|logit| < 2.3): measured bounds, as test_fidelity's */
            assert_true(worst <= Q8_FLIP_TOLERANCE);
            assert_true(kl <= 2e-4);
            assert_true(agree * 10 >= LARGE_ROWS * 9);
        }
        free(cpu);
        free(gpu);
        llmm_model_free(m);
    }
    llmm__gguf_close(src);
    free(f32);
    print_message("large activations on the emulated CUDA module: %.1f s\n", now_s() - t0);
}

/* ------------------------------------------------------------------ contexts on four threads */

/* Four threads, each with its own contexts: two warm up (capturing decode graphs for 1 to 4
 * rows) and decode with graphs, over and over, while the other two load a second model (every
 * weight uploaded anew) and decode on it. Each thread's logits must equal the same run alone,
 * bit for bit (one code path, one device), no call may fail, the capturing contexts must keep
 * their graphs (4 after the warm-up, replays on every decode step), and no copy may read
 * pageable host memory (the emulated runtime counts them; CUDA would stage them synchronously).
 * Before contexts had non-blocking streams and uploads ran through pinned staging on them, a
 * load (cudaMemcpy on the legacy stream) during a capture on a blocking stream failed with
 * cudaErrorStreamCaptureImplicit (LLMM_ERR_BACKEND) and invalidated that capture (graphs off). */
enum { MT_CHURN = 6, MT_ROUNDS = 3, MT_STEPS = 4, MT_THREADS = 4 };

typedef struct mt_job {
    const char *model_file;
    llmm_model *shared_model; /* the capturing threads' model; NULL: load model_file each round */
    int capture;
    float *logits;            /* (MT_ROUNDS x MT_STEPS x n_vocab) */
    size_t n_vocab;
    llmm_status status;       /* the first failure */
    uint32_t graphs_after_warmup, min_graphs;
    uint64_t replays;
} mt_job;

/* The job's model (loaded now unless shared) and a CUDA context on it, warmed up (its 4 graphs
 * captured, their count kept in *graphs) when the job captures. */
static llmm_status mt_open(mt_job *j, llmm_model **m, llmm_context **c, uint32_t *graphs) {
    *m = j->shared_model;
    *c = NULL;
    llmm_status st = LLMM_OK;
    if (!*m) {
        char path[1024];
        llmm_model_params mp;
        llmm_model_params_default(&mp, sizeof mp);
        st = llmm_model_load(shared_path(path, sizeof path, j->model_file), &mp, m);
        if (st) return st;
    }
    llmm_context_params p = context_params(LLMM_BACKEND_CUDA, 64, 4, 16, LLMM_KV_F32);
    st = llmm_context_create(*m, &p, c);
    if (!st && j->capture) {
        st = llmm_context_warmup(*c);
        llmm_context_stats cs = {.size = sizeof cs};
        if (!st) st = llmm_context_get_stats(*c, &cs);
        if (!st) *graphs = cs.graphs;
    }
    return st;
}

static void mt_close(mt_job *j, llmm_model *m, llmm_context *c) {
    llmm_context_free(c);
    if (!j->shared_model) llmm_model_free(m);
}

/* The prompt and MT_STEPS greedy steps, each step's logits into rows. */
static llmm_status mt_round(mt_job *j, float *rows) {
    llmm_model *m = NULL;
    llmm_context *c = NULL;
    llmm_status st = mt_open(j, &m, &c, &j->graphs_after_warmup);
    llmm_token ids[MAX_IDS];
    size_t n = 0;
    if (!st) st = llmm_tokenize(m, k_long_prompt, strlen(k_long_prompt), LLMM_TOKENIZE_ADD_SPECIAL, ids, MAX_IDS, &n);
    if (!st) st = llmm_prefill(c, 0, ids, n, 0);
    const float *l = NULL;
    size_t nv = 0;
    if (!st) st = llmm_logits(c, 0, &l, &nv);
    for (int step = 0; !st && step < MT_STEPS; step++) {
        const llmm_token tok = argmax(l, nv);
        const llmm_seq_id s0 = 0;
        st = llmm_decode(c, &s0, &tok, 1);
        if (!st) st = llmm_logits(c, 0, &l, &nv);
        if (!st) memcpy(rows + (size_t)step * nv, l, nv * sizeof *l);
    }
    if (!st && j->capture) {
        llmm_context_stats cs = {.size = sizeof cs};
        st = llmm_context_get_stats(c, &cs);
        if (cs.graphs < j->min_graphs) j->min_graphs = cs.graphs;
        j->replays += cs.graph_replays;
    }
    mt_close(j, m, c);
    return st;
}

/* Only what meets across threads, many times over: a context created and warmed up (4
 * captures), or a model loaded and a context created on it (every weight uploaded). */
static llmm_status mt_churn(mt_job *j) {
    llmm_model *m = NULL;
    llmm_context *c = NULL;
    uint32_t graphs = UINT32_MAX;
    const llmm_status st = mt_open(j, &m, &c, &graphs);
    if (j->capture && graphs < j->min_graphs) j->min_graphs = graphs;
    if (m) mt_close(j, m, c);
    return st;
}

static void *mt_run(void *arg) {
    mt_job *j = (mt_job *)arg;
    for (int r = 0; r < MT_CHURN && !j->status; r++) j->status = mt_churn(j);
    for (int r = 0; r < MT_ROUNDS && !j->status; r++)
        j->status = mt_round(j, j->logits + (size_t)r * MT_STEPS * j->n_vocab);
    return NULL;
}

static void test_four_threads_capture_and_load(void **state) {
    (void)state;
    llmm_model *shared = load_model("stories260K-q8_0.gguf", NULL);
    const size_t nv = vocab_size(shared);
    void *module = dlopen(module_path, RTLD_NOW | RTLD_LOCAL);
    if (!module) fail_msg("dlopen %s: %s", module_path, dlerror());
    /* the emulated runtime's counter; the real module has none (gpu-check.sh runs this on it) */
    unsigned long long *(*pageable)(void) = (unsigned long long *(*)(void))dlsym(module, "simt_pageable_async_copies");
    mt_job jobs[MT_THREADS], alone[MT_THREADS];
    for (int t = 0; t < MT_THREADS; t++) {
        const int capture = t < 2;
        jobs[t] = (mt_job){.model_file = capture ? "models/stories260K-q8_0.gguf" : "models/stories260K-q4_0.gguf",
                           .shared_model = capture ? shared : NULL, .capture = capture, .n_vocab = nv,
                           .min_graphs = UINT32_MAX};
        jobs[t].logits = calloc((size_t)MT_ROUNDS * MT_STEPS * nv, sizeof(float));
        assert_non_null(jobs[t].logits);
        alone[t] = jobs[t];
        alone[t].logits = calloc((size_t)MT_ROUNDS * MT_STEPS * nv, sizeof(float));
        assert_non_null(alone[t].logits);
        mt_run(&alone[t]);
        assert_int_equal(alone[t].status, LLMM_OK);
    }
    const unsigned long long pageable_before = pageable ? *pageable() : 0;
    const double t0 = now_s();
    /* every capture held open 20 ms (the emulated runtime's knob): the loads meet captures */
    setenv("LLMM_SIMT_CAPTURE_HOLD_MS", "20", 1);
    pthread_t th[MT_THREADS];
    for (int t = 0; t < MT_THREADS; t++) assert_int_equal(pthread_create(&th[t], NULL, mt_run, &jobs[t]), 0);
    for (int t = 0; t < MT_THREADS; t++) pthread_join(th[t], NULL);
    unsetenv("LLMM_SIMT_CAPTURE_HOLD_MS");
    const unsigned long long pageable_copies = pageable ? *pageable() - pageable_before : 0;
    for (int t = 0; t < MT_THREADS; t++)
        print_message("thread %d (%s): %s; graphs after warm-up %u, at least %u held, %llu replays\n", t,
                      jobs[t].capture ? "warm-up and graphs" : "load and decode", llmm_status_str(jobs[t].status),
                      jobs[t].graphs_after_warmup, jobs[t].capture ? jobs[t].min_graphs : 0,
                      (unsigned long long)jobs[t].replays);
    for (int t = 0; t < MT_THREADS; t++) {
        assert_int_equal(jobs[t].status, LLMM_OK);
        assert_memory_equal(jobs[t].logits, alone[t].logits, (size_t)MT_ROUNDS * MT_STEPS * nv * sizeof(float));
        if (jobs[t].capture) {
            assert_int_equal(jobs[t].graphs_after_warmup, 4);
            assert_true(jobs[t].min_graphs >= 4);
            assert_int_equal(jobs[t].replays, (uint64_t)MT_ROUNDS * MT_STEPS);
        }
        free(jobs[t].logits);
        free(alone[t].logits);
    }
    print_message("4 threads: %.1f s, %llu copies from pageable memory\n", now_s() - t0, pageable_copies);
    assert_int_equal(pageable_copies, 0);
    dlclose(module);
    llmm_model_free(shared);
}

/* test_cuda_module [PATTERN]: only the tests whose names match (scripts/gpu-check.sh runs the
 * four-thread test alone on the real module). */
int main(int argc, char **argv) {
    if (argc > 1) cmocka_set_test_filter(argv[1]);
    find_module(argv[0]);
    find_synth(argv[0]);
    setenv(LLMM_CUDA_MODULE_ENV, module_path, 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_conformance),
        cmocka_unit_test(test_weight_sharing),
        cmocka_unit_test(test_golden),
        cmocka_unit_test(test_arch_golden),
        cmocka_unit_test(test_files_and_kv_types_match_cpu),
        cmocka_unit_test(test_fork_copy_on_write),
        cmocka_unit_test(test_prefill_whole_and_chunked),
        cmocka_unit_test(test_large_activations),
        cmocka_unit_test(test_batched_decode),
        cmocka_unit_test(test_sixteen_sequences),
        cmocka_unit_test(test_graphs_and_warmup),
        cmocka_unit_test(test_hybrid_decode_graphs),
        cmocka_unit_test(test_hybrid_prompt_matches_cpu),
        cmocka_unit_test(test_four_threads_capture_and_load),
        cmocka_unit_test(test_decode_sample),
        cmocka_unit_test(test_numerical_errors),
        cmocka_unit_test(test_lora_matches_cpu),
        cmocka_unit_test(test_lora_decode_replays_one_graph),
        cmocka_unit_test(test_lora_hot_swap),
        cmocka_unit_test(test_lora_table_full),
        cmocka_unit_test(test_missing_device),
        cmocka_unit_test(test_auto_without_device),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
