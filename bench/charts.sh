#!/usr/bin/env bash
# bench/charts.sh [BUILD_DIR]: the chart in docs/ and the results behind it,
# regenerated in one go (`make charts` runs it).
#
# Runs, on this machine, back to back:
#   STREAMS=1 OPS="write read" bench/tcp_vs_iperf3.sh  -> bench/results/tcp_vs_iperf3.json
#   OPS="write read" bench/shm_bench.sh                -> bench/results/shm_bench.json
#   bench/mooncake_vs_tern.sh, when TERN_MOONCAKE_BENCH_V0310 and/or
#     TERN_MOONCAKE_BENCH_V0312 name Mooncake's transfer_engine_bench
#                                                      -> bench/results/mooncake_vs_tern.json
# each over the block sizes SIZES (default "4K 16K 64K 256K 1M"; Mooncake:
# 64K and 1M), SECONDS_PER_RUN (2) seconds per run, REPEAT (1) rounds, with
# each script's printed table beside its JSON (.txt); then draws them all
# on one chart with tern-bench --plot (gnuplot): docs/bench-tcp-shm.svg.
# OUT (bench/results) and CHART (docs/bench-tcp-shm.svg) move the outputs;
# DRAW_ONLY=1 redraws the chart from the JSON already in OUT, running nothing.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$(cd "${1:-build}" && pwd)
cd "$ROOT" # the results name their files relative to the tree
export SIZES=${SIZES:-"4K 16K 64K 256K 1M"}
export SECONDS_PER_RUN=${SECONDS_PER_RUN:-2}
export REPEAT=${REPEAT:-1}
export OPS="write read"
OUT=${OUT:-bench/results}
CHART=${CHART:-docs/bench-tcp-shm.svg}

command -v gnuplot >/dev/null || [ -n "${GNUPLOT:-}" ] || {
    echo "charts: gnuplot draws the chart: apt-get install gnuplot-nox (or scripts/install-deps.sh)" >&2
    exit 1
}
mkdir -p "$OUT"
files=()
run() { # name script [env...]
    local name=$1 script=$2
    shift 2
    if [ -z "${DRAW_ONLY:-}" ]; then
        echo "charts: $name ..." >&2
        env "$@" JSON_OUT="$OUT/$name.json" "bench/$script" "$BUILD" | tee "$OUT/$name.txt"
    fi
    files+=("$OUT/$name.json")
}
run tcp_vs_iperf3 tcp_vs_iperf3.sh STREAMS=1
run shm_bench shm_bench.sh
if [ -n "${TERN_MOONCAKE_BENCH_V0310:-}${TERN_MOONCAKE_BENCH_V0312:-}" ] ||
   { [ -n "${DRAW_ONLY:-}" ] && [ -f "$OUT/mooncake_vs_tern.json" ]; }; then
    run mooncake_vs_tern mooncake_vs_tern.sh
fi
# the title says where and when the runs were (from the files themselves)
title=$(python3 -c '
import json, sys
d = [json.load(open(f)) for f in sys.argv[1:]]
loads = sorted(float(x["load_average"].split()[0]) for x in d)
print("tern tcp and shm against iperf3 and memcpy: loopback, %s cores, load average %g-%g, %s"
      % (d[0]["nproc"], loads[0], loads[-1], d[0]["date"][:10]))' "${files[@]}")
"$BUILD/bin/tern-bench" --plot "$CHART" --compare "${files[@]}" --title "$title"
echo "charts: $CHART from ${files[*]}"
