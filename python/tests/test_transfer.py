"""numpy arrays between two processes over tcp, byte-exact both ways; the
registration keeps the registered object alive."""

import gc
import hashlib
import weakref

import pytest

import tern
from conftest import pattern, tcp_config

np = pytest.importorskip("numpy")


def sha(b):
    return hashlib.sha256(bytes(b)).hexdigest()


def test_numpy_write_then_read_back_byte_exact(engine, peer):
    n = peer.size
    src = np.frombuffer(pattern(7, n), dtype=np.uint8).copy()
    dst = np.zeros(n, dtype=np.uint8)
    engine.register(src)
    engine.register(dst)
    seg = engine.open_segment(peer.name)
    assert seg.transport == "tcp"

    engine.transfer_sync_write(src, seg, peer.addr)
    assert peer.cmd(f"SHA 0 {n}") == sha(src), "the peer's bytes differ from what was written"

    engine.transfer_sync_read(dst, seg, peer.addr)
    assert np.array_equal(src, dst)


def test_numpy_read_pattern_written_by_peer(engine, peer):
    n = peer.size
    assert peer.cmd("FILL 11") == "OK"
    arr = np.zeros(n // 4, dtype=np.float32)      # any dtype: bytes are bytes
    engine.register(arr)
    engine.transfer_sync_read(arr, peer.name, peer.addr)  # segment by name
    assert arr.tobytes() == pattern(11, n)


def test_batch_scattered_blocks_both_ways(engine, peer):
    """64 blocks of 16 KiB into shuffled remote slots, then read back in
    another order into a second array."""
    bs, nblk = 16 << 10, 64
    src = np.frombuffer(pattern(3, bs * nblk), dtype=np.uint8).copy()
    back = np.zeros_like(src)
    engine.register(src)
    engine.register(back)
    seg = engine.open_segment(peer.name)
    rng = np.random.default_rng(5)
    slots = rng.permutation(peer.size // bs)[:nblk]
    with engine.batch(nblk) as b:
        for i, s in enumerate(slots):
            assert b.write(src[i * bs:(i + 1) * bs], seg, peer.addr + int(s) * bs) == i
        assert len(b) == nblk
    for i, s in enumerate(slots):
        assert peer.cmd(f"SHA {int(s) * bs} {bs}") == sha(src[i * bs:(i + 1) * bs]), i
    order = rng.permutation(nblk)
    b = tern.Batch(engine, nblk)
    for i in order:
        b.read(back.ctypes.data + int(i) * bs, seg, peer.addr + int(slots[i]) * bs, bs)
    assert b.submit() == nblk
    b.wait()
    st = b.state(0)
    assert st.status == tern.Status.COMPLETED and st.transferred == bs and st.error == 0
    b.close()
    assert np.array_equal(src, back)


def test_registration_keeps_the_array_alive(engine, peer):
    n = 1 << 20
    assert peer.cmd("FILL 21") == "OK"
    arr = np.zeros(n, dtype=np.uint8)
    ref = weakref.ref(arr)
    addr = engine.register(arr)
    del arr
    gc.collect()
    assert ref() is not None, "the registered array was freed while registered"
    # Still safe: a peer's bytes land in it and it reads back whole.
    engine.transfer_sync_read(addr, peer.name, peer.addr, n)
    (reg,) = engine.registrations()
    assert reg.address == addr and reg.length == n and reg.obj is ref()
    assert bytes(reg.obj) == pattern(21, peer.size)[:n]
    del reg
    engine.unregister(addr)
    gc.collect()
    assert ref() is None, "unregister did not release the array"


def test_batch_keeps_memory_alive_after_unregister(engine, peer):
    """unregister() while a batch still holds requests into the memory:
    the array lives until the batch is closed."""
    arr = np.zeros(1 << 20, dtype=np.uint8)
    ref = weakref.ref(arr)
    engine.register(arr)
    b = engine.batch(1)
    b.read(arr, peer.name, peer.addr)
    b.wait()
    engine.unregister(arr)
    del arr
    gc.collect()
    assert ref() is not None, "a batch's memory was released while the batch was open"
    b.close()
    gc.collect()
    assert ref() is None


def test_int_address_with_owner(engine, peer):
    """The torch-style path: data_ptr() plus the owner kept alive."""
    arr = np.frombuffer(pattern(9, 1 << 16), dtype=np.uint8).copy()
    ref = weakref.ref(arr)
    addr = engine.register(arr.ctypes.data, arr.nbytes, keep=arr)
    del arr
    gc.collect()
    assert ref() is not None
    engine.transfer_sync_write(addr, peer.name, peer.addr, 1 << 16)
    assert peer.cmd(f"SHA 0 {1 << 16}") == sha(pattern(9, 1 << 16))
    engine.unregister(addr)
    gc.collect()
    assert ref() is None


def test_non_contiguous_array_is_refused(engine):
    arr = np.zeros((64, 64), dtype=np.uint8)[:, ::2]
    with pytest.raises(tern.InvalidArgumentError, match="contiguous"):
        engine.register(arr)


def test_two_engines_in_one_process_share_nothing():
    with tern.Engine(tcp_config()) as a, tern.Engine(tcp_config()) as b:
        x = np.arange(1 << 16, dtype=np.uint32)
        y = np.zeros_like(x)
        a.register(x)
        b.register(y)
        a.transfer_sync_write(x, b.server_name, y.ctypes.data)
        assert np.array_equal(x, y)
