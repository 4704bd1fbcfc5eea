/* Saved runs for llmmini-perplexity --save-logits / --compare: fidelity records in a file.
 *
 * Layout (integers and floats little-endian, floats IEEE binary32):
 *   header, FID_HEADER_BYTES:
 *     0  magic "LLMMFID\0"   8  version (u32)   12 header bytes (u32)
 *     16 n_vocab (u32)  20 top_k (u32)  24 window (u32)  28 BOS input (i32, -1 for none)
 *     32 positions (u64)  40 vocabulary hash (u64)  48 model hash (u64)
 *     56 header checksum (u64, FNV-1a of bytes 0..55)
 *   then one record per position of the text, FID_RECORD_BYTES(top_k) each:
 *     text token (i32), log-sum-exp (f64), logit of the text token (f32),
 *     top_k x (id (i32), logit (f32)) by descending logit; id -1 first: position not predicted.
 * The log-sum-exp is a double because 1 - the top_k's probability (the rest of the mass, which
 * the KL divergence counts as one outcome) must be exact to 1e-12 when the top_k hold it all.
 * With top_k = 32 a position takes 272 bytes: about 27 MB for 100,000 tokens, where the full
 * logits of a 32,000-token vocabulary would take 12.8 GB. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "fidelity.h"

#define FID_MAGIC "LLMMFID"
#define FID_VERSION 1u
#define FID_HEADER_BYTES 64u
#define FID_RECORD_BYTES(k) (16u + 8u * (size_t)(k))

static uint64_t fnv1a(const void *data, size_t n, uint64_t h) {
    const uint8_t *p = data;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}
#define FNV_SEED 0xcbf29ce484222325ull

static void put_le(uint8_t *p, uint64_t v, int bytes) {
    for (int i = 0; i < bytes; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint64_t get_le(const uint8_t *p, int bytes) {
    uint64_t v = 0;
    for (int i = bytes - 1; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}
static void put_f32(uint8_t *p, float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    put_le(p, u, 4);
}
static void put_f64(uint8_t *p, double f) {
    uint64_t u;
    memcpy(&u, &f, sizeof u);
    put_le(p, u, 8);
}
static double get_f64(const uint8_t *p) {
    const uint64_t u = get_le(p, 8);
    double f;
    memcpy(&f, &u, sizeof f);
    return f;
}
static float get_f32(const uint8_t *p) {
    const uint32_t u = (uint32_t)get_le(p, 4);
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

llmm_status llmm__fidelity_model_fingerprint(const llmm_model *m, fidelity_file_info *info) {
    llmm_model_info mi = {.size = sizeof mi};
    llmm_status st = llmm_model_get_info(m, &mi);
    if (st) return st;
    uint64_t h = fnv1a(&mi.n_vocab, sizeof mi.n_vocab, FNV_SEED);
    char piece[256];
    for (uint32_t t = 0; t < mi.n_vocab; t++) {
        size_t len = 0;
        uint32_t attrs = 0;
        st = llmm_token_to_piece(m, (llmm_token)t, LLMM_PIECE_RENDER_SPECIAL, piece, sizeof piece, &len);
        if (st == LLMM_ERR_BUFFER_TOO_SMALL) len = sizeof piece; /* the first bytes identify it well enough */
        else if (st) return st;
        if ((st = llmm_token_attrs(m, (llmm_token)t, &attrs))) return st;
        h = fnv1a(piece, len, fnv1a(&len, sizeof len, h));
        h = fnv1a(&attrs, sizeof attrs, h);
    }
    info->vocab_hash = h;
    const uint64_t shape[6] = {mi.n_params, mi.file_bytes, mi.n_layer, mi.n_embd, mi.n_ff, mi.n_vocab};
    info->model_hash = fnv1a(shape, sizeof shape, fnv1a(mi.architecture, strlen(mi.architecture), FNV_SEED));
    return LLMM_OK;
}

static void header_encode(const fidelity_records *r, const fidelity_file_info *info, uint8_t *out) {
    memset(out, 0, FID_HEADER_BYTES);
    memcpy(out, FID_MAGIC, sizeof FID_MAGIC);
    put_le(out + 8, FID_VERSION, 4);
    put_le(out + 12, FID_HEADER_BYTES, 4);
    put_le(out + 16, r->n_vocab, 4);
    put_le(out + 20, r->top_k, 4);
    put_le(out + 24, info->window, 4);
    put_le(out + 28, (uint32_t)info->bos, 4);
    put_le(out + 32, r->n, 8);
    put_le(out + 40, info->vocab_hash, 8);
    put_le(out + 48, info->model_hash, 8);
    put_le(out + 56, fnv1a(out, 56, FNV_SEED), 8);
}

static void record_encode(const fidelity_records *r, size_t i, uint8_t *out) {
    put_le(out, (uint32_t)r->target[i], 4);
    put_f64(out + 4, r->lse[i]);
    put_f32(out + 12, r->target_logit[i]);
    for (uint32_t j = 0; j < r->top_k; j++) {
        put_le(out + 16 + 8 * j, (uint32_t)r->top_id[i * r->top_k + j], 4);
        put_f32(out + 20 + 8 * j, r->top_logit[i * r->top_k + j]);
    }
}

llmm_status llmm__fidelity_save(const char *path, const fidelity_records *r, const fidelity_file_info *info,
                          llmm_diag *d) {
    if (!path || !r || !info) return llmm__diag_fail(d, LLMM_ERR_INVALID_ARG, "fidelity_save: NULL argument");
    uint8_t *buf = llmm__mem_alloc(NULL, LLMM_MAX(FID_HEADER_BYTES, FID_RECORD_BYTES(r->top_k)));
    if (!buf) return llmm__diag_fail(d, LLMM_ERR_NO_MEMORY, "out of memory for a record of %u ids", r->top_k);
    FILE *f = fopen(path, "wb");
    if (!f) {
        llmm__mem_free(NULL, buf);
        return llmm__diag_fail(d, LLMM_ERR_IO, "cannot write '%s': %s", path, strerror(errno));
    }
    header_encode(r, info, buf);
    int ok = fwrite(buf, 1, FID_HEADER_BYTES, f) == FID_HEADER_BYTES;
    for (size_t i = 0; ok && i < r->n; i++) {
        record_encode(r, i, buf);
        ok = fwrite(buf, 1, FID_RECORD_BYTES(r->top_k), f) == FID_RECORD_BYTES(r->top_k);
    }
    ok = fclose(f) == 0 && ok;
    llmm__mem_free(NULL, buf);
    return ok ? LLMM_OK : llmm__diag_fail(d, LLMM_ERR_IO, "writing '%s' failed", path);
}

/* The header's fields, checked against each other and the file's size. */
static llmm_status header_decode(const uint8_t *h, long file_bytes, uint32_t *n_vocab, uint32_t *top_k,
                                 uint64_t *n, fidelity_file_info *info, llmm_diag *d) {
    if (memcmp(h, FID_MAGIC, sizeof FID_MAGIC) != 0)
        return llmm__diag_fail(d, LLMM_ERR_BAD_FILE, "not a llmmini-perplexity logits file (bad magic)");
    if (get_le(h + 8, 4) != FID_VERSION || get_le(h + 12, 4) != FID_HEADER_BYTES)
        return llmm__diag_fail(d, LLMM_ERR_BAD_FILE, "logits file version %u; this build reads version %u",
                         (unsigned)get_le(h + 8, 4), FID_VERSION);
    if (get_le(h + 56, 8) != fnv1a(h, 56, FNV_SEED))
        return llmm__diag_fail(d, LLMM_ERR_BAD_FILE, "logits file header checksum mismatch (corrupted header)");
    *n_vocab = (uint32_t)get_le(h + 16, 4);
    *top_k = (uint32_t)get_le(h + 20, 4);
    info->window = (uint32_t)get_le(h + 24, 4);
    info->bos = (int32_t)(uint32_t)get_le(h + 28, 4);
    *n = get_le(h + 32, 8);
    info->vocab_hash = get_le(h + 40, 8);
    info->model_hash = get_le(h + 48, 8);
    if (*top_k == 0 || *top_k > *n_vocab || info->window == 0 || info->bos < -1 || info->bos >= (int64_t)*n_vocab)
        return llmm__diag_fail(d, LLMM_ERR_BAD_FILE, "logits file header out of range (vocab %u, top-k %u, window %u, BOS %d)",
                         *n_vocab, *top_k, info->window, info->bos);
    const uint64_t body = (uint64_t)file_bytes - FID_HEADER_BYTES;
    if (body % FID_RECORD_BYTES(*top_k) != 0 || body / FID_RECORD_BYTES(*top_k) != *n)
        return llmm__diag_fail(d, LLMM_ERR_BAD_FILE, "logits file holds %llu bytes of records; %llu positions need %llu",
                         (unsigned long long)body, (unsigned long long)*n,
                         (unsigned long long)*n * FID_RECORD_BYTES(*top_k));
    return LLMM_OK;
}

static llmm_status record_decode(const uint8_t *in, fidelity_records *r, size_t i, llmm_diag *d) {
    const int32_t target = (int32_t)(uint32_t)get_le(in, 4);
    if (target < 0 || (uint32_t)target >= r->n_vocab)
        return llmm__diag_fail(d, LLMM_ERR_BAD_FILE, "logits file: position %zu's token %d is out of range", i, target);
    r->target[i] = target;
    r->lse[i] = get_f64(in + 4);
    r->target_logit[i] = get_f32(in + 12);
    for (uint32_t j = 0; j < r->top_k; j++) {
        const int32_t id = (int32_t)(uint32_t)get_le(in + 16 + 8 * j, 4);
        if (j == 0 && id == -1) break; /* not predicted: the rest is padding */
        if (id < 0 || (uint32_t)id >= r->n_vocab)
            return llmm__diag_fail(d, LLMM_ERR_BAD_FILE, "logits file: position %zu holds token id %d", i, id);
        r->top_id[i * r->top_k + j] = id;
        r->top_logit[i * r->top_k + j] = get_f32(in + 20 + 8 * j);
    }
    return LLMM_OK;
}

static llmm_status read_records(FILE *f, fidelity_records *r, llmm_diag *d) {
    uint8_t *buf = llmm__mem_alloc(NULL, FID_RECORD_BYTES(r->top_k));
    if (!buf) return llmm__diag_fail(d, LLMM_ERR_NO_MEMORY, "out of memory for a record of %u ids", r->top_k);
    llmm_status st = LLMM_OK;
    for (size_t i = 0; !st && i < r->n; i++) {
        if (fread(buf, 1, FID_RECORD_BYTES(r->top_k), f) != FID_RECORD_BYTES(r->top_k))
            st = llmm__diag_fail(d, LLMM_ERR_IO, "logits file: reading position %zu failed", i);
        else
            st = record_decode(buf, r, i, d);
    }
    llmm__mem_free(NULL, buf);
    return st;
}

llmm_status llmm__fidelity_load(const char *path, fidelity_records *r, fidelity_file_info *info, llmm_diag *d) {
    if (!path || !r || !info) return llmm__diag_fail(d, LLMM_ERR_INVALID_ARG, "fidelity_load: NULL argument");
    memset(r, 0, sizeof *r);
    FILE *f = fopen(path, "rb");
    if (!f) return llmm__diag_fail(d, LLMM_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    uint8_t h[FID_HEADER_BYTES];
    long bytes = -1;
    llmm_status st = LLMM_OK;
    if (fseek(f, 0, SEEK_END) != 0 || (bytes = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0)
        st = llmm__diag_fail(d, LLMM_ERR_IO, "cannot size '%s'", path);
    else if (bytes < (long)FID_HEADER_BYTES || fread(h, 1, sizeof h, f) != sizeof h)
        st = llmm__diag_fail(d, LLMM_ERR_BAD_FILE, "logits file truncated: %ld bytes", bytes);
    uint32_t n_vocab = 0, top_k = 0;
    uint64_t n = 0;
    if (!st) st = header_decode(h, bytes, &n_vocab, &top_k, &n, info, d);
    if (!st && n > SIZE_MAX / FID_RECORD_BYTES(top_k)) st = llmm__diag_fail(d, LLMM_ERR_BAD_FILE, "logits file too large");
    if (!st) st = llmm__fidelity_records_init(r, NULL, (size_t)n, top_k, n_vocab);
    if (st == LLMM_ERR_NO_MEMORY) llmm__diag_fail(d, st, "out of memory for %llu positions", (unsigned long long)n);
    if (!st) st = read_records(f, r, d);
    fclose(f);
    if (st) llmm__fidelity_records_free(r);
    return st;
}
