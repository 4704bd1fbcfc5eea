/*
 * llmmini-cuda.h: the CUDA backend's registration for apps that link it statically
 * (libllmmini-cuda.a with libllmmini.a; include/llmmini.h, section "backends", gives the link
 * line). Apps that load the module (libllmmini-cuda.so) at run time do not need this header.
 */
#ifndef LLMMINI_CUDA_H
#define LLMMINI_CUDA_H

#include "llmmini.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Defined by libllmmini-cuda.a only: registers the CUDA backend it holds
 * (llmm_backend_register). Not in libllmmini; calling it without linking that archive fails
 * at link time. */
LLMM_API llmm_status llmm_cuda_register(void);

#ifdef __cplusplus
}
#endif
#endif /* LLMMINI_CUDA_H */
