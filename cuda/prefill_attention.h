/* Tiled causal attention for a prompt chunk (cuda/prefill_attention.cu): the rows of one
 * sequence in a step attend over the paged KV pool with each K/V row loaded once per tile of
 * query rows, where llmm__cu_attention (kernels.h) reads it once per row. Same math and masking as
 * llmm__cu_attention; the module glue (backend.cu) chooses which one runs. */
#ifndef LLMM_CUDA_PREFILL_ATTENTION_H
#define LLMM_CUDA_PREFILL_ATTENTION_H

#include <stddef.h>
#include <stdint.h>

#include "kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* out rows [row_begin, row_end) (each n_head * head_dim values) = attention of the same rows of
 * q over layer of the pool: row r's head h over positions [start, pos[r]] of its sequence,
 * start = pos[r] + 1 - window when 0 < window < pos[r] + 1, else 0; scores q.k * scale, then
 * softcap * tanh(score / softcap) when softcap > 0; the K/V head of query head h is
 * h / (n_head / kv->n_head_kv). The rows must be one sequence's: they share one block table
 * (a tile of rows reads the table of its row with the largest position, which must cover every
 * position up to it), and their own K/V rows are in the pool already (llmm__cu_kv_write). Positions
 * may come in any order, each row is masked by its own. A row with pos[r] < 0 (padding) is left
 * unwritten, as are all rows outside the range. q, out: device (step->n_rows, n_head *
 * head_dim). Requires kv->head_dim 1 to 256 (as llmm__cu_attention), n_head a nonzero multiple of
 * kv->n_head_kv, row_begin <= row_end <= step->n_rows, a KV type 0 to 2, layer < kv->n_layer;
 * otherwise returns cudaErrorInvalidValue and launches nothing. Needs no scratch and allocates
 * nothing; one launch, whose grid depends on the row count and the heads only (a CUDA graph may
 * capture it). */
int llmm__cu_prefill_attention(cudaStream_t stream, const cu_kv *kv, const cu_step *step, uint32_t layer, const float *q,
                         float *out, uint32_t n_head, uint32_t window, float scale, float softcap, size_t row_begin,
                         size_t row_end);

#ifdef __cplusplus
}
#endif

#endif
