/* The backend conformance suite (backend_conformance.h) against the CPU backend under each
 * kernel table this machine and build have, forced through LLMM_CPU_KERNELS (a table the CPU
 * lacks is skipped: the backend would silently fall back to a lower one), and against the
 * handle backend (tests/support/handle_backend.h), whose buffers are not host addresses. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>

#include "support/backend_conformance.h"
#include "kernel_table.h"
#include "support/handle_backend.h"

/* cpu/kernel_table.c's names for LLMM_CPU_KERNELS, by cpu_isa */
static const char *const k_isa_names[CPU_ISA_COUNT] = {"scalar", "avx2", "avxvnni", "avx512", "neon", "dotprod", "amx"};

static cpu_isa g_isa; /* the table the next init forces */

static void force_table(void) { setenv("LLMM_CPU_KERNELS", k_isa_names[g_isa], 1); }

static void run_cpu(cpu_isa isa) {
    const cpu_kernels *k = llmm__cpu_kernels_get(isa);
    if (!k) {
        print_message("the %s kernel table: not on this CPU or build, skipped\n", k_isa_names[isa]);
        skip();
    }
    g_isa = isa;
    char label[32];
    snprintf(label, sizeof label, "cpu/%s", k_isa_names[isa]);
    const conformance_target t = {.label = label, .be = &llmm__cpu_backend, .before_init = force_table};
    /* the forced table is the one init picks: else this run would test another one */
    force_table();
    if (llmm__cpu_kernels_select(llmm__cpu_kernels_env_cap()) != k) fail_msg("LLMM_CPU_KERNELS=%s does not select it", label);
    conformance_run(&t);
    unsetenv("LLMM_CPU_KERNELS");
}

/* The handle backend counts seam violations; the suite's four calls of step ops outside a
 * step (check_outside_step) are the only ones it may see. */
static void test_handles(void **state) {
    (void)state;
    const unsigned long before = handle_backend_bad_pointers();
    const conformance_target t = {.label = "handles", .be = handle_backend_ops()};
    conformance_run(&t);
    const unsigned long bad = handle_backend_bad_pointers() - before;
    if (bad > 4) fail_msg("[handles] %lu seam violations, 4 expected (the ops called outside a step)", bad);
}

#define CPU_TABLE_TEST(name, isa)                                                                          \
    static void test_cpu_##name(void **state) {                                                          \
        (void)state;                                                                                     \
        run_cpu(isa);                                                                                    \
    }
CPU_TABLE_TEST(scalar, CPU_ISA_SCALAR)
#if defined(__x86_64__)
CPU_TABLE_TEST(avx2, CPU_ISA_AVX2)
CPU_TABLE_TEST(avxvnni, CPU_ISA_AVX_VNNI)
CPU_TABLE_TEST(avx512, CPU_ISA_AVX512)
CPU_TABLE_TEST(amx, CPU_ISA_AMX)
#endif
#if defined(__aarch64__)
CPU_TABLE_TEST(neon, CPU_ISA_NEON)
CPU_TABLE_TEST(dotprod, CPU_ISA_NEON_DOTPROD)
#endif

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cpu_scalar),
#if defined(__x86_64__)
        cmocka_unit_test(test_cpu_avx2),   cmocka_unit_test(test_cpu_avxvnni), cmocka_unit_test(test_cpu_avx512),
        cmocka_unit_test(test_cpu_amx),
#endif
#if defined(__aarch64__)
        cmocka_unit_test(test_cpu_neon),   cmocka_unit_test(test_cpu_dotprod),
#endif
        cmocka_unit_test(test_handles),
    };
    return cmocka_run_group_tests_name("backend conformance", tests, NULL, NULL);
}
