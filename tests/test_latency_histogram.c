/* The latency histogram behind the percentiles of llmm_generate_stats and llmm_context_stats:
 * percentiles within the documented 3.2 % of the true order statistic, exact max, no samples. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>

#include "base/latency_histogram.h"

static void assert_within(double got, double want, double rel) {
    if (fabs(got - want) > rel * want) fail_msg("got %.6f, want %.6f within %.1f %%", got, want, rel * 100);
}

static void test_empty_is_zero(void **state) {
    (void)state;
    llmm_latency_histogram h;
    llmm__latency_reset(&h);
    const llmm_latency_summary s = llmm__latency_summary(&h);
    assert_true(s.p50_ms == 0 && s.p95_ms == 0 && s.p99_ms == 0 && s.max_ms == 0);
    assert_true(llmm__latency_percentile(&h, 50) == 0);
}

/* One sample: every percentile is that sample (clamped to the exact min and max). */
static void test_single_sample(void **state) {
    (void)state;
    llmm_latency_histogram h;
    llmm__latency_reset(&h);
    llmm__latency_add(&h, 12.345);
    const llmm_latency_summary s = llmm__latency_summary(&h);
    assert_true(s.p50_ms == 12.345 && s.p99_ms == 12.345 && s.max_ms == 12.345);
}

/* 1..1000 ms in a shuffled order: the k-th percentile is k * 10 ms within 3.2 %. */
static void test_uniform_percentiles(void **state) {
    (void)state;
    llmm_latency_histogram h;
    llmm__latency_reset(&h);
    for (unsigned i = 0; i < 1000; i++) llmm__latency_add(&h, (double)((i * 617u) % 1000u + 1u));
    assert_int_equal(h.n, 1000);
    const double ps[] = {1, 10, 25, 50, 75, 90, 95, 99, 100};
    for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++) assert_within(llmm__latency_percentile(&h, ps[i]), ps[i] * 10, 0.032);
    const llmm_latency_summary s = llmm__latency_summary(&h);
    assert_true(s.max_ms == 1000);
    assert_true(s.p50_ms <= s.p95_ms && s.p95_ms <= s.p99_ms && s.p99_ms <= s.max_ms);
}

/* A tail: 990 steps of 20 us and 10 stalls of 250 ms: p50 and p95 see the steps, p99 and max
 * the stall; microsecond durations keep their resolution. */
static void test_tail_and_small_values(void **state) {
    (void)state;
    llmm_latency_histogram h;
    llmm__latency_reset(&h);
    for (int i = 0; i < 990; i++) llmm__latency_add(&h, 0.020);
    for (int i = 0; i < 10; i++) llmm__latency_add(&h, 250);
    const llmm_latency_summary s = llmm__latency_summary(&h);
    assert_within(s.p50_ms, 0.020, 0.032);
    assert_within(s.p95_ms, 0.020, 0.032);
    assert_within(s.p99_ms, 0.020, 0.032); /* the 990th of 1000 is still a step */
    assert_within(llmm__latency_percentile(&h, 99.1), 250, 0.032);
    assert_true(s.max_ms == 250);
}

/* A clock that goes back, NaN, and durations past the last bucket: counted, never out of
 * bounds; max stays exact. */
static void test_hostile_values(void **state) {
    (void)state;
    llmm_latency_histogram h;
    llmm__latency_reset(&h);
    llmm__latency_add(&h, -5);
    llmm__latency_add(&h, NAN);
    llmm__latency_add(&h, 1e300);
    llmm__latency_add(&h, 1e12);
    assert_int_equal(h.n, 4);
    assert_true(h.min_ms == 0 && h.max_ms == 1e300);
    assert_true(llmm__latency_percentile(&h, 50) < 0.001); /* the [0, 1 us) bucket */
    assert_true(llmm__latency_percentile(&h, 100) > 1e9);
    for (unsigned i = 0; i < 4096; i++) llmm__latency_add(&h, (double)i * 0.37);
    assert_true(llmm__latency_percentile(&h, 50) > 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_empty_is_zero),         cmocka_unit_test(test_single_sample),
        cmocka_unit_test(test_uniform_percentiles),   cmocka_unit_test(test_tail_and_small_values),
        cmocka_unit_test(test_hostile_values),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
