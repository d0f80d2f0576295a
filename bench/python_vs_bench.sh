#!/usr/bin/env bash
# bench/python_vs_bench.sh [BUILD_DIR]: throughput from Python (the tern
# package, bench/python_bench.py) against tern-bench (C), same target,
# same run, on this machine.
#
# One tern-bench target (64 MiB buffer); then, alternating, the C
# initiator and the Python one with identical settings: 1 MiB blocks,
# BATCH (8) blocks per batch, DEPTH (4) batches in flight, one thread,
# SECONDS_PER_RUN (3) seconds, for each op in OPS ("write read") and each
# transport in TRANSPORTS ("tcp"; "shm" too on one host); REPEAT (5)
# rounds.  Each round runs C and Python back to back (who goes first
# alternates) and gives one ratio python/C; the result is the median of
# those ratios, beside the medians of each side.  The Python side must stay
# within 10% of C (ratio >= 0.90).  Ratios of runs seconds apart are what
# to read: absolute figures on a shared machine move a lot.
set -euo pipefail

BUILD=${1:-build}
BENCH="$BUILD/bin/tern-bench"
PYDIR="$BUILD/python"
HERE=$(cd "$(dirname "$0")" && pwd)
OPS=${OPS:-"write read"}
TRANSPORTS=${TRANSPORTS:-tcp}
T=${SECONDS_PER_RUN:-3}
REPEAT=${REPEAT:-5}
BATCH=${BATCH:-8}
DEPTH=${DEPTH:-4}
PY=python3
[ -x /usr/bin/python3 ] && PY=/usr/bin/python3

[ -x "$BENCH" ] || { echo "python_vs_bench: $BENCH not found (build first)" >&2; exit 1; }
ls "$PYDIR"/tern/_tern*.so >/dev/null 2>&1 ||
    { echo "python_vs_bench: no tern module in $PYDIR (python3-dev missing at build?)" >&2; exit 1; }

WORK=$(mktemp -d "${TMPDIR:-/tmp}/tern-py-bench.XXXXXX")
TPID=
cleanup() {
    if [ -n "$TPID" ]; then
        kill -TERM "$TPID" 2>/dev/null || true
        wait "$TPID" 2>/dev/null || true
    fi
    rm -rf "$WORK"
}
trap cleanup EXIT INT TERM

config() { # file transports...
    local f=$1; shift
    { echo "server_name: 127.0.0.1:0"; echo "metadata: p2p"; echo "transports:"
      for t in "$@"; do echo "  - name: $t"; done
      echo "log_level: warn"; } >"$f"
}
# shellcheck disable=SC2086
config "$WORK/target.yaml" $TRANSPORTS
for t in $TRANSPORTS; do config "$WORK/$t.yaml" "$t"; done

"$BENCH" --mode target --config "$WORK/target.yaml" --buffer-size 64M \
    >"$WORK/target.out" 2>"$WORK/target.log" &
TPID=$!
SEG=
for _ in $(seq 300); do
    SEG=$(sed -n 's/^tern-bench target ready: \([^ ]*\).*/\1/p' "$WORK/target.out")
    [ -n "$SEG" ] && break
    kill -0 "$TPID" 2>/dev/null || break
    sleep 0.1
done
[ -n "$SEG" ] || { echo "python_vs_bench: the target did not start:" >&2; cat "$WORK/target.log" >&2; exit 1; }

json_get() { "$PY" -c "import json,sys; print('%.3f' % json.load(open(sys.argv[1]))['gb_per_s'])" "$1"; }
median() { "$PY" -c 'import sys,statistics; print("%.3f" % statistics.median(map(float, sys.argv[1:])))' "$@"; }
ratio() { "$PY" -c "import sys; a,b=map(float,sys.argv[1:]); print('%.2f' % (a / b if b > 0 else 0))" "$1" "$2"; }

run_c() { # transport op
    local out="$WORK/c-$1-$2.json"
    "$BENCH" --mode initiator --config "$WORK/$1.yaml" --segment "$SEG" --op "$2" \
        --block-size 1M --batch-size "$BATCH" --queue-depth "$DEPTH" --buffer-size 64M \
        --threads 1 --duration "$T" --json >"$out" 2>"$WORK/c.log" || {
        echo "python_vs_bench: tern-bench $1 $2 failed:" >&2; cat "$WORK/c.log" "$out" >&2; return 1; }
    json_get "$out"
}

run_py() { # transport op
    local out="$WORK/py-$1-$2.json"
    PYTHONPATH="$PYDIR" "$PY" "$HERE/python_bench.py" --config "$WORK/$1.yaml" \
        --segment "$SEG" --op "$2" --block-size $((1 << 20)) --batch-size "$BATCH" \
        --queue-depth "$DEPTH" --buffer-size $((64 << 20)) --duration "$T" \
        >"$out" 2>"$WORK/py.log" || {
        echo "python_vs_bench: python_bench $1 $2 failed:" >&2; cat "$WORK/py.log" "$out" >&2; return 1; }
    json_get "$out"
}

declare -A cs pys qs
for t in $TRANSPORTS; do for op in $OPS; do cs[$t-$op]=""; pys[$t-$op]=""; qs[$t-$op]=""; done; done
for r in $(seq "$REPEAT"); do
    for t in $TRANSPORTS; do
        for op in $OPS; do
            if [ $((r % 2)) -eq 1 ]; then   # alternate who goes first
                c=$(run_c "$t" "$op"); p=$(run_py "$t" "$op")
            else
                p=$(run_py "$t" "$op"); c=$(run_c "$t" "$op")
            fi
            cs[$t-$op]+=" $c"; pys[$t-$op]+=" $p"; qs[$t-$op]+=" $(ratio "$p" "$c")"
        done
    done
done

echo "1 MiB blocks, batch $BATCH, depth $DEPTH, 1 thread, $T s per run, $REPEAT round(s)"
printf '%-5s %-6s %8s %8s %8s   %s\n' xport op "C GB/s" "Py GB/s" "py/C" "per-round py/C (C GB/s | Python GB/s)"
worst=9
for t in $TRANSPORTS; do
    for op in $OPS; do
        # shellcheck disable=SC2086
        c=$(median ${cs[$t-$op]}); p=$(median ${pys[$t-$op]}); q=$(median ${qs[$t-$op]})
        printf '%-5s %-6s %8s %8s %8s   %s (%s |%s)\n' "$t" "$op" "$c" "$p" "$q" "${qs[$t-$op]}" \
            "${cs[$t-$op]}" "${pys[$t-$op]}"
        worst=$("$PY" -c "print(min(float('$worst'), float('$q')))")
    done
done
echo "py/C: median of the per-round ratios; lowest: $worst (target >= 0.90); load average now: $(cut -d' ' -f1-3 /proc/loadavg)"
