/* Weights packed in the AVX-512 kernels' 16-row tile layout: the copy a weight's slot
 * (weight_copy.h) holds on this backend, made during the first decode steps (ops/matmul.c).
 * The AVX2 table reads the same layout as two 8-row halves (arch/x86/gemm_packed8.h).
 *
 * Why: the 16-row kernels (arch/x86/gemm_rows16.h) transpose each block of 16 weight rows in
 * registers (16 loads, 12 inserts and 8 unpacks per block, plus for Q5_0 the 5th-bit words and
 * 4 shuffles) so that vpdpbusd leaves each row's block sum in its own lane. With one operand
 * row (decode) nothing shares that work, and Q5_0's decode was bound by it. Stored the way the
 * registers want it, a block of 16 rows is 4 to 8 plain loads: the same bytes read in less
 * time, Q5_0 most (docs/performance.md, "CPU kernel choices").
 *
 * Layout: full tiles of 16 rows only (rows [0, 16 * floor(ne1 / 16))); the rows after them
 * stay in the original. Tile t, block b (of 32 weights, or a K-quant's super-block of 256) is
 * one group of 16 x block bytes at (t * nb + b) * 16 * block bytes, so a tile occupies exactly
 * the bytes its rows did and a tile walk over the copy (row_bytes unchanged) finds each tile
 * where it found the original.
 * Lane q (0..15) of every vector in a group holds row rows16_row(q) of the tile (the order
 * the in-register transposition leaves, so both kernels store results alike). A group is:
 *   d:      16 f16 scales, lane order (32 bytes)
 *   m:      Q4_1, Q5_1: 16 f16 mins, lane order (32 bytes)
 *   masks:  Q5_0, Q5_1: 8 64-bit masks, mask j bit 4q + k = the 5th bit of row rows16_row(q)'s
 *           weight 4j + k (64 bytes)
 *   quants: Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL: 4 vectors of 64 bytes, vector j bytes 4q..4q+3 = the row's
 *           quant bytes 4j..4j+3 (low nibbles weights 4j.., high nibbles 16 + 4j..);
 *           Q8_0: 8 vectors, vector j bytes 4q.. = the row's quants 4j..4j+3, each plus 128
 *           (sign bit flipped: unsigned for vpdpbusd)
 * Q4_K, Q5_K and Q6_K (blocks of 144, 176 and 210 bytes) are stored whole in that form: vector
 * j bytes 4q..4q+3 = the row's block bytes 4j..4j+3 for every whole 16-byte piece of the block
 * (36, 44 or 52 vectors), so the 16-row K-quant kernels (arch/x86/gemm_kquant_rows16.h) load, at
 * 256 p, what they transpose from each row's bytes 16p..16p+15; then the bytes left (Q6_K's
 * f16 d) of the 16 rows, lane order. Q6_K's pieces are stored in the order its kernel reads
 * them (packed_q6_k_pieces): from memory, its jumps back and forth within the group made
 * decode slower than without a copy. IQ4_XS (136 bytes) is 34 vectors, its whole block in
 * order, so its kernel's pieces at bytes 8 + 16 i are loaded at 128 + 256 i. Q2_K (84 bytes)
 * is 21 vectors in order, the last one each row's d | dmin << 16; Q3_K (110 bytes) 27
 * vectors in order (the last three its 12 scale bytes as the words its kernel unpacks), then
 * the 16 rows' f16 d, lane order.
 * Same number of bytes per group as the original blocks. */
#ifndef LLMM_PACKED_TILES_H
#define LLMM_PACKED_TILES_H

#include <stddef.h>
#include <stdint.h>

#include "backend/tensor.h"

#define PACKED_TILE_ROWS 16
#define PACKED_LAYOUT_ROWS16 1 /* llmm_weight_copy.layout of these copies */
#define PACKED_MAX_BLOCK_BYTES 210 /* the largest block of a packed type (Q6_K) */

/* Q6_K's 16-byte pieces (ql 0-7, qh 8-11, scales 12) in the order of a packed group: the
 * scales, then per quarter k of the super-block (k6r16_tile) its qh piece and its two ql
 * pieces; group piece 0 holds block piece 12, 1 holds 8, and so on. */
static const uint8_t packed_q6_k_pieces[13] = {12, 8, 0, 2, 9, 1, 3, 10, 4, 6, 11, 5, 7};

/* The row whose values lane q holds (its own inverse): the transposition's order. */
static inline size_t packed_lane_row(size_t q) { return (q >> 2) + 4 * (q & 3); }

/* 1 when w's type has this layout. */
int llmm__packed_tiles_type(uint32_t type);

/* Rows of w the copy covers (whole tiles); 0 when there are none. */
size_t llmm__packed_tiles_rows(const llmm_tensor *w);

/* Tiles [t0, t1) of w into copy (the whole copy's base, llmm__packed_tiles_rows x row_bytes): the
 * portable reference of cpu_kernels.pack_tiles. */
void llmm__packed_tiles_pack(const llmm_tensor *w, size_t t0, size_t t1, uint8_t *copy);

/* One 16-byte piece of a group: lane q (0..15) of vector j (0..3) of out = bytes at + 4j ..
 * at + 4j + 3 of block blk[packed_lane_row(q)], xor flip (a group's vectors, four at a time). */
typedef void (*packed_piece_fn)(const uint8_t *const blk[PACKED_TILE_ROWS], size_t at, uint32_t flip, uint8_t *out);

/* llmm__packed_tiles_pack with the pieces transposed by piece (a SIMD table's; the heads, 5th-bit
 * masks and tails stay plain C): byte for byte llmm__packed_tiles_pack's result. */
void llmm__packed_tiles_pack_with(const llmm_tensor *w, size_t t0, size_t t1, uint8_t *copy, packed_piece_fn piece);

/* Groups [b0, b1) of one tile of a packable type (its rows tile + r * rb; rb 0: one row in every
 * lane) into out, the group of b0 first: a piece of a copy, made where it is used (the AVX2
 * table's prompt tiles over weights that have no copy). */
void llmm__packed_tiles_pack_groups(uint32_t type, const uint8_t *tile, size_t rb, size_t b0, size_t b1,
                              packed_piece_fn piece, uint8_t *out);

/* Block b of row `row` (< llmm__packed_tiles_rows(w)) as the file holds it, from the copy (the
 * embedding lookup of a tied output matrix reads rows from it, so that the file pages the copy
 * replaced are not faulted back in, 2 MiB folios at a time, token by token). */
void llmm__packed_tiles_read_block(const llmm_tensor *w, const uint8_t *copy, size_t row, size_t b, uint8_t *block);

/* Memory for a copy of bytes (page-aligned, fresh pages), or NULL; freed by llmm__packed_tiles_free. */
void *llmm__packed_tiles_alloc(size_t bytes);
void llmm__packed_tiles_free(void *data, size_t bytes);

/* Drops the whole pages of [p, p + n) from the process (they must be a read-only file mapping
 * that nothing writes: later reads fault them back in from the file). */
void llmm__packed_tiles_drop_source(const void *p, size_t n);

#endif
