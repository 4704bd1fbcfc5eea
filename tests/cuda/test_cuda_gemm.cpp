// test_cuda_gemm: cuda/gemm.cu, under the SIMT emulation (make test: llmm__cu_lt_matmul is the
// reference GEMM there) and on a GPU (the device build: cuBLASLt), against references of its
// own and the CPU backend's dequantization:
// - llmm__cu_lt_matmul against a double-precision GEMM on random shapes, for F32, F16 and BF16
//   inputs, every transpose combination, leading dimensions above the minimum (the padding
//   poisoned with NaN, so reading it shows), alpha and beta (beta == 0 over a NaN C, which must
//   not be read), with and without the BIAS epilogue; C's padding rows must stay untouched.
//   Tolerance (k + 8) 2^-22 (|alpha| sum |a b| + |beta c| + |bias|): the inputs are exact in
//   the reference, so only F32 accumulation and the final scaling round.
// - its algorithm cache: a shape once, then hits (a pointer of another alignment is another
//   key); more shapes than it holds stay bounded and still compute right after eviction.
// - llmm__cu_gemm_dequant_tile bit for bit against the type's dequant_row rounded to F16 by the
//   core's llmm__f32_to_f16, for every type, tiles that end mid-matrix and at its end, into an
//   aligned destination (16-byte stores) and a misaligned one (2-byte stores); the row after
//   the tile must stay poisoned.
// - llmm__cu_gemm for every weight type, n_rows 1, 9, 33 and 130, ne1 = 300 in tiles of 128 (two
//   full and a partial one) and with the default tile, out poisoned with NaN:
//   1. against a double reference over the operands the GEMM is given (weights dequantized as
//      the CPU does and rounded to F16 when quantized, x rounded to F16, or BF16 for BF16
//      weights, or as is for F32): within (ne0 + 8) 2^-23 sum |w x|, the F32 accumulation's
//      bound;
//   2. against the exact math (the CPU's dequantized weights times the float x): the bound
//      above plus what rounding moves, sum_j dx_j |w_j| + dw_j |x_j| + dx_j dw_j, with
//      dv = 2^-11 |v| + 2^-25 for a value rounded to F16 (half an ulp, or half the smallest
//      subnormal), 2^-8 |v| for BF16, 0 for a value used as is.
// - the scratch bound: llmm__cu_gemm refuses (cudaErrorInvalidValue, out untouched) one byte less
//   than llmm__cu_gemm_scratch_bytes; the bound does not grow with ne1 past a tile; the tile is a
//   multiple of 128 rows within 16 MiB; bad types and partial blocks are refused.
// - llmm__cu_gemm inside a stream capture with a cold cache, the graph then replayed: it must
//   neither allocate nor synchronise (the emulation refuses both while capturing, as CUDA
//   does) and give the same checked results.
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

#include "gemm.h"

#include "device_test_util.h"
#include "support/numeric.h"
#include "support/rng.h"

static test_rng rng_state = rng_seeded(0x6a09e667u); // the data stream (support/rng.h)
static uint32_t rng() { return rng_u32(&rng_state); }
static float uniform(float lo, float hi) { return rng_float(&rng_state, lo, hi); }
static size_t below(size_t n) { return rng() % n; }

static const uint32_t k_poison_bits = 0x7fa5a5a5u; // a NaN no computation makes
static float poison_float() {
    float f;
    std::memcpy(&f, &k_poison_bits, sizeof f);
    return f;
}

static cu_lt *new_lt() {
    int err = -1;
    cu_lt *lt = llmm__cu_lt_create(nullptr, &err);
    assert_non_null(lt);
    assert_int_equal(err, 0);
    return lt;
}

// ---------------------------------------------------------------- llmm__cu_lt_matmul

static uint16_t f16_bits(float v) { return llmm__f32_to_f16(v); }
static uint16_t bf16_bits(float v) { return (uint16_t)(llmm_bf16_round_bits(bits_of_f32(v)) >> 16); }

// A rows x cols column-major operand with leading dimension ld, in ab_type: its device bytes
// (padding rows NaN) and its values as the GEMM reads them (rounded to the type), unpadded.
struct operand {
    std::vector<uint8_t> bytes;
    std::vector<double> values; // (i, j) at i + j * rows
};

static operand random_operand(uint32_t ab_type, size_t rows, size_t cols, size_t ld) {
    const size_t elem = ab_type == CU_LT_F32 ? 4 : 2;
    operand op;
    op.bytes.resize(ld * cols * elem);
    op.values.resize(rows * cols);
    for (size_t j = 0; j < cols; j++)
        for (size_t i = 0; i < ld; i++) {
            const float v = i < rows ? uniform(-1.0f, 1.0f) : poison_float();
            uint8_t *p = &op.bytes[(i + j * ld) * elem];
            float read;
            if (ab_type == CU_LT_F32) {
                std::memcpy(p, &v, 4);
                read = v;
            } else {
                const uint16_t h = ab_type == CU_LT_F16 ? f16_bits(v) : bf16_bits(v);
                std::memcpy(p, &h, 2);
                read = ab_type == CU_LT_F16 ? llmm__f16_to_f32(h) : llmm__bf16_to_f32(h);
            }
            if (i < rows) op.values[i + j * rows] = read;
        }
    return op;
}

struct lt_case {
    uint32_t ab_type;
    int trans_a, trans_b;
    size_t m, n, k, pad; // pad: extra rows of every leading dimension
    float alpha, beta;
    bool bias;
};

// Run one case through llmm__cu_lt_matmul and check every element of C, padding included.
static void check_lt_case(cu_lt *lt, const lt_case &t) {
    const size_t a_rows = t.trans_a ? t.k : t.m, a_cols = t.trans_a ? t.m : t.k;
    const size_t b_rows = t.trans_b ? t.n : t.k, b_cols = t.trans_b ? t.k : t.n;
    const size_t lda = a_rows + t.pad, ldb = b_rows + (t.pad + 1) % 3, ldc = t.m + t.pad;
    const operand a = random_operand(t.ab_type, a_rows, a_cols, lda), b = random_operand(t.ab_type, b_rows, b_cols, ldb);
    std::vector<float> c(ldc * t.n), bias(t.m);
    for (size_t j = 0; j < t.n; j++)
        for (size_t i = 0; i < ldc; i++) c[i + j * ldc] = i < t.m && t.beta != 0.0f ? uniform(-2.0f, 2.0f) : poison_float();
    for (float &v : bias) v = uniform(-1.0f, 1.0f);

    uint8_t *a_dev = to_device(a.bytes), *b_dev = to_device(b.bytes);
    float *c_dev = to_device(c), *bias_dev = to_device(bias);
    cu_lt_gemm g;
    std::memset(&g, 0, sizeof g);
    g.m = t.m, g.n = t.n, g.k = t.k, g.ab_type = t.ab_type, g.trans_a = t.trans_a, g.trans_b = t.trans_b;
    g.a = a_dev, g.lda = lda, g.b = b_dev, g.ldb = ldb, g.c = c_dev, g.ldc = ldc;
    g.alpha = t.alpha, g.beta = t.beta;
    g.epilogue = t.bias ? CU_LT_EPILOGUE_BIAS : CU_LT_EPILOGUE_NONE;
    g.bias = t.bias ? bias_dev : nullptr;
    assert_int_equal(llmm__cu_lt_matmul(lt, nullptr, &g), 0);
    assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
    const std::vector<float> got = from_device(c_dev, c.size());

    for (size_t j = 0; j < t.n; j++)
        for (size_t i = 0; i < ldc; i++) {
            const float gv = got[i + j * ldc];
            if (i >= t.m) {
                if (bits_of_f32(gv) != k_poison_bits)
                    fail_msg("type %u trans %d%d m %zu n %zu k %zu: padding C[%zu][%zu] written (%.9g)", t.ab_type,
                             t.trans_a, t.trans_b, t.m, t.n, t.k, i, j, (double)gv);
                continue;
            }
            double sum = 0, mag = 0;
            for (size_t l = 0; l < t.k; l++) {
                const double av = t.trans_a ? a.values[l + i * a_rows] : a.values[i + l * a_rows];
                const double bv = t.trans_b ? b.values[j + l * b_rows] : b.values[l + j * b_rows];
                sum += av * bv;
                mag += std::fabs(av * bv);
            }
            double want = t.alpha * sum;
            mag = std::fabs(t.alpha) * mag;
            if (t.beta != 0.0f) {
                want += (double)t.beta * c[i + j * ldc];
                mag += std::fabs((double)t.beta * c[i + j * ldc]);
            }
            if (t.bias) {
                want += bias[i];
                mag += std::fabs(bias[i]);
            }
            const double tol = (double)(t.k + 8) * std::ldexp(1.0, -22) * mag;
            if (!(std::fabs(gv - want) <= tol))
                fail_msg("type %u trans %d%d m %zu n %zu k %zu pad %zu alpha %g beta %g bias %d: C[%zu][%zu] = %.9g, "
                         "want %.9g (tolerance %.3g)",
                         t.ab_type, t.trans_a, t.trans_b, t.m, t.n, t.k, t.pad, (double)t.alpha, (double)t.beta,
                         (int)t.bias, i, j, (double)gv, want, tol);
        }
    cudaFree(a_dev), cudaFree(b_dev), cudaFree(c_dev), cudaFree(bias_dev);
}

static const uint32_t k_ab_types[3] = {CU_LT_F32, CU_LT_F16, CU_LT_BF16};

static void test_lt_matmul(void **state) {
    (void)state;
    cu_lt *lt = new_lt();
    static const struct {
        float alpha, beta;
        bool bias;
    } scalings[4] = {{1.0f, 0.0f, false}, {-0.75f, 0.5f, false}, {1.25f, 0.0f, true}, {0.5f, -1.0f, true}};
    for (uint32_t ab_type : k_ab_types)
        for (int trans = 0; trans < 4; trans++)
            for (int s = 0; s < 4; s++) {
                lt_case t;
                t.ab_type = ab_type, t.trans_a = trans & 1, t.trans_b = trans >> 1;
                t.m = 1 + below(48), t.n = 1 + below(48), t.k = 1 + below(80), t.pad = below(4);
                t.alpha = scalings[s].alpha, t.beta = scalings[s].beta, t.bias = scalings[s].bias;
                check_lt_case(lt, t);
            }
    // llmm__cu_gemm's layout at a size past one CTA tile in every dimension, and single rows/columns
    for (uint32_t ab_type : k_ab_types) {
        check_lt_case(lt, lt_case{ab_type, 1, 0, 130, 67, 257, 3, 1.0f, 0.0f, false});
        check_lt_case(lt, lt_case{ab_type, 1, 0, 1, 9, 64, 0, 1.0f, 0.0f, true});
        check_lt_case(lt, lt_case{ab_type, 0, 1, 37, 1, 5, 1, 2.0f, 0.25f, true});
    }
    llmm__cu_lt_free(lt);
}

// The cache: one miss per key, bounded, and right after eviction.
static void test_lt_cache(void **state) {
    (void)state;
    cu_lt *lt = new_lt();
    const size_t m = 40, n = 24, k = 32;
    std::vector<float> a(m * k), b(k * n);
    for (float &v : a) v = uniform(-1.0f, 1.0f);
    for (float &v : b) v = uniform(-1.0f, 1.0f);
    float *a_dev = to_device(a), *b_dev = to_device(b), *c_dev = nullptr;
    assert_int_equal(cudaMalloc(&c_dev, (m + CU_LT_CACHE_ENTRIES * 2 + 1) * n * sizeof(float)), cudaSuccess);
    cu_lt_gemm g;
    std::memset(&g, 0, sizeof g);
    g.m = m, g.n = n, g.k = k, g.ab_type = CU_LT_F32, g.a = a_dev, g.lda = m, g.b = b_dev, g.ldb = k;
    g.c = c_dev, g.ldc = m, g.alpha = 1.0f;
    size_t entries = 99, misses = 99;
    llmm__cu_lt_cache_stats(lt, &entries, &misses);
    assert_int_equal(entries, 0);
    assert_int_equal(misses, 0);
    for (int i = 0; i < 3; i++) assert_int_equal(llmm__cu_lt_matmul(lt, nullptr, &g), 0);
    llmm__cu_lt_cache_stats(lt, &entries, &misses);
    assert_int_equal(entries, 1);
    assert_int_equal(misses, 1);
    g.c = c_dev + 1; // 4-byte aligned instead of 256: another key
    assert_int_equal(llmm__cu_lt_matmul(lt, nullptr, &g), 0);
    llmm__cu_lt_cache_stats(lt, &entries, &misses);
    assert_int_equal(entries, 2);
    assert_int_equal(misses, 2);
    g.c = c_dev;
    assert_int_equal(llmm__cu_lt_matmul(lt, nullptr, &g), 0);
    llmm__cu_lt_cache_stats(lt, &entries, &misses);
    assert_int_equal(misses, 2);

    // twice as many keys as entries (ldc m + i): the cache stays full, never larger
    for (size_t i = 1; i <= 2 * CU_LT_CACHE_ENTRIES; i++) {
        g.ldc = m + i;
        assert_int_equal(llmm__cu_lt_matmul(lt, nullptr, &g), 0);
    }
    llmm__cu_lt_cache_stats(lt, &entries, &misses);
    assert_int_equal(entries, CU_LT_CACHE_ENTRIES);
    assert_int_equal(misses, 2 + 2 * CU_LT_CACHE_ENTRIES);
    llmm__cu_lt_free(lt);
    cudaFree(a_dev), cudaFree(b_dev), cudaFree(c_dev);

    // an evicted key computes right when it comes back
    lt = new_lt();
    for (size_t i = 0; i < CU_LT_CACHE_ENTRIES + 3; i++)
        check_lt_case(lt, lt_case{CU_LT_F16, 1, 0, 8 + i % (CU_LT_CACHE_ENTRIES + 1), 5, 16, 0, 1.0f, 0.0f, false});
    // (not the misses: each case's fresh buffers may differ in alignment, hence in key)
    llmm__cu_lt_cache_stats(lt, &entries, &misses);
    assert_int_equal(entries, CU_LT_CACHE_ENTRIES);
    llmm__cu_lt_free(lt);
}

// Calls outside the contract are refused before anything is enqueued.
static void test_lt_refused(void **state) {
    (void)state;
    cu_lt *lt = new_lt();
    std::vector<float> host(64, poison_float());
    float *dev = to_device(host);
    cu_lt_gemm good;
    std::memset(&good, 0, sizeof good);
    good.m = 4, good.n = 4, good.k = 4, good.ab_type = CU_LT_F32, good.a = dev, good.lda = 4, good.b = dev, good.ldb = 4;
    good.c = dev, good.ldc = 4, good.alpha = 1.0f;
    cu_lt_gemm g = good;
    g.lda = 3;
    assert_int_equal(llmm__cu_lt_matmul(lt, nullptr, &g), cudaErrorInvalidValue);
    g = good, g.trans_b = 1, g.n = 5; // B stored n x k: ldb 4 < 5
    assert_int_equal(llmm__cu_lt_matmul(lt, nullptr, &g), cudaErrorInvalidValue);
    g = good, g.ldc = 3;
    assert_int_equal(llmm__cu_lt_matmul(lt, nullptr, &g), cudaErrorInvalidValue);
    g = good, g.k = 0;
    assert_int_equal(llmm__cu_lt_matmul(lt, nullptr, &g), cudaErrorInvalidValue);
    g = good, g.ab_type = 8; // Q8_0
    assert_int_equal(llmm__cu_lt_matmul(lt, nullptr, &g), cudaErrorInvalidValue);
    g = good, g.epilogue = CU_LT_EPILOGUE_BIAS; // without a bias
    assert_int_equal(llmm__cu_lt_matmul(lt, nullptr, &g), cudaErrorInvalidValue);
    g = good, g.bias = dev; // a bias without the epilogue
    assert_int_equal(llmm__cu_lt_matmul(lt, nullptr, &g), cudaErrorInvalidValue);
    g = good, g.epilogue = 7;
    assert_int_equal(llmm__cu_lt_matmul(lt, nullptr, &g), cudaErrorInvalidValue);
    assert_int_equal(llmm__cu_lt_matmul(lt, nullptr, nullptr), cudaErrorInvalidValue);
    assert_int_equal(llmm__cu_lt_matmul(nullptr, nullptr, &good), cudaErrorInvalidValue);
    const std::vector<float> after = from_device(dev, host.size());
    for (float v : after) assert_int_equal(bits_of_f32(v), k_poison_bits);
    size_t entries = 99;
    llmm__cu_lt_cache_stats(lt, &entries, nullptr);
    assert_int_equal(entries, 0);
    cudaFree(dev);
    llmm__cu_lt_free(lt);
    llmm__cu_lt_free(nullptr);
}

// ---------------------------------------------------------------- weights

static const uint32_t k_types[] = {
    LLMM_TYPE_F32,  LLMM_TYPE_F16,  LLMM_TYPE_BF16, LLMM_TYPE_Q4_0, LLMM_TYPE_Q4_1,
    LLMM_TYPE_Q5_0, LLMM_TYPE_Q5_1, LLMM_TYPE_Q8_0, LLMM_TYPE_Q2_K, LLMM_TYPE_Q3_K,
    LLMM_TYPE_Q4_K, LLMM_TYPE_Q5_K, LLMM_TYPE_Q6_K, LLMM_TYPE_IQ4_NL, LLMM_TYPE_IQ4_XS,
};

static bool quantized(uint32_t type) { return llmm__type_get(type)->block_size > 1; }

// ne0 per type: whole blocks, not a multiple of 256 where the block is smaller; the element
// types' 100 is not a multiple of 8 (the dequantization's 16-byte groups).
static size_t ne0_of(uint32_t type, bool for_gemm) {
    const uint32_t bs = llmm__type_get(type)->block_size;
    return bs == 1 ? (for_gemm ? 200 : 100) : bs == 32 ? 160 : 512;
}

// Random weights of a type, as a file holds them (the core's reference quantizer).
static std::vector<uint8_t> random_weights(uint32_t type, size_t ne0, size_t ne1) {
    const size_t row_bytes = llmm__row_bytes(type, ne0);
    std::vector<float> row(ne0);
    std::vector<uint8_t> w(ne1 * row_bytes);
    for (size_t o = 0; o < ne1; o++) {
        const float scale = uniform(0.05f, 2.0f);
        for (size_t j = 0; j < ne0; j++) row[j] = scale * uniform(-1.0f, 1.0f);
        llmm__type_get(type)->from_float(row.data(), w.data() + o * row_bytes, ne0);
    }
    return w;
}

static void check_dequant_tile(uint32_t type, const std::vector<uint8_t> &w, const uint8_t *w_dev, size_t ne0,
                               size_t row0, size_t n, size_t dst_offset) {
    const char *name = llmm__type_get(type)->name;
    const size_t row_bytes = llmm__row_bytes(type, ne0), total = dst_offset + (n + 1) * ne0;
    uint16_t *dst = to_device(std::vector<uint16_t>(total, 0xaaaa));
    assert_int_equal(llmm__cu_gemm_dequant_tile(nullptr, w_dev, type, ne0, row0, n, dst + dst_offset), 0);
    assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
    const std::vector<uint16_t> got = from_device(dst, total);
    std::vector<float> want(ne0);
    for (size_t r = 0; r < n; r++) {
        llmm__type_get(type)->dequant_row(&w[(row0 + r) * row_bytes], want.data(), ne0);
        for (size_t j = 0; j < ne0; j++) {
            const uint16_t g = got[dst_offset + r * ne0 + j], h = llmm__f32_to_f16(want[j]);
            if (g != h)
                fail_msg("%s tile rows %zu+%zu (offset %zu): row %zu value %zu is 0x%04x, the CPU's %.9g -> 0x%04x",
                         name, row0, n, dst_offset, r, j, g, (double)want[j], h);
        }
    }
    for (size_t i = 0; i < total; i++)
        if ((i < dst_offset || i >= dst_offset + n * ne0) && got[i] != 0xaaaa)
            fail_msg("%s tile rows %zu+%zu (offset %zu): wrote element %zu outside the tile", name, row0, n,
                     dst_offset, i);
    cudaFree(dst);
}

static void test_dequant_tile(void **state) {
    (void)state;
    for (uint32_t type : k_types) {
        const size_t ne0 = ne0_of(type, false), ne1 = 37;
        const std::vector<uint8_t> w = random_weights(type, ne0, ne1);
        uint8_t *w_dev = to_device(w);
        check_dequant_tile(type, w, w_dev, ne0, 5, 20, 0);  // ends mid-matrix
        check_dequant_tile(type, w, w_dev, ne0, 30, 7, 0);  // ends at its last row
        check_dequant_tile(type, w, w_dev, ne0, 11, 13, 1); // a destination only 2-byte aligned
        cudaFree(w_dev);
    }
    assert_int_equal(llmm__cu_gemm_dequant_tile(nullptr, nullptr, LLMM_TYPE_IQ2_XXS, 256, 0, 1, nullptr),
                     cudaErrorInvalidValue);
    assert_int_equal(llmm__cu_gemm_dequant_tile(nullptr, nullptr, LLMM_TYPE_Q4_K, 96, 0, 1, nullptr), cudaErrorInvalidValue);
}

// The conversion of x: F16 and BF16 as the core rounds, including ties, subnormals and overflow.
static void test_convert(void **state) {
    (void)state;
    std::vector<float> x(1000);
    for (float &v : x) v = uniform(-4.0f, 4.0f) * std::ldexp(1.0f, (int)below(40) - 20);
    const float edges[] = {0.0f, -0.0f, 65504.0f, 65519.0f, 65520.0f, -1e9f, 1.0f + std::ldexp(1.0f, -11),
                           std::ldexp(1.0f, -24), std::ldexp(1.5f, -25), std::ldexp(1.0f, -30), 1.00390625f};
    std::memcpy(x.data(), edges, sizeof edges);
    float *x_dev = to_device(x);
    uint16_t *dst = nullptr;
    assert_int_equal(cudaMalloc(&dst, x.size() * 2), cudaSuccess);
    for (uint32_t type : {CU_LT_F16, CU_LT_BF16}) {
        assert_int_equal(llmm__cu_gemm_convert(nullptr, x_dev, x.size(), type, dst), 0);
        const std::vector<uint16_t> got = from_device(dst, x.size());
        for (size_t i = 0; i < x.size(); i++) {
            const uint16_t want = type == CU_LT_F16 ? f16_bits(x[i]) : bf16_bits(x[i]);
            if (got[i] != want)
                fail_msg("convert to type %u: %.9g became 0x%04x, the core's 0x%04x", type, (double)x[i], got[i], want);
        }
    }
    assert_int_equal(llmm__cu_gemm_convert(nullptr, x_dev, x.size(), CU_LT_F32, dst), cudaErrorInvalidValue);
    cudaFree(x_dev), cudaFree(dst);
}

// ---------------------------------------------------------------- llmm__cu_gemm

static double rounding_bound(double v, uint32_t as) { // |v - v rounded to type as|, at most
    if (as == CU_LT_F16) return std::ldexp(std::fabs(v), -11) + std::ldexp(1.0, -25);
    if (as == CU_LT_BF16) return std::ldexp(std::fabs(v), -8);
    return 0.0;
}

static float rounded(float v, uint32_t as) {
    if (as == CU_LT_F16) return llmm__f16_to_f32(f16_bits(v));
    if (as == CU_LT_BF16) return llmm__bf16_to_f32(bf16_bits(v));
    return v;
}

// tile_rows 0: llmm__cu_gemm's own tile. captured: llmm__cu_gemm recorded in a stream capture (thread-local,
// as backend.cu's graphs), the graph then launched.
static void check_gemm(cu_lt *lt, uint32_t type, size_t ne0, size_t ne1, size_t n_rows, size_t tile_rows,
                       bool captured = false) {
    const char *name = llmm__type_get(type)->name;
    const size_t row_bytes = llmm__row_bytes(type, ne0);
    const std::vector<uint8_t> w = random_weights(type, ne0, ne1);
    std::vector<float> x(n_rows * ne0);
    for (size_t r = 0; r < n_rows; r++) {
        const float scale = uniform(0.1f, 3.0f);
        for (size_t j = 0; j < ne0; j++) x[r * ne0 + j] = scale * uniform(-1.0f, 1.0f);
    }
    uint8_t *w_dev = to_device(w);
    float *x_dev = to_device(x);
    float *out_dev = to_device(std::vector<float>(n_rows * ne1 + 1, poison_float()));
    const size_t scratch_bytes = tile_rows ? llmm__cu_gemm_scratch_bytes_tiled(type, ne0, ne1, n_rows, tile_rows)
                                           : llmm__cu_gemm_scratch_bytes(type, ne0, ne1, n_rows);
    void *scratch = nullptr;
    assert_int_equal(cudaMalloc(&scratch, scratch_bytes ? scratch_bytes : 1), cudaSuccess);
    cudaStream_t stream = nullptr;
    if (captured) {
        assert_int_equal(cudaStreamCreate(&stream), cudaSuccess);
        assert_int_equal(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
    }
    const int err = tile_rows ? llmm__cu_gemm_tiled(lt, stream, w_dev, type, ne0, ne1, x_dev, n_rows, out_dev, scratch,
                                              scratch_bytes, tile_rows)
                              : llmm__cu_gemm(lt, stream, w_dev, type, ne0, ne1, x_dev, n_rows, out_dev, scratch,
                                        scratch_bytes);
    if (captured) {
        cudaGraph_t graph = nullptr;
        cudaGraphExec_t exec = nullptr;
        assert_int_equal(cudaStreamEndCapture(stream, &graph), cudaSuccess);
        assert_int_equal(err, 0);
        assert_int_equal(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
        assert_int_equal(cudaGraphLaunch(exec, stream), cudaSuccess);
        assert_int_equal(cudaStreamSynchronize(stream), cudaSuccess);
        cudaGraphExecDestroy(exec), cudaGraphDestroy(graph), cudaStreamDestroy(stream);
    }
    assert_int_equal(err, 0);
    assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
    const std::vector<float> got = from_device(out_dev, n_rows * ne1 + 1);
    assert_int_equal(bits_of_f32(got[n_rows * ne1]), k_poison_bits);

    // the operands as the GEMM sees them
    const uint32_t w_as = quantized(type) ? CU_LT_F16 : CU_LT_F32; // in place: exact
    const uint32_t x_as = type == LLMM_TYPE_F32 ? CU_LT_F32 : type == LLMM_TYPE_BF16 ? CU_LT_BF16 : CU_LT_F16;
    std::vector<float> w_deq(ne1 * ne0), w_used(ne1 * ne0), x_used(x.size());
    for (size_t o = 0; o < ne1; o++) llmm__type_get(type)->dequant_row(&w[o * row_bytes], &w_deq[o * ne0], ne0);
    for (size_t i = 0; i < w_deq.size(); i++) w_used[i] = rounded(w_deq[i], w_as);
    for (size_t i = 0; i < x.size(); i++) x_used[i] = rounded(x[i], x_as);

    for (size_t r = 0; r < n_rows; r++)
        for (size_t o = 0; o < ne1; o++) {
            const float *wu = &w_used[o * ne0], *wd = &w_deq[o * ne0], *xu = &x_used[r * ne0], *xe = &x[r * ne0];
            double used = 0, exact = 0, mag = 0, moved = 0;
            for (size_t j = 0; j < ne0; j++) {
                used += (double)wu[j] * xu[j];
                exact += (double)wd[j] * xe[j];
                mag += std::fabs((double)wu[j] * xu[j]);
                const double dx = rounding_bound(xe[j], x_as), dw = rounding_bound(wd[j], w_as);
                moved += dx * std::fabs(wd[j]) + dw * std::fabs(xe[j]) + dx * dw;
            }
            const double tol = (double)(ne0 + 8) * std::ldexp(1.0, -23) * mag;
            const float g = got[r * ne1 + o];
            if (!(std::fabs(g - used) <= tol))
                fail_msg("%s ne0 %zu ne1 %zu n_rows %zu tile %zu: out[%zu][%zu] = %.9g, over the operands given "
                         "%.9g (tolerance %.3g)",
                         name, ne0, ne1, n_rows, tile_rows, r, o, (double)g, used, tol);
            if (!(std::fabs(g - exact) <= tol + moved))
                fail_msg("%s ne0 %zu ne1 %zu n_rows %zu tile %zu: out[%zu][%zu] = %.9g, the exact %.9g (tolerance "
                         "%.3g)",
                         name, ne0, ne1, n_rows, tile_rows, r, o, (double)g, exact, tol + moved);
        }
    cudaFree(w_dev), cudaFree(x_dev), cudaFree(out_dev), cudaFree(scratch);
}

template <uint32_t T> static void test_gemm(void **state) {
    (void)state;
    cu_lt *lt = new_lt();
    const size_t ne0 = ne0_of(T, true), ne1 = 300; // tiles of 128: 128, 128, 44
    for (size_t n_rows : {1, 9, 33, 130}) check_gemm(lt, T, ne0, ne1, n_rows, 128);
    check_gemm(lt, T, ne0, ne1, 33, 0); // the default tile: one
    llmm__cu_lt_free(lt);
    // in a stream capture, cold (the first use of each key inside it, as a graph's first step)
    lt = new_lt();
    check_gemm(lt, T, ne0, ne1, 17, 128, true);
    llmm__cu_lt_free(lt);
}

// llmm__cu_gemm_convert_f16_scaled: a row whose largest |x| is below 2^15 is rounded as plain
// F16 (unscale 1); a larger one (1e5, and the largest float) is scaled by the power of two that
// brings it below 2^15, so nothing finite becomes infinite, and F16 value times unscale is the
// F16 rounding of x / unscale; an infinite row stays infinite. Then unscale_rows undoes it.
static void test_convert_f16_scaled(void **state) {
    (void)state;
    const size_t ne0 = 300, n_rows = 4;
    const float peak[n_rows] = {30000.0f, 1.0e5f, 3.0e38f, INFINITY};
    std::vector<float> x(n_rows * ne0);
    for (size_t r = 0; r < n_rows; r++)
        for (size_t i = 0; i < ne0; i++) x[r * ne0 + i] = i == 17 ? -peak[r] : uniform(-1.0f, 1.0f) * 1000.0f;
    float *x_dev = to_device(x), *unscale_dev = to_device(std::vector<float>(n_rows, poison_float()));
    uint16_t *h_dev = to_device(std::vector<uint16_t>(n_rows * ne0));
    assert_int_equal(llmm__cu_gemm_convert_f16_scaled(nullptr, x_dev, ne0, n_rows, h_dev, unscale_dev), cudaSuccess);
    const std::vector<uint16_t> h = from_device(h_dev, n_rows * ne0);
    const std::vector<float> unscale = from_device(unscale_dev, n_rows);
    const float want_unscale[n_rows] = {1.0f, 4.0f, 0x1p113f, 1.0f}; /* 1e5 / 4 < 2^15 <= 1e5 / 2 */
    for (size_t r = 0; r < n_rows; r++) {
        assert_true(unscale[r] == want_unscale[r]);
        for (size_t i = 0; i < ne0; i++) {
            const float v = x[r * ne0 + i];
            const uint16_t want = f16_bits(v / unscale[r]);
            if (h[r * ne0 + i] != want) fail_msg("row %zu, x[%zu] = %g: F16 %#x, want %#x", r, i, v, h[r * ne0 + i], want);
            if (r < 3) assert_true(isfinite(llmm__f16_to_f32(h[r * ne0 + i])));
        }
    }
    float *out_dev = to_device(std::vector<float>(n_rows * 3, 1.5f));
    assert_int_equal(llmm__cu_gemm_unscale_rows(nullptr, out_dev, 3, n_rows, unscale_dev), cudaSuccess);
    const std::vector<float> out = from_device(out_dev, n_rows * 3);
    for (size_t e = 0; e < n_rows * 3; e++) assert_true(out[e] == 1.5f * want_unscale[e / 3]);
    cudaFree(x_dev), cudaFree(unscale_dev), cudaFree(h_dev), cudaFree(out_dev);
}

static void test_gemm_scratch(void **state) {
    (void)state;
    // the tile: a multiple of 128 rows of at most 16 MiB of F16, or 128 rows of a wider row
    for (size_t ne0 : {32, 896, 4096, 5120, 14336, 1 << 20}) {
        const size_t rows = llmm__cu_gemm_tile_rows(ne0);
        assert_int_equal(rows % 128, 0);
        assert_true(rows == 128 || 2 * ne0 * rows <= ((size_t)16 << 20));
        assert_true(2 * ne0 * (rows + 128) > ((size_t)16 << 20));
    }
    assert_int_equal(llmm__cu_gemm_tile_rows(4096), 2048);
    assert_int_equal(llmm__cu_gemm_tile_rows(14336), 512);

    // bounded in ne1: past one tile the width no longer matters
    const size_t x_part = 2 * 4096 * 512, unscale_part = 4 * 512;
    assert_int_equal(llmm__cu_gemm_scratch_bytes(LLMM_TYPE_Q4_K, 4096, SIZE_MAX, 512),
                     x_part + unscale_part + 2 * 4096 * 2048);
    assert_int_equal(llmm__cu_gemm_scratch_bytes(LLMM_TYPE_Q4_K, 4096, 2048, 512), x_part + unscale_part + 2 * 4096 * 2048);
    assert_int_equal(llmm__cu_gemm_scratch_bytes(LLMM_TYPE_Q4_K, 4096, 1000, 512), x_part + unscale_part + 2 * 4096 * 1000);
    assert_int_equal(llmm__cu_gemm_scratch_bytes(LLMM_TYPE_F16, 4096, SIZE_MAX, 512), x_part);
    assert_int_equal(llmm__cu_gemm_scratch_bytes(LLMM_TYPE_BF16, 4096, SIZE_MAX, 512), x_part);
    assert_int_equal(llmm__cu_gemm_scratch_bytes(LLMM_TYPE_F32, 4096, SIZE_MAX, 512), 0);
    assert_int_equal(llmm__cu_gemm_scratch_bytes(LLMM_TYPE_IQ2_XXS, 4096, 64, 512), 0);

    // one byte short is refused, and nothing is written
    cu_lt *lt = new_lt();
    for (uint32_t type : {LLMM_TYPE_Q4_0, LLMM_TYPE_Q6_K, LLMM_TYPE_F16, LLMM_TYPE_BF16}) {
        const size_t ne0 = ne0_of(type, true), ne1 = 70, n_rows = 9;
        const std::vector<uint8_t> w = random_weights(type, ne0, ne1);
        std::vector<float> x(n_rows * ne0);
        for (float &v : x) v = uniform(-1.0f, 1.0f);
        uint8_t *w_dev = to_device(w);
        float *x_dev = to_device(x), *out_dev = to_device(std::vector<float>(n_rows * ne1, poison_float()));
        const size_t need = llmm__cu_gemm_scratch_bytes(type, ne0, ne1, n_rows);
        assert_true(need > 0);
        void *scratch = nullptr;
        assert_int_equal(cudaMalloc(&scratch, need), cudaSuccess);
        assert_int_equal(llmm__cu_gemm(lt, nullptr, w_dev, type, ne0, ne1, x_dev, n_rows, out_dev, scratch, need - 1),
                         cudaErrorInvalidValue);
        assert_int_equal(llmm__cu_gemm_tiled(lt, nullptr, w_dev, type, ne0, ne1, x_dev, n_rows, out_dev, scratch, need, 0),
                         cudaErrorInvalidValue);
        assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
        for (float v : from_device(out_dev, n_rows * ne1)) assert_int_equal(bits_of_f32(v), k_poison_bits);
        assert_int_equal(llmm__cu_gemm(lt, nullptr, w_dev, type, ne0, ne1, x_dev, n_rows, out_dev, scratch, need), 0);
        assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
        for (float v : from_device(out_dev, n_rows * ne1)) assert_true(std::isfinite(v));
        cudaFree(w_dev), cudaFree(x_dev), cudaFree(out_dev), cudaFree(scratch);
    }
    // types without math and partial blocks, whatever the scratch
    assert_int_equal(llmm__cu_gemm(lt, nullptr, nullptr, LLMM_TYPE_IQ2_XXS, 256, 4, nullptr, 9, nullptr, nullptr, SIZE_MAX),
                     cudaErrorInvalidValue);
    assert_int_equal(llmm__cu_gemm(lt, nullptr, nullptr, LLMM_TYPE_Q4_K, 96, 4, nullptr, 9, nullptr, nullptr, SIZE_MAX),
                     cudaErrorInvalidValue);
    assert_int_equal(llmm__cu_gemm(nullptr, nullptr, nullptr, LLMM_TYPE_F32, 96, 4, nullptr, 9, nullptr, nullptr, 0),
                     cudaErrorInvalidValue);
    llmm__cu_lt_free(lt);
}

// The dequantized tile follows the device's L2 (cudaDevAttrL2CacheSize): at most half of it, at
// most 16 MiB, at least 128 rows; and llmm__cu_gemm's result does not depend on the tiling. The
// emulated device is told its L2 size (simt_device.h); a GPU answers its own, so there only the
// rule is checked against the answer.
static void test_tile_follows_l2(void **state) {
    (void)state;
    const size_t ne0 = 256, ne1 = 300, n_rows = 9; // 512 bytes a row of F16
#if SIMT_EMULATED
    std::vector<float> outputs[2];
    const int l2_sizes[2] = {50 << 20, 256 << 10};      // an H100's; a small one: 2 tiles (256, 44)
    const size_t want_rows[2] = {(size_t)16 << 20 >> 9, 256};
    const std::vector<uint8_t> w = random_weights(LLMM_TYPE_Q4_0, ne0, ne1);
    std::vector<float> x(n_rows * ne0);
    for (float &v : x) v = uniform(-2.0f, 2.0f);
    for (int i = 0; i < 2; i++) {
        simt::set_device_attribute(cudaDevAttrL2CacheSize, l2_sizes[i]);
        assert_int_equal(llmm__cu_gemm_tile_rows(ne0), want_rows[i]);
        assert_int_equal(llmm__cu_gemm_tile_rows(1 << 20), 128); // the floor
        cu_lt *lt = new_lt();
        uint8_t *w_dev = to_device(w);
        float *x_dev = to_device(x), *out_dev = nullptr;
        assert_int_equal(cudaMalloc(&out_dev, n_rows * ne1 * sizeof(float)), cudaSuccess);
        const size_t scratch_bytes = llmm__cu_gemm_scratch_bytes(LLMM_TYPE_Q4_0, ne0, ne1, n_rows);
        void *scratch = nullptr;
        assert_int_equal(cudaMalloc(&scratch, scratch_bytes), cudaSuccess);
        assert_int_equal(llmm__cu_gemm(lt, nullptr, w_dev, LLMM_TYPE_Q4_0, ne0, ne1, x_dev, n_rows, out_dev, scratch,
                                       scratch_bytes), 0);
        outputs[i] = from_device(out_dev, n_rows * ne1);
        cudaFree(w_dev), cudaFree(x_dev), cudaFree(out_dev), cudaFree(scratch);
        llmm__cu_lt_free(lt);
    }
    simt::set_device_attribute(cudaDevAttrL2CacheSize, l2_sizes[0]);
    for (size_t i = 0; i < outputs[0].size(); i++) assert_int_equal(bits_of_f32(outputs[0][i]), bits_of_f32(outputs[1][i]));
#else
    int device = 0, l2 = 0;
    assert_int_equal(cudaGetDevice(&device), cudaSuccess);
    assert_int_equal(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device), cudaSuccess);
    const size_t tile = (size_t)l2 / 2 < ((size_t)16 << 20) ? (size_t)l2 / 2 : (size_t)16 << 20;
    const size_t rows = tile / (2 * ne0) / 128 * 128;
    assert_int_equal(llmm__cu_gemm_tile_rows(ne0), rows > 128 ? rows : 128);
    (void)ne1, (void)n_rows;
#endif
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lt_matmul),
        cmocka_unit_test(test_lt_cache),
        cmocka_unit_test(test_lt_refused),
        cmocka_unit_test(test_dequant_tile),
        cmocka_unit_test(test_convert),
        cmocka_unit_test(test_gemm<LLMM_TYPE_F32>),
        cmocka_unit_test(test_gemm<LLMM_TYPE_F16>),
        cmocka_unit_test(test_gemm<LLMM_TYPE_BF16>),
        cmocka_unit_test(test_gemm<LLMM_TYPE_Q4_0>),
        cmocka_unit_test(test_gemm<LLMM_TYPE_Q4_1>),
        cmocka_unit_test(test_gemm<LLMM_TYPE_Q5_0>),
        cmocka_unit_test(test_gemm<LLMM_TYPE_Q5_1>),
        cmocka_unit_test(test_gemm<LLMM_TYPE_Q8_0>),
        cmocka_unit_test(test_gemm<LLMM_TYPE_IQ4_NL>),
        cmocka_unit_test(test_gemm<LLMM_TYPE_Q2_K>),
        cmocka_unit_test(test_gemm<LLMM_TYPE_Q3_K>),
        cmocka_unit_test(test_gemm<LLMM_TYPE_Q4_K>),
        cmocka_unit_test(test_gemm<LLMM_TYPE_Q5_K>),
        cmocka_unit_test(test_gemm<LLMM_TYPE_Q6_K>),
        cmocka_unit_test(test_gemm<LLMM_TYPE_IQ4_XS>),
        cmocka_unit_test(test_convert_f16_scaled),
        cmocka_unit_test(test_gemm_scratch),
        cmocka_unit_test(test_tile_follows_l2),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
