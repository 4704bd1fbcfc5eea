/* What the two NEON kernel tables share (neon.c, dotprod.c): they differ only in the int8 dots
 * (SDOT or not). The base NEON kernels both take are declared here and defined in neon.c; the
 * designated initializers of a cpu_kernels below name them, so that each shared entry is
 * written once. Both table files compile the same int8 and K-quant kernel headers (gemm_int8.h,
 * gemm_iq4_xs.h, gemm_kquant.h, gemm_legacy.h) with their own dot, under the same names, so
 * the matmul entries are one list too: NEON_MATMUL_KERNELS names those static functions of the
 * including file. Declarations only: callers must have checked llmm__cpu_kernels_get(CPU_ISA_NEON). */
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
void llmm__neon_gelu_mul(float *gate, const float *up, size_t n);
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

/* The matmul by weight type: the float kernels of neon.c and the including file's int8 and
 * K-quant kernels (see the top). */
#define NEON_MATMUL_KERNELS                                                                                     \
    .matmul = {                                                                                                 \
        [LLMM_TYPE_F32] = llmm__neon_gemm_f32,                                              \
        [LLMM_TYPE_F16] = llmm__neon_gemm_f16,                                              \
        [LLMM_TYPE_BF16] = llmm__neon_gemm_bf16,                                            \
        [LLMM_TYPE_Q4_0] = gemm_q4_0,                                                       \
        [LLMM_TYPE_Q8_0] = gemm_q8_0,                                                       \
        [LLMM_TYPE_Q5_0] = gemm_q5_0,                                                       \
        [LLMM_TYPE_IQ4_NL] = gemm_iq4_nl,                                                   \
        [LLMM_TYPE_IQ4_XS] = gemm_iq4_xs,                                                   \
        [LLMM_TYPE_Q4_1] = gemm_q4_1,                                                       \
        [LLMM_TYPE_Q5_1] = gemm_q5_1,                                                       \
        [LLMM_TYPE_Q2_K] = gemm_q2_K,                                                       \
        [LLMM_TYPE_Q3_K] = gemm_q3_K,                                                       \
        [LLMM_TYPE_Q4_K] = gemm_q4_K,                                                       \
        [LLMM_TYPE_Q5_K] = gemm_q5_K,                                                       \
        [LLMM_TYPE_Q6_K] = gemm_q6_K,                                                       \
    }
/* The operand, row and element-wise entries of neon.c. */
#define NEON_ROW_KERNELS                                                                                        \
    .quantize_q8 = llmm__neon_quantize_q8, .quantize_q8k = llmm__neon_quantize_q8k, .round_f16 = llmm__neon_round_f16, \
    .rms_norm_row = llmm__neon_rms_norm_row, .silu_mul = llmm__neon_silu_mul, .dot_f32 = llmm__neon_dot_f32,            \
    .gelu_mul = llmm__neon_gelu_mul,                                                                            \
    .exp_sub_sum = llmm__neon_exp_sub_sum, .axpy = llmm__neon_axpy, .f16_to_f32 = llmm__neon_f16_to_f32
/* The attention tiles of neon.c. */
#define NEON_ATTENTION_KERNELS                                                                                  \
    .attn_scores = llmm__neon_attn_scores, .attn_values = llmm__neon_attn_values,                                   \
    .attn_scores_f16 = llmm__neon_attn_scores_f16, .attn_values_f16 = llmm__neon_attn_values_f16
/* Gated DeltaNet's state kernels (delta_neon.c) */
void llmm__neon_delta_step(float *S, size_t d, const float *k, const float *q, const float *v, float beta, float decay,
                           float kq, float *o);
void llmm__neon_delta_read(const float *S, size_t d, const float *const *x, size_t n, float *y);
void llmm__neon_delta_update(float *S, size_t d, float decay, const float *a, const float *u, size_t n);
/* the short convolution (conv_neon.c) */
void llmm__neon_conv_rows(float *y, size_t ldy, const float *const *x, size_t n_out, const float *taps, size_t n_taps,
                          size_t c0, size_t c1);
#define NEON_DELTA_KERNELS                                                                                      \
    .delta_step = llmm__neon_delta_step, .delta_read = llmm__neon_delta_read, .delta_update = llmm__neon_delta_update, \
    .conv_rows = llmm__neon_conv_rows
#endif

#endif
