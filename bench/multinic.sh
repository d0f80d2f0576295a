#!/usr/bin/env bash
# bench/multinic.sh [BUILD_DIR]: tern over one NIC and over two, against
# iperf3 on one, between two hosts of the network lab (tests/lab/lab.sh:
# network namespaces joined by veth pairs, each pair rate-limited by tc tbf).
#
# Hosts a and b, NICS (2) pairs of RATE (2gbit) each.  For each op (OPS,
# default "write read"), 1 MiB blocks (BLOCK), SECONDS_PER_RUN (5) s each:
#   iperf3:      b: iperf3 -s on nic0; a: iperf3 -c <b nic0> -P 4 -l BLOCK
#                (-R for read: b sends), the one-NIC line rate TCP reaches
#   tern 1 NIC:  tern-bench target on b, initiator on a, transports.tcp.devices
#                [nic0] on both sides (4 connections, the default)
#   tern 2 NICs: the same with every NIC (no devices list)
# and prints GB/s with the ratios tern 1 NIC / iperf3 (the transport on one
# link) and tern 2 NICs / tern 1 NIC (the gain of the second NIC, ideally
# NICS).  RATES="1gbit 2gbit" (one rate per NIC, NICS follows) measures
# instead iperf3 on each NIC alone and tern over all of them, and prints
# tern / the sum of the iperf3 figures (NICs of unequal rate: are both
# filled?).  Runs as root only (exit 77 otherwise).  REPEAT (1) alternates
# the runs and reports medians.  JSON_OUT=FILE: the rows as JSON
# (bench/bench_results.py).  The figures are throughputs of a rate-limited
# lab on one machine: the link rate bounds them, not the CPU, unless the
# machine is busy (the load average is printed at the end).
set -uo pipefail

BUILD=$(cd "${1:-build}" && pwd)
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BENCH="$BUILD/bin/tern-bench"
NICS=${NICS:-2}
RATE=${RATE:-2gbit}
RATES=${RATES:-}
if [ -n "$RATES" ]; then
    read -r -a RATE_LIST <<<"$RATES"
    NICS=${#RATE_LIST[@]}
    RATE=${RATE_LIST[0]}
fi
OPS=${OPS:-"write read"}
BLOCK=${BLOCK:-1M}
T=${SECONDS_PER_RUN:-5}
REPEAT=${REPEAT:-1}
JSON_OUT=${JSON_OUT:-}
RESULTS="$ROOT/bench/bench_results.py"

# shellcheck source=../tests/lab/lab.sh
. "$ROOT/tests/lab/lab.sh"
lab_require
[ -x "$BENCH" ] || { echo "multinic: $BENCH not found (build first)" >&2; exit 1; }
command -v iperf3 >/dev/null || { echo "multinic: iperf3 is not installed" >&2; exit 1; }

WORK=$(mktemp -d "${TMPDIR:-/tmp}/tern-multinic-bench.XXXXXX")
lab_init "mb$$"
trap 'lab_cleanup; rm -rf "$WORK"' EXIT

lab_host a && lab_host b && lab_link a b "$NICS" "$RATE" || exit 1
if [ -n "$RATES" ]; then
    for ((i = 1; i < NICS; i++)); do
        lab_rate a "nic$i" "${RATE_LIST[$i]}" && lab_rate b "nic$i" "${RATE_LIST[$i]}" || exit 1
    done
fi
lab_wait_reach a 198.18.0.2 || exit 1

json_get() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print($2)" "$1"; }
median() { python3 -c 'import sys,statistics; print("%.4f" % statistics.median(map(float, sys.argv[1:])))' "$@"; }
ratio() { python3 -c "import sys; a,b=map(float,sys.argv[1:]); print('%.2f' % (a / b if b > 0 else 0))" "$1" "$2"; }

# config FILE ADDR DEVICES: an engine on ADDR; DEVICES "" = every NIC.
config() {
    {
        printf 'server_name: "%s:0"\nmetadata: p2p\ntransports:\n  - name: tcp\n' "$2"
        [ -z "$3" ] || printf '    devices: [%s]\n' "$3"
        printf 'log_level: warn\n'
    } >"$1"
}

# run_tern DEVICES OP -> GB/s (a fresh target each run: its devices differ)
run_tern() {
    local devs=$1 op=$2 seg= tpid out="$WORK/tern-$RANDOM.json"
    config "$WORK/t.yaml" 198.18.0.2 "$devs"
    config "$WORK/i.yaml" 198.18.0.1 "$devs"
    lab_exec b "$BENCH" --mode target --config "$WORK/t.yaml" --buffer-size 256M \
        >"$WORK/target.out" 2>"$WORK/target.log" &
    tpid=$!
    for _ in $(seq 100); do
        seg=$(sed -n 's/^tern-bench target ready: \([^ ]*\).*/\1/p' "$WORK/target.out")
        [ -n "$seg" ] && break
        sleep 0.1
    done
    [ -n "$seg" ] || { echo "multinic: target did not start: $(cat "$WORK/target.log")" >&2; return 1; }
    lab_exec a "$BENCH" --mode initiator --config "$WORK/i.yaml" --segment "$seg" --op "$op" \
        --block-size "$BLOCK" --batch-size 16 --queue-depth 4 --threads 2 --buffer-size 256M \
        --duration "$T" --json >"$out" 2>"$WORK/initiator.log" ||
        { echo "multinic: tern-bench failed: $(tail -3 "$WORK/initiator.log")" >&2; }
    kill -TERM "$tpid" 2>/dev/null
    wait "$tpid" 2>/dev/null
    json_get "$out" "'%.4f' % d['gb_per_s']"
}

# run_iperf3 OP [NIC] -> GB/s over that NIC (default nic0: 198.18.<i>.2)
run_iperf3() {
    local rev= out="$WORK/iperf3-$RANDOM.json" pid len=$BLOCK ip="198.18.${2:-0}.2"
    [ "$1" = read ] && rev=-R
    lab_exec b iperf3 -s -1 -B "$ip" -p 5201 >"$WORK/iperf3-s.log" 2>&1 &
    pid=$!
    sleep 0.3
    lab_exec a iperf3 -c "$ip" -p 5201 -t "$T" -O 1 -P 4 -l "$len" $rev -J >"$out" 2>&1
    wait "$pid" 2>/dev/null
    json_get "$out" "'%.4f' % (d['end']['sum_received']['bits_per_second'] / 8e9)"
}

row() { python3 "$RESULTS" row "$WORK/rows.jsonl" "$@"; }
sum() { python3 -c 'import sys; print("%.4f" % sum(map(float, sys.argv[1:])))' "$@"; }

# NICs of unequal rates: tern over all of them against the sum of iperf3 on each.
if [ -n "$RATES" ]; then
    printf '%-6s %28s %14s %13s | %18s\n' op "iperf3 GB/s on each NIC" "iperf3 sum" \
        "tern $NICS NICs" "tern / iperf3 sum"
    for op in $OPS; do
        sums=() t2s=() each=""
        for _ in $(seq "$REPEAT"); do
            one=()
            for ((i = 0; i < NICS; i++)); do one+=("$(run_iperf3 "$op" "$i")"); done
            each="${one[*]}"
            sums+=("$(sum "${one[@]}")")
            t2s+=("$(run_tern "" "$op")")
        done
        s2=$(median "${sums[@]}") t2=$(median "${t2s[@]}")
        printf '%-6s %28s %14s %13s | %18s\n' "$op" "$each" "$s2" "$t2" "$(ratio "$t2" "$s2")"
        row "label=iperf3 -P 4, sum over NICs ($RATES)" "op=$op" "block_size=$BLOCK" \
            "gb_per_s=$s2"
        row "label=tern tcp, $NICS NICs ($RATES)" "op=$op" "block_size=$BLOCK" "gb_per_s=$t2" \
            "ratio_to_iperf3_sum=$(ratio "$t2" "$s2")"
    done
    echo "(NICs of $RATES (tc tbf) between two namespaces; iperf3 -t $T -O 1 -P 4 on each NIC"
    echo " alone; tern-bench $T s over all; medians of $REPEAT run(s);"
    echo " load average now: $(cut -d' ' -f1-3 /proc/loadavg))"
    if [ -n "$JSON_OUT" ]; then
        python3 "$RESULTS" write "$WORK/rows.jsonl" "$JSON_OUT" bench=multinic \
            "command=RATES=\"$RATES\" OPS=\"$OPS\" REPEAT=$REPEAT SECONDS_PER_RUN=$T bench/multinic.sh" \
            "date=$(date -u +%Y-%m-%dT%H:%MZ)" "load_average=$(cut -d' ' -f1-3 /proc/loadavg)" \
            "nproc=$(nproc)" && echo "results: $JSON_OUT"
    fi
    exit 0
fi
printf '%-6s %11s %12s %13s | %16s %17s\n' op "iperf3 GB/s" "tern 1 NIC" "tern $NICS NICs" \
    "1 NIC / iperf3" "$NICS NICs / 1 NIC"
for op in $OPS; do
    ips=() t1s=() t2s=()
    for _ in $(seq "$REPEAT"); do
        ips+=("$(run_iperf3 "$op")")
        t1s+=("$(run_tern nic0 "$op")")
        t2s+=("$(run_tern "" "$op")")
    done
    ip=$(median "${ips[@]}") t1=$(median "${t1s[@]}") t2=$(median "${t2s[@]}")
    printf '%-6s %11s %12s %13s | %16s %17s\n' "$op" "$ip" "$t1" "$t2" "$(ratio "$t1" "$ip")" \
        "$(ratio "$t2" "$t1")"
    row "label=iperf3 -P 4, 1 NIC" "op=$op" "block_size=$BLOCK" "gb_per_s=$ip"
    row "label=tern tcp, 1 NIC" "op=$op" "block_size=$BLOCK" "gb_per_s=$t1" \
        "ratio_to_iperf3=$(ratio "$t1" "$ip")"
    row "label=tern tcp, $NICS NICs" "op=$op" "block_size=$BLOCK" "gb_per_s=$t2" \
        "ratio_to_iperf3=$(ratio "$t2" "$ip")" "ratio_to_one_nic=$(ratio "$t2" "$t1")"
done
echo "($NICS NICs of $RATE (tc tbf) between two namespaces; iperf3 -t $T -O 1 -P 4; tern-bench $T s,"
echo " 2 threads x 4 batches of 16 x $BLOCK in flight; medians of $REPEAT run(s);"
echo " load average now: $(cut -d' ' -f1-3 /proc/loadavg))"
if [ -n "$JSON_OUT" ]; then
    python3 "$RESULTS" write "$WORK/rows.jsonl" "$JSON_OUT" bench=multinic \
        "command=NICS=$NICS RATE=$RATE OPS=\"$OPS\" REPEAT=$REPEAT SECONDS_PER_RUN=$T bench/multinic.sh" \
        "date=$(date -u +%Y-%m-%dT%H:%MZ)" "load_average=$(cut -d' ' -f1-3 /proc/loadavg)" \
        "nproc=$(nproc)" && echo "results: $JSON_OUT"
fi
