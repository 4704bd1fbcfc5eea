/* The weight-block families the int8, K-quant and legacy matmul kernels handle, and where each
 * block keeps its fields: ISA-independent, shared by the x86 and NEON kernel headers. Every
 * function takes a kind that is a constant at its call sites, so it folds to a number. */
#ifndef LLMM_CPU_BLOCK_KINDS_H
#define LLMM_CPU_BLOCK_KINDS_H

#include <stddef.h>
#include <stdint.h>

#include "format/quant.h"

#define BLOCK_KIND_INLINE static inline __attribute__((always_inline))

/* The types of the int8 tiles (gemm_int8.h of each architecture): Q4_0, Q8_0 and IQ4_NL (Q4_0's
 * layout, each nibble an index into a codebook). */
typedef enum q_kind { Q_Q4_0, Q_Q8_0, Q_IQ4_NL } q_kind;

BLOCK_KIND_INLINE size_t q_block_bytes(q_kind k) {
    return k == Q_Q8_0 ? sizeof(block_q8_0) : k == Q_Q4_0 ? sizeof(block_q4_0) : sizeof(block_iq4_nl);
}

typedef enum kq_kind { KQ_Q2, KQ_Q3, KQ_Q4, KQ_Q5, KQ_Q6 } kq_kind;

BLOCK_KIND_INLINE size_t kq_block_bytes(kq_kind k) {
    return k == KQ_Q2   ? sizeof(block_q2_K)
           : k == KQ_Q3 ? sizeof(block_q3_K)
           : k == KQ_Q4 ? sizeof(block_q4_K)
           : k == KQ_Q5 ? sizeof(block_q5_K)
                        : sizeof(block_q6_K);
}
BLOCK_KIND_INLINE size_t kq_d_offset(kq_kind k) {
    return k == KQ_Q2   ? offsetof(block_q2_K, d)
           : k == KQ_Q3 ? offsetof(block_q3_K, d)
           : k == KQ_Q6 ? offsetof(block_q6_K, d)
                        : 0;
}
BLOCK_KIND_INLINE int kq_has_min(kq_kind k) { return k == KQ_Q2 || k == KQ_Q4 || k == KQ_Q5; }
BLOCK_KIND_INLINE size_t kq_dmin_offset(kq_kind k) {
    return k == KQ_Q2 ? offsetof(block_q2_K, dmin) : offsetof(block_q4_K, dmin);
}

typedef enum lq_kind { LQ_Q5_0, LQ_Q4_1, LQ_Q5_1 } lq_kind;

BLOCK_KIND_INLINE size_t lq_block_bytes(lq_kind k) {
    return k == LQ_Q5_0 ? sizeof(block_q5_0) : k == LQ_Q4_1 ? sizeof(block_q4_1) : sizeof(block_q5_1);
}
BLOCK_KIND_INLINE size_t lq_qs_offset(lq_kind k) {
    return k == LQ_Q5_0 ? offsetof(block_q5_0, qs) : k == LQ_Q4_1 ? offsetof(block_q4_1, qs) : offsetof(block_q5_1, qs);
}
BLOCK_KIND_INLINE size_t lq_qh_offset(lq_kind k) {
    return k == LQ_Q5_0 ? offsetof(block_q5_0, qh) : offsetof(block_q5_1, qh);
}

/* The legacy and IQ4_NL types the 16-row tiles (arch/x86/gemm_rows16.h) and their packed
 * copies (packed_tiles.h) handle; Q4_1 and Q5_1 are Q4_0 and Q5_0 with a per-block min m
 * instead of the offset, against Q8_1 operands (d and s = d sum(x) per block). */
typedef enum r16_kind { R16_Q4_0, R16_Q5_0, R16_Q8_0, R16_Q4_1, R16_Q5_1, R16_IQ4_NL } r16_kind;

BLOCK_KIND_INLINE size_t r16_block_bytes(r16_kind k) {
    return k == R16_Q4_0   ? sizeof(block_q4_0)
           : k == R16_Q5_0 ? sizeof(block_q5_0)
           : k == R16_Q8_0 ? sizeof(block_q8_0)
           : k == R16_Q4_1 ? sizeof(block_q4_1)
           : k == R16_Q5_1 ? sizeof(block_q5_1)
                           : sizeof(block_iq4_nl);
}
BLOCK_KIND_INLINE size_t r16_qs_offset(r16_kind k) {
    return k == R16_Q4_0   ? offsetof(block_q4_0, qs)
           : k == R16_Q5_0 ? offsetof(block_q5_0, qs)
           : k == R16_Q8_0 ? offsetof(block_q8_0, qs)
           : k == R16_Q4_1 ? offsetof(block_q4_1, qs)
           : k == R16_Q5_1 ? offsetof(block_q5_1, qs)
                           : offsetof(block_iq4_nl, qs);
}
/* the offset that made the quants unsigned; 0 for the types with a min */
BLOCK_KIND_INLINE int32_t r16_offset(r16_kind k) {
    return k == R16_Q4_0 ? 8 : k == R16_Q5_0 ? 16 : k == R16_Q8_0 || k == R16_IQ4_NL ? 128 : 0;
}
BLOCK_KIND_INLINE int r16_has_min(r16_kind k) { return k == R16_Q4_1 || k == R16_Q5_1; }
BLOCK_KIND_INLINE int r16_five_bits(r16_kind k) { return k == R16_Q5_0 || k == R16_Q5_1; }
BLOCK_KIND_INLINE size_t r16_qh_offset(r16_kind k) {
    return k == R16_Q5_0 ? offsetof(block_q5_0, qh) : offsetof(block_q5_1, qh);
}

#undef BLOCK_KIND_INLINE

#endif
