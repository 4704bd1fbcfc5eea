#!/bin/sh
# make python-wheel: the Python package as a wheel that carries the shared library (and the CUDA
# module when given), so that `pip install --no-index llmmini-*.whl` is all an app needs.
#   sh scripts/python-wheel.sh OUT_DIR LIBRARY [CUDA_MODULE]
# Built offline with the Debian python3's setuptools and wheel (python3-setuptools,
# python3-wheel), through setuptools' build backend directly: no pip, no index, no isolated
# build environment. The wheel is tagged py3-none-PLATFORM: pure Python (ctypes, any Python 3
# from 3.9), but the library inside is for this machine's platform. Prints the wheel's path.
set -eu
[ $# -ge 2 ] || { echo "usage: $0 OUT_DIR LIBRARY [CUDA_MODULE]" >&2; exit 2; }
out=$1 lib=$2 cuda=${3:-}
py=/usr/bin/python3
[ -x "$py" ] || py=python3
if ! "$py" -c 'import setuptools, wheel' 2>/dev/null; then
    echo "python-wheel: $py lacks setuptools or wheel (Debian: python3-setuptools python3-wheel)" >&2
    exit 1
fi
[ -f "$lib" ] || { echo "python-wheel: no library at $lib (run make first)" >&2; exit 1; }
mkdir -p "$out"
out=$(cd "$out" && pwd)
stage=$(mktemp -d "${TMPDIR:-/tmp}/llmmini-wheel.XXXXXX")
trap 'rm -rf "$stage"' EXIT
repo=$(cd "$(dirname "$0")/.." && pwd)
cp "$repo/bindings/python/pyproject.toml" "$repo/bindings/python/README.md" "$stage/"
mkdir "$stage/llmmini"
cp "$repo"/bindings/python/llmmini/*.py "$repo/bindings/python/llmmini/py.typed" "$stage/llmmini/"
# the package finds a libllmmini.so* next to itself first (llmmini/_lib.py), and the library
# finds the CUDA module next to itself (lib/backend/backend_module.c)
cp -L "$lib" "$stage/llmmini/libllmmini.so.0"
[ -z "$cuda" ] || cp -L "$cuda" "$stage/llmmini/libllmmini-cuda.so"
# without the debug sections (a tenth of the size); the build folder keeps the full library
if command -v "${STRIP:-strip}" >/dev/null 2>&1; then
    for so in "$stage"/llmmini/*.so*; do "${STRIP:-strip}" --strip-debug "$so"; done
fi
plat=$("$py" -c 'import sysconfig; print(sysconfig.get_platform().replace("-", "_").replace(".", "_"))')
printf '[bdist_wheel]\npython_tag = py3\nplat_name = %s\n' "$plat" > "$stage/setup.cfg"
log="$stage/build.log"
if ! (cd "$stage" && "$py" -c 'import sys
from setuptools import build_meta
print(build_meta.build_wheel(sys.argv[1]))' "$out") > "$log" 2>&1; then
    cat "$log" >&2
    echo "python-wheel: building the wheel failed" >&2
    exit 1
fi
echo "$out/$(tail -n 1 "$log")"
