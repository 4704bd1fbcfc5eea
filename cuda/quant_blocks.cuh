/* The GGUF block formats' per-weight math, shared by the CUDA kernels (nvcc) and their
 * emulated build (the host C++ compiler, tests/simt/simt.h): weight i of one block as the
 * CPU's dequantization gives it (lib/format/quant.c, quant_legacy.c, quant_k.c, quant_iq4.c),
 * bit for bit, so a GPU matmul over dequantized weights can be held to the CPU's results.
 *
 * Bit for bit needs the same roundings in the same order. Every product here is exact in float
 * (an f16 scale times a small integer), so a fused multiply-add would round as the CPU does; the
 * products and sums still go through qb_mul/qb_add/qb_sub (__fmul_rn/__fadd_rn/__fsub_rn on the
 * device, which nvcc never contracts; plain operators on the host, compiled without
 * contraction) so that the order stays the CPU's whatever a later format's scales are.
 *
 * Blocks are read byte by byte (little-endian): GGUF aligns a tensor's data, not its blocks'
 * fields (a Q4_0 block is 18 bytes), so no wider load is assumed here; the kernels that load
 * wide do so on whole blocks of their own layout.
 *
 * What a type is (id, block size and bytes, operand, kernel family) and the layouts are
 * format/blocks.h's rows and structs, the CPU's too; this header adds the math only. Generic
 * code reads the rows with llmm_type_block_size() and the other lookups there, kernels
 * specialized on a type T with qb_type<T> below. */
#ifndef LLMM_CUDA_QUANT_BLOCKS_CUH
#define LLMM_CUDA_QUANT_BLOCKS_CUH

#include <stdint.h>

#include "format/blocks.h"

#if defined(__CUDACC__)
#define QB_FN __host__ __device__ __forceinline__
#else
#define QB_FN static inline
#endif

#if defined(__cplusplus)
/* Type T's row of LLMM_WEIGHT_TYPES as constants, for kernels specialized per type (`if
 * constexpr` on the family, a block's bytes as a compile-time stride): the lookups of
 * format/blocks.h are functions, not constant expressions. */
template <uint32_t T> struct qb_type;
#define QB_TYPE_ROW(T, id, name, block, bytes, operand, family, ...)         \
    template <> struct qb_type<id> {                                         \
        static constexpr uint32_t block_size = block, block_bytes = bytes;   \
        static constexpr uint32_t operand_type = LLMM_TYPE_##operand;        \
        static constexpr uint32_t kernel_family = LLMM_FAMILY_##family;      \
    };
LLMM_WEIGHT_TYPES(QB_TYPE_ROW)
#undef QB_TYPE_ROW
#endif

QB_FN float qb_mul(float a, float b) {
#if defined(__CUDA_ARCH__)
    return __fmul_rn(a, b);
#else
    return a * b;
#endif
}

QB_FN float qb_add(float a, float b) {
#if defined(__CUDA_ARCH__)
    return __fadd_rn(a, b);
#else
    return a + b;
#endif
}

QB_FN float qb_sub(float a, float b) {
#if defined(__CUDA_ARCH__)
    return __fsub_rn(a, b);
#else
    return a - b;
#endif
}

QB_FN float qb_bits_to_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
    return __uint_as_float(u);
#else
    union {
        uint32_t u;
        float f;
    } v = {u};
    return v.f;
#endif
}

/* IEEE half to float, exact for every pattern (subnormals normalized, inf and NaN kept): the
 * same value on both sides without depending on either compiler's half support. */
QB_FN float qb_half_to_float(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 31u;
    uint32_t mant = h & 0x3ffu;
    if (exp == 31) return qb_bits_to_float(sign | 0x7f800000u | mant << 13);
    if (exp != 0) return qb_bits_to_float(sign | (exp + 112) << 23 | mant << 13);
    if (mant == 0) return qb_bits_to_float(sign);
    uint32_t e = 113; /* 2^-14's biased float exponent, less one per normalizing shift */
    while (!(mant & 0x400u)) {
        mant <<= 1;
        e--;
    }
    return qb_bits_to_float(sign | e << 23 | (mant & 0x3ffu) << 13);
}

QB_FN float qb_bf16_to_float(uint16_t h) { return qb_bits_to_float((uint32_t)h << 16); }

QB_FN uint16_t qb_u16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
QB_FN float qb_f16_at(const uint8_t *p) { return qb_half_to_float(qb_u16(p)); }

/* The IQ4 codebook (format/blocks.h LLMM_IQ4_VALUES), as a function so that it needs no
 * device constant memory of its own. */
QB_FN int qb_iq4_value(int code) {
    const int8_t values[16] = LLMM_IQ4_VALUES;
    return values[code & 15];
}

/* Nibble of weight j (0..31) of a legacy block's 16 quant bytes: j < 16 low, else high. */
QB_FN int qb_nibble32(const uint8_t *qs, int j) { return j < 16 ? qs[j] & 15 : qs[j - 16] >> 4; }

/* ---------------------------------------------------------------- legacy blocks of 32 */

/* Q4_0 (18 bytes): d, qs[16]; w = d * (q - 8) */
QB_FN float qb_q4_0(const uint8_t *b, int j) { return qb_mul(qb_f16_at(b), (float)(qb_nibble32(b + 2, j) - 8)); }

/* Q4_1 (20 bytes): d, m, qs[16]; w = d * q + m */
QB_FN float qb_q4_1(const uint8_t *b, int j) {
    return qb_add(qb_mul(qb_f16_at(b), (float)qb_nibble32(b + 4, j)), qb_f16_at(b + 2));
}

/* The 5th bit of weight j: bit j of qh read as a little-endian u32. */
QB_FN int qb_high_bit32(const uint8_t *qh, int j) { return (qh[j / 8] >> (j % 8)) & 1; }

/* Q5_0 (22 bytes): d, qh[4], qs[16]; w = d * (q - 16) */
QB_FN float qb_q5_0(const uint8_t *b, int j) {
    const int q = qb_nibble32(b + 6, j) | qb_high_bit32(b + 2, j) << 4;
    return qb_mul(qb_f16_at(b), (float)(q - 16));
}

/* Q5_1 (24 bytes): d, m, qh[4], qs[16]; w = d * q + m */
QB_FN float qb_q5_1(const uint8_t *b, int j) {
    const int q = qb_nibble32(b + 8, j) | qb_high_bit32(b + 4, j) << 4;
    return qb_add(qb_mul(qb_f16_at(b), (float)q), qb_f16_at(b + 2));
}

/* Q8_0 (34 bytes): d, qs[32]; w = d * q */
QB_FN float qb_q8_0(const uint8_t *b, int j) { return qb_mul(qb_f16_at(b), (float)(int8_t)b[2 + j]); }

/* IQ4_NL (18 bytes): d, qs[16] in Q4_0's nibble order; w = d * value[q] */
QB_FN float qb_iq4_nl(const uint8_t *b, int j) {
    return qb_mul(qb_f16_at(b), (float)qb_iq4_value(qb_nibble32(b + 2, j)));
}

/* ---------------------------------------------------------------- K-quants, 256 per block */

/* The CPU's K-quant weight: d * scale * q - dmin * min, products left to right (quant_k.c). */
QB_FN float qb_k_weight(float d, int scale, int q, float dmin, int min) {
    return qb_sub(qb_mul(qb_mul(d, (float)scale), (float)q), qb_mul(dmin, (float)min));
}

QB_FN int qb_2bit(const uint8_t *qs, int i) { return (qs[32 * (i / 128) + i % 32] >> (2 * (i % 128 / 32))) & 3; }
QB_FN int qb_k_nibble(const uint8_t *qs, int i) { return (qs[32 * (i / 64) + i % 32] >> (i % 64 < 32 ? 0 : 4)) & 15; }
QB_FN int qb_k_high_bit(const uint8_t *h, int i) { return (h[i % 32] >> (i / 32)) & 1; }

/* Q2_K (84 bytes): scales[16], qs[64], d, dmin */
QB_FN float qb_q2_k(const uint8_t *b, int i) {
    const uint8_t sc = b[i / 16];
    return qb_k_weight(qb_f16_at(b + 80), sc & 15, qb_2bit(b + 16, i), qb_f16_at(b + 82), sc >> 4);
}

/* Q3_K (110 bytes): hmask[32], qs[64], scales[12], d; 6-bit scales less 32 */
QB_FN float qb_q3_k(const uint8_t *b, int i) {
    const uint8_t *sc = b + 96;
    const int j = i / 16;
    const int lo = j < 8 ? sc[j] & 15 : sc[j - 8] >> 4, hi = (sc[8 + j % 4] >> (2 * (j / 4))) & 3;
    const int q = qb_2bit(b + 32, i) + 4 * qb_k_high_bit(b, i) - 4;
    return qb_k_weight(qb_f16_at(b + 108), (lo | hi << 4) - 32, q, 0.0f, 0);
}

/* The 6-bit scale and min of Q4_K/Q5_K sub-block j (of 8). */
QB_FN void qb_k4_scale_min(const uint8_t *sc, int j, int *scale, int *min) {
    if (j < 4) {
        *scale = sc[j] & 63;
        *min = sc[j + 4] & 63;
    } else {
        *scale = (sc[j + 4] & 15) | (sc[j - 4] >> 6) << 4;
        *min = (sc[j + 4] >> 4) | (sc[j] >> 6) << 4;
    }
}

/* Q4_K (144 bytes): d, dmin, scales[12], qs[128] */
QB_FN float qb_q4_k(const uint8_t *b, int i) {
    int scale, min;
    qb_k4_scale_min(b + 4, i / 32, &scale, &min);
    return qb_k_weight(qb_f16_at(b), scale, qb_k_nibble(b + 16, i), qb_f16_at(b + 2), min);
}

/* Q5_K (176 bytes): d, dmin, scales[12], qh[32], qs[128] */
QB_FN float qb_q5_k(const uint8_t *b, int i) {
    int scale, min;
    qb_k4_scale_min(b + 4, i / 32, &scale, &min);
    const int q = qb_k_nibble(b + 48, i) + 16 * qb_k_high_bit(b + 16, i);
    return qb_k_weight(qb_f16_at(b), scale, q, qb_f16_at(b + 2), min);
}

/* Q6_K (210 bytes): ql[128], qh[64], scales[16] (int8), d */
QB_FN float qb_q6_k(const uint8_t *b, int i) {
    const int half = i / 128, r = i % 128;
    const int lo = (b[64 * half + r % 64] >> (r < 64 ? 0 : 4)) & 15;
    const int hi = (b[128 + 32 * half + r % 32] >> (2 * (r / 32))) & 3;
    return qb_k_weight(qb_f16_at(b + 208), (int8_t)b[192 + i / 16], (lo | hi << 4) - 32, 0.0f, 0);
}

/* IQ4_XS (136 bytes): d, scales_h, scales_l[4], qs[128]; 8 sub-blocks of 32 in Q4_0's nibble
 * order, w = (d * (ls - 32)) * value[q] */
QB_FN float qb_iq4_xs(const uint8_t *b, int i) {
    const int ib = i / 32, j = i % 32;
    const float dl = qb_mul(qb_f16_at(b), (float)(llmm_iq4_xs_scale(b, ib) - 32));
    return qb_mul(dl, (float)qb_iq4_value(qb_nibble32(b + 8 + 16 * ib, j)));
}

/* ---------------------------------------------------------------- any type */

/* Weight i (0 .. block size - 1) of the block at b: each type's function, the one place here
 * that maps ids to math. A kernel specialized per type calls the type's function directly;
 * this switch serves generic code and the tests. 0 for a type without math here. */
QB_FN float qb_block_value(uint32_t type, const uint8_t *b, int i) {
    switch (type) {
    case LLMM_TYPE_F32: return qb_bits_to_float((uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 |
                                                (uint32_t)b[3] << 24);
    case LLMM_TYPE_F16: return qb_f16_at(b);
    case LLMM_TYPE_BF16: return qb_bf16_to_float(qb_u16(b));
    case LLMM_TYPE_Q4_0: return qb_q4_0(b, i);
    case LLMM_TYPE_Q4_1: return qb_q4_1(b, i);
    case LLMM_TYPE_Q5_0: return qb_q5_0(b, i);
    case LLMM_TYPE_Q5_1: return qb_q5_1(b, i);
    case LLMM_TYPE_Q8_0: return qb_q8_0(b, i);
    case LLMM_TYPE_IQ4_NL: return qb_iq4_nl(b, i);
    case LLMM_TYPE_Q2_K: return qb_q2_k(b, i);
    case LLMM_TYPE_Q3_K: return qb_q3_k(b, i);
    case LLMM_TYPE_Q4_K: return qb_q4_k(b, i);
    case LLMM_TYPE_Q5_K: return qb_q5_k(b, i);
    case LLMM_TYPE_Q6_K: return qb_q6_k(b, i);
    case LLMM_TYPE_IQ4_XS: return qb_iq4_xs(b, i);
    }
    return 0.0f;
}

#endif
