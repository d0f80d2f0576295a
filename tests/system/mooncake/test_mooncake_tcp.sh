#!/usr/bin/env bash
# tests/system/mooncake/test_mooncake_tcp.sh BUILD_DIR TAG
# tern and a real Mooncake Transfer Engine (TAG: v0.3.10 or v0.3.12.post1)
# move data with each other over TCP, P2PHANDSHAKE metadata, in a private
# network namespace (Mooncake binds 0.0.0.0 and [::] with no option).
#   1. tern initiator -> Mooncake target: WRITE then READ back, 64 KiB and
#      1 MiB blocks, every byte compared (tern-test-mooncake-peer).
#   2. Mooncake initiator -> tern target: READ (tern's memory must stay
#      unchanged) and WRITE (tern checks every written byte and that nothing
#      else changed, guards included), 64 KiB and 1 MiB blocks.
#   3. Notifications: tern -> Mooncake (its target logs what it got) and
#      Mooncake -> tern (tern's queue).
# The Mooncake binaries come from TERN_MOONCAKE_BENCH_V0310 /
# TERN_MOONCAKE_BENCH_V0312 (transfer_engine_bench; its sibling
# transfer_engine_bench_with_notify is used too), built by
# tests/system/mooncake/build-mooncake.sh.  Without them, or without the right to
# create a network namespace, the test says so and exits 77 (skipped).
set -u
BUILD=$1
TAG=$2
case "$TAG" in
  v0.3.10) VAR=TERN_MOONCAKE_BENCH_V0310 ;;
  v0.3.12.post1) VAR=TERN_MOONCAKE_BENCH_V0312 ;;
  *) echo "usage: $0 BUILD_DIR v0.3.10|v0.3.12.post1" >&2; exit 2 ;;
esac
BENCH=${!VAR:-}
if [ -z "$BENCH" ] || [ ! -x "$BENCH" ]; then
    echo "SKIP: $VAR is not set to Mooncake $TAG's transfer_engine_bench" \
         "(build it with tests/system/mooncake/build-mooncake.sh)"
    exit 77
fi
NBENCH=$(dirname "$BENCH")/transfer_engine_bench_with_notify
if [ ! -x "$NBENCH" ]; then
    echo "SKIP: $NBENCH is missing (tests/system/mooncake/build-mooncake.sh builds it beside $BENCH)"
    exit 77
fi
if [ -z "${TERN_MC_IN_NETNS:-}" ]; then
    if ! unshare -n true 2>/dev/null; then
        echo "SKIP: cannot create a private network namespace (unshare -n needs root)"
        exit 77
    fi
    TERN_MC_IN_NETNS=1 exec unshare -n "$0" "$@"
fi
ip link set lo up || exit 1

PEER=$BUILD/bin/tern-test-mooncake-peer
WORK=$(mktemp -d)
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
    wait 2>/dev/null
    rm -rf "$WORK"
}
trap cleanup EXIT
fail() { echo "FAIL ($TAG): $*"; for f in "$WORK"/*.log; do [ -f "$f" ] && { echo "--- $f"; tail -15 "$f"; }; done; exit 1; }
MB=$((1 << 20))
COMMON=(--protocol=tcp --metadata_server=P2PHANDSHAKE --local_server_name=127.0.0.1:12345)

# Start a Mooncake target; sets MC_PORT (its handshake port, from its log:
# in P2P mode it picks one at random and ignores the one it was given).
mc_target() {
    GLOG_logtostderr=1 "$1" --mode=target "${COMMON[@]}" --buffer_size=$((64 * MB)) >"$2" 2>&1 &
    PIDS+=($!)
    MC_PORT=
    for _ in $(seq 600); do
        MC_PORT=$(sed -n 's/.*listening on 127\.0\.0\.1:\([0-9][0-9]*\).*/\1/p' "$2" | head -1)
        [ -n "$MC_PORT" ] && break
        kill -0 "${PIDS[-1]}" 2>/dev/null || fail "Mooncake target exited: $(tail -3 "$2")"
        sleep 0.1
    done
    [ -n "$MC_PORT" ] || fail "no handshake port in $2"
    # its memory is registered right after the daemon starts: wait for the
    # descriptor to list a buffer before using it
    sleep 1
}

mc_initiator() { # bin op block segment log [extra...]
    local bin=$1 op=$2 block=$3 seg=$4 log=$5
    shift 5
    GLOG_logtostderr=1 timeout 120 "$bin" --mode=initiator "${COMMON[@]}" --segment_id="$seg" \
        --operation="$op" --block_size="$block" --batch_size=16 --threads=1 --duration=1 \
        --buffer_size=$((32 * MB)) "$@" >"$log" 2>&1
}

# ---- 1 + 3a: tern initiator -> Mooncake target ------------------------------------
mc_target "$NBENCH" "$WORK/mc-target.log"
for block in 65536 $MB; do
    out=$("$PEER" initiator "127.0.0.1:$MC_PORT" "$block" 16 notify 2>&1) ||
        fail "tern -> Mooncake, $block B blocks: $out"
    echo "ok  ($TAG) tern initiator -> Mooncake target: $out"
done
# (its target drains its notification queue once a second)
for _ in $(seq 100); do
    grep -q 'ternhello-from-tern' "$WORK/mc-target.log" && break
    sleep 0.1
done
grep -q 'ternhello-from-tern' "$WORK/mc-target.log" ||
    fail "Mooncake's target did not log tern's notification (name 'tern', 'hello-from-tern')"
echo "ok  ($TAG) notification tern -> Mooncake received"

# ---- 2 + 3b: Mooncake initiator -> tern target -------------------------------------
coproc TERN { exec "$PEER" target 2>"$WORK/tern-target.log"; }
PIDS+=($TERN_PID)
read -r -t 60 ready name addr len <&"${TERN[0]}" || fail "tern target did not start"
[ "$ready" = READY ] || fail "tern target said '$ready $name'"
ask() { echo "$1" >&"${TERN[1]}"; read -r -t 60 REPLY <&"${TERN[0]}" || fail "tern target silent after $1"; }

for block in 65536 $MB; do
    mc_initiator "$BENCH" read "$block" "$name" "$WORK/mc-read-$block.log" ||
        fail "Mooncake READ of $block B blocks from tern failed: $(tail -3 "$WORK/mc-read-$block.log")"
    ask PATTERN
    [ "$REPLY" = "PATTERN ok" ] || fail "a Mooncake READ changed tern's memory: $REPLY"
    echo "ok  ($TAG) Mooncake initiator READ $block B blocks from tern target"
done
for block in 65536 $MB; do
    mc_initiator "$BENCH" write "$block" "$name" "$WORK/mc-write-$block.log" ||
        fail "Mooncake WRITE of $block B blocks to tern failed: $(tail -3 "$WORK/mc-write-$block.log")"
    # Mooncake writes its (zero-filled) buffer to [0, 16 blocks) of ours
    ask "EXPECT $((16 * block)) 0"
    [ "$REPLY" = "EXPECT ok" ] || fail "after Mooncake's WRITE of 16 x $block B: $REPLY"
    echo "ok  ($TAG) Mooncake initiator WRITE $block B blocks into tern target, byte-exact"
done
# Its with_notify initiator sends one notification per batch but does not
# exit after --duration (against a Mooncake target too): stop it after 10 s;
# what counts is what tern received.
GLOG_logtostderr=1 timeout 10 "$NBENCH" --mode=initiator "${COMMON[@]}" --segment_id="$name" \
    --operation=write --block_size=65536 --batch_size=16 --threads=1 --duration=1 \
    --buffer_size=$((32 * MB)) >"$WORK/mc-notify.log" 2>&1
rc=$?
[ $rc = 0 ] || [ $rc = 124 ] || fail "Mooncake WRITE with notifications failed (rc $rc)"
echo NOTES >&"${TERN[1]}"
got=
while read -r -t 60 line <&"${TERN[0]}"; do
    [ "$line" = "NOTES end" ] && break
    case "$line" in "NOTE agent1 notification"*) got=1 ;; esac
done
[ -n "$got" ] || fail "tern got no notification from Mooncake (expected name agent1)"
echo "ok  ($TAG) notification Mooncake -> tern received"
ask CHECK
[ "$REPLY" = "CANARY ok" ] || fail "guards around tern's buffer changed: $REPLY"
echo EXIT >&"${TERN[1]}"
echo "PASS ($TAG): tern <-> Mooncake over TCP"
