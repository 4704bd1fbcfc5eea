/* The Gated DeltaNet state kernels in AVX2 + FMA (kernels/delta_tiles.h): the AVX2 and AVX-VNNI
 * tables' delta_step, delta_read and delta_update. Compiled with those target flags (Makefile);
 * called only after llmm__cpu_kernels_get(CPU_ISA_AVX2) checked the CPU. */
#include "kernel_table.h"

#if defined(__x86_64__)

#include "table.h"
#include "simd.h"

typedef __m256 dt_vec;
#define DT_LANES 8
SIMD_ALWAYS_INLINE dt_vec dt_load(const float *p) { return _mm256_loadu_ps(p); }
SIMD_ALWAYS_INLINE void dt_store(float *p, dt_vec v) { _mm256_storeu_ps(p, v); }
SIMD_ALWAYS_INLINE dt_vec dt_set1(float x) { return _mm256_set1_ps(x); }
SIMD_ALWAYS_INLINE dt_vec dt_zero(void) { return _mm256_setzero_ps(); }
SIMD_ALWAYS_INLINE dt_vec dt_mul(dt_vec a, dt_vec b) { return _mm256_mul_ps(a, b); }
SIMD_ALWAYS_INLINE dt_vec dt_sub(dt_vec a, dt_vec b) { return _mm256_sub_ps(a, b); }
SIMD_ALWAYS_INLINE dt_vec dt_fma(dt_vec a, dt_vec b, dt_vec c) { return _mm256_fmadd_ps(a, b, c); }
/* 16 registers: delta_step's 8 accumulators and 2 broadcasts; the tiles' 8 accumulators, 2
 * loaded vectors and a broadcast */
#define DT_STEP_U 4
#define DT_READ_R 4
#define DT_READ_U 2
#define DT_UPDATE_R 4
#define DT_UPDATE_U 2

#define DT_NAME(kernel) llmm__avx2_##kernel
#include "kernels/delta_tiles.h"

#endif
