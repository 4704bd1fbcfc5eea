// gpu-bandwidth: the memory bandwidth a decode step is held against in scripts/gpu-check.sh.
// A decode step streams every weight once, so its ceiling is what the device's memory delivers
// to a plain streaming access, measured here rather than taken from a datasheet: a
// device-to-device copy between two buffers far larger than the L2 cache, each byte read once
// and written once (so bytes moved = 2 x the copy's size), timed with events, median of the
// repeats after warm-up copies. The nominal figure comes from the device's attributes (two
// transfers per memory clock times the bus width), for comparison only.
// Usage: gpu-bandwidth [MIB_PER_BUFFER]   (default 2048). Prints one JSON object on stdout.
#include <cuda_runtime.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <algorithm>
#include <vector>

#define CHECK(call)                                                                           \
    do {                                                                                      \
        const cudaError_t e_ = (call);                                                        \
        if (e_ != cudaSuccess) {                                                              \
            fprintf(stderr, "gpu-bandwidth: %s: %s\n", #call, cudaGetErrorString(e_));        \
            exit(1);                                                                          \
        }                                                                                     \
    } while (0)

namespace {

constexpr int WARMUP_COPIES = 3;
constexpr int TIMED_COPIES = 20;

// A pattern with no zero words: a copy of zeros can run faster than one of real data.
__global__ void fill(uint32_t *p, size_t n, uint32_t seed) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        p[i] = ((uint32_t)i * 2654435761u ^ seed) | 1u;
}

int attribute(cudaDeviceAttr attr, int device) {
    int v = 0;
    CHECK(cudaDeviceGetAttribute(&v, attr, device));
    return v;
}

} // namespace

int main(int argc, char **argv) {
    size_t mib = argc > 1 ? strtoull(argv[1], nullptr, 10) : 2048;
    if (mib == 0) {
        fprintf(stderr, "usage: gpu-bandwidth [MIB_PER_BUFFER]\n");
        return 2;
    }
    int device = 0;
    CHECK(cudaGetDevice(&device));
    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, device));
    const int clock_khz = attribute(cudaDevAttrMemoryClockRate, device);
    const int bus_bits = attribute(cudaDevAttrGlobalMemoryBusWidth, device);
    const double nominal_gbs = 2.0 * clock_khz * 1e3 * (bus_bits / 8.0) / 1e9;

    // Two buffers must fit with room to spare; halve the size until they do.
    size_t free_bytes = 0, total_bytes = 0;
    CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    while (mib > 64 && 2 * (mib << 20) > free_bytes / 2) mib /= 2;
    const size_t bytes = mib << 20, words = bytes / sizeof(uint32_t);
    uint32_t *src = nullptr, *dst = nullptr;
    CHECK(cudaMalloc(&src, bytes));
    CHECK(cudaMalloc(&dst, bytes));
    fill<<<4 * prop.multiProcessorCount, 256>>>(src, words, 0x9e3779b9u);
    CHECK(cudaGetLastError());
    fill<<<4 * prop.multiProcessorCount, 256>>>(dst, words, 0x85ebca6bu);
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());

    cudaEvent_t start, stop;
    CHECK(cudaEventCreate(&start));
    CHECK(cudaEventCreate(&stop));
    for (int i = 0; i < WARMUP_COPIES; i++) CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToDevice));
    std::vector<float> ms(TIMED_COPIES);
    for (int i = 0; i < TIMED_COPIES; i++) {
        // alternate the direction, so that no copy finds its source still in the L2 from the last
        uint32_t *a = i % 2 ? dst : src, *b = i % 2 ? src : dst;
        CHECK(cudaEventRecord(start));
        CHECK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice));
        CHECK(cudaEventRecord(stop));
        CHECK(cudaEventSynchronize(stop));
        CHECK(cudaEventElapsedTime(&ms[i], start, stop));
    }
    std::sort(ms.begin(), ms.end());
    const double median_ms = (ms[TIMED_COPIES / 2 - 1] + ms[TIMED_COPIES / 2]) / 2.0;
    const double moved = 2.0 * (double)bytes;

    printf("{\"device\":\"%s\",\"cc\":\"%d.%d\",\"sms\":%d,\"l2_bytes\":%d,\"memory_bytes\":%zu,"
           "\"memory_clock_khz\":%d,\"bus_bits\":%d,\"nominal_gb_s\":%.1f,\"copy_buffer_bytes\":%zu,"
           "\"copies\":%d,\"copy_ms_median\":%.4f,\"copy_gb_s\":%.1f,\"copy_gb_s_best\":%.1f}\n",
           prop.name, prop.major, prop.minor, prop.multiProcessorCount, prop.l2CacheSize, total_bytes, clock_khz,
           bus_bits, nominal_gbs, bytes, TIMED_COPIES, median_ms, moved / (median_ms * 1e-3) / 1e9,
           moved / (ms[0] * 1e-3) / 1e9);
    CHECK(cudaFree(src));
    CHECK(cudaFree(dst));
    return 0;
}
