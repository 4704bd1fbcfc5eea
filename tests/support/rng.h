/* The tests' one random number generator: splitmix64 (Steele, Lea and Flood, "Fast splittable
 * pseudorandom number generators", 2014), as a stream the test holds and seeds explicitly, so
 * that a failure reproduces and two streams never share state. Independent of the library's
 * own generator (lib/sampling/), which test_sampler checks against this one's first outputs.
 * C and C++ (the CUDA kernel suites of tests/cuda/ use it too). */
#ifndef LLMM_TEST_SUPPORT_RNG_H
#define LLMM_TEST_SUPPORT_RNG_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A stream: the splitmix64 state. rng_seed sets it from a seed; a suite that pins the data its
 * tests were written with may also start it at a raw state ({.state = X}). */
typedef struct test_rng {
    uint64_t state;
} test_rng;

/* One splitmix64 step on a raw state (what every function below draws from). */
uint64_t splitmix64_next(uint64_t *state);

/* Starts r at seed: state = seed * 0x9e3779b97f4a7c15 + 0x632be59bd9b4e019, so that small
 * seeds (1, 2, 11, ...) give unrelated streams. */
void rng_seed(test_rng *r, uint64_t seed);
/* A stream started at seed (rng_seed), for an initializer. */
test_rng rng_seeded(uint64_t seed);

uint64_t rng_u64(test_rng *r);
/* The high 32 bits of the next output. */
uint32_t rng_u32(test_rng *r);
/* In [0, n), n > 0 (rng_u32 modulo n). */
uint32_t rng_below(test_rng *r, uint32_t n);
/* Uniform in [0, 1), 53 bits. */
double rng_unit(test_rng *r);
/* Uniform in [lo, hi), never exactly 0 (a value a kernel skips or zeroes then shows). */
float rng_float(test_rng *r, float lo, float hi);
/* n values of rng_float in a new buffer (xmalloc: never NULL); the caller frees it. */
float *rng_floats(test_rng *r, size_t n, float lo, float hi);

#ifdef __cplusplus
}
#endif

#endif
