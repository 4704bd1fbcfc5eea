#!/bin/sh
# Runs every test given, even after a failure; exits non-zero if any failed. Prints each suite's
# output whole, its wall time and, at the end, the slowest five (CI's time budget: README "Checks").
#
# Test binaries run TEST_JOBS at a time (default: the online CPUs), each suite's output held
# until it ends so suites do not interleave; the suites named in TEST_FIRST (file names, slowest
# first) start first, so that the longest is not the last to begin. Shell suites (*.sh) run one
# at a time after the binaries: they install, build or time programs and must not compete.
# TEST_JOBS=1 runs everything in the order given.
#
# Internal form (how xargs calls it back): run-tests.sh --one RESULTS_DIR SUITE
set -u

run_one() {
    results=$1 t=$2
    log=$(mktemp "$results/log.XXXXXX") || exit 1
    # TEST_RUNNER (e.g. "qemu-aarch64 -L /usr/aarch64-linux-gnu") runs cross-built tests
    # a shell suite (tests/test_examples.sh) runs under sh and applies TEST_RUNNER itself
    case "$t" in *.sh) runner=sh ;; *) runner=${TEST_RUNNER:-} ;; esac
    start=$(date +%s)
    if $runner "$t" > "$log" 2>&1 < /dev/null; then status=passed; else status=failed; fi
    seconds=$(($(date +%s) - start))
    {
        echo "=== $t"
        cat "$log"
        [ "$status" = failed ] && echo "FAILED: $t"
        echo "--- $t: $seconds s"
    } | flock "$results/lock" cat
    # one short line per suite: an O_APPEND write this small is not split by other writers
    echo "$seconds $status $t" >> "$results/times"
    rm -f "$log"
}

if [ "${1:-}" = --one ]; then
    run_one "$2" "$3"
    exit 0
fi

jobs=${TEST_JOBS:-$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 1)}
results=$(mktemp -d "${TMPDIR:-/tmp}/llmm-tests.XXXXXX") || exit 1
trap 'rm -rf "$results"' EXIT
: > "$results/times"

binaries="" scripts=""
for t in "$@"; do
    case "$t" in *.sh) scripts="$scripts $t" ;; *) binaries="$binaries $t" ;; esac
done
if [ "$jobs" -gt 1 ]; then
    first="" rest=""
    for name in ${TEST_FIRST:-}; do
        for t in $binaries; do [ "${t##*/}" = "$name" ] && first="$first $t"; done
    done
    for t in $binaries; do
        case " ${TEST_FIRST:-} " in *" ${t##*/} "*) ;; *) rest="$rest $t" ;; esac
    done
    # shellcheck disable=SC2086 # the suites are paths without spaces (Makefile targets)
    printf '%s\n' $first $rest | xargs -P "$jobs" -n 1 sh "$0" --one "$results"
else
    for t in $binaries; do run_one "$results" "$t"; done
fi
for t in $scripts; do run_one "$results" "$t"; done

passed=$(grep -c ' passed ' "$results/times")
failed=$(grep -c ' failed ' "$results/times")
echo "slowest suites (s):"
sort -rn "$results/times" | head -5 | sed 's/ [a-z]* / /'
echo "test suites: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
