/* A model's output in a tool family's syntax, split into content, reasoning and calls.
 * Lenient like the reference's parser: a call cut off inside its arguments is still a call
 * (with the arguments as written so far), and text that does not form a call stays content. */
#ifndef LLMM_CHAT_PARSE_H
#define LLMM_CHAT_PARSE_H

#include <stddef.h>

#include "base/common.h"
#include "text/chat_parsed.h"
#include "text/chat_tools.h"

/* Parse text[0..n). final == 0: more text may follow, so a possible start of a marker at the
 * end is held back. thinking: the prompt left the model inside its reasoning. The arrays of
 * out are reused across calls (free with llmm__chat_parse_free). NO_MEMORY only. */
llmm_status llmm__chat_parse(const tool_family_info *f, int thinking, const char *text, size_t n, int final,
                             chat_parse *out);
void llmm__chat_parse_free(chat_parse *p);

#endif
