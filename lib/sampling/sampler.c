/* Token sampler: penalties, top-k, top-p, min-p, temperature, then a seeded draw. The
 * order is that of llama.cpp's common sampler chain, so its results can be compared with
 * ours; the RNG is our own so that one seed gives the same draws on every platform. */
#include "sampler.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Far beyond any context length; bounds the two window buffers at 4 MiB each. */
#define PENALTY_WINDOW_MAX (1 << 20)

typedef struct candidate {
    float logit;
    llmm_token id;
    double weight; /* unnormalized probability, filled by the step that needs it */
} candidate;

struct llmm_sampler {
    llmm_sampler_params params;
    llmm_allocator alloc_copy;
    const llmm_allocator *alloc; /* &alloc_copy, or NULL for the C library */
    uint64_t rng[4];             /* xoshiro256** state */
    llmm_token *window;          /* (penalty_last_n) ring of the last accepted tokens */
    llmm_token *window_sorted;   /* (penalty_last_n) scratch for counting repeats */
    uint32_t *window_counts;     /* (penalty_last_n) llmm__sampler_request's counts, made on first use */
    size_t window_len, window_next;
    candidate *cands;            /* (cands_cap) scratch copy of the logits */
    size_t cands_cap;
    candidate *sort_buf;         /* (sort_cap) sort_by_rank's other half, made on first use */
    size_t sort_cap;
    llmm_diag error;
};

/* ---------------------------------------------------------------- RNG */

/* splitmix64 spreads any seed (0 included) over the 256-bit xoshiro state, as its
 * authors recommend; both are fixed integer arithmetic, so identical everywhere. */
static uint64_t splitmix64_next(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t rotl64(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t xoshiro256ss_next(uint64_t s[4]) {
    uint64_t result = rotl64(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl64(s[3], 45);
    return result;
}

static void rng_seed(uint64_t s[4], uint64_t seed) {
    for (int i = 0; i < 4; i++) s[i] = splitmix64_next(&seed);
}

/* Uniform in [0, 1): the top 53 bits are exactly a double's mantissa. */
static double rng_uniform(uint64_t s[4]) { return (double)(xoshiro256ss_next(s) >> 11) * 0x1.0p-53; }

/* ---------------------------------------------------------------- params */

/* NULL when p is usable, else what is wrong with it. NaN fails every check by design. */
static const char *params_problem(const llmm_sampler_params *p) {
    if (!(p->temperature >= 0 && isfinite(p->temperature))) return "temperature must be finite and >= 0";
    if (p->top_k < 0) return "top_k must be >= 0";
    if (!(p->top_p > 0 && p->top_p <= 1)) return "top_p must be in (0, 1]";
    if (!(p->min_p >= 0 && p->min_p <= 1)) return "min_p must be in [0, 1]";
    if (!(p->repeat_penalty > 0 && isfinite(p->repeat_penalty)))
        return "repeat_penalty must be finite and > 0";
    if (!isfinite(p->frequency_penalty)) return "frequency_penalty must be finite";
    if (!isfinite(p->presence_penalty)) return "presence_penalty must be finite";
    if (p->penalty_last_n < 0 || p->penalty_last_n > PENALTY_WINDOW_MAX)
        return "penalty_last_n must be in [0, 1048576]";
    return NULL;
}

static int penalties_enabled(const llmm_sampler_params *p) {
    return p->penalty_last_n > 0 &&
           (p->repeat_penalty != 1.0f || p->frequency_penalty != 0.0f || p->presence_penalty != 0.0f);
}

/* ---------------------------------------------------------------- lifetime */

static void sampler_release(llmm_sampler *s) {
    const llmm_allocator *a = s->alloc;
    llmm_allocator copy = s->alloc_copy; /* s itself is freed through it last */
    if (a) a = &copy;
    llmm__mem_free(a, s->window);
    llmm__mem_free(a, s->window_sorted);
    llmm__mem_free(a, s->window_counts);
    llmm__mem_free(a, s->cands);
    llmm__mem_free(a, s->sort_buf);
    llmm__mem_free(a, s);
}

llmm_status llmm__sampler_create(const llmm_sampler_params *params, const llmm_allocator *alloc,
                           llmm_sampler **out, llmm_diag *d) {
    if (!out) return llmm__diag_fail(d, LLMM_ERR_INVALID_ARG, "llmm_sampler_create: out is NULL");
    *out = NULL;
    llmm_sampler_params p;
    llmm_sampler_params_default(&p, sizeof p);
    if (params && !llmm__struct_import(&p, sizeof p, params, sizeof p))
        return llmm__diag_fail(d, LLMM_ERR_INVALID_ARG, "llmm_sampler_create: params.size is too small");
    const char *problem = params_problem(&p);
    if (problem) return llmm__diag_fail(d, LLMM_ERR_INVALID_ARG, "llmm_sampler_create: %s", problem);
    if (alloc && (!alloc->alloc || !alloc->free))
        return llmm__diag_fail(d, LLMM_ERR_INVALID_ARG, "llmm_sampler_create: allocator needs both alloc and free");
    llmm_sampler *s = llmm__mem_calloc(alloc, 1, sizeof *s);
    if (!s) return llmm__diag_fail(d, LLMM_ERR_NO_MEMORY, "out of memory for the sampler");
    if (alloc) {
        s->alloc_copy = *alloc;
        s->alloc = &s->alloc_copy;
    }
    s->params = p;
    rng_seed(s->rng, p.seed);
    if (p.penalty_last_n > 0) {
        s->window = llmm__mem_calloc(s->alloc, (size_t)p.penalty_last_n, sizeof *s->window);
        s->window_sorted = llmm__mem_calloc(s->alloc, (size_t)p.penalty_last_n, sizeof *s->window_sorted);
        if (!s->window || !s->window_sorted) {
            sampler_release(s);
            return llmm__diag_fail(d, LLMM_ERR_NO_MEMORY, "out of memory for the penalty window");
        }
    }
    *out = s;
    return LLMM_OK;
}

LLMM_API llmm_status llmm_sampler_create(const llmm_sampler_params *params, llmm_sampler **out) {
    return llmm__sampler_create(params, NULL, out, NULL);
}

LLMM_API void llmm_sampler_free(llmm_sampler *sampler) {
    if (sampler) sampler_release(sampler);
}

LLMM_API const char *llmm_sampler_last_error(const llmm_sampler *sampler) {
    return sampler ? sampler->error.msg : "";
}

/* ---------------------------------------------------------------- accepted tokens */

LLMM_API llmm_status llmm_sampler_accept(llmm_sampler *sampler, llmm_token token) {
    if (!sampler) return LLMM_ERR_INVALID_ARG;
    if (token < 0)
        return llmm__diag_fail(&sampler->error, LLMM_ERR_INVALID_ARG, "llmm_sampler_accept: token %d is negative",
                         (int)token);
    size_t cap = (size_t)sampler->params.penalty_last_n;
    if (cap == 0) return LLMM_OK;
    sampler->window[sampler->window_next] = token;
    sampler->window_next = (sampler->window_next + 1) % cap;
    if (sampler->window_len < cap) sampler->window_len++;
    return LLMM_OK;
}

LLMM_API llmm_status llmm_sampler_reset(llmm_sampler *sampler) {
    if (!sampler) return LLMM_ERR_INVALID_ARG;
    rng_seed(sampler->rng, sampler->params.seed);
    sampler->window_len = 0;
    sampler->window_next = 0;
    return LLMM_OK;
}

/* ---------------------------------------------------------------- candidates */

/* Total order: higher logit first, lower id on ties. Being total (ids are distinct), any
 * sort gives the same sequence, so draws do not depend on the C library's qsort. */
static int ranks_before(const candidate *a, const candidate *b) {
    return a->logit > b->logit || (a->logit == b->logit && a->id < b->id);
}

static int cmp_candidates(const void *pa, const void *pb) {
    const candidate *a = pa, *b = pb;
    if (ranks_before(a, b)) return -1;
    return ranks_before(b, a) ? 1 : 0;
}

static int cmp_tokens(const void *pa, const void *pb) {
    llmm_token a = *(const llmm_token *)pa, b = *(const llmm_token *)pb;
    return (a > b) - (a < b);
}

static llmm_status ensure_candidates(llmm_sampler *s, size_t n) {
    if (n <= s->cands_cap) return LLMM_OK;
    size_t bytes;
    if (!size_mul_ok(n, sizeof *s->cands, &bytes))
        return llmm__diag_fail(&s->error, LLMM_ERR_NO_MEMORY, "llmm_sample: n_vocab %zu is too large", n);
    /* contents need not survive, so pass old size 0 to skip the copy */
    candidate *grown = llmm__mem_grow(s->alloc, s->cands, 0, bytes);
    if (!grown)
        return llmm__diag_fail(&s->error, LLMM_ERR_NO_MEMORY, "llmm_sample: out of memory for %zu candidates", n);
    s->cands = grown;
    s->cands_cap = n;
    return LLMM_OK;
}

/* For the penalties' results only (the input row is checked by load_candidates): huge
 * penalties can overflow a finite logit to +inf or make inf - inf. NaN can never win, so it is
 * -inf; +inf becomes FLT_MAX so that softmax stays finite (several then tie). */
static float sanitize_logit(float l) {
    if (isnan(l)) return -INFINITY;
    return l == INFINITY ? FLT_MAX : l;
}

/* Copies the row into c; returns the index of its first NaN or +inf, or n when it has none.
 * -inf is a legitimate mask (an app's logit bias or grammar), but a model's weights and
 * activations never make NaN or +inf unless they are broken or hostile, and a token drawn from
 * such a row would be garbage. The check rides on the copy, which reads the row anyway. */
static size_t load_candidates(candidate *c, const float *logits, size_t n) {
    size_t first_bad = n;
    for (size_t i = 0; i < n; i++) {
        const float l = logits[i];
        if ((isnan(l) || l == INFINITY) && first_bad == n) first_bad = i;
        c[i].logit = l;
        c[i].id = (llmm_token)i;
        c[i].weight = 0;
    }
    return first_bad;
}

/* The window is sorted into scratch so that each distinct token is penalized once with
 * its count, in O(window log window) and without a vocabulary-sized table. Relies on
 * c[] still being in id order. */
static void apply_penalties(llmm_sampler *s, candidate *c, size_t n) {
    const llmm_sampler_params *p = &s->params;
    if (!penalties_enabled(p) || s->window_len == 0) return;
    llmm_token *t = s->window_sorted;
    memcpy(t, s->window, s->window_len * sizeof *t);
    qsort(t, s->window_len, sizeof *t, cmp_tokens);
    for (size_t i = 0; i < s->window_len;) {
        size_t run = 1;
        while (i + run < s->window_len && t[i + run] == t[i]) run++;
        if ((size_t)t[i] < n) {
            float *l = &c[t[i]].logit;
            /* llama.cpp's rule: shrink toward zero-or-below, whatever the sign */
            if (*l > 0) *l /= p->repeat_penalty;
            else *l *= p->repeat_penalty;
            /* huge (negative) penalties can overflow to +inf or make inf - inf */
            *l = sanitize_logit(*l - ((float)run * p->frequency_penalty + p->presence_penalty));
        }
        i += run;
    }
}

/* Index of the best candidate: highest logit, lowest id on ties (c[] is in id order). */
static size_t argmax(const candidate *c, size_t n) {
    size_t best = 0;
    for (size_t i = 1; i < n; i++)
        if (c[i].logit > c[best].logit) best = i;
    return best;
}

/* ---------------------------------------------------------------- truncation */

/* Min-heap on rank over c[0..k): the root is the worst candidate kept so far. */
static void heap_sift_down(candidate *c, size_t k, size_t i) {
    for (;;) {
        size_t worst = i, l = 2 * i + 1, r = l + 1;
        if (l < k && ranks_before(&c[worst], &c[l])) worst = l;
        if (r < k && ranks_before(&c[worst], &c[r])) worst = r;
        if (worst == i) return;
        candidate tmp = c[i];
        c[i] = c[worst];
        c[worst] = tmp;
        i = worst;
    }
}

/* An unsigned key that orders logits best first: higher logits give smaller keys. -0 becomes
 * +0 first, since ranks_before ties them; NaN and +inf never reach the candidates. */
static uint32_t rank_key(float logit) {
    logit += 0.0f;
    uint32_t u;
    memcpy(&u, &logit, sizeof u);
    u = u & 0x80000000u ? ~u : u | 0x80000000u; /* ascending with the logit */
    return ~u;
}

/* Sorts c[0..n), which holds the ids 0..n-1 in any order, into rank order: scattered back into
 * id order, then a stable radix sort on rank_key, 8 bits a pass, so equal logits keep
 * ascending ids as ranks_before wants. O(n) where a comparison sort of a 150k vocabulary takes
 * tens of milliseconds (top-p over a flat distribution needs most of it sorted). Returns 0,
 * leaving c as it was, when its buffer cannot be allocated. */
static int sort_by_rank(llmm_sampler *s, candidate *c, size_t n) {
    if (n > s->sort_cap) {
        size_t bytes;
        if (!size_mul_ok(n, sizeof *s->sort_buf, &bytes)) return 0;
        candidate *grown = llmm__mem_grow(s->alloc, s->sort_buf, 0, bytes);
        if (!grown) return 0;
        s->sort_buf = grown;
        s->sort_cap = n;
    }
    candidate *from = s->sort_buf, *to = c;
    for (size_t i = 0; i < n; i++) from[c[i].id] = c[i];
    for (int shift = 0; shift < 32; shift += 8) {
        size_t start[256] = {0};
        for (size_t i = 0; i < n; i++) start[rank_key(from[i].logit) >> shift & 0xff]++;
        for (size_t b = 0, sum = 0; b < 256; b++) {
            const size_t count = start[b];
            start[b] = sum;
            sum += count;
        }
        for (size_t i = 0; i < n; i++) to[start[rank_key(from[i].logit) >> shift & 0xff]++] = from[i];
        candidate *t = from;
        from = to;
        to = t;
    }
    memcpy(c, from, n * sizeof *c); /* four passes from the buffer end in the buffer */
    return 1;
}

/* Beyond this many of a large vocabulary, sorting it all is cheaper than a heap of k. */
#define TOP_K_SORT_ALL 2048

/* Move the k best of c[0..n) to c[0..k), sorted; the rest stay behind them in some order
 * (swapped, not overwritten, so a larger k can be selected again). Returns how many lead c
 * sorted: k, or n when from TOP_K_SORT_ALL on everything was sorted. O(n log k) for small k,
 * O(n) beyond: a comparison sort of a 150k vocabulary costs more than the rest of the chain
 * together. c holds the ids 0..n-1. */
static size_t select_top_k(llmm_sampler *s, candidate *c, size_t n, size_t k) {
    if (LLMM_MIN(k, n) >= TOP_K_SORT_ALL && sort_by_rank(s, c, n)) return n;
    if (k < n) {
        for (size_t i = k / 2; i-- > 0;) heap_sift_down(c, k, i);
        for (size_t i = k; i < n; i++) {
            if (!ranks_before(&c[i], &c[0])) continue;
            candidate evicted = c[0];
            c[0] = c[i];
            c[i] = evicted;
            heap_sift_down(c, k, 0);
        }
    }
    qsort(c, LLMM_MIN(k, n), sizeof *c, cmp_candidates);
    return LLMM_MIN(k, n);
}

/* Fill weights with exp((logit - max) / temperature) and return their sum. */
static double fill_weights(candidate *c, size_t n, double temperature) {
    double max = c[0].logit;
    for (size_t i = 1; i < n; i++) max = c[i].logit > max ? c[i].logit : max;
    double sum = 0;
    for (size_t i = 0; i < n; i++) {
        c[i].weight = exp(((double)c[i].logit - max) / temperature);
        sum += c[i].weight;
    }
    return sum;
}

/* Smallest prefix of the candidates, best first, holding top_p of the probability, at
 * least 1. Unsorted input is sorted only as far as needed: the top 256 usually hold top_p
 * of a model's distribution, else twice as many are selected, and so on, until
 * select_top_k sorts everything (a flat distribution). */
static size_t keep_top_p(llmm_sampler *s, candidate *c, size_t n, double top_p, int sorted) {
    double sum = fill_weights(c, n, 1.0);
    for (size_t k = LLMM_MIN(n, (size_t)256);; k = LLMM_MIN(2 * k, n)) {
        const size_t led = sorted ? n : select_top_k(s, c, n, k);
        double cum = 0;
        for (size_t i = 0; i < led; i++) {
            cum += c[i].weight;
            if (cum / sum >= top_p) return i + 1;
        }
        if (led == n) return n;
    }
}

/* Keep candidates with p >= min_p * p_max, i.e. logit >= max + log(min_p); order kept. */
static size_t keep_min_p(candidate *c, size_t n, double min_p) {
    double max = c[argmax(c, n)].logit;
    double threshold = max + log(min_p);
    size_t kept = 0;
    for (size_t i = 0; i < n; i++)
        if ((double)c[i].logit >= threshold) c[kept++] = c[i];
    return kept;
}

/* Apply top-k, top-p and min-p in the reference order; returns the candidates left. */
static size_t truncate_candidates(llmm_sampler *s, candidate *c, size_t n) {
    const llmm_sampler_params *p = &s->params;
    int sorted = 0;
    if (p->top_k > 0 && (size_t)p->top_k < n) {
        select_top_k(s, c, n, (size_t)p->top_k);
        n = (size_t)p->top_k;
        sorted = 1;
    }
    if (p->top_p < 1.0f) n = keep_top_p(s, c, n, p->top_p, sorted);
    if (p->min_p > 0.0f) n = keep_min_p(c, n, p->min_p);
    return n;
}

/* Draw one candidate with probability weight / sum. The walk repeats the summation
 * order of fill_weights, so r < sum is met before the end except by rounding; then the
 * last candidate with any weight is the answer. */
static llmm_token draw(llmm_sampler *s, candidate *c, size_t n) {
    double sum = fill_weights(c, n, s->params.temperature);
    double r = rng_uniform(s->rng) * sum;
    double cum = 0;
    size_t last_positive = 0;
    for (size_t i = 0; i < n; i++) {
        if (c[i].weight <= 0) continue;
        cum += c[i].weight;
        last_positive = i;
        if (r < cum) return c[i].id;
    }
    return c[last_positive].id;
}

/* The candidates every choice starts from (llmm_sample, llmm__sampler_probs): the logits sanitized
 * and penalized in s->cands, in id order, and *best their argmax. Errors recorded on s. */
static llmm_status penalized_candidates(llmm_sampler *s, const float *logits, size_t n_vocab, size_t *best) {
    if (n_vocab == 0 || n_vocab > (size_t)INT32_MAX)
        return llmm__diag_fail(&s->error, LLMM_ERR_INVALID_ARG, "llmm_sample: n_vocab %zu is out of range", n_vocab);
    llmm_status st = ensure_candidates(s, n_vocab);
    if (st) return st;
    const size_t bad = load_candidates(s->cands, logits, n_vocab);
    if (bad < n_vocab)
        return llmm__diag_fail(&s->error, LLMM_ERR_NUMERICAL,
                         "llmm_sample: logit %zu of %zu is %s (broken weights or an overflow)", bad, n_vocab,
                         isnan(logits[bad]) ? "NaN" : "+inf");
    apply_penalties(s, s->cands, n_vocab);
    *best = argmax(s->cands, n_vocab);
    if (s->cands[*best].logit == -INFINITY)
        return llmm__diag_fail(&s->error, LLMM_ERR_INVALID_ARG, "llmm_sample: every logit is -inf");
    return LLMM_OK;
}

LLMM_API llmm_status llmm_sample(llmm_sampler *sampler, const float *logits, size_t n_vocab,
                                 llmm_token *out) {
    if (!sampler) return LLMM_ERR_INVALID_ARG;
    if (!logits || !out)
        return llmm__diag_fail(&sampler->error, LLMM_ERR_INVALID_ARG, "llmm_sample: logits and out must not be NULL");
    size_t best;
    llmm_status st = penalized_candidates(sampler, logits, n_vocab, &best);
    if (st) return st;
    candidate *c = sampler->cands;
    if (sampler->params.temperature <= 0) {
        *out = c[best].id;
        return LLMM_OK;
    }
    size_t n = truncate_candidates(sampler, c, n_vocab);
    *out = draw(sampler, c, n);
    return LLMM_OK;
}

/* ---------------------------------------------------------------- as data, for a device */

llmm_status llmm__sampler_request(llmm_sampler *s, size_t n_vocab, llmm_sample_request *out) {
    if (n_vocab == 0 || n_vocab > (size_t)INT32_MAX)
        return llmm__diag_fail(&s->error, LLMM_ERR_INVALID_ARG, "llmm_sample: n_vocab %zu is out of range", n_vocab);
    const llmm_sampler_params *p = &s->params;
    llmm_sample_request r = {
        .temperature = p->temperature,
        .top_k = p->top_k,
        .top_p = p->top_p,
        .min_p = p->min_p,
        .repeat_penalty = p->repeat_penalty,
        .frequency_penalty = p->frequency_penalty,
        .presence_penalty = p->presence_penalty,
    };
    /* the window as apply_penalties sees it: sorted, one entry per distinct token with its count */
    if (penalties_enabled(p) && s->window_len > 0) {
        if (!s->window_counts) {
            s->window_counts = llmm__mem_calloc(s->alloc, (size_t)p->penalty_last_n, sizeof *s->window_counts);
            if (!s->window_counts)
                return llmm__diag_fail(&s->error, LLMM_ERR_NO_MEMORY, "out of memory for the penalty window's counts");
        }
        llmm_token *t = s->window_sorted;
        memcpy(t, s->window, s->window_len * sizeof *t);
        qsort(t, s->window_len, sizeof *t, cmp_tokens);
        uint32_t distinct = 0;
        for (size_t i = 0; i < s->window_len;) {
            size_t run = 1;
            while (i + run < s->window_len && t[i + run] == t[i]) run++;
            t[distinct] = t[i];
            s->window_counts[distinct++] = (uint32_t)run;
            i += run;
        }
        r.n_penalized = distinct;
        r.penalized = t;
        r.counts = s->window_counts;
    }
    /* llmm_sample draws once, in draw(), exactly when it samples rather than takes the argmax */
    if (p->temperature > 0) r.uniform = rng_uniform(s->rng);
    *out = r;
    return LLMM_OK;
}

int llmm__sampler_uses_token_ids(const llmm_sampler *s) { return penalties_enabled(&s->params) && s->window_len > 0; }

/* ---------------------------------------------------------------- RNG state */

void llmm__sampler_rng_save(const llmm_sampler *s, uint64_t state[4]) { memcpy(state, s->rng, sizeof s->rng); }

void llmm__sampler_rng_restore(llmm_sampler *s, const uint64_t state[4]) { memcpy(s->rng, state, sizeof s->rng); }

/* ---------------------------------------------------------------- as probabilities, for speculation */

llmm_status llmm__sampler_probs(llmm_sampler *s, const float *logits, size_t n_vocab, float *probs) {
    size_t best;
    llmm_status st = penalized_candidates(s, logits, n_vocab, &best);
    if (st) return st;
    candidate *c = s->cands;
    memset(probs, 0, n_vocab * sizeof *probs);
    if (s->params.temperature <= 0) {
        probs[c[best].id] = 1.0f;
        return LLMM_OK;
    }
    const size_t n = truncate_candidates(s, c, n_vocab);
    const double sum = fill_weights(c, n, s->params.temperature);
    for (size_t i = 0; i < n; i++) probs[c[i].id] = (float)(c[i].weight / sum);
    return LLMM_OK;
}

double llmm__sampler_uniform(llmm_sampler *s) { return rng_uniform(s->rng); }

int llmm__sampler_is_greedy(const llmm_sampler *s) { return s->params.temperature <= 0; }

llmm_token llmm__sample_draw(const float *w, size_t n, double u) {
    double sum = 0;
    for (size_t i = 0; i < n; i++) sum += w[i];
    const double target = u * sum;
    double cum = 0;
    size_t last_positive = 0;
    for (size_t i = 0; i < n; i++) {
        if (w[i] <= 0) continue;
        cum += w[i];
        last_positive = i;
        if (target < cum) return (llmm_token)i;
    }
    return (llmm_token)last_positive;
}
