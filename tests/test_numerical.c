/* LLMM_ERR_NUMERICAL from a model with NaN or +inf norm weights, on the CPU backend
 * (tests/support/numerical_check.h). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "llmmini.h"
#include "support/numerical_check.h"

static void test_broken_model_gives_no_token(void **state) {
    (void)state;
    llmm_context_params p;
    llmm_context_params_default(&p, sizeof p);
    p.n_ctx = 64;
    p.n_threads = 1;
    check_numerical_errors(&p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_broken_model_gives_no_token),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
