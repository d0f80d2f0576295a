#!/usr/bin/env bash
# tests/lab/test_handshake_addrs.sh BUILD_DIR: the handshake daemon stays
# reachable while any NIC is up.  Two lab hosts with two NICs each; the
# target (tern-bench on b) is named by its nic0 address, and its descriptor
# lists the daemon's other address (nic1) in "handshake_addrs".  An
# initiator on a (tests/support/helpers/reopen_peer.c, p2p metadata) opens
# the segment, moves verified data and closes it; then b's nic0 goes down
# and the initiator opens the segment again: the descriptor fetch and the
# connection handshake must go through nic1's address, and the data must
# verify.  Each unreachable address costs connect_timeout_ms (1 s here).
# First, two engines on one fixed port of host b, one per NIC address, must
# both come up (with a fixed port the daemon keeps to its own address).
# Skips (77) where no lab can run.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
BUILD=$(cd "${1:-build}" && pwd)
BENCH="$BUILD/bin/tern-bench"
PEER="$BUILD/bin/tern-test-reopen-peer"
# shellcheck source=lab.sh
. "$HERE/lab.sh"
lab_require
for p in "$BENCH" "$PEER"; do
    [ -x "$p" ] || { echo "test_handshake_addrs: $p not built" >&2; exit 1; }
done
WORK=$(mktemp -d "${TMPDIR:-/tmp}/tern-hsaddrs.XXXXXX")
lab_init "hs$$"
trap 'exec 3>&- 2>/dev/null; lab_cleanup; [ -n "${KEEP:-}" ] || rm -rf "$WORK"' EXIT

fail() {
    echo "FAIL: $*"
    echo "target log:"
    cat "$WORK/target.log"
    exit 1
}

config() { # FILE NAME
    printf 'server_name: "%s"\nmetadata: p2p\nconnect_timeout_ms: 1000\ntransports:\n  - name: tcp\nlog_level: %s\n' \
        "$2" "${LOGLEVEL:-warn}" >"$1"
}

lab_host a && lab_host b && lab_link a b 2 1gbit || exit 1
lab_wait_reach a 198.18.0.2 && lab_wait_reach a 198.18.1.2 || exit 1
# Two engines of one host on one fixed port, each on its own NIC's address
# (handshake_addresses: auto keeps a fixed port to its own address): both
# come up.
for n in 0 1; do
    config "$WORK/fixed$n.yaml" "198.18.$n.2:17001"
    lab_exec b "$BENCH" --mode target --config "$WORK/fixed$n.yaml" --buffer-size 1M \
        >"$WORK/fixed$n.out" 2>&1 &
    FIXED[$n]=$!
done
for n in 0 1; do
    for _ in $(seq 100); do
        grep -q "^tern-bench target ready" "$WORK/fixed$n.out" && break
        kill -0 "${FIXED[$n]}" 2>/dev/null || break
        sleep 0.1
    done
    grep -q "^tern-bench target ready" "$WORK/fixed$n.out" ||
        fail "engine $n on 198.18.$n.2:17001 did not come up beside the other: $(cat "$WORK/fixed$n.out")"
done
kill -TERM "${FIXED[@]}" 2>/dev/null
wait "${FIXED[@]}" 2>/dev/null
echo "test_handshake_addrs: two engines on port 17001 of one host, one per NIC address: both up"

config "$WORK/t.yaml" 198.18.0.2:0
config "$WORK/i.yaml" 198.18.0.1:0
lab_exec b "$BENCH" --mode target --config "$WORK/t.yaml" --buffer-size 4M \
    >"$WORK/target.out" 2>"$WORK/target.log" &
SEG=
for _ in $(seq 100); do
    SEG=$(sed -n 's/^tern-bench target ready: \([^ ]*\).*/\1/p' "$WORK/target.out")
    [ -n "$SEG" ] && break
    sleep 0.1
done
[ -n "$SEG" ] || fail "the target did not start"
PORT=${SEG##*:}

mkfifo "$WORK/go"
lab_exec a "$PEER" "$WORK/i.yaml" "$SEG" <"$WORK/go" >"$WORK/peer.out" 2>"$WORK/peer.log" &
PPID_=$!
exec 3>"$WORK/go"
for _ in $(seq 200); do
    grep -q "^OPENED\|^FAILED" "$WORK/peer.out" && break
    sleep 0.1
done
grep -q "^OPENED tcp" "$WORK/peer.out" || fail "first open: $(cat "$WORK/peer.out" "$WORK/peer.log")"
echo "test_handshake_addrs: $SEG opened over nic0, data verified"

# What the target's descriptor says, as the initiator fetched it.
grep "^DESCRIPTOR" "$WORK/peer.out" | grep -q "\"handshake_addrs\":\[[^]]*\"198.18.1.2:$PORT\"" ||
    fail "the descriptor does not list the daemon's nic1 address 198.18.1.2:$PORT: $(grep -o '"handshake_addrs":[^]]*]' "$WORK/peer.out")"

lab_down b nic0
echo again >&3
exec 3>&-
wait "$PPID_"
rc=$?
cat "$WORK/peer.out"
[ $rc -eq 0 ] && grep -q "^REOPENED tcp" "$WORK/peer.out" ||
    fail "open with nic0 down: $(cat "$WORK/peer.out" "$WORK/peer.log")"
echo "test_handshake_addrs: ok: with nic0 down the segment opened again through 198.18.1.2:$PORT ($(awk '/^REOPENED/ {print $3}' "$WORK/peer.out") ms), data verified"
