/* Loading a backend module: finding the file, dlopen, the entry point and the table's checks
 * (backend_module.h). Every failure names its reason, for LLMM_ERR_BACKEND under a forced
 * backend and the INFO line of the CPU fallback under AUTO. */
#define _GNU_SOURCE /* dladdr, dladdr1 */
#include "backend_module.h"

#include <dlfcn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifdef __GLIBC__
#include <link.h>
#endif

#define MODULE_PATH_MAX 4096

/* The modules there are, best first: a data table so that a second accelerator adds a row. */
static const struct module_kind {
    llmm_backend_kind kind;
    const char *label, *env, *file, *driver;
} module_kinds[] = {
    {LLMM_BACKEND_CUDA, "CUDA", LLMM_CUDA_MODULE_ENV, LLMM_CUDA_MODULE_FILE, LLMM_CUDA_DRIVER_FILE},
};

_Static_assert(sizeof(llmm_backend_module_fn) == sizeof(void *), "dlsym returns functions as void *");

/* Entry points of statically linked modules (llmm_backend_register), by kind. The library's
 * one piece of process-wide state: a static app's link is a fact about the process, not about
 * a model or a context, and an app registers once at start-up. Atomic, so that contexts being
 * created on other threads read either no entry or a whole one. */
static _Atomic(llmm_backend_entry_fn) registered_entries[LLMM_BACKEND_KINDS];
#define REGISTERED_LABEL "(statically linked, llmm_backend_register)"

static const struct module_kind *module_kind_of(llmm_backend_kind kind) {
    for (size_t i = 0; i < sizeof module_kinds / sizeof *module_kinds; i++)
        if (module_kinds[i].kind == kind) return &module_kinds[i];
    return NULL;
}

int llmm__backend_module_kind(size_t i, llmm_backend_kind *kind, const char **label) {
    if (i >= sizeof module_kinds / sizeof *module_kinds) return 0;
    *kind = module_kinds[i].kind;
    *label = module_kinds[i].label;
    return 1;
}

static const char *dl_why(void) {
    const char *e = dlerror();
    return e ? e : "unknown error";
}

/* The file of the object this code is linked into. dladdr names the main program by argv[0],
 * which may be a bare name found on PATH or not the program at all, so a static app's module
 * is looked for next to /proc/self/exe instead. */
static int core_object_path(char *buf, size_t cap) {
    Dl_info info;
    const void *self = (const void *)(uintptr_t)&core_object_path;
#ifdef __GLIBC__
    struct link_map *lm = NULL;
    if (!dladdr1(self, &info, (void **)&lm, RTLD_DL_LINKMAP) || !info.dli_fname) return 0;
    const int main_program = !lm || !lm->l_name || !lm->l_name[0];
#else
    if (!dladdr(self, &info) || !info.dli_fname) return 0;
    const int main_program = !strchr(info.dli_fname, '/');
#endif
    if (main_program) {
        const ssize_t n = readlink("/proc/self/exe", buf, cap - 1);
        if (n <= 0) return 0;
        buf[n] = '\0';
        return 1;
    }
    const int n = snprintf(buf, cap, "%s", info.dli_fname);
    return n > 0 && (size_t)n < cap;
}

/* file in the folder of the core's object, or 0 when that folder is unknown. */
static int path_next_to_core(const char *file, char *buf, size_t cap) {
    char core[MODULE_PATH_MAX];
    if (!core_object_path(core, sizeof core)) return 0;
    char *slash = strrchr(core, '/');
    if (!slash) return 0;
    slash[1] = '\0';
    const int n = snprintf(buf, cap, "%s%s", core, file);
    return n > 0 && (size_t)n < cap;
}

/* dlopen in the path order of backend_module.h; *path gets what was opened (or last tried). */
static llmm_status open_file(const struct module_kind *mk, void **handle, char *path, size_t cap, llmm_diag *d) {
    /* RTLD_NOW: a module missing a runtime library (libcudart) fails here, not mid-step */
    const int flags = RTLD_NOW | RTLD_LOCAL;
    const char *env = getenv(mk->env);
    if (env && env[0]) {
        snprintf(path, cap, "%s", env);
        if ((*handle = dlopen(env, flags))) return LLMM_OK;
        return llmm__diag_fail(d, LLMM_ERR_BACKEND, "cannot load the %s module %s=%s: %s", mk->label, mk->env, env,
                         dl_why());
    }
    /* no driver, no device: the module's runtimes are not worth mapping to find that out */
    void *driver = dlopen(mk->driver, RTLD_LAZY | RTLD_LOCAL);
    if (!driver) {
        snprintf(path, cap, "%s", mk->file);
        return llmm__diag_fail(d, LLMM_ERR_BACKEND, "no %s driver (%s), so the %s module is not loaded", mk->label, dl_why(),
                               mk->label);
    }
    dlclose(driver);
    char near[MODULE_PATH_MAX];
    const int have_near = path_next_to_core(mk->file, near, sizeof near);
    /* a file next to the core that exists but does not load is the answer, not a reason to
     * look further */
    if (have_near && access(near, F_OK) == 0) {
        snprintf(path, cap, "%s", near);
        if ((*handle = dlopen(near, flags))) return LLMM_OK;
        return llmm__diag_fail(d, LLMM_ERR_BACKEND, "cannot load the %s module %s: %s", mk->label, near, dl_why());
    }
    snprintf(path, cap, "%s", mk->file);
    if ((*handle = dlopen(mk->file, flags))) return LLMM_OK;
    if (have_near)
        return llmm__diag_fail(d, LLMM_ERR_BACKEND, "no %s module at %s or on the loader's path (%s not set): %s",
                         mk->label, near, mk->env, dl_why());
    return llmm__diag_fail(d, LLMM_ERR_BACKEND, "no %s module on the loader's path (%s not set): %s", mk->label, mk->env,
                     dl_why());
}

/* The module's table, checked before anything but api_version is read: a table of another
 * version may have another layout. */
static llmm_status check_table(const struct module_kind *mk, const char *path, const llmm_backend_ops *ops,
                               llmm_diag *d) {
    if (!ops)
        return llmm__diag_fail(d, LLMM_ERR_BACKEND, "the %s module %s has no backend for backend API version %u",
                         mk->label, path, LLMM_BACKEND_API_VERSION);
    if (ops->api_version != LLMM_BACKEND_API_VERSION)
        return llmm__diag_fail(d, LLMM_ERR_BACKEND, "the %s module %s has backend API version %u != %u (this library's)",
                         mk->label, path, ops->api_version, LLMM_BACKEND_API_VERSION);
    if (ops->kind != mk->kind)
        return llmm__diag_fail(d, LLMM_ERR_BACKEND, "the %s module %s holds a backend of kind %d, not %s", mk->label, path,
                         (int)ops->kind, mk->label);
    if (!ops->name || !llmm__backend_table_ok(ops))
        return llmm__diag_fail(d, LLMM_ERR_BACKEND,
                         "the %s module %s has an incomplete backend table or one without the core's KV layout",
                         mk->label, path);
    if (!ops->available())
        return llmm__diag_fail(d, LLMM_ERR_BACKEND, "the %s module %s (backend %s) found no usable device", mk->label,
                         path, ops->name);
    return LLMM_OK;
}

/* The table a registered entry gives, or NULL. */
static const llmm_backend_ops *registered_table(llmm_backend_entry_fn entry) {
    return (const llmm_backend_ops *)entry(LLMM_BACKEND_API_VERSION);
}

LLMM_API llmm_status llmm_backend_register(llmm_backend_kind kind, llmm_backend_entry_fn entry) {
    const struct module_kind *mk = module_kind_of(kind);
    if (!mk || !entry) return LLMM_ERR_INVALID_ARG;
    const llmm_backend_ops *ops = registered_table(entry);
    /* the device is checked when a context asks for it: registering happens at start-up,
     * also on machines without one */
    if (!ops || ops->api_version != LLMM_BACKEND_API_VERSION || ops->kind != kind || !ops->name ||
        !llmm__backend_table_ok(ops))
        return LLMM_ERR_BACKEND;
    atomic_store(&registered_entries[kind], entry);
    return LLMM_OK;
}

llmm_status llmm__backend_module_open(llmm_backend_kind kind, backend_module *out, llmm_diag *d) {
    *out = (backend_module){0};
    const struct module_kind *mk = module_kind_of(kind);
    if (!mk) return llmm__diag_fail(d, LLMM_ERR_BACKEND, "backend %d has no module", (int)kind);
    const llmm_backend_entry_fn linked = atomic_load(&registered_entries[kind]);
    if (linked) {
        const llmm_backend_ops *ops = registered_table(linked);
        llmm_status st = check_table(mk, REGISTERED_LABEL, ops, d);
        if (!st) out->ops = ops;
        return st;
    }
    char path[MODULE_PATH_MAX];
    void *h = NULL;
    llmm_status st = open_file(mk, &h, path, sizeof path, d);
    if (st) return st;
    dlerror(); /* clear, so that the dlsym's failure is told by its own message */
    void *sym = dlsym(h, LLMM_BACKEND_MODULE_ENTRY);
    if (!sym) {
        st = llmm__diag_fail(d, LLMM_ERR_BACKEND, "the %s module %s has no entry point %s: %s", mk->label, path,
                       LLMM_BACKEND_MODULE_ENTRY, dl_why());
    } else {
        llmm_backend_module_fn entry;
        memcpy(&entry, &sym, sizeof entry);
        const llmm_backend_ops *ops = entry(LLMM_BACKEND_API_VERSION);
        st = check_table(mk, path, ops, d);
        if (!st) *out = (backend_module){h, ops};
    }
    if (st) dlclose(h);
    return st;
}

void llmm__backend_module_close(backend_module *mod) {
    if (mod->handle) dlclose(mod->handle);
    *mod = (backend_module){0};
}
