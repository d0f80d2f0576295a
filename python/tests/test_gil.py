"""The GIL is released while tern waits: a second Python thread makes
progress during a long wait.

The wait is made long on purpose: the peer process is stopped (SIGSTOP), so
a 64 MiB write cannot finish; the wait ends by its timeout.  A second
thread records when it runs; it must have run inside the window where the
main thread was blocked in tern (it could not while the GIL was held)."""

import threading
import time

import pytest

import tern
from conftest import pattern


class Ticker:
    """A Python thread that records the time at which it runs."""

    def __init__(self):
        self.stamps = []
        self.stop = threading.Event()
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def run(self):
        while not self.stop.is_set():
            self.stamps.append(time.monotonic())
            sum(range(200))                   # pure Python work, holds the GIL

    def ran_between(self, a, b):
        return sum(1 for s in self.stamps if a < s < b)

    def close(self):
        self.stop.set()
        self.t.join()


def blocked_window(fn):
    """Run fn (expected to raise tern.TimeoutError); (start, end) of the call."""
    t0 = time.monotonic()
    with pytest.raises(tern.TimeoutError):
        fn()
    return t0, time.monotonic()


def test_batch_wait_releases_the_gil(engine, big_peer):
    n = big_peer.size
    src = bytearray(pattern(5, n))
    engine.register(src)
    seg = engine.open_segment(big_peer.name)
    b = engine.batch(1)
    b.write(src, seg, big_peer.addr)
    big_peer.stop()
    ticker = Ticker()
    try:
        b.submit()
        t0, t1 = blocked_window(lambda: b.wait(timeout=1.5))
    finally:
        ticker.close()
        big_peer.cont()
    assert t1 - t0 >= 1.4
    ran = ticker.ran_between(t0 + 0.3, t1 - 0.2)
    assert ran > 10, f"the second thread ran {ran} times while tern waited: GIL held?"
    # the request went on after the wait timed out, and completes
    b.wait()
    b.close()
    import hashlib
    assert big_peer.cmd(f"SHA 0 {n}") == hashlib.sha256(src).hexdigest()


def test_transfer_sync_releases_the_gil(engine, big_peer):
    n = big_peer.size
    src = bytearray(n)
    engine.register(src)
    seg = engine.open_segment(big_peer.name)
    big_peer.stop()
    ticker = Ticker()
    try:
        t0, t1 = blocked_window(
            lambda: engine.transfer_sync_write(src, seg, big_peer.addr, timeout=1.5))
    finally:
        ticker.close()
        big_peer.cont()
    ran = ticker.ran_between(t0 + 0.3, t1 - 0.2)
    assert ran > 10, f"the second thread ran {ran} times during transfer_sync: GIL held?"
    # the timed-out batch is parked with src; the engine still works
    engine.transfer_sync_write(src, seg, big_peer.addr, 4096)
