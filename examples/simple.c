/* simple: load a model, continue a prompt greedily, print the text. The smallest complete use
 * of llmmini.   usage: simple MODEL.gguf [PROMPT] [N_TOKENS] */
#include <stdio.h>
#include <stdlib.h>

#include "llmmini.h"

static int print_bytes(void *user, const char *bytes, size_t n, int complete_utf8) {
    (void)user, (void)complete_utf8; /* the library never splits a UTF-8 character */
    fwrite(bytes, 1, n, stdout);
    return 0; /* non-zero would stop the generation */
}

int main(int argc, char **argv) {
    if (argc < 2) return fprintf(stderr, "usage: simple MODEL.gguf [PROMPT] [N_TOKENS]\n"), 2;
    const char *prompt = argc > 2 ? argv[2] : "Once upon a time";
    llmm_model *model = NULL;
    llmm_context *ctx = NULL;
    llmm_status st = llmm_model_load(argv[1], NULL, &model);
    if (st == LLMM_OK) st = llmm_context_create(model, NULL, &ctx);
    llmm_sampler_params sp; /* temperature 0: greedy, the same text on every run */
    llmm_sampler_params_default(&sp, sizeof sp);
    sp.temperature = 0;
    llmm_generate_params gp;
    llmm_generate_params_default(&gp, sizeof gp);
    gp.max_tokens = argc > 3 ? atoi(argv[3]) : 64;
    gp.sampling = &sp;
    gp.on_bytes = print_bytes;
    fputs(prompt, stdout);
    if (st == LLMM_OK) st = llmm_generate(ctx, prompt, &gp, NULL);
    printf("\n");
    if (st != LLMM_OK)
        fprintf(stderr, "simple: %s: %s\n", llmm_status_str(st), ctx ? llmm_context_last_error(ctx) : argv[1]);
    llmm_context_free(ctx);
    llmm_model_free(model);
    return st == LLMM_OK ? 0 : 1;
}
