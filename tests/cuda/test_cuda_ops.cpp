// The kernels of cuda/norm_rope_act.cu and cuda/attention.cu, run on the CPU by the SIMT
// emulation (tests/simt/simt.h), against the CPU backend's own implementations of the same ops
// and a float64 reference, on seeded random odd-sized data (never zero). Tolerances are
// tests/support/backend_conformance.c's for the same ops (cited at each check), measured against the
// float64 reference; the CPU backend passes the same bounds there, so device and CPU results
// lie within twice the bound of each other, which is checked too. Exact where the conformance
// test is exact (add, add_rows, scale) and where the formats allow (kv_write: the pool's bytes
// equal the CPU's for F32, F16 and Q8). The split attention's merge rule (softmax_merge.cuh) is
// also checked on its own against a one-pass softmax.
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
extern "C" { // this cmocka.h declares its functions without C linkage for C++
#include <cmocka.h>
}

#include <math.h>
#include <stdio.h>
#include <string.h>

#include <algorithm>
#include <vector>

#include "graph.h"
#include "kernels.h"
#include "softmax_merge.cuh"
#include "device_test_util.h"
#include "support/numeric.h"
#include "support/rng.h"

extern "C" {
#include "model/arch.h"
#include "backend/backend.h"
#include "format/quant.h"

// cpu/cpu_backend.h does not compile as C++ (C11 _Atomic, restrict), so the few CPU kernel
// entry points and structs this test calls are declared here as that header declares them.
struct cpu_state;
typedef struct cpu_attn_row {
    llmm_kv_view kv;
    uint32_t n_kv;
    uint32_t kv_start;
} cpu_attn_row;
typedef struct cpu_attn_batch {
    const float *q;
    float *out;
    size_t n_rows;
    const cpu_attn_row *rows;
    uint32_t n_head, n_head_kv, head_dim;
    float scale;
    float softcap;
} cpu_attn_batch;
llmm_status llmm__cpu_attend(cpu_state *s, const cpu_attn_batch *b);
llmm_status llmm__cpu_rope_rows(float *x, size_t n_rows, size_t n_heads, size_t head_dim, const int32_t *pos,
                          const llmm_rope_params *rp);
llmm_status llmm__cpu_kv_store_rows(const llmm_kv_view *views, const int32_t *pos, size_t n_rows, const float *k,
                              const float *v, size_t kv_dim);
}

namespace {

void *g_cpu; // the CPU backend's state, one thread (its table's slots take host pointers)

// ------------------------------------------------------------------ random data, device memory

test_rng g_rng; // the data stream (support/rng.h: uniform floats never 0), seeded by each test
std::vector<float> rand_floats(size_t n, float lo, float hi) {
    std::vector<float> v(n);
    for (float &f : v) f = rng_float(&g_rng, lo, hi);
    return v;
}


// |got - ref| <= tol, and the device's value within 2 tol of the CPU backend's.
void close3(double got, double cpu, double ref, double tol, const char *what, size_t i) {
    if (fabs(got - ref) <= tol && fabs(got - cpu) <= 2 * tol) return;
    fail_msg("%s value %zu: device %.9g cpu %.9g ref %.9g tol %.3g", what, i, got, cpu, ref, tol);
}

int setup(void **) {
    llmm_backend_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.n_threads = 1;
    return llmm__cpu_backend.init(&cfg, &g_cpu) == LLMM_OK ? 0 : -1;
}
int teardown(void **) {
    llmm__cpu_backend.shutdown(g_cpu);
    return 0;
}

// ------------------------------------------------------------------ rms_norm

// backend_conformance.c check_rms_norm: at most 7 float roundings, tolerance 10u |ref|.
void test_rms_norm(void **) {
    rng_seed(&g_rng, 31);
    const size_t dims[] = {1, 7, 33, 173, 1001, 4099}, rows[] = {1, 3, 5};
    for (size_t di = 0; di < sizeof dims / sizeof *dims; di++)
        for (size_t ri = 0; ri < sizeof rows / sizeof *rows; ri++) {
            const size_t dim = dims[di], n_rows = rows[ri], n = dim * n_rows;
            const float eps = (di + ri) % 2 ? 1e-6f : 1e-5f;
            std::vector<float> x = rand_floats(n, -2.0f, 2.0f), w = rand_floats(dim, -2.0f, 2.0f), cpu(n);
            float *xd = to_device(x.data(), n), *wd = to_device(w.data(), dim), *od = nullptr;
            assert_int_equal(cudaMalloc(&od, n * sizeof(float)), cudaSuccess);
            assert_int_equal(llmm__cu_rms_norm(nullptr, xd, wd, od, n_rows, dim, eps), 0);
            const std::vector<float> got = from_device(od, n);
            assert_int_equal(llmm__cpu_backend.rms_norm(g_cpu, x.data(), w.data(), cpu.data(), n_rows, dim, eps), LLMM_OK);
            for (size_t r = 0; r < n_rows; r++) {
                double ss = 0;
                for (size_t i = 0; i < dim; i++) ss += (double)x[r * dim + i] * x[r * dim + i];
                const double inv = 1.0 / sqrt(ss / (double)dim + (double)eps);
                for (size_t i = 0; i < dim; i++) {
                    const size_t j = r * dim + i;
                    const double ref = (double)x[j] * inv * w[i];
                    close3(got[j], cpu[j], ref, 10 * U_F32 * fabs(ref), "rms_norm", j);
                }
            }
            cudaFree(xd);
            cudaFree(wd);
            cudaFree(od);
        }
}

// ------------------------------------------------------------------ element-wise ops

const size_t k_elem_sizes[] = {1, 7, 31, 33, 173, 1001, 70001};

// add and scale: one float operation per value, exact (check_elementwise). softcap: cap *
// tanh(x / cap) with the quotient rounded twice and tanh within two ulps: 4u (|x| + |ref|).
void test_elementwise(void **) {
    rng_seed(&g_rng, 72);
    for (size_t si = 0; si < sizeof k_elem_sizes / sizeof *k_elem_sizes; si++) {
        const size_t n = k_elem_sizes[si];
        const std::vector<float> a = rand_floats(n, -50.0f, 50.0f), b = rand_floats(n, -2.0f, 2.0f);
        float *bd = to_device(b.data(), n);

        float *ad = to_device(a.data(), n);
        std::vector<float> cpu = a;
        assert_int_equal(llmm__cu_add(nullptr, ad, bd, n), 0);
        assert_int_equal(llmm__cpu_backend.add(g_cpu, cpu.data(), b.data(), n), LLMM_OK);
        std::vector<float> got = from_device(ad, n);
        for (size_t i = 0; i < n; i++)
            if (got[i] != cpu[i]) fail_msg("add value %zu: %.9g want %.9g", i, got[i], cpu[i]);
        cudaFree(ad);

        const float s = rng_float(&g_rng, -3.0f, 3.0f);
        ad = to_device(a.data(), n);
        cpu = a;
        assert_int_equal(llmm__cu_scale(nullptr, ad, n, s), 0);
        assert_int_equal(llmm__cpu_backend.scale(g_cpu, cpu.data(), n, s), LLMM_OK);
        got = from_device(ad, n);
        for (size_t i = 0; i < n; i++)
            if (got[i] != cpu[i]) fail_msg("scale value %zu: %.9g want %.9g", i, got[i], cpu[i]);
        cudaFree(ad);

        const float cap = si % 2 ? 30.0f : 5.0f;
        ad = to_device(a.data(), n);
        cpu = a;
        assert_int_equal(llmm__cu_softcap(nullptr, ad, n, cap), 0);
        assert_int_equal(llmm__cpu_backend.softcap(g_cpu, cpu.data(), n, cap), LLMM_OK);
        got = from_device(ad, n);
        for (size_t i = 0; i < n; i++) {
            const double ref = cap * tanh((double)a[i] / cap);
            close3(got[i], cpu[i], ref, 4 * U_F32 * (fabs(a[i]) + fabs(ref)), "softcap", i);
        }
        cudaFree(ad);
        cudaFree(bd);
    }
    const size_t dims[] = {1, 7, 33, 173}, rows[] = {1, 3, 17};
    for (size_t di = 0; di < sizeof dims / sizeof *dims; di++)
        for (size_t ri = 0; ri < sizeof rows / sizeof *rows; ri++) {
            const size_t dim = dims[di], n_rows = rows[ri], n = dim * n_rows;
            const std::vector<float> x = rand_floats(n, -2.0f, 2.0f), bias = rand_floats(dim, -2.0f, 2.0f);
            float *xd = to_device(x.data(), n), *bd = to_device(bias.data(), dim);
            std::vector<float> cpu = x;
            assert_int_equal(llmm__cu_add_rows(nullptr, xd, bd, n_rows, dim), 0);
            assert_int_equal(llmm__cpu_backend.add_rows(g_cpu, cpu.data(), bias.data(), n_rows, dim), LLMM_OK);
            const std::vector<float> got = from_device(xd, n);
            for (size_t i = 0; i < n; i++)
                if (got[i] != cpu[i]) fail_msg("add_rows value %zu: %.9g want %.9g", i, got[i], cpu[i]);
            cudaFree(xd);
            cudaFree(bd);
        }
}

// check_glu: silu(g) up = g / (1 + e^-g) up within 8u |ref|; gelu_tanh(g) up, where z =
// sqrt(2/pi) (g + 0.044715 g^3) carries ~5 roundings and 1 + tanh(z) cancels for negative g,
// within 0.5 |g up| (5u |z| + 4u) + 6u |ref|.
void test_glu(void **) {
    rng_seed(&g_rng, 71);
    for (uint32_t act = 0; act < 2; act++)
        for (size_t si = 0; si < sizeof k_elem_sizes / sizeof *k_elem_sizes; si++) {
            const size_t n = k_elem_sizes[si];
            const float range = si % 2 ? 8.0f : 2.0f; // [-8, 8] saturates
            const std::vector<float> g = rand_floats(n, -range, range), up = rand_floats(n, -2.0f, 2.0f);
            float *gd_ = to_device(g.data(), n), *ud = to_device(up.data(), n);
            std::vector<float> cpu = g;
            assert_int_equal(llmm__cu_glu(nullptr, gd_, ud, n, act), 0);
            assert_int_equal(llmm__cpu_backend.glu(g_cpu, cpu.data(), up.data(), n, (llmm_activation)act), LLMM_OK);
            const std::vector<float> got = from_device(gd_, n);
            for (size_t i = 0; i < n; i++) {
                const double gd = g[i], u = up[i];
                double ref, tol;
                if (act == LLMM_ACT_SILU) {
                    ref = gd / (1.0 + exp(-gd)) * u;
                    tol = 8 * U_F32 * fabs(ref);
                } else {
                    const double z = 0.79788456080286535588 * (gd + 0.044715 * gd * gd * gd);
                    ref = 0.5 * gd * (1.0 + tanh(z)) * u;
                    tol = 0.5 * fabs(gd * u) * (5 * U_F32 * fabs(z) + 4 * U_F32) + 6 * U_F32 * fabs(ref);
                }
                close3(got[i], cpu[i], ref, tol, act ? "gelu" : "silu", i);
            }
            cudaFree(gd_);
            cudaFree(ud);
        }
}

// ------------------------------------------------------------------ rope

// check_rope: theta_i built by i float multiplications carries (i (3 + 2 ln(base)/n_rot) + 3) u
// relative (with the frequency scale and factor); cos/sin, mscale and the rotation a few u:
// |err| <= mscale (|x0| + |x1|) (2 |d theta_i| + 8u). Values past n_rot stay bit for bit.
void test_rope(void **) {
    rng_seed(&g_rng, 61);
    const size_t shapes[][2] = {{8, 8}, {64, 64}, {10, 6}, {64, 32}, {2, 2}, {24, 24}, {12, 4}, {128, 128}};
    const float bases[] = {10000.0f, 1000000.0f};
    enum { N_ROWS = 7, N_HEADS = 3 };
    for (uint32_t kind = 0; kind < 2; kind++)
        for (size_t sh = 0; sh < sizeof shapes / sizeof *shapes; sh++)
            for (size_t bi = 0; bi < 2; bi++) {
                const size_t hd = shapes[sh][0], n_rot = shapes[sh][1], n = (size_t)N_ROWS * N_HEADS * hd;
                const int scaled = (int)((sh + bi) % 2); // freq factors, freq_scale, mscale
                const int32_t pos[N_ROWS] = {0, 1, 7, 101, 1023, 3999, (int32_t)(2 * rng_below(&g_rng, 2000) + 1)};
                const std::vector<float> ff = rand_floats(n_rot / 2, 1.0f, 8.0f), x = rand_floats(n, -2.0f, 2.0f);
                float *xd = to_device(x.data(), n), *ffd = to_device(ff.data(), ff.size());
                int32_t *posd = to_device(pos, N_ROWS);
                const float freq_scale = scaled ? 0.25f : 1.0f, mscale = scaled ? 1.25f : 1.0f;
                assert_int_equal(llmm__cu_rope(nullptr, xd, N_ROWS, N_HEADS, hd, posd, (uint32_t)n_rot, bases[bi], freq_scale,
                                         mscale, kind, scaled ? ffd : nullptr),
                                 0);
                const std::vector<float> y = from_device(xd, n);
                llmm_rope_params rp;
                memset(&rp, 0, sizeof rp);
                rp.n_rot = (uint32_t)n_rot;
                rp.base = bases[bi];
                rp.freq_scale = freq_scale;
                rp.mscale = mscale;
                rp.kind = (llmm_rope_kind)kind;
                rp.freq_factors = scaled ? ff.data() : nullptr;
                std::vector<float> cpu = x;
                assert_int_equal(llmm__cpu_rope_rows(cpu.data(), N_ROWS, N_HEADS, hd, pos, &rp), LLMM_OK);
                for (size_t r = 0; r < N_ROWS; r++)
                    for (size_t h = 0; h < N_HEADS; h++) {
                        const size_t o = (r * N_HEADS + h) * hd;
                        const float *xv = &x[o];
                        for (size_t i = 0; i < n_rot / 2; i++) {
                            const size_t a = kind ? i : 2 * i, b = kind ? i + n_rot / 2 : 2 * i + 1;
                            const double base = bases[bi];
                            const double th = (double)pos[r] * freq_scale *
                                              pow(base, -2.0 * (double)i / (double)n_rot) / (scaled ? ff[i] : 1.0);
                            const double cs = cos(th) * mscale, sn = sin(th) * mscale;
                            const double dth = th * ((double)i * (3.0 + 2.0 * log(base) / (double)n_rot) + 3.0) * U_F32;
                            const double tol = mscale * (fabs(xv[a]) + fabs(xv[b])) * (2 * dth + 8 * U_F32);
                            close3(y[o + a], cpu[o + a], xv[a] * cs - xv[b] * sn, tol, "rope", o + a);
                            close3(y[o + b], cpu[o + b], xv[a] * sn + xv[b] * cs, tol, "rope", o + b);
                        }
                        for (size_t i = n_rot; i < hd; i++)
                            if (memcmp(&y[o + i], &xv[i], sizeof(float)))
                                fail_msg("rope: pos %d head %zu value %zu past n_rot changed", pos[r], h, i);
                    }
                cudaFree(xd);
                cudaFree(ffd);
                cudaFree(posd);
            }
}

// ------------------------------------------------------------------ the KV pool

// A pool of n_blocks blocks of bs positions per (K or V, layer, head), as the core lays it out
// (kvcache.h: head regions), in host memory (CPU) and device memory (cu_kv) with equal bytes.
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

// Every row random and valid for its type (backend_conformance.c random_pool), so that a read
// of a wrong block, slot, head or layer sees other values than the reference.
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

void shuffled_ids(uint32_t *ids, uint32_t n) {
    for (uint32_t i = 0; i < n; i++) ids[i] = i;
    for (uint32_t i = n - 1; i > 0; i--) std::swap(ids[i], ids[rng_below(&g_rng, i + 1)]);
}

// One step on the device: positions, and per row the offset of its block table in tables.
struct dev_step {
    cu_step s;
    int32_t *pos;
    uint32_t *starts, *tables;
};

dev_step put_step(const std::vector<int32_t> &pos, const std::vector<uint32_t> &starts,
                  const std::vector<uint32_t> &tables) {
    dev_step d;
    d.pos = to_device(pos.data(), pos.size());
    d.starts = to_device(starts.data(), starts.size());
    d.tables = to_device(tables.data(), tables.size());
    d.s.n_rows = (uint32_t)pos.size();
    d.s.tokens = nullptr;
    d.s.pos = d.pos;
    d.s.table_start = d.starts;
    d.s.tables = d.tables;
    return d;
}

void free_step(dev_step &d) {
    cudaFree(d.pos);
    cudaFree(d.starts);
    cudaFree(d.tables);
}

const char *const k_kv_names[] = {"f32", "f16", "q8"};

// Block tables for the rows of a step through a shuffled pool of nb blocks of 1 << bs_shift
// positions: a decode step (prompt = 0) gives each row a sequence of its own, a disjoint run of
// the shuffled ids; a prompt step gives all rows one sequence. Returns the blocks needed.
uint32_t plan_tables(const std::vector<int32_t> &pos, int prompt, uint32_t bs_shift, std::vector<uint32_t> &starts) {
    starts.clear();
    uint32_t next = 0;
    if (prompt) {
        int32_t last = 0;
        for (int32_t p : pos) last = std::max(last, p);
        starts.assign(pos.size(), 0);
        return ((uint32_t)last >> bs_shift) + 1;
    }
    for (int32_t p : pos) {
        starts.push_back(next);
        next += ((uint32_t)p >> bs_shift) + 1;
    }
    return next;
}

// kv_write of each KV type into a pool of random bytes, for K/V head counts 1 to 3, head sizes
// 11 and 40 (Q8 rows end in padding), 72 and 256, blocks of 1, 4, 16 and 32 positions: a decode
// step of 4 sequences at different positions (layer 1) and a prompt step of 5 consecutive
// positions of one sequence (layer 0), through shuffled, disjoint block tables; the whole pool
// afterwards byte for byte the CPU's (llmm__cpu_kv_store_rows on the same bytes).
void test_kv_write(void **) {
    rng_seed(&g_rng, 81);
    enum { NL = 2 };
    const uint32_t shapes[][3] = {{3, 11, 2}, {1, 256, 5}, {2, 72, 0}, {3, 40, 4}}; // n_head_kv, head_dim, bs_shift
    for (const auto &sh : shapes)
        for (uint32_t type = 0; type < 3; type++)
            for (int prompt = 0; prompt < 2; prompt++) {
                const uint32_t nhkv = sh[0], hd = sh[1], bs_shift = sh[2], kvd = nhkv * hd;
                std::vector<int32_t> pos;
                if (prompt) pos = {2, 3, 4, 5, 6};
                else pos = {0, 5, 9, 14};
                std::vector<uint32_t> starts;
                const uint32_t nb = plan_tables(pos, prompt, bs_shift, starts) + 3; // spare blocks stay as they were
                pool p = make_pool(type, NL, nhkv, hd, bs_shift, nb);
                for (uint8_t &b : p.host) b = (uint8_t)rng_u64(&g_rng);
                std::vector<uint32_t> tables(nb);
                shuffled_ids(tables.data(), nb);
                const uint32_t layer = prompt ? 0 : 1;
                const size_t n_rows = pos.size();
                const std::vector<float> k = rand_floats(n_rows * kvd, -3.0f, 3.0f),
                                         v = rand_floats(n_rows * kvd, -3.0f, 3.0f);
                dev_step ds = put_step(pos, starts, tables);
                p.dev.pool = to_device(p.host.data(), p.bytes);
                float *kd = to_device(k.data(), k.size()), *vd = to_device(v.data(), v.size());
                assert_int_equal(llmm__cu_kv_write(nullptr, &p.dev, &ds.s, layer, kd, vd), 0);
                assert_int_not_equal(llmm__cu_kv_write(nullptr, &p.dev, &ds.s, NL, kd, vd), 0);
                const std::vector<uint8_t> got = from_device(p.dev.pool, p.bytes);
                p.kv.pool = p.host.data();
                std::vector<llmm_kv_view> views(n_rows);
                for (size_t r = 0; r < n_rows; r++) views[r] = kv_layout_view(&p.kv, layer, tables.data() + starts[r]);
                assert_int_equal(llmm__cpu_kv_store_rows(views.data(), pos.data(), n_rows, k.data(), v.data(), kvd), LLMM_OK);
                for (size_t i = 0; i < p.bytes; i++)
                    if (got[i] != p.host[i])
                        fail_msg("kv_write %s %s, %u K/V heads of %u, blocks of %u: pool byte %zu (row %zu, byte %zu "
                                 "of it) is %u, the CPU's %u",
                                 k_kv_names[type], prompt ? "prompt" : "decode", nhkv, hd, 1u << bs_shift, i,
                                 i / p.kv.row_bytes, i % p.kv.row_bytes, got[i], p.host[i]);
                cudaFree(kd);
                cudaFree(vd);
                cudaFree(p.dev.pool);
                free_step(ds);
            }
}

// ------------------------------------------------------------------ softmax merge

// A partial of scores s[i0, i0 + n) with values v, summed left to right in float.
sm_partial partial_of(const std::vector<float> &s, const std::vector<float> &v, size_t i0, size_t n) {
    sm_partial p = sm_empty();
    for (size_t i = i0; i < i0 + n; i++) p.m = fmaxf(p.m, s[i]);
    for (size_t i = i0; i < i0 + n; i++) {
        const float e = expf(s[i] - p.m);
        p.l += e;
        p.a += e * v[i];
    }
    return p;
}

sm_partial merge_tree(const std::vector<sm_partial> &parts, size_t lo, size_t hi) {
    if (hi - lo == 1) return parts[lo];
    const size_t mid = lo + (hi - lo) / 2;
    return sm_merge(merge_tree(parts, lo, mid), merge_tree(parts, mid, hi));
}

bool same_bits(sm_partial x, sm_partial y) { return memcmp(&x, &y, sizeof x) == 0; }

// softmax_merge.cuh: n scores and values cut into partials of random runs, shuffled, with
// empty partials mixed in, and merged left to right, right to left and as a balanced tree, give
// the one-pass softmax-weighted value (float64) within the float sums' (n + 8) u and the
// rescalings' rounding of score differences (up to 2 spread u each side), relative to sum w |v|.
// Scores spread over +-60 make most rescaling factors tiny or 0. The empty partial is the
// identity bit for bit; sm_score is the CPU's scaled and soft-capped score.
void test_softmax_merge(void **) {
    rng_seed(&g_rng, 101);
    for (int trial = 0; trial < 300; trial++) {
        const size_t n = 1 + rng_below(&g_rng, 400);
        const float spread = trial % 3 ? 8.0f : 60.0f;
        const std::vector<float> s = rand_floats(n, -spread, spread), v = rand_floats(n, -2.0f, 2.0f);
        double smax = -INFINITY, sum = 0, ref = 0, mag = 0;
        for (float x : s) smax = fmax(smax, x);
        for (size_t i = 0; i < n; i++) sum += exp(s[i] - smax);
        for (size_t i = 0; i < n; i++) {
            ref += exp(s[i] - smax) / sum * v[i];
            mag += exp(s[i] - smax) / sum * fabs(v[i]);
        }
        std::vector<sm_partial> parts;
        for (size_t i = 0; i < n;) {
            const size_t len = 1 + rng_below(&g_rng, (uint32_t)std::min<size_t>(n - i, 48));
            parts.push_back(partial_of(s, v, i, len));
            if (rng_below(&g_rng, 4) == 0) parts.push_back(sm_empty());
            i += len;
        }
        for (size_t i = parts.size() - 1; i > 0; i--) std::swap(parts[i], parts[rng_below(&g_rng, (uint32_t)i + 1)]);
        sm_partial lr = sm_empty(), rl = sm_empty();
        for (const sm_partial &p : parts) lr = sm_merge(lr, p);
        for (size_t i = parts.size(); i-- > 0;) rl = sm_merge(parts[i], rl);
        const sm_partial tree = merge_tree(parts, 0, parts.size());
        const sm_partial one = partial_of(s, v, 0, n);
        const double tol = mag * ((double)n + 8 + 4 * spread) * U_F32;
        const sm_partial all[] = {one, lr, rl, tree};
        const char *const names[] = {"one pass", "left to right", "right to left", "tree"};
        for (int k = 0; k < 4; k++) {
            const double got = sm_result(all[k]);
            if (!(fabs(got - ref) <= tol))
                fail_msg("softmax merge %s, %zu scores in %zu partials: %.9g, float64 %.9g, tol %.3g", names[k], n,
                         parts.size(), got, ref, tol);
            if (all[k].m != one.m) fail_msg("softmax merge %s: maximum %.9g, want %.9g", names[k], all[k].m, one.m);
        }
        if (!same_bits(sm_merge(one, sm_empty()), one) || !same_bits(sm_merge(sm_empty(), one), one))
            fail_msg("softmax merge: the empty partial changed a partial");
    }
    const sm_partial e = sm_merge(sm_empty(), sm_empty());
    assert_true(e.m == -INFINITY && e.l == 0.0f && e.a == 0.0f);
    assert_true(sm_rescale(-INFINITY, 3.0f) == 0.0f && sm_rescale(2.0f, 2.0f) == 1.0f);
    for (int i = 0; i < 1000; i++) {
        const float dot = rng_float(&g_rng, -40.0f, 40.0f), scale = rng_float(&g_rng, 0.05f, 1.0f), cap = rng_float(&g_rng, 0.5f, 50.0f);
        if (sm_score(dot, scale, 0.0f) != dot * scale) fail_msg("sm_score without a cap: not dot * scale");
        const double raw = (double)dot * scale, capped = cap * tanh(raw / cap), got = sm_score(dot, scale, cap);
        if (!(fabs(got - capped) <= 6 * U_F32 * (fabs(raw) + fabs(capped))))
            fail_msg("sm_score(%.9g, %.9g, cap %.9g) = %.9g, float64 %.9g", dot, scale, cap, got, capped);
    }
}

// ------------------------------------------------------------------ attention

// backend_conformance.c check_attn_row: a score is off by at most ds = scale (hd/8 + 10 + q8) u
// sum|q k| + u |s| (soft-capping adds 4u (|s| + |capped s|)); each softmax weight by 2 ds + 4u
// relative and the float sum over the n positions adds (n + 1) u:
//     |err| <= sum_p w_p |v_p| (2 ds + (n + 6 + q8) u).
void check_attn_row(const pool &p, uint32_t l, const uint32_t *table, int32_t pos, uint32_t n_head, uint32_t window,
                    float scale, float softcap, const float *q, const float *got, const float *cpu, const char *what) {
    const llmm_kv_view view = kv_layout_view(&p.kv, l, table);
    const uint8_t *k0 = (const uint8_t *)view.k, *v0 = (const uint8_t *)view.v;
    const size_t hd = p.kv.head_dim;
    const uint32_t n_kv = (uint32_t)pos + 1, start = window && n_kv > window ? n_kv - window : 0;
    const double q8 = p.kv.type == LLMM_KV_Q8;
    auto value = [&](const uint8_t *row, size_t e) -> double {
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
    };
    std::vector<double> s(n_kv - start);
    for (uint32_t h = 0; h < n_head; h++) {
        const uint32_t kvh = h / (n_head / p.kv.n_head_kv);
        double smax = -INFINITY, sum = 0, ds = 0;
        for (uint32_t t = start; t < n_kv; t++) {
            const uint8_t *krow = k0 + kv_row_offset(&view, t, kvh);
            double dot = 0, abs_dot = 0;
            for (size_t d = 0; d < hd; d++) {
                const double x = (double)q[h * hd + d] * value(krow, d);
                dot += x;
                abs_dot += fabs(x);
            }
            const double raw = dot * scale;
            double &st = s[t - start];
            st = softcap > 0 ? softcap * tanh(raw / softcap) : raw;
            double e = scale * ((double)(hd / 8) + 10 + q8) * U_F32 * abs_dot + U_F32 * fabs(raw);
            if (softcap > 0) e += 4 * U_F32 * (fabs(raw) + fabs(st));
            ds = fmax(ds, e);
            smax = fmax(smax, st);
        }
        for (uint32_t t = start; t < n_kv; t++) sum += (s[t - start] = exp(s[t - start] - smax));
        for (size_t d = 0; d < hd; d++) {
            double ref = 0, mag = 0;
            for (uint32_t t = start; t < n_kv; t++) {
                const double vv = value(v0 + kv_row_offset(&view, t, kvh), d);
                ref += s[t - start] / sum * vv;
                mag += s[t - start] / sum * fabs(vv);
            }
            const double tol = mag * (2 * ds + (n_kv - start + 6.0 + q8) * U_F32);
            const size_t i = h * hd + d;
            if (!(fabs(got[i] - ref) <= tol) || !(fabs(got[i] - cpu[i]) <= 2 * tol)) // NaN fails
                fail_msg("attention %s: pos %d head %u value %zu: device %.9g cpu %.9g ref %.9g tol %.3g", what, pos,
                         h, d, got[i], cpu[i], ref, tol);
        }
    }
}

struct attn_case {
    const char *name;
    uint32_t n_head_kv, group, head_dim, bs_shift;
    int prompt;               // 1: the rows are positions of one sequence; 0: a sequence a row
    std::vector<int32_t> pos; // the rows' positions
    uint32_t window;
    float softcap;
    size_t max_kv;        // the context's longest sequence, as the glue passes it
    uint32_t pool_offset; // bytes past an aligned address where the device pool starts
};

// One step of c on each KV type, in layer 1 of 2, through shuffled block tables (disjoint
// between the rows of a decode step): the output checked against the CPU backend's and a
// float64 reference (check_attn_row) for every value of every head of every row. The output
// is poisoned with NaN first (an unwritten value fails), nothing past it may change, nor any
// byte past the scratch the kernels were given; without that scratch the call fails and
// writes nothing.
void run_attn_case(const attn_case &c, int *refused_without_scratch) {
    enum { NL = 2, LAYER = 1, GUARD = 64 };
    const uint32_t nh = c.n_head_kv * c.group, hd = c.head_dim, q_dim = nh * hd;
    const size_t n_rows = c.pos.size(), n_out = n_rows * q_dim;
    std::vector<uint32_t> starts;
    const uint32_t nb = plan_tables(c.pos, c.prompt, c.bs_shift, starts) + 3;
    for (uint32_t type = 0; type < 3; type++) {
        pool p = make_pool(type, NL, c.n_head_kv, hd, c.bs_shift, nb);
        fill_pool_rows(p);
        p.kv.pool = p.host.data();
        uint8_t *base = nullptr;
        assert_int_equal(cudaMalloc(&base, p.bytes + c.pool_offset), cudaSuccess);
        assert_int_equal(cudaMemcpy(base + c.pool_offset, p.host.data(), p.bytes, cudaMemcpyHostToDevice), cudaSuccess);
        p.dev.pool = base + c.pool_offset;
        std::vector<uint32_t> tables(nb);
        shuffled_ids(tables.data(), nb);
        dev_step ds = put_step(c.pos, starts, tables);
        // a score scale larger than 1/sqrt(hd) so that the softmax is far from uniform
        const float scale = 4.0f / sqrtf((float)hd);
        const std::vector<float> q = rand_floats(n_out, -1.0f, 1.0f), poison(n_out + GUARD, NAN);
        float *qd = to_device(q.data(), n_out), *od = to_device(poison.data(), poison.size());

        const size_t need = llmm__cu_attention_scratch_bytes(n_rows, nh, hd, c.max_kv);
        // need covers every step of up to n_rows rows; this one may fill the device's SMs without
        // splitting its rows, and then runs without scratch (its result is checked below)
        if (need && llmm__cu_attention(nullptr, &p.dev, &ds.s, LAYER, qd, od, nh, c.window, scale, c.softcap, c.max_kv,
                                       nullptr, 0) != 0) {
            ++*refused_without_scratch;
            const std::vector<float> untouched = from_device(od, poison.size());
            for (size_t i = 0; i < poison.size(); i++)
                if (!isnan(untouched[i])) fail_msg("attention %s: a call without scratch wrote value %zu", c.name, i);
        }
        cudaMemcpy(od, poison.data(), poison.size() * sizeof(float), cudaMemcpyHostToDevice);
        const std::vector<uint8_t> fill(need + GUARD, 0xa5);
        uint8_t *scratch = to_device(fill.data(), fill.size());
        assert_int_equal(llmm__cu_attention(nullptr, &p.dev, &ds.s, LAYER, qd, od, nh, c.window, scale, c.softcap, c.max_kv,
                                      need ? scratch : nullptr, need),
                         0);
        const std::vector<float> got = from_device(od, poison.size());
        const std::vector<uint8_t> after = from_device(scratch, fill.size());
        for (size_t i = need; i < after.size(); i++)
            if (after[i] != 0xa5) fail_msg("attention %s: byte %zu past the scratch's %zu changed", c.name, i, need);
        for (size_t i = n_out; i < got.size(); i++)
            if (!isnan(got[i])) fail_msg("attention %s: value %zu past the output changed", c.name, i);

        std::vector<cpu_attn_row> rows(n_rows);
        for (size_t r = 0; r < n_rows; r++) {
            rows[r].kv = kv_layout_view(&p.kv, LAYER, tables.data() + starts[r]);
            rows[r].n_kv = (uint32_t)c.pos[r] + 1;
            rows[r].kv_start = c.window && rows[r].n_kv > c.window ? rows[r].n_kv - c.window : 0;
        }
        std::vector<float> cpu(n_out);
        cpu_attn_batch b;
        b.q = q.data();
        b.out = cpu.data();
        b.n_rows = n_rows;
        b.rows = rows.data();
        b.n_head = nh;
        b.n_head_kv = c.n_head_kv;
        b.head_dim = hd;
        b.scale = scale;
        b.softcap = c.softcap;
        assert_int_equal(llmm__cpu_attend((cpu_state *)g_cpu, &b), LLMM_OK);
        char what[160];
        snprintf(what, sizeof what, "%s, %s, %u heads over %u, head_dim %u, blocks of %u, row", c.name,
                 k_kv_names[type], nh, c.n_head_kv, hd, 1u << c.bs_shift);
        for (size_t r = 0; r < n_rows; r++)
            check_attn_row(p, LAYER, tables.data() + starts[r], c.pos[r], nh, c.window, scale, c.softcap,
                           &q[r * q_dim], &got[r * q_dim], &cpu[r * q_dim], what);
        cudaFree(qd);
        cudaFree(od);
        cudaFree(scratch);
        cudaFree(base);
        free_step(ds);
    }
}

// Query heads per K/V head 1, 2, 3, 4, 8 and 9 (two blocks of the group), head sizes 24 to 256
// (odd 33: value-by-value loads; 72: 18 lanes of 4), blocks of 1, 16 and 32 positions, rows of
// 1 to 3000 positions in one step: rows that fit one split (finished by it) beside rows over
// many splits (merged; as many as two blocks per SM of the emulated device, 132, ask for, none
// under 64 positions), a split of one position, windows across split boundaries,
// soft-capping; rows longer than max_kv (the last split runs several chunks); 100 rows, whose
// splits are longer than a chunk; prompt steps of one sequence; a pool that is not 16-byte
// aligned (narrower loads); all again on an emulated device of 16 SMs (an Orin). The scratch
// bytes only grow with the rows.
void test_attention(void **) {
    rng_seed(&g_rng, 91);
    std::vector<int32_t> many(100);
    for (int32_t &p : many) p = (int32_t)rng_below(&g_rng, 40);
    many[37] = 2999;
    std::vector<int32_t> prompt12, prompt5;
    for (int32_t i = 0; i < 12; i++) prompt12.push_back(18 + i);
    for (int32_t i = 0; i < 5; i++) prompt5.push_back(1000 + i);
    const attn_case cases[] = {
        {"decode, lengths 1 to 1500", 2, 4, 128, 4, 0, {0, 1499, 299, 256, 32}, 0, 0.0f, 1536, 0},
        {"decode, window 700, softcap 5", 1, 8, 256, 5, 0, {1199, 0, 699}, 700, 5.0f, 1300, 0},
        {"decode, one head a group, window 300", 3, 1, 64, 0, 0, {0, 1, 1024, 510}, 300, 0.0f, 1100, 0},
        {"decode, softcap 0.5", 3, 2, 72, 4, 0, {798, 4}, 0, 0.5f, 800, 0},
        {"decode, group of 3", 2, 3, 40, 5, 0, {0, 1399, 63}, 0, 5.0f, 1400, 0},
        {"decode, group of 9, window 250", 1, 9, 24, 4, 0, {599, 2}, 250, 0.0f, 600, 0},
        {"decode, one split, a row past max_kv", 2, 4, 128, 4, 0, {199, 0, 76, 300}, 0, 0.0f, 200, 0},
        {"decode, rows past max_kv", 1, 2, 64, 4, 0, {899, 100}, 0, 0.0f, 512, 0},
        {"decode, 100 rows", 1, 2, 33, 4, 0, many, 0, 0.0f, 3000, 0},
        {"prompt, window 9, softcap 0.5", 2, 4, 64, 4, 1, prompt12, 9, 0.5f, 64, 0},
        {"prompt, 5 rows of 1000", 2, 2, 128, 5, 1, prompt5, 0, 0.0f, 1024, 0},
        {"decode, pool 4 bytes off", 2, 4, 256, 4, 0, {700, 3}, 0, 0.0f, 800, 4},
        {"decode, one row", 2, 8, 128, 5, 0, {1500}, 0, 30.0f, 2048, 0},
    };
    int refused = 0;
    for (const attn_case &c : cases) run_attn_case(c, &refused);
    assert_true(refused > 0); // the splitting cases need their scratch
#if SIMT_EMULATED
    // an Orin's 16 SMs: fewer, longer splits for the same rows, the same results within bounds
    simt::set_device_attribute(cudaDevAttrMultiProcessorCount, 16);
    for (const attn_case &c : cases) run_attn_case(c, &refused);
    simt::set_device_attribute(cudaDevAttrMultiProcessorCount, 132);
#endif
    for (size_t kv = 1; kv < 5000; kv += 97)
        for (size_t n = 1; n < 300; n++)
            if (llmm__cu_attention_scratch_bytes(n, 8, 128, kv) < llmm__cu_attention_scratch_bytes(n - 1, 8, 128, kv))
                fail_msg("cu_attention_scratch_bytes(%zu rows, max_kv %zu) below %zu rows'", n, kv, n - 1);
}

/* ---------------------------------------------------------------- graph records (graph.cu) */

int count_runs(void *ctx, const cu_op *ops, size_t n_ops) {
    (void)ops, (void)n_ops;
    ++*(int *)ctx;
    return 0;
}

/* A record equal field by field to the one a graph was captured from replays that graph,
 * whatever its padding bytes hold (here 0xff: a record not built by cu_op_zero); one whose
 * float differs only in sign is another launch and is captured anew. */
void test_graph_record_fields(void **state) {
    (void)state;
    cudaStream_t stream = NULL;
    assert_int_equal(cudaStreamCreate(&stream), cudaSuccess);
    cu_graphs *g = cu_graphs_new(NULL);
    assert_non_null(g);
    cu_op a = cu_op_zero(7), b;
    a.u[1] = 3, a.n[2] = 5, a.p[0] = &a, a.f[3] = 0.0f;
    memset(&b, 0xff, sizeof b);
    b.kind = a.kind;
    memcpy(b.u, a.u, sizeof b.u);
    memcpy(b.n, a.n, sizeof b.n);
    memcpy(b.p, a.p, sizeof b.p);
    memcpy(b.f, a.f, sizeof b.f);
    int runs = 0;
    assert_int_equal(cu_graphs_run(g, stream, 1, &a, 1, count_runs, &runs), 0); /* captured */
    assert_int_equal(cu_graphs_run(g, stream, 1, &b, 1, count_runs, &runs), 0); /* replayed */
    cu_graph_counters counters;
    cu_graphs_get_counters(g, &counters);
    assert_int_equal(runs, 1);
    assert_int_equal(counters.replays, 1);
    b.f[3] = -0.0f;
    assert_int_equal(cu_graphs_run(g, stream, 1, &b, 1, count_runs, &runs), 0); /* captured anew */
    assert_int_equal(runs, 2);
    cu_graphs_free(g);
    cudaStreamDestroy(stream);
}

} // namespace

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rms_norm), cmocka_unit_test(test_elementwise), cmocka_unit_test(test_glu),
        cmocka_unit_test(test_rope),     cmocka_unit_test(test_kv_write),    cmocka_unit_test(test_softmax_merge),
        cmocka_unit_test(test_attention), cmocka_unit_test(test_graph_record_fields),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
