// simt_math.h: device intrinsics, atomics and CUDA's min/max overloads for the emulated build
// (included by simt.h).
//
// Atomics are plain read-modify-writes: threads switch only at barriers and warp primitives, so
// nothing can interleave with them. Transcendentals are moved within CUDA's ulp bounds (below);
// the other fast-math intrinsics (__logf, __sinf, __fdividef, ...) compute the accurate
// function.
#ifndef LLMMINI_SIMT_MATH_H
#define LLMMINI_SIMT_MATH_H

#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>

// ---- atomics

#define SIMT_ATOMIC(fn, T, expr)                                                                 \
    inline T fn(T *address, T val) {                                                             \
        T old = *address;                                                                        \
        *address = (expr);                                                                       \
        return old;                                                                              \
    }
#define SIMT_ATOMIC_INTS(fn, expr)                                                               \
    SIMT_ATOMIC(fn, int, expr)                                                                   \
    SIMT_ATOMIC(fn, unsigned, expr)                                                              \
    SIMT_ATOMIC(fn, unsigned long long, expr)
SIMT_ATOMIC_INTS(atomicAdd, old + val)
SIMT_ATOMIC(atomicAdd, float, old + val)
SIMT_ATOMIC(atomicAdd, double, old + val)
SIMT_ATOMIC(atomicSub, int, old - val)
SIMT_ATOMIC(atomicSub, unsigned, old - val)
SIMT_ATOMIC_INTS(atomicExch, val)
SIMT_ATOMIC(atomicExch, float, val)
SIMT_ATOMIC_INTS(atomicMin, val < old ? val : old)
SIMT_ATOMIC(atomicMin, long long, val < old ? val : old)
SIMT_ATOMIC_INTS(atomicMax, val > old ? val : old)
SIMT_ATOMIC(atomicMax, long long, val > old ? val : old)
SIMT_ATOMIC_INTS(atomicAnd, old & val)
SIMT_ATOMIC_INTS(atomicOr, old | val)
SIMT_ATOMIC_INTS(atomicXor, old ^ val)
SIMT_ATOMIC(atomicInc, unsigned, old >= val ? 0u : old + 1)
SIMT_ATOMIC(atomicDec, unsigned, (old == 0 || old > val) ? val : old - 1)
#undef SIMT_ATOMIC_INTS
#undef SIMT_ATOMIC

#define SIMT_ATOMIC_CAS(T)                                                                       \
    inline T atomicCAS(T *address, T compare, T val) {                                           \
        T old = *address;                                                                        \
        if (old == compare)                                                                      \
            *address = val;                                                                      \
        return old;                                                                              \
    }
SIMT_ATOMIC_CAS(int)
SIMT_ATOMIC_CAS(unsigned)
SIMT_ATOMIC_CAS(unsigned long long)
SIMT_ATOMIC_CAS(unsigned short)
#undef SIMT_ATOMIC_CAS

// No reordering to fence against: threads interleave only at barriers and warp primitives.
inline void __threadfence() {}
inline void __threadfence_block() {}
inline void __threadfence_system() {}

// ---- bit reinterpretation (__ldg: simt_loads.h)

inline int __float_as_int(float f) {
    int i;
    std::memcpy(&i, &f, sizeof i);
    return i;
}
inline unsigned __float_as_uint(float f) { return (unsigned)__float_as_int(f); }
inline float __int_as_float(int i) {
    float f;
    std::memcpy(&f, &i, sizeof f);
    return f;
}
inline float __uint_as_float(unsigned u) { return __int_as_float((int)u); }

// ---- transcendentals as the device rounds them
//
// CUDA's math functions return a result within a documented number of ulps of the correctly
// rounded one (CUDA C++ Programming Guide, "Mathematical Functions": expf, exp2f, sinf, cosf,
// tanhf, rsqrtf 2; logf, log2f 1; __expf 2 + floor(|1.173 x|)), not glibc's. In kernels these
// names give the correctly rounded value (from double) moved by k ulps, |k| at most that bound,
// k chosen by a hash of the argument's bits and the function: deterministic, different from
// libm's value for about four arguments in five, so a test that silently needs libm's exact
// value (or a kernel that needs the CPU's) fails in make test as it would on a GPU. Exact
// results (exp(0), tanh(0), infinities) and the range ([-1, 1], >= 0) and sign of the result
// are kept.
namespace simt {
namespace detail {
inline uint32_t mix_bits(uint32_t x) {
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    x ^= x >> 16;
    return x;
}
inline float within_ulps(float x, double exact, int max_ulps, uint32_t salt, float lo, float hi) {
    const float nearest = (float)exact;
    if (!std::isfinite(nearest) || (double)nearest == exact || max_ulps <= 0)
        return nearest;
    uint32_t bits;
    std::memcpy(&bits, &x, sizeof bits);
    const int k = (int)(mix_bits(bits ^ salt * 0x9e3779b9u) % (2u * (unsigned)max_ulps + 1)) - max_ulps;
    float r = nearest;
    for (int i = 0; i < k; i++)
        r = nextafterf(r, INFINITY);
    for (int i = 0; i > k; i--)
        r = nextafterf(r, -INFINITY);
    if (!std::isfinite(r) || r < lo || r > hi || r == 0.0f || std::signbit(r) != std::signbit(nearest))
        return nearest;
    return r;
}
} // namespace detail
} // namespace simt

inline float simt_device_expf(float x) { return simt::detail::within_ulps(x, std::exp((double)x), 2, 1, 0.0f, INFINITY); }
inline float simt_device_exp2f(float x) { return simt::detail::within_ulps(x, std::exp2((double)x), 2, 2, 0.0f, INFINITY); }
inline float simt_device_logf(float x) { return simt::detail::within_ulps(x, std::log((double)x), 1, 3, -INFINITY, INFINITY); }
inline float simt_device_log2f(float x) { return simt::detail::within_ulps(x, std::log2((double)x), 1, 4, -INFINITY, INFINITY); }
inline float simt_device_sinf(float x) { return simt::detail::within_ulps(x, std::sin((double)x), 2, 5, -1.0f, 1.0f); }
inline float simt_device_cosf(float x) { return simt::detail::within_ulps(x, std::cos((double)x), 2, 6, -1.0f, 1.0f); }
inline float simt_device_tanhf(float x) { return simt::detail::within_ulps(x, std::tanh((double)x), 2, 7, -1.0f, 1.0f); }
inline float simt_device_rsqrtf(float x) { return simt::detail::within_ulps(x, 1.0 / std::sqrt((double)x), 2, 8, 0.0f, INFINITY); }
inline float simt_device_fast_expf(float x) {
    const double bound = 2.0 + std::floor(std::fabs(1.173 * (double)x));
    return simt::detail::within_ulps(x, std::exp((double)x), bound < 64.0 ? (int)bound : 64, 9, 0.0f, INFINITY);
}
#define expf(x) simt_device_expf(x)
#define exp2f(x) simt_device_exp2f(x)
#define logf(x) simt_device_logf(x)
#define log2f(x) simt_device_log2f(x)
#define sinf(x) simt_device_sinf(x)
#define cosf(x) simt_device_cosf(x)
#define tanhf(x) simt_device_tanhf(x)

// ---- float intrinsics

inline float __expf(float x) { return simt_device_fast_expf(x); }
inline float __exp10f(float x) { return powf(10.0f, x); }
inline float __logf(float x) { return logf(x); }
inline float __log2f(float x) { return log2f(x); }
inline float __sinf(float x) { return sinf(x); }
inline float __cosf(float x) { return cosf(x); }
inline float __tanf(float x) { return tanf(x); }
inline float __powf(float x, float y) { return powf(x, y); }
inline float __fdividef(float x, float y) { return x / y; }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __fsqrt_rn(float x) { return sqrtf(x); }
inline float rsqrtf(float x) { return simt_device_rsqrtf(x); }
// correctly rounded: 1/sqrt in double is exact to well past float's 24 bits
inline float __frsqrt_rn(float x) { return (float)(1.0 / sqrt((double)x)); }
inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
// the _rn operations are never contracted into an fma, on a GPU as here
inline float __fadd_rn(float a, float b) {
    volatile float r = a + b;
    return r;
}
inline float __fmul_rn(float a, float b) {
    volatile float r = a * b;
    return r;
}
inline float __fsub_rn(float a, float b) {
    volatile float r = a - b;
    return r;
}
inline float __saturatef(float x) { return x >= 1.0f ? 1.0f : x > 0.0f ? x : 0.0f; }
inline void __sincosf(float x, float *s, float *c) { *s = sinf(x), *c = cosf(x); }

// float -> int as cvt.rni/rzi/rmi/rpi.s32.f32: NaN gives 0, out of range saturates
inline int simt_float_to_int(float f, float rounded) {
    if (std::isnan(f))
        return 0;
    if (rounded >= 2147483648.0f)
        return INT_MAX;
    if (rounded < -2147483648.0f)
        return INT_MIN;
    return (int)rounded;
}
inline int __float2int_rn(float f) { return simt_float_to_int(f, nearbyintf(f)); }
inline int __float2int_rz(float f) { return simt_float_to_int(f, truncf(f)); }
inline int __float2int_rd(float f) { return simt_float_to_int(f, floorf(f)); }
inline int __float2int_ru(float f) { return simt_float_to_int(f, ceilf(f)); }
inline unsigned __float2uint_rn(float f) {
    float r = nearbyintf(f);
    if (std::isnan(f) || r <= 0.0f)
        return 0;
    return r >= 4294967296.0f ? UINT_MAX : (unsigned)r;
}
inline float __int2float_rn(int i) { return (float)i; }
inline float __uint2float_rn(unsigned u) { return (float)u; }

// ---- integer intrinsics

inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x ? __builtin_clz((unsigned)x) : 32; }
inline int __clzll(long long x) { return x ? __builtin_clzll((unsigned long long)x) : 64; }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __ffsll(long long x) { return __builtin_ffsll(x); }
inline unsigned __brev(unsigned x) {
    unsigned r = 0;
    for (int i = 0; i < 32; i++, x >>= 1)
        r = (r << 1) | (x & 1);
    return r;
}
inline unsigned __umulhi(unsigned a, unsigned b) {
    return (unsigned)(((unsigned long long)a * b) >> 32);
}
inline int __mulhi(int a, int b) { return (int)(((long long)a * b) >> 32); }
inline unsigned __umul24(unsigned a, unsigned b) { return (a & 0xffffff) * (b & 0xffffff); }
// Selects bytes of the 8-byte value {y:x} by the low 3 bits of each selector nibble, as CUDA
// documents it (prmt's sign-replicate bit 3 is not part of __byte_perm).
inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
    unsigned long long v = ((unsigned long long)y << 32) | x;
    unsigned r = 0;
    for (int i = 0; i < 4; i++)
        r |= (unsigned)((v >> (8 * ((s >> (4 * i)) & 7))) & 0xff) << (8 * i);
    return r;
}
// Four-way byte dot product with 32-bit accumulate (dp4a.s32.s32 / dp4a.u32.u32).
// The accumulation wraps modulo 2^32 as the instruction's does (no signed overflow here).
inline int __dp4a(int a, int b, int c) {
    unsigned sum = (unsigned)c;
    for (int i = 0; i < 4; i++)
        sum += (unsigned)((int)(int8_t)(a >> (8 * i)) * (int)(int8_t)(b >> (8 * i)));
    return (int)sum;
}
inline unsigned __dp4a(unsigned a, unsigned b, unsigned c) {
    for (int i = 0; i < 4; i++)
        c += ((a >> (8 * i)) & 0xff) * ((b >> (8 * i)) & 0xff);
    return c;
}

// ---- min/max: CUDA's global overloads (mixed signedness compares as unsigned, as there)

#define SIMT_MINMAX(T)                                                                           \
    inline T min(T a, T b) { return b < a ? b : a; }                                             \
    inline T max(T a, T b) { return a < b ? b : a; }
SIMT_MINMAX(int)
SIMT_MINMAX(unsigned)
SIMT_MINMAX(long)
SIMT_MINMAX(unsigned long)
SIMT_MINMAX(long long)
SIMT_MINMAX(unsigned long long)
#undef SIMT_MINMAX
inline unsigned min(int a, unsigned b) { return min((unsigned)a, b); }
inline unsigned min(unsigned a, int b) { return min(a, (unsigned)b); }
inline unsigned max(int a, unsigned b) { return max((unsigned)a, b); }
inline unsigned max(unsigned a, int b) { return max(a, (unsigned)b); }
inline float min(float a, float b) { return fminf(a, b); }
inline float max(float a, float b) { return fmaxf(a, b); }
inline double min(double a, double b) { return fmin(a, b); }
inline double max(double a, double b) { return fmax(a, b); }

#endif
