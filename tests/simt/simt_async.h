// simt_async.h: asynchronous copies from global to shared memory (cp.async, sm_80 and later), as
// CUDA's pipeline primitives spell them (cuda_pipeline_primitives.h): __pipeline_memcpy_async,
// __pipeline_commit, __pipeline_wait_prior (emulated build only; included by simt.h).
//
// The PTX ISA's rules ("cp.async", "cp.async.commit_group", "cp.async.wait_group"): a copy
// belongs to no group until the thread commits the copies it has issued since its last commit
// as one group; cp.async.wait_group N returns once at most the N most recently committed groups
// of this thread are still pending; until then a destination's contents are unspecified, and a
// barrier does not change that. So here a copy fills its destination with garbage (0xa5 bytes)
// when issued and moves the bytes only at the wait that completes its group: a kernel that reads
// before its wait, or waits for too few groups, reads garbage exactly where a GPU may read stale
// data. The source is read at the wait, which a correct kernel cannot tell apart (it must not
// write a source before the copy completes). Copies of 4, 8 or 16 bytes, both addresses aligned
// to the size, as the instruction requires; anything else aborts.
//
// Each thread's groups belong to the block it runs in. Copies still pending when a thread's
// block ends are a kernel bug (their destination is gone); they are found at the next cp.async
// call of that host thread in another block and abort there.
#ifndef LLMMINI_SIMT_ASYNC_H
#define LLMMINI_SIMT_ASYNC_H

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <vector>

#include "simt_profile.h"
#include "simt_sched.h"

namespace simt {
namespace detail {

struct AsyncCopy {
    void *dst;
    const void *src;
    size_t bytes, zero_fill;
};

struct AsyncThreadCopies {
    std::vector<AsyncCopy> uncommitted;
    std::deque<std::vector<AsyncCopy>> committed; // oldest first
};

// The copies of the block in progress on this host thread, one entry per thread of the block.
struct AsyncBlockCopies {
    const Launch *launch = nullptr;
    uint3 block{0, 0, 0};
    std::vector<AsyncThreadCopies> threads;
};

inline thread_local AsyncBlockCopies g_async_copies;

inline bool async_copies_pending(const AsyncThreadCopies &t) {
    if (!t.uncommitted.empty())
        return true;
    for (const std::vector<AsyncCopy> &group : t.committed)
        if (!group.empty())
            return true;
    return false;
}

inline AsyncThreadCopies &async_copies_of_current_thread(const char *what) {
    Launch &L = launch_in_progress(what);
    AsyncBlockCopies &A = g_async_copies;
    if (A.launch != &L || A.block.x != L.block_idx.x || A.block.y != L.block_idx.y ||
        A.block.z != L.block_idx.z) {
        for (const AsyncThreadCopies &t : A.threads)
            if (async_copies_pending(t))
                die("a thread of an earlier block ended with cp.async copies it never waited for "
                    "(__pipeline_wait_prior(0) before the block ends)");
        A.launch = &L;
        A.block = L.block_idx;
        A.threads.assign(L.nthreads, AsyncThreadCopies{});
    }
    return A.threads[linear_tid(L, *L.current)];
}

inline void complete_async_group(std::vector<AsyncCopy> &group) {
    for (const AsyncCopy &c : group) {
        std::memcpy(c.dst, c.src, c.bytes - c.zero_fill);
        std::memset((unsigned char *)c.dst + (c.bytes - c.zero_fill), 0, c.zero_fill);
    }
    group.clear();
}

} // namespace detail
} // namespace simt

// zfill: the last zfill bytes of the destination become zero instead of being read (the
// instruction's src-size operand is size_and_align - zfill).
inline void __pipeline_memcpy_async(void *dst_shared, const void *src_global, size_t size_and_align,
                                    size_t zfill = 0) {
    using namespace simt::detail;
    AsyncThreadCopies &t = async_copies_of_current_thread("__pipeline_memcpy_async");
    if (size_and_align != 4 && size_and_align != 8 && size_and_align != 16)
        die("__pipeline_memcpy_async of %zu bytes: cp.async copies 4, 8 or 16", size_and_align);
    if ((uintptr_t)dst_shared % size_and_align || (uintptr_t)src_global % size_and_align)
        die("__pipeline_memcpy_async of %zu bytes from %p to %p: both addresses must be aligned to "
            "the size", size_and_align, src_global, dst_shared);
    if (zfill > size_and_align)
        die("__pipeline_memcpy_async: zfill %zu is more than the %zu bytes copied", zfill, size_and_align);
    std::memset(dst_shared, 0xa5, size_and_align);
    /* make cuda-profile's count, after the poison, which is the emulator's and no store of the
     * kernel: the counters take it back */
    simt::profile::cp_async(dst_shared, src_global, (unsigned)size_and_align);
    t.uncommitted.push_back(AsyncCopy{dst_shared, src_global, size_and_align, zfill});
}

// An empty group is a group: it counts in a later wait, and is complete at once.
inline void __pipeline_commit() {
    simt::detail::AsyncThreadCopies &t = simt::detail::async_copies_of_current_thread("__pipeline_commit");
    t.committed.push_back(std::move(t.uncommitted));
    t.uncommitted.clear();
}

inline void __pipeline_wait_prior(size_t prior) {
    simt::detail::AsyncThreadCopies &t = simt::detail::async_copies_of_current_thread("__pipeline_wait_prior");
    while (t.committed.size() > prior) {
        simt::detail::complete_async_group(t.committed.front());
        t.committed.pop_front();
    }
}

#endif
