#include "pretokenizer.h"

#include <stdio.h>
#include <string.h>

#include "base/unicode.h"
#include "uregex.h"

/* The regexes are the reference engine's (llama.cpp src/llama-vocab.cpp), which adapt each
 * model's tokenizer.json pattern: "(?i:'s|..)" is spelled "'[sS]|..", and possessive or
 * Unicode-set syntax is rewritten. Non-ASCII literals are written \x{..} (see lib/text/uregex.c). */

#define RE_GPT2 "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"
#define RE_CONTRACTIONS "'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD]"
#define RE_LLAMA3_TAIL "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_LLAMA3 "(?:" RE_CONTRACTIONS ")|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}" RE_LLAMA3_TAIL
#define RE_QWEN2 "(?:" RE_CONTRACTIONS ")|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}" RE_LLAMA3_TAIL
/* Qwen3.5 keeps combining marks (\p{M}) inside words, so a decomposed "e" + U+0301 is one word
 * rather than a word and a punctuation run */
#define RE_QWEN35                                                                    \
    "(?:" RE_CONTRACTIONS ")|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}"                     \
    "| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
/* "a letter that is not a-z" and "not A-Z": the reference's rewrite of \p{Lu}..\p{Ll} classes,
 * which (as it runs) counts every non-ASCII letter as both upper and lower case */
#define RE_UPPER "((?=[\\p{L}])([^a-z]))"
#define RE_LOWER "((?=[\\p{L}])([^A-Z]))"
#define RE_CASED_TAIL "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_TEKKEN                                                                                     \
    "[^\\r\\n\\p{L}\\p{N}]?" RE_UPPER "*" RE_LOWER "+|[^\\r\\n\\p{L}\\p{N}]?" RE_UPPER "+" RE_LOWER "*" \
    "|\\p{N}" RE_CASED_TAIL
#define RE_GPT4O                                                                                        \
    "[^\\r\\n\\p{L}\\p{N}]?" RE_UPPER "*" RE_LOWER "+(?:" RE_CONTRACTIONS ")?"                          \
    "|[^\\r\\n\\p{L}\\p{N}]?" RE_UPPER "+" RE_LOWER "*(?:" RE_CONTRACTIONS ")?|\\p{N}{1,3}" RE_CASED_TAIL
#define RE_CJK "[\\x{4E00}-\\x{9FA5}\\x{800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+"
/* Cased letters (Lu, Ll, Lt) as DeepSeek's tokenizer.json lists them (a fixed, older set) */
#define RE_DEEPSEEK_LETTERS \
    "A-Za-z\\x{B5}\\x{C0}-\\x{D6}\\x{D8}-\\x{F6}\\x{F8}-\\x{1BA}\\x{1BC}-\\x{1BF}" \
    "\\x{1C4}-\\x{293}\\x{295}-\\x{2AF}\\x{370}-\\x{373}\\x{376}\\x{377}\\x{37B}-\\x{37D}" \
    "\\x{37F}\\x{386}\\x{388}-\\x{38A}\\x{38C}\\x{38E}-\\x{3A1}\\x{3A3}-\\x{3F5}" \
    "\\x{3F7}-\\x{481}\\x{48A}-\\x{52F}\\x{531}-\\x{556}\\x{10A0}-\\x{10C5}" \
    "\\x{13A0}-\\x{13F5}\\x{13F8}-\\x{13FD}\\x{1C90}-\\x{1CBA}\\x{1CBD}-\\x{1CBF}" \
    "\\x{1D00}-\\x{1D2B}\\x{1D6B}-\\x{1D77}\\x{1D79}-\\x{1D9A}\\x{1E00}-\\x{1F15}" \
    "\\x{1F18}-\\x{1F1D}\\x{1F20}-\\x{1F45}\\x{1F48}-\\x{1F4D}\\x{1F50}-\\x{1F57}\\x{1F59}" \
    "\\x{1F5B}\\x{1F5D}\\x{1F5F}-\\x{1F7D}\\x{1F80}-\\x{1FB4}\\x{1FB6}-\\x{1FBC}\\x{1FBE}" \
    "\\x{1FC2}-\\x{1FC4}\\x{1FC6}-\\x{1FCC}\\x{1FD0}-\\x{1FD3}\\x{1FD6}-\\x{1FDB}" \
    "\\x{1FE0}-\\x{1FEC}\\x{1FF2}-\\x{1FF4}\\x{1FF6}-\\x{1FFC}\\x{2102}\\x{2107}" \
    "\\x{210A}-\\x{2113}\\x{2115}\\x{2119}-\\x{211D}\\x{2124}\\x{2126}\\x{2128}" \
    "\\x{212A}-\\x{212D}\\x{212F}-\\x{2134}\\x{2139}\\x{213C}-\\x{213F}\\x{2145}-\\x{2149}" \
    "\\x{214E}\\x{2183}\\x{2184}\\x{2C00}-\\x{2C7B}\\x{2C7E}-\\x{2CE4}\\x{2CEB}-\\x{2CEE}" \
    "\\x{2CF2}\\x{2CF3}\\x{A640}-\\x{A66D}\\x{A680}-\\x{A69B}\\x{A722}-\\x{A76F}" \
    "\\x{A771}-\\x{A787}\\x{A78B}-\\x{A78E}\\x{AB70}-\\x{ABBF}\\x{FB00}-\\x{FB06}" \
    "\\x{FB13}-\\x{FB17}\\x{FF21}-\\x{FF3A}\\x{FF41}-\\x{FF5A}\\x{10400}-\\x{1044F}" \
    "\\x{104B0}-\\x{104D3}\\x{104D8}-\\x{104FB}\\x{10C80}-\\x{10CB2}\\x{10CC0}-\\x{10CF2}" \
    "\\x{118A0}-\\x{118DF}\\x{1E900}-\\x{1E943}"
#define RE_DEEPSEEK_PUNCT "!-/:-~\\x{FF01}-\\x{FF0F}\\x{FF1A}-\\x{FF5E}\\x{2018}-\\x{201F}\\x{3000}-\\x{3002}"
#define RE_BLOOM " ?[^(\\s|.,!?\\x{2026}\\x{3002}\\x{FF0C}\\x{3001}\\x{964}\\x{6D4}\\x{60C})]+"

#define LIST(...) ((const char *const[]){__VA_ARGS__, NULL})

static const pretok_family families[] = {
    {LIST("default"), LIST("[\\p{P}\\$\\+<=>\\^~\\|]+", RE_GPT2, "\\p{N}+", "[0-9][0-9][0-9]"), 0, 0},
    {LIST("gpt-2", "phi-2", "mpt", "gpt-neox", "olmo", "jais", "jina-es", "jina-de", "jina-v2-es", "jina-v2-de",
          "gigachat"),
     LIST(RE_GPT2), 0, 0},
    {LIST("llama3", "llama-v3", "llama-bpe", "falcon3", "pixtral", "lfm2"), LIST(RE_LLAMA3), 1, 1},
    {LIST("dbrx", "smaug-bpe"), LIST(RE_LLAMA3), 0, 0},
    {LIST("qwen2", "deepseek-r1-qwen", "megrez", "stablelm2"), LIST(RE_QWEN2), 0, 0},
    {LIST("qwen35"), LIST(RE_QWEN35), 0, 0},
    {LIST("deepseek-llm"),
     LIST("[\\r\\n]", "\\s?[" RE_DEEPSEEK_LETTERS "]+", "\\s?[" RE_DEEPSEEK_PUNCT "]+", "\\s+$", RE_CJK, "\\p{N}+"),
     0, 0},
    {LIST("deepseek-coder"), LIST("[\\r\\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", RE_CJK, "\\p{N}"), 0, 0},
    {LIST("falcon"), LIST("[\\p{P}\\$\\+<=>\\^~\\|`]+", RE_GPT2, "[0-9][0-9][0-9]"), 0, 0},
    {LIST("starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b"), LIST("\\p{N}", RE_GPT2),
     0, 0},
    {LIST("tekken"), LIST(RE_TEKKEN), 1, 1},
    {LIST("gpt-4o", "llama4"), LIST(RE_GPT4O), 0, 0},
    {LIST("bloom", "gpt3-finnish", "poro-chat"), LIST(RE_BLOOM), 0, 0},
    {LIST("viking"), LIST(RE_BLOOM, "\\p{N}"), 0, 0},
};

#define N_FAMILIES (sizeof families / sizeof *families)

const pretok_family *llmm__pretok_family_find(const char *name, size_t len) {
    for (size_t f = 0; f < N_FAMILIES; f++)
        for (const char *const *n = families[f].names; *n; n++)
            if (strlen(*n) == len && memcmp(*n, name, len) == 0) return &families[f];
    return NULL;
}

const pretok_family *llmm__pretok_family_default(void) {
    return &families[0];
}

void llmm__pretok_family_list(char *buf, size_t cap) {
    size_t used = 0;
    if (cap) buf[0] = '\0';
    for (size_t f = 0; f < N_FAMILIES; f++)
        for (const char *const *n = families[f].names; *n && used < cap; n++) {
            int k = snprintf(buf + used, cap - used, "%s%s", used ? ", " : "", *n);
            if (k < 0) return;
            used += (size_t)k;
        }
}

llmm_status llmm__pretok_compile(pretokenizer *pt, const pretok_family *fam, const llmm_allocator *alloc, llmm_diag *d) {
    size_t n = 0;
    while (fam->regexes[n]) n++;
    pt->progs = llmm__mem_calloc(alloc, n, sizeof *pt->progs);
    pt->n_progs = n;
    if (!pt->progs) return llmm__diag_fail(d, LLMM_ERR_NO_MEMORY, "out of memory for the pre-tokenizer");
    for (size_t i = 0; i < n; i++) {
        llmm_status st = llmm__re_compile(&pt->progs[i], fam->regexes[i], d);
        if (st) return st;
    }
    return LLMM_OK;
}

void llmm__pretok_free(pretokenizer *pt, const llmm_allocator *alloc) {
    llmm__mem_free(alloc, pt->progs);
    pt->progs = NULL;
    pt->n_progs = 0;
}

/* The text decoded once per call; regexes then index code points. */
typedef struct split_ctx {
    const pretokenizer *pt;
    const char *text;
    size_t *off;   /* (n + 1) byte offset of each code point */
    uint32_t *cp;  /* (n) code point for literal matching */
    uint16_t *props; /* (n) UNI_* bits */
    pretok_word_fn fn;
    void *user;
} split_ctx;

static size_t decode_text(split_ctx *c, size_t len) {
    size_t n = 0;
    for (size_t at = 0; at < len; n++) {
        uint32_t cp;
        c->off[n] = at;
        at += llmm__utf8_decode((const uint8_t *)c->text + at, len - at, &cp);
        c->props[n] = llmm__unicode_props(cp);
        c->cp[n] = cp >= 0x80 && (c->props[n] & UNI_WS) ? 0x0B : cp;
    }
    c->off[n] = len;
    return n;
}

/* Split code points [a, b) by regex `level` into matches and the gaps between them, and pass
 * each piece to the next level; past the last level a piece is a word. */
static llmm_status split_piece(const split_ctx *c, size_t level, size_t a, size_t b) {
    if (level == c->pt->n_progs) return c->fn(c->user, c->text + c->off[a], c->off[b] - c->off[a]);
    const re_input in = {c->cp, c->props, b};
    llmm_status st = LLMM_OK;
    size_t pos = a, start, end;
    while (!st && pos < b && llmm__re_search(&c->pt->progs[level], &in, pos, &start, &end)) {
        if (start > pos) st = split_piece(c, level + 1, pos, start);
        if (!st) st = split_piece(c, level + 1, start, end);
        pos = end;
    }
    if (!st && pos < b) st = split_piece(c, level + 1, pos, b);
    return st;
}

llmm_status llmm__pretok_split(const pretokenizer *pt, const char *text, size_t len, const llmm_allocator *alloc,
                         pretok_word_fn fn, void *user) {
    if (len == 0) return LLMM_OK;
    split_ctx c = {.pt = pt, .text = text, .fn = fn, .user = user};
    c.off = llmm__mem_calloc(alloc, len + 1, sizeof *c.off);
    c.cp = llmm__mem_calloc(alloc, len, sizeof *c.cp);
    c.props = llmm__mem_calloc(alloc, len, sizeof *c.props);
    llmm_status st = c.off && c.cp && c.props ? LLMM_OK : LLMM_ERR_NO_MEMORY;
    if (!st) st = split_piece(&c, 0, 0, decode_text(&c, len));
    llmm__mem_free(alloc, c.off);
    llmm__mem_free(alloc, c.cp);
    llmm__mem_free(alloc, c.props);
    return st;
}
