"""bench/python_bench.py: tern-bench's initiator loop written with the
Python binding, for bench/python_vs_bench.sh.

    python3 python_bench.py --segment H:P [--config F] [--op write|read]
        [--block-size BYTES] [--batch-size N] [--queue-depth N]
        [--buffer-size BYTES] [--duration SEC]

As tern-bench --mode initiator --threads 1: the largest buffer of the
target's descriptor, batches of --batch-size requests of --block-size
bytes walking through both buffers, --queue-depth batches in flight (the
next is submitted before the oldest is waited for).  Prints one JSON
object: gb_per_s, ops_per_s, bytes, seconds.
"""

import argparse
import collections
import json
import mmap
import sys
import time

import tern


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--segment", required=True)
    ap.add_argument("--config")
    ap.add_argument("--op", choices=("write", "read"), default="write")
    ap.add_argument("--block-size", type=int, default=1 << 20)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--queue-depth", type=int, default=2)
    ap.add_argument("--buffer-size", type=int, default=64 << 20)
    ap.add_argument("--duration", type=float, default=5.0)
    a = ap.parse_args()

    with tern.Engine(a.config, server_name="127.0.0.1:0") as eng:
        local = mmap.mmap(-1, a.buffer_size)     # page-aligned, like tern-bench's
        local.write(b"\x5a" * a.buffer_size)     # first touch outside the timed loop
        base = eng.register(local)
        seg = eng.open_segment(a.segment)
        remote = max(seg.descriptor()["buffers"], key=lambda b: b["length"])
        span = min(a.buffer_size, remote["length"])
        per_batch = a.batch_size * a.block_size
        slots = max(1, span // per_batch)
        add = tern.Batch.write if a.op == "write" else tern.Batch.read
        inflight = collections.deque()
        done_bytes = ops = 0
        slot = 0
        t0 = time.monotonic()
        end = t0 + a.duration
        while True:
            now = time.monotonic()
            if now < end:
                b = eng.batch(a.batch_size)
                off = slot * per_batch
                for i in range(a.batch_size):
                    o = off + i * a.block_size
                    add(b, base + o, seg, remote["addr"] + o, a.block_size)
                b.submit()
                inflight.append(b)
                slot = (slot + 1) % slots
            if not inflight:
                break
            if len(inflight) >= a.queue_depth or now >= end:
                b = inflight.popleft()
                b.wait()
                b.close()
                done_bytes += per_batch
                ops += a.batch_size
        secs = time.monotonic() - t0
    json.dump({"gb_per_s": done_bytes / secs / 1e9, "ops_per_s": ops / secs,
               "bytes": done_bytes, "seconds": secs}, sys.stdout)
    print()


if __name__ == "__main__":
    main()
