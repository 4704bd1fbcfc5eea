/* game_loop: an NPC's line generated from a game's frame loop, which must never be blocked
 * longer than its frame budget.
 *     usage: game_loop MODEL.gguf [--frame-ms MS] [--llm-ms MS] [-n MAX_TOKENS] [--no-vsync]
 *
 * The model and the context are made before the loop (the loading screen), and
 * llmm_context_warmup pays the first step's one-time costs there. Each frame then gives the
 * model a slice of at most --llm-ms (default 4 of a 16.7 ms frame), on the game's own thread:
 *  - while the prompt is being read, one llmm_prefill of a chunk sized to fit the slice from
 *    the time the previous chunks took;
 *  - afterwards one llmm_decode_sample: one new token per frame.
 * A chunk that would still overrun (a slow frame, a longer position) is cut by the abort
 * callback, which the library polls between layers: the call returns LLMM_ERR_ABORTED with the
 * sequence as it was, and the next frame retries with a smaller chunk. So the model's share of
 * a frame is bounded by the slice plus one layer, whatever the model and the prompt.
 *
 * The context runs on one thread (n_threads = 1): the calling thread computes, and no worker
 * threads compete with the game's. (The other shape, a worker thread that owns the context and
 * hands tokens over through a lock-free queue, keeps the frame free of model work entirely;
 * docs/embedding.md compares the two.)
 *
 * It prints the NPC's line and the frame statistics, the worst frame time among them (a frame's
 * time: from its start to the end of its work, before waiting for the next frame), and exits
 * with 3 when a frame overran the budget. */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L /* clock_gettime, clock_nanosleep */
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "llmmini.h"

static const char npc_prompt[] =
    "Once upon a time, there was a big castle on a hill. In the castle lived a kind old king and his "
    "little dog. Every day the dog ran to the gate to see who came to visit. One day a girl named Lily "
    "came to the gate with a red ball. The dog was very happy and wanted to play. The king said";

enum { MAX_CONSECUTIVE_ABORTS = 64, MAX_CHUNK = 256 };

typedef enum phase { READING_PROMPT, TALKING, DONE } phase;

typedef struct npc {
    const llmm_model *model;
    llmm_context *ctx;
    llmm_sampler *sampler;
    llmm_token *prompt;
    size_t n_prompt, n_read;  /* prompt tokens, and those prefilled so far */
    phase phase;
    llmm_token next;          /* sampled, to be decoded in the next frame */
    int n_spoken, max_tokens;
    size_t chunk;             /* prompt tokens the next prefill takes, adapted to the slice */
    int consecutive_aborts;
    char line[4096];          /* what the NPC has said, shown as a subtitle */
    size_t line_len;
} npc;

/* The end of the model's slice in this frame, read by the abort callback. */
typedef struct slice_deadline {
    struct timespec at;
} slice_deadline;

typedef struct frame_stats {
    int frames, prefill_frames, decode_frames, aborted_calls, min_chunk, max_chunk;
    double worst_ms, total_ms;
} frame_stats;

static double ms_between(const struct timespec *a, const struct timespec *b) {
    return (double)(b->tv_sec - a->tv_sec) * 1e3 + (double)(b->tv_nsec - a->tv_nsec) / 1e6;
}

static struct timespec ms_after(const struct timespec *t, double ms) {
    long long ns = (long long)t->tv_nsec + (long long)(ms * 1e6);
    struct timespec r = {t->tv_sec + (time_t)(ns / 1000000000), (long)(ns % 1000000000)};
    return r;
}

/* Polled by the library between layers and prefill chunks: past the deadline, stop. */
static int past_deadline(void *user) {
    const slice_deadline *d = user;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return ms_between(&d->at, &now) > 0;
}

/* The NPC's newest token onto its line; the end of its line at end of text or max_tokens. */
static llmm_status speak(npc *n) {
    uint32_t attrs = 0;
    llmm_sampler_accept(n->sampler, n->next);
    llmm_status st = llmm_token_attrs(n->model, n->next, &attrs);
    if (st != LLMM_OK || (attrs & LLMM_TOKEN_ATTR_EOS)) return n->phase = DONE, st;
    size_t len = 0;
    st = llmm_token_to_piece(n->model, n->next, 0, n->line + n->line_len, sizeof n->line - 1 - n->line_len, &len);
    if (st == LLMM_ERR_BUFFER_TOO_SMALL) return n->phase = DONE, LLMM_OK; /* the subtitle is full */
    n->line_len += len;
    n->line[n->line_len] = '\0';
    if (++n->n_spoken >= n->max_tokens) n->phase = DONE;
    return st;
}

/* Read the next chunk of the prompt. The chunk adapts to the slice: halved when a call was cut,
 * doubled when one used less than 40 % of the slice, shrunk when one used more than 75 % (a
 * call's time is a fixed part, the weights read once, plus a part per token, so the cost of
 * one chunk does not tell the size of the next). The last chunk's logits give the first token. */
static llmm_status read_prompt(npc *n, double slice_ms, frame_stats *fs) {
    size_t chunk = n->chunk < n->n_prompt - n->n_read ? n->chunk : n->n_prompt - n->n_read;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    llmm_status st = llmm_prefill(n->ctx, 0, n->prompt + n->n_read, chunk, 0);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (st == LLMM_ERR_ABORTED) n->chunk = n->chunk > 1 ? n->chunk / 2 : 1;
    if (st != LLMM_OK) return st;
    const double ms = ms_between(&t0, &t1);
    if (ms < 0.4 * slice_ms && n->chunk < MAX_CHUNK) n->chunk *= 2;
    else if (ms > 0.75 * slice_ms && n->chunk > 1) n->chunk = n->chunk * 3 / 4;
    n->n_read += chunk;
    if ((int)chunk < fs->min_chunk || fs->min_chunk == 0) fs->min_chunk = (int)chunk;
    if ((int)chunk > fs->max_chunk) fs->max_chunk = (int)chunk;
    fs->prefill_frames++;
    if (n->n_read < n->n_prompt) return LLMM_OK;
    const float *logits;
    size_t n_vocab;
    n->phase = TALKING;
    if ((st = llmm_logits(n->ctx, 0, &logits, &n_vocab)) == LLMM_OK)
        st = llmm_sample(n->sampler, logits, n_vocab, &n->next);
    return st == LLMM_OK ? speak(n) : st;
}

/* Decode the token sampled last frame; its logits choose the next one. */
static llmm_status say_next_token(npc *n, frame_stats *fs) {
    llmm_seq_id seq = 0;
    llmm_token token = n->next;
    llmm_status st = llmm_decode_sample(n->ctx, &seq, &token, 1, &n->sampler, &n->next);
    if (st != LLMM_OK) return st;
    fs->decode_frames++;
    return speak(n);
}

/* The model's share of one frame: at most one call, ended by the deadline if it runs long. */
static llmm_status model_slice(npc *n, double slice_ms, frame_stats *fs) {
    llmm_status st = n->phase == READING_PROMPT ? read_prompt(n, slice_ms, fs)
                     : n->phase == TALKING      ? say_next_token(n, fs)
                                                : LLMM_OK;
    if (st != LLMM_ERR_ABORTED) return n->consecutive_aborts = 0, st;
    fs->aborted_calls++;
    if (++n->consecutive_aborts < MAX_CONSECUTIVE_ABORTS) return LLMM_OK; /* retried next frame */
    fprintf(stderr, "game_loop: no step of this model fits a %.2f ms slice on this machine\n", slice_ms);
    return LLMM_ERR_ABORTED;
}

static llmm_status run_frames(npc *n, slice_deadline *deadline, double frame_ms, double slice_ms, int vsync,
                              frame_stats *fs) {
    struct timespec next_frame, start, end;
    clock_gettime(CLOCK_MONOTONIC, &next_frame);
    llmm_status st = LLMM_OK;
    while (st == LLMM_OK && n->phase != DONE) {
        clock_gettime(CLOCK_MONOTONIC, &start);
        /* ... the game's own update would run here, before the model's slice ... */
        deadline->at = ms_after(&start, slice_ms);
        st = model_slice(n, slice_ms, fs);
        clock_gettime(CLOCK_MONOTONIC, &end);
        double ms = ms_between(&start, &end);
        if (ms > fs->worst_ms) fs->worst_ms = ms;
        fs->total_ms += ms;
        fs->frames++;
        next_frame = ms_after(&next_frame, frame_ms);
        if (!vsync || ms_between(&next_frame, &end) > 0) next_frame = end; /* late: no catching up */
        else clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next_frame, NULL);
    }
    return st;
}

/* The loading screen: model, context (one thread, the deadline as its abort callback), warm-up,
 * sampler and the tokenized prompt. */
static llmm_status load(const char *path, slice_deadline *deadline, llmm_model **model, npc *n) {
    /* llmm_context_warmup below pays every one-time cost here, the CPU backend's packed weight
     * copies included, which a decode step would otherwise make a share at a time in copies the
     * abort callback cannot cut short (docs/embedding.md, "Real-time use"). */
    llmm_status st = llmm_model_load(path, NULL, model);
    if (st != LLMM_OK) return st;
    n->model = *model;
    llmm_context_params cp;
    llmm_context_params_default(&cp, sizeof cp);
    cp.n_ctx = 512;
    cp.n_threads = 1;
    cp.abort = past_deadline;
    cp.abort_user = deadline;
    deadline->at = (struct timespec){0x7fffffff, 0}; /* no deadline while loading */
    if ((st = llmm_context_create(*model, &cp, &n->ctx)) != LLMM_OK) return st;
    if ((st = llmm_context_warmup(n->ctx)) != LLMM_OK) return st;
    llmm_sampler_params sp;
    llmm_sampler_params_default(&sp, sizeof sp);
    sp.seed = 7;
    if ((st = llmm_sampler_create(&sp, &n->sampler)) != LLMM_OK) return st;
    const uint32_t flags = LLMM_TOKENIZE_ADD_SPECIAL;
    st = llmm_tokenize(*model, npc_prompt, strlen(npc_prompt), flags, NULL, 0, &n->n_prompt);
    if (st != LLMM_ERR_BUFFER_TOO_SMALL && st != LLMM_OK) return st;
    if (!(n->prompt = malloc(n->n_prompt * sizeof *n->prompt))) return LLMM_ERR_NO_MEMORY;
    return llmm_tokenize(*model, npc_prompt, strlen(npc_prompt), flags, n->prompt, n->n_prompt, &n->n_prompt);
}

static int usage(void) {
    fprintf(stderr, "usage: game_loop MODEL.gguf [--frame-ms MS] [--llm-ms MS] [-n MAX_TOKENS] [--no-vsync]\n");
    return 2;
}

int main(int argc, char **argv) {
    double frame_ms = 1000.0 / 60, slice_ms = 4;
    int vsync = 1, arg = 2;
    npc n = {.max_tokens = 48, .chunk = 8};
    for (; arg < argc; arg++) {
        if (!strcmp(argv[arg], "--no-vsync")) vsync = 0;
        else if (arg + 1 == argc) return usage();
        else if (!strcmp(argv[arg], "--frame-ms")) frame_ms = atof(argv[++arg]);
        else if (!strcmp(argv[arg], "--llm-ms")) slice_ms = atof(argv[++arg]);
        else if (!strcmp(argv[arg], "-n")) n.max_tokens = atoi(argv[++arg]);
        else return usage();
    }
    if (argc < 2 || !(frame_ms > 0) || !(slice_ms > 0) || slice_ms > frame_ms || n.max_tokens < 1) return usage();
    slice_deadline deadline;
    llmm_model *model = NULL;
    frame_stats fs = {0};
    llmm_status st = load(argv[1], &deadline, &model, &n);
    if (st == LLMM_OK) st = run_frames(&n, &deadline, frame_ms, slice_ms, vsync, &fs);
    int rc = st == LLMM_OK ? 0 : 1;
    if (st == LLMM_OK) {
        printf("NPC: %s%s\n", npc_prompt, n.line);
        printf("frames %d: %d reading the prompt (%zu tokens, chunks of %d to %d), %d speaking (%d tokens), "
               "%d calls cut by the deadline\n",
               fs.frames, fs.prefill_frames, n.n_prompt, fs.min_chunk, fs.max_chunk, fs.decode_frames, n.n_spoken,
               fs.aborted_calls);
        printf("frame time: worst %.3f ms, mean %.3f ms; budget %.3f ms (model slice %.3f ms): %s\n", fs.worst_ms,
               fs.total_ms / fs.frames, frame_ms, slice_ms, fs.worst_ms <= frame_ms ? "within budget" : "OVER BUDGET");
        if (fs.worst_ms > frame_ms) rc = 3;
    } else if (st != LLMM_ERR_ABORTED) {
        fprintf(stderr, "game_loop: %s: %s\n", llmm_status_str(st), n.ctx ? llmm_context_last_error(n.ctx) : argv[1]);
    }
    free(n.prompt);
    llmm_sampler_free(n.sampler);
    llmm_context_free(n.ctx);
    llmm_model_free(model);
    return rc;
}
