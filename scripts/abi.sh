#!/bin/sh
# The ABI baseline (docs/abi.md). Usage: sh scripts/abi.sh check|update LIBRARY BASELINE
#   check:  dumps LIBRARY's ABI next to it and compares it with BASELINE; any difference
#           fails, an addition too, so that every change of the ABI is made on purpose.
#   update: rewrites BASELINE from LIBRARY.
# The dump keeps only what an application sees: the exported symbols and the types of
# include/ (--headers-dir with --drop-private-types), without build paths, source lines or
# architecture, and with type ids hashed from the types, so that the same ABI gives the same
# file whoever builds it and wherever (and a diff of the baseline reads as the change).
set -eu
mode=$1 library=$2 baseline=$3
if ! readelf -S "$library" | grep -q '\.debug_info'; then
    echo "abi: $library has no debug information: build it with -g (the default CFLAGS)" >&2
    exit 1
fi
dump() {
    abidw --no-corpus-path --no-comp-dir-path --no-show-locs --no-architecture \
        --headers-dir include --drop-private-types --type-id-style hash --out-file "$1" "$library"
}
case $mode in
update)
    mkdir -p "$(dirname "$baseline")"
    dump "$baseline"
    echo "abi: wrote $baseline from $library; commit it with a CHANGELOG entry (docs/abi.md)"
    ;;
check)
    current="$(dirname "$library")/abi/llmmini.abi"
    mkdir -p "$(dirname "$current")"
    dump "$current"
    status=0
    abidiff "$baseline" "$current" >"$current.diff" 2>&1 || status=$?
    if [ "$status" -eq 0 ]; then
        echo "abi: $library matches $baseline"
        exit 0
    fi
    cat "$current.diff"
    # abidiff's status is a bit set: 1 error, 2 usage error, 4 ABI change, 8 incompatible
    # change (a removed symbol); a changed type is reported with 4 alone, so 4 is no promise
    # of compatibility: the report says what changed
    if [ $((status & 3)) -ne 0 ]; then
        echo "abi: abidiff failed (status $status)" >&2
        exit 1
    fi
    [ $((status & 8)) -eq 0 ] || echo "abi: INCOMPATIBLE: symbols were removed" >&2
    echo "abi: the ABI of $library differs from $baseline (report above)." >&2
    echo "abi: a new function or a field appended to a size-prefixed struct is compatible; any other" >&2
    echo "abi: change breaks existing binaries and bumps LLMM_ABI_VERSION and the soname (docs/abi.md)." >&2
    echo "abi: if the change is intended, add a CHANGELOG entry and commit the new baseline with it:" >&2
    echo "abi:     make abi-update" >&2
    exit 1
    ;;
*)
    echo "usage: sh scripts/abi.sh check|update LIBRARY BASELINE" >&2
    exit 2
    ;;
esac
