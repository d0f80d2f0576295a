"""Engine.stats(): what an engine moved, per engine, transport and peer, as
the C call counts it (tern_engine_stats); and a failure by its error."""

import pytest

import tern
from conftest import pattern, tcp_config


def test_stats_count_what_moved(engine, peer):
    if not hasattr(engine, "stats"):
        pytest.skip("libtern without tern_engine_stats")
    seg = engine.open_segment(peer.name)
    src = bytearray(pattern(3, 65536))
    dst = bytearray(8192)
    engine.register(src)
    engine.register(dst)
    for i in range(3):
        engine.transfer_sync_write(src, seg, peer.addr + i * 65536)
    engine.transfer_sync_read(dst, seg, peer.addr)
    s = engine.stats()
    assert set(s) == {"engine", "transports", "peers"}
    assert set(s["transports"]) == {"tcp"} and set(s["peers"]) == {peer.name}
    for name, st in (("engine", s["engine"]), ("tcp", s["transports"]["tcp"]),
                     ("peer", s["peers"][peer.name])):
        assert st["ops"] == {"read": 1, "write": 3}, (name, st["ops"])
        assert st["bytes"] == {"read": 8192, "write": 3 * 65536}, (name, st["bytes"])
        assert st["failures"] == {"read": 0, "write": 0}, (name, st["failures"])
        assert st["errors"] == {}
        lat = st["latency"]["write"]
        assert lat["count"] == 3 and lat["sum"] > 0
        assert sum(n for _, n in lat["buckets"]) == 3
        assert lat["buckets"][0][0] == pytest.approx(1e-6)
        assert lat["buckets"][-1][0] == float("inf")
        assert st["in_flight"] == 0


def test_stats_count_a_failure_by_error(engine, peer):
    if not hasattr(engine, "stats"):
        pytest.skip("libtern without tern_engine_stats")
    seg = engine.open_segment(peer.name)
    src = bytearray(4096)
    engine.register(src)
    with pytest.raises(tern.Error):
        engine.transfer_sync_write(src, seg, peer.addr + peer.size)  # past the peer's buffer
    st = engine.stats()["peers"][peer.name]
    assert st["failures"]["write"] == 1 and st["ops"]["write"] == 0
    assert sum(st["errors"].values()) == 1, st["errors"]


def test_stats_off():
    with tern.Engine(tcp_config(stats=False)) as e:
        if not hasattr(e, "stats"):
            pytest.skip("libtern without tern_engine_stats")
        s = e.stats()
        assert s["engine"]["ops"] == {"read": 0, "write": 0} and s["peers"] == {}
