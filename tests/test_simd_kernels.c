/* SIMD kernel tests: every kernel of every table this CPU supports (AVX2, AVX-512 on x86-64;
 * NEON, NEON dotprod on aarch64), against the scalar reference (the type's vec_dot, the
 * scalar kernel table) on seeded random data (never zeros) and odd sizes; a table the CPU
 * lacks is skipped with a printed reason.
 * Then the CPU backend with each table forced (LLMM_CPU_KERNELS) at 1, 2 and 3 threads, the
 * kernel selection, and the packed weight copies the tables make. (The scalar dots against
 * float64: test_weight_formats.c; the thread pool: test_threadpool.c.)
 *
 * Tolerances (u = 2^-24):
 *  - Q8 and Q8_K operands (activation quantization), f16 operand rounding: exact (quants,
 *    scales and block or group sums equal to llmm__quantize_row_q8_0's and
 *    llmm__quantize_row_q8_K's; f16 values equal to the table's from_float).
 *  - Q4_0 and Q8_0 matmul: the integer block sums are exact in any order and the kernels keep
 *    the scalar's float order, so outputs must equal the table's vec_dot bit for bit. With all
 *    scales 1.0 the output is the integer dot itself: checked equal to an int64 reference.
 *  - Q2_K..Q6_K and IQ4_XS (Q8_K operand), Q5_0, Q4_1, Q5_1, IQ4_NL matmul: bit for bit vec_dot
 *    likewise; with d (and dmin or m) 1.0 and random bytes elsewhere, the output is checked
 *    equal to the int64 dot of the dequantized integers (the data keep every sum below 2^24).
 *  - F32 matmul: bit for bit the scalar (same partial sums, no FMA); axpy: bit for bit the
 *    scalar (one fused multiply-add per value).
 *  - attn_scores, attn_values (attention over a chunk of positions, all heads at once): bit
 *    for bit the same table's dot_f32 per (head, position) and axpy per position in order,
 *    in every table that has them (every SIMD table must); score lanes past n untouched.
 *  - attn_scores_f16, attn_values_f16 (the same over F16 rows, widened in registers): bit for
 *    bit the same table's attn_scores and attn_values on the rows widened beforehand.
 *  - dot_f32 (attention's q.k): (n/8 + 4) u sum|a b| against float64 (FMA partial sums, a
 *    tree of 3 adds, then the tail: at most n/8 + 4 roundings per term), and bit for bit the
 *    scalar table's, so every table scores attention alike.
 *  - F16 and BF16 matmul: bit for bit vec_dot (16 float lanes of exact products, lib/quant.c).
 *  - exp (through exp_sub_sum), the scalar table's too: within 2 ulp of the float64 e^x over
 *    [-103, 88.7], 0 below the subnormal range, +inf above FLT_MAX's logarithm.
 *  - silu_mul: 12u |ref| against float64 (8u plus 2 ulp = 4u for the polynomial exp), and
 *    bit for bit the scalar table's.
 *  - gelu_mul (the scalar table's too): (4|z| + 12) u |ref| against float64's
 *    0.5 x (1 + tanh(u)) = x / (1 + e^z), z = -2u the exp's argument (its rounding grows with |z|), and bit for
 *    bit the scalar table's.
 *  - rms_norm_row: 10u |ref| against float64, as for the scalar kernel, and bit for bit the
 *    scalar table's (also for magnitudes spread over 2^40).
 *  - exp_sub_sum's returned sum: (n + 4) 2u relative, against float64; its values and sum bit
 *    for bit the scalar table's (lengths with and without a tail of each vector width).
 *  - delta_step, delta_read, delta_update (Gated DeltaNet's state): the scalar table's within
 *    4 (d + 4) u of its terms' magnitudes against float64, every SIMD table's bit for bit it.
 *  - conv_rows (the short convolution): the scalar table's within (taps + 1) u of its
 *    products' magnitudes against float64, every SIMD table's bit for bit it.
 * Results must not depend on tiling: each matmul is also run as single-row calls over odd
 * row ranges and must give the same bits. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <float.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "backend/backend.h"
#include "cpu_backend.h"
#include "kernel_table.h"
#include "kv_rows.h"
#include "packed_tiles.h"
#include "support/alloc.h"
#include "support/fixtures.h"
#include "support/numeric.h"
#include "support/rng.h"
#include "format/quant.h"

/* The tables of this build's architecture (the others compile to nothing). */
#if defined(__aarch64__)
static const cpu_isa k_simd_isas[] = {CPU_ISA_NEON, CPU_ISA_NEON_DOTPROD};
#else
static const cpu_isa k_simd_isas[] = {CPU_ISA_AVX2, CPU_ISA_AVX_VNNI, CPU_ISA_AVX512, CPU_ISA_AMX};
#endif
static const char *const k_isa_names[CPU_ISA_COUNT] = {"scalar", "avx2",    "avxvnni", "avx512",
                                                        "neon",   "dotprod", "amx"};

/* ------------------------------------------------------------------ helpers */

/* The data stream: every test seeds it (rng_seed) before drawing. */
static test_rng rng;

/* The table for isa, or NULL after printing why it is skipped. */
static const cpu_kernels *simd_table(cpu_isa isa) {
    const cpu_kernels *k = llmm__cpu_kernels_get(isa);
    if (!k) print_message("skipped %s: this CPU lacks it\n", k_isa_names[isa]);
    return k;
}

/* The table for isa, which must have a matmul kernel for type: every SIMD table (x86 and
 * NEON) covers every type the tests check, so a missing kernel is a failure, not a silent
 * fall back to the generic path. */
static const cpu_kernels *gemm_table(cpu_isa isa, uint32_t type) {
    const cpu_kernels *k = simd_table(isa);
    if (k && !k->matmul[type]) fail_msg("%s has no %s gemm", k->name, llmm__type_get(type)->name);
    return k;
}

/* Q4_0 rows with the reference encoding (llmm__quantize_row_q4_0), others through from_float. */
static void encode_row(uint32_t type, const float *x, void *dst, size_t n) {
    if (type == LLMM_TYPE_Q4_0) llmm__quantize_row_q4_0(x, dst, n);
    else llmm__type_get(type)->from_float(x, dst, n);
}

/* ================================================================== operands */

/* Blocks of several kinds: random over a few magnitudes, exact .5 ties of x * 127 / amax
 * (amax 127, so the multiplier is exactly 1), a single non-zero value, all zeros. */
static void fill_q8_cases(float *x, size_t n) {
    for (size_t b = 0; b < n / 32; b++) {
        float *xb = x + b * 32;
        const int kind = (int)(b % 5);
        const float scale = kind == 0 ? 1e-3f : kind == 1 ? 300.0f : 1.0f;
        for (int j = 0; j < 32; j++) xb[j] = rng_float(&rng, -2.0f * scale, 2.0f * scale);
        if (kind == 2)
            for (int j = 0; j < 32; j++) xb[j] = j == 0 ? 127.0f : (float)(j % 2 ? 1 : -1) * ((float)(j % 40) + 0.5f);
        if (kind == 3)
            for (int j = 0; j < 32; j++) xb[j] = j == 7 ? -3.25f : 0.0f;
        if (kind == 4 && b % 2)
            for (int j = 0; j < 32; j++) xb[j] = 0.0f;
    }
}

/* A table's Q8_1 operand fields against llmm__quantize_row_q8_1, bit for bit (s NaN for NaN). */
static void check_quantize_q8_1(const cpu_kernels *k, const float *x, size_t n) {
    const size_t nb = n / 32;
    block_q8_1 *ref = xmalloc(nb * sizeof *ref);
    int8_t *qs = xmalloc(n);
    float *d = xmalloc(nb * sizeof *d), *s = xmalloc(nb * sizeof *s);
    llmm__quantize_row_q8_1(x, ref, n);
    k->quantize_q8_1(x, qs, d, s, n);
    for (size_t b = 0; b < nb; b++) {
        assert_memory_equal(qs + b * 32, ref[b].qs, 32);
        const float want_d = llmm__f16_to_f32(ref[b].d), want_s = llmm__f16_to_f32(ref[b].s);
        if (bits_of_f32(d[b]) != bits_of_f32(want_d) || (bits_of_f32(s[b]) != bits_of_f32(want_s) && !(isnan(s[b]) && isnan(want_s))))
            fail_msg("%s q8_1 n=%zu block %zu: d %.9g s %.9g, want %.9g %.9g", k->name, n, b, (double)d[b],
                     (double)s[b], (double)want_d, (double)want_s);
    }
    free(ref);
    free(qs);
    free(d);
    free(s);
}

static void test_quantize_q8_exact(void **state) {
    (void)state;
    const size_t sizes[] = {32, 96, 224, 736, 4864};
    for (size_t ii = 0; ii < ARRAY_LEN(k_simd_isas); ii++) {
        const cpu_kernels *k = simd_table(k_simd_isas[ii]);
        if (!k) continue;
        rng_seed(&rng, 1001);
        for (size_t si = 0; si < ARRAY_LEN(sizes); si++) {
            const size_t n = sizes[si], nb = n / 32;
            float *x = xmalloc(n * sizeof *x);
            fill_q8_cases(x, n);
            block_q8_0 *ref = xmalloc(nb * sizeof *ref);
            llmm__quantize_row_q8_0(x, ref, n);
            int8_t *qs = xmalloc(n);
            float *d = xmalloc(nb * sizeof *d);
            int32_t *sum = xmalloc(nb * sizeof *sum);
            k->quantize_q8(x, qs, d, sum, n);
            if (k->quantize_q8_1) check_quantize_q8_1(k, x, n);
            for (size_t b = 0; b < nb; b++) {
                int32_t want_sum = 0;
                for (int j = 0; j < 32; j++) {
                    if (qs[b * 32 + j] != ref[b].qs[j])
                        fail_msg("%s q8 n=%zu block %zu elem %d: %d want %d (x %.9g)", k->name, n, b, j,
                                 qs[b * 32 + j], ref[b].qs[j], (double)x[b * 32 + j]);
                    want_sum += ref[b].qs[j];
                }
                if (bits_of_f32(d[b]) != bits_of_f32(llmm__f16_to_f32(ref[b].d)))
                    fail_msg("%s q8 n=%zu block %zu scale %.9g want %.9g", k->name, n, b, (double)d[b],
                             (double)llmm__f16_to_f32(ref[b].d));
                assert_int_equal(sum[b], want_sum);
            }
            free(x);
            free(ref);
            free(qs);
            free(d);
            free(sum);
        }
    }
}

/* Non-finite activations (a damaged file's weights can make them): a table's Q8 quants must
 * stay in [-127, 127] and each block sum must be the sum of its stored quants, since kernels
 * multiply it by 128 or 16 (a NaN once made the sum INT_MIN + a few while the packs saturated
 * the quant, and that product overflowed). Blocks with NaN, +inf, -inf, or several. */
static void test_quantize_q8_non_finite(void **state) {
    (void)state;
    enum { N = 32 * 20 };
    for (size_t ii = 0; ii < ARRAY_LEN(k_simd_isas); ii++) {
        const cpu_kernels *k = simd_table(k_simd_isas[ii]);
        if (!k) continue;
        rng_seed(&rng, 1003);
        float *x = xmalloc(N * sizeof *x), *d = xmalloc(N / 32 * sizeof *d);
        int8_t *qs = xmalloc(N);
        int32_t *sum = xmalloc(N / 32 * sizeof *sum);
        for (size_t i = 0; i < N; i++) x[i] = rng_float(&rng, -3.0f, 3.0f);
        for (size_t b = 0; b < N / 32; b++) {
            const float bad[3] = {NAN, INFINITY, -INFINITY};
            for (size_t j = 0; j <= b % 4; j++) x[b * 32 + (b * 7 + j * 13) % 32] = bad[(b + j) % 3];
        }
        /* the largest value and a NaN in one vector lane (elements 18 and 26): the NaN can hide it
         * from amax, leaving its product far above 127 but within int32 (found by make fuzz) */
        for (size_t b = 0; b < N / 32; b += 5) {
            x[b * 32 + 18] = b % 2 ? -1000.0f : 1000.0f;
            x[b * 32 + 26] = NAN;
        }
        k->quantize_q8(x, qs, d, sum, N);
        for (size_t b = 0; b < N / 32; b++) {
            int32_t want = 0;
            for (int j = 0; j < 32; j++) {
                if (qs[b * 32 + j] < -127) fail_msg("%s q8 block %zu elem %d: %d", k->name, b, j, qs[b * 32 + j]);
                want += qs[b * 32 + j];
            }
            if (sum[b] != want) fail_msg("%s q8 block %zu: sum %d, quants sum to %d", k->name, b, sum[b], want);
        }
        free(x);
        free(d);
        free(qs);
        free(sum);
    }
}

/* Q8_K super-blocks of many kinds (the kind cycles with the block index, offset by row): random
 * over a few magnitudes and over 2^-60 .. 2^60, all zeros (signed zeros among them), one huge
 * negative value, exact .5 ties of iscale * x (max -127, 127 or -254: iscale exactly 1, -1 or
 * 0.5), subnormals only (iscale overflows to -inf: 0 * inf is NaN, clamped to -128), values
 * near FLT_MAX, +a and -a both the largest magnitude (the first sets the sign), the largest
 * value last, a single non-zero value. */
enum { Q8K_KINDS = 13 };
static void fill_q8k_block(float *x, int kind) {
    const float scale = kind == 0 ? 1e-3f : kind == 1 ? 300.0f : 1.0f;
    for (int j = 0; j < QK_K; j++) x[j] = rng_float(&rng, -2.0f * scale, 2.0f * scale);
    switch (kind) {
    case 2:
        for (int j = 0; j < QK_K; j++)
            x[j] = ldexpf(rng_float(&rng, 1.0f, 2.0f), (int)(rng_u64(&rng) % 121) - 60) * (j % 3 ? 1.0f : -1.0f);
        break;
    case 3:
        for (int j = 0; j < QK_K; j++) x[j] = j % 5 ? 0.0f : -0.0f;
        break;
    case 4: x[rng_u64(&rng) % QK_K] = -1e30f; break;
    case 5:
    case 6:
    case 7: {
        const float max = kind == 5 ? -127.0f : kind == 6 ? 127.0f : -254.0f, step = kind == 7 ? 2.0f : 1.0f;
        for (int j = 0; j < QK_K; j++) x[j] = (float)(j % 2 ? 1 : -1) * step * ((float)(j % 127) + 0.5f);
        x[rng_u64(&rng) % QK_K] = max;
        break;
    }
    case 8:
        for (int j = 0; j < QK_K; j++) x[j] = j % 4 ? rng_float(&rng, -1e-39f, 1e-39f) : 0.0f;
        break;
    case 9:
        for (int j = 0; j < QK_K; j++) x[j] = rng_float(&rng, -FLT_MAX, FLT_MAX);
        x[17] = -FLT_MAX;
        break;
    case 10: {
        const size_t a = rng_u64(&rng) % QK_K, b = rng_u64(&rng) % QK_K;
        const float m = a % 2 ? 3.5f : -3.5f;
        x[a] = m;
        if (b != a) x[b] = -m;
        break;
    }
    case 11: x[QK_K - 1] = rng_u64(&rng) % 2 ? 7.0f : -7.0f; break;
    case 12:
        for (int j = 0; j < QK_K; j++) x[j] = 0.0f;
        x[rng_u64(&rng) % QK_K] = rng_float(&rng, -1e-20f, 1e-20f);
        break;
    default: break;
    }
}

static void test_quantize_q8k_exact(void **state) {
    (void)state;
    const size_t sizes[] = {256, 512, 1024, 4608, 4864};
    enum { ROWS = 40 };
    for (size_t ii = 0; ii < ARRAY_LEN(k_simd_isas); ii++) {
        const cpu_kernels *k = simd_table(k_simd_isas[ii]);
        if (!k) continue;
        if (!k->quantize_q8k) fail_msg("%s has no quantize_q8k", k->name);
        rng_seed(&rng, 1002);
        size_t blocks = 0;
        for (size_t si = 0; si < ARRAY_LEN(sizes); si++) {
            const size_t n = sizes[si], nb = n / QK_K;
            float *x = xmalloc(n * sizeof *x), *d = xmalloc(nb * sizeof *d);
            block_q8_K *ref = xmalloc(nb * sizeof *ref);
            int8_t *qs = xmalloc(n);
            int16_t *bsums = xmalloc(n / 16 * sizeof *bsums);
            for (size_t r = 0; r < ROWS; r++) {
                for (size_t b = 0; b < nb; b++) fill_q8k_block(x + b * QK_K, (int)((b + r) % Q8K_KINDS));
                llmm__quantize_row_q8_K(x, ref, n);
                memset(qs, 0x5a, n);
                k->quantize_q8k(x, qs, d, bsums, n);
                for (size_t b = 0; b < nb; b++, blocks++) {
                    const int kind = (int)((b + r) % Q8K_KINDS);
                    if (bits_of_f32(d[b]) != bits_of_f32(ref[b].d))
                        fail_msg("%s q8k n=%zu row %zu block %zu (kind %d): d %.9g want %.9g", k->name, n, r, b, kind,
                                 (double)d[b], (double)ref[b].d);
                    for (int j = 0; j < QK_K; j++)
                        if (qs[b * QK_K + j] != ref[b].qs[j])
                            fail_msg("%s q8k n=%zu row %zu block %zu (kind %d) elem %d: %d want %d (x %.9g)",
                                     k->name, n, r, b, kind, j, qs[b * QK_K + j], ref[b].qs[j],
                                     (double)x[b * QK_K + j]);
                    if (memcmp(bsums + b * (QK_K / 16), ref[b].bsums, sizeof ref[b].bsums) != 0)
                        fail_msg("%s q8k n=%zu row %zu block %zu (kind %d): group sums differ", k->name, n, r, b, kind);
                }
            }
            free(x);
            free(d);
            free(ref);
            free(qs);
            free(bsums);
        }
        print_message("%s: %zu Q8_K super-blocks bit for bit\n", k->name, blocks);
    }
}

static void test_round_f16_exact(void **state) {
    (void)state;
    const size_t sizes[] = {1, 7, 33, 173, 1001};
    for (size_t ii = 0; ii < ARRAY_LEN(k_simd_isas); ii++) {
        const cpu_kernels *k = simd_table(k_simd_isas[ii]);
        if (!k) continue;
        rng_seed(&rng, 1002);
        for (size_t si = 0; si < ARRAY_LEN(sizes); si++) {
            const size_t n = sizes[si];
            float *x = rng_floats(&rng, n, -70000.0f, 70000.0f); /* past the f16 range: inf */
            for (size_t i = 0; i < n; i += 3) x[i] *= 1e-6f;    /* and subnormal halves */
            llmm_f16 *h = xmalloc(n * sizeof *h);
            float *got = xmalloc(n * sizeof *got);
            llmm__type_get(LLMM_TYPE_F16)->from_float(x, h, n);
            k->round_f16(x, got, n);
            for (size_t i = 0; i < n; i++)
                if (!(got[i] == llmm__f16_to_f32(h[i])))
                    fail_msg("%s f16 rounding of %.9g: %.9g want %.9g", k->name, (double)x[i], (double)got[i],
                             (double)llmm__f16_to_f32(h[i]));
            free(x);
            free(h);
            free(got);
        }
    }
}

/* bf16 rounding written out independently of llmm_bf16_round_bits, which the type table and
 * llmm__cpu_round_bf16 share: a NaN keeps its top bits and gets the quiet bit, anything else rounds
 * to nearest with ties to even. */
static uint16_t bf16_reference(uint32_t u) {
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
    const uint32_t low = u & 0xffffu, up = u >> 16;
    return (uint16_t)(low > 0x8000u || (low == 0x8000u && (up & 1u)) ? up + 1u : up);
}

/* The BF16 operand rounding: every bit of the type table's from_float and of an independent
 * reference, widened, over random bit patterns (NaNs, infinities and subnormals among them)
 * and the halfway cases of both parities, at lengths with and without a tail past the blocks
 * of eight. */
static void test_round_bf16_exact(void **state) {
    (void)state;
    enum { N = 4099 };
    uint32_t *bits = xmalloc(N * sizeof *bits);
    float *x = xmalloc(N * sizeof *x), *got = xmalloc(N * sizeof *got);
    llmm_bf16 *h = xmalloc(N * sizeof *h);
    rng_seed(&rng, 1003);
    for (size_t i = 0; i < N; i++) bits[i] = (uint32_t)rng_u64(&rng);
    const uint32_t special[] = {0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0x7f800001u,
                                0xffbfffffu, 0x00000001u, 0x007fffffu, 0x7f7fffffu, 0x7f7f8000u, 0x3f808000u,
                                0x3f818000u, 0x3f807fffu, 0x3f818001u, 0xbf808000u};
    memcpy(bits, special, sizeof special);
    memcpy(x, bits, N * sizeof *x);
    const size_t sizes[] = {1, 7, 8, 9, 33, N};
    for (size_t si = 0; si < ARRAY_LEN(sizes); si++) {
        const size_t n = sizes[si];
        llmm__type_get(LLMM_TYPE_BF16)->from_float(x, h, n);
        llmm__cpu_round_bf16(x, got, n);
        for (size_t i = 0; i < n; i++) {
            const uint32_t want = (uint32_t)bf16_reference(bits[i]) << 16;
            uint32_t g;
            memcpy(&g, got + i, sizeof g);
            if (g != want) fail_msg("bf16 rounding of 0x%08x (n=%zu): 0x%08x want 0x%08x", bits[i], n, g, want);
            if (((uint32_t)h[i] << 16) != want)
                fail_msg("type table bf16 of 0x%08x: 0x%04x want 0x%08x", bits[i], h[i], want);
        }
    }
    free(bits);
    free(x);
    free(got);
    free(h);
}

/* ================================================================== matmul kernels */

/* The kernel's operand, built with the kernel table's own preparation (as llmm__cpu_matmul does). */
typedef struct operand_buf {
    cpu_operand op;
    int8_t *qs;
    float *d;
    int32_t *sum;
    int16_t *bsums;
    float *s;
    float *half;
} operand_buf;

static void operand_make(const cpu_kernels *k, cpu_operand_kind kind, const float *x, size_t n_rows, size_t n,
                         operand_buf *o) {
    memset(o, 0, sizeof *o);
    o->op.n = n;
    if (kind == CPU_OPERAND_F32) {
        o->op.f32 = x;
    } else if (kind == CPU_OPERAND_Q8) {
        const size_t nb = n / 32;
        o->qs = xmalloc(n_rows * n);
        o->d = xmalloc(n_rows * nb * sizeof *o->d);
        o->sum = xmalloc(n_rows * nb * sizeof *o->sum);
        for (size_t r = 0; r < n_rows; r++)
            k->quantize_q8(x + r * n, o->qs + r * n, o->d + r * nb, o->sum + r * nb, n);
        o->op.qs = o->qs;
        o->op.d = o->d;
        o->op.sum = o->sum;
    } else if (kind == CPU_OPERAND_Q8_1) {
        /* the type table's Q8_1 blocks, split by field */
        const size_t nb = n / 32;
        block_q8_1 *blk = xmalloc(nb * sizeof *blk);
        o->qs = xmalloc(n_rows * n);
        o->d = xmalloc(n_rows * nb * sizeof *o->d);
        o->s = xmalloc(n_rows * nb * sizeof *o->s);
        for (size_t r = 0; r < n_rows; r++) {
            llmm__quantize_row_q8_1(x + r * n, blk, n);
            for (size_t b = 0; b < nb; b++) {
                o->d[r * nb + b] = llmm__f16_to_f32(blk[b].d);
                o->s[r * nb + b] = llmm__f16_to_f32(blk[b].s);
                memcpy(o->qs + r * n + b * 32, blk[b].qs, 32);
            }
        }
        free(blk);
        o->op.qs = o->qs;
        o->op.d = o->d;
        o->op.s = o->s;
    } else if (kind == CPU_OPERAND_Q8K) {
        /* the type table's Q8_K blocks, split by field */
        const size_t nb = n / QK_K;
        block_q8_K *blk = xmalloc(nb * sizeof *blk);
        o->qs = xmalloc(n_rows * n);
        o->d = xmalloc(n_rows * nb * sizeof *o->d);
        o->bsums = xmalloc(n_rows * (n / 16) * sizeof *o->bsums);
        for (size_t r = 0; r < n_rows; r++) {
            llmm__quantize_row_q8_K(x + r * n, blk, n);
            for (size_t b = 0; b < nb; b++) {
                o->d[r * nb + b] = blk[b].d;
                memcpy(o->qs + r * n + b * QK_K, blk[b].qs, QK_K);
                memcpy(o->bsums + r * (n / 16) + b * 16, blk[b].bsums, sizeof blk[b].bsums);
            }
        }
        free(blk);
        o->op.qs = o->qs;
        o->op.d = o->d;
        o->op.bsums = o->bsums;
    } else {
        const uint32_t t = kind == CPU_OPERAND_F16 ? LLMM_TYPE_F16 : LLMM_TYPE_BF16;
        uint16_t *h = xmalloc(n * sizeof *h);
        o->half = xmalloc(n_rows * n * sizeof *o->half);
        for (size_t r = 0; r < n_rows; r++) {
            llmm__type_get(t)->from_float(x + r * n, h, n);
            for (size_t i = 0; i < n; i++)
                o->half[r * n + i] = t == LLMM_TYPE_F16 ? llmm__f16_to_f32(h[i]) : llmm__bf16_to_f32(h[i]);
        }
        o->op.f32 = o->half;
        free(h);
    }
}

static void operand_free(operand_buf *o) {
    free(o->qs);
    free(o->d);
    free(o->sum);
    free(o->bsums);
    free(o->s);
    free(o->half);
}

/* The operand row for the type's vec_dot (its trait's operand_type, format/quant.h). */
static void *table_operand(uint32_t wtype, const float *x, size_t n) {
    const uint32_t op = llmm__type_get(wtype)->operand_type;
    void *p = xmalloc(llmm__row_bytes(op, n));
    llmm__type_get(op)->from_float(x, p, n);
    return p;
}

typedef struct mm_case {
    uint32_t type;
    size_t ne0, ne1, n_rows;
} mm_case;

typedef struct mm_stats {
    size_t outputs, bit_equal;
} mm_stats;

/* One case: the kernel over all rows at once against vec_dot per output, then the same
 * product as single weight rows and odd row ranges, which must give identical bits. */
static void check_gemm_case(const cpu_kernels *k, const mm_case *c, mm_stats *st) {
    const cpu_gemm_fn gemm = k->matmul[c->type];
    assert_non_null(gemm);
    const llmm_type_traits *t = llmm__type_get(c->type);
    const size_t rb = llmm__row_bytes(c->type, c->ne0);
    float *wf = rng_floats(&rng, c->ne0 * c->ne1, -2.0f, 2.0f), *x = rng_floats(&rng, c->ne0 * c->n_rows, -2.0f, 2.0f);
    uint8_t *w = xmalloc(rb * c->ne1); /* exact size: over-reads trip ASan */
    for (size_t j = 0; j < c->ne1; j++) encode_row(c->type, wf + j * c->ne0, w + j * rb, c->ne0);
    const llmm_tensor wt = {
        .data = w, .type = c->type, .ne0 = (int64_t)c->ne0, .ne1 = (int64_t)c->ne1, .row_bytes = rb};
    operand_buf ob;
    operand_make(k, cpu_operand_of(c->type), x, c->n_rows, c->ne0, &ob);
    /* one guard value on each side of the output catches writes past it */
    const size_t n_out = c->n_rows * c->ne1;
    float *buf = xmalloc((n_out + 2) * sizeof *buf), *out = buf + 1, *again = xmalloc(n_out * sizeof *again);
    fill_nan(buf, n_out + 2);
    buf[0] = buf[n_out + 1] = -7.0f;
    gemm(&wt, 0, c->ne1, &ob.op, c->n_rows, out, c->ne1);
    assert_true(buf[0] == -7.0f && buf[n_out + 1] == -7.0f);

    for (size_t r = 0; r < c->n_rows; r++) {
        void *xq = table_operand(c->type, x + r * c->ne0, c->ne0);
        for (size_t j = 0; j < c->ne1; j++) {
            const float got = out[r * c->ne1 + j], want = t->vec_dot(w + j * rb, xq, c->ne0);
            st->outputs++;
            st->bit_equal += bits_of_f32(got) == bits_of_f32(want);
            if (bits_of_f32(got) != bits_of_f32(want))
                fail_msg("%s %s ne0=%zu ne1=%zu rows=%zu out[%zu][%zu] = %.9g, vec_dot %.9g", k->name, t->name,
                         c->ne0, c->ne1, c->n_rows, r, j, (double)got, (double)want);
        }
        free(xq);
    }

    /* tiling independence: rows in ranges of 1, 3, 11 and 17 (odd splits of the 8- and 16-row
     * tiles), all operand rows at once, then each operand row alone (AVX-512 takes other
     * tiles for one operand row than for several) */
    const size_t steps[] = {1, 3, 11, 17};
    for (size_t si = 0; si < ARRAY_LEN(steps); si++) {
        fill_nan(again, n_out);
        for (size_t j0 = 0; j0 < c->ne1; j0 += steps[si])
            gemm(&wt, j0, LLMM_MIN(c->ne1, j0 + steps[si]), &ob.op, c->n_rows, again, c->ne1);
        if (memcmp(out, again, n_out * sizeof *out) != 0)
            fail_msg("%s %s ne0=%zu ne1=%zu rows=%zu: row ranges of %zu, all operand rows, give other bits", k->name,
                     t->name, c->ne0, c->ne1, c->n_rows, steps[si]);
        fill_nan(again, n_out);
        for (size_t r = 0; r < c->n_rows; r++) {
            cpu_operand one = ob.op;
            const size_t nb = c->ne0 / 32;
            if (one.f32) one.f32 += r * c->ne0;
            if (one.qs && one.bsums) {
                one.qs += r * c->ne0;
                one.d += r * (c->ne0 / QK_K);
                one.bsums += r * (c->ne0 / 16);
            } else if (one.qs && one.s) {
                one.qs += r * c->ne0;
                one.d += r * nb;
                one.s += r * nb;
            } else if (one.qs) {
                one.qs += r * c->ne0;
                one.d += r * nb;
                one.sum += r * nb;
            }
            for (size_t j0 = 0; j0 < c->ne1; j0 += steps[si])
                gemm(&wt, j0, LLMM_MIN(c->ne1, j0 + steps[si]), &one, 1, again + r * c->ne1, c->ne1);
        }
        if (memcmp(out, again, n_out * sizeof *out) != 0)
            fail_msg("%s %s ne0=%zu ne1=%zu rows=%zu: row ranges of %zu give other bits", k->name, t->name, c->ne0,
                     c->ne1, c->n_rows, steps[si]);
    }
    operand_free(&ob);
    free(wf);
    free(x);
    free(w);
    free(buf);
    free(again);
}

/* Steps of 2-16 operand rows (speculative verification, a few sequences decoded together, a
 * short prompt chunk): each count alone, across the tables' switch between the 8-row kernels
 * and the tiles packed on the fly, over two whole 16-row tiles and a rest. */
static void check_small_batches(const cpu_kernels *k, uint32_t type, size_t ne0, mm_stats *st) {
    for (size_t n_rows = 2; n_rows <= 16; n_rows++) {
        const mm_case mc = {type, ne0, 37, n_rows};
        check_gemm_case(k, &mc, st);
    }
}

static void check_gemm_type(uint32_t type, uint64_t seed) {
    const size_t ne0_float[] = {1, 7, 33, 173, 896}, ne0_block[] = {32, 96, 224, 736};
    const int blocked = llmm__type_get(type)->block_size > 1;
    const size_t *ne0s = blocked ? ne0_block : ne0_float;
    const size_t n_ne0 = blocked ? ARRAY_LEN(ne0_block) : ARRAY_LEN(ne0_float);
    const size_t ne1s[] = {1, 3, 5, 8, 37, 45};
    const size_t rows[] = {1, 3, 5, 37};
    for (size_t ii = 0; ii < ARRAY_LEN(k_simd_isas); ii++) {
        const cpu_kernels *k = gemm_table(k_simd_isas[ii], type);
        if (!k) continue;
        rng_seed(&rng, seed);
        mm_stats st = {0, 0};
        for (size_t a = 0; a < n_ne0; a++)
            for (size_t b = 0; b < ARRAY_LEN(ne1s); b++)
                for (size_t c = 0; c < ARRAY_LEN(rows); c++) {
                    if (ne0s[a] > 224 && rows[c] == 37 && ne1s[b] >= 37) continue; /* time */
                    const mm_case mc = {type, ne0s[a], ne1s[b], rows[c]};
                    check_gemm_case(k, &mc, &st);
                }
        /* rows longer than one segment of gathered scales (256 blocks), odd block count */
        const mm_case long_rows = {type, blocked ? 32 * 263 : 8419, 9, 5};
        check_gemm_case(k, &long_rows, &st);
        /* more operand rows than share one packed segment of AVX2's prompt tiles (64) */
        const mm_case many_rows = {type, blocked ? 32 * 71 : 896, 37, 70};
        check_gemm_case(k, &many_rows, &st);
        /* more than the AMX tiles' 128 operand rows per packed segment, with a rest past the 16s */
        const mm_case more_rows = {type, blocked ? 32 * 23 : 173, 21, 157};
        check_gemm_case(k, &more_rows, &st);
        check_small_batches(k, type, blocked ? 32 * 28 : 896, &st);
        print_message("%s %s gemm: %zu outputs, %zu bit-identical to vec_dot\n", k->name, llmm__type_get(type)->name,
                      st.outputs, st.bit_equal);
    }
}

/* K-quants: rows of 1-3 super-blocks, 1-37 weight rows (partial tiles, a moved-back last
 * tile, tensors under 8 rows) and 1-17 operand rows (partial operand tiles of both tables). */
static void check_gemm_kquant(uint32_t type, uint64_t seed) {
    const size_t ne0s[] = {256, 512, 768}, ne1s[] = {1, 3, 5, 8, 17, 37}, rows[] = {1, 3, 5, 17};
    for (size_t ii = 0; ii < ARRAY_LEN(k_simd_isas); ii++) {
        const cpu_kernels *k = gemm_table(k_simd_isas[ii], type);
        if (!k) continue;
        rng_seed(&rng, seed);
        mm_stats st = {0, 0};
        for (size_t a = 0; a < ARRAY_LEN(ne0s); a++)
            for (size_t b = 0; b < ARRAY_LEN(ne1s); b++)
                for (size_t c = 0; c < ARRAY_LEN(rows); c++) {
                    const mm_case mc = {type, ne0s[a], ne1s[b], rows[c]};
                    check_gemm_case(k, &mc, &st);
                }
        const mm_case ffn_down = {type, 4864, 11, 6}; /* the 0.5B model's ffn_down rows */
        check_gemm_case(k, &ffn_down, &st);
        /* several packed segments of AVX2's prompt tiles (a Q6_K one is 4 super-blocks), more
         * operand rows than share one (64), whole and moved-back tiles */
        const mm_case many_rows = {type, 256 * 9, 37, 70};
        check_gemm_case(k, &many_rows, &st);
        check_small_batches(k, type, 512, &st);
        print_message("%s %s gemm: %zu outputs, %zu bit-identical to vec_dot\n", k->name, llmm__type_get(type)->name,
                      st.outputs, st.bit_equal);
    }
}

static void test_gemm_q2_K(void **state) {
    (void)state;
    check_gemm_kquant(LLMM_TYPE_Q2_K, 2010);
}
static void test_gemm_q3_K(void **state) {
    (void)state;
    check_gemm_kquant(LLMM_TYPE_Q3_K, 2011);
}
static void test_gemm_q4_K(void **state) {
    (void)state;
    check_gemm_kquant(LLMM_TYPE_Q4_K, 2012);
}
static void test_gemm_q5_K(void **state) {
    (void)state;
    check_gemm_kquant(LLMM_TYPE_Q5_K, 2013);
}
static void test_gemm_q6_K(void **state) {
    (void)state;
    check_gemm_kquant(LLMM_TYPE_Q6_K, 2014);
}

static void test_gemm_q5_0(void **state) {
    (void)state;
    check_gemm_type(LLMM_TYPE_Q5_0, 2020);
}
static void test_gemm_q4_1(void **state) {
    (void)state;
    check_gemm_type(LLMM_TYPE_Q4_1, 2021);
}
static void test_gemm_q5_1(void **state) {
    (void)state;
    check_gemm_type(LLMM_TYPE_Q5_1, 2022);
}
static void test_gemm_iq4_nl(void **state) {
    (void)state;
    check_gemm_type(LLMM_TYPE_IQ4_NL, 2023);
}
static void test_gemm_iq4_xs(void **state) {
    (void)state;
    check_gemm_kquant(LLMM_TYPE_IQ4_XS, 2015);
}

static void test_gemm_q4_0(void **state) {
    (void)state;
    check_gemm_type(LLMM_TYPE_Q4_0, 2001);
}
static void test_gemm_q8_0(void **state) {
    (void)state;
    check_gemm_type(LLMM_TYPE_Q8_0, 2002);
}
static void test_gemm_f32(void **state) {
    (void)state;
    check_gemm_type(LLMM_TYPE_F32, 2003);
}
static void test_gemm_f16(void **state) {
    (void)state;
    check_gemm_type(LLMM_TYPE_F16, 2004);
}
static void test_gemm_bf16(void **state) {
    (void)state;
    check_gemm_type(LLMM_TYPE_BF16, 2005);
}

/* With every scale 1.0 (f16 0x3c00) on both sides the output is the integer dot itself
 * (|dot| < 2^24, exact in float): the kernels' integer block sums against an int64 reference,
 * with extreme quants (Q8_0 weights -128 and 127, nibbles 0 and 15, activations +-127). */
static void check_integer_sums(uint32_t type) {
    enum { NE0 = 32 * 23, NE1 = 19, NB = NE0 / 32 };
    for (size_t ii = 0; ii < ARRAY_LEN(k_simd_isas); ii++) {
        const cpu_kernels *k = simd_table(k_simd_isas[ii]);
        if (!k) continue;
        rng_seed(&rng, 2100 + type);
        const size_t rb = llmm__row_bytes(type, NE0);
        uint8_t *w = xmalloc(rb * NE1);
        memset(w, 0, rb * NE1);
        int8_t *xq = xmalloc(NE0);
        float xd[NB];
        int32_t xs[NB];
        for (size_t i = 0; i < NE0; i++)
            xq[i] = (int8_t)(i % 17 == 0 ? 127 : i % 19 == 0 ? -127 : (int)(rng_u64(&rng) % 255) - 127);
        for (size_t b = 0; b < NB; b++) {
            xd[b] = 1.0f;
            xs[b] = 0;
            for (int j = 0; j < 32; j++) xs[b] += xq[b * 32 + j];
        }
        int64_t want[NE1];
        for (size_t j = 0; j < NE1; j++) {
            want[j] = 0;
            for (size_t b = 0; b < NB; b++) {
                uint8_t *blk = w + j * rb + b * (rb / NB);
                blk[0] = 0x00;
                blk[1] = 0x3c; /* d = 1.0 */
                for (int e = 0; e < 32; e++) {
                    int q;
                    if (type == LLMM_TYPE_Q8_0) {
                        q = e == 3 ? -128 : e == 4 ? 127 : (int)(rng_u64(&rng) % 256) - 128;
                        blk[2 + e] = (uint8_t)(int8_t)q;
                    } else {
                        const int nib = e == 0 ? 0 : e == 1 ? 15 : (int)(rng_u64(&rng) % 16);
                        const int at = e % 16;
                        blk[2 + at] = (uint8_t)(e < 16 ? (blk[2 + at] & 0xf0) | nib : (blk[2 + at] & 0x0f) | nib << 4);
                        q = nib - 8;
                    }
                    want[j] += (int64_t)q * xq[b * 32 + e];
                }
            }
        }
        const llmm_tensor wt = {.data = w, .type = type, .ne0 = NE0, .ne1 = NE1, .row_bytes = rb};
        const cpu_operand op = {.n = NE0, .qs = xq, .d = xd, .sum = xs};
        float out[NE1];
        k->matmul[type](&wt, 0, NE1, &op, 1, out, NE1);
        for (size_t j = 0; j < NE1; j++)
            if (!((double)out[j] == (double)want[j]))
                fail_msg("%s %s row %zu: integer dot %.1f want %lld", k->name, llmm__type_get(type)->name, j,
                         (double)out[j], (long long)want[j]);
        free(w);
        free(xq);
    }
}

static void test_integer_sums_q4_0(void **state) {
    (void)state;
    check_integer_sums(LLMM_TYPE_Q4_0);
}
static void test_integer_sums_q8_0(void **state) {
    (void)state;
    check_integer_sums(LLMM_TYPE_Q8_0);
}

/* The largest products in every lane at once, which random quants almost never give: Q8_0
 * weight quants of -128 (a file may hold them, the quantizer never makes them) times operand
 * quants of -127 put 2 x 16256 = 32512 into each int16 lane of the base NEON dot (and of
 * x86's maddubs), 255 short of overflow. Q4_0 nibbles 0 and 15 likewise. Rows: all minimum,
 * all maximum, alternating, halves; scales 1.0, so the output is the integer dot. */
static void check_int8_extremes(uint32_t type) {
    enum { NE0 = 64, NE1 = 4, NB = NE0 / 32 };
    const int q4 = type == LLMM_TYPE_Q4_0, lo = q4 ? 0 : -128, hi = q4 ? 15 : 127;
    const size_t rb = llmm__row_bytes(type, NE0), bb = rb / NB;
    uint8_t *w = xmalloc(rb * NE1);
    memset(w, 0, rb * NE1);
    int64_t wsum[NE1] = {0};
    for (size_t j = 0; j < NE1; j++)
        for (size_t b = 0; b < NB; b++) {
            uint8_t *blk = w + j * rb + b * bb;
            blk[1] = 0x3c; /* d = 1.0 */
            for (int e = 0; e < 32; e++) {
                const int v = j == 0 ? lo : j == 1 ? hi : j == 2 ? (e % 2 ? lo : hi) : (e < 16 ? lo : hi);
                if (q4) blk[2 + e % 16] |= (uint8_t)(e < 16 ? v : v << 4);
                else blk[2 + e] = (uint8_t)(int8_t)v;
                wsum[j] += q4 ? v - 8 : v;
            }
        }
    const llmm_tensor wt = {.data = w, .type = type, .ne0 = NE0, .ne1 = NE1, .row_bytes = rb};
    const int xvals[] = {-127, 127};
    for (size_t ii = 0; ii < ARRAY_LEN(k_simd_isas); ii++) {
        const cpu_kernels *k = simd_table(k_simd_isas[ii]);
        if (!k) continue;
        for (size_t xi = 0; xi < ARRAY_LEN(xvals); xi++) {
            int8_t xq[NE0];
            float xd[NB];
            int32_t xs[NB];
            memset(xq, xvals[xi], sizeof xq);
            for (size_t b = 0; b < NB; b++) {
                xd[b] = 1.0f;
                xs[b] = 32 * xvals[xi];
            }
            const cpu_operand op = {.n = NE0, .qs = xq, .d = xd, .sum = xs};
            float out[NE1];
            k->matmul[type](&wt, 0, NE1, &op, 1, out, NE1);
            for (size_t j = 0; j < NE1; j++)
                if (!((double)out[j] == (double)(wsum[j] * xvals[xi])))
                    fail_msg("%s %s row %zu x %d: %.1f want %lld", k->name, llmm__type_get(type)->name, j,
                             xvals[xi], (double)out[j], (long long)(wsum[j] * xvals[xi]));
        }
    }
    free(w);
}

static void test_int8_extremes(void **state) {
    (void)state;
    check_int8_extremes(LLMM_TYPE_Q4_0);
    check_int8_extremes(LLMM_TYPE_Q8_0);
}

/* K-quants with random bytes everywhere (every bit pattern of quants, sub-block scales and
 * mins) but d = dmin = 1.0 and operand scales 1.0: weight i dequantizes to the integer
 * sc q - m (the type table's dequant_row, exact), so each output is the integer dot
 * sum_i (sc q - m) x_i. The data keep every partial sum below 2^24, where the float steps are
 * exact: the kernels' integer sums are checked against an int64 reference, and the scalar
 * vec_dot with them. Operand quants are +-127 at the extremes. */
static void check_integer_sums_kquant(uint32_t type, size_t d_off, size_t dmin_off, int has_min) {
    enum { NE0 = QK_K * 3, NE1 = 19, NB = NE0 / QK_K, NG = NE0 / 16, ROWS = 3 };
    const llmm_type_traits *t = llmm__type_get(type);
    for (size_t ii = 0; ii < ARRAY_LEN(k_simd_isas); ii++) {
        const cpu_kernels *k = gemm_table(k_simd_isas[ii], type);
        if (!k) continue;
        rng_seed(&rng, 2200 + type);
        const size_t rb = llmm__row_bytes(type, NE0);
        uint8_t *w = xmalloc(rb * NE1);
        for (size_t i = 0; i < rb * NE1; i++) w[i] = (uint8_t)rng_u64(&rng);
        for (size_t j = 0; j < NE1; j++)
            for (size_t b = 0; b < NB; b++) {
                uint8_t *blk = w + j * rb + b * t->block_bytes;
                blk[d_off] = 0x00;
                blk[d_off + 1] = 0x3c; /* 1.0 */
                if (has_min) {
                    blk[dmin_off] = 0x00;
                    blk[dmin_off + 1] = 0x3c;
                }
            }
        int8_t *xq = xmalloc(ROWS * NE0);
        float xd[ROWS * NB];
        int16_t bs[ROWS * NG];
        block_q8_K xblk[ROWS][NB];
        for (size_t r = 0; r < ROWS; r++) {
            for (size_t i = 0; i < NE0; i++) {
                const int v = i % 17 == 0 ? 127 : i % 19 == 0 ? -127 : (int)(rng_u64(&rng) % 255) - 127;
                xq[r * NE0 + i] = (int8_t)v;
            }
            for (size_t g = 0; g < NG; g++) {
                int s = 0;
                for (int e = 0; e < 16; e++) s += xq[r * NE0 + g * 16 + e];
                bs[r * NG + g] = (int16_t)s;
            }
            for (size_t b = 0; b < NB; b++) {
                xd[r * NB + b] = 1.0f;
                xblk[r][b].d = 1.0f;
                memcpy(xblk[r][b].qs, xq + r * NE0 + b * QK_K, QK_K);
                memcpy(xblk[r][b].bsums, bs + r * NG + b * 16, sizeof xblk[r][b].bsums);
            }
        }
        const llmm_tensor wt = {.data = w, .type = type, .ne0 = NE0, .ne1 = NE1, .row_bytes = rb};
        const cpu_operand op = {.n = NE0, .qs = xq, .d = xd, .bsums = bs};
        float out[ROWS * NE1], wd[NE0];
        k->matmul[type](&wt, 0, NE1, &op, ROWS, out, NE1);
        for (size_t j = 0; j < NE1; j++) {
            t->dequant_row(w + j * rb, wd, NE0);
            for (size_t r = 0; r < ROWS; r++) {
                int64_t want = 0, partial = 0;
                for (size_t i = 0; i < NE0; i++) {
                    want += (int64_t)wd[i] * xq[r * NE0 + i];
                    partial = (int64_t)fmax((double)partial, fabs((double)want));
                }
                assert_true(partial < (1 << 24)); /* the data's premise */
                const float scalar = t->vec_dot(w + j * rb, xblk[r], NE0);
                if (!((double)out[r * NE1 + j] == (double)want) || !((double)scalar == (double)want))
                    fail_msg("%s %s row %zu operand row %zu: integer dot %.1f (scalar %.1f) want %lld", k->name,
                             t->name, j, r, (double)out[r * NE1 + j], (double)scalar, (long long)want);
            }
        }
        free(w);
        free(xq);
    }
}

/* Q5_0, Q4_1, Q5_1, IQ4_NL the same way: random quant bytes and 5th bits, d = 1.0 and m = 1.0
 * (w = q - 16, q + 1, or the codebook's value), operand scales 1.0 and s = sum(x) (exact):
 * the output is the integer dot sum_i w_i x_i, below 2^24. */
static void check_integer_sums_legacy(uint32_t type) {
    enum { NE0 = 32 * 23, NE1 = 19, NB = NE0 / 32, ROWS = 3 };
    const llmm_type_traits *t = llmm__type_get(type);
    const int offset_type = type == LLMM_TYPE_Q4_1 || type == LLMM_TYPE_Q5_1;
    for (size_t ii = 0; ii < ARRAY_LEN(k_simd_isas); ii++) {
        const cpu_kernels *k = gemm_table(k_simd_isas[ii], type);
        if (!k) continue;
        rng_seed(&rng, 2300 + type);
        const size_t rb = llmm__row_bytes(type, NE0);
        uint8_t *w = xmalloc(rb * NE1);
        for (size_t i = 0; i < rb * NE1; i++) w[i] = (uint8_t)rng_u64(&rng);
        for (size_t j = 0; j < NE1; j++)
            for (size_t b = 0; b < NB; b++) {
                uint8_t *blk = w + j * rb + b * t->block_bytes;
                blk[0] = 0x00;
                blk[1] = 0x3c; /* d = 1.0 */
                if (offset_type) {
                    blk[2] = 0x00;
                    blk[3] = 0x3c; /* m = 1.0 */
                }
            }
        int8_t *xq = xmalloc(ROWS * NE0);
        float xd[ROWS * NB], xs[ROWS * NB];
        int32_t xsum[ROWS * NB];
        for (size_t r = 0; r < ROWS; r++)
            for (size_t b = 0; b < NB; b++) {
                int sum = 0;
                for (size_t e = 0; e < 32; e++) {
                    const size_t i = b * 32 + e;
                    const int v = i % 17 == 0 ? 127 : i % 19 == 0 ? -127 : (int)(rng_u64(&rng) % 255) - 127;
                    xq[r * NE0 + i] = (int8_t)v;
                    sum += v;
                }
                xd[r * NB + b] = 1.0f;
                xs[r * NB + b] = (float)sum;
                xsum[r * NB + b] = sum;
            }
        const llmm_tensor wt = {.data = w, .type = type, .ne0 = NE0, .ne1 = NE1, .row_bytes = rb};
        cpu_operand op = {.n = NE0, .qs = xq, .d = xd};
        if (offset_type) op.s = xs;
        else op.sum = xsum;
        float out[ROWS * NE1], wd[NE0];
        k->matmul[type](&wt, 0, NE1, &op, ROWS, out, NE1);
        for (size_t j = 0; j < NE1; j++) {
            t->dequant_row(w + j * rb, wd, NE0);
            for (size_t r = 0; r < ROWS; r++) {
                int64_t want = 0;
                for (size_t i = 0; i < NE0; i++) want += (int64_t)wd[i] * xq[r * NE0 + i];
                if (!((double)out[r * NE1 + j] == (double)want))
                    fail_msg("%s %s row %zu operand row %zu: integer dot %.1f want %lld", k->name, t->name, j, r,
                             (double)out[r * NE1 + j], (long long)want);
            }
        }
        free(w);
        free(xq);
    }
}

static void test_integer_sums_legacy(void **state) {
    (void)state;
    check_integer_sums_legacy(LLMM_TYPE_Q5_0);
    check_integer_sums_legacy(LLMM_TYPE_Q4_1);
    check_integer_sums_legacy(LLMM_TYPE_Q5_1);
    check_integer_sums_legacy(LLMM_TYPE_IQ4_NL);
}

static void test_integer_sums_kquant(void **state) {
    (void)state;
    check_integer_sums_kquant(LLMM_TYPE_Q2_K, offsetof(block_q2_K, d), offsetof(block_q2_K, dmin), 1);
    check_integer_sums_kquant(LLMM_TYPE_Q3_K, offsetof(block_q3_K, d), 0, 0);
    check_integer_sums_kquant(LLMM_TYPE_Q4_K, offsetof(block_q4_K, d), offsetof(block_q4_K, dmin), 1);
    check_integer_sums_kquant(LLMM_TYPE_IQ4_XS, offsetof(block_iq4_xs, d), 0, 0);
    check_integer_sums_kquant(LLMM_TYPE_Q5_K, offsetof(block_q5_K, d), offsetof(block_q5_K, dmin), 1);
    check_integer_sums_kquant(LLMM_TYPE_Q6_K, offsetof(block_q6_K, d), 0, 0);
}

/* ================================================================== elementwise kernels */

static double ulp_of(double v) {
    const float f = (float)fabs(v);
    return (double)nextafterf(f, INFINITY) - (double)f;
}

/* e^x through exp_sub_sum (max 0) on a dense sweep, with tails (n % 8) as well. */
static void test_exp_accuracy(void **state) {
    (void)state;
    enum { N = 200003 };
    float *x = xmalloc(N * sizeof *x), *e = xmalloc(N * sizeof *e);
    for (size_t i = 0; i < N; i++) x[i] = -103.0f + (float)((88.7 + 103.0) * (double)i / (N - 1));
    for (size_t ii = 0; ii <= ARRAY_LEN(k_simd_isas); ii++) { /* the last: the scalar table */
        const cpu_kernels *k = ii < ARRAY_LEN(k_simd_isas) ? simd_table(k_simd_isas[ii]) : &llmm__cpu_kernels_scalar;
        if (!k) continue;
        memcpy(e, x, N * sizeof *e);
        k->exp_sub_sum(e, N, 0.0f);
        double worst = 0;
        for (size_t i = 0; i < N; i++) {
            const double want = exp((double)x[i]);
            if (want < FLT_MIN) continue; /* subnormal results: checked below for range only */
            const double err = fabs((double)e[i] - want) / ulp_of(want);
            if (err > 2.0)
                fail_msg("%s exp(%.9g) = %.9g want %.9g (%.2f ulp)", k->name, (double)x[i], (double)e[i], want, err);
            worst = fmax(worst, err);
        }
        float sp[9] = {-200.0f, -104.5f, 89.0f, 100.0f, 0.0f, -0.0f, 88.72f, -87.0f, 1.0f};
        k->exp_sub_sum(sp, 9, 0.0f);
        assert_true(sp[0] == 0.0f && sp[1] == 0.0f);
        assert_true(isinf(sp[2]) && isinf(sp[3]));
        assert_true(sp[4] == 1.0f && sp[5] == 1.0f);
        assert_true(isfinite(sp[6]) && sp[6] > 3.3e38f);
        CHECK_CLOSE(sp[7], exp(-87.0), 2 * ulp_of(exp(-87.0)), "%s exp(-87)", k->name);
        CHECK_CLOSE(sp[8], exp(1.0), 2 * ulp_of(exp(1.0)), "%s exp(1)", k->name);
        print_message("%s exp: worst %.3f ulp over [-87.3, 88.7]\n", k->name, worst);
    }
    free(x);
    free(e);
}

static void test_exp_sub_sum(void **state) {
    (void)state;
    const size_t sizes[] = {1, 7, 9, 13, 64, 301};
    for (size_t ii = 0; ii < ARRAY_LEN(k_simd_isas); ii++) {
        const cpu_kernels *k = simd_table(k_simd_isas[ii]);
        if (!k) continue;
        rng_seed(&rng, 3001);
        for (size_t si = 0; si < ARRAY_LEN(sizes); si++) {
            const size_t n = sizes[si];
            float *s = rng_floats(&rng, n, -20.0f, 5.0f), *orig = xmalloc(n * sizeof *orig);
            memcpy(orig, s, n * sizeof *s);
            float max = -INFINITY;
            for (size_t i = 0; i < n; i++) max = fmaxf(max, s[i]);
            const double got = k->exp_sub_sum(s, n, max);
            double want = 0;
            for (size_t i = 0; i < n; i++) want += exp((double)orig[i] - max);
            CHECK_CLOSE(got, want, (n + 4.0) * 2 * U_F32 * want, "%s exp_sub_sum n=%zu", k->name, n);
            /* the scalar table's bits: every value and the sum */
            const double scalar_sum = llmm__cpu_kernels_scalar.exp_sub_sum(orig, n, max);
            assert_memory_equal(s, orig, n * sizeof *s);
            if (memcmp(&got, &scalar_sum, sizeof got) != 0)
                fail_msg("%s exp_sub_sum n=%zu: sum %a, the scalar table's %a", k->name, n, got, scalar_sum);
            free(s);
            free(orig);
        }
    }
}

/* A gated activation kernel of a table (gate = act(gate) * up), its float64 value and bound */
typedef struct gate_kernel {
    const char *name;
    void (*of)(const cpu_kernels *k, float *gate, const float *up, size_t n);
    double (*reference)(double x, double up, double *tolerance);
    uint64_t seed;
} gate_kernel;

static void run_silu(const cpu_kernels *k, float *gate, const float *up, size_t n) { k->silu_mul(gate, up, n); }
static void run_gelu(const cpu_kernels *k, float *gate, const float *up, size_t n) { k->gelu_mul(gate, up, n); }

static double silu_reference(double x, double up, double *tolerance) {
    const double ref = x / (1.0 + exp(-x)) * up;
    *tolerance = 12 * U_F32 * fabs(ref);
    return ref;
}

/* 0.5 x (1 + tanh(u)) as x / (1 + e^(-2u)), which keeps its digits where tanh(u) nears -1 */
static double gelu_reference(double x, double up, double *tolerance) {
    const double u = 0.79788456080286535587989211986876 * x * (1.0 + 0.044715 * x * x);
    const double ref = x / (1.0 + exp(-2.0 * u)) * up;
    *tolerance = (4.0 * fabs(2.0 * u) + 12.0) * U_F32 * fabs(ref) + 1e-30;
    return ref;
}

static void check_gate_kernel(const cpu_kernels *k, const gate_kernel *gk) {
    const size_t sizes[] = {1, 7, 31, 33, 173, 1001};
    rng_seed(&rng, gk->seed);
    for (size_t si = 0; si < ARRAY_LEN(sizes); si++) {
        const size_t n = sizes[si];
        const float range = si % 2 ? 20.0f : 3.0f;
        float *g = rng_floats(&rng, n, -range, range), *up = rng_floats(&rng, n, -2.0f, 2.0f);
        float *out = xmalloc(n * sizeof *out);
        memcpy(out, g, n * sizeof *out);
        gk->of(k, out, up, n);
        for (size_t i = 0; i < n; i++) {
            double tolerance;
            const double ref = gk->reference(g[i], up[i], &tolerance);
            CHECK_CLOSE(out[i], ref, tolerance, "%s %s n=%zu i=%zu g=%.9g", k->name, gk->name, n, i, (double)g[i]);
        }
        gk->of(&llmm__cpu_kernels_scalar, g, up, n); /* the scalar table's bits */
        assert_memory_equal(out, g, n * sizeof *out);
        free(g);
        free(up);
        free(out);
    }
    /* saturation: large negative gates give (minus) zero, large positive ones the gate */
    float g[3] = {-200.0f, 200.0f, -90.0f}, up[3] = {1.5f, 1.5f, 2.0f};
    gk->of(k, g, up, 3);
    assert_true(g[0] == 0.0f && g[1] == 300.0f && fabsf(g[2]) < 1e-30f);
}

static void test_silu_mul(void **state) {
    (void)state;
    const gate_kernel silu = {"silu", run_silu, silu_reference, 3002};
    for (size_t ii = 0; ii < ARRAY_LEN(k_simd_isas); ii++) {
        const cpu_kernels *k = simd_table(k_simd_isas[ii]);
        if (k) check_gate_kernel(k, &silu);
    }
}

static void test_gelu_mul(void **state) {
    (void)state;
    const gate_kernel gelu = {"gelu", run_gelu, gelu_reference, 3004};
    check_gate_kernel(&llmm__cpu_kernels_scalar, &gelu);
    for (size_t ii = 0; ii < ARRAY_LEN(k_simd_isas); ii++) {
        const cpu_kernels *k = simd_table(k_simd_isas[ii]);
        if (k) check_gate_kernel(k, &gelu);
    }
}

static void test_rms_norm_row(void **state) {
    (void)state;
    const size_t sizes[] = {1, 7, 31, 33, 173, 1001};
    for (size_t ii = 0; ii < ARRAY_LEN(k_simd_isas); ii++) {
        const cpu_kernels *k = simd_table(k_simd_isas[ii]);
        if (!k) continue;
        rng_seed(&rng, 3003);
        for (size_t si = 0; si < ARRAY_LEN(sizes); si++) {
            const size_t n = sizes[si];
            float *x = rng_floats(&rng, n, -2.0f, 2.0f), *w = rng_floats(&rng, n, -2.0f, 2.0f), *out = xmalloc(n * sizeof *out);
            k->rms_norm_row(x, w, out, n, 1e-5f);
            double ss = 0;
            for (size_t i = 0; i < n; i++) ss += (double)x[i] * x[i];
            const double inv = 1.0 / sqrt(ss / (double)n + 1e-5);
            for (size_t i = 0; i < n; i++) {
                const double ref = (double)x[i] * inv * w[i];
                CHECK_CLOSE(out[i], ref, 10 * U_F32 * fabs(ref), "%s rms_norm n=%zu i=%zu", k->name, n, i);
            }
            /* the scalar table's bits, with magnitudes spread over 2^40 (the double sum's order is
             * the scalar's too, cpu/kernel_table.c, though it would show in the float mean only once in
             * about 2^29 rows) */
            float *want = xmalloc(n * sizeof *want);
            for (size_t i = 0; i < n; i++) x[i] = ldexpf(x[i], (int)(i * 7919 % 41) - 30);
            k->rms_norm_row(x, w, out, n, 1e-5f);
            llmm__cpu_kernels_scalar.rms_norm_row(x, w, want, n, 1e-5f);
            assert_memory_equal(out, want, n * sizeof *out);
            free(want);
            free(x);
            free(w);
            free(out);
        }
    }
}

/* f16_to_f32 (attention's F16 K/V rows): every one of the 65536 halves widens to the portable
 * converter's float bit for bit (NaNs to a NaN of the same sign), at odd lengths and offsets
 * so the vector body and the tail both run. */
static void test_f16_to_f32(void **state) {
    (void)state;
    enum { N = 65536 };
    uint16_t *h = xmalloc(N * sizeof *h);
    float *out = xmalloc(N * sizeof *out);
    for (size_t i = 0; i < N; i++) h[i] = (uint16_t)i;
    for (size_t ii = 0; ii < ARRAY_LEN(k_simd_isas); ii++) {
        const cpu_kernels *k = simd_table(k_simd_isas[ii]);
        if (!k) continue;
        assert_non_null(k->f16_to_f32);
        const size_t spans[][2] = {{0, N}, {1, 7}, {3, 13}, {9, 8}, {100, 1001}};
        for (size_t si = 0; si < ARRAY_LEN(spans); si++) {
            const size_t first = spans[si][0], n = spans[si][1];
            memset(out, 0xff, N * sizeof *out);
            k->f16_to_f32(h + first, out + first, n);
            for (size_t i = first; i < first + n; i++) {
                const float want = kv_half_to_float(h[i]);
                if (isnan(want)) {
                    if (!isnan(out[i]) || signbit(out[i]) != signbit(want))
                        fail_msg("%s f16 0x%04zx: not a NaN of the same sign", k->name, i);
                } else if (bits_of_f32(out[i]) != bits_of_f32(want)) {
                    fail_msg("%s f16 0x%04zx: %a, want %a", k->name, i, (double)out[i], (double)want);
                }
            }
        }
    }
    free(h);
    free(out);
}

/* dot_f32: within (n/8 + 4) u sum|a b| of the float64 dot (FMA partial sums and a tree) and
 * bit for bit the scalar table's; axpy: bit for bit the scalar table's (one fused
 * multiply-add per value). */
static void test_dot_axpy(void **state) {
    (void)state;
    const size_t sizes[] = {1, 7, 8, 9, 33, 64, 173};
    for (size_t ii = 0; ii < ARRAY_LEN(k_simd_isas); ii++) {
        const cpu_kernels *k = simd_table(k_simd_isas[ii]);
        if (!k) continue;
        rng_seed(&rng, 3004);
        for (size_t si = 0; si < ARRAY_LEN(sizes); si++) {
            const size_t n = sizes[si];
            float *a = rng_floats(&rng, n, -2.0f, 2.0f), *b = rng_floats(&rng, n, -2.0f, 2.0f);
            float *y1 = rng_floats(&rng, n, -2.0f, 2.0f), *y2 = xmalloc(n * sizeof *y2);
            memcpy(y2, y1, n * sizeof *y1);
            double ref = 0, mag = 0;
            for (size_t i = 0; i < n; i++) {
                ref += (double)a[i] * b[i];
                mag += fabs((double)a[i] * b[i]);
            }
            const float dot = k->dot_f32(a, b, n), scalar_dot = llmm__cpu_kernels_scalar.dot_f32(a, b, n);
            CHECK_CLOSE(dot, ref, ((double)(n / 8) + 4) * U_F32 * mag, "%s dot_f32 n=%zu", k->name, n);
            CHECK_CLOSE(scalar_dot, ref, ((double)(n / 8) + 4) * U_F32 * mag, "scalar dot_f32 n=%zu", n);
            if (memcmp(&dot, &scalar_dot, sizeof dot) != 0)
                fail_msg("%s dot_f32 n=%zu: %a, the scalar table's %a", k->name, n, dot, scalar_dot);
            k->axpy(y1, 0.375f, a, n);
            llmm__cpu_kernels_scalar.axpy(y2, 0.375f, a, n);
            assert_memory_equal(y1, y2, n * sizeof *y1);
            free(a);
            free(b);
            free(y1);
            free(y2);
        }
    }
}

/* The first float of got[0 .. n) whose bits differ from want's, or n. */
static size_t first_diff(const float *got, const float *want, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (bits_of_f32(got[i]) != bits_of_f32(want[i])) return i;
    return n;
}

/* Gated DeltaNet's state kernels: the scalar table's against float64 (each value within
 * 4 (d + 4) u of the sum of its terms' magnitudes: chains of d fused multiply-adds, then a few
 * roundings), and every SIMD table's bit for bit the scalar table's (lanes are columns, one
 * chain per value in the same order: kernels/delta_rule.h). Head sizes below one vector, with
 * and without a column tail, across several column blocks; S is d x d, row i the key dim. */
static void delta_step_reference(const float *S, size_t d, const float *k, const float *q, const float *v, float beta,
                                 float decay, float kq, size_t j, double *o, double *o_tol, double *S_col,
                                 double *S_tol) {
    double kv = 0, sq = 0, mkv = 0, msq = 0;
    for (size_t i = 0; i < d; i++) {
        kv += (double)k[i] * S[i * d + j], mkv += fabs((double)k[i] * S[i * d + j]);
        sq += (double)q[i] * S[i * d + j], msq += fabs((double)q[i] * S[i * d + j]);
    }
    const double delta = beta * (v[j] - decay * kv), mdelta = beta * (fabs(v[j]) + decay * mkv);
    const double u = 4.0 * ((double)d + 4) * U_F32;
    *o = kq * delta + decay * sq;
    *o_tol = u * (fabs(kq) * mdelta + decay * msq);
    for (size_t i = 0; i < d; i++) {
        S_col[i] = decay * S[i * d + j] + k[i] * delta;
        S_tol[i] = u * (decay * fabs(S[i * d + j]) + fabs(k[i]) * mdelta);
    }
}

static void check_delta_step(const cpu_kernels *k, size_t d) {
    float *S0 = rng_floats(&rng, d * d, -0.5f, 0.5f), *kk = rng_floats(&rng, d, -0.3f, 0.3f);
    float *q = rng_floats(&rng, d, -0.3f, 0.3f), *v = rng_floats(&rng, d, -2.0f, 2.0f);
    float *S1 = xmalloc(d * d * sizeof *S1), *S2 = xmalloc(d * d * sizeof *S2);
    float *o1 = xmalloc(d * sizeof *o1), *o2 = xmalloc(d * sizeof *o2);
    double *S_col = xmalloc(d * sizeof *S_col), *S_tol = xmalloc(d * sizeof *S_tol);
    const float beta = 0.7f, decay = 0.9f, kq = k->dot_f32(kk, q, d);
    memcpy(S1, S0, d * d * sizeof *S0), memcpy(S2, S0, d * d * sizeof *S0);
    llmm__cpu_kernels_scalar.delta_step(S1, d, kk, q, v, beta, decay, kq, o1);
    k->delta_step(S2, d, kk, q, v, beta, decay, kq, o2);
    for (size_t j = 0; j < d; j++) {
        double o, o_tol;
        delta_step_reference(S0, d, kk, q, v, beta, decay, kq, j, &o, &o_tol, S_col, S_tol);
        CHECK_CLOSE(o1[j], o, o_tol, "scalar delta_step d=%zu o[%zu]", d, j);
        for (size_t i = 0; i < d; i++) CHECK_CLOSE(S1[i * d + j], S_col[i], S_tol[i], "scalar delta_step d=%zu S", d);
    }
    size_t at = first_diff(o2, o1, d);
    if (at < d) fail_msg("%s delta_step d=%zu: o[%zu] %a, the scalar table's %a", k->name, d, at, o2[at], o1[at]);
    if ((at = first_diff(S2, S1, d * d)) < d * d)
        fail_msg("%s delta_step d=%zu: S[%zu] %a, the scalar table's %a", k->name, d, at, S2[at], S1[at]);
    free(S0), free(kk), free(q), free(v), free(S1), free(S2), free(o1), free(o2), free(S_col), free(S_tol);
}

static void check_delta_read_update(const cpu_kernels *k, size_t d, size_t n) {
    float *S = rng_floats(&rng, d * d, -0.5f, 0.5f), *x = rng_floats(&rng, n * d, -0.3f, 0.3f);
    float *u = rng_floats(&rng, n * d, -1.0f, 1.0f);
    float *y1 = xmalloc(n * d * sizeof *y1), *y2 = xmalloc(n * d * sizeof *y2);
    float *S1 = xmalloc(d * d * sizeof *S1), *S2 = xmalloc(d * d * sizeof *S2);
    const float **rows = xmalloc(n * sizeof *rows);
    for (size_t c = 0; c < n; c++) rows[c] = x + c * d;
    llmm__cpu_kernels_scalar.delta_read(S, d, rows, n, y1);
    k->delta_read(S, d, rows, n, y2);
    const double tol_u = 4.0 * ((double)d + 4) * U_F32;
    for (size_t c = 0; c < n; c++)
        for (size_t j = 0; j < d; j++) {
            double ref = 0, mag = 0;
            for (size_t i = 0; i < d; i++) ref += (double)x[c * d + i] * S[i * d + j], mag += fabs((double)x[c * d + i] * S[i * d + j]);
            CHECK_CLOSE(y1[c * d + j], ref, tol_u * mag, "scalar delta_read d=%zu n=%zu y[%zu][%zu]", d, n, c, j);
        }
    size_t at = first_diff(y2, y1, n * d);
    if (at < n * d) fail_msg("%s delta_read d=%zu n=%zu: y[%zu] %a, the scalar table's %a", k->name, d, n, at, y2[at], y1[at]);
    const float decay = 0.85f;
    memcpy(S1, S, d * d * sizeof *S), memcpy(S2, S, d * d * sizeof *S);
    llmm__cpu_kernels_scalar.delta_update(S1, d, decay, x, u, n);
    k->delta_update(S2, d, decay, x, u, n);
    for (size_t i = 0; i < d; i++)
        for (size_t j = 0; j < d; j++) {
            double ref = decay * (double)S[i * d + j], mag = fabs(ref);
            for (size_t c = 0; c < n; c++) ref += (double)x[c * d + i] * u[c * d + j], mag += fabs((double)x[c * d + i] * u[c * d + j]);
            CHECK_CLOSE(S1[i * d + j], ref, 4.0 * ((double)n + 4) * U_F32 * mag, "scalar delta_update d=%zu n=%zu", d, n);
        }
    if ((at = first_diff(S2, S1, d * d)) < d * d)
        fail_msg("%s delta_update d=%zu n=%zu: S[%zu] %a, the scalar table's %a", k->name, d, n, at, S2[at], S1[at]);
    free(S), free(x), free(u), free(y1), free(y2), free(S1), free(S2), free(rows);
}

static void test_delta_kernels(void **state) {
    (void)state;
    const size_t dims[] = {3, 8, 24, 40, 128};
    const size_t counts[] = {1, 5, 32};
    for (size_t ii = 0; ii < ARRAY_LEN(k_simd_isas); ii++) {
        const cpu_kernels *k = simd_table(k_simd_isas[ii]);
        if (!k) continue;
        rng_seed(&rng, 4601);
        for (size_t di = 0; di < ARRAY_LEN(dims); di++) {
            check_delta_step(k, dims[di]);
            for (size_t ni = 0; ni < ARRAY_LEN(counts); ni++) check_delta_read_update(k, dims[di], counts[ni]);
        }
        print_message("%s delta_step, delta_read, delta_update: bit-identical to the scalar table's\n", k->name);
    }
}

/* The short convolution (conv_rows): the scalar table's against float64 (each output within
 * (n_taps + 1) u of its products' magnitudes: a product rounded, then added, per tap), and
 * every SIMD table's bit for bit the scalar table's, over channel ranges that start and end
 * off a vector (tails), kernel sizes past one tap group (kernels/conv_tiles.h), missing
 * (zero) input rows, and an infinite tap under a missing row (0 x inf: NaN in every table). */
static void check_conv_rows(const cpu_kernels *k, size_t dim, size_t n_taps, size_t n_out, size_t c0, size_t c1) {
    const size_t n_in = n_out + n_taps - 1, ldy = dim + 3;
    float *x = rng_floats(&rng, n_in * dim, -2.0f, 2.0f), *taps = rng_floats(&rng, dim * n_taps, -1.0f, 1.0f);
    float *y1 = rng_floats(&rng, n_out * ldy, -1.0f, 1.0f), *y2 = xmalloc(n_out * ldy * sizeof *y2);
    const float **rows = xmalloc(n_in * sizeof *rows);
    for (size_t i = 0; i < n_in; i++) rows[i] = i < n_taps / 2 ? NULL : x + i * dim;
    if (n_taps > 1 && c1 > c0) taps[c0 * n_taps] = INFINITY; /* read against row 0, a missing one */
    memcpy(y2, y1, n_out * ldy * sizeof *y1);
    llmm__cpu_kernels_scalar.conv_rows(y1, ldy, rows, n_out, taps, n_taps, c0, c1);
    k->conv_rows(y2, ldy, rows, n_out, taps, n_taps, c0, c1);
    for (size_t t = 0; t < n_out; t++)
        for (size_t c = c0; c < c1; c++) {
            double ref = 0, mag = 0;
            for (size_t j = 0; j < n_taps; j++) {
                const double p = (rows[t + j] ? (double)rows[t + j][c] : 0.0) * taps[c * n_taps + j];
                ref += p, mag += fabs(p);
            }
            if (!isfinite(ref)) assert_true(isnan(ref) ? isnan(y1[t * ldy + c]) : y1[t * ldy + c] == ref);
            else CHECK_CLOSE(y1[t * ldy + c], ref, ((double)n_taps + 1) * U_F32 * mag, "scalar conv_rows [%zu][%zu]", t, c);
        }
    /* outside [c0, c1) nothing is written (threads own disjoint channel ranges) */
    size_t at = first_diff(y2, y1, n_out * ldy);
    if (at < n_out * ldy)
        fail_msg("%s conv_rows dim=%zu taps=%zu rows=%zu [%zu, %zu): y[%zu] %a, the scalar table's %a", k->name, dim,
                 n_taps, n_out, c0, c1, at, y2[at], y1[at]);
    free(x), free(taps), free(y1), free(y2), free(rows);
}

static void test_conv_rows(void **state) {
    (void)state;
    static const size_t cases[][5] = {
        /* dim, taps, outputs, c0, c1 */
        {6144, 4, 5, 0, 6144}, {2048, 3, 1, 0, 2048}, {40, 4, 7, 3, 37}, {24, 10, 3, 0, 24}, {17, 1, 2, 1, 17},
        {64, 19, 4, 16, 64},
    };
    for (size_t ii = 0; ii < ARRAY_LEN(k_simd_isas); ii++) {
        const cpu_kernels *k = simd_table(k_simd_isas[ii]);
        if (!k) continue;
        rng_seed(&rng, 4602);
        for (size_t i = 0; i < ARRAY_LEN(cases); i++)
            check_conv_rows(k, cases[i][0], cases[i][1], cases[i][2], cases[i][3], cases[i][4]);
        print_message("%s conv_rows: bit-identical to the scalar table's\n", k->name);
    }
}

/* One attention chunk: nh heads of hd values against n rows (a permutation of separate,
 * unaligned rows, as the pool's pointers are), scores and weights at stride ld > n. */
static void check_attn_case(const cpu_kernels *k, size_t nh, size_t hd, size_t n) {
    const size_t ld = n + 5, stride = hd + 1;
    float *q = rng_floats(&rng, nh * hd, -2.0f, 2.0f), *row_buf = rng_floats(&rng, n * stride + 1, -2.0f, 2.0f);
    float *w = rng_floats(&rng, nh * ld, 0.0f, 1.0f), *out1 = rng_floats(&rng, nh * hd, -2.0f, 2.0f);
    float *out2 = xmalloc(nh * hd * sizeof *out2), *s1 = xmalloc(nh * ld * sizeof *s1);
    float *s2 = xmalloc(nh * ld * sizeof *s2);
    const float *rows[16];
    assert_true(n <= ARRAY_LEN(rows));
    for (size_t j = 0; j < n; j++) rows[j] = row_buf + 1 + (j * 7 % n) * stride; /* 7 is prime to every n */

    /* scores: lanes past n in each head's stride stay untouched (NaN) */
    fill_nan(s1, nh * ld);
    fill_nan(s2, nh * ld);
    k->attn_scores(q, nh, hd, rows, n, s1, ld);
    for (size_t i = 0; i < nh; i++)
        for (size_t j = 0; j < n; j++) s2[i * ld + j] = k->dot_f32(q + i * hd, rows[j], hd);
    size_t at = first_diff(s1, s2, nh * ld);
    if (at < nh * ld)
        fail_msg("%s attn_scores nh=%zu hd=%zu n=%zu: head %zu pos %zu: %a, dot_f32 %a", k->name, nh, hd, n, at / ld,
                 at % ld, (double)s1[at], (double)s2[at]);

    memcpy(out2, out1, nh * hd * sizeof *out1);
    k->attn_values(out1, nh, hd, w, ld, rows, n);
    for (size_t j = 0; j < n; j++)
        for (size_t i = 0; i < nh; i++) k->axpy(out2 + i * hd, w[i * ld + j], rows[j], hd);
    at = first_diff(out1, out2, nh * hd);
    if (at < nh * hd)
        fail_msg("%s attn_values nh=%zu hd=%zu n=%zu: head %zu value %zu: %a, axpy %a", k->name, nh, hd, n, at / hd,
                 at % hd, (double)out1[at], (double)out2[at]);
    free(q);
    free(row_buf);
    free(w);
    free(out1);
    free(out2);
    free(s1);
    free(s2);
}

/* attn_scores and attn_values, in every table that has them: bit for bit the same table's
 * dot_f32 per (head, position) and axpy per position in order. Head sizes with and without a
 * tail past the vector widths (8, 64), position counts around the groups of four. Every SIMD
 * table this CPU supports must have both, so that the check cannot pass by skipping. */
static void test_attn_chunk(void **state) {
    (void)state;
    const size_t nhs[] = {1, 2, 3, 4, 7, 9, 28}, hds[] = {8, 24, 64, 72, 128, 13}, ns[] = {1, 3, 4, 5, 16};
    for (int isa = 0; isa < CPU_ISA_COUNT; isa++) {
        const cpu_kernels *k = llmm__cpu_kernels_get((cpu_isa)isa);
        if (!k) continue;
        if (!k->attn_scores || !k->attn_values) {
            for (size_t ii = 0; ii < ARRAY_LEN(k_simd_isas); ii++)
                if (k_simd_isas[ii] == (cpu_isa)isa) fail_msg("%s lacks attn_scores or attn_values", k->name);
            print_message("skipped %s: no attention chunk kernels\n", k->name);
            continue;
        }
        rng_seed(&rng, 3005);
        for (size_t a = 0; a < ARRAY_LEN(nhs); a++)
            for (size_t b = 0; b < ARRAY_LEN(hds); b++)
                for (size_t c = 0; c < ARRAY_LEN(ns); c++) check_attn_case(k, nhs[a], hds[b], ns[c]);
        print_message("%s attn_scores, attn_values: %zu chunks bit-identical to dot_f32, axpy\n", k->name,
                      ARRAY_LEN(nhs) * ARRAY_LEN(hds) * ARRAY_LEN(ns));
    }
}

/* A random finite half: one in four any finite pattern (subnormals up to 65504, so the sums
 * mix magnitudes and an order change shows), else a value in [-2, 2] rounded to f16. */
static uint16_t rand_half(void) {
    const uint64_t r = rng_u64(&rng);
    if ((r & 3) == 0) {
        const uint16_t h = (uint16_t)(r >> 16);
        return (h & 0x7c00) == 0x7c00 ? (uint16_t)(h & 0xbfff) : h; /* no infinities or NaNs */
    }
    return llmm__f32_to_f16(rng_float(&rng, -2.0f, 2.0f));
}

/* attn_scores_f16 and attn_values_f16 against the same table's attn_scores and attn_values on
 * the rows widened (kv_half_to_float), every bit equal: n F16 rows row_stride > hd halves apart,
 * q and weights with magnitudes from 2^-20 to 2^10. */
static void check_attn_f16_case(const cpu_kernels *k, size_t nh, size_t hd, size_t n) {
    const size_t ld = n + 5, row_stride = hd + 3;
    uint16_t *halves = xmalloc(n * row_stride * sizeof *halves);
    float *widened = xmalloc(n * hd * sizeof *widened);
    float *q = rng_floats(&rng, nh * hd, -2.0f, 2.0f), *w = rng_floats(&rng, nh * ld, 0.0f, 1.0f);
    float *out1 = rng_floats(&rng, nh * hd, -2.0f, 2.0f), *out2 = xmalloc(nh * hd * sizeof *out2);
    float *s1 = xmalloc(nh * ld * sizeof *s1), *s2 = xmalloc(nh * ld * sizeof *s2);
    for (size_t i = 0; i < nh * hd; i++) q[i] = ldexpf(q[i], (int)(rng_u64(&rng) % 31) - 20);
    for (size_t i = 0; i < nh * ld; i++) w[i] = ldexpf(w[i], (int)(rng_u64(&rng) % 11) - 5);
    const float *rows[16];
    assert_true(n <= ARRAY_LEN(rows));
    for (size_t j = 0; j < n; j++) {
        for (size_t d = 0; d < row_stride; d++) halves[j * row_stride + d] = rand_half();
        for (size_t d = 0; d < hd; d++) widened[j * hd + d] = kv_half_to_float(halves[j * row_stride + d]);
        rows[j] = widened + j * hd;
    }

    fill_nan(s1, nh * ld);
    fill_nan(s2, nh * ld);
    k->attn_scores_f16(q, nh, hd, halves, row_stride, n, s1, ld);
    k->attn_scores(q, nh, hd, rows, n, s2, ld);
    size_t at = first_diff(s1, s2, nh * ld);
    if (at < nh * ld)
        fail_msg("%s attn_scores_f16 nh=%zu hd=%zu n=%zu: head %zu pos %zu: %a, attn_scores %a", k->name, nh, hd, n,
                 at / ld, at % ld, (double)s1[at], (double)s2[at]);

    memcpy(out2, out1, nh * hd * sizeof *out1);
    k->attn_values_f16(out1, nh, hd, w, ld, halves, row_stride, n);
    k->attn_values(out2, nh, hd, w, ld, rows, n);
    at = first_diff(out1, out2, nh * hd);
    if (at < nh * hd)
        fail_msg("%s attn_values_f16 nh=%zu hd=%zu n=%zu: head %zu value %zu: %a, attn_values %a", k->name, nh, hd, n,
                 at / hd, at % hd, (double)out1[at], (double)out2[at]);
    free(halves);
    free(widened);
    free(q);
    free(w);
    free(out1);
    free(out2);
    free(s1);
    free(s2);
}

/* The F16-row attention kernels, in every table that has them: bit for bit the table's float
 * kernels on the widened rows. Head sizes through each vector path and tail (1, 5, 13, 64,
 * 67, 72, 128), position counts below, at and around the groups of four. Every SIMD table
 * must have both, so that the check cannot pass by skipping. */
static void test_attn_chunk_f16(void **state) {
    (void)state;
    const size_t nhs[] = {1, 2, 3, 4, 7, 9, 28}, hds[] = {1, 5, 13, 64, 67, 72, 128, 256}, ns[] = {1, 4, 7, 16};
    for (int isa = 0; isa < CPU_ISA_COUNT; isa++) {
        const cpu_kernels *k = llmm__cpu_kernels_get((cpu_isa)isa);
        if (!k) continue;
        if (!k->attn_scores_f16 || !k->attn_values_f16) {
            for (size_t ii = 0; ii < ARRAY_LEN(k_simd_isas); ii++)
                if (k_simd_isas[ii] == (cpu_isa)isa) fail_msg("%s lacks attn_scores_f16 or attn_values_f16", k->name);
            print_message("skipped %s: no F16 attention chunk kernels\n", k->name);
            continue;
        }
        rng_seed(&rng, 3006);
        for (size_t a = 0; a < ARRAY_LEN(nhs); a++)
            for (size_t b = 0; b < ARRAY_LEN(hds); b++)
                for (size_t c = 0; c < ARRAY_LEN(ns); c++) check_attn_f16_case(k, nhs[a], hds[b], ns[c]);
        print_message("%s attn_scores_f16, attn_values_f16: %zu chunks bit-identical on widened rows\n", k->name,
                      ARRAY_LEN(nhs) * ARRAY_LEN(hds) * ARRAY_LEN(ns));
    }
}

/* ================================================================== the backend, per table */

/* A step descriptor for matmuls alone: n_rows rows of one sequence at position 0, over a KV
 * layout no op reads (the CPU's packing budget goes by the step's kind). */
static llmm_step matmul_step(llmm_step_kind kind, size_t n_rows) {
    static const llmm_kv_layout kv = {
        .layout = LLMM_KV_LAYOUT_HEAD_REGIONS, .n_layer = 1, .block_size = 1, .n_blocks = 1};
    static const llmm_token tokens[64];
    static const int32_t pos[64];
    static const uint32_t row_seq[64], block0[1], n_blocks[1] = {1};
    static const uint32_t *const tables[1] = {block0};
    static const llmm_seq_id seq_ids[1];
    assert_true(n_rows <= 64);
    return (llmm_step){.kind = kind, .n_rows = n_rows, .tokens = tokens, .pos = pos, .row_seq = row_seq,
                       .n_seqs = 1, .seq_ids = seq_ids, .block_tables = tables, .n_blocks = n_blocks, .kv = &kv};
}

static void *cpu_start_isa(cpu_isa isa, int n_threads) {
    setenv("LLMM_CPU_KERNELS", k_isa_names[isa], 1);
    llmm_backend_config cfg = {.n_threads = n_threads};
    void *st = NULL;
    assert_int_equal(llmm__cpu_backend.init(&cfg, &st), LLMM_OK);
    unsetenv("LLMM_CPU_KERNELS");
    assert_int_equal((int)((cpu_state *)st)->k->isa, (int)isa);
    return st;
}

/* The backend's matmul (operand preparation, chunks, threads) with each table forced: the
 * outputs equal the scalar table's bit for bit at every thread count. Sizes include a partial last tile and an
 * output head-like row count. */
static void test_backend_matmul_all_tables(void **state) {
    (void)state;
    const uint32_t types[] = {LLMM_TYPE_Q4_0, LLMM_TYPE_Q8_0, LLMM_TYPE_F32,  LLMM_TYPE_F16,  LLMM_TYPE_BF16,
                              LLMM_TYPE_Q2_K, LLMM_TYPE_Q3_K, LLMM_TYPE_Q4_K, LLMM_TYPE_Q5_K, LLMM_TYPE_Q6_K,
                              LLMM_TYPE_Q5_0, LLMM_TYPE_Q4_1, LLMM_TYPE_Q5_1, LLMM_TYPE_IQ4_NL,
                              LLMM_TYPE_IQ4_XS};
    const size_t dims[][3] = {{256, 1003, 1}, {96, 77, 5}, {416, 45, 37}}; /* ne0, ne1, n_rows */
    const size_t kdims[][3] = {{256, 1003, 1}, {512, 77, 5}, {768, 45, 37}}; /* K-quants: 256 | ne0 */
    const int threads[] = {1, 2, 3};
    rng_seed(&rng, 4001);
    for (size_t ti = 0; ti < ARRAY_LEN(types); ti++) {
        for (size_t di = 0; di < ARRAY_LEN(dims); di++) {
            const int kq = llmm__type_get(types[ti])->block_size == QK_K;
            const size_t ne0 = kq ? kdims[di][0] : dims[di][0], ne1 = kq ? kdims[di][1] : dims[di][1];
            const size_t n_rows = kq ? kdims[di][2] : dims[di][2];
            const size_t rb = llmm__row_bytes(types[ti], ne0);
            float *wf = rng_floats(&rng, ne0 * ne1, -2.0f, 2.0f), *x = rng_floats(&rng, ne0 * n_rows, -2.0f, 2.0f);
            uint8_t *w = xmalloc(rb * ne1);
            for (size_t j = 0; j < ne1; j++) encode_row(types[ti], wf + j * ne0, w + j * rb, ne0);
            const llmm_tensor wt = {w, types[ti], (int64_t)ne0, (int64_t)ne1, rb, NULL};
            float *ref = xmalloc(ne1 * n_rows * sizeof *ref), *out = xmalloc(ne1 * n_rows * sizeof *out);
            void *st = cpu_start_isa(CPU_ISA_SCALAR, 1);
            assert_int_equal(llmm__cpu_backend.matmul(st, &wt, x, n_rows, ref), LLMM_OK);
            llmm__cpu_backend.shutdown(st);
            for (size_t ii = 0; ii < ARRAY_LEN(k_simd_isas); ii++) {
                if (!llmm__cpu_kernels_get(k_simd_isas[ii])) continue;
                float *first = NULL;
                for (size_t th = 0; th < ARRAY_LEN(threads); th++) {
                    st = cpu_start_isa(k_simd_isas[ii], threads[th]);
                    fill_nan(out, ne1 * n_rows);
                    assert_int_equal(llmm__cpu_backend.matmul(st, &wt, x, n_rows, out), LLMM_OK);
                    llmm__cpu_backend.shutdown(st);
                    if (memcmp(out, ref, ne1 * n_rows * sizeof *out) != 0)
                        fail_msg("%s %s %zux%zu rows %zu threads %d: differs from the scalar table",
                                 k_isa_names[k_simd_isas[ii]], llmm__type_get(types[ti])->name, ne0, ne1, n_rows,
                                 threads[th]);
                    for (size_t i = 0; i < ne1 * n_rows; i++) assert_false(isnan(out[i]));
                    if (!first) {
                        first = xmalloc(ne1 * n_rows * sizeof *first);
                        memcpy(first, out, ne1 * n_rows * sizeof *out);
                    } else if (memcmp(out, first, ne1 * n_rows * sizeof *out) != 0) {
                        fail_msg("%s %s: threads %d differ from threads 1", k_isa_names[k_simd_isas[ii]],
                                 llmm__type_get(types[ti])->name, threads[th]);
                    }
                }
                free(first);
            }
            free(wf);
            free(x);
            free(w);
            free(ref);
            free(out);
        }
    }
}

/* ns per weight (per weight and operand row for prefill) of the backend's matmul, one thread,
 * every table: decode-shaped (1 operand row) and prefill-shaped (64 rows) products of the 0.5B
 * model's FFN shapes, 896 x 4864 standing in as 1024 x 4864 for the K-quants (whose rows are
 * multiples of 256). The weights (2-5 MB) stay in the L2/L3 caches between calls, so decode
 * figures are the kernels' compute, not DRAM streaming. Timing is slow and noisy, so it runs
 * only when LLMM_BENCH_KERNELS is set: `LLMM_BENCH_KERNELS=1 build/tests/test_simd_kernels` (or =q4_k,q6_k for some types,
 * =attention, =threads, =packed, =q8k or =smallbatch for bench_attention, bench_matmul_threads,
 * bench_packed_decode, bench_quantize_q8k and bench_small_batches below). */
static double matmul_seconds(void *st, const llmm_tensor *wt, const float *x, size_t n_rows, float *out) {
    double t0 = now_s();
    assert_int_equal(llmm__cpu_backend.matmul(st, wt, x, n_rows, out), LLMM_OK);
    const double first = now_s() - t0;
    const int reps = first > 0.05 ? 1 : (int)(0.05 / (first + 1e-9)) + 1;
    double best = first;
    for (int batch = 0; batch < 3 && reps > 1; batch++) {
        t0 = now_s();
        for (int i = 0; i < reps; i++) assert_int_equal(llmm__cpu_backend.matmul(st, wt, x, n_rows, out), LLMM_OK);
        best = fmin(best, (now_s() - t0) / reps);
    }
    return best;
}

static void bench_attention(void);
static void bench_matmul_threads(void);
static void bench_packed_decode(void);
static void bench_quantize_q8k(void);
static void bench_small_batches(void);

static void test_bench_kernels(void **state) {
    (void)state;
    if (!getenv("LLMM_BENCH_KERNELS")) {
        print_message("skipped: set LLMM_BENCH_KERNELS=1 to time the matmul kernels\n");
        return;
    }
    const char *only = getenv("LLMM_BENCH_KERNELS"); /* "1", or type names: "q5_0,q4_k", "attention" */
    if (strcmp(only, "1") == 0 || strstr(only, "attention")) bench_attention();
    if (strcmp(only, "1") == 0 || strstr(only, "threads")) bench_matmul_threads();
    if (strcmp(only, "1") == 0 || strstr(only, "packed")) bench_packed_decode();
    if (strcmp(only, "1") == 0 || strstr(only, "q8k")) bench_quantize_q8k();
    if (strcmp(only, "1") == 0 || strstr(only, "smallbatch")) bench_small_batches();
    const uint32_t types[] = {LLMM_TYPE_Q4_0, LLMM_TYPE_Q8_0, LLMM_TYPE_Q4_K, LLMM_TYPE_Q6_K,
                              LLMM_TYPE_Q5_K, LLMM_TYPE_Q3_K, LLMM_TYPE_Q2_K, LLMM_TYPE_Q5_0,
                              LLMM_TYPE_Q4_1, LLMM_TYPE_Q5_1, LLMM_TYPE_IQ4_NL, LLMM_TYPE_IQ4_XS,
                              LLMM_TYPE_F16,  LLMM_TYPE_BF16};
    const size_t shapes[][3] = {{4864, 896, 1}, {0, 4864, 1}, {0, 151936, 1}, {4864, 896, 64}, {0, 4864, 64}}; /* ne0 0: 896 */
    rng_seed(&rng, 5001);
    char head[128];
    int at = snprintf(head, sizeof head, "type   ne0 x ne1 x rows     ns/weight: scalar");
    for (size_t ii = 0; ii < ARRAY_LEN(k_simd_isas); ii++)
        at += snprintf(head + at, sizeof head - (size_t)at, " %8s", k_isa_names[k_simd_isas[ii]]);
    print_message("%s   (scalar / each)\n", head);
    for (size_t ti = 0; ti < ARRAY_LEN(types); ti++) {
        const llmm_type_traits *t = llmm__type_get(types[ti]);
        if (strcmp(only, "1") != 0 && !strstr(only, t->name)) continue;
        for (size_t si = 0; si < ARRAY_LEN(shapes); si++) {
            const size_t ne0 = shapes[si][0] ? shapes[si][0] : t->block_size == QK_K ? 1024 : 896;
            const size_t ne1 = shapes[si][1], n_rows = shapes[si][2], rb = llmm__row_bytes(types[ti], ne0);
            /* one quantized row repeated: speed does not depend on the values */
            float *wf = rng_floats(&rng, ne0, -2.0f, 2.0f), *x = rng_floats(&rng, ne0 * n_rows, -2.0f, 2.0f);
            uint8_t *w = xmalloc(rb * ne1);
            encode_row(types[ti], wf, w, ne0);
            for (size_t j = 1; j < ne1; j++) memcpy(w + j * rb, w, rb);
            const llmm_tensor wt = {w, types[ti], (int64_t)ne0, (int64_t)ne1, rb, NULL};
            float *out = xmalloc(ne1 * n_rows * sizeof *out);
            double ns[CPU_ISA_COUNT] = {0};
            for (int isa = 0; isa < (int)CPU_ISA_COUNT; isa++) {
                if (!llmm__cpu_kernels_get((cpu_isa)isa)) continue;
                void *st = cpu_start_isa((cpu_isa)isa, 1);
                ns[isa] = 1e9 * matmul_seconds(st, &wt, x, n_rows, out) / ((double)ne0 * ne1 * n_rows);
                llmm__cpu_backend.shutdown(st);
            }
            char line[160], ratios[64] = "";
            int n = snprintf(line, sizeof line, "%-5s %5zu x %4zu x %2zu     %8.4f", t->name, ne0, ne1, n_rows, ns[0]);
            int nr = 0;
            for (size_t ii = 0; ii < ARRAY_LEN(k_simd_isas); ii++) {
                const double v = ns[k_simd_isas[ii]];
                n += snprintf(line + n, sizeof line - (size_t)n, " %8.4f", v);
                nr += snprintf(ratios + nr, sizeof ratios - (size_t)nr, "%s%.1fx", ii ? ", " : "", v > 0 ? ns[0] / v : 0.0);
            }
            print_message("%s   (%s)\n", line, ratios);
            free(wf);
            free(x);
            free(w);
            free(out);
        }
    }
}

/* Decode attention of the 0.5B shape (14 query heads over 2 K/V heads of 64, F16 K/V in the
 * pool's head-major layout, 544 positions, 24 layers' separate K/V): ms per token for 1 and 2
 * threads, every table, K/V warm in the caches. With LLMM_BENCH_KERNELS=attention (or =1). */
static void bench_attention(void) {
    enum { L = 24, NH = 14, NHKV = 2, HD = 64, BS = 16, NPOS = 544, NBLK = NPOS / BS };
    const size_t row = HD * 2, seg = BS * row, region = seg * NBLK;
    uint16_t *pool = xmalloc(2 * L * NHKV * region);
    for (size_t i = 0; i < L * NHKV * region; i++) pool[i] = (uint16_t)(0x3800 | (rng_u64(&rng) & 0x83ff));
    uint32_t blocks[NBLK];
    for (uint32_t i = 0; i < NBLK; i++) blocks[i] = i;
    float *q = rng_floats(&rng, NH * HD, -1.0f, 1.0f), *out = xmalloc(NH * HD * sizeof *out);
    print_message("decode attention, 0.5B shape, %d positions, ms per token (%d layers):\n", NPOS, L);
    for (int isa = 0; isa < (int)CPU_ISA_COUNT; isa++) {
        if (!llmm__cpu_kernels_get((cpu_isa)isa)) continue;
        for (int threads = 1; threads <= 2; threads++) {
            void *st = cpu_start_isa((cpu_isa)isa, threads);
            double best = 1e9;
            for (int rep = 0; rep < 10; rep++) {
                const double t0 = now_s();
                for (int l = 0; l < L; l++) {
                    uint8_t *base = (uint8_t *)pool;
                    const llmm_kv_view v = {.k = base + (size_t)l * NHKV * region,
                                            .v = base + (size_t)(L + l) * NHKV * region, .blocks = blocks,
                                            .block_size = BS, .block_shift = 4, .block_stride = seg,
                                            .head_stride = region, .row_bytes = row, .n_head_kv = NHKV,
                                            .head_dim = HD, .type = LLMM_KV_F16};
                    const cpu_attn_row ar = {v, NPOS, 0};
                    const cpu_attn_batch b = {q, out, 1, &ar, NH, NHKV, HD, 0.125f, 0.0f};
                    assert_int_equal(llmm__cpu_attend(st, &b), LLMM_OK);
                }
                best = fmin(best, now_s() - t0);
            }
            print_message("  %-8s %d thread%s: %.3f ms\n", llmm__cpu_kernels_get((cpu_isa)isa)->name, threads,
                          threads > 1 ? "s" : "", 1e3 * best);
            llmm__cpu_backend.shutdown(st);
        }
    }
    free(pool);
    free(q);
    free(out);
}

/* copies back-to-back copies of an ne0 x ne1 matrix of type whose rows all hold one random
 * row's encoding (streaming benchmarks: the bytes matter, not their values) */
static uint8_t *replicated_weights(uint32_t type, size_t ne0, size_t ne1, size_t copies) {
    const size_t rb = llmm__row_bytes(type, ne0);
    float *wf = rng_floats(&rng, ne0, -2.0f, 2.0f);
    uint8_t *w = xmalloc(rb * ne1 * copies);
    encode_row(type, wf, w, ne0);
    for (size_t j = 1; j < ne1 * copies; j++) memcpy(w + j * rb, w, rb);
    free(wf);
    return w;
}

/* Q4_0 matmul with one operand row, weights streamed from memory (enough copies of each shape
 * to pass 200 MB), 1 and 2 threads, best table, best of 5: GB/s of weights. Shows how the
 * decode shapes scale with threads. With LLMM_BENCH_KERNELS=threads. */
static void bench_matmul_threads(void) {
    const size_t shapes[][2] = {{896, 151936}, {4864, 896}, {896, 4864}, {896, 896}}; /* ne0, ne1 */
    print_message("Q4_0 matmul, 1 operand row, weights streamed: GB/s with 1 and 2 threads\n");
    for (size_t si = 0; si < ARRAY_LEN(shapes); si++) {
        const size_t ne0 = shapes[si][0], ne1 = shapes[si][1], rb = llmm__row_bytes(LLMM_TYPE_Q4_0, ne0);
        const size_t bytes = rb * ne1, copies = (200u << 20) / bytes + 1;
        float *x = rng_floats(&rng, ne0, -2.0f, 2.0f), *out = xmalloc(ne1 * sizeof *out);
        uint8_t *w = replicated_weights(LLMM_TYPE_Q4_0, ne0, ne1, copies);
        double gbs[3] = {0};
        for (int threads = 1; threads <= 2; threads++) {
            void *st = cpu_start_isa(llmm__cpu_kernels_select(CPU_ISA_COUNT)->isa, threads);
            double best = 1e9;
            for (int rep = 0; rep < 5; rep++) {
                const double t0 = now_s();
                for (size_t c = 0; c < copies; c++) {
                    const llmm_tensor wt = {w + c * bytes, LLMM_TYPE_Q4_0, (int64_t)ne0, (int64_t)ne1, rb, NULL};
                    assert_int_equal(llmm__cpu_backend.matmul(st, &wt, x, 1, out), LLMM_OK);
                }
                best = fmin(best, now_s() - t0);
            }
            gbs[threads] = (double)(bytes * copies) / best / 1e9;
            llmm__cpu_backend.shutdown(st);
        }
        print_message("  %5zu x %6zu: %5.1f -> %5.1f GB/s (%.2fx)\n", ne0, ne1, gbs[1], gbs[2], gbs[2] / gbs[1]);
        free(x);
        free(w);
        free(out);
    }
}

/* GB/s of weights of matmuls of n_rows operand rows by the backend on table isa over copies of
 * one ne0 x ne1 matrix of type, about total bytes of them, best of 5 to 200 passes (0.3 s): from the packed
 * copies (packed_tiles.h; a copy slot per matrix, made by a first one-row call) or from the
 * weights as stored. */
static double packed_decode_gbs(cpu_isa isa, uint32_t type, size_t ne0, size_t ne1, size_t total, int threads,
                                size_t n_rows, int packed) {
    const size_t rb = llmm__row_bytes(type, ne0), bytes = rb * ne1, copies = total / bytes + 1;
    float *x = rng_floats(&rng, ne0 * n_rows, -2.0f, 2.0f), *out = xmalloc(ne1 * n_rows * sizeof *out);
    uint8_t *w = replicated_weights(type, ne0, ne1, copies);
    llmm_weight_copy *slot = xmalloc(copies * sizeof *slot);
    cpu_weight *cw = xmalloc(copies * sizeof *cw);
    llmm_tensor *wt = xmalloc(copies * sizeof *wt);
    void *st = cpu_start_isa(isa, threads);
    for (size_t c = 0; c < copies; c++) {
        slot[c] = (llmm_weight_copy){.release_source = 0};
        atomic_init(&slot[c].state, LLMM_COPY_NONE);
        cw[c] = (cpu_weight){.copy = packed ? &slot[c] : NULL};
        wt[c] = (llmm_tensor){.data = w + c * bytes, .type = type, .ne0 = (int64_t)ne0, .ne1 = (int64_t)ne1,
                              .row_bytes = rb, .backend = &cw[c]};
        assert_int_equal(llmm__cpu_backend.matmul(st, &wt[c], x, 1, out), LLMM_OK); /* makes the copy */
        if (packed) assert_int_equal(atomic_load(&slot[c].state), LLMM_COPY_READY);
    }
    double best = 1e9;
    const double start = now_s();
    for (int rep = 0; rep < 5 || (rep < 200 && now_s() - start < 0.3); rep++) {
        const double t0 = now_s();
        for (size_t c = 0; c < copies; c++)
            assert_int_equal(llmm__cpu_backend.matmul(st, &wt[c], x, n_rows, out), LLMM_OK);
        best = fmin(best, now_s() - t0);
    }
    for (size_t c = 0; c < copies && packed; c++) slot[c].free_data(slot[c].data, slot[c].bytes);
    llmm__cpu_backend.shutdown(st);
    free(x);
    free(out);
    free(w);
    free(slot);
    free(cw);
    free(wt);
    return (double)(bytes * copies) / best / 1e9;
}

/* Matmuls from packed copies against the weights as stored, per type each x86 table packs:
 * one-row (decode) from cache on one core (4864 x 160), one and two threads streamed (2048 x
 * 5632 copies, about 300 MB), and 64 operand rows from cache on one core (a prompt after the
 * copies are made), in GB/s of weights per operand row. With LLMM_BENCH_KERNELS=packed (or =1). */
static void bench_packed_decode(void) {
    const uint32_t types[] = {LLMM_TYPE_Q4_0, LLMM_TYPE_Q8_0, LLMM_TYPE_Q5_0, LLMM_TYPE_Q4_K,
                              LLMM_TYPE_Q5_K, LLMM_TYPE_Q6_K, LLMM_TYPE_IQ4_NL, LLMM_TYPE_IQ4_XS,
                              LLMM_TYPE_Q2_K, LLMM_TYPE_Q3_K};
    const cpu_isa isas[] = {CPU_ISA_AVX2, CPU_ISA_AVX_VNNI, CPU_ISA_AVX512, CPU_ISA_AMX};
    for (size_t ii = 0; ii < ARRAY_LEN(isas); ii++) {
        const cpu_kernels *k = llmm__cpu_kernels_get(isas[ii]);
        if (!k) continue;
        print_message("matmuls, GB/s of weights, as stored -> packed copy (%s)\n"
                      "type     1 row, 1 core, cache   1 row, 1 core, streamed   1 row, 2 threads, streamed"
                      "   64 rows, 1 core (x 64)\n", k->name);
        for (size_t ti = 0; ti < ARRAY_LEN(types); ti++) {
            if (!k->matmul_packed[types[ti]]) continue;
            double g[4][2];
            for (int packed = 0; packed < 2; packed++) {
                g[0][packed] = packed_decode_gbs(isas[ii], types[ti], 4864, 160, 0, 1, 1, packed);
                g[1][packed] = packed_decode_gbs(isas[ii], types[ti], 2048, 5632, 300u << 20, 1, 1, packed);
                g[2][packed] = packed_decode_gbs(isas[ii], types[ti], 2048, 5632, 300u << 20, 2, 1, packed);
                g[3][packed] = 64 * packed_decode_gbs(isas[ii], types[ti], 4864, 160, 0, 1, 64, packed);
            }
            print_message("%-7s %5.1f -> %5.1f           %5.1f -> %5.1f              %5.1f -> %5.1f"
                          "                %6.0f -> %6.0f\n", llmm__type_get(types[ti])->name, g[0][0], g[0][1],
                          g[1][0], g[1][1], g[2][0], g[2][1], g[3][0], g[3][1]);
        }
    }
}

/* Steps of 2-16 rows: the time of a matmul of n operand rows over the 0.5B model's FFN matrix
 * (896 x 4864, K-quants 4864 x 896, copies streamed from memory, about 300 MB) against one row,
 * 2 threads, per table and type, weights as stored (a prompt before the packed copies exist)
 * and from the copies. The ideal is 1.0: the weights read once, each row costing only its
 * arithmetic. With LLMM_BENCH_KERNELS=smallbatch (or =1). */
static void bench_small_batches(void) {
    const uint32_t types[] = {LLMM_TYPE_Q4_0, LLMM_TYPE_Q8_0, LLMM_TYPE_Q5_0, LLMM_TYPE_Q4_K, LLMM_TYPE_Q6_K};
    const cpu_isa isas[] = {CPU_ISA_AVX2, CPU_ISA_AVX_VNNI, CPU_ISA_AVX512, CPU_ISA_AMX};
    const size_t rows[] = {2, 4, 8, 16};
    for (size_t ii = 0; ii < ARRAY_LEN(isas); ii++) {
        if (!llmm__cpu_kernels_get(isas[ii])) continue;
        print_message("step of n rows / step of 1 row, 2 threads, streamed (%s): as stored | packed copy\n"
                      "type    n=2    4      8      16    |  2      4      8      16\n",
                      k_isa_names[isas[ii]]);
        for (size_t ti = 0; ti < ARRAY_LEN(types); ti++) {
            const int k_quant = llmm__type_get(types[ti])->block_size == QK_K;
            const size_t ne0 = k_quant ? 4864 : 896, ne1 = k_quant ? 896 : 4864;
            char line[160];
            int n = snprintf(line, sizeof line, "%-6s", llmm__type_get(types[ti])->name);
            for (int packed = 0; packed < 2; packed++) {
                const double one = packed_decode_gbs(isas[ii], types[ti], ne0, ne1, 300u << 20, 2, 1, packed);
                for (size_t ri = 0; ri < ARRAY_LEN(rows); ri++) {
                    const double g = packed_decode_gbs(isas[ii], types[ti], ne0, ne1, 300u << 20, 2, rows[ri], packed);
                    n += snprintf(line + n, sizeof line - (size_t)n, " %5.2f ", one / g);
                }
                if (!packed) n += snprintf(line + n, sizeof line - (size_t)n, "|");
            }
            print_message("%s\n", line);
        }
    }
}

/* Activation rows to Q8_K (the K-quant matmuls' operand), the 0.5B model's FFN row lengths
 * (896 and 4864 rounded to multiples of 256): ns per value of the type table's quantizer (the
 * scalar path, which cpu/ops/matmul.c also copies into the split fields) and of each table's
 * quantize_q8k, best of 3 batches, the row in L1. With LLMM_BENCH_KERNELS=q8k (or =1). */
static void bench_quantize_q8k(void) {
    const size_t sizes[] = {1024, 4608};
    print_message("Q8_K activation quantizer, ns per value: scalar, then each table\n");
    for (size_t si = 0; si < ARRAY_LEN(sizes); si++) {
        const size_t n = sizes[si], nb = n / QK_K;
        float *x = rng_floats(&rng, n, -2.0f, 2.0f), *d = xmalloc(nb * sizeof *d);
        block_q8_K *blk = xmalloc(nb * sizeof *blk);
        int8_t *qs = xmalloc(n);
        int16_t *bsums = xmalloc(n / 16 * sizeof *bsums);
        const int reps = 20000;
        for (int isa = 0; isa < (int)CPU_ISA_COUNT; isa++) {
            const cpu_kernels *k = llmm__cpu_kernels_get((cpu_isa)isa);
            if (!k || (isa != CPU_ISA_SCALAR && !k->quantize_q8k)) continue;
            double best = 1e9;
            for (int batch = 0; batch < 3; batch++) {
                const double t0 = now_s();
                for (int i = 0; i < reps; i++) {
                    if (isa == CPU_ISA_SCALAR) llmm__quantize_row_q8_K(x, blk, n);
                    else k->quantize_q8k(x, qs, d, bsums, n);
                }
                best = fmin(best, (now_s() - t0) / reps);
            }
            print_message("  n=%4zu %-8s %.3f ns/value\n", n, k->name, 1e9 * best / (double)n);
        }
        free(x);
        free(d);
        free(blk);
        free(qs);
        free(bsums);
    }
}

/* Unknown LLMM_CPU_KERNELS values mean "best available"; a request above the CPU's is lowered. */
static void test_kernel_selection(void **state) {
    (void)state;
    setenv("LLMM_CPU_KERNELS", "no-such-isa", 1);
    assert_int_equal((int)llmm__cpu_kernels_env_cap(), (int)CPU_ISA_COUNT);
    unsetenv("LLMM_CPU_KERNELS");
    assert_int_equal((int)llmm__cpu_kernels_env_cap(), (int)CPU_ISA_COUNT);
    const cpu_kernels *best = llmm__cpu_kernels_select(CPU_ISA_COUNT);
    assert_non_null(best);
    print_message("best kernels on this CPU: %s\n", best->name);
    assert_ptr_equal(llmm__cpu_kernels_select(CPU_ISA_SCALAR), &llmm__cpu_kernels_scalar);
    for (int isa = 0; isa < (int)CPU_ISA_COUNT; isa++) {
        const cpu_kernels *k = llmm__cpu_kernels_select((cpu_isa)isa);
        assert_true((int)k->isa <= isa);
        assert_non_null(k->rms_norm_row);
        if (llmm__cpu_kernels_get((cpu_isa)isa)) assert_int_equal((int)k->isa, isa);
    }
    assert_ptr_equal(llmm__cpu_kernels_get(CPU_ISA_SCALAR), &llmm__cpu_kernels_scalar);
}

/* ================================================================== packed weight copies */

/* A copy of bytes in a file of its own, mapped read-only and private as a model's file is
 * (so the backend may drop pages it packed); NULL when /tmp is not writable. */
static void *map_as_file(const void *bytes, size_t n) {
    char path[] = "/tmp/llmm-packed-XXXXXX";
    const int fd = mkstemp(path);
    if (fd < 0) return NULL;
    unlink(path);
    void *m = write(fd, bytes, n) == (ssize_t)n ? mmap(NULL, n, PROT_READ, MAP_PRIVATE, fd, 0) : MAP_FAILED;
    close(fd);
    return m == MAP_FAILED ? NULL : m;
}

/* One weight through the backend on table isa with a copy slot: a prompt-sized matmul leaves the
 * slot alone, the first one-row matmul packs the whole tiles (or marks the slot NEVER when
 * there is none), and every result before, during and after equals the scalar table's bit for
 * bit, for 1, 3 and 37 operand rows. from_file: the weight is a file mapping the backend may
 * drop pages of, whose bytes must read back unchanged afterwards. */
static void check_packed_copy(cpu_isa isa, uint32_t type, size_t ne0, size_t ne1, int threads, int from_file) {
    const size_t rb = llmm__row_bytes(type, ne0), counts[] = {37, 1, 1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 15, 16, 37};
    float *wf = rng_floats(&rng, ne0 * ne1, -2.0f, 2.0f), *x = rng_floats(&rng, ne0 * 37, -2.0f, 2.0f);
    uint8_t *w = xmalloc(rb * ne1);
    for (size_t j = 0; j < ne1; j++) encode_row(type, wf + j * ne0, w + j * rb, ne0);
    void *mapped = from_file ? map_as_file(w, rb * ne1) : NULL;
    if (from_file && !mapped) fail_msg("could not map a temporary file");
    llmm_weight_copy slot = {.release_source = from_file};
    atomic_init(&slot.state, LLMM_COPY_NONE);
    const llmm_tensor plain = {.data = w, .type = type, .ne0 = (int64_t)ne0, .ne1 = (int64_t)ne1, .row_bytes = rb};
    llmm_tensor wt = plain;
    cpu_weight cw = {.copy = &slot};
    wt.data = from_file ? mapped : w;
    wt.backend = &cw;
    float *ref = xmalloc(ne1 * 37 * sizeof *ref), *out = xmalloc(ne1 * 37 * sizeof *out);
    void *scalar = cpu_start_isa(CPU_ISA_SCALAR, 1), *st = cpu_start_isa(isa, threads);
    const char *table = llmm__cpu_kernels_get(isa)->name;
    for (size_t i = 0; i < ARRAY_LEN(counts); i++) {
        const size_t n_rows = counts[i];
        assert_int_equal(llmm__cpu_backend.matmul(scalar, &plain, x, n_rows, ref), LLMM_OK);
        fill_nan(out, ne1 * n_rows);
        assert_int_equal(llmm__cpu_backend.matmul(st, &wt, x, n_rows, out), LLMM_OK);
        if (memcmp(out, ref, ne1 * n_rows * sizeof *out) != 0)
            fail_msg("%s %s %zux%zu, call %zu (%zu rows), threads %d: packed path differs from the scalar table",
                     table, llmm__type_get(type)->name, ne0, ne1, i, n_rows, threads);
        const uint32_t want = i == 0 ? LLMM_COPY_NONE : ne1 >= 16 ? LLMM_COPY_READY : LLMM_COPY_NEVER;
        assert_int_equal(atomic_load(&slot.state), want);
    }
    if (atomic_load(&slot.state) == LLMM_COPY_READY) {
        assert_int_equal(slot.layout, PACKED_LAYOUT_ROWS16);
        assert_int_equal(slot.bytes, ne1 / 16 * 16 * rb);
        /* the table's packer wrote what the reference packer writes */
        uint8_t *want = xmalloc(slot.bytes);
        llmm__packed_tiles_pack(&plain, 0, ne1 / 16, want);
        if (memcmp(slot.data, want, slot.bytes) != 0)
            fail_msg("%s %s %zux%zu: the table's packer differs from packed_tiles_pack", table,
                     llmm__type_get(type)->name, ne0, ne1);
        free(want);
        /* every block reads back as the file holds it; lookups of a tied table read the copy */
        const size_t bb = llmm__type_get(type)->block_bytes, bs = llmm__type_get(type)->block_size;
        uint8_t block[PACKED_MAX_BLOCK_BYTES];
        for (size_t j = 0; j < ne1 / 16 * 16; j++)
            for (size_t b = 0; b < ne0 / bs; b++) {
                llmm__packed_tiles_read_block(&wt, slot.data, j, b, block);
                assert_memory_equal(block, w + j * rb + b * bb, bb);
            }
        const llmm_token ids[] = {0, (llmm_token)(ne1 / 2), (llmm_token)(ne1 - 1), 5};
        float *e = xmalloc(ARRAY_LEN(ids) * ne0 * sizeof *e), *e_ref = xmalloc(ARRAY_LEN(ids) * ne0 * sizeof *e);
        assert_int_equal(llmm__cpu_embed_rows(&wt, ids, ARRAY_LEN(ids), e), LLMM_OK);
        assert_int_equal(llmm__cpu_embed_rows(&plain, ids, ARRAY_LEN(ids), e_ref), LLMM_OK);
        assert_memory_equal(e, e_ref, ARRAY_LEN(ids) * ne0 * sizeof *e);
        free(e);
        free(e_ref);
        slot.free_data(slot.data, slot.bytes);
    }
    if (mapped) {
        assert_memory_equal(mapped, w, rb * ne1);
        munmap(mapped, rb * ne1);
    }
    llmm__cpu_backend.shutdown(st);
    llmm__cpu_backend.shutdown(scalar);
    free(wf);
    free(x);
    free(w);
    free(ref);
    free(out);
}

static void test_backend_packed_copies(void **state) {
    (void)state;
    const uint32_t types[] = {LLMM_TYPE_Q4_0, LLMM_TYPE_Q5_0, LLMM_TYPE_Q8_0, LLMM_TYPE_IQ4_NL,
                              LLMM_TYPE_Q4_1, LLMM_TYPE_Q5_1, LLMM_TYPE_Q4_K, LLMM_TYPE_Q5_K,
                              LLMM_TYPE_Q6_K, LLMM_TYPE_IQ4_XS, LLMM_TYPE_Q2_K, LLMM_TYPE_Q3_K};
    /* ne0, ne1, threads; K-quant rows are whole super-blocks of 256 */
    const size_t dims[][3] = {{96, 77, 2}, {416, 45, 3}, {256, 1003, 2}, {64, 7, 2}, {1184, 16, 1}};
    const size_t kdims[][3] = {{256, 77, 2}, {768, 45, 3}, {512, 1003, 2}, {256, 7, 2}, {1280, 16, 1}};
    const cpu_isa isas[] = {CPU_ISA_AVX2, CPU_ISA_AVX_VNNI, CPU_ISA_AVX512, CPU_ISA_AMX};
    rng_seed(&rng, 4101);
    for (size_t ii = 0; ii < ARRAY_LEN(isas); ii++) {
        const cpu_kernels *k = llmm__cpu_kernels_get(isas[ii]);
        if (!k) {
            print_message("packed copies: no %s table on this CPU or build\n", k_isa_names[isas[ii]]);
            continue;
        }
        size_t checked = 0;
        for (size_t ti = 0; ti < ARRAY_LEN(types); ti++) {
            if (!k->matmul_packed[types[ti]]) continue;
            const int k_quant = llmm__type_get(types[ti])->block_size == 256;
            for (size_t di = 0; di < ARRAY_LEN(dims); di++) {
                const size_t *d = k_quant ? kdims[di] : dims[di];
                check_packed_copy(isas[ii], types[ti], d[0], d[1], (int)d[2], di == 2);
                checked++;
            }
        }
        print_message("%s packed copies: %zu weights bit-identical to the scalar table, before and after packing\n",
                      k->name, checked);
        /* the table's packer on every packable type, the ones it does not compute from too */
        for (size_t ti = 0; ti < ARRAY_LEN(types) && k->pack_tiles; ti++) {
            const size_t ne0 = llmm__type_get(types[ti])->block_size == 256 ? 768 : 416, ne1 = 48;
            const size_t rb = llmm__row_bytes(types[ti], ne0);
            float *wf = rng_floats(&rng, ne0 * ne1, -2.0f, 2.0f);
            uint8_t *w = xmalloc(rb * ne1), *got = xmalloc(rb * ne1), *want = xmalloc(rb * ne1);
            for (size_t j = 0; j < ne1; j++) encode_row(types[ti], wf + j * ne0, w + j * rb, ne0);
            const llmm_tensor wt = {.data = w, .type = types[ti], .ne0 = (int64_t)ne0, .ne1 = (int64_t)ne1,
                                    .row_bytes = rb};
            k->pack_tiles(&wt, 1, 3, got); /* tiles 1 and 2 */
            llmm__packed_tiles_pack(&wt, 1, 3, want);
            if (memcmp(got + 16 * rb, want + 16 * rb, 32 * rb) != 0)
                fail_msg("%s %s: the table's packer differs from packed_tiles_pack", k->name,
                         llmm__type_get(types[ti])->name);
            free(wf);
            free(w);
            free(got);
            free(want);
        }
    }
}

/* Within forward steps the decode steps make the copies, of any number of sequences, and
 * prompt steps none, however short; the copies a step makes are bounded by its budget:
 * whole matrices while it lasts, a larger one only as the first of a step; a warm-up step
 * has no bound. */
static void test_packing_step_budget(void **state) {
    (void)state;
    if (!llmm__cpu_kernels_get(CPU_ISA_AVX512)) {
        print_message("skipped: no AVX-512 on this CPU, whose table alone packs the Q8_0 weights used here\n");
        return;
    }
    enum { NE0 = 256, NW = 4 };
    const size_t rows[NW] = {64, 64, 64, 160}, rb = llmm__row_bytes(LLMM_TYPE_Q8_0, NE0);
    uint8_t *w[NW];
    llmm_weight_copy slot[NW];
    cpu_weight cw[NW];
    llmm_tensor wt[NW];
    rng_seed(&rng, 4102);
    float *x = rng_floats(&rng, NE0, -2.0f, 2.0f), *out = xmalloc(160 * sizeof *out);
    for (size_t i = 0; i < NW; i++) {
        float *wf = rng_floats(&rng, NE0 * rows[i], -2.0f, 2.0f);
        w[i] = xmalloc(rb * rows[i]);
        for (size_t j = 0; j < rows[i]; j++) encode_row(LLMM_TYPE_Q8_0, wf + j * NE0, w[i] + j * rb, NE0);
        free(wf);
        slot[i] = (llmm_weight_copy){.release_source = 0};
        atomic_init(&slot[i].state, LLMM_COPY_NONE);
        cw[i] = (cpu_weight){.copy = &slot[i]};
        wt[i] = (llmm_tensor){.data = w[i], .type = LLMM_TYPE_Q8_0, .ne0 = NE0, .ne1 = (int64_t)rows[i],
                              .row_bytes = rb, .backend = &cw[i]};
    }
    void *st = cpu_start_isa(CPU_ISA_AVX512, 2);
    ((cpu_state *)st)->pack_step_bytes = 96 * rb; /* one and a half of the small matrices */
    /* per step (tokens, kind), the slots READY after it */
    const size_t tokens[] = {16, 2, 8, 1, 1, 1};
    const llmm_step_kind kind[] = {LLMM_STEP_PROMPT, LLMM_STEP_PROMPT, LLMM_STEP_DECODE,
                                   LLMM_STEP_DECODE, LLMM_STEP_DECODE, LLMM_STEP_DECODE};
    const int ready[][NW] = {{0, 0, 0, 0}, {0, 0, 0, 0}, {1, 0, 0, 0}, {1, 1, 0, 0}, {1, 1, 1, 0}, {1, 1, 1, 1}};
    for (size_t step = 0; step < ARRAY_LEN(tokens); step++) {
        const llmm_step desc = matmul_step(kind[step], tokens[step]);
        assert_int_equal(llmm__cpu_backend.step_begin(st, &desc), LLMM_OK);
        for (size_t i = 0; i < NW; i++) assert_int_equal(llmm__cpu_backend.matmul(st, &wt[i], x, 1, out), LLMM_OK);
        assert_int_equal(llmm__cpu_backend.step_end(st), LLMM_OK);
        for (size_t i = 0; i < NW; i++)
            if ((atomic_load(&slot[i].state) == LLMM_COPY_READY) != ready[step][i])
                fail_msg("step %zu (%zu tokens, %s): weight %zu %s", step, tokens[step],
                         kind[step] == LLMM_STEP_DECODE ? "decode" : "prompt", i,
                         ready[step][i] ? "not packed" : "packed too early");
    }
    /* a warm-up step (llmm_context_warmup) makes every copy at once, whatever the budget */
    for (size_t i = 0; i < NW; i++) {
        slot[i].free_data(slot[i].data, slot[i].bytes);
        slot[i].data = NULL;
        atomic_store(&slot[i].state, LLMM_COPY_NONE);
    }
    llmm_step warm = matmul_step(LLMM_STEP_DECODE, 1);
    warm.warmup = 1;
    assert_int_equal(llmm__cpu_backend.step_begin(st, &warm), LLMM_OK);
    for (size_t i = 0; i < NW; i++) assert_int_equal(llmm__cpu_backend.matmul(st, &wt[i], x, 1, out), LLMM_OK);
    assert_int_equal(llmm__cpu_backend.step_end(st), LLMM_OK);
    for (size_t i = 0; i < NW; i++)
        if (atomic_load(&slot[i].state) != LLMM_COPY_READY) fail_msg("warm-up step: weight %zu not packed", i);
    llmm__cpu_backend.shutdown(st);
    for (size_t i = 0; i < NW; i++) {
        slot[i].free_data(slot[i].data, slot[i].bytes);
        free(w[i]);
    }
    free(x);
    free(out);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kernel_selection),
        cmocka_unit_test(test_quantize_q8_exact),
        cmocka_unit_test(test_quantize_q8_non_finite),
        cmocka_unit_test(test_quantize_q8k_exact),
        cmocka_unit_test(test_round_f16_exact),
        cmocka_unit_test(test_round_bf16_exact),
        cmocka_unit_test(test_gemm_q4_0),
        cmocka_unit_test(test_gemm_q8_0),
        cmocka_unit_test(test_gemm_f32),
        cmocka_unit_test(test_gemm_f16),
        cmocka_unit_test(test_gemm_bf16),
        cmocka_unit_test(test_integer_sums_q4_0),
        cmocka_unit_test(test_integer_sums_q8_0),
        cmocka_unit_test(test_int8_extremes),
        cmocka_unit_test(test_gemm_q2_K),
        cmocka_unit_test(test_gemm_q3_K),
        cmocka_unit_test(test_gemm_q4_K),
        cmocka_unit_test(test_gemm_q5_K),
        cmocka_unit_test(test_gemm_q6_K),
        cmocka_unit_test(test_integer_sums_kquant),
        cmocka_unit_test(test_gemm_q5_0),
        cmocka_unit_test(test_gemm_iq4_nl),
        cmocka_unit_test(test_gemm_iq4_xs),
        cmocka_unit_test(test_gemm_q4_1),
        cmocka_unit_test(test_gemm_q5_1),
        cmocka_unit_test(test_integer_sums_legacy),
        cmocka_unit_test(test_exp_accuracy),
        cmocka_unit_test(test_exp_sub_sum),
        cmocka_unit_test(test_silu_mul),
        cmocka_unit_test(test_gelu_mul),
        cmocka_unit_test(test_rms_norm_row),
        cmocka_unit_test(test_dot_axpy),
        cmocka_unit_test(test_delta_kernels),
        cmocka_unit_test(test_conv_rows),
        cmocka_unit_test(test_f16_to_f32),
        cmocka_unit_test(test_attn_chunk),
        cmocka_unit_test(test_attn_chunk_f16),
        cmocka_unit_test(test_backend_matmul_all_tables),
        cmocka_unit_test(test_backend_packed_copies),
        cmocka_unit_test(test_packing_step_budget),
        cmocka_unit_test(test_bench_kernels),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
