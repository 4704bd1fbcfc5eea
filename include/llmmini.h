/*
 * llmmini.h: the public header of llmmini, an embeddable LLM inference library. (An app that
 * links the CUDA backend statically also includes llmmini-cuda.h, for llmm_cuda_register.)
 *
 * THREAD CONTRACT
 *   A model (llmm_model) is immutable once loaded: any number of contexts, on any
 *   threads, may share it, and every llmm_model_* / llmm_token* call on it may run
 *   concurrently. A context (llmm_context) and a sampler (llmm_sampler) are used by one
 *   thread at a time; different contexts run in parallel freely. Nothing in the library
 *   keeps global mutable state.
 *
 * ERRORS
 *   Every call that can fail returns llmm_status: LLMM_OK (0) or a negative code.
 *   llmm_status_str() names a code. The detailed message of the last failure is kept per
 *   handle (llmm_context_last_error, llmm_sampler_last_error, llmm_model_last_error); a
 *   failed llmm_model_load writes its message into the caller's params.error_buf and to
 *   the log callback. The library never aborts and never prints: logs go to a callback.
 *
 * ABI
 *   Parameter and result structs start with `uint32_t size` and are prepared by
 *   llmm_*_params_default(&p, sizeof p) (or by setting .size = sizeof s for results):
 *   the library only reads and writes the fields that the caller's struct size covers,
 *   so a binary built against an older header keeps working. Enum values are explicit and
 *   never reused. Before 1.0, breaking changes are listed in CHANGELOG.md. Fields appended
 *   to a struct follow a marker "--- since V (ABI n) ---": V is the release whose header first
 *   had them (LLMM_VERSION_MAJOR.MINOR, as in docs/api.md's "since" column; "unreleased" until
 *   the next release is numbered), n its LLMM_ABI_VERSION. A caller's struct may end at any
 *   marker. 0.1 is the first release: its markers divide fields appended while it was made.
 */
#ifndef LLMMINI_H
#define LLMMINI_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32) && defined(LLMM_BUILD_SHARED)
#define LLMM_API __declspec(dllexport)
#elif defined(__GNUC__)
#define LLMM_API __attribute__((visibility("default")))
#else
#define LLMM_API
#endif

/* ---------------------------------------------------------------- errors */

typedef enum llmm_status {
    LLMM_OK = 0,
    LLMM_ERR_INVALID_ARG = -1,      /* NULL pointer, out-of-range value, bad struct size */
    LLMM_ERR_NO_MEMORY = -2,        /* an allocation failed */
    LLMM_ERR_IO = -3,               /* a file could not be opened, mapped or read */
    LLMM_ERR_BAD_FILE = -4,         /* the file is malformed or hostile; message says what */
    LLMM_ERR_UNSUPPORTED = -5,      /* valid, but uses something this build does not know */
    LLMM_ERR_BUFFER_TOO_SMALL = -6, /* the caller's buffer is too small; needed size returned */
    LLMM_ERR_NOT_FOUND = -7,        /* no such key, token or sequence */
    LLMM_ERR_WRONG_TYPE = -8,       /* metadata key exists with another type */
    LLMM_ERR_CONTEXT_FULL = -9,     /* the sequence or the KV store has no room left */
    LLMM_ERR_ABORTED = -10,         /* a callback asked to stop */
    LLMM_ERR_BACKEND = -11,         /* the compute backend failed or is unavailable */
    LLMM_ERR_VOCAB_ONLY = -12,      /* the model was loaded without weights */
    LLMM_ERR_INTERNAL = -13,        /* a bug in llmmini; please report it */
    LLMM_ERR_NUMERICAL = -14        /* NaN or +inf logits (broken or hostile weights); no token */
} llmm_status;

/* A short constant English name for a status ("invalid argument"); never NULL, also for
 * unknown codes. Thread-safe. */
LLMM_API const char *llmm_status_str(llmm_status status);

/* ---------------------------------------------------------------- versions */

#define LLMM_VERSION_MAJOR 0
#define LLMM_VERSION_MINOR 1
#define LLMM_VERSION_PATCH 0
/* Bumped on every ABI-breaking change (before 1.0 too). */
#define LLMM_ABI_VERSION 1

/* The library's version as "MAJOR.MINOR.PATCH". Static storage; thread-safe. */
LLMM_API const char *llmm_version(void);
/* The ABI version the library was built with; compare with LLMM_ABI_VERSION. */
LLMM_API uint32_t llmm_abi_version(void);

/* ---------------------------------------------------------------- hooks */

typedef enum llmm_log_level {
    LLMM_LOG_ERROR = 0,
    LLMM_LOG_WARN = 1,
    LLMM_LOG_INFO = 2,
    LLMM_LOG_DEBUG = 3
} llmm_log_level;

/* Receives one complete message (no trailing newline). May be called from any thread that
 * uses the handle it was given to; must not call back into llmmini on that handle. */
typedef void (*llmm_log_fn)(void *user, llmm_log_level level, const char *message);

/* Optional allocator for every host allocation the library makes. alloc must return memory
 * aligned to at least 64 bytes or NULL; free receives only pointers from alloc (never NULL).
 * Must be thread-safe when a model is shared by threads. */
typedef struct llmm_allocator {
    void *(*alloc)(void *user, size_t size);
    void (*free)(void *user, void *ptr);
    void *user;
} llmm_allocator;

/* Progress of long work, fraction in [0, 1]. Return non-zero to cancel: the call then
 * returns LLMM_ERR_ABORTED and releases what it took. */
typedef int (*llmm_progress_fn)(void *user, float fraction);

/* Polled between layers and between prefill chunks; non-zero cancels with LLMM_ERR_ABORTED.
 * The sequence being computed is then left as it was before the call. */
typedef int (*llmm_abort_fn)(void *user);

/* ---------------------------------------------------------------- models */

typedef struct llmm_model llmm_model;
typedef int32_t llmm_token;

typedef struct llmm_model_params {
    uint32_t size;          /* sizeof(llmm_model_params), set by llmm_model_params_default */
    int32_t vocab_only;     /* 1: load the tokenizer and metadata only (default 0) */
    int32_t use_mmap;       /* 1: map the file (default); 0: read it into owned memory */
    llmm_progress_fn progress; /* optional, called while loading */
    void *progress_user;
    llmm_log_fn log;        /* optional; no logging when NULL */
    void *log_user;
    llmm_log_level log_level; /* messages above this level are dropped (default WARN) */
    const llmm_allocator *allocator; /* optional; must outlive the model */
    char *error_buf;        /* optional: receives the message of a failed load, NUL-terminated */
    size_t error_buf_size;
    /* --- since 0.1 (ABI 1), as the fields above: appended before that release --- */
    /* 1 (default): a backend may replace weights it reads often by a copy in its own faster
     * layout, made at their first use: the CPU backend, on x86-64 CPUs with AVX2 or AVX-512,
     * packs most quantized matrices (docs/api.md) during the first decode steps, up to 64 MiB
     * a step (each about twice as long; docs/api.md "Packed weights"). The copied pages of
     * the file mapping are dropped, so resident memory stays about the file's size. Results
     * are bit for bit the same. Only with use_mmap = 1. 0: compute from the file's bytes only. */
    int32_t repack_weights;
} llmm_model_params;

/* Fill *params with defaults. struct_size = sizeof(*params) as the caller compiled it.
 * Returns LLMM_ERR_INVALID_ARG for NULL or a size smaller than the first version's. */
LLMM_API llmm_status llmm_model_params_default(llmm_model_params *params, size_t struct_size);

/* Load a GGUF model (v2 or v3). params may be NULL for defaults. On success *out owns the
 * model until llmm_model_free. Every offset, size and count in the file is checked before
 * use: a malformed file gives LLMM_ERR_BAD_FILE with a message naming the problem, an
 * unknown architecture or tokenizer LLMM_ERR_UNSUPPORTED, a missing file LLMM_ERR_IO.
 * *out is set to NULL on failure. Thread-safe (loads share nothing). */
LLMM_API llmm_status llmm_model_load(const char *path, const llmm_model_params *params,
                                     llmm_model **out);

/* Release a model. NULL is ignored. No context created from it may be used afterwards. */
LLMM_API void llmm_model_free(llmm_model *model);

/* Copy the message of the last failed call on this model into buf (NUL-terminated, cut
 * to size) and return its full length. With one model shared by threads, the message is
 * that of the most recent failure from any thread. Returns 0 when nothing failed. */
LLMM_API size_t llmm_model_last_error(const llmm_model *model, char *buf, size_t size);

typedef enum llmm_tokenizer_kind {
    LLMM_TOKENIZER_NONE = 0,
    LLMM_TOKENIZER_SPM = 1,  /* SentencePiece-style ("llama") */
    LLMM_TOKENIZER_BPE = 2   /* byte-level BPE ("gpt2") */
} llmm_tokenizer_kind;

/* Facts about a loaded model. Strings are owned by the model and live as long as it. */
typedef struct llmm_model_info {
    uint32_t size;            /* set to sizeof(llmm_model_info) before the call */
    const char *architecture; /* general.architecture, e.g. "llama" */
    const char *name;         /* general.name, or "" */
    llmm_tokenizer_kind tokenizer;
    int32_t vocab_only;
    uint32_t n_vocab;
    uint32_t n_ctx_train;     /* context length the model was trained with */
    uint32_t n_embd;
    uint32_t n_layer;
    uint32_t n_head;
    uint32_t n_head_kv;
    uint32_t n_ff;
    uint32_t head_dim;
    uint64_t n_params;        /* elements in all tensors */
    uint64_t file_bytes;      /* size of the GGUF file */
    uint32_t gguf_version;
    uint32_t n_tensors;
    double load_ms;           /* wall time llmm_model_load took */
} llmm_model_info;

/* Fill *info (info->size must be set). Thread-safe. Errors: INVALID_ARG. */
LLMM_API llmm_status llmm_model_get_info(const llmm_model *model, llmm_model_info *info);

/* Typed metadata lookup by GGUF key. Strings point into the model (not copied, NUL-terminated
 * copies kept by the model) and live as long as it. Integer lookup accepts every GGUF integer
 * type and bool; float lookup accepts F32/F64. Errors: NOT_FOUND (no such key), WRONG_TYPE
 * (key has another type, e.g. an array), INVALID_ARG. Thread-safe. */
LLMM_API llmm_status llmm_model_meta_str(const llmm_model *model, const char *key,
                                         const char **out);
LLMM_API llmm_status llmm_model_meta_int(const llmm_model *model, const char *key,
                                         int64_t *out);
LLMM_API llmm_status llmm_model_meta_float(const llmm_model *model, const char *key,
                                           double *out);
/* Number of metadata keys, and the key at index i (0 <= i < count), to enumerate them. */
LLMM_API llmm_status llmm_model_meta_count(const llmm_model *model, size_t *count);
LLMM_API llmm_status llmm_model_meta_key(const llmm_model *model, size_t index,
                                         const char **key);

/* ---------------------------------------------------------------- tokens */

/* Flags for llmm_tokenize. */
#define LLMM_TOKENIZE_ADD_SPECIAL 1u   /* add BOS/EOS as the model's metadata asks */
#define LLMM_TOKENIZE_PARSE_SPECIAL 2u /* text like "<s>" becomes the control token */

/* Tokenize text_len bytes of text (need not be NUL-terminated; any bytes, invalid UTF-8
 * included: bytes that form no token become byte tokens <0xNN>, or the unknown token when
 * the vocabulary has no byte tokens). Writes up to capacity ids into out and the number of
 * ids in *n_tokens. When capacity is too small, returns LLMM_ERR_BUFFER_TOO_SMALL with the
 * needed count in *n_tokens (out may then be NULL with capacity 0 to ask for the size).
 * Thread-safe. Errors: INVALID_ARG, BUFFER_TOO_SMALL, NO_MEMORY, UNSUPPORTED (no tokenizer). */
LLMM_API llmm_status llmm_tokenize(const llmm_model *model, const char *text, size_t text_len,
                                   uint32_t flags, llmm_token *out, size_t capacity,
                                   size_t *n_tokens);

/* Flags for llmm_token_to_piece and llmm_detokenize. */
#define LLMM_PIECE_RENDER_SPECIAL 1u /* control tokens render as their text (default: empty) */
#define LLMM_PIECE_STRIP_SPACE 2u    /* drop one leading space (the SPM space prefix) */

/* The bytes a token stands for: SPM "▁" becomes a space, <0xNN> the byte NN. Not
 * NUL-terminated; *n_bytes receives the length (the needed one with BUFFER_TOO_SMALL).
 * Thread-safe. Errors: INVALID_ARG (token out of range), BUFFER_TOO_SMALL. */
LLMM_API llmm_status llmm_token_to_piece(const llmm_model *model, llmm_token token,
                                         uint32_t flags, char *buf, size_t capacity,
                                         size_t *n_bytes);

/* Concatenate the pieces of n tokens. LLMM_PIECE_STRIP_SPACE applies to the first piece
 * only, so detokenize(tokenize(text)) == text for SPM models. Same buffer rules. */
LLMM_API llmm_status llmm_detokenize(const llmm_model *model, const llmm_token *tokens,
                                     size_t n, uint32_t flags, char *buf, size_t capacity,
                                     size_t *n_bytes);

/* Token attribute bits (a token may have several). */
#define LLMM_TOKEN_ATTR_NORMAL 1u
#define LLMM_TOKEN_ATTR_UNKNOWN 2u
#define LLMM_TOKEN_ATTR_CONTROL 4u
#define LLMM_TOKEN_ATTR_USER_DEFINED 8u
#define LLMM_TOKEN_ATTR_UNUSED 16u
#define LLMM_TOKEN_ATTR_BYTE 32u
#define LLMM_TOKEN_ATTR_BOS 64u
#define LLMM_TOKEN_ATTR_EOS 128u /* ends generation (EOS, EOT) */

/* Attribute bits of a token. Errors: INVALID_ARG (NULL, token out of range). */
LLMM_API llmm_status llmm_token_attrs(const llmm_model *model, llmm_token token,
                                      uint32_t *attrs);

typedef enum llmm_special_token {
    LLMM_SPECIAL_BOS = 0,
    LLMM_SPECIAL_EOS = 1,
    LLMM_SPECIAL_UNK = 2,
    LLMM_SPECIAL_PAD = 3,
    LLMM_SPECIAL_SEP = 4,
    LLMM_SPECIAL_EOT = 5
} llmm_special_token;

/* The id of a special token. Errors: NOT_FOUND when the model defines none (or an invalid
 * one, which the loader drops with a warning), INVALID_ARG. */
LLMM_API llmm_status llmm_model_special_token(const llmm_model *model, llmm_special_token which,
                                              llmm_token *out);

/* ---------------------------------------------------------------- chat templates */

/* One message of a conversation. role is "system", "user" or "assistant" (exactly, lower
 * case); content is NUL-terminated UTF-8 and is copied verbatim (some formats trim ASCII
 * whitespace from its ends, as the reference engine does). Both stay owned by the caller. */
typedef struct llmm_chat_message {
    const char *role;
    const char *content;
} llmm_chat_message;

/* Render n messages as the prompt text a chat model expects, using a built-in format (no
 * Jinja is evaluated; the bytes match the reference engine's llama_chat_apply_template).
 * template_name forces a built-in format by name (see llmm_chat_template_names); NULL detects
 * it from the model's tokenizer.chat_template. add_generation_prompt != 0 appends the header
 * that opens the assistant's turn (formats whose prompt already ends where the model answers,
 * such as llama2 and mistral "[/INST]", add nothing).
 * The text holds special-token text ("<|im_start|>", "[INST]") but no leading BOS: tokenize it
 * with LLMM_TOKENIZE_PARSE_SPECIAL, and with LLMM_TOKENIZE_ADD_SPECIAL to add BOS as the
 * model's metadata asks. (llama2-sys-bos writes "<s>" between turns, as its template does.)
 * Buffer: writes the text into buf and its length in bytes into *needed. The text is
 * NUL-terminated only when capacity > *needed; capacity == *needed is enough for the bytes.
 * When capacity is smaller, returns LLMM_ERR_BUFFER_TOO_SMALL with *needed set and buf's
 * contents unspecified; buf may be NULL with capacity 0 to ask for the size. Allocates
 * nothing. Thread-safe (the model is only read; a failure's message is kept on the model).
 * Errors: INVALID_ARG (NULL model or needed, NULL messages with n > 0, a NULL role or content,
 * a role other than the three), UNSUPPORTED (template_name is not built in; or, with NULL,
 * the model has no chat template or one of no built-in family: the message names the
 * formats the app may force), BUFFER_TOO_SMALL. */
LLMM_API llmm_status llmm_chat_format(const llmm_model *model, const char *template_name,
                                      const llmm_chat_message *messages, size_t n,
                                      int add_generation_prompt, char *buf, size_t capacity,
                                      size_t *needed);

/* The name of the built-in format llmm_chat_format(model, NULL, ...) would use, from the
 * model's tokenizer.chat_template. *name is static storage. Thread-safe.
 * Errors: INVALID_ARG, UNSUPPORTED (no template, or none built in; see llmm_chat_format). */
LLMM_API llmm_status llmm_chat_template_detect(const llmm_model *model, const char **name);

/* The names of the built-in formats, comma-separated ("chatml,llama2,..."), static storage.
 * New names may be added in later versions; none is removed. Thread-safe.
 * Errors: INVALID_ARG (NULL). */
LLMM_API llmm_status llmm_chat_template_names(const char **names_csv);

/* ---------------------------------------------------------------- tools (function calling)
 *
 * A conversation with tool definitions, tool calls and tool results, rendered in the syntax
 * of the model family's own template (the bytes the reference engine's Jinja rendering of
 * that template gives), and the model's output parsed back into content, reasoning and
 * calls. The families are separate from the legacy formats above: llmm_chat_tool_families
 * lists them; docs/chat.md gives each one's syntax. The element structs below (llmm_tool,
 * llmm_tool_call, llmm_chat_turn) are laid out in arrays and never grow: a later version
 * that needs more per element adds a parallel array to llmm_chat_request. */

/* A tool the model may call. name: [A-Za-z0-9_-], 1 to 64 bytes. description: UTF-8 or NULL
 * (rendered as ""). parameters: the JSON Schema of the arguments, as JSON text (an object),
 * or NULL for none ({} is rendered). Refused with INVALID_ARG and the reason: a schema that
 * does not parse, is not an object, is longer than LLMM_TOOL_SCHEMA_MAX_BYTES or nests deeper
 * than LLMM_TOOL_SCHEMA_MAX_DEPTH. */
typedef struct llmm_tool {
    const char *name;
    const char *description;
    const char *parameters;
} llmm_tool;

#define LLMM_TOOL_SCHEMA_MAX_BYTES 65536
#define LLMM_TOOL_SCHEMA_MAX_DEPTH 16
#define LLMM_TOOLS_MAX 128

/* One call: id (NULL or a caller's id, e.g. "call12345"), the tool's name, and its arguments
 * as JSON text (an object; rendered re-serialized in the template's spacing when it parses,
 * verbatim when it does not). */
typedef struct llmm_tool_call {
    const char *id;
    const char *name;
    const char *arguments;
} llmm_tool_call;

/* One message. role: "system", "user", "assistant" or "tool". content: UTF-8, or NULL (the
 * same as "", as the reference passes an assistant's null content). An assistant message may
 * carry calls (tool_calls, n_tool_calls) and reasoning (reasoning_content, NULL for none); a
 * "tool" message is the result of the call whose id is tool_call_id. */
typedef struct llmm_chat_turn {
    const char *role;
    const char *content;
    const llmm_tool_call *tool_calls;
    size_t n_tool_calls;
    const char *tool_call_id;
    const char *reasoning_content;
} llmm_chat_turn;

typedef struct llmm_chat_request {
    uint32_t size;                  /* sizeof(llmm_chat_request), set by llmm_chat_request_default */
    const llmm_chat_turn *messages; /* n_messages turns, caller-owned */
    size_t n_messages;
    const llmm_tool *tools; /* n_tools (at most LLMM_TOOLS_MAX) definitions; NULL/0: none */
    size_t n_tools;
    int32_t add_generation_prompt; /* nonzero (default 1): end with the assistant's header */
    int32_t enable_thinking;       /* -1 (default): the family's default; 0 off; 1 on */
    const char *date_string;       /* "Today Date" of Llama 3.x prompts; NULL (default): the
                                      template's own "26 Jul 2024" (the reference writes
                                      today's date unless the request pins one) */
} llmm_chat_request;

LLMM_API llmm_status llmm_chat_request_default(llmm_chat_request *request, size_t struct_size);

/* The tool-capable families, comma-separated ("qwen2_5,qwen3,..."), static storage. New names
 * may be added; none is removed. Errors: INVALID_ARG (NULL). */
LLMM_API llmm_status llmm_chat_tool_families(const char **names_csv);

/* The tool family of the model's tokenizer.chat_template (*name static storage), from marker
 * strings as for llmm_chat_template_detect. Thread-safe.
 * Errors: INVALID_ARG, UNSUPPORTED (no template, or none of a tool family: the message lists
 * the families). */
LLMM_API llmm_status llmm_chat_tool_family_detect(const llmm_model *model, const char **name);

/* Render a request in a tool family's syntax: family names one (llmm_chat_tool_families), or
 * NULL detects it from the model (model may be NULL when family is given). The buffer rule is
 * llmm_chat_format's (*needed = the length; BUFFER_TOO_SMALL when capacity is smaller; NUL
 * only when capacity > *needed). Unlike llmm_chat_format the text keeps the template's own
 * leading BOS text where it prints one (e.g. "<|begin_of_text|>"), as the reference renders
 * it. Allocates working memory (freed before returning). Thread-safe.
 * Errors: INVALID_ARG (NULL arguments, a bad role, a malformed tool or call; the reason in
 * llmm_model_last_error when model is given), UNSUPPORTED (no such family, or the model's
 * template is of none), BUFFER_TOO_SMALL, NO_MEMORY. */
LLMM_API llmm_status llmm_chat_format_request(const llmm_model *model, const char *family,
                                              const llmm_chat_request *request, char *buf,
                                              size_t capacity, size_t *needed);

/* Tool definitions from JSON as OpenAI-style chat APIs take them: an array of
 * {"type": "function", "function": {"name", "description", "parameters"}} or of the inner
 * objects. Each is checked as llmm_chat_format_request checks tools. The list owns its strings.
 * Errors: INVALID_ARG (the reason in err), NO_MEMORY. */
typedef struct llmm_tool_list llmm_tool_list;
LLMM_API llmm_status llmm_tool_list_from_json(const char *json, size_t len, llmm_tool_list **out, char *err,
                                              size_t err_size);
/* The list's tools (valid until llmm_tool_list_free). Errors: INVALID_ARG. */
LLMM_API llmm_status llmm_tool_list_get(const llmm_tool_list *list, const llmm_tool **tools, size_t *n);
LLMM_API void llmm_tool_list_free(llmm_tool_list *list);

/* The text that opens a call in the family's output ("<tool_call>", "[TOOL_CALLS]", and
 * "{\"name\"" for Llama 3's bare JSON): the grammar_trigger of a lazy tool-call grammar.
 * Static storage. Errors: INVALID_ARG, UNSUPPORTED (no such family, or one without calls). */
LLMM_API llmm_status llmm_chat_tool_trigger(const char *family, const char **trigger);

/* A parser of a model's output in a tool family's syntax: feed it the generated text as it
 * comes (any split, even inside a UTF-8 character or a marker), read the content, reasoning
 * and calls so far at any time. A parser is used by one thread at a time. */
typedef struct llmm_chat_parser llmm_chat_parser;

/* What the text so far holds. Pointers stay valid until the next call on the parser.
 * While streaming, text that may be the start of a marker is held back from content; a call
 * whose arguments are still open has complete == 0 and its arguments as written so far. */
typedef struct llmm_chat_parsed_call {
    const char *id;        /* the id the model wrote, or NULL */
    const char *name;      /* the tool's name ("" while it is still being written) */
    const char *arguments; /* JSON text as the model wrote it; a family that writes arguments
                              otherwise (lfm2_5, qwen3_5, gemma4) gets them rewritten as
                              compact JSON */
    int32_t complete;      /* the call's closing marker (or its end) was seen */
} llmm_chat_parsed_call;

typedef struct llmm_chat_parse_result {
    uint32_t size;          /* set to sizeof(llmm_chat_parse_result) before the call */
    const char *content;    /* NUL-terminated */
    const char *reasoning;  /* NUL-terminated, "" when none */
    const llmm_chat_parsed_call *calls;
    size_t n_calls;
    int32_t malformed;      /* 1: text after a call's opening marker is no call of the family's
                               syntax, or text follows the calls (the reference refuses such
                               output): shown as content when final, held back while streaming */
} llmm_chat_parse_result;

/* family: a tool family name (NULL is INVALID_ARG). thinking: nonzero when the generation
 * prompt left the model inside its reasoning block (qwen3_5 opens "<think>\n" itself; ignored
 * for gemma4, whose prompt never opens its thought channel).
 * Errors: INVALID_ARG, UNSUPPORTED (no such family), NO_MEMORY. */
LLMM_API llmm_status llmm_chat_parser_create(const char *family, int thinking, llmm_chat_parser **out);
LLMM_API void llmm_chat_parser_free(llmm_chat_parser *parser);
/* Append len bytes of generated text. Errors: INVALID_ARG, NO_MEMORY (the parser keeps
 * what it had). */
LLMM_API llmm_status llmm_chat_parser_feed(llmm_chat_parser *parser, const char *text, size_t len);
/* The parse of the text so far. final != 0: the output has ended (nothing is held back; an
 * unclosed call is reported with complete == 0). Errors: INVALID_ARG, NO_MEMORY. */
LLMM_API llmm_status llmm_chat_parser_result(llmm_chat_parser *parser, int final, llmm_chat_parse_result *out);
LLMM_API const char *llmm_chat_parser_last_error(const llmm_chat_parser *parser);
/* The tools the prompt offered (NULL/0 forgets them), for families whose calls carry no types:
 * a qwen3_5 parameter whose schema says string ("type": "string", or an enum or const of
 * strings) stays a string ("10" stays "10"); without tools, a value that reads as JSON is
 * taken as JSON. The parser keeps what it needs; other families ignore the tools.
 * Errors: INVALID_ARG (a tool llmm_chat_format would refuse), NO_MEMORY (the parser keeps the
 * tools it had). */
LLMM_API llmm_status llmm_chat_parser_set_tools(llmm_chat_parser *parser, const llmm_tool *tools, size_t n_tools);

/* ---------------------------------------------------------------- contexts and memory */

typedef struct llmm_context llmm_context;

/* Where a context computes. CUDA is a module loaded at run time (libllmmini-cuda.so next to
 * this library, or the file the LLMM_CUDA_MODULE environment variable names): CUDA fails
 * llmm_context_create with LLMM_ERR_BACKEND and the reason when the module, its driver or a
 * device is missing; AUTO then runs on the CPU and logs the reason at INFO level. */
typedef enum llmm_backend_kind {
    LLMM_BACKEND_AUTO = 0, /* the best available: CUDA when its module loads and finds a device */
    LLMM_BACKEND_CPU = 1,
    LLMM_BACKEND_CUDA = 2
} llmm_backend_kind;

/* How the KV cache stores each key and value. */
typedef enum llmm_kv_type {
    LLMM_KV_F32 = 0, /* 4 bytes per value: exact, for debugging and reference comparisons */
    LLMM_KV_F16 = 1, /* 2 bytes per value (the default) */
    LLMM_KV_Q8 = 2   /* 1 byte per value plus one float scale per position, layer and K/V */
} llmm_kv_type;

typedef struct llmm_context_params {
    uint32_t size;          /* sizeof(llmm_context_params) */
    uint32_t n_ctx;         /* tokens per sequence; 0 = the model's training length, capped at 4096 */
    uint32_t n_seq_max;     /* sequence ids 0..n_seq_max-1 (default 1, as before sequences could be
                               created; up to 4096) */
    int32_t n_threads;      /* 0 = number of physical cores */
    uint32_t n_batch;       /* prefill chunk in tokens (default 256) */
    llmm_backend_kind backend;
    llmm_kv_type kv_type;   /* default LLMM_KV_F16 */
    llmm_abort_fn abort;    /* optional */
    void *abort_user;
    llmm_log_fn log;        /* optional */
    void *log_user;
    llmm_log_level log_level;
    /* --- since 0.1 (ABI 1), as the fields above: appended before that release --- */
    uint32_t kv_block_size; /* positions per KV block, a power of two in 1..1024 (default 16) */
    uint32_t n_ctx_total;   /* tokens the KV pool holds over all sequences together; 0 = enough
                               for every sequence to reach n_ctx (n_seq_max x n_ctx) */
    uint64_t kv_budget_bytes; /* non-zero: the KV pool's size in bytes instead (wins over
                               n_ctx_total); llmm_context_estimate tells what a budget buys */
    int32_t prefix_cache;   /* 1: keep full blocks of prompts for reuse by later sequences that
                               start with the same tokens (default 0) */
    int32_t device;         /* which accelerator a CUDA context runs on, 0 .. devices - 1 (default
                               0); a missing device fails CUDA with LLMM_ERR_BACKEND and sends
                               AUTO to the CPU. Ignored by the CPU backend. */
    llmm_progress_fn progress; /* optional: called while llmm_context_create prepares the weights
                               (the device upload of CUDA, which a model's first context on a
                               device pays), fraction of their bytes; non-zero cancels the
                               creation with LLMM_ERR_ABORTED */
    void *progress_user;
    /* --- since unreleased (ABI 1) --- */
    uint64_t adapter_budget_bytes; /* the adapter cache (llmm_adapter_register): adapters loaded
                               through it stay loaded up to this many bytes of A and B tensors,
                               least recently used evicted first, never one a sequence runs with;
                               0 = no limit (default) */
    uint32_t n_outputs_max; /* rows of logits one step computes at most: a decode's rows, a
                               speculative verify's rows, a prefill chunk's positions with
                               LLMM_PREFILL_ALL_LOGITS (chunks are cut to it). The activations hold
                               this many rows of n_vocab logits, not one per n_batch row. 0 (default):
                               max(9 x n_seq_max, 1 + LLMM_SPEC_MAX_TOKENS) (a verify of every
                               sequence with 8 guesses); raised to n_seq_max, capped at
                               max(n_batch, n_seq_max) */
} llmm_context_params;

LLMM_API llmm_status llmm_context_params_default(llmm_context_params *params, size_t struct_size);

/* Bytes a context with these params would allocate: the KV pool, activation buffers, logits,
 * the backend's working memory and the sequence tables, host and device memory together (on
 * the CPU backend all of it is host memory; llmm_context_estimate_memory tells them apart).
 * The model's weights count only where the backend copies them per context (not on the CPU:
 * there they are the model's, shared by its contexts). LoRA adapters are not counted: each holds
 * llmm_adapter_info.bytes of host memory (the adapter cache up to adapter_budget_bytes of them),
 * a context's first llmm_seq_set_adapters allocates its working buffers (docs/api.md, "LoRA
 * adapters"), and a device backend copies each adapter its sequences run with. params NULL =
 * defaults. Computes only; thread-safe. Errors: INVALID_ARG (also for params that
 * llmm_context_create refuses), VOCAB_ONLY. */
LLMM_API llmm_status llmm_context_estimate(const llmm_model *model, const llmm_context_params *params,
                                           size_t *bytes);

/* Where a context's memory would go, by side and by part (llmm_context_estimate_memory). The
 * parts add up: host_bytes + device_bytes = kv_pool_bytes + weights_bytes + activations_bytes
 * + scratch_bytes + other_host_bytes. */
typedef struct llmm_context_memory {
    uint32_t size;              /* set to sizeof(llmm_context_memory) before the call */
    uint64_t host_bytes;        /* the process's memory; llmm_context_estimate's number on the CPU */
    uint64_t device_bytes;      /* the accelerator's memory; 0 on the CPU backend */
    uint64_t kv_pool_bytes;     /* the KV pool: n_ctx_total or kv_budget_bytes bound it; for a
                                   model with recurrent layers (lfm2, qwen35) also their state
                                   slots, three per sequence id (n_seq_max), four with
                                   prefix_cache */
    uint64_t weights_bytes;     /* the backend's own copy of the model's weights, counted in full
                                   (on CUDA it is made by a model's first context on a device and
                                   shared by the later ones); 0 on the CPU, where contexts read the
                                   model's file mapping */
    uint64_t activations_bytes; /* one step's buffers: grow with max(n_batch, n_seq_max), their
                                   logits with n_outputs_max */
    uint64_t scratch_bytes;     /* the backend's working memory for one step */
    uint64_t other_host_bytes;  /* always host: sequence and block tables, a step's row arrays, the
                                   logits kept for llmm_logits, the context itself */
} llmm_context_memory;

/* Fill *out (out->size must be set) with the memory a context with these params would take,
 * as llmm_context_estimate does, split by side. Which side a part lives on is the backend's
 * choice: a backend with device memory (CUDA) keeps the KV pool, activations, scratch and its
 * copy of the weights there; the CPU backend keeps everything in host memory. The backend is
 * the one llmm_context_create would use: params->backend, with LLMM_BACKEND_AUTO resolved the
 * same way. params NULL = defaults. Computes only; thread-safe. Errors: INVALID_ARG (NULL
 * model or out, out->size too small, params llmm_context_create refuses), VOCAB_ONLY, BACKEND
 * (the requested backend is not available, as llmm_context_create would find). */
LLMM_API llmm_status llmm_context_estimate_memory(const llmm_model *model, const llmm_context_params *params,
                                                  llmm_context_memory *out);

/* Create a context over a model (which must outlive it). params NULL = defaults. The whole
 * KV pool is allocated here; prefill and decode allocate nothing (except logits rows beyond
 * n_seq_max for LLMM_PREFILL_ALL_LOGITS).
 * Errors: INVALID_ARG, VOCAB_ONLY, NO_MEMORY (also when kv_budget_bytes cannot hold one KV
 * block; the message gives the bytes needed), BACKEND, UNSUPPORTED (architecture or weight
 * type the backend cannot run). Thread-safe with respect to the model. */
LLMM_API llmm_status llmm_context_create(const llmm_model *model, const llmm_context_params *params,
                                         llmm_context **out);
/* Release a context. NULL is ignored. */
LLMM_API void llmm_context_free(llmm_context *ctx);
/* The message of the last failed call on ctx, "" if none. Valid until the next call on ctx. */
LLMM_API const char *llmm_context_last_error(const llmm_context *ctx);

/* Pay a context's one-time costs now rather than in the first request: runs dummy decode steps
 * of 1, 2, ... up to min(n_seq_max, 8) rows on sequence ids not in use, then one prompt step of up
 * to 16 positions with every row's logits (a speculative verify step's shape), so that the CUDA
 * backend captures its decode graph for each of those batch sizes and loads every kernel, and the
 * CPU backend makes all its packed weight copies (normal decode steps make them a bounded share
 * at a time) and touches the buffers of a many-row step. The dummy rows' K/V go to free blocks that are given
 * back afterwards; no sequence in use, no logits readable with llmm_logits and no stats other
 * than warmup_ms and the graph fields change. Call it once after llmm_context_create, from the
 * thread that uses the context; calling it again is cheap. Errors: INVALID_ARG, CONTEXT_FULL
 * (no unused sequence id or no free KV block: nothing was warmed; blocks of
 * the prefix cache are never evicted for it), BACKEND, NO_MEMORY. */
LLMM_API llmm_status llmm_context_warmup(llmm_context *ctx);

/* ---------------------------------------------------------------- sequences and their KV blocks */

typedef int32_t llmm_seq_id;

/* A sequence is an id in 0..n_seq_max-1 of one context, with the tokens it holds and their
 * K/V in blocks of the context's pool. Any id may be used directly (an id with no tokens is
 * simply empty), or obtained from llmm_seq_create/llmm_seq_fork so that ids are handed out
 * without collisions. Like every context call, these are for the thread using the context. */

/* Forget all tokens of seq; its blocks go back to the pool (shared ones when their last
 * holder lets go). The id stays in use when it came from llmm_seq_create. */
LLMM_API llmm_status llmm_seq_clear(llmm_context *ctx, llmm_seq_id seq);
/* Keep the first n_keep tokens of seq (n_keep <= its length), dropping the rest and releasing
 * blocks that no longer hold any of its positions. Errors: INVALID_ARG; UNSUPPORTED for a model
 * with recurrent layers when 0 < n_keep < length and n_keep is not the sequence's state
 * checkpoint (docs/api.md "Recurrent state"; nothing changes then). */
LLMM_API llmm_status llmm_seq_truncate(llmm_context *ctx, llmm_seq_id seq, size_t n_keep);
/* Number of tokens seq holds. */
LLMM_API llmm_status llmm_seq_length(llmm_context *ctx, llmm_seq_id seq, size_t *n);

/* An unused sequence id (empty, not handed out before and not freed since) into *seq; it is
 * in use until llmm_seq_free. Allocates nothing. Errors: INVALID_ARG, CONTEXT_FULL (all
 * n_seq_max ids are in use). */
LLMM_API llmm_status llmm_seq_create(llmm_context *ctx, llmm_seq_id *seq);
/* Clear seq and make its id available to llmm_seq_create again. Freeing an id that was
 * never created is allowed (it just clears it). Errors: INVALID_ARG. */
LLMM_API llmm_status llmm_seq_free(llmm_context *ctx, llmm_seq_id seq);
/* A new sequence *dst holding the same tokens as src, sharing all of src's KV blocks: no K/V
 * is copied and nothing is allocated. When either side later writes into a block both hold
 * (in practice only a partly filled last block), that block is copied first
 * (copy-on-write), so each side sees only its own tokens. Errors: INVALID_ARG, CONTEXT_FULL
 * (no unused id). */
LLMM_API llmm_status llmm_seq_fork(llmm_context *ctx, llmm_seq_id src, llmm_seq_id *dst);

/* ---------------------------------------------------------------- saved states */

/* A sequence's tokens and K/V, in a small versioned container: a header (magic, version, a
 * fingerprint of the model and the KV type, sizes, checksums) and a zstd-compressed payload
 * laid out by position (independent of the block size). Loading it into a context of the
 * same model and KV type restores the sequence exactly, skipping its prefill; generation can
 * continue from it (the next logits equal those of the original sequence bit for bit).
 * A state from another model or KV type, or a truncated or corrupted one, is refused with
 * LLMM_ERR_BAD_FILE and a message saying which check failed; nothing is loaded then. */

/* Write seq's state to the file at path (created or replaced). level: zstd level 1..22, 0 =
 * the default (3). Errors: INVALID_ARG, IO, NO_MEMORY. */
LLMM_API llmm_status llmm_seq_save(llmm_context *ctx, llmm_seq_id seq, const char *path, int32_t level);
/* The same into buf (capacity bytes); *n_bytes receives the bytes written. When they do not
 * fit: LLMM_ERR_BUFFER_TOO_SMALL and *n_bytes = a size that is sure to be enough (an upper
 * bound, as the compressed size is known only after compressing); buf may be NULL with
 * capacity 0 to ask for it. */
LLMM_API llmm_status llmm_seq_save_buffer(llmm_context *ctx, llmm_seq_id seq, int32_t level, void *buf,
                                          size_t capacity, size_t *n_bytes);
/* Replace seq's content with the state in the file at path. On any error seq is unchanged
 * (except a backend failure while copying the rows in, after which it is empty).
 * Errors: INVALID_ARG, IO, BAD_FILE (see above), CONTEXT_FULL (more tokens than n_ctx, or
 * too few free blocks in the pool), NO_MEMORY, BACKEND. */
LLMM_API llmm_status llmm_seq_load(llmm_context *ctx, llmm_seq_id seq, const char *path);
/* The same from n_bytes of memory (not retained). */
LLMM_API llmm_status llmm_seq_load_buffer(llmm_context *ctx, llmm_seq_id seq, const void *buf, size_t n_bytes);

/* ---------------------------------------------------------------- prefill, decode, logits */

/* Flags for llmm_prefill. */
#define LLMM_PREFILL_ALL_LOGITS 1u /* keep logits of every position (default: the last) */

/* Append n tokens to sequence seq (0 <= seq < n_seq_max) and run them through the model in
 * chunks of n_batch, writing their K/V. Afterwards llmm_logits(ctx, i) gives the logits of the
 * last position (i = 0) or, with LLMM_PREFILL_ALL_LOGITS, of position i of these n tokens.
 * Errors: INVALID_ARG, CONTEXT_FULL (the sequence would exceed n_ctx; nothing is written),
 * ABORTED (the sequence is restored to its previous length and tokens; a partly filled last block
 * it shared with a fork may have become its own copy), NO_MEMORY. */
LLMM_API llmm_status llmm_prefill(llmm_context *ctx, llmm_seq_id seq, const llmm_token *tokens,
                                  size_t n, uint32_t flags);

/* One new token for each of n sequences (seqs distinct): appends tokens[i] to seqs[i] and
 * computes its logits, read with llmm_logits(ctx, i). Same errors as llmm_prefill; on any
 * error no sequence changes. */
LLMM_API llmm_status llmm_decode(llmm_context *ctx, const llmm_seq_id *seqs,
                                 const llmm_token *tokens, size_t n);

typedef struct llmm_sampler llmm_sampler; /* the sampling section below */

/* llmm_decode, then out[i] = the token samplers[i] chooses from row i's logits, exactly as
 * llmm_sample(samplers[i], row i) would: the same tokens and the same RNG stream on every backend
 * (rows in order; a sampler may serve several rows). Like llmm_sample it does not accept the
 * tokens: call llmm_sampler_accept. On a backend with device memory (CUDA) the sampling runs
 * where the logits are and only the ids come back; the logits stay readable with llmm_logits,
 * which copies them to the host at its first call after this one. (A draw can differ from the
 * host's only when it lands within double rounding, about 1e-16, of the boundary between two
 * tokens: sums on a device add in another order.)
 * Errors: those of llmm_decode (then no sequence changes and out is untouched); INVALID_ARG for
 * NULL samplers, a NULL samplers[i] or out; after the decode succeeded, the sampling errors of
 * llmm_sample (a row with a NaN or +inf logit: NUMERICAL; a row whose logits are all -inf:
 * INVALID_ARG; either names the row, its sequence and position, out[row] = -1, the tokens stay
 * appended and the logits readable), BACKEND. */
LLMM_API llmm_status llmm_decode_sample(llmm_context *ctx, const llmm_seq_id *seqs, const llmm_token *tokens,
                                        size_t n, llmm_sampler *const *samplers, llmm_token *out);

/* Logits row i of the last prefill/decode: *out points to n_vocab floats owned by ctx,
 * valid until the next call that computes. Errors: INVALID_ARG, NOT_FOUND (no such row),
 * BACKEND (after llmm_decode_sample, copying the logits from the device failed). */
LLMM_API llmm_status llmm_logits(llmm_context *ctx, size_t i, const float **out, size_t *n_vocab);

/* ---------------------------------------------------------------- sampling */

typedef struct llmm_sampler_params {
    uint32_t size;           /* sizeof(llmm_sampler_params) */
    float temperature;       /* 0 = greedy (argmax, lowest id on ties); default 0.8 */
    int32_t top_k;           /* 0 = off; default 40 */
    float top_p;             /* 1 = off; default 0.95 */
    float min_p;             /* 0 = off; default 0.05 */
    float repeat_penalty;    /* 1 = off (default) */
    float frequency_penalty; /* 0 = off (default) */
    float presence_penalty;  /* 0 = off (default) */
    int32_t penalty_last_n;  /* window of accepted tokens the penalties see (default 64) */
    uint64_t seed;           /* same seed, same draws on every platform (default 0) */
} llmm_sampler_params;

LLMM_API llmm_status llmm_sampler_params_default(llmm_sampler_params *params, size_t struct_size);
/* Create a sampler (params NULL = defaults). Errors: INVALID_ARG, NO_MEMORY. */
LLMM_API llmm_status llmm_sampler_create(const llmm_sampler_params *params, llmm_sampler **out);
LLMM_API void llmm_sampler_free(llmm_sampler *sampler);
LLMM_API const char *llmm_sampler_last_error(const llmm_sampler *sampler);
/* Choose a token from n_vocab logits (not modified). Does not accept it: call
 * llmm_sampler_accept with the token actually used, so the penalties see it. -inf masks a
 * token. Errors: INVALID_ARG (NULL, n_vocab 0 or above INT32_MAX, every logit -inf), NUMERICAL
 * (a NaN or +inf logit, which only broken or hostile weights give: the message names the first;
 * no token, nothing drawn), NO_MEMORY. Softmax runs in double after subtracting the largest
 * logit, so finite logits of any size (+-1e30, +-FLT_MAX) are safe. */
LLMM_API llmm_status llmm_sample(llmm_sampler *sampler, const float *logits, size_t n_vocab,
                                 llmm_token *out);
LLMM_API llmm_status llmm_sampler_accept(llmm_sampler *sampler, llmm_token token);
/* Forget accepted tokens and restart the RNG from the seed. */
LLMM_API llmm_status llmm_sampler_reset(llmm_sampler *sampler);

/* ---------------------------------------------------------------- generation */

/* Receives output bytes as they are produced. complete_utf8 is 1 when the bytes end on a
 * complete UTF-8 character (an incomplete tail is delivered again, completed, never split
 * across calls unless the model emits invalid UTF-8). Return non-zero to stop. */
typedef int (*llmm_stream_fn)(void *user, const char *bytes, size_t n, int complete_utf8);

typedef enum llmm_stop_reason {
    LLMM_STOP_NONE = 0,
    LLMM_STOP_MAX_TOKENS = 1,
    LLMM_STOP_EOS = 2,
    LLMM_STOP_STRING = 3,
    LLMM_STOP_CALLBACK = 4,
    LLMM_STOP_CONTEXT_FULL = 5,
    LLMM_STOP_GRAMMAR = 6 /* the grammar's sentence is complete: nothing may follow */
} llmm_stop_reason;

typedef struct llmm_grammar llmm_grammar; /* the grammars section below */

typedef struct llmm_generate_params {
    uint32_t size;                 /* sizeof(llmm_generate_params) */
    llmm_seq_id seq;               /* sequence to use (default 0); cleared first */
    int32_t max_tokens;            /* default 128 */
    uint32_t tokenize_flags;       /* default LLMM_TOKENIZE_ADD_SPECIAL */
    const llmm_sampler_params *sampling; /* NULL = llmm_sampler_params_default */
    const char *const *stop_strings;     /* optional, n_stop NUL-terminated strings */
    size_t n_stop;
    llmm_stream_fn on_bytes;       /* optional */
    void *user;
    llmm_token *out_tokens;        /* optional: generated ids are written here */
    size_t out_capacity;
    /* --- since unreleased (ABI 1) --- */
    /* speculative decoding (docs/api.md "Speculative decoding"): each step verifies the tokens
       a proposer guessed in one forward pass; greedy output is the same token for token as
       without, sampled output follows the same distribution */
    const llmm_model *spec_draft_model; /* optional draft model with the target's vocabulary (same
                                      tokens and special ids, else INVALID_ARG); it gets a
                                      context of its own for the call. Wins over spec_ngram */
    int32_t spec_max_tokens;       /* proposals per step at most, 1..LLMM_SPEC_MAX_TOKENS (default 8);
                                      a draft's length adapts within [1, spec_max_tokens] */
    int32_t spec_ngram;            /* prompt lookup: propose what followed the last spec_ngram tokens
                                      earlier in the sequence (prompt and output); 0 = off (default) */
    int32_t spec_min_ngram;        /* shorter matches tried down to this length (default 1) */
    /* grammars (docs/grammars.md): the output is a sentence of the grammar */
    const char *grammar_text;      /* optional NUL-terminated GBNF, start rule "root", compiled per call */
    const llmm_grammar *grammar;   /* optional, compiled for the context's model; wins over grammar_text.
                                      Not together with spec_draft_model or spec_ngram (INVALID_ARG) */
    const char *grammar_trigger;   /* optional, with a grammar: a lazy grammar. Output is free until
                                      it contains this text (1..LLMM_GRAMMAR_TRIGGER_MAX bytes); from
                                      the trigger's first byte on it must be a sentence of the grammar,
                                      which therefore starts with the trigger (e.g. "<tool_call>" and
                                      llmm_grammar_from_tools: free text, then a valid call, and the
                                      call's end stops generation with LLMM_STOP_GRAMMAR) */
    llmm_chat_parser *tool_parser; /* optional (llmm_chat_parser_create with the prompt's tool
                                      family): every byte on_bytes receives is fed to it as well
                                      (stop strings excluded), so that after the call
                                      llmm_chat_parser_result(tool_parser, 1, ...) holds the
                                      reply's content, reasoning and calls, and stats counts the
                                      calls. Use a fresh parser per call: it is fed, not reset */
} llmm_generate_params;

#define LLMM_GRAMMAR_TRIGGER_MAX 64

typedef struct llmm_generate_stats {
    uint32_t size;            /* set to sizeof(llmm_generate_stats) before the call */
    size_t n_prompt;
    size_t n_generated;
    double load_ms;           /* the model's load time */
    double prompt_ms;         /* prefill time */
    double first_token_ms;    /* from the call's start to the first generated token */
    double generate_ms;       /* time of all decode steps */
    double prompt_tokens_per_s;
    double generate_tokens_per_s;
    llmm_stop_reason stop_reason;
    /* --- since unreleased (ABI 1) --- */
    /* speculative decoding (all 0 without it, except n_target_steps) */
    uint64_t spec_proposed;   /* tokens the proposer guessed */
    uint64_t spec_accepted;   /* of those, tokens the target kept */
    double spec_acceptance;   /* spec_accepted / spec_proposed */
    uint64_t n_target_steps;  /* the target's forward steps after the prompt (verify or decode) */
    double spec_draft_ms;     /* time the proposer took (a draft model's prefill and decode) */
    double spec_speedup_estimate; /* generated tokens per target step, discounted by the draft's
                                 time: (n_generated / n_target_steps) * (1 - spec_draft_ms /
                                 generate_ms); what speculation gains where a verify step costs
                                 what a one-token step does (memory-bound decode) */
    double grammar_ms;        /* the grammar's share of generate_ms: checking the sampled token,
                                 masking and sampling again when it was refused, advancing the state */
    uint32_t n_tool_calls;    /* with params->tool_parser: the complete calls in its final parse */
    int32_t tool_malformed;   /* with params->tool_parser: 1 when its final parse is malformed (text
                                 after a call's marker that is no call, text after the last call) */
    /* the time between consecutive generated tokens of this call, as on_bytes receives them
       (tokens a speculative step accepted together come about 0 ms apart; EOS is not counted),
       from a fixed-size histogram: within 3.2 % of the true value, max exact; 0 with fewer
       than two tokens */
    double inter_token_ms_p50, inter_token_ms_p95, inter_token_ms_p99, inter_token_ms_max;
} llmm_generate_stats;

LLMM_API llmm_status llmm_generate_params_default(llmm_generate_params *params, size_t struct_size);

/* Tokenize prompt, prefill it into params->seq, then sample and decode up to max_tokens,
 * streaming text through on_bytes. Stops on EOS, a stop string (its text is not streamed),
 * max_tokens, a non-zero callback return, or a full context. stats may be NULL.
 * With a grammar (params->grammar or grammar_text) every token is chosen by llmm_grammar_sample
 * (logits come back to the host each step), EOS is possible only where the grammar may end, and
 * generation stops with LLMM_STOP_GRAMMAR as soon as nothing may follow.
 * Errors: those of llmm_prefill/llmm_decode; NUMERICAL when the model's logits hold a NaN or
 * +inf (the message names the sequence and position; that token is not produced); INVALID_ARG
 * for a grammar_text that does not compile (the message says where) or a grammar compiled for
 * another model; NOT_FOUND when no token may continue the grammar; a stop is not an error. */
LLMM_API llmm_status llmm_generate(llmm_context *ctx, const char *prompt,
                                   const llmm_generate_params *params, llmm_generate_stats *stats);

/* ---------------------------------------------------------------- grammars */

/* Grammars constrain sampling so that the generated text always belongs to a language: a GBNF
 * grammar (the syntax of llama.cpp's grammars, docs/grammars.md) or a JSON Schema. An
 * llmm_grammar is compiled once and is immutable apart from an internally locked cache of
 * token masks: any number of threads may use it at once. An llmm_grammar_state is one
 * sequence's position in it (the stacks of a pushdown matcher), used by one thread at a time
 * together with the states cloned from it (they share the mask cache of their grammar only).
 * Tokens are matched by the bytes llmm_token_to_piece gives them without flags, so a token may
 * cross rule boundaries or end inside a UTF-8 character; tokens without bytes (control tokens)
 * are never allowed, and end-of-generation tokens (LLMM_TOKEN_ATTR_EOS) are allowed exactly
 * when the text so far is a complete sentence of the grammar. (The llmm_grammar typedef is in
 * the generation section: llmm_generate_params takes one.) */
typedef struct llmm_grammar_state llmm_grammar_state;

/* Compile len bytes of GBNF text with start rule root (NULL = "root") into *out. model gives
 * the vocabulary the grammar will mask (it must outlive the grammar); NULL compiles a grammar
 * for llmm_grammar_state_accept_bytes only. The vocabulary's token table is built here (about
 * 0.1 s for a 150k vocabulary), so compile once and share. err (err_size bytes, may be NULL)
 * receives the reason for a failure: "line L, column C: expected ..." for syntax errors (columns
 * count characters from 1), undefined rules, a missing start rule and left recursion.
 * Errors: INVALID_ARG, NO_MEMORY. */
LLMM_API llmm_status llmm_grammar_create(const llmm_model *model, const char *gbnf, size_t len, const char *root,
                                         llmm_grammar **out, char *err, size_t err_size);
/* The same from a JSON Schema (len bytes of JSON), converted to GBNF by the library's schema
 * subset (docs/grammars.md); an unsupported keyword fails with INVALID_ARG and a message naming
 * it. The JSON is compact (no whitespace between tokens; before this release it allowed the
 * bounded whitespace LLMM_JSON_WS_FREE describes). Errors: INVALID_ARG, NO_MEMORY. */
LLMM_API llmm_status llmm_grammar_from_json_schema(const llmm_model *model, const char *schema, size_t len,
                                                   llmm_grammar **out, char *err, size_t err_size);

/* Whitespace between the tokens of constrained JSON. */
typedef enum llmm_json_whitespace {
    LLMM_JSON_WS_COMPACT = 0, /* none: {"a":1,"b":[2,3]}: fewer tokens, nowhere to wander */
    LLMM_JSON_WS_FREE = 1     /* at most a line break then 20 spaces or tabs in each gap */
} llmm_json_whitespace;

/* llmm_grammar_from_json_schema with a choice of whitespace.
 * Errors: INVALID_ARG (also an unknown whitespace value), NO_MEMORY. */
LLMM_API llmm_status llmm_grammar_from_json_schema_ws(const llmm_model *model, const char *schema, size_t len,
                                                      llmm_json_whitespace whitespace, llmm_grammar **out,
                                                      char *err, size_t err_size);
/* A grammar whose sentences are exactly one tool call in a tool family's syntax (see "tools"
 * above: llmm_chat_tool_families) to one of n_tools tools, its arguments compact JSON valid
 * against that tool's parameters schema: the "required" tool choice. family NULL detects it
 * from the model. The call is framed as the family's template writes calls, e.g.
 * <tool_call>\n{"name": "get_weather", "arguments": {...}}\n</tool_call> for qwen2_5; for
 * lfm2_5, <|tool_call_start|>[get_weather(location="Paris")]<|tool_call_end|>: keyword
 * arguments whose values are compact JSON; for qwen3_5, <parameter=KEY> blocks, a string value
 * raw (no '<'), others compact JSON; for gemma4, call:NAME{key:value} in its dialect (bare keys,
 * <|"|> strings) (docs/chat.md).
 * Errors: INVALID_ARG (a tool refused as by llmm_chat_format_request, or its schema refused by
 * the JSON-Schema subset, or a schema the family's syntax cannot express, e.g. a qwen3_5
 * parameter that may be a string or another type: the reason in err), UNSUPPORTED (no such
 * family, or one without a call syntax), NO_MEMORY. */
LLMM_API llmm_status llmm_grammar_from_tools(const llmm_model *model, const char *family, const llmm_tool *tools,
                                             size_t n_tools, llmm_grammar **out, char *err, size_t err_size);
/* Free a grammar; every state made from it must be freed first. NULL is allowed. */
LLMM_API void llmm_grammar_free(llmm_grammar *grammar);

/* A state at the start of grammar (which must outlive it). Errors: INVALID_ARG, NO_MEMORY. */
LLMM_API llmm_status llmm_grammar_state_create(const llmm_grammar *grammar, llmm_grammar_state **out);
/* An independent copy of state, for a forked sequence or a speculative draft: advancing one
 * never changes the other. Errors: INVALID_ARG, NO_MEMORY. */
LLMM_API llmm_status llmm_grammar_state_clone(const llmm_grammar_state *state, llmm_grammar_state **out);
/* Back to the start of the grammar. Errors: INVALID_ARG, NO_MEMORY. */
LLMM_API llmm_status llmm_grammar_state_reset(llmm_grammar_state *state);
/* NULL is allowed. */
LLMM_API void llmm_grammar_state_free(llmm_grammar_state *state);
/* The message of the state's last failure ("" when none); valid until the next call on it. */
LLMM_API const char *llmm_grammar_state_last_error(const llmm_grammar_state *state);

/* Advance by a token chosen for the sequence. An end-of-generation token is accepted when the
 * text may end here and changes nothing. Errors: INVALID_ARG (NULL, no vocabulary, token out
 * of range, or a token the grammar does not allow here: the state is then unchanged),
 * NO_MEMORY. */
LLMM_API llmm_status llmm_grammar_state_accept_token(llmm_grammar_state *state, llmm_token token);
/* Advance by n bytes of text (a UTF-8 character may be split across calls). Errors: INVALID_ARG
 * (the grammar does not allow these bytes here: the state is unchanged), NO_MEMORY. */
LLMM_API llmm_status llmm_grammar_state_accept_bytes(llmm_grammar_state *state, const char *bytes, size_t n);
/* *allowed = 1 when token may come next (see accept_token). Errors: INVALID_ARG, NO_MEMORY. */
LLMM_API llmm_status llmm_grammar_state_allows(llmm_grammar_state *state, llmm_token token, int *allowed);
/* *can_end = 1 when the text so far is a complete sentence (the grammar may end here);
 * *must_end = 1 when, moreover, nothing may follow. Either pointer may be NULL. */
LLMM_API llmm_status llmm_grammar_state_can_end(const llmm_grammar_state *state, int *can_end, int *must_end);
/* Set to -INFINITY the logits of the n_vocab tokens (the model's vocabulary size) that may not
 * come next. Errors: INVALID_ARG (n_vocab is not the grammar's vocabulary size), NO_MEMORY. */
LLMM_API llmm_status llmm_grammar_state_mask(llmm_grammar_state *state, float *logits, size_t n_vocab);
/* Choose the next token under the grammar: the sampler first samples the unmasked logits and,
 * when that token is allowed, it is the answer; otherwise the disallowed logits are masked (on
 * a copy: logits are not modified) and the sampler samples again. For greedy and for plain
 * temperature sampling this is the same distribution as sampling the masked logits; with top-k,
 * top-p or min-p the first draw's truncation sees the unmasked logits. Neither the sampler nor
 * the state accepts the token: call llmm_sampler_accept and llmm_grammar_state_accept_token.
 * Errors: those of llmm_sample, INVALID_ARG (n_vocab mismatch), NOT_FOUND (no token of the
 * vocabulary may come next: the grammar must end and the vocabulary has no end token, or it
 * needs a character no token holds), NO_MEMORY. */
LLMM_API llmm_status llmm_grammar_sample(llmm_sampler *sampler, llmm_grammar_state *state, const float *logits,
                                         size_t n_vocab, llmm_token *out);

/* ---------------------------------------------------------------- LoRA adapters */

/* An adapter is a small file of low-rank weight deltas for one base model, in the GGUF LoRA
 * layout the reference engine's converter writes (general.type "adapter", adapter.type "lora",
 * adapter.lora.alpha, tensors "<base tensor>.lora_a" [n_in, rank] and ".lora_b" [rank, n_out]).
 * A sequence running with adapter X at user scale s computes every adapted matmul as
 *     y = W x + scale * B (A x),   scale = s * alpha / rank (s when alpha is 0).
 * Like a model, an adapter is immutable once loaded: any number of contexts on any threads may
 * attach it; it must not outlive its model. Sequences of one context may run with different
 * adapters (or none) in the same llmm_decode: the base weights are read once for all rows.
 * The CPU and CUDA backends run adapters (on CUDA every adapted matmul but token_embd:
 * docs/api.md "LoRA adapters"). */
typedef struct llmm_adapter llmm_adapter;

/* Load and validate an adapter file for model. Tensors stay in the file's mapping (read with
 * the model's use_mmap setting). A file that is not a LoRA adapter, is for another
 * architecture, names a tensor the model lacks or that the forward pass does not multiply by,
 * has mismatched shapes, a rank of 0, a rank beyond the input width, a missing A or B half,
 * or A/B types other than F32, F16, BF16 and Q8_0 gives LLMM_ERR_BAD_FILE with a message
 * (llmm_model_last_error). On success *out owns the adapter until llmm_adapter_free.
 * Thread-safe with respect to the model. Errors: INVALID_ARG, IO, BAD_FILE, NO_MEMORY,
 * VOCAB_ONLY. */
LLMM_API llmm_status llmm_adapter_load(const llmm_model *model, const char *path, llmm_adapter **out);
/* The same from size bytes of memory, which are copied (the caller may free them at once). */
LLMM_API llmm_status llmm_adapter_load_memory(const llmm_model *model, const void *data, size_t size,
                                              llmm_adapter **out);
/* Drop the app's reference. Sequences still running with the adapter keep it until they are
 * given other adapters or their context is freed; the adapter is freed after the last. NULL
 * is ignored. Thread-safe. */
LLMM_API void llmm_adapter_free(llmm_adapter *adapter);

typedef struct llmm_adapter_info {
    uint32_t size;        /* set to sizeof(llmm_adapter_info) before the call */
    uint32_t rank;        /* the largest rank of its tensors */
    float alpha;          /* adapter.lora.alpha; 0: none (the scale is the user's) */
    uint32_t n_tensors;   /* base tensors it adapts (a fused Q/K/V tensor counts once) */
    uint64_t bytes;       /* memory it holds: its A and B tensors and the copies made
                           * at load for the kernels (B transposed; BF16/Q8_0 A widened) */
    uint64_t fingerprint; /* a hash of its tensors and alpha: equal adapters, equal numbers */
} llmm_adapter_info;

/* Fill *info (info->size must be set). Thread-safe. Errors: INVALID_ARG. */
LLMM_API llmm_status llmm_adapter_get_info(const llmm_adapter *adapter, llmm_adapter_info *info);

/* Sequences run with at most this many adapters at once. */
#define LLMM_MAX_SEQ_ADAPTERS 8

/* Run seq with adapters[0..n) at user scales scales[0..n) (summed; n = 0 detaches all;
 * scales NULL: all 1). Replaces seq's previous adapters and never touches other sequences.
 * The K/V seq already holds stays: tokens already in it were computed with the old adapters.
 * When that matters, llmm_seq_truncate(ctx, seq, 0) (or to the length the new adapters should
 * start from) and prefill those tokens again. Each adapter must be of ctx's model and appear
 * once. The first call on a context, and a call with a larger rank than any before, allocate
 * working memory; later swaps allocate nothing. A scale of 0 skips that adapter's work.
 * Errors: INVALID_ARG (bad seq, n > LLMM_MAX_SEQ_ADAPTERS, NULL or repeated adapter, an
 * adapter of another model, a non-finite scale), UNSUPPORTED (the context's backend cannot
 * run adapters, or on a GPU an adapter of token_embd), NO_MEMORY (also: the adapter's copy
 * in device memory, made at its first attach in a GPU context), CONTEXT_FULL (a GPU context's
 * table of resident adapters, (n_seq_max + 1) x 8 entries and at most 256, is all run with by
 * its sequences). On error seq's adapters are unchanged. */
LLMM_API llmm_status llmm_seq_set_adapters(llmm_context *ctx, llmm_seq_id seq, llmm_adapter *const *adapters,
                                           const float *scales, size_t n);
/* seq's adapters and scales: up to capacity of each into adapters and scales (either may be
 * NULL), their number into *n (BUFFER_TOO_SMALL when capacity is smaller). The pointers are
 * borrowed. Errors: INVALID_ARG, BUFFER_TOO_SMALL. */
LLMM_API llmm_status llmm_seq_get_adapters(llmm_context *ctx, llmm_seq_id seq, llmm_adapter **adapters,
                                           float *scales, size_t capacity, size_t *n);

/* ---------------------------------------------------------------- adapter cache */

/* A context can hold adapters by path: registered once (no I/O), loaded at their first use
 * by llmm_seq_use_adapters, kept loaded while they fit in adapter_budget_bytes and evicted
 * least recently used first when a load exceeds it. An adapter a sequence runs with is never
 * evicted (the cache may then hold more than its budget until it is detached). Using an adapter
 * that is loaded allocates nothing and reads no file. Like every context call, for the thread
 * using the context. */

/* Register the adapter file at path (copied) with ctx and return its id (0, 1, ...) in *id;
 * the same path registered again gets the same id. Nothing is read yet. Errors: INVALID_ARG,
 * NO_MEMORY. */
LLMM_API llmm_status llmm_adapter_register(llmm_context *ctx, const char *path, int32_t *id);
/* llmm_seq_set_adapters with registered adapters: loads those not loaded (errors of
 * llmm_adapter_load; seq then keeps its adapters), then evicts over budget. */
LLMM_API llmm_status llmm_seq_use_adapters(llmm_context *ctx, llmm_seq_id seq, const int32_t *ids,
                                           const float *scales, size_t n);

typedef struct llmm_adapter_cache_stats {
    uint32_t size;          /* set to sizeof(llmm_adapter_cache_stats) before the call */
    uint32_t n_registered;
    uint32_t n_loaded;      /* loaded now */
    uint64_t bytes;         /* bytes of the loaded adapters' tensors */
    uint64_t budget_bytes;  /* adapter_budget_bytes (0: no limit) */
    uint64_t hits;          /* uses of an adapter that was loaded */
    uint64_t loads;         /* uses that loaded it */
    uint64_t evictions;
    double load_ms;         /* wall time of all loads */
} llmm_adapter_cache_stats;

/* Fill *stats (stats->size must be set). Errors: INVALID_ARG. */
LLMM_API llmm_status llmm_adapter_cache_get_stats(llmm_context *ctx, llmm_adapter_cache_stats *stats);

typedef struct llmm_adapter_cache_entry {
    uint32_t size;          /* set to sizeof(llmm_adapter_cache_entry) before the call */
    const char *path;       /* owned by ctx, valid while it lives */
    int32_t loaded;         /* 1 while loaded */
    uint64_t bytes;         /* its tensors' bytes (0 until first loaded) */
    uint64_t loads, hits;
    double load_ms;         /* wall time of its loads, all of them */
    double last_load_ms;    /* of its latest load */
} llmm_adapter_cache_entry;

/* Fill *entry (entry->size must be set) for a registered id. Errors: INVALID_ARG, NOT_FOUND. */
LLMM_API llmm_status llmm_adapter_cache_get_entry(llmm_context *ctx, int32_t id, llmm_adapter_cache_entry *entry);

/* ---------------------------------------------------------------- speculative decoding */

/* Speculative decoding, for apps that run their own decode loop (llmm_generate does this
 * itself with the spec_* params). A speculator belongs to one context and, like it, to one
 * thread at a time. One round per sequence:
 *   1. llmm_speculator_propose: up to k guesses for what follows the sequence's tokens and its
 *      pending token (the one chosen last and not yet decoded);
 *   2. llmm_speculator_verify: one forward step over [pending, guesses...] of each sequence
 *      (many sequences at once, each with its own count), all rows' logits computed;
 *   3. llmm_speculator_accept per item: the target keeps the longest acceptable prefix of the
 *      guesses, chooses one more token (the new pending one), and the sequence is truncated
 *      to pending + kept guesses: the blocks of the rejected positions go back to the pool,
 *      nothing is copied (a model with recurrent layers computes pending + kept guesses again
 *      from the state checkpoint verify took, docs/api.md "Recurrent state"). Greedy samplers keep exactly the tokens plain decoding would give;
 *      sampling ones use rejection sampling (Leviathan et al. / Chen et al. 2023), which keeps
 *      the sampler's distribution exactly. */

#define LLMM_SPEC_MAX_TOKENS 32 /* proposals per sequence and round, at most */

typedef struct llmm_speculator llmm_speculator;

typedef struct llmm_speculator_params {
    uint32_t size;                  /* sizeof(llmm_speculator_params) */
    const llmm_model *draft_model;  /* a model with the context model's vocabulary (checked); it
                                       runs in its own context (same n_ctx, n_seq_max, backend
                                       and threads), one sequence per target sequence id */
    int32_t max_tokens;             /* k_max, 1..LLMM_SPEC_MAX_TOKENS (default 8) */
    int32_t ngram;                  /* prompt lookup when there is no draft model: longest
                                       n-gram to match, 0 = off (default) */
    int32_t min_ngram;              /* shortest n-gram to match (default 1) */
    const llmm_sampler_params *sampling; /* how a draft model guesses: NULL or temperature 0 =
                                       its argmax; else a draw from its distribution under these
                                       params without penalties (seed + 1), which sampled
                                       acceptance then uses */
} llmm_speculator_params;

/* One sequence's part of a verify step. */
typedef struct llmm_spec_item {
    llmm_seq_id seq;
    llmm_token pending;       /* the token chosen last, not yet in the sequence */
    const llmm_token *draft;  /* the guesses to check (n_draft of them), any source */
    size_t n_draft;           /* 0 .. LLMM_SPEC_MAX_TOKENS */
} llmm_spec_item;

LLMM_API llmm_status llmm_speculator_params_default(llmm_speculator_params *params, size_t struct_size);

/* A speculator over ctx (which must outlive it). params NULL = defaults (no proposer: verify
 * and accept work on guesses the app makes). Errors: INVALID_ARG (also a draft model with
 * another vocabulary: the message on ctx says what differs), NO_MEMORY, and those of
 * llmm_context_create for the draft's context. */
LLMM_API llmm_status llmm_speculator_create(llmm_context *ctx, const llmm_speculator_params *params,
                                            llmm_speculator **out);
LLMM_API void llmm_speculator_free(llmm_speculator *spec);

/* Guesses for what follows seq's tokens and then pending: up to min(capacity, the current
 * draft length) ids into out, their count into *n (0 when the proposer has none). The draft
 * length starts at max_tokens and adapts to how many guesses seq's recent rounds kept; after
 * rounds that kept none, guessing pauses (n = 0) for 1, 2, 4, ... up to 16 calls.
 * Errors: INVALID_ARG, and those of the draft model's prefill/decode. */
LLMM_API llmm_status llmm_speculator_propose(llmm_speculator *spec, llmm_seq_id seq, llmm_token pending,
                                             llmm_token *out, size_t capacity, size_t *n);

/* Append pending and the guesses of each of n items (distinct sequences) and compute every
 * row's logits in one forward step; llmm_logits then reads item i's rows, in item order, each
 * item's 1 + n_draft rows together. Errors: INVALID_ARG (also more rows in all than the
 * context's n_outputs_max), CONTEXT_FULL (then nothing changes), those of llmm_decode. */
LLMM_API llmm_status llmm_speculator_verify(llmm_speculator *spec, const llmm_spec_item *items, size_t n);

/* Decide item `item` of the last verify with sampler: out receives the kept guesses and then
 * the next token (the new pending one), *n_out their count (1 + kept, at most 1 + n_draft, so
 * capacity 1 + n_draft is enough), and the sequence keeps pending and the kept guesses. Every
 * token written to out is accepted into sampler (llmm_sampler_accept). RNG: greedy draws
 * nothing; sampling draws one number per guess examined, then one for the next token.
 * Errors: INVALID_ARG (no such item, or it was decided already), BUFFER_TOO_SMALL (capacity <
 * 1 + n_draft; nothing changes), the sampling errors of llmm_sample; with recurrent layers
 * also those of llmm_decode from computing the kept tokens again (the sequence is then back
 * where the verify step began). */
LLMM_API llmm_status llmm_speculator_accept(llmm_speculator *spec, size_t item, llmm_sampler *sampler,
                                            llmm_token *out, size_t capacity, size_t *n_out);

/* ---------------------------------------------------------------- context stats */

typedef struct llmm_context_stats {
    uint32_t size;              /* set to sizeof(llmm_context_stats) before the call */
    llmm_kv_type kv_type;
    uint32_t block_size;        /* positions per block */
    uint32_t n_seq_used;        /* sequence ids in use (created, or holding tokens) */
    uint64_t blocks_total;
    uint64_t blocks_used;       /* held by at least one sequence */
    uint64_t blocks_free;       /* free, plus cached prefix blocks that may be evicted */
    uint64_t blocks_shared;     /* held by more than one sequence */
    uint64_t blocks_cached;     /* prefix-cache blocks held by no sequence (evictable) */
    uint64_t kv_bytes;          /* bytes of the KV pool */
    uint64_t block_bytes;       /* bytes of one block (the attention layers, K and V) */
    double fragmentation;       /* unused slots in partly filled blocks / slots of used blocks */
    uint64_t tokens_prefilled;  /* since the context was created */
    uint64_t tokens_decoded;
    double prefill_ms;          /* wall time spent in llmm_prefill */
    double decode_ms;           /* wall time spent in llmm_decode */
    uint64_t prefix_hits;       /* tokens whose prefill the prefix cache saved */
    /* --- since 0.1 (ABI 1), as the fields above: appended before that release --- */
    /* where a context's cold start went, in wall milliseconds (0 for a phase that did not happen) */
    double module_load_ms;      /* loading and checking the backend module (0 for the CPU's) */
    double backend_init_ms;     /* the backend's start: on CUDA the device context and stream */
    double weights_ms;          /* preparing the weights: uploading them (CUDA; only the model's
                                   first context on a device pays it) or the CPU's checks */
    double warmup_ms;           /* llmm_context_warmup, all calls */
    double graph_capture_ms;    /* capturing decode steps as CUDA graphs, warm-up included */
    double first_token_ms;      /* the first llmm_prefill or llmm_decode: its whole wall time */
    uint32_t graphs;            /* decode-step graphs the backend holds (one per batch size) */
    uint64_t graph_replays;     /* decode steps run by replaying a graph */
    /* latency distributions since the context was created, from fixed-size histograms (no
       allocation per token; percentiles within 3.2 % of the true value, max exact; 0 before the
       first sample). A request is one llmm_generate call. */
    uint64_t n_requests;        /* llmm_generate calls that chose a first token */
    double request_first_token_ms_p50, request_first_token_ms_p95, request_first_token_ms_p99,
        request_first_token_ms_max; /* from a request's start to its first token */
    double inter_token_ms_p50, inter_token_ms_p95, inter_token_ms_p99,
        inter_token_ms_max;     /* between consecutive tokens of one request, over all requests */
    double step_ms_p50, step_ms_p95, step_ms_p99,
        step_ms_max;            /* each decode step's wall time (llmm_decode, llmm_decode_sample
                                   with its sampling, a speculative verify step): what an app that
                                   decodes by itself waits between tokens */
} llmm_context_stats;

/* Fill *stats (stats->size must be set) with the KV pool's occupancy, the work done so far and
 * the cold-start breakdown. Callers built before the cold-start fields pass the smaller size
 * and get the fields they know. Errors: INVALID_ARG. */
LLMM_API llmm_status llmm_context_get_stats(llmm_context *ctx, llmm_context_stats *stats);

/* ---------------------------------------------------------------- backends */

/* A context picks its backend with llmm_context_params.backend (llmm_backend_kind, in the
 * contexts section); the CUDA backend is a module the library loads at run time. An app linked
 * statically (libllmmini.a) cannot dlopen a module into itself; it links the module's archive
 * instead and registers it once, before creating contexts:
 *     cc app.o -lllmmini-cuda -lllmmini -L$CUDA_HOME/lib64 -lcublasLt_static -lculibos \
 *        -lcudart_static -lstdc++ -lzstd -lpthread -ldl -lrt -lm
 *   (-lcublasLt for -lcublasLt_static -lculibos where the toolkit has no static cuBLASLt)
 *     llmm_cuda_register();   (llmmini-cuda.h; defined by libllmmini-cuda.a)
 * Contexts asking for CUDA or AUTO then use the registered backend and load no module. */

/* A backend module's entry point (what libllmmini-cuda.so exports): its table for the given
 * backend API version, or NULL when it was built for another. */
typedef const void *(*llmm_backend_entry_fn)(uint32_t backend_api_version);

/* Register a statically linked backend for kind (only LLMM_BACKEND_CUDA today), in place of
 * its module, for the whole process. The entry is checked as a loaded module is (API version,
 * required slots); registering the same entry again is harmless, another one replaces it for
 * contexts created afterwards. Thread-safe. Errors: INVALID_ARG (other kind, NULL entry),
 * BACKEND (the entry's table is of another API version or incomplete). */
LLMM_API llmm_status llmm_backend_register(llmm_backend_kind kind, llmm_backend_entry_fn entry);

#ifdef __cplusplus
}
#endif
#endif /* LLMMINI_H */