/* Log-linear latency buckets (latency_histogram.h). */
#include "latency_histogram.h"

#include <string.h>

void llmm__latency_reset(llmm_latency_histogram *h) { memset(h, 0, sizeof *h); }

static unsigned bucket_of(uint64_t us) {
    if (us < LLMM_LATENCY_SUB_BUCKETS) return (unsigned)us;
    unsigned top = 63u - (unsigned)__builtin_clzll(us); /* us in [2^top, 2^(top+1)) */
    if (top > 3 + LLMM_LATENCY_OCTAVES) return LLMM_LATENCY_BUCKETS - 1;
    unsigned sub = (unsigned)(us >> (top - 4)) & (LLMM_LATENCY_SUB_BUCKETS - 1);
    return LLMM_LATENCY_SUB_BUCKETS * (top - 3) + sub;
}

/* The bucket's range in microseconds: [lo, lo + width). */
static void bucket_range(unsigned b, double *lo, double *width) {
    if (b < LLMM_LATENCY_SUB_BUCKETS) {
        *lo = b;
        *width = 1;
        return;
    }
    const unsigned top = b / LLMM_LATENCY_SUB_BUCKETS + 3, sub = b % LLMM_LATENCY_SUB_BUCKETS;
    *width = (double)(1ull << (top - 4));
    *lo = (double)(1ull << top) + sub * *width;
}

void llmm__latency_add(llmm_latency_histogram *h, double ms) {
    if (!(ms > 0)) ms = 0; /* also NaN */
    const double us = ms * 1e3;
    const uint64_t whole = us >= 18446744073709549568.0 ? UINT64_MAX : (uint64_t)us;
    uint32_t *c = &h->counts[bucket_of(whole)];
    if (*c != UINT32_MAX) (*c)++;
    if (h->n == 0 || ms < h->min_ms) h->min_ms = ms;
    if (ms > h->max_ms) h->max_ms = ms;
    h->n++;
}

double llmm__latency_percentile(const llmm_latency_histogram *h, double p) {
    uint64_t total = 0;
    for (unsigned b = 0; b < LLMM_LATENCY_BUCKETS; b++) total += h->counts[b];
    if (total == 0) return 0;
    if (p > 100) p = 100;
    /* rank of the sample: the ceil(p% of n)-th smallest, at least the first */
    uint64_t rank = (uint64_t)(p / 100.0 * (double)total);
    if ((double)rank < p / 100.0 * (double)total) rank++;
    if (rank == 0) rank = 1;
    uint64_t seen = 0;
    for (unsigned b = 0; b < LLMM_LATENCY_BUCKETS; b++) {
        seen += h->counts[b];
        if (seen < rank) continue;
        double lo, width;
        bucket_range(b, &lo, &width);
        double ms = (lo + width / 2) * 1e-3;
        if (ms < h->min_ms) ms = h->min_ms;
        if (ms > h->max_ms) ms = h->max_ms;
        return ms;
    }
    return h->max_ms;
}

llmm_latency_summary llmm__latency_summary(const llmm_latency_histogram *h) {
    llmm_latency_summary s = {0};
    if (h->n == 0) return s;
    s.p50_ms = llmm__latency_percentile(h, 50);
    s.p95_ms = llmm__latency_percentile(h, 95);
    s.p99_ms = llmm__latency_percentile(h, 99);
    s.max_ms = h->max_ms;
    return s;
}

void llmm__latency_export(const llmm_latency_histogram *h, double *p50_ms, double *p95_ms, double *p99_ms,
                          double *max_ms) {
    const llmm_latency_summary s = llmm__latency_summary(h);
    *p50_ms = s.p50_ms;
    *p95_ms = s.p95_ms;
    *p99_ms = s.p99_ms;
    *max_ms = s.max_ms;
}
