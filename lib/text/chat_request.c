/* A tool request checked and parsed once, and the pieces every family writes alike (see
 * chat_request.h). */
#include "text/chat_request.h"

#include <string.h>

void llmm__chat_request_free(parsed_request *p, const llmm_chat_request *r) {
    for (size_t i = 0; p->tools && i < p->n_tools; i++) llmm__json_doc_free(&p->tools[i]);
    for (size_t i = 0; p->tool_text && i < p->n_tools; i++) llmm__mem_free(NULL, p->tool_text[i]);
    llmm__mem_free(NULL, p->tools);
    llmm__mem_free(NULL, p->tool_text);
    for (size_t i = 0; p->args && i < p->n_messages; i++) {
        for (size_t k = 0; p->args[i] && k < r->messages[i].n_tool_calls; k++) llmm__json_doc_free(&p->args[i][k]);
        llmm__mem_free(NULL, p->args[i]);
    }
    llmm__mem_free(NULL, p->args);
    memset(p, 0, sizeof *p);
}

static int name_ok(const char *s) {
    size_t n = 0;
    for (; s[n]; n++) {
        char c = s[n];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-'))
            return 0;
        if (n >= 64) return 0;
    }
    return n > 0;
}

static int depth_of(const json_doc *doc, size_t at) {
    int deepest = 0;
    for (size_t c = doc->nodes[at].first; c != JSON_NONE; c = doc->nodes[c].next) {
        int d = depth_of(doc, c);
        if (d > deepest) deepest = d;
    }
    return deepest + 1;
}

static void sink_out(void *ctx, const char *bytes, size_t n) { llmm__chat_out_bytes(ctx, bytes, n); }

void llmm__chat_out_json_string(chat_out *o, const char *s) {
    llmm__json_write_string(s ? s : "", s ? strlen(s) : 0, sink_out, o);
}

/* {"type": "function", "function": {"name", "description", "parameters"}}: the object the
 * reference rebuilds from each tool, as JSON text (measured, then written). */
static void write_tool_object(chat_out *o, const llmm_tool *t) {
    llmm__chat_out_str(o, "{\"type\": \"function\", \"function\": {\"name\": ");
    llmm__chat_out_json_string(o, t->name);
    llmm__chat_out_str(o, ", \"description\": ");
    llmm__chat_out_json_string(o, t->description);
    llmm__chat_out_str(o, ", \"parameters\": ");
    llmm__chat_out_str(o, t->parameters ? t->parameters : "{}");
    llmm__chat_out_str(o, "}}");
}

static llmm_status build_tool_object(const llmm_tool *t, char **text, json_doc *doc, llmm_diag *d) {
    chat_out measure = {0};
    write_tool_object(&measure, t);
    *text = llmm__mem_alloc(NULL, measure.len + 1);
    if (!*text) return llmm__diag_fail(d, LLMM_ERR_NO_MEMORY, "out of memory");
    chat_out o = {.buf = *text, .cap = measure.len};
    write_tool_object(&o, t);
    char err[128];
    llmm_status st = llmm__json_parse(doc, *text, o.len, err, sizeof err);
    if (st == LLMM_ERR_NO_MEMORY) return llmm__diag_fail(d, st, "out of memory");
    if (st) return llmm__diag_fail(d, st, "tool '%s': %s", t->name, err); /* checked before: cannot happen */
    return LLMM_OK;
}

llmm_status llmm__chat_tool_check(const llmm_tool *t, size_t i, llmm_diag *d) {
    if (!t->name || !name_ok(t->name))
        return llmm__diag_fail(d, LLMM_ERR_INVALID_ARG, "tool %zu: the name must be 1 to 64 of [A-Za-z0-9_-]", i);
    if (!t->parameters) return LLMM_OK;
    json_doc schema_doc = {0}, *schema = &schema_doc;
    size_t len = strlen(t->parameters);
    if (len > LLMM_TOOL_SCHEMA_MAX_BYTES)
        return llmm__diag_fail(d, LLMM_ERR_INVALID_ARG, "tool '%s': the parameters schema is %zu bytes (at most %d)",
                               t->name, len, LLMM_TOOL_SCHEMA_MAX_BYTES);
    char err[128];
    llmm_status st = llmm__json_parse(schema, t->parameters, len, err, sizeof err);
    if (st == LLMM_ERR_NO_MEMORY) return llmm__diag_fail(d, st, "tool '%s': out of memory", t->name);
    if (st) return llmm__diag_fail(d, st, "tool '%s': the parameters are not JSON: %s", t->name, err);
    int is_object = schema->nodes[0].kind == JSON_OBJECT, depth = depth_of(schema, 0);
    llmm__json_doc_free(schema);
    if (!is_object)
        return llmm__diag_fail(d, LLMM_ERR_INVALID_ARG, "tool '%s': the parameters schema is not an object", t->name);
    if (depth > LLMM_TOOL_SCHEMA_MAX_DEPTH)
        return llmm__diag_fail(d, LLMM_ERR_INVALID_ARG, "tool '%s': the parameters schema nests deeper than %d",
                               t->name, LLMM_TOOL_SCHEMA_MAX_DEPTH);
    return LLMM_OK;
}

static llmm_status check_tool(const llmm_tool *t, size_t i, char **text, json_doc *doc, llmm_diag *d) {
    llmm_status st = llmm__chat_tool_check(t, i, d);
    return st ? st : build_tool_object(t, text, doc, d);
}

static int role_known(const char *role) {
    static const char *const roles[] = {"system", "user", "assistant", "tool"};
    for (size_t i = 0; i < 4; i++)
        if (strcmp(role, roles[i]) == 0) return 1;
    return 0;
}

static llmm_status check_message(const llmm_chat_turn *m, size_t i, json_doc *args, llmm_diag *d) {
    if (!m->role || !role_known(m->role))
        return llmm__diag_fail(d, LLMM_ERR_INVALID_ARG, "message %zu: role must be system, user, assistant or tool",
                               i);
    if (m->n_tool_calls && (!m->tool_calls || strcmp(m->role, "assistant") != 0))
        return llmm__diag_fail(d, LLMM_ERR_INVALID_ARG, "message %zu: only an assistant message carries calls", i);
    for (size_t k = 0; k < m->n_tool_calls; k++) {
        const llmm_tool_call *c = &m->tool_calls[k];
        if (!c->name || !name_ok(c->name) || !c->arguments)
            return llmm__diag_fail(d, LLMM_ERR_INVALID_ARG,
                                   "message %zu, call %zu: a name of [A-Za-z0-9_-] and arguments are required", i, k);
        char err[128];
        llmm_status st = llmm__json_parse(&args[k], c->arguments, strlen(c->arguments), err, sizeof err);
        if (st == LLMM_ERR_NO_MEMORY) return llmm__diag_fail(d, st, "message %zu: out of memory", i);
        /* arguments that are not JSON are pasted verbatim, as templates paste a string */
    }
    return LLMM_OK;
}

llmm_status llmm__chat_request_parse(const llmm_chat_request *r, parsed_request *p, llmm_diag *d) {
    if ((r->n_messages && !r->messages) || (r->n_tools && !r->tools))
        return llmm__diag_fail(d, LLMM_ERR_INVALID_ARG, "llmm_chat_format_request: NULL messages or tools with n > 0");
    if (r->n_tools > LLMM_TOOLS_MAX)
        return llmm__diag_fail(d, LLMM_ERR_INVALID_ARG, "%zu tools (at most %d)", r->n_tools, LLMM_TOOLS_MAX);
    p->tools = llmm__mem_calloc(NULL, r->n_tools + 1, sizeof *p->tools);
    p->tool_text = llmm__mem_calloc(NULL, r->n_tools + 1, sizeof *p->tool_text);
    p->args = llmm__mem_calloc(NULL, r->n_messages + 1, sizeof *p->args);
    if (!p->tools || !p->tool_text || !p->args) return llmm__diag_fail(d, LLMM_ERR_NO_MEMORY, "out of memory");
    p->n_tools = r->n_tools;
    p->n_messages = r->n_messages;
    for (size_t i = 0; i < r->n_tools; i++) {
        llmm_status st = check_tool(&r->tools[i], i, &p->tool_text[i], &p->tools[i], d);
        if (st) return st;
    }
    for (size_t i = 0; i < r->n_messages; i++) {
        const llmm_chat_turn *m = &r->messages[i];
        if (m->n_tool_calls > LLMM_TOOLS_MAX)
            return llmm__diag_fail(d, LLMM_ERR_INVALID_ARG, "message %zu: %zu calls (at most %d)", i,
                                   m->n_tool_calls, LLMM_TOOLS_MAX);
        p->args[i] = llmm__mem_calloc(NULL, m->n_tool_calls + 1, sizeof **p->args);
        if (!p->args[i]) return llmm__diag_fail(d, LLMM_ERR_NO_MEMORY, "out of memory");
        llmm_status st = check_message(m, i, p->args[i], d);
        if (st) return st;
    }
    return LLMM_OK;
}

const char *llmm__chat_text(const char *s) { return s ? s : ""; }

int llmm__chat_is_trim_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r' || c == '\f' || c == '\v'; }

int llmm__chat_is_role(const llmm_chat_turn *m, const char *role) { return strcmp(m->role, role) == 0; }

void llmm__chat_out_json(chat_out *o, const json_doc *doc, size_t node, const json_style *style) {
    llmm__json_write(doc, node, style, sink_out, o);
}

void llmm__chat_out_args(chat_out *o, const llmm_chat_request *r, const parsed_request *p, size_t i, size_t k,
                         const json_style *style) {
    const json_doc *args = &p->args[i][k];
    if (args->n_nodes) llmm__chat_out_json(o, args, 0, style);
    else llmm__chat_out_str(o, r->messages[i].tool_calls[k].arguments);
}
