/* Chat templates as data: each built-in format is a row of prefix/suffix strings per role
 * plus a few flags, and one loop renders them all. The strings and the detection markers
 * are those of the reference engine's hand-written formatter (llama.cpp src/llama-chat.cpp),
 * so a conversation formats to the same bytes as there; no Jinja is evaluated. */
#include "chat.h"

#include <string.h>

/* One list of the formats, expanded into the ids, the name table and the comma-separated
 * list, so the three can never disagree. Order = the order apps see in the list. */
#define CHAT_FORMATS(X)                            \
    X(CHAT_CHATML, "chatml")                       \
    X(CHAT_LLAMA2, "llama2")                       \
    X(CHAT_LLAMA2_SYS, "llama2-sys")               \
    X(CHAT_LLAMA2_SYS_BOS, "llama2-sys-bos")       \
    X(CHAT_LLAMA2_SYS_STRIP, "llama2-sys-strip")   \
    X(CHAT_LLAMA3, "llama3")                       \
    X(CHAT_MISTRAL_V1, "mistral-v1")               \
    X(CHAT_MISTRAL_V3, "mistral-v3")               \
    X(CHAT_MISTRAL_V3_TEKKEN, "mistral-v3-tekken") \
    X(CHAT_MISTRAL_V7, "mistral-v7")               \
    X(CHAT_MISTRAL_V7_TEKKEN, "mistral-v7-tekken") \
    X(CHAT_PHI3, "phi3")                           \
    X(CHAT_PHI4, "phi4")                           \
    X(CHAT_FALCON3, "falcon3")                     \
    X(CHAT_ZEPHYR, "zephyr")                       \
    X(CHAT_GEMMA, "gemma")                         \
    X(CHAT_DEEPSEEK, "deepseek")                   \
    X(CHAT_DEEPSEEK2, "deepseek2")                 \
    X(CHAT_DEEPSEEK3, "deepseek3")                 \
    X(CHAT_COMMAND_R, "command-r")                 \
    X(CHAT_VICUNA, "vicuna")                       \
    X(CHAT_VICUNA_ORCA, "vicuna-orca")

enum chat_format_id {
#define AS_ENUM(id, name) id,
    CHAT_FORMATS(AS_ENUM)
#undef AS_ENUM
    CHAT_N_FORMATS,
    CHAT_NOT_BUILT_IN = -1
};

static const char *const format_names[CHAT_N_FORMATS] = {
#define AS_NAME(id, name) [id] = name,
    CHAT_FORMATS(AS_NAME)
#undef AS_NAME
};

/* ",chatml,llama2,...": handed out from its second byte. */
static const char format_names_csv[] = ""
#define AS_CSV(id, name) "," name
    CHAT_FORMATS(AS_CSV)
#undef AS_CSV
    ;

enum chat_role { ROLE_SYSTEM, ROLE_USER, ROLE_ASSISTANT, N_ROLES };
static const char *const role_names[N_ROLES] = {"system", "user", "assistant"};

#define TRIM(role) (1u << (role))
#define TRIM_ALL (TRIM(ROLE_SYSTEM) | TRIM(ROLE_USER) | TRIM(ROLE_ASSISTANT))
#define EVERY_ROLE(s) {s, s, s}

/* A message renders as prefix[role] + content + suffix[role]; NULL strings are empty. */
typedef struct chat_format {
    const char *prefix[N_ROLES];
    const char *suffix[N_ROLES];
    const char *gen_prompt; /* appended for add_generation_prompt; NULL: the format has none,
                               the prompt already ends where the model answers ([/INST]) */
    const char *preamble;   /* written once before the first message */
    /* [INST]-style turns: turn_open is written before a message when no turn is open, and an
     * assistant message closes the turn (so a system message shares the user's [INST]). */
    const char *turn_open;
    unsigned preamble_opens_turn : 1; /* llama2: the preamble is the first turn's "[INST] " */
    /* gemma: no system role; system text is held back and written into the next user message,
     * after its prefix, followed by "\n\n" (the reference's folding, bytes included). */
    unsigned fold_system : 1;
    unsigned trim; /* TRIM(role) bits: ASCII whitespace stripped from both ends of the content */
} chat_format;

/* Multi-byte markers spelled out: U+FF5C fullwidth bar and U+2581 (the SPM space). */
#define FW_BAR "\xef\xbd\x9c"
#define SPM_SPACE "\xe2\x96\x81"
#define DEEPSEEK_EOS "<" FW_BAR "end" SPM_SPACE "of" SPM_SPACE "sentence" FW_BAR ">"

static const chat_format formats[CHAT_N_FORMATS] = {
    [CHAT_CHATML] = {.prefix = {"<|im_start|>system\n", "<|im_start|>user\n", "<|im_start|>assistant\n"},
                     .suffix = EVERY_ROLE("<|im_end|>\n"),
                     .gen_prompt = "<|im_start|>assistant\n"},
    [CHAT_LLAMA2] = {.suffix = {"\n", " [/INST]", "</s>"},
                     .preamble = "[INST] ", .turn_open = "[INST] ", .preamble_opens_turn = 1},
    [CHAT_LLAMA2_SYS] = {.prefix = {"<<SYS>>\n", NULL, NULL},
                         .suffix = {"\n<</SYS>>\n\n", " [/INST]", "</s>"},
                         .preamble = "[INST] ", .turn_open = "[INST] ", .preamble_opens_turn = 1},
    [CHAT_LLAMA2_SYS_BOS] = {.prefix = {"<<SYS>>\n", NULL, NULL},
                             .suffix = {"\n<</SYS>>\n\n", " [/INST]", "</s>"},
                             .preamble = "[INST] ", .turn_open = "<s>[INST] ", .preamble_opens_turn = 1},
    [CHAT_LLAMA2_SYS_STRIP] = {.prefix = {"<<SYS>>\n", NULL, NULL},
                               .suffix = {"\n<</SYS>>\n\n", " [/INST]", "</s>"},
                               .preamble = "[INST] ", .turn_open = "[INST] ", .preamble_opens_turn = 1,
                               .trim = TRIM_ALL},
    [CHAT_LLAMA3] = {.prefix = {"<|start_header_id|>system<|end_header_id|>\n\n",
                                "<|start_header_id|>user<|end_header_id|>\n\n",
                                "<|start_header_id|>assistant<|end_header_id|>\n\n"},
                     .suffix = EVERY_ROLE("<|eot_id|>"),
                     .gen_prompt = "<|start_header_id|>assistant<|end_header_id|>\n\n", .trim = TRIM_ALL},
    [CHAT_MISTRAL_V1] = {.prefix = {NULL, NULL, " "}, .suffix = {"\n\n", " [/INST]", "</s>"},
                         .turn_open = " [INST] "},
    [CHAT_MISTRAL_V3] = {.prefix = {NULL, NULL, " "}, .suffix = {"\n\n", "[/INST]", "</s>"},
                         .turn_open = "[INST] ", .trim = TRIM(ROLE_ASSISTANT)},
    [CHAT_MISTRAL_V3_TEKKEN] = {.suffix = {"\n\n", "[/INST]", "</s>"}, .turn_open = "[INST]"},
    [CHAT_MISTRAL_V7] = {.prefix = {"[SYSTEM_PROMPT] ", "[INST] ", " "},
                         .suffix = {"[/SYSTEM_PROMPT]", "[/INST]", "</s>"}},
    [CHAT_MISTRAL_V7_TEKKEN] = {.prefix = {"[SYSTEM_PROMPT]", "[INST]", NULL},
                                .suffix = {"[/SYSTEM_PROMPT]", "[/INST]", "</s>"}},
    [CHAT_PHI3] = {.prefix = {"<|system|>\n", "<|user|>\n", "<|assistant|>\n"},
                   .suffix = EVERY_ROLE("<|end|>\n"), .gen_prompt = "<|assistant|>\n"},
    [CHAT_PHI4] = {.prefix = {"<|im_start|>system<|im_sep|>", "<|im_start|>user<|im_sep|>",
                              "<|im_start|>assistant<|im_sep|>"},
                   .suffix = EVERY_ROLE("<|im_end|>"), .gen_prompt = "<|im_start|>assistant<|im_sep|>"},
    [CHAT_FALCON3] = {.prefix = {"<|system|>\n", "<|user|>\n", "<|assistant|>\n"},
                      .suffix = EVERY_ROLE("\n"), .gen_prompt = "<|assistant|>\n"},
    [CHAT_ZEPHYR] = {.prefix = {"<|system|>\n", "<|user|>\n", "<|assistant|>\n"},
                     .suffix = EVERY_ROLE("<|endoftext|>\n"), .gen_prompt = "<|assistant|>\n"},
    [CHAT_GEMMA] = {.prefix = {NULL, "<start_of_turn>user\n", "<start_of_turn>model\n"},
                    .suffix = {NULL, "<end_of_turn>\n", "<end_of_turn>\n"},
                    .gen_prompt = "<start_of_turn>model\n", .fold_system = 1, .trim = TRIM_ALL},
    [CHAT_DEEPSEEK] = {.prefix = {NULL, "### Instruction:\n", "### Response:\n"},
                       .suffix = {NULL, "\n", "\n<|EOT|>\n"}, .gen_prompt = "### Response:\n"},
    [CHAT_DEEPSEEK2] = {.prefix = {NULL, "User: ", "Assistant: "}, .suffix = {"\n\n", "\n\n", DEEPSEEK_EOS},
                        .gen_prompt = "Assistant:"},
    [CHAT_DEEPSEEK3] = {.prefix = {NULL, "<" FW_BAR "User" FW_BAR ">", "<" FW_BAR "Assistant" FW_BAR ">"},
                        .suffix = {"\n\n", NULL, DEEPSEEK_EOS},
                        .gen_prompt = "<" FW_BAR "Assistant" FW_BAR ">"},
    [CHAT_COMMAND_R] = {.prefix = {"<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|>", "<|START_OF_TURN_TOKEN|><|USER_TOKEN|>",
                                   "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>"},
                        .suffix = EVERY_ROLE("<|END_OF_TURN_TOKEN|>"),
                        .gen_prompt = "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>", .trim = TRIM_ALL},
    [CHAT_VICUNA] = {.prefix = {NULL, "USER: ", "ASSISTANT: "}, .suffix = {"\n\n", "\n", "</s>\n"},
                     .gen_prompt = "ASSISTANT:"},
    [CHAT_VICUNA_ORCA] = {.prefix = {"SYSTEM: ", "USER: ", "ASSISTANT: "}, .suffix = {"\n", "\n", "</s>\n"},
                          .gen_prompt = "ASSISTANT:"},
};

/* ---------------------------------------------------------------- detection */

/* A family is recognised when its template text contains every marker. Rules are tried in
 * order and the first match wins: the order is the reference engine's, families llmmini does
 * not build in included, so their templates are refused instead of falling through to a
 * later, wrong family. (The reference also treats a text starting with "mistral" as the
 * [INST] family; that only matters for names, which are looked up exactly instead.) */
typedef struct detect_rule {
    const char *family; /* the reference engine's name for it */
    int format;         /* built-in format, or CHAT_NOT_BUILT_IN */
    const char *markers[3];
} detect_rule;

static const detect_rule detect_rules[] = {
    {"phi4", CHAT_PHI4, {"<|im_start|>", "<|im_sep|>"}},
    {"smolvlm", CHAT_NOT_BUILT_IN, {"<|im_start|>", "<end_of_utterance>"}},
    {"chatml", CHAT_CHATML, {"<|im_start|>"}},
    {"mistral-v7", CHAT_MISTRAL_V7, {"[INST]", "[SYSTEM_PROMPT]"}},
    {"mistral-v1", CHAT_MISTRAL_V1, {"' [INST] ' + system_message"}},
    {"mistral-v1", CHAT_MISTRAL_V1, {"[INST]", "[AVAILABLE_TOOLS]", " [INST]"}},
    {"mistral-v3-tekken", CHAT_MISTRAL_V3_TEKKEN, {"[INST]", "[AVAILABLE_TOOLS]", "\"[INST]\""}},
    {"mistral-v3", CHAT_MISTRAL_V3, {"[INST]", "[AVAILABLE_TOOLS]"}},
    {"llama2-sys-strip", CHAT_LLAMA2_SYS_STRIP, {"[INST]", "content.strip()"}},
    {"llama2-sys-bos", CHAT_LLAMA2_SYS_BOS, {"[INST]", "bos_token + '[INST]"}},
    {"llama2-sys", CHAT_LLAMA2_SYS, {"[INST]", "<<SYS>>"}},
    {"llama2", CHAT_LLAMA2, {"[INST]"}},
    {"phi3", CHAT_PHI3, {"<|assistant|>", "<|end|>"}},
    {"chatglm4", CHAT_NOT_BUILT_IN, {"[gMASK]<sop>"}},
    {"falcon3", CHAT_FALCON3, {"<|assistant|>", "<|user|>", "</s>"}},
    {"glmedge", CHAT_NOT_BUILT_IN, {"<|assistant|>", "<|user|>"}},
    {"glmedge", CHAT_NOT_BUILT_IN, {"<|{{ item['role'] }}|>", "<|begin_of_image|>"}},
    {"zephyr", CHAT_ZEPHYR, {"<|user|>", "<|endoftext|>"}},
    {"monarch", CHAT_NOT_BUILT_IN, {"bos_token + message['role']"}},
    {"gemma", CHAT_GEMMA, {"<start_of_turn>"}},
    {"orion", CHAT_NOT_BUILT_IN, {"'\\n\\nAssistant: ' + eos_token"}},
    {"openchat", CHAT_NOT_BUILT_IN, {"GPT4 Correct "}},
    {"vicuna-orca", CHAT_VICUNA_ORCA, {"USER: ", "ASSISTANT: ", "SYSTEM: "}},
    {"vicuna", CHAT_VICUNA, {"USER: ", "ASSISTANT: "}},
    {"deepseek", CHAT_DEEPSEEK, {"### Instruction:", "<|EOT|>"}},
    {"command-r", CHAT_COMMAND_R, {"<|START_OF_TURN_TOKEN|>", "<|USER_TOKEN|>"}},
    {"llama3", CHAT_LLAMA3, {"<|start_header_id|>", "<|end_header_id|>"}},
    {"chatglm3", CHAT_NOT_BUILT_IN, {"[gMASK]sop"}},
    {"minicpm", CHAT_NOT_BUILT_IN, {"<\xe7\x94\xa8\xe6\x88\xb7>"}}, /* "<用户>" */
    {"deepseek2", CHAT_DEEPSEEK2, {"'Assistant: ' + message['content'] + eos_token"}},
    {"deepseek3", CHAT_DEEPSEEK3,
     {"<" FW_BAR "Assistant" FW_BAR ">", "<" FW_BAR "User" FW_BAR ">", DEEPSEEK_EOS}},
    /* every later family of the reference is one llmmini lacks, so "not recognised" is the
     * same answer for them */
};

static int rule_matches(const detect_rule *r, const char *text) {
    for (size_t i = 0; i < sizeof r->markers / sizeof *r->markers; i++)
        if (r->markers[i] && !strstr(text, r->markers[i])) return 0;
    return 1;
}

int llmm__chat_format_find(const char *name) {
    for (int i = 0; name && i < CHAT_N_FORMATS; i++)
        if (strcmp(format_names[i], name) == 0) return i;
    return -1;
}

size_t llmm__chat_format_count(void) { return CHAT_N_FORMATS; }

const char *llmm__chat_format_name(int index) {
    return index >= 0 && index < CHAT_N_FORMATS ? format_names[index] : NULL;
}

int llmm__chat_detect(const char *template_text, const char **family) {
    if (family) *family = NULL;
    if (!template_text) return -1;
    int by_name = llmm__chat_format_find(template_text);
    if (by_name >= 0) {
        if (family) *family = format_names[by_name];
        return by_name;
    }
    for (size_t i = 0; i < sizeof detect_rules / sizeof *detect_rules; i++) {
        if (!rule_matches(&detect_rules[i], template_text)) continue;
        if (family) *family = detect_rules[i].family;
        return detect_rules[i].format;
    }
    return -1;
}

/* ---------------------------------------------------------------- rendering */

void llmm__chat_out_bytes(chat_out *o, const char *s, size_t n) {
    if (o->overflow || n == 0) return;
    if (n > SIZE_MAX - o->len) {
        o->overflow = 1;
        return;
    }
    if (o->len + n <= o->cap) memcpy(o->buf + o->len, s, n);
    o->len += n;
}

void llmm__chat_out_str(chat_out *o, const char *s) {
    if (s) llmm__chat_out_bytes(o, s, strlen(s));
}

static void out_bytes(chat_out *o, const char *s, size_t n) { llmm__chat_out_bytes(o, s, n); }
static void out_str(chat_out *o, const char *s) { llmm__chat_out_str(o, s); }

llmm_status llmm__chat_out_finish(const chat_out *o, const char *who, size_t *needed, llmm_diag *d) {
    if (o->overflow) return llmm__diag_fail(d, LLMM_ERR_INVALID_ARG, "%s: the output exceeds SIZE_MAX", who);
    *needed = o->len;
    if (o->len > o->cap)
        return llmm__diag_fail(d, LLMM_ERR_BUFFER_TOO_SMALL, "%s: %zu bytes needed, capacity %zu", who, o->len,
                               o->cap);
    if (o->len < o->cap) o->buf[o->len] = '\0';
    return LLMM_OK;
}

/* The C locale's isspace, on bytes: the reference trims with it, and UTF-8 bytes are never
 * spaces there. */
static int ascii_space(char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

/* content, trimmed when the format trims this role: start and length */
static const char *content_span(const chat_format *f, int role, const char *s, size_t *len) {
    size_t n = strlen(s);
    if (!(f->trim & TRIM(role))) {
        *len = n;
        return s;
    }
    while (n > 0 && ascii_space(*s)) s++, n--;
    while (n > 0 && ascii_space(s[n - 1])) n--;
    *len = n;
    return s;
}

static int role_of(const char *role) {
    for (int r = 0; r < N_ROLES; r++)
        if (strcmp(role, role_names[r]) == 0) return r;
    return -1;
}

/* gemma: the system messages m[from, to) joined, then "\n\n" unless all were empty. */
static void out_folded_system(chat_out *o, const chat_format *f, const llmm_chat_message *m, size_t from,
                              size_t to) {
    size_t total = 0;
    for (size_t i = from; i < to; i++) {
        if (role_of(m[i].role) != ROLE_SYSTEM) continue;
        size_t n;
        const char *s = content_span(f, ROLE_SYSTEM, m[i].content, &n);
        out_bytes(o, s, n);
        total += n;
    }
    if (total > 0) out_str(o, "\n\n");
}

static void render(const chat_format *f, const llmm_chat_message *m, size_t n, int add_generation_prompt,
                   chat_out *o) {
    int in_turn = f->preamble_opens_turn;
    size_t held_system = SIZE_MAX; /* first system message not yet folded (gemma) */
    out_str(o, f->preamble);
    for (size_t i = 0; i < n; i++) {
        int role = role_of(m[i].role);
        if (f->fold_system && role == ROLE_SYSTEM) {
            if (held_system == SIZE_MAX) held_system = i;
            continue;
        }
        if (f->turn_open && !in_turn) out_str(o, f->turn_open);
        in_turn = role != ROLE_ASSISTANT;
        out_str(o, f->prefix[role]);
        if (held_system != SIZE_MAX && role == ROLE_USER) {
            out_folded_system(o, f, m, held_system, i);
            held_system = SIZE_MAX;
        }
        size_t len;
        const char *s = content_span(f, role, m[i].content, &len);
        out_bytes(o, s, len);
        out_str(o, f->suffix[role]);
    }
    if (add_generation_prompt) out_str(o, f->gen_prompt);
}

/* ---------------------------------------------------------------- checks and rendering */

llmm_status llmm__chat_check_messages(const llmm_chat_message *m, size_t n, llmm_diag *d) {
    if (n > 0 && !m) return llmm__diag_fail(d, LLMM_ERR_INVALID_ARG, "llmm_chat_format: messages is NULL, n = %zu", n);
    for (size_t i = 0; i < n; i++) {
        if (!m[i].role || !m[i].content)
            return llmm__diag_fail(d, LLMM_ERR_INVALID_ARG, "llmm_chat_format: message %zu has a NULL %s", i,
                                   m[i].role ? "content" : "role");
        if (role_of(m[i].role) < 0)
            return llmm__diag_fail(d, LLMM_ERR_INVALID_ARG,
                                   "llmm_chat_format: message %zu has role '%.32s' (system, user or assistant)", i,
                                   m[i].role);
    }
    return LLMM_OK;
}

/* The format a model's own template asks for. */
static llmm_status detect_for_template(const char *text, llmm_status text_status, int *index, llmm_diag *d) {
    if (text_status == LLMM_ERR_NOT_FOUND)
        return llmm__diag_fail(d, LLMM_ERR_UNSUPPORTED,
                               "the model has no chat template (tokenizer.chat_template); name one of: %s",
                               format_names_csv + 1);
    if (text_status)
        return llmm__diag_fail(d, LLMM_ERR_UNSUPPORTED, "tokenizer.chat_template is not a string; name one of: %s",
                               format_names_csv + 1);
    const char *family;
    *index = llmm__chat_detect(text, &family);
    if (*index >= 0) return LLMM_OK;
    if (family)
        return llmm__diag_fail(d, LLMM_ERR_UNSUPPORTED,
                               "the model's chat template is of the '%s' family, which llmmini does not build in; "
                               "name one of: %s",
                               family, format_names_csv + 1);
    return llmm__diag_fail(d, LLMM_ERR_UNSUPPORTED, "the model's chat template is not recognised; name one of: %s",
                           format_names_csv + 1);
}

llmm_status llmm__chat_resolve(const char *template_name, const char *model_template, llmm_status template_status,
                               int *index, llmm_diag *d) {
    if (!template_name) return detect_for_template(model_template, template_status, index, d);
    *index = llmm__chat_format_find(template_name);
    if (*index >= 0) return LLMM_OK;
    return llmm__diag_fail(d, LLMM_ERR_UNSUPPORTED, "no built-in chat template '%.64s'; the names are: %s",
                           template_name, format_names_csv + 1);
}

llmm_status llmm__chat_render(int index, const llmm_chat_message *messages, size_t n, int add_generation_prompt,
                              char *buf, size_t capacity, size_t *needed, llmm_diag *d) {
    chat_out o = {.buf = buf, .cap = capacity};
    render(&formats[index], messages, n, add_generation_prompt, &o);
    return llmm__chat_out_finish(&o, "llmm_chat_format", needed, d);
}

LLMM_API llmm_status llmm_chat_template_names(const char **names_csv) {
    if (!names_csv) return LLMM_ERR_INVALID_ARG;
    *names_csv = format_names_csv + 1;
    return LLMM_OK;
}
