/* The device copies of a model's weights, made once per model and device and shared by every
 * context of that model on that device, so that device memory stays about the file's size
 * however many contexts run.
 *
 * The sets live in the model's share for the CUDA backend (llmm_backend_config.shared, a list
 * of one set per device in its data), under its lock: contexts of one model start and stop on
 * any threads. A set holds one slot per weight index (llmm__weights_list's order); the first context
 * that prepares an index uploads it, later ones get the same device pointer; the last context
 * of a device to leave frees that device's copies. Weights stay in their GGUF block formats,
 * which the kernels read directly. */
#ifndef LLMM_CUDA_DEVICE_WEIGHTS_H
#define LLMM_CUDA_DEVICE_WEIGHTS_H

#include <stddef.h>

#include "portable.h"

#include "backend/backend.h"
#include "backend/tensor.h"

typedef struct cu_weight_set cu_weight_set;

/* Join the set of this device in shared (made for the first context), or with shared NULL a
 * private one. The current device must be `device`. */
llmm_status cu_weights_join(llmm_backend_shared *shared, const llmm_allocator *al, int device, size_t n_weights,
                            cu_weight_set **out);
/* Leave it; the last user frees its device memory (call with the set's device current). */
void cu_weights_leave(llmm_backend_shared *shared, cu_weight_set *set);
/* How a weight is uploaded: through pinned host staging (bytes > 0, page-locked: cudaMallocHost)
 * on the caller's stream, a chunk at a time, each followed by a sync of that stream. Never the
 * legacy stream nor a synchronous cudaMemcpy: while another context's blocking stream captured
 * a graph, either would fail (cudaErrorStreamCaptureImplicit) and invalidate that capture. */
typedef struct cu_staging {
    void *pinned;
    size_t bytes;
    cudaStream_t stream;
} cu_staging;

/* The device copy of weight index (bytes bytes at host), uploaded now through staging if no
 * context did. */
llmm_status cu_weights_get(llmm_backend_shared *shared, cu_weight_set *set, size_t index, const void *host,
                           size_t bytes, const cu_staging *staging, void **dev);

#endif
