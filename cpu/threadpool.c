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
 * on small models (measured: 20x slower decode on stories260K with 2 threads).
 * Every YIELD_EVERY rounds a spinning thread (worker or caller) calls sched_yield: free when
 * nothing else wants the CPU, and when something does (more threads than cores, other busy
 * processes) it lets a thread that still holds a chunk run, instead of burning the slice that
 * thread needs. Measured on the 2-vCPU dev VM, 0.5B Q4_0 decode: 3 threads went from 51-60
 * to 88-89 tok/s (2 threads: 89-96 either way); 1024 rounds did as well as 32 or 128. */
#define SPIN_ROUNDS 20000
#ifndef YIELD_EVERY
#define YIELD_EVERY 1024
#endif

#define LINE_BYTES 64

#define TICKET(gen, left) (((uint64_t)(gen) << 32) | (uint64_t)(left))
#define TICKET_GEN(t) ((uint32_t)((t) >> 32))
#define TICKET_LEFT(t) ((uint32_t)(t))

/* The ticket packs (run generation, chunks not yet claimed) in one word, so claiming a chunk
 * is one compare-and-swap that checks the run and the bound together: a worker that wakes
 * late for run g can never take a chunk of run g+1 believing it is g's. (The bound must be in
 * the word: with it in a separate field, a late worker could read run g+1's larger count
 * while the ticket still said g and claim a chunk past g's end; tests/test_simd.c caught
 * that.) Chunks go out in order: with `left` unclaimed of n, the next is n - left.
 * fn, arg and n_chunks of run g are written before the release store of ticket (g, n); a
 * worker reads them only after winning a chunk of g, when run g cannot have ended (its chunk
 * is unfinished), so they are still g's. They are atomics (relaxed) because the next run's
 * caller writes them while a late worker of this run may be about to lose its claim.
 * The generation wraps after 2^32 runs: a worker would have to sleep through exactly that many
 * runs to be fooled. Ticket and done counter sit a cache line apart (padding, not alignas: an
 * app's allocator need not return 64-byte aligned memory): every claim writes the first,
 * every finished chunk the second. */
struct llmm_threadpool {
    _Atomic uint64_t ticket;
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

/* Claim and run chunks of run gen until none are left or a newer run has begun. */
static void run_chunks(llmm_threadpool *pool, uint32_t gen, int ith) {
    uint64_t t = atomic_load_explicit(&pool->ticket, memory_order_acquire);
    for (;;) {
        if (TICKET_GEN(t) != gen || TICKET_LEFT(t) == 0) return;
        if (!atomic_compare_exchange_weak_explicit(&pool->ticket, &t, t - 1, memory_order_acq_rel,
                                                   memory_order_acquire))
            continue; /* t now holds the current ticket */
        const size_t n = atomic_load_explicit(&pool->n_chunks, memory_order_relaxed);
        llmm_chunk_fn fn = atomic_load_explicit(&pool->fn, memory_order_relaxed);
        void *arg = atomic_load_explicit(&pool->arg, memory_order_relaxed);
        fn(arg, n - TICKET_LEFT(t), ith);
        atomic_fetch_add_explicit(&pool->done, 1, memory_order_release);
        t = atomic_load_explicit(&pool->ticket, memory_order_acquire);
    }
}

/* Wait until a run newer than seen is published (or quit); returns its generation. */
static uint32_t wait_for_run(llmm_threadpool *pool, uint32_t seen) {
    for (int i = 1; i <= SPIN_ROUNDS; i++) {
        uint32_t g = TICKET_GEN(atomic_load(&pool->ticket));
        if (g != seen || atomic_load(&pool->quit)) return g;
        if (i % YIELD_EVERY == 0) sched_yield();
        else cpu_relax();
    }
    pthread_mutex_lock(&pool->lock);
    atomic_fetch_add(&pool->sleeping, 1);
    while (TICKET_GEN(atomic_load(&pool->ticket)) == seen && !atomic_load(&pool->quit))
        pthread_cond_wait(&pool->work_ready, &pool->lock);
    atomic_fetch_sub(&pool->sleeping, 1);
    pthread_mutex_unlock(&pool->lock);
    return TICKET_GEN(atomic_load(&pool->ticket));
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
llmm_status threadpool_create(int n_threads, const llmm_allocator *alloc, llmm_threadpool **out) {
    if (n_threads < 1) n_threads = 1;
    llmm_threadpool *pool = mem_calloc(alloc, 1, sizeof *pool);
    if (!pool) return LLMM_ERR_NO_MEMORY;
    pool->n = n_threads;
    pool->alloc = alloc;
    pool->threads = mem_calloc(alloc, (size_t)n_threads, sizeof(pthread_t) + sizeof(worker_arg));
    if (!pool->threads) {
        mem_free(alloc, pool);
        return LLMM_ERR_NO_MEMORY;
    }
    worker_arg *args = (worker_arg *)(pool->threads + n_threads);
    pthread_mutex_init(&pool->lock, NULL);
    pthread_cond_init(&pool->work_ready, NULL);
    atomic_init(&pool->ticket, TICKET(0, 0));
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
            threadpool_free(pool);
            return LLMM_ERR_BACKEND;
        }
    }
    *out = pool;
    return LLMM_OK;
}

void threadpool_free(llmm_threadpool *pool) {
    if (!pool) return;
    atomic_store(&pool->quit, 1);
    pthread_mutex_lock(&pool->lock);
    pthread_cond_broadcast(&pool->work_ready);
    pthread_mutex_unlock(&pool->lock);
    for (int i = 1; i < pool->n; i++) pthread_join(pool->threads[i], NULL);
    pthread_mutex_destroy(&pool->lock);
    pthread_cond_destroy(&pool->work_ready);
    mem_free(pool->alloc, pool->threads);
    mem_free(pool->alloc, pool);
}

void threadpool_run(llmm_threadpool *pool, llmm_chunk_fn fn, void *arg, size_t n_chunks) {
    /* the ticket counts chunks in 32 bits; callers ask for a few per thread, never near that */
    if (pool->n == 1 || n_chunks <= 1 || n_chunks > UINT32_MAX) {
        for (size_t c = 0; c < n_chunks; c++) fn(arg, c, 0);
        return;
    }
    atomic_store_explicit(&pool->fn, fn, memory_order_relaxed);
    atomic_store_explicit(&pool->arg, arg, memory_order_relaxed);
    atomic_store_explicit(&pool->n_chunks, n_chunks, memory_order_relaxed);
    atomic_store_explicit(&pool->done, 0, memory_order_relaxed);
    pool->gen++;
    atomic_store(&pool->ticket, TICKET(pool->gen, n_chunks)); /* publishes the run (seq_cst, see wake_sleepers) */
    wake_sleepers(pool);
    run_chunks(pool, pool->gen, 0);
    /* only chunks a worker is still running are left; yield early: a worker that lost its CPU
     * can only finish if we give ours up */
    for (unsigned spins = 1; atomic_load_explicit(&pool->done, memory_order_acquire) < n_chunks; spins++) {
        if (spins % YIELD_EVERY == 0) sched_yield();
        else cpu_relax();
    }
}

int threadpool_size(const llmm_threadpool *pool) { return pool->n; }

/* Distinct (package, core) pairs among online CPUs, from sysfs. */
int cpu_physical_cores(void) {
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
