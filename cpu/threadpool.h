/* A small fixed pool that hands out numbered chunks of one task at a time.
 *
 * llmm__threadpool_run(pool, fn, arg, n_chunks) calls fn(arg, chunk, ith) exactly once for every
 * chunk in [0, n_chunks), on the calling thread (ith 0) and the workers (ith 1..n-1), and
 * returns when all chunks are done. The chunks are split into one contiguous segment per
 * thread (llmm__threadpool_segment_start); thread i runs its segment's chunks in order, and a thread
 * done with its own takes chunks one by one from the back of the others'. So a caller that
 * lays out work in chunk order gets one contiguous stretch per thread, and a worker that lost
 * its CPU (an oversubscribed machine) costs at most the chunk it holds. Which thread runs a
 * chunk varies from run to run, so fn must compute each output from its chunk alone (then
 * results do not depend on threads or timing); ith is only for per-thread scratch. Runs of one
 * pool must not overlap (one caller at a time). */
#ifndef LLMM_THREADPOOL_H
#define LLMM_THREADPOOL_H

#include <stddef.h>

#include "base/common.h"

typedef void (*llmm_chunk_fn)(void *arg, size_t chunk, int ith);
typedef struct llmm_threadpool llmm_threadpool;

llmm_status llmm__threadpool_create(int n_threads, const llmm_allocator *alloc, llmm_threadpool **out);
void llmm__threadpool_free(llmm_threadpool *pool);
void llmm__threadpool_run(llmm_threadpool *pool, llmm_chunk_fn fn, void *arg, size_t n_chunks);
int llmm__threadpool_size(const llmm_threadpool *pool);
/* First chunk of thread i's segment when n_chunks are split over n_threads (i == n_threads:
 * n_chunks). */
size_t llmm__threadpool_segment_start(size_t n_chunks, int n_threads, int i);
/* Physical cores of this machine (logical CPUs when unknown). */
int llmm__cpu_physical_cores(void);

#endif
