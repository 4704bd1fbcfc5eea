/* What a backend sees of a model: weight tensors, what each is used for, the op kinds the
 * forward pass names, and the per-model memory the contexts of one backend kind share. The
 * backend table (backend.h) and the backends (cpu/, cuda/) need nothing of lib/model. */
#ifndef LLMM_TENSOR_H
#define LLMM_TENSOR_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "base/common.h"

/* A 2-D view of a weight: ne0 values per row (the input dimension), ne1 rows. A view may
 * cover a slice of rows of a fused tensor (phi3's attn_qkv, ffn_up). data == NULL: absent.
 * In the model, data is host memory (the file mapping); in a context's prepared table, a
 * buffer of its backend, and backend whatever that backend keeps with the weight. */
typedef struct llmm_tensor {
    const void *data;
    uint32_t type; /* enum llmm_type (format/quant.h) */
    int64_t ne0, ne1;
    size_t row_bytes;
    void *backend;
} llmm_tensor;

/* What a prepared weight is used for (prepare_weight). */
typedef enum llmm_weight_role {
    LLMM_WEIGHT_MATRIX = 0, /* matmul's w; also the embedding table when the model ties them */
    LLMM_WEIGHT_TABLE = 1,  /* the embedding table alone */
    LLMM_WEIGHT_VECTOR = 2, /* an f32 vector: norm weights, biases, rope factors */
} llmm_weight_role;

typedef enum llmm_rope_kind {
    LLMM_ROPE_ADJACENT = 0, /* rotate pairs (x0,x1),(x2,x3)...: the reference's "normal" mode */
    LLMM_ROPE_NEOX = 1      /* rotate pairs (x_i, x_{i+d/2}) */
} llmm_rope_kind;

typedef enum llmm_activation {
    LLMM_ACT_SILU = 0,      /* SwiGLU: silu(gate) * up */
    LLMM_ACT_GELU_TANH = 1, /* GeGLU with the tanh approximation */
    LLMM_ACT_SIGMOID = 2    /* sigmoid(gate) * up: gated attention outputs (qwen35); only
                               backends with the gated_delta_net slot meet it */
} llmm_activation;

/* Per-model memory that the contexts of one model share on one backend kind (the CPU keeps
 * its packed weight copies there, so that every context reads one): the model creates it
 * zeroed and destroys the lock; the backend creates and frees what data points to, under
 * lock, counting its users (backend.h, llmm_backend_config.shared). */
typedef struct llmm_backend_shared {
    pthread_mutex_t lock;
    void *data;
    uint32_t users;
} llmm_backend_shared;

/* Entries of per-kind arrays (llmm_model.backend_shared): one per llmm_backend_kind but AUTO,
 * indexed by the kind. */
#define LLMM_BACKEND_KINDS 3

#endif
