/* Weight types: the GGUF/ggml type ids, their block layouts and the per-type kernels.
 * One designated-initializer table (quant.c) indexed by type id holds everything the rest
 * of the code asks about a type; nothing else switches on type ids. Kernels: quant.c (float
 * types, Q8_0, Q4_0), quant_legacy.c (Q4_1, Q5_0, Q5_1, Q8_1), quant_k.c (K-quants, Q8_K),
 * quant_iq4.c (IQ4_NL, IQ4_XS); whole-model conversion: quant_file.c (lib/quant_file.h). */
#ifndef LLMM_QUANT_H
#define LLMM_QUANT_H

#include <assert.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "base/common.h"

/* ggml type ids as stored in GGUF tensor infos. Gaps are ids ggml removed; they stay
 * unknown here so a file using them is rejected. */
enum llmm_type {
    LLMM_TYPE_F32 = 0,
    LLMM_TYPE_F16 = 1,
    LLMM_TYPE_Q4_0 = 2,
    LLMM_TYPE_Q4_1 = 3,
    LLMM_TYPE_Q5_0 = 6,
    LLMM_TYPE_Q5_1 = 7,
    LLMM_TYPE_Q8_0 = 8,
    LLMM_TYPE_Q8_1 = 9,
    LLMM_TYPE_Q2_K = 10,
    LLMM_TYPE_Q3_K = 11,
    LLMM_TYPE_Q4_K = 12,
    LLMM_TYPE_Q5_K = 13,
    LLMM_TYPE_Q6_K = 14,
    LLMM_TYPE_Q8_K = 15,
    LLMM_TYPE_IQ2_XXS = 16,
    LLMM_TYPE_IQ2_XS = 17,
    LLMM_TYPE_IQ3_XXS = 18,
    LLMM_TYPE_IQ1_S = 19,
    LLMM_TYPE_IQ4_NL = 20,
    LLMM_TYPE_IQ3_S = 21,
    LLMM_TYPE_IQ2_S = 22,
    LLMM_TYPE_IQ4_XS = 23,
    LLMM_TYPE_I8 = 24,
    LLMM_TYPE_I16 = 25,
    LLMM_TYPE_I32 = 26,
    LLMM_TYPE_I64 = 27,
    LLMM_TYPE_F64 = 28,
    LLMM_TYPE_IQ1_M = 29,
    LLMM_TYPE_BF16 = 30,
    LLMM_TYPE_TQ1_0 = 34,
    LLMM_TYPE_TQ2_0 = 35,
    LLMM_TYPE_MXFP4 = 39,
    LLMM_TYPE_COUNT = 40
};

typedef uint16_t llmm_f16;  /* IEEE half, bit pattern */
typedef uint16_t llmm_bf16; /* bfloat16, bit pattern */

#define QK4_0 32
#define QK4_1 32
#define QK5_0 32
#define QK5_1 32
#define QK8_0 32
#define QK8_1 32
#define QK_K 256        /* weights per K-quant super-block */
#define K_SCALE_SIZE 12 /* bytes of packed 6-bit scales and mins in Q4_K/Q5_K */

/* Block layouts: byte-for-byte the reference engine's (ggml-common.h), so GGUF tensors are
 * read in place. "bits" counts everything stored per weight, scales included. Within a
 * 32-weight block of the legacy types, weight j < 16 sits in the low nibble of qs[j] and
 * weight j + 16 in its high nibble; the 5th bit of weight j is bit j of qh (little-endian). */

/* Q4_0: 32 weights, 4.5 bits each: w = d * (q - 8), q in 0..15. */
typedef struct {
    llmm_f16 d;
    uint8_t qs[QK4_0 / 2];
} block_q4_0;
static_assert(sizeof(block_q4_0) == 18, "block_q4_0 layout");

/* Q4_1: 32 weights, 5 bits each: w = d * q + m, q in 0..15. */
typedef struct {
    llmm_f16 d;
    llmm_f16 m;
    uint8_t qs[QK4_1 / 2];
} block_q4_1;
static_assert(sizeof(block_q4_1) == 20, "block_q4_1 layout");

/* Q5_0: 32 weights, 5.5 bits each: w = d * (q - 16), q in 0..31. */
typedef struct {
    llmm_f16 d;
    uint8_t qh[4];
    uint8_t qs[QK5_0 / 2];
} block_q5_0;
static_assert(sizeof(block_q5_0) == 22, "block_q5_0 layout");

/* Q5_1: 32 weights, 6 bits each: w = d * q + m, q in 0..31. */
typedef struct {
    llmm_f16 d;
    llmm_f16 m;
    uint8_t qh[4];
    uint8_t qs[QK5_1 / 2];
} block_q5_1;
static_assert(sizeof(block_q5_1) == 24, "block_q5_1 layout");

/* Q8_0: 32 weights, 8.5 bits each: w = d * q. Also the activation format the reference
 * engine quantizes to before Q4_0/Q5_0/Q8_0 dot products. */
typedef struct {
    llmm_f16 d;
    int8_t qs[QK8_0];
} block_q8_0;
static_assert(sizeof(block_q8_0) == 34, "block_q8_0 layout");

/* Q8_1: 32 activations, 9 bits each: x = d * q; s = d * sum(q) rounded to f16, so a dot with
 * an offset format (Q4_1, Q5_1) adds m * s instead of summing the activations again. */
typedef struct {
    llmm_f16 d;
    llmm_f16 s;
    int8_t qs[QK8_1];
} block_q8_1;
static_assert(sizeof(block_q8_1) == 36, "block_q8_1 layout");

/* K-quants: a super-block of 256 weights in sub-blocks of 16 or 32, each sub-block with its
 * own small integer scale (and min), those scaled again by the f16 d (and dmin).
 * Weight i of a super-block: the 2-bit field of Q2_K/Q3_K is bits 2*(i%128/32) of
 * qs[32*(i/128) + i%32]; the nibble of Q4_K/Q5_K is the low (i%64 < 32) or high nibble of
 * qs[32*(i/64) + i%32]; the extra high bit of Q3_K/Q5_K is bit i/32 of hmask/qh[i%32]. */

/* Q2_K: 16 sub-blocks of 16, 2.625 bits per weight: w = d * sc * q - dmin * m, q in 0..3;
 * scales[j] holds sc (low nibble) and m (high nibble) of sub-block j. */
typedef struct {
    uint8_t scales[QK_K / 16];
    uint8_t qs[QK_K / 4];
    llmm_f16 d;
    llmm_f16 dmin;
} block_q2_K;
static_assert(sizeof(block_q2_K) == 84, "block_q2_K layout");

/* Q3_K: 16 sub-blocks of 16, 3.4375 bits per weight: w = d * (sc - 32) * (q - 4), q in 0..7
 * (2 low bits in qs, the high bit in hmask); 6-bit sc: low nibbles of sub-blocks 0-7 in the
 * low nibbles of scales[0..7], of 8-15 in their high nibbles, top 2 bits of sub-block j at
 * bit 2*(j/4) of scales[8 + j%4]. */
typedef struct {
    uint8_t hmask[QK_K / 8];
    uint8_t qs[QK_K / 4];
    uint8_t scales[12];
    llmm_f16 d;
} block_q3_K;
static_assert(sizeof(block_q3_K) == 110, "block_q3_K layout");

/* Q4_K: 8 sub-blocks of 32, 4.5 bits per weight: w = d * sc * q - dmin * m, q in 0..15;
 * 6-bit sc and m: sub-blocks 0-3 in the low 6 bits of scales[j] (sc) and scales[j+4] (m);
 * 4-7 take low nibbles from scales[j+4] (sc low, m high) and their top 2 bits from the top
 * bits of scales[j-4] (sc) and scales[j] (m). */
typedef struct {
    llmm_f16 d;
    llmm_f16 dmin;
    uint8_t scales[K_SCALE_SIZE];
    uint8_t qs[QK_K / 2];
} block_q4_K;
static_assert(sizeof(block_q4_K) == 144, "block_q4_K layout");

/* Q5_K: as Q4_K with a 5th bit per weight in qh, 5.5 bits per weight, q in 0..31. */
typedef struct {
    llmm_f16 d;
    llmm_f16 dmin;
    uint8_t scales[K_SCALE_SIZE];
    uint8_t qh[QK_K / 8];
    uint8_t qs[QK_K / 2];
} block_q5_K;
static_assert(sizeof(block_q5_K) == 176, "block_q5_K layout");

/* Q6_K: 16 sub-blocks of 16, 6.5625 bits per weight: w = d * sc * (q - 32), q in 0..63,
 * sc an int8. In each half (128 weights, h = i/128, r = i%128) the low 4 bits of q are the
 * nibble (low for r < 64) of ql[64h + r%64], the top 2 bits are bits 2*(r/32) of
 * qh[32h + r%32]. */
typedef struct {
    uint8_t ql[QK_K / 2];
    uint8_t qh[QK_K / 4];
    int8_t scales[QK_K / 16];
    llmm_f16 d;
} block_q6_K;
static_assert(sizeof(block_q6_K) == 210, "block_q6_K layout");

/* Q8_K: 256 activations, 9.125 bits each: x = d * q with a float d; bsums[j] is the sum of q
 * over weights 16j..16j+15, so the K-quant dots subtract their mins without a second pass. */
typedef struct {
    float d;
    int8_t qs[QK_K];
    int16_t bsums[QK_K / 16];
} block_q8_K;
static_assert(sizeof(block_q8_K) == 292, "block_q8_K layout");

/* Non-linear 4-bit formats: each nibble indexes llmm__iq4_values (a fixed codebook, denser
 * near zero, as the reference's kvalues_iq4nl), scaled by the block's d. */
#define QK4_NL 32

/* IQ4_NL: 32 weights, 4.5 bits each: w = d * llmm__iq4_values[q]; Q4_0's nibble order. */
typedef struct {
    llmm_f16 d;
    uint8_t qs[QK4_NL / 2];
} block_iq4_nl;
static_assert(sizeof(block_iq4_nl) == 18, "block_iq4_nl layout");

/* IQ4_XS: a super-block of 8 sub-blocks of 32, 4.25 bits per weight: w = d * (ls - 32) *
 * llmm__iq4_values[q], ls a 6-bit scale per sub-block: its low 4 bits are nibble ib % 2 of
 * scales_l[ib / 2], its top 2 bits are bits 2ib, 2ib+1 of scales_h. Sub-block ib's weights
 * are qs[16ib .. 16ib + 15] in Q4_0's nibble order. */
typedef struct {
    llmm_f16 d;
    uint16_t scales_h;
    uint8_t scales_l[QK_K / 64];
    uint8_t qs[QK_K / 2];
} block_iq4_xs;
static_assert(sizeof(block_iq4_xs) == 136, "block_iq4_xs layout");

extern const int8_t llmm__iq4_values[16];

/* The 6-bit scale (0..63) of sub-block ib of the IQ4_XS super-block at blk; its weights are
 * d * (scale - 32) * value[code]. Bytes, not the struct: kernels call it on rows of a file. */
static inline int llmm_iq4_xs_scale(const uint8_t *blk, int ib) {
    const unsigned scales_h = (unsigned)blk[offsetof(block_iq4_xs, scales_h)] |
                              (unsigned)blk[offsetof(block_iq4_xs, scales_h) + 1] << 8;
    const unsigned low = (unsigned)blk[offsetof(block_iq4_xs, scales_l) + ib / 2] >> 4 * (ib % 2) & 15u;
    return (int)(low | (scales_h >> 2 * ib & 3u) << 4);
}

/* Dequantize n (a multiple of the block size) weights of one row. */
typedef void (*llmm_dequant_row_fn)(const void *src, float *dst, size_t n);
/* Dot product of one weight row (n weights) with an operand row in the format its backend
 * quantized the activations to (the CPU's: cpu/cpu_dot.h). */
typedef float (*llmm_vec_dot_fn)(const void *w_row, const void *x, size_t n);
/* Convert n floats into this type (weights, or an operand format). */
typedef void (*llmm_quantize_row_fn)(const float *src, void *dst, size_t n);

typedef struct llmm_type_traits {
    const char *name;
    uint32_t block_size;  /* weights per block; 0 marks an unknown id */
    uint32_t block_bytes; /* bytes per block */
    llmm_dequant_row_fn dequant_row;  /* NULL: no math yet for this type */
    llmm_quantize_row_fn from_float;  /* float row -> this type (the reference encoding for
                                       * weights); NULL where not implemented */
} llmm_type_traits;

/* Traits of a type id; NULL for unknown or removed ids. */
const llmm_type_traits *llmm__type_get(uint32_t type);

/* Bytes of a row of n weights, 0 if n is not a multiple of the block size. */
size_t llmm__row_bytes(uint32_t type, uint64_t n);

float llmm__f16_to_f32(llmm_f16 h);
llmm_f16 llmm__f32_to_f16(float f);
float llmm__bf16_to_f32(llmm_bf16 h);

/* A float's bits (u) rounded to bf16 and widened back to float bits: nearest even, a NaN
 * quieted. The one rounding rule of the type table's from_float and of the CPU backend's
 * vectorized operand rounding; the magnitude is compared as a signed int because SSE2 has
 * only a signed 32-bit compare, which lets GCC vectorize loops over it. */
static inline uint32_t llmm_bf16_round_bits(uint32_t u) {
    const int nan = (int32_t)(u & 0x7fffffffu) > (int32_t)0x7f800000;
    return nan ? (u | 0x00400000u) & 0xffff0000u : (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
}

/* Float dot product with eight partial sums (the reference kernels' rounding order). */
float llmm__dot_f32(const void *a, const void *b, size_t n);
/* The scalar dot products of a weight row with its operand row: the reference results every
 * matmul kernel is checked against (the CPU backend's table of them: cpu/cpu_dot.h). */
float llmm__vec_dot_f16(const void *w, const void *x, size_t n);
float llmm__vec_dot_bf16(const void *w, const void *x, size_t n);
float llmm__vec_dot_q8_0_q8_0(const void *w, const void *x, size_t n);
float llmm__vec_dot_q4_0_q8_0(const void *w, const void *x, size_t n);

/* Float to a quant level in [lo, hi]: nearest with ties to even (the reference's
 * nearest_int) or truncated (its (int) casts of x + 0.5). The clamp comes first, so a huge
 * or NaN value (NaN gives lo) never reaches an undefined float-to-int conversion. */
static inline int llmm_round_clamp(float v, int lo, int hi) {
    if (!(v > (float)lo)) return lo;
    if (v > (float)hi) return hi;
    return (int)nearbyintf(v);
}
static inline int llmm_trunc_clamp(float v, int lo, int hi) {
    if (!(v > (float)lo)) return lo;
    if (v > (float)hi) return hi;
    return (int)v;
}

/* The value of largest magnitude among x[0..n), with its sign (the first one on ties), and
 * that magnitude in *amax: the symmetric quantizers map it to their grid's longer end. */
static inline float llmm_signed_absmax(const float *x, int n, float *amax) {
    float max = 0;
    *amax = 0;
    for (int i = 0; i < n; i++)
        if (fabsf(x[i]) > *amax) {
            *amax = fabsf(x[i]);
            max = x[i];
        }
    return max;
}

/* 32 4-bit codes into 16 bytes in the 32-weight blocks' order: code j < 16 in the low nibble
 * of qs[j], code j + 16 in its high nibble. */
static inline void llmm_pack_nibbles32(const uint8_t q[32], uint8_t qs[16]) {
    for (int j = 0; j < 16; j++) qs[j] = (uint8_t)(q[j] | q[j + 16] << 4);
}

/* ---------------------------------------------------------------- per-type kernels
 * The table's entries, public only so the table (quant.c) can name them: callers go through
 * llmm__type_get. n is the row length, a multiple of the type's block size. Quantizers follow
 * the reference engine's quantize_row_*_ref algorithms, so a file written here holds the
 * blocks the reference tools would write. Dots take the activation format in the name. */

/* Activations into Q8_0 blocks (n a multiple of 32), rounding as the reference engine. */
void llmm__quantize_row_q8_0(const float *src, void *dst, size_t n);
/* Weights into Q4_0 blocks (n a multiple of 32), with the reference quantizer's encoding. */
void llmm__quantize_row_q4_0(const float *src, void *dst, size_t n);

/* quant_legacy.c: the 32-weight offset and 5-bit formats, and their Q8_1 operand */
void llmm__quantize_row_q4_1(const float *src, void *dst, size_t n);
void llmm__quantize_row_q5_0(const float *src, void *dst, size_t n);
void llmm__quantize_row_q5_1(const float *src, void *dst, size_t n);
void llmm__quantize_row_q8_1(const float *src, void *dst, size_t n);
void llmm__dequant_row_q4_1(const void *src, float *dst, size_t n);
void llmm__dequant_row_q5_0(const void *src, float *dst, size_t n);
void llmm__dequant_row_q5_1(const void *src, float *dst, size_t n);
float llmm__vec_dot_q4_1_q8_1(const void *w, const void *x, size_t n);
float llmm__vec_dot_q5_0_q8_0(const void *w, const void *x, size_t n);
float llmm__vec_dot_q5_1_q8_1(const void *w, const void *x, size_t n);

/* quant_k.c: the K-quants (n a multiple of 256) and their Q8_K operand */
void llmm__quantize_row_q2_K(const float *src, void *dst, size_t n);
void llmm__quantize_row_q3_K(const float *src, void *dst, size_t n);
void llmm__quantize_row_q4_K(const float *src, void *dst, size_t n);
void llmm__quantize_row_q5_K(const float *src, void *dst, size_t n);
void llmm__quantize_row_q6_K(const float *src, void *dst, size_t n);
void llmm__quantize_row_q8_K(const float *src, void *dst, size_t n);
void llmm__dequant_row_q2_K(const void *src, float *dst, size_t n);
void llmm__dequant_row_q3_K(const void *src, float *dst, size_t n);
void llmm__dequant_row_q4_K(const void *src, float *dst, size_t n);
void llmm__dequant_row_q5_K(const void *src, float *dst, size_t n);
void llmm__dequant_row_q6_K(const void *src, float *dst, size_t n);
float llmm__vec_dot_q2_K_q8_K(const void *w, const void *x, size_t n);
float llmm__vec_dot_q3_K_q8_K(const void *w, const void *x, size_t n);
float llmm__vec_dot_q4_K_q8_K(const void *w, const void *x, size_t n);
float llmm__vec_dot_q5_K_q8_K(const void *w, const void *x, size_t n);
float llmm__vec_dot_q6_K_q8_K(const void *w, const void *x, size_t n);

/* quant_iq4.c: the non-linear 4-bit formats. Their quantizers are this project's own (a
 * least-squares scale search, see there); the reference's also weighs each value by an
 * importance, so files written here are valid but not byte-identical to the reference's. */
void llmm__quantize_row_iq4_nl(const float *src, void *dst, size_t n);
void llmm__quantize_row_iq4_xs(const float *src, void *dst, size_t n);
void llmm__dequant_row_iq4_nl(const void *src, float *dst, size_t n);
void llmm__dequant_row_iq4_xs(const void *src, float *dst, size_t n);
float llmm__vec_dot_iq4_nl_q8_0(const void *w, const void *x, size_t n);
float llmm__vec_dot_iq4_xs_q8_K(const void *w, const void *x, size_t n);

#endif
