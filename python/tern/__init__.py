"""tern: move bytes between registered memory of processes and hosts.

A Python binding of libtern (the C transfer engine): RDMA verbs, EFA, TCP
and same-host shm transports chosen by a YAML configuration.

    import numpy as np, tern

    with tern.Engine({"server_name": "127.0.0.1:0",
                      "transports": [{"name": "tcp"}]}) as eng:
        kv = np.zeros(1 << 20, dtype=np.uint8)
        eng.register(kv)                      # kv stays alive while registered
        seg = eng.open_segment("10.0.0.7:12001")
        eng.transfer_sync_read(kv, seg, remote_addr)

Objects: Engine, Segment (a peer), Batch (requests submitted and waited
for together), Registration.  Every failure raises a subclass of
tern.Error named after tern's error code (ConfigError, NotFoundError,
TimeoutError, ...) carrying tern's message.  Calls that block release the
GIL.  tern.compat.mooncake.TransferEngine mirrors Mooncake's Python API.
See python/README.md and docs/python.md.
"""

from ._tern import (  # noqa: F401  (re-exported)
    HAS_API_V2,
    HAS_LOG_HOOK,
    LOCAL_SEGMENT,
    NOTIFY_MAX,
    AbiError,
    AuthError,
    Batch,
    BusyError,
    CanceledError,
    ClosedError,
    ConfigError,
    ConnectError,
    DeviceError,
    Engine,
    Error,
    ExistsError,
    InvalidArgumentError,
    IoError,
    NoMemoryError,
    NotFoundError,
    NotSupportedError,
    NoTransportError,
    Notification,
    PluginError,
    ProtocolError,
    RangeError,
    RefusedError,
    Registration,
    RequestState,
    Segment,
    Status,
    TimeoutError,
    UnreachableError,
    __version__,
    config_schema,
    describe_config,
    strerror,
)

if HAS_API_V2:  # named buffers, batch notifications, fds, cancel, reset
    from ._tern import BUFFER_NAME_MAX, NOTIFY_QUEUE, BufferInfo  # noqa: F401

__all__ = [
    "Engine", "Segment", "Batch", "Registration", "Status", "RequestState",
    "Notification", "Error", "AbiError", "AuthError", "BusyError",
    "CanceledError", "ClosedError", "ConfigError", "ConnectError",
    "DeviceError", "ExistsError", "InvalidArgumentError", "IoError",
    "NoMemoryError", "NotFoundError", "NotSupportedError", "NoTransportError",
    "PluginError", "ProtocolError", "RangeError", "RefusedError",
    "TimeoutError", "UnreachableError", "describe_config", "config_schema",
    "strerror", "NOTIFY_MAX", "LOCAL_SEGMENT", "HAS_API_V2", "HAS_LOG_HOOK",
    "__version__",
] + (["BufferInfo", "NOTIFY_QUEUE", "BUFFER_NAME_MAX"] if HAS_API_V2 else [])
