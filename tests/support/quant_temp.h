/* Test helper: a GGUF file converted by llmm__quantize_model into a temp file, as
 * llmmini-quantize would write it (shared by the whole-model quantization tests). */
#ifndef LLMM_TESTS_QUANT_TEMP_H
#define LLMM_TESTS_QUANT_TEMP_H

#include <stddef.h>

#include "format/gguf.h"

/* Convert src with the named recipe into a new temp file, whose path goes to path (>= 32
 * bytes); the caller unlinks it. Fails the test on any error. */
void quantize_to_temp(const gguf_file *src, const char *recipe, char *path, size_t size);

#endif
