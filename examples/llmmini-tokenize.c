/* llmmini-tokenize: print the token ids of a text (or a file's exact bytes). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llmmini.h"

static void usage(FILE *out) {
    fprintf(out,
            "usage: llmmini-tokenize -m MODEL.gguf (-p TEXT | -f FILE) [--no-bos] [--special] [--pieces] [--info]\n"
            "  -m MODEL    GGUF model or vocabulary-only file\n"
            "  -p TEXT     text to tokenize\n"
            "  -f FILE     tokenize the file's bytes exactly (trailing newlines included)\n"
            "  --no-bos    do not add BOS/EOS (add_special off)\n"
            "  --special   parse control tokens such as <s> in the text\n"
            "  --pieces    also print each id with its piece, one per line\n"
            "  --info      print the model's facts first\n");
}

static int read_file(const char *path, char **out, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (!buf) break;
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap) break;
        char *grown = realloc(buf, cap *= 2);
        if (!grown) {
            free(buf);
            buf = NULL;
        }
        buf = grown;
    }
    int err = ferror(f);
    fclose(f);
    if (!buf || err) {
        free(buf);
        return -1;
    }
    *out = buf;
    *len = n;
    return 0;
}

static void print_piece(const llmm_model *m, llmm_token id) {
    char piece[256];
    size_t n = 0;
    if (llmm_token_to_piece(m, id, LLMM_PIECE_RENDER_SPECIAL, piece, sizeof piece, &n) != LLMM_OK) n = 0;
    printf("%6d '", id);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)piece[i];
        if (c < 0x20 || c == 0x7f || c == '\'' || c == '\\') printf("\\x%02x", c);
        else putchar(c);
    }
    printf("'\n");
}

static void print_info(const llmm_model *m) {
    llmm_model_info info = {.size = sizeof info};
    if (llmm_model_get_info(m, &info) != LLMM_OK) return;
    static const char *const tok_names[] = {"none", "spm", "bpe"};
    printf("architecture: %s\nname: %s\ntokenizer: %s\nvocab: %u\ncontext: %u\nembedding: %u\nlayers: %u\n"
           "heads: %u (kv %u, dim %u)\nfeed-forward: %u\nparameters: %llu\nfile bytes: %llu\nload ms: %.2f\n",
           info.architecture, info.name, tok_names[info.tokenizer % 3], info.n_vocab, info.n_ctx_train, info.n_embd,
           info.n_layer, info.n_head, info.n_head_kv, info.head_dim, info.n_ff, (unsigned long long)info.n_params,
           (unsigned long long)info.file_bytes, info.load_ms);
}

int main(int argc, char **argv) {
    const char *model_path = NULL, *text = NULL, *file = NULL;
    int add_special = 1, parse_special = 0, pieces = 0, info = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-m") && i + 1 < argc) model_path = argv[++i];
        else if (!strcmp(a, "-p") && i + 1 < argc) text = argv[++i];
        else if (!strcmp(a, "-f") && i + 1 < argc) file = argv[++i];
        else if (!strcmp(a, "--no-bos")) add_special = 0;
        else if (!strcmp(a, "--special")) parse_special = 1;
        else if (!strcmp(a, "--pieces")) pieces = 1;
        else if (!strcmp(a, "--info")) info = 1;
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "llmmini-tokenize: unknown or incomplete option '%s' (see --help)\n", a);
            return 2;
        }
    }
    if (!model_path || (!text == !file)) {
        fprintf(stderr, "llmmini-tokenize: need -m MODEL and exactly one of -p TEXT or -f FILE (see --help)\n");
        return 2;
    }
    char *owned = NULL;
    size_t len = 0;
    if (file) {
        if (read_file(file, &owned, &len) != 0) {
            fprintf(stderr, "llmmini-tokenize: cannot read '%s'\n", file);
            return 1;
        }
        text = owned;
    } else {
        len = strlen(text);
    }
    char err[512] = "";
    llmm_model_params mp;
    llmm_model_params_default(&mp, sizeof mp);
    mp.vocab_only = 1;
    mp.error_buf = err;
    mp.error_buf_size = sizeof err;
    llmm_model *m = NULL;
    llmm_status st = llmm_model_load(model_path, &mp, &m);
    if (st != LLMM_OK) {
        fprintf(stderr, "llmmini-tokenize: %s: %s\n", llmm_status_str(st), err);
        free(owned);
        return 1;
    }
    if (info) print_info(m);
    uint32_t flags = (add_special ? LLMM_TOKENIZE_ADD_SPECIAL : 0) | (parse_special ? LLMM_TOKENIZE_PARSE_SPECIAL : 0);
    size_t n = 0;
    st = llmm_tokenize(m, text, len, flags, NULL, 0, &n);
    llmm_token *ids = NULL;
    if (st == LLMM_ERR_BUFFER_TOO_SMALL || st == LLMM_OK) {
        ids = malloc((n ? n : 1) * sizeof *ids);
        st = ids ? llmm_tokenize(m, text, len, flags, ids, n, &n) : LLMM_ERR_NO_MEMORY;
    }
    if (st != LLMM_OK) {
        llmm_model_last_error(m, err, sizeof err);
        fprintf(stderr, "llmmini-tokenize: %s: %s\n", llmm_status_str(st), err);
    } else {
        for (size_t i = 0; i < n; i++) printf(i ? " %d" : "%d", ids[i]);
        printf("\n");
        for (size_t i = 0; pieces && i < n; i++) print_piece(m, ids[i]);
    }
    free(ids);
    free(owned);
    llmm_model_free(m);
    return st == LLMM_OK ? 0 : 1;
}
