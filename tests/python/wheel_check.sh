#!/bin/sh
# make python-wheel's wheel, installed the way an app installs it: built from this build's
# library (and CUDA module, when built with CUDA=1) by scripts/python-wheel.sh, installed into a
# fresh venv (--system-site-packages, pip --no-index), and one generation run through it with
# no LLMMINI_LIB, PYTHONPATH or LD_LIBRARY_PATH, from another folder: the package and the library
# must both come from the venv. Run by make test from the repository root (LLMM_BUILD).
set -eu
what="python wheel"
. tests/python/preflight.sh
if ! "$py" -c 'import setuptools, wheel, ensurepip' 2>/dev/null; then
    echo "python wheel: SKIPPED: $py lacks setuptools, wheel or venv's ensurepip (Debian: python3-setuptools"
    echo "  python3-wheel python3-venv; make installs them when run as root)"
    exit 0
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/llmmini-wheel-check.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
cuda=""
[ -f "$build/libllmmini-cuda.so" ] && cuda="$build/libllmmini-cuda.so"
wheel=$(sh scripts/python-wheel.sh "$tmp/dist" "$lib" $cuda)
echo "built $(basename "$wheel") ($(du -k "$wheel" | cut -f1) KiB)"
"$py" -m venv --system-site-packages "$tmp/venv"
"$tmp/venv/bin/python" -m pip install --no-index --no-deps --disable-pip-version-check -q "$wheel"
model=$(cd "${LLMM_SHARED:-../shared}/models" && pwd)/stories260K.gguf
cd "$tmp"
env -u LLMMINI_LIB -u PYTHONPATH -u LD_LIBRARY_PATH "$tmp/venv/bin/python" - "$model" "$tmp/venv" "$cuda" <<'PY'
import os, sys
import llmmini
model_path, venv, cuda = sys.argv[1], os.path.realpath(sys.argv[2]), sys.argv[3]
package = os.path.dirname(os.path.realpath(llmmini.__file__))
assert package.startswith(venv), f"llmmini imported from {package}, not the venv"
assert os.path.realpath(llmmini.library_path()) == os.path.join(package, "libllmmini.so.0"), llmmini.library_path()
if cuda:
    assert os.path.isfile(os.path.join(package, "libllmmini-cuda.so")), "the CUDA module is not in the wheel"
with llmmini.Model(model_path) as model, llmmini.Context(model, n_ctx=64, backend="cpu") as ctx:
    gen = ctx.generate("Once upon a time", max_tokens=16, temperature=0)
    text = "".join(gen)
assert gen.tokens and text and gen.stats.n_generated == len(gen.tokens), (text, gen.stats)
print(f"python wheel: llmmini {llmmini.library_version()} from {package}: {text!r}")
PY
