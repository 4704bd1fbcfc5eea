/* portable.h: what a file of cuda/ includes to get the CUDA runtime, in both of its builds.
 *
 *   nvcc (make CUDA=1: libllmmini-cuda.so/.a)   __CUDACC__ is defined: the CUDA headers, and the
 *       three portability macros below spelled as CUDA syntax. Nothing of tests/ is involved.
 *   the host C++ compiler (make test, make cuda-emu: libllmmini-cuda-emu.so, the kernel tests)
 *       the test-only SIMT emulation (tests/simt/simt.h), which runs every launch on the CPU and
 *       defines the same macros. Shipped code never names it: the emulated build's compile line
 *       does, as -DLLMM_SIMT_HEADER='"simt.h"' with -Itests/simt (Makefile, CUDA_EMU_CXXFLAGS),
 *       so the dependency on the emulation belongs to that test build alone. A host compile
 *       without it is an error here rather than a search of the include path.
 *
 * The portability macros, the only places where the two builds' syntax differs:
 *   SIMT_LAUNCH(kernel, grid, block, shmem_bytes, stream, args...)   kernel<<<...>>>(args...)
 *     A template kernel is launched through a pointer (the macro splits at the comma of
 *     `kernel<A, B>`): auto *k = &kernel<float, 4>; SIMT_LAUNCH(k, ...).
 *   SIMT_DYNAMIC_SHARED(type, name)   `type *name` at the block's dynamic shared memory, in place
 *     of `extern __shared__ type name[]`.
 *   SIMT_EMULATED   1 in the emulated build, 0 under nvcc (__CUDA_ARCH__ is undefined in both
 *     the emulation and nvcc's host pass, so it cannot tell the builds apart).
 * Beyond them a kernel file uses the subset of CUDA the emulation implements (tests/simt/simt.h
 * lists it); anything else fails the emulated build, which keeps the two builds one source. */
#ifndef LLMM_CUDA_PORTABLE_H
#define LLMM_CUDA_PORTABLE_H

#if defined(__CUDACC__)

#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cuda_pipeline.h> /* cp.async: __pipeline_memcpy_async, commit, wait_prior */

#define SIMT_LAUNCH(kernel, grid, block, shmem_bytes, stream, ...) \
    kernel<<<(grid), (block), (shmem_bytes), (stream)>>>(__VA_ARGS__)
/* One byte array for every kernel: `extern __shared__ T name[]` with different T in one file is
 * an nvcc error ("declaration is incompatible"). */
#define SIMT_DYNAMIC_SHARED(type, name)                                 \
    extern __shared__ __align__(16) unsigned char simt_dynamic_smem_[]; \
    type *name = reinterpret_cast<type *>(simt_dynamic_smem_)
#define SIMT_EMULATED 0

#elif defined(LLMM_SIMT_HEADER)

#include LLMM_SIMT_HEADER

#else
#error "cuda/portable.h: nvcc, or the SIMT emulation: -DLLMM_SIMT_HEADER='\"simt.h\"' -Itests/simt"
#endif

#endif
