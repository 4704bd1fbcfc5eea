/* Choosing a context's backend: the built-in tables, then the modules (backend_module.h) in
 * the order of their table, so that another accelerator is one row there. */
#include "select.h"

#include "backend_module.h"

/* Best first: AUTO takes the first available. */
static const llmm_backend_ops *const backends[] = {
    &llmm__cpu_backend,
};

const llmm_backend_ops *llmm__backend_select(llmm_backend_kind kind) {
    for (size_t i = 0; i < sizeof backends / sizeof *backends; i++) {
        const llmm_backend_ops *b = backends[i];
        if (!llmm__backend_table_ok(b)) continue;
        if ((kind == LLMM_BACKEND_AUTO || kind == b->kind) && b->available()) return b;
    }
    return NULL;
}

llmm_status llmm__backend_acquire(llmm_backend_kind kind, const llmm_logger *log, backend_ref *out, llmm_diag *d) {
    *out = (backend_ref){0};
    const llmm_backend_ops *builtin = llmm__backend_select(kind);
    /* a built-in table of the kind asked for wins; under AUTO the CPU is the last resort,
     * after the modules */
    if (builtin && !(kind == LLMM_BACKEND_AUTO && builtin->kind == LLMM_BACKEND_CPU)) {
        out->ops = builtin;
        return LLMM_OK;
    }
    llmm_diag why = {{0}};
    int tried = 0;
    llmm_backend_kind module_kind;
    const char *label;
    for (size_t i = 0; llmm__backend_module_kind(i, &module_kind, &label); i++) {
        if (kind != LLMM_BACKEND_AUTO && kind != module_kind) continue;
        backend_module mod;
        tried = 1;
        if (!llmm__backend_module_open(module_kind, &mod, &why)) {
            *out = (backend_ref){mod.ops, mod.handle};
            return LLMM_OK;
        }
        if (kind != LLMM_BACKEND_AUTO)
            return llmm__diag_fail(d, LLMM_ERR_BACKEND, "the %s backend is not available: %s", label, why.msg);
    }
    if (kind != LLMM_BACKEND_AUTO)
        return llmm__diag_fail(d, LLMM_ERR_BACKEND, "backend %d is not available in this build or on this machine",
                               (int)kind);
    if (tried) llmm__log_msg(log, LLMM_LOG_INFO, "backend: AUTO runs on the CPU: %s", why.msg);
    out->ops = llmm__backend_select(LLMM_BACKEND_CPU);
    return out->ops ? LLMM_OK : llmm__diag_fail(d, LLMM_ERR_BACKEND, "the CPU backend is not available");
}

void llmm__backend_release(backend_ref *ref) {
    backend_module mod = {ref->module, ref->ops};
    llmm__backend_module_close(&mod);
    *ref = (backend_ref){0};
}
