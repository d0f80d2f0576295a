#!/bin/sh
# tern-info as a user runs it: every shipped config gives one parseable JSON
# object; an invalid config exits 2 and a failed required transport exits 1,
# each with the reason on stderr.
#   usage: test_tern_info.sh <source dir> <build dir>
set -eu
# the system python (a pyenv shim first on PATH costs seconds per call)
py=python3
[ -x /usr/bin/python3 ] && py=/usr/bin/python3
src=$1
info=$2/bin/tern-info
tmp=$(mktemp -d /tmp/tern-info-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "test_tern_info: FAIL: $*" >&2; exit 1; }
unset TERN_CONFIG TERN_PLUGIN_PATH TERN_LOG_LEVEL

for y in "$src"/config/*.yaml; do
    rc=0
    "$info" --json --config "$y" >"$tmp/out.json" 2>"$tmp/err" || rc=$?
    [ "$rc" -le 1 ] || fail "$y: exit $rc: $(cat "$tmp/err")"
    "$py" -m json.tool "$tmp/out.json" >/dev/null || fail "$y: output is not JSON"
    "$py" - "$tmp/out.json" "$rc" <<'PY' || fail "$y: keys or ok flag"
import json, sys
d = json.load(open(sys.argv[1]))
for k in ("config", "plugin_dir", "transports", "ok", "error"):
    assert k in d, k
assert d["ok"] == (sys.argv[2] == "0"), (d["ok"], sys.argv[2])
for t in d["transports"]:
    for k in ("name", "required", "outcome", "loaded", "path", "message"):
        assert k in t, (t, k)
PY
    echo "test_tern_info: ok: $y (exit $rc)"
done
"$info" --json --config "$src/config/tern.yaml" | "$py" -m json.tool >/dev/null ||
    fail "tern-info --json --config config/tern.yaml | python3 -m json.tool"

printf 'transports:\n  - name: tcp\n    required: maybe\n' >"$tmp/bad.yaml"
rc=0
"$info" --json --config "$tmp/bad.yaml" >"$tmp/out" 2>"$tmp/err" || rc=$?
[ "$rc" -eq 2 ] || fail "invalid config: exit $rc, expected 2"
grep -q "bad.yaml:3:5: transports\[0\].required: expected true or false" "$tmp/err" || fail "invalid config: $(cat "$tmp/err")"
echo "test_tern_info: ok: invalid config exits 2: $(cat "$tmp/err")"

printf 'transports:\n  - name: nosuch\n    required: true\n' >"$tmp/req.yaml"
rc=0
"$info" --json --config "$tmp/req.yaml" >"$tmp/out.json" 2>"$tmp/err" || rc=$?
[ "$rc" -eq 1 ] || fail "required transport missing: exit $rc, expected 1"
grep -q "required transport 'nosuch': libtern-nosuch.so not found; tried:" "$tmp/err" ||
    fail "required transport missing: $(cat "$tmp/err")"
"$py" -m json.tool "$tmp/out.json" >/dev/null || fail "failed load: the report is not JSON"
echo "test_tern_info: ok: missing required transport exits 1"

# --peer: the transport each peer pair negotiates, for real.  A target that
# speaks only tcp; tern-info with {efa (provider tcp), tcp} must pick tcp,
# and with {efa} alone must say there is no common transport, naming both.
bench=$(dirname "$info")/tern-bench
printf 'server_name: 127.0.0.1:0\ntransports:\n  - name: tcp\n' >"$tmp/tcp.yaml"
printf 'server_name: 127.0.0.1:0\ntransports:\n  - name: efa\n    provider: tcp\n    iface: lo\n  - name: tcp\n' >"$tmp/mix.yaml"
printf 'server_name: 127.0.0.1:0\ntransports:\n  - name: efa\n    provider: tcp\n    iface: lo\n' >"$tmp/efa.yaml"
TERN_LOG_LEVEL=warn "$bench" --mode target --config "$tmp/tcp.yaml" --buffer-size 1M \
    >"$tmp/target.out" 2>"$tmp/target.err" &
tpid=$!
trap 'kill $tpid 2>/dev/null || true; rm -rf "$tmp"' EXIT
seg=
for _ in $(seq 300); do
    seg=$(sed -n 's/^tern-bench target ready: \([^ ]*\).*/\1/p' "$tmp/target.out")
    [ -n "$seg" ] && break
    kill -0 $tpid 2>/dev/null || fail "tcp target exited: $(cat "$tmp/target.err")"
    sleep 0.1
done
[ -n "$seg" ] || fail "tcp target did not come up"
"$info" --json --config "$tmp/mix.yaml" --peer "$seg" >"$tmp/peer.json" 2>"$tmp/err" ||
    fail "--peer $seg: $(cat "$tmp/err")"
"$py" - "$tmp/peer.json" "$seg" <<'PY' || fail "--peer: expected tcp: $(cat "$tmp/peer.json")"
import json, sys
d = json.load(open(sys.argv[1]))
p = d["peers"][0]
assert p["name"] == sys.argv[2] and p["transport"] == "tcp" and p["error"] is None, p
PY
echo "test_tern_info: ok: {efa, tcp} against {tcp} uses tcp"
rc=0
"$info" --config "$tmp/efa.yaml" --peer "$seg" >"$tmp/peer.txt" 2>"$tmp/err" || rc=$?
[ "$rc" -eq 1 ] || fail "--peer with no common transport: exit $rc, expected 1"
grep -q "no transport: .*local \[efa\].*peer \[tcp\]" "$tmp/peer.txt" ||
    fail "--peer with no common transport: $(cat "$tmp/peer.txt")"
echo "test_tern_info: ok: $(grep 'no transport' "$tmp/peer.txt")"
# --server-name names the engine --peer starts: an address of this host
# works, one that is not (TEST-NET-1) cannot be bound and fails that engine.
"$info" --config "$tmp/mix.yaml" --server-name 127.0.0.1:0 --peer "$seg" >"$tmp/peer.txt" \
    2>"$tmp/err" || fail "--server-name 127.0.0.1:0 --peer $seg: $(cat "$tmp/err")"
grep -q "^  $seg: tcp$" "$tmp/peer.txt" || fail "--server-name: $(cat "$tmp/peer.txt")"
rc=0
"$info" --config "$tmp/mix.yaml" --server-name 192.0.2.1:0 --peer "$seg" >"$tmp/peer.txt" \
    2>"$tmp/err" || rc=$?
[ "$rc" -eq 1 ] || fail "--server-name 192.0.2.1:0: exit $rc, expected 1"
grep -q "^  $seg: no transport: engine: " "$tmp/peer.txt" ||
    fail "--server-name 192.0.2.1:0: $(cat "$tmp/peer.txt")"
echo "test_tern_info: ok: --server-name names the --peer engine ($(grep 'no transport' "$tmp/peer.txt" | cut -c1-100))"
kill $tpid; wait $tpid 2>/dev/null || true

"$info" --bogus >/dev/null 2>&1 && fail "unknown argument accepted"

# Files the configuration names, checked as the engine checks them: each bad
# input ends with ONE line on stderr and a non-zero exit.  `timeout 10` is a
# "does not hang" bound: a blocking open() of the FIFO would hit it (exit
# 124), which fails the test.  The seconds each run took are printed.
mkfifo "$tmp/fifo"
mkdir "$tmp/dir"
printf 12345 >"$tmp/s5"
head -c 5000 /dev/zero | tr '\0' k >"$tmp/s5000"
printf '{"cpu:0": [' >"$tmp/bad.json"
# expect_bad <expected exit> <text expected on stderr> <tern-info args...>
expect_bad() {
    want=$1 part=$2
    shift 2
    rc=0
    t0=$(date +%s.%N)
    timeout 10 "$info" "$@" >"$tmp/out" 2>"$tmp/err" || rc=$?
    t1=$(date +%s.%N)
    [ "$rc" -eq "$want" ] || fail "$*: exit $rc, expected $want: $(cat "$tmp/err")"
    [ "$(wc -l <"$tmp/err")" -eq 1 ] || fail "$*: not one line on stderr: $(cat "$tmp/err")"
    grep -qF -- "$part" "$tmp/err" || fail "$*: expected '$part' in: $(cat "$tmp/err")"
    echo "test_tern_info: ok ($(echo "$t1 - $t0" | bc) s, exit $rc): $(cat "$tmp/err")"
}
expect_bad 2 "a FIFO, not a regular file" --config "$tmp/fifo"
expect_bad 2 "a character device, not a regular file" --config /dev/zero
expect_bad 2 "Is a directory" --config "$tmp/dir"
expect_bad 2 "No such file or directory" --config "$tmp/missing.yaml"
for input in fifo:"a FIFO, not a regular file" /dev/zero:"a character device, not a regular file" \
             dir:"Is a directory" missing:"No such file or directory" \
             s5:"the shared secret is 5 bytes" s5000:"the shared secret is 5000 bytes"; do
    f=${input%%:*} part=${input#*:}
    case $f in /*) ;; *) f=$tmp/$f ;; esac
    printf 'auth_secret_file: "%s"\n' "$f" >"$tmp/secret.yaml"
    expect_bad 1 "$part" --json --config "$tmp/secret.yaml"
    "$py" -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["ok"] is False and d["error"], d' \
        "$tmp/out" || fail "secret $f: the report does not say it failed"
done
for input in fifo:"a FIFO, not a regular file" /dev/zero:"a character device, not a regular file" \
             dir:"Is a directory" missing:"No such file or directory" bad.json:"bad.json"; do
    f=${input%%:*} part=${input#*:}
    case $f in /*) ;; *) f=$tmp/$f ;; esac
    printf 'topology: "%s"\n' "$f" >"$tmp/topo.yaml"
    expect_bad 1 "$part" --config "$tmp/topo.yaml"
done

# A plugin that calls tern_strerror() loads in every tool: the tools link
# libtern.so, which exports it (a static copy of the core would hide it and
# dlopen would fail with "undefined symbol: tern_strerror").
so=$2/tests/plugins/libtern-strerror.so
[ -f "$so" ] || fail "$so not built"
printf 'server_name: 127.0.0.1:0\ntransports:\n  - name: strerror\n    path: %s\n    required: true\n  - name: tcp\n' \
    "$so" >"$tmp/strerror.yaml"
"$info" --json --config "$tmp/strerror.yaml" >"$tmp/se.json" 2>"$tmp/err" ||
    fail "tern-info with a plugin calling tern_strerror: $(cat "$tmp/err")"
"$py" -c 'import json,sys; d=json.load(open(sys.argv[1])); t=d["transports"][0]; assert t["name"]=="strerror" and t["loaded"], t' \
    "$tmp/se.json" || fail "tern-info: the strerror plugin did not load"
echo "test_tern_info: ok: tern-info loads a plugin that calls tern_strerror"
TERN_LOG_LEVEL=warn "$bench" --mode target --config "$tmp/strerror.yaml" --buffer-size 1M \
    >"$tmp/se-target.out" 2>"$tmp/se-target.err" &
spid=$!
trap 'kill $spid 2>/dev/null || true; rm -rf "$tmp"' EXIT
up=
for _ in $(seq 300); do
    grep -q '^tern-bench target ready:' "$tmp/se-target.out" && { up=1; break; }
    kill -0 $spid 2>/dev/null || break
    sleep 0.1
done
[ -n "$up" ] || fail "tern-bench with a plugin calling tern_strerror: $(cat "$tmp/se-target.err")"
kill $spid; wait $spid 2>/dev/null || true
echo "test_tern_info: ok: tern-bench loads a plugin that calls tern_strerror"
echo "test_tern_info: all passed"
