/* A loaded model: the GGUF file, its metadata, hyper-parameters and vocabulary. */
#ifndef LLMM_MODEL_H
#define LLMM_MODEL_H

#include <pthread.h>

#include "base/common.h"
#include "format/gguf.h"
#include "text/vocab.h"

typedef struct llmm_hparams {
    uint32_t n_ctx_train;
    uint32_t n_embd;
    uint32_t n_layer;
    uint32_t n_head;
    uint32_t n_head_kv;
    uint32_t n_ff;
    uint32_t head_dim;  /* n_embd / n_head unless the metadata says otherwise */
    uint32_t n_rot;     /* rotated dimensions per head */
    float rope_base;
    float rope_freq_scale;   /* 1 / rope.scaling.factor for linear scaling, else 1 */
    float rope_attn_factor;  /* rope.scaling.attn_factor (LongRoPE), else 1 */
    uint32_t n_ctx_orig;     /* rope.scaling.original_context_length, 0 if absent */
    float norm_eps;
    float attn_softcap;      /* attn_logit_softcapping, 0 = off */
    float final_softcap;     /* final_logit_softcapping, 0 = off */
    uint32_t sliding_window; /* attention.sliding_window, 0 = none */
} llmm_hparams;

/* Per-model memory that the contexts of one model share on one backend kind (the CPU keeps
 * its packed weight copies there, so that every context reads one): the model creates it
 * zeroed and destroys the lock; the backend creates and frees what data points to, under
 * lock, counting its users (backend.h, llmm_backend_config.shared). */
typedef struct llmm_backend_shared {
    pthread_mutex_t lock;
    void *data;
    uint32_t users;
} llmm_backend_shared;

/* Entries of llmm_model.backend_shared: one per llmm_backend_kind but AUTO. */
#define LLMM_BACKEND_KINDS 3

struct llmm_model {
    llmm_allocator alloc_copy;
    const llmm_allocator *alloc; /* &alloc_copy, or NULL for the C library */
    llmm_logger log;
    gguf_file *gguf;
    char *architecture;
    char *name;
    char **meta_keys;   /* (gguf->n_kv) NUL-terminated copies */
    char **meta_strs;   /* (gguf->n_kv) copies of string values, NULL for other types */
    llmm_vocab vocab;
    llmm_hparams hp;
    int vocab_only;
    int repack_weights; /* llmm_model_params.repack_weights */
    double load_ms;
    uint64_t n_params;
    struct llmm_weights *weights; /* bound tensors; NULL for vocab-only models */
    llmm_backend_shared backend_shared[LLMM_BACKEND_KINDS]; /* by llmm_backend_kind */
    /* last error, shared by the threads using the model */
    pthread_mutex_t error_lock;
    char last_error[512];
};

/* Record a failure on a model (thread-safe) and return status. */
llmm_status llmm__model_fail(const llmm_model *m, llmm_status status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
