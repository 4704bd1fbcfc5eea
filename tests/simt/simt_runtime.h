// simt_runtime.h: the few CUDA runtime calls a kernel file's host glue needs, over malloc and
// memcpy (emulated build only; included by simt.h). Emulation-only: "device" memory is host
// memory and every call is synchronous, but what the runtime refuses is refused (capture
// rules, simt_graph.h) and what it would make synchronous is counted (pageable copies). Enough for a host wrapper to
// compile unchanged in both builds, and for ASan to see device buffers as heap blocks.
#ifndef LLMMINI_SIMT_RUNTIME_H
#define LLMMINI_SIMT_RUNTIME_H

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

#include "simt_sched.h"

enum cudaError_t {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorNoDevice = 100,
    cudaErrorInvalidDevice = 101,
    cudaErrorIllegalState = 401,
    cudaErrorNotSupported = 801,
    cudaErrorStreamCaptureUnsupported = 900,
    cudaErrorStreamCaptureInvalidated = 901,
    cudaErrorStreamCaptureWrongThread = 908,
    cudaErrorStreamCaptureImplicit = 906,
};
typedef cudaError_t cudaError;

enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
    cudaMemcpyDefault = 4,
};

enum cudaFuncAttribute {
    cudaFuncAttributeMaxDynamicSharedMemorySize = 8,
};

namespace simt {
namespace detail {
inline cudaError_t &last_error() {
    static thread_local cudaError_t e = cudaSuccess;
    return e;
}
inline cudaError_t record(cudaError_t e) {
    if (e != cudaSuccess)
        last_error() = e;
    return e;
}
} // namespace detail
} // namespace simt

namespace simt {
namespace detail {
// A call CUDA refuses during a stream capture (allocation, synchronous copies, synchronisation):
// by the capture's mode and thread, the capture invalidated and the call failed, as on a GPU,
// so that "nothing allocates or synchronises inside a captured step" is checked here too; and
// work on the legacy stream while a blocking stream captures (simt_graph.h).
inline bool capture_forbids(const char *call);
inline bool legacy_stream_conflicts(const char *call);

// Where host memory is pinned (cudaMallocHost, cudaHostAlloc, cudaHostRegister) and where device
// memory is (cudaMalloc), process-wide: a cudaMemcpyAsync from host memory that is neither is a
// copy from pageable memory, which CUDA stages synchronously (the host waits, and a copy in the
// middle of a step stalls the pipeline): counted in simt_pageable_async_copies. (A copy back
// into pageable memory is synchronous too, and is what a step's final readback is: not counted.)
struct memory_registry {
    std::mutex lock;
    std::map<uintptr_t, size_t> pinned, device; // start -> bytes
};
inline memory_registry &memory() {
    static memory_registry registry;
    return registry;
}
inline bool in_ranges(const std::map<uintptr_t, size_t> &ranges, const void *p) {
    const uintptr_t u = reinterpret_cast<uintptr_t>(p);
    auto it = ranges.upper_bound(u);
    if (it == ranges.begin())
        return false;
    --it;
    return u < it->first + (it->second ? it->second : 1);
}
inline void remember(std::map<uintptr_t, size_t> memory_registry::*which, const void *p, size_t bytes) {
    std::lock_guard<std::mutex> hold(memory().lock);
    (memory().*which)[reinterpret_cast<uintptr_t>(p)] = bytes;
}
inline bool forget(std::map<uintptr_t, size_t> memory_registry::*which, const void *p) {
    std::lock_guard<std::mutex> hold(memory().lock);
    return (memory().*which).erase(reinterpret_cast<uintptr_t>(p)) != 0;
}
inline bool host_side_pinned(const void *host) {
    std::lock_guard<std::mutex> hold(memory().lock);
    return in_ranges(memory().pinned, host);
}
inline bool is_device(const void *p) {
    std::lock_guard<std::mutex> hold(memory().lock);
    return in_ranges(memory().device, p);
}
} // namespace detail
} // namespace simt

// Counters of the emulated runtime, readable by a test through the emulated module
// (tests/simt/module-emu.map exports them): cudaMemcpyAsync calls from pageable host memory.
// used: emitted in every object that includes this header, so that the module can export it.
extern "C" inline __attribute__((used)) unsigned long long *simt_pageable_async_copies() {
    static std::atomic<unsigned long long> count{0};
    static_assert(sizeof(std::atomic<unsigned long long>) == sizeof(unsigned long long), "a plain counter");
    return reinterpret_cast<unsigned long long *>(&count);
}

inline cudaError_t cudaMalloc(void **ptr, size_t size) {
    if (simt::detail::capture_forbids("cudaMalloc")) {
        *ptr = nullptr;
        return simt::detail::record(cudaErrorStreamCaptureUnsupported);
    }
    // 256-byte aligned, as cudaMalloc documents: sector and vector-load alignment as on a GPU
    *ptr = std::aligned_alloc(256, ((size ? size : 1) + 255) / 256 * 256);
    if (*ptr)
        simt::detail::remember(&simt::detail::memory_registry::device, *ptr, size);
    return simt::detail::record(*ptr ? cudaSuccess : cudaErrorMemoryAllocation);
}
template <class T> inline cudaError_t cudaMalloc(T **ptr, size_t size) {
    return cudaMalloc(reinterpret_cast<void **>(ptr), size);
}
inline cudaError_t cudaFree(void *ptr) {
    if (ptr)
        simt::detail::forget(&simt::detail::memory_registry::device, ptr);
    std::free(ptr);
    return cudaSuccess;
}

enum { cudaHostAllocDefault = 0, cudaHostRegisterDefault = 0 };
inline cudaError_t cudaMallocHost(void **ptr, size_t size) {
    if (simt::detail::capture_forbids("cudaMallocHost")) {
        *ptr = nullptr;
        return simt::detail::record(cudaErrorStreamCaptureUnsupported);
    }
    *ptr = std::malloc(size ? size : 1);
    if (*ptr)
        simt::detail::remember(&simt::detail::memory_registry::pinned, *ptr, size);
    return simt::detail::record(*ptr ? cudaSuccess : cudaErrorMemoryAllocation);
}
inline cudaError_t cudaHostAlloc(void **ptr, size_t size, unsigned int flags) {
    (void)flags;
    return cudaMallocHost(ptr, size);
}
inline cudaError_t cudaFreeHost(void *ptr) {
    if (ptr && !simt::detail::forget(&simt::detail::memory_registry::pinned, ptr))
        return simt::detail::record(cudaErrorInvalidValue);
    std::free(ptr);
    return cudaSuccess;
}
inline cudaError_t cudaHostRegister(void *ptr, size_t size, unsigned int flags) {
    (void)flags;
    if (!ptr || !size)
        return simt::detail::record(cudaErrorInvalidValue);
    simt::detail::remember(&simt::detail::memory_registry::pinned, ptr, size);
    return cudaSuccess;
}
inline cudaError_t cudaHostUnregister(void *ptr) {
    return simt::detail::forget(&simt::detail::memory_registry::pinned, ptr)
               ? cudaSuccess
               : simt::detail::record(cudaErrorInvalidValue);
}

inline cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, cudaMemcpyKind kind) {
    (void)kind;
    if (simt::detail::legacy_stream_conflicts("cudaMemcpy"))
        return simt::detail::record(cudaErrorStreamCaptureImplicit);
    if (simt::detail::capture_forbids("cudaMemcpy"))
        return simt::detail::record(cudaErrorStreamCaptureUnsupported);
    if (n)
        std::memcpy(dst, src, n);
    return cudaSuccess;
}
// On a capturing stream a copy or a memset becomes a graph node that reads its source when
// the graph runs, as CUDA's memcpy nodes do. On the legacy stream (0) it meets
// legacy_stream_conflicts.
inline cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, cudaMemcpyKind kind,
                                   cudaStream_t stream = nullptr) {
    const bool from_host = kind == cudaMemcpyHostToDevice || (kind == cudaMemcpyDefault && !simt::detail::is_device(src));
    if (from_host && n && !simt::detail::host_side_pinned(src))
        ++*reinterpret_cast<std::atomic<unsigned long long> *>(simt_pageable_async_copies());
    if (!stream && simt::detail::legacy_stream_conflicts("cudaMemcpyAsync"))
        return simt::detail::record(cudaErrorStreamCaptureImplicit);
    if (simt::detail::stream_capturing(stream)) {
        simt::detail::capture_node(stream, [dst, src, n]() {
            if (n)
                std::memcpy(dst, src, n);
        });
        return cudaSuccess;
    }
    if (n)
        std::memcpy(dst, src, n);
    return cudaSuccess;
}
inline cudaError_t cudaMemset(void *dst, int value, size_t n) {
    if (simt::detail::legacy_stream_conflicts("cudaMemset"))
        return simt::detail::record(cudaErrorStreamCaptureImplicit);
    if (simt::detail::capture_forbids("cudaMemset"))
        return simt::detail::record(cudaErrorStreamCaptureUnsupported);
    std::memset(dst, value, n);
    return cudaSuccess;
}
inline cudaError_t cudaMemsetAsync(void *dst, int value, size_t n, cudaStream_t stream = nullptr) {
    if (!stream && simt::detail::legacy_stream_conflicts("cudaMemsetAsync"))
        return simt::detail::record(cudaErrorStreamCaptureImplicit);
    if (simt::detail::stream_capturing(stream)) {
        simt::detail::capture_node(stream, [dst, value, n]() { std::memset(dst, value, n); });
        return cudaSuccess;
    }
    std::memset(dst, value, n);
    return cudaSuccess;
}

// One emulated device (index 0), so that code choosing a device by index meets CUDA's errors;
// none with LLMM_SIMT_DEVICES=0 (a machine with the runtime and no GPU: cudaErrorNoDevice).
inline int simt_device_count() {
    const char *n = std::getenv("LLMM_SIMT_DEVICES");
    return n && std::strcmp(n, "0") == 0 ? 0 : 1;
}
inline cudaError_t cudaGetDeviceCount(int *count) {
    *count = simt_device_count();
    return *count ? cudaSuccess : simt::detail::record(cudaErrorNoDevice);
}
inline cudaError_t cudaSetDevice(int device) {
    return device >= 0 && device < simt_device_count() ? cudaSuccess : simt::detail::record(cudaErrorInvalidDevice);
}
inline cudaError_t cudaGetDevice(int *device) {
    *device = 0;
    return cudaSuccess;
}

inline cudaError_t cudaDeviceSynchronize() {
    if (simt::detail::capture_forbids("cudaDeviceSynchronize"))
        return simt::detail::record(cudaErrorStreamCaptureUnsupported);
    return cudaSuccess;
}

inline cudaError_t cudaGetLastError() {
    cudaError_t e = simt::detail::last_error();
    simt::detail::last_error() = cudaSuccess;
    return e;
}
inline cudaError_t cudaPeekAtLastError() { return simt::detail::last_error(); }
inline const char *cudaGetErrorString(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorIllegalState: return "the operation is not permitted in this state";
    case cudaErrorNotSupported: return "operation not supported";
    case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated: return "operation failed due to a previous error during capture";
    case cudaErrorStreamCaptureWrongThread: return "attempt to terminate a thread-local capture sequence from another thread";
    case cudaErrorStreamCaptureImplicit: return "operation would make the legacy stream depend on a capturing blocking stream";
    }
    return "unrecognized error code";
}

// Only the dynamic shared memory limit, which the launch enforces as a GPU does.
template <class T>
inline cudaError_t cudaFuncSetAttribute(T *kernel, cudaFuncAttribute attr, int value) {
    if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize || value < 0 ||
        value > simt::detail::max_dynamic_smem_limit)
        return simt::detail::record(cudaErrorInvalidValue);
    std::lock_guard<std::mutex> lock(simt::detail::launch_mutex());
    simt::detail::dynamic_smem_limits()[reinterpret_cast<const void *>(kernel)] = value;
    return cudaSuccess;
}

#endif
