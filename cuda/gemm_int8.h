/* Prompt matmuls on int8 tensor cores, our own kernel (gemm_int8.cu): activations quantized to
 * Q8_0 as the CPU's dot takes them (llmm__cu_quantize_operand, gemv_quant.h) times weights of the
 * 32-weight block types without an offset (Q4_0, Q5_0, Q8_0, IQ4_NL) as the file stores them,
 * each block's integer dot exact and scaled as the CPU scales it. Not part of the module
 * boundary beyond the glue (backend.cu). */
#ifndef LLMM_CUDA_GEMM_INT8_H
#define LLMM_CUDA_GEMM_INT8_H

#include <stddef.h>
#include <stdint.h>

#include "portable.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 1 for the weight types llmm__cu_gemm_int8 multiplies: Q4_0, Q5_0, Q8_0, IQ4_NL. */
int llmm__cu_gemm_int8_supports(uint32_t type);

/* out (n_rows, ne1) = x times w^T: x_q8 is n_rows rows of ne0 / 32 Q8_0 blocks (34 bytes each,
 * back to back, as llmm__cu_quantize_operand writes them), w ne1 rows of ne0 values of type. Each
 * output is the CPU's scalar dot of that row pair bit for bit: per block (float)isum * (d_w *
 * d_x), summed over the blocks in order. cudaErrorInvalidValue (nothing launched) for a type
 * llmm__cu_gemm_int8_supports refuses or an ne0 that is not whole blocks. */
int llmm__cu_gemm_int8(cudaStream_t stream, const void *w, uint32_t type, size_t ne0, size_t ne1, const void *x_q8,
                 size_t n_rows, float *out);

/* Device scratch llmm__cu_gemm_int8_f32 needs: the Q8_0 operand of n_rows rows of ne0 values. */
size_t llmm__cu_gemm_int8_scratch_bytes(size_t ne0, size_t n_rows);
/* llmm__cu_gemm_int8 on float activations x (n_rows, ne0), quantized into scratch first. */
int llmm__cu_gemm_int8_f32(cudaStream_t stream, const void *w, uint32_t type, size_t ne0, size_t ne1, const float *x,
                     size_t n_rows, float *out, void *scratch);

#ifdef __cplusplus
}
#endif

#endif
