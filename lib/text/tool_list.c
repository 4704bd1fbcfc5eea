/* Tool definitions read from the JSON apps already write for OpenAI-style chat APIs: an array
 * of {"type": "function", "function": {"name", "description", "parameters"}} (or of the inner
 * objects alone), each checked as llmm_chat_format_request checks tools. */
#include <stdio.h>
#include <string.h>

#include "base/json_value.h"
#include "text/chat_request.h"

struct llmm_tool_list {
    llmm_tool *tools;
    size_t n;
    char **strings; /* every string the tools point to, 3 per tool */
};

LLMM_API void llmm_tool_list_free(llmm_tool_list *list) {
    if (!list) return;
    for (size_t i = 0; list->strings && i < 3 * list->n; i++) llmm__mem_free(NULL, list->strings[i]);
    llmm__mem_free(NULL, list->strings);
    llmm__mem_free(NULL, list->tools);
    llmm__mem_free(NULL, list);
}

static llmm_status fail(char *err, size_t err_size, llmm_status st, const char *msg) {
    if (err && err_size) snprintf(err, err_size, "%s", msg);
    return st;
}

/* A copy of member key of obj: a string's decoded bytes, or (raw) any value's text. NULL, and
 * *ok kept, when absent; *ok = 0 on a wrong type or no memory. */
static char *member_copy(const json_doc *doc, size_t obj, const char *key, int raw, int *ok) {
    size_t m = llmm__json_member(doc, obj, key);
    if (m == JSON_NONE) return NULL;
    const json_node *n = &doc->nodes[m];
    char *copy = NULL;
    if (raw && n->kind == JSON_OBJECT) copy = llmm__mem_strndup(NULL, doc->src + n->src, n->src_len);
    else if (!raw && n->kind == JSON_STRING) copy = llmm__mem_strndup(NULL, json_str(doc, m), n->str_len);
    if (!copy) *ok = 0;
    return copy;
}

static llmm_status read_tools(const json_doc *doc, llmm_tool_list *list, char *err, size_t err_size) {
    size_t i = 0;
    for (size_t e = doc->nodes[0].first; e != JSON_NONE; e = doc->nodes[e].next, i++) {
        size_t fn = e;
        if (doc->nodes[e].kind == JSON_OBJECT && llmm__json_member(doc, e, "function") != JSON_NONE)
            fn = llmm__json_member(doc, e, "function");
        if (doc->nodes[fn].kind != JSON_OBJECT)
            return fail(err, err_size, LLMM_ERR_INVALID_ARG, "a tool is not an object");
        int ok = 1;
        char **s = &list->strings[3 * i];
        s[0] = member_copy(doc, fn, "name", 0, &ok);
        s[1] = member_copy(doc, fn, "description", 0, &ok);
        s[2] = member_copy(doc, fn, "parameters", 1, &ok);
        list->n = i + 1;
        if (!ok) return fail(err, err_size, LLMM_ERR_INVALID_ARG, "a tool's name or description is not a string, "
                                                                   "its parameters not an object (or no memory)");
        list->tools[i] = (llmm_tool){s[0], s[1], s[2]};
        llmm_diag d = {{0}};
        llmm_status st = llmm__chat_tool_check(&list->tools[i], i, &d);
        if (st) return fail(err, err_size, st, d.msg);
    }
    return LLMM_OK;
}

LLMM_API llmm_status llmm_tool_list_from_json(const char *json, size_t len, llmm_tool_list **out, char *err,
                                              size_t err_size) {
    if (err && err_size) err[0] = '\0';
    if (!out || !json) return fail(err, err_size, LLMM_ERR_INVALID_ARG, "llmm_tool_list_from_json: NULL argument");
    *out = NULL;
    json_doc doc;
    char why[160];
    llmm_status st = llmm__json_parse(&doc, json, len, why, sizeof why);
    if (st) return fail(err, err_size, st, why);
    size_t n = doc.nodes[0].n_children;
    if (doc.nodes[0].kind != JSON_ARRAY || n > LLMM_TOOLS_MAX) {
        llmm__json_doc_free(&doc);
        return fail(err, err_size, LLMM_ERR_INVALID_ARG, "the tools are not a JSON array of at most 128 tools");
    }
    llmm_tool_list *list = llmm__mem_calloc(NULL, 1, sizeof *list);
    if (list) list->tools = llmm__mem_calloc(NULL, n + 1, sizeof *list->tools);
    if (list) list->strings = llmm__mem_calloc(NULL, 3 * n + 1, sizeof *list->strings);
    st = list && list->tools && list->strings ? read_tools(&doc, list, err, err_size)
                                              : fail(err, err_size, LLMM_ERR_NO_MEMORY, "out of memory");
    llmm__json_doc_free(&doc);
    if (st) {
        llmm_tool_list_free(list);
        return st;
    }
    *out = list;
    return LLMM_OK;
}

LLMM_API llmm_status llmm_tool_list_get(const llmm_tool_list *list, const llmm_tool **tools, size_t *n) {
    if (!list || !tools || !n) return LLMM_ERR_INVALID_ARG;
    *tools = list->tools;
    *n = list->n;
    return LLMM_OK;
}
