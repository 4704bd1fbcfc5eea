/* Weight tensors bound by name from the GGUF file, shapes checked against the
 * hyper-parameters. The model's weights stay in the file mapping: nothing is copied or
 * dequantized. A context holds the same structure prepared by its backend (backend.h,
 * prepare_weight): the forward pass reads only that one. */
#ifndef LLMM_WEIGHTS_H
#define LLMM_WEIGHTS_H

#include "arch.h"
#include "backend/tensor.h"
#include "format/gguf.h"
#include "hparams.h"

/* What a layer mixes the positions with. */
typedef enum llmm_layer_kind {
    LLMM_LAYER_ATTENTION = 0,
    LLMM_LAYER_SHORT_CONV = 1, /* LLMM_ARCH_SHORT_CONV */
    LLMM_LAYER_DELTA_NET = 2,  /* LLMM_ARCH_DELTA_NET */
} llmm_layer_kind;

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
    /* A short-convolution layer (LLMM_ARCH_SHORT_CONV) has these in place of the attention
     * tensors: */
    llmm_tensor conv_in;        /* (n_embd -> 3 * n_embd): B, C, X */
    llmm_tensor conv_taps;      /* (n_embd rows of conv_kernel taps; the last one is the current token's) */
    llmm_tensor conv_out;       /* (n_embd -> n_embd) */
    /* A Gated DeltaNet layer (LLMM_ARCH_DELTA_NET) has these, and conv_taps (conv_dim rows of
     * ssm_conv_kernel taps), in place of the attention tensors: */
    llmm_tensor ssm_qkv;        /* (n_embd -> conv_dim): queries, keys, values before the convolution */
    llmm_tensor ssm_z;          /* (n_embd -> ssm_inner): the output gate */
    llmm_tensor ssm_beta;       /* (n_embd -> ssm_v_heads) */
    llmm_tensor ssm_alpha;      /* (n_embd -> ssm_v_heads) */
    llmm_tensor ssm_dt_bias;    /* (ssm_v_heads) */
    llmm_tensor ssm_a;          /* (ssm_v_heads): -exp(A_log) */
    llmm_tensor ssm_norm;       /* (ssm_state) */
    llmm_tensor ssm_out;        /* (ssm_inner -> n_embd) */
    llmm_layer_kind kind;       /* every kind but attention keeps a recurrent state: llmm_layer_recurrent */
    int gated_q;                /* LLMM_ARCH_GATED_Q: wq is (n_embd -> 2 * n_head * head_dim) */
    uint32_t state_index;       /* recurrent layers: this layer's place among them */
    uint32_t kv_index;          /* attention layers: this layer's place among them, its K/V
                                   slot in the pool (kvcache.h), which has no room for the others */
    uint32_t sliding_window;    /* 0: full attention in this layer */
    int rope_off;               /* 1: this layer applies no RoPE (a NoPE layer) */
    float rope_base;            /* this layer's RoPE base and linear frequency scale */
    float rope_freq_scale;
} llmm_layer_weights;

/* Whether layer l keeps a recurrent state per sequence (its place: state_index) rather than K/V
 * rows in the pool (kv_index): derived from the kind, so the two indexes cannot disagree. */
static inline int llmm_layer_recurrent(const llmm_layer_weights *l) { return l->kind != LLMM_LAYER_ATTENTION; }

typedef struct llmm_weights {
    const llmm_arch *arch;
    llmm_tensor tok_embd;    /* (n_vocab rows of n_embd) */
    llmm_tensor output_norm; /* (n_embd) */
    llmm_tensor output;      /* (n_embd -> n_vocab); tok_embd when the model ties them */
    llmm_tensor rope_freqs;  /* optional (n_rot / 2): Llama 3 frequency factors */
    llmm_tensor rope_factors_short, rope_factors_long; /* optional (n_rot / 2): LongRoPE */
    llmm_layer_weights *layers; /* (n_layer) */
    uint32_t n_recurrent;       /* layers with a recurrent state per sequence */
    uint32_t n_kv_layers;       /* attention layers: the KV pool's layers */
    size_t state_floats;        /* one such layer's state of one sequence (backend.h llmm_conv_batch,
                                   llmm_delta_batch) */
    size_t mixer_floats;        /* per row: the mixer scratch those layers and gated queries need */
} llmm_weights;

/* One weight of the forward pass and what it is used for (enum llmm_weight_role). */
typedef struct llmm_weight_ref {
    llmm_tensor *t;
    uint32_t role;
} llmm_weight_ref;

/* What binding reads of a model being loaded. */
typedef struct llmm_weights_source {
    const gguf_file *gguf;
    const llmm_hparams *hp;
    uint32_t n_vocab;
    const llmm_arch *arch;    /* the architecture's row (the loader refused unknown ones) */
    const llmm_allocator *alloc;
} llmm_weights_source;

/* Find and check every tensor the architecture needs. UNSUPPORTED for a weight type without
 * kernels; BAD_FILE for missing or misshapen tensors.
 * *out is set as soon as the structure exists, also when binding then fails: free it with
 * llmm__weights_free. */
llmm_status llmm__weights_bind(const llmm_weights_source *src, llmm_weights **out, llmm_diag *d);
void llmm__weights_free(llmm_weights *w, const llmm_allocator *alloc);

/* Every weight present that the forward pass reads, each once (a tied embedding table is the
 * output matrix's entry), in an order that depends only on the model: index i of one
 * structure's list and of a copy's (weights_prepared) name the same weight. out NULL: count. */
size_t llmm__weights_list(llmm_weights *w, uint32_t n_layer, llmm_weight_ref *out);
/* Bytes of the weights llmm__weights_list names, as stored. */
size_t llmm__weights_bytes(llmm_weights *w, uint32_t n_layer);

/* 1 when the model ties its embedding table to the output matrix. */
int llmm__weights_tied(const llmm_weights *w);

/* Rows [first, first + n) of a weight as a view of its own. */
llmm_tensor llmm__tensor_rows(const llmm_tensor *t, int64_t first, int64_t n);

#endif
