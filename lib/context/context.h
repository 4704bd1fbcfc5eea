/* A context: one backend instance, the paged KV cache, activation buffers and the last logits. */
#ifndef LLMM_CONTEXT_H
#define LLMM_CONTEXT_H

#include "backend/backend.h"
#include "base/latency_histogram.h"
#include "kv/kvcache.h"
#include "model/model.h"
#include "model/weights.h"

/* Activation buffers in backend memory, each (max_rows, width). */
typedef struct llmm_activations {
    float *x;      /* residual stream (n_embd) */
    float *xb;     /* normed input / op output (max(n_embd, q_dim)) */
    float *q;      /* (n_head * head_dim) */
    float *k, *v;  /* (n_head_kv * head_dim) */
    float *att;    /* attention output (n_head * head_dim) */
    float *gate, *up; /* (n_ff) */
    float *logits; /* (n_vocab) */
    float *mix;    /* recurrent layers and gated queries only (llmm_weights.mixer_floats wide, laid
                      out by forward.c); NULL without them */
} llmm_activations;

/* The recurrent state of the short-convolution (lfm2) or Gated DeltaNet (qwen35) layers, in
 * one backend buffer of three slots per sequence id, each for every recurrent layer
 * llmm_weights.state_floats (backend.h llmm_conv_batch, llmm_delta_batch): the live state; a
 * copy taken before a step changes it, put back when the step fails, so that a failed call
 * changes nothing; and a checkpoint, the state after the sequence's first checkpoint_len[seq]
 * tokens, which a speculative verify step takes so that rejected guesses can be dropped
 * (checkpoint.c); with the prefix cache on, a fourth group of n_seq slots holds the states at
 * the ends of cached prompt prefixes (prefix_state.c). */
#define LLMM__NO_CHECKPOINT UINT32_MAX
typedef struct llmm_recurrent {
    float *states;      /* buffer ((3 or 4) * n_seq * seq_floats), NULL: the model has no recurrent layers */
    size_t seq_floats;  /* one sequence id's state, every recurrent layer */
    size_t layer_floats;
    uint32_t n_seq;
    uint32_t *checkpoint_len; /* (n_seq) the checkpoint's position, or LLMM__NO_CHECKPOINT */
    /* with the prefix cache, n_seq more slots after the checkpoints: states at the end of
     * cached prompt prefixes (prefix_state.c), by the prefix's cache key (0: empty) */
    uint64_t *prefix_key;  /* (n_seq), NULL without the prefix cache */
    uint64_t *prefix_used; /* (n_seq) when each was last stored or used: the oldest goes first */
    uint64_t prefix_clock;
} llmm_recurrent;

struct llmm_context {
    const llmm_model *model;
    llmm_context_params params;
    llmm_logger log;
    const llmm_backend_ops *be;
    void *be_state;
    void *be_module;        /* dlopen handle of the module be lives in, or NULL: closed after shutdown */
    llmm_weights w;         /* the model's weights as the backend prepared them (own layers array) */
    llmm_weight_ref *prepared; /* llmm__weights_list(&w): the first n_prepared are the backend's to release */
    size_t n_prepared;
    llmm_kv_store kv;
    llmm_activations act;
    llmm_recurrent rec;
    size_t max_rows;        /* rows one forward step handles: max(n_batch, n_seq_max) */
    /* host side of a step: the arrays of its descriptor (backend.h llmm_step) */
    int32_t *pos;           /* (max_rows) */
    llmm_seq_id *row_seq;   /* (max_rows) the sequence id of each row */
    uint32_t *step_row_seq; /* (max_rows) */
    llmm_seq_id *step_seq_ids; /* (max_rows) */
    const uint32_t **step_tables; /* (max_rows) */
    uint32_t *step_n_blocks; /* (max_rows) */
    llmm_sample_request *sample_reqs; /* (max_rows) llmm_decode_sample's rows for the backend */
    int32_t *sampled;       /* (max_rows) the backend's answers */
    uint64_t (*sample_rng)[4]; /* (max_rows) each row's sampler RNG before its draw */
    llmm_kv_layout kv_layout;
    int warming; /* inside llmm_context_warmup: steps are marked llmm_step.warmup */
    float *logits;          /* (logits_cap rows, n_vocab) */
    size_t logits_rows, logits_cap;
    int logits_on_device;   /* the last step's logits_rows rows are still only in act.logits:
                               llmm_decode_sample leaves them there until llmm_logits asks */
    /* work done, for llmm_context_get_stats */
    uint64_t tokens_prefilled, tokens_decoded, prefix_hits;
    double prefill_ms, decode_ms;
    /* cold start (llmm_context_stats): set once, except warmup_ms (summed) */
    double module_load_ms, backend_init_ms, weights_ms, warmup_ms, first_token_ms;
    /* latency distributions (llmm_context_stats) */
    llmm_latency_histogram request_first_token, inter_token, step_latency;
    struct llmm__lora_ctx *lora; /* adapters (adapter_ctx.h); NULL until the first llmm_seq_set_adapters */
    struct llmm__adapter_cache *acache; /* adapters by path (adapter_cache.c); NULL until one is registered */
    char last_error[512];
};

/* Size of llmm_context_params in its first version (0.1): older callers pass this much. */
#define CTX_PARAMS_V1_SIZE offsetof(llmm_context_params, kv_block_size)

/* What a context with given params needs: the KV configuration and the bytes of each part.
 * Shared by llmm_context_create and the estimates. What the backend allocates (kv_pool,
 * activations, scratch) is where its buffers live: device memory with
 * LLMM_BACKEND_DEVICE_MEMORY, where the backend then also holds its own copy of the weights
 * (weights); the rest is host memory the forward pass and the caller read. */
typedef struct ctx_plan {
    kv_config kv;
    llmm_step_shape shape;
    size_t kv_pool, kv_host, activations, step_host, logits, scratch, fixed;
    size_t recurrent;    /* llmm_recurrent.states: 0 without recurrent layers */
    size_t weights;      /* 0 on a host-memory backend: it reads the model's, shared by contexts */
    size_t host, device; /* the parts above by side; host + device = llmm__ctx_plan_total */
} ctx_plan;

/* Check params (filling in defaults such as n_ctx) and plan the context's memory. */
llmm_status llmm__ctx_plan_for(const llmm_model *m, llmm_context_params *p, const llmm_backend_ops *be, ctx_plan *plan,
                         llmm_diag *d);
size_t llmm__ctx_plan_total(const ctx_plan *plan);

/* llmm_context_create on the given backend table (NULL: the one params->backend selects), for
 * tests that run the core over a backend of their own. */
llmm_status llmm__context_create_on(const llmm_model *model, const llmm_context_params *params, const llmm_backend_ops *be,
                              llmm_context **out);

/* Undo what creation did, as far as it went (context_free.c): adapters, buffers, the KV pool,
 * prepared weights, the backend's state and module. The struct itself stays. */
void llmm__ctx_teardown(llmm_context *ctx);

/* Record a failure on ctx and return status. */
llmm_status llmm__ctx_fail(llmm_context *ctx, llmm_status status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Copy logits llmm_decode_sample left on the backend to the host rows llmm_logits reads, before
 * anything else runs a step over act.logits. */
llmm_status llmm__ctx_settle_logits(llmm_context *ctx);
/* Make room for `rows` rows of host logits (NO_MEMORY, recorded, when it cannot). */
llmm_status llmm__ctx_ensure_logit_rows(llmm_context *ctx, size_t rows);
/* Copy logits rows [0, m) of the step just run to host rows starting at dst_row. */
llmm_status llmm__ctx_fetch_logits(llmm_context *ctx, size_t dst_row, size_t m);
/* A decode or verify step the app waited for, begun at t0 (llmm__time_now_ms): its wall time
 * into the step latencies of llmm_context_stats, unless it is a warm-up step. */
void llmm__ctx_note_step(llmm_context *ctx, double t0);
/* Recurrent state (recurrent.c): bytes for a model and n_seq sequences; allocation; a
 * sequence's state copied to another (fork); the states of the given sequences saved before a
 * step and put back after a failed one. All no-ops for models without recurrent layers. */
size_t llmm__recurrent_bytes(const llmm_model *m, uint32_t n_seq, int prefix_cache);
llmm_status llmm__recurrent_init(llmm_context *ctx, llmm_diag *d);
void llmm__recurrent_free(llmm_context *ctx);
llmm_status llmm__recurrent_copy(llmm_context *ctx, llmm_seq_id src, llmm_seq_id dst);
llmm_status llmm__recurrent_save(llmm_context *ctx, const llmm_seq_id *seqs, size_t n);
void llmm__recurrent_restore(llmm_context *ctx, const llmm_seq_id *seqs, size_t n);
/* State checkpoints (checkpoint.c), no-ops without recurrent layers: take one of each given
 * sequence at its current length; forget seq's; put seq's state back to its checkpoint and keep
 * the tokens before it (0 < checkpoint_len <= len, checked by the caller). */
llmm_status llmm__checkpoint_take(llmm_context *ctx, const llmm_seq_id *seqs, size_t n);
void llmm__checkpoint_forget(llmm_context *ctx, llmm_seq_id seq);
llmm_status llmm__checkpoint_return(llmm_context *ctx, llmm_seq_id seq);
/* Keep seq's first n_keep tokens, whatever its state: without recurrent layers a truncation;
 * with them, back to the checkpoint and the tokens from it to n_keep computed again (no logits:
 * the host's rows of the last step stay readable). UNSUPPORTED (recorded) when no checkpoint
 * lies in [1, n_keep] or more than LLMM__REWIND_MAX tokens would be recomputed; on a failed
 * recomputation the sequence is left at its checkpoint (recorded). */
#define LLMM__REWIND_MAX 64u
llmm_status llmm__seq_rewind(llmm_context *ctx, llmm_seq_id seq, uint32_t n_keep);
/* Prompt prefixes of recurrent models in the prefix cache (prefix_state.c). attach: for an
 * empty seq, the cached blocks of the longest prefix of tokens[0, n) whose end state is stored,
 * that state made seq's; returns the tokens attached (0: none, seq stays empty). boundary: where
 * a prefill of tokens[0, n) into seq from `from` should stop once to store the state at the end
 * of its last full block (0: nowhere). store: the state after seq's tokens, under their key. */
uint32_t llmm__prefix_state_attach(llmm_context *ctx, llmm_seq_id seq, const llmm_token *tokens, uint32_t n);
uint32_t llmm__prefix_state_boundary(const llmm_context *ctx, llmm_seq_id seq, uint32_t from, uint32_t n);
void llmm__prefix_state_store(llmm_context *ctx, llmm_seq_id seq);
/* INVALID_ARG (recorded) unless 0 <= seq < n_seq_max. */
llmm_status llmm__ctx_check_seq(llmm_context *ctx, llmm_seq_id seq);

#endif
