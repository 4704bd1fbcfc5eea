#include "support/numeric.h"

#include <math.h>
#include <string.h>

uint32_t bits_of_f32(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

float f32_of_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

void fill_nan(float *p, size_t n) {
    for (size_t i = 0; i < n; i++) p[i] = NAN;
}

double ref_half(uint16_t h) {
    const int e = (h >> 10) & 31, m = h & 1023;
    double v;
    if (e == 31) v = m ? NAN : INFINITY;
    else if (e == 0) v = ldexp((double)m, -24);
    else v = ldexp(1024.0 + m, e - 25);
    return (h & 0x8000) ? -v : v;
}

int half_is_nan(uint16_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0; }

uint16_t ref_f32_to_f16(float f) {
    const uint16_t sign = signbit(f) ? 0x8000 : 0;
    const double a = fabs((double)f);
    if (a >= 65520.0) return sign | 0x7c00;
    uint32_t lo = 0, hi = 0x7bff; /* largest h with ref_half(h) <= a */
    while (lo < hi) {
        uint32_t mid = (lo + hi + 1) / 2;
        if (ref_half((uint16_t)mid) <= a) lo = mid;
        else hi = mid - 1;
    }
    if (lo == 0x7bff) return sign | 0x7bff;
    const double dl = a - ref_half((uint16_t)lo), dh = ref_half((uint16_t)(lo + 1)) - a;
    uint32_t r = dl < dh ? lo : dh < dl ? lo + 1 : ((lo & 1) ? lo + 1 : lo);
    return (uint16_t)(sign | r);
}

double ref_bf16(uint16_t h) { return (double)f32_of_bits((uint32_t)h << 16); }

uint16_t ref_f32_to_bf16(float f) {
    const uint32_t u = bits_of_f32(f);
    const uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    const uint32_t au = u & 0x7fffffffu;
    if (au == 0x7f800000u) return sign | 0x7f80;
    const uint16_t lo = (uint16_t)(au >> 16);
    const double a = fabs((double)f);
    const double vlo = ref_bf16(lo), vhi = lo + 1 == 0x7f80 ? ldexp(1.0, 128) : ref_bf16((uint16_t)(lo + 1));
    const double dl = a - vlo, dh = vhi - a;
    uint16_t r = dl < dh ? lo : dh < dl ? (uint16_t)(lo + 1) : ((lo & 1) ? (uint16_t)(lo + 1) : lo);
    return sign | r;
}
