/* The tool families' renderers, one per template shape (chat_render_*.c), each writing a
 * checked request (chat_request.h) as its template does. */
#ifndef LLMM_CHAT_RENDER_H
#define LLMM_CHAT_RENDER_H

#include "text/chat_request.h"

/* A piece of a message, not NUL-terminated. */
typedef struct chat_span {
    const char *s;
    size_t n;
} chat_span;

/* t without leading and trailing whitespace (Jinja's trim, ASCII whitespace here). */
chat_span llmm__chat_trim(chat_span t);

/* Qwen's split of an assistant message's content c into reasoning and answer: reasoning_content
 * when given, else what a "</think>" in c separates (the templates' own string surgery: the
 * reasoning after the last "<think>" before the first "</think>", the answer after the last
 * "</think>", newlines next to the markers dropped). */
void llmm__chat_split_reasoning(const llmm_chat_turn *m, chat_span c, chat_span *reasoning, chat_span *content);

llmm_status llmm__render_qwen2_5(const llmm_chat_request *r, const parsed_request *p, chat_out *o, llmm_diag *d);
llmm_status llmm__render_qwen3(const llmm_chat_request *r, const parsed_request *p, chat_out *o, llmm_diag *d);
/* Qwen3.5: the tool list first in the system turn, XML-style calls, contents trimmed. */
llmm_status llmm__render_qwen3_5(const llmm_chat_request *r, const parsed_request *p, chat_out *o, llmm_diag *d);
llmm_status llmm__render_granite4(const llmm_chat_request *r, const parsed_request *p, chat_out *o, llmm_diag *d);
/* Hermes 3: tools restated as Python signatures in a fixed system turn, ChatML turns. */
llmm_status llmm__render_hermes3(const llmm_chat_request *r, const parsed_request *p, chat_out *o, llmm_diag *d);
/* LFM2.5: ChatML, the tools as a JSON list in the system turn, no calls in the history. */
llmm_status llmm__render_lfm2(const llmm_chat_request *r, const parsed_request *p, chat_out *o, llmm_diag *d);
/* Llama 3.1 and 3.2 (identical output): tools pasted into the first user message. */
llmm_status llmm__render_llama3(const llmm_chat_request *r, const parsed_request *p, chat_out *o, llmm_diag *d);
/* Mistral Nemo: [AVAILABLE_TOOLS] before the last user message, [TOOL_CALLS], [TOOL_RESULTS]. */
llmm_status llmm__render_mistral_nemo(const llmm_chat_request *r, const parsed_request *p, chat_out *o,
                                      llmm_diag *d);
/* Gemma 4: its own turn markup, tools and calls in a <|"|>-quoted dialect, results inside the
 * model's turn. */
llmm_status llmm__render_gemma4(const llmm_chat_request *r, const parsed_request *p, chat_out *o, llmm_diag *d);
/* The templates without tools: tool definitions dropped, calls rendered as empty turns. */
llmm_status llmm__render_phi3_5(const llmm_chat_request *r, const parsed_request *p, chat_out *o, llmm_diag *d);
/* Gemma 2: system texts folded into the next user message, roles that must alternate. */
llmm_status llmm__render_gemma2(const llmm_chat_request *r, const parsed_request *p, chat_out *o, llmm_diag *d);
/* SmolLM3: a fixed metadata system turn; /think and /no_think in the system text switch modes. */
llmm_status llmm__render_smollm3(const llmm_chat_request *r, const parsed_request *p, chat_out *o, llmm_diag *d);

#endif
