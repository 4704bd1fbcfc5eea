/* A loaded model: the GGUF file, its metadata, hyper-parameters and vocabulary. */
#ifndef LLMM_MODEL_H
#define LLMM_MODEL_H

#include <pthread.h>

#include "backend/tensor.h"
#include "base/common.h"
#include "hparams.h"
#include "format/gguf.h"
#include "text/vocab.h"

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
