#!/usr/bin/env bash
# tests/lab/test_multinic.sh BUILD_DIR: tcp over two NICs between two lab
# hosts (lab.sh).  Host b runs a tern-bench target, host a the initiator,
# each engine named by its nic0 address; the tcp transport finds nic1 by
# itself.  Every run checks its data (--verify) and that each NIC carried
# its share, from the interface counters in the namespaces:
#   - IPv4 write, 2 x 1 Gbit/s: both NICs carry at least 25% of the bytes;
#   - IPv4 read: the same, on what host a received;
#   - IPv6 write (engines named by their IPv6 addresses): both NICs carry;
#   - the efa transport over libfabric's tcp provider, write and read: both
#     NICs are its devices and both carry;
#   - unequal NICs (1 Gbit/s and 250 Mbit/s): both carry, the slow one less
#     than half of what the fast one does (spread by measured rate);
#   - a link down (host b's nic1) for 2.5 s of an 8 s write, which resets
#     nothing: the pair is found stalled, its slices go over nic0, no request
#     fails, the data verifies, and nic1 carries again once it is back up;
#   - a third interface with the same private address on both hosts (a
#     bridge like docker0), both engines on the same data port: published,
#     refused by the initiator (it is its own address: it would reach its
#     own engine), no request fails, the data verifies;
#   - transports.tcp.devices [nic1] on both sides: the data goes over nic1
#     only (the server names stay on nic0); [nosuch]: the engine says which
#     list keeps no interface;
#   - two hosts whose two NICs share one subnet (one route: the kernel sends
#     everything through the first NIC): no request fails, the data
#     verifies, no pair is reported stalled.
# Skips (77) where no lab can run.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
BUILD=$(cd "${1:-build}" && pwd)
BENCH="$BUILD/bin/tern-bench"
# shellcheck source=lab.sh
. "$HERE/lab.sh"
lab_require
[ -x "$BENCH" ] || { echo "test_multinic: $BENCH not built" >&2; exit 1; }

WORK=$(mktemp -d "${TMPDIR:-/tmp}/tern-multinic.XXXXXX")
lab_init "mn$$"
trap 'lab_cleanup; rm -rf "$WORK"' EXIT
FAILS=0

fail() {
    echo "FAIL: $*"
    FAILS=$((FAILS + 1))
}

# config FILE HOST: an engine named by HOST on an ephemeral port; DATA_PORT
# set: the tcp data ports on that one; TCP_DEVICES set: tcp's devices list;
# EFA=1: the efa transport over libfabric's tcp provider instead of tcp.
config() {
    if [ "${EFA:-0}" = 1 ]; then
        printf 'server_name: "%s"\nmetadata: p2p\ntransports:\n  - name: efa\n    provider: tcp\nlog_level: warn\n' \
            "$2" >"$1"
        return
    fi
    cat >"$1" <<EOF
server_name: "$2"
metadata: p2p
transports:
  - name: tcp
    port: ${DATA_PORT:-0}
${TCP_DEVICES:+    devices: [$TCP_DEVICES]}
log_level: warn
EOF
}

# start_target ADDR: tern-bench target on host b; sets SEG and TPID.
start_target() {
    config "$WORK/t.yaml" "$1"
    : >"$WORK/target.out"
    lab_exec b "$BENCH" --mode target --config "$WORK/t.yaml" --buffer-size 64M \
        >"$WORK/target.out" 2>"$WORK/target.log" &
    TPID=$!
    SEG=
    for _ in $(seq 100); do
        SEG=$(sed -n 's/^tern-bench target ready: \([^ ]*\).*/\1/p' "$WORK/target.out")
        [ -n "$SEG" ] && return 0
        sleep 0.1
    done
    echo "test_multinic: the target did not start:" >&2
    cat "$WORK/target.log" >&2
    return 1
}

stop_target() {
    kill -TERM "$TPID" 2>/dev/null
    wait "$TPID" 2>/dev/null
}

# run NAME ADDR OP COUNTER: initiator on host a; sets D0, D1 (bytes of the
# counter, tx_bytes or rx_bytes, of a's nic0 and nic1 during the run).
run() {
    local name=$1 addr=$2 op=$3 ctr=$4 a0 a1
    config "$WORK/i.yaml" "$addr"
    a0=$(lab_exec a cat /sys/class/net/nic0/statistics/"$ctr")
    a1=$(lab_exec a cat /sys/class/net/nic1/statistics/"$ctr")
    if ! lab_exec a "$BENCH" --mode initiator --config "$WORK/i.yaml" --segment "$SEG" \
        --op "$op" --block-size 1M --batch-size 16 --buffer-size 64M --duration 2 --verify \
        --json >"$WORK/$name.json" 2>"$WORK/$name.log"; then
        fail "$name: tern-bench failed: $(tail -3 "$WORK/$name.log" "$WORK/$name.json")"
        D0=0 D1=0
        return 1
    fi
    D0=$(($(lab_exec a cat /sys/class/net/nic0/statistics/"$ctr") - a0))
    D1=$(($(lab_exec a cat /sys/class/net/nic1/statistics/"$ctr") - a1))
    grep -q '"verify":"ok"' "$WORK/$name.json" || fail "$name: verify: $(cat "$WORK/$name.json")"
    ! grep -q "stalled" "$WORK/$name.log" ||
        fail "$name: a NIC pair was reported stalled with every link up: $(grep stalled "$WORK/$name.log")"
    echo "$name: nic0 $D0 B, nic1 $D1 B ($ctr of host a); $(sed -n 's/.*"gb_per_s":\([0-9.]*\).*/\1/p' "$WORK/$name.json") GB/s"
}

# both_carry NAME MIN_PERCENT: each NIC carried at least MIN% of the bytes.
both_carry() {
    local total=$((D0 + D1))
    [ "$total" -gt $((16 << 20)) ] || { fail "$1: only $total bytes moved"; return; }
    [ $((D0 * 100 / total)) -ge "$2" ] || fail "$1: nic0 carried $D0 of $total bytes (< $2%)"
    [ $((D1 * 100 / total)) -ge "$2" ] || fail "$1: nic1 carried $D1 of $total bytes (< $2%)"
}

lab_host a && lab_host b && lab_link a b 2 1gbit || exit 1
lab_wait_reach a 198.18.1.2 && lab_wait_reach a 2001:db8:1::2 || exit 1

start_target 198.18.0.2:0 || exit 1
run ipv4-write 198.18.0.1:0 write tx_bytes && both_carry ipv4-write 25
run ipv4-read 198.18.0.1:0 read rx_bytes && both_carry ipv4-read 25
stop_target

start_target "[2001:db8::2]:0" || exit 1
run ipv6-write "[2001:db8::1]:0" write tx_bytes && both_carry ipv6-write 25
stop_target

# efa over libfabric's tcp provider, which lists one domain per interface:
# both NICs are devices (the loopback one is left out) and both carry.
if [ -f "$BUILD/lib/tern/libtern-efa.so" ]; then
    export EFA=1
    start_target 198.18.0.2:0 || exit 1
    run efa-write 198.18.0.1:0 write tx_bytes && both_carry efa-write 25
    run efa-read 198.18.0.1:0 read rx_bytes && both_carry efa-read 25
    stop_target
    unset EFA
else
    echo "efa-write, efa-read: SKIP: the efa transport was not built (libfabric-dev missing)"
fi

lab_rate a nic1 250mbit && lab_rate b nic1 250mbit
start_target 198.18.0.2:0 || exit 1
if run unequal-write 198.18.0.1:0 write tx_bytes; then
    both_carry unequal-write 5
    [ "$D1" -lt $((D0 / 2)) ] || fail "unequal-write: the 250 Mbit/s nic1 carried $D1 B, not less than half of nic0's $D0 B"
fi
stop_target

lab_rate a nic1 1gbit && lab_rate b nic1 1gbit
start_target 198.18.0.2:0 || exit 1
config "$WORK/i.yaml" 198.18.0.1:0
lab_exec a "$BENCH" --mode initiator --config "$WORK/i.yaml" --segment "$SEG" --op write \
    --block-size 1M --batch-size 16 --buffer-size 64M --duration 8 --verify --json \
    >"$WORK/down.json" 2>"$WORK/down.log" &
IPID=$!
sleep 1.5
lab_down b nic1
sleep 2.5
u0=$(lab_tx_bytes a nic1)
lab_up b nic1
# How long after the link is back nic1 carries data again (1 MiB sent).
t_up=$(date +%s%N) back_ms=-1
for _ in $(seq 100); do
    if [ $(($(lab_tx_bytes a nic1) - u0)) -gt $((1 << 20)) ]; then
        back_ms=$((($(date +%s%N) - t_up) / 1000000))
        break
    fi
    sleep 0.05
done
wait "$IPID" || fail "link-down: tern-bench failed: $(tail -3 "$WORK/down.log")"
D1=$(($(lab_tx_bytes a nic1) - u0))
stall_ms=$(sed -n 's/.*stalled (nothing done for \([0-9]*\) ms.*/\1/p' "$WORK/down.log" | head -1)
echo "link-down: $(cat "$WORK/down.json"); the pair found stalled, its slices sent over nic0, after ${stall_ms:-?} ms without progress; nic1 carried data again ${back_ms} ms after the link came back, $D1 B in all"
[ -n "$stall_ms" ] && [ "$stall_ms" -le 1000 ] ||
    fail "link-down: the stalled pair was found only after ${stall_ms:-?} ms (bound 1000)"
[ "$back_ms" -ge 0 ] && [ "$back_ms" -le 5000 ] ||
    fail "link-down: nic1 did not carry data within 5 s of the link coming back (${back_ms} ms)"
grep -q '"verify":"ok"' "$WORK/down.json" || fail "link-down: verify failed"
grep -q '"errors":0,' "$WORK/down.json" || fail "link-down: requests failed"
grep -q "nic1 .*stalled" "$WORK/down.log" || fail "link-down: no stall was reported: $(grep -v '^\[' "$WORK/down.log")"
[ "$D1" -gt $((16 << 20)) ] || fail "link-down: nic1 carried only $D1 B after it came back up"
stop_target

for h in a b; do
    ip link add br9 netns "$(lab_ns $h)" type veth peer name br9p netns "$(lab_ns $h)" &&
        ip -n "$(lab_ns $h)" addr add 172.31.9.1/24 dev br9 &&
        ip -n "$(lab_ns $h)" link set br9p up && ip -n "$(lab_ns $h)" link set br9 up ||
        fail "bridge: cannot add br9 to host $h"
done
export DATA_PORT=47123
start_target 198.18.0.2:0 || exit 1
if run bridge-write 198.18.0.1:0 write tx_bytes; then
    both_carry bridge-write 25
    grep -q '"errors":0,' "$WORK/bridge-write.json" || fail "bridge-write: requests failed"
fi
stop_target
unset DATA_PORT

export TCP_DEVICES=nic1
start_target 198.18.0.2:0 || exit 1
if run devices-nic1 198.18.0.1:0 write tx_bytes; then
    [ "$D0" -lt $((1 << 20)) ] || fail "devices-nic1: nic0 carried $D0 B with devices [nic1]"
    [ "$D1" -gt $((16 << 20)) ] || fail "devices-nic1: nic1 carried only $D1 B"
fi
stop_target
TCP_DEVICES=nosuch config "$WORK/bad.yaml" 198.18.0.1:0
if lab_exec a "$BENCH" --mode target --config "$WORK/bad.yaml" >/dev/null 2>"$WORK/bad.log"; then
    fail "devices-nosuch: the engine started"
fi
grep -q "devices keeps none of this host's interfaces" "$WORK/bad.log" ||
    fail "devices-nosuch: no message naming the devices list: $(cat "$WORK/bad.log")"
unset TCP_DEVICES

# hosts c and d: both NICs on 198.18.<s>.0/24 (s: the lab's next subnet)
lab_host c && lab_host d && lab_link_one_subnet c d 2 1gbit || exit 1
CD=$((LAB_SUBNET - 1))
lab_wait_reach c "198.18.$CD.4" || exit 1
config "$WORK/c.yaml" "198.18.$CD.1:0"
config "$WORK/d.yaml" "198.18.$CD.2:0"
lab_exec d "$BENCH" --mode target --config "$WORK/d.yaml" --buffer-size 64M \
    >"$WORK/d.out" 2>"$WORK/d.log" &
DPID=$!
DSEG=
for _ in $(seq 100); do
    DSEG=$(sed -n 's/^tern-bench target ready: \([^ ]*\).*/\1/p' "$WORK/d.out")
    [ -n "$DSEG" ] && break
    sleep 0.1
done
if [ -z "$DSEG" ]; then
    fail "one-subnet: the target did not start: $(cat "$WORK/d.log")"
elif ! lab_exec c "$BENCH" --mode initiator --config "$WORK/c.yaml" --segment "$DSEG" --op write \
    --block-size 1M --batch-size 16 --buffer-size 64M --duration 2 --verify --json \
    >"$WORK/one.json" 2>"$WORK/one.log"; then
    fail "one-subnet: tern-bench failed: $(tail -3 "$WORK/one.log")"
else
    echo "one-subnet: $(cat "$WORK/one.json")"
    grep -q '"verify":"ok"' "$WORK/one.json" || fail "one-subnet: verify failed"
    grep -q '"errors":0,' "$WORK/one.json" || fail "one-subnet: requests failed"
    ! grep -q stalled "$WORK/one.log" || fail "one-subnet: $(grep stalled "$WORK/one.log")"
fi
kill -TERM "$DPID" 2>/dev/null
wait "$DPID" 2>/dev/null

if [ "$FAILS" -gt 0 ]; then
    echo "test_multinic: $FAILS check(s) failed; target log:"
    cat "$WORK/target.log"
    exit 1
fi
echo "test_multinic: ok"
