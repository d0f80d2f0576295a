#!/bin/sh
# The README's `pip install ./python` into fresh virtual environments,
# offline (--no-build-isolation --no-index, venv with
# --system-site-packages), with the interpreter given: Debian's
# /usr/bin/python3 and the python3 first on PATH (a pyenv CPython without
# the `wheel` package: python/backend/tern_backend.py needs only
# setuptools) are each one CTest test (tests/system/python.cmake).
#  1. from a clean clone of this repository, which builds its own libtern
#     (python/setup.py: build-pip/) and bundles it into the package;
#  2. from the same clone again, against an installed prefix (cmake
#     --install of this build, TERN_PREFIX), into another venv: nothing of
#     the first build may ship (no bundled libtern, the extension linked to
#     the prefix's); the clone is deleted before either package is used.
# Each installed package is then imported from outside any source tree and
# moves bytes between two engines over tcp, its plugins found where the
# package says.
#   usage: test_python_pip.sh <source dir> <build dir> <python3>
set -eu
src=$1
build=$2
py=$3
tmp=$(mktemp -d /tmp/tern-pip-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "test_python_pip: FAIL: $*" >&2; exit 1; }
pass() { echo "test_python_pip: ok: $*"; }

git -C "$src" rev-parse --git-dir >/dev/null 2>&1 ||
    { echo "test_python_pip: SKIP: $src is not a git checkout (nothing to clone)"; exit 77; }
"$py" -c 'import venv, ensurepip, setuptools' 2>/dev/null ||
    "$py" -c 'import venv, setuptools, pip' 2>/dev/null ||
    { echo "test_python_pip: SKIP: $py lacks venv/setuptools/pip (Debian: python3-venv python3-setuptools)"; exit 77; }
echo "test_python_pip: $py: $("$py" -c 'import sys, setuptools; print(sys.version.split()[0], "setuptools", setuptools.__version__)')"

# What a user with nothing installed does; nothing in the environment
# points at this build.
unset TERN_PREFIX TERN_BUILD_DIR TERN_SOURCE_DIR TERN_CONFIG TERN_PLUGIN_PATH PYTHONPATH
export PKG_CONFIG_PATH=

cat >"$tmp/smoke.py" <<'PYEOF'
import os, sys
import tern
where, libs = sys.argv[1], sys.argv[2]
assert os.path.realpath(tern.__file__).startswith(os.path.realpath(where)), tern.__file__
cfg = {"server_name": "127.0.0.1:0", "transports": [{"name": "tcp"}], "log_level": "warn"}
doc = tern.describe_config.__doc__
assert doc and "configuration" in doc
with tern.Engine(cfg) as a, tern.Engine(cfg) as b:
    src = bytearray(os.urandom(1 << 20))
    dst = bytearray(1 << 20)
    a.register(src)
    addr = b.register(dst)
    a.transfer_sync_write(src, b.server_name, addr)
    assert dst == src, "bytes differ"
    seg = a.open_segment(b.server_name)
    assert seg.transport == "tcp"
d = tern.describe_config(config_only=False)
paths = [t.get("path") or "" for t in d["transports"] if t.get("outcome") == "loaded"]
assert paths and all(os.path.realpath(p).startswith(os.path.realpath(libs)) for p in paths), paths
from tern.compat.mooncake import TransferEngine
assert TransferEngine().initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
print("smoke ok:", tern.__file__, paths[0])
PYEOF

# 1. a clean clone, nothing built
git clone -q "$src" "$tmp/src" || fail "git clone $src"
"$py" -m venv --system-site-packages "$tmp/venv1" || fail "python3 -m venv"
(cd "$tmp" && "$tmp/venv1/bin/pip" install --no-build-isolation --no-index -q "$tmp/src/python") \
    >"$tmp/pip1.log" 2>&1 || { cat "$tmp/pip1.log" >&2; fail "pip install from a clean clone"; }
[ -f "$tmp/src/build-pip/lib/libtern.so" ] || fail "the clone did not build its own libtern"
site1=$("$tmp/venv1/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["platlib"])')
[ -f "$site1/tern/_libs/libtern.so.0" ] || fail "libtern.so.0 not bundled into $site1/tern/_libs"
[ ! -e "$tmp/src/python/build" ] || fail "pip left python/build in the clone (a later install would reuse it)"

# 2. an installed prefix, from the same clone (its first build must not ship)
cmake --install "$build" --prefix "$tmp/prefix" >"$tmp/install.log" 2>&1 ||
    { cat "$tmp/install.log" >&2; fail "cmake --install"; }
"$py" -m venv --system-site-packages "$tmp/venv2" || fail "python3 -m venv"
mv "$tmp/src/build-pip" "$tmp/build-pip-1" # so that a rebuild of it would show
(cd "$tmp" && TERN_PREFIX="$tmp/prefix" "$tmp/venv2/bin/pip" install --no-build-isolation \
    --no-index -q "$tmp/src/python") >"$tmp/pip2.log" 2>&1 ||
    { cat "$tmp/pip2.log" >&2; fail "pip install with TERN_PREFIX"; }
[ ! -d "$tmp/src/build-pip" ] || fail "TERN_PREFIX given, yet libtern was built"
site2=$("$tmp/venv2/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["platlib"])')
[ ! -e "$site2/tern/_libs" ] || fail "TERN_PREFIX given, yet libtern was bundled"
ldd "$site2"/tern/_tern*.so | grep -q "$tmp/prefix/lib.*/libtern.so" ||
    { ldd "$site2"/tern/_tern*.so >&2; fail "the reinstalled extension does not load the prefix's libtern"; }
rm -rf "$tmp/src" "$tmp/build-pip-1"
(cd "$tmp" && "$tmp/venv1/bin/python" smoke.py "$site1" "$site1/tern/_libs") ||
    fail "the package from a clean clone does not work"
pass "clean clone -> pip install (own libtern bundled) -> clone deleted -> import, transfer"
(cd "$tmp" && "$tmp/venv2/bin/python" smoke.py "$site2" "$tmp/prefix") ||
    fail "the package built against the prefix does not work"
pass "pip install again from that clone with TERN_PREFIX=<prefix>: links the installed libtern and its plugins, ships nothing of the first build"
echo "test_python_pip: all passed"
