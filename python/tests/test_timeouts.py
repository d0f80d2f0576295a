"""Every class of timeout (0, a small number of seconds, None) on every call
that waits: Engine.notify_recv, Engine.notify_recv_async, Batch.wait,
Batch.wait_async, Engine.transfer_sync_write/read.

What each promises: 0 does not wait, a small value waits about that long
and no longer than it must, None waits for as long as it takes.  The
waits that must last are held open by a peer process that was stopped
(SIGSTOP) and continues on a timer, or by a notification sent late from
another thread: a call that gives up early or never gives up fails, and a
test never hangs (the timer continues the peer whatever happens)."""

import asyncio
import os
import threading
import time

import pytest

import tern
from conftest import Peer, pattern, tcp_config

pytestmark = pytest.mark.skipif(not tern.HAS_API_V2,
                                reason="libtern without the application API v2")

SMALL = 0.3          # the small timeout, seconds
LATE = 0.6           # a late event comes this long after the call started
SLACK = 10.0         # an upper bound no loaded machine needs; a hang fails
STALL_BOUND = 4.0    # 2 x the default io_timeout_ms: a stopped peer fails a request by then


@pytest.fixture
def pair():
    with tern.Engine(tcp_config()) as a, tern.Engine(tcp_config()) as b:
        yield a, b


def send_later(sender, seg, delay, name="late", msg="m"):
    t = threading.Timer(delay, sender.notify_send, args=(seg, name, msg))
    t.start()
    return t


# ---- notify_recv ----------------------------------------------------------------

def test_notify_recv_timeout_zero_does_not_wait(pair):
    a, b = pair
    seg = b.open_segment(a.server_name)
    t0 = time.monotonic()
    assert a.notify_recv(timeout=0) is None
    assert a.notify_recv() is None, "the default is 0"
    assert time.monotonic() - t0 < 0.2
    b.notify_send(seg, "now", "x")
    deadline = time.monotonic() + SLACK
    n = None
    while n is None and time.monotonic() < deadline:
        n = a.notify_recv(timeout=0)
    assert n == (b.server_name, "now", "x")


def test_notify_recv_small_timeout_waits_about_that_long(pair):
    a, b = pair
    seg = b.open_segment(a.server_name)
    t0 = time.monotonic()
    assert a.notify_recv(timeout=SMALL) is None
    took = time.monotonic() - t0
    assert SMALL * 0.9 <= took < SMALL + SLACK, f"waited {took:.3f} s for {SMALL} s"
    # a notification that comes within the timeout ends the wait at once
    t = send_later(b, seg, 0.1)
    t0 = time.monotonic()
    n = a.notify_recv(timeout=SLACK)
    t.join()
    assert n == (b.server_name, "late", "m")
    assert time.monotonic() - t0 < SLACK


def test_notify_recv_none_waits_for_a_late_notification(pair):
    a, b = pair
    seg = b.open_segment(a.server_name)
    t = send_later(b, seg, LATE)
    t0 = time.monotonic()
    n = a.notify_recv(timeout=None)
    took = time.monotonic() - t0
    t.join()
    assert n == (b.server_name, "late", "m"), "None returned without waiting"
    assert took >= LATE * 0.9


def test_notify_recv_async_zero_small_and_none(pair):
    a, b = pair
    seg = b.open_segment(a.server_name)

    async def main():
        t0 = time.monotonic()
        assert await a.notify_recv_async(timeout=0) is None
        assert time.monotonic() - t0 < 0.2
        t0 = time.monotonic()
        assert await a.notify_recv_async(timeout=SMALL) is None
        assert time.monotonic() - t0 >= SMALL * 0.9
        t = send_later(b, seg, LATE)
        t0 = time.monotonic()
        n = await a.notify_recv_async(timeout=None)
        took = time.monotonic() - t0
        t.join()
        return n, took

    n, took = asyncio.run(main())
    assert n == (b.server_name, "late", "m")
    assert took >= LATE * 0.9


# ---- waits on requests to a stopped peer -------------------------------------------

def wait_stopped(pid):
    """kill(SIGSTOP) returns before every thread of the peer has stopped:
    a thread still running could serve a request sent right after.  Wait
    until /proc shows every thread stopped ("T")."""
    deadline = time.monotonic() + SLACK
    while time.monotonic() < deadline:
        states = []
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{tid}/stat") as f:
                    states.append(f.read().rsplit(")", 1)[1].split()[0])
            except OSError:
                pass
        if states and all(st in ("T", "t") for st in states):
            return
        time.sleep(0.001)
    raise AssertionError(f"peer {pid} did not stop")


class Stopped:
    """A peer process stopped for the length of a with-block, continued on
    a timer after `hold` seconds (and at the block's end whatever happens)."""

    def __init__(self, peer, hold):
        self.peer, self.hold = peer, hold

    def __enter__(self):
        self.peer.stop()
        wait_stopped(self.peer.pid)
        self.timer = threading.Timer(self.hold, self.peer.cont)
        self.timer.start()
        self.t0 = time.monotonic()
        return self

    def __exit__(self, *exc):
        self.timer.cancel()
        if self.peer.stopped:
            self.peer.cont()
        return False


@pytest.fixture
def setup(engine, peer):
    src = bytearray(pattern(31, 64 << 10))
    engine.register(src)
    seg = engine.open_segment(peer.name)
    engine.transfer_sync_write(src, seg, peer.addr, timeout=SLACK)   # connected
    yield engine, peer, seg, src


def test_batch_wait_zero_small_and_none(setup):
    engine, peer, seg, src = setup
    b = engine.batch(1)
    with Stopped(peer, 2 * LATE + SMALL) as s:
        b.write(src, seg, peer.addr)
        with pytest.raises(tern.TimeoutError):
            b.wait(timeout=0)
        assert time.monotonic() - s.t0 < LATE, "timeout=0 waited"
        t0 = time.monotonic()
        with pytest.raises(tern.TimeoutError):
            b.wait(timeout=SMALL)
        assert time.monotonic() - t0 >= SMALL * 0.9
        b.wait(timeout=None)                    # until the peer runs again
        assert time.monotonic() - s.t0 >= 2 * LATE, "None returned while the peer was stopped"
    assert b.state(0).status == tern.Status.COMPLETED
    b.close()


def test_batch_wait_async_zero_small_and_none(setup):
    engine, peer, seg, src = setup

    async def main(b, s):
        with pytest.raises(tern.TimeoutError):
            await b.wait_async(timeout=0)
        assert time.monotonic() - s.t0 < LATE, "timeout=0 waited"
        t0 = time.monotonic()
        with pytest.raises(tern.TimeoutError):
            await b.wait_async(timeout=SMALL)
        assert time.monotonic() - t0 >= SMALL * 0.9
        await b.wait_async(timeout=None)
        return time.monotonic() - s.t0

    b = engine.batch(1)
    with Stopped(peer, 2 * LATE + SMALL) as s:
        b.write(src, seg, peer.addr)
        took = asyncio.run(main(b, s))
    assert took >= 2 * LATE, "None returned while the peer was stopped"
    assert b.state(0).status == tern.Status.COMPLETED
    b.close()


@pytest.mark.parametrize("op", ["write", "read"])
def test_transfer_sync_zero_small_and_none(setup, op):
    engine, peer, seg, src = setup
    call = engine.transfer_sync_write if op == "write" else engine.transfer_sync_read
    for timeout in (0, SMALL):
        with Stopped(peer, SLACK) as s:
            with pytest.raises(tern.TimeoutError):
                call(src, seg, peer.addr, timeout=timeout)
            took = time.monotonic() - s.t0
            # Well inside the stall bound (2 x io_timeout_ms, 4 s with the
            # defaults), which would also end the call with a timeout: a
            # timeout of 0 or SMALL read as "none" must not pass for one.
            assert took < STALL_BOUND / 2, f"timeout={timeout} took {took:.3f} s"
            if timeout:
                assert took >= SMALL * 0.9, f"timeout={timeout} gave up after {took:.3f} s"
    with Stopped(peer, LATE) as s:
        call(src, seg, peer.addr, timeout=None)
        assert time.monotonic() - s.t0 >= LATE * 0.9, "None returned while the peer was stopped"
