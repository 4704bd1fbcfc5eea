// LoRA deltas on the device: the two passes of lib/backend/backend.h's lora_delta for one adapter group
// (the glue, backend.cu, launches them group after group, so that a row in several groups gets
// their deltas in the groups' order). The projection is one block per (rank, row): a dot of
// n_in values, reduced across the block; the expansion one thread per output column of a row,
// the rank products added onto the output value in rank order with fused multiply-adds, as the
// CPU's attention value kernels do. Operands are F32 or F16; B transposed is in the panels of
// LLMM_LORA_PANEL columns the core makes at adapter load.
#include "kernels.h"
#include "quant_blocks.cuh"

namespace {

constexpr int PROJECT_THREADS = 128;
constexpr int EXPAND_THREADS = 256;
constexpr size_t PANEL = 64; // lib/backend/backend.h LLMM_LORA_PANEL

__device__ inline float operand_at(const void *p, uint32_t f16, size_t i) {
    return f16 ? qb_half_to_float(((const uint16_t *)p)[i]) : ((const float *)p)[i];
}

// t[i * rank + r] = scales[i] * (A row r . x row rows[i]); block (r, i).
__global__ void lora_project_kernel(const void *a, uint32_t a_f16, size_t n_in, size_t rank, const float *x,
                                    const uint32_t *rows, const float *scales, float *t) {
    __shared__ float partial[PROJECT_THREADS / 32];
    const size_t r = blockIdx.x, i = blockIdx.y;
    const float *xr = x + (size_t)rows[i] * n_in;
    float sum = 0.f;
    for (size_t k = threadIdx.x; k < n_in; k += blockDim.x) sum += operand_at(a, a_f16, r * n_in + k) * xr[k];
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = sum;
    __syncthreads();
    if (threadIdx.x == 0) {
        float total = 0.f;
        for (unsigned w = 0; w < blockDim.x / 32; w++) total += partial[w];
        t[i * rank + r] = total * scales[i];
    }
}

// out[rows[i] * n_out + o] += t[i * rank + r] * B^T(r, o) for r in order; block (columns, i).
__global__ void lora_expand_kernel(const void *bt, uint32_t bt_f16, size_t n_out, size_t rank, const float *t,
                                   const uint32_t *rows, float *out) {
    const size_t o = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (o >= n_out) return;
    const size_t i = blockIdx.y, p = o / PANEL, j = o % PANEL;
    const size_t w = n_out - p * PANEL < PANEL ? n_out - p * PANEL : PANEL;
    const size_t base = p * PANEL * rank + j;
    const float *ti = t + i * rank;
    float *y = out + (size_t)rows[i] * n_out + o;
    float acc = *y;
    for (size_t r = 0; r < rank; r++) acc = __fmaf_rn(ti[r], operand_at(bt, bt_f16, base + r * w), acc);
    *y = acc;
}

} // namespace

extern "C" int llmm__cu_lora_project(cudaStream_t stream, const void *a, uint32_t a_f16, size_t n_in, size_t rank,
                                     const float *x, const uint32_t *rows, const float *scales, size_t count,
                                     float *t) {
    if (count == 0 || rank == 0) return 0;
    if (rank > 65535 || count > 65535) return (int)cudaErrorInvalidValue;
    SIMT_LAUNCH(lora_project_kernel, dim3((unsigned)rank, (unsigned)count), dim3(PROJECT_THREADS), 0, stream, a,
                a_f16, n_in, rank, x, rows, scales, t);
    return (int)cudaGetLastError();
}

extern "C" int llmm__cu_lora_expand(cudaStream_t stream, const void *bt, uint32_t bt_f16, size_t n_out, size_t rank,
                                    const float *t, const uint32_t *rows, size_t count, float *out) {
    if (count == 0 || n_out == 0) return 0;
    if (count > 65535) return (int)cudaErrorInvalidValue;
    const size_t blocks = (n_out + EXPAND_THREADS - 1) / EXPAND_THREADS;
    SIMT_LAUNCH(lora_expand_kernel, dim3((unsigned)blocks, (unsigned)count), dim3(EXPAND_THREADS), 0, stream, bt,
                bt_f16, n_out, rank, t, rows, out);
    return (int)cudaGetLastError();
}
