/* Streaming text assembly for llmm_generate: turns the byte pieces of generated tokens into
 * llmm_stream_fn calls that never split a UTF-8 character and never show a stop string.
 *
 * Bytes are held back while they are an incomplete UTF-8 character or could still be the
 * start of a stop string, so at most (longest stop string - 1 + 3) bytes wait at a time.
 * A callback chunk with complete_utf8 = 1 is valid UTF-8 throughout; a chunk of bytes that
 * can never form a character (invalid lead, stray continuation, overlong or surrogate
 * form, or a tail cut off by a stop string or by llmm__text_stream_finish) is delivered on its
 * own with complete_utf8 = 0, so no byte is lost. When several stop strings match, the one
 * that ends first wins (as if the text arrived byte by byte), then the longer one. */
#ifndef LLMM_TEXT_STREAM_H
#define LLMM_TEXT_STREAM_H

#include "base/common.h"

typedef struct text_stream {
    const llmm_allocator *alloc;
    const char *const *stop; /* (n_stop) the caller's strings: not copied, must outlive ts */
    size_t *stop_len;        /* (n_stop) 0 for the empty ones, which are ignored */
    size_t n_stop;
    size_t max_stop_len;
    char *held;              /* (held_cap) bytes received but not yet delivered */
    size_t held_len, held_cap;
    int stop_index;          /* the matched stop string, or -1 */
    int cancelled;           /* the callback returned non-zero */
} text_stream;

/* Prepare ts for a stream with n_stop stop strings (stop may be NULL when n_stop is 0).
 * alloc (NULL = the C library) must outlive ts. Errors: INVALID_ARG (ts NULL, a NULL stop
 * string, n_stop > INT_MAX), NO_MEMORY. On failure ts needs no llmm__text_stream_free. */
llmm_status llmm__text_stream_init(text_stream *ts, const char *const *stop, size_t n_stop,
                             const llmm_allocator *alloc);

/* Add n bytes (bytes may be NULL when n is 0) and deliver to fn (may be NULL: then only
 * stop detection happens) what is now certain. *stop_index (may be NULL) receives the
 * index of the stop string that matched, else -1; *cancelled (may be NULL) 1 when fn
 * returned non-zero. Once either happened the stream is over: later pushes deliver
 * nothing, drop their bytes and report the same outcome. The stop string and the bytes
 * after it are never delivered; the text before it is, even when it ends in an incomplete
 * character. Errors: INVALID_ARG, NO_MEMORY (nothing of this push was taken then). */
llmm_status llmm__text_stream_push(text_stream *ts, const char *bytes, size_t n, llmm_stream_fn fn,
                             void *user, int *stop_index, int *cancelled);

/* End of the stream: deliver every held byte (an unfinished stop-string prefix is just
 * text; an incomplete trailing character goes out with complete_utf8 = 0). Nothing is
 * delivered after a stop or a cancel. *cancelled as for push. Errors: INVALID_ARG. */
llmm_status llmm__text_stream_finish(text_stream *ts, llmm_stream_fn fn, void *user, int *cancelled);

/* Release what ts holds; NULL is ignored. ts may be initialized again afterwards. */
void llmm__text_stream_free(text_stream *ts);

#endif
