/* JSON text out of a parsed tree, in a chosen spacing (see json_write.h). */
#include "base/json_write.h"

#include <string.h>

const json_style llmm__json_style_python = {", ", ": ", 0};
const json_style llmm__json_style_compact = {",", ":", 0};

static void put(json_sink_fn sink, void *ctx, const char *s) { sink(ctx, s, strlen(s)); }

void llmm__json_write_string(const char *s, size_t n, json_sink_fn sink, void *ctx) {
    static const char hex[] = "0123456789abcdef";
    put(sink, ctx, "\"");
    size_t run = 0; /* bytes copied as they are, written in one piece */
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        const char *esc = NULL;
        char u[7] = "\\u00";
        switch (c) {
        case '"': esc = "\\\""; break;
        case '\\': esc = "\\\\"; break;
        case '\n': esc = "\\n"; break;
        case '\t': esc = "\\t"; break;
        case '\r': esc = "\\r"; break;
        case '\b': esc = "\\b"; break;
        case '\f': esc = "\\f"; break;
        default:
            if (c < 0x20) {
                u[4] = hex[c >> 4];
                u[5] = hex[c & 15];
                u[6] = '\0';
                esc = u;
            }
        }
        if (!esc) continue;
        sink(ctx, s + run, i - run);
        put(sink, ctx, esc);
        run = i + 1;
    }
    sink(ctx, s + run, n - run);
    put(sink, ctx, "\"");
}

static void newline_indent(const json_style *style, int level, json_sink_fn sink, void *ctx) {
    if (style->indent <= 0) return;
    put(sink, ctx, "\n");
    for (int i = 0; i < level * style->indent; i++) put(sink, ctx, " ");
}

/* The tree is at most JSON_MAX_DEPTH deep (the reader refuses deeper), so recursion is bounded. */
static void write_node(const json_doc *doc, size_t at, const json_style *style, int level, json_sink_fn sink,
                       void *ctx) {
    const json_node *n = &doc->nodes[at];
    switch (n->kind) {
    case JSON_NULL: put(sink, ctx, "null"); return;
    case JSON_FALSE: put(sink, ctx, "false"); return;
    case JSON_TRUE: put(sink, ctx, "true"); return;
    case JSON_NUMBER: sink(ctx, doc->src + n->src, n->src_len); return;
    case JSON_STRING: llmm__json_write_string(json_str(doc, at), n->str_len, sink, ctx); return;
    case JSON_ARRAY:
    case JSON_OBJECT: break;
    }
    int object = n->kind == JSON_OBJECT;
    put(sink, ctx, object ? "{" : "[");
    for (size_t c = n->first; c != JSON_NONE; c = doc->nodes[c].next) {
        if (c != n->first) put(sink, ctx, style->item_sep);
        newline_indent(style, level + 1, sink, ctx);
        if (object) {
            llmm__json_write_string(json_key(doc, c), doc->nodes[c].key_len, sink, ctx);
            put(sink, ctx, style->key_sep);
        }
        write_node(doc, c, style, level + 1, sink, ctx);
    }
    if (n->first != JSON_NONE) newline_indent(style, level, sink, ctx);
    put(sink, ctx, object ? "}" : "]");
}

void llmm__json_write(const json_doc *doc, size_t node, const json_style *style, json_sink_fn sink, void *ctx) {
    write_node(doc, node, style, 0, sink, ctx);
}
