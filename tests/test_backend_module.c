/* Backend modules (lib/backend_module.c): the core loading a CUDA backend with dlopen. The
 * modules are tests/module/test_module.c's, built next to this binary: the handle backend
 * posing as CUDA, and variants the loader must refuse. LLMM_CUDA_MODULE points at them. */
#define _GNU_SOURCE /* RTLD_NOLOAD */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "llmmini.h"
#include "support/fixtures.h"

#define N_GEN 24
#define PROMPT "Once upon a time"

/* Log lines of one context creation, at INFO and above. */
typedef struct log_capture {
    char text[8192];
    size_t len;
} log_capture;

static void capture_log(void *user, llmm_log_level level, const char *message) {
    log_capture *c = user;
    const int n = snprintf(c->text + c->len, sizeof c->text - c->len, "%d %s\n", (int)level, message);
    if (n > 0) c->len += (size_t)n < sizeof c->text - c->len ? (size_t)n : sizeof c->text - 1 - c->len;
}

/* Path of a test module ("" for the good one, else "-VARIANT"): next to this binary, since
 * $(BUILD) differs between builds (sanitizers, cross). */
static const char *module_path(char *buf, size_t cap, const char *variant) {
    char exe[1024];
    const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    assert_true(n > 0);
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    assert_non_null(slash);
    *slash = '\0';
    snprintf(buf, cap, "%s/libllmmini-test-module%s.so", exe, variant);
    return buf;
}

static void use_module(const char *variant) {
    char path[1100];
    assert_int_equal(setenv("LLMM_CUDA_MODULE", module_path(path, sizeof path, variant), 1), 0);
}

/* 1 when the module file is mapped in this process now. */
static int module_loaded(const char *variant) {
    char path[1100];
    void *h = dlopen(module_path(path, sizeof path, variant), RTLD_NOW | RTLD_NOLOAD);
    if (h) dlclose(h);
    return h != NULL;
}

static llmm_context_params ctx_params(llmm_backend_kind backend, log_capture *log) {
    llmm_context_params p;
    llmm_context_params_default(&p, sizeof p);
    p.n_ctx = 128;
    p.backend = backend;
    p.log = capture_log;
    p.log_user = log;
    p.log_level = LLMM_LOG_INFO;
    return p;
}

static llmm_status create(llmm_model *m, llmm_backend_kind backend, log_capture *log, llmm_context **out) {
    memset(log, 0, sizeof *log);
    const llmm_context_params p = ctx_params(backend, log);
    return llmm_context_create(m, &p, out);
}

static void greedy(llmm_context *c, llmm_token out[N_GEN]) {
    assert_int_equal(generate_greedy(c, PROMPT, out, N_GEN, NULL), N_GEN);
}

static void assert_contains(const char *haystack, const char *needle) {
    if (!strstr(haystack, needle)) fail_msg("expected \"%s\" in:\n%s", needle, haystack);
}

/* The good module runs a context under CUDA and under AUTO, with the CPU's greedy tokens, and
 * is unloaded when its last context is freed. */
static void test_module_runs_like_cpu(void **state) {
    (void)state;
    llmm_model *m = load_model("stories260K.gguf", NULL);
    log_capture log;
    llmm_context *cpu = NULL, *cuda = NULL, *aut = NULL;
    use_module("");
    assert_int_equal(create(m, LLMM_BACKEND_CPU, &log, &cpu), LLMM_OK);
    assert_contains(log.text, "context: backend cpu,");
    assert_false(module_loaded("")); /* CPU asked for: the module is never looked at */
    llmm_token want[N_GEN], got[N_GEN];
    greedy(cpu, want);

    assert_int_equal(create(m, LLMM_BACKEND_CUDA, &log, &cuda), LLMM_OK);
    assert_contains(log.text, "context: backend test-module,");
    assert_true(module_loaded(""));
    greedy(cuda, got);
    assert_memory_equal(want, got, sizeof want);

    assert_int_equal(create(m, LLMM_BACKEND_AUTO, &log, &aut), LLMM_OK);
    assert_contains(log.text, "context: backend test-module,");
    assert_null(strstr(log.text, "AUTO runs on the CPU"));
    greedy(aut, got);
    assert_memory_equal(want, got, sizeof want);

    /* each context holds the module: it stays until the last one is freed */
    llmm_context_free(cuda);
    assert_true(module_loaded(""));
    greedy(aut, got);
    assert_memory_equal(want, got, sizeof want);
    llmm_context_free(aut);
    assert_false(module_loaded(""));
    llmm_context_free(cpu);
    llmm_model_free(m);
}

typedef struct thread_run {
    llmm_model *m;
    llmm_token got[N_GEN];
    llmm_status st;
} thread_run;

static void *run_on_module(void *arg) {
    thread_run *r = arg;
    llmm_context_params p;
    llmm_context_params_default(&p, sizeof p);
    p.n_ctx = 128;
    p.n_threads = 1;
    p.backend = LLMM_BACKEND_CUDA;
    llmm_context *c = NULL;
    r->st = llmm_context_create(r->m, &p, &c);
    if (r->st) return NULL;
    /* sampling here is the library's: cmocka's asserts belong to the main thread */
    llmm_sampler_params sp;
    const llmm_generate_params gp = greedy_params(&sp, r->got, N_GEN);
    r->st = llmm_generate(c, PROMPT, &gp, NULL);
    llmm_context_free(c);
    return NULL;
}

/* Contexts on several threads load, use and unload the module at once: each holds its own
 * handle, so none unloads it under another. */
static void test_module_from_threads(void **state) {
    (void)state;
    llmm_model *m = load_model("stories260K.gguf", NULL);
    use_module("");
    enum { N_THREADS = 4, ROUNDS = 3 };
    log_capture log;
    llmm_context *cpu = NULL;
    assert_int_equal(create(m, LLMM_BACKEND_CPU, &log, &cpu), LLMM_OK);
    llmm_token want[N_GEN];
    greedy(cpu, want);
    llmm_context_free(cpu);
    for (int round = 0; round < ROUNDS; round++) {
        thread_run runs[N_THREADS];
        pthread_t tid[N_THREADS];
        for (int i = 0; i < N_THREADS; i++) {
            runs[i] = (thread_run){.m = m, .st = LLMM_ERR_INVALID_ARG};
            assert_int_equal(pthread_create(&tid[i], NULL, run_on_module, &runs[i]), 0);
        }
        for (int i = 0; i < N_THREADS; i++) {
            assert_int_equal(pthread_join(tid[i], NULL), 0);
            assert_int_equal(runs[i].st, LLMM_OK);
            assert_memory_equal(runs[i].got, want, sizeof want);
        }
    }
    llmm_model_free(m);
}

/* Modules the loader refuses, and the words its reason must hold. */
static const struct refusal {
    const char *variant; /* NULL: a path with no file */
    const char *reason;
} refusals[] = {
    {"-bad-version", "has backend API version"},
    {"-no-entry", "has no entry point llmm_backend_module"},
    {"-no-device", "(backend test-module) found no usable device"},
    {"-null", "has no backend for backend API version"},
    {NULL, "cannot load the CUDA module LLMM_CUDA_MODULE="},
};

/* CUDA: LLMM_ERR_BACKEND naming the reason; AUTO: the CPU, the reason in one INFO line; every
 * refused module unloaded again. */
static void test_module_refusals(void **state) {
    (void)state;
    llmm_model *m = load_model("stories260K.gguf", NULL);
    for (size_t i = 0; i < sizeof refusals / sizeof *refusals; i++) {
        const struct refusal *r = &refusals[i];
        if (r->variant) use_module(r->variant);
        else assert_int_equal(setenv("LLMM_CUDA_MODULE", "/nonexistent/libllmmini-cuda.so", 1), 0);
        log_capture log;
        llmm_context *c = (llmm_context *)&log; /* must come back NULL */
        assert_int_equal(create(m, LLMM_BACKEND_CUDA, &log, &c), LLMM_ERR_BACKEND);
        assert_null(c);
        char err[1024];
        assert_true(llmm_model_last_error(m, err, sizeof err) > 0);
        assert_contains(err, "the CUDA backend is not available: ");
        assert_contains(err, r->reason);
        print_message("CUDA, module%s: %s\n", r->variant ? r->variant : " missing", err);

        assert_int_equal(create(m, LLMM_BACKEND_AUTO, &log, &c), LLMM_OK);
        assert_contains(log.text, "2 backend: AUTO runs on the CPU: ");
        assert_contains(log.text, r->reason);
        assert_contains(log.text, "context: backend cpu,");
        /* one line about the fallback */
        const char *first = strstr(log.text, "AUTO runs on the CPU");
        assert_null(strstr(first + 1, "AUTO runs on the CPU"));
        llmm_context_free(c);
        if (r->variant) assert_false(module_loaded(r->variant));

        /* CPU never looks */
        assert_int_equal(create(m, LLMM_BACKEND_CPU, &log, &c), LLMM_OK);
        assert_null(strstr(log.text, "module"));
        if (r->variant) assert_false(module_loaded(r->variant));
        llmm_context_free(c);
    }
    llmm_model_free(m);
}

/* A module that loads but cannot take the model (here: no weight type it computes; on a GPU
 * also no driver at init or too little device memory): CUDA fails with the backend's error,
 * AUTO tears it down and runs on the CPU, with one INFO line saying why. */
static void test_module_fails_at_init(void **state) {
    (void)state;
    llmm_model *m = load_model("stories260K.gguf", NULL);
    use_module("-no-types");
    log_capture log;
    llmm_context *c = NULL;
    assert_int_equal(create(m, LLMM_BACKEND_CUDA, &log, &c), LLMM_ERR_UNSUPPORTED);
    assert_null(c);
    char err[1024];
    assert_true(llmm_model_last_error(m, err, sizeof err) > 0);
    assert_contains(err, "which the test-module backend cannot compute");
    assert_false(module_loaded("-no-types"));

    assert_int_equal(create(m, LLMM_BACKEND_AUTO, &log, &c), LLMM_OK);
    assert_contains(log.text, "2 backend: AUTO runs on the CPU: the test-module backend failed: tensor '");
    assert_contains(log.text, "context: backend cpu,");
    assert_false(module_loaded("-no-types"));
    llmm_token want[N_GEN], got[N_GEN];
    greedy(c, got);
    llmm_context_free(c);
    assert_int_equal(create(m, LLMM_BACKEND_CPU, &log, &c), LLMM_OK);
    greedy(c, want);
    assert_memory_equal(want, got, sizeof want);
    llmm_context_free(c);
    llmm_model_free(m);
}

/* The estimates resolve the backend as creation does, and hold no module afterwards. */
static void test_module_estimates(void **state) {
    (void)state;
    llmm_model *m = load_model("stories260K.gguf", NULL);
    log_capture log = {.len = 0};
    llmm_context_params p = ctx_params(LLMM_BACKEND_CUDA, &log);
    llmm_context_memory mem = {.size = sizeof mem};
    use_module("");
    assert_int_equal(llmm_context_estimate_memory(m, &p, &mem), LLMM_OK);
    assert_true(mem.device_bytes > 0); /* the test module's buffers are "device" memory */
    assert_false(module_loaded(""));
    p.backend = LLMM_BACKEND_AUTO;
    llmm_context_memory aut = {.size = sizeof aut};
    assert_int_equal(llmm_context_estimate_memory(m, &p, &aut), LLMM_OK);
    assert_int_equal(aut.device_bytes, mem.device_bytes);
    size_t total = 0;
    assert_int_equal(llmm_context_estimate(m, &p, &total), LLMM_OK);
    assert_int_equal(total, mem.host_bytes + mem.device_bytes);

    use_module("-bad-version");
    p.backend = LLMM_BACKEND_CUDA;
    assert_int_equal(llmm_context_estimate_memory(m, &p, &mem), LLMM_ERR_BACKEND);
    char err[1024];
    assert_true(llmm_model_last_error(m, err, sizeof err) > 0);
    assert_contains(err, "has backend API version");
    p.backend = LLMM_BACKEND_AUTO;
    assert_int_equal(llmm_context_estimate_memory(m, &p, &aut), LLMM_OK);
    assert_int_equal(aut.device_bytes, 0);
    assert_false(module_loaded("-bad-version"));
    assert_int_equal(log.len, 0); /* estimates log nothing */
    llmm_model_free(m);
}

/* Without LLMM_CUDA_MODULE the module is looked for next to the core (this binary, which
 * links the static archive) and on the loader's path, where the tests put none. */
static void test_no_module_anywhere(void **state) {
    (void)state;
    assert_int_equal(unsetenv("LLMM_CUDA_MODULE"), 0);
    llmm_model *m = load_model("stories260K.gguf", NULL);
    log_capture log;
    llmm_context *c = NULL;
    const llmm_status st = create(m, LLMM_BACKEND_CUDA, &log, &c);
    if (st == LLMM_OK) { /* a real module is installed on this machine */
        llmm_context_free(c);
        llmm_model_free(m);
        skip();
    }
    assert_int_equal(st, LLMM_ERR_BACKEND);
    char err[1024], near[1100];
    assert_true(llmm_model_last_error(m, err, sizeof err) > 0);
    /* without the driver the module is not even looked for (backend_module.h) */
    void *driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
    const int have_driver = driver != NULL;
    if (have_driver) {
        dlclose(driver);
        module_path(near, sizeof near, "");
        strcpy(strrchr(near, '/'), "/libllmmini-cuda.so");
        assert_contains(err, "no CUDA module at ");
        assert_contains(err, near);
        assert_contains(err, "or on the loader's path (LLMM_CUDA_MODULE not set)");
    } else {
        assert_contains(err, "no CUDA driver (");
        assert_contains(err, "so the CUDA module is not loaded");
    }
    print_message("CUDA, no module: %s\n", err);
    assert_int_equal(create(m, LLMM_BACKEND_AUTO, &log, &c), LLMM_OK);
    assert_contains(log.text, have_driver ? "2 backend: AUTO runs on the CPU: no CUDA module at "
                                          : "2 backend: AUTO runs on the CPU: no CUDA driver (");
    llmm_context_free(c);
    llmm_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_module_runs_like_cpu),
        cmocka_unit_test(test_module_from_threads),
        cmocka_unit_test(test_module_refusals),
        cmocka_unit_test(test_module_fails_at_init),
        cmocka_unit_test(test_module_estimates),
        cmocka_unit_test(test_no_module_anywhere),
    };
    return cmocka_run_group_tests_name("backend_module", tests, NULL, NULL);
}
