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
kill $tpid; wait $tpid 2>/dev/null || true

"$info" --bogus >/dev/null 2>&1 && fail "unknown argument accepted"
echo "test_tern_info: all passed"
