/* GBNF for one tool call in a family's syntax (see tool_gbnf.h). Each tool's schema is
 * converted on its own (compact JSON) and its rules renamed with a per-tool prefix, so the
 * tools' grammars share one text without their rule names meeting. The call's frame is written
 * as the family's template writes calls (the spacing the model was trained on); a family whose
 * calls are Python expressions (LFM2) gets its arguments as keyword arguments whose values are
 * JSON, which its call parser reads as the Python literals they resemble; Qwen3.5 its parameter
 * blocks (a string raw, other values JSON) and Gemma 4 its own value dialect, each as the
 * converter writes them (json_schema.h). */
#include "schema/tool_gbnf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "schema/gbnf_text.h"
#include "schema/json_schema.h"
#include "text/chat_request.h"

static int name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

/* Copy t[i..] up to and including the unescaped closing byte `close`; returns the index after. */
static size_t copy_quoted(gbnf_text *out, const char *t, size_t i, char close) {
    size_t start = i++;
    while (t[i] && t[i] != close) i += t[i] == '\\' && t[i + 1] ? 2 : 1;
    if (t[i]) i++;
    llmm__gbnf_text_bytes(out, t + start, i - start);
    return i;
}

/* gbnf with every rule name (definitions and references) prefixed: literals, classes and
 * repetition counts are copied as they are. */
static void append_renamed(gbnf_text *out, const char *gbnf, const char *prefix) {
    for (size_t i = 0; gbnf[i];) {
        char c = gbnf[i];
        if (c == '"') i = copy_quoted(out, gbnf, i, '"');
        else if (c == '[') i = copy_quoted(out, gbnf, i, ']');
        else if (c == '{') i = copy_quoted(out, gbnf, i, '}');
        else if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
            size_t start = i;
            while (name_char(gbnf[i])) i++;
            llmm__gbnf_text_str(out, prefix);
            llmm__gbnf_text_bytes(out, gbnf + start, i - start);
        } else {
            llmm__gbnf_text_bytes(out, &c, 1);
            i++;
        }
    }
}

/* The frame of one call to tool k, whose arguments are rule tK-root. */
static void append_call(gbnf_text *out, tool_call_syntax syntax, const char *name, size_t k) {
    if (syntax == TOOL_SYNTAX_PYTHON_CALL || syntax == TOOL_SYNTAX_GEMMA4_CALL) { /* name(...), name{...} */
        llmm__gbnf_text_literal(out, name, strlen(name));
        llmm__gbnf_text_fmt(out, syntax == TOOL_SYNTAX_PYTHON_CALL ? " \"(\" t%zu-root \")\"" : " t%zu-root", k);
        return;
    }
    if (syntax == TOOL_SYNTAX_XML_CALL) { /* <function=name>\n parameters </function> */
        llmm__gbnf_text_str(out, "\"<function=\" ");
        llmm__gbnf_text_literal(out, name, strlen(name));
        llmm__gbnf_text_fmt(out, " \">\\n\" t%zu-root \"</function>\"", k);
        return;
    }
    char head[160];
    snprintf(head, sizeof head, "{\"name\": \"%s\", \"%s\": ", name,
             syntax == TOOL_SYNTAX_BARE_JSON ? "parameters" : "arguments");
    llmm__gbnf_text_literal(out, head, strlen(head));
    llmm__gbnf_text_fmt(out, " t%zu-root ", k);
    if (syntax == TOOL_SYNTAX_LIST_JSON) /* Mistral Nemo's parser requires 9-character ids */
        llmm__gbnf_text_str(out, "\", \\\"id\\\": \\\"\" [a-zA-Z0-9]{9} \"\\\"}\"");
    else llmm__gbnf_text_str(out, "\"}\"");
}

static const char *const frame_open[] = {
    [TOOL_SYNTAX_TAGGED_JSON] = "\"<tool_call>\\n\"",
    [TOOL_SYNTAX_BARE_JSON] = "",
    [TOOL_SYNTAX_LIST_JSON] = "\"[TOOL_CALLS][\"",
    [TOOL_SYNTAX_PYTHON_CALL] = "\"<|tool_call_start|>[\"",
    [TOOL_SYNTAX_XML_CALL] = "\"<tool_call>\\n\"",
    [TOOL_SYNTAX_GEMMA4_CALL] = "\"<|tool_call>call:\"",
};
static const char *const frame_close[] = {
    [TOOL_SYNTAX_TAGGED_JSON] = "\"\\n</tool_call>\"",
    [TOOL_SYNTAX_BARE_JSON] = "",
    [TOOL_SYNTAX_LIST_JSON] = "\"]\"",
    [TOOL_SYNTAX_PYTHON_CALL] = "\"]<|tool_call_end|>\"",
    [TOOL_SYNTAX_XML_CALL] = "\"\\n</tool_call>\"",
    [TOOL_SYNTAX_GEMMA4_CALL] = "\"<tool_call|>\"",
};

/* The converter's syntax for each family whose arguments are not a JSON object (-1: JSON). */
static const int argument_syntax[] = {
    [TOOL_SYNTAX_NONE] = -1,
    [TOOL_SYNTAX_TAGGED_JSON] = -1,
    [TOOL_SYNTAX_BARE_JSON] = -1,
    [TOOL_SYNTAX_LIST_JSON] = -1,
    [TOOL_SYNTAX_PYTHON_CALL] = SCHEMA_CALL_KWARGS,
    [TOOL_SYNTAX_XML_CALL] = SCHEMA_CALL_XML_PARAMS,
    [TOOL_SYNTAX_GEMMA4_CALL] = SCHEMA_CALL_GEMMA4,
};

llmm_status llmm__tool_call_gbnf(const tool_family_info *family, const llmm_tool *tools, size_t n_tools,
                                 char **gbnf_out, llmm_diag *d) {
    *gbnf_out = NULL;
    if (family->syntax == TOOL_SYNTAX_NONE)
        return llmm__diag_fail(d, LLMM_ERR_UNSUPPORTED, "the '%s' family's template has no call syntax", family->name);
    if (!tools || n_tools == 0 || n_tools > LLMM_TOOLS_MAX)
        return llmm__diag_fail(d, LLMM_ERR_INVALID_ARG, "tool grammar: 1 to %d tools, not %zu", LLMM_TOOLS_MAX,
                               n_tools);
    gbnf_text out = {0}, rules = {0};
    llmm_status st = LLMM_OK;
    llmm__gbnf_text_fmt(&out, "root ::= %s (", frame_open[family->syntax]);
    for (size_t k = 0; k < n_tools && !st; k++) {
        st = llmm__chat_tool_check(&tools[k], k, d);
        if (st) break;
        const char *schema = tools[k].parameters ? tools[k].parameters : "{\"type\": \"object\"}";
        char *gbnf = NULL, err[256] = "";
        int syntax = argument_syntax[family->syntax];
        st = syntax >= 0 ? llmm__json_schema_to_call_gbnf(schema, strlen(schema), (schema_call_syntax)syntax, &gbnf, err,
                                                          sizeof err)
                         : llmm__json_schema_to_gbnf_ws(schema, strlen(schema), 1, &gbnf, err, sizeof err);
        if (st) {
            llmm__diag_fail(d, st, "tool '%s': %s", tools[k].name, err);
            break;
        }
        char prefix[32];
        snprintf(prefix, sizeof prefix, "t%zu-", k);
        append_renamed(&rules, gbnf, prefix);
        free(gbnf);
        if (k) llmm__gbnf_text_str(&out, " | ");
        append_call(&out, family->syntax, tools[k].name, k);
    }
    llmm__gbnf_text_fmt(&out, ") %s\n", frame_close[family->syntax]);
    if (!st && (out.failed || rules.failed)) st = llmm__diag_fail(d, LLMM_ERR_NO_MEMORY, "out of memory");
    if (!st) llmm__gbnf_text_str(&out, rules.data);
    if (!st && out.failed) st = llmm__diag_fail(d, LLMM_ERR_NO_MEMORY, "out of memory");
    llmm__gbnf_text_free(&rules);
    if (st) {
        llmm__gbnf_text_free(&out);
        return st;
    }
    *gbnf_out = out.data; /* the caller frees it with free(), as the converter's text */
    return LLMM_OK;
}
