#!/usr/bin/env bash
# scripts/run-demo.sh BUILD_DIR: what `make run` does after building.
#
# Starts a tern-bench target and a tern-bench initiator on loopback with
# config/tern.yaml minus its shm entry (so the demo shows what it promises:
# data over TCP; p2p metadata), moves data both ways for a
# few seconds with --verify (every byte checked), prints the summaries, stops
# the target and exits 0.  Nothing else needs starting.  The target gets the
# config's server name (127.0.0.1:12001) when that port is free, otherwise a
# free port picked by the kernel.  On failure the target is stopped and its
# log shown.
set -eu

BUILD=${1:-build}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BENCH="$BUILD/bin/tern-bench"
SHIPPED="$ROOT/config/tern.yaml"
SECS=${TERN_DEMO_SECONDS:-3}

[ -x "$BENCH" ] || { echo "run-demo: $BENCH not found; build first (make build)" >&2; exit 1; }
[ -f "$SHIPPED" ] || { echo "run-demo: $SHIPPED not found" >&2; exit 1; }

WORK=$(mktemp -d "${TMPDIR:-/tmp}/tern-demo.XXXXXX")
# The shipped configuration lists shm first (two engines on one host would
# use it); the demo moves its bytes over TCP, so it drops that one entry.
CONFIG="$WORK/tern-tcp.yaml"
grep -v '^  - name: shm$' "$SHIPPED" >"$CONFIG"
TARGET_PID=

cleanup() {
    rc=$?
    if [ -n "$TARGET_PID" ] && kill -0 "$TARGET_PID" 2>/dev/null; then
        kill -TERM "$TARGET_PID" 2>/dev/null || true
        # give it 5 s to unregister and stop, then insist
        i=0
        while kill -0 "$TARGET_PID" 2>/dev/null && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
        kill -KILL "$TARGET_PID" 2>/dev/null || true
        wait "$TARGET_PID" 2>/dev/null || true
    fi
    if [ $rc -ne 0 ] && [ -f "$WORK/target.log" ]; then
        echo "run-demo: failed; target log:" >&2
        sed 's/^/  target| /' "$WORK/target.log" >&2
    fi
    rm -rf "$WORK"
    exit $rc
}
trap cleanup EXIT INT TERM
grep -q '^  - name: tcp$' "$CONFIG" && ! grep -q 'name: shm' "$CONFIG" ||
    { echo "run-demo: cannot derive a TCP-only configuration from $SHIPPED" >&2; exit 1; }

# The configured handshake port if it is free, else an ephemeral one.
NAME=$(sed -n 's/^server_name:[ ]*"\{0,1\}\([^" #]*\).*/\1/p' "$CONFIG" | head -n 1)
NAME=${NAME:-127.0.0.1:12001}
PORT=${NAME##*:}
if (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null; then
    echo "run-demo: port $PORT is taken; using a free port instead"
    NAME="${NAME%:*}:0"
fi

echo "run-demo: starting the target ($BENCH --mode target, config $CONFIG)"
"$BENCH" --mode target --config "$CONFIG" --server-name "$NAME" --buffer-size 64M \
    >"$WORK/target.out" 2>"$WORK/target.log" &
TARGET_PID=$!

SEGMENT=
i=0
while [ $i -lt 300 ]; do
    SEGMENT=$(sed -n 's/^tern-bench target ready: \([^ ]*\).*/\1/p' "$WORK/target.out")
    [ -n "$SEGMENT" ] && break
    kill -0 "$TARGET_PID" 2>/dev/null || { echo "run-demo: the target exited early" >&2; exit 1; }
    sleep 0.1
    i=$((i + 1))
done
[ -n "$SEGMENT" ] || { echo "run-demo: the target did not come up within 30 s" >&2; exit 1; }
echo "run-demo: target serving segment $SEGMENT"

status=0
for op in write read; do
    echo
    echo "run-demo: initiator, $op, 1 MiB blocks, ${SECS} s, --verify"
    TERN_LOG_LEVEL=${TERN_LOG_LEVEL:-warn} "$BENCH" --mode initiator --config "$CONFIG" \
        --segment "$SEGMENT" --op $op --block-size 1M --batch-size 8 --buffer-size 32M \
        --duration "$SECS" --verify || status=$?
    if [ $status -ne 0 ]; then
        echo "run-demo: the $op initiator failed (exit $status)" >&2
        exit $status
    fi
done

echo
echo "run-demo: done; data moved over TCP on loopback and every byte verified."
