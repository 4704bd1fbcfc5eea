/* Internal entry point to the sampler for the library's own callers (llmm_generate). */
#ifndef LLMM_SAMPLER_H
#define LLMM_SAMPLER_H

#include "common.h"

/* llmm_sampler_create with an allocator (NULL = the C library; copied, so it need not
 * outlive the call, but its functions and user data must outlive the sampler) and a diag
 * (may be NULL) that receives why the params were rejected. */
llmm_status sampler_create(const llmm_sampler_params *params, const llmm_allocator *alloc,
                           llmm_sampler **out, llmm_diag *d);

#endif
