#!/bin/sh
# The GPU check, in one run (docs/gpu.md, Checking on a GPU machine).
#
# Runs from .devkit/ (made by scripts/gpu-kit.sh) with nothing installed:
#  1. tern-info: is GPU memory available, how each transport handles it;
#  2. registration refusals: GPU memory under a contradicted location, host
#     memory as cuda:N (refused), GPU memory with no location (cuda:N);
#  3. two processes over tcp, byte-exact, every pairing of host and GPU
#     memory (host->host, GPU->host, host->GPU, GPU->GPU): WRITE then READ at
#     sizes crossing slices and staging buffers, then the whole buffer; the
#     target's checksum must match what the initiator wrote;
#  4. tern-bench at 1 MiB blocks over tcp, GPU->GPU (both sides --gpu)
#     against host->host in the same run, WRITE and READ, as ratios.
# Every result goes to a file under $OUT; summary.txt has the verdicts.
#
#   env: OUT (default ./gpu-check-out), GPU (default 0), BENCH_SECONDS (5),
#        TERN_CUDA_LIBRARY (default: the real libcuda.so.1; point it at
#        .devkit/fake/libfake-cuda.so to try the script without a GPU)
#   exit: 0 all passed, 1 a check failed, 2 the kit is incomplete
set -u
kit=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-$PWD/gpu-check-out}
GPU=${GPU:-0}
BENCH_SECONDS=${BENCH_SECONDS:-5}
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$kit/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export TERN_PLUGIN_PATH="$kit/plugins"
bin=$kit/bin
for p in tern-info tern-bench tern-test-gpu-peer; do
    [ -x "$bin/$p" ] || { echo "gpu-check: $bin/$p missing (run scripts/gpu-kit.sh)" >&2; exit 2; }
done
summary=$OUT/summary.txt
: >"$summary"
failed=0
note() { echo "$*" | tee -a "$summary"; }
verdict() { # name ok(0/1) detail
    if [ "$2" = 0 ]; then note "PASS $1: $3"; else note "FAIL $1: $3"; failed=1; fi
}
note "gpu-check $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -n), driver library ${TERN_CUDA_LIBRARY:-libcuda.so.1}"
command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi >"$OUT/nvidia-smi.txt" 2>&1

# ---- 1. tern-info ----
"$bin/tern-info" >"$OUT/tern-info.txt" 2>&1
line=$(grep '^gpu memory:' "$OUT/tern-info.txt")
case $line in "gpu memory: available"*) ok=0 ;; *) ok=1 ;; esac
verdict tern-info $ok "$line; $(grep -c 'gpu memory: local' "$OUT/tern-info.txt") transport(s) say how"

# ---- 2. registration refusals ----
timeout 60 "$bin/tern-test-gpu-peer" refusals "$GPU" >"$OUT/refusals.txt" 2>&1
rc=$?
verdict refusals $rc "$(grep -c '^REFUSED' "$OUT/refusals.txt") refused; $(grep '^RESULT' "$OUT/refusals.txt")"

# ---- 3. byte-exact transfers between two processes ----
# start_target NAME MEM LEN: a target on fd 3 (its stdin), its READY line in $ready
start_target() {
    rm -f "$OUT/.$1.in"
    mkfifo "$OUT/.$1.in"
    "$bin/tern-test-gpu-peer" target "$2" "$3" <"$OUT/.$1.in" >"$OUT/$1.target.txt" 2>&1 &
    tpid=$!
    exec 3>"$OUT/.$1.in"
    ready=
    for _ in $(seq 1 300); do
        ready=$(grep '^READY' "$OUT/$1.target.txt" 2>/dev/null)
        [ -n "$ready" ] && return 0
        kill -0 $tpid 2>/dev/null || return 1
        sleep 0.1
    done
    return 1
}
stop_target() {
    echo EXIT >&3 2>/dev/null
    exec 3>&-
    for _ in $(seq 1 100); do kill -0 $tpid 2>/dev/null || break; sleep 0.1; done
    kill $tpid 2>/dev/null
    wait $tpid 2>/dev/null
    rm -f "$OUT/.$1.in"
}
mem_arg() { [ "$1" = host ] && echo -1 || echo "$1"; }
LEN=$((8 * 1024 * 1024))
for pairing in "host host" "$GPU host" "host $GPU" "$GPU $GPU"; do
    set -- $pairing
    ini=$1 tgt=$2
    name=$( [ "$ini" = host ] && echo host || echo gpu )-to-$( [ "$tgt" = host ] && echo host || echo gpu )
    if ! start_target "$name" "$(mem_arg "$tgt")" $LEN; then
        verdict "$name" 1 "the target did not start: $(tail -3 "$OUT/$name.target.txt" | tr '\n' ' ')"
        stop_target "$name"
        continue
    fi
    set -- $ready
    timeout 300 "$bin/tern-test-gpu-peer" initiator "$(mem_arg "$ini")" $LEN "$2" "$3" \
        >"$OUT/$name.initiator.txt" 2>&1
    rc=$?
    echo SUM >&3
    sum=
    for _ in $(seq 1 300); do
        sum=$(grep '^SUM' "$OUT/$name.target.txt" | awk '{print $2}')
        [ -n "$sum" ] && break
        sleep 0.1
    done
    expect=$(grep '^EXPECT' "$OUT/$name.initiator.txt" | awk '{print $2}')
    stop_target "$name"
    if [ $rc = 0 ] && [ -n "$sum" ] && [ "$sum" = "$expect" ]; then ok=0; else ok=1; fi
    verdict "$name" $ok "initiator $ini, target $tgt: $(grep '^RESULT' "$OUT/$name.initiator.txt" | head -1); target checksum $sum, expected $expect"
done

# ---- 4. tern-bench: GPU->GPU against host->host at 1 MiB ----
cat >"$OUT/tcp.yaml" <<'YAML'
server_name: 127.0.0.1:0
metadata: p2p
transports:
  - name: tcp
log_level: warn
YAML
bench() { # KIND(host|gpu) OP
    gflag=
    [ "$1" = gpu ] && gflag="--gpu $GPU"
    "$bin/tern-bench" --mode target --config "$OUT/tcp.yaml" --server-name 127.0.0.1:0 \
        --buffer-size 256M $gflag >"$OUT/bench-$1-$2.target.txt" 2>&1 &
    bpid=$!
    sn=
    for _ in $(seq 1 300); do
        sn=$(awk '/target ready/{print $4}' "$OUT/bench-$1-$2.target.txt" 2>/dev/null)
        [ -n "$sn" ] && break
        kill -0 $bpid 2>/dev/null || break
        sleep 0.1
    done
    timeout $((BENCH_SECONDS + 60)) "$bin/tern-bench" --mode initiator --config "$OUT/tcp.yaml" \
        --segment "$sn" --op "$2" --block-size 1M --batch-size 16 --buffer-size 256M \
        --duration "$BENCH_SECONDS" --json $gflag >"$OUT/bench-$1-$2.json" \
        2>"$OUT/bench-$1-$2.stderr.txt"
    kill $bpid 2>/dev/null
    wait $bpid 2>/dev/null
    sed -n 's/.*"gb_per_s":\([0-9.]*\).*/\1/p' "$OUT/bench-$1-$2.json" | tail -1
}
for op in write read; do
    h=$(bench host $op)
    g=$(bench gpu $op)
    ratio=$(awk -v g="${g:-0}" -v h="${h:-0}" 'BEGIN { if (h > 0) printf "%.3f", g / h; else print "n/a" }')
    ok=$(awk -v r="$ratio" 'BEGIN { print (r != "n/a" && r >= 0.8) ? 0 : 1 }')
    verdict "bench-$op" $ok "tcp 1 MiB $op: GPU->GPU ${g:-?} GB/s, host->host ${h:-?} GB/s, ratio $ratio (need >= 0.8)"
done

note "results in $OUT"
exit $failed
