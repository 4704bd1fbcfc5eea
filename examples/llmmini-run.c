/* llmmini-run: generate text from a prompt, streaming it to stdout; stats go to stderr.
 * With --chat: a multi-turn conversation on stdin/stdout in the model's chat format. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli_names.h"
#include "cli_files.h"
#include "llmmini.h"
#ifdef LLMM_REGISTER_CUDA
#include "llmmini-cuda.h"
#endif

typedef struct options {
    const char *model, *prompt, *dump_logits;
    int n_predict, n_threads, no_bos, print_ids;
    int chat, n_ctx, device, kv_block;
    const char *draft;           /* --draft: a draft model for speculative decoding */
    int draft_max, lookup;       /* --draft-max K, --lookup N */
    const char *template_name, *system_prompt;
    const char *grammar_file, *schema_file;
    int json_ws_free; /* --json-ws free: bounded whitespace between JSON tokens */
    const char *tools_file, *tool_family; /* --tools: -p is a user message that may call these */
    int tool_required;                    /* --tool-choice required: the reply must be a call */
    llmm_backend_kind backend;
    llmm_kv_type kv_type;
    llmm_sampler_params sampling;
    const char *lora[LLMM_MAX_SEQ_ADAPTERS]; /* --lora FILE[:SCALE], repeatable */
    float lora_scale[LLMM_MAX_SEQ_ADAPTERS];
    int n_lora;
} options;

static const char *chat_names(void) {
    const char *names = "";
    llmm_chat_template_names(&names);
    return names;
}

static void usage(FILE *out) {
    fprintf(out,
            "usage: llmmini-run -m MODEL -p PROMPT [-n N] [--temp T] [--top-k K] [--top-p P] [--min-p P]\n"
            "                   [--seed S] [-t THREADS] [-c N_CTX] [--backend B] [--device N] [--kv-type T]\n"
            "                   [--kv-block N] [--no-bos] [--ids] [--draft MODEL [--draft-max K] | --lookup N]\n"
            "                   [--dump-logits PATH] [--grammar FILE | --json-schema FILE [--json-ws MODE]]\n"
            "                   [--lora FILE[:SCALE]]...\n"
            "       llmmini-run -m MODEL --chat [--template NAME] [--system TEXT] [-n N] [sampling options]\n"
            "  -n N               tokens to generate (default 128)\n"
            "  --temp T           temperature; 0 is greedy (default 0.8)\n"
            "  --top-k K          keep the K most likely tokens, 0 = off (default 40)\n"
            "  --top-p P          nucleus sampling, 1 = off (default 0.95)\n"
            "  --min-p P          drop tokens below P x the best probability (default 0.05)\n"
            "  --seed S           random seed (default 0)\n"
            "  -t THREADS         CPU threads (default: physical cores)\n"
            "  --no-bos           do not add BOS to the prompt\n"
            "  --ids              print 'prompt: <ids>' and 'generated: <ids>' instead of text\n"
            "  --dump-logits PATH write the last prompt position's logits, one per line, first\n"
            "  -c N_CTX           context size in tokens (default: the model's, at most 4096)\n"
            "  --backend B        auto, cpu or cuda (default auto: CUDA when its module loads and\n"
            "                     finds a device, else the CPU). The CUDA module is libllmmini-cuda.so\n"
            "                     next to the library (or this program, when linked statically), on\n"
            "                     the loader's path, or the file LLMM_CUDA_MODULE names\n"
            "  --device N         the GPU a CUDA context runs on (default 0)\n"
            "  --kv-type T        KV cache element type: f16 (default), q8 or f32\n"
            "  --draft MODEL      speculative decoding with this draft model (same vocabulary): each\n"
            "                     step checks its guesses in one pass; greedy output is unchanged\n"
            "  --draft-max K      guesses per step at most, 1..32 (default 8)\n"
            "  --lookup N         speculative decoding by prompt lookup: guess what followed the last\n"
            "                     N tokens where they occurred before (no draft model)\n"
            "  --kv-block N       positions per KV block, a power of two in 1..1024 (default 16)\n"
            "  --grammar FILE     constrain the output to the GBNF grammar in FILE (start rule root)\n"
            "  --json-schema FILE constrain the output to JSON valid against the schema in FILE\n"
            "  --json-ws MODE     whitespace between JSON tokens: compact (default, none) or free\n"
            "                     (a line break and 20 spaces at most in each gap)\n"
            "  --tools FILE       tool calling: FILE is a JSON array of OpenAI-style tools; -p is the\n"
            "                     user's message (--system the system's), rendered in the model's tool\n"
            "                     family; a call the model starts is held to its tool's schema, and\n"
            "                     each call is printed as 'call: NAME ARGUMENTS' after the reply\n"
            "  --tool-family NAME the tool family instead of the model's (e.g. qwen2_5, llama3_1)\n"
            "  --tool-choice C    auto (default: text or a call) or required (a call)\n"
            "  --lora FILE[:SCALE] run with this LoRA adapter at SCALE (default 1); repeat for up\n"
            "                     to 8 adapters, summed\n"
            "  --chat             chat on stdin/stdout: one user message per line, '/reset' starts\n"
            "                     over, end of input quits; -n limits each reply\n"
            "  --template NAME    chat format to use instead of the model's, one of:\n"
            "                     %s\n"
            "  --system TEXT      system message that opens (and survives resets of) the chat\n",
            chat_names());
}

static int parse_number(const char *s, double *out) {
    char *end;
    errno = 0;
    *out = strtod(s, &end);
    return errno == 0 && end != s && *end == '\0';
}

/* Options that belong to one mode only. Returns 0 or 2 (message printed). */
static int check_mode_options(const options *o) {
    if (o->n_ctx < 0 || o->kv_block < 0) {
        fprintf(stderr, "llmmini-run: -c and --kv-block must be >= 0\n");
        return 2;
    }
    if (o->chat && (o->prompt || o->print_ids || o->dump_logits)) {
        fprintf(stderr, "llmmini-run: --chat reads its messages from stdin; -p, --ids and --dump-logits do not apply\n");
        return 2;
    }
    if (o->chat && (o->draft || o->lookup)) {
        fprintf(stderr, "llmmini-run: --draft and --lookup apply to -p PROMPT, not --chat\n");
        return 2;
    }
    if (o->lookup < 0 || o->draft_max < 0) {
        fprintf(stderr, "llmmini-run: --lookup and --draft-max must be >= 0\n");
        return 2;
    }
    if (!o->chat && (o->template_name || (o->system_prompt && !o->tools_file))) {
        fprintf(stderr, "llmmini-run: --template and --system need --chat (--system also --tools)\n");
        return 2;
    }
    if (o->tools_file && (o->chat || o->grammar_file || o->schema_file || o->draft || o->lookup || o->print_ids)) {
        fprintf(stderr, "llmmini-run: --tools excludes --chat, --grammar, --json-schema, --draft, --lookup, --ids\n");
        return 2;
    }
    if ((o->grammar_file || o->schema_file) && (o->chat || (o->grammar_file && o->schema_file))) {
        fprintf(stderr, "llmmini-run: --grammar and --json-schema exclude each other and --chat\n");
        return 2;
    }
    return 0;
}

/* FILE[:SCALE] into the next adapter slot; 0 (message printed) when there is no room or the
 * scale is not a number. A colon not followed by a number is part of the file name. */
static int parse_lora(char *arg, options *o) {
    if (o->n_lora == LLMM_MAX_SEQ_ADAPTERS) {
        fprintf(stderr, "llmmini-run: at most %d --lora adapters\n", LLMM_MAX_SEQ_ADAPTERS);
        return 0;
    }
    float scale = 1.0f;
    char *colon = strrchr(arg, ':');
    if (colon) {
        char *end = NULL;
        const float v = strtof(colon + 1, &end);
        if (end != colon + 1 && *end == '\0') {
            scale = v;
            *colon = '\0';
        }
    }
    o->lora[o->n_lora] = arg;
    o->lora_scale[o->n_lora++] = scale;
    return 1;
}

/* Load the --lora adapters and run sequence 0 with them; the context holds them from then on.
 * Returns 0, or the exit code after printing why. */
static int attach_adapters(const options *o, const llmm_model *m, llmm_context *ctx) {
    llmm_adapter *ads[LLMM_MAX_SEQ_ADAPTERS];
    char err[512] = "";
    int rc = 0;
    int n = 0;
    for (; n < o->n_lora; n++) {
        llmm_status st = llmm_adapter_load(m, o->lora[n], &ads[n]);
        if (st) {
            llmm_model_last_error(m, err, sizeof err);
            fprintf(stderr, "llmmini-run: cannot load adapter '%s': %s (%s)\n", o->lora[n], llmm_status_str(st), err);
            rc = 1;
            break;
        }
    }
    if (!rc) {
        llmm_status st = llmm_seq_set_adapters(ctx, 0, ads, o->lora_scale, (size_t)n);
        if (st) {
            fprintf(stderr, "llmmini-run: cannot use the adapters: %s (%s)\n", llmm_status_str(st),
                    llmm_context_last_error(ctx));
            rc = 1;
        }
    }
    /* the sequence keeps its references: ours can go now */
    for (int i = 0; i < n; i++) llmm_adapter_free(ads[i]);
    return rc;
}

/* Returns 0 on success, 2 on a usage error (message printed). */
/* An option with two values: *on = 1 for `second`, 0 for `first`; 0 (printed) for anything else. */
static int two_way(const char *option, const char *value, const char *first, const char *second, int *on) {
    if (strcmp(value, first) != 0 && strcmp(value, second) != 0) {
        fprintf(stderr, "llmmini-run: %s must be %s or %s, not '%s'\n", option, first, second, value);
        return 0;
    }
    *on = strcmp(value, second) == 0;
    return 1;
}

static int parse_args(int argc, char **argv, options *o) {
    llmm_sampler_params_default(&o->sampling, sizeof o->sampling);
    o->n_predict = 128;
    o->kv_type = LLMM_KV_F16;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
        double num = 0;
        int takes_number = !strcmp(a, "-n") || !strcmp(a, "--temp") || !strcmp(a, "--top-k") || !strcmp(a, "--top-p") ||
                           !strcmp(a, "--min-p") || !strcmp(a, "--seed") || !strcmp(a, "-t") || !strcmp(a, "-c") ||
                           !strcmp(a, "--device") || !strcmp(a, "--draft-max") || !strcmp(a, "--lookup") ||
                           !strcmp(a, "--kv-block");
        if (takes_number && (!val || !parse_number(val, &num))) {
            fprintf(stderr, "llmmini-run: %s needs a number\n", a);
            return 2;
        }
        if (!strcmp(a, "-m") && val) o->model = argv[++i];
        else if (!strcmp(a, "-p") && val) o->prompt = argv[++i];
        else if (!strcmp(a, "--dump-logits") && val) o->dump_logits = argv[++i];
        else if (!strcmp(a, "-n")) o->n_predict = (int)num, i++;
        else if (!strcmp(a, "--temp")) o->sampling.temperature = (float)num, i++;
        else if (!strcmp(a, "--top-k")) o->sampling.top_k = (int)num, i++;
        else if (!strcmp(a, "--top-p")) o->sampling.top_p = (float)num, i++;
        else if (!strcmp(a, "--min-p")) o->sampling.min_p = (float)num, i++;
        else if (!strcmp(a, "--seed")) o->sampling.seed = (uint64_t)num, i++;
        else if (!strcmp(a, "-t")) o->n_threads = (int)num, i++;
        else if (!strcmp(a, "-c")) o->n_ctx = (int)num, i++;
        else if (!strcmp(a, "--device")) o->device = (int)num, i++;
        else if (!strcmp(a, "--draft") && val) o->draft = argv[++i];
        else if (!strcmp(a, "--draft-max")) o->draft_max = (int)num, i++;
        else if (!strcmp(a, "--lookup")) o->lookup = (int)num, i++;
        else if (!strcmp(a, "--kv-block")) o->kv_block = (int)num, i++;
        else if (!strcmp(a, "--kv-type") && val) {
            if (!parse_kv_type(argv[++i], &o->kv_type)) {
                fprintf(stderr, "llmmini-run: --kv-type must be f16, q8 or f32, not '%s'\n", argv[i]);
                return 2;
            }
        }
        else if (!strcmp(a, "--grammar") && val) o->grammar_file = argv[++i];
        else if (!strcmp(a, "--json-schema") && val) o->schema_file = argv[++i];
        else if (!strcmp(a, "--json-ws") && val) {
            if (!two_way(a, argv[++i], "compact", "free", &o->json_ws_free)) return 2;
        }
        else if (!strcmp(a, "--chat")) o->chat = 1;
        else if (!strcmp(a, "--tools") && val) o->tools_file = argv[++i];
        else if (!strcmp(a, "--tool-family") && val) o->tool_family = argv[++i];
        else if (!strcmp(a, "--tool-choice") && val) {
            if (!two_way(a, argv[++i], "auto", "required", &o->tool_required)) return 2;
        }
        else if (!strcmp(a, "--template") && val) o->template_name = argv[++i];
        else if (!strcmp(a, "--system") && val) o->system_prompt = argv[++i];
        else if (!strcmp(a, "--backend") && val) {
            if (!parse_backend(argv[++i], &o->backend)) {
                fprintf(stderr, "llmmini-run: --backend must be auto, cpu or cuda, not '%s'\n", argv[i]);
                return 2;
            }
        } else if (!strcmp(a, "--no-bos")) o->no_bos = 1;
        else if (!strcmp(a, "--ids")) o->print_ids = 1;
        else if (!strcmp(a, "--lora") && val) {
            if (!parse_lora(argv[++i], o)) return 2;
        }
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            exit(0);
        } else {
            fprintf(stderr, "llmmini-run: unknown or incomplete option '%s' (see --help)\n", a);
            return 2;
        }
    }
    if (!o->model || (!o->prompt && !o->chat)) {
        fprintf(stderr, "llmmini-run: need -m MODEL and -p PROMPT (see --help)\n");
        return 2;
    }
    if (o->n_predict < 0) {
        fprintf(stderr, "llmmini-run: -n must be >= 0\n");
        return 2;
    }
    return check_mode_options(o);
}

static int stream_to_stdout(void *user, const char *bytes, size_t n, int complete_utf8) {
    (void)user;
    fwrite(bytes, 1, n, stdout);
    if (complete_utf8) fflush(stdout);
    return 0;
}

static void print_ids(const char *label, const llmm_token *ids, size_t n) {
    printf("%s:", label);
    for (size_t i = 0; i < n; i++) printf(" %d", ids[i]);
    printf("\n");
}

static llmm_status dump_logits(llmm_context *ctx, const llmm_token *ids, size_t n, const char *path) {
    llmm_status st = llmm_prefill(ctx, 0, ids, n, 0);
    const float *logits;
    size_t n_vocab;
    if (!st) st = llmm_logits(ctx, 0, &logits, &n_vocab);
    if (st) return st;
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "llmmini-run: cannot write '%s': %s\n", path, strerror(errno));
        return LLMM_ERR_IO;
    }
    for (size_t i = 0; i < n_vocab; i++) fprintf(f, "%.6f\n", logits[i]);
    return fclose(f) == 0 ? LLMM_OK : LLMM_ERR_IO;
}

static int fail(const char *what, llmm_status st, const char *detail) {
    fprintf(stderr, "llmmini-run: %s: %s%s%s\n", what, llmm_status_str(st), detail && *detail ? ": " : "",
            detail ? detail : "");
    return 1;
}

/* The grammar of --grammar or --json-schema into *out (NULL without either); 0 or 1 (printed). */
static int load_grammar(const options *o, const llmm_model *m, llmm_grammar **out) {
    *out = NULL;
    const char *path = o->grammar_file ? o->grammar_file : o->schema_file;
    if (!path) return 0;
    size_t len = 0;
    char *text = cli_read_file("llmmini-run", path, &len), err[512] = "";
    if (!text) return 1;
    llmm_status st = o->grammar_file ? llmm_grammar_create(m, text, len, "root", out, err, sizeof err)
                                     : llmm_grammar_from_json_schema_ws(m, text, len,
                                                                        o->json_ws_free ? LLMM_JSON_WS_FREE
                                                                                        : LLMM_JSON_WS_COMPACT,
                                                                        out, err, sizeof err);
    free(text);
    if (st) fprintf(stderr, "llmmini-run: %s: %s (%s)\n", path, err, llmm_status_str(st));
    return st != LLMM_OK;
}

/* --tools: what the reply streams to (stdout and the call parser) */
typedef struct tool_reply {
    llmm_chat_parser *parser;
    llmm_status st;
} tool_reply;

static int stream_to_parser(void *user, const char *bytes, size_t n, int complete_utf8) {
    tool_reply *r = user;
    stream_to_stdout(NULL, bytes, n, complete_utf8);
    if (!r->st) r->st = llmm_chat_parser_feed(r->parser, bytes, n);
    return 0;
}

/* The request (system, user, tools) rendered in family, malloc'd; NULL (printed) on failure. */
static char *render_tool_prompt(const options *o, llmm_model *m, const char *family, const llmm_tool *tools,
                                size_t n_tools) {
    llmm_chat_turn turns[2] = {{.role = "system", .content = o->system_prompt}, {.role = "user", .content = o->prompt}};
    llmm_chat_request req;
    llmm_chat_request_default(&req, sizeof req);
    req.messages = o->system_prompt ? turns : turns + 1;
    req.n_messages = o->system_prompt ? 2 : 1;
    req.tools = tools;
    req.n_tools = n_tools;
    size_t need = 0;
    char err[512] = "", *text = NULL;
    llmm_status st = llmm_chat_format_request(m, family, &req, NULL, 0, &need);
    if (st == LLMM_ERR_BUFFER_TOO_SMALL || st == LLMM_OK) {
        text = malloc(need + 1);
        st = text ? llmm_chat_format_request(m, family, &req, text, need + 1, &need) : LLMM_ERR_NO_MEMORY;
    }
    if (!st) return text;
    free(text);
    llmm_model_last_error(m, err, sizeof err);
    fail("cannot render the tools prompt", st, err);
    return NULL;
}

/* After the reply: each call on a line of its own; 0, or 1 when the output was no valid call. */
static int print_calls(llmm_chat_parser *parser) {
    llmm_chat_parse_result r = {.size = sizeof r};
    if (llmm_chat_parser_result(parser, 1, &r)) return fail("parsing the reply", LLMM_ERR_NO_MEMORY, NULL);
    printf("\n");
    for (size_t i = 0; i < r.n_calls; i++)
        printf("call: %s %s%s\n", r.calls[i].name, r.calls[i].arguments, r.calls[i].complete ? "" : " (incomplete)");
    if (r.malformed) fprintf(stderr, "llmmini-run: the reply holds text that is no call of the family's syntax\n");
    return r.malformed;
}

static int run_tools(const options *o, llmm_model *m, llmm_context *ctx) {
    size_t len = 0;
    char *json = cli_read_file("llmmini-run", o->tools_file, &len), err[512] = "";
    if (!json) return 1;
    llmm_tool_list *list = NULL;
    llmm_status st = llmm_tool_list_from_json(json, len, &list, err, sizeof err);
    free(json);
    if (st) return fail(o->tools_file, st, err);
    const llmm_tool *tools = NULL;
    size_t n_tools = 0;
    const char *family = o->tool_family, *trigger = NULL;
    llmm_tool_list_get(list, &tools, &n_tools);
    if (!family && (st = llmm_chat_tool_family_detect(m, &family))) llmm_model_last_error(m, err, sizeof err);
    char *prompt = st ? NULL : render_tool_prompt(o, m, family, tools, n_tools);
    llmm_grammar *g = NULL;
    llmm_chat_parser *parser = NULL;
    if (prompt && (st = llmm_grammar_from_tools(m, family, tools, n_tools, &g, err, sizeof err)) == LLMM_OK &&
        (o->tool_required || (st = llmm_chat_tool_trigger(family, &trigger)) == LLMM_OK) &&
        (st = llmm_chat_parser_create(family, 0, &parser)) == LLMM_OK)
        st = llmm_chat_parser_set_tools(parser, tools, n_tools); /* qwen3_5's values are typed by the schemas */
    int rc = prompt ? 0 : 1;
    if (prompt && st) rc = fail("tools", st, err);
    if (!rc) {
        tool_reply reply = {parser, LLMM_OK};
        llmm_generate_params gp;
        llmm_generate_params_default(&gp, sizeof gp);
        gp.max_tokens = o->n_predict;
        gp.tokenize_flags = LLMM_TOKENIZE_PARSE_SPECIAL | (o->no_bos ? 0 : LLMM_TOKENIZE_ADD_SPECIAL);
        gp.sampling = &o->sampling;
        gp.on_bytes = stream_to_parser;
        gp.user = &reply;
        gp.grammar = g;
        gp.grammar_trigger = trigger;
        llmm_generate_stats stats = {.size = sizeof stats};
        st = llmm_generate(ctx, prompt, &gp, &stats);
        if (!st) st = reply.st;
        rc = st ? fail("generation failed", st, llmm_context_last_error(ctx)) : print_calls(parser);
    }
    llmm_chat_parser_free(parser);
    llmm_grammar_free(g);
    free(prompt);
    llmm_tool_list_free(list);
    return rc;
}

static int run(const options *o, llmm_model *m, llmm_context *ctx, const llmm_model *draft) {
    uint32_t tok_flags = o->no_bos ? 0 : LLMM_TOKENIZE_ADD_SPECIAL;
    size_t n_prompt = 0;
    llmm_status st = llmm_tokenize(m, o->prompt, strlen(o->prompt), tok_flags, NULL, 0, &n_prompt);
    llmm_token *prompt = malloc((n_prompt + 1) * sizeof *prompt);
    llmm_token *out = malloc(((size_t)o->n_predict + 1) * sizeof *out);
    if (!prompt || !out) {
        free(prompt);
        free(out);
        return fail("memory", LLMM_ERR_NO_MEMORY, NULL);
    }
    st = llmm_tokenize(m, o->prompt, strlen(o->prompt), tok_flags, prompt, n_prompt, &n_prompt);
    if (!st && o->dump_logits) st = dump_logits(ctx, prompt, n_prompt, o->dump_logits);
    llmm_generate_params gp;
    llmm_generate_params_default(&gp, sizeof gp);
    gp.max_tokens = o->n_predict;
    gp.tokenize_flags = tok_flags;
    gp.sampling = &o->sampling;
    gp.on_bytes = o->print_ids ? NULL : stream_to_stdout;
    gp.out_tokens = out;
    gp.out_capacity = (size_t)o->n_predict;
    gp.spec_draft_model = draft;
    gp.spec_ngram = o->lookup;
    if (o->draft_max > 0) gp.spec_max_tokens = o->draft_max;
    llmm_grammar *grammar = NULL;
    if (!st && load_grammar(o, m, &grammar)) {
        free(prompt);
        free(out);
        return 1;
    }
    gp.grammar = grammar;
    llmm_generate_stats stats = {.size = sizeof stats};
    if (!st) st = llmm_generate(ctx, o->prompt, &gp, &stats);
    int rc = 0;
    if (st) {
        rc = fail("generation failed", st, llmm_context_last_error(ctx));
    } else {
        if (o->print_ids) {
            print_ids("prompt", prompt, n_prompt);
            print_ids("generated", out, stats.n_generated);
        } else {
            printf("\n");
        }
        static const char *const reasons[] = {"none", "max tokens", "end of text", "stop string", "callback",
                                              "context full", "grammar complete"};
        fprintf(stderr,
                "\nload %.1f ms | prompt %zu tokens, %.1f ms (%.1f tok/s) | first token %.1f ms | "
                "generated %zu tokens, %.1f ms (%.1f tok/s) | stop: %s\n",
                stats.load_ms, stats.n_prompt, stats.prompt_ms, stats.prompt_tokens_per_s, stats.first_token_ms,
                stats.n_generated, stats.generate_ms, stats.generate_tokens_per_s, reasons[stats.stop_reason % 7]);
        if (stats.spec_proposed)
            fprintf(stderr,
                    "speculative: %llu of %llu guesses kept (%.1f %%) | %llu target steps | draft %.1f ms | "
                    "speed-up estimate %.2fx\n",
                    (unsigned long long)stats.spec_accepted, (unsigned long long)stats.spec_proposed,
                    100.0 * stats.spec_acceptance, (unsigned long long)stats.n_target_steps, stats.spec_draft_ms,
                    stats.spec_speedup_estimate);
        if (grammar)
            fprintf(stderr, "grammar: %.1f ms in all, %.3f ms per token\n", stats.grammar_ms,
                    stats.n_generated ? stats.grammar_ms / (double)stats.n_generated : 0.0);
    }
    llmm_grammar_free(grammar);
    free(prompt);
    free(out);
    return rc;
}

/* ---------------------------------------------------------------- chat mode
 *
 * Every turn formats the WHOLE conversation with llmm_chat_format, tokenizes it, and compares
 * the tokens with those already in sequence 0: the KV of the common prefix is kept and only
 * the rest is prefilled. Formatting just the new turn would save a re-tokenization, but it is
 * not right in general: formats are not append-only (gemma folds the system text into the
 * first user turn, llama2 writes "[INST]" depending on the previous message, llama3 and
 * mistral-v3 trim replies), and the sampled reply tokens need not be the tokens its text gives
 * back. The common prefix is right by construction, and tokenizing costs far less than a
 * prefill; a divergence only costs re-prefilling from where it starts. */

typedef struct token_list {
    llmm_token *ids;
    size_t n, cap;
} token_list;

typedef struct chat_session {
    const options *o;
    const llmm_model *m;
    llmm_context *ctx;
    llmm_sampler *sampler;
    llmm_chat_message *msgs; /* roles are literals, contents malloc'd copies */
    size_t n_msgs, cap_msgs;
    size_t n_keep;           /* messages a reset keeps: the --system message */
    token_list in_kv;        /* exactly the tokens sequence 0 holds, in order */
    token_list prompt;       /* this turn's conversation as tokens */
    char *text;              /* this turn's conversation as text */
    size_t text_cap;
    char *reply;             /* the reply being generated (not NUL-terminated) */
    size_t reply_len, reply_cap;
    char *piece;
    size_t piece_cap;
    char err[512];           /* the message of the failure that ends the chat */
} chat_session;

/* items resized to hold need elements (capacity doubled); NULL when out of memory, in which
 * case items and *cap are unchanged. */
static void *grow(void *items, size_t *cap, size_t need, size_t elem_size) {
    if (need <= *cap) return items;
    size_t n = *cap ? *cap : 16;
    while (n < need) {
        if (n > SIZE_MAX / 2 / elem_size) return NULL;
        n *= 2;
    }
    void *p = realloc(items, n * elem_size);
    if (p) *cap = n;
    return p;
}

/* Keep the detail of a failure for the final message: from the model, context or sampler. */
static llmm_status model_error(chat_session *s, llmm_status st) {
    if (st) llmm_model_last_error(s->m, s->err, sizeof s->err);
    return st;
}

static llmm_status context_error(chat_session *s, llmm_status st) {
    if (st) snprintf(s->err, sizeof s->err, "%s", llmm_context_last_error(s->ctx));
    return st;
}

static llmm_status add_message(chat_session *s, const char *role, const char *text, size_t len) {
    llmm_chat_message *msgs = grow(s->msgs, &s->cap_msgs, s->n_msgs + 1, sizeof *msgs);
    if (msgs) s->msgs = msgs;
    char *copy = msgs ? malloc(len + 1) : NULL;
    if (!copy) return LLMM_ERR_NO_MEMORY;
    memcpy(copy, text, len);
    copy[len] = '\0';
    s->msgs[s->n_msgs++] = (llmm_chat_message){role, copy};
    return LLMM_OK;
}

static void drop_messages(chat_session *s, size_t from) {
    for (size_t i = from; i < s->n_msgs; i++) free((char *)s->msgs[i].content);
    s->n_msgs = from;
}

/* Forget all but the system message: messages, KV, and the sampler's penalty history. */
static llmm_status reset_chat(chat_session *s) {
    drop_messages(s, s->n_keep);
    s->in_kv.n = 0;
    llmm_sampler_reset(s->sampler);
    return context_error(s, llmm_seq_clear(s->ctx, 0));
}

/* Reset, keeping the newest message (the user's, being answered) after the system one. */
static llmm_status drop_history(chat_session *s) {
    llmm_chat_message newest = s->msgs[--s->n_msgs];
    llmm_status st = reset_chat(s);
    s->msgs[s->n_msgs++] = newest;
    return st;
}

static llmm_status format_conversation(chat_session *s, size_t *len) {
    const char *name = s->o->template_name;
    llmm_status st = llmm_chat_format(s->m, name, s->msgs, s->n_msgs, 1, s->text, s->text_cap, len);
    if (st != LLMM_ERR_BUFFER_TOO_SMALL) return model_error(s, st);
    char *text = grow(s->text, &s->text_cap, *len + 1, 1);
    if (!text) return LLMM_ERR_NO_MEMORY;
    s->text = text;
    return model_error(s, llmm_chat_format(s->m, name, s->msgs, s->n_msgs, 1, s->text, s->text_cap, len));
}

/* The text holds special-token text ("<|im_start|>"), so it is parsed; BOS as for -p. */
static llmm_status tokenize_conversation(chat_session *s, size_t len) {
    uint32_t flags = LLMM_TOKENIZE_PARSE_SPECIAL | (s->o->no_bos ? 0 : LLMM_TOKENIZE_ADD_SPECIAL);
    token_list *p = &s->prompt;
    llmm_status st = llmm_tokenize(s->m, s->text, len, flags, p->ids, p->cap, &p->n);
    if (st != LLMM_ERR_BUFFER_TOO_SMALL) return model_error(s, st);
    llmm_token *ids = grow(p->ids, &p->cap, p->n, sizeof *ids);
    if (!ids) return LLMM_ERR_NO_MEMORY;
    p->ids = ids;
    return model_error(s, llmm_tokenize(s->m, s->text, len, flags, p->ids, p->cap, &p->n));
}

/* Make sequence 0 hold the prompt: keep the KV of the common prefix and prefill the rest, at
 * least one token, whose logits start the reply. *reused: tokens kept. */
static llmm_status sync_kv(chat_session *s, size_t *reused) {
    const token_list *p = &s->prompt;
    size_t keep = 0;
    while (keep < s->in_kv.n && keep < p->n && s->in_kv.ids[keep] == p->ids[keep]) keep++;
    if (keep == p->n) keep--;
    llmm_token *ids = grow(s->in_kv.ids, &s->in_kv.cap, p->n, sizeof *ids);
    if (!ids) return LLMM_ERR_NO_MEMORY;
    s->in_kv.ids = ids;
    llmm_status st = context_error(s, llmm_seq_truncate(s->ctx, 0, keep));
    if (st) return st;
    s->in_kv.n = keep;
    *reused = keep;
    if ((st = context_error(s, llmm_prefill(s->ctx, 0, p->ids + keep, p->n - keep, 0)))) return st;
    memcpy(ids + keep, p->ids + keep, (p->n - keep) * sizeof *ids);
    s->in_kv.n = p->n;
    return LLMM_OK;
}

static llmm_status prepare_prompt(chat_session *s, size_t *reused) {
    size_t len = 0;
    llmm_status st = format_conversation(s, &len);
    if (!st) st = tokenize_conversation(s, len);
    if (!st && s->prompt.n == 0) {
        snprintf(s->err, sizeof s->err, "the conversation gives no tokens");
        st = LLMM_ERR_INVALID_ARG;
    }
    return st ? st : sync_kv(s, reused);
}

/* Prefill the conversation up to the new user message. When the context is full, start over
 * from the system message and this message; when even that does not fit, drop the message
 * and return LLMM_ERR_CONTEXT_FULL (said on stderr, not an error of the chat). */
static llmm_status begin_turn(chat_session *s, size_t *reused) {
    llmm_status st = prepare_prompt(s, reused);
    if (st != LLMM_ERR_CONTEXT_FULL) return st;
    if (s->n_msgs > s->n_keep + 1) {
        fprintf(stderr, "[context full: %zu tokens do not fit; conversation reset]\n", s->prompt.n);
        if ((st = drop_history(s))) return st;
        if ((st = prepare_prompt(s, reused)) != LLMM_ERR_CONTEXT_FULL) return st;
    }
    fprintf(stderr, "[message too long: %zu tokens do not fit in the context; dropped]\n", s->prompt.n);
    drop_messages(s, s->n_msgs - 1);
    return LLMM_ERR_CONTEXT_FULL;
}

static llmm_status sample_next(chat_session *s, llmm_token *tok) {
    const float *logits;
    size_t n_vocab;
    llmm_status st = context_error(s, llmm_logits(s->ctx, 0, &logits, &n_vocab));
    if (!st) st = llmm_sample(s->sampler, logits, n_vocab, tok);
    if (!st) st = llmm_sampler_accept(s->sampler, *tok);
    if (st) snprintf(s->err, sizeof s->err, "%s", llmm_sampler_last_error(s->sampler));
    return st;
}

/* The token's bytes into s->piece, then onto the reply; *n gets their count. */
static llmm_status add_piece(chat_session *s, llmm_token tok, size_t *n) {
    llmm_status st = llmm_token_to_piece(s->m, tok, 0, s->piece, s->piece_cap, n);
    if (st == LLMM_ERR_BUFFER_TOO_SMALL) {
        char *piece = grow(s->piece, &s->piece_cap, *n, 1);
        if (!piece) return LLMM_ERR_NO_MEMORY;
        s->piece = piece;
        st = llmm_token_to_piece(s->m, tok, 0, s->piece, s->piece_cap, n);
    }
    if (st) return model_error(s, st);
    char *reply = grow(s->reply, &s->reply_cap, s->reply_len + *n, 1);
    if (!reply) return LLMM_ERR_NO_MEMORY;
    s->reply = reply;
    memcpy(reply + s->reply_len, s->piece, *n);
    s->reply_len += *n;
    return LLMM_OK;
}

static llmm_status decode_one(chat_session *s, llmm_token tok) {
    llmm_token *ids = grow(s->in_kv.ids, &s->in_kv.cap, s->in_kv.n + 1, sizeof *ids);
    if (!ids) return LLMM_ERR_NO_MEMORY;
    s->in_kv.ids = ids;
    llmm_seq_id seq = 0;
    llmm_status st = llmm_decode(s->ctx, &seq, &tok, 1);
    if (st == LLMM_ERR_CONTEXT_FULL) return st;
    if (st) return context_error(s, st);
    ids[s->in_kv.n++] = tok;
    return LLMM_OK;
}

/* Sample, stream and decode until an end-of-turn token (EOS/EOT attribute; its text is the
 * format's business, so it is neither shown nor kept), -n tokens, or a full context. */
static llmm_status generate_reply(chat_session *s, size_t *n_generated, int *context_full) {
    s->reply_len = 0;
    for (int i = 0; i < s->o->n_predict; i++) {
        llmm_token tok;
        uint32_t attrs = 0;
        size_t n;
        llmm_status st = sample_next(s, &tok);
        if (!st) st = model_error(s, llmm_token_attrs(s->m, tok, &attrs));
        if (st) return st;
        if (attrs & LLMM_TOKEN_ATTR_EOS) break;
        (*n_generated)++;
        if ((st = add_piece(s, tok, &n))) return st;
        fwrite(s->piece, 1, n, stdout);
        fflush(stdout);
        if (i + 1 == s->o->n_predict) break; /* no logits are needed after the last token */
        st = decode_one(s, tok);
        if (st == LLMM_ERR_CONTEXT_FULL) {
            *context_full = 1;
            break;
        }
        if (st) return st;
    }
    return LLMM_OK;
}

static llmm_status chat_turn(chat_session *s, const char *line) {
    size_t reused = 0, n_generated = 0;
    int context_full = 0;
    llmm_status st = add_message(s, "user", line, strlen(line));
    if (!st) st = begin_turn(s, &reused);
    if (st == LLMM_ERR_CONTEXT_FULL) return LLMM_OK;
    if (!st) st = generate_reply(s, &n_generated, &context_full);
    if (st) return st;
    printf("\n");
    fflush(stdout);
    fprintf(stderr, "[kv: %zu tokens reused, %zu prefilled, %zu generated]\n", reused, s->prompt.n - reused,
            n_generated);
    if ((st = add_message(s, "assistant", s->reply, s->reply_len))) return st;
    if (!context_full) return LLMM_OK;
    fprintf(stderr, "[context full: conversation reset]\n");
    return reset_chat(s);
}

/* The sampler, the format (forced or the model's: fails early when there is none), and the
 * system message. */
static llmm_status chat_open(chat_session *s) {
    const options *o = s->o;
    llmm_status st = llmm_sampler_create(&o->sampling, &s->sampler);
    if (st) return st;
    const char *name = o->template_name;
    size_t need;
    if (name) st = llmm_chat_format(s->m, name, NULL, 0, 0, NULL, 0, &need);
    else st = llmm_chat_template_detect(s->m, &name);
    if (st && st != LLMM_ERR_BUFFER_TOO_SMALL) return model_error(s, st);
    fprintf(stderr, "chat: template %s%s; one message per line, /reset starts over, end of input quits\n", name,
            o->template_name ? "" : " (from the model)");
    if (o->system_prompt && (st = add_message(s, "system", o->system_prompt, strlen(o->system_prompt)))) return st;
    s->n_keep = s->n_msgs;
    return LLMM_OK;
}

static void chat_close(chat_session *s) {
    drop_messages(s, 0);
    free(s->msgs);
    free(s->in_kv.ids);
    free(s->prompt.ids);
    free(s->text);
    free(s->reply);
    free(s->piece);
    llmm_sampler_free(s->sampler);
}

static void strip_line_end(char *line) {
    size_t n = strlen(line);
    while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r')) line[--n] = '\0';
}

static llmm_status chat_loop(chat_session *s) {
    char *line = NULL;
    size_t cap = 0;
    llmm_status st = LLMM_OK;
    int interactive = isatty(STDIN_FILENO);
    while (!st) {
        if (interactive) printf("> "), fflush(stdout);
        if (getline(&line, &cap, stdin) < 0) break;
        strip_line_end(line);
        if (strcmp(line, "/reset") == 0) {
            st = reset_chat(s);
            fprintf(stderr, "[conversation reset]\n");
        } else if (*line) {
            st = chat_turn(s, line);
        }
    }
    free(line);
    return st;
}

static int chat(const options *o, llmm_model *m, llmm_context *ctx) {
    chat_session s = {.o = o, .m = m, .ctx = ctx};
    llmm_status st = chat_open(&s);
    if (!st) st = chat_loop(&s);
    chat_close(&s);
    return st ? fail("chat failed", st, s.err) : 0;
}

int main(int argc, char **argv) {
    options o = {0};
    int rc = parse_args(argc, argv, &o);
    if (rc) return rc;
#ifdef LLMM_REGISTER_CUDA
    /* the static build (make CUDA=1 STATIC=1) carries the CUDA backend inside */
    const llmm_status reg = llmm_cuda_register();
    if (reg) fprintf(stderr, "llmmini-run: the linked CUDA backend cannot be used: %s\n", llmm_status_str(reg));
#endif
    char err[512] = "";
    llmm_model_params mp;
    llmm_model_params_default(&mp, sizeof mp);
    mp.error_buf = err;
    mp.error_buf_size = sizeof err;
    llmm_model *m = NULL;
    llmm_status st = llmm_model_load(o.model, &mp, &m);
    if (st) return fail("cannot load model", st, err);
    llmm_context_params cp;
    llmm_context_params_default(&cp, sizeof cp);
    cp.n_threads = o.n_threads;
    cp.backend = o.backend;
    cp.device = o.device;
    cp.kv_type = o.kv_type;
    if (o.n_ctx > 0) cp.n_ctx = (uint32_t)o.n_ctx;
    if (o.kv_block > 0) cp.kv_block_size = (uint32_t)o.kv_block;
    llmm_context *ctx = NULL;
    st = llmm_context_create(m, &cp, &ctx);
    if (st) {
        llmm_model_last_error(m, err, sizeof err);
        llmm_model_free(m);
        return fail("cannot create context", st, err);
    }
    /* one-time costs (packed weight copies, graph captures, the first multi-row step) now, so
     * that the figures printed after the reply are steady-state */
    if ((st = llmm_context_warmup(ctx)))
        fprintf(stderr, "llmmini-run: no warm-up (%s): the figures below include one-time costs\n",
                llmm_context_last_error(ctx));
    llmm_model *draft = NULL;
    if (o.n_lora && attach_adapters(&o, m, ctx)) rc = 1;
    else if (o.draft && (st = llmm_model_load(o.draft, &mp, &draft))) rc = fail("cannot load the draft model", st, err);
    else if (o.tools_file) rc = run_tools(&o, m, ctx);
    else rc = o.chat ? chat(&o, m, ctx) : run(&o, m, ctx, draft);
    llmm_model_free(draft);
    llmm_context_free(ctx);
    llmm_model_free(m);
    return rc;
}
