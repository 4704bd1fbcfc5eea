/* Weight types for the C code: the trait table (quant.c), built from the rows of blocks.h and
 * indexed by type id, holds everything the rest of the code asks about a type; nothing else
 * lists type ids. Codecs and scalar dots: quant.c (float types, Q8_0, Q4_0), quant_legacy.c
 * (Q4_1, Q5_0, Q5_1, Q8_1), quant_k.c (K-quants, Q8_K), quant_iq4.c (IQ4_NL, IQ4_XS); half.c
 * (the f16/bf16 conversions); whole-model conversion: offline/quantize_file.c. */
#ifndef LLMM_QUANT_H
#define LLMM_QUANT_H

#include <assert.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "base/common.h"
#include "blocks.h"
#include "half.h"

/* The IQ4 codebook (blocks.h LLMM_IQ4_VALUES). */
extern const int8_t llmm__iq4_values[16];

/* Dequantize n (a multiple of the block size) weights of one row. */
typedef void (*llmm_dequant_row_fn)(const void *src, float *dst, size_t n);
/* Dot product of one weight row (n weights) with an operand row in the format the row's
 * operand type names. */
typedef float (*llmm_vec_dot_fn)(const void *w_row, const void *x, size_t n);
/* Convert n floats into this type (weights, or an operand format). */
typedef void (*llmm_quantize_row_fn)(const float *src, void *dst, size_t n);

/* A row of blocks.h's LLMM_WEIGHT_TYPES with its functions. */
typedef struct llmm_type_traits {
    const char *name;
    uint32_t block_size;   /* weights per block; 0 marks an unknown id */
    uint32_t block_bytes;  /* bytes per block */
    uint32_t operand_type; /* the llmm_type activations take for vec_dot; LLMM_TYPE_NONE: none */
    uint32_t family;       /* enum llmm_kernel_family */
    llmm_dequant_row_fn dequant_row;  /* NULL: no math yet for this type */
    llmm_quantize_row_fn from_float;  /* float row -> this type (the reference encoding for
                                       * weights); NULL where not implemented */
    llmm_vec_dot_fn vec_dot; /* the scalar dot with an operand row: the reference result every
                              * matmul kernel is checked against; NULL: not a weight type */
} llmm_type_traits;

/* Traits of a type id; NULL for unknown or removed ids. */
const llmm_type_traits *llmm__type_get(uint32_t type);

/* Bytes of a row of n weights, 0 if n is not a multiple of the block size. */
size_t llmm__row_bytes(uint32_t type, uint64_t n);

/* Float dot product with eight partial sums (the reference kernels' rounding order). */
float llmm__dot_f32(const void *a, const void *b, size_t n);
/* The scalar dot products of a weight row with its operand row: the reference results every
 * matmul kernel is checked against (the CPU backend's generic matmul path calls them). */
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
