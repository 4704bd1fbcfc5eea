// LoRA deltas on the device, every row with its own adapters: the two passes of lib/backend/backend.h's
// lora_rows for one weight slot. Which adapter a row runs with is data (the step's entries into
// the table of resident adapters, kernels.h cu_lora_uses), read here per row, so a decode
// step's launches, and the graph captured from them, are the same whichever adapters its rows
// use. The projection is one block per (row, use): each warp takes ranks in turn, a dot of n_in
// values reduced across the warp; the expansion one thread per output column of a row, the
// rank products of each use added onto the output value in order with fused multiply-adds, as
// the CPU's lora_delta does. Operands are F32 or F16; B transposed is in the panels of
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

// The operands of step row `row`'s use k for the slot, NULL when it has none there.
__device__ inline const cu_lora_operand *use_operand(const cu_lora_uses &lu, uint32_t slot, size_t row, uint32_t k) {
    const uint32_t e = lu.entry[row * lu.uses + k];
    if (e == CU_LORA_NO_ENTRY) return NULL;
    const cu_lora_operand *op = &lu.table[(size_t)e * lu.n_slots + slot];
    return op->a ? op : NULL;
}

// The host's llmm__lora_scale: user * alpha / rank in that order, so the multiplier is the CPU's.
__device__ inline float multiplier(const cu_lora_operand *op, float user) {
    return op->alpha != 0.f ? user * op->alpha / (float)op->rank : user;
}

// block (i, k): t row (i, k) = multiplier * (A x row i) for the slot's operands of row row0 + i's use k.
__global__ void lora_rows_project_kernel(cu_lora_uses lu, uint32_t slot, size_t row0, const float *x, size_t n_in,
                                         float *t, size_t t_stride) {
    const size_t i = blockIdx.x;
    const uint32_t k = blockIdx.y;
    const cu_lora_operand *op = use_operand(lu, slot, row0 + i, k);
    if (!op) return; // the whole block: no barrier below
    const float scale = multiplier(op, lu.scale[(row0 + i) * lu.uses + k]);
    const float *xr = x + i * n_in;
    float *ti = t + (i * lu.uses + k) * t_stride;
    const unsigned lane = threadIdx.x % 32, warps = blockDim.x / 32;
    for (size_t r = threadIdx.x / 32; r < op->rank; r += warps) {
        float sum = 0.f;
        for (size_t c = lane; c < n_in; c += 32) sum += operand_at(op->a, op->a_f16, r * n_in + c) * xr[c];
        for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
        if (lane == 0) ti[r] = sum * scale;
    }
}

// out[i * n_out + o] += t row (i, k) . B^T column o for each use k of row row0 + i; block (columns, i).
__global__ void lora_rows_expand_kernel(cu_lora_uses lu, uint32_t slot, size_t row0, const float *t,
                                        size_t t_stride, float *out, size_t n_out) {
    const size_t o = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (o >= n_out) return;
    const size_t i = blockIdx.y, p = o / PANEL, j = o % PANEL;
    const size_t w = n_out - p * PANEL < PANEL ? n_out - p * PANEL : PANEL;
    float *y = out + i * n_out + o;
    float acc = *y;
    for (uint32_t k = 0; k < lu.uses; k++) {
        const cu_lora_operand *op = use_operand(lu, slot, row0 + i, k);
        if (!op) continue;
        const size_t rank = op->rank, base = p * PANEL * rank + j;
        const float *ti = t + (i * lu.uses + k) * t_stride;
        for (size_t r = 0; r < rank; r++) acc = __fmaf_rn(ti[r], operand_at(op->bt, op->bt_f16, base + r * w), acc);
    }
    *y = acc;
}

} // namespace

extern "C" int llmm__cu_lora_rows_project(cudaStream_t stream, cu_lora_uses lu, uint32_t slot, size_t row0,
                                          size_t rows, const float *x, size_t n_in, float *t, size_t t_stride) {
    if (rows == 0 || lu.uses == 0) return 0;
    if (rows > 65535 || lu.uses > 65535) return (int)cudaErrorInvalidValue;
    SIMT_LAUNCH(lora_rows_project_kernel, dim3((unsigned)rows, lu.uses), dim3(PROJECT_THREADS), 0, stream, lu, slot,
                row0, x, n_in, t, t_stride);
    return (int)cudaGetLastError();
}

extern "C" int llmm__cu_lora_rows_expand(cudaStream_t stream, cu_lora_uses lu, uint32_t slot, size_t row0,
                                         size_t rows, const float *t, size_t t_stride, float *out, size_t n_out) {
    if (rows == 0 || n_out == 0 || lu.uses == 0) return 0;
    if (rows > 65535) return (int)cudaErrorInvalidValue;
    const size_t blocks = (n_out + EXPAND_THREADS - 1) / EXPAND_THREADS;
    SIMT_LAUNCH(lora_rows_expand_kernel, dim3((unsigned)blocks, (unsigned)rows), dim3(EXPAND_THREADS), 0, stream, lu,
                slot, row0, t, t_stride, out, n_out);
    return (int)cudaGetLastError();
}
