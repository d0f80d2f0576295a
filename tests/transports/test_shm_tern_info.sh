#!/bin/sh
# tern-info --peer chooses shm for an engine on the same host: a tern-bench
# target started with the shipped config/tern.yaml (shm, tcp) on a free
# port, and tern-info with NO configuration (the embedded default, the same
# text) must report transport "shm" for it; with a tcp-only configuration,
# "tcp".
#   usage: test_shm_tern_info.sh <source dir> <build dir>
set -eu
py=python3
[ -x /usr/bin/python3 ] && py=/usr/bin/python3
src=$1
info=$2/bin/tern-info
bench=$2/bin/tern-bench
tmp=$(mktemp -d /tmp/tern-shm-info-XXXXXX)
tpid=
trap '[ -n "$tpid" ] && kill $tpid 2>/dev/null; rm -rf "$tmp"' EXIT
fail() { echo "test_shm_tern_info: FAIL: $*" >&2; exit 1; }
unset TERN_CONFIG TERN_PLUGIN_PATH
export TERN_LOG_LEVEL=warn

"$bench" --mode target --config "$src/config/tern.yaml" --server-name 127.0.0.1:0 \
    --buffer-size 1M >"$tmp/target.out" 2>"$tmp/target.err" &
tpid=$!
seg=
for _ in $(seq 300); do
    seg=$(sed -n 's/^tern-bench target ready: \([^ ]*\).*/\1/p' "$tmp/target.out")
    [ -n "$seg" ] && break
    kill -0 $tpid 2>/dev/null || fail "target exited: $(cat "$tmp/target.err")"
    sleep 0.1
done
[ -n "$seg" ] || fail "the target did not come up"

"$info" --json --peer "$seg" >"$tmp/peer.json" 2>"$tmp/err" || fail "--peer $seg: $(cat "$tmp/err")"
"$py" - "$tmp/peer.json" "$seg" <<'PY' || fail "default config: expected shm: $(cat "$tmp/peer.json")"
import json, sys
d = json.load(open(sys.argv[1]))
names = [t["name"] for t in d["transports"]]
assert names[:2] == ["shm", "tcp"], names
assert d["transports"][0]["outcome"] == "loaded", d["transports"][0]
p = d["peers"][0]
assert p["name"] == sys.argv[2] and p["transport"] == "shm" and p["error"] is None, p
PY
echo "test_shm_tern_info: ok: the embedded default reaches $seg over shm"

"$info" --peer "$seg" >"$tmp/peer.txt" 2>"$tmp/err" || fail "--peer (text): $(cat "$tmp/err")"
grep -q "shm" "$tmp/peer.txt" || fail "text output does not name shm: $(cat "$tmp/peer.txt")"

printf 'server_name: 127.0.0.1:0\ntransports:\n  - name: tcp\n' >"$tmp/tcp.yaml"
"$info" --json --config "$tmp/tcp.yaml" --peer "$seg" >"$tmp/tcp.json" 2>"$tmp/err" ||
    fail "--peer with tcp only: $(cat "$tmp/err")"
"$py" - "$tmp/tcp.json" <<'PY' || fail "tcp only: expected tcp: $(cat "$tmp/tcp.json")"
import json, sys
p = json.load(open(sys.argv[1]))["peers"][0]
assert p["transport"] == "tcp" and p["error"] is None, p
PY
echo "test_shm_tern_info: ok: a tcp-only engine reaches $seg over tcp"
