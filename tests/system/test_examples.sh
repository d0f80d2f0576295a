#!/bin/sh
# Run the examples/ pair (kv_decode, then kv_prefill against it) over p2p
# metadata and over a redis-server this script starts on a free loopback
# port; then check that a bad configuration makes each print to stderr and
# exit non-zero.
#   usage: test_examples.sh <build dir>
set -eu
build=$1
tmp=$(mktemp -d /tmp/tern-examples-XXXXXX)
redis_pid=
decode_pid=
cleanup() {
    [ -n "$decode_pid" ] && kill "$decode_pid" 2>/dev/null || true
    [ -n "$redis_pid" ] && kill "$redis_pid" 2>/dev/null || true
    rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "test_examples: FAIL: $*" >&2; exit 1; }
pass() { echo "test_examples: ok: $*"; }
ex=$build/examples

config() { # <file> <metadata>
    printf 'server_name: 127.0.0.1:0\nmetadata: %s\ntransports:\n  - name: tcp\nlog_level: warn\n' \
        "$2" >"$1"
}

run_pair() { # <label> <metadata>
    config "$tmp/d.yaml" "$2"
    config "$tmp/p.yaml" "$2"
    rm -f "$tmp/d.out"
    mkfifo "$tmp/d.out"
    "$ex/kv_decode" "$tmp/d.yaml" >"$tmp/d.out" 2>"$tmp/d.err" &
    decode_pid=$!
    exec 3<"$tmp/d.out"
    read -r ready name <&3 || fail "$1: kv_decode said nothing: $(cat "$tmp/d.err")"
    [ "$ready" = READY ] || fail "$1: kv_decode: $ready $name"
    timeout 120 "$ex/kv_prefill" "$tmp/p.yaml" "$name" >"$tmp/p.log" 2>&1 ||
        fail "$1: kv_prefill exited $?: $(cat "$tmp/p.log")"
    cat <&3 >"$tmp/d.log" || true
    exec 3<&-
    wait "$decode_pid" || fail "$1: kv_decode exited $?: $(cat "$tmp/d.log" "$tmp/d.err")"
    decode_pid=
    grep -q "decode: 64 blocks arrived, 0 bytes wrong" "$tmp/d.log" ||
        fail "$1: $(cat "$tmp/d.log")"
    grep -q "decode: READ back block 0, ok" "$tmp/d.log" || fail "$1: $(cat "$tmp/d.log")"
    grep -q "prefill: decode confirmed" "$tmp/p.log" || fail "$1: $(cat "$tmp/p.log")"
    pass "$1: 64 blocks WRITE+notify, checked at receipt, block 0 READ back"
}

run_pair p2p p2p

if command -v redis-server >/dev/null 2>&1; then
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no >"$tmp/redis.log" 2>&1 &
    redis_pid=$!
    for _ in $(seq 100); do
        redis-cli -p "$port" ping 2>/dev/null | grep -q PONG && break
        sleep 0.1
    done
    run_pair redis "redis://127.0.0.1:$port"
else
    echo "test_examples: redis-server not installed: the redis run is skipped" >&2
fi

# errors: stderr and a non-zero status
if "$ex/kv_decode" "$tmp/missing.yaml" >"$tmp/o" 2>"$tmp/e"; then fail "kv_decode with a missing config exited 0"; fi
[ -s "$tmp/e" ] || fail "kv_decode printed nothing to stderr"
grep -q "missing.yaml" "$tmp/e" || fail "kv_decode's message does not name the file: $(cat "$tmp/e")"
config "$tmp/p.yaml" p2p
if "$ex/kv_prefill" "$tmp/p.yaml" 127.0.0.1:1 >"$tmp/o" 2>"$tmp/e"; then fail "kv_prefill to nobody exited 0"; fi
grep -q "kv_prefill: opening the decode segment failed" "$tmp/e" || fail "kv_prefill: $(cat "$tmp/e")"
pass "errors go to stderr with a non-zero status"
