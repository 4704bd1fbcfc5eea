// The rows of one sequence in a step are consecutive and in position order (lib/backend/backend.h
// llmm_step), so the recurrent layers' kernels (short_conv.cu, delta_net.cu) give each sequence
// to the block of its first row, which walks the sequence's rows in order. A row's state slot
// (cu_step.state_slot: its sequence id) and position come from the step buffer on the device,
// so a decode step's launches are the same whichever sequences it holds, and its graph replays.
#ifndef LLMM_CUDA_SEQUENCE_ROWS_CUH
#define LLMM_CUDA_SEQUENCE_ROWS_CUH

#include "kernels.h"

// One sequence's rows [r0, r1) of a step: its first position p0 and its state slot.
struct sequence_rows {
    uint32_t r0, r1;
    int64_t p0;
    uint32_t slot;
};

// Whether r0 is the first row of a sequence (not a padding row, pos < 0, of a decode step's
// bucket); then *sr its rows.
__device__ inline bool sequence_at(const int32_t *pos, const uint32_t *slot, uint32_t r0, uint32_t n_rows,
                                   sequence_rows *sr) {
    if (pos[r0] < 0 || (r0 > 0 && slot[r0] == slot[r0 - 1])) return false;
    uint32_t r1 = r0 + 1;
    while (r1 < n_rows && slot[r1] == slot[r0]) r1++;
    *sr = sequence_rows{r0, r1, pos[r0], slot[r0]};
    return true;
}

// The causal depthwise convolution of one channel over a sequence's rows, in the CPU's order
// (cpu/ops/short_conv.c, delta_net.c): row r's y = sum over j < kernel of taps[j] *
// u(pos[r] - kernel + 1 + j), u of a position at or after p0 from the step's row (input(row)),
// before p0 from the state (kernel - 1 values state_stride apart, oldest first, ending at p0 -
// 1), zero before position 0; emit(r, y) takes each result. Then the state moves to the last
// row, ascending: a value still needed sits at a higher index than the one written.
template <typename Input, typename Emit>
__device__ inline void causal_conv_channel(const sequence_rows &sr, const int32_t *pos, float *state,
                                           size_t state_stride, uint32_t kernel, const float *taps, Input input,
                                           Emit emit) {
    auto at = [&](int64_t q) -> float {
        if (q < 0) return 0.0f;
        if (q >= sr.p0) return input(sr.r0 + (uint32_t)(q - sr.p0));
        return state[(size_t)((int64_t)kernel - 1 - (sr.p0 - q)) * state_stride];
    };
    for (uint32_t r = sr.r0; r < sr.r1; r++) {
        float y = 0.0f;
        for (uint32_t j = 0; j < kernel; j++) y += at((int64_t)pos[r] - (int64_t)kernel + 1 + (int64_t)j) * taps[j];
        emit(r, y);
    }
    const int64_t p_last = pos[sr.r1 - 1];
    for (uint32_t i = 0; i + 1 < kernel; i++)
        state[(size_t)i * state_stride] = at(p_last - (int64_t)kernel + 2 + (int64_t)i);
}

#endif
