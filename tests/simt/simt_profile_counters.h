/* simt_profile_counters.h: one kernel's memory-transaction counters, summed over its launches
 * (tests/simt/simt_profile.h says what is counted). Plain C, so that a C test or tool can read
 * them from the profiled build through simt_profile_counters(). */
#ifndef LLMMINI_SIMT_PROFILE_COUNTERS_H
#define LLMMINI_SIMT_PROFILE_COUNTERS_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct simt_kernel_counters {
    const void *kernel;      /* the kernel function */
    const char *launch_name; /* as SIMT_LAUNCH spelled it */
    unsigned long long launches, blocks, warps;
    unsigned threads_per_block;             /* of its last launch */
    unsigned long long dynamic_shared_max;  /* bytes, the most any launch asked for */
    /* warp-level requests; sectors: distinct 32-byte sectors per request, summed; bytes:
     * distinct bytes per request (a broadcast counts once), summed */
    unsigned long long global_load_requests, global_load_sectors, global_load_bytes;
    unsigned long long global_store_requests, global_store_sectors, global_store_bytes;
    /* global load requests by access width: 1, 2, 4, 8, 16 bytes */
    unsigned long long global_load_requests_by_width[5];
    unsigned long long shared_load_requests, shared_load_wavefronts;
    unsigned long long shared_store_requests, shared_store_wavefronts;
    unsigned long long cp_async_requests, cp_async_bytes, cp_async_sectors; /* global side */
    /* the distinct global sectors (loads, stores, cp.async) of each launch, summed over its
     * launches: the launch's traffic when the caches keep what it reads or writes twice */
    unsigned long long global_launch_sectors;
    /* the blocks emulated: fewer than `blocks` under block sampling, whose counts above are the
     * sampled blocks' scaled to the whole grid (simt_profile_set_block_sampling) */
    unsigned long long blocks_run;
} simt_kernel_counters;

/* One access site (instruction) of a kernel, summed over its warp-level requests: which site of a
 * kernel's shared memory conflicts, or which global load wastes its sectors. A cp.async is two
 * sites: its global read (global, cp_async) and its write into shared memory (shared, store,
 * cp_async), whose bank conflicts cost as a store's do. */
typedef struct simt_site_counters {
    const void *pc; /* the instruction: its callback's return address (a wide __ldg: its line) */
    unsigned char shared, store, cp_async, width;
    unsigned long long requests;
    unsigned long long sectors, bytes; /* global: distinct sectors and bytes per request, summed */
    /* shared: wavefronts per request, summed, and the fewest its words could take (a phase of
     * n distinct words needs ceil(n / 32)): equal when the site is free of bank conflicts */
    unsigned long long wavefronts, ideal_wavefronts;
} simt_site_counters;

/* The counters of `kernel` since the start (or the last reset), NULL if it never ran. */
const simt_kernel_counters *simt_profile_counters(const void *kernel);
/* The access sites of `kernel` in the order of their first request; *count of them (0, NULL if
 * it never ran). */
const simt_site_counters *simt_profile_sites(const void *kernel, size_t *count);
void simt_profile_reset(void);
/* Block sampling, for estimates of launches too large to emulate whole (never for a kernel's
 * correctness: the blocks left out write nothing). With stride > 1, a launch of at least 32
 * blocks runs about one block in `stride`: per grid dimension the first and last index and
 * pairs of neighbours between (tests/simt/simt_profile.cpp says how they are chosen and
 * weighted), and its counters are those blocks' scaled to the grid. 0 or 1: every block (the
 * default). whole_kernels: launch names, as SIMT_LAUNCH spelled them, separated by commas, that
 * always run whole (kernels whose addresses depend on data); NULL for none. */
void simt_profile_set_block_sampling(unsigned stride, const char *whole_kernels);
/* Every kernel's counters as JSON lines (one object per kernel, in the order of their first
 * launch; the kernel and its sites as object file and offset, for nm and addr2line) to path;
 * 0 or -1. */
int simt_profile_write(const char *path);

#ifdef __cplusplus
}
#endif
#endif
