"""The engine's log lines in Python's logging (Engine(logger=...)):
records with mapped levels and the engine's name, the debug story of a
peer, lines from engine threads, close() delivering everything, and a
handler that calls into tern from the bridge's thread."""

import logging
import threading

import pytest

import tern
from conftest import tcp_config

pytestmark = pytest.mark.skipif(not tern.HAS_LOG_HOOK,
                                reason="libtern without tern_engine_create_with")


class Keep(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records = []

    def emit(self, record):
        self.records.append(record)

    def find(self, *parts):
        return [r for r in self.records if all(p in r.getMessage() for p in parts)]


@pytest.fixture
def keep():
    """A handler on a fresh logger per test, detached afterwards."""
    handlers = []

    def attach(name):
        lg = logging.getLogger(name)
        h = Keep()
        lg.addHandler(h)
        lg.setLevel(logging.DEBUG)
        lg.propagate = False
        handlers.append((lg, h))
        return lg, h

    yield attach
    for lg, h in handlers:
        lg.removeHandler(h)


def test_records_reach_the_tern_logger(keep, capfd):
    _, h = keep("tern")
    with tern.Engine(tcp_config(log_level="info"), logger=True) as e:
        name = e.server_name
    up = h.find("engine ", " up:")
    assert up, [r.getMessage() for r in h.records]
    assert up[0].levelno == logging.INFO and up[0].name == "tern"
    assert up[0].tern_engine == name and up[0].tern_thread > 0
    loaded = h.find("transport 'tcp'")
    assert loaded and loaded[0].tern_engine == "127.0.0.1:0", "before the port was known"
    assert "up:" not in capfd.readouterr().err, "the lines went to logging, not stderr"


def test_a_logger_passed_by_object_or_name_and_levels_filtered(keep):
    lg, h = keep("tern.test.mine")
    lg.setLevel(logging.WARNING)  # logging's own level decides too
    with tern.Engine(tcp_config(log_level="debug"), logger=lg):
        pass
    assert h.records == [], "info and debug are below WARNING"
    _, h2 = keep("tern.test.byname")
    with tern.Engine(tcp_config(log_level="info"), logger="tern.test.byname"):
        pass
    assert h2.find("engine ", " up:")
    with pytest.raises(TypeError):
        tern.Engine(tcp_config(), logger=42)


def test_debug_story_of_a_peer_with_mapped_levels(keep):
    lg, h = keep("tern.test.story")
    a = tern.Engine(tcp_config(log_level="debug"), logger=lg)
    b = tern.Engine(tcp_config())
    src, dst = bytearray(b"x" * 65536), bytearray(65536)
    a.register(src)
    addr = b.register(dst)
    seg = a.open_segment(b.server_name)
    a.transfer_sync_write(src, seg, addr)
    assert dst == src
    peer = b.server_name
    a.close()
    b.close()
    fetched = h.find(peer, "descriptor fetched", "generation")
    chosen = h.find(peer, "transport tcp chosen")
    up = h.find("endpoint up: tcp", peer)
    assert fetched and chosen and up, [r.getMessage() for r in h.records]
    assert {r.levelno for r in fetched + chosen + up} == {logging.DEBUG}
    # the fetch ran on this thread inside open_segment, the connect on a
    # data path worker: lines of engine threads arrive too
    assert up[0].tern_thread != fetched[0].tern_thread
    assert h.records.index(fetched[0]) < h.records.index(chosen[0]) < h.records.index(up[0])


def test_handler_may_call_into_tern_and_close_waits_for_it(keep):
    """A handler runs on the bridge's thread with the GIL: it may use tern,
    and an engine thread logging meanwhile never waits for it."""
    lg, h = keep("tern.test.slow")
    calls = []

    class Slow(logging.Handler):
        def emit(self, record):
            calls.append(tern.strerror(-9))  # into the extension, GIL held
            threading.Event().wait(0.01)

    lg.addHandler(Slow())
    with tern.Engine(tcp_config(log_level="debug"), logger=lg) as a, \
            tern.Engine(tcp_config()) as b:
        buf = bytearray(4096)
        a.register(buf)
        addr = b.register(bytearray(4096))
        for _ in range(3):
            a.transfer_sync_write(buf, a.open_segment(b.server_name), addr)
    assert len(calls) == len(h.records) > 0, "every line delivered before close() returned"


def test_an_engine_never_closed_at_interpreter_exit():
    """An engine left for the interpreter's shutdown: its lines still reach
    logging (delivered at exit), no hang, no 'Exception ignored' (nothing
    can be imported then)."""
    import os
    import subprocess
    import sys
    code = ("import logging, sys, tern\n"
            "logging.basicConfig(level=logging.INFO, stream=sys.stdout)\n"
            "E = tern.Engine({'server_name': '127.0.0.1:0', 'transports': [{'name': 'tcp'}],"
            " 'log_level': 'info'}, logger=True)\n"
            "print('created', flush=True)\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=120, env=dict(os.environ))
    assert p.returncode == 0, p.stderr
    assert "created" in p.stdout and "up:" in p.stdout, p.stdout
    assert "Exception ignored" not in p.stderr and "Traceback" not in p.stderr, p.stderr
