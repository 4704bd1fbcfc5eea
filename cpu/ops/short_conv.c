/* The gated short convolution of LFM2's recurrent layers (backend.h llmm_conv_batch): a
 * depthwise causal convolution over the last few positions, its history per sequence kept in
 * a state the core owns. The work is rows x dim x taps multiply-adds, small beside the layer's
 * two matmuls, so it runs on the calling thread. */
#include <string.h>

#include "cpu_backend.h"

/* u = B * X of the step's row r, channel c */
static float u_row(const llmm_conv_batch *b, size_t r, size_t c) {
    const float *row = b->bcx + r * 3 * (size_t)b->dim;
    return row[c] * row[2 * (size_t)b->dim + c];
}

/* u of position q, channel c, for the sequence whose rows [r0, ...) start at position p0 and
 * whose state ends at p0 - 1 */
static float u_at(const llmm_conv_batch *b, const float *state, size_t r0, int64_t p0, int64_t q, size_t c) {
    if (q < 0) return 0.f;
    if (q >= p0) return u_row(b, r0 + (size_t)(q - p0), c);
    return state[(size_t)((int64_t)b->kernel - 1 - (p0 - q)) * b->dim + c];
}

/* One sequence's rows [r0, r1): outputs first, then the state moves to the last row. */
static void conv_sequence(const llmm_conv_batch *b, const int32_t *pos, size_t r0, size_t r1, float *state) {
    const size_t dim = b->dim, K = b->kernel;
    const int64_t p0 = pos[r0];
    for (size_t r = r0; r < r1; r++) {
        const float *c_gate = b->bcx + r * 3 * dim + dim;
        for (size_t c = 0; c < dim; c++) {
            float y = 0.f; /* taps in order, as the reference sums them */
            for (size_t j = 0; j < K; j++)
                y += u_at(b, state, r0, p0, (int64_t)pos[r] - (int64_t)K + 1 + (int64_t)j, c) * b->taps[c * K + j];
            b->out[r * dim + c] = c_gate[c] * y;
        }
    }
    /* state row i becomes u of position p_last - (K - 2) + i; a row still needed from the
     * old state sits at a higher index, so ascending order never reads an overwritten one */
    const int64_t p_last = pos[r1 - 1];
    for (size_t i = 0; i + 1 < K; i++) {
        const int64_t q = p_last - (int64_t)K + 2 + (int64_t)i;
        for (size_t c = 0; c < dim; c++) state[i * dim + c] = u_at(b, state, r0, p0, q, c);
    }
}

llmm_status llmm__cpu_short_conv(void *st, const llmm_conv_batch *b) {
    cpu_state *s = st;
    if (s->step == CPU_STEP_NONE || b->n_rows != s->desc.n_rows || b->kernel == 0) return LLMM_ERR_INVALID_ARG;
    const llmm_step *step = &s->desc;
    for (size_t r0 = 0; r0 < b->n_rows;) {
        size_t r1 = r0 + 1;
        while (r1 < b->n_rows && step->row_seq[r1] == step->row_seq[r0]) r1++;
        float *state = b->states + (size_t)step->seq_ids[step->row_seq[r0]] * b->seq_stride;
        conv_sequence(b, step->pos, r0, r1, state);
        r0 = r1;
    }
    return LLMM_OK;
}

void llmm__cpu_conv_window(const float *rows, const float *state, size_t dim, size_t kernel, const int32_t *pos,
                           size_t r0, size_t r1, const float **window) {
    const int64_t p0 = pos[r0];
    for (size_t i = 0; i < r1 - r0 + kernel - 1; i++) {
        const int64_t q = p0 - (int64_t)(kernel - 1) + (int64_t)i;
        if (q < 0) window[i] = NULL;
        else if (q >= p0) window[i] = rows + (r0 + (size_t)(q - p0)) * dim;
        else window[i] = state + (size_t)((int64_t)kernel - 1 - (p0 - q)) * dim;
    }
}

/* Ascending: a state row still to be read sits at a higher index than the one written. */
void llmm__cpu_conv_state_shift(float *state, size_t dim, size_t kernel, const float *const *window, size_t n_out) {
    for (size_t i = 0; i + 1 < kernel; i++) {
        const float *in = window[n_out + i];
        float *dst = state + i * dim;
        if (!in) memset(dst, 0, dim * sizeof *dst);
        else if (in != dst) memmove(dst, in, dim * sizeof *dst);
    }
}
