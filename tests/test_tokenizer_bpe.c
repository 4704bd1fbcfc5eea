/* Byte-level BPE tokenizer against the reference tokenizer's vectors, plus round trips,
 * added and control tokens, a random-bytes fuzz, and the loader's error paths. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "support/alloc_hooks.h"
#include "support/gguf_builder.h"
#include "llmmini.h"
#include "text/pretokenizer.h" /* internal: the families without reference vectors are checked directly */
#include "support/fixtures.h"
#include "support/rng.h"
#include "support/shared_data.h"

static llmm_model *load_with(const char *path, const llmm_allocator *alloc, llmm_status *status, char *err,
                             size_t err_size) {
    llmm_model_params p;
    llmm_model_params_default(&p, sizeof p);
    p.vocab_only = 1;
    p.allocator = alloc;
    p.error_buf = err;
    p.error_buf_size = err_size;
    llmm_model *m = NULL;
    *status = llmm_model_load(path, &p, &m);
    return m;
}

static llmm_model *load_path(const char *path, llmm_status *status, char *err, size_t err_size) {
    return load_with(path, NULL, status, err, err_size);
}

/* vocab/name of the shared data, vocabulary only. */
static llmm_model *load_vocab_file(const char *name) {
    char rel[256];
    snprintf(rel, sizeof rel, "vocab/%s", name);
    return load_vocab(rel);
}

/* detokenize(ids) must give back exactly the text */
static void assert_round_trip(const llmm_model *m, const llmm_token *ids, size_t n, const char *text, size_t len) {
    char *back = malloc(len + 16);
    assert_non_null(back);
    size_t nb = 0;
    assert_int_equal(llmm_detokenize(m, ids, n, 0, back, len + 16, &nb), LLMM_OK);
    assert_int_equal(nb, len);
    assert_memory_equal(back, text, len);
    free(back);
}

static void print_ids(const char *what, const llmm_token *ids, size_t n) {
    char line[2048];
    size_t used = 0;
    for (size_t i = 0; i < n && used + 12 < sizeof line; i++) used += (size_t)sprintf(line + used, " %d", ids[i]);
    line[used] = '\0';
    print_message("  %s:%s\n", what, line);
}

/* Every case of one vector file must match, and detokenizing must give the input back. */
static void check_vector_file(const llmm_model *m, const char *name, size_t *matched, size_t *total) {
    char inp[1024], out[1024], inp_rel[512], out_rel[512];
    snprintf(inp_rel, sizeof inp_rel, "vocab/%s.inp", name);
    snprintf(out_rel, sizeof out_rel, "vocab/%s.out", name);
    vocab_cases vc;
    assert_int_equal(
        vocab_cases_load(shared_path(inp, sizeof inp, inp_rel), shared_path(out, sizeof out, out_rel), &vc), 0);
    size_t cap = 1 << 14, ok = 0;
    llmm_token *ids = malloc(cap * sizeof *ids);
    assert_non_null(ids);
    for (size_t i = 0; i < vc.n; i++) {
        size_t n = tokenize_flags(m, vc.text[i], vc.text_len[i], 0, ids, cap);
        if (vocab_case_matches(&vc, i, ids, n)) {
            ok++;
        } else {
            print_message("%s case %zu mismatch: expected [%s]\n", name, i, vc.expected[i]);
            print_ids("got", ids, n);
        }
        assert_round_trip(m, ids, n, vc.text[i], vc.text_len[i]);
    }
    print_message("%s: %zu/%zu cases match the reference\n", name, ok, vc.n);
    *matched += ok;
    *total += vc.n;
    free(ids);
    vocab_cases_free(&vc);
}

static int is_bpe(const llmm_model *m) {
    llmm_model_info info = {.size = sizeof info};
    assert_int_equal(llmm_model_get_info(m, &info), LLMM_OK);
    return info.tokenizer == LLMM_TOKENIZER_BPE;
}

static void test_all_bpe_vocab_files(void **state) {
    (void)state;
    char dir_path[1024];
    DIR *dir = opendir(shared_path(dir_path, sizeof dir_path, "vocab"));
    assert_non_null(dir);
    size_t matched = 0, total = 0, files = 0;
    struct dirent *e;
    while ((e = readdir(dir))) {
        size_t len = strlen(e->d_name);
        if (len < 9 || strcmp(e->d_name + len - 9, ".gguf.inp") != 0) continue;
        char name[256], path[1024], rel[512], err[512] = "";
        snprintf(name, sizeof name, "%.*s", (int)(len - 4), e->d_name);
        snprintf(rel, sizeof rel, "vocab/%s", name);
        if (access(shared_path(path, sizeof path, rel), R_OK) != 0) continue; /* vectors of a models/ file */
        llmm_status st;
        llmm_model *m = load_path(path, &st, err, sizeof err);
        if (st == LLMM_ERR_UNSUPPORTED) continue; /* WordPiece: see test_wordpiece_is_unsupported */
        assert_int_equal(st, LLMM_OK);
        if (is_bpe(m)) {
            check_vector_file(m, name, &matched, &total);
            files++;
        }
        llmm_model_free(m);
    }
    closedir(dir);
    print_message("BPE vocab files: %zu, cases matched: %zu/%zu\n", files, matched, total);
    assert_true(files >= 6);
    assert_int_equal(matched, total);
}

#define QWEN2 "ggml-vocab-qwen2.gguf"
#define QWEN_IM_START 151644
#define QWEN_IM_END 151645
#define QWEN_THINK 151667
#define QWEN_THINK_END 151668

static int contains(const llmm_token *ids, size_t n, llmm_token id) {
    for (size_t i = 0; i < n; i++)
        if (ids[i] == id) return 1;
    return 0;
}

/* User-defined tokens (type 4) are matched before pre-tokenization even without
 * parse_special, as the reference engine and Hugging Face tokenizers do. */
static void test_user_defined_token_is_one_token(void **state) {
    (void)state;
    llmm_model *m = load_vocab_file(QWEN2);
    const char *text = "Let me see.<think>\nplan</think>Done";
    llmm_token ids[64];
    size_t n = tokenize_flags(m, text, strlen(text), 0, ids, 64);
    assert_true(contains(ids, n, QWEN_THINK));
    assert_true(contains(ids, n, QWEN_THINK_END));
    assert_round_trip(m, ids, n, text, strlen(text));
    char piece[16];
    size_t nb;
    assert_int_equal(llmm_token_to_piece(m, QWEN_THINK, 0, piece, sizeof piece, &nb), LLMM_OK);
    assert_int_equal(nb, 7);
    assert_memory_equal(piece, "<think>", 7);
    uint32_t attrs;
    assert_int_equal(llmm_token_attrs(m, QWEN_THINK, &attrs), LLMM_OK);
    assert_true(attrs & LLMM_TOKEN_ATTR_USER_DEFINED);
    llmm_model_free(m);
}

static void test_control_tokens_need_parse_special(void **state) {
    (void)state;
    llmm_model *m = load_vocab_file(QWEN2);
    const char *text = "<|im_start|>user\nHi<|im_end|>";
    llmm_token ids[64];
    size_t n = tokenize_flags(m, text, strlen(text), LLMM_TOKENIZE_PARSE_SPECIAL, ids, 64);
    assert_true(n >= 4);
    assert_int_equal(ids[0], QWEN_IM_START);
    assert_int_equal(ids[n - 1], QWEN_IM_END);
    size_t plain = tokenize_flags(m, text, strlen(text), 0, ids, 64);
    assert_false(contains(ids, plain, QWEN_IM_START));
    assert_false(contains(ids, plain, QWEN_IM_END));
    assert_round_trip(m, ids, plain, text, strlen(text));
    /* control tokens are empty pieces unless asked for */
    char piece[32];
    size_t nb;
    assert_int_equal(llmm_token_to_piece(m, QWEN_IM_END, 0, piece, sizeof piece, &nb), LLMM_OK);
    assert_int_equal(nb, 0);
    assert_int_equal(llmm_token_to_piece(m, QWEN_IM_END, LLMM_PIECE_RENDER_SPECIAL, piece, sizeof piece, &nb),
                     LLMM_OK);
    assert_int_equal(nb, 10);
    assert_memory_equal(piece, "<|im_end|>", 10);
    llmm_model_free(m);
}

static void assert_piece(const llmm_model *m, llmm_token t, const char *want) {
    char piece[64];
    size_t nb;
    assert_int_equal(llmm_token_to_piece(m, t, 0, piece, sizeof piece, &nb), LLMM_OK);
    assert_int_equal(nb, strlen(want));
    assert_memory_equal(piece, want, nb);
}

/* Token text is GPT-2 byte symbols: U+0120 is a space, U+010A a newline. */
static void test_pieces_decode_the_byte_map(void **state) {
    (void)state;
    llmm_model *m = load_vocab_file(QWEN2);
    assert_piece(m, 21927, " Hello");
    assert_piece(m, 220, " ");
    assert_piece(m, 198, "\n");
    assert_piece(m, 9707, "Hello");
    llmm_model_free(m);
}

static void test_bos_eos_and_end_of_turn(void **state) {
    (void)state;
    llmm_token ids[16], t;
    uint32_t attrs;
    /* Llama 3: add_bos, <|eot_id|> found by text as EOT and marked end-of-generation */
    llmm_model *m = load_vocab_file("ggml-vocab-llama-bpe.gguf");
    size_t n = tokenize_flags(m, "Hi", 2, LLMM_TOKENIZE_ADD_SPECIAL, ids, 16);
    assert_int_equal(n, 2);
    assert_int_equal(ids[0], 128000);
    assert_int_equal(llmm_model_special_token(m, LLMM_SPECIAL_EOT, &t), LLMM_OK);
    assert_int_equal(t, 128009);
    assert_int_equal(llmm_token_attrs(m, 128009, &attrs), LLMM_OK);
    assert_true((attrs & LLMM_TOKEN_ATTR_EOS) && (attrs & LLMM_TOKEN_ATTR_CONTROL));
    assert_int_equal(llmm_token_attrs(m, 128001, &attrs), LLMM_OK); /* <|end_of_text|>, the EOS */
    assert_true(attrs & LLMM_TOKEN_ATTR_EOS);
    llmm_model_free(m);
    /* Qwen: no BOS (the file says so); EOS <|im_end|>, <|endoftext|> also ends generation */
    m = load_vocab_file(QWEN2);
    n = tokenize_flags(m, "Hi", 2, LLMM_TOKENIZE_ADD_SPECIAL, ids, 16);
    assert_int_equal(n, 1);
    assert_int_equal(llmm_model_special_token(m, LLMM_SPECIAL_EOS, &t), LLMM_OK);
    assert_int_equal(t, QWEN_IM_END);
    assert_int_equal(llmm_token_attrs(m, 151643, &attrs), LLMM_OK);
    assert_true(attrs & LLMM_TOKEN_ATTR_EOS);
    llmm_model_free(m);
    /* GPT-2: the family's default is no BOS */
    m = load_vocab_file("ggml-vocab-gpt-2.gguf");
    n = tokenize_flags(m, "Hi", 2, LLMM_TOKENIZE_ADD_SPECIAL, ids, 16);
    assert_int_equal(n, 1);
    assert_int_equal(tokenize_flags(m, "", 0, LLMM_TOKENIZE_ADD_SPECIAL, ids, 16), 0);
    llmm_model_free(m);
}

/* Random bytes half the time; otherwise random pieces that stress the pre-tokenizers (runs of
 * spaces and newlines, digits, contractions, multi-byte letters, marks, invalid sequences). */
static size_t random_text(test_rng *rng, char *buf, size_t cap) {
    static const char *const pieces[] = {
        " ",  "  ", "\n", "\r\n", "\t", "'s", "'LL", "a", "Zb", "123", "4", "\xc3\xa9", "\xe4\xb8\xad",
        "\xf0\x9f\x98\x80", "\xcc\x81", "\xe3\x80\x80", "\xc2\xa0", "!", "...", "$", "\xe2\x80\x99", "\x80", "\xc3",
        "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xff", "<think>", "<|im_end|>", "Hello", " world", "\x00",
    };
    size_t len = rng_u64(rng) % cap;
    if (rng_u64(rng) & 1) {
        for (size_t i = 0; i < len; i++) buf[i] = (char)rng_u64(rng);
        return len;
    }
    size_t n = 0;
    while (n < len) {
        const char *p = pieces[rng_u64(rng) % (sizeof pieces / sizeof *pieces)];
        size_t k = p[0] ? strlen(p) : 1;
        if (n + k > cap) break;
        memcpy(buf + n, p, k);
        n += k;
    }
    return n;
}

/* Which bytes have a symbol in the vocabulary (a lone byte tokenizes to something). */
static int representable_bytes(const llmm_model *m, int have[256]) {
    int all = 1;
    for (int b = 0; b < 256; b++) {
        char c = (char)b;
        llmm_token ids[4];
        have[b] = tokenize_flags(m, &c, 1, 0, ids, 4) > 0;
        all &= have[b];
    }
    return all;
}

/* Any bytes tokenize without error and detokenize back to themselves, less the bytes the
 * vocabulary cannot represent (DeepSeek, Falcon and StarCoder lack a few; they are dropped). */
static void test_fuzz_random_bytes_round_trip(void **state) {
    (void)state;
    static const struct {
        const char *name;
        int complete; /* all 256 byte symbols present */
    } vocabs[] = {{QWEN2, 1}, {"ggml-vocab-llama-bpe.gguf", 1}, {"ggml-vocab-gpt-2.gguf", 1},
                  {"ggml-vocab-deepseek-llm.gguf", 0}, {"ggml-vocab-falcon.gguf", 0}, {"ggml-vocab-starcoder.gguf", 0}};
    test_rng rng = rng_seeded(0x9E3779B97F4A7C15ull); /* fixed, so that a failure reproduces */
    char text[96], kept[96];
    llmm_token ids[256];
    int have[256];
    for (size_t v = 0; v < sizeof vocabs / sizeof *vocabs; v++) {
        llmm_model *m = load_vocab_file(vocabs[v].name);
        assert_int_equal(representable_bytes(m, have), vocabs[v].complete);
        for (int i = 0; i < 10000; i++) {
            size_t len = random_text(&rng, text, sizeof text), n_kept = 0;
            for (size_t k = 0; k < len; k++)
                if (have[(uint8_t)text[k]]) kept[n_kept++] = text[k];
            size_t n = tokenize_flags(m, text, len, 0, ids, 256);
            assert_round_trip(m, ids, n, kept, n_kept);
        }
        llmm_model_free(m);
    }
}

/* Long runs: whitespace, digits and letters far past any fixed buffer. */
static void test_long_runs_round_trip(void **state) {
    (void)state;
    llmm_model *m = load_vocab_file("ggml-vocab-deepseek-llm.gguf");
    size_t len = 100000;
    char *text = malloc(len);
    assert_non_null(text);
    for (size_t i = 0; i < len; i++) text[i] = i < len / 3 ? ' ' : i < 2 * len / 3 ? '7' : "ab\n"[i % 3];
    size_t n = 0;
    assert_int_equal(llmm_tokenize(m, text, len, 0, NULL, 0, &n), LLMM_ERR_BUFFER_TOO_SMALL);
    llmm_token *ids = malloc(n * sizeof *ids);
    assert_non_null(ids);
    assert_int_equal(tokenize_flags(m, text, len, 0, ids, n), n);
    assert_round_trip(m, ids, n, text, len);
    free(ids);
    free(text);
    llmm_model_free(m);
}

static void test_wordpiece_is_unsupported(void **state) {
    (void)state;
    char path[1024], err[512] = "";
    llmm_status st;
    llmm_model *m = load_path(shared_path(path, sizeof path, "vocab/ggml-vocab-bert-bge.gguf"), &st, err, sizeof err);
    assert_int_equal(st, LLMM_ERR_UNSUPPORTED);
    assert_null(m);
    assert_non_null(strstr(err, "'bert'"));
}

/* ---- synthetic vocabularies (byte symbols, "ab", one merge "a b") for the loader's paths */

/* GPT-2's symbol of a byte, as UTF-8; spelled out here so the test does not lean on lib/. */
static void gpt2_symbol(int byte, char out[3]) {
    int kept = (byte >= 0x21 && byte <= 0x7E) || (byte >= 0xA1 && byte <= 0xAC) || byte >= 0xAE;
    unsigned cp = kept ? (unsigned)byte
                  : byte <= 0x20 ? 0x100u + (unsigned)byte
                  : byte <= 0xA0 ? 0x100u + 33 + (unsigned)byte - 0x7F
                                 : 0x100u + 67;
    memset(out, 0, 3);
    if (cp < 0x80) {
        out[0] = (char)cp;
    } else {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
    }
}

/* Token i is byte i's symbol (one byte may be left out), then "ab". */
static void write_byte_tokens(gguf_builder *b, int drop_byte) {
    char texts[256][3];
    const char *ptrs[257];
    size_t n = 0;
    for (int byte = 0; byte < 256; byte++) {
        if (byte == drop_byte) continue;
        gpt2_symbol(byte, texts[n]);
        ptrs[n] = texts[n];
        n++;
    }
    ptrs[n++] = "ab";
    gb_kv_array_str(b, "tokenizer.ggml.tokens", ptrs, n);
}

static llmm_status load_synthetic_with(const char *pre, int with_merges, int drop_byte, const llmm_allocator *alloc,
                                       char *err, size_t err_size, llmm_model **out) {
    gguf_builder b;
    gb_init(&b);
    gb_header(&b, 3, 0, 3 + (pre != NULL) + (with_merges != 0));
    gb_kv_str(&b, "general.architecture", "llama");
    gb_kv_str(&b, "tokenizer.ggml.model", "gpt2");
    if (pre) gb_kv_str(&b, "tokenizer.ggml.pre", pre);
    if (with_merges) {
        const char *merges[] = {"a b"};
        gb_kv_array_str(&b, "tokenizer.ggml.merges", merges, 1);
    }
    write_byte_tokens(&b, drop_byte);
    char path[64];
    assert_true(gb_finish(&b));
    assert_int_equal(gb_write_temp(&b, path, sizeof path), 0);
    gb_free(&b);
    llmm_status st;
    *out = load_with(path, alloc, &st, err, err_size);
    unlink(path);
    return st;
}

static llmm_status load_synthetic(const char *pre, int with_merges, int drop_byte, char *err, size_t err_size,
                                  llmm_model **out) {
    return load_synthetic_with(pre, with_merges, drop_byte, NULL, err, err_size, out);
}

static void test_loader_errors(void **state) {
    (void)state;
    char err[512] = "";
    llmm_model *m = NULL;
    assert_int_equal(load_synthetic("no-such-pre", 1, -1, err, sizeof err, &m), LLMM_ERR_UNSUPPORTED);
    assert_non_null(strstr(err, "no-such-pre"));
    assert_int_equal(load_synthetic("qwen2", 0, -1, err, sizeof err, &m), LLMM_ERR_BAD_FILE);
    assert_non_null(strstr(err, "merges"));
    /* a working one: "ab" merges; no tokenizer.ggml.pre means the default family */
    assert_int_equal(load_synthetic(NULL, 1, -1, err, sizeof err, &m), LLMM_OK);
    llmm_token ids[8];
    assert_int_equal(tokenize_flags(m, "ab", 2, 0, ids, 8), 1);
    assert_int_equal(ids[0], 256);
    llmm_model_free(m);
    /* a vocabulary without the symbol of byte 'z' drops it (as the reference does), and it
     * still keeps "a" and "b" apart */
    assert_int_equal(load_synthetic("gpt-2", 1, 'z', err, sizeof err, &m), LLMM_OK);
    assert_int_equal(tokenize_flags(m, "azb", 3, 0, ids, 8), 2);
    assert_int_equal(ids[0], 'a'); /* token i is byte i's symbol below the dropped one */
    assert_int_equal(ids[1], 'b');
    assert_int_equal(tokenize_flags(m, "ab", 2, 0, ids, 8), 1);
    llmm_model_free(m);
}

/* Every allocation failure while loading or tokenizing is reported, never a crash or a leak
 * (the sanitizer build checks the leaks). */
static void test_out_of_memory(void **state) {
    (void)state;
    failing_alloc f = {0};
    llmm_allocator a = failing_allocator(&f);
    char err[512];
    llmm_model *m = NULL;
    int budget = 0;
    for (;; budget++) {
        f.allowed = budget;
        llmm_status st = load_synthetic_with("qwen2", 1, -1, &a, err, sizeof err, &m);
        if (st == LLMM_OK) break;
        assert_int_equal(st, LLMM_ERR_NO_MEMORY);
        assert_true(budget < 1000);
    }
    const char *text = "It's 2024:  ab ab\n\n  \xc3\xa9t\xc3\xa9 done!";
    llmm_token ids[64];
    for (budget = 0;; budget++) {
        f.allowed = budget;
        size_t n = 0;
        llmm_status st = llmm_tokenize(m, text, strlen(text), LLMM_TOKENIZE_ADD_SPECIAL, ids, 64, &n);
        if (st == LLMM_OK) break;
        assert_int_equal(st, LLMM_ERR_NO_MEMORY);
        assert_true(budget < 1000);
    }
    f.allowed = 1000;
    llmm_model_free(m);
}

/* ---- the pre-tokenizer on its own */

typedef struct words {
    char joined[512]; /* the words separated by '|' */
    size_t len;
    size_t bytes; /* total bytes of the words */
} words;

static llmm_status collect_word(void *user, const char *word, size_t len) {
    words *w = user;
    assert_true(len > 0);
    if (w->len && w->len < sizeof w->joined - 1) w->joined[w->len++] = '|';
    for (size_t i = 0; i < len && w->len < sizeof w->joined - 1; i++) w->joined[w->len++] = word[i];
    w->joined[w->len] = '\0';
    w->bytes += len;
    return LLMM_OK;
}

static void split_with(const char *pre, const char *text, size_t len, words *w) {
    const pretok_family *fam = llmm__pretok_family_find(pre, strlen(pre));
    assert_non_null(fam);
    pretokenizer pt = {0};
    llmm_diag d = {""};
    llmm_status st = llmm__pretok_compile(&pt, fam, NULL, &d);
    if (st) print_message("%s: %s\n", pre, d.msg);
    assert_int_equal(st, LLMM_OK);
    memset(w, 0, sizeof *w);
    assert_int_equal(llmm__pretok_split(&pt, text, len, NULL, collect_word, w), LLMM_OK);
    llmm__pretok_free(&pt, NULL);
}

static void assert_split(const char *pre, const char *text, const char *want) {
    words w;
    split_with(pre, text, strlen(text), &w);
    if (strcmp(w.joined, want) != 0) print_message("%s: got '%s', want '%s'\n", pre, w.joined, want);
    assert_string_equal(w.joined, want);
}

/* Splits worked out by hand from each family's regexes (leftmost-first, greedy, gaps kept). */
static void test_pretokenizer_splits(void **state) {
    (void)state;
    assert_split("gpt-2", "I'm  fine\n\nok 42", "I|'m| | fine|\n|\n|ok| 42");
    assert_split("tekken", "Hello WORLD d\xc3\xa9j\xc3\xa0-vu 123",
                 "Hello| WORLD| d\xc3\xa9j\xc3\xa0|-vu| |1|2|3");
    assert_split("deepseek-coder", "x=10\nfoo(bar)", "x|=|1|0|\n|foo|(|bar|)");
    assert_split("bloom", "Hi, there. (ok)", "Hi|,| there|. (|ok|)");
    assert_split("llama3", "  x  1234\r\n\n", " | x| | |123|4|\r\n\n");
    assert_split("deepseek-llm", "ab   \x01  ", "ab|   \x01|  ");
}

/* The names the reference converter writes for the newer families: LFM2 and SmolLM3
 * ("smaug-bpe") split as Llama 3 (digits in threes, contractions in either case, whitespace runs
 * leaving one space for the next word); Qwen3.5 as Qwen2 (single digits) except that combining
 * marks stay inside a word. Gemma 3 is an SPM vocabulary and has no pre-tokenizer. */
static void test_pretokenizer_newer_families(void **state) {
    (void)state;
    static const char *const llama3_like[] = {"lfm2", "smaug-bpe", "llama-bpe"};
    for (size_t i = 0; i < ARRAY_LEN(llama3_like); i++) {
        assert_split(llama3_like[i], "I'LL 12345 ok!!\n", "I|'LL| |123|45| ok|!!\n");
        assert_split(llama3_like[i], "a   b\t\n\n c", "a|  | b|\t\n\n| c");
        assert_split(llama3_like[i], "cafe\xcc\x81 d\xc3\xa9j\xc3\xa0", "cafe|\xcc\x81| d\xc3\xa9j\xc3\xa0");
    }
    const pretok_family *lfm2 = llmm__pretok_family_find("lfm2", 4);
    assert_non_null(lfm2);
    assert_true(lfm2->add_bos && lfm2->ignore_merges); /* as the reference sets for "lfm2" */
    assert_split("qwen35", "cafe\xcc\x81 don't 2024\n\n  x", "cafe\xcc\x81| don|'t| |2|0|2|4|\n\n| | x");
    assert_split("qwen2", "cafe\xcc\x81 don't 2024\n\n  x", "cafe|\xcc\x81| don|'t| |2|0|2|4|\n\n| | x");
    assert_split("qwen35", "\xcc\x81x +\xcc\x81!", "\xcc\x81x| +|\xcc\x81|!");
}

/* Every family compiles, and its words always put the text back together. */
static void test_pretokenizer_families_are_lossless(void **state) {
    (void)state;
    char names[1024];
    llmm__pretok_family_list(names, sizeof names);
    test_rng rng = rng_seeded(42);
    char text[96];
    size_t families = 0;
    for (char *name = strtok(names, ", "); name; name = strtok(NULL, ", ")) {
        families++;
        for (int i = 0; i < 300; i++) {
            size_t len = random_text(&rng, text, sizeof text);
            words w;
            split_with(name, text, len, &w);
            assert_int_equal(w.bytes, len);
        }
    }
    assert_true(families >= 30);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_all_bpe_vocab_files),
        cmocka_unit_test(test_user_defined_token_is_one_token),
        cmocka_unit_test(test_control_tokens_need_parse_special),
        cmocka_unit_test(test_pieces_decode_the_byte_map),
        cmocka_unit_test(test_bos_eos_and_end_of_turn),
        cmocka_unit_test(test_fuzz_random_bytes_round_trip),
        cmocka_unit_test(test_long_runs_round_trip),
        cmocka_unit_test(test_wordpiece_is_unsupported),
        cmocka_unit_test(test_loader_errors),
        cmocka_unit_test(test_out_of_memory),
        cmocka_unit_test(test_pretokenizer_splits),
        cmocka_unit_test(test_pretokenizer_newer_families),
        cmocka_unit_test(test_pretokenizer_families_are_lossless),
    };
    return cmocka_run_group_tests_name("tokenizer_bpe", tests, NULL, NULL);
}
