/* The weight formats of the type table (lib/format/quant.c, format/blocks.h) and their scalar
 * dots (the trait's vec_dot, which the CPU backend computes with): the whole table and row sizes; every type's quantize, dequantize and
 * dot against float64 references written here from the block layouts; the activation formats
 * Q8_1 and Q8_K. (The half conversions: test_half.c; whole-model conversion:
 * test_quantize_file.c; the SIMD tables against these scalar kernels: test_simd_kernels.c.)
 *
 * Sections 1-5, Q4_1, Q5_0, Q5_1, Q2_K..Q6_K, IQ4_NL, IQ4_XS (and Q4_0, Q8_0 alongside):
 *
 * Data: seeded uniform random values, never zero, in rows scaled from 0.02 to 1e3, some
 * shifted to all-positive (which exercises the offset formats' mins); row lengths 32 k with
 * odd k for the 32-blocks and 256 k with odd k for the 256-blocks (K-quants, IQ4_XS).
 *
 * Tolerances (u = 2^-24; b = bits per quant level: 8, 6, 5, 4, 3 or 2):
 *  - quantize -> dequantize, against the original floats: relative RMS error (over a row)
 *    <= 1.25 * 2^-b, and every weight within 1.5 * 2^(1-b) * (largest |x| of its block or
 *    super-block). Uniform quantization of uniform data over its range gives 2^-b relative
 *    RMS; the measured values are 0.9-1.05 of that. The max bound is one step of the
 *    coarsest grid the format can choose, with slack for the fitted K-quant scales. IQ4_NL
 *    and IQ4_XS (b = 4) index a 16-value codebook, denser near 0, not a uniform grid; the
 *    same bounds hold for them (measured 0.85 of the RMS bound).
 *  - dequantize, against a float64 decoding written here from the byte layout: exact for the
 *    symmetric formats (d * sc * q has at most 24 significant bits: for IQ4_XS an f16 d, a
 *    6-bit ls - 32 and a 7-bit codebook value); for the offset formats
 *    one rounding of the final add: |err| <= u (|d sc q| + |dmin m|).
 *  - vec_dot, against the float64 dot of exactly the dequantized weights and the dequantized
 *    activation operand: the integer sums are exact, each block adds a few float roundings:
 *    |err| <= (n_blocks + 6) u sum_i (|d sc q_i| + |dmin m_i|) |x'_i|; the Q8_1 dots use the
 *    stored f16 s = d * sum(q), as the reference does, which adds |m| times the f16
 *    rounding of s and of d (q8_1_s_error) per block.
 *  - vec_dot against the original floats (loose, statistical): the quantization errors of
 *    weights (RMS <= 1.25 * 2^-b * rms(w), enforced above) and activations (RMS <= 0.3 step)
 *    predict sigma = sqrt(sum x_i^2 sd_w^2 + w_i^2 sd_x_i^2); each case must be within
 *    6 sigma + 2^-10 sum |w x| (the f16 scales of both operands, worst case) + the tight
 *    bound, and
 *    the RMS of err/sigma over all cases of a type must be <= 1.5. A weight layout with
 *    halves of each 32 exchanged (a swapped nibble or sub-block scale) must fail that RMS
 *    check, for every type; the test checks that it would.
 *  - the reference engine's own acceptance thresholds (test-quantize-fns) on its synthetic
 *    data, stated at test_reference_acceptance.
 *
 * Sections 6-8, the whole table, and F32, F16, BF16, Q8_0 and Q4_0 against the block structs,
 * on seeded uniform data in [-2, 2] (never zero) and odd sizes:
 *  - conversions, dequantization: exact (bit or value equality). The dequantized value of
 *    every one of these formats (f16/bf16 widened, d_f16 * small int) is exactly
 *    representable in float, so there is nothing to round.
 *  - f32 dot: the kernel keeps 8 float partial sums, so each term passes through at most
 *    n/8 + 10 float roundings: |err| <= (n/8 + 10) u sum|a_i b_i| (rigorous; dropping or
 *    doubling a single term, about sum|a_i b_i| / n, is far larger for every n tested).
 *  - f16/bf16 dots: 16 float lanes of exact products, |err| <= (n/16 + 20) u sum|a_i b_i|
 *    against the float64 dot of the same f16/bf16 values; against the original floats each
 *    operand carries its format's rounding (2^-11 for f16, 2^-8 for bf16), bounded term by term.
 *  - q8_0/q4_0 dots: the integer block sums are exact, each block adds a scale product and a
 *    float sum: |err| <= (n/32 + 3) u sum|a_i b_i| against the float64 dot of exactly the
 *    dequantized weights and the Q8_0-quantized activations. Against the original floats a
 *    loose, statistical bound (see loose_tol_quant) that still fails for a nibble-swapped
 *    Q4_0 layout; the test checks that it would. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "llmmini.h"
#include "cpu_backend.h"
#include "format/quant.h"
#include "support/alloc.h"
#include "support/fixtures.h"
#include "support/numeric.h"
#include "support/rng.h"

/* ================================================================== random numbers */

/* The data stream: every test seeds it (rng_seed) before drawing. */
static test_rng rng;

/* A row of n values: uniform in [-1, 1) times scale, or in [0.5, 2.5) times scale when
 * shifted (all positive, so the offset formats need their mins). */
static float *random_row(size_t n, float scale, int shifted) {
    float *x = xmalloc(n * sizeof *x);
    for (size_t i = 0; i < n; i++) x[i] = (shifted ? rng_float(&rng, 0.5f, 2.5f) : rng_float(&rng, -1.f, 1.f)) * scale;
    return x;
}

/* Below about 0.02 the f16 super-scale of Q6_K (d = amax / 4096) falls among the f16
 * subnormals and loses relative precision, in the reference engine as here. */
static const float k_row_scales[] = {0.02f, 0.37f, 1.0f, 41.0f, 1e3f};

/* Row sizes of sections 7 and 8: odd counts of floats, odd counts of 32-blocks. */
static const size_t k_float_sizes[] = {1, 7, 31, 33, 173, 1001};
static const size_t k_block_sizes[] = {32, 96, 224, 736};

/* ================================================================== float64 decoders
 * Written from the byte layout (offsets, not the structs in quant.h), in the shape of the
 * reference engine's dequantize_row_* loops, so they share no code with lib/. Each decodes
 * one block: out[i] the value, mag[i] = |d sc q| + |dmin m| (what rounding scales with). */

/* Value of an IEEE half from its bits. */
static double half_at(const uint8_t *p) {
    const unsigned h = (unsigned)p[0] | (unsigned)p[1] << 8;
    const int e = (h >> 10) & 31, m = h & 1023;
    const double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(1024.0 + m, e - 25);
    return (h & 0x8000) ? -v : v;
}

static double float_at(const uint8_t *p) {
    float f;
    memcpy(&f, p, 4);
    return f;
}

static uint32_t u32_at(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void put_sym(double *out, double *mag, int i, double v) {
    out[i] = v;
    mag[i] = fabs(v);
}

static void put_offset(double *out, double *mag, int i, double scaled, double offset) {
    out[i] = scaled + offset;
    mag[i] = fabs(scaled) + fabs(offset);
}

static void dec_q4_0(const uint8_t *b, double *out, double *mag) {
    const double d = half_at(b);
    for (int j = 0; j < 16; j++) {
        put_sym(out, mag, j, d * ((b[2 + j] & 15) - 8));
        put_sym(out, mag, j + 16, d * ((b[2 + j] >> 4) - 8));
    }
}

static void dec_q4_1(const uint8_t *b, double *out, double *mag) {
    const double d = half_at(b), m = half_at(b + 2);
    for (int j = 0; j < 16; j++) {
        put_offset(out, mag, j, d * (b[4 + j] & 15), m);
        put_offset(out, mag, j + 16, d * (b[4 + j] >> 4), m);
    }
}

static void dec_q5_0(const uint8_t *b, double *out, double *mag) {
    const double d = half_at(b);
    const uint32_t qh = u32_at(b + 2);
    for (int j = 0; j < 16; j++) {
        put_sym(out, mag, j, d * ((int)((b[6 + j] & 15) | ((qh >> j) & 1) << 4) - 16));
        put_sym(out, mag, j + 16, d * ((int)((b[6 + j] >> 4) | ((qh >> (j + 16)) & 1) << 4) - 16));
    }
}

static void dec_q5_1(const uint8_t *b, double *out, double *mag) {
    const double d = half_at(b), m = half_at(b + 2);
    const uint32_t qh = u32_at(b + 4);
    for (int j = 0; j < 16; j++) {
        put_offset(out, mag, j, d * ((b[8 + j] & 15) | ((qh >> j) & 1) << 4), m);
        put_offset(out, mag, j + 16, d * ((b[8 + j] >> 4) | ((qh >> (j + 16)) & 1) << 4), m);
    }
}

static void dec_q8_0(const uint8_t *b, double *out, double *mag) {
    const double d = half_at(b);
    for (int j = 0; j < 32; j++) put_sym(out, mag, j, d * (int8_t)b[2 + j]);
}

/* Q2_K: scales[16] @0, qs[64] @16, d @80, dmin @82 */
static void dec_q2_K(const uint8_t *b, double *out, double *mag) {
    const double d = half_at(b + 80), dmin = half_at(b + 82);
    const uint8_t *q = b + 16;
    int is = 0, y = 0;
    for (int n = 0; n < 256; n += 128, q += 32)
        for (int shift = 0; shift < 8; shift += 2)
            for (int half = 0; half < 2; half++, is++)
                for (int l = 0; l < 16; l++, y++)
                    put_offset(out, mag, y, d * (b[is] & 15) * ((q[l + 16 * half] >> shift) & 3), -dmin * (b[is] >> 4));
}

/* Q3_K: hmask[32] @0, qs[64] @32, scales[12] @96, d @108. Scales unpacked the reference's
 * way, as four 32-bit words. */
static void dec_q3_K(const uint8_t *b, double *out, double *mag) {
    const double d = half_at(b + 108);
    uint32_t aux[4];
    memcpy(aux, b + 96, 12);
    const uint32_t tmp = aux[2], m4 = 0x0f0f0f0f, m2 = 0x03030303;
    aux[2] = ((aux[0] >> 4) & m4) | (((tmp >> 4) & m2) << 4);
    aux[3] = ((aux[1] >> 4) & m4) | (((tmp >> 6) & m2) << 4);
    aux[0] = (aux[0] & m4) | (((tmp >> 0) & m2) << 4);
    aux[1] = (aux[1] & m4) | (((tmp >> 2) & m2) << 4);
    int8_t sc[16];
    memcpy(sc, aux, 16);
    const uint8_t *q = b + 32, *hm = b;
    int is = 0, y = 0, bit = 0;
    for (int n = 0; n < 256; n += 128, q += 32)
        for (int shift = 0; shift < 8; shift += 2, bit++)
            for (int half = 0; half < 2; half++, is++)
                for (int l = 0; l < 16; l++, y++) {
                    const int lo = (q[l + 16 * half] >> shift) & 3, high = (hm[l + 16 * half] >> bit) & 1;
                    put_sym(out, mag, y, d * (sc[is] - 32) * (lo - (high ? 0 : 4)));
                }
}

static void scale_min_k4(const uint8_t *s, int j, int *sc, int *m) {
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 0xf) | ((s[j - 4] >> 6) << 4);
        *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

/* Q4_K: d @0, dmin @2, scales[12] @4, qs[128] @16; Q5_K adds qh[32] @16, qs moves to @48 */
static void dec_k4(const uint8_t *b, int five_bit, double *out, double *mag) {
    const double d = half_at(b), dmin = half_at(b + 2);
    const uint8_t *ql = b + (five_bit ? 48 : 16), *qh = b + 16;
    int y = 0;
    for (int j = 0, is = 0; j < 256; j += 64, is += 2, ql += 32)
        for (int half = 0; half < 2; half++) {
            int sc, m;
            scale_min_k4(b + 4, is + half, &sc, &m);
            const int hbit = 2 * (j / 64) + half;
            for (int l = 0; l < 32; l++, y++) {
                const int q = (half ? ql[l] >> 4 : ql[l] & 15) + (five_bit && (qh[l] >> hbit & 1) ? 16 : 0);
                put_offset(out, mag, y, d * sc * q, -dmin * m);
            }
        }
}

static void dec_q4_K(const uint8_t *b, double *out, double *mag) { dec_k4(b, 0, out, mag); }
static void dec_q5_K(const uint8_t *b, double *out, double *mag) { dec_k4(b, 1, out, mag); }

/* Q6_K: ql[128] @0, qh[64] @128, scales[16] (int8) @192, d @208 */
static void dec_q6_K(const uint8_t *b, double *out, double *mag) {
    const double d = half_at(b + 208);
    const uint8_t *ql = b, *qh = b + 128;
    const int8_t *sc = (const int8_t *)(b + 192);
    for (int n = 0; n < 256; n += 128, ql += 64, qh += 32, sc += 8)
        for (int l = 0; l < 32; l++) {
            const int is = l / 16;
            const int q1 = ((ql[l] & 15) | ((qh[l] >> 0) & 3) << 4) - 32;
            const int q2 = ((ql[l + 32] & 15) | ((qh[l] >> 2) & 3) << 4) - 32;
            const int q3 = ((ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4) - 32;
            const int q4 = ((ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4) - 32;
            put_sym(out, mag, n + l, d * sc[is] * q1);
            put_sym(out, mag, n + l + 32, d * sc[is + 2] * q2);
            put_sym(out, mag, n + l + 64, d * sc[is + 4] * q3);
            put_sym(out, mag, n + l + 96, d * sc[is + 6] * q4);
        }
}

/* The non-linear 4-bit formats: a nibble indexes this codebook (the reference's kvalues_iq4nl). */
static const int k_iq4_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

/* IQ4_NL: d @0, qs[16] @2; Q4_0's nibble order */
static void dec_iq4_nl(const uint8_t *b, double *out, double *mag) {
    const double d = half_at(b);
    for (int j = 0; j < 16; j++) {
        put_sym(out, mag, j, d * k_iq4_values[b[2 + j] & 15]);
        put_sym(out, mag, j + 16, d * k_iq4_values[b[2 + j] >> 4]);
    }
}

/* IQ4_XS: d @0, scales_h (u16) @2, scales_l[4] @4, qs[128] @8. Sub-block ib's 6-bit scale:
 * nibble ib % 2 of scales_l[ib / 2], bits 2ib, 2ib+1 of scales_h on top; factor ls - 32. */
static void dec_iq4_xs(const uint8_t *b, double *out, double *mag) {
    const double d = half_at(b);
    const unsigned scales_h = (unsigned)b[2] | (unsigned)b[3] << 8;
    for (int ib = 0; ib < 8; ib++) {
        const int ls = ((b[4 + ib / 2] >> 4 * (ib % 2)) & 15) | ((scales_h >> 2 * ib) & 3) << 4;
        const uint8_t *qs = b + 8 + 16 * ib;
        for (int j = 0; j < 16; j++) {
            put_sym(out, mag, 32 * ib + j, d * (ls - 32) * k_iq4_values[qs[j] & 15]);
            put_sym(out, mag, 32 * ib + j + 16, d * (ls - 32) * k_iq4_values[qs[j] >> 4]);
        }
    }
}

/* Activation formats. Q8_1: d @0, s @2, qs[32] @4. Q8_K: float d @0, qs[256] @4, bsums @260. */
static void dec_q8_1(const uint8_t *b, double *out, double *mag) {
    const double d = half_at(b);
    for (int j = 0; j < 32; j++) put_sym(out, mag, j, d * (int8_t)b[4 + j]);
}

static void dec_q8_K(const uint8_t *b, double *out, double *mag) {
    const double d = float_at(b);
    for (int j = 0; j < 256; j++) put_sym(out, mag, j, d * (int8_t)b[4 + j]);
}

typedef void (*block_decoder)(const uint8_t *block, double *out, double *mag);

/* ================================================================== the cases */

typedef struct type_case {
    uint32_t type;
    uint32_t block_size, block_bytes;
    double bits_per_weight;   /* everything stored, scales included */
    int level_bits;           /* b in the error bounds */
    int has_min;              /* w = d sc q - dmin m: one rounding in dequantization */
    uint32_t operand;         /* vec_dot_type */
    block_decoder decode;
    uint8_t f16_at[2], n_f16; /* byte offsets of the f16 scale fields */
} type_case;

static const type_case k_cases[] = {
    {LLMM_TYPE_Q4_0, 32, 18, 4.5, 4, 0, LLMM_TYPE_Q8_0, dec_q4_0, {0, 0}, 1},
    {LLMM_TYPE_Q4_1, 32, 20, 5.0, 4, 1, LLMM_TYPE_Q8_1, dec_q4_1, {0, 2}, 2},
    {LLMM_TYPE_Q5_0, 32, 22, 5.5, 5, 0, LLMM_TYPE_Q8_0, dec_q5_0, {0, 0}, 1},
    {LLMM_TYPE_Q5_1, 32, 24, 6.0, 5, 1, LLMM_TYPE_Q8_1, dec_q5_1, {0, 2}, 2},
    {LLMM_TYPE_Q8_0, 32, 34, 8.5, 8, 0, LLMM_TYPE_Q8_0, dec_q8_0, {0, 0}, 1},
    {LLMM_TYPE_Q2_K, 256, 84, 2.625, 2, 1, LLMM_TYPE_Q8_K, dec_q2_K, {80, 82}, 2},
    {LLMM_TYPE_Q3_K, 256, 110, 3.4375, 3, 0, LLMM_TYPE_Q8_K, dec_q3_K, {108, 0}, 1},
    {LLMM_TYPE_Q4_K, 256, 144, 4.5, 4, 1, LLMM_TYPE_Q8_K, dec_q4_K, {0, 2}, 2},
    {LLMM_TYPE_Q5_K, 256, 176, 5.5, 5, 1, LLMM_TYPE_Q8_K, dec_q5_K, {0, 2}, 2},
    {LLMM_TYPE_Q6_K, 256, 210, 6.5625, 6, 0, LLMM_TYPE_Q8_K, dec_q6_K, {208, 0}, 1},
    {LLMM_TYPE_IQ4_NL, 32, 18, 4.5, 4, 0, LLMM_TYPE_Q8_0, dec_iq4_nl, {0, 0}, 1},
    {LLMM_TYPE_IQ4_XS, 256, 136, 4.25, 4, 0, LLMM_TYPE_Q8_K, dec_iq4_xs, {0, 0}, 1},
};

static const size_t k_blocks_legacy[] = {1, 3, 7, 33};
static const size_t k_blocks_k[] = {1, 3, 5};

static size_t n_sizes(const type_case *c) {
    return c->block_size == 32 ? ARRAY_LEN(k_blocks_legacy) : ARRAY_LEN(k_blocks_k);
}
static size_t size_at(const type_case *c, size_t i) {
    return c->block_size * (c->block_size == 32 ? k_blocks_legacy[i] : k_blocks_k[i]);
}

static block_decoder operand_decoder(uint32_t type) {
    return type == LLMM_TYPE_Q8_0 ? dec_q8_0 : type == LLMM_TYPE_Q8_1 ? dec_q8_1 : dec_q8_K;
}

/* Decode a whole row of n values (optionally with each block's halves of 32 exchanged, the
 * deliberately wrong layout the loose bound must reject). */
static void decode_row(block_decoder dec, uint32_t type, const void *src, size_t n, double *out, double *mag,
                       int swap_halves) {
    const llmm_type_traits *t = llmm__type_get(type);
    for (size_t b = 0; b < n / t->block_size; b++)
        dec((const uint8_t *)src + b * t->block_bytes, out + b * t->block_size, mag + b * t->block_size);
    if (!swap_halves) return;
    for (size_t i = 0; i < n; i++)
        if (i & 16) {
            const double o = out[i - 16];
            out[i - 16] = out[i];
            out[i] = o;
        }
}

static void *quantize(uint32_t type, const float *x, size_t n) {
    const size_t bytes = llmm__row_bytes(type, n);
    assert_true(bytes > 0);
    void *q = xmalloc(bytes);
    llmm__type_get(type)->from_float(x, q, n);
    return q;
}

/* ================================================================== 1. the table */

static void test_table_rows(void **state) {
    (void)state;
    for (size_t k = 0; k < ARRAY_LEN(k_cases); k++) {
        const type_case *c = &k_cases[k];
        const llmm_type_traits *t = llmm__type_get(c->type);
        assert_non_null(t);
        assert_int_equal(t->block_size, c->block_size);
        assert_int_equal(t->block_bytes, c->block_bytes);
        assert_true(fabs(8.0 * c->block_bytes / c->block_size - c->bits_per_weight) < 1e-12);
        assert_non_null(t->dequant_row);
        assert_non_null(t->vec_dot);
        assert_non_null(t->from_float);
        assert_int_equal(t->operand_type, c->operand);
    }
    /* the activation formats are produced, never stored as weights */
    const uint32_t operands[] = {LLMM_TYPE_Q8_1, LLMM_TYPE_Q8_K};
    for (size_t i = 0; i < ARRAY_LEN(operands); i++) {
        const llmm_type_traits *t = llmm__type_get(operands[i]);
        assert_non_null(t->from_float);
        assert_null(t->vec_dot);
    }
    assert_int_equal(sizeof(block_q8_1), 36);
    assert_int_equal(sizeof(block_q8_K), 292);
}

/* The forward pass converts activations with the operand type's from_float: it must exist
 * for every type that has a dot. */
static void test_every_dot_has_its_operand(void **state) {
    (void)state;
    for (uint32_t id = 0; id < LLMM_TYPE_COUNT; id++) {
        const llmm_type_traits *t = llmm__type_get(id);
        if (!t || !t->vec_dot) continue;
        assert_non_null(t->dequant_row);
        const llmm_type_traits *op = llmm__type_get(t->operand_type);
        if (!op || !op->from_float) fail_msg("%s: operand type %u cannot be produced", t->name, t->operand_type);
        assert_true(llmm__row_bytes(t->operand_type, t->block_size) > 0);
    }
}

/* ================================================================== 2. round trip */

static void check_roundtrip(const type_case *c, const float *x, size_t n, double *worst_rel) {
    const llmm_type_traits *t = llmm__type_get(c->type);
    void *q = quantize(c->type, x, n);
    float *y = xmalloc(n * sizeof *y);
    t->dequant_row(q, y, n);
    const double rel_bound = 1.25 * ldexp(1, -c->level_bits), step = 1.5 * ldexp(1, 1 - c->level_bits);
    double se = 0, sx = 0;
    for (size_t b0 = 0; b0 < n; b0 += c->block_size) {
        double amax = 0;
        for (size_t i = b0; i < b0 + c->block_size; i++) amax = fmax(amax, fabs(x[i]));
        for (size_t i = b0; i < b0 + c->block_size; i++) {
            const double e = (double)y[i] - x[i];
            if (!(fabs(e) <= step * amax))
                fail_msg("%s n=%zu: weight %zu is %.9g, was %.9g (block max %.3g, bound %.3g)", t->name, n, i,
                         (double)y[i], (double)x[i], amax, step * amax);
            se += e * e;
            sx += (double)x[i] * x[i];
        }
    }
    const double rel = sqrt(se / sx);
    if (!(rel <= rel_bound)) fail_msg("%s n=%zu: relative RMS error %.5f > %.5f", t->name, n, rel, rel_bound);
    *worst_rel = fmax(*worst_rel, rel / rel_bound);
    free(q);
    free(y);
}

static void test_roundtrip_error(void **state) {
    (void)state;
    rng_seed(&rng, 11);
    for (size_t k = 0; k < ARRAY_LEN(k_cases); k++) {
        const type_case *c = &k_cases[k];
        double worst = 0;
        for (size_t si = 0; si < n_sizes(c); si++)
            for (size_t r = 0; r < ARRAY_LEN(k_row_scales); r++)
                for (int shifted = 0; shifted < 2; shifted++) {
                    const size_t n = size_at(c, si);
                    float *x = random_row(n, k_row_scales[r], shifted);
                    check_roundtrip(c, x, n, &worst);
                    free(x);
                }
        print_message("%-6s round trip: worst relative RMS error %.2f of the bound 1.25 * 2^-%d\n",
                      llmm__type_get(c->type)->name, worst, c->level_bits);
    }
}

/* All-equal and all-zero rows take the quantizers' degenerate branches (zero range, zero
 * scale): the result must be finite and exact or within the usual bound. */
static void test_degenerate_rows(void **state) {
    (void)state;
    const float values[] = {0.0f, 0.5f, -3.0f};
    for (size_t k = 0; k < ARRAY_LEN(k_cases); k++) {
        const type_case *c = &k_cases[k];
        const size_t n = c->block_size * 3;
        float *x = xmalloc(n * sizeof *x), *y = xmalloc(n * sizeof *y);
        for (size_t v = 0; v < ARRAY_LEN(values); v++) {
            for (size_t i = 0; i < n; i++) x[i] = values[v];
            void *q = quantize(c->type, x, n);
            llmm__type_get(c->type)->dequant_row(q, y, n);
            for (size_t i = 0; i < n; i++)
                if (!(fabs((double)y[i] - x[i]) <= ldexp(1, 1 - c->level_bits) * fabs(x[i])))
                    fail_msg("%s: constant %g came back as %.9g", llmm__type_get(c->type)->name, (double)x[i],
                             (double)y[i]);
            free(q);
        }
        free(x);
        free(y);
    }
}

/* ================================================================== 3. layout */

static void check_dequant_layout(const type_case *c, const void *q, size_t n) {
    const llmm_type_traits *t = llmm__type_get(c->type);
    float *y = xmalloc(n * sizeof *y);
    double *ref = xmalloc(n * sizeof *ref), *mag = xmalloc(n * sizeof *mag);
    for (size_t i = 0; i < n; i++) y[i] = NAN;
    t->dequant_row(q, y, n);
    decode_row(c->decode, c->type, q, n, ref, mag, 0);
    for (size_t i = 0; i < n; i++) {
        const double tol = c->has_min ? U_F32 * mag[i] : 0;
        if (!(fabs((double)y[i] - ref[i]) <= tol))
            fail_msg("%s n=%zu weight %zu: dequant %.9g, layout says %.9g (tol %.3g)", t->name, n, i, (double)y[i],
                     ref[i], tol);
    }
    free(y);
    free(ref);
    free(mag);
}

/* A random finite half in [2^-14, 2^6), random sign. */
static uint16_t random_half(void) {
    const unsigned e = 1 + (unsigned)(rng_u64(&rng) % 20), m = (unsigned)(rng_u64(&rng) & 1023);
    return (uint16_t)((rng_u64(&rng) & 1) << 15 | e << 10 | m);
}

/* Every bit pattern of the quants and sub-scales, not only what the quantizer writes. */
static void *random_blocks(const type_case *c, size_t n) {
    const size_t bytes = llmm__row_bytes(c->type, n);
    uint8_t *p = xmalloc(bytes);
    for (size_t i = 0; i < bytes; i++) p[i] = (uint8_t)rng_u64(&rng);
    for (size_t b = 0; b < n / c->block_size; b++)
        for (int f = 0; f < c->n_f16; f++) {
            const uint16_t h = random_half();
            uint8_t *at = p + b * c->block_bytes + c->f16_at[f];
            at[0] = (uint8_t)h;
            at[1] = (uint8_t)(h >> 8);
        }
    return p;
}

static void test_dequant_matches_layout(void **state) {
    (void)state;
    rng_seed(&rng, 21);
    for (size_t k = 0; k < ARRAY_LEN(k_cases); k++) {
        const type_case *c = &k_cases[k];
        for (size_t si = 0; si < n_sizes(c); si++) {
            const size_t n = size_at(c, si);
            for (int rep = 0; rep < 4; rep++) {
                float *x = random_row(n, k_row_scales[rep], rep & 1);
                void *q = quantize(c->type, x, n);
                check_dequant_layout(c, q, n);
                free(q);
                free(x);
                q = random_blocks(c, n);
                check_dequant_layout(c, q, n);
                free(q);
            }
        }
    }
}

/* ================================================================== 4. dot products */

typedef struct dot_stats {
    int n_cases;
    double worst_tight;   /* |err| / tight bound */
    double sum_z2;        /* sum of (err / sigma)^2 against the original floats */
    double sum_z2_swapped; /* the same for the swapped layout */
} dot_stats;

/* Error of a Q8_1 block's stored s against d16 * sum(q), from its bytes: s rounds
 * float(d * sum) to f16, and d (unrounded) differs from the stored d16 by at most half an
 * f16 step (2^-11 relative, 2^-25 absolute among the subnormals). */
static double q8_1_s_error(const uint8_t *blk) {
    const double d16 = half_at(blk), s = half_at(blk + 2);
    int sum = 0;
    for (int j = 0; j < 32; j++) sum += (int8_t)blk[4 + j];
    const double d_err = fmax(ldexp(fabs(d16), -11), ldexp(1, -25)) * 1.001;
    return abs(sum) * d_err + fmax(ldexp(fabs(s), -11), ldexp(1, -25)) + 2 * U_F32 * fabs(s);
}

/* Bound on |vec_dot - float64 dot of the dequantized operands| (see the header). For the
 * Q8_1 dots, |m| of a block is at most the smallest mag of its weights. */
static double tight_bound(const type_case *c, const uint8_t *xq, const double *wmag, const double *xd, size_t n) {
    double sum = 0;
    for (size_t i = 0; i < n; i++) sum += wmag[i] * fabs(xd[i]);
    double tol = ((double)(n / c->block_size) + 6) * U_F32 * sum;
    if (c->operand == LLMM_TYPE_Q8_1)
        for (size_t b = 0; b < n / 32; b++) {
            double m = INFINITY;
            for (size_t j = b * 32; j < b * 32 + 32; j++) m = fmin(m, wmag[j]);
            tol += m * q8_1_s_error(xq + b * sizeof(block_q8_1));
        }
    return tol;
}

/* Predicted standard deviation of (dot of quantized operands - dot of the originals): the
 * independent per-weight errors of both operands, plus the f16 rounding of the block
 * scales, which moves a whole block's products together (relative RMS < 2^-11 each). */
static double predicted_sigma(const type_case *c, const float *w, const float *x, size_t n) {
    double sw2 = 0;
    for (size_t i = 0; i < n; i++) sw2 += (double)w[i] * w[i];
    const double sd_w = 1.25 * ldexp(1, -c->level_bits) * sqrt(sw2 / (double)n);
    const size_t xb = llmm__type_get(c->operand)->block_size;
    double var = 0;
    for (size_t b0 = 0; b0 < n; b0 += xb) {
        double amax = 0, block_dot = 0;
        for (size_t i = b0; i < b0 + xb; i++) amax = fmax(amax, fabs(x[i]));
        const double sd_x = 0.3 * amax / 127;
        for (size_t i = b0; i < b0 + xb; i++) {
            var += (double)x[i] * x[i] * sd_w * sd_w + (double)w[i] * w[i] * sd_x * sd_x;
            block_dot += (double)w[i] * x[i];
        }
        var += ldexp(block_dot * block_dot, -22);
    }
    return sqrt(var);
}

static void check_dot_case(const type_case *c, const float *w, const float *x, size_t n, dot_stats *st) {
    const llmm_type_traits *t = llmm__type_get(c->type);
    void *wq = quantize(c->type, w, n), *xq = quantize(c->operand, x, n);
    double *wd = xmalloc(n * sizeof *wd), *wmag = xmalloc(n * sizeof *wmag);
    double *xd = xmalloc(n * sizeof *xd), *xmag = xmalloc(n * sizeof *xmag);
    decode_row(c->decode, c->type, wq, n, wd, wmag, 0);
    decode_row(operand_decoder(c->operand), c->operand, xq, n, xd, xmag, 0);
    const double got = llmm__type_get(c->type)->vec_dot(wq, xq, n);
    double exact = 0, orig = 0, abs_orig = 0;
    for (size_t i = 0; i < n; i++) {
        exact += wd[i] * xd[i];
        orig += (double)w[i] * x[i];
        abs_orig += fabs((double)w[i] * x[i]);
    }
    const double tight = tight_bound(c, xq, wmag, xd, n);
    if (!(fabs(got - exact) <= tight))
        fail_msg("%s n=%zu: vec_dot %.9g, dequantized operands give %.9g (tol %.3g)", t->name, n, got, exact, tight);
    st->worst_tight = fmax(st->worst_tight, tight > 0 ? fabs(got - exact) / tight : 0);
    const double sigma = predicted_sigma(c, w, x, n);
    const double loose = 6 * sigma + ldexp(abs_orig, -10) + tight;
    if (!(fabs(got - orig) <= loose))
        fail_msg("%s n=%zu: vec_dot %.9g, original floats give %.9g (tol %.3g)", t->name, n, got, orig, loose);
    st->sum_z2 += (got - orig) * (got - orig) / (sigma * sigma);
    decode_row(c->decode, c->type, wq, n, wd, wmag, 1);
    double swapped = 0;
    for (size_t i = 0; i < n; i++) swapped += wd[i] * xd[i];
    st->sum_z2_swapped += (swapped - orig) * (swapped - orig) / (sigma * sigma);
    st->n_cases++;
    free(wq);
    free(xq);
    free(wd);
    free(wmag);
    free(xd);
    free(xmag);
}

static void test_vec_dot(void **state) {
    (void)state;
    rng_seed(&rng, 31);
    for (size_t k = 0; k < ARRAY_LEN(k_cases); k++) {
        const type_case *c = &k_cases[k];
        dot_stats st = {0, 0, 0, 0};
        for (size_t si = 0; si < n_sizes(c); si++)
            for (int rep = 0; rep < 12; rep++) {
                const size_t n = size_at(c, si);
                float *w = random_row(n, k_row_scales[rep % ARRAY_LEN(k_row_scales)], rep % 3 == 1);
                float *x = random_row(n, k_row_scales[(rep + 2) % ARRAY_LEN(k_row_scales)], rep % 4 == 3);
                check_dot_case(c, w, x, n, &st);
                free(w);
                free(x);
            }
        const double z = sqrt(st.sum_z2 / st.n_cases), z_swapped = sqrt(st.sum_z2_swapped / st.n_cases);
        print_message("%-6s vec_dot: %d cases, worst |err|/tight %.3f, RMS err/sigma %.2f (swapped layout %.1f)\n",
                      llmm__type_get(c->type)->name, st.n_cases, st.worst_tight, z, z_swapped);
        assert_true(z <= 1.5);
        if (!(z_swapped > 1.5))
            fail_msg("the loose check cannot see a swapped %s layout", llmm__type_get(c->type)->name);
    }
}

/* The reference engine's own acceptance test (test-quantize-fns): on x_i = 0.1 + 2 cos(i +
 * offset), 4096 values, sqrt(sum of squared errors) / n below 0.002 (Q3_K 0.004, Q2_K 0.0075)
 * and |dot - float dot| / n below 0.02 (Q2_K 0.04), the dot against offset 1. IQ4_NL and
 * IQ4_XS have no constants of their own there (only Q2_K, Q3_K and the 1-3 bit IQ types
 * do): they take the defaults, 0.002 and 0.02. */
static void test_reference_acceptance(void **state) {
    (void)state;
    enum { N = 4096 };
    float *x = xmalloc(N * sizeof *x), *x2 = xmalloc(N * sizeof *x2), *y = xmalloc(N * sizeof *y);
    for (int i = 0; i < N; i++) {
        x[i] = 0.1f + 2 * cosf((float)i);
        x2[i] = 0.1f + 2 * cosf((float)i + 1.0f);
    }
    for (size_t k = 0; k < ARRAY_LEN(k_cases); k++) {
        const type_case *c = &k_cases[k];
        const llmm_type_traits *t = llmm__type_get(c->type);
        void *q = quantize(c->type, x, N), *q2 = quantize(c->operand, x2, N);
        t->dequant_row(q, y, N);
        double se = 0, dot = 0;
        for (int i = 0; i < N; i++) {
            se += ((double)y[i] - x[i]) * ((double)y[i] - x[i]);
            dot += (double)x[i] * x2[i];
        }
        const double total = sqrt(se) / N, dot_err = fabs(llmm__type_get(c->type)->vec_dot(q, q2, N) - dot) / N;
        const double max_total = c->type == LLMM_TYPE_Q2_K ? 0.0075 : c->type == LLMM_TYPE_Q3_K ? 0.004 : 0.002;
        const double max_dot = c->type == LLMM_TYPE_Q2_K ? 0.04 : 0.02;
        print_message("%-6s reference acceptance: total error %.6f (< %.4f), dot error %.6f (< %.2f)\n", t->name,
                      total, max_total, dot_err, max_dot);
        assert_true(total < max_total);
        assert_true(dot_err < max_dot);
        free(q);
        free(q2);
    }
    free(x);
    free(x2);
    free(y);
}

/* ================================================================== 5. activation formats */

static void test_q8_1_operand(void **state) {
    (void)state;
    rng_seed(&rng, 41);
    const llmm_type_traits *t = llmm__type_get(LLMM_TYPE_Q8_1);
    for (size_t r = 0; r < ARRAY_LEN(k_row_scales); r++) {
        const size_t n = 32 * 7;
        float *x = random_row(n, k_row_scales[r], (int)(r & 1));
        block_q8_1 *q = xmalloc(llmm__row_bytes(LLMM_TYPE_Q8_1, n));
        t->from_float(x, q, n);
        for (size_t b = 0; b < n / 32; b++) {
            const double d = half_at((const uint8_t *)&q[b].d);
            int sum = 0;
            for (int j = 0; j < 32; j++) {
                const double xi = x[b * 32 + j];
                sum += q[b].qs[j];
                /* half a step, plus the f16 rounding of d over up to 127 steps */
                assert_true(fabs(d * q[b].qs[j] - xi) <= fabs(d) * (0.5 + 128 * ldexp(1, -11)));
            }
            const double s = half_at((const uint8_t *)&q[b].s);
            assert_true(fabs(s - d * sum) <= q8_1_s_error((const uint8_t *)&q[b]));
        }
        free(x);
        free(q);
    }
}

static void test_q8_K_operand(void **state) {
    (void)state;
    rng_seed(&rng, 42);
    const llmm_type_traits *t = llmm__type_get(LLMM_TYPE_Q8_K);
    for (size_t r = 0; r < ARRAY_LEN(k_row_scales); r++) {
        const size_t n = 256 * 3;
        float *x = random_row(n, k_row_scales[r], (int)(r & 1));
        block_q8_K *q = xmalloc(llmm__row_bytes(LLMM_TYPE_Q8_K, n));
        t->from_float(x, q, n);
        for (size_t b = 0; b < n / 256; b++) {
            const float *xb = x + b * 256;
            size_t imax = 0;
            for (size_t i = 1; i < 256; i++)
                if (fabsf(xb[i]) > fabsf(xb[imax])) imax = i;
            /* the reference's convention: the largest magnitude maps to -127, d = -max / 127 */
            assert_int_equal(q[b].qs[imax], -127);
            assert_true(fabs(q[b].d + xb[imax] / 127.0) <= 2 * U_F32 * fabs(xb[imax] / 127.0));
            for (int g = 0; g < 16; g++) {
                int sum = 0;
                for (int j = 0; j < 16; j++) sum += q[b].qs[16 * g + j];
                assert_int_equal(q[b].bsums[g], sum);
            }
            for (int i = 0; i < 256; i++)
                assert_true(fabs((double)q[b].d * q[b].qs[i] - xb[i]) <= fabs((double)q[b].d) * (0.5 + 1e-4));
        }
        free(x);
        free(q);
    }
}

/* ================================================================== the float formats, Q8_0 and Q4_0
 * Their float64 references (the half formats': support/numeric.h), from the block structs of
 * quant.h. */

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
    const uint32_t op_type = llmm__type_get(wtype)->operand_type;
    const llmm_type_traits *op = llmm__type_get(op_type);
    assert_non_null(op);
    assert_non_null(op->from_float);
    size_t bytes = llmm__row_bytes(op_type, n);
    assert_true(bytes > 0);
    void *p = xmalloc(bytes);
    op->from_float(x, p, n);
    return p;
}

/* ================================================================== 6. the whole table and row sizes */

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
        assert_int_equal(t->vec_dot != NULL, want->has_math);
        if (want->has_math) {
            assert_int_equal(t->operand_type, want->vec_dot_type);
            const llmm_type_traits *op = llmm__type_get(t->operand_type);
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

/* ================================================================== 7. F32, F16, BF16, Q8_0, Q4_0: quantize / dequantize */

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

/* The types check_dequant covers alone: one test each, each with its own seed. */
#define DEQUANT_TEST(name, type, seed)              \
    static void test_dequant_##name(void **state) { \
        (void)state;                                \
        check_dequant(type, seed);                  \
    }
DEQUANT_TEST(f32, LLMM_TYPE_F32, 201)
DEQUANT_TEST(bf16, LLMM_TYPE_BF16, 203)
DEQUANT_TEST(q8_0, LLMM_TYPE_Q8_0, 204)

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

/* ================================================================== 8. F32, F16, BF16, Q8_0, Q4_0: vec_dot */

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
    assert_non_null(t);
    assert_non_null(t->vec_dot);
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
            ref_dequant(t->operand_type, xq, xd, n);

            const float got = t->vec_dot(wq, xq, n);
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
    const llmm_backend_config cfg = {.n_threads = 1};
    void *st = NULL;
    assert_int_equal(llmm__cpu_backend.init(&cfg, &st), LLMM_OK);
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

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_type_table),
        cmocka_unit_test(test_row_bytes),
        cmocka_unit_test(test_table_rows),
        cmocka_unit_test(test_every_dot_has_its_operand),
        cmocka_unit_test(test_roundtrip_error),
        cmocka_unit_test(test_degenerate_rows),
        cmocka_unit_test(test_dequant_matches_layout),
        cmocka_unit_test(test_vec_dot),
        cmocka_unit_test(test_reference_acceptance),
        cmocka_unit_test(test_q8_1_operand),
        cmocka_unit_test(test_q8_K_operand),
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
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
