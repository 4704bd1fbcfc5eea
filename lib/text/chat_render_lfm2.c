/* LFM2.5 (Liquid's instruct template): ChatML turns after a BOS text, the tool list as one JSON
 * array line appended to the system text, and no syntax for calls in the history: an assistant
 * turn that called shows only its content, as the template writes it. Earlier assistant turns
 * lose a reasoning block ("</think>" and what precedes it). */
#include "text/chat_render.h"

#include <string.h>

static int is_trim_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r' || c == '\f' || c == '\v'; }

/* An earlier assistant turn: what follows its last "</think>", trimmed (Jinja's split and trim;
 * ASCII whitespace here), or the whole content when it has none. */
static void out_past_assistant(chat_out *o, const char *c) {
    const char *after = NULL;
    for (const char *s = strstr(c, "</think>"); s; s = strstr(s + 1, "</think>")) after = s + 8;
    if (!after) {
        llmm__chat_out_str(o, c);
        return;
    }
    size_t n = strlen(after);
    while (n && is_trim_space(*after)) after++, n--;
    while (n && is_trim_space(after[n - 1])) n--;
    llmm__chat_out_bytes(o, after, n);
}

llmm_status llmm__render_lfm2(const llmm_chat_request *r, const parsed_request *p, chat_out *o, llmm_diag *d) {
    (void)d;
    llmm__chat_out_str(o, "<|startoftext|>");
    size_t first = 0;
    const char *system = "";
    if (r->n_messages && llmm__chat_is_role(&r->messages[0], "system")) {
        system = llmm__chat_text(r->messages[0].content);
        first = 1;
    }
    if (*system || r->n_tools) {
        llmm__chat_out_str(o, "<|im_start|>system\n");
        llmm__chat_out_str(o, system);
        if (r->n_tools) {
            llmm__chat_out_str(o, *system ? "\nList of tools: [" : "List of tools: [");
            for (size_t i = 0; i < r->n_tools; i++) {
                if (i) llmm__chat_out_str(o, ", ");
                llmm__chat_out_json(o, &p->tools[i], 0, &llmm__json_style_python);
            }
            llmm__chat_out_str(o, "]");
        }
        llmm__chat_out_str(o, "<|im_end|>\n");
    }
    size_t last_assistant = (size_t)-1;
    for (size_t i = first; i < r->n_messages; i++)
        if (llmm__chat_is_role(&r->messages[i], "assistant")) last_assistant = i;
    for (size_t i = first; i < r->n_messages; i++) {
        const llmm_chat_turn *m = &r->messages[i];
        llmm__chat_out_str(o, "<|im_start|>");
        llmm__chat_out_str(o, m->role);
        llmm__chat_out_str(o, "\n");
        if (llmm__chat_is_role(m, "assistant") && i != last_assistant) out_past_assistant(o, llmm__chat_text(m->content));
        else llmm__chat_out_str(o, llmm__chat_text(m->content));
        llmm__chat_out_str(o, "<|im_end|>\n");
    }
    if (r->add_generation_prompt) llmm__chat_out_str(o, "<|im_start|>assistant\n");
    return LLMM_OK;
}
