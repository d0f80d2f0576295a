#!/usr/bin/env bash
# bench/tcp_vs_iperf3.sh [BUILD_DIR]: tern over TCP against iperf3, in one
# go, on loopback, same machine, same minute.
#
# For each stream count N (STREAMS, default "1 2") and block size (SIZES,
# default "64K 1M"):
#   iperf3:  server -s -B 127.0.0.1 -p P; client -c 127.0.0.1 -t 5 -O 1 -l SIZE -P N
#            (-l at most 1M, iperf3's limit)
#   tern:    tern-bench target + initiator, --op write (OPS to change),
#            --threads N, --block-size SIZE, 5 s, TCP transport
# and prints a table with tern's throughput as a ratio of iperf3's.  Goal:
# >= 0.95 at 1 MiB and >= 0.9 at 64 KiB.  Absolute figures on a shared
# machine move a lot; the ratio of two runs a few seconds apart is what
# counts.  Because both are CPU-bound on loopback, the script also reports
# CPU seconds per GB moved (both ends: iperf3's own host+remote figures;
# tern's initiator via /usr/bin/time and target via /proc/PID/stat), which
# a busy machine disturbs much less than GB/s; "cpu ratio" > 1 means tern
# spends less CPU per byte than iperf3.  Environment: STREAMS, OPS ("write read"), SECONDS_PER_RUN (5),
# POOL: "streams" (default: the initiator opens as many TCP connections as
# iperf3 has streams, transports.tcp.connections = N, so both sides use the
# same number of sockets), REPEAT (1; e.g. 3 alternates the
# runs and reports medians, which steadies a noisy machine) or "default" (the transport's default
# pool of 4 connections per peer; on a loaded machine more threads also
# means a bigger share of the CPU, so that ratio flatters tern).
# ZEROCOPY=1: iperf3 runs with -Z (--zerocopy: sendfile) and both tern
# sides with transports.tcp.zerocopy_min 64K (MSG_ZEROCOPY for payloads of
# 64 KiB and more).  WORKING_SET=S: every tern request within the first S
# bytes of the buffers (tern-bench --working-set), as iperf3 sends its one
# -l buffer again and again; without it each request in flight has its own
# block (4 batches: 64 MiB at 1 MiB), which the copies read from memory
# rather than from the cache.
# JSON_OUT=FILE: the results as JSON (bench/bench_results.py: series
# "iperf3" and "tern tcp, N connection(s)", one row per size, medians);
# PLOT=FILE.svg|.png: that comparison drawn by tern-bench --plot (gnuplot).
set -euo pipefail

BUILD=${1:-build}
BENCH="$BUILD/bin/tern-bench"
ROOT=$(cd "$(dirname "$0")/.." && pwd)
STREAMS=${STREAMS:-"1 2"}
OPS=${OPS:-write}
T=${SECONDS_PER_RUN:-5}
POOL=${POOL:-streams}
REPEAT=${REPEAT:-1}   # >1: alternate iperf3 and tern runs, report medians
SIZES=${SIZES:-"64K 1M"}
ZEROCOPY=${ZEROCOPY:-0}
WORKING_SET=${WORKING_SET:-}
JSON_OUT=${JSON_OUT:-}
PLOT=${PLOT:-}
RESULTS="$ROOT/bench/bench_results.py"

[ -x "$BENCH" ] || { echo "tcp_vs_iperf3: $BENCH not found (build first)" >&2; exit 1; }
command -v iperf3 >/dev/null || { echo "tcp_vs_iperf3: iperf3 is not installed (apt-get install iperf3)" >&2; exit 1; }
command -v python3 >/dev/null || { echo "tcp_vs_iperf3: python3 is needed to read JSON" >&2; exit 1; }

WORK=$(mktemp -d "${TMPDIR:-/tmp}/tern-vs-iperf3.XXXXXX")
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do
        kill -TERM "$p" 2>/dev/null || true
    done
    for p in "${PIDS[@]}"; do
        wait "$p" 2>/dev/null || true
    done
    rm -rf "$WORK"
}
trap cleanup EXIT INT TERM

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

json_get() { # file, python expression on d
    python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print($2)" "$1"
}

# ---- iperf3 server (one for all runs) --------------------------------------
IPORT=$(free_port)
iperf3 -s -B 127.0.0.1 -p "$IPORT" >"$WORK/iperf3-server.log" 2>&1 &
PIDS+=($!)

# ---- tern target ----------------------------------------------------------------
CONFIG="$WORK/tern.yaml"
cat >"$CONFIG" <<EOF
server_name: 127.0.0.1:0
metadata: p2p
transports:
  - name: tcp
log_level: warn
EOF
[ "$ZEROCOPY" = 1 ] && sed -i 's/^  - name: tcp$/  - name: tcp\n    zerocopy_min: 64K/' "$CONFIG"
IZ=()
[ "$ZEROCOPY" = 1 ] && IZ=(-Z)
WS=()
[ -n "$WORKING_SET" ] && WS=(--working-set "$WORKING_SET")
"$BENCH" --mode target --config "$CONFIG" --buffer-size 128M >"$WORK/target.out" 2>"$WORK/target.log" &
PIDS+=($!)
TPID=$!
SEG=
for _ in $(seq 300); do
    SEG=$(sed -n 's/^tern-bench target ready: \([^ ]*\).*/\1/p' "$WORK/target.out")
    [ -n "$SEG" ] && break
    sleep 0.1
done
[ -n "$SEG" ] || { echo "tcp_vs_iperf3: the tern target did not start:" >&2; cat "$WORK/target.log" >&2; exit 1; }
sleep 0.5 # iperf3 server up too

proc_cpu() { # pid -> CPU seconds so far
    awk -v hz="$(getconf CLK_TCK)" '{print ($14 + $15) / hz}' "/proc/$1/stat"
}

bytes_of() { # 64K -> 65536
    python3 -c "import sys; sys.path.insert(0, sys.argv[1]); import bench_results; print(bench_results.value(sys.argv[2]))" "$ROOT/bench" "$1"
}

run_iperf3() { # size streams -> "GB/s CPU-s/GB"
    local out="$WORK/iperf3-$1-$2.json" len=$1
    # iperf3 writes at most 1 MiB per call (-l): larger sizes run with that
    [ "$(bytes_of "$len")" -gt 1048576 ] && len=1M
    iperf3 -c 127.0.0.1 -p "$IPORT" -t "$T" -O 1 -l "$len" -P "$2" "${IZ[@]}" -J >"$out" 2>&1 || {
        echo "iperf3 client failed:" >&2; cat "$out" >&2; return 1; }
    json_get "$out" "'%.3f %.3f' % (d['end']['sum_received']['bits_per_second'] / 8e9, \
        (d['end']['cpu_utilization_percent']['host_total'] + \
         d['end']['cpu_utilization_percent']['remote_total']) / 100 * ($T + 1) / \
        (d['end']['sum_received']['bytes'] / 1e9))"
}

run_tern() { # size streams op -> "GB/s CPU-s/GB p50-us p99-us"
    local size=$1 n=$2 op=$3 batch blk out="$WORK/tern-$1-$2-$3.json"
    local icfg="$WORK/initiator-$n.yaml"
    cp "$CONFIG" "$icfg"
    if [ "$POOL" = streams ]; then
        sed -i "s/^  - name: tcp\$/  - name: tcp\n    connections: $n/" "$icfg"
    fi
    # 64 blocks per batch up to 64K, 16 above (the shapes of the 64K and 1M runs)
    blk=$(bytes_of "$size")
    if [ "$blk" -le 65536 ]; then batch=64; else batch=16; fi
    # a small working set per thread (4 batches in flight): large ones are page-walk
    # bound on these VMs, and iperf3 reuses one buffer too
    local buf=$((n * batch * blk * 4))
    local t0 t1
    t0=$(proc_cpu "$TPID")
    /usr/bin/time -f "%U %S" -o "$WORK/time" \
    "$BENCH" --mode initiator --config "$icfg" --segment "$SEG" --op "$op" \
        --block-size "$size" --batch-size "$batch" --buffer-size "$buf" --threads "$n" --queue-depth 4 \
        --duration "$T" "${WS[@]}" --json >"$out" 2>"$WORK/tern-$1-$2-$3.log" || {
        echo "tern-bench failed:" >&2; cat "$WORK/tern-$1-$2-$3.log" "$out" >&2; return 1; }
    t1=$(proc_cpu "$TPID")
    local icpu
    icpu=$(awk '{print $1 + $2}' "$WORK/time")
    json_get "$out" "'%.3f %.3f %d %d' % (d['gb_per_s'], ($icpu + $t1 - $t0) / (d['bytes'] / 1e9), \
        d['lat_p50_us'], d['lat_p99_us'])"
}

median() { python3 -c 'import sys,statistics; print("%.3f" % statistics.median(map(float, sys.argv[1:])))' "$@"; }

printf '%-6s %-7s %-6s %11s %10s %6s | %13s %11s %9s\n' block streams op "iperf3 GB/s" \
    "tern GB/s" ratio "iperf3 CPUs/GB" "tern CPUs/GB" "cpu ratio"
row() { python3 "$RESULTS" row "$WORK/rows.jsonl" "$@"; }
for n in $STREAMS; do
    tlabel="tern tcp, default pool" ilabel=iperf3
    if [ "$POOL" = streams ]; then tlabel="tern tcp, $n connection"; fi
    if [ "$n" -gt 1 ]; then
        ilabel="iperf3 -P $n"
        if [ "$POOL" = streams ]; then tlabel="${tlabel}s"; fi
        tlabel="$tlabel, $n threads"
    fi
    for size in $SIZES; do
        ipall=() icall=()
        for op in $OPS; do
            ips=() tns=() ipc=() tnc=() p50s=() p99s=()
            for _ in $(seq "$REPEAT"); do
                read -r g c <<<"$(run_iperf3 "$size" "$n")"
                ips+=("$g"); ipc+=("$c")
                read -r g c p50 p99 <<<"$(run_tern "$size" "$n" "$op")"
                tns+=("$g"); tnc+=("$c"); p50s+=("$p50"); p99s+=("$p99")
            done
            ipall+=("${ips[@]}"); icall+=("${ipc[@]}")
            ip=$(median "${ips[@]}"); tn=$(median "${tns[@]}")
            ic=$(median "${ipc[@]}"); tc=$(median "${tnc[@]}")
            row "label=$tlabel" "op=$op" "block_size=$size" "gb_per_s=$tn" "cpu_s_per_gb=$tc" \
                "lat_p50_us=$(median "${p50s[@]}")" "lat_p99_us=$(median "${p99s[@]}")" \
                "ratio_to_iperf3=$(python3 -c "print('%.3f' % ($tn / $ip if $ip > 0 else 0))")"
            ratio=$(python3 -c "print('%.2f' % ($tn / $ip if $ip > 0 else 0))")
            cratio=$(python3 -c "print('%.2f' % ($ic / $tc if $tc > 0 else 0))")
            printf '%-6s %-7s %-6s %11s %10s %6s | %13s %11s %9s\n' "$size" "$n" "$op" "$ip" \
                "$tn" "$ratio" "$ic" "$tc" "$cratio"
        done
        # iperf3 does not change with op: one row per size, all its runs
        row "label=$ilabel" "block_size=$size" "gb_per_s=$(median "${ipall[@]}")" \
            "cpu_s_per_gb=$(median "${icall[@]}")"
    done
done
echo "(iperf3: -t $T -O 1 ${IZ[*]}; tern-bench: $T s, 4 batches of 64 x 64K or 16 x 1M in flight, TCP connections: $POOL,"
echo " zerocopy: $ZEROCOPY, working set: ${WORKING_SET:-one block per request},"
echo " medians of $REPEAT alternating run(s);"
echo " load average now: $(cut -d' ' -f1-3 /proc/loadavg))"
if [ -n "$JSON_OUT" ] || [ -n "$PLOT" ]; then
    out=${JSON_OUT:-$WORK/results.json}
    python3 "$RESULTS" write "$WORK/rows.jsonl" "$out" bench=tcp_vs_iperf3 \
        "command=STREAMS=\"$STREAMS\" SIZES=\"$SIZES\" OPS=\"$OPS\" REPEAT=$REPEAT SECONDS_PER_RUN=$T POOL=$POOL bench/tcp_vs_iperf3.sh" \
        "date=$(date -u +%Y-%m-%dT%H:%MZ)" "load_average=$(cut -d' ' -f1-3 /proc/loadavg)" \
        "nproc=$(nproc)"
    [ -n "$JSON_OUT" ] && echo "results: $JSON_OUT"
    if [ -n "$PLOT" ]; then
        "$BENCH" --plot "$PLOT" --compare "$out" --title "tern tcp vs iperf3, loopback" && echo "chart: $PLOT"
    fi
fi
