/* cuBLASLt GEMMs (cu_lt) and llmm__cu_gemm over weights dequantized tile by tile; gemm.h is the
 * contract.
 *
 * llmm__cu_gemm computes out^T = w x^T, in cuBLAS's column-major terms: w's row-major (ne1, ne0)
 * bytes are a column-major ne0 x ne1 matrix, x's are ne0 x n_rows and out's are
 * ne1 x n_rows, so the GEMM is C (ne1 x n_rows, ldc ne1) = A^T (A: ne0 x ne1, lda ne0) times
 * B (ne0 x n_rows, ldb ne0): the "TN" layout, both operands contiguous along k as tensor-core
 * kernels load them, and no operand copied. A tile of w's rows [o0, o0 + t) is A's columns
 * [o0, o0 + t) and writes C's rows [o0, o0 + t): out + o0, still with ldc ne1.
 *
 * The dequantized tile costs its F16 bytes twice (written, then read by the GEMM), against the
 * file's fraction of a byte per weight that llmm__cu_matmul reads once per 8 rows; the tile's size
 * (gemm.h llmm__cu_gemm_tile_rows) keeps that traffic in the L2. */
#include <stdlib.h>
#include <string.h>

#include "portable.h"
#if !SIMT_EMULATED
#include <cublasLt.h>
#endif

#include "gemm.h"
#include "host_memory.h"
#include "quant_blocks.cuh"

#define GEMM_TILE_BYTES ((size_t)16 << 20) /* one dequantized tile of F16 weights, at most */
#define GEMM_TILE_L2_SHARE 2               /* ... and at most this fraction of the device's L2 */
#define GEMM_TILE_ALIGN 128                /* tile rows: a multiple of cuBLASLt's CTA tile height */
#define GEMM_SCRATCH_ALIGN 256             /* the tile's offset in scratch keeps cudaMalloc's alignment */
#define GEMM_THREADS 256
#define GEMM_GROUP 8 /* F16 weights per thread of the dequantization: one 16-byte store */

#if SIMT_EMULATED
#define GEMM_UNROLL
#else
#define GEMM_UNROLL _Pragma("unroll")
#endif

/* ---------------------------------------------------------------- the algorithm cache */

/* What cublasLtMatmulAlgoGetHeuristic sees of a call, hence what its answer is valid for: the
 * shape, types, transposes, leading dimensions, epilogue, and the pointers' alignments (the
 * heuristic assumes 256-byte aligned operands unless told otherwise, and reads the bias
 * pointer's). No padding: keys compare with memcmp. */
typedef struct lt_key {
    uint64_t m, n, k, lda, ldb, ldc;
    uint32_t ab_type, trans_a, trans_b, epilogue;
    uint32_t align_a, align_b, align_c, align_bias;
} lt_key;
static_assert(sizeof(lt_key) == 6 * sizeof(uint64_t) + 8 * sizeof(uint32_t), "lt_key must have no padding");

typedef struct lt_entry {
    lt_key key;
    uint64_t last_use; /* 0: empty */
#if !SIMT_EMULATED
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t a, b, c; /* C's layout serves D too: cu_lt writes C in place */
    cublasLtMatmulAlgo_t algo;
#endif
} lt_entry;

struct cu_lt {
    const llmm_allocator *alloc;
    uint64_t uses; /* calls so far: the clock of last_use */
    size_t misses;
    lt_entry entries[CU_LT_CACHE_ENTRIES];
#if !SIMT_EMULATED
    cublasLtHandle_t handle;
    cublasLtMatmulPreference_t pref; /* the workspace bound; alignments set per miss */
    void *workspace;
#endif
};

/* The largest power of two up to 256 that divides p's address; 0 for NULL. */
static uint32_t pointer_alignment(const void *p) {
    if (!p) return 0;
    const uintptr_t u = (uintptr_t)p;
    uint32_t align = 256;
    while (u % align) align /= 2;
    return align;
}

static bool gemm_valid(const cu_lt_gemm *g) {
    if (g->ab_type != CU_LT_F32 && g->ab_type != CU_LT_F16 && g->ab_type != CU_LT_BF16) return false;
    if (!g->m || !g->n || !g->k || !g->a || !g->b || !g->c) return false;
    const size_t a_rows = g->trans_a ? g->k : g->m, b_rows = g->trans_b ? g->n : g->k;
    if (g->lda < a_rows || g->ldb < b_rows || g->ldc < g->m) return false;
    if (g->epilogue == CU_LT_EPILOGUE_BIAS) return g->bias != NULL;
    return g->epilogue == CU_LT_EPILOGUE_NONE && !g->bias;
}

static lt_key key_of(const cu_lt_gemm *g) {
    lt_key key;
    memset(&key, 0, sizeof key);
    key.m = g->m, key.n = g->n, key.k = g->k;
    key.lda = g->lda, key.ldb = g->ldb, key.ldc = g->ldc;
    key.ab_type = g->ab_type, key.trans_a = g->trans_a != 0, key.trans_b = g->trans_b != 0;
    key.epilogue = g->epilogue;
    key.align_a = pointer_alignment(g->a), key.align_b = pointer_alignment(g->b);
    key.align_c = pointer_alignment(g->c), key.align_bias = pointer_alignment(g->bias);
    return key;
}

/* The entry holding key (*hit), else the one to replace: an empty one, or the least recently
 * used. */
static lt_entry *lt_find(cu_lt *lt, const lt_key *key, bool *hit) {
    lt_entry *oldest = &lt->entries[0];
    for (lt_entry *e = lt->entries; e < lt->entries + CU_LT_CACHE_ENTRIES; e++) {
        if (e->last_use && memcmp(&e->key, key, sizeof *key) == 0) {
            *hit = true;
            return e;
        }
        if (e->last_use < oldest->last_use) oldest = e;
    }
    *hit = false;
    return oldest;
}

extern "C" void llmm__cu_lt_cache_stats(const cu_lt *lt, size_t *entries, size_t *misses) {
    size_t held = 0;
    for (const lt_entry *e = lt->entries; e < lt->entries + CU_LT_CACHE_ENTRIES; e++) held += e->last_use != 0;
    if (entries) *entries = held;
    if (misses) *misses = lt->misses;
}

#if !SIMT_EMULATED
/* ---------------------------------------------------------------- cuBLASLt (GPU build) */

/* A cuBLAS status as the nearest cudaError_t: the module's callers speak only that. */
static int lt_error(cublasStatus_t status) {
    switch (status) {
    case CUBLAS_STATUS_SUCCESS: return 0;
    case CUBLAS_STATUS_ALLOC_FAILED: return cudaErrorMemoryAllocation;
    case CUBLAS_STATUS_INVALID_VALUE: return cudaErrorInvalidValue;
    case CUBLAS_STATUS_NOT_SUPPORTED: case CUBLAS_STATUS_ARCH_MISMATCH: return cudaErrorNotSupported;
    case CUBLAS_STATUS_NOT_INITIALIZED: return cudaErrorInitializationError;
    case CUBLAS_STATUS_EXECUTION_FAILED: { /* peeked, not cleared: the caller reports it */
        const cudaError_t launch = cudaPeekAtLastError();
        return launch != cudaSuccess ? (int)launch : (int)cudaErrorLaunchFailure;
    }
    default: return cudaErrorUnknown;
    }
}

static cudaDataType_t lt_data_type(uint32_t ab_type) {
    return ab_type == CU_LT_F16 ? CUDA_R_16F : ab_type == CU_LT_BF16 ? CUDA_R_16BF : CUDA_R_32F;
}

static void lt_entry_release(lt_entry *e) {
    if (e->desc) cublasLtMatmulDescDestroy(e->desc);
    if (e->a) cublasLtMatrixLayoutDestroy(e->a);
    if (e->b) cublasLtMatrixLayoutDestroy(e->b);
    if (e->c) cublasLtMatrixLayoutDestroy(e->c);
    e->desc = NULL;
    e->a = e->b = e->c = NULL;
    e->last_use = 0;
}

/* The descriptors of g's key and the heuristic's best algorithm for them. */
static int lt_entry_prepare(cu_lt *lt, lt_entry *e, const lt_key *key, const cu_lt_gemm *g) {
    const cudaDataType_t ab = lt_data_type(g->ab_type);
    const cublasOperation_t op_a = g->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, op_b = g->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasLtEpilogue_t epilogue =
        g->epilogue == CU_LT_EPILOGUE_BIAS ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    const cudaDataType_t bias_type = CUDA_R_32F;
    cublasStatus_t st = cublasLtMatmulDescCreate(&e->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    if (!st) st = cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof op_a);
    if (!st) st = cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof op_b);
    if (!st) st = cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue);
    if (!st && g->bias) {
        st = cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof bias_type);
        if (!st) st = cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g->bias, sizeof g->bias);
    }
    /* layouts as stored: A m x k (k x m transposed), B k x n (n x k transposed) */
    if (!st) st = cublasLtMatrixLayoutCreate(&e->a, ab, g->trans_a ? g->k : g->m, g->trans_a ? g->m : g->k, (int64_t)g->lda);
    if (!st) st = cublasLtMatrixLayoutCreate(&e->b, ab, g->trans_b ? g->n : g->k, g->trans_b ? g->k : g->n, (int64_t)g->ldb);
    if (!st) st = cublasLtMatrixLayoutCreate(&e->c, CUDA_R_32F, g->m, g->n, (int64_t)g->ldc);
    const uint32_t align_a = key->align_a, align_b = key->align_b, align_c = key->align_c;
    if (!st) st = cublasLtMatmulPreferenceSetAttribute(lt->pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a, sizeof align_a);
    if (!st) st = cublasLtMatmulPreferenceSetAttribute(lt->pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b, sizeof align_b);
    if (!st) st = cublasLtMatmulPreferenceSetAttribute(lt->pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_c, sizeof align_c);
    if (!st) st = cublasLtMatmulPreferenceSetAttribute(lt->pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_c, sizeof align_c);
    cublasLtMatmulHeuristicResult_t best;
    memset(&best, 0, sizeof best);
    int found = 0;
    if (!st) st = cublasLtMatmulAlgoGetHeuristic(lt->handle, e->desc, e->a, e->b, e->c, e->c, lt->pref, 1, &best, &found);
    if (st || found < 1 || best.state != CUBLAS_STATUS_SUCCESS) {
        lt_entry_release(e);
        return st ? lt_error(st) : (int)cudaErrorNotSupported;
    }
    e->algo = best.algo;
    return 0;
}

static int lt_run(cu_lt *lt, lt_entry *e, cudaStream_t stream, const cu_lt_gemm *g) {
    if (g->bias) { /* the key fixes the bias pointer's alignment, not the pointer */
        const cublasStatus_t st =
            cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g->bias, sizeof g->bias);
        if (st) return lt_error(st);
    }
    return lt_error(cublasLtMatmul(lt->handle, e->desc, &g->alpha, g->a, e->a, g->b, e->b, &g->beta, g->c, e->c, g->c,
                                   e->c, &e->algo, lt->workspace, CU_LT_WORKSPACE_BYTES, stream));
}

#else
/* ---------------------------------------------------------------- the reference (emulated build) */

static float reference_element(uint32_t type, const void *p, size_t i) {
    if (type == CU_LT_F16) return qb_half_to_float(((const uint16_t *)p)[i]);
    if (type == CU_LT_BF16) return qb_bf16_to_float(((const uint16_t *)p)[i]);
    return ((const float *)p)[i];
}

/* One thread per element of C: what cuBLASLt computes, in plain loops (the sum in order, in
 * float). With beta == 0, C is not read, as in cuBLAS. */
__global__ void reference_gemm_kernel(cu_lt_gemm g) {
    const size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= g.m * g.n) return;
    const size_t i = e % g.m, j = e / g.m;
    float acc = 0.0f;
    for (size_t l = 0; l < g.k; l++) {
        const float a = reference_element(g.ab_type, g.a, g.trans_a ? l + i * g.lda : i + l * g.lda);
        const float b = reference_element(g.ab_type, g.b, g.trans_b ? j + l * g.ldb : l + j * g.ldb);
        acc = qb_add(acc, qb_mul(a, b));
    }
    float *c = g.c + i + j * g.ldc;
    float d = qb_mul(g.alpha, acc);
    if (g.beta != 0.0f) d = qb_add(d, qb_mul(g.beta, *c));
    if (g.epilogue == CU_LT_EPILOGUE_BIAS) d = qb_add(d, g.bias[i]);
    *c = d;
}

static void lt_entry_release(lt_entry *e) { e->last_use = 0; }

/* LLMM_CUDA_EMU_LT_NO_ALGORITHM=1 (emulated build only, for tests): the heuristic finds no
 * algorithm for any shape, as cuBLASLt may on a device or for a layout it does not serve. */
static int lt_entry_prepare(cu_lt *lt, lt_entry *e, const lt_key *key, const cu_lt_gemm *g) {
    (void)lt, (void)e, (void)key, (void)g;
    const char *none = getenv("LLMM_CUDA_EMU_LT_NO_ALGORITHM");
    return none && strcmp(none, "1") == 0 ? (int)cudaErrorNotSupported : 0;
}

static int lt_run(cu_lt *lt, lt_entry *e, cudaStream_t stream, const cu_lt_gemm *g) {
    (void)lt, (void)e;
    const size_t elements = g->m * g->n;
    SIMT_LAUNCH(reference_gemm_kernel, (unsigned)((elements + GEMM_THREADS - 1) / GEMM_THREADS), GEMM_THREADS, 0,
                stream, *g);
    return (int)cudaGetLastError();
}
#endif

/* ---------------------------------------------------------------- cu_lt */

extern "C" cu_lt *llmm__cu_lt_create(const llmm_allocator *al, int *error) {
    int err = 0;
    cu_lt *lt = (cu_lt *)cu_host_calloc(al, 1, sizeof *lt);
    if (!lt) {
        err = cudaErrorMemoryAllocation;
    } else {
        lt->alloc = al;
#if !SIMT_EMULATED
        const uint64_t workspace_bytes = CU_LT_WORKSPACE_BYTES;
        err = lt_error(cublasLtCreate(&lt->handle));
        if (!err) err = lt_error(cublasLtMatmulPreferenceCreate(&lt->pref));
        if (!err)
            err = lt_error(cublasLtMatmulPreferenceSetAttribute(lt->pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                                &workspace_bytes, sizeof workspace_bytes));
        if (!err) err = (int)cudaMalloc(&lt->workspace, CU_LT_WORKSPACE_BYTES);
#endif
        if (err) {
            llmm__cu_lt_free(lt);
            lt = NULL;
        }
    }
    if (error) *error = err;
    return lt;
}

extern "C" void llmm__cu_lt_free(cu_lt *lt) {
    if (!lt) return;
    for (lt_entry *e = lt->entries; e < lt->entries + CU_LT_CACHE_ENTRIES; e++) lt_entry_release(e);
#if !SIMT_EMULATED
    if (lt->pref) cublasLtMatmulPreferenceDestroy(lt->pref);
    if (lt->handle) cublasLtDestroy(lt->handle);
    cudaFree(lt->workspace);
#endif
    cu_host_free(lt->alloc, lt);
}

extern "C" int llmm__cu_lt_matmul(cu_lt *lt, cudaStream_t stream, const cu_lt_gemm *g) {
    if (!lt || !g || !gemm_valid(g)) return cudaErrorInvalidValue;
    const lt_key key = key_of(g);
    bool hit = false;
    lt_entry *e = lt_find(lt, &key, &hit);
    if (!hit) {
        lt_entry_release(e);
        lt->misses++;
        const int err = lt_entry_prepare(lt, e, &key, g);
        if (err) return err;
        e->key = key;
    }
    e->last_use = ++lt->uses;
    return lt_run(lt, e, stream, g);
}

/* ---------------------------------------------------------------- conversions */

/* x rounded to F16 or BF16, a value per thread: memory-bound, and small next to the GEMM. */
template <bool BF16>
__global__ void convert_kernel(const float *x, size_t n, uint16_t *dst) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    if constexpr (BF16) dst[i] = __bfloat16_as_ushort(__float2bfloat16_rn(x[i]));
    else dst[i] = __half_as_ushort(__float2half_rn(x[i]));
}

extern "C" int llmm__cu_gemm_convert(cudaStream_t stream, const float *x, size_t n, uint32_t type, uint16_t *dst) {
    if (type != CU_LT_F16 && type != CU_LT_BF16) return cudaErrorInvalidValue;
    if (n == 0) return 0;
    const size_t blocks = (n + GEMM_THREADS - 1) / GEMM_THREADS;
    if (blocks > 0x7fffffffu) return cudaErrorInvalidValue;
    auto *kernel = type == CU_LT_BF16 ? &convert_kernel<true> : &convert_kernel<false>;
    SIMT_LAUNCH(kernel, (unsigned)blocks, GEMM_THREADS, 0, stream, x, n, dst);
    return (int)cudaGetLastError();
}

/* F16 activations that cannot overflow: a row whose largest |x| reaches F16_ROW_LIMIT is scaled
 * by the power of two that brings it below (exact, the significands unchanged) before rounding,
 * and its outputs by the inverse after the GEMM (exact again). A plain rounding turned such a
 * value (SwiGLU outputs feeding ffn_down reach 1e5 in some models) into inf and the logits into
 * NaN. Per row, not per tensor: a row's outputs depend on its own activations only, so each row
 * keeps F16's 11 significant bits relative to its own largest value; BF16 would never overflow
 * but keeps 8. Measured against the CPU on test_cuda_module's large-activation model (mean KL
 * of the logits over 24 rows, Q4_K_M / Q4_0 / Q8_0): scaled F16 5.9e-5 / 3.3e-5 / 2.7e-5,
 * activations rounded to BF16 (weights still F16) 6.3e-5 / 3.6e-5 / 3.1e-5; a BF16 GEMM would
 * round the dequantized weights to BF16 too.
 * Rows below the limit, every row of an ordinary model, are rounded exactly as before.
 * 2^15: the largest scaled value rounds to at most 2^15, far below 65504. */
#define F16_ROW_LIMIT 32768.0f

/* One thread block per row: the row's largest |x| (a NaN is skipped by fmaxf and stays NaN in
 * the conversion; an infinite row is not scaled and stays infinite, as on the CPU), its scale,
 * then the row rounded. unscale[row] receives the factor that undoes the scale. */
__global__ void convert_rows_f16_scaled_kernel(const float *x, size_t ne0, uint16_t *dst, float *unscale) {
    __shared__ float part[GEMM_THREADS];
    const size_t row = blockIdx.x;
    const float *xr = x + row * ne0;
    float amax = 0.0f;
    for (size_t i = threadIdx.x; i < ne0; i += blockDim.x) amax = fmaxf(amax, fabsf(xr[i]));
    part[threadIdx.x] = amax;
    __syncthreads();
    for (unsigned half = blockDim.x / 2; half > 0; half /= 2) {
        if (threadIdx.x < half) part[threadIdx.x] = fmaxf(part[threadIdx.x], part[threadIdx.x + half]);
        __syncthreads();
    }
    float scale = 1.0f, inverse = 1.0f;
    amax = part[0];
    if (amax < INFINITY) /* both factors powers of two: every product below is exact */
        while (qb_mul(amax, scale) >= F16_ROW_LIMIT) scale = qb_mul(scale, 0.5f), inverse = qb_mul(inverse, 2.0f);
    if (threadIdx.x == 0) unscale[row] = inverse;
    uint16_t *dr = dst + row * ne0;
    for (size_t i = threadIdx.x; i < ne0; i += blockDim.x) dr[i] = __half_as_ushort(__float2half_rn(qb_mul(xr[i], scale)));
}

/* out (n_rows, ne1) row by row times the row's unscale factor, where it is not 1. */
__global__ void unscale_rows_kernel(float *out, size_t ne1, size_t n, const float *unscale) {
    const size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= n) return;
    const float u = unscale[e / ne1];
    if (u != 1.0f) out[e] = qb_mul(out[e], u);
}

extern "C" int llmm__cu_gemm_convert_f16_scaled(cudaStream_t stream, const float *x, size_t ne0, size_t n_rows,
                                                uint16_t *dst, float *unscale) {
    if (n_rows == 0 || ne0 == 0) return 0;
    if (n_rows > 0x7fffffffu) return cudaErrorInvalidValue;
    SIMT_LAUNCH(convert_rows_f16_scaled_kernel, (unsigned)n_rows, GEMM_THREADS, 0, stream, x, ne0, dst, unscale);
    return (int)cudaGetLastError();
}

extern "C" int llmm__cu_gemm_unscale_rows(cudaStream_t stream, float *out, size_t ne1, size_t n_rows,
                                          const float *unscale) {
    const size_t n = ne1 * n_rows;
    if (n == 0) return 0;
    const size_t blocks = (n + GEMM_THREADS - 1) / GEMM_THREADS;
    if (blocks > 0x7fffffffu) return cudaErrorInvalidValue;
    SIMT_LAUNCH(unscale_rows_kernel, (unsigned)blocks, GEMM_THREADS, 0, stream, out, ne1, n, unscale);
    return (int)cudaGetLastError();
}

/* GEMM_GROUP consecutive weights of a row per thread, each through quant_blocks.cuh (the
 * CPU's value, bit for bit) then rounded to F16; consecutive threads write consecutive 16
 * bytes. The blocks are read byte by byte (GGUF aligns tensors, not blocks), and a thread's
 * weights share a block, so the repeated header bytes come from L1. w: the tile's first row. */
template <uint32_t T>
__global__ void dequant_tile_kernel(const uint8_t *w, size_t row_bytes, size_t ne0, size_t groups_per_row,
                                    size_t n_groups, int vector_store, uint16_t *dst) {
    const size_t g = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (g >= n_groups) return;
    const size_t r = g / groups_per_row, j0 = g % groups_per_row * GEMM_GROUP;
    const size_t qk = qb_type<T>::block_size, block_bytes = qb_type<T>::block_bytes;
    const uint8_t *row = w + r * row_bytes;
    uint16_t h[GEMM_GROUP];
GEMM_UNROLL
    for (int t = 0; t < GEMM_GROUP; t++) {
        const size_t j = j0 + t;
        h[t] = j < ne0 ? __half_as_ushort(__float2half_rn(qb_block_value(T, row + j / qk * block_bytes, (int)(j % qk))))
                       : (uint16_t)0;
    }
    uint16_t *out = dst + r * ne0 + j0;
    if (vector_store) {
        uint4 v;
        v.x = h[0] | (uint32_t)h[1] << 16;
        v.y = h[2] | (uint32_t)h[3] << 16;
        v.z = h[4] | (uint32_t)h[5] << 16;
        v.w = h[6] | (uint32_t)h[7] << 16;
        *(uint4 *)out = v;
    } else {
GEMM_UNROLL
        for (int t = 0; t < GEMM_GROUP; t++)
            if (j0 + t < ne0) out[t] = h[t];
    }
}

typedef void (*dequant_fn)(const uint8_t *, size_t, size_t, size_t, size_t, int, uint16_t *);

/* The one kernel per weight type: the types llmm__cu_gemm takes. */
static dequant_fn dequant_for(uint32_t type) {
    switch (type) {
    case LLMM_TYPE_F32: return &dequant_tile_kernel<LLMM_TYPE_F32>;
    case LLMM_TYPE_F16: return &dequant_tile_kernel<LLMM_TYPE_F16>;
    case LLMM_TYPE_BF16: return &dequant_tile_kernel<LLMM_TYPE_BF16>;
    case LLMM_TYPE_Q4_0: return &dequant_tile_kernel<LLMM_TYPE_Q4_0>;
    case LLMM_TYPE_Q4_1: return &dequant_tile_kernel<LLMM_TYPE_Q4_1>;
    case LLMM_TYPE_Q5_0: return &dequant_tile_kernel<LLMM_TYPE_Q5_0>;
    case LLMM_TYPE_Q5_1: return &dequant_tile_kernel<LLMM_TYPE_Q5_1>;
    case LLMM_TYPE_Q8_0: return &dequant_tile_kernel<LLMM_TYPE_Q8_0>;
    case LLMM_TYPE_IQ4_NL: return &dequant_tile_kernel<LLMM_TYPE_IQ4_NL>;
    case LLMM_TYPE_Q2_K: return &dequant_tile_kernel<LLMM_TYPE_Q2_K>;
    case LLMM_TYPE_Q3_K: return &dequant_tile_kernel<LLMM_TYPE_Q3_K>;
    case LLMM_TYPE_Q4_K: return &dequant_tile_kernel<LLMM_TYPE_Q4_K>;
    case LLMM_TYPE_Q5_K: return &dequant_tile_kernel<LLMM_TYPE_Q5_K>;
    case LLMM_TYPE_Q6_K: return &dequant_tile_kernel<LLMM_TYPE_Q6_K>;
    case LLMM_TYPE_IQ4_XS: return &dequant_tile_kernel<LLMM_TYPE_IQ4_XS>;
    }
    return NULL;
}

/* A type llmm__cu_gemm takes, in rows of whole blocks. */
static bool whole_blocks(uint32_t type, size_t ne0) {
    return dequant_for(type) && ne0 % llmm_type_block_size(type) == 0;
}

static size_t row_bytes_of(uint32_t type, size_t ne0) {
    return ne0 / llmm_type_block_size(type) * llmm_type_block_bytes(type);
}

extern "C" int llmm__cu_gemm_dequant_tile(cudaStream_t stream, const void *w, uint32_t type, size_t ne0, size_t row0,
                                    size_t n, uint16_t *dst) {
    const dequant_fn kernel = dequant_for(type);
    if (!kernel || !whole_blocks(type, ne0)) return cudaErrorInvalidValue;
    if (n == 0 || ne0 == 0) return 0;
    const size_t groups_per_row = (ne0 + GEMM_GROUP - 1) / GEMM_GROUP, n_groups = groups_per_row * n;
    const size_t blocks = (n_groups + GEMM_THREADS - 1) / GEMM_THREADS;
    if (blocks > 0x7fffffffu) return cudaErrorInvalidValue;
    /* whole groups on 16-byte boundaries: every row starts on one when ne0 is a multiple of 8
     * (every quantized type: blocks of 32 or 256) */
    const int vector_store = ne0 % GEMM_GROUP == 0 && (uintptr_t)dst % 16 == 0;
    const size_t row_bytes = row_bytes_of(type, ne0);
    SIMT_LAUNCH(kernel, (unsigned)blocks, GEMM_THREADS, 0, stream, (const uint8_t *)w + row0 * row_bytes, row_bytes,
                ne0, groups_per_row, n_groups, vector_store, dst);
    return (int)cudaGetLastError();
}

/* ---------------------------------------------------------------- llmm__cu_gemm */

static size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

/* F32, F16, BF16: weights cuBLASLt reads as they are, no dequantized tile. */
static bool in_place_type(uint32_t type) { return llmm_type_family(type) == LLMM_FAMILY_FLOAT; }

/* The tile is written by the dequantization and read back by the GEMM: to be read from the L2
 * and not from DRAM a second time it must stay there beside the GEMM's other operands, so at
 * most half the L2 (an Orin's 4 MiB: 2 MiB tiles), and no more than 16 MiB where the L2 is large
 * (H100/H200: 50 MiB), past which larger tiles gain nothing: each is already hundreds of
 * cuBLASLt CTAs. A device that does not answer gets the 16 MiB. */
static size_t gemm_tile_bytes(void) {
    int device = 0, l2 = 0;
    if (cudaGetDevice(&device) != cudaSuccess || cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device) != cudaSuccess ||
        l2 <= 0) {
        (void)cudaGetLastError(); /* the answer is a size, not a failure of the step */
        return GEMM_TILE_BYTES;
    }
    const size_t share = (size_t)l2 / GEMM_TILE_L2_SHARE;
    return share < GEMM_TILE_BYTES ? share : GEMM_TILE_BYTES;
}

extern "C" size_t llmm__cu_gemm_tile_rows(size_t ne0) {
    const size_t rows = ne0 ? gemm_tile_bytes() / (2 * ne0) / GEMM_TILE_ALIGN * GEMM_TILE_ALIGN : 0;
    return rows > GEMM_TILE_ALIGN ? rows : GEMM_TILE_ALIGN;
}

/* scratch: x in F16/BF16, padded to GEMM_SCRATCH_ALIGN; for quantized weights then each row's
 * unscale factor, padded likewise, and the tile */
static size_t x_bytes(size_t ne0, size_t n_rows) { return round_up(2 * ne0 * n_rows, GEMM_SCRATCH_ALIGN); }
static size_t unscale_bytes(size_t n_rows) { return round_up(sizeof(float) * n_rows, GEMM_SCRATCH_ALIGN); }

extern "C" size_t llmm__cu_gemm_scratch_bytes_tiled(uint32_t type, size_t ne0, size_t ne1, size_t n_rows,
                                              size_t tile_rows) {
    if (!whole_blocks(type, ne0) || type == LLMM_TYPE_F32) return 0;
    if (in_place_type(type)) return x_bytes(ne0, n_rows);
    return x_bytes(ne0, n_rows) + unscale_bytes(n_rows) + 2 * ne0 * (ne1 < tile_rows ? ne1 : tile_rows);
}

extern "C" size_t llmm__cu_gemm_scratch_bytes(uint32_t type, size_t ne0, size_t ne1, size_t n_rows) {
    return llmm__cu_gemm_scratch_bytes_tiled(type, ne0, ne1, n_rows, llmm__cu_gemm_tile_rows(ne0));
}

extern "C" int llmm__cu_gemm_tiled(cu_lt *lt, cudaStream_t stream, const void *w, uint32_t type, size_t ne0, size_t ne1,
                             const float *x, size_t n_rows, float *out, void *scratch, size_t scratch_bytes,
                             size_t tile_rows) {
    if (!lt || !dequant_for(type) || !whole_blocks(type, ne0) || tile_rows == 0) return cudaErrorInvalidValue;
    if (scratch_bytes < llmm__cu_gemm_scratch_bytes_tiled(type, ne0, ne1, n_rows, tile_rows)) return cudaErrorInvalidValue;
    if (n_rows == 0 || ne1 == 0 || ne0 == 0) return 0;
    /* out^T (ne1 x n_rows) = w (stored ne0 x ne1, transposed) times x^T (ne0 x n_rows) */
    cu_lt_gemm g;
    memset(&g, 0, sizeof g);
    g.m = ne1, g.n = n_rows, g.k = ne0;
    g.trans_a = 1, g.a = w, g.lda = ne0;
    g.b = x, g.ldb = ne0;
    g.c = out, g.ldc = ne1;
    g.alpha = 1.0f, g.beta = 0.0f;
    g.epilogue = CU_LT_EPILOGUE_NONE;
    g.ab_type = CU_LT_F32;
    if (type == LLMM_TYPE_F32) return llmm__cu_lt_matmul(lt, stream, &g);

    g.ab_type = type == LLMM_TYPE_BF16 ? CU_LT_BF16 : CU_LT_F16;
    uint16_t *x16 = (uint16_t *)scratch;
    float *unscale = (float *)((uint8_t *)scratch + x_bytes(ne0, n_rows));

    /* F16 and BF16 weights take x rounded to their type, the CPU's operand for them (an F16
     * activation past 65504 is infinite on both); quantized weights take it scaled per row */
    if (in_place_type(type)) {
        int err = llmm__cu_gemm_convert(stream, x, n_rows * ne0, g.ab_type, x16);
        g.b = x16;
        return err ? err : llmm__cu_lt_matmul(lt, stream, &g);
    }
    int err = llmm__cu_gemm_convert_f16_scaled(stream, x, ne0, n_rows, x16, unscale);
    if (err) return err;
    g.b = x16;

    /* one tile buffer, reused: the stream orders each dequantization after the GEMM that read
     * the previous tile */
    uint16_t *tile = (uint16_t *)((uint8_t *)unscale + unscale_bytes(n_rows));
    for (size_t o0 = 0; o0 < ne1 && !err; o0 += tile_rows) {
        const size_t rows = ne1 - o0 < tile_rows ? ne1 - o0 : tile_rows;
        err = llmm__cu_gemm_dequant_tile(stream, w, type, ne0, o0, rows, tile);
        g.m = rows, g.a = tile, g.c = out + o0;
        if (!err) err = llmm__cu_lt_matmul(lt, stream, &g);
    }
    return err ? err : llmm__cu_gemm_unscale_rows(stream, out, ne1, n_rows, unscale);
}

extern "C" int llmm__cu_gemm(cu_lt *lt, cudaStream_t stream, const void *w, uint32_t type, size_t ne0, size_t ne1,
                       const float *x, size_t n_rows, float *out, void *scratch, size_t scratch_bytes) {
    return llmm__cu_gemm_tiled(lt, stream, w, type, ne0, ne1, x, n_rows, out, scratch, scratch_bytes,
                         llmm__cu_gemm_tile_rows(ne0));
}
