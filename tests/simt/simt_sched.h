// simt_sched.h: the launch of a kernel, its threads as coroutines, and __syncthreads
// (emulated build only; included by simt.h, which documents the model).
//
// A launch runs its blocks one after another on the calling CPU thread. A block's threads are
// coroutines (simt_switch.h) on stacks of SIMT_STACK_SIZE bytes, each above a PROT_NONE guard
// page so an overflow faults instead of corrupting the neighbour. The scheduler makes passes
// over the threads in linear order; a thread runs until it blocks at a barrier or a warp
// primitive, or returns. When a pass leaves nothing runnable, complete warp rendezvous are
// released first, then the block barrier; if neither can be, the block is stuck and the launch
// aborts saying why.
#ifndef LLMMINI_SIMT_SCHED_H
#define LLMMINI_SIMT_SCHED_H

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdarg>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#define SIMT_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SIMT_ASAN 1
#endif
#endif
#ifdef SIMT_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

#include "simt_profile.h"
#include "simt_switch.h"
#include "simt_types.h"

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __align__(n) alignas(n)
#define __constant__
// Blocks run one at a time and launches are serialised, so a function-local static is exactly
// one block's shared memory (see simt.h for what that does not catch).
#define __shared__ static

#ifndef SIMT_STACK_SIZE
#ifdef SIMT_ASAN
#define SIMT_STACK_SIZE (256 * 1024) // ASan's redzones triple a frame
#else
#define SIMT_STACK_SIZE (64 * 1024)
#endif
#endif

typedef struct CUstream_st *cudaStream_t;

namespace simt {
namespace detail {

enum class State : unsigned char { ready, barrier, warp, done };

// __syncthreads and its reducing variants
enum class BarrierKind : unsigned char { plain, count, all, any };

// One thread's pending warp primitive: what it asked for and, once released, its answer.
struct WarpCall {
    int kind;
    const char *name;
    unsigned mask;
    unsigned size;          // bytes of the shuffled type (the same for every lane)
    unsigned long long in;  // the thread's operand, bit-copied
    int b, c;               // shuffle lane operand and PTX clamp/segment value
    unsigned long long out; // the answer, bit-copied
    int pred_out;
};

struct Thread {
    Context ctx;
    uint3 idx;
    State state;
    BarrierKind barrier_kind;
    int pred;
    const char *barrier_file;
    int barrier_line;
    WarpCall warp;
    void *asan_fake_stack;
};

struct Launch {
    const char *kernel;
    dim3 grid, block;
    uint3 block_idx;
    unsigned nthreads;
    size_t shmem_bytes;
    unsigned char *shmem;
    void (*body)(void *);
    void *body_arg;
    std::vector<Thread> threads;
    Thread *current;
    Context scheduler;
    const void *sched_stack_bottom;
    size_t sched_stack_size;
    void *sched_fake_stack;
};

// The launch in progress on this host thread (coroutines never leave the host thread that
// started them; launch_mutex serialises launches across host threads).
inline thread_local Launch *g_launch = nullptr;

inline std::mutex &launch_mutex() {
    static std::mutex m;
    return m;
}

// cudaFuncSetAttribute(MaxDynamicSharedMemorySize) per kernel; 48 KiB without it, as on a GPU
inline std::map<const void *, int> &dynamic_smem_limits() {
    static std::map<const void *, int> m;
    return m;
}
constexpr int default_dynamic_smem_limit = 48 * 1024;
// sm_90's opt-in maximum (sm_87 allows 163 KiB; 227 KiB is the larger of our two targets)
constexpr int max_dynamic_smem_limit = 227 * 1024;

[[noreturn]] __attribute__((format(printf, 1, 2))) inline void die(const char *fmt, ...) {
    std::fflush(stdout);
    Launch *L = g_launch;
    if (L) {
        std::fprintf(stderr, "simt: kernel %s, block (%u,%u,%u)", L->kernel, L->block_idx.x,
                     L->block_idx.y, L->block_idx.z);
        if (L->current)
            std::fprintf(stderr, ", thread (%u,%u,%u)", L->current->idx.x, L->current->idx.y,
                         L->current->idx.z);
        std::fprintf(stderr, ": ");
    } else {
        std::fprintf(stderr, "simt: ");
    }
    va_list ap;
    va_start(ap, fmt);
    std::vfprintf(stderr, fmt, ap);
    va_end(ap);
    std::fprintf(stderr, "\n");
    std::fflush(stderr);
    std::abort();
}

inline Launch &launch_in_progress(const char *what) {
    if (!g_launch || !g_launch->current)
        die("%s called outside a kernel", what);
    return *g_launch;
}

inline unsigned linear_tid(const Launch &L, const Thread &t) {
    return t.idx.x + L.block.x * (t.idx.y + L.block.y * t.idx.z);
}

// ---- stacks: one mapping, a guard page below each stack, kept for the process's lifetime

struct StackPool {
    unsigned char *base = nullptr;
    size_t count = 0;
    size_t page = 0;

    size_t stride() const { return page + SIMT_STACK_SIZE; }
    unsigned char *stack(size_t i) const { return base + i * stride() + page; }

    void reserve(size_t n) {
        if (n <= count)
            return;
        if (base)
            munmap(base, count * stride());
        page = (size_t)sysconf(_SC_PAGESIZE);
        base = (unsigned char *)mmap(nullptr, n * stride(), PROT_READ | PROT_WRITE,
                                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (base == MAP_FAILED)
            die("cannot map %zu thread stacks", n);
        for (size_t i = 0; i < n; i++)
            if (mprotect(base + i * stride(), page, PROT_NONE) != 0)
                die("cannot protect a stack guard page");
        count = n;
    }
};

inline StackPool &stacks() {
    static StackPool pool;
    return pool;
}

// ---- fault messages: a segfault inside a kernel (often a thread stack overflow) names it

inline void on_fault(int sig) {
    Launch *L = g_launch;
    if (L && L->current) {
        char msg[512];
        int n = std::snprintf(msg, sizeof msg,
                              "simt: kernel %s, block (%u,%u,%u), thread (%u,%u,%u): signal %d "
                              "(a fault in a guard page is a thread stack overflow: "
                              "SIMT_STACK_SIZE is %d bytes)\n",
                              L->kernel, L->block_idx.x, L->block_idx.y, L->block_idx.z,
                              L->current->idx.x, L->current->idx.y, L->current->idx.z, sig,
                              (int)SIMT_STACK_SIZE);
        if (n > 0)
            (void)!write(2, msg, (size_t)n < sizeof msg ? (size_t)n : sizeof msg - 1);
    }
    signal(sig, SIG_DFL); // returning re-executes the access, which now terminates
}

#ifdef SIMT_ASAN
// ASan reports the access; this names the kernel and thread it happened in.
inline void on_asan_death() {
    Launch *L = g_launch;
    if (L && L->current)
        std::fprintf(stderr, "simt: the error above is in kernel %s, block (%u,%u,%u), thread "
                     "(%u,%u,%u)\n", L->kernel, L->block_idx.x, L->block_idx.y, L->block_idx.z,
                     L->current->idx.x, L->current->idx.y, L->current->idx.z);
}
#endif

// Only where nobody else (ASan, a test framework) handles the signal; checked at every launch,
// since a framework may install and remove its handlers around each test. The handler runs on
// an alternate stack, since the faulting one may be the exhausted coroutine stack.
inline void install_fault_handler() {
#ifdef SIMT_ASAN
    __asan_set_death_callback(on_asan_death);
#endif
    static thread_local bool have_altstack = false;
    if (!have_altstack) {
        stack_t ss;
        std::memset(&ss, 0, sizeof ss);
        if (sigaltstack(nullptr, &ss) != 0 || (ss.ss_flags & SS_DISABLE)) {
            // kept for the host thread's lifetime; mmap, so LeakSanitizer does not count it
            ss.ss_flags = 0;
            ss.ss_size = 64 * 1024;
            ss.ss_sp = mmap(nullptr, ss.ss_size, PROT_READ | PROT_WRITE,
                            MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (ss.ss_sp == MAP_FAILED || sigaltstack(&ss, nullptr) != 0)
                return;
        } // else one is there already (ASan's), which serves as well
        have_altstack = true;
    }
    for (int sig : {SIGSEGV, SIGBUS}) {
        struct sigaction old;
        if (sigaction(sig, nullptr, &old) != 0 || old.sa_handler != SIG_DFL)
            continue;
        struct sigaction sa;
        std::memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_fault;
        sa.sa_flags = SA_ONSTACK;
        sigemptyset(&sa.sa_mask);
        sigaction(sig, &sa, nullptr);
    }
}

// ---- switching between the scheduler and a thread (with ASan's fiber annotations, without
// which ASan mistakes the coroutine stacks for stack corruption)

inline void asan_start_switch(void **fake_stack_save, const void *bottom, size_t size) {
#ifdef SIMT_ASAN
    __sanitizer_start_switch_fiber(fake_stack_save, bottom, size);
#else
    (void)fake_stack_save, (void)bottom, (void)size;
#endif
}

inline void asan_finish_switch(void *fake_stack, const void **old_bottom, size_t *old_size) {
#ifdef SIMT_ASAN
    __sanitizer_finish_switch_fiber(fake_stack, old_bottom, old_size);
#else
    (void)fake_stack, (void)old_bottom, (void)old_size;
#endif
}

inline void thread_main() {
    Launch *L = g_launch;
    asan_finish_switch(nullptr, &L->sched_stack_bottom, &L->sched_stack_size);
    L->body(L->body_arg);
    Thread *t = L->current;
    t->state = State::done;
    asan_start_switch(nullptr, L->sched_stack_bottom, L->sched_stack_size); // frees its fake stack
    context_switch(&t->ctx, &L->scheduler);
    die("a finished thread was resumed");
}

// Called by a thread that has recorded what it waits for in its state.
inline void block_current_thread() {
    Launch *L = g_launch;
    Thread *t = L->current;
    asan_start_switch(&t->asan_fake_stack, L->sched_stack_bottom, L->sched_stack_size);
    context_switch(&t->ctx, &L->scheduler);
    asan_finish_switch(t->asan_fake_stack, &L->sched_stack_bottom, &L->sched_stack_size);
}

inline void run_thread(Launch &L, unsigned i) {
    Thread &t = L.threads[i];
    L.current = &t;
    asan_start_switch(&L.sched_fake_stack, stacks().stack(i), SIMT_STACK_SIZE);
    context_switch(&L.scheduler, &t.ctx);
    asan_finish_switch(L.sched_fake_stack, nullptr, nullptr);
    L.current = nullptr;
}

// ---- __syncthreads

inline int syncthreads(BarrierKind kind, int pred, const char *file, int line) {
    Launch &L = launch_in_progress("__syncthreads");
    Thread *t = L.current;
    t->state = State::barrier;
    t->barrier_kind = kind;
    t->pred = pred != 0;
    t->barrier_file = file;
    t->barrier_line = line;
    block_current_thread();
    return t->pred;
}

inline bool same_barrier(const Thread &a, const Thread &b) {
    return a.barrier_line == b.barrier_line && a.barrier_kind == b.barrier_kind &&
           std::strcmp(a.barrier_file, b.barrier_file) == 0;
}

// Releases the barrier if every thread of the block waits at the same one.
inline bool resolve_barrier(Launch &L) {
    const Thread *first = nullptr;
    int count = 0;
    for (const Thread &t : L.threads) {
        if (t.state != State::barrier)
            return false;
        if (!first)
            first = &t;
        else if (!same_barrier(*first, t))
            die("threads (%u,%u,%u) and (%u,%u,%u) wait at different __syncthreads (%s:%d and "
                 "%s:%d): a barrier must be reached by the whole block",
                 first->idx.x, first->idx.y, first->idx.z, t.idx.x, t.idx.y, t.idx.z,
                 first->barrier_file, first->barrier_line, t.barrier_file, t.barrier_line);
        count += t.pred;
    }
    int result = count;
    if (first->barrier_kind == BarrierKind::all)
        result = count == (int)L.nthreads;
    else if (first->barrier_kind == BarrierKind::any)
        result = count != 0;
    for (Thread &t : L.threads) {
        t.pred = result;
        t.state = State::ready;
    }
    return true;
}

inline bool resolve_warps(Launch &L);          // simt_warp.h
[[noreturn]] inline void diagnose_stuck(Launch &L); // simt_warp.h

inline void fill_garbage(Launch &L, unsigned block_linear) {
    // NaN / -1 in even blocks, a huge float / large int in odd ones: a read before write shows
    std::memset(L.shmem, (block_linear & 1) ? 0x7f : 0xff, L.shmem_bytes);
}

inline void run_block(Launch &L) {
    StackPool &pool = stacks();
    for (unsigned i = 0; i < L.nthreads; i++) {
        Thread &t = L.threads[i];
        t.idx = uint3{i % L.block.x, i / L.block.x % L.block.y, i / (L.block.x * L.block.y)};
        t.state = State::ready;
        t.asan_fake_stack = nullptr;
#ifdef SIMT_ASAN
        // frames left by the previous block's threads
        __asan_unpoison_memory_region(pool.stack(i), SIMT_STACK_SIZE);
#endif
        if (!context_init(&t.ctx, pool.stack(i), SIMT_STACK_SIZE, thread_main))
            die("cannot make a thread context");
    }
    for (;;) {
        for (unsigned i = 0; i < L.nthreads; i++)
            if (L.threads[i].state == State::ready)
                run_thread(L, i);
        if (resolve_warps(L) || resolve_barrier(L))
            continue;
        bool all_done = true;
        for (const Thread &t : L.threads)
            all_done &= t.state == State::done;
        if (all_done)
            return;
        diagnose_stuck(L);
    }
}

inline void check_config(const char *name, const void *kernel, dim3 grid, dim3 block,
                         size_t shmem) {
    unsigned long long threads = (unsigned long long)block.x * block.y * block.z;
    if (threads == 0 || threads > 1024 || block.x > 1024 || block.y > 1024 || block.z > 64)
        die("kernel %s: invalid block (%u,%u,%u): 1 to 1024 threads, z at most 64", name,
             block.x, block.y, block.z);
    if (grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.x > 0x7fffffffu || grid.y > 65535 ||
        grid.z > 65535)
        die("kernel %s: invalid grid (%u,%u,%u)", name, grid.x, grid.y, grid.z);
    auto it = dynamic_smem_limits().find(kernel);
    int limit = it == dynamic_smem_limits().end() ? default_dynamic_smem_limit : it->second;
    if (shmem > (size_t)limit)
        die("kernel %s: %zu bytes of dynamic shared memory, more than %d (raise the limit "
             "with cudaFuncSetAttribute(cudaFuncAttributeMaxDynamicSharedMemorySize))",
             name, shmem, limit);
}

inline void run_launch(const char *name, const void *kernel, dim3 grid, dim3 block,
                       size_t shmem, void (*body)(void *), void *body_arg) {
    if (g_launch)
        die("kernel %s launched from inside a kernel: dynamic parallelism is not emulated",
             name);
    std::lock_guard<std::mutex> lock(launch_mutex());
    check_config(name, kernel, grid, block, shmem);
    install_fault_handler();
    Launch L{};
    L.kernel = name;
    L.grid = grid;
    L.block = block;
    L.nthreads = block.x * block.y * block.z;
    L.shmem_bytes = shmem;
    L.shmem = (unsigned char *)std::malloc(shmem ? shmem : 1);
    L.body = body;
    L.body_arg = body_arg;
    L.threads.resize(L.nthreads);
    stacks().reserve(L.nthreads);
    g_launch = &L;
    profile::launch_begin(name, kernel, grid, block, L.shmem, shmem);
    unsigned block_linear = 0;
    for (unsigned z = 0; z < grid.z; z++)
        for (unsigned y = 0; y < grid.y; y++)
            for (unsigned x = 0; x < grid.x; x++) {
                L.block_idx = uint3{x, y, z};
                if (!profile::block_runs(L.block_idx)) {
                    block_linear++;
                    continue;
                }
                fill_garbage(L, block_linear++);
                run_block(L);
                profile::block_end();
            }
    profile::launch_end();
    g_launch = nullptr;
    std::free(L.shmem);
}

template <class... P> struct KernelCall {
    void (*kernel)(P...);
    std::tuple<std::decay_t<P>...> params;

    static void run(void *self) {
        auto *call = static_cast<KernelCall *>(self);
        std::apply(call->kernel, call->params); // each thread gets its own copy, as in CUDA
    }
};

// Built-in variables: non-constexpr functions, so that `__shared__ float s[warpSize]` fails
// here as it does under nvcc.
inline const uint3 &thread_idx() { return launch_in_progress("threadIdx").current->idx; }
inline const uint3 &block_idx() { return launch_in_progress("blockIdx").block_idx; }
inline const dim3 &block_dim() { return launch_in_progress("blockDim").block; }
inline const dim3 &grid_dim() { return launch_in_progress("gridDim").grid; }
inline int warp_size() { return 32; }
inline unsigned char *dynamic_shared() { return launch_in_progress("dynamic shared").shmem; }

} // namespace detail

namespace detail {
// Stream capture (simt_graph.h): whether launches on stream are recorded into a graph rather
// than run, and recording one.
inline bool stream_capturing(cudaStream_t stream);
inline void capture_node(cudaStream_t stream, std::function<void()> node);
inline bool legacy_stream_conflicts(const char *call);
inline void refuse_legacy_launch(); // cudaErrorStreamCaptureImplicit for cudaGetLastError
} // namespace detail

// The arguments are converted to the kernel's parameter types once, at the launch, as CUDA
// copies them into its parameter buffer. A launch on a capturing stream keeps that copy in
// the graph and runs when the graph is launched; any other runs now (synchronously).
template <class... P, class... A>
void launch(const char *name, dim3 grid, dim3 block, size_t shmem, cudaStream_t stream,
            void (*kernel)(P...), A &&...args) {
    detail::KernelCall<P...> call{kernel, std::tuple<std::decay_t<P>...>(std::forward<A>(args)...)};
    if (!stream && detail::legacy_stream_conflicts(name)) { // a blocking stream captures: refused
        detail::refuse_legacy_launch();
        return;
    }
    if (detail::stream_capturing(stream)) {
        detail::capture_node(stream, [name, grid, block, shmem, call]() {
            detail::KernelCall<P...> copy = call;
            detail::run_launch(name, reinterpret_cast<const void *>(copy.kernel), grid, block, shmem,
                               &detail::KernelCall<P...>::run, &copy);
        });
        return;
    }
    detail::run_launch(name, reinterpret_cast<const void *>(kernel), grid, block, shmem,
                       &detail::KernelCall<P...>::run, &call);
}

} // namespace simt

#define threadIdx (::simt::detail::thread_idx())
#define blockIdx (::simt::detail::block_idx())
#define blockDim (::simt::detail::block_dim())
#define gridDim (::simt::detail::grid_dim())
#define warpSize (::simt::detail::warp_size())

#define SIMT_LAUNCH(kernel, grid, block, shmem_bytes, stream, ...) \
    ::simt::launch(#kernel, dim3(grid), dim3(block), (shmem_bytes), (stream), kernel, ##__VA_ARGS__)
#define SIMT_DYNAMIC_SHARED(type, name) \
    type *name = reinterpret_cast<type *>(::simt::detail::dynamic_shared())

#define __syncthreads() \
    ((void)::simt::detail::syncthreads(::simt::detail::BarrierKind::plain, 1, __FILE__, __LINE__))
#define __syncthreads_count(pred) \
    ::simt::detail::syncthreads(::simt::detail::BarrierKind::count, (pred), __FILE__, __LINE__)
#define __syncthreads_and(pred) \
    ::simt::detail::syncthreads(::simt::detail::BarrierKind::all, (pred), __FILE__, __LINE__)
#define __syncthreads_or(pred) \
    ::simt::detail::syncthreads(::simt::detail::BarrierKind::any, (pred), __FILE__, __LINE__)

#endif
