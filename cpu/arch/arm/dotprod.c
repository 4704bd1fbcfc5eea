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
    NEON_MATMUL_KERNELS,
    NEON_ROW_KERNELS,
    NEON_ATTENTION_KERNELS,
    NEON_DELTA_KERNELS,
};

#endif
