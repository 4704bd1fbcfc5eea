/* Integer ranges as GBNF: the decimal strings of [lo, hi] split by digit count, then by the
 * first digit where the bounds differ, the way one writes a range as a regular expression.
 * Recursion goes one digit deeper per call, so it is bounded by SCHEMA_MAX_INT_DIGITS. */
#include <stdio.h>
#include <string.h>

#include "json_schema_parts.h"

static int all_digit(const char *s, size_t n, char d) {
    for (size_t i = 0; i < n; i++)
        if (s[i] != d) return 0;
    return 1;
}

static void any_digits(gbnf_text *out, size_t n) {
    if (n == 1) llmm__gbnf_text_str(out, " [0-9]");
    else if (n > 1) llmm__gbnf_text_fmt(out, " [0-9]{%zu}", n);
}

static void digit_class(gbnf_text *out, char from, char to) {
    if (from == to) llmm__gbnf_text_fmt(out, "\"%c\"", from);
    else llmm__gbnf_text_fmt(out, "[%c-%c]", from, to);
}

/* The n-digit strings from a to b (same length, a <= b), leading zeros allowed. */
static void same_length(gbnf_text *out, const char *a, const char *b, size_t n) {
    size_t k = 0;
    while (k < n && a[k] == b[k]) k++;
    if (k > 0) llmm__gbnf_text_literal(out, a, k);
    if (k == n) return;
    if (k > 0) llmm__gbnf_text_str(out, " ");
    size_t m = n - k - 1; /* digits after the first differing one */
    const char *ra = a + k + 1, *rb = b + k + 1;
    int low_full = all_digit(ra, m, '0'), high_full = all_digit(rb, m, '9');
    if (low_full && high_full) {
        digit_class(out, a[k], b[k]);
        any_digits(out, m);
        return;
    }
    char nines[SCHEMA_MAX_INT_DIGITS + 1], zeros[SCHEMA_MAX_INT_DIGITS + 1];
    memset(nines, '9', m), memset(zeros, '0', m);
    /* first digit a[k] (tail from ra up), digits strictly between, b[k] (tail up to rb);
     * a full tail joins the middle class instead */
    char mid_from = low_full ? a[k] : (char)(a[k] + 1), mid_to = high_full ? b[k] : (char)(b[k] - 1);
    const char *sep = "";
    llmm__gbnf_text_str(out, "(");
    if (!low_full) {
        llmm__gbnf_text_fmt(out, "\"%c\" ", a[k]);
        same_length(out, ra, nines, m);
        sep = " | ";
    }
    if (mid_from <= mid_to) {
        llmm__gbnf_text_str(out, sep);
        digit_class(out, mid_from, mid_to);
        any_digits(out, m);
        sep = " | ";
    }
    if (!high_full) {
        llmm__gbnf_text_fmt(out, "%s\"%c\" ", sep, b[k]);
        same_length(out, zeros, rb, m);
    }
    llmm__gbnf_text_str(out, ")");
}

static size_t digit_count(uint64_t v) {
    size_t n = 1;
    while (v >= 10) v /= 10, n++;
    return n;
}

static uint64_t power_of_ten(size_t n) {
    uint64_t p = 1;
    while (n--) p *= 10;
    return p;
}

/* [lo, hi] for non-negative integers, hi = UINT64_MAX meaning no upper bound. */
static void unsigned_range(gbnf_text *out, uint64_t lo, uint64_t hi) {
    int bounded = hi != UINT64_MAX;
    size_t n_lo = digit_count(lo), n_hi = bounded ? digit_count(hi) : SCHEMA_MAX_INT_DIGITS;
    llmm__gbnf_text_str(out, "(");
    for (size_t n = n_lo; n <= n_hi; n++) {
        if (n > n_lo) llmm__gbnf_text_str(out, " | ");
        if (!bounded && n > n_lo) { /* every longer length at once */
            llmm__gbnf_text_fmt(out, "[1-9] [0-9]{%zu,%d}", n - 1, SCHEMA_MAX_INT_DIGITS - 1);
            break;
        }
        uint64_t first = n == 1 ? 0 : power_of_ten(n - 1), last = power_of_ten(n) - 1;
        if (lo > first) first = lo;
        if (bounded && hi < last) last = hi;
        char a[24], b[24];
        snprintf(a, sizeof a, "%llu", (unsigned long long)first);
        snprintf(b, sizeof b, "%llu", (unsigned long long)last);
        same_length(out, a, b, n);
    }
    llmm__gbnf_text_str(out, ")");
}

void llmm__gbnf_integer_range(gbnf_text *out, int has_min, int64_t min, int has_max, int64_t max) {
    int negatives = !has_min || min < 0, non_negatives = !has_max || max >= 0;
    llmm__gbnf_text_str(out, "(");
    if (negatives) {
        /* -v for v in [max(1, -max), -min] */
        uint64_t lo = has_max && max < 0 ? (uint64_t)(-max) : 1, hi = has_min ? (uint64_t)(-min) : UINT64_MAX;
        llmm__gbnf_text_str(out, "\"-\" ");
        unsigned_range(out, lo, hi);
    }
    if (non_negatives) {
        uint64_t lo = has_min && min > 0 ? (uint64_t)min : 0, hi = has_max ? (uint64_t)max : UINT64_MAX;
        if (negatives) llmm__gbnf_text_str(out, " | ");
        unsigned_range(out, lo, hi);
    }
    llmm__gbnf_text_str(out, ")");
}
