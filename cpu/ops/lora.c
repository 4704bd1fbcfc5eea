/* LoRA deltas (lora_delta): part.out[r] += s * B (A x[r]) for the rows of each adapter of a
 * step, for up to three matmuls over the same x, in two passes over the pool: one dispatch
 * each, whatever the number of adapters and matmuls.
 *
 * Pass 1 projects: t = s * (A x[r]), rank dots of n_in per row, handed out in items of
 * PROJECT_RANKS ranks of a tile of up to PROJECT_ROWS rows of one adapter (a single decoded row
 * still splits over the threads); the tile's rows go through the score kernel together, so
 * each value of A is loaded and widened once for all of them. Pass 2 expands: out[r] +=
 * t . B^T, in items of EXPAND_PANELS panels of one part's output columns (the core transposes B
 * at adapter load, in panels, so that this is a run of fused multiply-adds over one contiguous
 * stretch: the attention value kernel's shape, instead of n_out dots of rank values), again a
 * tile of rows per kernel call. When no row of a part is in two of its groups (one adapter per
 * sequence, the common case), each adapter's panels are items of their own, so a thread streams
 * one adapter's B instead of hopping between adapters every few KB; otherwise an item holds
 * all the groups of its columns, so no two threads add to one output.
 *
 * Both passes go through the kernel table's attention kernels (attn_scores, attn_values and
 * their F16 forms), which compute each output from its row and column alone, whatever the
 * number of query vectors (here: rows) in a call, so a row's delta is the same in any batch,
 * tile, item split or thread count (tests/support/backend_conformance.c checks it bit for bit). */
#include "cpu_backend.h"
#include "format/quant.h"

#include <string.h>

/* Ranks, rows and inputs per projection kernel call; panels and rows per expansion item; row
 * pointers per kernel call. */
enum { PROJECT_RANKS = 8, PROJECT_ROWS = 4, PROJECT_CHUNK = 512, EXPAND_PANELS = 4, EXPAND_ROWS = 4, ROW_PTRS = 64 };
/* Parts and step rows for which pass 2 checks whether it can split a part's groups. */
enum { SPLIT_PARTS = 4, SPLIT_MAX_ROWS = 4096 };

typedef struct lora_task {
    const cpu_kernels *k;
    const float *x;
    size_t n_in;
    const llmm_lora_part *parts;
    size_t n_parts;
    float *t;
    unsigned char split[SPLIT_PARTS]; /* per part: groups expanded as items of their own */
} lora_task;

static size_t rank_of(const llmm_lora_group *g) { return (size_t)g->a->ne1; }
static size_t rank_blocks(const llmm_lora_group *g) { return (rank_of(g) + PROJECT_RANKS - 1) / PROJECT_RANKS; }
static size_t row_tiles(const llmm_lora_group *g) { return (g->count + PROJECT_ROWS - 1) / PROJECT_ROWS; }
static size_t panels_of(size_t n_out) { return (n_out + LLMM_LORA_PANEL - 1) / LLMM_LORA_PANEL; }
static size_t blocks_of(size_t n_out) { return (panels_of(n_out) + EXPAND_PANELS - 1) / EXPAND_PANELS; }

/* dst[i * PROJECT_RANKS + j] = q_i . A row (r0 + j) [c0, c0 + len) for i < nq, j < n, A in F32
 * or F16 (q_i at q + i * len). */
static void project_chunk(const cpu_kernels *k, const llmm_tensor *a, size_t r0, size_t n, size_t c0, size_t len,
                          const float *q, size_t nq, float *dst) {
    const size_t n_in = (size_t)a->ne0;
    if (a->type == LLMM_TYPE_F16) {
        const uint16_t *rows = (const uint16_t *)a->data + r0 * n_in + c0;
        if (k->attn_scores_f16) {
            k->attn_scores_f16(q, nq, len, rows, n_in, n, dst, PROJECT_RANKS);
            return;
        }
        for (size_t i = 0; i < nq; i++)
            for (size_t j = 0; j < n; j++) {
                float sum = 0.f;
                for (size_t d = 0; d < len; d++) sum += llmm__f16_to_f32(rows[j * n_in + d]) * q[i * len + d];
                dst[i * PROJECT_RANKS + j] = sum;
            }
        return;
    }
    const float *rows = (const float *)a->data + r0 * n_in + c0;
    const float *ptr[PROJECT_RANKS];
    for (size_t j = 0; j < n; j++) ptr[j] = rows + j * n_in;
    llmm__cpu_scores_rows(k, q, nq, len, ptr, n, dst, PROJECT_RANKS);
}

/* t_i[r0, r0 + n) = s_i * (A x_i) for the nq rows of a tile (t_i at t + i * rank), the dots
 * taken PROJECT_CHUNK inputs at a time, the rows' chunks copied side by side so that they go
 * through the kernel as the heads of one call (each A value loaded and widened once for all
 * of them). Every row's dots are chunked alike and the kernel computes each from its own row,
 * so a row's result does not depend on the rows beside it. */
static void project_tile(const cpu_kernels *k, const llmm_lora_group *g, size_t i0, size_t nq, size_t r0, size_t n,
                         const float *x, size_t n_in, float *t) {
    const size_t rank = rank_of(g);
    float q[PROJECT_ROWS * PROJECT_CHUNK], part[PROJECT_ROWS * PROJECT_RANKS];
    for (size_t c0 = 0; c0 < n_in; c0 += PROJECT_CHUNK) {
        const size_t len = LLMM_MIN((size_t)PROJECT_CHUNK, n_in - c0);
        const float *qs = x + (size_t)g->rows[i0] * n_in + c0;
        if (nq > 1) {
            for (size_t i = 0; i < nq; i++)
                memcpy(q + i * len, x + (size_t)g->rows[i0 + i] * n_in + c0, len * sizeof(float));
            qs = q;
        }
        project_chunk(k, g->a, r0, n, c0, len, qs, nq, part);
        for (size_t i = 0; i < nq; i++)
            for (size_t j = 0; j < n; j++)
                t[i * rank + j] = c0 == 0 ? part[i * PROJECT_RANKS + j] : t[i * rank + j] + part[i * PROJECT_RANKS + j];
    }
    for (size_t i = 0; i < nq; i++)
        for (size_t j = 0; j < n; j++) t[i * rank + j] *= g->scales[i0 + i];
}

/* Item c of pass 1: PROJECT_RANKS ranks of a tile of PROJECT_ROWS rows of one group (groups
 * of all parts in order, their t rows one after the other). */
static void project_item(void *arg, size_t c, int ith) {
    (void)ith;
    const lora_task *tk = arg;
    float *t = tk->t;
    for (size_t pi = 0; pi < tk->n_parts; pi++)
        for (size_t gi = 0; gi < tk->parts[pi].n_groups; gi++) {
            const llmm_lora_group *g = &tk->parts[pi].groups[gi];
            const size_t rank = rank_of(g), items = row_tiles(g) * rank_blocks(g);
            if (c >= items) {
                c -= items;
                t += g->count * rank;
                continue;
            }
            const size_t i0 = c / rank_blocks(g) * PROJECT_ROWS, r0 = c % rank_blocks(g) * PROJECT_RANKS;
            const size_t nq = LLMM_MIN((size_t)PROJECT_ROWS, g->count - i0);
            project_tile(tk->k, g, i0, nq, r0, LLMM_MIN((size_t)PROJECT_RANKS, rank - r0), tk->x, tk->n_in,
                         t + i0 * rank + r0);
            return;
        }
}

/* Rows y_i[0..w) += sum over r of t_i[r] * panel row r, r in order, for the n rows of a tile
 * (y_i = ys[i], t_i = t + i * rank; panel: rank rows of w values). The rows go through the
 * kernel as the heads of one attention values call (contiguous in tile; a single row in place), so each panel value is
 * loaded (widened) once for all of them and their sums are independent chains; the kernel adds
 * each value's products in rank order onto its starting value whatever the number of heads, so
 * a row's result does not depend on the rows beside it. */
static void expand_panel(const cpu_kernels *k, const llmm_tensor *bt, const void *panel, size_t w, const float *t,
                         float *const *ys, size_t n, float *tile) {
    const size_t rank = (size_t)bt->ne1;
    float *const y = n == 1 ? ys[0] : tile; /* a single row is the tile already */
    for (size_t i = 0; n > 1 && i < n; i++) memcpy(tile + i * w, ys[i], w * sizeof(float));
    if (bt->type == LLMM_TYPE_F16) {
        const uint16_t *rows = panel;
        if (k->attn_values_f16) {
            k->attn_values_f16(y, n, w, t, rank, rows, w, rank);
        } else {
            float wide[LLMM_LORA_PANEL];
            for (size_t r = 0; r < rank; r++) {
                for (size_t j = 0; j < w; j++) wide[j] = llmm__f16_to_f32(rows[r * w + j]);
                for (size_t i = 0; i < n; i++) k->axpy(y + i * w, t[i * rank + r], wide, w);
            }
        }
    } else {
        const float *rows = panel;
        const float *ptr[ROW_PTRS];
        for (size_t r0 = 0; r0 < rank; r0 += ROW_PTRS) {
            const size_t m = LLMM_MIN((size_t)ROW_PTRS, rank - r0);
            for (size_t j = 0; j < m; j++) ptr[j] = rows + (r0 + j) * w;
            llmm__cpu_values_rows(k, y, n, w, t + r0, rank, ptr, m);
        }
    }
    for (size_t i = 0; n > 1 && i < n; i++) memcpy(ys[i], tile + i * w, w * sizeof(float));
}

/* Rows of group g (t: their projections) += their deltas over panels [p0, p1) of the part. */
static void expand_group(const cpu_kernels *k, const llmm_lora_part *part, const llmm_lora_group *g, const float *t,
                         size_t p0, size_t p1) {
    const size_t rank = rank_of(g), elem = g->bt->type == LLMM_TYPE_F16 ? 2 : 4;
    float tile[EXPAND_ROWS * LLMM_LORA_PANEL];
    for (size_t i0 = 0; i0 < g->count; i0 += EXPAND_ROWS) {
        const size_t n = LLMM_MIN((size_t)EXPAND_ROWS, g->count - i0);
        for (size_t p = p0; p < p1; p++) {
            const size_t o0 = p * LLMM_LORA_PANEL, w = LLMM_MIN((size_t)LLMM_LORA_PANEL, part->n_out - o0);
            float *ys[EXPAND_ROWS];
            for (size_t i = 0; i < n; i++) ys[i] = part->out + (size_t)g->rows[i0 + i] * part->n_out + o0;
            const uint8_t *panel = (const uint8_t *)g->bt->data + o0 * rank * elem;
            expand_panel(k, g->bt, panel, w, t + i0 * rank, ys, n, tile);
        }
    }
}

/* Pass 2's items of part pi: when no row is in two of its groups, each group's blocks are items
 * of their own, group after group, so that a thread streams one adapter's panels; otherwise
 * an item is a block of every group (a row's deltas added in group order by one thread). */
static int split_of(const lora_task *tk, size_t pi) { return pi < SPLIT_PARTS && tk->split[pi]; }

static size_t expand_items(const lora_task *tk, size_t pi) {
    const size_t blocks = blocks_of(tk->parts[pi].n_out);
    return split_of(tk, pi) ? tk->parts[pi].n_groups * blocks : blocks;
}

/* Item c of pass 2 (expand_items). */
static void expand_item(void *arg, size_t c, int ith) {
    (void)ith;
    const lora_task *tk = arg;
    const float *t = tk->t;
    size_t pi = 0;
    for (; c >= expand_items(tk, pi); pi++) {
        c -= expand_items(tk, pi);
        for (size_t gi = 0; gi < tk->parts[pi].n_groups; gi++)
            t += tk->parts[pi].groups[gi].count * rank_of(&tk->parts[pi].groups[gi]);
    }
    const llmm_lora_part *part = &tk->parts[pi];
    const size_t blocks = blocks_of(part->n_out), block = c % blocks;
    const size_t p0 = block * EXPAND_PANELS, p1 = LLMM_MIN(p0 + EXPAND_PANELS, panels_of(part->n_out));
    const int split = split_of(tk, pi);
    const size_t g0 = split ? c / blocks : 0, g1 = split ? g0 + 1 : part->n_groups;
    for (size_t gi = 0; gi < g1; gi++) {
        const llmm_lora_group *g = &part->groups[gi];
        if (gi >= g0) expand_group(tk->k, part, g, t, p0, p1);
        t += g->count * rank_of(g);
    }
}

/* 1 when no row is in two of the part's groups (rows beyond the bitmap: assumed shared). */
static int rows_disjoint(const llmm_lora_part *part) {
    uint64_t seen[SPLIT_MAX_ROWS / 64] = {0};
    for (size_t gi = 0; gi < part->n_groups; gi++)
        for (size_t i = 0; i < part->groups[gi].count; i++) {
            const uint32_t r = part->groups[gi].rows[i];
            if (r >= SPLIT_MAX_ROWS || seen[r / 64] >> (r % 64) & 1) return 0;
            seen[r / 64] |= (uint64_t)1 << (r % 64);
        }
    return 1;
}

static void run_items(cpu_state *s, llmm_chunk_fn fn, lora_task *tk, size_t n_items, size_t work) {
    if (llmm__threadpool_size(s->pool) > 1 && n_items > 1 && work >= CPU_PARALLEL_MIN_WORK) {
        llmm__threadpool_run(s->pool, fn, tk, n_items);
        return;
    }
    for (size_t c = 0; c < n_items; c++) fn(tk, c, 0);
}

static int operand_ok(const llmm_tensor *t) { return t->type == LLMM_TYPE_F32 || t->type == LLMM_TYPE_F16; }

llmm_status llmm__cpu_lora_delta(void *state, const float *x, size_t n_in, const llmm_lora_part *parts,
                                 size_t n_parts, float *t) {
    cpu_state *s = state;
    lora_task tk = {.k = s->k, .x = x, .n_in = n_in, .parts = parts, .n_parts = n_parts, .t = t};
    size_t project = 0, expand = 0, project_macs = 0, expand_macs = 0;
    for (size_t pi = 0; pi < n_parts; pi++) {
        const llmm_lora_part *part = &parts[pi];
        for (size_t gi = 0; gi < part->n_groups; gi++) {
            const llmm_lora_group *g = &part->groups[gi];
            if ((size_t)g->a->ne0 != n_in || (size_t)g->bt->ne0 != part->n_out || g->a->ne1 != g->bt->ne1 ||
                !operand_ok(g->a) || !operand_ok(g->bt))
                return LLMM_ERR_INVALID_ARG;
            project += row_tiles(g) * rank_blocks(g);
            project_macs += g->count * rank_of(g) * n_in;
            expand_macs += g->count * rank_of(g) * part->n_out;
        }
        if (pi < SPLIT_PARTS) tk.split[pi] = part->n_groups > 1 && rows_disjoint(part);
        expand += expand_items(&tk, pi);
    }
    if (project == 0) return LLMM_OK;
    run_items(s, project_item, &tk, project, project_macs);
    run_items(s, expand_item, &tk, expand, expand_macs);
    return LLMM_OK;
}
