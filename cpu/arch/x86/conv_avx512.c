/* The depthwise causal convolution in AVX-512 (kernels/conv_tiles.h): the AVX-512 and AMX tables'
 * conv_rows. Compiled with those target flags (Makefile); called only after
 * llmm__cpu_kernels_get(CPU_ISA_AVX512) checked the CPU. */
#include "kernel_table.h"

#if defined(__x86_64__)

#include "table.h"
#include "simd.h"

typedef __m512 cv_vec;
#define CV_LANES 16
SIMD_ALWAYS_INLINE cv_vec cv_load(const float *p) { return _mm512_loadu_ps(p); }
SIMD_ALWAYS_INLINE void cv_store(float *p, cv_vec v) { _mm512_storeu_ps(p, v); }
SIMD_ALWAYS_INLINE cv_vec cv_zero(void) { return _mm512_setzero_ps(); }
SIMD_ALWAYS_INLINE cv_vec cv_mul(cv_vec a, cv_vec b) { return _mm512_mul_ps(a, b); }
SIMD_ALWAYS_INLINE cv_vec cv_add(cv_vec a, cv_vec b) { return _mm512_add_ps(a, b); }

#define CV_NAME(kernel) llmm__avx512_##kernel
#include "kernels/conv_tiles.h"

#endif
