#!/usr/bin/env bash
# bench/mooncake_vs_tern.sh [BUILD_DIR]: tern against Mooncake Transfer
# Engine over TCP on loopback, in one run, as ratios.
#
# For each Mooncake tag whose transfer_engine_bench is given
# (TERN_MOONCAKE_BENCH_V0310, TERN_MOONCAKE_BENCH_V0312; built by
# tests/system/mooncake/build-mooncake.sh), each op (OPS, default "write read")
# and block size (64K, 1M), back to back, the same shape on both:
#   Mooncake: transfer_engine_bench target + initiator, --protocol=tcp,
#             P2PHANDSHAKE, --batch_size=16 --threads=1, SECONDS_PER_RUN s
#             (MC_POOL=1 adds a run with MC_TCP_ENABLE_CONNECTION_POOL=1)
#   tern:     tern-bench target + initiator, tcp only, --batch-size 16
#             --threads 1, same duration
#   tern -> Mooncake: tern-bench initiator against the Mooncake target
#             (tern speaking Mooncake's data format)
# and prints GB/s (1e9 bytes) and tern / Mooncake.  Runs inside a private
# network namespace (Mooncake binds 0.0.0.0 and [::]); needs root.
# Absolute figures on a shared machine move a lot; the ratio of runs a few
# seconds apart is what counts.
# JSON_OUT=FILE: the results as JSON (bench/bench_results.py: series
# "Mooncake <tag>", "tern tcp, batch 16", "tern -> Mooncake <tag>", one row
# per op and size); PLOT=FILE.svg|.png: them drawn by tern-bench --plot.
set -euo pipefail
BUILD=$(cd "${1:-build}" && pwd)
T=${SECONDS_PER_RUN:-5}
OPS=${OPS:-"write read"}
JSON_OUT=${JSON_OUT:-}
PLOT=${PLOT:-}
RESULTS="$(cd "$(dirname "$0")" && pwd)/bench_results.py"
declare -A MC=()
[ -n "${TERN_MOONCAKE_BENCH_V0310:-}" ] && MC[v0.3.10]=$TERN_MOONCAKE_BENCH_V0310
[ -n "${TERN_MOONCAKE_BENCH_V0312:-}" ] && MC[v0.3.12.post1]=$TERN_MOONCAKE_BENCH_V0312
if [ ${#MC[@]} -eq 0 ]; then
    echo "mooncake_vs_tern: set TERN_MOONCAKE_BENCH_V0310 and/or TERN_MOONCAKE_BENCH_V0312" \
         "(tests/system/mooncake/build-mooncake.sh prints where it built them)" >&2
    exit 1
fi
if [ -z "${TERN_MC_IN_NETNS:-}" ]; then
    TERN_MC_IN_NETNS=1 exec unshare -n "$0" "$@"
fi
ip link set lo up
TB=$BUILD/bin/tern-bench
WORK=$(mktemp -d "${TMPDIR:-/tmp}/tern-vs-mooncake.XXXXXX")
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$WORK"; }
trap cleanup EXIT
cat >"$WORK/tern.yaml" <<'Y'
server_name: 127.0.0.1:0
metadata: p2p
transports:
  - name: tcp
log_level: warn
Y
MCFLAGS=(--protocol=tcp --metadata_server=P2PHANDSHAKE --local_server_name=127.0.0.1:12345)

start_mc_target() { # bench -> MCSEG
    GLOG_logtostderr=1 "$1" --mode=target "${MCFLAGS[@]}" --buffer_size=$((64 << 20)) \
        >"$WORK/mct.log" 2>&1 &
    PIDS+=($!)
    MCSEG=
    for _ in $(seq 600); do
        MCSEG=$(sed -n 's/.*listening on \(127\.0\.0\.1:[0-9][0-9]*\).*/\1/p' "$WORK/mct.log" | head -1)
        [ -n "$MCSEG" ] && break
        sleep 0.1
    done
    [ -n "$MCSEG" ] || { echo "Mooncake target did not start:" >&2; cat "$WORK/mct.log" >&2; exit 1; }
    sleep 1 # its memory is registered just after the daemon starts
}
start_tern_target() { # -> TSEG
    "$TB" --mode target --config "$WORK/tern.yaml" --buffer-size 64M >"$WORK/tt.out" 2>"$WORK/tt.log" &
    PIDS+=($!)
    TSEG=
    for _ in $(seq 600); do
        TSEG=$(sed -n 's/^tern-bench target ready: \([^ ]*\).*/\1/p' "$WORK/tt.out")
        [ -n "$TSEG" ] && break
        sleep 0.1
    done
    [ -n "$TSEG" ] || { echo "tern target did not start:" >&2; cat "$WORK/tt.log" >&2; exit 1; }
}
run_mc() { # bench op size [env...] -> GB/s
    local b=$1 op=$2 size=$3
    shift 3
    env "$@" GLOG_logtostderr=1 "$b" --mode=initiator "${MCFLAGS[@]}" --segment_id="$MCSEG" \
        --operation="$op" --block_size="$size" --batch_size=16 --threads=1 --duration="$T" \
        --buffer_size=$((64 << 20)) --report_precision=4 >"$WORK/mci.log" 2>&1 ||
        { echo "Mooncake initiator failed:" >&2; tail -5 "$WORK/mci.log" >&2; echo nan; return; }
    sed -n 's/.*throughput \([0-9.]*\) GB\/s.*/\1/p' "$WORK/mci.log" | tail -1
}
run_tern() { # segment op size -> GB/s
    "$TB" --mode initiator --config "$WORK/tern.yaml" --segment "$1" --op "$2" \
        --block-size "$3" --batch-size 16 --threads 1 --duration "$T" --buffer-size 64M \
        --json >"$WORK/ti.json" 2>"$WORK/ti.log" ||
        { echo "tern initiator failed:" >&2; tail -5 "$WORK/ti.log" >&2; echo nan; return; }
    python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["gb_per_s"])' "$WORK/ti.json"
}
row() { python3 "$RESULTS" row "$WORK/rows.jsonl" "$@"; }
ratio() { python3 -c "import sys; a,b=map(float,sys.argv[1:]); print('%.2f' % (a/b) if b>0 and a==a and b==b else 'n/a')" "$1" "$2"; }

start_tern_target
printf '%-14s %-6s %-5s %10s %10s %10s | %9s %9s\n' mooncake op block "MC GB/s" "tern GB/s" \
    "tern->MC" "tern/MC" "t->MC/MC"
for tag in "${!MC[@]}"; do
    b=${MC[$tag]}
    start_mc_target "$b"
    for op in $OPS; do
        for size in 65536 1048576; do
            mc=$(run_mc "$b" "$op" "$size")
            tn=$(run_tern "$TSEG" "$op" "$size")
            tm=$(run_tern "$MCSEG" "$op" "$size")
            printf '%-14s %-6s %-5s %10s %10s %10s | %9s %9s\n' "$tag" "$op" \
                "$((size >> 10))K" "$mc" "$tn" "$tm" "$(ratio "$tn" "$mc")" "$(ratio "$tm" "$mc")"
            row "label=Mooncake $tag" "op=$op" "block_size=$size" "gb_per_s=$mc"
            row "label=tern tcp, batch 16" "op=$op" "block_size=$size" "gb_per_s=$tn"
            row "label=tern -> Mooncake $tag" "op=$op" "block_size=$size" "gb_per_s=$tm"
            if [ -n "${MC_POOL:-}" ]; then
                mp=$(run_mc "$b" "$op" "$size" MC_TCP_ENABLE_CONNECTION_POOL=1)
                printf '%-14s %-6s %-5s %10s %10s %10s | %9s\n' "$tag+pool" "$op" \
                    "$((size >> 10))K" "$mp" "$tn" "-" "$(ratio "$tn" "$mp")"
            fi
        done
    done
    kill "${PIDS[-1]}" 2>/dev/null || true
done
echo "GB = 1e9 bytes; tern/MC > 1: tern moved more per second; t->MC: tern's initiator" \
     "speaking Mooncake's format to the Mooncake target"
if [ -n "$JSON_OUT" ] || [ -n "$PLOT" ]; then
    out=${JSON_OUT:-$WORK/results.json}
    python3 "$RESULTS" write "$WORK/rows.jsonl" "$out" bench=mooncake_vs_tern \
        "command=OPS=\"$OPS\" SECONDS_PER_RUN=$T bench/mooncake_vs_tern.sh" \
        "date=$(date -u +%Y-%m-%dT%H:%MZ)" "load_average=$(cut -d' ' -f1-3 /proc/loadavg)" \
        "nproc=$(nproc)"
    [ -n "$JSON_OUT" ] && echo "results: $JSON_OUT"
    if [ -n "$PLOT" ]; then
        "$TB" --plot "$PLOT" --compare "$out" --title "tern vs Mooncake Transfer Engine, tcp" &&
            echo "chart: $PLOT"
    fi
fi
