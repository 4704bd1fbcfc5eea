/* The CPU backend's table: host memory, the thread pool, and the op files' kernels. */
#include "cpu_backend.h"

#include <string.h>

#include "packed_tiles.h"
#include "format/quant.h"

void *llmm__cpu_scratch(cpu_state *s, size_t bytes) {
    if (bytes <= s->scratch_bytes) return s->scratch;
    void *p = llmm__mem_alloc(s->alloc, bytes);
    if (!p) return NULL;
    llmm__mem_free(s->alloc, s->scratch);
    s->scratch = p;
    s->scratch_bytes = bytes;
    return p;
}

typedef struct range_task {
    cpu_range_fn fn;
    void *arg;
    size_t n, per;
} range_task;

static void range_chunk(void *arg, size_t chunk, int ith) {
    (void)ith;
    const range_task *t = arg;
    const size_t i0 = chunk * t->per, i1 = LLMM_MIN(t->n, i0 + t->per);
    if (i0 < i1) t->fn(t->arg, i0, i1);
}

void llmm__cpu_parallel_range(cpu_state *s, size_t n, size_t align, size_t min_parallel, cpu_range_fn fn, void *arg) {
    const size_t nth = (size_t)llmm__threadpool_size(s->pool);
    if (nth == 1 || n < min_parallel || n <= align) {
        fn(arg, 0, n);
        return;
    }
    const size_t per = cpu_split_items(nth, n, align);
    range_task t = {fn, arg, n, per};
    llmm__threadpool_run(s->pool, range_chunk, &t, (n + per - 1) / per);
}

static int cpu_available(void) { return 1; }

static int cpu_supports_type(uint32_t type) {
    const llmm_type_traits *t = llmm__type_get(type);
    return t && t->dequant_row && t->vec_dot; /* a kernel of this ISA, or the generic path over vec_dot */
}

/* Joins the model's copy set, creating it for the first context (under the share's lock:
 * contexts of one model start and stop on any threads). */
static llmm_status join_copies(cpu_state *s, llmm_backend_shared *shared, size_t n) {
    pthread_mutex_lock(&shared->lock);
    cpu_copy_set *set = shared->data;
    if (!set && (set = llmm__mem_calloc(s->alloc, 1, sizeof *set + n * sizeof set->slot[0]))) {
        set->n = n;
        for (size_t i = 0; i < n; i++) {
            atomic_init(&set->slot[i].state, LLMM_COPY_NONE);
            set->slot[i].release_source = 1;
        }
        shared->data = set;
    }
    if (set) shared->users++;
    pthread_mutex_unlock(&shared->lock);
    if (!set) return LLMM_ERR_NO_MEMORY;
    s->shared = shared;
    s->copies = set->n == n ? set : NULL; /* a share of another shape: no copies (never expected) */
    return LLMM_OK;
}

/* The last context of the model to leave frees the copies: "released by the backend that made
 * them, before it shuts down". */
static void leave_copies(cpu_state *s) {
    llmm_backend_shared *shared = s->shared;
    if (!shared) return;
    pthread_mutex_lock(&shared->lock);
    if (--shared->users == 0) {
        cpu_copy_set *set = shared->data;
        for (size_t i = 0; i < set->n; i++) {
            llmm_weight_copy *c = &set->slot[i];
            if (atomic_load(&c->state) == LLMM_COPY_READY && c->free_data) c->free_data(c->data, c->bytes);
        }
        llmm__mem_free(s->alloc, set);
        shared->data = NULL;
    }
    pthread_mutex_unlock(&shared->lock);
    s->shared = NULL;
    s->copies = NULL;
}

static llmm_status cpu_init(const llmm_backend_config *cfg, void **out) {
    cpu_state *s = llmm__mem_calloc(cfg->alloc, 1, sizeof *s);
    if (!s) return LLMM_ERR_NO_MEMORY;
    s->alloc = cfg->alloc;
    s->pack_step_bytes = CPU_PACK_STEP_BYTES;
    s->n_weights = cfg->n_weights;
    s->weights = llmm__mem_calloc(cfg->alloc, cfg->n_weights + 1, sizeof *s->weights);
    /* copies replace pages of a file mapping; over owned memory they would double the weights */
    const int copies = cfg->repack_weights && cfg->weights_mapped && cfg->shared;
    s->own_vectors = copies;
    llmm_status st = s->weights ? LLMM_OK : LLMM_ERR_NO_MEMORY;
    if (!st && copies) st = join_copies(s, cfg->shared, cfg->n_weights);
    if (st) {
        llmm__mem_free(cfg->alloc, s->weights);
        llmm__mem_free(cfg->alloc, s);
        return st;
    }
    s->k = llmm__cpu_kernels_select(llmm__cpu_kernels_env_cap());
    llmm__log_msg(cfg->log, LLMM_LOG_DEBUG, "cpu backend: %s kernels", s->k->name);
    int n = cfg->n_threads > 0 ? cfg->n_threads : llmm__cpu_physical_cores();
    if ((st = llmm__threadpool_create(n, cfg->alloc, &s->pool))) {
        leave_copies(s);
        llmm__mem_free(cfg->alloc, s->weights);
        llmm__mem_free(cfg->alloc, s);
        return st;
    }
    *out = s;
    return LLMM_OK;
}

static void cpu_shutdown(void *state) {
    cpu_state *s = state;
    if (!s) return;
    llmm__threadpool_free(s->pool);
    leave_copies(s);
    llmm__mem_free(s->alloc, s->scratch);
    llmm__mem_free(s->alloc, s->views);
    llmm__mem_free(s->alloc, s->attn_rows);
    llmm__mem_free(s->alloc, s->weights);
    llmm__mem_free(s->alloc, s);
}

static llmm_status cpu_buffer_alloc(void *state, size_t bytes, void **out) {
    cpu_state *s = state;
    *out = llmm__mem_alloc(s->alloc, bytes);
    return *out ? LLMM_OK : LLMM_ERR_NO_MEMORY;
}

static void cpu_buffer_free(void *state, void *buffer) { llmm__mem_free(((cpu_state *)state)->alloc, buffer); }

/* The mapping itself, with the matrix's slot in the model's copy set (the copy is made by the
 * first decode steps, ops/matmul.c); vectors are copied out of the mapping when copies may
 * drop its pages, so that reading one never faults a dropped folio back in. */
static llmm_status cpu_prepare_weight(void *state, size_t index, llmm_weight_role role, const llmm_tensor *host,
                                      llmm_tensor *out) {
    cpu_state *s = state;
    if (index >= s->n_weights || !host->data) return LLMM_ERR_INVALID_ARG;
    cpu_weight *cw = &s->weights[index];
    *out = *host;
    out->backend = cw;
    *cw = (cpu_weight){0};
    if (role != LLMM_WEIGHT_VECTOR) {
        if (s->copies) cw->copy = &s->copies->slot[index];
        return LLMM_OK;
    }
    if (!s->own_vectors) return LLMM_OK;
    const size_t bytes = host->row_bytes * (size_t)host->ne1;
    if (!(cw->owned = llmm__mem_alloc(s->alloc, bytes))) return LLMM_ERR_NO_MEMORY;
    memcpy(cw->owned, host->data, bytes);
    out->data = cw->owned;
    return LLMM_OK;
}

static void cpu_release_weight(void *state, llmm_tensor *w) {
    cpu_state *s = state;
    cpu_weight *cw = w->backend;
    if (!cw) return;
    llmm__mem_free(s->alloc, cw->owned);
    *cw = (cpu_weight){0};
    w->backend = NULL;
}

/* Room for the per-row views and attention rows of steps of up to n rows. */
static llmm_status reserve_rows(cpu_state *s, size_t n) {
    if (n <= s->rows_cap) return LLMM_OK;
    llmm_kv_view *views = llmm__mem_calloc(s->alloc, n, sizeof *views);
    cpu_attn_row *rows = llmm__mem_calloc(s->alloc, n, sizeof *rows);
    if (!views || !rows) {
        llmm__mem_free(s->alloc, views);
        llmm__mem_free(s->alloc, rows);
        return LLMM_ERR_NO_MEMORY;
    }
    llmm__mem_free(s->alloc, s->views);
    llmm__mem_free(s->alloc, s->attn_rows);
    s->views = views;
    s->attn_rows = rows;
    s->rows_cap = n;
    return LLMM_OK;
}

void llmm__cpu_step_views(cpu_state *s, uint32_t layer) {
    const llmm_step *d = &s->desc;
    for (size_t r = 0; r < d->n_rows; r++) {
        const uint32_t q = d->row_seq[r];
        if (r > 0 && q == d->row_seq[r - 1]) s->views[r] = s->views[r - 1];
        else s->views[r] = kv_layout_view(d->kv, layer, d->block_tables[q]);
    }
}

static llmm_status cpu_copy(void *state, void *dst, const void *src, size_t bytes) {
    (void)state;
    memcpy(dst, src, bytes);
    return LLMM_OK;
}

/* One scratch buffer serves both users, never at the same time: matmul's activation
 * operands (F16/BF16 weights take doubles, 8 bytes per value; the 8-bit operands of the
 * quantized types at most 2; F32 weights use the activations as they are) and the
 * attention's per-thread scores and query vectors of up to one block of rows times one group
 * of query heads, plus LLMM_ATTN_CHUNK converted K/V head rows (ops/attention.c). */
static size_t cpu_scratch_bytes(const llmm_step_shape *shape, int n_threads) {
    const size_t threads = (size_t)(n_threads > 0 ? n_threads : llmm__cpu_physical_cores());
    const uint64_t wide = (1ull << LLMM_TYPE_F16) | (1ull << LLMM_TYPE_BF16);
    const size_t matmul = shape->max_rows * shape->max_in * (shape->weight_types & wide ? sizeof(float) : 2);
    const size_t heads = LLMM_MAX(1u, LLMM_MIN(shape->heads_per_kv, (uint32_t)LLMM_MAX_HEADS_PER_ITEM));
    const size_t rows = cpu_attn_rows_per_item(shape->max_rows, heads);
    const size_t attention =
        threads * cpu_attn_scratch_floats(rows, heads, shape->max_kv, shape->head_dim) * sizeof(float);
    return LLMM_MAX(matmul, attention);
}

/* The scratch, plus what cpu_init and cpu_reserve allocate besides it (per-weight records, the
 * step's views and attention rows), so that the context's estimate covers them. */
static size_t cpu_working_bytes(const llmm_step_shape *shape, int n_threads) {
    return cpu_scratch_bytes(shape, n_threads) + (shape->n_weights + 1) * sizeof(cpu_weight) +
           shape->max_rows * (sizeof(llmm_kv_view) + sizeof(cpu_attn_row)) + sizeof(cpu_state);
}

/* The step's kind decides which matmuls may make packed weight copies (ops/matmul.c): a
 * decode step's, of any number of sequences; not a prompt's, not even its last-position
 * logits (a one-row matmul), so that the first token never waits for packing. */
static llmm_status cpu_step_begin(void *state, const llmm_step *step) {
    cpu_state *s = state;
    if (!step || !step->kv || !(step->kv->layout & LLMM_KV_LAYOUT_HEAD_REGIONS) || step->n_seqs == 0 ||
        step->n_seqs > step->n_rows)
        return LLMM_ERR_INVALID_ARG;
    for (size_t r = 0; r < step->n_rows; r++)
        if (step->row_seq[r] >= step->n_seqs || step->pos[r] < 0 ||
            ((uint32_t)step->pos[r] >> step->kv->block_shift) >= step->n_blocks[step->row_seq[r]])
            return LLMM_ERR_INVALID_ARG;
    /* a block id past the pool would send kv_write outside it */
    for (uint32_t q = 0; q < step->n_seqs; q++)
        for (uint32_t i = 0; i < step->n_blocks[q]; i++)
            if (step->block_tables[q][i] >= step->kv->n_blocks) return LLMM_ERR_INVALID_ARG;
    llmm_status st = reserve_rows(s, step->n_rows);
    if (st) return st;
    s->desc = *step;
    s->step = step->kind == LLMM_STEP_DECODE ? CPU_STEP_DECODE : CPU_STEP_PROMPT;
    /* warm-up makes every copy at once: that is what the app called it for */
    s->pack_budget = step->warmup ? SIZE_MAX : s->pack_step_bytes;
    return LLMM_OK;
}

static llmm_status cpu_step_end(void *state) {
    cpu_state *s = state;
    s->step = CPU_STEP_NONE;
    s->desc = (llmm_step){0};
    return LLMM_OK;
}

static llmm_status cpu_reserve(void *state, const llmm_step_shape *shape) {
    cpu_state *s = state;
    if (!llmm__cpu_scratch(s, cpu_scratch_bytes(shape, llmm__threadpool_size(s->pool)))) return LLMM_ERR_NO_MEMORY;
    return reserve_rows(s, shape->max_rows);
}

const llmm_backend_ops llmm__cpu_backend = {
    .api_version = LLMM_BACKEND_API_VERSION,
    .name = "cpu",
    .kind = LLMM_BACKEND_CPU,
    .flags = 0,
    .kv_layouts = LLMM_KV_LAYOUT_HEAD_REGIONS,
    .available = cpu_available,
    .supports_type = cpu_supports_type,
    .init = cpu_init,
    .shutdown = cpu_shutdown,
    .buffer_alloc = cpu_buffer_alloc,
    .buffer_free = cpu_buffer_free,
    .upload = cpu_copy,
    .download = cpu_copy,
    .prepare_weight = cpu_prepare_weight,
    .release_weight = cpu_release_weight,
    .step_begin = cpu_step_begin,
    .step_end = cpu_step_end,
    .embed = llmm__cpu_embed,
    .rms_norm = llmm__cpu_rms_norm,
    .matmul = llmm__cpu_matmul,
    .matmul_multi = llmm__cpu_matmul_multi,
    .rope = llmm__cpu_rope,
    .glu = llmm__cpu_glu,
    .add = llmm__cpu_add,
    .add_rows = llmm__cpu_add_rows,
    .scale = llmm__cpu_scale,
    .softcap = llmm__cpu_softcap,
    .kv_write = llmm__cpu_kv_write,
    .attention = llmm__cpu_attention,
    .lora_delta = llmm__cpu_lora_delta,
    .short_conv = llmm__cpu_short_conv,
    .split_halves = llmm__cpu_split_halves,
    .gated_delta_net = llmm__cpu_gated_delta_net,
    .copy = cpu_copy,
    .scratch_bytes = cpu_working_bytes,
    .reserve = cpu_reserve,
};
