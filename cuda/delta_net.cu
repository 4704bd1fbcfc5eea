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

// One block per (row, channels); the block of a sequence's first row runs its rows in order,
// then moves the convolution state (causal_conv_channel).
__global__ void delta_conv_kernel(const float *qkv, float *work, const float *taps, float *states, size_t seq_stride,
                                  uint32_t n_rows, size_t conv_dim, uint32_t kernel, const int32_t *pos,
                                  const uint32_t *slot) {
    const size_t c = (size_t)blockIdx.y * blockDim.x + threadIdx.x;
    sequence_rows sr;
    if (c >= conv_dim || !sequence_at(pos, slot, blockIdx.x, n_rows, &sr)) return;
    auto input = [&](uint32_t r) { return qkv[(size_t)r * conv_dim + c]; };
    auto emit = [&](uint32_t r, float y) { work[(size_t)r * conv_dim + c] = silu_f(y); };
    causal_conv_channel(sr, pos, states + (size_t)sr.slot * seq_stride + c, conv_dim, kernel, taps + c * kernel,
                        input, emit);
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
    const float *z, *beta_raw, *alpha_raw, *dt_bias, *a, *norm;
    float *work, *out, *states;
    size_t seq_stride, conv_dim;
    uint32_t n_rows, n_k_heads, n_v_heads, d, kernel, chunk;
    float eps;
};

// Where a block's sequence and value head read and write: the head's state matrix (zero from
// position 0, whatever the slot held), q, k and v of a row.
struct head_view {
    float *S;
    uint32_t qo, ko, vo; // offsets of the head's q, k and v in a work row
};

__device__ inline head_view head_of(const delta_args &g, const sequence_rows &sr, uint32_t h) {
    const uint32_t d = g.d, kh = h % g.n_k_heads;
    head_view v;
    v.S = g.states + (size_t)sr.slot * g.seq_stride + (size_t)(g.kernel - 1) * g.conv_dim + (size_t)h * d * d;
    v.qo = kh * d;
    v.ko = (g.n_k_heads + kh) * d;
    v.vo = 2 * g.n_k_heads * d + h * d;
    if (sr.p0 == 0)
        for (uint32_t i = 0; i < d; i++) v.S[(size_t)i * d + threadIdx.x] = 0.0f;
    return v;
}

// The update rate beta and the log decay g of row r, value head h (cpu/ops/delta_net.c head_gates).
__device__ inline float gate_beta(const delta_args &g, uint32_t r, uint32_t h) {
    return 1.0f / (1.0f + expf(-g.beta_raw[(size_t)r * g.n_v_heads + h]));
}
__device__ inline float gate_log_decay(const delta_args &g, uint32_t r, uint32_t h) {
    const float x = g.alpha_raw[(size_t)r * g.n_v_heads + h] + g.dt_bias[h];
    return (x > 20.0f ? x : log1pf(expf(x))) * g.a[h];
}

// A sequence the token-by-token recurrence runs: one row (a decode step's), or every sequence
// when the call asks for no chunks.
__device__ inline bool recurrent_sequence(const delta_args &g, const sequence_rows &sr) {
    return g.chunk == 0 || sr.r1 - sr.r0 == 1;
}

// The recurrence: one block of d threads per (row, value head); the block of a sequence's first
// row runs its rows in order. Thread j owns column j of the head's state matrix (S[i][j] for
// every key dim i), so the decay, S^T k, the update and S^T q need no other thread; the output
// norm sums the d squares in index order in shared memory.
__global__ void delta_rule_kernel(delta_args g, const int32_t *pos, const uint32_t *slot) {
    __shared__ float sq[LLMM_MAX_SSM_HEAD];
    __shared__ float inv_rms;
    const uint32_t h = blockIdx.y, j = threadIdx.x, d = g.d;
    sequence_rows sr;
    if (!sequence_at(pos, slot, blockIdx.x, g.n_rows, &sr) || !recurrent_sequence(g, sr)) return;
    const head_view hv = head_of(g, sr, h);
    float *S = hv.S;
    const float scale = 1.0f / sqrtf((float)d);
    for (uint32_t r = sr.r0; r < sr.r1; r++) {
        const float *x = g.work + (size_t)r * g.conv_dim;
        const float *q = x + hv.qo, *k = x + hv.ko;
        const float v = x[hv.vo + j];
        const float beta = gate_beta(g, r, h);
        const float decay = expf(gate_log_decay(g, r, h));
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

// The chunked form of the delta rule (cpu/ops/delta_net.c delta_head_chunk, the same formulas
// and sums in the same order): over a chunk of n rows from state S0, with cum_t the running sum
// of the log decays,
//   u_t = beta_t (v_t - e^cum_t S0^T k_t - sum_{s<t} e^(cum_t - cum_s) (k_s . k_t) u_s)
//   o_t = e^cum_t S0^T q_t + sum_{s<=t} e^(cum_t - cum_s) (k_s . q_t) u_s
//   S   = e^cum_{n-1} S0 + sum_s e^(cum_{n-1} - cum_s) k_s u_s^T.
// One block of d threads per (sequence, value head), thread j owning column j as in the
// recurrence. Per chunk: S0 is read once (every S0^T k_t and S0^T q_t of the chunk summed in
// one pass over its column), the n x n coefficients are computed by the block's threads at once,
// the triangular solve is then thread-local (u_t overwrites S0^T k_t in shared memory, read
// only by its thread), and S is written once. Dynamic shared memory: S0^T k and S0^T q (2 n d
// floats), then the coefficients (2 n n).
constexpr uint32_t MAX_CHUNK = 64;

__global__ void delta_chunk_kernel(delta_args g, const int32_t *pos, const uint32_t *slot) {
    SIMT_DYNAMIC_SHARED(float, smem);
    __shared__ float cum[MAX_CHUNK], beta[MAX_CHUNK], e_cum[MAX_CHUNK], e_end[MAX_CHUNK], inv_rms[MAX_CHUNK];
    const uint32_t h = blockIdx.y, j = threadIdx.x, d = g.d, C = g.chunk;
    sequence_rows sr;
    if (!sequence_at(pos, slot, blockIdx.x, g.n_rows, &sr) || recurrent_sequence(g, sr)) return;
    const head_view hv = head_of(g, sr, h);
    float *S = hv.S;
    float *wk = smem, *wq = smem + (size_t)C * d; // [t * d + j]: S0^T k_t, then u_t; S0^T q_t
    float *kk = wq + (size_t)C * d, *qk = kk + (size_t)C * C; // [t * C + s]: the coefficients
    const float scale = 1.0f / sqrtf((float)d);
    for (uint32_t c0 = sr.r0; c0 < sr.r1; c0 += C) {
        const uint32_t n = sr.r1 - c0 < C ? sr.r1 - c0 : C;
        auto row = [&](uint32_t t) { return g.work + (size_t)(c0 + t) * g.conv_dim; };
        for (uint32_t t = j; t < n; t += blockDim.x) {
            beta[t] = gate_beta(g, c0 + t, h);
            cum[t] = gate_log_decay(g, c0 + t, h);
        }
        __syncthreads();
        if (j == 0)
            for (uint32_t t = 1; t < n; t++) cum[t] = cum[t - 1] + cum[t];
        __syncthreads();
        for (uint32_t t = j; t < n; t += blockDim.x) {
            e_cum[t] = expf(cum[t]);
            e_end[t] = expf(cum[n - 1] - cum[t]);
        }
        for (uint32_t p = j; p < n * n; p += blockDim.x) {
            const uint32_t t = p / n, s = p % n;
            if (s > t) continue;
            const float *ks = row(s) + hv.ko, *kt = row(t) + hv.ko, *qt = row(t) + hv.qo;
            float dk = 0.0f, dq = 0.0f;
            for (uint32_t i = 0; i < d; i++) dk += ks[i] * kt[i];
            for (uint32_t i = 0; i < d; i++) dq += ks[i] * qt[i];
            const float e = expf(cum[t] - cum[s]);
            if (s < t) kk[t * C + s] = e * dk;
            qk[t * C + s] = e * dq;
        }
        for (uint32_t t = 0; t < n; t++) wk[t * d + j] = wq[t * d + j] = 0.0f;
        for (uint32_t i = 0; i < d; i++) {
            const float s0 = S[(size_t)i * d + j];
            for (uint32_t t = 0; t < n; t++) {
                wk[t * d + j] += s0 * row(t)[hv.ko + i];
                wq[t * d + j] += s0 * row(t)[hv.qo + i];
            }
        }
        __syncthreads(); // the gates' exponentials and the coefficients
        for (uint32_t t = 0; t < n; t++) {
            float u = row(t)[hv.vo + j] - e_cum[t] * wk[t * d + j];
            for (uint32_t s = 0; s < t; s++) u -= kk[t * C + s] * wk[s * d + j];
            u *= beta[t];
            wk[t * d + j] = u;
            float o = e_cum[t] * wq[t * d + j];
            for (uint32_t s = 0; s <= t; s++) o += qk[t * C + s] * wk[s * d + j];
            g.out[(size_t)(c0 + t) * g.n_v_heads * d + (size_t)h * d + j] = o * scale;
        }
        for (uint32_t i = 0; i < d; i++) {
            float x = S[(size_t)i * d + j] * e_cum[n - 1];
            for (uint32_t s = 0; s < n; s++) x += e_end[s] * row(s)[hv.ko + i] * wk[s * d + j];
            S[(size_t)i * d + j] = x;
        }
        __syncthreads(); // every thread's outputs of the chunk written
        for (uint32_t t = j; t < n; t += blockDim.x) {
            const float *o = g.out + (size_t)(c0 + t) * g.n_v_heads * d + (size_t)h * d;
            float sum = 0.0f;
            for (uint32_t i = 0; i < d; i++) sum += o[i] * o[i];
            inv_rms[t] = 1.0f / sqrtf(sum / (float)d + g.eps);
        }
        __syncthreads();
        for (uint32_t t = 0; t < n; t++) {
            const size_t at = (size_t)(c0 + t) * g.n_v_heads * d + (size_t)h * d + j;
            g.out[at] = g.out[at] * inv_rms[t] * g.norm[j] * silu_f(g.z[at]);
        }
        __syncthreads(); // the chunk's shared arrays are the next chunk's
    }
}

size_t chunk_shared_bytes(uint32_t chunk, uint32_t d) {
    return (2 * (size_t)chunk * d + 2 * (size_t)chunk * chunk) * sizeof(float);
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

int llmm__cu_gated_delta_net_check(const llmm_delta_batch *b, uint32_t chunk) {
    const bool ok = b->kernel > 0 && b->head_dim > 0 && b->head_dim <= LLMM_MAX_SSM_HEAD && b->n_k_heads > 0 &&
                    b->n_v_heads > 0 && b->n_rows <= UINT32_MAX && chunk <= MAX_CHUNK &&
                    chunk_shared_bytes(chunk, b->head_dim) <= LLMM_CU_DELTA_SHARED_MAX;
    return ok ? 0 : (int)cudaErrorInvalidValue;
}

int llmm__cu_gated_delta_net(cudaStream_t stream, const llmm_delta_batch *b, const int32_t *pos, const uint32_t *slot,
                             uint32_t chunk) {
    if (b->n_rows == 0) return 0;
    int err = llmm__cu_gated_delta_net_check(b, chunk);
    if (err) return err;
    const uint32_t n = (uint32_t)b->n_rows, d = b->head_dim;
    const size_t conv_dim = 2 * (size_t)b->n_k_heads * d + (size_t)b->n_v_heads * d;
    SIMT_LAUNCH(delta_conv_kernel, dim3(n, (unsigned)((conv_dim + CONV_THREADS - 1) / CONV_THREADS)),
                dim3(CONV_THREADS), 0, stream, b->qkv, b->work, b->taps, b->states, b->seq_stride, n, conv_dim,
                b->kernel, pos, slot);
    if ((err = (int)cudaGetLastError())) return err;
    const size_t heads = (size_t)n * 2 * b->n_k_heads;
    SIMT_LAUNCH(l2_heads_kernel, dim3((unsigned)((heads + ELEM_THREADS - 1) / ELEM_THREADS)), dim3(ELEM_THREADS), 0,
                stream, b->work, n, conv_dim, 2 * b->n_k_heads, d, b->eps);
    if ((err = (int)cudaGetLastError())) return err;
    const delta_args g = {b->z, b->beta_raw, b->alpha_raw, b->dt_bias, b->a, b->norm,
                          b->work, b->out, b->states, b->seq_stride, conv_dim, n,
                          b->n_k_heads, b->n_v_heads, d, b->kernel, chunk, b->eps};
    SIMT_LAUNCH(delta_rule_kernel, dim3(n, b->n_v_heads), dim3(d), 0, stream, g, pos, slot);
    if ((err = (int)cudaGetLastError()) || chunk == 0) return err;
    SIMT_LAUNCH(delta_chunk_kernel, dim3(n, b->n_v_heads), dim3(d), chunk_shared_bytes(chunk, d), stream, g, pos,
                slot);
    return (int)cudaGetLastError();
}
