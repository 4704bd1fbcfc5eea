/* Q4_0, Q5_0 and Q8_0 prompts on AMX-INT8 tiles, for the AMX table in avx512.c
 * (included after gemm_rows16.h and the AVX-512 table's matmuls of these types, whose
 * kinds, packer, stores, walk and kernels it uses): gemm_q4_0_amx .. gemm_q5_0_amx over packed
 * copies (packed_tiles.h), gemm_q4_0_amx_stored .. over weights as stored, each 16-row tile
 * packed into the same layout a segment at a time on the fly (cpu_gemm_fn).
 *
 * Why: a prompt's matmuls are arithmetic. vpdpbusd adds 64 products per instruction; one
 * tdpbssd adds up to 16 x 16 x 64, and a chain of them runs several times the products per
 * second of two vpdpbusd a cycle (docs/performance.md, "CPU kernel choices, measured": AMX tiles). Each block (32 weights) has its
 * own scales, so a tile instruction covers one block of 16 operand rows x 16 weight rows
 * (K = 32), and the scaling becomes the work.
 *
 * Layout: the copy's group for block b of a tile is what a tile instruction wants as its B
 * tile: vector j of 64 bytes holds, in lane q, the 4 quant bytes 4j .. 4j+3 of the tile's row in
 * lane q (packed_tiles.h), so B row j is K indices 4j .. 4j+3 for the 16 columns. Q8_0's copy
 * holds the quants + 128 (unsigned): tdpbsud (signed x unsigned), the offset coming back as
 * 128 sum(x), as on the AVX-512 tiles. Q4_0's nibbles are split into 8 such rows (low nibbles:
 * weights 4j.., high: 16 + 4j..) less 8, signed: tdpbssd, no offset; Q5_0's likewise with
 * their 5th bits (the copy's masks, one vpmovm2b per vector) less 16. The A tile is 16 operand
 * rows' quants of the block, straight from the operand (x->n bytes apart).
 *
 * Faster than the AVX-512 tiles for all three types, as stored and from a copy (figures in
 * docs/performance.md, "CPU kernel choices"). The tile instructions are a small part of the
 * time: storing each block's 16 x 16 sums and scaling them (four vector operations per 16
 * outputs per block, for the bits the other tables give) is most of it, and the two slots
 * overlap it with the tile work only partly.
 *
 * Numerics: each block's integer sum is exact; per output the float part is the AVX-512 tile's
 * (cvt(isum) x (d_w x d_x), added in block order): bit-identical to the type's vec_dot.
 * Operand rows past the last whole 16 take the AVX-512 tiles. */
#ifndef LLMM_GEMM_AMX_H
#define LLMM_GEMM_AMX_H

#ifndef LLMM_GEMM_ROWS16_AVX512_H
#error "include gemm_rows16.h before gemm_amx.h"
#endif

#include <immintrin.h>

#define AMX_ROWS 16 /* operand rows (A tile rows) and weight rows (C columns) per tile call */

/* The tile configuration (palette 1), two slots that alternate by block: tiles 0 and 1 the int32
 * sums C (16 x 16), 2 and 3 the operand blocks A (16 rows x 32 bytes), 4 and 5 the weight
 * blocks B (8 rows x 64 bytes). */
typedef struct amx_config {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} amx_config;

SIMD_ALWAYS_INLINE void amx_configure(void) {
    _Alignas(64) amx_config c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    for (int slot = 0; slot < 2; slot++) {
        c.colsb[slot] = 64;
        c.rows[slot] = AMX_ROWS;
        c.colsb[2 + slot] = QK8_0;
        c.rows[2 + slot] = AMX_ROWS;
        c.colsb[4 + slot] = 64;
        c.rows[4 + slot] = QK8_0 / 4;
    }
    /* not _tile_loadconfig: GCC 12's takes its operand as an 8-byte read, so the stores to the
     * rest of c could be dropped as dead (they were, once inlined: tile instructions then
     * faulted on tiles that were not configured) */
    __asm__ volatile("ldtilecfg %0" : : "m"(c));
}

/* Group g's weights as signed bytes in the B tile's layout (w8): Q4_0's nibbles split (low:
 * weights 4j.., high: 16 + 4j..) less 8; Q5_0's with their 5th bits (mask j's bit 4q + k is
 * byte 4q + k of vector j: one vpmovm2b each) less 16. */
SIMD_ALWAYS_INLINE void amx_signed_weights(r16_kind kind, const uint8_t *g, int8_t w8[QK8_0 / 4][64]) {
    const __m512i low4 = _mm512_set1_epi8(0x0f), bit4 = _mm512_set1_epi8(0x10);
    const __m512i offset = _mm512_set1_epi8(kind == R16_Q5_0 ? 16 : 8);
    const uint8_t *q = g + 2 * R16_ROWS + (kind == R16_Q5_0 ? 64 : 0);
#pragma GCC unroll 4
    for (int v = 0; v < 4; v++) {
        const __m512i w = _mm512_loadu_si512(q + 64 * v);
        __m512i lo = _mm512_and_si512(w, low4), hi = _mm512_and_si512(_mm512_srli_epi16(w, 4), low4);
        if (kind == R16_Q5_0) {
            __mmask64 m_lo, m_hi;
            memcpy(&m_lo, g + 2 * R16_ROWS + 8 * v, sizeof m_lo);
            memcpy(&m_hi, g + 2 * R16_ROWS + 8 * (4 + v), sizeof m_hi);
            lo = _mm512_or_si512(lo, _mm512_and_si512(_mm512_movm_epi8(m_lo), bit4));
            hi = _mm512_or_si512(hi, _mm512_and_si512(_mm512_movm_epi8(m_hi), bit4));
        }
        _mm512_store_si512(w8[v], _mm512_sub_epi8(lo, offset));
        _mm512_store_si512(w8[4 + v], _mm512_sub_epi8(hi, offset));
    }
}

/* The tile work of the block in group g into slot C, A, B (tile numbers: immediates), the sums
 * stored to c. Q4_0 and Q5_0 go through w8, signed (tdpbssd: no offset to take back); Q8_0's
 * copy is the B tile as it is (quants + 128: tdpbsud, the offset taken back with the operand's
 * sums: made signed through a buffer, its stores delayed the tile load more than the 16
 * subtractions cost). A: the operand block, rows stride bytes apart. */
#define AMX_BLOCK(C, A, B, kind, g, w8, xq, stride, c)                                                \
    do {                                                                                               \
        if ((kind) == R16_Q8_0) {                                                                      \
            _tile_loadd(B, (g) + 2 * R16_ROWS, 64);                                                    \
        } else {                                                                                       \
            amx_signed_weights((kind), (g), (w8));                                                     \
            _tile_loadd(B, (w8), 64);                                                                  \
        }                                                                                              \
        _tile_zero(C);                                                                                 \
        _tile_loadd(A, (xq), (stride));                                                                \
        if ((kind) == R16_Q8_0) _tile_dpbsud(C, A, B);                                                 \
        else _tile_dpbssd(C, A, B);                                                                    \
        _tile_stored(C, (c), 64);                                                                      \
    } while (0)

/* Operand rows r0 .. r0+15 against blocks [b0, b1) of one tile in the packed layout (g: the
 * group of b0), added to acc (the 16 rows' sums, lanes in tile order). The tile work of block
 * b + 1 is issued before the float work of block b, in the other slot, so that the two
 * overlap. */
SIMD_ALWAYS_INLINE void amx_blocks(r16_kind kind, const uint8_t *g, size_t b0, size_t b1, const cpu_operand *x,
                                   size_t r0, __m512 acc[AMX_ROWS]) {
    const size_t nb = x->n / QK8_0, gb = R16_ROWS * r16_block_bytes(kind);
    _Alignas(64) int32_t c[2][AMX_ROWS][AMX_ROWS];
    _Alignas(64) int8_t w8[2][QK8_0 / 4][64];
    const int8_t *xq = x->qs + r0 * x->n;
    AMX_BLOCK(0, 2, 4, kind, g, w8[0], xq + b0 * QK8_0, x->n, c[0]);
    for (size_t b = b0; b < b1; b++) {
        const uint8_t *gr = g + (b - b0) * gb;
        if (b + 1 < b1) {
            const uint8_t *next = gr + gb;
            if ((b - b0) & 1) AMX_BLOCK(0, 2, 4, kind, next, w8[0], xq + (b + 1) * QK8_0, x->n, c[0]);
            else AMX_BLOCK(1, 3, 5, kind, next, w8[1], xq + (b + 1) * QK8_0, x->n, c[1]);
        }
        const __m512 d_w = _mm512_cvtph_ps(load_256(gr));
        const int32_t(*cs)[AMX_ROWS] = c[(b - b0) & 1];
#pragma GCC unroll 16
        for (size_t r = 0; r < AMX_ROWS; r++) {
            const size_t xb = (r0 + r) * nb + b;
            __m512i isum = _mm512_load_si512(cs[r]);
            if (kind == R16_Q8_0) isum = _mm512_sub_epi32(isum, _mm512_set1_epi32(128 * x->sum[xb]));
            const __m512 scale = _mm512_mul_ps(d_w, _mm512_set1_ps(x->d[xb]));
            acc[r] = _mm512_add_ps(acc[r], _mm512_mul_ps(_mm512_cvtepi32_ps(isum), scale));
        }
    }
}

/* Operand rows r0 .. r0+15 against one tile of a packed copy (base: its first group); lanes
 * [l0, l0 + nl) (row order) to out columns j ... */
SIMD_ALWAYS_INLINE void amx_tile(r16_kind kind, const uint8_t *base, size_t l0, size_t nl, size_t j,
                                 const cpu_operand *x, size_t r0, float *out, size_t ldo) {
    __m512 acc[AMX_ROWS];
    for (size_t r = 0; r < AMX_ROWS; r++) acc[r] = _mm512_setzero_ps();
    amx_blocks(kind, base, 0, x->n / QK8_0, x, r0, acc);
    for (size_t r = 0; r < AMX_ROWS; r++) rows16_store(acc[r], out + (r0 + r) * ldo + j, l0, nl);
}

/* The rest of a call's operand rows (past its whole 16s) through fn, which computes them
 * bit for bit as the tiles do. */
SIMD_ALWAYS_INLINE void amx_rest(cpu_gemm_fn fn, const llmm_tensor *w, size_t j0, size_t j1, const cpu_operand *x,
                                 size_t full, size_t n_rows, float *out, size_t ldo) {
    if (full == n_rows) return;
    const size_t nb = x->n / QK8_0;
    cpu_operand rest = *x;
    rest.qs += full * x->n;
    rest.d += full * nb;
    rest.sum += full * nb;
    fn(w, j0, j1, &rest, n_rows - full, out + full * ldo, ldo);
}

/* The tiles of rows [j0, j1) of a packed copy: operand rows in whole 16s on the tiles, the rest
 * (and calls of fewer rows: decode) on the AVX-512 ones. The tile configuration is this
 * thread's until released here. */
SIMD_ALWAYS_INLINE void gemm_amx_packed(r16_kind kind, const llmm_tensor *w, size_t j0, size_t j1,
                                        const cpu_operand *x, size_t n_rows, float *out, size_t ldo) {
    const size_t full = n_rows / AMX_ROWS * AMX_ROWS;
    if (full) {
        amx_configure();
#define AMX_CALL(base, rb, next, l0, nl, j)                                                                 \
    do {                                                                                                    \
        (void)(rb);                                                                                         \
        (void)(next);                                                                                       \
        for (size_t r0 = 0; r0 < full; r0 += AMX_ROWS) amx_tile(kind, base, l0, nl, j, x, r0, out, ldo);    \
    } while (0)
        GEMM_WALK_TILES(w, j0, j1, R16_ROWS, AMX_CALL);
#undef AMX_CALL
        _tile_release();
    }
    amx_rest(kind == R16_Q4_0   ? gemm_q4_0_packed16
             : kind == R16_Q5_0 ? gemm_q5_0_packed16
                                : gemm_q8_0_packed16,
             w, j0, j1, x, full, n_rows, out, ldo);
}

/* Weights as stored (the first prompts, before decode steps made the copies): each 16-row tile
 * packed a segment of AMX_FLY_BYTES at a time into a stack buffer (the AVX-512 packer's
 * transposition), once per AMX_FLY_GROUPS x 16 operand rows, whose sums wait in acc_mem
 * between segments. The packing is one pass over the segment; the tile work on it is one per
 * 16 operand rows. */
#define AMX_FLY_BYTES 8192
#define AMX_FLY_GROUPS 8

SIMD_ALWAYS_INLINE void amx_fly_tile(r16_kind kind, const uint8_t *base, size_t rb, size_t l0, size_t nl, size_t j,
                                     const cpu_operand *x, size_t full, float *out, size_t ldo) {
    const size_t nb = x->n / QK8_0, bb = r16_block_bytes(kind), seg = AMX_FLY_BYTES / (R16_ROWS * bb);
    _Alignas(64) uint8_t buf[AMX_FLY_BYTES];
    _Alignas(64) float acc_mem[AMX_FLY_GROUPS][AMX_ROWS][R16_ROWS];
    for (size_t t0 = 0; t0 < full; t0 += AMX_FLY_GROUPS * AMX_ROWS) {
        const size_t n_groups = LLMM_MIN((size_t)AMX_FLY_GROUPS, (full - t0) / AMX_ROWS);
        memset(acc_mem, 0, sizeof acc_mem);
        for (size_t b0 = 0; b0 < nb; b0 += seg) {
            const size_t b1 = LLMM_MIN(nb, b0 + seg);
            rows16_pack_tile(kind, base + b0 * bb, rb, b1 - b0, buf);
            for (size_t gi = 0; gi < n_groups; gi++) {
                __m512 acc[AMX_ROWS];
                for (size_t r = 0; r < AMX_ROWS; r++) acc[r] = _mm512_load_ps(acc_mem[gi][r]);
                amx_blocks(kind, buf, b0, b1, x, t0 + gi * AMX_ROWS, acc);
                for (size_t r = 0; r < AMX_ROWS; r++) _mm512_store_ps(acc_mem[gi][r], acc[r]);
            }
        }
        for (size_t gi = 0; gi < n_groups; gi++)
            for (size_t r = 0; r < AMX_ROWS; r++)
                rows16_store(_mm512_load_ps(acc_mem[gi][r]), out + (t0 + gi * AMX_ROWS + r) * ldo + j, l0, nl);
    }
}

/* The AMX table's matmul for a type as stored: rows16 (the AVX-512 table's, bit for bit the
 * same) for calls of fewer than AMX_FLY_MIN_ROWS operand rows, for weights of fewer than 16
 * rows, and for the rows past the last whole 16. The threshold is where packing on the fly
 * started to pay against the AVX-512 tiles (docs/performance.md, "CPU kernel choices, measured": AMX only from 48 prompt rows). */
#define AMX_FLY_MIN_ROWS 48

SIMD_ALWAYS_INLINE void gemm_amx_fly(r16_kind kind, cpu_gemm_fn rows16, const llmm_tensor *w, size_t j0, size_t j1,
                                     const cpu_operand *x, size_t n_rows, float *out, size_t ldo) {
    const size_t full = n_rows / AMX_ROWS * AMX_ROWS;
    if (n_rows < AMX_FLY_MIN_ROWS || w->ne1 < R16_ROWS) {
        rows16(w, j0, j1, x, n_rows, out, ldo);
        return;
    }
    amx_configure();
#define AMX_FLY_CALL(base, rb, next, l0, nl, j)                                                             \
    do {                                                                                                    \
        (void)(next);                                                                                       \
        amx_fly_tile(kind, base, rb, l0, nl, j, x, full, out, ldo);                                         \
    } while (0)
    GEMM_WALK_TILES(w, j0, j1, R16_ROWS, AMX_FLY_CALL);
#undef AMX_FLY_CALL
    _tile_release();
    amx_rest(rows16, w, j0, j1, x, full, n_rows, out, ldo);
}

/* NAME: KIND's matmul over weights as stored, falling back on ROWS16 */
#define AMX_AS_STORED_FN(NAME, KIND, ROWS16)                                                                \
    static void NAME(const llmm_tensor *w, size_t j0, size_t j1, const cpu_operand *x, size_t n_rows,       \
                     float *out, size_t ldo) {                                                              \
        gemm_amx_fly(KIND, ROWS16, w, j0, j1, x, n_rows, out, ldo);                                         \
    }

AMX_AS_STORED_FN(gemm_q4_0_amx_stored, R16_Q4_0, gemm_q4_0_avx512)
AMX_AS_STORED_FN(gemm_q5_0_amx_stored, R16_Q5_0, gemm_q5_0_rows16)
AMX_AS_STORED_FN(gemm_q8_0_amx_stored, R16_Q8_0, gemm_q8_0_avx512)

GEMM_FN_FOR_KIND(gemm_q4_0_amx, gemm_amx_packed, R16_Q4_0)
GEMM_FN_FOR_KIND(gemm_q8_0_amx, gemm_amx_packed, R16_Q8_0)
GEMM_FN_FOR_KIND(gemm_q5_0_amx, gemm_amx_packed, R16_Q5_0)

#endif
