// test_cuda_matmul: cuda/gemv_quant.cu under the SIMT emulation against the CPU backend, for
// each of the 15 weight types:
// - the activations' operand (llmm__cu_quantize_operand) is byte for byte the CPU's from_float of
//   the operand type the weight type's trait names (format/quant.h), including an all-zero block,
//   a largest magnitude reached by two values of opposite signs (Q8_K keeps the first) and
//   values that round half to even;
// - llmm__cu_matmul is the CPU's scalar dot (vec_dot of the weight row with that operand) within
//   (ne0 / 32 + 4) * 2^-23 * sum_j |w_j x_j| (ne0 / 8 for F32, F16 and BF16), w and x as the
//   dots see them (dequantized): each block's contribution rounds as the CPU's, only the order
//   of the sum over blocks differs (a warp's lanes, then a shuffle tree);
// - llmm__cu_embed is bit for bit the type's dequant_row, with NaN rows and the flag for tokens
//   outside the table.
// Shapes are odd on purpose: ne0 a multiple of the block but not of 256 where the block
// allows, rows of several staged chunks of gemv_block_kernel and a partial one, ne1 not a
// multiple of the warps per thread block, n_rows 1, 3, 8 and 17 (two full row tiles and a
// partial one).
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

#include "format/quant.h"
}

#include "gemv_quant.h"
#include "kernels.h"

#include "device_test_util.h"
#include "support/numeric.h"
#include "support/rng.h"

static test_rng rng_state = rng_seeded(0x2545f491u); // the data stream (support/rng.h)
static float uniform(float lo, float hi) { return rng_float(&rng_state, lo, hi); }

static size_t row_bytes(uint32_t type, size_t ne0) { return llmm__row_bytes(type, ne0); }

// Four ne0 per type: multiples of the block, not of 256 where the block is smaller.
static size_t ne0_of(uint32_t type, int shape) {
    // the last: several of gemv_block_kernel's chunks (32 legacy or 4 K blocks) and a partial one
    static const size_t elems[4] = {96, 136, 520, 200}, legacy[4] = {96, 352, 160, 32 * 70},
                        k[4] = {512, 768, 256, 256 * 9};
    const uint32_t bs = llmm__type_get(type)->block_size;
    return bs == 1 ? elems[shape] : bs == 32 ? legacy[shape] : k[shape];
}
static const size_t ne1_of[4] = {37, 5, 130, 6};

// Random weights of a type, as a file would hold them (the core's reference quantizer).
static std::vector<uint8_t> random_weights(uint32_t type, size_t ne0, size_t ne1) {
    std::vector<float> row(ne0);
    std::vector<uint8_t> w(ne1 * row_bytes(type, ne0));
    for (size_t o = 0; o < ne1; o++) {
        const float scale = uniform(0.05f, 2.0f);
        for (size_t j = 0; j < ne0; j++) row[j] = scale * uniform(-1.0f, 1.0f);
        llmm__type_get(type)->from_float(row.data(), w.data() + o * row_bytes(type, ne0), ne0);
    }
    return w;
}

// Activations with the operand quantizers' edge cases in fixed places: row 0 has values 32..63
// zero (a zero Q8_0/Q8_1 block) and its largest magnitude twice, +2 at 3 then -2 at 13 (the
// signed maximum is the first: Q8_K's scale takes its sign); row 1 is all zero (a zero Q8_K
// block); the last row has 127 at 64, so that the values after it scale by exactly one and
// 2.5, -3.5, 0.5 round half to even.
static std::vector<float> random_activations(size_t ne0, size_t n_rows) {
    std::vector<float> x(ne0 * n_rows);
    for (size_t r = 0; r < n_rows; r++) {
        const float scale = uniform(0.1f, 1.5f);
        for (size_t j = 0; j < ne0; j++) x[r * ne0 + j] = scale * uniform(-1.0f, 1.0f);
    }
    for (size_t j = 32; j < 64; j++) x[j] = 0.0f;
    x[3] = 2.0f, x[13] = -2.0f;
    if (n_rows >= 3) std::fill(x.begin() + (long)ne0, x.begin() + 2 * (long)ne0, 0.0f);
    if (n_rows >= 2) {
        float *last = &x[(n_rows - 1) * ne0 + 64];
        last[0] = 127.0f, last[1] = 2.5f, last[2] = -3.5f, last[3] = 0.5f;
    }
    return x;
}

// Row r of an operand as the dot reads it.
static std::vector<float> dequant_operand(uint32_t op, const uint8_t *row, size_t ne0) {
    std::vector<float> v(ne0);
    for (size_t j = 0; j < ne0; j++) {
        switch (op) {
        case LLMM_TYPE_F32: std::memcpy(&v[j], row + 4 * j, 4); break;
        case LLMM_TYPE_F16: v[j] = llmm__f16_to_f32(((const llmm_f16 *)row)[j]); break;
        case LLMM_TYPE_BF16: v[j] = llmm__bf16_to_f32(((const llmm_bf16 *)row)[j]); break;
        case LLMM_TYPE_Q8_0: {
            const block_q8_0 *b = (const block_q8_0 *)row + j / 32;
            v[j] = llmm__f16_to_f32(b->d) * b->qs[j % 32];
            break;
        }
        case LLMM_TYPE_Q8_1: {
            const block_q8_1 *b = (const block_q8_1 *)row + j / 32;
            v[j] = llmm__f16_to_f32(b->d) * b->qs[j % 32];
            break;
        }
        case LLMM_TYPE_Q8_K: {
            const block_q8_K *b = (const block_q8_K *)row + j / 256;
            v[j] = b->d * b->qs[j % 256];
            break;
        }
        }
    }
    return v;
}

static void check_matmul(uint32_t type, size_t ne0, size_t ne1, size_t n_rows) {
    const char *name = llmm__type_get(type)->name;
    const llmm_type_traits *dot = llmm__type_get(type);
    assert_non_null(dot);
    const uint32_t op = dot->operand_type;
    assert_int_equal(llmm__cu_matmul_operand_type(type), op);
    const size_t w_row = row_bytes(type, ne0), op_row = row_bytes(op, ne0);

    const std::vector<uint8_t> w = random_weights(type, ne0, ne1);
    const std::vector<float> x = random_activations(ne0, n_rows);
    std::vector<uint8_t> xq(n_rows * op_row);
    for (size_t r = 0; r < n_rows; r++) llmm__type_get(op)->from_float(&x[r * ne0], &xq[r * op_row], ne0);

    uint8_t *w_dev = to_device(w);
    float *x_dev = to_device(x), *out_dev = nullptr;
    assert_int_equal(cudaMalloc(&out_dev, n_rows * ne1 * sizeof(float)), cudaSuccess);
    const size_t scratch_bytes = llmm__cu_matmul_scratch_bytes(type, ne0, n_rows);
    /* the GEMV pads Q8_0 operand blocks to 36 bytes and Q8_K ones to 304 (gemv_quant.cu
     * GQ_PADDED_Q8_0_BYTES, GQ_PADDED_Q8_K_BYTES) */
    const size_t padded_row = op == LLMM_TYPE_Q8_0 ? ne0 / 32 * 36 : op == LLMM_TYPE_Q8_K ? ne0 / 256 * 304 : op_row;
    /* in whole 16-byte units: the GEMV's staging reads the unit of the last byte whole */
    assert_int_equal(scratch_bytes, op == LLMM_TYPE_F32 ? 0 : (n_rows * padded_row + 15) / 16 * 16);
    void *scratch = nullptr;
    assert_int_equal(cudaMalloc(&scratch, scratch_bytes + 1), cudaSuccess);

    if (op != LLMM_TYPE_F32) {
        assert_int_equal(llmm__cu_quantize_operand(nullptr, x_dev, op, ne0, n_rows, scratch), 0);
        const std::vector<uint8_t> got = from_device((const uint8_t *)scratch, n_rows * op_row);
        for (size_t i = 0; i < got.size(); i++)
            if (got[i] != xq[i])
                fail_msg("%s operand %s, ne0 %zu: row %zu byte %zu is 0x%02x, the CPU's 0x%02x", name,
                         llmm__type_get(op)->name, ne0, i / op_row, i % op_row, got[i], xq[i]);
    }

    assert_int_equal(llmm__cu_matmul(nullptr, w_dev, type, ne0, ne1, x_dev, n_rows, out_dev, scratch), 0);
    if (op == LLMM_TYPE_Q8_0) { /* the padded operand: the CPU's scale, 2 zero bytes, its 32 quants */
        const std::vector<uint8_t> padded = from_device((const uint8_t *)scratch, n_rows * padded_row);
        for (size_t b = 0; b < n_rows * ne0 / 32; b++) {
            const uint8_t *cpu = &xq[b * 34], *gpu = &padded[b * 36];
            uint8_t want[36] = {cpu[0], cpu[1], 0, 0};
            std::memcpy(want + 4, cpu + 2, 32);
            if (std::memcmp(gpu, want, 36) != 0) fail_msg("%s: padded Q8_0 operand block %zu differs from the CPU's", name, b);
        }
    }
    if (op == LLMM_TYPE_Q8_K) { /* the CPU's scale, 12 zero bytes, its quants and bsums */
        const std::vector<uint8_t> padded = from_device((const uint8_t *)scratch, n_rows * padded_row);
        for (size_t b = 0; b < n_rows * ne0 / 256; b++) {
            const uint8_t *cpu = &xq[b * 292], *gpu = &padded[b * 304];
            uint8_t want[304] = {cpu[0], cpu[1], cpu[2], cpu[3]};
            std::memcpy(want + 16, cpu + 4, 288);
            if (std::memcmp(gpu, want, 304) != 0) fail_msg("%s: padded Q8_K operand block %zu differs from the CPU's", name, b);
        }
    }
    const std::vector<float> got = from_device(out_dev, n_rows * ne1);
    std::vector<float> w_deq(ne0);
    for (size_t r = 0; r < n_rows; r++) {
        const std::vector<float> x_deq = dequant_operand(op, &xq[r * op_row], ne0);
        for (size_t o = 0; o < ne1; o++) {
            const float want = dot->vec_dot(&w[o * w_row], &xq[r * op_row], ne0);
            llmm__type_get(type)->dequant_row(&w[o * w_row], w_deq.data(), ne0);
            double mag = 0;
            for (size_t j = 0; j < ne0; j++) mag += std::fabs((double)w_deq[j] * x_deq[j]);
            const double terms = llmm__type_get(type)->block_size == 1 ? ne0 / 8.0 : ne0 / 32.0;
            const double tol = (terms + 4) * std::ldexp(1.0, -23) * mag;
            const float g = got[r * ne1 + o];
            if (!(std::fabs((double)g - want) <= tol))
                fail_msg("%s ne0 %zu ne1 %zu n_rows %zu: out[%zu][%zu] = %.9g, the CPU's %.9g (tolerance %.3g)", name,
                         ne0, ne1, n_rows, r, o, (double)g, (double)want, tol);
        }
    }
    cudaFree(w_dev), cudaFree(x_dev), cudaFree(out_dev), cudaFree(scratch);
}

template <uint32_t T> static void test_matmul(void **state) {
    (void)state;
    static const size_t row_counts[4] = {1, 3, 8, 17};
    for (int shape = 0; shape < 4; shape++)
        for (size_t n_rows : row_counts) check_matmul(T, ne0_of(T, shape), ne1_of[shape], n_rows);
}

static void check_embed(uint32_t type) {
    const char *name = llmm__type_get(type)->name;
    const size_t ne0 = ne0_of(type, 0), ne1 = 37, w_row = row_bytes(type, ne0);
    const std::vector<uint8_t> table = random_weights(type, ne0, ne1);
    const std::vector<int32_t> tokens = {0, 36, 5, -1, 37, 5, 12, INT32_MIN};
    const size_t n = tokens.size();
    uint8_t *table_dev = to_device(table);
    int32_t *tokens_dev = to_device(tokens);
    float *out_dev = nullptr;
    int *bad_dev = nullptr;
    assert_int_equal(cudaMalloc(&out_dev, n * ne0 * sizeof(float)), cudaSuccess);
    assert_int_equal(cudaMalloc(&bad_dev, sizeof(int)), cudaSuccess);

    // only valid tokens first: the flag stays clear
    assert_int_equal(cudaMemset(bad_dev, 0, sizeof(int)), cudaSuccess);
    assert_int_equal(llmm__cu_embed(nullptr, table_dev, type, ne0, ne1, tokens_dev, 3, out_dev, bad_dev), 0);
    assert_int_equal(from_device(bad_dev, 1)[0], 0);

    assert_int_equal(llmm__cu_embed(nullptr, table_dev, type, ne0, ne1, tokens_dev, n, out_dev, bad_dev), 0);
    assert_int_equal(from_device(bad_dev, 1)[0], 1);
    const std::vector<float> got = from_device(out_dev, n * ne0);
    std::vector<float> want(ne0);
    for (size_t i = 0; i < n; i++) {
        const bool valid = tokens[i] >= 0 && (size_t)tokens[i] < ne1;
        if (valid) llmm__type_get(type)->dequant_row(&table[(size_t)tokens[i] * w_row], want.data(), ne0);
        for (size_t j = 0; j < ne0; j++) {
            const float g = got[i * ne0 + j];
            if (valid ? bits_of_f32(g) != bits_of_f32(want[j]) : !std::isnan(g))
                fail_msg("%s embed of token %d: value %zu is %.9g, want %.9g", name, tokens[i], j, (double)g,
                         valid ? (double)want[j] : NAN);
        }
    }
    cudaFree(table_dev), cudaFree(tokens_dev), cudaFree(out_dev), cudaFree(bad_dev);
}

static const uint32_t k_types[] = {
    LLMM_TYPE_F32,  LLMM_TYPE_F16,  LLMM_TYPE_BF16, LLMM_TYPE_Q4_0, LLMM_TYPE_Q4_1,
    LLMM_TYPE_Q5_0, LLMM_TYPE_Q5_1, LLMM_TYPE_Q8_0, LLMM_TYPE_Q2_K, LLMM_TYPE_Q3_K,
    LLMM_TYPE_Q4_K, LLMM_TYPE_Q5_K, LLMM_TYPE_Q6_K, LLMM_TYPE_IQ4_NL, LLMM_TYPE_IQ4_XS,
};

static void test_embed(void **state) {
    (void)state;
    for (uint32_t type : k_types) check_embed(type);
}

// A type without a kernel, or an ne0 that is not whole blocks, is refused before any launch.
static void test_refused(void **state) {
    (void)state;
    assert_int_equal(llmm__cu_matmul_operand_type(LLMM_TYPE_IQ2_XXS), UINT32_MAX);
    assert_int_equal(llmm__cu_matmul_scratch_bytes(LLMM_TYPE_IQ2_XXS, 256, 1), 0);
    assert_int_not_equal(llmm__cu_matmul(nullptr, nullptr, LLMM_TYPE_IQ2_XXS, 256, 4, nullptr, 1, nullptr, nullptr), 0);
    assert_int_not_equal(llmm__cu_matmul(nullptr, nullptr, LLMM_TYPE_Q4_K, 96, 4, nullptr, 1, nullptr, nullptr), 0);
    assert_int_not_equal(llmm__cu_embed(nullptr, nullptr, LLMM_TYPE_Q4_0, 48, 4, nullptr, 1, nullptr, nullptr), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matmul<LLMM_TYPE_F32>),   cmocka_unit_test(test_matmul<LLMM_TYPE_F16>),
        cmocka_unit_test(test_matmul<LLMM_TYPE_BF16>),  cmocka_unit_test(test_matmul<LLMM_TYPE_Q4_0>),
        cmocka_unit_test(test_matmul<LLMM_TYPE_Q4_1>),  cmocka_unit_test(test_matmul<LLMM_TYPE_Q5_0>),
        cmocka_unit_test(test_matmul<LLMM_TYPE_Q5_1>),  cmocka_unit_test(test_matmul<LLMM_TYPE_Q8_0>),
        cmocka_unit_test(test_matmul<LLMM_TYPE_IQ4_NL>), cmocka_unit_test(test_matmul<LLMM_TYPE_Q2_K>),
        cmocka_unit_test(test_matmul<LLMM_TYPE_Q3_K>),  cmocka_unit_test(test_matmul<LLMM_TYPE_Q4_K>),
        cmocka_unit_test(test_matmul<LLMM_TYPE_Q5_K>),  cmocka_unit_test(test_matmul<LLMM_TYPE_Q6_K>),
        cmocka_unit_test(test_matmul<LLMM_TYPE_IQ4_XS>), cmocka_unit_test(test_embed),
        cmocka_unit_test(test_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
