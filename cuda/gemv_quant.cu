/* Quantized GEMV (llmm__cu_matmul) and embedding lookup (llmm__cu_embed) for the 15 weight types the CPU
 * backend multiplies by.
 *
 * llmm__cu_matmul follows the CPU backend's numerics (the scalar dots its row in lib/format/blocks.h names) in two launches:
 * 1. The activations are quantized to the weight type's operand (F16, BF16, Q8_0, Q8_1 or
 *    Q8_K; F32 weights take the float rows as they are) into the caller's scratch, byte for
 *    byte what the CPU's from_float writes: the same float operations in the same order, and
 *    block maxima by warp reductions, which give the same value in any order.
 * 2. One warp per output row (two for the 32-weight blocks, so that each activation word read
 *    from shared memory serves two), every activation row of a pass (up to GQ_MAX_ROWS) against
 *    the same weight bytes, so decode steps read each weight once. The warp stages a chunk of its
 *    weight rows into shared memory (and the thread block's warps together the chunk of each
 *    activation row) with 16-byte loads, lanes on consecutive addresses, then unpacks each
 *    block to int8 words and takes the integer dot with __dp4a: a lane per 32-weight block, a
 *    half-warp per 256-weight block. A block's contribution is the CPU's formula (lib/quant*.c
 *    llmm_vec_dot_*: an exact integer dot times the scales, rounded in the same order); only
 *    the sum over blocks runs in another order (per lane, then a shuffle tree), which the tests
 *    bound.
 * Prompts (more rows) loop over row tiles of the same kernel: weights are read once per tile,
 * which cuBLASLt over dequantized tiles (gemm.cu, part 2) will replace.
 *
 * GGUF aligns a tensor, not its blocks: an 18-byte Q4_0 block is only 2-byte aligned in a row.
 * The operand is ours to lay out: the GEMV pads Q8_0 blocks to 36 bytes and Q8_K ones to 304
 * (quantize_operand), so that lanes read the staged activations without bank conflicts.
 * Staging copies a chunk to the same offset within 16 bytes in shared memory in whole aligned
 * 16-byte units, the chunk's unaligned ends with the unit around each, whatever the block size;
 * the device copies are per-tensor allocations (256-byte aligned, sizes rounded up to 16 bytes),
 * which llmm__cu_matmul checks to 4 bytes (16 for the operand's scratch). */
#include <math.h>

#include "portable.h"

#include "gemv_quant.h"
#include "kernels.h"
#include "quant_blocks.cuh"

#define GQ_WARPS 4    /* warps per thread block */
#define GQ_OUTS_PER_WARP 2 /* weight rows (outputs) a warp of gemv_block_kernel takes (32-weight blocks) */
#define GQ_MAX_ROWS 8 /* activation rows per pass over the weights: the decode batch sizes */
#define GQ_FULL_MASK 0xffffffffu

/* The row loops index acc[] by the loop counter: unrolled, acc stays in registers. The host
 * compiler of the emulated build does not know the pragma. */
#if SIMT_EMULATED
#define GQ_UNROLL
#else
#define GQ_UNROLL _Pragma("unroll")
#endif

/* ---------------------------------------------------------------- bit-exact scalar helpers */

/* lib/format/quant.c llmm__f32_to_f16, operation for operation: CUDA's __float2half differs on NaN. */
__device__ __forceinline__ uint16_t gq_f32_to_f16(float f) {
    const uint32_t x = __float_as_uint(f);
    const uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t abs = x & 0x7fffffffu;
    if (abs >= 0x7f800000u) return (uint16_t)(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0));
    if (abs >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);
    if (abs < 0x38800000u) {
        const float v = qb_add(__uint_as_float(abs), 0.5f);
        return (uint16_t)(sign | (__float_as_uint(v) - 0x3f000000u));
    }
    const uint32_t mant_odd = (abs >> 13) & 1u;
    abs += 0xc8000fffu + mant_odd;
    return (uint16_t)(sign | (abs >> 13));
}

/* lib/format/quant.h llmm_bf16_round_bits: nearest even, NaN kept quiet. */
__device__ __forceinline__ uint16_t gq_f32_to_bf16(float f) {
    const uint32_t u = __float_as_uint(f);
    const int nan = (int32_t)(u & 0x7fffffffu) > (int32_t)0x7f800000;
    return (uint16_t)((nan ? (u | 0x00400000u) & 0xffff0000u : (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u) >> 16);
}

/* lib/format/quant.h llmm_round_clamp: rintf rounds to nearest even as nearbyintf does. */
__device__ __forceinline__ int gq_round_clamp(float v, int lo, int hi) {
    if (!(v > (float)lo)) return lo;
    if (v > (float)hi) return hi;
    return (int)rintf(v);
}

/* Operand blocks sit at 2-byte (Q8_0, Q8_1) or 4-byte (Q8_K) offsets of the scratch; byte
 * stores and loads keep that from mattering. */
__device__ __forceinline__ void gq_store_u16(uint8_t *p, uint16_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

__device__ __forceinline__ void gq_store_f32(uint8_t *p, float f) {
    const uint32_t u = __float_as_uint(f);
    for (int k = 0; k < 4; k++) p[k] = (uint8_t)(u >> 8 * k);
}

__device__ __forceinline__ int gq_warp_sum(int v) {
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(GQ_FULL_MASK, v, offset);
    return v;
}

/* ---------------------------------------------------------------- 1. the operand */

/* Q8_0 and Q8_1 (lib/format/quant.c llmm__quantize_row_q8_0, quant_legacy.c llmm__quantize_row_q8_1):
 * one warp per 32-value block, lane j quantizes value j. The rows are back to back and ne0 is
 * a multiple of 32, so block b of the whole batch is x + 32 b. PADDED writes Q8_0 in Q8_1's
 * 36-byte layout with a zero sum: the GEMV's operand (GQ_PADDED_Q8_0_BYTES). */
template <bool WITH_SUM, bool PADDED>
__global__ void quantize_q8_32_kernel(const float *x, uint8_t *dst) {
    const size_t b = blockIdx.x;
    const int j = threadIdx.x;
    const float v = x[32 * b + j];
    float amax = fabsf(v);
    for (int offset = 16; offset > 0; offset /= 2) amax = fmaxf(amax, __shfl_xor_sync(GQ_FULL_MASK, amax, offset));
    amax = fmaxf(0.0f, amax); /* the CPU starts from 0, so NaNs alone give 0 there */
    const float d = amax / 127.f;
    const float id = amax != 0.f ? 127.f / amax : 0.f;
    const int q = gq_round_clamp(qb_mul(v, id), -127, 127);
    constexpr bool wide = WITH_SUM || PADDED;
    uint8_t *y = dst + (wide ? sizeof(block_q8_1) : sizeof(block_q8_0)) * b;
    y[(wide ? 4 : 2) + j] = (uint8_t)(int8_t)q;
    const int sum = WITH_SUM ? gq_warp_sum(q) : 0;
    if (j == 0) {
        gq_store_u16(y, gq_f32_to_f16(d));
        if (WITH_SUM) gq_store_u16(y + 2, gq_f32_to_f16(qb_mul((float)sum, d)));
        else if (PADDED) gq_store_u16(y + 2, 0);
    }
}

/* The GEMV's Q8_K operand (PADDED): the scale, 12 zero bytes, the quants at byte 16 and the bsums
 * after them, 304 bytes, so that a lane's 16 quants are one aligned 16-byte shared load. */
#define GQ_PADDED_Q8_K_BYTES 304
#define GQ_PADDED_Q8_K_QS 16

/* Q8_K (lib/format/quant_k.c llmm__quantize_row_q8_K): one warp per 256-value block, lane l takes
 * values 8l..8l+7, so lane pairs make up the 16-value bsums. The scale comes from the signed
 * value of largest magnitude, the first such in order on ties (llmm_signed_absmax), hence the
 * index carried through the reduction. */
template <bool PADDED>
__global__ void quantize_q8_k_kernel(const float *x, uint8_t *dst) {
    const size_t b = blockIdx.x;
    const int lane = threadIdx.x;
    const float *xs = x + (size_t)QK_K * b + 8 * lane;
    float v[8], amax = 0.f, max = 0.f;
    int first = QK_K; /* index of max; past the end when nothing beats 0 */
    for (int k = 0; k < 8; k++) {
        v[k] = xs[k];
        if (fabsf(v[k]) > amax) {
            amax = fabsf(v[k]);
            max = v[k];
            first = 8 * lane + k;
        }
    }
    for (int offset = 16; offset > 0; offset /= 2) {
        const float o_amax = __shfl_xor_sync(GQ_FULL_MASK, amax, offset);
        const float o_max = __shfl_xor_sync(GQ_FULL_MASK, max, offset);
        const int o_first = __shfl_xor_sync(GQ_FULL_MASK, first, offset);
        if (o_amax > amax || (o_amax == amax && o_first < first)) {
            amax = o_amax;
            max = o_max;
            first = o_first;
        }
    }
    constexpr size_t qs = PADDED ? GQ_PADDED_Q8_K_QS : 4;
    uint8_t *y = dst + (PADDED ? GQ_PADDED_Q8_K_BYTES : sizeof(block_q8_K)) * b;
    int q[8] = {0}, bsum = 0;
    const float iscale = amax != 0.f ? -127.f / max : 0.f;
    if (amax != 0.f)
        for (int k = 0; k < 8; k++) {
            q[k] = gq_round_clamp(qb_mul(iscale, v[k]), -128, 127);
            bsum += q[k];
        }
    for (int k = 0; k < 8; k++) y[qs + 8 * lane + k] = (uint8_t)(int8_t)q[k];
    bsum += __shfl_xor_sync(GQ_FULL_MASK, bsum, 1);
    if (lane % 2 == 0) gq_store_u16(y + qs + QK_K + lane, (uint16_t)(int16_t)bsum);
    if (lane == 0) gq_store_f32(y, amax != 0.f ? 1 / iscale : 0.f);
    if (PADDED && lane >= 4 && lane < GQ_PADDED_Q8_K_QS) y[lane] = 0;
}

/* F16 and BF16 operands: one value per thread. */
template <bool BF16>
__global__ void quantize_half_kernel(const float *x, uint16_t *dst, size_t n) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = BF16 ? gq_f32_to_bf16(x[i]) : gq_f32_to_f16(x[i]);
}

/* The operand types the kernels above write. */
static bool has_quantizer(uint32_t type) {
    return type == LLMM_TYPE_F16 || type == LLMM_TYPE_BF16 || type == LLMM_TYPE_Q8_0 || type == LLMM_TYPE_Q8_1 ||
           type == LLMM_TYPE_Q8_K;
}

/* The operand as the GEMV stages it: Q8_0 blocks padded to 36 bytes (scale, 2 zero bytes, 32
 * quants), so that the quants are 4-byte aligned and lanes' blocks lie 9 words apart in shared
 * memory, an odd stride: one lane per bank on each word load (at 34 bytes, 8.5 words, pairs of
 * lanes met in a bank on every load: 2 wavefronts). The integer dot reads the same values. */
#define GQ_PADDED_Q8_0_BYTES 36

static size_t gemv_operand_block_bytes(uint32_t operand) {
    if (operand == LLMM_TYPE_Q8_0) return GQ_PADDED_Q8_0_BYTES;
    if (operand == LLMM_TYPE_Q8_K) return GQ_PADDED_Q8_K_BYTES;
    return llmm_type_block_bytes(operand);
}

/* Bytes of a row of ne0 values of the GEMV's operand (ne0 a multiple of its block size). */
static size_t gemv_operand_row_bytes(uint32_t operand, size_t ne0) {
    return ne0 / llmm_type_block_size(operand) * gemv_operand_block_bytes(operand);
}

/* padded: Q8_0 and Q8_K in the GEMV's layouts, else every type byte for byte the CPU's. */
static int quantize_operand(cudaStream_t stream, const float *x, uint32_t operand_type, size_t ne0, size_t n_rows,
                            void *dst, bool padded) {
    if (!has_quantizer(operand_type)) return cudaErrorInvalidValue;
    const size_t qk = llmm_type_block_size(operand_type), n = ne0 * n_rows;
    if (ne0 % qk != 0) return cudaErrorInvalidValue;
    if (n == 0) return 0;
    uint8_t *y = (uint8_t *)dst;
    const unsigned blocks = (unsigned)(n / qk);
    if (operand_type == LLMM_TYPE_Q8_0) {
        auto *k = padded ? &quantize_q8_32_kernel<false, true> : &quantize_q8_32_kernel<false, false>;
        SIMT_LAUNCH(k, blocks, 32, 0, stream, x, y);
    } else if (operand_type == LLMM_TYPE_Q8_1) {
        auto *k = &quantize_q8_32_kernel<true, false>;
        SIMT_LAUNCH(k, blocks, 32, 0, stream, x, y);
    } else if (operand_type == LLMM_TYPE_Q8_K) {
        auto *k = padded ? &quantize_q8_k_kernel<true> : &quantize_q8_k_kernel<false>;
        SIMT_LAUNCH(k, blocks, 32, 0, stream, x, y);
    } else {
        auto *k = operand_type == LLMM_TYPE_BF16 ? &quantize_half_kernel<true> : &quantize_half_kernel<false>;
        SIMT_LAUNCH(k, (unsigned)((n + 255) / 256), 256, 0, stream, x, (uint16_t *)dst, n);
    }
    return (int)cudaGetLastError();
}

extern "C" int llmm__cu_quantize_operand(cudaStream_t stream, const float *x, uint32_t operand_type, size_t ne0,
                                   size_t n_rows, void *dst) {
    return quantize_operand(stream, x, operand_type, ne0, n_rows, dst, false);
}

/* ---------------------------------------------------------------- 2. the dot */

/* Memory layout of the dot: a warp stages a chunk of its weight row, and the warps of
 * a thread block the same chunk of each activation row, into shared memory with wide loads on
 * consecutive addresses (gq_stage), then every lane unpacks its own weights from there into
 * 32-bit words of four int8 values and multiplies them by the activations' with __dp4a. Blocks
 * of 18, 22, 34, 110 or 210 bytes are only 2-byte aligned in a row, so reading them in place
 * would take byte or 16-bit loads at a block's stride (a warp request touching five to nine
 * 32-byte sectors for 32 useful bytes); staged, a warp request covers consecutive bytes, 16 a
 * lane. Which lane takes which block is the layout the kernel had before, so every lane sums
 * its blocks in the same order and the results are the same bits. */

/* Blocks per chunk: 32 of the 32-weight types (a lane per block), 4 of the 256-weight ones (a
 * half-warp per block, two passes). */
template <uint32_t T> struct gq_chunk {
    static constexpr uint32_t blocks = qb_type<T>::kernel_family == LLMM_FAMILY_BLOCK32 ? 32 : 4;
    /* an operand block as the GEMV lays it out (gemv_operand_block_bytes) */
    static constexpr uint32_t x_block_bytes = qb_type<T>::operand_type == LLMM_TYPE_Q8_0   ? GQ_PADDED_Q8_0_BYTES
                                              : qb_type<T>::operand_type == LLMM_TYPE_Q8_K ? GQ_PADDED_Q8_K_BYTES
                                                                                          : qb_type<qb_type<T>::operand_type>::block_bytes;
    /* the chunk in whole 16-byte units from the one that holds its first byte (gq_stage), and
     * past its end the word that gq_words may read without using it: 16 more bytes at most */
    static constexpr uint32_t w_bytes = (blocks * qb_type<T>::block_bytes + 16 + 15) / 16 * 16;
    static constexpr uint32_t x_bytes = (blocks * x_block_bytes + 16 + 15) / 16 * 16;
};

/* Outputs (weight rows) a warp of gemv_block_kernel takes: GQ_OUTS_PER_WARP for the 32-weight
 * blocks, one for the 256-weight ones, whose two rows' scales, mins and sums took more than 64
 * registers (ptxas -v: 24 to 80 bytes of spills for Q2_K..IQ4_XS on sm_87 and sm_90). */
template <uint32_t T> __host__ __device__ constexpr int gq_outs_per_warp() {
    return qb_type<T>::kernel_family == LLMM_FAMILY_BLOCK32 ? GQ_OUTS_PER_WARP : 1;
}

/* Shared memory as a V at p, aligned to V (the emulated build copies, as C++ aliasing rules
 * want, and checks the alignment the device requires). */
template <class V> __device__ __forceinline__ V gq_shared_load(const uint8_t *p) {
#if SIMT_EMULATED
    return simt::detail::aligned_load((const V *)p, "shared load");
#else
    return *(const V *)p;
#endif
}

template <class V> __device__ __forceinline__ void gq_shared_store(uint8_t *p, V v) {
#if SIMT_EMULATED
    simt::detail::aligned_store((V *)p, v, "shared store");
#else
    *(V *)p = v;
#endif
}

/* N consecutive words from p: with 4-byte alignment (A) loads of them, else N + 1 aligned words
 * and each of ours from two of them (p is 2-byte aligned: at offset 0 or 2 of its word), half the
 * loads of 16-bit halves. The last aligned word may lie past the bytes wanted, inside the staging
 * buffer (its 16 spare bytes), and is then not used. */
template <int A, int N> __device__ __forceinline__ void gq_words(const uint8_t *p, uint32_t w[N]) {
    if constexpr (A % 4 == 0) {
        for (int k = 0; k < N; k++) w[k] = gq_shared_load<uint32_t>(p + 4 * k);
    } else {
        const uint8_t *base = p - ((uintptr_t)p & 3); /* arithmetic on p: the compiler keeps it in shared space */
        const uint32_t select = (uintptr_t)p & 2 ? 0x5432u : 0x3210u;
        uint32_t prev = gq_shared_load<uint32_t>(base);
        for (int k = 0; k < N; k++) {
            const uint32_t next = gq_shared_load<uint32_t>(base + 4 * k + 4);
            w[k] = __byte_perm(prev, next, select);
            prev = next;
        }
    }
}

__device__ __forceinline__ float gq_shared_f16(const uint8_t *p) { return qb_half_to_float(gq_shared_load<uint16_t>(p)); }

/* Copies n bytes of global memory at src into the warp's shared buffer dst (16-byte aligned) at
 * offset src % 16, so that both sides have the same alignment: lane i copies the i-th aligned
 * 16-byte unit of those that hold the n bytes, one 16-byte load each, the unaligned ends
 * included (a chunk of 2-byte aligned blocks rarely starts or ends on 16 bytes; loading just
 * the end bytes took one 2-byte load per lane and 2 bytes, 30 % of the load instructions for
 * 2 % of the bytes). The bytes of the first and last unit outside [src, src + n) are copied
 * and never read. Those units stay inside the allocation that holds src: device memory is
 * allocated at 256-byte aligned addresses in sizes rounded up to 16 bytes (cu_weights_get,
 * llmm__cu_matmul_scratch_bytes), so the unit of any byte of it is all in it. dst needs room for
 * src % 16 + n bytes rounded up to 16 (gq_chunk's sizes). Returns where the bytes begin in dst. The caller
 * synchronizes before reading them. */
__device__ __forceinline__ const uint8_t *gq_stage(uint8_t *dst, const uint8_t *src, size_t n, int lane) {
    const uintptr_t s = (uintptr_t)src, first = s & ~(uintptr_t)15, last = (s + n + 15) & ~(uintptr_t)15;
    const uint4 *units = (const uint4 *)first;
    const size_t n_units = (last - first) / 16;
    for (size_t i = lane; i < n_units; i += 32) gq_shared_store<uint4>(dst + 16 * i, __ldg(units + i));
    return dst + (s & 15);
}

/* Four bytes of values 0..2k-1 less k, as int8s: v + (128 - k) does not carry out of a byte, and
 * flipping the top bit takes 128 back off in two's complement. */
template <uint32_t K> __device__ __forceinline__ uint32_t gq_less(uint32_t v) {
    return (v + (128u - K) * 0x01010101u) ^ 0x80808080u;
}

/* Bits 0..3 of h as bit 4 of bytes 0..3 (the products do not overlap). */
__device__ __forceinline__ uint32_t gq_spread_bit4(uint32_t h) { return ((h & 15u) * 0x00204081u & 0x01010101u) << 4; }

/* The IQ4 codebook for four codes (bytes of 0..15) at once, from registers: __byte_perm picks
 * byte code & 7 of the low or high half of the table, bit 3 of the code chooses the half. No
 * table in memory, so no local stack frame. */
__device__ __forceinline__ uint32_t gq_iq4_values(uint32_t codes) {
    constexpr int8_t v[16] = LLMM_IQ4_VALUES;
#define GQ_PACK4(i) ((uint32_t)(uint8_t)v[i] | (uint32_t)(uint8_t)v[i + 1] << 8 | (uint32_t)(uint8_t)v[i + 2] << 16 | \
                     (uint32_t)(uint8_t)v[i + 3] << 24)
    constexpr uint32_t t0 = GQ_PACK4(0), t1 = GQ_PACK4(4), t2 = GQ_PACK4(8), t3 = GQ_PACK4(12);
#undef GQ_PACK4
    const uint32_t low3 = codes & 0x07070707u;
    const uint32_t sel = ((low3 | low3 >> 4) & 0xffu) | ((low3 >> 16 | low3 >> 20) & 0xffu) << 8;
    const uint32_t high = ((codes & 0x08080808u) >> 3) * 0xffu;
    return (__byte_perm(t0, t1, sel) & ~high) | (__byte_perm(t2, t3, sel) & high);
}

/* A 32-weight block at b (shared memory, alignment A) as 8 words of four int8 weights, word k
 * weights 4k..4k+3 (w_j = d * q_j, + m for the offset types Q4_1 and Q5_1: those whose operand,
 * Q8_1, carries each block's sum for the m term), quant_legacy.c's unpacking. */
template <uint32_t T, int A>
__device__ __forceinline__ void unpack_block32(const uint8_t *b, uint32_t q[8], float *d, float *m) {
    *d = gq_shared_f16(b);
    *m = 0.f;
    if constexpr (qb_type<T>::operand_type == LLMM_TYPE_Q8_1) *m = gq_shared_f16(b + 2);
    if constexpr (T == LLMM_TYPE_Q8_0) {
        gq_words<A, 8>(b + 2, q);
        return;
    }
    /* the quants' offset, and where the 5th bits are (Q5_0, Q5_1) */
    constexpr int qs = T == LLMM_TYPE_Q4_1 ? 4 : T == LLMM_TYPE_Q5_0 ? 6 : T == LLMM_TYPE_Q5_1 ? 8 : 2;
    constexpr bool five = T == LLMM_TYPE_Q5_0 || T == LLMM_TYPE_Q5_1;
    uint32_t qh = 0;
    if constexpr (five) gq_words<A, 1>(b + qs - 4, &qh);
    uint32_t s[4];
    gq_words<A, 4>(b + qs, s);
    for (int k = 0; k < 4; k++) {
        uint32_t lo = s[k] & 0x0f0f0f0fu, hi = s[k] >> 4 & 0x0f0f0f0fu;
        if constexpr (five) {
            lo |= gq_spread_bit4(qh >> 4 * k);
            hi |= gq_spread_bit4(qh >> (16 + 4 * k));
        }
        if constexpr (T == LLMM_TYPE_Q4_0) lo = gq_less<8>(lo), hi = gq_less<8>(hi);
        else if constexpr (T == LLMM_TYPE_Q5_0) lo = gq_less<16>(lo), hi = gq_less<16>(hi);
        else if constexpr (T == LLMM_TYPE_IQ4_NL) lo = gq_iq4_values(lo), hi = gq_iq4_values(hi);
        q[k] = lo;
        q[4 + k] = hi;
    }
}

/* Weights 16c..16c+15 of a 256-weight block at b (shared memory, alignment A) as 4 words of four
 * int8 weights, with their sub-block's integer scale and min and the block's d and dmin
 * (quant_k.c decode_*, quant_blocks.cuh's per-weight functions: the byte and shift of weight
 * 16c + k depend on c alone, so the 16 are 16 consecutive bytes under one shift; IQ4_XS: its
 * 6-bit scale less 32 as the scale, no min). */
template <uint32_t T, int A>
__device__ __forceinline__ void unpack_chunk16(const uint8_t *b, int c, uint32_t q[4], int *scale, int *min, float *d,
                                               float *dmin) {
    *min = 0;
    *dmin = 0.f;
    if constexpr (T == LLMM_TYPE_Q2_K) {
        *d = gq_shared_f16(b + 80);
        *dmin = gq_shared_f16(b + 82);
        *scale = b[c] & 15;
        *min = b[c] >> 4;
        gq_words<A, 4>(b + 16 + 32 * (c / 8) + 16 * (c % 2), q);
        for (int k = 0; k < 4; k++) q[k] = q[k] >> 2 * (c % 8 / 2) & 0x03030303u;
    } else if constexpr (T == LLMM_TYPE_Q3_K) {
        const uint8_t *sc = b + 96;
        *d = gq_shared_f16(b + 108);
        const int lo = c < 8 ? sc[c] & 15 : sc[c - 8] >> 4, hi = (sc[8 + c % 4] >> (2 * (c / 4))) & 3;
        *scale = (lo | hi << 4) - 32;
        uint32_t two[4], high[4];
        gq_words<A, 4>(b + 32 + 32 * (c / 8) + 16 * (c % 2), two);
        gq_words<A, 4>(b + 16 * (c % 2), high);
        for (int k = 0; k < 4; k++)
            q[k] = gq_less<4>((two[k] >> 2 * (c % 8 / 2) & 0x03030303u) | (high[k] >> c / 2 & 0x01010101u) << 2);
    } else if constexpr (T == LLMM_TYPE_Q4_K || T == LLMM_TYPE_Q5_K) {
        *d = gq_shared_f16(b);
        *dmin = gq_shared_f16(b + 2);
        qb_k4_scale_min(b + 4, c / 2, scale, min);
        constexpr int qs = T == LLMM_TYPE_Q4_K ? 16 : 48;
        uint32_t high[4];
        gq_words<A, 4>(b + qs + 32 * (c / 4) + 16 * (c % 2), q);
        if constexpr (T == LLMM_TYPE_Q5_K) gq_words<A, 4>(b + 16 + 16 * (c % 2), high);
        for (int k = 0; k < 4; k++) {
            q[k] = q[k] >> 4 * (c / 2 % 2) & 0x0f0f0f0fu;
            if constexpr (T == LLMM_TYPE_Q5_K) q[k] |= (high[k] >> c / 2 & 0x01010101u) << 4;
        }
    } else if constexpr (T == LLMM_TYPE_Q6_K) {
        *d = gq_shared_f16(b + 208);
        *scale = (int8_t)b[192 + c];
        const int half = c / 8;
        uint32_t lo[4], hi[4];
        gq_words<A, 4>(b + 64 * half + 16 * (c % 4), lo);
        gq_words<A, 4>(b + 128 + 32 * half + 16 * (c % 2), hi);
        for (int k = 0; k < 4; k++)
            q[k] = gq_less<32>((lo[k] >> 4 * (c % 8 / 4) & 0x0f0f0f0fu) | (hi[k] >> 2 * (c % 8 / 2) & 0x03030303u) << 4);
    } else { /* IQ4_XS */
        const int ib = c / 2;
        *d = gq_shared_f16(b);
        *scale = llmm_iq4_xs_scale(b, ib) - 32;
        gq_words<A, 4>(b + 8 + 16 * ib, q);
        for (int k = 0; k < 4; k++) q[k] = gq_iq4_values(q[k] >> 4 * (c % 2) & 0x0f0f0f0fu);
    }
}

/* acc[r] of every lane summed into out row r by lane 0. */
__device__ __forceinline__ void write_sums(float acc[GQ_MAX_ROWS], int nr, int lane, float *out, size_t ne1,
                                           size_t o) {
GQ_UNROLL
    for (int r = 0; r < GQ_MAX_ROWS; r++) {
        if (r >= nr) break;
        float v = acc[r];
        for (int offset = 16; offset > 0; offset /= 2) v = qb_add(v, __shfl_xor_sync(GQ_FULL_MASK, v, offset));
        if (lane == 0) out[(size_t)r * ne1 + o] = v;
    }
}

/* Float weights (F32, F16, BF16): out[r * ne1 + o] for r < nr (<= GQ_MAX_ROWS), weight row o of
 * nb elements against operand rows xq + r * xq_row_bytes, one warp per o. Element rows are
 * naturally aligned (GGUF aligns the tensor, rows are whole elements), so these load whole
 * values; lanes take consecutive elements, so a warp request is 64 or 128 consecutive bytes. The
 * products of two halves are exact, as in the CPU's half_dot. */
template <uint32_t T>
__global__ void gemv_float_kernel(const uint8_t *w, size_t row_bytes, size_t nb, size_t ne1, const uint8_t *xq,
                                  size_t xq_row_bytes, int nr, float *out) {
    const int lane = threadIdx.x % 32;
    const size_t o = (size_t)blockIdx.x * GQ_WARPS + threadIdx.x / 32;
    if (o >= ne1) return; /* the whole warp: no block-wide barrier follows */
    const uint8_t *wrow = w + o * row_bytes;
    float acc[GQ_MAX_ROWS];
GQ_UNROLL
    for (int r = 0; r < GQ_MAX_ROWS; r++) acc[r] = 0.f;
    for (size_t i = lane; i < nb; i += 32) {
        float wv;
        if constexpr (T == LLMM_TYPE_F32) wv = ((const float *)wrow)[i];
        else if constexpr (T == LLMM_TYPE_F16) wv = qb_half_to_float(((const uint16_t *)wrow)[i]);
        else wv = qb_bf16_to_float(((const uint16_t *)wrow)[i]);
GQ_UNROLL
        for (int r = 0; r < GQ_MAX_ROWS; r++) {
            if (r >= nr) break;
            const uint8_t *xr = xq + r * xq_row_bytes;
            float xv;
            if constexpr (T == LLMM_TYPE_F32) xv = ((const float *)xr)[i];
            else if constexpr (T == LLMM_TYPE_F16) xv = qb_half_to_float(((const uint16_t *)xr)[i]);
            else xv = qb_bf16_to_float(((const uint16_t *)xr)[i]);
            acc[r] = qb_add(acc[r], qb_mul(wv, xv));
        }
    }
    write_sums(acc, nr, lane, out, ne1, o);
}

/* Quantized weights: out[r * ne1 + o] as gemv_float_kernel, for the block types, GQ_OUTS_PER_WARP
 * weight rows (outputs o) a warp: every activation word a lane reads from shared memory serves
 * each of them, and those reads, 9 words per block and activation row, are most of what the
 * kernel issues at 8 rows (one output a warp was bound by issue at 2.3x its DRAM time). A lane
 * takes the same block of each of its warp's weight rows, in the same order as with one row a
 * warp, so every output is the same integer dots summed in the same float order. The warps of a
 * thread block walk the same chunks (they share the staged activations), so a warp past ne1
 * stays for the barriers and only skips the arithmetic; a warp's row past ne1 reads its first
 * row again and is not written. Alignment: w and xq at 4 bytes at least (device allocations are
 * at 256), so a block whose size is a multiple of 4 starts at a multiple of 4 in global and
 * (same offset within 16 bytes) shared memory. */
/* At most 64 registers, so 8 blocks of 128 threads fit an SM's 64K registers (32 warps: half of
 * sm_90's 64, two thirds of sm_87's 48; their shared memory, 8 x 18 KiB at most (Q8_0), fits
 * both): unbounded, the K-quants' unpacking took up to 88 on sm_87 (ptxas -v shows no spills at
 * 64). */
template <uint32_t T>
__global__ void __launch_bounds__(32 * GQ_WARPS, 8) gemv_block_kernel(const uint8_t *w, size_t row_bytes, size_t nb, size_t ne1, const uint8_t *xq,
                                  size_t xq_row_bytes, int nr, float *out) {
    using chunk = gq_chunk<T>;
    constexpr int R = gq_outs_per_warp<T>();
    constexpr uint32_t wb_bytes = qb_type<T>::block_bytes;
    constexpr uint32_t xb_bytes = chunk::x_block_bytes;
    constexpr int wa = wb_bytes % 4 == 0 ? 4 : 2;
    static_assert(xb_bytes % 4 == 0, "gemv_block_kernel: the operand layouts keep quants 4-byte aligned");
    /* uint4: 16-byte aligned */
    __shared__ uint4 w_stage[GQ_WARPS][R][chunk::w_bytes / 16];
    __shared__ uint4 x_stage[GQ_MAX_ROWS][chunk::x_bytes / 16];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const size_t o0 = ((size_t)blockIdx.x * GQ_WARPS + warp) * R; /* the warp's first output */
    const int n_out = o0 >= ne1 ? 0 : ne1 - o0 < (size_t)R ? (int)(ne1 - o0) : R;
    const bool active = n_out > 0;
    const uint8_t *wrow[R];
GQ_UNROLL
    for (int j = 0; j < R; j++) wrow[j] = w + (active ? o0 + (j < n_out ? j : 0) : 0) * row_bytes;
    float acc[R][GQ_MAX_ROWS];
GQ_UNROLL
    for (int j = 0; j < R; j++)
GQ_UNROLL
        for (int r = 0; r < GQ_MAX_ROWS; r++) acc[j][r] = 0.f;

    for (size_t b0 = 0; b0 < nb; b0 += chunk::blocks) {
        const size_t n = nb - b0 < chunk::blocks ? nb - b0 : chunk::blocks;
        __syncthreads(); /* every warp is done with the previous chunk */
        for (int r = warp; r < nr; r += GQ_WARPS)
            gq_stage((uint8_t *)x_stage[r], xq + r * xq_row_bytes + b0 * xb_bytes, n * xb_bytes, lane);
        const uint8_t *wc[R];
GQ_UNROLL
        for (int j = 0; j < R; j++)
            wc[j] = active ? gq_stage((uint8_t *)w_stage[warp][j], wrow[j] + b0 * wb_bytes, n * wb_bytes, lane) : NULL;
        __syncthreads();
        if (!active) continue;
        if constexpr (qb_type<T>::kernel_family == LLMM_FAMILY_BLOCK32) {
            /* a lane per block: the whole block's integer dot needs no cross-lane step */
            constexpr bool offset_type = qb_type<T>::operand_type == LLMM_TYPE_Q8_1;
            if ((size_t)lane >= n) continue;
            uint32_t q[R][8];
            float d[R], m[R];
GQ_UNROLL
            for (int j = 0; j < R; j++) unpack_block32<T, wa>(wc[j] + lane * wb_bytes, q[j], &d[j], &m[j]);
GQ_UNROLL
            for (int r = 0; r < GQ_MAX_ROWS; r++) {
                if (r >= nr) break;
                const uintptr_t xs = (uintptr_t)(xq + r * xq_row_bytes + b0 * xb_bytes);
                const uint8_t *y = (const uint8_t *)x_stage[r] + (xs & 15) + lane * xb_bytes;
                const uint8_t *ys = y + 4; /* Q8_1, and Q8_0 padded to its layout */
                uint32_t yq[8];
                gq_words<4, 8>(ys, yq);
                const float dy = gq_shared_f16(y), sy = offset_type ? gq_shared_f16(y + 2) : 0.f;
GQ_UNROLL
                for (int j = 0; j < R; j++) {
                    int isum = 0;
                    for (int k = 0; k < 8; k++) isum = __dp4a((int)q[j][k], (int)yq[k], isum);
                    /* llmm_vec_dot_*: isum * (d * dy), plus m * s for the offset types */
                    float c = qb_mul((float)isum, qb_mul(d[j], dy));
                    if constexpr (offset_type) c = qb_add(c, qb_mul(m[j], sy));
                    acc[j][r] = qb_add(acc[j][r], c);
                }
            }
        } else {
            static_assert(qb_type<T>::kernel_family == LLMM_FAMILY_BLOCK256, "gemv_block_kernel: a type of no kernel family");
            /* 256-weight blocks: a half-warp per block, lane c of it on weights 16c..16c+15 (one
             * Q8_K bsum each), so a block's integer sums are whole after a 16-lane reduction and
             * its float contribution is the CPU's. Every lane takes part in the shuffles, a lane
             * past the end with zeros. */
            const int c = lane % 16;
            for (size_t pass = 0; pass < n; pass += 2) {
                const size_t bi = pass + lane / 16;
                const bool valid = bi < n;
                uint32_t q[R][4];
                int scale[R], min[R];
                float d[R], dmin[R];
GQ_UNROLL
                for (int j = 0; j < R; j++) {
                    q[j][0] = q[j][1] = q[j][2] = q[j][3] = 0;
                    scale[j] = min[j] = 0;
                    d[j] = dmin[j] = 0.f;
                    if (valid) unpack_chunk16<T, wa>(wc[j] + bi * wb_bytes, c, q[j], &scale[j], &min[j], &d[j], &dmin[j]);
                }
GQ_UNROLL
                for (int r = 0; r < GQ_MAX_ROWS; r++) {
                    if (r >= nr) break;
                    const uintptr_t xs = (uintptr_t)(xq + r * xq_row_bytes + b0 * xb_bytes);
                    const uint8_t *y = (const uint8_t *)x_stage[r] + (xs & 15) + bi * xb_bytes;
                    int sum_q[R], sum_m[R];
GQ_UNROLL
                    for (int j = 0; j < R; j++) sum_q[j] = sum_m[j] = 0;
                    if (valid) {
                        /* one 16-byte load: the padded operand's quants are 16-byte aligned */
                        const uint4 yq = gq_shared_load<uint4>(y + GQ_PADDED_Q8_K_QS + 16 * c);
                        const int bsum = (int16_t)gq_shared_load<uint16_t>(y + GQ_PADDED_Q8_K_QS + QK_K + 2 * c);
GQ_UNROLL
                        for (int j = 0; j < R; j++) {
                            int dot = __dp4a((int)q[j][0], (int)yq.x, 0);
                            dot = __dp4a((int)q[j][1], (int)yq.y, dot);
                            dot = __dp4a((int)q[j][2], (int)yq.z, dot);
                            dot = __dp4a((int)q[j][3], (int)yq.w, dot);
                            sum_q[j] = scale[j] * dot;
                            sum_m[j] = min[j] * bsum;
                        }
                    }
                    for (int offset = 8; offset > 0; offset /= 2)
GQ_UNROLL
                        for (int j = 0; j < R; j++) {
                            sum_q[j] += __shfl_xor_sync(GQ_FULL_MASK, sum_q[j], offset);
                            sum_m[j] += __shfl_xor_sync(GQ_FULL_MASK, sum_m[j], offset);
                        }
                    if (valid && c == 0) {
                        const float yd = __uint_as_float(gq_shared_load<uint32_t>(y));
GQ_UNROLL
                        for (int j = 0; j < R; j++) {
                            float contrib;
                            if constexpr (T == LLMM_TYPE_IQ4_XS) /* llmm__vec_dot_iq4_xs_q8_K */
                                contrib = qb_mul((float)sum_q[j], qb_mul(d[j], yd));
                            else /* quant_k.c kq_block_dot */
                                contrib = qb_mul(yd, qb_sub(qb_mul(d[j], (float)sum_q[j]), qb_mul(dmin[j], (float)sum_m[j])));
                            acc[j][r] = qb_add(acc[j][r], contrib);
                        }
                    }
                }
            }
        }
    }
GQ_UNROLL
    for (int j = 0; j < R; j++) /* j constant: acc stays in registers */
        if (j < n_out) write_sums(acc[j], nr, lane, out, ne1, o0 + j);
}

typedef void (*gemv_fn)(const uint8_t *, size_t, size_t, size_t, const uint8_t *, size_t, int, float *);

/* A type's kernel and the outputs each of its warps takes (the grid follows from them). */
struct gemv_kernel {
    gemv_fn fn;
    int outs_per_warp;
};

template <uint32_t T> static gemv_kernel float_kernel() { return {&gemv_float_kernel<T>, 1}; }
template <uint32_t T> static gemv_kernel block_kernel() { return {&gemv_block_kernel<T>, gq_outs_per_warp<T>()}; }

/* The one kernel per weight type: which types the backend multiplies by (the rest of what a
 * type is comes from its row, format/blocks.h). */
static gemv_kernel gemv_for(uint32_t type) {
    switch (type) {
    case LLMM_TYPE_F32: return float_kernel<LLMM_TYPE_F32>();
    case LLMM_TYPE_F16: return float_kernel<LLMM_TYPE_F16>();
    case LLMM_TYPE_BF16: return float_kernel<LLMM_TYPE_BF16>();
    case LLMM_TYPE_Q4_0: return block_kernel<LLMM_TYPE_Q4_0>();
    case LLMM_TYPE_Q4_1: return block_kernel<LLMM_TYPE_Q4_1>();
    case LLMM_TYPE_Q5_0: return block_kernel<LLMM_TYPE_Q5_0>();
    case LLMM_TYPE_Q5_1: return block_kernel<LLMM_TYPE_Q5_1>();
    case LLMM_TYPE_Q8_0: return block_kernel<LLMM_TYPE_Q8_0>();
    case LLMM_TYPE_IQ4_NL: return block_kernel<LLMM_TYPE_IQ4_NL>();
    case LLMM_TYPE_Q2_K: return block_kernel<LLMM_TYPE_Q2_K>();
    case LLMM_TYPE_Q3_K: return block_kernel<LLMM_TYPE_Q3_K>();
    case LLMM_TYPE_Q4_K: return block_kernel<LLMM_TYPE_Q4_K>();
    case LLMM_TYPE_Q5_K: return block_kernel<LLMM_TYPE_Q5_K>();
    case LLMM_TYPE_Q6_K: return block_kernel<LLMM_TYPE_Q6_K>();
    case LLMM_TYPE_IQ4_XS: return block_kernel<LLMM_TYPE_IQ4_XS>();
    }
    return {NULL, 0};
}

extern "C" int llmm__cu_matmul_supports(uint32_t type) { return gemv_for(type).fn != NULL; }

/* The operand of the type's row (F32, F16 and BF16 are their own). */
extern "C" uint32_t llmm__cu_matmul_operand_type(uint32_t weight_type) {
    return gemv_for(weight_type).fn ? llmm_type_operand(weight_type) : UINT32_MAX;
}

extern "C" size_t llmm__cu_matmul_scratch_bytes(uint32_t type, size_t ne0, size_t n_rows) {
    const uint32_t operand = llmm__cu_matmul_operand_type(type);
    if (operand == UINT32_MAX || operand == LLMM_TYPE_F32) return 0; /* F32 multiplies the rows as given */
    /* whole 16-byte units: gq_stage reads the unit that holds the operand's last byte */
    return (n_rows * gemv_operand_row_bytes(operand, ne0) + 15) / 16 * 16;
}

extern "C" int llmm__cu_matmul(cudaStream_t stream, const void *w, uint32_t type, size_t ne0, size_t ne1, const float *x,
                         size_t n_rows, float *out, void *scratch) {
    const gemv_kernel kernel = gemv_for(type);
    if (!kernel.fn || ne0 % llmm_type_block_size(type) != 0) return cudaErrorInvalidValue;
    if (n_rows == 0 || ne1 == 0 || ne0 == 0) return 0;
    const uint32_t operand = llmm__cu_matmul_operand_type(type);
    const uint8_t *xq = (const uint8_t *)x;
    /* gemv_block_kernel's alignment (device allocations are at 256 bytes): the padded Q8_K
     * operand's 16-byte loads want its rows (multiples of 16 bytes) at 16 */
    if ((uintptr_t)w % 4 != 0 || (uintptr_t)scratch % 16 != 0) return cudaErrorInvalidValue;
    if (operand != LLMM_TYPE_F32) {
        const int err = quantize_operand(stream, x, operand, ne0, n_rows, scratch, true);
        if (err) return err;
        xq = (const uint8_t *)scratch;
    }
    const size_t nb = ne0 / llmm_type_block_size(type), row_bytes = nb * llmm_type_block_bytes(type);
    const size_t xq_row_bytes = gemv_operand_row_bytes(operand, ne0);
    const size_t outs_per_block = (size_t)GQ_WARPS * kernel.outs_per_warp;
    const unsigned grid = (unsigned)((ne1 + outs_per_block - 1) / outs_per_block);
    for (size_t r0 = 0; r0 < n_rows; r0 += GQ_MAX_ROWS) {
        const int nr = (int)(n_rows - r0 < GQ_MAX_ROWS ? n_rows - r0 : GQ_MAX_ROWS);
        SIMT_LAUNCH(kernel.fn, grid, 32 * GQ_WARPS, 0, stream, (const uint8_t *)w, row_bytes, nb, ne1,
                    xq + r0 * xq_row_bytes, xq_row_bytes, nr, out + r0 * ne1);
    }
    return (int)cudaGetLastError();
}

/* ---------------------------------------------------------------- embedding */

/* A thread block per token; each weight through quant_blocks.cuh, bit for bit the CPU's
 * dequant_row. The type switch inside qb_block_value is uniform across the block. */
__global__ void embed_kernel(const uint8_t *table, uint32_t type, size_t ne0, size_t ne1, size_t row_bytes,
                             const int32_t *tokens, float *out, int *bad) {
    const int32_t token = tokens[blockIdx.x];
    float *o = out + (size_t)blockIdx.x * ne0;
    if (token < 0 || (size_t)token >= ne1) {
        for (size_t i = threadIdx.x; i < ne0; i += blockDim.x) o[i] = qb_bits_to_float(0x7fc00000u);
        if (threadIdx.x == 0) *bad = 1;
        return;
    }
    const uint8_t *row = table + (size_t)token * row_bytes;
    const size_t qk = llmm_type_block_size(type), bytes = llmm_type_block_bytes(type);
    for (size_t i = threadIdx.x; i < ne0; i += blockDim.x)
        o[i] = qb_block_value(type, row + i / qk * bytes, (int)(i % qk));
}

extern "C" int llmm__cu_embed(cudaStream_t stream, const void *table, uint32_t type, size_t ne0, size_t ne1,
                        const int32_t *tokens, size_t n, float *out, int *bad) {
    if (!gemv_for(type).fn || ne0 % llmm_type_block_size(type) != 0) return cudaErrorInvalidValue;
    if (n == 0 || ne0 == 0) return 0;
    const size_t row_bytes = ne0 / llmm_type_block_size(type) * llmm_type_block_bytes(type);
    SIMT_LAUNCH(embed_kernel, (unsigned)n, 256, 0, stream, (const uint8_t *)table, type, ne0, ne1, row_bytes, tokens,
                out, bad);
    return (int)cudaGetLastError();
}
