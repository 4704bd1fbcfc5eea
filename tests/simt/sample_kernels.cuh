// sample_kernels.cuh: kernels written once against simt.h, compiled by g++ into test_simt and by
// nvcc (sample_kernels.cu, `make CUDA=1`), so the emulation's API stays a subset of CUDA's.
// Include simt.h before this file, and this file in one translation unit per build.
// Each kernel exercises one feature; test_simt.cpp says what its results prove.

// ---- block tree reduction in shared memory (blockDim.x a power of two); unsigned, so that
// adding garbage wraps instead of overflowing

__global__ void block_sum(const unsigned *in, unsigned *out, int n) {
    SIMT_DYNAMIC_SHARED(unsigned, partial);
    unsigned tid = threadIdx.x;
    int i = (int)(blockIdx.x * blockDim.x + tid);
    partial[tid] = i < n ? in[i] : 0u;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
        if (tid < s)
            partial[tid] += partial[tid + s];
        __syncthreads();
    }
    if (tid == 0)
        out[blockIdx.x] = partial[0];
}

// The same without its barriers: wrong, and the emulation must show it.
__global__ void block_sum_no_barrier(const unsigned *in, unsigned *out, int n) {
    SIMT_DYNAMIC_SHARED(unsigned, partial);
    unsigned tid = threadIdx.x;
    int i = (int)(blockIdx.x * blockDim.x + tid);
    partial[tid] = i < n ? in[i] : 0u;
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1)
        if (tid < s)
            partial[tid] += partial[tid + s];
    if (tid == 0)
        out[blockIdx.x] = partial[0];
}

// Static shared memory: each block must see its own values after its barrier.
__global__ void static_shared_rotate(int *out, int base) {
    __shared__ int vals[256];
    unsigned tid = threadIdx.x;
    vals[tid] = base + (int)(blockIdx.x * 1000 + tid);
    __syncthreads();
    out[blockIdx.x * blockDim.x + tid] = vals[(tid + 1) % blockDim.x];
}

// __syncthreads_count/_and/_or: out[3 * tid + k]
__global__ void barrier_votes(const int *pred, int *out) {
    unsigned tid = threadIdx.x;
    int p = pred[tid];
    out[3 * tid + 0] = __syncthreads_count(p);
    out[3 * tid + 1] = __syncthreads_and(p);
    out[3 * tid + 2] = __syncthreads_or(p);
}

// ---- warp reductions over the lanes that exist (a partial last warp included)

__device__ __forceinline__ unsigned lanes_of_warp() { return __ballot_sync(0xffffffffu, 1); }

// Sum by butterfly: every lane of a full warp ends with the total; in a partial warp, lane 0
// does (partners beyond the last lane count as zero).
__global__ void warp_sum_xor(const int *in, int *out) {
    unsigned tid = threadIdx.x, lane = tid % 32;
    unsigned mask = lanes_of_warp();
    unsigned nlanes = (unsigned)__popc(mask);
    int v = in[blockIdx.x * blockDim.x + tid];
    for (int off = 16; off > 0; off >>= 1) {
        int other = __shfl_xor_sync(mask, v, off);
        if ((lane ^ (unsigned)off) < nlanes)
            v += other;
    }
    out[blockIdx.x * blockDim.x + tid] = v;
}

__global__ void warp_sum_down(const float *in, float *out) {
    unsigned tid = threadIdx.x, lane = tid % 32;
    unsigned mask = lanes_of_warp();
    unsigned nlanes = (unsigned)__popc(mask);
    float v = in[blockIdx.x * blockDim.x + tid];
    for (unsigned off = 16; off > 0; off >>= 1) {
        float other = __shfl_down_sync(mask, v, off);
        if (lane + off < nlanes)
            v += other;
    }
    if (lane == 0)
        out[blockIdx.x * ((blockDim.x + 31) / 32) + tid / 32] = v;
}

// One shuffle of each lane's own thread index: mode 0 idx, 1 up, 2 down, 3 xor.
__global__ void shuffle_probe(int *out, int mode, int arg, int width) {
    int tid = (int)threadIdx.x, r = 0;
    if (mode == 0)
        r = __shfl_sync(0xffffffffu, tid, arg, width);
    else if (mode == 1)
        r = __shfl_up_sync(0xffffffffu, tid, (unsigned)arg, width);
    else if (mode == 2)
        r = __shfl_down_sync(0xffffffffu, tid, (unsigned)arg, width);
    else
        r = __shfl_xor_sync(0xffffffffu, tid, arg, width);
    out[tid] = r;
}

// Votes among the lanes named by `mask`; the others leave at once.
__global__ void votes(const int *pred, unsigned mask, unsigned *ballot, int *any, int *all) {
    unsigned tid = threadIdx.x, lane = tid % 32;
    if (!(mask >> lane & 1))
        return;
    int p = pred[tid];
    ballot[tid] = __ballot_sync(mask, p);
    any[tid] = __any_sync(mask, p);
    all[tid] = __all_sync(mask, p);
    __syncwarp(mask);
}

// __reduce_*_sync over each warp: out[warp * 6 + k], k: add/min/max (int), add/min/max (unsigned)
__global__ void warp_reduce_ops(const int *in, int *out) {
    unsigned tid = threadIdx.x;
    unsigned mask = lanes_of_warp();
    int v = in[tid];
    unsigned u = (unsigned)v;
    int r[6] = {__reduce_add_sync(mask, v),           __reduce_min_sync(mask, v),
                __reduce_max_sync(mask, v),           (int)__reduce_add_sync(mask, u),
                (int)__reduce_min_sync(mask, u),      (int)__reduce_max_sync(mask, u)};
    if (tid % 32 == 0)
        for (int k = 0; k < 6; k++)
            out[tid / 32 * 6 + k] = r[k];
}

// ---- indices: each (block, thread) records itself at its linear position

__global__ void record_indices(unsigned *seen, unsigned *where) {
    unsigned block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    unsigned thread = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    unsigned id = block * (blockDim.x * blockDim.y * blockDim.z) + thread;
    atomicAdd(&seen[id], 1u);
    unsigned *w = where + 6 * id;
    w[0] = blockIdx.x, w[1] = blockIdx.y, w[2] = blockIdx.z;
    w[3] = threadIdx.x, w[4] = threadIdx.y, w[5] = threadIdx.z;
}

// ---- atomics from every thread of every block

struct AtomicTotals {
    int add_i, sub_i, max_i, min_i, cas_i, exch_i;
    unsigned add_u, or_u, and_u, inc_u;
    unsigned long long add_ull;
    float add_f;
    long long exch_sum; // sum of the values atomicExch returned
};

__global__ void atomics(AtomicTotals *t) {
    int id = (int)(blockIdx.x * blockDim.x + threadIdx.x);
    atomicAdd(&t->add_i, 1);
    atomicSub(&t->sub_i, 2);
    atomicMax(&t->max_i, id);
    atomicMin(&t->min_i, -id);
    atomicAdd(&t->add_u, 3u);
    atomicOr(&t->or_u, 1u << (id % 32));
    atomicAnd(&t->and_u, ~(1u << (id % 32)));
    atomicInc(&t->inc_u, 9u);
    atomicAdd(&t->add_ull, 1ull << 33);
    atomicAdd(&t->add_f, 0.5f);
    int old = t->cas_i, assumed;
    do {
        assumed = old;
        old = atomicCAS(&t->cas_i, assumed, assumed + 1);
    } while (old != assumed);
    atomicAdd((unsigned long long *)&t->exch_sum, (unsigned long long)atomicExch(&t->exch_i, id));
}

// ---- half and bfloat16 through the device-side conversions

__global__ void convert_halves(const float *in, unsigned short *half_bits, float *from_half,
                               unsigned short *bf16_bits, float *from_bf16, int n) {
    int i = (int)(blockIdx.x * blockDim.x + threadIdx.x);
    if (i >= n)
        return;
    __half h = __float2half(in[i]);
    __nv_bfloat16 b = __float2bfloat16(in[i]);
    half_bits[i] = __half_as_ushort(h);
    from_half[i] = __half2float(h);
    bf16_bits[i] = __bfloat16_as_ushort(b);
    from_bf16[i] = __bfloat162float(b);
    __half2 pair = __halves2half2(h, __float2half_rn(-in[i]));
    if (__low2float(pair) != from_half[i] || __high2float(pair) != -from_half[i])
        from_half[i] = 12345.0f;
}

// ---- a template kernel, launched through a pointer

template <int N> __global__ void fill_value(int *out) { out[threadIdx.x] = N; }

// ---- broken kernels, for the death tests

__global__ void divergent_barrier(int *out) {
    if (threadIdx.x >= 16)
        return;
    __syncthreads();
    out[threadIdx.x] = 1;
}

__global__ void barrier_sites_differ(int *out) {
    if (threadIdx.x % 2) {
        out[threadIdx.x] = 1;
        __syncthreads();
    } else {
        out[threadIdx.x] = 2;
        __syncthreads();
    }
}

__global__ void shuffle_with_exited_lane(int *out) {
    if (threadIdx.x == 5)
        return;
    out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, (int)threadIdx.x, 1);
}

__global__ void shuffle_waits_for_barrier(int *out) {
    if (threadIdx.x == 0)
        __syncthreads();
    else
        out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, (int)threadIdx.x, 1);
}

// ---- host glue, compiled by both builds through the runtime subset

// Sums n values with block_sum: per-block sums into out (n_blocks of them). Returns a
// cudaError_t.
inline int sample_block_sums(const unsigned *host_in, int n, int threads, unsigned *host_out) {
    int blocks = (n + threads - 1) / threads;
    unsigned *d_in = nullptr, *d_out = nullptr;
    cudaStream_t stream;
    if (cudaStreamCreate(&stream) != cudaSuccess)
        return (int)cudaGetLastError();
    cudaMalloc(&d_in, (size_t)n * sizeof(unsigned));
    cudaMalloc(&d_out, (size_t)blocks * sizeof(unsigned));
    cudaMemcpyAsync(d_in, host_in, (size_t)n * sizeof(unsigned), cudaMemcpyHostToDevice, stream);
    cudaMemsetAsync(d_out, 0, (size_t)blocks * sizeof(unsigned), stream);
    SIMT_LAUNCH(block_sum, blocks, threads, (size_t)threads * sizeof(unsigned), stream, d_in, d_out,
                n);
    cudaMemcpyAsync(host_out, d_out, (size_t)blocks * sizeof(unsigned), cudaMemcpyDeviceToHost,
                    stream);
    cudaStreamSynchronize(stream);
    cudaError_t err = cudaGetLastError();
    cudaFree(d_in);
    cudaFree(d_out);
    cudaStreamDestroy(stream);
    return (int)err;
}

// Launches the template kernel fill_value<7> through a pointer: the macro's form for templates.
inline int sample_fill_seven(int *host_out, int n) {
    int *d_out = nullptr;
    cudaMalloc(&d_out, (size_t)n * sizeof(int));
    auto *kernel = &fill_value<7>;
    SIMT_LAUNCH(kernel, 1, n, 0, 0, d_out);
    cudaMemcpy(host_out, d_out, (size_t)n * sizeof(int), cudaMemcpyDeviceToHost);
    cudaDeviceSynchronize();
    cudaFree(d_out);
    return (int)cudaGetLastError();
}

// 64 KiB of dynamic shared memory needs the attribute on a GPU, and so here.
inline int sample_big_shared(const unsigned *host_in, unsigned *host_out, bool set_attribute) {
    const int threads = 1024;
    unsigned *d_in = nullptr, *d_out = nullptr;
    cudaMalloc(&d_in, (size_t)threads * sizeof(unsigned));
    cudaMalloc(&d_out, sizeof(unsigned));
    cudaMemcpy(d_in, host_in, (size_t)threads * sizeof(unsigned), cudaMemcpyHostToDevice);
    cudaFuncSetAttribute(block_sum, cudaFuncAttributeMaxDynamicSharedMemorySize,
                         set_attribute ? 64 * 1024 : 48 * 1024);
    SIMT_LAUNCH(block_sum, 1, threads, 64 * 1024, 0, d_in, d_out, threads);
    cudaMemcpy(host_out, d_out, sizeof(unsigned), cudaMemcpyDeviceToHost);
    cudaFree(d_in);
    cudaFree(d_out);
    return (int)cudaGetLastError();
}

// ---- cp.async (__pipeline_memcpy_async): each thread copies 8 bytes of two stages of a tile
// into shared memory as two commit groups, then reads both back into out: before any wait
// (wait_groups 2: nothing guaranteed), after waiting for the first stage (1), or after both (0).
// The reads are those of a kernel that forgot its wait: on a GPU their values are unspecified,
// in the emulation they are garbage, so only wait_groups 0 may equal the input.
__global__ void async_copy_two_stages(const unsigned long long *in, unsigned long long *out, int wait_groups) {
    __shared__ unsigned long long stage[2][128];
    const unsigned tid = threadIdx.x;
    for (int s = 0; s < 2; s++) {
        __pipeline_memcpy_async(&stage[s][tid], &in[s * blockDim.x + tid], sizeof(unsigned long long));
        __pipeline_commit();
    }
    if (wait_groups <= 1)
        __pipeline_wait_prior(wait_groups == 1 ? 1 : 0);
    __syncthreads();
    for (int s = 0; s < 2; s++)
        out[s * blockDim.x + tid] = stage[s][(tid + 1) % blockDim.x]; // a neighbour's copy
    __pipeline_wait_prior(0);
}

inline int sample_async_copy(const unsigned long long *host_in, unsigned long long *host_out, int threads,
                             int wait_groups) {
    unsigned long long *d_in = nullptr, *d_out = nullptr;
    const size_t bytes = 2 * (size_t)threads * sizeof(unsigned long long);
    cudaMalloc(&d_in, bytes);
    cudaMalloc(&d_out, bytes);
    cudaMemcpy(d_in, host_in, bytes, cudaMemcpyHostToDevice);
    SIMT_LAUNCH(async_copy_two_stages, 1, threads, 0, 0, d_in, d_out, wait_groups);
    cudaMemcpy(host_out, d_out, bytes, cudaMemcpyDeviceToHost);
    cudaFree(d_in);
    cudaFree(d_out);
    return (int)cudaGetLastError();
}
