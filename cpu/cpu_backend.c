/* The CPU backend's table: host memory, the thread pool, and the op files' kernels. */
#include "cpu_backend.h"

#include <string.h>

#include "quant.h"

void *cpu_scratch(cpu_state *s, size_t bytes) {
    if (bytes <= s->scratch_bytes) return s->scratch;
    void *p = mem_alloc(s->alloc, bytes);
    if (!p) return NULL;
    mem_free(s->alloc, s->scratch);
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

void cpu_parallel_range(cpu_state *s, size_t n, size_t align, size_t min_parallel, cpu_range_fn fn, void *arg) {
    const size_t nth = (size_t)threadpool_size(s->pool);
    if (nth == 1 || n < min_parallel || n <= align) {
        fn(arg, 0, n);
        return;
    }
    const size_t per = cpu_split_items(nth, n, align);
    range_task t = {fn, arg, n, per};
    threadpool_run(s->pool, range_chunk, &t, (n + per - 1) / per);
}

static int cpu_available(void) { return 1; }

static int cpu_supports_type(uint32_t type) {
    const llmm_type_traits *t = llmm_type_get(type);
    return t && t->vec_dot && t->dequant_row;
}

static llmm_status cpu_init(const llmm_backend_config *cfg, void **out) {
    cpu_state *s = mem_calloc(cfg->alloc, 1, sizeof *s);
    if (!s) return LLMM_ERR_NO_MEMORY;
    s->alloc = cfg->alloc;
    s->pack_step_bytes = CPU_PACK_STEP_BYTES;
    s->k = cpu_kernels_select(cpu_kernels_env_cap());
    log_msg(cfg->log, LLMM_LOG_DEBUG, "cpu backend: %s kernels", s->k->name);
    int n = cfg->n_threads > 0 ? cfg->n_threads : cpu_physical_cores();
    llmm_status st = threadpool_create(n, cfg->alloc, &s->pool);
    if (st) {
        mem_free(cfg->alloc, s);
        return st;
    }
    *out = s;
    return LLMM_OK;
}

static void cpu_shutdown(void *state) {
    cpu_state *s = state;
    if (!s) return;
    threadpool_free(s->pool);
    mem_free(s->alloc, s->scratch);
    mem_free(s->alloc, s);
}

static llmm_status cpu_buffer_alloc(void *state, size_t bytes, void **out) {
    cpu_state *s = state;
    *out = mem_alloc(s->alloc, bytes);
    return *out ? LLMM_OK : LLMM_ERR_NO_MEMORY;
}

static void cpu_buffer_free(void *state, void *buffer) { mem_free(((cpu_state *)state)->alloc, buffer); }

static llmm_status cpu_copy(void *state, void *dst, const void *src, size_t bytes) {
    (void)state;
    memcpy(dst, src, bytes);
    return LLMM_OK;
}

/* One scratch buffer serves both users, never at the same time: matmul's activation
 * operands (F16/BF16 weights take doubles, 8 bytes per value; the 8-bit operands of the
 * quantized types at most 2; F32 weights use the activations as they are) and the
 * attention's per-thread scores and query vectors of up to one block of rows times one group
 * of query heads, plus LLMM_ATTN_CHUNK converted K/V head rows (ops_attention.c). */
static size_t cpu_scratch_bytes(const llmm_step_shape *shape, int n_threads) {
    const size_t threads = (size_t)(n_threads > 0 ? n_threads : cpu_physical_cores());
    const uint64_t wide = (1ull << LLMM_TYPE_F16) | (1ull << LLMM_TYPE_BF16);
    const size_t matmul = shape->max_rows * shape->max_in * (shape->weight_types & wide ? sizeof(float) : 2);
    const size_t heads = LLMM_MAX(1u, LLMM_MIN(shape->heads_per_kv, (uint32_t)LLMM_MAX_HEADS_PER_ITEM));
    const size_t rows = cpu_attn_rows_per_item(shape->max_rows, heads);
    const size_t attention =
        threads * cpu_attn_scratch_floats(rows, heads, shape->max_kv, shape->head_dim) * sizeof(float);
    return LLMM_MAX(matmul, attention);
}

/* The step's kind decides which matmuls may make packed weight copies (ops_matmul.c): a
 * decode step's, of any number of sequences; not a prompt's, not even its last-position
 * logits (a one-row matmul), so that the first token never waits for packing. */
static llmm_status cpu_step_begin(void *state, size_t n_tokens, llmm_step_kind kind) {
    cpu_state *s = state;
    (void)n_tokens;
    s->step = kind == LLMM_STEP_DECODE ? CPU_STEP_DECODE : CPU_STEP_PROMPT;
    s->pack_budget = s->pack_step_bytes;
    return LLMM_OK;
}

static llmm_status cpu_step_end(void *state) {
    ((cpu_state *)state)->step = CPU_STEP_NONE;
    return LLMM_OK;
}

static llmm_status cpu_reserve(void *state, const llmm_step_shape *shape) {
    cpu_state *s = state;
    return cpu_scratch(s, cpu_scratch_bytes(shape, threadpool_size(s->pool))) ? LLMM_OK : LLMM_ERR_NO_MEMORY;
}

const llmm_backend_ops llmm_cpu_backend = {
    .api_version = LLMM_BACKEND_API_VERSION,
    .name = "cpu",
    .kind = LLMM_BACKEND_CPU,
    .available = cpu_available,
    .supports_type = cpu_supports_type,
    .init = cpu_init,
    .shutdown = cpu_shutdown,
    .buffer_alloc = cpu_buffer_alloc,
    .buffer_free = cpu_buffer_free,
    .upload = cpu_copy,
    .download = cpu_copy,
    .embed = cpu_embed,
    .rms_norm = cpu_rms_norm,
    .matmul = cpu_matmul,
    .matmul_multi = cpu_matmul_multi,
    .rope = cpu_rope,
    .glu = cpu_glu,
    .add = cpu_add,
    .add_rows = cpu_add_rows,
    .scale = cpu_scale,
    .softcap = cpu_softcap,
    .kv_write = cpu_kv_write,
    .attention = cpu_attention,
    .copy = cpu_copy,
    .scratch_bytes = cpu_scratch_bytes,
    .reserve = cpu_reserve,
    .step_begin = cpu_step_begin,
    .step_end = cpu_step_end,
};
