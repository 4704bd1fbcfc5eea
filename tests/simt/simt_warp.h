// simt_warp.h: warp primitives as rendezvous of the lanes named in their mask (emulated build
// only; included by simt.h).
//
// A lane posts its operand and blocks; when every present lane of the mask waits at the same
// primitive with the same mask, the scheduler computes all the answers at once (resolve_warps).
// Shuffle source lanes follow PTX's shfl.sync definition (CUDA's intrinsics are thin wrappers
// over it): the `c` operand packs the segment mask (32 - width) << 8 and the clamp lane.
#ifndef LLMMINI_SIMT_WARP_H
#define LLMMINI_SIMT_WARP_H

#include "simt_fp16.h"
#include "simt_sched.h"

namespace simt {
namespace detail {

enum WarpKind {
    warp_sync,
    shfl_idx,
    shfl_up,
    shfl_down,
    shfl_bfly,
    vote_ballot,
    vote_any,
    vote_all,
    reduce_add,
    reduce_min_u,
    reduce_max_u,
    reduce_min_i,
    reduce_max_i,
    reduce_and,
    reduce_or,
    reduce_xor,
    match_any,
    match_all,
};

inline unsigned lane_of(const Launch &L, const Thread &t) { return linear_tid(L, t) % 32; }

// The lanes that exist in the warp starting at thread `base` (fewer than 32 in a partial warp).
inline unsigned lanes_present(const Launch &L, unsigned base) {
    unsigned n = L.nthreads - base;
    return n >= 32 ? ~0u : (1u << n) - 1;
}

inline WarpCall &warp_wait(int kind, const char *name, unsigned mask, unsigned size,
                           unsigned long long in, int b = 0, int c = 0) {
    Launch &L = launch_in_progress(name);
    Thread *t = L.current;
    unsigned lane = lane_of(L, *t);
    if (!(mask >> lane & 1))
        die("%s: the calling lane %u is not in its mask 0x%08x", name, lane, mask);
    t->warp = WarpCall{kind, name, mask, size, in, b, c, 0, 0};
    t->state = State::warp;
    block_current_thread();
    return t->warp;
}

inline bool same_call(const WarpCall &a, const WarpCall &b) {
    return a.kind == b.kind && a.mask == b.mask && a.size == b.size;
}

inline bool group_complete(const Launch &L, unsigned base, const WarpCall &w) {
    unsigned group = w.mask & lanes_present(L, base);
    for (unsigned j = 0; j < 32; j++) {
        if (!(group >> j & 1))
            continue;
        const Thread &u = L.threads[base + j];
        if (u.state != State::warp || !same_call(u.warp, w))
            return false;
    }
    return true;
}

inline unsigned shfl_source(int kind, unsigned lane, int b, int c) {
    int bval = b & 31, cval = c & 31, segmask = (c >> 8) & 31;
    int max_lane = ((int)lane & segmask) | (cval & ~segmask);
    int min_lane = (int)lane & segmask;
    int j = (int)lane;
    bool in_range = false;
    switch (kind) {
    case shfl_up: j = (int)lane - bval, in_range = j >= max_lane; break;
    case shfl_down: j = (int)lane + bval, in_range = j <= max_lane; break;
    case shfl_bfly: j = (int)lane ^ bval, in_range = j <= max_lane; break;
    default: j = min_lane | (bval & ~segmask), in_range = j <= max_lane; break;
    }
    return in_range ? (unsigned)j : lane;
}

inline unsigned long long poison(unsigned size) {
    return size >= 8 ? ~0ull : (1ull << (8 * size)) - 1;
}

inline long long as_signed(const WarpCall &w) { return (int)(unsigned)w.in; }

// Computes every answer of a complete rendezvous of the lanes in `group`.
inline void complete(Launch &L, unsigned base, unsigned group) {
    WarpCall *lane[32] = {};
    int first = -1;
    for (unsigned j = 0; j < 32; j++)
        if (group >> j & 1) {
            lane[j] = &L.threads[base + j].warp;
            if (first < 0)
                first = (int)j;
        }
    const int kind = lane[first]->kind;
    unsigned long long acc = 0, bits = 0;
    long long sacc = as_signed(*lane[first]);
    acc = lane[first]->in;
    for (unsigned j = 0; j < 32; j++) {
        if (!lane[j])
            continue;
        const WarpCall &w = *lane[j];
        bits |= (unsigned long long)(w.in != 0) << j;
        switch (kind) {
        case reduce_add: acc = (int)j == first ? acc : (unsigned)(acc + w.in); break;
        case reduce_min_u: acc = w.in < acc ? w.in : acc; break;
        case reduce_max_u: acc = w.in > acc ? w.in : acc; break;
        case reduce_min_i: sacc = as_signed(w) < sacc ? as_signed(w) : sacc; break;
        case reduce_max_i: sacc = as_signed(w) > sacc ? as_signed(w) : sacc; break;
        case reduce_and: acc &= w.in; break;
        case reduce_or: acc |= w.in; break;
        case reduce_xor: acc = (int)j == first ? acc : acc ^ w.in; break;
        default: break;
        }
    }
    if (kind == reduce_min_i || kind == reduce_max_i)
        acc = (unsigned)(int)sacc;
    bool all_equal = true;
    for (unsigned j = 0; j < 32; j++)
        all_equal &= !lane[j] || lane[j]->in == lane[first]->in;
    for (unsigned j = 0; j < 32; j++) {
        if (!lane[j])
            continue;
        WarpCall &w = *lane[j];
        switch (kind) {
        case shfl_idx:
        case shfl_up:
        case shfl_down:
        case shfl_bfly: {
            unsigned src = shfl_source(kind, j, w.b, w.c);
            // a lane outside the mask, or absent from a partial warp: undefined in CUDA
            w.out = (group >> src & 1) ? lane[src]->in : poison(w.size);
            break;
        }
        case vote_ballot: w.out = bits; break;
        case vote_any: w.out = bits != 0; break;
        case vote_all: w.out = bits == group; break;
        case match_any: {
            unsigned same = 0;
            for (unsigned k = 0; k < 32; k++)
                if (lane[k] && lane[k]->in == w.in)
                    same |= 1u << k;
            w.out = same;
            break;
        }
        case match_all: w.out = all_equal ? group : 0, w.pred_out = all_equal; break;
        case warp_sync: break;
        default: w.out = acc; break;
        }
    }
}

inline bool resolve_warps(Launch &L) {
    bool progress = false;
    for (unsigned base = 0; base < L.nthreads; base += 32) {
        unsigned present = lanes_present(L, base);
        for (unsigned j = 0; j < 32 && base + j < L.nthreads; j++) {
            Thread &t = L.threads[base + j];
            if (t.state != State::warp || !group_complete(L, base, t.warp))
                continue;
            unsigned group = t.warp.mask & present;
            complete(L, base, group);
            for (unsigned k = 0; k < 32; k++)
                if (group >> k & 1)
                    L.threads[base + k].state = State::ready;
            progress = true;
        }
    }
    return progress;
}

// Nothing can run: say why, naming the threads involved.
[[noreturn]] inline void diagnose_stuck(Launch &L) {
    for (const Thread &t : L.threads) {
        if (t.state != State::warp)
            continue;
        unsigned tid = linear_tid(L, t), base = tid & ~31u;
        unsigned group = t.warp.mask & lanes_present(L, base);
        for (unsigned j = 0; j < 32; j++) {
            if (!(group >> j & 1))
                continue;
            const Thread &u = L.threads[base + j];
            if (u.state == State::done)
                die("%s with mask 0x%08x in thread (%u,%u,%u) (lane %u) waits for lane %u "
                     "(thread (%u,%u,%u)), which has exited: a mask must name only lanes that "
                     "reach the primitive",
                     t.warp.name, t.warp.mask, t.idx.x, t.idx.y, t.idx.z, tid % 32, j, u.idx.x,
                     u.idx.y, u.idx.z);
            if (u.state == State::warp && !same_call(u.warp, t.warp))
                die("lanes %u and %u of warp %u disagree: %s with mask 0x%08x and %s with "
                     "mask 0x%08x",
                     tid % 32, j, base / 32, t.warp.name, t.warp.mask, u.warp.name, u.warp.mask);
            if (u.state == State::barrier)
                die("deadlock: lane %u waits in %s for lane %u (thread (%u,%u,%u)), which waits "
                     "at __syncthreads (%s:%d)",
                     tid % 32, t.warp.name, j, u.idx.x, u.idx.y, u.idx.z, u.barrier_file,
                     u.barrier_line);
        }
    }
    const Thread *waiting = nullptr, *exited = nullptr;
    for (const Thread &t : L.threads) {
        if (t.state == State::barrier && !waiting)
            waiting = &t;
        if (t.state == State::done && !exited)
            exited = &t;
    }
    if (waiting && exited)
        die("divergent __syncthreads (%s:%d): thread (%u,%u,%u) waits there but thread "
             "(%u,%u,%u) has exited; a barrier must be reached by every thread of the block",
             waiting->barrier_file, waiting->barrier_line, waiting->idx.x, waiting->idx.y,
             waiting->idx.z, exited->idx.x, exited->idx.y, exited->idx.z);
    die("deadlock: no thread can proceed");
}

template <class T> struct shuffleable {
    static constexpr bool value = std::is_arithmetic<T>::value || std::is_same<T, __half>::value ||
                                  std::is_same<T, __half2>::value ||
                                  std::is_same<T, __nv_bfloat16>::value;
};

template <class T> inline T shuffle(int kind, const char *name, unsigned mask, T var, int b,
                                    int width, bool clamp_high) {
    static_assert(shuffleable<T>::value && sizeof(T) <= 8, "CUDA shuffles scalars and halves");
    if (width < 1 || width > 32 || (width & (width - 1)))
        die("%s: width %d is not a power of two in [1, 32]", name, width);
    unsigned long long in = 0;
    std::memcpy(&in, &var, sizeof(T));
    int c = ((32 - width) << 8) | (clamp_high ? 0x1f : 0);
    WarpCall &w = warp_wait(kind, name, mask, sizeof(T), in, b, c);
    T out;
    std::memcpy(&out, &w.out, sizeof(T));
    return out;
}

inline unsigned lanes_alive(const char *name) {
    Launch &L = launch_in_progress(name);
    unsigned base = linear_tid(L, *L.current) & ~31u, mask = 0;
    for (unsigned j = 0; j < 32 && base + j < L.nthreads; j++)
        if (L.threads[base + j].state != State::done)
            mask |= 1u << j;
    return mask;
}

inline unsigned long long bits_of(int v) { return (unsigned)v; }
inline unsigned long long bits_of(unsigned v) { return v; }

} // namespace detail
} // namespace simt

template <class T> inline T __shfl_sync(unsigned mask, T var, int src_lane, int width = 32) {
    return simt::detail::shuffle(simt::detail::shfl_idx, "__shfl_sync", mask, var, src_lane,
                                 width, true);
}
template <class T> inline T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = 32) {
    return simt::detail::shuffle(simt::detail::shfl_up, "__shfl_up_sync", mask, var, (int)delta,
                                 width, false);
}
template <class T>
inline T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = 32) {
    return simt::detail::shuffle(simt::detail::shfl_down, "__shfl_down_sync", mask, var,
                                 (int)delta, width, true);
}
template <class T> inline T __shfl_xor_sync(unsigned mask, T var, int lane_mask, int width = 32) {
    return simt::detail::shuffle(simt::detail::shfl_bfly, "__shfl_xor_sync", mask, var, lane_mask,
                                 width, true);
}

inline void __syncwarp(unsigned mask = 0xffffffffu) {
    simt::detail::warp_wait(simt::detail::warp_sync, "__syncwarp", mask, 0, 0);
}
inline unsigned __ballot_sync(unsigned mask, int pred) {
    return (unsigned)simt::detail::warp_wait(simt::detail::vote_ballot, "__ballot_sync", mask, 0,
                                             pred != 0).out;
}
inline int __any_sync(unsigned mask, int pred) {
    return (int)simt::detail::warp_wait(simt::detail::vote_any, "__any_sync", mask, 0, pred != 0)
        .out;
}
inline int __all_sync(unsigned mask, int pred) {
    return (int)simt::detail::warp_wait(simt::detail::vote_all, "__all_sync", mask, 0, pred != 0)
        .out;
}
// Lanes of the warp that have not exited: the emulation has no divergence to report, and CUDA
// promises no more than a subset of the converged lanes anyway.
inline unsigned __activemask() { return simt::detail::lanes_alive("__activemask"); }

#define SIMT_REDUCE(fn, T, kind)                                                                \
    inline T fn(unsigned mask, T value) {                                                       \
        return (T)simt::detail::warp_wait(simt::detail::kind, #fn, mask, 4,                     \
                                          simt::detail::bits_of(value)).out;                    \
    }
SIMT_REDUCE(__reduce_add_sync, unsigned, reduce_add)
SIMT_REDUCE(__reduce_add_sync, int, reduce_add)
SIMT_REDUCE(__reduce_min_sync, unsigned, reduce_min_u)
SIMT_REDUCE(__reduce_min_sync, int, reduce_min_i)
SIMT_REDUCE(__reduce_max_sync, unsigned, reduce_max_u)
SIMT_REDUCE(__reduce_max_sync, int, reduce_max_i)
SIMT_REDUCE(__reduce_and_sync, unsigned, reduce_and)
SIMT_REDUCE(__reduce_or_sync, unsigned, reduce_or)
SIMT_REDUCE(__reduce_xor_sync, unsigned, reduce_xor)
#undef SIMT_REDUCE

template <class T> inline unsigned __match_any_sync(unsigned mask, T value) {
    static_assert(std::is_integral<T>::value && sizeof(T) <= 8, "CUDA matches 32/64-bit ints");
    unsigned long long in = 0;
    std::memcpy(&in, &value, sizeof(T));
    return (unsigned)simt::detail::warp_wait(simt::detail::match_any, "__match_any_sync", mask,
                                             sizeof(T), in).out;
}
template <class T> inline unsigned __match_all_sync(unsigned mask, T value, int *pred) {
    static_assert(std::is_integral<T>::value && sizeof(T) <= 8, "CUDA matches 32/64-bit ints");
    unsigned long long in = 0;
    std::memcpy(&in, &value, sizeof(T));
    simt::detail::WarpCall &w = simt::detail::warp_wait(simt::detail::match_all,
                                                         "__match_all_sync", mask, sizeof(T), in);
    *pred = w.pred_out;
    return (unsigned)w.out;
}

#endif
