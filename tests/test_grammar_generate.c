/* Generation under grammars: with stories260K and with a synthesized model of the Qwen2
 * vocabulary and random weights (so that only the grammar can make the output valid), sampled
 * generations always parse (JSON by the small parser below, arithmetic by a recursive-descent
 * checker, the choices and the tool call by their own checks) and stop when the grammar ends;
 * forked sequences with cloned grammar states go their own ways. The synthesis runs the
 * llmmini-synth built next to this test, as tests/test_synth.c does. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "llmmini.h"
#include "support/shared_data.h"
#include "support/fixtures.h"

/* ---------------------------------------------------------------- checkers */

typedef struct cursor {
    const char *s, *end;
} cursor;

static void skip_ws(cursor *c) {
    while (c->s < c->end && (*c->s == ' ' || *c->s == '\t' || *c->s == '\n' || *c->s == '\r')) c->s++;
}

static int eat(cursor *c, char ch) {
    if (c->s < c->end && *c->s == ch) return c->s++, 1;
    return 0;
}

static int is_digit(cursor *c) { return c->s < c->end && *c->s >= '0' && *c->s <= '9'; }

static int json_value(cursor *c, int depth);

static int json_string(cursor *c) {
    if (!eat(c, '"')) return 0;
    while (c->s < c->end && *c->s != '"') {
        unsigned char ch = (unsigned char)*c->s++;
        if (ch < 0x20) return 0;
        if (ch == '\\') {
            if (c->s >= c->end) return 0;
            char e = *c->s++;
            if (e == 'u') {
                for (int i = 0; i < 4; i++, c->s++)
                    if (c->s >= c->end || !strchr("0123456789abcdefABCDEF", *c->s) || !*c->s) return 0;
            } else if (!strchr("\"\\/bfnrt", e) || !e) {
                return 0;
            }
        } else if (ch >= 0x80) { /* a whole UTF-8 character */
            int n = (ch & 0xE0) == 0xC0 ? 1 : (ch & 0xF0) == 0xE0 ? 2 : (ch & 0xF8) == 0xF0 ? 3 : -1;
            if (n < 0 || ch < 0xC2 || ch > 0xF4) return 0;
            for (int i = 0; i < n; i++, c->s++)
                if (c->s >= c->end || ((unsigned char)*c->s & 0xC0) != 0x80) return 0;
        }
    }
    return eat(c, '"');
}

static int json_number(cursor *c) {
    eat(c, '-');
    if (eat(c, '0')) {
    } else if (is_digit(c)) {
        while (is_digit(c)) c->s++;
    } else {
        return 0;
    }
    if (eat(c, '.')) {
        if (!is_digit(c)) return 0;
        while (is_digit(c)) c->s++;
    }
    if (eat(c, 'e') || eat(c, 'E')) {
        if (!eat(c, '+')) eat(c, '-');
        if (!is_digit(c)) return 0;
        while (is_digit(c)) c->s++;
    }
    return 1;
}

static int json_word(cursor *c, const char *w) {
    size_t n = strlen(w);
    if ((size_t)(c->end - c->s) < n || memcmp(c->s, w, n)) return 0;
    c->s += n;
    return 1;
}

static int json_value(cursor *c, int depth) {
    if (depth > 64) return 0;
    skip_ws(c);
    if (c->s >= c->end) return 0;
    int ok;
    switch (*c->s) {
    case '{':
        c->s++;
        skip_ws(c);
        if (eat(c, '}')) return 1;
        do {
            skip_ws(c);
            if (!json_string(c)) return 0;
            skip_ws(c);
            if (!eat(c, ':') || !json_value(c, depth + 1)) return 0;
            skip_ws(c);
        } while (eat(c, ','));
        return eat(c, '}');
    case '[':
        c->s++;
        skip_ws(c);
        if (eat(c, ']')) return 1;
        do {
            if (!json_value(c, depth + 1)) return 0;
            skip_ws(c);
        } while (eat(c, ','));
        return eat(c, ']');
    case '"':
        ok = json_string(c);
        break;
    case 't':
        ok = json_word(c, "true");
        break;
    case 'f':
        ok = json_word(c, "false");
        break;
    case 'n':
        ok = json_word(c, "null");
        break;
    default:
        ok = json_number(c);
    }
    return ok;
}

/* A whole text is one JSON value (RFC 8259). */
static int is_json(const char *s, size_t n) {
    cursor c = {s, s + n};
    if (!json_value(&c, 0)) return 0;
    skip_ws(&c);
    return c.s == c.end;
}

static int arith_expr(cursor *c, int depth);

static int arith_factor(cursor *c, int depth) {
    if (depth > 64) return 0;
    if (eat(c, '-')) return arith_factor(c, depth + 1);
    if (eat(c, '(')) {
        eat(c, ' ');
        if (!arith_expr(c, depth + 1)) return 0;
        eat(c, ' ');
        return eat(c, ')');
    }
    if (!is_digit(c)) return 0;
    while (is_digit(c)) c->s++;
    if (eat(c, '.')) {
        if (!is_digit(c)) return 0;
        while (is_digit(c)) c->s++;
    }
    return 1;
}

static int arith_chain(cursor *c, int depth, const char *ops, int (*next)(cursor *, int)) {
    if (!next(c, depth)) return 0;
    for (;;) {
        cursor save = *c;
        eat(c, ' ');
        if (c->s < c->end && strchr(ops, *c->s) && *c->s) {
            c->s++;
            eat(c, ' ');
            if (!next(c, depth)) return 0;
        } else {
            *c = save;
            return 1;
        }
    }
}

static int arith_term(cursor *c, int depth) { return arith_chain(c, depth, "*/", arith_factor); }
static int arith_expr(cursor *c, int depth) { return arith_chain(c, depth, "+-", arith_term); }

/* expr " =" */
static int is_arithmetic(const char *s, size_t n) {
    cursor c = {s, s + n};
    return arith_expr(&c, 0) && json_word(&c, " =") && c.s == c.end;
}

static int is_choice(const char *s, size_t n) {
    static const char *const choices[] = {"look", "take key", "take lamp", "take sword", "go north", "go south",
                                          "go east", "go west", "open door", "wait", "quit"};
    for (size_t i = 0; i < sizeof choices / sizeof *choices; i++)
        if (strlen(choices[i]) == n && !memcmp(choices[i], s, n)) return 1;
    return 0;
}

/* {"tool": NAME, "arguments": {...}} with NAME one of three and JSON arguments */
static int is_tool_call(const char *s, size_t n) {
    if (!is_json(s, n)) return 0;
    return strstr(s, "\"tool\":") && (strstr(s, "\"get_weather\"") || strstr(s, "\"set_timer\"") ||
                                       strstr(s, "\"send_message\"")) &&
           strstr(s, "\"arguments\":");
}

/* ---------------------------------------------------------------- grammars under test */

/* Bounded versions of examples/grammars (every sentence is short, so that every generation
 * ends within max_tokens whatever the model prefers). */
typedef struct grammar_case {
    const char *name, *gbnf;
    int (*valid)(const char *, size_t);
} grammar_case;

static const grammar_case CASES[] = {
    {"json",
     "root   ::= value\n"
     "value  ::= object | array | string | number | (\"true\" | \"false\" | \"null\")\n"
     "object ::= \"{\" ws ( string \":\" ws leaf ( \",\" ws string \":\" ws leaf ){0,2} )? \"}\"\n"
     "array  ::= \"[\" ws ( leaf ( \",\" ws leaf ){0,2} )? \"]\"\n"
     "leaf   ::= string | number | \"true\" | \"false\" | \"null\" | \"[]\" | \"{}\"\n"
     "string ::= \"\\\"\" ( [^\"\\\\\\x00-\\x1F] | \"\\\\\" [\"\\\\nt] ){0,8} \"\\\"\"\n"
     "number ::= \"-\"? ( \"0\" | [1-9] [0-9]{0,4} ) ( \".\" [0-9]{1,3} )?\n"
     "ws     ::= \" \"?\n",
     is_json},
    {"choices",
     "root ::= \"look\" | \"take \" item | \"go \" direction | \"open door\" | \"wait\" | \"quit\"\n"
     "item ::= \"key\" | \"lamp\" | \"sword\"\n"
     "direction ::= \"north\" | \"south\" | \"east\" | \"west\"\n",
     is_choice},
    {"arithmetic",
     "root   ::= expr \" =\"\n"
     "expr   ::= term ( ws [-+] ws term ){0,3}\n"
     "term   ::= factor ( ws [*/] ws factor ){0,2}\n"
     "factor ::= number | \"(\" ws number ws [-+*/] ws number ws \")\"\n"
     "number ::= \"-\"? [0-9]{1,4} ( \".\" [0-9]{1,2} )?\n"
     "ws     ::= \" \"?\n",
     is_arithmetic},
    {"tool call",
     "root ::= \"{\" ws \"\\\"tool\\\":\" ws tool \",\" ws \"\\\"arguments\\\":\" ws args ws \"}\"\n"
     "tool ::= \"\\\"get_weather\\\"\" | \"\\\"set_timer\\\"\" | \"\\\"send_message\\\"\"\n"
     "args  ::= \"{\" ws ( pair ( ws \",\" ws pair ){0,2} )? ws \"}\"\n"
     "pair  ::= \"\\\"\" [a-z_]{1,8} \"\\\"\" ws \":\" ws value\n"
     "value ::= \"\\\"\" [^\"\\\\\\x00-\\x1F]{0,10} \"\\\"\" | \"-\"? ( \"0\" | [1-9] [0-9]{0,4} ) | \"true\" | \"false\" | \"null\"\n"
     "ws     ::= \" \"?\n",
     is_tool_call},
};
#define N_CASES (sizeof CASES / sizeof *CASES)

/* ---------------------------------------------------------------- generation */

typedef struct text_buf {
    char bytes[8192];
    size_t n;
} text_buf;

static int collect(void *user, const char *bytes, size_t n, int complete_utf8) {
    (void)complete_utf8;
    text_buf *t = user;
    assert_true(t->n + n < sizeof t->bytes);
    memcpy(t->bytes + t->n, bytes, n);
    t->n += n;
    t->bytes[t->n] = '\0';
    return 0;
}

/* n_runs generations per grammar with varying seeds and sampling modes: all must parse and stop
 * on EOS or the grammar's end, never on max_tokens. */
static void generate_all(llmm_model *m, int n_runs, int max_tokens) {
    llmm_context_params cp;
    llmm_context_params_default(&cp, sizeof cp);
    cp.n_ctx = 512;
    cp.n_threads = 1;
    llmm_context *ctx = make_context(m, &cp);
    for (size_t gi = 0; gi < N_CASES; gi++) {
        llmm_grammar *g = NULL;
        char err[256];
        const char *gbnf = CASES[gi].gbnf;
        if (llmm_grammar_create(m, gbnf, strlen(gbnf), NULL, &g, err, sizeof err)) fail_msg("%s: %s", CASES[gi].name, err);
        int by_grammar = 0, by_eos = 0;
        double grammar_ms = 0, gen_ms = 0;
        size_t tokens = 0;
        for (int run = 0; run < n_runs; run++) {
            llmm_sampler_params sp;
            llmm_sampler_params_default(&sp, sizeof sp);
            sp.seed = (uint64_t)run * 7919u + gi;
            /* every sampling mode: greedy, plain temperature, top-k, top-p, min-p, penalties */
            static const float temps[] = {0.0f, 1.5f, 0.8f, 1.0f, 1.2f};
            sp.temperature = temps[run % 5];
            sp.top_k = run % 5 == 2 ? 40 : 0;
            sp.top_p = run % 5 == 3 ? 0.9f : 1.0f;
            sp.min_p = run % 5 == 4 ? 0.05f : 0.0f;
            sp.repeat_penalty = run % 3 == 0 ? 1.3f : 1.0f;
            text_buf out = {.n = 0};
            llmm_generate_params gp;
            llmm_generate_params_default(&gp, sizeof gp);
            gp.max_tokens = max_tokens;
            gp.sampling = &sp;
            gp.on_bytes = collect;
            gp.user = &out;
            gp.grammar = g;
            llmm_generate_stats st = {.size = sizeof st};
            llmm_status s = llmm_generate(ctx, run % 2 ? "Once upon a time" : "The answer is", &gp, &st);
            if (s) fail_msg("%s run %d: %s", CASES[gi].name, run, llmm_context_last_error(ctx));
            if (st.stop_reason != LLMM_STOP_GRAMMAR && st.stop_reason != LLMM_STOP_EOS)
                fail_msg("%s run %d stopped with reason %d after %zu tokens: '%s'", CASES[gi].name, run, st.stop_reason,
                         st.n_generated, out.bytes);
            if (!CASES[gi].valid(out.bytes, out.n))
                fail_msg("%s run %d: output does not parse: '%s'", CASES[gi].name, run, out.bytes);
            by_grammar += st.stop_reason == LLMM_STOP_GRAMMAR;
            by_eos += st.stop_reason == LLMM_STOP_EOS;
            grammar_ms += st.grammar_ms;
            gen_ms += st.generate_ms;
            tokens += st.n_generated;
        }
        print_message("%-10s %d runs: %d ended by the grammar, %d by EOS; %zu tokens, grammar %.3f ms/token of %.3f\n",
                      CASES[gi].name, n_runs, by_grammar, by_eos, tokens, grammar_ms / (double)(tokens ? tokens : 1),
                      gen_ms / (double)(tokens ? tokens : 1));
        llmm_grammar_free(g);
    }
    /* text that does not compile, and a grammar of another model */
    llmm_generate_params gp;
    llmm_generate_params_default(&gp, sizeof gp);
    gp.grammar_text = "root ::= \"a\" |\n  ) ";
    assert_int_equal(llmm_generate(ctx, "x", &gp, NULL), LLMM_ERR_INVALID_ARG);
    assert_non_null(strstr(llmm_context_last_error(ctx), "line 2, column 3"));
    llmm_grammar *bytes_only = NULL;
    assert_int_equal(llmm_grammar_create(NULL, "root ::= \"a\"", 12, NULL, &bytes_only, NULL, 0), LLMM_OK);
    gp.grammar = bytes_only;
    assert_int_equal(llmm_generate(ctx, "x", &gp, NULL), LLMM_ERR_INVALID_ARG);
    llmm_grammar_free(bytes_only);
    /* grammar_text compiled per call */
    text_buf out = {.n = 0};
    gp.grammar = NULL;
    gp.grammar_text = "root ::= \"yes\" | \"no\"";
    gp.on_bytes = collect;
    gp.user = &out;
    llmm_generate_stats st = {.size = sizeof st};
    assert_int_equal(llmm_generate(ctx, "Is it?", &gp, &st), LLMM_OK);
    assert_true(!strcmp(out.bytes, "yes") || !strcmp(out.bytes, "no"));
    llmm_context_free(ctx);
}

static void test_stories260k_generations_parse(void **state) {
    (void)state;
    llmm_model *m = load_model("models/stories260K.gguf", NULL);
    generate_all(m, 200, 400);
    llmm_model_free(m);
}

static char synth_tool[1024];
static char qwen_model_path[128];

static void test_random_qwen2_vocab_generations_parse(void **state) {
    (void)state;
    snprintf(qwen_model_path, sizeof qwen_model_path, "/tmp/llmm-grammar-qwen-%ld.gguf", (long)getpid());
    synth_model(synth_tool, qwen_model_path, "--preset tiny --type q8_0 --dim 32 --layers 1 --heads 2 --kv-heads 1 --ff 64",
                "vocab/ggml-vocab-qwen2.gguf");
    llmm_model *m = load_model(qwen_model_path, NULL);
    unlink(qwen_model_path);
    /* Under an emulator (make test-arm, qemu) each sampled token's softmax over the 151,936-token
     * vocabulary is slow: 200 runs a grammar took the suite 10 minutes there. 50 still cover
     * every sampling mode and grammar on that architecture; the native run does all 200. */
    generate_all(m, under_emulator() ? 50 : 200, 400);
    llmm_model_free(m);
}

/* ---------------------------------------------------------------- forks */

/* One grammar-constrained choice from logits row `row`, accepted by sampler and state, its
 * bytes appended to out. Returns 1 when the sequence is finished (EOS or the grammar's end). */
static int choose(llmm_context *ctx, const llmm_model *m, size_t row, llmm_sampler *smp, llmm_grammar_state *gs,
                  text_buf *out, llmm_token *t) {
    const float *logits;
    size_t n_vocab, n = 0;
    assert_int_equal(llmm_logits(ctx, row, &logits, &n_vocab), LLMM_OK);
    assert_int_equal(llmm_grammar_sample(smp, gs, logits, n_vocab, t), LLMM_OK);
    assert_int_equal(llmm_sampler_accept(smp, *t), LLMM_OK);
    assert_int_equal(llmm_grammar_state_accept_token(gs, *t), LLMM_OK);
    uint32_t attrs = 0;
    assert_int_equal(llmm_token_attrs(m, *t, &attrs), LLMM_OK);
    if (attrs & LLMM_TOKEN_ATTR_EOS) return 1;
    assert_int_equal(llmm_token_to_piece(m, *t, 0, out->bytes + out->n, sizeof out->bytes - out->n - 1, &n), LLMM_OK);
    out->n += n;
    out->bytes[out->n] = '\0';
    int must_end = 0;
    assert_int_equal(llmm_grammar_state_can_end(gs, NULL, &must_end), LLMM_OK);
    return must_end;
}

static llmm_sampler *hot_sampler(uint64_t seed) {
    llmm_sampler_params sp;
    llmm_sampler_params_default(&sp, sizeof sp);
    sp.temperature = 1.5f;
    sp.top_k = 0;
    sp.top_p = 1.0f;
    sp.min_p = 0.0f;
    sp.seed = seed;
    llmm_sampler *s = NULL;
    assert_int_equal(llmm_sampler_create(&sp, &s), LLMM_OK);
    return s;
}

/* A sequence generates the start of a JSON value, then is forked with a clone of its grammar
 * state; both go on in one batch with their own samplers. Each output must parse on its own:
 * were the states shared, each would see the other's tokens and break. */
static void test_forks_keep_independent_states(void **state) {
    (void)state;
    llmm_model *m = load_model("models/stories260K.gguf", NULL);
    llmm_context_params cp;
    llmm_context_params_default(&cp, sizeof cp);
    cp.n_ctx = 512;
    cp.n_seq_max = 2;
    llmm_context *ctx = make_context(m, &cp);
    const char *gbnf = CASES[0].gbnf;
    llmm_grammar *g = NULL;
    assert_int_equal(llmm_grammar_create(m, gbnf, strlen(gbnf), NULL, &g, NULL, 0), LLMM_OK);
    int forks = 0, differed = 0;
    for (int trial = 0; trial < 40; trial++) {
        llmm_sampler *smp[2] = {hot_sampler((uint64_t)trial), hot_sampler((uint64_t)trial + 1000)};
        llmm_grammar_state *gs[2] = {NULL, NULL};
        assert_int_equal(llmm_grammar_state_create(g, &gs[0]), LLMM_OK);
        llmm_token prompt[16], t;
        const size_t n_prompt = tokenize(m, "Once", prompt, 16);
        llmm_seq_id seqs[2] = {0, -1};
        assert_int_equal(llmm_seq_clear(ctx, 0), LLMM_OK);
        assert_int_equal(llmm_prefill(ctx, 0, prompt, n_prompt, 0), LLMM_OK);
        text_buf text[2] = {{.n = 0}, {.n = 0}};
        int done[2] = {0, 0};
        for (int i = 0; i < 2 && !done[0]; i++) {
            done[0] = choose(ctx, m, 0, smp[0], gs[0], &text[0], &t);
            if (!done[0]) assert_int_equal(llmm_decode(ctx, &seqs[0], &t, 1), LLMM_OK);
        }
        if (!done[0]) {
            forks++;
            assert_int_equal(llmm_seq_fork(ctx, 0, &seqs[1]), LLMM_OK);
            assert_int_equal(llmm_grammar_state_clone(gs[0], &gs[1]), LLMM_OK);
            text[1] = text[0];
            size_t row[2] = {0, 0};
            for (int step = 0; step < 400 && !(done[0] && done[1]); step++) {
                llmm_seq_id batch_seq[2];
                llmm_token batch_tok[2];
                size_t n = 0;
                for (int k = 0; k < 2; k++) {
                    if (done[k]) continue;
                    done[k] = choose(ctx, m, row[k], smp[k], gs[k], &text[k], &t);
                    if (done[k]) continue;
                    batch_seq[n] = seqs[k];
                    batch_tok[n] = t;
                    row[k] = n++;
                }
                if (n) assert_int_equal(llmm_decode(ctx, batch_seq, batch_tok, n), LLMM_OK);
            }
            assert_true(done[1]);
            if (!is_json(text[1].bytes, text[1].n)) fail_msg("trial %d, fork: '%s'", trial, text[1].bytes);
            differed += strcmp(text[0].bytes, text[1].bytes) != 0;
            assert_int_equal(llmm_seq_free(ctx, seqs[1]), LLMM_OK);
        }
        assert_true(done[0]);
        if (!is_json(text[0].bytes, text[0].n)) fail_msg("trial %d: '%s'", trial, text[0].bytes);
        for (int k = 0; k < 2; k++) {
            llmm_grammar_state_free(gs[k]);
            llmm_sampler_free(smp[k]);
        }
    }
    print_message("%d forks, %d of them ended differently\n", forks, differed);
    assert_true(forks >= 10);
    assert_true(differed >= 1);
    llmm_grammar_free(g);
    llmm_context_free(ctx);
    llmm_model_free(m);
}

int main(int argc, char **argv) {
    (void)argc;
    build_tool_path(argv[0], "llmmini-synth", synth_tool, sizeof synth_tool);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stories260k_generations_parse),
        cmocka_unit_test(test_random_qwen2_vocab_generations_parse),
        cmocka_unit_test(test_forks_keep_independent_states),
    };
    return cmocka_run_group_tests_name("grammar generation", tests, NULL, NULL);
}
