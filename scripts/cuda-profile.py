#!/usr/bin/env python3
"""make cuda-profile: a roofline estimate of the CUDA kernels from the emulator's counters.

For each model shape (Qwen2.5-0.5B, Llama-3.2-1B) and weight type (Q4_0, Q4_K_M, Q8_0, F16):
  1. synthesizes the shape with 1 and with 2 layers (llmmini-synth, llmmini-quantize);
  2. runs one step of each phase on the profiled module (build/libllmmini-cuda-prof.so, through
     tests/cuda/profile_step.c): a decode step of 1 row, one of 8 rows, and a 512-token prompt;
     The 8-row decode step and the prompt emulate about one block in SAMPLE of each large launch
     (--sample, block sampling: tests/simt/simt_profile_counters.h) and scale its counters to the
     grid; --check-sampling measures what that costs in accuracy on a shape small enough to
     emulate whole;
  3. scales to the real depth exactly: every layer of these models runs the same launches on the
     same shapes, so the full model's counters are C(1) + (n_layer - 1) * (C(2) - C(1));
  4. reads registers and shared memory per kernel from ptxas -v (nvcc for sm_90 and sm_87; no
     GPU needed), and computes occupancy with the documented per-SM limits;
  5. prints per kernel and per model the estimated time on H100, H200 and Orin, against the
     floor (weight bytes / bandwidth), and writes build/cuda-profile.json.
The model behind the numbers, and what it leaves out, is docs/performance.md "CUDA roofline
estimate". A model, not a measurement: scripts/gpu-check.sh prints it beside the real figures.
"""
import argparse
import json
import os
import re
import struct
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Devices: bandwidth (bytes/s), SMs and clock (Hz) for the issue bound. H100 and H200 SXM at
# their boost clock (1.98 GHz, 132 SMs); Jetson AGX Orin 64GB: 16 SMs (2048 CUDA cores) at its
# top GPU clock, 1.3 GHz.
DEVICES = {
    "h100": {"bandwidth": 3.35e12, "sms": 132, "clock": 1.98e9},
    "h200": {"bandwidth": 4.8e12, "sms": 132, "clock": 1.98e9},
    "orin": {"bandwidth": 204.8e9, "sms": 16, "clock": 1.3e9},
}

# Per-SM limits (CUDA C++ Programming Guide, "Compute Capabilities", docs.nvidia.com/cuda/
# cuda-programming-guide/05-appendices/compute-capabilities.html) and the allocation rules of the
# CUDA occupancy calculator (cuda_occupancy.h in the toolkit: registers allocated per warp in
# units of 256, over 4 sub-partitions; shared memory in units of 128 bytes, plus 1 KiB the driver
# reserves per block). Checked 2026-12-07 against what the search tool could reach (the guide's
# table itself was not among its excerpts): sm_90's 64 warps, 32 blocks, 65536 registers and
# 228 KB as Modal's GPU glossary quotes them for H100 (modal.com/gpu-glossary/perf/occupancy);
# sm_87's 1536 threads (48 warps), 164 KiB (167936 bytes) of shared memory and 65536 registers
# as deviceQuery prints them on an Orin (gist.github.com/atinfinity/8cede915acda05d0ff427c09604735dd);
# sm_87's 16 blocks is the guide's figure for 8.6 and 8.7 as remembered, not confirmed there.
ARCHS = {
    "sm_90": {"regs": 65536, "warps": 64, "blocks": 32, "smem": 228 * 1024},
    "sm_87": {"regs": 65536, "warps": 48, "blocks": 16, "smem": 164 * 1024},
}
REG_UNIT, SUB_PARTITIONS, SMEM_UNIT, SMEM_RESERVED = 256, 4, 128, 1024

MODELS = [
    {"model": "qwen2.5-0.5b", "preset": "qwen2.5-0.5b", "layers": 24},
    {"model": "llama-3.2-1b", "preset": "llama-3.2-1b", "layers": 16},
]
TYPES = [("Q4_0", "q4_0"), ("Q4_K_M", "q4_k_m"), ("Q8_0", "q8_0"), ("F16", "f16")]
PHASES = [("decode", 1), ("decode", 8), ("prefill512", 512)]
# block sampling stride of the large phases (the 1-row step runs whole: minutes, and its GEMV
# launches are what the decode bars are about); --sample overrides it
DEFAULT_SAMPLE = 16
# launches that run whole under block sampling: the embedding's gather (its rows are the tokens,
# so which blocks share sectors depends on the prompt, not on where the blocks lie)
WHOLE_KERNELS = ["embed_kernel"]
# --check-sampling: the most a sampled counter of a kernel may differ from the whole launch's,
# relative, beyond one count per launch and weight class for the rounding of the scaled counts
SAMPLING_BOUND = 0.02
COUNTERS = ["launches", "blocks", "blocks_run", "warps", "global_load_requests", "global_load_sectors",
            "global_load_bytes", "global_store_requests", "global_store_sectors",
            "global_store_bytes", "shared_load_requests", "shared_load_wavefronts",
            "shared_store_requests", "shared_store_wavefronts", "cp_async_requests",
            "cp_async_bytes", "cp_async_sectors", "global_launch_sectors"]
SITE_COUNTERS = ["requests", "sectors", "bytes", "wavefronts", "ideal_wavefronts"]
L1_BYTES_PER_CLOCK = 128  # per SM: 4 sectors a cycle through L1 (sm_80 and later)


def run(cmd, **kw):
    r = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)
    if r.returncode != 0:
        sys.exit("cuda-profile: %s failed:\n%s" % (" ".join(cmd), r.stdout[-4000:]))
    return r.stdout


def synthesize(build, models_dir, shape, gguf_type, layers):
    """The shape with `layers` layers in the type, made once (kept in models_dir)."""
    path = os.path.join(models_dir, "%s-%s-L%d.gguf" % (shape["model"], gguf_type, layers))
    if os.path.exists(path):
        return path
    synth = [os.path.join(build, "llmmini-synth"), "--preset", shape["preset"], "--layers", str(layers)]
    if gguf_type == "q4_k_m":
        f16 = path + ".f16.tmp"
        run(synth + ["--type", "f16", "-o", f16])
        run([os.path.join(build, "llmmini-quantize"), f16, path + ".tmp", "q4_k_m"])
        os.remove(f16)
    else:
        run(synth + ["--type", gguf_type, "-o", path + ".tmp"])
    os.rename(path + ".tmp", path)
    return path


def gguf_tensor_bytes(path):
    """Bytes of every tensor of a GGUF file, from the tensor offsets (no type table needed)."""
    with open(path, "rb") as f:
        data = f.read(64 << 20)
        size = os.fstat(f.fileno()).st_size
    pos = 4
    version, n_tensors, n_kv = struct.unpack_from("<IQQ", data, pos)
    pos += 20
    scalar = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}

    def skip_value(t, pos):
        if t in scalar:
            return pos + scalar[t]
        if t == 8:
            (n,) = struct.unpack_from("<Q", data, pos)
            return pos + 8 + n
        if t == 9:
            et, n = struct.unpack_from("<IQ", data, pos)
            pos += 12
            if et in scalar:
                return pos + n * scalar[et]
            for _ in range(n):
                pos = skip_value(et, pos)
            return pos
        sys.exit("cuda-profile: %s: GGUF value type %d" % (path, t))

    alignment = 32
    for _ in range(n_kv):
        (n,) = struct.unpack_from("<Q", data, pos)
        key = data[pos + 8:pos + 8 + n].decode()
        pos += 8 + n
        (t,) = struct.unpack_from("<I", data, pos)
        pos += 4
        if key == "general.alignment":
            (alignment,) = struct.unpack_from("<I", data, pos)
        pos = skip_value(t, pos)
    offsets = []
    for _ in range(n_tensors):
        (n,) = struct.unpack_from("<Q", data, pos)
        pos += 8 + n
        (nd,) = struct.unpack_from("<I", data, pos)
        pos += 4 + 8 * nd + 4
        (off,) = struct.unpack_from("<Q", data, pos)
        pos += 8
        offsets.append(off)
    start = (pos + alignment - 1) // alignment * alignment
    offsets.sort()
    ends = offsets[1:] + [size - start]
    return sum(e - o for o, e in zip(offsets, ends))


def kernel_names(module):
    """Offset in the profiled module -> demangled kernel name without its parameter list."""
    names = {}
    for line in run(["nm", "-C", "--defined-only", module]).splitlines():
        parts = line.split(" ", 2)
        if len(parts) == 3 and parts[1] in "tTwW":
            names[int(parts[0], 16)] = strip_params(parts[2])
    return names


class SiteLines:
    """An access site's offset in the profiled module -> its source line, as addr2line reads the
    debug information (the offset is the callback's return address: the call is the byte before).
    A wide __ldg's site is its caller's file and line, not code: it stays unnamed."""

    def __init__(self, module):
        self.module, self.cache = module, {}

    def __call__(self, offset):
        if offset not in self.cache:
            r = subprocess.run(["addr2line", "-e", self.module, "%x" % (offset - 1)], stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL, text=True)
            line = r.stdout.strip().splitlines()[0] if r.returncode == 0 and r.stdout.strip() else "??"
            if line.startswith("??"):
                self.cache[offset] = "site 0x%x" % offset
            else:  # repository-relative, without addr2line's "(discriminator N)"
                self.cache[offset] = re.sub(r"^.*?/(cuda|tests)/", r"\1/", line).split(" ")[0]
        return self.cache[offset]


def site_summary(sites, lines, every):
    """The shared stores (and the cp.async writes into shared memory) of a kernel, or with
    `every` all its sites: where each one is, and its wavefronts per request against the fewest
    its words could take. Sites of one source line (an inlined helper called twice) add up."""
    out = {}
    for t in sites.values():
        if not t["requests"] or not (every or (t["space"] == "shared" and t["store"])):
            continue
        kind = ("cp.async->shared" if t["cp_async"] and t["space"] == "shared" else
                "cp.async" if t["cp_async"] else "%s %s" % (t["space"], "store" if t["store"] else "load"))
        key = (lines(t["offset"]), kind, t["width"])
        o = out.setdefault(key, {f: 0 for f in SITE_COUNTERS})
        for f in SITE_COUNTERS:
            o[f] += t[f]
    rows = []
    for (line, kind, width), o in sorted(out.items()):
        row = {"site": line, "kind": kind, "width": width, "requests": o["requests"]}
        if kind.startswith("shared") or kind == "cp.async->shared":
            row["wavefronts_per_request"] = round(o["wavefronts"] / o["requests"], 4)
            row["ideal_per_request"] = round(o["ideal_wavefronts"] / o["requests"], 4)
        else:
            row["sectors_per_request"] = round(o["sectors"] / o["requests"], 4)
            row["efficiency"] = round(o["bytes"] / (32.0 * o["sectors"]), 4) if o["sectors"] else 1.0
        rows.append(row)
    return rows


def strip_params(name):
    """`void f<A, B>(int, float)` -> `f<A, B>`: the two compilers spell parameter lists apart."""
    depth, cut = 0, len(name)
    for i in range(len(name) - 1, -1, -1):
        c = name[i]
        if c == ")":
            depth += 1
        elif c == "(":
            depth -= 1
            if depth == 0:
                cut = i
                break
    name = name[:cut]
    if name.startswith("void "):
        name = name[5:]
    return name.replace("(anonymous namespace)::", "")


def profile_step(build, module, model, rows, out, sample=1):
    """The counters of one step, run once: a file already there is read back (rm -r
    BUILD/cuda-profile-counters after changing a kernel)."""
    if not os.path.exists(out):
        run_step(build, module, model, rows, out, sample)
    counters = {}
    for line in open(out):
        k = json.loads(line)
        counters[k["offset"]] = k
    return counters


def run_step(build, module, model, rows, out, sample=1):
    env = dict(os.environ, LLMM_CUDA_MODULE=module)
    args = [os.path.join(build, "tests", "profile_step"), model]
    args += ["0", str(rows)] if rows > 8 else [str(rows), "0"]
    r = subprocess.run(args + [out + ".tmp", str(sample), ",".join(WHOLE_KERNELS)], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        sys.exit("cuda-profile: %s failed:\n%s" % (" ".join(args), r.stdout[-4000:]))
    os.rename(out + ".tmp", out)


def full_depth(c1, c2, names, n_layer):
    """Per kernel name: C(1) + (n_layer - 1) * (C(2) - C(1)), and its launch shape."""
    def by_name(c):
        d = {}
        for off, k in c.items():
            name = names.get(off, k["launch_name"])
            e = d.setdefault(name, dict({f: 0 for f in COUNTERS}, threads_per_block=k["threads_per_block"],
                                        dynamic_shared_max=0, global_load_requests_by_width=[0] * 5))
            for f in COUNTERS:  # blocks_run: counters written before block sampling ran every block
                e[f] += k.get(f, k["blocks"]) if f == "blocks_run" else k[f]
            e["global_load_requests_by_width"] = [a + b for a, b in zip(e["global_load_requests_by_width"],
                                                                         k["global_load_requests_by_width"])]
            e["dynamic_shared_max"] = max(e["dynamic_shared_max"], k["dynamic_shared_max"])
            sites = e.setdefault("sites", {})
            for site in k.get("sites", []):
                t = sites.setdefault(site["offset"], dict(site, **{f: 0 for f in SITE_COUNTERS}))
                for f in SITE_COUNTERS:
                    t[f] += site[f]
        return d
    a, b = by_name(c1), by_name(c2)
    out = {}
    for name in set(a) | set(b):
        ea, eb = a.get(name), b.get(name)
        base = ea or eb
        e = dict(base)
        wa = ea["global_load_requests_by_width"] if ea else [0] * 5
        wb = eb["global_load_requests_by_width"] if eb else [0] * 5
        e["global_load_requests_by_width"] = [a + (n_layer - 1) * (b - a) for a, b in zip(wa, wb)]
        sa, sb = ea.get("sites", {}) if ea else {}, eb.get("sites", {}) if eb else {}
        e["sites"] = {}
        for off in set(sa) | set(sb):
            ta, tb = sa.get(off), sb.get(off)
            t = dict(ta or tb)
            for f in SITE_COUNTERS:
                va, vb = ta[f] if ta else 0, tb[f] if tb else 0
                t[f] = va + (n_layer - 1) * (vb - va)
            e["sites"][off] = t
        for f in COUNTERS:
            va, vb = ea[f] if ea else 0, eb[f] if eb else 0
            e[f] = va + (n_layer - 1) * (vb - va)
            if e[f] < 0:
                sys.exit("cuda-profile: %s: %s fell with depth (%d at 1 layer, %d at 2): layers differ"
                         % (name, f, va, vb))
        out[name] = e
    return out


def ptxas_resources(build):
    """Registers and static shared memory per kernel and arch, from nvcc -Xptxas -v (cached)."""
    nvcc = os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", "nvcc")
    folder = os.path.join(build, "cuda-ptxas")
    os.makedirs(folder, exist_ok=True)
    res = {arch: {} for arch in ARCHS}
    if not os.path.exists(nvcc):
        print("cuda-profile: no nvcc (%s): occupancy left out" % nvcc)
        return res
    for src in sorted(os.listdir(os.path.join(ROOT, "cuda"))):
        if not src.endswith(".cu"):
            continue
        for arch in ARCHS:
            log = os.path.join(folder, "%s-%s.log" % (arch, src[:-3]))
            if not os.path.exists(log) or os.path.getmtime(log) < os.path.getmtime(os.path.join(ROOT, "cuda", src)):
                text = run([nvcc, "-ccbin", os.environ.get("CXX", "g++"), "-fmad=false", "-std=c++17",
                            "-arch=" + arch, "-Xptxas", "-v", "-Icuda", "-Iinclude", "-Ilib", "-c",
                            "cuda/" + src, "-o", os.devnull])
                with open(log, "w") as f:
                    f.write(text)
            parse_ptxas(open(log).read(), res[arch])
    return res


def parse_ptxas(text, out):
    mangled, entries = None, []
    for line in text.splitlines():
        m = re.search(r"Compiling entry function '([^']+)'", line)
        if m:
            mangled = m.group(1)
            continue
        m = re.search(r"Used (\d+) registers", line)
        if m and mangled:
            smem = re.search(r"(\d+) bytes smem", line)
            entries.append((mangled, int(m.group(1)), int(smem.group(1)) if smem else 0))
            mangled = None
    if not entries:
        return
    demangled = subprocess.run(["c++filt"], input="\n".join(e[0] for e in entries), stdout=subprocess.PIPE,
                               text=True).stdout.splitlines()
    for (mg, regs, smem), name in zip(entries, demangled):
        out[strip_params(name)] = {"regs": regs, "smem": smem}


def occupancy(arch, regs, static_smem, dynamic_smem, threads):
    """Resident warps / the SM's maximum, as the CUDA occupancy calculator computes it."""
    lim = ARCHS[arch]
    warps = -(-threads // 32)
    by_warps = lim["warps"] // warps
    regs_per_warp = -(-regs * 32 // REG_UNIT) * REG_UNIT
    by_regs = (lim["regs"] // SUB_PARTITIONS // regs_per_warp) * SUB_PARTITIONS // warps if regs else by_warps
    smem = static_smem + dynamic_smem + SMEM_RESERVED
    smem = -(-smem // SMEM_UNIT) * SMEM_UNIT
    by_smem = lim["smem"] // smem
    blocks = min(by_warps, by_regs, by_smem, lim["blocks"])
    return blocks * warps / lim["warps"]


def estimate_us(e, dev):
    """max(DRAM sectors x 32 B / bandwidth, request sectors x 32 B / L1 rate, memory instructions
    / issue rate), in microseconds. DRAM sectors: each distinct sector once per launch."""
    d = DEVICES[dev]
    dram_s = e["global_launch_sectors"] * 32 / d["bandwidth"]
    request_sectors = e["global_load_sectors"] + e["global_store_sectors"] + e["cp_async_sectors"]
    l1_s = request_sectors * 32 / (d["sms"] * d["clock"] * L1_BYTES_PER_CLOCK)
    issued = (e["global_load_requests"] + e["global_store_requests"] + e["cp_async_requests"] +
              e["shared_load_wavefronts"] + e["shared_store_wavefronts"])
    issue_s = issued / (d["sms"] * d["clock"])
    return max(dram_s, l1_s, issue_s) * 1e6


def bound_of(e, dev):
    """Which term of estimate_us decides: dram, l1 or issue."""
    d = DEVICES[dev]
    terms = {"dram": e["global_launch_sectors"] * 32 / d["bandwidth"],
             "l1": (e["global_load_sectors"] + e["global_store_sectors"] + e["cp_async_sectors"]) * 32 /
                   (d["sms"] * d["clock"] * L1_BYTES_PER_CLOCK),
             "issue": (e["global_load_requests"] + e["global_store_requests"] + e["cp_async_requests"] +
                       e["shared_load_wavefronts"] + e["shared_store_wavefronts"]) / (d["sms"] * d["clock"])}
    return max(terms, key=terms.get)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--models-dir", default=None, help="where the synthetic models go (default BUILD/cuda-profile-models)")
    ap.add_argument("--only", default=None,
                    help="model:type:phase (e.g. qwen2.5-0.5b:Q4_0:decode1) to run that step alone; the "
                         "report covers every step whose counters are there")
    ap.add_argument("--model", default=None,
                    help="profile this GGUF alone, as it is (no depth scaling), and print its table")
    ap.add_argument("--rows", type=int, default=1, help="with --model: decode rows, or 0 with --prompt")
    ap.add_argument("--prompt", type=int, default=0, help="with --model: a prompt of this many tokens")
    ap.add_argument("--module", default=None,
                    help="the profiled module (default BUILD/libllmmini-cuda-prof.so): another build of it, such "
                         "as one with an earlier kernel, counted the same way (its counters cached apart)")
    ap.add_argument("--sample", type=int, default=None,
                    help="block sampling stride of the 8-row decode step and the prompt (default %d; 1: every "
                         "block; counters cached apart per stride); with --model, of its step (default 1)"
                         % DEFAULT_SAMPLE)
    ap.add_argument("--cached", action="store_true",
                    help="run nothing: report the steps whose counters are there")
    ap.add_argument("--merge", default=None,
                    help="a cuda-profile.json of an earlier run (docs/cuda-roofline.json): its entries for the "
                         "combinations this run lacks are kept in the file written")
    ap.add_argument("--check-sampling", action="store_true",
                    help="emulate small shapes whole and sampled (--sample) and compare every kernel's counters; "
                         "exit 1 if one differs by more than %d %%" % round(100 * SAMPLING_BOUND))
    ap.add_argument("--sites", action="store_true",
                    help="print every shared-memory and global access site of each kernel, not only the shared "
                         "stores")
    args = ap.parse_args()
    build = os.path.join(ROOT, args.build) if not os.path.isabs(args.build) else args.build
    module = os.path.abspath(args.module) if args.module else os.path.join(build, "libllmmini-cuda-prof.so")
    if args.model:
        profile_one(args, build, module)
        return
    if args.sample is None:
        args.sample = DEFAULT_SAMPLE
    if args.check_sampling:
        sys.exit(check_sampling(args, build, module))
    models_dir = args.models_dir or os.path.join(build, "cuda-profile-models")
    work = os.path.join(build, "cuda-profile-counters")
    if args.module:
        work += "-" + os.path.basename(module)
    os.makedirs(models_dir, exist_ok=True)
    os.makedirs(work, exist_ok=True)
    names = kernel_names(module)
    lines = SiteLines(module)
    resources = ptxas_resources(build)
    kernels_json, models_json = [], []
    for shape in MODELS:
        for type_name, gguf_type in TYPES:
            steps = []
            for phase, rows in PHASES:
                key = "%s:%s:%s" % (shape["model"], type_name, phase + ("" if phase == "prefill512" else str(rows)))
                sample = 1 if rows == 1 else max(1, args.sample)
                if args.cached or args.only != key:  # the step as it was run, at any stride
                    sample = cached_stride(work, shape["model"], type_name, phase, rows, sample)
                tag = "%s-%s-%s-%d%s" % (shape["model"], type_name, phase, rows, "-s%d" % sample if sample > 1 else "")
                outs = [os.path.join(work, "%s-L%d.jsonl" % (tag, n)) for n in (1, 2)]
                wanted = not args.cached and (args.only is None or args.only == key)
                if wanted or all(os.path.exists(o) for o in outs):
                    steps.append((phase, rows, sample, outs))
            if not steps:
                continue
            paths = [synthesize(build, models_dir, shape, gguf_type, n) for n in (1, 2)]
            b1, b2 = gguf_tensor_bytes(paths[0]), gguf_tensor_bytes(paths[1])
            weight_bytes = b1 + (shape["layers"] - 1) * (b2 - b1)
            for phase, rows, sample, outs in steps:
                c = [profile_step(build, module, p, rows, o, sample) for p, o in zip(paths, outs)]
                full = full_depth(c[0], c[1], names, shape["layers"])
                report(shape, type_name, phase, rows, full, resources, weight_bytes, kernels_json, models_json,
                       lines, args.sites, sample)
    if args.merge:
        merge_earlier(args.merge, kernels_json, models_json)
    out = os.path.join(build, "cuda-profile.json")
    with open(out, "w") as f:
        json.dump({"kernels": kernels_json, "models": models_json}, f, indent=1)
    print("wrote %s" % out)


def cached_stride(work, model, type_name, phase, rows, sample):
    """The sampling stride of the step's cached counters: `sample` where both depths are there at
    it, else another stride both are there at (the finest), else `sample`."""
    strides = []
    for n in [1] + [int(m.group(1)) for m in (re.match(r"%s-s(\d+)-L1\.jsonl$" % re.escape(
            "%s-%s-%s-%d" % (model, type_name, phase, rows)), f) for f in os.listdir(work)) if m]:
        tag = "%s-%s-%s-%d%s" % (model, type_name, phase, rows, "-s%d" % n if n > 1 else "")
        if all(os.path.exists(os.path.join(work, "%s-L%d.jsonl" % (tag, d))) for d in (1, 2)):
            strides.append(n)
    return sample if sample in strides or not strides else min(strides)


def merge_earlier(path, kernels_json, models_json):
    """Entries of an earlier run's file for the combinations (model, type, phase, rows) this run
    has none of, appended as they were."""
    with open(path) as f:
        earlier = json.load(f)
    have = {(k["model"], k["type"], k["phase"], k["rows"]) for k in kernels_json}
    have_models = {(m["model"], m["type"], m["phase"]) for m in models_json}
    kept = set()
    for k in earlier.get("kernels", []):
        combo = (k["model"], k["type"], k["phase"], k["rows"])
        if combo not in have:
            kernels_json.append(k)
            kept.add(combo)
    for m in earlier.get("models", []):
        if (m["model"], m["type"], m["phase"]) not in have_models:
            models_json.append(m)
    for combo in sorted(kept):
        print("kept from %s: %s %s %s %d rows" % ((path,) + combo))


COUNTED = ["global_load_requests", "global_load_sectors", "global_load_bytes", "global_store_requests",
           "global_store_sectors", "global_store_bytes", "shared_load_requests", "shared_load_wavefronts",
           "shared_store_requests", "shared_store_wavefronts", "cp_async_requests", "cp_async_bytes",
           "cp_async_sectors", "global_launch_sectors"]

# --check-sampling's shapes: narrowed so that a step emulates whole in a minute or two, wide
# enough that the matmuls', attention's and row kernels' launches have the 4 x SAMPLE blocks
# sampling needs; each type's prompt path (int8 GEMM; dequantization and the reference GEMM)
# and the 8-row GEMV
CHECK_SHAPE = ["--preset", "tiny", "--dim", "256", "--ff", "1024", "--heads", "4", "--kv-heads", "2",
               "--layers", "1", "--n-vocab", "512"]
CHECK_STEPS = [("q4_0", 0, 256), ("q4_0", 8, 0), ("f16", 0, 256)]


def check_sampling(args, build, module):
    """Every kernel's counters of small steps, sampled at --sample against whole: the largest
    relative difference per counter, and exit status 1 past SAMPLING_BOUND."""
    names = kernel_names(module)
    resources = ptxas_resources(build)
    work = os.path.join(build, "cuda-profile-counters", "check-sampling")
    os.makedirs(work, exist_ok=True)
    failed = 0
    for gguf_type, rows, prompt in CHECK_STEPS:
        model = os.path.join(work, "check-%s.gguf" % gguf_type)
        if not os.path.exists(model):
            run([os.path.join(build, "llmmini-synth")] + CHECK_SHAPE + ["--type", gguf_type, "-o", model + ".tmp"])
            os.rename(model + ".tmp", model)
        n = prompt or rows
        steps = {}
        for sample in (1, args.sample):
            # the module as it is now: the whole run kept for this build of it alone
            out = os.path.join(work, "%s-%d-%s-%d-s%d.jsonl" % (os.path.basename(module), int(os.path.getmtime(module)),
                                                             gguf_type, n, sample))
            if sample > 1 and os.path.exists(out):
                os.remove(out)
            steps[sample] = full_depth(profile_step(build, module, model, n, out, sample),
                                       profile_step(build, module, model, n, out, sample), names, 1)
        whole, sampled = steps[1], steps[args.sample]
        print("\n== %s, %s: sampled 1 block in %d against whole" %
              (gguf_type, "%d-token prompt" % prompt if prompt else "decode %d rows" % rows, args.sample))
        print("%-48s %9s %9s %-24s %8s %9s %9s" % ("kernel", "blocks", "run", "worst counter", "diff %",
                                                   "H100 us", "sampled"))
        step = {"whole": 0.0, "sampled": 0.0}
        for name in sorted(whole, key=lambda k: -estimate_us(whole[k], "h100")):
            w, t = whole[name], sampled.get(name)
            if t is not None and not name.startswith("reference_gemm_kernel"):
                step["whole"] += estimate_us(w, "h100")
                step["sampled"] += estimate_us(t, "h100")
            if t is None:
                print("%-48s missing from the sampled run" % name[:48])
                failed += 1
                continue
            worst, worst_diff = None, 0.0
            for f in COUNTED:
                slack = w["launches"] * 8  # a count per weight class and launch: rounding
                diff = abs(t[f] - w[f])
                rel = diff / w[f] if w[f] else (0.0 if diff == 0 else 1.0)
                if diff > slack and rel > worst_diff:
                    worst, worst_diff = f, rel
            modelled = not name.startswith("reference_gemm_kernel")
            bad = modelled and worst_diff > SAMPLING_BOUND
            failed += bad
            print("%-48s %9d %9d %-24s %8.3f %9.3f %9.3f%s" % (
                name[:48], w["blocks"], t["blocks_run"], worst or "-", 100 * worst_diff, estimate_us(w, "h100"),
                estimate_us(t, "h100"), "  OVER THE BOUND" if bad else
                "" if modelled else "  (cuBLASLt's stand-in, out of the estimates: not held to the bound)"))
        print("the step's H100 estimate (modelled kernels): whole %.3f us, sampled %.3f us (%+.2f %%)" % (
            step["whole"], step["sampled"], 100 * (step["sampled"] / step["whole"] - 1) if step["whole"] else 0.0))
    print("\n%s: every counter of every kernel within %.0f %% (or the rounding of one count per launch and "
          "weight class)" % ("FAILED" if failed else "ok", 100 * SAMPLING_BOUND))
    return 1 if failed else 0


def profile_one(args, build, module):
    """--model: one step of one file, its counters as they are."""
    names = kernel_names(module)
    resources = ptxas_resources(build)
    rows = args.prompt if args.prompt else args.rows
    out = os.path.join(build, "cuda-profile-counters", "one-%s-%s-%d.jsonl" % (os.path.basename(module),
                       os.path.basename(args.model), rows))
    os.makedirs(os.path.dirname(out), exist_ok=True)
    if os.path.exists(out):
        os.remove(out)
    sample = args.sample or 1
    c = profile_step(build, module, os.path.abspath(args.model), rows, out, sample)
    full = full_depth(c, c, names, 1)
    shape = {"model": os.path.basename(args.model), "layers": 1}
    report(shape, "as stored", "prefill%d" % rows if args.prompt else "decode", rows, full, resources,
           gguf_tensor_bytes(args.model), [], [], SiteLines(module), args.sites, sample)


def report(shape, type_name, phase, rows, full, resources, weight_bytes, kernels_json, models_json, lines,
           every_site, sample=1):
    print("\n== %s %s %s, %d row%s (%d layers%s%s)" %
          (shape["model"], type_name, phase, rows, "" if rows == 1 else "s", shape["layers"],
           "; counters of 1 and 2 layers scaled exactly" if shape["layers"] > 1 else "",
           "; large launches sampled, 1 block in %d" % sample if sample > 1 else ""))
    print("%-52s %6s %7s %6s %6s %6s %6s %6s %6s %6s %9s %5s %9s %9s" % ("kernel", "launch", "sect/rq", "eff%",
          "ld/16B", "sh/16B", "stwf/r", "ldwf/r", "occ90", "occ87", "H100 us", "bound", "H200 us", "Orin us"))
    totals = {d: 0.0 for d in DEVICES}
    for name, e in sorted(full.items(), key=lambda kv: -estimate_us(kv[1], "h100")):
        ld_req, ld_sec, ld_bytes = e["global_load_requests"], e["global_load_sectors"], e["global_load_bytes"]
        sectors_per_request = ld_sec / ld_req if ld_req else 0.0
        efficiency = ld_bytes / (32.0 * ld_sec) if ld_sec else 1.0
        # load instructions a lane executes per 16 bytes it loads: 16 / the mean access width
        widths = e["global_load_requests_by_width"]
        width_sum = sum(n * w for n, w in zip(widths, (1, 2, 4, 8, 16)))
        loads_per_16 = 16.0 * sum(widths) / width_sum if width_sum else 0.0
        # the shared-memory reads that unpack what the global loads brought (a GEMV's staged
        # chunks), per 16 of those bytes: apart, so that neither hides the other
        shared_per_16 = 16.0 * e["shared_load_requests"] / width_sum if width_sum else 0.0
        # shared-memory wavefronts per request, stores and loads apart (1: no bank conflicts for
        # accesses of up to 4 bytes a lane)
        st_wf = e["shared_store_wavefronts"] / e["shared_store_requests"] if e["shared_store_requests"] else 0.0
        ld_wf = e["shared_load_wavefronts"] / e["shared_load_requests"] if e["shared_load_requests"] else 0.0
        occ = {}
        for arch in ARCHS:
            r = resources[arch].get(name)
            occ[arch] = occupancy(arch, r["regs"], r["smem"], e["dynamic_shared_max"], e["threads_per_block"]) if r else None
        us = {d: estimate_us(e, d) for d in DEVICES}
        modelled = not name.startswith("reference_gemm_kernel")  # cuBLASLt's stand-in: not modelled
        for d in DEVICES:
            totals[d] += us[d] if modelled else 0.0
        print("%-52s %6d %7.2f %6.1f %6.2f %6.2f %6.2f %6.2f %6s %6s %9.2f %5s %9.2f %9.2f%s" % (
            name[:52], e["launches"], sectors_per_request, 100 * efficiency, loads_per_16, shared_per_16, st_wf, ld_wf,
            "-" if occ["sm_90"] is None else "%.0f%%" % (100 * occ["sm_90"]),
            "-" if occ["sm_87"] is None else "%.0f%%" % (100 * occ["sm_87"]), us["h100"], bound_of(e, "h100"),
            us["h200"], us["orin"], "" if modelled else "  (cuBLASLt on a GPU: not in the sum)"))
        sites = site_summary(e.get("sites", {}), lines, every_site)
        for t in sites:
            if "wavefronts_per_request" in t:
                print("    %-44s %-17s %2d B %10d rq  %5.2f wavefronts/rq (fewest %.2f)" % (
                    t["site"][-44:], t["kind"], t["width"], t["requests"], t["wavefronts_per_request"],
                    t["ideal_per_request"]))
            else:
                print("    %-44s %-17s %2d B %10d rq  %5.2f sectors/rq, %.1f %% useful" % (
                    t["site"][-44:], t["kind"], t["width"], t["requests"], t["sectors_per_request"],
                    100 * t["efficiency"]))
        kernels_json.append({"model": shape["model"], "type": type_name, "phase": phase, "rows": rows,
                             "block_sample": sample, "kernel": name, "sector_efficiency": round(efficiency, 4),
                             "loads_per_16B": round(loads_per_16, 4),
                             "shared_loads_per_16B": round(shared_per_16, 4),
                             "occupancy_sm90": None if occ["sm_90"] is None else round(occ["sm_90"], 4),
                             "est_us_h100": round(us["h100"], 3),
                             "shared_store_wavefronts_per_request": round(st_wf, 4),
                             "shared_load_wavefronts_per_request": round(ld_wf, 4),
                             "shared_store_sites": [t for t in sites if "wavefronts_per_request" in t]})
    floor = {d: weight_bytes / DEVICES[d]["bandwidth"] * 1e3 for d in DEVICES}
    print("sum: H100 %.3f ms, H200 %.3f ms, Orin %.3f ms; floor (%.1f MB of weights / bandwidth): "
          "H100 %.3f ms, H200 %.3f ms, Orin %.3f ms" % (totals["h100"] / 1e3, totals["h200"] / 1e3,
          totals["orin"] / 1e3, weight_bytes / 1e6, floor["h100"], floor["h200"], floor["orin"]))
    if rows != 8:  # the models list: per decode token (1 row) and per 512-token prompt
        models_json.append({"model": shape["model"], "type": type_name, "phase": phase, "block_sample": sample,
                            "est_ms_h100": round(totals["h100"] / 1e3, 4), "est_ms_h200": round(totals["h200"] / 1e3, 4),
                            "est_ms_orin": round(totals["orin"] / 1e3, 4), "floor_ms_h100": round(floor["h100"], 4)})


if __name__ == "__main__":
    main()
