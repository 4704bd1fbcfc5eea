// The kernels of cuda/norm_rope_act.cu and cuda/attention.cu, run on the CPU by the SIMT
// emulation (tests/simt/simt.h), against the CPU backend's own implementations of the same ops
// and a float64 reference, on seeded random odd-sized data (never zero). Tolerances are
// tests/backend_conformance.c's for the same ops (cited at each check), measured against the
// float64 reference; the CPU backend passes the same bounds there, so device and CPU results
// lie within twice the bound of each other, which is checked too. Exact where the conformance
// test is exact (add, add_rows, scale) and where the formats allow (kv_write: the pool's bytes
// equal the CPU's for F32, F16 and Q8).
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

#include "kernels.h"

extern "C" {
#include "arch.h"
#include "backend.h"
#include "quant.h"

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
llmm_status cpu_attend(cpu_state *s, const cpu_attn_batch *b);
llmm_status cpu_rope_rows(float *x, size_t n_rows, size_t n_heads, size_t head_dim, const int32_t *pos,
                          const llmm_rope_params *rp);
llmm_status cpu_kv_store_rows(const llmm_kv_view *views, const int32_t *pos, size_t n_rows, const float *k,
                              const float *v, size_t kv_dim);
}

#define U_F32 (1.0 / 16777216.0) /* 2^-24 */

namespace {

void *g_cpu; // the CPU backend's state, one thread (its table's slots take host pointers)

// ------------------------------------------------------------------ random data, device memory

uint64_t g_rng;
void rng_seed(uint64_t s) { g_rng = s * 0x9e3779b97f4a7c15ull + 1; }
uint64_t rng_u64() {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return g_rng;
}
uint32_t rng_below(uint32_t n) { return (uint32_t)(rng_u64() % n); }
// Uniform in [lo, hi), never 0, so a value that is skipped or zeroed shows.
float rng_float(float lo, float hi) {
    for (;;) {
        const float f = lo + (hi - lo) * (float)((rng_u64() >> 40) * (1.0 / 16777216.0));
        if (f != 0.0f) return f;
    }
}
std::vector<float> rand_floats(size_t n, float lo, float hi) {
    std::vector<float> v(n);
    for (float &f : v) f = rng_float(lo, hi);
    return v;
}

template <class T> T *dev_put(const T *host, size_t n) {
    T *d = nullptr;
    assert_int_equal(cudaMalloc(&d, n * sizeof(T) + 1), cudaSuccess);
    assert_int_equal(cudaMemcpy(d, host, n * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
    return d;
}
template <class T> std::vector<T> dev_get(const T *dev, size_t n) {
    std::vector<T> v(n);
    assert_int_equal(cudaMemcpy(v.data(), dev, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
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
    return llmm_cpu_backend.init(&cfg, &g_cpu) == LLMM_OK ? 0 : -1;
}
int teardown(void **) {
    llmm_cpu_backend.shutdown(g_cpu);
    return 0;
}

// ------------------------------------------------------------------ rms_norm

// backend_conformance.c check_rms_norm: at most 7 float roundings, tolerance 10u |ref|.
void test_rms_norm(void **) {
    rng_seed(31);
    const size_t dims[] = {1, 7, 33, 173, 1001, 4099}, rows[] = {1, 3, 5};
    for (size_t di = 0; di < sizeof dims / sizeof *dims; di++)
        for (size_t ri = 0; ri < sizeof rows / sizeof *rows; ri++) {
            const size_t dim = dims[di], n_rows = rows[ri], n = dim * n_rows;
            const float eps = (di + ri) % 2 ? 1e-6f : 1e-5f;
            std::vector<float> x = rand_floats(n, -2.0f, 2.0f), w = rand_floats(dim, -2.0f, 2.0f), cpu(n);
            float *xd = dev_put(x.data(), n), *wd = dev_put(w.data(), dim), *od = nullptr;
            assert_int_equal(cudaMalloc(&od, n * sizeof(float)), cudaSuccess);
            assert_int_equal(cu_rms_norm(nullptr, xd, wd, od, n_rows, dim, eps), 0);
            const std::vector<float> got = dev_get(od, n);
            assert_int_equal(llmm_cpu_backend.rms_norm(g_cpu, x.data(), w.data(), cpu.data(), n_rows, dim, eps), LLMM_OK);
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
    rng_seed(72);
    for (size_t si = 0; si < sizeof k_elem_sizes / sizeof *k_elem_sizes; si++) {
        const size_t n = k_elem_sizes[si];
        const std::vector<float> a = rand_floats(n, -50.0f, 50.0f), b = rand_floats(n, -2.0f, 2.0f);
        float *bd = dev_put(b.data(), n);

        float *ad = dev_put(a.data(), n);
        std::vector<float> cpu = a;
        assert_int_equal(cu_add(nullptr, ad, bd, n), 0);
        assert_int_equal(llmm_cpu_backend.add(g_cpu, cpu.data(), b.data(), n), LLMM_OK);
        std::vector<float> got = dev_get(ad, n);
        for (size_t i = 0; i < n; i++)
            if (got[i] != cpu[i]) fail_msg("add value %zu: %.9g want %.9g", i, got[i], cpu[i]);
        cudaFree(ad);

        const float s = rng_float(-3.0f, 3.0f);
        ad = dev_put(a.data(), n);
        cpu = a;
        assert_int_equal(cu_scale(nullptr, ad, n, s), 0);
        assert_int_equal(llmm_cpu_backend.scale(g_cpu, cpu.data(), n, s), LLMM_OK);
        got = dev_get(ad, n);
        for (size_t i = 0; i < n; i++)
            if (got[i] != cpu[i]) fail_msg("scale value %zu: %.9g want %.9g", i, got[i], cpu[i]);
        cudaFree(ad);

        const float cap = si % 2 ? 30.0f : 5.0f;
        ad = dev_put(a.data(), n);
        cpu = a;
        assert_int_equal(cu_softcap(nullptr, ad, n, cap), 0);
        assert_int_equal(llmm_cpu_backend.softcap(g_cpu, cpu.data(), n, cap), LLMM_OK);
        got = dev_get(ad, n);
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
            float *xd = dev_put(x.data(), n), *bd = dev_put(bias.data(), dim);
            std::vector<float> cpu = x;
            assert_int_equal(cu_add_rows(nullptr, xd, bd, n_rows, dim), 0);
            assert_int_equal(llmm_cpu_backend.add_rows(g_cpu, cpu.data(), bias.data(), n_rows, dim), LLMM_OK);
            const std::vector<float> got = dev_get(xd, n);
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
    rng_seed(71);
    for (uint32_t act = 0; act < 2; act++)
        for (size_t si = 0; si < sizeof k_elem_sizes / sizeof *k_elem_sizes; si++) {
            const size_t n = k_elem_sizes[si];
            const float range = si % 2 ? 8.0f : 2.0f; // [-8, 8] saturates
            const std::vector<float> g = rand_floats(n, -range, range), up = rand_floats(n, -2.0f, 2.0f);
            float *gd_ = dev_put(g.data(), n), *ud = dev_put(up.data(), n);
            std::vector<float> cpu = g;
            assert_int_equal(cu_glu(nullptr, gd_, ud, n, act), 0);
            assert_int_equal(llmm_cpu_backend.glu(g_cpu, cpu.data(), up.data(), n, (llmm_activation)act), LLMM_OK);
            const std::vector<float> got = dev_get(gd_, n);
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
    rng_seed(61);
    const size_t shapes[][2] = {{8, 8}, {64, 64}, {10, 6}, {64, 32}, {2, 2}, {24, 24}, {12, 4}, {128, 128}};
    const float bases[] = {10000.0f, 1000000.0f};
    enum { N_ROWS = 7, N_HEADS = 3 };
    for (uint32_t kind = 0; kind < 2; kind++)
        for (size_t sh = 0; sh < sizeof shapes / sizeof *shapes; sh++)
            for (size_t bi = 0; bi < 2; bi++) {
                const size_t hd = shapes[sh][0], n_rot = shapes[sh][1], n = (size_t)N_ROWS * N_HEADS * hd;
                const int scaled = (int)((sh + bi) % 2); // freq factors, freq_scale, mscale
                const int32_t pos[N_ROWS] = {0, 1, 7, 101, 1023, 3999, (int32_t)(2 * rng_below(2000) + 1)};
                const std::vector<float> ff = rand_floats(n_rot / 2, 1.0f, 8.0f), x = rand_floats(n, -2.0f, 2.0f);
                float *xd = dev_put(x.data(), n), *ffd = dev_put(ff.data(), ff.size());
                int32_t *posd = dev_put(pos, N_ROWS);
                const float freq_scale = scaled ? 0.25f : 1.0f, mscale = scaled ? 1.25f : 1.0f;
                assert_int_equal(cu_rope(nullptr, xd, N_ROWS, N_HEADS, hd, posd, (uint32_t)n_rot, bases[bi], freq_scale,
                                         mscale, kind, scaled ? ffd : nullptr),
                                 0);
                const std::vector<float> y = dev_get(xd, n);
                llmm_rope_params rp;
                memset(&rp, 0, sizeof rp);
                rp.n_rot = (uint32_t)n_rot;
                rp.base = bases[bi];
                rp.freq_scale = freq_scale;
                rp.mscale = mscale;
                rp.kind = (llmm_rope_kind)kind;
                rp.freq_factors = scaled ? ff.data() : nullptr;
                std::vector<float> cpu = x;
                assert_int_equal(cpu_rope_rows(cpu.data(), N_ROWS, N_HEADS, hd, pos, &rp), LLMM_OK);
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
            const float f = rng_float(-2.0f, 2.0f);
            if (p.kv.type == LLMM_KV_F32) memcpy(row + 4 * e, &f, 4);
            else if (p.kv.type == LLMM_KV_F16) {
                const llmm_f16 h = llmm_f32_to_f16(f);
                memcpy(row + 2 * e, &h, 2);
            } else row[4 + e] = (uint8_t)(int8_t)((int)rng_below(255) - 127);
        }
        if (p.kv.type == LLMM_KV_Q8) {
            const float scale = rng_float(0.004f, 0.016f);
            memcpy(row, &scale, 4);
        }
    }
}

void shuffled_ids(uint32_t *ids, uint32_t n) {
    for (uint32_t i = 0; i < n; i++) ids[i] = i;
    for (uint32_t i = n - 1; i > 0; i--) std::swap(ids[i], ids[rng_below(i + 1)]);
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
    d.pos = dev_put(pos.data(), pos.size());
    d.starts = dev_put(starts.data(), starts.size());
    d.tables = dev_put(tables.data(), tables.size());
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

// kv_write of each KV type, head_dim 11 (odd: Q8 rows end in padding): a decode step of 4
// sequences at different positions (layer 1) and a prompt step of 5 consecutive positions of
// one sequence (layer 0), through shuffled, disjoint block tables, into a pool of random bytes;
// the whole pool afterwards byte for byte the CPU's (cpu_kv_store_rows on the same bytes).
void test_kv_write(void **) {
    rng_seed(81);
    enum { NL = 2, NHKV = 3, HD = 11, KVD = NHKV * HD, BS_SHIFT = 2, NB = 16 };
    for (uint32_t type = 0; type < 3; type++) {
        pool p = make_pool(type, NL, NHKV, HD, BS_SHIFT, NB);
        for (uint8_t &b : p.host) b = (uint8_t)rng_u64();
        uint32_t perm[NB];
        shuffled_ids(perm, NB);
        for (int prompt = 0; prompt < 2; prompt++) {
            std::vector<int32_t> pos;
            std::vector<uint32_t> starts, tables(perm, perm + NB);
            if (prompt) pos = {2, 3, 4, 5, 6}, starts.assign(5, 10);
            else pos = {0, 5, 9, 14}, starts = {0, 1, 3, 6};
            const uint32_t layer = prompt ? 0 : 1;
            const size_t n_rows = pos.size();
            const std::vector<float> k = rand_floats(n_rows * KVD, -3.0f, 3.0f), v = rand_floats(n_rows * KVD, -3.0f, 3.0f);
            dev_step ds = put_step(pos, starts, tables);
            p.dev.pool = dev_put(p.host.data(), p.bytes);
            float *kd = dev_put(k.data(), k.size()), *vd = dev_put(v.data(), v.size());
            assert_int_equal(cu_kv_write(nullptr, &p.dev, &ds.s, layer, kd, vd), 0);
            assert_int_not_equal(cu_kv_write(nullptr, &p.dev, &ds.s, NL, kd, vd), 0);
            const std::vector<uint8_t> got = dev_get(p.dev.pool, p.bytes);
            p.kv.pool = p.host.data();
            std::vector<llmm_kv_view> views(n_rows);
            for (size_t r = 0; r < n_rows; r++) views[r] = kv_layout_view(&p.kv, layer, perm + starts[r]);
            assert_int_equal(cpu_kv_store_rows(views.data(), pos.data(), n_rows, k.data(), v.data(), KVD), LLMM_OK);
            for (size_t i = 0; i < p.bytes; i++)
                if (got[i] != p.host[i])
                    fail_msg("kv_write %s %s: pool byte %zu (row %zu, byte %zu of it) is %u, the CPU's %u",
                             k_kv_names[type], prompt ? "prompt" : "decode", i, i / p.kv.row_bytes,
                             i % p.kv.row_bytes, got[i], p.host[i]);
            cudaFree(kd);
            cudaFree(vd);
            cudaFree(p.dev.pool);
            free_step(ds);
        }
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
            return llmm_f16_to_f32(h);
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
            if (fabs(got[i] - ref) > tol || fabs(got[i] - cpu[i]) > 2 * tol)
                fail_msg("attention %s: pos %d head %u value %zu: device %.9g cpu %.9g ref %.9g tol %.3g", what, pos,
                         h, d, got[i], cpu[i], ref, tol);
        }
    }
}

struct attn_case {
    const char *name;
    int32_t first_pos;  // a prompt step: rows at first_pos .. first_pos + n_rows - 1 of one sequence
    std::vector<int32_t> pos; // else a decode step: one sequence a row, at these positions
    uint32_t window;
    float softcap;
};

// Attention of each KV type, GQA (4 query heads over 2 K/V heads), head sizes 24 and 64, in
// layer 1 of 2, through shuffled, disjoint block tables of 16-position blocks: decode steps of
// sequences of different lengths (1 to 38 positions), with a sliding window, soft-capped; a
// prompt step of 12 causal rows of one sequence; sequences of 650 and 700 positions (three
// chunks of the kernel's online softmax), plain and with a window across a chunk boundary;
// sequences that end on and just past a 256-position chunk.
void test_attention(void **) {
    rng_seed(91);
    enum { NL = 2, NH = 4, NHKV = 2, BS_SHIFT = 4, NB = 96, LAYER = 1 };
    const attn_case cases[] = {
        {"decode", -1, {0, 8, 37, 20}, 0, 0.0f},
        {"decode window 5", -1, {0, 8, 37, 20}, 5, 0.0f},
        {"decode softcap", -1, {3, 16, 33, 1}, 0, 0.5f},
        {"prompt", 18, {}, 0, 0.0f},
        {"prompt window 9 softcap", 18, {}, 9, 0.5f},
        {"long", -1, {699, 649}, 0, 0.0f},
        {"long window 300 softcap", -1, {699, 649}, 300, 5.0f},
        {"chunk edges", -1, {255, 256, 512}, 0, 0.0f},
    };
    const uint32_t hds[] = {24, 64};
    for (uint32_t type = 0; type < 3; type++)
        for (uint32_t hi = 0; hi < 2; hi++) {
            const uint32_t hd = hds[hi], q_dim = NH * hd;
            pool p = make_pool(type, NL, NHKV, hd, BS_SHIFT, NB);
            fill_pool_rows(p);
            p.kv.pool = p.host.data();
            p.dev.pool = dev_put(p.host.data(), p.bytes);
            uint32_t perm[NB];
            shuffled_ids(perm, NB);
            for (const attn_case &c : cases) {
                std::vector<int32_t> pos;
                std::vector<uint32_t> starts;
                if (c.first_pos >= 0)
                    for (int32_t i = 0; i < 12; i++) pos.push_back(c.first_pos + i), starts.push_back(0);
                else {
                    uint32_t next = 0;
                    for (int32_t ps : c.pos) {
                        starts.push_back(next);
                        next += ((uint32_t)ps >> BS_SHIFT) + 1;
                    }
                    assert_true(next <= NB);
                }
                if (c.first_pos < 0) pos = c.pos;
                const std::vector<uint32_t> tables(perm, perm + NB);
                const size_t n_rows = pos.size();
                // a score scale larger than 1/sqrt(hd) so that the softmax is far from uniform
                const float scale = 4.0f / sqrtf((float)hd);
                const std::vector<float> q = rand_floats(n_rows * q_dim, -1.0f, 1.0f);
                dev_step ds = put_step(pos, starts, tables);
                float *qd = dev_put(q.data(), q.size()), *od = nullptr;
                assert_int_equal(cudaMalloc(&od, q.size() * sizeof(float)), cudaSuccess);
                assert_int_equal(cu_attention(nullptr, &p.dev, &ds.s, LAYER, qd, od, NH, c.window, scale, c.softcap), 0);
                const std::vector<float> got = dev_get(od, q.size());

                std::vector<cpu_attn_row> rows(n_rows);
                for (size_t r = 0; r < n_rows; r++) {
                    rows[r].kv = kv_layout_view(&p.kv, LAYER, perm + starts[r]);
                    rows[r].n_kv = (uint32_t)pos[r] + 1;
                    rows[r].kv_start = c.window && rows[r].n_kv > c.window ? rows[r].n_kv - c.window : 0;
                }
                std::vector<float> cpu(q.size());
                cpu_attn_batch b;
                b.q = q.data();
                b.out = cpu.data();
                b.n_rows = n_rows;
                b.rows = rows.data();
                b.n_head = NH;
                b.n_head_kv = NHKV;
                b.head_dim = hd;
                b.scale = scale;
                b.softcap = c.softcap;
                assert_int_equal(cpu_attend((cpu_state *)g_cpu, &b), LLMM_OK);
                char what[96];
                snprintf(what, sizeof what, "%s, %s, head_dim %u, row", c.name, k_kv_names[type], hd);
                for (size_t r = 0; r < n_rows; r++)
                    check_attn_row(p, LAYER, perm + starts[r], pos[r], NH, c.window, scale, c.softcap,
                                   &q[r * q_dim], &got[r * q_dim], &cpu[r * q_dim], what);
                cudaFree(qd);
                cudaFree(od);
                free_step(ds);
            }
            cudaFree(p.dev.pool);
        }
}

} // namespace

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rms_norm), cmocka_unit_test(test_elementwise), cmocka_unit_test(test_glu),
        cmocka_unit_test(test_rope),     cmocka_unit_test(test_kv_write),    cmocka_unit_test(test_attention),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
