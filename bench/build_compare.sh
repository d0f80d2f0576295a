#!/usr/bin/env bash
# bench/build_compare.sh REV [BUILD_DIR]: the same benchmarks on two builds
# of tern in one run: REV (built here into a scratch worktree) as "before"
# and BUILD_DIR (default build) as "after", for a change that must not cost
# throughput or latency.  Each build runs its own target and initiator
# (tern-bench, its own core and plugins), on loopback:
#   tcp 8 B write    one request in flight: p50 latency (us) and ops/s
#   tcp 1 MiB write  and read, batch 16, 2 batches in flight: GB/s
#   shm 8 B write    one request in flight: ops/s (the core's share of a
#                    small operation is largest here)
# Rounds alternate before/after (ROUNDS, default 5; SECONDS_PER_RUN, 2), so
# the machine's load falls on both alike; prints every run, then the median
# of each side and after/before, for the figure and for the CPU time both
# processes spent per request (what a busy machine disturbs least).  The load average is printed at start and
# end.  JSON of the medians to RESULT (default: none).
set -euo pipefail

REV=${1:?usage: bench/build_compare.sh REV [BUILD_DIR]}
AFTER=$(cd "${2:-build}" && pwd)
ROUNDS=${ROUNDS:-5}
T=${SECONDS_PER_RUN:-2}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
WORK=$(mktemp -d /tmp/tern-cmp-XXXXXX)
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    git -C "$ROOT" worktree remove --force "$WORK/src" 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT INT TERM

rev=$(git -C "$ROOT" rev-parse --short "$REV")
echo "build_compare: before = $rev (building in $WORK), after = $AFTER"
git -C "$ROOT" worktree add -q --detach "$WORK/src" "$rev"
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache)
# the build type of the "after" build, so both are compiled alike
btype=$(sed -n 's/^CMAKE_BUILD_TYPE:STRING=//p' "$AFTER/CMakeCache.txt")
cmake -S "$WORK/src" -B "$WORK/before" ${btype:+-DCMAKE_BUILD_TYPE="$btype"} "${launcher[@]}" >"$WORK/cmake.log" 2>&1 ||
    { cat "$WORK/cmake.log" >&2; exit 1; }
cmake --build "$WORK/before" -j"$(nproc)" --target tern-bench tern_transport_tcp tern_transport_shm >"$WORK/build.log" 2>&1 ||
    { tail -30 "$WORK/build.log" >&2; exit 1; }
BEFORE=$WORK/before

for t in tcp shm; do
    printf 'server_name: 127.0.0.1:0\nmetadata: p2p\ntransports:\n  - name: %s\nlog_level: warn\n' \
        "$t" >"$WORK/$t.yaml"
done

declare -A SEG TPID
start_target() { # side transport
    local out="$WORK/target-$1-$2.out" bdir
    [ "$1" = before ] && bdir=$BEFORE || bdir=$AFTER
    "$bdir/bin/tern-bench" --mode target --config "$WORK/$2.yaml" --buffer-size 16M >"$out" 2>&1 &
    PIDS+=($!)
    TPID[$1-$2]=$!
    for _ in $(seq 300); do
        SEG[$1-$2]=$(sed -n 's/^tern-bench target ready: \([^ ]*\).*/\1/p' "$out")
        [ -n "${SEG[$1-$2]}" ] && return 0
        sleep 0.1
    done
    echo "build_compare: the $1 $2 target did not start:" >&2
    cat "$out" >&2
    exit 1
}
for side in before after; do
    for t in tcp shm; do start_target "$side" "$t"; done
done

cpu_of() { awk -v hz="$(getconf CLK_TCK)" '{print ($14 + $15) / hz}' "/proc/$1/stat"; }

# side transport op block batch qd field -> "value cpu_us_per_op": the
# field of the initiator's summary, and the CPU time of both processes
# (initiator: /usr/bin/time, target: /proc/PID/stat) per request, which a
# loaded machine disturbs much less than a rate.
run() {
    local bdir t0 t1 ops
    [ "$1" = before ] && bdir=$BEFORE || bdir=$AFTER
    t0=$(cpu_of "${TPID[$1-$2]}")
    /usr/bin/time -f "%U %S" -o "$WORK/time" \
        "$bdir/bin/tern-bench" --mode initiator --config "$WORK/$2.yaml" --segment "${SEG[$1-$2]}" \
        --op "$3" --block-size "$4" --batch-size "$5" --queue-depth "$6" --threads 1 \
        --buffer-size 16M --duration "$T" --json 2>"$WORK/init.log" >"$WORK/init.json" ||
        { echo "build_compare: $1 $2 $3 $4 failed:" >&2; cat "$WORK/init.log" >&2; exit 1; }
    t1=$(cpu_of "${TPID[$1-$2]}")
    ops=$(sed -n 's/.*"ops":\([0-9]*\).*/\1/p' "$WORK/init.json")
    printf '%s %s\n' "$(sed -n "s/.*\"$7\":\([0-9.]*\).*/\1/p" "$WORK/init.json")" \
        "$(awk -v t0="$t0" -v t1="$t1" -v ops="$ops" '{ printf "%.2f", (ops > 0 ? ($1 + $2 + t1 - t0) * 1e6 / ops : 0) }' "$WORK/time")"
}

CASES=("tcp-8B-write-p50_us|tcp write 8 1 1 lat_p50_us"
       "tcp-8B-write-ops|tcp write 8 1 1 ops_per_s"
       "tcp-1MiB-write-GBps|tcp write 1M 16 2 gb_per_s"
       "tcp-1MiB-read-GBps|tcp read 1M 16 2 gb_per_s"
       "shm-8B-write-ops|shm write 8 1 1 ops_per_s")
echo "build_compare: load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq "$ROUNDS"); do
    for c in "${CASES[@]}"; do
        name=${c%%|*}
        read -r tr op bs batch qd field <<<"${c#*|}"
        for side in before after; do
            read -r v cpu <<<"$(run "$side" "$tr" "$op" "$bs" "$batch" "$qd" "$field")"
            echo "$v" >>"$WORK/$name.$side"
            echo "$cpu" >>"$WORK/$name.cpu.$side"
            echo "build_compare: round $r $name $side $v (CPU $cpu us per request)"
        done
    done
done
echo "build_compare: load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"

median() { sort -n "$1" | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
json="{\"before\":\"$rev\",\"after\":\"$(git -C "$ROOT" rev-parse --short HEAD)\",\"rounds\":$ROUNDS,\"cases\":{"
sep=
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", (b > 0 ? a / b : 0) }'; }
printf '%-22s %12s %12s %8s | %s\n' case "before($rev)" after after/before \
    "CPU us per request: before, after, after/before"
for c in "${CASES[@]}"; do
    name=${c%%|*}
    b=$(median "$WORK/$name.before")
    a=$(median "$WORK/$name.after")
    cb=$(median "$WORK/$name.cpu.before")
    ca=$(median "$WORK/$name.cpu.after")
    printf '%-22s %12s %12s %8s | %8s %8s %8s\n' "$name" "$b" "$a" "$(ratio "$a" "$b")" \
        "$cb" "$ca" "$(ratio "$ca" "$cb")"
    json="$json$sep\"$name\":{\"before\":$b,\"after\":$a,\"after_over_before\":$(ratio "$a" "$b"),"
    json="$json\"cpu_us_per_request_before\":$cb,\"cpu_us_per_request_after\":$ca}"
    sep=,
done
json="$json}}"
if [ -n "${RESULT:-}" ]; then echo "$json" >"$RESULT"; fi
echo "build_compare: p50 latency: lower is better; ops/s and GB/s: higher is better"
