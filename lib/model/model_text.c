/* A model's text calls: tokenize, detokenize, token pieces and attributes, special tokens and
 * chat formatting, over its vocabulary (lib/text) with errors recorded on the model. */
#include <string.h>

#include "model.h"
#include "text/chat.h"
#include "text/chat_tools.h"
#include "text/tokenizer.h"

LLMM_API llmm_status llmm_tokenize(const llmm_model *model, const char *text, size_t text_len,
                                   uint32_t flags, llmm_token *out, size_t capacity, size_t *n_tokens) {
    if (!model) return LLMM_ERR_INVALID_ARG;
    if (!n_tokens || (!text && text_len) || (!out && capacity))
        return llmm__model_fail(model, LLMM_ERR_INVALID_ARG, "llmm_tokenize: NULL text, n_tokens or out");
    if (flags & ~(LLMM_TOKENIZE_ADD_SPECIAL | LLMM_TOKENIZE_PARSE_SPECIAL))
        return llmm__model_fail(model, LLMM_ERR_INVALID_ARG, "llmm_tokenize: unknown flags 0x%x", flags);
    const llmm_vocab *v = &model->vocab;
    if (v->kind == LLMM_TOKENIZER_NONE)
        return llmm__model_fail(model, LLMM_ERR_UNSUPPORTED, "the model has no tokenizer");
    *n_tokens = 0;
    token_list ids = {.alloc = model->alloc};
    llmm_status st = llmm__vocab_tokenize(v, model->alloc, text, text_len, flags, &ids);
    if (!st) {
        *n_tokens = ids.n;
        if (ids.n > capacity)
            st = llmm__model_fail(model, LLMM_ERR_BUFFER_TOO_SMALL, "llmm_tokenize: %zu tokens, buffer holds %zu",
                            ids.n, capacity);
        else if (ids.n)
            memcpy(out, ids.ids, ids.n * sizeof *out);
    } else if (st == LLMM_ERR_NO_MEMORY) {
        llmm__model_fail(model, st, "llmm_tokenize: out of memory for %zu bytes of text", text_len);
    } else {
        llmm__model_fail(model, st, "llmm_tokenize: the vocabulary cannot represent a byte of the input");
    }
    llmm__token_list_free(&ids);
    return st;
}

static llmm_status check_token(const llmm_model *model, llmm_token t) {
    if (model->vocab.kind == LLMM_TOKENIZER_NONE)
        return llmm__model_fail(model, LLMM_ERR_UNSUPPORTED, "the model has no tokenizer");
    if (t < 0 || (uint32_t)t >= model->vocab.n_tokens)
        return llmm__model_fail(model, LLMM_ERR_INVALID_ARG, "token %d is out of range (vocab of %u)", t,
                          model->vocab.n_tokens);
    return LLMM_OK;
}

LLMM_API llmm_status llmm_detokenize(const llmm_model *model, const llmm_token *tokens, size_t n, uint32_t flags,
                                     char *buf, size_t capacity, size_t *n_bytes) {
    if (!model) return LLMM_ERR_INVALID_ARG;
    if (!n_bytes || (!tokens && n) || (!buf && capacity))
        return llmm__model_fail(model, LLMM_ERR_INVALID_ARG, "llmm_detokenize: NULL argument");
    if (flags & ~(LLMM_PIECE_RENDER_SPECIAL | LLMM_PIECE_STRIP_SPACE))
        return llmm__model_fail(model, LLMM_ERR_INVALID_ARG, "llmm_detokenize: unknown flags 0x%x", flags);
    *n_bytes = 0;
    for (size_t i = 0; i < n; i++) {
        llmm_status st = check_token(model, tokens[i]);
        if (st) return st;
    }
    /* a piece is at most its text length, or 3 bytes for the unknown marker */
    size_t scratch_cap = 16;
    for (size_t i = 0; i < n; i++)
        scratch_cap = LLMM_MAX(scratch_cap, (size_t)model->vocab.text[tokens[i]].len);
    char *scratch = llmm__mem_alloc(model->alloc, scratch_cap);
    if (!scratch) return llmm__model_fail(model, LLMM_ERR_NO_MEMORY, "llmm_detokenize: out of memory");
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t f = i == 0 ? flags : (flags & ~LLMM_PIECE_STRIP_SPACE);
        size_t k = llmm__vocab_piece(&model->vocab, tokens[i], f, scratch, scratch_cap);
        /* k == 0 too: buf may be NULL (a size query), and NULL + 0 is undefined in C */
        if (k && total + k <= capacity) memcpy(buf + total, scratch, k);
        total += k;
    }
    llmm__mem_free(model->alloc, scratch);
    *n_bytes = total;
    if (total > capacity)
        return llmm__model_fail(model, LLMM_ERR_BUFFER_TOO_SMALL, "llmm_detokenize: %zu bytes, buffer holds %zu",
                          total, capacity);
    return LLMM_OK;
}

LLMM_API llmm_status llmm_token_to_piece(const llmm_model *model, llmm_token token, uint32_t flags, char *buf,
                                         size_t capacity, size_t *n_bytes) {
    return llmm_detokenize(model, &token, 1, flags, buf, capacity, n_bytes);
}

LLMM_API llmm_status llmm_token_attrs(const llmm_model *model, llmm_token token, uint32_t *attrs) {
    if (!model) return LLMM_ERR_INVALID_ARG;
    if (!attrs) return llmm__model_fail(model, LLMM_ERR_INVALID_ARG, "llmm_token_attrs: NULL attrs");
    llmm_status st = check_token(model, token);
    if (st) return st;
    *attrs = model->vocab.attrs[token];
    return LLMM_OK;
}

LLMM_API llmm_status llmm_model_special_token(const llmm_model *model, llmm_special_token which, llmm_token *out) {
    if (!model) return LLMM_ERR_INVALID_ARG;
    if (!out || (int)which < 0 || (int)which >= 6)
        return llmm__model_fail(model, LLMM_ERR_INVALID_ARG, "llmm_model_special_token: bad argument");
    int32_t id = model->vocab.special[which];
    if (id < 0) return llmm__model_fail(model, LLMM_ERR_NOT_FOUND, "the model defines no such special token");
    *out = id;
    return LLMM_OK;
}

LLMM_API llmm_status llmm_chat_format(const llmm_model *model, const char *template_name,
                                      const llmm_chat_message *messages, size_t n, int add_generation_prompt,
                                      char *buf, size_t capacity, size_t *needed) {
    if (!model) return LLMM_ERR_INVALID_ARG;
    if (!needed || (!buf && capacity > 0))
        return llmm__model_fail(model, LLMM_ERR_INVALID_ARG, "llmm_chat_format: NULL needed, or NULL buf with capacity > 0");
    *needed = 0;
    llmm_diag d = {{0}};
    llmm_status st = llmm__chat_check_messages(messages, n, &d);
    int index = -1;
    if (!st) {
        const char *text = NULL;
        llmm_status text_st = template_name ? LLMM_OK : llmm_model_meta_str(model, "tokenizer.chat_template", &text);
        st = llmm__chat_resolve(template_name, text, text_st, &index, &d);
    }
    if (!st) st = llmm__chat_render(index, messages, n, add_generation_prompt, buf, capacity, needed, &d);
    return st ? llmm__model_fail(model, st, "%s", d.msg) : LLMM_OK;
}

LLMM_API llmm_status llmm_chat_template_detect(const llmm_model *model, const char **name) {
    if (!model) return LLMM_ERR_INVALID_ARG;
    if (!name) return llmm__model_fail(model, LLMM_ERR_INVALID_ARG, "llmm_chat_template_detect: name is NULL");
    *name = NULL;
    const char *text = NULL;
    llmm_status text_st = llmm_model_meta_str(model, "tokenizer.chat_template", &text);
    llmm_diag d = {{0}};
    int index = -1;
    llmm_status st = llmm__chat_resolve(NULL, text, text_st, &index, &d);
    if (st) return llmm__model_fail(model, st, "%s", d.msg);
    *name = llmm__chat_format_name(index);
    return LLMM_OK;
}

/* The tool family of the model's template, or UNSUPPORTED with the reason in d. */
static llmm_status model_tool_family(const llmm_model *model, const tool_family_info **family, llmm_diag *d) {
    const char *text = NULL;
    llmm_status st = llmm_model_meta_str(model, "tokenizer.chat_template", &text);
    if (st == LLMM_ERR_NOT_FOUND)
        return llmm__diag_fail(d, LLMM_ERR_UNSUPPORTED, "the model has no chat template; name a tool family: %s",
                               llmm__tool_families_csv());
    if (st) return llmm__diag_fail(d, LLMM_ERR_UNSUPPORTED, "tokenizer.chat_template is not a string");
    *family = llmm__tool_family_detect(text);
    if (*family) return LLMM_OK;
    return llmm__diag_fail(d, LLMM_ERR_UNSUPPORTED,
                           "the model's chat template is of no tool family llmmini knows; name one of: %s",
                           llmm__tool_families_csv());
}

LLMM_API llmm_status llmm_chat_tool_family_detect(const llmm_model *model, const char **name) {
    if (!model) return LLMM_ERR_INVALID_ARG;
    if (!name) return llmm__model_fail(model, LLMM_ERR_INVALID_ARG, "llmm_chat_tool_family_detect: name is NULL");
    *name = NULL;
    llmm_diag d = {{0}};
    const tool_family_info *family = NULL;
    llmm_status st = model_tool_family(model, &family, &d);
    if (st) return llmm__model_fail(model, st, "%s", d.msg);
    *name = family->name;
    return LLMM_OK;
}

LLMM_API llmm_status llmm_chat_format_request(const llmm_model *model, const char *family_name,
                                              const llmm_chat_request *request, char *buf, size_t capacity,
                                              size_t *needed) {
    if (!model && !family_name) return LLMM_ERR_INVALID_ARG;
    llmm_diag d = {{0}};
    llmm_status st = LLMM_OK;
    llmm_chat_request r;
    llmm_chat_request_default(&r, sizeof r);
    if (!needed || (!buf && capacity > 0) || !request)
        st = llmm__diag_fail(&d, LLMM_ERR_INVALID_ARG,
                             "llmm_chat_format_request: NULL request or needed, or NULL buf with capacity > 0");
    else if (!llmm__struct_import(&r, sizeof r, request, sizeof r))
        st = llmm__diag_fail(&d, LLMM_ERR_INVALID_ARG, "llmm_chat_format_request: request.size too small");
    if (needed) *needed = 0;
    const tool_family_info *family = NULL;
    if (!st && family_name) {
        family = llmm__tool_family_find(family_name);
        if (!family)
            st = llmm__diag_fail(&d, LLMM_ERR_UNSUPPORTED, "no tool family '%.64s'; the names are: %s", family_name,
                                 llmm__tool_families_csv());
    } else if (!st) {
        st = model_tool_family(model, &family, &d);
    }
    if (!st) st = llmm__chat_tools_render(family, &r, buf, capacity, needed, &d);
    if (!st) return LLMM_OK;
    return model ? llmm__model_fail(model, st, "%s", d.msg) : st;
}
