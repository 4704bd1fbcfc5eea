#include "unicode.h"

uint16_t llmm__unicode_props(uint32_t cp) {
    if (cp < 128) return llmm__unicode_ascii_props[cp];
    if (cp >= 0x110000) return UNI_C;
    size_t lo = 0, hi = llmm__unicode_n_ranges; /* find the last range starting at or before cp */
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (llmm__unicode_ranges[mid].start <= cp) lo = mid;
        else hi = mid;
    }
    return llmm__unicode_ranges[lo].props;
}

static int is_continuation(uint8_t b) {
    return (b & 0xC0) == 0x80;
}

size_t llmm__utf8_decode(const uint8_t *s, size_t n, uint32_t *cp) {
    uint8_t b = s[0];
    if (b < 0x80) {
        *cp = b;
        return 1;
    }
    /* lead byte -> sequence length; 10xxxxxx and 11111xxx start nothing */
    size_t len = (b & 0xE0) == 0xC0 ? 2 : (b & 0xF0) == 0xE0 ? 3 : (b & 0xF8) == 0xF0 ? 4 : 0;
    if (len == 0 || len > n) {
        *cp = UNICODE_REPLACEMENT;
        return 1;
    }
    uint32_t v = b & (0x7Fu >> len);
    for (size_t i = 1; i < len; i++) {
        if (!is_continuation(s[i])) {
            *cp = UNICODE_REPLACEMENT;
            return 1;
        }
        v = (v << 6) | (s[i] & 0x3Fu);
    }
    *cp = v;
    return len;
}

size_t llmm__utf8_encode(uint32_t cp, char out[4]) {
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | ((cp >> 18) & 0x07));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* The 188 bytes GPT-2 keeps as themselves: '!'..'~', U+00A1..U+00AC, U+00AE..U+00FF. The 68
 * others (0x00-0x20, 0x7F-0xA0, 0xAD) are numbered in byte order from U+0100. */
static int gpt2_keeps(unsigned b) {
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
}

uint32_t llmm__gpt2_byte_to_cp(uint8_t byte) {
    if (gpt2_keeps(byte)) return byte;
    if (byte <= 0x20) return 0x100 + byte;
    if (byte <= 0xA0) return 0x100 + 33 + (byte - 0x7Fu);
    return 0x100 + 67; /* 0xAD, the soft hyphen */
}

int llmm__gpt2_cp_to_byte(uint32_t cp) {
    if (cp < 0x100) return gpt2_keeps(cp) ? (int)cp : -1;
    uint32_t n = cp - 0x100;
    if (n < 33) return (int)n;
    if (n < 67) return (int)(0x7F + n - 33);
    if (n == 67) return 0xAD;
    return -1;
}
