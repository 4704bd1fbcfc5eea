/* Public API contract: argument validation, params versioning, errors, hooks. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "llmmini.h"
#include "support/alloc_hooks.h"
#include "support/alloc.h"
#include "support/fixtures.h"
#include "support/rng.h"
#include "support/shared_data.h"

static const char *stories_path(char *buf, size_t n) { return shared_path(buf, n, "models/stories260K.gguf"); }

static void test_version(void **state) {
    (void)state;
    char want[32];
    snprintf(want, sizeof want, "%d.%d.%d", LLMM_VERSION_MAJOR, LLMM_VERSION_MINOR, LLMM_VERSION_PATCH);
    assert_string_equal(llmm_version(), want);
    assert_int_equal(llmm_abi_version(), LLMM_ABI_VERSION);
}

static void test_status_names(void **state) {
    (void)state;
    for (int s = 0; s >= LLMM_ERR_NUMERICAL; s--) {
        const char *name = llmm_status_str((llmm_status)s);
        assert_non_null(name);
        assert_string_not_equal(name, "unknown status");
    }
    assert_string_equal(llmm_status_str((llmm_status)-999), "unknown status");
}

static void test_params_default_versions(void **state) {
    (void)state;
    llmm_model_params p;
    assert_int_equal(llmm_model_params_default(NULL, sizeof p), LLMM_ERR_INVALID_ARG);
    assert_int_equal(llmm_model_params_default(&p, 4), LLMM_ERR_INVALID_ARG);
    assert_int_equal(llmm_model_params_default(&p, sizeof p), LLMM_OK);
    assert_int_equal(p.size, sizeof p);
    assert_int_equal(p.use_mmap, 1);
    assert_int_equal(p.repack_weights, 1);
    /* a caller built before repack_weights existed: accepted, nothing written past its size */
    memset(&p, 0xcd, sizeof p);
    assert_int_equal(llmm_model_params_default(&p, offsetof(llmm_model_params, repack_weights)), LLMM_OK);
    assert_int_equal(p.size, offsetof(llmm_model_params, repack_weights));
    assert_int_equal(p.repack_weights, (int32_t)0xcdcdcdcd);
    /* a caller built against a newer, larger struct gets its unknown tail zeroed */
    struct {
        llmm_model_params p;
        uint64_t future[4];
    } bigger;
    memset(&bigger, 0xab, sizeof bigger);
    assert_int_equal(llmm_model_params_default(&bigger.p, sizeof bigger), LLMM_OK);
    assert_int_equal(bigger.p.size, sizeof bigger);
    assert_int_equal(bigger.future[3], 0);
    llmm_context_params cp;
    llmm_sampler_params sp;
    llmm_generate_params gp;
    assert_int_equal(llmm_context_params_default(&cp, sizeof cp), LLMM_OK);
    assert_int_equal(llmm_sampler_params_default(&sp, sizeof sp), LLMM_OK);
    assert_int_equal(llmm_generate_params_default(&gp, sizeof gp), LLMM_OK);
    assert_int_equal(cp.n_seq_max, 1);
    assert_int_equal(gp.max_tokens, 128);
}

static void test_load_bad_arguments(void **state) {
    (void)state;
    llmm_model *m = (llmm_model *)&m;
    assert_int_equal(llmm_model_load(NULL, NULL, &m), LLMM_ERR_INVALID_ARG);
    assert_null(m);
    char path[1024];
    assert_int_equal(llmm_model_load(stories_path(path, sizeof path), NULL, NULL), LLMM_ERR_INVALID_ARG);
    llmm_model_params p;
    llmm_model_params_default(&p, sizeof p);
    char err[256] = "";
    p.error_buf = err;
    p.error_buf_size = sizeof err;
    assert_int_equal(llmm_model_load("/nonexistent/model.gguf", &p, &m), LLMM_ERR_IO);
    assert_null(m);
    assert_non_null(strstr(err, "/nonexistent/model.gguf"));
    assert_int_equal(llmm_model_load("/", &p, &m), LLMM_ERR_IO);
    p.size = 3;
    assert_int_equal(llmm_model_load(stories_path(path, sizeof path), &p, &m), LLMM_ERR_INVALID_ARG);
    llmm_model_free(NULL);
}

static void test_null_model_calls(void **state) {
    (void)state;
    size_t n;
    llmm_token t;
    uint32_t a;
    const char *s;
    int64_t i;
    double f;
    llmm_model_info info = {.size = sizeof info};
    assert_int_equal(llmm_tokenize(NULL, "x", 1, 0, &t, 1, &n), LLMM_ERR_INVALID_ARG);
    assert_int_equal(llmm_token_to_piece(NULL, 0, 0, NULL, 0, &n), LLMM_ERR_INVALID_ARG);
    assert_int_equal(llmm_detokenize(NULL, &t, 1, 0, NULL, 0, &n), LLMM_ERR_INVALID_ARG);
    assert_int_equal(llmm_token_attrs(NULL, 0, &a), LLMM_ERR_INVALID_ARG);
    assert_int_equal(llmm_model_special_token(NULL, LLMM_SPECIAL_BOS, &t), LLMM_ERR_INVALID_ARG);
    assert_int_equal(llmm_model_get_info(NULL, &info), LLMM_ERR_INVALID_ARG);
    assert_int_equal(llmm_model_meta_str(NULL, "k", &s), LLMM_ERR_INVALID_ARG);
    assert_int_equal(llmm_model_meta_int(NULL, "k", &i), LLMM_ERR_INVALID_ARG);
    assert_int_equal(llmm_model_meta_float(NULL, "k", &f), LLMM_ERR_INVALID_ARG);
    assert_int_equal(llmm_model_meta_count(NULL, &n), LLMM_ERR_INVALID_ARG);
    assert_int_equal(llmm_model_last_error(NULL, NULL, 0), 0);
}

static void test_invalid_arguments_on_model(void **state) {
    (void)state;
    llmm_model *m = load_vocab("stories260K.gguf");
    size_t n;
    llmm_token t;
    assert_int_equal(llmm_tokenize(m, NULL, 1, 0, &t, 1, &n), LLMM_ERR_INVALID_ARG);
    assert_int_equal(llmm_tokenize(m, "x", 1, 0, &t, 1, NULL), LLMM_ERR_INVALID_ARG);
    assert_int_equal(llmm_tokenize(m, "x", 1, 0, NULL, 5, &n), LLMM_ERR_INVALID_ARG);
    assert_int_equal(llmm_tokenize(m, "x", 1, 0x80, &t, 1, &n), LLMM_ERR_INVALID_ARG);
    char err[256];
    assert_true(llmm_model_last_error(m, err, sizeof err) > 0);
    assert_non_null(strstr(err, "flags"));
    assert_int_equal(llmm_token_to_piece(m, 99999, 0, err, sizeof err, &n), LLMM_ERR_INVALID_ARG);
    assert_int_equal(llmm_model_special_token(m, (llmm_special_token)42, &t), LLMM_ERR_INVALID_ARG);
    llmm_model_info small = {.size = 4};
    assert_int_equal(llmm_model_get_info(m, &small), LLMM_ERR_INVALID_ARG);
    const char *s;
    assert_int_equal(llmm_model_meta_str(m, NULL, &s), LLMM_ERR_INVALID_ARG);
    assert_int_equal(llmm_model_meta_str(m, "general.architecture", NULL), LLMM_ERR_INVALID_ARG);
    assert_int_equal(llmm_model_meta_key(m, 1000, &s), LLMM_ERR_INVALID_ARG);
    llmm_model_free(m);
}

static void test_info_and_metadata(void **state) {
    (void)state;
    llmm_model *m = load_model("stories260K.gguf", NULL);
    llmm_model_info info = {.size = sizeof info};
    assert_int_equal(llmm_model_get_info(m, &info), LLMM_OK);
    assert_string_equal(info.architecture, "llama");
    assert_int_equal(info.tokenizer, LLMM_TOKENIZER_SPM);
    assert_int_equal(info.n_vocab, 512);
    assert_int_equal(info.n_ctx_train, 2048);
    assert_int_equal(info.n_embd, 64);
    assert_int_equal(info.n_layer, 5);
    assert_int_equal(info.n_head, 8);
    assert_int_equal(info.n_head_kv, 4);
    assert_int_equal(info.head_dim, 8);
    assert_int_equal(info.n_ff, 172);
    assert_int_equal(info.file_bytes, 1185376);
    assert_int_equal(info.gguf_version, 3);
    assert_int_equal(info.n_tensors, 48);
    assert_true(info.n_params > 250000 && info.n_params < 300000);
    const char *s;
    int64_t i;
    double f;
    assert_int_equal(llmm_model_meta_str(m, "tokenizer.ggml.model", &s), LLMM_OK);
    assert_string_equal(s, "llama");
    assert_int_equal(llmm_model_meta_int(m, "llama.block_count", &i), LLMM_OK);
    assert_int_equal(i, 5);
    assert_int_equal(llmm_model_meta_float(m, "llama.attention.layer_norm_rms_epsilon", &f), LLMM_OK);
    assert_true(f > 0.9e-5 && f < 1.1e-5);
    assert_int_equal(llmm_model_meta_str(m, "llama.block_count", &s), LLMM_ERR_WRONG_TYPE);
    assert_int_equal(llmm_model_meta_int(m, "general.architecture", &i), LLMM_ERR_WRONG_TYPE);
    assert_int_equal(llmm_model_meta_int(m, "tokenizer.ggml.tokens", &i), LLMM_ERR_WRONG_TYPE);
    assert_int_equal(llmm_model_meta_float(m, "llama.block_count", &f), LLMM_ERR_WRONG_TYPE);
    assert_int_equal(llmm_model_meta_str(m, "no.such.key", &s), LLMM_ERR_NOT_FOUND);
    size_t count;
    assert_int_equal(llmm_model_meta_count(m, &count), LLMM_OK);
    assert_int_equal(count, 19);
    int found = 0;
    for (size_t k = 0; k < count; k++) {
        assert_int_equal(llmm_model_meta_key(m, k, &s), LLMM_OK);
        found += strcmp(s, "general.architecture") == 0;
    }
    assert_int_equal(found, 1);
    llmm_model_free(m);
}


static void test_allocator_hook_sees_everything(void **state) {
    (void)state;
    counting_alloc c = {0};
    llmm_allocator a = counting_allocator(&c);
    llmm_model_params p;
    llmm_model_params_default(&p, sizeof p);
    p.allocator = &a;
    p.use_mmap = 0;
    llmm_model *m = load_model("stories260K.gguf", &p);
    llmm_token ids[8];
    tokenize(m, "Once upon a time", ids, 8);
    llmm_model_free(m);
    assert_true(c.allocs > 5);
    assert_int_equal(c.allocs, c.frees);
}

static int cancel_at_half(void *user, float fraction) {
    *(int *)user += 1;
    return fraction > 0.5f;
}

static void test_progress_cancel(void **state) {
    (void)state;
    int calls = 0;
    llmm_model_params p;
    llmm_model_params_default(&p, sizeof p);
    p.progress = cancel_at_half;
    p.progress_user = &calls;
    char path[1024];
    llmm_model *m = (llmm_model *)&m;
    assert_int_equal(llmm_model_load(stories_path(path, sizeof path), &p, &m), LLMM_ERR_ABORTED);
    assert_null(m);
    assert_true(calls >= 2);
}

typedef struct log_capture {
    int errors;
    char last[512];
} log_capture;

static void capture_log(void *user, llmm_log_level level, const char *msg) {
    log_capture *c = user;
    if (level == LLMM_LOG_ERROR) c->errors++;
    snprintf(c->last, sizeof c->last, "%s", msg);
}

static void test_log_callback(void **state) {
    (void)state;
    log_capture c = {0};
    llmm_model_params p;
    llmm_model_params_default(&p, sizeof p);
    p.log = capture_log;
    p.log_user = &c;
    llmm_model *m;
    assert_int_equal(llmm_model_load("/nonexistent.gguf", &p, &m), LLMM_ERR_IO);
    assert_int_equal(c.errors, 1);
    assert_non_null(strstr(c.last, "nonexistent"));
    /* stories260K's invalid optional ids are warned about, not fatal */
    c.last[0] = '\0';
    char path[1024];
    assert_int_equal(llmm_model_load(stories_path(path, sizeof path), &p, &m), LLMM_OK);
    assert_non_null(strstr(c.last, "token_id"));
    llmm_model_free(m);
}

/* Seeded random damage to real files: bit flips, boundary values (0, -1, 2^31, 2^32, ...)
 * written over 4 or 8 bytes, random bytes, truncation; mostly in the metadata and tensor
 * directory, where a damaged count or length has the most to break. Each damaged file must
 * load or fail with a file-level status, and a model that loads must tokenize, prefill and
 * decode without crashing (any status; damaged weights may well give NaN logits). Under
 * SANITIZE=address,undefined this is the memory-safety check of the whole load path. */
static void damage(uint8_t *buf, size_t *len, size_t region, test_rng *rng) {
    static const uint64_t values[] = {0, 1, 31, 32, 255, 256, 0xffff, 0x7fffffff, 0x80000000, 0xffffffff,
                                      0x100000000ull, 0x7fffffffffffffffull, 0xffffffffffffffffull};
    const int kind = (int)(rng_u64(rng) % 10), n = 1 + (int)(rng_u64(rng) % 6);
    if (region > *len) region = *len;
    for (int m = 0; m < n; m++) {
        const size_t at = rng_u64(rng) % region;
        if (kind < 5) buf[at] ^= (uint8_t)(1u << (rng_u64(rng) % 8));
        else if (kind < 8) {
            const uint64_t v = values[rng_u64(rng) % (sizeof values / sizeof values[0])];
            const size_t width = rng_u64(rng) % 2 ? 8 : 4;
            if (at + width <= *len) memcpy(buf + at, &v, width);
        } else if (kind == 8) buf[at] = (uint8_t)rng_u64(rng);
        else *len = rng_u64(rng) % *len;
    }
}

static int damaged_runs(const char *rel, int vocab_only, size_t region, int runs, uint64_t seed) {
    char src[1024], path[] = "/tmp/llmm_damaged_XXXXXX";
    size_t n = 0;
    uint8_t *orig = (uint8_t *)read_whole_file(shared_path(src, sizeof src, rel), &n);
    if (!orig) {
        print_message("skipped %s: not readable\n", src);
        return 0;
    }
    uint8_t *buf = xmalloc(n);
    test_rng rng = rng_seeded(seed);
    const int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    int loaded = 0;
    for (int run = 0; run < runs; run++) {
        size_t len = n;
        memcpy(buf, orig, n);
        damage(buf, &len, region, &rng);
        FILE *f = fopen(path, "wb");
        assert_non_null(f);
        assert_int_equal(fwrite(buf, 1, len, f), len);
        assert_int_equal(fclose(f), 0);
        llmm_model_params mp;
        llmm_model_params_default(&mp, sizeof mp);
        mp.vocab_only = vocab_only;
        llmm_model *m = NULL;
        const llmm_status st = llmm_model_load(path, &mp, &m);
        if (st != LLMM_OK) {
            if (st != LLMM_ERR_BAD_FILE && st != LLMM_ERR_UNSUPPORTED && st != LLMM_ERR_IO)
                fail_msg("%s, damaged run %d: load gave %s", rel, run, llmm_status_str(st));
            assert_null(m);
            continue;
        }
        loaded++;
        static const char text[] = "Once upon a time, a dog said \"don't\" \xe2\x9c\x93 <s> 1234  \t\n";
        llmm_token toks[64];
        size_t nt = 0;
        if (llmm_tokenize(m, text, sizeof text - 1, 0, toks, 64, &nt) == LLMM_OK && nt > 0) {
            char piece[64];
            size_t pl;
            for (size_t i = 0; i < nt; i++) (void)llmm_token_to_piece(m, toks[i], 0, piece, sizeof piece, &pl);
            llmm_context_params cp;
            llmm_context_params_default(&cp, sizeof cp);
            cp.n_ctx = 32;
            llmm_context *ctx = NULL;
            if (!vocab_only && llmm_context_create(m, &cp, &ctx) == LLMM_OK) {
                if (llmm_prefill(ctx, 0, toks, nt < 8 ? nt : 8, 0) == LLMM_OK) {
                    const llmm_seq_id seq = 0;
                    for (int step = 0; step < 2; step++) (void)llmm_decode(ctx, &seq, &toks[step % nt], 1);
                }
                llmm_context_free(ctx);
            }
        }
        llmm_model_free(m);
    }
    unlink(path);
    free(buf);
    free(orig);
    return loaded;
}

static void test_damaged_files_fail_cleanly(void **state) {
    (void)state;
    /* stories260K: its vocabulary and tensor directory lie in the first 16 KiB */
    const int a = damaged_runs("models/stories260K-q4_0.gguf", 0, 16384, 1500, 0x9e3779b97f4a7c15ull);
    const int b = damaged_runs("models/stories260K.gguf", 0, 1u << 20, 500, 0x2545f4914f6cdd1dull);
    /* a byte-level BPE vocabulary (merges, pre-tokenizer), as a vocab-only load */
    const int c = damaged_runs("vocab/ggml-vocab-qwen2.gguf", 1, 4u << 20, 60, 0x5851f42d4c957f2dull);
    print_message("damaged files: %d of 1500, %d of 500 and %d of 60 still loaded; none crashed\n", a, b, c);
}

/* The tensor info of `name` in a GGUF image: its type field, found after the name's bytes,
 * n_dims and the dims (the reader checks everything; this only needs the one well-formed file). */
static uint8_t *tensor_type_field(uint8_t *buf, size_t n, const char *name) {
    const size_t len = strlen(name);
    for (size_t i = 8; i + len + 4 < n; i++) {
        uint64_t str_len;
        memcpy(&str_len, buf + i - 8, sizeof str_len);
        if (str_len != len || memcmp(buf + i, name, len) != 0) continue;
        uint32_t n_dims;
        memcpy(&n_dims, buf + i + len, sizeof n_dims);
        const size_t at = i + len + 4 + (size_t)n_dims * 8;
        return n_dims <= 4 && at + 4 <= n ? buf + at : NULL;
    }
    return NULL;
}

/* A matrix whose type no backend computes (stories260K's F32 attn_q retyped as I32, the same
 * bytes) loads, tokenizes, and fails at context creation with the tensor's name. */
static void test_unsupported_weight_type_fails_at_context(void **state) {
    (void)state;
    char src[1024], path[] = "/tmp/llmm_i32_weight_XXXXXX";
    size_t n = 0;
    uint8_t *buf = (uint8_t *)read_whole_file(shared_path(src, sizeof src, "models/stories260K.gguf"), &n);
    if (!buf) skip();
    uint8_t *type = tensor_type_field(buf, n, "blk.1.attn_q.weight");
    assert_non_null(type);
    const uint32_t f32 = 0, i32 = 26;
    assert_memory_equal(type, &f32, 4);
    memcpy(type, &i32, 4);
    const int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, buf, n), (ssize_t)n);
    close(fd);
    llmm_model *m = load_model(path, NULL);
    llmm_token toks[16];
    tokenize_flags(m, "Once upon", 9, 0, toks, 16);
    llmm_context *ctx = NULL;
    assert_int_equal(llmm_context_create(m, NULL, &ctx), LLMM_ERR_UNSUPPORTED);
    assert_null(ctx);
    char msg[512];
    llmm_model_last_error(m, msg, sizeof msg);
    if (!strstr(msg, "blk.1.attn_q.weight") || !strstr(msg, "i32")) fail_msg("message: %s", msg);
    llmm_model_free(m);
    unlink(path);
    free(buf);
}

/* Params of a small single-threaded CPU context. */
static llmm_context_params cpu_params(uint32_t n_ctx, uint32_t n_seq_max) {
    llmm_context_params p;
    llmm_context_params_default(&p, sizeof p);
    p.backend = LLMM_BACKEND_CPU;
    p.n_ctx = n_ctx;
    p.n_seq_max = n_seq_max;
    p.n_threads = 1;
    return p;
}

/* llmm_context_warmup on the CPU backend: dummy steps on unused ids that leave the sequences,
 * the last logits and the counters as they were; CONTEXT_FULL when no id is free. Old callers'
 * smaller stats struct still works. */
static void test_warmup_and_cold_start_stats(void **state) {
    (void)state;
    llmm_model *m = load_model("stories260K.gguf", NULL);
    const llmm_context_params p = cpu_params(32, 2);
    llmm_context *c = NULL;
    assert_int_equal(llmm_context_create(m, &p, &c), LLMM_OK);
    assert_int_equal(llmm_context_warmup(NULL), LLMM_ERR_INVALID_ARG);
    const llmm_token prompt[3] = {1, 403, 407};
    assert_int_equal(llmm_prefill(c, 0, prompt, 3, 0), LLMM_OK);
    const float *l = NULL;
    size_t nv = 0;
    assert_int_equal(llmm_logits(c, 0, &l, &nv), LLMM_OK);
    float *before = malloc(nv * sizeof *before);
    assert_non_null(before);
    memcpy(before, l, nv * sizeof *before);
    llmm_context_stats st = {.size = sizeof st};
    assert_int_equal(llmm_context_get_stats(c, &st), LLMM_OK);
    const uint64_t used = st.blocks_used;
    assert_true(st.first_token_ms > 0 && st.warmup_ms == 0 && st.module_load_ms == 0 && st.graphs == 0);

    assert_int_equal(llmm_context_warmup(c), LLMM_OK); /* on sequence 1 */
    assert_int_equal(llmm_context_get_stats(c, &st), LLMM_OK);
    assert_true(st.warmup_ms > 0);
    assert_int_equal(st.blocks_used, used);
    assert_int_equal(st.n_seq_used, 1);
    assert_int_equal(st.tokens_decoded, 0);
    assert_int_equal(llmm_logits(c, 0, &l, &nv), LLMM_OK);
    assert_memory_equal(l, before, nv * sizeof *before);
    size_t len = 0;
    assert_int_equal(llmm_seq_length(c, 1, &len), LLMM_OK);
    assert_int_equal(len, 0);

    /* no unused id left */
    llmm_seq_id other;
    assert_int_equal(llmm_seq_create(c, &other), LLMM_OK);
    assert_int_equal(llmm_context_warmup(c), LLMM_ERR_CONTEXT_FULL);
    assert_non_null(strstr(llmm_context_last_error(c), "no unused sequence id"));

    /* a caller built before the cold-start fields */
    llmm_context_stats old;
    memset(&old, 0xee, sizeof old);
    old.size = (uint32_t)(offsetof(llmm_context_stats, prefix_hits) + sizeof old.prefix_hits);
    assert_int_equal(llmm_context_get_stats(c, &old), LLMM_OK);
    assert_true(old.module_load_ms != 0); /* untouched: 0xee bytes */
    free(before);
    llmm_context_free(c);
    llmm_model_free(m);
}

/* The logits of a 3-token prompt and of 4 greedy tokens after it on sequence 0 of c (5 rows
 * of *nv, allocated). */
static float *prompt_and_decode(llmm_context *c, size_t *nv) {
    const llmm_token prompt[3] = {1, 403, 407};
    assert_int_equal(llmm_prefill(c, 0, prompt, 3, 0), LLMM_OK);
    float *out = NULL;
    for (size_t i = 0; i < 5; i++) {
        const float *l = NULL;
        assert_int_equal(llmm_logits(c, 0, &l, nv), LLMM_OK);
        if (!out) out = xmalloc(5 * *nv * sizeof *out);
        memcpy(out + i * *nv, l, *nv * sizeof *out);
        llmm_token next = argmax(l, *nv);
        llmm_seq_id seq = 0;
        if (i < 4) assert_int_equal(llmm_decode(c, &seq, &next, 1), LLMM_OK);
    }
    return out;
}

/* With one sequence id, the warm-up's steps (one decode row, then a prompt step of 16
 * positions with every row's logits) run on the id the request then uses: its results are the
 * cold context's, bit for bit. */
static void test_warmup_then_same_results(void **state) {
    (void)state;
    llmm_model *m = load_model("stories260K.gguf", NULL);
    const llmm_context_params p = cpu_params(32, 1);
    llmm_context *cold = NULL, *warm = NULL;
    assert_int_equal(llmm_context_create(m, &p, &cold), LLMM_OK);
    assert_int_equal(llmm_context_create(m, &p, &warm), LLMM_OK);
    assert_int_equal(llmm_context_warmup(warm), LLMM_OK);
    size_t nv = 0, nv_warm = 0;
    float *a = prompt_and_decode(cold, &nv), *b = prompt_and_decode(warm, &nv_warm);
    assert_int_equal(nv, nv_warm);
    assert_memory_equal(a, b, 5 * nv * sizeof *a);
    free(a);
    free(b);
    llmm_context_free(cold);
    llmm_context_free(warm);
    llmm_model_free(m);
}

typedef struct progress_seen {
    int calls, cancel_at;
    float last;
} progress_seen;

static int note_progress(void *user, float fraction) {
    progress_seen *ps = user;
    assert_true(fraction >= ps->last && fraction <= 1.0f);
    ps->last = fraction;
    return ++ps->calls == ps->cancel_at;
}

/* The context's progress callback: rising fractions up to 1 while the weights are prepared;
 * a non-zero return cancels the creation. */
static void test_context_progress(void **state) {
    (void)state;
    llmm_model *m = load_model("stories260K.gguf", NULL);
    llmm_context_params p = cpu_params(32, 1);
    progress_seen ps = {0, 0, 0.0f};
    p.progress = note_progress;
    p.progress_user = &ps;
    llmm_context *c = NULL;
    assert_int_equal(llmm_context_create(m, &p, &c), LLMM_OK);
    assert_true(ps.calls > 1);
    assert_true(ps.last == 1.0f);
    llmm_context_free(c);
    ps = (progress_seen){0, 2, 0.0f};
    assert_int_equal(llmm_context_create(m, &p, &c), LLMM_ERR_ABORTED);
    assert_null(c);
    assert_int_equal(ps.calls, 2);
    llmm_model_free(m);
}

/* llmm_backend_register refuses what it cannot use. */
static const void *entry_of_nothing(uint32_t version) {
    (void)version;
    return NULL;
}

static void test_backend_register_checks(void **state) {
    (void)state;
    assert_int_equal(llmm_backend_register(LLMM_BACKEND_CUDA, NULL), LLMM_ERR_INVALID_ARG);
    assert_int_equal(llmm_backend_register(LLMM_BACKEND_CPU, entry_of_nothing), LLMM_ERR_INVALID_ARG);
    assert_int_equal(llmm_backend_register(LLMM_BACKEND_CUDA, entry_of_nothing), LLMM_ERR_BACKEND);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_version),
        cmocka_unit_test(test_status_names),
        cmocka_unit_test(test_params_default_versions),
        cmocka_unit_test(test_load_bad_arguments),
        cmocka_unit_test(test_null_model_calls),
        cmocka_unit_test(test_invalid_arguments_on_model),
        cmocka_unit_test(test_info_and_metadata),
        cmocka_unit_test(test_allocator_hook_sees_everything),
        cmocka_unit_test(test_progress_cancel),
        cmocka_unit_test(test_log_callback),
        cmocka_unit_test(test_damaged_files_fail_cleanly),
        cmocka_unit_test(test_unsupported_weight_type_fails_at_context),
        cmocka_unit_test(test_warmup_and_cold_start_stats),
        cmocka_unit_test(test_warmup_then_same_results),
        cmocka_unit_test(test_backend_register_checks),
        cmocka_unit_test(test_context_progress),
    };
    return cmocka_run_group_tests_name("api", tests, NULL, NULL);
}
