// test_cuda_prefill_attention: cuda/prefill_attention.cu (llmm__cu_prefill_attention) under the SIMT
// emulation, against a float64 reference of the same math over the same pool bytes and against
// llmm__cu_attention (attention.cu) on the same inputs.
//
// Each case is one step holding two prompt chunks of two sequences: A (rows [0, nA)) and B
// (rows [nA, nA + nB)), each starting mid-block after earlier positions of its sequence, then
// a padding row (pos -1). The sequences' block tables are disjoint runs of a shuffled pool and
// sit apart in the step's table array (B's first, a stray entry between); every pool row a row of
// the chunk sees is random, so a read of a wrong block, slot, head or layer shows, and every
// other row (positions no row sees: before a window, past the chunk's end, in a gap left behind
// by a window; blocks of neither table) is NaN in every layer and head, so a kernel that lets
// one into a sum (even times a zero weight) fails. llmm__cu_prefill_attention is called once per
// chunk with its row range; the output is poisoned with NaN first, so an unwritten value fails,
// and the padding row and everything past the output must stay NaN. Shapes: blocks of 16 and 32
// positions, chunks across block boundaries, windows (one leaving a whole tile of
// positions unseen between two rows of a gap), soft-capping on and off, query heads per K/V
// head 1, 2, 3, 4 and 20 (two runs of heads), head_dim 18 and 80 (rows padded to float4s and
// lanes past the row) besides 32, 64, 96, 128 and 256, F32, F16 and Q8 pools. Bad arguments are
// refused before anything is written.
//
// Tolerance, per output value, from float rounding (u = 2^-24), with w_p the exact softmax
// weights and n the row's visible positions:
// - a score: the dot runs as four interleaved chains of ceil(head_dim / 4) float adds, then two
//   adds to join them, each product rounded once (Q8 values once more, scale times int8), so
//   |err| <= (ceil(head_dim / 4) + 3 + q8) u sum|q k| before scaling, then u |raw| for the scale
//   and 4u (|raw| + |capped|) for tanh and its two products: ds. The coefficient is taken at
//   least backend_conformance.c's (head_dim / 8 + 10), so the bound covers llmm__cu_attention too.
// - a weight e^(s - m_final) is computed as e^(s - m_k) times one rescaling factor
//   e^(m_i - m_{i+1}) per later tile where the maximum grew: the rounded differences telescope
//   to at most 4u max|s| in the exponent, each exp and product adds about 3u per tile; the
//   softmax sum (a warp tree per tile, then one add per tile) and the weighted sum of V (one
//   add per position) add (n + 10) u more:
//     |err| <= sum_p w_p |v_p| (2 ds + (4 max|s| + n + 5 tiles + 10 + q8) u),  tiles = n/32 + 2.
// llmm__cu_attention is within backend_conformance.c's smaller bound of the same reference, so the two
// kernels' results are within twice this bound of each other, which is checked too.
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <setjmp.h>
extern "C" { // this cmocka.h declares its functions without C linkage for C++
#include <cmocka.h>
}

#include <algorithm>
#include <vector>

#include "kernels.h"
#include "prefill_attention.h"
#include "device_test_util.h"
#include "support/numeric.h"
#include "support/rng.h"

extern "C" {
#include "backend/backend.h"
#include "format/quant.h"
}

namespace {

test_rng g_rng; // the data stream (support/rng.h: uniform floats never 0), seeded by each test


// A pool of nb blocks of 1 << bs_shift positions per (K or V, layer, head), as the core lays it
// out (head regions), in host memory and as a cu_kv over equal device bytes.
struct pool {
    llmm_kv_layout kv;
    std::vector<uint8_t> host;
    cu_kv dev;
    size_t bytes;
};

pool make_pool(uint32_t type, uint32_t nl, uint32_t nhkv, uint32_t hd, uint32_t bs_shift, uint32_t nb) {
    pool p;
    memset(&p.kv, 0, sizeof p.kv);
    p.kv.layout = LLMM_KV_LAYOUT_HEAD_REGIONS;
    p.kv.n_layer = nl;
    p.kv.n_head_kv = nhkv;
    p.kv.head_dim = hd;
    p.kv.type = type;
    p.kv.block_size = 1u << bs_shift;
    p.kv.block_shift = bs_shift;
    p.kv.n_blocks = nb;
    p.kv.row_bytes = kv_row_bytes(type, hd);
    p.kv.block_stride = p.kv.row_bytes << bs_shift;
    p.kv.head_stride = p.kv.block_stride * nb;
    p.bytes = 2 * (size_t)nl * nhkv * p.kv.head_stride;
    p.host.resize(p.bytes);
    p.dev.pool = nullptr;
    p.dev.n_layer = nl;
    p.dev.n_head_kv = nhkv;
    p.dev.head_dim = hd;
    p.dev.type = type;
    p.dev.block_shift = bs_shift;
    p.dev.row_bytes = p.kv.row_bytes;
    p.dev.block_stride = p.kv.block_stride;
    p.dev.head_stride = p.kv.head_stride;
    return p;
}

// Every row random and valid for its type.
void fill_pool_rows(pool &p) {
    const size_t n_rows = p.bytes / p.kv.row_bytes;
    for (size_t r = 0; r < n_rows; r++) {
        uint8_t *row = &p.host[r * p.kv.row_bytes];
        for (size_t e = 0; e < p.kv.head_dim; e++) {
            const float f = rng_float(&g_rng, -2.0f, 2.0f);
            if (p.kv.type == LLMM_KV_F32) memcpy(row + 4 * e, &f, 4);
            else if (p.kv.type == LLMM_KV_F16) {
                const llmm_f16 h = llmm__f32_to_f16(f);
                memcpy(row + 2 * e, &h, 2);
            } else row[4 + e] = (uint8_t)(int8_t)((int)rng_below(&g_rng, 255) - 127);
        }
        if (p.kv.type == LLMM_KV_Q8) {
            const float scale = rng_float(&g_rng, 0.004f, 0.016f);
            memcpy(row, &scale, 4);
        }
    }
}

// Row `row` of the pool (a head's K or V at one position) made NaN: every value of F32 and F16
// rows, the scale of Q8 rows.
void poison_row(pool &p, uint8_t *row) {
    const float nan = NAN;
    if (p.kv.type == LLMM_KV_F32)
        for (size_t e = 0; e < p.kv.head_dim; e++) memcpy(row + 4 * e, &nan, 4);
    else if (p.kv.type == LLMM_KV_F16)
        for (size_t e = 0; e < p.kv.head_dim; e++) {
            const llmm_f16 h = 0x7e00;
            memcpy(row + 2 * e, &h, 2);
        }
    else memcpy(row, &nan, 4);
}

// Every pool row that no row of the chunks sees NaN: visible[b][slot] per block id b.
void poison_unseen(pool &p, const std::vector<std::vector<bool>> &visible) {
    const uint32_t bs = p.kv.block_size;
    for (uint32_t which = 0; which < 2; which++)
        for (uint32_t l = 0; l < p.kv.n_layer; l++)
            for (uint32_t h = 0; h < p.kv.n_head_kv; h++)
                for (uint32_t b = 0; b < p.kv.n_blocks; b++)
                    for (uint32_t slot = 0; slot < bs; slot++)
                        if (!visible[b][slot])
                            poison_row(p, &p.host[((which * p.kv.n_layer + l) * p.kv.n_head_kv + h) * p.kv.head_stride +
                                                  b * p.kv.block_stride + slot * p.kv.row_bytes]);
}

// Marks the positions rows at pos see (window as llmm__cu_prefill_attention's) in visible, through table.
void mark_visible(std::vector<std::vector<bool>> &visible, const uint32_t *table, uint32_t bs_shift,
                  const std::vector<int32_t> &pos, uint32_t window) {
    for (int32_t p : pos) {
        const uint32_t n_kv = (uint32_t)p + 1, start = window && n_kv > window ? n_kv - window : 0;
        for (uint32_t t = start; t < n_kv; t++) visible[table[t >> bs_shift]][t & ((1u << bs_shift) - 1)] = true;
    }
}

double g_worst; // the largest |prefill - ref| / tol seen, reported at the end

double kv_value(const pool &p, const uint8_t *row, size_t e) {
    if (p.kv.type == LLMM_KV_F32) {
        float f;
        memcpy(&f, row + 4 * e, 4);
        return f;
    }
    if (p.kv.type == LLMM_KV_F16) {
        llmm_f16 h;
        memcpy(&h, row + 2 * e, 2);
        return llmm__f16_to_f32(h);
    }
    float s;
    memcpy(&s, row, 4);
    return (double)s * (int8_t)row[4 + e];
}

// Row (pos, q: n_head heads) against the float64 reference over view; got and other (the two
// kernels' rows) within the bound above of it and within twice it of each other.
void check_row(const pool &p, const llmm_kv_view &view, int32_t pos, uint32_t n_head, uint32_t window, float scale,
               float softcap, const float *q, const float *got, const float *other, const char *what) {
    const uint8_t *k0 = (const uint8_t *)view.k, *v0 = (const uint8_t *)view.v;
    const size_t hd = p.kv.head_dim;
    const uint32_t n_kv = (uint32_t)pos + 1, start = window && n_kv > window ? n_kv - window : 0, n = n_kv - start;
    const double q8 = p.kv.type == LLMM_KV_Q8;
    const double dot_coef = std::max((double)((hd + 3) / 4) + 3, (double)(hd / 8) + 10) + q8;
    const double tiles = n / 32 + 2;
    std::vector<double> s(n);
    for (uint32_t h = 0; h < n_head; h++) {
        const uint32_t kvh = h / (n_head / p.kv.n_head_kv);
        double smax = -INFINITY, sabs = 0, sum = 0, ds = 0;
        for (uint32_t t = start; t < n_kv; t++) {
            const uint8_t *krow = k0 + kv_row_offset(&view, t, kvh);
            double dot = 0, abs_dot = 0;
            for (size_t d = 0; d < hd; d++) {
                const double x = (double)q[h * hd + d] * kv_value(p, krow, d);
                dot += x;
                abs_dot += fabs(x);
            }
            const double raw = dot * scale;
            double &st = s[t - start];
            st = softcap > 0 ? softcap * tanh(raw / softcap) : raw;
            double e = scale * dot_coef * U_F32 * abs_dot + U_F32 * fabs(raw);
            if (softcap > 0) e += 4 * U_F32 * (fabs(raw) + fabs(st));
            ds = std::max(ds, e);
            smax = std::max(smax, st);
            sabs = std::max(sabs, fabs(st));
        }
        for (uint32_t i = 0; i < n; i++) sum += (s[i] = exp(s[i] - smax));
        for (size_t d = 0; d < hd; d++) {
            double ref = 0, mag = 0;
            for (uint32_t t = start; t < n_kv; t++) {
                const double vv = kv_value(p, v0 + kv_row_offset(&view, t, kvh), d);
                ref += s[t - start] / sum * vv;
                mag += s[t - start] / sum * fabs(vv);
            }
            const double tol = mag * (2 * ds + (4 * sabs + n + 5 * tiles + 10 + q8) * U_F32);
            const size_t i = h * hd + d;
            g_worst = std::max(g_worst, fabs(got[i] - ref) / tol);
            if (!(fabs(got[i] - ref) <= tol) || !(fabs(got[i] - other[i]) <= 2 * tol)) // NaN fails
                fail_msg("%s: pos %d head %u value %zu: prefill %.9g cu_attention %.9g ref %.9g tol %.3g", what, pos, h,
                         d, got[i], other[i], ref, tol);
        }
    }
}

// A prompt chunk of n rows of a sequence that holds `prior` positions already: positions prior,
// prior + 1, ..., with gap_len positions skipped after the first gap_at rows (gap_len 0: none).
struct chunk {
    int32_t prior;
    uint32_t n, gap_at, gap_len;
};

struct pf_case {
    const char *name;
    uint32_t n_head_kv, group, head_dim, bs_shift, window;
    float softcap;
    chunk a, b;
};

std::vector<int32_t> chunk_positions(const chunk &c) {
    std::vector<int32_t> pos;
    for (uint32_t i = 0; i < c.n; i++)
        pos.push_back(c.prior + (int32_t)i + (c.gap_len && i >= c.gap_at ? (int32_t)c.gap_len : 0));
    return pos;
}

// Arguments llmm__cu_prefill_attention must refuse, each launching nothing (out stays poisoned).
void check_refusals(const pool &p, const cu_step &s, uint32_t nl, const float *qd, float *od, size_t n_out,
                    uint32_t nh) {
    const size_t nr = s.n_rows;
    assert_int_equal(llmm__cu_prefill_attention(nullptr, &p.dev, &s, 0, qd, od, nh, 0, 1.0f, 0.0f, 2, 2), 0); // empty range
    assert_int_not_equal(llmm__cu_prefill_attention(nullptr, &p.dev, &s, 0, qd, od, nh, 0, 1.0f, 0.0f, 0, nr + 1), 0);
    assert_int_not_equal(llmm__cu_prefill_attention(nullptr, &p.dev, &s, 0, qd, od, nh, 0, 1.0f, 0.0f, 2, 1), 0);
    assert_int_not_equal(llmm__cu_prefill_attention(nullptr, &p.dev, &s, nl, qd, od, nh, 0, 1.0f, 0.0f, 0, 1), 0);
    assert_int_not_equal(llmm__cu_prefill_attention(nullptr, &p.dev, &s, 0, qd, od, 0, 0, 1.0f, 0.0f, 0, 1), 0);
    if (p.dev.n_head_kv > 1) // any n_head is a multiple of one K/V head
        assert_int_not_equal(llmm__cu_prefill_attention(nullptr, &p.dev, &s, 0, qd, od, nh + 1, 0, 1.0f, 0.0f, 0, 1), 0);
    cu_kv bad = p.dev;
    bad.head_dim = 0;
    assert_int_not_equal(llmm__cu_prefill_attention(nullptr, &bad, &s, 0, qd, od, nh, 0, 1.0f, 0.0f, 0, 1), 0);
    bad.head_dim = 257;
    assert_int_not_equal(llmm__cu_prefill_attention(nullptr, &bad, &s, 0, qd, od, nh, 0, 1.0f, 0.0f, 0, 1), 0);
    bad.head_dim = p.dev.head_dim;
    bad.pool = nullptr;
    assert_int_not_equal(llmm__cu_prefill_attention(nullptr, &bad, &s, 0, qd, od, nh, 0, 1.0f, 0.0f, 0, 1), 0);
    bad = p.dev;
    bad.type = 3;
    assert_int_not_equal(llmm__cu_prefill_attention(nullptr, &bad, &s, 0, qd, od, nh, 0, 1.0f, 0.0f, 0, 1), 0);
    assert_int_not_equal(llmm__cu_prefill_attention(nullptr, &p.dev, &s, 0, nullptr, od, nh, 0, 1.0f, 0.0f, 0, 1), 0);
    const std::vector<float> got = from_device(od, n_out);
    for (size_t i = 0; i < n_out; i++)
        if (!isnan(got[i])) fail_msg("a refused call wrote value %zu", i);
}

// One step of c on each KV type, in layer 1 of 2.
void run_case(const pf_case &c) {
    enum { NL = 2, LAYER = 1, GUARD = 64 };
    const uint32_t nh = c.n_head_kv * c.group, hd = c.head_dim, q_dim = nh * hd;
    const std::vector<int32_t> pa = chunk_positions(c.a), pb = chunk_positions(c.b);
    std::vector<int32_t> pos = pa;
    pos.insert(pos.end(), pb.begin(), pb.end());
    pos.push_back(-1); // a padding row, in neither range
    const size_t n_rows = pos.size(), n_out = n_rows * q_dim, na = pa.size(), nb_rows = pb.size();
    const uint32_t blocks_a = ((uint32_t)pa.back() >> c.bs_shift) + 1;
    const uint32_t blocks_b = ((uint32_t)pb.back() >> c.bs_shift) + 1;
    const uint32_t n_blocks = blocks_a + blocks_b + 3;
    int32_t max_pos = 0;
    for (int32_t p : pos) max_pos = std::max(max_pos, p);

    for (uint32_t type = 0; type < 3; type++) {
        pool p = make_pool(type, NL, c.n_head_kv, hd, c.bs_shift, n_blocks);
        fill_pool_rows(p);
        // B's table, one stray block id, A's table: non-contiguous block ids, apart in the array
        std::vector<uint32_t> ids(n_blocks), tables;
        for (uint32_t i = 0; i < n_blocks; i++) ids[i] = i;
        for (uint32_t i = n_blocks - 1; i > 0; i--) std::swap(ids[i], ids[rng_below(&g_rng, i + 1)]);
        tables.insert(tables.end(), ids.begin() + blocks_a, ids.begin() + blocks_a + blocks_b);
        tables.push_back(ids[n_blocks - 1]);
        tables.insert(tables.end(), ids.begin(), ids.begin() + blocks_a);
        const uint32_t start_a = blocks_b + 1, start_b = 0;
        std::vector<std::vector<bool>> visible(n_blocks, std::vector<bool>(1u << c.bs_shift, false));
        mark_visible(visible, tables.data() + start_a, c.bs_shift, pa, c.window);
        mark_visible(visible, tables.data() + start_b, c.bs_shift, pb, c.window);
        poison_unseen(p, visible);
        p.kv.pool = p.host.data();
        p.dev.pool = to_device(p.host.data(), p.bytes);
        std::vector<uint32_t> starts(n_rows, 0);
        for (size_t r = 0; r < na; r++) starts[r] = start_a;
        for (size_t r = na; r < na + nb_rows; r++) starts[r] = start_b;
        int32_t *posd = to_device(pos.data(), n_rows);
        uint32_t *startsd = to_device(starts.data(), n_rows), *tablesd = to_device(tables.data(), tables.size());
        cu_step s;
        s.n_rows = (uint32_t)n_rows;
        s.tokens = nullptr;
        s.pos = posd;
        s.table_start = startsd;
        s.tables = tablesd;

        // a score scale larger than 1/sqrt(hd) so that the softmax is far from uniform
        const float scale = 4.0f / sqrtf((float)hd);
        std::vector<float> q(n_out);
        for (float &f : q) f = rng_float(&g_rng, -1.0f, 1.0f);
        const std::vector<float> poison(n_out + GUARD, NAN);
        float *qd = to_device(q.data(), n_out), *od = to_device(poison.data(), poison.size());
        float *od2 = to_device(poison.data(), poison.size());
        if (type == 0) check_refusals(p, s, NL, qd, od, poison.size(), nh);

        assert_int_equal(
            llmm__cu_prefill_attention(nullptr, &p.dev, &s, LAYER, qd, od, nh, c.window, scale, c.softcap, 0, na), 0);
        assert_int_equal(llmm__cu_prefill_attention(nullptr, &p.dev, &s, LAYER, qd, od, nh, c.window, scale, c.softcap, na,
                                              na + nb_rows),
                         0);
        const std::vector<float> got = from_device(od, poison.size());
        for (size_t i = (na + nb_rows) * q_dim; i < got.size(); i++)
            if (!isnan(got[i])) fail_msg("%s: value %zu (padding row or past the output) changed", c.name, i);

        const size_t max_kv = (size_t)max_pos + 1, need = llmm__cu_attention_scratch_bytes(n_rows, nh, hd, max_kv);
        void *scratch = nullptr;
        if (need) assert_int_equal(cudaMalloc(&scratch, need), cudaSuccess);
        assert_int_equal(llmm__cu_attention(nullptr, &p.dev, &s, LAYER, qd, od2, nh, c.window, scale, c.softcap, max_kv,
                                      scratch, need),
                         0);
        const std::vector<float> other = from_device(od2, n_out);

        char what[200];
        for (size_t r = 0; r < na + nb_rows; r++) {
            snprintf(what, sizeof what, "%s, %s, %u heads over %u, head_dim %u, blocks of %u, row %zu", c.name,
                     type == 0 ? "f32" : type == 1 ? "f16" : "q8", nh, c.n_head_kv, hd, 1u << c.bs_shift, r);
            const llmm_kv_view view = kv_layout_view(&p.kv, LAYER, tables.data() + starts[r]);
            check_row(p, view, pos[r], nh, c.window, scale, c.softcap, &q[r * q_dim], &got[r * q_dim],
                      &other[r * q_dim], what);
        }
        cudaFree(scratch);
        cudaFree(qd);
        cudaFree(od);
        cudaFree(od2);
        cudaFree(posd);
        cudaFree(startsd);
        cudaFree(tablesd);
        cudaFree(p.dev.pool);
    }
}

void test_prefill_attention(void **) {
    rng_seed(&g_rng, 2024);
    const pf_case cases[] = {
        // name, K/V heads, group, head_dim, log2 block, window, softcap, chunk A, chunk B
        {"group 1, head_dim 64, blocks of 16", 2, 1, 64, 4, 0, 0.0f, {21, 37, 0, 0}, {0, 5, 0, 0}},
        {"group 2, head_dim 128, blocks of 32, window 24, softcap 5", 2, 2, 128, 5, 24, 5.0f, {40, 30, 0, 0},
         {70, 3, 0, 0}},
        {"group 4, head_dim 64, blocks of 32, softcap 0.5, a gap", 1, 4, 64, 5, 0, 0.5f, {50, 20, 7, 3}, {7, 9, 0, 0}},
        {"group 4, head_dim 128, blocks of 16, window 40", 2, 4, 128, 4, 40, 0.0f, {90, 17, 0, 0}, {0, 33, 0, 0}},
        {"group 1, head_dim 64, window 10, an unseen tile", 3, 1, 64, 4, 10, 0.0f, {5, 12, 6, 70}, {200, 2, 0, 0}},
        {"group 2, head_dim 256, blocks of 16", 1, 2, 256, 4, 0, 0.0f, {30, 9, 0, 0}, {45, 4, 0, 0}},
        {"group 3, head_dim 96, blocks of 32", 2, 3, 96, 5, 0, 2.0f, {17, 11, 0, 0}, {0, 1, 0, 0}},
        {"group 2, head_dim 128, blocks of 16, a long prompt", 2, 2, 128, 4, 0, 0.0f, {211, 70, 0, 0}, {480, 6, 0, 0}},
        {"group 20, head_dim 32, blocks of 16, softcap 30", 1, 20, 32, 4, 0, 30.0f, {3, 4, 0, 0}, {40, 3, 0, 0}},
        {"group 2, head_dim 80, blocks of 16, window 20, softcap 10", 2, 2, 80, 4, 20, 10.0f, {29, 21, 0, 0},
         {0, 18, 0, 0}},
        {"group 1, head_dim 18, blocks of 32, a gap", 2, 1, 18, 5, 0, 0.0f, {33, 13, 5, 40}, {10, 7, 0, 0}},
    };
    for (const pf_case &c : cases) run_case(c);
    printf("largest |error| / tolerance: %.3g\n", g_worst);
}

} // namespace

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_prefill_attention),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
