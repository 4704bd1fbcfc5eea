/* AVX2 with 256-bit VNNI: AVX-VNNI, which Intel client CPUs have had since Alder Lake (2021)
 * without AVX-512, so most current x86 laptops. vpdpbusd sums four u8 x s8 products into each
 * int32 lane in one instruction, where AVX2 spends vpmaddubsw, vpmaddwd and an add (and the
 * sign trick for signed weights). Only the packed 16-row tiles use it (gemm_packed8.h
 * with PK_VNNI): they run decode once the copies exist, and every prompt of 4 rows or more
 * (packing each segment on the fly before the copies exist). Everything else is the AVX2
 * table's: its 8-row kernels (decode before the copies, 1-3 rows), the float kernels, Q2_K and
 * Q3_K. Compiled with -mavxvnni (Makefile); called only after llmm__cpu_kernels_get(CPU_ISA_AVX_VNNI)
 * checked the CPU.
 *
 * avxvnni_evex.c compiles this file again with the AVX-512 flags: the same instruction
 * in its EVEX encoding (AVX512-VNNI with VL), for CPUs with AVX-512 but not AVX-VNNI, where the
 * AVX-512 table is chosen anyway. It exists so that this code is tested and timed on the AVX-512
 * development and CI machines, which lack AVX-VNNI (and qemu-x86_64 does not emulate it).
 * Empty on other architectures. */
#include "kernel_table.h"

#if defined(__x86_64__)

#if defined(LLMM_AVXVNNI_EVEX)
#if !defined(__AVX512VNNI__) || !defined(__AVX512VL__)
#error "avxvnni_evex.c needs -mavx512vl -mavx512vnni (see the Makefile)"
#endif
#define pk_dpbusd _mm256_dpbusd_epi32
#define AVXVNNI_TABLE llmm__cpu_kernels_avxvnni_evex
#else
#if !defined(__AVXVNNI__)
#error "avxvnni.c needs -mavxvnni (see the Makefile)"
#endif
#define pk_dpbusd _mm256_dpbusd_avx_epi32
#define AVXVNNI_TABLE llmm__cpu_kernels_avxvnni
#endif

#include "table.h"
#include "simd.h"

#define PK_VNNI 1
#include "gemm_packed8.h"

/* The AVX2 table's matmul for a type, through its table (its 8-row kernels are its own). */
#define AVX2_MATMUL(NAME, TYPE)                                                                                \
    static void NAME(const llmm_tensor *w, size_t j0, size_t j1, const cpu_operand *x, size_t n_rows,         \
                     float *out, size_t ldo) {                                                                \
        llmm__cpu_kernels_avx2.matmul[TYPE](w, j0, j1, x, n_rows, out, ldo);                                  \
    }
AVX2_MATMUL(avx2_q4_0, LLMM_TYPE_Q4_0)
AVX2_MATMUL(avx2_q5_0, LLMM_TYPE_Q5_0)
AVX2_MATMUL(avx2_q4_1, LLMM_TYPE_Q4_1)
AVX2_MATMUL(avx2_q5_1, LLMM_TYPE_Q5_1)
AVX2_MATMUL(avx2_q8_0, LLMM_TYPE_Q8_0)
AVX2_MATMUL(avx2_iq4_nl, LLMM_TYPE_IQ4_NL)
AVX2_MATMUL(avx2_iq4_xs, LLMM_TYPE_IQ4_XS)
AVX2_MATMUL(avx2_q2_K, LLMM_TYPE_Q2_K)
AVX2_MATMUL(avx2_q3_K, LLMM_TYPE_Q3_K)
AVX2_MATMUL(avx2_q4_K, LLMM_TYPE_Q4_K)
AVX2_MATMUL(avx2_q5_K, LLMM_TYPE_Q5_K)
AVX2_MATMUL(avx2_q6_K, LLMM_TYPE_Q6_K)

/* Weights as stored: the AVX2 table's 8-row kernels below pk_fly_min_rows operand rows (it
 * answers them so), the tiles packed on the fly from there. */
PK_GEMM_AS_STORED(vnni_q4_0, avx2_q4_0, PK_Q4_0)
PK_GEMM_AS_STORED(vnni_q5_0, avx2_q5_0, PK_Q5_0)
PK_GEMM_AS_STORED(vnni_q4_1, avx2_q4_1, PK_Q4_1)
PK_GEMM_AS_STORED(vnni_q5_1, avx2_q5_1, PK_Q5_1)
PK_GEMM_AS_STORED(vnni_q8_0, avx2_q8_0, PK_Q8_0)
PK_GEMM_AS_STORED(vnni_iq4_nl, avx2_iq4_nl, PK_IQ4_NL)
PK_GEMM_AS_STORED(vnni_iq4_xs, avx2_iq4_xs, PK_IQ4_XS)
PK_GEMM_AS_STORED(vnni_q4_K, avx2_q4_K, PK_Q4_K)
PK_GEMM_AS_STORED(vnni_q5_K, avx2_q5_K, PK_Q5_K)
PK_GEMM_AS_STORED(vnni_q6_K, avx2_q6_K, PK_Q6_K)

const cpu_kernels AVXVNNI_TABLE = {
    .name = "avxvnni",
    .isa = CPU_ISA_AVX_VNNI,
    .matmul =
        {
            AVX2_FLOAT_MATMULS,
            [LLMM_TYPE_Q4_0] = vnni_q4_0,
            [LLMM_TYPE_Q8_0] = vnni_q8_0,
            [LLMM_TYPE_Q5_0] = vnni_q5_0,
            [LLMM_TYPE_IQ4_NL] = vnni_iq4_nl,
            [LLMM_TYPE_IQ4_XS] = vnni_iq4_xs,
            [LLMM_TYPE_Q4_1] = vnni_q4_1,
            [LLMM_TYPE_Q5_1] = vnni_q5_1,
            [LLMM_TYPE_Q2_K] = avx2_q2_K,
            [LLMM_TYPE_Q3_K] = avx2_q3_K,
            [LLMM_TYPE_Q4_K] = vnni_q4_K,
            [LLMM_TYPE_Q5_K] = vnni_q5_K,
            [LLMM_TYPE_Q6_K] = vnni_q6_K,
        },
    PK_PACKED8_ENTRIES,
    AVX2_ROW_KERNELS,
    AVX2_ATTENTION_KERNELS,
    AVX2_DELTA_KERNELS,
};

#endif
