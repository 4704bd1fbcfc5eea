#!/bin/sh
# The Python package's suite (tests/python/test_*.py, stdlib unittest) with the system python3,
# against this build's shared library and the package in place (PYTHONPATH). Run by make test
# from the repository root; LLMM_BUILD names the build.
set -eu
what="python"
. tests/python/preflight.sh
LLMMINI_LIB="$(cd "$build" && pwd)/libllmmini.so.0"
PYTHONPATH="bindings/python:tests/python${PYTHONPATH:+:$PYTHONPATH}"
export LLMMINI_LIB PYTHONPATH
exec "$py" -m unittest discover -s tests/python -t tests/python "$@"
