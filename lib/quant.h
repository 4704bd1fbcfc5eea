/* Weight types: the GGUF/ggml type ids, their block layouts and the per-type kernels.
 * One designated-initializer table (quant.c) indexed by type id holds everything the rest
 * of the code asks about a type; nothing else switches on type ids. */
#ifndef LLMM_QUANT_H
#define LLMM_QUANT_H

#include <assert.h>
#include <stddef.h>
#include <stdint.h>

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
#define QK8_0 32
#define QK_K 256

/* Q4_0: 32 weights, 4.5 bits each: w = d * (q - 8), q in 0..15; low nibbles hold 0..15,
 * high nibbles 16..31. */
typedef struct {
    llmm_f16 d;
    uint8_t qs[QK4_0 / 2];
} block_q4_0;
static_assert(sizeof(block_q4_0) == 18, "block_q4_0 layout");

/* Q8_0: 32 weights, 8.5 bits each: w = d * q. Also the activation format the reference
 * engine quantizes to before Q4_0/Q8_0 dot products. */
typedef struct {
    llmm_f16 d;
    int8_t qs[QK8_0];
} block_q8_0;
static_assert(sizeof(block_q8_0) == 34, "block_q8_0 layout");

/* Dequantize n (a multiple of the block size) weights of one row. */
typedef void (*llmm_dequant_row_fn)(const void *src, float *dst, size_t n);
/* Dot product of one weight row (n weights) with activations that were prepared by
 * the type's vec_format (see below). */
typedef float (*llmm_vec_dot_fn)(const void *w_row, const void *x, size_t n);
/* Convert n float activations into the vec_dot operand format (NULL: plain floats). */
typedef void (*llmm_quantize_row_fn)(const float *src, void *dst, size_t n);

typedef struct llmm_type_traits {
    const char *name;
    uint32_t block_size;  /* weights per block; 0 marks an unknown id */
    uint32_t block_bytes; /* bytes per block */
    llmm_dequant_row_fn dequant_row;  /* NULL: no math yet for this type */
    llmm_vec_dot_fn vec_dot;
    uint32_t vec_dot_type;            /* operand format vec_dot expects: F32, F16, BF16, Q8_0 */
    llmm_quantize_row_fn from_float;  /* float row -> this type; NULL where not implemented */
} llmm_type_traits;

/* Traits of a type id; NULL for unknown or removed ids. */
const llmm_type_traits *llmm_type_get(uint32_t type);

/* Bytes of a row of n weights, 0 if n is not a multiple of the block size. */
size_t llmm_row_bytes(uint32_t type, uint64_t n);

float llmm_f16_to_f32(llmm_f16 h);
llmm_f16 llmm_f32_to_f16(float f);
float llmm_bf16_to_f32(llmm_bf16 h);

/* Float dot product with eight partial sums (the reference kernels' rounding order). */
float llmm_dot_f32(const void *a, const void *b, size_t n);

/* Activations into Q8_0 blocks (n a multiple of 32), rounding as the reference engine. */
void llmm_quantize_row_q8_0(const float *src, void *dst, size_t n);
/* Weights into Q4_0 blocks (n a multiple of 32), with the reference quantizer's encoding. */
void llmm_quantize_row_q4_0(const float *src, void *dst, size_t n);

#endif
