// simt.h: one kernel source, two builds. Test-only; never linked into libllmmini.
//
// A CUDA kernel file is compiled twice:
//   nvcc -std=c++17 ...        __CUDACC__ is defined: the real CUDA runtime, and the SIMT_*
//                              portability macros spelled as CUDA syntax (cuda/portable.h, which
//                              this header includes then: test code compiled by nvcc passes -Icuda).
//   g++ -std=c++17 -x c++ ...  the SIMT emulation below runs each launch on the calling CPU
//                              thread with GPU semantics, so `make test` executes every kernel on
//                              a machine without a GPU (and under ASan/UBSan).
// Shipped kernels (cuda/) include cuda/portable.h, never this header: their emulated build
// names it on its compile line (-DLLMM_SIMT_HEADER='"simt.h"' -Itests/simt), so the real CUDA
// build needs nothing of tests/. Test code (test_simt.cpp, sample_kernels.cu, tests/cuda/)
// includes this header directly.
//
// How a kernel file is written (see sample_kernels.cuh for complete examples):
//   #include "portable.h"                          // test code: "simt.h"
//   __global__ void scale(float *y, const float *x, float s, int n) {
//       SIMT_DYNAMIC_SHARED(float, tile);            // not `extern __shared__ float tile[]`
//       __shared__ float partial[32];                // static shared memory: as in CUDA
//       int i = blockIdx.x * blockDim.x + threadIdx.x;
//       ...  __syncthreads(); __shfl_xor_sync(0xffffffffu, v, 16); atomicAdd(...) ...
//       (__syncthreads is a macro here, recording its call site: never take its address)
//   }
//   SIMT_LAUNCH(scale, grid, block, shmem_bytes, stream, y, x, s, n);   // not <<<...>>>
// A template kernel is launched through a pointer, since the macro splits at the comma of
// `kernel<A, B>`:  auto *k = &kernel<float, 4>; SIMT_LAUNCH(k, ...).
// Host glue may use the small cuda* runtime subset of simt_runtime.h (cudaMalloc, cudaMemcpy,
// streams, cudaGetLastError, cudaFuncSetAttribute); anything beyond it is a compile error in the
// emulated build, which is the point: the kernels use a subset of CUDA both builds share.
//
// Emulated faithfully:
// - Blocks run one after another; inside a block every thread is a coroutine (simt_switch.h: a
//   register switch of our own on x86-64/aarch64, ucontext elsewhere or with SIMT_UCONTEXT=1)
//   on a 64 KiB mmap'd stack above a guard page (256 KiB under ASan). A thread runs until it
//   blocks at __syncthreads or a warp primitive, or returns, in thread order. So a barrier is
//   real, and a missing barrier shows as a wrong result (thread 0 runs ahead and reads what the
//   others have not written yet).
// - __syncthreads reached by only part of the block (others exited, or wait at another
//   __syncthreads call site) aborts, naming the kernel. So does a warp primitive whose mask names
//   an exited lane, lanes that disagree on the primitive or its mask, a calling lane missing from
//   its own mask, and any deadlock. (CUDA tolerates exited lanes in a vote's mask; we do not, so
//   that masks are always exact: compute them with __ballot_sync, not __activemask.)
// - Warp primitives rendezvous the lanes of their mask within a warp (lanes = linear thread index
//   / 32) with PTX's rules for shuffle widths and edge lanes. In a partial warp (blockDim not a
//   multiple of 32) the missing lanes do not exist: they are never waited for, count nowhere,
//   and a shuffle that reads from one, or from a lane outside the mask, gets poison (all bits
//   set), where CUDA leaves the value undefined.
// - Dynamic shared memory is a malloc of exactly the launch's size (ASan catches overruns),
//   filled with garbage at the start of every block (0xff bytes: NaN/-1; 0x7f on odd blocks).
//   More than 48 KiB needs cudaFuncSetAttribute(MaxDynamicSharedMemorySize), as on a GPU.
// - cudaMalloc returns 256-byte aligned memory, as CUDA documents (sectors and vector loads).
// - A launch the GPU would refuse (0 or > 1024 threads a block, block z > 64, an empty grid,
//   grid y/z > 65535, too much dynamic shared memory) aborts with the reason instead of setting
//   an error that the caller might not check.
// - An ASan report or a segfault (a thread stack overflow hits the guard page) inside a kernel
//   ends with the kernel, block and thread it happened in.
// - A load through __ldg (every width: 2, 4, 8, 16 bytes, CUDA's vector types) at an address
//   that is not a multiple of its width aborts, naming the kernel, as the device faults
//   (simt_loads.h; a plain dereference of a cast pointer is not checked: load wide with __ldg).
// - __float2half / __float2bfloat16 round to nearest even with IEEE subnormals, inf and NaN
//   (NaN becomes 0x7fff, as CUDA's host conversion does).
// Not emulated:
// - The memory model between threads: threads switch only at barriers and warp primitives, so a
//   race between warps (a missing __syncwarp, a non-atomic read-modify-write of global memory,
//   a missing __threadfence) never shows up here. Run compute-sanitizer racecheck on a GPU.
// - Static __shared__ is a function-local static: zero at the first launch, then it keeps the
//   previous block's values instead of garbage. Each block still sees its own writes after its
//   barrier; only a read-before-write of static shared memory goes unnoticed.
// - Timing, occupancy, register limits (the profiled build counts a kernel's memory requests
//   instead: simt_profile.h, make cuda-profile), the static shared memory limit, concurrency
//   between streams (every call is synchronous; stream capture and graphs are emulated: simt_graph.h),
//   cooperative groups, dynamic parallelism, textures, __CUDA_ARCH__ (undefined
//   here, as in host code: use SIMT_EMULATED to tell the builds apart).
// - Tensor cores (mma/wgmma inline PTX) and cuBLASLt: they must sit behind a narrow interface
//   with a host reference implementation for the emulated build, and are checked only on a GPU.
// - __half arithmetic operators: convert to float (the kernels compute in float anyway).
//   Fast-math intrinsics (__expf, __fdividef, ...) compute the accurate function.
// Launches are serialised process-wide (one mutex), so host threads may launch concurrently.
// Cost: about 30 ns a thread switch natively (an empty 256-thread block: ~8 us), ~140 ns under
// qemu. The emulation is test-only: it also installs a SIGSEGV/SIGBUS handler where none is.
#ifndef LLMMINI_SIMT_H
#define LLMMINI_SIMT_H

#ifdef __CUDACC__

// the real runtime and the macros' CUDA spelling, defined once for shipped and test code
#include "portable.h"

#else

#define SIMT_EMULATED 1
// launch, threads, __syncthreads (with simt_switch.h for the coroutines, simt_types.h for dim3)
#include "simt_sched.h"
#include "simt_warp.h"    // __shfl_*_sync, votes, __reduce_*_sync, __match_*_sync
#include "simt_math.h"    // atomics, intrinsics, min/max
#include "simt_loads.h"   // __ldg, with the device's alignment faults
#include "simt_fp16.h"    // __half, __nv_bfloat16
#include "simt_runtime.h" // cudaMalloc, cudaMemcpy, devices, errors
#include "simt_graph.h"   // streams, stream capture, graphs
#include "simt_async.h"   // cp.async: __pipeline_memcpy_async, commit and wait groups
#include "simt_device.h"  // cudaDeviceGetAttribute: SM count, L2 size

#endif
#endif
