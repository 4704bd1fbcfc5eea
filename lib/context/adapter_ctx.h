/* A context's adapters (adapter_apply.c): each sequence's list, a step's rows grouped by
 * adapter, and the working buffers of the low-rank matmuls. */
#ifndef LLMM_ADAPTER_CTX_H
#define LLMM_ADAPTER_CTX_H

#include "adapter/adapter.h"
#include "backend/backend.h"

/* The adapters one sequence runs with (references held). */
typedef struct llmm__seq_adapters {
    uint32_t n;
    llmm_adapter *a[LLMM__MAX_SEQ_ADAPTERS];
    float scale[LLMM__MAX_SEQ_ADAPTERS]; /* the user's scales */
} llmm__seq_adapters;

/* Matmuls over one input whose deltas one call computes (a layer's Q, K and V). */
#define LLMM__LORA_MAX_PARTS 3

/* A matmul output a delta is added to: the slot's weight produced out (rows of n_out). */
typedef struct llmm__lora_out {
    size_t slot;
    float *out;
    size_t n_out;
} llmm__lora_out;

/* A context's device copy of one adapter's operands (adapter_device.c). */
typedef struct llmm__lora_dev llmm__lora_dev;

/* Made by a context's first llmm_seq_set_adapters; until then the forward pass pays nothing. */
typedef struct llmm__lora_ctx {
    llmm__seq_adapters *seqs; /* (n_seq_max) */
    /* the current step: adapter u (of n_used) serves rows rows[first[u] .. first[u + 1]) in
     * ascending order, row k at the user scale row_scale[k] */
    uint32_t n_used;
    llmm_adapter **used;      /* (max_rows * LLMM__MAX_SEQ_ADAPTERS) */
    uint32_t *first;          /* (that + 1) */
    uint32_t *count;          /* (that) */
    uint32_t *rows;           /* (that) */
    float *row_scale;         /* (that) */
    /* one lora_delta call: its groups, their rows relative to the call's first row and their
     * multipliers (the user scale times alpha / rank) */
    llmm_lora_group *groups;  /* (LLMM__LORA_MAX_PARTS * that) */
    uint32_t *call_rows;      /* (LLMM__LORA_MAX_PARTS * that) */
    float *call_scale;        /* (LLMM__LORA_MAX_PARTS * that) */
    /* backend buffers, (max_rows, cols) each; tg (LLMM__LORA_MAX_PARTS * max_rows *
     * LLMM__MAX_SEQ_ADAPTERS, t_cols) */
    float *xg;                /* gathered inputs */
    float *tg;                /* A x */
    float *yg;                /* B (A x) */
    size_t x_cols, t_cols, y_cols;
    /* a backend with device memory: the adapters' operands there (adapter_device.c) */
    llmm__lora_dev *dev;
    size_t n_dev, dev_cap;
    /* a backend with a table of resident adapters (backend.h lora_table_*; adapter_device.c):
     * each device copy holds an entry of table_cap; slot_users counts, per weight slot, the
     * resident adapters that adapt it (the slots a step calls lora_rows for); each step row's
     * uses, as llmm_step.lora_entry and lora_scale, (max_rows * LLMM__MAX_SEQ_ADAPTERS) */
    uint32_t table_cap;       /* 0: no table (lora_delta's groups) */
    uint32_t *slot_users;     /* (n_slots) */
    size_t n_slots;
    uint32_t uses;            /* adapters of one sequence at most so far: the step's lora_uses */
    uint32_t *step_entry;
    float *step_scale;
} llmm__lora_ctx;

/* The adapter cache (adapter_cache.c) and its release. */
typedef struct llmm__adapter_cache llmm__adapter_cache;
void llmm__adapter_cache_free(llmm_context *ctx);

/* Release a context's adapter state and the references it holds (before backend shutdown). */
void llmm__lora_free(llmm_context *ctx);
/* seq's adapters, NULL when it runs with none. */
const llmm__seq_adapters *llmm__lora_seq(const llmm_context *ctx, llmm_seq_id seq);
/* seq runs without adapters (llmm_seq_free); dst runs with src's (llmm_seq_fork). */
void llmm__lora_seq_drop(llmm_context *ctx, llmm_seq_id seq);
void llmm__lora_seq_copy(llmm_context *ctx, llmm_seq_id src, llmm_seq_id dst);

/* Device copies (backends with LLMM_BACKEND_DEVICE_MEMORY): made for each of adapters[0..n) at
 * its first attach in the context (no-op when present; with a table of resident adapters an
 * entry is set, made free as adapter_device.c says); the slots of a's copy, NULL when there is none; copies whose
 * adapter nobody but the context holds any more released; all released (llmm__lora_free). */
llmm_status llmm__lora_dev_attach(llmm_context *ctx, llmm_adapter *const *adapters, size_t n);
/* a's entry in the backend's table of resident adapters, LLMM_LORA_NO_ENTRY when it has none. */
uint32_t llmm__lora_dev_entry(const llmm_context *ctx, const llmm_adapter *a);
const llmm__lora_pair *llmm__lora_dev_slots(const llmm_context *ctx, const llmm_adapter *a);
void llmm__lora_dev_sweep(llmm_context *ctx);
void llmm__lora_dev_free(llmm_context *ctx);

/* The table of resident adapters, made with the adapter state when the backend has one: as
 * many entries as the context's sequences can run with, plus one sequence's worth for a swap
 * (llmm_seq_set_adapters attaches the new adapters before it drops the old). */
llmm_status llmm__lora_table_create(llmm_context *ctx);

/* Group the rows of the step about to run (row r of sequence seqs[r]) by adapter, and name
 * each row's table entries in its descriptor (a backend with a table). */
void llmm__lora_plan(llmm_context *ctx, const llmm_seq_id *seqs, size_t n, llmm_step *step);
/* out (rows [row0, n) of the step, n_out wide) += each row's adapters' deltas of the weight in
 * slot, from x (the same rows, n_in wide) */
llmm_status llmm__lora_apply(llmm_context *ctx, size_t slot, const float *x, size_t n_in, float *out, size_t n_out,
                             size_t row0, size_t n);
/* The same for up to LLMM__LORA_MAX_PARTS matmuls over the same x (Q, K, V; gate, up). */
llmm_status llmm__lora_apply_outs(llmm_context *ctx, const llmm__lora_out *outs, size_t n_outs, const float *x,
                                  size_t n_in, size_t row0, size_t n);
/* x (n, n_embd) += the embedding table's deltas of the step's tokens */
llmm_status llmm__lora_apply_embd(llmm_context *ctx, float *x, size_t n);

#endif
