// The paged KV cache on the device: storing the step's K and V rows (cu_kv_write) and
// attention over them (cu_attention), in the core's layout (lib/backend.h llmm_kv_layout) and
// the CPU backend's row formats and rounding (cpu/kv_rows.h), so that a pool written here
// reads back the same on either backend.
#include <math.h>

#include "kernels.h"

namespace {

constexpr int KV_THREADS = 256;
constexpr int ATTN_THREADS = 128;
constexpr int ATTN_WARPS = ATTN_THREADS / 32;
// Positions scored at a time: shared memory holds one chunk's weights whatever the sequence
// length; longer sequences merge chunk after chunk by the online softmax.
constexpr uint32_t ATTN_CHUNK = 256;
// Output values one thread accumulates: head_dim up to ATTN_THREADS * this.
constexpr uint32_t ATTN_MAX_DIMS_PER_THREAD = 4;

// Byte offset of the (K or V: which, layer, head h) row at position p of the sequence whose
// block table is table, from the pool's start (lib/backend.h kv_layout_view, kv_row_offset).
__device__ inline size_t kv_offset(const cu_kv &kv, uint32_t which, uint32_t layer, uint32_t h,
                                   const uint32_t *table, uint32_t p) {
    const size_t region = ((size_t)which * kv.n_layer + layer) * kv.n_head_kv + h;
    const uint32_t slot = p & ((1u << kv.block_shift) - 1);
    return region * kv.head_stride + (size_t)table[p >> kv.block_shift] * kv.block_stride + slot * kv.row_bytes;
}

// Value d of a stored row, exactly as cpu/kv_rows.h kv_row reads it.
__device__ inline float kv_value(const uint8_t *row, uint32_t type, uint32_t d) {
    if (type == 0) return reinterpret_cast<const float *>(row)[d];
    if (type == 1) return __half2float(__ushort_as_half(reinterpret_cast<const unsigned short *>(row)[d]));
    return *reinterpret_cast<const float *>(row) * (float)reinterpret_cast<const int8_t *>(row + 4)[d];
}

__device__ inline float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

__device__ inline float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Block (x: row, y: 0 K, 1 V) writes one position's vector, all heads. Q8 rows share one scale
// per position over all heads (kv_store in cpu/kv_rows.h): the block reduces the largest
// |value| first; max is exact in any order, so the scale and the quants match the CPU's
// bytes. rintf rounds to nearest even, as the CPU's lrintf in the default rounding mode.
__global__ void kv_write_kernel(cu_kv kv, const int32_t *pos, const uint32_t *table_start, const uint32_t *tables,
                                uint32_t layer, const float *k, const float *v) {
    __shared__ float partial[KV_THREADS / 32];
    __shared__ float row_amax;
    const uint32_t r = blockIdx.x, which = blockIdx.y;
    const size_t hd = kv.head_dim, kv_dim = (size_t)kv.n_head_kv * hd;
    const float *x = (which ? v : k) + r * kv_dim;
    const uint32_t p = (uint32_t)pos[r];
    const uint32_t *table = tables + table_start[r];
    float amax = 0;
    if (kv.type == 2) {
        for (size_t i = threadIdx.x; i < kv_dim; i += blockDim.x) amax = fmaxf(amax, fabsf(x[i]));
        amax = warp_max(amax);
        if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = amax;
        __syncthreads();
        if (threadIdx.x == 0) {
            float m = 0;
            for (unsigned w = 0; w < blockDim.x / 32; w++) m = fmaxf(m, partial[w]);
            row_amax = m;
        }
        __syncthreads();
        amax = row_amax;
    }
    const float scale = amax / 127.0f, inv = amax > 0 ? 127.0f / amax : 0.0f;
    for (size_t i = threadIdx.x; i < kv_dim; i += blockDim.x) {
        const uint32_t h = (uint32_t)(i / hd), d = (uint32_t)(i % hd);
        uint8_t *row = kv.pool + kv_offset(kv, which, layer, h, table, p);
        if (kv.type == 0) reinterpret_cast<float *>(row)[d] = x[i];
        else if (kv.type == 1) reinterpret_cast<unsigned short *>(row)[d] = __half_as_ushort(__float2half_rn(x[i]));
        else {
            if (d == 0) *reinterpret_cast<float *>(row) = scale;
            reinterpret_cast<int8_t *>(row + 4)[d] = (int8_t)rintf(fminf(127.0f, fmaxf(-127.0f, x[i] * inv)));
        }
    }
}

// The block's maximum (op 0) or sum (op 1) of one value per thread, for every thread.
__device__ inline float block_reduce(float v, int op, float *scratch) {
    v = op ? warp_sum(v) : warp_max(v);
    if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = v;
    __syncthreads();
    float r = scratch[0];
    for (int w = 1; w < ATTN_WARPS; w++) r = op ? r + scratch[w] : fmaxf(r, scratch[w]);
    __syncthreads(); // scratch is reused by the next reduction
    return r;
}

// One block per (query head: x, row: y). Each chunk of positions: a warp per position for the
// scores (lanes over head_dim, then a shuffle sum), scaled and soft-capped in the CPU's order;
// then the online softmax: the running maximum m, the sum l of exp(s - m) and the thread's
// output values acc, rescaled by exp(m_old - m_new) when a chunk raises the maximum. Thread t
// owns output values t, t + ATTN_THREADS, ..., so its V reads of a position are coalesced.
__global__ void attention_kernel(cu_kv kv, const int32_t *pos, const uint32_t *table_start, const uint32_t *tables,
                                 uint32_t layer, const float *q, float *out, uint32_t n_head, uint32_t window,
                                 float scale, float softcap) {
    SIMT_DYNAMIC_SHARED(float, smem);
    const uint32_t h = blockIdx.x, r = blockIdx.y, hd = kv.head_dim;
    const uint32_t kvh = h / (n_head / kv.n_head_kv);
    float *qs = smem, *w = smem + hd, *red = w + ATTN_CHUNK;
    const float *qh = q + ((size_t)r * n_head + h) * hd;
    for (uint32_t d = threadIdx.x; d < hd; d += blockDim.x) qs[d] = qh[d];
    __syncthreads();

    const uint32_t n_kv = (uint32_t)pos[r] + 1, start = window > 0 && window < n_kv ? n_kv - window : 0;
    const uint32_t *table = tables + table_start[r];
    const uint32_t lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const float cap_inv = softcap > 0 ? 1.0f / softcap : 0.0f;
    float m = -INFINITY, l = 0, acc[ATTN_MAX_DIMS_PER_THREAD] = {0, 0, 0, 0};
    for (uint32_t p0 = start; p0 < n_kv; p0 += ATTN_CHUNK) {
        const uint32_t n = min(ATTN_CHUNK, n_kv - p0);
        for (uint32_t j = warp; j < n; j += ATTN_WARPS) {
            const uint8_t *krow = kv.pool + kv_offset(kv, 0, layer, kvh, table, p0 + j);
            float dot = 0;
            for (uint32_t d = lane; d < hd; d += 32) dot += qs[d] * kv_value(krow, kv.type, d);
            dot = warp_sum(dot);
            if (lane == 0) w[j] = softcap > 0 ? tanhf(dot * scale * cap_inv) * softcap : dot * scale;
        }
        __syncthreads();
        float cmax = -INFINITY;
        for (uint32_t j = threadIdx.x; j < n; j += blockDim.x) cmax = fmaxf(cmax, w[j]);
        const float m_new = fmaxf(m, block_reduce(cmax, 0, red));
        float csum = 0;
        for (uint32_t j = threadIdx.x; j < n; j += blockDim.x) {
            w[j] = expf(w[j] - m_new);
            csum += w[j];
        }
        csum = block_reduce(csum, 1, red); // its barrier also publishes the weights
        const float corr = expf(m - m_new); // 0 at the first chunk: m is -inf, m_new finite
        l = l * corr + csum;
        m = m_new;
        for (uint32_t i = 0; i < ATTN_MAX_DIMS_PER_THREAD; i++) {
            const uint32_t d = threadIdx.x + i * ATTN_THREADS;
            if (d >= hd) break;
            float a = acc[i] * corr;
            for (uint32_t j = 0; j < n; j++)
                a += w[j] * kv_value(kv.pool + kv_offset(kv, 1, layer, kvh, table, p0 + j), kv.type, d);
            acc[i] = a;
        }
        __syncthreads(); // the next chunk overwrites w
    }
    float *oh = out + ((size_t)r * n_head + h) * hd;
    const float inv_l = 1.0f / l;
    for (uint32_t i = 0; i < ATTN_MAX_DIMS_PER_THREAD; i++) {
        const uint32_t d = threadIdx.x + i * ATTN_THREADS;
        if (d < hd) oh[d] = acc[i] * inv_l;
    }
}

} // namespace

extern "C" {

int cu_kv_write(cudaStream_t stream, const cu_kv *kv, const cu_step *step, uint32_t layer, const float *k,
                const float *v) {
    if (layer >= kv->n_layer || kv->type > 2) return (int)cudaErrorInvalidValue;
    if (step->n_rows == 0) return 0;
    SIMT_LAUNCH(kv_write_kernel, dim3(step->n_rows, 2), dim3(KV_THREADS), 0, stream, *kv, step->pos,
                step->table_start, step->tables, layer, k, v);
    return (int)cudaGetLastError();
}

int cu_attention(cudaStream_t stream, const cu_kv *kv, const cu_step *step, uint32_t layer, const float *q,
                 float *out, uint32_t n_head, uint32_t window, float scale, float softcap) {
    if (layer >= kv->n_layer || kv->type > 2 || kv->n_head_kv == 0 || n_head % kv->n_head_kv != 0 ||
        kv->head_dim == 0 || kv->head_dim > ATTN_THREADS * ATTN_MAX_DIMS_PER_THREAD)
        return (int)cudaErrorInvalidValue;
    if (step->n_rows == 0 || n_head == 0) return 0;
    const size_t shmem = ((size_t)kv->head_dim + ATTN_CHUNK + ATTN_WARPS) * sizeof(float);
    SIMT_LAUNCH(attention_kernel, dim3(n_head, step->n_rows), dim3(ATTN_THREADS), shmem, stream, *kv, step->pos,
                step->table_start, step->tables, layer, q, out, n_head, window, scale, softcap);
    return (int)cudaGetLastError();
}

} // extern "C"
