/* The thread pool (cpu/threadpool.c) the CPU backend runs its steps on: every chunk of every
 * run runs exactly once and within its own run, for chunk counts from 0 to more than the
 * threads and more threads than CPUs; and the segmented hand-out, where thread i runs segment i
 * front to back while the others take from its back. (make tsan runs this suite under
 * ThreadSanitizer.) */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdatomic.h>
#include <time.h>

#include "support/fixtures.h"
#include "threadpool.h"

typedef struct pool_probe {
    uint32_t run;            /* this run's id */
    _Atomic uint32_t *seen;  /* per chunk: the run id that executed it */
    atomic_int *count;       /* per chunk: executions in this run */
    atomic_int bad_ith;
    int n_threads;
} pool_probe;

static void probe_chunk(void *arg, size_t chunk, int ith) {
    pool_probe *p = arg;
    if (ith < 0 || ith >= p->n_threads) atomic_store(&p->bad_ith, 1);
    atomic_fetch_add(&p->count[chunk], 1);
    atomic_store(&p->seen[chunk], p->run);
}

/* Many short runs back to back, chunk counts from 0 to more than the threads, and more threads
 * than CPUs: every chunk of every run runs exactly once, within its own run (a late worker
 * must never take a chunk of the next run for its own). */
static void test_threadpool_chunks(void **state) {
    (void)state;
    enum { MAX_CHUNKS = 67, RUNS = 1000 };
    const int threads[] = {1, 2, 3, 5};
    _Atomic uint32_t seen[MAX_CHUNKS];
    atomic_int count[MAX_CHUNKS];
    for (size_t ti = 0; ti < ARRAY_LEN(threads); ti++) {
        llmm_threadpool *pool = NULL;
        assert_int_equal(llmm__threadpool_create(threads[ti], NULL, &pool), LLMM_OK);
        assert_int_equal(llmm__threadpool_size(pool), threads[ti]);
        for (uint32_t run = 1; run <= RUNS; run++) {
            const size_t n = run % 7 == 0 ? 0 : (size_t)(run * 13 % MAX_CHUNKS) + 1;
            for (size_t c = 0; c < MAX_CHUNKS; c++) {
                atomic_init(&seen[c], 0);
                atomic_init(&count[c], 0);
            }
            pool_probe p = {.run = run, .seen = seen, .count = count, .n_threads = threads[ti]};
            atomic_init(&p.bad_ith, 0);
            llmm__threadpool_run(pool, probe_chunk, &p, n);
            for (size_t c = 0; c < MAX_CHUNKS; c++) {
                const int want = c < n ? 1 : 0;
                if (atomic_load(&count[c]) != want || (want && atomic_load(&seen[c]) != run))
                    fail_msg("threads %d run %u chunk %zu of %zu: ran %d times (run %u)", threads[ti], run, c, n,
                             atomic_load(&count[c]), atomic_load(&seen[c]));
            }
            assert_int_equal(atomic_load(&p.bad_ith), 0);
        }
        llmm__threadpool_free(pool);
    }
}

typedef struct segment_probe {
    atomic_int ith[64];  /* per chunk: the thread that ran it */
    atomic_int seq[64];  /* per chunk: its place in the run's order of starts */
    atomic_int next_seq;
} segment_probe;

static void segment_chunk(void *arg, size_t chunk, int ith) {
    segment_probe *p = arg;
    atomic_store(&p->seq[chunk], atomic_fetch_add(&p->next_seq, 1));
    atomic_store(&p->ith[chunk], ith);
    if (ith != 0) nanosleep(&(struct timespec){0, 5000000}, NULL); /* workers are slow: 5 ms a chunk */
}

/* Thread i runs segment i (llmm__threadpool_segment_start) front to back; other threads take from
 * its back, last chunk first. So per segment the owner ran a prefix in order and the thieves
 * the rest, each thief back to front (two thieves' starts may interleave); with the workers
 * slowed down, the caller must have taken some of theirs. */
static void test_threadpool_segments(void **state) {
    (void)state;
    const int threads[] = {2, 3};
    const size_t counts[] = {16, 7, 40};
    for (size_t ti = 0; ti < ARRAY_LEN(threads); ti++) {
        llmm_threadpool *pool = NULL;
        assert_int_equal(llmm__threadpool_create(threads[ti], NULL, &pool), LLMM_OK);
        for (size_t ci = 0; ci < ARRAY_LEN(counts); ci++) {
            const size_t n = counts[ci];
            segment_probe p;
            for (size_t c = 0; c < ARRAY_LEN(p.ith); c++) {
                atomic_init(&p.ith[c], -1);
                atomic_init(&p.seq[c], -1);
            }
            atomic_init(&p.next_seq, 0);
            llmm__threadpool_run(pool, segment_chunk, &p, n);
            int caller_stole = 0;
            for (int seg = 0; seg < threads[ti]; seg++) {
                const size_t c0 = llmm__threadpool_segment_start(n, threads[ti], seg);
                const size_t c1 = llmm__threadpool_segment_start(n, threads[ti], seg + 1);
                size_t c = c0;
                for (; c < c1 && atomic_load(&p.ith[c]) == seg; c++) /* the owner's prefix, in order */
                    if (c > c0) assert_true(atomic_load(&p.seq[c]) > atomic_load(&p.seq[c - 1]));
                int last_seq[8]; /* per thief: when it started its previous (higher-numbered) chunk */
                for (int k = 0; k < 8; k++) last_seq[k] = -1;
                for (size_t b = c1; b-- > c;) { /* the thieves' suffix, each thief's back to front */
                    const int by = atomic_load(&p.ith[b]);
                    if (by == seg || by < 0) fail_msg("segment %d chunk %zu: ran on thread %d", seg, b, by);
                    if (atomic_load(&p.seq[b]) < last_seq[by])
                        fail_msg("segment %d: thread %d took chunk %zu before a higher one", seg, by, b);
                    last_seq[by] = atomic_load(&p.seq[b]);
                    caller_stole |= by == 0;
                }
            }
            assert_int_equal(llmm__threadpool_segment_start(n, threads[ti], threads[ti]), n);
            /* with 13 or more slow chunks per worker the caller, idle after its own few, must
             * have taken some: a descheduled caller would have to miss 65 ms */
            if (n >= 10 * (size_t)threads[ti]) assert_true(caller_stole);
        }
        llmm__threadpool_free(pool);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_threadpool_chunks),
        cmocka_unit_test(test_threadpool_segments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
