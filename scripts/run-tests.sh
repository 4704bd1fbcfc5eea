#!/bin/sh
# Runs every test binary given, even after a failure; exits non-zero if any failed. Prints each
# suite's wall time and, at the end, the slowest five (CI's time budget: README "Checks").
failed=0
passed=0
times=""
for t in "$@"; do
    echo "=== $t"
    start=$(date +%s)
    # TEST_RUNNER (e.g. "qemu-aarch64 -L /usr/aarch64-linux-gnu") runs cross-built tests
    # a shell suite (tests/test_examples.sh) runs under sh and applies TEST_RUNNER itself
    case "$t" in *.sh) runner=sh ;; *) runner=${TEST_RUNNER:-} ;; esac
    if $runner "$t"; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAILED: $t"; fi
    seconds=$(($(date +%s) - start))
    echo "--- $t: $seconds s"
    times="$times$seconds $t
"
done
echo "slowest suites (s):"
printf '%s' "$times" | sort -rn | head -5
echo "test suites: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
