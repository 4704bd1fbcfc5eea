/* A statically linked CUDA backend (include/llmmini-cuda.h): this program links
 * libllmmini.a with the CUDA archive (in make test the emulated one, libllmmini-cuda-emu.a;
 * on a GPU machine libllmmini-cuda.a with cudart_static, as $(BUILD)/tests/device/) and calls
 * llmm_cuda_register. Contexts asking for CUDA must then run on it without loading any module,
 * even with LLMM_CUDA_MODULE naming a file that does not exist, and give the stories260K
 * goldens. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support/golden_check.h"
#include "support/fixtures.h"
#include "llmmini-cuda.h"
#include "support/shared_data.h"

static void test_registered_backend_runs_the_goldens(void **state) {
    (void)state;
    setenv("LLMM_CUDA_MODULE", "/nonexistent/libllmmini-cuda.so", 1);
    llmm_model *m = load_model("stories260K.gguf", NULL);
    llmm_context_params p;
    llmm_context_params_default(&p, sizeof p);
    p.backend = LLMM_BACKEND_CUDA;
    p.kv_type = LLMM_KV_F32;
    p.n_ctx = 256;
    p.n_threads = 1;
    llmm_context *c = NULL;
    /* before registering: the module named is missing */
    assert_int_equal(llmm_context_create(m, &p, &c), LLMM_ERR_BACKEND);
    assert_int_equal(llmm_cuda_register(), LLMM_OK);
    assert_int_equal(llmm_cuda_register(), LLMM_OK); /* again: harmless */
    assert_int_equal(llmm_context_create(m, &p, &c), LLMM_OK);
    llmm_context_stats st = {.size = sizeof st};
    assert_int_equal(llmm_context_get_stats(c, &st), LLMM_OK);
    assert_true(st.module_load_ms == 0); /* nothing was loaded */
    /* the golden prompts of this file through the registered backend */
    size_t n = 0;
    for (size_t i = 0; i < n_golden_cases; i++) {
        const golden_case *gc = &golden_cases[i];
        if (strcmp(gc->model, "stories260K.gguf") != 0) continue;
        golden_run g;
        assert_int_equal(golden_load("golden/stories260K", gc->golden, &g), 0);
        assert_int_equal(llmm_seq_clear(c, 0), LLMM_OK);
        const golden_result r = golden_compare(m, c, &g, gc->prompt);
        print_message("%-24s static CUDA, KV f32: max |logit diff| %.2e, greedy agreement %zu/%zu\n", gc->golden,
                      r.max_logit_diff, r.agree, g.n_generated);
        assert_true(r.max_logit_diff < 1e-3);
        assert_int_equal(r.agree, g.n_generated);
        golden_free(&g);
        n++;
    }
    assert_true(n >= 3);
    llmm_context_free(c);
    llmm_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_registered_backend_runs_the_goldens),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
