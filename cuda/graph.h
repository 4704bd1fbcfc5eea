/* Decode steps as CUDA graphs: a step is a graph (cuda/README.md).
 *
 * The core calls the backend op by op between step_begin and step_end. In a decode step the
 * glue (backend.cu) launches nothing while the ops come: it validates each op and records it
 * as a cu_op, everything its launch depends on. At step_end the step's record is compared with
 * the one the graph for this batch size (the key: the step's row count) was captured from:
 *  - the same ops with the same arguments: the graph is replayed, one cudaGraphLaunch;
 *  - no graph yet, or anything different (another layer count, a buffer that moved, a longer
 *    table): the ops are launched once more under stream capture, the capture becomes the
 *    key's graph (replacing the least recently used one when CU_GRAPHS_MAX are held), and it
 *    is launched.
 * So a graph is only ever replayed for exactly the launches it was captured from; what changes
 * from step to step (token ids, positions, block tables) lives in fixed device buffers that
 * step_begin updates with one copy before the launch. A capture that fails (a driver refusing
 * it) launches the recorded ops as they are and turns graphs off for the context, counted in
 * cu_graph_counters.failures. */
#ifndef LLMM_CUDA_GRAPH_H
#define LLMM_CUDA_GRAPH_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "llmmini.h"
#include "portable.h"

/* One recorded op. Its fields are its identity (records are compared field by field, floats by
 * their bits: graph.cu op_equal, so padding bytes never matter), so every record starts with
 * every field zero (cu_op_zero) and holds values only, never host pointers whose target may
 * change: what each field means per kind is the glue's (backend.cu run_op). */
/* The most buffers one op names: gated_delta_net's llmm_delta_batch. */
#define CU_OP_POINTERS 11

typedef struct cu_op {
    uint32_t kind;
    uint32_t u[4];
    size_t n[3];
    const void *p[CU_OP_POINTERS];
    float f[4];
} cu_op;

static inline cu_op cu_op_zero(uint32_t kind) {
    cu_op op;
    memset(&op, 0, sizeof op);
    op.kind = kind;
    return op;
}

/* Launch ops[0..n_ops) now on the glue's stream (ctx: the glue's state); 0 or a cudaError_t. */
typedef int (*cu_run_ops_fn)(void *ctx, const cu_op *ops, size_t n_ops);

typedef struct cu_graph_counters {
    double capture_ms;  /* capturing and instantiating, all captures so far */
    uint32_t graphs;    /* graphs held */
    uint64_t replays;   /* steps run by replaying a graph */
    uint32_t failures;  /* captures that failed (graphs are then off) */
} cu_graph_counters;

/* The graphs a context holds. */
typedef struct cu_graphs cu_graphs;

#define CU_GRAPHS_MAX 16

cu_graphs *cu_graphs_new(const llmm_allocator *al);
void cu_graphs_free(cu_graphs *g);
/* Run the recorded step ops[0..n_ops) of batch size key on stream, as the top comment says.
 * Returns 0 or the cudaError_t of the launch; a host allocation failure for a new graph's copy
 * of the record still runs the step (eagerly) and is not an error. */
int cu_graphs_run(cu_graphs *g, cudaStream_t stream, uint32_t key, const cu_op *ops, size_t n_ops,
                  cu_run_ops_fn run, void *ctx);
/* 0 when a capture failed: the glue then stops recording for graphs. */
int cu_graphs_usable(const cu_graphs *g);
void cu_graphs_get_counters(const cu_graphs *g, cu_graph_counters *out);

#endif
