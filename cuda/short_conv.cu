// The gated short convolution of LFM2's recurrent layers (lib/backend/backend.h
// llmm_conv_batch): cpu/ops/short_conv.c on the device, with its operation order (u = B * X,
// then the taps summed in order from 0, then C * y), so that results are the CPU's bit for bit
// under -fmad=false.
#include "kernels.h"
#include "sequence_rows.cuh"

namespace {

constexpr int CONV_THREADS = 128;

// u of position q, channel c, for the sequence whose rows start at r0 (position p0) and whose
// state ends at p0 - 1; positions before 0 are zero and never read from the state.
__device__ inline float conv_input(const float *bcx, const float *state, uint32_t dim, uint32_t kernel, uint32_t r0,
                                   int64_t p0, int64_t q, uint32_t c) {
    if (q < 0) return 0.0f;
    if (q >= p0) {
        const float *row = bcx + (size_t)(r0 + (uint32_t)(q - p0)) * 3 * dim;
        return row[c] * row[2 * (size_t)dim + c];
    }
    return state[(size_t)((int64_t)kernel - 1 - (p0 - q)) * dim + c];
}

// One block per (row, channels): the block of a sequence's first row runs that sequence's rows
// in order for its channels, then moves the state; the other blocks have nothing to do. A
// prompt step is one sequence, a decode step one row per sequence.
__global__ void short_conv_kernel(const float *bcx, float *out, const float *taps, float *states, size_t seq_stride,
                                  uint32_t n_rows, uint32_t dim, uint32_t kernel, const int32_t *pos,
                                  const uint32_t *seq) {
    const uint32_t r0 = blockIdx.x;
    const uint32_t c = blockIdx.y * blockDim.x + threadIdx.x;
    const uint32_t r1 = sequence_rows_end(seq, r0, n_rows);
    if (c >= dim || r1 == 0) return;
    float *state = states + (size_t)seq[r0] * seq_stride;
    const int64_t p0 = pos[r0];
    for (uint32_t r = r0; r < r1; r++) {
        float y = 0.0f;
        for (uint32_t j = 0; j < kernel; j++)
            y += conv_input(bcx, state, dim, kernel, r0, p0, (int64_t)pos[r] - (int64_t)kernel + 1 + (int64_t)j, c) *
                 taps[(size_t)c * kernel + j];
        out[(size_t)r * dim + c] = bcx[(size_t)r * 3 * dim + dim + c] * y;
    }
    // ascending: a state row still needed sits at a higher index than the one written
    const int64_t p_last = pos[r1 - 1];
    for (uint32_t i = 0; i + 1 < kernel; i++)
        state[(size_t)i * dim + c] =
            conv_input(bcx, state, dim, kernel, r0, p0, p_last - (int64_t)kernel + 2 + (int64_t)i, c);
}

} // namespace

int llmm__cu_short_conv(cudaStream_t stream, const float *bcx, float *out, const float *taps, float *states,
                        size_t seq_stride, uint32_t n_rows, uint32_t dim, uint32_t kernel, const int32_t *pos,
                        const uint32_t *seq) {
    if (n_rows == 0 || dim == 0) return 0;
    if (kernel == 0) return (int)cudaErrorInvalidValue;
    const dim3 grid(n_rows, (dim + CONV_THREADS - 1) / CONV_THREADS);
    SIMT_LAUNCH(short_conv_kernel, grid, dim3(CONV_THREADS), 0, stream, bcx, out, taps, states, seq_stride, n_rows,
                dim, kernel, pos, seq);
    return (int)cudaGetLastError();
}
