/* Prompt and batched matmuls on tensor cores (gemm.cu): a narrow cuBLASLt wrapper (cu_lt) and
 * llmm__cu_gemm, which multiplies activations by weights as the GGUF file stores them, dequantizing
 * quantized weights tile by tile into a bounded F16 scratch, never the whole model.
 *
 * llmm__cu_matmul (gemv_quant.cu) reads the weights once per 8 activation rows, on CUDA cores; for
 * longer prompts a GEMM on tensor cores reads them once per tile and multiplies far faster.
 * The glue (backend.cu) calls llmm__cu_gemm for matmuls of more rows than a decode step has.
 *
 * In the emulated build (`make test`, SIMT_EMULATED) there is no cuBLASLt: llmm__cu_lt_matmul runs a
 * reference GEMM (plain loops, float accumulation, as a kernel so that stream capture sees it)
 * with exactly the layouts, leading dimensions, transposes, alpha, beta and epilogue cuBLASLt
 * is given, and keeps the same algorithm cache (keys only), so everything above the cuBLASLt
 * call is tested without a GPU. The cuBLASLt path itself runs only on a GPU (the device build
 * of tests/cuda/test_cuda_gemm.cpp).
 *
 * Every launcher enqueues on its stream and returns 0 or a nonzero cudaError_t; cuBLASLt
 * statuses are mapped to the nearest cudaError_t (gemm.cu lt_error). */
#ifndef LLMM_CUDA_GEMM_H
#define LLMM_CUDA_GEMM_H

#include <stddef.h>
#include <stdint.h>

#include "llmmini.h"
#include "portable.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- cu_lt: cuBLASLt, narrowly */

/* cuBLASLt's workspace, device memory allocated once by llmm__cu_lt_create: cuBLAS's own default on
 * Hopper, room for the split-K algorithms that skinny GEMMs (few rows, wide k) want. Count it
 * in the context's device memory. */
#define CU_LT_WORKSPACE_BYTES ((size_t)32 << 20)
/* Algorithms remembered, one per shape key (cu_lt_gemm less its pointers and scalars, plus the
 * pointers' alignments): a model has a few weight shapes, each met with a few row counts. The
 * least recently used is replaced when full. */
#define CU_LT_CACHE_ENTRIES 64

/* A and B element types: lib/format/quant.h type ids. */
enum { CU_LT_F32 = 0, CU_LT_F16 = 1, CU_LT_BF16 = 30 };
enum { CU_LT_EPILOGUE_NONE = 0, CU_LT_EPILOGUE_BIAS = 1 };

/* C = alpha * op(A) op(B) + beta * C (+ bias[i] on every row i of C with the BIAS epilogue),
 * BLAS-style: every matrix is COLUMN-MAJOR as cuBLAS reads it, element (i, j) of a matrix
 * with leading dimension ld at i + j * ld. op(A) is m x k, op(B) is k x n, C is m x n.
 * A and B have one element type (F32, F16 or BF16); C, alpha, beta and the bias are F32 and
 * products accumulate in F32 (CUBLAS_COMPUTE_32F: F32 inputs are not rounded to TF32).
 * With beta == 0, C is only written (it may hold NaN). All pointers are device memory. */
typedef struct cu_lt_gemm {
    size_t m, n, k;     /* >= 1 */
    uint32_t ab_type;   /* CU_LT_F32, CU_LT_F16 or CU_LT_BF16 */
    int trans_a;        /* nonzero: A is stored k x m and op(A) = A^T; else stored m x k */
    int trans_b;        /* nonzero: B is stored n x k and op(B) = B^T; else stored k x n */
    const void *a;
    size_t lda;         /* >= rows of A as stored */
    const void *b;
    size_t ldb;         /* >= rows of B as stored */
    float *c;
    size_t ldc;         /* >= m */
    float alpha, beta;
    uint32_t epilogue;  /* CU_LT_EPILOGUE_NONE or CU_LT_EPILOGUE_BIAS */
    const float *bias;  /* (m), BIAS only (NULL otherwise) */
} cu_lt_gemm;

/* One context's cuBLASLt state: the handle, the workspace and the algorithm cache. Not
 * thread-safe: one per context, used on the context's stream by one thread at a time, with
 * the context's device current. */
typedef struct cu_lt cu_lt;

/* Create one with the device that will run it current; host memory from al (NULL: malloc),
 * CU_LT_WORKSPACE_BYTES of device memory. NULL on failure, with *error (when error is not
 * NULL) the cudaError_t. */
cu_lt *llmm__cu_lt_create(const llmm_allocator *al, int *error);
/* Free it (NULL is a no-op), with its device current and nothing of it still running. */
void llmm__cu_lt_free(cu_lt *lt);

/* Enqueue g on stream. 0; cudaErrorInvalidValue for a g outside the contract above (nothing
 * enqueued); cudaErrorNotSupported when cuBLASLt has no algorithm for it; another cudaError_t
 * when cuBLASLt or the launch fails.
 * The first call with a shape key creates its cuBLASLt descriptors (host memory allocated
 * inside cuBLASLt) and asks cublasLtMatmulAlgoGetHeuristic for an algorithm; later calls with
 * that key allocate nothing and only enqueue. Neither allocates device memory or synchronises,
 * so a first use may fall inside a stream capture (the emulated test checks that of this
 * code; the device test, that cuBLASLt's heuristic query is capture-safe). */
int llmm__cu_lt_matmul(cu_lt *lt, cudaStream_t stream, const cu_lt_gemm *g);

/* Keys held (<= CU_LT_CACHE_ENTRIES) and cache misses so far: for tests and counters. */
void llmm__cu_lt_cache_stats(const cu_lt *lt, size_t *entries, size_t *misses);

/* ---------------------------------------------------------------- llmm__cu_gemm */

/* Device scratch bytes llmm__cu_gemm needs: x converted to F16 (BF16 for BF16 weights; nothing for
 * F32 weights, an F32 GEMM) and, for quantized weights, a float per row (its unscale factor,
 * rounded up to 256 bytes) and one dequantized F16 tile of
 * llmm__cu_gemm_tile_rows(ne0) rows of w (fewer when ne1 is smaller). Bounded in ne1: reserve for
 * any width with ne1 = SIZE_MAX. 0 for a type llmm__cu_gemm does not take. */
size_t llmm__cu_gemm_scratch_bytes(uint32_t type, size_t ne0, size_t ne1, size_t n_rows);

/* out (n_rows, ne1), row-major = x (n_rows, ne0), row-major, times w^T, w = ne1 rows of ne0
 * values of type (any type of quant_blocks.cuh: F32, F16, BF16, the legacy and K quants,
 * IQ4_NL, IQ4_XS) as the GGUF file stores them. n_rows >= 1, any count.
 * F16 and BF16 weights are used in place against x rounded to their type; F32 weights make an
 * F32 GEMM; quantized weights are dequantized to F16 a tile of rows at a time, one llmm__cu_lt_matmul
 * per tile writing its columns of out. Numerics: for quantized weights, x rounded to F16 after
 * scaling each row by the power of two that brings its largest |x| below 2^15 when it is not
 * already (undone exactly on the row's outputs: no finite activation becomes infinite, where
 * the CPU's Q8 operand has no such limit either), and the weights' CPU values rounded to F16;
 * for F16 and BF16 weights, x rounded to their type as the CPU's operand is (|x| > 65504 is
 * infinite in F16 on both); products summed in F32. The CPU rounds x coarser (Q8 blocks) for
 * quantized weights.
 * scratch: device memory of scratch_bytes >= llmm__cu_gemm_scratch_bytes(type, ne0, ne1, n_rows),
 * else cudaErrorInvalidValue and nothing enqueued; so is a type without math here or an ne0
 * that is not whole blocks. */
int llmm__cu_gemm(cu_lt *lt, cudaStream_t stream, const void *w, uint32_t type, size_t ne0, size_t ne1, const float *x,
            size_t n_rows, float *out, void *scratch, size_t scratch_bytes);

/* ---------------------------------------------------------------- llmm__cu_gemm's parts, for tests */

/* Rows of w in one dequantized tile: a multiple of 128 (cuBLASLt's usual CTA tile height in
 * m, so tiles other than the last have no ragged CTA row), as many as fit in the smaller of
 * 16 MiB and half the current device's L2 (cudaDevAttrL2CacheSize) of F16, so that a tile
 * written by the dequantization stays in the L2 for the GEMM that reads it next (H100/H200:
 * 50 MiB, 16 MiB tiles; Orin: 4 MiB, 2 MiB tiles), at least 128. */
size_t llmm__cu_gemm_tile_rows(size_t ne0);

/* llmm__cu_gemm_scratch_bytes and llmm__cu_gemm with tiles of tile_rows (>= 1) rows instead of
 * llmm__cu_gemm_tile_rows(ne0): tests reach several tiles, and a last partial one, at small sizes. */
size_t llmm__cu_gemm_scratch_bytes_tiled(uint32_t type, size_t ne0, size_t ne1, size_t n_rows, size_t tile_rows);
int llmm__cu_gemm_tiled(cu_lt *lt, cudaStream_t stream, const void *w, uint32_t type, size_t ne0, size_t ne1,
                  const float *x, size_t n_rows, float *out, void *scratch, size_t scratch_bytes, size_t tile_rows);

/* dst (n rows of ne0 F16 values, back to back) = rows row0 .. row0 + n - 1 of w (rows of ne0
 * values of type, as stored), each weight the CPU's dequantized float (quant_blocks.cuh, bit
 * for bit) rounded to nearest-even F16. Any type of quant_blocks.cuh. */
int llmm__cu_gemm_dequant_tile(cudaStream_t stream, const void *w, uint32_t type, size_t ne0, size_t row0, size_t n,
                         uint16_t *dst);

/* dst (n_rows rows of ne0 F16 values) = x (n_rows, ne0), each row times a power of two s_r: 1
 * when the row's largest |x| is below 2^15 (or infinite), else the largest that brings it
 * below; unscale[r] = 1 / s_r (device memory, n_rows floats). Then
 * llmm__cu_gemm_unscale_rows multiplies out's row r (ne1 floats) by unscale[r]. */
int llmm__cu_gemm_convert_f16_scaled(cudaStream_t stream, const float *x, size_t ne0, size_t n_rows, uint16_t *dst,
                                     float *unscale);
int llmm__cu_gemm_unscale_rows(cudaStream_t stream, float *out, size_t ne1, size_t n_rows, const float *unscale);

/* dst (n values of F16, or BF16 when type is CU_LT_BF16) = x (n floats), rounded to nearest
 * even as lib/format/quant.c's conversions (a NaN may come out as another NaN). */
int llmm__cu_gemm_convert(cudaStream_t stream, const float *x, size_t n, uint32_t type, uint16_t *dst);

#ifdef __cplusplus
}
#endif

#endif
