#!/bin/sh
# scripts/core-deps.sh [core dir]: fail when a file of core/ includes one of
# a higher floor, or when files of core/ include or call each other in a
# circle.
#
# Floors: core/'s folders from the top down (docs/architecture.md, "Floors").
# A file may include files of its own floor and of lower ones, never of a
# higher one: data flows down, and what a lower floor needs from a higher
# one it is passed (a callback or an argument), never included.
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
floors="top datapath engine memory peer plugin obs desc control host config base"
cd "$core"
tmp=$(mktemp)
bad=$(mktemp)
trap 'rm -f "$tmp" "$bad"' EXIT
# floor_of FILE: the index of FILE's floor (0 = top); a folder not in the
# list is an error, so a new folder must be given its place.
floor_of() {
    case $1 in */*) d=${1%%/*} ;; *) d=top ;; esac
    i=0
    for fl in $floors; do
        [ "$fl" = "$d" ] && { echo $i; return; }
        i=$((i + 1))
    done
    echo "core-deps: $1 is in folder $d, which has no floor in scripts/core-deps.sh" >&2
    echo -1
}
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
        ff=$(floor_of "$f")
        ft=$(floor_of "$t")
        if [ "$ff" -lt 0 ] || [ "$ft" -lt 0 ] || [ "$ft" -lt "$ff" ]; then
            echo "  $f includes $t (a higher floor)" >>"$bad"
        fi
    done
    echo "${f%.[ch]} ${f%.[ch]}" >>"$tmp" # every module is a node
done
if [ -s "$bad" ]; then
    echo "core-deps: includes against the floors ($floors, top first):" >&2
    cat "$bad" >&2
    exit 1
fi
for fl in $floors; do
    if [ "$fl" = top ]; then n=$(echo "$files" | grep -vc /) ; else n=$(echo "$files" | grep -c "^$fl/") ; fi
    printf '  floor %-9s %3d files\n' "$fl" "$n"
done
# tsort reports every circle it finds on stderr ("input contains a loop:")
if out=$(tsort "$tmp" 2>&1 >/dev/null) && [ -z "$out" ]; then
    echo "core-deps: $(echo "$files" | wc -w) files, no include from a lower floor into a higher one, no include or call circle among modules"
    exit 0
fi
echo "core-deps: circles among core/ files:" >&2
echo "$out" | sed -e 's/^tsort: [^:]*: input contains a loop:/  circle:/' -e 's/^tsort: /    /' >&2
exit 1
