/* One warp-wide int8 tensor-core product, mma.sync m16n8k32 (sm_80 and later: sm_87 Jetson Orin,
 * sm_90 H100/H200): D (16 x 8, int32) = A (16 x 32, int8, row-major) times B (32 x 8, int8,
 * column-major) + C (16 x 8, int32). Each of the 32 lanes holds a fragment of each matrix as
 * the PTX ISA defines it for .s8 ("Matrix Fragments for mma.m16n8k32"): lane = 4 * group + t,
 * group 0..7, t 0..3; a register holds 4 consecutive int8 along k, the lowest k in its low byte:
 *   A: a[0] = A[group][4t .. 4t+3]       a[1] = A[group + 8][4t .. 4t+3]
 *      a[2] = A[group][16+4t .. 16+4t+3] a[3] = A[group + 8][16+4t .. 16+4t+3]
 *   B: b[0] = B[4t .. 4t+3][group]       b[1] = B[16+4t .. 16+4t+3][group]
 *   C, D: [0] = (group, 2t)  [1] = (group, 2t+1)  [2] = (group+8, 2t)  [3] = (group+8, 2t+1)
 * Integer sums are exact (32 products of at most 2^14 each cannot overflow), so the product is
 * the same on every device and in the emulation.
 *
 * Under nvcc for the device it is the instruction. The emulated build (make test) computes each
 * lane's D from the other lanes' fragments, gathered with warp shuffles following the layout
 * above, so a kernel that places its fragments wrongly gets wrong sums in the emulation exactly
 * where it would on a GPU (tests/cuda/test_cuda_gemm_int8.cpp holds this function to a plain
 * matrix product first). Like the instruction, every lane of the warp must call it together.
 * The module targets sm_87 and sm_90; an older device target is refused at compile time. */
#ifndef LLMM_CUDA_MMA_S8_CUH
#define LLMM_CUDA_MMA_S8_CUH

#include <stdint.h>

#include "portable.h"

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#error "mma_s8.cuh: mma.sync m16n8k32 with int8 operands needs sm_80 or later (the module targets sm_87 and sm_90)"
#endif

__device__ __forceinline__ void mma_s8_m16n8k32(int32_t d[4], const uint32_t a[4], const uint32_t b[2],
                                                const int32_t c[4]) {
#if defined(__CUDA_ARCH__)
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%10,%11,%12,%13};\n"
                 : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(c[0]), "r"(c[1]),
                   "r"(c[2]), "r"(c[3]));
#elif SIMT_EMULATED
    /* This lane's outputs need rows group and group + 8 of A (all four registers of lanes
     * 4 * group .. 4 * group + 3) and columns 2t and 2t + 1 of B (both registers of lanes
     * 4 * col .. 4 * col + 3): 16 + 16 shuffles, each lane naming its own source. */
    const unsigned full = 0xffffffffu, lane = threadIdx.x % 32, group = lane / 4, t = lane % 4;
    uint32_t rows[4][4];    /* [s][r]: register r of lane 4 * group + s */
    uint32_t cols[2][4][2]; /* [c][s][r]: register r of lane 4 * (2t + c) + s */
    for (unsigned s = 0; s < 4; s++) {
        for (unsigned r = 0; r < 4; r++) rows[s][r] = __shfl_sync(full, a[r], (int)(4 * group + s));
        for (unsigned c2 = 0; c2 < 2; c2++)
            for (unsigned r = 0; r < 2; r++) cols[c2][s][r] = __shfl_sync(full, b[r], (int)(4 * (2 * t + c2) + s));
    }
    for (unsigned i = 0; i < 4; i++) {
        const unsigned upper = i / 2, c2 = i % 2; /* row group + 8 * upper, column 2t + c2 */
        int32_t sum = c[i];
        for (unsigned k = 0; k < 32; k++) {
            /* k lives in lane 4 * (row or column % 8) + (k % 16) / 4, byte k % 4 of register
             * (k >= 16 ? 2 : 0) + upper of A, (k >= 16 ? 1 : 0) of B */
            const unsigned s = (k % 16) / 4, byte = 8 * (k % 4);
            const int8_t av = (int8_t)(rows[s][(k >= 16 ? 2u : 0u) + upper] >> byte);
            const int8_t bv = (int8_t)(cols[c2][s][k >= 16 ? 1u : 0u] >> byte);
            sum += (int32_t)av * (int32_t)bv;
        }
        d[i] = sum;
    }
#else
    /* nvcc's host pass: a __device__ function is never called on the host */
    (void)a, (void)b;
    for (int i = 0; i < 4; i++) d[i] = c[i];
#endif
}

#endif
