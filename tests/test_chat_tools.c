/* Tool calling: requests with tools, calls and results rendered per family against the
 * reference's renderings (../shared/chat/render), model outputs parsed against its parses
 * (../shared/chat/parse), in one piece and streamed byte by byte; family detection from the
 * real templates; hostile tool schemas refused with the reason. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/json_value.h"
#include "base/json_write.h"
#include "llmmini.h"
#include "support/fixtures.h"
#include "support/shared_data.h"
#include "text/chat.h"
#include "text/chat_request.h"
#include "text/chat_tools.h"

/* The families whose renderings llmmini claims, and those whose output it parses. */
static const char *const rendered_families[] = {"qwen2_5",  "qwen3",    "hermes3",      "granite4", "llama3_1",
                                                "llama3_2", "mistral_nemo", "lfm2_5", "qwen3_5", "phi3_5",
                                                "gemma2",   "smollm3",  "gemma4"};
static const char *const parsed_families[] = {"qwen2_5",  "qwen3",        "hermes3", "granite4", "llama3_1",
                                              "llama3_2", "mistral_nemo", "lfm2_5",  "smollm3", "qwen3_5", "gemma4"};
static const char *const cases[] = {"plain", "no_system", "tools", "tool_result", "after_tool", "two_calls", "unicode"};



/* ---------------------------------------------------------------- reading the shared JSON */

typedef struct json_file {
    char *text;
    json_doc doc;
    char *copies[8192]; /* NUL-terminated strings handed out, freed with the file */
    size_t n_copies;
} json_file;

static void json_file_load(json_file *f, const char *rel) {
    char path[1024], err[128];
    memset(f, 0, sizeof *f);
    size_t len = 0;
    f->text = read_whole_file(shared_path(path, sizeof path, rel), &len);
    assert_non_null(f->text);
    assert_int_equal(llmm__json_parse(&f->doc, f->text, len, err, sizeof err), LLMM_OK);
}

static void json_file_free(json_file *f) {
    for (size_t i = 0; i < f->n_copies; i++) free(f->copies[i]);
    llmm__json_doc_free(&f->doc);
    free(f->text);
}

static char *keep(json_file *f, const char *s, size_t n) {
    assert_true(f->n_copies < ARRAY_LEN(f->copies));
    char *c = malloc(n + 1);
    assert_non_null(c);
    memcpy(c, s, n);
    c[n] = '\0';
    f->copies[f->n_copies++] = c;
    return c;
}

static size_t member(const json_file *f, size_t obj, const char *key) { return llmm__json_member(&f->doc, obj, key); }

/* The string member key of obj (NULL when absent or null). */
static const char *str_member(json_file *f, size_t obj, const char *key) {
    size_t m = member(f, obj, key);
    if (m == JSON_NONE || f->doc.nodes[m].kind != JSON_STRING) return NULL;
    return keep(f, json_str(&f->doc, m), f->doc.nodes[m].str_len);
}

/* The value's source text (a schema, arguments). */
static const char *src_member(json_file *f, size_t obj, const char *key) {
    size_t m = member(f, obj, key);
    assert_true(m != JSON_NONE);
    return keep(f, f->doc.src + f->doc.nodes[m].src, f->doc.nodes[m].src_len);
}

static size_t child(const json_file *f, size_t node, size_t i) {
    size_t c = f->doc.nodes[node].first;
    while (i-- > 0) c = f->doc.nodes[c].next;
    return c;
}

/* ---------------------------------------------------------------- a case as a request */

typedef struct built_request {
    llmm_tool tools[8];
    llmm_chat_turn turns[16];
    llmm_tool_call calls[16][4];
    llmm_chat_request request;
} built_request;

static void build_request(json_file *f, const char *case_name, built_request *b) {
    memset(b, 0, sizeof *b);
    llmm_chat_request_default(&b->request, sizeof b->request);
    size_t all = member(f, 0, "cases"), c = JSON_NONE;
    for (size_t i = 0; i < f->doc.nodes[all].n_children; i++) {
        size_t k = child(f, all, i);
        if (strcmp(str_member(f, k, "name"), case_name) == 0) c = k;
    }
    assert_true(c != JSON_NONE);
    if (f->doc.nodes[member(f, c, "use_tools")].kind == JSON_TRUE) {
        size_t tools = member(f, 0, "tools");
        for (size_t i = 0; i < f->doc.nodes[tools].n_children; i++) {
            size_t fn = member(f, child(f, tools, i), "function");
            b->tools[i] = (llmm_tool){str_member(f, fn, "name"), str_member(f, fn, "description"),
                                      src_member(f, fn, "parameters")};
        }
        b->request.tools = b->tools;
        b->request.n_tools = f->doc.nodes[tools].n_children;
    }
    size_t msgs = member(f, c, "messages");
    for (size_t i = 0; i < f->doc.nodes[msgs].n_children; i++) {
        size_t m = child(f, msgs, i);
        llmm_chat_turn *t = &b->turns[i];
        t->role = str_member(f, m, "role");
        t->content = str_member(f, m, "content");
        t->tool_call_id = str_member(f, m, "tool_call_id");
        size_t calls = member(f, m, "tool_calls");
        for (size_t k = 0; calls != JSON_NONE && k < f->doc.nodes[calls].n_children; k++) {
            size_t call = child(f, calls, k), fn = member(f, call, "function");
            b->calls[i][k] = (llmm_tool_call){str_member(f, call, "id"), str_member(f, fn, "name"),
                                              str_member(f, fn, "arguments")};
            t->tool_calls = b->calls[i];
            t->n_tool_calls = k + 1;
        }
    }
    b->request.messages = b->turns;
    b->request.n_messages = f->doc.nodes[msgs].n_children;
}

static char *render(const char *family, const llmm_chat_request *r, llmm_status *st) {
    size_t need = 0;
    *st = llmm_chat_format_request(NULL, family, r, NULL, 0, &need);
    if (*st != LLMM_ERR_BUFFER_TOO_SMALL && *st != LLMM_OK) return NULL;
    char *text = malloc(need + 1);
    assert_non_null(text);
    *st = llmm_chat_format_request(NULL, family, r, text, need + 1, &need);
    assert_int_equal(strlen(text), need);
    return text;
}

/* ---------------------------------------------------------------- rendering */

static void test_render_every_claimed_case(void **state) {
    (void)state;
    json_file f;
    json_file_load(&f, "chat/conversations.json");
    for (size_t fam = 0; fam < ARRAY_LEN(rendered_families); fam++) {
        for (size_t c = 0; c < ARRAY_LEN(cases); c++) {
            char rel[256], path[1024];
            snprintf(rel, sizeof rel, "chat/render/%s.%s.txt", rendered_families[fam], cases[c]);
            size_t len = 0;
            char *expected = read_whole_file(shared_path(path, sizeof path, rel), &len);
            built_request b;
            build_request(&f, cases[c], &b);
            llmm_status st;
            char *got = render(rendered_families[fam], &b.request, &st);
            if (!expected) { /* the reference's template refuses this case (.error): so does llmmini */
                snprintf(rel, sizeof rel, "chat/render/%s.%s.error", rendered_families[fam], cases[c]);
                char *error = read_whole_file(shared_path(path, sizeof path, rel), &len);
                assert_non_null(error);
                assert_int_equal(st, LLMM_ERR_INVALID_ARG);
                free(error);
                continue;
            }
            assert_int_equal(st, LLMM_OK);
            if (strcmp(got, expected) != 0) print_message("%s differs:\n%s\n---\n%s\n", rel, got, expected);
            assert_string_equal(got, expected);
            free(got);
            free(expected);
        }
    }
    json_file_free(&f);
}

/* Qwen3 without thinking closes an empty think block in the generation prompt. */
static void test_qwen3_thinking_off(void **state) {
    (void)state;
    llmm_chat_turn user = {.role = "user", .content = "hi"};
    llmm_chat_request r;
    llmm_chat_request_default(&r, sizeof r);
    r.messages = &user;
    r.n_messages = 1;
    r.enable_thinking = 0;
    llmm_status st;
    char *text = render("qwen3", &r, &st);
    assert_int_equal(st, LLMM_OK);
    assert_string_equal(text, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
    free(text);
}

/* What the templates do outside the reference's cases: their own refusals and switches. */
static void expect_render(const char *family, const llmm_chat_turn *msgs, size_t n, int gen, const char *want) {
    llmm_chat_request r;
    llmm_chat_request_default(&r, sizeof r);
    r.messages = msgs;
    r.n_messages = n;
    r.add_generation_prompt = gen;
    llmm_status st;
    char *text = render(family, &r, &st);
    if (!want) {
        assert_int_equal(st, LLMM_ERR_INVALID_ARG);
        return;
    }
    assert_int_equal(st, LLMM_OK);
    assert_string_equal(text, want);
    free(text);
}

static void test_template_rules_beyond_the_cases(void **state) {
    (void)state;
    llmm_chat_turn sys = {.role = "system", .content = "  Be brief. /no_think "};
    llmm_chat_turn user = {.role = "user", .content = " hi\n"};
    llmm_chat_turn responses = {.role = "user", .content = "<tool_response>\nx\n</tool_response>"};
    llmm_chat_turn two[] = {user, sys};
    /* Qwen3.5 refuses a late system message and a chat with no real query; trims contents */
    expect_render("qwen3_5", two, 2, 1, NULL);
    expect_render("qwen3_5", &responses, 1, 1, NULL);
    expect_render("qwen3_5", &user, 1, 1, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n");
    /* SmolLM3: /no_think in the system text switches reasoning off and is removed */
    llmm_chat_turn smol[] = {sys, user};
    expect_render("smollm3", smol, 2, 1,
                  "<|im_start|>system\n## Metadata\n\nKnowledge Cutoff Date: June 2025\nReasoning Mode: /no_think\n\n"
                  "## Custom Instructions\n\n  Be brief.\n\n<|im_end|>\n<|im_start|>user\n hi\n<|im_end|>\n"
                  "<|im_start|>assistant\n<think>\n\n</think>\n");
    /* Gemma 2: the system text folds into the user turn, trimmed as one; a system text with no
     * user after it is a user turn of its own; two user turns in a row are refused */
    expect_render("gemma2", smol, 2, 0, "<bos><start_of_turn>user\nBe brief. /no_think \n hi<end_of_turn>\n");
    expect_render("gemma2", &sys, 1, 1, "<bos><start_of_turn>user\nBe brief. /no_think<end_of_turn>\n<start_of_turn>model\n");
    llmm_chat_turn users[] = {user, user};
    expect_render("gemma2", users, 2, 1, NULL);
    /* Phi-3.5 without a generation prompt ends with its eos text; an empty system turn is skipped */
    llmm_chat_turn empty_sys = {.role = "system", .content = ""};
    llmm_chat_turn phi[] = {empty_sys, user};
    expect_render("phi3_5", phi, 2, 0, "<|user|>\n hi\n<|end|>\n<|endoftext|>");
    /* Gemma 4: thinking off adds no system turn and closes an empty thought channel; a call
     * without its result waits on <|tool_response>; a reasoning channel in the model's content
     * is stripped */
    llmm_chat_request r;
    llmm_chat_request_default(&r, sizeof r);
    llmm_tool_call call = {"id1", "f", "{\"b\": {\"y\": null, \"X\": [1.5, \"s\"]}, \"a\": true}"};
    llmm_chat_turn g4[] = {user, {.role = "assistant", .content = "<|channel>thought\nx<channel|> ok ",
                                  .tool_calls = &call, .n_tool_calls = 1, .reasoning_content = "why"}};
    r.messages = g4;
    r.n_messages = 2;
    r.enable_thinking = 0;
    llmm_status st;
    char *text = render("gemma4", &r, &st);
    assert_int_equal(st, LLMM_OK);
    assert_string_equal(text, "<bos><|turn>user\nhi<turn|>\n<|turn>model\n<|channel>thought\nwhy\n<channel|>"
                              "<|tool_call>call:f{a:true,b:{X:[1.5,<|\"|>s<|\"|>],y:None}}<tool_call|>ok<|tool_response>");
    free(text);
    r.n_messages = 1;
    text = render("gemma4", &r, &st);
    assert_string_equal(text, "<bos><|turn>user\nhi<turn|>\n<|turn>model\n<|channel>thought\n<channel|>");
    free(text);
}

/* The reference's template heuristics (llmm_chat_format, no tools) against its --no-jinja
 * renderings (*.legacy.txt): each family's real template is detected as a built-in format that
 * writes the same bytes, or refused where the reference refuses it (*.legacy.error, Gemma 4).
 * Granite 4 is the known gap: the reference's granite rule has no built-in format here. */
static void test_template_heuristics_match_legacy_renders(void **state) {
    (void)state;
    static const char *const legacy_cases[] = {"plain", "no_system", "unicode"};
    json_file conv, fams;
    json_file_load(&conv, "chat/conversations.json");
    json_file_load(&fams, "chat/families.json");
    size_t list = member(&fams, 0, "families"), matched = 0;
    for (size_t i = 0; i < fams.doc.nodes[list].n_children; i++) {
        const char *family = str_member(&fams, child(&fams, list, i), "family");
        char rel[256], path[1024];
        snprintf(rel, sizeof rel, "chat/templates/%s", str_member(&fams, child(&fams, list, i), "template"));
        char *template_text = read_whole_file(shared_path(path, sizeof path, rel), NULL);
        assert_non_null(template_text);
        int index = llmm__chat_detect(template_text, NULL);
        free(template_text);
        for (size_t c = 0; c < ARRAY_LEN(legacy_cases); c++) {
            snprintf(rel, sizeof rel, "chat/render/%s.%s.legacy.txt", family, legacy_cases[c]);
            char *expected = read_whole_file(shared_path(path, sizeof path, rel), NULL);
            if (!expected || strcmp(family, "granite4") == 0) {
                if (!expected) assert_int_equal(index, -1);
                free(expected);
                continue;
            }
            assert_true(index >= 0);
            built_request b;
            build_request(&conv, legacy_cases[c], &b);
            llmm_chat_message msgs[16];
            for (size_t m = 0; m < b.request.n_messages; m++)
                msgs[m] = (llmm_chat_message){b.turns[m].role, llmm__chat_text(b.turns[m].content)};
            char got[8192];
            size_t need = 0;
            llmm_diag d = {""};
            assert_int_equal(llmm__chat_render(index, msgs, b.request.n_messages, 1, got, sizeof got, &need, &d), LLMM_OK);
            if (strcmp(got, expected) != 0)
                print_message("%s as %s differs:\n%s\n---\n%s\n", rel, llmm__chat_format_name(index), got, expected);
            assert_string_equal(got, expected);
            matched++;
            free(expected);
        }
    }
    assert_int_equal(matched, 11 * 3); /* 13 families, less Gemma 4 (refused) and Granite 4 */
    json_file_free(&conv);
    json_file_free(&fams);
}

/* ---------------------------------------------------------------- detection */

static void test_detect_real_templates(void **state) {
    (void)state;
    static const struct {
        const char *file, *family; /* NULL: no tool family */
    } rows[] = {
        {"Qwen-Qwen2.5-7B-Instruct.jinja", "qwen2_5"},
        {"Qwen-Qwen3-0.6B.jinja", "qwen3"},
        {"Qwen3.5-4B.jinja", "qwen3_5"},
        {"NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja", "hermes3"},
        {"ibm-granite-granite-4.0.jinja", "granite4"},
        {"HuggingFaceTB-SmolLM3-3B.jinja", "smollm3"},
        {"meta-llama-Llama-3.1-8B-Instruct.jinja", "llama3_1"},
        {"meta-llama-Llama-3.2-3B-Instruct.jinja", "llama3_2"},
        {"mistralai-Mistral-Nemo-Instruct-2407.jinja", "mistral_nemo"},
        {"google-gemma-2-2b-it.jinja", "gemma2"},
        {"microsoft-Phi-3.5-mini-instruct.jinja", "phi3_5"},
        {"LFM2.5-Instruct.jinja", "lfm2_5"},
        {"google-gemma-4-31B-it.jinja", "gemma4"},
    };
    for (size_t i = 0; i < ARRAY_LEN(rows); i++) {
        char rel[256], path[1024];
        snprintf(rel, sizeof rel, "chat/templates/%s", rows[i].file);
        char *text = read_whole_file(shared_path(path, sizeof path, rel), NULL);
        assert_non_null(text);
        const tool_family_info *f = llmm__tool_family_detect(text);
        if (!rows[i].family) {
            if (f) print_message("%s detected as %s\n", rows[i].file, f->name);
            assert_null(f);
        } else {
            assert_non_null(f);
            assert_string_equal(f->name, rows[i].family);
        }
        free(text);
    }
    /* Gemma 3's template (system text folded with "\n\n", no tools) is no gemma2: without a
     * reference rendering of it, no tool family is claimed */
    assert_null(llmm__tool_family_detect("{%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}"
                                         "{{ '<start_of_turn>' + role + '\n' }}"));
    const char *csv = NULL;
    assert_int_equal(llmm_chat_tool_families(&csv), LLMM_OK);
    for (size_t i = 0; i < ARRAY_LEN(parsed_families); i++) assert_non_null(strstr(csv, parsed_families[i]));
}

/* ---------------------------------------------------------------- hostile requests */

static llmm_status render_with_schema(const char *schema) {
    llmm_tool tool = {"probe", "a probe", schema};
    llmm_chat_turn user = {.role = "user", .content = "hi"};
    llmm_chat_request r;
    llmm_chat_request_default(&r, sizeof r);
    r.messages = &user;
    r.n_messages = 1;
    r.tools = &tool;
    r.n_tools = 1;
    size_t need = 0;
    return llmm_chat_format_request(NULL, "qwen2_5", &r, NULL, 0, &need);
}

static void test_hostile_schemas_refused(void **state) {
    (void)state;
    assert_int_equal(render_with_schema("{\"type\": \"object\""), LLMM_ERR_INVALID_ARG);        /* malformed */
    assert_int_equal(render_with_schema("[1, 2]"), LLMM_ERR_INVALID_ARG);                     /* not an object */
    char deep[512] = "";
    for (int i = 0; i < 40; i++) strcat(deep, "{\"a\":");
    strcat(deep, "1");
    for (int i = 0; i < 40; i++) strcat(deep, "}");
    assert_int_equal(render_with_schema(deep), LLMM_ERR_INVALID_ARG);                         /* deep */
    size_t big = LLMM_TOOL_SCHEMA_MAX_BYTES + 16;
    char *huge = malloc(big + 1);
    assert_non_null(huge);
    memset(huge, ' ', big);
    memcpy(huge, "{\"type\": \"object\"}", 18);
    huge[big] = '\0';
    assert_int_equal(render_with_schema(huge), LLMM_ERR_INVALID_ARG);                         /* huge */
    free(huge);
    assert_int_equal(render_with_schema("{\"type\": \"object\"}"), LLMM_ERR_BUFFER_TOO_SMALL); /* fine */
    assert_int_equal(render_with_schema(NULL), LLMM_ERR_BUFFER_TOO_SMALL);

    llmm_tool bad_name = {"no spaces", NULL, NULL};
    llmm_chat_request r;
    llmm_chat_request_default(&r, sizeof r);
    r.tools = &bad_name;
    r.n_tools = 1;
    size_t need;
    assert_int_equal(llmm_chat_format_request(NULL, "qwen2_5", &r, NULL, 0, &need), LLMM_ERR_INVALID_ARG);
    llmm_chat_turn odd = {.role = "robot", .content = "x"};
    r.n_tools = 0;
    r.messages = &odd;
    r.n_messages = 1;
    assert_int_equal(llmm_chat_format_request(NULL, "qwen2_5", &r, NULL, 0, &need), LLMM_ERR_INVALID_ARG);
    assert_int_equal(llmm_chat_format_request(NULL, "no_such_family", &r, NULL, 0, &need), LLMM_ERR_UNSUPPORTED);
    assert_int_equal(llmm_chat_format_request(NULL, "smollm3", &r, NULL, 0, &need), LLMM_ERR_INVALID_ARG);
    assert_int_equal(llmm_chat_format_request(NULL, NULL, &r, NULL, 0, &need), LLMM_ERR_INVALID_ARG);
    assert_int_equal(llmm_chat_format_request(NULL, "qwen2_5", NULL, NULL, 0, &need), LLMM_ERR_INVALID_ARG);
    r.size = 4;
    assert_int_equal(llmm_chat_format_request(NULL, "qwen2_5", &r, NULL, 0, &need), LLMM_ERR_INVALID_ARG);
}

/* ---------------------------------------------------------------- parsing */

/* Arguments compare as JSON values (spacing aside, members in order) when both parse, else
 * byte for byte: a call cut off mid-arguments is compared as the text written so far. */
typedef struct text_buf {
    char bytes[4096];
    size_t len;
} text_buf;

static void to_buf(void *ctx, const char *s, size_t n) {
    text_buf *b = ctx;
    assert_true(b->len + n < sizeof b->bytes);
    memcpy(b->bytes + b->len, s, n);
    b->len += n;
    b->bytes[b->len] = '\0';
}

static void compact(const char *json, text_buf *out) {
    json_doc doc;
    char err[64];
    out->len = 0;
    out->bytes[0] = '\0';
    if (llmm__json_parse(&doc, json, strlen(json), err, sizeof err) != LLMM_OK) {
        to_buf(out, json, strlen(json));
        return;
    }
    llmm__json_write(&doc, 0, &llmm__json_style_compact, to_buf, out);
    llmm__json_doc_free(&doc);
}

static void expect_args(const char *got, const char *want) {
    text_buf a, b;
    compact(got, &a);
    compact(want, &b);
    assert_string_equal(a.bytes, b.bytes);
}

/* The parse of the whole text against one of the file's expectations ("final"/"streaming"). */
static void check_result(json_file *f, const char *which, const llmm_chat_parse_result *r, const char *label) {
    size_t e = member(f, 0, which);
    assert_true(e != JSON_NONE);
    if (f->doc.nodes[member(f, e, "ok")].kind != JSON_TRUE) { /* the reference refuses the output */
        assert_int_equal(r->malformed, 1);
        return;
    }
    if (strcmp(r->content, str_member(f, e, "content")) != 0)
        print_message("%s %s content: got [%s] want [%s]\n", label, which, r->content, str_member(f, e, "content"));
    assert_string_equal(r->content, str_member(f, e, "content"));
    assert_string_equal(r->reasoning, str_member(f, e, "reasoning_content"));
    size_t calls = member(f, e, "tool_calls");
    assert_int_equal(r->n_calls, f->doc.nodes[calls].n_children);
    for (size_t i = 0; i < r->n_calls; i++) {
        size_t c = child(f, calls, i);
        assert_string_equal(r->calls[i].name, str_member(f, c, "name"));
        expect_args(r->calls[i].arguments, str_member(f, c, "arguments"));
        const char *id = str_member(f, c, "id");
        if (id) assert_string_equal(r->calls[i].id, id);
    }
}

/* Returns 0 when the family has no file n. */
static int check_parse_file(const char *family, int n) {
    char rel[256], path[1024];
    snprintf(rel, sizeof rel, "chat/parse/%s.%d.json", family, n);
    FILE *probe = fopen(shared_path(path, sizeof path, rel), "rb");
    if (!probe) return 0;
    fclose(probe);
    json_file f;
    json_file_load(&f, rel);
    const char *raw = str_member(&f, 0, "raw");
    const char *gen = str_member(&f, 0, "generation_prompt");
    int thinking = strstr(gen, "<think>") != NULL;
    size_t len = strlen(raw);

    llmm_chat_parser *whole = NULL, *streamed = NULL;
    assert_int_equal(llmm_chat_parser_create(family, thinking, &whole), LLMM_OK);
    assert_int_equal(llmm_chat_parser_create(family, thinking, &streamed), LLMM_OK);
    llmm_chat_parse_result r = {.size = sizeof r};
    assert_int_equal(llmm_chat_parser_feed(whole, raw, len), LLMM_OK);
    assert_int_equal(llmm_chat_parser_result(whole, 1, &r), LLMM_OK);
    check_result(&f, "final", &r, rel);

    /* byte by byte: what is shown only grows, calls only grow, and the end agrees */
    size_t shown = 0, n_calls = 0;
    for (size_t i = 0; i < len; i++) {
        assert_int_equal(llmm_chat_parser_feed(streamed, raw + i, 1), LLMM_OK);
        assert_int_equal(llmm_chat_parser_result(streamed, 0, &r), LLMM_OK);
        assert_true(strlen(r.content) >= shown);
        shown = strlen(r.content);
        if (r.n_calls < n_calls && !r.malformed) print_message("%s: calls %zu after %zu at byte %zu\n", rel, r.n_calls, n_calls, i);
        assert_true(r.n_calls >= n_calls || r.malformed);
        n_calls = r.n_calls;
    }
    check_result(&f, "streaming", &r, rel);
    assert_int_equal(llmm_chat_parser_result(streamed, 1, &r), LLMM_OK);
    check_result(&f, "final", &r, rel);
    /* knowing the tools the prompt offered (conversations.json) changes nothing here */
    json_file conv;
    json_file_load(&conv, "chat/conversations.json");
    built_request b;
    build_request(&conv, "tools", &b);
    assert_int_equal(llmm_chat_parser_set_tools(whole, b.request.tools, b.request.n_tools), LLMM_OK);
    assert_int_equal(llmm_chat_parser_result(whole, 1, &r), LLMM_OK);
    check_result(&f, "final", &r, rel);
    json_file_free(&conv);
    llmm_chat_parser_free(whole);
    llmm_chat_parser_free(streamed);
    json_file_free(&f);
    return 1;
}

static void test_parse_every_file(void **state) {
    (void)state;
    int checked = 0;
    for (size_t fam = 0; fam < ARRAY_LEN(parsed_families); fam++)
        for (int n = 1; n <= 5; n++) checked += check_parse_file(parsed_families[fam], n);
    assert_int_equal(checked, 10 * 5 + 3); /* every file of these families (smollm3 has 3) */
}

/* Partial and malformed calls are reported as such. */
static void test_parse_partial_and_malformed(void **state) {
    (void)state;
    llmm_chat_parser *p = NULL;
    llmm_chat_parse_result r = {.size = sizeof r};
    assert_int_equal(llmm_chat_parser_create("qwen2_5", 0, &p), LLMM_OK);
    const char *text = "Sure.\n<tool_c";
    assert_int_equal(llmm_chat_parser_feed(p, text, strlen(text)), LLMM_OK);
    assert_int_equal(llmm_chat_parser_result(p, 0, &r), LLMM_OK);
    assert_string_equal(r.content, "Sure.\n"); /* the marker's start is held back */
    text = "all>\n{\"name\": \"set_timer\", \"arguments\": {\"minutes\": 1";
    assert_int_equal(llmm_chat_parser_feed(p, text, strlen(text)), LLMM_OK);
    assert_int_equal(llmm_chat_parser_result(p, 0, &r), LLMM_OK);
    assert_int_equal(r.n_calls, 1);
    assert_string_equal(r.calls[0].name, "set_timer");
    assert_string_equal(r.calls[0].arguments, "{\"minutes\": 1");
    assert_int_equal(r.calls[0].complete, 0);
    text = "0}}\n</tool_call>";
    assert_int_equal(llmm_chat_parser_feed(p, text, strlen(text)), LLMM_OK);
    assert_int_equal(llmm_chat_parser_result(p, 1, &r), LLMM_OK);
    assert_int_equal(r.calls[0].complete, 1);
    assert_string_equal(r.calls[0].arguments, "{\"minutes\": 10}");
    assert_int_equal(r.malformed, 0);
    llmm_chat_parser_free(p);

    assert_int_equal(llmm_chat_parser_create("qwen3", 0, &p), LLMM_OK);
    text = "<tool_call>\nnot json at all</tool_call>";
    assert_int_equal(llmm_chat_parser_feed(p, text, strlen(text)), LLMM_OK);
    assert_int_equal(llmm_chat_parser_result(p, 1, &r), LLMM_OK);
    assert_int_equal(r.n_calls, 0);
    assert_int_equal(r.malformed, 1);
    assert_string_equal(r.content, text);
    llmm_chat_parser_free(p);

    /* LFM2's Python-style calls: literals become JSON; a call cut off keeps what was converted */
    static const struct {
        const char *raw, *name, *arguments;
        int complete, malformed;
    } python_calls[] = {
        {"<|tool_call_start|>[f(a='it''s \\'q\\' \"x\"', b=[1, -2.5e3, True, None], c={'k': False})]<|tool_call_end|>",
         "f", "{\"a\":\"it\"", 0, 1}, /* 'it''s: two strings side by side are no value */
        {"<|tool_call_start|>[f(a='\\'q\\' \"x\"', b=[1, -2.5e3, True, None], c={'k': False}, d=\"\")]<|tool_call_end|>",
         "f", "{\"a\":\"'q' \\\"x\\\"\",\"b\":[1,-2.5e3,true,null],\"c\":{\"k\":false},\"d\":\"\"}", 1, 0},
        {"<|tool_call_start|>[set_timer()]<|tool_call_end|>", "set_timer", "{}", 1, 0},
        {"<|tool_call_start|>[set_timer(minutes=1", "set_timer", "{\"minutes\":", 0, 0},
        {"<|tool_call_start|>[set_timer(minutes=Tru)]<|tool_call_end|>", NULL, NULL, 0, 1},
        {"<|tool_call_start|>[f(x=1)] trailing", "f", "{\"x\":1}", 0, 1},
    };
    for (size_t i = 0; i < ARRAY_LEN(python_calls); i++) {
        assert_int_equal(llmm_chat_parser_create("lfm2_5", 0, &p), LLMM_OK);
        text = python_calls[i].raw;
        assert_int_equal(llmm_chat_parser_feed(p, text, strlen(text)), LLMM_OK);
        assert_int_equal(llmm_chat_parser_result(p, 1, &r), LLMM_OK);
        if (python_calls[i].malformed) assert_int_equal(r.malformed, 1);
        if (!python_calls[i].name || python_calls[i].malformed) {
            assert_true(r.malformed);
        } else {
            assert_int_equal(r.n_calls, 1);
            assert_string_equal(r.calls[0].name, python_calls[i].name);
            assert_string_equal(r.calls[0].arguments, python_calls[i].arguments);
            assert_int_equal(r.calls[0].complete, python_calls[i].complete);
            assert_int_equal(r.malformed, 0);
        }
        llmm_chat_parser_free(p);
    }

    assert_int_equal(llmm_chat_parser_create("nope", 0, &p), LLMM_ERR_UNSUPPORTED);
    assert_int_equal(llmm_chat_parser_create(NULL, 0, &p), LLMM_ERR_INVALID_ARG);
    assert_int_equal(llmm_chat_parser_create("qwen3", 0, NULL), LLMM_ERR_INVALID_ARG);
    assert_int_equal(llmm_chat_parser_feed(NULL, "x", 1), LLMM_ERR_INVALID_ARG);
    llmm_chat_parser_free(NULL);
}

/* One output with at most one call, parsed whole and final, against what it should give. */
typedef struct one_call_case {
    const char *family, *raw, *reasoning, *arguments; /* arguments of the call named "f" */
    size_t n_calls;
    int complete, malformed;
} one_call_case;

static void check_one_call(const one_call_case *c) {
    llmm_chat_parser *p = NULL;
    llmm_chat_parse_result r = {.size = sizeof r};
    assert_int_equal(llmm_chat_parser_create(c->family, 0, &p), LLMM_OK);
    assert_int_equal(llmm_chat_parser_feed(p, c->raw, strlen(c->raw)), LLMM_OK);
    assert_int_equal(llmm_chat_parser_result(p, 1, &r), LLMM_OK);
    assert_int_equal(r.malformed, c->malformed);
    assert_int_equal(r.n_calls, c->n_calls);
    assert_string_equal(r.reasoning, c->reasoning);
    if (r.n_calls) {
        assert_string_equal(r.calls[0].name, "f");
        assert_string_equal(r.calls[0].arguments, c->arguments);
        assert_int_equal(r.calls[0].complete, c->complete);
    }
    llmm_chat_parser_free(p);
}

/* The calls that are not JSON. Qwen3.5's XML-style blocks: values that are JSON stay JSON,
 * others become strings (escaped); a value cut off is an open string; text that is no
 * <function=...> block is malformed. Gemma 4's value dialect: <|"|> strings (JSON-escaped on the
 * way out), bare or quoted keys, nested objects and arrays, numbers and keywords, a reasoning
 * channel before the call. */
static void test_parse_calls_that_are_not_json(void **state) {
    (void)state;
    static const one_call_case outputs[] = {
        {"qwen3_5", "<tool_call>\n<function=f>\n<parameter=n>\n-2.5e3\n</parameter>\n<parameter=o>\n{\"a\": [1, true]}\n"
         "</parameter>\n<parameter=s>\nsay \"hi\"\ntwice\n</parameter>\n<parameter=b>\nfalse\n</parameter>\n"
         "<parameter=w>\nnope\n</parameter>\n</function>\n</tool_call>", "",
         "{\"n\":-2.5e3,\"o\":{\"a\":[1,true]},\"s\":\"say \\\"hi\\\"\\ntwice\",\"b\":false,\"w\":\"nope\"}", 1, 1, 0},
        {"qwen3_5", "<tool_call>\n<function=f>\n</function>\n</tool_call>", "", "{}", 1, 1, 0},
        {"qwen3_5", "<tool_call>\n<function=f>\n<parameter=n>\n12", "", "{\"n\":12", 1, 0, 0},
        {"qwen3_5", "<tool_call>\n<function=f>\n<parameter=n>\n</tool_call>", "", "{\"n\":\"</tool_call>", 1, 0, 0},
        {"qwen3_5", "<tool_call>\n<function=f>\n</function>\n</tool_call> trailing", "", "{}", 1, 1, 1},
        {"qwen3_5", "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>", "", NULL, 0, 0, 1},
        {"qwen3_5", "<tool_call>\n<function=f g>\n</function>\n</tool_call>", "", NULL, 0, 0, 1},
        {"qwen3_5", "<tool_call>\n<function=f>\nstray\n</function>\n</tool_call>", "", NULL, 0, 0, 1},

        {"gemma4", "<|channel>thought\nhm<channel|><|tool_call>call:f{a:<|\"|>say \"hi\"\n<|\"|>,b:[1,-2.5,true,None],"
         "c:{<|\"|>k<|\"|>:false,n:{}}}<tool_call|>",
         "hm", "{\"a\":\"say \\\"hi\\\"\\n\",\"b\":[1,-2.5,true,null],\"c\":{\"k\":false,\"n\":{}}}", 1, 1, 0},
        {"gemma4", "<|tool_call>call:f{}<tool_call|>", "", "{}", 1, 1, 0},
        {"gemma4", "<|tool_call>call:f{n:12", "", "{\"n\":12", 1, 0, 0},
        {"gemma4", "<|tool_call>call:f{a:<|\"|>x<|\"|>}<tool_call|> after", "", "{\"a\":\"x\"}", 1, 1, 1},
        {"gemma4", "<|tool_call>call:f(a=1)<tool_call|>", "", NULL, 0, 0, 1},
        {"gemma4", "<|tool_call>call:f{a:?}<tool_call|>", "", NULL, 0, 0, 1},
        {"gemma4", "<|tool_call>{\"name\": \"f\"}<tool_call|>", "", NULL, 0, 0, 1},
    };
    for (size_t i = 0; i < ARRAY_LEN(outputs); i++) check_one_call(&outputs[i]);
    /* Gemma 4's model opens its thought channel itself, thinking or not */
    llmm_chat_parser *p = NULL;
    llmm_chat_parse_result r = {.size = sizeof r};
    assert_int_equal(llmm_chat_parser_create("gemma4", 1, &p), LLMM_OK);
    assert_int_equal(llmm_chat_parser_feed(p, "<|channel>thought\nhm<channel|>ok", 32), LLMM_OK);
    assert_int_equal(llmm_chat_parser_result(p, 1, &r), LLMM_OK);
    assert_string_equal(r.reasoning, "hm");
    assert_string_equal(r.content, "ok");
    llmm_chat_parser_free(p);
}

/* Qwen3.5's values carry no types: with the tools known, a parameter whose schema says string
 * stays a string whatever it reads as, while the others are read as JSON as without tools. */
static void test_qwen3_5_values_typed_by_schema(void **state) {
    (void)state;
    static const llmm_tool tools[] = {
        {"f", NULL,
         "{\"type\": \"object\", \"properties\": {\"s\": {\"type\": \"string\"}, \"e\": {\"enum\": [\"1\", \"two\"]}, "
         "\"c\": {\"const\": \"null\"}, \"n\": {\"type\": \"integer\"}, \"u\": {}, \"m\": {\"enum\": [\"1\", 1]}}}"},
        {"g", NULL, "{\"type\": \"object\", \"properties\": {\"n\": {\"type\": \"string\"}}}"},
    };
    static const struct {
        const char *text, *typed, *untyped;
    } outputs[] = {
        {"<tool_call>\n<function=f>\n<parameter=s>\n10\n</parameter>\n<parameter=e>\n1\n</parameter>\n<parameter=c>\nnull\n"
         "</parameter>\n<parameter=n>\n10\n</parameter>\n<parameter=u>\ntrue\n</parameter>\n<parameter=m>\n1\n</parameter>\n"
         "</function>\n</tool_call>",
         "{\"s\":\"10\",\"e\":\"1\",\"c\":\"null\",\"n\":10,\"u\":true,\"m\":1}",
         "{\"s\":10,\"e\":1,\"c\":null,\"n\":10,\"u\":true,\"m\":1}"},
        /* the parameter is typed by the function it is in: f has no string n, g has */
        {"<tool_call>\n<function=g>\n<parameter=n>\n[1]\n</parameter>\n</function>\n</tool_call>", "{\"n\":\"[1]\"}",
         "{\"n\":[1]}"},
        /* cut off: a string stays an open string */
        {"<tool_call>\n<function=f>\n<parameter=s>\n12", "{\"s\":\"12", "{\"s\":12"},
        {"<tool_call>\n<function=h>\n<parameter=s>\n12\n</parameter>\n</function>\n</tool_call>", "{\"s\":12}", "{\"s\":12}"},
    };
    for (size_t i = 0; i < ARRAY_LEN(outputs); i++)
        for (int typed = 0; typed < 2; typed++) {
            llmm_chat_parser *p = NULL;
            llmm_chat_parse_result r = {.size = sizeof r};
            assert_int_equal(llmm_chat_parser_create("qwen3_5", 0, &p), LLMM_OK);
            if (typed) assert_int_equal(llmm_chat_parser_set_tools(p, tools, ARRAY_LEN(tools)), LLMM_OK);
            assert_int_equal(llmm_chat_parser_feed(p, outputs[i].text, strlen(outputs[i].text)), LLMM_OK);
            assert_int_equal(llmm_chat_parser_result(p, 1, &r), LLMM_OK);
            assert_int_equal(r.n_calls, 1);
            if (strcmp(r.calls[0].arguments, typed ? outputs[i].typed : outputs[i].untyped))
                fail_msg("case %zu %s: %s", i, typed ? "typed" : "untyped", r.calls[0].arguments);
            if (typed) { /* forgetting the tools brings back the guess */
                assert_int_equal(llmm_chat_parser_set_tools(p, NULL, 0), LLMM_OK);
                assert_int_equal(llmm_chat_parser_result(p, 1, &r), LLMM_OK);
                assert_string_equal(r.calls[0].arguments, outputs[i].untyped);
            }
            llmm_chat_parser_free(p);
        }
    llmm_chat_parser *p = NULL;
    assert_int_equal(llmm_chat_parser_create("qwen3_5", 0, &p), LLMM_OK);
    llmm_tool bad = {"bad name", NULL, NULL};
    assert_int_equal(llmm_chat_parser_set_tools(p, &bad, 1), LLMM_ERR_INVALID_ARG);
    assert_non_null(strstr(llmm_chat_parser_last_error(p), "name"));
    llmm_tool not_json = {"f", NULL, "{"};
    assert_int_equal(llmm_chat_parser_set_tools(p, &not_json, 1), LLMM_ERR_INVALID_ARG);
    assert_int_equal(llmm_chat_parser_set_tools(p, NULL, 1), LLMM_ERR_INVALID_ARG);
    assert_int_equal(llmm_chat_parser_set_tools(NULL, tools, 1), LLMM_ERR_INVALID_ARG);
    llmm_chat_parser_free(p);
}

/* Every prefix of hostile text parses without a crash (valgrind and ASan see the reads). */
static void test_parse_every_prefix_of_odd_text(void **state) {
    (void)state;
    static const char *const texts[] = {
        "<think><tool_call>{\"name\":\"a\",\"arguments\":{\"x\":\"\\\"}\"}}</tool_call></think>",
        "<tool_call>{\"name\": \"a\", \"arguments\": [}}}]]\"</tool_call><tool_call>",
        "<tool_call>{\"arguments\": {}, \"name\": \"b\", \"id\": \"abc\"} trailing</tool_call>x<tool_call>",
        "<tool_call>{\"name\": 5}</tool_call>", "</think>\n\n<tool_call>\n\n\n", "<tool_call>{\"name\":\"\\",
    };
    for (size_t f = 0; f < ARRAY_LEN(parsed_families); f++) {
        for (size_t t = 0; t < ARRAY_LEN(texts); t++) {
            for (int thinking = 0; thinking < 2; thinking++) {
                llmm_chat_parser *p = NULL;
                assert_int_equal(llmm_chat_parser_create(parsed_families[f], thinking, &p), LLMM_OK);
                for (const char *c = texts[t]; *c; c++) {
                    llmm_chat_parse_result r = {.size = sizeof r};
                    assert_int_equal(llmm_chat_parser_feed(p, c, 1), LLMM_OK);
                    assert_int_equal(llmm_chat_parser_result(p, 0, &r), LLMM_OK);
                    assert_int_equal(llmm_chat_parser_result(p, 1, &r), LLMM_OK);
                }
                llmm_chat_parser_free(p);
            }
        }
    }
}


/* ---------------------------------------------------------------- constrained calls */

static const llmm_tool demo_tools[] = {
    {"get_weather", "Get the current weather for a location.",
     "{\"type\": \"object\", \"properties\": {\"location\": {\"type\": \"string\", \"maxLength\": 24}, \"unit\": "
     "{\"type\": \"string\", \"enum\": [\"celsius\", \"fahrenheit\"]}}, \"required\": [\"location\"]}"},
    {"set_timer", "Start a countdown timer.",
     "{\"type\": \"object\", \"properties\": {\"minutes\": {\"type\": \"integer\", \"minimum\": 1, \"maximum\": 120}, "
     "\"label\": {\"type\": \"string\", \"maxLength\": 16}}, \"required\": [\"minutes\"]}"},
};

static int str_is(const json_doc *doc, size_t node, const char *s) {
    return doc->nodes[node].str_len == strlen(s) && memcmp(json_str(doc, node), s, strlen(s)) == 0;
}

/* The two demo schemas checked by hand (independently of the converter that made the grammar):
 * required members present, types, the enum, the range, no other members. */
static int valid_arguments(const char *tool, const char *args, char *why, size_t why_size) {
    json_doc doc;
    char err[64];
    if (llmm__json_parse(&doc, args, strlen(args), err, sizeof err) != LLMM_OK) {
        snprintf(why, why_size, "not JSON: %.64s", err);
        return 0;
    }
    int ok = doc.nodes[0].kind == JSON_OBJECT;
    for (size_t m = ok ? doc.nodes[0].first : JSON_NONE; m != JSON_NONE && ok; m = doc.nodes[m].next) {
        const char *key = json_key(&doc, m);
        size_t key_len = doc.nodes[m].key_len;
        json_kind kind = doc.nodes[m].kind;
        if (!strcmp(tool, "get_weather") && key_len == 8 && !memcmp(key, "location", 8)) ok = kind == JSON_STRING;
        else if (!strcmp(tool, "get_weather") && key_len == 4 && !memcmp(key, "unit", 4))
            ok = kind == JSON_STRING && (str_is(&doc, m, "celsius") || str_is(&doc, m, "fahrenheit"));
        else if (!strcmp(tool, "set_timer") && key_len == 7 && !memcmp(key, "minutes", 7)) {
            long v = kind == JSON_NUMBER ? strtol(doc.src + doc.nodes[m].src, NULL, 10) : 0;
            ok = kind == JSON_NUMBER && !memchr(doc.src + doc.nodes[m].src, '.', doc.nodes[m].src_len) && v >= 1 &&
                 v <= 120;
        } else if (!strcmp(tool, "set_timer") && key_len == 5 && !memcmp(key, "label", 5)) ok = kind == JSON_STRING;
        else ok = 0;
    }
    const char *required = !strcmp(tool, "get_weather") ? "location" : "minutes";
    if (ok && llmm__json_member(&doc, 0, required) == JSON_NONE) ok = 0;
    if (!ok) snprintf(why, why_size, "does not validate");
    llmm__json_doc_free(&doc);
    return ok;
}

typedef struct text_out {
    char bytes[4096];
    size_t n;
} text_out;

static int collect(void *user, const char *bytes, size_t n, int complete_utf8) {
    (void)complete_utf8;
    text_out *o = user;
    if (o->n + n >= sizeof o->bytes) return 1;
    memcpy(o->bytes + o->n, bytes, n);
    o->n += n;
    o->bytes[o->n] = '\0';
    return 0;
}

/* A 256-token, one-thread context: the generation tests' results do not depend on threads. */
static llmm_context *one_thread_context(llmm_model *m) {
    llmm_context_params cp;
    llmm_context_params_default(&cp, sizeof cp);
    cp.n_ctx = 256;
    cp.n_threads = 1;
    return make_context(m, &cp);
}

/* Generation of up to max_tokens under grammar g (NULL: free), streamed into out. */
static llmm_generate_params generate_into(text_out *out, const llmm_sampler_params *sp, const llmm_grammar *g,
                                          int32_t max_tokens) {
    llmm_generate_params gp;
    llmm_generate_params_default(&gp, sizeof gp);
    gp.max_tokens = max_tokens;
    gp.sampling = sp;
    gp.on_bytes = collect;
    gp.user = out;
    gp.grammar = g;
    return gp;
}

/* Per-token costs over a set of calls: the decode step, the grammar's share of it, and the
 * streaming parser (timed apart: fed the reply byte by byte, the parse read after each byte). */
typedef struct call_costs {
    size_t tokens, free_tokens;
    double generate_ms, grammar_ms, parser_ms, free_generate_ms;
} call_costs;


/* One call sampled under g, fed to a parser by llmm_generate; it must be one complete call to
 * tool t whose arguments validate. Every tenth run then generates as many tokens again without
 * the grammar, for the step's cost free. */
static void sample_one_call(llmm_context *ctx, const char *family, size_t t, int run, const llmm_grammar *g,
                            call_costs *c) {
    llmm_sampler_params sp = plain_sampling(1.0f, (uint64_t)run * 131u + t);
    text_out out = {.n = 0};
    llmm_generate_params gp = generate_into(&out, &sp, g, 400);
    llmm_chat_parser *p = NULL;
    assert_int_equal(llmm_chat_parser_create(family, 0, &p), LLMM_OK);
    assert_int_equal(llmm_chat_parser_set_tools(p, demo_tools, ARRAY_LEN(demo_tools)), LLMM_OK);
    gp.tool_parser = p;
    llmm_generate_stats st = {.size = sizeof st};
    assert_int_equal(llmm_generate(ctx, "Once upon a time", &gp, &st), LLMM_OK);
    c->tokens += st.n_generated;
    c->generate_ms += st.generate_ms;
    c->grammar_ms += st.grammar_ms;
    llmm_chat_parse_result r = {.size = sizeof r};
    assert_int_equal(llmm_chat_parser_result(p, 1, &r), LLMM_OK);
    char why[128] = "";
    if (r.n_calls != 1 || !r.calls[0].complete || r.malformed || strcmp(r.calls[0].name, demo_tools[t].name) ||
        !valid_arguments(demo_tools[t].name, r.calls[0].arguments, why, sizeof why))
        fail_msg("%s run %d: '%s' is not one valid call (%zu calls) %s", family, run, out.bytes, r.n_calls, why);
    assert_int_equal(st.n_tool_calls, 1);
    llmm_chat_parser_free(p);
    assert_int_equal(llmm_chat_parser_create(family, 0, &p), LLMM_OK);
    assert_int_equal(llmm_chat_parser_set_tools(p, demo_tools, ARRAY_LEN(demo_tools)), LLMM_OK);
    double t0 = now_s(); /* a streaming reader: each byte fed, then the parse so far */
    for (size_t i = 0; i < out.n; i++) {
        assert_int_equal(llmm_chat_parser_feed(p, out.bytes + i, 1), LLMM_OK);
        assert_int_equal(llmm_chat_parser_result(p, 0, &r), LLMM_OK);
    }
    assert_int_equal(llmm_chat_parser_result(p, 1, &r), LLMM_OK);
    c->parser_ms += (now_s() - t0) * 1e3;
    llmm_chat_parser_free(p);
    if (run % 10) return;
    text_out free_out = {.n = 0};
    gp = generate_into(&free_out, &sp, NULL, (int32_t)st.n_generated);
    llmm_generate_stats fst = {.size = sizeof fst};
    assert_int_equal(llmm_generate(ctx, "Once upon a time", &gp, &fst), LLMM_OK);
    c->free_tokens += fst.n_generated;
    c->free_generate_ms += fst.generate_ms;
}

/* runs calls per tool sampled at temperature 1 under the "required" grammar: every one parses
 * as exactly one complete call to that tool, and its arguments validate. Neither stories260K
 * nor a random-weight model knows tools: only the constraint makes the calls right. */
static void sample_calls(llmm_model *m, const char *family, int runs, int32_t n_threads) {
    llmm_context_params cp;
    llmm_context_params_default(&cp, sizeof cp);
    cp.n_ctx = 512;
    cp.n_threads = n_threads;
    llmm_context *ctx = make_context(m, &cp);
    call_costs c = {0};
    for (size_t t = 0; t < ARRAY_LEN(demo_tools); t++) {
        llmm_grammar *g = NULL;
        char err[512];
        if (llmm_grammar_from_tools(m, family, &demo_tools[t], 1, &g, err, sizeof err) != LLMM_OK)
            fail_msg("%s: %s", family, err);
        for (int run = 0; run < runs; run++) sample_one_call(ctx, family, t, run, g, &c);
        llmm_grammar_free(g);
    }
    double per = (double)(c.tokens ? c.tokens : 1);
    print_message("%s: %d calls per tool valid, %.1f tokens per call; per token: step %.3f ms under the grammar "
                  "(grammar %.3f), %.3f free; parser %.2f us\n",
                  family, runs, (double)c.tokens / (double)(runs * (int)ARRAY_LEN(demo_tools)), c.generate_ms / per,
                  c.grammar_ms / per, c.free_generate_ms / (double)(c.free_tokens ? c.free_tokens : 1),
                  c.parser_ms * 1e3 / per);
    llmm_context_free(ctx);
}

static const char *const call_families[] = {"qwen2_5", "llama3_1", "mistral_nemo", "lfm2_5", "qwen3_5", "gemma4"};

static void test_constrained_calls_validate(void **state) {
    (void)state;
    llmm_model *m = load_model("models/stories260K.gguf", NULL);
    int runs = under_emulator() ? 20 : 100;
    for (size_t f = 0; f < ARRAY_LEN(call_families); f++) sample_calls(m, call_families[f], runs, 1);
    llmm_model_free(m);
}

static char synth_tool[1024];

/* The same on a random-weight model with the real Qwen2 vocabulary (151,936 byte-level BPE
 * tokens, many of which cross JSON's boundaries: `":"`, `"}`, `")]`): the Qwen2.5 layout
 * narrowed to one layer of width 32, so that the calls fit make test.
 * LLMM_TOOL_CALLS_MODEL=FILE runs them on that model instead (the full qwen2.5-0.5b shape:
 * docs/grammars.md) on two threads, LLMM_TOOL_CALLS_RUNS calls per tool, LLMM_TOOL_CALLS_FAMILY
 * one family only. */
static void test_constrained_calls_qwen2_vocab(void **state) {
    (void)state;
    const char *given = getenv("LLMM_TOOL_CALLS_MODEL");
    char path[128];
    snprintf(path, sizeof path, "/tmp/llmm-tools-qwen-%ld.gguf", (long)getpid());
    if (!given)
        synth_model(synth_tool, path, "--preset qwen2.5-0.5b --type q8_0 --dim 32 --layers 1 --heads 2 --kv-heads 1 --ff 64",
                    "vocab/ggml-vocab-qwen2.gguf");
    llmm_model *m = load_model(given ? given : path, NULL);
    if (!given) unlink(path);
    const char *runs_env = getenv("LLMM_TOOL_CALLS_RUNS"), *only = getenv("LLMM_TOOL_CALLS_FAMILY");
    for (size_t f = 0; f < ARRAY_LEN(call_families); f++) {
        /* 100 calls per tool for every family: each sampled token costs about 1.4 ms of CPU
         * here (the logits and the draw over 151,936 tokens), about 80 s for the six families
         * (docs/grammars.md, "Cost per token with tools"). qemu draws over 151,936 tokens
         * slowly, and compiles each grammar's token table slowly too: there a few calls of the
         * JSON frames only, qwen3_5 and gemma4 being left to stories260K */
        int full = !strcmp(call_families[f], "qwen2_5") || !strcmp(call_families[f], "lfm2_5");
        int frame = !strcmp(call_families[f], "llama3_1") || !strcmp(call_families[f], "mistral_nemo");
        int runs = 100;
        if (under_emulator()) runs = full ? 5 : frame ? 2 : 0;
        if (runs_env) runs = atoi(runs_env);
        if (runs > 0 && (!only || !strcmp(only, call_families[f]))) sample_calls(m, call_families[f], runs, given ? 2 : 1);
    }
    llmm_model_free(m);
}

static void test_tool_grammar_refusals(void **state) {
    (void)state;
    llmm_grammar *g = NULL;
    char err[256];
    llmm_tool bad = {"x", NULL, "{\"type\": \"object\", \"allOf\": []}"};
    assert_int_equal(llmm_grammar_from_tools(NULL, "qwen2_5", &bad, 1, &g, err, sizeof err), LLMM_ERR_INVALID_ARG);
    assert_non_null(strstr(err, "allOf"));
    llmm_tool deep = {"x", NULL, "{\"a\":{\"a\":{\"a\":{\"a\":{\"a\":{\"a\":{\"a\":{\"a\":{\"a\":{\"a\":{\"a\":{\"a\":"
                                 "{\"a\":{\"a\":{\"a\":{\"a\":{\"a\":1}}}}}}}}}}}}}}}}}"};
    assert_int_equal(llmm_grammar_from_tools(NULL, "qwen2_5", &deep, 1, &g, err, sizeof err), LLMM_ERR_INVALID_ARG);
    assert_non_null(strstr(err, "deeper"));
    /* a recursive schema is a recursive rule (bounded per step by the matcher), not a refusal;
     * one that recurses before any object opens is left recursion, refused */
    llmm_tool loop = {"x", NULL, "{\"$ref\": \"#\"}"};
    assert_int_equal(llmm_grammar_from_tools(NULL, "qwen2_5", &loop, 1, &g, err, sizeof err), LLMM_ERR_INVALID_ARG);
    assert_int_equal(llmm_grammar_from_tools(NULL, "smollm3", demo_tools, 1, &g, err, sizeof err), LLMM_ERR_UNSUPPORTED);
    assert_int_equal(llmm_grammar_from_tools(NULL, "qwen2_5", demo_tools, 0, &g, err, sizeof err), LLMM_ERR_INVALID_ARG);
    assert_int_equal(llmm_grammar_from_tools(NULL, NULL, demo_tools, 1, &g, err, sizeof err), LLMM_ERR_INVALID_ARG);
    assert_int_equal(llmm_grammar_from_tools(NULL, "qwen2_5", demo_tools, 2, &g, err, sizeof err), LLMM_OK);
    /* both tools in one grammar: each call is a sentence, with the template's spacing */
    llmm_grammar_state *s = NULL;
    assert_int_equal(llmm_grammar_state_create(g, &s), LLMM_OK);
    const char *call = "<tool_call>\n{\"name\": \"set_timer\", \"arguments\": {\"minutes\":10}}\n</tool_call>";
    assert_int_equal(llmm_grammar_state_accept_bytes(s, call, strlen(call)), LLMM_OK);
    int can_end = 0, must_end = 0;
    assert_int_equal(llmm_grammar_state_can_end(s, &can_end, &must_end), LLMM_OK);
    assert_true(can_end);
    llmm_grammar_state_free(s);
    llmm_grammar_free(g);
}

/* lfm2_5's calls are Python expressions: the arguments are keyword arguments with JSON values,
 * written as its template writes calls; schemas that cannot be keyword arguments are refused. */
static void test_lfm2_call_grammar(void **state) {
    (void)state;
    llmm_grammar *g = NULL;
    char err[256];
    assert_int_equal(llmm_grammar_from_tools(NULL, "lfm2_5", demo_tools, 2, &g, err, sizeof err), LLMM_OK);
    static const struct {
        const char *text;
        int sentence;
    } texts[] = {
        {"<|tool_call_start|>[set_timer(minutes=10, label=\"tea\")]<|tool_call_end|>", 1},
        {"<|tool_call_start|>[get_weather(location=\"Paris\", unit=\"celsius\")]<|tool_call_end|>", 1},
        {"<|tool_call_start|>[get_weather(unit=\"celsius\", location=\"Paris\")]<|tool_call_end|>", 0}, /* order */
        {"<|tool_call_start|>[set_timer(label=\"tea\")]<|tool_call_end|>", 0},      /* minutes is required */
        {"<|tool_call_start|>[set_timer(minutes=121)]<|tool_call_end|>", 0},          /* above the maximum */
        {"<|tool_call_start|>[set_timer(minutes=10,label=\"tea\")]<|tool_call_end|>", 0}, /* the template's ", " */
        {"<|tool_call_start|>[set_timer(minutes=10, other=1)]<|tool_call_end|>", 0},
        {"<|tool_call_start|>[get_weather(location='Paris')]<|tool_call_end|>", 0}, /* values are JSON */
    };
    for (size_t i = 0; i < ARRAY_LEN(texts); i++) {
        llmm_grammar_state *s = NULL;
        assert_int_equal(llmm_grammar_state_create(g, &s), LLMM_OK);
        int can_end = 0, must_end = 0;
        llmm_status st = llmm_grammar_state_accept_bytes(s, texts[i].text, strlen(texts[i].text));
        if (st == LLMM_OK) assert_int_equal(llmm_grammar_state_can_end(s, &can_end, &must_end), LLMM_OK);
        if ((st == LLMM_OK && can_end) != texts[i].sentence) fail_msg("case %zu: %s", i, texts[i].text);
        llmm_grammar_state_free(s);
    }
    llmm_grammar_free(g);
    /* no arguments declared: name() */
    llmm_tool bare = {"stop", NULL, "{\"type\": \"object\"}"};
    assert_int_equal(llmm_grammar_from_tools(NULL, "lfm2_5", &bare, 1, &g, err, sizeof err), LLMM_OK);
    llmm_grammar_state *s = NULL;
    assert_int_equal(llmm_grammar_state_create(g, &s), LLMM_OK);
    const char *call = "<|tool_call_start|>[stop()]<|tool_call_end|>";
    assert_int_equal(llmm_grammar_state_accept_bytes(s, call, strlen(call)), LLMM_OK);
    llmm_grammar_state_free(s);
    llmm_grammar_free(g);
    static const struct {
        const char *schema, *reason;
    } refused[] = {
        {"{\"type\": \"object\", \"properties\": {\"a-b\": {\"type\": \"string\"}}}", "keyword argument"},
        {"{\"type\": \"array\"}", "object schema"},
        {"{\"anyOf\": [{\"type\": \"object\"}, {\"type\": \"null\"}]}", "anyOf"},
        {"{\"type\": \"object\", \"properties\": {\"next\": {\"$ref\": \"#\"}}}", "themselves"},
    };
    for (size_t i = 0; i < ARRAY_LEN(refused); i++) {
        llmm_tool t = {"x", NULL, refused[i].schema};
        assert_int_equal(llmm_grammar_from_tools(NULL, "lfm2_5", &t, 1, &g, err, sizeof err), LLMM_ERR_INVALID_ARG);
        if (!strstr(err, refused[i].reason)) fail_msg("refusal %zu: '%s'", i, err);
    }
}

/* Whether text is a sentence of the grammar the family's call syntax gets for tools. */
static int call_sentence(const char *family, const llmm_tool *tools, size_t n_tools, const char *text) {
    llmm_grammar *g = NULL;
    char err[256];
    if (llmm_grammar_from_tools(NULL, family, tools, n_tools, &g, err, sizeof err) != LLMM_OK) fail_msg("%s: %s", family, err);
    llmm_grammar_state *s = NULL;
    assert_int_equal(llmm_grammar_state_create(g, &s), LLMM_OK);
    int can_end = 0, must_end = 0;
    llmm_status st = llmm_grammar_state_accept_bytes(s, text, strlen(text));
    if (st == LLMM_OK) assert_int_equal(llmm_grammar_state_can_end(s, &can_end, &must_end), LLMM_OK);
    llmm_grammar_state_free(s);
    llmm_grammar_free(g);
    return st == LLMM_OK && can_end;
}

/* qwen3_5 and gemma4 write arguments outside JSON: parameter blocks with raw string values, and
 * Gemma 4's dialect (bare keys, <|"|> strings). Their grammars take the calls their templates
 * write (the order of "properties" aside) and refuse what the schema or the syntax forbids;
 * schemas the syntax cannot express are refused with the reason. */
static void test_xml_and_gemma4_call_grammars(void **state) {
    (void)state;
    static const llmm_tool nested = {
        "plan", NULL,
        "{\"type\": \"object\", \"properties\": {\"steps\": {\"type\": \"array\", \"items\": {\"type\": \"object\", "
        "\"properties\": {\"what\": {\"type\": \"string\"}, \"at\": {\"type\": \"string\", \"format\": \"time\"}}, "
        "\"required\": [\"what\"]}, \"maxItems\": 2}, \"note\": {\"type\": \"string\", \"minLength\": 2}, \"ok\": "
        "{\"type\": \"boolean\"}, \"any\": {}}, \"required\": [\"steps\"]}"};
    static const struct {
        const char *family;
        const llmm_tool *tools;
        size_t n_tools;
        const char *text;
        int sentence;
    } texts[] = {
        {"qwen3_5", demo_tools, 2, "<tool_call>\n<function=set_timer>\n<parameter=minutes>\n10\n</parameter>\n"
                                   "<parameter=label>\ntea\ntime\n</parameter>\n</function>\n</tool_call>", 1},
        {"qwen3_5", demo_tools, 2, "<tool_call>\n<function=get_weather>\n<parameter=location>\nParis\n</parameter>\n"
                                   "<parameter=unit>\ncelsius\n</parameter>\n</function>\n</tool_call>", 1},
        {"qwen3_5", demo_tools, 2, "<tool_call>\n<function=get_weather>\n<parameter=location>\n\n</parameter>\n"
                                   "</function>\n</tool_call>", 1}, /* an empty string */
        {"qwen3_5", demo_tools, 2, "<tool_call>\n<function=get_weather>\n<parameter=location>\n\"Paris\"\n</parameter>\n"
                                   "<parameter=unit>\n\"celsius\"\n</parameter>\n</function>\n</tool_call>", 0}, /* raw */
        {"qwen3_5", demo_tools, 2, "<tool_call>\n<function=get_weather>\n<parameter=location>\na</b>\n</parameter>\n"
                                   "</function>\n</tool_call>", 0}, /* no '<' in raw text */
        {"qwen3_5", demo_tools, 2, "<tool_call>\n<function=set_timer>\n<parameter=minutes>\n0\n</parameter>\n"
                                   "</function>\n</tool_call>", 0}, /* below the minimum */
        {"qwen3_5", demo_tools, 2, "<tool_call>\n<function=set_timer>\n<parameter=label>\ntea\n</parameter>\n"
                                   "</function>\n</tool_call>", 0}, /* minutes is required */
        {"qwen3_5", &nested, 1, "<tool_call>\n<function=plan>\n<parameter=steps>\n[{\"what\":\"tea\",\"at\":\"10:00:00Z\"}]\n"
                                "</parameter>\n<parameter=note>\nhi\n</parameter>\n<parameter=ok>\ntrue\n</parameter>\n"
                                "<parameter=any>\n<x\n</parameter>\n</function>\n</tool_call>", 0}, /* '<' even untyped */
        {"qwen3_5", &nested, 1, "<tool_call>\n<function=plan>\n<parameter=steps>\n[{\"what\":\"tea\",\"at\":\"10:00:00Z\"}]\n"
                                "</parameter>\n<parameter=note>\nhi\n</parameter>\n<parameter=ok>\ntrue\n</parameter>\n"
                                "<parameter=any>\n{x\n</parameter>\n</function>\n</tool_call>", 1},
        {"qwen3_5", &nested, 1, "<tool_call>\n<function=plan>\n<parameter=steps>\n[]\n</parameter>\n<parameter=note>\nh\n"
                                "</parameter>\n</function>\n</tool_call>", 0}, /* minLength */
        {"gemma4", demo_tools, 2, "<|tool_call>call:set_timer{minutes:10,label:<|\"|>tea \"time\"<|\"|>}<tool_call|>", 1},
        {"gemma4", demo_tools, 2, "<|tool_call>call:get_weather{location:<|\"|>Paris<|\"|>,unit:<|\"|>celsius<|\"|>}<tool_call|>", 1},
        {"gemma4", demo_tools, 2, "<|tool_call>call:get_weather{location:\"Paris\"}<tool_call|>", 0}, /* JSON string */
        {"gemma4", demo_tools, 2, "<|tool_call>call:get_weather{\"location\":<|\"|>Paris<|\"|>}<tool_call|>", 0}, /* key */
        {"gemma4", demo_tools, 2, "<|tool_call>call:set_timer{minutes:121}<tool_call|>", 0},
        {"gemma4", &nested, 1, "<|tool_call>call:plan{steps:[{what:<|\"|>tea<|\"|>},{what:<|\"|><|\"|>,at:<|\"|>10:00:00Z<|\"|>}],"
                               "ok:false,any:{k:[1,None,<|\"|>v<|\"|>]}}<tool_call|>", 0}, /* None: null is written JSON's way */
        {"gemma4", &nested, 1, "<|tool_call>call:plan{steps:[{what:<|\"|>tea<|\"|>},{what:<|\"|><|\"|>,at:<|\"|>10:00:00Z<|\"|>}],"
                               "ok:false,any:{k:[1,null,<|\"|>v<|\"|>]}}<tool_call|>", 1},
        {"gemma4", &nested, 1, "<|tool_call>call:plan{steps:[{what:<|\"|>a<|\"|>},{what:<|\"|>b<|\"|>},{what:<|\"|>c<|\"|>}]}"
                               "<tool_call|>", 0}, /* maxItems */
    };
    for (size_t i = 0; i < ARRAY_LEN(texts); i++)
        if (call_sentence(texts[i].family, texts[i].tools, texts[i].n_tools, texts[i].text) != texts[i].sentence)
            fail_msg("case %zu (%s): %s", i, texts[i].family, texts[i].text);
    /* no arguments declared */
    llmm_tool bare = {"stop", NULL, "{\"type\": \"object\"}"};
    assert_true(call_sentence("qwen3_5", &bare, 1, "<tool_call>\n<function=stop>\n</function>\n</tool_call>"));
    assert_true(call_sentence("gemma4", &bare, 1, "<|tool_call>call:stop{}<tool_call|>"));
    static const struct {
        const char *family, *schema, *reason;
    } refused[] = {
        {"qwen3_5", "{\"type\": \"object\", \"properties\": {\"a b\": {\"type\": \"string\"}}}", "<parameter=NAME>"},
        {"qwen3_5", "{\"type\": \"object\", \"properties\": {\"a\": {\"type\": [\"string\", \"null\"]}}}", "one type"},
        {"qwen3_5", "{\"type\": \"object\", \"properties\": {\"a\": {\"anyOf\": [{\"type\": \"string\"}, {\"type\": \"integer\"}]}}}",
         "one type"},
        {"qwen3_5", "{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"string\", \"pattern\": \"^a+$\"}}}", "pattern"},
        {"qwen3_5", "{\"type\": \"object\", \"properties\": {\"a\": {\"enum\": [\"x</parameter>\"]}}}", "enum"},
        {"qwen3_5", "{\"type\": \"array\"}", "object schema"},
        {"qwen3_5", "{\"type\": \"object\", \"properties\": {\"next\": {\"$ref\": \"#\"}}}", "themselves"},
        {"gemma4", "{\"type\": \"object\", \"properties\": {\"a:b\": {\"type\": \"string\"}}}", "bare gemma4 key"},
        {"gemma4", "{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"string\", \"pattern\": \"^a+$\"}}}", "pattern"},
        {"gemma4", "{\"type\": \"object\", \"properties\": {\"a\": {\"const\": {\"b c\": 1}}}}", "const"},
        {"gemma4", "{\"anyOf\": [{\"type\": \"object\"}, {\"type\": \"null\"}]}", "anyOf"},
    };
    for (size_t i = 0; i < ARRAY_LEN(refused); i++) {
        llmm_tool t = {"x", NULL, refused[i].schema};
        llmm_grammar *g = NULL;
        char err[256];
        assert_int_equal(llmm_grammar_from_tools(NULL, refused[i].family, &t, 1, &g, err, sizeof err), LLMM_ERR_INVALID_ARG);
        if (!strstr(err, refused[i].reason)) fail_msg("refusal %zu: '%s'", i, err);
    }
    /* a recursive schema below the root is a recursive rule in Gemma 4's dialect too */
    llmm_tool tree = {"tree", NULL,
                      "{\"type\": \"object\", \"properties\": {\"kids\": {\"type\": \"array\", \"items\": {\"$ref\": \"#\"}}}}"};
    assert_true(call_sentence("gemma4", &tree, 1, "<|tool_call>call:tree{kids:[{},{kids:[{}]}]}<tool_call|>"));
}

/* llmm_generate feeds params->tool_parser what it streams and counts the calls: a required
 * call (the tools' grammar, greedy on stories260K), then free text with no call. */
static void test_generate_returns_calls(void **state) {
    (void)state;
    llmm_model *m = load_model("models/stories260K.gguf", NULL);
    llmm_context *ctx = one_thread_context(m);
    llmm_grammar *g = NULL;
    char err[256];
    assert_int_equal(llmm_grammar_from_tools(m, "qwen2_5", demo_tools, ARRAY_LEN(demo_tools), &g, err, sizeof err),
                     LLMM_OK);
    llmm_sampler_params sp;
    llmm_sampler_params_default(&sp, sizeof sp);
    sp.temperature = 0.0f;
    text_out streamed = {.n = 0};
    llmm_generate_params gp = generate_into(&streamed, &sp, g, 200);
    assert_int_equal(llmm_chat_parser_create("qwen2_5", 0, &gp.tool_parser), LLMM_OK);
    llmm_generate_stats st = {.size = sizeof st};
    assert_int_equal(llmm_generate(ctx, "Once upon a time", &gp, &st), LLMM_OK);
    assert_int_equal(st.stop_reason, LLMM_STOP_GRAMMAR);
    assert_int_equal(st.n_tool_calls, 1);
    assert_int_equal(st.tool_malformed, 0);
    llmm_chat_parse_result r = {.size = sizeof r};
    assert_int_equal(llmm_chat_parser_result(gp.tool_parser, 1, &r), LLMM_OK);
    assert_int_equal(r.n_calls, 1);
    assert_true(r.calls[0].complete);
    assert_true(strcmp(r.calls[0].name, "get_weather") == 0 || strcmp(r.calls[0].name, "set_timer") == 0);
    print_message("call: %s %s (from: %s)\n", r.calls[0].name, r.calls[0].arguments, streamed.bytes);
    llmm_chat_parser_free(gp.tool_parser);
    /* free text: the parser holds what was streamed, as content, and no call */
    streamed.n = 0;
    gp.grammar = NULL;
    gp.max_tokens = 24;
    assert_int_equal(llmm_chat_parser_create("qwen2_5", 0, &gp.tool_parser), LLMM_OK);
    assert_int_equal(llmm_generate(ctx, "Once upon a time", &gp, &st), LLMM_OK);
    assert_int_equal(st.n_tool_calls, 0);
    assert_int_equal(llmm_chat_parser_result(gp.tool_parser, 1, &r), LLMM_OK);
    assert_int_equal(r.n_calls, 0);
    assert_int_equal(strlen(r.content), streamed.n);
    assert_memory_equal(r.content, streamed.bytes, streamed.n);
    llmm_chat_parser_free(gp.tool_parser);
    /* without a parser nothing is counted */
    gp.tool_parser = NULL;
    st.n_tool_calls = 7;
    assert_int_equal(llmm_generate(ctx, "Once upon a time", &gp, &st), LLMM_OK);
    assert_int_equal(st.n_tool_calls, 0);
    llmm_grammar_free(g);
    llmm_context_free(ctx);
    llmm_model_free(m);
}

/* A lazy grammar: greedy output is free, exactly as without the grammar, until it contains the
 * trigger; from there the grammar writes the rest and its end stops generation. The trigger is
 * a token the free output chose, so greedy decoding reaches it with or without the grammar. */
static void test_lazy_grammar_starts_at_trigger(void **state) {
    (void)state;
    llmm_model *m = load_model("models/stories260K.gguf", NULL);
    llmm_context *ctx = one_thread_context(m);
    llmm_sampler_params sp;
    llmm_sampler_params_default(&sp, sizeof sp);
    sp.temperature = 0.0f;
    text_out free_text = {.n = 0};
    llmm_token ids[64];
    llmm_generate_params gp;
    llmm_generate_params_default(&gp, sizeof gp);
    gp.max_tokens = 64;
    gp.sampling = &sp;
    gp.on_bytes = collect;
    gp.user = &free_text;
    gp.out_tokens = ids;
    gp.out_capacity = 64;
    llmm_generate_stats st = {.size = sizeof st};
    assert_int_equal(llmm_generate(ctx, "Once upon a time", &gp, &st), LLMM_OK);
    /* the first token of 3+ letters whose text has not occurred before it */
    char trigger[64] = "";
    size_t start = 0, at = 0;
    for (size_t j = 0; j < st.n_generated && !trigger[0]; j++) {
        char piece[64];
        size_t n = 0;
        assert_int_equal(llmm_token_to_piece(m, ids[j], 0, piece, sizeof piece - 1, &n), LLMM_OK);
        piece[n] = '\0';
        int letters = n >= 3;
        for (size_t c = 0; c < n; c++) letters &= piece[c] == ' ' || (piece[c] >= 'a' && piece[c] <= 'z');
        char before[4096];
        memcpy(before, free_text.bytes, at + n);
        before[at + n] = '\0';
        if (letters && strstr(before, piece) == before + at) {
            snprintf(trigger, sizeof trigger, "%s", piece);
            start = at;
        }
        at += n;
    }
    assert_true(trigger[0] != '\0');
    char gbnf[256];
    snprintf(gbnf, sizeof gbnf, "root ::= \"%s\" \" and the end.\"", trigger);
    text_out lazy_text = {.n = 0};
    gp.user = &lazy_text;
    gp.grammar_text = gbnf;
    gp.grammar_trigger = trigger;
    assert_int_equal(llmm_generate(ctx, "Once upon a time", &gp, &st), LLMM_OK);
    assert_int_equal(st.stop_reason, LLMM_STOP_GRAMMAR);
    char want[4096];
    snprintf(want, sizeof want, "%.*s%s and the end.", (int)start, free_text.bytes, trigger);
    print_message("trigger [%s]: %s\n", trigger, lazy_text.bytes);
    assert_string_equal(lazy_text.bytes, want);
    /* a trigger without a grammar, or too long, is refused */
    gp.grammar_text = NULL;
    assert_int_equal(llmm_generate(ctx, "Once upon a time", &gp, &st), LLMM_ERR_INVALID_ARG);
    llmm_context_free(ctx);
    llmm_model_free(m);
}

int main(int argc, char **argv) {
    (void)argc;
    build_tool_path(argv[0], "llmmini-synth", synth_tool, sizeof synth_tool);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_render_every_claimed_case),
        cmocka_unit_test(test_template_rules_beyond_the_cases),
        cmocka_unit_test(test_template_heuristics_match_legacy_renders),
        cmocka_unit_test(test_qwen3_thinking_off),
        cmocka_unit_test(test_detect_real_templates),
        cmocka_unit_test(test_lfm2_call_grammar),
        cmocka_unit_test(test_xml_and_gemma4_call_grammars),
        cmocka_unit_test(test_qwen3_5_values_typed_by_schema),
        cmocka_unit_test(test_hostile_schemas_refused),
        cmocka_unit_test(test_parse_every_file),
        cmocka_unit_test(test_parse_partial_and_malformed),
        cmocka_unit_test(test_parse_every_prefix_of_odd_text),
        cmocka_unit_test(test_parse_calls_that_are_not_json),
        cmocka_unit_test(test_tool_grammar_refusals),
        cmocka_unit_test(test_constrained_calls_validate),
        cmocka_unit_test(test_constrained_calls_qwen2_vocab),
        cmocka_unit_test(test_lazy_grammar_starts_at_trigger),
        cmocka_unit_test(test_generate_returns_calls),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
