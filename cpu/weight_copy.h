/* A weight's copy in the CPU backend's own layout, made lazily the first time it pays and
 * shared by every context of the model that runs at the same time (the CPU backend packs
 * quantized weights into its x86 kernels' tile layout during the first decode steps,
 * cpu/packed_tiles.h). The slots live in the model's share for the CPU backend
 * (llmm_backend_shared, cpu_backend.c): the first context creates them, the last one to shut
 * down frees them with the copies they hold.
 *
 * Why lazily and not at load: making the copies costs about as much as reading the weights
 * twice, which a load (tens of milliseconds for a 0.5B file) and the first token of a prompt cannot
 * afford; the first decode steps can, a bounded share each. Why replacing pages and not adding them: where the
 * weight's bytes are the model's read-only file mapping, the backend drops the mapped pages it
 * has copied (MADV_DONTNEED), so the process keeps about one copy resident, not two; anything
 * that still reads the original (a context on a kernel table without packed kernels) faults
 * those pages back in from the file. The CPU backend's embedding lookup reads a tied output
 * matrix's rows from its copy, and prepare_weight copies the vectors out of the mapping, so
 * that nothing else does.
 *
 * The model is shared by contexts on any threads, so the slot is the one thing in it that
 * changes after load: state moves NONE -> MAKING -> READY (or NONE -> NEVER) once, through a
 * compare-and-swap by the context that makes the copy; data and layout are read only after an
 * acquire load of READY. A context that finds MAKING uses the original meanwhile. */
#ifndef LLMM_WEIGHT_COPY_H
#define LLMM_WEIGHT_COPY_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/tensor.h"

typedef enum llmm_copy_state {
    LLMM_COPY_NONE = 0,   /* not made yet */
    LLMM_COPY_MAKING = 1, /* one context is making it */
    LLMM_COPY_READY = 2,  /* data holds the copy */
    LLMM_COPY_NEVER = 3,  /* not made (no memory for it); the original serves */
} llmm_copy_state;

typedef struct llmm_weight_copy {
    _Atomic uint32_t state;      /* llmm_copy_state */
    uint32_t layout;             /* the maker's layout id (cpu/packed_tiles.h), set before READY */
    int release_source;          /* the original is the model's file mapping: copied pages may be dropped */
    void *data;                  /* the copy, set before READY */
    size_t bytes;
    void (*free_data)(void *data, size_t bytes); /* set with data; the model calls it when freed */
} llmm_weight_copy;

/* What the CPU backend keeps with a prepared weight (llmm_tensor.backend). */
typedef struct cpu_weight {
    llmm_weight_copy *copy; /* a matrix's slot in the model's shared copy set, or NULL */
    void *owned;            /* a vector's bytes copied out of the file mapping (= data), or NULL */
} cpu_weight;

/* The copy slot of a prepared weight, or NULL. */
static inline llmm_weight_copy *cpu_weight_copy(const llmm_tensor *w) {
    const cpu_weight *c = w->backend;
    return c ? c->copy : NULL;
}

#endif
