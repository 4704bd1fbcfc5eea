/* Sampler: greedy, truncation, penalties, RNG reproducibility and distribution. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llmmini.h"
#include "support/alloc_hooks.h"
#include "support/fixtures.h"
#include "support/rng.h"
#include "sampling/sampler.h"


static llmm_sampler *make(const llmm_sampler_params *p) {
    llmm_sampler *s = NULL;
    assert_int_equal(llmm_sampler_create(p, &s), LLMM_OK);
    assert_non_null(s);
    return s;
}

static llmm_token sample_one(llmm_sampler *s, const float *logits, size_t n) {
    llmm_token t = -1;
    assert_int_equal(llmm_sample(s, logits, n, &t), LLMM_OK);
    assert_true(t >= 0 && (size_t)t < n);
    return t;
}

static llmm_token greedy_of(const llmm_sampler_params *base, const float *logits, size_t n,
                            const llmm_token *accepted, size_t n_accepted) {
    llmm_sampler_params p = *base;
    p.temperature = 0;
    llmm_sampler *s = make(&p);
    for (size_t i = 0; i < n_accepted; i++) assert_int_equal(llmm_sampler_accept(s, accepted[i]), LLMM_OK);
    llmm_token t = sample_one(s, logits, n);
    llmm_sampler_free(s);
    return t;
}

static void softmax(const float *logits, size_t n, double temperature, double *p) {
    double max = logits[0], sum = 0;
    for (size_t i = 1; i < n; i++) max = logits[i] > max ? logits[i] : max;
    for (size_t i = 0; i < n; i++) sum += p[i] = exp(((double)logits[i] - max) / temperature);
    for (size_t i = 0; i < n; i++) p[i] /= sum;
}

static const float FIXED8[8] = {0.5f, -1.25f, 2.0f, 1.0f, 0.0f, -0.5f, 1.5f, 0.25f};

/* ---------------------------------------------------------------- greedy */

static void test_greedy_is_argmax_lowest_id(void **state) {
    (void)state;
    llmm_sampler_params p = plain_sampling(0, 0);
    const float ties[] = {1.0f, 3.0f, -2.0f, 3.0f, 2.9f};
    assert_int_equal(greedy_of(&p, ties, ARRAY_LEN(ties), NULL, 0), 1);
    const float masked[] = {-INFINITY, 1.0f, -INFINITY, 1.5f, -INFINITY};
    assert_int_equal(greedy_of(&p, masked, ARRAY_LEN(masked), NULL, 0), 3);
    const float huge[] = {1.0f, FLT_MAX, 1e30f, FLT_MAX};
    assert_int_equal(greedy_of(&p, huge, ARRAY_LEN(huge), NULL, 0), 1);
    const float one[] = {-7.0f};
    assert_int_equal(greedy_of(&p, one, 1, NULL, 0), 0);
}

static void test_logits_not_modified(void **state) {
    (void)state;
    float logits[64], copy[64];
    test_rng x = rng_seeded(5); /* the data, independent of the library's RNG */
    for (size_t i = 0; i < 64; i++) logits[i] = (float)rng_below(&x, 1000) / 100.0f - 5.0f;
    logits[3] = -INFINITY;
    logits[9] = 1e30f;
    memcpy(copy, logits, sizeof logits);
    llmm_sampler_params p;
    llmm_sampler_params_default(&p, sizeof p);
    p.repeat_penalty = 1.3f;
    p.frequency_penalty = 0.2f;
    p.presence_penalty = 0.1f;
    llmm_sampler *s = make(&p);
    for (int i = 0; i < 20; i++) {
        llmm_token t = sample_one(s, logits, 64);
        assert_int_equal(llmm_sampler_accept(s, t), LLMM_OK);
        assert_memory_equal(logits, copy, sizeof logits);
    }
    llmm_sampler_free(s);
}

/* ---------------------------------------------------------------- truncation */

static void test_top_k_1_is_greedy(void **state) {
    (void)state;
    const float temps[] = {0.01f, 0.5f, 1.0f, 3.0f, 100.0f};
    test_rng x = rng_seeded(11);
    float logits[200];
    for (int round = 0; round < 20; round++) {
        /* coarse values make ties common, so the lowest-id rule is exercised too */
        for (size_t i = 0; i < ARRAY_LEN(logits); i++) logits[i] = (float)rng_below(&x, 16);
        llmm_sampler_params g = plain_sampling(0, 0);
        llmm_token want = greedy_of(&g, logits, ARRAY_LEN(logits), NULL, 0);
        for (size_t t = 0; t < ARRAY_LEN(temps); t++) {
            llmm_sampler_params p = plain_sampling(temps[t], (uint64_t)round);
            p.top_k = 1;
            llmm_sampler *s = make(&p);
            for (int i = 0; i < 5; i++) assert_int_equal(sample_one(s, logits, ARRAY_LEN(logits)), want);
            llmm_sampler_free(s);
        }
    }
}

/* Logits whose softmax is exactly the given probabilities. */
static void logits_from_probs(const double *probs, size_t n, float *logits) {
    for (size_t i = 0; i < n; i++) logits[i] = (float)log(probs[i]);
}

/* Draw n_draws times and count how often each token came. */
static void histogram(const llmm_sampler_params *p, const float *logits, size_t n, int n_draws,
                      int *counts) {
    llmm_sampler *s = make(p);
    memset(counts, 0, n * sizeof *counts);
    for (int i = 0; i < n_draws; i++) counts[sample_one(s, logits, n)]++;
    llmm_sampler_free(s);
}

static void test_top_p_excludes_tail(void **state) {
    (void)state;
    const double probs[] = {0.3, 0.5, 0.05, 0.15};
    float logits[4];
    int counts[4];
    logits_from_probs(probs, 4, logits);
    llmm_sampler_params p = plain_sampling(1.0f, 3);
    p.top_p = 0.7f; /* sorted: 0.5 (id 1) < 0.7, 0.5 + 0.3 (id 0) >= 0.7: keep ids 1, 0 */
    histogram(&p, logits, 4, 3000, counts);
    assert_true(counts[0] > 0 && counts[1] > 0);
    assert_int_equal(counts[2], 0);
    assert_int_equal(counts[3], 0);
    p.top_p = 0.5f; /* the first candidate alone reaches it */
    histogram(&p, logits, 4, 500, counts);
    assert_int_equal(counts[1], 500);
    p.top_p = 0.81f; /* 0.8 is short of it: id 3 joins */
    histogram(&p, logits, 4, 3000, counts);
    assert_true(counts[3] > 0);
    assert_int_equal(counts[2], 0);
}

static void test_min_p_excludes_unlikely(void **state) {
    (void)state;
    const double probs[] = {0.15, 0.5, 0.05, 0.3};
    float logits[4];
    int counts[4];
    logits_from_probs(probs, 4, logits);
    llmm_sampler_params p = plain_sampling(1.0f, 4);
    p.min_p = 0.35f; /* threshold 0.175: keep 0.5 and 0.3 */
    histogram(&p, logits, 4, 3000, counts);
    assert_true(counts[1] > 0 && counts[3] > 0);
    assert_int_equal(counts[0], 0);
    assert_int_equal(counts[2], 0);
    p.min_p = 0.25f; /* threshold 0.125: 0.15 joins */
    histogram(&p, logits, 4, 3000, counts);
    assert_true(counts[0] > 0);
    assert_int_equal(counts[2], 0);
    p.min_p = 1.0f; /* only the most likely */
    histogram(&p, logits, 4, 500, counts);
    assert_int_equal(counts[1], 500);
}

static void test_top_k_keeps_lowest_ids_on_ties(void **state) {
    (void)state;
    const float logits[] = {1.0f, 5.0f, 5.0f, 5.0f, 0.0f, 4.0f};
    int counts[6];
    llmm_sampler_params p = plain_sampling(1.0f, 5);
    p.top_k = 2;
    histogram(&p, logits, 6, 2000, counts);
    assert_true(counts[1] > 0 && counts[2] > 0);
    assert_int_equal(counts[1] + counts[2], 2000);
    p.top_k = 4; /* three fives and the four */
    histogram(&p, logits, 6, 4000, counts);
    assert_true(counts[5] > 0);
    assert_int_equal(counts[0] + counts[4], 0);
}

static int cmp_desc_then_id(const void *pa, const void *pb, const float *logits) {
    int a = *(const int *)pa, b = *(const int *)pb;
    if (logits[a] != logits[b]) return logits[a] > logits[b] ? -1 : 1;
    return (a > b) - (a < b);
}

static const float *sort_logits; /* qsort has no user pointer in C11 */
static int cmp_by_sort_logits(const void *a, const void *b) { return cmp_desc_then_id(a, b, sort_logits); }

/* A big vocabulary with many ties: the heap selection must keep exactly the top k. */
static void test_top_k_large_vocab_matches_full_sort(void **state) {
    (void)state;
    enum { N = 100000, K = 50 };
    float *logits = malloc(N * sizeof *logits);
    int *order = malloc(N * sizeof *order);
    char *drawn = calloc(N, 1);
    assert_true(logits && order && drawn);
    test_rng x = rng_seeded(99);
    for (int i = 0; i < N; i++) {
        logits[i] = (float)rng_below(&x, 4000) / 100.0f;
        order[i] = i;
    }
    sort_logits = logits;
    qsort(order, N, sizeof *order, cmp_by_sort_logits);
    llmm_sampler_params p = plain_sampling(1e6f, 8); /* near-uniform over the kept ones */
    p.top_k = K;
    llmm_sampler *s = make(&p);
    for (int i = 0; i < 1000; i++) drawn[sample_one(s, logits, N)] = 1;
    int n_drawn = 0;
    for (int i = 0; i < N; i++) n_drawn += drawn[i];
    for (int i = 0; i < K; i++) assert_true(drawn[order[i]]);
    assert_int_equal(n_drawn, K);
    llmm_sampler_free(s);
    free(logits);
    free(order);
    free(drawn);
}

/* Top-p without top-k: the selection widens past its first 256 candidates here (hundreds
 * are kept) and must keep exactly the sorted prefix. The vocabulary is kept at 8,000 so that
 * thousands of draws (each an exp per candidate) stay quick under qemu's soft float. */
static void test_top_p_wide_selection_matches_full_sort(void **state) {
    (void)state;
    enum { N = 8000, HOT = 600 };
    float *logits = malloc(N * sizeof *logits);
    int *order = malloc(N * sizeof *order);
    char *drawn = calloc(N, 1);
    assert_true(logits && order && drawn);
    test_rng x = rng_seeded(42);
    for (int i = 0; i < N; i++) {
        logits[i] = -10.0f;
        order[i] = i;
    }
    for (int i = 0; i < HOT; i++) logits[rng_below(&x, N)] = 10.0f + (float)rng_below(&x, 100) / 100.0f;
    sort_logits = logits;
    qsort(order, N, sizeof *order, cmp_by_sort_logits);
    double sum = 0, cum = 0;
    for (int i = 0; i < N; i++) sum += exp((double)logits[i] - logits[order[0]]);
    int kept = 0;
    while (cum / sum < 0.9) cum += exp((double)logits[order[kept++]] - logits[order[0]]);
    assert_true(kept > 256);
    llmm_sampler_params p = plain_sampling(1e6f, 9); /* truncation uses T = 1, the draw is flat */
    p.top_p = 0.9f;
    llmm_sampler *s = make(&p);
    for (int i = 0; i < 8000; i++) drawn[sample_one(s, logits, N)] = 1;
    int n_drawn = 0;
    for (int i = 0; i < N; i++) n_drawn += drawn[i];
    for (int i = 0; i < kept; i++) assert_true(drawn[order[i]]);
    assert_int_equal(n_drawn, kept);
    llmm_sampler_free(s);
    free(logits);
    free(order);
    free(drawn);
}

/* ---------------------------------------------------------------- penalties */

static void test_repeat_penalty(void **state) {
    (void)state;
    llmm_sampler_params p = plain_sampling(0, 0);
    p.repeat_penalty = 1.5f;
    const float pos[] = {2.0f, 1.5f, -1.0f};
    const llmm_token zero[] = {0};
    assert_int_equal(greedy_of(&p, pos, 3, NULL, 0), 0);
    assert_int_equal(greedy_of(&p, pos, 3, zero, 1), 1); /* 2.0 / 1.5 = 1.33 < 1.5 */
    p.repeat_penalty = 1.2f;
    assert_int_equal(greedy_of(&p, pos, 3, zero, 1), 0); /* 2.0 / 1.2 = 1.67 > 1.5 */
    const float neg[] = {-1.0f, -1.5f};
    p.repeat_penalty = 2.0f;
    assert_int_equal(greedy_of(&p, neg, 2, zero, 1), 1); /* -1.0 * 2 = -2 < -1.5 */
    /* counted once per distinct token: three repeats are no stronger than one */
    const llmm_token zeros[] = {0, 0, 0};
    p.repeat_penalty = 1.2f;
    assert_int_equal(greedy_of(&p, pos, 3, zeros, 3), 0);
}

static void test_frequency_and_presence_penalties(void **state) {
    (void)state;
    const float logits[] = {3.0f, 2.5f};
    const llmm_token once[] = {0}, twice[] = {0, 0}, thrice[] = {0, 0, 0};
    llmm_sampler_params p = plain_sampling(0, 0);
    p.frequency_penalty = 0.3f;
    assert_int_equal(greedy_of(&p, logits, 2, once, 1), 0);  /* 3 - 0.3 = 2.7 */
    assert_int_equal(greedy_of(&p, logits, 2, twice, 2), 1); /* 3 - 0.6 = 2.4 */
    p = plain_sampling(0, 0);
    p.presence_penalty = 0.4f;
    assert_int_equal(greedy_of(&p, logits, 2, thrice, 3), 0); /* 2.6, whatever the count */
    p.presence_penalty = 0.6f;
    assert_int_equal(greedy_of(&p, logits, 2, once, 1), 1); /* 2.4 */
    /* all three together: 3 / 1.1 - 2 * 0.1 - 0.1 = 2.427 < 2.5 */
    p = plain_sampling(0, 0);
    p.repeat_penalty = 1.1f;
    p.frequency_penalty = 0.1f;
    p.presence_penalty = 0.1f;
    assert_int_equal(greedy_of(&p, logits, 2, twice, 2), 1);
    assert_int_equal(greedy_of(&p, logits, 2, once, 1), 0); /* 2.727 - 0.2 = 2.527 */
}

static void test_penalty_window_and_out_of_range(void **state) {
    (void)state;
    const float logits[] = {3.0f, 2.5f, 0.0f};
    llmm_sampler_params p = plain_sampling(0, 0);
    p.presence_penalty = 1.0f;
    p.penalty_last_n = 2;
    const llmm_token pushed_out[] = {0, 2, 2}; /* 0 left the two-token window */
    assert_int_equal(greedy_of(&p, logits, 3, pushed_out, 3), 0);
    const llmm_token inside[] = {2, 0};
    assert_int_equal(greedy_of(&p, logits, 3, inside, 2), 1);
    const llmm_token beyond_vocab[] = {1000, 7};
    assert_int_equal(greedy_of(&p, logits, 3, beyond_vocab, 2), 0);
    p.penalty_last_n = 0; /* no window: no penalty */
    assert_int_equal(greedy_of(&p, logits, 3, inside, 2), 0);
}

static void test_reset_clears_penalties(void **state) {
    (void)state;
    const float logits[] = {3.0f, 2.5f};
    llmm_sampler_params p = plain_sampling(0, 0);
    p.presence_penalty = 1.0f;
    llmm_sampler *s = make(&p);
    assert_int_equal(llmm_sampler_accept(s, 0), LLMM_OK);
    assert_int_equal(sample_one(s, logits, 2), 1);
    assert_int_equal(llmm_sampler_reset(s), LLMM_OK);
    assert_int_equal(sample_one(s, logits, 2), 0);
    llmm_sampler_free(s);
}

/* ---------------------------------------------------------------- RNG */

static void draws(llmm_sampler *s, const float *logits, size_t n, llmm_token *out, size_t count) {
    for (size_t i = 0; i < count; i++) out[i] = sample_one(s, logits, n);
}

static void test_same_seed_same_sequence(void **state) {
    (void)state;
    enum { N = 1000 };
    static llmm_token a[N], b[N], c[N];
    llmm_sampler_params p = plain_sampling(1.0f, 1234);
    llmm_sampler *sa = make(&p), *sb = make(&p);
    p.seed = 1235;
    llmm_sampler *sc = make(&p);
    draws(sa, FIXED8, 8, a, N);
    draws(sb, FIXED8, 8, b, N);
    draws(sc, FIXED8, 8, c, N);
    assert_memory_equal(a, b, sizeof a);
    int differ = 0;
    for (int i = 0; i < N; i++) differ += a[i] != c[i];
    assert_true(differ > N / 4);
    llmm_sampler_free(sa);
    llmm_sampler_free(sb);
    llmm_sampler_free(sc);
}

static void test_reset_reproduces(void **state) {
    (void)state;
    enum { N = 200 };
    llmm_token first[N], again[N];
    llmm_sampler_params p;
    llmm_sampler_params_default(&p, sizeof p); /* the default chain, penalties included */
    p.repeat_penalty = 1.2f;
    p.seed = 77;
    llmm_sampler *s = make(&p);
    for (int round = 0; round < 2; round++) {
        llmm_token *out = round ? again : first;
        for (int i = 0; i < N; i++) {
            out[i] = sample_one(s, FIXED8, 8);
            assert_int_equal(llmm_sampler_accept(s, out[i]), LLMM_OK);
        }
        assert_int_equal(llmm_sampler_reset(s), LLMM_OK);
    }
    assert_memory_equal(first, again, sizeof first);
    llmm_sampler_free(s);
}

static void check_frequencies(float temperature, uint64_t seed) {
    enum { DRAWS = 20000 };
    int counts[8];
    double probs[8];
    llmm_sampler_params p = plain_sampling(temperature, seed);
    histogram(&p, FIXED8, 8, DRAWS, counts);
    softmax(FIXED8, 8, temperature, probs);
    for (int i = 0; i < 8; i++) assert_true(fabs((double)counts[i] / DRAWS - probs[i]) < 0.01);
}

static void test_frequencies_match_softmax(void **state) {
    (void)state;
    check_frequencies(1.0f, 2024);
    check_frequencies(2.0f, 31);  /* temperature flattens */
    check_frequencies(0.5f, 365); /* and sharpens */
}

/* The documented generator, written out again: splitmix64 (the tests' own, support/rng.h)
 * seeds xoshiro256**, and a uniform double is the top 53 bits of an output times 2^-53. */
static double ref_uniform(uint64_t s[4]) {
    uint64_t r = s[1] * 5;
    r = ((r << 7) | (r >> 57)) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = (s[3] << 45) | (s[3] >> 19);
    return (double)(r >> 11) / 9007199254740992.0;
}

/* Token an inverse-CDF draw in id order picks for uniform u. */
static llmm_token ref_pick(const float *logits, size_t n, double u) {
    double w[8], sum = 0, max = logits[0], cum = 0;
    for (size_t i = 1; i < n; i++) max = logits[i] > max ? logits[i] : max;
    for (size_t i = 0; i < n; i++) sum += w[i] = exp((double)logits[i] - max);
    for (size_t i = 0; i < n; i++)
        if (u * sum < (cum += w[i])) return (llmm_token)i;
    return (llmm_token)(n - 1);
}

static void test_seed_42_golden_draws(void **state) {
    (void)state;
    /* recorded once from this implementation; a change here breaks reproducibility */
    static const llmm_token golden[16] = {0, 2, 5, 6, 7, 6, 6, 6, 6, 3, 5, 2, 6, 2, 6, 6};
    llmm_sampler_params p = plain_sampling(1.0f, 42);
    llmm_sampler *s = make(&p);
    llmm_token got[16];
    draws(s, FIXED8, 8, got, 16);
    assert_memory_equal(got, golden, sizeof got);
    llmm_sampler_free(s);

    uint64_t zero = 0;
    assert_true(splitmix64_next(&zero) == 0xe220a8397b1dcdafull); /* published first output */
    uint64_t seed = 42, st[4];
    for (int i = 0; i < 4; i++) st[i] = splitmix64_next(&seed);
    for (int i = 0; i < 16; i++) assert_int_equal(ref_pick(FIXED8, 8, ref_uniform(st)), golden[i]);
}

/* The draw walks the kept candidates in rank order (logit descending, lowest id first on
 * ties, -0 tied with +0), so the token of each RNG draw is fixed: computed here from the
 * documented generator, the sum in id order and the walk over the sorted prefix, for a flat
 * row of many ties, signed zeros and masks where top-p keeps thousands (the sampler sorts them
 * all) and for a large top-k. */
static llmm_token ref_top_p_draw(const float *logits, const int *order, size_t n, int top_k_first, double top_p,
                                 double u) {
    double max = logits[order[0]], sum = 0, cum = 0;
    /* top-p sums what it is given: the whole row in id order, or top-k's survivors in rank order */
    for (size_t i = 0; i < n; i++) sum += exp((double)logits[top_k_first ? (size_t)order[i] : i] - max);
    size_t kept = n;
    for (size_t i = 0; i < n; i++)
        if ((cum += exp((double)logits[order[i]] - max)) / sum >= top_p) {
            kept = i + 1;
            break;
        }
    double kept_sum = 0, walk = 0;
    for (size_t i = 0; i < kept; i++) kept_sum += exp((double)logits[order[i]] - max);
    for (size_t i = 0; i < kept; i++)
        if (u * kept_sum < (walk += exp((double)logits[order[i]] - max))) return (llmm_token)order[i];
    return (llmm_token)order[kept - 1];
}

static void test_wide_truncation_draws_in_rank_order(void **state) {
    (void)state;
    enum { N = 5000, DRAWS = 24 };
    float *logits = malloc(N * sizeof *logits);
    int *order = malloc(N * sizeof *order);
    assert_true(logits && order);
    test_rng x = rng_seeded(7);
    for (int i = 0; i < N; i++) {
        const uint32_t r = rng_below(&x, 16);
        logits[i] = r == 0 ? -INFINITY : r == 1 ? -0.0f : r == 2 ? 0.0f : (float)(r % 5) * 0.125f;
        order[i] = i;
    }
    sort_logits = logits;
    qsort(order, N, sizeof *order, cmp_by_sort_logits);
    for (int variant = 0; variant < 2; variant++) {
        llmm_sampler_params p = plain_sampling(1.0f, 1234 + (uint64_t)variant);
        p.top_p = 0.95f;
        p.top_k = variant ? 4000 : 0; /* past the heap's range: every candidate sorted */
        llmm_sampler *s = make(&p);
        uint64_t seed = p.seed, st[4];
        for (int i = 0; i < 4; i++) st[i] = splitmix64_next(&seed);
        for (int d = 0; d < DRAWS; d++) {
            const llmm_token want = ref_top_p_draw(logits, order, variant ? 4000 : N, variant, 0.95, ref_uniform(st));
            assert_int_equal(sample_one(s, logits, N), want);
        }
        llmm_sampler_free(s);
    }
    free(logits);
    free(order);
}

/* ---------------------------------------------------------------- errors */

static void expect_rejected(llmm_sampler_params p) {
    llmm_sampler *s = (llmm_sampler *)&p; /* must be overwritten with NULL */
    assert_int_equal(llmm_sampler_create(&p, &s), LLMM_ERR_INVALID_ARG);
    assert_null(s);
}

static void test_invalid_params(void **state) {
    (void)state;
    llmm_sampler_params ok;
    llmm_sampler_params_default(&ok, sizeof ok);
    llmm_sampler_params p = ok;
    p.temperature = -0.1f; expect_rejected(p);
    p = ok; p.temperature = NAN; expect_rejected(p);
    p = ok; p.temperature = INFINITY; expect_rejected(p);
    p = ok; p.top_k = -1; expect_rejected(p);
    p = ok; p.top_p = 0.0f; expect_rejected(p);
    p = ok; p.top_p = 1.01f; expect_rejected(p);
    p = ok; p.top_p = NAN; expect_rejected(p);
    p = ok; p.min_p = -0.01f; expect_rejected(p);
    p = ok; p.min_p = 1.5f; expect_rejected(p);
    p = ok; p.repeat_penalty = 0.0f; expect_rejected(p);
    p = ok; p.repeat_penalty = -1.0f; expect_rejected(p);
    p = ok; p.frequency_penalty = NAN; expect_rejected(p);
    p = ok; p.presence_penalty = INFINITY; expect_rejected(p);
    p = ok; p.penalty_last_n = -1; expect_rejected(p);
    p = ok; p.penalty_last_n = (1 << 20) + 1; expect_rejected(p);
    p = ok; p.size = 4; expect_rejected(p);
    assert_int_equal(llmm_sampler_create(&ok, NULL), LLMM_ERR_INVALID_ARG);
    /* edges that are allowed */
    p = ok; p.top_p = 1.0f; p.min_p = 1.0f; p.temperature = 0.0f; p.penalty_last_n = 0;
    llmm_sampler *s = make(&p);
    llmm_sampler_free(s);
    s = NULL;
    assert_int_equal(llmm_sampler_create(NULL, &s), LLMM_OK); /* NULL = defaults */
    llmm_sampler_free(s);
    llmm_sampler_free(NULL);
}

/* A NaN or +inf anywhere in the row (broken weights) gives NUMERICAL naming the first one, for
 * greedy and sampling alike, with nothing drawn: the next draw is the one a fresh sampler makes. */
static void test_non_finite_logits_are_an_error(void **state) {
    (void)state;
    float row[300];
    test_rng x = rng_seeded(11);
    for (size_t i = 0; i < 300; i++) row[i] = (float)rng_below(&x, 1000) / 100.0f - 5.0f;
    const float bad[] = {NAN, INFINITY, -NAN};
    const size_t where[] = {0, 150, 299};
    for (int greedy = 0; greedy < 2; greedy++) {
        llmm_sampler_params p = plain_sampling(greedy ? 0.0f : 1.0f, 9);
        p.top_k = 40;
        p.top_p = 0.9f;
        llmm_sampler *s = make(&p), *fresh = make(&p);
        for (size_t b = 0; b < ARRAY_LEN(bad); b++) {
            for (size_t w = 0; w < ARRAY_LEN(where); w++) {
                float broken[300];
                memcpy(broken, row, sizeof row);
                broken[where[w]] = bad[b];
                broken[(where[w] + 7) % 300] = -INFINITY; /* masks are no error */
                llmm_token t = -5;
                assert_int_equal(llmm_sample(s, broken, 300, &t), LLMM_ERR_NUMERICAL);
                assert_int_equal(t, -5);
                char expect[64];
                snprintf(expect, sizeof expect, "logit %zu of 300 is %s", where[w], isnan(bad[b]) ? "NaN" : "+inf");
                if (!strstr(llmm_sampler_last_error(s), expect))
                    fail_msg("\"%s\" does not say \"%s\"", llmm_sampler_last_error(s), expect);
            }
        }
        assert_int_equal(sample_one(s, row, 300), sample_one(fresh, row, 300));
        llmm_sampler_free(s);
        llmm_sampler_free(fresh);
    }
}

/* Softmax subtracts the largest logit in double: rows of +-1e30 and +-FLT_MAX sample only among
 * the largest, tied ones equally often, under every truncation and temperature. */
static void test_softmax_of_huge_logits(void **state) {
    (void)state;
    const float big[] = {1e30f, FLT_MAX};
    for (size_t b = 0; b < ARRAY_LEN(big); b++) {
        const float L = big[b];
        const float row[8] = {-L, L, -L, 0.0f, L, -L, 1.0f, L * 0.5f};
        const float temperatures[] = {0.01f, 1.0f, 100.0f};
        for (size_t ti = 0; ti < ARRAY_LEN(temperatures); ti++) {
            for (int trunc = 0; trunc < 2; trunc++) {
                llmm_sampler_params p = plain_sampling(temperatures[ti], 3 + ti);
                if (trunc) p.top_k = 5, p.top_p = 0.95f, p.min_p = 0.05f;
                llmm_sampler *s = make(&p);
                int count[8] = {0};
                for (int i = 0; i < 2000; i++) count[sample_one(s, row, 8)]++;
                llmm_sampler_free(s);
                assert_int_equal(count[1] + count[4], 2000);
                /* a fair coin: 1000 +- 5 sigma (sigma 22) */
                if (count[1] < 890 || count[1] > 1110)
                    fail_msg("L %g, T %g, truncation %d: %d of 2000 draws for the first tie", (double)L,
                             (double)temperatures[ti], trunc, count[1]);
            }
        }
        llmm_sampler_params g = plain_sampling(0.0f, 0);
        assert_int_equal(greedy_of(&g, row, 8, NULL, 0), 1);
    }
}

static void test_invalid_calls(void **state) {
    (void)state;
    llmm_sampler *s = make(NULL);
    llmm_token t;
    assert_string_equal(llmm_sampler_last_error(s), "");
    assert_int_equal(llmm_sample(NULL, FIXED8, 8, &t), LLMM_ERR_INVALID_ARG);
    assert_int_equal(llmm_sample(s, NULL, 8, &t), LLMM_ERR_INVALID_ARG);
    assert_int_equal(llmm_sample(s, FIXED8, 8, NULL), LLMM_ERR_INVALID_ARG);
    assert_int_equal(llmm_sample(s, FIXED8, 0, &t), LLMM_ERR_INVALID_ARG);
    assert_string_not_equal(llmm_sampler_last_error(s), "");
    const float dead[] = {-INFINITY, -INFINITY, -INFINITY};
    assert_int_equal(llmm_sample(s, dead, 3, &t), LLMM_ERR_INVALID_ARG);
    assert_non_null(strstr(llmm_sampler_last_error(s), "-inf"));
    assert_int_equal(llmm_sampler_accept(s, -1), LLMM_ERR_INVALID_ARG);
    assert_int_equal(llmm_sampler_accept(NULL, 0), LLMM_ERR_INVALID_ARG);
    assert_int_equal(llmm_sampler_reset(NULL), LLMM_ERR_INVALID_ARG);
    assert_string_equal(llmm_sampler_last_error(NULL), "");
    assert_int_equal(sample_one(s, FIXED8, 8) >= 0, 1); /* still usable */
    llmm_sampler_free(s);
}

/* ---------------------------------------------------------------- allocation */


static void test_out_of_memory(void **state) {
    (void)state;
    llmm_sampler_params p = plain_sampling(1.0f, 1);
    for (int allowed = 0; allowed < 3; allowed++) { /* sampler, window, sorted window */
        failing_alloc f = {.allowed = allowed};
        llmm_allocator a = failing_allocator(&f);
        llmm_sampler *s = (llmm_sampler *)&f;
        llmm_diag d = {{0}};
        assert_int_equal(llmm__sampler_create(&p, &a, &s, &d), LLMM_ERR_NO_MEMORY);
        assert_null(s);
        assert_string_not_equal(d.msg, "");
    }
    failing_alloc f = {.allowed = 3}; /* created, but no room for the candidates */
    llmm_allocator a = failing_allocator(&f);
    llmm_sampler *s = NULL;
    assert_int_equal(llmm__sampler_create(&p, &a, &s, NULL), LLMM_OK);
    llmm_token t;
    assert_int_equal(llmm_sample(s, FIXED8, 8, &t), LLMM_ERR_NO_MEMORY);
    assert_string_not_equal(llmm_sampler_last_error(s), "");
    f.allowed = 1;
    assert_int_equal(llmm_sample(s, FIXED8, 8, &t), LLMM_OK);
    llmm_sampler_free(s);

    /* no memory for the full sort of a wide top-p: the selection widens step by step instead,
     * with the same draws */
    enum { N = 3000 };
    float *flat = malloc(N * sizeof *flat);
    assert_non_null(flat);
    test_rng x = rng_seeded(5);
    for (int i = 0; i < N; i++) flat[i] = (float)rng_below(&x, 64) / 64.0f;
    llmm_sampler_params wide = plain_sampling(1.0f, 77);
    wide.top_p = 0.9f;
    failing_alloc g = {.allowed = 4}; /* the sampler, its penalty window (two), its candidates; not the sort buffer */
    llmm_allocator ga = failing_allocator(&g);
    llmm_sampler *starved = NULL, *fed = make(&wide);
    assert_int_equal(llmm__sampler_create(&wide, &ga, &starved, NULL), LLMM_OK);
    for (int d = 0; d < 16; d++) assert_int_equal(sample_one(starved, flat, N), sample_one(fed, flat, N));
    llmm_sampler_free(starved);
    llmm_sampler_free(fed);
    free(flat);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy_is_argmax_lowest_id),
        cmocka_unit_test(test_logits_not_modified),
        cmocka_unit_test(test_top_k_1_is_greedy),
        cmocka_unit_test(test_top_p_excludes_tail),
        cmocka_unit_test(test_min_p_excludes_unlikely),
        cmocka_unit_test(test_top_k_keeps_lowest_ids_on_ties),
        cmocka_unit_test(test_top_k_large_vocab_matches_full_sort),
        cmocka_unit_test(test_top_p_wide_selection_matches_full_sort),
        cmocka_unit_test(test_repeat_penalty),
        cmocka_unit_test(test_frequency_and_presence_penalties),
        cmocka_unit_test(test_penalty_window_and_out_of_range),
        cmocka_unit_test(test_reset_clears_penalties),
        cmocka_unit_test(test_same_seed_same_sequence),
        cmocka_unit_test(test_reset_reproduces),
        cmocka_unit_test(test_frequencies_match_softmax),
        cmocka_unit_test(test_seed_42_golden_draws),
        cmocka_unit_test(test_wide_truncation_draws_in_rank_order),
        cmocka_unit_test(test_invalid_params),
        cmocka_unit_test(test_non_finite_logits_are_an_error),
        cmocka_unit_test(test_softmax_of_huge_logits),
        cmocka_unit_test(test_invalid_calls),
        cmocka_unit_test(test_out_of_memory),
    };
    return cmocka_run_group_tests_name("sampler", tests, NULL, NULL);
}
