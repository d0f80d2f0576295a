#!/bin/sh
# scripts/core-deps.sh [core dir]: fail when files of core/ include or call
# each other in a circle.
#
# Graph: one node per module, a module being x.c with its header x.h (or a
# header alone); an edge from a module to each other module whose header it
# includes.  A call needs the callee's declaration, so the include edges
# cover calls too.  A circle is a path from a module back to itself.
# Prints each circle found and exits 1; prints the file count and exits 0
# when there is none.  CORE_DEPS_ALLOW="a>b c>d" leaves out the named
# edges (module a including module b): a known circle someone is removing,
# listed where the test runs this script.
set -eu
core=${1:-$(dirname "$0")/../core}
allow=" ${CORE_DEPS_ALLOW:-} "
cd "$core"
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
files=$(find . -name '*.[ch]' | sed 's|^\./||' | sort)
for f in $files; do
    dir=$(dirname "$f")
    # quoted includes, resolved like the compiler: next to the file, then core/
    for inc in $(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f"); do
        if [ -f "$dir/$inc" ]; then
            t=$(echo "$dir/$inc" | sed 's|^\./||')
        elif [ -f "$inc" ]; then
            t=$inc
        else
            continue # tern/*.h and other headers outside core/
        fi
        from=${f%.[ch]}
        to=${t%.[ch]}
        case $allow in *" $from>$to "*) continue ;; esac
        [ "$from" = "$to" ] || echo "$from $to" >>"$tmp"
    done
    echo "${f%.[ch]} ${f%.[ch]}" >>"$tmp" # every module is a node
done
# tsort reports every circle it finds on stderr ("input contains a loop:")
if out=$(tsort "$tmp" 2>&1 >/dev/null) && [ -z "$out" ]; then
    echo "core-deps: $(echo "$files" | wc -w) files, no include or call circle among modules"
    exit 0
fi
echo "core-deps: circles among core/ files:" >&2
echo "$out" | sed -e 's/^tsort: [^:]*: input contains a loop:/  circle:/' -e 's/^tsort: /    /' >&2
exit 1
