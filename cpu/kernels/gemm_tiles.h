/* How every tiled matmul kernel walks its weight rows, on every ISA: tiles of TILE rows; a
 * tile that would pass the tensor's last row is moved back to end there (it recomputes rows
 * that belong to other tiles, maybe another thread's, whose lanes are dropped: each lane's
 * result depends on its own row only, so nothing changes); a tensor of fewer than TILE rows
 * goes row by row with all lanes on the same row. A macro, not a function taking a callback,
 * so that each kernel's tile code stays inlined with its constant arguments.
 *
 * ROWS(base, rb, next, l0, nl, j) computes output rows [j, j + nl) from the tile at base
 * (rows base + i * rb), whose lane l0 is row j; next is the following tile of the tensor, for
 * prefetching, or NULL after its last. The last tile of a call prefetches the first of the rows
 * after it too: the thread pool gives a thread its chunks in row order (its segment), so those
 * are most often this thread's next chunk, whose first tile would otherwise start cold. */
#ifndef LLMM_CPU_GEMM_TILES_H
#define LLMM_CPU_GEMM_TILES_H

#include <stddef.h>
#include <stdint.h>

#include "base/common.h"

#define GEMM_WALK_TILES(w, j0, j1, TILE, ROWS)                                                              \
    do {                                                                                                    \
        const uint8_t *walk_data_ = (const uint8_t *)(w)->data;                                             \
        const size_t walk_rb_ = (w)->row_bytes, walk_ne1_ = (size_t)(w)->ne1, walk_end_ = (j1);             \
        for (size_t walk_j_ = (j0); walk_j_ < walk_end_; walk_j_ += (TILE)) {                               \
            const size_t walk_nj_ = LLMM_MIN((size_t)(TILE), walk_end_ - walk_j_);                          \
            if (walk_ne1_ >= (TILE)) {                                                                      \
                const size_t walk_jt_ = LLMM_MIN(walk_j_, walk_ne1_ - (TILE));                              \
                const uint8_t *walk_next_ =                                                                 \
                    walk_j_ + (TILE) < walk_ne1_                                                            \
                        ? walk_data_ + LLMM_MIN(walk_j_ + (TILE), walk_ne1_ - (TILE)) * walk_rb_            \
                        : NULL;                                                                             \
                (void)walk_next_; /* kernels without software prefetch ignore it */                         \
                ROWS(walk_data_ + walk_jt_ * walk_rb_, walk_rb_, walk_next_, walk_j_ - walk_jt_, walk_nj_,  \
                     walk_j_);                                                                              \
            } else {                                                                                        \
                for (size_t walk_k_ = 0; walk_k_ < walk_nj_; walk_k_++)                                     \
                    ROWS(walk_data_ + (walk_j_ + walk_k_) * walk_rb_, (size_t)0, (const uint8_t *)NULL,     \
                         (size_t)0, (size_t)1, walk_j_ + walk_k_);                                          \
            }                                                                                               \
        }                                                                                                   \
    } while (0)

/* How the kernels that tile over operand rows as well walk a call's rows (the F16 / BF16
 * kernels for several operand rows): blocks of BLOCK weight rows x BLOCK operand rows, small
 * enough to stay in cache while their tiles run over them, each block in tiles of TW weight
 * rows x TX operand rows. TILE(j, nj, r, nx) computes weight rows [j, j + nj) against operand
 * rows [r, r + nx), nj <= TW, nx <= TX (a short tile repeats its last rows and drops their
 * results). A macro for the reason GEMM_WALK_TILES is one. */
#define GEMM_WALK_BLOCKS(j0, j1, n_rows, BLOCK, TW, TX, TILE)                                                 \
    do {                                                                                                    \
        const size_t blk_j1_ = (j1), blk_n_ = (n_rows);                                                     \
        for (size_t blk_j_ = (j0); blk_j_ < blk_j1_; blk_j_ += (BLOCK)) {                                   \
            const size_t blk_je_ = LLMM_MIN(blk_j1_, blk_j_ + (BLOCK));                                     \
            for (size_t blk_r_ = 0; blk_r_ < blk_n_; blk_r_ += (BLOCK)) {                                   \
                const size_t blk_re_ = LLMM_MIN(blk_n_, blk_r_ + (BLOCK));                                  \
                for (size_t blk_t_ = blk_j_; blk_t_ < blk_je_; blk_t_ += (TW))                              \
                    for (size_t blk_s_ = blk_r_; blk_s_ < blk_re_; blk_s_ += (TX))                          \
                        TILE(blk_t_, LLMM_MIN((size_t)(TW), blk_je_ - blk_t_), blk_s_,                      \
                             LLMM_MIN((size_t)(TX), blk_re_ - blk_s_));                                     \
            }                                                                                               \
        }                                                                                                   \
    } while (0)

/* A cpu_gemm_fn named NAME that runs DRIVER (a kernel's tile walk taking its kind first) for
 * KIND: one per weight type of a kernel family. Unused where a table takes another family's
 * kernel for that type (AVX-512's Q5_0), hence the attribute. */
#define GEMM_FN_FOR_KIND(NAME, DRIVER, KIND)                                                              \
    __attribute__((unused)) static void NAME(const llmm_tensor *w, size_t j0, size_t j1,                 \
                                             const cpu_operand *x, size_t n_rows, float *out,             \
                                             size_t ldo) {                                                \
        DRIVER(KIND, w, j0, j1, x, n_rows, out, ldo);                                                     \
    }

#endif
