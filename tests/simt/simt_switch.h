// simt_switch.h: switching between the scheduler and a thread's coroutine (emulated build only;
// included by simt_sched.h).
//
// glibc's swapcontext makes a sigprocmask system call on every switch, and getcontext another
// per thread; where system calls are slow (about 1 us in CI's sandbox) that made an empty
// 256-thread block cost 0.8 ms, and a model's worth of launches minutes. On x86-64 and aarch64
// a switch is therefore a dozen instructions of our own that save the callee-saved registers
// on the old stack and pop them from the new one (the signal mask never changes inside a
// launch). Other targets, or SIMT_UCONTEXT=1, use ucontext.
#ifndef LLMMINI_SIMT_SWITCH_H
#define LLMMINI_SIMT_SWITCH_H

#include <ucontext.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#if !defined(SIMT_UCONTEXT) && !defined(__x86_64__) && !defined(__aarch64__)
#define SIMT_UCONTEXT 1
#endif

namespace simt {
namespace detail {

#if SIMT_UCONTEXT

struct Context {
    ucontext_t uc;
};

// getcontext "returns twice" to GCC, which then warns that locals may be clobbered; this one
// never does, since makecontext gives the context a fresh entry point before anyone resumes it.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wclobbered"
#endif
inline bool context_init(Context *c, unsigned char *stack, size_t size, void (*entry)()) {
    if (getcontext(&c->uc) != 0)
        return false;
    c->uc.uc_stack.ss_sp = stack;
    c->uc.uc_stack.ss_size = size;
    c->uc.uc_link = nullptr;
    makecontext(&c->uc, entry, 0);
    return true;
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

inline void context_switch(Context *from, Context *to) { swapcontext(&from->uc, &to->uc); }

#else

extern "C" void simt_context_switch_v1(void **save_sp, void *next_sp);

// Weak and hidden: every translation unit that includes this header emits the same routine,
// the linker keeps one, and a module built from kernel files does not export it.
#if defined(__x86_64__)
// Frame: r15 r14 r13 r12 rbx rbp, then the return address.
__asm__(".pushsection .text\n"
        ".p2align 4\n"
        ".weak simt_context_switch_v1\n"
        ".hidden simt_context_switch_v1\n"
        ".type simt_context_switch_v1, %function\n"
        "simt_context_switch_v1:\n"
        "    pushq %rbp\n"
        "    pushq %rbx\n"
        "    pushq %r12\n"
        "    pushq %r13\n"
        "    pushq %r14\n"
        "    pushq %r15\n"
        "    movq %rsp, (%rdi)\n"
        "    movq %rsi, %rsp\n"
        "    popq %r15\n"
        "    popq %r14\n"
        "    popq %r13\n"
        "    popq %r12\n"
        "    popq %rbx\n"
        "    popq %rbp\n"
        "    ret\n"
        ".size simt_context_switch_v1, .-simt_context_switch_v1\n"
        ".popsection\n");
#else
// Frame (160 bytes): x19..x28, x29 (frame pointer), x30 (return address), d8..d15.
__asm__(".pushsection .text\n"
        ".p2align 4\n"
        ".weak simt_context_switch_v1\n"
        ".hidden simt_context_switch_v1\n"
        ".type simt_context_switch_v1, %function\n"
        "simt_context_switch_v1:\n"
        "    sub sp, sp, #160\n"
        "    stp x19, x20, [sp, #0]\n"
        "    stp x21, x22, [sp, #16]\n"
        "    stp x23, x24, [sp, #32]\n"
        "    stp x25, x26, [sp, #48]\n"
        "    stp x27, x28, [sp, #64]\n"
        "    stp x29, x30, [sp, #80]\n"
        "    stp d8, d9, [sp, #96]\n"
        "    stp d10, d11, [sp, #112]\n"
        "    stp d12, d13, [sp, #128]\n"
        "    stp d14, d15, [sp, #144]\n"
        "    mov x9, sp\n"
        "    str x9, [x0]\n"
        "    mov sp, x1\n"
        "    ldp x19, x20, [sp, #0]\n"
        "    ldp x21, x22, [sp, #16]\n"
        "    ldp x23, x24, [sp, #32]\n"
        "    ldp x25, x26, [sp, #48]\n"
        "    ldp x27, x28, [sp, #64]\n"
        "    ldp x29, x30, [sp, #80]\n"
        "    ldp d8, d9, [sp, #96]\n"
        "    ldp d10, d11, [sp, #112]\n"
        "    ldp d12, d13, [sp, #128]\n"
        "    ldp d14, d15, [sp, #144]\n"
        "    add sp, sp, #160\n"
        "    ret\n"
        ".size simt_context_switch_v1, .-simt_context_switch_v1\n"
        ".popsection\n");
#endif

struct Context {
    void *sp;
};

// Builds the frame simt_context_switch_v1 pops, so that the first switch "returns" into entry
// with the stack aligned as after a call. entry must never return (its return address is 0).
inline bool context_init(Context *c, unsigned char *stack, size_t size, void (*entry)()) {
    uintptr_t top = ((uintptr_t)stack + size) & ~(uintptr_t)15;
#if defined(__x86_64__)
    void **frame = (void **)(top - 64); // 6 registers, entry, a null return address for entry
    std::memset(frame, 0, 64);
    frame[6] = (void *)entry;
#else
    void **frame = (void **)(top - 160);
    std::memset(frame, 0, 160);
    frame[11] = (void *)entry; // x30
#endif
    c->sp = frame;
    return true;
}

inline void context_switch(Context *from, Context *to) {
    simt_context_switch_v1(&from->sp, to->sp);
}

#endif

} // namespace detail
} // namespace simt

#endif
