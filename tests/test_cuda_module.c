/* The CUDA module (cuda/backend.cu) as the core loads it, built against the SIMT emulation
 * (build/libllmmini-cuda-emu.so, every kernel run on the CPU): its table through the backend
 * conformance suite, then whole models on LLMM_BACKEND_CUDA through LLMM_CUDA_MODULE against
 * the golden outputs, and a batched decode of two sequences against each alone.
 *
 * The module is the file LLMM_CUDA_EMU_MODULE names, else libllmmini-cuda-emu.so in the
 * folder above this binary's ($(BUILD)/tests/ -> $(BUILD)/). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend_conformance.h"
#include "backend_module.h"
#include "golden_check.h"
#include "llmmini.h"
#include "model.h"
#include "shared_data.h"

#define MAX_IDS GOLDEN_MAX_IDS

static char module_path[4096];

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void find_module(const char *argv0) {
    const char *env = getenv("LLMM_CUDA_EMU_MODULE");
    if (env && *env) {
        snprintf(module_path, sizeof module_path, "%s", env);
        return;
    }
    const char *slash = strrchr(argv0, '/');
    const int dir_len = slash ? (int)(slash - argv0) : 1;
    snprintf(module_path, sizeof module_path, "%.*s/../libllmmini-cuda-emu.so", dir_len, slash ? argv0 : ".");
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
    assert_true(backend_table_ok(be));
    const double t0 = now_s();
    const conformance_target t = {.label = "cuda-emu", .be = be};
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

static llmm_model *load_model(const char *name) {
    char rel[512], path[1024];
    snprintf(rel, sizeof rel, "models/%s", name);
    llmm_model *m = NULL;
    assert_int_equal(llmm_model_load(shared_path(path, sizeof path, rel), NULL, &m), LLMM_OK);
    return m;
}

static llmm_context *cuda_context(llmm_model *m, uint32_t n_ctx, uint32_t n_seq, uint32_t n_batch,
                                  llmm_kv_type kv_type) {
    llmm_context_params p;
    llmm_context_params_default(&p, sizeof p);
    p.n_ctx = n_ctx;
    p.n_seq_max = n_seq;
    p.n_batch = n_batch;
    p.n_threads = 1;
    p.kv_type = kv_type;
    p.backend = LLMM_BACKEND_CUDA;
    llmm_context *c = NULL;
    const llmm_status st = llmm_context_create(m, &p, &c);
    if (st != LLMM_OK) {
        char msg[512] = "";
        llmm_model_last_error(m, msg, sizeof msg);
        fail_msg("llmm_context_create on CUDA: %s: %s", llmm_status_str(st), msg);
    }
    return c;
}

/* As test_generate.c's F32 KV golden check: logits within 1e-3, greedy tokens up to the
 * case's hard bar. */
static void test_golden(void **state) {
    (void)state;
    size_t n = 0;
    const double t0 = now_s();
    {
        /* the CUDA backend resolves to the module, which keeps its buffers in device memory */
        llmm_model *m = load_model("stories260K.gguf");
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
        llmm_model *m = load_model(gc->model);
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

static llmm_token argmax(const float *v, size_t n) {
    size_t best = 0;
    for (size_t i = 1; i < n; i++)
        if (v[i] > v[best]) best = i;
    return (llmm_token)best;
}

/* Two sequences decoded in one batch give the logits each gives alone (within 1e-4), with
 * both contexts of the model alive at once (sharing its device weights). */
static void test_batched_decode(void **state) {
    (void)state;
    enum { STEPS = 8 };
    llmm_model *m = load_model("stories260K-q8_0.gguf");
    const char *prompts[2] = {"Once upon a time", "The little dog"};
    llmm_token ids[2][MAX_IDS];
    size_t n_ids[2];
    for (int s = 0; s < 2; s++)
        assert_int_equal(llmm_tokenize(m, prompts[s], strlen(prompts[s]), LLMM_TOKENIZE_ADD_SPECIAL, ids[s], MAX_IDS,
                                       &n_ids[s]),
                         LLMM_OK);
    llmm_context *both = cuda_context(m, 64, 2, 16, LLMM_KV_F16);
    llmm_context *solo = cuda_context(m, 64, 1, 16, LLMM_KV_F16);
    for (int s = 0; s < 2; s++) assert_int_equal(llmm_prefill(both, s, ids[s], n_ids[s], 0), LLMM_OK);
    size_t nv = 0;
    const float *l;
    assert_int_equal(llmm_logits(both, 0, &l, &nv), LLMM_OK);
    float *want = malloc((size_t)STEPS * 2 * nv * sizeof *want);
    llmm_token fed[STEPS][2];
    assert_non_null(want);
    const llmm_seq_id seqs[2] = {0, 1};
    llmm_token next[2] = {ids[0][n_ids[0] - 1], ids[1][n_ids[1] - 1]};
    for (int step = 0; step < STEPS; step++) {
        memcpy(fed[step], next, sizeof next);
        assert_int_equal(llmm_decode(both, seqs, next, 2), LLMM_OK);
        for (int s = 0; s < 2; s++) {
            assert_int_equal(llmm_logits(both, (size_t)s, &l, &nv), LLMM_OK);
            memcpy(want + ((size_t)step * 2 + s) * nv, l, nv * sizeof *l);
            next[s] = argmax(l, nv);
        }
    }
    double worst = 0;
    for (int s = 0; s < 2; s++) {
        assert_int_equal(llmm_seq_clear(solo, 0), LLMM_OK);
        assert_int_equal(llmm_prefill(solo, 0, ids[s], n_ids[s], 0), LLMM_OK);
        for (int step = 0; step < STEPS; step++) {
            const llmm_seq_id s0 = 0;
            assert_int_equal(llmm_decode(solo, &s0, &fed[step][s], 1), LLMM_OK);
            assert_int_equal(llmm_logits(solo, 0, &l, &nv), LLMM_OK);
            const float *w = want + ((size_t)step * 2 + s) * nv;
            for (size_t k = 0; k < nv; k++) worst = fmax(worst, fabs((double)l[k] - w[k]));
        }
    }
    print_message("batched vs single decode on the emulated CUDA module: max |logit diff| %.2e\n", worst);
    assert_true(worst <= 1e-4);
    free(want);
    llmm_context_free(both);
    llmm_context_free(solo);
    llmm_model_free(m);
}

int main(int argc, char **argv) {
    (void)argc;
    find_module(argv[0]);
    setenv(LLMM_CUDA_MODULE_ENV, module_path, 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_conformance),
        cmocka_unit_test(test_weight_sharing),
        cmocka_unit_test(test_golden),
        cmocka_unit_test(test_batched_decode),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
