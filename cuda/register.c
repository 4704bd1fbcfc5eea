/* llmm_cuda_register (include/llmmini-cuda.h): the registration function of the static
 * archive, libllmmini-cuda.a. Only in the archives: the shared module (libllmmini-cuda.so) is
 * found by the core's loader instead, and links no core symbol, which this file's call to
 * llmm_backend_register would be. */
#include "backend/backend.h"
#include "llmmini-cuda.h"

/* The archive's copy of the module entry point (cuda/backend.cu). */
const llmm_backend_ops *llmm_backend_module(uint32_t core_api_version);

static const void *cuda_entry(uint32_t backend_api_version) { return llmm_backend_module(backend_api_version); }

LLMM_API llmm_status llmm_cuda_register(void) { return llmm_backend_register(LLMM_BACKEND_CUDA, cuda_entry); }
