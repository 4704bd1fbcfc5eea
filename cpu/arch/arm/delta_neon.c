/* The Gated DeltaNet state kernels in Advanced SIMD (kernels/delta_tiles.h): the NEON and
 * dotprod tables' delta_step, delta_read and delta_update. */
#include "kernel_table.h"

#if defined(__aarch64__)

#include "table.h"
#include "simd.h"

typedef float32x4_t dt_vec;
#define DT_LANES 4
SIMD_ALWAYS_INLINE dt_vec dt_load(const float *p) { return vld1q_f32(p); }
SIMD_ALWAYS_INLINE void dt_store(float *p, dt_vec v) { vst1q_f32(p, v); }
SIMD_ALWAYS_INLINE dt_vec dt_set1(float x) { return vdupq_n_f32(x); }
SIMD_ALWAYS_INLINE dt_vec dt_zero(void) { return vdupq_n_f32(0.f); }
SIMD_ALWAYS_INLINE dt_vec dt_mul(dt_vec a, dt_vec b) { return vmulq_f32(a, b); }
SIMD_ALWAYS_INLINE dt_vec dt_sub(dt_vec a, dt_vec b) { return vsubq_f32(a, b); }
SIMD_ALWAYS_INLINE dt_vec dt_fma(dt_vec a, dt_vec b, dt_vec c) { return vfmaq_f32(c, a, b); }
/* 32 registers of 4 lanes: delta_step's block of 8 vectors is 32 columns (16 accumulators);
 * the tiles' 4 x 4 accumulators */
#define DT_STEP_U 8
#define DT_READ_R 4
#define DT_READ_U 4
#define DT_UPDATE_R 4
#define DT_UPDATE_U 4

#define DT_NAME(kernel) llmm__neon_##kernel
#include "kernels/delta_tiles.h"

#endif
