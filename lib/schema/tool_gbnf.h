/* GBNF for tool calls: exactly one call, in a tool family's own syntax, to one of the tools,
 * its arguments compact JSON valid against that tool's parameters schema. */
#ifndef LLMM_TOOL_GBNF_H
#define LLMM_TOOL_GBNF_H

#include <stddef.h>

#include "base/common.h"
#include "text/chat_tools.h"

/* On LLMM_OK *gbnf_out is NUL-terminated GBNF with a `root` rule, owned by the caller (free()).
 * INVALID_ARG with the reason in d (a tool refused by the checks or by the JSON-Schema
 * converter, no tools), UNSUPPORTED (the family has no call syntax), NO_MEMORY. */
llmm_status llmm__tool_call_gbnf(const tool_family_info *family, const llmm_tool *tools, size_t n_tools,
                                 char **gbnf_out, llmm_diag *d);

#endif
