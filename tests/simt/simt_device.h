// simt_device.h: cudaDeviceGetAttribute for the attributes kernels size their work by (emulated
// build only; included by simt.h): the SM count (how many blocks make a wave) and the L2 size
// (how large a tile stays on chip). The emulated device answers as an H100 SXM does (132 SMs,
// 50 MiB of L2) unless told otherwise, process-wide: by the environment when the first question
// is asked (SIMT_SM_COUNT, SIMT_L2_BYTES: the emulated module run as an Orin, 16 SMs and 4 MiB),
// or by a test through simt::set_device_attribute, so that a test can show a kernel's geometry
// follow the device and its results not change with it. Other attributes are refused
// (cudaErrorInvalidValue), so a kernel file cannot come to depend on an answer nobody checked.
#ifndef LLMMINI_SIMT_DEVICE_H
#define LLMMINI_SIMT_DEVICE_H

#include <cstdlib>
#include <mutex>

#include "simt_runtime.h"

enum cudaDeviceAttr {
    cudaDevAttrMultiProcessorCount = 16,
    cudaDevAttrL2CacheSize = 89,
};

namespace simt {
namespace detail {

struct DeviceAttributes {
    std::mutex lock;
    bool initialised = false;
    int sm_count = 132, l2_bytes = 50 * 1024 * 1024;
};

inline DeviceAttributes &device_attributes() {
    static DeviceAttributes attributes;
    return attributes;
}

inline int env_positive(const char *name, int fallback) {
    const char *text = std::getenv(name);
    if (!text || !*text)
        return fallback;
    char *end = nullptr;
    const long v = std::strtol(text, &end, 10);
    if (*end || v <= 0 || v > 0x7fffffff)
        die("%s=%s: a positive integer, please", name, text);
    return (int)v;
}

// Called with the lock held.
inline void device_attributes_from_env(DeviceAttributes &a) {
    if (a.initialised)
        return;
    a.sm_count = env_positive("SIMT_SM_COUNT", a.sm_count);
    a.l2_bytes = env_positive("SIMT_L2_BYTES", a.l2_bytes);
    a.initialised = true;
}

} // namespace detail

// Test hook: what the emulated device answers from now on (value > 0).
inline void set_device_attribute(cudaDeviceAttr attr, int value) {
    detail::DeviceAttributes &a = detail::device_attributes();
    std::lock_guard<std::mutex> guard(a.lock);
    detail::device_attributes_from_env(a);
    if (value <= 0)
        detail::die("set_device_attribute: %d is not a device attribute's value", value);
    if (attr == cudaDevAttrMultiProcessorCount)
        a.sm_count = value;
    else if (attr == cudaDevAttrL2CacheSize)
        a.l2_bytes = value;
    else
        detail::die("set_device_attribute: attribute %d is not emulated", (int)attr);
}

} // namespace simt

inline cudaError_t cudaDeviceGetAttribute(int *value, cudaDeviceAttr attr, int device) {
    int n = 0;
    if (!value || cudaGetDeviceCount(&n) != cudaSuccess || device < 0 || device >= n)
        return simt::detail::record(!value ? cudaErrorInvalidValue : cudaErrorInvalidDevice);
    simt::detail::DeviceAttributes &a = simt::detail::device_attributes();
    std::lock_guard<std::mutex> guard(a.lock);
    simt::detail::device_attributes_from_env(a);
    if (attr == cudaDevAttrMultiProcessorCount)
        *value = a.sm_count;
    else if (attr == cudaDevAttrL2CacheSize)
        *value = a.l2_bytes;
    else
        return simt::detail::record(cudaErrorInvalidValue);
    return cudaSuccess;
}

#endif
