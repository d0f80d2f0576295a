"""Every failure is a tern.Error subclass named after tern's code, carrying
tern's message (what, where, what to check)."""

import hashlib
import socket

import pytest

import tern
from conftest import pattern, tcp_config


def closed_port():
    """A loopback port nobody listens on (bound, then closed)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_error_classes_carry_their_code():
    assert issubclass(tern.ConfigError, tern.Error)
    for cls, name in [(tern.InvalidArgumentError, "TERN_ERR_INVAL"),
                      (tern.NotFoundError, "TERN_ERR_NOT_FOUND"),
                      (tern.RangeError, "TERN_ERR_RANGE"),
                      (tern.TimeoutError, "TERN_ERR_TIMEOUT")]:
        assert cls.code_name == name
        assert tern.strerror(cls.code) == name


def test_unregistered_local_memory(engine, peer):
    buf = bytearray(4096)                       # never registered
    with pytest.raises(tern.RangeError) as ei:
        engine.transfer_sync_write(buf, peer.name, peer.addr)
    msg = str(ei.value)
    assert "not registered" in msg and "local range" in msg
    assert ei.value.code == -19 and ei.value.code_name == "TERN_ERR_RANGE"
    # the same through a batch: the request ends INVALID with the message
    b = engine.batch(1)
    i = b.write(buf, peer.name, peer.addr)
    with pytest.raises(tern.RangeError, match="not registered"):
        b.wait()
    st = b.state(i)
    assert st.status == tern.Status.INVALID and "not registered" in st.message
    assert b.error(i) == st.message
    b.close()


def test_remote_range_outside_peer_memory(engine, peer):
    buf = bytearray(8192)
    engine.register(buf)
    with pytest.raises(tern.Error) as ei:
        engine.transfer_sync_write(buf, peer.name, peer.addr + peer.size - 4096)
    assert "remote" in str(ei.value) or "range" in str(ei.value)


def test_unknown_segment(engine):
    port = closed_port()
    with pytest.raises(tern.ConnectError) as ei:
        engine.open_segment(f"127.0.0.1:{port}")
    assert f"127.0.0.1:{port}" in str(ei.value) and "refused" in str(ei.value)
    buf = bytearray(4096)
    engine.register(buf)
    with pytest.raises(tern.Error) as ei:   # an id no open_segment returned
        engine.transfer_sync_write(buf, 4242, 0, 16)
    assert "4242" in str(ei.value) or "segment" in str(ei.value)


def test_bad_config_file_names_file_line_col(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text("server_name: 127.0.0.1:0\n"
                 "transports:\n"
                 "  - name: tcp\n"
                 "slice_size: 12Q\n")
    with pytest.raises(tern.ConfigError) as ei:
        tern.Engine(p)
    msg = str(ei.value)
    assert f"{p}:4:1:" in msg and "slice_size" in msg, msg
    assert ei.value.code_name == "TERN_ERR_CONFIG"
    with pytest.raises(tern.ConfigError, match=r"bad\.yaml:4:1: slice_size"):
        tern.Engine(str(p), server_name="127.0.0.1:0")


def test_bad_config_text_and_dict():
    with pytest.raises(tern.ConfigError, match=r"<yaml>:3:1: retries: expected an integer"):
        tern.Engine("server_name: 127.0.0.1:0\nlog_level: warn\nretries: lots\n")
    with pytest.raises(tern.ConfigError, match="unknown key"):
        tern.Engine(tcp_config(no_such_key=1))
    with pytest.raises(tern.InvalidArgumentError, match="server_name"):
        tern.Engine("server_name: 127.0.0.1:0\n", server_name="127.0.0.1:0")
    with pytest.raises(TypeError):
        tern.Engine(42)


def test_missing_config_file(tmp_path):
    with pytest.raises(tern.Error) as ei:
        tern.Engine(tmp_path / "nope.yaml")
    assert "nope.yaml" in str(ei.value)


def test_register_errors(engine):
    with pytest.raises(tern.InvalidArgumentError, match="writable"):
        engine.register(b"read-only bytes")
    with pytest.raises(tern.InvalidArgumentError, match="length"):
        engine.register(0x1000)                       # an address needs a length
    with pytest.raises(TypeError):
        engine.register(3.5)
    buf = bytearray(8192)
    engine.register(buf)
    with pytest.raises(tern.ExistsError):
        engine.register(memoryview(buf)[4096:])       # overlaps
    with pytest.raises(tern.NotFoundError, match="no buffer registered"):
        engine.unregister(bytearray(16))
    with pytest.raises(tern.InvalidArgumentError, match="length is 0"):
        engine.register(bytearray(0))


def test_closed_engine_and_batch():
    e = tern.Engine(tcp_config())
    b = e.batch(2)
    e.close()
    assert e.closed and b.closed
    with pytest.raises(tern.ClosedError):
        e.register(bytearray(16))
    with pytest.raises(tern.ClosedError):
        b.wait()
    e.close()  # idempotent


def test_batch_full(engine, peer):
    buf = bytearray(4096)
    engine.register(buf)
    b = engine.batch(1)
    b.write(buf, peer.name, peer.addr)
    with pytest.raises(tern.InvalidArgumentError, match="full"):
        b.write(buf, peer.name, peer.addr)
    b.wait()
    b.close()


def test_notify_errors(engine, peer):
    seg = engine.open_segment(peer.name)
    with pytest.raises(tern.InvalidArgumentError, match="msg"):
        engine.notify_send(seg, "n", "x" * (tern.NOTIFY_MAX + 1))
    with pytest.raises(tern.InvalidArgumentError, match="NUL"):
        engine.notify_send(seg, "n", b"a\0b")


def test_names_with_nul_refused(engine, peer):
    """A name with a NUL byte would reach the C API cut at the NUL and name
    another segment or buffer: refused, while the real peer is written and
    read back beside it."""
    for call in (lambda: engine.open_segment(peer.name + "\0other"),
                 lambda: engine.transfer_sync_read(bytearray(16), peer.name + "\0x", peer.addr),
                 lambda: engine.register(bytearray(64), name="a\0b"),
                 lambda: engine.register(bytearray(64), location="cpu\0:0")):
        with pytest.raises(tern.InvalidArgumentError, match="NUL byte"):
            call()
    src = bytearray(pattern(5, 4096))
    engine.register(src)
    seg = engine.open_segment(peer.name)
    with pytest.raises(tern.InvalidArgumentError, match="NUL byte"):
        seg.buffer("x\0y")
    engine.transfer_sync_write(src, seg, peer.addr)
    assert peer.cmd("SHA 0 4096") == hashlib.sha256(bytes(src)).hexdigest()
