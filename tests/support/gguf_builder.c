#include "support/gguf_builder.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "format/gguf.h"

void gb_init(gguf_builder *b) { memset(b, 0, sizeof *b); }

void gb_free(gguf_builder *b) {
    free(b->bytes);
    gb_init(b);
}

int gb_ok(const gguf_builder *b) { return !b->failed; }

/* Make room for `extra` more bytes; amortized doubling keeps large images cheap. */
static int reserve(gguf_builder *b, size_t extra) {
    if (b->failed) return 0;
    if (extra > SIZE_MAX - b->len) {
        b->failed = 1;
        return 0;
    }
    size_t need = b->len + extra;
    if (need <= b->cap) return 1;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < need) cap = cap > SIZE_MAX / 2 ? need : cap * 2;
    uint8_t *grown = realloc(b->bytes, cap);
    if (!grown) {
        b->failed = 1;
        return 0;
    }
    b->bytes = grown;
    b->cap = cap;
    return 1;
}

int gb_finish(gguf_builder *b) {
    /* realloc(p, 0) is implementation-defined: keep an empty image's buffer as it is */
    if (b->failed || b->len == 0 || b->len == b->cap) return gb_ok(b);
    uint8_t *exact = realloc(b->bytes, b->len);
    if (!exact) {
        b->failed = 1;
        return 0;
    }
    b->bytes = exact;
    b->cap = b->len;
    return 1;
}

void gb_truncate(gguf_builder *b, size_t len) {
    if (len < b->len) b->len = len;
}

void gb_bytes(gguf_builder *b, const void *src, size_t n) {
    if (n == 0 || !reserve(b, n)) return; /* memcpy from NULL is undefined even for 0 bytes */
    memcpy(b->bytes + b->len, src, n);
    b->len += n;
}

void gb_fill(gguf_builder *b, uint8_t byte, size_t n) {
    if (n == 0 || !reserve(b, n)) return;
    memset(b->bytes + b->len, byte, n);
    b->len += n;
}

/* Little-endian encoding of the low n_bytes of v, independent of the host's byte order. */
static void put_le(gguf_builder *b, uint64_t v, int n_bytes) {
    uint8_t tmp[8];
    for (int i = 0; i < n_bytes; i++) tmp[i] = (uint8_t)(v >> (8 * i));
    gb_bytes(b, tmp, (size_t)n_bytes);
}

void gb_u8(gguf_builder *b, uint8_t v) { put_le(b, v, 1); }
void gb_u16(gguf_builder *b, uint16_t v) { put_le(b, v, 2); }
void gb_u32(gguf_builder *b, uint32_t v) { put_le(b, v, 4); }
void gb_u64(gguf_builder *b, uint64_t v) { put_le(b, v, 8); }

void gb_f32(gguf_builder *b, float v) {
    uint32_t bits;
    memcpy(&bits, &v, sizeof bits);
    gb_u32(b, bits);
}

void gb_f64(gguf_builder *b, double v) {
    uint64_t bits;
    memcpy(&bits, &v, sizeof bits);
    gb_u64(b, bits);
}

void gb_patch_u64(gguf_builder *b, size_t at, uint64_t v) {
    if (b->failed || at > b->len || b->len - at < 8) return;
    for (int i = 0; i < 8; i++) b->bytes[at + (size_t)i] = (uint8_t)(v >> (8 * i));
}

void gb_pad_to(gguf_builder *b, size_t alignment) {
    if (alignment == 0) return;
    size_t rem = b->len % alignment;
    if (rem) gb_fill(b, 0, alignment - rem);
}

void gb_str_n(gguf_builder *b, const char *s, size_t n) {
    gb_u64(b, n);
    gb_bytes(b, s, n);
}

void gb_str(gguf_builder *b, const char *s) { gb_str_n(b, s, strlen(s)); }

void gb_str_lying(gguf_builder *b, uint64_t claimed_len, const char *s, size_t n) {
    gb_u64(b, claimed_len);
    gb_bytes(b, s, n);
}

void gb_header_magic(gguf_builder *b, const char magic[4], uint32_t version, uint64_t n_tensors,
                     uint64_t n_kv) {
    gb_bytes(b, magic, 4);
    gb_u32(b, version);
    gb_u64(b, n_tensors);
    gb_u64(b, n_kv);
}

void gb_header(gguf_builder *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    gb_header_magic(b, "GGUF", version, n_tensors, n_kv);
}

void gb_kv_key(gguf_builder *b, const char *key, uint32_t value_type) {
    gb_str(b, key);
    gb_u32(b, value_type);
}

void gb_kv_u8(gguf_builder *b, const char *key, uint8_t v) {
    gb_kv_key(b, key, GGUF_TYPE_U8);
    gb_u8(b, v);
}

void gb_kv_i8(gguf_builder *b, const char *key, int8_t v) {
    gb_kv_key(b, key, GGUF_TYPE_I8);
    gb_u8(b, (uint8_t)v);
}

void gb_kv_u16(gguf_builder *b, const char *key, uint16_t v) {
    gb_kv_key(b, key, GGUF_TYPE_U16);
    gb_u16(b, v);
}

void gb_kv_i16(gguf_builder *b, const char *key, int16_t v) {
    gb_kv_key(b, key, GGUF_TYPE_I16);
    gb_u16(b, (uint16_t)v);
}

void gb_kv_u32(gguf_builder *b, const char *key, uint32_t v) {
    gb_kv_key(b, key, GGUF_TYPE_U32);
    gb_u32(b, v);
}

void gb_kv_i32(gguf_builder *b, const char *key, int32_t v) {
    gb_kv_key(b, key, GGUF_TYPE_I32);
    gb_u32(b, (uint32_t)v);
}

void gb_kv_f32(gguf_builder *b, const char *key, float v) {
    gb_kv_key(b, key, GGUF_TYPE_F32);
    gb_f32(b, v);
}

void gb_kv_bool(gguf_builder *b, const char *key, int v) {
    gb_kv_key(b, key, GGUF_TYPE_BOOL);
    gb_u8(b, (uint8_t)v); /* raw: a test may store 2 to check that it is rejected */
}

void gb_kv_str(gguf_builder *b, const char *key, const char *v) {
    gb_kv_key(b, key, GGUF_TYPE_STRING);
    gb_str(b, v);
}

void gb_kv_u64(gguf_builder *b, const char *key, uint64_t v) {
    gb_kv_key(b, key, GGUF_TYPE_U64);
    gb_u64(b, v);
}

void gb_kv_i64(gguf_builder *b, const char *key, int64_t v) {
    gb_kv_key(b, key, GGUF_TYPE_I64);
    gb_u64(b, (uint64_t)v);
}

void gb_kv_f64(gguf_builder *b, const char *key, double v) {
    gb_kv_key(b, key, GGUF_TYPE_F64);
    gb_f64(b, v);
}

void gb_array_header(gguf_builder *b, uint32_t elem_type, uint64_t count) {
    gb_u32(b, elem_type);
    gb_u64(b, count);
}

void gb_kv_array_u32(gguf_builder *b, const char *key, const uint32_t *v, size_t n) {
    gb_kv_key(b, key, GGUF_TYPE_ARRAY);
    gb_array_header(b, GGUF_TYPE_U32, n);
    for (size_t i = 0; i < n; i++) gb_u32(b, v[i]);
}

void gb_kv_array_i32(gguf_builder *b, const char *key, const int32_t *v, size_t n) {
    gb_kv_key(b, key, GGUF_TYPE_ARRAY);
    gb_array_header(b, GGUF_TYPE_I32, n);
    for (size_t i = 0; i < n; i++) gb_u32(b, (uint32_t)v[i]);
}

void gb_kv_array_f32(gguf_builder *b, const char *key, const float *v, size_t n) {
    gb_kv_key(b, key, GGUF_TYPE_ARRAY);
    gb_array_header(b, GGUF_TYPE_F32, n);
    for (size_t i = 0; i < n; i++) gb_f32(b, v[i]);
}

void gb_kv_array_str(gguf_builder *b, const char *key, const char *const *v, size_t n) {
    gb_kv_key(b, key, GGUF_TYPE_ARRAY);
    gb_array_header(b, GGUF_TYPE_STRING, n);
    for (size_t i = 0; i < n; i++) gb_str(b, v[i]);
}

void gb_tensor_info(gguf_builder *b, const char *name, uint32_t n_dims, const uint64_t *ne,
                    uint32_t type, uint64_t offset) {
    gb_str(b, name);
    gb_u32(b, n_dims);
    for (uint32_t i = 0; i < n_dims; i++) gb_u64(b, ne[i]);
    gb_u32(b, type);
    gb_u64(b, offset);
}

static int write_all(int fd, const uint8_t *p, size_t n) {
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

int gb_write_temp(const gguf_builder *b, char *path, size_t path_size) {
    static const char name_pattern[] = "/tmp/llmm_gguf_test_XXXXXX";
    if (b->failed || path_size < sizeof name_pattern) return -1;
    memcpy(path, name_pattern, sizeof name_pattern);
    int fd = mkstemp(path);
    if (fd < 0) return -1;
    int failed = write_all(fd, b->bytes, b->len) != 0;
    failed |= close(fd) != 0;
    if (failed) {
        unlink(path);
        return -1;
    }
    return 0;
}
