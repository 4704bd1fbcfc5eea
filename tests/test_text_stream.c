/* Text stream: UTF-8 hold-back, invalid bytes, stop strings, cancellation. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "support/alloc_hooks.h"
#include "generate/text_stream.h"

/* ---------------------------------------------------------------- helpers */

/* Everything the callback saw. */
typedef struct collector {
    char text[4096];
    size_t len;
    int n_calls;
    int n_incomplete;   /* chunks delivered with complete_utf8 = 0 */
    int bad_complete;   /* chunks flagged complete that are not valid UTF-8 */
    int cancel_at_call; /* return non-zero on this call (1-based); 0 never */
} collector;

/* Strict UTF-8 check, written independently of the library's: decode, then reject
 * overlong forms, surrogates and code points above U+10FFFF. */
static int valid_utf8(const unsigned char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        unsigned c = s[i];
        size_t len = c < 0x80 ? 1
                   : (c & 0xE0) == 0xC0 ? 2
                   : (c & 0xF0) == 0xE0 ? 3
                   : (c & 0xF8) == 0xF0 ? 4
                                        : 0;
        if (len == 0 || i + len > n) return 0;
        uint32_t cp = len == 1 ? c : c & (0x7Fu >> len);
        for (size_t k = 1; k < len; k++) {
            if ((s[i + k] & 0xC0) != 0x80) return 0;
            cp = (cp << 6) | (s[i + k] & 0x3F);
        }
        static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
        if (cp < min_cp[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
        i += len;
    }
    return 1;
}

static int collect(void *user, const char *bytes, size_t n, int complete_utf8) {
    collector *c = user;
    assert_true(n > 0);
    assert_true(c->len + n <= sizeof c->text);
    memcpy(c->text + c->len, bytes, n);
    c->len += n;
    c->n_calls++;
    if (!complete_utf8) c->n_incomplete++;
    else if (!valid_utf8((const unsigned char *)bytes, n)) c->bad_complete++;
    return c->cancel_at_call == c->n_calls;
}

static void init_stream(text_stream *ts, const char *const *stop, size_t n_stop) {
    assert_int_equal(llmm__text_stream_init(ts, stop, n_stop, NULL), LLMM_OK);
}

static int push(text_stream *ts, collector *c, const char *bytes, size_t n) {
    int stop = -2, cancelled = -2;
    assert_int_equal(llmm__text_stream_push(ts, bytes, n, collect, c, &stop, &cancelled), LLMM_OK);
    assert_true(cancelled == 0 || cancelled == 1);
    return stop;
}

static int push_str(text_stream *ts, collector *c, const char *s) { return push(ts, c, s, strlen(s)); }

static void finish(text_stream *ts, collector *c) {
    int cancelled = -2;
    assert_int_equal(llmm__text_stream_finish(ts, collect, c, &cancelled), LLMM_OK);
    assert_int_equal(cancelled, 0);
}

/* Push text[0..n) cut before every byte whose bit is set in cuts, then finish. Returns
 * the stop index reported last. */
static int push_split(text_stream *ts, collector *c, const char *text, size_t n, unsigned cuts) {
    size_t start = 0;
    int stop = -1;
    for (size_t i = 1; i <= n; i++) {
        if (i < n && !(cuts & (1u << i))) continue;
        stop = push(ts, c, text + start, i - start);
        start = i;
    }
    finish(ts, c);
    return stop;
}

static void assert_delivered(const collector *c, const char *want, size_t want_len) {
    assert_int_equal(c->len, want_len);
    assert_memory_equal(c->text, want, want_len);
}

/* ---------------------------------------------------------------- UTF-8 */

static void test_multibyte_split_every_way(void **state) {
    (void)state;
    /* 1-, 2-, 3- and 4-byte characters: "a", "é", "€", "😀" and more */
    static const char text[] = "a\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80z\xE4\xB8\xAD";
    size_t n = sizeof text - 1;
    for (unsigned cuts = 0; cuts < (1u << n); cuts += 2) { /* bit 0 is no cut */
        text_stream ts;
        collector c = {0};
        init_stream(&ts, NULL, 0);
        assert_int_equal(push_split(&ts, &c, text, n, cuts), -1);
        assert_delivered(&c, text, n);
        assert_int_equal(c.n_incomplete, 0);
        assert_int_equal(c.bad_complete, 0);
        llmm__text_stream_free(&ts);
    }
}

static void test_incomplete_char_is_held_then_completed(void **state) {
    (void)state;
    text_stream ts;
    collector c = {0};
    init_stream(&ts, NULL, 0);
    push_str(&ts, &c, "ab\xE2\x82");
    assert_delivered(&c, "ab", 2);
    push_str(&ts, &c, "\xAC");
    assert_delivered(&c, "ab\xE2\x82\xAC", 5);
    finish(&ts, &c);
    assert_int_equal(c.n_calls, 2);
    assert_int_equal(c.n_incomplete, 0);
    llmm__text_stream_free(&ts);
}

static void test_invalid_bytes_delivered_incomplete(void **state) {
    (void)state;
    /* stray continuation, invalid lead, cut sequence, overlong (2 and 3 bytes), surrogate,
     * above U+10FFFF, cut at the end */
    static const char text[] = "a\x80" "b\xFF" "c\xE2\x82" "d\xC0\xAF" "e\xED\xA0\x80"
                               "g\xE0\x80\x80" "h\xF4\x90\x80\x80" "f\xF0\x9F\x98";
    size_t n = sizeof text - 1;
    text_stream ts;
    collector c = {0};
    init_stream(&ts, NULL, 0);
    push(&ts, &c, text, n);
    assert_delivered(&c, text, n - 3); /* the cut 4-byte tail might still complete */
    finish(&ts, &c);
    assert_delivered(&c, text, n);
    assert_int_equal(c.n_incomplete, 8);
    assert_int_equal(c.bad_complete, 0);
    llmm__text_stream_free(&ts);
}

static void test_invalid_bytes_split_every_way(void **state) {
    (void)state;
    static const char text[] = "\xE2\x82" "A\xC3\xA9\xBF\xF0\x9F\x98\x80\xF5" "B\xC3";
    size_t n = sizeof text - 1;
    for (unsigned cuts = 0; cuts < (1u << n); cuts += 2) {
        text_stream ts;
        collector c = {0};
        init_stream(&ts, NULL, 0);
        push_split(&ts, &c, text, n, cuts);
        assert_delivered(&c, text, n);
        assert_int_equal(c.bad_complete, 0);
        assert_true(c.n_incomplete >= 3);
        llmm__text_stream_free(&ts);
    }
}

static void test_stray_continuations_never_wait(void **state) {
    (void)state;
    /* continuation bytes with no lead can never complete: no hold-back at all */
    text_stream ts;
    collector c = {0};
    init_stream(&ts, NULL, 0);
    push_str(&ts, &c, "\x80\x80\x80\x80");
    assert_delivered(&c, "\x80\x80\x80\x80", 4);
    assert_int_equal(c.n_incomplete, 1);
    llmm__text_stream_free(&ts);
}

/* ---------------------------------------------------------------- stop strings */

static void test_stop_string_across_pushes(void **state) {
    (void)state;
    const char *stops[] = {"</end>"};
    text_stream ts;
    collector c = {0};
    init_stream(&ts, stops, 1);
    assert_int_equal(push_str(&ts, &c, "hello </"), -1);
    assert_delivered(&c, "hello ", 6);
    assert_int_equal(push_str(&ts, &c, "en"), -1);
    assert_delivered(&c, "hello ", 6);
    assert_int_equal(push_str(&ts, &c, "d> world"), 0);
    assert_delivered(&c, "hello ", 6);
    assert_int_equal(push_str(&ts, &c, "more"), 0); /* over: nothing more */
    finish(&ts, &c);
    assert_delivered(&c, "hello ", 6);
    llmm__text_stream_free(&ts);
}

static void test_stop_string_split_every_way(void **state) {
    (void)state;
    const char *stops[] = {"x", "</e>"};
    static const char text[] = "a\xC3\xA9</</e>cd";
    size_t n = sizeof text - 1;
    for (unsigned cuts = 0; cuts < (1u << n); cuts += 2) {
        text_stream ts;
        collector c = {0};
        init_stream(&ts, stops, 2);
        assert_int_equal(push_split(&ts, &c, text, n, cuts), 1);
        assert_delivered(&c, "a\xC3\xA9</", 5);
        assert_int_equal(c.n_incomplete + c.bad_complete, 0);
        llmm__text_stream_free(&ts);
    }
}

static void test_diverging_prefix_is_delivered(void **state) {
    (void)state;
    const char *stops[] = {"STOP"};
    text_stream ts;
    collector c = {0};
    init_stream(&ts, stops, 1);
    assert_int_equal(push_str(&ts, &c, "aST"), -1);
    assert_delivered(&c, "a", 1);
    assert_int_equal(push_str(&ts, &c, "Ox"), -1);
    assert_delivered(&c, "aSTOx", 5);
    assert_int_equal(push_str(&ts, &c, "SSTO"), -1); /* "S" is out, "STO" may still grow */
    assert_delivered(&c, "aSTOxS", 6);
    finish(&ts, &c); /* an unfinished prefix at the end is plain text */
    assert_delivered(&c, "aSTOxSSTO", 9);
    llmm__text_stream_free(&ts);
}

static void test_stop_string_at_start(void **state) {
    (void)state;
    const char *stops[] = {"###"};
    text_stream ts;
    collector c = {0};
    init_stream(&ts, stops, 1);
    assert_int_equal(push_str(&ts, &c, "###abc"), 0);
    finish(&ts, &c);
    assert_int_equal(c.n_calls, 0);
    llmm__text_stream_free(&ts);
}

static int first_stop(const char *const *stops, size_t n_stop, const char *text, collector *c) {
    text_stream ts;
    init_stream(&ts, stops, n_stop);
    int stop = push_str(&ts, c, text);
    finish(&ts, c);
    llmm__text_stream_free(&ts);
    return stop;
}

static void test_stop_strings_prefix_of_each_other(void **state) {
    (void)state;
    const char *long_first[] = {"abc", "ab"}, *short_first[] = {"ab", "abc"};
    collector c = {0};
    assert_int_equal(first_stop(long_first, 2, "xabcd", &c), 1); /* "ab" completes first */
    assert_delivered(&c, "x", 1);
    memset(&c, 0, sizeof c);
    assert_int_equal(first_stop(short_first, 2, "xabcd", &c), 0);
    assert_delivered(&c, "x", 1);
    /* byte by byte "ab" still wins: "abc" is never waited for */
    text_stream ts;
    memset(&c, 0, sizeof c);
    init_stream(&ts, long_first, 2);
    assert_int_equal(push_str(&ts, &c, "xa"), -1);
    assert_int_equal(push_str(&ts, &c, "b"), 1);
    llmm__text_stream_free(&ts);
    /* a shorter one ending earlier wins over a longer one starting earlier */
    const char *overlap[] = {"abcd", "bc"};
    memset(&c, 0, sizeof c);
    assert_int_equal(first_stop(overlap, 2, "xabcd", &c), 1);
    assert_delivered(&c, "xa", 2);
    /* same end: the longer one, so no part of it is shown */
    const char *suffix[] = {"bc", "abc"};
    memset(&c, 0, sizeof c);
    assert_int_equal(first_stop(suffix, 2, "xabc", &c), 1);
    assert_delivered(&c, "x", 1);
}

static void test_empty_and_multibyte_stop_strings(void **state) {
    (void)state;
    const char *stops[] = {"", "\xC3\xA9!"};
    collector c = {0};
    assert_int_equal(first_stop(stops, 2, "caf\xC3\xA9?", &c), -1);
    assert_delivered(&c, "caf\xC3\xA9?", 6);
    memset(&c, 0, sizeof c);
    assert_int_equal(first_stop(stops, 2, "caf\xC3\xA9!x", &c), 1);
    assert_delivered(&c, "caf", 3);
    /* the text before a stop string ends in a character the stop string cut: sent as is */
    const char *cut[] = {"\x82\xAC"};
    memset(&c, 0, sizeof c);
    assert_int_equal(first_stop(cut, 1, "a\xE2\x82\xAC", &c), 0);
    assert_delivered(&c, "a\xE2", 2);
    assert_int_equal(c.n_incomplete, 1);
}

static void test_stop_detection_without_callback(void **state) {
    (void)state;
    const char *stops[] = {"END"};
    text_stream ts;
    init_stream(&ts, stops, 1);
    int stop = -2, cancelled = -2;
    assert_int_equal(llmm__text_stream_push(&ts, "abcE", 4, NULL, NULL, &stop, &cancelled), LLMM_OK);
    assert_int_equal(stop, -1);
    assert_int_equal(llmm__text_stream_push(&ts, "ND", 2, NULL, NULL, &stop, NULL), LLMM_OK);
    assert_int_equal(stop, 0);
    assert_int_equal(llmm__text_stream_finish(&ts, NULL, NULL, NULL), LLMM_OK);
    llmm__text_stream_free(&ts);
}

/* ---------------------------------------------------------------- cancel, errors */

static void test_callback_cancels(void **state) {
    (void)state;
    text_stream ts;
    collector c = {0};
    c.cancel_at_call = 1;
    init_stream(&ts, NULL, 0);
    int stop = -2, cancelled = -2;
    assert_int_equal(llmm__text_stream_push(&ts, "ab\xFF" "cd", 5, collect, &c, &stop, &cancelled), LLMM_OK);
    assert_int_equal(cancelled, 1);
    assert_int_equal(stop, -1);
    assert_delivered(&c, "ab", 2); /* the chunks after the cancelling call are dropped */
    cancelled = 0;
    assert_int_equal(llmm__text_stream_push(&ts, "more", 4, collect, &c, &stop, &cancelled), LLMM_OK);
    assert_int_equal(cancelled, 1);
    assert_int_equal(llmm__text_stream_finish(&ts, collect, &c, &cancelled), LLMM_OK);
    assert_int_equal(cancelled, 1);
    assert_int_equal(c.n_calls, 1);
    llmm__text_stream_free(&ts);
}

static void test_invalid_arguments(void **state) {
    (void)state;
    text_stream ts;
    const char *with_null[] = {"a", NULL};
    assert_int_equal(llmm__text_stream_init(NULL, NULL, 0, NULL), LLMM_ERR_INVALID_ARG);
    assert_int_equal(llmm__text_stream_init(&ts, NULL, 1, NULL), LLMM_ERR_INVALID_ARG);
    assert_int_equal(llmm__text_stream_init(&ts, with_null, 2, NULL), LLMM_ERR_INVALID_ARG);
    init_stream(&ts, NULL, 0);
    assert_int_equal(llmm__text_stream_push(&ts, NULL, 1, NULL, NULL, NULL, NULL), LLMM_ERR_INVALID_ARG);
    assert_int_equal(llmm__text_stream_push(NULL, "a", 1, NULL, NULL, NULL, NULL), LLMM_ERR_INVALID_ARG);
    assert_int_equal(llmm__text_stream_push(&ts, NULL, 0, NULL, NULL, NULL, NULL), LLMM_OK);
    assert_int_equal(llmm__text_stream_finish(NULL, NULL, NULL, NULL), LLMM_ERR_INVALID_ARG);
    llmm__text_stream_free(&ts);
    llmm__text_stream_free(NULL);
}


static void test_out_of_memory(void **state) {
    (void)state;
    const char *stops[] = {"zz"};
    failing_alloc f = {0};
    llmm_allocator a = failing_allocator(&f);
    text_stream ts;
    assert_int_equal(llmm__text_stream_init(&ts, stops, 1, &a), LLMM_ERR_NO_MEMORY);
    f.allowed = 1; /* the stop lengths, then no room to hold bytes */
    assert_int_equal(llmm__text_stream_init(&ts, stops, 1, &a), LLMM_OK);
    collector c = {0};
    assert_int_equal(llmm__text_stream_push(&ts, "abc", 3, collect, &c, NULL, NULL), LLMM_ERR_NO_MEMORY);
    assert_int_equal(c.n_calls, 0);
    f.allowed = 1; /* nothing was taken by the failed push: the retry gives all of it */
    assert_int_equal(llmm__text_stream_push(&ts, "abc", 3, collect, &c, NULL, NULL), LLMM_OK);
    finish(&ts, &c);
    assert_delivered(&c, "abc", 3);
    llmm__text_stream_free(&ts);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_multibyte_split_every_way),
        cmocka_unit_test(test_incomplete_char_is_held_then_completed),
        cmocka_unit_test(test_invalid_bytes_delivered_incomplete),
        cmocka_unit_test(test_invalid_bytes_split_every_way),
        cmocka_unit_test(test_stray_continuations_never_wait),
        cmocka_unit_test(test_stop_string_across_pushes),
        cmocka_unit_test(test_stop_string_split_every_way),
        cmocka_unit_test(test_diverging_prefix_is_delivered),
        cmocka_unit_test(test_stop_string_at_start),
        cmocka_unit_test(test_stop_strings_prefix_of_each_other),
        cmocka_unit_test(test_empty_and_multibyte_stop_strings),
        cmocka_unit_test(test_stop_detection_without_callback),
        cmocka_unit_test(test_callback_cancels),
        cmocka_unit_test(test_invalid_arguments),
        cmocka_unit_test(test_out_of_memory),
    };
    return cmocka_run_group_tests_name("text_stream", tests, NULL, NULL);
}
