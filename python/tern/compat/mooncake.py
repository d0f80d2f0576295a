"""Mooncake-compatible TransferEngine over tern.

A serving stack written against Mooncake's Python ``TransferEngine``
(``from mooncake.engine import TransferEngine``) switches with one line::

    from tern.compat.mooncake import TransferEngine

Method names, argument order, defaults and return conventions follow
Mooncake's binding: ``initialize`` and transfers return 0 on success and
-1 on failure (the failure is kept in ``last_error`` and logged on the
``tern.compat.mooncake`` logger: at WARNING for ``initialize``, at DEBUG
for the routine -1 of a transfer or lookup, which the caller handles),
addresses are ints, batch ids are ints with 0 meaning failure and -1 a
peer that cannot be reached.  An empty batch is done at once (0, or a
batch id that reports completed).  Differences (python/README.md lists
them all):

- ``transport_hint`` is accepted and ignored: tern picks the transport
  from its configuration and the peer's (the first one both speak).
- ``protocol`` names a tern transport ("tcp", "rdma", "efa", "shm");
  "" uses tern's default list (shm for peers on this host, else tcp).
  Mooncake's GPU protocols ("nvlink", "hip", ...) are refused.
- ``local_hostname`` without a port gets a free port (as Mooncake's P2P
  mode does); read it back with ``get_rpc_port()``.  The segment name
  peers use is ``f"{host}:{get_rpc_port()}"``.
- ``device_name`` (the NIC list) applies to ``rdma`` and ``efa``; as in
  Mooncake, it is ignored for ``tcp``, ``shm`` and the default list.
- ``get_local_topology()`` returns tern's report of this engine's
  configuration (its transports, devices and topology, JSON text), not
  Mooncake's format; ``send_probe()`` opens the peer's segment.
- ``get_first_buffer_address()`` returns the peer's first registered
  buffer still registered: buffers registered through this class carry
  the names ``mooncake/<n>`` in registration order; a peer without them
  answers with its lowest-addressed buffer.
- ``batch_register_memory`` publishes the descriptor once for all
  regions (all or nothing).
- A transfer's deadline is Mooncake's: ``MC_TRANSFER_TIMEOUT`` seconds
  (default 30, at least 5) plus one second per GiB.
- Not provided: CUDA-stream transfers (``*_on_cuda``), EFA warm-up,
  ``get_engine_ptr``.  ``get_engine()`` returns the ``tern.Engine``.
"""

import ctypes
import enum
import itertools
import json
import logging
import mmap
import os
from typing import Dict, List, Optional, Sequence

import tern

__all__ = ["TransferEngine", "TransferOpcode", "TransferNotify"]

SUPPORT_CUDA = False
SUPPORT_HIP = False
SUPPORT_MNNVL = False
SUPPORT_INTRA_NVLINK = False

_log = logging.getLogger(__name__)
_P2P = "P2PHANDSHAKE"
_GPU_PROTOCOLS = ("nvlink", "nvlink_intra", "hip", "xgmi", "cxl", "ascend")
_NIC_PROTOCOLS = ("rdma", "efa")  # where Mooncake applies device_name
_SEQ_PREFIX = "mooncake/"         # names of buffers registered here, in order


class TransferOpcode(enum.IntEnum):
    """Direction of a transfer (Mooncake's TransferEngine.TransferOpcode)."""

    Read = 0
    Write = 1


class TransferNotify:
    """A notification sent with a transfer, or received (get_notifies)."""

    def __init__(self, name: str = "", msg: str = "") -> None:
        self.name = name
        self.msg = msg

    def __repr__(self) -> str:
        return f"TransferNotify(name={self.name!r}, msg={self.msg!r})"


def _server_name(local_hostname: str) -> str:
    host = local_hostname.strip()
    if host.startswith("["):                      # [v6]:port or [v6]
        return host if "]:" in host else host + ":0"
    if host.count(":") == 1:                      # host:port
        return host
    if ":" in host:                               # bare IPv6
        return f"[{host}]:0"
    return host + ":0"


def _metadata(metadata_server: str, metadata_type: str) -> str:
    if metadata_server == _P2P or metadata_type.lower() in ("p2p", _P2P.lower()):
        return "p2p"
    if "://" in metadata_server:
        return metadata_server
    return f"{metadata_type or 'etcd'}://{metadata_server}"


def _transfer_timeout(length: int) -> float:
    env = os.environ.get("MC_TRANSFER_TIMEOUT")
    base = max(5, int(env)) if env and env.strip().isdigit() else 30
    return base + length / float(1 << 30)


def _describe(cfg: Optional[dict]) -> dict:
    """tern.describe_config of a configuration dict (through a memfd: nothing
    is written to disk), or of the default one."""
    if cfg is None:
        return tern.describe_config()
    fd = os.memfd_create("tern-mooncake-config")
    try:
        os.write(fd, json.dumps(cfg).encode())
        return tern.describe_config(f"/proc/self/fd/{fd}")
    finally:
        os.close(fd)


_EMPTY = object()  # an empty batch: nothing to wait for


class TransferEngine:
    """Mooncake's TransferEngine API over a tern.Engine."""

    TransferOpcode = TransferOpcode

    def __init__(self) -> None:
        self._engine: Optional[tern.Engine] = None
        self._managed: Dict[int, mmap.mmap] = {}
        self._async: Dict[int, tern.Batch] = {}
        self._ids = itertools.count(1)
        self._seq = itertools.count(0)
        self._config: Optional[dict] = None
        self._unreachable = False
        self.last_error = ""

    # ---- setup -----------------------------------------------------------

    def initialize(self, local_hostname: str, metadata_server: str, protocol: str,
                   device_name: str, *, config: Optional[dict] = None) -> int:
        """Start the engine; returns 0, or -1 (see last_error).

        metadata_server: "P2PHANDSHAKE", "etcd://h:p", "redis://h:p",
        "http://h:p/path", or "h:p" (etcd, as Mooncake).  device_name: a
        comma-separated NIC allow-list ("" for all).  config (tern only):
        more configuration keys, e.g. {"log_level": "warn"}.
        """
        conn, kind = metadata_server, "etcd"
        if "://" in metadata_server:
            kind, conn = metadata_server.split("://", 1)
        return self.initialize_ext(local_hostname, conn, protocol, device_name, kind,
                                   config=config)

    def initialize_ext(self, local_hostname: str, metadata_server: str, protocol: str,
                       device_name: str, metadata_type: str, *,
                       config: Optional[dict] = None) -> int:
        """initialize() with the metadata type given apart ("etcd", "redis", ...)."""
        if self._engine is not None:
            return self._fail("initialize: already initialized", logging.WARNING)
        proto = (protocol or "").strip().lower()
        if proto in _GPU_PROTOCOLS:
            return self._fail(f"initialize: protocol '{protocol}' is not available in tern "
                              "(tcp, rdma, efa, shm)", logging.WARNING)
        cfg = {"server_name": _server_name(local_hostname),
               "metadata": _metadata(metadata_server, metadata_type)}
        if proto:
            cfg["transports"] = [{"name": proto, "required": True}]
        devices = [d.strip() for d in (device_name or "").split(",") if d.strip()]
        if devices and proto in _NIC_PROTOCOLS:   # Mooncake: tcp ignores the NIC list
            cfg["devices"] = devices
        cfg.update(config or {})
        try:
            self._engine = tern.Engine(cfg)
        except tern.Error as e:
            return self._fail(f"initialize: {e}", logging.WARNING)
        self._config = cfg
        return 0

    def get_engine(self) -> Optional[tern.Engine]:
        """The tern.Engine underneath (tern's own API)."""
        return self._engine

    def get_rpc_port(self) -> int:
        """Port of this engine's handshake daemon (its segment name's port)."""
        return int(self._require().server_name.rsplit(":", 1)[1])

    def close(self) -> None:
        """Stop the engine and free managed buffers (tern only)."""
        for batch in self._async.values():
            if batch is not _EMPTY:
                batch.close()
        self._async.clear()
        if self._engine is not None:
            self._engine.close()
            self._engine = None
        for m in self._managed.values():
            try:
                m.close()
            except BufferError:  # still exported to a parked batch: left to the GC
                pass
        self._managed.clear()

    def __enter__(self) -> "TransferEngine":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---- memory ----------------------------------------------------------

    def _name(self) -> Optional[str]:
        """The next registration's name: its place in registration order."""
        return f"{_SEQ_PREFIX}{next(self._seq)}" if tern.HAS_API_V2 else None

    def register_memory(self, buffer_addr: int, capacity: int, location: str = "*") -> int:
        try:
            self._require().register(buffer_addr, capacity, name=self._name(),
                                     location=None if location in ("", "*") else location)
        except tern.Error as e:
            return self._fail(f"register_memory: {e}")
        return 0

    def unregister_memory(self, buffer_addr: int) -> int:
        try:
            self._require().unregister(buffer_addr)
        except tern.Error as e:
            return self._fail(f"unregister_memory: {e}")
        return 0

    def batch_register_memory(self, buffer_addresses: Sequence[int],
                              capacities: Sequence[int], location: str = "*") -> int:
        if len(buffer_addresses) != len(capacities):
            return self._fail("batch_register_memory: buffer_addresses and capacities "
                              "differ in length")
        eng = self._require()
        if hasattr(eng, "register_many"):          # one descriptor publish for all
            names = [self._name() for _ in buffer_addresses]
            try:
                eng.register_many(list(buffer_addresses), list(capacities), names,
                                  None if location in ("", "*") else location)
            except tern.Error as e:
                return self._fail(f"batch_register_memory: {e}")
            return 0
        done: List[int] = []
        for addr, cap in zip(buffer_addresses, capacities):
            if self.register_memory(addr, cap, location) != 0:
                for a in done:  # all or nothing
                    self._engine.unregister(a)
                return -1
            done.append(addr)
        return 0

    def batch_unregister_memory(self, buffer_addresses: Sequence[int]) -> int:
        rc = 0
        for addr in buffer_addresses:
            rc = self.unregister_memory(addr) or rc
        return rc

    def allocate_managed_buffer(self, length: int) -> int:
        """Page-aligned memory, registered; returns its address (0 on failure)."""
        try:
            m = mmap.mmap(-1, length)
            addr = self._require().register(m, name=self._name())
        except (tern.Error, ValueError, OSError) as e:
            self._fail(f"allocate_managed_buffer: {e}")
            return 0
        self._managed[addr] = m
        return addr

    def free_managed_buffer(self, buffer_addr: int, length: int) -> int:
        m = self._managed.pop(buffer_addr, None)
        if m is None:
            return self._fail(f"free_managed_buffer: 0x{buffer_addr:x} was not allocated "
                              "by allocate_managed_buffer")
        rc = self.unregister_memory(buffer_addr)
        try:
            m.close()
        except BufferError:
            pass
        return rc

    def write_bytes_to_buffer(self, dest_address: int, src_ptr: bytes, length: int) -> int:
        ctypes.memmove(dest_address, src_ptr, length)
        return 0

    def read_bytes_from_buffer(self, source_address: int, length: int) -> bytes:
        return ctypes.string_at(source_address, length)

    # ---- synchronous transfers ---------------------------------------------

    def transfer_sync_write(self, target_hostname: str, buffer: int,
                            peer_buffer_address: int, length: int,
                            transport_hint: str = "") -> int:
        return self.transfer_sync(target_hostname, buffer, peer_buffer_address, length,
                                  TransferOpcode.Write, None, transport_hint)

    def transfer_sync_read(self, target_hostname: str, buffer: int,
                           peer_buffer_address: int, length: int,
                           transport_hint: str = "") -> int:
        return self.transfer_sync(target_hostname, buffer, peer_buffer_address, length,
                                  TransferOpcode.Read, None, transport_hint)

    def transfer_sync(self, target_hostname: str, buffer: int, peer_buffer_address: int,
                      length: int, opcode: TransferOpcode,
                      notify: Optional[TransferNotify] = None,
                      transport_hint: str = "") -> int:
        return self.batch_transfer_sync(target_hostname, [buffer], [peer_buffer_address],
                                        [length], opcode, notify, transport_hint)

    def batch_transfer_sync_write(self, target_hostname: str, buffers: Sequence[int],
                                  peer_buffer_addresses: Sequence[int],
                                  lengths: Sequence[int], transport_hint: str = "") -> int:
        return self.batch_transfer_sync(target_hostname, buffers, peer_buffer_addresses,
                                        lengths, TransferOpcode.Write, None, transport_hint)

    def batch_transfer_sync_read(self, target_hostname: str, buffers: Sequence[int],
                                 peer_buffer_addresses: Sequence[int],
                                 lengths: Sequence[int], transport_hint: str = "") -> int:
        return self.batch_transfer_sync(target_hostname, buffers, peer_buffer_addresses,
                                        lengths, TransferOpcode.Read, None, transport_hint)

    def batch_transfer_sync(self, target_hostname: str, buffers: Sequence[int],
                            peer_buffer_addresses: Sequence[int], lengths: Sequence[int],
                            opcode: TransferOpcode, notify: Optional[TransferNotify] = None,
                            transport_hint: str = "") -> int:
        # The notification rides on the batch where libtern can (delivered
        # after every byte); else it is sent once the batch completed.
        ride = notify if notify is not None and tern.HAS_API_V2 else None
        batch = self._submit(target_hostname, buffers, peer_buffer_addresses, lengths,
                             opcode, "batch_transfer_sync", ride)
        if batch is None:
            return -1
        if batch is _EMPTY:
            return 0
        try:
            with batch:
                pass  # leaving the block waits and raises a failure
            if notify is not None and ride is None:
                self._engine.notify_send(target_hostname, notify.name, notify.msg)
        except tern.Error as e:
            return self._fail(f"batch_transfer_sync to {target_hostname}: {e}")
        return 0

    # ---- asynchronous transfers --------------------------------------------

    def batch_transfer_async_write(self, target_hostname: str, buffers: Sequence[int],
                                   peer_buffer_addresses: Sequence[int],
                                   lengths: Sequence[int], transport_hint: str = "") -> int:
        return self.batch_transfer_async(target_hostname, buffers, peer_buffer_addresses,
                                         lengths, TransferOpcode.Write, transport_hint)

    def batch_transfer_async_read(self, target_hostname: str, buffers: Sequence[int],
                                  peer_buffer_addresses: Sequence[int],
                                  lengths: Sequence[int], transport_hint: str = "") -> int:
        return self.batch_transfer_async(target_hostname, buffers, peer_buffer_addresses,
                                         lengths, TransferOpcode.Read, transport_hint)

    def batch_transfer_async(self, target_hostname: str, buffers: Sequence[int],
                             peer_buffer_addresses: Sequence[int], lengths: Sequence[int],
                             opcode: TransferOpcode, transport_hint: str = "") -> int:
        """Submit and return a batch id (0 on failure) for get_batch_transfer_status."""
        batch = self._submit(target_hostname, buffers, peer_buffer_addresses, lengths,
                             opcode, "batch_transfer_async")
        if batch is None:
            return -1 if self._unreachable else 0
        bid = next(self._ids)
        self._async[bid] = batch
        return bid

    def transfer_submit_write(self, target_hostname: str, buffer: int,
                              peer_buffer_address: int, length: int,
                              transport_hint: str = "") -> int:
        """Submit one write; a batch id for transfer_check_status, -1 on failure."""
        bid = self.batch_transfer_async(target_hostname, [buffer], [peer_buffer_address],
                                        [length], TransferOpcode.Write, transport_hint)
        return bid if bid else -1

    def get_batch_transfer_status(self, batch_ids: Sequence[int]) -> int:
        """Wait for every batch; 0 when all completed, else -1.  Frees them."""
        rc = 0
        for bid in batch_ids:
            if bid not in self._async:
                rc = self._fail(f"get_batch_transfer_status: unknown batch id {bid}")
                continue
            batch = self._async.pop(bid)
            if batch is _EMPTY:
                continue
            try:
                with batch:
                    pass
            except tern.Error as e:
                rc = self._fail(f"batch {bid}: {e}")
        return rc

    def transfer_check_status(self, batch_id: int) -> int:
        """1 completed, 0 in progress, -1 failed, -2 timed out (1 and -1 free it)."""
        if batch_id not in self._async:
            return self._fail(f"transfer_check_status: unknown batch id {batch_id}")
        batch = self._async[batch_id]
        if batch is _EMPTY:
            del self._async[batch_id]
            return 1
        states = [batch.state(i) for i in range(len(batch))]
        if any(s.status in (tern.Status.WAITING, tern.Status.PENDING) for s in states):
            return 0
        if any(s.status == tern.Status.TIMEOUT for s in states):
            return -2
        del self._async[batch_id]
        batch.close()
        failed = [s for s in states if s.status != tern.Status.COMPLETED]
        if failed:
            return self._fail(f"batch {batch_id}: {failed[0].message}")
        return 1

    # ---- peers and notifications --------------------------------------------

    def get_first_buffer_address(self, segment_name: str) -> int:
        """The peer's first registered buffer (0 if none): the lowest
        ``mooncake/<n>`` name, else the lowest address."""
        try:
            seg = self._require().open_segment(segment_name)
            if tern.HAS_API_V2:
                bufs = [(b.name, b.address) for b in seg.buffers()]
            else:
                bufs = [("", int(b["addr"])) for b in seg.descriptor().get("buffers", [])]
        except tern.Error as e:
            self._fail(f"get_first_buffer_address: {e}")
            return 0
        seq = [(int(n[len(_SEQ_PREFIX):]), a) for n, a in bufs
               if n.startswith(_SEQ_PREFIX) and n[len(_SEQ_PREFIX):].isdigit()]
        if seq:
            return min(seq)[1]
        return min(a for _, a in bufs) if bufs else 0

    def get_notifies(self) -> List[TransferNotify]:
        out = []
        while True:
            n = self._require().notify_recv()
            if n is None:
                return out
            out.append(TransferNotify(n.name, n.msg))

    def send_probe(self, peer_server_name: str) -> int:
        try:
            self._require().open_segment(peer_server_name)
        except tern.Error as e:
            return self._fail(f"send_probe: {e}")
        return 0

    def get_local_topology(self, device_name: Optional[str] = None) -> str:
        """tern's report of this engine's transports, devices and topology
        (JSON text; before initialize(), of the default configuration)."""
        doc = _describe(self._config)
        allow = [d for d in (device_name or "").split(",") if d]
        out = []
        for t in doc.get("transports", []):
            devices = [d for d in t.get("devices", []) if not allow or d.get("name") in allow]
            out.append({"transport": t.get("name"), "devices": devices,
                        "topology": t.get("topology")})
        return json.dumps(out)

    # ---- helpers -------------------------------------------------------------

    def _require(self) -> tern.Engine:
        if self._engine is None:
            raise RuntimeError("TransferEngine: call initialize() first")
        return self._engine

    def _fail(self, msg: str, level: int = logging.DEBUG) -> int:
        """A -1 return: the message is kept in last_error; routine ones (a
        peer down, a transfer failed) are logged at DEBUG, as the caller
        handles the -1."""
        self.last_error = msg
        _log.log(level, "%s", msg)
        return -1

    def _submit(self, target, buffers, peers, lengths, opcode, what,
                notify: Optional[TransferNotify] = None) -> Optional[tern.Batch]:
        if not (len(buffers) == len(peers) == len(lengths)):
            self._fail(f"{what}: buffers, peer_buffer_addresses and lengths have "
                       "different sizes")
            return None
        self._unreachable = False
        if not buffers:                      # Mooncake: nothing to do, done at once
            return _EMPTY
        timeout = _transfer_timeout(sum(lengths))
        eng = self._require()
        try:
            seg = eng.open_segment(target)
        except tern.Error as e:
            self._unreachable = True         # Mooncake: openSegment failed -> -1
            self._fail(f"{what} to {target}: {e}")
            return None
        try:
            batch = eng.batch(len(buffers))
            add = batch.write if opcode == TransferOpcode.Write else batch.read
            for local, remote, n in zip(buffers, peers, lengths):
                add(local, seg, remote, n, timeout)
            if notify is not None:
                batch.notify(seg, notify.name, notify.msg)
            batch.submit()
        except tern.Error as e:
            self._fail(f"{what} to {target}: {e}")
            return None
        return batch
