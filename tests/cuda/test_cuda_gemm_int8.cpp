// test_cuda_gemm_int8: cuda/gemm_int8.cu and its tensor-core primitive (cuda/mma_s8.cuh) under
// the SIMT emulation (and on a GPU in the device build):
// - mma_s8_m16n8k32, each lane packing its fragments from plain matrices as the PTX layout says
//   and unpacking D the same way, equals A times B plus C in plain integers (random int8
//   including -128 and 127, random C of both signs);
// - llmm__cu_gemm_int8_f32 equals the CPU's scalar dot (the type's vec_dot, format/quant.h, of
//   the weight row with the CPU-quantized Q8_0 operand row) bit for bit, for Q4_0, Q5_0, Q8_0 and IQ4_NL, with row
//   counts and widths that are not multiples of the 64 x 64 tile (1, 17, 64 and 130 activation
//   rows; 37 and 130 weight rows; 96 and 352 values: a last stage of 3 blocks, 256: two full
//   stages), and llmm__cu_matmul
//   (gemv_quant.cu) on the same inputs agrees within the tolerance its own test holds it to,
//   (ne0 / 32 + 4) * 2^-23 * sum_j |w_j x_j|;
// - llmm__cu_gemm_int8 on operand bytes given directly, with the extremes a file and the quantizer
//   allow (weights -128 and 127, operand -127 and 127: block sums near 2^19), is the CPU's bit
//   for bit, with every copy width of the staged tiles (8- and 4-byte cp.async, 2-byte loads of
//   rows or tensors only 2-byte aligned);
// - types without int8 weights and widths that are not whole blocks are refused.
// Every output is poisoned with NaN before each launch, so an unwritten element fails.
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

#include "gemm_int8.h"
#include "gemv_quant.h"
#include "kernels.h"
#include "mma_s8.cuh"

#include "device_test_util.h"
#include "support/rng.h"

static test_rng rng_state = rng_seeded(0x6d2b79f5u); // the data stream (support/rng.h)
static uint32_t rng() { return rng_u32(&rng_state); }
static float uniform(float lo, float hi) { return rng_float(&rng_state, lo, hi); }

static void poison(float *dev, size_t n) {
    const std::vector<float> nan(n, NAN);
    assert_int_equal(cudaMemcpy(dev, nan.data(), n * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
}

static bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// ---------------------------------------------------------------- the primitive

static __device__ uint32_t pack4(const int8_t *p) {
    return (uint32_t)(uint8_t)p[0] | (uint32_t)(uint8_t)p[1] << 8 | (uint32_t)(uint8_t)p[2] << 16 |
           (uint32_t)(uint8_t)p[3] << 24;
}

// One warp, the fragments packed straight from the PTX ISA's tables: a (16 x 32, row-major),
// b (32 x 8, stored as b[k * 8 + n]), c and d (16 x 8, row-major).
static __global__ void mma_kernel(const int8_t *a, const int8_t *b, const int32_t *c, int32_t *d) {
    const unsigned lane = threadIdx.x % 32, group = lane / 4, t = lane % 4;
    const uint32_t af[4] = {pack4(a + group * 32 + 4 * t), pack4(a + (group + 8) * 32 + 4 * t),
                            pack4(a + group * 32 + 16 + 4 * t), pack4(a + (group + 8) * 32 + 16 + 4 * t)};
    int8_t bcol[32]; // column `group` of b
    for (int k = 0; k < 32; k++) bcol[k] = b[k * 8 + group];
    const uint32_t bf[2] = {pack4(bcol + 4 * t), pack4(bcol + 16 + 4 * t)};
    const unsigned at[4] = {group * 8 + 2 * t, group * 8 + 2 * t + 1, (group + 8) * 8 + 2 * t,
                            (group + 8) * 8 + 2 * t + 1};
    const int32_t cf[4] = {c[at[0]], c[at[1]], c[at[2]], c[at[3]]};
    int32_t df[4];
    mma_s8_m16n8k32(df, af, bf, cf);
    for (int i = 0; i < 4; i++) d[at[i]] = df[i];
}

static void test_mma_primitive(void **state) {
    (void)state;
    for (int round = 0; round < 8; round++) {
        std::vector<int8_t> a(16 * 32), b(32 * 8);
        std::vector<int32_t> c(16 * 8);
        for (auto &v : a) v = (int8_t)(rng() >> 24);
        for (auto &v : b) v = (int8_t)(rng() >> 24);
        for (auto &v : c) v = (int32_t)(rng() % (1u << 22)) - (1 << 21);
        a[0] = -128, a[31] = 127, a[16 * 32 - 1] = -128, b[0] = -128, b[255] = 127;
        int8_t *a_dev = to_device(a), *b_dev = to_device(b);
        int32_t *c_dev = to_device(c), *d_dev = to_device(std::vector<int32_t>(16 * 8, INT32_MIN));
        SIMT_LAUNCH(mma_kernel, 1, 32, 0, nullptr, a_dev, b_dev, c_dev, d_dev);
        assert_int_equal(cudaGetLastError(), cudaSuccess);
        assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
        const std::vector<int32_t> d = from_device(d_dev, 16 * 8);
        for (int m = 0; m < 16; m++)
            for (int n = 0; n < 8; n++) {
                int32_t want = c[m * 8 + n];
                for (int k = 0; k < 32; k++) want += (int32_t)a[m * 32 + k] * b[k * 8 + n];
                if (d[m * 8 + n] != want) fail_msg("mma D[%d][%d] = %d, want %d", m, n, d[m * 8 + n], want);
            }
        cudaFree(a_dev), cudaFree(b_dev), cudaFree(c_dev), cudaFree(d_dev);
    }
}

// ---------------------------------------------------------------- the GEMM

static std::vector<uint8_t> random_weights(uint32_t type, size_t ne0, size_t ne1) {
    const size_t rb = llmm__row_bytes(type, ne0);
    std::vector<float> row(ne0);
    std::vector<uint8_t> w(ne1 * rb);
    for (size_t o = 0; o < ne1; o++) {
        const float scale = uniform(0.05f, 2.0f);
        for (size_t j = 0; j < ne0; j++) row[j] = scale * uniform(-1.0f, 1.0f);
        llmm__type_get(type)->from_float(row.data(), w.data() + o * rb, ne0);
    }
    return w;
}

// sum_j |w_j x_j| of one row pair as the dot sees them (dequantized), for llmm__cu_matmul's tolerance.
static double magnitude(uint32_t type, const uint8_t *w, const uint8_t *xq, size_t ne0) {
    std::vector<float> wv(ne0), xv(ne0);
    llmm__type_get(type)->dequant_row(w, wv.data(), ne0);
    llmm__type_get(LLMM_TYPE_Q8_0)->dequant_row(xq, xv.data(), ne0);
    double mag = 0;
    for (size_t j = 0; j < ne0; j++) mag += std::fabs((double)wv[j] * xv[j]);
    return mag;
}

static void check_gemm(uint32_t type, size_t ne0, size_t ne1, size_t n_rows) {
    const char *name = llmm__type_get(type)->name;
    const llmm_type_traits *dot = llmm__type_get(type);
    assert_non_null(dot);
    assert_int_equal(dot->operand_type, LLMM_TYPE_Q8_0);
    const size_t w_row = llmm__row_bytes(type, ne0), x_row = llmm__row_bytes(LLMM_TYPE_Q8_0, ne0);
    const std::vector<uint8_t> w = random_weights(type, ne0, ne1);
    std::vector<float> x(n_rows * ne0);
    for (size_t r = 0; r < n_rows; r++) {
        const float scale = uniform(0.1f, 3.0f);
        for (size_t j = 0; j < ne0; j++) x[r * ne0 + j] = scale * uniform(-1.0f, 1.0f);
    }
    std::vector<uint8_t> xq(n_rows * x_row);
    for (size_t r = 0; r < n_rows; r++) llmm__type_get(LLMM_TYPE_Q8_0)->from_float(&x[r * ne0], &xq[r * x_row], ne0);

    uint8_t *w_dev = to_device(w);
    float *x_dev = to_device(x), *out_dev = nullptr;
    assert_int_equal(cudaMalloc(&out_dev, n_rows * ne1 * sizeof(float)), cudaSuccess);
    void *scratch = nullptr;
    assert_int_equal(llmm__cu_gemm_int8_scratch_bytes(ne0, n_rows), n_rows * x_row);
    /* the GEMV's operand is padded (Q8_0 blocks to 36 bytes): the larger scratch serves both */
    const size_t gemv_scratch = llmm__cu_matmul_scratch_bytes(type, ne0, n_rows);
    assert_true(gemv_scratch >= n_rows * x_row);
    assert_int_equal(cudaMalloc(&scratch, gemv_scratch), cudaSuccess);

    poison(out_dev, n_rows * ne1);
    assert_int_equal(llmm__cu_gemm_int8_f32(nullptr, w_dev, type, ne0, ne1, x_dev, n_rows, out_dev, scratch), 0);
    assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
    const std::vector<float> got = from_device(out_dev, n_rows * ne1);
    poison(out_dev, n_rows * ne1);
    assert_int_equal(llmm__cu_matmul(nullptr, w_dev, type, ne0, ne1, x_dev, n_rows, out_dev, scratch), 0);
    assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
    const std::vector<float> gemv = from_device(out_dev, n_rows * ne1);

    for (size_t r = 0; r < n_rows; r++)
        for (size_t o = 0; o < ne1; o++) {
            const float want = dot->vec_dot(&w[o * w_row], &xq[r * x_row], ne0);
            const float g = got[r * ne1 + o], v = gemv[r * ne1 + o];
            if (!same_bits(g, want))
                fail_msg("%s ne0 %zu ne1 %zu n_rows %zu: out[%zu][%zu] = %.9g, the CPU's %.9g", name, ne0, ne1,
                         n_rows, r, o, (double)g, (double)want);
            const double tol = (ne0 / 32.0 + 4) * std::ldexp(1.0, -23) * magnitude(type, &w[o * w_row], &xq[r * x_row], ne0);
            if (!(std::fabs((double)g - v) <= tol))
                fail_msg("%s ne0 %zu ne1 %zu n_rows %zu: out[%zu][%zu] = %.9g, cu_matmul's %.9g (tolerance %.3g)",
                         name, ne0, ne1, n_rows, r, o, (double)g, (double)v, tol);
        }
    cudaFree(w_dev), cudaFree(x_dev), cudaFree(out_dev), cudaFree(scratch);
}

template <uint32_t T> static void test_gemm(void **state) {
    (void)state;
    /* 96 and 352: an odd count of blocks a row (2-byte copies, a last stage of 3 blocks); 256:
     * 8 blocks (8-byte cp.async, two full stages) */
    static const size_t ne0s[] = {96, 256, 352}, ne1s[] = {37, 130}, rows[] = {1, 17, 64, 130};
    for (size_t ne0 : ne0s)
        for (size_t ne1 : ne1s)
            for (size_t n_rows : rows) check_gemm(T, ne0, ne1, n_rows);
}

// Blocks as bytes: scale d (an f16 of magnitude 2^-8 .. 2^-1), then quants; `extreme` makes
// every quant byte the largest magnitude (0x80 = -128 for Q8_0, nibble 0 = -8 for Q4_0, -127 or
// +127 for the operand, by row): Q8_0's block sums reach 32 * 128 * 127, near 2^19.
static std::vector<uint8_t> raw_blocks(size_t n_blocks, size_t block_bytes, bool extreme, uint8_t extreme_byte) {
    std::vector<uint8_t> v(n_blocks * block_bytes);
    for (size_t b = 0; b < n_blocks; b++) {
        uint8_t *p = &v[b * block_bytes];
        const uint16_t d = (uint16_t)(((rng() % 8 + 7) << 10) | (rng() & 0x3ff) | (rng() & 1) << 15);
        p[0] = (uint8_t)d, p[1] = (uint8_t)(d >> 8);
        for (size_t j = 2; j < block_bytes; j++) p[j] = extreme ? extreme_byte : (uint8_t)(rng() >> 24);
    }
    return v;
}

// w_offset: the weights start that many bytes into their allocation (a tensor only 2-byte aligned)
static void check_raw(uint32_t type, size_t ne0, size_t ne1, size_t n_rows, bool extreme, size_t w_offset = 0) {
    const llmm_type_traits *dot = llmm__type_get(type);
    const size_t nb = ne0 / 32, w_row = llmm__row_bytes(type, ne0), x_row = llmm__row_bytes(LLMM_TYPE_Q8_0, ne0);
    const std::vector<uint8_t> w = raw_blocks(ne1 * nb, w_row / nb, extreme, type == LLMM_TYPE_Q8_0 ? 0x80 : 0x00);
    std::vector<uint8_t> xq = raw_blocks(n_rows * nb, x_row / nb, extreme, 0x7f);
    for (size_t r = 1; extreme && r < n_rows; r += 2) // odd rows -127: sums of both signs
        for (size_t b = 0; b < nb; b++) std::memset(&xq[r * x_row + b * 34 + 2], 0x81, 32);
    std::vector<uint8_t> w_placed(w_offset, 0xee);
    w_placed.insert(w_placed.end(), w.begin(), w.end());
    uint8_t *w_dev = to_device(w_placed), *xq_dev = to_device(xq);
    float *out_dev = nullptr;
    assert_int_equal(cudaMalloc(&out_dev, n_rows * ne1 * sizeof(float)), cudaSuccess);
    poison(out_dev, n_rows * ne1);
    assert_int_equal(llmm__cu_gemm_int8(nullptr, w_dev + w_offset, type, ne0, ne1, xq_dev, n_rows, out_dev), 0);
    assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
    const std::vector<float> got = from_device(out_dev, n_rows * ne1);
    for (size_t r = 0; r < n_rows; r++)
        for (size_t o = 0; o < ne1; o++) {
            const float want = dot->vec_dot(&w[o * w_row], &xq[r * x_row], ne0), g = got[r * ne1 + o];
            if (!same_bits(g, want))
                fail_msg("%s raw%s ne0 %zu: out[%zu][%zu] = %.9g, the CPU's %.9g", llmm__type_get(type)->name,
                         extreme ? " extreme" : "", ne0, r, o, (double)g, (double)want);
        }
    cudaFree(w_dev), cudaFree(xq_dev), cudaFree(out_dev);
}

static void test_raw_blocks(void **state) {
    (void)state;
    for (uint32_t type : {LLMM_TYPE_Q8_0, LLMM_TYPE_Q4_0})
        for (bool extreme : {false, true}) check_raw(type, 160, 19, 11, extreme);
    /* the copy widths of gemm_int8.cu's fetch_tile: 8 blocks a row (8 bytes), 6 (4 bytes: a last
     * stage of 2 blocks), 8 at an address 2 bytes past alignment (2 bytes), 5 (odd rows) */
    for (uint32_t type : {LLMM_TYPE_Q8_0, LLMM_TYPE_Q4_0, LLMM_TYPE_Q5_0, LLMM_TYPE_IQ4_NL}) {
        check_raw(type, 256, 70, 66, false);
        check_raw(type, 192, 19, 11, false);
        check_raw(type, 256, 19, 11, false, 2);
    }
}

static void test_refused(void **state) {
    (void)state;
    assert_true(llmm__cu_gemm_int8_supports(LLMM_TYPE_Q8_0));
    assert_true(llmm__cu_gemm_int8_supports(LLMM_TYPE_Q4_0));
    assert_false(llmm__cu_gemm_int8_supports(LLMM_TYPE_Q4_1));
    assert_false(llmm__cu_gemm_int8_supports(LLMM_TYPE_Q4_K));
    assert_false(llmm__cu_gemm_int8_supports(LLMM_TYPE_F16));
    assert_int_equal(llmm__cu_gemm_int8(nullptr, nullptr, LLMM_TYPE_Q4_1, 64, 4, nullptr, 1, nullptr), cudaErrorInvalidValue);
    assert_int_equal(llmm__cu_gemm_int8(nullptr, nullptr, LLMM_TYPE_Q4_0, 48, 4, nullptr, 1, nullptr), cudaErrorInvalidValue);
    assert_int_equal(llmm__cu_gemm_int8_f32(nullptr, nullptr, LLMM_TYPE_Q8_0, 48, 4, nullptr, 1, nullptr, nullptr),
                     cudaErrorInvalidValue);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mma_primitive),          cmocka_unit_test(test_gemm<LLMM_TYPE_Q4_0>),
        cmocka_unit_test(test_gemm<LLMM_TYPE_Q5_0>),   cmocka_unit_test(test_gemm<LLMM_TYPE_Q8_0>),
        cmocka_unit_test(test_gemm<LLMM_TYPE_IQ4_NL>), cmocka_unit_test(test_raw_blocks),
        cmocka_unit_test(test_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
