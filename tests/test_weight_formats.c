/* Weight types Q4_1, Q5_0, Q5_1, Q2_K..Q6_K, IQ4_NL, IQ4_XS (and Q4_0, Q8_0 alongside), their
 * activation formats Q8_1 and Q8_K, and whole-model conversion (lib/quant_file.c).
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
 *  - models: stories260K quantized to each type and recipe runs greedy and must agree with
 *    the F32 run for at least 16 leading tokens. stories260K's rows
 *    (64, 172) cannot hold 256-blocks, so the K-quants and IQ4_XS are also run on the same model
 *    embedded in 256-wide matrices (zero padding, exact in F32; see pad_stories). */
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

#include "format/gguf.h"
#include "support/gguf_builder.h"
#include "llmmini.h"
#include "cpu_dot.h"
#include "format/quant.h"
#include "offline/quantize_file.h"
#include "support/alloc.h"
#include "support/fixtures.h"
#include "support/numeric.h"
#include "support/rng.h"
#include "support/quant_temp.h"
#include "support/shared_data.h"

#define MAX_IDS 128

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
        assert_non_null(llmm__cpu_dot_get(c->type));
        assert_non_null(t->from_float);
        assert_int_equal(llmm__cpu_dot_get(c->type)->operand_type, c->operand);
    }
    /* the activation formats are produced, never stored as weights */
    const uint32_t operands[] = {LLMM_TYPE_Q8_1, LLMM_TYPE_Q8_K};
    for (size_t i = 0; i < ARRAY_LEN(operands); i++) {
        const llmm_type_traits *t = llmm__type_get(operands[i]);
        assert_non_null(t->from_float);
        assert_null(llmm__cpu_dot_get(operands[i]));
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
        const cpu_dot *dot = llmm__cpu_dot_get(id);
        if (!t || !dot) continue;
        assert_non_null(t->dequant_row);
        const llmm_type_traits *op = llmm__type_get(dot->operand_type);
        if (!op || !op->from_float) fail_msg("%s: operand type %u cannot be produced", t->name, dot->operand_type);
        assert_true(llmm__row_bytes(dot->operand_type, t->block_size) > 0);
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
    const double got = llmm__cpu_dot_get(c->type)->vec_dot(wq, xq, n);
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
        const double total = sqrt(se) / N, dot_err = fabs(llmm__cpu_dot_get(c->type)->vec_dot(q, q2, N) - dot) / N;
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

/* ================================================================== 6. recipes */

/* A llama-shaped file with 8 layers of 256-wide weights (2 rows each: only names and row
 * lengths matter to the recipes), as a gguf_file in memory. tied: no output.weight. */
static gguf_file *open_plan_model(gguf_builder *b, int tied, int fused_qkv) {
    static const char *const per_layer[] = {"attn_norm", "attn_q", "attn_k", "attn_v", "attn_output",
                                            "ffn_norm", "ffn_gate", "ffn_up", "ffn_down"};
    const int n_layers = 8;
    const uint64_t n_tensors = 3 + (uint64_t)n_layers * ARRAY_LEN(per_layer) - (tied ? 1 : 0);
    gb_init(b);
    gb_header(b, 3, n_tensors, 1);
    gb_kv_str(b, "general.architecture", "llama");
    uint64_t off = 0;
    const uint64_t mat[2] = {256, 2}, vec[1] = {256}, down[2] = {512, 2};
    gb_tensor_info(b, "token_embd.weight", 2, mat, LLMM_TYPE_F32, off);
    gb_tensor_info(b, "output_norm.weight", 1, vec, LLMM_TYPE_F32, off + 2048);
    off += 3072;
    if (!tied) {
        gb_tensor_info(b, "output.weight", 2, mat, LLMM_TYPE_F32, off);
        off += 2048;
    }
    for (int l = 0; l < n_layers; l++)
        for (size_t k = 0; k < ARRAY_LEN(per_layer); k++) {
            char name[64];
            const char *suffix = fused_qkv && k == 1 ? "attn_qkv" : per_layer[k];
            snprintf(name, sizeof name, "blk.%d.%s.weight", l, suffix);
            const int is_vec = strstr(suffix, "norm") != NULL, is_down = !strcmp(suffix, "ffn_down");
            gb_tensor_info(b, name, is_vec ? 1 : 2, is_vec ? vec : is_down ? down : mat, LLMM_TYPE_F32, off);
            off += is_vec ? 1024 : is_down ? 4096 : 2048;
        }
    gb_pad_to(b, 32);
    gb_fill(b, 0, (size_t)off);
    assert_true(gb_finish(b));
    gguf_file *f = NULL;
    llmm_diag d;
    if (llmm__gguf_open_memory(b->bytes, b->len, NULL, &f, &d)) fail_msg("plan model: %s", d.msg);
    return f;
}

static uint32_t planned(const gguf_file *f, const char *recipe, const char *name) {
    const gguf_tensor *t = llmm__gguf_find_tensor(f, name);
    assert_non_null(t);
    const llmm_quant_recipe *r = llmm__quant_recipe_find(recipe);
    assert_non_null(r);
    return llmm__quant_choose(r, f, t).type;
}

/* The reference's use_more_bits with 8 layers: layers 0 and 7 (first and last eighth) and
 * 3, 6 ((i - 1) % 3 == 2) get Q6_K attn_v and ffn_down in q4_k_m and q5_k_m. */
static void test_recipe_mixes(void **state) {
    (void)state;
    gguf_builder b;
    gguf_file *f = open_plan_model(&b, 0, 0);
    const int more_bits[8] = {1, 0, 0, 1, 0, 0, 1, 1};
    const char *const mixes[] = {"q4_k_m", "q5_k_m"};
    const uint32_t base[] = {LLMM_TYPE_Q4_K, LLMM_TYPE_Q5_K};
    for (size_t m = 0; m < 2; m++) {
        for (int l = 0; l < 8; l++) {
            char v[64], down[64], q[64], norm[64];
            snprintf(v, sizeof v, "blk.%d.attn_v.weight", l);
            snprintf(down, sizeof down, "blk.%d.ffn_down.weight", l);
            snprintf(q, sizeof q, "blk.%d.attn_q.weight", l);
            snprintf(norm, sizeof norm, "blk.%d.ffn_norm.weight", l);
            const uint32_t want = more_bits[l] ? LLMM_TYPE_Q6_K : base[m];
            assert_int_equal(planned(f, mixes[m], v), want);
            assert_int_equal(planned(f, mixes[m], down), want);
            assert_int_equal(planned(f, mixes[m], q), base[m]);
            assert_int_equal(planned(f, mixes[m], norm), LLMM_TYPE_F32);
        }
        assert_int_equal(planned(f, mixes[m], "output.weight"), LLMM_TYPE_Q6_K);
        assert_int_equal(planned(f, mixes[m], "token_embd.weight"), base[m]);
    }
    /* pure recipes: every weight the same type */
    assert_int_equal(planned(f, "q4_k", "output.weight"), LLMM_TYPE_Q4_K);
    assert_int_equal(planned(f, "q2_k", "blk.0.attn_v.weight"), LLMM_TYPE_Q2_K);
    assert_int_equal(planned(f, "f16", "blk.7.ffn_down.weight"), LLMM_TYPE_F16);
    llmm__gguf_close(f);
    gb_free(&b);

    f = open_plan_model(&b, 1, 1); /* tied embeddings, fused qkv */
    assert_int_equal(planned(f, "q4_k_m", "token_embd.weight"), LLMM_TYPE_Q6_K);
    assert_int_equal(planned(f, "q4_k_m", "blk.2.attn_qkv.weight"), LLMM_TYPE_Q5_K);
    assert_int_equal(planned(f, "q5_k_m", "blk.2.attn_qkv.weight"), LLMM_TYPE_Q6_K);
    llmm__gguf_close(f);
    gb_free(&b);
}

static gguf_file *open_shared_model(const char *rel) {
    char path[1024];
    gguf_file *f = NULL;
    llmm_diag d;
    if (llmm__gguf_open_file(shared_path(path, sizeof path, rel), 1, NULL, &f, &d)) return NULL;
    return f;
}

/* stories260K: rows of 64 fall back Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0, Q2_K/Q3_K ->
 * Q4_0, IQ4_XS -> IQ4_NL; rows of 172 fit no block and become F16. */
static void test_recipe_fallbacks(void **state) {
    (void)state;
    gguf_file *f = open_shared_model("models/stories260K.gguf");
    if (!f) skip();
    const struct {
        const char *recipe, *tensor;
        uint32_t wanted, type;
    } rows[] = {
        {"q4_k", "blk.0.attn_q.weight", LLMM_TYPE_Q4_K, LLMM_TYPE_Q5_0},
        {"q5_k", "blk.0.attn_q.weight", LLMM_TYPE_Q5_K, LLMM_TYPE_Q5_1},
        {"q6_k", "blk.0.attn_q.weight", LLMM_TYPE_Q6_K, LLMM_TYPE_Q8_0},
        {"q2_k", "blk.0.attn_q.weight", LLMM_TYPE_Q2_K, LLMM_TYPE_Q4_0},
        {"q3_k", "token_embd.weight", LLMM_TYPE_Q3_K, LLMM_TYPE_Q4_0},
        {"q4_k", "blk.0.ffn_down.weight", LLMM_TYPE_Q4_K, LLMM_TYPE_F16},
        {"q4_0", "blk.0.ffn_down.weight", LLMM_TYPE_Q4_0, LLMM_TYPE_F16},
        {"q4_k_m", "blk.2.attn_v.weight", LLMM_TYPE_Q6_K, LLMM_TYPE_Q8_0},
        {"q4_k_m", "blk.1.attn_v.weight", LLMM_TYPE_Q4_K, LLMM_TYPE_Q5_0},
        {"q4_k_m", "output.weight", LLMM_TYPE_Q8_0, LLMM_TYPE_Q8_0}, /* 64 % 256: the reference's Q8_0 */
        {"q8_0", "output_norm.weight", LLMM_TYPE_F32, LLMM_TYPE_F32},
        {"f16", "blk.0.ffn_down.weight", LLMM_TYPE_F16, LLMM_TYPE_F16},
        {"iq4_xs", "blk.0.attn_q.weight", LLMM_TYPE_IQ4_XS, LLMM_TYPE_IQ4_NL},
        {"iq4_xs", "blk.0.ffn_down.weight", LLMM_TYPE_IQ4_XS, LLMM_TYPE_F16},
        {"iq4_nl", "blk.0.ffn_down.weight", LLMM_TYPE_IQ4_NL, LLMM_TYPE_F16},
    };
    for (size_t i = 0; i < ARRAY_LEN(rows); i++) {
        const llmm_quant_choice c =
            llmm__quant_choose(llmm__quant_recipe_find(rows[i].recipe), f, llmm__gguf_find_tensor(f, rows[i].tensor));
        if (c.wanted != rows[i].wanted || c.type != rows[i].type || c.fell_back != (c.type != c.wanted))
            fail_msg("%s %s: wanted %u type %u fell_back %d", rows[i].recipe, rows[i].tensor, c.wanted, c.type,
                     c.fell_back);
    }
    llmm__gguf_close(f);
}

/* ================================================================== 7. whole models */

/* Greedy continuation of "Once upon a time"; returns the number of tokens. */
static size_t greedy(const char *model_path, llmm_token *out, size_t n_predict) {
    llmm_model *m = load_model(model_path, NULL);
    llmm_context_params cp;
    llmm_context_params_default(&cp, sizeof cp);
    cp.n_ctx = 256;
    cp.n_threads = 2;
    llmm_context *c = make_context(m, &cp);
    llmm_sampler_params sp;
    llmm_sampler_params_default(&sp, sizeof sp);
    sp.temperature = 0;
    llmm_generate_params gp;
    llmm_generate_params_default(&gp, sizeof gp);
    gp.max_tokens = (int32_t)n_predict;
    gp.sampling = &sp;
    gp.out_tokens = out;
    gp.out_capacity = n_predict;
    llmm_generate_stats stats = {.size = sizeof stats};
    assert_int_equal(llmm_generate(c, "Once upon a time", &gp, &stats), LLMM_OK);
    llmm_context_free(c);
    llmm_model_free(m);
    return stats.n_generated;
}

static size_t leading_agreement(const llmm_token *a, size_t na, const llmm_token *b, size_t nb) {
    size_t k = 0;
    while (k < na && k < nb && a[k] == b[k]) k++;
    return k;
}

typedef struct agreement_case {
    const char *recipe;
    size_t required; /* leading tokens that must agree with F32; 0: reported only */
} agreement_case;

static void check_agreement(const gguf_file *src, const char *src_path, const agreement_case *cases, size_t n_cases,
                            size_t n_predict, const char *label) {
    llmm_token ref[MAX_IDS], got[MAX_IDS];
    const size_t n_ref = greedy(src_path, ref, n_predict);
    assert_true(n_ref > 16);
    for (size_t i = 0; i < n_cases; i++) {
        char path[64];
        quantize_to_temp(src, cases[i].recipe, path, sizeof path);
        const size_t n = greedy(path, got, n_predict);
        unlink(path);
        const size_t agree = leading_agreement(ref, n_ref, got, n);
        print_message("%s %-7s greedy agreement with F32: %2zu/%zu leading tokens%s\n", label, cases[i].recipe, agree,
                      n_ref, cases[i].required ? " (required >= 16)" : "");
        if (agree < cases[i].required) fail_msg("%s %s: only %zu leading tokens agree", label, cases[i].recipe, agree);
    }
}

/* Every type and recipe: the bar (16 leading tokens). The K-quants fall back to
 * 32-blocks on stories260K's 64-wide rows, as the reference does, and IQ4_XS to IQ4_NL (so
 * both convert every matrix alike; they agree for exactly 16 tokens, scalar, AVX2, AVX-512). */
static const agreement_case k_stories_cases[] = {
    {"f16", 16},  {"bf16", 16}, {"q8_0", 16}, {"q4_0", 16}, {"q4_1", 16},   {"q5_0", 16},   {"q5_1", 16},
    {"q2_k", 16}, {"q3_k", 16}, {"q4_k", 16}, {"q5_k", 16}, {"q6_k", 16}, {"q4_k_m", 16}, {"q5_k_m", 16},
    {"iq4_nl", 16}, {"iq4_xs", 16},
};

static void test_stories_greedy_agreement(void **state) {
    (void)state;
    char path[1024];
    shared_path(path, sizeof path, "models/stories260K.gguf");
    gguf_file *f = open_shared_model("models/stories260K.gguf");
    if (!f) skip();
    check_agreement(f, path, k_stories_cases, ARRAY_LEN(k_stories_cases), 64, "stories260K");
    llmm__gguf_close(f);
}

/* The reference's own q8_0/q4_0 conversions of stories260K (shared/models): every tensor they
 * quantized must come out of llmmini byte for byte, the reference encoding. */
static void compare_with_reference_file(const gguf_file *src, const char *recipe, const char *ref_rel) {
    gguf_file *ref = open_shared_model(ref_rel);
    if (!ref) return;
    char path[64];
    quantize_to_temp(src, recipe, path, sizeof path);
    gguf_file *ours = NULL;
    llmm_diag d;
    if (llmm__gguf_open_file(path, 1, NULL, &ours, &d)) fail_msg("reopen: %s", d.msg);
    size_t compared = 0;
    for (uint64_t i = 0; i < ref->n_tensors; i++) {
        const gguf_tensor *r = &ref->tensors[i];
        char name[GGUF_MAX_NAME];
        snprintf(name, sizeof name, "%.*s", (int)r->name.len, r->name.ptr);
        const gguf_tensor *o = llmm__gguf_find_tensor(ours, name);
        assert_non_null(o);
        if (r->type != o->type || r->type == LLMM_TYPE_F32) continue;
        assert_int_equal(r->n_bytes, o->n_bytes);
        if (memcmp(r->data, o->data, (size_t)r->n_bytes))
            fail_msg("%s: tensor %s differs from the reference's", recipe, name);
        compared++;
    }
    print_message("%s: %zu quantized tensors byte-identical to %s\n", recipe, compared, ref_rel);
    assert_true(compared >= 30); /* all but the F32-kept ffn_down of 5 layers */
    llmm__gguf_close(ours);
    unlink(path);
    llmm__gguf_close(ref);
}

static void test_reference_encoding(void **state) {
    (void)state;
    gguf_file *f = open_shared_model("models/stories260K.gguf");
    if (!f) skip();
    compare_with_reference_file(f, "q8_0", "models/stories260K-q8_0.gguf");
    compare_with_reference_file(f, "q4_0", "models/stories260K-q4_0.gguf");
    llmm__gguf_close(f);
}

/* ------------------------------------------------------------------ stories260K, 256 wide
 * The same network embedded in 256-wide matrices so every K-quant applies without fallback:
 * n_embd 64 -> 256 and n_ff 172 -> 256 with zero rows and columns; heads 8 -> 32 dims each
 * (the first 8 real, rope.dimension_count stays 8 so the rotation is unchanged). Norm
 * weights are halved and eps quartered (the mean of squares over 256 is a quarter of that
 * over 64), q is doubled (1/sqrt(32) vs 1/sqrt(8)): all exact scalings, so the F32 model
 * computes what stories260K computes. */

typedef enum dim_kind { DIM_EMBD, DIM_Q, DIM_KV, DIM_FF, DIM_SAME } dim_kind;

static int64_t padded_size(dim_kind k, int64_t old) {
    switch (k) {
    case DIM_EMBD: return 256;
    case DIM_Q: return 8 * 32;
    case DIM_KV: return 4 * 32;
    case DIM_FF: return 256;
    default: return old;
    }
}

/* The old index a new index comes from, or -1 for padding. */
static int64_t padded_source(dim_kind k, int64_t i) {
    switch (k) {
    case DIM_EMBD: return i < 64 ? i : -1;
    case DIM_Q:
    case DIM_KV: return i % 32 < 8 ? (i / 32) * 8 + i % 32 : -1;
    case DIM_FF: return i < 172 ? i : -1;
    default: return i;
    }
}

typedef struct pad_rule {
    const char *suffix;
    dim_kind in, out; /* ne0, ne1 */
    float scale;
} pad_rule;

static const pad_rule k_pad_rules[] = {
    {"attn_output.weight", DIM_Q, DIM_EMBD, 1},    {"token_embd.weight", DIM_EMBD, DIM_SAME, 1},
    {"output.weight", DIM_EMBD, DIM_SAME, 1},      {"_norm.weight", DIM_EMBD, DIM_SAME, 0.5f},
    {"attn_q.weight", DIM_EMBD, DIM_Q, 2},         {"attn_k.weight", DIM_EMBD, DIM_KV, 1},
    {"attn_v.weight", DIM_EMBD, DIM_KV, 1},        {"ffn_gate.weight", DIM_EMBD, DIM_FF, 1},
    {"ffn_up.weight", DIM_EMBD, DIM_FF, 1},        {"ffn_down.weight", DIM_FF, DIM_EMBD, 1},
};

/* The first rule whose suffix ends the name (attn_output before output). */
static const pad_rule *pad_rule_for(gguf_str name) {
    for (size_t i = 0; i < ARRAY_LEN(k_pad_rules); i++) {
        const size_t n = strlen(k_pad_rules[i].suffix);
        if (name.len >= n && !memcmp(name.ptr + name.len - n, k_pad_rules[i].suffix, n)) return &k_pad_rules[i];
    }
    fail_msg("no padding rule for %.*s", (int)name.len, name.ptr);
    return NULL;
}

static void write_padded_kv(gguf_builder *b, const gguf_kv *kv) {
    static const struct {
        const char *key;
        float value;
    } changed[] = {{"llama.embedding_length", 256}, {"llama.feed_forward_length", 256}};
    for (size_t i = 0; i < ARRAY_LEN(changed); i++)
        if (llmm__gguf_str_eq(kv->key, changed[i].key)) {
            gb_kv_u32(b, changed[i].key, (uint32_t)changed[i].value);
            return;
        }
    if (llmm__gguf_str_eq(kv->key, "llama.attention.layer_norm_rms_epsilon")) {
        gb_kv_f32(b, "llama.attention.layer_norm_rms_epsilon", (float)kv->v.f64 / 4);
        return;
    }
    size_t value_bytes = kv->type == GGUF_TYPE_STRING ? 8 + (size_t)kv->v.str.len
                         : kv->type == GGUF_TYPE_ARRAY ? 12 + (size_t)kv->v.arr.bytes
                                                       : llmm__gguf_scalar_size(kv->type);
    gb_bytes(b, (const uint8_t *)kv->key.ptr - 8, 8 + (size_t)kv->key.len + 4 + value_bytes);
}

static void write_padded_data(gguf_builder *b, const gguf_tensor *t, const pad_rule *r, int64_t ne0, int64_t ne1) {
    const float *src = t->data;
    for (int64_t row = 0; row < ne1; row++)
        for (int64_t col = 0; col < ne0; col++) {
            const int64_t sr = padded_source(r->out, row), sc = padded_source(r->in, col);
            gb_f32(b, sr < 0 || sc < 0 ? 0.0f : src[sr * t->ne[0] + sc] * r->scale);
        }
    gb_pad_to(b, 32);
}

static gguf_file *pad_stories(const gguf_file *src, gguf_builder *b) {
    gb_init(b);
    gb_header(b, 3, src->n_tensors, src->n_kv);
    for (uint64_t i = 0; i < src->n_kv; i++) write_padded_kv(b, &src->kv[i]);
    uint64_t off = 0;
    for (uint64_t i = 0; i < src->n_tensors; i++) {
        const gguf_tensor *t = &src->tensors[i];
        const pad_rule *r = pad_rule_for(t->name);
        const uint64_t ne[2] = {(uint64_t)padded_size(r->in, t->ne[0]), (uint64_t)padded_size(r->out, t->ne[1])};
        char name[GGUF_MAX_NAME];
        snprintf(name, sizeof name, "%.*s", (int)t->name.len, t->name.ptr);
        gb_tensor_info(b, name, t->n_dims, ne, LLMM_TYPE_F32, off);
        off += (ne[0] * ne[1] * 4 + 31) / 32 * 32;
    }
    gb_pad_to(b, 32);
    for (uint64_t i = 0; i < src->n_tensors; i++) {
        const gguf_tensor *t = &src->tensors[i];
        const pad_rule *r = pad_rule_for(t->name);
        write_padded_data(b, t, r, padded_size(r->in, t->ne[0]), padded_size(r->out, t->ne[1]));
    }
    assert_true(gb_finish(b));
    gguf_file *f = NULL;
    llmm_diag d;
    if (llmm__gguf_open_memory(b->bytes, b->len, NULL, &f, &d)) fail_msg("padded model: %s", d.msg);
    return f;
}

static const agreement_case k_padded_cases[] = {
    {"q8_0", 16}, {"q6_k", 16}, {"q5_k", 0}, {"q4_k", 0}, {"q3_k", 0}, {"q2_k", 0}, {"q4_k_m", 0}, {"q5_k_m", 0},
    {"iq4_xs", 16},
};

static void test_padded_stories_greedy_agreement(void **state) {
    (void)state;
    gguf_file *src = open_shared_model("models/stories260K.gguf");
    if (!src) skip();
    char orig_path[1024];
    shared_path(orig_path, sizeof orig_path, "models/stories260K.gguf");
    gguf_builder b;
    gguf_file *padded = pad_stories(src, &b);
    char path[64] = "/tmp/llmm-padded-XXXXXX";
    assert_true(gb_write_temp(&b, path, sizeof path) == 0);
    /* the padded F32 model is the same network */
    llmm_token a[MAX_IDS], p[MAX_IDS];
    const size_t na = greedy(orig_path, a, 64), np = greedy(path, p, 64);
    print_message("stories260K padded to 256: F32 agrees with the original for %zu/%zu tokens\n",
                  leading_agreement(a, na, p, np), na);
    assert_true(leading_agreement(a, na, p, np) >= 32);
    /* 32 tokens: the bar is 16, and the scalar K-quant dots make longer runs slow */
    check_agreement(padded, path, k_padded_cases, ARRAY_LEN(k_padded_cases), 32, "stories260K-256");
    unlink(path);
    llmm__gguf_close(padded);
    gb_free(&b);
    llmm__gguf_close(src);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table_rows),
        cmocka_unit_test(test_every_dot_has_its_operand),
        cmocka_unit_test(test_roundtrip_error),
        cmocka_unit_test(test_degenerate_rows),
        cmocka_unit_test(test_dequant_matches_layout),
        cmocka_unit_test(test_vec_dot),
        cmocka_unit_test(test_reference_acceptance),
        cmocka_unit_test(test_q8_1_operand),
        cmocka_unit_test(test_q8_K_operand),
        cmocka_unit_test(test_recipe_mixes),
        cmocka_unit_test(test_recipe_fallbacks),
        cmocka_unit_test(test_reference_encoding),
        cmocka_unit_test(test_stories_greedy_agreement),
        cmocka_unit_test(test_padded_stories_greedy_agreement),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
