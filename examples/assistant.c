/* assistant: a spoken command turned into one tool call, valid against its tool's schema.
 *     usage: assistant MODEL.gguf TOOLS.json ["COMMAND"] [--family NAME] [--no-bos]
 *                      [--temp T] [--seed S] [-n MAX_TOKENS] [-t THREADS]
 *
 * What a voice assistant in a car or a game does after speech recognition: the transcript
 * ("set a timer for ten minutes"; the argument, else one line of stdin) and the tools the app
 * offers (an OpenAI-style JSON array) are rendered in the model's own tool format (the family
 * its chat template declares, or --family), and the reply is generated under the tools' call
 * grammar, so that it is a call from its first token ("required" tool choice: a command must
 * become an action, never prose) and its arguments always validate against the tool's schema.
 * The library's call parser reads the reply as it streams; the call is printed as one line of
 * JSON, {"name": ..., "arguments": {...}}, for the app to dispatch. Exit status 0: one complete
 * call printed; 1: an error (reported on stderr); 2: bad usage.
 *
 * A model without a chat template (stories260K) needs --family; families whose templates
 * write their BOS text themselves (llama3_1, llama3_2, mistral_nemo) need --no-bos. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llmmini.h"

enum { COMMAND_MAX = 1024 };

static const char system_prompt[] =
    "You are the voice assistant of a car. Turn the driver's command into a call to one of the tools.";

typedef struct options {
    const char *model, *tools, *command, *family;
    int no_bos, max_tokens, threads;
    float temperature;
    uint64_t seed;
} options;

static int usage(void) {
    fprintf(stderr, "usage: assistant MODEL.gguf TOOLS.json [\"COMMAND\"] [--family NAME] [--no-bos]\n"
                    "                 [--temp T] [--seed S] [-n MAX_TOKENS] [-t THREADS]\n"
                    "  COMMAND: the transcript of what the user said; without it, one line of stdin\n");
    return 2;
}

static int parse_args(int argc, char **argv, options *o) {
    *o = (options){.max_tokens = 256, .temperature = 0.0f, .seed = 1};
    int positional = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--no-bos")) o->no_bos = 1;
        else if (!strcmp(a, "--family") && v) o->family = argv[++i];
        else if (!strcmp(a, "--temp") && v) o->temperature = strtof(argv[++i], NULL);
        else if (!strcmp(a, "--seed") && v) o->seed = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(a, "-n") && v) o->max_tokens = atoi(argv[++i]);
        else if (!strcmp(a, "-t") && v) o->threads = atoi(argv[++i]);
        else if (a[0] == '-') return 0;
        else if (positional == 0) o->model = a, positional++;
        else if (positional == 1) o->tools = a, positional++;
        else if (positional == 2) o->command = a, positional++;
        else return 0;
    }
    return o->model && o->tools && o->max_tokens > 0 && o->threads >= 0;
}

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    char *text = NULL;
    long size = -1;
    if (f && fseek(f, 0, SEEK_END) == 0) size = ftell(f);
    if (size >= 0 && fseek(f, 0, SEEK_SET) == 0 && (text = malloc((size_t)size + 1)) != NULL) {
        *len = fread(text, 1, (size_t)size, f);
        text[*len] = '\0';
    }
    if (f) fclose(f);
    if (!text) fprintf(stderr, "assistant: cannot read %s\n", path);
    return text;
}

/* The conversation so far (system, the user's command, the tools) in the family's format. */
static char *render_prompt(llmm_model *model, const char *family, const char *command, const llmm_tool *tools,
                           size_t n_tools) {
    llmm_chat_turn turns[2] = {{.role = "system", .content = system_prompt}, {.role = "user", .content = command}};
    llmm_chat_request req;
    llmm_chat_request_default(&req, sizeof req);
    req.messages = turns;
    req.n_messages = 2;
    req.tools = tools;
    req.n_tools = n_tools;
    size_t need = 0;
    char *text = NULL;
    llmm_status st = llmm_chat_format_request(model, family, &req, NULL, 0, &need);
    if (st == LLMM_OK || st == LLMM_ERR_BUFFER_TOO_SMALL) {
        text = malloc(need + 1);
        st = text ? llmm_chat_format_request(model, family, &req, text, need + 1, &need) : LLMM_ERR_NO_MEMORY;
    }
    if (st == LLMM_OK) return text;
    char err[256] = "";
    llmm_model_last_error(model, err, sizeof err);
    fprintf(stderr, "assistant: cannot render the request: %s (%s)\n", err, llmm_status_str(st));
    free(text);
    return NULL;
}

/* s as a JSON string (tool names are plain, but the app's JSON must stay JSON whatever they are). */
static void print_json_string(const char *s) {
    putchar('"');
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') printf("\\%c", c);
        else if (c < 0x20) printf("\\u%04x", c);
        else putchar(c);
    }
    putchar('"');
}

/* Generate the call under the tools' grammar; 0 when one complete call was printed. */
static int call_tool(const options *o, llmm_model *model, llmm_context *ctx, const char *family,
                     const llmm_tool *tools, size_t n_tools, const char *prompt) {
    llmm_grammar *grammar = NULL;
    llmm_chat_parser *parser = NULL;
    char err[512] = "";
    llmm_status st = llmm_grammar_from_tools(model, family, tools, n_tools, &grammar, err, sizeof err);
    if (st == LLMM_OK) st = llmm_chat_parser_create(family, 0, &parser);
    /* qwen3_5's values carry no types: the tools' schemas say which stay strings */
    if (st == LLMM_OK) st = llmm_chat_parser_set_tools(parser, tools, n_tools);
    if (st != LLMM_OK) {
        fprintf(stderr, "assistant: %s: %s (%s)\n", family, err, llmm_status_str(st));
        llmm_grammar_free(grammar);
        return 1;
    }
    llmm_sampler_params sp;
    llmm_sampler_params_default(&sp, sizeof sp);
    sp.temperature = o->temperature;
    sp.seed = o->seed;
    llmm_generate_params gp;
    llmm_generate_params_default(&gp, sizeof gp);
    gp.max_tokens = o->max_tokens;
    gp.tokenize_flags = LLMM_TOKENIZE_PARSE_SPECIAL | (o->no_bos ? 0 : LLMM_TOKENIZE_ADD_SPECIAL);
    gp.sampling = &sp;
    gp.grammar = grammar;   /* a call from the first token: the "required" tool choice */
    gp.tool_parser = parser; /* fed every streamed byte by the library */
    llmm_generate_stats stats = {.size = sizeof stats};
    st = llmm_generate(ctx, prompt, &gp, &stats);
    llmm_chat_parse_result r = {.size = sizeof r};
    if (st == LLMM_OK) st = llmm_chat_parser_result(parser, 1, &r);
    int rc = 1;
    if (st != LLMM_OK) {
        fprintf(stderr, "assistant: generation failed: %s (%s)\n", llmm_context_last_error(ctx), llmm_status_str(st));
    } else if (r.n_calls != 1 || !r.calls[0].complete || r.malformed) {
        /* only a token budget too small for the arguments gets here: the grammar allows nothing else */
        fprintf(stderr, "assistant: no complete call in %zu tokens (stopped: %d); raise -n\n", stats.n_generated,
                (int)stats.stop_reason);
    } else {
        printf("{\"name\": ");
        print_json_string(r.calls[0].name);
        printf(", \"arguments\": %s}\n", r.calls[0].arguments);
        fprintf(stderr, "assistant: %s call in %zu tokens, %.0f ms (grammar %.1f ms)\n", family, stats.n_generated,
                stats.generate_ms, stats.grammar_ms);
        rc = 0;
    }
    llmm_chat_parser_free(parser);
    llmm_grammar_free(grammar);
    return rc;
}

int main(int argc, char **argv) {
    options o;
    if (!parse_args(argc, argv, &o)) return usage();
    char line[COMMAND_MAX];
    if (!o.command) { /* the speech recognizer's transcript, one line */
        if (!fgets(line, sizeof line, stdin)) return usage();
        line[strcspn(line, "\r\n")] = '\0';
        o.command = line;
    }
    size_t len = 0;
    char *json = read_file(o.tools, &len), err[512] = "";
    if (!json) return 1;
    llmm_tool_list *list = NULL;
    llmm_status st = llmm_tool_list_from_json(json, len, &list, err, sizeof err);
    free(json);
    if (st != LLMM_OK) return fprintf(stderr, "assistant: %s: %s (%s)\n", o.tools, err, llmm_status_str(st)), 1;
    const llmm_tool *tools = NULL;
    size_t n_tools = 0;
    llmm_tool_list_get(list, &tools, &n_tools);
    llmm_model *model = NULL;
    llmm_context *ctx = NULL;
    const char *family = o.family;
    char *prompt = NULL;
    int rc = 1;
    st = llmm_model_load(o.model, NULL, &model);
    if (st == LLMM_OK && !family && (st = llmm_chat_tool_family_detect(model, &family)) != LLMM_OK) {
        llmm_model_last_error(model, err, sizeof err);
        fprintf(stderr, "assistant: %s (name one with --family)\n", err);
    } else if (st != LLMM_OK) {
        fprintf(stderr, "assistant: %s: %s\n", o.model, llmm_status_str(st));
    }
    if (st == LLMM_OK) prompt = render_prompt(model, family, o.command, tools, n_tools);
    llmm_context_params cp;
    llmm_context_params_default(&cp, sizeof cp);
    cp.n_threads = o.threads; /* 0: the library's choice */
    if (prompt && (st = llmm_context_create(model, &cp, &ctx)) != LLMM_OK)
        fprintf(stderr, "assistant: cannot create a context: %s\n", llmm_status_str(st));
    if (prompt && ctx) rc = call_tool(&o, model, ctx, family, tools, n_tools, prompt);
    free(prompt);
    llmm_context_free(ctx);
    llmm_model_free(model);
    llmm_tool_list_free(list);
    return rc;
}
