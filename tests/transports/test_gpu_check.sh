#!/bin/sh
# scripts/gpu-check.sh against the fake CUDA driver: the kit assembles, and
# every check but the throughput ratio passes (the fake's copies are
# memcpy on a loaded machine: its figures mean nothing, but both bench
# lines must carry figures).  Only the real driver is new on a GPU machine.
#   usage: test_gpu_check.sh <source dir> <build dir>
set -eu
tmp=$(mktemp -d /tmp/tern-gpucheck-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
KIT=$tmp/kit sh "$1/scripts/gpu-kit.sh" "$2" >/dev/null
OUT=$tmp/out BENCH_SECONDS=1 TERN_CUDA_LIBRARY=$tmp/kit/fake/libfake-cuda.so \
    sh "$tmp/kit/gpu-check.sh" >"$tmp/log" 2>&1 || true
s=$tmp/out/summary.txt
cat "$s"
for check in tern-info refusals host-to-host gpu-to-host host-to-gpu gpu-to-gpu; do
    grep -q "^PASS $check:" "$s" || { echo "test_gpu_check: FAIL: $check did not pass" >&2; exit 1; }
done
for op in write read; do
    grep -Eq "^(PASS|FAIL) bench-$op: .*GPU->GPU [0-9.]+ GB/s, host->host [0-9.]+ GB/s, ratio [0-9.]+" "$s" ||
        { echo "test_gpu_check: FAIL: bench-$op has no figures" >&2; exit 1; }
done
# without a driver the script says so and fails
OUT=$tmp/out2 BENCH_SECONDS=1 TERN_CUDA_LIBRARY=/nonexistent/libcuda.so.1 \
    sh "$tmp/kit/gpu-check.sh" >"$tmp/log2" 2>&1 && { echo "test_gpu_check: FAIL: passed without a driver" >&2; exit 1; }
grep -q "^FAIL tern-info: gpu memory: unavailable: no CUDA driver" "$tmp/out2/summary.txt" ||
    { echo "test_gpu_check: FAIL: no driver not reported" >&2; cat "$tmp/out2/summary.txt" >&2; exit 1; }
echo "test_gpu_check: ok"
