/* Backend modules: a backend built as a shared library of its own (libllmmini-cuda.so) and
 * loaded at run time, so that the core never links a GPU runtime (docs/backends.md). An
 * app built against the CPU-only library gains the backend by installing the module.
 *
 * The module ABI is one exported C function, LLMM_BACKEND_MODULE_ENTRY:
 *
 *     const llmm_backend_ops *llmm_backend_module(uint32_t core_api_version);
 *
 * The core calls it with its LLMM_BACKEND_API_VERSION. The module returns its table (static
 * storage, valid until the module is unloaded), or NULL when it cannot serve a core of that
 * version. The core refuses a table of another api_version, of another kind, failing
 * llmm__backend_table_ok, or whose available() says no, each with the reason. */
#ifndef LLMM_BACKEND_MODULE_H
#define LLMM_BACKEND_MODULE_H

#include "backend.h"

#define LLMM_BACKEND_MODULE_ENTRY "llmm_backend_module"
typedef const llmm_backend_ops *(*llmm_backend_module_fn)(uint32_t core_api_version);

/* Where the CUDA module is looked for: the file this variable names (and only it, so that a
 * wrong path is an error rather than a silent other module), else this file next to the
 * object holding the core (libllmmini.so, or the executable the static archive is linked
 * into), else this name on the dynamic loader's path. */
#define LLMM_CUDA_MODULE_ENV "LLMM_CUDA_MODULE"
#define LLMM_CUDA_MODULE_FILE "libllmmini-cuda.so"
/* The NVIDIA driver's library. The module (not one named by LLMM_CUDA_MODULE) is loaded only
 * where it can be loaded: without it there is no device, and loading the module would map
 * cudart and cuBLASLt for nothing (about 150 MB resident and 0.15-0.45 s at the first context,
 * measured without a GPU). */
#define LLMM_CUDA_DRIVER_FILE "libcuda.so.1"

/* A loaded module and its checked table. Each user holds its own handle (the dynamic loader
 * counts them), so no state is shared between contexts. */
typedef struct backend_module {
    void *handle;
    const llmm_backend_ops *ops;
} backend_module;

/* The i-th kind that has a module, best first (AUTO tries them in this order), with the name
 * messages give it; 0 past the last. */
int llmm__backend_module_kind(size_t i, llmm_backend_kind *kind, const char **label);

/* Load the module for a backend kind (only LLMM_BACKEND_CUDA has one) and check its table;
 * a module the app registered (llmm_backend_register, a static link) is used without loading
 * anything (handle NULL). On failure LLMM_ERR_BACKEND with the reason in d, and nothing is
 * held. */
llmm_status llmm__backend_module_open(llmm_backend_kind kind, backend_module *out, llmm_diag *d);

/* Unload a module; after the shutdown of every state its table made. NULL handle: nothing. */
void llmm__backend_module_close(backend_module *mod);

#endif
