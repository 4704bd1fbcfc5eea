#!/bin/sh
# Checks the build's Debian packages; installs the missing ones when root with apt-get,
# otherwise prints the one command to run. Called once by make (stamp in build/).
set -u
missing=""
have_header() { printf '#include <stddef.h>\n#include <stdint.h>\n#include <stdarg.h>\n#include <setjmp.h>\n#include <%s>\n' "$1" | ${CC:-cc} -E -x c - >/dev/null 2>&1; }
if [ "${DEPS_TARGET:-}" = aarch64 ]; then
    # cross toolchain, emulator and the target's libraries (multiarch arm64 packages)
    command -v aarch64-linux-gnu-gcc >/dev/null 2>&1 || missing="$missing gcc-aarch64-linux-gnu"
    # C++ for the SIMT emulation's tests (tests/simt/), and its runtime for the guest
    command -v aarch64-linux-gnu-g++ >/dev/null 2>&1 || missing="$missing g++-aarch64-linux-gnu"
    [ -e /usr/lib/aarch64-linux-gnu/libstdc++.so.6 ] || missing="$missing libstdc++6:arm64"
    command -v qemu-aarch64 >/dev/null 2>&1 || missing="$missing qemu-user"
    [ -e /usr/lib/aarch64-linux-gnu/libcmocka.so ] || missing="$missing libcmocka-dev:arm64"
    [ -e /usr/lib/aarch64-linux-gnu/libzstd.so ] || missing="$missing libzstd-dev:arm64"
    [ -z "$missing" ] && exit 0
    cmd="dpkg --add-architecture arm64 && apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y$missing"
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "deps: installing$missing"
        sh -c "$cmd" && exit 0
        echo "deps: installing failed; run: $cmd" >&2
        exit 1
    fi
    echo "deps: missing packages:$missing" >&2
    echo "deps: run as root: $cmd" >&2
    exit 1
fi
if [ "${DEPS_TARGET:-}" = fuzz ]; then
    # make fuzz: clang and its libFuzzer runtime (a one-line harness must link)
    if ! command -v clang >/dev/null 2>&1; then
        missing=" clang libclang-rt-dev"
    elif ! echo 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n) { return !d + !n; }' |
        clang -fsanitize=fuzzer -x c - -o /dev/null >/dev/null 2>&1; then
        missing=" libclang-rt-dev"
    fi
fi
if [ "${DEPS_TARGET:-}" = tsan ]; then
    # make tsan: the compiler's ThreadSanitizer runtime (GCC's libtsan2, clang's compiler-rt)
    if ! echo 'int main(void) { return 0; }' | ${CC:-cc} -fsanitize=thread -x c - -o /dev/null >/dev/null 2>&1; then
        if ${CC:-cc} --version 2>/dev/null | grep -q clang; then missing=" libclang-rt-dev"; else missing=" libtsan2"; fi
    fi
fi
# make valgrind: memcheck
[ "${DEPS_TARGET:-}" = valgrind ] && ! command -v valgrind >/dev/null 2>&1 && missing=" valgrind"
if [ "${DEPS_TARGET:-}" = abi ]; then
    # make abi-check / abi-update: abidw and abidiff
    command -v abidw >/dev/null 2>&1 && command -v abidiff >/dev/null 2>&1 || missing=" abigail-tools"
fi
# C++ for the SIMT emulation's tests (tests/simt/), run by make test
[ -n "${DEPS_TARGET:-}" ] || command -v g++ >/dev/null 2>&1 || missing="$missing g++"
have_header zstd.h || missing="$missing libzstd-dev"
have_header cmocka.h || missing="$missing libcmocka-dev"
command -v pkg-config >/dev/null 2>&1 || missing="$missing pkg-config"
# the Python package's tests (tests/python/run.sh), run by make test
[ -n "${DEPS_TARGET:-}" ] || command -v python3 >/dev/null 2>&1 || missing="$missing python3"
# make python-wheel, and its test in make test (tests/python/wheel_check.sh): Debian's python3
# with setuptools, wheel and venv. make python-wheel needs them; make test installs them when
# root and otherwise skips the wheel test, saying so
py=/usr/bin/python3
[ -x "$py" ] || py=python3
if [ "${DEPS_TARGET:-}" = python-wheel ] || { [ -z "${DEPS_TARGET:-}" ] && [ "$(id -u)" = 0 ]; }; then
    "$py" -c 'import setuptools, wheel, ensurepip' 2>/dev/null ||
        missing="$missing python3-setuptools python3-wheel python3-venv"
fi
[ -z "$missing" ] && exit 0
cmd="apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y$missing"
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "deps: installing$missing"
    if sh -c "$cmd"; then exit 0; fi
    echo "deps: installing failed; run: $cmd" >&2
    exit 1
fi
echo "deps: missing packages:$missing" >&2
echo "deps: run as root: $cmd" >&2
exit 1
