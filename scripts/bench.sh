#!/bin/sh
# The standard benchmark behind `make bench`: a Qwen2.5-0.5B-shaped model (synthesized once
# into $BUILD/bench/ with the real Qwen2 tokenizer when $LLMM_SHARED has it) in F16 and three
# quantizations, and one hybrid (the LFM2-1.2B shape in Q4_0: short convolutions beside
# attention), each benchmarked with every core, plus a cold-start run; the results replace
# the block between `<!-- bench:begin -->` and `<!-- bench:end -->` of docs/performance.md.
#
# Environment: BUILD (build), LLMM_SHARED (../shared), BENCH_THREADS (all online CPUs),
# BENCH_ARGS (-p 512 -n 64 -r 3), BENCH_DOC (docs/performance.md), BENCH_MAX_S (240),
# BENCH_SLOW_ARGS (-p 64 -n 16 -r 1).
# BENCH_QUICK=1 runs -p 32 -n 8 -r 1 and, unless BENCH_DOC is set, leaves the document alone:
# a quick run checks that the pipeline works, its figures are not ones to publish. Only sh,
# awk, sed and coreutils are needed.
set -eu

BUILD=${BUILD:-build}
SHARED=${LLMM_SHARED:-../shared}
DIR=$BUILD/bench
THREADS=${BENCH_THREADS:-$(nproc 2>/dev/null || getconf _NPROCESSORS_ONLN)}
QUICK=${BENCH_QUICK:-0}
if [ "$QUICK" = 1 ]; then
    ARGS=${BENCH_ARGS:--p 32 -n 8 -r 1}
    DOC=${BENCH_DOC:-}
else
    ARGS=${BENCH_ARGS:--p 512 -n 64 -r 3}
    DOC=${BENCH_DOC:-docs/performance.md}
fi
PRESET=qwen2.5-0.5b
HYBRID=lfm2-1.2b
VOCAB=$SHARED/vocab/ggml-vocab-qwen2.gguf
TYPES="f16 q4_0 q8_0 q4_k_m"
COLD_ARGS="-p 12 -n 1 -r 1 --no-bandwidth"
# What an app feels on launch: llmmini-run loads the model and prints the first token of this
# prompt (12 tokens with the Qwen2 tokenizer), nothing more; the bench's cold row above also
# runs an untimed warm-up prompt and a decode step, which llmmini-run does not.
COLD_PROMPT="Once upon a time there was a little girl named Lily who"
# A type whose full run would exceed BENCH_MAX_S seconds (estimated from a short probe; a
# type without SIMD kernels runs at scalar speed) is measured with SLOW_ARGS instead, and its
# row says so: one slow kernel must not turn `make bench` into an hour on a 2-core machine.
MAX_S=${BENCH_MAX_S:-240}
SLOW_ARGS=${BENCH_SLOW_ARGS:--p 64 -n 16 -r 1}
PROBE_ARGS="-p 16 -n 4 -r 1 --no-bandwidth"

# The load at the start tells a reader whether other jobs shared the cores during the run.
load_start=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo unknown)

for tool in llmmini-synth llmmini-quantize llmmini-bench; do
    [ -x "$BUILD/$tool" ] || { echo "bench.sh: $BUILD/$tool is missing; run make first" >&2; exit 1; }
done
mkdir -p "$DIR"
COMMANDS=$DIR/commands.txt
: > "$COMMANDS"

# Runs a command after recording it, so the document lists exactly what produced its figures.
run() {
    echo "$*" >> "$COMMANDS"
    echo "+ $*" >&2
    "$@"
}

# One value of the bench's single-line JSON ("null" when it was not measured).
jget() {
    sed -n "s/.*\"$2\":\([^,}]*\).*/\1/p" "$1"
}

now_ms() {
    t=$(date +%s%N)
    case $t in *N) echo $(( $(date +%s) * 1000 )) ;; *) echo $(( t / 1000000 )) ;; esac
}

# The models are inputs, not results: made once, and rebuilt only when missing. The file being
# written is removed if the script stops before it is complete, so a partial model is never
# taken for a cached one.
partial=""
trap 'if [ -n "$partial" ]; then rm -f "$partial"; fi' EXIT
trap 'exit 130' INT TERM
F16=$DIR/$PRESET-f16.gguf
if [ ! -f "$F16" ]; then
    if [ -f "$VOCAB" ]; then vocab_opt="--vocab $VOCAB"; else vocab_opt=""; fi
    partial=$F16
    # shellcheck disable=SC2086
    run "$BUILD/llmmini-synth" -o "$F16" --preset $PRESET --type f16 $vocab_opt
    partial=""
else
    echo "$BUILD/llmmini-synth -o $F16 --preset $PRESET --type f16 ... (cached from an earlier run)" >> "$COMMANDS"
fi
for t in $TYPES; do
    [ "$t" = f16 ] && continue
    out=$DIR/$PRESET-$t.gguf
    if [ ! -f "$out" ] || [ "$F16" -nt "$out" ]; then
        partial=$out
        run "$BUILD/llmmini-quantize" "$F16" "$out" "$t" --threads "$THREADS" >&2
        partial=""
    else
        echo "$BUILD/llmmini-quantize $F16 $out $t (cached from an earlier run)" >> "$COMMANDS"
    fi
done
HYBRID_Q4=$DIR/$HYBRID-q4_0.gguf
if [ ! -f "$HYBRID_Q4" ]; then
    partial=$HYBRID_Q4
    run "$BUILD/llmmini-synth" -o "$HYBRID_Q4" --preset $HYBRID --type q4_0
    partial=""
else
    echo "$BUILD/llmmini-synth -o $HYBRID_Q4 --preset $HYBRID --type q4_0 (cached from an earlier run)" >> "$COMMANDS"
fi

# Seconds the bench would take with the given -p/-n/-r at the probe's speeds.
estimate_s() { # probe.json args...
    f=$1
    shift
    echo "$*" | awk -v pf="$(jget "$f" prefill_tok_s)" -v dc="$(jget "$f" decode_tok_s)" '{
        p = 512; n = 64; r = 3
        for (i = 1; i < NF; i++) {
            if ($i == "-p") p = $(i + 1)
            if ($i == "-n") n = $(i + 1)
            if ($i == "-r") r = $(i + 1)
        }
        printf "%d\n", (pf > 0 && dc > 0) ? r * (p / pf + n / dc) : 0
    }'
}

: > "$DIR/reduced.txt"
bench_model() { # model tag: result-<tag>.json, shortened (and listed) when the probe says it is slow
    model=$1
    t=$2
    args=$ARGS
    if [ "$QUICK" != 1 ]; then
        # shellcheck disable=SC2086
        run "$BUILD/llmmini-bench" -m "$model" -t "$THREADS" $PROBE_ARGS --json > "$DIR/probe-$t.json"
        # shellcheck disable=SC2086
        est=$(estimate_s "$DIR/probe-$t.json" $ARGS)
        if [ "$est" -gt "$MAX_S" ]; then
            echo "bench.sh: $t would take about $est s with $ARGS; using $SLOW_ARGS" >&2
            echo "$t $est" >> "$DIR/reduced.txt"
            args=$SLOW_ARGS
        fi
    fi
    # shellcheck disable=SC2086
    run "$BUILD/llmmini-bench" -m "$model" -t "$THREADS" $args --json > "$DIR/result-$t.json"
}
for t in $TYPES; do
    bench_model "$DIR/$PRESET-$t.gguf" "$t"
done
bench_model "$HYBRID_Q4" "$HYBRID-q4_0"

start=$(now_ms)
# shellcheck disable=SC2086
run "$BUILD/llmmini-bench" -m "$DIR/$PRESET-q4_0.gguf" -t "$THREADS" $COLD_ARGS --json > "$DIR/result-cold.json"
cold_wall_ms=$(( $(now_ms) - start ))
start=$(now_ms)
echo "$BUILD/llmmini-run -m $DIR/$PRESET-q4_0.gguf -t $THREADS -p '$COLD_PROMPT' -n 1 --temp 0" >> "$COMMANDS"
"$BUILD/llmmini-run" -m "$DIR/$PRESET-q4_0.gguf" -t "$THREADS" -p "$COLD_PROMPT" -n 1 --temp 0 > /dev/null
app_cold_ms=$(( $(now_ms) - start ))

row() { # label type result.json
    f=$3
    awk -v label="$1" -v type="$2" -v threads="$THREADS" \
        -v fb="$(jget "$f" file_bytes)" -v pf="$(jget "$f" prefill_tok_s)" -v dc="$(jget "$f" decode_tok_s)" \
        -v bw="$(jget "$f" bandwidth_gb_s)" -v tr="$(jget "$f" stream_triad_gb_s)" \
        -v tp="$(jget "$f" stream_triad_paired_gb_s)" -v fa="$(jget "$f" bandwidth_fraction_after)" \
        -v fr="$(jget "$f" bandwidth_fraction)" -v ld="$(jget "$f" load_ms)" -v tt="$(jget "$f" ttft_ms)" \
        -v rd="$(jget "$f" measured_gb_s)" -v rss="$(jget "$f" peak_rss_bytes)" -v cold="${4:-0}" 'BEGIN {
        num = "^[-+0-9.eE]+$"
        mib = fb / 1048576
        printf "| %s | %s | %.0f | %d | ", label, type, mib, threads
        if (cold) printf "- | - | - | - | - | - | - | - | - | "
        else printf "%s | %s | %s | %s | %s | %s | %s | %s | %s | ", \
            (pf ~ num ? sprintf("%.1f", pf) : "-"), (dc ~ num ? sprintf("%.1f", dc) : "-"), \
            (bw ~ num ? sprintf("%.1f", bw) : "-"), (tp ~ num ? sprintf("%.1f", tp) : "-"), \
            (fr ~ num ? sprintf("%.0f %%", 100 * fr) : "-"), (tr ~ num ? sprintf("%.1f", tr) : "-"), \
            (fa ~ num ? sprintf("%.0f %%", 100 * fa) : "-"), (rd ~ num ? sprintf("%.1f", rd) : "-"), \
            (rd ~ num && bw ~ num && rd > 0 ? sprintf("%.0f %%", 100 * bw / rd) : "-")
        printf "%.0f | %.0f | %.2f |\n", ld, tt, (fb > 0 ? rss / fb : 0)
    }'
}

cpu=$(sed -n 's/^model name[[:space:]]*:[[:space:]]*//p' /proc/cpuinfo 2>/dev/null | head -n 1)
rev=$(git describe --always --dirty 2>/dev/null || echo unknown)
vocab_note="a synthetic vocabulary of the same size"
[ -f "$VOCAB" ] && vocab_note="the Qwen2 tokenizer copied from \`vocab/ggml-vocab-qwen2.gguf\`"
BLOCK=$DIR/block.md
{
    echo "Generated by \`make bench\` (scripts/bench.sh) on $(date -u '+%Y-%m-%d %H:%M UTC'), commit $rev;"
    echo "CPU: ${cpu:-unknown}, $THREADS threads (all online CPUs); \`llmmini-bench $ARGS\`; load average"
    echo "$load_start at the start, $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo unknown) at the end."
    [ "$QUICK" = 1 ] && echo "QUICK RUN (BENCH_QUICK=1): few tokens and one repeat; a pipeline check, not a measurement."
    echo "Model: the Qwen2.5-0.5B shape (\`llmmini-synth --preset $PRESET\`: 896 x 24, 14/2 heads, ff 4864,"
    echo "tied embeddings) with seeded random weights and $vocab_note. The hybrid row: the LFM2-1.2B"
    echo "shape (\`--preset $HYBRID\`: 2048 x 16, 6 attention layers and 10 gated short convolutions, 65536"
    echo "synthetic vocabulary), Q4_0 from llmmini-synth directly."
    echo
    echo "| model | type | file MiB | threads | prefill tok/s | decode tok/s | decode bandwidth GB/s | paired STREAM GB/s | bandwidth fraction | STREAM after GB/s | fraction of it | read GB/s | fraction of read | load ms | TTFT ms | peak RSS / file |"
    echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    for t in $TYPES; do
        label="Qwen2.5-0.5B shape"
        grep -q "^$t " "$DIR/reduced.txt" && label="$label, shorter run (see below)"
        row "$label" "$(echo "$t" | tr '[:lower:]' '[:upper:]')" "$DIR/result-$t.json"
    done
    label="LFM2-1.2B shape (hybrid)"
    grep -q "^$HYBRID-q4_0 " "$DIR/reduced.txt" && label="$label, shorter run (see below)"
    row "$label" "Q4_0" "$DIR/result-$HYBRID-q4_0.json"
    row "cold start, 12-token prompt" "Q4_0" "$DIR/result-cold.json" 1
    echo
    echo "Prefill and decode tok/s are medians over the repeats; TTFT is the prefill of the whole prompt"
    echo "plus the first token. Decode bandwidth = (weight bytes + K/V bytes) per token x decode tok/s;"
    echo "bandwidth fraction = median over the repeats of each decode repeat's bandwidth / the STREAM triad"
    echo "measured just before it (paired STREAM: their median; best of 3 passes each); STREAM after: one"
    echo "triad after the benchmark, best of 5 passes, and the median decode bandwidth over it. Read: a plain"
    echo "read of 1 GiB with the same threads after the benchmark (best of 5), and the decode bandwidth over"
    echo "it, for comparison with a workload that only reads, as decode does. Cold start:"
    echo "one llmmini-bench process that loads the Q4_0 file and runs a 12-token prompt (after an untimed"
    echo "warm-up prompt) and one decode step, ${cold_wall_ms} ms from process start to exit; \`llmmini-run -n 1\`,"
    echo "which loads the file and prints the first token of a 12-token prompt and nothing more (what an app"
    echo "feels on launch), ${app_cold_ms} ms from process start to exit (page cache warm: the file was just"
    echo "written or read)."
    [ -s "$DIR/reduced.txt" ] && echo
    while read -r t est; do
        echo "- $(echo "$t" | tr '[:lower:]' '[:upper:]'): a run with \`$ARGS\` would have taken about $est s (probe: \`$PROBE_ARGS\`), over"
        echo "  the ${MAX_S} s limit of one row, so it ran with \`$SLOW_ARGS\`: its kernels are the slow ones."
    done < "$DIR/reduced.txt"
    echo
    echo "Commands:"
    echo
    echo '```'
    cat "$COMMANDS"
    echo '```'
} > "$BLOCK"
cat "$BLOCK"

[ -n "$DOC" ] || exit 0
# Replace what lies between the markers, keep everything else byte for byte; a document
# without the markers gets them appended.
if ! grep -q '^<!-- bench:begin -->$' "$DOC" || ! grep -q '^<!-- bench:end -->$' "$DOC"; then
    printf '\n<!-- bench:begin -->\n<!-- bench:end -->\n' >> "$DOC"
fi
awk -v block="$BLOCK" '
    /^<!-- bench:begin -->$/ { print; while ((getline line < block) > 0) print line; skip = 1; next }
    /^<!-- bench:end -->$/ { skip = 0 }
    !skip { print }
' "$DOC" > "$DOC.tmp"
mv "$DOC.tmp" "$DOC"
echo "bench.sh: wrote the table into $DOC" >&2
