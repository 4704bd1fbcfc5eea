/* Prompt matmuls on int8 tensor cores (gemm_int8.h), for the 32-weight block types whose
 * weights are d * q with q a small integer: Q4_0, Q5_0, Q8_0, IQ4_NL.
 *
 * Why int8: one k = 32 step of mma.sync m16n8k32 (mma_s8.cuh) is exactly one block, so each
 * block's dot of a weight row with a Q8_0 activation row (llmm__cu_quantize_operand, byte for byte the
 * CPU's operand) is an exact integer, scaled by the two blocks' d as the CPU scales it
 * (lib/quant*.c llmm_vec_dot_*_q8_0: sum += (float)isum * (d_w * d_x)). Each output's blocks are
 * summed in order in one lane with the same roundings (qb_mul/qb_add), so the result is the CPU
 * scalar dot's bit for bit; a float GEMM could only be held to a tolerance. The operands are the
 * file's blocks and the Q8_0 rows (about 1.1 and 0.56 bytes a weight for Q8_0 and Q4_0, against
 * 2 for the F16 path) and need no dequantized copy of the weights.
 *
 * Tile: a thread block of 4 warps computes 64 weight rows by 64 activation rows, the warps as
 * 2 x 2, each 32 x 32 (2 mma m-tiles of 16 weight rows by 4 n-tiles of 8 activation rows): per
 * block of k a warp loads 8 A and 8 B fragment words from shared memory for 8 mmas, so each
 * fragment serves 2 or 4 products, and a staged weight tile serves 64 activation rows (half the
 * global and L2 reads of a 64 x 32 tile). Per stage the block copies GI_KB = 4 blocks of k of its
 * 64 weight rows and 64 activation rows, as stored, to shared memory with cp.async (fetch_tile:
 * each row's 4 blocks are one contiguous run of 72 to 136 bytes, copied 8 or 4 bytes a thread,
 * consecutive threads along the run), two stages in turn: stage s + 1's copies are in flight
 * while stage s is decoded to int8 words with their scales (decode_tile) and multiplied, so no
 * thread waits on global memory between one stage's math and the next (reading each block's
 * bytes from global memory cost 52 ld.global.u8 per row and block, all exposed). GGUF aligns tensors, not blocks (an
 * 18-byte Q4_0 block is only 2-byte aligned), so the copy width is what the tensor's address and
 * row length allow: 8 bytes when a row has a multiple of 4 blocks (every model's widths), 4 for
 * an even count, else plain 2-byte loads. Shared memory: two raw stages (64 x 4 x (18 to 34)
 * bytes of weights and 64 x 4 x 34 of activations) and the decoded 2 x 64 x 144 + 2 x 64 x 16
 * bytes: 46 KiB for Q4_0, 54 KiB for Q8_0 weights (dynamic, over the default 48 KiB), so 4
 * blocks an SM on sm_90 (228 KiB), 2 or 3 on sm_87 (164 KiB). Rows are padded from 32 to 36
 * words so that a fragment load (8 groups at 8 rows, 4 lanes along k) hits 32 different banks
 * (HOPPER.md, "Banks"), and decode_tile orders each lane's 8 word stores so that the warp's stores
 * hit 32 banks too. An m- or n-tile wholly past the last row is skipped (warp-uniform), so a
 * short prompt costs its own rows only.
 *
 * What bounds it on paper: per output and block the tensor core does 32 multiply-adds and the
 * lane 4 float operations (the conversion, d_w * d_x, the product, the sum; not fused, to round
 * as the CPU does). At 128 float operations a clock per SM that is 1024 multiply-adds a clock
 * per SM, a quarter of sm_90's int8 tensor-core peak and half of its F16 peak: the float
 * epilogue, not the tensor core, is the likely ceiling, about 500 TOPS on an H200. So the
 * int8 path wins where cuBLASLt's F16 path pays more for its dequantized tiles, its F16
 * activations and its twice larger operands than it gains in rate. Which shapes those are, and
 * what the decoding from shared memory (16-bit reads for Q4_0 and Q8_0, bytes for Q5_0 and
 * IQ4_NL, two barriers a stage) costs, only a
 * GPU shows: scripts/gpu-check.sh's prefill table (LLMM_CUDA_GEMM). The emulation checks the
 * sums, the fragment layout (mma_s8.cuh), cp.async's visibility (tests/simt/simt_async.h: a
 * destination is garbage until its wait) and the edges (rows and blocks past the ends stage as
 * zero and are never written). */
#include "portable.h"

#include "gemm_int8.h"
#include "gemv_quant.h"
#include "mma_s8.cuh"
#include "quant_blocks.cuh"

#define GI_WARPS 4
#define GI_M 64                     /* weight rows per thread block: 2 warps of 32 */
#define GI_N 64                     /* activation rows per thread block: 2 warps of 32 */
#define GI_WARP_M 32                /* weight rows per warp: 2 mma m-tiles of 16 */
#define GI_WARP_N 32                /* activation rows per warp: 4 mma n-tiles of 8 */
#define GI_KB 4                     /* 32-value blocks of k per stage */
#define GI_ROW_WORDS (GI_KB * 8 + 4) /* words per staged row: 36 = 4 mod 32, see the top */

#if SIMT_EMULATED
#define GI_UNROLL
#else
#define GI_UNROLL _Pragma("unroll")
#endif

namespace {

/* The IQ4 codebook (format/blocks.h LLMM_IQ4_VALUES, as qb_iq4_value) as 16 int8 in two 64-bit
 * constants, entry c in byte c % 8 of the lower (c < 8) or upper one: qb_iq4_value's array
 * indexed at run time lives in local memory, stored anew at every lookup, where shifts of a
 * register cost a few instructions. Packed at compile time from the initializer. */
struct iq4_codebook {
    int8_t v[16];
};
constexpr iq4_codebook k_iq4 = {LLMM_IQ4_VALUES};
constexpr uint64_t iq4_packed(int half) {
    uint64_t word = 0;
    for (int c = 0; c < 8; c++) word |= (uint64_t)(uint8_t)k_iq4.v[8 * half + c] << (8 * c);
    return word;
}
constexpr uint64_t k_iq4_lower = iq4_packed(0), k_iq4_upper = iq4_packed(1);

__device__ __forceinline__ int iq4_value(int code) {
    return (int8_t)(uint8_t)((code & 8 ? k_iq4_upper : k_iq4_lower) >> (8 * (code & 7)));
}

/* Weight j of a block of type T as its integer q (w_j = d * q). */
template <uint32_t T> __device__ __forceinline__ int block_q(const uint8_t *b, int j) {
    if constexpr (T == LLMM_TYPE_Q4_0) return qb_nibble32(b + 2, j) - 8;
    else if constexpr (T == LLMM_TYPE_Q5_0) return (qb_nibble32(b + 6, j) | qb_high_bit32(b + 2, j) << 4) - 16;
    else if constexpr (T == LLMM_TYPE_Q8_0) return (int8_t)b[2 + j];
    else return iq4_value(qb_nibble32(b + 2, j)); /* IQ4_NL */
}

/* Four bytes of a raw stage at p, which is only 2-byte aligned (a block's offset in its row is
 * a multiple of its 18 or 34 bytes): two 16-bit shared loads, where reading byte by byte took
 * four, each at up to 2 wavefronts (the warp's lanes sit 18 or 34 bytes apart). */
__device__ __forceinline__ uint32_t raw_u32_at(const uint8_t *p) {
    const uint16_t *h = (const uint16_t *)p;
    return (uint32_t)h[0] | (uint32_t)h[1] << 16;
}

/* Word wi (weights 4 wi .. 4 wi + 3, k ascending from the low byte, as the mma fragments take
 * them) of a block of type T (Q8_0 for the activations). Q8_0's word is its 4 bytes as stored;
 * Q4_0's is 4 nibbles of qs[4 (wi % 4) ..], low ones for wi < 4, each less 8 with no borrow
 * between bytes (n | 0x80 less 8 stays >= 0x78; the xor takes the 0x80 back: n - 8 mod 256). */
template <uint32_t T> __device__ __forceinline__ uint32_t block_word(const uint8_t *b, unsigned wi) {
    if constexpr (T == LLMM_TYPE_Q8_0) return raw_u32_at(b + 2 + 4 * wi);
    else if constexpr (T == LLMM_TYPE_Q4_0) {
        const uint32_t q = raw_u32_at(b + 2 + 4 * (wi % 4));
        const uint32_t nibbles = (wi < 4 ? q : q >> 4) & 0x0f0f0f0fu;
        return ((nibbles | 0x80808080u) - 0x08080808u) ^ 0x80808080u;
    }
    uint32_t word = 0;
GI_UNROLL
    for (unsigned e = 0; e < 4; e++) word |= (uint32_t)(uint8_t)(int8_t)block_q<T>(b, (int)(4 * wi + e)) << (8 * e);
    return word;
}

/* Bytes of one stage of a matrix in raw shared memory: GI_KB blocks of each of `rows` rows. */
template <uint32_t T> constexpr unsigned raw_row_bytes = GI_KB * qb_type<T>::block_bytes;

/* Rows [row0, row0 + rows) by blocks [blk0, blk0 + kbn) of a matrix of blocks of type T, as the
 * file stores them, into raw (row r at r * raw_row_bytes<T>): each row's kbn blocks are one
 * contiguous run, copied in units of `unit` bytes by consecutive threads (so a warp's copies are
 * consecutive runs of global memory). Units of 8 or 4 bytes are cp.async: issued now, visible
 * after the wait for their commit group, while the block computes on the previous stage; where
 * the rows are only 2-byte aligned (an odd count of blocks a row, or an odd tensor address)
 * plain loads copy them at once. Rows past n_rows are not read (decode_tile zeros them). */
template <uint32_t T>
__device__ __forceinline__ void fetch_tile(const uint8_t *src, size_t row_bytes, size_t row0, size_t n_rows,
                                           size_t blk0, unsigned kbn, unsigned rows, unsigned unit, uint8_t *raw) {
    constexpr unsigned bb = qb_type<T>::block_bytes;
    const unsigned run_units = kbn * bb / unit;
    const unsigned present = n_rows > row0 ? (n_rows - row0 < rows ? (unsigned)(n_rows - row0) : rows) : 0;
    const uint8_t *first = src + row0 * row_bytes + blk0 * bb;
    for (unsigned p = threadIdx.x; p < present * run_units; p += blockDim.x) {
        const unsigned r = p / run_units, offset = p % run_units * unit;
        const uint8_t *from = first + r * row_bytes + offset;
        uint8_t *to = raw + r * raw_row_bytes<T> + offset;
        if (unit == 8) __pipeline_memcpy_async(to, from, 8);
        else if (unit == 4) __pipeline_memcpy_async(to, from, 4);
        else if (unit == 2) *(uint16_t *)to = *(const uint16_t *)from;
        else *to = *from;
    }
}

/* The raw stage of `rows` rows into shared int8 words and scales for the mma loop, one
 * (row, block) a thread; zeros (scale 0) past n_rows or kbn. Thread p takes row p / GI_KB and
 * block kb = p % GI_KB, so a warp's 32 lanes store to 8 rows (4 banks apart: rows are 36 words)
 * by 4 blocks (8 words apart): at the same word index that is only 8 banks, so each lane starts
 * at word kb and goes round its 8 words, which puts the warp's 32 stores of each step on 32
 * different banks (4 row + 8 kb + (i + kb) % 8 is distinct mod 32 for row < 8, kb < 4). */
template <uint32_t T>
__device__ __forceinline__ void decode_tile(const uint8_t *raw, size_t row0, size_t n_rows, unsigned kbn,
                                            unsigned rows, uint32_t *q, float *d) {
    for (unsigned p = threadIdx.x; p < rows * GI_KB; p += blockDim.x) {
        const unsigned r = p / GI_KB, kb = p % GI_KB;
        const bool present = row0 + r < n_rows && kb < kbn;
        const uint8_t *b = raw + r * raw_row_bytes<T> + kb * qb_type<T>::block_bytes;
        uint32_t *dst = q + r * GI_ROW_WORDS + kb * 8;
GI_UNROLL
        for (unsigned i = 0; i < 8; i++) {
            const unsigned wi = (i + kb) % 8;
            dst[wi] = present ? block_word<T>(b, wi) : 0u;
        }
        d[r * GI_KB + kb] = present ? qb_half_to_float(*(const uint16_t *)b) : 0.f;
    }
}

/* Dynamic shared memory of the kernel for weight type T: two raw stages (weights then
 * activations, each 16-byte aligned), then the decoded words and scales the mma loop reads. */
template <uint32_t T> struct gi_shared {
    static constexpr unsigned w_raw = GI_M * raw_row_bytes<T>;
    static constexpr unsigned stage = (w_raw + GI_N * raw_row_bytes<LLMM_TYPE_Q8_0> + 15) / 16 * 16;
    static constexpr unsigned words = 2 * stage;
    static constexpr unsigned scales = words + (GI_M + GI_N) * GI_ROW_WORDS * 4;
    static constexpr unsigned bytes = scales + (GI_M + GI_N) * GI_KB * 4;
    static_assert(raw_row_bytes<T> % 8 == 0 && raw_row_bytes<LLMM_TYPE_Q8_0> % 8 == 0,
                  "a stage's rows must keep 8-byte copies aligned");
};

/* (float)s for a block's integer sum (|s| <= 32 * 128 * 128 = 2^19), exactly, with an integer
 * add and a float subtract instead of the conversion unit (16 results a clock per SM on sm_80 and
 * sm_90 by the programming guide's throughput table, against 64 to 128 float adds): the float
 * 1.5 * 2^23 has unit spacing, so adding s to its bits gives 1.5 * 2^23 + s for |s| < 2^22, and
 * subtracting 1.5 * 2^23 leaves s, both exact. */
__device__ __forceinline__ float block_sum_to_float(int32_t s) {
    const float magic = 12582912.0f; /* 1.5 * 2^23, bits 0x4b400000 */
    return qb_sub(qb_bits_to_float(0x4b400000u + (uint32_t)s), magic);
}

template <uint32_t T>
__global__ void __launch_bounds__(32 * GI_WARPS)
    gemm_int8_kernel(const uint8_t *w, size_t w_row_bytes, unsigned w_unit, size_t nb, size_t ne1, const uint8_t *xq,
                     unsigned x_unit, size_t n_rows, float *out) {
    static_assert(qb_type<T>::block_size == 32 && qb_type<T>::operand_type == LLMM_TYPE_Q8_0,
                  "gemm_int8_kernel: a block is one k = 32 step against a Q8_0 operand block");
    typedef gi_shared<T> layout;
    SIMT_DYNAMIC_SHARED(uint8_t, shared);
    /* raw stage s % 2 at shared + (s % 2) * layout::stage (an array of the two pointers indexed
     * at run time would live in local memory) */
    uint32_t *const wq = (uint32_t *)(shared + layout::words), *const xs = wq + GI_M * GI_ROW_WORDS;
    float *const wd = (float *)(shared + layout::scales), *const xd = wd + GI_M * GI_KB;
    const unsigned lane = threadIdx.x % 32, warp = threadIdx.x / 32, group = lane / 4, t = lane % 4;
    const unsigned wm = (warp % 2) * GI_WARP_M, wn = (warp / 2) * GI_WARP_N; /* the warp's tile in the block's */
    const size_t m0 = (size_t)blockIdx.x * GI_M, n0 = (size_t)blockIdx.y * GI_N;
    /* m- and n-tiles of this warp that start before the last row: the others are all zeros */
    const size_t m_left = ne1 > m0 + wm ? ne1 - (m0 + wm) : 0, n_left = n_rows > n0 + wn ? n_rows - (n0 + wn) : 0;
    const unsigned m_tiles = m_left >= GI_WARP_M ? 2u : (unsigned)(m_left + 15) / 16;
    const unsigned n_tiles = n_left >= GI_WARP_N ? 4u : (unsigned)(n_left + 7) / 8;
    const int32_t zero[4] = {0, 0, 0, 0};
    float acc[2][4][4];
GI_UNROLL
    for (int mt = 0; mt < 2; mt++)
GI_UNROLL
        for (int nt = 0; nt < 4; nt++)
GI_UNROLL
            for (int i = 0; i < 4; i++) acc[mt][nt][i] = 0.f;

    /* Stage s + 1's copies are issued before stage s is decoded and multiplied, so its global
     * reads overlap that work; one commit group a stage (empty past the last), and waiting for
     * all but the newest group is waiting for stage s. Raw stage s % 2 is next overwritten by
     * stage s + 2's copies, issued after the barrier that follows its decoding. */
    const size_t stages = (nb + GI_KB - 1) / GI_KB, x_row_bytes = nb * sizeof(block_q8_0);
    auto stage_blocks = [nb](size_t s) { return nb - s * GI_KB < GI_KB ? (unsigned)(nb - s * GI_KB) : GI_KB; };
    fetch_tile<T>(w, w_row_bytes, m0, ne1, 0, stage_blocks(0), GI_M, w_unit, shared);
    fetch_tile<LLMM_TYPE_Q8_0>(xq, x_row_bytes, n0, n_rows, 0, stage_blocks(0), GI_N, x_unit, shared + layout::w_raw);
    __pipeline_commit();
    for (size_t s = 0; s < stages; s++) {
        if (s + 1 < stages) {
            uint8_t *next = shared + (s + 1) % 2 * layout::stage;
            const unsigned kbn = stage_blocks(s + 1);
            fetch_tile<T>(w, w_row_bytes, m0, ne1, (s + 1) * GI_KB, kbn, GI_M, w_unit, next);
            fetch_tile<LLMM_TYPE_Q8_0>(xq, x_row_bytes, n0, n_rows, (s + 1) * GI_KB, kbn, GI_N, x_unit,
                                       next + layout::w_raw);
        }
        __pipeline_commit();
        __pipeline_wait_prior(1);
        __syncthreads();
        const unsigned kb_end = stage_blocks(s);
        const uint8_t *current = shared + s % 2 * layout::stage;
        decode_tile<T>(current, m0, ne1, kb_end, GI_M, wq, wd);
        decode_tile<LLMM_TYPE_Q8_0>(current + layout::w_raw, n0, n_rows, kb_end, GI_N, xs, xd);
        __syncthreads();
        for (unsigned kb = 0; kb < kb_end; kb++) {
            uint32_t a[2][4], b[4][2];
            float dw[2][2], dx[4][2];
GI_UNROLL
            for (int mt = 0; mt < 2; mt++) {
                const unsigned row = wm + 16 * mt + group;
                const uint32_t *p = wq + row * GI_ROW_WORDS + kb * 8 + t;
                a[mt][0] = p[0], a[mt][1] = p[8 * GI_ROW_WORDS], a[mt][2] = p[4], a[mt][3] = p[8 * GI_ROW_WORDS + 4];
                dw[mt][0] = wd[row * GI_KB + kb], dw[mt][1] = wd[(row + 8) * GI_KB + kb];
            }
GI_UNROLL
            for (int nt = 0; nt < 4; nt++) {
                const uint32_t *p = xs + (wn + 8 * nt + group) * GI_ROW_WORDS + kb * 8 + t;
                b[nt][0] = p[0], b[nt][1] = p[4];
                dx[nt][0] = xd[(wn + 8 * nt + 2 * t) * GI_KB + kb], dx[nt][1] = xd[(wn + 8 * nt + 2 * t + 1) * GI_KB + kb];
            }
GI_UNROLL
            for (int mt = 0; mt < 2; mt++)
GI_UNROLL
                for (int nt = 0; nt < 4; nt++) {
                    if ((unsigned)mt >= m_tiles || (unsigned)nt >= n_tiles) continue; /* the warp agrees */
                    int32_t d[4];
                    mma_s8_m16n8k32(d, a[mt], b[nt], zero);
GI_UNROLL
                    for (int i = 0; i < 4; i++) {
                        /* lib/quant*.c: sum += (float)isum * (d_w * d_x), blocks in order */
                        const float scale = qb_mul(dw[mt][i / 2], dx[nt][i % 2]);
                        acc[mt][nt][i] = qb_add(acc[mt][nt][i], qb_mul(block_sum_to_float(d[i]), scale));
                    }
                }
        }
    }
GI_UNROLL
    for (int mt = 0; mt < 2; mt++)
GI_UNROLL
        for (int nt = 0; nt < 4; nt++)
GI_UNROLL
            for (int i = 0; i < 4; i++) {
                const size_t m = m0 + wm + 16 * mt + group + 8 * (i / 2), n = n0 + wn + 8 * nt + 2 * t + i % 2;
                if (m < ne1 && n < n_rows) out[n * ne1 + m] = acc[mt][nt][i];
            }
}

} // namespace

typedef void (*gemm_int8_fn)(const uint8_t *, size_t, unsigned, size_t, size_t, const uint8_t *, unsigned, size_t,
                             float *);

struct gemm_int8_variant {
    gemm_int8_fn kernel;
    unsigned shared_bytes;
};

/* The one kernel per weight type: the types whose weights are d * q (block_q above). */
static gemm_int8_variant gemm_int8_for(uint32_t type) {
    switch (type) {
    case LLMM_TYPE_Q4_0: return {&gemm_int8_kernel<LLMM_TYPE_Q4_0>, gi_shared<LLMM_TYPE_Q4_0>::bytes};
    case LLMM_TYPE_Q5_0: return {&gemm_int8_kernel<LLMM_TYPE_Q5_0>, gi_shared<LLMM_TYPE_Q5_0>::bytes};
    case LLMM_TYPE_Q8_0: return {&gemm_int8_kernel<LLMM_TYPE_Q8_0>, gi_shared<LLMM_TYPE_Q8_0>::bytes};
    case LLMM_TYPE_IQ4_NL: return {&gemm_int8_kernel<LLMM_TYPE_IQ4_NL>, gi_shared<LLMM_TYPE_IQ4_NL>::bytes};
    }
    return {NULL, 0};
}

/* The widest copy (8, 4, 2 or 1 bytes) that keeps every copy of fetch_tile aligned: the matrix's
 * address, its row length, and the run of a last stage of fewer than GI_KB blocks (a full
 * stage's run is a multiple of 8 bytes: gi_shared). */
static unsigned copy_unit(const void *matrix, size_t row_bytes, size_t last_run_bytes) {
    const uintptr_t all = (uintptr_t)matrix | (uintptr_t)row_bytes | (uintptr_t)last_run_bytes;
    return all % 8 == 0 ? 8u : all % 4 == 0 ? 4u : all % 2 == 0 ? 2u : 1u;
}

extern "C" int llmm__cu_gemm_int8_supports(uint32_t type) { return gemm_int8_for(type).kernel != NULL; }

extern "C" int llmm__cu_gemm_int8(cudaStream_t stream, const void *w, uint32_t type, size_t ne0, size_t ne1,
                            const void *x_q8, size_t n_rows, float *out) {
    const gemm_int8_variant variant = gemm_int8_for(type);
    const gemm_int8_fn kernel = variant.kernel;
    if (!kernel || ne0 == 0 || ne0 % QK8_0 != 0) return cudaErrorInvalidValue;
    if (n_rows == 0 || ne1 == 0) return 0;
    const size_t m_blocks = (ne1 + GI_M - 1) / GI_M, n_blocks = (n_rows + GI_N - 1) / GI_N;
    if (m_blocks > 0x7fffffffu || n_blocks > 65535) return cudaErrorInvalidValue; /* grid limits */
    const size_t nb = ne0 / QK8_0, block_bytes = llmm_type_block_bytes(type), row_bytes = nb * block_bytes;
    const unsigned w_unit = copy_unit(w, row_bytes, nb % GI_KB * block_bytes);
    const unsigned x_unit = copy_unit(x_q8, nb * sizeof(block_q8_0), nb % GI_KB * sizeof(block_q8_0));
    /* more than the 48 KiB a launch gets without asking for Q8_0 weights (54 KiB) */
    cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           (int)variant.shared_bytes);
    if (err != cudaSuccess) return (int)err;
    const dim3 grid((unsigned)m_blocks, (unsigned)n_blocks);
    const uint8_t *wb = (const uint8_t *)w, *xb = (const uint8_t *)x_q8;
    SIMT_LAUNCH(kernel, grid, 32 * GI_WARPS, variant.shared_bytes, stream, wb, row_bytes, w_unit, nb, ne1, xb, x_unit,
                n_rows, out);
    return (int)cudaGetLastError();
}

extern "C" size_t llmm__cu_gemm_int8_scratch_bytes(size_t ne0, size_t n_rows) {
    return ne0 / QK8_0 * sizeof(block_q8_0) * n_rows;
}

extern "C" int llmm__cu_gemm_int8_f32(cudaStream_t stream, const void *w, uint32_t type, size_t ne0, size_t ne1,
                                const float *x, size_t n_rows, float *out, void *scratch) {
    if (!llmm__cu_gemm_int8_supports(type) || ne0 == 0 || ne0 % QK8_0 != 0) return cudaErrorInvalidValue;
    if (n_rows == 0 || ne1 == 0) return 0;
    const int err = llmm__cu_quantize_operand(stream, x, llmm_type_operand(type), ne0, n_rows, scratch);
    return err ? err : llmm__cu_gemm_int8(stream, w, type, ne0, ne1, scratch, n_rows, out);
}
