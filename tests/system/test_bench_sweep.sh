#!/bin/sh
# tern-bench --sweep as a user runs it: a short sweep against a real target
# (two engines on loopback, tcp) writes one CSV and one JSON row per size and
# direction, every number parses and no row has errors; --plot draws an SVG
# (parsed as XML) that names every series, its own and those of --compare;
# a missing gnuplot is a clean error (exit 69).  Without gnuplot the plot
# checks are skipped, visibly (exit 77).
#   usage: test_bench_sweep.sh <source dir> <build dir>
set -eu
py=python3
[ -x /usr/bin/python3 ] && py=/usr/bin/python3
bench=$2/bin/tern-bench
tmp=$(mktemp -d /tmp/tern-sweep-XXXXXX)
tpid=
cleanup() {
    [ -n "$tpid" ] && kill "$tpid" 2>/dev/null && wait "$tpid" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "test_bench_sweep: FAIL: $*" >&2; exit 1; }
unset TERN_CONFIG TERN_PLUGIN_PATH
export TERN_LOG_LEVEL=warn

# ---- options that do not fit are refused before anything runs ---------------
for bad in "--sweep 64K..4K" "--sweep 3K..64K" "--csv x.csv" "--sweep --verify" \
           "--sweep --compare a.json" "--seconds 1" "--sweep --seconds 0" \
           "--sweep --json --csv -"; do
    rc=0
    # shellcheck disable=SC2086
    "$bench" --mode initiator --segment 127.0.0.1:1 $bad >/dev/null 2>"$tmp/err" || rc=$?
    [ "$rc" -eq 64 ] || fail "'$bad': exit $rc, expected 64: $(cat "$tmp/err")"
done
echo "test_bench_sweep: ok: bad option sets exit 64"

# ---- a target and a sweep against it -----------------------------------------
printf 'server_name: 127.0.0.1:0\nmetadata: p2p\ntransports:\n  - name: tcp\n' >"$tmp/tcp.yaml"
"$bench" --mode target --config "$tmp/tcp.yaml" --buffer-size 4M >"$tmp/target.out" \
    2>"$tmp/target.err" &
tpid=$!
seg=
for _ in $(seq 300); do
    seg=$(sed -n 's/^tern-bench target ready: \([^ ]*\).*/\1/p' "$tmp/target.out")
    [ -n "$seg" ] && break
    kill -0 "$tpid" 2>/dev/null || fail "target exited: $(cat "$tmp/target.err")"
    sleep 0.1
done
[ -n "$seg" ] || fail "the target did not come up"

# 4K..64K: 5 sizes x 2 directions x 0.2 s
"$bench" --mode initiator --config "$tmp/tcp.yaml" --segment "$seg" --buffer-size 4M \
    --sweep 4K..64K --seconds 0.2 --label "sweep test" --csv "$tmp/s.csv" \
    --json "$tmp/s.json" >"$tmp/table" 2>"$tmp/progress" ||
    fail "sweep: exit $?: $(cat "$tmp/progress")"
[ "$(grep -c '^sweep .*/10 ' "$tmp/progress")" -eq 10 ] ||
    fail "expected 10 progress lines: $(cat "$tmp/progress")"
"$py" - "$tmp/s.csv" "$tmp/s.json" "$tmp/table" <<'PY' || fail "rows"
import csv, json, sys
want = {(op, 4096 << k) for op in ("write", "read") for k in range(5)}
def check(rows, where):
    got = {}
    for r in rows:
        key = (r["op"], int(r["block_size"]))
        assert key in want and key not in got, (where, key)
        got[key] = r
        gbs, ops = float(r["gb_per_s"]), float(r["ops_per_s"])
        p50, p99, p999 = (float(r[k]) for k in ("lat_p50_us", "lat_p99_us", "lat_p999_us"))
        assert gbs > 0 and ops > 0, (where, r)
        assert abs(gbs * 1e9 / ops - key[1]) < key[1] * 0.01, (where, "GB/s / ops/s != size", r)
        assert 0 < p50 <= p99 <= p999, (where, r)
        assert int(r["errors"]) == 0, (where, r)
        assert int(r["batch_size"]) >= 1, (where, r)
    assert set(got) == want, (where, sorted(want - set(got)))
rows = list(csv.DictReader(open(sys.argv[1])))
assert len(rows) == 10, len(rows)
assert all(r["label"] == "sweep test" and r["transport"] == "tcp" for r in rows), rows[0]
check(rows, "csv")
d = json.load(open(sys.argv[2]))
assert d["label"] == "sweep test" and d["transport"] == "tcp", d
assert len(d["rows"]) == 10
check(d["rows"], "json")
table = [l for l in open(sys.argv[3]) if l.startswith(("write ", "read "))]
assert len(table) == 10, table
PY
echo "test_bench_sweep: ok: 10 CSV and JSON rows, one per size and direction, no errors"

# --json alone: the JSON document on stdout, nothing else there
"$bench" --mode initiator --config "$tmp/tcp.yaml" --segment "$seg" --buffer-size 4M \
    --sweep 4K..8K --seconds 0.1 --json >"$tmp/o.json" 2>"$tmp/err" || fail "--json: $(cat "$tmp/err")"
"$py" -c 'import json,sys; d=json.load(open(sys.argv[1])); assert len(d["rows"]) == 4, d' \
    "$tmp/o.json" || fail "--json on stdout: $(cat "$tmp/o.json")"
"$bench" --mode initiator --config "$tmp/tcp.yaml" --segment "$seg" --buffer-size 4M \
    --sweep 4K..8K --seconds 0.1 --csv - >"$tmp/o.csv" 2>"$tmp/err" || fail "--csv -: $(cat "$tmp/err")"
"$py" -c 'import csv,sys; r=list(csv.DictReader(open(sys.argv[1]))); assert len(r) == 4, r' \
    "$tmp/o.csv" || fail "--csv - on stdout: $(cat "$tmp/o.csv")"
echo "test_bench_sweep: ok: --json without a file, or --csv -, prints that format alone"

# ---- the chart -----------------------------------------------------------------
# A baseline as bench/ scripts write it: a "series" list, rows without "op".
cat >"$tmp/base.json" <<'EOF'
{"bench": "test", "series": [{"label": "baseline copy",
  "rows": [{"block_size": 4096, "gb_per_s": 1.5}, {"block_size": 65536, "gb_per_s": 3.0}]}]}
EOF
rc=0
GNUPLOT=/nonexistent/gnuplot "$bench" --plot "$tmp/x.svg" --compare "$tmp/s.json" \
    >/dev/null 2>"$tmp/err" || rc=$?
[ "$rc" -eq 69 ] && grep -q "needs gnuplot.*apt-get install gnuplot-nox" "$tmp/err" ||
    fail "missing gnuplot: exit $rc: $(cat "$tmp/err")"
[ ! -e "$tmp/x.svg" ] || fail "missing gnuplot left $tmp/x.svg"
echo "test_bench_sweep: ok: a missing gnuplot exits 69: $(cat "$tmp/err")"

if ! command -v gnuplot >/dev/null 2>&1; then
    echo "test_bench_sweep: SKIP: gnuplot is not installed (apt-get install gnuplot-nox):" \
         "the chart checks did not run"
    exit 77
fi
# a sweep that plots itself beside earlier results
"$bench" --mode initiator --config "$tmp/tcp.yaml" --segment "$seg" --buffer-size 4M \
    --sweep 4K..16K --seconds 0.1 --label "second run" --plot "$tmp/chart.svg" \
    --compare "$tmp/s.json" "$tmp/base.json" --title "sweep test chart" >/dev/null 2>"$tmp/err" ||
    fail "--plot: $(cat "$tmp/err")"
# earlier results alone, to PNG
"$bench" --plot "$tmp/chart.png" --compare "$tmp/s.json" "$tmp/base.json" 2>"$tmp/err" ||
    fail "--plot without --mode: $(cat "$tmp/err")"
"$py" - "$tmp/chart.svg" "$tmp/chart.png" <<'PY' || fail "chart"
import sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
assert root.tag == "{http://www.w3.org/2000/svg}svg", root.tag
text = "\n".join("".join(e.itertext()) for e in root.iter())
for name in ("sweep test write", "sweep test read", "second run write", "second run read",
             "baseline copy", "sweep test write p50", "sweep test read p99",
             "sweep test chart", "GB/s"):
    assert name in text, ("not in the SVG", name)
png = open(sys.argv[2], "rb").read()
assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 1000, len(png)
PY
echo "test_bench_sweep: ok: SVG (XML, every series named) and PNG charts"
