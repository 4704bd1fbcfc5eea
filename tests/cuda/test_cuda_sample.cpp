// test_cuda_sample: cuda/sample.cu under the SIMT emulation against lib/sampler.c.
// - llmm__sampler_request: the penalty window as distinct ascending tokens with counts, nothing when
//   penalties are off, one draw exactly when llmm_sample would draw (the RNG states of a twin
//   sampler that samples on the host stay equal), INVALID_ARG with the sampler's message and
//   nothing drawn for an n_vocab llmm_sample refuses;
// - llmm__cu_sample_pack: the layout llmm__cu_sample reads (rows, then every row's tokens, then counts),
//   log(min_p) from the host, 0 when the staging buffer is too small; llmm__cu_sample refuses n_vocab 0;
// - llmm__cu_sample against llmm_sample, token for token, for greedy, temperature alone, top-k (40
//   and 1200: sorted in shared memory and in scratch, or off when the vocabulary is smaller),
//   top-p, min-p, top-p then min-p, penalties (sampling and greedy) and everything combined:
//   1,000 rows a mode, 5 rows a launch (one sampler pair per row, as a context's sequences),
//   vocabularies of 50 to 2000 and some of 32000, logits of spreads from 0.05 to 40 (top-p
//   keeps from one candidate to nearly all), a hot set of tokens that the penalties then hit,
//   rows of ties (+0 and -0 included), rows masked with -inf, rows of logits near +-1e30 and
//   +-FLT_MAX (softmax must stay finite), rows holding a NaN or +inf (the CPU refuses them with
//   NUMERICAL, the device gives -1 and the draw is rewound) and all -inf rows (INVALID_ARG on
//   the CPU, -1 on the device). Each chosen token (and now
//   and then a random one, possibly past the vocabulary) is accepted into both samplers, so the
//   penalty windows evolve alike; the RNG states must be equal at the end.
// The device sums in another order than the CPU (sample.cu), which could move a draw that lands
// within rounding of a boundary; at these sizes that has a probability near 1e-13, so any
// difference is a bug.
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
extern "C" {
#include <cmocka.h>

#include "llmmini.h"
#include "sampling/sampler.h"
}

#include "sample.h"

#include "device_test_util.h"
#include "support/rng.h"

static test_rng rng_state = rng_seeded(0x9e3779b9u); // the data stream (support/rng.h)
static uint32_t rng() { return rng_u32(&rng_state); }
static float uniform(float lo, float hi) { return rng_float(&rng_state, lo, hi); }

static const int ROWS_PER_LAUNCH = 5, ROWS_PER_MODE = 1000, POISON = -7;
static const size_t MAX_VOCAB = 32000;

enum row_kind { ROW_PLAIN, ROW_TIES, ROW_MASKED, ROW_HUGE, ROW_BROKEN, ROW_DEAD };
static const char *const kind_names[] = {"plain", "ties", "-inf masks", "+-1e30", "NaN/+inf", "all -inf"};

static void fill_row(float *x, size_t n, row_kind kind) {
    static const float spreads[] = {0.05f, 0.3f, 1.0f, 3.0f, 10.0f, 40.0f};
    const float spread = spreads[rng() % 6];
    for (size_t i = 0; i < n; i++) {
        switch (kind) {
        case ROW_TIES: {
            const int v = (int)(rng() % 4) - 1;
            x[i] = v == 0 ? ((rng() & 1) ? 0.0f : -0.0f) : 0.5f * (float)v;
            break;
        }
        case ROW_DEAD: x[i] = -INFINITY; break;
        case ROW_HUGE: x[i] = (rng() % 8 == 0 ? FLT_MAX : 1e30f) * ((rng() & 1) ? 1.0f : -1.0f); break;
        default: x[i] = spread * (uniform(-1, 1) + uniform(-1, 1) + uniform(-1, 1));
        }
    }
    if (kind == ROW_DEAD || kind == ROW_HUGE) return;
    if (rng() % 2) // a hot set, so that chosen tokens repeat and the penalties matter
        for (size_t i = 0; i < 16 && i < n; i++) x[i] += 3.0f * spread;
    if (kind == ROW_BROKEN) {
        const int count = 1 + (int)(rng() % 3);
        for (int j = 0; j < count; j++) x[rng() % n] = (rng() & 1) ? NAN : INFINITY;
    }
    if (kind == ROW_MASKED) {
        for (size_t i = 0; i < n; i++)
            if (rng() % 100 < 6) x[i] = -INFINITY;
        if (rng() % 4 == 0) { // only a few finite candidates left
            for (size_t i = 0; i < n; i++) x[i] = -INFINITY;
            for (int j = 0; j < 3; j++) x[rng() % n] = uniform(-5, 5);
        }
    }
}

struct device_buffers {
    float *logits = nullptr;
    void *packed = nullptr, *scratch = nullptr;
    int32_t *out = nullptr;
    size_t packed_bytes = 0;
};

static device_buffers device_alloc(int32_t window) {
    device_buffers d;
    d.packed_bytes = llmm__cu_sample_staging_bytes(ROWS_PER_LAUNCH, (size_t)ROWS_PER_LAUNCH * (size_t)window);
    assert_int_equal(cudaMalloc(&d.logits, ROWS_PER_LAUNCH * MAX_VOCAB * sizeof(float)), cudaSuccess);
    assert_int_equal(cudaMalloc(&d.packed, d.packed_bytes + 8), cudaSuccess);
    assert_int_equal(cudaMalloc(&d.scratch, llmm__cu_sample_scratch_bytes(ROWS_PER_LAUNCH, MAX_VOCAB)), cudaSuccess);
    assert_int_equal(cudaMalloc(&d.out, ROWS_PER_LAUNCH * sizeof(int32_t)), cudaSuccess);
    return d;
}

static void device_free(device_buffers &d) {
    cudaFree(d.logits), cudaFree(d.packed), cudaFree(d.scratch), cudaFree(d.out);
}

static llmm_sampler_params mode_params(float temperature, int32_t top_k, float top_p, float min_p) {
    llmm_sampler_params p;
    assert_int_equal(llmm_sampler_params_default(&p, sizeof p), LLMM_OK);
    p.temperature = temperature, p.top_k = top_k, p.top_p = top_p, p.min_p = min_p;
    p.repeat_penalty = 1.0f, p.frequency_penalty = 0.0f, p.presence_penalty = 0.0f;
    return p;
}

static llmm_sampler_params with_penalties(llmm_sampler_params p, float repeat, float frequency, float presence,
                                          int32_t last_n) {
    p.repeat_penalty = repeat, p.frequency_penalty = frequency, p.presence_penalty = presence;
    p.penalty_last_n = last_n;
    return p;
}

// ROWS_PER_MODE rows of this mode through llmm_sample and through llmm__cu_sample, token for token.
static void check_mode(const char *mode, llmm_sampler_params params) {
    llmm_sampler *cpu[ROWS_PER_LAUNCH], *dev[ROWS_PER_LAUNCH];
    for (int b = 0; b < ROWS_PER_LAUNCH; b++) {
        params.seed = 1000u * rng() + (uint64_t)b;
        assert_int_equal(llmm_sampler_create(&params, &cpu[b]), LLMM_OK);
        assert_int_equal(llmm_sampler_create(&params, &dev[b]), LLMM_OK);
    }
    device_buffers d = device_alloc(params.penalty_last_n);
    std::vector<float> logits(ROWS_PER_LAUNCH * MAX_VOCAB);
    std::vector<uint8_t> staging(d.packed_bytes);
    const std::vector<int32_t> poison(ROWS_PER_LAUNCH, POISON);
    size_t penalized_seen = 0;

    for (int launch = 0; launch * ROWS_PER_LAUNCH < ROWS_PER_MODE; launch++) {
        const size_t n = launch % 67 == 33 ? MAX_VOCAB : 50 + rng() % 1951;
        row_kind kind[ROWS_PER_LAUNCH];
        int32_t want[ROWS_PER_LAUNCH];
        llmm_sample_request req[ROWS_PER_LAUNCH];
        uint64_t saved[ROWS_PER_LAUNCH][4];
        for (int b = 0; b < ROWS_PER_LAUNCH; b++) {
            const uint32_t r = rng() % 40;
            kind[b] = r == 0 ? ROW_DEAD : r == 1 ? ROW_BROKEN : r < 4 ? ROW_HUGE : r < 8 ? ROW_TIES
                    : r < 13 ? ROW_MASKED : ROW_PLAIN;
            float *x = &logits[b * n];
            fill_row(x, n, kind[b]);
            llmm_token t = -1;
            const llmm_status st = llmm_sample(cpu[b], x, n, &t);
            assert_int_equal(st, kind[b] == ROW_DEAD     ? LLMM_ERR_INVALID_ARG
                                 : kind[b] == ROW_BROKEN ? LLMM_ERR_NUMERICAL
                                                         : LLMM_OK);
            want[b] = st ? -1 : t;
            llmm__sampler_rng_save(dev[b], saved[b]);
            assert_int_equal(llmm__sampler_request(dev[b], n, &req[b]), LLMM_OK);
            penalized_seen += req[b].n_penalized;
        }
        const size_t bytes = llmm__cu_sample_pack(req, ROWS_PER_LAUNCH, staging.data(), staging.size());
        assert_true(bytes > 0);
        assert_int_equal(cudaMemcpy(d.packed, staging.data(), bytes, cudaMemcpyHostToDevice), cudaSuccess);
        assert_int_equal(cudaMemcpy(d.logits, logits.data(), ROWS_PER_LAUNCH * n * sizeof(float),
                                    cudaMemcpyHostToDevice),
                         cudaSuccess);
        assert_int_equal(cudaMemcpy(d.out, poison.data(), ROWS_PER_LAUNCH * sizeof(int32_t), cudaMemcpyHostToDevice),
                         cudaSuccess);
        assert_int_equal(llmm__cu_sample(nullptr, d.logits, ROWS_PER_LAUNCH, n, d.packed, d.out, d.scratch), 0);
        int32_t got[ROWS_PER_LAUNCH];
        assert_int_equal(cudaMemcpy(got, d.out, sizeof got, cudaMemcpyDeviceToHost), cudaSuccess);

        for (int b = 0; b < ROWS_PER_LAUNCH; b++) {
            if (got[b] != want[b])
                fail_msg("%s: launch %d row %d (%s, n_vocab %zu, %u penalized): device token %d, CPU %d", mode,
                         launch, b, kind_names[kind[b]], n, req[b].n_penalized, got[b], want[b]);
            if (want[b] < 0) {
                llmm__sampler_rng_restore(dev[b], saved[b]);
                continue;
            }
            assert_int_equal(llmm_sampler_accept(cpu[b], want[b]), LLMM_OK);
            assert_int_equal(llmm_sampler_accept(dev[b], want[b]), LLMM_OK);
            if (rng() % 4 == 0) {
                const llmm_token extra = (llmm_token)(rng() % 2500);
                assert_int_equal(llmm_sampler_accept(cpu[b], extra), LLMM_OK);
                assert_int_equal(llmm_sampler_accept(dev[b], extra), LLMM_OK);
            }
        }
    }
    for (int b = 0; b < ROWS_PER_LAUNCH; b++) {
        uint64_t a[4], c[4];
        llmm__sampler_rng_save(cpu[b], a);
        llmm__sampler_rng_save(dev[b], c);
        assert_memory_equal(a, c, sizeof a);
        llmm_sampler_free(cpu[b]);
        llmm_sampler_free(dev[b]);
    }
    const bool penalties = params.penalty_last_n > 0 && (params.repeat_penalty != 1.0f ||
                                                         params.frequency_penalty != 0.0f ||
                                                         params.presence_penalty != 0.0f);
    assert_int_equal(penalized_seen > 0, penalties);
    device_free(d);
}

static void test_greedy(void **state) {
    (void)state;
    check_mode("greedy", mode_params(0.0f, 40, 0.95f, 0.05f));
}

static void test_temperature(void **state) {
    (void)state;
    check_mode("temperature", mode_params(0.8f, 0, 1.0f, 0.0f));
}

static void test_top_k(void **state) {
    (void)state;
    check_mode("top-k 40", mode_params(1.0f, 40, 1.0f, 0.0f));
    check_mode("top-k 1200", mode_params(1.3f, 1200, 1.0f, 0.0f));
}

static void test_top_p(void **state) {
    (void)state;
    check_mode("top-p", mode_params(0.9f, 0, 0.9f, 0.0f));
}

static void test_min_p(void **state) {
    (void)state;
    check_mode("min-p", mode_params(1.1f, 0, 1.0f, 0.1f));
    check_mode("top-p, min-p", mode_params(0.7f, 0, 0.8f, 0.02f));
}

static void test_penalties(void **state) {
    (void)state;
    check_mode("penalties", with_penalties(mode_params(0.7f, 0, 1.0f, 0.0f), 1.3f, 0.2f, 0.5f, 32));
    check_mode("greedy penalties", with_penalties(mode_params(0.0f, 0, 1.0f, 0.0f), 1.5f, 0.5f, -0.2f, 16));
}

static void test_combined(void **state) {
    (void)state;
    check_mode("combined", with_penalties(mode_params(0.8f, 40, 0.95f, 0.05f), 1.1f, 0.1f, 0.3f, 64));
}

// The window 5 3 5 9 3 5 100 2 7 2 in a window of 8 leaves 5 9 3 5 100 2 7 2.
static void test_request(void **state) {
    (void)state;
    llmm_sampler_params p = with_penalties(mode_params(0.9f, 0, 1.0f, 0.0f), 1.2f, 0.0f, 0.0f, 8);
    p.seed = 77;
    llmm_sampler *s = nullptr, *twin = nullptr;
    assert_int_equal(llmm_sampler_create(&p, &s), LLMM_OK);
    assert_int_equal(llmm_sampler_create(&p, &twin), LLMM_OK);
    static const llmm_token window[] = {5, 3, 5, 9, 3, 5, 100, 2, 7, 2};
    for (llmm_token t : window) assert_int_equal(llmm_sampler_accept(s, t), LLMM_OK);

    llmm_sample_request r;
    assert_int_equal(llmm__sampler_request(s, 50, &r), LLMM_OK);
    static const int32_t tokens[] = {2, 3, 5, 7, 9, 100};
    static const uint32_t counts[] = {2, 1, 2, 1, 1, 1};
    assert_int_equal(r.n_penalized, 6);
    assert_memory_equal(r.penalized, tokens, sizeof tokens);
    assert_memory_equal(r.counts, counts, sizeof counts);
    assert_true(r.temperature == 0.9f && r.top_k == 0 && r.top_p == 1.0f && r.repeat_penalty == 1.2f);
    assert_true(r.uniform >= 0.0 && r.uniform < 1.0);

    // one draw, as llmm_sample makes
    const float logits[4] = {0.5f, -1.0f, 2.0f, 0.25f};
    llmm_token t;
    assert_int_equal(llmm_sample(twin, logits, 4, &t), LLMM_OK);
    uint64_t a[4], b[4];
    llmm__sampler_rng_save(s, a);
    llmm__sampler_rng_save(twin, b);
    assert_memory_equal(a, b, sizeof a);

    // refused as llmm_sample refuses, nothing drawn
    assert_int_equal(llmm__sampler_request(s, 0, &r), LLMM_ERR_INVALID_ARG);
    assert_non_null(strstr(llmm_sampler_last_error(s), "n_vocab"));
    assert_int_equal(llmm__sampler_request(s, (size_t)INT32_MAX + 1, &r), LLMM_ERR_INVALID_ARG);
    llmm__sampler_rng_save(s, b);
    assert_memory_equal(a, b, sizeof a);
    llmm_sampler_free(s);
    llmm_sampler_free(twin);

    // penalties off: no window; greedy: no draw
    p = mode_params(0.0f, 40, 0.95f, 0.05f);
    p.penalty_last_n = 8;
    assert_int_equal(llmm_sampler_create(&p, &s), LLMM_OK);
    assert_int_equal(llmm_sampler_accept(s, 4), LLMM_OK);
    llmm__sampler_rng_save(s, a);
    assert_int_equal(llmm__sampler_request(s, 50, &r), LLMM_OK);
    llmm__sampler_rng_save(s, b);
    assert_memory_equal(a, b, sizeof a);
    assert_int_equal(r.n_penalized, 0);
    assert_true(r.uniform == 0.0);
    llmm_sampler_free(s);
}

static void test_pack(void **state) {
    (void)state;
    const int32_t tok0[] = {1, 4}, tok1[] = {0, 2, 9};
    const uint32_t cnt0[] = {3, 1}, cnt1[] = {1, 1, 2};
    llmm_sample_request req[2] = {};
    req[0].temperature = 0.5f, req[0].top_k = 7, req[0].top_p = 0.9f, req[0].min_p = 0.05f;
    req[0].repeat_penalty = 1.1f, req[0].frequency_penalty = 0.2f, req[0].presence_penalty = 0.3f;
    req[0].n_penalized = 2, req[0].penalized = tok0, req[0].counts = cnt0, req[0].uniform = 0.25;
    req[1] = req[0];
    req[1].min_p = 0.0f, req[1].n_penalized = 3, req[1].penalized = tok1, req[1].counts = cnt1;
    const size_t bytes = llmm__cu_sample_staging_bytes(2, 5);
    assert_int_equal(bytes, 2 * sizeof(cu_sample_row) + 10 * sizeof(uint32_t));
    std::vector<uint64_t> staging(bytes / 8 + 1);
    assert_int_equal(llmm__cu_sample_pack(req, 2, staging.data(), bytes - 1), 0);
    assert_int_equal(llmm__cu_sample_pack(req, 2, staging.data(), bytes), bytes);
    cu_sample_row rows[2];
    memcpy(rows, staging.data(), sizeof rows);
    const uint32_t *pen = (const uint32_t *)((const uint8_t *)staging.data() + sizeof rows);
    const double log_min_p = log((double)0.05f);
    assert_memory_equal(&rows[0].log_min_p, &log_min_p, sizeof log_min_p);
    assert_true(rows[1].log_min_p == 0.0 && rows[0].uniform == 0.25 && rows[0].top_k == 7);
    for (int r = 0; r < 2; r++) {
        assert_int_equal(rows[r].n_penalized, req[r].n_penalized);
        for (uint32_t j = 0; j < rows[r].n_penalized; j++) {
            assert_int_equal(pen[rows[r].penalized_at + j], (uint32_t)req[r].penalized[j]);
            assert_int_equal(pen[rows[r].counts_at + j], req[r].counts[j]);
        }
    }
    assert_int_equal(llmm__cu_sample(nullptr, nullptr, 1, 0, nullptr, nullptr, nullptr), cudaErrorInvalidValue);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_request),     cmocka_unit_test(test_pack),   cmocka_unit_test(test_greedy),
        cmocka_unit_test(test_temperature), cmocka_unit_test(test_top_k),  cmocka_unit_test(test_top_p),
        cmocka_unit_test(test_min_p),       cmocka_unit_test(test_penalties), cmocka_unit_test(test_combined),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
