// The paged KV cache on the device: storing the step's K and V rows (llmm__cu_kv_write) and
// attention over them (llmm__cu_attention), in the core's layout (lib/backend/backend.h llmm_kv_layout) and
// the CPU backend's row formats and rounding (cpu/kv_rows.h), so that a pool written here
// reads back the same on either backend.
//
// Attention is split-K decoding. One block of attention_split_kernel takes one (row, K/V
// head, split): every query head of that K/V head's group (up to ATTN_MAX_GROUP of them at
// once) over one split of the row's positions, so that each K and V row is read from the pool
// once per group and split, not once per query head. A split leaves its partial softmax
// (softmax_merge.cuh: maximum m, sum l, unnormalised output a per value) in scratch and
// attention_merge_kernel combines a row's splits; a row whose positions fit in its first split
// is finished by that split directly and skipped by the merge.
//
// The launch geometry depends on the step's row count, the heads, head_dim and the context's
// largest sequence (max_kv) only, never on positions, which are device data: a decode step
// captured as a CUDA graph replays with any positions. Each block finds its own range from
// pos[] and exits at once when the row is too short to reach its split.
#include <math.h>

#include "kernels.h"
#include "softmax_merge.cuh"

namespace {

// Loops over register arrays (q, acc, the loaded values) index them by their counter: unrolled,
// those arrays stay in registers. The host compiler of the emulated build does not know the
// pragma.
#if SIMT_EMULATED
#define ATTN_UNROLL
#else
#define ATTN_UNROLL _Pragma("unroll")
#endif

constexpr unsigned FULL_MASK = 0xffffffffu;
constexpr int KV_THREADS = 256;

constexpr int ATTN_WARPS = 4;
constexpr int ATTN_THREADS = 32 * ATTN_WARPS;
// Positions scored at a time: the block holds one chunk's weights in shared memory whatever
// the split's length; a longer split merges chunk after chunk by the online softmax.
constexpr uint32_t ATTN_CHUNK = 256;
// Most (row, split) pairs one launch makes: bounds the scratch at ATTN_MAX_ROW_SPLITS *
// n_head * (head_dim + 2) floats (17 MiB at 32 heads of 128) however large the batch. A step
// with many rows has n_rows * n_head_kv blocks of parallelism already; its splits grow longer.
constexpr size_t ATTN_MAX_ROW_SPLITS = 1024;
// Query heads one block computes: q and the output accumulators of each are registers of
// every lane (GP * EPL values each), so at most 8, and at most 4 at head_dim 256 (EPL 8), which
// keeps q and the accumulators at 64 registers and every variant within 128 (4 blocks of 128
// threads a SM: __launch_bounds__ below). Larger groups take several blocks, each reading the
// K/V rows once.
constexpr uint32_t ATTN_MAX_GROUP = 8;
constexpr uint32_t ATTN_MAX_GROUP_VALUES = 32; // GP * EPL
__host__ __device__ constexpr uint32_t attn_max_group(uint32_t epl) {
    return ATTN_MAX_GROUP_VALUES / epl < ATTN_MAX_GROUP ? ATTN_MAX_GROUP_VALUES / epl : ATTN_MAX_GROUP;
}
// Blocks of ATTN_THREADS an SM must be able to hold: 65536 registers / (4 * 128) = 128 a thread.
[[maybe_unused]] constexpr int ATTN_MIN_BLOCKS = 4; /* read only by nvcc (__launch_bounds__) */
// K or V rows a warp loads before it uses the first: R rows of EPL values a lane in registers,
// R * EPL <= 16, or 8 beside the 8 heads' q and accumulators (GP 8), and R between 2 and 8: from
// 2 at head_dim 256 to 8 at 32. The loads of a batch are in flight together, which is what hides
// a long context's DRAM latency; more would push the largest variants past 128 registers. Those
// two, GP * EPL = 32 (<8, 4> and <4, 8>: q and the accumulators alone take 64 registers), load one
// row at a time: with two, ptxas spilled 20 bytes (<4, 8>, sm_90), 16 (<4, 8>) and 44 (<8, 4>) on
// sm_87 to stay within 128; their 16 warps a SM keep 16 rows in flight.
__host__ __device__ constexpr int attn_rows_in_flight(int gp, int epl) {
    return gp * epl >= (int)ATTN_MAX_GROUP_VALUES ? 1
           : (gp >= 8 ? 8 : 16) / epl < 2     ? 2
           : (gp >= 8 ? 8 : 16) / epl > 8     ? 8
                                              : (gp >= 8 ? 8 : 16) / epl;
}
// Head values per lane at most: 32 lanes cover head_dim up to 256 (Gemma).
constexpr uint32_t ATTN_MAX_LANE_VALUES = 8;
constexpr uint32_t ATTN_MAX_HEAD_DIM = 32 * ATTN_MAX_LANE_VALUES;
constexpr int MERGE_THREADS = 128;

// Byte offset of the (K or V: which, layer, head h) row at position p of the sequence whose
// block table is table, from the pool's start (lib/backend/backend.h kv_layout_view, kv_row_offset).
__device__ inline size_t kv_offset(const cu_kv &kv, uint32_t which, uint32_t layer, uint32_t h,
                                   const uint32_t *table, uint32_t p) {
    const size_t region = ((size_t)which * kv.n_layer + layer) * kv.n_head_kv + h;
    const uint32_t slot = p & ((1u << kv.block_shift) - 1);
    return region * kv.head_stride + (size_t)table[p >> kv.block_shift] * kv.block_stride + slot * kv.row_bytes;
}

// The (K or V: which, layer, head h) region of the pool, and position p's row offset in it.
__device__ inline const uint8_t *kv_region(const cu_kv &kv, uint32_t which, uint32_t layer, uint32_t h) {
    return kv.pool + (((size_t)which * kv.n_layer + layer) * kv.n_head_kv + h) * kv.head_stride;
}
__device__ inline size_t kv_row_in_region(const cu_kv &kv, const uint32_t *table, uint32_t p) {
    return (size_t)table[p >> kv.block_shift] * kv.block_stride + (p & ((1u << kv.block_shift) - 1)) * kv.row_bytes;
}

__device__ inline float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(FULL_MASK, v, o));
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
    if (pos[r] < 0) return; // a padding row of a batch bucket (backend.cu): nothing to store
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

// ---------------------------------------------------------------- attention

// What one attention launch passes to its kernels (by value).
struct attn_params {
    cu_kv kv;
    const int32_t *pos;
    const uint32_t *table_start, *tables;
    uint32_t layer;
    const float *q; // (n_rows, n_head, head_dim)
    float *out;     // (n_rows, n_head, head_dim)
    uint32_t n_head;
    uint32_t group;      // query heads per K/V head
    uint32_t n_hg;       // blocks per (row, K/V head, split): the group in runs of head_run
    uint32_t head_run;   // query heads per block, at most ATTN_MAX_GROUP
    uint32_t window;
    float scale, softcap;
    uint32_t n_splits;   // splits per row (gridDim.z)
    uint32_t split_len;  // positions per split; the last split also takes whatever lies past
    uint32_t vw, vw_shift; // values per vector load (a power of two) and its log2
    uint32_t n_vec;      // vectors in a head row: head_dim / vw
    // scratch, for n_splits > 1: per (row, query head, split) p = (r * n_head + h) * n_splits + s
    float *part_m;   // (p) the split's largest score
    float *part_l;   // (p) its sum of e^(s - m)
    float *part_acc; // (p, head_dim) its unnormalised output
};

// A head row as one warp reads it, lanes over head_dim: the row's values form vectors of vw
// values (at most 16 bytes, as the row's alignment allows) and lane l holds vectors l, l + 32,
// l + 64, ... in its slots (slot k * vw + e: value e of vector l + 32 k). Each load instruction
// of the warp thus reads one contiguous stretch of the row, and q, the loaded K/V values and the
// accumulators share the slot layout, so the per-lane math needs no exchange between lanes.
// Values past the row (lanes without a vector) read as 0.
template <uint32_t T, int EPL, int VW>
__device__ inline void load_row_vw(const uint8_t *row, uint32_t lane, uint32_t n_vec, float (&x)[EPL]) {
    constexpr int ES = T == 0 ? 4 : T == 1 ? 2 : 1; // element bytes: F32, F16, Q8's int8
    constexpr int BYTES = VW * ES, WORDS = BYTES >= 4 ? BYTES / 4 : 1;
    static_assert(BYTES <= 16 && EPL % VW == 0, "vector wider than a 16-byte load or than the slots");
    const uint8_t *data = row + (T == 2 ? 4 : 0); // Q8: a float scale, then the int8 values
    const float qscale = T == 2 ? *reinterpret_cast<const float *>(row) : 1.0f;
    ATTN_UNROLL
    for (int k = 0; k < EPL / VW; k++) {
        const uint32_t vi = lane + 32u * (uint32_t)k;
        uint32_t w[WORDS];
        ATTN_UNROLL
        for (int i = 0; i < WORDS; i++) w[i] = 0;
        if (vi < n_vec) {
            const uint8_t *p = data + (size_t)vi * BYTES;
            if constexpr (BYTES == 16) {
                const uint4 u = *reinterpret_cast<const uint4 *>(p);
                w[0] = u.x, w[1] = u.y, w[2] = u.z, w[3] = u.w;
            } else if constexpr (BYTES == 8) {
                const uint2 u = *reinterpret_cast<const uint2 *>(p);
                w[0] = u.x, w[1] = u.y;
            } else if constexpr (BYTES == 4) w[0] = *reinterpret_cast<const uint32_t *>(p);
            else if constexpr (BYTES == 2) w[0] = *reinterpret_cast<const unsigned short *>(p);
            else w[0] = *p;
        }
        ATTN_UNROLL
        for (int e = 0; e < VW; e++) {
            float f;
            if constexpr (T == 0) f = __uint_as_float(w[e]);
            else if constexpr (T == 1) f = __half2float(__ushort_as_half((unsigned short)(w[e / 2] >> (16 * (e % 2)))));
            else f = qscale * (float)(int8_t)(w[e / 4] >> (8 * (e % 4))); // cpu/kv_rows.h: scale * q
            x[k * VW + e] = f;
        }
    }
}

template <uint32_t T, int EPL>
__device__ inline void load_row_t(const uint8_t *row, uint32_t vw, uint32_t lane, uint32_t n_vec, float (&x)[EPL]) {
    if constexpr (EPL >= 8 && T == 1)
        if (vw == 8) return load_row_vw<T, EPL, 8>(row, lane, n_vec, x);
    if constexpr (EPL >= 4)
        if (vw == 4) return load_row_vw<T, EPL, 4>(row, lane, n_vec, x);
    if constexpr (EPL >= 2)
        if (vw == 2) return load_row_vw<T, EPL, 2>(row, lane, n_vec, x);
    load_row_vw<T, EPL, 1>(row, lane, n_vec, x);
}

// The type and the vector width are the launch's: every branch here goes the same way for
// the whole grid.
template <int EPL>
__device__ inline void load_row(const uint8_t *row, uint32_t type, uint32_t vw, uint32_t lane, uint32_t n_vec,
                                float (&x)[EPL]) {
    if (type == 0) load_row_t<0, EPL>(row, vw, lane, n_vec, x);
    else if (type == 1) load_row_t<1, EPL>(row, vw, lane, n_vec, x);
    else load_row_t<2, EPL>(row, vw, lane, n_vec, x);
}

// The rows of positions p0 + j0 + ATTN_WARPS b (b < R, those before n) of one head's K or V
// region into x[b]: all R loads issued before any value is used.
template <int R, int EPL>
__device__ inline void load_rows(const attn_params &a, const uint8_t *head, const uint32_t *table, uint32_t p0,
                                 uint32_t j0, uint32_t n, uint32_t lane, float (&x)[R][EPL]) {
    ATTN_UNROLL
    for (int b = 0; b < R; b++) {
        const uint32_t j = j0 + ATTN_WARPS * (uint32_t)b;
        if (j < n) load_row<EPL>(head + kv_row_in_region(a.kv, table, p0 + j), a.kv.type, a.vw, lane, a.n_vec, x[b]);
    }
}

// Halves the C sums a lane carries by exchanging with lane ^ o: the lane with bit o clear keeps
// the lower C/2 sums, its partner the upper ones, and each adds the other's half of its kept
// sums. C/2 shuffles instead of C full reductions.
template <int C, int GP> __device__ inline void halve_sums(float (&v)[GP], uint32_t lane, int o) {
    const bool upper = (lane & (uint32_t)o) != 0;
    ATTN_UNROLL
    for (int i = 0; i < C / 2; i++) {
        const float keep = upper ? v[i + C / 2] : v[i], send = upper ? v[i] : v[i + C / 2];
        v[i] = keep + __shfl_xor_sync(FULL_MASK, send, o);
    }
}

// The warp's sums of GP values per lane (one per query head), reduced over the 32 lanes and
// scattered: lanes [g * 32 / GP, (g + 1) * 32 / GP) return head g's total. GP - 1 + log2(32 /
// GP) shuffles (9 for 8 heads) where reducing each head apart takes 5 GP (40).
template <int GP> __device__ inline float reduce_scatter(float (&v)[GP], uint32_t lane) {
    int o = 16;
    if constexpr (GP >= 8) halve_sums<8, GP>(v, lane, o), o >>= 1;
    if constexpr (GP >= 4) halve_sums<4, GP>(v, lane, o), o >>= 1;
    if constexpr (GP >= 2) halve_sums<2, GP>(v, lane, o), o >>= 1;
    float r = v[0];
    for (; o > 0; o >>= 1) r += __shfl_xor_sync(FULL_MASK, r, o);
    return r;
}

// A position's GP softmax weights from shared memory, the same address for the whole warp (a
// broadcast), 16 bytes at a time where GP allows.
template <int GP> __device__ inline void load_weights(const float *w, float (&wt)[GP]) {
    if constexpr (GP >= 4) {
        ATTN_UNROLL
        for (int i = 0; i < GP / 4; i++) {
            const float4 f = reinterpret_cast<const float4 *>(w)[i];
            wt[4 * i] = f.x, wt[4 * i + 1] = f.y, wt[4 * i + 2] = f.z, wt[4 * i + 3] = f.w;
        }
    } else {
        ATTN_UNROLL
        for (int g = 0; g < GP; g++) wt[g] = w[g];
    }
}

// Shared memory of attention_split_kernel<GP, EPL>, in floats: the chunk's weights (ATTN_CHUNK,
// GP), position-major so that the V pass reads a position's GP weights as one vector; reused at
// the end for the warps' accumulators (ATTN_WARPS, GP, EPL, 32); then per (warp, head) the
// chunk maxima and sums, and m, l per head.
__host__ __device__ constexpr uint32_t attn_smem_main(uint32_t gp, uint32_t epl) {
    return gp * (ATTN_CHUNK > ATTN_WARPS * 32 * epl ? ATTN_CHUNK : ATTN_WARPS * 32 * epl);
}
__host__ __device__ constexpr uint32_t attn_smem_floats(uint32_t gp, uint32_t epl) {
    return attn_smem_main(gp, epl) + 2 * ATTN_WARPS * gp + 2 * gp;
}

// One block per (row: x, K/V head and run of its query heads: y, split: z); GP: the run's
// heads rounded up to a power of two (padding heads have q = 0; their results are dropped),
// EPL: values per lane, head_dim <= 32 EPL. Split s takes positions [start + s split_len,
// start + (s + 1) split_len) of the row's visible ones [start, n_kv), so a window's positions
// spread over the splits as a full row's do; the grid's last split also takes whatever lies
// past (a row longer than max_kv).
//
// Per chunk of the split's positions: a warp per position (R positions at a time, their rows
// loaded before any is used) scores all GP heads against its K row
// (each lane's slots against the heads' q slots in registers, then one reduce_scatter); the
// block takes each head's chunk maximum, the running maximum m and the weights e^(s - m), and
// rescales its running sums l and accumulators by e^(m_old - m_new); then a warp per position
// adds weight times V row to its lanes' accumulators. All warps share one m per head, so their
// accumulators add up without rescaling at the end. The block then leaves (m, l, acc) per head
// in scratch, or acc / l in out when the row has this one split.
template <int GP, int EPL>
__global__ void __launch_bounds__(ATTN_THREADS, ATTN_MIN_BLOCKS) attention_split_kernel(attn_params a) {
    static_assert(GP * EPL <= (int)ATTN_MAX_GROUP_VALUES, "q and the accumulators must fit in 128 registers");
    constexpr int R = attn_rows_in_flight(GP, EPL);
    SIMT_DYNAMIC_SHARED(float, smem);
    const uint32_t r = blockIdx.x, kvh = blockIdx.y / a.n_hg, run = blockIdx.y % a.n_hg, split = blockIdx.z;
    const uint32_t n_kv = (uint32_t)a.pos[r] + 1, start = a.window > 0 && a.window < n_kv ? n_kv - a.window : 0;
    const uint32_t len = n_kv - start;
    // the whole block leaves together, before any barrier
    if ((uint64_t)split * a.split_len >= len) return;
    const uint32_t p_begin = start + split * a.split_len;
    const uint32_t p_end = split + 1 == a.n_splits ? n_kv : min(n_kv, p_begin + a.split_len);
    const bool direct = len <= a.split_len || a.n_splits == 1;
    const uint32_t h0 = kvh * a.group + run * a.head_run; // first query head of the block
    const uint32_t nh = min(a.head_run, a.group - run * a.head_run);
    const uint32_t hd = a.kv.head_dim, lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const uint32_t *table = a.tables + a.table_start[r];

    float qr[GP][EPL]; // the heads' q values in the lane's slots
    ATTN_UNROLL
    for (int g = 0; g < GP; g++) {
        const float *qh = a.q + ((size_t)r * a.n_head + h0 + g) * hd;
        ATTN_UNROLL
        for (int s = 0; s < EPL; s++) {
            const uint32_t vi = lane + 32u * ((uint32_t)s >> a.vw_shift);
            qr[g][s] = (uint32_t)g < nh && vi < a.n_vec ? qh[vi * a.vw + ((uint32_t)s & (a.vw - 1))] : 0.0f;
        }
    }

    float *w = smem;                                          // (ATTN_CHUNK, GP)
    float *red_max = smem + attn_smem_main(GP, EPL);          // (ATTN_WARPS, GP)
    float *red_sum = red_max + ATTN_WARPS * GP;               // (ATTN_WARPS, GP)
    float *ml = red_sum + ATTN_WARPS * GP;                    // m (GP), l (GP)
    const uint32_t own = threadIdx.x % GP; // the head whose weights this thread exponentiates
    float m[GP], l[GP], acc[GP][EPL];
    ATTN_UNROLL
    for (int g = 0; g < GP; g++) {
        m[g] = -INFINITY, l[g] = 0;
        ATTN_UNROLL
        for (int s = 0; s < EPL; s++) acc[g][s] = 0;
    }
    const uint8_t *k_head = kv_region(a.kv, 0, a.layer, kvh), *v_head = kv_region(a.kv, 1, a.layer, kvh);
    for (uint32_t p0 = p_begin; p0 < p_end; p0 += ATTN_CHUNK) {
        const uint32_t n = min(ATTN_CHUNK, p_end - p0);
        for (uint32_t j0 = warp; j0 < n; j0 += ATTN_WARPS * R) {
            float x[R][EPL];
            load_rows<R, EPL>(a, k_head, table, p0, j0, n, lane, x);
            ATTN_UNROLL
            for (int b = 0; b < R; b++) {
                const uint32_t j = j0 + ATTN_WARPS * (uint32_t)b;
                if (j >= n) break; // the warp agrees
                float dot[GP];
                ATTN_UNROLL
                for (int g = 0; g < GP; g++) {
                    dot[g] = 0;
                    ATTN_UNROLL
                    for (int s = 0; s < EPL; s++) dot[g] += qr[g][s] * x[b][s];
                }
                const float total = reduce_scatter<GP>(dot, lane);
                if (lane % (32 / GP) == 0) w[j * GP + lane / (32 / GP)] = sm_score(total, a.scale, a.softcap);
            }
        }
        __syncthreads();
        // thread t visits entries t, t + ATTN_THREADS, ...: all of head t % GP, GP dividing it
        float cmax = -INFINITY;
        for (uint32_t i = threadIdx.x; i < n * GP; i += ATTN_THREADS) cmax = fmaxf(cmax, w[i]);
        for (int o = 16; o >= GP; o >>= 1) cmax = fmaxf(cmax, __shfl_xor_sync(FULL_MASK, cmax, o));
        if (lane < GP) red_max[warp * GP + lane] = cmax;
        __syncthreads();
        float corr[GP], m_own = 0;
        ATTN_UNROLL
        for (int g = 0; g < GP; g++) {
            float c = red_max[g];
            for (int wi = 1; wi < ATTN_WARPS; wi++) c = fmaxf(c, red_max[wi * GP + g]);
            const float m_new = fmaxf(m[g], c);
            corr[g] = sm_rescale(m[g], m_new);
            m[g] = m_new;
            if ((uint32_t)g == own) m_own = m_new;
        }
        float csum = 0;
        for (uint32_t i = threadIdx.x; i < n * GP; i += ATTN_THREADS) {
            const float e = expf(w[i] - m_own);
            w[i] = e;
            csum += e;
        }
        for (int o = 16; o >= GP; o >>= 1) csum += __shfl_xor_sync(FULL_MASK, csum, o);
        if (lane < GP) red_sum[warp * GP + lane] = csum;
        __syncthreads(); // also publishes the weights
        ATTN_UNROLL
        for (int g = 0; g < GP; g++) {
            float c = 0;
            for (int wi = 0; wi < ATTN_WARPS; wi++) c += red_sum[wi * GP + g];
            l[g] = l[g] * corr[g] + c;
            ATTN_UNROLL
            for (int s = 0; s < EPL; s++) acc[g][s] *= corr[g];
        }
        for (uint32_t j0 = warp; j0 < n; j0 += ATTN_WARPS * R) {
            float x[R][EPL];
            load_rows<R, EPL>(a, v_head, table, p0, j0, n, lane, x);
            ATTN_UNROLL
            for (int b = 0; b < R; b++) {
                const uint32_t j = j0 + ATTN_WARPS * (uint32_t)b;
                if (j >= n) break;
                float wt[GP];
                load_weights<GP>(w + j * GP, wt);
                ATTN_UNROLL
                for (int g = 0; g < GP; g++) {
                    ATTN_UNROLL
                    for (int s = 0; s < EPL; s++) acc[g][s] += wt[g] * x[b][s];
                }
            }
        }
        __syncthreads(); // the next chunk's scores, or the accumulators below, overwrite w
    }

    // The warps' accumulators, slot-major so that the 32 lanes' stores and the loads below fall
    // in 32 different banks; then thread i sums value i over the warps.
    float *part = smem; // (ATTN_WARPS, GP, EPL, 32)
    ATTN_UNROLL
    for (int g = 0; g < GP; g++) {
        ATTN_UNROLL
        for (int s = 0; s < EPL; s++) part[((warp * GP + g) * EPL + s) * 32 + lane] = acc[g][s];
    }
    if (threadIdx.x == 0) {
        ATTN_UNROLL
        for (int g = 0; g < GP; g++) ml[g] = m[g], ml[GP + g] = l[g];
    }
    __syncthreads();
    for (uint32_t i = threadIdx.x; i < nh * EPL * 32; i += ATTN_THREADS) {
        const uint32_t g = i / (EPL * 32), s = i / 32 % EPL, ln = i % 32;
        const uint32_t vi = ln + 32 * (s >> a.vw_shift);
        if (vi >= a.n_vec) continue;
        float sum = 0;
        for (int wi = 0; wi < ATTN_WARPS; wi++) sum += part[((wi * GP + g) * EPL + s) * 32 + ln];
        const size_t head = (size_t)r * a.n_head + h0 + g, d = (size_t)vi * a.vw + (s & (a.vw - 1));
        if (direct) a.out[head * hd + d] = sm_result(sm_partial{ml[g], ml[GP + g], sum});
        else a.part_acc[(head * a.n_splits + split) * hd + d] = sum;
    }
    if (!direct && threadIdx.x < nh) {
        const size_t p = ((size_t)r * a.n_head + h0 + threadIdx.x) * a.n_splits + split;
        a.part_m[p] = ml[threadIdx.x];
        a.part_l[p] = ml[GP + threadIdx.x];
    }
}

// One block per (row: x, query head: y): the row's splits merged value by value, in split
// order. Rows that fit in one split were finished by attention_split_kernel; splits past the
// row's end wrote nothing and are not read (merging them would be a no-op: they are the empty
// partial).
__global__ void __launch_bounds__(MERGE_THREADS) attention_merge_kernel(attn_params a) {
    const uint32_t r = blockIdx.x, h = blockIdx.y, hd = a.kv.head_dim;
    const uint32_t n_kv = (uint32_t)a.pos[r] + 1, start = a.window > 0 && a.window < n_kv ? n_kv - a.window : 0;
    const uint32_t len = n_kv - start;
    if (len <= a.split_len) return;
    const uint64_t n_reach = ((uint64_t)len + a.split_len - 1) / a.split_len; // splits the row reaches
    const uint32_t n_act = n_reach < a.n_splits ? (uint32_t)n_reach : a.n_splits;
    const size_t head = (size_t)r * a.n_head + h, p0 = head * a.n_splits;
    for (uint32_t d = threadIdx.x; d < hd; d += blockDim.x) {
        sm_partial acc = sm_empty();
        for (uint32_t s = 0; s < n_act; s++)
            acc = sm_merge(acc, sm_partial{a.part_m[p0 + s], a.part_l[p0 + s], a.part_acc[(p0 + s) * hd + d]});
        a.out[head * hd + d] = sm_result(acc);
    }
}

// ---------------------------------------------------------------- launch geometry (host)

// Splits per row and their length: functions of the row count, the blocks a row's split
// makes (K/V heads times runs of query heads), max_kv and the device's SM count alone, never of
// positions. Enough splits for ATTN_WAVES blocks per SM over the step (fewer blocks leave SMs
// idle on a long row; more only add partials for the merge to read), none shorter than
// ATTN_MIN_SPLIT positions, n_rows * splits within ATTN_MAX_ROW_SPLITS; the splits of equal
// length for a row of max_kv positions. A split longer than ATTN_CHUNK runs chunk after chunk.
struct attn_splits {
    uint32_t n, len;
};

constexpr uint32_t ATTN_WAVES = 2;
constexpr uint32_t ATTN_MIN_SPLIT = 64;
constexpr uint32_t ATTN_DEFAULT_SMS = 132; // an H100 SXM, for a device that does not answer

size_t attn_kv_clamped(size_t max_kv) {
    const size_t most = (size_t)1 << 31; // positions are int32
    return max_kv == 0 ? 1 : max_kv > most ? most : max_kv;
}

uint32_t attn_device_sms() {
    int device = 0, sms = 0;
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess || sms <= 0) {
        (void)cudaGetLastError(); // a geometry, not a failure of the step
        return ATTN_DEFAULT_SMS;
    }
    return (uint32_t)sms;
}

// Splits of a row at most, whatever the device: none under ATTN_MIN_SPLIT positions, and
// n_rows * splits within ATTN_MAX_ROW_SPLITS.
size_t attn_most_splits(size_t n_rows, size_t max_kv) {
    const size_t kv = attn_kv_clamped(max_kv), shortest = (kv + ATTN_MIN_SPLIT - 1) / ATTN_MIN_SPLIT;
    const size_t cap = n_rows >= ATTN_MAX_ROW_SPLITS ? 1 : ATTN_MAX_ROW_SPLITS / n_rows;
    return shortest < cap ? shortest : cap;
}

attn_splits attn_splits_for(size_t n_rows, size_t blocks_per_row, size_t max_kv, uint32_t sms) {
    const size_t kv = attn_kv_clamped(max_kv), blocks = n_rows * blocks_per_row;
    const size_t fill = ((size_t)ATTN_WAVES * sms + blocks - 1) / blocks, most = attn_most_splits(n_rows, max_kv);
    const size_t n = fill < most ? fill : most;
    return attn_splits{(uint32_t)n, (uint32_t)((kv + n - 1) / n)};
}

uint32_t pow2_ceil(uint32_t x) {
    uint32_t p = 1;
    while (p < x) p *= 2;
    return p;
}

uint32_t log2_exact(uint32_t x) {
    uint32_t s = 0;
    while ((1u << s) < x) s++;
    return s;
}

// The widest vector (values, a power of two up to the lane's EPL slots and 16 bytes; Q8: 4
// bytes, its values start 4 bytes into the row) that divides head_dim and at which every row
// of the pool is aligned; a pool offset by an odd amount reads value by value. EPL, not the
// load width, sets the lanes' share of a row (head_dim / 32, rounded up to a power of two), so
// all 32 lanes hold values: a position costs EPL FMAs per query head in every lane, and with
// several heads per K/V row those FMAs, not the load instructions, bound the issue rate. So a
// full warp of 8-byte loads (F16, head_dim 128) rather than half a warp of 16-byte ones; 16
// bytes at F16 head_dim 256 and F32 128.
uint32_t attn_vector_width(const cu_kv &kv, uint32_t epl) {
    const uint32_t es = kv.type == 0 ? 4 : kv.type == 1 ? 2 : 1, off = kv.type == 2 ? 4 : 0;
    uint32_t vw = epl < 16 / es ? epl : 16 / es;
    if (kv.type == 2 && vw > 4) vw = 4;
    for (; vw > 1; vw /= 2) {
        const size_t bytes = (size_t)vw * es;
        if (kv.head_dim % vw == 0 && ((uintptr_t)kv.pool + off) % bytes == 0 && kv.row_bytes % bytes == 0 &&
            kv.block_stride % bytes == 0 && kv.head_stride % bytes == 0)
            break;
    }
    return vw;
}

typedef void (*attn_kernel_fn)(attn_params);

template <int GP> attn_kernel_fn attn_kernel_epl(uint32_t epl) {
    switch (epl) {
    case 1: return &attention_split_kernel<GP, 1>;
    case 2: return &attention_split_kernel<GP, 2>;
    case 4: return &attention_split_kernel<GP, 4>;
    default:
        if constexpr (GP * 8 <= (int)ATTN_MAX_GROUP_VALUES) return &attention_split_kernel<GP, 8>;
        return NULL; // never asked: attn_max_group(8) heads at most
    }
}

attn_kernel_fn attn_kernel(uint32_t gp, uint32_t epl) {
    switch (gp) {
    case 1: return attn_kernel_epl<1>(epl);
    case 2: return attn_kernel_epl<2>(epl);
    case 4: return attn_kernel_epl<4>(epl);
    default: return attn_kernel_epl<8>(epl);
    }
}

} // namespace

extern "C" {

int llmm__cu_kv_write(cudaStream_t stream, const cu_kv *kv, const cu_step *step, uint32_t layer, const float *k,
                const float *v) {
    if (layer >= kv->n_layer || kv->type > 2) return (int)cudaErrorInvalidValue;
    if (step->n_rows == 0) return 0;
    SIMT_LAUNCH(kv_write_kernel, dim3(step->n_rows, 2), dim3(KV_THREADS), 0, stream, *kv, step->pos,
                step->table_start, step->tables, layer, k, v);
    return (int)cudaGetLastError();
}

size_t llmm__cu_attention_scratch_bytes(size_t n_rows, uint32_t n_head, uint32_t head_dim, size_t max_kv) {
    const uint32_t sms = attn_device_sms();
    if (n_rows == 0 || attn_most_splits(1, max_kv) <= 1) return 0;
    // a launch of n <= n_rows rows makes n * splits partials per query head, splits at most
    // attn_most_splits(n) (so n * splits <= ATTN_MAX_ROW_SPLITS and <= n * the shortest-split
    // count) and at most ceil(ATTN_WAVES * sms / n) (attn_splits_for with one block a row), so
    // n * splits < ATTN_WAVES * sms + n: each bound grows with n
    const size_t shortest = attn_most_splits(1, max_kv), waves = (size_t)ATTN_WAVES * sms + n_rows;
    size_t pairs = n_rows * shortest;
    if (pairs > ATTN_MAX_ROW_SPLITS) pairs = ATTN_MAX_ROW_SPLITS;
    if (pairs > waves) pairs = waves;
    return pairs * n_head * ((size_t)head_dim + 2) * sizeof(float);
}

int llmm__cu_attention(cudaStream_t stream, const cu_kv *kv, const cu_step *step, uint32_t layer, const float *q,
                 float *out, uint32_t n_head, uint32_t window, float scale, float softcap, size_t max_kv,
                 void *scratch, size_t scratch_bytes) {
    if (layer >= kv->n_layer || kv->type > 2 || kv->n_head_kv == 0 || n_head % kv->n_head_kv != 0 ||
        kv->head_dim == 0 || kv->head_dim > ATTN_MAX_HEAD_DIM || n_head > 65535)
        return (int)cudaErrorInvalidValue;
    if (step->n_rows == 0 || n_head == 0) return 0;
    const uint32_t hd = kv->head_dim, group = n_head / kv->n_head_kv;
    const uint32_t epl = pow2_ceil((hd + 31) / 32), max_group = attn_max_group(epl);
    const uint32_t n_hg = (group + max_group - 1) / max_group;
    const attn_splits sp = attn_splits_for(step->n_rows, (size_t)kv->n_head_kv * n_hg, max_kv, attn_device_sms());
    const size_t partials = sp.n > 1 ? (size_t)step->n_rows * n_head * sp.n : 0;
    if (partials * ((size_t)hd + 2) * sizeof(float) > scratch_bytes || (partials && !scratch))
        return (int)cudaErrorInvalidValue;

    attn_params a;
    a.kv = *kv;
    a.pos = step->pos;
    a.table_start = step->table_start;
    a.tables = step->tables;
    a.layer = layer;
    a.q = q;
    a.out = out;
    a.n_head = n_head;
    a.group = group;
    a.n_hg = n_hg;
    a.head_run = (group + a.n_hg - 1) / a.n_hg;
    a.window = window;
    a.scale = scale;
    a.softcap = softcap;
    a.n_splits = sp.n;
    a.split_len = sp.len;
    const uint32_t gp = pow2_ceil(a.head_run);
    a.vw = attn_vector_width(*kv, epl);
    a.vw_shift = log2_exact(a.vw);
    a.n_vec = hd / a.vw;
    a.part_m = static_cast<float *>(scratch);
    a.part_l = partials ? a.part_m + partials : nullptr;
    a.part_acc = partials ? a.part_l + partials : nullptr;
    const attn_kernel_fn kfn = attn_kernel(gp, epl);
    const size_t shmem = attn_smem_floats(gp, epl) * sizeof(float);
    SIMT_LAUNCH(kfn, dim3(step->n_rows, kv->n_head_kv * a.n_hg, sp.n), dim3(ATTN_THREADS), shmem, stream, a);
    int err = (int)cudaGetLastError();
    if (err || sp.n == 1) return err;
    SIMT_LAUNCH(attention_merge_kernel, dim3(step->n_rows, n_head), dim3(MERGE_THREADS), 0, stream, a);
    return (int)cudaGetLastError();
}

} // extern "C"
