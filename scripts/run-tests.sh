#!/bin/sh
# Runs every test binary given, even after a failure; exits non-zero if any failed.
failed=0
passed=0
for t in "$@"; do
    echo "=== $t"
    # TEST_RUNNER (e.g. "qemu-aarch64 -L /usr/aarch64-linux-gnu") runs cross-built tests
    # a shell suite (tests/test_examples.sh) runs under sh and applies TEST_RUNNER itself
    case "$t" in *.sh) runner=sh ;; *) runner=${TEST_RUNNER:-} ;; esac
    if $runner "$t"; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAILED: $t"; fi
done
echo "test suites: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
