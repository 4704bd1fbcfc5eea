/* A backend module for tests (lib/backend_module.h): the handle backend (tests/support/handle_backend.h,
 * the CPU backend behind opaque buffers) posing as a CUDA backend, so that the core's module
 * loading, selection and unloading run on a machine without a GPU. One variant per refusal the
 * loader must make, chosen by a define:
 *   TEST_MODULE_BAD_VERSION  the table says LLMM_BACKEND_API_VERSION + 1
 *   TEST_MODULE_NO_ENTRY     no entry point exported
 *   TEST_MODULE_NO_DEVICE    available() says no
 *   TEST_MODULE_NULL         the entry point returns no table
 *   TEST_MODULE_NO_TYPES     loads, but supports_type says no to every weight type
 * The module carries its own copy of the core objects the handle backend needs (the CPU
 * backend among them); its version script exports the entry point alone, so no copy's symbol
 * meets the loading core's. */
#include <pthread.h>
#include <string.h>

#include "backend/backend_module.h"
#include "support/handle_backend.h"

/* The symbol the core looks up (LLMM_BACKEND_MODULE_ENTRY); its type is llmm_backend_module_fn. */
__attribute__((visibility("default"))) const llmm_backend_ops *llmm_backend_module(uint32_t core_api_version);

#if defined(TEST_MODULE_NO_ENTRY)

/* Something exported under another name, as a module built for another ABI might. */
__attribute__((visibility("default"))) int llmm_backend_module_v0(void);
int llmm_backend_module_v0(void) { return 0; }

#elif defined(TEST_MODULE_NULL)

const llmm_backend_ops *llmm_backend_module(uint32_t core_api_version) {
    (void)core_api_version;
    return NULL;
}

#else

/* The patched copy of the handle backend's table: that table is const, and a module's table
 * must be static storage that lives as long as the module. Made once, since contexts on any
 * threads may load the module at the same time. */
static llmm_backend_ops module_table;
static pthread_once_t module_table_once = PTHREAD_ONCE_INIT;

#ifdef TEST_MODULE_NO_DEVICE
static int no_device(void) { return 0; }
#endif
#ifdef TEST_MODULE_NO_TYPES
static int no_type(uint32_t type) { return (void)type, 0; }
#endif

static void make_table(void) {
    memcpy(&module_table, handle_backend_ops(), sizeof module_table);
    module_table.kind = LLMM_BACKEND_CUDA;
    module_table.name = "test-module";
#ifdef TEST_MODULE_BAD_VERSION
    module_table.api_version = LLMM_BACKEND_API_VERSION + 1;
#endif
#ifdef TEST_MODULE_NO_DEVICE
    module_table.available = no_device;
#endif
#ifdef TEST_MODULE_NO_TYPES
    module_table.supports_type = no_type;
#endif
}

const llmm_backend_ops *llmm_backend_module(uint32_t core_api_version) {
    if (core_api_version != LLMM_BACKEND_API_VERSION) return NULL;
    pthread_once(&module_table_once, make_table);
    return &module_table;
}

#endif
