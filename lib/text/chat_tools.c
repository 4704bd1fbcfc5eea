/* Tool calling in each family's own template syntax (see chat_tools.h): the families, their
 * detection from a template text, and the dispatch to their renderers (chat_render_*.c). */
#include "text/chat_tools.h"

#include <string.h>

#include "text/chat_render.h"

/* ---------------------------------------------------------------- the family table */

typedef struct family_row {
    tool_family_info info;
    chat_render_fn render;
    const char *markers[3];      /* all occur in the family's template text */
    const char *absent;          /* and this does not (NULL: no condition) */
} family_row;

/* Detection tries the rows in order; the first whose markers all occur, and whose `absent`
 * marker does not, wins. */
static const family_row families[] = {
    {{"qwen2_5", TOOL_SYNTAX_TAGGED_JSON, REASONING_NONE},
     llmm__render_qwen2_5,
     {"<|im_start|>", "<tool_call>", "You are Qwen, created by Alibaba Cloud"},
     NULL},
    {{"qwen3_5", TOOL_SYNTAX_XML_CALL, REASONING_THINK_TRIMMED},
     llmm__render_qwen3_5,
     {"<|im_start|>", "<tool_call>", "<function="},
     NULL},
    {{"qwen3", TOOL_SYNTAX_TAGGED_JSON, REASONING_THINK_TRIMMED},
     llmm__render_qwen3,
     {"<|im_start|>", "<tool_call>", "<think>"},
     "<function="}, /* Qwen3.5's template has every Qwen3 marker, and XML-style calls */
    {{"hermes3", TOOL_SYNTAX_TAGGED_JSON, REASONING_NONE},
     llmm__render_hermes3,
     {"<|im_start|>", "<tool_call>"},
     "<think>"},
    {{"granite4", TOOL_SYNTAX_TAGGED_JSON, REASONING_NONE},
     llmm__render_granite4,
     {"<|start_of_role|>", "<tool_call>"},
     NULL},
    {{"llama3_1", TOOL_SYNTAX_BARE_JSON, REASONING_NONE},
     llmm__render_llama3,
     {"<|start_header_id|>", "Environment: ipython", "builtin_tools"},
     NULL},
    {{"llama3_2", TOOL_SYNTAX_BARE_JSON, REASONING_NONE},
     llmm__render_llama3,
     {"<|start_header_id|>", "Environment: ipython"},
     NULL},
    {{"mistral_nemo", TOOL_SYNTAX_LIST_JSON, REASONING_NONE},
     llmm__render_mistral_nemo,
     {"[AVAILABLE_TOOLS]", "[TOOL_CALLS]", "[TOOL_RESULTS]"},
     NULL},
    {{"lfm2_5", TOOL_SYNTAX_PYTHON_CALL, REASONING_NONE},
     llmm__render_lfm2,
     {"<|im_start|>", "List of tools: ["},
     NULL},
    {{"smollm3", TOOL_SYNTAX_NONE, REASONING_THINK_RAW},
     llmm__render_smollm3,
     {"<|im_start|>", "Reasoning Mode"},
     "<tool_call>"},
    {{"gemma4", TOOL_SYNTAX_GEMMA4_CALL, REASONING_CHANNEL},
     llmm__render_gemma4,
     {"<|turn>", "<|tool_call>", "<|tool>"},
     NULL},
    {{"phi3_5", TOOL_SYNTAX_NONE, REASONING_NONE}, llmm__render_phi3_5, {"<|system|>", "<|assistant|>", "<|end|>"}, NULL},
    {{"gemma2", TOOL_SYNTAX_NONE, REASONING_NONE},
     llmm__render_gemma2,
     {"<start_of_turn>", "System role not supported"},
     NULL},
};
#define N_FAMILIES (sizeof families / sizeof *families)

/* The names in table order, from the second byte. */
static const char families_csv[] = ",qwen2_5,qwen3_5,qwen3,hermes3,granite4,llama3_1,llama3_2,mistral_nemo,lfm2_5,smollm3,gemma4,phi3_5,gemma2";

const tool_family_info *llmm__tool_family_find(const char *name) {
    for (size_t i = 0; name && i < N_FAMILIES; i++)
        if (strcmp(families[i].info.name, name) == 0) return &families[i].info;
    return NULL;
}

const char *llmm__tool_families_csv(void) { return families_csv + 1; }

const tool_family_info *llmm__tool_family_detect(const char *text) {
    for (size_t i = 0; text && i < N_FAMILIES; i++) {
        const family_row *r = &families[i];
        int all = 1;
        for (size_t k = 0; k < 3 && all; k++)
            if (r->markers[k] && !strstr(text, r->markers[k])) all = 0;
        if (all && (!r->absent || !strstr(text, r->absent))) return &r->info;
    }
    return NULL;
}

static const family_row *row_of(const tool_family_info *f) {
    return (const family_row *)((const char *)f - offsetof(family_row, info));
}

llmm_status llmm__chat_tools_render(const tool_family_info *f, const llmm_chat_request *request, char *buf,
                                    size_t capacity, size_t *needed, llmm_diag *d) {
    const family_row *row = row_of(f);
    parsed_request p = {0};
    llmm_status st = llmm__chat_request_parse(request, &p, d);
    chat_out o = {.buf = buf, .cap = capacity};
    if (!st) st = row->render(request, &p, &o, d);
    if (!st) st = llmm__chat_out_finish(&o, "llmm_chat_format_request", needed, d);
    llmm__chat_request_free(&p, request);
    return st;
}

LLMM_API llmm_status llmm_chat_tool_families(const char **names_csv) {
    if (!names_csv) return LLMM_ERR_INVALID_ARG;
    *names_csv = llmm__tool_families_csv();
    return LLMM_OK;
}

LLMM_API llmm_status llmm_chat_tool_trigger(const char *family, const char **trigger) {
    static const char *const triggers[] = {
        [TOOL_SYNTAX_NONE] = NULL,
        [TOOL_SYNTAX_TAGGED_JSON] = "<tool_call>",
        [TOOL_SYNTAX_BARE_JSON] = "{\"name\"",
        [TOOL_SYNTAX_LIST_JSON] = "[TOOL_CALLS]",
        [TOOL_SYNTAX_PYTHON_CALL] = "<|tool_call_start|>",
        [TOOL_SYNTAX_XML_CALL] = "<tool_call>",
        [TOOL_SYNTAX_GEMMA4_CALL] = "<|tool_call>",
    };
    if (!trigger) return LLMM_ERR_INVALID_ARG;
    *trigger = NULL;
    if (!family) return LLMM_ERR_INVALID_ARG;
    const tool_family_info *f = llmm__tool_family_find(family);
    if (!f || !triggers[f->syntax]) return LLMM_ERR_UNSUPPORTED;
    *trigger = triggers[f->syntax];
    return LLMM_OK;
}
