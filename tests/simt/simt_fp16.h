// simt_fp16.h: __half and __nv_bfloat16 for the emulated build (included by simt.h).
//
// Only the conversions: a kernel converts to float and computes there, which also keeps it
// clear of the differences between CUDA's half operators on host and device. The types hide
// their bits (no aggregate initialisation from an integer), as CUDA's do; use
// __ushort_as_half / __half_as_ushort to reinterpret.
// Conversions from float round to nearest even with exact subnormals, overflow to infinity
// and NaN to the canonical 0x7fff, which is what cuda_fp16.hpp's host path returns.
#ifndef LLMMINI_SIMT_FP16_H
#define LLMMINI_SIMT_FP16_H

#include <cstdint>
#include <cstring>

#include "simt_types.h"

namespace simt {
namespace detail {
struct Bits16;

inline uint32_t float_bits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    return u;
}

inline float bits_float(uint32_t u) {
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
}

// Drops the low `shift` bits (1..31) of x, rounding to nearest even.
inline uint32_t shift_round_even(uint32_t x, unsigned shift) {
    uint32_t kept = x >> shift, rest = x & ((1u << shift) - 1), half = 1u << (shift - 1);
    return kept + (rest > half || (rest == half && (kept & 1)));
}

inline uint16_t float_to_half_bits(float f) {
    uint32_t x = float_bits(f), sign = (x >> 16) & 0x8000, ax = x & 0x7fffffff;
    if (ax > 0x7f800000)
        return 0x7fff;
    if (ax >= 0x477ff000) // from 65520 (halfway past 65504) upwards: infinity
        return (uint16_t)(sign | 0x7c00);
    int e = (int)(ax >> 23) - 127;
    if (e < -25) // below 2^-25, half of the smallest subnormal: zero
        return (uint16_t)sign;
    uint32_t mant = (ax & 0x7fffff) | 0x800000;
    if (e < -14) // subnormal: a count of 2^-24; mant is a count of 2^(e - 23)
        return (uint16_t)(sign | shift_round_even(mant, (unsigned)(-1 - e)));
    // a carry out of the mantissa correctly bumps the exponent
    return (uint16_t)(sign | (((uint32_t)(e + 15) << 10) + shift_round_even(ax & 0x7fffff, 13)));
}

inline float half_bits_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
    if (exp == 0x1f)
        return bits_float(sign | 0x7f800000 | (mant << 13));
    if (exp != 0)
        return bits_float(sign | ((exp + 112) << 23) | (mant << 13));
    if (mant == 0)
        return bits_float(sign);
    int shift = 0; // normalise the subnormal: value = mant * 2^-24
    while (!(mant & 0x400))
        mant <<= 1, shift++;
    return bits_float(sign | ((uint32_t)(113 - shift) << 23) | ((mant & 0x3ff) << 13));
}

inline uint16_t float_to_bfloat16_bits(float f) {
    uint32_t x = float_bits(f);
    if ((x & 0x7fffffff) > 0x7f800000)
        return 0x7fff;
    return (uint16_t)((x + 0x7fff + ((x >> 16) & 1)) >> 16);
}

} // namespace detail
} // namespace simt

struct __half {
    __half() = default;

  private:
    uint16_t bits_;
    friend struct simt::detail::Bits16;
};

struct __nv_bfloat16 {
    __nv_bfloat16() = default;

  private:
    uint16_t bits_;
    friend struct simt::detail::Bits16;
};

struct alignas(4) __half2 {
    __half x, y;
};
struct alignas(4) __nv_bfloat162 {
    __nv_bfloat16 x, y;
};
typedef __half half;
typedef __half2 half2;
typedef __nv_bfloat16 nv_bfloat16;
typedef __nv_bfloat162 nv_bfloat162;

namespace simt {
namespace detail {
struct Bits16 {
    template <class T> static uint16_t get(T v) { return v.bits_; }
    template <class T> static T make(uint16_t bits) {
        T v;
        v.bits_ = bits;
        return v;
    }
};
} // namespace detail
} // namespace simt

inline unsigned short __half_as_ushort(__half h) { return simt::detail::Bits16::get(h); }
inline __half __ushort_as_half(unsigned short u) {
    return simt::detail::Bits16::make<__half>(u);
}
inline short __half_as_short(__half h) { return (short)__half_as_ushort(h); }
inline __half __short_as_half(short s) { return __ushort_as_half((unsigned short)s); }
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 b) {
    return simt::detail::Bits16::get(b);
}
inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short u) {
    return simt::detail::Bits16::make<__nv_bfloat16>(u);
}

inline __half __float2half(float f) {
    return __ushort_as_half(simt::detail::float_to_half_bits(f));
}
inline __half __float2half_rn(float f) { return __float2half(f); }
inline float __half2float(__half h) {
    return simt::detail::half_bits_to_float(__half_as_ushort(h));
}
inline bool __hisnan(__half h) { return (__half_as_ushort(h) & 0x7fff) > 0x7c00; }
inline int __hisinf(__half h) {
    unsigned short u = __half_as_ushort(h);
    return u == 0x7c00 ? 1 : u == 0xfc00 ? -1 : 0;
}

inline __nv_bfloat16 __float2bfloat16(float f) {
    return __ushort_as_bfloat16(simt::detail::float_to_bfloat16_bits(f));
}
inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __float2bfloat16(f); }
inline float __bfloat162float(__nv_bfloat16 b) {
    return simt::detail::bits_float((uint32_t)__bfloat16_as_ushort(b) << 16);
}

inline __half2 __halves2half2(__half lo, __half hi) { return __half2{lo, hi}; }
inline __half2 __floats2half2_rn(float lo, float hi) {
    return __half2{__float2half(lo), __float2half(hi)};
}
inline __half2 __float2half2_rn(float f) { return __floats2half2_rn(f, f); }
inline __half __low2half(__half2 h) { return h.x; }
inline __half __high2half(__half2 h) { return h.y; }
inline float __low2float(__half2 h) { return __half2float(h.x); }
inline float __high2float(__half2 h) { return __half2float(h.y); }
inline float2 __half22float2(__half2 h) {
    return make_float2(__half2float(h.x), __half2float(h.y));
}

inline __nv_bfloat162 __floats2bfloat162_rn(float lo, float hi) {
    return __nv_bfloat162{__float2bfloat16(lo), __float2bfloat16(hi)};
}
inline __nv_bfloat162 __halves2bfloat162(__nv_bfloat16 lo, __nv_bfloat16 hi) {
    return __nv_bfloat162{lo, hi};
}
inline float __low2float(__nv_bfloat162 b) { return __bfloat162float(b.x); }
inline float __high2float(__nv_bfloat162 b) { return __bfloat162float(b.y); }
inline float2 __bfloat1622float2(__nv_bfloat162 b) {
    return make_float2(__bfloat162float(b.x), __bfloat162float(b.y));
}

#endif
