/* Architecture table: how the model families differ, as data the forward pass reads.
 * A new architecture is a new row, not a new forward pass. */
#ifndef LLMM_ARCH_H
#define LLMM_ARCH_H

typedef enum llmm_rope_kind {
    LLMM_ROPE_ADJACENT = 0, /* rotate pairs (x0,x1),(x2,x3)...: the reference's "normal" mode */
    LLMM_ROPE_NEOX = 1      /* rotate pairs (x_i, x_{i+d/2}) */
} llmm_rope_kind;

typedef enum llmm_activation {
    LLMM_ACT_SILU = 0,      /* SwiGLU: silu(gate) * up */
    LLMM_ACT_GELU_TANH = 1  /* GeGLU with the tanh approximation */
} llmm_activation;

typedef struct llmm_arch {
    const char *name;  /* general.architecture */
    llmm_rope_kind rope;
    llmm_activation act;
} llmm_arch;

/* The row for an architecture name, or NULL when this build does not implement it. */
const llmm_arch *arch_find(const char *name);
/* Comma-separated list of supported names, for error messages. */
const char *arch_supported_list(void);

#endif
