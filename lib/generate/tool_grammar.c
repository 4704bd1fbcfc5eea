/* The public tool-call grammar: the GBNF of lib/schema/tool_gbnf.c compiled for a model. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "schema/tool_gbnf.h"

static llmm_status fail_text(char *err, size_t err_size, llmm_status st, const char *msg) {
    if (err && err_size) snprintf(err, err_size, "%s", msg);
    return st;
}

LLMM_API llmm_status llmm_grammar_from_tools(const llmm_model *model, const char *family, const llmm_tool *tools,
                                             size_t n_tools, llmm_grammar **out, char *err, size_t err_size) {
    if (err && err_size) err[0] = '\0';
    if (!out) return fail_text(err, err_size, LLMM_ERR_INVALID_ARG, "llmm_grammar_from_tools: NULL out");
    *out = NULL;
    if (!family && !model)
        return fail_text(err, err_size, LLMM_ERR_INVALID_ARG, "llmm_grammar_from_tools: no family and no model");
    if (!family && llmm_chat_tool_family_detect(model, &family) != LLMM_OK)
        return fail_text(err, err_size, LLMM_ERR_UNSUPPORTED,
                         "llmm_grammar_from_tools: the model's template is of no tool family; name one");
    const tool_family_info *f = llmm__tool_family_find(family);
    if (!f) return fail_text(err, err_size, LLMM_ERR_UNSUPPORTED, "llmm_grammar_from_tools: no such tool family");
    llmm_diag d = {{0}};
    char *gbnf = NULL;
    llmm_status st = llmm__tool_call_gbnf(f, tools, n_tools, &gbnf, &d);
    if (st) return fail_text(err, err_size, st, d.msg);
    st = llmm_grammar_create(model, gbnf, strlen(gbnf), "root", out, err, err_size);
    free(gbnf);
    return st;
}
