/* Which backend a context runs on (select.c): the built-in tables, then the modules. */
#ifndef LLMM_SELECT_H
#define LLMM_SELECT_H

#include "backend.h"

/* The built-in backend for a requested kind: AUTO picks the best available. NULL if none fits
 * (a table failing llmm__backend_table_ok is skipped). Modules are llmm__backend_acquire's. */
const llmm_backend_ops *llmm__backend_select(llmm_backend_kind kind);

/* A backend a context runs on: a built-in table (module NULL) or a loaded module's. */
typedef struct backend_ref {
    const llmm_backend_ops *ops;
    void *module; /* the module's dlopen handle, or NULL */
} backend_ref;

/* The backend for a requested kind, as llmm_context_create picks it. CPU: the built-in table,
 * no module touched. A kind with a module (CUDA; backend_module.c's table): a built-in table
 * of that kind when available, else its module, which must load, pass its checks and find a
 * device; else LLMM_ERR_BACKEND with the reason in d. AUTO: each module in the table's order,
 * and when none serves, one INFO line on log (NULL: silent) and the CPU. *out holds the
 * module until llmm__backend_release. */
llmm_status llmm__backend_acquire(llmm_backend_kind kind, const llmm_logger *log, backend_ref *out, llmm_diag *d);

/* Unload what llmm__backend_acquire loaded, after the shutdown of every state its table made. */
void llmm__backend_release(backend_ref *ref);

#endif
