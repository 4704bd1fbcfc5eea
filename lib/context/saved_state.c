/* Saved sequence states: a sequence's tokens and K/V rows in a versioned container.
 *
 * Container (all integers little-endian):
 *   header, STATE_HEADER_BYTES:
 *     0  magic "LLMMSEQ\0"           8  version (u32)          12 header bytes (u32)
 *     16 architecture (32 bytes, NUL-padded)
 *     48 n_layer  52 n_head_kv  56 head_dim  60 n_vocab  64 kv_type  68 n_tokens (u32 each)
 *     72 weights hash (u64)  80 payload bytes uncompressed (u64)  88 payload bytes stored (u64)
 *     96 payload checksum (u64, over the stored bytes)  104 header checksum (u64, bytes 0..103)
 *   payload: one zstd frame of
 *     tokens (n_tokens x i32), then for each layer and K/V head the K rows of positions
 *     0..n-1, then the same for V; each row one head's head_dim values in the KV type's format
 *     (backend.h), so the layout does not depend on the block size or on where the blocks
 *     were in the pool; then, for a model with recurrent layers (lfm2), the sequence's
 *     recurrent state as the context holds it (context.h llmm_recurrent, floats). Version 3
 *     added that state; version 2 files (no state) still load into attention-only models, and
 *     are refused by models with recurrent layers. Version 1 (before the head-major pool) stored whole-position rows
 *     with one Q8 scale per position; it is refused with a message.
 * Every field is checked before anything is loaded; the sequence changes only once the whole
 * state has been decompressed and validated. */
#define ZSTD_STATIC_LINKING_ONLY /* ZSTD_createCCtx_advanced: zstd's memory via the app's allocator */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <zstd.h>
#include <zstd_errors.h>

#include "context.h"

#define STATE_MAGIC "LLMMSEQ"
#define STATE_VERSION 3u
#define STATE_HEADER_BYTES 112u
#define STATE_ARCH_BYTES 32u
#define STATE_DEFAULT_LEVEL 3
#define WEIGHT_SAMPLE_BYTES 64u

typedef struct state_header {
    uint32_t version;
    char arch[STATE_ARCH_BYTES];
    uint32_t n_layer, n_head_kv, head_dim, n_vocab, kv_type, n_tokens;
    uint64_t weights_hash, raw_bytes, payload_bytes, payload_checksum;
} state_header;

/* ---------------------------------------------------------------- hashing */

static uint64_t rotl64(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

static uint64_t fmix64(uint64_t h) {
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ull;
    return h ^ (h >> 33);
}

static uint64_t load_le64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

/* A 64-bit checksum with four independent lanes (fast on long payloads). Each round is a
 * bijection of the lane state for a fixed word, so any change of one word changes its
 * lane's final state; the lanes are then mixed together. */
static uint64_t hash_bytes(const void *data, size_t n, uint64_t seed) {
    const uint64_t m1 = 0x87c37b91114253d5ull, m2 = 0x4cf5ad432745937full;
    const uint8_t *p = data;
    uint64_t h[4] = {seed ^ 0x243f6a8885a308d3ull, seed ^ 0x13198a2e03707344ull, seed ^ 0xa4093822299f31d0ull,
                     seed ^ 0x082efa98ec4e6c89ull};
    size_t i = 0;
    for (; i + 32 <= n; i += 32)
        for (int l = 0; l < 4; l++) h[l] = rotl64(h[l] ^ (load_le64(p + i + 8 * l) * m1), 31) * m2;
    uint64_t tail = 0x9e3779b97f4a7c15ull;
    for (; i < n; i++) tail = rotl64(tail ^ (p[i] * m1), 23) * m2;
    uint64_t out = fmix64(n ^ tail);
    for (int l = 0; l < 4; l++) out = fmix64(out ^ rotl64(h[l], 17 * l + 7));
    return out;
}

/* A fingerprint of the weights: the tensor table (names, shapes, types, sizes) and a few
 * bytes from the start and the middle of every tensor, so two files with the same shapes
 * but different weights differ too, without reading gigabytes. */
static uint64_t weights_hash(const llmm_model *m) {
    const gguf_file *f = m->gguf;
    uint64_t h = hash_bytes(&f->n_tensors, sizeof f->n_tensors, 1);
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        const uint64_t shape[6] = {t->n_dims, t->type, (uint64_t)t->ne[0], (uint64_t)t->ne[1], (uint64_t)t->ne[2],
                                   t->n_bytes};
        h = hash_bytes(t->name.ptr, (size_t)t->name.len, h);
        h = hash_bytes(shape, sizeof shape, h);
        const size_t sample = (size_t)LLMM_MIN(t->n_bytes, (uint64_t)WEIGHT_SAMPLE_BYTES);
        h = hash_bytes(t->data, sample, h);
        h = hash_bytes((const uint8_t *)t->data + (t->n_bytes - sample) / 2, sample, h);
    }
    return h;
}

/* ---------------------------------------------------------------- header */

static void put_u32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static void put_u64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t get_u32(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }

static void header_encode(const state_header *h, uint8_t *out) {
    memset(out, 0, STATE_HEADER_BYTES);
    memcpy(out, STATE_MAGIC, sizeof STATE_MAGIC);
    put_u32(out + 8, h->version);
    put_u32(out + 12, STATE_HEADER_BYTES);
    memcpy(out + 16, h->arch, STATE_ARCH_BYTES);
    const uint32_t u32s[6] = {h->n_layer, h->n_head_kv, h->head_dim, h->n_vocab, h->kv_type, h->n_tokens};
    for (int i = 0; i < 6; i++) put_u32(out + 48 + 4 * i, u32s[i]);
    put_u64(out + 72, h->weights_hash);
    put_u64(out + 80, h->raw_bytes);
    put_u64(out + 88, h->payload_bytes);
    put_u64(out + 96, h->payload_checksum);
    put_u64(out + 104, hash_bytes(out, 104, 0));
}

static llmm_status header_decode(const uint8_t *in, size_t n, state_header *h, llmm_diag *d) {
    if (n < STATE_HEADER_BYTES)
        return llmm__diag_fail(d, LLMM_ERR_BAD_FILE, "saved state truncated: %zu bytes, the header alone needs %u", n,
                         STATE_HEADER_BYTES);
    if (memcmp(in, STATE_MAGIC, sizeof STATE_MAGIC) != 0)
        return llmm__diag_fail(d, LLMM_ERR_BAD_FILE, "not an llmmini saved state (bad magic)");
    h->version = get_u32(in + 8);
    /* version 2 is version 3 without recurrent state: it serves attention-only models */
    if ((h->version != STATE_VERSION && h->version != 2) || get_u32(in + 12) != STATE_HEADER_BYTES)
        return llmm__diag_fail(d, LLMM_ERR_BAD_FILE, "saved state version %u (header %u bytes); this library reads version %u",
                         h->version, get_u32(in + 12), STATE_VERSION);
    if (load_le64(in + 104) != hash_bytes(in, 104, 0))
        return llmm__diag_fail(d, LLMM_ERR_BAD_FILE, "saved state header checksum mismatch (corrupted header)");
    memcpy(h->arch, in + 16, STATE_ARCH_BYTES);
    h->arch[STATE_ARCH_BYTES - 1] = 0;
    uint32_t *u32s[6] = {&h->n_layer, &h->n_head_kv, &h->head_dim, &h->n_vocab, &h->kv_type, &h->n_tokens};
    for (int i = 0; i < 6; i++) *u32s[i] = get_u32(in + 48 + 4 * i);
    h->weights_hash = load_le64(in + 72);
    h->raw_bytes = load_le64(in + 80);
    h->payload_bytes = load_le64(in + 88);
    h->payload_checksum = load_le64(in + 96);
    return LLMM_OK;
}

/* The header fields that describe ctx's model and KV type. */
/* The weights a sequence's K/V come from: the model's, or with LoRA adapters (the sequence's
 * prefix key seed, kvcache.h: a hash of its adapters' fingerprints and scales) mixed in. A
 * state without adapters keeps the model's hash, so states saved before adapters still load. */
static uint64_t with_adapters(uint64_t weights, uint64_t adapter_seed) {
    return adapter_seed ? fmix64(weights ^ rotl64(adapter_seed, 29) ^ 0x4c6f524164617074ull) : weights;
}

static state_header fingerprint(const llmm_context *ctx, llmm_seq_id seq) {
    const llmm_model *m = ctx->model;
    state_header h = {.version = STATE_VERSION};
    snprintf(h.arch, sizeof h.arch, "%s", m->architecture ? m->architecture : "");
    h.n_layer = m->hp.n_layer;
    h.n_head_kv = m->hp.n_head_kv;
    h.head_dim = m->hp.head_dim;
    h.n_vocab = m->vocab.n_tokens;
    h.kv_type = ctx->kv.cfg.type;
    h.weights_hash = with_adapters(weights_hash(m), ctx->kv.seqs[seq].key_seed);
    return h;
}

static const char *kv_type_name(uint32_t t) {
    return t == LLMM_KV_F32 ? "f32" : t == LLMM_KV_F16 ? "f16" : t == LLMM_KV_Q8 ? "q8" : "unknown";
}

static llmm_status check_fingerprint(const llmm_context *ctx, llmm_seq_id seq, const state_header *h, llmm_diag *d) {
    const state_header want = fingerprint(ctx, seq);
    if (strcmp(h->arch, want.arch) || h->n_layer != want.n_layer || h->n_head_kv != want.n_head_kv ||
        h->head_dim != want.head_dim || h->n_vocab != want.n_vocab)
        return llmm__diag_fail(d, LLMM_ERR_BAD_FILE,
                         "saved state is from another model (%s, %u layers, %u kv heads x %u, vocab %u; this model: "
                         "%s, %u layers, %u kv heads x %u, vocab %u)",
                         h->arch, h->n_layer, h->n_head_kv, h->head_dim, h->n_vocab, want.arch, want.n_layer,
                         want.n_head_kv, want.head_dim, want.n_vocab);
    if (h->weights_hash != want.weights_hash && ctx->kv.seqs[seq].key_seed && h->weights_hash == weights_hash(ctx->model))
        return llmm__diag_fail(d, LLMM_ERR_BAD_FILE, "saved state was computed without LoRA adapters; sequence %d runs with "
                         "adapters (llmm_seq_set_adapters)", seq);
    if (h->weights_hash != want.weights_hash)
        return llmm__diag_fail(d, LLMM_ERR_BAD_FILE, "saved state is from another model, or was computed with other LoRA "
                         "adapters or scales than sequence %d runs with (same shape, different weights)", seq);
    if (h->kv_type != want.kv_type)
        return llmm__diag_fail(d, LLMM_ERR_BAD_FILE, "saved state has KV type %s; this context uses %s",
                         kv_type_name(h->kv_type), kv_type_name(want.kv_type));
    return LLMM_OK;
}

/* ---------------------------------------------------------------- payload */

/* The payload keeps rows for every layer of the model, zeros for the recurrent ones, as version
 * 3 always did: the pool has rows for the attention layers alone (kvcache.h) since after
 * version 3 came out, and keeping the payload's layout lets the files saved before load. */
static size_t raw_bytes_for(const llmm_context *ctx, uint32_t n_tokens) {
    const llmm_kv_store *kv = &ctx->kv;
    return (size_t)n_tokens * sizeof(int32_t) +
           2 * (size_t)ctx->model->hp.n_layer * kv->cfg.n_head_kv * n_tokens * kv->row_bytes;
}

/* Bytes of a sequence's recurrent state in a payload: 0 for attention-only models. */
static size_t recurrent_bytes(const llmm_context *ctx) { return ctx->rec.states ? ctx->rec.seq_floats * sizeof(float) : 0; }

static float *recurrent_slot(const llmm_context *ctx, uint32_t seq) {
    return ctx->rec.states + (size_t)seq * ctx->rec.seq_floats;
}

/* Copy rows between the pool and a payload ordered by (K/V, layer, head, position), one
 * block's segment at a time. */
static llmm_status move_rows(const llmm_context *ctx, llmm_kv_store *kv, const kv_seq *s, uint8_t *rows, uint32_t n,
                             int to_pool) {
    const uint32_t bs = kv->cfg.block_size;
    for (int which = 0; which < 2; which++)
        for (uint32_t l = 0; l < ctx->model->hp.n_layer; l++)
            for (uint32_t h = 0; h < kv->cfg.n_head_kv; h++)
                for (uint32_t i = 0; i * bs < n; i++) {
                    const size_t bytes = (size_t)LLMM_MIN(bs, n - i * bs) * kv->row_bytes;
                    const llmm_layer_weights *layer = &ctx->w.layers[l];
                    llmm_status st = LLMM_OK;
                    /* a recurrent layer has no rows in the pool: zeros stand for them */
                    if (llmm_layer_recurrent(layer)) {
                        if (!to_pool) memset(rows, 0, bytes);
                    } else {
                        uint8_t *pool_rows = llmm__kv_segment(kv, which, layer->kv_index, h, s->blocks[i]);
                        st = to_pool ? kv->be->upload(kv->be_state, pool_rows, rows, bytes)
                                     : kv->be->download(kv->be_state, rows, pool_rows, bytes);
                    }
                    if (st) return st;
                    rows += bytes;
                }
    return LLMM_OK;
}

static llmm_status gather(const llmm_context *ctx, llmm_kv_store *kv, uint32_t seq, uint8_t *raw) {
    const kv_seq *s = &kv->seqs[seq];
    for (uint32_t i = 0; i < s->len; i++) put_u32(raw + 4 * (size_t)i, (uint32_t)s->tokens[i]);
    return move_rows(ctx, kv, s, raw + 4 * (size_t)s->len, s->len, 0);
}

/* ---------------------------------------------------------------- zstd with our allocator */

static void *zstd_alloc(void *opaque, size_t size) { return llmm__mem_alloc(opaque, size); }
static void zstd_free(void *opaque, void *p) { llmm__mem_free(opaque, p); }
static ZSTD_customMem zstd_mem(const llmm_context *ctx) {
    return (ZSTD_customMem){zstd_alloc, zstd_free, (void *)ctx->model->alloc};
}

/* Compress raw into dst; 0 and *n on success, BUFFER_TOO_SMALL, or NO_MEMORY. */
static llmm_status compress(const llmm_context *ctx, int level, const void *raw, size_t raw_n, void *dst, size_t cap,
                            size_t *n) {
    ZSTD_CCtx *cc = ZSTD_createCCtx_advanced(zstd_mem(ctx));
    if (!cc) return LLMM_ERR_NO_MEMORY;
    size_t r = ZSTD_CCtx_setParameter(cc, ZSTD_c_compressionLevel, level);
    if (!ZSTD_isError(r)) r = ZSTD_compress2(cc, dst, cap, raw, raw_n);
    ZSTD_freeCCtx(cc);
    if (ZSTD_isError(r)) return ZSTD_getErrorCode(r) == ZSTD_error_dstSize_tooSmall ? LLMM_ERR_BUFFER_TOO_SMALL
                                                                                      : LLMM_ERR_NO_MEMORY;
    *n = r;
    return LLMM_OK;
}

/* ---------------------------------------------------------------- save */

static llmm_status check_save_args(llmm_context *ctx, llmm_seq_id seq, int32_t *level) {
    llmm_status st = llmm__ctx_check_seq(ctx, seq);
    if (st) return st;
    if (*level == 0) *level = STATE_DEFAULT_LEVEL;
    if (*level < 1 || *level > ZSTD_maxCLevel())
        return llmm__ctx_fail(ctx, LLMM_ERR_INVALID_ARG, "compression level %d not in 1..%d (0 = default)", *level,
                        ZSTD_maxCLevel());
    return LLMM_OK;
}

/* The state of seq into buf; on BUFFER_TOO_SMALL *n is an upper bound of the size. */
static llmm_status save_into(llmm_context *ctx, llmm_seq_id seq, int level, uint8_t *buf, size_t cap, size_t *n) {
    llmm_kv_store *kv = &ctx->kv;
    state_header h = fingerprint(ctx, seq);
    h.n_tokens = kv->seqs[seq].len;
    const uint64_t kv_bytes = raw_bytes_for(ctx, h.n_tokens);
    h.raw_bytes = kv_bytes + recurrent_bytes(ctx);
    const size_t bound = STATE_HEADER_BYTES + ZSTD_compressBound((size_t)h.raw_bytes);
    if (cap <= STATE_HEADER_BYTES) {
        *n = bound;
        return LLMM_ERR_BUFFER_TOO_SMALL;
    }
    uint8_t *raw = llmm__mem_alloc(ctx->model->alloc, (size_t)h.raw_bytes ? (size_t)h.raw_bytes : 1);
    if (!raw) return llmm__ctx_fail(ctx, LLMM_ERR_NO_MEMORY, "out of memory for a state of %llu bytes",
                              (unsigned long long)h.raw_bytes);
    llmm_status st = gather(ctx, kv, (uint32_t)seq, raw);
    if (!st && recurrent_bytes(ctx))
        st = ctx->be->download(ctx->be_state, raw + kv_bytes, recurrent_slot(ctx, (uint32_t)seq), recurrent_bytes(ctx));
    size_t stored = 0;
    if (!st) st = compress(ctx, level, raw, (size_t)h.raw_bytes, buf + STATE_HEADER_BYTES, cap - STATE_HEADER_BYTES,
                           &stored);
    llmm__mem_free(ctx->model->alloc, raw);
    if (st == LLMM_ERR_BUFFER_TOO_SMALL) *n = bound;
    if (st) return st;
    h.payload_bytes = stored;
    h.payload_checksum = hash_bytes(buf + STATE_HEADER_BYTES, stored, 0);
    header_encode(&h, buf);
    *n = STATE_HEADER_BYTES + stored;
    return LLMM_OK;
}

LLMM_API llmm_status llmm_seq_save_buffer(llmm_context *ctx, llmm_seq_id seq, int32_t level, void *buf,
                                          size_t capacity, size_t *n_bytes) {
    if (!ctx) return LLMM_ERR_INVALID_ARG;
    if (!n_bytes || (!buf && capacity))
        return llmm__ctx_fail(ctx, LLMM_ERR_INVALID_ARG, "llmm_seq_save_buffer: NULL n_bytes, or NULL buf with a capacity");
    llmm_status st = check_save_args(ctx, seq, &level);
    if (st) return st;
    st = save_into(ctx, seq, level, buf, buf ? capacity : 0, n_bytes);
    if (st == LLMM_ERR_BUFFER_TOO_SMALL)
        return llmm__ctx_fail(ctx, st, "the state needs up to %zu bytes, the buffer has %zu", *n_bytes, capacity);
    if (st) return llmm__ctx_fail(ctx, st, "saving sequence %d failed: %s", seq, llmm_status_str(st));
    return LLMM_OK;
}

static llmm_status write_file(llmm_context *ctx, const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return llmm__ctx_fail(ctx, LLMM_ERR_IO, "cannot create %s: %s", path, strerror(errno));
    const int ok = fwrite(data, 1, n, f) == n;
    if (fclose(f) != 0 || !ok) return llmm__ctx_fail(ctx, LLMM_ERR_IO, "cannot write %s: %s", path, strerror(errno));
    return LLMM_OK;
}

LLMM_API llmm_status llmm_seq_save(llmm_context *ctx, llmm_seq_id seq, const char *path, int32_t level) {
    if (!ctx) return LLMM_ERR_INVALID_ARG;
    if (!path) return llmm__ctx_fail(ctx, LLMM_ERR_INVALID_ARG, "llmm_seq_save: NULL path");
    llmm_status st = check_save_args(ctx, seq, &level);
    if (st) return st;
    size_t cap = 0, n = 0;
    save_into(ctx, seq, level, NULL, 0, &cap); /* BUFFER_TOO_SMALL with the bound in cap */
    uint8_t *buf = llmm__mem_alloc(ctx->model->alloc, cap);
    if (!buf) return llmm__ctx_fail(ctx, LLMM_ERR_NO_MEMORY, "out of memory for a state of up to %zu bytes", cap);
    st = save_into(ctx, seq, level, buf, cap, &n);
    if (st) st = llmm__ctx_fail(ctx, st, "saving sequence %d failed: %s", seq, llmm_status_str(st));
    else st = write_file(ctx, path, buf, n);
    llmm__mem_free(ctx->model->alloc, buf);
    return st;
}

/* ---------------------------------------------------------------- load */

/* Header, fingerprint, sizes and checksum of a state image, before decompressing. */
static llmm_status check_state(llmm_context *ctx, uint32_t seq, const uint8_t *buf, size_t n, state_header *h,
                               llmm_diag *d) {
    llmm_status st = header_decode(buf, n, h, d);
    if (!st) st = check_fingerprint(ctx, (llmm_seq_id)seq, h, d);
    if (st) return st;
    if (h->n_tokens > ctx->params.n_ctx)
        return llmm__diag_fail(d, LLMM_ERR_CONTEXT_FULL, "saved state holds %u tokens, more than n_ctx %u", h->n_tokens,
                         ctx->params.n_ctx);
    if (h->version == 2 && recurrent_bytes(ctx))
        return llmm__diag_fail(d, LLMM_ERR_BAD_FILE, "saved state version 2 has no recurrent state, which %s needs",
                               ctx->model->architecture);
    if (h->raw_bytes != raw_bytes_for(ctx, h->n_tokens) + recurrent_bytes(ctx))
        return llmm__diag_fail(d, LLMM_ERR_BAD_FILE, "saved state payload size %llu does not fit %u tokens",
                         (unsigned long long)h->raw_bytes, h->n_tokens);
    if (h->payload_bytes != n - STATE_HEADER_BYTES)
        return llmm__diag_fail(d, LLMM_ERR_BAD_FILE, "saved state %s: payload of %llu bytes, %zu present",
                         h->payload_bytes > n - STATE_HEADER_BYTES ? "truncated" : "has trailing bytes",
                         (unsigned long long)h->payload_bytes, n - STATE_HEADER_BYTES);
    if (hash_bytes(buf + STATE_HEADER_BYTES, (size_t)h->payload_bytes, 0) != h->payload_checksum)
        return llmm__diag_fail(d, LLMM_ERR_BAD_FILE, "saved state payload checksum mismatch (corrupted payload)");
    return LLMM_OK;
}

static llmm_status decompress(const llmm_context *ctx, const uint8_t *src, size_t n, uint8_t *raw, size_t raw_n,
                              llmm_diag *d) {
    ZSTD_DCtx *dc = ZSTD_createDCtx_advanced(zstd_mem(ctx));
    if (!dc) return llmm__diag_fail(d, LLMM_ERR_NO_MEMORY, "out of memory for the zstd decoder");
    const size_t r = ZSTD_decompressDCtx(dc, raw, raw_n, src, n);
    ZSTD_freeDCtx(dc);
    if (ZSTD_isError(r) || r != raw_n)
        return llmm__diag_fail(d, LLMM_ERR_BAD_FILE, "saved state payload does not decompress to %zu bytes (%s)", raw_n,
                         ZSTD_isError(r) ? ZSTD_getErrorName(r) : "wrong size");
    return LLMM_OK;
}

static llmm_status read_tokens(const llmm_context *ctx, const uint8_t *raw, uint32_t n, llmm_token *out,
                               llmm_diag *d) {
    for (uint32_t i = 0; i < n; i++) {
        out[i] = (llmm_token)get_u32(raw + 4 * (size_t)i);
        if (out[i] < 0 || (uint32_t)out[i] >= ctx->model->vocab.n_tokens)
            return llmm__diag_fail(d, LLMM_ERR_BAD_FILE, "saved state token %u is %d, outside the vocabulary", i, out[i]);
    }
    return LLMM_OK;
}

/* Blocks seq could use once cleared: the available ones plus those only seq holds. */
static uint32_t blocks_after_clear(const llmm_kv_store *kv, uint32_t seq) {
    const kv_seq *s = &kv->seqs[seq];
    uint32_t n = llmm__kv_available(kv);
    for (uint32_t i = 0; i < s->n_blocks; i++) {
        const uint32_t b = s->blocks[i];
        n += kv->refcount[b] - (kv->prefix && kv->prefix[b].key ? 1u : 0u) == 1;
    }
    return n;
}

/* Replace seq by n tokens and the rows in raw (validated). */
static llmm_status install(llmm_context *ctx, uint32_t seq, const uint8_t *raw, uint32_t n, llmm_diag *d) {
    llmm_kv_store *kv = &ctx->kv;
    const uint32_t need = (n + kv->cfg.block_size - 1) >> kv->block_shift;
    if (need > blocks_after_clear(kv, seq))
        return llmm__diag_fail(d, LLMM_ERR_CONTEXT_FULL, "the KV pool cannot hold the %u saved tokens (%u blocks needed)", n,
                         need);
    llmm_token *tokens = llmm__mem_alloc(ctx->model->alloc, (size_t)n * sizeof *tokens + 1);
    if (!tokens) return llmm__diag_fail(d, LLMM_ERR_NO_MEMORY, "out of memory for %u tokens", n);
    llmm_status st = read_tokens(ctx, raw, n, tokens, d);
    if (!st) {
        llmm__kv_truncate(kv, seq, 0);
        llmm__checkpoint_forget(ctx, (llmm_seq_id)seq);
        /* the state does not say under which adapters each position was computed (the sequence
         * may have changed them midway), so its blocks are never offered to the prefix cache */
        kv->seqs[seq].prefix_off = 1;
        st = llmm__kv_reserve(kv, seq, n);
        if (!st) st = move_rows(ctx, kv, &kv->seqs[seq], (uint8_t *)raw + 4 * (size_t)n, n, 1);
        if (!st && recurrent_bytes(ctx))
            st = ctx->be->upload(ctx->be_state, recurrent_slot(ctx, seq), raw + raw_bytes_for(ctx, n), recurrent_bytes(ctx));
        if (!st) llmm__kv_commit(kv, seq, tokens, n);
    }
    if (st && !d->msg[0]) {
        llmm__kv_truncate(kv, seq, 0); /* a backend failure midway: the sequence is left empty */
        llmm__diag_fail(d, st, "copying the saved K/V into the pool failed");
    }
    llmm__mem_free(ctx->model->alloc, tokens);
    return st;
}

static llmm_status load_image(llmm_context *ctx, uint32_t seq, const uint8_t *buf, size_t n, llmm_diag *d) {
    state_header h;
    llmm_status st = check_state(ctx, seq, buf, n, &h, d);
    if (st) return st;
    uint8_t *raw = llmm__mem_alloc(ctx->model->alloc, (size_t)h.raw_bytes + 1);
    if (!raw) return llmm__diag_fail(d, LLMM_ERR_NO_MEMORY, "out of memory for a state of %llu bytes",
                               (unsigned long long)h.raw_bytes);
    st = decompress(ctx, buf + STATE_HEADER_BYTES, (size_t)h.payload_bytes, raw, (size_t)h.raw_bytes, d);
    if (!st) st = install(ctx, seq, raw, h.n_tokens, d);
    llmm__mem_free(ctx->model->alloc, raw);
    return st;
}

LLMM_API llmm_status llmm_seq_load_buffer(llmm_context *ctx, llmm_seq_id seq, const void *buf, size_t n_bytes) {
    if (!ctx) return LLMM_ERR_INVALID_ARG;
    if (!buf) return llmm__ctx_fail(ctx, LLMM_ERR_INVALID_ARG, "llmm_seq_load_buffer: NULL buf");
    llmm_status st = llmm__ctx_check_seq(ctx, seq);
    if (st) return st;
    llmm_diag d = {{0}};
    st = load_image(ctx, (uint32_t)seq, buf, n_bytes, &d);
    return st ? llmm__ctx_fail(ctx, st, "%s", d.msg) : LLMM_OK;
}

/* The whole file into memory from the model's allocator. */
static llmm_status read_file(llmm_context *ctx, const char *path, uint8_t **out, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return llmm__ctx_fail(ctx, LLMM_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    long size = -1;
    if (fseek(f, 0, SEEK_END) == 0) size = ftell(f);
    if (size < 0 || fseek(f, 0, SEEK_SET) != 0) {
        fclose(f);
        return llmm__ctx_fail(ctx, LLMM_ERR_IO, "cannot read %s: %s", path, strerror(errno));
    }
    /* no valid state of this context is larger: refuse before reading a huge file */
    const size_t largest = STATE_HEADER_BYTES + ZSTD_compressBound(raw_bytes_for(ctx, ctx->params.n_ctx));
    if ((unsigned long)size > largest) {
        fclose(f);
        return llmm__ctx_fail(ctx, LLMM_ERR_BAD_FILE, "%s: %ld bytes, larger than any saved state of this context (%zu)",
                        path, size, largest);
    }
    *out = llmm__mem_alloc(ctx->model->alloc, (size_t)size + 1);
    if (!*out) {
        fclose(f);
        return llmm__ctx_fail(ctx, LLMM_ERR_NO_MEMORY, "out of memory for %ld bytes of %s", size, path);
    }
    *n = fread(*out, 1, (size_t)size, f);
    const int ok = *n == (size_t)size && !ferror(f);
    fclose(f);
    if (ok) return LLMM_OK;
    llmm__mem_free(ctx->model->alloc, *out);
    return llmm__ctx_fail(ctx, LLMM_ERR_IO, "cannot read %s", path);
}

LLMM_API llmm_status llmm_seq_load(llmm_context *ctx, llmm_seq_id seq, const char *path) {
    if (!ctx) return LLMM_ERR_INVALID_ARG;
    if (!path) return llmm__ctx_fail(ctx, LLMM_ERR_INVALID_ARG, "llmm_seq_load: NULL path");
    llmm_status st = llmm__ctx_check_seq(ctx, seq);
    if (st) return st;
    uint8_t *buf = NULL;
    size_t n = 0;
    if ((st = read_file(ctx, path, &buf, &n))) return st;
    llmm_diag d = {{0}};
    st = load_image(ctx, (uint32_t)seq, buf, n, &d);
    llmm__mem_free(ctx->model->alloc, buf);
    return st ? llmm__ctx_fail(ctx, st, "%s: %s", path, d.msg) : LLMM_OK;
}
