/* NEON kernels with the dot product extension (ARMv8.2 SDOT: Cortex-A76/A78 and later, e.g.
 * Jetson Orin): the int8 dots through vdotq_s32, four int8 products summed into each int32
 * lane in one instruction, with no int16 step. Everything else is the base NEON code (see
 * table.h). Compiled with -march=armv8.2-a+dotprod (Makefile); called only after
 * llmm__cpu_kernels_get(CPU_ISA_NEON_DOTPROD) checked the CPU. Empty on other architectures. */
#include "kernel_table.h"

#if defined(__aarch64__)

#if !defined(__ARM_FEATURE_DOTPROD)
#error "dotprod.c needs -march=armv8.2-a+dotprod (see the Makefile)"
#endif

#include "table.h"
#include "simd.h"

static inline int32x4_t dot_block(int8x16_t w0, int8x16_t w1, int8x16_t x0, int8x16_t x1) {
    return vdotq_s32(vdotq_s32(vdupq_n_s32(0), w0, x0), w1, x1);
}
/* As the base table: 4 operand rows. Larger tiles fit the 32 registers but are unmeasured on
 * real ARM cores (qemu timings say nothing about one). */
#define Q_TILE_X 4

#include "gemm_int8.h"
#include "gemm_iq4_xs.h"

static inline int32x4_t dot16_acc(int32x4_t acc, int8x16_t w, int8x16_t x) { return vdotq_s32(acc, w, x); }
#define KQ_TILE_X 4

#include "gemm_kquant.h"
#include "gemm_legacy.h"

const cpu_kernels llmm__cpu_kernels_neon_dotprod = {
    .name = "dotprod",
    .isa = CPU_ISA_NEON_DOTPROD,
    .matmul =
        {
            [LLMM_TYPE_F32] = {llmm__neon_gemm_f32, CPU_OPERAND_F32},
            [LLMM_TYPE_F16] = {llmm__neon_gemm_f16, CPU_OPERAND_F16},
            [LLMM_TYPE_BF16] = {llmm__neon_gemm_bf16, CPU_OPERAND_BF16},
            [LLMM_TYPE_Q4_0] = {gemm_q4_0, CPU_OPERAND_Q8},
            [LLMM_TYPE_Q8_0] = {gemm_q8_0, CPU_OPERAND_Q8},
            [LLMM_TYPE_Q5_0] = {gemm_q5_0, CPU_OPERAND_Q8},
            [LLMM_TYPE_IQ4_NL] = {gemm_iq4_nl, CPU_OPERAND_Q8},
            [LLMM_TYPE_IQ4_XS] = {gemm_iq4_xs, CPU_OPERAND_Q8K},
            [LLMM_TYPE_Q4_1] = {gemm_q4_1, CPU_OPERAND_Q8_1},
            [LLMM_TYPE_Q5_1] = {gemm_q5_1, CPU_OPERAND_Q8_1},
            [LLMM_TYPE_Q2_K] = {gemm_q2_K, CPU_OPERAND_Q8K},
            [LLMM_TYPE_Q3_K] = {gemm_q3_K, CPU_OPERAND_Q8K},
            [LLMM_TYPE_Q4_K] = {gemm_q4_K, CPU_OPERAND_Q8K},
            [LLMM_TYPE_Q5_K] = {gemm_q5_K, CPU_OPERAND_Q8K},
            [LLMM_TYPE_Q6_K] = {gemm_q6_K, CPU_OPERAND_Q8K},
        },
    .quantize_q8 = llmm__neon_quantize_q8,
    .quantize_q8k = llmm__neon_quantize_q8k,
    .round_f16 = llmm__neon_round_f16,
    .rms_norm_row = llmm__neon_rms_norm_row,
    .silu_mul = llmm__neon_silu_mul,
    .dot_f32 = llmm__neon_dot_f32,
    .exp_sub_sum = llmm__neon_exp_sub_sum,
    .axpy = llmm__neon_axpy,
    .f16_to_f32 = llmm__neon_f16_to_f32,
    .attn_scores = llmm__neon_attn_scores,
    .attn_values = llmm__neon_attn_values,
    .attn_scores_f16 = llmm__neon_attn_scores_f16,
    .attn_values_f16 = llmm__neon_attn_values_f16,
};

#endif
