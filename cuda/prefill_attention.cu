// Causal attention for a prompt chunk over the paged KV pool (llmm__cu_prefill_attention), tiled so
// that each K/V row read from the pool serves a whole tile of query rows and every query head
// of its GQA group, where llmm__cu_attention (attention.cu) reads it once per row.
//
// Design. One thread block (PF_WARPS warps) per (tile of query rows, K/V head, run of that
// head's query heads). Its queries, (row, head) pairs, PF_WARPS * QW of them, start in shared
// memory (q). The block walks the positions its rows see, [smallest window start, largest
// pos], PF_TILE positions at a time, once:
//   1. the K rows of the tile into shared memory as floats (F16 and Q8 widened on the way, the
//      CPU's dequantization: cpu/kv_rows.h), a warp per row, lanes over its values (coalesced),
//      the pool read once per block; a position no row of the block sees reads as 0;
//   2. each warp takes its QW queries; lane j scores position j against all of them (q read by
//      broadcast, K row j from shared memory: no shuffles in the dot), masks positions outside
//      each row's [start, pos], and updates each query's online softmax (running maximum m and
//      sum l, the accumulator rescaled by e^(m_old - m_new): softmax_merge.cuh's rules), leaving
//      the tile's weights in shared memory;
//   3. the V rows of the tile into the same buffer; each lane adds weight times V for its
//      values of each query (lane l holds values l, l + 32, ...: head_dim / 32 rounded up).
// A tile that no row of the block sees (before a window's start, a gap between non-consecutive
// positions) is skipped before anything is loaded; a warp none of whose queries sees a tile
// skips its math. Positions no row of the block sees are never read, so nothing past the
// block's largest pos or before its smallest start is touched: neither the block table past the
// sequence's end nor pool rows that were never written (0 * NaN would poison a sum).
//
// Tile sizes. PF_TILE = 32 positions: one per lane, so the scores need no cross-lane reduction
// and the softmax's max and sum take one warp reduction per query and tile. Rows of K sit in
// shared memory padded to hd4 = head_dim rounded up to 4 (zeros: the dot runs on float4s), at a
// stride of hd4 or hd4 + 4 floats, whichever is an odd number of float4s: lane j's 16-byte
// loads of row j then start at bank quad 4j * odd mod 32, distinct for the 8 lanes of each
// quarter warp (one shared-memory wavefront each); the V pass (lanes over values) reads
// consecutive banks. The budget is CUDA's default 48 KiB a block (no opt-in attribute, so any
// device and the emulation take it): K/V buffer 32 stride + q PF_WARPS QW hd4 + weights
// PF_WARPS QW 32 floats. head_dim <= 128: QW = 4, 16 queries a block, 27 KiB at 128 (8 blocks
// of 4 warps per SM by shared memory on an H200, 4 by registers: ptxas reports 108 a thread at
// head_dim 65 to 128, no spills; 72 to 91 elsewhere, Q8 at head_dim <= 64 spilling 4 to 12
// bytes); head_dim <= 256: QW = 2, 8 queries, 42 KiB at 256 (16 queries would need 50 KiB). K
// and V share one buffer (two more barriers a tile) because two buffers of 33 KiB do not fit at
// 256. Rows a block = queries / heads of the run (16 rows at group 1, 4 at group 4, 1 at group
// 16); a group larger than the block's queries is cut into runs as attention.cu does. So each
// K/V element loaded serves 8 or 16 queries, where llmm__cu_attention's serves one row's heads of the
// group.
//
// What only a GPU can show: races between warps (the emulation switches threads only at
// barriers and shuffles: compute-sanitizer racecheck), the bank-conflict claims above (Nsight
// Compute's shared-memory wavefronts), occupancy and register use (-Xptxas -v: acc holds QW *
// head_dim / 32 floats a lane, plus four partial dots per query), and the time against
// llmm__cu_attention on real prompt chunks (the reason this kernel exists).
//
// Next steps, not done: tensor cores (mma.sync m16n8k16 over F16 Q, K and V tiles: scores and
// PV as two small GEMMs per tile, which is where FlashAttention's speed comes from; the scalar
// dot here issues a 16-byte shared load per three FMAs or so), vectorised or asynchronous
// (cp.async / TMA) tile loads overlapping the math of the previous tile, and K and V loaded
// together where shared memory allows.
#include <math.h>

#include "kernels.h"
#include "prefill_attention.h"
#include "softmax_merge.cuh"

namespace {

#if SIMT_EMULATED
#define PF_UNROLL
#else
#define PF_UNROLL _Pragma("unroll")
#endif

constexpr unsigned PF_FULL_MASK = 0xffffffffu;
constexpr int PF_WARPS = 4;
constexpr int PF_THREADS = 32 * PF_WARPS;
constexpr uint32_t PF_TILE = 32; // positions per K/V tile: one per lane
constexpr uint32_t PF_MAX_HEAD_DIM = 256;
constexpr int PF_MAX_QUERIES = PF_WARPS * 4; // the largest QW is 4

struct pf_params {
    cu_kv kv;
    const int32_t *pos;
    const uint32_t *table_start, *tables;
    uint32_t layer;
    const float *q; // (rows, n_head, head_dim)
    float *out;     // (rows, n_head, head_dim)
    uint32_t n_head, group;
    uint32_t n_hg;     // blocks per (row tile, K/V head): the group in runs of head_run
    uint32_t head_run; // query heads per block
    uint32_t rows_per_tile;
    size_t row_begin, row_end;
    uint32_t window;
    float scale, softcap;
};

__device__ inline float pf_warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(PF_FULL_MASK, v, o));
    return v;
}
__device__ inline float pf_warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(PF_FULL_MASK, v, o);
    return v;
}

// head_dim rounded up to whole float4s, and the shared-memory stride of a K/V row: an odd
// number of float4s (the bank argument at the top).
__host__ __device__ constexpr uint32_t pf_hd4(uint32_t hd) { return (hd + 3) & ~3u; }
__host__ __device__ constexpr uint32_t pf_stride(uint32_t hd) {
    return pf_hd4(hd) / 4 % 2 ? pf_hd4(hd) : pf_hd4(hd) + 4;
}

__host__ __device__ constexpr int pf_qw(int epl) { return epl >= 8 ? 2 : 4; }

// Shared floats of a block: K/V tile, q, weights.
__host__ __device__ constexpr uint32_t pf_smem_floats(uint32_t hd, int qw) {
    return PF_TILE * pf_stride(hd) + PF_WARPS * qw * pf_hd4(hd) + PF_WARPS * qw * PF_TILE;
}

// The positions [lo, hi] (clipped to the tile at t0) as bits of the tile: bit j is t0 + j.
__device__ inline uint32_t pf_range_bits(int64_t lo, int64_t hi, int64_t t0) {
    const int64_t a = lo > t0 ? lo - t0 : 0, b = hi - t0 < (int64_t)PF_TILE - 1 ? hi - t0 : PF_TILE - 1;
    if (a > b) return 0;
    const uint32_t n = (uint32_t)(b - a + 1);
    return (n == 32 ? PF_FULL_MASK : (1u << n) - 1) << (uint32_t)a;
}

// Positions [t0, t0 + PF_TILE) of one head's K or V rows (region) into buf, row j at j *
// stride, values as the CPU reads them (cpu/kv_rows.h), a warp per row and lanes over its
// values; the padding past head_dim and the positions not in `seen` read as 0 (their weights
// are 0, and 0 * garbage could be NaN).
template <uint32_t T>
__device__ inline void pf_load_tile(const cu_kv &kv, const uint8_t *region, const uint32_t *table, int64_t t0,
                                    uint32_t seen, float *buf, uint32_t stride) {
    const uint32_t hd = kv.head_dim, hd4 = pf_hd4(hd), lane = threadIdx.x % 32;
    for (uint32_t j = threadIdx.x / 32; j < PF_TILE; j += PF_WARPS) {
        float *dst = buf + j * stride;
        if (!(seen >> j & 1)) {
            for (uint32_t d = lane; d < hd4; d += 32) dst[d] = 0.0f;
            continue;
        }
        const uint32_t p = (uint32_t)(t0 + j);
        const uint8_t *row = region + (size_t)table[p >> kv.block_shift] * kv.block_stride +
                             (size_t)(p & ((1u << kv.block_shift) - 1)) * kv.row_bytes;
        if constexpr (T == 0) {
            const float *x = reinterpret_cast<const float *>(row);
            for (uint32_t d = lane; d < hd4; d += 32) dst[d] = d < hd ? x[d] : 0.0f;
        } else if constexpr (T == 1) {
            const unsigned short *x = reinterpret_cast<const unsigned short *>(row);
            for (uint32_t d = lane; d < hd4; d += 32) dst[d] = d < hd ? __half2float(__ushort_as_half(x[d])) : 0.0f;
        } else { // a float scale, then the int8 values: scale * q
            const float qscale = *reinterpret_cast<const float *>(row);
            const int8_t *x = reinterpret_cast<const int8_t *>(row + 4);
            for (uint32_t d = lane; d < hd4; d += 32) dst[d] = d < hd ? qscale * (float)x[d] : 0.0f;
        }
    }
}

// One block per (row tile: x, K/V head and run of its query heads: y). EPL: head_dim / 32
// rounded up to a power of two (the lane's accumulator slots), QW = pf_qw(EPL) queries a warp.
// Query qi of the block (warp qi / QW) is row qi / head_run of the tile, head qi % head_run of
// the run.
template <uint32_t T, int EPL>
__global__ void __launch_bounds__(PF_THREADS) prefill_attention_kernel(pf_params a) {
    constexpr int QW = pf_qw(EPL), NQ = PF_WARPS * QW;
    SIMT_DYNAMIC_SHARED(float, smem);
    __shared__ int32_t row_lo[PF_MAX_QUERIES], row_hi[PF_MAX_QUERIES]; // a row's visible [lo, hi]; lo > hi: none

    const uint32_t hd = a.kv.head_dim, hd4 = pf_hd4(hd), stride = pf_stride(hd);
    const uint32_t kvh = blockIdx.y / a.n_hg, run = blockIdx.y % a.n_hg;
    const uint32_t h0 = kvh * a.group + run * a.head_run, nh = min(a.head_run, a.group - run * a.head_run);
    const size_t r0 = a.row_begin + (size_t)blockIdx.x * a.rows_per_tile;
    const uint32_t n_rows = (uint32_t)(a.row_end - r0 < a.rows_per_tile ? a.row_end - r0 : a.rows_per_tile);
    const uint32_t lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    float *kvbuf = smem, *qs = smem + PF_TILE * stride, *wts = qs + NQ * hd4;

    if (threadIdx.x < (uint32_t)PF_MAX_QUERIES) {
        int32_t lo = INT32_MAX, hi = -1;
        if (threadIdx.x < n_rows) {
            const int32_t p = a.pos[r0 + threadIdx.x];
            if (p >= 0) {
                const uint32_t n_kv = (uint32_t)p + 1;
                lo = a.window > 0 && a.window < n_kv ? (int32_t)(n_kv - a.window) : 0;
                hi = p;
            }
        }
        row_lo[threadIdx.x] = lo, row_hi[threadIdx.x] = hi;
    }
    for (uint32_t i = threadIdx.x; i < NQ * hd4; i += PF_THREADS) {
        const uint32_t qi = i / hd4, d = i % hd4, t = qi / a.head_run, g = qi % a.head_run;
        qs[i] = t < n_rows && g < nh && d < hd ? a.q[((r0 + t) * a.n_head + h0 + g) * hd + d] : 0.0f;
    }
    __syncthreads();

    int64_t p_lo = INT32_MAX, p_hi = -1; // the positions some row of the block sees
    uint32_t t_last = 0;                 // a row that sees p_hi: its block table reaches it
    for (uint32_t t = 0; t < n_rows; t++) {
        if (row_lo[t] > row_hi[t]) continue;
        if (row_lo[t] < p_lo) p_lo = row_lo[t];
        if (row_hi[t] > p_hi) p_hi = row_hi[t], t_last = t;
    }
    if (p_hi < 0) return; // padding rows only: the whole block leaves, before any other barrier

    int32_t lo[QW], hi[QW]; // the warp's queries' visible positions
    PF_UNROLL
    for (int i = 0; i < QW; i++) {
        const uint32_t qi = warp * QW + (uint32_t)i, t = qi / a.head_run, g = qi % a.head_run;
        const bool valid = t < n_rows && g < nh;
        lo[i] = valid ? row_lo[t] : INT32_MAX;
        hi[i] = valid ? row_hi[t] : -1;
    }
    float m[QW], l[QW], acc[QW][EPL];
    PF_UNROLL
    for (int i = 0; i < QW; i++) {
        m[i] = -INFINITY, l[i] = 0;
        PF_UNROLL
        for (int s = 0; s < EPL; s++) acc[i][s] = 0;
    }
    const uint32_t *table = a.tables + a.table_start[r0 + t_last];
    const uint8_t *k_head = a.kv.pool + ((size_t)a.layer * a.kv.n_head_kv + kvh) * a.kv.head_stride;
    const uint8_t *v_head = a.kv.pool + (((size_t)a.kv.n_layer + a.layer) * a.kv.n_head_kv + kvh) * a.kv.head_stride;
    const float *qw = qs + warp * QW * hd4;
    float *ww = wts + warp * QW * PF_TILE;

    for (int64_t t0 = p_lo; t0 <= p_hi; t0 += PF_TILE) {
        uint32_t seen = 0; // the tile's positions some row sees: the same for the whole block
        for (uint32_t t = 0; t < n_rows; t++) seen |= pf_range_bits(row_lo[t], row_hi[t], t0);
        if (!seen) continue; // no barrier passed: every thread skips
        bool warp_seen = false; // the same for the whole warp
        PF_UNROLL
        for (int i = 0; i < QW; i++) warp_seen = warp_seen || pf_range_bits(lo[i], hi[i], t0) != 0;

        __syncthreads(); // the previous tile's V reads are done
        pf_load_tile<T>(a.kv, k_head, table, t0, seen, kvbuf, stride);
        __syncthreads();
        if (warp_seen) {
            // four partial sums a query (the float4's components): chains of head_dim / 4 adds
            float dx[QW], dy[QW], dz[QW], dw[QW];
            PF_UNROLL
            for (int i = 0; i < QW; i++) dx[i] = dy[i] = dz[i] = dw[i] = 0;
            const float *krow = kvbuf + lane * stride;
            for (uint32_t d = 0; d < hd4; d += 4) {
                const float4 k4 = *reinterpret_cast<const float4 *>(krow + d);
                PF_UNROLL
                for (int i = 0; i < QW; i++) {
                    const float4 q4 = *reinterpret_cast<const float4 *>(qw + i * hd4 + d);
                    dx[i] += q4.x * k4.x, dy[i] += q4.y * k4.y, dz[i] += q4.z * k4.z, dw[i] += q4.w * k4.w;
                }
            }
            const int64_t p = t0 + lane;
            PF_UNROLL
            for (int i = 0; i < QW; i++) {
                const bool visible = p >= lo[i] && p <= hi[i];
                const float s = visible ? sm_score((dx[i] + dy[i]) + (dz[i] + dw[i]), a.scale, a.softcap) : -INFINITY;
                const float m_new = fmaxf(m[i], pf_warp_max(s));
                const float e = visible ? expf(s - m_new) : 0.0f;
                const float corr = sm_rescale(m[i], m_new); // 1 exactly when the maximum stays
                l[i] = l[i] * corr + pf_warp_sum(e);
                m[i] = m_new;
                PF_UNROLL
                for (int s2 = 0; s2 < EPL; s2++) acc[i][s2] *= corr;
                ww[i * PF_TILE + lane] = e;
            }
        }
        __syncthreads(); // the K reads are done; the weights are published
        pf_load_tile<T>(a.kv, v_head, table, t0, seen, kvbuf, stride);
        __syncthreads();
        if (warp_seen) {
            const uint32_t n = 32 - (uint32_t)__clz((int)seen); // past the tile's last seen position: all 0
            for (uint32_t j = 0; j < n; j++) {
                float v[EPL];
                PF_UNROLL
                for (int s = 0; s < EPL; s++) {
                    const uint32_t d = 32 * (uint32_t)s + lane;
                    v[s] = d < hd ? kvbuf[j * stride + d] : 0.0f;
                }
                PF_UNROLL
                for (int i = 0; i < QW; i++) {
                    const float w = ww[i * PF_TILE + j];
                    PF_UNROLL
                    for (int s = 0; s < EPL; s++) acc[i][s] += w * v[s];
                }
            }
        }
    }

    PF_UNROLL
    for (int i = 0; i < QW; i++) {
        if (lo[i] > hi[i]) continue; // an idle query slot or a padding row
        const uint32_t qi = warp * QW + (uint32_t)i, t = qi / a.head_run, g = qi % a.head_run;
        float *o = a.out + ((r0 + t) * a.n_head + h0 + g) * hd;
        PF_UNROLL
        for (int s = 0; s < EPL; s++) {
            const uint32_t d = 32 * (uint32_t)s + lane;
            if (d < hd) o[d] = sm_result(sm_partial{m[i], l[i], acc[i][s]});
        }
    }
}

typedef void (*pf_kernel_fn)(pf_params);

template <uint32_t T> pf_kernel_fn pf_kernel_epl(uint32_t epl) {
    switch (epl) {
    case 1: return &prefill_attention_kernel<T, 1>;
    case 2: return &prefill_attention_kernel<T, 2>;
    case 4: return &prefill_attention_kernel<T, 4>;
    default: return &prefill_attention_kernel<T, 8>;
    }
}

pf_kernel_fn pf_kernel(uint32_t type, uint32_t epl) {
    if (type == 0) return pf_kernel_epl<0>(epl);
    if (type == 1) return pf_kernel_epl<1>(epl);
    return pf_kernel_epl<2>(epl);
}

} // namespace

extern "C" int llmm__cu_prefill_attention(cudaStream_t stream, const cu_kv *kv, const cu_step *step, uint32_t layer,
                                    const float *q, float *out, uint32_t n_head, uint32_t window, float scale,
                                    float softcap, size_t row_begin, size_t row_end) {
    if (!kv || !step || !q || !out || !kv->pool || layer >= kv->n_layer || kv->type > 2 || kv->n_head_kv == 0 ||
        n_head == 0 || n_head % kv->n_head_kv != 0 || kv->head_dim == 0 || kv->head_dim > PF_MAX_HEAD_DIM ||
        kv->block_shift >= 32 || row_begin > row_end || row_end > step->n_rows)
        return (int)cudaErrorInvalidValue;
    if (row_begin == row_end) return 0;
    const uint32_t hd = kv->head_dim, slots = (hd + 31) / 32;
    uint32_t epl = 1;
    while (epl < slots) epl *= 2;
    const uint32_t nq = (uint32_t)(PF_WARPS * pf_qw((int)epl)), group = n_head / kv->n_head_kv;

    pf_params a;
    a.kv = *kv;
    a.pos = step->pos;
    a.table_start = step->table_start;
    a.tables = step->tables;
    a.layer = layer;
    a.q = q;
    a.out = out;
    a.n_head = n_head;
    a.group = group;
    a.n_hg = (group + nq - 1) / nq;
    a.head_run = (group + a.n_hg - 1) / a.n_hg;
    a.rows_per_tile = nq / a.head_run;
    a.row_begin = row_begin;
    a.row_end = row_end;
    a.window = window;
    a.scale = scale;
    a.softcap = softcap;
    const size_t n_tiles = (row_end - row_begin + a.rows_per_tile - 1) / a.rows_per_tile;
    const size_t grid_y = (size_t)kv->n_head_kv * a.n_hg;
    if (n_tiles > 0x7fffffff || grid_y > 65535) return (int)cudaErrorInvalidValue;
    const pf_kernel_fn kfn = pf_kernel(kv->type, epl);
    const size_t shmem = pf_smem_floats(hd, pf_qw((int)epl)) * sizeof(float);
    SIMT_LAUNCH(kfn, dim3((unsigned)n_tiles, (unsigned)grid_y), dim3(PF_THREADS), shmem, stream, a);
    return (int)cudaGetLastError();
}
