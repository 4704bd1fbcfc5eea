/* Streaming text assembly: UTF-8 hold-back and stop strings (see text_stream.h). */
#include "text_stream.h"

#include <limits.h>
#include <string.h>

/* ---------------------------------------------------------------- UTF-8 */

typedef enum utf8_kind { UTF8_VALID, UTF8_INVALID, UTF8_INCOMPLETE } utf8_kind;

typedef struct utf8_unit {
    utf8_kind kind;
    size_t n; /* bytes in the unit, at least 1 */
} utf8_unit;

/* Bytes in a character starting with lead, or 0 when lead cannot start one (a
 * continuation byte, the overlong leads C0/C1, or beyond U+10FFFF). */
static size_t utf8_char_len(unsigned char lead) {
    if (lead < 0x80) return 1;
    if (lead >= 0xC2 && lead <= 0xDF) return 2;
    if (lead >= 0xE0 && lead <= 0xEF) return 3;
    if (lead >= 0xF0 && lead <= 0xF4) return 4;
    return 0;
}

/* Allowed range of the second byte: narrower for some leads, which is how RFC 3629
 * excludes overlong forms, surrogates and code points above U+10FFFF. */
static int utf8_second_ok(unsigned char lead, unsigned char b) {
    switch (lead) {
    case 0xE0: return b >= 0xA0 && b <= 0xBF;
    case 0xED: return b >= 0x80 && b <= 0x9F;
    case 0xF0: return b >= 0x90 && b <= 0xBF;
    case 0xF4: return b >= 0x80 && b <= 0x8F;
    default: return b >= 0x80 && b <= 0xBF;
    }
}

/* The unit starting at s[0] of n > 0 bytes: a whole valid character, invalid bytes (the
 * lead and the continuations that fitted it before the one that did not), or a valid
 * but unfinished character running to the end. */
static utf8_unit utf8_next_unit(const unsigned char *s, size_t n) {
    size_t want = utf8_char_len(s[0]);
    if (want == 0) return (utf8_unit){UTF8_INVALID, 1};
    for (size_t i = 1; i < want; i++) {
        if (i == n) return (utf8_unit){UTF8_INCOMPLETE, n};
        int ok = i == 1 ? utf8_second_ok(s[0], s[1]) : (s[i] & 0xC0) == 0x80;
        if (!ok) return (utf8_unit){UTF8_INVALID, i};
    }
    return (utf8_unit){UTF8_VALID, want};
}

/* ---------------------------------------------------------------- delivery */

static void emit(text_stream *ts, const char *bytes, size_t n, int complete, llmm_stream_fn fn,
                 void *user) {
    if (fn && n && fn(user, bytes, n, complete) != 0) ts->cancelled = 1;
}

/* Deliver buf[0..len) in chunks that are either all valid characters (complete_utf8 = 1)
 * or all invalid bytes (0). An unfinished last character is kept unless final, when it
 * can no longer complete and counts as invalid. Returns the bytes consumed. */
static size_t deliver(text_stream *ts, const char *buf, size_t len, int final, llmm_stream_fn fn,
                      void *user) {
    const unsigned char *s = (const unsigned char *)buf;
    size_t pos = 0;
    while (pos < len && !ts->cancelled) {
        utf8_unit first = utf8_next_unit(s + pos, len - pos);
        if (first.kind == UTF8_INCOMPLETE && !final) break;
        int valid = first.kind == UTF8_VALID;
        size_t end = pos + first.n;
        while (end < len) {
            utf8_unit u = utf8_next_unit(s + end, len - end);
            if ((u.kind == UTF8_VALID) != valid || (u.kind == UTF8_INCOMPLETE && !final)) break;
            end += u.n;
        }
        emit(ts, buf + pos, end - pos, valid, fn, user);
        pos = end;
    }
    return pos;
}

/* ---------------------------------------------------------------- stop strings */

/* The stop string completed first in buf[0..len), looking only at ends after `from` (the
 * bytes before were already searched): earliest end, then longest, then lowest index.
 * Returns its index and sets *start, or -1. */
static int find_stop(const text_stream *ts, const char *buf, size_t len, size_t from, size_t *start) {
    for (size_t end = from + 1; end <= len; end++) {
        int best = -1;
        for (size_t i = 0; i < ts->n_stop; i++) {
            size_t m = ts->stop_len[i];
            if (m == 0 || m > end || (best >= 0 && m <= ts->stop_len[best])) continue;
            if (memcmp(buf + end - m, ts->stop[i], m) == 0) best = (int)i;
        }
        if (best >= 0) {
            *start = end - ts->stop_len[best];
            return best;
        }
    }
    return -1;
}

/* Where the bytes that could still grow into a stop string begin: the smallest i with
 * buf[i..len) a proper prefix of one of them; len when there is none. */
static size_t stop_prefix_start(const text_stream *ts, const char *buf, size_t len) {
    size_t reach = ts->max_stop_len > 0 ? ts->max_stop_len - 1 : 0;
    for (size_t i = len > reach ? len - reach : 0; i < len; i++) {
        size_t rest = len - i;
        for (size_t k = 0; k < ts->n_stop; k++)
            if (rest < ts->stop_len[k] && memcmp(buf + i, ts->stop[k], rest) == 0) return i;
    }
    return len;
}

/* ---------------------------------------------------------------- API */

llmm_status llmm__text_stream_init(text_stream *ts, const char *const *stop, size_t n_stop,
                             const llmm_allocator *alloc) {
    if (!ts) return LLMM_ERR_INVALID_ARG;
    memset(ts, 0, sizeof *ts);
    ts->stop_index = -1;
    if (n_stop > INT_MAX || (n_stop && !stop)) return LLMM_ERR_INVALID_ARG;
    for (size_t i = 0; i < n_stop; i++)
        if (!stop[i]) return LLMM_ERR_INVALID_ARG;
    ts->alloc = alloc;
    if (n_stop == 0) return LLMM_OK;
    ts->stop_len = llmm__mem_calloc(alloc, n_stop, sizeof *ts->stop_len);
    if (!ts->stop_len) return LLMM_ERR_NO_MEMORY;
    ts->stop = stop;
    ts->n_stop = n_stop;
    for (size_t i = 0; i < n_stop; i++) {
        ts->stop_len[i] = strlen(stop[i]);
        ts->max_stop_len = LLMM_MAX(ts->max_stop_len, ts->stop_len[i]);
    }
    return LLMM_OK;
}

static llmm_status hold_more(text_stream *ts, const char *bytes, size_t n) {
    if (n > SIZE_MAX / 2 - ts->held_len) return LLMM_ERR_NO_MEMORY;
    size_t need = ts->held_len + n;
    if (need > ts->held_cap) {
        size_t cap = LLMM_MAX(need, LLMM_MAX(2 * ts->held_cap, (size_t)64));
        char *grown = llmm__mem_grow(ts->alloc, ts->held, ts->held_len, cap);
        if (!grown) return LLMM_ERR_NO_MEMORY;
        ts->held = grown;
        ts->held_cap = cap;
    }
    if (n) memcpy(ts->held + ts->held_len, bytes, n);
    ts->held_len = need;
    return LLMM_OK;
}

static void report(const text_stream *ts, int *stop_index, int *cancelled) {
    if (stop_index) *stop_index = ts->stop_index;
    if (cancelled) *cancelled = ts->cancelled;
}

static int stream_over(const text_stream *ts) { return ts->stop_index >= 0 || ts->cancelled; }

/* Deliver what the held bytes make certain: up to a completed stop string, or up to the
 * part that could still grow into one (less an unfinished character). */
static void release_held(text_stream *ts, size_t searched, llmm_stream_fn fn, void *user) {
    size_t start;
    int match = find_stop(ts, ts->held, ts->held_len, searched, &start);
    if (match >= 0) {
        deliver(ts, ts->held, start, 1, fn, user);
        ts->stop_index = match;
        ts->held_len = 0;
        return;
    }
    size_t safe = stop_prefix_start(ts, ts->held, ts->held_len);
    size_t used = deliver(ts, ts->held, safe, 0, fn, user);
    if (used) memmove(ts->held, ts->held + used, ts->held_len - used);
    ts->held_len -= used;
    if (ts->cancelled) ts->held_len = 0;
}

llmm_status llmm__text_stream_push(text_stream *ts, const char *bytes, size_t n, llmm_stream_fn fn,
                             void *user, int *stop_index, int *cancelled) {
    if (!ts || (!bytes && n)) return LLMM_ERR_INVALID_ARG;
    llmm_status st = LLMM_OK;
    if (!stream_over(ts) && n) {
        size_t searched = ts->held_len; /* held bytes never hold a whole stop string */
        st = hold_more(ts, bytes, n);
        if (!st) release_held(ts, searched, fn, user);
    }
    report(ts, stop_index, cancelled);
    return st;
}

llmm_status llmm__text_stream_finish(text_stream *ts, llmm_stream_fn fn, void *user, int *cancelled) {
    if (!ts) return LLMM_ERR_INVALID_ARG;
    if (!stream_over(ts)) deliver(ts, ts->held, ts->held_len, 1, fn, user);
    ts->held_len = 0;
    if (cancelled) *cancelled = ts->cancelled;
    return LLMM_OK;
}

void llmm__text_stream_free(text_stream *ts) {
    if (!ts) return;
    llmm__mem_free(ts->alloc, ts->stop_len);
    llmm__mem_free(ts->alloc, ts->held);
    memset(ts, 0, sizeof *ts);
    ts->stop_index = -1;
}
