#!/usr/bin/env bash
# scripts/gpu-check.sh: everything llmmini checks and measures on an NVIDIA GPU, as one script
# for a machine without network that is lent for minutes (one run yields every result):
#   preflight   the GPU (nvidia-smi), its compute capability, build dependencies
#   build       make CUDA=1 for that capability only (NVCC_ARCH), the device kernel tests
#               (make cuda-device-tests) and scripts/gpu-bandwidth.cu
#   bandwidth   the device's memory bandwidth: a device-to-device copy (read + write counted)
#               and the nominal figure of its attributes
#   kernels     tests/cuda/test_*.cpp on the device, and each on the strict emulator: per test,
#               whether the device's read-backs equal the emulator's bit for bit
#   concurrency test_cuda_module's four-thread test (captures while other threads load) on the
#               real module
#   make test   the whole suite, with tests/cuda/test_cuda_module on the real libllmmini-cuda.so
#   sanitizers  the kernel tests under compute-sanitizer memcheck and racecheck (skipped, saying
#               so, when compute-sanitizer is absent)
#   synthesis   Qwen2.5-0.5B- and Llama-3.2-1B-shaped models in Q4_0, Q4_K_M and F16
#               (llmmini-synth, llmmini-quantize), in the background during the tests
#   bench       llmmini-bench --backend cuda on each: decode ms/token, TTFT of a 512-token
#               prompt, bytes per token and the fraction of the measured bandwidth, with CUDA
#               graphs (the module's default) and without (LLMM_CUDA_GRAPHS=0)
#   prefill     on the two target models: TTFT and prompt tok/s for 128-, 512- and 2048-token
#               prompts, aggregate decode tok/s of 1, 4, 16 and 64 sequences, and the 512-token
#               prefill with each prompt matmul path forced (LLMM_CUDA_GEMM=gemv|lt|int8)
#   lora        llmmini-bench --backend cuda --lora with four rank-16 F16 adapters on the first
#               prefill model: decode tok/s with and without, 1 and 16 sequences (lora.log)
# Each phase is timed; a failing phase is reported and the later ones still run. The summary
# (a markdown table) is printed last and written, with a tarball of the logs, to $OUT when set
# (the device tool copies $OUT back: few files, so the logs travel as one archive), else to
# build/gpu-check/. Exit status: 0 when no phase failed.
#
# Environment:
#   GPU_CHECK_DRY=1         no GPU: every part that needs none (build for a fixed arch, the
#                           emulated kernel tests and module, the smallest model, the bench on the
#                           CPU and on the emulated module with a tiny prompt, the table)
#   GPU_CHECK_ARCH=90       compute capability to build for (default: nvidia-smi's; 90 when dry)
#   GPU_CHECK_BUILD=DIR     build folder, relative to the repository (default build/gpu)
#   GPU_CHECK_JOBS=N        make -j and quantizer threads (default: nproc)
#   GPU_CHECK_BUDGET_S=S    seconds after which no further benchmark starts (default 420), so the
#                           whole check ends within about 8 minutes
#   GPU_CHECK_SANITIZE_END_S=S  seconds after which no sanitizer run starts, each cut off there
#                           too (default 300)
#   GPU_CHECK_MODELS=DIR    where the synthetic models go (default $TMPDIR or /tmp, subfolder
#                           llmmini-gpu-check-models); models already there are reused
#   GPU_CHECK_DEBS=DIR      .deb files unpacked (not installed) when zstd or cmocka headers are
#                           missing (default .gpu-deps): apt-get download libcmocka0
#                           libcmocka-dev libzstd-dev on a machine with network, and carry them
#   LLMM_SHARED             the shared test data (default: shared/ in the repository when present,
#                           else ../shared); without it the golden tests fail
#   CUDA_HOME               (default /usr/local/cuda)
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD
DRY=${GPU_CHECK_DRY:-0}
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
export CUDA_HOME
BUILD=${GPU_CHECK_BUILD:-build/gpu}
ABS_BUILD=$ROOT/$BUILD
JOBS=${GPU_CHECK_JOBS:-$(nproc 2>/dev/null || echo 4)}
BUDGET_S=${GPU_CHECK_BUDGET_S:-420}
SANITIZE_END_S=${GPU_CHECK_SANITIZE_END_S:-300}
MODELS=${GPU_CHECK_MODELS:-${TMPDIR:-/tmp}/llmmini-gpu-check-models}
DEBS=${GPU_CHECK_DEBS:-$ROOT/.gpu-deps}
if [ -n "${OUT:-}" ]; then
    RESULTS=$OUT
    LOGS=$(mktemp -d "${TMPDIR:-/tmp}/gpu-check-logs.XXXXXX")
else
    RESULTS=$ROOT/build/gpu-check
    LOGS=$RESULTS/logs
fi
mkdir -p "$RESULTS" "$LOGS" "$MODELS"
SUMMARY=$RESULTS/gpu-check.md
export LD_LIBRARY_PATH="$CUDA_HOME/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

if [ "$DRY" = 1 ]; then
    SHAPES="tiny"
    BENCH_ARGS=(-p 8 -n 4 -r 1 --no-bandwidth)
    PROMPT_TOKENS=8
    PREFILL_PROMPTS="8 16"
    PARALLEL_SEQS="1 2 4"
    PREFILL_MODELS="tiny:q4_0"
else
    SHAPES="qwen2.5-0.5b llama-3.2-1b"
    BENCH_ARGS=(-p 512 -n 128 -r 3 --no-bandwidth)
    PROMPT_TOKENS=512
    PREFILL_PROMPTS="128 512 2048"
    PARALLEL_SEQS="1 4 16 64"
    PREFILL_MODELS="qwen2.5-0.5b:q4_0 llama-3.2-1b:q4_k_m"
fi
TYPES="q4_0 q4_k_m f16"
T_START=$SECONDS
# the kernel test programs, one per tests/cuda/test_*.cpp
KERNEL_TESTS=$(for f in tests/cuda/test_*.cpp; do basename "$f" .cpp; done)
# run on the device too: the kernel tests and the static link (libllmmini-cuda.a +
# cudart_static, llmm_cuda_register, the stories260K goldens)
DEVICE_TESTS="$KERNEL_TESTS test_cuda_static"

# ---------------------------------------------------------------- bookkeeping

PH_NAME=()
PH_RESULT=()
PH_SECS=()
PH_LOG=()
FAILED=0

record() { # name result seconds log
    PH_NAME+=("$1")
    PH_RESULT+=("$2")
    PH_SECS+=("$3")
    PH_LOG+=("$4")
    case $2 in FAILED* | "timed out"*) FAILED=1 ;; esac
    echo "gpu-check: $1: $2 (${3} s)" >&2
    write_summary
}

now_s() { echo "$SECONDS"; }

# One value of a one-line JSON object (numbers and strings; a string keeps its quotes off).
jget() {
    sed -n "s/.*\"$2\":\"\{0,1\}\([^,}\"]*\).*/\1/p" "$1" 2>/dev/null | head -n 1
}

# "ok", "FAILED (exit N)" or "timed out", for an exit status of timeout(1) around a command.
status_of() {
    case $1 in
        0) echo ok ;;
        124 | 137) echo "timed out" ;;
        *) echo "FAILED (exit $1)" ;;
    esac
}

# cmocka's counts in a log: "N passed" or "N of M failed: names".
cmocka_counts() {
    local log=$1 passed failed names
    passed=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test(s)\..*/\1/p' "$log" | awk '{s += $1} END {print s + 0}')
    failed=$(sed -n 's/^\[  FAILED  \] \([0-9]*\) test(s), listed below:.*/\1/p' "$log" |
        awk '{s += $1} END {print s + 0}')
    if [ "$failed" -gt 0 ]; then
        names=$(sed -n 's/^\[  FAILED  \] \([a-z_0-9<>A-Z]*\)$/\1/p' "$log" | sort -u | head -n 6 |
            paste -sd ' ' -)
        echo "$failed failed ($names), $passed passed"
    else
        echo "$passed passed"
    fi
}

# Copies the logs out (one archive when $OUT is set) after every phase, so a run stopped at its
# time limit still returns what it did.
save_logs() {
    if [ -n "${OUT:-}" ]; then
        tar -czf "$RESULTS/gpu-check-logs.tar.gz.part" -C "$LOGS" . 2>/dev/null &&
            mv "$RESULTS/gpu-check-logs.tar.gz.part" "$RESULTS/gpu-check-logs.tar.gz"
    fi
    return 0
}

# ---------------------------------------------------------------- preflight

DEVICE="none"
DEVICE_LINE=""
ARCH=${GPU_CHECK_ARCH:-}
preflight() {
    local t0 notes=()
    t0=$(now_s)
    if [ "$DRY" = 1 ]; then
        ARCH=${ARCH:-90}
        DEVICE="none (dry run)"
        notes+=("dry run: no GPU used; arch sm_$ARCH")
    elif command -v nvidia-smi >/dev/null 2>&1 &&
        nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total,clocks.max.sm,clocks.max.memory \
            --format=csv,noheader > "$LOGS/nvidia-smi.txt" 2>&1; then
        DEVICE_LINE=$(head -n 1 "$LOGS/nvidia-smi.txt")
        DEVICE=${DEVICE_LINE%%,*}
        if [ -z "$ARCH" ]; then
            ARCH=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -n 1 | tr -d ' .')
        fi
        nvidia-smi >> "$LOGS/nvidia-smi.txt" 2>&1 || true
        notes+=("$DEVICE_LINE")
    else
        ARCH=${ARCH:-90}
        notes+=("FAILED: nvidia-smi found no GPU; building for sm_$ARCH anyway")
    fi
    case $ARCH in
        '' | *[!0-9]*) notes+=("FAILED: compute capability '$ARCH' unreadable; building for sm_90"); ARCH=90 ;;
    esac

    # The build's libraries: present, or unpacked from carried .deb files (no network here,
    # so scripts/deps.sh cannot install them; the build's dependency stamp is written here).
    if ! have_build_deps && compgen -G "$DEBS/*.deb" >/dev/null; then
        local root=$ROOT/build/gpu-deps-root multiarch
        multiarch=$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)
        mkdir -p "$root"
        for deb in "$DEBS"/*.deb; do dpkg -x "$deb" "$root"; done
        export CPATH="$root/usr/include${CPATH:+:$CPATH}"
        export LIBRARY_PATH="$root/usr/lib/$multiarch${LIBRARY_PATH:+:$LIBRARY_PATH}"
        export LD_LIBRARY_PATH="$root/usr/lib/$multiarch:$LD_LIBRARY_PATH"
        notes+=("unpacked $(find "$DEBS" -name '*.deb' | wc -l) .deb files from $DEBS")
    fi
    if have_build_deps; then
        mkdir -p "$ABS_BUILD" && touch "$ABS_BUILD/.deps-ok"
        DEPS_OK=1
    else
        DEPS_OK=0
        notes+=("FAILED: g++, zstd.h/libzstd or cmocka.h/libcmocka missing (carry .deb files in $DEBS)")
    fi
    [ -x "$CUDA_HOME/bin/nvcc" ] || notes+=("FAILED: no nvcc at $CUDA_HOME/bin")

    if [ -z "${LLMM_SHARED:-}" ]; then
        LLMM_SHARED=$ROOT/../shared
        [ -f "$ROOT/shared/models/stories260K.gguf" ] && LLMM_SHARED=$ROOT/shared
    fi
    LLMM_SHARED=$(cd "$LLMM_SHARED" 2>/dev/null && pwd || echo "$LLMM_SHARED")
    export LLMM_SHARED
    [ -f "$LLMM_SHARED/models/stories260K.gguf" ] ||
        notes+=("WARNING: no shared test data at $LLMM_SHARED: golden tests will fail (copy ../shared to shared/)")
    NVCC_ARCH="-gencode arch=compute_$ARCH,code=sm_$ARCH"
    local result="ok" n
    for n in "${notes[@]}"; do case $n in FAILED*) result="FAILED" ;; esac; done
    printf '%s\n' "${notes[@]}" > "$LOGS/preflight.txt"
    local joined=""
    for n in "${notes[@]}"; do joined="${joined:+$joined; }$n"; done
    record "preflight" "$result: $joined" $(($(now_s) - t0)) preflight.txt
}

have_build_deps() {
    command -v g++ >/dev/null 2>&1 || return 1
    printf '%s\n' '#include <stddef.h>' '#include <stdarg.h>' '#include <setjmp.h>' '#include <cmocka.h>' \
        '#include <zstd.h>' 'int main(void) { return ZSTD_versionNumber() == 0; }' |
        cc -x c - -o /dev/null -lcmocka -lzstd >/dev/null 2>&1
}

# ---------------------------------------------------------------- build

MAKE_ARGS=()
build() {
    local t0 rc=0
    t0=$(now_s)
    # -lineinfo: compute-sanitizer then names the source line of a fault; it adds no code
    MAKE_ARGS=(BUILD="$BUILD" CUDA=1 NVCC_ARCH="$NVCC_ARCH -lineinfo" CUDA_HOME="$CUDA_HOME")
    if [ "$DEPS_OK" != 1 ]; then
        record "build" "skipped: build dependencies missing (see preflight)" 0 ""
        return
    fi
    # the emulated kernel tests too: the dry run runs them in place of the device's
    local targets=(all cuda-device-tests "$BUILD/tests/test_cuda_module") t
    for t in $DEVICE_TESTS; do targets+=("$BUILD/tests/$t"); done
    # -k: one file that fails to compile must not keep the other phases' tools from being built
    {
        echo "+ make -k -j$JOBS ${MAKE_ARGS[*]} ${targets[*]}"
        make -k -j"$JOBS" "${MAKE_ARGS[@]}" "${targets[@]}" || rc=$?
        echo "+ nvcc scripts/gpu-bandwidth.cu"
        "$CUDA_HOME/bin/nvcc" -std=c++17 -O2 -gencode "arch=compute_$ARCH,code=sm_$ARCH" \
            -Xcompiler -Wall,-Wextra,-Werror scripts/gpu-bandwidth.cu -o "$ABS_BUILD/gpu-bandwidth" || rc=$?
    } > "$LOGS/build.log" 2>&1
    local result first_error
    result="$(status_of $rc) (sm_$ARCH, -j$JOBS)"
    first_error=$(grep -v -e -Werror "$LOGS/build.log" | grep -m1 -E 'error:|Error [0-9]' | cut -c1-160 || true)
    [ $rc = 0 ] || result="$result: $first_error"
    record "build" "$result" $(($(now_s) - t0)) build.log
}

# ---------------------------------------------------------------- device bandwidth

COPY_GBS=""
NOMINAL_GBS=""
BW_LINE=""
bandwidth() {
    local t0 rc=0
    t0=$(now_s)
    if [ "$DRY" = 1 ]; then
        local built=no
        [ -x "$ABS_BUILD/gpu-bandwidth" ] && built=yes
        record "bandwidth" "skipped: dry run (gpu-bandwidth built: $built)" 0 ""
        return
    fi
    if [ ! -x "$ABS_BUILD/gpu-bandwidth" ]; then
        record "bandwidth" "skipped: gpu-bandwidth not built" 0 ""
        return
    fi
    timeout 60 "$ABS_BUILD/gpu-bandwidth" > "$LOGS/bandwidth.json" 2> "$LOGS/bandwidth.log" || rc=$?
    if [ $rc = 0 ]; then
        local j=$LOGS/bandwidth.json
        COPY_GBS=$(jget "$j" copy_gb_s)
        NOMINAL_GBS=$(jget "$j" nominal_gb_s)
        BW_LINE="measured $COPY_GBS GB/s (device-to-device copy of 2 x $(($(jget "$j" copy_buffer_bytes) >> 20)) MiB,"
        BW_LINE="$BW_LINE read + write counted, median of $(jget "$j" copies)); nominal $NOMINAL_GBS GB/s"
        BW_LINE="$BW_LINE (device attributes: 2 x memory clock x bus width); $(jget "$j" sms) SMs,"
        BW_LINE="$BW_LINE L2 $(($(jget "$j" l2_bytes) >> 20)) MiB"
        record "bandwidth" "ok: copy $COPY_GBS GB/s, nominal $NOMINAL_GBS GB/s" $(($(now_s) - t0)) bandwidth.json
    else
        record "bandwidth" "$(status_of $rc): $(head -c 160 "$LOGS/bandwidth.log")" $(($(now_s) - t0)) bandwidth.log
    fi
}

# ---------------------------------------------------------------- kernel tests


kernel_tests() {
    local t bin log t0 rc note
    for t in $DEVICE_TESTS; do
        t0=$(now_s)
        rc=0
        if [ "$DRY" = 1 ]; then
            # the device binary cannot run without a GPU: its emulated twin stands in, so that the
            # phase and its parsing run; the device binary must at least exist
            bin=$ABS_BUILD/tests/$t
            note="emulated (dry run); device binary built"
            [ -x "$ABS_BUILD/tests/device/$t" ] || note="emulated (dry run); device binary MISSING"
        else
            bin=$ABS_BUILD/tests/device/$t
            note="on the device"
        fi
        log=kernels-$t.log
        if [ ! -x "$bin" ]; then
            record "kernels: $t" "skipped: $bin not built" 0 ""
            continue
        fi
        rm -f "$LOGS/digest-$t-run.txt" "$LOGS/digest-$t-emu.txt"
        LLMM_KERNEL_DIGEST=$LOGS/digest-$t-run.txt timeout 60 "$bin" > "$LOGS/$log" 2>&1 || rc=$?
        note="$note; $(digest_compare "$t")"
        record "kernels: $t" "$(status_of $rc): $(cmocka_counts "$LOGS/$log"); $note" $(($(now_s) - t0)) "$log"
    done
}

# The test's read-backs on the device against the same test on the strict emulator
# (tests/cuda/device_test_util.h LLMM_KERNEL_DIGEST): how many arrays are equal bit for bit, and
# the first that is not. The emulator moves transcendentals within CUDA's ulp bounds, so arrays
# through expf/tanhf/sinf/cosf may differ while both pass their bounds; an integer or
# exactly-rounded result that differs is a finding.
digest_compare() { # test
    local t=$1 emu=$ABS_BUILD/tests/$1 run=$LOGS/digest-$1-run.txt ref=$LOGS/digest-$1-emu.txt
    [ -x "$emu" ] || { echo "no emulated twin to compare with"; return; }
    LLMM_KERNEL_DIGEST=$ref timeout 120 "$emu" > "$LOGS/kernels-$t-emu.log" 2>&1 || true
    [ -s "$run" ] && [ -s "$ref" ] || { echo "no read-backs recorded"; return; }
    paste -d ' ' "$run" "$ref" | awk -v nr="$(wc -l < "$run")" -v ne="$(wc -l < "$ref")" '
        { if ($1 == $3 && $2 == $4) same++; else if (!first) first = NR }
        END { printf "device = emulator: %d of %d read-backs bit for bit", same, nr
              if (nr != ne) printf " (emulator: %d read-backs)", ne
              if (first) printf ", first difference: read-back %d", first }'
}

# The four-thread test (tests/cuda/test_cuda_module.c test_four_threads_capture_and_load) on the
# module under test: two threads warm up and capture graphs while two load a second model and
# decode, each equal to the same run alone, no backend error, graphs still on.
concurrency() {
    local t0 rc=0 module bin=$ABS_BUILD/tests/test_cuda_module
    t0=$(now_s)
    module=$ABS_BUILD/libllmmini-cuda.so
    [ "$DRY" = 1 ] && module=$ABS_BUILD/libllmmini-cuda-emu.so
    if [ ! -x "$bin" ] || [ ! -f "$module" ]; then
        record "concurrency" "skipped: test_cuda_module or $(basename "$module") not built" 0 ""
        return
    fi
    LLMM_CUDA_EMU_MODULE=$module timeout 180 "$bin" test_four_threads_capture_and_load \
        > "$LOGS/concurrency.log" 2>&1 || rc=$?
    record "concurrency" "$(status_of $rc): $(cmocka_counts "$LOGS/concurrency.log"); $(basename "$module"); \
$(grep -m1 -E '^4 threads' "$LOGS/concurrency.log" || true)" $(($(now_s) - t0)) concurrency.log
}

# compute-sanitizer's own summary line (memcheck: ERROR SUMMARY; racecheck: RACECHECK SUMMARY).
sanitizer_summary() {
    grep -E '(ERROR|RACECHECK) SUMMARY' "$1" | tail -n 1 | sed 's/^=* *//'
}

SANITIZER_EXIT=86
sanitizers() {
    local san tool t bin log t0 rc left limit cand
    san=$(command -v compute-sanitizer 2>/dev/null || true)
    for cand in "$CUDA_HOME/bin/compute-sanitizer" "$CUDA_HOME/compute-sanitizer/compute-sanitizer" \
        /opt/nvidia/compute-sanitizer/compute-sanitizer /usr/local/cuda/bin/compute-sanitizer; do
        [ -z "$san" ] && [ -x "$cand" ] && san=$cand
    done
    for tool in memcheck racecheck; do
        for t in $KERNEL_TESTS; do
            bin=$ABS_BUILD/tests/device/$t
            if [ "$DRY" = 1 ]; then
                record "$tool: $t" "skipped: dry run (compute-sanitizer ${san:-not found})" 0 ""
                continue
            elif [ -z "$san" ]; then
                record "$tool: $t" "skipped: compute-sanitizer not found (PATH, $CUDA_HOME)" 0 ""
                continue
            elif [ ! -x "$bin" ]; then
                record "$tool: $t" "skipped: $bin not built" 0 ""
                continue
            fi
            # the sanitizers share the time left before SANITIZE_END_S: the benchmarks must
            # still fit after them
            left=$((SANITIZE_END_S - ($(now_s) - T_START)))
            limit=$((left < 120 ? left : 120))
            if [ "$limit" -lt 15 ]; then
                record "$tool: $t" "skipped: time budget spent" 0 ""
                continue
            fi
            log=$tool-$t.log
            t0=$(now_s)
            rc=0
            timeout "$limit" "$san" --tool "$tool" --error-exitcode "$SANITIZER_EXIT" "$bin" > "$LOGS/$log" 2>&1 ||
                rc=$?
            local result
            case $rc in
                "$SANITIZER_EXIT") result="FAILED: $(sanitizer_summary "$LOGS/$log")" ;;
                0) result="ok: $(sanitizer_summary "$LOGS/$log"); tests $(cmocka_counts "$LOGS/$log")" ;;
                124 | 137) result="timed out after $limit s: $(sanitizer_summary "$LOGS/$log")" ;;
                *) result="FAILED (exit $rc): $(sanitizer_summary "$LOGS/$log"); tests $(cmocka_counts "$LOGS/$log")" ;;
            esac
            record "$tool: $t" "$result" $(($(now_s) - t0)) "$log"
        done
    done
}

# ---------------------------------------------------------------- the whole suite

make_test() {
    local t0 rc=0 module note summary failed module_result
    t0=$(now_s)
    if [ "$DEPS_OK" != 1 ]; then
        record "make test" "skipped: build dependencies missing" 0 ""
        return
    fi
    if [ "$DRY" = 1 ]; then
        module=$ABS_BUILD/libllmmini-cuda-emu.so
        note="module: emulated (dry run)"
    else
        module=$ABS_BUILD/libllmmini-cuda.so
        note="module: libllmmini-cuda.so on the device"
    fi
    # tests/cuda/test_cuda_module.c loads the module LLMM_CUDA_EMU_MODULE names (else the emulated one)
    LLMM_CUDA_EMU_MODULE=$module timeout 180 make -j"$JOBS" "${MAKE_ARGS[@]}" test > "$LOGS/make-test.log" 2>&1 ||
        rc=$?
    summary=$(grep -E '^test suites:' "$LOGS/make-test.log" | tail -n 1 || true)
    failed=$(sed -n 's|^FAILED: .*/||p' "$LOGS/make-test.log" | paste -sd ' ' -)
    awk '/^=== .*test_cuda_module$/ {on = 1; next} /^=== / {on = 0} on' "$LOGS/make-test.log" \
        > "$LOGS/test_cuda_module.log"
    module_result="not run"
    [ -s "$LOGS/test_cuda_module.log" ] && module_result=$(cmocka_counts "$LOGS/test_cuda_module.log")
    record "make test" \
        "$(status_of $rc): ${summary:-no summary}${failed:+ (failed: $failed)}; test_cuda_module: $module_result; $note" \
        $(($(now_s) - t0)) "make-test.log, test_cuda_module.log"
}

# ---------------------------------------------------------------- synthetic models

model_path() { echo "$MODELS/$1-$2.gguf"; }

# One model, written under a temporary name so that a stopped run leaves no partial file that a
# later run would take for a finished one.
synth_one() { # preset type
    local out
    out=$(model_path "$1" "$2")
    [ -s "$out" ] && { echo "cached: $out"; return 0; }
    # explicit returns: errexit does not hold inside a function called from an && list
    if [ "$2" = q4_k_m ]; then
        synth_one "$1" f16 || return 1
        "$MODELS/bin/llmmini-quantize" "$(model_path "$1" f16)" "$out.part" q4_k_m --threads "$JOBS" || return 1
    else
        "$MODELS/bin/llmmini-synth" -o "$out.part" --preset "$1" --type "$2" || return 1
    fi
    mv "$out.part" "$out"
}

# Per shape, F16 then its Q4_K_M (quantized from it) in one job and Q4_0 in another, all shapes
# at once: the CPU work overlaps the tests on the GPU.
synth_all() {
    local preset pids=() rc=0 p
    for preset in $SHAPES; do
        (synth_one "$preset" f16 && synth_one "$preset" q4_k_m) > "$LOGS/synth-$preset-f16-q4_k_m.log" 2>&1 &
        pids+=($!)
        synth_one "$preset" q4_0 > "$LOGS/synth-$preset-q4_0.log" 2>&1 &
        pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p" || rc=1; done
    echo "$SECONDS" > "$LOGS/synth-end"
    return $rc
}

SYNTH_PID=""
SYNTH_T0=0
synth_start() {
    SYNTH_T0=$(now_s)
    if [ ! -x "$ABS_BUILD/llmmini-synth" ] || [ ! -x "$ABS_BUILD/llmmini-quantize" ]; then
        return
    fi
    # private copies: the make test phase may relink the originals while they run
    mkdir -p "$MODELS/bin"
    cp "$ABS_BUILD/llmmini-synth" "$ABS_BUILD/llmmini-quantize" "$MODELS/bin/"
    synth_all &
    SYNTH_PID=$!
}

synth_wait() {
    local rc=0 waited_from
    waited_from=$(now_s)
    if [ -z "$SYNTH_PID" ]; then
        record "synthesis" "skipped: llmmini-synth/llmmini-quantize not built" 0 ""
        return
    fi
    wait "$SYNTH_PID" || rc=$?
    local sizes="" end path
    for preset in $SHAPES; do
        for type in $TYPES; do
            path=$(model_path "$preset" "$type")
            [ -s "$path" ] && sizes="$sizes $preset-$type $(stat -c %s "$path" | awk '{printf "%.1f", $1 / 1048576}') MiB;"
        done
    done
    end=$(cat "$LOGS/synth-end" 2>/dev/null || now_s)
    record "synthesis" \
        "$(status_of $rc):$sizes in the background during the tests; waited $(($(now_s) - waited_from)) s for it" \
        $((end - SYNTH_T0)) "synth-*.log"
}

# ---------------------------------------------------------------- benchmarks

BENCH_ROWS=()
BUDGET_SPENT=75

bench_one() { # preset type backend graphs(1/0) -> $LOGS/bench-...json
    local preset=$1 type=$2 backend=$3 graphs=$4 name module rc=0
    name=bench-$preset-$type-$backend-$([ "$graphs" = 1 ] && echo default || echo eager)
    if [ "$DRY" = 1 ]; then module=$ABS_BUILD/libllmmini-cuda-emu.so; else module=$ABS_BUILD/libllmmini-cuda.so; fi
    if [ $(($(now_s) - T_START)) -gt "$BUDGET_S" ]; then
        echo "skipped: time budget of $BUDGET_S s spent" > "$LOGS/$name.log"
        return "$BUDGET_SPENT"
    fi
    if [ "$graphs" = 1 ]; then
        env -u LLMM_CUDA_GRAPHS LLMM_CUDA_MODULE="$module" timeout 90 "$ABS_BUILD/llmmini-bench" \
            -m "$(model_path "$preset" "$type")" --backend "$backend" "${BENCH_ARGS[@]}" --json \
            > "$LOGS/$name.json" 2> "$LOGS/$name.log" || rc=$?
    else
        LLMM_CUDA_GRAPHS=0 LLMM_CUDA_MODULE="$module" timeout 90 "$ABS_BUILD/llmmini-bench" \
            -m "$(model_path "$preset" "$type")" --backend "$backend" "${BENCH_ARGS[@]}" --json \
            > "$LOGS/$name.json" 2> "$LOGS/$name.log" || rc=$?
    fi
    [ $rc = 0 ] || echo "exit $rc" >> "$LOGS/$name.log"
    return $rc
}

target_of() { # preset type -> target ms/token, or empty
    case "$1 $2" in
        "qwen2.5-0.5b q4_0") echo 1.0 ;;
        "llama-3.2-1b q4_k_m") echo 1.5 ;;
        *) echo "" ;;
    esac
}

# The bench's own message of why it stopped, else the log's last line.
bench_error() {
    { grep -m1 '^llmmini-bench:' "$1" || tail -n 1 "$1"; } 2>/dev/null | sed 's/^llmmini-bench: //' | cut -c1-80
}

# The roofline estimate of a model on this device (make cuda-profile, kept in
# docs/cuda-roofline.json; docs/performance.md "CUDA roofline estimate"): decode ms/token or the
# 512-token prompt's ms, from the H200 or Orin column when the device's name says so, else H100's;
# "-" where the file has no such model (the dry run's tiny shape).
ESTIMATES=$ROOT/docs/cuda-roofline.json
estimate_of() { # preset type phase(decode|prefill512)
    python3 - "$ESTIMATES" "$1" "$2" "$3" "${DEVICE:-}" 2>/dev/null <<'EOF' || echo -
import json, sys
path, model, weight_type, phase, device = sys.argv[1:6]
column = "est_ms_h200" if "H200" in device else "est_ms_orin" if "Orin" in device else "est_ms_h100"
rows = [m for m in json.load(open(path))["models"]
        if m["model"] == model and m["type"].lower() == weight_type.lower() and m["phase"] == phase]
print("%.3f" % rows[0][column] if rows else "-")
EOF
}

# One row of the benchmark table from the graph and the eager run of one model.
bench_row() { # preset type backend
    local preset=$1 type=$2 backend=$3 g e
    g=$LOGS/bench-$preset-$type-$backend-default.json
    e=$LOGS/bench-$preset-$type-$backend-eager.json
    awk -v preset="$preset" -v type="$type" -v backend="$backend" -v target="$(target_of "$preset" "$type")" \
        -v est="$(estimate_of "$preset" "$type" decode)" \
        -v gd="$(jget "$g" decode_tok_s)" -v ed="$(jget "$e" decode_tok_s)" -v tt="$(jget "$g" ttft_ms)" \
        -v w="$(jget "$g" bytes_per_token_estimate)" -v wk="$(jget "$g" decode_bytes_per_token)" \
        -v bw="$COPY_GBS" -v gerr="$(bench_error "${g%.json}.log")" -v rep="$(jget "$g" graph_replays)" 'BEGIN {
        num = "^[-+0-9.eE]+$"
        ok = gd ~ num && gd > 0
        ms = ok ? 1000 / gd : 0
        ems = (ed ~ num && ed > 0) ? 1000 / ed : 0
        printf "| %s | %s | %s | ", preset, toupper(type), backend
        if (!ok) {
            printf "FAILED: %s | %s | - | - | - | - | - | - | %s |\n", gerr, est, (target != "" ? "<= " target : "-")
            exit
        }
        printf "%.3f | %s | %s | ", ms, est, (ems > 0 ? sprintf("%.3f", ems) : "-")
        printf "%s | %s | ", (ems > 0 ? sprintf("%.2fx", ems / ms) : "-"), (rep ~ num ? rep : "-")
        printf "%.2f | %.1f (%.1f) | ", tt, w / 1048576, wk / 1048576
        printf "%s | ", (bw ~ num && bw > 0 ? sprintf("%.1f %%", 100 * wk / (ms * 1e-3) / (bw * 1e9)) : "n/a")
        printf "%s |\n", (target != "" ? sprintf("<= %s (%s)", target, ms <= target ? "met" : "missed") : "-")
    }'
}

benchmarks() {
    local preset type t0 rc backends order=()
    # the two targets first, so that a spent budget drops the others
    for preset in $SHAPES; do for type in $TYPES; do order+=("$preset $type"); done; done
    mapfile -t order < <(printf '%s\n' "${order[@]}" |
        awk '/qwen2.5-0.5b q4_0|llama-3.2-1b q4_k_m/ {print; next} {rest[n++] = $0}
            END {for (i = 0; i < n; i++) print rest[i]}' | tr ' ' ':')
    if [ "$DRY" = 1 ]; then backends="cpu cuda"; else backends="cuda"; fi
    for entry in "${order[@]}"; do
        preset=${entry%%:*}
        type=${entry#*:}
        for backend in $backends; do
            t0=$(now_s)
            if [ ! -s "$(model_path "$preset" "$type")" ]; then
                record "bench: $preset $type $backend" "skipped: no model (synthesis failed)" 0 ""
                continue
            fi
            rc=0
            bench_one "$preset" "$type" "$backend" 1 || rc=$?
            if [ $rc = "$BUDGET_SPENT" ]; then
                record "bench: $preset $type $backend" "skipped: time budget of $BUDGET_S s spent" 0 ""
                continue
            fi
            local result note=""
            result=$(status_of $rc)
            if [ $rc = 0 ] && [ "$backend" = cuda ]; then
                bench_one "$preset" "$type" "$backend" 0 || rc=$?
                case $rc in
                    0) ;;
                    "$BUDGET_SPENT") note="; eager run skipped: time budget spent" ;;
                    *) result="FAILED: eager run (LLMM_CUDA_GRAPHS=0): $(status_of $rc)" ;;
                esac
            fi
            record "bench: $preset $type $backend" "$result$note" $(($(now_s) - t0)) "bench-$preset-$type-$backend-*"
            BENCH_ROWS+=("$(bench_row "$preset" "$type" "$backend")")
        done
    done
}

# ---------------------------------------------------------------- prefill and batches

PREFILL_ROWS=()
GEMM_PATHS="gemv lt int8" # the LLMM_CUDA_GEMM values: the prompt matmul paths compared

# One llmmini-bench run on the CUDA module (the emulated one when dry) -> $LOGS/NAME.json; extra
# environment first (VAR=value ...), then --, then bench arguments.
bench_cuda() { # name [VAR=value ...] -- args...
    local name=$1 module envs=() rc=0
    shift
    while [ "$1" != -- ]; do envs+=("$1"); shift; done
    shift
    if [ "$DRY" = 1 ]; then module=$ABS_BUILD/libllmmini-cuda-emu.so; else module=$ABS_BUILD/libllmmini-cuda.so; fi
    if [ $(($(now_s) - T_START)) -gt "$BUDGET_S" ]; then
        echo "skipped: time budget of $BUDGET_S s spent" > "$LOGS/$name.log"
        return "$BUDGET_SPENT"
    fi
    env "${envs[@]}" LLMM_CUDA_MODULE="$module" timeout 120 "$ABS_BUILD/llmmini-bench" --backend cuda "$@" \
        --no-bandwidth --json > "$LOGS/$name.json" 2> "$LOGS/$name.log" || rc=$?
    [ $rc = 0 ] || echo "exit $rc" >> "$LOGS/$name.log"
    return $rc
}

# A number from a bench JSON, or "-".
jnum() { local v; v=$(jget "$1" "$2"); case $v in "" | null) echo - ;; *) printf '%.*f' "${3:-1}" "$v" ;; esac; }

prefill_and_batches() {
    local entry preset type m t0 p s path failed=0 n_gen=16
    [ "$DRY" = 1 ] && n_gen=4
    for entry in $PREFILL_MODELS; do
        preset=${entry%%:*}
        type=${entry#*:}
        m=$(model_path "$preset" "$type")
        t0=$(now_s)
        if [ ! -s "$m" ]; then
            record "prefill: $preset $type" "skipped: no model (synthesis failed)" 0 ""
            continue
        fi
        for p in $PREFILL_PROMPTS; do
            bench_cuda "prefill-$preset-$type-p$p" -- -m "$m" -p "$p" -n "$n_gen" -r 3 || failed=1
        done
        for s in $PARALLEL_SEQS; do
            [ "$s" = 1 ] && continue # the single sequence is the 128-token run's decode
            bench_cuda "parallel-$preset-$type-s$s" -- -m "$m" -p 128 -n 32 -r 3 --parallel "$s" || failed=1
        done
        for path in $GEMM_PATHS; do
            p=$(echo "$PREFILL_PROMPTS" | awk '{print ($2 != "" ? $2 : $1)}')
            bench_cuda "gemm-$preset-$type-$path" LLMM_CUDA_GEMM=$path -- -m "$m" -p "$p" -n "$n_gen" -r 3 || failed=1
        done
        record "prefill: $preset $type" "$([ $failed = 0 ] && echo ok || echo "FAILED (a run failed: see its log)")" \
            $(($(now_s) - t0)) "prefill-$preset-$type-* parallel-$preset-$type-* gemm-$preset-$type-*"
        PREFILL_ROWS+=("$(prefill_row "$preset" "$type")")
    done
}

prefill_row() { # preset type
    local preset=$1 type=$2 p s path row first one many
    row="| $preset | ${type^^} |"
    for p in $PREFILL_PROMPTS; do
        row+=" $(jnum "$LOGS/prefill-$preset-$type-p$p.json" ttft_ms 2) /"
        row+=" $(jnum "$LOGS/prefill-$preset-$type-p$p.json" prefill_tok_s 0) |"
    done
    first=$(echo "$PREFILL_PROMPTS" | awk '{print $1}')
    one=$(jget "$LOGS/prefill-$preset-$type-p$first.json" decode_tok_s)
    for s in $PARALLEL_SEQS; do
        if [ "$s" = 1 ]; then row+=" $(jnum "$LOGS/prefill-$preset-$type-p$first.json" decode_tok_s 0) |"
        else row+=" $(jnum "$LOGS/parallel-$preset-$type-s$s.json" aggregate_tok_s 0) |"; fi
    done
    s=$(echo "$PARALLEL_SEQS" | awk '{print $NF}')
    many=$(jget "$LOGS/parallel-$preset-$type-s$s.json" aggregate_tok_s)
    row+=" $(awk -v a="$many" -v b="$one" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%.1fx", a / b; else printf "-" }') |"
    for path in $GEMM_PATHS; do row+=" $(jnum "$LOGS/gemm-$preset-$type-$path.json" prefill_tok_s 0) |"; done
    row+=" $(estimate_of "$preset" "$type" prefill512) |"
    echo "$row"
}

prefill_table() {
    local p s path head="| shape | type |" sep="|---|---|"
    for p in $PREFILL_PROMPTS; do head+=" TTFT ms / prompt tok/s ($p) |"; sep+="---|"; done
    for s in $PARALLEL_SEQS; do head+=" $s seq tok/s |"; sep+="---|"; done
    head+=" $(echo "$PARALLEL_SEQS" | awk '{print $NF}') / 1 |"
    sep+="---|"
    for path in $GEMM_PATHS; do head+=" $path |"; sep+="---|"; done
    head+=" estimate ms (512) |"
    sep+="---|"
    echo "$head"
    echo "$sep"
    printf '%s\n' "${PREFILL_ROWS[@]}"
    echo
    echo "llmmini-bench --backend cuda -p P -n 16 -r 3 (medians): TTFT = prefill of the prompt plus its first"
    echo "token; N seq tok/s: --parallel N -p 128 -n 32, the aggregate decode rate of N sequences forked from one"
    echo "prompt (1: the single-sequence decode); gemv / lt (cuBLASLt) / int8: prompt tok/s of the middle prompt with"
    echo "LLMM_CUDA_GEMM forcing that path for every prompt matmul (default: the rule in docs/performance.md)."
    echo "Targets on an H200: 512-token prefill >= 20,000 tok/s (0.5B Q4_0), TTFT(512) <= 30 ms (1B Q4_K_M),"
    echo "64 sequences >= 10x one. estimate ms (512): the roofline model's 512-token prompt (make cuda-profile,"
    echo "docs/cuda-roofline.json), beside the measured TTFT of the same prompt length."
}

# ---------------------------------------------------------------- summary

write_summary() {
    local i rev
    rev=$(git -C "$ROOT" describe --always --dirty 2>/dev/null || echo unknown)
    {
        echo "## llmmini GPU check"
        echo
        echo "Device: $DEVICE; commit $rev; $(date -u '+%Y-%m-%d %H:%M UTC'); total $((SECONDS - T_START)) s."
        [ -z "$DEVICE_LINE" ] ||
            echo "nvidia-smi (name, compute capability, driver, memory, max SM and memory clocks): $DEVICE_LINE."
        [ "$DRY" != 1 ] || echo "DRY RUN: no GPU; the kernel tests and the module are the emulated ones, the models tiny."
        [ "$DRY" = 1 ] || [ -z "$BW_LINE" ] || echo "Memory bandwidth: $BW_LINE."
        echo
        echo "| phase | result | s | log |"
        echo "|---|---|---|---|"
        for i in "${!PH_NAME[@]}"; do
            echo "| ${PH_NAME[$i]} | ${PH_RESULT[$i]//|//} | ${PH_SECS[$i]} | ${PH_LOG[$i]} |"
        done
        if [ ${#BENCH_ROWS[@]} -gt 0 ]; then
            echo
            echo "| shape | type | backend | decode ms/token | estimate ms/token | eager ms/token | graph gain | graph replays" \
                "| TTFT ms ($PROMPT_TOKENS) | MiB/token weights (+KV) | of measured bandwidth | target ms/token |"
            echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
            printf '%s\n' "${BENCH_ROWS[@]}"
            echo
            echo "llmmini-bench ${BENCH_ARGS[*]} --backend B --json per row. decode ms/token = 1000 / the median"
            echo "decode tok/s over the repeats (a step with its logits read back and the host's argmax), with CUDA"
            echo "graphs as the module does by default; eager: the same with LLMM_CUDA_GRAPHS=0; graph gain = eager /"
            echo "graphs; graph replays: decode steps the graph run replayed (0: graphs never used). TTFT: prefill of the whole prompt plus the first token (median). MiB/token: the bench's"
            echo "estimate of the weight bytes one decode step reads, and with the K/V read at the mean position; of"
            echo "measured bandwidth = those bytes / decode time / the copy bandwidth above. Targets are benchmarks"
            echo "for an H200, not pass/fail. estimate: the roofline model of make cuda-profile (docs/cuda-roofline.json,"
            echo "a decode step at position 0 from emulator counters; docs/performance.md \"CUDA roofline estimate\"): the"
            echo "first GPU run calibrates it."
        fi
        if [ ${#PREFILL_ROWS[@]} -gt 0 ]; then
            echo
            prefill_table
        fi
    } > "$SUMMARY.part"
    mv "$SUMMARY.part" "$SUMMARY"
    save_logs
}

# ---------------------------------------------------------------- LoRA

# llmmini-bench --lora on the CUDA module: four rank-16 F16 adapters (llmmini-synth) on the
# first prefill model (the Qwen2.5-0.5B Q4_0 shape; the tiny one when dry), one sequence and 16
# sequences; the table lands in lora.log.
lora_adapters() {
    local model t0 rc=0 module i files=() entry=${PREFILL_MODELS%% *} n_gen=32
    [ "$DRY" = 1 ] && n_gen=4
    model=$(model_path "${entry%%:*}" "${entry#*:}")
    t0=$(now_s)
    if [ ! -s "$model" ]; then record "lora" "skipped: no model (synthesis failed)" 0 ""; return; fi
    if [ $(($(now_s) - T_START)) -gt "$BUDGET_S" ]; then
        record "lora" "skipped: time budget of $BUDGET_S s spent" 0 ""
        return
    fi
    for i in 1 2 3 4; do
        "$MODELS/bin/llmmini-synth" --lora-base "$model" --lora-rank 16 --lora-type f16 --lora-seed "$i" \
            --lora-out "$MODELS/lora-$i.gguf" >> "$LOGS/lora-synth.log" 2>&1 || rc=$?
        files+=(--lora "$MODELS/lora-$i.gguf")
    done
    if [ $rc != 0 ]; then record "lora" "FAILED: adapter synthesis (exit $rc)" $(($(now_s) - t0)) "lora-synth.log"; return; fi
    if [ "$DRY" = 1 ]; then module=$ABS_BUILD/libllmmini-cuda-emu.so; else module=$ABS_BUILD/libllmmini-cuda.so; fi
    LLMM_CUDA_MODULE="$module" timeout 120 "$ABS_BUILD/llmmini-bench" --backend cuda -m "$model" "${files[@]}" \
        --parallel 16 -p 64 -n "$n_gen" -r 3 --no-bandwidth > "$LOGS/lora.log" 2>&1 || rc=$?
    record "lora: $entry, rank 16 F16, 1 and 16 sequences" "$(status_of $rc)" $(($(now_s) - t0)) "lora*.log"
}

# ---------------------------------------------------------------- run

preflight
build
synth_start
bandwidth
kernel_tests
concurrency
make_test
sanitizers
synth_wait
benchmarks
prefill_and_batches
lora_adapters
write_summary
if [ -z "${OUT:-}" ]; then echo "gpu-check: logs in $LOGS" >&2; fi
echo
cat "$SUMMARY"
exit "$FAILED"
