"""tern.compat.mooncake.TransferEngine: Mooncake's names and argument order,
doing writes and reads against a peer process."""

import ctypes
import hashlib
import inspect
import json

import pytest

from conftest import pattern
from tern.compat.mooncake import TransferEngine, TransferNotify, TransferOpcode

# Mooncake's pybind signatures (mooncake-integration/transfer_engine):
# method -> parameter names in order.
MOONCAKE_SIGNATURES = {
    "initialize": ["local_hostname", "metadata_server", "protocol", "device_name"],
    "initialize_ext": ["local_hostname", "metadata_server", "protocol", "device_name",
                       "metadata_type"],
    "get_rpc_port": [],
    "allocate_managed_buffer": ["length"],
    "free_managed_buffer": ["buffer_addr", "length"],
    "transfer_sync_write": ["target_hostname", "buffer", "peer_buffer_address", "length",
                            "transport_hint"],
    "transfer_sync_read": ["target_hostname", "buffer", "peer_buffer_address", "length",
                           "transport_hint"],
    "transfer_sync": ["target_hostname", "buffer", "peer_buffer_address", "length", "opcode",
                      "notify", "transport_hint"],
    "batch_transfer_sync_write": ["target_hostname", "buffers", "peer_buffer_addresses",
                                  "lengths", "transport_hint"],
    "batch_transfer_sync_read": ["target_hostname", "buffers", "peer_buffer_addresses",
                                 "lengths", "transport_hint"],
    "batch_transfer_sync": ["target_hostname", "buffers", "peer_buffer_addresses", "lengths",
                            "opcode", "notify", "transport_hint"],
    "batch_transfer_async_write": ["target_hostname", "buffers", "peer_buffer_addresses",
                                   "lengths", "transport_hint"],
    "batch_transfer_async_read": ["target_hostname", "buffers", "peer_buffer_addresses",
                                  "lengths", "transport_hint"],
    "batch_transfer_async": ["target_hostname", "buffers", "peer_buffer_addresses", "lengths",
                             "opcode", "transport_hint"],
    "get_batch_transfer_status": ["batch_ids"],
    "transfer_submit_write": ["target_hostname", "buffer", "peer_buffer_address", "length",
                              "transport_hint"],
    "transfer_check_status": ["batch_id"],
    "write_bytes_to_buffer": ["dest_address", "src_ptr", "length"],
    "read_bytes_from_buffer": ["source_address", "length"],
    "register_memory": ["buffer_addr", "capacity", "location"],
    "unregister_memory": ["buffer_addr"],
    "batch_register_memory": ["buffer_addresses", "capacities", "location"],
    "batch_unregister_memory": ["buffer_addresses"],
    "get_local_topology": ["device_name"],
    "get_first_buffer_address": ["segment_name"],
    "get_notifies": [],
    "send_probe": ["peer_server_name"],
    "get_engine": [],
}


def test_method_names_and_argument_order():
    for name, params in MOONCAKE_SIGNATURES.items():
        fn = getattr(TransferEngine, name, None)
        assert fn is not None, f"TransferEngine.{name} missing"
        got = [p.name for p in inspect.signature(fn).parameters.values()
               if p.kind is p.POSITIONAL_OR_KEYWORD][1:]
        assert got == params, f"{name}: {got} != {params}"
    assert TransferEngine.TransferOpcode.Read == TransferOpcode.Read == 0
    assert TransferOpcode.Write == 1


@pytest.fixture
def mc():
    te = TransferEngine()
    assert te.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "", config={"log_level": "warn"}) == 0
    yield te
    te.close()


def test_write_and_read(mc, peer):
    assert mc.get_rpc_port() > 0
    n = 1 << 20
    buf = mc.allocate_managed_buffer(n)
    assert buf != 0
    data = pattern(17, n)
    assert mc.write_bytes_to_buffer(buf, data, n) == 0
    first = mc.get_first_buffer_address(peer.name)
    assert first == peer.addr

    assert mc.transfer_sync_write(peer.name, buf, first, n) == 0
    assert peer.cmd(f"SHA 0 {n}") == hashlib.sha256(data).hexdigest()

    assert peer.cmd("FILL 4") == "OK"
    assert mc.transfer_sync_read(peer.name, buf, first + 4096, n) == 0
    assert mc.read_bytes_from_buffer(buf, n) == pattern(4, peer.size)[4096:4096 + n]
    assert mc.free_managed_buffer(buf, n) == 0


def test_batch_sync_async_and_status(mc, peer):
    bs, k = 64 << 10, 8
    mem = ctypes.create_string_buffer(pattern(2, bs * k), bs * k)
    base = ctypes.addressof(mem)
    assert mc.register_memory(base, bs * k) == 0
    locals_ = [base + i * bs for i in range(k)]
    remotes = [peer.addr + (k - 1 - i) * bs for i in range(k)]   # reversed slots
    assert mc.batch_transfer_sync_write(peer.name, locals_, remotes, [bs] * k) == 0
    for i in range(k):
        want = hashlib.sha256(pattern(2, bs * k)[i * bs:(i + 1) * bs]).hexdigest()
        assert peer.cmd(f"SHA {(k - 1 - i) * bs} {bs}") == want
    ctypes.memset(base, 0, bs * k)
    bid = mc.batch_transfer_async_read(peer.name, locals_, remotes, [bs] * k)
    assert bid != 0
    assert mc.get_batch_transfer_status([bid]) == 0
    assert mem.raw == pattern(2, bs * k)
    sid = mc.transfer_submit_write(peer.name, base, peer.addr, bs)
    assert sid > 0
    while (rc := mc.transfer_check_status(sid)) == 0:
        pass
    assert rc == 1
    assert mc.unregister_memory(base) == 0


def test_failures_return_minus_one_with_message(mc, peer):
    unregistered = ctypes.create_string_buffer(4096)
    addr = ctypes.addressof(unregistered)
    assert mc.transfer_sync_write(peer.name, addr, peer.addr, 4096) == -1
    assert "not registered" in mc.last_error
    assert mc.batch_transfer_sync_write(peer.name, [addr], [], [1]) == -1
    assert "different sizes" in mc.last_error
    assert mc.unregister_memory(addr) == -1
    assert mc.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == -1  # twice
    other = TransferEngine()
    assert other.initialize("127.0.0.1", "P2PHANDSHAKE", "nvlink", "") == -1
    assert "nvlink" in other.last_error


def test_notify_rides_after_the_transfer(mc, peer):
    n = 4096
    buf = mc.allocate_managed_buffer(n)
    rc = mc.transfer_sync(peer.name, buf, peer.addr, n, TransferOpcode.Write,
                          TransferNotify("kv", "block 0 in"))
    assert rc == 0
    notes = json.loads(peer.cmd("NOTES 1 60"))
    assert notes and notes[0][1:] == ["kv", "block 0 in"]
    me = f"127.0.0.1:{mc.get_rpc_port()}"
    assert peer.cmd(f"SEND {me} back hello there") == "OK"
    got = []
    for _ in range(2000):
        got += mc.get_notifies()
        if got:
            break
        __import__("time").sleep(0.01)
    assert [(g.name, g.msg) for g in got] == [("back", "hello there")]
    assert mc.send_probe(peer.name) == 0
    assert json.loads(mc.get_local_topology())
