#!/usr/bin/env python3
"""tests/system/mooncake/test_mooncake_wire.py PEER_BINARY

tern's target side of Mooncake's TCP data format, driven byte by byte (no
Mooncake needed): starts `tern-test-mooncake-peer target`, reads its
segment descriptor through the handshake daemon the way Mooncake does
(Metadata request), then on the advertised tcp_data_port:
  - format 2 and format 1 WRITE + READ of a valid range work, byte-exact;
  - refused, and memory untouched: a range past the buffer's end, one
    before it, an addr+size that wraps 64 bits, size 0, an unknown opcode
    (format 2 answers the "MCTV" refusal frame, format 1 only closes);
  - the target is still serving afterwards, its guards and the rest of
    its buffer unchanged;
  - with every connection slot taken by idle pooled connections
    (max_server_connections: 4), a new connection is served: the oldest
    idle one is closed for it, the others keep serving.
Also checks what tern publishes for a Mooncake reader: protocol "tcp",
tcp_data_port, tcp_proto_version 2, and the Probe and Notify answers."""
import json
import os
import socket
import struct
import subprocess
import sys
import tempfile

MAGIC = 0x4D435456 << 32
OK, REFUSED = MAGIC | 0, MAGIC | 1


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def hs_request(host, port, typ, body):
    s = socket.create_connection((host, port), timeout=10)
    data = bytes([typ]) + body.encode()
    s.sendall(struct.pack("<Q", len(data)) + data)
    hdr = recv_exact(s, 8)
    n = struct.unpack("<Q", hdr)[0]
    payload = recv_exact(s, n)
    s.close()
    if payload[0] != typ:
        fail("handshake reply of type %d to a type-%d request" % (payload[0], typ))
    return json.loads(payload[1:].decode())


def recv_exact(s, n):
    out = b""
    while len(out) < n:
        chunk = s.recv(n - len(out))
        if not chunk:
            return out
        out += chunk
    return out


def hdr(size, addr, op):
    return struct.pack("<QQB7x", size & (2**64 - 1), addr & (2**64 - 1), op)


def conn(port):
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def closed(s):
    """True when the peer closed (EOF or reset) without sending anything more."""
    try:
        return s.recv(1) == b""
    except (ConnectionResetError, socket.timeout):
        return True


def with_target(peer, body, config=None):
    env = dict(os.environ)
    if config:
        env["TERN_MC_PEER_CONFIG"] = config
    p = subprocess.Popen([peer, "target"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         text=True, env=env)
    try:
        body(p)
    finally:
        try:
            p.stdin.write("EXIT\n")
            p.stdin.flush()
            p.wait(timeout=30)
        except Exception:
            p.kill()


def main():
    peer = sys.argv[1]
    with_target(peer, run)
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as f:
        f.write("server_name: 127.0.0.1:0\nmetadata: p2p\nlog_level: error\n"
                "transports:\n  - name: tcp\n    mooncake_port: 0\n"
                "    max_server_connections: 4\n")
        f.flush()
        with_target(peer, run_pooled, f.name)
    print("PASS: Mooncake-format requests served and refused as documented")


def data_port(p):
    ready, name, addr, length = p.stdout.readline().split()
    if ready != "READY":
        fail("target did not start")
    host, hport = name.rsplit(":", 1)
    desc = hs_request(host, int(hport), 1, "{}\n")
    return desc["tcp_data_port"], int(addr)


def read16(s, addr):
    """A format-2 READ of 16 bytes: True when answered."""
    try:
        s.sendall(hdr(16, addr, 0x80))
        st = recv_exact(s, 8)
        return len(st) == 8 and struct.unpack("<Q", st)[0] == OK and len(recv_exact(s, 16)) == 16
    except (BrokenPipeError, ConnectionResetError, socket.timeout):
        return False


def run_pooled(p):
    port, addr = data_port(p)
    pool = [conn(port) for _ in range(4)]
    for i, s in enumerate(pool):  # each served once, then idle: a pooled connection
        if not read16(s, addr):
            fail("pooled connection %d was not served" % i)
    extra = conn(port)
    if not read16(extra, addr):
        fail("all 4 slots held by idle pooled connections: a new connection was refused")
    if not closed(pool[0]):
        fail("the oldest idle pooled connection was not the one closed for the new one")
    for i, s in enumerate(pool[1:], 1):
        if not read16(s, addr):
            fail("pooled connection %d stopped serving" % i)
    for s in pool + [extra]:
        s.close()
    print("ok  slots full of idle pooled connections: the oldest makes room for a new one")


def ask(p, cmd):
    p.stdin.write(cmd + "\n")
    p.stdin.flush()
    return p.stdout.readline().strip()


def run(p):
    ready, name, addr, length = p.stdout.readline().split()
    if ready != "READY":
        fail("target did not start")
    addr, length = int(addr), int(length)
    host, hport = name.rsplit(":", 1)
    desc = hs_request(host, int(hport), 1, "{}\n")
    for key, want in (("protocol", "tcp"), ("tcp_proto_version", 2)):
        if desc.get(key) != want:
            fail("descriptor %s is %r, a Mooncake reader needs %r" % (key, desc.get(key), want))
    port = desc.get("tcp_data_port")
    if not isinstance(port, int) or not 0 < port < 65536:
        fail("descriptor has no tcp_data_port: %r" % desc)
    b0 = desc["buffers"][0]
    if b0["addr"] != addr or b0["length"] != length or not b0["name"]:
        fail("descriptor's buffer %r is not the registered one" % b0)
    probe = hs_request(host, int(hport), 3, "{}")
    if probe.get("status") != "success":
        fail("Probe answer %r lacks Mooncake's status: success" % probe)
    note = hs_request(host, int(hport), 2, json.dumps({"name": "mc", "notify_msg": "hi"}) + "\n")
    if note.get("notify_msg") != "success":
        fail("Notify in Mooncake's shape answered %r" % note)
    if ask(p, "NOTES") != "NOTE mc hi" or p.stdout.readline().strip() != "NOTES end":
        fail("a Mooncake-shaped notification did not reach tern's queue")
    print("ok  descriptor, Probe and Notify in Mooncake's shapes")

    # valid requests, both formats
    data = bytes((i * 7 + 3) & 0xFF for i in range(4096))
    off = 1 << 20
    for v2 in (0x80, 0):
        s = conn(port)
        s.sendall(hdr(len(data), addr + off, 1 | v2) + data)
        if v2 and struct.unpack("<Q", recv_exact(s, 8))[0] != OK:
            fail("format 2 WRITE not acknowledged")
        s.sendall(hdr(len(data), addr + off, 0 | v2))
        if v2 and struct.unpack("<Q", recv_exact(s, 8))[0] != OK:
            fail("format 2 READ status not ok")
        back = recv_exact(s, len(data))
        if back != data:
            fail("READ back differs from the WRITE (format %d)" % (2 if v2 else 1))
        s.close()
        data = bytes(reversed(data))
    # restore the pattern region we wrote: the target checks the rest below
    print("ok  format 2 and format 1 WRITE + READ, byte-exact")

    junk = b"\xEE" * 8192
    cases = [
        ("WRITE past the buffer's end", len(junk), addr + length - 100, 1),
        ("WRITE before the buffer", len(junk), addr - 4096, 1),
        ("READ past the buffer's end", 200, addr + length - 100, 0),
        ("WRITE whose addr+size wraps 64 bits", 2**64 - 16, addr + 64, 1),
        ("READ whose addr+size wraps 64 bits", 2**64 - addr + 10, addr, 0),
        ("WRITE of 0 bytes", 0, addr, 1),
        ("opcode 5", 16, addr, 5),
    ]
    for what, size, a, op in cases:
        for v2 in (0x80, 0):
            s = conn(port)
            payload = junk if op == 1 and size == len(junk) else b""
            try:
                s.sendall(hdr(size, a, op | v2) + payload)
            except (BrokenPipeError, ConnectionResetError):
                pass
            if v2:
                frame = recv_exact(s, 8)
                if len(frame) != 8 or struct.unpack("<Q", frame)[0] != REFUSED:
                    fail("%s (format 2): expected the refusal frame, got %r" % (what, frame))
            if not closed(s):
                fail("%s (format %d): the connection stayed open" % (what, 2 if v2 else 1))
            s.close()
        print("ok  refused: %s (format 2 frame + close, format 1 close)" % what)
    if ask(p, "CHECK") != "CANARY ok":
        fail("guard bytes around the registered buffer changed")
    # everything but the 4 KiB written above still holds the pattern
    r = ask(p, "PATTERN")
    if r != "PATTERN bad %d" % off:
        fail("buffer changed outside the valid WRITE: %s" % r)
    # still serving
    s = conn(port)
    s.sendall(hdr(16, addr, 0x80))
    if struct.unpack("<Q", recv_exact(s, 8))[0] != OK or len(recv_exact(s, 16)) != 16:
        fail("target stopped serving after the refusals")
    s.close()
    print("ok  guards and the rest of the buffer untouched; target still serving")


if __name__ == "__main__":
    main()
