#!/bin/sh
# Assemble .devkit/: what scripts/gpu-check.sh needs on a GPU machine where
# nothing can be installed (docs/gpu.md, Checking on a GPU machine): tern's
# programs, libtern, the plugins, the Debian libraries that machine lacks,
# the fake CUDA driver (so the script can be tried here first) and the
# script itself.  .devkit/ is listed in the repository's info/exclude, so
# git ignores it; a run on the device machine names it in `carry`.
#   usage: scripts/gpu-kit.sh [BUILD_DIR]     (default: build)
#   env: KIT: where to assemble it (default .devkit/ at the top of the tree;
#        tests put it in a temporary directory)
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
kit=${KIT:-$root/.devkit}
for f in bin/tern-bench bin/tern-info bin/tern-test-gpu-peer lib/tern/libtern-tcp.so \
         tests/fake_cuda/libfake-cuda.so; do
    [ -e "$build/$f" ] || { echo "gpu-kit: $build/$f missing: build first (cmake --build $build)" >&2; exit 1; }
done
exclude=$(git -C "$root" rev-parse --git-path info/exclude)
case $exclude in /*) ;; *) exclude=$root/$exclude ;; esac
mkdir -p "$(dirname "$exclude")"
grep -qx '/.devkit/' "$exclude" 2>/dev/null || echo '/.devkit/' >>"$exclude"
rm -rf "$kit"
mkdir -p "$kit/bin" "$kit/lib" "$kit/plugins" "$kit/fake"
cp "$build/bin/tern-bench" "$build/bin/tern-info" "$build/bin/tern-test-gpu-peer" "$kit/bin/"
cp -a "$build"/lib/libtern.so* "$kit/lib/"
cp "$build"/lib/tern/libtern-*.so "$kit/plugins/"
cp "$build/tests/fake_cuda/libfake-cuda.so" "$kit/fake/"
cp "$root/scripts/gpu-check.sh" "$kit/"
for l in libyaml-0.so.2 libjson-c.so.5 libnuma.so.1 libcrypto.so.3 libssl.so.3 \
         libfabric.so.1 libefa.so.1 libibverbs.so.1 librdmacm.so.1 libpsm2.so.2 \
         libinfinipath.so.4 libpsm_infinipath.so.1 libnl-3.so.200 libnl-route-3.so.200 \
         libatomic.so.1 libuuid.so.1; do
    if [ -e "/lib/x86_64-linux-gnu/$l" ]; then
        cp -L "/lib/x86_64-linux-gnu/$l" "$kit/lib/"
    else
        echo "gpu-kit: note: /lib/x86_64-linux-gnu/$l not here (a plugin needing it will not load)" >&2
    fi
done
echo "gpu-kit: $kit ready ($(du -sh "$kit" | cut -f1)); run: sh .devkit/gpu-check.sh"
