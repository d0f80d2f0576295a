#!/usr/bin/env python3
"""bench/bench_results.py: the JSON results of the bench/ scripts.

  bench_results.py row ROWS label=L [op=O] block_size=B gb_per_s=X [key=value ...]
      appends one measured row (a JSON line) to ROWS; values that parse as
      numbers are stored as numbers, sizes such as 64K as bytes
  bench_results.py write ROWS OUT [key=value ...]
      writes OUT: {"bench": ..., key: value, ..., "series": [{"label": L,
      "rows": [...]}, ...]}, one series per label in the order first seen

OUT is what `tern-bench --plot FILE --compare OUT ...` draws (tools/bench_plot.c):
one line per (label, op), GB/s against block_size, and p50/p99 latency where
a row has lat_p50_us/lat_p99_us.  Baselines (iperf3, memcpy) leave op out.
Standard library only."""
import json
import sys

UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def value(v):
    if v[-1:] in UNITS and v[:-1].isdigit():
        return int(v[:-1]) * UNITS[v[-1]]
    for conv in (int, float):
        try:
            return conv(v)
        except ValueError:
            pass
    return v


def pairs(args):
    out = {}
    for a in args:
        k, sep, v = a.partition("=")
        if not sep or not k:
            sys.exit("bench_results: expected key=value, got %r" % a)
        out[k] = value(v) if k != "label" else v
    return out


def row(path, args):
    r = pairs(args)
    for k in ("label", "block_size", "gb_per_s"):
        if k not in r:
            sys.exit("bench_results: a row needs %s=" % k)
    if not isinstance(r["gb_per_s"], (int, float)) or r["gb_per_s"] != r["gb_per_s"]:
        return  # a run that failed (its message is on stderr) leaves no row
    with open(path, "a") as f:
        f.write(json.dumps(r) + "\n")


def write(rows_path, out_path, args):
    doc = pairs(args)
    series = {}
    try:
        lines = open(rows_path).read().splitlines()
    except FileNotFoundError:
        lines = []
    for line in lines:
        r = json.loads(line)
        label = r.pop("label")
        series.setdefault(label, []).append(r)
    doc["series"] = [{"label": k, "rows": v} for k, v in series.items()]
    with open(out_path, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")


def main():
    if len(sys.argv) >= 3 and sys.argv[1] == "row":
        row(sys.argv[2], sys.argv[3:])
    elif len(sys.argv) >= 4 and sys.argv[1] == "write":
        write(sys.argv[2], sys.argv[3], sys.argv[4:])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
