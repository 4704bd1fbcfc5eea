#!/bin/sh
# The house plan, checked (docs/architecture.md). Fails naming file and line when:
#  - a file of lib/ includes a header of a higher layer (LAYERS below, bottom first), or a
#    header of cpu/ or cuda/;
#  - a file of cpu/ or cuda/ includes a lib/ header outside backend/, format/ and base/;
#  - shipped code (lib/, cpu/, cuda/) includes anything under tests/, or a header that only a
#    test include path would find;
#  - modules (a .c file and its .h) of lib/, cpu/ or cuda/ include each other in a circle.
# With an nm and a build folder it also reads the objects the library was built from: an
# object of lib/ calling a function defined in a higher layer, or objects calling each other in
# a circle, fail too (includes miss calls declared in another file's header).
# Usage: tests/check-layers.sh [NM BUILD]   (from the repository root)
#        tests/check-layers.sh --self-test    (the check fails on faults put into a copy)
set -eu

# The check must fail on what it is there to catch: each fault goes into a fresh copy of the
# tree, and the check run there must fail naming it.
if [ "${1:-}" = "--self-test" ]; then
    self=$(cd "$(dirname "$0")" && pwd)/check-layers.sh
    tmp=$(mktemp -d "${TMPDIR:-/tmp}/llmm-layers-self.XXXXXX")
    trap 'rm -rf "$tmp"' EXIT
    fail=0
    expect() { # fault description, file, line to append, message the check must print
        rm -rf "$tmp/tree" && mkdir -p "$tmp/tree/tests" && cp -R include lib cpu cuda "$tmp/tree/"
        cp tests/check-layers.sh "$tmp/tree/tests/"
        printf '%s\n' "$3" >> "$tmp/tree/$2"
        if (cd "$tmp/tree" && sh "$self") > "$tmp/out" 2>&1; then
            echo "check-layers self-test: $1 ($2) passed the check"; fail=1
        elif ! grep -q "$4" "$tmp/out"; then
            echo "check-layers self-test: $1 ($2) failed without \"$4\":"; cat "$tmp/out"; fail=1
        fi
    }
    expect "an upward include" lib/format/gguf.c '#include "context/context.h"' \
        'lib/format/gguf.c:.*layer format includes from the higher layer context'
    expect "a backend using the model" cpu/threadpool.c '#include "model/model.h"' \
        'cpu/threadpool.c:.*may include from lib/ only'
    expect "lib/ including a backend" lib/context/forward.c '#include "../../cpu/threadpool.h"' \
        'lib/context/forward.c:.*lib/ includes a backend'
    expect "shipped code including a test file" lib/base/common.c '#include "../../tests/check-layers.sh"' \
        'shipped code includes tests/'
    expect "an include circle" lib/text/vocab.c '#include "tokenizer_bpe.h"' \
        'lib/text/vocab.c:.*part of an include circle (lib/text/vocab -> lib/text/tokenizer_bpe)'
    [ "$fail" = 0 ] && echo "check-layers self-test: OK (5 faults caught)"
    exit "$fail"
fi

LAYERS="base format backend text model kv sampling adapter context schema grammar generate offline"
# what cpu/ and cuda/ may include from lib/: the backend seam and what it stands on
BACKEND_MAY_USE="base format backend"

# awk: on_circle(a, b) is 1 when the edge a -> b lies on a circle of the graph (edge[a, b],
# out[a] the space-separated successors of a), i.e. when b leads back to a; reach() fills
# seen[] with what a node leads to.
CIRCLES='
function reach(v, seen,    m, x, i) {
    m = split(out[v], x, " ")
    for (i = 1; i <= m; i++) if (!(x[i] in seen)) { seen[x[i]] = 1; reach(x[i], seen) }
}
function on_circle(a, b,    seen) {
    if (a == b) return 1
    seen[b] = 1; reach(b, seen)
    return (a in seen)
}'

nm_tool=${1:-}
build=${2:-}
status=0

# Every quoted include of shipped code, as "file<TAB>line<TAB>target-as-written".
list_includes() {
    find lib cpu cuda -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) | sort |
        while read -r f; do
            grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$f" |
                sed -e 's/^\([0-9]*\):[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1	\2/' \
                    -e "s|^|$f	|" || true
        done
}

# Resolve each include as the compiler would (the file's own folder, then the -I folders of
# its part of the tree: include/ and lib/ for all, cpu/ for cpu, cuda/ for cuda) and print
# "file<TAB>line<TAB>written<TAB>resolved" (resolved "?" when only a test path would find it).
resolve_includes() {
    list_includes | while IFS='	' read -r file line target; do
        dir=${file%/*}
        resolved="?"
        case $file in
        cpu/*) roots="cpu include lib" ;;
        cuda/*) roots="cuda include lib" ;;
        *) roots="include lib" ;;
        esac
        if [ -f "$dir/$target" ]; then
            resolved="$dir/$target"
        else
            for r in $roots; do
                if [ -f "$r/$target" ]; then resolved="$r/$target"; break; fi
            done
        fi
        # normalise "a/b/../c" so a path climbing out of its folder is seen for what it is
        resolved=$(printf '%s\n' "$resolved" | awk -F/ '{ n = 0; for (i = 1; i <= NF; i++) {
            if ($i == "..") { if (n > 0) n--; } else if ($i != ".") p[++n] = $i }
            s = p[1]; for (i = 2; i <= n; i++) s = s "/" p[i]; print s }')
        printf '%s\t%s\t%s\t%s\n' "$file" "$line" "$target" "$resolved"
    done
}

resolve_includes > "${TMPDIR:-/tmp}/llmm-layers.$$"
trap 'rm -f "${TMPDIR:-/tmp}/llmm-layers.$$" "${TMPDIR:-/tmp}/llmm-layers-nm.$$"' EXIT

awk -F'\t' -v layers="$LAYERS" -v backend_may="$BACKEND_MAY_USE" "$CIRCLES"'
function layer_of(path,    p) {
    if (path !~ /^lib\/[^\/]+\//) return ""
    split(path, p, "/")
    return p[2]
}
function module_of(path) { sub(/\.(c|h|cu|cuh)$/, "", path); return path }
function fail(msg) { print "check-layers: " msg; bad = 1 }
BEGIN {
    n = split(layers, L, " ")
    for (i = 1; i <= n; i++) rank[L[i]] = i
    split(backend_may, B, " ")
    for (i in B) may[B[i]] = 1
}
{
    file = $1; line = $2; written = $3; target = $4
    where = file ":" line ": #include \"" written "\""
    if (target == "?") { fail(where ": found only on a test include path (shipped code never includes tests/)"); next }
    if (target ~ /^tests\//) { fail(where ": shipped code includes tests/"); next }
    if (target ~ /^include\//) next
    from = layer_of(file); to = layer_of(target)
    if (file ~ /^lib\//) {
        if (!(from in rank)) { fail(file ": folder lib/" from "/ is not a layer of tests/check-layers.sh"); next }
        if (target ~ /^(cpu|cuda)\//) { fail(where ": lib/ includes a backend (" target ")"); next }
        if (!(to in rank)) { fail(where ": lib/" to "/ is not a layer"); next }
        if (rank[to] > rank[from])
            fail(where ": layer " from " includes from the higher layer " to)
    } else if (to != "" && !(to in may)) {
        fail(where ": " substr(file, 1, index(file, "/") - 1) "/ may include from lib/ only " backend_may ", not " to)
    } else if (file ~ /^cpu\// && target ~ /^cuda\// || file ~ /^cuda\// && target ~ /^cpu\//) {
        fail(where ": one backend includes another")
    }
    a = module_of(file); b = module_of(target)
    if (a != b && !((a, b) in edge)) { edge[a, b] = where; out[a] = out[a] " " b; nodes[a]; nodes[b] }
}
END {
    # include circles between modules: peel off modules that include nothing left (Kahn);
    # whatever remains lies on or behind a circle, and each remaining edge is printed
    for (v in nodes) {
        m = split(out[v], o, " ")
        for (i = 1; i <= m; i++) if (on_circle(v, o[i])) fail(edge[v, o[i]] ": part of an include circle (" v " -> " o[i] ")")
    }
    exit bad
}' "${TMPDIR:-/tmp}/llmm-layers.$$" || status=1

# Calls, from the objects: who defines each global function and who calls it.
if [ -n "$nm_tool" ] && [ -n "$build" ]; then
    # objects of sources that exist (a build folder may hold objects of files since moved)
    objs=$(find "$build/obj/lib" -name '*.o' | sed "s|^$build/obj/||" | sort | while read -r o; do
        if [ -f "${o%.o}.c" ]; then echo "$o"; fi
    done)
    if [ -z "$objs" ]; then
        echo "check-layers: no objects under $build/obj/lib"
        exit 1
    fi
    for o in $objs; do
        "$nm_tool" -P "$build/obj/$o" |
            awk -v o="$o" '$2 ~ /^[TDBR]$/ { print "def\t" o "\t" $1 } $2 == "U" { print "use\t" o "\t" $1 }'
    done > "${TMPDIR:-/tmp}/llmm-layers-nm.$$"
    awk -F'\t' -v layers="$LAYERS" "$CIRCLES"'
    function layer_of(o, p) { split(o, p, "/"); return p[2] }
    function fail(msg) { print "check-layers: " msg; bad = 1 }
    BEGIN { n = split(layers, L, " "); for (i = 1; i <= n; i++) rank[L[i]] = i }
    $1 == "def" { def[$3] = $2; next }
    { use[NR] = $2 "\t" $3 }
    END {
        for (k in use) {
            split(use[k], u, "\t"); o = u[1]; s = u[2]
            if (!(s in def) || def[s] == o) continue
            d = def[s]
            if (rank[layer_of(d)] > rank[layer_of(o)])
                fail(o ": calls " s " of the higher layer " layer_of(d) " (" d ")")
            if (!((o, d) in edge)) { edge[o, d] = s; out[o] = out[o] " " d; nodes[o]; nodes[d] }
        }
        for (v in nodes) {
            m = split(out[v], x, " ")
            for (i = 1; i <= m; i++) if (on_circle(v, x[i]))
                fail(v ": part of a call circle (calls " edge[v, x[i]] " of " x[i] ")")
        }
        exit bad
    }' "${TMPDIR:-/tmp}/llmm-layers-nm.$$" || status=1
fi

if [ "$status" = 0 ]; then echo "check-layers: OK (layers: $LAYERS)"; fi
exit "$status"
