// simt_profile.cpp: the memory-transaction counters (what is counted, and how a warp-level
// request is formed: simt_profile.h). Linked into the profiled build only, and compiled WITHOUT
// the coverage instrumentation, so that its own accesses are not counted.
//
// Per kernel (aggregated over the launches of one function since the last reset) the counters
// are read in process through simt_profile_counters(), or written as JSON lines by
// simt_profile_write() (tests/cuda/profile_step.c, through the profiled module).
#include <dlfcn.h>
#include <link.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "simt.h"
#include "simt_profile_counters.h"

namespace simt {
namespace profile {
namespace {

enum Space : unsigned char { space_global, space_shared };

struct RequestKey {
    unsigned warp;
    unsigned occurrence;
    uintptr_t pc;
    bool operator==(const RequestKey &o) const {
        return warp == o.warp && occurrence == o.occurrence && pc == o.pc;
    }
};
struct RequestKeyHash {
    size_t operator()(const RequestKey &k) const {
        return std::hash<uintptr_t>()(k.pc * 0x9e3779b97f4a7c15ull ^ ((uintptr_t)k.warp << 40) ^
                                      k.occurrence);
    }
};

// One warp-level request: the address each participating lane accessed.
struct Request {
    Space space;
    bool store;
    bool cp_async; // a cp.async's global read (its shared write is not a request of the LSU)
    unsigned char width;
    unsigned char lanes;
    uintptr_t address[32];
};

struct Access {
    uintptr_t pc, address;
    unsigned occurrence;
    unsigned char width;
    bool store;
};
constexpr size_t recent_accesses = 32;

// Block sampling (simt_profile_set_block_sampling): a launch of many blocks runs a fixed subset
// of them, chosen per grid dimension (plan_dimension): the first and the last index of each
// dimension (a partial tile, a causal mask's ends) always, and between them pairs of neighbours,
// about one index in `stride`. The grid is the product of the dimensions' choices, so that
// blocks differing in one coordinate only are there to tell which coordinates an access site
// depends on. Each index has two weights, multiplied over the dimensions:
//   counts  (requests, sectors and bytes per request, wavefronts) what the block's counts stand
//           for: 1 on the edges, (interior indices / pair indices run) inside;
//   launch sectors  the distinct sectors the block adds to those of its predecessor along the
//           dimension: the launch's distinct sectors are those of index 0 plus, for each index
//           after it, the ones its predecessor did not touch, when every sector is touched by a
//           run of consecutive indices (tiles sharing the sector at their boundary, a causal
//           prompt's keys, operands every block reads). The second index of a pair measures that
//           (weight: interior indices / pairs), the first is only its predecessor (weight 0).
// The index before the last runs too, as the last one's predecessor; where no pair holds it, its
// counts weigh 0 (it would stand off-centre for the interior).
struct Sampling {
    unsigned stride = 1;   // about one block in `stride` runs; 1: all
    // launch names (as SIMT_LAUNCH spelled them) that always run whole: kernels whose addresses
    // depend on data (an embedding's gather by token), which no subset of blocks stands for
    std::vector<std::string> whole;
    bool active = false;   // the launch in progress is sampled
    bool sampled[3] = {false, false, false}; // per dimension
    unsigned grid[3] = {1, 1, 1};
    std::vector<unsigned char> chosen[3]; // per dimension and index: whether it runs
    std::vector<double> count_weight[3], sector_weight[3];
};
// A launch of fewer blocks runs whole: it would gain little (a sampled dimension runs at least
// its edges, a pair and the last index's predecessor).
constexpr unsigned long long sampled_launch_min_blocks = 32;

// The counts of one class of sampled blocks (which dimensions' indices are interior: bit d), to
// be weighted at the launch's end; unsampled launches have one class of weight 1.
struct Tally {
    simt_kernel_counters c{};
    std::vector<simt_site_counters> sites; // indexed as the kernel's sites
};
constexpr unsigned weight_classes = 8;

// A distinct global sector of the launch: the first block that touched it (blocks run in the
// order of their linear index), and the site.
struct SectorNote {
    unsigned block[3];
    size_t site;
};

struct Profiler {
    // where a kernel's accesses count: sorted [start, end) ranges
    std::vector<std::pair<uintptr_t, uintptr_t>> device;
    uintptr_t static_shared_lo = 0, static_shared_hi = 0;
    uintptr_t dynamic_lo = 0, dynamic_hi = 0;
    bool active = false;
    simt_kernel_counters *current = nullptr;
    // per thread of the block: how often it has executed each instruction
    std::vector<std::unordered_map<uintptr_t, unsigned>> occurrences;
    // per thread: its last counted accesses, which a vector type's copy merges into one
    std::vector<std::vector<Access>> recent;
    std::unordered_map<RequestKey, Request, RequestKeyHash> requests;
    // the distinct global sectors of the launch in progress: its traffic when caches keep
    // whatever one launch reads more than once
    std::unordered_map<uintptr_t, SectorNote> launch_sectors;
    Sampling sampling;
    Tally tallies[weight_classes + 1]; // the last: blocks whose counts weigh 0
    unsigned block_class = 0; // of the block in progress
    // per sampled block of the launch: a fingerprint of the sectors each global site touched
    std::vector<std::pair<uint3, std::unordered_map<size_t, uint64_t>>> block_prints;
    std::map<const void *, simt_kernel_counters> kernels;
    // per kernel: its access sites, and where each pc is among them
    std::map<const void *, std::vector<simt_site_counters>> sites;
    std::map<const void *, std::unordered_map<uintptr_t, size_t>> site_index;
    std::vector<const void *> order; // kernels in the order of their first launch
};

Profiler &profiler() {
    static Profiler p;
    return p;
}

// The writable data of the object holding the kernels (this file is linked into it): where the
// emulation's static __shared__ arrays, function-local statics, live.
int find_writable_segment(struct dl_phdr_info *info, size_t, void *arg) {
    auto *p = static_cast<Profiler *>(arg);
    Dl_info self;
    if (!dladdr(reinterpret_cast<void *>(&find_writable_segment), &self) ||
        info->dlpi_addr != reinterpret_cast<uintptr_t>(self.dli_fbase))
        return 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) &h = info->dlpi_phdr[i];
        if (h.p_type != PT_LOAD || !(h.p_flags & PF_W))
            continue;
        uintptr_t lo = info->dlpi_addr + h.p_vaddr;
        if (!p->static_shared_lo || lo < p->static_shared_lo)
            p->static_shared_lo = lo;
        p->static_shared_hi = std::max(p->static_shared_hi, lo + h.p_memsz);
    }
    return 1;
}

void snapshot_device_ranges(Profiler &p) {
    p.device.clear();
    detail::memory_registry &m = detail::memory();
    std::lock_guard<std::mutex> hold(m.lock);
    for (const auto &r : m.device)
        p.device.emplace_back(r.first, r.first + (r.second ? r.second : 1));
}

bool in_device(const Profiler &p, uintptr_t a) {
    auto it = std::upper_bound(p.device.begin(), p.device.end(), std::make_pair(a, UINTPTR_MAX));
    return it != p.device.begin() && a < (it - 1)->second;
}

size_t site_of(Profiler &p, uintptr_t pc, const Request &r) {
    const void *k = p.current->kernel;
    std::vector<simt_site_counters> &sites = p.sites[k];
    auto found = p.site_index[k].emplace(pc, sites.size());
    if (found.second) {
        simt_site_counters s{};
        s.pc = reinterpret_cast<const void *>(pc);
        s.shared = r.space == space_shared;
        s.store = r.store;
        s.cp_async = r.cp_async;
        s.width = r.width;
        sites.push_back(s);
    }
    return found.first->second;
}

// The tally's copy of the kernel's site `index`, its counts from zero.
simt_site_counters &tally_site(Profiler &p, Tally &t, size_t index) {
    const std::vector<simt_site_counters> &sites = p.sites[p.current->kernel];
    while (t.sites.size() <= index) {
        simt_site_counters s = sites[t.sites.size()];
        s.requests = s.sectors = s.bytes = s.wavefronts = s.ideal_wavefronts = 0;
        t.sites.push_back(s);
    }
    return t.sites[index];
}

uint64_t mix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

void note_sector(Profiler &p, uintptr_t sector, size_t site, const uint3 &block) {
    p.launch_sectors.emplace(sector, SectorNote{{block.x, block.y, block.z}, site});
}

void count_global(Profiler &p, simt_kernel_counters &c, const Request &r, simt_site_counters &site,
                  size_t site_index, const uint3 &block, uint64_t &print) {
    std::vector<uintptr_t> sectors, bytes;
    for (unsigned i = 0; i < r.lanes; i++) {
        for (uintptr_t s = r.address[i] / 32; s <= (r.address[i] + r.width - 1) / 32; s++)
            sectors.push_back(s);
        for (unsigned b = 0; b < r.width; b++)
            bytes.push_back(r.address[i] + b);
    }
    std::sort(sectors.begin(), sectors.end());
    std::sort(bytes.begin(), bytes.end());
    unsigned long long n_sectors = std::unique(sectors.begin(), sectors.end()) - sectors.begin();
    for (unsigned long long i = 0; i < n_sectors; i++) {
        note_sector(p, sectors[i], site_index, block);
        print += mix64(sectors[i]);
    }
    unsigned long long n_bytes = std::unique(bytes.begin(), bytes.end()) - bytes.begin();
    site.requests++;
    site.sectors += n_sectors;
    site.bytes += n_bytes;
    if (r.store) {
        c.global_store_requests++;
        c.global_store_sectors += n_sectors;
        c.global_store_bytes += n_bytes;
    } else if (r.cp_async) {
        c.cp_async_requests++;
        c.cp_async_bytes += n_bytes;
        c.cp_async_sectors += n_sectors;
    } else {
        c.global_load_requests++;
        c.global_load_sectors += n_sectors;
        c.global_load_bytes += n_bytes;
        unsigned w = r.width;
        c.global_load_requests_by_width[w >= 16 ? 4 : w >= 8 ? 3 : w >= 4 ? 2 : w >= 2 ? 1 : 0]++;
    }
}

struct Wavefronts {
    unsigned long long taken, ideal;
};

// Distinct 4-byte words per bank, the largest over the banks, summed over the phases a wide
// access is split into (8 bytes: half warps, 16 bytes: quarter warps); ideal: what the phases'
// distinct words would take with no two in one bank, ceil(words / 32) each.
Wavefronts shared_wavefronts(const Request &r) {
    unsigned lanes_per_phase = r.width >= 16 ? 8 : r.width >= 8 ? 16 : 32;
    std::vector<std::pair<unsigned, uintptr_t>> bank_words;
    Wavefronts total{0, 0};
    for (unsigned first = 0; first < r.lanes; first += lanes_per_phase) {
        bank_words.clear();
        for (unsigned i = first; i < r.lanes && i < first + lanes_per_phase; i++)
            for (uintptr_t w = r.address[i] / 4; w <= (r.address[i] + r.width - 1) / 4; w++)
                bank_words.emplace_back((unsigned)(w % 32), w);
        std::sort(bank_words.begin(), bank_words.end());
        bank_words.erase(std::unique(bank_words.begin(), bank_words.end()), bank_words.end());
        unsigned most = 0, run = 0;
        for (size_t i = 0; i < bank_words.size(); i++) {
            run = i && bank_words[i].first == bank_words[i - 1].first ? run + 1 : 1;
            most = std::max(most, run);
        }
        total.taken += most;
        total.ideal += (bank_words.size() + 31) / 32;
    }
    return total;
}

// A cp.async's write into shared memory is no load/store instruction of its own: its
// wavefronts are kept at its site only, out of the kernel's shared-memory store counts.
void count_shared(simt_kernel_counters &c, const Request &r, simt_site_counters &site) {
    const Wavefronts w = shared_wavefronts(r);
    site.requests++;
    site.wavefronts += w.taken;
    site.ideal_wavefronts += w.ideal;
    if (r.cp_async)
        return;
    if (r.store) {
        c.shared_store_requests++;
        c.shared_store_wavefronts += w.taken;
    } else {
        c.shared_load_requests++;
        c.shared_load_wavefronts += w.taken;
    }
}

void record(uintptr_t address, unsigned width, bool store, uintptr_t pc, bool cp_async = false) {
    Profiler &p = profiler();
    detail::Launch *L = detail::g_launch;
    if (!p.active || !L || !L->current)
        return;
    Space space;
    if (address >= p.dynamic_lo && address < p.dynamic_hi)
        space = space_shared;
    else if (address >= p.static_shared_lo && address < p.static_shared_hi)
        space = space_shared;
    else if (in_device(p, address))
        space = space_global;
    else
        return; // the thread's own stack (registers, local memory) or the emulator's state
    unsigned tid = (unsigned)(L->current - L->threads.data());
    unsigned occurrence = p.occurrences[tid][pc]++;
    Request &r = p.requests[RequestKey{tid / 32, occurrence, pc}];
    if (r.lanes == 0) {
        r.space = space;
        r.store = store;
        r.width = (unsigned char)width;
        r.cp_async = cp_async;
    }
    if (r.lanes < 32)
        r.address[r.lanes++] = address;
    std::vector<Access> &recent = p.recent[tid];
    if (recent.size() == recent_accesses)
        recent.erase(recent.begin());
    recent.push_back(Access{pc, address, occurrence, (unsigned char)width, store});
}

// Takes back the accesses of the current thread inside [lo, lo + bytes), as if never made.
void unrecord(Profiler &p, unsigned tid, uintptr_t lo, unsigned bytes, bool store) {
    std::vector<Access> &recent = p.recent[tid];
    for (size_t i = recent.size(); i-- > 0;) {
        const Access a = recent[i];
        if (a.store != store || a.address < lo || a.address + a.width > lo + bytes)
            continue;
        recent.erase(recent.begin() + (ptrdiff_t)i);
        p.occurrences[tid][a.pc]--;
        auto it = p.requests.find(RequestKey{tid / 32, a.occurrence, a.pc});
        if (it == p.requests.end())
            continue;
        Request &r = it->second;
        for (unsigned l = 0; l < r.lanes; l++)
            if (r.address[l] == a.address) {
                r.address[l] = r.address[--r.lanes];
                break;
            }
        if (r.lanes == 0)
            p.requests.erase(it);
    }
}

// A site as its object file and offset, for addr2line.
void write_sites(FILE *f, const std::vector<simt_site_counters> &sites) {
    std::fprintf(f, "\"sites\": [");
    for (size_t i = 0; i < sites.size(); i++) {
        const simt_site_counters &s = sites[i];
        Dl_info info;
        uintptr_t offset = reinterpret_cast<uintptr_t>(s.pc);
        const char *object = "";
        if (dladdr(s.pc, &info) && info.dli_fname) {
            offset -= reinterpret_cast<uintptr_t>(info.dli_fbase);
            object = info.dli_fname;
        }
        std::fprintf(f,
                     "%s{\"object\": \"%s\", \"offset\": %llu, \"space\": \"%s\", \"store\": %d, "
                     "\"cp_async\": %d, \"width\": %u, \"requests\": %llu, \"sectors\": %llu, "
                     "\"bytes\": %llu, \"wavefronts\": %llu, \"ideal_wavefronts\": %llu}",
                     i ? ", " : "", object, (unsigned long long)offset, s.shared ? "shared" : "global",
                     s.store, s.cp_async, s.width, s.requests, s.sectors, s.bytes, s.wavefronts,
                     s.ideal_wavefronts);
    }
    std::fprintf(f, "]}\n");
}

void write_counters(FILE *f) {
    Profiler &p = profiler();
    for (const void *k : p.order) {
        const simt_kernel_counters &c = p.kernels[k];
        Dl_info info;
        uintptr_t offset = 0;
        const char *object = "";
        if (dladdr(k, &info) && info.dli_fname) {
            offset = reinterpret_cast<uintptr_t>(k) - reinterpret_cast<uintptr_t>(info.dli_fbase);
            object = info.dli_fname;
        }
        std::fprintf(f,
                     "{\"launch_name\": \"%s\", \"object\": \"%s\", \"offset\": %llu, "
                     "\"launches\": %llu, \"blocks\": %llu, \"blocks_run\": %llu, \"warps\": %llu, "
                     "\"threads_per_block\": %u, \"dynamic_shared_max\": %llu, "
                     "\"global_load_requests\": %llu, \"global_load_sectors\": %llu, "
                     "\"global_load_bytes\": %llu, \"global_store_requests\": %llu, "
                     "\"global_store_sectors\": %llu, \"global_store_bytes\": %llu, "
                     "\"global_load_requests_by_width\": [%llu, %llu, %llu, %llu, %llu], "
                     "\"shared_load_requests\": %llu, \"shared_load_wavefronts\": %llu, "
                     "\"shared_store_requests\": %llu, \"shared_store_wavefronts\": %llu, "
                     "\"cp_async_requests\": %llu, \"cp_async_bytes\": %llu, \"cp_async_sectors\": %llu, "
                     "\"global_launch_sectors\": %llu, ",
                     c.launch_name, object, (unsigned long long)offset, c.launches, c.blocks,
                     c.blocks_run, c.warps, c.threads_per_block, c.dynamic_shared_max, c.global_load_requests, c.global_load_sectors, c.global_load_bytes,
                     c.global_store_requests, c.global_store_sectors, c.global_store_bytes,
                     c.global_load_requests_by_width[0], c.global_load_requests_by_width[1],
                     c.global_load_requests_by_width[2], c.global_load_requests_by_width[3],
                     c.global_load_requests_by_width[4], c.shared_load_requests,
                     c.shared_load_wavefronts, c.shared_store_requests, c.shared_store_wavefronts,
                     c.cp_async_requests, c.cp_async_bytes, c.cp_async_sectors, c.global_launch_sectors);
        write_sites(f, p.sites[k]);
    }
}

int write_counters_to(const char *path) {
    FILE *f = std::fopen(path, "w");
    if (!f)
        return -1;
    write_counters(f);
    return std::fclose(f) == 0 ? 0 : -1;
}

// Van der Corput's radical inverse of k in base 2: offsets spread evenly over [0, 1).
double radical_inverse(unsigned k) {
    double v = 0, f = 0.5;
    for (; k; k >>= 1, f *= 0.5)
        v += (k & 1) * f;
    return v;
}

// One dimension's plan (struct Sampling): every index when the dimension has no interior or no
// stride; else the edges, and pairs at the centres of equal runs of the interior, moved by
// offsets of opposite signs in turn (radical_inverse), which cancel in the mean, so that counts
// growing linearly along the dimension average out, but differ, so that the pairs do not all
// meet one phase of a pattern that repeats along the dimension (34-byte blocks meeting 32-byte
// sectors every 16 indices). The index before the last runs too, as its predecessor. Returns the
// blocks the dimension stands for per block it runs.
double plan_dimension(unsigned size, unsigned stride, std::vector<unsigned char> &chosen,
                      std::vector<double> &count_weight, std::vector<double> &sector_weight) {
    chosen.assign(size, 1);
    count_weight.assign(size, 1);
    sector_weight.assign(size, 1);
    if (size <= 4 || stride <= 1)
        return 0;
    const unsigned interior = size - 2;
    const unsigned pairs = std::max(1u, (unsigned)std::lround((double)interior / (2.0 * stride)));
    const double run = (double)interior / pairs;
    std::vector<unsigned char> second(size, 0);
    std::fill(chosen.begin() + 1, chosen.end() - 1, 0);
    for (unsigned j = 0; j < pairs; j++) {
        const bool cancelled = pairs % 2 == 1 && j == pairs - 1; // the odd one out stays centred
        const double offset = cancelled ? 0 : (j % 2 ? -1 : 1) * radical_inverse(j / 2 + 1) * (run / 2 - 1);
        const double centre = (j + 0.5) * run - 0.5 + offset;
        // interior positions 0 .. interior - 1 are indices 1 .. size - 2
        const unsigned first = (unsigned)std::min((double)interior - 2, std::max(0.0, std::floor(centre)));
        chosen[1 + first] = chosen[2 + first] = 1;
        second[2 + first] = 1;
    }
    unsigned picked = 0, seconds = 0;
    for (unsigned i = 1; i + 1 < size; i++)
        picked += chosen[i], seconds += second[i];
    for (unsigned i = 1; i + 1 < size; i++) {
        count_weight[i] = chosen[i] ? (double)interior / picked : 0;
        sector_weight[i] = second[i] ? (double)interior / seconds : 0;
    }
    if (!chosen[size - 2]) // the last index's predecessor, run for its sectors alone
        chosen[size - 2] = 1, count_weight[size - 2] = 0, sector_weight[size - 2] = 0;
    unsigned runs = 0;
    for (unsigned char c : chosen)
        runs += c;
    return (double)size / runs;
}

// Which blocks of the launch run: the largest dimension takes the stride, and whatever part of
// it the edges leave unreached goes to the next.
void plan_sampling(Sampling &s, const char *name, dim3 grid) {
    s.grid[0] = grid.x, s.grid[1] = grid.y, s.grid[2] = grid.z;
    const unsigned long long blocks = (unsigned long long)grid.x * grid.y * grid.z;
    s.active = s.stride > 1 && blocks >= sampled_launch_min_blocks &&
               std::find(s.whole.begin(), s.whole.end(), name) == s.whole.end();
    unsigned dims[3] = {0, 1, 2};
    std::stable_sort(dims, dims + 3, [&](unsigned a, unsigned b) { return s.grid[a] > s.grid[b]; });
    double left = s.active ? s.stride : 1;
    for (unsigned d : dims) {
        const double ratio = plan_dimension(s.grid[d], left >= 2 ? (unsigned)left : 1, s.chosen[d],
                                            s.count_weight[d], s.sector_weight[d]);
        s.sampled[d] = ratio > 0;
        if (ratio > 0)
            left /= ratio;
    }
}

// The weight of a block's counts, and its class: which dimensions' weights are not 1 (bit d), or
// weight_classes when it is 0 (a predecessor run for its sectors alone).
double count_weight_of(const Sampling &s, const uint3 &block, unsigned &weight_class) {
    const unsigned at[3] = {block.x, block.y, block.z};
    double w = 1;
    weight_class = 0;
    for (unsigned d = 0; d < 3; d++) {
        if (!s.sampled[d] || s.count_weight[d][at[d]] == 1)
            continue;
        w *= s.count_weight[d][at[d]];
        weight_class |= 1u << d;
    }
    if (w == 0)
        weight_class = weight_classes;
    return w;
}

double class_weight(const Sampling &s, unsigned c) {
    // every block of a class has the same weight: dimension d's interior one where bit d is set
    double w = 1;
    for (unsigned d = 0; d < 3; d++)
        if (c & (1u << d)) {
            for (size_t i = 1; i + 1 < s.count_weight[d].size(); i++)
                if (s.count_weight[d][i] != 0) {
                    w *= s.count_weight[d][i];
                    break;
                }
        }
    return w;
}

unsigned long long scaled(unsigned long long count, double weight) {
    return (unsigned long long)std::llround((double)count * weight);
}

void add_scaled(simt_kernel_counters &to, const simt_kernel_counters &from, double w) {
    static unsigned long long simt_kernel_counters::*const fields[] = {
        &simt_kernel_counters::global_load_requests,  &simt_kernel_counters::global_load_sectors,
        &simt_kernel_counters::global_load_bytes,     &simt_kernel_counters::global_store_requests,
        &simt_kernel_counters::global_store_sectors,  &simt_kernel_counters::global_store_bytes,
        &simt_kernel_counters::shared_load_requests,  &simt_kernel_counters::shared_load_wavefronts,
        &simt_kernel_counters::shared_store_requests, &simt_kernel_counters::shared_store_wavefronts,
        &simt_kernel_counters::cp_async_requests,     &simt_kernel_counters::cp_async_bytes,
        &simt_kernel_counters::cp_async_sectors,
    };
    for (auto f : fields)
        to.*f += scaled(from.*f, w);
    for (unsigned i = 0; i < 5; i++)
        to.global_load_requests_by_width[i] += scaled(from.global_load_requests_by_width[i], w);
}

void add_scaled(simt_site_counters &to, const simt_site_counters &from, double w) {
    to.requests += scaled(from.requests, w);
    to.sectors += scaled(from.sectors, w);
    to.bytes += scaled(from.bytes, w);
    to.wavefronts += scaled(from.wavefronts, w);
    to.ideal_wavefronts += scaled(from.ideal_wavefronts, w);
}

// The dimensions each global site's sectors depend on: those along which two sampled blocks
// equal in the other coordinates touched different sectors (by their fingerprints; a site a
// block never reached counts as an empty set).
std::vector<unsigned char> site_dimensions(const Profiler &p, size_t n_sites) {
    std::vector<unsigned char> dims(n_sites, 0);
    for (unsigned d = 0; d < 3; d++) {
        if (!p.sampling.sampled[d])
            continue;
        std::map<std::tuple<size_t, unsigned, unsigned>, uint64_t> seen;
        for (const auto &b : p.block_prints) {
            const unsigned at[3] = {b.first.x, b.first.y, b.first.z};
            const unsigned o1 = at[(d + 1) % 3], o2 = at[(d + 2) % 3];
            for (size_t site = 0; site < n_sites; site++) {
                auto it = b.second.find(site);
                const uint64_t print = it == b.second.end() ? 0 : it->second;
                auto found = seen.emplace(std::make_tuple(site, o1, o2), print);
                if (!found.second && found.first->second != print)
                    dims[site] |= (unsigned char)(1u << d);
            }
        }
    }
    return dims;
}

// The launch's distinct sectors. Unsampled, the count of them. Sampled, each sector the blocks
// that ran touched counts by its first block's sector weights (struct Sampling) along the
// dimensions its site's addresses vary with; along the others it is the same for every index.
double launch_sectors(const Profiler &p) {
    if (!p.sampling.active)
        return (double)p.launch_sectors.size();
    const std::vector<unsigned char> dims = site_dimensions(p, p.sites.at(p.current->kernel).size());
    double total = 0;
    for (const auto &kv : p.launch_sectors) {
        const SectorNote &n = kv.second;
        double w = 1;
        for (unsigned d = 0; d < 3; d++)
            if (p.sampling.sampled[d] && (dims[n.site] & (1u << d)))
                w *= p.sampling.sector_weight[d][n.block[d]];
        total += w;
    }
    return total;
}

} // namespace

void launch_begin(const char *name, const void *kernel, dim3 grid, dim3 block,
                  const unsigned char *shmem, size_t shmem_bytes) {
    Profiler &p = profiler();
    if (!p.static_shared_lo)
        dl_iterate_phdr(find_writable_segment, &p);
    snapshot_device_ranges(p);
    p.dynamic_lo = reinterpret_cast<uintptr_t>(shmem);
    p.dynamic_hi = p.dynamic_lo + shmem_bytes;
    auto found = p.kernels.find(kernel);
    if (found == p.kernels.end()) {
        p.order.push_back(kernel);
        found = p.kernels.emplace(kernel, simt_kernel_counters{}).first;
        found->second.kernel = kernel;
        found->second.launch_name = name;
    }
    simt_kernel_counters &c = found->second;
    unsigned long long threads = (unsigned long long)block.x * block.y * block.z;
    unsigned long long blocks = (unsigned long long)grid.x * grid.y * grid.z;
    c.launches++;
    c.threads_per_block = (unsigned)threads;
    c.dynamic_shared_max = std::max(c.dynamic_shared_max, (unsigned long long)shmem_bytes);
    c.blocks += blocks;
    c.warps += blocks * ((threads + 31) / 32);
    p.current = &c;
    p.occurrences.assign(threads, {});
    p.recent.assign(threads, {});
    p.requests.clear();
    plan_sampling(p.sampling, name, grid);
    for (Tally &t : p.tallies)
        t = Tally{};
    p.block_prints.clear();
    p.active = true;
}

bool block_runs(uint3 block) {
    const Sampling &s = profiler().sampling;
    return !s.active || (s.chosen[0][block.x] && s.chosen[1][block.y] && s.chosen[2][block.z]);
}

void block_end() {
    Profiler &p = profiler();
    if (!p.active)
        return;
    const uint3 block = detail::g_launch->block_idx;
    unsigned weight_class = 0;
    count_weight_of(p.sampling, block, weight_class);
    Tally &t = p.tallies[weight_class];
    std::unordered_map<size_t, uint64_t> prints;
    for (const auto &kv : p.requests) {
        const size_t index = site_of(p, kv.first.pc, kv.second);
        simt_site_counters &site = tally_site(p, t, index);
        if (kv.second.space == space_global)
            count_global(p, t.c, kv.second, site, index, block, prints[index]);
        else
            count_shared(t.c, kv.second, site);
    }
    if (p.sampling.active)
        p.block_prints.emplace_back(block, std::move(prints));
    p.current->blocks_run++;
    p.requests.clear();
    for (auto &m : p.occurrences)
        m.clear();
    for (auto &r : p.recent)
        r.clear();
}

void launch_end() {
    Profiler &p = profiler();
    if (p.current) {
        std::vector<simt_site_counters> &sites = p.sites[p.current->kernel];
        for (unsigned c = 0; c < weight_classes; c++) {
            const double w = class_weight(p.sampling, c);
            add_scaled(*p.current, p.tallies[c].c, w);
            for (size_t i = 0; i < p.tallies[c].sites.size(); i++)
                add_scaled(sites[i], p.tallies[c].sites[i], w);
        }
        p.current->global_launch_sectors += (unsigned long long)std::llround(launch_sectors(p));
    }
    p.launch_sectors.clear();
    p.block_prints.clear();
    p.active = false;
    p.current = nullptr;
}

void vector_copy(const void *src, const void *dst, unsigned bytes, const void *site) {
    Profiler &p = profiler();
    detail::Launch *L = detail::g_launch;
    if (!p.active || !L || !L->current)
        return;
    unsigned tid = (unsigned)(L->current - L->threads.data());
    uintptr_t s = reinterpret_cast<uintptr_t>(src), d = reinterpret_cast<uintptr_t>(dst);
    unrecord(p, tid, s, bytes, false);
    unrecord(p, tid, d, bytes, true);
    record(s, bytes, false, reinterpret_cast<uintptr_t>(site));
    record(d, bytes, true, reinterpret_cast<uintptr_t>(site) + 1); // its own instruction
}

void cp_async(void *shared_dst, const void *global_src, unsigned bytes) {
    Profiler &p = profiler();
    detail::Launch *L = detail::g_launch;
    if (!p.active || !L || !L->current)
        return;
    const uintptr_t site = reinterpret_cast<uintptr_t>(__builtin_return_address(0));
    // the emulator's poison of the destination (simt_async.h) is traced as the thread's store
    unrecord(p, (unsigned)(L->current - L->threads.data()), reinterpret_cast<uintptr_t>(shared_dst), bytes,
             true);
    record(reinterpret_cast<uintptr_t>(global_src), bytes, false, site, true);
    record(reinterpret_cast<uintptr_t>(shared_dst), bytes, true, site + 1, true); // its own request
}

} // namespace profile
} // namespace simt

extern "C" const simt_kernel_counters *simt_profile_counters(const void *kernel) {
    simt::profile::Profiler &p = simt::profile::profiler();
    auto it = p.kernels.find(kernel);
    return it == p.kernels.end() ? nullptr : &it->second;
}

extern "C" const simt_site_counters *simt_profile_sites(const void *kernel, size_t *count) {
    simt::profile::Profiler &p = simt::profile::profiler();
    auto it = p.sites.find(kernel);
    *count = it == p.sites.end() ? 0 : it->second.size();
    return *count ? it->second.data() : nullptr;
}

extern "C" int simt_profile_write(const char *path) {
    return simt::profile::write_counters_to(path);
}

extern "C" void simt_profile_set_block_sampling(unsigned stride, const char *whole_kernels) {
    simt::profile::Sampling &s = simt::profile::profiler().sampling;
    s.stride = stride ? stride : 1;
    s.whole.clear();
    for (const char *at = whole_kernels ? whole_kernels : ""; *at;) {
        const char *end = std::strchr(at, ',');
        s.whole.emplace_back(at, end ? (size_t)(end - at) : std::strlen(at));
        at = end ? end + 1 : at + std::strlen(at);
    }
}

extern "C" void simt_profile_reset(void) {
    simt::profile::profiler().kernels.clear();
    simt::profile::profiler().order.clear();
    simt::profile::profiler().sites.clear();
    simt::profile::profiler().site_index.clear();
}

// The compiler's callbacks (clang -fsanitize-coverage=trace-loads,trace-stores): the address,
// and the instruction's return address as its identity.
#define SIMT_PROFILE_CALLBACKS(n)                                                                  \
    extern "C" void __sanitizer_cov_load##n(void *a) {                                             \
        simt::profile::record(reinterpret_cast<uintptr_t>(a), n, false,                           \
                              reinterpret_cast<uintptr_t>(__builtin_return_address(0)));           \
    }                                                                                              \
    extern "C" void __sanitizer_cov_store##n(void *a) {                                            \
        simt::profile::record(reinterpret_cast<uintptr_t>(a), n, true,                             \
                              reinterpret_cast<uintptr_t>(__builtin_return_address(0)));           \
    }
SIMT_PROFILE_CALLBACKS(1)
SIMT_PROFILE_CALLBACKS(2)
SIMT_PROFILE_CALLBACKS(4)
SIMT_PROFILE_CALLBACKS(8)
SIMT_PROFILE_CALLBACKS(16)
