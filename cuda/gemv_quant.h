/* gemv_quant.cu's internals that its test checks on their own: the activations' operand (the
 * first of llmm__cu_matmul's two launches), so the test can hold its bytes to the CPU's quantizer
 * exactly before it holds the matmul to a tolerance. Not part of the module boundary. */
#ifndef LLMM_CUDA_GEMV_QUANT_H
#define LLMM_CUDA_GEMV_QUANT_H

#include <stddef.h>
#include <stdint.h>

#include "portable.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The type llmm__cu_matmul quantizes activations to for a weight of this type: the operand of
 * its row (format/blocks.h llmm_type_operand: F32, F16, BF16, Q8_0, Q8_1 or Q8_K, as the CPU
 * backend's dots take them); UINT32_MAX for a type it cannot multiply by. */
uint32_t llmm__cu_matmul_operand_type(uint32_t weight_type);

/* dst (n_rows rows of ne0 values in the operand type, rows back to back, as the CPU's
 * from_float writes them) = x (n_rows, ne0). operand_type: F16, BF16, Q8_0, Q8_1 or Q8_K;
 * ne0 a multiple of its block size. */
int llmm__cu_quantize_operand(cudaStream_t stream, const float *x, uint32_t operand_type, size_t ne0, size_t n_rows,
                        void *dst);

#ifdef __cplusplus
}
#endif

#endif
