/* GGUF reader tests: valid files read back exactly, hostile files are refused with
 * LLMM_ERR_BAD_FILE (or the stated status) and a message, and nothing crashes or leaks.
 *
 * Images are built in memory by tests/support/gguf_builder.c and handed to llmm__gguf_open_memory from
 * an exact-size heap buffer, so under -fsanitize=address a read one byte past the end of
 * the image is caught, not hidden by spare buffer capacity. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "format/gguf.h"
#include "support/gguf_builder.h"
#include "llmmini.h"
#include "format/quant.h"

/* ------------------------------------------------------------------ helpers */

static uint32_t le32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t le64(const uint8_t *p) { return (uint64_t)le32(p) | (uint64_t)le32(p + 4) << 32; }

static uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

/* Open a builder's image that must be valid. The builder keeps owning the bytes, so the
 * caller closes the file before freeing the builder. */
static gguf_file *open_valid(gguf_builder *b) {
    assert_true(gb_finish(b));
    llmm_diag d = {{0}};
    gguf_file *f = NULL;
    llmm_status st = llmm__gguf_open_memory(b->bytes, b->len, NULL, &f, &d);
    if (st != LLMM_OK) print_message("unexpected rejection: %s\n", d.msg);
    assert_int_equal(st, LLMM_OK);
    assert_non_null(f);
    return f;
}

/* Set GGUF_TEST_SHOW_DIAG=1 to print every rejection message, to check that each hostile
 * file is refused for the reason its test is about and not for an earlier one. */
static void show_diag(const char *msg) {
    if (getenv("GGUF_TEST_SHOW_DIAG")) print_message("    diag: %s\n", msg);
}

/* Open a hostile image, release everything, then check the verdict: status `want`, no
 * file handed out, and a message saying why. Releasing first keeps a failed assertion
 * from also reporting a leak. */
static void expect_status(gguf_builder *b, llmm_status want) {
    int built = gb_finish(b);
    llmm_diag d = {{0}};
    gguf_file *f = NULL;
    llmm_status st = built ? llmm__gguf_open_memory(b->bytes, b->len, NULL, &f, &d) : LLMM_ERR_NO_MEMORY;
    int handed_out = f != NULL;
    llmm__gguf_close(f);
    gb_free(b);
    show_diag(d.msg);
    if (st != want) print_message("got status %d (%s), wanted %d\n", st, d.msg, want);
    assert_true(built);
    assert_int_equal(st, want);
    assert_false(handed_out);
    assert_true(d.msg[0] != '\0');
}

static void expect_bad_file(gguf_builder *b) { expect_status(b, LLMM_ERR_BAD_FILE); }

/* Open the first len bytes of an image from their own exact-size allocation. */
static llmm_status open_prefix(const gguf_builder *b, size_t len, llmm_diag *d, int *handed_out) {
    uint8_t *copy = malloc(len ? len : 1);
    assert_non_null(copy);
    if (len) memcpy(copy, b->bytes, len);
    gguf_file *f = NULL;
    llmm_status st = llmm__gguf_open_memory(copy, len, NULL, &f, d);
    *handed_out = f != NULL;
    llmm__gguf_close(f);
    free(copy);
    return st;
}

static void expect_prefix_rejected(const gguf_builder *b, size_t len) {
    llmm_diag d = {{0}};
    int handed_out;
    llmm_status st = open_prefix(b, len, &d, &handed_out);
    show_diag(d.msg);
    if (st != LLMM_ERR_BAD_FILE) print_message("prefix of %zu bytes: status %d\n", len, st);
    assert_int_equal(st, LLMM_ERR_BAD_FILE);
    assert_false(handed_out);
    assert_true(d.msg[0] != '\0');
}

static const gguf_kv *find_kv_typed(const gguf_file *f, const char *key, uint32_t type) {
    const gguf_kv *kv = llmm__gguf_find_kv(f, key);
    if (!kv) print_message("missing key %s\n", key);
    assert_non_null(kv);
    assert_int_equal(kv->type, type);
    return kv;
}

static void expect_int(const gguf_file *f, const char *key, uint32_t type, int64_t want) {
    int64_t got = 0;
    double unused;
    const gguf_kv *kv = find_kv_typed(f, key, type);
    assert_true(llmm__gguf_kv_as_int(kv, &got));
    assert_true(got == want);
    assert_false(llmm__gguf_kv_as_float(kv, &unused));
}

static void expect_float(const gguf_file *f, const char *key, uint32_t type, double want) {
    double got = 0;
    int64_t unused;
    const gguf_kv *kv = find_kv_typed(f, key, type);
    assert_true(llmm__gguf_kv_as_float(kv, &got));
    assert_true(got == want); /* exactly representable values only */
    assert_true(kv->v.f64 == want);
    assert_false(llmm__gguf_kv_as_int(kv, &unused));
}

static void expect_gguf_str(gguf_str s, const char *want) {
    if (!llmm__gguf_str_eq(s, want)) print_message("got '%.*s', wanted '%s'\n", (int)s.len, s.ptr, want);
    assert_true(llmm__gguf_str_eq(s, want));
}

/* ---- tensors */

typedef struct tensor_spec {
    const char *name;
    uint32_t n_dims;
    uint64_t ne[GGUF_MAX_DIMS];
    uint32_t type;
    uint64_t n_bytes; /* worked out by hand from the block layout, not by the library */
} tensor_spec;

/* Four types with their sizes by hand: F32 4 bytes, F16 2, Q8_0 34 per 32, Q4_0 18 per 32. */
static const tensor_spec sample_tensors[] = {
    {"token_embd.weight", 2, {4, 3}, LLMM_TYPE_F32, 4 * 3 * 4},
    {"blk.0.attn_norm.weight", 2, {8, 2}, LLMM_TYPE_F16, 8 * 2 * 2},
    {"blk.0.ffn_up.weight", 2, {64, 2}, LLMM_TYPE_Q8_0, 4 * 34},
    {"output.weight", 3, {32, 3, 1}, LLMM_TYPE_Q4_0, 3 * 18},
};
#define N_SAMPLE_TENSORS (sizeof sample_tensors / sizeof *sample_tensors)

/* A recognisable byte for each position of each tensor, to prove data pointers are right. */
static uint8_t pattern_byte(size_t tensor, uint64_t j) { return (uint8_t)(tensor * 37 + j * 3 + 1); }

/* Write tensor infos with offsets packed at `alignment`, pad to the data section, then the
 * tensors' bytes. The header and key/values come first, from the caller. offsets[i]
 * receives tensor i's offset; returns where the data section starts. The image ends
 * exactly at the end of the last tensor. */
static size_t put_tensors(gguf_builder *b, const tensor_spec *specs, size_t n, uint64_t alignment,
                          uint64_t *offsets) {
    uint64_t next = 0;
    for (size_t i = 0; i < n; i++) {
        offsets[i] = align_up(next, alignment);
        next = offsets[i] + specs[i].n_bytes;
        gb_tensor_info(b, specs[i].name, specs[i].n_dims, specs[i].ne, specs[i].type, offsets[i]);
    }
    gb_pad_to(b, (size_t)alignment);
    size_t data_start = b->len;
    for (size_t i = 0; i < n; i++) {
        gb_fill(b, 0, (size_t)(data_start + offsets[i] - b->len));
        for (uint64_t j = 0; j < specs[i].n_bytes; j++) gb_u8(b, pattern_byte(i, j));
    }
    return data_start;
}

static void expect_tensor_matches(const gguf_file *f, const tensor_spec *spec, size_t index,
                                  uint64_t offset) {
    const gguf_tensor *t = llmm__gguf_find_tensor(f, spec->name);
    assert_non_null(t);
    expect_gguf_str(t->name, spec->name);
    assert_int_equal(t->n_dims, spec->n_dims);
    uint64_t n_elements = 1;
    for (uint32_t j = 0; j < GGUF_MAX_DIMS; j++) {
        uint64_t want = j < spec->n_dims ? spec->ne[j] : 1;
        assert_true((uint64_t)t->ne[j] == want);
        n_elements *= want;
    }
    assert_int_equal(t->type, spec->type);
    assert_int_equal(t->offset, offset);
    assert_int_equal(t->n_elements, n_elements);
    assert_int_equal(t->n_bytes, spec->n_bytes);
    const uint8_t *data = t->data;
    assert_ptr_equal(data, f->bytes + f->data_offset + offset);
    for (uint64_t j = 0; j < spec->n_bytes; j++) assert_int_equal(data[j], pattern_byte(index, j));
}

/* A file with key/values of several kinds and the four sample tensors. */
static void build_rich_file(gguf_builder *b, uint64_t *offsets) {
    static const char *const words[] = {"alpha", "", "gamma"};
    static const float floats[] = {0.5f, -2.0f};
    gb_header(b, 3, N_SAMPLE_TENSORS, 6);
    gb_kv_str(b, "general.architecture", "llama");
    gb_kv_u32(b, "llama.block_count", 1);
    gb_kv_f32(b, "llama.rope.freq_base", 10000.0f);
    gb_kv_bool(b, "tokenizer.ggml.add_bos_token", 1);
    gb_kv_array_str(b, "words", words, 3);
    gb_kv_array_f32(b, "floats", floats, 2);
    put_tensors(b, sample_tensors, N_SAMPLE_TENSORS, GGUF_DEFAULT_ALIGNMENT, offsets);
}

/* ------------------------------------------------------------------ positive: metadata */

static void test_scalar_values_read_back(void **state) {
    (void)state;
    gguf_builder b;
    gb_init(&b);
    gb_header(&b, 3, 0, 15);
    gb_kv_u8(&b, "u8", 255);
    gb_kv_i8(&b, "i8", -128);
    gb_kv_u16(&b, "u16", 65535);
    gb_kv_i16(&b, "i16", -32768);
    gb_kv_u32(&b, "u32", 4294967295u);
    gb_kv_i32(&b, "i32", INT32_MIN);
    gb_kv_f32(&b, "f32", 1.5f);
    gb_kv_bool(&b, "bool.true", 1);
    gb_kv_bool(&b, "bool.false", 0);
    gb_kv_str(&b, "string", "h\xc3\xa9llo");
    gb_kv_str(&b, "string.empty", "");
    gb_kv_u64(&b, "u64", UINT64_MAX);
    gb_kv_u64(&b, "u64.small", (uint64_t)1 << 40);
    gb_kv_i64(&b, "i64", INT64_MIN);
    gb_kv_f64(&b, "f64", -2.25);
    gguf_file *f = open_valid(&b);

    assert_int_equal(f->n_kv, 15);
    expect_int(f, "u8", GGUF_TYPE_U8, 255);
    expect_int(f, "i8", GGUF_TYPE_I8, -128);
    expect_int(f, "u16", GGUF_TYPE_U16, 65535);
    expect_int(f, "i16", GGUF_TYPE_I16, -32768);
    expect_int(f, "u32", GGUF_TYPE_U32, 4294967295);
    expect_int(f, "i32", GGUF_TYPE_I32, INT32_MIN);
    expect_int(f, "bool.true", GGUF_TYPE_BOOL, 1);
    expect_int(f, "bool.false", GGUF_TYPE_BOOL, 0);
    expect_int(f, "u64.small", GGUF_TYPE_U64, (int64_t)1 << 40);
    expect_int(f, "i64", GGUF_TYPE_I64, INT64_MIN);
    expect_float(f, "f32", GGUF_TYPE_F32, 1.5);
    expect_float(f, "f64", GGUF_TYPE_F64, -2.25);

    /* the union keeps the raw value even where as_int must refuse it (past INT64_MAX) */
    int64_t refused;
    const gguf_kv *big = find_kv_typed(f, "u64", GGUF_TYPE_U64);
    assert_true(big->v.u64 == UINT64_MAX);
    assert_false(llmm__gguf_kv_as_int(big, &refused));
    assert_true(find_kv_typed(f, "u8", GGUF_TYPE_U8)->v.u64 == 255);
    assert_true(find_kv_typed(f, "i16", GGUF_TYPE_I16)->v.i64 == -32768);
    assert_true(find_kv_typed(f, "bool.true", GGUF_TYPE_BOOL)->v.u64 == 1);

    const gguf_kv *s = find_kv_typed(f, "string", GGUF_TYPE_STRING);
    expect_gguf_str(s->v.str, "h\xc3\xa9llo");
    assert_false(llmm__gguf_kv_as_int(s, &refused));
    expect_gguf_str(find_kv_typed(f, "string.empty", GGUF_TYPE_STRING)->v.str, "");
    assert_null(llmm__gguf_find_kv(f, "missing"));
    assert_null(llmm__gguf_find_kv(f, "u")); /* a prefix of a key is not the key */
    llmm__gguf_close(f);
    gb_free(&b);
}

static void test_numeric_arrays_read_back(void **state) {
    (void)state;
    static const uint32_t u32s[] = {0, 7, 4294967295u};
    static const int32_t i32s[] = {-1, 300, INT32_MIN};
    static const float f32s[] = {0.5f, -3.0f};
    gguf_builder b;
    gb_init(&b);
    gb_header(&b, 3, 0, 6);
    gb_kv_array_u32(&b, "u32s", u32s, 3);
    gb_kv_array_i32(&b, "i32s", i32s, 3);
    gb_kv_array_f32(&b, "f32s", f32s, 2);
    gb_kv_key(&b, "f64s", GGUF_TYPE_ARRAY);
    gb_array_header(&b, GGUF_TYPE_F64, 1);
    gb_f64(&b, 1e300);
    gb_kv_key(&b, "bools", GGUF_TYPE_ARRAY);
    gb_array_header(&b, GGUF_TYPE_BOOL, 2);
    gb_u8(&b, 1);
    gb_u8(&b, 0);
    gb_kv_key(&b, "empty", GGUF_TYPE_ARRAY);
    gb_array_header(&b, GGUF_TYPE_U8, 0);
    gguf_file *f = open_valid(&b);

    const gguf_array *a = &find_kv_typed(f, "u32s", GGUF_TYPE_ARRAY)->v.arr;
    assert_int_equal(a->elem_type, GGUF_TYPE_U32);
    assert_int_equal(a->count, 3);
    assert_int_equal(a->bytes, 12);
    for (uint64_t i = 0; i < 3; i++) assert_true(llmm__gguf_array_get_i64(a, i) == (int64_t)u32s[i]);

    a = &find_kv_typed(f, "i32s", GGUF_TYPE_ARRAY)->v.arr;
    assert_int_equal(a->count, 3);
    for (uint64_t i = 0; i < 3; i++) assert_true(llmm__gguf_array_get_i64(a, i) == i32s[i]);
    assert_true(llmm__gguf_array_get_f64(a, 0) == -1.0);

    a = &find_kv_typed(f, "f32s", GGUF_TYPE_ARRAY)->v.arr;
    assert_int_equal(a->elem_type, GGUF_TYPE_F32);
    for (uint64_t i = 0; i < 2; i++) assert_true(llmm__gguf_array_get_f64(a, i) == f32s[i]);

    a = &find_kv_typed(f, "f64s", GGUF_TYPE_ARRAY)->v.arr;
    assert_true(llmm__gguf_array_get_f64(a, 0) == 1e300);

    a = &find_kv_typed(f, "bools", GGUF_TYPE_ARRAY)->v.arr;
    assert_true(llmm__gguf_array_get_i64(a, 0) == 1 && llmm__gguf_array_get_i64(a, 1) == 0);

    a = &find_kv_typed(f, "empty", GGUF_TYPE_ARRAY)->v.arr;
    assert_int_equal(a->count, 0);
    assert_int_equal(a->bytes, 0);

    int64_t refused;
    assert_false(llmm__gguf_kv_as_int(llmm__gguf_find_kv(f, "u32s"), &refused)); /* arrays are not scalars */
    llmm__gguf_close(f);
    gb_free(&b);
}

static void test_string_array_iterates(void **state) {
    (void)state;
    static const char *const words[] = {"", "a", "<0x0A>", "h\xc3\xa9llo", "\xe2\x96\x81the"};
    gguf_builder b;
    gb_init(&b);
    gb_header(&b, 3, 0, 2);
    gb_kv_array_str(&b, "words", words, 5);
    gb_kv_u32(&b, "after", 42); /* read correctly only if the array was stepped over exactly */
    gguf_file *f = open_valid(&b);

    const gguf_array *a = &find_kv_typed(f, "words", GGUF_TYPE_ARRAY)->v.arr;
    assert_int_equal(a->elem_type, GGUF_TYPE_STRING);
    assert_int_equal(a->count, 5);
    const uint8_t *cursor = a->data;
    uint64_t expected_bytes = 0;
    for (size_t i = 0; i < 5; i++) {
        expect_gguf_str(llmm__gguf_array_next_str(&cursor), words[i]);
        expected_bytes += 8 + strlen(words[i]);
    }
    assert_ptr_equal(cursor, a->data + a->bytes);
    assert_int_equal(a->bytes, expected_bytes);
    expect_int(f, "after", GGUF_TYPE_U32, 42);
    llmm__gguf_close(f);
    gb_free(&b);
}

/* Walk one inner array of strings, as a reader of nested metadata would. */
static const uint8_t *expect_inner_strings(const uint8_t *p, const char *const *want, size_t n) {
    assert_int_equal(le32(p), GGUF_TYPE_STRING);
    assert_int_equal(le64(p + 4), n);
    p += 12;
    for (size_t i = 0; i < n; i++) expect_gguf_str(llmm__gguf_array_next_str(&p), want[i]);
    return p;
}

static void test_nested_string_arrays(void **state) {
    (void)state;
    static const char *const first[] = {"a", "bc"};
    static const char *const third[] = {"def"};
    gguf_builder b;
    gb_init(&b);
    gb_header(&b, 3, 0, 2);
    gb_kv_key(&b, "nested", GGUF_TYPE_ARRAY);
    gb_array_header(&b, GGUF_TYPE_ARRAY, 3);
    size_t elements_start = b.len;
    gb_array_header(&b, GGUF_TYPE_STRING, 2);
    gb_str(&b, first[0]);
    gb_str(&b, first[1]);
    gb_array_header(&b, GGUF_TYPE_STRING, 0);
    gb_array_header(&b, GGUF_TYPE_STRING, 1);
    gb_str(&b, third[0]);
    size_t elements_bytes = b.len - elements_start;
    gb_kv_str(&b, "after", "ok");
    gguf_file *f = open_valid(&b);

    const gguf_array *a = &find_kv_typed(f, "nested", GGUF_TYPE_ARRAY)->v.arr;
    assert_int_equal(a->elem_type, GGUF_TYPE_ARRAY);
    assert_int_equal(a->count, 3);
    assert_int_equal(a->bytes, elements_bytes);
    const uint8_t *p = expect_inner_strings(a->data, first, 2);
    p = expect_inner_strings(p, NULL, 0);
    p = expect_inner_strings(p, third, 1);
    assert_ptr_equal(p, a->data + a->bytes);
    expect_gguf_str(find_kv_typed(f, "after", GGUF_TYPE_STRING)->v.str, "ok");
    llmm__gguf_close(f);
    gb_free(&b);
}

/* `depth` array headers, one inside the other, around a single u8. */
static void build_nested_depth(gguf_builder *b, int depth) {
    gb_header(b, 3, 0, 1);
    gb_kv_key(b, "deep", GGUF_TYPE_ARRAY);
    for (int level = 1; level < depth; level++) gb_array_header(b, GGUF_TYPE_ARRAY, 1);
    gb_array_header(b, GGUF_TYPE_U8, 1);
    gb_u8(b, 7);
}

static void test_nesting_at_max_depth_accepted(void **state) {
    (void)state;
    gguf_builder b;
    gb_init(&b);
    build_nested_depth(&b, GGUF_MAX_ARRAY_DEPTH);
    gguf_file *f = open_valid(&b);
    assert_int_equal(find_kv_typed(f, "deep", GGUF_TYPE_ARRAY)->v.arr.count, 1);
    llmm__gguf_close(f);
    gb_free(&b);
}

static void test_versions_2_and_3(void **state) {
    (void)state;
    for (uint32_t version = 2; version <= 3; version++) {
        gguf_builder b;
        uint64_t offsets[N_SAMPLE_TENSORS];
        gb_init(&b);
        gb_header(&b, version, N_SAMPLE_TENSORS, 1);
        gb_kv_str(&b, "general.architecture", "llama");
        put_tensors(&b, sample_tensors, N_SAMPLE_TENSORS, GGUF_DEFAULT_ALIGNMENT, offsets);
        gguf_file *f = open_valid(&b);
        assert_int_equal(f->version, version);
        assert_int_equal(f->n_tensors, N_SAMPLE_TENSORS);
        expect_gguf_str(find_kv_typed(f, "general.architecture", GGUF_TYPE_STRING)->v.str, "llama");
        llmm__gguf_close(f);
        gb_free(&b);
    }
}

static void test_header_only_file(void **state) {
    (void)state;
    gguf_builder b;
    gb_init(&b);
    gb_header(&b, 3, 0, 0);
    gguf_file *f = open_valid(&b);
    assert_int_equal(f->n_kv, 0);
    assert_int_equal(f->n_tensors, 0);
    assert_null(llmm__gguf_find_kv(f, "general.architecture"));
    assert_null(llmm__gguf_find_tensor(f, "x"));
    llmm__gguf_close(f);
    gb_free(&b);
}

/* ------------------------------------------------------------------ positive: tensors */

static void test_tensor_types_and_sizes(void **state) {
    (void)state;
    gguf_builder b;
    uint64_t offsets[N_SAMPLE_TENSORS];
    gb_init(&b);
    gb_header(&b, 3, N_SAMPLE_TENSORS, 0);
    size_t data_start = put_tensors(&b, sample_tensors, N_SAMPLE_TENSORS, GGUF_DEFAULT_ALIGNMENT, offsets);
    gguf_file *f = open_valid(&b);
    assert_int_equal(f->alignment, GGUF_DEFAULT_ALIGNMENT);
    assert_int_equal(f->data_offset, data_start);
    assert_int_equal(f->data_offset % GGUF_DEFAULT_ALIGNMENT, 0);
    for (size_t i = 0; i < N_SAMPLE_TENSORS; i++) expect_tensor_matches(f, &sample_tensors[i], i, offsets[i]);
    llmm__gguf_close(f);
    gb_free(&b);
}

static void test_alignment_64_honoured(void **state) {
    (void)state;
    static const tensor_spec specs[] = {
        {"a", 1, {16}, LLMM_TYPE_F32, 64},
        {"b", 1, {3}, LLMM_TYPE_F32, 12},
        {"c", 1, {32}, LLMM_TYPE_Q8_0, 34},
    };
    gguf_builder b;
    uint64_t offsets[3];
    gb_init(&b);
    gb_header(&b, 3, 3, 1);
    gb_kv_u32(&b, "general.alignment", 64);
    size_t data_start = put_tensors(&b, specs, 3, 64, offsets);
    gguf_file *f = open_valid(&b);

    assert_int_equal(f->alignment, 64);
    assert_int_equal(data_start % 64, 0);
    assert_int_equal(f->data_offset, data_start);
    assert_int_equal(offsets[1], 64);
    assert_int_equal(offsets[2], 128); /* 64 + 12 rounded up to 64, not to the default 32 */
    for (size_t i = 0; i < 3; i++) expect_tensor_matches(f, &specs[i], i, offsets[i]);
    llmm__gguf_close(f);
    gb_free(&b);
}

/* With alignment 64 the data section starts at the next multiple of 64. Pick a key length
 * where that differs from the next multiple of 32, so a reader that ignored the key (and
 * used the default) would be caught. */
static void test_alignment_64_differs_from_default(void **state) {
    (void)state;
    static const tensor_spec spec = {"w", 1, {8}, LLMM_TYPE_F32, 32};
    for (size_t key_len = 1; key_len <= 64; key_len++) {
        gguf_builder b;
        uint64_t offset;
        char key[80];
        memset(key, 'k', key_len);
        key[key_len] = '\0';
        gb_init(&b);
        gb_header(&b, 3, 1, 2);
        gb_kv_u32(&b, "general.alignment", 64);
        gb_kv_str(&b, key, "");
        size_t infos_end = b.len + 8 + 1 + 4 + 8 + 4 + 8; /* the one tensor info */
        if (align_up(infos_end, 32) == align_up(infos_end, 64)) {
            gb_free(&b);
            continue;
        }
        size_t data_start = put_tensors(&b, &spec, 1, 64, &offset);
        gguf_file *f = open_valid(&b);
        assert_int_equal(f->data_offset, data_start);
        assert_int_equal(f->data_offset, align_up(infos_end, 64));
        expect_tensor_matches(f, &spec, 0, 0);
        llmm__gguf_close(f);
        gb_free(&b);
        return;
    }
    fail_msg("no key length made the 32- and 64-byte data offsets differ");
}

static void test_find_tensor_by_name(void **state) {
    (void)state;
    static const tensor_spec specs[] = {
        {"output.weight", 1, {4}, LLMM_TYPE_F32, 16},
        {"ab", 1, {4}, LLMM_TYPE_F32, 16},
        {"blk.10.attn_q.weight", 1, {4}, LLMM_TYPE_F32, 16},
        {"a", 1, {4}, LLMM_TYPE_F32, 16},
        {"blk.2.attn_q.weight", 1, {4}, LLMM_TYPE_F32, 16},
        /* 63 bytes: the longest name allowed */
        {"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx", 1, {4}, LLMM_TYPE_F32, 16},
    };
    const size_t n = sizeof specs / sizeof *specs;
    gguf_builder b;
    uint64_t offsets[sizeof specs / sizeof *specs];
    gb_init(&b);
    gb_header(&b, 3, n, 0);
    put_tensors(&b, specs, n, GGUF_DEFAULT_ALIGNMENT, offsets);
    gguf_file *f = open_valid(&b);
    assert_int_equal(strlen(specs[5].name), GGUF_MAX_NAME - 1);
    for (size_t i = 0; i < n; i++) {
        assert_ptr_equal(llmm__gguf_find_tensor(f, specs[i].name), &f->tensors[i]); /* file order kept */
        expect_tensor_matches(f, &specs[i], i, offsets[i]);
    }
    assert_null(llmm__gguf_find_tensor(f, ""));
    assert_null(llmm__gguf_find_tensor(f, "b"));
    assert_null(llmm__gguf_find_tensor(f, "abc"));
    assert_null(llmm__gguf_find_tensor(f, "blk.10"));
    assert_null(llmm__gguf_find_tensor(f, "output.weight2"));
    llmm__gguf_close(f);
    gb_free(&b);
}

static void test_zero_tensors(void **state) {
    (void)state;
    gguf_builder b;
    gb_init(&b);
    gb_header(&b, 3, 0, 2);
    gb_kv_str(&b, "general.architecture", "llama");
    gb_kv_u32(&b, "general.alignment", 64); /* no data section to align: still fine */
    gguf_file *f = open_valid(&b);
    assert_int_equal(f->n_tensors, 0);
    assert_int_equal(f->n_kv, 2);
    assert_null(llmm__gguf_find_tensor(f, "token_embd.weight"));
    expect_gguf_str(find_kv_typed(f, "general.architecture", GGUF_TYPE_STRING)->v.str, "llama");
    llmm__gguf_close(f);
    gb_free(&b);
}

/* Zero-element tensors take no bytes, so two may share an offset without overlapping. */
static void test_empty_tensors_accepted(void **state) {
    (void)state;
    static const uint64_t empty[2] = {0, 5};
    static const uint64_t four[1] = {4};
    gguf_builder b;
    gb_init(&b);
    gb_header(&b, 3, 3, 0);
    gb_tensor_info(&b, "empty.a", 2, empty, LLMM_TYPE_F32, 0);
    gb_tensor_info(&b, "empty.b", 2, empty, LLMM_TYPE_Q4_0, 0); /* a row of 0 is a whole number of blocks */
    gb_tensor_info(&b, "four", 1, four, LLMM_TYPE_F32, 32);
    gb_pad_to(&b, 32);
    gb_fill(&b, 0xAB, 48);
    gguf_file *f = open_valid(&b);
    const gguf_tensor *t = llmm__gguf_find_tensor(f, "empty.b");
    assert_non_null(t);
    assert_int_equal(t->n_elements, 0);
    assert_int_equal(t->n_bytes, 0);
    assert_int_equal(llmm__gguf_find_tensor(f, "four")->n_bytes, 16);
    llmm__gguf_close(f);
    gb_free(&b);
}

/* An empty tensor at the offset where a non-empty one starts: whatever the verdict, it must
 * not depend on which of the two the file lists first. */
static llmm_status open_empty_and_full_at_same_offset(int empty_first) {
    static const uint64_t empty[1] = {0};
    static const uint64_t four[1] = {4};
    gguf_builder b;
    gb_init(&b);
    gb_header(&b, 3, 2, 0);
    if (empty_first) gb_tensor_info(&b, "empty", 1, empty, LLMM_TYPE_F32, 0);
    gb_tensor_info(&b, "four", 1, four, LLMM_TYPE_F32, 0);
    if (!empty_first) gb_tensor_info(&b, "empty", 1, empty, LLMM_TYPE_F32, 0);
    gb_pad_to(&b, 32);
    gb_fill(&b, 0xAB, 16);
    assert_true(gb_finish(&b));
    llmm_diag d = {{0}};
    gguf_file *f = NULL;
    llmm_status st = llmm__gguf_open_memory(b.bytes, b.len, NULL, &f, &d);
    llmm__gguf_close(f);
    gb_free(&b);
    return st;
}

static void test_empty_tensor_verdict_independent_of_order(void **state) {
    (void)state;
    llmm_status empty_first = open_empty_and_full_at_same_offset(1);
    llmm_status empty_last = open_empty_and_full_at_same_offset(0);
    if (empty_first != empty_last)
        print_message("empty tensor listed first: %d, listed last: %d\n", empty_first, empty_last);
    assert_int_equal(empty_first, empty_last);
}

/* ------------------------------------------------------------------ positive: files */

static void write_temp(const gguf_builder *b, char *path, size_t path_size) {
    assert_int_equal(gb_write_temp(b, path, path_size), 0);
}

static void expect_same_kv(const gguf_kv *x, const gguf_kv *y) {
    assert_true(x->key.len == y->key.len && memcmp(x->key.ptr, y->key.ptr, (size_t)x->key.len) == 0);
    assert_int_equal(x->type, y->type);
    if (x->type == GGUF_TYPE_STRING) {
        assert_true(x->v.str.len == y->v.str.len);
        assert_memory_equal(x->v.str.ptr, y->v.str.ptr, (size_t)x->v.str.len);
    } else if (x->type == GGUF_TYPE_ARRAY) {
        assert_int_equal(x->v.arr.elem_type, y->v.arr.elem_type);
        assert_int_equal(x->v.arr.count, y->v.arr.count);
        assert_int_equal(x->v.arr.bytes, y->v.arr.bytes);
        assert_memory_equal(x->v.arr.data, y->v.arr.data, (size_t)x->v.arr.bytes);
    } else {
        assert_true(x->v.u64 == y->v.u64); /* same bits, whichever member */
    }
}

static void expect_same_tables(const gguf_file *x, const gguf_file *y) {
    assert_int_equal(x->size, y->size);
    assert_int_equal(x->version, y->version);
    assert_int_equal(x->alignment, y->alignment);
    assert_int_equal(x->data_offset, y->data_offset);
    assert_int_equal(x->n_kv, y->n_kv);
    assert_int_equal(x->n_tensors, y->n_tensors);
    assert_memory_equal(x->bytes, y->bytes, (size_t)x->size);
    for (uint64_t i = 0; i < x->n_kv; i++) expect_same_kv(&x->kv[i], &y->kv[i]);
    for (uint64_t i = 0; i < x->n_tensors; i++) {
        const gguf_tensor *s = &x->tensors[i], *t = &y->tensors[i];
        assert_true(s->name.len == t->name.len && memcmp(s->name.ptr, t->name.ptr, (size_t)s->name.len) == 0);
        assert_memory_equal(s->ne, t->ne, sizeof s->ne);
        assert_int_equal(s->type, t->type);
        assert_int_equal(s->offset, t->offset);
        assert_int_equal(s->n_bytes, t->n_bytes);
        assert_memory_equal(s->data, t->data, (size_t)s->n_bytes);
    }
}

static void test_open_file_mmap_and_read_agree(void **state) {
    (void)state;
    gguf_builder b;
    uint64_t offsets[N_SAMPLE_TENSORS];
    char path[64];
    gb_init(&b);
    build_rich_file(&b, offsets);
    gguf_file *from_memory = open_valid(&b);
    write_temp(&b, path, sizeof path);

    llmm_diag d = {{0}};
    gguf_file *mapped = NULL, *read_in = NULL;
    llmm_status st_mapped = llmm__gguf_open_file(path, 1, NULL, &mapped, &d);
    llmm_status st_read = llmm__gguf_open_file(path, 0, NULL, &read_in, &d);
    unlink(path);
    assert_int_equal(st_mapped, LLMM_OK);
    assert_int_equal(st_read, LLMM_OK);
    assert_non_null(mapped->mapping);
    assert_null(read_in->mapping);
    assert_non_null(read_in->owned);
    expect_same_tables(mapped, read_in);
    expect_same_tables(mapped, from_memory);
    for (size_t i = 0; i < N_SAMPLE_TENSORS; i++) {
        expect_tensor_matches(mapped, &sample_tensors[i], i, offsets[i]);
        expect_tensor_matches(read_in, &sample_tensors[i], i, offsets[i]);
    }
    llmm__gguf_close(mapped);
    llmm__gguf_close(read_in);
    llmm__gguf_close(from_memory);
    gb_free(&b);
}

static void test_open_file_errors(void **state) {
    (void)state;
    gguf_file *f = NULL;
    for (int use_mmap = 0; use_mmap <= 1; use_mmap++) {
        llmm_diag d = {{0}};
        assert_int_equal(llmm__gguf_open_file("/tmp/llmm-no-such-dir/none.gguf", use_mmap, NULL, &f, &d), LLMM_ERR_IO);
        assert_null(f);
        assert_true(d.msg[0] != '\0');
        llmm_diag dir_d = {{0}};
        assert_int_equal(llmm__gguf_open_file("/tmp", use_mmap, NULL, &f, &dir_d), LLMM_ERR_IO);
        assert_true(dir_d.msg[0] != '\0');
    }
}

/* The file paths run the same validation: a short file and a bad magic fail alike. */
static void test_open_file_rejects_hostile(void **state) {
    (void)state;
    for (int kind = 0; kind < 2; kind++) {
        gguf_builder b;
        char path[64];
        gb_init(&b);
        if (kind == 0) gb_bytes(&b, "GGUF\3\0\0", 7);
        else gb_header_magic(&b, "GGML", 3, 0, 0);
        write_temp(&b, path, sizeof path);
        gb_free(&b);
        for (int use_mmap = 0; use_mmap <= 1; use_mmap++) {
            llmm_diag d = {{0}};
            gguf_file *f = NULL;
            llmm_status st = llmm__gguf_open_file(path, use_mmap, NULL, &f, &d);
            llmm__gguf_close(f);
            assert_int_equal(st, LLMM_ERR_BAD_FILE);
            assert_null(f);
            assert_true(d.msg[0] != '\0');
        }
        unlink(path);
    }
}

/* ------------------------------------------------------------------ hostile: header */

static void test_bad_magic(void **state) {
    (void)state;
    static const char *const magics[] = {"GGUG", "FUGG", "ggml", "\0\0\0\0"};
    for (size_t i = 0; i < 4; i++) {
        gguf_builder b;
        gb_init(&b);
        gb_header_magic(&b, magics[i], 3, 0, 0);
        expect_bad_file(&b);
    }
}

static void test_unsupported_versions(void **state) {
    (void)state;
    /* 0x03000000 is version 3 written big-endian */
    static const uint32_t versions[] = {0, 1, 4, 0x03000000u, UINT32_MAX};
    for (size_t i = 0; i < sizeof versions / sizeof *versions; i++) {
        gguf_builder b;
        gb_init(&b);
        gb_header(&b, versions[i], 0, 0);
        expect_bad_file(&b);
    }
}

static void test_shorter_than_header(void **state) {
    (void)state;
    gguf_builder b;
    gb_init(&b);
    gb_header(&b, 3, 0, 0);
    assert_true(gb_ok(&b));
    for (size_t len = 0; len < 24; len++) expect_prefix_rejected(&b, len);
    gb_free(&b);
}

static void test_kv_count_larger_than_file(void **state) {
    (void)state;
    static const uint64_t counts[] = {2, 1000, (uint64_t)1 << 40, UINT64_MAX};
    for (size_t i = 0; i < 4; i++) {
        gguf_builder b;
        gb_init(&b);
        gb_header(&b, 3, 0, counts[i]);
        gb_kv_u32(&b, "only.one", 1);
        expect_bad_file(&b);
    }
}

static void test_tensor_count_larger_than_file(void **state) {
    (void)state;
    static const uint64_t counts[] = {2, 1000, (uint64_t)1 << 33, UINT64_MAX};
    static const uint64_t ne[1] = {4};
    for (size_t i = 0; i < 4; i++) {
        gguf_builder b;
        gb_init(&b);
        gb_header(&b, 3, counts[i], 0);
        gb_tensor_info(&b, "only.one", 1, ne, LLMM_TYPE_F32, 0);
        gb_pad_to(&b, 32);
        gb_fill(&b, 0, 16);
        expect_bad_file(&b);
    }
}

/* ------------------------------------------------------------------ hostile: key/values */

static void test_key_longer_than_file(void **state) {
    (void)state;
    gguf_builder b;
    gb_init(&b);
    gb_header(&b, 3, 0, 1);
    gb_str_lying(&b, 50, "general.name", 12);
    gb_u32(&b, GGUF_TYPE_U8);
    gb_u8(&b, 1);
    expect_bad_file(&b);
}

static void test_string_value_longer_than_file(void **state) {
    (void)state;
    gguf_builder b;
    gb_init(&b);
    gb_header(&b, 3, 0, 1);
    gb_kv_key(&b, "general.name", GGUF_TYPE_STRING);
    gb_str_lying(&b, 100, "short", 5);
    expect_bad_file(&b);
}

/* Lengths near 2^64 would wrap a careless `pos + len` back inside the file. */
static void test_string_length_wraps(void **state) {
    (void)state;
    static const uint64_t lens[] = {UINT64_MAX, UINT64_MAX - 7, UINT64_MAX - 40, (uint64_t)1 << 63};
    for (size_t i = 0; i < 4; i++) {
        for (int where = 0; where < 3; where++) {
            gguf_builder b;
            gb_init(&b);
            gb_header(&b, 3, 0, 1);
            if (where == 0) { /* the key */
                gb_str_lying(&b, lens[i], "key", 3);
            } else if (where == 1) { /* a string value */
                gb_kv_key(&b, "key", GGUF_TYPE_STRING);
                gb_str_lying(&b, lens[i], "value", 5);
            } else { /* an element of a string array */
                gb_kv_key(&b, "key", GGUF_TYPE_ARRAY);
                gb_array_header(&b, GGUF_TYPE_STRING, 1);
                gb_str_lying(&b, lens[i], "element", 7);
            }
            gb_fill(&b, 'x', 48); /* bytes a wrapped position could land on */
            expect_bad_file(&b);
        }
    }
}

static void test_empty_key(void **state) {
    (void)state;
    gguf_builder b;
    gb_init(&b);
    gb_header(&b, 3, 0, 1);
    gb_kv_u32(&b, "", 1);
    expect_bad_file(&b);
}

static void test_unknown_value_type(void **state) {
    (void)state;
    static const uint32_t types[] = {GGUF_TYPE_COUNT, 100, UINT32_MAX};
    for (size_t i = 0; i < 3; i++) {
        gguf_builder b;
        gb_init(&b);
        gb_header(&b, 3, 0, 1);
        gb_kv_key(&b, "key", types[i]);
        gb_u64(&b, 0);
        expect_bad_file(&b);
    }
}

static void test_unknown_array_element_type(void **state) {
    (void)state;
    static const uint32_t types[] = {GGUF_TYPE_COUNT, 100, UINT32_MAX};
    for (size_t i = 0; i < 3; i++) {
        gguf_builder b;
        gb_init(&b);
        gb_header(&b, 3, 0, 1);
        gb_kv_key(&b, "key", GGUF_TYPE_ARRAY);
        gb_array_header(&b, types[i], 1);
        gb_u64(&b, 0);
        expect_bad_file(&b);
    }
}

/* Counts that exceed the bytes left, including ones whose count * element size wraps. */
static void test_array_count_larger_than_file(void **state) {
    (void)state;
    static const struct {
        uint32_t elem_type;
        uint64_t count;
    } cases[] = {
        {GGUF_TYPE_U32, 1000},
        {GGUF_TYPE_U32, (uint64_t)1 << 62},       /* * 4 wraps to 0 */
        {GGUF_TYPE_U64, (uint64_t)1 << 61},       /* * 8 wraps to 0 */
        {GGUF_TYPE_U8, UINT64_MAX},
        {GGUF_TYPE_STRING, 1000},
        {GGUF_TYPE_STRING, UINT64_MAX},
        {GGUF_TYPE_ARRAY, 1000},
        {GGUF_TYPE_ARRAY, UINT64_MAX},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        gguf_builder b;
        gb_init(&b);
        gb_header(&b, 3, 0, 1);
        gb_kv_key(&b, "key", GGUF_TYPE_ARRAY);
        gb_array_header(&b, cases[i].elem_type, cases[i].count);
        gb_fill(&b, 0, 64); /* some real bytes, far fewer than claimed */
        expect_bad_file(&b);
    }
}

static void test_bool_value_two(void **state) {
    (void)state;
    gguf_builder b;
    gb_init(&b);
    gb_header(&b, 3, 0, 1);
    gb_kv_bool(&b, "tokenizer.ggml.add_bos_token", 2);
    expect_bad_file(&b);

    gb_init(&b);
    gb_header(&b, 3, 0, 1);
    gb_kv_key(&b, "flags", GGUF_TYPE_ARRAY);
    gb_array_header(&b, GGUF_TYPE_BOOL, 3);
    gb_u8(&b, 1);
    gb_u8(&b, 0);
    gb_u8(&b, 2);
    expect_bad_file(&b);
}

static void test_arrays_nested_too_deep(void **state) {
    (void)state;
    static const int depths[] = {GGUF_MAX_ARRAY_DEPTH + 1, GGUF_MAX_ARRAY_DEPTH + 2, 1000};
    for (size_t i = 0; i < 3; i++) {
        gguf_builder b;
        gb_init(&b);
        build_nested_depth(&b, depths[i]);
        expect_bad_file(&b);
    }
}

/* Cut a file inside its second key/value at every byte: key length, key, type, value. */
static void test_truncated_inside_kv(void **state) {
    (void)state;
    for (int value_kind = 0; value_kind < 4; value_kind++) {
        gguf_builder b;
        gb_init(&b);
        gb_header(&b, 3, 0, 2);
        /* a long first value, so the key-count bound (13 bytes a pair) does not fire before
         * the reader reaches the cut */
        gb_kv_str(&b, "first", "a first value long enough to hold two pairs' worth");
        size_t kv_start = b.len;
        if (value_kind == 0) gb_kv_u64(&b, "second", 0x0102030405060708ull);
        if (value_kind == 1) gb_kv_str(&b, "second", "a string value");
        if (value_kind == 2) {
            static const char *const words[] = {"one", "two"};
            gb_kv_array_str(&b, "second", words, 2);
        }
        if (value_kind == 3) gb_kv_f64(&b, "second", 0.25);
        assert_true(gb_finish(&b));
        for (size_t len = kv_start; len < b.len; len++) expect_prefix_rejected(&b, len);
        gb_free(&b);
    }
}

static void test_duplicate_keys(void **state) {
    (void)state;
    gguf_builder b;
    gb_init(&b);
    gb_header(&b, 3, 0, 3);
    gb_kv_u32(&b, "general.alignment", 32);
    gb_kv_str(&b, "general.name", "x");
    gb_kv_u32(&b, "general.alignment", 32);
    expect_bad_file(&b);

    gb_init(&b); /* same key with different types */
    gb_header(&b, 3, 0, 2);
    gb_kv_str(&b, "general.name", "x");
    gb_kv_u8(&b, "general.name", 1);
    expect_bad_file(&b);
}

/* ------------------------------------------------------------------ hostile: alignment */

static void build_with_alignment_kv(gguf_builder *b, uint32_t type, uint64_t value) {
    static const uint64_t ne[1] = {8};
    gb_header(b, 3, 1, 1);
    gb_kv_key(b, "general.alignment", type);
    if (type == GGUF_TYPE_U64) gb_u64(b, value);
    else gb_u32(b, (uint32_t)value);
    gb_tensor_info(b, "w", 1, ne, LLMM_TYPE_F32, 0);
    gb_pad_to(b, 32);
    gb_fill(b, 0, 32);
}

static void test_alignment_kv_control_accepted(void **state) {
    (void)state;
    gguf_builder b;
    gb_init(&b);
    build_with_alignment_kv(&b, GGUF_TYPE_U32, 32);
    gguf_file *f = open_valid(&b);
    assert_int_equal(f->alignment, 32);
    llmm__gguf_close(f);
    gb_free(&b);
}

static void test_alignment_zero(void **state) {
    (void)state;
    gguf_builder b;
    gb_init(&b);
    build_with_alignment_kv(&b, GGUF_TYPE_U32, 0);
    expect_bad_file(&b);
}

static void test_alignment_not_power_of_two(void **state) {
    (void)state;
    static const uint32_t values[] = {3, 48, 96, 0x80000001u};
    for (size_t i = 0; i < 4; i++) {
        gguf_builder b;
        gb_init(&b);
        build_with_alignment_kv(&b, GGUF_TYPE_U32, values[i]);
        expect_bad_file(&b);
    }
}

static void test_alignment_too_large(void **state) {
    (void)state;
    static const uint32_t values[] = {(uint32_t)1 << 30, GGUF_MAX_ALIGNMENT * 2, 0x80000000u};
    for (size_t i = 0; i < 3; i++) {
        gguf_builder b;
        gb_init(&b);
        build_with_alignment_kv(&b, GGUF_TYPE_U32, values[i]);
        expect_bad_file(&b);
    }
}

static void test_alignment_wrong_type(void **state) {
    (void)state;
    static const uint32_t types[] = {GGUF_TYPE_U64, GGUF_TYPE_I32, GGUF_TYPE_F32};
    for (size_t i = 0; i < 3; i++) {
        gguf_builder b;
        gb_init(&b);
        build_with_alignment_kv(&b, types[i], 32);
        expect_bad_file(&b);
    }
    gguf_builder b; /* a string "32" is not an alignment either */
    gb_init(&b);
    gb_header(&b, 3, 0, 1);
    gb_kv_str(&b, "general.alignment", "32");
    expect_bad_file(&b);
}

/* ------------------------------------------------------------------ hostile: tensors */

/* Header, one tensor info as given, padding, then data_bytes bytes of data. */
static void build_one_tensor(gguf_builder *b, const char *name, uint32_t n_dims, const uint64_t *ne,
                             uint32_t type, uint64_t offset, size_t data_bytes) {
    gb_header(b, 3, 1, 0);
    gb_tensor_info(b, name, n_dims, ne, type, offset);
    gb_pad_to(b, GGUF_DEFAULT_ALIGNMENT);
    gb_fill(b, 0x5A, data_bytes);
}

static void expect_one_tensor_rejected(const char *name, uint32_t n_dims, const uint64_t *ne, uint32_t type,
                                       uint64_t offset, size_t data_bytes) {
    gguf_builder b;
    gb_init(&b);
    build_one_tensor(&b, name, n_dims, ne, type, offset, data_bytes);
    expect_bad_file(&b);
}

/* The valid neighbour of a hostile case: proves the builder call itself is sound, so the
 * hostile variant fails for the one thing it changes. */
static void expect_one_tensor_accepted(uint32_t n_dims, const uint64_t *ne, uint32_t type, uint64_t offset,
                                       size_t data_bytes) {
    gguf_builder b;
    gb_init(&b);
    build_one_tensor(&b, "w", n_dims, ne, type, offset, data_bytes);
    gguf_file *f = open_valid(&b);
    llmm__gguf_close(f);
    gb_free(&b);
}

static void test_one_tensor_control_accepted(void **state) {
    (void)state;
    /* the valid shape the hostile variants below start from */
    static const uint64_t ne[2] = {8, 2};
    gguf_builder b;
    gb_init(&b);
    build_one_tensor(&b, "w", 2, ne, LLMM_TYPE_F32, 0, 64);
    gguf_file *f = open_valid(&b);
    assert_int_equal(llmm__gguf_find_tensor(f, "w")->n_bytes, 64);
    llmm__gguf_close(f);
    gb_free(&b);
}

static void test_tensor_offset_past_eof(void **state) {
    (void)state;
    static const uint64_t ne[1] = {8};
    expect_one_tensor_accepted(1, ne, LLMM_TYPE_F32, 32, 64); /* ends exactly at EOF */
    expect_one_tensor_rejected("w", 1, ne, LLMM_TYPE_F32, 1024, 64);
    expect_one_tensor_rejected("w", 1, ne, LLMM_TYPE_F32, 64, 64);   /* starts at EOF, 32 bytes past */
    expect_one_tensor_rejected("w", 1, ne, LLMM_TYPE_F32, UINT64_MAX - 31, 64); /* aligned, wraps */
}

static void test_tensor_data_runs_past_eof(void **state) {
    (void)state;
    static const uint64_t ne[2] = {16, 2};
    expect_one_tensor_accepted(2, ne, LLMM_TYPE_F32, 0, 128);
    expect_one_tensor_rejected("w", 2, ne, LLMM_TYPE_F32, 0, 127);
    expect_one_tensor_rejected("w", 2, ne, LLMM_TYPE_F32, 32, 128);
    expect_one_tensor_rejected("w", 2, ne, LLMM_TYPE_F32, 0, 0);
}

static void test_data_section_starts_past_eof(void **state) {
    (void)state;
    /* an empty tensor needs no bytes, but the padded data section must still exist */
    static const uint64_t ne[1] = {0};
    gguf_builder b;
    gb_init(&b);
    gb_header(&b, 3, 1, 0);
    gb_tensor_info(&b, "w", 1, ne, LLMM_TYPE_F32, 0);
    assert_int_not_equal(b.len % 32, 0);
    expect_bad_file(&b);
}

static void test_overlapping_tensors(void **state) {
    (void)state;
    static const uint64_t ne16[1] = {16}; /* 64 bytes of F32 */
    static const struct {
        uint64_t off_a, off_b;
    } cases[] = {{0, 32}, {32, 0}, {0, 0}, {64, 96}, {96, 64}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        gguf_builder b;
        gb_init(&b);
        gb_header(&b, 3, 2, 0);
        gb_tensor_info(&b, "a", 1, ne16, LLMM_TYPE_F32, cases[i].off_a);
        gb_tensor_info(&b, "b", 1, ne16, LLMM_TYPE_F32, cases[i].off_b);
        gb_pad_to(&b, 32);
        gb_fill(&b, 0, 256);
        expect_bad_file(&b);
    }
}

static void test_dims_product_overflows(void **state) {
    (void)state;
    static const uint64_t two_32[2] = {(uint64_t)1 << 32, (uint64_t)1 << 32};   /* 2^64 */
    static const uint64_t just_over[2] = {(uint64_t)1 << 31, (uint64_t)1 << 32}; /* 2^63 */
    static const uint64_t four[4] = {(uint64_t)1 << 16, (uint64_t)1 << 16, (uint64_t)1 << 16, (uint64_t)1 << 16};
    static const uint64_t wraps_to_small[3] = {3, 0x5555555555555556ull, 3}; /* product wraps to 2 */
    expect_one_tensor_rejected("w", 2, two_32, LLMM_TYPE_F32, 0, 64);
    expect_one_tensor_rejected("w", 2, just_over, LLMM_TYPE_F32, 0, 64);
    expect_one_tensor_rejected("w", 4, four, LLMM_TYPE_F32, 0, 64);
    expect_one_tensor_rejected("w", 3, wraps_to_small, LLMM_TYPE_F32, 0, 64);
}

/* Byte sizes must not wrap either: 2^62 F32 elements are 2^64 bytes, which wraps to 0 in
 * uint64 and would let a huge tensor sit in an empty data section. */
static void test_tensor_byte_size_overflows(void **state) {
    (void)state;
    static const uint64_t f32_wraps_to_0[1] = {(uint64_t)1 << 62};
    static const uint64_t f32_wraps_to_32[1] = {((uint64_t)1 << 62) + 8};
    static const uint64_t f32_2d[2] = {(uint64_t)1 << 31, (uint64_t)1 << 31};
    static const uint64_t f64_wraps[1] = {(uint64_t)1 << 61};
    expect_one_tensor_rejected("w", 1, f32_wraps_to_0, LLMM_TYPE_F32, 0, 64);
    expect_one_tensor_rejected("w", 1, f32_wraps_to_32, LLMM_TYPE_F32, 0, 64);
    expect_one_tensor_rejected("w", 2, f32_2d, LLMM_TYPE_F32, 0, 64);
    expect_one_tensor_rejected("w", 1, f64_wraps, LLMM_TYPE_F64, 0, 64);
    expect_one_tensor_rejected("w", 1, f64_wraps, LLMM_TYPE_I64, 0, 64);
}

static void test_negative_dim(void **state) {
    (void)state;
    static const uint64_t top_bit[1] = {(uint64_t)1 << 63};
    static const uint64_t largest[1] = {(uint64_t)INT64_MAX};
    expect_one_tensor_rejected("w", 1, largest, LLMM_TYPE_F32, 0, 64); /* valid dim, far too big */
    static const uint64_t minus_one[2] = {8, UINT64_MAX};
    expect_one_tensor_rejected("w", 1, top_bit, LLMM_TYPE_F32, 0, 64);
    expect_one_tensor_rejected("w", 2, minus_one, LLMM_TYPE_F32, 0, 64);
}

static void test_too_many_dims(void **state) {
    (void)state;
    static const uint64_t ne[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    expect_one_tensor_accepted(4, ne, LLMM_TYPE_F32, 0, 64);
    expect_one_tensor_rejected("w", 5, ne, LLMM_TYPE_F32, 0, 64);
    expect_one_tensor_rejected("w", 8, ne, LLMM_TYPE_F32, 0, 64);
    gguf_builder b; /* a huge n_dims with only a few dims behind it */
    gb_init(&b);
    gb_header(&b, 3, 1, 0);
    gb_str(&b, "w");
    gb_u32(&b, UINT32_MAX);
    gb_fill(&b, 1, 64);
    expect_bad_file(&b);
}

static void test_unknown_tensor_type(void **state) {
    (void)state;
    /* 4 and 5 are ids ggml removed (Q4_2, Q4_3); 40 is one past the table */
    static const uint32_t types[] = {4, 5, 31, LLMM_TYPE_COUNT, 99, UINT32_MAX};
    static const uint64_t ne[1] = {32};
    expect_one_tensor_accepted(1, ne, LLMM_TYPE_Q4_1, 0, 256);
    for (size_t i = 0; i < sizeof types / sizeof *types; i++)
        expect_one_tensor_rejected("w", 1, ne, types[i], 0, 256);
}

static void test_row_not_multiple_of_block(void **state) {
    (void)state;
    static const uint64_t row48[2] = {48, 2};
    static const uint64_t row16[1] = {16};
    static const uint64_t no_dims[1] = {0};
    static const uint64_t row64[2] = {64, 2};
    expect_one_tensor_accepted(2, row64, LLMM_TYPE_Q4_0, 0, 256);
    expect_one_tensor_rejected("w", 2, row48, LLMM_TYPE_Q4_0, 0, 256);
    expect_one_tensor_rejected("w", 1, row16, LLMM_TYPE_Q4_0, 0, 256);
    expect_one_tensor_rejected("w", 2, row48, LLMM_TYPE_Q8_0, 0, 256);
    expect_one_tensor_rejected("w", 0, no_dims, LLMM_TYPE_Q4_0, 0, 256); /* a scalar row is 1 */
}

static void test_misaligned_offset(void **state) {
    (void)state;
    static const uint64_t ne[1] = {4};
    static const uint64_t offsets[] = {4, 16, 31, 33};
    expect_one_tensor_accepted(1, ne, LLMM_TYPE_F32, 32, 128);
    for (size_t i = 0; i < 4; i++) expect_one_tensor_rejected("w", 1, ne, LLMM_TYPE_F32, offsets[i], 128);
}

static void test_duplicate_tensor_names(void **state) {
    (void)state;
    static const uint64_t ne[1] = {8};
    gguf_builder b;
    gb_init(&b);
    gb_header(&b, 3, 3, 0);
    gb_tensor_info(&b, "w", 1, ne, LLMM_TYPE_F32, 0);
    gb_tensor_info(&b, "v", 1, ne, LLMM_TYPE_F32, 32);
    gb_tensor_info(&b, "w", 1, ne, LLMM_TYPE_F32, 64);
    gb_pad_to(&b, 32);
    gb_fill(&b, 0, 96);
    expect_bad_file(&b);
}

static void test_bad_tensor_name_length(void **state) {
    (void)state;
    static const uint64_t ne[1] = {8};
    char name[GGUF_MAX_NAME + 2];
    memset(name, 'n', GGUF_MAX_NAME + 1);
    name[GGUF_MAX_NAME] = '\0'; /* 64 characters: one too many */
    expect_one_tensor_rejected(name, 1, ne, LLMM_TYPE_F32, 0, 32);
    name[GGUF_MAX_NAME] = 'n';
    name[GGUF_MAX_NAME + 1] = '\0';
    expect_one_tensor_rejected(name, 1, ne, LLMM_TYPE_F32, 0, 32);
    expect_one_tensor_rejected("", 1, ne, LLMM_TYPE_F32, 0, 32);
}

/* ------------------------------------------------------------------ truncation sweep */

static void test_every_prefix_fails_cleanly(void **state) {
    (void)state;
    gguf_builder b;
    uint64_t offsets[N_SAMPLE_TENSORS];
    gb_init(&b);
    build_rich_file(&b, offsets);
    gguf_file *full = open_valid(&b);
    /* The image ends with the last tensor's last byte, so no proper prefix holds every
     * tensor: each one must be refused. */
    uint64_t needed = 0;
    for (uint64_t i = 0; i < full->n_tensors; i++)
        needed = LLMM_MAX(needed, full->data_offset + full->tensors[i].offset + full->tensors[i].n_bytes);
    assert_int_equal(needed, b.len);
    llmm__gguf_close(full);
    for (size_t len = 0; len < b.len; len++) expect_prefix_rejected(&b, len);
    gb_free(&b);
}

/* A file with no tensors may legitimately be cut after its last key/value: the sweep
 * must find exactly the prefixes that hold every key/value valid. */
static void test_prefix_sweep_without_tensors(void **state) {
    (void)state;
    static const char *const words[] = {"a", "bb"};
    gguf_builder b;
    gb_init(&b);
    gb_header(&b, 2, 0, 3);
    gb_kv_str(&b, "general.architecture", "llama");
    gb_kv_array_str(&b, "words", words, 2);
    gb_kv_i16(&b, "last", -5);
    size_t kv_end = b.len;
    gb_fill(&b, 0, 5); /* trailing bytes after the metadata are allowed */
    assert_true(gb_finish(&b));
    for (size_t len = 0; len <= b.len; len++) {
        llmm_diag d = {{0}};
        int handed_out;
        llmm_status st = open_prefix(&b, len, &d, &handed_out);
        if (len < kv_end) {
            assert_int_equal(st, LLMM_ERR_BAD_FILE);
            assert_false(handed_out);
        } else {
            assert_int_equal(st, LLMM_OK);
        }
    }
    gb_free(&b);
}

/* ------------------------------------------------------------------ vocabulary via the public API */

typedef struct vocab_spec {
    const char *tokenizer_model;
    int tokens_as_u32; /* store tokenizer.ggml.tokens as u32 ids instead of strings */
    uint64_t n_scores;
} vocab_spec;

static const char *const vocab_tokens[] = {"<unk>", "<s>", "</s>", "\xe2\x96\x81hi", "h", "i"};
#define N_VOCAB_TOKENS (sizeof vocab_tokens / sizeof *vocab_tokens)

static void build_vocab_file(gguf_builder *b, const vocab_spec *spec) {
    static const uint32_t ids[N_VOCAB_TOKENS] = {0, 1, 2, 3, 4, 5};
    gb_header(b, 3, 0, 4);
    gb_kv_str(b, "general.architecture", "llama");
    gb_kv_str(b, "tokenizer.ggml.model", spec->tokenizer_model);
    if (spec->tokens_as_u32) gb_kv_array_u32(b, "tokenizer.ggml.tokens", ids, N_VOCAB_TOKENS);
    else gb_kv_array_str(b, "tokenizer.ggml.tokens", vocab_tokens, N_VOCAB_TOKENS);
    gb_kv_key(b, "tokenizer.ggml.scores", GGUF_TYPE_ARRAY);
    gb_array_header(b, GGUF_TYPE_F32, spec->n_scores);
    for (uint64_t i = 0; i < spec->n_scores; i++) gb_f32(b, -(float)i);
}

/* Load the spec's file with vocab_only = 1 from a temp file; *n_vocab gets the vocabulary
 * size on success. The message of a failure goes into err. */
static llmm_status load_vocab_only(const vocab_spec *spec, char *err, size_t err_size, uint32_t *n_vocab) {
    gguf_builder b;
    char path[64];
    gb_init(&b);
    build_vocab_file(&b, spec);
    int written = gb_write_temp(&b, path, sizeof path);
    gb_free(&b);
    assert_int_equal(written, 0);

    llmm_model_params p;
    assert_int_equal(llmm_model_params_default(&p, sizeof p), LLMM_OK);
    p.vocab_only = 1;
    p.error_buf = err;
    p.error_buf_size = err_size;
    err[0] = '\0';
    llmm_model *model = NULL;
    llmm_status st = llmm_model_load(path, &p, &model);
    unlink(path);
    *n_vocab = 0;
    if (model) {
        llmm_model_info info = {.size = sizeof info};
        if (llmm_model_get_info(model, &info) == LLMM_OK) *n_vocab = info.n_vocab;
        llmm_model_free(model);
    }
    assert_true(st == LLMM_OK || model == NULL);
    return st;
}

static void test_vocab_only_load_accepts_valid_vocab(void **state) {
    (void)state;
    vocab_spec spec = {"llama", 0, N_VOCAB_TOKENS};
    char err[256];
    uint32_t n_vocab;
    llmm_status st = load_vocab_only(&spec, err, sizeof err, &n_vocab);
    if (st) print_message("load failed: %s\n", err);
    assert_int_equal(st, LLMM_OK);
    assert_int_equal(n_vocab, N_VOCAB_TOKENS);
}

/* `about` must appear in the message: the load fails for this reason, not another. */
static void expect_vocab_load_fails(const vocab_spec *spec, llmm_status want, const char *about) {
    char err[256];
    uint32_t n_vocab;
    llmm_status st = load_vocab_only(spec, err, sizeof err, &n_vocab);
    show_diag(err);
    if (st != want) print_message("got status %d (%s), wanted %d\n", st, err, want);
    assert_int_equal(st, want);
    assert_true(err[0] != '\0');
    assert_non_null(strstr(err, about));
}

static void test_vocab_tokens_not_strings(void **state) {
    (void)state;
    vocab_spec spec = {"llama", 1, N_VOCAB_TOKENS};
    expect_vocab_load_fails(&spec, LLMM_ERR_BAD_FILE, "tokenizer.ggml.tokens");
}

static void test_vocab_scores_wrong_length(void **state) {
    (void)state;
    vocab_spec shorter = {"llama", 0, N_VOCAB_TOKENS - 1};
    vocab_spec longer = {"llama", 0, N_VOCAB_TOKENS + 1};
    expect_vocab_load_fails(&shorter, LLMM_ERR_BAD_FILE, "tokenizer.ggml.scores");
    expect_vocab_load_fails(&longer, LLMM_ERR_BAD_FILE, "tokenizer.ggml.scores");
}

static void test_vocab_unknown_tokenizer_model(void **state) {
    (void)state;
    vocab_spec spec = {"nonsense", 0, N_VOCAB_TOKENS};
    expect_vocab_load_fails(&spec, LLMM_ERR_UNSUPPORTED, "nonsense");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        /* valid files */
        cmocka_unit_test(test_scalar_values_read_back),
        cmocka_unit_test(test_numeric_arrays_read_back),
        cmocka_unit_test(test_string_array_iterates),
        cmocka_unit_test(test_nested_string_arrays),
        cmocka_unit_test(test_nesting_at_max_depth_accepted),
        cmocka_unit_test(test_versions_2_and_3),
        cmocka_unit_test(test_header_only_file),
        cmocka_unit_test(test_tensor_types_and_sizes),
        cmocka_unit_test(test_alignment_64_honoured),
        cmocka_unit_test(test_alignment_64_differs_from_default),
        cmocka_unit_test(test_find_tensor_by_name),
        cmocka_unit_test(test_zero_tensors),
        cmocka_unit_test(test_empty_tensors_accepted),
        cmocka_unit_test(test_empty_tensor_verdict_independent_of_order),
        cmocka_unit_test(test_one_tensor_control_accepted),
        cmocka_unit_test(test_open_file_mmap_and_read_agree),
        cmocka_unit_test(test_open_file_errors),
        cmocka_unit_test(test_open_file_rejects_hostile),
        /* hostile: header */
        cmocka_unit_test(test_bad_magic),
        cmocka_unit_test(test_unsupported_versions),
        cmocka_unit_test(test_shorter_than_header),
        cmocka_unit_test(test_kv_count_larger_than_file),
        cmocka_unit_test(test_tensor_count_larger_than_file),
        /* hostile: key/values */
        cmocka_unit_test(test_key_longer_than_file),
        cmocka_unit_test(test_string_value_longer_than_file),
        cmocka_unit_test(test_string_length_wraps),
        cmocka_unit_test(test_empty_key),
        cmocka_unit_test(test_unknown_value_type),
        cmocka_unit_test(test_unknown_array_element_type),
        cmocka_unit_test(test_array_count_larger_than_file),
        cmocka_unit_test(test_bool_value_two),
        cmocka_unit_test(test_arrays_nested_too_deep),
        cmocka_unit_test(test_truncated_inside_kv),
        cmocka_unit_test(test_duplicate_keys),
        /* hostile: alignment */
        cmocka_unit_test(test_alignment_kv_control_accepted),
        cmocka_unit_test(test_alignment_zero),
        cmocka_unit_test(test_alignment_not_power_of_two),
        cmocka_unit_test(test_alignment_too_large),
        cmocka_unit_test(test_alignment_wrong_type),
        /* hostile: tensors */
        cmocka_unit_test(test_tensor_offset_past_eof),
        cmocka_unit_test(test_tensor_data_runs_past_eof),
        cmocka_unit_test(test_data_section_starts_past_eof),
        cmocka_unit_test(test_overlapping_tensors),
        cmocka_unit_test(test_dims_product_overflows),
        cmocka_unit_test(test_tensor_byte_size_overflows),
        cmocka_unit_test(test_negative_dim),
        cmocka_unit_test(test_too_many_dims),
        cmocka_unit_test(test_unknown_tensor_type),
        cmocka_unit_test(test_row_not_multiple_of_block),
        cmocka_unit_test(test_misaligned_offset),
        cmocka_unit_test(test_duplicate_tensor_names),
        cmocka_unit_test(test_bad_tensor_name_length),
        /* truncation */
        cmocka_unit_test(test_every_prefix_fails_cleanly),
        cmocka_unit_test(test_prefix_sweep_without_tensors),
        /* vocabulary through llmm_model_load(vocab_only) */
        cmocka_unit_test(test_vocab_only_load_accepts_valid_vocab),
        cmocka_unit_test(test_vocab_tokens_not_strings),
        cmocka_unit_test(test_vocab_scores_wrong_length),
        cmocka_unit_test(test_vocab_unknown_tokenizer_model),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
