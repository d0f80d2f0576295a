#!/usr/bin/env bash
# bench/latency.sh [BUILD_DIR]: small-operation latency of tern over TCP on
# loopback beside a plain C TCP ping-pong, in one run.
#
#   baseline: tern-bench-pingpong --size 8 (bench/pingpong.c: two processes,
#             blocking sockets, TCP_NODELAY, one 8-byte message each way)
#   tern:     tern-bench target + initiator, --block-size 8 --batch-size 1
#             --queue-depth 1 --threads 1 (one request in flight, wait for it,
#             next), --op write and --op read, tcp transport
#   shape:    tern-bench-pingpong --shape event: the same ping-pong waiting
#             the way the tcp transport does (the server in epoll_wait, the
#             client in ppoll before each read): what that shape costs alone
#   transport alone: tern-bench-tcp-rtt (bench/tcp_rtt.c) drives the tcp
#             plugin through its vtable without the core, same sizes; the
#             difference to the full figure is the core's path
# PREVIOUS_PLUGIN_DIR=DIR (a directory holding another libtern-tcp.so, e.g.
# an older commit's) adds its WRITE/READ rows, run the same way through
# TERN_PLUGIN_PATH.  The baseline runs before and after the tern runs; its
# p50 is the mean of the two.  Prints p50/p99 of each and tern's p50 as a ratio of the
# baseline's (goal: <= 1.5).  Environment: SECONDS_PER_RUN (3), SIZE (8).
set -euo pipefail

BUILD=${1:-build}
BENCH="$BUILD/bin/tern-bench"
PP="$BUILD/bin/tern-bench-pingpong"
RTT="$BUILD/bin/tern-bench-tcp-rtt"
PLUGIN="$BUILD/lib/tern/libtern-tcp.so"
T=${SECONDS_PER_RUN:-3}
SIZE=${SIZE:-8}
for b in "$BENCH" "$PP" "$RTT"; do
    [ -x "$b" ] || { echo "latency: $b not found (build first)" >&2; exit 1; }
done
command -v python3 >/dev/null || { echo "latency: python3 is needed to read JSON" >&2; exit 1; }

WORK=$(mktemp -d "${TMPDIR:-/tmp}/tern-latency.XXXXXX")
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
    rm -rf "$WORK"
}
trap cleanup EXIT INT TERM

CONFIG="$WORK/tern.yaml"
cat >"$CONFIG" <<YAML
server_name: 127.0.0.1:0
metadata: p2p
transports:
  - name: tcp
log_level: warn
YAML
start_target() { # -> SEG (the target runs the plugin TERN_PLUGIN_PATH names, if set)
    "$BENCH" --mode target --config "$CONFIG" --buffer-size 1M >"$WORK/target.out" 2>"$WORK/target.log" &
    PIDS+=($!)
    SEG=
    for _ in $(seq 300); do
        SEG=$(sed -n 's/^tern-bench target ready: \([^ ]*\).*/\1/p' "$WORK/target.out")
        [ -n "$SEG" ] && break
        sleep 0.1
    done
    [ -n "$SEG" ] || { echo "latency: the tern target did not start:" >&2; cat "$WORK/target.log" >&2; exit 1; }
}
stop_target() {
    kill -TERM "${PIDS[-1]}" 2>/dev/null || true
    wait "${PIDS[-1]}" 2>/dev/null || true
    unset 'PIDS[-1]'
}
start_target

pingpong() { # [shape] -> "p50 p99"
    "$PP" --size "$SIZE" --duration "$T" --shape "${1:-plain}" |
        sed -n 's/.*p50_us=\([0-9]*\) p99_us=\([0-9]*\).*/\1 \2/p'
}

tern() { # op -> "p50 p99"
    local out="$WORK/tern-$1.json"
    "$BENCH" --mode initiator --config "$CONFIG" --segment "$SEG" --op "$1" \
        --block-size "$SIZE" --batch-size 1 --queue-depth 1 --threads 1 --buffer-size 1M \
        --duration "$T" --json >"$out" 2>"$WORK/tern-$1.log" || {
        echo "latency: tern-bench failed:" >&2; cat "$WORK/tern-$1.log" "$out" >&2; exit 1; }
    python3 -c "import json,sys; d=json.load(open(sys.argv[1])); \
assert d['errors'] == 0, 'errors'; print('%d %d' % (d['lat_p50_us'], d['lat_p99_us']))" "$out"
}

rtt() { # op -> "p50 p99"
    "$RTT" "$PLUGIN" --op "$1" --size "$SIZE" --duration "$T" |
        sed -n 's/.*p50_us=\([0-9]*\) p99_us=\([0-9]*\).*/\1 \2/p'
}

read -r pa pa99 <<<"$(pingpong)"
read -r pe pe99 <<<"$(pingpong event)"
read -r tw50 tw99 <<<"$(rtt write)"
read -r tr50 tr99 <<<"$(rtt read)"
read -r w50 w99 <<<"$(tern write)"
read -r r50 r99 <<<"$(tern read)"
if [ -n "${PREVIOUS_PLUGIN_DIR:-}" ]; then
    stop_target
    export TERN_PLUGIN_PATH="$PREVIOUS_PLUGIN_DIR"
    start_target
    read -r ow50 ow99 <<<"$(tern write)"
    read -r or50 or99 <<<"$(tern read)"
    stop_target
    unset TERN_PLUGIN_PATH
fi
read -r pb pb99 <<<"$(pingpong)"
base=$(python3 -c "print('%.1f' % (($pa + $pb) / 2))")
base99=$(python3 -c "print('%.1f' % (($pa99 + $pb99) / 2))")
ratio() { python3 -c "print('%.2f' % ($1 / $base))"; }
printf '%-22s %8s %8s %14s\n' "$SIZE-byte round trip" "p50 us" "p99 us" "p50 / baseline"
printf '%-22s %8s %8s %14s\n' "C TCP ping-pong" "$base" "$base99" "1.00"
printf '%-22s %8s %8s %14s\n' "ping-pong, event shape" "$pe" "$pe99" "$(ratio "$pe")"
printf '%-22s %8s %8s %14s\n' "tern tcp WRITE" "$w50" "$w99" "$(ratio "$w50")"
printf '%-22s %8s %8s %14s\n' "tern tcp READ" "$r50" "$r99" "$(ratio "$r50")"
if [ -n "${PREVIOUS_PLUGIN_DIR:-}" ]; then
    printf '%-22s %8s %8s %14s\n' "previous plugin WRITE" "$ow50" "$ow99" "$(ratio "$ow50")"
    printf '%-22s %8s %8s %14s\n' "previous plugin READ" "$or50" "$or99" "$(ratio "$or50")"
fi
printf '%-22s %8s %8s %14s\n' "transport WRITE" "$tw50" "$tw99" "$(ratio "$tw50")"
printf '%-22s %8s %8s %14s\n' "transport READ" "$tr50" "$tr99" "$(ratio "$tr50")"
echo "(tern: the public API, tern-bench; transport: the tcp plugin alone, no core;"
echo " ping-pong before: p50 $pa us, after: p50 $pb us; $T s per run; one request in flight;"
echo " load average now: $(cut -d' ' -f1-3 /proc/loadavg))"
