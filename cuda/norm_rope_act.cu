// Norms, rotary embedding, activations and the element-wise ops: the CPU backend's
// cpu/ops/elementwise.c and cpu/ops/rowwise.c on the device, with their float/double choices and
// operation orders, so that results round alike (tests/cuda/test_cuda_ops.cpp).
#include <math.h>

#include "kernels.h"

namespace {

constexpr int NORM_THREADS = 256;
constexpr int ELEM_THREADS = 256;
constexpr int ROPE_THREADS = 128;
// Enough blocks to fill an H200 several times over; a grid-stride loop covers the rest.
constexpr size_t ELEM_MAX_BLOCKS = 4096;

unsigned elem_blocks(size_t n) {
    const size_t b = (n + ELEM_THREADS - 1) / ELEM_THREADS;
    return (unsigned)(b < ELEM_MAX_BLOCKS ? b : ELEM_MAX_BLOCKS);
}

// The sum of squares in double, as the CPU (cpu/kernel_table.c rms_norm_row_scalar): each square
// rounded to float first, then summed in double. FP64 runs at full rate on sm_90, and on sm_87
// the row's few thousand adds are still small next to the loads; the order of the double sum
// differs from the CPU's, which the rounding of the mean to float hides almost always.
__global__ void rms_norm_kernel(const float *x, const float *weight, float *out, size_t dim, float eps) {
    __shared__ double partial[NORM_THREADS / 32];
    __shared__ float row_scale;
    const float *xr = x + (size_t)blockIdx.x * dim;
    float *outr = out + (size_t)blockIdx.x * dim;
    double sum = 0;
    for (size_t i = threadIdx.x; i < dim; i += blockDim.x) sum += (double)(xr[i] * xr[i]);
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = sum;
    __syncthreads();
    if (threadIdx.x == 0) {
        double total = 0;
        for (unsigned w = 0; w < blockDim.x / 32; w++) total += partial[w];
        const float mean = (float)(total / (double)dim);
        row_scale = 1.0f / sqrtf(mean + eps);
    }
    __syncthreads();
    const float scale = row_scale;
    for (size_t i = threadIdx.x; i < dim; i += blockDim.x) outr[i] = xr[i] * scale * weight[i];
}

__global__ void add_kernel(float *dst, const float *src, size_t n) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dst[i] += src[i];
}

__global__ void add_rows_kernel(float *x, const float *bias, size_t n, size_t dim) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        x[i] += bias[i % dim];
}

__global__ void scale_kernel(float *x, size_t n, float s) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        x[i] *= s;
}

// Reciprocal, product, tanh, product: the CPU's order (cpu/ops/rowwise.c), not x / cap.
__global__ void softcap_kernel(float *x, size_t n, float cap) {
    const float inv = 1.0f / cap;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        x[i] = tanhf(x[i] * inv) * cap;
}

__device__ inline float gelu_tanh(float x) {
    const float k = 0.79788456080286535587989211986876f; // sqrt(2/pi)
    return 0.5f * x * (1.0f + tanhf(k * x * (1.0f + 0.044715f * x * x)));
}

__global__ void glu_kernel(float *gate, const float *up, size_t n, uint32_t act) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const float g = gate[i];
        gate[i] = act == 0 ? g / (1.0f + expf(-g)) * up[i] : gelu_tanh(g) * up[i];
    }
}

// One block per row. The angle of pair i is pos * theta_scale^i built by i float
// multiplications in sequence, as the CPU builds it (llmm__cpu_rope_rows), so one thread walks the
// pairs and the others wait: at most head_dim / 2 multiplies, then cos and sin in parallel.
// theta_scale comes from the host's powf, the CPU's own.
__global__ void rope_kernel(float *x, size_t n_heads, size_t head_dim, const int32_t *pos, uint32_t n_rot,
                            float theta_scale, float freq_scale, float mscale, uint32_t kind,
                            const float *freq_factors) {
    SIMT_DYNAMIC_SHARED(float, cs); // cos (n_rot / 2), then sin (n_rot / 2)
    const uint32_t half = n_rot / 2;
    float *sn = cs + half;
    if (threadIdx.x == 0) {
        float theta = (float)pos[blockIdx.x];
        for (uint32_t i = 0; i < half; i++) {
            cs[i] = theta;
            theta *= theta_scale;
        }
    }
    __syncthreads();
    for (uint32_t i = threadIdx.x; i < half; i += blockDim.x) {
        const float theta = cs[i];
        const float t = freq_scale * (freq_factors ? theta / freq_factors[i] : theta);
        cs[i] = cosf(t) * mscale;
        sn[i] = sinf(t) * mscale;
    }
    __syncthreads();
    float *row = x + (size_t)blockIdx.x * n_heads * head_dim;
    for (size_t j = threadIdx.x; j < n_heads * half; j += blockDim.x) {
        const size_t h = j / half, i = j % half;
        float *v = row + h * head_dim;
        float *a = kind == 1 ? v + i : v + 2 * i, *b = kind == 1 ? v + i + half : v + 2 * i + 1;
        const float x0 = *a, x1 = *b, c = cs[i], s = sn[i];
        *a = x0 * c - x1 * s;
        *b = x0 * s + x1 * c;
    }
}

} // namespace

extern "C" {

int llmm__cu_rms_norm(cudaStream_t stream, const float *x, const float *weight, float *out, size_t n_rows, size_t dim,
                float eps) {
    if (n_rows == 0) return 0;
    SIMT_LAUNCH(rms_norm_kernel, dim3((unsigned)n_rows), dim3(NORM_THREADS), 0, stream, x, weight, out, dim, eps);
    return (int)cudaGetLastError();
}

int llmm__cu_add(cudaStream_t stream, float *dst, const float *src, size_t n) {
    if (n == 0) return 0;
    SIMT_LAUNCH(add_kernel, dim3(elem_blocks(n)), dim3(ELEM_THREADS), 0, stream, dst, src, n);
    return (int)cudaGetLastError();
}

int llmm__cu_add_rows(cudaStream_t stream, float *x, const float *bias, size_t n_rows, size_t dim) {
    const size_t n = n_rows * dim;
    if (n == 0) return 0;
    SIMT_LAUNCH(add_rows_kernel, dim3(elem_blocks(n)), dim3(ELEM_THREADS), 0, stream, x, bias, n, dim);
    return (int)cudaGetLastError();
}

int llmm__cu_scale(cudaStream_t stream, float *x, size_t n, float s) {
    if (n == 0) return 0;
    SIMT_LAUNCH(scale_kernel, dim3(elem_blocks(n)), dim3(ELEM_THREADS), 0, stream, x, n, s);
    return (int)cudaGetLastError();
}

int llmm__cu_softcap(cudaStream_t stream, float *x, size_t n, float cap) {
    if (n == 0) return 0;
    SIMT_LAUNCH(softcap_kernel, dim3(elem_blocks(n)), dim3(ELEM_THREADS), 0, stream, x, n, cap);
    return (int)cudaGetLastError();
}

int llmm__cu_glu(cudaStream_t stream, float *gate, const float *up, size_t n, uint32_t act) {
    if (n == 0) return 0;
    if (act > 1) return (int)cudaErrorInvalidValue;
    SIMT_LAUNCH(glu_kernel, dim3(elem_blocks(n)), dim3(ELEM_THREADS), 0, stream, gate, up, n, act);
    return (int)cudaGetLastError();
}

int llmm__cu_rope(cudaStream_t stream, float *x, size_t n_rows, size_t n_heads, size_t head_dim, const int32_t *pos,
            uint32_t n_rot, float base, float freq_scale, float mscale, uint32_t kind, const float *freq_factors) {
    if (kind > 1 || n_rot > head_dim || n_rot % 2) return (int)cudaErrorInvalidValue;
    if (n_rows == 0 || n_heads == 0 || n_rot == 0) return 0;
    const float theta_scale = powf(base, -2.0f / (float)n_rot);
    SIMT_LAUNCH(rope_kernel, dim3((unsigned)n_rows), dim3(ROPE_THREADS), n_rot * sizeof(float), stream, x, n_heads,
                head_dim, pos, n_rot, theta_scale, freq_scale, mscale, kind, freq_factors);
    return (int)cudaGetLastError();
}

} // extern "C"
