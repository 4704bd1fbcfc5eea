/* Recurrent state (lfm2's short convolutions, qwen35's Gated DeltaNet) through every sequence
 * operation: a prompt
 * fed whole, in chunks or token by token; forks; saved states; batches of sequences at mixed
 * positions; truncation, which the state serves only at a checkpoint; speculative decoding,
 * whose rejected guesses go back to the verify step's checkpoint; the prefix cache, which
 * stores the state at a cached prefix's end; the memory estimate. The reference is
 * always the same model run plainly on the same backend, so each case shows that an operation
 * keeps the state exactly as an uninterrupted run would. The suite runs for each model on the
 * CPU, then on the emulated CUDA module when it is built (build/libllmmini-cuda-emu.so, or
 * $LLMM_CUDA_EMU_MODULE), which moves the state with device copies. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llmmini.h"
#include "support/fixtures.h"

/* The models; one sequence's state in bytes (all three slots): lfm2 has 2 short-convolution
 * layers of (3 - 1) taps x 64 channels; qwen35 3 DeltaNet layers of (4 - 1) x 128 convolution
 * inputs and 4 heads of 16 x 16; the K and V of one position, F32, in the attention layers
 * alone (lfm2: 2 of 2 heads x 16, qwen35: 1 of 2 x 32); and a state of "Once upon a time"
 * saved by the library before the KV pool left out the recurrent layers (format 3, F32 KV). */
static const struct recurrent_model {
    const char *file;
    uint64_t state_bytes;
    uint64_t kv_position_bytes;
    const char *state_v3;
} models[] = {
    {"golden/arch/tiny-lfm2.gguf", 3ull * 2 * (3 - 1) * 64 * sizeof(float), 2ull * 2 * 2 * 16 * sizeof(float),
     "tests/data/saved_state/tiny-lfm2.once.v3"},
    {"golden/arch/tiny-qwen35.gguf", 3ull * 3 * ((4 - 1) * 128 + 4 * 16 * 16) * sizeof(float),
     2ull * 1 * 2 * 32 * sizeof(float), "tests/data/saved_state/tiny-qwen35.once.v3"},
};
static const struct recurrent_model *g_case;
#define N_STEPS 12
#define TOL 1e-4

static llmm_model *g_model;
static size_t g_vocab;
static llmm_backend_kind g_backend = LLMM_BACKEND_CPU; /* the backend of this pass */

static int setup(void **state) {
    (void)state;
    g_model = load_model(g_case->file, NULL);
    llmm_model_info info = {.size = sizeof info};
    if (llmm_model_get_info(g_model, &info) != LLMM_OK) return -1;
    g_vocab = info.n_vocab;
    return 0;
}

static int teardown(void **state) {
    (void)state;
    llmm_model_free(g_model);
    return 0;
}

/* The suite's contexts: F32 KV on the CPU, prompt steps of n_batch rows, n_seq sequences. */
static llmm_context_params params_with(uint32_t n_batch, uint32_t n_seq) {
    llmm_context_params cp;
    llmm_context_params_default(&cp, sizeof cp);
    cp.n_ctx = 128;
    cp.n_batch = n_batch;
    cp.n_seq_max = n_seq;
    cp.kv_type = LLMM_KV_F32;
    cp.backend = g_backend;
    return cp;
}

static llmm_context *context_with(uint32_t n_batch, uint32_t n_seq) {
    const llmm_context_params cp = params_with(n_batch, n_seq);
    return make_context(g_model, &cp);
}

/* A run's visible outcome: greedy tokens and the logits that chose each. */
typedef struct run {
    llmm_token tokens[N_STEPS];
    float *logits; /* (N_STEPS, n_vocab) */
} run;

static void run_init(run *r) { r->logits = calloc(N_STEPS * g_vocab, sizeof *r->logits); }

/* Row `row` of the last call's logits (llmm_logits) as step `step` of r. */
static void take_logits(llmm_context *c, size_t row, run *r, size_t step) {
    const float *lg;
    size_t n;
    assert_int_equal(llmm_logits(c, row, &lg, &n), LLMM_OK);
    assert_int_equal(n, g_vocab);
    memcpy(r->logits + step * g_vocab, lg, n * sizeof *lg);
    r->tokens[step] = argmax(lg, n);
}

/* Greedy steps of seq from the last call's logits (one row), each token decoded alone. */
static void continue_greedy(llmm_context *c, llmm_seq_id seq, run *r, size_t from) {
    for (size_t i = from; i < N_STEPS; i++) {
        take_logits(c, 0, r, i);
        if (i + 1 < N_STEPS) assert_int_equal(llmm_decode(c, &seq, &r->tokens[i], 1), LLMM_OK);
    }
}

static void assert_same_run(const run *a, const run *b, const char *what) {
    double worst = 0;
    for (size_t i = 0; i < N_STEPS * g_vocab; i++) worst = fmax(worst, fabs((double)a->logits[i] - b->logits[i]));
    print_message("%-34s max |logit diff| %.2e\n", what, worst);
    assert_memory_equal(a->tokens, b->tokens, sizeof a->tokens);
    assert_true(worst <= TOL);
}

static size_t prompt_ids(const char *text, llmm_token *ids, size_t cap) { return tokenize(g_model, text, ids, cap); }

/* The prompt in one prefill (n_batch 512) and the greedy continuation. */
static void plain_run(const llmm_token *ids, size_t n, run *r) {
    run_init(r);
    llmm_context *c = context_with(512, 1);
    assert_int_equal(llmm_prefill(c, 0, ids, n, 0), LLMM_OK);
    continue_greedy(c, 0, r, 0);
    llmm_context_free(c);
}

/* A prompt whole, in prefill steps of 3 rows and token by token; the long one spans several
 * of qwen35's DeltaNet chunks (16 rows) in one step. */
static void test_chunks_and_single_tokens(void **state) {
    (void)state;
    static const char *const prompts[] = {
        "Once upon a time there was a little dog",
        "Once upon a time there was a little dog named Max. Max liked to run in the park with a big red ball."};
    for (size_t pi = 0; pi < 2; pi++) {
        llmm_token ids[100]; /* with N_STEPS more, within n_ctx 128 */
        const size_t n = prompt_ids(prompts[pi], ids, 100);
        if (pi) assert_true(n > 32);
        run whole, chunks, single;
        plain_run(ids, n, &whole);
        run_init(&chunks);
        llmm_context *c = context_with(3, 1); /* prefill steps of 3 rows */
        assert_int_equal(llmm_prefill(c, 0, ids, n, 0), LLMM_OK);
        continue_greedy(c, 0, &chunks, 0);
        llmm_context_free(c);
        run_init(&single);
        c = context_with(512, 1);
        assert_int_equal(llmm_prefill(c, 0, ids, 1, 0), LLMM_OK);
        for (size_t i = 1; i < n; i++) {
            llmm_seq_id s = 0;
            assert_int_equal(llmm_decode(c, &s, &ids[i], 1), LLMM_OK);
        }
        continue_greedy(c, 0, &single, 0);
        llmm_context_free(c);
        assert_same_run(&whole, &chunks, pi ? "long prompt, prefill in chunks of 3" : "prefill in chunks of 3");
        assert_same_run(&whole, &single, pi ? "long prompt, token by token" : "prompt token by token");
        free(whole.logits), free(chunks.logits), free(single.logits);
    }
}

/* Fork after the prompt, then each branch takes its own next token: each equals a fresh run
 * of its whole text. */
static void test_fork_mid_sequence(void **state) {
    (void)state;
    llmm_token ids[64];
    const size_t n = prompt_ids("The little dog", ids, 63);
    const llmm_token branch_tok[2] = {ids[1], ids[2]};
    llmm_context *c = context_with(512, 2);
    assert_int_equal(llmm_prefill(c, 0, ids, n, 0), LLMM_OK);
    llmm_seq_id other;
    assert_int_equal(llmm_seq_fork(c, 0, &other), LLMM_OK);
    run forked[2], fresh[2];
    const llmm_seq_id seqs[2] = {0, other};
    for (int b = 0; b < 2; b++) run_init(&forked[b]);
    /* both branches' first tokens in one step, then each branch on its own */
    assert_int_equal(llmm_decode(c, seqs, branch_tok, 2), LLMM_OK);
    take_logits(c, 1, &forked[1], 0);
    take_logits(c, 0, &forked[0], 0);
    for (int b = 0; b < 2; b++) {
        llmm_seq_id s = seqs[b];
        assert_int_equal(llmm_decode(c, &s, &forked[b].tokens[0], 1), LLMM_OK);
        continue_greedy(c, seqs[b], &forked[b], 1);
    }
    llmm_context_free(c);
    for (int b = 0; b < 2; b++) {
        llmm_token whole[64];
        memcpy(whole, ids, n * sizeof *ids);
        whole[n] = branch_tok[b];
        plain_run(whole, n + 1, &fresh[b]);
        assert_same_run(&fresh[b], &forked[b], b ? "fork: the copy" : "fork: the original");
        free(fresh[b].logits), free(forked[b].logits);
    }
}

/* Continue seq of c, just loaded with the n tokens of plain's prompt, into restored. A loaded
 * state has no logits: plain's first greedy token is fed, so that both runs go on from the
 * same point (restored's step 0 is plain's). */
static void continue_loaded(llmm_context *c, llmm_seq_id seq, size_t n, const run *plain, run *restored) {
    run_init(restored);
    size_t len = 0;
    assert_int_equal(llmm_seq_length(c, seq, &len), LLMM_OK);
    assert_int_equal(len, n);
    assert_int_equal(llmm_decode(c, &seq, &plain->tokens[0], 1), LLMM_OK);
    continue_greedy(c, seq, restored, 1);
    memcpy(restored->logits, plain->logits, g_vocab * sizeof *plain->logits);
    restored->tokens[0] = plain->tokens[0];
}

/* Saved after the prompt, loaded into another context, continued: as if never interrupted. */
static void test_save_restore(void **state) {
    (void)state;
    llmm_token ids[64];
    const size_t n = prompt_ids("Once upon a time", ids, 64);
    run plain, restored;
    plain_run(ids, n, &plain);
    llmm_context *c = context_with(512, 1);
    assert_int_equal(llmm_prefill(c, 0, ids, n, 0), LLMM_OK);
    size_t need = 0;
    assert_int_equal(llmm_seq_save_buffer(c, 0, 0, NULL, 0, &need), LLMM_ERR_BUFFER_TOO_SMALL);
    unsigned char *buf = malloc(need);
    size_t used = 0;
    assert_int_equal(llmm_seq_save_buffer(c, 0, 0, buf, need, &used), LLMM_OK);
    llmm_context_free(c);
    c = context_with(512, 2);
    assert_int_equal(llmm_seq_load_buffer(c, 1, buf, used), LLMM_OK);
    continue_loaded(c, 1, n, &plain, &restored);
    assert_same_run(&plain, &restored, "saved, loaded, continued");
    llmm_context_free(c);
    free(buf);
    free(plain.logits), free(restored.logits);
}

/* A state saved before the KV pool kept rows for the attention layers alone (its payload has
 * zero rows for the recurrent layers, as the format still has) loads and continues as the
 * uninterrupted run. */
static void test_loads_state_saved_before(void **state) {
    (void)state;
    llmm_token ids[64];
    const size_t n = prompt_ids("Once upon a time", ids, 64);
    run plain, restored;
    plain_run(ids, n, &plain);
    llmm_context *c = context_with(512, 2);
    const llmm_status st = llmm_seq_load(c, 1, g_case->state_v3);
    if (st != LLMM_OK) fail_msg("%s: %s", g_case->state_v3, llmm_context_last_error(c));
    continue_loaded(c, 1, n, &plain, &restored);
    assert_same_run(&plain, &restored, "format 3 file loaded, continued");
    llmm_context_free(c);
    free(plain.logits), free(restored.logits);
}

/* The KV pool holds rows for the attention layers only: its size per position, and the
 * context's block size, are those of the attention layers' K and V. */
static void test_kv_pool_attention_layers_only(void **state) {
    (void)state;
    llmm_context_params cp = params_with(512, 1);
    cp.n_ctx_total = 256;
    llmm_context_memory mem = {.size = sizeof mem};
    assert_int_equal(llmm_context_estimate_memory(g_model, &cp, &mem), LLMM_OK);
    assert_int_equal(mem.kv_pool_bytes - g_case->state_bytes, 256 * g_case->kv_position_bytes);
    llmm_context *c = make_context(g_model, &cp);
    llmm_context_stats stats = {.size = sizeof stats};
    assert_int_equal(llmm_context_get_stats(c, &stats), LLMM_OK);
    assert_int_equal(stats.block_bytes, (uint64_t)stats.block_size * g_case->kv_position_bytes);
    llmm_context_free(c);
}

/* Six sequences of different prompt lengths decoded in one batch per step: each row equals
 * its sequence run alone. */
static void test_six_sequences_batched(void **state) {
    (void)state;
    static const char *const prompts[6] = {"Once", "The little dog", "Once upon a time", "A cat sat",
                                           "There was a big red ball and", "Lily"};
    enum { N = 6 };
    run alone[N], batched[N];
    llmm_context *c = context_with(512, N);
    llmm_seq_id seqs[N];
    for (int i = 0; i < N; i++) {
        llmm_token ids[64];
        const size_t n = prompt_ids(prompts[i], ids, 64);
        plain_run(ids, n, &alone[i]);
        run_init(&batched[i]);
        seqs[i] = i;
        assert_int_equal(llmm_prefill(c, i, ids, n, 0), LLMM_OK);
        take_logits(c, 0, &batched[i], 0);
    }
    for (size_t step = 1; step < N_STEPS; step++) {
        llmm_token next[N];
        for (int i = 0; i < N; i++) next[i] = batched[i].tokens[step - 1];
        assert_int_equal(llmm_decode(c, seqs, next, N), LLMM_OK);
        for (int i = 0; i < N; i++) take_logits(c, i, &batched[i], step);
    }
    for (int i = 0; i < N; i++) {
        assert_same_run(&alone[i], &batched[i], prompts[i]);
        free(alone[i].logits), free(batched[i].logits);
    }
    llmm_context_free(c);
}

/* Going back to an earlier position is refused with UNSUPPORTED and changes nothing; clearing
 * (back to 0) is allowed and the sequence then runs as new. */
static void test_truncate_refused(void **state) {
    (void)state;
    llmm_token ids[64];
    const size_t n = prompt_ids("Once upon a time", ids, 64);
    run plain, after;
    plain_run(ids, n, &plain);
    run_init(&after);
    llmm_context *c = context_with(512, 1);
    assert_int_equal(llmm_prefill(c, 0, ids, n, 0), LLMM_OK);
    assert_int_equal(llmm_seq_truncate(c, 0, n - 2), LLMM_ERR_UNSUPPORTED);
    assert_non_null(strstr(llmm_context_last_error(c), "recurrent state"));
    size_t len = 0;
    assert_int_equal(llmm_seq_length(c, 0, &len), LLMM_OK);
    assert_int_equal(len, n);
    assert_int_equal(llmm_seq_truncate(c, 0, n), LLMM_OK); /* keeping everything is no change */
    continue_greedy(c, 0, &after, 0);
    assert_same_run(&plain, &after, "after a refused truncation");
    assert_int_equal(llmm_seq_clear(c, 0), LLMM_OK);
    memset(after.tokens, 0, sizeof after.tokens);
    assert_int_equal(llmm_prefill(c, 0, ids, n, 0), LLMM_OK);
    continue_greedy(c, 0, &after, 0);
    assert_same_run(&plain, &after, "cleared, then run again");
    llmm_context_free(c);
    free(plain.logits), free(after.logits);
}

static int abort_after(void *user) {
    int *left = user;
    return (*left)-- <= 0;
}

/* A prefill aborted midway (after its first chunk and a layer of the second) leaves the
 * sequence as it was, recurrent state included: the same prefill then runs as if alone. */
static void test_failed_step_changes_nothing(void **state) {
    (void)state;
    llmm_token ids[64];
    const size_t n = prompt_ids("Once upon a time there was a little dog", ids, 64);
    const size_t head = 3;
    run plain, again;
    plain_run(ids, n, &plain);
    run_init(&again);
    int left = 1000;
    llmm_context_params cp = params_with(4, 1);
    cp.abort = abort_after;
    cp.abort_user = &left;
    llmm_context *c = make_context(g_model, &cp);
    assert_int_equal(llmm_prefill(c, 0, ids, head, 0), LLMM_OK);
    left = 6; /* the first chunk's 4 layers, then 2 of the second's */
    assert_int_equal(llmm_prefill(c, 0, ids + head, n - head, 0), LLMM_ERR_ABORTED);
    size_t len = 0;
    assert_int_equal(llmm_seq_length(c, 0, &len), LLMM_OK);
    assert_int_equal(len, head);
    left = 1000;
    assert_int_equal(llmm_prefill(c, 0, ids + head, n - head, 0), LLMM_OK);
    continue_greedy(c, 0, &again, 0);
    assert_same_run(&plain, &again, "after an aborted prefill");
    llmm_context_free(c);
    free(plain.logits), free(again.logits);
}

/* With the prefix cache on, the first prompt stores the state at the end of its last full
 * block; the same prompt again and a longer one starting with it then attach the cached blocks
 * and that state, and each equals a cold run without the cache. */
static void test_prefix_cache_hit(void **state) {
    (void)state;
    static const char *const prompts[3] = {"Once upon a time there was a little dog",
                                           "Once upon a time there was a little dog and a big red ball",
                                           "Once upon a time there was a little dog"};
    llmm_context_params cp = params_with(512, 2);
    cp.kv_block_size = 4;
    cp.prefix_cache = 1;
    llmm_context *c = make_context(g_model, &cp);
    uint64_t hits_before = 0;
    for (int i = 0; i < 3; i++) {
        llmm_token ids[64];
        const size_t n = prompt_ids(prompts[i], ids, 64);
        run cold, cached;
        plain_run(ids, n, &cold);
        run_init(&cached);
        const llmm_seq_id seq = i % 2;
        assert_int_equal(llmm_seq_clear(c, seq), LLMM_OK);
        assert_int_equal(llmm_prefill(c, seq, ids, n, 0), LLMM_OK);
        continue_greedy(c, seq, &cached, 0);
        llmm_context_stats st = {.size = sizeof st};
        assert_int_equal(llmm_context_get_stats(c, &st), LLMM_OK);
        print_message("prompt %d: %llu tokens from the prefix cache\n", i,
                      (unsigned long long)(st.prefix_hits - hits_before));
        if (i == 0) assert_int_equal(st.prefix_hits, 0);
        else assert_true(st.prefix_hits >= hits_before + 4);
        hits_before = st.prefix_hits;
        assert_same_run(&cold, &cached, i ? "prefix cache hit" : "prefix cache, first prompt");
        free(cold.logits), free(cached.logits);
    }
    llmm_context_free(c);
}

/* A prompt run plainly (the reference), and a context holding the prompt in sequence 0 with a
 * speculator without proposer over it (the test makes the guesses) and a greedy sampler. */
typedef struct spec_rig {
    llmm_token ids[64];
    size_t n;
    run plain;
    llmm_context *c;
    llmm_speculator *s;
    llmm_sampler *smp;
} spec_rig;

static void rig_open(spec_rig *r, const char *prompt) {
    r->n = prompt_ids(prompt, r->ids, 64);
    plain_run(r->ids, r->n, &r->plain);
    r->c = context_with(512, 1);
    assert_int_equal(llmm_speculator_create(r->c, NULL, &r->s), LLMM_OK);
    r->smp = greedy_sampler();
    assert_int_equal(llmm_prefill(r->c, 0, r->ids, r->n, 0), LLMM_OK);
}

static void rig_close(spec_rig *r) {
    llmm_sampler_free(r->smp);
    llmm_speculator_free(r->s);
    llmm_context_free(r->c);
    free(r->plain.logits);
}

/* Verify rounds over plain decoding's own tokens with one guess spoiled (a different place each
 * round, or none): each round keeps exactly the guesses before the spoiled one, and the state
 * after it is the plain run's, so the step after the last round has the plain run's logits. */
static void test_verify_rejects_guesses(void **state) {
    (void)state;
    enum { K = 3 };
    spec_rig rig;
    rig_open(&rig, "Once upon a time there was");
    llmm_context *c = rig.c;
    const run plain = rig.plain;
    const size_t n = rig.n;
    run spec;
    run_init(&spec);
    size_t i = 0, kept_all = 0, rejected = 0; /* plain.tokens[i] is the pending token */
    for (size_t round = 0; i + 1 + K < N_STEPS; round++) {
        const size_t spoil = round % (K + 1); /* K: nothing spoiled */
        llmm_token guess[K], out[K + 1];
        for (size_t j = 0; j < K; j++) guess[j] = plain.tokens[i + 1 + j];
        if (spoil < K) guess[spoil] = (guess[spoil] + 1) % (llmm_token)g_vocab;
        const llmm_spec_item item = {.seq = 0, .pending = plain.tokens[i], .draft = guess, .n_draft = K};
        assert_int_equal(llmm_speculator_verify(rig.s, &item, 1), LLMM_OK);
        size_t n_out = 0;
        assert_int_equal(llmm_speculator_accept(rig.s, 0, rig.smp, out, K + 1, &n_out), LLMM_OK);
        assert_int_equal(n_out, spoil + 1);
        for (size_t j = 0; j < n_out; j++) assert_int_equal(out[j], plain.tokens[i + 1 + j]);
        i += n_out;
        size_t len = 0;
        assert_int_equal(llmm_seq_length(c, 0, &len), LLMM_OK);
        assert_int_equal(len, n + i);
        kept_all += spoil == K;
        rejected += spoil < K;
    }
    assert_true(kept_all > 0 && rejected > 0);
    llmm_seq_id seq = 0;
    assert_int_equal(llmm_decode(c, &seq, &plain.tokens[i], 1), LLMM_OK);
    /* the remaining steps decoded plainly; the rounds' steps take the plain run's rows */
    continue_greedy(c, 0, &spec, i + 1);
    memcpy(spec.logits, plain.logits, (i + 1) * g_vocab * sizeof *plain.logits);
    memcpy(spec.tokens, plain.tokens, (i + 1) * sizeof *plain.tokens);
    assert_same_run(&plain, &spec, "verify rounds, guesses rejected");
    rig_close(&rig);
    free(spec.logits);
}

/* Two sequences in one verify step, each with a guess spoiled at another place: accepting the
 * first computes its kept tokens again, which must leave the second's rows of the step as they
 * were; both then continue as their plain runs. */
static void test_batch_verify_two_sequences(void **state) {
    (void)state;
    enum { K = 3, N = 2 };
    static const char *const prompts[N] = {"Once upon a time", "The little dog"};
    llmm_context *c = context_with(512, N);
    llmm_speculator *s = NULL;
    assert_int_equal(llmm_speculator_create(c, NULL, &s), LLMM_OK);
    llmm_sampler *smp = greedy_sampler();
    run plain[N], spec[N];
    llmm_token guess[N][K];
    llmm_spec_item items[N];
    for (int i = 0; i < N; i++) {
        llmm_token ids[64];
        const size_t n = prompt_ids(prompts[i], ids, 64);
        plain_run(ids, n, &plain[i]);
        run_init(&spec[i]);
        assert_int_equal(llmm_prefill(c, i, ids, n, 0), LLMM_OK);
        for (size_t j = 0; j < K; j++) guess[i][j] = plain[i].tokens[1 + j];
        guess[i][i] = (guess[i][i] + 1) % (llmm_token)g_vocab; /* item i keeps i guesses */
        items[i] = (llmm_spec_item){.seq = i, .pending = plain[i].tokens[0], .draft = guess[i], .n_draft = K};
    }
    assert_int_equal(llmm_speculator_verify(s, items, N), LLMM_OK);
    for (int i = 0; i < N; i++) {
        llmm_token out[K + 1];
        size_t n_out = 0;
        assert_int_equal(llmm_speculator_accept(s, (size_t)i, smp, out, K + 1, &n_out), LLMM_OK);
        assert_int_equal(n_out, (size_t)i + 1);
        for (size_t j = 0; j < n_out; j++) assert_int_equal(out[j], plain[i].tokens[1 + j]);
    }
    for (int i = 0; i < N; i++) {
        const size_t next = (size_t)i + 1; /* plain[i].tokens[next] is the pending token */
        llmm_seq_id seq = i;
        assert_int_equal(llmm_decode(c, &seq, &plain[i].tokens[next], 1), LLMM_OK);
        continue_greedy(c, i, &spec[i], next + 1);
        memcpy(spec[i].logits, plain[i].logits, (next + 1) * g_vocab * sizeof *plain[i].logits);
        memcpy(spec[i].tokens, plain[i].tokens, (next + 1) * sizeof *plain[i].tokens);
        assert_same_run(&plain[i], &spec[i], prompts[i]);
        free(plain[i].logits), free(spec[i].logits);
    }
    llmm_sampler_free(smp);
    llmm_speculator_free(s);
    llmm_context_free(c);
}

/* A verify step leaves a checkpoint where it began: truncating to it succeeds and the sequence
 * continues as if the round never ran; any other earlier position stays refused. */
static void test_truncate_to_checkpoint(void **state) {
    (void)state;
    spec_rig rig;
    rig_open(&rig, "Once upon a time");
    llmm_context *c = rig.c;
    const run plain = rig.plain;
    const size_t n = rig.n;
    run after;
    run_init(&after);
    const llmm_token guess[2] = {plain.tokens[1], plain.tokens[2]};
    const llmm_spec_item item = {.seq = 0, .pending = plain.tokens[0], .draft = guess, .n_draft = 2};
    assert_int_equal(llmm_speculator_verify(rig.s, &item, 1), LLMM_OK);
    llmm_token out[3];
    size_t n_out = 0;
    assert_int_equal(llmm_speculator_accept(rig.s, 0, rig.smp, out, 3, &n_out), LLMM_OK);
    llmm_seq_id seq = 0;
    assert_int_equal(llmm_decode(c, &seq, &out[n_out - 1], 1), LLMM_OK); /* the checkpoint stays */
    size_t len = 0;
    assert_int_equal(llmm_seq_length(c, 0, &len), LLMM_OK);
    assert_int_equal(len, n + n_out + 1);
    assert_int_equal(llmm_seq_truncate(c, 0, n + 1), LLMM_ERR_UNSUPPORTED);
    assert_non_null(strstr(llmm_context_last_error(c), "checkpoint"));
    assert_int_equal(llmm_seq_truncate(c, 0, n), LLMM_OK);
    assert_int_equal(llmm_seq_length(c, 0, &len), LLMM_OK);
    assert_int_equal(len, n);
    assert_int_equal(llmm_decode(c, &seq, &plain.tokens[0], 1), LLMM_OK);
    continue_greedy(c, 0, &after, 1);
    memcpy(after.logits, plain.logits, g_vocab * sizeof *plain.logits);
    after.tokens[0] = plain.tokens[0];
    assert_same_run(&plain, &after, "truncated to the checkpoint");
    /* cleared: the checkpoint is gone with the tokens before it */
    assert_int_equal(llmm_seq_clear(c, 0), LLMM_OK);
    assert_int_equal(llmm_prefill(c, 0, rig.ids, n, 0), LLMM_OK);
    assert_int_equal(llmm_decode(c, &seq, &plain.tokens[0], 1), LLMM_OK);
    assert_int_equal(llmm_seq_truncate(c, 0, n), LLMM_ERR_UNSUPPORTED);
    rig_close(&rig);
    free(after.logits);
}

/* llmm_generate with prompt lookup, with the model as its own draft and with the other hybrid
 * (same vocabulary) as draft gives plain decoding's greedy tokens, for several draft lengths,
 * and leaves the sequence as long as plain's. The other hybrid's guesses are often wrong, so
 * the draft's own sequence goes back through its checkpoint too. */
static void test_speculative_generate_identical(void **state) {
    (void)state;
    enum { N_GEN = 24, N_PROPOSERS = 3 };
    static const char *const prompts[] = {"Once upon a time", "The little dog"};
    static const char *const names[N_PROPOSERS] = {"prompt lookup", "self-draft", "other hybrid as draft"};
    llmm_model *other = load_model(g_case == &models[0] ? models[1].file : models[0].file, NULL);
    const llmm_model *drafts[N_PROPOSERS] = {NULL, g_model, other};
    llmm_context *c = context_with(512, 1);
    uint64_t proposed[N_PROPOSERS] = {0}, accepted[N_PROPOSERS] = {0};
    for (size_t pi = 0; pi < 2; pi++) {
        llmm_token plain[N_GEN], spec[N_GEN];
        llmm_generate_stats ps = {.size = sizeof ps};
        const size_t n = generate_greedy(c, prompts[pi], plain, N_GEN, &ps);
        size_t plain_len = 0, spec_len = 0;
        assert_int_equal(llmm_seq_length(c, 0, &plain_len), LLMM_OK);
        for (int pr = 0; pr < N_PROPOSERS; pr++) {
            for (int32_t k = 2; k <= 4; k += 2) {
                llmm_sampler_params sp;
                llmm_generate_params gp = greedy_params(&sp, spec, N_GEN);
                gp.spec_max_tokens = k;
                gp.spec_draft_model = drafts[pr];
                gp.spec_ngram = drafts[pr] ? 0 : 2;
                llmm_generate_stats ss = {.size = sizeof ss};
                if (llmm_generate(c, prompts[pi], &gp, &ss)) fail_msg("llmm_generate: %s", llmm_context_last_error(c));
                assert_int_equal(ss.n_generated, n);
                for (size_t t = 0; t < n; t++)
                    if (spec[t] != plain[t])
                        fail_msg("'%s' %s k %d: token %zu is %d, plain %d", prompts[pi], names[pr], k, t, spec[t], plain[t]);
                assert_int_equal(llmm_seq_length(c, 0, &spec_len), LLMM_OK);
                assert_int_equal(spec_len, plain_len);
                proposed[pr] += ss.spec_proposed;
                accepted[pr] += ss.spec_accepted;
            }
        }
    }
    for (int pr = 0; pr < N_PROPOSERS; pr++)
        print_message("%s kept %llu of %llu guesses\n", names[pr], (unsigned long long)accepted[pr],
                      (unsigned long long)proposed[pr]);
    /* lookup's and the other model's guesses are mostly wrong: rejected rounds are exercised */
    assert_true(proposed[0] > accepted[0] && proposed[1] > 0 && proposed[2] > accepted[2]);
    llmm_context_free(c);
    llmm_model_free(other);
}

/* The state slots are counted: three per sequence id (live, the copy a failed step restores,
 * the checkpoint), each the model's state (models[]), and a fourth with the prefix cache. */
static void test_memory_estimate_counts_state(void **state) {
    (void)state;
    llmm_context_params cp = params_with(512, 1);
    cp.n_ctx_total = 256;
    llmm_context_memory one = {.size = sizeof one}, four = {.size = sizeof four};
    cp.n_seq_max = 1;
    assert_int_equal(llmm_context_estimate_memory(g_model, &cp, &one), LLMM_OK);
    cp.n_seq_max = 4;
    assert_int_equal(llmm_context_estimate_memory(g_model, &cp, &four), LLMM_OK);
    assert_int_equal(four.kv_pool_bytes - one.kv_pool_bytes, 3 * g_case->state_bytes);
    /* the prefix cache adds one slot per sequence id for the cached prefixes' states */
    llmm_context_memory cached = {.size = sizeof cached};
    cp.prefix_cache = 1;
    assert_int_equal(llmm_context_estimate_memory(g_model, &cp, &cached), LLMM_OK);
    assert_int_equal(cached.kv_pool_bytes - four.kv_pool_bytes, 4 * g_case->state_bytes / 3);
}

int main(int argc, char **argv) {
    (void)argc;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chunks_and_single_tokens),
        cmocka_unit_test(test_fork_mid_sequence),
        cmocka_unit_test(test_save_restore),
        cmocka_unit_test(test_loads_state_saved_before),
        cmocka_unit_test(test_kv_pool_attention_layers_only),
        cmocka_unit_test(test_six_sequences_batched),
        cmocka_unit_test(test_truncate_refused),
        cmocka_unit_test(test_failed_step_changes_nothing),
        cmocka_unit_test(test_prefix_cache_hit),
        cmocka_unit_test(test_verify_rejects_guesses),
        cmocka_unit_test(test_batch_verify_two_sequences),
        cmocka_unit_test(test_truncate_to_checkpoint),
        cmocka_unit_test(test_speculative_generate_identical),
        cmocka_unit_test(test_memory_estimate_counts_state),
    };
    char module[1024];
    const int have_cuda = emulated_cuda_module(argv[0], module, sizeof module);
    if (have_cuda) setenv("LLMM_CUDA_MODULE", module, 1);
    else printf("recurrent state on CUDA: skipped, no emulated module at %s\n", module);
    int failed = 0;
    for (size_t m = 0; m < sizeof models / sizeof *models; m++) {
        g_case = &models[m];
        g_backend = LLMM_BACKEND_CPU;
        printf("%s on the CPU\n", g_case->file);
        failed += cmocka_run_group_tests_name("recurrent state, cpu", tests, setup, teardown);
        if (!have_cuda) continue;
        g_backend = LLMM_BACKEND_CUDA;
        printf("%s on the emulated CUDA module\n", g_case->file);
        failed += cmocka_run_group_tests_name("recurrent state, cuda-emu", tests, setup, teardown);
    }
    return failed;
}
