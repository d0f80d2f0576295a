"""Shared fixtures: a tcp-only engine configuration and a peer process."""

import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import tern

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from peer import pattern  # noqa: E402  (shared with the peer process)

# Generous bound for one command of the peer on a loaded machine; a hang
# fails the test instead of stalling the suite.
REPLY_TIMEOUT = 120


def tcp_config(**extra):
    cfg = {"server_name": "127.0.0.1:0", "metadata": "p2p",
           "transports": [{"name": "tcp"}], "log_level": "warn"}
    cfg.update(extra)
    return cfg


class Peer:
    """A tern engine in another process (peer.py), driven line by line."""

    def __init__(self, size):
        self.proc = subprocess.Popen([sys.executable, str(HERE / "peer.py"), str(size)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, env=dict(os.environ))
        words = self._line().split()
        assert words and words[0] == "READY", f"peer did not start: {words}"
        self.name, self.addr, self.size, self.pid = words[1], int(words[2]), int(words[3]), \
            int(words[4])
        self.stopped = False

    def _line(self):
        r, _, _ = select.select([self.proc.stdout], [], [], REPLY_TIMEOUT)
        if not r:
            self.proc.kill()
            raise AssertionError(f"peer gave no answer within {REPLY_TIMEOUT} s")
        line = self.proc.stdout.readline()
        if not line:
            raise AssertionError(f"peer exited with {self.proc.wait()}")
        return line.rstrip("\n")

    def cmd(self, line):
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        return self._line()

    def stop(self):
        """SIGSTOP, and wait until every thread of it stopped: kill() returns
        before a thread running on another core has, and that thread could
        still answer a request sent meanwhile."""
        os.kill(self.pid, signal.SIGSTOP)
        self.stopped = True
        deadline = time.monotonic() + 10
        while not self._all_stopped():
            assert time.monotonic() < deadline, "peer did not stop within 10 s"
            time.sleep(0.002)

    def _all_stopped(self):
        task = f"/proc/{self.pid}/task"
        for tid in os.listdir(task):
            try:
                with open(f"{task}/{tid}/stat") as f:
                    state = f.read().rsplit(")", 1)[1].split()[0]
            except (OSError, IndexError):
                continue
            if state not in ("T", "t"):
                return False
        return True

    def cont(self):
        os.kill(self.pid, signal.SIGCONT)
        self.stopped = False

    def close(self):
        if self.stopped:
            self.cont()
        try:
            self.proc.stdin.write("EXIT\n")
            self.proc.stdin.flush()
            self.proc.wait(timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                f.close()
            except OSError:
                pass


@pytest.fixture
def peer():
    p = Peer(4 << 20)
    yield p
    p.close()


@pytest.fixture
def big_peer():
    p = Peer(64 << 20)
    yield p
    p.close()


@pytest.fixture
def engine():
    with tern.Engine(tcp_config()) as e:
        yield e


__all__ = ["Peer", "pattern", "tcp_config"]
