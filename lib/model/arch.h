/* Architecture table: how the model families differ, as data the forward pass reads.
 * A new architecture is a new row, not a new forward pass. */
#ifndef LLMM_ARCH_H
#define LLMM_ARCH_H

#include <stdint.h>

#include "backend/tensor.h" /* llmm_rope_kind, llmm_activation: the ops' vocabulary */

/* Layout and block features, as flags of a row. Optional tensors (biases, rope factors) are
 * used whenever a file has them, for every architecture. */
enum llmm_arch_flags {
    LLMM_ARCH_FUSED_QKV = 1u << 0,     /* attn_qkv holds Q, K, V rows one after the other */
    LLMM_ARCH_FUSED_GATE_UP = 1u << 1, /* ffn_up holds the gate rows, then the up rows */
    LLMM_ARCH_QK_NORM = 1u << 2,       /* per-head RMSNorm of Q and K before RoPE */
    LLMM_ARCH_POST_NORMS = 1u << 3,    /* RMSNorm on the attention and FFN outputs */
    LLMM_ARCH_EMBED_SCALE = 1u << 4,   /* embeddings times sqrt(n_embd) */
    /* layers whose {arch}.attention.head_count_kv entry is 0 are gated short convolutions
     * (LFM2) with a recurrent state per sequence, the others attention */
    LLMM_ARCH_SHORT_CONV = 1u << 5,
    /* layer il is Gated DeltaNet linear attention with a recurrent state per sequence unless
     * (il + 1) % {arch}.full_attention_interval == 0 (qwen35) */
    LLMM_ARCH_DELTA_NET = 1u << 6,
    /* attn_q holds, per head, the query then a gate; the attention output is multiplied by
     * sigmoid(gate) before attn_output (qwen35) */
    LLMM_ARCH_GATED_Q = 1u << 7,
};

typedef struct llmm_arch {
    const char *name;  /* general.architecture */
    llmm_rope_kind rope;
    llmm_activation act;
    uint32_t flags;
    /* Sliding-window attention (window from {arch}.attention.sliding_window): in each run of
     * swa_period layers the first swa_local are local, the rest global (gemma2: 2 and 1,
     * alternating; gemma3: 6 and 5). swa_period 0: every layer, when the key is present. */
    uint32_t swa_period, swa_local;
    /* > 0: local layers rotate with their own base ({arch}.rope.freq_base_swa, this when the
     * key is absent) and without the file's linear scaling, which is for the global layers
     * (gemma3). 0: local layers rotate as the global ones. */
    float swa_rope_base;
    /* > 0: layer il applies no RoPE when (il + 1) % nope_period == 0 (SmolLM3's NoPE layers;
     * no GGUF key carries the period). */
    uint32_t nope_period;
    const char *output_norm;    /* the final norm's tensor; NULL: output_norm.weight */
    const char *ffn_norm;       /* the pre-FFN norm's suffix; NULL: ffn_norm.weight */
    const char *post_attn_norm; /* tensor suffixes for LLMM_ARCH_POST_NORMS */
    const char *post_ffn_norm;
} llmm_arch;

/* The row for an architecture name, or NULL when this build does not implement it. */
const llmm_arch *llmm__arch_find(const char *name);
/* Comma-separated list of supported names, for error messages. */
const char *llmm__arch_supported_list(void);

#endif
