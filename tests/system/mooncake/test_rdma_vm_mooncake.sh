#!/bin/sh
# tests/system/mooncake/test_rdma_vm_mooncake.sh SOURCE_DIR BUILD_DIR TAG: CTest's
# rdma_vm_mooncake_<tag>: boots the Soft-RoCE guest (tests/system/vm) and runs
# tests/system/mooncake/rdma_vm_mooncake.sh there, with Mooncake's
# transfer_engine_bench from TERN_MOONCAKE_BENCH_V0310 / _V0312 (the guest
# sees the host's / read-only, so the cached binary is there too).
# 77 (skipped, reason printed) without the binary or without the VM.
S=$1 B=$2 TAG=$3
case "$TAG" in
  v0.3.10) BENCH=${TERN_MOONCAKE_BENCH_V0310:-} VAR=TERN_MOONCAKE_BENCH_V0310 ;;
  *) BENCH=${TERN_MOONCAKE_BENCH_V0312:-} VAR=TERN_MOONCAKE_BENCH_V0312 ;;
esac
if [ -z "$BENCH" ] || [ ! -x "$BENCH" ]; then
    echo "SKIP: $VAR is not set to Mooncake $TAG's transfer_engine_bench" \
         "(build it with tests/system/mooncake/build-mooncake.sh)"
    exit 77
fi
cd "$S" && exec tests/system/vm/run-in-vm.sh -t 420 tests/system/mooncake/rdma_vm_mooncake.sh "$B" "$BENCH"
