#!/bin/sh
# Install tern to a temporary prefix, check what landed there, build the
# example transport (plugins/memcpy) out of tree with nothing but
# `pkg-config --cflags --libs tern`, and load it by `path` from a YAML file
# with the installed tern-info.
#   usage: test_install.sh <source dir> <build dir>
set -eu
# the system python (a pyenv shim first on PATH costs seconds per call)
py=python3
[ -x /usr/bin/python3 ] && py=/usr/bin/python3
src=$1
build=$2
tmp=$(mktemp -d /tmp/tern-install-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix
fail() { echo "test_install: FAIL: $*" >&2; exit 1; }
pass() { echo "test_install: ok: $*"; }

cmake --install "$build" --prefix "$prefix" >"$tmp/install.log" 2>&1 ||
    { cat "$tmp/install.log" >&2; fail "cmake --install failed"; }
pass "cmake --install $build --prefix $prefix"

# the library and its SONAME
libdir=$(dirname "$(find "$prefix" -name 'libtern.so.0*' -type f | head -n 1)")
[ -f "$libdir/libtern.so.0.1.0" ] || fail "no libtern.so.0.1.0 under $prefix"
[ -L "$libdir/libtern.so" ] || fail "no libtern.so development link in $libdir"
readelf -d "$libdir/libtern.so" | grep -q 'SONAME.*\[libtern\.so\.0\]' ||
    fail "libtern.so has no SONAME libtern.so.0"
pass "libtern.so with SONAME libtern.so.0 in $libdir"

# headers, plugins, pkg-config, configs, tools
for h in tern.h errors.h transport.h metastore.h plugin_kit.h; do
    [ -f "$prefix/include/tern/$h" ] || fail "header include/tern/$h not installed"
done
[ -f "$libdir/tern/libtern-memcpy.so" ] || fail "plugin libtern-memcpy.so not in $libdir/tern"
[ -f "$libdir/pkgconfig/tern.pc" ] || fail "tern.pc not in $libdir/pkgconfig"
for y in tern.yaml rdma.yaml efa.yaml multi.yaml; do
    [ -f "$prefix/share/tern/$y" ] || fail "config $y not in share/tern"
done
[ -x "$prefix/bin/tern-info" ] || fail "bin/tern-info not installed"
pass "headers, plugins, tern.pc, share/tern/*.yaml, bin/tern-info"

# pkg-config answers with the install prefix
export PKG_CONFIG_PATH="$libdir/pkgconfig"
flags=$(pkg-config --cflags --libs tern) || fail "pkg-config --cflags --libs tern failed"
case "$flags" in
*"-I$prefix/include"*"-L$libdir"*"-ltern"*) ;;
*) fail "pkg-config gave '$flags'" ;;
esac
pass "pkg-config --cflags --libs tern: $flags"

# the example transport, out of tree: a copy of its sources, pkg-config only
mkdir -p "$tmp/oot"
cp "$src"/plugins/memcpy/*.c "$tmp/oot/"
# shellcheck disable=SC2086 # $flags is a list of words
cc -std=c11 -Wall -Wextra -Werror -shared -fPIC -o "$tmp/oot/libtern-memcpy.so" \
    "$tmp"/oot/*.c $flags -pthread || fail "out-of-tree build of plugins/memcpy failed"
pass "out-of-tree build with only pkg-config"

# documentation and example sources
for d in api.md architecture.md configuration.md protocol.md benchmarks.md bench-tcp-shm.svg README.md; do
    [ -f "$prefix/share/doc/tern/$d" ] || fail "share/doc/tern/$d not installed"
done
for f in kv_prefill.c kv_decode.c README.md; do
    [ -f "$prefix/share/tern/examples/$f" ] || fail "share/tern/examples/$f not installed"
done
[ -f "$prefix/share/tern/plugins/memcpy/memcpy.c" ] ||
    fail "the example transport's source is not in share/tern/plugins/memcpy"
pass "docs in share/doc/tern, examples and the memcpy plugin source in share/tern"

# an application built from the installed example with pkg-config only runs
# from the prefix without LD_LIBRARY_PATH (tern.pc carries the run path)
case "$flags" in
*"-Wl,-rpath,$libdir"*) ;;
*) fail "pkg-config --libs tern has no run path: '$flags'" ;;
esac
[ "$(pkg-config --variable=rpath tern)" = "-Wl,-rpath,$libdir" ] ||
    fail "pkg-config --variable=rpath tern: '$(pkg-config --variable=rpath tern)'"
mkdir -p "$tmp/app"
for ex in kv_prefill kv_decode; do
    # shellcheck disable=SC2086 # $flags is a list of words
    cc -std=c11 -Wall -Wextra -Werror "$prefix/share/tern/examples/$ex.c" $flags \
        -o "$tmp/app/$ex" || fail "building the installed $ex.c with pkg-config failed"
done
rc=0
env -u LD_LIBRARY_PATH "$tmp/app/kv_decode" >"$tmp/app.out" 2>&1 || rc=$?
[ "$rc" = 2 ] || fail "kv_decode without arguments: exit $rc (127: libtern.so.0 not found): $(cat "$tmp/app.out")"
grep -q "usage: kv_decode" "$tmp/app.out" || fail "kv_decode: $(cat "$tmp/app.out")"
pass "installed examples build with pkg-config and run without LD_LIBRARY_PATH"

cat >"$tmp/oot.yaml" <<EOF
transports:
  - name: memcpy
    path: $tmp/oot/libtern-memcpy.so
    required: true
    queue_depth: 128
EOF
# libtern.so.0 in a private prefix is found the usual way for such a prefix
export LD_LIBRARY_PATH="$libdir"
unset TERN_PLUGIN_PATH TERN_CONFIG
"$prefix/bin/tern-info" --json --config "$tmp/oot.yaml" >"$tmp/oot.json" ||
    fail "tern-info --config oot.yaml exited $?"
"$py" - "$tmp/oot.json" "$tmp/oot/libtern-memcpy.so" <<'EOF' || fail "tern-info output for oot.yaml"
import json, sys
doc = json.load(open(sys.argv[1]))
t = doc["transports"][0]
assert doc["ok"] is True, doc
assert t["name"] == "memcpy" and t["outcome"] == "loaded", t
assert t["path"] == sys.argv[2], (t["path"], sys.argv[2])
assert [d["name"] for d in t["devices"]] == ["mem0"], t["devices"]
assert t["caps"] == ["read", "write"], t["caps"]
EOF
pass "installed tern-info loads the out-of-tree memcpy by path"

# by name from the installed plugin directory, next to the installed library
printf 'transports:\n  - name: memcpy\n    required: true\n' >"$tmp/byname.yaml"
"$prefix/bin/tern-info" --json --config "$tmp/byname.yaml" >"$tmp/byname.json" ||
    fail "tern-info --config byname.yaml exited $?"
"$py" - "$tmp/byname.json" "$libdir/tern/libtern-memcpy.so" <<'EOF' || fail "tern-info output for byname.yaml"
import json, os, sys
doc = json.load(open(sys.argv[1]))
t = doc["transports"][0]
assert t["outcome"] == "loaded", t
assert os.path.realpath(t["path"]) == os.path.realpath(sys.argv[2]), (t["path"], sys.argv[2])
EOF
pass "installed tern-info loads memcpy by name from $libdir/tern"

# a required transport that fails: non-zero exit, the reason on stderr
printf 'transports:\n  - name: nosuch\n    required: true\n' >"$tmp/bad.yaml"
if "$prefix/bin/tern-info" --config "$tmp/bad.yaml" >/dev/null 2>"$tmp/bad.err"; then
    fail "tern-info succeeded with a missing required transport"
fi
grep -q "libtern-nosuch.so not found; tried: " "$tmp/bad.err" || fail "stderr: $(cat "$tmp/bad.err")"
pass "missing required transport: exit non-zero, reason on stderr"
echo "test_install: all passed"
