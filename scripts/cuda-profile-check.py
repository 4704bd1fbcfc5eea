#!/usr/bin/env python3
"""Checks build/cuda-profile.json (make cuda-profile) against the schema of issue 45 and lists
the combinations it lacks: every model (qwen2.5-0.5b, llama-3.2-1b), type (Q4_0, Q4_K_M, Q8_0,
F16) and phase (decode at 1 and 8 rows, prefill512). Then prints the decode GEMV figures against
their bars (sector efficiency >= 85 %, <= 1 global load instruction per 16 bytes, >= 50 %
occupancy on sm_90), each kernel instance as met or missed. Exit status 1 when a field is
malformed or a combination is missing (the bars are reported, not enforced: they are estimates).

    usage: scripts/cuda-profile-check.py [build/cuda-profile.json]
"""
import json
import sys

MODELS = ["qwen2.5-0.5b", "llama-3.2-1b"]
TYPES = ["Q4_0", "Q4_K_M", "Q8_0", "F16"]
PHASES = [("decode", 1), ("decode", 8), ("prefill512", 512)]
KERNEL_FIELDS = {"model": str, "type": str, "phase": str, "rows": int, "kernel": str,
                 "sector_efficiency": float, "loads_per_16B": float, "occupancy_sm90": (float, type(None)),
                 "est_us_h100": float}
MODEL_FIELDS = {"model": str, "type": str, "phase": str, "est_ms_h100": float, "est_ms_h200": float,
                "est_ms_orin": float, "floor_ms_h100": float}
GEMV_TYPES = {"2u": "Q4_0", "8u": "Q8_0", "12u": "Q4_K", "14u": "Q6_K"}


def malformed(entry, fields):
    """The fields of `entry` that are missing or of another type (an int is a float too)."""
    bad = []
    for name, kind in fields.items():
        kinds = kind if isinstance(kind, tuple) else (kind,)
        if float in kinds:
            kinds += (int,)
        if name not in entry or not isinstance(entry[name], kinds) or isinstance(entry[name], bool):
            bad.append(name)
    return bad


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else "build/cuda-profile.json"
    with open(path) as f:
        data = json.load(f)
    problems = []
    for section, fields in (("kernels", KERNEL_FIELDS), ("models", MODEL_FIELDS)):
        if not isinstance(data.get(section), list):
            problems.append("no list %r" % section)
            continue
        for i, entry in enumerate(data[section]):
            bad = malformed(entry, fields)
            if bad:
                problems.append("%s[%d]: %s" % (section, i, ", ".join(bad)))
    kernels = data.get("kernels") or []
    present = {(k.get("model"), k.get("type"), k.get("phase"), k.get("rows")) for k in kernels}
    models = {(m.get("model"), m.get("type"), m.get("phase")) for m in data.get("models") or []}
    missing = []
    for model in MODELS:
        for type_name in TYPES:
            for phase, rows in PHASES:
                if (model, type_name, phase, rows) not in present:
                    missing.append("%s %s %s %d rows" % (model, type_name, phase, rows))
                elif rows != 8 and (model, type_name, phase) not in models:
                    missing.append("%s %s %s: no models entry" % (model, type_name, phase))
    for p in problems:
        print("malformed: " + p)
    for m in missing:
        print("missing: " + m)
    print("%d combinations of %d present" % (len(MODELS) * len(TYPES) * len(PHASES) - sum(
        1 for m in missing if "rows" in m), len(MODELS) * len(TYPES) * len(PHASES)))

    print("\ndecode GEMV bars (efficiency >= 85 %, global loads per 16 B <= 1, occupancy sm_90 >= 50 %):")
    for k in kernels:
        name = k.get("kernel", "")
        if k.get("phase") != "decode" or not name.startswith("gemv_"):
            continue
        arg = name[name.find("<") + 1:name.find(">")] if "<" in name else ""
        weight = GEMV_TYPES.get(arg.split(",")[0].strip())
        if weight is None:
            continue
        occ = k.get("occupancy_sm90")
        misses = []
        if k["sector_efficiency"] < 0.85:
            misses.append("efficiency %.1f %%" % (100 * k["sector_efficiency"]))
        if k["loads_per_16B"] > 1.0:
            misses.append("%.2f loads per 16 B" % k["loads_per_16B"])
        if occ is not None and occ < 0.5:
            misses.append("occupancy %.0f %%" % (100 * occ))
        print("  %-13s %-7s %d row%s %-30s %s" % (k["model"], k["type"], k["rows"], " " if k["rows"] == 1 else "s",
                                                 name[:30] + " (" + weight + ")", "missed: " + ", ".join(misses)
                                                 if misses else "met"))
    return 1 if problems or missing else 0


if __name__ == "__main__":
    sys.exit(main())
