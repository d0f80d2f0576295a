"""The application API v2 from Python: named-buffer lookup, notifications
that ride on a batch, completion and notification fds with asyncio,
cancel and reset."""

import asyncio
import gc
import hashlib
import json
import select
import threading
import time

import pytest

import tern
from conftest import pattern

pytestmark = pytest.mark.skipif(not tern.HAS_API_V2,
                                reason="libtern without the application API v2")


def sha(b):
    return hashlib.sha256(bytes(b)).hexdigest()


# ---- named buffers ---------------------------------------------------------

def test_named_buffer_lookup(engine, peer):
    seg = engine.open_segment(peer.name)
    info = engine.buffer(seg, "peer/main")
    assert (info.name, info.address, info.length) == ("peer/main", peer.addr, peer.size)
    assert info.location.startswith("cpu")
    assert info in engine.buffers(seg) and seg.buffer("peer/main") == info
    # registered after the segment was opened: found without reopening
    addr2 = int(peer.cmd("REG kv/layer1 65536"))
    late = seg.buffer("kv/layer1")
    assert (late.address, late.length) == (addr2, 65536)
    assert [b.name for b in seg.buffers()] == sorted(
        ["peer/main", "kv/layer1"], key=lambda n: {"peer/main": peer.addr, "kv/layer1": addr2}[n])
    # the looked-up address is the remote of a request
    src = bytearray(pattern(8, 4096))
    engine.register(src)
    engine.transfer_sync_write(src, seg, info.address + 8192)
    assert peer.cmd("SHA 8192 4096") == sha(src)
    with pytest.raises(tern.NotFoundError, match="kv/nope"):
        seg.buffer("kv/nope")


def test_local_named_registration(engine):
    x = bytearray(8192)
    addr = engine.register(x, name="me/x")
    (reg,) = engine.registrations()
    assert reg.name == "me/x"
    assert [(b.name, b.address) for b in engine.buffers()] == [("me/x", addr)]
    assert engine.buffer(None, "me/x").length == 8192
    with pytest.raises(tern.ExistsError):
        engine.register(bytearray(16), name="me/x")


# ---- notifications with data -------------------------------------------------

def test_notification_arrives_after_its_data(engine, big_peer):
    """Each round writes a fresh pattern (16 MiB in 8 requests) with a
    notification attached; the moment it arrives the peer copies the last
    bytes of the range, then all of it, and compares them with the pattern:
    never before its bytes.  16 MiB takes milliseconds: a notification
    sent with the submit instead of after the last byte is seen first.
    The batch is reused (reset) each round."""
    peer = big_peer
    bs, per, rounds = 2 << 20, 8, 4
    span = bs * per
    src = bytearray(span * rounds)
    engine.register(src)
    seg = engine.open_segment(peer.name)
    b = engine.batch(per)
    for r in range(rounds):
        off = r * span
        src[off:off + span] = pattern(1000 + r, span)
        for i in range(per):
            o = off + i * bs
            b.write(memoryview(src)[o:o + bs], seg, peer.addr + o)
        b.notify(seg, "blk", f"{1000 + r} {off} {span}")
        b.wait()
        b.reset()
    assert peer.cmd(f"CHECKNOTES {rounds} 120") == f"{rounds} 0"
    b.close()


def test_notification_not_sent_when_the_data_fails(engine, peer):
    b = engine.batch(1)
    b.write(bytearray(64), peer.name, peer.addr)        # unregistered: fails
    b.notify(peer.name, "never", "x")
    with pytest.raises(tern.RangeError):
        b.wait()
    assert json.loads(peer.cmd("NOTES 1 1")) == []
    with pytest.raises(tern.InvalidArgumentError, match="queued"):
        engine.batch(1).notify(peer.name, "n", "no request")


def test_large_notification_and_blocking_receive(engine, peer):
    seg = engine.open_segment(peer.name)
    big = "k" * 60000
    engine.notify_send(seg, "big", big)
    notes = json.loads(peer.cmd("NOTES 1 60"))
    assert notes and notes[0][2] == big
    assert engine.notify_recv(timeout=0.2) is None       # waits, then nothing
    assert peer.cmd(f"SEND {engine.server_name} hello there") == "OK"
    n = engine.notify_recv(timeout=60)
    assert n == (peer.name, "hello", "there")
    st = engine.notify_stats()
    assert st["received"] >= 1 and st["delivered"] >= 1 and st["sent"] >= 1


# ---- fds and asyncio --------------------------------------------------------------

def test_fileno_wakes_select(engine, peer):
    src = bytearray(pattern(6, 1 << 20))
    engine.register(src)
    b = engine.batch(1)
    b.write(src, peer.name, peer.addr)
    b.submit()
    deadline = time.monotonic() + 60
    while not b.poll():
        r, _, _ = select.select([b.fileno()], [], [], max(0.0, deadline - time.monotonic()))
        assert r or time.monotonic() < deadline, "the completion fd never became readable"
    assert b.state(0).status == tern.Status.COMPLETED
    b.close()
    assert peer.cmd(f"SHA 0 {1 << 20}") == sha(src)


def test_wait_async_lets_the_loop_run(engine, big_peer):
    src = bytearray(pattern(12, big_peer.size))
    engine.register(src)
    seg = engine.open_segment(big_peer.name)
    threads_before = threading.active_count()

    async def main():
        ticks = 0
        done = asyncio.Event()

        async def ticker():
            nonlocal ticks
            while not done.is_set():
                ticks += 1
                await asyncio.sleep(0.005)

        t = asyncio.create_task(ticker())
        # a stopped peer: the wait ends by its timeout, the loop keeps running
        # (stopped before the submit: 64 MiB can finish before a late stop)
        big_peer.stop()
        b = engine.batch(1)
        b.write(src, seg, big_peer.addr)
        try:
            t0 = time.monotonic()
            with pytest.raises(tern.TimeoutError):
                await b.wait_async(timeout=1.0)
            assert time.monotonic() - t0 >= 0.9
            stalled_ticks = ticks
            assert threading.active_count() == threads_before, "wait_async started a thread"
        finally:
            big_peer.cont()
        await b.wait_async(timeout=120)           # the request went on and completes
        b.close()
        done.set()
        await t
        return stalled_ticks

    stalled_ticks = asyncio.run(main())
    assert stalled_ticks > 20, f"the event loop ran {stalled_ticks} ticks in 1 s of waiting"
    assert big_peer.cmd(f"SHA 0 {big_peer.size}") == sha(src)


def test_wait_async_raises_failures_and_notify_recv_async(engine, peer):
    async def main():
        b = engine.batch(1)
        b.write(bytearray(16), peer.name, peer.addr)     # unregistered
        with pytest.raises(tern.RangeError):
            await b.wait_async()
        assert await engine.notify_recv_async(timeout=0.2) is None
        assert peer.cmd(f"SEND {engine.server_name} layer 7") == "OK"
        return await engine.notify_recv_async(timeout=60)

    assert asyncio.run(main()) == (peer.name, "layer", "7")


# ---- cancel and reset ----------------------------------------------------------------

def test_cancel_then_memory_kept_until_slices_are_back(engine, big_peer):
    # A bytearray cannot be resized while a buffer export of it is held:
    # that shows whether anything still holds its memory.
    arr = bytearray(big_peer.size)
    holder = memoryview(arr)
    engine.register(arr)
    b = engine.batch(1)
    b.write(arr, big_peer.name, big_peer.addr)
    big_peer.stop()
    try:
        b.submit()
        time.sleep(0.2)
        assert b.cancel() == 1
        st = b.state(0)
        assert st.status == tern.Status.CANCELED and st.error == tern.CanceledError.code
        with pytest.raises(tern.CanceledError):
            b.wait()
        if b.inflight:                                 # slices still out to the peer
            with pytest.raises(tern.BusyError):
                b.reset()
        b.close()                                      # parked with arr
        engine.unregister(arr)
        del holder
        with pytest.raises(BufferError):               # still exported: kept alive
            arr.extend(b"x")
    finally:
        big_peer.cont()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        engine.batch(1).close()                        # reaps parked batches
        try:
            arr.extend(b"x")                           # no export left: released
            break
        except BufferError:
            time.sleep(0.05)
    else:
        pytest.fail("the canceled batch never gave its memory back")


def test_reset_reuses_a_batch(engine, peer):
    src = bytearray(pattern(30, 1 << 16))
    engine.register(src)
    b = engine.batch(2)
    for r in range(5):
        src[:8] = r.to_bytes(8, "little")
        b.write(src, peer.name, peer.addr)
        b.write(src, peer.name, peer.addr + (1 << 16))
        b.wait()
        assert len(b) == 2
        b.reset()
        assert len(b) == 0
    assert peer.cmd(f"SHA 65536 {1 << 16}") == sha(src)
    b.close()


def test_canceled_requests_under_load_leave_no_slice(engine, peer):
    src = bytearray(1 << 20)
    engine.register(src)
    for _ in range(20):
        b = engine.batch(16)
        for i in range(16):
            b.write(memoryview(src)[i << 16:(i + 1) << 16], peer.name, peer.addr + (i << 16))
        b.submit()
        b.cancel()
        deadline = time.monotonic() + 60
        while b.inflight and time.monotonic() < deadline:
            time.sleep(0.001)
        assert b.inflight == 0
        b.reset()
        b.close()
    gc.collect()


# ---- memory tern allocates ----------------------------------------------------

@pytest.mark.skipif(not hasattr(tern.Engine, "alloc_memory"),
                    reason="libtern without tern_alloc_memory")
def test_alloc_memory_moves_and_frees(engine, peer):
    import ctypes
    seg = engine.open_segment(peer.name)
    src = engine.alloc_memory(10000, name="me/alloc")
    dst = engine.alloc_memory(10000)
    assert src % 4096 == 0 and dst % 4096 == 0
    view = (ctypes.c_char * 10000).from_address(src)
    assert bytes(view[:16]) == bytes(16), "allocated memory is zeroed"
    data = pattern(5, 10000)
    ctypes.memmove(src, bytes(data), len(data))
    assert engine.buffer(None, "me/alloc").length == 12288  # rounded up to pages
    engine.transfer_sync_write(src, seg, peer.addr + 4096, 10000)
    assert peer.cmd("SHA 4096 10000") == sha(data)
    engine.transfer_sync_read(dst, seg, peer.addr + 4096, 10000)
    assert ctypes.string_at(dst, 10000) == bytes(data)
    engine.free_memory(src)
    with pytest.raises(tern.NotFoundError, match="not returned by tern_alloc_memory"):
        engine.free_memory(src)
    with pytest.raises(tern.InvalidArgumentError):
        engine.alloc_memory(0)
    # dst is left to the engine: freed when it closes
