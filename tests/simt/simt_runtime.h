// simt_runtime.h: the few CUDA runtime calls a kernel file's host glue needs, over malloc and
// memcpy (emulated build only; included by simt.h). Emulation-only: "device" memory is host
// memory, every call is synchronous, streams are opaque tokens. Enough for a host wrapper to
// compile unchanged in both builds, and for ASan to see device buffers as heap blocks.
#ifndef LLMMINI_SIMT_RUNTIME_H
#define LLMMINI_SIMT_RUNTIME_H

#include <cstdlib>
#include <cstring>

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
// A call CUDA refuses while this thread captures a stream in global or thread-local mode
// (allocation, synchronous copies, synchronisation): the capture is invalidated and the call
// fails, as on a GPU, so that "nothing allocates or synchronises inside a captured step" is
// checked here too (simt_graph.h).
inline bool capture_forbids(const char *call);
} // namespace detail
} // namespace simt

inline cudaError_t cudaMalloc(void **ptr, size_t size) {
    if (simt::detail::capture_forbids("cudaMalloc")) {
        *ptr = nullptr;
        return simt::detail::record(cudaErrorStreamCaptureUnsupported);
    }
    *ptr = std::malloc(size ? size : 1);
    return simt::detail::record(*ptr ? cudaSuccess : cudaErrorMemoryAllocation);
}
template <class T> inline cudaError_t cudaMalloc(T **ptr, size_t size) {
    return cudaMalloc(reinterpret_cast<void **>(ptr), size);
}
inline cudaError_t cudaFree(void *ptr) {
    std::free(ptr);
    return cudaSuccess;
}
inline cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, cudaMemcpyKind kind) {
    (void)kind;
    if (simt::detail::capture_forbids("cudaMemcpy"))
        return simt::detail::record(cudaErrorStreamCaptureUnsupported);
    if (n)
        std::memcpy(dst, src, n);
    return cudaSuccess;
}
// On a capturing stream a copy or a memset becomes a graph node that reads its source when
// the graph runs, as CUDA's memcpy nodes do.
inline cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, cudaMemcpyKind kind,
                                   cudaStream_t stream = nullptr) {
    (void)kind;
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
    if (simt::detail::capture_forbids("cudaMemset"))
        return simt::detail::record(cudaErrorStreamCaptureUnsupported);
    std::memset(dst, value, n);
    return cudaSuccess;
}
inline cudaError_t cudaMemsetAsync(void *dst, int value, size_t n, cudaStream_t stream = nullptr) {
    if (simt::detail::stream_capturing(stream)) {
        simt::detail::capture_node(stream, [dst, value, n]() { std::memset(dst, value, n); });
        return cudaSuccess;
    }
    std::memset(dst, value, n);
    return cudaSuccess;
}

// One emulated device (index 0), so that code choosing a device by index meets CUDA's errors.
inline cudaError_t cudaGetDeviceCount(int *count) {
    *count = 1;
    return cudaSuccess;
}
inline cudaError_t cudaSetDevice(int device) {
    return device == 0 ? cudaSuccess : simt::detail::record(cudaErrorInvalidDevice);
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
