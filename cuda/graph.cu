/* The graph cache of graph.h: per batch size, the captured graph of a decode step and the
 * record it was captured from. Compiled by nvcc and, against the SIMT emulation (whose
 * streams capture and whose graphs replay the captured launches: tests/simt/simt_graph.h), by
 * the host compiler, so replay is exercised by make test. */
#include <string.h>
#include <time.h>

#include "graph.h"
#include "host_memory.h"

namespace {

struct graph_entry {
    uint32_t key;      /* the step's rows; 0: a free slot */
    cu_op *ops;        /* the record the graph was captured from */
    size_t n_ops;
    cudaGraphExec_t exec;
    uint64_t last_use; /* for replacing the least recently used entry */
};

double now_ms() {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

} // namespace

struct cu_graphs {
    const llmm_allocator *alloc;
    graph_entry entry[CU_GRAPHS_MAX];
    uint64_t clock;
    int broken; /* a capture failed: graphs are off */
    cu_graph_counters counters;
};

namespace {

void entry_clear(cu_graphs *g, graph_entry *e) {
    if (e->exec) cudaGraphExecDestroy(e->exec);
    cu_host_free(g->alloc, e->ops);
    memset(e, 0, sizeof *e);
}

/* The entry for key, else a free one, else the least recently used (cleared). */
graph_entry *entry_for(cu_graphs *g, uint32_t key) {
    graph_entry *free_slot = NULL, *oldest = &g->entry[0];
    for (graph_entry &e : g->entry) {
        if (e.key == key) return &e;
        if (!e.key && !free_slot) free_slot = &e;
        if (e.last_use < oldest->last_use) oldest = &e;
    }
    if (free_slot) return free_slot;
    entry_clear(g, oldest);
    return oldest;
}

/* Field by field: cu_op has padding (after u[], before n[]) whose bytes no assignment sets, so a
 * memcmp of two equal records would depend on how each was built. Floats compare by their bits,
 * as a graph's captured arguments do (0.0f and -0.0f are different launches). */
bool op_equal(const cu_op &a, const cu_op &b) {
    if (a.kind != b.kind) return false;
    for (int i = 0; i < 4; i++)
        if (a.u[i] != b.u[i]) return false;
    for (int i = 0; i < 3; i++)
        if (a.n[i] != b.n[i]) return false;
    for (int i = 0; i < CU_OP_POINTERS; i++)
        if (a.p[i] != b.p[i]) return false;
    return memcmp(a.f, b.f, sizeof a.f) == 0; /* an array of floats: no padding */
}

bool ops_equal(const cu_op *a, const cu_op *b, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!op_equal(a[i], b[i])) return false;
    return true;
}

/* Capture the ops as e's graph; 0 or the capture's cudaError_t (nothing launched then). */
int capture(cu_graphs *g, graph_entry *e, cudaStream_t stream, const cu_op *ops, size_t n_ops, cu_run_ops_fn run,
            void *ctx) {
    const double t0 = now_ms();
    /* thread-local: contexts on other threads keep allocating while this one captures */
    int err = cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal);
    if (err) return err;
    const int run_err = run(ctx, ops, n_ops);
    cudaGraph_t graph = NULL;
    err = cudaStreamEndCapture(stream, &graph);
    if (!err && run_err) err = run_err;
    cudaGraphExec_t exec = NULL;
    if (!err) err = cudaGraphInstantiate(&exec, graph, 0);
    if (graph) cudaGraphDestroy(graph);
    if (err) {
        cudaGetLastError(); /* the failed capture's error is answered by the eager launch */
        return err;
    }
    if (e->exec) cudaGraphExecDestroy(e->exec);
    e->exec = exec;
    g->counters.capture_ms += now_ms() - t0;
    return 0;
}

} // namespace

cu_graphs *cu_graphs_new(const llmm_allocator *al) {
    cu_graphs *g = (cu_graphs *)cu_host_calloc(al, 1, sizeof *g);
    if (g) g->alloc = al;
    return g;
}

void cu_graphs_free(cu_graphs *g) {
    if (!g) return;
    for (graph_entry &e : g->entry) entry_clear(g, &e);
    cu_host_free(g->alloc, g);
}

int cu_graphs_usable(const cu_graphs *g) { return g && !g->broken; }

int cu_graphs_run(cu_graphs *g, cudaStream_t stream, uint32_t key, const cu_op *ops, size_t n_ops,
                  cu_run_ops_fn run, void *ctx) {
    if (g->broken || key == 0 || n_ops == 0) return run(ctx, ops, n_ops);
    graph_entry *e = entry_for(g, key);
    e->last_use = ++g->clock;
    if (e->key == key && e->exec && e->n_ops == n_ops && ops_equal(e->ops, ops, n_ops)) {
        g->counters.replays++;
        return cudaGraphLaunch(e->exec, stream);
    }
    /* a new record for key: keep a copy to compare later steps with */
    cu_op *copy = (cu_op *)cu_host_alloc(g->alloc, n_ops * sizeof *ops);
    if (!copy) {
        entry_clear(g, e);
        return run(ctx, ops, n_ops);
    }
    memcpy(copy, ops, n_ops * sizeof *ops);
    if (capture(g, e, stream, ops, n_ops, run, ctx)) {
        cu_host_free(g->alloc, copy);
        entry_clear(g, e);
        g->broken = 1;
        g->counters.failures++;
        return run(ctx, ops, n_ops);
    }
    cu_host_free(g->alloc, e->ops);
    e->key = key;
    e->ops = copy;
    e->n_ops = n_ops;
    return cudaGraphLaunch(e->exec, stream);
}

void cu_graphs_get_counters(const cu_graphs *g, cu_graph_counters *out) {
    *out = g->counters;
    out->graphs = 0;
    for (const graph_entry &e : g->entry) out->graphs += e.key != 0;
}
