/* A backend conformance suite: every slot of an llmm_backend_ops table (backend.h) driven as
 * the core drives it (buffers from buffer_alloc, weights through prepare_weight, per-row
 * inputs in a step descriptor, one op per step) and checked against plain C references
 * written in the test, so that any backend (the CPU under each kernel table, a wrapper, a GPU)
 * is held to one contract. Needs cmocka: failures fail the running cmocka test. */
#ifndef LLMM_TEST_BACKEND_CONFORMANCE_H
#define LLMM_TEST_BACKEND_CONFORMANCE_H

#include "backend/backend.h"

/* How a conformance run starts its backend: the table, and a hook run before each init (e.g.
 * to set LLMM_CPU_KERNELS); label names the run in messages. */
typedef struct conformance_target {
    const char *label;
    const llmm_backend_ops *be;
    void (*before_init)(void);
    /* 0, or the row count from which the backend's prompt-step matmuls of the weight types in
     * f16_gemm_types (bit t: llmm_type t) run as a GEMM over F16 (the CUDA backend's llmm__cu_gemm):
     * activations and dequantized weights rounded to F16, products summed in F32 in any order.
     * Such cases are checked against that operand, within (ne0 + 10) u sum |w x|, instead of the
     * CPU dot's operand. */
    size_t f16_gemm_min_rows;
    uint64_t f16_gemm_types;
} conformance_target;

/* Runs every check against t; fails the cmocka test (fail_msg naming the label, the op and the
 * case) on any mismatch. */
void conformance_run(const conformance_target *t);

#endif
