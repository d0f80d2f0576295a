"""A tern engine in its own process for the Python tests (tcp only).

    python3 peer.py [buffer bytes]

Registers one bytearray, prints
    READY <server name> <address> <length> <pid>
and answers one command per line on stdin, one line on stdout each:
    FILL <seed>                 fill the buffer with pattern(seed)  -> OK
    SHA <offset> <length>       sha256 hex of that range            -> <hex>
    NOTES <n> <seconds>         wait for n notifications            -> JSON list
    SEND <segment> <name> <msg> send a notification                 -> OK | ERR ...
    REG <name> <bytes>          register another (named) bytearray  -> <address>
    CHECKNOTES <n> <seconds>    wait for n notifications "seed off len"; at
                                receipt of each, compare the buffer's bytes
                                with pattern(seed) -> "<received> <bad>"
    EXIT                        close the engine and exit 0
With the application API v2 the buffer is registered as "peer/main".
"""

import hashlib
import json
import sys
import time

import tern


def pattern(seed: int, n: int) -> bytes:
    """Bytes no two seeds or offsets share by accident (blake2b in counter mode)."""
    out = bytearray()
    i = 0
    while len(out) < n:
        out += hashlib.blake2b(f"{seed}:{i}".encode(), digest_size=64).digest()
        i += 1
    return bytes(out[:n])


def main() -> int:
    size = int(sys.argv[1]) if len(sys.argv) > 1 else 4 << 20
    cfg = {"server_name": "127.0.0.1:0", "metadata": "p2p",
           "transports": [{"name": "tcp"}], "log_level": "warn"}
    with tern.Engine(cfg) as eng:
        buf = bytearray(size)
        addr = eng.register(buf, name="peer/main" if tern.HAS_API_V2 else None)
        extra = []
        print(f"READY {eng.server_name} {addr} {size} {__import__('os').getpid()}", flush=True)
        for line in sys.stdin:
            words = line.split(" ", 3)
            cmd = words[0].strip()
            if cmd == "FILL":
                buf[:] = pattern(int(words[1]), size)
                print("OK", flush=True)
            elif cmd == "SHA":
                off, n = int(words[1]), int(words[2])
                print(hashlib.sha256(buf[off:off + n]).hexdigest(), flush=True)
            elif cmd == "NOTES":
                want, deadline = int(words[1]), time.monotonic() + float(words[2])
                notes = []
                while len(notes) < want and time.monotonic() < deadline:
                    n = eng.notify_recv()
                    if n is None:
                        time.sleep(0.005)
                    else:
                        notes.append(list(n))
                print(json.dumps(notes), flush=True)
            elif cmd == "SEND":
                try:
                    eng.notify_send(words[1], words[2], words[3].rstrip("\n"))
                    print("OK", flush=True)
                except tern.Error as e:
                    print(f"ERR {type(e).__name__} {e}", flush=True)
            elif cmd == "REG":
                b = bytearray(int(words[2]))
                extra.append(b)
                print(eng.register(b, name=words[1]), flush=True)
            elif cmd == "CHECKNOTES":
                want, deadline = int(words[1]), time.monotonic() + float(words[2])
                got = bad = 0
                while got < want and time.monotonic() < deadline:
                    n = eng.notify_recv(timeout=0.05)
                    if n is None:
                        continue
                    seed, off, ln = (int(x) for x in n.msg.split())
                    tail = bytes(buf[off + ln - 4096:off + ln])  # the last bytes, at once
                    seen = bytes(buf[off:off + ln])
                    expect = pattern(seed, ln)
                    got += 1
                    if tail != expect[-4096:] or seen != expect:
                        bad += 1
                print(f"{got} {bad}", flush=True)
            elif cmd == "EXIT":
                break
            else:
                print(f"ERR unknown command {cmd!r}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
