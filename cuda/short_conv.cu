// The gated short convolution of LFM2's recurrent layers (lib/backend/backend.h
// llmm_conv_batch): cpu/ops/short_conv.c on the device, with its operation order (u = B * X,
// then the taps summed in order from 0, then C * y), so that results are the CPU's bit for bit
// under -fmad=false.
#include "kernels.h"
#include "sequence_rows.cuh"

namespace {

constexpr int CONV_THREADS = 128;

// One block per (row, channels): the block of a sequence's first row runs that sequence's rows
// in order for its channels, then moves the state; the other blocks have nothing to do. A
// prompt step is one sequence, a decode step one row per sequence.
__global__ void short_conv_kernel(const float *bcx, float *out, const float *taps, float *states, size_t seq_stride,
                                  uint32_t n_rows, uint32_t dim, uint32_t kernel, const int32_t *pos,
                                  const uint32_t *slot) {
    const uint32_t c = blockIdx.y * blockDim.x + threadIdx.x;
    sequence_rows sr;
    if (c >= dim || !sequence_at(pos, slot, blockIdx.x, n_rows, &sr)) return;
    auto u = [&](uint32_t r) {
        const float *row = bcx + (size_t)r * 3 * dim;
        return row[c] * row[2 * (size_t)dim + c];
    };
    auto emit = [&](uint32_t r, float y) { out[(size_t)r * dim + c] = bcx[(size_t)r * 3 * dim + dim + c] * y; };
    causal_conv_channel(sr, pos, states + (size_t)sr.slot * seq_stride + c, dim, kernel, taps + (size_t)c * kernel, u,
                        emit);
}

} // namespace

int llmm__cu_short_conv(cudaStream_t stream, const float *bcx, float *out, const float *taps, float *states,
                        size_t seq_stride, uint32_t n_rows, uint32_t dim, uint32_t kernel, const int32_t *pos,
                        const uint32_t *slot) {
    if (n_rows == 0 || dim == 0) return 0;
    if (kernel == 0) return (int)cudaErrorInvalidValue;
    const dim3 grid(n_rows, (dim + CONV_THREADS - 1) / CONV_THREADS);
    SIMT_LAUNCH(short_conv_kernel, grid, dim3(CONV_THREADS), 0, stream, bcx, out, taps, states, seq_stride, n_rows,
                dim, kernel, pos, slot);
    return (int)cudaGetLastError();
}
