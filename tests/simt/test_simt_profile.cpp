// test_simt_profile: the emulator's memory-transaction counters (simt_profile.h) on kernels whose
// answers are known from the GPU's rules: 32-byte sectors of global memory, 32 banks of 4 bytes
// of shared memory with broadcast. Built like the profiled module (clang, coverage callbacks,
// SIMT_PROFILE), so what is checked here is what make cuda-profile counts.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
extern "C" {
#include <cmocka.h>
}

#include "simt.h"
#include "simt_profile_counters.h"

// One warp of 32 lanes, so that every access of a kernel below is one warp-level request.
constexpr unsigned lanes = 32;

__global__ void copy_coalesced(float *y, const float *x) { y[threadIdx.x] = x[threadIdx.x]; }

// 2-byte loads 34 bytes apart: every lane in its own sector
__global__ void load_stride34(uint16_t *y, const unsigned char *x) {
    y[threadIdx.x] = *reinterpret_cast<const uint16_t *>(x + 34 * threadIdx.x);
}

__global__ void load_broadcast(float *y, const float *x) { y[threadIdx.x] = x[5]; }

__global__ void load_vector16(float4 *y, const float4 *x) {
    const float4 v = x[threadIdx.x];
    y[threadIdx.x] = v;
}

// Shared memory read at a stride of `stride` words (2: two lanes per bank; 32: one bank) or all
// lanes at word 0 (stride 0: a broadcast), after a conflict-free store of the whole tile.
__global__ void shared_stride(float *y, unsigned stride) {
    __shared__ float tile[32 * 32];
    for (unsigned i = threadIdx.x; i < 32 * 32; i += 32)
        tile[i] = (float)i;
    __syncthreads();
    y[threadIdx.x] = tile[threadIdx.x * stride];
}

__global__ void shared_vector16(float4 *y) {
    SIMT_DYNAMIC_SHARED(float4, tile);
    tile[threadIdx.x] = make_float4(1.f, 2.f, 3.f, (float)threadIdx.x);
    __syncthreads();
    y[threadIdx.x] = tile[threadIdx.x];
}

// Each lane reads its own 18-byte block byte by byte (lanes 18 bytes apart, as a GEMV that gives
// a lane a whole Q4_0 block): every request spans 18 sectors, the launch touches 18 in all.
__global__ void load_blocks_bytewise(unsigned *y, const unsigned char *blocks) {
    unsigned sum = 0;
    for (int j = 0; j < 18; j++)
        sum += blocks[18 * threadIdx.x + j];
    y[threadIdx.x] = sum;
}

// Two shared store sites in one kernel: word l (conflict-free) and word 2 l (lanes l and l + 16
// in one bank: 2 wavefronts), then a cp.async of 8 bytes a lane into consecutive shared words
// (2 half-warp phases of 32 words: 2 wavefronts, the ideal) and one 64 bytes apart (each lane's
// two words in banks 0-1 or 16-17: 8 words a bank, 8 wavefronts a phase); per site.
__global__ void shared_store_sites(float *y, const unsigned long long *x) {
    SIMT_DYNAMIC_SHARED(unsigned char, tile);
    float *words = reinterpret_cast<float *>(tile);
    words[threadIdx.x] = 1.f;
    words[64 + 2 * threadIdx.x] = 2.f;
    __pipeline_memcpy_async(tile + 512 + 8 * threadIdx.x, x + threadIdx.x, 8);
    __pipeline_memcpy_async(tile + 1024 + 64 * threadIdx.x, x + threadIdx.x, 8);
    __pipeline_commit();
    __pipeline_wait_prior(0);
    __syncthreads();
    y[threadIdx.x] = words[threadIdx.x] + words[64 + 2 * threadIdx.x];
}

// A 16-byte store and load of shared memory through a byte buffer, as a kernel that stages
// quantized blocks does (simt::detail::aligned_store / aligned_load): one request each
__global__ void shared_bytes16(uint4 *y) {
    SIMT_DYNAMIC_SHARED(unsigned char, tile);
    simt::detail::aligned_store(reinterpret_cast<uint4 *>(tile + 16 * threadIdx.x),
                                make_uint4(1u, 2u, 3u, threadIdx.x), "shared store");
    __syncthreads();
    y[threadIdx.x] = simt::detail::aligned_load(reinterpret_cast<const uint4 *>(tile + 16 * threadIdx.x),
                                                "shared load");
}

// Block (x, y) of a tiled product: reads row tile y of a (every x reads it), column tile x of b
// (every y reads it), writes its own tile of c; one float a lane of each, 4 sectors a request.
__global__ void tile_product(float *c, const float *a, const float *b) {
    const unsigned tile = blockIdx.y * gridDim.x + blockIdx.x;
    c[32 * tile + threadIdx.x] = a[32 * blockIdx.y + threadIdx.x] * b[32 * blockIdx.x + threadIdx.x];
}

// As an operand's quantization: block b reads its 32 floats and writes a 34-byte block, bytes
// [34 b, 34 b + 34), so that neighbouring blocks share the sector at their boundary but every
// 16th boundary falls between sectors
__global__ void quantize_blocks34(unsigned char *y, const float *x) {
    const float v = x[32 * blockIdx.x + threadIdx.x];
    y[34 * blockIdx.x + 2 + threadIdx.x] = (unsigned char)v;
    if (threadIdx.x == 0)
        y[34 * blockIdx.x] = 2;
}

template <class T> static T *device_buffer(size_t count) {
    void *p = nullptr;
    assert_int_equal(cudaMalloc(&p, count * sizeof(T)), cudaSuccess);
    assert_int_equal(cudaMemset(p, 0, count * sizeof(T)), cudaSuccess);
    return static_cast<T *>(p);
}

static const simt_kernel_counters &counters(const void *kernel) {
    const simt_kernel_counters *c = simt_profile_counters(kernel);
    assert_non_null(c);
    return *c;
}

static void test_coalesced_loads_touch_four_sectors(void **) {
    float *x = device_buffer<float>(lanes), *y = device_buffer<float>(lanes);
    SIMT_LAUNCH(copy_coalesced, 1, lanes, 0, nullptr, y, x);
    const simt_kernel_counters &c = counters((const void *)&copy_coalesced);
    assert_int_equal(c.launches, 1);
    assert_int_equal(c.global_load_requests, 1);
    assert_int_equal(c.global_load_sectors, 4);
    assert_int_equal(c.global_load_bytes, 128);
    assert_int_equal(c.global_load_requests_by_width[2], 1);
    assert_int_equal(c.global_store_requests, 1);
    assert_int_equal(c.global_store_sectors, 4);
    assert_int_equal(c.global_launch_sectors, 8);
    cudaFree(x), cudaFree(y);
}

static void test_stride34_loads_touch_a_sector_per_lane(void **) {
    unsigned char *x = device_buffer<unsigned char>(34 * lanes);
    uint16_t *y = device_buffer<uint16_t>(lanes);
    SIMT_LAUNCH(load_stride34, 1, lanes, 0, nullptr, y, x);
    const simt_kernel_counters &c = counters((const void *)&load_stride34);
    assert_int_equal(c.global_load_requests, 1);
    assert_int_equal(c.global_load_sectors, lanes);
    assert_int_equal(c.global_load_bytes, 2 * lanes); // 64 useful bytes of 1024 moved
    assert_int_equal(c.global_store_sectors, 2);       // the 2-byte stores are coalesced
    cudaFree(x), cudaFree(y);
}

static void test_bytewise_blocks_repeat_their_sectors(void **) {
    unsigned char *x = device_buffer<unsigned char>(18 * lanes);
    unsigned *y = device_buffer<unsigned>(lanes);
    SIMT_LAUNCH(load_blocks_bytewise, 1, lanes, 0, nullptr, y, x);
    const simt_kernel_counters &c = counters((const void *)&load_blocks_bytewise);
    assert_int_equal(c.global_load_requests, 18);
    assert_int_equal(c.global_load_bytes, 18 * lanes);
    // request j reads byte j of each block: 32 bytes 18 apart, in 18 sectors (or 19 where a
    // block offset crosses a sector boundary first), 576 bytes in 18 sectors for the launch
    assert_in_range(c.global_load_sectors, 18 * 18, 18 * 19);
    assert_int_equal(c.global_launch_sectors, 18 + 4); // and the 128-byte store
    cudaFree(x), cudaFree(y);
}

static void test_broadcast_load_is_one_sector(void **) {
    float *x = device_buffer<float>(lanes), *y = device_buffer<float>(lanes);
    SIMT_LAUNCH(load_broadcast, 1, lanes, 0, nullptr, y, x);
    const simt_kernel_counters &c = counters((const void *)&load_broadcast);
    assert_int_equal(c.global_load_requests, 1);
    assert_int_equal(c.global_load_sectors, 1);
    assert_int_equal(c.global_load_bytes, 4);
    cudaFree(x), cudaFree(y);
}

static void test_vector_load_is_one_request(void **) {
    float4 *x = device_buffer<float4>(lanes), *y = device_buffer<float4>(lanes);
    SIMT_LAUNCH(load_vector16, 1, lanes, 0, nullptr, y, x);
    const simt_kernel_counters &c = counters((const void *)&load_vector16);
    assert_int_equal(c.global_load_requests, 1);
    assert_int_equal(c.global_load_requests_by_width[4], 1);
    assert_int_equal(c.global_load_sectors, 16);
    assert_int_equal(c.global_load_bytes, 16 * lanes);
    assert_int_equal(c.global_store_requests, 1);
    assert_int_equal(c.global_store_sectors, 16);
    cudaFree(x), cudaFree(y);
}

static void test_shared_bank_conflicts(void **) {
    float *y = device_buffer<float>(lanes);
    const void *k = (const void *)&shared_stride;
    struct { unsigned stride; unsigned long long wavefronts; } cases[] = {
        {1, 1},   // consecutive words: conflict-free
        {2, 2},   // lanes l and l + 16 share a bank: 2-way
        {32, 32}, // every lane in bank 0: 32-way
        {0, 1},   // one word for all: a broadcast
    };
    unsigned long long stores = 0, loads = 0, store_wavefronts = 0, load_wavefronts = 0;
    for (const auto &t : cases) {
        SIMT_LAUNCH(shared_stride, 1, lanes, 0, nullptr, y, t.stride);
        const simt_kernel_counters &c = counters(k);
        assert_int_equal(c.shared_load_requests - loads, 1);
        assert_int_equal(c.shared_load_wavefronts - load_wavefronts, t.wavefronts);
        assert_int_equal(c.shared_store_requests - stores, 32); // the fill: 32 requests,
        assert_int_equal(c.shared_store_wavefronts - store_wavefronts, 32); // 1 each
        loads = c.shared_load_requests, load_wavefronts = c.shared_load_wavefronts;
        stores = c.shared_store_requests, store_wavefronts = c.shared_store_wavefronts;
    }
    cudaFree(y);
}

// 16-byte accesses are served a quarter warp (8 lanes, 128 bytes) at a time: 4 wavefronts
static void test_shared_vector_access_takes_four_wavefronts(void **) {
    float4 *y = device_buffer<float4>(lanes);
    SIMT_LAUNCH(shared_vector16, 1, lanes, lanes * sizeof(float4), nullptr, y);
    const simt_kernel_counters &c = counters((const void *)&shared_vector16);
    assert_int_equal(c.shared_store_requests, 1);
    assert_int_equal(c.shared_store_wavefronts, 4);
    assert_int_equal(c.shared_load_requests, 1);
    assert_int_equal(c.shared_load_wavefronts, 4);
    assert_int_equal(c.global_store_requests, 1);
    cudaFree(y);
}

static void test_shared_byte_buffer_access_takes_four_wavefronts(void **) {
    uint4 *y = device_buffer<uint4>(lanes);
    SIMT_LAUNCH(shared_bytes16, 1, lanes, lanes * 16, nullptr, y);
    const simt_kernel_counters &c = counters((const void *)&shared_bytes16);
    assert_int_equal(c.shared_store_requests, 1);
    assert_int_equal(c.shared_store_wavefronts, 4);
    assert_int_equal(c.shared_load_requests, 1);
    assert_int_equal(c.shared_load_wavefronts, 4);
    cudaFree(y);
}

static void test_shared_sites_are_counted_apart(void **) {
    float *y = device_buffer<float>(lanes);
    unsigned long long *x = device_buffer<unsigned long long>(lanes);
    const void *k = (const void *)&shared_store_sites;
    SIMT_LAUNCH(shared_store_sites, 1, lanes, 1024 + 64 * lanes, nullptr, y, x);
    size_t n = 0;
    const simt_site_counters *sites = simt_profile_sites(k, &n);
    assert_non_null(sites);
    // in the order of their first request within the block: the requests are kept in a hash
    // table until the block ends, so find each site by what it is
    const simt_site_counters *stores[2] = {nullptr, nullptr}, *async_writes[2] = {nullptr, nullptr};
    unsigned n_loads = 0, n_async_reads = 0;
    for (size_t i = 0; i < n; i++) {
        const simt_site_counters &s = sites[i];
        assert_int_equal(s.requests, 1);
        if (s.shared && s.store && !s.cp_async)
            stores[s.wavefronts == 1 ? 0 : 1] = &s;
        else if (s.shared && s.store && s.cp_async)
            async_writes[s.wavefronts == 2 ? 0 : 1] = &s;
        else if (s.shared)
            n_loads++;
        else if (s.cp_async)
            n_async_reads++;
    }
    assert_non_null(stores[0]);
    assert_non_null(stores[1]);
    assert_int_equal(stores[0]->ideal_wavefronts, 1);
    assert_int_equal(stores[1]->wavefronts, 2);
    assert_int_equal(stores[1]->ideal_wavefronts, 1);
    assert_non_null(async_writes[0]);
    assert_non_null(async_writes[1]);
    assert_int_equal(async_writes[0]->width, 8);
    assert_int_equal(async_writes[0]->ideal_wavefronts, 2);
    assert_int_equal(async_writes[1]->wavefronts, 16);
    assert_int_equal(async_writes[1]->ideal_wavefronts, 2);
    assert_int_equal(n_loads, 2);
    assert_int_equal(n_async_reads, 2);
    // the kernel's shared-store counts hold its two store instructions, not the cp.async writes
    // nor the emulator's poison of their destinations (2 more stores before it was taken back)
    const simt_kernel_counters &c = counters(k);
    assert_int_equal(c.shared_store_requests, 2);
    assert_int_equal(c.shared_store_wavefronts, 3);
    assert_int_equal(c.cp_async_requests, 2);
    cudaFree(y), cudaFree(x);
}

// Two warps: requests are per warp, never merged across warps
static void test_requests_are_per_warp(void **) {
    float *x = device_buffer<float>(2 * lanes), *y = device_buffer<float>(2 * lanes);
    simt_profile_reset();
    SIMT_LAUNCH(copy_coalesced, 1, 2 * lanes, 0, nullptr, y, x);
    const simt_kernel_counters &c = counters((const void *)&copy_coalesced);
    assert_int_equal(c.warps, 2);
    assert_int_equal(c.global_load_requests, 2);
    assert_int_equal(c.global_load_sectors, 8);
    cudaFree(x), cudaFree(y);
}

// A launch whose blocks all do the same (copy_coalesced ignores blockIdx: every block copies the
// same 32 floats): the sampled counts, scaled, are the whole launch's, and the sectors every block
// touches count once
static void test_sampled_uniform_launch_scales_exactly(void **) {
    const unsigned blocks = 256;
    float *x = device_buffer<float>(lanes), *y = device_buffer<float>(lanes);
    const void *k = (const void *)&copy_coalesced;
    simt_profile_reset();
    SIMT_LAUNCH(copy_coalesced, blocks, lanes, 0, nullptr, y, x);
    const simt_kernel_counters whole = counters(k);
    simt_profile_reset();
    simt_profile_set_block_sampling(8, nullptr);
    SIMT_LAUNCH(copy_coalesced, blocks, lanes, 0, nullptr, y, x);
    simt_profile_set_block_sampling(1, nullptr);
    const simt_kernel_counters &c = counters(k);
    assert_int_equal(whole.blocks_run, blocks);
    assert_int_equal(c.blocks, blocks);
    assert_in_range(c.blocks_run, blocks / 8, blocks / 8 + 3); // edges, and 1 in 8 between
    assert_int_equal(c.global_load_requests, whole.global_load_requests);
    assert_int_equal(c.global_load_sectors, whole.global_load_sectors);
    assert_int_equal(c.global_store_bytes, whole.global_store_bytes);
    assert_int_equal(c.global_launch_sectors, whole.global_launch_sectors);
    assert_int_equal(c.global_launch_sectors, 8);
    size_t n = 0;
    const simt_site_counters *sites = simt_profile_sites(k, &n);
    assert_int_equal(n, 2);
    assert_int_equal(sites[0].requests + sites[1].requests, 2 * blocks);
    cudaFree(x), cudaFree(y);
}

// Sampled along x only (40 tiles, 3 rows of them): a's tiles are read by every x, so its sectors
// count once; b's and c's vary with x, so the sampled tiles' sectors stand for the skipped ones.
static void test_sampled_tiles_count_shared_operands_once(void **) {
    const unsigned gx = 40, gy = 3;
    float *a = device_buffer<float>(gy * lanes), *b = device_buffer<float>(gx * lanes);
    float *c = device_buffer<float>(gx * gy * lanes);
    simt_profile_reset();
    simt_profile_set_block_sampling(8, nullptr);
    SIMT_LAUNCH(tile_product, dim3(gx, gy), lanes, 0, nullptr, c, a, b);
    simt_profile_set_block_sampling(1, nullptr);
    const simt_kernel_counters &k = counters((const void *)&tile_product);
    assert_true(k.blocks_run < gx * gy / 4);
    assert_int_equal(k.global_load_requests, 2 * gx * gy);
    assert_int_equal(k.global_store_sectors, 4 * gx * gy);
    // a: 3 tiles, b: 40, c: 120, 4 sectors each (the whole launch's, exactly: the tiles do not
    // overlap, and every x tile sampled stands for the same number of skipped ones)
    assert_int_equal(k.global_launch_sectors, 4 * (gy + gx + gx * gy));
    cudaFree(a), cudaFree(b), cudaFree(c);
}

// Sectors shared at block boundaries count once, not once per block they are sampled in: the
// launch's distinct sectors sampled within 1 % of the whole launch's (4 read and 34/32 written a
// block); the counts of requests exactly
static void test_sampled_boundaries_count_once(void **) {
    const unsigned blocks = 2048;
    unsigned char *y = device_buffer<unsigned char>(34 * blocks);
    float *x = device_buffer<float>(32 * blocks);
    const void *k = (const void *)&quantize_blocks34;
    simt_profile_reset();
    SIMT_LAUNCH(quantize_blocks34, blocks, lanes, 0, nullptr, y, x);
    const simt_kernel_counters whole = counters(k);
    assert_int_equal(whole.global_launch_sectors, 4 * blocks + 34 * blocks / 32);
    simt_profile_reset();
    simt_profile_set_block_sampling(16, nullptr);
    SIMT_LAUNCH(quantize_blocks34, blocks, lanes, 0, nullptr, y, x);
    simt_profile_set_block_sampling(1, nullptr);
    const simt_kernel_counters &c = counters(k);
    assert_true(c.blocks_run < blocks / 8);
    assert_int_equal(c.global_load_requests, whole.global_load_requests);
    assert_int_equal(c.global_store_requests, whole.global_store_requests);
    assert_in_range(c.global_launch_sectors, whole.global_launch_sectors * 99 / 100,
                    whole.global_launch_sectors * 101 / 100);
    cudaFree(y), cudaFree(x);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_coalesced_loads_touch_four_sectors),
        cmocka_unit_test(test_stride34_loads_touch_a_sector_per_lane),
        cmocka_unit_test(test_bytewise_blocks_repeat_their_sectors),
        cmocka_unit_test(test_broadcast_load_is_one_sector),
        cmocka_unit_test(test_vector_load_is_one_request),
        cmocka_unit_test(test_shared_bank_conflicts),
        cmocka_unit_test(test_shared_vector_access_takes_four_wavefronts),
        cmocka_unit_test(test_shared_byte_buffer_access_takes_four_wavefronts),
        cmocka_unit_test(test_requests_are_per_warp),
        cmocka_unit_test(test_shared_sites_are_counted_apart),
        cmocka_unit_test(test_sampled_uniform_launch_scales_exactly),
        cmocka_unit_test(test_sampled_tiles_count_shared_operands_once),
        cmocka_unit_test(test_sampled_boundaries_count_once),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
