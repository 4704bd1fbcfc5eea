/* The sequence API against a model of what must hold: random operations (create, fork, free,
 * clear, truncate, prefill, decode, batched decode, saved states, adapters by handle and through
 * the adapter cache, prefix-cache hits, speculative verify with rollback, prefill aborted by the
 * abort callback) on several sequences of stories260K, each checked against a reference kept
 * here: every sequence's length, adapters and token history, the pool's block counts (exactly
 * without the prefix cache: which blocks forks share and copy-on-write splits), which calls must
 * fail and how, and the logits of every computed row against a fresh context fed the same
 * history under the same adapters. Then the same on several threads, one context each over one
 * model and one set of adapters (under TSan in `make tsan`), and a pass that fails the N-th
 * allocation of an operation for every N it reaches: the call returns NO_MEMORY and the context
 * is as before (under valgrind in `make valgrind`).
 * Seeded: the seed is printed; LLMM_TEST_SEED replays it, LLMM_TEST_OPS sets the operations per
 * run (`make soak`: millions under ASan and UBSan). A failure prints the shortest operation list
 * found that still fails. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llmmini.h"
#include "support/alloc.h"
#include "support/alloc_hooks.h"
#include "support/fixtures.h"
#include "support/rng.h"
#include "support/shared_data.h"

/* A small pool so that it fills: 6 sequences of up to 48 tokens share 24 blocks of 4. */
enum { N_SEQ = 6, N_CTX = 48, BLOCK = 4, N_BLOCKS = 24, N_BATCH = 8, MAX_SEQ_BLOCKS = N_CTX / BLOCK };
enum { MAX_DRAFT = 3, MAX_ITEMS = 2 };
/* KL divergence allowed between a row and the fresh context's: test_fidelity's bound for paths
 * that round differently but equally well (batches, chunks), applied per row. */
#define ROW_KL_MAX 1e-4

/* ================================================================== operations */

typedef enum op_kind {
    OP_CREATE,
    OP_FORK,
    OP_FREE,
    OP_CLEAR,
    OP_TRUNCATE,
    OP_PREFILL,
    OP_DECODE,
    OP_DECODE_BATCH,
    OP_SAVE_LOAD,
    OP_ADAPTERS,
    OP_PREFIX_PREFILL,
    OP_SPECULATE,
    OP_ABORT_PREFILL,
    OP_KINDS
} op_kind;

static const char *const k_op_names[OP_KINDS] = {"create",  "fork",    "free",          "clear",    "truncate",
                                                 "prefill", "decode",  "decode_batch",  "save_load", "adapters",
                                                 "prefix_prefill", "speculate", "abort_prefill"};

/* Everything an operation does follows from these numbers and the state it meets, so that any
 * sub-list of a failing list can run again (the shrinker drops operations). */
typedef struct op {
    op_kind kind;
    uint32_t a, b, c;
    uint64_t seed;
} op;

/* ================================================================== adapters */

/* The adapter configurations a sequence may run with: 0 none, then nonzero scales only (a scale
 * of 0 counts as absent, which would make two rows the same configuration). */
typedef struct adapter_cfg {
    uint32_t n;
    uint32_t which[2]; /* indexes into the shared adapters */
    float scale[2];
} adapter_cfg;

static const adapter_cfg k_cfgs[] = {{0, {0, 0}, {0, 0}}, {1, {0, 0}, {1.0f, 0}}, {1, {1, 0}, {0.5f, 0}},
                                     {2, {0, 1}, {0.7f, 1.0f}}};
enum { N_CFGS = sizeof k_cfgs / sizeof k_cfgs[0] };
static const char *const k_adapter_files[2] = {"lora/stories260K-lora-r8.gguf", "lora/stories260K-lora-r4-attn-f16.gguf"};

/* What the runs share: the model and adapters loaded once (threads use them all at once). */
typedef struct shared_world {
    llmm_model *model;
    llmm_adapter *adapters[2];
    char adapter_paths[2][1024];
    uint64_t adapter_bytes; /* the larger adapter's: the cache's budget, so that it evicts */
    uint32_t n_vocab;
} shared_world;

/* ================================================================== the reference */

typedef struct ref_seq {
    int created;
    uint32_t len;
    llmm_token tok[N_CTX];
    uint8_t cfg_at[N_CTX]; /* the adapter configuration each position's K/V was computed under */
    uint8_t cfg;           /* the configuration it runs with now */
    uint32_t n_blocks;
    uint32_t blocks[MAX_SEQ_BLOCKS]; /* the reference's own block names: equal names, one block */
} ref_seq;

typedef struct ref_state {
    ref_seq s[N_SEQ];
    uint32_t next_block; /* a fresh name */
    /* with the prefix cache the reference cannot tell which blocks sequences share, so it takes
     * the blocks a reservation may use from the library's count (blocks_free before the call):
     * a reservation within them must succeed, one beyond them may (attached blocks need none) */
    int64_t prefix_avail;
} ref_state;

static uint32_t holders(const ref_state *r, uint32_t block) {
    uint32_t n = 0;
    for (int q = 0; q < N_SEQ; q++)
        for (uint32_t i = 0; i < r->s[q].n_blocks; i++) n += r->s[q].blocks[i] == block;
    return n;
}

static uint32_t blocks_in_use(const ref_state *r, uint32_t *shared) {
    uint32_t used = 0, sh = 0;
    for (int q = 0; q < N_SEQ; q++)
        for (uint32_t i = 0; i < r->s[q].n_blocks; i++) {
            const uint32_t b = r->s[q].blocks[i];
            int first = 1; /* count each name once: at its first holder */
            for (int p = 0; p <= q && first; p++)
                for (uint32_t j = 0; j < (p == q ? i : r->s[p].n_blocks); j++)
                    if (r->s[p].blocks[j] == b) first = 0;
            if (!first) continue;
            used++;
            sh += holders(r, b) > 1;
        }
    if (shared) *shared = sh;
    return used;
}

/* Make room for n more positions of q as kvcache.c must: a private copy of a shared tail block
 * about to be written, new blocks beyond. 0 when the pool (without a prefix cache) has no room;
 * r is then unchanged. */
static int ref_reserve(ref_state *r, int q, uint32_t n) {
    ref_seq *s = &r->s[q];
    const uint32_t want = (s->len + n + BLOCK - 1) / BLOCK;
    const uint32_t grow = want > s->n_blocks ? want - s->n_blocks : 0;
    /* with the prefix cache a tail block may be shared with the cache: a copy may be needed */
    const int cow = n > 0 && s->len % BLOCK && (r->prefix_avail >= 0 || holders(r, s->blocks[s->n_blocks - 1]) > 1);
    const int64_t avail = r->prefix_avail >= 0 ? r->prefix_avail : N_BLOCKS - (int64_t)blocks_in_use(r, NULL);
    const int fits = grow + (uint32_t)cow <= avail;
    /* without the prefix cache a refusal changes nothing; with it the blocks are named anyway,
     * for the case where the library had room after all */
    if (!fits && r->prefix_avail < 0) return 0;
    if (r->prefix_avail >= 0) r->prefix_avail -= fits ? grow + (uint32_t)cow : 0;
    if (cow) s->blocks[s->n_blocks - 1] = r->next_block++;
    for (uint32_t i = 0; i < grow; i++) s->blocks[s->n_blocks++] = r->next_block++;
    return fits;
}

static void ref_append(ref_seq *s, const llmm_token *tok, uint32_t n) {
    for (uint32_t i = 0; i < n; i++) {
        s->tok[s->len] = tok[i];
        s->cfg_at[s->len++] = s->cfg;
    }
}

static void ref_truncate(ref_seq *s, uint32_t keep) {
    if (keep < s->len) s->len = keep;
    const uint32_t nb = (keep + BLOCK - 1) / BLOCK;
    if (s->n_blocks > nb) s->n_blocks = nb;
}

static int ref_unused(const ref_state *r, int except) {
    for (int q = 0; q < N_SEQ; q++)
        if (q != except && !r->s[q].created && r->s[q].len == 0) return q;
    return -1;
}

/* ================================================================== one run */

typedef struct run {
    const shared_world *w;
    int prefix_cache;
    llmm_context *ctx, *fresh; /* fresh: one sequence, prefilled from scratch for each check */
    llmm_speculator *spec;
    llmm_sampler *greedy;
    int32_t cache_ids[2];
    ref_state ref;
    int abort_countdown; /* < 0: never abort */
    char msg[512];       /* why the run failed */
    uint8_t *state_buf;
    size_t state_cap;
    uint64_t ops_done, logit_checks, full_refusals, prefix_hits_seen, kept_guesses, aborted;
    /* the allocation-failure pass: ctx's model and adapters (allocating through a failing
     * allocator; the fresh context keeps w's), and whether the last operation was refused for
     * memory (a refusal the pass expects: the reference stays as it was) */
    const shared_world *wc;
    int alloc_pass, no_memory;
} run;

static int abort_when_due(void *user) {
    run *r = user;
    if (r->abort_countdown < 0) return 0;
    return r->abort_countdown-- == 0;
}

static int failf(run *r, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->msg, sizeof r->msg, fmt, ap);
    va_end(ap);
    return 0;
}

#define EXPECT(r, cond, ...) \
    do {                     \
        if (!(cond)) return failf((r), __VA_ARGS__); \
    } while (0)

static llmm_context_params run_params(run *r, uint32_t n_seq, int prefix_cache) {
    llmm_context_params cp;
    llmm_context_params_default(&cp, sizeof cp);
    cp.n_ctx = N_CTX;
    cp.n_seq_max = n_seq;
    cp.n_batch = N_BATCH;
    cp.n_threads = 1;
    cp.backend = LLMM_BACKEND_CPU;
    cp.kv_block_size = BLOCK;
    cp.n_ctx_total = n_seq == 1 ? N_CTX : N_BLOCKS * BLOCK;
    cp.prefix_cache = prefix_cache;
    cp.abort = abort_when_due;
    cp.abort_user = r;
    cp.adapter_budget_bytes = r->w->adapter_bytes;
    return cp;
}

static void run_close(run *r) {
    llmm_speculator_free(r->spec);
    llmm_context_free(r->ctx);
    llmm_context_free(r->fresh);
    llmm_sampler_free(r->greedy);
    free(r->state_buf);
    r->spec = NULL;
    r->ctx = r->fresh = NULL;
    r->greedy = NULL;
    r->state_buf = NULL;
}

/* Creates the contexts; returns the status of the first call that failed. */
static llmm_status run_open(run *r, const shared_world *w, const shared_world *wc, int prefix_cache) {
    memset(r, 0, sizeof *r);
    r->w = w;
    r->wc = wc;
    r->alloc_pass = w != wc;
    r->prefix_cache = prefix_cache;
    r->abort_countdown = -1;
    llmm_context_params cp = run_params(r, N_SEQ, prefix_cache);
    llmm_status st = llmm_context_create(wc->model, &cp, &r->ctx);
    llmm_context_params fp = run_params(r, 1, 0);
    if (!st) st = llmm_context_create(w->model, &fp, &r->fresh);
    if (!st) st = llmm_speculator_create(r->ctx, NULL, &r->spec);
    llmm_sampler_params sp;
    llmm_sampler_params_default(&sp, sizeof sp);
    sp.temperature = 0;
    if (!st) st = llmm_sampler_create(&sp, &r->greedy);
    for (int i = 0; i < 2 && !st; i++) st = llmm_adapter_register(r->ctx, w->adapter_paths[i], &r->cache_ids[i]);
    if (st) snprintf(r->msg, sizeof r->msg, "opening a run: %s", llmm_status_str(st));
    return st;
}

/* ------------------------------------------------------------------ checks */

static int check_adapters(run *r, int q) {
    llmm_adapter *got[LLMM_MAX_SEQ_ADAPTERS];
    float scales[LLMM_MAX_SEQ_ADAPTERS];
    size_t n = 0;
    llmm_status st = llmm_seq_get_adapters(r->ctx, q, got, scales, LLMM_MAX_SEQ_ADAPTERS, &n);
    const adapter_cfg *c = &k_cfgs[r->ref.s[q].cfg];
    EXPECT(r, st == LLMM_OK && n == c->n, "sequence %d: %zu adapters (%s), expected %u", q, n, llmm_status_str(st), c->n);
    for (size_t i = 0; i < n; i++)
        EXPECT(r, scales[i] == c->scale[i], "sequence %d: adapter %zu at scale %g, expected %g", q, i, scales[i],
               c->scale[i]);
    return 1;
}

/* Lengths, adapters and the pool's counts against the reference. */
static int check_state(run *r) {
    uint32_t in_use = 0, most = 0, sum = 0;
    for (int q = 0; q < N_SEQ; q++) {
        const ref_seq *s = &r->ref.s[q];
        size_t len = 0;
        EXPECT(r, llmm_seq_length(r->ctx, q, &len) == LLMM_OK && len == s->len, "sequence %d holds %zu tokens, expected %u",
               q, len, s->len);
        if (!check_adapters(r, q)) return 0;
        in_use += s->created || s->len;
        const uint32_t nb = (s->len + BLOCK - 1) / BLOCK;
        most = nb > most ? nb : most;
        sum += nb;
    }
    llmm_context_stats st = {.size = sizeof st};
    EXPECT(r, llmm_context_get_stats(r->ctx, &st) == LLMM_OK, "llmm_context_get_stats failed");
    EXPECT(r, st.n_seq_used == in_use, "%u sequence ids in use, expected %u", st.n_seq_used, in_use);
    EXPECT(r, st.blocks_total == N_BLOCKS && st.blocks_used + st.blocks_free == N_BLOCKS,
           "blocks: %llu total, %llu used + %llu free", (unsigned long long)st.blocks_total,
           (unsigned long long)st.blocks_used, (unsigned long long)st.blocks_free);
    if (!r->prefix_cache) {
        uint32_t shared = 0;
        const uint32_t used = blocks_in_use(&r->ref, &shared);
        EXPECT(r, st.blocks_used == used && st.blocks_shared == shared && st.blocks_cached == 0,
               "blocks: %llu used, %llu shared, %llu cached; expected %u used, %u shared",
               (unsigned long long)st.blocks_used, (unsigned long long)st.blocks_shared,
               (unsigned long long)st.blocks_cached, used, shared);
    } else {
        EXPECT(r, st.blocks_used >= most && st.blocks_used <= sum && st.blocks_cached <= st.blocks_free,
               "blocks: %llu used (sequences need %u..%u), %llu cached, %llu free", (unsigned long long)st.blocks_used,
               most, sum, (unsigned long long)st.blocks_cached, (unsigned long long)st.blocks_free);
    }
    return 1;
}

static llmm_status set_fresh_cfg(run *r, uint8_t cfg) {
    const adapter_cfg *c = &k_cfgs[cfg];
    llmm_adapter *a[2] = {r->w->adapters[c->which[0]], r->w->adapters[c->which[1]]};
    return llmm_seq_set_adapters(r->fresh, 0, a, c->scale, c->n);
}

/* The fresh context fed positions [0, len) of s, each run of one configuration under it; its
 * logits row of the last position into *out. */
static int fresh_logits(run *r, const ref_seq *s, uint32_t len, const float **out) {
    EXPECT(r, len > 0, "a check of an empty sequence");
    llmm_status st = llmm_seq_clear(r->fresh, 0);
    for (uint32_t start = 0; start < len && !st;) {
        uint32_t end = start + 1;
        while (end < len && s->cfg_at[end] == s->cfg_at[start]) end++;
        st = set_fresh_cfg(r, s->cfg_at[start]);
        if (!st) st = llmm_prefill(r->fresh, 0, s->tok + start, end - start, 0);
        start = end;
    }
    size_t nv = 0;
    if (!st) st = llmm_logits(r->fresh, 0, out, &nv);
    EXPECT(r, st == LLMM_OK, "the fresh context failed: %s (%s)", llmm_status_str(st), llmm_context_last_error(r->fresh));
    return 1;
}

static double row_kl(const float *p_logits, const float *q_logits, size_t n) {
    double pm = -INFINITY, qm = -INFINITY;
    for (size_t i = 0; i < n; i++) {
        pm = fmax(pm, p_logits[i]);
        qm = fmax(qm, q_logits[i]);
    }
    double ps = 0, qs = 0;
    for (size_t i = 0; i < n; i++) {
        ps += exp(p_logits[i] - pm);
        qs += exp(q_logits[i] - qm);
    }
    double kl = 0;
    for (size_t i = 0; i < n; i++) {
        const double lp = p_logits[i] - pm - log(ps), lq = q_logits[i] - qm - log(qs);
        kl += exp(lp) * (lp - lq);
    }
    return kl;
}

/* Row `row` of ctx's last step against the fresh context fed q's whole history. */
static int check_row(run *r, size_t row, int q) {
    const float *got = NULL, *want = NULL;
    size_t nv = 0;
    llmm_status st = llmm_logits(r->ctx, row, &got, &nv);
    EXPECT(r, st == LLMM_OK && nv == r->w->n_vocab, "llmm_logits row %zu: %s", row, llmm_status_str(st));
    if (!fresh_logits(r, &r->ref.s[q], r->ref.s[q].len, &want)) return 0;
    const double kl = row_kl(want, got, nv);
    EXPECT(r, kl <= ROW_KL_MAX, "sequence %d (%u tokens): logits row %zu differ from a fresh context's (KL %.3g)", q,
           r->ref.s[q].len, row, kl);
    r->logit_checks++;
    return 1;
}

/* The greedy token after len positions of s: token must be it, or within 1e-4 of its logit (a
 * near tie that another rounding may break the other way). */
static int check_greedy(run *r, const ref_seq *s, uint32_t len, llmm_token token) {
    const float *want = NULL;
    if (!fresh_logits(r, s, len, &want)) return 0;
    const llmm_token best = argmax(want, r->w->n_vocab);
    EXPECT(r, token == best || want[token] >= want[best] - 1e-4f,
           "greedy token after %u positions is %d (logit %g); the fresh context's is %d (%g)", len, token, want[token],
           best, want[best]);
    r->logit_checks++;
    return 1;
}

/* ------------------------------------------------------------------ the operations */

static void random_tokens(const run *r, uint64_t seed, llmm_token *out, uint32_t n) {
    test_rng g = rng_seeded(seed);
    for (uint32_t i = 0; i < n; i++) out[i] = (llmm_token)rng_below(&g, r->w->n_vocab);
}

/* In the allocation-failure pass, a call refused for memory: the operation ends there and the
 * reference stays as it was (check_state then checks that the context did too). */
static int out_of_memory(run *r, llmm_status st) {
    if (st != LLMM_ERR_NO_MEMORY || !r->alloc_pass) return 0;
    r->no_memory = 1;
    return 1;
}

static int expect_status(run *r, const char *what, llmm_status got, llmm_status want) {
    EXPECT(r, got == want, "%s returned %s, expected %s (%s)", what, llmm_status_str(got), llmm_status_str(want),
           got ? llmm_context_last_error(r->ctx) : "");
    return 1;
}

static int op_create(run *r) {
    llmm_seq_id q = -1;
    const int want = ref_unused(&r->ref, -1);
    llmm_status st = llmm_seq_create(r->ctx, &q);
    if (!expect_status(r, "llmm_seq_create", st, want < 0 ? LLMM_ERR_CONTEXT_FULL : LLMM_OK)) return 0;
    if (st) return 1;
    EXPECT(r, q == want, "llmm_seq_create gave %d, expected %d", q, want);
    r->ref.s[q].created = 1;
    return 1;
}

static int op_fork(run *r, const op *o) {
    const int src = (int)(o->a % N_SEQ), want = ref_unused(&r->ref, src);
    llmm_seq_id dst = -1;
    llmm_status st = llmm_seq_fork(r->ctx, src, &dst);
    if (!expect_status(r, "llmm_seq_fork", st, want < 0 ? LLMM_ERR_CONTEXT_FULL : LLMM_OK)) return 0;
    if (st) return 1;
    EXPECT(r, dst == want, "llmm_seq_fork gave %d, expected %d", dst, want);
    r->ref.s[dst] = r->ref.s[src];
    r->ref.s[dst].created = 1;
    return 1;
}

static int op_free(run *r, const op *o, int clear_only) {
    const int q = (int)(o->a % N_SEQ);
    llmm_status st = clear_only ? llmm_seq_clear(r->ctx, q) : llmm_seq_free(r->ctx, q);
    if (!expect_status(r, clear_only ? "llmm_seq_clear" : "llmm_seq_free", st, LLMM_OK)) return 0;
    ref_truncate(&r->ref.s[q], 0);
    if (!clear_only) {
        r->ref.s[q].created = 0;
        r->ref.s[q].cfg = 0; /* a freed id drops its adapters */
    }
    return 1;
}

static int op_truncate(run *r, const op *o) {
    const int q = (int)(o->a % N_SEQ);
    const uint32_t keep = o->b % (r->ref.s[q].len + 2); /* one beyond the length: refused */
    llmm_status st = llmm_seq_truncate(r->ctx, q, keep);
    if (!expect_status(r, "llmm_seq_truncate", st, keep > r->ref.s[q].len ? LLMM_ERR_INVALID_ARG : LLMM_OK)) return 0;
    if (!st) ref_truncate(&r->ref.s[q], keep);
    return 1;
}

/* Appending n positions to q: the status the library must give (OK or CONTEXT_FULL; with the
 * prefix cache, where attached blocks need no room, -1 for "either") and, when OK, the
 * reference after it in *next. */
static int predict_append(run *r, int q, uint32_t n, ref_state *next) {
    *next = r->ref;
    if (r->ref.s[q].len + n > N_CTX) return LLMM_ERR_CONTEXT_FULL;
    if (ref_reserve(next, q, n)) return LLMM_OK;
    return r->prefix_cache ? -1 : LLMM_ERR_CONTEXT_FULL;
}

static int do_prefill(run *r, int q, const llmm_token *tok, uint32_t n, int abortable) {
    ref_state next;
    const int want = predict_append(r, q, n, &next);
    llmm_context_stats before = {.size = sizeof before};
    llmm_context_get_stats(r->ctx, &before);
    llmm_status st = llmm_prefill(r->ctx, q, tok, n, 0);
    r->abort_countdown = -1;
    if (abortable && st == LLMM_ERR_ABORTED) {
        /* the sequence as before, but a last block it shared was copied before the abort came
         * and stays its own (llmm_prefill's ABORTED) */
        ref_seq *s = &r->ref.s[q];
        if (s->len % BLOCK && holders(&r->ref, s->blocks[s->n_blocks - 1]) > 1)
            s->blocks[s->n_blocks - 1] = r->ref.next_block++;
        r->aborted++;
        return 1;
    }
    if (st == LLMM_ERR_CONTEXT_FULL && want != LLMM_OK) {
        r->full_refusals++;
        return 1;
    }
    if (out_of_memory(r, st)) return 1;
    if (!expect_status(r, "llmm_prefill", st, want == -1 ? LLMM_OK : (llmm_status)want)) return 0;
    ref_append(&next.s[q], tok, n);
    r->ref = next;
    llmm_context_stats after = {.size = sizeof after};
    llmm_context_get_stats(r->ctx, &after);
    const uint64_t hits = after.prefix_hits - before.prefix_hits;
    EXPECT(r, hits % BLOCK == 0 && hits < n && (r->prefix_cache || hits == 0),
           "prefill of %u tokens reused %llu positions from the prefix cache", n, (unsigned long long)hits);
    r->prefix_hits_seen += hits;
    return check_row(r, 0, q);
}

static int op_prefill(run *r, const op *o) {
    llmm_token tok[N_CTX + 8];
    const uint32_t n = 1 + o->b % 12;
    random_tokens(r, o->seed, tok, n);
    return do_prefill(r, (int)(o->a % N_SEQ), tok, n, 0);
}

/* An empty sequence prefilled with another's first tokens and a tail of its own: a prefix-cache
 * hit when the cache is on and the source's blocks were published. */
static int op_prefix_prefill(run *r, const op *o) {
    const int src = (int)(o->a % N_SEQ), q = ref_unused(&r->ref, -1);
    if (q < 0 || r->ref.s[src].len == 0) return 1;
    const ref_seq *s = &r->ref.s[src];
    const uint32_t keep = 1 + o->b % s->len, tail = o->c % 4;
    llmm_token tok[N_CTX + 4];
    memcpy(tok, s->tok, keep * sizeof *tok);
    random_tokens(r, o->seed, tok + keep, tail);
    /* under the source's adapters, so that its blocks' keys match */
    if (s->cfg != r->ref.s[q].cfg) {
        const adapter_cfg *c = &k_cfgs[s->cfg];
        llmm_adapter *a[2] = {r->wc->adapters[c->which[0]], r->wc->adapters[c->which[1]]};
        const llmm_status st = llmm_seq_set_adapters(r->ctx, q, a, c->scale, c->n);
        if (out_of_memory(r, st)) return 1;
        if (!expect_status(r, "llmm_seq_set_adapters", st, LLMM_OK)) return 0;
        r->ref.s[q].cfg = s->cfg;
    }
    return do_prefill(r, q, tok, keep + tail, 0);
}

static int op_abort_prefill(run *r, const op *o) {
    llmm_token tok[N_CTX];
    const uint32_t n = N_BATCH + 1 + o->b % 24; /* at least two chunks */
    random_tokens(r, o->seed, tok, n);
    r->abort_countdown = (int)(o->c % 16);
    return do_prefill(r, (int)(o->a % N_SEQ), tok, n, 1);
}

/* rows distinct sequences from a, each one token of seed */
static int do_decode(run *r, const llmm_seq_id *seqs, size_t rows, uint64_t seed) {
    llmm_token tok[N_SEQ];
    random_tokens(r, seed, tok, (uint32_t)rows);
    ref_state next = r->ref;
    int want = LLMM_OK;
    for (size_t i = 0; i < rows && want != LLMM_ERR_CONTEXT_FULL; i++) {
        if (next.s[seqs[i]].len >= N_CTX) want = LLMM_ERR_CONTEXT_FULL;
        else if (!ref_reserve(&next, seqs[i], 1)) want = r->prefix_cache ? -1 : LLMM_ERR_CONTEXT_FULL;
    }
    llmm_status st = llmm_decode(r->ctx, seqs, tok, rows);
    if (st == LLMM_ERR_CONTEXT_FULL && want != LLMM_OK) {
        r->full_refusals++;
        return 1;
    }
    if (out_of_memory(r, st)) return 1;
    if (!expect_status(r, "llmm_decode", st, want == -1 ? LLMM_OK : (llmm_status)want)) return 0;
    for (size_t i = 0; i < rows; i++) ref_append(&next.s[seqs[i]], &tok[i], 1);
    r->ref = next;
    for (size_t i = 0; i < rows; i++)
        if (!check_row(r, i, seqs[i])) return 0;
    return 1;
}

static int op_decode(run *r, const op *o, int batch) {
    llmm_seq_id seqs[N_SEQ];
    size_t rows = 0;
    const uint32_t want_rows = batch ? 2 + o->b % (N_SEQ - 1) : 1;
    for (uint32_t k = 0; k < N_SEQ && rows < want_rows; k++) {
        const int q = (int)((o->a + k) % N_SEQ);
        if (batch && r->ref.s[q].len == 0 && !r->ref.s[q].created) continue; /* rows of sequences in use */
        seqs[rows++] = q;
    }
    if (rows == 0) return 1;
    return do_decode(r, seqs, rows, o->seed);
}

static int op_save_load(run *r, const op *o) {
    const int src = (int)(o->a % N_SEQ), dst = (int)(o->b % N_SEQ);
    size_t need = 0;
    llmm_status st = llmm_seq_save_buffer(r->ctx, src, (int32_t)(o->c % 4), NULL, 0, &need);
    if (out_of_memory(r, st)) return 1;
    if (!expect_status(r, "llmm_seq_save_buffer (size)", st, LLMM_ERR_BUFFER_TOO_SMALL)) return 0;
    if (need > r->state_cap) {
        free(r->state_buf);
        r->state_buf = xmalloc(need);
        r->state_cap = need;
    }
    size_t n = 0;
    st = llmm_seq_save_buffer(r->ctx, src, (int32_t)(o->c % 4), r->state_buf, r->state_cap, &n);
    if (out_of_memory(r, st)) return 1;
    if (!expect_status(r, "llmm_seq_save_buffer", st, LLMM_OK)) return 0;
    /* a state loads where the sequence runs with the adapters it was computed under */
    const ref_seq *s = &r->ref.s[src];
    ref_state next = r->ref;
    int want = LLMM_OK;
    if (k_cfgs[s->cfg].n != 0 || k_cfgs[next.s[dst].cfg].n != 0)
        want = s->cfg == next.s[dst].cfg ? LLMM_OK : LLMM_ERR_BAD_FILE;
    if (want == LLMM_OK) {
        ref_truncate(&next.s[dst], 0);
        if (!ref_reserve(&next, dst, s->len)) want = r->prefix_cache ? -1 : LLMM_ERR_CONTEXT_FULL;
    }
    st = llmm_seq_load_buffer(r->ctx, dst, r->state_buf, n);
    if (out_of_memory(r, st)) return 1;
    if (st == LLMM_ERR_CONTEXT_FULL && want == -1) {
        r->full_refusals++;
        return 1;
    }
    if (!expect_status(r, "llmm_seq_load_buffer", st, want == -1 ? LLMM_OK : (llmm_status)want)) return 0;
    if (st) return 1;
    const uint8_t cfg = next.s[dst].cfg;
    memcpy(next.s[dst].tok, s->tok, s->len * sizeof *s->tok);
    memcpy(next.s[dst].cfg_at, s->cfg_at, s->len);
    next.s[dst].len = s->len;
    next.s[dst].cfg = cfg;
    next.s[dst].n_blocks = (s->len + BLOCK - 1) / BLOCK; /* its own blocks (with the prefix cache too) */
    for (uint32_t i = 0; i < next.s[dst].n_blocks; i++) next.s[dst].blocks[i] = next.next_block++;
    r->ref = next;
    return 1;
}

static int op_adapters(run *r, const op *o) {
    const int q = (int)(o->a % N_SEQ);
    const uint8_t cfg = (uint8_t)(o->b % N_CFGS);
    const adapter_cfg *c = &k_cfgs[cfg];
    llmm_status st;
    if (o->c & 1) { /* through the adapter cache: loaded at first use, evicted over budget */
        const int32_t ids[2] = {r->cache_ids[c->which[0]], r->cache_ids[c->which[1]]};
        st = llmm_seq_use_adapters(r->ctx, q, ids, c->scale, c->n);
    } else {
        llmm_adapter *a[2] = {r->wc->adapters[c->which[0]], r->wc->adapters[c->which[1]]};
        st = llmm_seq_set_adapters(r->ctx, q, a, c->scale, c->n);
    }
    if (out_of_memory(r, st)) return 1;
    if (!expect_status(r, "setting adapters", st, LLMM_OK)) return 0;
    r->ref.s[q].cfg = cfg;
    return 1;
}

/* Verify drafts on up to two sequences, then accept with the greedy sampler: the sequences keep
 * the pending token and the guesses that matched, the blocks of the rest go back. The drafts are
 * the fresh context's greedy continuation with one token changed, so that some are kept. */
static int op_speculate(run *r, const op *o) {
    test_rng g = rng_seeded(o->seed);
    llmm_spec_item items[MAX_ITEMS];
    llmm_token drafts[MAX_ITEMS][MAX_DRAFT];
    size_t n = 0;
    for (uint32_t k = 0; k < N_SEQ && n < 1 + o->b % MAX_ITEMS; k++) {
        const int q = (int)((o->a + k) % N_SEQ);
        if (r->ref.s[q].len == 0) continue;
        ref_seq s = r->ref.s[q];
        const llmm_token pending = (llmm_token)rng_below(&g, r->w->n_vocab);
        const uint32_t nd = rng_below(&g, MAX_DRAFT + 1);
        random_tokens(r, rng_u64(&g), drafts[n], nd);
        if (s.len < N_CTX) ref_append(&s, &pending, 1); /* else verify must refuse */
        for (uint32_t i = 0; i < nd && s.len < N_CTX && s.len > r->ref.s[q].len; i++) {
            const float *logits = NULL;
            if (!fresh_logits(r, &s, s.len, &logits)) return 0;
            drafts[n][i] = argmax(logits, r->w->n_vocab);
            ref_append(&s, &drafts[n][i], 1);
        }
        if (nd) drafts[n][rng_below(&g, nd)] = (llmm_token)rng_below(&g, r->w->n_vocab);
        items[n] = (llmm_spec_item){q, pending, drafts[n], nd};
        n++;
    }
    if (n == 0) return 1;
    ref_state next = r->ref;
    int want = LLMM_OK;
    for (size_t i = 0; i < n && want != LLMM_ERR_CONTEXT_FULL; i++) {
        const uint32_t rows = 1 + (uint32_t)items[i].n_draft;
        if (next.s[items[i].seq].len + rows > N_CTX) want = LLMM_ERR_CONTEXT_FULL;
        else if (!ref_reserve(&next, items[i].seq, rows)) want = r->prefix_cache ? -1 : LLMM_ERR_CONTEXT_FULL;
    }
    llmm_status st = llmm_speculator_verify(r->spec, items, n);
    if (st == LLMM_ERR_CONTEXT_FULL && want != LLMM_OK) {
        r->full_refusals++;
        return 1;
    }
    if (out_of_memory(r, st)) return 1;
    if (!expect_status(r, "llmm_speculator_verify", st, want == -1 ? LLMM_OK : (llmm_status)want)) return 0;
    for (size_t i = 0; i < n; i++) {
        const int q = items[i].seq;
        llmm_token out[MAX_DRAFT + 1];
        size_t n_out = 0;
        st = llmm_speculator_accept(r->spec, i, r->greedy, out, MAX_DRAFT + 1, &n_out);
        if (!expect_status(r, "llmm_speculator_accept", st, LLMM_OK)) return 0;
        const size_t kept = n_out - 1;
        EXPECT(r, n_out >= 1 && kept <= items[i].n_draft, "item %zu: %zu tokens out of %zu guesses", i, n_out,
               items[i].n_draft);
        for (size_t k = 0; k < kept; k++) EXPECT(r, out[k] == items[i].draft[k], "item %zu: kept token %zu is not the guess", i, k);
        ref_seq *s = &next.s[q];
        const uint32_t len0 = r->ref.s[q].len;
        ref_truncate(s, len0);
        ref_append(s, &items[i].pending, 1);
        ref_append(s, out, (uint32_t)kept);
        /* the rejected positions' blocks are released; the copies made for them stay */
        s->n_blocks = (s->len + BLOCK - 1) / BLOCK;
        r->kept_guesses += kept;
        r->ref = next;
        /* each kept guess and the next token are the fresh context's greedy choices */
        for (size_t k = 0; k <= kept; k++)
            if (!check_greedy(r, s, len0 + 1 + (uint32_t)k, out[k])) return 0;
    }
    return 1;
}

static int apply_op(run *r, const op *o) {
    r->ref.prefix_avail = -1;
    if (r->prefix_cache) {
        llmm_context_stats st = {.size = sizeof st};
        llmm_context_get_stats(r->ctx, &st);
        r->ref.prefix_avail = (int64_t)st.blocks_free;
    }
    switch (o->kind) {
    case OP_CREATE: return op_create(r);
    case OP_FORK: return op_fork(r, o);
    case OP_FREE: return op_free(r, o, 0);
    case OP_CLEAR: return op_free(r, o, 1);
    case OP_TRUNCATE: return op_truncate(r, o);
    case OP_PREFILL: return op_prefill(r, o);
    case OP_DECODE: return op_decode(r, o, 0);
    case OP_DECODE_BATCH: return op_decode(r, o, 1);
    case OP_SAVE_LOAD: return op_save_load(r, o);
    case OP_ADAPTERS: return op_adapters(r, o);
    case OP_PREFIX_PREFILL: return op_prefix_prefill(r, o);
    case OP_SPECULATE: return op_speculate(r, o);
    case OP_ABORT_PREFILL: return op_abort_prefill(r, o);
    case OP_KINDS: break;
    }
    return failf(r, "unknown operation %d", (int)o->kind);
}

/* The operation mix: growing and shrinking about equally, so that the pool fills and empties. */
static op random_op(test_rng *g) {
    static const uint8_t weights[OP_KINDS] = {[OP_CREATE] = 4, [OP_FORK] = 6, [OP_FREE] = 5, [OP_CLEAR] = 2,
                                              [OP_TRUNCATE] = 7, [OP_PREFILL] = 8, [OP_DECODE] = 6,
                                              [OP_DECODE_BATCH] = 6, [OP_SAVE_LOAD] = 4, [OP_ADAPTERS] = 4,
                                              [OP_PREFIX_PREFILL] = 4, [OP_SPECULATE] = 3, [OP_ABORT_PREFILL] = 2};
    uint32_t total = 0;
    for (int k = 0; k < OP_KINDS; k++) total += weights[k];
    uint32_t pick = rng_below(g, total);
    int k = 0;
    while (pick >= weights[k]) pick -= weights[k++];
    return (op){(op_kind)k, rng_u32(g), rng_u32(g), rng_u32(g), rng_u64(g)};
}

/* LLMM_TEST_TRACE: each operation and the state after it, on stderr. */
static void trace_op(run *r, const op *o) {
    llmm_context_stats st = {.size = sizeof st};
    llmm_context_get_stats(r->ctx, &st);
    fprintf(stderr, "%-15s a=%u b=%u c=%u | blocks used %llu free %llu shared %llu cached %llu | lengths", k_op_names[o->kind],
            o->a % N_SEQ, o->b, o->c, (unsigned long long)st.blocks_used, (unsigned long long)st.blocks_free,
            (unsigned long long)st.blocks_shared, (unsigned long long)st.blocks_cached);
    for (int q = 0; q < N_SEQ; q++) fprintf(stderr, " %u%s", r->ref.s[q].len, r->ref.s[q].created ? "c" : "");
    fprintf(stderr, "\n");
}

/* Runs ops[0..n) on a new run; the index of the failing operation, or n. */
static size_t run_ops(run *r, const shared_world *w, int prefix_cache, const op *ops, size_t n) {
    if (run_open(r, w, w, prefix_cache)) return 0;
    const int trace = getenv("LLMM_TEST_TRACE") != NULL;
    for (size_t i = 0; i < n; i++) {
        const int ok = apply_op(r, &ops[i]) && check_state(r);
        if (trace) trace_op(r, &ops[i]);
        if (!ok) return i;
        r->ops_done++;
    }
    return n;
}

/* The shortest failing list found by dropping chunks of operations while it still fails, within
 * a time limit: printed as the reproduction. */
static size_t shrink(const shared_world *w, int prefix_cache, op *ops, size_t n) {
    const double deadline = now_s() + 120;
    run r;
    for (size_t chunk = n / 2; chunk >= 1 && now_s() < deadline; chunk /= 2) {
        for (size_t start = 0; start + chunk <= n && now_s() < deadline;) {
            op *trial = xmalloc((n - chunk) * sizeof *trial + 1);
            memcpy(trial, ops, start * sizeof *ops);
            memcpy(trial + start, ops + start + chunk, (n - start - chunk) * sizeof *ops);
            const size_t at = run_ops(&r, w, prefix_cache, trial, n - chunk);
            run_close(&r);
            if (at < n - chunk) {
                n = at + 1; /* still fails: keep the shorter list, up to its failure */
                memcpy(ops, trial, n * sizeof *ops);
            } else {
                start += chunk;
            }
            free(trial);
        }
    }
    return n;
}

static void print_reproduction(const shared_world *w, int prefix_cache, op *ops, size_t n, uint64_t seed) {
    n = shrink(w, prefix_cache, ops, n);
    run r;
    run_ops(&r, w, prefix_cache, ops, n);
    run_close(&r);
    fprintf(stderr, "seed %llu (prefix cache %s): %zu operations reproduce it: %s\n", (unsigned long long)seed,
            prefix_cache ? "on" : "off", n, r.msg);
    for (size_t i = 0; i < n; i++)
        fprintf(stderr, "  %-15s a=%u b=%u c=%u seed=%llu\n", k_op_names[ops[i].kind], ops[i].a, ops[i].b, ops[i].c,
                (unsigned long long)ops[i].seed);
}

/* ================================================================== the suite */

static uint64_t env_u64(const char *name, uint64_t fallback) {
    const char *s = getenv(name);
    return s && *s ? strtoull(s, NULL, 0) : fallback;
}

static uint64_t g_seed;

static shared_world *world_load(const llmm_allocator *alloc) {
    shared_world *w = xcalloc(1, sizeof *w);
    llmm_model_params mp;
    llmm_model_params_default(&mp, sizeof mp);
    mp.allocator = alloc;
    w->model = load_model("stories260K.gguf", &mp);
    llmm_model_info info = {.size = sizeof info};
    assert_int_equal(llmm_model_get_info(w->model, &info), LLMM_OK);
    w->n_vocab = info.n_vocab;
    for (int i = 0; i < 2; i++) {
        shared_path(w->adapter_paths[i], sizeof w->adapter_paths[i], k_adapter_files[i]);
        assert_int_equal(llmm_adapter_load(w->model, w->adapter_paths[i], &w->adapters[i]), LLMM_OK);
        llmm_adapter_info ai = {.size = sizeof ai};
        assert_int_equal(llmm_adapter_get_info(w->adapters[i], &ai), LLMM_OK);
        if (ai.bytes > w->adapter_bytes) w->adapter_bytes = ai.bytes;
    }
    return w;
}

static void world_free(shared_world *w) {
    for (int i = 0; i < 2; i++) llmm_adapter_free(w->adapters[i]);
    llmm_model_free(w->model);
    free(w);
}

static int setup(void **state) {
    *state = world_load(NULL);
    return 0;
}

static int teardown(void **state) {
    world_free(*state);
    return 0;
}

static void random_run(const shared_world *w, int prefix_cache, uint64_t seed, size_t n_ops) {
    /* seeds n and n + 1 of rng_seed are one splitmix step apart, so one run's operations would
     * be the next one's shifted: hash the seed first */
    uint64_t mixed = seed ^ (prefix_cache ? 0x5851f42d4c957f2dull : 0);
    test_rng g = rng_seeded(splitmix64_next(&mixed));
    op *ops = xmalloc(n_ops * sizeof *ops + 1);
    for (size_t i = 0; i < n_ops; i++) ops[i] = random_op(&g);
    run r;
    const double t0 = now_s();
    const size_t at = run_ops(&r, w, prefix_cache, ops, n_ops);
    run_close(&r);
    if (at < n_ops) {
        const op_kind kind = ops[at].kind;
        char msg[sizeof r.msg];
        memcpy(msg, r.msg, sizeof msg);
        print_reproduction(w, prefix_cache, ops, at + 1, seed);
        free(ops);
        fail_msg("seed %llu, operation %zu (%s): %s", (unsigned long long)seed, at, k_op_names[kind], msg);
    }
    printf("  prefix cache %s: %zu operations in %.1f s: %llu logit checks, %llu pool refusals, %llu prefix hits, "
           "%llu kept guesses, %llu aborted\n",
           prefix_cache ? "on" : "off", n_ops, now_s() - t0, (unsigned long long)r.logit_checks,
           (unsigned long long)r.full_refusals, (unsigned long long)r.prefix_hits_seen,
           (unsigned long long)r.kept_guesses, (unsigned long long)r.aborted);
    free(ops);
}

static void test_random_operations(void **state) {
    random_run(*state, 0, g_seed, env_u64("LLMM_TEST_OPS", 3000));
}

static void test_random_operations_prefix_cache(void **state) {
    random_run(*state, 1, g_seed, env_u64("LLMM_TEST_OPS", 3000));
}

/* ------------------------------------------------------------------ threads */

typedef struct thread_run {
    const shared_world *w;
    uint64_t seed;
    size_t n_ops, failed_at;
    char msg[512];
} thread_run;

static void *thread_main(void *arg) {
    thread_run *t = arg;
    uint64_t mixed = t->seed;
    test_rng g = rng_seeded(splitmix64_next(&mixed));
    op *ops = malloc(t->n_ops * sizeof *ops + 1);
    if (!ops) {
        snprintf(t->msg, sizeof t->msg, "out of memory");
        t->failed_at = 0;
        return NULL;
    }
    for (size_t i = 0; i < t->n_ops; i++) ops[i] = random_op(&g);
    run r;
    t->failed_at = run_ops(&r, t->w, (int)(t->seed & 1), ops, t->n_ops);
    memcpy(t->msg, r.msg, sizeof t->msg);
    run_close(&r);
    free(ops);
    return NULL;
}

/* Six threads, each with its own contexts and operations, over one model and one pair of
 * adapters (their reference counts change from every thread): each run must hold as alone. */
static void test_random_operations_threads(void **state) {
    enum { THREADS = 6 };
    thread_run t[THREADS];
    pthread_t id[THREADS];
    for (int i = 0; i < THREADS; i++) {
        t[i] = (thread_run){.w = *state, .seed = g_seed + 1000 * (uint64_t)(i + 1), .n_ops = env_u64("LLMM_TEST_OPS", 3000) / 4};
        assert_int_equal(pthread_create(&id[i], NULL, thread_main, &t[i]), 0);
    }
    for (int i = 0; i < THREADS; i++) assert_int_equal(pthread_join(id[i], NULL), 0);
    for (int i = 0; i < THREADS; i++)
        if (t[i].failed_at < t[i].n_ops)
            fail_msg("thread %d (seed %llu, prefix cache %s), operation %zu: %s", i, (unsigned long long)t[i].seed,
                     t[i].seed & 1 ? "on" : "off", t[i].failed_at, t[i].msg);
}

/* ------------------------------------------------------------------ allocation failures */

/* Every allocation an operation makes fails in turn (the N-th for N = 1, 2, ... until one run of
 * it reaches no failure): each time the call returns NO_MEMORY, or succeeds having coped, and
 * the context is as the reference says (unchanged after a refusal) and goes on working. Context
 * creation too. Under valgrind (`make valgrind`) nothing may leak. */
static void test_allocation_failures(void **state) {
    const shared_world *w = *state;
    failing_alloc fa = {INT32_MAX, 0};
    const llmm_allocator alloc = failing_allocator(&fa);
    shared_world *wc = world_load(&alloc);
    uint64_t mixed = g_seed ^ 0xa11ca7e5ull;
    test_rng g = rng_seeded(splitmix64_next(&mixed));
    const size_t n_ops = env_u64("LLMM_TEST_OPS", 3000) / 10;
    run r;
    size_t refusals = 0;
    for (int n = 1;; n++) { /* creation */
        fa = (failing_alloc){n - 1, 0};
        const llmm_status st = run_open(&r, w, wc, (int)(g_seed & 1));
        fa.allowed = INT32_MAX;
        if (!fa.refused) {
            assert_int_equal(st, LLMM_OK);
            break;
        }
        if (st != LLMM_ERR_NO_MEMORY) fail_msg("allocation %d failed: creation gave %s", n, llmm_status_str(st));
        run_close(&r);
        refusals++;
    }
    for (size_t i = 0; i < n_ops; i++) {
        const op o = random_op(&g);
        for (int n = 1;; n++) {
            const ref_state before = r.ref;
            r.no_memory = 0;
            fa = (failing_alloc){n - 1, 0};
            int ok = apply_op(&r, &o);
            fa.allowed = INT32_MAX;
            if (ok && r.no_memory) r.ref = before; /* refused: the reference as it was */
            ok = ok && check_state(&r);
            if (!ok) {
                run_close(&r);
                world_free(wc);
                fail_msg("seed %llu, operation %zu (%s), allocation %d failed: %s", (unsigned long long)g_seed, i,
                         k_op_names[o.kind], n, r.msg);
            }
            if (!fa.refused || !r.no_memory) break; /* no failure reached, or the call coped */
            refusals++;
        }
    }
    printf("  %zu operations, %zu refused for memory\n", n_ops, refusals);
    run_close(&r);
    world_free(wc);
}

/* ------------------------------------------------------------------ regressions */

static llmm_context *small_context(const shared_world *w, uint32_t n_ctx_total, int prefix_cache) {
    llmm_context_params cp;
    llmm_context_params_default(&cp, sizeof cp);
    cp.n_ctx = N_CTX;
    cp.n_seq_max = 4;
    cp.n_threads = 1;
    cp.backend = LLMM_BACKEND_CPU;
    cp.kv_block_size = BLOCK;
    cp.n_ctx_total = n_ctx_total;
    cp.prefix_cache = prefix_cache;
    return make_context(w->model, &cp);
}

static llmm_context_stats stats_of(llmm_context *c) {
    llmm_context_stats st = {.size = sizeof st};
    assert_int_equal(llmm_context_get_stats(c, &st), LLMM_OK);
    return st;
}

/* A batch the pool cannot hold once refused left behind the copy of a shared tail block that
 * an earlier row had made (the pool one block shorter after a failed call); now the whole
 * batch's blocks are counted before any is taken. */
static void test_refused_batch_leaves_the_pool_as_it_was(void **state) {
    const shared_world *w = *state;
    llmm_context *c = small_context(w, 4 * BLOCK, 0); /* 4 blocks */
    const llmm_token tok[3 * BLOCK] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    llmm_seq_id fork = -1;
    assert_int_equal(llmm_prefill(c, 0, tok, 2, 0), LLMM_OK); /* one block, partly filled */
    assert_int_equal(llmm_seq_fork(c, 0, &fork), LLMM_OK);   /* shared */
    assert_int_equal(llmm_prefill(c, 2, tok, 2 * BLOCK, 0), LLMM_OK); /* two full blocks: one left */
    const llmm_context_stats before = stats_of(c);
    assert_int_equal(before.blocks_used, 3);
    assert_int_equal(before.blocks_shared, 1);
    /* row 0 needs a copy of the shared block, row 1 a new block: two, one free */
    const llmm_seq_id seqs[2] = {0, 2};
    assert_int_equal(llmm_decode(c, seqs, tok, 2), LLMM_ERR_CONTEXT_FULL);
    const llmm_context_stats after = stats_of(c);
    assert_int_equal(after.blocks_used, before.blocks_used);
    assert_int_equal(after.blocks_shared, before.blocks_shared);
    /* one row alone fits */
    assert_int_equal(llmm_decode(c, seqs, tok, 1), LLMM_OK);
    llmm_context_free(c);
}

/* A loaded state's blocks were offered to the prefix cache under the adapters the sequence ran
 * with at load, though the state may have been computed under others (the saved sequence
 * changed its adapters midway): a later prompt without adapters attached K/V computed with
 * them. Loaded states are no longer published. */
static void test_loaded_state_is_not_offered_to_the_prefix_cache(void **state) {
    const shared_world *w = *state;
    llmm_context *c = small_context(w, 16 * BLOCK, 1);
    llmm_token tok[2 * BLOCK + 1];
    for (size_t i = 0; i < ARRAY_LEN(tok); i++) tok[i] = (llmm_token)(10 + 7 * i);
    assert_int_equal(llmm_seq_set_adapters(c, 0, &w->adapters[0], NULL, 1), LLMM_OK);
    assert_int_equal(llmm_prefill(c, 0, tok, 2 * BLOCK, 0), LLMM_OK); /* K/V with the adapter */
    assert_int_equal(llmm_seq_set_adapters(c, 0, NULL, NULL, 0), LLMM_OK); /* then none */
    size_t n = 0;
    assert_int_equal(llmm_seq_save_buffer(c, 0, 0, NULL, 0, &n), LLMM_ERR_BUFFER_TOO_SMALL);
    void *buf = xmalloc(n);
    assert_int_equal(llmm_seq_save_buffer(c, 0, 0, buf, n, &n), LLMM_OK);
    assert_int_equal(llmm_seq_load_buffer(c, 1, buf, n), LLMM_OK);
    free(buf);
    const uint64_t hits = stats_of(c).prefix_hits;
    assert_int_equal(llmm_prefill(c, 2, tok, ARRAY_LEN(tok), 0), LLMM_OK);
    assert_int_equal(stats_of(c).prefix_hits, hits);
    llmm_context_free(c);
}

int main(void) {
    g_seed = env_u64("LLMM_TEST_SEED", 0);
    if (!g_seed) g_seed = (uint64_t)(now_s() * 1e6) | 1;
    printf("test_api_model: seed %llu (LLMM_TEST_SEED=%llu replays it)\n", (unsigned long long)g_seed,
           (unsigned long long)g_seed);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_random_operations),
        cmocka_unit_test(test_random_operations_prefix_cache),
        cmocka_unit_test(test_random_operations_threads),
        cmocka_unit_test(test_allocation_failures),
        cmocka_unit_test(test_refused_batch_leaves_the_pool_as_it_was),
        cmocka_unit_test(test_loaded_state_is_not_offered_to_the_prefix_cache),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
