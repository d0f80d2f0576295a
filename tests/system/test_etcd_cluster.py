#!/usr/bin/env python3
"""tests/system/test_etcd_cluster.py: segment metadata on a real three-member
etcd cluster, and its leader killed in the middle of a run.

  test_etcd_cluster.py BUILD_DIR

Three etcd members (election timeout 1 s) on loopback; every engine's
`metadata` lists all three (etcd://a,b,c).  A target (tern-bench) publishes
its segment; an initiator opens it and moves verified data for RUN_S
seconds.  LEADER_KILL_S into the run the leader is SIGKILLed.  Then:

  1. the initiator's run has no failed request and every byte verified
     (engines already connected do not need the store);
  2. a new segment (a second target, started after the kill) is opened by
     a fresh engine (tern-info --peer) as soon as the cluster elected a new
     leader: the time from the kill to the first successful open is printed
     and must stay under OPEN_BOUND_S;
  3. the killed member, restarted on its data directory, serves (with a
     serializable read: its own copy) every key tern had published.

Skips (exit 77, said on stdout) without etcd.  Nothing leaves 127.0.0.1.

On lab hosts (tests/lab/test_etcd_lab.sh): with TERN_LAB_HOSTS set to
{"m1": [netns, address], "m2": ..., "m3": ..., "t": ..., "i": ...} each
member runs on its own host (network namespace) at that address, the
targets on "t", the initiator and tern-info on "i"; the test's own requests
to a member are made from inside that member's namespace.
"""
import base64
import ctypes
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

RUN_S = 8
LEADER_KILL_S = 2.5
OPEN_BOUND_S = 10.0
PREFIX = "tern/"


def log(msg):
    print(f"test_etcd_cluster: {msg}", flush=True)


def fail(msg):
    log(f"FAIL: {msg}")
    sys.exit(1)


LAB = json.loads(os.environ["TERN_LAB_HOSTS"]) if os.environ.get("TERN_LAB_HOSTS") else None
CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


def host(role):
    """(network namespace or None, address) of a role: m1..m3, t, i."""
    return tuple(LAB[role]) if LAB else (None, "127.0.0.1")


def on(role, cmd):
    """cmd run on the role's host."""
    ns = host(role)[0]
    return ["ip", "netns", "exec", ns] + cmd if ns else cmd


class InNetns:
    """Sockets made inside the block belong to namespace ns (None: here).
    A network namespace is a property of the thread, so the block enters
    it with setns(2) and leaves it the same way."""

    def __init__(self, ns):
        self.ns, self.home = ns, None

    def __enter__(self):
        if not self.ns:
            return self
        self.home = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
        fd = os.open(f"/run/netns/{self.ns}", os.O_RDONLY)
        try:
            if _libc.setns(fd, CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), f"setns into {self.ns}")
        finally:
            os.close(fd)
        return self

    def __exit__(self, *exc):
        if self.home is not None:
            if _libc.setns(self.home, CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), "setns back")
            os.close(self.home)
            self.home = None


def free_ports(n):
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


def b64(s):
    return base64.b64encode(s.encode()).decode()


def post(role, port, path, body, timeout=2.0):
    ns, addr = host(role)
    req = urllib.request.Request(f"http://{addr}:{port}{path}",
                                 data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with InNetns(ns):
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return json.load(r)


class Member:
    def __init__(self, name, client, peer, cluster, root):
        self.name, self.client, self.peer = name, client, peer
        self.addr = host(name)[1]
        self.dir = os.path.join(root, name)
        self.cluster = cluster
        self.proc = None

    def start(self, state):
        c = f"http://{self.addr}:{self.client}"
        p = f"http://{self.addr}:{self.peer}"
        logf = open(self.dir + ".log", "ab")
        self.proc = subprocess.Popen(on(self.name, [
            "etcd", "--name", self.name, "--data-dir", self.dir,
             "--listen-client-urls", c, "--advertise-client-urls", c,
             "--listen-peer-urls", p, "--initial-advertise-peer-urls", p,
             "--initial-cluster", self.cluster, "--initial-cluster-state", state,
             "--initial-cluster-token", f"tern-test-{os.getpid()}",
             "--heartbeat-interval", "100", "--election-timeout", "1000"]),
            stdout=logf, stderr=subprocess.STDOUT)

    def kill(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def status(self):
        return post(self.name, self.client, "/v3/maintenance/status", {}, timeout=1.0)

    def keys(self):
        """Every key under PREFIX with its value, from this member's own copy."""
        r = post(self.name, self.client, "/v3/kv/range",
                 {"key": b64(PREFIX), "range_end": b64(PREFIX[:-1] + chr(ord(PREFIX[-1]) + 1)),
                  "serializable": True}, timeout=2.0)
        return {base64.b64decode(kv["key"]).decode(): kv.get("value", "")
                for kv in r.get("kvs", [])}


def wait_for(what, pred, timeout):
    end = time.time() + timeout
    while time.time() < end:
        try:
            if pred():
                return
        except OSError:
            pass
        time.sleep(0.1)
    fail(f"{what}: not within {timeout} s")


def leader_of(members):
    for m in members:
        try:
            st = m.status()
        except OSError:
            continue
        if st.get("leader") and st["leader"] == st["header"]["member_id"]:
            return m
    return None


def start_target(bench, cfg, root, tag):
    out = open(os.path.join(root, f"{tag}.out"), "w+")
    p = subprocess.Popen(on("t", [bench, "--mode", "target", "--config", cfg,
                                  "--buffer-size", "16M"]),
                         stdout=out, stderr=subprocess.STDOUT)
    seg = None
    end = time.time() + 30
    while time.time() < end and seg is None:
        out.seek(0)
        for line in out:
            if line.startswith("tern-bench target ready: "):
                seg = line.split()[3]
        if p.poll() is not None:
            out.seek(0)
            fail(f"{tag} exited: {out.read()[-2000:]}")
        time.sleep(0.1)
    if seg is None:
        fail(f"{tag} did not come up")
    return p, seg


def main():
    build = sys.argv[1]
    if not shutil.which("etcd"):
        print("test_etcd_cluster: SKIP: etcd not installed (Debian package etcd-server)")
        return 77
    bench = os.path.join(build, "bin", "tern-bench")
    info = os.path.join(build, "bin", "tern-info")
    root = tempfile.mkdtemp(prefix="tern-etcd3-")
    # on lab hosts every member has an address of its own: etcd's ports
    ports = [2379] * 3 + [2380] * 3 if LAB else free_ports(6)
    names = ["m1", "m2", "m3"]
    cluster = ",".join(f"{n}=http://{host(n)[1]}:{ports[3 + i]}" for i, n in enumerate(names))
    members = [Member(n, ports[i], ports[3 + i], cluster, root) for i, n in enumerate(names)]
    procs = []
    try:
        for m in members:
            m.start("new")
        wait_for("a leader", lambda: leader_of(members) is not None, 30)
        endpoints = ",".join(f"{m.addr}:{m.client}" for m in members)
        cfgs = {}
        for role in ("t", "i"):
            cfgs[role] = os.path.join(root, f"engine-{role}.yaml")
            with open(cfgs[role], "w") as f:
                f.write(f"server_name: {host(role)[1]}:0\nmetadata: etcd://{endpoints}\n"
                        "transports:\n  - name: tcp\nlog_level: warn\n")
        where = ("on lab hosts " + ", ".join(f"{r}={a}" for r, (_, a) in sorted(LAB.items()))
                 if LAB else "on loopback")
        log(f"3 members, metadata etcd://{endpoints}, {where}")
        cfg = cfgs["t"]
        t1, seg1 = start_target(bench, cfg, root, "target1")
        procs.append(t1)
        init_out = os.path.join(root, "init.json")
        init = subprocess.Popen(on("i", [bench, "--mode", "initiator", "--config", cfgs["i"],
                                         "--segment", seg1, "--buffer-size", "16M",
                                         "--block-size", "64K", "--batch-size", "8",
                                         "--duration", str(RUN_S), "--verify", "--json"]),
                                stdout=open(init_out, "w"), stderr=subprocess.STDOUT)
        procs.append(init)
        time.sleep(LEADER_KILL_S)
        published = leader_of(members).keys()
        if not any(k.endswith("/" + seg1) for k in published):
            fail(f"the target's segment {seg1} is not in the store: {sorted(published)}")
        victim = leader_of(members)
        victim.kill()
        t_kill = time.time()
        log(f"leader {victim.name} killed {LEADER_KILL_S} s into the run")
        # A segment that did not exist before the kill, opened by a fresh engine.
        t2, seg2 = start_target(bench, cfg, root, "target2")
        procs.append(t2)
        opened, tries, last = None, 0, ""
        while time.time() - t_kill < OPEN_BOUND_S + 5:
            tries += 1
            r = subprocess.run(on("i", [info, "--config", cfgs["i"], "--peer", seg2]),
                               capture_output=True, text=True, timeout=30)
            if r.returncode == 0:
                opened = time.time() - t_kill
                break
            last = (r.stdout + r.stderr).strip().splitlines()[-1:] or [""]
            time.sleep(0.1)
        if opened is None:
            fail(f"new segment {seg2} not opened {OPEN_BOUND_S + 5:.0f} s after the leader was "
                 f"killed ({tries} tries; last: {last[0]})")
        new_leader = leader_of([m for m in members if m is not victim])
        log(f"new segment {seg2} opened {opened:.2f} s after the kill ({tries} tries); new "
            f"leader {new_leader.name if new_leader else '?'}")
        init.wait(timeout=RUN_S + 60)
        with open(init_out) as f:
            lines = [json.loads(l) for l in f if l.startswith("{")]
        if not lines:
            fail(f"the initiator printed no summary: {open(init_out).read()[-2000:]}")
        s = lines[-1]
        log(f"initiator across the kill: {s['bytes']} bytes, {s['ops']} requests, "
            f"{s['errors']} failed, verify {s['verify']}, p99 {s['lat_p99_us']} us")
        if s["errors"] != 0 or s["verify"] != "ok" or s["bytes"] == 0:
            fail(f"transfers failed across the leader kill: {s}")
        if opened > OPEN_BOUND_S:
            fail(f"a new segment opened only {opened:.2f} s after the kill (bound {OPEN_BOUND_S} s)")
        # What the surviving majority holds now, then the restarted member's own copy.
        want = new_leader.keys()
        victim.start("existing")
        t_restart = time.time()
        got = {}

        def caught_up():
            nonlocal got
            got = victim.keys()
            return all(got.get(k) == v for k, v in want.items())
        wait_for(f"restarted {victim.name} holds every key tern published ({len(want)})",
                 caught_up, 30)
        log(f"restarted {victim.name}: all {len(want)} keys tern published ({', '.join(sorted(want))}) "
            f"in its own copy after {time.time() - t_restart:.2f} s")
        log("PASS")
        return 0
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()
        for m in members:
            m.kill()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
