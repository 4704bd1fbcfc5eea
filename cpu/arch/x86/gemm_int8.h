/* Q4_0 and Q8_0 weights times Q8 operand rows, for the x86 kernel files. The including file
 * defines its instruction set's pieces first:
 *   void prep_q4_0_pair(const uint8_t *qa, const uint8_t *qb, __m256i *lo, __m256i *hi)
 *                      the quants of two Q4_0 blocks (rows a and b), low nibbles [a | b] in
 *                      lo, high nibbles in hi, as unsigned bytes
 *   __m256i dot_q4_0_pair(__m256i lo, __m256i hi, __m256i x_lo, __m256i x_hi)
 *                      int32 partial sums, lanes 0-3 row a's, 4-7 row b's; x_lo holds the
 *                      operand block's quants 0-15 in both halves, x_hi 16-31
 *   Q4_0_PAIR_X16      1 when those sums come out times 16 (divided out after the sum)
 *   __m256i prep_q8_0(__m256i w)               a Q8_0 weight block's quants, made ready for
 *   __m256i dot_q8_0(__m256i prepared, __m256i x)   this dot (whose result is off by
 *   Q8_0_OFFSET times the operand block's quant sum, subtracted afterwards)
 *   Q_TILE_X           operand rows per tile (registers permitting)
 *   Q_BATCH_X          (optional) up to how many operand rows one pass takes them all, the
 *                      accumulators then in memory (default Q_TILE_X: never)
 * and gets gemm_q4_0, gemm_q8_0 and gemm_iq4_nl (cpu_gemm_fn). IQ4_NL is Q4_0's layout with
 * each nibble an index into a codebook of int8 values: one shuffle per vector looks them up,
 * and the products go through prep_q8_0 / dot_q8_0 as Q8_0's quants do.
 *
 * Layout of the work: a tile is 8 weight rows, one per float lane of an accumulator, times up
 * to Q_TILE_X operand rows. Per block, each weight row's quants are loaded (and for Q4_0
 * unpacked) once and dotted with every operand row of the tile; the eight integer sums of one
 * operand row are gathered into one vector (lane i = weight row i), scaled and added to that
 * row's accumulator. So each row's float sum runs over the blocks in order, exactly as the
 * scalar vec_dot's `sum += (float)isum * (d_w * d_x)`, without FMA: bit-identical results.
 * Q4_0 packs two rows per vector (rows k and k+4 in the two halves; a block's 16 quant bytes
 * fill a half), so its eight sums take 3 horizontal adds instead of 6 plus 3 shuffles: the
 * gathering of sums was the largest cost per block after the dots themselves. */
#ifndef LLMM_GEMM_INT8_X86_H
#define LLMM_GEMM_INT8_X86_H

#include "kernel_table.h"
#include "simd.h"
#include "kernels/block_kinds.h"
#include "kernels/gemm_tiles.h"

#define Q_ROWS 8 /* weight rows per tile: one per float lane */
#ifndef Q_BATCH_X
#define Q_BATCH_X Q_TILE_X
#endif

/* The quants of one IQ4_NL block of rows a and b laid out as prep_q4_0_pair's ([a | b],
 * weights 0-15 in lo, 16-31 in hi), looked up in the codebook and prepared for dot_q8_0. */
SIMD_ALWAYS_INLINE void prep_iq4_nl_pair(const uint8_t *qa, const uint8_t *qb, __m256i *lo, __m256i *hi) {
    const __m256i q = _mm256_loadu2_m128i((const __m128i *)(const void *)qb, (const __m128i *)(const void *)qa);
    const __m256i low4 = _mm256_set1_epi8(0x0f);
    const __m256i values = prep_q8_0(_mm256_broadcastsi128_si256(load_128(llmm__iq4_values)));
    *lo = _mm256_shuffle_epi8(values, _mm256_and_si256(q, low4));
    *hi = _mm256_shuffle_epi8(values, _mm256_and_si256(_mm256_srli_epi16(q, 4), low4));
}

/* As dot_q4_0_pair for prep_iq4_nl_pair's vectors (lanes 0-3 row a's partial sums, 4-7 row
 * b's), off by Q8_0_OFFSET times the operand block's quant sum as dot_q8_0 is. */
SIMD_ALWAYS_INLINE __m256i dot_iq4_nl_pair(__m256i lo, __m256i hi, __m256i x_lo, __m256i x_hi) {
    return _mm256_add_epi32(dot_q8_0(lo, x_lo), dot_q8_0(hi, x_hi));
}

/* Block step b of a tile prefetches the same share of the next tile (see prefetch_span), to
 * L2 whatever the tile's size: the quantized tiles' first touch is the row-order scale gather,
 * a demand stream that brings the lines on to L1 itself, and prefetches to L1 hold L1 miss
 * buffers that the demand stream and the hardware prefetcher then lack. Per-token A/B in one
 * process (pairs of decode steps alternating, 127 pairs; an A/A run gives 1.000): 0.5B decode
 * ms per token, L2 against L1 prefetch, Q4_0 0.955 / 0.953, Q8_0 0.978, Q4_K_M 0.988 (its tiles
 * mostly Q5_0); no prefetch at all 1.03. */
SIMD_ALWAYS_INLINE void prefetch_next(const uint8_t *next, size_t b, size_t block_bytes) {
    const size_t share = Q_ROWS * block_bytes;
    prefetch_span((uintptr_t)next + b * share, share, 1);
}

/* Lane i: weight row i's block sum, from the eight rows' partial sums v[i]. */
SIMD_ALWAYS_INLINE __m256i block_sums(const __m256i v[Q_ROWS]) {
    const __m256i a01 = _mm256_hadd_epi32(v[0], v[1]), a23 = _mm256_hadd_epi32(v[2], v[3]);
    const __m256i a45 = _mm256_hadd_epi32(v[4], v[5]), a67 = _mm256_hadd_epi32(v[6], v[7]);
    /* hadd stays within 128-bit halves: b03's lower half holds rows 0-3's lane 0-3 sums, its
     * upper half their lane 4-7 sums */
    const __m256i b03 = _mm256_hadd_epi32(a01, a23), b47 = _mm256_hadd_epi32(a45, a67);
    const __m256i lo = _mm256_permute2x128_si256(b03, b47, 0x20);
    const __m256i hi = _mm256_permute2x128_si256(b03, b47, 0x31);
    return _mm256_add_epi32(lo, hi);
}

/* Lane i: weight row i's block sum, from v[k] = [row k partials | row k+4 partials]. */
SIMD_ALWAYS_INLINE __m256i pair_sums(const __m256i v[4], int x16) {
    const __m256i s = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
    return x16 ? _mm256_srai_epi32(s, 4) : s;
}

/* acc += float(isum - correction) * (d_w * d_x), lane by lane (the scalar's order). */
SIMD_ALWAYS_INLINE __m256 fold_block(__m256 acc, __m256i sums, int32_t correction, __m256 d_w, float d_x) {
    const __m256i isum = _mm256_sub_epi32(sums, _mm256_set1_epi32(correction));
    const __m256 scale = _mm256_mul_ps(d_w, _mm256_set1_ps(d_x));
    return _mm256_add_ps(acc, _mm256_mul_ps(_mm256_cvtepi32_ps(isum), scale));
}

/* The f16 scales of blocks [b0, b0 + n) of the eight rows, transposed to dws[block][row], so
 * the dot loop loads a block's eight scales as one vector. Assembling them inside the dot
 * loop (eight 2-byte loads, then inserts) was its largest cost after the dots; this pass
 * costs a load and a store per row-block and touches the tile's cache lines before the dot
 * loop needs them. */
#define SCALE_SEG 256

SIMD_ALWAYS_INLINE void gather_scales(const uint8_t *base, size_t rb, size_t block_bytes, size_t b0, size_t n,
                                      uint16_t dws[SCALE_SEG][Q_ROWS]) {
    /* Row by row, in address order, unrolled. This pass is the streamed weights' first touch,
     * and a demand stream in address order is what the hardware prefetchers follow: reading the
     * eight rows interleaved (block by block) slowed decode measurably, Q8_0's most. */
    for (int i = 0; i < Q_ROWS; i++) {
        const uint8_t *p = base + i * rb + b0 * block_bytes;
        uint16_t *restrict d = &dws[0][i];
#pragma GCC unroll 4
        for (size_t k = 0; k < n; k++) d[k * Q_ROWS] = load_u16(p + k * block_bytes);
    }
}

/* Blocks [b0, b0 + n) of one tile: weight rows base + i * rb (i < 8), operand rows
 * r0 .. r0+nx-1. kind and nx are constants at every call site, so the branches on them fold. */
SIMD_ALWAYS_INLINE void q_tile_seg(const uint8_t *base, size_t rb, const uint8_t *next, size_t nb, size_t b0,
                                   size_t n, const uint16_t dws[SCALE_SEG][Q_ROWS], const cpu_operand *x, size_t r0,
                                   size_t nx, q_kind kind, __m256 *acc) {
    const size_t block_bytes = q_block_bytes(kind);
    const int32_t offset = kind == Q_Q4_0 ? 8 : Q8_0_OFFSET;
    for (size_t b = b0; b < b0 + n; b++) {
        const size_t off = b * block_bytes + 2; /* the quants, after the f16 scale */
        if (next && r0 == 0) prefetch_next(next, b, block_bytes);
        /* Q4_0, IQ4_NL: lo[k], hi[k] for the row pair (k, k+4); Q8_0: wq[i] per row */
        __m256i wq[Q_ROWS];
#pragma GCC unroll 8
        for (int i = 0; i < Q_ROWS; i++) {
            const uint8_t *a = base + i * rb + off, *pair = base + (i + 4) * rb + off;
            if (kind == Q_Q4_0 && i < 4) prep_q4_0_pair(a, pair, &wq[i], &wq[i + 4]);
            else if (kind == Q_IQ4_NL && i < 4) prep_iq4_nl_pair(a, pair, &wq[i], &wq[i + 4]);
            else if (kind == Q_Q8_0) wq[i] = prep_q8_0(load_256(a));
        }
        const __m256 d_w = _mm256_cvtph_ps(load_128(dws[b - b0]));
#pragma GCC unroll 4
        for (size_t r = 0; r < nx; r++) {
            const size_t xb = (r0 + r) * nb + b;
            const int8_t *xq = x->qs + xb * QK8_0;
            __m256i v[Q_ROWS], sums;
            if (kind != Q_Q8_0) {
                const __m256i x_lo = _mm256_broadcastsi128_si256(load_128(xq));
                const __m256i x_hi = _mm256_broadcastsi128_si256(load_128(xq + 16));
#pragma GCC unroll 4
                for (int k = 0; k < 4; k++)
                    v[k] = kind == Q_Q4_0 ? dot_q4_0_pair(wq[k], wq[k + 4], x_lo, x_hi)
                                          : dot_iq4_nl_pair(wq[k], wq[k + 4], x_lo, x_hi);
                sums = pair_sums(v, kind == Q_Q4_0 && Q4_0_PAIR_X16);
            } else {
                const __m256i xv = load_256(xq);
#pragma GCC unroll 8
                for (int i = 0; i < Q_ROWS; i++) v[i] = dot_q8_0(wq[i], xv);
                sums = block_sums(v);
            }
            acc[r] = fold_block(acc[r], sums, offset * x->sum[xb], d_w, x->d[xb]);
        }
    }
}

/* Operand rows r0 .. r0+nx-1 against the tile, a segment of scales at a time (gathered here
 * unless have_scales says dws already holds the only segment). */
SIMD_ALWAYS_INLINE void q_tile(const uint8_t *base, size_t rb, const uint8_t *next, size_t nb,
                               uint16_t dws[SCALE_SEG][Q_ROWS],
                               int have_scales, const cpu_operand *x, size_t r0, size_t nx, q_kind kind,
                               __m256 *acc) {
    const size_t block_bytes = q_block_bytes(kind);
    for (size_t r = 0; r < nx; r++) acc[r] = _mm256_setzero_ps();
    for (size_t b0 = 0; b0 < nb; b0 += SCALE_SEG) {
        const size_t n = LLMM_MIN((size_t)SCALE_SEG, nb - b0);
        if (!have_scales) gather_scales(base, rb, block_bytes, b0, n, dws);
        q_tile_seg(base, rb, next, nb, b0, n, (const uint16_t(*)[Q_ROWS])dws, x, r0, nx, kind, acc);
    }
}

/* Operand rows of a prompt (more than Q_BATCH_X) in batches of one pass each, the next from r0:
 * equal batches of at most Q_BATCH_X rows, so that none is left with one or two. Each weight
 * block is unpacked once per batch, where passes of Q_TILE_X rows unpacked it once per pass (and
 * the 16-row tiles packed on the fly, gemm_packed8.h, counted more instructions still for Q8_0). */
SIMD_ALWAYS_INLINE size_t q_batch_rows(size_t n_rows, size_t r0) {
    const size_t left = n_rows - r0, batches = (left + Q_BATCH_X - 1) / Q_BATCH_X;
    return (left + batches - 1) / batches;
}

/* All operand rows against the 8 weight rows base + i * rb; lanes [l0, l0 + nl) go to out
 * columns j ... Rows of up to SCALE_SEG blocks (8192 values) have their scales gathered once
 * for all operand tiles. */
SIMD_ALWAYS_INLINE void q_rows(const uint8_t *base, size_t rb, const uint8_t *next, size_t l0, size_t nl, size_t j,
                               const cpu_operand *x, size_t n_rows, float *out, size_t ldo, q_kind kind) {
    const size_t nb = x->n / QK8_0;
    const int one_seg = nb <= SCALE_SEG;
    uint16_t dws[SCALE_SEG][Q_ROWS];
    if (one_seg) gather_scales(base, rb, q_block_bytes(kind), 0, nb, dws);
    /* one batch has a call of its own: folded into the loop below, it counted 4 % more at 4 rows */
    if (n_rows > Q_TILE_X && n_rows <= Q_BATCH_X) {
        __m256 acc[Q_BATCH_X];
        q_tile(base, rb, next, nb, dws, one_seg, x, 0, n_rows, kind, acc);
        for (size_t r = 0; r < n_rows; r++) store_lanes(out + r * ldo + j, acc[r], l0, nl);
        return;
    }
    if (Q_BATCH_X > Q_TILE_X && n_rows > Q_TILE_X) {
        for (size_t r0 = 0, nx; r0 < n_rows; r0 += nx) {
            nx = q_batch_rows(n_rows, r0);
            __m256 acc[Q_BATCH_X];
            q_tile(base, rb, next, nb, dws, one_seg, x, r0, nx, kind, acc);
            for (size_t r = 0; r < nx; r++) store_lanes(out + (r0 + r) * ldo + j, acc[r], l0, nl);
        }
        return;
    }
    for (size_t r0 = 0; r0 < n_rows; r0 += Q_TILE_X) {
        __m256 acc[Q_TILE_X];
        const size_t nx = LLMM_MIN((size_t)Q_TILE_X, n_rows - r0);
        if (nx == Q_TILE_X) q_tile(base, rb, next, nb, dws, one_seg, x, r0, Q_TILE_X, kind, acc);
        else if (nx == 1) q_tile(base, rb, next, nb, dws, one_seg, x, r0, 1, kind, acc);
        else q_tile(base, rb, next, nb, dws, one_seg, x, r0, nx, kind, acc);
        for (size_t r = 0; r < nx; r++) store_lanes(out + (r0 + r) * ldo + j, acc[r], l0, nl);
    }
}

/* Tiles of 8 rows, walked as every kernel walks them (kernels/gemm_tiles.h). */
SIMD_ALWAYS_INLINE void gemm_q(q_kind kind, const llmm_tensor *w, size_t j0, size_t j1, const cpu_operand *x,
                               size_t n_rows, float *out, size_t ldo) {
#define Q_ROWS_CALL(base, rb, next, l0, nl, j) q_rows(base, rb, next, l0, nl, j, x, n_rows, out, ldo, kind)
    GEMM_WALK_TILES(w, j0, j1, Q_ROWS, Q_ROWS_CALL);
#undef Q_ROWS_CALL
}

GEMM_FN_FOR_KIND(gemm_q4_0, gemm_q, Q_Q4_0)
GEMM_FN_FOR_KIND(gemm_q8_0, gemm_q, Q_Q8_0)
GEMM_FN_FOR_KIND(gemm_iq4_nl, gemm_q, Q_IQ4_NL)

#endif
