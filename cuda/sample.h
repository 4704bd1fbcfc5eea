/* Token sampling on the device (sample.cu): lib/sampling/sampler.c's choice for each row of logits that
 * are already on the device, so that only the ids cross to the host. The glue turns the core's
 * requests (lib/backend/backend.h llmm_sample_request) into one host buffer with llmm__cu_sample_pack, uploads
 * it with one copy and passes the device copy to llmm__cu_sample. */
#ifndef LLMM_CUDA_SAMPLE_H
#define LLMM_CUDA_SAMPLE_H

#include <stddef.h>
#include <stdint.h>

#include "portable.h"

#include "backend/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One row's request as the kernel reads it. The packed buffer is these rows, then one uint32
 * array holding every row's penalized tokens and then every row's counts. */
typedef struct cu_sample_row {
    float temperature; /* <= 0: greedy */
    int32_t top_k;     /* 0: off */
    float top_p;       /* 1: off */
    float min_p;       /* 0: off */
    float repeat_penalty, frequency_penalty, presence_penalty;
    uint32_t n_penalized;  /* distinct tokens of the window, ascending */
    uint32_t penalized_at; /* index of the first in the array after the rows */
    uint32_t counts_at;    /* index of their counts in the same array */
    double uniform;        /* the sampler's draw in [0, 1) */
    double log_min_p;      /* log(min_p) by the host's libm, as lib/sampling/sampler.c computes it */
} cu_sample_row;

/* Bytes of the packed buffer for n_rows rows with total_penalized penalized tokens in all. */
size_t llmm__cu_sample_staging_bytes(size_t n_rows, size_t total_penalized);
/* Lays req[0..n_rows) out in staging (host, 8-byte aligned) exactly as llmm__cu_sample reads its
 * device copy; returns the bytes written, 0 when n_rows is 0 or staging_bytes is too small. */
size_t llmm__cu_sample_pack(const llmm_sample_request *req, size_t n_rows, void *staging, size_t staging_bytes);
/* Device scratch bytes llmm__cu_sample needs for n_rows rows of n_vocab logits. */
size_t llmm__cu_sample_scratch_bytes(size_t n_rows, size_t n_vocab);
/* out[r] (device, n_rows) = the token lib/sampling/sampler.c chooses from logits row r (device, (n_rows,
 * n_vocab)) for row r of packed (device copy of llmm__cu_sample_pack's buffer), or -1 when that row is
 * all -inf or NaN. scratch: llmm__cu_sample_scratch_bytes of device memory, 8-byte aligned. Returns 0
 * or a cudaError_t; n_vocab must be in [1, INT32_MAX]. */
int llmm__cu_sample(cudaStream_t stream, const float *logits, size_t n_rows, size_t n_vocab, const void *packed,
              int32_t *out, void *scratch);

#ifdef __cplusplus
}
#endif

#endif
