// simt_profile.h: the memory-transaction counters' hooks in the emulator (emulated build only;
// included by simt_sched.h). Test-only, as all of tests/simt.
//
// The counters need no change to a kernel: the profiled build (make cuda-profile, and
// test_simt_profile) compiles the kernel files with clang's
// -fsanitize-coverage=func,trace-loads,trace-stores, which calls __sanitizer_cov_loadN /
// __sanitizer_cov_storeN (N = 1, 2, 4, 8, 16 bytes) before every memory access, and links
// simt_profile.cpp, which defines those callbacks. Compiled with SIMT_PROFILE, the scheduler
// tells it where launches and blocks begin and end; without it, the hooks below are empty.
//
// What a callback keeps: accesses made by a kernel's thread to device memory (cudaMalloc'd:
// global) or to the block's shared memory (the dynamic buffer, and the writable data of the
// object the kernels are in, where the emulation puts static __shared__ arrays). The accesses of
// the lanes of a warp are grouped into warp-level requests as the GPU issues them: the n-th
// execution of one instruction (the callback's return address) by each lane of the warp is one
// request, which holds for converged code (a lane that skips an iteration another runs shifts
// its later occurrences: divergent loops are counted approximately). Per request:
//   global  the distinct 32-byte sectors its bytes touch, the distinct bytes it moves (useful
//           bytes), and its access width;
//   shared  its wavefronts: 32 banks of 4 bytes, lanes reading one 4-byte word are served by one
//           broadcast, and the wavefronts of a request are the most distinct words any bank must
//           deliver; 8- and 16-byte accesses are split in half- and quarter-warp phases, whose
//           wavefronts add up.
// cp.async has no C++ spelling to instrument: the emulator's cp.async (simt_async.h) calls
// simt::profile::cp_async with its operands, counted as cp.async requests beside the loads; its
// write into shared memory is a site of its own (below), out of the shared store counts.
// Block sampling (simt_profile_set_block_sampling, for make cuda-profile's large steps): the
// scheduler asks block_runs before each block and skips the others, whose counts are estimated
// from the blocks that ran.
// Each instruction is also a site (simt_profile_sites): the same counts per instruction, so that
// a kernel's staging stores can be told from its other shared accesses (make cuda-profile
// names each site's source line with addr2line).
// The counts are those of the C++ source as clang compiles it for x86 without vectorization
// (-fno-vectorize -fno-slp-vectorize), which follows the source's accesses one to one; nvcc
// may keep a value in a register where clang reloads it, or the reverse (docs/performance.md).
#ifndef LLMMINI_SIMT_PROFILE_H
#define LLMMINI_SIMT_PROFILE_H

#include <cstddef>

#include "simt_types.h"

namespace simt {
namespace profile {
#ifdef SIMT_PROFILE
void launch_begin(const char *name, const void *kernel, dim3 grid, dim3 block,
                  const unsigned char *shmem, size_t shmem_bytes);
void block_end();
void launch_end();
void cp_async(void *shared_dst, const void *global_src, unsigned bytes);
// whether the launch in progress runs this block (block sampling: simt_profile_counters.h)
bool block_runs(uint3 block);
#else
inline void launch_begin(const char *, const void *, dim3, dim3, const unsigned char *, size_t) {}
inline void block_end() {}
inline void launch_end() {}
inline void cp_async(void *, const void *, unsigned) {}
inline bool block_runs(uint3) { return true; }
#endif
} // namespace profile
} // namespace simt

#endif
