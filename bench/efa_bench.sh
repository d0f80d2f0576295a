#!/usr/bin/env bash
# bench/efa_bench.sh [BUILD_DIR]: the efa (libfabric) transport against its
# baselines, in one run, on loopback, same machine, same minute.
#
#   efa/shm (provider shm)  vs  memcpy (one thread, same block size, a small
#                               C loop compiled here)
#   efa/tcp (tcp;ofi_rxm)   vs  tern's TCP transport and iperf3 (1 stream)
#   slice size 64K vs 1M on efa/tcp and efa/shm
#   efa/shm with its default rails vs one rail (one endpoint and progress
#   thread; docs/protocol.md, "efa rails")
#   efa/shm WRITE through the provider's bounce buffers (the default) vs
#   `shm_bounce_min: 0` (WRITEs by cross-memory attach, which pins the
#   writer's 4 KiB pages; docs/protocol.md, "efa rails")
#   efa/shm with `huge_pages: collapse` and `shm_bounce_min: 0` on both sides
#   vs memcpy: the same 4 KiB-page buffers turned into huge pages when
#   registered, so the attach pins 2 MiB pages (docs/protocol.md, Page size)
#
# tern-bench: --op write (OPS to change), block 1 MiB, batch 16, 1 thread,
# SECONDS_PER_RUN seconds (default 5); a small working set (2 batches) like
# iperf3's one buffer.  Ratios are what count: absolute figures on a shared
# machine move 2-3x.  One target runs at a time (an idle shm target's
# progress threads poll) and none while the baselines run.  Needs
# tern-bench built, iperf3 and python3; nothing leaves loopback (provider
# tcp is pinned to iface lo).
set -euo pipefail

BUILD=${1:-build}
BENCH="$BUILD/bin/tern-bench"
OPS=${OPS:-write}
T=${SECONDS_PER_RUN:-5}
CC=${CC:-cc}

[ -x "$BENCH" ] || { echo "efa_bench: $BENCH not found (build first)" >&2; exit 1; }
[ -e "$BUILD/lib/tern/libtern-efa.so" ] || { echo "efa_bench: $BUILD/lib/tern/libtern-efa.so not built" >&2; exit 1; }
command -v iperf3 >/dev/null || { echo "efa_bench: iperf3 is not installed (apt-get install iperf3)" >&2; exit 1; }
command -v python3 >/dev/null || { echo "efa_bench: python3 is needed to read JSON" >&2; exit 1; }

WORK=$(mktemp -d "${TMPDIR:-/tmp}/tern-efa-bench.XXXXXX")
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
    rm -rf "$WORK"
}
trap cleanup EXIT INT TERM

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
json_get() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print($2)" "$1"; }
ratio() { python3 -c "print('%.2f' % ($1 / $2 if $2 > 0 else 0))"; }

# ---- memcpy baseline: one thread, 1 MiB blocks over a 32 MiB working set --
cat >"$WORK/memcpy.c" <<'EOF'
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec / 1e9; }
int main(int argc, char **argv) {
    size_t blk = strtoull(argv[1], 0, 0), set = strtoull(argv[2], 0, 0);
    double secs = atof(argv[3]), t0, t;
    char *a = aligned_alloc(4096, set), *b = aligned_alloc(4096, set);
    memset(a, 1, set); memset(b, 2, set);
    size_t moved = 0, off = 0;
    t0 = now();
    do {
        for (int i = 0; i < 64; i++) {
            memcpy(b + off, a + off, blk);
            moved += blk;
            off = off + 2 * blk > set ? 0 : off + blk;
        }
        t = now();
    } while (t - t0 < secs);
    printf("%.3f\n", moved / (t - t0) / 1e9 + 0 * b[moved % set]);
    return 0;
}
EOF
"$CC" -O2 -o "$WORK/memcpy" "$WORK/memcpy.c"

# ---- configs and targets ------------------------------------------------------
conf() { # name transport-entry slice
    printf 'server_name: 127.0.0.1:0\nmetadata: p2p\nlog_level: warn\ntransports:\n%s' "$2" >"$WORK/$1.yaml"
    [ -z "${3:-}" ] || printf '    slice_size: %s\n' "$3" >>"$WORK/$1.yaml"
}
EFA_TCP=$'  - name: efa\n    provider: tcp\n    iface: lo\n'
EFA_SHM=$'  - name: efa\n    provider: shm\n'
conf efa-tcp "$EFA_TCP"
conf efa-tcp-64K "$EFA_TCP" 64K
conf efa-tcp-1M "$EFA_TCP" 1M
conf efa-shm "$EFA_SHM"
conf efa-shm-64K "$EFA_SHM" 64K
conf efa-shm-1M "$EFA_SHM" 1M
conf efa-shm-rails1 "$EFA_SHM"$'    rails: 1\n'
conf efa-shm-att "$EFA_SHM"$'    shm_bounce_min: 0\n'
conf efa-shm-clp "$EFA_SHM"$'    shm_bounce_min: 0\n'
sed -i '1a huge_pages: collapse' "$WORK/efa-shm-clp.yaml"
printf 'server_name: 127.0.0.1:0\nmetadata: p2p\nlog_level: warn\ntransports:\n  - name: tcp\n' >"$WORK/tcp.yaml"

# One target at a time, started for the rows that use it: an idle target's
# progress threads poll (libfabric's shm has no wait object) and would take
# CPU from the pair being measured.  Sets SEG to the target's segment name.
# Not called in $(...): a subshell would lose the PID and leave the target
# running after the script.
CUR=
CUR_PID=
use_target() { # config
    [ "$CUR" = "$1" ] && return 0
    if [ -n "$CUR_PID" ]; then
        kill -TERM "$CUR_PID" 2>/dev/null || true
        wait "$CUR_PID" 2>/dev/null || true
    fi
    "$BENCH" --mode target --config "$WORK/$1.yaml" --buffer-size 128M >"$WORK/target-$1.out" 2>"$WORK/target-$1.log" &
    CUR_PID=$!
    CUR=$1
    PIDS+=($!)
    local seg=
    for _ in $(seq 300); do
        seg=$(sed -n 's/^tern-bench target ready: \([^ ]*\).*/\1/p' "$WORK/target-$1.out")
        [ -n "$seg" ] && break
        sleep 0.1
    done
    [ -n "$seg" ] || { echo "efa_bench: target $1 did not start:" >&2; cat "$WORK/target-$1.log" >&2; exit 1; }
    SEG=$seg
}
IPORT=$(free_port)
iperf3 -s -B 127.0.0.1 -p "$IPORT" >"$WORK/iperf3-server.log" 2>&1 &
PIDS+=($!)
sleep 0.5

BLK=1048576 BATCH=16
run_tern() { # config segment op -> GB/s
    local out="$WORK/run-$1-$3.json"
    "$BENCH" --mode initiator --config "$WORK/$1.yaml" --segment "$2" --op "$3" \
        --block-size "$BLK" --batch-size "$BATCH" --buffer-size $((BLK * BATCH * 2)) \
        --duration "$T" --json >"$out" 2>"$WORK/run-$1-$3.log" || {
        echo "efa_bench: tern-bench $1 failed:" >&2; cat "$WORK/run-$1-$3.log" "$out" >&2; return 1; }
    json_get "$out" "'%.3f' % d['gb_per_s']"
}
run_iperf3() {
    local out="$WORK/iperf3.json"
    iperf3 -c 127.0.0.1 -p "$IPORT" -t "$T" -O 1 -l 1M -J >"$out" 2>&1 || {
        echo "efa_bench: iperf3 failed:" >&2; cat "$out" >&2; return 1; }
    json_get "$out" "'%.3f' % (d['end']['sum_received']['bits_per_second'] / 8e9)"
}

row() { printf '%-34s %10s %10s %8s\n' "$@"; }
echo "efa_bench: block 1 MiB, batch 16, 1 thread, ${T} s per run, libfabric $(pkg-config --modversion libfabric 2>/dev/null || echo '?')"
row "comparison" "tern GB/s" "base GB/s" ratio
MEMCPY=$("$WORK/memcpy" "$BLK" $((BLK * BATCH * 2)) "$T")
IPERF=$(run_iperf3)
for op in $OPS; do
    use_target efa-shm; shm=$(run_tern efa-shm "$SEG" "$op")
    row "efa/shm $op vs memcpy" "$shm" "$MEMCPY" "$(ratio "$shm" "$MEMCPY")"
    use_target efa-shm-rails1; shm1=$(run_tern efa-shm-rails1 "$SEG" "$op")
    row "efa/shm $op rails default vs 1" "$shm" "$shm1" "$(ratio "$shm" "$shm1")"
    if [ "$op" = write ]; then # a READ never attaches
        use_target efa-shm-att; shma=$(run_tern efa-shm-att "$SEG" "$op")
        row "efa/shm $op bounce vs attach" "$shm" "$shma" "$(ratio "$shm" "$shma")"
    fi
    use_target efa-shm-clp; shmc=$(run_tern efa-shm-clp "$SEG" "$op")
    row "efa/shm $op collapsed vs memcpy" "$shmc" "$MEMCPY" "$(ratio "$shmc" "$MEMCPY")"
    use_target efa-tcp; etcp=$(run_tern efa-tcp "$SEG" "$op")
    use_target tcp; tcp=$(run_tern tcp "$SEG" "$op")
    row "efa/tcp $op vs tcp transport" "$etcp" "$tcp" "$(ratio "$etcp" "$tcp")"
    row "efa/tcp $op vs iperf3 -l 1M" "$etcp" "$IPERF" "$(ratio "$etcp" "$IPERF")"
    row "tcp transport $op vs iperf3 -l 1M" "$tcp" "$IPERF" "$(ratio "$tcp" "$IPERF")"
    for p in tcp shm; do
        use_target "efa-$p"
        s64=$(run_tern "efa-$p-64K" "$SEG" "$op")
        s1m=$(run_tern "efa-$p-1M" "$SEG" "$op")
        row "efa/$p $op slice 1M vs 64K" "$s1m" "$s64" "$(ratio "$s1m" "$s64")"
    done
done
echo "(memcpy: one thread, 1 MiB blocks over $((BLK * BATCH * 2 >> 20)) MiB; iperf3 -t $T -O 1 -l 1M, 1 stream;"
echo " load average now: $(cut -d' ' -f1-3 /proc/loadavg))"
