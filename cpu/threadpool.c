#include "threadpool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* Workers spin briefly on the run ticket before sleeping: a decode step issues dozens of
 * small parallel ops, and a condition-variable wake-up per op costs more than the op itself
 * on small models (many times slower decode on stories260K with 2 threads).
 * Every YIELD_EVERY rounds a spinning thread (worker or caller) calls sched_yield: free when
 * nothing else wants the CPU, and when something does (more threads than cores, other busy
 * processes) it lets a thread that still holds a chunk run, instead of burning the slice that
 * thread needs: with more threads than cores decode no longer collapses, and with as many it
 * costs nothing; 1024 rounds did as well as 32 or 128 (docs/performance.md, "CPU kernel
 * choices"). */
#define SPIN_ROUNDS 20000
#ifndef YIELD_EVERY
#define YIELD_EVERY 1024
#endif

#define LINE_BYTES 64

/* A run's chunks are split into one segment per thread, in order: segment i is chunks
 * [n * i / T, n * (i + 1) / T) of n, for T threads. Thread i claims its own segment's chunks
 * front to back; a thread whose segment is empty takes chunks from the back of the fullest
 * other segment. So when every thread keeps its CPU, each runs one contiguous stretch of
 * chunks (for a matmul: one unbroken stream of weight rows, prefetched across its chunk
 * boundaries), and a thread that lost its CPU still costs at most the chunk it holds.
 * Chunks claimed in order from one counter start a cold stream at each chunk, measurably
 * slower (docs/performance.md, "CPU kernel choices, measured").
 *
 * Each segment is one word, (run generation, front, back): claiming from either end is one
 * compare-and-swap that checks the run and the bounds together, so a worker that wakes late
 * for run g can never take a chunk of run g+1 believing it is g's (with the bounds and the run
 * in separate words a late worker could read run g+1's bounds while believing them g's;
 * tests/test_threadpool.c caught that in the single-counter version). The ticket word publishes the
 * run: its generation, read with acquire, makes the segment words, fn, arg and n_chunks of that
 * run visible. fn, arg and n_chunks are read only after winning a chunk of run g, when run g
 * cannot have ended (its chunk is unfinished), so they are still g's. They are atomics
 * (relaxed) because the next run's caller writes them while a late worker of this run may be
 * about to lose its claim. The generation wraps after 2^32 runs: a worker would have to sleep
 * through exactly that many runs to be fooled. Every shared word sits on its own cache line
 * (padding, not alignas: an app's allocator need not return 64-byte aligned memory). */
#define SEG(gen, front, back) (((uint64_t)(gen) << 32) | ((uint64_t)(front) << 16) | (uint64_t)(back))
#define SEG_GEN(w) ((uint32_t)((w) >> 32))
#define SEG_FRONT(w) ((uint32_t)((w) >> 16) & 0xffffu)
#define SEG_BACK(w) ((uint32_t)(w) & 0xffffu)
#define SEG_MAX_CHUNKS 0xffffu

typedef struct padded_segment {
    _Atomic uint64_t word;
    char pad[LINE_BYTES - sizeof(uint64_t)];
} padded_segment;

struct llmm_threadpool {
    _Atomic uint32_t ticket; /* generation of the newest run */
    char pad_ticket[LINE_BYTES];
    atomic_size_t done; /* chunks finished in the current run */
    char pad_done[LINE_BYTES];
    _Atomic(llmm_chunk_fn) fn;
    _Atomic(void *) arg;
    atomic_size_t n_chunks;
    atomic_int sleeping; /* workers blocked on work_ready */
    atomic_int quit;
    uint32_t gen; /* the caller's last generation; only the caller touches it */
    int n;
    padded_segment *segments; /* n of them */
    pthread_t *threads;
    pthread_mutex_t lock;
    pthread_cond_t work_ready;
    const llmm_allocator *alloc;
};

typedef struct worker_arg {
    llmm_threadpool *pool;
    int ith;
} worker_arg;

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* Claims the front chunk of segment seg of run gen; SIZE_MAX when it has none left. */
static size_t claim_front(llmm_threadpool *pool, int seg, uint32_t gen) {
    _Atomic uint64_t *word = &pool->segments[seg].word;
    uint64_t w = atomic_load_explicit(word, memory_order_acquire);
    while (SEG_GEN(w) == gen && SEG_FRONT(w) < SEG_BACK(w))
        if (atomic_compare_exchange_weak_explicit(word, &w, w + ((uint64_t)1 << 16), memory_order_acq_rel,
                                                  memory_order_acquire))
            return SEG_FRONT(w);
    return SIZE_MAX;
}

/* Claims the back chunk of the other segment with the most chunks left; SIZE_MAX when every
 * segment of run gen is empty. */
static size_t claim_back(llmm_threadpool *pool, int self, uint32_t gen) {
    for (;;) {
        int best = -1;
        uint32_t most = 0;
        for (int k = 0; k < pool->n; k++) {
            if (k == self) continue;
            const uint64_t w = atomic_load_explicit(&pool->segments[k].word, memory_order_acquire);
            if (SEG_GEN(w) == gen && SEG_BACK(w) > SEG_FRONT(w) && SEG_BACK(w) - SEG_FRONT(w) > most) {
                most = SEG_BACK(w) - SEG_FRONT(w);
                best = k;
            }
        }
        if (best < 0) return SIZE_MAX;
        _Atomic uint64_t *word = &pool->segments[best].word;
        uint64_t w = atomic_load_explicit(word, memory_order_acquire);
        while (SEG_GEN(w) == gen && SEG_FRONT(w) < SEG_BACK(w))
            if (atomic_compare_exchange_weak_explicit(word, &w, w - 1, memory_order_acq_rel, memory_order_acquire))
                return SEG_BACK(w) - 1;
        /* that segment emptied meanwhile: look again */
    }
}

static void run_one(llmm_threadpool *pool, size_t chunk, int ith) {
    llmm_chunk_fn fn = atomic_load_explicit(&pool->fn, memory_order_relaxed);
    void *arg = atomic_load_explicit(&pool->arg, memory_order_relaxed);
    fn(arg, chunk, ith);
    atomic_fetch_add_explicit(&pool->done, 1, memory_order_release);
}

/* Runs chunks of run gen, own segment first, until none are left or a newer run has begun. */
static void run_chunks(llmm_threadpool *pool, uint32_t gen, int ith) {
    for (size_t c; (c = claim_front(pool, ith, gen)) != SIZE_MAX;) run_one(pool, c, ith);
    for (size_t c; (c = claim_back(pool, ith, gen)) != SIZE_MAX;) run_one(pool, c, ith);
}

/* Wait until a run newer than seen is published (or quit); returns its generation. */
static uint32_t wait_for_run(llmm_threadpool *pool, uint32_t seen) {
    for (int i = 1; i <= SPIN_ROUNDS; i++) {
        uint32_t g = atomic_load_explicit(&pool->ticket, memory_order_acquire);
        if (g != seen || atomic_load(&pool->quit)) return g;
        if (i % YIELD_EVERY == 0) sched_yield();
        else cpu_relax();
    }
    pthread_mutex_lock(&pool->lock);
    atomic_fetch_add(&pool->sleeping, 1);
    while (atomic_load(&pool->ticket) == seen && !atomic_load(&pool->quit))
        pthread_cond_wait(&pool->work_ready, &pool->lock);
    atomic_fetch_sub(&pool->sleeping, 1);
    pthread_mutex_unlock(&pool->lock);
    return atomic_load(&pool->ticket);
}

static void *worker_main(void *p) {
    llmm_threadpool *pool = ((worker_arg *)p)->pool;
    const int ith = ((worker_arg *)p)->ith;
    uint32_t seen = 0;
    for (;;) {
        seen = wait_for_run(pool, seen);
        if (atomic_load(&pool->quit)) return NULL;
        run_chunks(pool, seen, ith);
    }
}

/* The seq_cst ticket store before this load pairs with the sleeper's seq_cst increment before
 * its ticket check: either the sleeper sees the new run, or we see it sleeping. */
static void wake_sleepers(llmm_threadpool *pool) {
    if (atomic_load(&pool->sleeping) == 0) return;
    pthread_mutex_lock(&pool->lock);
    pthread_cond_broadcast(&pool->work_ready);
    pthread_mutex_unlock(&pool->lock);
}

/* Worker arguments live in one block after the thread handles. */
llmm_status llmm__threadpool_create(int n_threads, const llmm_allocator *alloc, llmm_threadpool **out) {
    if (n_threads < 1) n_threads = 1;
    llmm_threadpool *pool = llmm__mem_calloc(alloc, 1, sizeof *pool);
    if (!pool) return LLMM_ERR_NO_MEMORY;
    pool->n = n_threads;
    pool->alloc = alloc;
    pool->threads = llmm__mem_calloc(alloc, (size_t)n_threads, sizeof(pthread_t) + sizeof(worker_arg));
    pool->segments = llmm__mem_calloc(alloc, (size_t)n_threads, sizeof *pool->segments);
    if (!pool->threads || !pool->segments) {
        llmm__mem_free(alloc, pool->threads);
        llmm__mem_free(alloc, pool->segments);
        llmm__mem_free(alloc, pool);
        return LLMM_ERR_NO_MEMORY;
    }
    worker_arg *args = (worker_arg *)(pool->threads + n_threads);
    pthread_mutex_init(&pool->lock, NULL);
    pthread_cond_init(&pool->work_ready, NULL);
    atomic_init(&pool->ticket, 0);
    for (int i = 0; i < n_threads; i++) atomic_init(&pool->segments[i].word, SEG(0, 0, 0));
    atomic_init(&pool->done, 0);
    atomic_init(&pool->fn, NULL);
    atomic_init(&pool->arg, NULL);
    atomic_init(&pool->n_chunks, 0);
    atomic_init(&pool->sleeping, 0);
    atomic_init(&pool->quit, 0);
    for (int i = 1; i < n_threads; i++) {
        args[i] = (worker_arg){pool, i};
        if (pthread_create(&pool->threads[i], NULL, worker_main, &args[i]) != 0) {
            pool->n = i; /* shut down the ones that started */
            llmm__threadpool_free(pool);
            return LLMM_ERR_BACKEND;
        }
    }
    *out = pool;
    return LLMM_OK;
}

void llmm__threadpool_free(llmm_threadpool *pool) {
    if (!pool) return;
    atomic_store(&pool->quit, 1);
    pthread_mutex_lock(&pool->lock);
    pthread_cond_broadcast(&pool->work_ready);
    pthread_mutex_unlock(&pool->lock);
    for (int i = 1; i < pool->n; i++) pthread_join(pool->threads[i], NULL);
    pthread_mutex_destroy(&pool->lock);
    pthread_cond_destroy(&pool->work_ready);
    llmm__mem_free(pool->alloc, pool->threads);
    llmm__mem_free(pool->alloc, pool->segments);
    llmm__mem_free(pool->alloc, pool);
}

void llmm__threadpool_run(llmm_threadpool *pool, llmm_chunk_fn fn, void *arg, size_t n_chunks) {
    /* segment bounds are 16 bits; callers ask for a few chunks per thread, never near that */
    if (pool->n == 1 || n_chunks <= 1 || n_chunks > SEG_MAX_CHUNKS) {
        for (size_t c = 0; c < n_chunks; c++) fn(arg, c, 0);
        return;
    }
    atomic_store_explicit(&pool->fn, fn, memory_order_relaxed);
    atomic_store_explicit(&pool->arg, arg, memory_order_relaxed);
    atomic_store_explicit(&pool->n_chunks, n_chunks, memory_order_relaxed);
    atomic_store_explicit(&pool->done, 0, memory_order_relaxed);
    pool->gen++;
    for (int i = 0; i < pool->n; i++)
        atomic_store_explicit(&pool->segments[i].word,
                              SEG(pool->gen, llmm__threadpool_segment_start(n_chunks, pool->n, i),
                                  llmm__threadpool_segment_start(n_chunks, pool->n, i + 1)),
                              memory_order_relaxed);
    atomic_store(&pool->ticket, pool->gen); /* publishes the run (seq_cst, see wake_sleepers) */
    wake_sleepers(pool);
    run_chunks(pool, pool->gen, 0);
    /* only chunks a worker is still running are left; yield early: a worker that lost its CPU
     * can only finish if we give ours up */
    for (unsigned spins = 1; atomic_load_explicit(&pool->done, memory_order_acquire) < n_chunks; spins++) {
        if (spins % YIELD_EVERY == 0) sched_yield();
        else cpu_relax();
    }
}

size_t llmm__threadpool_segment_start(size_t n_chunks, int n_threads, int i) {
    return n_chunks * (size_t)i / (size_t)n_threads;
}

int llmm__threadpool_size(const llmm_threadpool *pool) { return pool->n; }

/* Distinct (package, core) pairs among online CPUs, from sysfs. */
int llmm__cpu_physical_cores(void) {
    long logical = sysconf(_SC_NPROCESSORS_ONLN);
    if (logical < 1) logical = 1;
    int seen_keys[1024];
    int n_keys = 0;
    for (long cpu = 0; cpu < logical && cpu < 1024; cpu++) {
        char path[128];
        int core = -1, pkg = 0;
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%ld/topology/core_id", cpu);
        FILE *f = fopen(path, "r");
        if (!f) return (int)logical;
        if (fscanf(f, "%d", &core) != 1) core = -1;
        fclose(f);
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%ld/topology/physical_package_id", cpu);
        f = fopen(path, "r");
        if (f) {
            if (fscanf(f, "%d", &pkg) != 1) pkg = 0;
            fclose(f);
        }
        if (core < 0) return (int)logical;
        int key = pkg * 4096 + core, dup = 0;
        for (int i = 0; i < n_keys; i++) dup |= seen_keys[i] == key;
        if (!dup) seen_keys[n_keys++] = key;
    }
    return n_keys > 0 ? n_keys : (int)logical;
}
