/* Code point facts for the BPE pre-tokenizers: general category and White_Space bits from
 * generated tables (lib/base/unicode_tables.c), a UTF-8 decoder that never fails, and GPT-2's
 * byte <-> code point map. All tables are const; nothing here has state. */
#ifndef LLMM_UNICODE_H
#define LLMM_UNICODE_H

#include <stddef.h>
#include <stdint.h>

/* Property bits of a code point: its major general category (exactly one of L, M, N, P, S,
 * Z, C; unassigned code points are C), the letter sub-category, and White_Space. */
enum {
    UNI_L = 1u << 0,
    UNI_LU = 1u << 1,
    UNI_LL = 1u << 2,
    UNI_LT = 1u << 3,
    UNI_LM = 1u << 4,
    UNI_LO = 1u << 5,
    UNI_M = 1u << 6,
    UNI_N = 1u << 7,
    UNI_P = 1u << 8,
    UNI_S = 1u << 9,
    UNI_Z = 1u << 10,
    UNI_C = 1u << 11,
    UNI_WS = 1u << 12, /* the White_Space property, what \s means */
};

#define UNICODE_REPLACEMENT 0xFFFDu

typedef struct unicode_range {
    uint32_t start; /* the range runs to the next entry's start */
    uint16_t props;
} unicode_range;

extern const uint16_t llmm__unicode_ascii_props[128];
extern const unicode_range llmm__unicode_ranges[];
extern const size_t llmm__unicode_n_ranges;

uint16_t llmm__unicode_props(uint32_t cp);

/* Decode one code point from n > 0 bytes; returns the bytes it spans (1..4). Follows the
 * reference engine: sequences are checked for their continuation bytes only (overlong forms
 * and surrogates decode), and a byte that starts no valid sequence decodes to U+FFFD with
 * length 1, so every input splits into code points the same way there and here. */
size_t llmm__utf8_decode(const uint8_t *s, size_t n, uint32_t *cp);

/* UTF-8 bytes of cp (<= 0x10FFFF) into out; returns 1..4. */
size_t llmm__utf8_encode(uint32_t cp, char out[4]);

/* GPT-2's reversible byte map: printable Latin-1 bytes stand for themselves, the other 68
 * bytes for U+0100..U+0143 in byte order, so every byte has a visible vocabulary symbol. */
uint32_t llmm__gpt2_byte_to_cp(uint8_t byte);
/* The byte a code point stands for, or -1 when it is not in the map. */
int llmm__gpt2_cp_to_byte(uint32_t cp);

#endif
