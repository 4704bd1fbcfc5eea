/* Gemma 4: its own markup (<|turn>role ... <turn|>), tools declared in a JSON-like dialect
 * (bare keys in sorted order, strings between <|"|> marks, types upper-cased, a fixed subset of
 * schema keywords), calls as <|tool_call>call:NAME{key:value}<tool_call|> in the same dialect,
 * and results kept inside the model's turn, which the next assistant message continues. */
#include "text/chat_render.h"

#include <string.h>

#define QUOTE "<|\"|>"

/* ---------------------------------------------------------------- reading the JSON as Jinja does */

static size_t member(const json_doc *doc, size_t obj, const char *key) {
    return obj != JSON_NONE && doc->nodes[obj].kind == JSON_OBJECT ? llmm__json_member(doc, obj, key) : JSON_NONE;
}

static int truthy(const json_doc *doc, size_t v) {
    if (v == JSON_NONE) return 0;
    const json_node *n = &doc->nodes[v];
    switch (n->kind) {
    case JSON_NULL:
    case JSON_FALSE: return 0;
    case JSON_STRING: return n->str_len > 0;
    case JSON_ARRAY:
    case JSON_OBJECT: return n->n_children > 0;
    case JSON_NUMBER:
        for (size_t i = 0; i < n->src_len; i++)
            if (doc->src[n->src + i] >= '1' && doc->src[n->src + i] <= '9') return 1;
        return 0;
    default: return 1;
    }
}

static int is_string(const json_doc *doc, size_t v) { return v != JSON_NONE && doc->nodes[v].kind == JSON_STRING; }

/* Jinja's dictsort order: keys compared without case (ASCII), ties by case, then position. */
static int key_before(const json_doc *doc, size_t a, size_t b) {
    const char *ka = json_key(doc, a), *kb = json_key(doc, b);
    size_t na = doc->nodes[a].key_len, nb = doc->nodes[b].key_len;
    for (int pass = 0; pass < 2; pass++)
        for (size_t i = 0; i < na || i < nb; i++) {
            if (i == na || i == nb) return na < nb;
            unsigned char x = (unsigned char)ka[i], y = (unsigned char)kb[i];
            if (pass == 0) {
                x = x >= 'A' && x <= 'Z' ? (unsigned char)(x + 32) : x;
                y = y >= 'A' && y <= 'Z' ? (unsigned char)(y + 32) : y;
            }
            if (x != y) return x < y;
        }
    return a < b;
}

/* The member of obj that follows prev in dictsort order (prev JSON_NONE: the first), or
 * JSON_NONE. Quadratic, and allocation-free: objects in tool schemas are small. */
static size_t next_sorted(const json_doc *doc, size_t obj, size_t prev) {
    size_t best = JSON_NONE;
    for (size_t m = doc->nodes[obj].first; m != JSON_NONE; m = doc->nodes[m].next)
        if ((prev == JSON_NONE || key_before(doc, prev, m)) && (best == JSON_NONE || key_before(doc, m, best)))
            best = m;
    return best;
}

#define FOR_SORTED(doc, obj, m) for (size_t m = next_sorted(doc, obj, JSON_NONE); m != JSON_NONE; m = next_sorted(doc, obj, m))

static void out_key(chat_out *o, const json_doc *doc, size_t m) { llmm__chat_out_bytes(o, json_key(doc, m), doc->nodes[m].key_len); }

static void out_str(chat_out *o, const json_doc *doc, size_t v) { llmm__chat_out_bytes(o, json_str(doc, v), doc->nodes[v].str_len); }

static void out_upper(chat_out *o, const json_doc *doc, size_t v) {
    if (!is_string(doc, v)) return; /* a missing type upper-cases to nothing */
    const char *s = json_str(doc, v);
    for (size_t i = 0; i < doc->nodes[v].str_len; i++) {
        char c = s[i] >= 'a' && s[i] <= 'z' ? (char)(s[i] - 32) : s[i];
        llmm__chat_out_bytes(o, &c, 1);
    }
}

/* ---------------------------------------------------------------- the value dialect */

/* The template's format_argument: strings quoted with <|"|>, members sorted, keys quoted only
 * in declarations; numbers as written (Jinja would print a parsed float: 1.50 becomes 1.5). */
static void out_argument(chat_out *o, const json_doc *doc, size_t v, int quote_keys) {
    const json_node *n = &doc->nodes[v];
    switch (n->kind) {
    case JSON_STRING:
        llmm__chat_out_str(o, QUOTE);
        out_str(o, doc, v);
        llmm__chat_out_str(o, QUOTE);
        break;
    case JSON_TRUE: llmm__chat_out_str(o, "true"); break;
    case JSON_FALSE: llmm__chat_out_str(o, "false"); break;
    case JSON_NULL: llmm__chat_out_str(o, "None"); break;
    case JSON_NUMBER: llmm__chat_out_bytes(o, doc->src + n->src, n->src_len); break;
    case JSON_OBJECT: {
        llmm__chat_out_str(o, "{");
        int first = 1;
        FOR_SORTED(doc, v, m) {
            if (!first) llmm__chat_out_str(o, ",");
            first = 0;
            if (quote_keys) llmm__chat_out_str(o, QUOTE);
            out_key(o, doc, m);
            if (quote_keys) llmm__chat_out_str(o, QUOTE);
            llmm__chat_out_str(o, ":");
            out_argument(o, doc, m, quote_keys);
        }
        llmm__chat_out_str(o, "}");
        break;
    }
    case JSON_ARRAY:
        llmm__chat_out_str(o, "[");
        for (size_t c = n->first; c != JSON_NONE; c = doc->nodes[c].next) {
            if (c != n->first) llmm__chat_out_str(o, ",");
            out_argument(o, doc, c, quote_keys);
        }
        llmm__chat_out_str(o, "]");
        break;
    }
}

static void out_required(chat_out *o, const json_doc *doc, size_t list) {
    llmm__chat_out_str(o, "required:[");
    for (size_t c = doc->nodes[list].first; c != JSON_NONE; c = doc->nodes[c].next) {
        if (c != doc->nodes[list].first) llmm__chat_out_str(o, ",");
        llmm__chat_out_str(o, QUOTE);
        if (is_string(doc, c)) out_str(o, doc, c);
        else out_argument(o, doc, c, 1);
        llmm__chat_out_str(o, QUOTE);
    }
    llmm__chat_out_str(o, "]");
}

/* ---------------------------------------------------------------- tool declarations */

static void out_parameters(chat_out *o, const json_doc *doc, size_t properties);

/* Writes "," before every field but the first of a property (the template's add_comma). */
static void comma(chat_out *o, int *add) {
    if (*add) llmm__chat_out_str(o, ",");
    *add = 1;
}

static int type_is(const json_doc *doc, size_t value, const char *upper) {
    size_t t = member(doc, value, "type");
    if (!is_string(doc, t) || doc->nodes[t].str_len != strlen(upper)) return 0;
    const char *s = json_str(doc, t);
    for (size_t i = 0; upper[i]; i++)
        if ((s[i] >= 'a' && s[i] <= 'z' ? s[i] - 32 : s[i]) != upper[i]) return 0;
    return 1;
}

static void out_items(chat_out *o, const json_doc *doc, size_t items) {
    llmm__chat_out_str(o, "items:{");
    int first = 1;
    FOR_SORTED(doc, items, m) {
        if (doc->nodes[m].kind == JSON_NULL) continue;
        if (!first) llmm__chat_out_str(o, ",");
        first = 0;
        const char *k = json_key(doc, m);
        size_t klen = doc->nodes[m].key_len;
        if (klen == 10 && memcmp(k, "properties", 10) == 0) {
            llmm__chat_out_str(o, "properties:{");
            if (doc->nodes[m].kind == JSON_OBJECT) out_parameters(o, doc, m);
            llmm__chat_out_str(o, "}");
        } else if (klen == 8 && memcmp(k, "required", 8) == 0 && doc->nodes[m].kind == JSON_ARRAY) {
            out_required(o, doc, m);
        } else if (klen == 4 && memcmp(k, "type", 4) == 0 && is_string(doc, m)) {
            llmm__chat_out_str(o, "type:" QUOTE);
            out_upper(o, doc, m);
            llmm__chat_out_str(o, QUOTE);
        } else {
            out_key(o, doc, m);
            llmm__chat_out_str(o, ":");
            out_argument(o, doc, m, 1);
        }
    }
    llmm__chat_out_str(o, "}");
}

/* One property's declaration: description, enum (strings), items (arrays), nullable,
 * properties and required (objects), type; other keywords (minimum, pattern, ...) dropped. */
static void out_property(chat_out *o, const json_doc *doc, size_t value) {
    int add = 0;
    size_t description = member(doc, value, "description");
    if (truthy(doc, description)) {
        llmm__chat_out_str(o, "description:" QUOTE);
        if (is_string(doc, description)) out_str(o, doc, description);
        else out_argument(o, doc, description, 1);
        llmm__chat_out_str(o, QUOTE);
        add = 1;
    }
    if (type_is(doc, value, "STRING")) {
        size_t e = member(doc, value, "enum");
        if (truthy(doc, e)) {
            comma(o, &add);
            llmm__chat_out_str(o, "enum:");
            out_argument(o, doc, e, 1);
        }
    } else if (type_is(doc, value, "ARRAY")) {
        size_t items = member(doc, value, "items");
        if (items != JSON_NONE && doc->nodes[items].kind == JSON_OBJECT && doc->nodes[items].n_children) {
            comma(o, &add);
            out_items(o, doc, items);
        }
    }
    if (truthy(doc, member(doc, value, "nullable"))) {
        comma(o, &add);
        llmm__chat_out_str(o, "nullable:true");
    }
    if (type_is(doc, value, "OBJECT")) {
        size_t props = member(doc, value, "properties");
        comma(o, &add);
        llmm__chat_out_str(o, "properties:{");
        out_parameters(o, doc, props != JSON_NONE && doc->nodes[props].kind == JSON_OBJECT ? props : value);
        llmm__chat_out_str(o, "}");
        size_t required = member(doc, value, "required");
        if (truthy(doc, required) && doc->nodes[required].kind == JSON_ARRAY) {
            comma(o, &add);
            out_required(o, doc, required);
        }
    }
    comma(o, &add);
    llmm__chat_out_str(o, "type:" QUOTE);
    out_upper(o, doc, member(doc, value, "type"));
    llmm__chat_out_str(o, QUOTE "}");
}

/* The template's format_parameters: properties in sorted order, skipping any property whose
 * name is one of its standard keywords (a quirk of the template, kept). Nesting is bounded by
 * the schema depth check (LLMM_TOOL_SCHEMA_MAX_DEPTH). */
static void out_parameters(chat_out *o, const json_doc *doc, size_t properties) {
    static const char *const standard[] = {"description", "type", "properties", "required", "nullable"};
    int first = 1;
    FOR_SORTED(doc, properties, m) {
        int skip = 0;
        for (size_t s = 0; s < sizeof standard / sizeof *standard; s++)
            if (doc->nodes[m].key_len == strlen(standard[s]) && memcmp(json_key(doc, m), standard[s], strlen(standard[s])) == 0)
                skip = 1;
        if (skip) continue;
        if (!first) llmm__chat_out_str(o, ",");
        first = 0;
        out_key(o, doc, m);
        llmm__chat_out_str(o, ":{");
        out_property(o, doc, m);
    }
}

static void out_declaration(chat_out *o, const json_doc *doc) {
    size_t fn = member(doc, 0, "function"), params = member(doc, fn, "parameters");
    llmm__chat_out_str(o, "<|tool>declaration:");
    out_str(o, doc, member(doc, fn, "name"));
    llmm__chat_out_str(o, "{description:" QUOTE);
    out_str(o, doc, member(doc, fn, "description"));
    llmm__chat_out_str(o, QUOTE);
    if (truthy(doc, params)) {
        llmm__chat_out_str(o, ",parameters:{");
        size_t props = member(doc, params, "properties"), required = member(doc, params, "required");
        if (truthy(doc, props)) {
            llmm__chat_out_str(o, "properties:{");
            if (doc->nodes[props].kind == JSON_OBJECT) out_parameters(o, doc, props);
            llmm__chat_out_str(o, "},");
        }
        if (truthy(doc, required) && doc->nodes[required].kind == JSON_ARRAY) {
            out_required(o, doc, required);
            llmm__chat_out_str(o, ",");
        }
        size_t type = member(doc, params, "type");
        if (truthy(doc, type)) { /* without a type the template leaves "parameters:{" open */
            llmm__chat_out_str(o, "type:" QUOTE);
            out_upper(o, doc, type);
            llmm__chat_out_str(o, QUOTE "}");
        }
    }
    llmm__chat_out_str(o, "}<tool|>");
}

/* ---------------------------------------------------------------- turns */

static void out_trimmed(chat_out *o, const char *s) {
    chat_span t = llmm__chat_trim((chat_span){s, strlen(s)});
    llmm__chat_out_bytes(o, t.s, t.n);
}

/* The template's strip_thinking: every "<|channel>...<channel|>" span removed, then the rest
 * trimmed as one text. The kept pieces lie in the text in order, so the trim is a window
 * [lo, hi) over the text that clips them; the pieces are walked twice, nothing is copied. */
typedef struct kept_piece {
    const char *at, *stop, *next; /* the kept bytes [at, stop); next piece at next (NULL: last) */
} kept_piece;

static kept_piece kept_from(const char *part) {
    const char *end = strstr(part, "<channel|>"), *open = strstr(part, "<|channel>");
    kept_piece k = {part, end ? end : part + strlen(part), end ? end + strlen("<channel|>") : NULL};
    if (open && open < k.stop) k.stop = open;
    return k;
}

static void out_stripped(chat_out *o, const char *c) {
    const char *lo = NULL, *hi = NULL;
    for (kept_piece k = kept_from(c);; k = kept_from(k.next)) {
        for (const char *s = k.at; s < k.stop; s++)
            if (!llmm__chat_is_trim_space(*s)) {
                if (!lo) lo = s;
                hi = s + 1;
            }
        if (!k.next) break;
    }
    if (!lo) return;
    for (kept_piece k = kept_from(c);; k = kept_from(k.next)) {
        const char *from = k.at > lo ? k.at : lo, *to = k.stop < hi ? k.stop : hi;
        if (from < to) llmm__chat_out_bytes(o, from, (size_t)(to - from));
        if (!k.next) break;
    }
}

static void out_call(chat_out *o, const llmm_tool_call *call, const json_doc *args) {
    llmm__chat_out_str(o, "<|tool_call>call:");
    llmm__chat_out_str(o, call->name);
    llmm__chat_out_str(o, "{");
    if (args->n_nodes && args->nodes[0].kind == JSON_OBJECT) {
        int first = 1;
        FOR_SORTED(args, 0, m) {
            if (!first) llmm__chat_out_str(o, ",");
            first = 0;
            out_key(o, args, m);
            llmm__chat_out_str(o, ":");
            out_argument(o, args, m, 0);
        }
    } else if (!args->n_nodes) {
        llmm__chat_out_str(o, call->arguments); /* not JSON: the template pastes the string */
    }
    llmm__chat_out_str(o, "}<tool_call|>");
}

/* The results that follow message i, inside its turn; returns how many were written. */
static size_t out_results(chat_out *o, const llmm_chat_request *r, size_t i) {
    const llmm_chat_turn *m = &r->messages[i];
    size_t k = i + 1;
    for (; k < r->n_messages && llmm__chat_is_role(&r->messages[k], "tool"); k++) {
        const char *name = "unknown";
        for (size_t c = 0; c < m->n_tool_calls; c++)
            if (m->tool_calls[c].id && r->messages[k].tool_call_id &&
                strcmp(m->tool_calls[c].id, r->messages[k].tool_call_id) == 0)
                name = m->tool_calls[c].name;
        llmm__chat_out_str(o, "<|tool_response>response:");
        llmm__chat_out_str(o, name);
        llmm__chat_out_str(o, "{value:" QUOTE);
        llmm__chat_out_str(o, llmm__chat_text(r->messages[k].content));
        llmm__chat_out_str(o, QUOTE "}<tool_response|>");
    }
    return k - i - 1;
}

typedef enum last_written { WROTE_OTHER, WROTE_CALL, WROTE_RESULT } last_written;

static last_written out_message(chat_out *o, const llmm_chat_request *r, const parsed_request *p, size_t i,
                                size_t first, size_t last_user) {
    const llmm_chat_turn *m = &r->messages[i];
    int model = llmm__chat_is_role(m, "assistant");
    const char *prev_role = NULL; /* the previous message that is not a tool result */
    for (size_t j = i; j-- > first && !prev_role;)
        if (!llmm__chat_is_role(&r->messages[j], "tool")) prev_role = r->messages[j].role;
    if (!(model && prev_role && strcmp(prev_role, "assistant") == 0)) {
        llmm__chat_out_str(o, "<|turn>");
        llmm__chat_out_str(o, model ? "model" : m->role);
        llmm__chat_out_str(o, "\n");
    }
    if (m->reasoning_content && *m->reasoning_content && (last_user == (size_t)-1 || i > last_user) &&
        m->n_tool_calls) {
        llmm__chat_out_str(o, "<|channel>thought\n");
        llmm__chat_out_str(o, m->reasoning_content);
        llmm__chat_out_str(o, "\n<channel|>");
    }
    last_written last = WROTE_OTHER;
    for (size_t k = 0; k < m->n_tool_calls; k++) out_call(o, &m->tool_calls[k], &p->args[i][k]);
    if (m->n_tool_calls) last = WROTE_CALL;
    size_t results = m->n_tool_calls ? out_results(o, r, i) : 0;
    if (results) last = WROTE_RESULT;
    const char *c = llmm__chat_text(m->content);
    if (model) out_stripped(o, c);
    else out_trimmed(o, c);
    if (last == WROTE_CALL) llmm__chat_out_str(o, "<|tool_response>"); /* the model's cue to await the result */
    else if (!(results && !*c)) llmm__chat_out_str(o, "<turn|>\n");
    return last;
}

llmm_status llmm__render_gemma4(const llmm_chat_request *r, const parsed_request *p, chat_out *o, llmm_diag *d) {
    (void)d;
    int thinking = r->enable_thinking != 0; /* on unless turned off, as the reference's server runs it */
    size_t first = r->n_messages && llmm__chat_is_role(&r->messages[0], "system") ? 1 : 0;
    llmm__chat_out_str(o, "<bos>");
    if (thinking || r->n_tools || first) {
        llmm__chat_out_str(o, thinking ? "<|turn>system\n<|think|>\n" : "<|turn>system\n");
        if (first) {
            const char *s = llmm__chat_text(r->messages[0].content);
            out_trimmed(o, s);
        }
        for (size_t t = 0; t < r->n_tools; t++) out_declaration(o, &p->tools[t]);
        llmm__chat_out_str(o, "<turn|>\n");
    }
    size_t last_user = (size_t)-1;
    for (size_t i = first; i < r->n_messages; i++)
        if (llmm__chat_is_role(&r->messages[i], "user")) last_user = i;
    last_written last = WROTE_OTHER;
    for (size_t i = first; i < r->n_messages; i++)
        if (!llmm__chat_is_role(&r->messages[i], "tool")) last = out_message(o, r, p, i, first, last_user);
    if (r->add_generation_prompt && last == WROTE_OTHER)
        llmm__chat_out_str(o, thinking ? "<|turn>model\n" : "<|turn>model\n<|channel>thought\n<channel|>");
    return LLMM_OK;
}
