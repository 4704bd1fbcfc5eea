/* Packing weights into the 16-row tile layout (packed_tiles.h) and reading blocks back, and the
 * memory the copies live in. The packer here is plain C, the reference the AVX-512 table's
 * packer (its transposition, stored: rows16_pack_tile) must match byte for byte; the SIMD
 * packers exist because this one is slow enough to show in the first decode steps. */
#define _DEFAULT_SOURCE /* madvise, MAP_ANONYMOUS */
#include "packed_tiles.h"

#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "format/quant.h"

/* Where a packable type keeps its fields in a block: n_halves f16 fields from 0 (d, then the
 * min m of Q4_1 / Q5_1), the 5th-bit word qh (Q5_0, Q5_1), the quants; Q8_0's 32 quant bytes
 * are 8 vectors' worth. The super-block types (the K-quants, IQ4_XS: family BLOCK256 in their
 * row) are vectors from byte 0 ("quants"), as many whole 4-byte words as the row's block
 * bytes hold, then the bytes after them in lane order (block_tail); Q6_K's whole 16-byte
 * pieces in the order pieces gives, then the bytes after them (its d). */
typedef struct block_fields {
    int packable, n_halves, has_qh;
    size_t qh, qs;
    int n_vectors;
    uint32_t flip;          /* xor per 4 quant bytes: Q8_0's +128 */
    const uint8_t *pieces;  /* the block's 16-byte pieces in group order; NULL: in order from qs */
} block_fields;

static block_fields fields_of(uint32_t type) {
    switch (type) {
    case LLMM_TYPE_Q4_0: return (block_fields){1, 1, 0, 0, offsetof(block_q4_0, qs), 4, 0, NULL};
    case LLMM_TYPE_IQ4_NL: return (block_fields){1, 1, 0, 0, offsetof(block_iq4_nl, qs), 4, 0, NULL};
    case LLMM_TYPE_Q8_0: return (block_fields){1, 1, 0, 0, offsetof(block_q8_0, qs), 8, 0x80808080u, NULL};
    case LLMM_TYPE_Q5_0: return (block_fields){1, 1, 1, offsetof(block_q5_0, qh), offsetof(block_q5_0, qs), 4, 0, NULL};
    case LLMM_TYPE_Q4_1: return (block_fields){1, 2, 0, 0, offsetof(block_q4_1, qs), 4, 0, NULL};
    case LLMM_TYPE_Q5_1: return (block_fields){1, 2, 1, offsetof(block_q5_1, qh), offsetof(block_q5_1, qs), 4, 0, NULL};
    case LLMM_TYPE_Q6_K: return (block_fields){1, 0, 0, 0, 0, sizeof(block_q6_K) / 16 * 4, 0, packed_q6_k_pieces};
    default: break;
    }
    if (llmm_type_family(type) == LLMM_FAMILY_BLOCK256)
        return (block_fields){1, 0, 0, 0, 0, (int)(llmm_type_block_bytes(type) / 4), 0, NULL};
    return (block_fields){0};
}

/* Bytes of a block after its vectors (Q6_K: its d), stored after them in lane order. */
static size_t block_tail(const block_fields *f, size_t bb) {
    return f->pieces ? bb % 16 : bb - f->qs - 4 * (size_t)f->n_vectors;
}

int llmm__packed_tiles_type(uint32_t type) { return fields_of(type).packable; }

size_t llmm__packed_tiles_rows(const llmm_tensor *w) {
    if (!w->data || !llmm__packed_tiles_type(w->type) || w->ne0 <= 0 ||
        (size_t)w->ne0 % llmm__type_get(w->type)->block_size != 0 || w->ne1 < PACKED_TILE_ROWS)
        return 0;
    return (size_t)w->ne1 / PACKED_TILE_ROWS * PACKED_TILE_ROWS;
}

/* The 5th-bit masks of one Q5_0 / Q5_1 group (packed_tiles.h) from the 16 rows' qh words: lane q's
 * four bits of mask j are bits 4j..4j+3 of its row's word. */
static void pack_fifth_bit_masks(const uint32_t qh[PACKED_TILE_ROWS], uint8_t *out) {
    for (int j = 0; j < 8; j++) {
        uint64_t mask = 0;
        for (size_t q = 0; q < PACKED_TILE_ROWS; q++)
            mask |= (uint64_t)(qh[packed_lane_row(q)] >> (4 * j) & 0xf) << (4 * q);
        for (int i = 0; i < 8; i++) out[8 * j + i] = (uint8_t)(mask >> (8 * i)); /* little-endian */
    }
}

/* Where in a block the 4 bytes of vector j of its group come from. */
static size_t vector_source(const block_fields *f, int j) {
    return f->pieces ? 16 * (size_t)f->pieces[j / 4] + 4 * (size_t)(j % 4) : f->qs + 4 * (size_t)j;
}

/* One vector of a group: lane q = bytes at .. at + 3 of block blk[row(q)], xor flip. */
static void pack_vector(const uint8_t *const blk[PACKED_TILE_ROWS], size_t at, uint32_t flip, uint8_t *out) {
    for (size_t q = 0; q < PACKED_TILE_ROWS; q++) {
        uint32_t v;
        memcpy(&v, blk[packed_lane_row(q)] + at, sizeof v);
        v ^= flip;
        memcpy(out + 4 * q, &v, sizeof v);
    }
}

/* The reference packed_piece_fn: its four vectors one by one. */
static void pack_piece_scalar(const uint8_t *const blk[PACKED_TILE_ROWS], size_t at, uint32_t flip, uint8_t *out) {
    for (size_t j = 0; j < 4; j++) pack_vector(blk, at + 4 * j, flip, out + 64 * j);
}

/* Vectors of a group: vector j from the 4 bytes of each block that vector_source names; four at
 * a time (a 16-byte piece of the block) through piece, the rest (IQ4_XS's last two) here. */
static void pack_vectors(const block_fields *f, const uint8_t *const blk[PACKED_TILE_ROWS], packed_piece_fn piece,
                         uint8_t *out) {
    int j = 0;
    for (; j + 4 <= f->n_vectors; j += 4) piece(blk, vector_source(f, j), f->flip, out + 64 * j);
    for (; j < f->n_vectors; j++) pack_vector(blk, vector_source(f, j), f->flip, out + 64 * j);
}

/* One group: block b of the tile's rows tile + r * rb (rb 0: all lanes the same row). */
static void pack_group(const block_fields *f, size_t bb, const uint8_t *tile, size_t rb, size_t b,
                       packed_piece_fn piece, uint8_t *g) {
    const uint8_t *blk[PACKED_TILE_ROWS];
    uint32_t qh[PACKED_TILE_ROWS];
    for (size_t r = 0; r < PACKED_TILE_ROWS; r++) {
        blk[r] = tile + r * rb + b * bb;
        if (f->has_qh) memcpy(&qh[r], blk[r] + f->qh, sizeof qh[r]);
    }
    uint8_t *v = g;
    for (int field = 0; field < f->n_halves; field++, v += 2 * PACKED_TILE_ROWS) /* d, m */
        for (size_t q = 0; q < PACKED_TILE_ROWS; q++) memcpy(v + 2 * q, blk[packed_lane_row(q)] + 2 * field, 2);
    if (f->has_qh) {
        pack_fifth_bit_masks(qh, v);
        v += 64;
    }
    pack_vectors(f, blk, piece, v);
    const size_t tail = block_tail(f, bb), at = bb - tail;
    v += 64 * f->n_vectors;
    for (size_t q = 0; q < PACKED_TILE_ROWS && tail; q++) memcpy(v + tail * q, blk[packed_lane_row(q)] + at, tail);
}

void llmm__packed_tiles_pack_with(const llmm_tensor *w, size_t t0, size_t t1, uint8_t *copy, packed_piece_fn piece) {
    const block_fields f = fields_of(w->type);
    const llmm_type_traits *tt = llmm__type_get(w->type);
    const size_t bb = tt->block_bytes, nb = (size_t)w->ne0 / tt->block_size, rb = w->row_bytes;
    for (size_t t = t0; t < t1; t++)
        for (size_t b = 0; b < nb; b++)
            pack_group(&f, bb, (const uint8_t *)w->data + t * PACKED_TILE_ROWS * rb, rb, b, piece,
                       copy + (t * nb + b) * PACKED_TILE_ROWS * bb);
}

void llmm__packed_tiles_pack_groups(uint32_t type, const uint8_t *tile, size_t rb, size_t b0, size_t b1,
                              packed_piece_fn piece, uint8_t *out) {
    const block_fields f = fields_of(type);
    const size_t bb = llmm__type_get(type)->block_bytes;
    for (size_t b = b0; b < b1; b++) pack_group(&f, bb, tile, rb, b, piece, out + (b - b0) * PACKED_TILE_ROWS * bb);
}

void llmm__packed_tiles_pack(const llmm_tensor *w, size_t t0, size_t t1, uint8_t *copy) {
    llmm__packed_tiles_pack_with(w, t0, t1, copy, pack_piece_scalar);
}

void llmm__packed_tiles_read_block(const llmm_tensor *w, const uint8_t *copy, size_t row, size_t b, uint8_t *block) {
    const block_fields f = fields_of(w->type);
    const llmm_type_traits *tt = llmm__type_get(w->type);
    const size_t bb = tt->block_bytes, nb = (size_t)w->ne0 / tt->block_size;
    const size_t lane = packed_lane_row(row % PACKED_TILE_ROWS); /* the mapping is its own inverse */
    const uint8_t *v = copy + (row / PACKED_TILE_ROWS * nb + b) * PACKED_TILE_ROWS * bb;
    for (int field = 0; field < f.n_halves; field++, v += 2 * PACKED_TILE_ROWS) /* d, m */
        memcpy(block + 2 * field, v + 2 * lane, 2);
    if (f.has_qh) {
        uint32_t qh = 0;
        for (int j = 0; j < 8; j++) {
            uint64_t mask;
            memcpy(&mask, v + 8 * j, sizeof mask);
            qh |= (uint32_t)(mask >> (4 * lane) & 0xf) << (4 * j);
        }
        memcpy(block + f.qh, &qh, sizeof qh);
        v += 64;
    }
    for (int j = 0; j < f.n_vectors; j++) {
        uint32_t word;
        memcpy(&word, v + 64 * j + 4 * lane, sizeof word);
        word ^= f.flip;
        memcpy(block + vector_source(&f, j), &word, sizeof word);
    }
    const size_t tail = block_tail(&f, bb);
    memcpy(block + bb - tail, v + 64 * f.n_vectors + tail * lane, tail);
}

void *llmm__packed_tiles_alloc(size_t bytes) {
    if (!bytes) return NULL;
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL;
    return p;
}

void llmm__packed_tiles_free(void *data, size_t bytes) {
    if (data) munmap(data, bytes);
}

static uintptr_t page_size(void) {
    const long page = sysconf(_SC_PAGESIZE);
    return page > 0 ? (uintptr_t)page : 4096;
}

void llmm__packed_tiles_drop_source(const void *p, size_t n) {
    const uintptr_t page = page_size();
    const uintptr_t begin = ((uintptr_t)p + page - 1) / page * page, end = ((uintptr_t)p + n) / page * page;
    /* advice only: a failure leaves the pages resident, which costs memory, not results */
    if (end > begin) (void)madvise((void *)begin, end - begin, MADV_DONTNEED);
}
