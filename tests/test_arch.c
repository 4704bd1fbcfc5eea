/* Every architecture row against the reference engine's tiny synthetic models
 * (golden/arch), plus the ops those rows added to the backend table. */
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

#include "backend/backend.h"
#include "cpu_backend.h"
#include "kernel_table.h"
#include "llmmini.h"
#include "support/golden_check.h"
#include "support/rng.h"
#include "support/shared_data.h"

/* cpu/kernel_table.c's names for LLMM_CPU_KERNELS, by cpu_isa */
static const char *const k_isa_names[CPU_ISA_COUNT] = {"scalar", "avx2", "avxvnni", "avx512", "neon", "dotprod", "amx"};

/* Under each kernel table this CPU and build have, forced as test_backend_conformance forces
 * them: an architecture's new steps must hold on every table, not only on the best. */
static void test_architectures_match_reference(void **state) {
    (void)state;
    for (int isa = 0; isa < CPU_ISA_COUNT; isa++) {
        if (!llmm__cpu_kernels_get((cpu_isa)isa)) continue;
        setenv("LLMM_CPU_KERNELS", k_isa_names[isa], 1);
        char label[32];
        snprintf(label, sizeof label, "cpu/%s", k_isa_names[isa]);
        for (size_t a = 0; a < n_arch_cases; a++)
            for (size_t p = 0; p < n_arch_prompts; p++)
                check_arch_prompt(&arch_cases[a], arch_prompts[p].name, arch_prompts[p].text, LLMM_BACKEND_CPU, label);
    }
    unsetenv("LLMM_CPU_KERNELS");
}

/* A copy of a shared file in a temp file (path in tmp), with n bytes replaced at `skip` bytes
 * after the first occurrence of marker. */
static void write_patched(const char *rel, const char *marker, size_t skip, const void *patch, size_t n, char *tmp) {
    char path[1024];
    size_t len;
    char *bytes = read_whole_file(shared_path(path, sizeof path, rel), &len);
    assert_non_null(bytes);
    const size_t key_len = strlen(marker);
    char *at = NULL;
    for (size_t i = 0; !at && i + key_len <= len; i++)
        if (memcmp(bytes + i, marker, key_len) == 0) at = bytes + i;
    assert_non_null(at);
    assert_true((size_t)(at - bytes) + key_len + skip + n <= len);
    memcpy(at + key_len + skip, patch, n);
    int fd = mkstemp(tmp);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, bytes, len), (ssize_t)len);
    close(fd);
    free(bytes);
}

/* Loads path expecting status want and a message containing want_msg. */
static void expect_load_failure(const char *path, int vocab_only, llmm_status want, const char *want_msg) {
    char err[256] = "";
    llmm_model_params p;
    llmm_model_params_default(&p, sizeof p);
    p.error_buf = err;
    p.error_buf_size = sizeof err;
    p.vocab_only = vocab_only;
    llmm_model *m = NULL;
    assert_int_equal(llmm_model_load(path, &p, &m), want);
    assert_null(m);
    if (!strstr(err, want_msg)) fail_msg("load error '%s' does not name '%s'", err, want_msg);
}

/* A file of an architecture without a row fails at load and names it. */
static void test_unknown_architecture_rejected(void **state) {
    (void)state;
    char tmp[] = "/tmp/llmm-arch-XXXXXX";
    /* the string's type and length come between the key and the value */
    write_patched("golden/arch/tiny-llama.gguf", "general.architecture", 4 + 8, "mamba", 5, tmp);
    expect_load_failure(tmp, 0, LLMM_ERR_UNSUPPORTED, "'mamba'");
    llmm_model_params p;
    llmm_model_params_default(&p, sizeof p);
    p.vocab_only = 1; /* the tokenizer alone still loads */
    llmm_model *m = NULL;
    assert_int_equal(llmm_model_load(tmp, &p, &m), LLMM_OK);
    llmm_model_free(m);
    unlink(tmp);
}

/* The new rows' files, damaged one way each (lfm2, qwen35: absurd convolution and state sizes
 * too): refused at load, with a message naming the fault.
 * A key's value sits 4 bytes (its type) after the key; a tensor's ne[0] 4 bytes (n_dims)
 * after its name, ne[1] 8 bytes further. */
static void test_hostile_arch_files(void **state) {
    (void)state;
    const float minus_one = -1.f, minus_eight = -8.f;
    const uint32_t many_layers = 100000;
    const uint64_t half_head = 16, odd_kv_rows = 24, two_taps = 2;
    const uint32_t no_taps = 0, many_taps = 1000;
    const int32_t one_kv_head = 1;
    const struct {
        const char *file, *marker;
        size_t skip;
        const void *patch;
        size_t n;
        const char *want_msg;
    } cases[] = {
        {"tiny-gemma3", "blk.5.post_ffw_norm.weigh", 0, "x", 1, "'blk.5.post_ffw_norm.weight' is missing"},
        {"tiny-gemma3", "blk.0.attn_q_norm.weight", 4, &half_head, 8, "'blk.0.attn_q_norm.weight' has shape"},
        {"tiny-gemma3", "gemma3.rope.freq_base", 4, &minus_one, 4, "rope bases must be positive"},
        {"tiny-gemma3", "gemma3.rope.scaling.factor", 4, &minus_eight, 4, "rope.scaling.factor -8"},
        {"tiny-smollm3", "smollm3.block_count", 4, &many_layers, 4, "100000 layers is implausible"},
        {"tiny-smollm3", "blk.3.attn_k.weight", 12, &odd_kv_rows, 8, "'blk.3.attn_k.weight' has shape"},
        {"tiny-lfm2", "lfm2.shortconv.l_cache", 4, &no_taps, 4, "short convolution of 0 taps"},
        {"tiny-lfm2", "lfm2.shortconv.l_cache", 4, &many_taps, 4, "short convolution of 1000 taps"},
        {"tiny-lfm2", "blk.2.shortconv.out_proj.weigh", 0, "x", 1, "'blk.2.shortconv.out_proj.weight' is missing"},
        {"tiny-lfm2", "blk.0.shortconv.conv.weight", 4, &two_taps, 8, "'blk.0.shortconv.conv.weight' has shape"},
        /* the array's type, element type and count, then entry 1 */
        {"tiny-lfm2", "lfm2.attention.head_count_kv", 4 + 4 + 8 + 4, &one_kv_head, 4, "layer 1 has 1 KV heads"},
        {"tiny-qwen35", "qwen35.ssm.state_size", 4, &no_taps, 4, "ssm.state_size 0"},
        {"tiny-qwen35", "qwen35.ssm.inner_size", 4, &many_taps, 4, "ssm.inner_size 1000 is not"},
        {"tiny-qwen35", "qwen35.ssm.conv_kernel", 4, &many_taps, 4, "ssm.conv_kernel 1000"},
        {"tiny-qwen35", "qwen35.full_attention_interval", 4, &no_taps, 4, "full_attention_interval 0"},
        {"tiny-qwen35", "blk.1.ssm_out.weigh", 0, "x", 1, "'blk.1.ssm_out.weight' is missing"},
        {"tiny-qwen35", "blk.2.ssm_conv1d.weight", 4, &two_taps, 8, "'blk.2.ssm_conv1d.weight' has shape"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char rel[128], tmp[] = "/tmp/llmm-arch-XXXXXX";
        snprintf(rel, sizeof rel, "golden/arch/%s.gguf", cases[i].file);
        write_patched(rel, cases[i].marker, cases[i].skip, cases[i].patch, cases[i].n, tmp);
        expect_load_failure(tmp, 0, LLMM_ERR_BAD_FILE, cases[i].want_msg);
        unlink(tmp);
    }
}

static void *start_cpu(void) {
    const llmm_backend_config cfg = {.n_threads = 1};
    void *st = NULL;
    assert_int_equal(llmm__cpu_backend.init(&cfg, &st), LLMM_OK);
    return st;
}

static void test_rowwise_ops(void **state) {
    (void)state;
    void *st = start_cpu();
    float x[6] = {1, -2, 3, -4, 50, -70};
    const float bias[3] = {0.5f, 1.5f, -2.5f};
    assert_int_equal(llmm__cpu_backend.add_rows(st, x, bias, 2, 3), LLMM_OK);
    const float want_bias[6] = {1.5f, -0.5f, 0.5f, -3.5f, 51.5f, -72.5f};
    assert_memory_equal(x, want_bias, sizeof x);
    assert_int_equal(llmm__cpu_backend.scale(st, x, 6, 2.0f), LLMM_OK);
    assert_true(x[4] == 103.0f);
    assert_int_equal(llmm__cpu_backend.softcap(st, x, 6, 30.0f), LLMM_OK);
    for (int i = 0; i < 6; i++) assert_true(fabsf(x[i]) < 30.0f);
    assert_true(fabs(x[0] - 30.0 * tanh(3.0 / 30.0)) < 1e-5);
    llmm__cpu_backend.shutdown(st);
}

/* Frequency factors divide the angle, freq_scale multiplies it, mscale scales cos and sin. */
static void test_rope_scaling(void **state) {
    (void)state;
    void *st = start_cpu();
    const float factors[2] = {2.0f, 4.0f};
    float x[4] = {1, 0, 1, 0};
    const int32_t pos[1] = {3};
    const llmm_rope_params rp = {4, 10000.f, 0.5f, 1.25f, LLMM_ROPE_ADJACENT, factors};
    assert_int_equal(llmm__cpu_rope_rows(x, 1, 1, 4, pos, &rp), LLMM_OK);
    for (int i = 0; i < 2; i++) {
        double theta = 3.0 * pow(10000.0, -2.0 * i / 4.0) / factors[i] * 0.5;
        assert_true(fabs(x[2 * i] - 1.25 * cos(theta)) < 1e-6);
        assert_true(fabs(x[2 * i + 1] - 1.25 * sin(theta)) < 1e-6);
    }
    llmm__cpu_backend.shutdown(st);
}

/* A sliding window hides old positions; soft-capping bounds the scores. */
static void test_attention_window_and_softcap(void **state) {
    (void)state;
    void *st = start_cpu();
    enum { HD = 4, N_KV = 6 };
    float k[N_KV * HD], v[N_KV * HD], q[HD] = {1, 2, -1, 0.5f}, out[HD];
    for (int i = 0; i < N_KV * HD; i++) {
        k[i] = (float)((i * 7) % 11) - 5.0f;
        v[i] = (float)((i * 5) % 13) - 6.0f;
    }
    for (int cap = 0; cap < 2; cap++) {
        const float softcap = cap ? 3.0f : 0.0f;
        static const uint32_t one_block[1] = {0}; /* all positions in block 0 */
        const llmm_kv_view view = {.k = k, .v = v, .blocks = one_block, .block_size = 8, .block_shift = 3,
                                   .head_stride = HD * sizeof(float), .row_bytes = HD * sizeof(float),
                                   .n_head_kv = 1, .head_dim = HD, .type = LLMM_KV_F32};
        const cpu_attn_row row = {view, N_KV, 2};
        const cpu_attn_batch b = {q, out, 1, &row, 1, 1, HD, 0.5f, softcap};
        assert_int_equal(llmm__cpu_attend(st, &b), LLMM_OK);
        double w[N_KV], sum = 0, maxs = -1e30;
        for (int p = 2; p < N_KV; p++) {
            double s = 0;
            for (int d = 0; d < HD; d++) s += (double)q[d] * k[p * HD + d];
            s *= 0.5;
            if (softcap > 0) s = softcap * tanh(s / softcap);
            w[p] = s;
            maxs = fmax(maxs, s);
        }
        for (int p = 2; p < N_KV; p++) sum += (w[p] = exp(w[p] - maxs));
        for (int d = 0; d < HD; d++) {
            double want = 0;
            for (int p = 2; p < N_KV; p++) want += w[p] / sum * v[p * HD + d];
            assert_true(fabs(out[d] - want) < 1e-5);
        }
    }
    llmm__cpu_backend.shutdown(st);
}

/* The short convolution (lfm2) of one step against float64: sequences at mixed positions,
 * some so young that their window reaches before position 0, and one prompt step whose window
 * spans its state and its own rows; the state must end as the sequence's last kernel - 1 u. */
enum { SC_DIM = 7, SC_K = 4, SC_SEQS = 5, SC_MAX_POS = 12 };

typedef struct conv_case {
    uint32_t n_rows;
    llmm_step_kind kind;
    llmm_seq_id seqs[4];    /* the step's sequences (one per row, or one for a prompt) */
    int32_t pos[4];         /* each row's position */
} conv_case;

/* u[s][p]: sequence s's input at position p; rows of the step take theirs as B * X. */
static void check_conv_step(void *st, const conv_case *cc, float u[SC_SEQS][SC_MAX_POS][SC_DIM], test_rng *rng) {
    const float *taps = rng_floats(rng, SC_DIM * SC_K, -1.f, 1.f);
    float states[SC_SEQS][SC_K - 1][SC_DIM], bcx[4][3 * SC_DIM], out[4][SC_DIM];
    /* each sequence's state: u of the kernel - 1 positions before its first row (garbage
     * where that is before 0: the kernel must not read it) */
    for (uint32_t r = 0; r < cc->n_rows; r++) {
        const llmm_seq_id q = cc->kind == LLMM_STEP_PROMPT ? cc->seqs[0] : cc->seqs[r];
        if (r > 0 && cc->kind == LLMM_STEP_PROMPT) continue;
        for (int i = 0; i < SC_K - 1; i++) {
            const int p = cc->pos[r] - (SC_K - 1) + i;
            for (int c = 0; c < SC_DIM; c++) states[q][i][c] = p >= 0 ? u[q][p][c] : 1e30f;
        }
    }
    for (uint32_t r = 0; r < cc->n_rows; r++) {
        const llmm_seq_id q = cc->kind == LLMM_STEP_PROMPT ? cc->seqs[0] : cc->seqs[r];
        for (int c = 0; c < SC_DIM; c++) {
            bcx[r][c] = rng_float(rng, -1.f, 1.f);
            bcx[r][SC_DIM + c] = rng_float(rng, -1.f, 1.f);
            bcx[r][2 * SC_DIM + c] = rng_float(rng, -1.f, 1.f);
            u[q][cc->pos[r]][c] = bcx[r][c] * bcx[r][2 * SC_DIM + c];
        }
    }
    const uint32_t n_seqs = cc->kind == LLMM_STEP_PROMPT ? 1 : cc->n_rows;
    uint32_t row_seq[4], n_blocks[4] = {1, 1, 1, 1};
    static const uint32_t table[1] = {0};
    const uint32_t *tables[4] = {table, table, table, table};
    for (uint32_t r = 0; r < cc->n_rows; r++) row_seq[r] = cc->kind == LLMM_STEP_PROMPT ? 0 : r;
    const llmm_kv_layout kv = {.layout = LLMM_KV_LAYOUT_HEAD_REGIONS, .block_size = 1u << 10, .block_shift = 10,
                               .n_blocks = 1};
    const llmm_token tokens[4] = {0};
    const llmm_step step = {.kind = cc->kind, .n_rows = cc->n_rows, .tokens = tokens, .pos = cc->pos,
                            .row_seq = row_seq, .n_seqs = n_seqs, .seq_ids = cc->seqs, .block_tables = tables,
                            .n_blocks = n_blocks, .kv = &kv};
    assert_int_equal(llmm__cpu_backend.step_begin(st, &step), LLMM_OK);
    const llmm_conv_batch b = {&bcx[0][0], &out[0][0], taps, &states[0][0][0], (SC_K - 1) * SC_DIM, cc->n_rows,
                               SC_DIM, SC_K};
    assert_int_equal(llmm__cpu_backend.short_conv(st, &b), LLMM_OK);
    assert_int_equal(llmm__cpu_backend.step_end(st), LLMM_OK);
    for (uint32_t r = 0; r < cc->n_rows; r++) {
        const llmm_seq_id q = cc->kind == LLMM_STEP_PROMPT ? cc->seqs[0] : cc->seqs[r];
        for (int c = 0; c < SC_DIM; c++) {
            double y = 0;
            for (int j = 0; j < SC_K; j++) {
                const int p = cc->pos[r] - SC_K + 1 + j;
                y += p >= 0 ? (double)taps[c * SC_K + j] * u[q][p][c] : 0.0;
            }
            assert_true(fabs(out[r][c] - bcx[r][SC_DIM + c] * y) < 1e-5);
        }
        const uint32_t last = cc->kind == LLMM_STEP_PROMPT ? cc->n_rows - 1 : r;
        if (cc->kind == LLMM_STEP_PROMPT && r != last) continue;
        for (int i = 0; i < SC_K - 1; i++) {
            const int p = cc->pos[last] - (SC_K - 2) + i;
            if (p >= 0) assert_memory_equal(states[q][i], u[q][p], sizeof states[q][i]);
        }
    }
    free((void *)taps);
}

static void test_short_conv_against_float64(void **state) {
    (void)state;
    void *st = start_cpu();
    test_rng rng = rng_seeded(46);
    static float u[SC_SEQS][SC_MAX_POS][SC_DIM];
    const conv_case decode = {3, LLMM_STEP_DECODE, {4, 0, 2}, {0, 1, 7}};
    const conv_case prompt = {4, LLMM_STEP_PROMPT, {3}, {2, 3, 4, 5}};
    /* histories before the steps' first positions */
    for (int q = 0; q < SC_SEQS; q++)
        for (int p = 0; p < SC_MAX_POS; p++)
            for (int c = 0; c < SC_DIM; c++) u[q][p][c] = rng_float(&rng, -1.f, 1.f);
    check_conv_step(st, &decode, u, &rng);
    check_conv_step(st, &prompt, u, &rng);
    llmm__cpu_backend.shutdown(st);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_architectures_match_reference),
        cmocka_unit_test(test_unknown_architecture_rejected),
        cmocka_unit_test(test_hostile_arch_files),
        cmocka_unit_test(test_rowwise_ops),
        cmocka_unit_test(test_rope_scaling),
        cmocka_unit_test(test_attention_window_and_softcap),
        cmocka_unit_test(test_short_conv_against_float64),
    };
    return cmocka_run_group_tests_name("arch", tests, NULL, NULL);
}
