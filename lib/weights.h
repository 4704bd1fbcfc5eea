/* Weight tensors bound by name from the GGUF file, shapes checked against the
 * hyper-parameters. Weights stay in the file mapping: nothing is copied or dequantized. */
#ifndef LLMM_WEIGHTS_H
#define LLMM_WEIGHTS_H

#include "arch.h"
#include "model.h"
#include "weight_copy.h"

/* A 2-D view of a weight: ne0 values per row (the input dimension), ne1 rows. A view may
 * cover a slice of rows of a fused tensor (phi3's attn_qkv, ffn_up). data == NULL: absent.
 * copy: the slot for a backend's lazily made copy of these rows (weight_copy.h), one per
 * matrix the forward pass multiplies by, when the model allows copies; NULL otherwise. data
 * stays valid either way. */
typedef struct llmm_tensor {
    const void *data;
    uint32_t type;
    int64_t ne0, ne1;
    size_t row_bytes;
    struct llmm_weight_copy *copy;
} llmm_tensor;

typedef struct llmm_layer_weights {
    llmm_tensor attn_norm;      /* (n_embd) */
    llmm_tensor wq;             /* (n_embd -> n_head * head_dim) */
    llmm_tensor wk;             /* (n_embd -> n_head_kv * head_dim) */
    llmm_tensor wv;             /* (n_embd -> n_head_kv * head_dim) */
    llmm_tensor bq, bk, bv;     /* optional biases (n_head * head_dim), (kv_dim), (kv_dim) */
    llmm_tensor q_norm, k_norm; /* LLMM_ARCH_QK_NORM: (head_dim) */
    llmm_tensor wo;             /* (n_head * head_dim -> n_embd) */
    llmm_tensor post_attn_norm; /* LLMM_ARCH_POST_NORMS: (n_embd) */
    llmm_tensor ffn_norm;       /* (n_embd) */
    llmm_tensor w_gate;         /* (n_embd -> n_ff) */
    llmm_tensor w_up;           /* (n_embd -> n_ff) */
    llmm_tensor w_down;         /* (n_ff -> n_embd) */
    llmm_tensor post_ffn_norm;  /* LLMM_ARCH_POST_NORMS: (n_embd) */
    uint32_t sliding_window;    /* 0: full attention in this layer */
} llmm_layer_weights;

typedef struct llmm_weights {
    const llmm_arch *arch;
    llmm_tensor tok_embd;    /* (n_vocab rows of n_embd) */
    llmm_tensor output_norm; /* (n_embd) */
    llmm_tensor output;      /* (n_embd -> n_vocab); tok_embd when the model ties them */
    llmm_tensor rope_freqs;  /* optional (n_rot / 2): Llama 3 frequency factors */
    llmm_tensor rope_factors_short, rope_factors_long; /* optional (n_rot / 2): LongRoPE */
    llmm_layer_weights *layers; /* (n_layer) */
    llmm_weight_copy *copies;   /* (n_copies) the matrices' copy slots, or NULL */
    void *owned_vectors;        /* with copies: the vectors' bytes, copied out of the file mapping */
    size_t n_copies;
} llmm_weights;

/* Find and check every tensor the architecture needs. UNSUPPORTED for an unknown
 * architecture or a weight type without kernels; BAD_FILE for missing or misshapen tensors. */
llmm_status weights_bind(llmm_model *m, llmm_diag *d);
void weights_free(llmm_model *m);

/* Rows [first, first + n) of a weight as a view of its own. */
llmm_tensor tensor_rows(const llmm_tensor *t, int64_t first, int64_t n);

#endif
