/* The Gated DeltaNet state kernels in AVX-512 (kernels/delta_tiles.h): the AVX-512 and AMX
 * tables' delta_step, delta_read and delta_update. Compiled with the AVX-512 target flags
 * (Makefile); called only after llmm__cpu_kernels_get(CPU_ISA_AVX512) checked the CPU. */
#include "kernel_table.h"

#if defined(__x86_64__)

#include "table.h"
#include "simd.h"

typedef __m512 dt_vec;
#define DT_LANES 16
SIMD_ALWAYS_INLINE dt_vec dt_load(const float *p) { return _mm512_loadu_ps(p); }
SIMD_ALWAYS_INLINE void dt_store(float *p, dt_vec v) { _mm512_storeu_ps(p, v); }
SIMD_ALWAYS_INLINE dt_vec dt_set1(float x) { return _mm512_set1_ps(x); }
SIMD_ALWAYS_INLINE dt_vec dt_zero(void) { return _mm512_setzero_ps(); }
SIMD_ALWAYS_INLINE dt_vec dt_mul(dt_vec a, dt_vec b) { return _mm512_mul_ps(a, b); }
SIMD_ALWAYS_INLINE dt_vec dt_sub(dt_vec a, dt_vec b) { return _mm512_sub_ps(a, b); }
SIMD_ALWAYS_INLINE dt_vec dt_fma(dt_vec a, dt_vec b, dt_vec c) { return _mm512_fmadd_ps(a, b, c); }
/* delta_step's block of 2 vectors is 32 columns, as AVX2's 4 (16 KiB of S at d = 128, in L1
 * for the update); the tiles have 32 registers: 4 x 4 accumulators */
#define DT_STEP_U 2
#define DT_READ_R 4
#define DT_READ_U 4
#define DT_UPDATE_R 4
#define DT_UPDATE_U 4

#define DT_NAME(kernel) llmm__avx512_##kernel
#include "kernels/delta_tiles.h"

#endif
