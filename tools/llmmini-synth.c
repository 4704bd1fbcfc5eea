/* llmmini-synth: write a GGUF with a real model's shapes and seeded random weights, for
 * benchmarks at realistic sizes (0.1-8 B parameters) without downloading any weights. The
 * vocabulary is either a synthetic SentencePiece one (byte tokens plus generated pieces) or,
 * with --vocab, the tokenizer of another GGUF copied key for key, so prompts tokenize as they
 * would for the real model and the embedding and output matrices have its vocabulary's rows.
 * With --lora-rank it also writes a random LoRA adapter for that model (or, with --lora-base,
 * for an existing model file) in the GGUF adapter layout of the reference engine's converter. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/gguf.h"
#include "format/quant.h"

#define ALIGNMENT 32

/* Llama 3.1+ frequency scaling (rope_scaling.rope_type "llama3"); factor 0: none. */
typedef struct llama3_rope {
    float factor, low_freq_factor, high_freq_factor;
    uint32_t orig_ctx; /* original_max_position_embeddings */
} llama3_rope;
#define NO_LLAMA3 {0, 0, 0, 0}

typedef struct shape {
    const char *name;
    const char *arch;   /* general.architecture */
    uint32_t n_embd, n_layer, n_head, n_head_kv, n_ff, n_vocab, n_ctx;
    uint32_t head_dim;  /* 0: n_embd / n_head */
    float rope_base, norm_eps;
    int tied;           /* no output.weight: the output projection is token_embd */
    llama3_rope llama3;
} shape;

/* The named-model presets copy their config.json (hidden_size, num_hidden_layers,
 * num_attention_heads, num_key_value_heads, intermediate_size, vocab_size,
 * max_position_embeddings, head_dim, rope_theta, rms_norm_eps, tie_word_embeddings,
 * rope_scaling). The size presets (0.5b ... 8b) keep the shapes of earlier releases, so
 * benchmark figures stay comparable: llama layout, 32000 vocabulary, untied. */
static const shape presets[] = {
    /* name, arch, embd, layers, heads, kv heads, ff, vocab, ctx, head_dim, rope base, eps, tied */
    {"tiny", "llama", 64, 2, 4, 2, 160, 512, 2048, 0, 10000.f, 1e-5f, 0, NO_LLAMA3},
    {"0.5b", "llama", 896, 24, 14, 2, 4864, 32000, 4096, 0, 10000.f, 1e-5f, 0, NO_LLAMA3},   /* Qwen2.5-0.5B widths */
    {"1b", "llama", 2048, 22, 32, 4, 5632, 32000, 4096, 0, 10000.f, 1e-5f, 0, NO_LLAMA3},    /* TinyLlama-1.1B */
    {"3b", "llama", 3072, 28, 24, 8, 8192, 32000, 4096, 0, 10000.f, 1e-5f, 0, NO_LLAMA3},    /* Llama-3.2-3B widths */
    {"8b", "llama", 4096, 32, 32, 8, 14336, 32000, 8192, 0, 10000.f, 1e-5f, 0, NO_LLAMA3},   /* Llama-3-8B widths */
    {"tinyllama-1.1b", "llama", 2048, 22, 32, 4, 5632, 32000, 2048, 0, 10000.f, 1e-5f, 0, NO_LLAMA3},
    {"llama-3.2-1b", "llama", 2048, 16, 32, 8, 8192, 128256, 131072, 64, 500000.f, 1e-5f, 1, {32.f, 1.f, 4.f, 8192}},
    {"smollm2-135m", "llama", 576, 30, 9, 3, 1536, 49152, 8192, 64, 100000.f, 1e-5f, 1, NO_LLAMA3},
    {"qwen2.5-0.5b", "qwen2", 896, 24, 14, 2, 4864, 151936, 32768, 0, 1000000.f, 1e-6f, 1, NO_LLAMA3},
    {"qwen3-0.6b", "qwen3", 1024, 28, 16, 8, 3072, 151936, 40960, 128, 1000000.f, 1e-6f, 1, NO_LLAMA3},
    {"phi3-mini", "phi3", 3072, 32, 32, 32, 8192, 32064, 4096, 0, 10000.f, 1e-5f, 0, NO_LLAMA3},
    {"gemma2-2b", "gemma2", 2304, 26, 8, 4, 9216, 256000, 8192, 256, 10000.f, 1e-6f, 1, NO_LLAMA3},
    {"gemma3-270m", "gemma3", 640, 18, 4, 1, 2048, 262144, 32768, 256, 1000000.f, 1e-6f, 1, NO_LLAMA3},
    {"gemma3-1b", "gemma3", 1152, 26, 4, 1, 6912, 262144, 32768, 256, 1000000.f, 1e-6f, 1, NO_LLAMA3},
    {"smollm3-3b", "smollm3", 2048, 36, 16, 4, 11008, 128256, 65536, 128, 5000000.f, 1e-6f, 1, NO_LLAMA3},
    /* intermediate_size as the converter writes it: block_ff_dim 6656 / 12288 auto-adjusted
     * (2/3, rounded up to a multiple of 256) */
    {"lfm2-350m", "lfm2", 1024, 16, 16, 8, 4608, 65536, 128000, 0, 1000000.f, 1e-5f, 1, NO_LLAMA3},
    {"lfm2-1.2b", "lfm2", 2048, 16, 32, 8, 8192, 65536, 128000, 0, 1000000.f, 1e-5f, 1, NO_LLAMA3},
    /* Qwen3.5-0.8B's text model: hidden 1024, 24 layers, 8 heads / 2 KV heads of 256,
     * intermediate 3584, vocabulary 248320, 262144 positions, rope_theta 1e7 (model card and
     * published spec pages). Its config.json was not at hand: rms_norm_eps 1e-6 and tied
     * embeddings are the family's (Qwen3.5 configs seen: 1e-6, tie_word_embeddings true for the
     * small ones), assumed here; the DeltaNet widths are in the qwen35 layout below. */
    {"qwen3.5-0.8b", "qwen35", 1024, 24, 8, 2, 3584, 248320, 262144, 256, 10000000.f, 1e-6f, 1, NO_LLAMA3},
};

/* What each architecture adds to the llama layout (see lib/model/arch.c). */
typedef struct arch_layout {
    const char *arch;
    int qkv_bias, qk_norm, fused_qkv, fused_gate_up, post_norms, softcaps;
    uint32_t sliding_window; /* attention.sliding_window, 0: none */
    /* short-convolution hybrids (lfm2): bit il set = layer il is attention, the others gated
     * short convolutions of conv_kernel taps; 0: every layer attention */
    uint64_t attn_layers;
    uint32_t conv_kernel;
    const struct delta_net_layout *delta_net; /* Gated DeltaNet hybrids (qwen35); NULL: none */
} arch_layout;

/* A Gated DeltaNet hybrid: layer il is gated full attention (queries with their gates, attn_q
 * twice as wide) when (il + 1) % full_attn_interval == 0, else a DeltaNet of ssm_k_heads
 * query/key heads and ssm_v_heads value heads of ssm_state dims, whose q/k/v pass a causal
 * convolution of ssm_conv_kernel taps; RoPE on rope_dims of each head, in M-RoPE sections
 * (text positions: plain partial RoPE). */
typedef struct delta_net_layout {
    uint32_t full_attn_interval;
    uint32_t ssm_state, ssm_k_heads, ssm_v_heads, ssm_conv_kernel, rope_dims;
    uint32_t rope_sections[4];
} delta_net_layout;

/* Qwen3.5-0.8B's linear_num_key_heads 16, linear_num_value_heads 16, linear_key/value_head_dim
 * 128, linear_conv_kernel_dim 4, partial_rotary_factor 0.25 (64 of 256 dims) and
 * full_attention_interval 4, as a config derived from it (Qwen3.5-0.65B-Base-Rearchitected,
 * same widths) states them; mrope_section [11, 11, 10] as Qwen3-VL's for 64 rotated dims */
static const delta_net_layout qwen35_0_8b = {4, 128, 16, 16, 4, 64, {11, 11, 10, 0}};

#define LFM2_ATTN_LAYERS ((1ull << 2) | (1ull << 5) | (1ull << 8) | (1ull << 10) | (1ull << 12) | (1ull << 14))

static const arch_layout layouts[] = {
    {"llama", 0, 0, 0, 0, 0, 0, 0, 0, 0, NULL},
    {"qwen2", 1, 0, 0, 0, 0, 0, 0, 0, 0, NULL},
    {"qwen3", 0, 1, 0, 0, 0, 0, 0, 0, 0, NULL},
    {"phi3", 0, 0, 1, 1, 0, 0, 0, 0, 0, NULL},
    {"gemma2", 0, 0, 0, 0, 1, 1, 4096, 0, 0, NULL},
    /* local layers' rope base: the reference's default 10000, as the converter writes no key */
    {"gemma3", 0, 1, 0, 0, 1, 0, 512, 0, 0, NULL},
    {"smollm3", 0, 0, 0, 0, 0, 0, 0, 0, 0, NULL}, /* NoPE layers: fixed by the architecture, no key */
    /* full_attn_idxs of LFM2 350M and 1.2B; head size n_embd / n_head, no key for it */
    {"lfm2", 0, 1, 0, 0, 0, 0, 0, LFM2_ATTN_LAYERS, 3, NULL},
    {"qwen35", 0, 1, 0, 0, 0, 0, 0, 0, 0, &qwen35_0_8b},
};

/* Layer il of a short-convolution hybrid is a convolution. */
static int is_conv_layer(const arch_layout *a, uint32_t il) {
    return a->conv_kernel && !(il < 64 && (a->attn_layers >> il & 1));
}

/* Layer il of a DeltaNet hybrid is a Gated DeltaNet (else gated full attention). */
static int is_delta_layer(const arch_layout *a, uint32_t il) {
    return a->delta_net && (il + 1) % a->delta_net->full_attn_interval != 0;
}

static const arch_layout *layout_of(const char *arch) {
    for (size_t i = 0; i < sizeof layouts / sizeof *layouts; i++)
        if (!strcmp(layouts[i].arch, arch)) return &layouts[i];
    return NULL;
}

/* With f == NULL the writer only counts (pos, n_kv): a dry pass over the metadata gives the
 * header its key count without seeking back in the output. */
typedef struct writer {
    FILE *f;
    uint64_t pos, n_kv;
    int failed;
} writer;

static void put(writer *w, const void *p, size_t n) {
    if (w->f && !w->failed && fwrite(p, 1, n, w->f) != n) w->failed = 1;
    w->pos += n;
}
static void put_u32(writer *w, uint32_t v) { put(w, &v, 4); } /* little-endian hosts only */
static void put_u64(writer *w, uint64_t v) { put(w, &v, 8); }
static void put_bytes_str(writer *w, const char *s, uint64_t n) {
    put_u64(w, n);
    put(w, s, (size_t)n);
}
static void put_str(writer *w, const char *s) { put_bytes_str(w, s, strlen(s)); }
static void kv_head(writer *w, const char *k, uint32_t type) {
    put_str(w, k);
    put_u32(w, type);
    w->n_kv++;
}
static void kv_str(writer *w, const char *k, const char *v) {
    kv_head(w, k, GGUF_TYPE_STRING);
    put_str(w, v);
}
static void kv_u32(writer *w, const char *k, uint32_t v) {
    kv_head(w, k, GGUF_TYPE_U32);
    put_u32(w, v);
}
static void kv_f32(writer *w, const char *k, float v) {
    kv_head(w, k, GGUF_TYPE_F32);
    put(w, &v, 4);
}
static void arch_kv_u32(writer *w, const char *arch, const char *k, uint32_t v) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, k);
    kv_u32(w, key, v);
}
static void arch_kv_f32(writer *w, const char *arch, const char *k, float v) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, k);
    kv_f32(w, key, v);
}
static void pad(writer *w) {
    static const char zeros[ALIGNMENT] = {0};
    put(w, zeros, (size_t)((ALIGNMENT - w->pos % ALIGNMENT) % ALIGNMENT));
}

/* One key exactly as the source file holds it. Arrays (of strings, or nested) are copied as
 * their encoded bytes; scalars are re-encoded from the reader's widened value, which is exact:
 * an integer's low bytes are the narrower type's encoding, and an F32 widened to double
 * narrows back unchanged. */
static void copy_kv(writer *w, const gguf_kv *kv) {
    put_bytes_str(w, kv->key.ptr, kv->key.len);
    put_u32(w, kv->type);
    w->n_kv++;
    if (kv->type == GGUF_TYPE_STRING) {
        put_bytes_str(w, kv->v.str.ptr, kv->v.str.len);
    } else if (kv->type == GGUF_TYPE_ARRAY) {
        put_u32(w, kv->v.arr.elem_type);
        put_u64(w, kv->v.arr.count);
        put(w, kv->v.arr.data, (size_t)kv->v.arr.bytes);
    } else if (kv->type == GGUF_TYPE_F32) {
        const float f = (float)kv->v.f64;
        put(w, &f, 4);
    } else if (kv->type == GGUF_TYPE_F64) {
        put(w, &kv->v.f64, 8);
    } else {
        put(w, &kv->v.u64, llmm__gguf_scalar_size(kv->type));
    }
}

/* Another GGUF's tokenizer: every tokenizer.* key is copied, and its token count becomes the
 * model's vocabulary size. */
typedef struct vocab_source {
    gguf_file *f;
    uint32_t n_tokens;
} vocab_source;

static int open_vocab(const char *path, vocab_source *v) {
    llmm_diag d = {{0}};
    if (llmm__gguf_open_file(path, 1, NULL, &v->f, &d) != LLMM_OK) {
        fprintf(stderr, "llmmini-synth: --vocab %s: %s\n", path, d.msg);
        return -1;
    }
    const gguf_kv *tokens = llmm__gguf_find_kv(v->f, "tokenizer.ggml.tokens");
    if (!tokens || tokens->type != GGUF_TYPE_ARRAY || tokens->v.arr.elem_type != GGUF_TYPE_STRING ||
        tokens->v.arr.count == 0 || tokens->v.arr.count > UINT32_MAX) {
        fprintf(stderr, "llmmini-synth: --vocab %s: no tokenizer.ggml.tokens string array "
                        "(give a model or vocabulary-only GGUF)\n", path);
        llmm__gguf_close(v->f);
        v->f = NULL;
        return -1;
    }
    v->n_tokens = (uint32_t)tokens->v.arr.count;
    return 0;
}

static void copy_tokenizer(writer *w, const gguf_file *f) {
    for (uint64_t i = 0; i < f->n_kv; i++) {
        const gguf_str k = f->kv[i].key;
        if (k.len > 10 && !memcmp(k.ptr, "tokenizer.", 10)) copy_kv(w, &f->kv[i]);
    }
}

/* xorshift64*: a seeded stream of floats in [-1, 1). */
static float next_float(uint64_t *s) {
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return (float)((*s * 2685821657736338717ull) >> 40) / (float)(1u << 23) - 1.0f;
}

/* Piece i of the synthetic vocabulary: control, bytes, then letter combinations. */
static void piece_text(uint32_t i, char *buf, size_t cap) {
    static const char *const fixed[] = {"<unk>", "<s>", "</s>"};
    if (i < 3) {
        snprintf(buf, cap, "%s", fixed[i]);
    } else if (i < 259) {
        snprintf(buf, cap, "<0x%02X>", i - 3);
    } else {
        uint32_t k = i - 259;
        size_t n = 0;
        if (k % 2 == 0) n += (size_t)snprintf(buf, cap, "\xe2\x96\x81"); /* leading space */
        k /= 2;
        do {
            buf[n++] = (char)('a' + k % 26);
            k /= 26;
        } while (k && n + 1 < cap);
        buf[n] = '\0';
    }
}

static void write_synthetic_vocab(writer *w, uint32_t n_vocab) {
    char piece[32];
    kv_str(w, "tokenizer.ggml.model", "llama");
    kv_head(w, "tokenizer.ggml.tokens", GGUF_TYPE_ARRAY);
    put_u32(w, GGUF_TYPE_STRING);
    put_u64(w, n_vocab);
    for (uint32_t i = 0; i < n_vocab; i++) {
        piece_text(i, piece, sizeof piece);
        put_str(w, piece);
    }
    kv_head(w, "tokenizer.ggml.scores", GGUF_TYPE_ARRAY);
    put_u32(w, GGUF_TYPE_F32);
    put_u64(w, n_vocab);
    for (uint32_t i = 0; i < n_vocab; i++) {
        float score = i < 259 ? 0.f : -(float)i;
        put(w, &score, 4);
    }
    kv_head(w, "tokenizer.ggml.token_type", GGUF_TYPE_ARRAY);
    put_u32(w, GGUF_TYPE_I32);
    put_u64(w, n_vocab);
    for (uint32_t i = 0; i < n_vocab; i++) put_u32(w, i == 0 ? 2 : i < 3 ? 3 : i < 259 ? 6 : 1);
    kv_u32(w, "tokenizer.ggml.bos_token_id", 1);
}

static uint32_t head_dim_of(const shape *s) { return s->head_dim ? s->head_dim : s->n_embd / s->n_head; }

/* qwen35's keys beyond the attention ones, as the converter names them. */
static void write_delta_net_metadata(writer *w, const shape *s, const delta_net_layout *a) {
    char key[128];
    arch_kv_u32(w, s->arch, "attention.value_length", head_dim_of(s));
    snprintf(key, sizeof key, "%s.rope.dimension_sections", s->arch);
    kv_head(w, key, GGUF_TYPE_ARRAY);
    put_u32(w, GGUF_TYPE_I32);
    put_u64(w, 4);
    for (int i = 0; i < 4; i++) put_u32(w, a->rope_sections[i]);
    arch_kv_u32(w, s->arch, "ssm.conv_kernel", a->ssm_conv_kernel);
    arch_kv_u32(w, s->arch, "ssm.state_size", a->ssm_state);
    arch_kv_u32(w, s->arch, "ssm.group_count", a->ssm_k_heads);
    arch_kv_u32(w, s->arch, "ssm.time_step_rank", a->ssm_v_heads);
    arch_kv_u32(w, s->arch, "ssm.inner_size", a->ssm_v_heads * a->ssm_state);
    arch_kv_u32(w, s->arch, "full_attention_interval", a->full_attn_interval);
}

static void write_metadata(writer *w, const shape *s, const arch_layout *layout, const gguf_file *vocab) {
    kv_str(w, "general.architecture", s->arch);
    kv_str(w, "general.name", "llmmini-synth");
    kv_u32(w, "general.alignment", ALIGNMENT);
    arch_kv_u32(w, s->arch, "vocab_size", s->n_vocab);
    arch_kv_u32(w, s->arch, "context_length", s->n_ctx);
    arch_kv_u32(w, s->arch, "embedding_length", s->n_embd);
    arch_kv_u32(w, s->arch, "block_count", s->n_layer);
    arch_kv_u32(w, s->arch, "feed_forward_length", s->n_ff);
    arch_kv_u32(w, s->arch, "attention.head_count", s->n_head);
    if (layout->conv_kernel) { /* lfm2: KV heads per layer, 0 for a convolution; no head size keys */
        char key[128];
        snprintf(key, sizeof key, "%s.attention.head_count_kv", s->arch);
        kv_head(w, key, GGUF_TYPE_ARRAY);
        put_u32(w, GGUF_TYPE_I32);
        put_u64(w, s->n_layer);
        for (uint32_t il = 0; il < s->n_layer; il++) put_u32(w, is_conv_layer(layout, il) ? 0 : s->n_head_kv);
        arch_kv_u32(w, s->arch, "shortconv.l_cache", layout->conv_kernel);
    } else {
        arch_kv_u32(w, s->arch, "attention.head_count_kv", s->n_head_kv);
        arch_kv_u32(w, s->arch, "attention.key_length", head_dim_of(s));
        arch_kv_u32(w, s->arch, "rope.dimension_count",
                    layout->delta_net ? layout->delta_net->rope_dims : head_dim_of(s));
    }
    if (layout->delta_net) write_delta_net_metadata(w, s, layout->delta_net);
    arch_kv_f32(w, s->arch, "attention.layer_norm_rms_epsilon", s->norm_eps);
    arch_kv_f32(w, s->arch, "rope.freq_base", s->rope_base);
    if (layout->softcaps) {
        arch_kv_f32(w, s->arch, "attn_logit_softcapping", 50.f);
        arch_kv_f32(w, s->arch, "final_logit_softcapping", 30.f);
    }
    if (layout->sliding_window) arch_kv_u32(w, s->arch, "attention.sliding_window", layout->sliding_window);
    if (vocab) copy_tokenizer(w, vocab);
    else write_synthetic_vocab(w, s->n_vocab);
}

/* What a tensor's rows hold: scaled noise (matrices), ones (norms, biases), or the Llama 3
 * rope frequency factors the model's rope_scaling defines. */
enum fill { FILL_NOISE, FILL_ONES, FILL_MINUS_ONES, FILL_LLAMA3_ROPE };

typedef struct tensor_spec {
    char name[64];
    uint64_t ne0, ne1;
    uint32_t type;
    enum fill fill;
    uint64_t offset, bytes;
} tensor_spec;

/* A qwen35 layer's tensors after attn_norm: the tensor the converter names post_attention_norm
 * is the FFN's pre-norm (there is no ffn_norm), then the mixer, then the FFN. */
static size_t qwen35_layer_tensors(const shape *s, const arch_layout *a, uint32_t il, const char **names,
                                   uint64_t (*dims)[2]) {
    const uint64_t E = s->n_embd, hd = head_dim_of(s), Q = hd * s->n_head, KV = hd * s->n_head_kv, F = s->n_ff;
    const delta_net_layout *dn = a->delta_net;
    const uint64_t V = dn->ssm_v_heads, inner = V * dn->ssm_state, conv = 2 * (uint64_t)dn->ssm_k_heads * dn->ssm_state + inner;
    size_t n = 0;
#define T(nm, a0, a1) (names[n] = nm, dims[n][0] = a0, dims[n][1] = a1, n++)
    T("post_attention_norm.weight", E, 1);
    if (is_delta_layer(a, il)) {
        T("attn_qkv.weight", E, conv), T("attn_gate.weight", E, inner), T("ssm_conv1d.weight", dn->ssm_conv_kernel, conv);
        T("ssm_dt.bias", V, 1), T("ssm_a", V, 1), T("ssm_beta.weight", E, V), T("ssm_alpha.weight", E, V);
        T("ssm_norm.weight", dn->ssm_state, 1), T("ssm_out.weight", inner, E);
    } else {
        T("attn_q.weight", E, 2 * Q), T("attn_k.weight", E, KV), T("attn_v.weight", E, KV);
        T("attn_q_norm.weight", hd, 1), T("attn_k_norm.weight", hd, 1), T("attn_output.weight", Q, E);
    }
    T("ffn_gate.weight", E, F), T("ffn_up.weight", E, F), T("ffn_down.weight", F, E);
#undef T
    return n;
}

/* One layer's tensors in the architecture's layout: {suffix, ne0, ne1}; ne1 == 1 is a
 * vector (f32). */
static size_t layer_tensors(const shape *s, const arch_layout *a, uint32_t il, const char *names[20],
                            uint64_t dims[20][2]) {
    const uint64_t E = s->n_embd, hd = head_dim_of(s), Q = hd * s->n_head, KV = hd * s->n_head_kv, F = s->n_ff;
    size_t n = 0;
#define T(nm, a0, a1) (names[n] = nm, dims[n][0] = a0, dims[n][1] = a1, n++)
    T("attn_norm.weight", E, 1);
    if (a->delta_net) return n + qwen35_layer_tensors(s, a, il, names + n, dims + n);
    if (is_conv_layer(a, il)) {
        T("shortconv.in_proj.weight", E, 3 * E), T("shortconv.conv.weight", a->conv_kernel, E);
        T("shortconv.out_proj.weight", E, E);
        T("ffn_norm.weight", E, 1), T("ffn_gate.weight", E, F), T("ffn_up.weight", E, F), T("ffn_down.weight", F, E);
        return n;
    }
    if (a->fused_qkv) T("attn_qkv.weight", E, Q + 2 * KV);
    else T("attn_q.weight", E, Q), T("attn_k.weight", E, KV), T("attn_v.weight", E, KV);
    if (a->qkv_bias) T("attn_q.bias", Q, 1), T("attn_k.bias", KV, 1), T("attn_v.bias", KV, 1);
    if (a->qk_norm) T("attn_q_norm.weight", hd, 1), T("attn_k_norm.weight", hd, 1);
    T("attn_output.weight", Q, E);
    if (a->post_norms) T("post_attention_norm.weight", E, 1);
    T("ffn_norm.weight", E, 1);
    if (a->fused_gate_up) T("ffn_up.weight", E, 2 * F);
    else T("ffn_gate.weight", E, F), T("ffn_up.weight", E, F);
    T("ffn_down.weight", F, E);
    if (a->post_norms) T("post_ffw_norm.weight", E, 1);
#undef T
    return n;
}

static size_t build_tensor_list(const shape *s, const arch_layout *a, uint32_t wtype, tensor_spec *t) {
    size_t n = 0;
    const uint64_t E = s->n_embd;
#define ADD(nm, a0, b0, ty, fl) \
    (snprintf(t[n].name, 64, "%s", nm), t[n].ne0 = a0, t[n].ne1 = b0, t[n].type = ty, t[n].fill = fl, n++)
    ADD("token_embd.weight", E, s->n_vocab, wtype, FILL_NOISE);
    /* lfm2's final norm is named for the embedding, as its converter writes it */
    ADD(a->conv_kernel ? "token_embd_norm.weight" : "output_norm.weight", E, 1, LLMM_TYPE_F32, FILL_ONES);
    if (!s->tied) ADD("output.weight", E, s->n_vocab, wtype, FILL_NOISE);
    if (s->llama3.factor > 0) ADD("rope_freqs.weight", head_dim_of(s) / 2, 1, LLMM_TYPE_F32, FILL_LLAMA3_ROPE);
    for (uint32_t l = 0; l < s->n_layer; l++) {
        const char *names[20];
        uint64_t dims[20][2];
        size_t k_n = layer_tensors(s, a, l, names, dims);
        for (size_t k = 0; k < k_n; k++) {
            char nm[64];
            snprintf(nm, sizeof nm, "blk.%u.%s", l, names[k]);
            /* ssm_a holds -exp(A_log): negative, so that each step decays the DeltaNet state */
            if (!strcmp(names[k], "ssm_a")) ADD(nm, dims[k][0], 1, LLMM_TYPE_F32, FILL_MINUS_ONES);
            else if (dims[k][1] == 1) ADD(nm, dims[k][0], 1, LLMM_TYPE_F32, FILL_ONES);
            else if (!strcmp(names[k], "shortconv.conv.weight") || !strcmp(names[k], "ssm_conv1d.weight"))
                /* taps: F32, as the engine reads them */
                ADD(nm, dims[k][0], dims[k][1], LLMM_TYPE_F32, FILL_NOISE);
            else ADD(nm, dims[k][0], dims[k][1], wtype, FILL_NOISE);
        }
    }
#undef ADD
    uint64_t off = 0;
    for (size_t i = 0; i < n; i++) {
        t[i].offset = off;
        t[i].bytes = llmm__row_bytes(t[i].type, t[i].ne0) * t[i].ne1;
        off += (t[i].bytes + ALIGNMENT - 1) / ALIGNMENT * ALIGNMENT;
    }
    return n;
}

/* Factor each rotated pair's angle is divided by, as the converter stores rope_freqs for
 * rope_scaling "llama3": wavelengths longer than orig_ctx / low_freq_factor are slowed by the
 * full factor, those shorter than orig_ctx / high_freq_factor kept, and the band between
 * blended smoothly. */
static void llama3_rope_factors(const shape *s, float *out, size_t n_pairs) {
    const llama3_rope *r = &s->llama3;
    const double two_pi = 6.283185307179586;
    for (size_t i = 0; i < n_pairs; i++) {
        const double freq = pow(s->rope_base, -(double)i / (double)n_pairs);
        const double periods_in_ctx = r->orig_ctx / (two_pi / freq);
        if (periods_in_ctx > r->high_freq_factor) {
            out[i] = 1.0f;
        } else if (periods_in_ctx < r->low_freq_factor) {
            out[i] = r->factor;
        } else {
            const double smooth = (periods_in_ctx - r->low_freq_factor) / (r->high_freq_factor - r->low_freq_factor);
            out[i] = (float)(1.0 / ((1.0 - smooth) / r->factor + smooth));
        }
    }
}

/* Rows of uniform noise scaled by 1/sqrt(fan_in), so activations stay O(1) through the
 * layers. */
static void write_tensor_data(writer *w, const shape *s, const tensor_spec *t, uint64_t *rng, float *row,
                              void *qrow) {
    const llmm_type_traits *tt = llmm__type_get(t->type);
    const float scale = 1.0f / sqrtf((float)t->ne0);
    for (uint64_t r = 0; r < t->ne1 && !w->failed; r++) {
        if (t->fill == FILL_LLAMA3_ROPE) llama3_rope_factors(s, row, t->ne0);
        else
            for (uint64_t i = 0; i < t->ne0; i++)
                row[i] = t->fill == FILL_ONES ? 1.0f : t->fill == FILL_MINUS_ONES ? -1.0f : next_float(rng) * scale;
        tt->from_float(row, qrow, t->ne0);
        put(w, qrow, llmm__row_bytes(t->type, t->ne0));
    }
    pad(w);
}

/* ------------------------------------------------------------------------- LoRA adapters
 * The layout of the reference engine's converter (tests/test_synth.c checks it against the
 * converter's files in ../shared/lora): four keys (general.architecture, general.type "adapter", adapter.type
 * "lora", adapter.lora.alpha f32), then per adapted weight W, in the base file's tensor order,
 * "<W>.lora_a" with GGUF dims [n_in, rank] and "<W>.lora_b" with [rank, n_out]; the adapted
 * output is W x + scale * B (A x), scale = user_scale * alpha / rank (user_scale when alpha is
 * 0). Data aligned to 32 as the model files. */

/* What --lora-targets names: the projection's tensor in each layer, and the fused tensor that
 * holds it in layouts without its own (phi3: attn_qkv, and ffn_up holding gate and up). */
static const struct lora_target {
    const char *name, *tensor, *fused;
} lora_targets[] = {
    {"q", "attn_q.weight", "attn_qkv.weight"},
    {"k", "attn_k.weight", "attn_qkv.weight"},
    {"v", "attn_v.weight", "attn_qkv.weight"},
    {"o", "attn_output.weight", NULL},
    {"gate", "ffn_gate.weight", "ffn_up.weight"},
    {"up", "ffn_up.weight", NULL},
    {"down", "ffn_down.weight", NULL},
};

#define LORA_DEFAULT_TARGETS "q,k,v,o,gate,up,down"
#define LORA_MAX_RANK 4096u
#define LORA_MAX_TARGETS 16
#define LORA_MAX_SUFFIX 48

/* RMS of scale * B (A x) per output, relative to the RMS of x: the stories260K reference
 * adapters measure 0.07 (rank 8, alpha 16) and 0.08 (rank 4, no alpha); a synthetic model's
 * W x is 0.58, so outputs move clearly without the residual stream being swamped. */
#define LORA_DELTA_RMS 0.08f

typedef struct lora_options {
    uint32_t rank;   /* 0: no adapter */
    float alpha;     /* adapter.lora.alpha; negative: not given (2 x rank) */
    uint32_t type;
    uint64_t seed;   /* default: --seed */
    const char *targets, *out, *base;
} lora_options;

/* A 2-D weight of the base model: its name and GGUF dims [n_in, n_out]. */
typedef struct base_weight {
    char name[GGUF_MAX_NAME];
    uint64_t n_in, n_out;
} base_weight;

/* The part of "blk.N.<suffix>" after the layer number; NULL for tensors outside the layers. */
static const char *layer_suffix(const char *name) {
    if (strncmp(name, "blk.", 4)) return NULL;
    const char *dot = strchr(name + 4, '.');
    return dot ? dot + 1 : NULL;
}

static int has_suffix(const base_weight *w, size_t n, const char *suffix) {
    for (size_t i = 0; i < n; i++) {
        const char *s = layer_suffix(w[i].name);
        if (s && !strcmp(s, suffix)) return 1;
    }
    return 0;
}

/* The tensor suffixes --lora-targets selects in this model (deduplicated; a fused layout's
 * q, k and v all select attn_qkv). -1 with a message when a target matches no tensor. */
static int select_suffixes(const char *targets, const base_weight *w, size_t n,
                           char out[LORA_MAX_TARGETS][LORA_MAX_SUFFIX], size_t *n_out) {
    *n_out = 0;
    for (const char *p = targets; *p;) {
        const size_t len = strcspn(p, ",");
        char name[LORA_MAX_SUFFIX - 8], own[LORA_MAX_SUFFIX];
        if (len == 0 || len >= sizeof name) {
            fprintf(stderr, "llmmini-synth: --lora-targets '%s': empty or overlong entry\n", targets);
            return -1;
        }
        memcpy(name, p, len);
        name[len] = '\0';
        p += len + (p[len] == ',');
        const char *suffix = NULL, *fused = NULL;
        for (size_t k = 0; k < sizeof lora_targets / sizeof *lora_targets && !suffix; k++)
            if (!strcmp(lora_targets[k].name, name)) suffix = lora_targets[k].tensor, fused = lora_targets[k].fused;
        if (!suffix) snprintf(own, sizeof own, "%s.weight", name), suffix = own;
        if (!has_suffix(w, n, suffix)) suffix = fused && has_suffix(w, n, fused) ? fused : NULL;
        if (!suffix) {
            fprintf(stderr, "llmmini-synth: --lora-targets: '%s' matches no weight of this model "
                            "(names: q, k, v, o, gate, up, down, or a tensor stem such as attn_q)\n", name);
            return -1;
        }
        size_t k = 0;
        while (k < *n_out && strcmp(out[k], suffix)) k++;
        if (k == *n_out) {
            if (*n_out == LORA_MAX_TARGETS) {
                fprintf(stderr, "llmmini-synth: --lora-targets: more than %d tensors\n", LORA_MAX_TARGETS);
                return -1;
            }
            snprintf(out[(*n_out)++], LORA_MAX_SUFFIX, "%s", suffix);
        }
    }
    return 0;
}

/* Keeps, in order, the weights whose layer suffix is selected; the count kept. */
static size_t keep_targets(base_weight *w, size_t n, char sel[LORA_MAX_TARGETS][LORA_MAX_SUFFIX], size_t n_sel) {
    size_t kept = 0;
    for (size_t i = 0; i < n; i++) {
        const char *s = layer_suffix(w[i].name);
        for (size_t k = 0; s && k < n_sel; k++)
            if (!strcmp(s, sel[k])) {
                w[kept++] = w[i];
                break;
            }
    }
    return kept;
}

/* The converter's rule: a row that does not split into whole blocks (lora_b's rows hold rank
 * values) is written as F16 instead. */
static uint32_t lora_tensor_type(uint32_t type, uint64_t ne0) {
    return ne0 % llmm__type_get(type)->block_size ? LLMM_TYPE_F16 : type;
}

/* A standard normal value (Box-Muller over two uniforms of the stream). */
static float next_gauss(uint64_t *s) {
    const float u1 = 0.5f * (1.0f - next_float(s)); /* (0, 1] */
    const float u2 = next_float(s);
    return sqrtf(-2.0f * logf(u1)) * cosf(3.14159265f * u2);
}

/* ne1 rows of ne0 normal values times sd, in type (fallback applied), then the padding. */
static void write_lora_rows(writer *w, uint32_t type, uint64_t ne0, uint64_t ne1, float sd, uint64_t *rng,
                            float *row, void *qrow) {
    type = lora_tensor_type(type, ne0);
    const llmm_type_traits *tt = llmm__type_get(type);
    for (uint64_t r = 0; r < ne1 && !w->failed; r++) {
        for (uint64_t i = 0; i < ne0; i++) row[i] = next_gauss(rng) * sd;
        tt->from_float(row, qrow, ne0);
        put(w, qrow, llmm__row_bytes(type, ne0));
    }
    pad(w);
}

static uint64_t lora_tensor_bytes(uint32_t type, uint64_t ne0, uint64_t ne1) {
    const uint64_t b = llmm__row_bytes(lora_tensor_type(type, ne0), ne0) * ne1;
    return (b + ALIGNMENT - 1) / ALIGNMENT * ALIGNMENT;
}

static void put_tensor_info(writer *w, const char *base, const char *part, uint64_t ne0, uint64_t ne1,
                            uint32_t type, uint64_t offset) {
    char name[GGUF_MAX_NAME + 8];
    snprintf(name, sizeof name, "%s.%s", base, part);
    put_str(w, name);
    put_u32(w, 2);
    put_u64(w, ne0);
    put_u64(w, ne1);
    put_u32(w, lora_tensor_type(type, ne0));
    put_u64(w, offset);
}

/* Writes the adapter for the selected weights w[0..n): A ~ N(0, 1/n_in), so each (A x)_j has
 * the RMS of x, and B ~ N(0, sd_b) with sd_b chosen so that scale * B (A x) has
 * LORA_DELTA_RMS times it whatever the rank and alpha. */
static int write_adapter(const lora_options *lo, const char *arch, const base_weight *wt, size_t n) {
    const float alpha = lo->alpha < 0 ? 2.0f * (float)lo->rank : lo->alpha;
    const float scale = alpha > 0 ? alpha / (float)lo->rank : 1.0f;
    const float sd_b = LORA_DELTA_RMS / (scale * sqrtf((float)lo->rank));
    uint64_t widest = lo->rank;
    for (size_t i = 0; i < n; i++) widest = wt[i].n_in > widest ? wt[i].n_in : widest;
    float *row = malloc(sizeof(float) * widest);
    void *qrow = malloc(sizeof(float) * widest);
    writer w = {NULL, 0, 0, 0};
    if (row && qrow) w.f = fopen(lo->out, "wb");
    if (!w.f) {
        fprintf(stderr, "llmmini-synth: cannot write '%s': %s\n", lo->out, strerror(errno));
        free(row);
        free(qrow);
        return 1;
    }
    put(&w, "GGUF", 4);
    put_u32(&w, 3);
    put_u64(&w, 2 * (uint64_t)n);
    put_u64(&w, 4);
    kv_str(&w, "general.architecture", arch);
    kv_str(&w, "general.type", "adapter");
    kv_str(&w, "adapter.type", "lora");
    kv_f32(&w, "adapter.lora.alpha", alpha);
    uint64_t off = 0;
    for (size_t i = 0; i < n; i++) {
        put_tensor_info(&w, wt[i].name, "lora_a", wt[i].n_in, lo->rank, lo->type, off);
        off += lora_tensor_bytes(lo->type, wt[i].n_in, lo->rank);
        put_tensor_info(&w, wt[i].name, "lora_b", lo->rank, wt[i].n_out, lo->type, off);
        off += lora_tensor_bytes(lo->type, lo->rank, wt[i].n_out);
    }
    pad(&w);
    uint64_t rng = (lo->seed * 0x9E3779B97F4A7C15ull ^ 0xD1B54A32D192ED03ull) | 1; /* not the model's stream */
    for (size_t i = 0; i < n && !w.failed; i++) {
        write_lora_rows(&w, lo->type, wt[i].n_in, lo->rank, 1.0f / sqrtf((float)wt[i].n_in), &rng, row, qrow);
        write_lora_rows(&w, lo->type, lo->rank, wt[i].n_out, sd_b, &rng, row, qrow);
    }
    int rc = w.failed | (fclose(w.f) != 0);
    fprintf(stderr, "llmmini-synth: %s LoRA adapter for %s, rank %u, alpha %g, %s%s, %zu weights, %.1f MiB%s\n",
            lo->out, arch, lo->rank, (double)alpha, llmm__type_get(lo->type)->name,
            lora_tensor_type(lo->type, lo->rank) != lo->type ? " (lora_b f16: rank not whole blocks)" : "", n,
            (double)w.pos / (1 << 20), rc ? " (WRITE FAILED)" : "");
    free(row);
    free(qrow);
    return rc;
}

/* Selects the targets among the base weights w[0..n) (reordered in place) and writes. */
static int write_adapter_for(const lora_options *lo, const char *arch, base_weight *w, size_t n) {
    char sel[LORA_MAX_TARGETS][LORA_MAX_SUFFIX];
    size_t n_sel;
    if (select_suffixes(lo->targets, w, n, sel, &n_sel)) return 2;
    return write_adapter(lo, arch, w, keep_targets(w, n, sel, n_sel));
}

/* The adapter for the model this run synthesizes (whether -o writes it or not). */
static int write_adapter_for_shape(const shape *s, const arch_layout *a, const lora_options *lo) {
    const size_t cap = 4 + 20 * (size_t)s->n_layer;
    tensor_spec *t = calloc(cap, sizeof *t);
    base_weight *w = calloc(cap, sizeof *w);
    int rc = 1;
    if (!t || !w) {
        fprintf(stderr, "llmmini-synth: out of memory\n");
    } else {
        const size_t n_t = build_tensor_list(s, a, LLMM_TYPE_F32, t);
        size_t n = 0;
        for (size_t i = 0; i < n_t; i++)
            if (t[i].ne1 != 1) {
                snprintf(w[n].name, sizeof w[n].name, "%s", t[i].name);
                w[n].n_in = t[i].ne0;
                w[n++].n_out = t[i].ne1;
            }
        rc = write_adapter_for(lo, s->arch, w, n);
    }
    free(t);
    free(w);
    return rc;
}

/* The 2-D tensors of an existing model file; -1 with a message when one's adapter names would
 * pass ggml's 64-byte name limit. */
static int file_weights(const gguf_file *f, base_weight *w, size_t *n) {
    *n = 0;
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        if (t->n_dims != 2) continue;
        if (t->name.len + sizeof ".lora_a" > GGUF_MAX_NAME) {
            fprintf(stderr, "llmmini-synth: --lora-base: tensor '%.*s': name too long for its adapter tensors\n",
                    (int)t->name.len, t->name.ptr);
            return -1;
        }
        memcpy(w[*n].name, t->name.ptr, t->name.len);
        w[*n].name[t->name.len] = '\0';
        w[*n].n_in = (uint64_t)t->ne[0];
        w[(*n)++].n_out = (uint64_t)t->ne[1];
    }
    return 0;
}

/* The adapter for --lora-base: its architecture, tensor names, order and shapes. */
static int write_adapter_for_file(const lora_options *lo) {
    gguf_file *f = NULL;
    llmm_diag d = {{0}};
    if (llmm__gguf_open_file(lo->base, 1, NULL, &f, &d) != LLMM_OK) {
        fprintf(stderr, "llmmini-synth: --lora-base %s: %s\n", lo->base, d.msg);
        return 1;
    }
    const gguf_kv *arch = llmm__gguf_find_kv(f, "general.architecture");
    base_weight *w = calloc(f->n_tensors ? f->n_tensors : 1, sizeof *w);
    char arch_name[64];
    size_t n = 0;
    int rc = 1;
    if (!arch || arch->type != GGUF_TYPE_STRING || arch->v.str.len == 0 || arch->v.str.len >= sizeof arch_name) {
        fprintf(stderr, "llmmini-synth: --lora-base %s: no general.architecture string\n", lo->base);
    } else if (!w) {
        fprintf(stderr, "llmmini-synth: out of memory\n");
    } else if (!file_weights(f, w, &n)) {
        memcpy(arch_name, arch->v.str.ptr, arch->v.str.len);
        arch_name[arch->v.str.len] = '\0';
        rc = write_adapter_for(lo, arch_name, w, n);
    }
    free(w);
    llmm__gguf_close(f);
    return rc;
}

static int usage(int rc) {
    fprintf(rc ? stderr : stdout,
            "usage: llmmini-synth -o OUT.gguf [--preset NAME] [--type f32|f16|bf16|q8_0|q4_0] [--vocab FILE.gguf]\n"
            "                     [--dim N] [--layers N] [--heads N] [--kv-heads N] [--ff N] [--n-vocab N] [--seed S]\n"
            "Writes a GGUF with seeded random weights (default preset 0.5b, type q4_0). Presets:\n"
            "  real models: tinyllama-1.1b, llama-3.2-1b, smollm2-135m, qwen2.5-0.5b, qwen3-0.6b,\n"
            "               phi3-mini, gemma2-2b, gemma3-270m, gemma3-1b, smollm3-3b, lfm2-350m, lfm2-1.2b,\n"
            "               qwen3.5-0.8b\n"
            "  sizes (llama, 32000 vocab): tiny, 0.5b, 1b, 3b, 8b\n"
            "  --vocab FILE  copy every tokenizer.* key of FILE (a model or vocabulary-only GGUF); its token\n"
            "                count sets the vocabulary size (--n-vocab is then ignored)\n"
            "  --n-vocab N   size of the synthetic SentencePiece vocabulary (without --vocab)\n"
            "Other quantizations: convert the f16 or f32 output with llmmini-quantize.\n"
            "LoRA adapter (GGUF, the reference engine's layout) for the model above, or for --lora-base:\n"
            "  --lora-rank R       write an adapter of rank R (1-4096); needs --lora-out, and -o only for\n"
            "                      the model itself\n"
            "  --lora-out FILE     the adapter's path\n"
            "  --lora-base FILE    adapt an existing model GGUF instead (architecture, names, shapes); no -o\n"
            "  --lora-targets L    comma-separated, default q,k,v,o,gate,up,down (or a tensor stem such as\n"
            "                      attn_qkv); a fused layout's q/k/v adapt attn_qkv, its gate ffn_up\n"
            "  --lora-alpha A      adapter.lora.alpha, default 2 x rank; 0: none (scale = user scale)\n"
            "  --lora-type T       f32 (default), f16, bf16, q8_0 (rows not a multiple of 32: f16, as the\n"
            "                      converter does)\n"
            "  --lora-seed S       default: --seed\n");
    return rc;
}

static int parse_type(const char *s, uint32_t *out) {
    static const struct { const char *n; uint32_t t; } types[] = {
        {"f32", LLMM_TYPE_F32}, {"f16", LLMM_TYPE_F16}, {"bf16", LLMM_TYPE_BF16},
        {"q8_0", LLMM_TYPE_Q8_0}, {"q4_0", LLMM_TYPE_Q4_0}};
    for (size_t i = 0; i < sizeof types / sizeof *types; i++)
        if (!strcmp(s, types[i].n)) return *out = types[i].t, 0;
    return -1;
}

typedef struct options {
    shape s;
    uint32_t wtype;
    uint64_t seed;
    const char *out, *vocab;
    lora_options lora;
    int lora_given, lora_seed_given; /* a --lora-* option other than --lora-rank; --lora-seed */
} options;

/* A whole decimal number in [lo, hi]; -1 otherwise. */
static int parse_uint(const char *v, unsigned long long lo, unsigned long long hi, unsigned long long *out) {
    char *end = NULL;
    errno = 0;
    const unsigned long long x = strtoull(v, &end, 10);
    if (*v < '0' || *v > '9' || *end || errno || x < lo || x > hi) return -1;
    return *out = x, 0;
}

/* One --lora-* option and its value; -1 with a message when either is bad. */
static int parse_lora_arg(const char *a, const char *v, options *o) {
    lora_options *lo = &o->lora;
    unsigned long long x;
    char *end = NULL;
    o->lora_given |= strcmp(a, "--lora-rank") != 0;
    if (!strcmp(a, "--lora-rank")) {
        if (parse_uint(v, 1, LORA_MAX_RANK, &x))
            return fprintf(stderr, "llmmini-synth: --lora-rank %s: give 1 to %u\n", v, LORA_MAX_RANK), -1;
        lo->rank = (uint32_t)x;
    } else if (!strcmp(a, "--lora-alpha")) {
        lo->alpha = strtof(v, &end);
        if (end == v || *end || !(lo->alpha >= 0 && lo->alpha < 1e30f))
            return fprintf(stderr, "llmmini-synth: --lora-alpha %s: give a number >= 0\n", v), -1;
    } else if (!strcmp(a, "--lora-type")) {
        if (parse_type(v, &lo->type) || lo->type == LLMM_TYPE_Q4_0)
            return fprintf(stderr, "llmmini-synth: --lora-type %s: give f32, f16, bf16 or q8_0\n", v), -1;
    } else if (!strcmp(a, "--lora-seed")) {
        if (parse_uint(v, 0, UINT64_MAX, &x))
            return fprintf(stderr, "llmmini-synth: --lora-seed %s: give a number\n", v), -1;
        lo->seed = x;
        o->lora_seed_given = 1;
    } else if (!strcmp(a, "--lora-targets")) {
        lo->targets = v;
    } else if (!strcmp(a, "--lora-out")) {
        lo->out = v;
    } else if (!strcmp(a, "--lora-base")) {
        lo->base = v;
    } else {
        return fprintf(stderr, "llmmini-synth: unknown option %s (see --help)\n", a), -1;
    }
    return 0;
}

/* 0: run; otherwise the exit status (0 after --help). */
static int parse_args(int argc, char **argv, options *o, int *done) {
    *o = (options){presets[1], LLMM_TYPE_Q4_0, 1, NULL, NULL,
                   {0, -1.0f, LLMM_TYPE_F32, 0, LORA_DEFAULT_TARGETS, NULL, NULL}, 0, 0};
    *done = 0;
    shape *s = &o->s;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        uint32_t *field = !strcmp(a, "--dim") ? &s->n_embd : !strcmp(a, "--layers") ? &s->n_layer
                        : !strcmp(a, "--heads") ? &s->n_head : !strcmp(a, "--kv-heads") ? &s->n_head_kv
                        : !strcmp(a, "--ff") ? &s->n_ff : !strcmp(a, "--n-vocab") ? &s->n_vocab : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) return *done = 1, usage(0);
        if (!v) return *done = 1, usage(2);
        i++;
        if (field) *field = (uint32_t)strtoul(v, NULL, 10);
        else if (!strcmp(a, "-o")) o->out = v;
        else if (!strcmp(a, "--vocab")) o->vocab = v;
        else if (!strcmp(a, "--seed")) o->seed = strtoull(v, NULL, 10) | 1;
        else if (!strcmp(a, "--type")) {
            if (parse_type(v, &o->wtype)) return *done = 1, usage(2);
        } else if (!strncmp(a, "--lora-", 7)) {
            if (parse_lora_arg(a, v, o)) return *done = 1, 2;
        } else if (!strcmp(a, "--preset")) {
            size_t k = 0;
            while (k < sizeof presets / sizeof *presets && strcmp(presets[k].name, v)) k++;
            if (k == sizeof presets / sizeof *presets) return *done = 1, usage(2);
            *s = presets[k];
        } else {
            return *done = 1, usage(2);
        }
    }
    if (!o->lora_seed_given) o->lora.seed = o->seed;
    return 0;
}

/* What no single option shows wrong; 1 with a message. */
static int lora_conflicts(const options *o) {
    const lora_options *lo = &o->lora;
    const char *why = o->lora_given && !lo->rank ? "the --lora-* options need --lora-rank R"
                    : lo->rank && !lo->out ? "--lora-rank needs --lora-out FILE"
                    : lo->base && o->out ? "--lora-base writes only the adapter for that file: give no -o"
                    : lo->out && o->out && !strcmp(lo->out, o->out) ? "--lora-out and -o name the same file"
                    : NULL;
    if (why) fprintf(stderr, "llmmini-synth: %s\n", why);
    return why != NULL;
}

static int shape_ok(const shape *s, const llmm_type_traits *tt, int copied_vocab) {
    return s->n_head && s->n_head_kv && s->n_head % s->n_head_kv == 0 && (s->head_dim || s->n_embd % s->n_head == 0) &&
           (copied_vocab || s->n_vocab >= 300) && s->n_embd % tt->block_size == 0 && s->n_ff % tt->block_size == 0 &&
           (head_dim_of(s) * s->n_head) % tt->block_size == 0 && head_dim_of(s) % 2 == 0;
}

static int write_model(const options *o, const arch_layout *layout, const gguf_file *vocab) {
    const shape *s = &o->s;
    const llmm_type_traits *tt = llmm__type_get(o->wtype);
    tensor_spec *t = calloc(4 + 20 * (size_t)s->n_layer, sizeof *t);
    size_t widest = s->n_ff > s->n_embd ? s->n_ff : s->n_embd;
    if ((size_t)head_dim_of(s) * s->n_head > widest) widest = (size_t)head_dim_of(s) * s->n_head;
    const delta_net_layout *dn = layout->delta_net; /* ssm_out's rows: its inner width, not --dim's */
    if (dn && (size_t)dn->ssm_v_heads * dn->ssm_state > widest) widest = (size_t)dn->ssm_v_heads * dn->ssm_state;
    float *row = malloc(sizeof(float) * widest);
    void *qrow = malloc(sizeof(float) * widest);
    writer w = {fopen(o->out, "wb"), 0, 0, 0};
    if (!t || !row || !qrow || !w.f) {
        fprintf(stderr, "llmmini-synth: cannot write '%s': %s\n", o->out, strerror(errno));
        if (w.f) fclose(w.f);
        free(t);
        free(row);
        free(qrow);
        return 1;
    }
    size_t n_t = build_tensor_list(s, layout, o->wtype, t);
    writer count = {NULL, 0, 0, 0};
    write_metadata(&count, s, layout, vocab);
    put(&w, "GGUF", 4);
    put_u32(&w, 3);
    put_u64(&w, n_t);
    put_u64(&w, count.n_kv);
    write_metadata(&w, s, layout, vocab);
    for (size_t i = 0; i < n_t; i++) {
        put_str(&w, t[i].name);
        put_u32(&w, t[i].ne1 == 1 ? 1 : 2);
        put_u64(&w, t[i].ne0);
        if (t[i].ne1 != 1) put_u64(&w, t[i].ne1);
        put_u32(&w, t[i].type);
        put_u64(&w, t[i].offset);
    }
    pad(&w);
    uint64_t rng = o->seed * 0x9E3779B97F4A7C15ull | 1;
    for (size_t i = 0; i < n_t && !w.failed; i++) {
        write_tensor_data(&w, s, &t[i], &rng, row, qrow);
        if (i % 16 == 15) fprintf(stderr, "\rllmmini-synth: %zu/%zu tensors", i + 1, n_t);
    }
    int rc = w.failed | (fclose(w.f) != 0);
    fprintf(stderr, "\rllmmini-synth: %s %s, %zu tensors, vocab %u%s, %.1f MiB%s\n", o->out, tt->name, n_t,
            s->n_vocab, vocab ? " (copied)" : "", (double)w.pos / (1 << 20), rc ? " (WRITE FAILED)" : "");
    free(t);
    free(row);
    free(qrow);
    return rc;
}

int main(int argc, char **argv) {
    options o;
    int done;
    int rc = parse_args(argc, argv, &o, &done);
    if (done) return rc;
    if (lora_conflicts(&o)) return 2;
    if (o.lora.base) return write_adapter_for_file(&o.lora);
    vocab_source vocab = {NULL, 0};
    if (o.vocab) {
        if (open_vocab(o.vocab, &vocab)) return 1;
        o.s.n_vocab = vocab.n_tokens;
    }
    const llmm_type_traits *tt = llmm__type_get(o.wtype);
    if ((!o.out && !o.lora.rank) || !shape_ok(&o.s, tt, vocab.f != NULL)) {
        fprintf(stderr, "llmmini-synth: need -o (or --lora-rank and --lora-out alone), heads dividing dim, "
                        "kv-heads dividing heads, vocab >= 300, dim and ff multiples of the type's block size\n");
        llmm__gguf_close(vocab.f);
        return 2;
    }
    rc = o.out ? write_model(&o, layout_of(o.s.arch), vocab.f) : 0;
    if (!rc && o.lora.rank) rc = write_adapter_for_shape(&o.s, layout_of(o.s.arch), &o.lora);
    llmm__gguf_close(vocab.f);
    return rc;
}
