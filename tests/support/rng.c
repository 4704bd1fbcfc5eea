#include "support/rng.h"

#include "support/alloc.h"

uint64_t splitmix64_next(uint64_t *state) {
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void rng_seed(test_rng *r, uint64_t seed) { r->state = seed * 0x9e3779b97f4a7c15ull + 0x632be59bd9b4e019ull; }

test_rng rng_seeded(uint64_t seed) {
    test_rng r;
    rng_seed(&r, seed);
    return r;
}

uint64_t rng_u64(test_rng *r) { return splitmix64_next(&r->state); }

uint32_t rng_u32(test_rng *r) { return (uint32_t)(rng_u64(r) >> 32); }

uint32_t rng_below(test_rng *r, uint32_t n) { return rng_u32(r) % n; }

double rng_unit(test_rng *r) { return (double)(rng_u64(r) >> 11) * (1.0 / 9007199254740992.0); }

float rng_float(test_rng *r, float lo, float hi) {
    for (;;) {
        const float v = (float)(lo + (hi - lo) * rng_unit(r));
        if (v != 0.0f) return v;
    }
}

float *rng_floats(test_rng *r, size_t n, float lo, float hi) {
    float *p = xmalloc(n * sizeof *p);
    for (size_t i = 0; i < n; i++) p[i] = rng_float(r, lo, hi);
    return p;
}
