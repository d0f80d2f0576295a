"""Operating tern from a service: close() from any thread wakes the threads
blocked in the engine, a liveness probe, a notification riding on a batch
seen by poll()/wait_async() while it is still being handed over, and
Segment.buffers() at the cost of one round trip."""

import asyncio
import threading
import time

import pytest

import tern
from conftest import tcp_config

pytestmark = pytest.mark.skipif(not (tern.HAS_API_V2 and hasattr(tern.Engine, "probe")),
                                reason="libtern without tern_engine_close/tern_segment_probe")


def wait_until(cond, seconds, what):
    deadline = time.monotonic() + seconds
    while not cond():
        assert time.monotonic() < deadline, f"{what}: not within {seconds} s"
        time.sleep(0.005)


# ---- close() wakes blocked threads -----------------------------------------

def test_close_from_another_thread_wakes_blocked_threads(big_peer):
    eng = tern.Engine(tcp_config())
    src = bytearray(big_peer.size)
    eng.register(src)
    seg = eng.open_segment(big_peer.name)
    big_peer.stop()                       # 64 MiB cannot land before it stops
    b = eng.batch(1)
    b.write(src, seg, big_peer.addr)
    b.submit()
    results = {}

    def notify_waiter():
        try:
            results["notify"] = eng.notify_recv(timeout=None)
        except tern.Error as e:
            results["notify"] = e

    def batch_waiter():
        try:
            results["batch"] = b.wait()
        except tern.Error as e:
            results["batch"] = e

    threads = [threading.Thread(target=notify_waiter), threading.Thread(target=batch_waiter)]
    try:
        for t in threads:
            t.start()

        def batch_waiter_inside():
            try:
                b.submit()                # nothing queued: returns at once
                return False
            except tern.BusyError:
                return True
        wait_until(batch_waiter_inside, 60, "the batch waiter entered wait()")
        time.sleep(0.2)                   # the notification waiter is inside too
        assert not results, f"returned before close(): {results}"
        t0 = time.monotonic()
        eng.close()                       # was: BusyError, and nothing woke them
        took = time.monotonic() - t0
        for t in threads:
            t.join(timeout=10)
            assert not t.is_alive(), "a thread still blocked after close() returned"
    finally:
        big_peer.cont()
    assert isinstance(results["notify"], tern.ClosedError), results
    assert isinstance(results["batch"], tern.ClosedError), results
    assert "closed" in str(results["notify"]) and "closed" in str(results["batch"])
    assert eng.closed
    # the batch's request was held by the stopped peer: close() cancels and
    # waits for its slices, which the transport gives back within io_timeout
    assert took < 15, f"close() took {took:.1f} s"
    with pytest.raises(tern.ClosedError):
        eng.notify_recv()
    eng.close()                           # idempotent


def test_close_leaves_a_thread_that_is_not_blocked_alone(peer):
    with tern.Engine(tcp_config()) as eng:
        seg = eng.open_segment(peer.name)
        assert eng.notify_recv() is None  # not blocking: as before
        assert eng.notify_recv(timeout=0.05) is None
        src = bytearray(4096)
        eng.register(src)
        eng.transfer_sync_write(src, seg, peer.addr)
    assert eng.closed


# ---- liveness probe --------------------------------------------------------

def test_probe_alive_stopped_and_gone(engine, peer):
    seg = engine.open_segment(peer.name)
    assert engine.probe(peer.name, timeout=5) is True
    assert seg.probe() is True
    peer.stop()
    try:
        t0 = time.monotonic()
        assert engine.probe(seg, timeout=0.3) is False
        assert time.monotonic() - t0 >= 0.25
        assert "no answer" in engine.last_error
    finally:
        peer.cont()
    assert seg.probe(timeout=5) is True
    with pytest.raises(TypeError):
        engine.probe(42)


# ---- a notification riding on a batch, not handed over yet ------------------

def test_poll_is_false_while_the_notification_is_being_handed_over(peer, big_peer):
    # io_timeout_ms: the notification to the stopped peer waits instead of
    # failing after the default 2 s, so the window below is wide
    with tern.Engine(tcp_config(io_timeout_ms=60000)) as eng:
        src = bytearray(4096)
        eng.register(src)
        data = eng.open_segment(peer.name)
        note = eng.open_segment(big_peer.name)
        big_peer.stop()
        try:
            b = eng.batch(1)
            b.write(src, data, peer.addr)
            b.notify(note, "done", "to a stopped peer")
            b.submit()
            wait_until(lambda: b.state(0).status == tern.Status.COMPLETED, 60,
                       "the request completed")
            # every request COMPLETED, the notification not handed over:
            # running, not a timeout
            assert b.poll() is False
            assert b.poll() is False
            with pytest.raises(tern.TimeoutError, match="wait_async"):
                asyncio.run(b.wait_async(timeout=0.2))
            assert b.poll() is False
        finally:
            big_peer.cont()
        asyncio.run(b.wait_async(timeout=60))   # handed over once the peer runs
        assert b.poll() is True
        b.close()
    assert big_peer.cmd("NOTES 1 30") != "[]"


# ---- Segment.buffers(): one round trip -------------------------------------

def test_buffers_costs_a_round_trip_not_the_refetch_limit(engine, peer):
    seg = engine.open_segment(peer.name)
    assert [x.address for x in seg.buffers()] == [peer.addr]
    n = 20
    t0 = time.monotonic()
    for _ in range(n):
        seg.buffers()
    took = time.monotonic() - t0
    # each call waited out the 100 ms refetch limit twice (4 s for 20);
    # a quarter of one limit per call is a wide margin for one round trip
    assert took < n * 0.1 / 4, f"{n} calls took {took:.2f} s"
    # still fetched again: a buffer registered meanwhile is listed at once
    addr2 = int(peer.cmd("REG late 4096"))
    assert addr2 in [x.address for x in seg.buffers()]
