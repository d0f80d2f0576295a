#!/usr/bin/env bash
# bench/peers.sh [BUILD_DIR]: what a peer costs, today's TCP transport beside
# the previous design (thread per connection), in one run.
#
# Part 1, one initiator, N peers (COUNTS, default "10 100 1000"): N target
# engines in processes of PER_PROC (100) engines each; one initiator engine
# in its own process opens all N, writes 64 KiB of a pattern unique to each
# peer in one batch, reads all back and compares every byte.  Printed per
# design: time to reach all (open + write batch), threads of the initiator
# process before and after, fds and RSS added per peer (after 0.5 s idle),
# peers verified.
# Part 2, one target, TARGET_N (1000) initiators: one target engine in its
# own process, TARGET_N initiator engines in processes of PER_PROC, each
# writes 64 KiB to its own part of the target's buffer and reads it back;
# printed: initiators verified, the target process's threads, fds and RSS
# before and with all of them connected.
#
# The previous design is the tcp plugin of BASE (default: the commit before
# the one that added transports/tcp/tcp_loop.c), compiled here from
# `git archive` and loaded with the transport entry's `path`, under the same
# core and bench program; its targets in part 1 are today's (the initiator
# process is what is measured there).  Environment: COUNTS, TARGET_N,
# PER_PROC, BASE, SKIP_OLD=1 (today's design only).
set -euo pipefail

BUILD=${1:-build}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PEERS="$BUILD/bin/tern-bench-peers"
COUNTS=${COUNTS:-"10 100 1000"}
TARGET_N=${TARGET_N:-1000}
PER_PROC=${PER_PROC:-100}
SKIP_OLD=${SKIP_OLD:-0}
[ -x "$PEERS" ] || { echo "peers: $PEERS not found (build first)" >&2; exit 1; }
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

WORK=$(mktemp -d "${TMPDIR:-/tmp}/tern-peers.XXXXXX")
PIDS=()
HOLDS=()
STARTS=()
cleanup() {
    for fd in "${HOLDS[@]}"; do eval "exec $fd>&-" 2>/dev/null || true; done
    for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
    rm -rf "$WORK"
}
trap cleanup EXIT INT TERM

# ---- the previous design's plugin ------------------------------------------------
OLD_SO=
if [ "$SKIP_OLD" != 1 ]; then
    if [ -z "${BASE:-}" ]; then
        first=$(git -C "$ROOT" log --diff-filter=A --format=%H -- transports/tcp/tcp_loop.c | tail -1)
        BASE="$first^"
    fi
    mkdir -p "$WORK/old"
    git -C "$ROOT" archive "$BASE" include transports/tcp | tar -x -C "$WORK/old"
    OLD_SO="$WORK/old/libtern-tcp-old.so"
    cc -O2 -std=gnu11 -fPIC -shared -fvisibility=hidden -pthread -I"$WORK/old/include" \
        "$WORK"/old/transports/tcp/*.c -o "$OLD_SO"
fi

yaml() { # file extra-tcp-lines...
    local f=$1; shift
    { printf 'server_name: 127.0.0.1:0\nmetadata: p2p\ntransports:\n  - name: tcp\n'
      for l in "$@"; do printf '    %s\n' "$l"; done
      # the core's endpoint cache (default 256) must hold every peer, or
      # endpoints are evicted and reopened while the peers are reached
      printf 'endpoint_cache: 4096\nlog_level: error\n'; } >"$f"
}
yaml "$WORK/targets.yaml" "io_threads: 1"
yaml "$WORK/new.yaml"
[ -n "$OLD_SO" ] && yaml "$WORK/old.yaml" "path: $OLD_SO"

# start_group NAME COUNT ARGS...: COUNT engines in processes of PER_PROC,
# stdin held open by fd HOLD (closing it ends them); waits for READY/RESULT.
NEXTFD=20
start_group() {
    local name=$1 count=$2; shift 2
    local fifo="$WORK/$name.hold" fd=$NEXTFD
    NEXTFD=$((NEXTFD + 1))
    mkfifo "$fifo"
    local i=0 p=0
    GROUP_START=${#PIDS[@]}
    while [ "$i" -lt "$count" ]; do
        local k=$((count - i < PER_PROC ? count - i : PER_PROC))
        "$PEERS" --count "$k" --first "$i" "$@" <"$fifo" >"$WORK/$name.$p.out" 2>"$WORK/$name.$p.log" &
        PIDS+=($!)
        i=$((i + k)); p=$((p + 1))
    done
    eval "exec $fd>$fifo"
    HOLDS+=("$fd")
    STARTS+=("$GROUP_START")
    local want=$p
    for _ in $(seq 1800); do
        local got
        got=$(cat "$WORK/$name".*.out 2>/dev/null | grep -c -E '^(READY|RESULT)' || true)
        [ "$got" -ge "$want" ] && return 0
        sleep 0.2
    done
    echo "peers: $name did not start:" >&2; cat "$WORK/$name".*.log >&2; exit 1
}
stop_group() { # the group started last
    local fd=${HOLDS[-1]} start=${STARTS[-1]}
    eval "exec $fd>&-"
    unset 'HOLDS[-1]' 'STARTS[-1]'
    for p in "${PIDS[@]:$start}"; do wait "$p" 2>/dev/null || true; done
    PIDS=("${PIDS[@]:0:$start}")
}

kv() { sed -n "s/.*[ ]$1=\([^ ]*\).*/\1/p" <<<"$2"; }

printf '%-9s %5s | %8s %9s %9s %8s %11s %9s\n' design peers "reach s" "threads0" "threads1" \
    "fds/peer" "RSS KiB/peer" verified
for n in $COUNTS; do
    start_group "t$n" "$n" --mode targets --yaml "$WORK/targets.yaml"
    cat "$WORK/t$n".*.out | grep '^PEER' >"$WORK/peers-$n.txt"
    for design in today previous; do
        cfg="$WORK/new.yaml"
        if [ "$design" = previous ]; then
            [ -n "$OLD_SO" ] || continue
            cfg="$WORK/old.yaml"
        fi
        out=$("$PEERS" --mode initiator --peers "$WORK/peers-$n.txt" --yaml "$cfg" \
              2>"$WORK/init-$design-$n.log" | grep '^RESULT' || true)
        if [ -z "$out" ]; then
            printf '%-9s %5s | failed: %s\n' "$design" "$n" "$(tail -1 "$WORK/init-$design-$n.log")"
            continue
        fi
        printf '%-9s %5s | %8s %9s %9s %8s %11s %9s\n' "$design" "$n" "$(kv reach_s "$out")" \
            "$(kv threads0 "$out")" "$(kv threads1 "$out")" \
            "$(python3 -c "print('%.2f' % (($(kv fds1 "$out") - $(kv fds0 "$out")) / $n))")" \
            "$(python3 -c "print('%.1f' % (($(kv rss1_kb "$out") - $(kv rss0_kb "$out")) / $n))")" \
            "$(kv verified "$out")/$n"
    done
    stop_group "t$n"
done

# ---- part 2: one target, TARGET_N initiators ------------------------------------------
proc_stat() { # pid -> "threads fds rss_kb"
    echo "$(ls "/proc/$1/task" | wc -l) $(ls "/proc/$1/fd" | wc -l) \
$(sed -n 's/^VmRSS:[[:space:]]*\([0-9]*\).*/\1/p' "/proc/$1/status")"
}
echo
printf '%-9s %10s | %9s %14s %14s %16s\n' design initiators verified "target threads" \
    "target fds" "target RSS MiB"
yaml "$WORK/initiators.yaml" "io_threads: 1"
for design in today previous; do
    cfg="$WORK/new.yaml"
    if [ "$design" = previous ]; then
        [ -n "$OLD_SO" ] || continue
        cfg="$WORK/old.yaml"
    fi
    start_group "srv-$design" 1 --mode targets --yaml "$cfg" --size $((TARGET_N * 65536))
    TPID=${PIDS[-1]}
    sleep 0.5
    read -r name addr <<<"$(sed -n 's/^PEER \([^ ]*\) \([0-9]*\)/\1 \2/p' "$WORK/srv-$design".0.out)"
    read -r th0 fd0 rss0 <<<"$(proc_stat "$TPID")"
    start_group "cli-$design" "$TARGET_N" --mode initiators --yaml "$WORK/initiators.yaml" \
        --target "$name" --addr "$addr"
    read -r th1 fd1 rss1 <<<"$(proc_stat "$TPID")"
    ver=$(cat "$WORK/cli-$design".*.out | sed -n 's/.*verified=\([0-9]*\).*/\1/p' | paste -sd+ | bc)
    printf '%-9s %10s | %9s %14s %14s %16s\n' "$design" "$TARGET_N" "$ver/$TARGET_N" \
        "$th0 -> $th1" "$fd0 -> $fd1" "$(python3 -c "print('%.1f -> %.1f' % ($rss0/1024, $rss1/1024))")"
    stop_group "cli-$design"
    # the target group was started first: close its stdin too
    stop_group "srv-$design"
done
echo "(64 KiB per peer; targets: io_threads 1, $PER_PROC engines per process; machine: $(nproc) CPUs,"
echo " load average now: $(cut -d' ' -f1-3 /proc/loadavg))"
