/* The half formats (lib/format/half.c): IEEE binary16 and bfloat16 to and from float, and the
 * BF16 row conversion of the type table, against float64 references written from the bit
 * layouts (support/numeric.h): every pattern, every midpoint, the overflow, subnormal and NaN
 * cases, and seeded random floats over the whole range. Exact: every half and bfloat16 value is
 * a float, so a conversion has one right answer (nearest, ties to even). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <float.h>
#include <math.h>
#include <stdlib.h>

#include "format/quant.h"
#include "support/alloc.h"
#include "support/fixtures.h"
#include "support/numeric.h"
#include "support/rng.h"

/* The data stream: every test seeds it (rng_seed) before drawing. */
static test_rng rng;

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

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_f16_all_patterns_roundtrip),
        cmocka_unit_test(test_f16_round_nearest_even),
        cmocka_unit_test(test_f16_overflow_and_specials),
        cmocka_unit_test(test_f16_subnormals),
        cmocka_unit_test(test_f16_random_vs_reference),
        cmocka_unit_test(test_bf16_to_f32_all_patterns),
        cmocka_unit_test(test_bf16_from_float),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
