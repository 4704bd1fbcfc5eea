// qwen35's Gated DeltaNet layers (lib/backend/backend.h llmm_delta_batch), the split of its
// gated query rows and the sigmoid gate of its attention output: cpu/ops/delta_net.c and the
// CPU's glu on the device, with the CPU's operation orders (each sum in index order, no fused
// multiply-add under -fmad=false), so results differ only through expf/log1pf.
#include <math.h>

#include "backend/backend.h"
#include "kernels.h"
#include "sequence_rows.cuh"

namespace {

constexpr int CONV_THREADS = 128;
constexpr int ELEM_THREADS = 256;
constexpr size_t ELEM_MAX_BLOCKS = 4096;

unsigned elem_blocks(size_t n) {
    const size_t b = (n + ELEM_THREADS - 1) / ELEM_THREADS;
    return (unsigned)(b < ELEM_MAX_BLOCKS ? b : ELEM_MAX_BLOCKS);
}

__device__ inline float silu_f(float x) { return x / (1.0f + expf(-x)); }

__global__ void split_halves_kernel(const float *src, float *a, float *b, size_t n_groups, size_t width) {
    const size_t n = n_groups * width;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const size_t g = i / width, k = i % width;
        a[i] = src[2 * g * width + k];
        b[i] = src[(2 * g + 1) * width + k];
    }
}

__global__ void sigmoid_mul_kernel(float *gate, const float *up, size_t n) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        gate[i] = up[i] * (1.0f / (1.0f + expf(-gate[i])));
}

// The convolution input of position q, channel c (cpu/ops/delta_net.c conv_in).
__device__ inline float conv_input(const float *qkv, const float *state, size_t conv_dim, uint32_t kernel,
                                   uint32_t r0, int64_t p0, int64_t q, size_t c) {
    if (q < 0) return 0.0f;
    if (q >= p0) return qkv[(size_t)(r0 + (uint32_t)(q - p0)) * conv_dim + c];
    return state[(size_t)((int64_t)kernel - 1 - (p0 - q)) * conv_dim + c];
}

// One block per (row, channels); the block of a sequence's first row runs its rows in order,
// then moves the convolution state (ascending, as on the CPU).
__global__ void delta_conv_kernel(const float *qkv, float *work, const float *taps, float *states, size_t seq_stride,
                                  uint32_t n_rows, size_t conv_dim, uint32_t kernel, const int32_t *pos,
                                  const uint32_t *seq) {
    const uint32_t r0 = blockIdx.x;
    const size_t c = (size_t)blockIdx.y * blockDim.x + threadIdx.x;
    const uint32_t r1 = sequence_rows_end(seq, r0, n_rows);
    if (c >= conv_dim || r1 == 0) return;
    float *state = states + (size_t)seq[r0] * seq_stride;
    const int64_t p0 = pos[r0];
    for (uint32_t r = r0; r < r1; r++) {
        float y = 0.0f;
        for (uint32_t j = 0; j < kernel; j++)
            y += conv_input(qkv, state, conv_dim, kernel, r0, p0, (int64_t)pos[r] - (int64_t)kernel + 1 + (int64_t)j, c) *
                 taps[c * kernel + j];
        work[(size_t)r * conv_dim + c] = silu_f(y);
    }
    const int64_t p_last = pos[r1 - 1];
    for (uint32_t i = 0; i + 1 < kernel; i++)
        state[(size_t)i * conv_dim + c] =
            conv_input(qkv, state, conv_dim, kernel, r0, p0, p_last - (int64_t)kernel + 2 + (int64_t)i, c);
}

// One thread per (row, query or key head): divided by max(L2 norm, eps).
__global__ void l2_heads_kernel(float *work, uint32_t n_rows, size_t conv_dim, uint32_t n_heads2, uint32_t d,
                                float eps) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)n_rows * n_heads2) return;
    float *x = work + (i / n_heads2) * conv_dim + (i % n_heads2) * d;
    float sum = 0.0f;
    for (uint32_t k = 0; k < d; k++) sum += x[k] * x[k];
    const float scale = 1.0f / fmaxf(sqrtf(sum), eps);
    for (uint32_t k = 0; k < d; k++) x[k] *= scale;
}

struct delta_args {
    const float *work, *z, *beta_raw, *alpha_raw, *dt_bias, *a, *norm;
    float *out, *states;
    size_t seq_stride, conv_dim;
    uint32_t n_rows, n_k_heads, n_v_heads, d, kernel;
    float eps;
};

// One block of d threads per (row, value head); the block of a sequence's first row runs its
// rows in order. Thread j owns column j of the head's state matrix (S[i][j] for every key dim
// i), so the decay, S^T k, the update and S^T q need no other thread; the output norm sums the
// d squares in index order in shared memory.
__global__ void delta_rule_kernel(delta_args g, const int32_t *pos, const uint32_t *seq) {
    __shared__ float sq[LLMM_MAX_SSM_HEAD];
    __shared__ float inv_rms;
    const uint32_t r0 = blockIdx.x, h = blockIdx.y, j = threadIdx.x, d = g.d;
    const uint32_t r1 = sequence_rows_end(seq, r0, g.n_rows);
    if (r1 == 0) return;
    float *S = g.states + (size_t)seq[r0] * g.seq_stride + (size_t)(g.kernel - 1) * g.conv_dim + (size_t)h * d * d;
    if (pos[r0] == 0)
        for (uint32_t i = 0; i < d; i++) S[(size_t)i * d + j] = 0.0f;
    const uint32_t kh = h % g.n_k_heads;
    const float scale = 1.0f / sqrtf((float)d);
    for (uint32_t r = r0; r < r1; r++) {
        const float *x = g.work + (size_t)r * g.conv_dim;
        const float *q = x + (size_t)kh * d, *k = x + (size_t)(g.n_k_heads + kh) * d;
        const float v = x[(size_t)2 * g.n_k_heads * d + (size_t)h * d + j];
        const float beta = 1.0f / (1.0f + expf(-g.beta_raw[(size_t)r * g.n_v_heads + h]));
        const float graw = g.alpha_raw[(size_t)r * g.n_v_heads + h] + g.dt_bias[h];
        const float decay = expf((graw > 20.0f ? graw : log1pf(expf(graw))) * g.a[h]);
        for (uint32_t i = 0; i < d; i++) S[(size_t)i * d + j] *= decay;
        float kv = 0.0f;
        for (uint32_t i = 0; i < d; i++) kv += S[(size_t)i * d + j] * k[i];
        const float delta = beta * (v - kv);
        for (uint32_t i = 0; i < d; i++) S[(size_t)i * d + j] += k[i] * delta;
        float acc = 0.0f;
        for (uint32_t i = 0; i < d; i++) acc += S[(size_t)i * d + j] * q[i];
        const float o = acc * scale;
        sq[j] = o * o;
        __syncthreads();
        if (j == 0) {
            float sum = 0.0f;
            for (uint32_t i = 0; i < d; i++) sum += sq[i];
            inv_rms = 1.0f / sqrtf(sum / (float)d + g.eps);
        }
        __syncthreads();
        const size_t at = (size_t)r * g.n_v_heads * d + (size_t)h * d + j;
        g.out[at] = o * inv_rms * g.norm[j] * silu_f(g.z[at]);
        __syncthreads(); // sq and inv_rms are the next row's
    }
}

} // namespace

int llmm__cu_split_halves(cudaStream_t stream, const float *src, float *a, float *b, size_t n_groups, size_t width) {
    if (n_groups == 0 || width == 0) return 0;
    SIMT_LAUNCH(split_halves_kernel, dim3(elem_blocks(n_groups * width)), dim3(ELEM_THREADS), 0, stream, src, a, b,
                n_groups, width);
    return (int)cudaGetLastError();
}

int llmm__cu_sigmoid_mul(cudaStream_t stream, float *gate, const float *up, size_t n) {
    if (n == 0) return 0;
    SIMT_LAUNCH(sigmoid_mul_kernel, dim3(elem_blocks(n)), dim3(ELEM_THREADS), 0, stream, gate, up, n);
    return (int)cudaGetLastError();
}

int llmm__cu_gated_delta_net(cudaStream_t stream, const llmm_delta_batch *b, const int32_t *pos, const uint32_t *seq) {
    if (b->n_rows == 0) return 0;
    if (b->kernel == 0 || b->head_dim == 0 || b->head_dim > LLMM_MAX_SSM_HEAD || b->n_k_heads == 0 ||
        b->n_rows > UINT32_MAX)
        return (int)cudaErrorInvalidValue;
    const uint32_t n = (uint32_t)b->n_rows, d = b->head_dim;
    const size_t conv_dim = 2 * (size_t)b->n_k_heads * d + (size_t)b->n_v_heads * d;
    SIMT_LAUNCH(delta_conv_kernel, dim3(n, (unsigned)((conv_dim + CONV_THREADS - 1) / CONV_THREADS)),
                dim3(CONV_THREADS), 0, stream, b->qkv, b->work, b->taps, b->states, b->seq_stride, n, conv_dim,
                b->kernel, pos, seq);
    int err = (int)cudaGetLastError();
    if (err) return err;
    const size_t heads = (size_t)n * 2 * b->n_k_heads;
    SIMT_LAUNCH(l2_heads_kernel, dim3((unsigned)((heads + ELEM_THREADS - 1) / ELEM_THREADS)), dim3(ELEM_THREADS), 0,
                stream, b->work, n, conv_dim, 2 * b->n_k_heads, d, b->eps);
    if ((err = (int)cudaGetLastError())) return err;
    const delta_args g = {b->work, b->z, b->beta_raw, b->alpha_raw, b->dt_bias, b->a, b->norm, b->out, b->states,
                          b->seq_stride, conv_dim, n, b->n_k_heads, b->n_v_heads, d, b->kernel, b->eps};
    SIMT_LAUNCH(delta_rule_kernel, dim3(n, b->n_v_heads), dim3(d), 0, stream, g, pos, seq);
    return (int)cudaGetLastError();
}
