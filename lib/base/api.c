/* Version, status names and parameter defaults: the parts of the API with no module. */
#include <string.h>

#include "common.h"

#define STR2(x) #x
#define STR(x) STR2(x)

LLMM_API const char *llmm_version(void) {
    return STR(LLMM_VERSION_MAJOR) "." STR(LLMM_VERSION_MINOR) "." STR(LLMM_VERSION_PATCH);
}

LLMM_API uint32_t llmm_abi_version(void) { return LLMM_ABI_VERSION; }

LLMM_API const char *llmm_status_str(llmm_status status) {
    switch (status) {
    case LLMM_OK: return "ok";
    case LLMM_ERR_INVALID_ARG: return "invalid argument";
    case LLMM_ERR_NO_MEMORY: return "out of memory";
    case LLMM_ERR_IO: return "I/O error";
    case LLMM_ERR_BAD_FILE: return "malformed model file";
    case LLMM_ERR_UNSUPPORTED: return "unsupported";
    case LLMM_ERR_BUFFER_TOO_SMALL: return "buffer too small";
    case LLMM_ERR_NOT_FOUND: return "not found";
    case LLMM_ERR_WRONG_TYPE: return "wrong type";
    case LLMM_ERR_CONTEXT_FULL: return "context full";
    case LLMM_ERR_ABORTED: return "aborted";
    case LLMM_ERR_BACKEND: return "backend error";
    case LLMM_ERR_VOCAB_ONLY: return "model loaded without weights";
    case LLMM_ERR_INTERNAL: return "internal error";
    case LLMM_ERR_NUMERICAL: return "numerical error";
    }
    return "unknown status";
}

/* Defaults for a params struct: zero it as far as the caller's struct reaches, then set our
 * defaults in the prefix both know. */
static int prepare(void *params, size_t struct_size, size_t first_version_size, void *ours, size_t our_size) {
    if (!params || struct_size < first_version_size || struct_size > UINT32_MAX) return 0;
    memset(params, 0, struct_size);
    uint32_t s = (uint32_t)our_size;
    memcpy(ours, &s, sizeof s);
    memcpy(params, ours, LLMM_MIN(struct_size, our_size));
    s = (uint32_t)struct_size;
    memcpy(params, &s, sizeof s);
    return 1;
}

LLMM_API llmm_status llmm_model_params_default(llmm_model_params *params, size_t struct_size) {
    llmm_model_params p = {0};
    p.use_mmap = 1;
    p.log_level = LLMM_LOG_WARN;
    p.repack_weights = 1;
    /* callers built against 0.1 know the fields up to error_buf_size */
    const size_t v1_size = offsetof(llmm_model_params, repack_weights);
    return prepare(params, struct_size, v1_size, &p, sizeof p) ? LLMM_OK : LLMM_ERR_INVALID_ARG;
}

LLMM_API llmm_status llmm_context_params_default(llmm_context_params *params, size_t struct_size) {
    llmm_context_params p = {0};
    p.n_seq_max = 1;
    p.n_batch = 256;
    p.backend = LLMM_BACKEND_AUTO;
    p.kv_type = LLMM_KV_F16;
    p.log_level = LLMM_LOG_WARN;
    p.kv_block_size = 16;
    /* callers built against 0.1 know the fields up to log_level */
    const size_t v1_size = offsetof(llmm_context_params, kv_block_size);
    return prepare(params, struct_size, v1_size, &p, sizeof p) ? LLMM_OK : LLMM_ERR_INVALID_ARG;
}

LLMM_API llmm_status llmm_sampler_params_default(llmm_sampler_params *params, size_t struct_size) {
    llmm_sampler_params p = {0};
    p.temperature = 0.8f;
    p.top_k = 40;
    p.top_p = 0.95f;
    p.min_p = 0.05f;
    p.repeat_penalty = 1.0f;
    p.penalty_last_n = 64;
    return prepare(params, struct_size, sizeof p, &p, sizeof p) ? LLMM_OK : LLMM_ERR_INVALID_ARG;
}

LLMM_API llmm_status llmm_chat_request_default(llmm_chat_request *request, size_t struct_size) {
    llmm_chat_request r = {0};
    r.add_generation_prompt = 1;
    r.enable_thinking = -1;
    return prepare(request, struct_size, sizeof r, &r, sizeof r) ? LLMM_OK : LLMM_ERR_INVALID_ARG;
}

LLMM_API llmm_status llmm_generate_params_default(llmm_generate_params *params, size_t struct_size) {
    llmm_generate_params p = {0};
    p.max_tokens = 128;
    p.tokenize_flags = LLMM_TOKENIZE_ADD_SPECIAL;
    p.spec_max_tokens = 8;
    p.spec_min_ngram = 1;
    /* callers built before speculative decoding know the fields up to out_capacity */
    const size_t v1_size = offsetof(llmm_generate_params, spec_draft_model);
    return prepare(params, struct_size, v1_size, &p, sizeof p) ? LLMM_OK : LLMM_ERR_INVALID_ARG;
}
