/* The scalar kernel table (the reference every SIMD table is tested against, and the
 * fallback on any CPU) and the run-time choice among the tables: cpuid on x86-64, the ELF
 * hardware capabilities on aarch64 Linux. */
#define _DEFAULT_SOURCE /* syscall */
#include "kernel_table.h"
#include "kernels/conv_rule.h"
#include "kernels/delta_rule.h"
#include "kernels/exp_poly.h"
#include "kernels/gelu_poly.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Eight lanes added as a tree, ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)): how the
 * SIMD tables reduce their vectors (x86's hsum, the same pairs on NEON), so sums taken in eight
 * lanes here give their bits. */
static double sum_tree8(const double l[8]) { return ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7])); }

/* Sum of squares in double (eight lanes, the tree, the tail in order), scale in float: the
 * reference engine's rms_norm, then the weight. */
static void rms_norm_row_scalar(const float *x, const float *w, float *out, size_t dim, float eps) {
    double l[8] = {0};
    size_t i = 0;
    for (; i + 8 <= dim; i += 8)
        for (int k = 0; k < 8; k++) l[k] += (double)(x[i + k] * x[i + k]);
    double sum = sum_tree8(l);
    for (; i < dim; i++) sum += (double)(x[i] * x[i]);
    const float mean = (float)(sum / (double)dim);
    const float scale = 1.0f / sqrtf(mean + eps);
    for (i = 0; i < dim; i++) out[i] = x[i] * scale * w[i];
}

static void silu_mul_scalar(float *gate, const float *up, size_t n) {
    for (size_t i = 0; i < n; i++) gate[i] = gate[i] / (1.0f + llmm_exp_poly(-gate[i])) * up[i];
}

static void gelu_mul_scalar(float *gate, const float *up, size_t n) {
    for (size_t i = 0; i < n; i++) gate[i] = llmm_gelu_poly(gate[i]) * up[i];
}

/* Attention's q.k as every SIMD table computes it: eight lanes of fused multiply-adds over the
 * whole groups of eight, sum_tree8's tree, then the n % 8 tail in order. With Q8 activations a
 * one-ulp difference in a score can move an activation across a quantization step and redraw
 * the quantization noise (docs/performance.md "Fidelity"), so the tables agree to the bit. */
static float dot_f32_scalar(const float *a, const float *b, size_t n) {
    float l[8] = {0};
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) l[k] = fmaf(a[i + k], b[i + k], l[k]);
    float sum = ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]));
    for (; i < n; i++) sum += a[i] * b[i];
    return sum;
}

/* The softmax numerator with a double-precision sum, as the reference engine does (eight lanes,
 * the tree, the tail in order). */
static double exp_sub_sum_scalar(float *s, size_t n, float max) {
    double l[8] = {0};
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) {
            s[i + k] = llmm_exp_poly(s[i + k] - max);
            l[k] += s[i + k];
        }
    double sum = sum_tree8(l);
    for (; i < n; i++) {
        s[i] = llmm_exp_poly(s[i] - max);
        sum += s[i];
    }
    return sum;
}

/* One rounding per value (fmaf), as the SIMD tables' FMA: attention's value sums, half of its
 * arithmetic, take one instruction per value instead of two. */
static void axpy_scalar(float *y, float a, const float *x, size_t n) {
    for (size_t i = 0; i < n; i++) y[i] = fmaf(a, x[i], y[i]);
}

/* Gated DeltaNet's state kernels: kernels/delta_rule.h over every column. */
static void delta_step_scalar(float *S, size_t d, const float *k, const float *q, const float *v, float beta,
                              float decay, float kq, float *o) {
    delta_step_cols(S, d, 0, d, k, q, v, beta, decay, kq, o);
}

static void delta_read_scalar(const float *S, size_t d, const float *const *x, size_t n, float *y) {
    delta_read_cols(S, d, 0, d, x, n, y);
}

static void delta_update_scalar(float *S, size_t d, float decay, const float *a, const float *u, size_t n) {
    delta_update_cols(S, d, 0, d, decay, a, u, n);
}

static void conv_rows_scalar(float *y, size_t ldy, const float *const *x, size_t n_out, const float *taps,
                             size_t n_taps, size_t c0, size_t c1) {
    conv_rows_cols(y, ldy, x, n_out, taps, n_taps, c0, c1);
}

/* No matmul kernels: every type takes the generic path through the type table. */
const cpu_kernels llmm__cpu_kernels_scalar = {
    .name = "scalar",
    .isa = CPU_ISA_SCALAR,
    .rms_norm_row = rms_norm_row_scalar,
    .silu_mul = silu_mul_scalar,
    .gelu_mul = gelu_mul_scalar,
    .dot_f32 = dot_f32_scalar,
    .exp_sub_sum = exp_sub_sum_scalar,
    .axpy = axpy_scalar,
    .delta_step = delta_step_scalar,
    .delta_read = delta_read_scalar,
    .delta_update = delta_update_scalar,
    .conv_rows = conv_rows_scalar,
};

#if defined(__x86_64__)
#include <cpuid.h>
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

/* Whether this process may use the AMX tile data registers: Linux hands them out on request
 * (arch_prctl ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA), as their state is 8 KiB per thread. */
static int amx_permitted(void) {
#if defined(__linux__) && defined(SYS_arch_prctl)
    const long arch_req_xcomp_perm = 0x1023, xfeature_xtiledata = 18;
    return syscall(SYS_arch_prctl, arch_req_xcomp_perm, xfeature_xtiledata) == 0;
#else
    return 0;
#endif
}

/* Which register state the OS saves on a context switch (XCR0); only valid when cpuid says
 * OSXSAVE. */
static uint64_t xgetbv0(void) {
    uint32_t eax, edx;
    __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
    return ((uint64_t)edx << 32) | eax;
}

/* From cpuid directly (the compilers' __builtin_cpu_supports do not all know f16c or
 * avx512vnni): the instructions, and the OS saving the registers they use (XCR0: SSE and AVX
 * state for AVX2; opmask and all 32 wide registers as well for AVX-512). */
static int x86_has(cpu_isa isa) {
    uint32_t a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
    const int fma = (c >> 12) & 1, osxsave = (c >> 27) & 1, avx = (c >> 28) & 1, f16c = (c >> 29) & 1;
    if (!(fma && osxsave && avx && f16c)) return 0;
    const uint64_t xcr0 = xgetbv0();
    if ((xcr0 & 0x6) != 0x6) return 0;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return 0;
    const int avx2 = (b >> 5) & 1;
    if (isa == CPU_ISA_AVX2) return avx2;
    if (isa == CPU_ISA_AVX_VNNI) {
        /* AVX-VNNI: leaf 7, sub-leaf 1 (which exists when sub-leaf 0's EAX, the last sub-leaf, is
         * at least 1), EAX bit 4 */
        if (!avx2 || a < 1 || !__get_cpuid_count(7, 1, &a, &b, &c, &d)) return 0;
        return (a >> 4) & 1;
    }
    const int f = (b >> 16) & 1, bw = (b >> 30) & 1, vl = (b >> 31) & 1, vnni = (c >> 11) & 1;
    const int avx512 = avx2 && f && bw && vl && vnni && (xcr0 & 0xe0) == 0xe0;
    if (isa != CPU_ISA_AMX) return avx512;
    /* AMX-TILE and AMX-INT8 (EDX bits 24, 25), the OS saving tile state (XCR0 bits 17, 18), and
     * Linux's per-process permission for the tile data (granted once, process-wide: asking
     * again is harmless); a kernel without the request (before 5.16) refuses it */
    const int amx = ((d >> 24) & 3) == 3 && (xcr0 & 0x60000) == 0x60000;
    return avx512 && amx && amx_permitted();
}
#endif

#if defined(__aarch64__)
#if defined(__linux__)
#include <sys/auxv.h>

/* The kernel's view of the CPU (ELF hardware capabilities): reading the ID registers directly
 * would trap on kernels that do not emulate them. */
static int arm_has(cpu_isa isa) {
    const unsigned long hw = getauxval(AT_HWCAP);
    if (!(hw & HWCAP_ASIMD)) return 0;
    return isa == CPU_ISA_NEON || (hw & HWCAP_ASIMDDP) != 0;
}
#else
/* Advanced SIMD is required by every AArch64 ABI in use; the dot product is not, and without
 * a portable way to ask, it is left off. */
static int arm_has(cpu_isa isa) { return isa == CPU_ISA_NEON; }
#endif
#endif

static int cpu_has(cpu_isa isa) {
    switch (isa) {
    case CPU_ISA_SCALAR: return 1;
#if defined(__x86_64__)
    case CPU_ISA_AVX2:
    case CPU_ISA_AVX512:
    case CPU_ISA_AMX: return x86_has(isa);
    case CPU_ISA_AVX_VNNI: return x86_has(isa) || x86_has(CPU_ISA_AVX512); /* the VEX or the EVEX code */
#endif
#if defined(__aarch64__)
    case CPU_ISA_NEON:
    case CPU_ISA_NEON_DOTPROD: return arm_has(isa);
#endif
    default: return 0;
    }
}

const cpu_kernels *llmm__cpu_kernels_get(cpu_isa isa) {
    if (!cpu_has(isa)) return NULL;
    switch (isa) {
    case CPU_ISA_SCALAR: return &llmm__cpu_kernels_scalar;
#if defined(__x86_64__)
    case CPU_ISA_AVX2: return &llmm__cpu_kernels_avx2;
    case CPU_ISA_AVX_VNNI: return x86_has(isa) ? &llmm__cpu_kernels_avxvnni : &llmm__cpu_kernels_avxvnni_evex;
    case CPU_ISA_AVX512: return &llmm__cpu_kernels_avx512;
    case CPU_ISA_AMX: return &llmm__cpu_kernels_amx;
#endif
#if defined(__aarch64__)
    case CPU_ISA_NEON: return &llmm__cpu_kernels_neon;
    case CPU_ISA_NEON_DOTPROD: return &llmm__cpu_kernels_neon_dotprod;
#endif
    default: return NULL;
    }
}

const cpu_kernels *llmm__cpu_kernels_select(cpu_isa cap) {
    for (int isa = (int)CPU_ISA_COUNT - 1; isa > (int)CPU_ISA_SCALAR; isa--) {
        if (isa > (int)cap) continue;
        const cpu_kernels *k = llmm__cpu_kernels_get((cpu_isa)isa);
        if (k) return k;
    }
    return &llmm__cpu_kernels_scalar;
}

cpu_isa llmm__cpu_kernels_env_cap(void) {
    static const char *const names[CPU_ISA_COUNT] = {"scalar", "avx2", "avxvnni", "avx512", "neon", "dotprod", "amx"};
    const char *v = getenv("LLMM_CPU_KERNELS");
    if (v)
        for (int i = 0; i < (int)CPU_ISA_COUNT; i++)
            if (strcmp(v, names[i]) == 0) return (cpu_isa)i;
    return CPU_ISA_COUNT;
}
