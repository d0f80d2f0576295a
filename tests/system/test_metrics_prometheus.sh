#!/bin/sh
# The Prometheus endpoint (metrics_listen) as a monitoring system sees it:
# a tern-bench initiator moves bytes to a tern-bench target over tcp, its
# /metrics text passes `promtool check metrics`, and a real Prometheus
# server scraping it every second reports the bytes and requests the
# benchmark says it moved (within 1%), per engine, transport and peer.
# Also: another path is 404, an oversized request 431.
# Skips (exit 77) when prometheus or promtool is not installed
# (Debian package `prometheus`, scripts/install-deps.sh).
#   usage: test_metrics_prometheus.sh <build dir>
set -eu
py=python3
[ -x /usr/bin/python3 ] && py=/usr/bin/python3
bench=$1/bin/tern-bench
for t in prometheus promtool; do
    command -v $t >/dev/null 2>&1 || { echo "test_metrics_prometheus: SKIP: $t not installed (Debian package prometheus)"; exit 77; }
done
tmp=$(mktemp -d /tmp/tern-metrics-XXXXXX)
pids=
cleanup() {
    for p in $pids; do kill "$p" 2>/dev/null || true; done
    for p in $pids; do wait "$p" 2>/dev/null || true; done
    rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "test_metrics_prometheus: FAIL: $*" >&2; exit 1; }
unset TERN_CONFIG TERN_PLUGIN_PATH TERN_LOG_LEVEL

# Two free loopback ports: the metrics endpoint and Prometheus' own.
set -- $("$py" -c '
import socket
s = [socket.socket() for _ in range(2)]
for x in s: x.bind(("127.0.0.1", 0))
print(*[x.getsockname()[1] for x in s])')
mport=$1 pport=$2

printf 'server_name: 127.0.0.1:0\ntransports:\n  - name: tcp\nlog_level: warn\n' >"$tmp/target.yaml"
printf 'server_name: 127.0.0.1:0\ntransports:\n  - name: tcp\nlog_level: warn\nmetrics_listen: 127.0.0.1:%s\n' \
    "$mport" >"$tmp/init.yaml"
cat >"$tmp/prom.yml" <<YML
global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: tern
    static_configs:
      - targets: ['127.0.0.1:$mport']
YML
prometheus --config.file="$tmp/prom.yml" --storage.tsdb.path="$tmp/tsdb" \
    --web.listen-address="127.0.0.1:$pport" --log.level=warn >"$tmp/prom.log" 2>&1 &
pids="$pids $!"

"$bench" --mode target --config "$tmp/target.yaml" --buffer-size 4M \
    >"$tmp/target.out" 2>"$tmp/target.err" &
tpid=$!
pids="$pids $tpid"
seg=
for _ in $(seq 300); do
    seg=$(sed -n 's/^tern-bench target ready: \([^ ]*\).*/\1/p' "$tmp/target.out")
    [ -n "$seg" ] && break
    kill -0 $tpid 2>/dev/null || fail "target exited: $(cat "$tmp/target.err")"
    sleep 0.1
done
[ -n "$seg" ] || fail "target did not come up"

# The initiator moves what it can in 2 s, prints its summary and the
# statistics, then keeps its engine (and the endpoint) up for the scrapes.
"$bench" --mode initiator --config "$tmp/init.yaml" --segment "$seg" --buffer-size 4M \
    --block-size 64K --batch-size 8 --duration 2 --json --stats --linger 120 \
    >"$tmp/init.out" 2>"$tmp/init.err" &
ipid=$!
pids="$pids $ipid"
for _ in $(seq 600); do
    grep -q '"stats":"peer"' "$tmp/init.out" 2>/dev/null && break
    kill -0 $ipid 2>/dev/null || fail "initiator exited: $(cat "$tmp/init.err")"
    sleep 0.1
done
grep -q '"stats":"peer"' "$tmp/init.out" || fail "initiator printed no statistics: $(cat "$tmp/init.err")"
echo "test_metrics_prometheus: tern-bench: $(head -1 "$tmp/init.out")"

"$py" - "$mport" "$tmp/metrics.txt" <<'PY' || fail "scraping /metrics by hand"
import socket, sys, urllib.request, urllib.error
port = int(sys.argv[1])
r = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10)
assert r.status == 200, r.status
ct = r.headers["Content-Type"]
assert ct.startswith("text/plain; version=0.0.4"), ct
open(sys.argv[2], "wb").write(r.read())
try:
    urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10)
    raise AssertionError("/ answered 200")
except urllib.error.HTTPError as e:
    assert e.code == 404, e.code
# a request head past the bound: 431, then the connection is closed
s = socket.create_connection(("127.0.0.1", port), timeout=10)
s.sendall(b"GET /metrics HTTP/1.1\r\nX-Pad: " + b"a" * 8192)
reply = s.recv(4096)
assert reply.startswith(b"HTTP/1.1 431"), reply[:80]
print("test_metrics_prometheus: ok: /metrics 200 (text 0.0.4), / 404, oversized request 431")
PY
promtool check metrics <"$tmp/metrics.txt" >"$tmp/promtool.out" 2>&1 ||
    fail "promtool check metrics: $(cat "$tmp/promtool.out")"
echo "test_metrics_prometheus: ok: promtool check metrics accepts $(wc -l <"$tmp/metrics.txt") lines"

# Prometheus' view, once a scrape after the run has landed.
"$py" - "$pport" "$tmp/init.out" "$seg" <<'PY' || fail "Prometheus' counters: $(tail -5 "$tmp/prom.log")"
import json, sys, time, urllib.parse, urllib.request
pport, out, seg = int(sys.argv[1]), sys.argv[2], sys.argv[3]
lines = [json.loads(l) for l in open(out) if l.startswith("{")]
bench = next(l for l in lines if l.get("mode") == "initiator")
assert bench["errors"] == 0 and bench["bytes"] > 0, bench
want = {
    'tern_transfer_bytes_total{op="write"}': bench["bytes"],
    'tern_transfer_requests_total{op="write"}': bench["ops"],
    'tern_transport_transfer_bytes_total{transport="tcp",op="write"}': bench["bytes"],
    'tern_peer_transfer_bytes_total{peer="%s",op="write"}' % seg: bench["bytes"],
    'tern_peer_transfer_requests_total{peer="%s",op="write"}' % seg: bench["ops"],
    'tern_transfer_duration_seconds_count{op="write"}': bench["ops"],
    'tern_transfer_failures_total{op="write"}': 0,
}
def query(q):
    url = f"http://127.0.0.1:{pport}/api/v1/query?" + urllib.parse.urlencode({"query": q})
    d = json.load(urllib.request.urlopen(url, timeout=10))
    assert d["status"] == "success", d
    r = d["data"]["result"]
    return float(r[0]["value"][1]) if r else None
def close(got, exp):
    return got is not None and abs(got - exp) <= 0.01 * exp
deadline = time.time() + 60
while True:
    try:
        got = {q: query(q) for q in want}
    except OSError:
        got = {}
    if got and all(close(got[q], e) for q, e in want.items()):
        break
    if time.time() > deadline:
        raise AssertionError(f"Prometheus has {got}, tern-bench moved {want}")
    time.sleep(0.5)
for q, e in want.items():
    print(f"test_metrics_prometheus: ok: {q} = {got[q]:.0f} (tern-bench: {e})")
PY
echo "test_metrics_prometheus: PASS"
