// What the kernel tests (tests/cuda/test_*.cpp) share beyond tests/support/ (whose RNG they draw
// their data from): copies of host arrays to and from device memory that fail the running cmocka
// test on a CUDA error. Include after <cmocka.h>. The copies go through cudaMalloc and cudaMemcpy
// only, which the SIMT emulation maps to host memory, so a test is one source for both builds.
#ifndef LLMM_TEST_CUDA_DEVICE_TEST_UTIL_H
#define LLMM_TEST_CUDA_DEVICE_TEST_UTIL_H

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "simt.h"

// A device copy of host[0..n), one byte longer (so that n = 0 still allocates).
template <class T> static T *to_device(const T *host, size_t n) {
    T *dev = nullptr;
    assert_int_equal(cudaMalloc(&dev, n * sizeof(T) + 1), cudaSuccess);
    assert_int_equal(cudaMemcpy(dev, host, n * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
    return dev;
}

template <class T> static T *to_device(const std::vector<T> &host) { return to_device(host.data(), host.size()); }

// With LLMM_KERNEL_DIGEST=FILE, every array read back is appended to FILE as one line (its bytes
// and their FNV-1a hash): scripts/gpu-check.sh runs a kernel test on the device and on the
// emulator and compares the two files line by line, which tells, per test, whether the device's
// results equal the emulator's bit for bit (the inputs are the same seeded data in both).
static inline void digest_readback(const void *bytes, size_t n) {
    const char *path = getenv("LLMM_KERNEL_DIGEST");
    if (!path || !*path) return;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ ((const uint8_t *)bytes)[i]) * 0x100000001b3ull;
    if (FILE *f = fopen(path, "a")) {
        fprintf(f, "%zu %016llx\n", n, (unsigned long long)h);
        fclose(f);
    }
}

template <class T> static std::vector<T> from_device(const T *dev, size_t n) {
    std::vector<T> host(n);
    assert_int_equal(cudaMemcpy(host.data(), dev, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    digest_readback(host.data(), n * sizeof(T));
    return host;
}

#endif
