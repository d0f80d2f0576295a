"""The Python surface: configuration forms, documentation, stubs,
notifications, batch life cycle, thread guards."""

import ast
import json
import pydoc
import threading
import time
from pathlib import Path

import pytest

import tern
from conftest import pattern, tcp_config

PKG = Path(tern.__file__).resolve().parent


def test_config_forms(tmp_path):
    p = tmp_path / "e.yaml"
    p.write_text("server_name: 127.0.0.1:0\ntransports:\n  - name: tcp\nlog_level: warn\n")
    for cfg in (p, str(p), p.read_text(), tcp_config(),
                '{"server_name": "127.0.0.1:0", "transports": [{"name": "tcp"}]}'):
        with tern.Engine(cfg) as e:
            host, port = e.server_name.rsplit(":", 1)
            assert host == "127.0.0.1" and int(port) > 0
    with tern.Engine(p, server_name="127.0.0.1:0") as e:
        assert not e.closed
    assert e.closed and repr(e) == "<tern.Engine closed>"


def test_help_is_useful():
    text = pydoc.render_doc(tern.Engine, renderer=pydoc.plaintext)
    for word in ("register(obj, length=None, name=None, location=None",
                 "open_segment(name)", "transfer_sync_write(local, segment, remote",
                 "notify_send(segment, name, msg)", "ConfigError", "context manager",
                 "GIL"):
        assert word in text, f"help(tern.Engine) lacks {word!r}"
    assert "wait(timeout=None)" in pydoc.render_doc(tern.Batch, renderer=pydoc.plaintext)
    assert tern.__doc__ and "Engine" in tern.__doc__


def test_stubs_cover_the_module():
    tree = ast.parse((PKG / "_tern.pyi").read_text())
    stubbed = {n.name for n in tree.body
               if isinstance(n, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))}
    stubbed |= {t.id for n in tree.body if isinstance(n, ast.AnnAssign)
                for t in [n.target] if isinstance(t, ast.Name)}
    public = {n for n in tern.__all__}
    assert public - stubbed == set(), f"not in _tern.pyi: {public - stubbed}"
    for cls in (tern.Engine, tern.Batch, tern.Segment, tern.Registration):
        stub = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls.__name__)
        members = {f.name for f in stub.body
                   if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))}
        real = {m for m in dir(cls) if not m.startswith("_")}
        assert real - members == set(), f"{cls.__name__} members without stubs: {real - members}"
    assert (PKG / "py.typed").exists()


def test_describe_and_schema():
    d = tern.describe_config(config_only=True)
    assert "server_name" in d["config"]
    keys = {k["key"] for k in tern.config_schema()}
    assert {"server_name", "transports", "slice_size"} <= keys


def test_notifications_both_ways(engine, peer):
    seg = engine.open_segment(peer.name)
    assert int(seg) == seg.id and seg.name == peer.name
    assert any(b["addr"] == peer.addr for b in seg.descriptor()["buffers"])
    for i in range(5):
        engine.notify_send(seg, "kv", f"blocks {i}")
    notes = json.loads(peer.cmd("NOTES 5 60"))
    assert [n[1:] for n in notes] == [["kv", f"blocks {i}"] for i in range(5)]
    assert all(n[0] == engine.server_name for n in notes)
    assert peer.cmd(f"SEND {engine.server_name} ready layer0") == "OK"
    deadline = time.monotonic() + 60
    got = None
    while got is None and time.monotonic() < deadline:
        got = engine.notify_recv() or time.sleep(0.01)
    assert got == (peer.name, "ready", "layer0") and got.sender == peer.name
    assert engine.notify_recv() is None


def test_batch_life_cycle(engine, peer):
    buf = bytearray(pattern(1, 8192))
    engine.register(buf, location="cpu:0")
    (reg,) = engine.registrations()
    assert reg.location == "cpu:0" and reg.obj is buf
    b = engine.batch(4)
    i = b.write(memoryview(buf)[:4096], peer.name, peer.addr)
    st = b.state(i)
    assert st.status == tern.Status.WAITING, "a queued request is WAITING"
    with pytest.raises(IndexError):
        b.state(1)
    assert b.submit() == 1 and b.submit() == 0
    b.wait()
    assert b.state(0).status == tern.Status.COMPLETED
    b.close()
    assert b.closed and len(b) == 0
    # __exit__ waits and raises a request's failure
    with pytest.raises(tern.RangeError):
        with engine.batch(1) as b2:
            b2.write(bytearray(16), peer.name, peer.addr)
    assert b2.closed


def test_close_from_another_thread_wakes_the_waiter(engine, big_peer):
    src = bytearray(big_peer.size)
    engine.register(src)
    b = engine.batch(1)
    b.write(src, big_peer.name, big_peer.addr)
    big_peer.stop()
    started = threading.Event()
    errors = []

    def waiter():
        started.set()
        try:
            b.wait(timeout=60)
        except tern.Error as e:
            errors.append(e)

    t = threading.Thread(target=waiter)
    try:
        t.start()
        started.wait()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:    # until the waiter is inside tern
            try:
                b.submit()                    # nothing queued: returns at once
            except tern.BusyError:
                break
            time.sleep(0.001)
        engine.close()                        # wakes it, then closes
        t.join(timeout=10)
        assert not t.is_alive()
    finally:
        t.join()
        big_peer.cont()
    assert errors and isinstance(errors[0], tern.ClosedError), errors
    assert engine.closed and b.closed
