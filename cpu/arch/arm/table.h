/* The base NEON kernels the dotprod table reuses: the dotprod table differs only in the int8
 * dots (SDOT). Declarations only: callers must have checked llmm__cpu_kernels_get(CPU_ISA_NEON). */
#ifndef LLMM_ARM_TABLE_H
#define LLMM_ARM_TABLE_H

#include "kernel_table.h"

#if defined(__aarch64__)
void llmm__neon_gemm_f32(const llmm_tensor *w, size_t j0, size_t j1, const cpu_operand *x, size_t n_rows, float *out,
                   size_t ldo);
void llmm__neon_gemm_f16(const llmm_tensor *w, size_t j0, size_t j1, const cpu_operand *x, size_t n_rows, float *out,
                   size_t ldo);
void llmm__neon_gemm_bf16(const llmm_tensor *w, size_t j0, size_t j1, const cpu_operand *x, size_t n_rows, float *out,
                    size_t ldo);
void llmm__neon_quantize_q8(const float *x, int8_t *qs, float *d, int32_t *sum, size_t n);
void llmm__neon_quantize_q8k(const float *x, int8_t *qs, float *d, int16_t *bsums, size_t n);
void llmm__neon_round_f16(const float *x, float *out, size_t n);
void llmm__neon_rms_norm_row(const float *x, const float *w, float *out, size_t dim, float eps);
void llmm__neon_silu_mul(float *gate, const float *up, size_t n);
float llmm__neon_dot_f32(const float *a, const float *b, size_t n);
double llmm__neon_exp_sub_sum(float *s, size_t n, float max);
void llmm__neon_axpy(float *y, float a, const float *x, size_t n);
void llmm__neon_f16_to_f32(const uint16_t *h, float *out, size_t n);
void llmm__neon_attn_scores(const float *q, size_t nh, size_t hd, const float *const *rows, size_t n, float *scores,
                      size_t ld);
void llmm__neon_attn_values(float *out, size_t nh, size_t hd, const float *w, size_t ld, const float *const *rows,
                      size_t n);
void llmm__neon_attn_scores_f16(const float *q, size_t nh, size_t hd, const uint16_t *rows, size_t row_stride, size_t n,
                          float *scores, size_t ld);
void llmm__neon_attn_values_f16(float *out, size_t nh, size_t hd, const float *w, size_t ld, const uint16_t *rows,
                          size_t row_stride, size_t n);
#endif

#endif
