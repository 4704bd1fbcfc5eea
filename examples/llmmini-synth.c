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
    uint32_t n_embd, n_layer, n_head, n_head_kv, n_ff, n_vocab, n_ctx;
} shape;

/* Presets follow public model shapes (llama-style layers; vocab kept at 32000). */
static const shape presets[] = {
    {"tiny", 64, 2, 4, 2, 160, 512, 2048},
    {"0.5b", 896, 24, 14, 2, 4864, 32000, 4096},   /* Qwen2.5-0.5B widths */
    {"1b", 2048, 22, 32, 4, 5632, 32000, 4096},    /* TinyLlama-1.1B */
    {"3b", 3072, 28, 24, 8, 8192, 32000, 4096},    /* Llama-3.2-3B widths */
    {"8b", 4096, 32, 32, 8, 14336, 32000, 8192},   /* Llama-3-8B widths */
};

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

static size_t build_tensor_list(const shape *s, uint32_t wtype, tensor_spec *t) {
    size_t n = 0;
    const uint64_t E = s->n_embd, hd = s->n_embd / s->n_head;
    const uint64_t Q = hd * s->n_head, KV = hd * s->n_head_kv;
#define ADD(nm, a, b, ty) (snprintf(t[n].name, 64, "%s", nm), t[n].ne0 = a, t[n].ne1 = b, t[n].type = ty, n++)
    ADD("token_embd.weight", E, s->n_vocab, wtype);
    ADD("output_norm.weight", E, 1, LLMM_TYPE_F32);
    ADD("output.weight", E, s->n_vocab, wtype);
    for (uint32_t l = 0; l < s->n_layer; l++) {
        char nm[64];
        static const char *const names[] = {"attn_norm", "attn_q", "attn_k", "attn_v", "attn_output",
                                            "ffn_norm", "ffn_gate", "ffn_up", "ffn_down"};
        const uint64_t dims[][2] = {{E, 1}, {E, Q}, {E, KV}, {E, KV}, {Q, E}, {E, 1}, {E, s->n_ff}, {E, s->n_ff}, {s->n_ff, E}};
        for (int k = 0; k < 9; k++) {
            snprintf(nm, sizeof nm, "blk.%u.%s.weight", l, names[k]);
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
            "usage: llmmini-synth -o OUT.gguf [--preset tiny|0.5b|1b|3b|8b] [--type f32|f16|q8_0|q4_0]\n"
            "                     [--dim N] [--layers N] [--heads N] [--kv-heads N] [--ff N] [--vocab N] [--seed S]\n"
            "Writes a llama-architecture GGUF with seeded random weights (default preset 0.5b, type q4_0).\n");
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
    if (!out || !s.n_head || !s.n_head_kv || s.n_head % s.n_head_kv || s.n_embd % s.n_head || s.n_vocab < 300 ||
        s.n_embd % tt->block_size || s.n_ff % tt->block_size || (s.n_embd / s.n_head) % 2) {
        fprintf(stderr, "llmmini-synth: need -o, heads dividing dim, kv-heads dividing heads, vocab >= 300, "
                        "dim and ff multiples of the type's block size\n");
        return 2;
    }
    tensor_spec *t = calloc(3 + 9 * (size_t)s.n_layer, sizeof *t);
    float *row = malloc(sizeof(float) * (s.n_ff > s.n_embd ? s.n_ff : s.n_embd));
    void *qrow = malloc(sizeof(float) * (s.n_ff > s.n_embd ? s.n_ff : s.n_embd));
    writer w = {fopen(out, "wb"), 0, 0};
    if (!t || !row || !qrow || !w.f) {
        fprintf(stderr, "llmmini-synth: cannot write '%s': %s\n", out, strerror(errno));
        return 1;
    }
    size_t n_t = build_tensor_list(&s, wtype, t);
    put(&w, "GGUF", 4);
    put_u32(&w, 3);
    put_u64(&w, n_t);
    put_u64(&w, 17);
    kv_str(&w, "general.architecture", "llama");
    kv_str(&w, "general.name", "llmmini-synth");
    kv_u32(&w, "general.alignment", ALIGNMENT);
    kv_u32(&w, "llama.context_length", s.n_ctx);
    kv_u32(&w, "llama.embedding_length", s.n_embd);
    kv_u32(&w, "llama.block_count", s.n_layer);
    kv_u32(&w, "llama.feed_forward_length", s.n_ff);
    kv_u32(&w, "llama.attention.head_count", s.n_head);
    kv_u32(&w, "llama.attention.head_count_kv", s.n_head_kv);
    kv_u32(&w, "llama.rope.dimension_count", s.n_embd / s.n_head);
    kv_f32(&w, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
    kv_f32(&w, "llama.rope.freq_base", 10000.f);
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
