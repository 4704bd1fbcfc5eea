/* The backend table: the one internal seam between the forward pass and the hardware.
 *
 * The forward pass (forward.c) only ever calls these slots, in the order docs/backends.md
 * gives. Three kinds of memory cross the seam:
 *  - buffers: backend memory (host memory on the CPU, device memory on a GPU) from
 *    buffer_alloc or prepare_weight, which the core offsets but never dereferences;
 *  - the step descriptor (llmm_step): host arrays the backend reads at step_begin and keeps
 *    until step_end (token ids, positions, sequences, block tables);
 *  - small host structs passed by pointer to one call (shapes, scalars, parameters).
 * Nothing else: per-layer ops take a layer index, never a host array.
 * Optional slots may be NULL. Bump LLMM_BACKEND_API_VERSION when a slot changes; the core
 * refuses a table of another version (llmm__backend_select, llmm__backend_module_open). */
#ifndef LLMM_BACKEND_H
#define LLMM_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "tensor.h"

#define LLMM_BACKEND_API_VERSION 13

/* llmm_backend_ops.flags */
#define LLMM_BACKEND_DEVICE_MEMORY (1u << 0) /* buffers live in device memory, not the host's */

/* KV pool layouts (llmm_backend_ops.kv_layouts, llmm_kv_layout.layout). The core owns the
 * layout; a backend names those it accepts, so a GPU backend can later ask for its own. */
#define LLMM_KV_LAYOUT_HEAD_REGIONS (1u << 0) /* kvcache.h: ({K, V}, layer, head) regions of blocks */

/* What a forward step computes. */
typedef enum llmm_step_kind {
    LLMM_STEP_PROMPT = 0, /* a chunk of one sequence's prompt (llmm_prefill) */
    LLMM_STEP_DECODE = 1, /* one new token for each of n_rows sequences (llmm_decode) */
} llmm_step_kind;

typedef struct llmm_backend_config {
    int n_threads;              /* CPU worker threads; <= 0 means physical cores */
    const llmm_allocator *alloc;
    const llmm_logger *log;
    size_t n_weights;           /* prepare_weight indices are 0 .. n_weights - 1 */
    llmm_backend_shared *shared; /* this model's share for this backend kind */
    int weights_mapped;         /* the host weights are a read-only file mapping */
    int repack_weights;         /* llmm_model_params.repack_weights */
    int device;                 /* llmm_context_params.device: the accelerator to run on */
} llmm_backend_config;

/* A backend's counters for llmm_context_get_stats (the optional stats slot). */
typedef struct llmm_backend_stats {
    double graph_capture_ms; /* capturing steps as graphs, all so far */
    uint32_t graphs;         /* graphs held now */
    uint64_t graph_replays;  /* steps run by replaying one */
} llmm_backend_stats;

/* The KV pool as the core lays it out (kvcache.h), handed to the backend in each step
 * descriptor; n_layer counts the layers with K/V (the attention layers of a hybrid model).
 * Position p of a sequence lives in block blocks[p / block_size], slot
 * p % block_size; the K row of layer l, K/V head h there starts at
 *     pool + ((0 * n_layer + l) * n_head_kv + h) * head_stride + block * block_stride + slot * row_bytes
 * (bytes), its V row at the same offset with 1 in place of 0, and holds head_dim values. Row
 * formats by type (enum llmm_kv_type):
 *   LLMM_KV_F32: head_dim floats;  LLMM_KV_F16: head_dim IEEE halves;
 *   LLMM_KV_Q8:  one float scale, then head_dim int8 (value = scale * q), padded to 4 bytes. */
typedef struct llmm_kv_layout {
    uint32_t layout;       /* LLMM_KV_LAYOUT_HEAD_REGIONS */
    void *pool;            /* buffer: the whole pool */
    uint32_t n_layer, n_head_kv, head_dim;
    uint32_t type;         /* enum llmm_kv_type */
    uint32_t block_size;   /* positions per block, a power of two */
    uint32_t block_shift;  /* log2(block_size) */
    uint32_t n_blocks;     /* blocks in the pool: every block id is below it */
    size_t row_bytes;      /* bytes between consecutive positions of a block */
    size_t block_stride;   /* bytes between consecutive blocks of one (K or V, layer, head) */
    size_t head_stride;    /* bytes between the regions of consecutive heads */
} llmm_kv_layout;

/* One layer's K and V rows of one sequence: a layout, a layer and a block table resolved for
 * a backend's kernels (the core passes layouts and block tables, not views). The K row of head
 * h at position p starts at k + kv_row_offset(view, p, h), its V row as far from v. The CPU's
 * kernels also read views that lay heads side by side within a position (head_stride = one
 * head row), as its kernel tests build them. */
typedef struct llmm_kv_view {
    void *k;                /* buffer: this layer's head-0 K rows in block 0 */
    void *v;                /* buffer: the same for V */
    const uint32_t *blocks; /* host: the sequence's block table */
    uint32_t block_size;
    uint32_t block_shift;
    size_t block_stride;
    size_t head_stride;
    size_t row_bytes;
    uint32_t n_head_kv;
    uint32_t head_dim;
    uint32_t type;
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

/* The view of layer `layer` of a sequence whose block table is blocks. */
static inline llmm_kv_view kv_layout_view(const llmm_kv_layout *kv, uint32_t layer, const uint32_t *blocks) {
    const size_t layer_bytes = (size_t)kv->n_head_kv * kv->head_stride;
    uint8_t *pool = (uint8_t *)kv->pool;
    return (llmm_kv_view){
        .k = pool + (size_t)layer * layer_bytes,
        .v = pool + ((size_t)kv->n_layer + layer) * layer_bytes,
        .blocks = blocks,
        .block_size = kv->block_size,
        .block_shift = kv->block_shift,
        .block_stride = kv->block_stride,
        .head_stride = kv->head_stride,
        .row_bytes = kv->row_bytes,
        .n_head_kv = kv->n_head_kv,
        .head_dim = kv->head_dim,
        .type = kv->type,
    };
}

/* Byte offset of head h's row at position p from the view's k (or v) pointer. */
static inline size_t kv_row_offset(const llmm_kv_view *view, uint32_t p, uint32_t h) {
    return h * view->head_stride + view->blocks[p >> view->block_shift] * view->block_stride +
           (p & (view->block_size - 1)) * view->row_bytes;
}

/* One forward step's per-row inputs, handed to the backend once at step_begin (a GPU backend
 * uploads them in one copy) and valid until step_end. Row i is token tokens[i] at position
 * pos[i] of the step's sequence row_seq[i]; sequence s has the block table block_tables[s]
 * (n_blocks[s] entries, covering every position of its rows). A prompt step has one sequence,
 * a decode step one per row. */
typedef struct llmm_step {
    llmm_step_kind kind;
    size_t n_rows;
    const llmm_token *tokens;            /* host (n_rows) */
    const int32_t *pos;                  /* host (n_rows) */
    const uint32_t *row_seq;             /* host (n_rows): index into the step's sequences */
    uint32_t n_seqs;
    const llmm_seq_id *seq_ids;          /* host (n_seqs): the context's ids of the sequences */
    const uint32_t *const *block_tables; /* host (n_seqs) */
    const uint32_t *n_blocks;            /* host (n_seqs) */
    const llmm_kv_layout *kv;            /* the context's KV pool */
    int warmup;                          /* a dummy step of llmm_context_warmup: do all one-time
                                            work now (the CPU's packed copies), unbounded */
    /* LoRA on a backend with a table of resident adapters (lora_table_set): row r's use u of
     * an adapter is lora_entry[r * lora_uses + u], an entry of the table or LLMM_LORA_NO_ENTRY,
     * at the user scale lora_scale[r * lora_uses + u]; uses in the order the row's sequence
     * lists its adapters. lora_uses is 0 when the context has no resident adapter (the arrays
     * are then NULL); it only grows in a context, so a step's shape does not follow it. */
    uint32_t lora_uses;
    const uint32_t *lora_entry;          /* host (n_rows * lora_uses) */
    const float *lora_scale;             /* host (n_rows * lora_uses) */
} llmm_step;

/* Attention of the step's rows in one layer: row r's query heads see positions
 * [kv_start, pos[r] + 1) of its sequence, kv_start = pos[r] + 1 - window when a window (> 0)
 * is smaller than that, else 0. */
typedef struct llmm_attn_batch {
    const float *q;  /* buffer (n_rows, n_head * head_dim) */
    float *out;      /* buffer (n_rows, n_head * head_dim) */
    size_t n_rows;   /* the step's rows */
    uint32_t n_head, n_head_kv, head_dim;
    uint32_t window; /* sliding-window layers: the positions a row sees; 0: all */
    float scale;     /* applied to q.k before the softmax */
    float softcap;   /* > 0: scores become softcap * tanh(score / softcap) before the softmax */
} llmm_attn_batch;

/* A gated short convolution (LFM2) of the step's rows in one recurrent layer. Row r, the
 * token at position p of its sequence, has u_p = B * X (elementwise) from its bcx row, and its
 * out row is C * y_p, where y_p[c] = sum over j < kernel of taps[c * kernel + j] * u_{p-kernel+1+j}[c]
 * and u before position 0 is zero. The u of positions before a sequence's first row in the
 * step come from its state, (kernel - 1) rows of dim floats at states + seq_id * seq_stride,
 * oldest first, ending at that first row's position - 1 (rows of positions below 0 are never
 * read); after the call the state holds the sequence's kernel - 1 latest u. A sequence's rows
 * are consecutive and in position order (llmm_step). */
typedef struct llmm_conv_batch {
    const float *bcx;  /* buffer (n_rows, 3 * dim): B, C, X */
    float *out;        /* buffer (n_rows, dim) */
    const float *taps; /* prepared vector (dim rows of kernel taps) */
    float *states;     /* buffer: this layer's state of sequence id 0 */
    size_t seq_stride; /* floats from one sequence id's state to the next */
    size_t n_rows;
    uint32_t dim, kernel;
} llmm_conv_batch;

/* A Gated DeltaNet mixer (qwen35) over the step's rows in one recurrent layer, rows of a
 * sequence consecutive and in position order (llmm_step). Per row: the qkv channels (conv_dim
 * = 2 * n_k_heads * head_dim + n_v_heads * head_dim: queries, keys, values) go through a
 * depthwise causal convolution over positions (taps as llmm_conv_batch's, the inputs before
 * position 0 zero) and SiLU; each query and key head is divided by max(its L2 norm, eps); then
 * for each value head j, reading query/key head j % n_k_heads, with beta = sigmoid(beta_raw[j])
 * and g = softplus(alpha_raw[j] + dt_bias[j]) * a[j] (softplus(x) = x above 20), the head's
 * state matrix S (head_dim x head_dim, S[i][v]: key dim i, value dim v) becomes
 *     S = exp(g) S;  d = beta (v - S^T k);  S = S + k d^T;  o = S^T q / sqrt(head_dim),
 * and out = rms_norm(o, eps) * norm * silu(z) for the head's head_dim values. The state of
 * sequence id s is at states + s * seq_stride: the convolution's last kernel - 1 input rows
 * (conv_dim floats each, oldest first, positions before 0 never read), then the n_v_heads
 * matrices, row-major by key dim, which are zero for a sequence whose first row in the call is
 * at position 0 (the slot's content is then ignored); the call leaves the state at the
 * sequence's last row. */
#define LLMM_MAX_SSM_HEAD 256 /* the largest head_dim of a llmm_delta_batch */
/* A backend's rows per chunk when it runs a sequence's several rows in a call through the
 * chunked form of the delta rule (its rounding differs from the recurrence's): one value for
 * the CPU and CUDA, so that their results on a prompt differ only by their transcendentals. */
#define LLMM_DELTA_CHUNK 16
typedef struct llmm_delta_batch {
    const float *qkv;       /* buffer (n_rows, conv_dim) before the convolution */
    float *work;            /* buffer (n_rows, conv_dim): the backend's scratch */
    const float *z;         /* buffer (n_rows, n_v_heads * head_dim) */
    const float *beta_raw;  /* buffer (n_rows, n_v_heads) */
    const float *alpha_raw; /* buffer (n_rows, n_v_heads) */
    const float *taps;      /* prepared vector (conv_dim rows of kernel taps) */
    const float *dt_bias, *a; /* prepared vectors (n_v_heads) */
    const float *norm;      /* prepared vector (head_dim) */
    float *out;             /* buffer (n_rows, n_v_heads * head_dim) */
    float *states;          /* buffer: this layer's state of sequence id 0 */
    size_t seq_stride;      /* floats from one sequence id's state to the next */
    size_t n_rows;
    uint32_t n_k_heads, n_v_heads, head_dim, kernel;
    float eps;
} llmm_delta_batch;

/* Rotary embedding of the first n_rot values of each head. Angle of pair i at position p:
 * p * freq_scale * base^(-2i/n_rot) / freq_factors[i]; cos and sin are scaled by mscale. */
typedef struct llmm_rope_params {
    uint32_t n_rot;
    float base;
    float freq_scale;          /* 1, or 1/factor for linear scaling */
    float mscale;              /* 1, or the LongRoPE/YaRN attention factor */
    llmm_rope_kind kind;
    const float *freq_factors; /* buffer: a prepared vector (n_rot / 2), or NULL */
} llmm_rope_params;

/* The largest step a context will run, for scratch sizing. */
typedef struct llmm_step_shape {
    size_t max_rows;   /* rows of one forward step */
    size_t max_in;     /* widest matmul input (max of n_embd, q_dim, n_ff) */
    size_t max_kv;     /* positions one attention row may see (n_ctx) */
    uint32_t head_dim;
    uint32_t heads_per_kv; /* query heads sharing one K/V head (n_head / n_head_kv) */
    uint64_t weight_types; /* bit t set when some matmul weight has llmm_type t */
    size_t n_weights;      /* weights the context prepares (a backend's per-weight state) */
    uint32_t n_head;       /* query heads (0: unknown; at most max_in / head_dim) */
} llmm_step_shape;

/* One row's sampling as data: what llmm_sample would do with that row's logits, prepared by the
 * core from an llmm_sampler (lib/sampling/sampler.h llmm__sampler_request), for a backend that samples where the
 * logits are (the optional sample slot). A backend reproduces lib/sampling/sampler.c step for step:
 * logits sanitized (NaN -> -inf, +inf -> FLT_MAX), penalties, then greedy argmax (lowest id on
 * ties) when temperature <= 0, else top-k, top-p, min-p and a draw of `uniform` over
 * exp((logit - max) / temperature) of the candidates left. */
typedef struct llmm_sample_request {
    float temperature; /* <= 0: greedy, and uniform is unused */
    int32_t top_k;     /* 0: off */
    float top_p;       /* 1: off */
    float min_p;       /* 0: off */
    float repeat_penalty, frequency_penalty, presence_penalty;
    uint32_t n_penalized;     /* distinct tokens of the penalty window; 0 when penalties are off */
    const int32_t *penalized; /* host (n_penalized): those tokens, ascending */
    const uint32_t *counts;   /* host (n_penalized): how often each is in the window */
    double uniform;           /* the sampler's draw in [0, 1) */
} llmm_sample_request;

/* B transposed, as lora_delta reads it: panels of LLMM_LORA_PANEL output columns, panel p
 * (columns [p P, p P + w), w = P or what the last panel has left) holding rank rows of w values,
 * row after row, from element p P rank on. So the expansion of a block of columns streams one
 * contiguous stretch instead of rank rows n_out apart. */
#define LLMM_LORA_PANEL 64

/* One adapter's rows in a low-rank delta (llmm_backend_ops.lora_delta). The tensors are host
 * memory the core prepared at adapter load (adapter.h), not prepared weights. */
typedef struct llmm_lora_group {
    const llmm_tensor *a;  /* A: rank (ne1) rows of n_in (ne0) values, F32 or F16 */
    const llmm_tensor *bt; /* B transposed (ne0 = n_out, ne1 = rank), F32 or F16, in panels */
    const uint32_t *rows;  /* (count) rows of x and of the part's out, ascending */
    const float *scales;   /* (count) each row's multiplier of B (A x) */
    size_t count;
} llmm_lora_group;

/* The groups adding to one matmul output (the Q, K and V of a layer are three parts of one
 * call: they share x). */
typedef struct llmm_lora_part {
    float *out; /* (rows, n_out) */
    size_t n_out;
    const llmm_lora_group *groups;
    size_t n_groups;
} llmm_lora_part;

/* The table of resident adapters (llmm_backend_ops.lora_table_*): the per-row alternative to
 * lora_delta's groups, for a backend that runs steps as graphs. An adapter made resident gets an
 * entry of the table (0 .. capacity - 1) holding, per adaptable weight slot, its operands; a
 * step names each row's entries in its descriptor (llmm_step.lora_entry), so the launches of a
 * step depend on its rows only, never on which adapter each row runs with. */
#define LLMM_LORA_NO_ENTRY UINT32_MAX
/* Adapters one row runs with at most (the core's LLMM__MAX_SEQ_ADAPTERS). */
#define LLMM_LORA_MAX_USES 8

/* One adapter's operands of one weight slot, as lora_delta's groups hold them. */
typedef struct llmm_lora_operands {
    const llmm_tensor *a;  /* A: rank rows of n_in values, F32 or F16; NULL: the slot is not adapted */
    const llmm_tensor *bt; /* B transposed (ne0 = n_out, ne1 = rank), F32 or F16, in panels */
    float alpha;           /* a row's multiplier is scale * alpha / rank, or its scale when alpha is 0 */
} llmm_lora_operands;

/* One output of a lora_rows call: the weight slot whose deltas are added, and where. */
typedef struct llmm_lora_slot_part {
    uint32_t slot; /* 0 .. n_slots - 1 of lora_table_reserve */
    float *out;    /* buffer (rows, n_out) */
    size_t n_out;
} llmm_lora_slot_part;

typedef struct llmm_backend_ops {
    uint32_t api_version; /* LLMM_BACKEND_API_VERSION of the table's build */
    const char *name;
    llmm_backend_kind kind;
    uint32_t flags;      /* LLMM_BACKEND_* */
    uint32_t kv_layouts; /* LLMM_KV_LAYOUT_* bits that kv_write and attention accept */

    /* 1 when this backend can run here (device present). */
    int (*available)(void);
    /* 1 when this backend can prepare weights of this llmm_type for matmul and embed. */
    int (*supports_type)(uint32_t type);
    llmm_status (*init)(const llmm_backend_config *cfg, void **state);
    void (*shutdown)(void *state);

    /* backend memory */
    llmm_status (*buffer_alloc)(void *state, size_t bytes, void **out);
    void (*buffer_free)(void *state, void *buffer);
    llmm_status (*upload)(void *state, void *dst_buffer, const void *src_host, size_t bytes);
    llmm_status (*download)(void *state, void *dst_host, const void *src_buffer, size_t bytes);

    /* The weight with this index (0 .. cfg->n_weights - 1), in host memory as the file holds
     * it, made the backend's: out gets the same type and shape, data a buffer in the
     * backend's layout (the CPU's: the mapping itself), backend whatever the backend keeps
     * with it. Called once per weight at context creation; every weight prepared is released
     * by release_weight before shutdown. */
    llmm_status (*prepare_weight)(void *state, size_t index, llmm_weight_role role, const llmm_tensor *host,
                                  llmm_tensor *out);
    void (*release_weight)(void *state, llmm_tensor *w);

    /* Bracket one forward step: every op between them belongs to it. The core calls step_end
     * after every step_begin that succeeded, also when an op failed or the step was aborted
     * (a GPU backend may capture the step as a graph; the CPU backend makes packed weight
     * copies in decode steps only, so that a prompt's first token never waits for them). */
    llmm_status (*step_begin)(void *state, const llmm_step *step);
    llmm_status (*step_end)(void *state);

    /* out (n_rows, ne0) = the rows of table (a prepared weight) of the step's tokens, as
     * floats */
    llmm_status (*embed)(void *state, const llmm_tensor *table, float *out);
    /* out = x / rms(x) * weight, per row of dim values (weight: a prepared vector) */
    llmm_status (*rms_norm)(void *state, const float *x, const float *weight, float *out, size_t n_rows,
                            size_t dim, float eps);
    /* out (n_rows, w->ne1) = x (n_rows, w->ne0) times w transposed: y = W x per row */
    llmm_status (*matmul)(void *state, const llmm_tensor *w, const float *x, size_t n_rows, float *out);
    /* optional: matmul of n_w weights of the same input width over the same x, out[i] for
     * w[i], each output exactly as matmul gives it (Q/K/V, gate/up: one dispatch, one operand
     * conversion). NULL: the forward pass calls matmul per weight. */
    llmm_status (*matmul_multi)(void *state, const llmm_tensor *const *w, size_t n_w, const float *x,
                                size_t n_rows, float *const *out);
    /* rotate each head of the step's rows, (n_rows, n_heads * head_dim), by its row's position */
    llmm_status (*rope)(void *state, float *x, size_t n_heads, size_t head_dim, const llmm_rope_params *rp);
    /* gate = act(gate) * up, elementwise over n values */
    llmm_status (*glu)(void *state, float *gate, const float *up, size_t n, llmm_activation act);
    /* dst += src over n values */
    llmm_status (*add)(void *state, float *dst, const float *src, size_t n);
    /* x (n_rows, dim) += bias (dim, a prepared vector) for every row */
    llmm_status (*add_rows)(void *state, float *x, const float *bias, size_t n_rows, size_t dim);
    /* x *= s over n values */
    llmm_status (*scale)(void *state, float *x, size_t n, float s);
    /* x = cap * tanh(x / cap) over n values (logit soft-capping) */
    llmm_status (*softcap)(void *state, float *x, size_t n, float cap);
    /* store the step's K and V rows (n_rows, n_head_kv * head_dim, head after head) in the
     * pool's layer `layer` (an attention layer's place among the attention layers, the pool
     * having none for recurrent ones) at their rows' positions, in the pool's element type */
    llmm_status (*kv_write)(void *state, uint32_t layer, const float *k, const float *v);
    /* attention of the step's rows over the pool's layer `layer` (as kv_write's) of their
     * sequences */
    llmm_status (*attention)(void *state, uint32_t layer, const llmm_attn_batch *batch);

    /* copy bytes between two buffers (a shared KV block being written: copy-on-write) */
    llmm_status (*copy)(void *state, void *dst_buffer, const void *src_buffer, size_t bytes);
    /* optional: working memory a step of this shape needs (n_threads <= 0: the default), and
     * reserving it now so that no step allocates */
    size_t (*scratch_bytes)(const llmm_step_shape *shape, int n_threads);
    llmm_status (*reserve)(void *state, const llmm_step_shape *shape);
    /* optional: the backend's counters (NULL: all zero) */
    void (*stats)(void *state, llmm_backend_stats *out);
    /* optional: the LoRA deltas of matmuls over one input x (rows of n_in): for each part, each
     * of its groups in order and each row r = rows[i] of the group, part.out[r] (n_out values)
     * += scales[i] * B (A x[r]) (a row in several groups gets their deltas summed in that order).
     * t is core scratch of at least sum(count * rank) floats over all groups. A row's result
     * must not depend on the other rows, groups or parts of the call, so that a sequence
     * decoded in a mixed batch gets what it gets alone. NULL: the core composes the deltas
     * from matmul, copy, scale and add, several dispatches per adapter. */
    llmm_status (*lora_delta)(void *state, const float *x, size_t n_in, const llmm_lora_part *parts, size_t n_parts,
                              float *t);
    /* optional: out[i] (host) = the token req[i] chooses from logits row i (a buffer, (n_rows,
     * n_vocab), as the last step left it), or -1 when that row's logits are all -inf or NaN;
     * only the ids cross to the host. NULL: the core downloads the logits and samples on the
     * host (lib/sampling/sampler.c), which gives the same tokens. */
    llmm_status (*sample)(void *state, const float *logits, size_t n_rows, size_t n_vocab,
                          const llmm_sample_request *req, int32_t *out);
    /* optional: the gated short convolution of the step's rows (llmm_conv_batch). NULL: the
     * backend cannot run models with short-convolution layers (context creation says so). */
    llmm_status (*short_conv)(void *state, const llmm_conv_batch *b);
    /* optional: split n_groups rows of 2 * width values into their halves, a (n_groups, width)
     * and b (n_groups, width) (qwen35's query rows hold each head's query, then its gate) */
    llmm_status (*split_halves)(void *state, const float *src, float *a, float *b, size_t n_groups, size_t width);
    /* optional: the Gated DeltaNet mixer (llmm_delta_batch), with glu's LLMM_ACT_SIGMOID. NULL:
     * the backend cannot run qwen35 (context creation says so). */
    llmm_status (*gated_delta_net)(void *state, const llmm_delta_batch *b);
    /* optional, all three or none: the table of resident adapters (LLMM_LORA_NO_ENTRY above).
     * lora_table_reserve makes a table of capacity entries of n_slots slots and the room for
     * steps of up to max_rows rows of LLMM_LORA_MAX_USES uses (outside a step; again: a new,
     * empty table). lora_table_set fills entry (slots: n_slots operands, device buffers the core
     * keeps until it clears the entry) or clears it (slots NULL), outside a step. lora_rows adds
     * to each part's out rows [0, n_rows - row0) the deltas of its slot for the step's rows
     * [row0, n_rows) from x (those rows, n_in wide): for each use of the row, in order,
     * multiplier * B (A x) of the entry's operands of the slot, where it has them. t is core
     * scratch of n_parts * max_rows * LLMM_LORA_MAX_USES * t_stride floats, t_stride at least
     * the largest rank of a resident adapter. A row's result must not depend on other rows. */
    llmm_status (*lora_table_reserve)(void *state, uint32_t capacity, size_t n_slots, size_t max_rows);
    llmm_status (*lora_table_set)(void *state, uint32_t entry, const llmm_lora_operands *slots);
    llmm_status (*lora_rows)(void *state, const float *x, size_t n_in, const llmm_lora_slot_part *parts,
                             size_t n_parts, size_t row0, float *t, size_t t_stride);
} llmm_backend_ops;

/* The CPU backend, always present. */
extern const llmm_backend_ops llmm__cpu_backend;

/* 1 when a table is of this build's LLMM_BACKEND_API_VERSION, fills every required slot and
 * accepts the core's KV layout (table_check.c). */
int llmm__backend_table_ok(const llmm_backend_ops *be);

#endif
