/* The CUDA backend's table (lib/backend/backend.h) and its module entry point (lib/backend/backend_module.h):
 * device buffers, the context's stream, the step's per-row inputs in fixed device buffers, and
 * each op as one launch of the kernels in kernels.h, recorded for a graph in decode steps.
 *
 * Built twice, like every file of cuda/: by nvcc into libllmmini-cuda.so and .a (make CUDA=1,
 * with cudart) and by the host C++ compiler against the SIMT emulation into
 * libllmmini-cuda-emu.so (make test, make cuda-emu), which tests/cuda/test_cuda_module.c loads as
 * the CUDA module. The module calls nothing of the core: it uses the table's types and the
 * kernels only, and takes host memory from the app's allocator hooks (host_memory.h).
 *
 * Device. A context runs on cfg->device; every entry point that touches the device makes it
 * current first (a context may move between host threads, and cudaSetDevice is per thread).
 * Weights are the model's per device (device_weights.h).
 *
 * Steps. step_begin validates the descriptor as the CPU backend does, then packs the step's
 * tokens, positions, each row's block table start and recurrent state slot and the concatenated
 * block tables into one host staging array laid out as the device buffer (fixed offsets from
 * the reserved row capacity) and uploads it with one cudaMemcpyAsync; the kernels read them
 * through cu_step.
 * The buffer is sized at reserve() for shape->max_rows rows and max_rows * ceil(max_kv / 16)
 * table entries, and grows in step_begin only for a step beyond that (the conformance suite
 * never calls reserve).
 * A prompt step launches each op as it comes. A decode step records them (cu_op, graph.h) and
 * launches at step_end: the graph captured for its row count when the record matches, else a
 * new capture (graph.h; LLMM_CUDA_GRAPHS=0 in the environment launches decode ops as they come
 * too). Either way an op's arguments are checked when it is called, so errors come back from
 * the op as before, and nothing allocates inside a reserved step. step_end synchronizes the
 * stream: the core reads the logits right after.
 *
 * Tokens. embed checks the step's token ids against the table's rows on the host (they are
 * host values of the descriptor), so an out-of-range id fails embed with LLMM_ERR_INVALID_ARG
 * at once, without a device read; llmm__cu_embed's device flag is then never set, and is not read. */
#include <stdlib.h>
#include <string.h>

#include "portable.h"

#include "backend/backend.h"
#include "backend/backend_module.h"
#include "format/blocks.h"
#include "device_weights.h"
#include "gemm.h"
#include "gemm_int8.h"
#include "graph.h"
#include "host_memory.h"
#include "kernels.h"
#include "prefill_attention.h"
#include "sample.h"

namespace {

/* Arrays of one word per row in the step buffer: tokens, pos, table_start, state_slot. */
const size_t STEP_ROW_ARRAYS = 4;

/* Minimum block size the table capacity is reserved for (positions per block). */
const size_t k_min_block = 16;

/* Rows up to which a matmul runs llmm__cu_matmul (gemv_quant.cu), the decode kernel, whatever the
 * step: its row tiles read the weights once per 8 rows. */
const size_t GEMV_MAX_ROWS = 8;

/* How matmuls of more than GEMV_MAX_ROWS rows run (LLMM_CUDA_GEMM=gemv|lt|int8 in the
 * environment forces one, to measure each: scripts/gpu-check.sh). */
enum gemm_path : uint32_t {
    GEMM_AUTO = 0, /* the rule of docs/performance.md: choose_gemm */
    GEMM_GEMV,     /* llmm__cu_matmul's row tiles */
    GEMM_LT,       /* llmm__cu_gemm: cuBLASLt over dequantized tiles */
    GEMM_INT8,     /* llmm__cu_gemm_int8, for the types it takes (else the AUTO choice) */
};

/* What a recorded op launches (cu_op.kind); the fields each uses: run_op. */
enum op_kind : uint32_t {
    OP_EMBED = 1,
    OP_RMS_NORM,
    OP_MATMUL,
    OP_ROPE,
    OP_GLU,
    OP_ADD,
    OP_ADD_ROWS,
    OP_SCALE,
    OP_SOFTCAP,
    OP_KV_WRITE,
    OP_ATTENTION,
    OP_GEMM,
    OP_GEMM_INT8,
    OP_PREFILL_ATTENTION,
    OP_LORA_ROWS_PROJECT,
    OP_LORA_ROWS_EXPAND,
    OP_SHORT_CONV,
    OP_GATED_DELTA_NET,
    OP_SPLIT_HALVES,
    /* last of every decode record: the buffers the launches read besides their arguments, so
     * that a graph is never replayed after one of them moved */
    OP_STEP_BUFFERS,
};

struct cu_state {
    const llmm_allocator *alloc;
    int device;
    cudaStream_t stream;
    llmm_backend_shared *shared; /* the model's share, or NULL: a private weight set */
    cu_weight_set *weights;

    /* weight uploads' pinned staging (device_weights.h): allocated by the first weight this
     * context uploads, freed at its first step (every weight is prepared before) */
    void *upload_pinned;

    /* step inputs: device buffer and pinned host staging of the same layout, in uint32 words:
     * tokens [0, rows_cap), pos [rows_cap, 2 rows_cap), table_start [2 rows_cap, 3 rows_cap),
     * state_slot [3 rows_cap, 4 rows_cap), tables [4 rows_cap, 4 rows_cap + tables_cap)
     * (STEP_ROW_ARRAYS arrays of a word per row, then the tables) */
    uint32_t *step_dev;
    uint32_t *step_host;
    size_t rows_cap, tables_cap;

    cu_lt *lt;          /* cuBLASLt for prompt matmuls (gemm.h) */
    uint32_t gemm_path; /* prompt matmuls of more than GEMV_MAX_ROWS rows: enum gemm_path */
    void *scratch; /* llmm__cu_matmul's and llmm__cu_gemm's */
    size_t scratch_bytes;
    int *bad; /* device: llmm__cu_embed's flag */
    void *attn_scratch; /* llmm__cu_attention's partials of split rows */
    size_t attn_scratch_bytes;
    size_t attn_max_kv; /* the reserved shape's max_kv, which fixes llmm__cu_attention's geometry; 0: none */

    /* sampling on the device (cu_sample_op): the requests packed on the host, their device copy,
     * llmm__cu_sample's scratch and the ids; grown at the first calls, kept */
    void *sample_host;
    size_t sample_host_bytes;
    void *sample_packed, *sample_scratch, *sample_ids;
    size_t sample_packed_bytes, sample_scratch_bytes, sample_ids_bytes;

    /* the table of resident adapters (cu_lora_table_*): one device buffer, the table
     * (lora_table_cap entries of lora_n_slots cu_lora_operand) and then the step's per-row uses
     * (entries, then scales, lora_rows_cap * LLMM_LORA_MAX_USES each), and a pinned host mirror
     * of the same layout that the table's entries and each step's uses are copied from; made by
     * lora_table_reserve, never inside a step */
    uint8_t *lora_table_dev, *lora_table_host;
    uint32_t lora_table_cap, lora_n_slots, lora_max_rank;
    size_t lora_rows_cap, lora_uses_offset; /* bytes from the buffer's start to the entries */
    uint32_t lora_uses;                     /* this step's uses per row (0: none) */

    int in_step;
    llmm_step desc;
    size_t pad_cap;     /* rows a decode step may be padded to: the reserved shape's max_rows (0:
                           not reserved, no padding) */
    size_t step_rows;   /* rows the step's launches run: desc.n_rows, or its batch bucket */
    cu_kv kv;
    cu_step step;

    /* decode steps as graphs (graph.h) */
    cu_graphs *graphs;    /* NULL: graphs off (LLMM_CUDA_GRAPHS=0) */
    int recording;        /* this step's ops are recorded, launched at step_end */
    int record_failed;    /* an op of the recorded step failed: the core abandons the step, whose
                             recorded ops still run (as they would have, launched as they came)
                             but make no graph */
    cu_op *ops;           /* (ops_cap) the record */
    size_t n_ops, ops_cap;
};

/* Host staging that the device copies from with cudaMemcpyAsync: pinned (page-locked), so that
 * the copy is asynchronous; from pageable memory CUDA stages it synchronously, stalling the
 * step. CUDA's allocation, not the app's hooks: only the runtime can pin. */
void *cu_pinned_alloc(size_t bytes) {
    void *p = NULL;
    return cudaMallocHost(&p, bytes ? bytes : 1) == cudaSuccess ? p : NULL;
}

void cu_pinned_free(void *p) {
    if (p) cudaFreeHost(p);
}

/* Pinned staging of weight uploads: large enough that a chunk's copy outweighs its sync. */
const size_t UPLOAD_STAGING_BYTES = (size_t)4 << 20;

llmm_status cu_status(int err) {
    if (err == 0) return LLMM_OK;
    return err == cudaErrorMemoryAllocation ? LLMM_ERR_NO_MEMORY : LLMM_ERR_BACKEND;
}

/* The context's device, current on this thread. */
int use_device(const cu_state *s) { return cudaSetDevice(s->device); }

/* ---------------------------------------------------------------- recorded ops */

/* What runs a prompt matmul that cuBLASLt cannot: int8 tensor cores for the types they take,
 * else the GEMV's row tiles; both the CPU's numerics. */
uint32_t gemm_fallback_kind(uint32_t type) { return llmm__cu_gemm_int8_supports(type) ? OP_GEMM_INT8 : OP_MATMUL; }

size_t matmul_scratch_bytes(uint32_t kind, const llmm_tensor *w, size_t n_rows) {
    const size_t ne0 = (size_t)w->ne0, ne1 = (size_t)w->ne1;
    if (kind == OP_GEMM_INT8) return llmm__cu_gemm_int8_scratch_bytes(ne0, n_rows);
    if (kind == OP_MATMUL) return llmm__cu_matmul_scratch_bytes(w->type, ne0, n_rows);
    const size_t gemm = llmm__cu_gemm_scratch_bytes(w->type, ne0, ne1, n_rows);
    const size_t fallback = matmul_scratch_bytes(gemm_fallback_kind(w->type), w, n_rows);
    return gemm > fallback ? gemm : fallback;
}

/* A gated_delta_net call as a record: its 11 buffers in p[]; n0 rows, n1 seq_stride, n2
 * n_v_heads; u0 head_dim, u1 kernel, u2 n_k_heads, u3 the chunk (delta_chunk); f0 eps; and
 * back. The record names no state slot: the kernels read each row's from the step buffer
 * (cu_step.state_slot). */
cu_op delta_op(const llmm_delta_batch *b, size_t rows, uint32_t chunk) {
    cu_op op = cu_op_zero(OP_GATED_DELTA_NET);
    const void *p[CU_OP_POINTERS] = {b->qkv,     b->work, b->z,    b->beta_raw, b->alpha_raw, b->taps,
                                     b->dt_bias, b->a,    b->norm, b->out,      b->states};
    memcpy(op.p, p, sizeof p);
    op.n[0] = rows;
    op.n[1] = b->seq_stride;
    op.n[2] = b->n_v_heads;
    op.u[0] = b->head_dim;
    op.u[1] = b->kernel;
    op.u[2] = b->n_k_heads;
    op.u[3] = chunk;
    op.f[0] = b->eps;
    return op;
}

llmm_delta_batch delta_batch_of(const cu_op *op) {
    llmm_delta_batch b;
    memset(&b, 0, sizeof b);
    b.qkv = (const float *)op->p[0];
    b.work = (float *)op->p[1];
    b.z = (const float *)op->p[2];
    b.beta_raw = (const float *)op->p[3];
    b.alpha_raw = (const float *)op->p[4];
    b.taps = (const float *)op->p[5];
    b.dt_bias = (const float *)op->p[6];
    b.a = (const float *)op->p[7];
    b.norm = (const float *)op->p[8];
    b.out = (float *)op->p[9];
    b.states = (float *)op->p[10];
    b.n_rows = op->n[0];
    b.seq_stride = op->n[1];
    b.n_k_heads = op->u[2];
    b.n_v_heads = (uint32_t)op->n[2];
    b.head_dim = op->u[0];
    b.kernel = op->u[1];
    b.eps = op->f[0];
    return b;
}

/* The table and the step's uses as a recorded LoRA op names them: all at fixed places of the
 * table buffer (op->p[3]), which step_begin refills, so a replay reads the step's own uses. */
cu_lora_uses lora_uses_of(const cu_state *s, const cu_op *op) {
    const uint8_t *buffer = (const uint8_t *)op->p[3];
    const size_t uses_cap = s->lora_rows_cap * LLMM_LORA_MAX_USES;
    cu_lora_uses lu;
    lu.table = (const cu_lora_operand *)buffer;
    lu.n_slots = op->u[3];
    lu.uses = op->u[1];
    lu.entry = (const uint32_t *)(buffer + s->lora_uses_offset);
    lu.scale = (const float *)(buffer + s->lora_uses_offset + uses_cap * sizeof(uint32_t));
    return lu;
}

/* Launch one op (the fields of cu_op by kind are set by the op functions below). */
int run_op(cu_state *s, const cu_op *op) {
    switch (op->kind) {
    case OP_EMBED: /* p0 table, u0 type, n0 ne0, n1 ne1, n2 rows, p1 out */
        return llmm__cu_embed(s->stream, op->p[0], op->u[0], op->n[0], op->n[1], s->step.tokens, op->n[2],
                        (float *)op->p[1], s->bad);
    case OP_RMS_NORM: /* p0 x, p1 weight, p2 out, n0 rows, n1 dim, f0 eps */
        return llmm__cu_rms_norm(s->stream, (const float *)op->p[0], (const float *)op->p[1], (float *)op->p[2], op->n[0],
                           op->n[1], op->f[0]);
    case OP_MATMUL: /* p0 w, u0 type, n0 ne0, n1 ne1, p1 x, n2 rows, p2 out */
        return llmm__cu_matmul(s->stream, op->p[0], op->u[0], op->n[0], op->n[1], (const float *)op->p[1], op->n[2],
                         (float *)op->p[2], s->scratch);
    case OP_ROPE: /* p0 x, n0 rows, n1 heads, n2 head_dim, u0 n_rot, u1 kind, f0 base, f1 freq_scale,
                     f2 mscale, p1 freq_factors */
        return llmm__cu_rope(s->stream, (float *)op->p[0], op->n[0], op->n[1], op->n[2], s->step.pos, op->u[0], op->f[0],
                       op->f[1], op->f[2], op->u[1], (const float *)op->p[1]);
    case OP_GLU: /* p0 gate, p1 up, n0 n, u0 act */
        if (op->u[0] == LLMM_ACT_SIGMOID) /* qwen35's attention gate (delta_net.cu) */
            return llmm__cu_sigmoid_mul(s->stream, (float *)op->p[0], (const float *)op->p[1], op->n[0]);
        return llmm__cu_glu(s->stream, (float *)op->p[0], (const float *)op->p[1], op->n[0], op->u[0]);
    case OP_ADD: /* p0 dst, p1 src, n0 n */
        return llmm__cu_add(s->stream, (float *)op->p[0], (const float *)op->p[1], op->n[0]);
    case OP_ADD_ROWS: /* p0 x, p1 bias, n0 rows, n1 dim */
        return llmm__cu_add_rows(s->stream, (float *)op->p[0], (const float *)op->p[1], op->n[0], op->n[1]);
    case OP_SCALE: /* p0 x, n0 n, f0 s */
        return llmm__cu_scale(s->stream, (float *)op->p[0], op->n[0], op->f[0]);
    case OP_SOFTCAP: /* p0 x, n0 n, f0 cap */
        return llmm__cu_softcap(s->stream, (float *)op->p[0], op->n[0], op->f[0]);
    case OP_KV_WRITE: /* u0 layer, p0 k, p1 v */
        return llmm__cu_kv_write(s->stream, &s->kv, &s->step, op->u[0], (const float *)op->p[0], (const float *)op->p[1]);
    case OP_ATTENTION: /* u0 layer, p0 q, p1 out, u1 n_head, u2 window, f0 scale, f1 softcap, n0 max_kv */
        return llmm__cu_attention(s->stream, &s->kv, &s->step, op->u[0], (const float *)op->p[0], (float *)op->p[1],
                            op->u[1], op->u[2], op->f[0], op->f[1], op->n[0], s->attn_scratch,
                            s->attn_scratch_bytes);
    case OP_GEMM: { /* as OP_MATMUL */
        const int err = llmm__cu_gemm(s->lt, s->stream, op->p[0], op->u[0], op->n[0], op->n[1], (const float *)op->p[1],
                                      op->n[2], (float *)op->p[2], s->scratch, s->scratch_bytes);
        /* cuBLASLt has no algorithm for this shape on this device: the GEMM_INT8 or GEMV path
         * computes it (cu_matmul_op reserved scratch for both); any other error is the answer */
        if (err != cudaErrorNotSupported) return err;
        cu_op fallback = *op;
        fallback.kind = gemm_fallback_kind(op->u[0]);
        return run_op(s, &fallback);
    }
    case OP_GEMM_INT8: /* as OP_MATMUL */
        return llmm__cu_gemm_int8_f32(s->stream, op->p[0], op->u[0], op->n[0], op->n[1], (const float *)op->p[1],
                                op->n[2], (float *)op->p[2], s->scratch);
    case OP_PREFILL_ATTENTION: /* as OP_ATTENTION, n1 row_begin, n2 row_end (no max_kv, no scratch) */
        return llmm__cu_prefill_attention(s->stream, &s->kv, &s->step, op->u[0], (const float *)op->p[0], (float *)op->p[1],
                                    op->u[1], op->u[2], op->f[0], op->f[1], op->n[1], op->n[2]);
    case OP_LORA_ROWS_PROJECT: /* u0 slot, u1 uses, n0 row0, n1 rows, p0 x, n2 n_in, p1 t, p3 table buffer,
                                  f: none; t_stride in u2, n_slots in u3 */
        return llmm__cu_lora_rows_project(s->stream, lora_uses_of(s, op), op->u[0], op->n[0], op->n[1],
                                          (const float *)op->p[0], op->n[2], (float *)op->p[1], op->u[2]);
    case OP_LORA_ROWS_EXPAND: /* as OP_LORA_ROWS_PROJECT, p0 out, n2 n_out */
        return llmm__cu_lora_rows_expand(s->stream, lora_uses_of(s, op), op->u[0], op->n[0], op->n[1],
                                         (const float *)op->p[1], op->u[2], (float *)op->p[0], op->n[2]);
    case OP_SHORT_CONV: /* p0 bcx, p1 out, p2 taps, p3 states, n0 seq_stride, n1 rows, u0 dim, u1 kernel */
        return llmm__cu_short_conv(s->stream, (const float *)op->p[0], (float *)op->p[1], (const float *)op->p[2],
                                   (float *)op->p[3], op->n[0], (uint32_t)op->n[1], op->u[0], op->u[1], s->step.pos,
                                   s->step.state_slot);
    case OP_GATED_DELTA_NET: { /* delta_op's fields, u3 chunk */
        const llmm_delta_batch b = delta_batch_of(op);
        return llmm__cu_gated_delta_net(s->stream, &b, s->step.pos, s->step.state_slot, op->u[3]);
    }
    case OP_SPLIT_HALVES: /* p0 src, p1 a, p2 b, n0 n_groups, n1 width */
        return llmm__cu_split_halves(s->stream, (const float *)op->p[0], (float *)op->p[1], (float *)op->p[2],
                                     op->n[0], op->n[1]);
    case OP_STEP_BUFFERS: return 0;
    }
    return (int)cudaErrorInvalidValue;
}

int run_ops(void *state, const cu_op *ops, size_t n_ops) {
    cu_state *s = (cu_state *)state;
    for (size_t i = 0; i < n_ops; i++) {
        const int err = run_op(s, &ops[i]);
        if (err) return err;
    }
    return 0;
}

/* Room for n more records (host memory: grows in a context's first decode steps only). */
llmm_status ops_room(cu_state *s, size_t n) {
    if (s->n_ops + n <= s->ops_cap) return LLMM_OK;
    const size_t cap = (s->n_ops + n) * 2;
    cu_op *ops = (cu_op *)cu_host_alloc(s->alloc, cap * sizeof *ops);
    if (!ops) return LLMM_ERR_NO_MEMORY;
    if (s->n_ops) memcpy(ops, s->ops, s->n_ops * sizeof *ops);
    cu_host_free(s->alloc, s->ops);
    s->ops = ops;
    s->ops_cap = cap;
    return LLMM_OK;
}

/* An op whose arguments were checked: recorded in a decode step, else launched now. */
llmm_status submit(cu_state *s, const cu_op &op) {
    if (!s->recording) return cu_status(run_op(s, &op));
    llmm_status st = ops_room(s, 1);
    if (st) {
        s->record_failed = 1;
        return st;
    }
    s->ops[s->n_ops++] = op;
    return LLMM_OK;
}

/* An op failed its checks: the step will not be a complete one to capture. */
llmm_status refuse(cu_state *s, llmm_status st) {
    if (s->recording) s->record_failed = 1;
    return st;
}

/* Launch what the step recorded so far, eagerly, and record no more: a copy or a transfer the
 * core orders inside a step must see the ops before it done. */
int flush_record(cu_state *s) {
    if (!s->recording) return 0;
    s->recording = 0;
    const int err = run_ops(s, s->ops, s->n_ops);
    s->n_ops = 0;
    return err;
}

/* The recorded decode step: replayed or captured (graph.h), then launched. */
int launch_record(cu_state *s) {
    s->recording = 0;
    int err = 0;
    if (s->record_failed) {
        err = run_ops(s, s->ops, s->n_ops);
    } else if (s->n_ops) {
        cu_op tail = cu_op_zero(OP_STEP_BUFFERS);
        tail.p[0] = s->step_dev;
        tail.p[1] = s->scratch;
        tail.p[2] = s->attn_scratch;
        tail.p[3] = s->kv.pool;
        tail.n[0] = s->rows_cap;
        tail.n[1] = s->attn_scratch_bytes;
        if (ops_room(s, 1)) {
            err = run_ops(s, s->ops, s->n_ops);
        } else {
            s->ops[s->n_ops++] = tail;
            err = cu_graphs_run(s->graphs, s->stream, (uint32_t)s->step_rows, s->ops, s->n_ops, run_ops, s);
        }
    }
    s->n_ops = 0;
    s->record_failed = 0;
    return err;
}

/* ---------------------------------------------------------------- the table */

int cu_available(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError(); /* a driver without a device leaves a sticky-looking error: clear it */
        return 0;
    }
    return n > 0;
}

int cu_supports_type(uint32_t type) { return llmm__cu_matmul_supports(type); }

/* LLMM_CUDA_GEMM: gemv, lt or int8 forces that path; anything else is GEMM_AUTO. */
uint32_t gemm_path_wanted(void) {
    const char *e = getenv("LLMM_CUDA_GEMM");
    if (e && strcmp(e, "gemv") == 0) return GEMM_GEMV;
    if (e && strcmp(e, "lt") == 0) return GEMM_LT;
    if (e && strcmp(e, "int8") == 0) return GEMM_INT8;
    return GEMM_AUTO;
}

/* LLMM_CUDA_GRAPHS=0: decode steps launch op by op, as prompts do (to compare the two). */
int graphs_wanted(void) {
    const char *e = getenv("LLMM_CUDA_GRAPHS");
    return !(e && strcmp(e, "0") == 0);
}

void cu_shutdown(void *state);

llmm_status cu_init(const llmm_backend_config *cfg, void **out) {
    int n_devices = 0;
    if (cudaGetDeviceCount(&n_devices) != cudaSuccess || cfg->device < 0 || cfg->device >= n_devices) {
        cudaGetLastError();
        return LLMM_ERR_BACKEND; /* no such device: AUTO goes to the CPU */
    }
    cu_state *s = (cu_state *)cu_host_calloc(cfg->alloc, 1, sizeof *s);
    if (!s) return LLMM_ERR_NO_MEMORY;
    s->alloc = cfg->alloc;
    s->device = cfg->device;
    s->shared = cfg->shared;
    llmm_status st = cu_status(use_device(s));
    /* non-blocking: independent of the legacy stream, so that one context's graph capture and
     * another's work (or a library's on stream 0) never meet (cudaErrorStreamCaptureImplicit) */
    if (!st) st = cu_status(cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking));
    if (!st) st = cu_status(cudaMalloc((void **)&s->bad, sizeof(int)));
    if (!st && graphs_wanted() && !(s->graphs = cu_graphs_new(s->alloc))) st = LLMM_ERR_NO_MEMORY;
    s->gemm_path = gemm_path_wanted();
    if (!st) {
        int err = 0;
        if (!(s->lt = llmm__cu_lt_create(s->alloc, &err))) st = err ? cu_status(err) : LLMM_ERR_NO_MEMORY;
    }
    if (!st) st = cu_weights_join(s->shared, s->alloc, s->device, cfg->n_weights, &s->weights);
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
    use_device(s);
    if (s->stream) cudaStreamSynchronize(s->stream);
    cu_graphs_free(s->graphs);
    llmm__cu_lt_free(s->lt);
    /* the last context of the model on this device frees the weights before its shutdown
     * returns: the module may be unloaded right after */
    cu_weights_leave(s->shared, s->weights);
    cudaFree(s->step_dev);
    cu_pinned_free(s->step_host);
    cu_pinned_free(s->upload_pinned);
    cudaFree(s->scratch);
    cudaFree(s->attn_scratch);
    cudaFree(s->bad);
    cudaFree(s->sample_packed);
    cudaFree(s->sample_scratch);
    cudaFree(s->sample_ids);
    cu_pinned_free(s->sample_host);
    cudaFree(s->lora_table_dev);
    cu_pinned_free(s->lora_table_host);
    cu_host_free(s->alloc, s->ops);
    if (s->stream) cudaStreamDestroy(s->stream);
    cu_host_free(s->alloc, s);
}

llmm_status cu_buffer_alloc(void *state, size_t bytes, void **out) {
    cu_state *s = (cu_state *)state;
    *out = NULL;
    llmm_status st = cu_status(use_device(s));
    if (!st) st = cu_status(cudaMalloc(out, bytes ? bytes : 1));
    if (st) *out = NULL;
    return st;
}

void cu_buffer_free(void *state, void *buffer) {
    cu_state *s = (cu_state *)state;
    if (!buffer) return;
    use_device(s);
    flush_record(s);
    cudaStreamSynchronize(s->stream); /* nothing queued may still use it */
    cudaFree(buffer);
}

llmm_status cu_upload(void *state, void *dst, const void *src, size_t bytes) {
    cu_state *s = (cu_state *)state;
    if (!bytes) return LLMM_OK;
    int err = use_device(s);
    if (!err) err = flush_record(s);
    if (!err) err = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, s->stream);
    return cu_status(err);
}

llmm_status cu_download(void *state, void *dst, const void *src, size_t bytes) {
    cu_state *s = (cu_state *)state;
    if (!bytes) return LLMM_OK;
    int err = use_device(s);
    if (!err) err = flush_record(s);
    if (!err) err = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, s->stream);
    if (!err) err = cudaStreamSynchronize(s->stream);
    return cu_status(err);
}

llmm_status cu_copy(void *state, void *dst, const void *src, size_t bytes) {
    cu_state *s = (cu_state *)state;
    if (!bytes) return LLMM_OK;
    int err = use_device(s);
    if (!err) err = flush_record(s);
    if (!err) err = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s->stream);
    return cu_status(err);
}

/* The weight's rows in device memory: the model's copy on this device (device_weights.h). */
llmm_status cu_prepare_weight(void *state, size_t index, llmm_weight_role role, const llmm_tensor *host,
                              llmm_tensor *out) {
    cu_state *s = (cu_state *)state;
    (void)role;
    if (!host->data || host->ne1 < 0) return LLMM_ERR_INVALID_ARG;
    void *dev = NULL;
    llmm_status st = cu_status(use_device(s));
    if (!st && !s->upload_pinned && !(s->upload_pinned = cu_pinned_alloc(UPLOAD_STAGING_BYTES))) st = LLMM_ERR_NO_MEMORY;
    const cu_staging staging = {s->upload_pinned, UPLOAD_STAGING_BYTES, s->stream};
    if (!st)
        st = cu_weights_get(s->shared, s->weights, index, host->data, host->row_bytes * (size_t)host->ne1, &staging,
                            &dev);
    if (st) return st;
    *out = *host;
    out->data = dev;
    out->backend = NULL;
    return LLMM_OK;
}

/* The copy stays with the model's set until its last context on the device shuts down. */
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
    const size_t words = STEP_ROW_ARRAYS * rows + tables;
    if (words > SIZE_MAX / sizeof(uint32_t)) return LLMM_ERR_NO_MEMORY;
    uint32_t *host = (uint32_t *)cu_pinned_alloc(words * sizeof *host);
    if (!host) return LLMM_ERR_NO_MEMORY;
    memset(host, 0, words * sizeof *host);
    uint32_t *dev = NULL;
    if (cudaMalloc((void **)&dev, words * sizeof *dev) != cudaSuccess) {
        cu_pinned_free(host);
        return LLMM_ERR_NO_MEMORY;
    }
    if (s->step_dev) cudaStreamSynchronize(s->stream);
    cudaFree(s->step_dev);
    cu_pinned_free(s->step_host);
    s->step_dev = dev;
    s->step_host = host;
    s->rows_cap = rows;
    s->tables_cap = tables;
    return LLMM_OK;
}

/* *buf (device, *have bytes) grown to at least need bytes; its contents are not kept. */
llmm_status grow_device_buffer(cu_state *s, void **buf, size_t *have, size_t need) {
    if (need <= *have) return LLMM_OK;
    void *p = NULL;
    if (cudaMalloc(&p, need) != cudaSuccess) return LLMM_ERR_NO_MEMORY;
    if (*buf) {
        cudaStreamSynchronize(s->stream); /* nothing queued may still use it */
        cudaFree(*buf);
    }
    *buf = p;
    *have = need;
    return LLMM_OK;
}

/* llmm__cu_matmul's scratch: reserved once for the context's widest matmul (cu_reserve); grown here
 * for a caller that did not reserve. */
llmm_status reserve_scratch(cu_state *s, size_t bytes) {
    return grow_device_buffer(s, &s->scratch, &s->scratch_bytes, bytes);
}

/* The rows a recorded decode step of n rows launches: n up to 8 (each size its own graph, as
 * warm-up captures them), else the next power of two within the reserved rows, so that 64
 * sequences decoding at changing counts replay a few graphs (16, 32, 64) instead of capturing
 * one per count. The padding rows cost little in a decode step, whose matmuls are bound by
 * reading the weights once. */
size_t bucket_rows(size_t n, size_t cap) {
    if (n <= 8 || cap <= n) return n;
    size_t b = 16;
    while (b < n) b *= 2;
    return b < cap ? b : cap;
}

/* Each row's recurrent state slot: its sequence id, whose state the core keeps at states +
 * id * seq_stride of every recurrent layer for the context's life (lib/context/recurrent.c).
 * Data of the step, like its positions, so the recurrent layers' launches name no sequence and
 * a decode step of a hybrid model replays its graph whichever sequences it holds. */
void stage_state_slots(const llmm_step *step, uint32_t *slots) {
    for (size_t r = 0; r < step->n_rows; r++) slots[r] = (uint32_t)step->seq_ids[step->row_seq[r]];
}

/* The step's LoRA uses name entries of the table, for rows it has room for. */
int lora_uses_ok(const cu_state *s, const llmm_step *step) {
    if (!step->lora_uses) return 1;
    if (!s->lora_table_dev || step->lora_uses > LLMM_LORA_MAX_USES || step->n_rows > s->lora_rows_cap ||
        !step->lora_entry || !step->lora_scale)
        return 0;
    for (size_t i = 0; i < step->n_rows * step->lora_uses; i++)
        if (step->lora_entry[i] != LLMM_LORA_NO_ENTRY && step->lora_entry[i] >= s->lora_table_cap) return 0;
    return 1;
}

/* The step's LoRA uses (rows padded to the bucket with no adapter) into their fixed place of
 * the table buffer: one copy from the pinned mirror, queued ahead of the step's launches. */
int stage_lora_uses(cu_state *s, const llmm_step *step, size_t rows) {
    if (rows > s->lora_rows_cap) return (int)cudaErrorInvalidValue;
    const size_t uses = step->lora_uses, used = step->n_rows * uses, uses_cap = s->lora_rows_cap * LLMM_LORA_MAX_USES;
    uint32_t *entry = (uint32_t *)(s->lora_table_host + s->lora_uses_offset);
    float *scale = (float *)(entry + uses_cap);
    memcpy(entry, step->lora_entry, used * sizeof *entry);
    memcpy(scale, step->lora_scale, used * sizeof *scale);
    for (size_t i = used; i < rows * uses; i++) {
        entry[i] = LLMM_LORA_NO_ENTRY;
        scale[i] = 0.f;
    }
    const size_t bytes = (uses_cap + rows * uses) * sizeof(uint32_t); /* the entries, then the scales used */
    return cudaMemcpyAsync(s->lora_table_dev + s->lora_uses_offset, entry, bytes, cudaMemcpyHostToDevice, s->stream);
}

llmm_status cu_step_begin(void *state, const llmm_step *step) {
    cu_state *s = (cu_state *)state;
    if (use_device(s)) return LLMM_ERR_BACKEND;
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
    if (tables > UINT32_MAX || !lora_uses_ok(s, step)) return LLMM_ERR_INVALID_ARG;
    llmm_status st = reserve_step(s, step->n_rows, tables);
    if (st) return st;
    if (s->upload_pinned) { /* the weights are on the device: their staging is not needed */
        cu_pinned_free(s->upload_pinned);
        s->upload_pinned = NULL;
    }

    /* the staging array, as the device buffer lays it out; pinned, so the copy below is truly
     * asynchronous: the previous step's copy from it is done, since step_end synchronized */
    const size_t n = step->n_rows, cap = s->rows_cap;
    uint32_t *h = s->step_host;
    uint32_t *starts = h + 2 * cap, *slots = h + 3 * cap, *tab = h + STEP_ROW_ARRAYS * cap;
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
    stage_state_slots(step, slots);
    const int recording = step->kind == LLMM_STEP_DECODE && cu_graphs_usable(s->graphs);
    const size_t rows = recording ? bucket_rows(n, s->pad_cap) : n;
    for (size_t r = n; r < rows; r++) { /* padding rows: token 0, no position, any table */
        h[r] = 0;
        h[cap + r] = UINT32_MAX; /* pos -1 */
        starts[r] = 0;
        slots[r] = UINT32_MAX;
    }
    /* one copy: everything up to the end of the tables (the unused row slots ride along) */
    int err = cudaMemcpyAsync(s->step_dev, h, (STEP_ROW_ARRAYS * cap + tables) * sizeof *h, cudaMemcpyHostToDevice,
                              s->stream);
    if (!err && step->lora_uses) err = stage_lora_uses(s, step, rows);
    if (err) return cu_status(err);

    const llmm_kv_layout *kv = step->kv;
    s->kv = cu_kv{(uint8_t *)kv->pool, kv->n_layer, kv->n_head_kv, kv->head_dim, kv->type,
                  kv->block_shift, kv->row_bytes, kv->block_stride, kv->head_stride};
    s->step = cu_step{(uint32_t)rows, (const int32_t *)s->step_dev, (const int32_t *)(s->step_dev + cap),
                      s->step_dev + 2 * cap, s->step_dev + STEP_ROW_ARRAYS * cap, s->step_dev + 3 * cap};
    s->desc = *step;
    s->lora_uses = step->lora_uses;
    s->step_rows = rows;
    s->in_step = 1;
    s->recording = recording;
    s->record_failed = 0;
    s->n_ops = 0;
    return LLMM_OK;
}

llmm_status cu_step_end(void *state) {
    cu_state *s = (cu_state *)state;
    int err = use_device(s);
    if (s->recording) {
        const int launch = launch_record(s);
        if (!err) err = launch;
    }
    s->in_step = 0;
    s->desc = llmm_step{};
    s->step_rows = 0;
    const int sync = cudaStreamSynchronize(s->stream);
    return cu_status(err ? err : sync);
}

/* Values an element-wise op over n values launches: scaled to the bucket when n is whole rows
 * of the step's. */
size_t launch_values(const cu_state *s, size_t n) {
    if (!s->in_step || s->step_rows == s->desc.n_rows || n % s->desc.n_rows) return n;
    return n / s->desc.n_rows * s->step_rows;
}

/* Rows an op over n_rows rows launches: the step's bucket when the op covers the step's rows,
 * k buckets when it covers k rows of each (the per-head Q/K norms: the step's rows times the
 * heads, row after row), so that the record of a step does not depend on its row count within
 * the bucket (rows are independent everywhere but in kv_write and attention, which skip padding
 * rows). */
size_t launch_rows(const cu_state *s, size_t n_rows) { return launch_values(s, n_rows); }

/* Each op: its arguments checked now (a failure is the op's, as on the CPU), then submitted. */

llmm_status cu_embed_op(void *state, const llmm_tensor *table, float *out) {
    cu_state *s = (cu_state *)state;
    if (!s->in_step) return LLMM_ERR_INVALID_ARG;
    for (size_t r = 0; r < s->desc.n_rows; r++)
        if (s->desc.tokens[r] < 0 || (int64_t)s->desc.tokens[r] >= table->ne1) return refuse(s, LLMM_ERR_INVALID_ARG);
    cu_op op = cu_op_zero(OP_EMBED);
    op.p[0] = table->data;
    op.u[0] = table->type;
    op.n[0] = (size_t)table->ne0;
    op.n[1] = (size_t)table->ne1;
    op.n[2] = s->step_rows;
    op.p[1] = out;
    return submit(s, op);
}

llmm_status cu_rms_norm_op(void *state, const float *x, const float *weight, float *out, size_t n_rows, size_t dim,
                           float eps) {
    cu_state *s = (cu_state *)state;
    if (!n_rows || !dim) return LLMM_OK;
    cu_op op = cu_op_zero(OP_RMS_NORM);
    op.p[0] = x;
    op.p[1] = weight;
    op.p[2] = out;
    op.n[0] = launch_rows(s, n_rows);
    op.n[1] = dim;
    op.f[0] = eps;
    return submit(s, op);
}

/* The op a matmul of n_rows rows of a weight of this type launches: the rule of
 * docs/performance.md ("Which kernel runs a matmul"), or the path LLMM_CUDA_GEMM forces.
 * - up to GEMV_MAX_ROWS rows: llmm__cu_matmul, which reads the weights once per 8 rows;
 * - more, for the types llmm__cu_gemm_int8 takes: int8 tensor cores, the CPU's numerics bit for bit;
 * - more, other types, in a prompt step: llmm__cu_gemm (cuBLASLt). A decode step (recorded for a
 *   graph) keeps to llmm__cu_matmul there: llmm__cu_lt_matmul may create cuBLASLt descriptors at a shape's
 *   first call, which a stream capture must not see. */
uint32_t matmul_kind(const cu_state *s, uint32_t type, size_t n_rows) {
    if (n_rows <= GEMV_MAX_ROWS || s->gemm_path == GEMM_GEMV) return OP_MATMUL;
    const int int8 = llmm__cu_gemm_int8_supports(type);
    if (s->gemm_path == GEMM_LT) return s->recording ? OP_MATMUL : OP_GEMM;
    if (int8) return OP_GEMM_INT8;
    return s->recording ? OP_MATMUL : OP_GEMM;
}

llmm_status cu_matmul_op(void *state, const llmm_tensor *w, const float *x, size_t n_rows, float *out) {
    cu_state *s = (cu_state *)state;
    if (!n_rows || !w->ne1) return LLMM_OK;
    n_rows = launch_rows(s, n_rows);
    const uint32_t kind = matmul_kind(s, w->type, n_rows);
    llmm_status st = reserve_scratch(s, matmul_scratch_bytes(kind, w, n_rows));
    if (st) return refuse(s, st);
    cu_op op = cu_op_zero(kind);
    op.p[0] = w->data;
    op.u[0] = w->type;
    op.n[0] = (size_t)w->ne0;
    op.n[1] = (size_t)w->ne1;
    op.p[1] = x;
    op.n[2] = n_rows;
    op.p[2] = out;
    return submit(s, op);
}

llmm_status cu_rope_op(void *state, float *x, size_t n_heads, size_t head_dim, const llmm_rope_params *rp) {
    cu_state *s = (cu_state *)state;
    if (!s->in_step || rp->n_rot > head_dim || rp->n_rot % 2) return refuse(s, LLMM_ERR_INVALID_ARG);
    if (!s->desc.n_rows || !n_heads || !rp->n_rot) return LLMM_OK;
    cu_op op = cu_op_zero(OP_ROPE);
    op.p[0] = x;
    op.n[0] = s->step_rows;
    op.n[1] = n_heads;
    op.n[2] = head_dim;
    op.u[0] = rp->n_rot;
    op.u[1] = (uint32_t)rp->kind;
    op.f[0] = rp->base;
    op.f[1] = rp->freq_scale;
    op.f[2] = rp->mscale;
    op.p[1] = rp->freq_factors;
    return submit(s, op);
}

llmm_status cu_glu_op(void *state, float *gate, const float *up, size_t n, llmm_activation act) {
    cu_state *s = (cu_state *)state;
    /* norm_rope_act.cu's, and qwen35's attention gate (delta_net.cu) */
    if (act != LLMM_ACT_SILU && act != LLMM_ACT_GELU_TANH && act != LLMM_ACT_SIGMOID)
        return refuse(s, LLMM_ERR_INVALID_ARG);
    if (!n) return LLMM_OK;
    cu_op op = cu_op_zero(OP_GLU);
    op.p[0] = gate;
    op.p[1] = up;
    op.n[0] = launch_values(s, n);
    op.u[0] = (uint32_t)act;
    return submit(s, op);
}

llmm_status cu_add_op(void *state, float *dst, const float *src, size_t n) {
    cu_state *s = (cu_state *)state;
    if (!n) return LLMM_OK;
    cu_op op = cu_op_zero(OP_ADD);
    op.p[0] = dst;
    op.p[1] = src;
    op.n[0] = launch_values(s, n);
    return submit(s, op);
}

llmm_status cu_add_rows_op(void *state, float *x, const float *bias, size_t n_rows, size_t dim) {
    cu_state *s = (cu_state *)state;
    if (!n_rows || !dim) return LLMM_OK;
    cu_op op = cu_op_zero(OP_ADD_ROWS);
    op.p[0] = x;
    op.p[1] = bias;
    op.n[0] = launch_rows(s, n_rows);
    op.n[1] = dim;
    return submit(s, op);
}

/* An element-wise op of n values of x with one scalar parameter (OP_SCALE, OP_SOFTCAP). */
llmm_status submit_unary(void *state, uint32_t kind, float *x, size_t n, float param) {
    cu_state *s = (cu_state *)state;
    if (!n) return LLMM_OK;
    cu_op op = cu_op_zero(kind);
    op.p[0] = x;
    op.n[0] = launch_values(s, n);
    op.f[0] = param;
    return submit(s, op);
}

llmm_status cu_scale_op(void *state, float *x, size_t n, float f) { return submit_unary(state, OP_SCALE, x, n, f); }

llmm_status cu_softcap_op(void *state, float *x, size_t n, float cap) {
    return submit_unary(state, OP_SOFTCAP, x, n, cap);
}

llmm_status cu_kv_write_op(void *state, uint32_t layer, const float *k, const float *v) {
    cu_state *s = (cu_state *)state;
    if (!s->in_step || layer >= s->kv.n_layer || s->kv.type > LLMM_KV_Q8) return refuse(s, LLMM_ERR_INVALID_ARG);
    if (!s->desc.n_rows) return LLMM_OK;
    cu_op op = cu_op_zero(OP_KV_WRITE);
    op.u[0] = layer;
    op.p[0] = k;
    op.p[1] = v;
    return submit(s, op);
}

/* llmm__cu_attention's scratch: reserved once for the context's largest step (cu_reserve), so that a
 * reserved context never allocates in a step; grown here for a caller that did not reserve or a
 * step beyond the reserved shape. */
llmm_status reserve_attn_scratch(cu_state *s, size_t bytes) {
    return grow_device_buffer(s, &s->attn_scratch, &s->attn_scratch_bytes, bytes);
}

llmm_status cu_attention_op(void *state, uint32_t layer, const llmm_attn_batch *b) {
    cu_state *s = (cu_state *)state;
    if (!s->in_step || layer >= s->kv.n_layer || b->n_rows != s->desc.n_rows || b->n_head_kv != s->kv.n_head_kv ||
        b->head_dim != s->kv.head_dim || !b->n_head_kv || b->n_head % b->n_head_kv)
        return refuse(s, LLMM_ERR_INVALID_ARG);
    if (!b->n_rows) return LLMM_OK;
    /* without reserve (the conformance suite), the step's longest row stands in for the
     * context's max_kv */
    size_t max_kv = s->attn_max_kv;
    for (size_t r = 0; !s->attn_max_kv && r < b->n_rows; r++)
        if ((size_t)s->desc.pos[r] + 1 > max_kv) max_kv = (size_t)s->desc.pos[r] + 1;
    llmm_status st =
        reserve_attn_scratch(s, llmm__cu_attention_scratch_bytes(s->step_rows, b->n_head, b->head_dim, max_kv));
    if (st) return refuse(s, st);
    cu_op op = cu_op_zero(OP_ATTENTION);
    op.u[0] = layer;
    op.p[0] = b->q;
    op.p[1] = b->out;
    op.u[1] = b->n_head;
    op.u[2] = b->window;
    op.f[0] = b->scale;
    op.f[1] = b->softcap;
    op.n[0] = max_kv;
    if (s->recording || s->desc.kind != LLMM_STEP_PROMPT)
        return submit(s, op);
    /* a prompt: each run of one sequence's rows longer than a decode step through the tiled
     * kernel, which reads each K/V tile once for the whole run where llmm__cu_attention re-reads a
     * row's positions per row; shorter runs keep llmm__cu_attention's split-K parallelism (it has no
     * row range: when some run is short it runs over every row first, and the tiled runs then
     * overwrite theirs with the same values) */
    cu_op tiled = op;
    tiled.kind = OP_PREFILL_ATTENTION;
    tiled.n[0] = 0;
    int short_run = 0;
    for (size_t begin = 0, end; begin < b->n_rows; begin = end) {
        for (end = begin + 1; end < b->n_rows && s->desc.row_seq[end] == s->desc.row_seq[begin];) end++;
        short_run |= end - begin <= GEMV_MAX_ROWS;
    }
    if (short_run && (st = submit(s, op))) return st;
    for (size_t begin = 0, end; begin < b->n_rows; begin = end) {
        for (end = begin + 1; end < b->n_rows && s->desc.row_seq[end] == s->desc.row_seq[begin];) end++;
        if (end - begin <= GEMV_MAX_ROWS) continue;
        tiled.n[1] = begin;
        tiled.n[2] = end;
        if ((st = submit(s, tiled))) return st;
    }
    return LLMM_OK;
}

/* Table entries a step of the shape may need: each row's sequence at most ceil(max_kv / 16)
 * blocks (the smallest block the core makes). */
size_t shape_tables(const llmm_step_shape *shape) {
    return shape->max_rows * ((shape->max_kv + k_min_block - 1) / k_min_block + 1);
}

/* llmm__cu_matmul's and llmm__cu_gemm's scratch for the widest input of any weight type present, max_rows
 * rows (llmm__cu_gemm's is bounded in the output width). */
size_t shape_matmul_scratch(const llmm_step_shape *shape) {
    size_t most = 0;
    for (uint32_t t = 0; t < 64; t++)
        if (shape->weight_types >> t & 1 && llmm__cu_matmul_supports(t)) {
            size_t b = llmm__cu_matmul_scratch_bytes(t, shape->max_in, shape->max_rows);
            if (shape->max_rows > GEMV_MAX_ROWS) {
                const size_t g = llmm__cu_gemm_scratch_bytes(t, shape->max_in, SIZE_MAX, shape->max_rows);
                const size_t i8 = llmm__cu_gemm_int8_scratch_bytes(shape->max_in, shape->max_rows);
                b = g > b ? g : b;
                b = i8 > b ? i8 : b;
            }
            most = b > most ? b : most;
        }
    return most;
}

/* llmm__cu_attention's scratch for any step of the shape; a shape that does not give n_head is
 * bounded by its widest matmul input (q_dim <= max_in). */
size_t shape_attn_scratch(const llmm_step_shape *shape) {
    if (!shape->head_dim) return 0;
    const size_t n_head = shape->n_head ? shape->n_head : shape->max_in / shape->head_dim;
    return llmm__cu_attention_scratch_bytes(shape->max_rows, (uint32_t)n_head, shape->head_dim, shape->max_kv);
}

/* Records of one decode step: a forward pass makes a few ops per weight (a matmul, its norm or
 * bias, the element-wise op after it) and a few per step. */
size_t shape_ops(const llmm_step_shape *shape) { return 3 * shape->n_weights + 16; }

/* Device memory besides the buffers: matmul and attention scratch, cuBLASLt's workspace, the
 * step buffer, the embed flag; plus the host state, the step record and the graphs' copies of it (estimates count it
 * all as the backend's). */
size_t cu_working_bytes(const llmm_step_shape *shape, int n_threads) {
    (void)n_threads;
    return shape_matmul_scratch(shape) + shape_attn_scratch(shape) + CU_LT_WORKSPACE_BYTES +
           (STEP_ROW_ARRAYS * shape->max_rows + shape_tables(shape)) * sizeof(uint32_t) * 2 + sizeof(int) +
           sizeof(cu_state) +
           shape->n_weights * 2 * sizeof(void *) + (1 + CU_GRAPHS_MAX) * shape_ops(shape) * sizeof(cu_op);
}

llmm_status cu_reserve(void *state, const llmm_step_shape *shape) {
    cu_state *s = (cu_state *)state;
    llmm_status st = cu_status(use_device(s));
    if (!st) st = reserve_scratch(s, shape_matmul_scratch(shape));
    if (!st) st = reserve_step(s, shape->max_rows, shape_tables(shape));
    if (!st) st = reserve_attn_scratch(s, shape_attn_scratch(shape));
    if (!st) s->attn_max_kv = shape->max_kv;
    if (!st) s->pad_cap = shape->max_rows;
    if (!st && s->graphs) st = ops_room(s, shape_ops(shape));
    return st;
}

/* The sample slot: the requests packed into one host buffer and uploaded with one copy, the
 * rows sampled where the logits are (sample.cu), and only the ids copied back. Runs after the
 * step (never recorded for a graph); its buffers grow at the first calls and are kept. */
llmm_status cu_sample_op(void *state, const float *logits, size_t n_rows, size_t n_vocab,
                         const llmm_sample_request *req, int32_t *out) {
    cu_state *s = (cu_state *)state;
    if (!logits || !req || !out || n_rows == 0 || n_vocab == 0 || n_vocab > INT32_MAX || s->in_step)
        return LLMM_ERR_INVALID_ARG;
    size_t total = 0;
    for (size_t i = 0; i < n_rows; i++) total += req[i].n_penalized;
    const size_t packed = llmm__cu_sample_staging_bytes(n_rows, total);
    llmm_status st = cu_status(use_device(s));
    if (!st && packed > s->sample_host_bytes) {
        void *h = cu_pinned_alloc(packed);
        if (!h) return LLMM_ERR_NO_MEMORY;
        cu_pinned_free(s->sample_host);
        s->sample_host = h;
        s->sample_host_bytes = packed;
    }
    if (!st) st = grow_device_buffer(s, &s->sample_packed, &s->sample_packed_bytes, packed);
    if (!st) st = grow_device_buffer(s, &s->sample_scratch, &s->sample_scratch_bytes,
                                     llmm__cu_sample_scratch_bytes(n_rows, n_vocab));
    if (!st) st = grow_device_buffer(s, &s->sample_ids, &s->sample_ids_bytes, n_rows * sizeof(int32_t));
    if (st) return st;
    if (llmm__cu_sample_pack(req, n_rows, s->sample_host, s->sample_host_bytes) != packed) return LLMM_ERR_INVALID_ARG;
    int err = cudaMemcpyAsync(s->sample_packed, s->sample_host, packed, cudaMemcpyHostToDevice, s->stream);
    if (!err)
        err = llmm__cu_sample(s->stream, logits, n_rows, n_vocab, s->sample_packed, (int32_t *)s->sample_ids,
                        s->sample_scratch);
    if (!err) err = cudaMemcpyAsync(out, s->sample_ids, n_rows * sizeof(int32_t), cudaMemcpyDeviceToHost, s->stream);
    /* the host staging is read by the first copy: it must stay until the stream is past it */
    const int sync = cudaStreamSynchronize(s->stream);
    return cu_status(err ? err : sync);
}

int lora_operand_ok(const llmm_tensor *t) {
    return t && t->data && (t->type == LLMM_TYPE_F32 || t->type == LLMM_TYPE_F16);
}

/* The table of resident adapters and the room for steps' uses of it (lora_table_reserve): one
 * device buffer and its pinned mirror, made now, so that no step allocates for them. */
llmm_status cu_lora_table_reserve(void *state, uint32_t capacity, size_t n_slots, size_t max_rows) {
    cu_state *s = (cu_state *)state;
    if (s->in_step || capacity == 0 || n_slots == 0 || n_slots > UINT32_MAX || max_rows == 0 ||
        capacity > SIZE_MAX / sizeof(cu_lora_operand) / n_slots || max_rows > SIZE_MAX / 64 / LLMM_LORA_MAX_USES)
        return LLMM_ERR_INVALID_ARG;
    const size_t table = (size_t)capacity * n_slots * sizeof(cu_lora_operand);
    const size_t offset = (table + 255) / 256 * 256;
    const size_t bytes = offset + max_rows * LLMM_LORA_MAX_USES * (sizeof(uint32_t) + sizeof(float));
    llmm_status st = cu_status(use_device(s));
    if (st) return st;
    uint8_t *host = (uint8_t *)cu_pinned_alloc(bytes), *dev = NULL;
    if (!host || cudaMalloc((void **)&dev, bytes) != cudaSuccess) {
        cu_pinned_free(host);
        return LLMM_ERR_NO_MEMORY;
    }
    memset(host, 0, bytes); /* every entry empty: a NULL a */
    int err = cudaMemcpyAsync(dev, host, offset, cudaMemcpyHostToDevice, s->stream);
    if (!err) err = cudaStreamSynchronize(s->stream); /* also: nothing queued uses the old table */
    if (err) {
        cudaFree(dev);
        cu_pinned_free(host);
        return cu_status(err);
    }
    cudaFree(s->lora_table_dev);
    cu_pinned_free(s->lora_table_host);
    s->lora_table_dev = dev;
    s->lora_table_host = host;
    s->lora_table_cap = capacity;
    s->lora_n_slots = (uint32_t)n_slots;
    s->lora_rows_cap = max_rows;
    s->lora_uses_offset = offset;
    s->lora_max_rank = 0;
    return LLMM_OK;
}

/* One slot's operands as the kernels read them; 0 when they are not a valid pair. */
int lora_operand_from(const llmm_lora_operands *in, cu_lora_operand *out) {
    *out = cu_lora_operand{};
    if (!in->a) return 1;
    if (!lora_operand_ok(in->a) || !lora_operand_ok(in->bt) || in->a->ne1 != in->bt->ne1 || in->a->ne1 <= 0 ||
        in->a->ne1 > 65535 || in->a->ne0 <= 0 || in->bt->ne0 <= 0)
        return 0;
    *out = cu_lora_operand{in->a->data, in->bt->data, (uint32_t)in->a->ne1, in->a->type == LLMM_TYPE_F16,
                           in->bt->type == LLMM_TYPE_F16, in->alpha};
    return 1;
}

/* An entry of the table filled (or emptied) outside a step: its stretch of the mirror copied,
 * and waited for, so that the mirror is free for the next call and no step sees half of it. */
llmm_status cu_lora_table_set(void *state, uint32_t entry, const llmm_lora_operands *slots) {
    cu_state *s = (cu_state *)state;
    if (s->in_step || !s->lora_table_dev || entry >= s->lora_table_cap) return LLMM_ERR_INVALID_ARG;
    const size_t n = s->lora_n_slots, off = (size_t)entry * n * sizeof(cu_lora_operand);
    cu_lora_operand *mirror = (cu_lora_operand *)(s->lora_table_host + off);
    uint32_t rank = 0;
    for (size_t i = 0; i < n; i++) {
        cu_lora_operand op{};
        if (slots && !lora_operand_from(&slots[i], &op)) return LLMM_ERR_INVALID_ARG;
        rank = op.rank > rank ? op.rank : rank;
    }
    const llmm_lora_operands empty = {};
    for (size_t i = 0; i < n; i++) lora_operand_from(slots ? &slots[i] : &empty, &mirror[i]);
    s->lora_max_rank = rank > s->lora_max_rank ? rank : s->lora_max_rank;
    llmm_status st = cu_status(use_device(s));
    int err = st ? 0 : cudaMemcpyAsync(s->lora_table_dev + off, mirror, n * sizeof *mirror, cudaMemcpyHostToDevice,
                                       s->stream);
    if (!st && !err) err = cudaStreamSynchronize(s->stream);
    return st ? st : cu_status(err);
}

/* The lora_rows slot: per part its projection and expansion (kernels.h, lora.cu) over the
 * step's rows, recorded in a decode step like any op. The launches name the slot, the sizes,
 * the table buffer and the step's uses per row, never which adapter a row runs with: that is
 * the step's data (stage_lora_uses), so a decode step replays its graph whichever resident
 * adapters its rows take. */
llmm_status cu_lora_rows_op(void *state, const float *x, size_t n_in, const llmm_lora_slot_part *parts,
                            size_t n_parts, size_t row0, float *t, size_t t_stride) {
    cu_state *s = (cu_state *)state;
    if (!s->in_step || !x || !t || (n_parts && !parts) || row0 > s->desc.n_rows || n_in == 0 ||
        t_stride < s->lora_max_rank || t_stride > UINT32_MAX)
        return refuse(s, LLMM_ERR_INVALID_ARG);
    for (size_t pi = 0; pi < n_parts; pi++)
        if (!parts[pi].out || parts[pi].slot >= s->lora_n_slots || parts[pi].n_out == 0)
            return refuse(s, LLMM_ERR_INVALID_ARG);
    if (!s->lora_uses || row0 == s->desc.n_rows || n_parts == 0) return LLMM_OK;
    const size_t rows = row0 == 0 ? launch_rows(s, s->desc.n_rows) : s->desc.n_rows - row0;
    const size_t part_t = s->lora_rows_cap * LLMM_LORA_MAX_USES * t_stride; /* floats of one part's t */
    llmm_status st = LLMM_OK;
    /* pass 0: every part's projection (its own t); pass 1: the expansions */
    for (int pass = 0; pass < 2 && !st; pass++)
        for (size_t pi = 0; pi < n_parts && !st; pi++) {
            cu_op op = cu_op_zero(pass == 0 ? OP_LORA_ROWS_PROJECT : OP_LORA_ROWS_EXPAND);
            op.u[0] = parts[pi].slot;
            op.u[1] = s->lora_uses;
            op.u[2] = (uint32_t)t_stride;
            op.u[3] = s->lora_n_slots;
            op.n[0] = row0;
            op.n[1] = rows;
            op.n[2] = pass == 0 ? n_in : parts[pi].n_out;
            op.p[0] = pass == 0 ? (void *)x : (void *)parts[pi].out;
            op.p[1] = t + pi * part_t;
            op.p[3] = s->lora_table_dev;
            st = submit(s, op);
        }
    return st;
}

/* The recurrent layers' ops (short_conv.cu, delta_net.cu): recorded in a decode step like any
 * op, over the step's rows (its bucket, whose padding rows the kernels skip); each row's state
 * slot and position are the step buffer's (stage_state_slots). */
llmm_status cu_short_conv_op(void *state, const llmm_conv_batch *b) {
    cu_state *s = (cu_state *)state;
    if (!s->in_step || !b || b->n_rows != s->desc.n_rows || b->kernel == 0 || b->n_rows > UINT32_MAX)
        return refuse(s, LLMM_ERR_INVALID_ARG);
    if (b->n_rows == 0 || b->dim == 0) return LLMM_OK;
    cu_op op = cu_op_zero(OP_SHORT_CONV);
    op.p[0] = b->bcx;
    op.p[1] = b->out;
    op.p[2] = b->taps;
    op.p[3] = b->states;
    op.n[0] = b->seq_stride;
    op.n[1] = s->step_rows;
    op.u[0] = b->dim;
    op.u[1] = b->kernel;
    return submit(s, op);
}

/* The chunk of a gated_delta_net call: a step with sequences of several rows (a prompt, a
 * verify step) runs them in the CPU's chunks; a step of one row per sequence needs none. */
uint32_t delta_chunk(const cu_state *s) { return s->desc.n_seqs < s->desc.n_rows ? LLMM_DELTA_CHUNK : 0; }

llmm_status cu_gated_delta_net_op(void *state, const llmm_delta_batch *b) {
    cu_state *s = (cu_state *)state;
    if (!s->in_step || !b || b->n_rows != s->desc.n_rows) return refuse(s, LLMM_ERR_INVALID_ARG);
    if (b->n_rows == 0) return LLMM_OK;
    const cu_op op = delta_op(b, s->step_rows, delta_chunk(s));
    const llmm_delta_batch launched = delta_batch_of(&op);
    if (llmm__cu_gated_delta_net_check(&launched, op.u[3])) return refuse(s, LLMM_ERR_INVALID_ARG);
    return submit(s, op);
}

/* split_halves: qwen35's gated query rows (n_groups: the step's rows times the heads). */
llmm_status cu_split_halves_op(void *state, const float *src, float *a, float *b, size_t n_groups, size_t width) {
    cu_state *s = (cu_state *)state;
    if (!src || !a || !b) return refuse(s, LLMM_ERR_INVALID_ARG);
    if (!n_groups || !width) return LLMM_OK;
    cu_op op = cu_op_zero(OP_SPLIT_HALVES);
    op.p[0] = src;
    op.p[1] = a;
    op.p[2] = b;
    op.n[0] = launch_values(s, n_groups);
    op.n[1] = width;
    return submit(s, op);
}

void cu_stats(void *state, llmm_backend_stats *out) {
    const cu_state *s = (const cu_state *)state;
    cu_graph_counters c = {};
    if (s->graphs) cu_graphs_get_counters(s->graphs, &c);
    out->graph_capture_ms = c.capture_ms;
    out->graphs = c.graphs;
    out->graph_replays = c.replays;
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
    t.stats = cu_stats;
    t.sample = cu_sample_op;
    t.lora_delta = NULL; /* lora_rows: the table of resident adapters */
    t.short_conv = cu_short_conv_op;
    t.split_halves = cu_split_halves_op;
    t.gated_delta_net = cu_gated_delta_net_op;
    t.lora_table_reserve = cu_lora_table_reserve;
    t.lora_table_set = cu_lora_table_set;
    t.lora_rows = cu_lora_rows_op;
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
