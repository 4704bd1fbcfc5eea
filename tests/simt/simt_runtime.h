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

inline cudaError_t cudaMalloc(void **ptr, size_t size) {
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
    if (n)
        std::memcpy(dst, src, n);
    return cudaSuccess;
}
inline cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, cudaMemcpyKind kind,
                                   cudaStream_t stream = nullptr) {
    (void)stream;
    return cudaMemcpy(dst, src, n, kind);
}
inline cudaError_t cudaMemset(void *dst, int value, size_t n) {
    std::memset(dst, value, n);
    return cudaSuccess;
}
inline cudaError_t cudaMemsetAsync(void *dst, int value, size_t n, cudaStream_t stream = nullptr) {
    (void)stream;
    return cudaMemset(dst, value, n);
}

// A stream is a distinct non-null token, so code can tell one from the default stream.
inline cudaError_t cudaStreamCreate(cudaStream_t *stream) {
    *stream = reinterpret_cast<cudaStream_t>(std::malloc(1));
    return simt::detail::record(*stream ? cudaSuccess : cudaErrorMemoryAllocation);
}
inline cudaError_t cudaStreamDestroy(cudaStream_t stream) {
    std::free(stream);
    return cudaSuccess;
}
inline cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
    (void)stream;
    return cudaSuccess;
}
inline cudaError_t cudaDeviceSynchronize() { return cudaSuccess; }

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
