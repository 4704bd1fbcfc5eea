/* The CUDA backend's table (lib/backend.h) and its module entry point (lib/backend_module.h):
 * device buffers, weights uploaded once per model and device, the step's per-row inputs in
 * fixed device buffers, and each op as one launch of the kernels in kernels.h on the
 * context's stream.
 *
 * Built twice, like every kernel file of cuda/: by nvcc into libllmmini-cuda.so (make CUDA=1, linked
 * with cudart) and by the host C++ compiler against the SIMT emulation into
 * libllmmini-cuda-emu.so (make test, make cuda-emu), which tests/test_cuda_module.c loads as
 * the CUDA module. The module calls nothing of the core: it uses the table's types and the
 * kernels only, and takes memory from the app's allocator hooks (cfg->alloc) directly.
 *
 * Weights. The first context of a model on this backend makes a table of device copies, one
 * slot per weight index, in the model's share (cfg->shared, as cpu_backend.c's copy set);
 * prepare_weight uploads a weight the first time its index is prepared and hands every later
 * context the same device pointer; the last context's shutdown frees them all. A context
 * without a share (never from the core) keeps a private table.
 *
 * Steps. step_begin validates the descriptor as the CPU backend does, then packs the step's
 * tokens, positions, each row's block table start and the concatenated block tables into one
 * host staging array laid out as the device buffer (fixed offsets from the reserved row
 * capacity) and uploads it with one cudaMemcpyAsync; the kernels read them through cu_step.
 * The buffer is sized at reserve() for shape->max_rows rows and max_rows * ceil(max_kv / 16)
 * table entries, and grows in step_begin only for a step beyond that (the conformance suite
 * never calls reserve). step_end synchronizes the stream.
 *
 * Tokens. embed checks the step's token ids against the table's rows on the host (they are
 * host values of the descriptor), so an out-of-range id fails embed with LLMM_ERR_INVALID_ARG
 * at once, without a device read; cu_embed's device flag is then never set, and is not read. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "simt.h"

#include "backend.h"
#include "backend_module.h"
#include "kernels.h"
#include "model.h"
#include "quant_blocks.cuh"

namespace {

/* A device copy of one weight. */
struct cu_weight_slot {
    void *dev;
    size_t bytes;
};

/* The device copies a model's contexts share (llmm_backend_shared.data). */
struct cu_weight_set {
    size_t n;
    const llmm_allocator *alloc; /* of the context that made it */
    cu_weight_slot slot[1];      /* (n) */
};

/* Minimum block size the table capacity is reserved for (positions per block). */
const size_t k_min_block = 16;

struct cu_state {
    const llmm_allocator *alloc;
    cudaStream_t stream;
    size_t n_weights;
    llmm_backend_shared *shared; /* the model's share, or NULL: own holds a private set */
    cu_weight_set *weights;
    cu_weight_set *own;

    /* step inputs: device buffer and host staging of the same layout, in uint32 words:
     * tokens [0, rows_cap), pos [rows_cap, 2 rows_cap), table_start [2 rows_cap, 3 rows_cap),
     * tables [3 rows_cap, 3 rows_cap + tables_cap) */
    uint32_t *step_dev;
    uint32_t *step_host;
    size_t rows_cap, tables_cap;

    void *scratch; /* cu_matmul's */
    size_t scratch_bytes;
    int *bad; /* device: cu_embed's flag */

    int in_step;
    llmm_step desc;
    cu_kv kv;
    cu_step step;
};

void *cu_host_alloc(const llmm_allocator *al, size_t bytes) {
    if (al && al->alloc) return al->alloc(al->user, bytes ? bytes : 1);
    return malloc(bytes ? bytes : 1);
}

void cu_host_free(const llmm_allocator *al, void *p) {
    if (!p) return;
    if (al && al->free) al->free(al->user, p);
    else free(p);
}

void *cu_host_calloc(const llmm_allocator *al, size_t n, size_t size) {
    if (size && n > SIZE_MAX / size) return NULL;
    void *p = cu_host_alloc(al, n * size);
    if (p) memset(p, 0, n * size);
    return p;
}

llmm_status cu_status(int err) {
    if (err == 0) return LLMM_OK;
    return err == cudaErrorMemoryAllocation ? LLMM_ERR_NO_MEMORY : LLMM_ERR_BACKEND;
}

cu_weight_set *cu_set_new(const llmm_allocator *al, size_t n) {
    cu_weight_set *set = (cu_weight_set *)cu_host_calloc(al, 1, sizeof *set + n * sizeof set->slot[0]);
    if (set) {
        set->n = n;
        set->alloc = al;
    }
    return set;
}

void cu_set_free(cu_weight_set *set) {
    if (!set) return;
    for (size_t i = 0; i < set->n; i++) cudaFree(set->slot[i].dev);
    cu_host_free(set->alloc, set);
}

/* Joins the model's set of device copies, creating it for the first context (under the
 * share's lock: contexts of one model start and stop on any threads). */
llmm_status join_weights(cu_state *s, llmm_backend_shared *shared, size_t n) {
    pthread_mutex_lock(&shared->lock);
    cu_weight_set *set = (cu_weight_set *)shared->data;
    if (!set && (set = cu_set_new(s->alloc, n))) shared->data = set;
    if (set) shared->users++;
    pthread_mutex_unlock(&shared->lock);
    if (!set) return LLMM_ERR_NO_MEMORY;
    s->shared = shared;
    if (set->n == n) {
        s->weights = set;
        return LLMM_OK;
    }
    /* a share of another shape (never expected): copies of this context's own */
    if (!(s->own = cu_set_new(s->alloc, n))) return LLMM_ERR_NO_MEMORY;
    s->weights = s->own;
    return LLMM_OK;
}

/* The last context of the model to leave frees the device copies, before its shutdown
 * returns (the module may be unloaded right after). */
void leave_weights(cu_state *s) {
    llmm_backend_shared *shared = s->shared;
    if (!shared) return;
    pthread_mutex_lock(&shared->lock);
    if (--shared->users == 0) {
        cu_set_free((cu_weight_set *)shared->data);
        shared->data = NULL;
    }
    pthread_mutex_unlock(&shared->lock);
    s->shared = NULL;
}

/* ---------------------------------------------------------------- the table */

int cu_available(void) {
#if SIMT_EMULATED
    return 1; /* the emulation runs every kernel on the CPU */
#else
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError(); /* a driver without a device leaves a sticky-looking error: clear it */
        return 0;
    }
    return n > 0;
#endif
}

int cu_supports_type(uint32_t type) { return qb_block_size(type) > 0; }

void cu_shutdown(void *state);

llmm_status cu_init(const llmm_backend_config *cfg, void **out) {
    cu_state *s = (cu_state *)cu_host_calloc(cfg->alloc, 1, sizeof *s);
    if (!s) return LLMM_ERR_NO_MEMORY;
    s->alloc = cfg->alloc;
    s->n_weights = cfg->n_weights;
    llmm_status st = cu_status(cudaStreamCreate(&s->stream));
    if (!st) st = cu_status(cudaMalloc((void **)&s->bad, sizeof(int)));
    if (!st) {
        if (cfg->shared) st = join_weights(s, cfg->shared, cfg->n_weights);
        else if ((s->own = cu_set_new(s->alloc, cfg->n_weights))) s->weights = s->own;
        else st = LLMM_ERR_NO_MEMORY;
    }
    if (st) {
        cu_shutdown(s);
        return st;
    }
    *out = s;
    return LLMM_OK;
}

void cu_shutdown(void *state) {
    cu_state *s = (cu_state *)state;
    if (!s) return;
    if (s->stream) cudaStreamSynchronize(s->stream);
    leave_weights(s);
    cu_set_free(s->own);
    cudaFree(s->step_dev);
    cu_host_free(s->alloc, s->step_host);
    cudaFree(s->scratch);
    cudaFree(s->bad);
    if (s->stream) cudaStreamDestroy(s->stream);
    cu_host_free(s->alloc, s);
}

llmm_status cu_buffer_alloc(void *state, size_t bytes, void **out) {
    (void)state;
    *out = NULL;
    llmm_status st = cu_status(cudaMalloc(out, bytes ? bytes : 1));
    if (st) *out = NULL;
    return st;
}

void cu_buffer_free(void *state, void *buffer) {
    cu_state *s = (cu_state *)state;
    if (!buffer) return;
    cudaStreamSynchronize(s->stream); /* nothing queued may still use it */
    cudaFree(buffer);
}

llmm_status cu_upload(void *state, void *dst, const void *src, size_t bytes) {
    cu_state *s = (cu_state *)state;
    if (!bytes) return LLMM_OK;
    return cu_status(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, s->stream));
}

llmm_status cu_download(void *state, void *dst, const void *src, size_t bytes) {
    cu_state *s = (cu_state *)state;
    if (!bytes) return LLMM_OK;
    int err = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, s->stream);
    if (!err) err = cudaStreamSynchronize(s->stream);
    return cu_status(err);
}

llmm_status cu_copy(void *state, void *dst, const void *src, size_t bytes) {
    cu_state *s = (cu_state *)state;
    if (!bytes) return LLMM_OK;
    return cu_status(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s->stream));
}

/* The weight's rows in device memory: the model's copy when a context made it already,
 * else uploaded now into the model's table (under its lock, so that contexts created at the
 * same time upload it once). */
llmm_status cu_prepare_weight(void *state, size_t index, llmm_weight_role role, const llmm_tensor *host,
                              llmm_tensor *out) {
    cu_state *s = (cu_state *)state;
    (void)role;
    if (index >= s->n_weights || !host->data || host->ne1 < 0) return LLMM_ERR_INVALID_ARG;
    const size_t bytes = host->row_bytes * (size_t)host->ne1;
    cu_weight_slot *slot = &s->weights->slot[index];
    const int shared = s->weights != s->own && s->shared;
    if (shared) pthread_mutex_lock(&s->shared->lock);
    llmm_status st = LLMM_OK;
    if (slot->dev && slot->bytes != bytes) st = LLMM_ERR_INVALID_ARG; /* another weight at this index */
    if (!st && !slot->dev) {
        void *dev = NULL;
        int err = cudaMalloc(&dev, bytes ? bytes : 1);
        if (!err) err = cudaMemcpy(dev, host->data, bytes, cudaMemcpyHostToDevice);
        if (err) {
            cudaFree(dev);
            st = cu_status(err);
        } else {
            slot->dev = dev;
            slot->bytes = bytes;
        }
    }
    if (shared) pthread_mutex_unlock(&s->shared->lock);
    if (st) return st;
    *out = *host;
    out->data = slot->dev;
    out->backend = slot;
    return LLMM_OK;
}

/* The copy stays with the model's table until its last context shuts down. */
void cu_release_weight(void *state, llmm_tensor *w) {
    (void)state;
    w->data = NULL;
    w->backend = NULL;
}

/* Room for steps of up to rows rows and tables block table entries (both grow only). */
llmm_status reserve_step(cu_state *s, size_t rows, size_t tables) {
    if (rows <= s->rows_cap && tables <= s->tables_cap) return LLMM_OK;
    rows = rows > s->rows_cap ? rows : s->rows_cap;
    tables = tables > s->tables_cap ? tables : s->tables_cap;
    const size_t words = 3 * rows + tables;
    uint32_t *host = (uint32_t *)cu_host_calloc(s->alloc, words, sizeof *host);
    if (!host) return LLMM_ERR_NO_MEMORY;
    uint32_t *dev = NULL;
    if (cudaMalloc((void **)&dev, words * sizeof *dev) != cudaSuccess) {
        cu_host_free(s->alloc, host);
        return LLMM_ERR_NO_MEMORY;
    }
    if (s->step_dev) cudaStreamSynchronize(s->stream);
    cudaFree(s->step_dev);
    cu_host_free(s->alloc, s->step_host);
    s->step_dev = dev;
    s->step_host = host;
    s->rows_cap = rows;
    s->tables_cap = tables;
    return LLMM_OK;
}

llmm_status reserve_scratch(cu_state *s, size_t bytes) {
    if (bytes <= s->scratch_bytes) return LLMM_OK;
    void *p = NULL;
    if (cudaMalloc(&p, bytes) != cudaSuccess) return LLMM_ERR_NO_MEMORY;
    if (s->scratch) {
        cudaStreamSynchronize(s->stream);
        cudaFree(s->scratch);
    }
    s->scratch = p;
    s->scratch_bytes = bytes;
    return LLMM_OK;
}

llmm_status cu_step_begin(void *state, const llmm_step *step) {
    cu_state *s = (cu_state *)state;
    if (!step || !step->kv || !(step->kv->layout & LLMM_KV_LAYOUT_HEAD_REGIONS) || step->n_seqs == 0 ||
        step->n_seqs > step->n_rows || step->n_rows > UINT32_MAX)
        return LLMM_ERR_INVALID_ARG;
    for (size_t r = 0; r < step->n_rows; r++)
        if (step->row_seq[r] >= step->n_seqs || step->pos[r] < 0 ||
            ((uint32_t)step->pos[r] >> step->kv->block_shift) >= step->n_blocks[step->row_seq[r]])
            return LLMM_ERR_INVALID_ARG;
    /* a block id past the pool would send kv_write outside it */
    size_t tables = 0;
    for (uint32_t q = 0; q < step->n_seqs; q++) {
        for (uint32_t i = 0; i < step->n_blocks[q]; i++)
            if (step->block_tables[q][i] >= step->kv->n_blocks) return LLMM_ERR_INVALID_ARG;
        tables += step->n_blocks[q];
    }
    if (tables > UINT32_MAX) return LLMM_ERR_INVALID_ARG;
    llmm_status st = reserve_step(s, step->n_rows, tables);
    if (st) return st;

    /* the staging array, as the device buffer lays it out */
    const size_t n = step->n_rows, cap = s->rows_cap;
    uint32_t *h = s->step_host;
    uint32_t *starts = h + 2 * cap, *tab = h + 3 * cap;
    size_t at = 0;
    for (uint32_t q = 0; q < step->n_seqs; q++) {
        memcpy(tab + at, step->block_tables[q], step->n_blocks[q] * sizeof *tab);
        at += step->n_blocks[q];
    }
    /* each sequence's table start: its offset among the concatenated tables */
    for (size_t r = 0; r < n; r++) {
        const uint32_t q = step->row_seq[r];
        size_t off = 0;
        if (r > 0 && q == step->row_seq[r - 1]) off = starts[r - 1];
        else
            for (uint32_t j = 0; j < q; j++) off += step->n_blocks[j];
        starts[r] = (uint32_t)off;
    }
    memcpy(h, step->tokens, n * sizeof *h);
    memcpy(h + cap, step->pos, n * sizeof *h);
    /* one copy: everything up to the end of the tables (the unused row slots ride along) */
    const int err =
        cudaMemcpyAsync(s->step_dev, h, (3 * cap + tables) * sizeof *h, cudaMemcpyHostToDevice, s->stream);
    if (err) return cu_status(err);

    const llmm_kv_layout *kv = step->kv;
    s->kv = cu_kv{(uint8_t *)kv->pool, kv->n_layer, kv->n_head_kv, kv->head_dim, kv->type,
                  kv->block_shift, kv->row_bytes, kv->block_stride, kv->head_stride};
    s->step = cu_step{(uint32_t)n, (const int32_t *)s->step_dev, (const int32_t *)(s->step_dev + cap),
                      s->step_dev + 2 * cap, s->step_dev + 3 * cap};
    s->desc = *step;
    s->in_step = 1;
    return LLMM_OK;
}

llmm_status cu_step_end(void *state) {
    cu_state *s = (cu_state *)state;
    s->in_step = 0;
    s->desc = llmm_step{};
    return cu_status(cudaStreamSynchronize(s->stream));
}

llmm_status cu_embed_op(void *state, const llmm_tensor *table, float *out) {
    cu_state *s = (cu_state *)state;
    if (!s->in_step) return LLMM_ERR_INVALID_ARG;
    for (size_t r = 0; r < s->desc.n_rows; r++)
        if (s->desc.tokens[r] < 0 || (int64_t)s->desc.tokens[r] >= table->ne1) return LLMM_ERR_INVALID_ARG;
    return cu_status(cu_embed(s->stream, table->data, table->type, (size_t)table->ne0, (size_t)table->ne1,
                              s->step.tokens, s->desc.n_rows, out, s->bad));
}

llmm_status cu_rms_norm_op(void *state, const float *x, const float *weight, float *out, size_t n_rows, size_t dim,
                           float eps) {
    cu_state *s = (cu_state *)state;
    if (!n_rows || !dim) return LLMM_OK;
    return cu_status(cu_rms_norm(s->stream, x, weight, out, n_rows, dim, eps));
}

llmm_status cu_matmul_op(void *state, const llmm_tensor *w, const float *x, size_t n_rows, float *out) {
    cu_state *s = (cu_state *)state;
    if (!n_rows || !w->ne1) return LLMM_OK;
    llmm_status st = reserve_scratch(s, cu_matmul_scratch_bytes(w->type, (size_t)w->ne0, n_rows));
    if (st) return st;
    return cu_status(
        cu_matmul(s->stream, w->data, w->type, (size_t)w->ne0, (size_t)w->ne1, x, n_rows, out, s->scratch));
}

llmm_status cu_rope_op(void *state, float *x, size_t n_heads, size_t head_dim, const llmm_rope_params *rp) {
    cu_state *s = (cu_state *)state;
    if (!s->in_step || rp->n_rot > head_dim || rp->n_rot % 2) return LLMM_ERR_INVALID_ARG;
    if (!s->desc.n_rows || !n_heads || !rp->n_rot) return LLMM_OK;
    return cu_status(cu_rope(s->stream, x, s->desc.n_rows, n_heads, head_dim, s->step.pos, rp->n_rot, rp->base,
                             rp->freq_scale, rp->mscale, (uint32_t)rp->kind, rp->freq_factors));
}

llmm_status cu_glu_op(void *state, float *gate, const float *up, size_t n, llmm_activation act) {
    cu_state *s = (cu_state *)state;
    if (!n) return LLMM_OK;
    return cu_status(cu_glu(s->stream, gate, up, n, (uint32_t)act));
}

llmm_status cu_add_op(void *state, float *dst, const float *src, size_t n) {
    cu_state *s = (cu_state *)state;
    if (!n) return LLMM_OK;
    return cu_status(cu_add(s->stream, dst, src, n));
}

llmm_status cu_add_rows_op(void *state, float *x, const float *bias, size_t n_rows, size_t dim) {
    cu_state *s = (cu_state *)state;
    if (!n_rows || !dim) return LLMM_OK;
    return cu_status(cu_add_rows(s->stream, x, bias, n_rows, dim));
}

llmm_status cu_scale_op(void *state, float *x, size_t n, float f) {
    cu_state *s = (cu_state *)state;
    if (!n) return LLMM_OK;
    return cu_status(cu_scale(s->stream, x, n, f));
}

llmm_status cu_softcap_op(void *state, float *x, size_t n, float cap) {
    cu_state *s = (cu_state *)state;
    if (!n) return LLMM_OK;
    return cu_status(cu_softcap(s->stream, x, n, cap));
}

llmm_status cu_kv_write_op(void *state, uint32_t layer, const float *k, const float *v) {
    cu_state *s = (cu_state *)state;
    if (!s->in_step || layer >= s->kv.n_layer) return LLMM_ERR_INVALID_ARG;
    if (!s->desc.n_rows) return LLMM_OK;
    return cu_status(cu_kv_write(s->stream, &s->kv, &s->step, layer, k, v));
}

llmm_status cu_attention_op(void *state, uint32_t layer, const llmm_attn_batch *b) {
    cu_state *s = (cu_state *)state;
    if (!s->in_step || layer >= s->kv.n_layer || b->n_rows != s->desc.n_rows || b->n_head_kv != s->kv.n_head_kv ||
        b->head_dim != s->kv.head_dim || !b->n_head_kv || b->n_head % b->n_head_kv)
        return LLMM_ERR_INVALID_ARG;
    if (!b->n_rows) return LLMM_OK;
    return cu_status(
        cu_attention(s->stream, &s->kv, &s->step, layer, b->q, b->out, b->n_head, b->window, b->scale, b->softcap));
}

/* Table entries a step of the shape may need: each row's sequence at most ceil(max_kv / 16)
 * blocks (the smallest block the core makes). */
size_t shape_tables(const llmm_step_shape *shape) {
    return shape->max_rows * ((shape->max_kv + k_min_block - 1) / k_min_block + 1);
}

/* cu_matmul's scratch for the widest input of any weight type present, max_rows rows. */
size_t shape_matmul_scratch(const llmm_step_shape *shape) {
    size_t most = 0;
    for (uint32_t t = 0; t < 64; t++)
        if (shape->weight_types >> t & 1 && qb_block_size(t) > 0) {
            const size_t b = cu_matmul_scratch_bytes(t, shape->max_in, shape->max_rows);
            most = b > most ? b : most;
        }
    return most;
}

/* Device memory besides the buffers: matmul scratch, the step buffer, the embed flag, plus
 * the host state (estimates count it all as the backend's). */
size_t cu_working_bytes(const llmm_step_shape *shape, int n_threads) {
    (void)n_threads;
    return shape_matmul_scratch(shape) + (3 * shape->max_rows + shape_tables(shape)) * sizeof(uint32_t) * 2 +
           sizeof(int) + sizeof(cu_state) + sizeof(cu_weight_set) + shape->n_weights * sizeof(cu_weight_slot);
}

llmm_status cu_reserve(void *state, const llmm_step_shape *shape) {
    cu_state *s = (cu_state *)state;
    llmm_status st = reserve_scratch(s, shape_matmul_scratch(shape));
    if (!st) st = reserve_step(s, shape->max_rows, shape_tables(shape));
    return st;
}

llmm_backend_ops make_table() {
    llmm_backend_ops t;
    memset(&t, 0, sizeof t);
    t.api_version = LLMM_BACKEND_API_VERSION;
    t.name = "cuda";
    t.kind = LLMM_BACKEND_CUDA;
    t.flags = LLMM_BACKEND_DEVICE_MEMORY;
    t.kv_layouts = LLMM_KV_LAYOUT_HEAD_REGIONS;
    t.available = cu_available;
    t.supports_type = cu_supports_type;
    t.init = cu_init;
    t.shutdown = cu_shutdown;
    t.buffer_alloc = cu_buffer_alloc;
    t.buffer_free = cu_buffer_free;
    t.upload = cu_upload;
    t.download = cu_download;
    t.prepare_weight = cu_prepare_weight;
    t.release_weight = cu_release_weight;
    t.step_begin = cu_step_begin;
    t.step_end = cu_step_end;
    t.embed = cu_embed_op;
    t.rms_norm = cu_rms_norm_op;
    t.matmul = cu_matmul_op;
    t.matmul_multi = NULL;
    t.rope = cu_rope_op;
    t.glu = cu_glu_op;
    t.add = cu_add_op;
    t.add_rows = cu_add_rows_op;
    t.scale = cu_scale_op;
    t.softcap = cu_softcap_op;
    t.kv_write = cu_kv_write_op;
    t.attention = cu_attention_op;
    t.copy = cu_copy;
    t.scratch_bytes = cu_working_bytes;
    t.reserve = cu_reserve;
    return t;
}

/* Static storage, made before any caller can see it (a function-local static's
 * initialization is thread-safe in C++). */
const llmm_backend_ops *cuda_table() {
    static const llmm_backend_ops table = make_table();
    return &table;
}

} // namespace

/* The module's one export (LLMM_BACKEND_MODULE_ENTRY). */
extern "C" __attribute__((visibility("default"))) const llmm_backend_ops *
llmm_backend_module(uint32_t core_api_version) {
    if (core_api_version != LLMM_BACKEND_API_VERSION) return NULL;
    return cuda_table();
}
