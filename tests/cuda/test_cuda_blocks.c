/* cuda/quant_blocks.cuh, the block formats' per-weight math the CUDA kernels share with their
 * emulated build, against the CPU's dequantization (the type table's dequant_row): every
 * weight of random blocks of every type, bit for bit, and every half and bfloat16 pattern.
 * Compiled here as C (the header is plain C outside nvcc) with the project's flags, whose ISO C
 * mode keeps products and sums unfused as the header's device side does by intrinsics. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "quant_blocks.cuh" /* cuda/, on the CUDA suites' include path */
#include "format/quant.h"
#include "support/numeric.h"
#include "support/rng.h"

/* The data stream, at the raw state the suite was written with. */
static test_rng rng = {.state = 0x853c49e6748fea9bull};

/* Equal bits, or both NaN (a NaN's payload is not part of the contract). */
static int same_value(float a, float b) { return bits_of_f32(a) == bits_of_f32(b) || (isnan(a) && isnan(b)); }

static void test_half_and_bf16_patterns(void **state) {
    (void)state;
    for (uint32_t h = 0; h < 65536; h++) {
        const float want = llmm__f16_to_f32((llmm_f16)h), got = qb_half_to_float((uint16_t)h);
        if (!same_value(got, want)) fail_msg("half 0x%04x: %.9g, the CPU's %.9g", h, (double)got, (double)want);
        const float bw = llmm__bf16_to_f32((llmm_bf16)h), bg = qb_bf16_to_float((uint16_t)h);
        if (!same_value(bg, bw)) fail_msg("bf16 0x%04x: %.9g, the CPU's %.9g", h, (double)bg, (double)bw);
    }
}

/* Blocks of random bytes except the scales, which are random finite halves of moderate size (a
 * random 16-bit pattern is often a NaN or an infinity, which would make most weights compare as
 * NaN and test nothing). */
static void random_block(uint32_t type, uint8_t *b, int bytes) {
    for (int i = 0; i < bytes; i++) b[i] = (uint8_t)rng_u64(&rng);
    const float scale = (float)(rng_u64(&rng) % 2000) / 1000.0f - 1.0f;
    const llmm_f16 d = llmm__f32_to_f16(scale), m = llmm__f32_to_f16(-scale / 3.0f);
    int at_d = -1, at_m = -1;
    switch (type) {
    case LLMM_TYPE_Q4_0: case LLMM_TYPE_Q5_0: case LLMM_TYPE_Q8_0: case LLMM_TYPE_IQ4_NL: case LLMM_TYPE_IQ4_XS:
        at_d = 0;
        break;
    case LLMM_TYPE_Q4_1: case LLMM_TYPE_Q5_1: case LLMM_TYPE_Q4_K: case LLMM_TYPE_Q5_K: at_d = 0; at_m = 2; break;
    case LLMM_TYPE_Q2_K: at_d = 80; at_m = 82; break;
    case LLMM_TYPE_Q3_K: at_d = 108; break;
    case LLMM_TYPE_Q6_K: at_d = 208; break;
    }
    if (at_d >= 0) memcpy(b + at_d, &d, 2);
    if (at_m >= 0) memcpy(b + at_m, &m, 2);
}

/* Every weight type of a kernel family (format/blocks.h): the types the CUDA kernels multiply. */
static void test_every_type_matches_the_cpu(void **state) {
    (void)state;
    int n_types = 0;
    for (uint32_t type = 0; type < LLMM_TYPE_COUNT; type++) {
        const uint32_t family = llmm_type_family(type);
        if (family != LLMM_FAMILY_FLOAT && family != LLMM_FAMILY_BLOCK32 && family != LLMM_FAMILY_BLOCK256) continue;
        n_types++;
        const llmm_type_traits *tt = llmm__type_get(type);
        assert_non_null(tt);
        assert_non_null(tt->dequant_row);
        /* a row of several blocks, so that a block's offset inside a row is exercised too */
        enum { BLOCKS = 9 };
        const int bs = (int)llmm_type_block_size(type), bb = (int)llmm_type_block_bytes(type), n = bs * BLOCKS;
        uint8_t *row = malloc((size_t)bb * BLOCKS);
        float *want = malloc((size_t)n * sizeof *want);
        assert_true(row && want);
        for (int rep = 0; rep < 200; rep++) {
            for (int k = 0; k < BLOCKS; k++) random_block(type, row + k * bb, bb);
            tt->dequant_row(row, want, (size_t)n);
            for (int i = 0; i < n; i++) {
                const float got = qb_block_value(type, row + (i / bs) * bb, i % bs);
                if (!same_value(got, want[i]))
                    fail_msg("%s rep %d weight %d: %.9g, the CPU's %.9g", tt->name, rep, i, (double)got,
                             (double)want[i]);
            }
        }
        free(row);
        free(want);
    }
    assert_true(n_types > 0);
    /* Q8_1: an operand format, no weights, so no math here */
    uint8_t q8_1[sizeof(block_q8_1)];
    memset(q8_1, 0x11, sizeof q8_1);
    assert_true(qb_block_value(LLMM_TYPE_Q8_1, q8_1, 3) == 0.0f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_half_and_bf16_patterns),
        cmocka_unit_test(test_every_type_matches_the_cpu),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
