#!/bin/sh
# make install into two prefixes in turn, as a user switching prefixes would: each must get a
# llmmini.pc naming its own prefix (not the first one's), and a program must build against each
# from pkg-config alone, linked to the shared library and to the static one (--static), and
# llmmini-cuda.h must be installed beside llmmini.h and compile.
# Run by make test (LLMM_BUILD, LLMM_CC: the build being tested); a cross build (TEST_RUNNER
# set) builds the programs but does not run them.
set -eu
build=${LLMM_BUILD:-build}
cc=${LLMM_CC:-cc}
make=${MAKE:-make}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

cat > "$tmp/app.c" <<'EOF'
#include <llmmini.h>
#include <stdio.h>
int main(void) {
    if (llmm_abi_version() != LLMM_ABI_VERSION) return 1;
    printf("%s\n", llmm_version());
    return 0;
}
EOF

cat > "$tmp/cuda_app.c" <<'EOF'
#include <llmmini-cuda.h>
int main(void) { return llmm_cuda_register() == LLMM_OK ? 0 : 1; }
EOF

fail() {
    echo "install_check: $*" >&2
    exit 1
}

for name in first second; do
    prefix="$tmp/$name"
    # MAKEFLAGS cleared: this make is not part of the caller's job server
    MAKEFLAGS= "$make" -s BUILD="$build" CC="$cc" PREFIX="$prefix" install >"$tmp/install.log" 2>&1 ||
        { cat "$tmp/install.log" >&2; fail "make install PREFIX=$prefix failed"; }
    pc="$prefix/lib/pkgconfig/llmmini.pc"
    grep -qx "prefix=$prefix" "$pc" || fail "$pc does not name its prefix: $(grep '^prefix=' "$pc")"
    export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
    cflags=$(pkg-config --cflags llmmini)
    libs=$(pkg-config --libs llmmini)
    case "$cflags $libs" in *"$tmp/$name/"*) ;; *) fail "pkg-config gives no path into $prefix: $cflags $libs" ;; esac
    # shellcheck disable=SC2086 # the flags are words
    "$cc" -o "$tmp/app_shared" "$tmp/app.c" $cflags $libs || fail "shared link against $prefix failed"
    # the static line: the archive instead of the shared library, with the .pc's Libs.private
    static_libs=$(pkg-config --static --libs llmmini | sed 's/-lllmmini/-l:libllmmini.a/')
    # shellcheck disable=SC2086
    "$cc" -o "$tmp/app_static" "$tmp/app.c" $cflags $static_libs || fail "static link against $prefix failed"
    # llmmini-cuda.h beside llmmini.h, complete with pkg-config's flags alone (linking it needs the
    # CUDA archive, which only make CUDA=1 installs: compiled, not linked)
    [ -f "$prefix/include/llmmini-cuda.h" ] || fail "$prefix/include/llmmini-cuda.h is not installed"
    # shellcheck disable=SC2086
    "$cc" -std=c99 -Wall -Werror -fsyntax-only "$tmp/cuda_app.c" $cflags || fail "$prefix/include/llmmini-cuda.h does not compile"
    if [ -z "${TEST_RUNNER:-}" ]; then
        LD_LIBRARY_PATH="$prefix/lib" ldd "$tmp/app_shared" | grep -q "$prefix/lib/libllmmini.so" ||
            fail "the shared program does not load $prefix/lib/libllmmini.so"
        ! ldd "$tmp/app_static" | grep -q libllmmini || fail "the static program loads libllmmini"
        LD_LIBRARY_PATH="$prefix/lib" "$tmp/app_shared" >/dev/null || fail "the shared program failed"
        "$tmp/app_static" >/dev/null || fail "the static program failed"
    fi
    echo "install_check: PREFIX=$name: llmmini.pc names it; shared and static programs build$([ -z "${TEST_RUNNER:-}" ] && echo " and run"); llmmini-cuda.h compiles"
done
