#include "support/fixtures.h"

#include <stdarg.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>
#include <time.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "support/shared_data.h"

llmm_model *load_model(const char *name, const llmm_model_params *params) {
    char path[1024], err[512] = "";
    llmm_model_params p;
    if (params) p = *params;
    else llmm_model_params_default(&p, sizeof p);
    if (!p.error_buf) {
        p.error_buf = err;
        p.error_buf_size = sizeof err;
    }
    char root[1024];
    shared_path(root, sizeof root, ""); /* the folder, with its slash */
    if (name[0] == '/' || name[0] == '.' || strncmp(name, root, strlen(root)) == 0) {
        snprintf(path, sizeof path, "%s", name);
    } else {
        char rel[512];
        snprintf(rel, sizeof rel, "%s%s", strchr(name, '/') ? "" : "models/", name);
        shared_path(path, sizeof path, rel);
    }
    llmm_model *m = NULL;
    const llmm_status st = llmm_model_load(path, &p, &m);
    if (st != LLMM_OK) fail_msg("load %s: %s: %s", path, llmm_status_str(st), p.error_buf);
    return m;
}

llmm_model *load_vocab(const char *name) {
    llmm_model_params p;
    llmm_model_params_default(&p, sizeof p);
    p.vocab_only = 1;
    return load_model(name, &p);
}

llmm_context *make_context(const llmm_model *m, const llmm_context_params *p) {
    llmm_context *c = NULL;
    const llmm_status st = llmm_context_create(m, p, &c);
    if (st != LLMM_OK) {
        char msg[512] = "";
        llmm_model_last_error(m, msg, sizeof msg);
        fail_msg("llmm_context_create on backend %d: %s: %s", p ? (int)p->backend : -1, llmm_status_str(st), msg);
    }
    return c;
}

size_t tokenize_flags(const llmm_model *m, const char *text, size_t len, uint32_t flags, llmm_token *ids,
                      size_t cap) {
    size_t n = 0;
    assert_int_equal(llmm_tokenize(m, text, len, flags, ids, cap, &n), LLMM_OK);
    return n;
}

size_t tokenize(const llmm_model *m, const char *text, llmm_token *ids, size_t cap) {
    return tokenize_flags(m, text, strlen(text), LLMM_TOKENIZE_ADD_SPECIAL, ids, cap);
}

llmm_sampler_params plain_sampling(float temperature, uint64_t seed) {
    llmm_sampler_params p;
    llmm_sampler_params_default(&p, sizeof p);
    p.temperature = temperature;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.seed = seed;
    return p;
}

llmm_generate_params greedy_params(llmm_sampler_params *sp, llmm_token *out, size_t max_tokens) {
    llmm_sampler_params_default(sp, sizeof *sp);
    sp->temperature = 0;
    llmm_generate_params gp;
    llmm_generate_params_default(&gp, sizeof gp);
    gp.sampling = sp;
    gp.max_tokens = (int32_t)max_tokens;
    gp.out_tokens = out;
    gp.out_capacity = max_tokens;
    return gp;
}

llmm_sampler *greedy_sampler(void) {
    llmm_sampler_params sp;
    llmm_sampler_params_default(&sp, sizeof sp);
    sp.temperature = 0;
    llmm_sampler *smp = NULL;
    assert_int_equal(llmm_sampler_create(&sp, &smp), LLMM_OK);
    return smp;
}

size_t generate_greedy(llmm_context *c, const char *prompt, llmm_token *out, size_t max_tokens,
                       llmm_generate_stats *stats) {
    llmm_sampler_params sp;
    const llmm_generate_params gp = greedy_params(&sp, out, max_tokens);
    llmm_generate_stats st = {.size = sizeof st};
    const llmm_status status = llmm_generate(c, prompt, &gp, &st);
    if (status != LLMM_OK) fail_msg("llmm_generate: %s: %s", llmm_status_str(status), llmm_context_last_error(c));
    if (stats) *stats = st;
    return st.n_generated;
}

llmm_token argmax(const float *v, size_t n) {
    size_t best = 0;
    for (size_t i = 1; i < n; i++)
        if (v[i] > v[best]) best = i;
    return (llmm_token)best;
}

int emulated_cuda_module(const char *argv0, char *path, size_t cap) {
    const char *env = getenv("LLMM_CUDA_EMU_MODULE");
    if (env && *env) {
        snprintf(path, cap, "%s", env);
    } else {
        const char *slash = strrchr(argv0, '/');
        snprintf(path, cap, "%.*s/../libllmmini-cuda-emu.so", slash ? (int)(slash - argv0) : 1, slash ? argv0 : ".");
    }
    return access(path, R_OK) == 0;
}

void build_tool_path(const char *argv0, const char *tool, char *path, size_t cap) {
    const char *slash = strrchr(argv0, '/');
    if (slash) snprintf(path, cap, "%.*s/../%s", (int)(slash - argv0), argv0, tool);
    else snprintf(path, cap, "build/tests/../%s", tool);
}

void synth_model(const char *synth_tool, const char *out_path, const char *options, const char *vocab_rel) {
    char vocab[1024], cmd[4096];
    shared_path(vocab, sizeof vocab, vocab_rel);
    const char *runner = getenv("TEST_RUNNER");
    snprintf(cmd, sizeof cmd, "%s '%s' -o '%s' %s --vocab '%s' 2>/dev/null", runner ? runner : "", synth_tool, out_path,
             options, vocab);
    int rc = system(cmd);
    assert_true(rc != -1 && WIFEXITED(rc) && WEXITSTATUS(rc) == 0);
}

double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
