#!/usr/bin/env bash
# bench/shm_bench.sh [BUILD_DIR]: the same-host transport against memcpy and
# against tern's tcp, in one run, on this machine.
#
# Blocks of each size in SIZES (default 1M), a 64 MiB buffer on each side:
#   memcpy x1:  tern-bench-memcpy --threads 1  (64 MiB in 1 MiB pieces)
#   memcpy xN:  tern-bench-memcpy --threads N, N = shm's workers
#               (transports.shm.workers; default: online CPUs, at most 8)
#   shm:        tern-bench target (shm, tcp) + initiator listing only shm;
#               their buffers are private 4 KiB pages, so 64 KiB pieces and
#               up go through the target's relay (docs/protocol.md, The
#               relay); RELAY_SLOTS=0 measures cross-memory attach instead
#   tcp:        the same target + an initiator listing only tcp
#   alloc:      a second target whose buffer, and the initiator's, come from
#               tern_alloc_memory (a shared-memory file the peer maps: shm
#               copies with memcpy); ALLOC=0 leaves it out
#   collapse:   a third target and an initiator with `huge_pages: collapse`:
#               the same 4 KiB-page buffers, turned into huge pages when
#               registered (docs/protocol.md, Page size); COLLAPSE=0 leaves
#               it out
# each for write and read (OPS), one initiator thread, SECONDS_PER_RUN (3)
# seconds per run, REPEAT (1) alternating rounds reported as medians; then
# the ratios shm/memcpy x1, shm/memcpy xN and shm/tcp.  Absolute figures on
# a shared machine move a lot; ratios of runs seconds apart much less.
# Environment: OPS ("write read"), SECONDS_PER_RUN, REPEAT, WORKERS (shm
# workers; 0 = default), CHUNK (transports.shm.chunk_size, default 256K),
# RELAY_SLOTS (8) and RELAY_SLOT_SIZE (64K) (transports.shm.relay_slots,
# relay_slot_size), BATCH (8 blocks per batch), DEPTH (4 batches in flight),
# HUGEPAGES (1: every buffer, memcpy's included, advised to transparent huge
# pages; the copy pins the peer's pages, so page size matters most to shm).
# JSON_OUT=FILE: the results as JSON (bench/bench_results.py: series
# "memcpy x1", "memcpy xN", "tern shm", "tern tcp, default pool", one row per
# size, medians); PLOT=FILE.svg|.png: them drawn by tern-bench --plot.
set -euo pipefail

BUILD=${1:-build}
BENCH="$BUILD/bin/tern-bench"
MEMCPY="$BUILD/bin/tern-bench-memcpy"
OPS=${OPS:-"write read"}
T=${SECONDS_PER_RUN:-3}
REPEAT=${REPEAT:-1}
WORKERS=${WORKERS:-0}
CHUNK=${CHUNK:-256K}
RELAY_SLOTS=${RELAY_SLOTS:-8}
RELAY_SLOT_SIZE=${RELAY_SLOT_SIZE:-64K}
BATCH=${BATCH:-8}
DEPTH=${DEPTH:-4}
HUGEPAGES=${HUGEPAGES:-0}
SIZES=${SIZES:-1M}
ALLOC=${ALLOC:-1}
COLLAPSE=${COLLAPSE:-1}
JSON_OUT=${JSON_OUT:-}
PLOT=${PLOT:-}
RESULTS="$(cd "$(dirname "$0")" && pwd)/bench_results.py"
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
APID=
CPID=
cleanup() {
    for p in $TPID $APID $CPID; do
        kill -TERM "$p" 2>/dev/null || true
        wait "$p" 2>/dev/null || true
    done
    rm -rf "$WORK"
}
trap cleanup EXIT INT TERM

config() { # file [huge_pages] transports...
    local f=$1 hp=; shift
    case $1 in off|advise|collapse) hp=$1; shift ;; esac
    { echo "server_name: 127.0.0.1:0"; echo "metadata: p2p"
      [ -n "$hp" ] && echo "huge_pages: $hp"
      echo "transports:"
      for t in "$@"; do
          echo "  - name: $t"
          if [ "$t" = shm ]; then echo "    workers: $WORKERS"; echo "    chunk_size: $CHUNK"
              echo "    relay_slots: $RELAY_SLOTS"; echo "    relay_slot_size: $RELAY_SLOT_SIZE"; fi
      done
      echo "log_level: warn"; } >"$f"
}
config "$WORK/target.yaml" shm tcp
config "$WORK/shm.yaml" shm
config "$WORK/tcp.yaml" tcp
config "$WORK/ctarget.yaml" collapse shm tcp
config "$WORK/collapse.yaml" collapse shm

target_seg() { # out log pid: the target's segment name once it is ready
    local s=
    for _ in $(seq 300); do
        s=$(sed -n 's/^tern-bench target ready: \([^ ]*\).*/\1/p' "$1" 2>/dev/null)
        [ -n "$s" ] && break
        kill -0 "$3" 2>/dev/null || break
        sleep 0.1
    done
    [ -n "$s" ] || { echo "shm_bench: the target did not start:" >&2; cat "$2" >&2; return 1; }
    echo "$s"
}
"$BENCH" --mode target --config "$WORK/target.yaml" --buffer-size 64M "${HP[@]}" \
    >"$WORK/target.out" 2>"$WORK/target.log" &
TPID=$!
SEG=$(target_seg "$WORK/target.out" "$WORK/target.log" "$TPID")
ASEG=
if [ "$ALLOC" = 1 ]; then
    "$BENCH" --mode target --config "$WORK/shm.yaml" --buffer-size 64M --alloc \
        >"$WORK/atarget.out" 2>"$WORK/atarget.log" &
    APID=$!
    ASEG=$(target_seg "$WORK/atarget.out" "$WORK/atarget.log" "$APID")
fi

CSEG=
if [ "$COLLAPSE" = 1 ]; then
    "$BENCH" --mode target --config "$WORK/ctarget.yaml" --buffer-size 64M \
        >"$WORK/ctarget.out" 2>"$WORK/ctarget.log" &
    CPID=$!
    CSEG=$(target_seg "$WORK/ctarget.out" "$WORK/ctarget.log" "$CPID")
    # a refused collapse is a warning in the log: say so, the figure is 4 KiB pages then
    grep -h "huge_pages:" "$WORK/ctarget.log" >&2 || true
fi

json_get() { python3 -c "import json,sys; print('%.3f' % json.load(open(sys.argv[1]))['gb_per_s'])" "$1"; }
median() { python3 -c 'import sys,statistics; print("%.3f" % statistics.median(map(float, sys.argv[1:])))' "$@"; }
ratio() { python3 -c "import sys; a,b=map(float,sys.argv[1:]); print('%.2f' % (a / b if b > 0 else 0))" "$1" "$2"; }

run_memcpy() { # threads size
    "$MEMCPY" --size 64M --block "$2" --threads "$1" --duration "$T" "${HP[@]}" >"$WORK/memcpy.json"
    json_get "$WORK/memcpy.json"
}

# tern-bench's JSON -> "GB/s p50-us p99-us"
json_tern() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print('%.3f %d %d' % (d['gb_per_s'], d['lat_p50_us'], d['lat_p99_us']))" "$1"; }

run_tern() { # config op size [alloc|collapse]
    local out="$WORK/$1-$2.json" batch=$BATCH blk seg=$SEG extra=("${HP[@]}")
    [ "${4:-}" = alloc ] && { seg=$ASEG; extra=(--alloc); }
    [ "${4:-}" = collapse ] && seg=$CSEG
    blk=$(python3 -c "import sys; sys.path.insert(0, sys.argv[1]); import bench_results; print(bench_results.value(sys.argv[2]))" "$(dirname "$RESULTS")" "$3")
    # BATCH blocks per batch where that many fit in the 64 MiB buffer
    [ $((batch * blk)) -gt $((64 << 20)) ] && batch=$(((64 << 20) / blk))
    [ "$batch" -ge 1 ] || { echo "shm_bench: $3 blocks do not fit in 64 MiB" >&2; return 1; }
    "$BENCH" --mode initiator --config "$WORK/$1.yaml" --segment "$seg" --op "$2" \
        --block-size "$3" --batch-size "$batch" --queue-depth "$DEPTH" --buffer-size 64M "${extra[@]}" \
        --threads 1 --duration "$T" --json >"$out" 2>"$WORK/$1-$2.log" || {
        echo "shm_bench: tern-bench $1 $2 $3 failed:" >&2; cat "$WORK/$1-$2.log" "$out" >&2; return 1; }
    json_tern "$out"
}

row() { python3 "$RESULTS" row "$WORK/rows.jsonl" "$@"; }
# the medians of the runs of one series at one size, as a row and on stdout
tern_row() { # label op size "GB/s p50 p99" ...
    local label=$1 op=$2 size=$3 g=() p=() q=()
    shift 3
    for r in "$@"; do read -r a b c <<<"$r"; g+=("$a"); p+=("$b"); q+=("$c"); done
    local gm; gm=$(median "${g[@]}")
    row "label=$label" "op=$op" "block_size=$size" "gb_per_s=$gm" \
        "lat_p50_us=$(median "${p[@]}")" "lat_p99_us=$(median "${q[@]}")"
    echo "$gm"
}

hp=$([ "$HUGEPAGES" = 1 ] && echo yes || echo no)
echo "64 MiB buffers, $T s per run, medians of $REPEAT round(s); shm workers: $N, chunk $CHUNK, huge pages: $hp"
printf '%-6s %-6s %11s %11s %9s %9s %10s %9s | %8s %8s %7s %8s %8s\n' block op "memcpy x1" \
    "memcpy x$N" "shm GB/s" "tcp GB/s" "alloc GB/s" "clp GB/s" "shm/mcp1" "shm/mcpN" "shm/tcp" \
    "alc/mcp1" "clp/mcp1"
for size in $SIZES; do
    m1s=() mns=()
    declare -A shm=() tcp=() alc=() clp=()
    for op in $OPS; do shm[$op]=""; tcp[$op]=""; alc[$op]=""; clp[$op]=""; done
    for _ in $(seq "$REPEAT"); do
        m1s+=("$(run_memcpy 1 "$size")")
        mns+=("$(run_memcpy "$N" "$size")")
        for op in $OPS; do
            shm[$op]+="$(run_tern shm "$op" "$size");"
            tcp[$op]+="$(run_tern tcp "$op" "$size");"
            [ "$ALLOC" = 1 ] && alc[$op]+="$(run_tern shm "$op" "$size" alloc);"
            [ "$COLLAPSE" = 1 ] && clp[$op]+="$(run_tern collapse "$op" "$size" collapse);"
        done
    done
    m1=$(median "${m1s[@]}"); mn=$(median "${mns[@]}")
    row "label=memcpy x1" "block_size=$size" "gb_per_s=$m1"
    row "label=memcpy x$N" "block_size=$size" "gb_per_s=$mn"
    for op in $OPS; do
        IFS=';' read -r -a sr <<<"${shm[$op]}"
        IFS=';' read -r -a cr <<<"${tcp[$op]}"
        s=$(tern_row "tern shm" "$op" "$size" "${sr[@]}")
        c=$(tern_row "tern tcp, default pool" "$op" "$size" "${cr[@]}")
        a=- ar=-
        if [ "$ALLOC" = 1 ]; then
            IFS=';' read -r -a al <<<"${alc[$op]}"
            a=$(tern_row "tern shm, tern-allocated" "$op" "$size" "${al[@]}")
            ar=$(ratio "$a" "$m1")
        fi
        h=- hr=-
        if [ "$COLLAPSE" = 1 ]; then
            IFS=';' read -r -a cl <<<"${clp[$op]}"
            h=$(tern_row "tern shm, huge_pages: collapse" "$op" "$size" "${cl[@]}")
            hr=$(ratio "$h" "$m1")
        fi
        printf '%-6s %-6s %11s %11s %9s %9s %10s %9s | %8s %8s %7s %8s %8s\n' "$size" "$op" "$m1" \
            "$mn" "$s" "$c" "$a" "$h" "$(ratio "$s" "$m1")" "$(ratio "$s" "$mn")" "$(ratio "$s" "$c")" \
            "$ar" "$hr"
    done
done
echo "(targets on a 2-core machine at 1 MiB: shm >= 0.8 x memcpy x1 and >= 1.5 x tcp,"
echo " tern-allocated >= 0.9 x memcpy x1; clp: the buffers of shm, collapsed to huge pages;"
echo " load average now: $(cut -d' ' -f1-3 /proc/loadavg))"
if [ -n "$JSON_OUT" ] || [ -n "$PLOT" ]; then
    out=${JSON_OUT:-$WORK/results.json}
    python3 "$RESULTS" write "$WORK/rows.jsonl" "$out" bench=shm_bench \
        "command=SIZES=\"$SIZES\" OPS=\"$OPS\" REPEAT=$REPEAT SECONDS_PER_RUN=$T HUGEPAGES=$HUGEPAGES ALLOC=$ALLOC COLLAPSE=$COLLAPSE bench/shm_bench.sh" \
        "shm_workers=$N" "chunk_size=$CHUNK" "batch=$BATCH" "queue_depth=$DEPTH" "huge_pages=$hp" \
        "date=$(date -u +%Y-%m-%dT%H:%MZ)" "load_average=$(cut -d' ' -f1-3 /proc/loadavg)" \
        "nproc=$(nproc)"
    [ -n "$JSON_OUT" ] && echo "results: $JSON_OUT"
    if [ -n "$PLOT" ]; then
        "$BENCH" --plot "$PLOT" --compare "$out" --title "tern shm vs memcpy and tern tcp, same host" &&
            echo "chart: $PLOT"
    fi
fi
