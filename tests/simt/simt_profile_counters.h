/* simt_profile_counters.h: one kernel's memory-transaction counters, summed over its launches
 * (tests/simt/simt_profile.h says what is counted). Plain C, so that a C test or tool can read
 * them from the profiled build through simt_profile_counters(). */
#ifndef LLMMINI_SIMT_PROFILE_COUNTERS_H
#define LLMMINI_SIMT_PROFILE_COUNTERS_H

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
} simt_kernel_counters;

/* The counters of `kernel` since the start (or the last reset), NULL if it never ran. */
const simt_kernel_counters *simt_profile_counters(const void *kernel);
void simt_profile_reset(void);
/* Every kernel's counters as JSON lines (one object per kernel, in the order of their first
 * launch; the kernel as its object file and offset, for nm) to path; 0 or -1. */
int simt_profile_write(const char *path);

#ifdef __cplusplus
}
#endif
#endif
