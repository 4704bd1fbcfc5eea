/* Token sampling on the device (llmm__cu_sample): for each row of logits, the token lib/sampling/sampler.c
 * would choose with the same request, so that a step ends with n ids crossing to the host
 * instead of n rows of logits.
 *
 * One thread block per row follows lib/sampling/sampler.c step for step, so that the same candidates
 * survive in the same order:
 * 1. The row is copied to scratch; a NaN or +inf in it (broken weights) makes the row's token -1,
 *    as a row of all -inf does, and the host then reports LLMM_ERR_NUMERICAL through
 *    llmm_sample (lib/context/context_step.c); one block reduction, the copy reads the row anyway. The
 *    penalized tokens (distinct, so one thread each) take the CPU's float operations, with _rn
 *    intrinsics so that nvcc cannot contract them into an FMA the CPU does not make, and their
 *    results are sanitized as the CPU's are (NaN -> -inf, +inf -> FLT_MAX).
 * 2. Each candidate is a 64-bit key, the logit's bits made monotone (-0 as +0, which the CPU's
 *    float comparison ties) above ~id: key order is the CPU's rank order (logit descending, id
 *    ascending), and keys are distinct. The greedy argmax is the largest key.
 * 3. Top-k: a radix select (8 bits a pass, from the top, warp-aggregated shared histograms)
 *    finds the k-th largest key, usually in 2 or 3 passes because it stops as soon as its
 *    bucket holds exactly what is still needed; the keys at or above it are gathered and
 *    sorted by a merge of sorted runs in which each key finds its place by binary search in its
 *    partner run (in shared memory up to 1024 keys, else in scratch). Top-p without top-k sorts
 *    as far as the CPU does: the best 256, then twice as many while the walk has not reached
 *    top_p, so the kept count is that of a walk over the fully sorted list. Min-p keeps a
 *    prefix of a sorted list, or masks candidates in id order when nothing sorted them.
 * 4. Weights exp((logit - max) / temperature) in double, in candidate order; the sums and the
 *    cumulative walks (top-p's cum / sum >= top_p, the draw's first positive weight with
 *    uniform * sum < cum, else the last positive one) run in chunks of 1024 candidates, four
 *    consecutive per thread, with a block scan between the threads.
 * The sums are in double as on the CPU, but a parallel sum adds in another order, which changes
 * their last bits only: tokens agree with the CPU's except when a draw (or top-p's cut) lands
 * within that rounding of a boundary between two candidates. log(min_p) comes from the host
 * (llmm__cu_sample_pack) so that min-p's threshold is the CPU's bit for bit; exp in double may differ
 * from the host's libm by an ulp on a GPU, which is rounding of the same kind.
 *
 * Why the weights stay in double on sm_87 too, where FP64 runs at 1/64 of the float rate: the
 * draw promises llmm_sample's token for the same seed, except within double rounding of a
 * boundary (docs/api.md, llmm_decode_sample); float weights would move the sums by about 1e-7 of
 * their total, a boundary case a billion times likelier. The FP64 work is one subtraction,
 * division, exp and add per candidate per sum or walk: 2 n for temperature alone or min-p alone
 * (n the vocabulary: 303,872 exps on Qwen2.5's 151,936), n plus the sorted prefix's walks for
 * top-p alone, about 4 k for top-k (k = 40: 160, nothing against the radix passes). At ~20
 * double instructions an exp, an Orin (16 SMs, 2 FP64 lanes each, 1.3 GHz) spends about 0.2 ms
 * a row on the 2 n case, an estimate from the documented rates, not a measurement: a tenth of a
 * 0.5B Q4_0 decode step's weight reads there, nothing with top-k.
 *
 * Greedy reads the row twice (copy, argmax), temperature-only and min-p-only three times more
 * (two walks and the copy); top-k 40 and top-p 0.95 add a few radix passes and sort at most a
 * few hundred keys, never the vocabulary (only a top_k or a top-p cut near n_vocab does that).
 *
 * What only a GPU can show: races between warps (the emulation switches threads only at
 * barriers and warp primitives; compute-sanitizer racecheck), the time per row of the radix
 * passes and walks at 150k-262k vocabularies, and device exp against the host's in the last
 * bits (the emulated build uses the host's exp, so there tokens agree except for sum order). */
#include <float.h>
#include <math.h>
#include <string.h>

#include "portable.h"

#include "sample.h"

#define SP_THREADS 256 /* one block per row; also the radix histogram's 256 bins, one a thread */
#define SP_WARPS (SP_THREADS / 32)
#define SP_ITEMS 4 /* consecutive candidates a thread walks in a chunk */
#define SP_CHUNK (SP_THREADS * SP_ITEMS)
#define SP_SHARED_KEYS 1024 /* selections up to this many keys are sorted in shared memory */
#define SP_FIRST_TOP_P 256  /* lib/sampling/sampler.c keep_top_p's first selection */
#define SP_FULL_MASK 0xffffffffu
#define SP_NONE UINT32_MAX

static_assert(sizeof(cu_sample_row) == 56, "cu_sample_row is packed without padding");
static_assert(SP_THREADS == 256, "the radix histogram gives each thread one of 256 bins");

struct sp_shared {
    uint64_t keys[2][SP_SHARED_KEYS]; /* a small selection and its merge buffer */
    uint32_t hist[256];
    double dpart[SP_WARPS];
    uint64_t kpart[SP_WARPS];
    uint32_t ipart[SP_WARPS];
    uint32_t count, bin, above, bin_count;
};

/* ---------------------------------------------------------------- per candidate */

/* lib/sampling/sampler.c sanitize_logit, for the penalties' results */
__device__ __forceinline__ float sp_sanitize(float l) {
    if (isnan(l)) return -INFINITY;
    return l == INFINITY ? FLT_MAX : l;
}

/* lib/sampling/sampler.c apply_penalties for one token seen count times, operation for operation */
__device__ __forceinline__ float sp_penalize(float l, uint32_t count, const cu_sample_row &p) {
    l = l > 0 ? l / p.repeat_penalty : l * p.repeat_penalty;
    return sp_sanitize(__fsub_rn(l, __fadd_rn(__fmul_rn((float)count, p.frequency_penalty), p.presence_penalty)));
}

__device__ __forceinline__ uint64_t sp_key(float l, uint32_t id) {
    uint32_t u = __float_as_uint(l == 0.0f ? 0.0f : l);
    u = (u & 0x80000000u) ? ~u : u | 0x80000000u;
    return (uint64_t)u << 32 | (uint32_t)~id;
}

__device__ __forceinline__ float sp_key_logit(uint64_t key) {
    const uint32_t u = (uint32_t)(key >> 32);
    return __uint_as_float((u & 0x80000000u) ? u & 0x7fffffffu : ~u);
}

__device__ __forceinline__ uint32_t sp_key_id(uint64_t key) { return ~(uint32_t)key; }

/* ---------------------------------------------------------------- block-wide steps */

/* Every thread gets op over the block's values; part (shared, SP_WARPS) is free again after. */
template <class T, class Op>
__device__ T sp_block_reduce(T v, Op op, T *part) {
    for (int offset = 16; offset > 0; offset /= 2) v = op(v, __shfl_xor_sync(SP_FULL_MASK, v, offset));
    if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = v;
    __syncthreads();
    T r = part[0];
    for (int w = 1; w < SP_WARPS; w++) r = op(r, part[w]);
    __syncthreads();
    return r;
}

/* The sum of the values of the threads before this one, and in *total of all; both in one
 * fixed order, so that a rerun over the same values gives the same bits. */
template <class T>
__device__ T sp_block_exclusive_scan(T v, T *part, T *total) {
    const unsigned lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    T incl = v;
    for (unsigned d = 1; d < 32; d *= 2) {
        const T below = __shfl_up_sync(SP_FULL_MASK, incl, d);
        if (lane >= d) incl += below;
    }
    T excl = __shfl_up_sync(SP_FULL_MASK, incl, 1);
    if (lane == 0) excl = 0;
    if (lane == 31) part[warp] = incl;
    __syncthreads();
    T before = 0, sum = 0;
    for (unsigned w = 0; w < SP_WARPS; w++) {
        if (w == warp) before = sum;
        sum += part[w];
    }
    __syncthreads();
    *total = sum;
    return before + excl;
}

struct sp_max_u64 {
    __device__ uint64_t operator()(uint64_t a, uint64_t b) const { return a > b ? a : b; }
};
struct sp_min_u32 {
    __device__ uint32_t operator()(uint32_t a, uint32_t b) const { return a < b ? a : b; }
};
struct sp_add_u32 {
    __device__ uint32_t operator()(uint32_t a, uint32_t b) const { return a + b; }
};

/* ---------------------------------------------------------------- top-k selection */

/* The key of the k-th best of lg[0..n) (k < n): exactly k keys are >= the returned prefix. A
 * pass counts, among the keys that share the prefix fixed so far, each value of the next 8
 * bits; it stops when the bucket of the k-th holds exactly the keys still needed. */
__device__ uint64_t sp_select_threshold(const float *lg, uint32_t n, uint32_t k, sp_shared &sh) {
    const unsigned lane = threadIdx.x % 32;
    uint64_t prefix = 0, fixed = 0;
    uint32_t need = k;
    for (int shift = 56;; shift -= 8) {
        sh.hist[threadIdx.x] = 0;
        __syncthreads();
        for (uint32_t base = 0; base < n; base += SP_THREADS) {
            const uint32_t i = base + threadIdx.x;
            uint32_t bin = 256; /* none: out of the row or off the prefix */
            if (i < n) {
                const uint64_t key = sp_key(lg[i], i);
                if ((key & fixed) == prefix) bin = (uint32_t)(key >> shift) & 255u;
            }
            /* logits crowd into few buckets of the top bits: one atomic per bucket per warp */
            const unsigned same = __match_any_sync(SP_FULL_MASK, bin);
            if (bin < 256 && lane == (unsigned)(__ffs((int)same) - 1)) atomicAdd(&sh.hist[bin], (uint32_t)__popc(same));
        }
        __syncthreads();
        const uint32_t bin = 255 - threadIdx.x, count = sh.hist[bin]; /* thread order = key order, descending */
        uint32_t total;
        const uint32_t above = sp_block_exclusive_scan(count, sh.ipart, &total);
        if (above < need && need <= above + count) sh.bin = bin, sh.above = above, sh.bin_count = count;
        __syncthreads();
        need -= sh.above;
        prefix |= (uint64_t)sh.bin << shift;
        fixed |= (uint64_t)0xff << shift;
        if (sh.bin_count == need || shift == 0) return prefix;
    }
}

/* The keys of lg[0..n) that are >= threshold, into dst in no particular order. */
__device__ void sp_gather(const float *lg, uint32_t n, uint64_t threshold, uint64_t *dst, sp_shared &sh) {
    const unsigned lane = threadIdx.x % 32;
    if (threadIdx.x == 0) sh.count = 0;
    __syncthreads();
    for (uint32_t base = 0; base < n; base += SP_THREADS) {
        const uint32_t i = base + threadIdx.x;
        const uint64_t key = i < n ? sp_key(lg[i], i) : 0;
        const bool take = i < n && key >= threshold;
        const unsigned taking = __ballot_sync(SP_FULL_MASK, take);
        if (!taking) continue;
        const int leader = __ffs((int)taking) - 1;
        uint32_t at = 0;
        if ((int)lane == leader) at = atomicAdd(&sh.count, (uint32_t)__popc(taking));
        at = __shfl_sync(SP_FULL_MASK, at, leader);
        if (take) dst[at + __popc(taking & ((1u << lane) - 1))] = key;
    }
    __syncthreads();
}

/* a[0..k) sorted descending, by merging runs of 1, 2, 4... between a and b: a key's place in
 * the merged run is its place in its own run plus the partner run's keys above it (keys are
 * distinct). Returns a or b, whichever holds the result. */
__device__ uint64_t *sp_sort_desc(uint64_t *a, uint64_t *b, uint32_t k) {
    for (uint32_t width = 1; width < k; width *= 2) {
        for (uint32_t i = threadIdx.x; i < k; i += SP_THREADS) {
            const uint32_t own = i / width * width, partner = own ^ width, pair = own & ~width;
            const uint32_t partner_len = partner >= k ? 0 : k - partner < width ? k - partner : width;
            const uint64_t key = a[i];
            uint32_t lo = 0, hi = partner_len;
            while (lo < hi) {
                const uint32_t mid = (lo + hi) / 2;
                if (a[partner + mid] > key) lo = mid + 1;
                else hi = mid;
            }
            b[pair + (i - own) + lo] = key;
        }
        __syncthreads();
        uint64_t *t = a;
        a = b, b = t;
    }
    return a;
}

/* lib/sampling/sampler.c select_top_k: the k best of lg[0..n) (k <= n), sorted by rank. */
__device__ const uint64_t *sp_best_sorted(const float *lg, uint32_t n, uint32_t k, uint64_t *scratch_a,
                                          uint64_t *scratch_b, sp_shared &sh) {
    const uint64_t threshold = k < n ? sp_select_threshold(lg, n, k, sh) : 0; /* every key is > 0 */
    const bool small = k <= SP_SHARED_KEYS;
    uint64_t *a = small ? sh.keys[0] : scratch_a, *b = small ? sh.keys[1] : scratch_b;
    sp_gather(lg, n, threshold, a, sh);
    return sp_sort_desc(a, b, k);
}

/* ---------------------------------------------------------------- cumulative walks */

struct sp_walk {
    uint32_t found; /* first i where found(cum_i, w_i) held, or SP_NONE */
    double total;   /* the sum of every weight, when none was found */
};

/* Walks weight(0..n) in order, cum_i = w_0 + ... + w_i in double: a chunk of SP_CHUNK
 * candidates at a time, SP_ITEMS consecutive ones a thread, the threads' sums scanned. found
 * must be monotone in cum so that the first hit of the block is the first of the walk. */
template <class Weight, class Found>
__device__ sp_walk sp_walk_weights(uint32_t n, Weight weight, Found found, sp_shared &sh) {
    double carry = 0;
    for (uint32_t base = 0; base < n; base += SP_CHUNK) {
        const uint32_t first = base + threadIdx.x * SP_ITEMS;
        double w[SP_ITEMS], own = 0;
        for (int j = 0; j < SP_ITEMS; j++) {
            w[j] = first + j < n ? weight(first + j) : 0.0;
            own += w[j];
        }
        double chunk;
        double cum = carry + sp_block_exclusive_scan(own, sh.dpart, &chunk);
        uint32_t hit = SP_NONE;
        for (int j = 0; j < SP_ITEMS; j++) {
            cum += w[j];
            if (hit == SP_NONE && first + j < n && found(cum, w[j])) hit = first + j;
        }
        hit = sp_block_reduce(hit, sp_min_u32(), sh.ipart);
        if (hit != SP_NONE) return {hit, 0.0};
        carry += chunk;
    }
    return {SP_NONE, carry};
}

template <class Weight>
__device__ double sp_sum_weights(uint32_t n, Weight weight, sp_shared &sh) {
    return sp_walk_weights(n, weight, [](double, double) { return false; }, sh).total;
}

/* lib/sampling/sampler.c draw's fallback: the last candidate with a positive weight (0 when none). */
template <class Weight>
__device__ uint32_t sp_last_positive(uint32_t n, Weight weight, sp_shared &sh) {
    uint64_t last = 0; /* index + 1 */
    for (uint32_t i = threadIdx.x; i < n; i += SP_THREADS)
        if (weight(i) > 0) last = i + 1;
    last = sp_block_reduce(last, sp_max_u64(), sh.kpart);
    return last ? (uint32_t)(last - 1) : 0;
}

/* ---------------------------------------------------------------- the kernel */

static size_t sp_logits_bytes(size_t n_vocab) { return (4 * n_vocab + 7) / 8 * 8; }
static size_t sp_row_scratch_bytes(size_t n_vocab) { return sp_logits_bytes(n_vocab) + 2 * 8 * n_vocab; }

/* One block per row. Row scratch: the sanitized, penalized logits (n, padded to 8 bytes), then
 * two key buffers (n each) for selections too large for shared memory. */
__global__ void sample_kernel(const float *logits, uint32_t n, const cu_sample_row *rows, const uint32_t *pen,
                              int32_t *out, uint8_t *scratch, size_t row_scratch, size_t logits_bytes) {
    __shared__ sp_shared sh;
    const uint32_t row = blockIdx.x;
    const cu_sample_row p = rows[row];
    uint8_t *mine = scratch + row * row_scratch;
    float *lg = (float *)mine;
    uint64_t *scratch_a = (uint64_t *)(mine + logits_bytes), *scratch_b = scratch_a + n;

    const float *x = logits + (size_t)row * n;
    uint32_t broken = 0; /* lib/sampling/sampler.c load_candidates: NaN or +inf gives no token */
    for (uint32_t i = threadIdx.x; i < n; i += SP_THREADS) {
        const float l = x[i];
        broken |= isnan(l) || l == INFINITY;
        lg[i] = l;
    }
    if (sp_block_reduce(broken, sp_add_u32(), sh.ipart)) {
        if (threadIdx.x == 0) out[row] = -1;
        return;
    }
    for (uint32_t j = threadIdx.x; j < p.n_penalized; j += SP_THREADS) {
        const uint32_t token = pen[p.penalized_at + j];
        if (token < n) lg[token] = sp_penalize(lg[token], pen[p.counts_at + j], p);
    }
    __syncthreads();

    uint64_t best = 0;
    for (uint32_t i = threadIdx.x; i < n; i += SP_THREADS) {
        const uint64_t key = sp_key(lg[i], i);
        best = key > best ? key : best;
    }
    best = sp_block_reduce(best, sp_max_u64(), sh.kpart);
    const float best_logit = sp_key_logit(best);
    if (best_logit == -INFINITY || p.temperature <= 0) {
        if (threadIdx.x == 0) out[row] = best_logit == -INFINITY ? -1 : (int32_t)sp_key_id(best);
        return;
    }
    const double max = best_logit;

    /* lib/sampling/sampler.c truncate_candidates: ranked (when set) holds the candidates in rank order */
    const uint64_t *ranked = nullptr;
    uint32_t m = n;
    auto ranked_p_weight = [&](uint32_t i) { return exp((double)sp_key_logit(ranked[i]) - max); };
    if (p.top_k > 0 && (uint32_t)p.top_k < n) {
        m = (uint32_t)p.top_k;
        ranked = sp_best_sorted(lg, n, m, scratch_a, scratch_b, sh);
    }
    if (p.top_p < 1.0f) {
        const double top_p = p.top_p;
        const bool select = !ranked; /* else top-k sorted all m already */
        double sum;
        uint32_t k = m;
        if (!select) {
            sum = sp_sum_weights(m, ranked_p_weight, sh);
        } else {
            sum = sp_sum_weights(n, [&](uint32_t i) { return exp((double)lg[i] - max); }, sh);
            k = n < SP_FIRST_TOP_P ? n : SP_FIRST_TOP_P;
        }
        auto reached = [&](double cum, double) { return cum / sum >= top_p; };
        for (;; k = 2 * k < n ? 2 * k : n) {
            if (select) ranked = sp_best_sorted(lg, n, k, scratch_a, scratch_b, sh);
            const uint32_t hit = sp_walk_weights(k, ranked_p_weight, reached, sh).found;
            if (hit != SP_NONE || k == m) {
                m = hit != SP_NONE ? hit + 1 : k;
                break;
            }
        }
    }
    const bool min_p = p.min_p > 0.0f;
    const double min_logit = max + p.log_min_p;
    if (min_p && ranked) {
        uint32_t kept = 0; /* a prefix, since ranked is sorted */
        for (uint32_t i = threadIdx.x; i < m; i += SP_THREADS) kept += (double)sp_key_logit(ranked[i]) >= min_logit;
        m = sp_block_reduce(kept, sp_add_u32(), sh.ipart);
    }

    /* lib/sampling/sampler.c draw; min-p without a sorted list drops candidates in id order, which is
     * a weight of 0 here: the walk skips those as the CPU skips underflowed weights */
    const double temperature = p.temperature;
    auto weight = [&](uint32_t i) {
        const float l = ranked ? sp_key_logit(ranked[i]) : lg[i];
        if (min_p && !ranked && !((double)l >= min_logit)) return 0.0;
        return exp(((double)l - max) / temperature);
    };
    const double r = p.uniform * sp_sum_weights(m, weight, sh);
    uint32_t pick = sp_walk_weights(m, weight, [&](double cum, double w) { return w > 0 && r < cum; }, sh).found;
    if (pick == SP_NONE) pick = sp_last_positive(m, weight, sh);
    if (threadIdx.x == 0) out[row] = (int32_t)(ranked ? sp_key_id(ranked[pick]) : pick);
}

/* ---------------------------------------------------------------- launchers */

extern "C" size_t llmm__cu_sample_staging_bytes(size_t n_rows, size_t total_penalized) {
    return n_rows * sizeof(cu_sample_row) + 2 * total_penalized * sizeof(uint32_t);
}

extern "C" size_t llmm__cu_sample_pack(const llmm_sample_request *req, size_t n_rows, void *staging, size_t staging_bytes) {
    if (!req || !staging || n_rows == 0) return 0;
    size_t total = 0;
    for (size_t r = 0; r < n_rows; r++) total += req[r].n_penalized;
    const size_t bytes = llmm__cu_sample_staging_bytes(n_rows, total);
    if (total > UINT32_MAX / 2 || bytes > staging_bytes) return 0;
    uint8_t *base = (uint8_t *)staging;
    uint32_t *pen = (uint32_t *)(base + n_rows * sizeof(cu_sample_row));
    uint32_t at = 0;
    for (size_t r = 0; r < n_rows; r++) {
        const llmm_sample_request *q = &req[r];
        cu_sample_row row;
        row.temperature = q->temperature;
        row.top_k = q->top_k;
        row.top_p = q->top_p;
        row.min_p = q->min_p;
        row.repeat_penalty = q->repeat_penalty;
        row.frequency_penalty = q->frequency_penalty;
        row.presence_penalty = q->presence_penalty;
        row.n_penalized = q->n_penalized;
        row.penalized_at = at;
        row.counts_at = (uint32_t)total + at;
        row.uniform = q->uniform;
        row.log_min_p = q->min_p > 0.0f ? log((double)q->min_p) : 0.0;
        memcpy(base + r * sizeof row, &row, sizeof row);
        for (uint32_t j = 0; j < q->n_penalized; j++) {
            pen[at + j] = (uint32_t)q->penalized[j];
            pen[total + at + j] = q->counts[j];
        }
        at += q->n_penalized;
    }
    return bytes;
}

extern "C" size_t llmm__cu_sample_scratch_bytes(size_t n_rows, size_t n_vocab) { return n_rows * sp_row_scratch_bytes(n_vocab); }

extern "C" int llmm__cu_sample(cudaStream_t stream, const float *logits, size_t n_rows, size_t n_vocab, const void *packed,
                         int32_t *out, void *scratch) {
    if (n_vocab == 0 || n_vocab > INT32_MAX || n_rows > INT32_MAX) return cudaErrorInvalidValue;
    if (n_rows == 0) return 0;
    if (!logits || !packed || !out || !scratch) return cudaErrorInvalidValue;
    const cu_sample_row *rows = (const cu_sample_row *)packed;
    const uint32_t *pen = (const uint32_t *)(rows + n_rows);
    SIMT_LAUNCH(sample_kernel, (unsigned)n_rows, SP_THREADS, 0, stream, logits, (uint32_t)n_vocab, rows, pen, out,
                (uint8_t *)scratch, sp_row_scratch_bytes(n_vocab), sp_logits_bytes(n_vocab));
    return (int)cudaGetLastError();
}
