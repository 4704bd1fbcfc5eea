/* The CPU backend's kernel table: one per instruction set (scalar; AVX2, AVX-VNNI, AVX-512 on x86-64;
 * NEON, NEON with dotprod on aarch64), chosen once per backend init from cpuid or the ELF
 * hardware capabilities and kept in the backend state, so one binary runs on any x86-64 and
 * any aarch64 CPU.
 *
 * Every SIMD kernel computes what the scalar reference computes:
 *  - int8 dots (Q4_0, Q8_0 weights): bit for bit the type's vec_dot (its trait, format/quant.h). The per-block
 *    integer sums are exact in any order; the float part, sum += (float)isum * (d_w * d_x),
 *    runs in block order with one float lane per weight row (no FMA), as the scalar loop does.
 *  - K-quant dots (Q2_K..Q6_K weights, Q8_K operand): bit for bit the type's vec_dot. The
 *    per-super-block integer sums are exact in any order; the float part,
 *    sum += x_d * (d * sum_q - dmin * sum_m), runs in block order, one lane per row, no FMA.
 *  - Q5_0, Q4_1, Q5_1, IQ4_NL weights: bit for bit the type's vec_dot, as Q4_0 (the min's
 *    m * s_x added to each block's product before the block is summed, as the scalar does).
 *  - IQ4_XS weights (Q8_K operand): bit for bit; per super-block one exact int32 sum of the
 *    sub-block sums times their integer scales, then sum += (float)isum * (d_w * d_x).
 *  - F32 weights: bit for bit llmm__dot_f32 (eight partial sums, no FMA, tail first).
 *  - F16/BF16 weights: bit for bit the type's vec_dot (products exact in float, summed
 *    in 16 float lanes, the lanes added pairwise, then the tail in order; lib/format/quant.c).
 *  - attention's q.k (dot_f32, attn_scores): bit for bit the scalar table's: eight lanes of
 *    fused multiply-adds, a tree, the tail; the value sums one fmaf per value.
 *  - softmax, SiLU and GELU: bit for bit the scalar table's, through one exp (kernels/exp_poly.h, within 2 ulp
 *    of expf; the vector exps take the same steps) and the same order of the softmax sum.
 *  - RMSNorm: bit for bit (squares in float, summed in double).
 *  - Gated DeltaNet's state (delta_step, delta_read, delta_update): bit for bit, one fused
 *    multiply-add chain per value in a fixed order, vector lanes across columns
 *    (kernels/delta_rule.h, kernels/delta_tiles.h).
 *  - the short convolution (conv_rows): bit for bit, products added in tap order from 0, no
 *    FMA, vector lanes across channels (kernels/conv_rule.h, kernels/conv_tiles.h).
 * So every table, x86 or ARM, gives the same logits (tests/test_fidelity checks it).
 * The table holds only const data and function pointers: there is no mutable global. */
#ifndef LLMM_CPU_KERNEL_TABLE_H
#define LLMM_CPU_KERNEL_TABLE_H

#include <stddef.h>
#include <stdint.h>

#include "format/quant.h"
#include "backend/tensor.h"

/* Higher is better within an architecture (llmm__cpu_kernels_select walks down); the other
 * architecture's values are never available, so they are simply passed over. */
typedef enum cpu_isa {
    CPU_ISA_SCALAR = 0,
    CPU_ISA_AVX2 = 1,         /* AVX2 + FMA + F16C */
    CPU_ISA_AVX_VNNI = 2,     /* and 256-bit VNNI: AVX-VNNI, or AVX512-VNNI + VL (arch/x86/avxvnni.c) */
    CPU_ISA_AVX512 = 3,       /* AVX-512 F/BW/VL + VNNI (and the AVX2 set) */
    CPU_ISA_NEON = 4,         /* AArch64 Advanced SIMD */
    CPU_ISA_NEON_DOTPROD = 5, /* and the ARMv8.2 dot product (SDOT) */
    CPU_ISA_AMX = 6,          /* the AVX-512 set and AMX-INT8 tiles, the OS letting the process use them */
    CPU_ISA_COUNT
} cpu_isa;

/* How a matmul kernel wants its activation rows: in the weight type's operand format (its
 * trait's operand_type, format/blocks.h), laid out as below; the matmul op prepares them once
 * per call. The values are the operand types' ids, so a weight type's kind is read from its
 * row (cpu_operand_of), never restated per kernel. */
typedef enum cpu_operand_kind {
    CPU_OPERAND_F32 = LLMM_TYPE_F32,   /* the activations as they are */
    CPU_OPERAND_F16 = LLMM_TYPE_F16,   /* rounded to f16, as floats in cpu_operand.f32 */
    CPU_OPERAND_BF16 = LLMM_TYPE_BF16, /* rounded to bf16, as floats in cpu_operand.f32 */
    CPU_OPERAND_Q8 = LLMM_TYPE_Q8_0,   /* Q8_0 quants, split by field (cpu_operand.qs/d/sum) */
    CPU_OPERAND_Q8K = LLMM_TYPE_Q8_K,  /* Q8_K quants, split by field (cpu_operand.qs/d/bsums) */
    CPU_OPERAND_Q8_1 = LLMM_TYPE_Q8_1, /* Q8_1 quants, split by field (cpu_operand.qs/d/s) */
} cpu_operand_kind;

/* The operand a matmul by weight_type takes: a type the CPU multiplies (its trait has a vec_dot). */
static inline cpu_operand_kind cpu_operand_of(uint32_t weight_type) {
    return (cpu_operand_kind)llmm__type_get(weight_type)->operand_type;
}

/* n_rows activation rows of n values, prepared. The Q8 fields hold exactly the quants and
 * scales llmm__quantize_row_q8_0 produces, but split so that the int8 kernels load a block's
 * 32 quants as one aligned-size vector, plus each block's quant sum for the offset
 * corrections of unsigned operands (Q4_0's nibble - 8, VNNI's w + 128). The Q8K fields hold
 * exactly llmm__quantize_row_q8_K's quants, scales and group sums, split the same way (the
 * K-quant kernels load a row's 16 group sums of a super-block as one vector). The Q8_1 fields
 * hold exactly llmm__quantize_row_q8_1's quants and its f16 d and s, widened. */
typedef struct cpu_operand {
    size_t n;             /* values per row (a multiple of 32 for Q8, of 256 for Q8K) */
    const float *f32;     /* (n_rows, n): F32, or F16 / BF16 rounded values */
    const int8_t *qs;     /* (n_rows, n) */
    const float *d;       /* Q8: (n_rows, n / 32) block scales, f16 values widened;
                           * Q8K: (n_rows, n / 256) super-block scales */
    const int32_t *sum;   /* Q8: (n_rows, n / 32) */
    const int16_t *bsums; /* Q8K: (n_rows, n / 16) quant sums of each group of 16 */
    const float *s;       /* Q8_1: (n_rows, n / 32) d * sum(quants) as stored, f16 widened */
} cpu_operand;

/* out[r * ldo + j] = weight row j . operand row r, for j in [j0, j1) and r in [0, n_rows).
 * Each output is computed the same way whatever j0, j1 and n_rows are (tiles only group the
 * loads), so results do not depend on how the rows were split among threads. */
typedef void (*cpu_gemm_fn)(const llmm_tensor *w, size_t j0, size_t j1, const cpu_operand *x, size_t n_rows,
                            float *out, size_t ldo);

/* The K or V rows of one attention chunk as the kernel files walk them: float rows anywhere
 * (row j at f32[j]) or F16 rows at a fixed stride (row j at f16 + j * stride). Each file
 * writes its attention loops once over this, with the row format a constant at each entry
 * point, so the F16 entry points are the float ones with the loads widening in registers. */
typedef struct cpu_attn_rows {
    const float *const *f32;
    const uint16_t *f16;
    size_t stride;
} cpu_attn_rows;

typedef struct cpu_kernels {
    const char *name;
    cpu_isa isa;
    /* By weight type: this ISA's kernel, over operand rows of cpu_operand_of(type); NULL: the
     * generic path through the type's vec_dot (every type in the scalar table). */
    cpu_gemm_fn matmul[LLMM_TYPE_COUNT];
    /* The same matmul over a packed copy of the weight (packed_tiles.h: w->data the copy,
     * w->ne1 its whole tiles' rows), bit for bit its results; NULL where this table does not
     * pack the type (the scalar and NEON tables pack none). */
    cpu_gemm_fn matmul_packed[LLMM_TYPE_COUNT];
    /* Tiles [t0, t1) of w (a type matmul_packed reads) into copy, byte for byte
     * llmm__packed_tiles_pack's result; NULL where matmul_packed is all NULL */
    void (*pack_tiles)(const llmm_tensor *w, size_t t0, size_t t1, uint8_t *copy);
    /* x (n values, n % 32 == 0) to Q8 operand fields; NULL in the scalar table */
    void (*quantize_q8)(const float *x, int8_t *qs, float *d, int32_t *sum, size_t n);
    /* x (n values, n % 32 == 0) to Q8_1 operand fields, bit for bit llmm__quantize_row_q8_1's
     * quants, d and s (f16, widened); NULL: the type table's quantizer, block by block */
    void (*quantize_q8_1)(const float *x, int8_t *qs, float *d, float *s, size_t n);
    /* x (n values, n % 256 == 0) to Q8K operand fields, bit for bit llmm__quantize_row_q8_K's;
     * NULL in the scalar table */
    void (*quantize_q8k)(const float *x, int8_t *qs, float *d, int16_t *bsums, size_t n);
    /* out = x rounded to f16 (nearest even), as floats; NULL in the scalar table */
    void (*round_f16)(const float *x, float *out, size_t n);
    /* out = x / sqrt(mean(x^2) + eps) * w: squares in float, their sum in double */
    void (*rms_norm_row)(const float *x, const float *w, float *out, size_t dim, float eps);
    /* gate = gate / (1 + e^-gate) * up */
    void (*silu_mul)(float *gate, const float *up, size_t n);
    /* gate = gelu_tanh(gate) * up, as gate / (1 + e^(-2u)) (kernels/gelu_poly.h) */
    void (*gelu_mul)(float *gate, const float *up, size_t n);
    /* a . b in float (attention's q.k), bit for bit in every table: eight lanes of fused
     * multiply-adds, the lanes added as a tree, the n % 8 tail in order (kernel_table.c) */
    float (*dot_f32)(const float *a, const float *b, size_t n);
    /* s = e^(s - max) in place; returns the sum in double */
    double (*exp_sub_sum)(float *s, size_t n, float max);
    /* y += a * x, one fused multiply-add (fmaf) per value */
    void (*axpy)(float *y, float a, const float *x, size_t n);
    /* out = the halves widened (exact; attention's F16 K/V rows); NULL: kv_rows.h's converter */
    void (*f16_to_f32)(const uint16_t *h, float *out, size_t n);
    /* Attention over a chunk of n K (or V) rows of hd values, for nh query heads at once:
     * scores[i * ld + j] = q_i . rows[j], bit for bit this table's dot_f32(q_i, rows[j], hd)
     * (q_i: hd values after q_(i-1)); NULL: ops/attention.c calls dot_f32 per pair. */
    void (*attn_scores)(const float *q, size_t nh, size_t hd, const float *const *rows, size_t n, float *scores,
                        size_t ld);
    /* out_i (hd values after out_(i-1)) += w[i * ld + j] * rows[j] for j = 0 .. n-1 in order,
     * bit for bit this table's axpy per pair; NULL: ops/attention.c calls axpy per pair. */
    void (*attn_values)(float *out, size_t nh, size_t hd, const float *w, size_t ld, const float *const *rows,
                        size_t n);
    /* attn_scores over F16 rows (hd halves each, row j at rows + j * row_stride halves),
     * widened in registers: bit for bit this table's attn_scores on the widened rows (the
     * widening is exact), without writing them out; NULL: ops/attention.c widens the rows. */
    void (*attn_scores_f16)(const float *q, size_t nh, size_t hd, const uint16_t *rows, size_t row_stride, size_t n,
                            float *scores, size_t ld);
    /* attn_values over F16 rows likewise: bit for bit attn_values on the widened rows. */
    void (*attn_values_f16)(float *out, size_t nh, size_t hd, const float *w, size_t ld, const uint16_t *rows,
                            size_t row_stride, size_t n);
    /* Gated DeltaNet's state S (one value head: d x d, row i the key dimension), bit for bit
     * the scalar table's in every table (kernels/delta_rule.h: one fused multiply-add chain per
     * value, lanes are columns). delta_step is one decode token, S read once:
     *   kv = S^T k, sq = S^T q, delta = beta (v - decay kv), o = kq delta + decay sq,
     *   S = decay S + k delta^T   (kq = k . q; o before the output scale) */
    void (*delta_step)(float *S, size_t d, const float *k, const float *q, const float *v, float beta, float decay,
                       float kq, float *o);
    /* y[c * d + j] = (S^T x[c])[j] for the n vectors x[c] of d values (a prompt chunk's keys
     * and queries, S read once for all of them) */
    void (*delta_read)(const float *S, size_t d, const float *const *x, size_t n, float *y);
    /* S = decay S + sum over s < n of a_s u_s^T (a, u: n rows of d values), in s order */
    void (*delta_update)(float *S, size_t d, float decay, const float *a, const float *u, size_t n);
    /* The depthwise causal convolution of LFM2's and Gated DeltaNet's layers, channels
     * [c0, c1) of n_out outputs: y[t * ldy + c] = sum over j < n_taps of
     * x[t + j][c] * taps[c * n_taps + j], x the n_out + n_taps - 1 input rows in position
     * order (NULL: a zero row); from 0, products rounded then added in tap order, bit for bit
     * the scalar table's in every table (kernels/conv_rule.h, kernels/conv_tiles.h) */
    void (*conv_rows)(float *y, size_t ldy, const float *const *x, size_t n_out, const float *taps, size_t n_taps,
                      size_t c0, size_t c1);
} cpu_kernels;

/* The best table this CPU and build support, no better than cap (a test or the
 * LLMM_CPU_KERNELS environment variable may ask for less). */
const cpu_kernels *llmm__cpu_kernels_select(cpu_isa cap);
/* The table for exactly isa, or NULL when this CPU or build lacks it (tests iterate these). */
const cpu_kernels *llmm__cpu_kernels_get(cpu_isa isa);
/* The ISA named by LLMM_CPU_KERNELS ("scalar", "avx2", "avxvnni", "avx512", "neon", "dotprod", "amx");
 * CPU_ISA_COUNT when unset or unknown, meaning "the best available". A name from the other
 * architecture caps by its number: "avx2" on aarch64 means scalar. Read once per backend init. */
cpu_isa llmm__cpu_kernels_env_cap(void);

extern const cpu_kernels llmm__cpu_kernels_scalar;
#if defined(__x86_64__)
extern const cpu_kernels llmm__cpu_kernels_avx2;
extern const cpu_kernels llmm__cpu_kernels_avxvnni;      /* VEX: CPUs with AVX-VNNI */
extern const cpu_kernels llmm__cpu_kernels_avxvnni_evex; /* the same code, EVEX: AVX-512 CPUs without it */
extern const cpu_kernels llmm__cpu_kernels_avx512;
extern const cpu_kernels llmm__cpu_kernels_amx; /* the AVX-512 table with AMX tiles (arch/x86/gemm_amx.h) */
#endif
#if defined(__aarch64__)
extern const cpu_kernels llmm__cpu_kernels_neon;
extern const cpu_kernels llmm__cpu_kernels_neon_dotprod;
#endif

#endif
