/* The call syntaxes whose arguments the parser rewrites as compact JSON: LFM2's Python calls,
 * Qwen3.5's parameter blocks and Gemma 4's value dialect. Each parses text[pos..n) (after the
 * reasoning) into p as llmm__chat_parse does (chat_parse.h), the arguments into p->converted.
 * NO_MEMORY only. */
#ifndef LLMM_CHAT_PARSE_REWRITTEN_H
#define LLMM_CHAT_PARSE_REWRITTEN_H

#include <stddef.h>

#include "base/common.h"
#include "text/chat_parsed.h"

/* <|tool_call_start|>[name(key=value, ...)]<|tool_call_end|> */
llmm_status llmm__chat_parse_python_call(const char *t, size_t n, size_t pos, int final, chat_parse *p);
/* <tool_call>\n<function=NAME>\n<parameter=KEY>\nVALUE\n</parameter>\n...</function>\n</tool_call> */
llmm_status llmm__chat_parse_xml_call(const char *t, size_t n, size_t pos, int final, chat_parse *p);
/* <|tool_call>call:NAME{key:value,...}<tool_call|> */
llmm_status llmm__chat_parse_gemma4_call(const char *t, size_t n, size_t pos, int final, chat_parse *p);

/* The string_params records for these tools (see chat_parse): owned by the caller (llmm__mem_free),
 * *out NULL when no parameter is a string. INVALID_ARG with the reason in d for a tool refused by
 * llmm__chat_tool_check; NO_MEMORY. */
llmm_status llmm__chat_string_params(const llmm_tool *tools, size_t n_tools, char **out, size_t *n_out, llmm_diag *d);

#endif
