/* The tool families' renderers, one per template shape (chat_render_*.c), each writing a
 * checked request (chat_request.h) as its template does. */
#ifndef LLMM_CHAT_RENDER_H
#define LLMM_CHAT_RENDER_H

#include "text/chat_request.h"

llmm_status llmm__render_qwen2_5(const llmm_chat_request *r, const parsed_request *p, chat_out *o, llmm_diag *d);
llmm_status llmm__render_qwen3(const llmm_chat_request *r, const parsed_request *p, chat_out *o, llmm_diag *d);
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

#endif
