/* A model's hyper-parameters, as its GGUF metadata gives them (model.c reads them). */
#ifndef LLMM_HPARAMS_H
#define LLMM_HPARAMS_H

#include <stdint.h>

/* Taps of a short convolution a file may ask for (LFM2 uses 3): its state per sequence and
 * layer is taps - 1 rows. */
#define LLMM_MAX_CONV_KERNEL 64

typedef struct llmm_hparams {
    uint32_t n_ctx_train;
    uint32_t n_embd;
    uint32_t n_layer;
    uint32_t n_head;
    uint32_t n_head_kv;
    uint32_t n_ff;
    uint32_t head_dim;  /* n_embd / n_head unless the metadata says otherwise */
    uint32_t n_rot;     /* rotated dimensions per head */
    float rope_base;
    float rope_freq_scale;   /* 1 / rope.scaling.factor for linear scaling, else 1 */
    float rope_attn_factor;  /* rope.scaling.attn_factor (LongRoPE), else 1 */
    uint32_t n_ctx_orig;     /* rope.scaling.original_context_length, 0 if absent */
    float norm_eps;
    float attn_softcap;      /* attn_logit_softcapping, 0 = off */
    float final_softcap;     /* final_logit_softcapping, 0 = off */
    uint32_t sliding_window; /* attention.sliding_window, 0 = none */
    float rope_base_swa;     /* rope.freq_base_swa, 0 = absent */
    uint32_t conv_kernel;    /* shortconv.l_cache: taps of a short convolution (LFM2), 0 = none */
    /* Gated DeltaNet (qwen35): full_attention_interval, ssm.conv_kernel, ssm.state_size (the
     * key and value head size), ssm.group_count (key heads), ssm.time_step_rank (value
     * heads), ssm.inner_size (value heads x state size); 0 when absent */
    uint32_t full_attn_interval, ssm_conv_kernel, ssm_state, ssm_k_heads, ssm_v_heads, ssm_inner;
} llmm_hparams;

#endif
