#!/bin/sh
# Runs every test binary given, even after a failure; exits non-zero if any failed.
failed=0
passed=0
for t in "$@"; do
    echo "=== $t"
    # TEST_RUNNER (e.g. "qemu-aarch64 -L /usr/aarch64-linux-gnu") runs cross-built tests;
    # scripts (*.sh) run on the host
    runner=${TEST_RUNNER:-}
    case $t in *.sh) runner=sh ;; esac
    if $runner "$t"; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAILED: $t"; fi
done
echo "test suites: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
