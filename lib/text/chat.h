/* Chat templates without a Jinja engine: the built-in formats and the detection of a model's
 * template text by its distinctive markers (the reference engine's heuristics). */
#ifndef LLMM_CHAT_H
#define LLMM_CHAT_H

#include <stddef.h>

/* Index of the built-in format named `name` (exact, case-sensitive), or -1. */
int llmm__chat_format_find(const char *name);
/* Number of built-in formats, and the name of format i (0 <= i < count), NULL out of range. */
size_t llmm__chat_format_count(void);
const char *llmm__chat_format_name(int index);

/* Recognise a template text (Jinja source from tokenizer.chat_template, or a bare format name).
 * Returns the index of the built-in format to use, or -1. *family (optional) receives the
 * name of the family the reference engine would pick, also when llmmini does not build that
 * one in (e.g. "chatglm4"), and NULL when the text matches no family at all. */
int llmm__chat_detect(const char *template_text, const char **family);

#endif
