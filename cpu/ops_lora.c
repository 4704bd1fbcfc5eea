/* LoRA deltas (lora_delta): part.out[r] += s * B (A x[r]) for the rows of each adapter of a
 * step, for up to three matmuls over the same x, in two passes over the pool: one dispatch
 * each, whatever the number of adapters and matmuls.
 *
 * Pass 1 projects: t = s * (A x[r]), rank dots of n_in per row, handed out in blocks of
 * PROJECT_RANKS ranks of one row (a single decoded row still splits over the threads). Pass 2
 * expands: out[r] += t . B^T, in blocks of EXPAND_PANELS panels of one part's output columns,
 * each block adding every row's rank scaled rows of B transposed (the core transposes B at
 * adapter load, in panels, so that this is a run of fused multiply-adds over one contiguous
 * stretch: the attention value kernel's shape, instead of n_out dots of rank values). Both
 * passes go through the kernel table's attention kernels (attn_scores, attn_values and their
 * F16 forms), which compute each output from its row and column alone, so a row's delta is the
 * same in any batch, block split or thread count; a block holds all the groups of its columns,
 * so no two threads add to one output. */
#include "cpu_backend.h"
#include "quant.h"

/* Ranks per projection item, panels per expansion item, row pointers per kernel call. */
enum { PROJECT_RANKS = 8, EXPAND_PANELS = 4, ROW_PTRS = 64 };

typedef struct lora_task {
    const cpu_kernels *k;
    const float *x;
    size_t n_in;
    const llmm_lora_part *parts;
    size_t n_parts;
    float *t;
} lora_task;

static size_t rank_of(const llmm_lora_group *g) { return (size_t)g->a->ne1; }
static size_t rank_blocks(const llmm_lora_group *g) { return (rank_of(g) + PROJECT_RANKS - 1) / PROJECT_RANKS; }
static size_t panels_of(size_t n_out) { return (n_out + LLMM_LORA_PANEL - 1) / LLMM_LORA_PANEL; }
static size_t blocks_of(size_t n_out) { return (panels_of(n_out) + EXPAND_PANELS - 1) / EXPAND_PANELS; }

/* dst[j] = q . A row (r0 + j) for j < n, A in F32 or F16 */
static void project_ranks(const cpu_kernels *k, const llmm_tensor *a, size_t r0, size_t n, const float *q,
                          size_t n_in, float *dst) {
    if (a->type == LLMM_TYPE_F16) {
        const uint16_t *rows = (const uint16_t *)a->data + r0 * n_in;
        if (k->attn_scores_f16) {
            k->attn_scores_f16(q, 1, n_in, rows, n_in, n, dst, n);
            return;
        }
        for (size_t j = 0; j < n; j++) {
            float sum = 0.f;
            for (size_t i = 0; i < n_in; i++) sum += llmm__f16_to_f32(rows[j * n_in + i]) * q[i];
            dst[j] = sum;
        }
        return;
    }
    const float *rows = (const float *)a->data + r0 * n_in;
    const float *ptr[PROJECT_RANKS];
    for (size_t j = 0; j < n; j++) ptr[j] = rows + j * n_in;
    llmm__cpu_scores_rows(k, q, 1, n_in, ptr, n, dst, n);
}

/* Item c of pass 1: PROJECT_RANKS ranks of one row of one group (groups of all parts in order,
 * their t rows one after the other). */
static void project_item(void *arg, size_t c, int ith) {
    (void)ith;
    const lora_task *tk = arg;
    float *t = tk->t;
    for (size_t pi = 0; pi < tk->n_parts; pi++)
        for (size_t gi = 0; gi < tk->parts[pi].n_groups; gi++) {
            const llmm_lora_group *g = &tk->parts[pi].groups[gi];
            const size_t rank = rank_of(g), items = g->count * rank_blocks(g);
            if (c >= items) {
                c -= items;
                t += g->count * rank;
                continue;
            }
            const size_t i = c / rank_blocks(g), r0 = c % rank_blocks(g) * PROJECT_RANKS;
            const size_t n = LLMM_MIN((size_t)PROJECT_RANKS, rank - r0);
            float *dst = t + i * rank + r0;
            project_ranks(tk->k, g->a, r0, n, tk->x + (size_t)g->rows[i] * tk->n_in, tk->n_in, dst);
            for (size_t j = 0; j < n; j++) dst[j] *= g->scales[i];
            return;
        }
}

/* y[0..w) += sum over r of t[r] * panel row r, r in order (panel: rank rows of w values) */
static void expand_panel(const cpu_kernels *k, const llmm_tensor *bt, const void *panel, size_t w, const float *t,
                         float *y) {
    const size_t rank = (size_t)bt->ne1;
    if (bt->type == LLMM_TYPE_F16) {
        const uint16_t *rows = panel;
        if (k->attn_values_f16) {
            k->attn_values_f16(y, 1, w, t, rank, rows, w, rank);
            return;
        }
        float wide[LLMM_LORA_PANEL];
        for (size_t r = 0; r < rank; r++) {
            for (size_t j = 0; j < w; j++) wide[j] = llmm__f16_to_f32(rows[r * w + j]);
            k->axpy(y, t[r], wide, w);
        }
        return;
    }
    const float *rows = panel;
    const float *ptr[ROW_PTRS];
    for (size_t r0 = 0; r0 < rank; r0 += ROW_PTRS) {
        const size_t n = LLMM_MIN((size_t)ROW_PTRS, rank - r0);
        for (size_t j = 0; j < n; j++) ptr[j] = rows + (r0 + j) * w;
        llmm__cpu_values_rows(k, y, 1, w, t + r0, n, ptr, n);
    }
}

/* Item c of pass 2: EXPAND_PANELS panels of one part's columns, for every row of its groups. */
static void expand_item(void *arg, size_t c, int ith) {
    (void)ith;
    const lora_task *tk = arg;
    const float *t = tk->t;
    size_t pi = 0;
    for (; c >= blocks_of(tk->parts[pi].n_out); pi++) {
        c -= blocks_of(tk->parts[pi].n_out);
        for (size_t gi = 0; gi < tk->parts[pi].n_groups; gi++)
            t += tk->parts[pi].groups[gi].count * rank_of(&tk->parts[pi].groups[gi]);
    }
    const llmm_lora_part *part = &tk->parts[pi];
    const size_t p0 = c * EXPAND_PANELS, p1 = LLMM_MIN(p0 + EXPAND_PANELS, panels_of(part->n_out));
    for (size_t gi = 0; gi < part->n_groups; gi++) {
        const llmm_lora_group *g = &part->groups[gi];
        const size_t rank = rank_of(g), elem = g->bt->type == LLMM_TYPE_F16 ? 2 : 4;
        for (size_t i = 0; i < g->count; i++, t += rank) {
            float *y = part->out + (size_t)g->rows[i] * part->n_out;
            for (size_t p = p0; p < p1; p++) {
                const size_t o0 = p * LLMM_LORA_PANEL, w = LLMM_MIN((size_t)LLMM_LORA_PANEL, part->n_out - o0);
                const uint8_t *panel = (const uint8_t *)g->bt->data + o0 * rank * elem;
                expand_panel(tk->k, g->bt, panel, w, t, y + o0);
            }
        }
    }
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
            project += g->count * rank_blocks(g);
            project_macs += g->count * rank_of(g) * n_in;
            expand_macs += g->count * rank_of(g) * part->n_out;
        }
        expand += blocks_of(part->n_out);
    }
    if (project == 0) return LLMM_OK;
    run_items(s, project_item, &tk, project, project_macs);
    run_items(s, expand_item, &tk, expand, expand_macs);
    return LLMM_OK;
}
