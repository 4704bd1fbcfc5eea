// simt_loads.h: global memory loads through __ldg with the device's alignment rule (emulated
// build only; included by simt.h).
//
// A device load of n bytes (ld.global.nc.u16, .u32, .v2.u32, .v4.u32, ...) must sit at an
// address that is a multiple of n (PTX ISA, "Addresses as Operands": a misaligned access is an
// error, on the GPU "misaligned address"); the host's loads would read such an address silently.
// So a kernel that reads wider than a byte does it through __ldg, and here __ldg refuses, naming
// the kernel, block and thread, what the GPU would refuse: wide loads stay proven in make test.
// CUDA's vector types carry their natural alignment (simt_types.h), so alignof(T) is the width.
// (A plain dereference of a cast pointer cannot be checked here: kernels do not load wide that way.)
#ifndef LLMMINI_SIMT_LOADS_H
#define LLMMINI_SIMT_LOADS_H

#include <cstdint>
#include <cstring>

#include "simt_sched.h"
#include "simt_types.h"

namespace simt {
namespace detail {
// Also what a kernel's emulated build uses for a wide access to shared memory through a byte
// buffer (ld.shared/st.shared have the same rule; memcpy keeps C++'s aliasing rules).
// make cuda-profile: clang traces a memcpy of up to 8 bytes as the access it becomes, but not a
// wider one, so a wide load or store reports itself; the caller's file and line stand for its
// instruction.
template <class T>
inline T aligned_load(const T *p, const char *what, const char *file = __builtin_FILE(),
                      unsigned line = __builtin_LINE()) {
    if (reinterpret_cast<uintptr_t>(p) % alignof(T) != 0)
        die("%s: misaligned %zu-byte load at %p (the device faults: an access must be aligned to its width)",
            what, alignof(T), static_cast<const void *>(p));
    T v;
    std::memcpy(&v, p, sizeof v);
#ifdef SIMT_PROFILE
    if (sizeof v > 8) simt::profile::vector_copy(p, &v, sizeof v, file + line);
#else
    (void)file, (void)line;
#endif
    return v;
}
template <class T>
inline void aligned_store(T *p, const T &v, const char *what, const char *file = __builtin_FILE(),
                          unsigned line = __builtin_LINE()) {
    if (reinterpret_cast<uintptr_t>(p) % alignof(T) != 0)
        die("%s: misaligned %zu-byte store at %p (the device faults: an access must be aligned to its width)",
            what, alignof(T), static_cast<void *>(p));
    std::memcpy(p, &v, sizeof v);
#ifdef SIMT_PROFILE
    if (sizeof v > 8) simt::profile::vector_copy(&v, p, sizeof v, file + line);
#else
    (void)file, (void)line;
#endif
}
} // namespace detail
} // namespace simt

template <class T> inline T __ldg(const T *p, const char *file = __builtin_FILE(), unsigned line = __builtin_LINE()) {
    return simt::detail::aligned_load(p, "__ldg", file, line);
}

#endif
