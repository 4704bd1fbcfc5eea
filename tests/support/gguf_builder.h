/* Test helper: builds GGUF images byte by byte, valid or deliberately broken.
 *
 * The writers encode exactly what they are told (little-endian, no validation), so a test
 * can lie about any count, length, type or offset. Counts in the header are whatever the
 * test passes to gb_header; nothing is counted for it.
 *
 * Allocation failures are sticky: the first failed growth sets `failed`, later writes do
 * nothing, and gb_ok / gb_finish report it, so a test checks once instead of after every
 * write. */
#ifndef LLMM_TESTS_GGUF_BUILDER_H
#define LLMM_TESTS_GGUF_BUILDER_H

#include <stddef.h>
#include <stdint.h>

typedef struct gguf_builder {
    uint8_t *bytes;
    size_t len;
    size_t cap;
    int failed; /* an allocation failed; the image is incomplete */
} gguf_builder;

void gb_init(gguf_builder *b);
void gb_free(gguf_builder *b);
int gb_ok(const gguf_builder *b);
/* Shrink the buffer to exactly len bytes, so AddressSanitizer flags any read past the end
 * of the image. Returns gb_ok(b). Further writes still work. */
int gb_finish(gguf_builder *b);
/* Drop everything after the first len bytes (len <= b->len). */
void gb_truncate(gguf_builder *b, size_t len);

/* ---- raw little-endian values */
void gb_bytes(gguf_builder *b, const void *src, size_t n);
void gb_fill(gguf_builder *b, uint8_t byte, size_t n);
void gb_u8(gguf_builder *b, uint8_t v);
void gb_u16(gguf_builder *b, uint16_t v);
void gb_u32(gguf_builder *b, uint32_t v);
void gb_u64(gguf_builder *b, uint64_t v);
void gb_f32(gguf_builder *b, float v);
void gb_f64(gguf_builder *b, double v);
/* Overwrite 8 bytes already written at offset `at` (for counts known only later). */
void gb_patch_u64(gguf_builder *b, size_t at, uint64_t v);
/* Zero bytes up to the next multiple of alignment (a power of two or not, >= 1). */
void gb_pad_to(gguf_builder *b, size_t alignment);

/* ---- GGUF strings: u64 length, then the bytes (no NUL) */
void gb_str(gguf_builder *b, const char *s);
void gb_str_n(gguf_builder *b, const char *s, size_t n);
/* A string header claiming claimed_len bytes while only the n bytes of s follow. */
void gb_str_lying(gguf_builder *b, uint64_t claimed_len, const char *s, size_t n);

/* ---- header: magic "GGUF", version, tensor count, key/value count */
void gb_header(gguf_builder *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv);
/* Raw header with any 4 magic bytes. */
void gb_header_magic(gguf_builder *b, const char magic[4], uint32_t version, uint64_t n_tensors,
                     uint64_t n_kv);

/* ---- key/value pairs. gb_kv_key writes the key and the value type; the value follows. */
void gb_kv_key(gguf_builder *b, const char *key, uint32_t value_type);
void gb_kv_u8(gguf_builder *b, const char *key, uint8_t v);
void gb_kv_i8(gguf_builder *b, const char *key, int8_t v);
void gb_kv_u16(gguf_builder *b, const char *key, uint16_t v);
void gb_kv_i16(gguf_builder *b, const char *key, int16_t v);
void gb_kv_u32(gguf_builder *b, const char *key, uint32_t v);
void gb_kv_i32(gguf_builder *b, const char *key, int32_t v);
void gb_kv_f32(gguf_builder *b, const char *key, float v);
void gb_kv_bool(gguf_builder *b, const char *key, int v);
void gb_kv_str(gguf_builder *b, const char *key, const char *v);
void gb_kv_u64(gguf_builder *b, const char *key, uint64_t v);
void gb_kv_i64(gguf_builder *b, const char *key, int64_t v);
void gb_kv_f64(gguf_builder *b, const char *key, double v);

/* Array header: element type and count; the elements follow (nested arrays start with
 * another gb_array_header). */
void gb_array_header(gguf_builder *b, uint32_t elem_type, uint64_t count);
void gb_kv_array_u32(gguf_builder *b, const char *key, const uint32_t *v, size_t n);
void gb_kv_array_i32(gguf_builder *b, const char *key, const int32_t *v, size_t n);
void gb_kv_array_f32(gguf_builder *b, const char *key, const float *v, size_t n);
void gb_kv_array_str(gguf_builder *b, const char *key, const char *const *v, size_t n);

/* ---- tensor info: name, n_dims, the first n_dims entries of ne, type id, data offset.
 * ne is unsigned so a test can write "negative" (>= 2^63) dimensions. */
void gb_tensor_info(gguf_builder *b, const char *name, uint32_t n_dims, const uint64_t *ne,
                    uint32_t type, uint64_t offset);

/* ---- files */
/* Write the image to a new file made by mkstemp under /tmp; its name goes into path
 * (path_size >= 32). Returns 0 on success, -1 on failure (nothing is left behind).
 * The caller unlinks the file. */
int gb_write_temp(const gguf_builder *b, char *path, size_t path_size);

#endif
