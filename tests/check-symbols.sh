#!/bin/sh
# Symbol hygiene of the static archives (docs/abi.md): an application that links libllmmini.a
# must not clash with our internals, so every global symbol the archives define is public
# (an llmm_ identifier of include/llmmini*.h, or a module entry point listed in a *.map file)
# or carries the internal prefix llmm__. Usage: sh tests/check-symbols.sh NM BUILD
# Checks BUILD/libllmmini.a and, where built, libllmmini-cuda.a and libllmmini-cuda-emu.a.
# C++ names (mangled, _Z...) of the CUDA archives are counted but not checked: a C program
# cannot collide with them, a C++ one only with a function of the same name and parameter
# types in the global namespace.
set -u
nm_tool=$1 build=$2
public=$(mktemp)
trap 'rm -f "$public"' EXIT
{ grep -ho 'llmm_[A-Za-z0-9_]*' include/llmmini*.h; cat cuda/*.map lib/*.map | grep -o 'llmm_[A-Za-z0-9_]*'; } |
    sort -u > "$public"
failed=0
for archive in "$build/libllmmini.a" "$build/libllmmini-cuda.a" "$build/libllmmini-cuda-emu.a"; do
    if [ ! -f "$archive" ]; then
        [ "$archive" = "$build/libllmmini.a" ] && { echo "check-symbols: no $archive" >&2; exit 1; }
        continue
    fi
    # weak and unique symbols (V, W, u: the C++ runtime's, the SIMT emulation's) are merged by
    # the linker, never a duplicate definition
    names=$("$nm_tool" -g --defined-only "$archive" | awk 'NF == 3 && $2 !~ /^[VvWwu]$/ { print $3 }' |
        sort -u) || exit 1
    [ -n "$names" ] || { echo "check-symbols: $nm_tool found no symbols in $archive" >&2; exit 1; }
    bad=$(printf '%s\n' "$names" | grep -v -e '^llmm__' -e '^_Z' | grep -v -x -F -f "$public")
    n_cxx=$(printf '%s\n' "$names" | grep -c '^_Z')
    n_all=$(printf '%s\n' "$names" | grep -c .)
    if [ -n "$bad" ]; then
        echo "check-symbols: $archive defines global symbols that are neither public nor llmm__:" >&2
        printf '  %s\n' $bad >&2
        failed=1
    else
        echo "check-symbols: $archive: $n_all global symbols, all public or llmm__ ($n_cxx C++ names not checked)"
    fi
done
exit $failed
