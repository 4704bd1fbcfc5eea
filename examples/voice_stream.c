/* voice_stream: generated text streamed to a text-to-speech engine sentence by sentence, and
 * cancelled when the user starts talking over it ("barge-in").
 *     usage: voice_stream MODEL.gguf [-p PROMPT] [-n MAX_TOKENS]
 *                         [--barge-in-ms MS | --barge-in-tokens N]
 *
 * A TTS engine speaks whole sentences: it needs the text up to a sentence's end to get its
 * prosody right, but should start speaking as soon as the first sentence is complete. So the
 * bytes llmm_generate streams go into a sentence buffer that is handed to the TTS at each
 * sentence end (".", "!" or "?", maybe a closing quote, then white space; or a line break),
 * or at a space once it is long, so a run-on sentence does not keep the speaker silent.
 * llmmini never splits a UTF-8 character between calls, so the buffer never holds half of one.
 *
 * Barge-in: when the microphone hears the user, the assistant must stop within a few
 * milliseconds, not at the end of its answer. Here a "microphone" thread (--barge-in-ms: after
 * MS milliseconds) or the stream itself (--barge-in-tokens: once N tokens have been streamed,
 * for a reproducible run) raises a flag, and the context's abort callback returns it: the
 * library polls it between layers, so the decode step in flight stops and llmm_generate
 * returns LLMM_ERR_ABORTED. Sentences already spoken stay spoken; the unfinished one is
 * dropped, and the conversation would go on with the user's words. */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L /* clock_gettime, pthread_cond_timedwait */
#endif
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "llmmini.h"

enum { SENTENCE_MAX = 160 }; /* past this, a sentence is handed over at its last space */

/* What a TTS engine consumes: one sentence at a time, in order. This one prints it. */
typedef struct tts_engine {
    struct timespec start;
    int sentences;
} tts_engine;

static double ms_between(const struct timespec *a, const struct timespec *b) {
    return (double)(b->tv_sec - a->tv_sec) * 1e3 + (double)(b->tv_nsec - a->tv_nsec) / 1e6;
}

static double ms_since(const struct timespec *t0) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return ms_between(t0, &now);
}

static void tts_speak(tts_engine *tts, const char *text, size_t n) {
    while (n > 0 && (*text == ' ' || *text == '\n')) text++, n--;
    while (n > 0 && (text[n - 1] == ' ' || text[n - 1] == '\n')) n--;
    if (n == 0) return;
    printf("[tts %7.1f ms] %.*s\n", ms_since(&tts->start), (int)n, text);
    fflush(stdout);
    tts->sentences++;
}

typedef struct voice {
    tts_engine tts;
    char sentence[4 * SENTENCE_MAX]; /* the sentence being generated */
    size_t len;
    int tokens, barge_in_tokens;
    atomic_int barge_in;             /* raised by the microphone; read by the abort callback */
    struct timespec barge_in_at;     /* written before barge_in is raised */
    pthread_mutex_t lock;            /* the microphone thread's wait, ended early by done */
    pthread_cond_t wake;
    int done;
    double barge_in_ms;
} voice;

/* The length of the text up to and including the first sentence end in s[0..n), or 0. */
static size_t sentence_end(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '\n') return i + 1;
        if (s[i] != '.' && s[i] != '!' && s[i] != '?') continue;
        size_t end = i + 1;
        if (end < n && (s[end] == '"' || s[end] == '\'' || s[end] == ')')) end++; /* closes the sentence too */
        if (end < n && (s[end] == ' ' || s[end] == '\n')) return end;
    }
    if (n < SENTENCE_MAX) return 0;
    for (size_t i = n; i-- > 1;)
        if (s[i] == ' ') return i;
    return n;
}

static void flush_sentences(voice *v) {
    size_t n;
    while ((n = sentence_end(v->sentence, v->len)) > 0) {
        tts_speak(&v->tts, v->sentence, n);
        memmove(v->sentence, v->sentence + n, v->len - n);
        v->len -= n;
    }
}

static void user_starts_talking(voice *v) {
    clock_gettime(CLOCK_MONOTONIC, &v->barge_in_at);
    atomic_store(&v->barge_in, 1);
}

/* llmm_generate's stream: bytes into the sentence buffer, complete sentences to the TTS. */
static int on_bytes(void *user, const char *bytes, size_t n, int complete_utf8) {
    voice *v = user;
    (void)complete_utf8;
    if (n > sizeof v->sentence - v->len) {     /* a sentence without a space: speak what there is */
        tts_speak(&v->tts, v->sentence, v->len);
        v->len = 0;
    }
    if (n > sizeof v->sentence) n = sizeof v->sentence;
    memcpy(v->sentence + v->len, bytes, n);
    v->len += n;
    flush_sentences(v);
    if (++v->tokens == v->barge_in_tokens) user_starts_talking(v);
    return 0;
}

/* The context's abort callback: the library polls it between layers. */
static int user_is_talking(void *user) {
    voice *v = user;
    return atomic_load(&v->barge_in);
}

/* The simulated microphone: hears the user after barge_in_ms, unless the answer ended first. */
static void *microphone(void *user) {
    voice *v = user;
    struct timespec at;
    clock_gettime(CLOCK_REALTIME, &at);
    long long ns = at.tv_nsec + (long long)(v->barge_in_ms * 1e6);
    at.tv_sec += (time_t)(ns / 1000000000);
    at.tv_nsec = (long)(ns % 1000000000);
    pthread_mutex_lock(&v->lock);
    int timed_out = 0;
    while (!v->done && !timed_out) timed_out = pthread_cond_timedwait(&v->wake, &v->lock, &at) != 0;
    pthread_mutex_unlock(&v->lock);
    if (timed_out) user_starts_talking(v);
    return NULL;
}

/* What a listener hears as hesitation: the tail of the gaps between tokens, not their mean. */
static void print_latency(const llmm_generate_stats *s) {
    printf("[latency: first token %.2f ms; between tokens p50 %.2f ms, p99 %.2f ms, max %.2f ms]\n", s->first_token_ms,
           s->inter_token_ms_p50, s->inter_token_ms_p99, s->inter_token_ms_max);
}

static llmm_status speak_answer(llmm_context *ctx, voice *v, const char *prompt, int max_tokens) {
    llmm_sampler_params sp;
    llmm_sampler_params_default(&sp, sizeof sp);
    sp.temperature = 0; /* greedy: the same answer on every run */
    llmm_generate_params gp;
    llmm_generate_params_default(&gp, sizeof gp);
    gp.max_tokens = max_tokens;
    gp.sampling = &sp;
    gp.on_bytes = on_bytes;
    gp.user = v;
    clock_gettime(CLOCK_MONOTONIC, &v->tts.start);
    llmm_generate_stats stats = {.size = sizeof stats};
    llmm_status st = llmm_generate(ctx, prompt, &gp, &stats);
    if (st == LLMM_ERR_ABORTED) {
        printf("[barge-in after %.1f ms, generation stopped %.3f ms later: %d tokens, sentences spoken: %d, "
               "unspoken text dropped: \"%.*s\"]\n",
               ms_between(&v->tts.start, &v->barge_in_at), ms_since(&v->barge_in_at), v->tokens, v->tts.sentences,
               (int)v->len, v->sentence);
        print_latency(&stats);
        return LLMM_OK;
    }
    if (st == LLMM_OK) {
        tts_speak(&v->tts, v->sentence, v->len); /* the answer's end ends its last sentence */
        printf("[answer complete: %d tokens, %d sentences]\n", v->tokens, v->tts.sentences);
    }
    if (st == LLMM_OK) print_latency(&stats);
    return st;
}

static int usage(void) {
    fprintf(stderr, "usage: voice_stream MODEL.gguf [-p PROMPT] [-n MAX_TOKENS] "
                    "[--barge-in-ms MS | --barge-in-tokens N]\n");
    return 2;
}

int main(int argc, char **argv) {
    const char *prompt = "Once upon a time";
    int max_tokens = 128;
    voice v = {.barge_in_ms = -1, .barge_in_tokens = -1};
    for (int i = 2; i < argc; i += 2) {
        if (i + 1 == argc) return usage();
        if (!strcmp(argv[i], "-p")) prompt = argv[i + 1];
        else if (!strcmp(argv[i], "-n")) max_tokens = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--barge-in-ms")) v.barge_in_ms = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--barge-in-tokens")) v.barge_in_tokens = atoi(argv[i + 1]);
        else return usage();
    }
    if (argc < 2 || max_tokens < 1) return usage();
    atomic_init(&v.barge_in, 0);
    pthread_mutex_init(&v.lock, NULL);
    pthread_cond_init(&v.wake, NULL);

    llmm_model *model = NULL;
    llmm_context *ctx = NULL;
    llmm_context_params cp;
    llmm_context_params_default(&cp, sizeof cp);
    cp.n_ctx = 512;
    cp.abort = user_is_talking;
    cp.abort_user = &v;
    llmm_status st = llmm_model_load(argv[1], NULL, &model);
    if (st == LLMM_OK) st = llmm_context_create(model, &cp, &ctx);
    /* one-time costs (the CPU's packed weight copies, CUDA graphs) now, not in the first answer,
     * where a step that makes them cannot be cut short */
    if (st == LLMM_OK) st = llmm_context_warmup(ctx);
    pthread_t mic;
    int mic_running = st == LLMM_OK && v.barge_in_ms >= 0 && pthread_create(&mic, NULL, microphone, &v) == 0;
    if (st == LLMM_OK) st = speak_answer(ctx, &v, prompt, max_tokens);
    if (mic_running) {
        pthread_mutex_lock(&v.lock);
        v.done = 1;
        pthread_cond_signal(&v.wake);
        pthread_mutex_unlock(&v.lock);
        pthread_join(mic, NULL);
    }
    if (st != LLMM_OK)
        fprintf(stderr, "voice_stream: %s: %s\n", llmm_status_str(st), ctx ? llmm_context_last_error(ctx) : argv[1]);
    llmm_context_free(ctx);
    llmm_model_free(model);
    pthread_cond_destroy(&v.wake);
    pthread_mutex_destroy(&v.lock);
    return st == LLMM_OK ? 0 : 1;
}
