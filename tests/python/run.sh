#!/bin/sh
# The Python package's suite (tests/python/test_*.py, stdlib unittest) with the system python3,
# against this build's shared library and the package in place (PYTHONPATH). Run by make test
# from the repository root; LLMM_BUILD names the build.
set -eu
build=${LLMM_BUILD:-build}
lib="$build/libllmmini.so.0"
if [ -n "${TEST_RUNNER:-}" ]; then
    echo "python: SKIPPED: a cross build's library cannot load into this machine's python3"
    exit 0
fi
if ldd "$lib" 2>/dev/null | grep -q libasan; then
    echo "python: SKIPPED: a sanitizer build's library cannot be loaded by an uninstrumented python3"
    exit 0
fi
py=/usr/bin/python3
[ -x "$py" ] || py=python3
LLMMINI_LIB="$(cd "$build" && pwd)/libllmmini.so.0"
PYTHONPATH="bindings/python:tests/python${PYTHONPATH:+:$PYTHONPATH}"
export LLMMINI_LIB PYTHONPATH
exec "$py" -m unittest discover -s tests/python -t tests/python "$@"
