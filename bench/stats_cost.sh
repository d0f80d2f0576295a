#!/bin/sh
# bench/stats_cost.sh: what counting statistics costs end to end: tern-bench
# over tcp on loopback, 8 B and 64 KiB WRITE, runs alternating between an
# initiator with `stats: true` (the default) and one with `stats: false`
# against the same target, in the same run; prints each run and the
# median ops/s of each side with the overhead (off / on - 1).
# The in-process worst case (memcpy transport): build/bin/tern-bench-stats.
#   usage: bench/stats_cost.sh [build dir] [runs per side] [seconds per run]
set -eu
build=${1:-build}
runs=${2:-5}
secs=${3:-2}
bench=$build/bin/tern-bench
tmp=$(mktemp -d /tmp/tern-statscost-XXXXXX)
trap 'kill $tpid 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$tmp"' EXIT
for s in true false; do
    printf 'server_name: 127.0.0.1:0\ntransports:\n  - name: tcp\nlog_level: warn\nstats: %s\n' \
        "$s" >"$tmp/$s.yaml"
done
"$bench" --mode target --config "$tmp/true.yaml" --buffer-size 16M >"$tmp/target.out" 2>&1 &
tpid=$!
seg=
for _ in $(seq 300); do
    seg=$(sed -n 's/^tern-bench target ready: \([^ ]*\).*/\1/p' "$tmp/target.out")
    [ -n "$seg" ] && break
    sleep 0.1
done
[ -n "$seg" ] || { echo "stats_cost: target did not come up" >&2; exit 1; }
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
for bs in 8 64K; do
    : >"$tmp/true.ops"
    : >"$tmp/false.ops"
    for i in $(seq "$runs"); do
        for s in true false; do
            "$bench" --mode initiator --config "$tmp/$s.yaml" --segment "$seg" --buffer-size 16M \
                --block-size $bs --batch-size 16 --duration "$secs" --json 2>/dev/null |
                sed -n 's/.*"ops_per_s":\([0-9.]*\).*/\1/p' >>"$tmp/$s.ops"
            echo "stats_cost: $bs stats=$s run $i: $(tail -1 "$tmp/$s.ops") ops/s"
        done
    done
    on=$(median <"$tmp/true.ops")
    off=$(median <"$tmp/false.ops")
    echo "stats_cost: $bs WRITE over tcp: median ops/s stats on $on, off $off: overhead" \
         "$(awk -v a="$on" -v b="$off" 'BEGIN {printf "%+.2f %%", (b / a - 1) * 100}')"
done
