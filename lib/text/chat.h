/* Chat templates without a Jinja engine: the built-in formats and the detection of a model's
 * template text by its distinctive markers (the reference engine's heuristics). */
#ifndef LLMM_CHAT_H
#define LLMM_CHAT_H

#include <stddef.h>

#include "base/common.h"

/* Writes into the caller's buffer as far as it reaches and counts every byte, so one pass
 * both fills a large enough buffer and measures the needed size. */
typedef struct chat_out {
    char *buf;
    size_t cap;
    size_t len;
    int overflow; /* the length no longer fits in size_t */
} chat_out;

void llmm__chat_out_bytes(chat_out *o, const char *s, size_t n);
void llmm__chat_out_str(chat_out *o, const char *s); /* NULL writes nothing */
/* The buffer rule of llmm_chat_format: *needed, BUFFER_TOO_SMALL, the NUL when there is room. */
llmm_status llmm__chat_out_finish(const chat_out *o, const char *who, size_t *needed, llmm_diag *d);

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

/* INVALID_ARG (the reason in d) unless every message has a role the formats know and content. */
llmm_status llmm__chat_check_messages(const llmm_chat_message *m, size_t n, llmm_diag *d);

/* The format to render with: template_name's when given (UNSUPPORTED when no built-in one has
 * that name), else the one the model's template text asks for, where template_status is how
 * reading tokenizer.chat_template went (llmm_model_meta_str: NOT_FOUND when absent). */
llmm_status llmm__chat_resolve(const char *template_name, const char *model_template, llmm_status template_status,
                               int *index, llmm_diag *d);

/* Render messages in format index into buf (capacity bytes, NUL-terminated when there is room
 * after the text); *needed gets the text's length, also when BUFFER_TOO_SMALL. */
llmm_status llmm__chat_render(int index, const llmm_chat_message *messages, size_t n, int add_generation_prompt,
                              char *buf, size_t capacity, size_t *needed, llmm_diag *d);

#endif
