# Sourced by the Python suites' scripts (run.sh, wheel_check.sh) with $what set to the suite's
# name: sets build, lib and py (the system python3), or ends the script with a SKIPPED line
# where this build's library cannot load into that python3.
build=${LLMM_BUILD:-build}
lib="$build/libllmmini.so.0"
if [ -n "${TEST_RUNNER:-}" ]; then
    echo "$what: SKIPPED: a cross build's library cannot load into this machine's python3"
    exit 0
fi
# gcc links its ASan runtime into the library; clang leaves the library's __asan_ symbols for
# the executable to bring
if ldd "$lib" 2>/dev/null | grep -q libasan || nm -D --undefined-only "$lib" 2>/dev/null | grep -q ' __asan_'; then
    echo "$what: SKIPPED: a sanitizer build's library cannot be loaded by an uninstrumented python3"
    exit 0
fi
py=/usr/bin/python3
[ -x "$py" ] || py=python3
