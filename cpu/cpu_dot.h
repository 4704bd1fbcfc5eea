/* The CPU backend's dot products per weight type: which operand format the activations are
 * quantized to and the scalar dot of a weight row with an operand row (lib/quant*.c). The
 * matmul's generic path (the scalar kernel table, and types without SIMD kernels) calls it; the
 * SIMD kernels give its results bit for bit (kernel_table.h). */
#ifndef LLMM_CPU_DOT_H
#define LLMM_CPU_DOT_H

#include <stdint.h>

#include "format/quant.h"

typedef struct cpu_dot {
    llmm_vec_dot_fn vec_dot;
    uint32_t operand_type; /* llmm_type the activations take: F32, F16, BF16, Q8_0, Q8_1, Q8_K */
} cpu_dot;

/* The dot of a weight type; NULL when the CPU backend cannot multiply by it. */
const cpu_dot *llmm__cpu_dot_get(uint32_t type);

#endif
