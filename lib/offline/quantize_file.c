/* Whole-model conversion: a GGUF model rewritten with its weights in another type.
 *
 * Which type each tensor gets follows the reference engine's llama_model_quantize: only
 * 2-D-or-more tensors named "*weight" (not norms) are converted; a mixed recipe (q4_k_m,
 * q5_k_m) gives the output projection and, in some layers, attn_v and ffn_down more bits; a
 * row length that is not a multiple of the chosen block falls back along the reference's
 * chain, ending at F16. 1-D tensors (norms, biases) are written as F32, which is what the
 * loader requires of norms. Metadata is copied byte for byte. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "format/quant.h"
#include "quantize_file.h"

#define OUT_ALIGNMENT 32u
#define QUANTIZATION_VERSION 2u           /* the reference's GGML_QNT_VERSION for these layouts */
#define CHUNK_BYTES ((size_t)16 << 20)    /* converted output held in memory at once */
#define MAX_THREADS 256

/* general.file_type values are the reference's llama_ftype; the pure K-quant recipes take
 * the number of the reference's "S" mix, the nearest it has. */
static const llmm_quant_recipe recipes[] = {
    {"f32", LLMM_TYPE_F32, 0, 0, 0},
    {"f16", LLMM_TYPE_F16, 0, 0, 1},
    {"bf16", LLMM_TYPE_BF16, 0, 0, 32},
    {"q8_0", LLMM_TYPE_Q8_0, 0, 0, 7},
    {"q4_0", LLMM_TYPE_Q4_0, 0, 0, 2},
    {"q4_1", LLMM_TYPE_Q4_1, 0, 0, 3},
    {"q5_0", LLMM_TYPE_Q5_0, 0, 0, 8},
    {"q5_1", LLMM_TYPE_Q5_1, 0, 0, 9},
    {"q2_k", LLMM_TYPE_Q2_K, 0, 0, 10},
    {"q3_k", LLMM_TYPE_Q3_K, 0, 0, 11},
    {"q4_k", LLMM_TYPE_Q4_K, 0, 0, 14},
    {"q5_k", LLMM_TYPE_Q5_K, 0, 0, 16},
    {"q6_k", LLMM_TYPE_Q6_K, 0, 0, 18},
    {"iq4_nl", LLMM_TYPE_IQ4_NL, 0, 0, 25},
    {"iq4_xs", LLMM_TYPE_IQ4_XS, 0, 0, 30},
    {"q4_k_m", LLMM_TYPE_Q4_K, LLMM_TYPE_Q6_K, LLMM_TYPE_Q5_K, 15},
    {"q5_k_m", LLMM_TYPE_Q5_K, LLMM_TYPE_Q6_K, LLMM_TYPE_Q6_K, 17},
};

const llmm_quant_recipe *llmm__quant_recipe_find(const char *name) {
    for (size_t i = 0; i < sizeof recipes / sizeof *recipes; i++)
        if (!strcmp(recipes[i].name, name)) return &recipes[i];
    return NULL;
}

size_t llmm__quant_recipe_count(void) { return sizeof recipes / sizeof *recipes; }

const llmm_quant_recipe *llmm__quant_recipe_at(size_t i) { return i < llmm__quant_recipe_count() ? &recipes[i] : NULL; }

/* ================================================================ choosing types */

static int str_ends_with(gguf_str s, const char *suffix) {
    const size_t n = strlen(suffix);
    return s.len >= n && !memcmp(s.ptr + s.len - n, suffix, n);
}

static int str_contains(gguf_str s, const char *needle) {
    const size_t n = strlen(needle);
    for (uint64_t i = 0; i + n <= s.len; i++)
        if (!memcmp(s.ptr + i, needle, n)) return 1;
    return 0;
}

/* Weights the reference never quantizes although they are named *weight; the convolution
 * taps of qwen35 (ssm_conv1d) and lfm2 (shortconv.conv) are read as F32 (model/weights.c). */
static const char *const keep_as_is[] = {"_norm.weight", "ffn_gate_inp.weight", "pos_embd", "token_types",
                                         "ssm_conv1d", "shortconv.conv.weight", "attn_rel_b.weight"};

static int is_vector(const gguf_tensor *t) { return t->ne[1] == 1 && t->ne[2] == 1 && t->ne[3] == 1; }

static int is_convertible_weight(const gguf_tensor *t) {
    if (is_vector(t) || !str_ends_with(t->name, "weight")) return 0;
    for (size_t i = 0; i < sizeof keep_as_is / sizeof *keep_as_is; i++)
        if (str_contains(t->name, keep_as_is[i])) return 0;
    return 1;
}

typedef enum tensor_role {
    ROLE_OTHER,
    ROLE_OUTPUT,
    ROLE_TOKEN_EMBD,
    ROLE_ATTN_V,
    ROLE_ATTN_QKV,
    ROLE_FFN_DOWN
} tensor_role;

static tensor_role role_of(gguf_str name) {
    if (name.len == 13 && !memcmp(name.ptr, "output.weight", 13)) return ROLE_OUTPUT;
    if (name.len == 17 && !memcmp(name.ptr, "token_embd.weight", 17)) return ROLE_TOKEN_EMBD;
    if (str_contains(name, "attn_qkv.weight")) return ROLE_ATTN_QKV;
    if (str_contains(name, "attn_v.weight")) return ROLE_ATTN_V;
    if (str_contains(name, "ffn_down")) return ROLE_FFN_DOWN;
    return ROLE_OTHER;
}

/* Position of t among the tensors of the same role (file order), and how many there are: the
 * reference's layer counters, which for one tensor per layer are the layer index and count. */
static void role_rank(const gguf_file *f, const gguf_tensor *t, tensor_role role, int *index, int *count) {
    *index = *count = 0;
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        if (role_of(f->tensors[i].name) != role) continue;
        if (&f->tensors[i] < t) ++*index;
        ++*count;
    }
}

/* The reference's use_more_bits: the first and last eighth of the layers, and every third
 * layer in between. */
static int gets_more_bits(int i_layer, int n_layers) {
    return i_layer < n_layers / 8 || i_layer >= 7 * n_layers / 8 || (i_layer - n_layers / 8) % 3 == 2;
}

static int model_has_output(const gguf_file *f) {
    for (uint64_t i = 0; i < f->n_tensors; i++)
        if (role_of(f->tensors[i].name) == ROLE_OUTPUT) return 1;
    return 0;
}

static uint32_t mixed_type(const llmm_quant_recipe *r, const gguf_file *f, const gguf_tensor *t) {
    tensor_role role = role_of(t->name);
    if (role == ROLE_TOKEN_EMBD && !model_has_output(f)) role = ROLE_OUTPUT; /* tied: it is the output too */
    int index, count;
    switch (role) {
    case ROLE_OUTPUT:
        return t->ne[0] % llmm__type_get(r->type)->block_size ? LLMM_TYPE_Q8_0 : r->more_bits;
    case ROLE_ATTN_V:
    case ROLE_FFN_DOWN:
        role_rank(f, t, role, &index, &count);
        return gets_more_bits(index, count) ? r->more_bits : r->type;
    case ROLE_ATTN_QKV:
        return r->fused_qkv;
    default:
        return r->type;
    }
}

/* The reference's fallbacks for rows that do not fit a 256-block; F16 when nothing fits. */
static const struct {
    uint32_t from, to;
} fallback_chain[] = {
    {LLMM_TYPE_Q2_K, LLMM_TYPE_Q4_0}, {LLMM_TYPE_Q3_K, LLMM_TYPE_Q4_0}, {LLMM_TYPE_Q4_K, LLMM_TYPE_Q5_0},
    {LLMM_TYPE_Q5_K, LLMM_TYPE_Q5_1}, {LLMM_TYPE_Q6_K, LLMM_TYPE_Q8_0}, {LLMM_TYPE_IQ4_XS, LLMM_TYPE_IQ4_NL},
};

static int row_fits(uint32_t type, int64_t ne0) { return ne0 % llmm__type_get(type)->block_size == 0; }

static uint32_t fallback_type(uint32_t wanted, int64_t ne0) {
    for (size_t i = 0; i < sizeof fallback_chain / sizeof *fallback_chain; i++)
        if (fallback_chain[i].from == wanted && row_fits(fallback_chain[i].to, ne0)) return fallback_chain[i].to;
    return LLMM_TYPE_F16;
}

llmm_quant_choice llmm__quant_choose(const llmm_quant_recipe *r, const gguf_file *f, const gguf_tensor *t) {
    const llmm_type_traits *src = llmm__type_get(t->type);
    llmm_quant_choice c = {t->type, t->type, 0};
    if (is_vector(t)) {
        if (src && src->dequant_row) c.wanted = c.type = LLMM_TYPE_F32;
        return c;
    }
    if (!is_convertible_weight(t)) return c;
    c.wanted = c.type = r->more_bits ? mixed_type(r, f, t) : r->type;
    if (!row_fits(c.wanted, t->ne[0])) {
        c.type = fallback_type(c.wanted, t->ne[0]);
        c.fell_back = 1;
    }
    return c;
}

/* ================================================================ writing */

typedef struct writer {
    FILE *f;
    uint64_t pos;
    int failed;
} writer;

static void put(writer *w, const void *p, size_t n) {
    if (!w->failed && n && fwrite(p, 1, n, w->f) != n) w->failed = 1;
    w->pos += n;
}

/* GGUF is little-endian; so is every host this library builds for (the reader assumes it too). */
static void put_u32(writer *w, uint32_t v) { put(w, &v, 4); }
static void put_u64(writer *w, uint64_t v) { put(w, &v, 8); }
static void put_str(writer *w, gguf_str s) {
    put_u64(w, s.len);
    put(w, s.ptr, (size_t)s.len);
}

static uint64_t align_up(uint64_t v) { return (v + OUT_ALIGNMENT - 1) / OUT_ALIGNMENT * OUT_ALIGNMENT; }

static void pad(writer *w) {
    static const uint8_t zeros[OUT_ALIGNMENT];
    put(w, zeros, (size_t)(align_up(w->pos) - w->pos));
}

/* Keys the writer sets itself: the alignment is the default, the other two describe the new
 * contents. */
static int is_rewritten_key(gguf_str key) {
    static const char *const keys[] = {"general.alignment", "general.file_type", "general.quantization_version"};
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++)
        if (key.len == strlen(keys[i]) && !memcmp(key.ptr, keys[i], key.len)) return 1;
    return 0;
}

/* A key/value pair exactly as the source stores it: key length, key, type, value. The reader
 * has checked every extent, and array values record the bytes their elements take. */
static void put_kv_raw(writer *w, const gguf_kv *kv) {
    size_t value_bytes;
    if (kv->type == GGUF_TYPE_STRING) value_bytes = 8 + (size_t)kv->v.str.len;
    else if (kv->type == GGUF_TYPE_ARRAY) value_bytes = 4 + 8 + (size_t)kv->v.arr.bytes;
    else value_bytes = llmm__gguf_scalar_size(kv->type);
    put(w, (const uint8_t *)kv->key.ptr - 8, 8 + (size_t)kv->key.len + 4 + value_bytes);
}

static void put_kv_u32(writer *w, const char *key, uint32_t v) {
    put_str(w, (gguf_str){key, strlen(key)});
    put_u32(w, GGUF_TYPE_U32);
    put_u32(w, v);
}

static uint64_t rows_of(const gguf_tensor *t) { return t->ne[0] ? t->n_elements / (uint64_t)t->ne[0] : 0; }

static uint64_t out_bytes(const gguf_tensor *t, uint32_t type) {
    return (uint64_t)llmm__row_bytes(type, (uint64_t)t->ne[0]) * rows_of(t);
}

static void write_header(writer *w, const gguf_file *in, const llmm_quant_recipe *r, const llmm_quant_choice *c) {
    uint64_t n_kv = 2;
    for (uint64_t i = 0; i < in->n_kv; i++) n_kv += !is_rewritten_key(in->kv[i].key);
    put(w, "GGUF", 4);
    put_u32(w, 3);
    put_u64(w, in->n_tensors);
    put_u64(w, n_kv);
    for (uint64_t i = 0; i < in->n_kv; i++)
        if (!is_rewritten_key(in->kv[i].key)) put_kv_raw(w, &in->kv[i]);
    put_kv_u32(w, "general.quantization_version", QUANTIZATION_VERSION);
    put_kv_u32(w, "general.file_type", r->file_type);
    uint64_t offset = 0;
    for (uint64_t i = 0; i < in->n_tensors; i++) {
        const gguf_tensor *t = &in->tensors[i];
        put_str(w, t->name);
        put_u32(w, t->n_dims);
        for (uint32_t j = 0; j < t->n_dims; j++) put_u64(w, (uint64_t)t->ne[j]);
        put_u32(w, c[i].type);
        put_u64(w, offset);
        offset += align_up(out_bytes(t, c[i].type));
    }
    pad(w);
}

/* ================================================================ converting rows */

typedef struct convert_job {
    const uint8_t *src;       /* first source row of this job */
    uint8_t *dst;             /* first output row of this job */
    size_t n_rows, ne0, src_row_bytes, dst_row_bytes;
    llmm_dequant_row_fn to_float;
    llmm_quantize_row_fn from_float;
    float *row;               /* ne0 floats of scratch, this job's own */
} convert_job;

static void *convert_rows(void *arg) {
    const convert_job *j = arg;
    for (size_t r = 0; r < j->n_rows; r++) {
        j->to_float(j->src + r * j->src_row_bytes, j->row, j->ne0);
        j->from_float(j->row, j->dst + r * j->dst_row_bytes, j->ne0);
    }
    return NULL;
}

/* Split rows over the jobs and run them, one thread each; a thread that cannot be started
 * runs its job here instead, so a short-of-threads system is slower, not wrong. */
static void run_jobs(convert_job *jobs, int n_jobs) {
    pthread_t tid[MAX_THREADS];
    int started[MAX_THREADS] = {0};
    for (int k = 1; k < n_jobs; k++) started[k] = pthread_create(&tid[k], NULL, convert_rows, &jobs[k]) == 0;
    convert_rows(&jobs[0]);
    for (int k = 1; k < n_jobs; k++) {
        if (started[k]) pthread_join(tid[k], NULL);
        else convert_rows(&jobs[k]);
    }
}

typedef struct converter {
    int n_threads;
    float *rows;       /* n_threads rows of max_ne0 floats */
    uint8_t *chunk;    /* CHUNK_BYTES (or one row, if larger) of output */
    size_t chunk_cap;
} converter;

static void convert_chunk(converter *cv, const gguf_tensor *t, uint32_t type, uint64_t row0, size_t n_rows) {
    const llmm_type_traits *src = llmm__type_get(t->type), *dst = llmm__type_get(type);
    const size_t ne0 = (size_t)t->ne[0], sb = llmm__row_bytes(t->type, ne0), db = llmm__row_bytes(type, ne0);
    convert_job jobs[MAX_THREADS];
    int n_jobs = (size_t)cv->n_threads < n_rows ? cv->n_threads : (int)n_rows;
    size_t done = 0;
    for (int k = 0; k < n_jobs; k++) {
        const size_t take = (n_rows - done) / (size_t)(n_jobs - k);
        jobs[k] = (convert_job){(const uint8_t *)t->data + (row0 + done) * sb, cv->chunk + done * db, take, ne0, sb, db,
                                src->dequant_row, dst->from_float, cv->rows + (size_t)k * ne0};
        done += take;
    }
    run_jobs(jobs, n_jobs);
}

static void write_tensor_data(writer *w, converter *cv, const gguf_tensor *t, uint32_t type) {
    const size_t db = llmm__row_bytes(type, (uint64_t)t->ne[0]);
    if (type == t->type) {
        put(w, t->data, (size_t)t->n_bytes);
    } else if (db > 0) { /* 0 only for an empty tensor: nothing to convert */
        const size_t per_chunk = cv->chunk_cap / db;
        for (uint64_t r = 0; r < rows_of(t) && !w->failed; r += per_chunk) {
            const size_t n = rows_of(t) - r < per_chunk ? (size_t)(rows_of(t) - r) : per_chunk;
            convert_chunk(cv, t, type, r, n);
            put(w, cv->chunk, n * db);
        }
    }
    pad(w);
}

/* ================================================================ the conversion */

static llmm_status plan(const gguf_file *in, const llmm_quant_recipe *r, llmm_quant_choice *c, llmm_diag *d) {
    for (uint64_t i = 0; i < in->n_tensors; i++) {
        const gguf_tensor *t = &in->tensors[i];
        c[i] = llmm__quant_choose(r, in, t);
        if (c[i].type == t->type) continue;
        const llmm_type_traits *src = llmm__type_get(t->type), *dst = llmm__type_get(c[i].type);
        if (!src->dequant_row || !dst->from_float)
            return llmm__diag_fail(d, LLMM_ERR_UNSUPPORTED, "tensor '%.*s': cannot convert %s to %s", (int)t->name.len,
                             t->name.ptr, src->name, dst->name);
    }
    return LLMM_OK;
}

static llmm_status converter_init(converter *cv, const gguf_file *in, const llmm_quant_choice *c, int n_threads,
                                  llmm_diag *d) {
    size_t max_ne0 = 1, max_row = 1;
    for (uint64_t i = 0; i < in->n_tensors; i++) {
        if (c[i].type == in->tensors[i].type) continue;
        const size_t ne0 = (size_t)in->tensors[i].ne[0];
        max_ne0 = ne0 > max_ne0 ? ne0 : max_ne0;
        const size_t rb = llmm__row_bytes(c[i].type, ne0);
        max_row = rb > max_row ? rb : max_row;
    }
    cv->n_threads = n_threads < 1 ? 1 : n_threads > MAX_THREADS ? MAX_THREADS : n_threads;
    cv->chunk_cap = max_row > CHUNK_BYTES ? max_row : CHUNK_BYTES;
    size_t row_bytes;
    cv->rows = size_mul_ok(max_ne0 * sizeof(float), (size_t)cv->n_threads, &row_bytes) ? malloc(row_bytes) : NULL;
    cv->chunk = malloc(cv->chunk_cap);
    if (!cv->rows || !cv->chunk) return llmm__diag_fail(d, LLMM_ERR_NO_MEMORY, "out of memory for conversion buffers");
    return LLMM_OK;
}

static void report(const llmm_quant_params *p, const gguf_file *in, uint64_t i, llmm_quant_choice c) {
    if (!p->progress) return;
    const gguf_tensor *t = &in->tensors[i];
    llmm_quant_progress pr = {(size_t)i, (size_t)in->n_tensors, t, c, t->n_bytes, out_bytes(t, c.type)};
    p->progress(p->user, &pr);
}

llmm_status llmm__quantize_model(const gguf_file *in, const llmm_quant_params *p, FILE *out, llmm_diag *d) {
    if (!p || !p->recipe || !out) return llmm__diag_fail(d, LLMM_ERR_INVALID_ARG, "missing recipe or output");
    llmm_quant_choice *c = calloc(in->n_tensors ? in->n_tensors : 1, sizeof *c);
    converter cv = {0};
    if (!c) return llmm__diag_fail(d, LLMM_ERR_NO_MEMORY, "out of memory");
    llmm_status st = plan(in, p->recipe, c, d);
    if (!st) st = converter_init(&cv, in, c, p->n_threads, d);
    writer w = {out, 0, 0};
    if (!st) write_header(&w, in, p->recipe, c);
    for (uint64_t i = 0; i < in->n_tensors && !st && !w.failed; i++) {
        write_tensor_data(&w, &cv, &in->tensors[i], c[i].type);
        if (!w.failed) report(p, in, i, c[i]);
    }
    if (!st && (w.failed || fflush(out) != 0)) st = llmm__diag_fail(d, LLMM_ERR_IO, "writing the output failed");
    free(cv.rows);
    free(cv.chunk);
    free(c);
    return st;
}
