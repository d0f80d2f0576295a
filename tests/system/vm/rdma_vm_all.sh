#!/bin/sh
# The RDMA integration run, INSIDE the Soft-RoCE guest (see tests/system/vm/vm.cmake):
#   tests/system/vm/run-in-vm.sh tests/system/vm/rdma_vm_all.sh BUILD_DIR
#  1. tern_rdma_vm_suite: the plugin through its vtable, two processes.
#  2. two engines (tern-bench target + initiator, two processes) over rxe0
#     with only the rdma transport loaded (required: true, no tcp to fall
#     back on): WRITE and READ with --verify (byte-exact) at several block
#     sizes.  Emulated hardware: the figures prove correctness, not speed.
# Exit 0 when everything passed.
B=${1:?usage: rdma_vm_all.sh BUILD_DIR}
OUT=${TERN_VM_OUT:-/tmp}
fails=0
t0=$(cut -d' ' -f1 /proc/uptime)

echo "=== 1. plugin suite (tern_rdma_vm_suite)"
"$B/bin/tern_rdma_vm_suite" --jobs 1 --verbose 2>&1
rc=$?
[ $rc -eq 0 ] || { echo "rdma_vm: plugin suite FAILED (exit $rc)"; fails=$((fails + 1)); }
t1=$(cut -d' ' -f1 /proc/uptime)

echo "=== 2. two engines over rxe0 (tern-bench --verify, rdma only)"
cfg=/tmp/rdma-only.yaml
cat > $cfg <<EOF
server_name: 127.0.0.1:0
metadata: p2p
transports:
  - name: rdma
    required: true
slice_size: 64K
retries: 3
log_level: warn
EOF
"$B/bin/tern-bench" --mode target --config $cfg --buffer-size 40M > /tmp/target.out 2> /tmp/target.err &
tpid=$!
seg=
i=0
while [ $i -lt 300 ]; do
  seg=$(sed -n 's/^tern-bench target ready: \([^ ]*\).*/\1/p' /tmp/target.out)
  [ -n "$seg" ] && break
  kill -0 $tpid 2>/dev/null || break
  sleep 0.1
  i=$((i + 1))
done
if [ -z "$seg" ]; then
  echo "rdma_vm: tern-bench target did not start:"; cat /tmp/target.out /tmp/target.err
  fails=$((fails + 1))
else
  echo "target: $seg"
  runs=0 ok=0
  # op block batch buffer: tern-bench --verify writes the WHOLE buffer
  # before a read run, one batch at a time, so the buffer stays small for
  # small blocks (36 MiB of 1-byte requests would take hours under TCG).
  for spec in "write 1 8 4K" "read 1 8 4K" "write 4096 8 1M" "read 4096 8 1M" \
              "write 65537 4 4M" "read 65537 4 4M" "write 16777219 1 36M" "read 16777219 1 36M"; do
    set -- $spec
    runs=$((runs + 1))
    res=$(timeout 120 "$B/bin/tern-bench" --mode initiator --segment "$seg" --config $cfg --op $1 \
          --block-size $2 --batch-size $3 --buffer-size $4 --duration 1 --verify --json \
          2> /tmp/init.err)
    rc=$?
    echo "tern-bench $1 block $2 batch $3 -> exit $rc: $res"
    case $res in
      *'"transport":"rdma"'*'"errors":0,"verify":"ok"'*) [ $rc -eq 0 ] && ok=$((ok + 1)) ;;
      *) echo "rdma_vm: tern-bench $1 $2 FAILED"; tail -n 5 /tmp/init.err; fails=$((fails + 1)) ;;
    esac
  done
  echo "rdma_vm: tern-bench over rxe0: $ok of $runs runs byte-exact"
  kill -TERM $tpid 2>/dev/null
  wait $tpid
  grep -v '^$' /tmp/target.err | tail -n 3
fi
t2=$(cut -d' ' -f1 /proc/uptime)
awk -v a="$t0" -v b="$t1" -v c="$t2" \
  'BEGIN { printf "rdma_vm: guest time: plugin suite %.1f s, engines %.1f s\n", b - a, c - b }'
[ $fails -eq 0 ] && echo "rdma_vm: ALL PASSED" || echo "rdma_vm: $fails part(s) FAILED"
[ $fails -eq 0 ]
