// simt_types.h: CUDA's built-in vector types for the emulated build (included by simt.h).
// Alignment as in CUDA's vector_types.h, so that a float4 load of a misaligned pointer is as
// wrong here (UBSan: misaligned access) as on a GPU.
#ifndef LLMMINI_SIMT_TYPES_H
#define LLMMINI_SIMT_TYPES_H

struct uint3 {
    unsigned x, y, z;
};

struct dim3 {
    unsigned x, y, z;
    constexpr dim3(unsigned vx = 1, unsigned vy = 1, unsigned vz = 1) : x(vx), y(vy), z(vz) {}
    constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
    constexpr operator uint3() const { return uint3{x, y, z}; }
};

#ifdef SIMT_PROFILE
// The profiled build (simt_profile.h) must see a vector type's copy as the one wide access the
// GPU makes, where clang splits it into its components: an empty last member, at the object's
// own address, whose copy tells the profiler to merge the component accesses just made into one
// access of the whole width, at the copy's call site (noinline: its return address names it).
namespace simt {
namespace profile {
void vector_copy(const void *src, const void *dst, unsigned bytes, const void *site);
template <unsigned Bytes> struct VectorCopy {
    VectorCopy() = default;
    __attribute__((noinline)) VectorCopy(const VectorCopy &o) {
        vector_copy(&o, this, Bytes, __builtin_return_address(0));
    }
    __attribute__((noinline)) VectorCopy &operator=(const VectorCopy &o) {
        vector_copy(&o, this, Bytes, __builtin_return_address(0));
        return *this;
    }
};
} // namespace profile
} // namespace simt
#define SIMT_VECTOR_COPY(bytes) [[no_unique_address]] ::simt::profile::VectorCopy<bytes> simt_copy;
#else
#define SIMT_VECTOR_COPY(bytes)
#endif

#define SIMT_VECTOR_TYPES(name, T, align)                                                   \
    struct alignas(align * 1) name##2 { T x, y; SIMT_VECTOR_COPY(align * 1) };              \
    struct alignas(align * 2) name##4 { T x, y, z, w; SIMT_VECTOR_COPY(align * 2) };        \
    inline name##2 make_##name##2(T x, T y) { return name##2{x, y}; }                       \
    inline name##4 make_##name##4(T x, T y, T z, T w) { return name##4{x, y, z, w}; }
SIMT_VECTOR_TYPES(float, float, 8)
SIMT_VECTOR_TYPES(int, int, 8)
SIMT_VECTOR_TYPES(uint, unsigned, 8)
SIMT_VECTOR_TYPES(short, short, 4)
SIMT_VECTOR_TYPES(ushort, unsigned short, 4)
SIMT_VECTOR_TYPES(char, signed char, 2)
SIMT_VECTOR_TYPES(uchar, unsigned char, 2)
#undef SIMT_VECTOR_TYPES
#undef SIMT_VECTOR_COPY

#endif
