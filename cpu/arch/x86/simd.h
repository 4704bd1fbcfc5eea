/* Inline helpers shared by the x86 kernel files. Included only by files compiled with at
 * least -mavx2 -mfma -mf16c (avx2.c, avx512.c), each of which gets its own
 * copy compiled for its instruction set. */
#ifndef LLMM_SIMD_X86_H
#define LLMM_SIMD_X86_H

#if !defined(__AVX2__) || !defined(__FMA__) || !defined(__F16C__)
#error "simd.h needs -mavx2 -mfma -mf16c (see the Makefile's per-file flags)"
#endif

#include <immintrin.h>
#include <string.h>

#include "base/common.h"

#define SIMD_ALWAYS_INLINE static inline __attribute__((always_inline))

/* Unaligned loads through void pointers: the weights are packed 18- or 34-byte blocks. */
SIMD_ALWAYS_INLINE __m256i load_256(const void *p) { return _mm256_loadu_si256((const __m256i *)p); }
SIMD_ALWAYS_INLINE __m128i load_128(const void *p) { return _mm_loadu_si128((const __m128i *)p); }

SIMD_ALWAYS_INLINE uint16_t load_u16(const uint8_t *p) {
    uint16_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* Next-tile prefetch. The matmul kernels work on tiles of a few weight rows; while one tile
 * is computed, the next tile of the same chunk (the rows after it, contiguous in memory) is
 * prefetched, spread evenly over the tile's loop: each step prefetches the next tile's share
 * of the bytes it reads itself. Without it one core streams a fraction of the bandwidth,
 * waiting on the interleaved rows that the hardware prefetcher does not follow. The float
 * kernels' tiles of up to half the L1 go to L1, larger ones to L2, where in L1 they would
 * evict the current tile; the quantized kernels prefetch to
 * L2 always (prefetch_next in gemm_int8.h). Addresses are integers: a prefetch never faults,
 * and nothing past the chunk is prefetched (another thread reads that). */
#define PF_L1_MAX_TILE 16384

SIMD_ALWAYS_INLINE void prefetch_span(uintptr_t p, size_t n, int to_l2) {
    /* unrolled: a kernel's span is a few lines, a constant, and the loop's compare and branch
     * cost more than the prefetches (visible in a decode profile when not unrolled) */
    if (to_l2) {
#pragma GCC unroll 8
        for (size_t k = 0; k < n; k += 64) _mm_prefetch((const char *)(p + k), _MM_HINT_T1);
    } else {
#pragma GCC unroll 8
        for (size_t k = 0; k < n; k += 64) _mm_prefetch((const char *)(p + k), _MM_HINT_T0);
    }
}

/* Lanes [l0, l0 + n) of v to out[0 .. n). */
SIMD_ALWAYS_INLINE void store_lanes(float *out, __m256 v, size_t l0, size_t n) {
    if (n == 8) {
        _mm256_storeu_ps(out, v);
        return;
    }
    float tmp[8];
    _mm256_storeu_ps(tmp, v);
    for (size_t i = 0; i < n; i++) out[i] = tmp[l0 + i];
}

/* Eight halves widened (exact). */
SIMD_ALWAYS_INLINE __m256 load_f16x8(const void *p) { return _mm256_cvtph_ps(load_128(p)); }

SIMD_ALWAYS_INLINE float hmax_ps(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

SIMD_ALWAYS_INLINE float hsum_ps(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

SIMD_ALWAYS_INLINE int32_t hsum_epi32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

SIMD_ALWAYS_INLINE double hsum_pd(__m256d v) {
    __m128d s = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
    s = _mm_add_sd(s, _mm_unpackhi_pd(s, s));
    return _mm_cvtsd_f64(s);
}

/* Both halves of eight floats widened to double. */
SIMD_ALWAYS_INLINE __m256d widen_lo(__m256 v) { return _mm256_cvtps_pd(_mm256_castps256_ps128(v)); }
SIMD_ALWAYS_INLINE __m256d widen_hi(__m256 v) { return _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)); }

/* e^x, within 2 ulp of expf over the whole float range (tests/test_simd_kernels.c measures it):
 * x = n ln2 + r with |r| <= ln2/2 (ln2 in two parts, so r is exact to float rounding), e^r by
 * the Cephes degree-6 polynomial, then 2^n as two power-of-two factors so that n from -151 to
 * 129 neither wraps the exponent field nor loses the gradual underflow: results past the
 * float range come out as 0 or +inf by the multiplication itself. */
SIMD_ALWAYS_INLINE __m256 exp256_ps(__m256 x) {
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-104.0f)), _mm256_set1_ps(89.0f));
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    const __m256i ni = _mm256_cvtps_epi32(n);
    const __m256i n1 = _mm256_srai_epi32(ni, 1), n2 = _mm256_sub_epi32(ni, n1);
    const __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, _mm256_set1_epi32(127)), 23));
    const __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, _mm256_set1_epi32(127)), 23));
    return _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
}

#endif
