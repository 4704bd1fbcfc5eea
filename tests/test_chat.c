/* Chat templates: every built-in format against the reference engine's output, detection
 * from template texts, the buffer rule, argument errors, and tokenization of the result. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "text/chat.h"
#include "format/gguf.h"
#include "support/gguf_builder.h"
#include "llmmini.h"
#include "support/shared_data.h"
#include "support/fixtures.h"

/* ---------------------------------------------------------------- helpers */

/* A vocabulary-less model whose only interesting metadata is its chat template: a string
 * (template != NULL), a u32 (as_u32), or nothing. */
static llmm_model *model_with_template(const char *template_text, int as_u32) {
    gguf_builder b;
    gb_init(&b);
    int has_template = template_text || as_u32;
    gb_header(&b, 3, 0, has_template ? 2 : 1);
    gb_kv_str(&b, "general.architecture", "llama");
    if (as_u32) gb_kv_u32(&b, "tokenizer.chat_template", 7);
    else if (template_text) gb_kv_str(&b, "tokenizer.chat_template", template_text);
    char path[64];
    int written = gb_write_temp(&b, path, sizeof path);
    gb_free(&b);
    assert_int_equal(written, 0);
    llmm_model_params p;
    llmm_model_params_default(&p, sizeof p);
    p.vocab_only = 1;
    llmm_model *m = NULL;
    llmm_status st = llmm_model_load(path, &p, &m);
    unlink(path);
    assert_int_equal(st, LLMM_OK);
    return m;
}

/* A shared file loaded vocab-only; NULL (and a note) when this build cannot load it. */
static llmm_model *load_shared(const char *rel) {
    char path[1024], err[256] = "";
    llmm_model_params p;
    llmm_model_params_default(&p, sizeof p);
    p.vocab_only = 1;
    p.error_buf = err;
    p.error_buf_size = sizeof err;
    llmm_model *m = NULL;
    if (llmm_model_load(shared_path(path, sizeof path, rel), &p, &m) != LLMM_OK)
        print_message("note: %s not loaded (%s)\n", rel, err);
    return m;
}

/* Format into a fresh malloc'd, NUL-terminated string; asserts success. */
static char *format_or_die(const llmm_model *m, const char *name, const llmm_chat_message *msgs, size_t n,
                           int add_gen) {
    size_t need = 0;
    llmm_status st = llmm_chat_format(m, name, msgs, n, add_gen, NULL, 0, &need);
    assert_true(st == LLMM_OK || st == LLMM_ERR_BUFFER_TOO_SMALL);
    char *out = malloc(need + 1);
    assert_non_null(out);
    size_t got = 0;
    assert_int_equal(llmm_chat_format(m, name, msgs, n, add_gen, out, need + 1, &got), LLMM_OK);
    assert_int_equal(got, need);
    assert_int_equal(out[got], '\0');
    return out;
}

static void expect_format(const llmm_model *m, const char *name, const llmm_chat_message *msgs, size_t n, int add_gen,
                          const char *want) {
    char *got = format_or_die(m, name, msgs, n, add_gen);
    if (strcmp(got, want) != 0) print_message("format %s:\n got: [%s]\nwant: [%s]\n", name, got, want);
    assert_string_equal(got, want);
    free(got);
}

static void expect_error_mentions(const llmm_model *m, const char *what) {
    char msg[512];
    llmm_model_last_error(m, msg, sizeof msg);
    if (!strstr(msg, what)) print_message("message '%s' lacks '%s'\n", msg, what);
    assert_non_null(strstr(msg, what));
}

static int group_setup(void **state) {
    *state = model_with_template(NULL, 0);
    return 0;
}

static int group_teardown(void **state) {
    llmm_model_free(*state);
    return 0;
}

/* ---------------------------------------------------------------- the reference conversation */

/* The conversation of the reference engine's chat-template test: system, three user turns,
 * two replies (one padded with spaces, to show which formats trim), generation prompt on. */
static const llmm_chat_message conversation[] = {
    {"system", "You are a helpful assistant"}, {"user", "Hello"},
    {"assistant", "Hi there"},                 {"user", "Who are you"},
    {"assistant", "   I am an assistant   "},  {"user", "Another question"},
};
#define N_CONVERSATION (sizeof conversation / sizeof *conversation)

#define FW_BAR "\xef\xbd\x9c"
#define DS_EOS "<" FW_BAR "end\xe2\x96\x81of\xe2\x96\x81sentence" FW_BAR ">"

typedef struct format_case {
    const char *name;
    const char *expected;
} format_case;

/* Expected bytes: the reference test's expected outputs where it has the format (chatml,
 * llama2*, gemma, deepseek, deepseek2, command-r, llama3, phi3, phi4, vicuna*, mistral-*);
 * the others follow the reference formatter's code (src/llama-chat.cpp). */
static const format_case reference_cases[] = {
    {"chatml", "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n"
               "<|im_start|>assistant\nHi there<|im_end|>\n<|im_start|>user\nWho are you<|im_end|>\n"
               "<|im_start|>assistant\n   I am an assistant   <|im_end|>\n<|im_start|>user\nAnother question"
               "<|im_end|>\n<|im_start|>assistant\n"},
    {"llama2", "[INST] You are a helpful assistant\nHello [/INST]Hi there</s>[INST] Who are you [/INST]   I am an "
               "assistant   </s>[INST] Another question [/INST]"},
    {"llama2-sys", "[INST] <<SYS>>\nYou are a helpful assistant\n<</SYS>>\n\nHello [/INST]Hi there</s>[INST] Who are "
                   "you [/INST]   I am an assistant   </s>[INST] Another question [/INST]"},
    {"llama2-sys-bos", "[INST] <<SYS>>\nYou are a helpful assistant\n<</SYS>>\n\nHello [/INST]Hi there</s><s>[INST] "
                       "Who are you [/INST]   I am an assistant   </s><s>[INST] Another question [/INST]"},
    {"llama2-sys-strip", "[INST] <<SYS>>\nYou are a helpful assistant\n<</SYS>>\n\nHello [/INST]Hi there</s>[INST] "
                         "Who are you [/INST]I am an assistant</s>[INST] Another question [/INST]"},
    {"llama3", "<|start_header_id|>system<|end_header_id|>\n\nYou are a helpful assistant<|eot_id|>"
               "<|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|><|start_header_id|>assistant"
               "<|end_header_id|>\n\nHi there<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nWho are you"
               "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nI am an assistant<|eot_id|>"
               "<|start_header_id|>user<|end_header_id|>\n\nAnother question<|eot_id|><|start_header_id|>"
               "assistant<|end_header_id|>\n\n"},
    {"mistral-v1", " [INST] You are a helpful assistant\n\nHello [/INST] Hi there</s> [INST] Who are you [/INST]    "
                   "I am an assistant   </s> [INST] Another question [/INST]"},
    {"mistral-v3", "[INST] You are a helpful assistant\n\nHello[/INST] Hi there</s>[INST] Who are you[/INST] I am an "
                   "assistant</s>[INST] Another question[/INST]"},
    {"mistral-v3-tekken", "[INST]You are a helpful assistant\n\nHello[/INST]Hi there</s>[INST]Who are you[/INST]   "
                          "I am an assistant   </s>[INST]Another question[/INST]"},
    {"mistral-v7", "[SYSTEM_PROMPT] You are a helpful assistant[/SYSTEM_PROMPT][INST] Hello[/INST] Hi there</s>"
                   "[INST] Who are you[/INST]    I am an assistant   </s>[INST] Another question[/INST]"},
    {"mistral-v7-tekken", "[SYSTEM_PROMPT]You are a helpful assistant[/SYSTEM_PROMPT][INST]Hello[/INST]Hi there</s>"
                          "[INST]Who are you[/INST]   I am an assistant   </s>[INST]Another question[/INST]"},
    {"phi3", "<|system|>\nYou are a helpful assistant<|end|>\n<|user|>\nHello<|end|>\n<|assistant|>\nHi there"
             "<|end|>\n<|user|>\nWho are you<|end|>\n<|assistant|>\n   I am an assistant   <|end|>\n<|user|>\n"
             "Another question<|end|>\n<|assistant|>\n"},
    {"phi4", "<|im_start|>system<|im_sep|>You are a helpful assistant<|im_end|><|im_start|>user<|im_sep|>Hello"
             "<|im_end|><|im_start|>assistant<|im_sep|>Hi there<|im_end|><|im_start|>user<|im_sep|>Who are you"
             "<|im_end|><|im_start|>assistant<|im_sep|>   I am an assistant   <|im_end|><|im_start|>user<|im_sep|>"
             "Another question<|im_end|><|im_start|>assistant<|im_sep|>"},
    {"falcon3", "<|system|>\nYou are a helpful assistant\n<|user|>\nHello\n<|assistant|>\nHi there\n<|user|>\nWho are "
                "you\n<|assistant|>\n   I am an assistant   \n<|user|>\nAnother question\n<|assistant|>\n"},
    {"zephyr", "<|system|>\nYou are a helpful assistant<|endoftext|>\n<|user|>\nHello<|endoftext|>\n<|assistant|>\n"
               "Hi there<|endoftext|>\n<|user|>\nWho are you<|endoftext|>\n<|assistant|>\n   I am an assistant   "
               "<|endoftext|>\n<|user|>\nAnother question<|endoftext|>\n<|assistant|>\n"},
    {"gemma", "<start_of_turn>user\nYou are a helpful assistant\n\nHello<end_of_turn>\n<start_of_turn>model\nHi there"
              "<end_of_turn>\n<start_of_turn>user\nWho are you<end_of_turn>\n<start_of_turn>model\nI am an assistant"
              "<end_of_turn>\n<start_of_turn>user\nAnother question<end_of_turn>\n<start_of_turn>model\n"},
    {"deepseek", "You are a helpful assistant### Instruction:\nHello\n### Response:\nHi there\n<|EOT|>\n### "
                 "Instruction:\nWho are you\n### Response:\n   I am an assistant   \n<|EOT|>\n### Instruction:\n"
                 "Another question\n### Response:\n"},
    {"deepseek2", "You are a helpful assistant\n\nUser: Hello\n\nAssistant: Hi there" DS_EOS "User: Who are you\n\n"
                  "Assistant:    I am an assistant   " DS_EOS "User: Another question\n\nAssistant:"},
    {"deepseek3", "You are a helpful assistant\n\n<" FW_BAR "User" FW_BAR ">Hello<" FW_BAR "Assistant" FW_BAR
                  ">Hi there" DS_EOS "<" FW_BAR "User" FW_BAR ">Who are you<" FW_BAR "Assistant" FW_BAR
                  ">   I am an assistant   " DS_EOS "<" FW_BAR "User" FW_BAR ">Another question<" FW_BAR
                  "Assistant" FW_BAR ">"},
    {"command-r", "<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|>You are a helpful assistant<|END_OF_TURN_TOKEN|>"
                  "<|START_OF_TURN_TOKEN|><|USER_TOKEN|>Hello<|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|>"
                  "<|CHATBOT_TOKEN|>Hi there<|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|><|USER_TOKEN|>Who are you"
                  "<|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>I am an assistant"
                  "<|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|><|USER_TOKEN|>Another question<|END_OF_TURN_TOKEN|>"
                  "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>"},
    {"vicuna", "You are a helpful assistant\n\nUSER: Hello\nASSISTANT: Hi there</s>\nUSER: Who are you\nASSISTANT:    "
               "I am an assistant   </s>\nUSER: Another question\nASSISTANT:"},
    {"vicuna-orca", "SYSTEM: You are a helpful assistant\nUSER: Hello\nASSISTANT: Hi there</s>\nUSER: Who are you\n"
                    "ASSISTANT:    I am an assistant   </s>\nUSER: Another question\nASSISTANT:"},
};
#define N_REFERENCE_CASES (sizeof reference_cases / sizeof *reference_cases)

static void test_reference_conversation_every_format(void **state) {
    for (size_t i = 0; i < N_REFERENCE_CASES; i++)
        expect_format(*state, reference_cases[i].name, conversation, N_CONVERSATION, 1, reference_cases[i].expected);
}

/* Every built-in name has a case above, so no format goes untested. */
static void test_every_format_has_a_reference_case(void **state) {
    (void)state;
    assert_int_equal(llmm__chat_format_count(), N_REFERENCE_CASES);
    for (size_t i = 0; i < llmm__chat_format_count(); i++) {
        int found = 0;
        for (size_t k = 0; k < N_REFERENCE_CASES; k++) found |= !strcmp(reference_cases[k].name, llmm__chat_format_name((int)i));
        if (!found) print_message("no case for %s\n", llmm__chat_format_name((int)i));
        assert_true(found);
    }
}

/* Without the generation prompt the text is the same conversation, minus the assistant
 * header: a prefix of the text with it (equal for formats that have none). */
static void test_without_generation_prompt(void **state) {
    for (size_t i = 0; i < N_REFERENCE_CASES; i++) {
        char *without = format_or_die(*state, reference_cases[i].name, conversation, N_CONVERSATION, 0);
        const char *with = reference_cases[i].expected;
        assert_memory_equal(without, with, strlen(without));
        free(without);
    }
    static const llmm_chat_message one[] = {{"user", "Hi"}};
    expect_format(*state, "chatml", one, 1, 0, "<|im_start|>user\nHi<|im_end|>\n");
    expect_format(*state, "llama3", one, 1, 0, "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>");
    expect_format(*state, "gemma", one, 1, 0, "<start_of_turn>user\nHi<end_of_turn>\n");
    expect_format(*state, "phi3", one, 1, 0, "<|user|>\nHi<|end|>\n");
    expect_format(*state, "llama2", one, 1, 0, "[INST] Hi [/INST]");
    expect_format(*state, "llama2", one, 1, 1, "[INST] Hi [/INST]");
    expect_format(*state, "mistral-v7", one, 1, 1, "[INST] Hi[/INST]");
}

/* Multi-turn without a system message, with and without the generation prompt. */
static void test_multi_turn_without_system(void **state) {
    static const llmm_chat_message turns[] = {{"user", "a"}, {"assistant", "b"}, {"user", "c"}};
    expect_format(*state, "chatml", turns, 3, 1,
                  "<|im_start|>user\na<|im_end|>\n<|im_start|>assistant\nb<|im_end|>\n<|im_start|>user\nc<|im_end|>\n"
                  "<|im_start|>assistant\n");
    expect_format(*state, "llama2-sys", turns, 3, 0, "[INST] a [/INST]b</s>[INST] c [/INST]");
    expect_format(*state, "llama2-sys-bos", turns, 3, 0, "[INST] a [/INST]b</s><s>[INST] c [/INST]");
    expect_format(*state, "mistral-v3", turns, 3, 0, "[INST] a[/INST] b</s>[INST] c[/INST]");
    expect_format(*state, "phi3", turns, 3, 1, "<|user|>\na<|end|>\n<|assistant|>\nb<|end|>\n<|user|>\nc<|end|>\n<|assistant|>\n");
    expect_format(*state, "gemma", turns, 3, 1,
                  "<start_of_turn>user\na<end_of_turn>\n<start_of_turn>model\nb<end_of_turn>\n<start_of_turn>user\n"
                  "c<end_of_turn>\n<start_of_turn>model\n");
    expect_format(*state, "zephyr", turns, 3, 0,
                  "<|user|>\na<|endoftext|>\n<|assistant|>\nb<|endoftext|>\n<|user|>\nc<|endoftext|>\n");
    expect_format(*state, "deepseek", turns, 3, 1,
                  "### Instruction:\na\n### Response:\nb\n<|EOT|>\n### Instruction:\nc\n### Response:\n");
}

/* gemma has no system role: system text waits for the next user turn, whole and trimmed;
 * several are joined; an all-blank one adds no separator; one never followed by a user
 * message is dropped, as in the reference. */
static void test_gemma_system_folding(void **state) {
    static const llmm_chat_message two_systems[] = {{"system", " A "}, {"system", "B"}, {"user", "q"}};
    expect_format(*state, "gemma", two_systems, 3, 0, "<start_of_turn>user\nAB\n\nq<end_of_turn>\n");
    static const llmm_chat_message blank[] = {{"system", " \n "}, {"user", "q"}};
    expect_format(*state, "gemma", blank, 2, 0, "<start_of_turn>user\nq<end_of_turn>\n");
    static const llmm_chat_message across_reply[] = {{"user", "a"}, {"system", "S"}, {"assistant", "b"}, {"user", "c"}};
    expect_format(*state, "gemma", across_reply, 4, 0,
                  "<start_of_turn>user\na<end_of_turn>\n<start_of_turn>model\nb<end_of_turn>\n<start_of_turn>user\n"
                  "S\n\nc<end_of_turn>\n");
    static const llmm_chat_message trailing[] = {{"user", "a"}, {"system", "S"}};
    expect_format(*state, "gemma", trailing, 2, 1, "<start_of_turn>user\na<end_of_turn>\n<start_of_turn>model\n");
}

/* Trimming is ASCII whitespace only: other bytes (UTF-8 no-break space) stay. */
static void test_trim_is_ascii_whitespace_only(void **state) {
    static const llmm_chat_message m[] = {{"user", "\t\r\n\v\f x\xc2\xa0 \n"}};
    expect_format(*state, "llama3", m, 1, 0, "<|start_header_id|>user<|end_header_id|>\n\nx\xc2\xa0<|eot_id|>");
    expect_format(*state, "chatml", m, 1, 0, "<|im_start|>user\n\t\r\n\v\f x\xc2\xa0 \n<|im_end|>\n");
}

static void test_empty_conversation(void **state) {
    size_t need = 99;
    char buf[64];
    assert_int_equal(llmm_chat_format(*state, "chatml", NULL, 0, 0, buf, sizeof buf, &need), LLMM_OK);
    assert_int_equal(need, 0);
    assert_string_equal(buf, "");
    expect_format(*state, "chatml", NULL, 0, 1, "<|im_start|>assistant\n");
    expect_format(*state, "llama2", NULL, 0, 1, "[INST] ");
}

/* ---------------------------------------------------------------- detection */

typedef struct detect_case {
    const char *template_text;
    const char *format;  /* built-in format expected, NULL: none */
    const char *family;  /* family the reference would name, NULL: none */
} detect_case;

/* Templates in the shape of the models' own (shortened to the parts that matter). */
static const detect_case detect_cases[] = {
    /* Gemma 3: the system text as first_user_prefix (+ "\n\n") of the first turn, as the gemma
     * format writes it */
    {"{{ bos_token }}{%- if messages[0]['role'] == 'system' -%}{%- set first_user_prefix = messages[0]['content'] + "
     "'\n\n' -%}{%- endif -%}{{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else \"\") }}"
     "{{ message['content'] | trim }}{{ '<end_of_turn>\n' }}{%- if add_generation_prompt -%}"
     "{{'<start_of_turn>model\n'}}{%- endif -%}",
     "gemma", "gemma"},
    {"{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + "
     "'\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}",
     "chatml", "chatml"},
    {"{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] "
     "+ ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}{% endif %}{% endfor %}",
     "llama2", "llama2"},
    {"{% if messages[0]['role'] == 'system' %}{{ '[INST] <<SYS>>\\n' + messages[0]['content'] + '\\n<</SYS>>\\n\\n' }}"
     "{% endif %}{{ '[INST] ' + message['content'] + ' [/INST]' }}",
     "llama2-sys", "llama2-sys"},
    {"{%- if idx > 1 -%}{{- bos_token + '[INST] ' + messages[idx]['content'] + ' [/INST]' -}}{%- endif -%}"
     "{{- '[INST] <<SYS>>\\n' + messages[idx]['content'] + '\\n<</SYS>>\\n\\n' -}}",
     "llama2-sys-bos", "llama2-sys-bos"},
    {"{% if message['role'] == 'user' %}{{ '[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] == "
     "'system' %}{{ '<<SYS>>\\n' + content.strip() + '\\n<</SYS>>\\n\\n' }}{% endif %}",
     "llama2-sys-strip", "llama2-sys-strip"},
    {"{%- if loop.first and system_message is defined %}{{- ' [INST] ' + system_message + '\\n\\n' + "
     "message['content'] + ' [/INST]' }}{%- else %}{{- ' [INST] ' + message['content'] + ' [/INST]' }}{%- endif %}",
     "mistral-v1", "mistral-v1"},
    {"{{- \"[AVAILABLE_TOOLS] [\" }}{{- \"[/AVAILABLE_TOOLS]\" }}{{- \"[INST] \" + message[\"content\"] + "
     "\"[/INST]\" }}",
     "mistral-v3", "mistral-v3"},
    {"{{- \"[AVAILABLE_TOOLS][\" }}{{- \"[/AVAILABLE_TOOLS]\" }}{{- \"[INST]\" + message[\"content\"] + \"[/INST]\" }}",
     "mistral-v3-tekken", "mistral-v3-tekken"},
    {"{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] "
     "+ '[/INST]' }}{% elif message['role'] == 'system' %}{{ '[SYSTEM_PROMPT] ' + message['content'] + "
     "'[/SYSTEM_PROMPT]' }}{% endif %}{% endfor %}",
     "mistral-v7", "mistral-v7"},
    {"{{ bos_token }}{% for message in messages %}{{'<|' + message['role'] + '|>' + '\\n' + message['content'] + "
     "'<|end|>\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}",
     "phi3", "phi3"},
    {"{% for message in messages %}{% if (message['role'] == 'system') %}{{'<|im_start|>system<|im_sep|>' + "
     "message['content'] + '<|im_end|>'}}{% endif %}{% endfor %}",
     "phi4", "phi4"},
    {"{%- if message['role'] == 'user' %}{{- '<|user|>\\n' + message['content'] + '\\n' }}{%- elif message['role'] == "
     "'assistant' %}{{- '<|assistant|>\\n' + message['content'] + '</s>\\n' }}{%- endif %}",
     "falcon3", "falcon3"},
    {"{% for m in messages %}{% if m['role'] == 'user' %}{{ '<|user|>\\n' + m['content'] + '<|endoftext|>\\n' }}"
     "{% else %}{{ '<|' + m['role'] + '|>\\n' + m['content'] + '<|endoftext|>\\n' }}{% endif %}{% endfor %}",
     "zephyr", "zephyr"},
    {"{% for message in messages %}{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim + "
     "'<end_of_turn>\\n' }}{% endfor %}{% if add_generation_prompt %}{{'<start_of_turn>model\\n'}}{% endif %}",
     "gemma", "gemma"},
    {"{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + "
     "message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' %}{{ content }}"
     "{% endfor %}",
     "llama3", "llama3"},
    {"{{'### Instruction:\\n' + message['content'] + '\\n'}}{{'### Response:\\n' + message['content'] + "
     "'\\n<|EOT|>\\n'}}",
     "deepseek", "deepseek"},
    {"{% if message['role'] == 'user' %}{{ 'User: ' + message['content'] + '\\n\\n' }}{% elif message['role'] == "
     "'assistant' %}{{ 'Assistant: ' + message['content'] + eos_token }}{% endif %}",
     "deepseek2", "deepseek2"},
    {"{{'<" FW_BAR "User" FW_BAR ">' + message['content']}}{{'<" FW_BAR "Assistant" FW_BAR ">' + message['content'] "
     "+ '" DS_EOS "'}}",
     "deepseek3", "deepseek3"},
    {"{{ '<|START_OF_TURN_TOKEN|><|USER_TOKEN|>' + content.strip() + '<|END_OF_TURN_TOKEN|>' }}", "command-r",
     "command-r"},
    {"{{-'USER: ' + message['content'] + '\\n'-}}{{-'ASSISTANT: ' + message['content'] + '</s>\\n' -}}", "vicuna",
     "vicuna"},
    {"{{-'SYSTEM: ' + message['content'] + '\\n' -}}{{-'USER: ' + message['content'] + '\\n'-}}{{-'ASSISTANT: ' + "
     "message['content'] + '</s>\\n' -}}",
     "vicuna-orca", "vicuna-orca"},
    /* a bare name, as the reference accepts */
    {"llama3", "llama3", "llama3"},
    /* families the reference knows and llmmini does not: refused, never taken for a neighbour */
    {"<|im_start|>{% for message in messages %}{{ 'User:' + message['content'] + '<end_of_utterance>\\n' }}"
     "{% endfor %}",
     NULL, "smolvlm"},
    {"[gMASK]<sop>{% for item in messages %}<|{{ item['role'] }}|>\\n{{ item['content'] }}{% endfor %}", NULL,
     "chatglm4"},
    {"{% if message['role'] == 'user' %}{{ '<|user|>\\n' + message['content'] + eos_token }}{% elif "
     "message['role'] == 'assistant' %}{{ '<|assistant|>\\n' + message['content'] + eos_token }}{% endif %}",
     NULL, "glmedge"},
    {"{{ 'GPT4 Correct ' + message['role'].title() + ': ' + message['content'] + '<|end_of_turn|>'}}", NULL,
     "openchat"},
    /* nothing known */
    {"{% for message in messages %}{{ message['content'] }}{% endfor %}", NULL, NULL},
    {"", NULL, NULL},
};

static void test_detect_from_template_texts(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof detect_cases / sizeof *detect_cases; i++) {
        const detect_case *c = &detect_cases[i];
        const char *family = "unset";
        int index = llmm__chat_detect(c->template_text, &family);
        const char *got = llmm__chat_format_name(index);
        if ((got == NULL) != (c->format == NULL) || (got && strcmp(got, c->format)) ||
            (family == NULL) != (c->family == NULL) || (family && strcmp(family, c->family)))
            print_message("case %zu: got %s/%s, want %s/%s\n", i, got ? got : "-", family ? family : "-",
                          c->format ? c->format : "-", c->family ? c->family : "-");
        if (c->format) assert_string_equal(got, c->format);
        else assert_int_equal(index, -1);
        if (c->family) assert_string_equal(family, c->family);
        else assert_null(family);
    }
    assert_int_equal(llmm__chat_detect(NULL, NULL), -1);
}

static const char *template_of(const char *format) {
    for (size_t i = 0; i < sizeof detect_cases / sizeof *detect_cases; i++)
        if (detect_cases[i].format && !strcmp(detect_cases[i].format, format)) return detect_cases[i].template_text;
    fail_msg("no template text for %s", format);
    return NULL;
}

/* Through the public API: a model file carrying the template. */
static void test_detect_from_model_file(void **state) {
    (void)state;
    llmm_model *m = model_with_template(template_of("llama3"), 0);
    const char *name = NULL;
    assert_int_equal(llmm_chat_template_detect(m, &name), LLMM_OK);
    assert_string_equal(name, "llama3");
    char *detected = format_or_die(m, NULL, conversation, N_CONVERSATION, 1);
    char *forced = format_or_die(m, "llama3", conversation, N_CONVERSATION, 1);
    assert_string_equal(detected, forced);
    /* a forced name wins over the file's template */
    char *chatml = format_or_die(m, "chatml", conversation, N_CONVERSATION, 1);
    assert_string_equal(chatml, reference_cases[0].expected);
    free(detected);
    free(forced);
    free(chatml);
    llmm_model_free(m);
}

static void expect_unsupported(llmm_model *m, const char *mentions) {
    size_t need = 7;
    const char *name = "x";
    assert_int_equal(llmm_chat_template_detect(m, &name), LLMM_ERR_UNSUPPORTED);
    assert_null(name);
    assert_int_equal(llmm_chat_format(m, NULL, conversation, N_CONVERSATION, 1, NULL, 0, &need),
                     LLMM_ERR_UNSUPPORTED);
    assert_int_equal(need, 0);
    expect_error_mentions(m, mentions);
    expect_error_mentions(m, "chatml,llama2,"); /* the names the app may force */
}

static void test_detect_failures_name_the_choices(void **state) {
    (void)state;
    llmm_model *m = model_with_template("{{ messages }}", 0);
    expect_unsupported(m, "not recognised");
    llmm_model_free(m);
    m = model_with_template("[gMASK]<sop><|{{ item['role'] }}|>", 0);
    expect_unsupported(m, "'chatglm4' family");
    llmm_model_free(m);
    m = model_with_template(NULL, 1);
    expect_unsupported(m, "not a string");
    llmm_model_free(m);
}

/* The shared models carry no chat template. */
static void test_shared_models_have_no_template(void **state) {
    (void)state;
    static const char *const files[] = {"models/stories260K.gguf", "models/llama-2-tiny-random.gguf"};
    for (size_t i = 0; i < 2; i++) {
        llmm_model *m = load_shared(files[i]);
        assert_non_null(m);
        expect_unsupported(m, "no chat template");
        llmm_model_free(m);
    }
}

/* Real models' templates, from the shared vocabulary files (Llama 3, Qwen 2.5). */
static const char *const vocab_files[] = {"vocab/ggml-vocab-llama-bpe.gguf", "vocab/ggml-vocab-qwen2.gguf"};
static const char *const vocab_formats[] = {"llama3", "chatml"};

/* Read straight from the file, so this runs whatever tokenizers this build loads. */
static void test_detect_real_templates(void **state) {
    (void)state;
    for (size_t i = 0; i < 2; i++) {
        char path[1024];
        gguf_file *f = NULL;
        llmm_diag d = {{0}};
        assert_int_equal(llmm__gguf_open_file(shared_path(path, sizeof path, vocab_files[i]), 1, NULL, &f, &d), LLMM_OK);
        const gguf_kv *kv = llmm__gguf_find_kv(f, "tokenizer.chat_template");
        assert_non_null(kv);
        assert_int_equal(kv->type, GGUF_TYPE_STRING);
        char *text = malloc((size_t)kv->v.str.len + 1);
        assert_non_null(text);
        memcpy(text, kv->v.str.ptr, (size_t)kv->v.str.len);
        text[kv->v.str.len] = '\0';
        assert_string_equal(llmm__chat_format_name(llmm__chat_detect(text, NULL)), vocab_formats[i]);
        free(text);
        llmm__gguf_close(f);
    }
}

/* The same through the public API, when this build loads these (byte-level BPE) vocabularies. */
static void test_shared_vocab_templates(void **state) {
    (void)state;
    const char *const *files = vocab_files, *const *want = vocab_formats;
    int tested = 0;
    for (size_t i = 0; i < 2; i++) {
        llmm_model *m = load_shared(files[i]);
        if (!m) continue;
        const char *name = NULL;
        assert_int_equal(llmm_chat_template_detect(m, &name), LLMM_OK);
        assert_string_equal(name, want[i]);
        llmm_model_free(m);
        tested++;
    }
    if (!tested) skip();
}

/* ---------------------------------------------------------------- buffer rule and errors */

static void test_buffer_too_small_and_termination(void **state) {
    static const llmm_chat_message m[] = {{"user", "Hi"}};
    const char *want = "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n";
    size_t len = strlen(want), need = 0;
    char buf[128];
    assert_int_equal(llmm_chat_format(*state, "chatml", m, 1, 1, NULL, 0, &need), LLMM_ERR_BUFFER_TOO_SMALL);
    assert_int_equal(need, len);
    expect_error_mentions(*state, "bytes needed");
    /* one byte short: refused, nothing written past the capacity */
    memset(buf, '#', sizeof buf);
    assert_int_equal(llmm_chat_format(*state, "chatml", m, 1, 1, buf, len - 1, &need), LLMM_ERR_BUFFER_TOO_SMALL);
    assert_int_equal(need, len);
    for (size_t i = len - 1; i < sizeof buf; i++) assert_int_equal(buf[i], '#');
    /* exactly the length: all bytes, no terminator */
    memset(buf, '#', sizeof buf);
    assert_int_equal(llmm_chat_format(*state, "chatml", m, 1, 1, buf, len, &need), LLMM_OK);
    assert_int_equal(need, len);
    assert_memory_equal(buf, want, len);
    assert_int_equal(buf[len], '#');
    /* room for the terminator: a C string */
    assert_int_equal(llmm_chat_format(*state, "chatml", m, 1, 1, buf, len + 1, &need), LLMM_OK);
    assert_string_equal(buf, want);
}

static void test_invalid_arguments(void **state) {
    llmm_model *model = *state;
    static const llmm_chat_message ok[] = {{"user", "Hi"}};
    size_t need;
    char buf[64];
    assert_int_equal(llmm_chat_format(NULL, "chatml", ok, 1, 1, buf, sizeof buf, &need), LLMM_ERR_INVALID_ARG);
    assert_int_equal(llmm_chat_format(model, "chatml", ok, 1, 1, buf, sizeof buf, NULL), LLMM_ERR_INVALID_ARG);
    assert_int_equal(llmm_chat_format(model, "chatml", ok, 1, 1, NULL, 8, &need), LLMM_ERR_INVALID_ARG);
    assert_int_equal(llmm_chat_format(model, "chatml", NULL, 1, 1, buf, sizeof buf, &need), LLMM_ERR_INVALID_ARG);
    expect_error_mentions(model, "messages is NULL");
    static const llmm_chat_message no_role[] = {{"user", "a"}, {NULL, "b"}};
    assert_int_equal(llmm_chat_format(model, "chatml", no_role, 2, 1, buf, sizeof buf, &need), LLMM_ERR_INVALID_ARG);
    expect_error_mentions(model, "message 1 has a NULL role");
    static const llmm_chat_message no_content[] = {{"user", NULL}};
    assert_int_equal(llmm_chat_format(model, "chatml", no_content, 1, 1, buf, sizeof buf, &need), LLMM_ERR_INVALID_ARG);
    expect_error_mentions(model, "NULL content");
    static const char *const bad_roles[] = {"tool", "User", "", "assistant "};
    for (size_t i = 0; i < 4; i++) {
        llmm_chat_message bad[] = {{"system", "s"}, {bad_roles[i], "x"}};
        assert_int_equal(llmm_chat_format(model, "chatml", bad, 2, 1, buf, sizeof buf, &need), LLMM_ERR_INVALID_ARG);
        expect_error_mentions(model, "message 1 has role");
    }
    /* arguments are checked before the template is looked for */
    assert_int_equal(llmm_chat_format(model, NULL, no_role, 2, 1, buf, sizeof buf, &need), LLMM_ERR_INVALID_ARG);
    assert_int_equal(llmm_chat_template_detect(NULL, &(const char *){NULL}), LLMM_ERR_INVALID_ARG);
    assert_int_equal(llmm_chat_template_detect(model, NULL), LLMM_ERR_INVALID_ARG);
    assert_int_equal(llmm_chat_template_names(NULL), LLMM_ERR_INVALID_ARG);
}

static void test_unknown_template_name(void **state) {
    static const llmm_chat_message ok[] = {{"user", "Hi"}};
    size_t need = 5;
    static const char *const names[] = {"ChatML", "chatml ", "llama-3", "", "mistral"};
    for (size_t i = 0; i < 5; i++) {
        assert_int_equal(llmm_chat_format(*state, names[i], ok, 1, 1, NULL, 0, &need), LLMM_ERR_UNSUPPORTED);
        expect_error_mentions(*state, "no built-in chat template");
        expect_error_mentions(*state, "llama2-sys-bos");
    }
}

/* The list is the table: every listed name formats, and nothing else is listed. */
static void test_names_list(void **state) {
    const char *csv = NULL;
    assert_int_equal(llmm_chat_template_names(&csv), LLMM_OK);
    char joined[1024] = "";
    for (size_t i = 0; i < llmm__chat_format_count(); i++) {
        const char *name = llmm__chat_format_name((int)i);
        if (i) strcat(joined, ",");
        strcat(joined, name);
        assert_int_equal(llmm__chat_format_find(name), (int)i);
        size_t need;
        llmm_status st = llmm_chat_format(*state, name, conversation, N_CONVERSATION, 1, NULL, 0, &need);
        assert_int_equal(st, LLMM_ERR_BUFFER_TOO_SMALL);
    }
    assert_string_equal(csv, joined);
    assert_null(llmm__chat_format_name(-1));
    assert_null(llmm__chat_format_name((int)llmm__chat_format_count()));
    assert_int_equal(llmm__chat_format_find(NULL), -1);
}

/* ---------------------------------------------------------------- with a real vocabulary */

/* The text carries no BOS: tokenizing with ADD_SPECIAL adds exactly one; PARSE_SPECIAL turns
 * the "<s>" that llama2-sys-bos writes between turns into BOS as well, and "</s>" into EOS. */
static void test_tokenized_with_special_tokens(void **state) {
    (void)state;
    llmm_model *m = load_shared("models/llama-2-tiny-random.gguf");
    assert_non_null(m);
    llmm_token bos, eos;
    assert_int_equal(llmm_model_special_token(m, LLMM_SPECIAL_BOS, &bos), LLMM_OK);
    assert_int_equal(llmm_model_special_token(m, LLMM_SPECIAL_EOS, &eos), LLMM_OK);
    char *text = format_or_die(m, "llama2-sys-bos", conversation, N_CONVERSATION, 1);
    assert_int_not_equal(strncmp(text, "<s>", 3), 0); /* no BOS text in front */
    llmm_token ids[512];
    const uint32_t flags = LLMM_TOKENIZE_ADD_SPECIAL | LLMM_TOKENIZE_PARSE_SPECIAL;
    size_t n = tokenize_flags(m, text, strlen(text), flags, ids, 512);
    size_t n_bos = 0, n_eos = 0;
    for (size_t i = 0; i < n; i++) n_bos += ids[i] == bos, n_eos += ids[i] == eos;
    assert_int_equal(ids[0], bos);
    assert_int_equal(n_bos, 3); /* the added one and the two between turns */
    assert_int_equal(n_eos, 2); /* the end of each reply */
    /* without PARSE_SPECIAL the markers stay text */
    n = tokenize(m, text, ids, 512);
    n_bos = 0;
    for (size_t i = 0; i < n; i++) n_bos += ids[i] == bos;
    assert_int_equal(n_bos, 1);
    free(text);
    llmm_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reference_conversation_every_format),
        cmocka_unit_test(test_every_format_has_a_reference_case),
        cmocka_unit_test(test_without_generation_prompt),
        cmocka_unit_test(test_multi_turn_without_system),
        cmocka_unit_test(test_gemma_system_folding),
        cmocka_unit_test(test_trim_is_ascii_whitespace_only),
        cmocka_unit_test(test_empty_conversation),
        cmocka_unit_test(test_detect_from_template_texts),
        cmocka_unit_test(test_detect_from_model_file),
        cmocka_unit_test(test_detect_failures_name_the_choices),
        cmocka_unit_test(test_shared_models_have_no_template),
        cmocka_unit_test(test_detect_real_templates),
        cmocka_unit_test(test_shared_vocab_templates),
        cmocka_unit_test(test_buffer_too_small_and_termination),
        cmocka_unit_test(test_invalid_arguments),
        cmocka_unit_test(test_unknown_template_name),
        cmocka_unit_test(test_names_list),
        cmocka_unit_test(test_tokenized_with_special_tokens),
    };
    return cmocka_run_group_tests_name("chat", tests, group_setup, group_teardown);
}
