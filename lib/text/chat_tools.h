/* Tool calling in a model family's own chat syntax: the families, their detection from a
 * template text, and rendering a request (tools, calls, results) the way the family's Jinja
 * template does, byte for byte (checked against the reference in ../shared/chat/render). */
#ifndef LLMM_CHAT_TOOLS_H
#define LLMM_CHAT_TOOLS_H

#include <stddef.h>

#include "base/common.h"

/* How a family writes calls in its output: the parser's choice (chat_parse.h). */
typedef enum tool_call_syntax {
    TOOL_SYNTAX_NONE,       /* the template declares no tools: everything is content */
    TOOL_SYNTAX_TAGGED_JSON, /* <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call> */
    TOOL_SYNTAX_BARE_JSON,   /* one {"name": ..., "parameters": {...}} ending the message (Llama 3) */
    TOOL_SYNTAX_LIST_JSON,   /* [TOOL_CALLS][{"name", "arguments", "id"}, ...] (Mistral Nemo) */
    TOOL_SYNTAX_PYTHON_CALL, /* <|tool_call_start|>[name(key=value, ...)]<|tool_call_end|> (LFM2):
                                Python literals, converted to JSON arguments by the parser */
    TOOL_SYNTAX_XML_CALL,    /* <tool_call>\n<function=NAME>\n<parameter=KEY>\nVALUE\n</parameter>\n
                                </function>\n</tool_call> (Qwen3.5): values as raw text */
    TOOL_SYNTAX_GEMMA4_CALL  /* <|tool_call>call:NAME{key:<|"|>text<|"|>,n:10}<tool_call|> (Gemma 4) */
} tool_call_syntax;

/* How a family's output opens and closes its reasoning. */
typedef enum reasoning_style {
    REASONING_NONE,
    REASONING_THINK_TRIMMED, /* <think>\n...</think>: the newline after <think> and the
                                whitespace after </think> are markup (Qwen) */
    REASONING_THINK_RAW,     /* <think>...</think>, every byte kept (SmolLM3) */
    REASONING_CHANNEL        /* <|channel>thought\n...<channel|> (Gemma 4), every byte kept */
} reasoning_style;

typedef struct tool_family_info {
    const char *name;
    tool_call_syntax syntax;
    reasoning_style reasoning;
} tool_family_info;

/* The family named name, or NULL. */
const tool_family_info *llmm__tool_family_find(const char *name);
/* ",qwen2_5,qwen3,...": every family, from the second byte. */
const char *llmm__tool_families_csv(void);
/* The family of a template text by its markers, or NULL. */
const tool_family_info *llmm__tool_family_detect(const char *template_text);

/* Render request in family f (f->renders) into buf, by llmm_chat_format's buffer rule.
 * INVALID_ARG with the reason for a malformed request; NO_MEMORY. */
llmm_status llmm__chat_tools_render(const tool_family_info *f, const llmm_chat_request *request, char *buf,
                                    size_t capacity, size_t *needed, llmm_diag *d);

#endif
