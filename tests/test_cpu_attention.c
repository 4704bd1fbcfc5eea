/* Kernel tests: the type table (lib/quant.c), the CPU backend's dots (cpu/cpu_dot.c) and the
 * kernels behind its step ops over views the core never builds (heads side by side, padded
 * rows, rows of two sequences in one attention block), each checked against a float64
 * reference computed here, on seeded random data (uniform in [-2, 2], never zero) and odd
 * sizes. The ops as the core calls them, through the backend table, are the conformance
 * suite's (backend_conformance.c, test_backend_conformance.c).
 *
 * Tolerances (u = 2^-24, the float unit roundoff; every bound is stated where it is used):
 *  - conversions, dequantization, embed, kv_write: exact (bit or value equality). The
 *    dequantized value of every supported format (f16/bf16 widened, d_f16 * small int) is
 *    exactly representable in float, so there is nothing to round.
 *  - f32 dot: the kernel keeps 8 float partial sums, so each term passes through at most
 *    n/8 + 10 float roundings: |err| <= (n/8 + 10) u sum|a_i b_i| (rigorous; dropping or
 *    doubling a single term, about sum|a_i b_i| / n, is far larger for every n tested).
 *  - f16/bf16 dots accumulate in double: one final rounding, |err| <= 2u sum|a_i b_i| against
 *    the float64 dot of the same f16/bf16 values; against the original floats each operand
 *    carries its format's rounding (2^-11 for f16, 2^-8 for bf16), bounded term by term.
 *  - q8_0/q4_0 dots: the integer block sums are exact, each block adds a scale product and a
 *    float sum: |err| <= (n/32 + 3) u sum|a_i b_i| against the float64 dot of exactly the
 *    dequantized weights and the Q8_0-quantized activations. Against the original floats a
 *    loose, statistical bound (see loose_tol_quant) that still fails for a nibble-swapped
 *    Q4_0 layout; the test checks that it would.
 *  - rms_norm, glu, rope, attention: a few float roundings per output, bounds derived at
 *    each test, all proportional to the magnitudes involved.
 * Threads: the attention kernels run with n_threads 1, 2 and 3; their outputs must be bitwise
 * identical across thread counts (each output is computed by one thread). */
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

#include "backend/backend.h"
#include "cpu_backend.h"
#include "kv_rows.h"
#include "cpu_dot.h"
#include "format/quant.h"
#include "support/alloc.h"
#include "support/fixtures.h"
#include "support/numeric.h"
#include "support/rng.h"

static const int k_threads[] = {1, 2, 3};
static const size_t k_float_sizes[] = {1, 7, 31, 33, 173, 1001};
static const size_t k_block_sizes[] = {32, 96, 224, 736};

/* The data stream: every test seeds it (rng_seed) before drawing. */
static test_rng rng;

/* ------------------------------------------------------------------ float64 references
 * (the half formats': support/numeric.h) */

/* Q4_0 blocks built by hand per the block_q4_0 layout, with the reference engine's
 * convention: d = (signed value of largest magnitude) / -8, q = clamp(round(x/d) + 8),
 * element j in the low nibble of qs[j], element j+16 in its high nibble. */
static void ref_quantize_q4_0(const float *x, void *dst, size_t n) {
    block_q4_0 *y = dst;
    for (size_t b = 0; b < n / QK4_0; b++) {
        const float *xb = x + b * QK4_0;
        float amax = 0, max = 0;
        for (int j = 0; j < QK4_0; j++)
            if (fabsf(xb[j]) > amax) {
                amax = fabsf(xb[j]);
                max = xb[j];
            }
        const float d = max / -8.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[b].d = ref_f32_to_f16(d);
        for (int j = 0; j < QK4_0 / 2; j++) {
            int q0 = (int)(xb[j] * id + 8.5f), q1 = (int)(xb[j + QK4_0 / 2] * id + 8.5f);
            q0 = q0 > 15 ? 15 : q0 < 0 ? 0 : q0;
            q1 = q1 > 15 ? 15 : q1 < 0 ? 0 : q1;
            y[b].qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

/* Dequantize per the block layouts documented in quant.h. swap_nibbles reads Q4_0 with the
 * nibble halves exchanged: a deliberately wrong layout the loose tolerance must reject. */
static void ref_dequant_ex(uint32_t type, const void *src, double *out, size_t n, int swap_nibbles) {
    switch (type) {
    case LLMM_TYPE_F32: {
        const float *s = src;
        for (size_t i = 0; i < n; i++) out[i] = s[i];
        break;
    }
    case LLMM_TYPE_F16: {
        const uint16_t *s = src;
        for (size_t i = 0; i < n; i++) out[i] = ref_half(s[i]);
        break;
    }
    case LLMM_TYPE_BF16: {
        const uint16_t *s = src;
        for (size_t i = 0; i < n; i++) out[i] = ref_bf16(s[i]);
        break;
    }
    case LLMM_TYPE_Q8_0: {
        const block_q8_0 *s = src;
        for (size_t b = 0; b < n / QK8_0; b++)
            for (int j = 0; j < QK8_0; j++) out[b * QK8_0 + j] = ref_half(s[b].d) * s[b].qs[j];
        break;
    }
    case LLMM_TYPE_Q4_0: {
        const block_q4_0 *s = src;
        for (size_t b = 0; b < n / QK4_0; b++) {
            const double d = ref_half(s[b].d);
            for (int j = 0; j < QK4_0 / 2; j++) {
                const int lo = (s[b].qs[j] & 15) - 8, hi = (s[b].qs[j] >> 4) - 8;
                out[b * QK4_0 + j] = d * (swap_nibbles ? hi : lo);
                out[b * QK4_0 + j + QK4_0 / 2] = d * (swap_nibbles ? lo : hi);
            }
        }
        break;
    }
    default:
        fail_msg("no reference dequantization for type %u", type);
    }
}

static void ref_dequant(uint32_t type, const void *src, double *out, size_t n) {
    ref_dequant_ex(type, src, out, n, 0);
}

/* A float row in type's storage: the traits' from_float where the type has one (F32, F16,
 * BF16, Q8_0), the hand-built encoder for Q4_0. */
static void encode_row(uint32_t type, const float *x, void *dst, size_t n) {
    if (type == LLMM_TYPE_Q4_0) {
        ref_quantize_q4_0(x, dst, n);
        return;
    }
    const llmm_type_traits *t = llmm__type_get(type);
    assert_non_null(t);
    assert_non_null(t->from_float);
    t->from_float(x, dst, n);
}

/* The vec_dot operand of x, as llmm__cpu_matmul prepares it. */
static void *make_operand(uint32_t wtype, const float *x, size_t n) {
    const uint32_t op_type = llmm__cpu_dot_get(wtype)->operand_type;
    const llmm_type_traits *op = llmm__type_get(op_type);
    assert_non_null(op);
    assert_non_null(op->from_float);
    size_t bytes = llmm__row_bytes(op_type, n);
    assert_true(bytes > 0);
    void *p = xmalloc(bytes);
    op->from_float(x, p, n);
    return p;
}

static void *cpu_start(int n_threads) {
    const llmm_backend_config cfg = {.n_threads = n_threads};
    void *st = NULL;
    assert_int_equal(llmm__cpu_backend.init(&cfg, &st), LLMM_OK);
    assert_non_null(st);
    return st;
}

/* ================================================================== 1. f16 / bf16 */

static void test_f16_all_patterns_roundtrip(void **state) {
    (void)state;
    for (uint32_t h = 0; h < 65536; h++) {
        const float f = llmm__f16_to_f32((llmm_f16)h);
        const double want = ref_half((uint16_t)h);
        if (half_is_nan((uint16_t)h)) {
            assert_true(isnan(f));
            const llmm_f16 back = llmm__f32_to_f16(f);
            if (!half_is_nan(back)) fail_msg("NaN pattern 0x%04x came back as 0x%04x", h, back);
            assert_int_equal(back & 0x8000, h & 0x8000); /* sign kept */
            continue;
        }
        if (!((double)f == want) || !signbit(f) != !signbit(want))
            fail_msg("f16 0x%04x decoded to %.9g, want %.9g", h, (double)f, want);
        const llmm_f16 back = llmm__f32_to_f16(f);
        if (back != h) fail_msg("f16 0x%04x -> %.9g -> 0x%04x", h, (double)f, back);
    }
}

/* Every midpoint between adjacent halves (subnormal, normal, both signs) rounds to the
 * even neighbour; the floats just either side of it round to the nearer one. A half has
 * 11 significant bits, so the midpoint (12 bits) is an exact float. */
static void test_f16_round_nearest_even(void **state) {
    (void)state;
    for (uint32_t h = 0; h < 0x7bff; h++) {
        for (int neg = 0; neg < 2; neg++) {
            const uint16_t sign = neg ? 0x8000 : 0;
            const double lo = ref_half((uint16_t)h), hi = ref_half((uint16_t)(h + 1));
            const float mid = (float)((lo + hi) / 2);
            assert_true((double)mid == (lo + hi) / 2);
            const float smid = neg ? -mid : mid;
            const uint16_t even = (uint16_t)(sign | ((h & 1) ? h + 1 : h));
            const llmm_f16 got = llmm__f32_to_f16(smid);
            if (got != even) fail_msg("midpoint %.9g of 0x%04x/0x%04x -> 0x%04x", (double)smid, h, h + 1, got);
            const float below = nextafterf(smid, 0.0f), above = nextafterf(smid, neg ? -INFINITY : INFINITY);
            assert_int_equal(llmm__f32_to_f16(below), sign | h);
            assert_int_equal(llmm__f32_to_f16(above), sign | (h + 1));
        }
    }
    /* a few by value */
    assert_int_equal(llmm__f32_to_f16(1.0f + 1.0f / 2048), 0x3c00);     /* 1 + half ulp: even is 1.0 */
    assert_int_equal(llmm__f32_to_f16(1.0f + 3.0f / 2048), 0x3c02);     /* 1 + 1.5 ulp: even is 1+2ulp */
    assert_int_equal(llmm__f32_to_f16(-(1.0f + 3.0f / 2048)), 0xbc02);
    assert_int_equal(llmm__f32_to_f16(2049.0f), 0x6800);                /* 2048 */
    assert_int_equal(llmm__f32_to_f16(2051.0f), 0x6802);                /* 2052 */
}

static void test_f16_overflow_and_specials(void **state) {
    (void)state;
    assert_int_equal(llmm__f32_to_f16(65504.0f), 0x7bff);
    assert_int_equal(llmm__f32_to_f16(nextafterf(65520.0f, 0.0f)), 0x7bff);
    assert_int_equal(llmm__f32_to_f16(65520.0f), 0x7c00); /* tie: 65504 is odd -> inf */
    assert_int_equal(llmm__f32_to_f16(-65520.0f), 0xfc00);
    assert_int_equal(llmm__f32_to_f16(65536.0f), 0x7c00);
    assert_int_equal(llmm__f32_to_f16(1e5f), 0x7c00);
    assert_int_equal(llmm__f32_to_f16(FLT_MAX), 0x7c00);
    assert_int_equal(llmm__f32_to_f16(-FLT_MAX), 0xfc00);
    assert_int_equal(llmm__f32_to_f16(INFINITY), 0x7c00);
    assert_int_equal(llmm__f32_to_f16(-INFINITY), 0xfc00);
    assert_true(half_is_nan(llmm__f32_to_f16(NAN)));
    assert_true(half_is_nan(llmm__f32_to_f16(f32_of_bits(0x7f800001u)))); /* signalling-style payload */
    assert_true(half_is_nan(llmm__f32_to_f16(f32_of_bits(0xffc00000u))));
    assert_int_equal(llmm__f32_to_f16(0.0f), 0x0000);
    assert_int_equal(llmm__f32_to_f16(-0.0f), 0x8000);
    assert_true(isinf(llmm__f16_to_f32(0x7c00)) && llmm__f16_to_f32(0x7c00) > 0);
    assert_true(isinf(llmm__f16_to_f32(0xfc00)) && llmm__f16_to_f32(0xfc00) < 0);
}

static void test_f16_subnormals(void **state) {
    (void)state;
    const float s = ldexpf(1.0f, -24); /* smallest subnormal half */
    assert_int_equal(llmm__f32_to_f16(s), 0x0001);
    assert_int_equal(llmm__f32_to_f16(-s), 0x8001);
    assert_int_equal(llmm__f32_to_f16(s / 2), 0x0000);                 /* tie -> even 0 */
    assert_int_equal(llmm__f32_to_f16(-s / 2), 0x8000);
    assert_int_equal(llmm__f32_to_f16(nextafterf(s / 2, 1.0f)), 0x0001);
    assert_int_equal(llmm__f32_to_f16(s * 1.5f), 0x0002);              /* tie between 1 and 2 -> 2 */
    assert_int_equal(llmm__f32_to_f16(s * 2.5f), 0x0002);              /* tie between 2 and 3 -> 2 */
    assert_int_equal(llmm__f32_to_f16(s * 1023.0f), 0x03ff);           /* largest subnormal */
    assert_int_equal(llmm__f32_to_f16(s * 1023.5f), 0x0400);           /* tie -> smallest normal */
    assert_int_equal(llmm__f32_to_f16(ldexpf(1.0f, -14)), 0x0400);
    assert_int_equal(llmm__f32_to_f16(ldexpf(1.0f, -30)), 0x0000);
    assert_int_equal(llmm__f32_to_f16(f32_of_bits(0x00000001u)), 0x0000); /* f32 subnormal */
    assert_int_equal(llmm__f32_to_f16(f32_of_bits(0x80400000u)), 0x8000);
    for (uint16_t m = 1; m < 1024; m++) assert_true((double)llmm__f16_to_f32(m) == ldexp(m, -24));
}

/* Random floats over the whole half range (and past it), against the search reference. */
static void test_f16_random_vs_reference(void **state) {
    (void)state;
    rng_seed(&rng, 101);
    for (int i = 0; i < 300000; i++) {
        const uint32_t r = rng_u32(&rng);
        /* exponents 2^-30 .. 2^17, random mantissa and sign */
        const int e = (int)(r % 48) - 30;
        const float f = (float)ldexp(1.0 + (double)(rng_u32(&rng) & 0x7fffff) / 8388608.0, e) * ((r >> 8) & 1 ? -1.0f : 1.0f);
        const llmm_f16 got = llmm__f32_to_f16(f), want = ref_f32_to_f16(f);
        if (got != want) fail_msg("f32_to_f16(%.9g) = 0x%04x, want 0x%04x", (double)f, got, want);
    }
}

static void test_bf16_to_f32_all_patterns(void **state) {
    (void)state;
    for (uint32_t h = 0; h < 65536; h++) {
        const float f = llmm__bf16_to_f32((llmm_bf16)h);
        const int is_nan = (h & 0x7f80) == 0x7f80 && (h & 0x7f) != 0;
        if (is_nan) {
            assert_true(isnan(f));
            continue;
        }
        if (bits_of_f32(f) != h << 16) fail_msg("bf16 0x%04x -> bits 0x%08x", h, bits_of_f32(f));
    }
    assert_true(llmm__bf16_to_f32(0x3f80) == 1.0f);
    assert_true(llmm__bf16_to_f32(0xc000) == -2.0f);
    assert_true(isinf(llmm__bf16_to_f32(0x7f80)));
}

/* The BF16 traits' from_float: nearest even, overflow to inf, NaN stays NaN. */
static void test_bf16_from_float(void **state) {
    (void)state;
    const llmm_type_traits *t = llmm__type_get(LLMM_TYPE_BF16);
    assert_non_null(t);
    assert_non_null(t->from_float);
    rng_seed(&rng, 102);
    enum { N = 4096 };
    float *x = xmalloc(N * sizeof *x);
    uint16_t *y = xmalloc(N * sizeof *y);
    for (int round = 0; round < 40; round++) {
        for (int i = 0; i < N; i++) {
            uint32_t u = rng_u32(&rng);
            if (i % 3 == 0) u = (u & 0xffff0000u) | 0x8000u; /* exact midpoints */
            if ((u & 0x7f800000u) == 0x7f800000u) u &= 0xbfffffffu; /* keep finite */
            x[i] = f32_of_bits(u);
        }
        t->from_float(x, y, N);
        for (int i = 0; i < N; i++)
            if (y[i] != ref_f32_to_bf16(x[i]))
                fail_msg("bf16(%.9g bits 0x%08x) = 0x%04x, want 0x%04x", (double)x[i], bits_of_f32(x[i]), y[i],
                         ref_f32_to_bf16(x[i]));
    }
    const float sp[] = {f32_of_bits(0x7f7f8000u), f32_of_bits(0xff7f8000u), f32_of_bits(0x7f7f7fffu), INFINITY,
                        NAN, f32_of_bits(0x7f800001u), 1.0f, f32_of_bits(0x3f808000u), f32_of_bits(0x3f818000u)};
    const uint16_t want[] = {0x7f80, 0xff80, 0x7f7f, 0x7f80, 0, 0, 0x3f80, 0x3f80, 0x3f82};
    t->from_float(sp, y, ARRAY_LEN(sp));
    for (size_t i = 0; i < ARRAY_LEN(sp); i++) {
        if (isnan(sp[i])) {
            if (!((y[i] & 0x7f80) == 0x7f80 && (y[i] & 0x7f) != 0)) fail_msg("NaN -> bf16 0x%04x", y[i]);
        } else {
            assert_int_equal(y[i], want[i]);
        }
    }
    free(x);
    free(y);
}

/* ================================================================== 4. table and row sizes */

typedef struct type_row {
    uint32_t id, block_size, block_bytes;
    int has_math;
    uint32_t vec_dot_type;
} type_row;

/* ggml's published block structs. Ids 4, 5, 31-33 and 36-38 were removed from ggml. */
static const type_row k_types[] = {
    {LLMM_TYPE_F32, 1, 4, 1, LLMM_TYPE_F32},       {LLMM_TYPE_F16, 1, 2, 1, LLMM_TYPE_F16},
    {LLMM_TYPE_Q4_0, 32, 18, 1, LLMM_TYPE_Q8_0},   {LLMM_TYPE_Q4_1, 32, 20, 1, LLMM_TYPE_Q8_1},
    {LLMM_TYPE_Q5_0, 32, 22, 1, LLMM_TYPE_Q8_0},                {LLMM_TYPE_Q5_1, 32, 24, 1, LLMM_TYPE_Q8_1},
    {LLMM_TYPE_Q8_0, 32, 34, 1, LLMM_TYPE_Q8_0},   {LLMM_TYPE_Q8_1, 32, 36, 0, 0},
    {LLMM_TYPE_Q2_K, 256, 84, 1, LLMM_TYPE_Q8_K},               {LLMM_TYPE_Q3_K, 256, 110, 1, LLMM_TYPE_Q8_K},
    {LLMM_TYPE_Q4_K, 256, 144, 1, LLMM_TYPE_Q8_K},              {LLMM_TYPE_Q5_K, 256, 176, 1, LLMM_TYPE_Q8_K},
    {LLMM_TYPE_Q6_K, 256, 210, 1, LLMM_TYPE_Q8_K},              {LLMM_TYPE_Q8_K, 256, 292, 0, 0},
    {LLMM_TYPE_IQ2_XXS, 256, 66, 0, 0},            {LLMM_TYPE_IQ2_XS, 256, 74, 0, 0},
    {LLMM_TYPE_IQ3_XXS, 256, 98, 0, 0},            {LLMM_TYPE_IQ1_S, 256, 50, 0, 0},
    {LLMM_TYPE_IQ4_NL, 32, 18, 1, LLMM_TYPE_Q8_0}, {LLMM_TYPE_IQ3_S, 256, 110, 0, 0},
    {LLMM_TYPE_IQ2_S, 256, 82, 0, 0},              {LLMM_TYPE_IQ4_XS, 256, 136, 1, LLMM_TYPE_Q8_K},
    {LLMM_TYPE_I8, 1, 1, 0, 0},                    {LLMM_TYPE_I16, 1, 2, 0, 0},
    {LLMM_TYPE_I32, 1, 4, 0, 0},                   {LLMM_TYPE_I64, 1, 8, 0, 0},
    {LLMM_TYPE_F64, 1, 8, 0, 0},                   {LLMM_TYPE_IQ1_M, 256, 56, 0, 0},
    {LLMM_TYPE_BF16, 1, 2, 1, LLMM_TYPE_BF16},     {LLMM_TYPE_TQ1_0, 256, 54, 0, 0},
    {LLMM_TYPE_TQ2_0, 256, 66, 0, 0},              {LLMM_TYPE_MXFP4, 32, 17, 0, 0},
};

static const type_row *find_type_row(uint32_t id) {
    for (size_t i = 0; i < ARRAY_LEN(k_types); i++)
        if (k_types[i].id == id) return &k_types[i];
    return NULL;
}

static void test_type_table(void **state) {
    (void)state;
    for (uint32_t id = 0; id <= 40; id++) {
        const type_row *want = find_type_row(id);
        const llmm_type_traits *t = llmm__type_get(id);
        if (!want) {
            if (t) fail_msg("type id %u should be unknown", id);
            continue;
        }
        if (!t) fail_msg("type id %u missing", id);
        assert_non_null(t->name);
        assert_true(strlen(t->name) > 0);
        assert_int_equal(t->block_size, want->block_size);
        assert_int_equal(t->block_bytes, want->block_bytes);
        assert_int_equal(t->dequant_row != NULL, want->has_math);
        const cpu_dot *dot = llmm__cpu_dot_get(id);
        assert_int_equal(dot != NULL, want->has_math);
        if (want->has_math) {
            assert_int_equal(dot->operand_type, want->vec_dot_type);
            const llmm_type_traits *op = llmm__type_get(dot->operand_type);
            assert_non_null(op);
            assert_non_null(op->from_float); /* every operand type can be produced */
        }
        assert_int_equal(llmm__cpu_backend.supports_type(id), want->has_math);
    }
    assert_null(llmm__type_get(41));
    assert_null(llmm__type_get(1000));
    assert_null(llmm__type_get(UINT32_MAX));
    assert_int_equal(llmm__cpu_backend.supports_type(UINT32_MAX), 0);
}

static void test_row_bytes(void **state) {
    (void)state;
    for (uint32_t id = 0; id <= 40; id++) {
        const type_row *want = find_type_row(id);
        if (!want) {
            assert_int_equal(llmm__row_bytes(id, 0), 0);
            assert_int_equal(llmm__row_bytes(id, 32), 0);
            assert_int_equal(llmm__row_bytes(id, 256), 0);
            continue;
        }
        const uint64_t bs = want->block_size;
        for (uint64_t k = 1; k <= 9; k += 2)
            assert_int_equal(llmm__row_bytes(id, k * bs), (size_t)(k * want->block_bytes));
        assert_int_equal(llmm__row_bytes(id, 4096), (size_t)(4096 / bs * want->block_bytes));
        assert_int_equal(llmm__row_bytes(id, 0), 0);
        if (bs > 1) {
            assert_int_equal(llmm__row_bytes(id, 1), 0);
            assert_int_equal(llmm__row_bytes(id, bs - 1), 0);
            assert_int_equal(llmm__row_bytes(id, bs + 1), 0);
            assert_int_equal(llmm__row_bytes(id, 3 * bs + bs / 2), 0);
        } else {
            assert_int_equal(llmm__row_bytes(id, 1001), (size_t)(1001 * want->block_bytes));
        }
    }
    assert_int_equal(llmm__row_bytes(41, 32), 0);
    assert_int_equal(llmm__row_bytes(UINT32_MAX, 32), 0);
}

/* ================================================================== 2. quantize / dequantize */

static const size_t *sizes_for(uint32_t type, size_t *count) {
    if (llmm__type_get(type)->block_size > 1) {
        *count = ARRAY_LEN(k_block_sizes);
        return k_block_sizes;
    }
    *count = ARRAY_LEN(k_float_sizes);
    return k_float_sizes;
}

/* dequant_row against the float64 dequantization from the block layout: exact, since
 * every dequantized value is a float exactly (see the header comment). */
static void check_dequant(uint32_t type, uint64_t seed) {
    const llmm_type_traits *t = llmm__type_get(type);
    assert_non_null(t);
    assert_non_null(t->dequant_row);
    rng_seed(&rng, seed);
    size_t n_sizes;
    const size_t *sizes = sizes_for(type, &n_sizes);
    for (size_t si = 0; si < n_sizes; si++) {
        const size_t n = sizes[si];
        for (int rep = 0; rep < 4; rep++) {
            const float scale = rep == 3 ? 1e-3f : rep == 2 ? 300.0f : 1.0f; /* also tiny and large */
            float *x = rng_floats(&rng, n, -2.0f * scale, 2.0f * scale);
            const size_t bytes = llmm__row_bytes(type, n);
            assert_true(bytes > 0);
            void *enc = xmalloc(bytes);
            encode_row(type, x, enc, n);
            float *got = xmalloc(n * sizeof *got);
            double *want = xmalloc(n * sizeof *want);
            fill_nan(got, n);
            t->dequant_row(enc, got, n);
            ref_dequant(type, enc, want, n);
            for (size_t i = 0; i < n; i++)
                if (!((double)got[i] == want[i]))
                    fail_msg("%s dequant n=%zu i=%zu: got %.9g want %.9g", t->name, n, i, (double)got[i], want[i]);
            /* the encoding itself is sane: close to the input (format's own precision) */
            for (size_t i = 0; i < n; i++) {
                double tol;
                if (type == LLMM_TYPE_F32) tol = 0;
                else if (type == LLMM_TYPE_F16) tol = fmax(fabs(x[i]) * ldexp(1, -11), ldexp(1, -25));
                else if (type == LLMM_TYPE_BF16) tol = fabs(x[i]) * ldexp(1, -8);
                else {
                    /* within one step of the block's scale (Q8_0: amax/127, Q4_0: amax/8,
                     * the clamped extreme of Q4_0 may sit a full step away) */
                    size_t b0 = i / 32 * 32;
                    double amax = 0;
                    for (size_t j = b0; j < b0 + 32; j++) amax = fmax(amax, fabs(x[j]));
                    tol = amax / (type == LLMM_TYPE_Q8_0 ? 127.0 : 8.0) * 1.01;
                }
                CHECK_CLOSE(want[i], x[i], tol, "%s encode n=%zu i=%zu", t->name, n, i);
            }
            free(x);
            free(enc);
            free(got);
            free(want);
        }
    }
}

static void test_dequant_f32(void **state) {
    (void)state;
    check_dequant(LLMM_TYPE_F32, 201);
}
static void test_dequant_f16(void **state) {
    (void)state;
    check_dequant(LLMM_TYPE_F16, 202);
    /* the traits' from_float is the scalar conversion */
    rng_seed(&rng, 2020);
    float *x = rng_floats(&rng, 1001, -70000.0f, 70000.0f);
    uint16_t *h = xmalloc(1001 * sizeof *h);
    llmm__type_get(LLMM_TYPE_F16)->from_float(x, h, 1001);
    for (size_t i = 0; i < 1001; i++) assert_int_equal(h[i], ref_f32_to_f16(x[i]));
    free(x);
    free(h);
}
static void test_dequant_bf16(void **state) {
    (void)state;
    check_dequant(LLMM_TYPE_BF16, 203);
}
static void test_dequant_q8_0(void **state) {
    (void)state;
    check_dequant(LLMM_TYPE_Q8_0, 204);
}
static void test_dequant_q4_0(void **state) {
    (void)state;
    check_dequant(LLMM_TYPE_Q4_0, 205);
    /* a hand-made block with known nibbles: element j = d*(j%16 - 8) low, high = 7 - j%16 */
    block_q4_0 b;
    b.d = 0x3800; /* 0.5 */
    for (int j = 0; j < 16; j++) b.qs[j] = (uint8_t)(j | ((15 - j) << 4));
    float out[32];
    llmm__type_get(LLMM_TYPE_Q4_0)->dequant_row(&b, out, 32);
    for (int j = 0; j < 16; j++) {
        assert_true(out[j] == 0.5f * (float)(j - 8));
        assert_true(out[j + 16] == 0.5f * (float)(7 - j));
    }
}

/* llmm__quantize_row_q8_0: d = f16(amax/127), |q| <= 127 and q = round(x / d) to within the
 * float rounding of x * (127/amax); the largest magnitude maps to +-127; an all-zero block
 * gives d = 0, q = 0 (no division by zero). */
static void test_quantize_q8_0(void **state) {
    (void)state;
    rng_seed(&rng, 206);
    for (size_t si = 0; si < ARRAY_LEN(k_block_sizes); si++) {
        const size_t n = k_block_sizes[si];
        float *x = rng_floats(&rng, n, -2.0f, 2.0f);
        block_q8_0 *y = xmalloc(llmm__row_bytes(LLMM_TYPE_Q8_0, n));
        llmm__quantize_row_q8_0(x, y, n);
        for (size_t b = 0; b < n / 32; b++) {
            float amax = 0;
            for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[b * 32 + j]));
            assert_int_equal(y[b].d, ref_f32_to_f16(amax / 127.0f));
            int saw_max = 0;
            for (int j = 0; j < 32; j++) {
                const double exact = (double)x[b * 32 + j] * 127.0 / amax;
                assert_true(y[b].qs[j] >= -127 && y[b].qs[j] <= 127);
                CHECK_CLOSE(y[b].qs[j], exact, 0.5 + 1e-5, "q8_0 n=%zu block %zu elem %d", n, b, j);
                if (fabsf(x[b * 32 + j]) == amax) saw_max |= abs(y[b].qs[j]) == 127;
            }
            assert_true(saw_max);
        }
        free(x);
        free(y);
    }
    float zero[64] = {0};
    zero[40] = 1.0f; /* second block not zero */
    block_q8_0 yz[2];
    memset(yz, 0x55, sizeof yz);
    llmm__quantize_row_q8_0(zero, yz, 64);
    assert_int_equal(yz[0].d, 0);
    for (int j = 0; j < 32; j++) assert_int_equal(yz[0].qs[j], 0);
    assert_int_equal(yz[1].qs[8], 127);
}

/* ================================================================== 3. vec_dot */

/* Tight tolerance of a kernel dot against the float64 dot of the exact operand values. */
static double tight_tol(uint32_t type, size_t n, double sum_abs) {
    switch (type) {
    case LLMM_TYPE_F32: return ((double)(n / 8) + 10.0) * U_F32 * sum_abs;
    case LLMM_TYPE_F16:
    case LLMM_TYPE_BF16: return ((double)(n / 16) + 20.0) * U_F32 * sum_abs; /* 16 float lanes, lib/quant.c */
    default: return ((double)(n / 32) + 3.0) * U_F32 * sum_abs;
    }
}

/* Loose tolerance of the quantized dot against the original floats w, x:
 *   w~ = w + r_w + s_w, x~ = x + r_x + s_x, with rounding errors |r| <= h = step/2 per block
 *   (Q8_0 step amax/127, Q4_0 step amax/8; independent, zero-mean, standard deviation
 *   step/sqrt(12)) and scale errors |s| <= 2^-11 |w~| from storing d as f16. So
 *   |sum w~x~ - sum wx| <= 2^-10 sum (|w|+h_w)(|x|+h_x)                 (scales, worst case)
 *                        + 6 sqrt(sum w^2 sd_x^2 + x^2 sd_w^2)             (roundings: 6 sd)
 *                        + sum 2 h_w h_x                                   (cross terms, worst
 *                          case, doubled for the clamped Q4_0 extreme).
 * Not a worst-case bound (that one, ~n h, could not tell a wrong layout from noise), but 6
 * standard deviations: a nibble-swapped Q4_0 row misses by ~20 sd on average. */
static double loose_tol_quant(uint32_t type, const float *w, const float *x, size_t n) {
    double sys = 0, var = 0, cross = 0;
    for (size_t b = 0; b < n / 32; b++) {
        double aw = 0, ax = 0;
        for (size_t j = b * 32; j < b * 32 + 32; j++) {
            aw = fmax(aw, fabs(w[j]));
            ax = fmax(ax, fabs(x[j]));
        }
        const double step_w = aw / (type == LLMM_TYPE_Q4_0 ? 8.0 : 127.0), step_x = ax / 127.0;
        const double hw = step_w / 2, hx = step_x / 2;
        const double vw = step_w * step_w / 12, vx = step_x * step_x / 12;
        for (size_t j = b * 32; j < b * 32 + 32; j++) {
            sys += (fabs(w[j]) + hw) * (fabs(x[j]) + hx);
            var += (double)w[j] * w[j] * vx + (double)x[j] * x[j] * vw;
            cross += 2 * hw * hx;
        }
    }
    return ldexp(sys, -10) + 6.0 * sqrt(var) + cross;
}

/* Loose tolerance for f16/bf16 operands against the original floats, term by term. */
static double loose_tol_float(uint32_t type, const float *w, const float *x, size_t n) {
    double tol = 0;
    for (size_t i = 0; i < n; i++) {
        double ew, ex;
        if (type == LLMM_TYPE_F16) {
            ew = fmax(fabs(w[i]) * ldexp(1, -11), ldexp(1, -25));
            ex = fmax(fabs(x[i]) * ldexp(1, -11), ldexp(1, -25));
        } else if (type == LLMM_TYPE_BF16) {
            ew = fabs(w[i]) * ldexp(1, -8);
            ex = fabs(x[i]) * ldexp(1, -8);
        } else {
            ew = ex = 0;
        }
        tol += fabs(w[i]) * ex + fabs(x[i]) * ew + ew * ex;
    }
    return tol;
}

static void check_vec_dot(uint32_t type, uint64_t seed) {
    const llmm_type_traits *t = llmm__type_get(type);
    const cpu_dot *dot = llmm__cpu_dot_get(type);
    assert_non_null(t);
    assert_non_null(dot);
    rng_seed(&rng, seed);
    size_t n_sizes;
    const size_t *sizes = sizes_for(type, &n_sizes);
    int n_cases = 0, n_swap_caught = 0;
    double worst_tight = 0, worst_loose = 0;
    for (size_t si = 0; si < n_sizes; si++) {
        const size_t n = sizes[si];
        for (int rep = 0; rep < 8; rep++) {
            float *w = rng_floats(&rng, n, -2.0f, 2.0f), *x = rng_floats(&rng, n, -2.0f, 2.0f);
            void *wq = xmalloc(llmm__row_bytes(type, n));
            encode_row(type, w, wq, n);
            void *xq = make_operand(type, x, n);
            double *wd = xmalloc(n * sizeof *wd), *xd = xmalloc(n * sizeof *xd);
            ref_dequant(type, wq, wd, n);
            ref_dequant(dot->operand_type, xq, xd, n);

            const float got = dot->vec_dot(wq, xq, n);
            double exact = 0, sum_abs = 0, orig = 0;
            for (size_t i = 0; i < n; i++) {
                exact += wd[i] * xd[i];
                sum_abs += fabs(wd[i] * xd[i]);
                orig += (double)w[i] * x[i];
            }
            const double tt = tight_tol(type, n, sum_abs);
            CHECK_CLOSE(got, exact, tt, "%s vec_dot n=%zu rep %d vs dequantized operands", t->name, n, rep);
            if (tt > 0) worst_tight = fmax(worst_tight, fabs(got - exact) / tt);

            const int quant = t->block_size > 1;
            const double lt = tt + (quant ? loose_tol_quant(type, w, x, n) : loose_tol_float(type, w, x, n));
            CHECK_CLOSE(got, orig, lt, "%s vec_dot n=%zu rep %d vs original floats", t->name, n, rep);
            worst_loose = fmax(worst_loose, fabs(got - orig) / lt);

            if (type == LLMM_TYPE_Q4_0) {
                /* the loose bound must be able to see a swapped nibble layout */
                ref_dequant_ex(type, wq, wd, n, 1);
                double swapped = 0;
                for (size_t i = 0; i < n; i++) swapped += wd[i] * xd[i];
                n_swap_caught += fabs(swapped - orig) > lt;
            }
            n_cases++;
            free(w);
            free(x);
            free(wq);
            free(xq);
            free(wd);
            free(xd);
        }
    }
    print_message("%s vec_dot: %d cases, worst |err|/tight_tol %.3f, worst |err|/loose_tol %.3f\n", t->name,
                  n_cases, worst_tight, worst_loose);
    if (type == LLMM_TYPE_Q4_0) {
        /* a swapped layout would fail this test if it failed any one case; require that it
         * would fail most, so the tolerance stays meaningful if someone loosens it */
        print_message("q4_0: loose tolerance rejects a nibble-swapped layout in %d of %d cases\n", n_swap_caught,
                      n_cases);
        assert_true(n_swap_caught * 2 > n_cases);
    }
}

static void test_vec_dot_f32(void **state) {
    (void)state;
    check_vec_dot(LLMM_TYPE_F32, 301);
}
static void test_vec_dot_f16(void **state) {
    (void)state;
    check_vec_dot(LLMM_TYPE_F16, 302);
}
static void test_vec_dot_bf16(void **state) {
    (void)state;
    check_vec_dot(LLMM_TYPE_BF16, 303);
}
static void test_vec_dot_q8_0(void **state) {
    (void)state;
    check_vec_dot(LLMM_TYPE_Q8_0, 304);
}
static void test_vec_dot_q4_0(void **state) {
    (void)state;
    check_vec_dot(LLMM_TYPE_Q4_0, 305);
}

/* llmm__dot_f32 with n not a multiple of 8 and exact small integers: the tail is summed once. */
static void test_dot_f32_exact_integers(void **state) {
    (void)state;
    for (size_t n = 1; n <= 40; n++) {
        float a[40], b[40];
        double want = 0;
        for (size_t i = 0; i < n; i++) {
            a[i] = (float)((int)(i % 7) - 3 + (i % 7 == 3 ? 5 : 0));
            b[i] = (float)((int)(i % 5) + 1);
            want += (double)a[i] * b[i];
        }
        assert_true((double)llmm__dot_f32(a, b, n) == want);
    }
}

static void test_matmul_unsupported_type(void **state) {
    (void)state;
    void *st = cpu_start(1);
    uint8_t data[20] = {0};
    float x[32] = {0}, out[1] = {0};
    llmm_tensor w = {data, LLMM_TYPE_MXFP4, 32, 1, 17, NULL};
    assert_int_equal(llmm__cpu_matmul(st, &w, x, 1, out), LLMM_ERR_UNSUPPORTED);
    llmm_tensor w2 = {data, 4 /* removed id */, 32, 1, 20, NULL};
    assert_int_equal(llmm__cpu_matmul(st, &w2, x, 1, out), LLMM_ERR_UNSUPPORTED);
    /* an unsupported type among matmul_multi's weights is refused, not skipped */
    uint8_t good_data[34] = {0};
    const llmm_tensor good = {good_data, LLMM_TYPE_Q8_0, 32, 1, 34, NULL};
    const llmm_tensor *pair[2] = {&good, &w};
    float out2[2], *pair_out[2] = {&out2[0], &out2[1]};
    assert_int_equal(llmm__cpu_matmul_multi(st, pair, 2, x, 1, pair_out), LLMM_ERR_UNSUPPORTED);
    llmm__cpu_backend.shutdown(st);
}

/* ================================================================== 5. kv_write, attention */

/* One block holding every position (block table {0}, block_size 1024), F32 rows stride
 * floats apart with the n_head_kv heads side by side in each (the other layout backend.h
 * allows; the KV store's own is the head-major one of paged_pool_make). */
static const uint32_t k_one_block[1] = {0};
static llmm_kv_view flat_view(void *k, void *v, size_t stride, uint32_t n_head_kv, uint32_t head_dim) {
    return (llmm_kv_view){.k = k, .v = v, .blocks = k_one_block, .block_size = 1024, .block_shift = 10,
                          .block_stride = 0, .head_stride = head_dim * sizeof(float),
                          .row_bytes = stride * sizeof(float), .n_head_kv = n_head_kv, .head_dim = head_dim,
                          .type = LLMM_KV_F32};
}

/* Value i (head i / head_dim, element i % head_dim) of position p in a view, decoded here from
 * the layout documented in backend.h (not through the kernels' kv_rows.h). */
static double view_value(const llmm_kv_view *view, const void *base, uint32_t p, size_t i) {
    const size_t h = i / view->head_dim, e = i % view->head_dim;
    const uint8_t *row = (const uint8_t *)base + h * view->head_stride +
                         (size_t)view->blocks[p / view->block_size] * view->block_stride +
                         (size_t)(p % view->block_size) * view->row_bytes;
    if (view->type == LLMM_KV_F32) return ((const float *)row)[e];
    if (view->type == LLMM_KV_F16) return ref_half(((const uint16_t *)row)[e]);
    float scale;
    memcpy(&scale, row, sizeof scale);
    return (double)scale * ((const int8_t *)(row + 4))[e];
}

static void test_kv_write(void **state) {
    (void)state;
    rng_seed(&rng, 701);
    enum { NHKV = 3, HD = 4, KV_DIM = NHKV * HD, STRIDE_A = 12, STRIDE_B = 17, CAP = 10, N_ROWS = 5 };
    const float sentinel = -12345.0f;
    for (size_t ti = 0; ti < ARRAY_LEN(k_threads); ti++) {
        void *st = cpu_start(k_threads[ti]);
        float *ka = xmalloc(CAP * STRIDE_A * sizeof(float)), *va = xmalloc(CAP * STRIDE_A * sizeof(float));
        float *kb = xmalloc(CAP * STRIDE_B * sizeof(float)), *vb = xmalloc(CAP * STRIDE_B * sizeof(float));
        for (size_t i = 0; i < CAP * STRIDE_A; i++) ka[i] = va[i] = sentinel;
        for (size_t i = 0; i < CAP * STRIDE_B; i++) kb[i] = vb[i] = sentinel;
        const llmm_kv_view a = flat_view(ka, va, STRIDE_A, NHKV, HD), b = flat_view(kb, vb, STRIDE_B, NHKV, HD);
        const llmm_kv_view views[N_ROWS] = {a, b, a, b, a};
        const int32_t pos[N_ROWS] = {3, 0, 9, 9, 0};
        float *k = rng_floats(&rng, N_ROWS * KV_DIM, -2.0f, 2.0f), *v = rng_floats(&rng, N_ROWS * KV_DIM, -2.0f, 2.0f);
        assert_int_equal(llmm__cpu_kv_store_rows(views, pos, N_ROWS, k, v, KV_DIM), LLMM_OK);
        for (int seq = 0; seq < 2; seq++) {
            const float *kk = seq ? kb : ka, *vv = seq ? vb : va;
            const size_t stride = seq ? STRIDE_B : STRIDE_A;
            for (size_t p = 0; p < CAP; p++) {
                int src = -1;
                for (int r = 0; r < N_ROWS; r++)
                    if ((r % 2 == seq) && (size_t)pos[r] == p) src = r;
                for (size_t i = 0; i < stride; i++) {
                    const float wk = src >= 0 && i < KV_DIM ? k[src * KV_DIM + i] : sentinel;
                    const float wv = src >= 0 && i < KV_DIM ? v[src * KV_DIM + i] : sentinel;
                    if (kk[p * stride + i] != wk || vv[p * stride + i] != wv)
                        fail_msg("kv_write seq %d pos %zu elem %zu: k %g (want %g) v %g (want %g)", seq, p, i,
                                 (double)kk[p * stride + i], (double)wk, (double)vv[p * stride + i], (double)wv);
                }
            }
        }
        llmm_kv_view bad = flat_view(ka, va, STRIDE_A, NHKV, HD);
        bad.type = 7;
        assert_int_equal(llmm__cpu_kv_store_rows(&bad, pos, 1, k, v, KV_DIM), LLMM_ERR_UNSUPPORTED);
        bad = flat_view(ka, va, STRIDE_A, NHKV, HD + 1); /* heads x head_dim != kv_dim */
        assert_int_equal(llmm__cpu_kv_store_rows(&bad, pos, 1, k, v, KV_DIM), LLMM_ERR_UNSUPPORTED);
        free(ka);
        free(va);
        free(kb);
        free(vb);
        free(k);
        free(v);
        llmm__cpu_backend.shutdown(st);
    }
}

/* A paged pool of n_blocks blocks in the KV store's layout (kvcache.h: one region per K/V
 * head of K, then of V, each holding that head's rows block after block; one layer) and a
 * shuffled block table, so neighbouring positions live in distant blocks. */
typedef struct paged_pool {
    uint8_t *mem;
    uint32_t *table;
    llmm_kv_view view;
} paged_pool;

static paged_pool paged_pool_make(uint32_t type, uint32_t n_head_kv, uint32_t head_dim, uint32_t block_size,
                                  uint32_t n_blocks) {
    paged_pool pp;
    const size_t row_bytes = kv_row_bytes(type, head_dim), segment = block_size * row_bytes;
    const size_t region = segment * n_blocks, total = 2 * n_head_kv * region;
    pp.mem = xmalloc(total);
    memset(pp.mem, 0x7f, total); /* unwritten F32/F16 rows read as NaN/huge */
    pp.table = xmalloc(n_blocks * sizeof *pp.table);
    for (uint32_t i = 0; i < n_blocks; i++) pp.table[i] = i;
    for (uint32_t i = n_blocks - 1; i > 0; i--) {
        uint32_t j = rng_u32(&rng) % (i + 1), t = pp.table[i];
        pp.table[i] = pp.table[j];
        pp.table[j] = t;
    }
    uint32_t shift = 0;
    while ((1u << shift) < block_size) shift++;
    pp.view = (llmm_kv_view){.k = pp.mem, .v = pp.mem + n_head_kv * region, .blocks = pp.table,
                             .block_size = block_size, .block_shift = shift, .block_stride = segment,
                             .head_stride = region, .row_bytes = row_bytes, .n_head_kv = n_head_kv,
                             .head_dim = head_dim, .type = type};
    return pp;
}

static void paged_pool_free(paged_pool *pp) {
    free(pp->mem);
    free(pp->table);
}

/* The attention's inline half conversion agrees with the reference on all 65536 patterns
 * (NaN stays NaN, with its sign). */
static void test_kv_half_to_float_all_patterns(void **state) {
    (void)state;
    for (uint32_t h = 0; h < 65536; h++) {
        const float got = kv_half_to_float((uint16_t)h);
        const double want = ref_half((uint16_t)h);
        if (half_is_nan((uint16_t)h)) assert_true(isnan(got) && !!signbit(got) == !!(h & 0x8000));
        else if (!((double)got == want && !!signbit(got) == !!(h & 0x8000)))
            fail_msg("half 0x%04x: %.9g want %.9g", h, (double)got, want);
    }
}

static void check_attention(const cpu_attn_batch *b, int n_threads);

/* One attention run on st (NaN-filled output first), checked against float64 when check is
 * set; the output becomes first when take is set, else must equal it bit for bit. */
static void attention_run(void *st, const cpu_attn_batch *b, int n_threads, int check, float *first, int take) {
    const size_t n = b->n_rows * b->n_head * b->head_dim;
    fill_nan(b->out, n);
    assert_int_equal(llmm__cpu_attend(st, b), LLMM_OK);
    if (check) check_attention(b, n_threads);
    if (take) memcpy(first, b->out, n * sizeof *first);
    else if (memcmp(first, b->out, n * sizeof *first) != 0)
        fail_msg("attention (%zu rows, threads %d) differs from the first run", b->n_rows, n_threads);
}

/* Attention through a shuffled block table, for each KV type and block sizes 4, 16 and 32:
 * rows see 1..37 positions of one sequence (so rows end inside and at the edges of blocks).
 * The reference reads the stored (rounded) values; the kernels must agree with it within
 * check_attention's bound and be bitwise identical across thread counts and block sizes. */
static void test_attention_paged(void **state) {
    (void)state;
    rng_seed(&rng, 803);
    enum { NH = 6, NHKV = 3, HD = 16, KVD = NHKV * HD, N_POS = 37, N_ROWS = 9, QD = NH * HD };
    const uint32_t types[] = {LLMM_KV_F32, LLMM_KV_F16, LLMM_KV_Q8}, block_sizes[] = {4, 16, 32};
    for (size_t ti = 0; ti < ARRAY_LEN(types); ti++) {
        float *k = rng_floats(&rng, N_POS * KVD, -2.0f, 2.0f), *v = rng_floats(&rng, N_POS * KVD, -2.0f, 2.0f);
        float *q = rng_floats(&rng, N_ROWS * QD, -2.0f, 2.0f);
        float *out = xmalloc(N_ROWS * QD * sizeof *out), *first = xmalloc(N_ROWS * QD * sizeof *first);
        /* block size 4: chunks of 16 positions span blocks (rows converted one by one); 16 and
         * 32: a chunk lies in one block (converted at once); the results must not differ */
        for (size_t bi = 0; bi < ARRAY_LEN(block_sizes); bi++) {
            const uint32_t bs = block_sizes[bi];
            paged_pool pp = paged_pool_make(types[ti], NHKV, HD, bs, (N_POS + bs - 1) / bs + 1);
            int32_t pos[N_POS];
            llmm_kv_view views[N_POS];
            for (int i = 0; i < N_POS; i++) pos[i] = i, views[i] = pp.view;
            assert_int_equal(llmm__cpu_kv_store_rows(views, pos, N_POS, k, v, KVD), LLMM_OK);
            const uint32_t n_kv[N_ROWS] = {1, 3, 4, 5, 8, 16, 17, 33, 37};
            cpu_attn_row rows[N_ROWS];
            for (int r = 0; r < N_ROWS; r++) rows[r] = (cpu_attn_row){pp.view, n_kv[r], 0};
            cpu_attn_batch batch = {q, out, N_ROWS, rows, NH, NHKV, HD, 1.0f / sqrtf((float)HD), 0.0f};
            for (size_t th = 0; th < ARRAY_LEN(k_threads); th++) {
                void *st = cpu_start(k_threads[th]);
                attention_run(st, &batch, k_threads[th], 1, first, th == 0 && bi == 0);
                llmm__cpu_backend.shutdown(st);
            }
            paged_pool_free(&pp);
        }
        free(k);
        free(v);
        free(q);
        free(out);
        free(first);
    }
}

/* A prompt's rows go to the threads in blocks of consecutive rows (cpu_attn_rows_per_item),
 * all the block's query vectors against each chunk of K rows at once: every row must get the
 * bits it gets alone. Groups of 7 query heads at head size 64 (AVX-512 takes its transposed
 * score path there) and of 2 at head size 8 (the tiles), F16 and F32 K/V, one and two
 * threads; rows 0..33 read sequence A, 34..39 sequence B, so one block holds both. */
static void test_attention_row_blocks(void **state) {
    (void)state;
    rng_seed(&rng, 805);
    enum { NHKV = 2, N_POS = 48, N_ROWS = 40, SPLIT = 34, BS = 16 };
    const uint32_t groups[] = {7, 2}, hds[] = {64, 8}, types[] = {LLMM_KV_F16, LLMM_KV_F32};
    for (size_t gi = 0; gi < ARRAY_LEN(groups); gi++)
        for (size_t ti = 0; ti < ARRAY_LEN(types); ti++) {
            const uint32_t nh = NHKV * groups[gi], hd = hds[gi], kvd = NHKV * hd, qd = nh * hd;
            paged_pool pa = paged_pool_make(types[ti], NHKV, hd, BS, N_POS / BS);
            paged_pool pb = paged_pool_make(types[ti], NHKV, hd, BS, N_POS / BS);
            float *k = rng_floats(&rng, N_POS * kvd, -2.0f, 2.0f), *v = rng_floats(&rng, N_POS * kvd, -2.0f, 2.0f);
            float *q = rng_floats(&rng, N_ROWS * qd, -2.0f, 2.0f);
            float *out = xmalloc(N_ROWS * qd * sizeof *out), *alone = xmalloc(qd * sizeof *alone);
            int32_t pos[N_POS];
            llmm_kv_view va[N_POS], vb[N_POS];
            for (int i = 0; i < N_POS; i++) pos[i] = i, va[i] = pa.view, vb[i] = pb.view;
            assert_int_equal(llmm__cpu_kv_store_rows(va, pos, N_POS, k, v, kvd), LLMM_OK);
            assert_int_equal(llmm__cpu_kv_store_rows(vb, pos, N_POS, v, k, kvd), LLMM_OK);
            cpu_attn_row rows[N_ROWS];
            for (int r = 0; r < N_ROWS; r++)
                rows[r] = r < SPLIT ? (cpu_attn_row){pa.view, (uint32_t)(8 + r), 0}
                                    : (cpu_attn_row){pb.view, (uint32_t)(r - SPLIT + 1), 0};
            for (size_t th = 0; th < ARRAY_LEN(k_threads); th++) {
                void *st = cpu_start(k_threads[th]);
                cpu_attn_batch batch = {q, out, N_ROWS, rows, nh, NHKV, hd, 1.0f / sqrtf((float)hd), 0.0f};
                fill_nan(out, N_ROWS * qd);
                assert_int_equal(llmm__cpu_attend(st, &batch), LLMM_OK);
                for (int r = 0; r < N_ROWS; r++) {
                    cpu_attn_batch one = {q + r * qd, alone, 1, &rows[r], nh, NHKV, hd, batch.scale, 0.0f};
                    fill_nan(alone, qd);
                    assert_int_equal(llmm__cpu_attend(st, &one), LLMM_OK);
                    if (memcmp(alone, out + r * qd, qd * sizeof *alone) != 0)
                        fail_msg("group %u hd %u kv type %u threads %d: row %d differs from the row alone",
                                 groups[gi], hd, types[ti], k_threads[th], r);
                }
                llmm__cpu_backend.shutdown(st);
            }
            paged_pool_free(&pa);
            paged_pool_free(&pb);
            free(k);
            free(v);
            free(q);
            free(out);
            free(alone);
        }
}

/* Check every output of an F32 attention batch against a float64 softmax attention.
 * Tolerance: a score q.k * scale is off by at most ds = scale (hd/8 + 10) u sum|q k| + u|s|
 * (8-lane float dot, then the scale); each softmax weight then by 2 ds + 4u relative (expf
 * of a difference of two such scores, the reciprocal of the double sum, the product), and
 * the float sum over n_kv positions adds (n_kv + 1) u: so
 *   |err| <= sum_p w_p |v_p| (2 ds + (n_kv + 6) u). */
static void check_attention(const cpu_attn_batch *b, int n_threads) {
    const size_t hd = b->head_dim, qd = (size_t)b->n_head * hd;
    for (size_t r = 0; r < b->n_rows; r++) {
        const llmm_kv_view *kv = &b->rows[r].kv;
        const uint32_t n_kv = b->rows[r].n_kv;
        const double q8 = kv->type == LLMM_KV_Q8; /* the kernel's float scale * q rounds once */
        double *s = xmalloc(n_kv * sizeof *s);
        for (uint32_t h = 0; h < b->n_head; h++) {
            const size_t kvh = h / (b->n_head / b->n_head_kv);
            const float *qv = b->q + r * qd + h * hd;
            double smax = -INFINITY, sum = 0, ds = 0;
            for (uint32_t p = 0; p < n_kv; p++) {
                double dot = 0, abs_dot = 0;
                for (size_t d = 0; d < hd; d++) {
                    const double t = (double)qv[d] * view_value(kv, kv->k, p, kvh * hd + d);
                    dot += t;
                    abs_dot += fabs(t);
                }
                s[p] = dot * b->scale;
                smax = fmax(smax, s[p]);
                ds = fmax(ds, b->scale * ((double)(hd / 8) + 10 + q8) * U_F32 * abs_dot + U_F32 * fabs(s[p]));
            }
            for (uint32_t p = 0; p < n_kv; p++) sum += (s[p] = exp(s[p] - smax));
            for (size_t d = 0; d < hd; d++) {
                double ref = 0, mag = 0;
                for (uint32_t p = 0; p < n_kv; p++) {
                    const double vpd = view_value(kv, kv->v, p, kvh * hd + d);
                    ref += s[p] / sum * vpd;
                    mag += s[p] / sum * fabs(vpd);
                }
                CHECK_CLOSE(b->out[r * qd + h * hd + d], ref, mag * (2 * ds + (n_kv + 6.0 + q8) * U_F32),
                            "attention row %zu (n_kv %u) head %u dim %zu threads=%d", r, n_kv, h, d, n_threads);
            }
        }
        free(s);
    }
}

/* Grouped-query attention: n_head 4 over n_head_kv 2 (heads 0,1 read kv head 0; 2,3 read 1),
 * head_dim 8, scale 1/sqrt(8). Two sequences with different row strides (padding and
 * positions past n_kv hold NaN, so reading them shows); rows 0..8 see 1..9 positions of
 * sequence A, rows 9..11 see 5, 2 and 3 of sequence B. Tolerance: see check_attention. */
static void test_attention_gqa(void **state) {
    (void)state;
    rng_seed(&rng, 801);
    enum { NH = 4, NHKV = 2, HD = 8, KVD = NHKV * HD, CAP_A = 9, CAP_B = 7, STRIDE_A = KVD, STRIDE_B = KVD + 5 };
    enum { N_ROWS = 12, QD = NH * HD };
    float *ka = rng_floats(&rng, CAP_A * STRIDE_A, -2.0f, 2.0f), *va = rng_floats(&rng, CAP_A * STRIDE_A, -2.0f, 2.0f);
    float *kb = rng_floats(&rng, CAP_B * STRIDE_B, -2.0f, 2.0f), *vb = rng_floats(&rng, CAP_B * STRIDE_B, -2.0f, 2.0f);
    const uint32_t n_kv[N_ROWS] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 5, 2, 3};
    for (size_t p = 0; p < CAP_B; p++)
        for (size_t i = 0; i < STRIDE_B; i++)
            if (i >= KVD || p >= 5) kb[p * STRIDE_B + i] = vb[p * STRIDE_B + i] = NAN;
    const llmm_kv_view a = flat_view(ka, va, STRIDE_A, NHKV, HD), b = flat_view(kb, vb, STRIDE_B, NHKV, HD);
    cpu_attn_row rows[N_ROWS];
    for (int r = 0; r < N_ROWS; r++) rows[r] = (cpu_attn_row){r < 9 ? a : b, n_kv[r], 0};
    float *q = rng_floats(&rng, N_ROWS * QD, -2.0f, 2.0f);
    float *out = xmalloc(N_ROWS * QD * sizeof *out), *first = xmalloc(N_ROWS * QD * sizeof *first);
    cpu_attn_batch batch = {q, out, N_ROWS, rows, NH, NHKV, HD, 1.0f / sqrtf((float)HD), 0.0f};
    for (size_t ti = 0; ti < ARRAY_LEN(k_threads); ti++) {
        void *st = cpu_start(k_threads[ti]);
        attention_run(st, &batch, k_threads[ti], 1, first, ti == 0);

        /* a single position returns its V row exactly (weight 1) */
        for (int h = 0; h < NH; h++)
            for (int d = 0; d < HD; d++) assert_true(out[h * HD + d] == va[(h / 2) * HD + d]);

        /* unsupported: an unknown KV type, an empty row */
        cpu_attn_row bad_rows[1] = {{a, 0, 0}};
        cpu_attn_batch bad = {q, out, 1, bad_rows, NH, NHKV, HD, batch.scale, 0.0f};
        assert_int_equal(llmm__cpu_attend(st, &bad), LLMM_ERR_UNSUPPORTED);
        bad_rows[0].n_kv = 1;
        bad_rows[0].kv.type = 7;
        assert_int_equal(llmm__cpu_attend(st, &bad), LLMM_ERR_UNSUPPORTED);
        llmm__cpu_backend.shutdown(st);
    }
    free(ka);
    free(va);
    free(kb);
    free(vb);
    free(q);
    free(out);
    free(first);
}

/* Long rows (n_kv 301..497) so the threads' score scratch is in use at the same time: a
 * shared or undersized per-thread scratch corrupts results here. Run several times on one
 * state so the scratch is also reused. n_head 8 over n_head_kv 2, head_dim 24 (a tail for
 * the 8-lane dot), one sequence with padded rows. */
static void test_attention_long(void **state) {
    (void)state;
    rng_seed(&rng, 802);
    enum { NH = 8, NHKV = 2, HD = 24, KVD = NHKV * HD, STRIDE = KVD + 3, CAP = 500, N_ROWS = 29, QD = NH * HD };
    float *k = rng_floats(&rng, CAP * STRIDE, -2.0f, 2.0f), *v = rng_floats(&rng, CAP * STRIDE, -2.0f, 2.0f);
    const llmm_kv_view view = flat_view(k, v, STRIDE, NHKV, HD);
    cpu_attn_row rows[N_ROWS];
    for (int r = 0; r < N_ROWS; r++) rows[r] = (cpu_attn_row){view, (uint32_t)(301 + 7 * r), 0};
    float *q = rng_floats(&rng, N_ROWS * QD, -2.0f, 2.0f);
    float *out = xmalloc(N_ROWS * QD * sizeof *out), *first = xmalloc(N_ROWS * QD * sizeof *first);
    const cpu_attn_batch batch = {q, out, N_ROWS, rows, NH, NHKV, HD, 1.0f / sqrtf((float)HD), 0.0f};
    for (size_t ti = 0; ti < ARRAY_LEN(k_threads); ti++) {
        void *st = cpu_start(k_threads[ti]);
        for (int rep = 0; rep < 8; rep++) attention_run(st, &batch, k_threads[ti], rep == 0, first, ti == 0 && rep == 0);
        llmm__cpu_backend.shutdown(st);
    }
    free(k);
    free(v);
    free(q);
    free(out);
    free(first);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_f16_all_patterns_roundtrip),
        cmocka_unit_test(test_f16_round_nearest_even),
        cmocka_unit_test(test_f16_overflow_and_specials),
        cmocka_unit_test(test_f16_subnormals),
        cmocka_unit_test(test_f16_random_vs_reference),
        cmocka_unit_test(test_bf16_to_f32_all_patterns),
        cmocka_unit_test(test_bf16_from_float),
        cmocka_unit_test(test_type_table),
        cmocka_unit_test(test_row_bytes),
        cmocka_unit_test(test_dequant_f32),
        cmocka_unit_test(test_dequant_f16),
        cmocka_unit_test(test_dequant_bf16),
        cmocka_unit_test(test_dequant_q8_0),
        cmocka_unit_test(test_dequant_q4_0),
        cmocka_unit_test(test_quantize_q8_0),
        cmocka_unit_test(test_vec_dot_f32),
        cmocka_unit_test(test_vec_dot_f16),
        cmocka_unit_test(test_vec_dot_bf16),
        cmocka_unit_test(test_vec_dot_q8_0),
        cmocka_unit_test(test_vec_dot_q4_0),
        cmocka_unit_test(test_dot_f32_exact_integers),
        cmocka_unit_test(test_matmul_unsupported_type),
        cmocka_unit_test(test_kv_write),
        cmocka_unit_test(test_attention_gqa),
        cmocka_unit_test(test_attention_long),
        cmocka_unit_test(test_kv_half_to_float_all_patterns),
        cmocka_unit_test(test_attention_paged),
        cmocka_unit_test(test_attention_row_blocks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
