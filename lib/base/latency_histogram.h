/* A fixed-size histogram of durations, for latency percentiles without an allocation per
 * sample: what a streaming app watches is the tail of its inter-token times, not their mean.
 *
 * Buckets are log-linear over microseconds: exact below 16 us, then each power of two split in
 * 16 equal buckets, so a bucket is at most 1/16 of its lower bound wide. A percentile is the
 * middle of the bucket holding that rank (within 3.2 % of a sample of that bucket), clamped to
 * the exact minimum and maximum, which are kept beside the counts. Durations past 2^40 us (12
 * days) land in the last bucket. */
#ifndef LLMM_LATENCY_HISTOGRAM_H
#define LLMM_LATENCY_HISTOGRAM_H

#include <stdint.h>

#define LLMM_LATENCY_SUB_BUCKETS 16
#define LLMM_LATENCY_OCTAVES 37 /* 2^4 .. 2^40 us */
#define LLMM_LATENCY_BUCKETS (LLMM_LATENCY_SUB_BUCKETS * (1 + LLMM_LATENCY_OCTAVES))

typedef struct llmm_latency_histogram {
    uint64_t n;
    double min_ms, max_ms;
    uint32_t counts[LLMM_LATENCY_BUCKETS]; /* saturate at UINT32_MAX */
} llmm_latency_histogram;

/* The four figures an app reads: p50, p95, p99 and the maximum, in milliseconds (all 0 before
 * the first sample). */
typedef struct llmm_latency_summary {
    double p50_ms, p95_ms, p99_ms, max_ms;
} llmm_latency_summary;

void llmm__latency_reset(llmm_latency_histogram *h);
/* ms < 0 (a clock that went back) counts as 0. */
void llmm__latency_add(llmm_latency_histogram *h, double ms);
/* The smallest bucket value v such that at least p % of the samples are <= v (p in (0, 100]). */
double llmm__latency_percentile(const llmm_latency_histogram *h, double p);
llmm_latency_summary llmm__latency_summary(const llmm_latency_histogram *h);
/* The summary into four fields of a public stats struct. */
void llmm__latency_export(const llmm_latency_histogram *h, double *p50_ms, double *p95_ms, double *p99_ms,
                          double *max_ms);

#endif
