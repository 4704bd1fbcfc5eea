/* The handle backend: the CPU backend's memory and ops behind buffer handles that are not
 * host addresses. A GPU backend's buffers are device addresses the host cannot read; this
 * backend makes any such read fault (or fail the op, with its name logged) on a plain CPU, so
 * that the golden tests run through it prove the core only offsets buffers and hands per-row
 * inputs over in the step descriptor (backend.h).
 *
 * A handle is HANDLE_TAG in bits 48-63, an entry index in bits 32-47 and a byte offset in bits
 * 0-31. The tag makes it non-canonical on x86-64 and, even with aarch64's top byte ignored,
 * beyond a 48-bit virtual address space, so dereferencing one faults. The core's pointer
 * arithmetic (row k of the logits, a KV segment) only moves the offset, which every op checks
 * against its buffer's size. Entries are never reused, so a freed buffer's handle stays
 * invalid. */
#include "support/handle_backend.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "base/common.h"

_Static_assert(sizeof(uintptr_t) >= 8, "handles need 64-bit pointers");

#define HANDLE_TAG ((uintptr_t)0xB00Fu << 48)
#define HANDLE_TAG_MASK ((uintptr_t)0xFFFFu << 48)
#define HANDLE_MAX_ENTRIES 0xFFFFu
#define HANDLE_MAX_BYTES ((size_t)UINT32_MAX)
/* matmul_multi's weights per call: the forward pass fuses at most Q/K/V */
#define HANDLE_MAX_MULTI 8

static const char BACKEND[] = "handles backend";

typedef enum entry_kind {
    ENTRY_FREED = 0, /* also entry 0, never handed out */
    ENTRY_BUFFER,    /* buffer_alloc's: read and written by ops */
    ENTRY_WEIGHT,    /* prepare_weight's: read only (the CPU's may be a read-only file mapping) */
} entry_kind;

typedef struct handle_entry {
    uint8_t *host; /* the CPU backend's memory */
    size_t bytes;
    entry_kind kind;
} handle_entry;

/* What prepare_weight keeps per weight index: the prepared tensor's backend field points here. */
typedef struct handle_weight {
    llmm_tensor cpu; /* as the CPU's prepare_weight made it (its backend field: the CPU's record) */
    uint32_t entry;  /* the handle the core got as data */
    int live;
} handle_weight;

typedef struct handle_state {
    void *cpu; /* the CPU backend's state */
    const llmm_allocator *alloc;
    const llmm_logger *log;
    handle_entry *entries; /* (n_entries) */
    size_t n_entries, entries_cap;
    handle_weight *weights; /* (n_weights) */
    size_t n_weights;
    /* the step in progress as the CPU sees it: the layout's pool resolved to host memory */
    llmm_kv_layout kv;
    llmm_step step;
    int in_step;
    unsigned long bad;
} handle_state;

static atomic_ulong bad_total;

unsigned long handle_backend_bad_pointers(void) { return atomic_load(&bad_total); }

unsigned long handle_backend_state_bad_pointers(const void *state) {
    return state ? ((const handle_state *)state)->bad : 0;
}

/* Count and log a violation, naming the op; the op then fails with LLMM_ERR_BACKEND. */
static llmm_status violation(handle_state *s, const char *op, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static llmm_status violation(handle_state *s, const char *op, const char *fmt, ...) {
    char what[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    llmm__log_msg(s->log, LLMM_LOG_ERROR, "%s: %s: %s", BACKEND, op, what);
    s->bad++;
    atomic_fetch_add(&bad_total, 1);
    return LLMM_ERR_BACKEND;
}

static int is_handle(const void *p) { return ((uintptr_t)p & HANDLE_TAG_MASK) == HANDLE_TAG; }

static void *make_handle(uint32_t entry) { return (void *)(HANDLE_TAG | (uintptr_t)entry << 32); }

static uint32_t handle_entry_index(const void *p) { return (uint32_t)((uintptr_t)p >> 32 & 0xFFFFu); }

static size_t handle_offset(const void *p) { return (size_t)((uintptr_t)p & 0xFFFFFFFFu); }

/* Bytes of a * b floats, SIZE_MAX on overflow (then no buffer holds them). */
static size_t floats(size_t a, size_t b) {
    size_t n;
    return size_mul_ok(a, b, &n) && size_mul_ok(n, sizeof(float), &n) ? n : SIZE_MAX;
}

/* The host address behind buffer argument `arg` of `op` for an access of bytes from it; NULL
 * (a violation) unless p is a live handle of this state whose buffer holds the access, and, for
 * a write, a buffer rather than a weight. */
static void *host_of(handle_state *s, const char *op, const char *arg, const void *p, size_t bytes, int write) {
    if (!is_handle(p)) {
        violation(s, op, "%s (%p) is not a handle of this backend", arg, p);
        return NULL;
    }
    const uint32_t i = handle_entry_index(p);
    const size_t off = handle_offset(p);
    const handle_entry *e = i < s->n_entries ? &s->entries[i] : NULL;
    if (!e || e->kind == ENTRY_FREED) {
        violation(s, op, "%s (%p) is a handle never handed out or already freed", arg, p);
        return NULL;
    }
    if (off > e->bytes || bytes > e->bytes - off) {
        violation(s, op, "%s (%p) runs past the end of its buffer (%zu bytes)", arg, p, bytes);
        return NULL;
    }
    if (write && e->kind == ENTRY_WEIGHT) {
        violation(s, op, "%s (%p) is a prepared weight, which ops never write", arg, p);
        return NULL;
    }
    return e->host + off;
}

/* Host memory due (a struct, the step's arrays, the other side of upload/download): 0 (a
 * violation) when it is a handle, or NULL. */
static int host_ok(handle_state *s, const char *op, const char *arg, const void *p) {
    if (p && !is_handle(p)) return 1;
    if (p) violation(s, op, "%s (%p) is a buffer handle where host memory is due", arg, p);
    else violation(s, op, "%s is NULL", arg);
    return 0;
}

/* The CPU's tensor behind prepared weight w, or NULL (a violation) unless w is exactly what
 * prepare_weight returned for a weight not yet released. */
static const llmm_tensor *weight_of(handle_state *s, const char *op, const char *arg, const llmm_tensor *w) {
    if (!host_ok(s, op, arg, w)) return NULL;
    const uintptr_t b = (uintptr_t)w->backend, first = (uintptr_t)s->weights;
    const size_t i = (b - first) / sizeof *s->weights;
    if (b < first || i >= s->n_weights || (b - first) % sizeof *s->weights || !s->weights[i].live) {
        violation(s, op, "%s is not a weight this backend prepared (backend field %p)", arg, w->backend);
        return NULL;
    }
    const handle_weight *hw = &s->weights[i];
    if (w->data != make_handle(hw->entry) || w->type != hw->cpu.type || w->ne0 != hw->cpu.ne0 ||
        w->ne1 != hw->cpu.ne1 || w->row_bytes != hw->cpu.row_bytes) {
        violation(s, op, "%s (%p) is not the tensor prepare_weight returned (data or shape changed)", arg, w->data);
        return NULL;
    }
    return &hw->cpu;
}

/* Ops that read the step (embed, rope, kv_write, attention) run inside one. */
static int in_step(handle_state *s, const char *op) {
    if (s->in_step) return 1;
    violation(s, op, "called outside step_begin/step_end");
    return 0;
}

static int h_available(void) { return llmm__cpu_backend.available(); }

static int h_supports_type(uint32_t type) { return llmm__cpu_backend.supports_type(type); }

/* A new entry for host memory; 0 when the handle space or memory runs out. */
static uint32_t add_entry(handle_state *s, void *host, size_t bytes, entry_kind kind) {
    void *items = s->entries;
    if (s->n_entries >= HANDLE_MAX_ENTRIES || bytes > HANDLE_MAX_BYTES ||
        llmm__mem_reserve(s->alloc, &items, &s->entries_cap, s->n_entries + 1, sizeof *s->entries))
        return 0;
    s->entries = items;
    s->entries[s->n_entries] = (handle_entry){host, bytes, kind};
    return (uint32_t)s->n_entries++;
}

static llmm_status h_init(const llmm_backend_config *cfg, void **out) {
    handle_state *s = llmm__mem_calloc(cfg->alloc, 1, sizeof *s);
    if (!s) return LLMM_ERR_NO_MEMORY;
    s->alloc = cfg->alloc;
    s->log = cfg->log;
    s->n_weights = cfg->n_weights;
    s->weights = llmm__mem_calloc(cfg->alloc, cfg->n_weights + 1, sizeof *s->weights);
    if (s->weights) add_entry(s, NULL, 0, ENTRY_FREED); /* entry 0, never handed out: a bare tag is no handle */
    llmm_status st = s->n_entries == 1 ? LLMM_OK : LLMM_ERR_NO_MEMORY;
    if (!st) st = llmm__cpu_backend.init(cfg, &s->cpu);
    if (st) {
        llmm__mem_free(cfg->alloc, s->entries);
        llmm__mem_free(cfg->alloc, s->weights);
        llmm__mem_free(cfg->alloc, s);
        return st;
    }
    *out = s;
    return LLMM_OK;
}

/* What the core left behind is a leak a device backend could not recover: count it, then free it. */
static void h_shutdown(void *state) {
    handle_state *s = state;
    if (!s) return;
    for (size_t i = 0; i < s->n_weights; i++)
        if (s->weights[i].live) {
            violation(s, "shutdown", "weight %zu was never released", i);
            llmm__cpu_backend.release_weight(s->cpu, &s->weights[i].cpu);
        }
    for (size_t i = 1; i < s->n_entries; i++)
        if (s->entries[i].kind == ENTRY_BUFFER) {
            violation(s, "shutdown", "buffer %p (%zu bytes) was never freed", make_handle((uint32_t)i),
                      s->entries[i].bytes);
            llmm__cpu_backend.buffer_free(s->cpu, s->entries[i].host);
        }
    if (s->in_step) violation(s, "shutdown", "a step never ended");
    llmm__cpu_backend.shutdown(s->cpu);
    llmm__mem_free(s->alloc, s->entries);
    llmm__mem_free(s->alloc, s->weights);
    llmm__mem_free(s->alloc, s);
}

static llmm_status h_buffer_alloc(void *state, size_t bytes, void **out) {
    handle_state *s = state;
    *out = NULL;
    if (bytes > HANDLE_MAX_BYTES) {
        llmm__log_msg(s->log, LLMM_LOG_ERROR, "%s: buffer_alloc: %zu bytes exceed a handle's offset range", BACKEND, bytes);
        return LLMM_ERR_NO_MEMORY;
    }
    void *host = NULL;
    llmm_status st = llmm__cpu_backend.buffer_alloc(s->cpu, bytes, &host);
    if (st) return st;
    const uint32_t i = add_entry(s, host, bytes, ENTRY_BUFFER);
    if (!i) {
        llmm__cpu_backend.buffer_free(s->cpu, host);
        return LLMM_ERR_NO_MEMORY;
    }
    *out = make_handle(i);
    return LLMM_OK;
}

static void h_buffer_free(void *state, void *buffer) {
    handle_state *s = state;
    if (!buffer) return;
    if (!host_of(s, "buffer_free", "buffer", buffer, 0, 1)) return;
    handle_entry *e = &s->entries[handle_entry_index(buffer)];
    if (handle_offset(buffer) != 0) {
        violation(s, "buffer_free", "buffer (%p) is not the start of its buffer", buffer);
        return;
    }
    llmm__cpu_backend.buffer_free(s->cpu, e->host);
    *e = (handle_entry){0};
}

static llmm_status h_upload(void *state, void *dst_buffer, const void *src_host, size_t bytes) {
    handle_state *s = state;
    void *dst = host_of(s, "upload", "dst_buffer", dst_buffer, bytes, 1);
    if (!dst || !host_ok(s, "upload", "src_host", src_host)) return LLMM_ERR_BACKEND;
    return llmm__cpu_backend.upload(s->cpu, dst, src_host, bytes);
}

static llmm_status h_download(void *state, void *dst_host, const void *src_buffer, size_t bytes) {
    handle_state *s = state;
    const void *src = host_of(s, "download", "src_buffer", src_buffer, bytes, 0);
    if (!src || !host_ok(s, "download", "dst_host", dst_host)) return LLMM_ERR_BACKEND;
    return llmm__cpu_backend.download(s->cpu, dst_host, src, bytes);
}

static llmm_status h_copy(void *state, void *dst_buffer, const void *src_buffer, size_t bytes) {
    handle_state *s = state;
    void *dst = host_of(s, "copy", "dst_buffer", dst_buffer, bytes, 1);
    const void *src = dst ? host_of(s, "copy", "src_buffer", src_buffer, bytes, 0) : NULL;
    if (!src) return LLMM_ERR_BACKEND;
    return llmm__cpu_backend.copy(s->cpu, dst, src, bytes);
}

/* The host tensor is the model's (host memory by contract); the core gets the CPU's prepared
 * tensor with a handle for data and our record for backend. */
static llmm_status h_prepare_weight(void *state, size_t index, llmm_weight_role role, const llmm_tensor *host,
                                    llmm_tensor *out) {
    handle_state *s = state;
    if (!host_ok(s, "prepare_weight", "host", host) || !host_ok(s, "prepare_weight", "host->data", host->data) ||
        !host_ok(s, "prepare_weight", "out", out))
        return LLMM_ERR_BACKEND;
    if (index >= s->n_weights || s->weights[index].live)
        return violation(s, "prepare_weight", "index %zu is out of range or already prepared", index);
    handle_weight *hw = &s->weights[index];
    llmm_status st = llmm__cpu_backend.prepare_weight(s->cpu, index, role, host, &hw->cpu);
    if (st) return st;
    size_t bytes;
    if (!size_mul_ok(hw->cpu.row_bytes, (size_t)hw->cpu.ne1, &bytes) ||
        !(hw->entry = add_entry(s, (uint8_t *)hw->cpu.data, bytes, ENTRY_WEIGHT))) {
        llmm__cpu_backend.release_weight(s->cpu, &hw->cpu);
        return LLMM_ERR_NO_MEMORY;
    }
    hw->live = 1;
    *out = hw->cpu;
    out->data = make_handle(hw->entry);
    out->backend = hw;
    return LLMM_OK;
}

static void h_release_weight(void *state, llmm_tensor *w) {
    handle_state *s = state;
    if (!weight_of(s, "release_weight", "w", w)) return;
    handle_weight *hw = w->backend;
    llmm__cpu_backend.release_weight(s->cpu, &hw->cpu);
    s->entries[hw->entry] = (handle_entry){0};
    *hw = (handle_weight){0};
    w->backend = NULL;
}

/* Every host array of the descriptor must be host memory; only the pool is a buffer. */
static int step_arrays_ok(handle_state *s, const llmm_step *d) {
    if (!host_ok(s, "step_begin", "step->tokens", d->tokens) || !host_ok(s, "step_begin", "step->pos", d->pos) ||
        !host_ok(s, "step_begin", "step->row_seq", d->row_seq) ||
        !host_ok(s, "step_begin", "step->seq_ids", d->seq_ids) ||
        !host_ok(s, "step_begin", "step->block_tables", d->block_tables) ||
        !host_ok(s, "step_begin", "step->n_blocks", d->n_blocks) || !host_ok(s, "step_begin", "step->kv", d->kv))
        return 0;
    for (uint32_t q = 0; q < d->n_seqs; q++)
        if (!host_ok(s, "step_begin", "step->block_tables[q]", d->block_tables[q])) return 0;
    return 1;
}

static llmm_status h_step_begin(void *state, const llmm_step *step) {
    handle_state *s = state;
    if (s->in_step) return violation(s, "step_begin", "the previous step never ended");
    if (!host_ok(s, "step_begin", "step", step) || !step_arrays_ok(s, step)) return LLMM_ERR_BACKEND;
    const llmm_kv_layout *kv = step->kv;
    const size_t pool_bytes = 2 * (size_t)kv->n_layer * kv->n_head_kv * kv->head_stride;
    void *pool = host_of(s, "step_begin", "step->kv->pool", kv->pool, pool_bytes, 1);
    if (!pool) return LLMM_ERR_BACKEND;
    if (handle_offset(kv->pool) != 0)
        return violation(s, "step_begin", "step->kv->pool (%p) is not the start of its buffer", kv->pool);
    s->kv = *kv;
    s->kv.pool = pool;
    s->step = *step;
    s->step.kv = &s->kv;
    llmm_status st = llmm__cpu_backend.step_begin(s->cpu, &s->step);
    if (!st) s->in_step = 1;
    return st;
}

static llmm_status h_step_end(void *state) {
    handle_state *s = state;
    if (!s->in_step) return violation(s, "step_end", "no step to end");
    s->in_step = 0;
    return llmm__cpu_backend.step_end(s->cpu);
}

static llmm_status h_embed(void *state, const llmm_tensor *table, float *out) {
    handle_state *s = state;
    if (!in_step(s, "embed")) return LLMM_ERR_BACKEND;
    const llmm_tensor *t = weight_of(s, "embed", "table", table);
    float *o = t ? host_of(s, "embed", "out", out, floats(s->step.n_rows, (size_t)t->ne0), 1) : NULL;
    if (!o) return LLMM_ERR_BACKEND;
    return llmm__cpu_backend.embed(s->cpu, t, o);
}

static llmm_status h_rms_norm(void *state, const float *x, const float *weight, float *out, size_t n_rows,
                              size_t dim, float eps) {
    handle_state *s = state;
    const size_t bytes = floats(n_rows, dim);
    const float *hx = host_of(s, "rms_norm", "x", x, bytes, 0);
    const float *hw = hx ? host_of(s, "rms_norm", "weight", weight, floats(1, dim), 0) : NULL;
    float *ho = hw ? host_of(s, "rms_norm", "out", out, bytes, 1) : NULL;
    if (!ho) return LLMM_ERR_BACKEND;
    return llmm__cpu_backend.rms_norm(s->cpu, hx, hw, ho, n_rows, dim, eps);
}

static llmm_status h_matmul(void *state, const llmm_tensor *w, const float *x, size_t n_rows, float *out) {
    handle_state *s = state;
    const llmm_tensor *t = weight_of(s, "matmul", "w", w);
    const float *hx = t ? host_of(s, "matmul", "x", x, floats(n_rows, (size_t)t->ne0), 0) : NULL;
    float *ho = hx ? host_of(s, "matmul", "out", out, floats(n_rows, (size_t)t->ne1), 1) : NULL;
    if (!ho) return LLMM_ERR_BACKEND;
    return llmm__cpu_backend.matmul(s->cpu, t, hx, n_rows, ho);
}

static llmm_status h_matmul_multi(void *state, const llmm_tensor *const *w, size_t n_w, const float *x,
                                  size_t n_rows, float *const *out) {
    handle_state *s = state;
    if (!host_ok(s, "matmul_multi", "w", w) || !host_ok(s, "matmul_multi", "out", out)) return LLMM_ERR_BACKEND;
    if (n_w == 0 || n_w > HANDLE_MAX_MULTI) {
        llmm__log_msg(s->log, LLMM_LOG_ERROR, "%s: matmul_multi: %zu weights (1..%d handled)", BACKEND, n_w,
                HANDLE_MAX_MULTI);
        return LLMM_ERR_INVALID_ARG;
    }
    const llmm_tensor *tw[HANDLE_MAX_MULTI];
    float *to[HANDLE_MAX_MULTI];
    for (size_t i = 0; i < n_w; i++) {
        if (!(tw[i] = weight_of(s, "matmul_multi", "w[i]", w[i]))) return LLMM_ERR_BACKEND;
        if (!(to[i] = host_of(s, "matmul_multi", "out[i]", out[i], floats(n_rows, (size_t)tw[i]->ne1), 1)))
            return LLMM_ERR_BACKEND;
    }
    const float *hx = host_of(s, "matmul_multi", "x", x, floats(n_rows, (size_t)tw[0]->ne0), 0);
    if (!hx) return LLMM_ERR_BACKEND;
    return llmm__cpu_backend.matmul_multi(s->cpu, tw, n_w, hx, n_rows, to);
}

static llmm_status h_rope(void *state, float *x, size_t n_heads, size_t head_dim, const llmm_rope_params *rp) {
    handle_state *s = state;
    if (!in_step(s, "rope") || !host_ok(s, "rope", "rp", rp)) return LLMM_ERR_BACKEND;
    float *hx = host_of(s, "rope", "x", x, floats(s->step.n_rows, n_heads * head_dim), 1);
    if (!hx) return LLMM_ERR_BACKEND;
    llmm_rope_params p = *rp;
    if (rp->freq_factors &&
        !(p.freq_factors = host_of(s, "rope", "rp->freq_factors", rp->freq_factors, floats(1, rp->n_rot / 2), 0)))
        return LLMM_ERR_BACKEND;
    return llmm__cpu_backend.rope(s->cpu, hx, n_heads, head_dim, &p);
}

static llmm_status h_glu(void *state, float *gate, const float *up, size_t n, llmm_activation act) {
    handle_state *s = state;
    float *hg = host_of(s, "glu", "gate", gate, floats(1, n), 1);
    const float *hu = hg ? host_of(s, "glu", "up", up, floats(1, n), 0) : NULL;
    if (!hu) return LLMM_ERR_BACKEND;
    return llmm__cpu_backend.glu(s->cpu, hg, hu, n, act);
}

static llmm_status h_add(void *state, float *dst, const float *src, size_t n) {
    handle_state *s = state;
    float *hd = host_of(s, "add", "dst", dst, floats(1, n), 1);
    const float *hs = hd ? host_of(s, "add", "src", src, floats(1, n), 0) : NULL;
    if (!hs) return LLMM_ERR_BACKEND;
    return llmm__cpu_backend.add(s->cpu, hd, hs, n);
}

static llmm_status h_add_rows(void *state, float *x, const float *bias, size_t n_rows, size_t dim) {
    handle_state *s = state;
    float *hx = host_of(s, "add_rows", "x", x, floats(n_rows, dim), 1);
    const float *hb = hx ? host_of(s, "add_rows", "bias", bias, floats(1, dim), 0) : NULL;
    if (!hb) return LLMM_ERR_BACKEND;
    return llmm__cpu_backend.add_rows(s->cpu, hx, hb, n_rows, dim);
}

static llmm_status h_scale(void *state, float *x, size_t n, float v) {
    handle_state *s = state;
    float *hx = host_of(s, "scale", "x", x, floats(1, n), 1);
    if (!hx) return LLMM_ERR_BACKEND;
    return llmm__cpu_backend.scale(s->cpu, hx, n, v);
}

static llmm_status h_softcap(void *state, float *x, size_t n, float cap) {
    handle_state *s = state;
    float *hx = host_of(s, "softcap", "x", x, floats(1, n), 1);
    if (!hx) return LLMM_ERR_BACKEND;
    return llmm__cpu_backend.softcap(s->cpu, hx, n, cap);
}

static llmm_status h_kv_write(void *state, uint32_t layer, const float *k, const float *v) {
    handle_state *s = state;
    if (!in_step(s, "kv_write")) return LLMM_ERR_BACKEND;
    const size_t bytes = floats(s->step.n_rows, (size_t)s->kv.n_head_kv * s->kv.head_dim);
    const float *hk = host_of(s, "kv_write", "k", k, bytes, 0);
    const float *hv = hk ? host_of(s, "kv_write", "v", v, bytes, 0) : NULL;
    if (!hv) return LLMM_ERR_BACKEND;
    return llmm__cpu_backend.kv_write(s->cpu, layer, hk, hv);
}

static llmm_status h_attention(void *state, uint32_t layer, const llmm_attn_batch *batch) {
    handle_state *s = state;
    if (!in_step(s, "attention") || !host_ok(s, "attention", "batch", batch)) return LLMM_ERR_BACKEND;
    llmm_attn_batch b = *batch;
    const size_t bytes = floats(b.n_rows, (size_t)b.n_head * b.head_dim);
    if (!(b.q = host_of(s, "attention", "batch->q", batch->q, bytes, 0)) ||
        !(b.out = host_of(s, "attention", "batch->out", batch->out, bytes, 1)))
        return LLMM_ERR_BACKEND;
    return llmm__cpu_backend.attention(s->cpu, layer, &b);
}

static size_t h_scratch_bytes(const llmm_step_shape *shape, int n_threads) {
    return llmm__cpu_backend.scratch_bytes(shape, n_threads);
}

static llmm_status h_reserve(void *state, const llmm_step_shape *shape) {
    handle_state *s = state;
    if (!host_ok(s, "reserve", "shape", shape)) return LLMM_ERR_BACKEND;
    return llmm__cpu_backend.reserve(s->cpu, shape);
}

/* Kind CPU: the core keys the model's per-backend share (packed weight copies) by kind, and the
 * memory underneath is the CPU backend's. DEVICE_MEMORY: the core must treat buffers as memory
 * it cannot touch. */
static const llmm_backend_ops handle_backend = {
    .api_version = LLMM_BACKEND_API_VERSION,
    .name = "handles",
    .kind = LLMM_BACKEND_CPU,
    .flags = LLMM_BACKEND_DEVICE_MEMORY,
    .kv_layouts = LLMM_KV_LAYOUT_HEAD_REGIONS,
    .available = h_available,
    .supports_type = h_supports_type,
    .init = h_init,
    .shutdown = h_shutdown,
    .buffer_alloc = h_buffer_alloc,
    .buffer_free = h_buffer_free,
    .upload = h_upload,
    .download = h_download,
    .prepare_weight = h_prepare_weight,
    .release_weight = h_release_weight,
    .step_begin = h_step_begin,
    .step_end = h_step_end,
    .embed = h_embed,
    .rms_norm = h_rms_norm,
    .matmul = h_matmul,
    .matmul_multi = h_matmul_multi,
    .rope = h_rope,
    .glu = h_glu,
    .add = h_add,
    .add_rows = h_add_rows,
    .scale = h_scale,
    .softcap = h_softcap,
    .kv_write = h_kv_write,
    .attention = h_attention,
    .copy = h_copy,
    .scratch_bytes = h_scratch_bytes,
    .reserve = h_reserve,
};

const llmm_backend_ops *handle_backend_ops(void) { return &handle_backend; }
