/* LoRA adapters: a GGUF adapter file validated against its base model (adapter.c), the
 * adapters each sequence of a context runs with, and the low-rank deltas the forward pass adds
 * to its matmuls (adapter_apply.c).
 *
 * An adapted weight W (n_out rows of n_in) gets y = W x + scale * B (A x) with A (rank rows of
 * n_in) and B (n_out rows of rank). A is read in place from the adapter file where it is F32
 * or F16 (BF16 and Q8_0 are widened to F32 at load); B is transposed at load, so that the
 * backend's lora_delta expands t = A x into n_out columns with fused multiply-adds over
 * contiguous memory. A backend without lora_delta gets the deltas composed from its matmul
 * over A and B as the file holds them.
 * The embedding table is adapted the other way round (its "flipped layout"): A holds one row
 * of rank values per token and the delta of token t's row is scale * B A[t]. */
#ifndef LLMM_ADAPTER_H
#define LLMM_ADAPTER_H

#include <stdatomic.h>

#include "base/common.h"
#include "format/gguf.h"
#include "model/model.h"
#include "model/weights.h"

/* The adaptable matmuls of one layer, in the order of the forward pass. */
typedef enum llmm__lora_kind {
    LLMM__LORA_Q = 0,
    LLMM__LORA_K,
    LLMM__LORA_V,
    LLMM__LORA_O,
    LLMM__LORA_GATE,
    LLMM__LORA_UP,
    LLMM__LORA_DOWN,
    LLMM__LORA_PER_LAYER
} llmm__lora_kind;

/* Slots of the model-wide weights, after the n_layer * LLMM__LORA_PER_LAYER layer slots. */
enum { LLMM__LORA_OUTPUT = 0, LLMM__LORA_EMBD = 1, LLMM__LORA_GLOBALS = 2 };

/* Sequences run with at most this many adapters at once (summed). */
#define LLMM__MAX_SEQ_ADAPTERS 8

/* One adapted weight (or the slice of a fused one the forward pass uses as a weight). a.data
 * NULL: the slot is not adapted. Ordinary slot: a (rank rows of n_in), b (n_out rows of rank),
 * as the file holds them, and the operands of the backend's lora_delta: a_rows, A as F32 or
 * F16 rows (the file's where A is one of those, else widened to F32), and bt, B transposed
 * in the panels of backend.h's LLMM_LORA_PANEL (F16 when B is, else F32). Embedding slot: a (n_vocab rows of rank), b
 * (n_embd rows of rank), no a_rows or bt. */
typedef struct llmm__lora_pair {
    llmm_tensor a, b;
    llmm_tensor a_rows, bt;
    uint32_t rank;
} llmm__lora_pair;

struct llmm_adapter {
    const llmm_model *model;
    gguf_file *gguf;         /* the file; the pairs' data point into it */
    void *owned;             /* llmm_adapter_load_memory's copy of the caller's bytes, or NULL */
    void *copies;            /* one block: the a_rows and bt the file does not hold as they are */
    size_t owned_size;
    atomic_uint refs;        /* the app's (until llmm_adapter_free) plus one per attachment */
    float alpha;             /* adapter.lora.alpha; 0: none */
    uint32_t rank;           /* the largest rank of its pairs */
    uint32_t n_tensors;      /* adapted base tensors (a fused tensor counts once) */
    uint64_t bytes;          /* bytes of its A and B tensors and of its copies */
    uint64_t fingerprint;    /* FNV-1a of the file's tensor data and alpha: identifies the
                                adapter in prefix caches and saved states */
    size_t n_slots;          /* n_layer * LLMM__LORA_PER_LAYER + LLMM__LORA_GLOBALS */
    llmm__lora_pair *slots;  /* (n_slots) */
};

/* Slot index of a layer weight, of a model-wide one. */
static inline size_t llmm__lora_slot(uint32_t layer, llmm__lora_kind kind) {
    return (size_t)layer * LLMM__LORA_PER_LAYER + kind;
}
static inline size_t llmm__lora_global_slot(const struct llmm_adapter *a, int which) {
    return a->n_slots - LLMM__LORA_GLOBALS + (size_t)which;
}

/* The multiplier of B (A x) for a user scale: user_scale * alpha / rank, or user_scale when
 * the file has no alpha, in float as the reference engine computes it. */
static inline float llmm__lora_scale(const struct llmm_adapter *a, const llmm__lora_pair *p, float user_scale) {
    return a->alpha != 0.f ? user_scale * a->alpha / (float)p->rank : user_scale;
}

/* Take and drop a reference; the last drop frees the adapter. */
void llmm__adapter_retain(struct llmm_adapter *a);
void llmm__adapter_release(struct llmm_adapter *a);

/* Validate an opened adapter file against the model and build the adapter (takes ownership of
 * f, also on failure). BAD_FILE with the reason in d for anything the file gets wrong. */
llmm_status llmm__adapter_from_gguf(const llmm_model *m, gguf_file *f, llmm_adapter **out, llmm_diag *d);

#endif
