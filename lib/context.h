/* A context: one backend instance, the KV store, activation buffers and the last logits. */
#ifndef LLMM_CONTEXT_H
#define LLMM_CONTEXT_H

#include "backend.h"
#include "kvcache.h"
#include "model.h"

/* Activation buffers in backend memory, each (max_rows, width). */
typedef struct llmm_activations {
    float *x;      /* residual stream (n_embd) */
    float *xb;     /* normed input / op output (max(n_embd, q_dim)) */
    float *q;      /* (n_head * head_dim) */
    float *k, *v;  /* (n_head_kv * head_dim) */
    float *att;    /* attention output (n_head * head_dim) */
    float *gate, *up; /* (n_ff) */
    float *logits; /* (n_vocab) */
} llmm_activations;

struct llmm_context {
    const llmm_model *model;
    llmm_context_params params;
    llmm_logger log;
    const llmm_backend_ops *be;
    void *be_state;
    llmm_kv_store kv;
    llmm_activations act;
    size_t max_rows;        /* rows one forward step handles: max(n_batch, n_seq_max) */
    /* host side of a step */
    int32_t *pos;           /* (max_rows) */
    llmm_seq_id *row_seq;   /* (max_rows) */
    llmm_kv_view *views;    /* (max_rows) */
    llmm_attn_row *attn_rows; /* (max_rows) */
    float *logits;          /* (logits_cap rows, n_vocab) */
    size_t logits_rows, logits_cap;
    char last_error[512];
};

/* Record a failure on ctx and return status. */
llmm_status ctx_fail(llmm_context *ctx, llmm_status status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
