// test_simt: the SIMT emulation (simt.h) against CUDA's documented semantics. Every check can
// fail if the emulation is wrong; the kernels live in sample_kernels.cuh, which nvcc compiles
// too (`make CUDA=1`), except the few that look inside the emulation.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
extern "C" {
#include <cmocka.h>
}

#include "simt.h"
#include "sample_kernels.cuh"

// ---- helpers

static uint32_t rng_state = 0x9e3779b9u;
static uint32_t rng() {
    rng_state ^= rng_state << 13, rng_state ^= rng_state >> 17, rng_state ^= rng_state << 5;
    return rng_state;
}
// nonzero values in [-range, range], so a lost or doubled term always shows
static int random_nonzero(int range) {
    int v = (int)(rng() % (2u * range + 1)) - range;
    return v ? v : range;
}

template <class T> static T *device_copy(const std::vector<T> &host) {
    T *d = nullptr;
    assert_int_equal(cudaMalloc(&d, host.size() * sizeof(T) + 1), cudaSuccess);
    cudaMemcpy(d, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice);
    return d;
}

template <class T> static std::vector<T> host_copy(const T *d, size_t n) {
    std::vector<T> host(n);
    cudaMemcpy(host.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost);
    return host;
}

// Runs fn in a child process with stderr captured; returns what the child wrote there.
static std::string run_child(void (*fn)(), int *status) {
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    std::fflush(stdout);
    std::fflush(stderr);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        dup2(fds[1], 2);
        close(fds[1]);
        // cmocka's handlers would report the crash as a test failure inside the child
        for (int sig : {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT})
            signal(sig, SIG_DFL);
        fn();
        _exit(0);
    }
    close(fds[1]);
    std::string err;
    char buf[4096];
    ssize_t n;
    while ((n = read(fds[0], buf, sizeof buf)) > 0)
        err.append(buf, (size_t)n);
    close(fds[0]);
    assert_int_equal(waitpid(pid, status, 0), pid);
    return err;
}

static void expect_in(const std::string &text, const char *what) {
    if (text.find(what) == std::string::npos)
        fail_msg("expected \"%s\" in the child's stderr:\n%s", what, text.c_str());
}

// The child must abort, and its message name the kernel and the fault.
static void expect_abort(void (*fn)(), const char *kernel, const char *phrase) {
    int status = 0;
    std::string err = run_child(fn, &status);
    if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGABRT)
        fail_msg("child did not abort (status 0x%x); stderr:\n%s", status, err.c_str());
    expect_in(err, kernel);
    expect_in(err, phrase);
}

// ---- barriers and shared memory

// The tree reduction is exact with its barriers, and wrong in every block without them: thread 0
// runs ahead and adds partial sums the other threads have not written yet.
static void test_block_sum_needs_its_barriers(void **state) {
    (void)state;
    for (int threads : {32, 128, 256}) {
        const int n = 1000, blocks = (n + threads - 1) / threads;
        std::vector<unsigned> in(n), want(blocks, 0), got(blocks, 0);
        for (int i = 0; i < n; i++) {
            in[i] = (unsigned)random_nonzero(1000);
            want[i / threads] += in[i];
        }
        assert_int_equal(sample_block_sums(in.data(), n, threads, got.data()), cudaSuccess);
        for (int b = 0; b < blocks; b++)
            assert_int_equal(got[b], want[b]);

        unsigned *d_in = device_copy(in), *d_out = device_copy(got);
        SIMT_LAUNCH(block_sum_no_barrier, blocks, threads, threads * sizeof(unsigned), 0, d_in,
                    d_out, n);
        got = host_copy(d_out, blocks);
        for (int b = 0; b < blocks; b++)
            assert_int_not_equal(got[b], want[b]);
        cudaFree(d_in);
        cudaFree(d_out);
    }
}

// Each block reads a neighbour's value from static shared memory after the barrier: it must be
// the value its own block wrote, not one from the block before.
static void test_static_shared_is_per_block(void **state) {
    (void)state;
    const int blocks = 5, threads = 64;
    int *d_out = nullptr;
    cudaMalloc(&d_out, blocks * threads * sizeof(int));
    SIMT_LAUNCH(static_shared_rotate, blocks, threads, 0, 0, d_out, 0);
    std::vector<int> out = host_copy(d_out, blocks * threads);
    for (int b = 0; b < blocks; b++)
        for (int t = 0; t < threads; t++)
            assert_int_equal(out[b * threads + t], b * 1000 + (t + 1) % threads);
    cudaFree(d_out);
}

static void test_barrier_votes(void **state) {
    (void)state;
    for (int density : {0, 1, 2}) { // none, some, all
        const int threads = 70;
        std::vector<int> pred(threads);
        int count = 0;
        for (int t = 0; t < threads; t++)
            count += pred[t] = density == 2 || (density == 1 && t % 3 == 1);
        int *d_pred = device_copy(pred), *d_out = nullptr;
        cudaMalloc(&d_out, 3 * threads * sizeof(int));
        SIMT_LAUNCH(barrier_votes, 1, threads, 0, 0, d_pred, d_out);
        std::vector<int> out = host_copy(d_out, 3 * threads);
        for (int t = 0; t < threads; t++) {
            assert_int_equal(out[3 * t], count);
            assert_int_equal(out[3 * t + 1] != 0, count == threads);
            assert_int_equal(out[3 * t + 2] != 0, count > 0);
        }
        cudaFree(d_pred), cudaFree(d_out);
    }
}

// Host threads may launch at once (as contexts on several threads will): each launch must see
// its own blocks and static shared memory, which launches therefore take turns with.
static void test_concurrent_launches_from_host_threads(void **state) {
    (void)state;
    const int blocks = 6, threads = 256, workers_n = 4;
    int bad[workers_n] = {};
    std::vector<std::thread> workers;
    for (int w = 0; w < workers_n; w++)
        workers.emplace_back([&bad, w] {
            int *d_out = nullptr;
            cudaMalloc(&d_out, blocks * threads * sizeof(int));
            std::vector<int> out(blocks * threads);
            for (int rep = 0; rep < 10; rep++) {
                int base = (w * 100 + rep) * 10000;
                SIMT_LAUNCH(static_shared_rotate, blocks, threads, 0, 0, d_out, base);
                cudaMemcpy(out.data(), d_out, out.size() * sizeof(int), cudaMemcpyDeviceToHost);
                for (int b = 0; b < blocks; b++)
                    for (int t = 0; t < threads; t++)
                        bad[w] += out[b * threads + t] != base + b * 1000 + (t + 1) % threads;
            }
            cudaFree(d_out);
        });
    for (std::thread &t : workers)
        t.join();
    for (int w = 0; w < workers_n; w++)
        assert_int_equal(bad[w], 0);
}

// Looks inside the emulation (not CUDA): the dynamic buffer is garbage at every block start,
// even after the previous block cleared it.
__global__ void inspect_dynamic_shared(unsigned char *first_bytes, int *all_garbage) {
    SIMT_DYNAMIC_SHARED(unsigned char, smem);
    size_t bytes = simt::detail::g_launch->shmem_bytes;
    if (threadIdx.x == 0) {
        int garbage = 1;
        for (size_t i = 0; i < bytes; i++)
            garbage &= smem[i] == smem[0];
        first_bytes[blockIdx.x] = smem[0];
        all_garbage[blockIdx.x] = garbage && (smem[0] == 0xff || smem[0] == 0x7f);
    }
    __syncthreads();
    smem[bytes - 1 - threadIdx.x] = 0;
}

static void test_dynamic_shared_is_garbage_each_block(void **state) {
    (void)state;
    unsigned char *first = nullptr;
    int *garbage = nullptr;
    cudaMalloc(&first, 4);
    cudaMalloc(&garbage, 4 * sizeof(int));
    SIMT_LAUNCH(inspect_dynamic_shared, 4, 32, 77, 0, first, garbage);
    std::vector<unsigned char> f = host_copy(first, 4);
    std::vector<int> g = host_copy(garbage, 4);
    for (int b = 0; b < 4; b++) {
        assert_int_equal(g[b], 1);
        assert_int_equal(f[b], b % 2 ? 0x7f : 0xff);
    }
    cudaFree(first);
    cudaFree(garbage);
}

// One byte past the launch's dynamic shared memory is a heap overflow for ASan.
__global__ void shared_overrun(int *out) {
    SIMT_DYNAMIC_SHARED(unsigned char, smem);
    smem[threadIdx.x] = 1; // 33 threads, 32 bytes
    out[0] = smem[0];
}
static void run_shared_overrun() {
    int *out = nullptr;
    cudaMalloc(&out, sizeof(int));
    SIMT_LAUNCH(shared_overrun, 1, 33, 32, 0, out);
}
static void test_dynamic_shared_overrun_is_caught(void **state) {
    (void)state;
#ifdef SIMT_ASAN
    int status = 0;
    std::string err = run_child(run_shared_overrun, &status);
    assert_false(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    expect_in(err, "heap-buffer-overflow");
    expect_in(err, "kernel shared_overrun, block (0,0,0), thread (32,0,0)");
#else
    (void)run_shared_overrun;
    skip(); // needs ASan: make ... SANITIZE=address
#endif
}

// ---- warp primitives

static void check_warp_sums(int threads) {
    const int blocks = 3, n = blocks * threads;
    std::vector<int> in(n);
    std::vector<float> fin(n);
    for (int i = 0; i < n; i++) {
        in[i] = random_nonzero(100000);
        fin[i] = (float)random_nonzero(1000); // integers: float sums are exact
    }
    int *d_in = device_copy(in), *d_out = device_copy(in);
    float *d_fin = device_copy(fin), *d_fout = device_copy(fin);
    SIMT_LAUNCH(warp_sum_xor, blocks, threads, 0, 0, d_in, d_out);
    SIMT_LAUNCH(warp_sum_down, blocks, threads, 0, 0, d_fin, d_fout);
    std::vector<int> out = host_copy(d_out, n);
    std::vector<float> fout = host_copy(d_fout, n);
    int warps_per_block = (threads + 31) / 32;
    for (int b = 0; b < blocks; b++)
        for (int w = 0; w < warps_per_block; w++) {
            int first = b * threads + w * 32, lanes = std::min(32, threads - w * 32);
            int sum = 0;
            float fsum = 0;
            for (int l = 0; l < lanes; l++)
                sum += in[first + l], fsum += fin[first + l];
            assert_int_equal(out[first], sum);
            if (lanes == 32) // a butterfly leaves the total in every lane of a full warp
                for (int l = 1; l < 32; l++)
                    assert_int_equal(out[first + l], sum);
            assert_true(fout[b * warps_per_block + w] == fsum);
        }
    cudaFree(d_in), cudaFree(d_out), cudaFree(d_fin), cudaFree(d_fout);
}

static void test_warp_shuffle_reductions(void **state) {
    (void)state;
    for (int threads : {32, 64, 96, 48, 100, 7})
        check_warp_sums(threads);
}

// The lane each shuffle reads, from the CUDA programming guide's words rather than PTX's
// formulas (which simt_warp.h implements).
static int expected_source(int mode, int lane, int arg, int width) {
    int segment = lane / width * width;
    switch (mode) {
    case 0: return segment + arg % width;
    case 1: return lane % width >= arg ? lane - arg : lane;            // low lanes keep theirs
    case 2: return lane % width + arg < width ? lane + arg : lane;     // high lanes keep theirs
    default: return (lane ^ arg) / width > lane / width ? lane : lane ^ arg; // no later group
    }
}

static void test_shuffle_edges_and_widths(void **state) {
    (void)state;
    const int cases[][3] = {{0, 5, 32},  {0, 37, 16}, {0, 3, 8},  {1, 3, 32},  {1, 1, 32},
                            {1, 3, 8},   {1, 16, 32}, {2, 5, 32}, {2, 1, 16},  {2, 2, 4},
                            {3, 1, 32},  {3, 16, 32}, {3, 16, 8}, {3, 4, 8},   {3, 31, 32},
                            {0, 31, 32}, {2, 31, 32}, {1, 31, 32}};
    for (int threads : {32, 64, 48}) {
        int *d_out = nullptr;
        cudaMalloc(&d_out, threads * sizeof(int));
        for (const auto &c : cases) {
            SIMT_LAUNCH(shuffle_probe, 1, threads, 0, 0, d_out, c[0], c[1], c[2]);
            std::vector<int> out = host_copy(d_out, threads);
            for (int t = 0; t < threads; t++) {
                int base = t / 32 * 32, src = base + expected_source(c[0], t % 32, c[1], c[2]);
                int want = src < threads ? src : -1; // a lane missing from a partial warp: poison
                if (out[t] != want)
                    fail_msg("%d threads, mode %d arg %d width %d: thread %d got %d, want %d",
                             threads, c[0], c[1], c[2], t, out[t], want);
            }
        }
        cudaFree(d_out);
    }
}

static void test_votes_honour_the_mask(void **state) {
    (void)state;
    const unsigned masks[] = {0xffffffffu, 0x0000ffffu, 0xaaaaaaaau, 0x1u, 0x80000001u};
    for (int threads : {64, 40}) {
        for (unsigned mask : masks) {
            for (int density : {0, 1, 2, 3}) { // none, random, all, all but one
                std::vector<int> pred(threads);
                for (int t = 0; t < threads; t++)
                    pred[t] = density == 0 ? 0 : density == 1 ? (int)(rng() & 1) * 7
                                                : density == 2 ? 1 : t % 32 != 31 && t % 32 != 0;
                int *d_pred = device_copy(pred);
                std::vector<unsigned> ballot0(threads, 0xdeadu);
                std::vector<int> flag0(threads, -5);
                unsigned *d_ballot = device_copy(ballot0);
                int *d_any = device_copy(flag0), *d_all = device_copy(flag0);
                SIMT_LAUNCH(votes, 1, threads, 0, 0, d_pred, mask, d_ballot, d_any, d_all);
                std::vector<unsigned> ballot = host_copy(d_ballot, threads);
                std::vector<int> any = host_copy(d_any, threads), all = host_copy(d_all, threads);
                for (int t = 0; t < threads; t++) {
                    int base = t / 32 * 32, lane = t % 32;
                    if (!(mask >> lane & 1)) {
                        assert_int_equal(ballot[t], 0xdeadu);
                        continue;
                    }
                    unsigned want = 0, present = 0;
                    for (int l = 0; l < 32 && base + l < threads; l++)
                        if (mask >> l & 1) {
                            present |= 1u << l;
                            want |= (unsigned)(pred[base + l] != 0) << l;
                        }
                    assert_int_equal(ballot[t], want);
                    assert_int_equal(any[t], want != 0);
                    assert_int_equal(all[t], want == present);
                }
                cudaFree(d_pred), cudaFree(d_ballot), cudaFree(d_any), cudaFree(d_all);
            }
        }
    }
}

static void test_reduce_sync(void **state) {
    (void)state;
    const int threads = 80; // a partial third warp of 16
    std::vector<int> in(threads);
    for (int t = 0; t < threads; t++)
        in[t] = random_nonzero(1 << 20);
    int *d_in = device_copy(in), *d_out = nullptr;
    cudaMalloc(&d_out, 3 * 6 * sizeof(int));
    SIMT_LAUNCH(warp_reduce_ops, 1, threads, 0, 0, d_in, d_out);
    std::vector<int> out = host_copy(d_out, 18);
    for (int w = 0; w < 3; w++) {
        int sum = 0, mn = INT_MAX, mx = INT_MIN;
        unsigned umn = UINT_MAX, umx = 0;
        for (int t = w * 32; t < std::min(threads, w * 32 + 32); t++) {
            sum += in[t], mn = std::min(mn, in[t]), mx = std::max(mx, in[t]);
            umn = std::min(umn, (unsigned)in[t]), umx = std::max(umx, (unsigned)in[t]);
        }
        const int *r = &out[w * 6];
        assert_int_equal(r[0], sum);
        assert_int_equal(r[1], mn);
        assert_int_equal(r[2], mx);
        assert_int_equal(r[3], sum);
        assert_int_equal((unsigned)r[4], umn);
        assert_int_equal((unsigned)r[5], umx);
    }
    cudaFree(d_in), cudaFree(d_out);
}

// ---- indices and atomics

static void test_every_thread_of_a_3d_launch_runs_once(void **state) {
    (void)state;
    const dim3 shapes[][2] = {{dim3(3, 2, 2), dim3(4, 3, 2)},
                              {dim3(2, 1, 3), dim3(5, 1, 7)},
                              {dim3(1, 4, 1), dim3(33, 2, 1)}};
    for (const auto &s : shapes) {
        dim3 g = s[0], b = s[1];
        unsigned per_block = b.x * b.y * b.z, n = g.x * g.y * g.z * per_block;
        std::vector<unsigned> zeros(6 * n, 0);
        unsigned *d_seen = device_copy(zeros), *d_where = device_copy(zeros);
        SIMT_LAUNCH(record_indices, g, b, 0, 0, d_seen, d_where);
        std::vector<unsigned> seen = host_copy(d_seen, n), where = host_copy(d_where, 6 * n);
        for (unsigned id = 0; id < n; id++) {
            assert_int_equal(seen[id], 1);
            unsigned block = id / per_block, thread = id % per_block;
            const unsigned want[6] = {block % g.x, block / g.x % g.y, block / (g.x * g.y),
                                      thread % b.x, thread / b.x % b.y, thread / (b.x * b.y)};
            for (int k = 0; k < 6; k++)
                assert_int_equal(where[6 * id + k], want[k]);
        }
        cudaFree(d_seen), cudaFree(d_where);
    }
}

static void test_atomics_from_many_threads(void **state) {
    (void)state;
    const int blocks = 7, threads = 96, n = blocks * threads;
    AtomicTotals init{};
    init.max_i = INT_MIN, init.min_i = INT_MAX, init.exch_i = -1, init.and_u = ~0u;
    init.add_ull = 5;
    AtomicTotals *d = nullptr;
    cudaMalloc(&d, sizeof init);
    cudaMemcpy(d, &init, sizeof init, cudaMemcpyHostToDevice);
    SIMT_LAUNCH(atomics, blocks, threads, 0, 0, d);
    AtomicTotals t{};
    cudaMemcpy(&t, d, sizeof t, cudaMemcpyDeviceToHost);
    assert_int_equal(t.add_i, n);
    assert_int_equal(t.sub_i, -2 * n);
    assert_int_equal(t.max_i, n - 1);
    assert_int_equal(t.min_i, -(n - 1));
    assert_int_equal(t.cas_i, n);
    assert_int_equal(t.add_u, 3u * n);
    assert_int_equal(t.or_u, 0xffffffffu);
    assert_int_equal(t.and_u, 0u);
    assert_int_equal(t.inc_u, (unsigned)(n % 10));
    assert_true(t.add_ull == 5 + ((unsigned long long)n << 33));
    assert_true(t.add_f == 0.5f * n);
    // every id went in once and came out once, plus the initial -1
    assert_true(t.exch_sum + t.exch_i == -1 + (long long)n * (n - 1) / 2);
    cudaFree(d);
}

// ---- half and bfloat16

// Decodes a half from its fields, independently of simt_fp16.h.
static double half_reference(uint16_t h) {
    int exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
    double v = exp == 0 ? std::ldexp(mant, -24) : std::ldexp(1024 + mant, exp - 25);
    if (exp == 0x1f)
        v = mant ? NAN : INFINITY;
    return (h & 0x8000) ? -v : v;
}

static void test_half_patterns_round_trip(void **state) {
    (void)state;
    for (unsigned u = 0; u < 0x10000; u++) {
        __half h = __ushort_as_half((unsigned short)u);
        float f = __half2float(h);
        double ref = half_reference((uint16_t)u);
        if (std::isnan(ref)) {
            assert_true(std::isnan(f));
            assert_true(__hisnan(__float2half(f)));
            continue;
        }
        assert_true((double)f == ref);
        assert_int_equal(std::signbit(f), (u & 0x8000) != 0);
        assert_int_equal(__half_as_ushort(__float2half(f)), u);
    }
}

static void expect_half(float f, unsigned want) {
    unsigned got = __half_as_ushort(__float2half(f));
    if (got != want)
        fail_msg("__float2half(%a) = 0x%04x, want 0x%04x", (double)f, got, want);
}

// Each midpoint between neighbouring halves rounds to the even one; a float ulp either side
// rounds to the nearer. Covers subnormals (the first pair's midpoint is 2^-25) and overflow.
static void test_float_to_half_rounds_to_nearest_even(void **state) {
    (void)state;
    for (unsigned h = 0; h < 0x7c00; h++) {
        float lo = (float)half_reference((uint16_t)h);
        float mid = h == 0x7bff ? 65520.0f : (lo + (float)half_reference((uint16_t)(h + 1))) / 2;
        unsigned even = (h & 1) ? h + 1 : h;
        for (unsigned sign : {0u, 0x8000u}) {
            float s = sign ? -1.0f : 1.0f;
            expect_half(s * lo, sign | h);
            expect_half(s * mid, sign | even);
            expect_half(s * std::nextafter(mid, 0.0f), sign | h);
            expect_half(s * std::nextafter(mid, INFINITY), sign | (h + 1));
        }
    }
    expect_half(1e10f, 0x7c00);
    expect_half(-INFINITY, 0xfc00);
    expect_half(1e-30f, 0);
    expect_half(-1e-30f, 0x8000);
    assert_true(__hisnan(__float2half(NAN)));
#if defined(__aarch64__) || (defined(__x86_64__) && defined(__FLT16_MAX__))
    // the compiler's own conversion, on random floats across the whole range
#ifdef __aarch64__
    typedef __fp16 compiler_half; // IEEE format unless -mfp16-format=alternative
#else
    typedef _Float16 compiler_half;
#endif
    for (int i = 0; i < 200000; i++) {
        float f;
        uint32_t bits = rng();
        std::memcpy(&f, &bits, sizeof f);
        if (std::isnan(f))
            continue;
        compiler_half r = (compiler_half)f;
        uint16_t want;
        std::memcpy(&want, &r, sizeof want);
        expect_half(f, want);
    }
#endif
}

static void test_bfloat16_conversions(void **state) {
    (void)state;
    for (unsigned u = 0; u < 0x10000; u++) {
        __nv_bfloat16 b = __ushort_as_bfloat16((unsigned short)u);
        float f = __bfloat162float(b);
        uint32_t bits;
        std::memcpy(&bits, &f, sizeof bits);
        assert_int_equal(bits, u << 16);
        unsigned back = __bfloat16_as_ushort(__float2bfloat16(f));
        if (std::isnan(f))
            assert_true((back & 0x7fff) > 0x7f80);
        else
            assert_int_equal(back, u);
    }
    for (unsigned b = 0; b < 0x7f80; b++) // up to the midpoint between the largest and inf
        for (unsigned sign : {0u, 0x8000u}) {
            uint32_t mid = ((sign | b) << 16) | 0x8000;
            unsigned even = (b & 1) ? b + 1 : b;
            const uint32_t probes[3][2] = {{mid, even}, {mid - 1, b}, {mid + 1, b + 1}};
            for (const auto &p : probes) {
                float f;
                std::memcpy(&f, &p[0], sizeof f);
                assert_int_equal(__bfloat16_as_ushort(__float2bfloat16_rn(f)), sign | p[1]);
            }
        }
    assert_int_equal(__bfloat16_as_ushort(__float2bfloat16(NAN)) & 0x7fc0, 0x7fc0);
}

// The conversions as a kernel uses them, with the __half2 helpers.
static void test_conversions_in_a_kernel(void **state) {
    (void)state;
    const int n = 300;
    std::vector<float> in(n);
    for (int i = 0; i < n; i++)
        in[i] = std::ldexp((float)random_nonzero(5000), (int)(rng() % 40) - 30);
    float *d_in = device_copy(in), *d_fh = device_copy(in), *d_fb = device_copy(in);
    std::vector<unsigned short> zeros(n, 0);
    unsigned short *d_h = device_copy(zeros), *d_b = device_copy(zeros);
    SIMT_LAUNCH(convert_halves, 3, 128, 0, 0, d_in, d_h, d_fh, d_b, d_fb, n);
    std::vector<unsigned short> h = host_copy(d_h, n), b = host_copy(d_b, n);
    std::vector<float> fh = host_copy(d_fh, n), fb = host_copy(d_fb, n);
    for (int i = 0; i < n; i++) {
        assert_int_equal(h[i], simt::detail::float_to_half_bits(in[i]));
        assert_true(fh[i] == (float)half_reference(h[i]));
        assert_int_equal(b[i], simt::detail::float_to_bfloat16_bits(in[i]));
        assert_true(fb[i] == __bfloat162float(__ushort_as_bfloat16(b[i])));
    }
    cudaFree(d_in), cudaFree(d_fh), cudaFree(d_fb), cudaFree(d_h), cudaFree(d_b);
}

// The integer and rounding intrinsics quantized kernels lean on, against values worked by hand
// from the CUDA math API and PTX (prmt, dp4a, cvt.rni) documentation.
static void test_intrinsics(void **state) {
    (void)state;
    assert_int_equal(__byte_perm(0x33221100u, 0x77665544u, 0x5140u), 0x55114400u);
    assert_int_equal(__byte_perm(0x33221100u, 0x77665544u, 0x7777u), 0x77777777u);
    // bytes of a: -2, 2, -1, 1; of b: 1, -1, -128, 127
    assert_int_equal(__dp4a((int)0x01ff02feu, (int)0x7f80ff01u, 10), 10 - 2 - 2 + 128 + 127);
    assert_int_equal(__dp4a(0x01ff02feu, 0x7f80ff01u, 10u),
                     10u + 0xfe * 1 + 2 * 0xff + 0xff * 0x80 + 1 * 0x7f);
    // the 32-bit accumulation wraps, both ways
    assert_int_equal(__dp4a(0x7f7f7f7f, 0x7f7f7f7f, INT_MAX), (int)(0x7fffffffu + 4u * 127 * 127));
    assert_int_equal(__dp4a((int)0x80808080u, 0x7f7f7f7f, INT_MIN), (int)(0x80000000u - 4u * 128 * 127));
    const float in[] = {2.5f, 3.5f, -2.5f, -0.5f, 1e10f, -1e10f, NAN};
    const int rn[] = {2, 4, -2, 0, INT_MAX, INT_MIN, 0};
    for (int i = 0; i < 7; i++)
        assert_int_equal(__float2int_rn(in[i]), rn[i]);
    assert_int_equal(__float2int_rz(-2.7f), -2);
    assert_int_equal(__float2int_rd(-2.2f), -3);
    assert_int_equal(__float2int_ru(2.2f), 3);
    assert_int_equal(__float2uint_rn(-3.0f), 0u);
    assert_int_equal(min(-1, 1u), 1u); // CUDA compares mixed signedness as unsigned
    assert_int_equal(max(-1, 1), 1);
    assert_true(min(2.0f, NAN) == 2.0f);
    assert_int_equal(__clz(0), 32);
    assert_int_equal(__clz(1), 31);
    assert_int_equal(__ffs(0), 0);
    assert_int_equal(__ffs(8), 4);
    assert_int_equal(__popc(0xf0f0u), 8);
    assert_int_equal(__brev(1u), 0x80000000u);
    assert_int_equal(__umulhi(0x80000000u, 6u), 3u);
    unsigned counter = 7;
    assert_int_equal(atomicDec(&counter, 9u), 7u);
    assert_int_equal(counter, 6u);
    counter = 0;
    atomicDec(&counter, 9u); // wraps to the limit
    assert_int_equal(counter, 9u);
    assert_true(__frsqrt_rn(4.0f) == 0.5f);
    assert_true(__saturatef(1.5f) == 1.0f && __saturatef(-1.0f) == 0.0f);
}

// ---- global loads of every width (simt_loads.h)

// Thread i loads 2, 4, 8 and 16 bytes at offset 16 i of a byte buffer and stores them as read.
__global__ void wide_loads(const uint8_t *src, uint8_t *dst) {
    const size_t at = 16 * (size_t)threadIdx.x;
    const unsigned short h = __ldg((const unsigned short *)(src + at));
    const unsigned w = __ldg((const unsigned *)(src + at + 4));
    const uint2 d = __ldg((const uint2 *)(src + at + 8));
    const uint4 q = __ldg((const uint4 *)(src + at + 256));
    std::memcpy(dst + at, &h, 2);
    std::memcpy(dst + at + 4, &w, 4);
    std::memcpy(dst + at + 8, &d, 8);
    std::memcpy(dst + at + 256, &q, 16);
}

// Every width returns the bytes at its address, little-endian, as the device's loads do.
static void test_loads_of_every_width(void **state) {
    (void)state;
    std::vector<uint8_t> bytes(512), expect(512, 0);
    for (auto &b : bytes)
        b = (uint8_t)rng();
    for (size_t t = 0; t < 16; t++) {
        std::memcpy(&expect[16 * t], &bytes[16 * t], 2);
        std::memcpy(&expect[16 * t + 4], &bytes[16 * t + 4], 12);
        std::memcpy(&expect[16 * t + 256], &bytes[16 * t + 256], 16);
    }
    uint8_t *src = device_copy(bytes), *dst = device_copy(std::vector<uint8_t>(512, 0));
    SIMT_LAUNCH(wide_loads, 1, 16, 0, 0, src, dst);
    assert_memory_equal(host_copy(dst, 512).data(), expect.data(), 512);
    cudaFree(src);
    cudaFree(dst);
}

// A 16-byte load at a 2-byte aligned address (an 18-byte block's quants, read as if aligned):
// the device faults, so the emulation aborts instead of reading it.
__global__ void misaligned_vector_load(const uint8_t *src, uint4 *dst) {
    dst[threadIdx.x] = __ldg((const uint4 *)(src + 18 * threadIdx.x + 2));
}
static void run_misaligned_vector_load() {
    uint8_t *src = nullptr;
    uint4 *dst = nullptr;
    cudaMalloc(&src, 64 * 18);
    cudaMalloc(&dst, 64 * sizeof(uint4));
    SIMT_LAUNCH(misaligned_vector_load, 1, 32, 0, 0, src, dst);
}
__global__ void misaligned_word_load(const uint8_t *src, unsigned *dst) {
    dst[threadIdx.x] = __ldg((const unsigned *)(src + 4 * threadIdx.x + 2));
}
static void run_misaligned_word_load() {
    uint8_t *src = nullptr;
    unsigned *dst = nullptr;
    cudaMalloc(&src, 256);
    cudaMalloc(&dst, 64 * sizeof(unsigned));
    SIMT_LAUNCH(misaligned_word_load, 1, 32, 0, 0, src, dst);
}
static void test_misaligned_loads_abort(void **state) {
    (void)state;
    expect_abort(run_misaligned_vector_load, "kernel misaligned_vector_load, block (0,0,0), thread (0,0,0)",
                 "misaligned 16-byte load");
    expect_abort(run_misaligned_word_load, "kernel misaligned_word_load", "misaligned 4-byte load");
}

// ---- device rounding

// Each transcendental of a kernel, on 4096 arguments, as the device may return it.
__global__ void transcendentals(const float *x, float *out, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    const float v = x[i], a = fabsf(v) + 0.01f;
    float *o = out + 9 * i;
    o[0] = expf(v), o[1] = exp2f(v), o[2] = logf(a), o[3] = log2f(a), o[4] = sinf(v);
    o[5] = cosf(v), o[6] = tanhf(v), o[7] = rsqrtf(a), o[8] = __expf(v);
}

static int64_t float_order(float f) { // consecutive floats map to consecutive integers
    int32_t i;
    std::memcpy(&i, &f, sizeof i);
    return i < 0 ? -(int64_t)(i & 0x7fffffff) : i;
}

// The results are within CUDA's documented bounds of the correctly rounded value (computed here
// in double), the same on every run, and not always libm's: a check that a kernel's expf equals
// the host's (what "bit for bit the CPU's" through a transcendental would need) fails here, as
// it would on a GPU, where before it passed by construction.
static void test_transcendentals_move_within_cuda_ulps(void **state) {
    (void)state;
    const int n = 4096;
    std::vector<float> x(n), out(9 * (size_t)n), again(9 * (size_t)n);
    for (int i = 0; i < n; i++)
        x[i] = (float)(random_nonzero(2001) - 1001) * 0.0173f;
    for (std::vector<float> *o : {&out, &again})
        SIMT_LAUNCH(transcendentals, (n + 127) / 128, 128, 0, 0, x.data(), o->data(), n);
    assert_memory_equal(out.data(), again.data(), out.size() * sizeof(float));
    const int bound[9] = {2, 2, 1, 1, 2, 2, 2, 2, 0};
    size_t moved[9] = {0};
    for (int i = 0; i < n; i++) {
        const double v = x[i], a = (double)(std::fabs(x[i]) + 0.01f); // the kernel's float argument
        const double exact[9] = {std::exp(v), std::exp2(v), std::log(a), std::log2(a), std::sin(v),
                                 std::cos(v), std::tanh(v), 1.0 / std::sqrt(a), std::exp(v)};
        for (int f = 0; f < 9; f++) {
            const float nearest = (float)exact[f], got = out[9 * (size_t)i + f];
            const int64_t ulps = std::llabs(float_order(got) - float_order(nearest));
            const int64_t allowed = f == 8 ? 2 + (int64_t)std::floor(std::fabs(1.173 * v)) : bound[f];
            if (ulps > allowed)
                fail_msg("function %d at %a: %a is %lld ulps from %a (bound %lld)", f, x[i], got, (long long)ulps,
                         nearest, (long long)allowed);
            moved[f] += got != nearest;
        }
    }
    for (int f = 0; f < 9; f++)
        assert_true(moved[f] > (size_t)n / 4); // most results are not the correctly rounded one
}

// a * b + c: never contracted (the emulated build has -ffp-contract=off, the device build
// -fmad=false), so a kernel that needs the fused result must say __fmaf_rn. The low part of a
// product, a * b - p with p = a * b rounded, is 0 unfused and the exact error fused.
__global__ void product_error(const float *a, const float *b, float *fused, float *unfused) {
    const int i = threadIdx.x;
    const float p = a[i] * b[i];
    fused[i] = __fmaf_rn(a[i], b[i], -p);
    unfused[i] = a[i] * b[i] - p;
}

static void test_fma_only_when_written(void **state) {
    (void)state;
    std::vector<float> a(32), b(32), fused(32), unfused(32);
    for (int i = 0; i < 32; i++)
        a[i] = 1.0f + (float)random_nonzero(1 << 20) * 0x1p-21f, b[i] = 1.0f + (float)random_nonzero(1 << 20) * 0x1p-22f;
    SIMT_LAUNCH(product_error, 1, 32, 0, 0, a.data(), b.data(), fused.data(), unfused.data());
    size_t nonzero = 0;
    for (int i = 0; i < 32; i++) {
        assert_true(unfused[i] == 0.0f);
        assert_true((double)fused[i] == (double)a[i] * (double)b[i] - (double)(a[i] * b[i]));
        nonzero += fused[i] != 0.0f;
    }
    assert_true(nonzero > 16);
}

// ---- host glue and launch limits

static void test_template_kernel_and_big_shared(void **state) {
    (void)state;
    std::vector<int> out(45, 0);
    assert_int_equal(sample_fill_seven(out.data(), 45), cudaSuccess);
    for (int v : out)
        assert_int_equal(v, 7);
    std::vector<unsigned> in(1024);
    unsigned sum = 0, got = 0;
    for (unsigned &v : in)
        v = (unsigned)random_nonzero(100), sum += v;
    assert_int_equal(sample_big_shared(in.data(), &got, true), cudaSuccess);
    assert_int_equal(got, sum);
}

// A captured launch and copy run only when the graph is launched, with the launch's arguments
// as captured and the copy's source as it is then; each replay runs them again.
static void test_stream_capture_and_graph_replay(void **state) {
    (void)state;
    cudaStream_t stream;
    assert_int_equal(cudaStreamCreate(&stream), cudaSuccess);
    unsigned *in = nullptr, *out = nullptr;
    assert_int_equal(cudaMalloc(&in, 64 * sizeof *in), cudaSuccess);
    assert_int_equal(cudaMalloc(&out, sizeof *out), cudaSuccess);
    std::vector<unsigned> host(64);
    *out = 12345;
    assert_int_equal(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
    cudaStreamCaptureStatus status;
    assert_int_equal(cudaStreamIsCapturing(stream, &status), cudaSuccess);
    assert_int_equal(status, cudaStreamCaptureStatusActive);
    assert_int_equal(cudaMemcpyAsync(in, host.data(), 64 * sizeof *in, cudaMemcpyHostToDevice, stream), cudaSuccess);
    int n = 64;
    SIMT_LAUNCH(block_sum, 1, 64, 64 * sizeof(unsigned), stream, in, out, n);
    n = 1; // the graph keeps the value the launch converted
    cudaGraph_t graph;
    assert_int_equal(cudaStreamEndCapture(stream, &graph), cudaSuccess);
    assert_int_equal(*out, 12345u); // nothing ran during the capture
    cudaGraphExec_t exec;
    assert_int_equal(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
    for (int replay = 0; replay < 3; replay++) {
        unsigned sum = 0;
        for (unsigned &v : host)
            v = (unsigned)random_nonzero(1000), sum += v;
        assert_int_equal(cudaGraphLaunch(exec, stream), cudaSuccess);
        assert_int_equal(cudaStreamSynchronize(stream), cudaSuccess);
        assert_int_equal(*out, sum);
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cudaFree(in);
    cudaFree(out);
    cudaStreamDestroy(stream);
}

// What CUDA forbids inside a capture (allocation, synchronisation) fails and invalidates it.
static void test_capture_refuses_allocation_and_sync(void **state) {
    (void)state;
    cudaStream_t stream;
    assert_int_equal(cudaStreamCreate(&stream), cudaSuccess);
    for (int what = 0; what < 2; what++) {
        assert_int_equal(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
        void *p = nullptr;
        if (what == 0)
            assert_int_equal(cudaMalloc(&p, 16), cudaErrorStreamCaptureUnsupported);
        else
            assert_int_equal(cudaStreamSynchronize(stream), cudaErrorStreamCaptureUnsupported);
        assert_null(p);
        cudaGraph_t graph;
        assert_int_equal(cudaStreamEndCapture(stream, &graph), cudaErrorStreamCaptureInvalidated);
        assert_null(graph);
        cudaGetLastError();
    }
    void *p = nullptr; // after the capture, allocation works again
    assert_int_equal(cudaMalloc(&p, 16), cudaSuccess);
    cudaFree(p);
    cudaStreamDestroy(stream);
}

// Across threads, as the runtime documents capture: while a blocking stream (cudaStreamCreate)
// captures, work on the legacy stream from another thread (a synchronous copy, a launch on
// stream 0) fails with cudaErrorStreamCaptureImplicit and invalidates the capture, even in
// thread-local mode; a non-blocking stream's capture is not affected.
static void test_legacy_stream_against_blocking_capture(void **state) {
    (void)state;
    unsigned *dev = nullptr;
    assert_int_equal(cudaMalloc(&dev, 64 * sizeof *dev), cudaSuccess);
    std::vector<unsigned> host(64, 1);
    for (int non_blocking = 0; non_blocking < 2; non_blocking++) {
        cudaStream_t stream;
        assert_int_equal(cudaStreamCreateWithFlags(&stream, non_blocking ? cudaStreamNonBlocking : cudaStreamDefault),
                         cudaSuccess);
        assert_int_equal(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
        cudaError_t copy = cudaSuccess, launch = cudaSuccess;
        std::thread other([&] {
            copy = cudaMemcpy(dev, host.data(), 64 * sizeof *dev, cudaMemcpyHostToDevice);
            SIMT_LAUNCH(fill_value<1>, 1, 32, 0, 0, (int *)dev);
            launch = cudaGetLastError();
        });
        other.join();
        cudaGraph_t graph = nullptr;
        const cudaError_t end = cudaStreamEndCapture(stream, &graph);
        if (non_blocking) {
            assert_int_equal(copy, cudaSuccess);
            assert_int_equal(launch, cudaSuccess);
            assert_int_equal(end, cudaSuccess);
            cudaGraphDestroy(graph);
        } else {
            assert_int_equal(copy, cudaErrorStreamCaptureImplicit);
            assert_int_equal(launch, cudaErrorStreamCaptureImplicit);
            assert_int_equal(end, cudaErrorStreamCaptureInvalidated);
            assert_null(graph);
        }
        cudaGetLastError();
        cudaStreamDestroy(stream);
    }
    cudaFree(dev);
}

// A global-mode capture forbids unsafe calls (cudaMalloc, a synchronous copy) to every thread
// and is invalidated by them; a thread-local one only to its own thread; a relaxed one to none.
static void test_capture_modes_across_threads(void **state) {
    (void)state;
    const cudaStreamCaptureMode modes[3] = {cudaStreamCaptureModeGlobal, cudaStreamCaptureModeThreadLocal,
                                            cudaStreamCaptureModeRelaxed};
    for (cudaStreamCaptureMode mode : modes) {
        cudaStream_t stream;
        assert_int_equal(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
        assert_int_equal(cudaStreamBeginCapture(stream, mode), cudaSuccess);
        cudaError_t other_malloc = cudaSuccess;
        std::thread other([&] {
            void *p = nullptr;
            other_malloc = cudaMalloc(&p, 16);
            cudaFree(p);
            cudaGetLastError();
        });
        other.join();
        void *own = nullptr;
        const cudaError_t own_malloc = cudaMalloc(&own, 16);
        cudaFree(own);
        cudaGraph_t graph = nullptr;
        const cudaError_t end = cudaStreamEndCapture(stream, &graph);
        assert_int_equal(other_malloc, mode == cudaStreamCaptureModeGlobal ? cudaErrorStreamCaptureUnsupported : cudaSuccess);
        assert_int_equal(own_malloc, mode == cudaStreamCaptureModeRelaxed ? cudaSuccess : cudaErrorStreamCaptureUnsupported);
        assert_int_equal(end, mode == cudaStreamCaptureModeRelaxed ? cudaSuccess : cudaErrorStreamCaptureInvalidated);
        if (graph)
            cudaGraphDestroy(graph);
        cudaGetLastError();
        cudaStreamDestroy(stream);
    }
}

// cudaMemcpyAsync from pageable host memory (neither cudaMallocHost'd nor cudaHostRegister'd)
// is counted: CUDA stages it synchronously. Pinned, device-to-device and device-to-host copies
// are not.
static void test_pageable_async_copies_counted(void **state) {
    (void)state;
    cudaStream_t stream;
    assert_int_equal(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
    unsigned long long *count = simt_pageable_async_copies();
    const unsigned long long before = *count;
    std::vector<char> pageable(256), registered(256);
    char *pinned = nullptr, *dev = nullptr, *dev2 = nullptr;
    assert_int_equal(cudaMallocHost((void **)&pinned, 256), cudaSuccess);
    assert_int_equal(cudaHostRegister(registered.data(), registered.size(), cudaHostRegisterDefault), cudaSuccess);
    assert_int_equal(cudaMalloc(&dev, 256), cudaSuccess);
    assert_int_equal(cudaMalloc(&dev2, 256), cudaSuccess);
    assert_int_equal(cudaMemcpyAsync(dev, pinned + 8, 64, cudaMemcpyHostToDevice, stream), cudaSuccess);
    assert_int_equal(cudaMemcpyAsync(registered.data() + 100, dev, 64, cudaMemcpyDeviceToHost, stream), cudaSuccess);
    assert_int_equal(cudaMemcpyAsync(dev2, dev, 64, cudaMemcpyDeviceToDevice, stream), cudaSuccess);
    assert_int_equal(*count, before);
    assert_int_equal(cudaMemcpyAsync(dev, pageable.data(), 64, cudaMemcpyHostToDevice, stream), cudaSuccess);
    assert_int_equal(cudaMemcpyAsync(dev2, pageable.data() + 3, 64, cudaMemcpyDefault, stream), cudaSuccess);
    assert_int_equal(cudaMemcpyAsync(pageable.data(), dev, 64, cudaMemcpyDefault, stream), cudaSuccess);
    assert_int_equal(*count, before + 2);
    assert_int_equal(cudaHostUnregister(registered.data()), cudaSuccess);
    assert_int_equal(cudaMemcpyAsync(dev, registered.data(), 64, cudaMemcpyHostToDevice, stream), cudaSuccess);
    assert_int_equal(*count, before + 3);
    cudaFreeHost(pinned);
    cudaFree(dev);
    cudaFree(dev2);
    cudaStreamDestroy(stream);
}

static void run_big_shared_without_attribute() {
    std::vector<unsigned> in(1024, 1);
    unsigned out;
    sample_big_shared(in.data(), &out, false);
}
static void run_empty_grid() {
    int *out = nullptr;
    cudaMalloc(&out, 4);
    SIMT_LAUNCH(fill_value<1>, 0, 32, 0, 0, out);
}
static void test_launch_limits_abort(void **state) {
    (void)state;
    expect_abort(run_big_shared_without_attribute, "kernel block_sum",
                 "cudaFuncSetAttribute");
    expect_abort(run_empty_grid, "kernel fill_value<1>", "invalid grid (0,1,1)");
}

// ---- death tests: broken kernels abort, naming the kernel

static void run_divergent_barrier() {
    int *out = nullptr;
    cudaMalloc(&out, 64 * sizeof(int));
    SIMT_LAUNCH(divergent_barrier, 1, 32, 0, 0, out);
}
static void run_barrier_sites_differ() {
    int *out = nullptr;
    cudaMalloc(&out, 64 * sizeof(int));
    SIMT_LAUNCH(barrier_sites_differ, 1, 32, 0, 0, out);
}
static void run_shuffle_with_exited_lane() {
    int *out = nullptr;
    cudaMalloc(&out, 64 * sizeof(int));
    SIMT_LAUNCH(shuffle_with_exited_lane, 2, 64, 0, 0, out);
}
static void run_shuffle_waits_for_barrier() {
    int *out = nullptr;
    cudaMalloc(&out, 64 * sizeof(int));
    SIMT_LAUNCH(shuffle_waits_for_barrier, 1, 32, 0, 0, out);
}

static void test_divergent_barrier_aborts(void **state) {
    (void)state;
    expect_abort(run_divergent_barrier, "kernel divergent_barrier, block (0,0,0)",
                 "divergent __syncthreads");
    expect_abort(run_barrier_sites_differ, "kernel barrier_sites_differ",
                 "wait at different __syncthreads");
}

static void test_warp_primitive_with_exited_lane_aborts(void **state) {
    (void)state;
    expect_abort(run_shuffle_with_exited_lane, "kernel shuffle_with_exited_lane, block (0,0,0)",
                 "waits for lane 5 (thread (5,0,0)), which has exited");
    expect_abort(run_shuffle_waits_for_barrier, "kernel shuffle_waits_for_barrier",
                 "deadlock: lane 1 waits in __shfl_xor_sync for lane 0");
}

// Emulation-only: a deep recursion runs into the guard page below its coroutine stack.
__device__ int recurse(int depth) {
    volatile char frame[512];
    frame[depth % 512] = (char)depth;
    return depth > 0 ? recurse(depth - 1) + frame[depth % 512] : 0;
}
__global__ void stack_overflow(int *out) { out[threadIdx.x] = recurse(1 << 20); }
static void run_stack_overflow() {
    int *out = nullptr;
    cudaMalloc(&out, 64 * sizeof(int));
    SIMT_LAUNCH(stack_overflow, 1, 2, 0, 0, out);
}
static void test_stack_overflow_faults(void **state) {
    (void)state;
    int status = 0;
    std::string err = run_child(run_stack_overflow, &status);
    // (the child's SIGSEGV is back to the default, so the emulation's handler reports, ASan or not)
    if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGSEGV)
        fail_msg("child did not fault (status 0x%x); stderr:\n%s", status, err.c_str());
    expect_in(err, "kernel stack_overflow, block (0,0,0), thread (0,0,0)");
    expect_in(err, "thread stack overflow");
}

// cp.async (simt_async.h): a copy's destination holds its bytes only after the wait that
// completes its commit group, not after a barrier alone; waiting for all but the newest group
// completes the older one only.
static void test_async_copy_visible_only_after_its_wait(void **state) {
    (void)state;
    const int threads = 128;
    std::vector<unsigned long long> in(2 * threads), out(2 * threads);
    for (unsigned long long &v : in)
        v = (unsigned long long)rng() << 32 | rng();
    auto stage_equal = [&](int s) {
        for (int i = 0; i < threads; i++)
            if (out[s * threads + i] != in[s * threads + (i + 1) % threads])
                return false;
        return true;
    };
    assert_int_equal(sample_async_copy(in.data(), out.data(), threads, 2), cudaSuccess);
    assert_false(stage_equal(0)); // read before the wait: garbage
    assert_false(stage_equal(1));
    assert_int_equal(sample_async_copy(in.data(), out.data(), threads, 1), cudaSuccess);
    assert_true(stage_equal(0)); // the older group completed
    assert_false(stage_equal(1)); // the newest one may still be in flight
    assert_int_equal(sample_async_copy(in.data(), out.data(), threads, 0), cudaSuccess);
    assert_true(stage_equal(0));
    assert_true(stage_equal(1));
}

__global__ void async_copy_misaligned(const unsigned long long *in) {
    __shared__ unsigned long long dst[2];
    __pipeline_memcpy_async(dst, (const char *)in + 4, 8); // 8 bytes need 8-byte alignment
    __pipeline_commit();
    __pipeline_wait_prior(0);
}

__global__ void async_copy_never_waited(const unsigned long long *in) {
    __shared__ unsigned long long dst[1];
    __pipeline_memcpy_async(dst, in, 8);
    __pipeline_commit();
}

static void run_misaligned_async_copy() {
    std::vector<unsigned long long> in(4, 1);
    unsigned long long *d_in = device_copy(in);
    SIMT_LAUNCH(async_copy_misaligned, 1, 1, 0, 0, d_in);
}

static void run_async_copy_never_waited() {
    std::vector<unsigned long long> in(4, 1);
    unsigned long long *d_in = device_copy(in);
    SIMT_LAUNCH(async_copy_never_waited, 2, 1, 0, 0, d_in);
}

static void test_async_copy_misuse_aborts(void **state) {
    (void)state;
    expect_abort(run_misaligned_async_copy, "async_copy_misaligned", "must be aligned to the size");
    expect_abort(run_async_copy_never_waited, "async_copy_never_waited", "never waited for");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_block_sum_needs_its_barriers),
        cmocka_unit_test(test_static_shared_is_per_block),
        cmocka_unit_test(test_barrier_votes),
        cmocka_unit_test(test_concurrent_launches_from_host_threads),
        cmocka_unit_test(test_dynamic_shared_is_garbage_each_block),
        cmocka_unit_test(test_dynamic_shared_overrun_is_caught),
        cmocka_unit_test(test_warp_shuffle_reductions),
        cmocka_unit_test(test_shuffle_edges_and_widths),
        cmocka_unit_test(test_votes_honour_the_mask),
        cmocka_unit_test(test_reduce_sync),
        cmocka_unit_test(test_every_thread_of_a_3d_launch_runs_once),
        cmocka_unit_test(test_atomics_from_many_threads),
        cmocka_unit_test(test_half_patterns_round_trip),
        cmocka_unit_test(test_float_to_half_rounds_to_nearest_even),
        cmocka_unit_test(test_bfloat16_conversions),
        cmocka_unit_test(test_conversions_in_a_kernel),
        cmocka_unit_test(test_intrinsics),
        cmocka_unit_test(test_loads_of_every_width),
        cmocka_unit_test(test_misaligned_loads_abort),
        cmocka_unit_test(test_transcendentals_move_within_cuda_ulps),
        cmocka_unit_test(test_fma_only_when_written),
        cmocka_unit_test(test_template_kernel_and_big_shared),
        cmocka_unit_test(test_stream_capture_and_graph_replay),
        cmocka_unit_test(test_capture_refuses_allocation_and_sync),
        cmocka_unit_test(test_legacy_stream_against_blocking_capture),
        cmocka_unit_test(test_capture_modes_across_threads),
        cmocka_unit_test(test_pageable_async_copies_counted),
        cmocka_unit_test(test_launch_limits_abort),
        cmocka_unit_test(test_divergent_barrier_aborts),
        cmocka_unit_test(test_warp_primitive_with_exited_lane_aborts),
        cmocka_unit_test(test_stack_overflow_faults),
        cmocka_unit_test(test_async_copy_visible_only_after_its_wait),
        cmocka_unit_test(test_async_copy_misuse_aborts),
    };
    return cmocka_run_group_tests_name("simt", tests, NULL, NULL);
}
