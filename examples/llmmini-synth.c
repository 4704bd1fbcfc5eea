/* llmmini-synth: write a llama-shaped GGUF with seeded random weights, for benchmarks at
 * realistic sizes (0.5-8 B parameters) without downloading anything. The vocabulary is a
 * synthetic SentencePiece one (byte tokens plus generated pieces), so the file tokenizes. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quant.h"

#define ALIGNMENT 32

typedef struct shape {
    const char *name;
    const char *arch;   /* general.architecture */
    uint32_t n_embd, n_layer, n_head, n_head_kv, n_ff, n_vocab, n_ctx;
    uint32_t head_dim;  /* 0: n_embd / n_head */
} shape;

/* Presets follow public model shapes. The llama ones keep a 32000 vocab; the others use
 * their model's vocabulary size (the pieces are synthetic either way). */
static const shape presets[] = {
    {"tiny", "llama", 64, 2, 4, 2, 160, 512, 2048, 0},
    {"0.5b", "llama", 896, 24, 14, 2, 4864, 32000, 4096, 0},      /* Qwen2.5-0.5B widths */
    {"1b", "llama", 2048, 22, 32, 4, 5632, 32000, 4096, 0},       /* TinyLlama-1.1B */
    {"3b", "llama", 3072, 28, 24, 8, 8192, 32000, 4096, 0},       /* Llama-3.2-3B widths */
    {"8b", "llama", 4096, 32, 32, 8, 14336, 32000, 8192, 0},      /* Llama-3-8B widths */
    {"qwen2.5-0.5b", "qwen2", 896, 24, 14, 2, 4864, 151936, 32768, 0},
    {"qwen3-0.6b", "qwen3", 1024, 28, 16, 8, 3072, 151936, 40960, 128},
    {"phi3-mini", "phi3", 3072, 32, 32, 32, 8192, 32064, 4096, 0},
    {"gemma2-2b", "gemma2", 2304, 26, 8, 4, 9216, 256000, 8192, 256},
};

/* What each architecture adds to the llama layout (see lib/arch.c). */
typedef struct arch_layout {
    const char *arch;
    int qkv_bias, qk_norm, fused_qkv, fused_gate_up, post_norms, tied_output, softcaps;
} arch_layout;

static const arch_layout layouts[] = {
    {"llama", 0, 0, 0, 0, 0, 0, 0},
    {"qwen2", 1, 0, 0, 0, 0, 0, 0},
    {"qwen3", 0, 1, 0, 0, 0, 0, 0},
    {"phi3", 0, 0, 1, 1, 0, 0, 0},
    {"gemma2", 0, 0, 0, 0, 1, 1, 1},
};

static const arch_layout *layout_of(const char *arch) {
    for (size_t i = 0; i < sizeof layouts / sizeof *layouts; i++)
        if (!strcmp(layouts[i].arch, arch)) return &layouts[i];
    return NULL;
}

typedef struct writer {
    FILE *f;
    uint64_t pos;
    int failed;
} writer;

static void put(writer *w, const void *p, size_t n) {
    if (w->failed || fwrite(p, 1, n, w->f) != n) w->failed = 1;
    w->pos += n;
}
static void put_u32(writer *w, uint32_t v) { put(w, &v, 4); } /* little-endian hosts only */
static void put_u64(writer *w, uint64_t v) { put(w, &v, 8); }
static void put_str(writer *w, const char *s) {
    put_u64(w, strlen(s));
    put(w, s, strlen(s));
}
static void kv_str(writer *w, const char *k, const char *v) {
    put_str(w, k);
    put_u32(w, 8);
    put_str(w, v);
}
static void kv_u32(writer *w, const char *k, uint32_t v) {
    put_str(w, k);
    put_u32(w, 4);
    put_u32(w, v);
}
static void kv_f32(writer *w, const char *k, float v) {
    put_str(w, k);
    put_u32(w, 6);
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

static void write_vocab(writer *w, uint32_t n_vocab) {
    char piece[32];
    put_str(w, "tokenizer.ggml.tokens");
    put_u32(w, 9);
    put_u32(w, 8);
    put_u64(w, n_vocab);
    for (uint32_t i = 0; i < n_vocab; i++) {
        piece_text(i, piece, sizeof piece);
        put_str(w, piece);
    }
    put_str(w, "tokenizer.ggml.scores");
    put_u32(w, 9);
    put_u32(w, 6);
    put_u64(w, n_vocab);
    for (uint32_t i = 0; i < n_vocab; i++) {
        float score = i < 259 ? 0.f : -(float)i;
        put(w, &score, 4);
    }
    put_str(w, "tokenizer.ggml.token_type");
    put_u32(w, 9);
    put_u32(w, 5);
    put_u64(w, n_vocab);
    for (uint32_t i = 0; i < n_vocab; i++) put_u32(w, i == 0 ? 2 : i < 3 ? 3 : i < 259 ? 6 : 1);
}

typedef struct tensor_spec {
    char name[64];
    uint64_t ne0, ne1;
    uint32_t type;
    uint64_t offset, bytes;
} tensor_spec;

static uint32_t head_dim_of(const shape *s) { return s->head_dim ? s->head_dim : s->n_embd / s->n_head; }

/* One layer's tensors in the architecture's layout: {suffix, ne0, ne1}; ne1 == 1 is a
 * vector (f32). */
static size_t layer_tensors(const shape *s, const arch_layout *a, const char *names[20], uint64_t dims[20][2]) {
    const uint64_t E = s->n_embd, hd = head_dim_of(s), Q = hd * s->n_head, KV = hd * s->n_head_kv, F = s->n_ff;
    size_t n = 0;
#define T(nm, a0, a1) (names[n] = nm, dims[n][0] = a0, dims[n][1] = a1, n++)
    T("attn_norm.weight", E, 1);
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
#define ADD(nm, a0, b0, ty) (snprintf(t[n].name, 64, "%s", nm), t[n].ne0 = a0, t[n].ne1 = b0, t[n].type = ty, n++)
    ADD("token_embd.weight", E, s->n_vocab, wtype);
    ADD("output_norm.weight", E, 1, LLMM_TYPE_F32);
    if (!a->tied_output) ADD("output.weight", E, s->n_vocab, wtype);
    for (uint32_t l = 0; l < s->n_layer; l++) {
        const char *names[20];
        uint64_t dims[20][2];
        size_t k_n = layer_tensors(s, a, names, dims);
        for (size_t k = 0; k < k_n; k++) {
            char nm[64];
            snprintf(nm, sizeof nm, "blk.%u.%s", l, names[k]);
            ADD(nm, dims[k][0], dims[k][1], dims[k][1] == 1 ? LLMM_TYPE_F32 : wtype);
        }
    }
#undef ADD
    uint64_t off = 0;
    for (size_t i = 0; i < n; i++) {
        t[i].offset = off;
        t[i].bytes = llmm_row_bytes(t[i].type, t[i].ne0) * t[i].ne1;
        off += (t[i].bytes + ALIGNMENT - 1) / ALIGNMENT * ALIGNMENT;
    }
    return n;
}

/* Rows of uniform noise scaled by 1/sqrt(fan_in), so activations stay O(1) through the
 * layers; norm weights are 1. */
static void write_tensor_data(writer *w, const tensor_spec *t, uint64_t *rng, float *row, void *qrow) {
    const llmm_type_traits *tt = llmm_type_get(t->type);
    const float scale = t->ne1 == 1 ? 0.f : 1.0f / sqrtf((float)t->ne0);
    for (uint64_t r = 0; r < t->ne1 && !w->failed; r++) {
        for (uint64_t i = 0; i < t->ne0; i++) row[i] = scale == 0.f ? 1.0f : next_float(rng) * scale;
        tt->from_float(row, qrow, t->ne0);
        put(w, qrow, llmm_row_bytes(t->type, t->ne0));
    }
    pad(w);
}

static int usage(int rc) {
    fprintf(rc ? stderr : stdout,
            "usage: llmmini-synth -o OUT.gguf [--preset NAME] [--type f32|f16|q8_0|q4_0]\n"
            "                     [--dim N] [--layers N] [--heads N] [--kv-heads N] [--ff N] [--vocab N] [--seed S]\n"
            "Writes a GGUF with seeded random weights (default preset 0.5b, type q4_0). Presets:\n"
            "  llama: tiny, 0.5b, 1b (TinyLlama), 3b, 8b; qwen2.5-0.5b, qwen3-0.6b, phi3-mini, gemma2-2b\n");
    return rc;
}

static int parse_type(const char *s, uint32_t *out) {
    static const struct { const char *n; uint32_t t; } types[] = {
        {"f32", LLMM_TYPE_F32}, {"f16", LLMM_TYPE_F16}, {"q8_0", LLMM_TYPE_Q8_0}, {"q4_0", LLMM_TYPE_Q4_0}};
    for (size_t i = 0; i < 4; i++)
        if (!strcmp(s, types[i].n)) return *out = types[i].t, 0;
    return -1;
}

int main(int argc, char **argv) {
    shape s = presets[1];
    uint32_t wtype = LLMM_TYPE_Q4_0;
    uint64_t seed = 1;
    const char *out = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        uint32_t *field = !strcmp(a, "--dim") ? &s.n_embd : !strcmp(a, "--layers") ? &s.n_layer
                        : !strcmp(a, "--heads") ? &s.n_head : !strcmp(a, "--kv-heads") ? &s.n_head_kv
                        : !strcmp(a, "--ff") ? &s.n_ff : !strcmp(a, "--vocab") ? &s.n_vocab : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) return usage(0);
        if (!v) return usage(2);
        i++;
        if (field) *field = (uint32_t)strtoul(v, NULL, 10);
        else if (!strcmp(a, "-o")) out = v;
        else if (!strcmp(a, "--seed")) seed = strtoull(v, NULL, 10) | 1;
        else if (!strcmp(a, "--type")) {
            if (parse_type(v, &wtype)) return usage(2);
        } else if (!strcmp(a, "--preset")) {
            size_t k = 0;
            while (k < sizeof presets / sizeof *presets && strcmp(presets[k].name, v)) k++;
            if (k == sizeof presets / sizeof *presets) return usage(2);
            s = presets[k];
        } else {
            return usage(2);
        }
    }
    const llmm_type_traits *tt = llmm_type_get(wtype);
    if (!out || !s.n_head || !s.n_head_kv || s.n_head % s.n_head_kv || (!s.head_dim && s.n_embd % s.n_head) ||
        s.n_vocab < 300 || s.n_embd % tt->block_size || s.n_ff % tt->block_size ||
        (head_dim_of(&s) * s.n_head) % tt->block_size || head_dim_of(&s) % 2) {
        fprintf(stderr, "llmmini-synth: need -o, heads dividing dim, kv-heads dividing heads, vocab >= 300, "
                        "dim and ff multiples of the type's block size\n");
        return 2;
    }
    const arch_layout *layout = layout_of(s.arch);
    tensor_spec *t = calloc(3 + 20 * (size_t)s.n_layer, sizeof *t);
    size_t widest = s.n_ff > s.n_embd ? s.n_ff : s.n_embd;
    if ((size_t)head_dim_of(&s) * s.n_head > widest) widest = (size_t)head_dim_of(&s) * s.n_head;
    float *row = malloc(sizeof(float) * widest);
    void *qrow = malloc(sizeof(float) * widest);
    writer w = {fopen(out, "wb"), 0, 0};
    if (!t || !row || !qrow || !w.f) {
        fprintf(stderr, "llmmini-synth: cannot write '%s': %s\n", out, strerror(errno));
        return 1;
    }
    size_t n_t = build_tensor_list(&s, layout, wtype, t);
    put(&w, "GGUF", 4);
    put_u32(&w, 3);
    put_u64(&w, n_t);
    put_u64(&w, 18 + (layout->softcaps ? 3 : 0));
    kv_str(&w, "general.architecture", s.arch);
    kv_str(&w, "general.name", "llmmini-synth");
    kv_u32(&w, "general.alignment", ALIGNMENT);
    arch_kv_u32(&w, s.arch, "context_length", s.n_ctx);
    arch_kv_u32(&w, s.arch, "embedding_length", s.n_embd);
    arch_kv_u32(&w, s.arch, "block_count", s.n_layer);
    arch_kv_u32(&w, s.arch, "feed_forward_length", s.n_ff);
    arch_kv_u32(&w, s.arch, "attention.head_count", s.n_head);
    arch_kv_u32(&w, s.arch, "attention.head_count_kv", s.n_head_kv);
    arch_kv_u32(&w, s.arch, "attention.key_length", head_dim_of(&s));
    arch_kv_u32(&w, s.arch, "rope.dimension_count", head_dim_of(&s));
    arch_kv_f32(&w, s.arch, "attention.layer_norm_rms_epsilon", 1e-5f);
    arch_kv_f32(&w, s.arch, "rope.freq_base", 10000.f);
    if (layout->softcaps) {
        arch_kv_f32(&w, s.arch, "attn_logit_softcapping", 50.f);
        arch_kv_f32(&w, s.arch, "final_logit_softcapping", 30.f);
        arch_kv_u32(&w, s.arch, "attention.sliding_window", 4096);
    }
    kv_str(&w, "tokenizer.ggml.model", "llama");
    write_vocab(&w, s.n_vocab);
    kv_u32(&w, "tokenizer.ggml.bos_token_id", 1);
    for (size_t i = 0; i < n_t; i++) {
        put_str(&w, t[i].name);
        put_u32(&w, t[i].ne1 == 1 ? 1 : 2);
        put_u64(&w, t[i].ne0);
        if (t[i].ne1 != 1) put_u64(&w, t[i].ne1);
        put_u32(&w, t[i].type);
        put_u64(&w, t[i].offset);
    }
    pad(&w);
    uint64_t rng = seed * 0x9E3779B97F4A7C15ull | 1;
    for (size_t i = 0; i < n_t && !w.failed; i++) {
        write_tensor_data(&w, &t[i], &rng, row, qrow);
        if (i % 16 == 15) fprintf(stderr, "\rllmmini-synth: %zu/%zu tensors", i + 1, n_t);
    }
    int rc = w.failed || fclose(w.f) != 0;
    fprintf(stderr, "\rllmmini-synth: %s %s, %zu tensors, %.1f MiB%s\n", out, tt->name, n_t,
            (double)w.pos / (1 << 20), rc ? " (WRITE FAILED)" : "");
    free(t);
    free(row);
    free(qrow);
    return rc;
}
