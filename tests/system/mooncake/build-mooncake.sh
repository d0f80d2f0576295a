#!/usr/bin/env bash
# tests/system/mooncake/build-mooncake.sh: build Mooncake Transfer Engine's
# transfer_engine_bench and transfer_engine_bench_with_notify (the peers of
# the Mooncake compatibility tests and of bench/mooncake_vs_tern.sh) from
# source bundles, into a cache outside the build tree.  Idempotent: a
# second run with nothing changed takes seconds.  Prints, last, one line
#   <tag> <dir holding the two binaries>
#
# env: TERN_MOONCAKE_SRC    directory with Mooncake-<tag>.tar.gz and
#                           yalantinglibs-<short>.tar.gz (required)
#      MC_TAG               v0.3.10 (default) or v0.3.12.post1
#      TERN_MOONCAKE_CACHE  build cache (default ${XDG_CACHE_HOME:-$HOME/.cache}/mooncake-build)
#      JOBS                 parallel jobs (2)
# What is built: the transfer-engine directory configured on its own (TCP
# and RDMA transports; P2PHANDSHAKE metadata only: no etcd, redis, HTTP;
# no CUDA, EFA, NVMe-oF).  Its dependencies come from Debian (glog,
# gflags, jsoncpp, yaml-cpp, libunwind, numa, ibverbs, pybind11 headers)
# plus yalantinglibs' headers, installed from its bundle.
set -euo pipefail
MC_TAG=${MC_TAG:-v0.3.10}
SRCDIR=${TERN_MOONCAKE_SRC:?set TERN_MOONCAKE_SRC to the directory of Mooncake source bundles}
CACHE=${TERN_MOONCAKE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/mooncake-build}
JOBS=${JOBS:-2}
case "$MC_TAG" in
  v0.3.10) COMMIT=59c9f90151018618c8613536246358a05fc714e0; YLT=73dea196d2 ;;
  v0.3.12.post1) COMMIT=6041a609a8c3af35e778f70db344f145c2914980; YLT=6a0e067d9a ;;
  *) echo "build-mooncake.sh: unknown MC_TAG '$MC_TAG' (v0.3.10 or v0.3.12.post1)" >&2; exit 2 ;;
esac
log() { echo "build-mooncake.sh: $*" >&2; }
for f in "Mooncake-$MC_TAG.tar.gz" "yalantinglibs-$YLT.tar.gz"; do
    [ -f "$SRCDIR/$f" ] || { log "missing $SRCDIR/$f"; exit 2; }
done

# Debian packages (only the missing ones; needs root when any is missing)
need=()
for p in build-essential cmake pkg-config libibverbs-dev libnuma-dev libgoogle-glog-dev \
         libgflags-dev libjsoncpp-dev libyaml-cpp-dev libunwind-dev python3-dev pybind11-dev; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
    log "installing ${need[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 -o Acquire::Retries=3 update -qq
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 -o Acquire::Retries=3 install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

src=$CACHE/src/Mooncake-$MC_TAG
ysrc=$CACHE/src/yalantinglibs-$YLT
yprefix=$CACHE/ylt-$YLT
bdir=$CACHE/build-$MC_TAG
mkdir -p "$CACHE/src"
if [ "$(cat "$src/.commit" 2>/dev/null)" != "$COMMIT" ]; then
    rm -rf "$src"
    tar -xzf "$SRCDIR/Mooncake-$MC_TAG.tar.gz" -C "$CACHE/src"
    echo "$COMMIT" >"$src/.commit"
fi
if [ ! -f "$ysrc/.done" ]; then
    rm -rf "$ysrc" "$yprefix" "$yprefix.build"
    tar -xzf "$SRCDIR/yalantinglibs-$YLT.tar.gz" -C "$CACHE/src"
    touch "$ysrc/.done"
fi
# yalantinglibs: headers only (they also carry the asio Mooncake builds against)
if [ ! -f "$yprefix/lib/cmake/yalantinglibs/yalantinglibsConfig.cmake" ]; then
    log "installing yalantinglibs headers into $yprefix"
    cmake -S "$ysrc" -B "$yprefix.build" -DBUILD_EXAMPLES=OFF -DBUILD_BENCHMARK=OFF \
        -DBUILD_UNIT_TESTS=OFF -DCMAKE_INSTALL_PREFIX="$yprefix" >/dev/null
    cmake --install "$yprefix.build" >/dev/null
fi
# Newer tags include <ylt/easylog.hpp> from a common header without linking
# yalantinglibs in this standalone configuration: pass its include path.
cxx=()
if grep -q 'ylt/easylog' "$src/mooncake-common/include/default_config.h" 2>/dev/null; then
    cxx=("-DCMAKE_CXX_FLAGS=-isystem $yprefix/include")
fi
cmake -S "$src/mooncake-transfer-engine" -B "$bdir" "${cxx[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DBUILD_UNIT_TESTS=OFF -DBUILD_EXAMPLES=ON -DUSE_TCP=ON -DUSE_HTTP=OFF -DUSE_ETCD=OFF \
    -DUSE_REDIS=OFF -DUSE_CUDA=OFF -DUSE_MUSA=OFF -DUSE_HIP=OFF -DUSE_NVMEOF=OFF -DUSE_CXL=OFF \
    -DUSE_EFA=OFF -DUSE_MNNVL=OFF -DUSE_TENT=OFF -DWITH_RUST_EXAMPLE=OFF \
    -DPython3_EXECUTABLE=/usr/bin/python3 -Dpybind11_INCLUDE_DIR=/usr/include \
    -DCMAKE_PREFIX_PATH="$yprefix" >"$bdir.configure.log" 2>&1 ||
    { tail -20 "$bdir.configure.log" >&2; exit 1; }
log "building $MC_TAG (-j$JOBS; minutes the first time)"
cmake --build "$bdir" --target transfer_engine_bench transfer_engine_bench_with_notify \
    -j"$JOBS" >"$bdir.build.log" 2>&1 || { tail -30 "$bdir.build.log" >&2; exit 1; }
echo "$MC_TAG $bdir/example"
