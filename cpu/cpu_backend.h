/* CPU backend internals shared by its op files. */
#ifndef LLMM_CPU_BACKEND_H
#define LLMM_CPU_BACKEND_H

#include "backend/backend.h"
#include "kernel_table.h"
#include "threadpool.h"
#include "weight_copy.h"

/* The forward step in progress (between step_begin and step_end), if any. */
typedef enum cpu_step {
    CPU_STEP_NONE = 0, /* between steps: a direct call (tests) */
    CPU_STEP_PROMPT,
    CPU_STEP_DECODE,
} cpu_step;

/* One attention row for the kernels: its K/V view and the positions [kv_start, n_kv) it sees. */
typedef struct cpu_attn_row {
    llmm_kv_view kv;
    uint32_t n_kv;
    uint32_t kv_start;
} cpu_attn_row;

/* Attention of n_rows query rows, each over its own view (llmm__cpu_attend). */
typedef struct cpu_attn_batch {
    const float *q;  /* (n_rows, n_head * head_dim) */
    float *out;      /* (n_rows, n_head * head_dim) */
    size_t n_rows;
    const cpu_attn_row *rows; /* (n_rows) */
    uint32_t n_head, n_head_kv, head_dim;
    float scale;
    float softcap;
} cpu_attn_batch;

/* The model's copy slots shared by its contexts on this backend (llmm_backend_shared.data). */
typedef struct cpu_copy_set {
    size_t n;                 /* one slot per weight index */
    llmm_weight_copy slot[];
} cpu_copy_set;

typedef struct cpu_state {
    llmm_threadpool *pool;
    const llmm_allocator *alloc;
    const cpu_kernels *k; /* chosen once at init from cpuid (and LLMM_CPU_KERNELS) */
    void *scratch;        /* activations converted for the dots, attention scores */
    cpu_step step;
    llmm_step desc;       /* the step in progress (between step_begin and step_end) */
    llmm_kv_view *views;  /* (rows_cap) per step sequence: its view of the layer an op works on */
    cpu_attn_row *attn_rows; /* (rows_cap) */
    size_t rows_cap;
    cpu_weight *weights;  /* (n_weights) what prepare_weight keeps with each weight */
    size_t n_weights;
    llmm_backend_shared *shared; /* the model's share: copies, or NULL (no copies) */
    cpu_copy_set *copies;
    int own_vectors;      /* prepare_weight copies vectors out of the file mapping */
    size_t pack_step_bytes; /* CPU_PACK_STEP_BYTES (tests lower it) */
    size_t pack_budget;   /* bytes of packed weight copies the step may still make (ops/matmul.c) */
    size_t scratch_bytes;
} cpu_state;

/* Bytes of packed weight copies one forward step makes at most (a larger matrix is made alone,
 * first in its step): the making is spread over the first decode steps, a bounded share each,
 * not one stall of the whole model's worth (docs/performance.md, "Design choices behind the
 * CPU figures": packed copies). */
#define CPU_PACK_STEP_BYTES ((size_t)64 << 20)

/* Below this many multiply-adds an op runs on the calling thread alone: handing so little
 * work to other threads costs more than it saves (stories260K ran slower on 2 threads than on
 * 1 without this cut-off). */
#define CPU_PARALLEL_MIN_WORK 32768

/* A sequence's rows from which a short convolution (LFM2's, Gated DeltaNet's on q, k and v)
 * hands them to the threads: a row of the real shapes is 6k-25k multiply-adds (and for the
 * DeltaNet its SiLU and q/k norms), so a few rows pay for the hand-off; from 4 on, so that the
 * tiny test models' and the conformance cases' prompts take the threaded path as well. */
#define CPU_CONV_PARALLEL_MIN_ROWS 4

/* Chunks per thread when an op's rows are handed out dynamically: enough that a thread that
 * lost its CPU leaves little behind, few enough that claiming them costs nothing measurable. */
#define CPU_CHUNKS_PER_THREAD 4

/* Scratch of at least bytes, reused across calls. */
void *llmm__cpu_scratch(cpu_state *s, size_t bytes);

/* fn(arg, i0, i1) over pieces of [0, n): on the pool when n >= min_parallel (a prompt's worth
 * of rows or values), else once on the calling thread (a dispatch costs more than a decode
 * step's element-wise work). Pieces start at multiples of align, so a kernel that leaves the
 * last n % align values to a scalar tail treats every value as it does in one call. */
typedef void (*cpu_range_fn)(void *arg, size_t i0, size_t i1);

/* out = x rounded to bf16 (nearest even, NaN quieted) and widened back: the BF16 matmul
 * operand, bit for bit the type table's from_float (ops/matmul.c). */
void llmm__cpu_round_bf16(const float *x, float *out, size_t n);
/* dst += src, n values (not overlapping), vectorized (ops/elementwise.c). */
void llmm__cpu_add_floats(float *restrict dst, const float *restrict src, size_t n);
void llmm__cpu_parallel_range(cpu_state *s, size_t n, size_t align, size_t min_parallel, cpu_range_fn fn, void *arg);

/* Query heads one attention work item covers at most (a group of grouped-query attention is
 * split into runs of this many): bounds the per-thread score scratch. */
#define LLMM_MAX_HEADS_PER_ITEM 16
/* K/V positions attention converts and hands to the kernel table at a time: the per-thread
 * row scratch holds this many head rows. */
#define LLMM_ATTN_CHUNK 16
/* Rows from which an attention batch goes to the threads in blocks of consecutive rows (a
 * prompt's): all the block's query vectors meet each chunk of K rows in one kernel call. Below
 * it (decode, a few sequences) one row per item keeps the threads busy. */
#define LLMM_ATTN_BLOCK_MIN_ROWS 16

/* Rows per attention work item for a batch of n_rows, items of heads_per_item query heads:
 * at least 8 query vectors per block, what AVX-512's transposed score path takes. The rows x
 * heads product never falls with heads_per_item, so cpu_scratch_bytes can size the scratch
 * for the largest. */
static inline size_t cpu_attn_rows_per_item(size_t n_rows, size_t heads_per_item) {
    if (n_rows < LLMM_ATTN_BLOCK_MIN_ROWS) return 1;
    return heads_per_item >= 2 ? 4 : 8;
}

/* Per-thread attention scratch, in floats: rows x heads score rows of max_kv, as many query
 * vectors of head_dim, LLMM_ATTN_CHUNK converted K/V rows. */
static inline size_t cpu_attn_scratch_floats(size_t rows, size_t heads, size_t max_kv, size_t head_dim) {
    return rows * heads * (max_kv + head_dim) + LLMM_ATTN_CHUNK * head_dim;
}

/* About CPU_CHUNKS_PER_THREAD chunks per thread of n items, rounded up to a multiple of
 * align. */
static inline size_t cpu_split_items(size_t nth, size_t n, size_t align) {
    const size_t per = (n + nth * CPU_CHUNKS_PER_THREAD - 1) / (nth * CPU_CHUNKS_PER_THREAD);
    return (per + align - 1) / align * align;
}

/* Items per chunk for n items of work total multiply-adds: one chunk below the parallel
 * cut-off, else cpu_split_items. */
static inline size_t cpu_chunk_items(const cpu_state *s, size_t n, size_t work, size_t align) {
    const size_t nth = (size_t)llmm__threadpool_size(s->pool);
    if (nth == 1 || work < CPU_PARALLEL_MIN_WORK || n <= align) return n > 0 ? n : 1;
    return cpu_split_items(nth, n, align);
}

llmm_status llmm__cpu_matmul(void *state, const llmm_tensor *w, const float *x, size_t n_rows, float *out);
llmm_status llmm__cpu_matmul_multi(void *state, const llmm_tensor *const *w, size_t n_w, const float *x, size_t n_rows,
                             float *const *out);
llmm_status llmm__cpu_attention(void *state, uint32_t layer, const llmm_attn_batch *b);
llmm_status llmm__cpu_embed(void *state, const llmm_tensor *table, float *out);
llmm_status llmm__cpu_rms_norm(void *state, const float *x, const float *weight, float *out, size_t n_rows, size_t dim,
                         float eps);
llmm_status llmm__cpu_rope(void *state, float *x, size_t n_heads, size_t head_dim, const llmm_rope_params *rp);
llmm_status llmm__cpu_add_rows(void *state, float *x, const float *bias, size_t n_rows, size_t dim);
llmm_status llmm__cpu_scale(void *state, float *x, size_t n, float s);
llmm_status llmm__cpu_softcap(void *state, float *x, size_t n, float cap);
llmm_status llmm__cpu_glu(void *state, float *gate, const float *up, size_t n, llmm_activation act);
llmm_status llmm__cpu_add(void *state, float *dst, const float *src, size_t n);
llmm_status llmm__cpu_kv_write(void *state, uint32_t layer, const float *k, const float *v);
llmm_status llmm__cpu_short_conv(void *state, const llmm_conv_batch *b);
/* A causal convolution's input rows for one sequence's rows [r0, r1) (consecutive positions
 * from pos[r0]), in position order from pos[r0] - (kernel - 1), as the kernel table's
 * conv_rows reads them: the state's kernel - 1 rows of dim values (ending at pos[r0] - 1),
 * then the step's (rows + r * dim); NULL before position 0. window: r1 - r0 + kernel - 1. */
void llmm__cpu_conv_window(const float *rows, const float *state, size_t dim, size_t kernel, const int32_t *pos,
                           size_t r0, size_t r1, const float **window);
/* The state moved to the sequence's last row: its rows become the window's last kernel - 1 */
void llmm__cpu_conv_state_shift(float *state, size_t dim, size_t kernel, const float *const *window, size_t n_out);
llmm_status llmm__cpu_split_halves(void *state, const float *src, float *a, float *b, size_t n_groups, size_t width);
llmm_status llmm__cpu_gated_delta_net(void *state, const llmm_delta_batch *b);
/* The kernel table's attn_scores / attn_values over float rows, or without them its dot_f32 /
 * axpy per pair: scores[i * ld + j] = q_i . rows[j]; out_i += w[i * ld + j] * rows[j] for j in
 * order (ops/attention.c; the LoRA passes use them too). */
void llmm__cpu_scores_rows(const cpu_kernels *kern, const float *q, size_t nh, size_t hd, const float *const *rows,
                           size_t n, float *scores, size_t ld);
void llmm__cpu_values_rows(const cpu_kernels *kern, float *out, size_t nh, size_t hd, const float *w, size_t ld,
                           const float *const *rows, size_t n);
llmm_status llmm__cpu_lora_delta(void *state, const float *x, size_t n_in, const llmm_lora_part *parts,
                                 size_t n_parts, float *t);

/* The kernels behind the step's ops, over host arrays (the ops above resolve the step
 * descriptor into them; the kernel tests call them with views of their own). */
llmm_status llmm__cpu_attend(cpu_state *s, const cpu_attn_batch *b);
llmm_status llmm__cpu_embed_rows(const llmm_tensor *table, const llmm_token *ids, size_t n, float *out);
llmm_status llmm__cpu_rope_rows(float *x, size_t n_rows, size_t n_heads, size_t head_dim, const int32_t *pos,
                          const llmm_rope_params *rp);
/* s->views[r] = row r's view of layer `layer` in the step in progress */
void llmm__cpu_step_views(cpu_state *s, uint32_t layer);
/* store n_rows K and V vectors (kv_dim = n_head_kv * head_dim values each, head after head) at
 * positions pos[i] of their views, converted to the views' element type */
llmm_status llmm__cpu_kv_store_rows(const llmm_kv_view *views, const int32_t *pos, size_t n_rows, const float *k,
                              const float *v, size_t kv_dim);

#endif
