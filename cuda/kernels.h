/* The CUDA backend's kernel families, as host-side launchers with C linkage: what the module
 * glue (backend.cu) calls, one file per family (gemv_quant.cu, norm_rope_act.cu,
 * attention.cu). Every pointer named `dev` or typed as a tensor's data is device memory; the
 * launchers enqueue on the stream and return without synchronising. They return 0, or a
 * nonzero cudaError_t when a launch failed.
 *
 * Each .cu file is compiled twice (portable.h): by nvcc for the GPU and, in `make test`, by the
 * host C++ compiler against the test-only SIMT emulation (tests/simt/simt.h), which runs every
 * launch on the CPU (the emulated build is synchronous). The per-element math that must match the CPU backend lives
 * in __host__ __device__ headers (quant_blocks.cuh, softmax_merge.cuh). */
#ifndef LLMM_CUDA_KERNELS_H
#define LLMM_CUDA_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "portable.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The KV pool as the core lays it out (lib/backend/backend.h llmm_kv_layout), on the device. */
typedef struct cu_kv {
    uint8_t *pool;
    uint32_t n_layer, n_head_kv, head_dim;
    uint32_t type; /* enum llmm_kv_type: 0 F32, 1 F16, 2 Q8 */
    uint32_t block_shift;
    size_t row_bytes, block_stride, head_stride;
} cu_kv;

/* One step's per-row inputs in fixed device buffers, updated once per step by the glue. Row r
 * is token tokens[r] at position pos[r]; its sequence's block table starts at
 * tables + table_start[r]. A row with pos[r] < 0 pads a decode step to its batch bucket
 * (backend.cu): llmm__cu_kv_write stores nothing for it and llmm__cu_attention leaves its output rows
 * unwritten; the recurrent layers' kernels skip it; the other kernels compute it like any row,
 * and nobody reads the result. */
typedef struct cu_step {
    uint32_t n_rows;
    const int32_t *tokens;      /* device (n_rows) */
    const int32_t *pos;         /* device (n_rows) */
    const uint32_t *table_start; /* device (n_rows) */
    const uint32_t *tables;     /* device: the step's block tables, one after another */
    const uint32_t *state_slot; /* device (n_rows): each row's recurrent state slot, its sequence
                                   id (lib/context/recurrent.c); UINT32_MAX for a padding row */
} cu_step;

/* ---------------------------------------------------------------- gemv_quant.cu */

/* Whether llmm__cu_matmul and llmm__cu_embed have a kernel for weights of this type (the
 * backend's supports_type). */
int llmm__cu_matmul_supports(uint32_t type);
/* Device scratch bytes llmm__cu_matmul needs for n_rows activation rows of ne0 values against a
 * weight of this type (its operand: the activations quantized as the CPU backend's dot table
 * says: the operand type of its row in lib/format/blocks.h). */
size_t llmm__cu_matmul_scratch_bytes(uint32_t type, size_t ne0, size_t n_rows);
/* out (n_rows, ne1) = x (n_rows, ne0) times w (ne1 rows of ne0 values of type, as stored in
 * the GGUF file) transposed. scratch: llmm__cu_matmul_scratch_bytes of device memory, 16-byte aligned
 * (the GEMV reads its padded activation blocks 16 bytes at a time). */
int llmm__cu_matmul(cudaStream_t stream, const void *w, uint32_t type, size_t ne0, size_t ne1, const float *x,
              size_t n_rows, float *out, void *scratch);
/* out (n, ne0) = rows tokens[i] of table (ne1 rows of type), dequantized; a token outside
 * [0, ne1) leaves its row NaN and sets *bad (device int) to 1. */
int llmm__cu_embed(cudaStream_t stream, const void *table, uint32_t type, size_t ne0, size_t ne1, const int32_t *tokens,
             size_t n, float *out, int *bad);

/* ---------------------------------------------------------------- norm_rope_act.cu */

int llmm__cu_rms_norm(cudaStream_t stream, const float *x, const float *weight, float *out, size_t n_rows, size_t dim,
                float eps);
int llmm__cu_add(cudaStream_t stream, float *dst, const float *src, size_t n);
int llmm__cu_add_rows(cudaStream_t stream, float *x, const float *bias, size_t n_rows, size_t dim);
int llmm__cu_scale(cudaStream_t stream, float *x, size_t n, float s);
int llmm__cu_softcap(cudaStream_t stream, float *x, size_t n, float cap);
/* act: 0 SiLU, 1 GELU (tanh), as lib/model/arch.h llmm_activation */
int llmm__cu_glu(cudaStream_t stream, float *gate, const float *up, size_t n, uint32_t act);
/* kind: lib/model/arch.h llmm_rope_kind (0 adjacent pairs, 1 NeoX halves); freq_factors: device
 * (n_rot / 2) or NULL */
int llmm__cu_rope(cudaStream_t stream, float *x, size_t n_rows, size_t n_heads, size_t head_dim, const int32_t *pos,
            uint32_t n_rot, float base, float freq_scale, float mscale, uint32_t kind, const float *freq_factors);

/* ---------------------------------------------------------------- attention.cu */

/* K and V rows (n_rows, n_head_kv * head_dim) of layer into the pool at the rows' positions. */
int llmm__cu_kv_write(cudaStream_t stream, const cu_kv *kv, const cu_step *step, uint32_t layer, const float *k,
                const float *v);
/* Device scratch bytes llmm__cu_attention needs for any step of up to n_rows rows of a context whose
 * sequences are at most max_kv positions long (0 when max_kv fits one split). Reserve it once:
 * the launch geometry, hence the scratch a step uses, depends on n_rows, the heads, head_dim and
 * max_kv only, never on the step's positions. */
size_t llmm__cu_attention_scratch_bytes(size_t n_rows, uint32_t n_head, uint32_t head_dim, size_t max_kv);
/* out (n_rows, n_head * head_dim): row r's heads over positions [start, pos[r] + 1) of its
 * sequence in layer, start = pos[r] + 1 - window when 0 < window < pos[r] + 1, else 0; scores
 * are q.k * scale, then softcap * tanh(score / softcap) when softcap > 0. q (n_rows, n_head *
 * head_dim). head_dim up to 256, n_head a multiple of kv->n_head_kv.
 * max_kv: the context's longest sequence, fixed for its life (the split geometry is built on it,
 * so a captured step replays with any positions); a row longer than max_kv is still attended in
 * full (its last split takes the rest), only less in parallel. scratch: device memory of
 * scratch_bytes >= llmm__cu_attention_scratch_bytes(step->n_rows, n_head, head_dim, max_kv), else the
 * call fails with cudaErrorInvalidValue and launches nothing. */
int llmm__cu_attention(cudaStream_t stream, const cu_kv *kv, const cu_step *step, uint32_t layer, const float *q,
                 float *out, uint32_t n_head, uint32_t window, float scale, float softcap, size_t max_kv,
                 void *scratch, size_t scratch_bytes);

/* ---------------------------------------------------------------- lora.cu */

/* The table of resident adapters (lib/backend/backend.h lora_table_*) on the device: entry e's
 * operands of weight slot s at table[e * n_slots + s], a NULL a where the adapter leaves the
 * slot alone. A is rank rows of n_in values, B transposed rank rows of n_out in
 * LLMM_LORA_PANEL-column panels, each F16 when its flag says so, else F32. */
typedef struct cu_lora_operand {
    const void *a;
    const void *bt;
    uint32_t rank, a_f16, bt_f16;
    float alpha; /* the multiplier of a use at user scale u: u * alpha / rank, or u when alpha is 0 */
} cu_lora_operand;

/* The table and a step's per-row uses of it (device arrays): row r's use k is entry[r * uses +
 * k] at user scale scale[r * uses + k]; an entry of CU_LORA_NO_ENTRY is no adapter. */
#define CU_LORA_NO_ENTRY 0xffffffffu
typedef struct cu_lora_uses {
    const cu_lora_operand *table;
    uint32_t n_slots;
    uint32_t uses;
    const uint32_t *entry;
    const float *scale;
} cu_lora_uses;

/* The deltas of one weight slot for the step's rows row0 .. row0 + rows - 1, whatever adapter
 * each runs with (none included). Projection: t[(i * uses + k) * t_stride + r] = multiplier *
 * (A row r . x row i) of row row0 + i's use k, for r below that entry's rank (t_stride at least
 * the table's largest rank). Expansion: out row i (n_out values) += each use's t row times its
 * B transposed, uses in order and each one's rank products in order with fused multiply-adds.
 * The launches depend on rows, uses, the slot and the sizes only, so a graph replays them for any
 * assignment of adapters to rows. rows at most 65535. */
int llmm__cu_lora_rows_project(cudaStream_t stream, cu_lora_uses lu, uint32_t slot, size_t row0, size_t rows,
                               const float *x, size_t n_in, float *t, size_t t_stride);
int llmm__cu_lora_rows_expand(cudaStream_t stream, cu_lora_uses lu, uint32_t slot, size_t row0, size_t rows,
                              const float *t, size_t t_stride, float *out, size_t n_out);

/* ---------------------------------------------------------------- short_conv.cu */

/* The gated short convolution of one recurrent layer (lib/backend/backend.h llmm_conv_batch)
 * over n_rows rows: bcx (n_rows, 3 * dim), out (n_rows, dim), taps (dim rows of kernel), the
 * layer's state of slot 0 at states and seq_stride floats per slot; row r is at position pos[r]
 * of the sequence whose state is slot slot[r] (device arrays: cu_step's pos and state_slot), a
 * sequence's rows consecutive and in order; rows at a position below 0 (a decode step's
 * padding) are skipped. */
int llmm__cu_short_conv(cudaStream_t stream, const float *bcx, float *out, const float *taps, float *states,
                        size_t seq_stride, uint32_t n_rows, uint32_t dim, uint32_t kernel, const int32_t *pos,
                        const uint32_t *slot);

/* ---------------------------------------------------------------- delta_net.cu */

/* qwen35's query rows: n_groups rows of 2 * width into their halves a and b (n_groups, width). */
int llmm__cu_split_halves(cudaStream_t stream, const float *src, float *a, float *b, size_t n_groups, size_t width);
/* gate = up * sigmoid(gate) over n values (glu's LLMM_ACT_SIGMOID) */
int llmm__cu_sigmoid_mul(cudaStream_t stream, float *gate, const float *up, size_t n);
/* The Gated DeltaNet mixer of lib/backend/backend.h llmm_delta_batch (its pointers device
 * memory) over its rows; row r at position pos[r] of the sequence whose state is slot slot[r]
 * (device arrays, as llmm__cu_short_conv's; padding rows skipped). A sequence of one row runs
 * the token-by-token recurrence; a longer one the chunked form of the delta rule in chunks of
 * `chunk` rows (the CPU's LLMM_DELTA_CHUNK, so the two backends round alike), or the recurrence
 * too when chunk is 0. chunk is at most 64 and its shared memory, 4 (2 chunk head_dim + 2 chunk^2)
 * bytes, at most LLMM_CU_DELTA_SHARED_MAX: else cudaErrorInvalidValue. */
#define LLMM_CU_DELTA_SHARED_MAX 49152 /* the dynamic shared memory a block gets without opting in */
struct llmm_delta_batch;
int llmm__cu_gated_delta_net(cudaStream_t stream, const struct llmm_delta_batch *b, const int32_t *pos,
                             const uint32_t *slot, uint32_t chunk);
/* 0 when llmm__cu_gated_delta_net takes b's shape and this chunk, else cudaErrorInvalidValue. */
int llmm__cu_gated_delta_net_check(const struct llmm_delta_batch *b, uint32_t chunk);

#ifdef __cplusplus
}
#endif

#endif
