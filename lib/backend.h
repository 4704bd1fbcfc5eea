/* The backend table: the one internal seam between the forward pass and the hardware.
 *
 * The forward pass (forward.c) only ever calls these slots. Pointers named "buffer" below are
 * backend memory (host memory on the CPU, device memory on a GPU) that the forward pass
 * offsets but never dereferences; ids, positions and the attention row table are host memory.
 * Optional slots may be NULL. Bump LLMM_BACKEND_API_VERSION when a slot changes. */
#ifndef LLMM_BACKEND_H
#define LLMM_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "arch.h"
#include "common.h"
#include "weights.h"

#define LLMM_BACKEND_API_VERSION 6

/* What a forward step computes, for step_begin. */
typedef enum llmm_step_kind {
    LLMM_STEP_PROMPT = 0, /* a chunk of one sequence's prompt (llmm_prefill) */
    LLMM_STEP_DECODE = 1, /* one new token for each of n_tokens sequences (llmm_decode) */
} llmm_step_kind;

typedef struct llmm_backend_config {
    int n_threads;              /* CPU worker threads; <= 0 means physical cores */
    const llmm_allocator *alloc;
    const llmm_logger *log;
} llmm_backend_config;

/* One layer's K and V rows of one sequence in the paged KV pool. Position p lives in block
 * blocks[p / block_size], slot p % block_size; the K row of K/V head h there starts at
 *     k + h * head_stride + blocks[p / block_size] * block_stride + (p % block_size) * row_bytes
 * (bytes), its V row at the same offset from v, and holds head_dim values. The attention op
 * and kv_write are the only readers. Row formats by type (enum llmm_kv_type):
 *   LLMM_KV_F32: head_dim floats;  LLMM_KV_F16: head_dim IEEE halves;
 *   LLMM_KV_Q8:  one float scale, then head_dim int8 (value = scale * q), padded to 4 bytes.
 * The KV store keeps each (layer, head)'s rows block after block (kvcache.h), so that
 * attention over one head reads a dense stream; a view may equally describe heads side by
 * side within a position (head_stride = one head row), as tests do. */
typedef struct llmm_kv_view {
    void *k;               /* buffer: the pool, offset to this layer's head-0 K rows in block 0 */
    void *v;               /* buffer: the same for V */
    const uint32_t *blocks; /* host: the sequence's block table */
    uint32_t block_size;   /* positions per block, a power of two */
    uint32_t block_shift;  /* log2(block_size) */
    size_t block_stride;   /* bytes between consecutive blocks of the pool */
    size_t head_stride;    /* bytes between the rows of consecutive K/V heads */
    size_t row_bytes;      /* bytes between consecutive positions of a block */
    uint32_t n_head_kv;    /* heads in a K (or V) vector of kv_write */
    uint32_t head_dim;     /* values per head row */
    uint32_t type;         /* enum llmm_kv_type */
} llmm_kv_view;

/* Bytes of one K (or V) head row of n values stored as type (enum llmm_kv_type); 0 for an
 * unknown type. */
static inline size_t kv_row_bytes(uint32_t type, size_t n) {
    switch (type) {
    case LLMM_KV_F32: return n * 4;
    case LLMM_KV_F16: return n * 2;
    case LLMM_KV_Q8: return 4 + (n + 3) / 4 * 4;
    }
    return 0;
}

/* Byte offset of head h's row at position p from the view's k (or v) pointer. */
static inline size_t kv_row_offset(const llmm_kv_view *view, uint32_t p, uint32_t h) {
    return h * view->head_stride + view->blocks[p >> view->block_shift] * view->block_stride +
           (p & (view->block_size - 1)) * view->row_bytes;
}

/* Attention of n_rows query rows; row r sees positions [kv_start, n_kv) of its sequence
 * (kv_start > 0 for sliding-window layers). */
typedef struct llmm_attn_row {
    llmm_kv_view kv;
    uint32_t n_kv;
    uint32_t kv_start;
} llmm_attn_row;

typedef struct llmm_attn_batch {
    const float *q;  /* buffer (n_rows, n_head * head_dim) */
    float *out;      /* buffer (n_rows, n_head * head_dim) */
    size_t n_rows;
    const llmm_attn_row *rows; /* host (n_rows) */
    uint32_t n_head, n_head_kv, head_dim;
    float scale;     /* applied to q.k before the softmax */
    float softcap;   /* > 0: scores become softcap * tanh(score / softcap) before the softmax */
} llmm_attn_batch;

/* Rotary embedding of the first n_rot values of each head. Angle of pair i at position p:
 * p * freq_scale * base^(-2i/n_rot) / freq_factors[i]; cos and sin are scaled by mscale. */
typedef struct llmm_rope_params {
    uint32_t n_rot;
    float base;
    float freq_scale;          /* 1, or 1/factor for linear scaling */
    float mscale;              /* 1, or the LongRoPE/YaRN attention factor */
    llmm_rope_kind kind;
    const float *freq_factors; /* weight memory (n_rot / 2), or NULL */
} llmm_rope_params;

/* The largest step a context will run, for scratch sizing. */
typedef struct llmm_step_shape {
    size_t max_rows;   /* rows of one forward step */
    size_t max_in;     /* widest matmul input (max of n_embd, q_dim, n_ff) */
    size_t max_kv;     /* positions one attention row may see (n_ctx) */
    uint32_t head_dim;
    uint32_t heads_per_kv; /* query heads sharing one K/V head (n_head / n_head_kv) */
    uint64_t weight_types; /* bit t set when some matmul weight has llmm_type t */
} llmm_step_shape;

typedef struct llmm_backend_ops {
    uint32_t api_version;
    const char *name;
    llmm_backend_kind kind;

    /* 1 when this backend can run here (device present). */
    int (*available)(void);
    /* 1 when matmul handles weights of this llmm_type. */
    int (*supports_type)(uint32_t type);
    llmm_status (*init)(const llmm_backend_config *cfg, void **state);
    void (*shutdown)(void *state);

    /* backend memory */
    llmm_status (*buffer_alloc)(void *state, size_t bytes, void **out);
    void (*buffer_free)(void *state, void *buffer);
    llmm_status (*upload)(void *state, void *dst_buffer, const void *src_host, size_t bytes);
    llmm_status (*download)(void *state, void *dst_host, const void *src_buffer, size_t bytes);

    /* optional: repack a weight into the backend's layout once (NULL: use the mapping). */
    llmm_status (*prepare_weight)(void *state, const llmm_tensor *host, llmm_tensor *out);
    void (*release_weight)(void *state, llmm_tensor *w);

    /* out (n, ne0) = rows ids[i] of table, as floats */
    llmm_status (*embed)(void *state, const llmm_tensor *table, const llmm_token *ids, size_t n, float *out);
    /* out = x / rms(x) * weight, per row of dim values */
    llmm_status (*rms_norm)(void *state, const float *x, const float *weight, float *out, size_t n_rows,
                            size_t dim, float eps);
    /* out (n_rows, w->ne1) = x (n_rows, w->ne0) times w transposed: y = W x per row */
    llmm_status (*matmul)(void *state, const llmm_tensor *w, const float *x, size_t n_rows, float *out);
    /* optional: matmul of n_w weights of the same input width over the same x, out[i] for
     * w[i], each output exactly as matmul gives it (Q/K/V, gate/up: one dispatch, one operand
     * conversion). NULL: the forward pass calls matmul per weight. */
    llmm_status (*matmul_multi)(void *state, const llmm_tensor *const *w, size_t n_w, const float *x,
                                size_t n_rows, float *const *out);
    /* rotate each head of each row by its position */
    llmm_status (*rope)(void *state, float *x, size_t n_rows, size_t n_heads, size_t head_dim, const int32_t *pos,
                        const llmm_rope_params *rp);
    /* gate = act(gate) * up, elementwise over n values */
    llmm_status (*glu)(void *state, float *gate, const float *up, size_t n, llmm_activation act);
    /* dst += src over n values */
    llmm_status (*add)(void *state, float *dst, const float *src, size_t n);
    /* x (n_rows, dim) += bias (dim, weight memory) for every row */
    llmm_status (*add_rows)(void *state, float *x, const float *bias, size_t n_rows, size_t dim);
    /* x *= s over n values */
    llmm_status (*scale)(void *state, float *x, size_t n, float s);
    /* x = cap * tanh(x / cap) over n values (logit soft-capping) */
    llmm_status (*softcap)(void *state, float *x, size_t n, float cap);
    /* store n_rows K and V vectors (kv_dim = n_head_kv * head_dim values each, head after
     * head) at positions pos[i] of their views, converted to the views' element type */
    llmm_status (*kv_write)(void *state, const llmm_kv_view *views, const int32_t *pos, size_t n_rows,
                            const float *k, const float *v, size_t kv_dim);
    llmm_status (*attention)(void *state, const llmm_attn_batch *batch);

    /* copy bytes between two buffers (a shared KV block being written: copy-on-write) */
    llmm_status (*copy)(void *state, void *dst_buffer, const void *src_buffer, size_t bytes);
    /* optional: working memory a step of this shape needs (n_threads <= 0: the default), and
     * reserving it now so that no step allocates */
    size_t (*scratch_bytes)(const llmm_step_shape *shape, int n_threads);
    llmm_status (*reserve)(void *state, const llmm_step_shape *shape);

    /* optional: bracket one forward step of n_tokens tokens of the given kind (a GPU backend
     * may capture it as a graph; the CPU backend makes packed weight copies in decode steps
     * only, so that a prompt's first token never waits for them) */
    llmm_status (*step_begin)(void *state, size_t n_tokens, llmm_step_kind kind);
    llmm_status (*step_end)(void *state);
} llmm_backend_ops;

/* The CPU backend, always present. */
extern const llmm_backend_ops llmm_cpu_backend;

/* The backend for a requested kind: AUTO picks the best available. NULL if none fits. */
const llmm_backend_ops *backend_select(llmm_backend_kind kind);

#endif
