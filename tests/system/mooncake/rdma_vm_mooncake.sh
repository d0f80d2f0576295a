#!/bin/sh
# tests/system/mooncake/rdma_vm_mooncake.sh BUILD_DIR MOONCAKE_BENCH (inside the
# Soft-RoCE guest: tests/system/vm/run-in-vm.sh runs it; see tests/system/mooncake/mooncake.cmake)
# tern's rdma transport and Mooncake's RDMA transport over rxe0:
#  1. Mooncake target, tern initiator: WRITE then READ back, byte-exact,
#     64 KiB and 1 MiB blocks.
#  2. tern target, Mooncake initiator: refused, by design.  tern brings up
#     a passive endpoint only after the segment a Connection names confirms
#     it sent it (docs/protocol.md, Handshake frames); Mooncake has no such
#     confirmation, so its RDMA initiator is refused (its bench exits with
#     an error) and tern's memory must stay untouched.
#  3. tern target with handshake_confirm: false (the opt-in for clusters
#     mixing tern and Mooncake engines; docs/configuration.md), Mooncake
#     initiator: WRITE (tern's memory then holds Mooncake's zero-filled
#     buffer at [0, 16 blocks) and its pattern after) then READ (nothing
#     changes), 64 KiB and 1 MiB blocks, checked byte by byte by tern's
#     target; each Mooncake sender is logged at WARN once.
# The handshake (Connection: HandShakeDesc with local_nic_path,
# peer_nic_path, qp_num, LID/GID) and the QP attributes are the ones both
# sides document; see docs/protocol.md, Mooncake compatibility.
B=${1:?usage: rdma_vm_mooncake.sh BUILD_DIR MOONCAKE_BENCH}
MC=${2:?usage: rdma_vm_mooncake.sh BUILD_DIR MOONCAKE_BENCH}
PEER=$B/bin/tern-test-mooncake-peer
W=/tmp/mc-rdma
mkdir -p $W
cat > $W/rdma.yaml <<Y
server_name: 127.0.0.1:0
metadata: p2p
transports:
  - name: rdma
    required: true
retries: 1
log_level: warn
Y
export TERN_MC_PEER_CONFIG=$W/rdma.yaml GLOG_logtostderr=1
MCF="--protocol=rdma --device_name=rxe0 --metadata_server=P2PHANDSHAKE --local_server_name=127.0.0.1:12345"
fail() { echo "FAIL: $*"; for f in $W/*.log; do echo "--- $f"; tail -20 "$f"; done; exit 1; }

echo "=== 1. Mooncake target, tern initiator (rdma)"
"$MC" --mode=target $MCF --buffer_size=67108864 > $W/mc-target.log 2>&1 &
mpid=$!
port=
i=0
while [ $i -lt 600 ] && [ -z "$port" ]; do
    port=$(sed -n 's/.*listening on 127\.0\.0\.1:\([0-9][0-9]*\).*/\1/p' $W/mc-target.log | head -1)
    sleep 0.1; i=$((i + 1))
done
[ -n "$port" ] || fail "Mooncake target did not start"
sleep 2
for block in 65536 1048576; do
    out=$(timeout 120 "$PEER" initiator 127.0.0.1:$port $block 16 2>$W/tern-init.log) ||
        fail "tern -> Mooncake over rdma, $block B blocks: $out"
    echo "ok  tern initiator -> Mooncake target (rdma): $out"
done
kill $mpid

echo "=== 2. tern target, Mooncake initiator (rdma)"
mkfifo $W/in
"$PEER" target < $W/in > $W/tern-target.out 2> $W/tern-target.log &
tpid=$!
exec 3> $W/in
i=0
while [ $i -lt 600 ] && ! grep -q READY $W/tern-target.out; do sleep 0.1; i=$((i + 1)); done
name=$(sed -n 's/^READY \([^ ]*\).*/\1/p' $W/tern-target.out)
[ -n "$name" ] || fail "tern target did not start"
ask() { n=$(wc -l < $W/tern-target.out); echo "$1" >&3; i=0
        while [ $i -lt 600 ] && [ "$(wc -l < $W/tern-target.out)" -le "$n" ]; do sleep 0.1; i=$((i + 1)); done
        tail -1 $W/tern-target.out; }
if timeout 120 "$MC" --mode=initiator $MCF --segment_id=$name --operation=write --block_size=65536 \
        --batch_size=16 --threads=1 --duration=1 --buffer_size=33554432 > $W/mc-write.log 2>&1; then
    fail "tern accepted an unconfirmed Connection from a Mooncake RDMA initiator"
fi
grep -q "confirm" $W/mc-write.log ||
    fail "Mooncake's initiator failed for another reason than the missing confirmation"
r=$(ask PATTERN); [ "$r" = "PATTERN ok" ] || fail "tern's memory changed: $r"
echo "ok  Mooncake RDMA initiator refused (no Connection confirmation), tern memory untouched"
r=$(ask CHECK); [ "$r" = "CANARY ok" ] || fail "guards: $r"
echo EXIT >&3
exec 3>&-
wait $tpid

echo "=== 3. tern target with handshake_confirm: false, Mooncake initiator (rdma)"
sed 's/^log_level: warn$/log_level: warn\nhandshake_confirm: false/' $W/rdma.yaml > $W/rdma-open.yaml
grep -q '^handshake_confirm: false$' $W/rdma-open.yaml || fail "no handshake_confirm in $W/rdma-open.yaml"
mkfifo $W/in3
TERN_MC_PEER_CONFIG=$W/rdma-open.yaml "$PEER" target < $W/in3 > $W/tern-target.out 2> $W/tern-open.log &
tpid=$!
exec 3> $W/in3
i=0
while [ $i -lt 600 ] && ! grep -q READY $W/tern-target.out; do sleep 0.1; i=$((i + 1)); done
name=$(sed -n 's/^READY \([^ ]*\).*/\1/p' $W/tern-target.out)
[ -n "$name" ] || fail "tern target (handshake_confirm: false) did not start"
mc() { timeout 120 "$MC" --mode=initiator $MCF --segment_id=$name --operation=$1 --block_size=$2 \
        --batch_size=16 --threads=1 --duration=1 --buffer_size=33554432 > $W/mc-$1-$2.log 2>&1; }
for block in 65536 1048576; do
    mc write $block || fail "Mooncake RDMA WRITE of $block B blocks to tern (handshake_confirm: false) failed"
    r=$(ask "EXPECT $((16 * block)) 0")
    [ "$r" = "EXPECT ok" ] || fail "after Mooncake's RDMA WRITE of 16 x $block B: $r"
    echo "ok  Mooncake RDMA initiator WRITE $block B blocks into tern target, byte-exact"
    mc read $block || fail "Mooncake RDMA READ of $block B blocks from tern (handshake_confirm: false) failed"
    r=$(ask "EXPECT $((16 * block)) 0")
    [ "$r" = "EXPECT ok" ] || fail "a Mooncake RDMA READ of $block B blocks changed tern's memory: $r"
    echo "ok  Mooncake RDMA initiator READ $block B blocks from tern target, memory unchanged"
done
r=$(ask CHECK); [ "$r" = "CANARY ok" ] || fail "guards: $r"
warned=$(sed -n 's/.*accepting an unconfirmed Connection from \([^ ]*\)@.*/\1/p' $W/tern-open.log)
[ -n "$warned" ] || fail "tern accepted Mooncake's unconfirmed Connection without a WARN"
[ -z "$(echo "$warned" | sort | uniq -d)" ] || fail "a sender was warned about twice: $warned"
echo "ok  unconfirmed Connections logged once per sender: $(echo $warned)"
echo EXIT >&3
wait $tpid
echo "PASS: tern initiator <-> Mooncake target over RDMA (rxe0), Mooncake initiator refused by" \
     "default and served with handshake_confirm: false"
