/* The thread contract of include/llmmini.h under load: one model shared by eight threads, each
 * with its own context and sampler, generating a different prompt round after round for a few
 * seconds, must give the tokens of the same generations run one after another on one thread;
 * and contexts on one model created, used and freed by eight threads at once must all work.
 * `make tsan` (Makefile) runs this suite under ThreadSanitizer, which turns any data race these
 * runs reach into a failure. LLMM_CONCURRENCY_SECONDS sets each thread's time (default 2); at
 * least one round always runs, so a sanitizer build that is 10x slower still checks them all. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "llmmini.h"
#include "support/fixtures.h"

#define N_THREADS 8
#define MAX_NEW_TOKENS 48
#define CONTEXT_CYCLES 6

static const char *const prompts[N_THREADS] = {
    "Once upon a time",        "Tom had a",           "The little dog",  "Lily went to the park",
    "One day, a big", "Sam and his mom", "There was a cat who", "The sun was",
};

static double seconds_per_thread(void) {
    const char *s = getenv("LLMM_CONCURRENCY_SECONDS");
    const double v = s ? atof(s) : 2.0;
    return v > 0 ? v : 0;
}

/* One thread's own context: the library's own threads off (n_threads 1), so that eight of
 * these share the CPUs without spinning pools; tests/test_threadpool.c checks the pool itself. */
static llmm_status context_for_thread(llmm_model *m, llmm_context **out) {
    llmm_context_params p;
    llmm_context_params_default(&p, sizeof p);
    p.n_ctx = 128;
    p.n_threads = 1;
    return llmm_context_create(m, &p, out);
}

typedef struct generation {
    llmm_token tokens[MAX_NEW_TOKENS];
    size_t n;
    llmm_status status;
} generation;

/* Prompt i with its own seed, so that the eight threads sample differently too. */
static void generate(llmm_context *ctx, int i, generation *g) {
    llmm_sampler_params sp;
    llmm_sampler_params_default(&sp, sizeof sp);
    sp.seed = 1000 + (uint64_t)i;
    sp.temperature = 0.8f;
    llmm_generate_params gp;
    llmm_generate_params_default(&gp, sizeof gp);
    gp.max_tokens = MAX_NEW_TOKENS;
    gp.sampling = &sp;
    gp.out_tokens = g->tokens;
    gp.out_capacity = MAX_NEW_TOKENS;
    llmm_generate_stats stats = {.size = sizeof stats};
    memset(g->tokens, 0, sizeof g->tokens);
    g->status = llmm_generate(ctx, prompts[i], &gp, &stats);
    g->n = stats.n_generated;
}

typedef struct worker {
    llmm_model *model;
    int index;
    double seconds;
    const generation *expected;
    int rounds, mismatches;
    llmm_status status;
    char error[256];
} worker;

static void *generate_for_a_while(void *arg) {
    worker *w = arg;
    llmm_context *ctx = NULL;
    if ((w->status = context_for_thread(w->model, &ctx))) return NULL;
    const double end = now_s() + w->seconds;
    do {
        generation g;
        generate(ctx, w->index, &g);
        if ((w->status = g.status)) {
            snprintf(w->error, sizeof w->error, "%s", llmm_context_last_error(ctx));
            break;
        }
        w->rounds++;
        if (g.n != w->expected->n || memcmp(g.tokens, w->expected->tokens, sizeof g.tokens) != 0) w->mismatches++;
    } while (now_s() < end);
    llmm_context_free(ctx);
    return NULL;
}

static void check_shared_model(const char *model_rel) {
    llmm_model *m = load_model(model_rel, NULL);
    generation expected[N_THREADS];
    llmm_context *ctx = NULL;
    assert_int_equal(context_for_thread(m, &ctx), LLMM_OK);
    for (int i = 0; i < N_THREADS; i++) {
        generate(ctx, i, &expected[i]);
        assert_int_equal(expected[i].status, LLMM_OK);
        assert_true(expected[i].n > 0);
    }
    llmm_context_free(ctx);
    /* the prompts and seeds must make different texts, else equal results would prove less */
    assert_memory_not_equal(expected[0].tokens, expected[1].tokens, sizeof expected[0].tokens);

    worker w[N_THREADS];
    pthread_t th[N_THREADS];
    for (int i = 0; i < N_THREADS; i++) {
        w[i] = (worker){.model = m, .index = i, .seconds = seconds_per_thread(), .expected = &expected[i]};
        assert_int_equal(pthread_create(&th[i], NULL, generate_for_a_while, &w[i]), 0);
    }
    int rounds = 0;
    for (int i = 0; i < N_THREADS; i++) {
        assert_int_equal(pthread_join(th[i], NULL), 0);
        rounds += w[i].rounds;
    }
    for (int i = 0; i < N_THREADS; i++) {
        if (w[i].status) fail_msg("%s thread %d: %s: %s", model_rel, i, llmm_status_str(w[i].status), w[i].error);
        if (w[i].mismatches)
            fail_msg("%s thread %d: %d of %d rounds differ from the single-threaded run", model_rel, i,
                     w[i].mismatches, w[i].rounds);
    }
    print_message("%s: %d generations of up to %d tokens on %d threads, all equal to the single-threaded ones\n",
                  model_rel, rounds, MAX_NEW_TOKENS, N_THREADS);
    llmm_model_free(m);
}

static void test_eight_threads_share_a_model(void **state) {
    (void)state;
    check_shared_model("models/stories260K.gguf");
}

/* Q8_0 weights are repacked on first use by whichever context claims each one (cpu/ops/matmul.c),
 * so here eight threads race for the same claims. */
static void test_eight_threads_share_a_repacked_model(void **state) {
    (void)state;
    check_shared_model("models/stories260K-q8_0.gguf");
}

typedef struct cycler {
    llmm_model *model;
    int index;
    llmm_status status;
    float first_logit;
    int differed; /* a later cycle's logits differed from the first's */
} cycler;

/* Create a context, prefill the thread's prompt, keep the first logit, free; several times. */
static void *cycle_contexts(void *arg) {
    cycler *c = arg;
    llmm_token ids[64];
    size_t n = 0;
    const char *text = prompts[c->index];
    c->status = llmm_tokenize(c->model, text, strlen(text), LLMM_TOKENIZE_ADD_SPECIAL, ids, 64, &n);
    for (int k = 0; k < CONTEXT_CYCLES && !c->status; k++) {
        llmm_context *ctx = NULL;
        const float *logits = NULL;
        if ((c->status = context_for_thread(c->model, &ctx))) break;
        c->status = llmm_prefill(ctx, 0, ids, n, 0);
        if (!c->status) c->status = llmm_logits(ctx, 0, &logits, NULL);
        if (!c->status && k == 0) c->first_logit = logits[0];
        if (!c->status && logits[0] != c->first_logit) c->differed = 1;
        llmm_context_free(ctx);
    }
    return NULL;
}

static void test_contexts_created_and_freed_concurrently(void **state) {
    (void)state;
    llmm_model *m = load_model("models/stories260K-q8_0.gguf", NULL);
    cycler c[N_THREADS];
    pthread_t th[N_THREADS];
    for (int i = 0; i < N_THREADS; i++) {
        c[i] = (cycler){.model = m, .index = i};
        assert_int_equal(pthread_create(&th[i], NULL, cycle_contexts, &c[i]), 0);
    }
    for (int i = 0; i < N_THREADS; i++) assert_int_equal(pthread_join(th[i], NULL), 0);
    for (int i = 0; i < N_THREADS; i++) {
        if (c[i].status) fail_msg("thread %d: %s", i, llmm_status_str(c[i].status));
        if (c[i].differed) fail_msg("thread %d: the same prompt gave other logits in a later context", i);
        /* each thread ran its own prompt: a thread that read another's logits would show here */
        if (i > 0) assert_true(c[i].first_logit != c[0].first_logit);
    }
    llmm_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_eight_threads_share_a_model),
        cmocka_unit_test(test_eight_threads_share_a_repacked_model),
        cmocka_unit_test(test_contexts_created_and_freed_concurrently),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
