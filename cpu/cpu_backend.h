/* CPU backend internals shared by its op files. */
#ifndef LLMM_CPU_BACKEND_H
#define LLMM_CPU_BACKEND_H

#include "backend.h"
#include "threadpool.h"

typedef struct cpu_state {
    llmm_threadpool *pool;
    const llmm_allocator *alloc;
    void *scratch; /* activations converted for vec_dot, attention scores */
    size_t scratch_bytes;
} cpu_state;

/* Below this many multiply-adds an op runs on the calling thread alone: measured on
 * stories260K, where 2 threads were slower than 1 before this cut-off. */
#define CPU_PARALLEL_MIN_WORK 32768

/* Scratch of at least bytes, reused across calls. */
void *cpu_scratch(cpu_state *s, size_t bytes);

/* [start, end) of n items for thread ith of nth. */
static inline void cpu_split(size_t n, int ith, int nth, size_t *start, size_t *end) {
    size_t per = (n + (size_t)nth - 1) / (size_t)nth;
    *start = LLMM_MIN(n, per * (size_t)ith);
    *end = LLMM_MIN(n, *start + per);
}

llmm_status cpu_matmul(void *state, const llmm_tensor *w, const float *x, size_t n_rows, float *out);
llmm_status cpu_attention(void *state, const llmm_attn_batch *b);
llmm_status cpu_embed(void *state, const llmm_tensor *table, const llmm_token *ids, size_t n, float *out);
llmm_status cpu_rms_norm(void *state, const float *x, const float *weight, float *out, size_t n_rows, size_t dim,
                         float eps);
llmm_status cpu_rope(void *state, float *x, size_t n_rows, size_t n_heads, size_t head_dim, const int32_t *pos,
                     const llmm_rope_params *rp);
llmm_status cpu_add_rows(void *state, float *x, const float *bias, size_t n_rows, size_t dim);
llmm_status cpu_scale(void *state, float *x, size_t n, float s);
llmm_status cpu_softcap(void *state, float *x, size_t n, float cap);
llmm_status cpu_glu(void *state, float *gate, const float *up, size_t n, llmm_activation act);
llmm_status cpu_add(void *state, float *dst, const float *src, size_t n);
llmm_status cpu_kv_write(void *state, const llmm_kv_view *views, const int32_t *pos, size_t n_rows, const float *k,
                         const float *v, size_t kv_dim);

#endif
