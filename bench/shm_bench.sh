#!/usr/bin/env bash
# bench/shm_bench.sh [BUILD_DIR]: the same-host transport against memcpy and
# against tern's tcp, in one run, on this machine.
#
# 1 MiB blocks, a 64 MiB buffer on each side:
#   memcpy x1:  tern-bench-memcpy --threads 1  (64 MiB in 1 MiB pieces)
#   memcpy xN:  tern-bench-memcpy --threads N, N = shm's workers
#               (transports.shm.workers; default: online CPUs, at most 8)
#   shm:        tern-bench target (shm, tcp) + initiator listing only shm
#   tcp:        the same target + an initiator listing only tcp
# each for write and read (OPS), one initiator thread, SECONDS_PER_RUN (3)
# seconds per run, REPEAT (1) alternating rounds reported as medians; then
# the ratios shm/memcpy x1, shm/memcpy xN and shm/tcp.  Absolute figures on
# a shared machine move a lot; ratios of runs seconds apart much less.
# Environment: OPS ("write read"), SECONDS_PER_RUN, REPEAT, WORKERS (shm
# workers; 0 = default), CHUNK (transports.shm.chunk_size, default 256K), BATCH (8 blocks per batch), DEPTH (4 batches in flight),
# HUGEPAGES (1: every buffer, memcpy's included, advised to transparent huge
# pages; the copy pins the peer's pages, so page size matters most to shm).
set -euo pipefail

BUILD=${1:-build}
BENCH="$BUILD/bin/tern-bench"
MEMCPY="$BUILD/bin/tern-bench-memcpy"
OPS=${OPS:-"write read"}
T=${SECONDS_PER_RUN:-3}
REPEAT=${REPEAT:-1}
WORKERS=${WORKERS:-0}
CHUNK=${CHUNK:-256K}
BATCH=${BATCH:-8}
DEPTH=${DEPTH:-4}
HUGEPAGES=${HUGEPAGES:-0}
HP=()
[ "$HUGEPAGES" = 1 ] && HP=(--hugepages)

for b in "$BENCH" "$MEMCPY"; do
    [ -x "$b" ] || { echo "shm_bench: $b not found (build first)" >&2; exit 1; }
done
command -v python3 >/dev/null || { echo "shm_bench: python3 is needed to read JSON" >&2; exit 1; }

if [ "$WORKERS" -gt 0 ]; then N=$WORKERS; else
    N=$(nproc); [ "$N" -gt 8 ] && N=8
fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/tern-shm-bench.XXXXXX")
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
      for t in "$@"; do
          echo "  - name: $t"
          if [ "$t" = shm ]; then echo "    workers: $WORKERS"; echo "    chunk_size: $CHUNK"; fi
      done
      echo "log_level: warn"; } >"$f"
}
config "$WORK/target.yaml" shm tcp
config "$WORK/shm.yaml" shm
config "$WORK/tcp.yaml" tcp

"$BENCH" --mode target --config "$WORK/target.yaml" --buffer-size 64M "${HP[@]}" \
    >"$WORK/target.out" 2>"$WORK/target.log" &
TPID=$!
SEG=
for _ in $(seq 300); do
    SEG=$(sed -n 's/^tern-bench target ready: \([^ ]*\).*/\1/p' "$WORK/target.out")
    [ -n "$SEG" ] && break
    kill -0 "$TPID" 2>/dev/null || break
    sleep 0.1
done
[ -n "$SEG" ] || { echo "shm_bench: the target did not start:" >&2; cat "$WORK/target.log" >&2; exit 1; }

json_get() { python3 -c "import json,sys; print('%.3f' % json.load(open(sys.argv[1]))['gb_per_s'])" "$1"; }
median() { python3 -c 'import sys,statistics; print("%.3f" % statistics.median(map(float, sys.argv[1:])))' "$@"; }
ratio() { python3 -c "import sys; a,b=map(float,sys.argv[1:]); print('%.2f' % (a / b if b > 0 else 0))" "$1" "$2"; }

run_memcpy() { # threads
    "$MEMCPY" --size 64M --block 1M --threads "$1" --duration "$T" "${HP[@]}" >"$WORK/memcpy.json"
    json_get "$WORK/memcpy.json"
}

run_tern() { # transport op
    local out="$WORK/$1-$2.json"
    "$BENCH" --mode initiator --config "$WORK/$1.yaml" --segment "$SEG" --op "$2" \
        --block-size 1M --batch-size "$BATCH" --queue-depth "$DEPTH" --buffer-size 64M "${HP[@]}" \
        --threads 1 --duration "$T" --json >"$out" 2>"$WORK/$1-$2.log" || {
        echo "shm_bench: tern-bench $1 $2 failed:" >&2; cat "$WORK/$1-$2.log" "$out" >&2; return 1; }
    json_get "$out"
}

m1s=() mns=()
declare -A shm tcp
for op in $OPS; do shm[$op]=""; tcp[$op]=""; done
for _ in $(seq "$REPEAT"); do
    m1s+=("$(run_memcpy 1)")
    mns+=("$(run_memcpy "$N")")
    for op in $OPS; do
        shm[$op]+=" $(run_tern shm "$op")"
        tcp[$op]+=" $(run_tern tcp "$op")"
    done
done
m1=$(median "${m1s[@]}"); mn=$(median "${mns[@]}")

echo "1 MiB blocks, 64 MiB buffers, $T s per run, medians of $REPEAT round(s); shm workers: $N, chunk $CHUNK, huge pages: $([ "$HUGEPAGES" = 1 ] && echo yes || echo no)"
printf '%-6s %12s %12s %10s %10s | %9s %9s %8s\n' op "memcpy x1" "memcpy x$N" "shm GB/s" \
    "tcp GB/s" "shm/mcp1" "shm/mcpN" "shm/tcp"
for op in $OPS; do
    # shellcheck disable=SC2086
    s=$(median ${shm[$op]}); c=$(median ${tcp[$op]})
    printf '%-6s %12s %12s %10s %10s | %9s %9s %8s\n' "$op" "$m1" "$mn" "$s" "$c" \
        "$(ratio "$s" "$m1")" "$(ratio "$s" "$mn")" "$(ratio "$s" "$c")"
done
echo "(targets on a 2-core machine: shm >= 0.8 x memcpy x1 and >= 1.5 x tcp;"
echo " load average now: $(cut -d' ' -f1-3 /proc/loadavg))"
