// The rows of one sequence in a step are consecutive and in position order (lib/backend/backend.h
// llmm_step), so the recurrent layers' kernels (short_conv.cu, delta_net.cu) give each sequence
// to the block of its first row, which walks the sequence's rows in order.
#ifndef LLMM_CUDA_SEQUENCE_ROWS_CUH
#define LLMM_CUDA_SEQUENCE_ROWS_CUH

#include "portable.h"

// The end of the rows of r0's sequence (seq: each row's sequence id), or 0 when r0 is not the
// sequence's first row.
__device__ inline uint32_t sequence_rows_end(const uint32_t *seq, uint32_t r0, uint32_t n_rows) {
    if (r0 > 0 && seq[r0] == seq[r0 - 1]) return 0;
    uint32_t r1 = r0 + 1;
    while (r1 < n_rows && seq[r1] == seq[r0]) r1++;
    return r1;
}

#endif
