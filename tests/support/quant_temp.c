#include "support/quant_temp.h"

#include <stdarg.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "offline/quantize_file.h"

void quantize_to_temp(const gguf_file *src, const char *recipe, char *path, size_t size) {
    snprintf(path, size, "/tmp/llmm-quant-XXXXXX");
    const int fd = mkstemp(path);
    assert_true(fd >= 0);
    FILE *out = fdopen(fd, "wb");
    assert_non_null(out);
    llmm_quant_params p = {llmm__quant_recipe_find(recipe), 2, NULL, NULL};
    assert_non_null(p.recipe);
    llmm_diag d = {""};
    const llmm_status st = llmm__quantize_model(src, &p, out, &d);
    assert_int_equal(fclose(out), 0);
    if (st) {
        unlink(path);
        fail_msg("quantize to %s: %s", recipe, d.msg);
    }
}
