#include "support/numerical_check.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "format/gguf.h"
#include "format/quant.h"
#include "support/fixtures.h"
#include "support/shared_data.h"

uint8_t *read_model_with_bad_norm(const char *rel, float bad, size_t stride, size_t *n) {
    char src[1024];
    uint8_t *data = (uint8_t *)read_whole_file(shared_path(src, sizeof src, rel), n);
    if (!data) fail_msg("cannot read %s", src);
    gguf_file *f = NULL;
    llmm_diag d = {{0}};
    assert_int_equal(llmm__gguf_open_memory(data, *n, NULL, &f, &d), LLMM_OK);
    const gguf_tensor *t = llmm__gguf_find_tensor(f, "output_norm.weight");
    assert_non_null(t);
    assert_int_equal(t->type, LLMM_TYPE_F32);
    const size_t at = (size_t)((const uint8_t *)t->data - data), count = (size_t)t->n_elements;
    llmm__gguf_close(f);
    for (size_t k = 0; k < count; k += stride) memcpy(data + at + k * sizeof bad, &bad, sizeof bad);
    return data;
}

/* stories260K.gguf with every 7th value of output_norm.weight set to bad, as a temp file whose
 * path goes to path; the caller unlinks it. */
static void write_damaged_model(float bad, char *path, size_t size) {
    size_t n = 0;
    uint8_t *data = read_model_with_bad_norm("models/stories260K.gguf", bad, 7, &n);
    snprintf(path, size, "/tmp/llmm-numerical-XXXXXX");
    const int fd = mkstemp(path);
    assert_true(fd >= 0);
    FILE *out = fdopen(fd, "wb");
    assert_non_null(out);
    assert_int_equal(fwrite(data, 1, n, out), n);
    assert_int_equal(fclose(out), 0);
    free(data);
}

typedef struct damaged {
    char path[64];
    llmm_model *model;
    llmm_context *ctx;
} damaged;

static void open_damaged(damaged *dm, float bad, const llmm_context_params *p) {
    write_damaged_model(bad, dm->path, sizeof dm->path);
    dm->model = load_model(dm->path, NULL);
    dm->ctx = make_context(dm->model, p);
}

static void close_damaged(damaged *dm) {
    llmm_context_free(dm->ctx);
    llmm_model_free(dm->model);
    unlink(dm->path);
}

static void expect_message(const char *msg, const char *part) {
    if (!strstr(msg, part)) fail_msg("the message \"%s\" does not say \"%s\"", msg, part);
}

/* llmm_generate stops before its first token, greedy and sampling alike. */
static void check_generate(float bad, const llmm_context_params *p) {
    damaged dm;
    open_damaged(&dm, bad, p);
    for (int greedy = 0; greedy < 2; greedy++) {
        llmm_sampler_params sp;
        llmm_sampler_params_default(&sp, sizeof sp);
        sp.temperature = greedy ? 0.0f : 0.8f;
        llmm_generate_params gp;
        llmm_generate_params_default(&gp, sizeof gp);
        gp.max_tokens = 8;
        gp.sampling = &sp;
        llmm_token out[8] = {-5, -5, -5, -5, -5, -5, -5, -5};
        gp.out_tokens = out;
        gp.out_capacity = 8;
        llmm_generate_stats stats = {.size = sizeof stats};
        assert_int_equal(llmm_generate(dm.ctx, "Once upon a time", &gp, &stats), LLMM_ERR_NUMERICAL);
        assert_int_equal(stats.n_generated, 0);
        assert_int_equal(out[0], -5);
        const char *msg = llmm_context_last_error(dm.ctx);
        expect_message(msg, "sequence 0");
        expect_message(msg, "position");
        /* an infinite weight makes inf - inf in the sums too: the first bad logit may be NaN */
        expect_message(msg, isnan(bad) ? "is NaN" : "logit");
    }
    close_damaged(&dm);
}

/* The row-level calls: llmm_sample on the prompt's logits, and llmm_decode_sample on the next
 * step, whose message names the row's sequence and the position of the token it was to choose. */
static void check_sample_and_decode_sample(const llmm_context_params *p) {
    damaged dm;
    open_damaged(&dm, NAN, p);
    const llmm_token prompt[3] = {1, 403, 407};
    assert_int_equal(llmm_prefill(dm.ctx, 0, prompt, 3, 0), LLMM_OK);
    const float *logits = NULL;
    size_t n_vocab = 0;
    assert_int_equal(llmm_logits(dm.ctx, 0, &logits, &n_vocab), LLMM_OK);
    llmm_sampler *s = NULL;
    assert_int_equal(llmm_sampler_create(NULL, &s), LLMM_OK);
    llmm_token t = -5;
    assert_int_equal(llmm_sample(s, logits, n_vocab, &t), LLMM_ERR_NUMERICAL);
    assert_int_equal(t, -5);
    expect_message(llmm_sampler_last_error(s), "NaN");

    const llmm_seq_id seq = 0;
    const llmm_token next = 410;
    llmm_token out = -5;
    assert_int_equal(llmm_decode_sample(dm.ctx, &seq, &next, 1, &s, &out), LLMM_ERR_NUMERICAL);
    assert_int_equal(out, -1);
    const char *msg = llmm_context_last_error(dm.ctx);
    expect_message(msg, "sequence 0, position 4");
    expect_message(msg, "NaN");
    /* the token stays appended and the logits readable, as the header says */
    assert_int_equal(llmm_logits(dm.ctx, 0, &logits, &n_vocab), LLMM_OK);
    assert_true(isnan(logits[0]));
    llmm_sampler_free(s);
    close_damaged(&dm);
}

void check_numerical_errors(const llmm_context_params *p) {
    check_generate(NAN, p);
    check_generate(INFINITY, p);
    check_sample_and_decode_sample(p);
}
