#include "gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "quant.h"

#define GGUF_MAGIC "GGUF"
#define GGUF_HEADER_BYTES 24 /* magic, version, n_tensors, n_kv */
/* Smallest encodings, to bound counts by the bytes left before allocating for them. */
#define GGUF_MIN_KV_BYTES 13     /* key length, empty key excluded later, type, 1-byte value */
#define GGUF_MIN_TENSOR_BYTES 24 /* name length, n_dims, type, offset */

/* A bounds-checked reading position in the file. */
typedef struct cursor {
    const uint8_t *base;
    uint64_t pos;
    uint64_t size;
    llmm_diag *d;
} cursor;

static uint64_t left(const cursor *c) { return c->size - c->pos; }

static llmm_status truncated(cursor *c, const char *what) {
    return llmm__diag_fail(c->d, LLMM_ERR_BAD_FILE, "truncated file: %s at byte %llu runs past the end (%llu bytes)",
                     what, (unsigned long long)c->pos, (unsigned long long)c->size);
}

static llmm_status read_bytes(cursor *c, void *dst, uint64_t n, const char *what) {
    if (n > left(c)) return truncated(c, what);
    memcpy(dst, c->base + c->pos, (size_t)n);
    c->pos += n;
    return LLMM_OK;
}

static llmm_status read_u32(cursor *c, uint32_t *v, const char *what) {
    uint8_t b[4] = {0};
    llmm_status st = read_bytes(c, b, 4, what);
    if (st) return st;
    *v = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
    return LLMM_OK;
}

static uint64_t load_u64(const uint8_t *b) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | b[i];
    return v;
}

static llmm_status read_u64(cursor *c, uint64_t *v, const char *what) {
    uint8_t b[8] = {0};
    llmm_status st = read_bytes(c, b, 8, what);
    if (st) return st;
    *v = load_u64(b);
    return LLMM_OK;
}

static llmm_status read_str(cursor *c, gguf_str *s, const char *what) {
    uint64_t len;
    llmm_status st = read_u64(c, &len, what);
    if (st) return st;
    if (len > left(c))
        return llmm__diag_fail(c->d, LLMM_ERR_BAD_FILE,
                         "%s at byte %llu claims %llu bytes but only %llu remain", what,
                         (unsigned long long)(c->pos - 8), (unsigned long long)len,
                         (unsigned long long)left(c));
    s->ptr = (const char *)c->base + c->pos;
    s->len = len;
    c->pos += len;
    return LLMM_OK;
}

size_t llmm__gguf_scalar_size(uint32_t type) {
    static const uint8_t sizes[GGUF_TYPE_COUNT] = {
        [GGUF_TYPE_U8] = 1,  [GGUF_TYPE_I8] = 1,  [GGUF_TYPE_U16] = 2, [GGUF_TYPE_I16] = 2,
        [GGUF_TYPE_U32] = 4, [GGUF_TYPE_I32] = 4, [GGUF_TYPE_F32] = 4, [GGUF_TYPE_BOOL] = 1,
        [GGUF_TYPE_U64] = 8, [GGUF_TYPE_I64] = 8, [GGUF_TYPE_F64] = 8,
    };
    return type < GGUF_TYPE_COUNT ? sizes[type] : 0;
}

static int is_signed_type(uint32_t t) {
    return t == GGUF_TYPE_I8 || t == GGUF_TYPE_I16 || t == GGUF_TYPE_I32 || t == GGUF_TYPE_I64;
}

/* Decode one little-endian scalar already known to be in bounds. */
static void decode_scalar(uint32_t type, const uint8_t *p, gguf_kv *kv) {
    uint64_t raw = 0;
    size_t n = llmm__gguf_scalar_size(type);
    for (size_t i = n; i-- > 0;) raw = raw << 8 | p[i];
    switch (type) {
    case GGUF_TYPE_I8: kv->v.i64 = (int8_t)raw; break;
    case GGUF_TYPE_I16: kv->v.i64 = (int16_t)raw; break;
    case GGUF_TYPE_I32: kv->v.i64 = (int32_t)raw; break;
    case GGUF_TYPE_I64: kv->v.i64 = (int64_t)raw; break;
    case GGUF_TYPE_F32: {
        uint32_t u = (uint32_t)raw;
        float f;
        memcpy(&f, &u, sizeof f);
        kv->v.f64 = f;
        break;
    }
    case GGUF_TYPE_F64: memcpy(&kv->v.f64, &raw, sizeof raw); break;
    default: kv->v.u64 = raw; break;
    }
}

/* Check an array's elements (recursing into nested arrays) and step over them. */
static llmm_status skip_array(cursor *c, gguf_array *arr, int depth, const char *key) {
    if (depth > GGUF_MAX_ARRAY_DEPTH)
        return llmm__diag_fail(c->d, LLMM_ERR_BAD_FILE, "key '%s': arrays nested deeper than %d", key,
                         GGUF_MAX_ARRAY_DEPTH);
    llmm_status st = read_u32(c, &arr->elem_type, "array element type");
    if (st) return st;
    st = read_u64(c, &arr->count, "array length");
    if (st) return st;
    arr->data = c->base + c->pos;
    uint64_t start = c->pos;
    uint32_t et = arr->elem_type;
    if (et >= GGUF_TYPE_COUNT)
        return llmm__diag_fail(c->d, LLMM_ERR_BAD_FILE, "key '%s': unknown array element type %u", key, et);
    size_t es = llmm__gguf_scalar_size(et);
    if (es) {
        if (arr->count > left(c) / es)
            return llmm__diag_fail(c->d, LLMM_ERR_BAD_FILE,
                             "key '%s': array of %llu elements is larger than the file", key,
                             (unsigned long long)arr->count);
        if (et == GGUF_TYPE_BOOL)
            for (uint64_t i = 0; i < arr->count; i++)
                if (c->base[c->pos + i] > 1)
                    return llmm__diag_fail(c->d, LLMM_ERR_BAD_FILE, "key '%s': bool element %llu is %u",
                                     key, (unsigned long long)i, c->base[c->pos + i]);
        c->pos += arr->count * es;
    } else {
        /* each string needs 8 bytes and each nested array 12: bound the count first so a
         * hostile count cannot make this loop run long */
        uint64_t min_elem = et == GGUF_TYPE_STRING ? 8 : 12;
        if (arr->count > left(c) / min_elem)
            return llmm__diag_fail(c->d, LLMM_ERR_BAD_FILE,
                             "key '%s': array of %llu elements is larger than the file", key,
                             (unsigned long long)arr->count);
        for (uint64_t i = 0; i < arr->count; i++) {
            if (et == GGUF_TYPE_STRING) {
                gguf_str s;
                st = read_str(c, &s, "array string");
            } else {
                gguf_array inner;
                st = skip_array(c, &inner, depth + 1, key);
            }
            if (st) return st;
        }
    }
    arr->bytes = c->pos - start;
    return LLMM_OK;
}

static llmm_status read_kv(cursor *c, gguf_kv *kv, uint64_t index) {
    llmm_status st = read_str(c, &kv->key, "metadata key");
    if (st) return st;
    if (kv->key.len == 0)
        return llmm__diag_fail(c->d, LLMM_ERR_BAD_FILE, "metadata key %llu is empty", (unsigned long long)index);
    char key[96];
    snprintf(key, sizeof key, "%.*s", (int)LLMM_MIN(kv->key.len, 80u), kv->key.ptr);
    st = read_u32(c, &kv->type, "metadata value type");
    if (st) return st;
    if (kv->type >= GGUF_TYPE_COUNT)
        return llmm__diag_fail(c->d, LLMM_ERR_BAD_FILE, "key '%s': unknown value type %u", key, kv->type);
    if (kv->type == GGUF_TYPE_STRING) return read_str(c, &kv->v.str, "metadata string");
    if (kv->type == GGUF_TYPE_ARRAY) return skip_array(c, &kv->v.arr, 1, key);
    size_t n = llmm__gguf_scalar_size(kv->type);
    if (n > left(c)) return truncated(c, "metadata value");
    const uint8_t *p = c->base + c->pos;
    if (kv->type == GGUF_TYPE_BOOL && *p > 1)
        return llmm__diag_fail(c->d, LLMM_ERR_BAD_FILE, "key '%s': bool value is %u", key, *p);
    decode_scalar(kv->type, p, kv);
    c->pos += n;
    return LLMM_OK;
}

static int str_cmp(gguf_str a, gguf_str b) {
    int r = memcmp(a.ptr, b.ptr, (size_t)LLMM_MIN(a.len, b.len));
    if (r) return r;
    return a.len < b.len ? -1 : a.len > b.len;
}

int llmm__gguf_str_eq(gguf_str s, const char *cstr) {
    size_t n = strlen(cstr);
    return s.len == n && memcmp(s.ptr, cstr, n) == 0;
}

/* qsort over indices needs the table: sort an array of pointers instead, no global state. */
static int cmp_kv_ptr(const void *a, const void *b) {
    return str_cmp((*(const gguf_kv *const *)a)->key, (*(const gguf_kv *const *)b)->key);
}

static llmm_status check_duplicate_keys(gguf_file *f, llmm_diag *d) {
    if (f->n_kv < 2) return LLMM_OK;
    const gguf_kv **sorted = llmm__mem_calloc(f->alloc, (size_t)f->n_kv, sizeof *sorted);
    if (!sorted) return llmm__diag_fail(d, LLMM_ERR_NO_MEMORY, "out of memory sorting metadata keys");
    for (uint64_t i = 0; i < f->n_kv; i++) sorted[i] = &f->kv[i];
    qsort(sorted, (size_t)f->n_kv, sizeof *sorted, cmp_kv_ptr);
    llmm_status st = LLMM_OK;
    for (uint64_t i = 1; i < f->n_kv && !st; i++)
        if (str_cmp(sorted[i - 1]->key, sorted[i]->key) == 0)
            st = llmm__diag_fail(d, LLMM_ERR_BAD_FILE, "duplicate metadata key '%.*s'",
                           (int)LLMM_MIN(sorted[i]->key.len, 80u), sorted[i]->key.ptr);
    llmm__mem_free(f->alloc, sorted);
    return st;
}

static llmm_status read_alignment(gguf_file *f, llmm_diag *d) {
    f->alignment = GGUF_DEFAULT_ALIGNMENT;
    const gguf_kv *kv = llmm__gguf_find_kv(f, "general.alignment");
    if (!kv) return LLMM_OK;
    if (kv->type != GGUF_TYPE_U32)
        return llmm__diag_fail(d, LLMM_ERR_BAD_FILE, "general.alignment has type %u, expected u32", kv->type);
    uint64_t a = kv->v.u64;
    if (a == 0 || (a & (a - 1)) != 0)
        return llmm__diag_fail(d, LLMM_ERR_BAD_FILE, "general.alignment %llu is not a power of two",
                         (unsigned long long)a);
    if (a > GGUF_MAX_ALIGNMENT)
        return llmm__diag_fail(d, LLMM_ERR_BAD_FILE, "general.alignment %llu exceeds the limit %u",
                         (unsigned long long)a, GGUF_MAX_ALIGNMENT);
    f->alignment = (uint32_t)a;
    return LLMM_OK;
}

static llmm_status read_tensor_info(cursor *c, gguf_tensor *t, uint64_t index) {
    llmm_status st = read_str(c, &t->name, "tensor name");
    if (st) return st;
    if (t->name.len == 0 || t->name.len >= GGUF_MAX_NAME)
        return llmm__diag_fail(c->d, LLMM_ERR_BAD_FILE, "tensor %llu: name length %llu not in 1..%d",
                         (unsigned long long)index, (unsigned long long)t->name.len, GGUF_MAX_NAME - 1);
    int nl = (int)t->name.len;
    st = read_u32(c, &t->n_dims, "tensor n_dims");
    if (st) return st;
    if (t->n_dims > GGUF_MAX_DIMS)
        return llmm__diag_fail(c->d, LLMM_ERR_BAD_FILE, "tensor '%.*s': %u dimensions (at most %d)", nl,
                         t->name.ptr, t->n_dims, GGUF_MAX_DIMS);
    uint64_t n_el = 1;
    for (int j = 0; j < GGUF_MAX_DIMS; j++) {
        uint64_t ne = 1;
        if ((uint32_t)j < t->n_dims && (st = read_u64(c, &ne, "tensor dimension"))) return st;
        if (ne > (uint64_t)INT64_MAX)
            return llmm__diag_fail(c->d, LLMM_ERR_BAD_FILE, "tensor '%.*s': dimension %d is negative", nl,
                             t->name.ptr, j);
        if (ne != 0 && n_el > (uint64_t)INT64_MAX / ne)
            return llmm__diag_fail(c->d, LLMM_ERR_BAD_FILE,
                             "tensor '%.*s': element count overflows (dims multiply past 2^63)", nl,
                             t->name.ptr);
        n_el *= ne;
        t->ne[j] = (int64_t)ne;
    }
    t->n_elements = n_el;
    st = read_u32(c, &t->type, "tensor type");
    if (st) return st;
    const llmm_type_traits *tt = llmm__type_get(t->type);
    if (!tt)
        return llmm__diag_fail(c->d, LLMM_ERR_BAD_FILE, "tensor '%.*s': unknown type id %u", nl,
                         t->name.ptr, t->type);
    if (t->ne[0] % tt->block_size != 0)
        return llmm__diag_fail(c->d, LLMM_ERR_BAD_FILE,
                         "tensor '%.*s': row length %lld is not a multiple of the %s block size %u", nl,
                         t->name.ptr, (long long)t->ne[0], tt->name, tt->block_size);
    const uint64_t blocks = n_el / tt->block_size;
    if (blocks > UINT64_MAX / tt->block_bytes)
        return llmm__diag_fail(c->d, LLMM_ERR_BAD_FILE, "tensor '%.*s': byte size overflows", nl, t->name.ptr);
    t->n_bytes = blocks * tt->block_bytes;
    return read_u64(c, &t->offset, "tensor offset");
}

static int cmp_tensor_offset(const void *a, const void *b) {
    const gguf_tensor *x = *(const gguf_tensor *const *)a, *y = *(const gguf_tensor *const *)b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* Offsets aligned, inside the data section, and no two tensors sharing bytes. */
static llmm_status check_tensor_placement(gguf_file *f, llmm_diag *d) {
    uint64_t data_size = f->size > f->data_offset ? f->size - f->data_offset : 0;
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        gguf_tensor *t = &f->tensors[i];
        int nl = (int)t->name.len;
        if (t->offset % f->alignment != 0)
            return llmm__diag_fail(d, LLMM_ERR_BAD_FILE, "tensor '%.*s': offset %llu is not aligned to %u",
                             nl, t->name.ptr, (unsigned long long)t->offset, f->alignment);
        if (t->offset > data_size || t->n_bytes > data_size - t->offset)
            return llmm__diag_fail(d, LLMM_ERR_BAD_FILE,
                             "tensor '%.*s': %llu bytes at offset %llu run past the end of the data section (%llu bytes)",
                             nl, t->name.ptr, (unsigned long long)t->n_bytes, (unsigned long long)t->offset,
                             (unsigned long long)data_size);
        t->data = f->bytes + f->data_offset + t->offset;
    }
    if (f->n_tensors < 2) return LLMM_OK;
    gguf_tensor **sorted = llmm__mem_calloc(f->alloc, (size_t)f->n_tensors, sizeof *sorted);
    if (!sorted) return llmm__diag_fail(d, LLMM_ERR_NO_MEMORY, "out of memory sorting tensors");
    for (uint64_t i = 0; i < f->n_tensors; i++) sorted[i] = &f->tensors[i];
    qsort(sorted, (size_t)f->n_tensors, sizeof *sorted, cmp_tensor_offset);
    /* empty tensors occupy no bytes, so they overlap nothing wherever they sit */
    llmm_status st = LLMM_OK;
    const gguf_tensor *prev = NULL;
    for (uint64_t i = 0; i < f->n_tensors && !st; i++) {
        const gguf_tensor *b = sorted[i];
        if (b->n_bytes == 0) continue;
        if (prev && prev->offset + prev->n_bytes > b->offset)
            st = llmm__diag_fail(d, LLMM_ERR_BAD_FILE, "tensors '%.*s' and '%.*s' overlap", (int)prev->name.len,
                           prev->name.ptr, (int)b->name.len, b->name.ptr);
        prev = b;
    }
    llmm__mem_free(f->alloc, sorted);
    return st;
}

typedef struct name_sort {
    const gguf_tensor *tensors;
    uint32_t index;
} name_sort;

static int cmp_name_sort(const void *a, const void *b) {
    const name_sort *x = a, *y = b;
    return str_cmp(x->tensors[x->index].name, y->tensors[y->index].name);
}

static llmm_status index_tensor_names(gguf_file *f, llmm_diag *d) {
    if (f->n_tensors == 0) return LLMM_OK;
    name_sort *tmp = llmm__mem_calloc(f->alloc, (size_t)f->n_tensors, sizeof *tmp);
    f->tensor_by_name = llmm__mem_calloc(f->alloc, (size_t)f->n_tensors, sizeof *f->tensor_by_name);
    if (!tmp || !f->tensor_by_name) {
        llmm__mem_free(f->alloc, tmp);
        return llmm__diag_fail(d, LLMM_ERR_NO_MEMORY, "out of memory indexing tensor names");
    }
    for (uint64_t i = 0; i < f->n_tensors; i++) tmp[i] = (name_sort){f->tensors, (uint32_t)i};
    qsort(tmp, (size_t)f->n_tensors, sizeof *tmp, cmp_name_sort);
    llmm_status st = LLMM_OK;
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        f->tensor_by_name[i] = tmp[i].index;
        if (i > 0 && !st && cmp_name_sort(&tmp[i - 1], &tmp[i]) == 0) {
            gguf_str n = f->tensors[tmp[i].index].name;
            st = llmm__diag_fail(d, LLMM_ERR_BAD_FILE, "duplicate tensor name '%.*s'", (int)n.len, n.ptr);
        }
    }
    llmm__mem_free(f->alloc, tmp);
    return st;
}

static llmm_status parse(gguf_file *f, llmm_diag *d) {
    cursor c = {f->bytes, 0, f->size, d};
    if (f->size < GGUF_HEADER_BYTES)
        return llmm__diag_fail(d, LLMM_ERR_BAD_FILE, "file of %llu bytes is too short for a GGUF header",
                         (unsigned long long)f->size);
    if (memcmp(f->bytes, GGUF_MAGIC, 4) != 0)
        return llmm__diag_fail(d, LLMM_ERR_BAD_FILE, "bad magic: not a GGUF file");
    c.pos = 4;
    llmm_status st = read_u32(&c, &f->version, "version");
    if (st) return st;
    if (f->version == 1)
        return llmm__diag_fail(d, LLMM_ERR_BAD_FILE, "GGUF version 1 is obsolete; convert the file again");
    if (f->version != 2 && f->version != 3)
        return llmm__diag_fail(d, LLMM_ERR_BAD_FILE, "GGUF version %u is not supported (2 and 3 are)%s",
                         f->version, (f->version & 0xffffu) == 0 ? "; big-endian files are not supported" : "");
    if ((st = read_u64(&c, &f->n_tensors, "tensor count")) || (st = read_u64(&c, &f->n_kv, "key count")))
        return st;
    if (f->n_kv > left(&c) / GGUF_MIN_KV_BYTES)
        return llmm__diag_fail(d, LLMM_ERR_BAD_FILE, "metadata count %llu is larger than the file allows",
                         (unsigned long long)f->n_kv);
    if (f->n_tensors > left(&c) / GGUF_MIN_TENSOR_BYTES || f->n_tensors > UINT32_MAX)
        return llmm__diag_fail(d, LLMM_ERR_BAD_FILE, "tensor count %llu is larger than the file allows",
                         (unsigned long long)f->n_tensors);
    f->kv = llmm__mem_calloc(f->alloc, (size_t)f->n_kv, sizeof *f->kv);
    f->tensors = llmm__mem_calloc(f->alloc, (size_t)f->n_tensors, sizeof *f->tensors);
    if (!f->kv || !f->tensors) return llmm__diag_fail(d, LLMM_ERR_NO_MEMORY, "out of memory for the GGUF tables");
    for (uint64_t i = 0; i < f->n_kv; i++)
        if ((st = read_kv(&c, &f->kv[i], i))) return st;
    if ((st = check_duplicate_keys(f, d)) || (st = read_alignment(f, d))) return st;
    for (uint64_t i = 0; i < f->n_tensors; i++)
        if ((st = read_tensor_info(&c, &f->tensors[i], i))) return st;
    if ((st = index_tensor_names(f, d))) return st;
    uint64_t a = f->alignment;
    f->data_offset = (c.pos + a - 1) / a * a;
    if (f->n_tensors > 0 && f->data_offset > f->size)
        return llmm__diag_fail(d, LLMM_ERR_BAD_FILE, "truncated file: data section starts past the end");
    return check_tensor_placement(f, d);
}

static llmm_status open_common(gguf_file *f, gguf_file **out, llmm_diag *d) {
    llmm_status st = parse(f, d);
    if (st) {
        llmm__gguf_close(f);
        return st;
    }
    *out = f;
    return LLMM_OK;
}

llmm_status llmm__gguf_open_memory(const void *bytes, size_t size, const llmm_allocator *alloc,
                             gguf_file **out, llmm_diag *d) {
    if (!out || (!bytes && size)) return llmm__diag_fail(d, LLMM_ERR_INVALID_ARG, "gguf_open_memory: NULL argument");
    *out = NULL;
    gguf_file *f = llmm__mem_calloc(alloc, 1, sizeof *f);
    if (!f) return llmm__diag_fail(d, LLMM_ERR_NO_MEMORY, "out of memory");
    f->alloc = alloc;
    f->bytes = bytes;
    f->size = size;
    return open_common(f, out, d);
}

static llmm_status read_whole(int fd, gguf_file *f, const char *path, llmm_diag *d) {
    f->owned = llmm__mem_alloc(f->alloc, (size_t)f->size);
    if (!f->owned)
        return llmm__diag_fail(d, LLMM_ERR_NO_MEMORY, "out of memory reading %llu bytes of '%s'",
                         (unsigned long long)f->size, path);
    uint8_t *dst = f->owned;
    uint64_t done = 0;
    while (done < f->size) {
        size_t chunk = (size_t)LLMM_MIN(f->size - done, (uint64_t)1 << 30);
        ssize_t r = read(fd, dst + done, chunk);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return llmm__diag_fail(d, LLMM_ERR_IO, "reading '%s' failed: %s", path, r ? strerror(errno) : "file shrank");
        done += (uint64_t)r;
    }
    f->bytes = f->owned;
    return LLMM_OK;
}

llmm_status llmm__gguf_open_file(const char *path, int use_mmap, const llmm_allocator *alloc,
                           gguf_file **out, llmm_diag *d) {
    if (!path || !out) return llmm__diag_fail(d, LLMM_ERR_INVALID_ARG, "gguf_open_file: NULL argument");
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return llmm__diag_fail(d, LLMM_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return llmm__diag_fail(d, LLMM_ERR_IO, "'%s' is not a regular file", path);
    }
    gguf_file *f = llmm__mem_calloc(alloc, 1, sizeof *f);
    if (!f) {
        close(fd);
        return llmm__diag_fail(d, LLMM_ERR_NO_MEMORY, "out of memory");
    }
    f->alloc = alloc;
    f->size = (uint64_t)sb.st_size;
    llmm_status st = LLMM_OK;
    if (f->size < GGUF_HEADER_BYTES) {
        st = llmm__diag_fail(d, LLMM_ERR_BAD_FILE, "'%s' has %llu bytes, too short for a GGUF header", path,
                       (unsigned long long)f->size);
    } else if (f->size > SIZE_MAX) {
        st = llmm__diag_fail(d, LLMM_ERR_UNSUPPORTED, "'%s' is larger than this address space", path);
    } else {
        void *m = use_mmap ? mmap(NULL, (size_t)f->size, PROT_READ, MAP_PRIVATE, fd, 0) : MAP_FAILED;
        if (m != MAP_FAILED) {
            f->mapping = m;
            f->bytes = m;
        } else {
            st = read_whole(fd, f, path, d);
        }
    }
    close(fd);
    if (st) {
        llmm__gguf_close(f);
        return st;
    }
    return open_common(f, out, d);
}

void llmm__gguf_close(gguf_file *f) {
    if (!f) return;
    const llmm_allocator *a = f->alloc;
    if (f->mapping) munmap(f->mapping, (size_t)f->size);
    llmm__mem_free(a, f->owned);
    llmm__mem_free(a, f->kv);
    llmm__mem_free(a, f->tensors);
    llmm__mem_free(a, f->tensor_by_name);
    llmm__mem_free(a, f);
}

const gguf_kv *llmm__gguf_find_kv(const gguf_file *f, const char *key) {
    for (uint64_t i = 0; i < f->n_kv; i++)
        if (llmm__gguf_str_eq(f->kv[i].key, key)) return &f->kv[i];
    return NULL;
}

const gguf_tensor *llmm__gguf_find_tensor(const gguf_file *f, const char *name) {
    gguf_str want = {name, strlen(name)};
    uint64_t lo = 0, hi = f->n_tensors;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        const gguf_tensor *t = &f->tensors[f->tensor_by_name[mid]];
        int r = str_cmp(t->name, want);
        if (r == 0) return t;
        if (r < 0) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}

int llmm__gguf_kv_as_int(const gguf_kv *kv, int64_t *out) {
    if (!kv || !llmm__gguf_scalar_size(kv->type) || kv->type == GGUF_TYPE_F32 || kv->type == GGUF_TYPE_F64)
        return 0;
    if (!is_signed_type(kv->type) && kv->v.u64 > (uint64_t)INT64_MAX) return 0;
    *out = kv->v.i64;
    return 1;
}

int llmm__gguf_kv_as_float(const gguf_kv *kv, double *out) {
    if (!kv || (kv->type != GGUF_TYPE_F32 && kv->type != GGUF_TYPE_F64)) return 0;
    *out = kv->v.f64;
    return 1;
}

double llmm__gguf_array_get_f64(const gguf_array *a, uint64_t i) {
    gguf_kv tmp;
    decode_scalar(a->elem_type, a->data + i * llmm__gguf_scalar_size(a->elem_type), &tmp);
    if (a->elem_type == GGUF_TYPE_F32 || a->elem_type == GGUF_TYPE_F64) return tmp.v.f64;
    return is_signed_type(a->elem_type) ? (double)tmp.v.i64 : (double)tmp.v.u64;
}

int64_t llmm__gguf_array_get_i64(const gguf_array *a, uint64_t i) {
    gguf_kv tmp;
    decode_scalar(a->elem_type, a->data + i * llmm__gguf_scalar_size(a->elem_type), &tmp);
    if (a->elem_type == GGUF_TYPE_F32 || a->elem_type == GGUF_TYPE_F64) return (int64_t)tmp.v.f64;
    return tmp.v.i64;
}

gguf_str llmm__gguf_array_next_str(const uint8_t **pos) {
    gguf_str s;
    s.len = load_u64(*pos);
    s.ptr = (const char *)*pos + 8;
    *pos += 8 + s.len;
    return s;
}
