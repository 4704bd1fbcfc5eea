/* A small fixed pool: run(fn) has every thread (the caller as thread 0) call fn once with
 * its index, and returns when all are done. */
#ifndef LLMM_THREADPOOL_H
#define LLMM_THREADPOOL_H

#include "common.h"

typedef void (*llmm_task_fn)(void *arg, int ith, int nth);
typedef struct llmm_threadpool llmm_threadpool;

llmm_status threadpool_create(int n_threads, const llmm_allocator *alloc, llmm_threadpool **out);
void threadpool_free(llmm_threadpool *pool);
void threadpool_run(llmm_threadpool *pool, llmm_task_fn fn, void *arg);
int threadpool_size(const llmm_threadpool *pool);
/* Physical cores of this machine (logical CPUs when unknown). */
int cpu_physical_cores(void);

#endif
