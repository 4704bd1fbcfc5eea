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
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <unordered_map>
#include <unordered_set>
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
    std::unordered_set<uintptr_t> launch_sectors;
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

simt_site_counters &site_of(Profiler &p, uintptr_t pc, const Request &r) {
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
    return sites[found.first->second];
}

void count_global(Profiler &p, simt_kernel_counters &c, const Request &r, simt_site_counters &site) {
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
    p.launch_sectors.insert(sectors.begin(), sectors.begin() + (ptrdiff_t)n_sectors);
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
                     "\"launches\": %llu, \"blocks\": %llu, \"warps\": %llu, "
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
                     c.warps, c.threads_per_block, c.dynamic_shared_max, c.global_load_requests, c.global_load_sectors, c.global_load_bytes,
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
    p.active = true;
}

void block_end() {
    Profiler &p = profiler();
    if (!p.active)
        return;
    for (const auto &kv : p.requests) {
        simt_site_counters &site = site_of(p, kv.first.pc, kv.second);
        if (kv.second.space == space_global)
            count_global(p, *p.current, kv.second, site);
        else
            count_shared(*p.current, kv.second, site);
    }
    p.requests.clear();
    for (auto &m : p.occurrences)
        m.clear();
    for (auto &r : p.recent)
        r.clear();
}

void launch_end() {
    Profiler &p = profiler();
    if (p.current)
        p.current->global_launch_sectors += p.launch_sectors.size();
    p.launch_sectors.clear();
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
