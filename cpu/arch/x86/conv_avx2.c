/* The depthwise causal convolution in AVX2 + FMA (kernels/conv_tiles.h): the AVX2 and AVX-VNNI tables'
 * conv_rows. Compiled with those target flags (Makefile); called only after
 * llmm__cpu_kernels_get(CPU_ISA_AVX2) checked the CPU. */
#include "kernel_table.h"

#if defined(__x86_64__)

#include "table.h"
#include "simd.h"

typedef __m256 cv_vec;
#define CV_LANES 8
SIMD_ALWAYS_INLINE cv_vec cv_load(const float *p) { return _mm256_loadu_ps(p); }
SIMD_ALWAYS_INLINE void cv_store(float *p, cv_vec v) { _mm256_storeu_ps(p, v); }
SIMD_ALWAYS_INLINE cv_vec cv_zero(void) { return _mm256_setzero_ps(); }
SIMD_ALWAYS_INLINE cv_vec cv_mul(cv_vec a, cv_vec b) { return _mm256_mul_ps(a, b); }
SIMD_ALWAYS_INLINE cv_vec cv_add(cv_vec a, cv_vec b) { return _mm256_add_ps(a, b); }

#define CV_NAME(kernel) llmm__avx2_##kernel
#include "kernels/conv_tiles.h"

#endif
