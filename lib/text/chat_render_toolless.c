/* The families whose templates know no tools (Phi-3.5, Gemma 2, SmolLM3): tool definitions are
 * dropped, an assistant turn that only called renders with empty content, and tool results are
 * whatever the template does with an unknown role (Phi drops them, SmolLM3 writes a user turn,
 * Gemma 2 refuses them through its role alternation), as the reference renders each. */
#include "text/chat_render.h"

#include <string.h>

/* ---------------------------------------------------------------- Phi-3.5 */

llmm_status llmm__render_phi3_5(const llmm_chat_request *r, const parsed_request *p, chat_out *o, llmm_diag *d) {
    (void)p, (void)d;
    for (size_t i = 0; i < r->n_messages; i++) {
        const llmm_chat_turn *m = &r->messages[i];
        const char *c = llmm__chat_text(m->content);
        if (llmm__chat_is_role(m, "tool") || (llmm__chat_is_role(m, "system") && !*c)) continue;
        llmm__chat_out_str(o, "<|");
        llmm__chat_out_str(o, m->role);
        llmm__chat_out_str(o, "|>\n");
        llmm__chat_out_str(o, c);
        llmm__chat_out_str(o, "<|end|>\n");
    }
    /* without a generation prompt the template closes with its eos text */
    llmm__chat_out_str(o, r->add_generation_prompt ? "<|assistant|>\n" : "<|endoftext|>");
    return LLMM_OK;
}

/* ---------------------------------------------------------------- Gemma 2 */

/* Byte i of the pieces read as one text. */
static char joined_at(const char *const *pieces, const size_t *lens, size_t i) {
    size_t k = 0;
    while (i >= lens[k]) i -= lens[k++];
    return pieces[k][i];
}

/* The pieces (at most 3) written as one text, trimmed as one (the fold happens before the
 * template's trim). */
static void out_trimmed_join(chat_out *o, const char *const *pieces, size_t n) {
    size_t lens[3], total = 0;
    for (size_t k = 0; k < n; k++) total += lens[k] = strlen(pieces[k]);
    size_t lo = 0, hi = total;
    while (lo < hi && llmm__chat_is_trim_space(joined_at(pieces, lens, lo))) lo++;
    while (hi > lo && llmm__chat_is_trim_space(joined_at(pieces, lens, hi - 1))) hi--;
    for (size_t k = 0, at = 0; k < n; at += lens[k], k++) {
        size_t start = lo > at ? lo - at : 0, end = hi - at < lens[k] ? hi - at : lens[k];
        if (hi > at && start < end) llmm__chat_out_bytes(o, pieces[k] + start, end - start);
    }
}

static void out_gemma_turn(chat_out *o, const char *role, const char *system, const char *content) {
    llmm__chat_out_str(o, "<start_of_turn>");
    llmm__chat_out_str(o, role);
    llmm__chat_out_str(o, "\n");
    const char *const joined[] = {system, "\n", content};
    if (system) out_trimmed_join(o, joined, 3);
    else out_trimmed_join(o, joined + 2, 1);
    llmm__chat_out_str(o, "<end_of_turn>\n");
}

/* The template refuses a system role, so the reference first folds system texts into the next
 * user message (joined by "\n"; a system text with no user message after it becomes one). The
 * roles must then alternate user, model, user, ...: a tool result breaks that, and the template
 * refuses it. */
llmm_status llmm__render_gemma2(const llmm_chat_request *r, const parsed_request *p, chat_out *o, llmm_diag *d) {
    (void)p;
    llmm__chat_out_str(o, "<bos>");
    const char *system = NULL; /* a system text waiting for its user message */
    size_t turn = 0;
    for (size_t i = 0; i < r->n_messages; i++) {
        const llmm_chat_turn *m = &r->messages[i];
        if (llmm__chat_is_role(m, "system")) {
            if (system)
                return llmm__diag_fail(d, LLMM_ERR_INVALID_ARG,
                                       "gemma2: two system messages in a row (its template has no system role)");
            system = llmm__chat_text(m->content);
            continue;
        }
        int is_user = llmm__chat_is_role(m, "user");
        if (system && !is_user) { /* the folded system text stands as a user turn of its own */
            out_gemma_turn(o, "user", NULL, system);
            system = NULL;
            turn++;
        }
        if (is_user != (turn % 2 == 0))
            return llmm__diag_fail(d, LLMM_ERR_INVALID_ARG,
                                   "Conversation roles must alternate user/assistant/user/assistant/...");
        out_gemma_turn(o, is_user ? "user" : llmm__chat_is_role(m, "assistant") ? "model" : m->role,
                       is_user ? system : NULL, llmm__chat_text(m->content));
        if (is_user) system = NULL;
        turn++;
    }
    if (system) out_gemma_turn(o, "user", NULL, system);
    if (r->add_generation_prompt) llmm__chat_out_str(o, "<start_of_turn>model\n");
    return LLMM_OK;
}

/* ---------------------------------------------------------------- SmolLM3 */

#define SMOLLM3_THINK_DEFAULT                                                                                      \
    "You are a helpful AI assistant named SmolLM, trained by Hugging Face. Your role as an assistant involves "    \
    "thoroughly exploring questions through a systematic thinking process before providing the final precise and " \
    "accurate solutions. This requires engaging in a comprehensive cycle of analysis, summarizing, exploration, "   \
    "reassessment, reflection, backtracking, and iteration to develop well-considered thinking process. Please "    \
    "structure your response into two main sections: Thought and Solution using the specified format: <think> "    \
    "Thought section </think> Solution section. In the Thought section, detail your reasoning process in steps. "   \
    "Each step should include detailed considerations such as analysing questions, summarizing relevant findings, " \
    "brainstorming new ideas, verifying the accuracy of the current steps, refining any errors, and revisiting "    \
    "previous steps. In the Solution section, based on various attempts, explorations, and reflections from the "   \
    "Thought section, systematically present the final solution that you deem correct. The Solution section "       \
    "should be logical, accurate, and concise and detail necessary steps needed to reach the conclusion."
#define SMOLLM3_NO_THINK_DEFAULT "You are a helpful AI assistant named SmolLM, trained by Hugging Face."

/* s with every occurrence of word removed, into out (at least strlen(s) + 1 bytes). */
static void remove_all(const char *s, const char *word, char *out) {
    size_t k = strlen(word);
    while (*s) {
        if (strncmp(s, word, k) == 0) s += k;
        else *out++ = *s++;
    }
    *out = '\0';
}

/* The system turn's custom instructions: the system text without the /no_think and /think
 * switches (removed in that order, as the template's two replace calls), right-trimmed. */
static llmm_status smollm3_instructions(const char *system, char **out, llmm_diag *d) {
    size_t n = strlen(system);
    char *buf = llmm__mem_alloc(NULL, 2 * (n + 1));
    if (!buf) return llmm__diag_fail(d, LLMM_ERR_NO_MEMORY, "out of memory");
    remove_all(system, "/no_think", buf + n + 1);
    remove_all(buf + n + 1, "/think", buf);
    size_t len = strlen(buf);
    while (len && llmm__chat_is_trim_space(buf[len - 1])) buf[--len] = '\0';
    *out = buf;
    return LLMM_OK;
}

llmm_status llmm__render_smollm3(const llmm_chat_request *r, const parsed_request *p, chat_out *o, llmm_diag *d) {
    (void)p;
    int think = r->enable_thinking != 0;
    char *instructions = NULL;
    if (r->n_messages && llmm__chat_is_role(&r->messages[0], "system")) {
        const char *system = llmm__chat_text(r->messages[0].content);
        if (strstr(system, "/no_think")) think = 0;
        else if (strstr(system, "/think")) think = 1;
        llmm_status st = smollm3_instructions(system, &instructions, d);
        if (st) return st;
    }
    llmm__chat_out_str(o, "<|im_start|>system\n## Metadata\n\nKnowledge Cutoff Date: June 2025\nReasoning Mode: ");
    llmm__chat_out_str(o, think ? "/think" : "/no_think");
    llmm__chat_out_str(o, "\n\n## Custom Instructions\n\n");
    llmm__chat_out_str(o, instructions && *instructions ? instructions
                          : think                       ? SMOLLM3_THINK_DEFAULT
                                                        : SMOLLM3_NO_THINK_DEFAULT);
    llmm__chat_out_str(o, "\n\n<|im_end|>\n");
    llmm__mem_free(NULL, instructions);
    for (size_t i = 0; i < r->n_messages; i++) {
        const llmm_chat_turn *m = &r->messages[i];
        const char *c = llmm__chat_text(m->content);
        if (llmm__chat_is_role(m, "assistant")) {
            llmm__chat_out_str(o, think ? "<|im_start|>assistant\n" : "<|im_start|>assistant\n<think>\n\n</think>\n");
            while (*c == '\n') c++;
        } else if (!llmm__chat_is_role(m, "system")) { /* user, and tool results as user turns */
            llmm__chat_out_str(o, "<|im_start|>user\n");
        } else {
            continue;
        }
        llmm__chat_out_str(o, c);
        llmm__chat_out_str(o, "<|im_end|>\n");
    }
    if (r->add_generation_prompt)
        llmm__chat_out_str(o, think ? "<|im_start|>assistant\n" : "<|im_start|>assistant\n<think>\n\n</think>\n");
    return LLMM_OK;
}
