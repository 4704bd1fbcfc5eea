/* The depthwise causal convolution in Advanced SIMD (kernels/conv_tiles.h): the NEON and
 * dotprod tables' conv_rows. */
#include "kernel_table.h"

#if defined(__aarch64__)

#include "table.h"
#include "simd.h"

typedef float32x4_t cv_vec;
#define CV_LANES 4
SIMD_ALWAYS_INLINE cv_vec cv_load(const float *p) { return vld1q_f32(p); }
SIMD_ALWAYS_INLINE void cv_store(float *p, cv_vec v) { vst1q_f32(p, v); }
SIMD_ALWAYS_INLINE cv_vec cv_zero(void) { return vdupq_n_f32(0.f); }
SIMD_ALWAYS_INLINE cv_vec cv_mul(cv_vec a, cv_vec b) { return vmulq_f32(a, b); }
SIMD_ALWAYS_INLINE cv_vec cv_add(cv_vec a, cv_vec b) { return vaddq_f32(a, b); }

#define CV_NAME(kernel) llmm__neon_##kernel
#include "kernels/conv_tiles.h"

#endif
