/* GGUF reader: a file (mapped or read) becomes a validated table of metadata and tensors.
 * After gguf_open succeeds every offset, length and count in the tables is known to lie
 * inside the file, so readers of the tables need no further bounds checks. */
#ifndef LLMM_GGUF_H
#define LLMM_GGUF_H

#include <stddef.h>
#include <stdint.h>

#include "base/common.h"

enum gguf_value_type {
    GGUF_TYPE_U8 = 0,
    GGUF_TYPE_I8 = 1,
    GGUF_TYPE_U16 = 2,
    GGUF_TYPE_I16 = 3,
    GGUF_TYPE_U32 = 4,
    GGUF_TYPE_I32 = 5,
    GGUF_TYPE_F32 = 6,
    GGUF_TYPE_BOOL = 7,
    GGUF_TYPE_STRING = 8,
    GGUF_TYPE_ARRAY = 9,
    GGUF_TYPE_U64 = 10,
    GGUF_TYPE_I64 = 11,
    GGUF_TYPE_F64 = 12,
    GGUF_TYPE_COUNT = 13
};

#define GGUF_MAX_DIMS 4
#define GGUF_MAX_NAME 64            /* tensor names are shorter than this (ggml's limit) */
#define GGUF_MAX_ALIGNMENT 65536u   /* larger alignments are rejected as hostile */
#define GGUF_DEFAULT_ALIGNMENT 32u
#define GGUF_MAX_ARRAY_DEPTH 8      /* nested arrays deeper than this are rejected */

/* A string inside the file: not NUL-terminated. */
typedef struct gguf_str {
    const char *ptr;
    uint64_t len;
} gguf_str;

typedef struct gguf_array {
    uint32_t elem_type;
    uint64_t count;
    const uint8_t *data; /* first element, in file byte order (little-endian) */
    uint64_t bytes;      /* bytes the elements occupy in the file */
} gguf_array;

typedef struct gguf_kv {
    gguf_str key;
    uint32_t type;
    union {
        uint64_t u64; /* every unsigned integer type and bool */
        int64_t i64;  /* every signed integer type */
        double f64;   /* F32 and F64 */
        gguf_str str;
        gguf_array arr;
    } v;
} gguf_kv;

typedef struct gguf_tensor {
    gguf_str name;
    uint32_t n_dims;
    int64_t ne[GGUF_MAX_DIMS]; /* ne[0] is the row length (contiguous); unused dims are 1 */
    uint32_t type;             /* enum llmm_type */
    uint64_t offset;           /* from the start of the data section */
    uint64_t n_elements;
    uint64_t n_bytes;
    const void *data;          /* inside the file bytes */
} gguf_tensor;

typedef struct gguf_file {
    const uint8_t *bytes; /* the whole file */
    uint64_t size;
    uint32_t version;
    uint32_t alignment;
    uint64_t data_offset;
    uint64_t n_kv;
    gguf_kv *kv;
    uint64_t n_tensors;
    gguf_tensor *tensors;
    uint32_t *tensor_by_name; /* tensor indices sorted by name, for binary search */
    /* ownership of bytes */
    const llmm_allocator *alloc;
    void *mapping;       /* from mmap, or NULL */
    void *owned;         /* from llmm__mem_alloc (read fallback), or NULL */
} gguf_file;

/* Open and validate a GGUF file. use_mmap: 1 maps the file (falling back to reading it when
 * mapping fails), 0 reads it into owned memory. Errors: IO, BAD_FILE, NO_MEMORY, with d->msg. */
llmm_status llmm__gguf_open_file(const char *path, int use_mmap, const llmm_allocator *alloc,
                           gguf_file **out, llmm_diag *d);

/* Validate a GGUF image in memory; the bytes are borrowed and must outlive the gguf_file. */
llmm_status llmm__gguf_open_memory(const void *bytes, size_t size, const llmm_allocator *alloc,
                             gguf_file **out, llmm_diag *d);

void llmm__gguf_close(gguf_file *f);

const gguf_kv *llmm__gguf_find_kv(const gguf_file *f, const char *key);
const gguf_tensor *llmm__gguf_find_tensor(const gguf_file *f, const char *name);

/* Scalar accessors: return 1 and store the value when kv holds a compatible type. */
int llmm__gguf_kv_as_int(const gguf_kv *kv, int64_t *out);   /* any integer type or bool */
int llmm__gguf_kv_as_float(const gguf_kv *kv, double *out);  /* F32/F64 */
int llmm__gguf_str_eq(gguf_str s, const char *cstr);

/* Bytes of one scalar element, 0 for STRING/ARRAY/unknown. */
size_t llmm__gguf_scalar_size(uint32_t type);

/* Element i of a numeric array as double / int64 (elem_type must be numeric). */
double llmm__gguf_array_get_f64(const gguf_array *a, uint64_t i);
int64_t llmm__gguf_array_get_i64(const gguf_array *a, uint64_t i);

/* Walk a string array: start with *cursor = a->data; each call yields the next string. */
gguf_str llmm__gguf_array_next_str(const uint8_t **pos);

#endif
