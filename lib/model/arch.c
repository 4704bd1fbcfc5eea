#include "arch.h"

#include <string.h>

static const llmm_arch arch_table[] = {
    {.name = "llama", .rope = LLMM_ROPE_ADJACENT, .act = LLMM_ACT_SILU},
    {.name = "qwen2", .rope = LLMM_ROPE_NEOX, .act = LLMM_ACT_SILU},
    {.name = "qwen3", .rope = LLMM_ROPE_NEOX, .act = LLMM_ACT_SILU, .flags = LLMM_ARCH_QK_NORM},
    {.name = "phi3", .rope = LLMM_ROPE_NEOX, .act = LLMM_ACT_SILU,
     .flags = LLMM_ARCH_FUSED_QKV | LLMM_ARCH_FUSED_GATE_UP},
    {.name = "gemma2", .rope = LLMM_ROPE_NEOX, .act = LLMM_ACT_GELU_TANH,
     .flags = LLMM_ARCH_POST_NORMS | LLMM_ARCH_EMBED_SCALE, .swa_period = 2, .swa_local = 1,
     .post_attn_norm = "post_attention_norm.weight", .post_ffn_norm = "post_ffw_norm.weight"},
    {.name = "gemma3", .rope = LLMM_ROPE_NEOX, .act = LLMM_ACT_GELU_TANH,
     .flags = LLMM_ARCH_POST_NORMS | LLMM_ARCH_EMBED_SCALE | LLMM_ARCH_QK_NORM, .swa_period = 6, .swa_local = 5,
     .swa_rope_base = 10000.f, .post_attn_norm = "post_attention_norm.weight", .post_ffn_norm = "post_ffw_norm.weight"},
    {.name = "lfm2", .rope = LLMM_ROPE_NEOX, .act = LLMM_ACT_SILU, .flags = LLMM_ARCH_QK_NORM | LLMM_ARCH_SHORT_CONV,
     .output_norm = "token_embd_norm.weight"},
    {.name = "qwen35", .rope = LLMM_ROPE_NEOX, .act = LLMM_ACT_SILU,
     .flags = LLMM_ARCH_QK_NORM | LLMM_ARCH_DELTA_NET | LLMM_ARCH_GATED_Q, .ffn_norm = "post_attention_norm.weight"},
    {.name = "smollm3", .rope = LLMM_ROPE_ADJACENT, .act = LLMM_ACT_SILU, .nope_period = 4},
};

const llmm_arch *llmm__arch_find(const char *name) {
    for (size_t i = 0; i < sizeof arch_table / sizeof *arch_table; i++)
        if (strcmp(arch_table[i].name, name) == 0) return &arch_table[i];
    return NULL;
}

const char *llmm__arch_supported_list(void) { return "llama, qwen2, qwen3, phi3, gemma2, gemma3, lfm2, qwen35, smollm3"; }
