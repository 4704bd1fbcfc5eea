/* What the x86 kernel tables share (avx2.c, avxvnni.c and its EVEX copy, avx512.c with the AMX
 * table): the AVX2 kernels every one of them takes, declared here and defined in avx2.c, and
 * the designated initializers of a cpu_kernels that name them, so that each shared entry is
 * written once. A table file lists only what is its own: its matmuls by weight type (one
 * kernel per type and ISA), its packed matmuls, and attention where its tiles are wider.
 * The AVX-512 table has its own int8 dots (VNNI), F16/BF16 matmul tiles and attention tiles
 * (attention.h with wider tiles). 512-bit versions of the other float kernels are not written:
 * the F32 matmul computes weights several times faster from cache than one core streams them,
 * so decode waits on memory, and Zen 4 runs 512-bit operations as two 256-bit halves anyway.
 * Declarations only: callers must have checked llmm__cpu_kernels_get(CPU_ISA_AVX2) first. */
#ifndef LLMM_X86_TABLE_H
#define LLMM_X86_TABLE_H

#include "kernel_table.h"

#if defined(__x86_64__)
void llmm__avx2_gemm_f32(const llmm_tensor *w, size_t j0, size_t j1, const cpu_operand *x, size_t n_rows, float *out,
                   size_t ldo);
void llmm__avx2_gemm_f16(const llmm_tensor *w, size_t j0, size_t j1, const cpu_operand *x, size_t n_rows, float *out,
                   size_t ldo);
void llmm__avx2_gemm_bf16(const llmm_tensor *w, size_t j0, size_t j1, const cpu_operand *x, size_t n_rows, float *out,
                    size_t ldo);
void llmm__avx2_quantize_q8(const float *x, int8_t *qs, float *d, int32_t *sum, size_t n);
void llmm__avx2_quantize_q8_1(const float *x, int8_t *qs, float *d, float *s, size_t n);
void llmm__avx2_quantize_q8k(const float *x, int8_t *qs, float *d, int16_t *bsums, size_t n);
void llmm__avx2_round_f16(const float *x, float *out, size_t n);
void llmm__avx2_rms_norm_row(const float *x, const float *w, float *out, size_t dim, float eps);
void llmm__avx2_silu_mul(float *gate, const float *up, size_t n);
void llmm__avx2_gelu_mul(float *gate, const float *up, size_t n);
float llmm__avx2_dot_f32(const float *a, const float *b, size_t n);
double llmm__avx2_exp_sub_sum(float *s, size_t n, float max);
void llmm__avx2_axpy(float *y, float a, const float *x, size_t n);
void llmm__avx2_f16_to_f32(const uint16_t *h, float *out, size_t n);
void llmm__avx2_attn_scores(const float *q, size_t nh, size_t hd, const float *const *rows, size_t n, float *scores,
                      size_t ld);
void llmm__avx2_attn_values(float *out, size_t nh, size_t hd, const float *w, size_t ld, const float *const *rows,
                      size_t n);
void llmm__avx2_attn_scores_f16(const float *q, size_t nh, size_t hd, const uint16_t *rows, size_t row_stride, size_t n,
                          float *scores, size_t ld);
void llmm__avx2_attn_values_f16(float *out, size_t nh, size_t hd, const float *w, size_t ld, const uint16_t *rows,
                          size_t row_stride, size_t n);
void llmm__avx2_delta_step(float *S, size_t d, const float *k, const float *q, const float *v, float beta, float decay,
                           float kq, float *o);
void llmm__avx2_delta_read(const float *S, size_t d, const float *const *x, size_t n, float *y);
void llmm__avx2_delta_update(float *S, size_t d, float decay, const float *a, const float *u, size_t n);
/* defined in delta_avx512.c; callers must have checked llmm__cpu_kernels_get(CPU_ISA_AVX512) */
void llmm__avx512_delta_step(float *S, size_t d, const float *k, const float *q, const float *v, float beta,
                             float decay, float kq, float *o);
void llmm__avx512_delta_read(const float *S, size_t d, const float *const *x, size_t n, float *y);
void llmm__avx512_delta_update(float *S, size_t d, float decay, const float *a, const float *u, size_t n);
/* defined in conv_avx2.c and conv_avx512.c, under the same checks */
void llmm__avx2_conv_rows(float *y, size_t ldy, const float *const *x, size_t n_out, const float *taps, size_t n_taps,
                          size_t c0, size_t c1);
void llmm__avx512_conv_rows(float *y, size_t ldy, const float *const *x, size_t n_out, const float *taps,
                            size_t n_taps, size_t c0, size_t c1);

/* The float matmuls of the AVX2 and AVX-VNNI tables: elements of a .matmul initializer. */
#define AVX2_FLOAT_MATMULS                                                                                      \
    [LLMM_TYPE_F32] = llmm__avx2_gemm_f32, [LLMM_TYPE_F16] = llmm__avx2_gemm_f16,                               \
    [LLMM_TYPE_BF16] = llmm__avx2_gemm_bf16
/* The operand, row and element-wise entries every x86 table takes from the AVX2 code. */
#define AVX2_ROW_KERNELS                                                                                    \
    .quantize_q8 = llmm__avx2_quantize_q8, .quantize_q8_1 = llmm__avx2_quantize_q8_1, .quantize_q8k = llmm__avx2_quantize_q8k, \
    .round_f16 = llmm__avx2_round_f16, .rms_norm_row = llmm__avx2_rms_norm_row, .silu_mul = llmm__avx2_silu_mul,              \
    .gelu_mul = llmm__avx2_gelu_mul, .dot_f32 = llmm__avx2_dot_f32, .exp_sub_sum = llmm__avx2_exp_sub_sum, .axpy = llmm__avx2_axpy, .f16_to_f32 = llmm__avx2_f16_to_f32
/* the AVX2 attention tiles (the AVX-512 table has wider ones) */
#define AVX2_ATTENTION_KERNELS                                                                              \
    .attn_scores = llmm__avx2_attn_scores, .attn_values = llmm__avx2_attn_values, .attn_scores_f16 = llmm__avx2_attn_scores_f16, \
    .attn_values_f16 = llmm__avx2_attn_values_f16
/* Gated DeltaNet's state kernels (delta_avx2.c, delta_avx512.c) and the short convolution (conv_avx2.c, conv_avx512.c) */
#define AVX2_DELTA_KERNELS                                                                                   \
    .delta_step = llmm__avx2_delta_step, .delta_read = llmm__avx2_delta_read, .delta_update = llmm__avx2_delta_update, \
    .conv_rows = llmm__avx2_conv_rows
#define AVX512_DELTA_KERNELS                                                                                 \
    .delta_step = llmm__avx512_delta_step, .delta_read = llmm__avx512_delta_read,                           \
    .delta_update = llmm__avx512_delta_update, .conv_rows = llmm__avx512_conv_rows
#endif

#endif
