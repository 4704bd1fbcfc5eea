// The Gated DeltaNet kernels of cuda/delta_net.cu, run on the CPU by the SIMT emulation: the
// chunked form of the delta rule (a sequence's several rows in chunks of 1, 3, the CPU's
// LLMM_DELTA_CHUNK and 64) against the token-by-token recurrence (chunk 0) of the same kernels,
// on prompts whose length no chunk divides, from an empty state and continuing from the state a
// first call left. The two round differently, so outputs and state matrices are held to the
// bound the model suites hold them to (test_recurrent: prompt whole, in chunks and token by
// token within 1e-4): |got - want| <= 1e-4 (1 + |want|). The state's convolution inputs are
// copies in both: equal. A one-row sequence beside the prompt runs the recurrence bit for bit
// whatever the chunk, padding rows (position -1) and the slots of sequences not in the call
// are left alone. The conformance suite (test_cuda_module) checks the slot against a float64
// reference besides.
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
extern "C" { // this cmocka.h declares its functions without C linkage for C++
#include <cmocka.h>
}

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vector>

#include "kernels.h"
#include "device_test_util.h"
#include "support/rng.h"

extern "C" {
#include "backend/backend.h"
}

namespace {

struct delta_shape {
    uint32_t nk, nv, hd, kernel;
};

const uint32_t N_SLOTS = 4;
const uint32_t PROMPT_SLOT = 3, SINGLE_SLOT = 1; // the prompt's and the one-row sequence's
const float SENTINEL = 12345.0f;                 // in the padding rows' outputs

std::vector<float> host_floats(test_rng *rng, size_t n, float lo, float hi) {
    float *p = rng_floats(rng, n, lo, hi);
    std::vector<float> v(p, p + n);
    free(p);
    return v;
}

// One model layer's inputs for n_rows rows, its state slots on the device.
struct delta_case {
    delta_shape sh;
    size_t conv_dim, slot_floats;
    std::vector<float> qkv, z, beta, alpha, taps, dt, a, norm;
    float *d_taps, *d_dt, *d_a, *d_norm, *d_states;

    delta_case(const delta_shape &s, uint64_t seed) : sh(s) {
        test_rng rng;
        rng_seed(&rng, seed);
        conv_dim = (2 * (size_t)sh.nk + sh.nv) * sh.hd;
        slot_floats = (sh.kernel - 1) * conv_dim + (size_t)sh.nv * sh.hd * sh.hd;
        taps = host_floats(&rng, conv_dim * sh.kernel, -1.0f, 1.0f);
        dt = host_floats(&rng, sh.nv, -1.0f, 1.0f);
        a = host_floats(&rng, sh.nv, -1.5f, -0.1f);
        norm = host_floats(&rng, sh.hd, 0.5f, 1.5f);
        d_taps = to_device(taps);
        d_dt = to_device(dt);
        d_a = to_device(a);
        d_norm = to_device(norm);
        const std::vector<float> states = host_floats(&rng, slot_floats * N_SLOTS, -0.5f, 0.5f);
        d_states = to_device(states);
    }
    ~delta_case() {
        cudaFree(d_taps), cudaFree(d_dt), cudaFree(d_a), cudaFree(d_norm), cudaFree(d_states);
    }

    // One call over rows at pos (slot per row), padding rows included; the outputs back.
    std::vector<float> run(const std::vector<int32_t> &pos, const std::vector<uint32_t> &slot, uint64_t seed,
                           uint32_t chunk) {
        test_rng rng;
        rng_seed(&rng, seed); // the same inputs for every chunk
        const size_t n = pos.size(), out_n = n * sh.nv * sh.hd;
        const std::vector<float> qkv_h = host_floats(&rng, n * conv_dim, -2.0f, 2.0f);
        const std::vector<float> z_h = host_floats(&rng, out_n, -3.0f, 3.0f);
        const std::vector<float> beta_h = host_floats(&rng, n * sh.nv, -3.0f, 3.0f);
        const std::vector<float> alpha_h = host_floats(&rng, n * sh.nv, -3.0f, 3.0f);
        const std::vector<float> out_h(out_n, SENTINEL);
        llmm_delta_batch b;
        memset(&b, 0, sizeof b);
        b.qkv = to_device(qkv_h);
        b.work = to_device(std::vector<float>(n * conv_dim, 0.0f));
        b.z = to_device(z_h);
        b.beta_raw = to_device(beta_h);
        b.alpha_raw = to_device(alpha_h);
        b.taps = d_taps, b.dt_bias = d_dt, b.a = d_a, b.norm = d_norm;
        b.out = to_device(out_h);
        b.states = d_states;
        b.seq_stride = slot_floats;
        b.n_rows = n;
        b.n_k_heads = sh.nk, b.n_v_heads = sh.nv, b.head_dim = sh.hd, b.kernel = sh.kernel;
        b.eps = 1e-6f;
        int32_t *d_pos = to_device(pos);
        uint32_t *d_slot = to_device(slot);
        assert_int_equal(llmm__cu_gated_delta_net(0, &b, d_pos, d_slot, chunk), 0);
        assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
        std::vector<float> out = from_device(b.out, out_n);
        cudaFree((void *)b.qkv), cudaFree(b.work), cudaFree((void *)b.z), cudaFree((void *)b.beta_raw);
        cudaFree((void *)b.alpha_raw), cudaFree(b.out), cudaFree(d_pos), cudaFree(d_slot);
        return out;
    }

    std::vector<float> states() { return from_device(d_states, slot_floats * N_SLOTS); }
};

// The rows of one call: the prompt's n rows from position p0 in PROMPT_SLOT, then one row of
// another sequence at position 5, then two padding rows.
void call_rows(uint32_t p0, uint32_t n, std::vector<int32_t> *pos, std::vector<uint32_t> *slot) {
    pos->clear(), slot->clear();
    for (uint32_t i = 0; i < n; i++) pos->push_back((int32_t)(p0 + i)), slot->push_back(PROMPT_SLOT);
    pos->push_back(5), slot->push_back(SINGLE_SLOT);
    for (int i = 0; i < 2; i++) pos->push_back(-1), slot->push_back(UINT32_MAX);
}

double worst_excess(const std::vector<float> &got, const std::vector<float> &want, size_t from, size_t to) {
    double worst = 0;
    for (size_t i = from; i < to; i++) {
        const double err = fabs((double)got[i] - want[i]), bound = 1e-4 * (1 + fabs((double)want[i]));
        if (!(err <= bound)) fail_msg("value %zu: %.9g, the recurrence's %.9g", i, (double)got[i], (double)want[i]);
        worst = err > worst ? err : worst;
    }
    return worst;
}

// Prompt rows of lengths n1, then n2 continuing, with chunk against chunk 0.
void check_chunk(const delta_shape &sh, uint32_t chunk, uint32_t n1, uint32_t n2) {
    delta_case ref(sh, 41), got(sh, 41);
    const size_t head_out = (size_t)sh.nv * sh.hd;
    double worst_out = 0, worst_state = 0;
    std::vector<int32_t> pos;
    std::vector<uint32_t> slot;
    const std::vector<float> before = ref.states();
    for (int call = 0; call < 2; call++) {
        const uint32_t n = call ? n2 : n1;
        call_rows(call ? n1 : 0, n, &pos, &slot);
        const std::vector<float> want = ref.run(pos, slot, 100 + call, 0);
        const std::vector<float> out = got.run(pos, slot, 100 + call, chunk);
        worst_out = fmax(worst_out, worst_excess(out, want, 0, n * head_out));
        // the one-row sequence runs the recurrence in both: equal; padding rows untouched
        for (size_t i = n * head_out; i < (n + 1) * head_out; i++) assert_true(out[i] == want[i]);
        for (size_t i = (n + 1) * head_out; i < out.size(); i++) assert_true(out[i] == SENTINEL);
        const std::vector<float> sw = ref.states(), sg = got.states();
        const size_t conv = (sh.kernel - 1) * ref.conv_dim;
        for (uint32_t s = 0; s < N_SLOTS; s++) {
            const size_t at = (size_t)s * ref.slot_floats;
            if (s != PROMPT_SLOT && s != SINGLE_SLOT) { // not in the call: as it was
                assert_memory_equal(&sg[at], &before[at], ref.slot_floats * sizeof(float));
                continue;
            }
            assert_memory_equal(&sg[at], &sw[at], conv * sizeof(float));
            worst_state = fmax(worst_state, worst_excess(sg, sw, at + conv, at + ref.slot_floats));
        }
    }
    print_message("head_dim %u, chunk %2u, prompt %u + %u rows: worst |chunked - recurrence| outputs %.2e, state %.2e "
                  "(bound 1e-4 (1 + |x|))\n",
                  sh.hd, chunk, n1, n2, worst_out, worst_state);
}

void test_chunked_equals_recurrence(void **) {
    const delta_shape sh = {2, 4, 16, 4};
    const uint32_t chunks[] = {1, 3, LLMM_DELTA_CHUNK, 64};
    for (uint32_t chunk : chunks) check_chunk(sh, chunk, 70, 37); // 70 and 37: no chunk divides them
}

// The shape of Qwen3.5's heads (head_dim 128, kernel 4) at the backends' chunk: the chunk's
// shared memory fits a block's default allowance.
void test_chunked_real_head(void **) {
    const delta_shape sh = {1, 2, 128, 4};
    check_chunk(sh, LLMM_DELTA_CHUNK, 21, 5);
}

// A chunk whose shared memory passes the default allowance is refused, not launched.
void test_chunk_refused(void **) {
    llmm_delta_batch b;
    memset(&b, 0, sizeof b);
    b.n_k_heads = 1, b.n_v_heads = 1, b.head_dim = 128, b.kernel = 4, b.n_rows = 1;
    assert_int_equal(llmm__cu_gated_delta_net_check(&b, LLMM_DELTA_CHUNK), 0);
    assert_int_equal(llmm__cu_gated_delta_net_check(&b, 64), (int)cudaErrorInvalidValue);
    assert_int_equal(llmm__cu_gated_delta_net_check(&b, 65), (int)cudaErrorInvalidValue);
    b.head_dim = LLMM_MAX_SSM_HEAD;
    assert_int_equal(llmm__cu_gated_delta_net_check(&b, LLMM_DELTA_CHUNK), 0);
}

} // namespace

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chunked_equals_recurrence),
        cmocka_unit_test(test_chunked_real_head),
        cmocka_unit_test(test_chunk_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
