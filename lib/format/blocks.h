/* Weight types as data: the GGUF/ggml type ids, what kernels need to know of each (block
 * shape, the activation format its dots take, its kernel family) and the block layouts.
 * Plain C that also compiles as C++ and CUDA, so the CPU backend (through format/quant.h's
 * trait table), the CUDA kernels (cuda/quant_blocks.cuh) and the tests read one list.
 *
 * Adding a weight type: a row of LLMM_WEIGHT_TYPES and its block struct here, its codec in
 * lib/format (dequantize, quantize, the scalar dot the row names), then a kernel per backend
 * and ISA (docs/backends.md "Adding a weight type"). */
#ifndef LLMM_BLOCKS_H
#define LLMM_BLOCKS_H

#include <stddef.h>
#include <stdint.h>

#if defined(__cplusplus)
#define LLMM_STATIC_ASSERT(cond, msg) static_assert(cond, msg)
#else
#define LLMM_STATIC_ASSERT(cond, msg) _Static_assert(cond, msg)
#endif

#if defined(__CUDACC__)
#define LLMM_BLOCKS_FN __host__ __device__ __forceinline__
#else
#define LLMM_BLOCKS_FN static inline
#endif

/* What a matmul kernel does with a weight type. */
enum llmm_kernel_family {
    LLMM_FAMILY_NONE = 0,   /* no kernels: sized, so files holding it are checked, never multiplied */
    LLMM_FAMILY_FLOAT = 1,  /* F32, F16, BF16: float dots with activations of the same type */
    LLMM_FAMILY_BLOCK32 = 2,  /* blocks of 32 with an f16 scale: integer dots with Q8_0 or Q8_1 */
    LLMM_FAMILY_BLOCK256 = 3, /* super-blocks of 256 with sub-block scales: integer dots with Q8_K */
    LLMM_FAMILY_OPERAND = 4,  /* an activation format (Q8_1, Q8_K): quantized to, never a weight */
};

/* Every ggml type id, one row each: X(NAME, id, "name", weights per block, bytes per block,
 * operand type, kernel family, dequantize, quantize, scalar dot). The operand is the type the
 * activations are quantized to for a dot with this weight type (NONE: none); the last three
 * name the codec functions of lib/format (NULL: not implemented), which only the trait table
 * (format/quant.c) expands. Gaps in the ids are ids ggml removed: they stay unknown, so a file
 * using them is rejected. */
#define LLMM_WEIGHT_TYPES(X)                                                                                    \
    X(F32, 0, "f32", 1, 4, F32, FLOAT, dequant_f32, from_float_f32, llmm__dot_f32)                                 \
    X(F16, 1, "f16", 1, 2, F16, FLOAT, dequant_f16, from_float_f16, llmm__vec_dot_f16)                             \
    X(Q4_0, 2, "q4_0", 32, 18, Q8_0, BLOCK32, dequant_q4_0, llmm__quantize_row_q4_0, llmm__vec_dot_q4_0_q8_0)      \
    X(Q4_1, 3, "q4_1", 32, 20, Q8_1, BLOCK32, llmm__dequant_row_q4_1, llmm__quantize_row_q4_1,                     \
      llmm__vec_dot_q4_1_q8_1)                                                                                   \
    X(Q5_0, 6, "q5_0", 32, 22, Q8_0, BLOCK32, llmm__dequant_row_q5_0, llmm__quantize_row_q5_0,                     \
      llmm__vec_dot_q5_0_q8_0)                                                                                   \
    X(Q5_1, 7, "q5_1", 32, 24, Q8_1, BLOCK32, llmm__dequant_row_q5_1, llmm__quantize_row_q5_1,                     \
      llmm__vec_dot_q5_1_q8_1)                                                                                   \
    X(Q8_0, 8, "q8_0", 32, 34, Q8_0, BLOCK32, dequant_q8_0, llmm__quantize_row_q8_0, llmm__vec_dot_q8_0_q8_0)      \
    X(Q8_1, 9, "q8_1", 32, 36, NONE, OPERAND, NULL, llmm__quantize_row_q8_1, NULL)                                \
    X(Q2_K, 10, "q2_k", 256, 84, Q8_K, BLOCK256, llmm__dequant_row_q2_K, llmm__quantize_row_q2_K,                  \
      llmm__vec_dot_q2_K_q8_K)                                                                                   \
    X(Q3_K, 11, "q3_k", 256, 110, Q8_K, BLOCK256, llmm__dequant_row_q3_K, llmm__quantize_row_q3_K,                 \
      llmm__vec_dot_q3_K_q8_K)                                                                                   \
    X(Q4_K, 12, "q4_k", 256, 144, Q8_K, BLOCK256, llmm__dequant_row_q4_K, llmm__quantize_row_q4_K,                 \
      llmm__vec_dot_q4_K_q8_K)                                                                                   \
    X(Q5_K, 13, "q5_k", 256, 176, Q8_K, BLOCK256, llmm__dequant_row_q5_K, llmm__quantize_row_q5_K,                 \
      llmm__vec_dot_q5_K_q8_K)                                                                                   \
    X(Q6_K, 14, "q6_k", 256, 210, Q8_K, BLOCK256, llmm__dequant_row_q6_K, llmm__quantize_row_q6_K,                 \
      llmm__vec_dot_q6_K_q8_K)                                                                                   \
    X(Q8_K, 15, "q8_k", 256, 292, NONE, OPERAND, NULL, llmm__quantize_row_q8_K, NULL)                             \
    X(IQ2_XXS, 16, "iq2_xxs", 256, 66, NONE, NONE, NULL, NULL, NULL)                                             \
    X(IQ2_XS, 17, "iq2_xs", 256, 74, NONE, NONE, NULL, NULL, NULL)                                               \
    X(IQ3_XXS, 18, "iq3_xxs", 256, 98, NONE, NONE, NULL, NULL, NULL)                                             \
    X(IQ1_S, 19, "iq1_s", 256, 50, NONE, NONE, NULL, NULL, NULL)                                                 \
    X(IQ4_NL, 20, "iq4_nl", 32, 18, Q8_0, BLOCK32, llmm__dequant_row_iq4_nl, llmm__quantize_row_iq4_nl,            \
      llmm__vec_dot_iq4_nl_q8_0)                                                                                 \
    X(IQ3_S, 21, "iq3_s", 256, 110, NONE, NONE, NULL, NULL, NULL)                                                \
    X(IQ2_S, 22, "iq2_s", 256, 82, NONE, NONE, NULL, NULL, NULL)                                                 \
    X(IQ4_XS, 23, "iq4_xs", 256, 136, Q8_K, BLOCK256, llmm__dequant_row_iq4_xs, llmm__quantize_row_iq4_xs,         \
      llmm__vec_dot_iq4_xs_q8_K)                                                                                 \
    X(I8, 24, "i8", 1, 1, NONE, NONE, NULL, NULL, NULL)                                                          \
    X(I16, 25, "i16", 1, 2, NONE, NONE, NULL, NULL, NULL)                                                        \
    X(I32, 26, "i32", 1, 4, NONE, NONE, NULL, NULL, NULL)                                                        \
    X(I64, 27, "i64", 1, 8, NONE, NONE, NULL, NULL, NULL)                                                        \
    X(F64, 28, "f64", 1, 8, NONE, NONE, NULL, NULL, NULL)                                                        \
    X(IQ1_M, 29, "iq1_m", 256, 56, NONE, NONE, NULL, NULL, NULL)                                                 \
    X(BF16, 30, "bf16", 1, 2, BF16, FLOAT, dequant_bf16, from_float_bf16, llmm__vec_dot_bf16)                      \
    X(TQ1_0, 34, "tq1_0", 256, 54, NONE, NONE, NULL, NULL, NULL)                                                 \
    X(TQ2_0, 35, "tq2_0", 256, 66, NONE, NONE, NULL, NULL, NULL)                                                 \
    X(MXFP4, 39, "mxfp4", 32, 17, NONE, NONE, NULL, NULL, NULL)

/* The ids as stored in GGUF tensor infos (LLMM_TYPE_F32, ...); LLMM_TYPE_NONE: no type. */
#define LLMM_TYPE_ENUM_ROW(T, id, ...) LLMM_TYPE_##T = id,
enum llmm_type { LLMM_WEIGHT_TYPES(LLMM_TYPE_ENUM_ROW) LLMM_TYPE_COUNT = 40, LLMM_TYPE_NONE = LLMM_TYPE_COUNT };
#undef LLMM_TYPE_ENUM_ROW

/* Each row's block bytes as a constant (LLMM_TYPE_BYTES_Q4_0, ...): the block structs below
 * are checked against them, so a row and its struct cannot disagree. */
#define LLMM_TYPE_BYTES_ROW(T, id, name, block, bytes, ...) LLMM_TYPE_BYTES_##T = bytes,
enum llmm_type_bytes { LLMM_WEIGHT_TYPES(LLMM_TYPE_BYTES_ROW) };
#undef LLMM_TYPE_BYTES_ROW

/* The row's facts by id, for code that cannot read the trait table (the CUDA module links
 * nothing of the core); 0 (NONE for the operand) for an unknown id. */
#define LLMM_TYPE_CASE_BLOCK(T, id, name, block, ...) \
    case id: return block;
#define LLMM_TYPE_CASE_BYTES(T, id, name, block, bytes, ...) \
    case id: return bytes;
#define LLMM_TYPE_CASE_OPERAND(T, id, name, block, bytes, operand, ...) \
    case id: return LLMM_TYPE_##operand;
#define LLMM_TYPE_CASE_FAMILY(T, id, name, block, bytes, operand, family, ...) \
    case id: return LLMM_FAMILY_##family;
LLMM_BLOCKS_FN uint32_t llmm_type_block_size(uint32_t type) {
    switch (type) { LLMM_WEIGHT_TYPES(LLMM_TYPE_CASE_BLOCK) default: return 0; }
}
LLMM_BLOCKS_FN uint32_t llmm_type_block_bytes(uint32_t type) {
    switch (type) { LLMM_WEIGHT_TYPES(LLMM_TYPE_CASE_BYTES) default: return 0; }
}
LLMM_BLOCKS_FN uint32_t llmm_type_operand(uint32_t type) {
    switch (type) { LLMM_WEIGHT_TYPES(LLMM_TYPE_CASE_OPERAND) default: return LLMM_TYPE_NONE; }
}
LLMM_BLOCKS_FN uint32_t llmm_type_family(uint32_t type) {
    switch (type) { LLMM_WEIGHT_TYPES(LLMM_TYPE_CASE_FAMILY) default: return LLMM_FAMILY_NONE; }
}
#undef LLMM_TYPE_CASE_BLOCK
#undef LLMM_TYPE_CASE_BYTES
#undef LLMM_TYPE_CASE_OPERAND
#undef LLMM_TYPE_CASE_FAMILY


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
LLMM_STATIC_ASSERT(sizeof(block_q4_0) == LLMM_TYPE_BYTES_Q4_0, "block_q4_0 layout");

/* Q4_1: 32 weights, 5 bits each: w = d * q + m, q in 0..15. */
typedef struct {
    llmm_f16 d;
    llmm_f16 m;
    uint8_t qs[QK4_1 / 2];
} block_q4_1;
LLMM_STATIC_ASSERT(sizeof(block_q4_1) == LLMM_TYPE_BYTES_Q4_1, "block_q4_1 layout");

/* Q5_0: 32 weights, 5.5 bits each: w = d * (q - 16), q in 0..31. */
typedef struct {
    llmm_f16 d;
    uint8_t qh[4];
    uint8_t qs[QK5_0 / 2];
} block_q5_0;
LLMM_STATIC_ASSERT(sizeof(block_q5_0) == LLMM_TYPE_BYTES_Q5_0, "block_q5_0 layout");

/* Q5_1: 32 weights, 6 bits each: w = d * q + m, q in 0..31. */
typedef struct {
    llmm_f16 d;
    llmm_f16 m;
    uint8_t qh[4];
    uint8_t qs[QK5_1 / 2];
} block_q5_1;
LLMM_STATIC_ASSERT(sizeof(block_q5_1) == LLMM_TYPE_BYTES_Q5_1, "block_q5_1 layout");

/* Q8_0: 32 weights, 8.5 bits each: w = d * q. Also the activation format the reference
 * engine quantizes to before Q4_0/Q5_0/Q8_0 dot products. */
typedef struct {
    llmm_f16 d;
    int8_t qs[QK8_0];
} block_q8_0;
LLMM_STATIC_ASSERT(sizeof(block_q8_0) == LLMM_TYPE_BYTES_Q8_0, "block_q8_0 layout");

/* Q8_1: 32 activations, 9 bits each: x = d * q; s = d * sum(q) rounded to f16, so a dot with
 * an offset format (Q4_1, Q5_1) adds m * s instead of summing the activations again. */
typedef struct {
    llmm_f16 d;
    llmm_f16 s;
    int8_t qs[QK8_1];
} block_q8_1;
LLMM_STATIC_ASSERT(sizeof(block_q8_1) == LLMM_TYPE_BYTES_Q8_1, "block_q8_1 layout");

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
LLMM_STATIC_ASSERT(sizeof(block_q2_K) == LLMM_TYPE_BYTES_Q2_K, "block_q2_K layout");

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
LLMM_STATIC_ASSERT(sizeof(block_q3_K) == LLMM_TYPE_BYTES_Q3_K, "block_q3_K layout");

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
LLMM_STATIC_ASSERT(sizeof(block_q4_K) == LLMM_TYPE_BYTES_Q4_K, "block_q4_K layout");

/* Q5_K: as Q4_K with a 5th bit per weight in qh, 5.5 bits per weight, q in 0..31. */
typedef struct {
    llmm_f16 d;
    llmm_f16 dmin;
    uint8_t scales[K_SCALE_SIZE];
    uint8_t qh[QK_K / 8];
    uint8_t qs[QK_K / 2];
} block_q5_K;
LLMM_STATIC_ASSERT(sizeof(block_q5_K) == LLMM_TYPE_BYTES_Q5_K, "block_q5_K layout");

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
LLMM_STATIC_ASSERT(sizeof(block_q6_K) == LLMM_TYPE_BYTES_Q6_K, "block_q6_K layout");

/* Q8_K: 256 activations, 9.125 bits each: x = d * q with a float d; bsums[j] is the sum of q
 * over weights 16j..16j+15, so the K-quant dots subtract their mins without a second pass. */
typedef struct {
    float d;
    int8_t qs[QK_K];
    int16_t bsums[QK_K / 16];
} block_q8_K;
LLMM_STATIC_ASSERT(sizeof(block_q8_K) == LLMM_TYPE_BYTES_Q8_K, "block_q8_K layout");

/* Non-linear 4-bit formats: each nibble indexes llmm__iq4_values (a fixed codebook, denser
 * near zero, as the reference's kvalues_iq4nl), scaled by the block's d. */
#define QK4_NL 32

/* IQ4_NL: 32 weights, 4.5 bits each: w = d * llmm__iq4_values[q]; Q4_0's nibble order. */
typedef struct {
    llmm_f16 d;
    uint8_t qs[QK4_NL / 2];
} block_iq4_nl;
LLMM_STATIC_ASSERT(sizeof(block_iq4_nl) == LLMM_TYPE_BYTES_IQ4_NL, "block_iq4_nl layout");

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
LLMM_STATIC_ASSERT(sizeof(block_iq4_xs) == LLMM_TYPE_BYTES_IQ4_XS, "block_iq4_xs layout");

/* The IQ4 codebook, as an initializer: the C table (llmm__iq4_values, quant_iq4.c) and the
 * CUDA kernels' copy are written from it. */
#define LLMM_IQ4_VALUES {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113}

/* The 6-bit scale (0..63) of sub-block ib of the IQ4_XS super-block at blk; its weights are
 * d * (scale - 32) * value[code]. Bytes, not the struct: kernels call it on rows of a file. */
LLMM_BLOCKS_FN int llmm_iq4_xs_scale(const uint8_t *blk, int ib) {
    const unsigned scales_h = (unsigned)blk[offsetof(block_iq4_xs, scales_h)] |
                              (unsigned)blk[offsetof(block_iq4_xs, scales_h) + 1] << 8;
    const unsigned low = (unsigned)blk[offsetof(block_iq4_xs, scales_l) + ib / 2] >> 4 * (ib % 2) & 15u;
    return (int)(low | (scales_h >> 2 * ib & 3u) << 4);
}


#endif
