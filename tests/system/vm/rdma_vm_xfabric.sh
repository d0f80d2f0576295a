#!/bin/sh
# One cluster, several fabrics, INSIDE the Soft-RoCE guest (CTest
# rdma_vm_xfabric, tests/system/vm/vm.cmake):
#   tests/system/vm/run-in-vm.sh tests/system/vm/rdma_vm_xfabric.sh BUILD_DIR
#
# Five hosts, one configuration file (xfabric.yaml here: rdma, efa, tcp,
# each optional), each host passing its own address with --server-name:
#   a1 10.1.0.1, a2 10.1.0.2  cloud A: Soft-RoCE (rxeA) + tcp
#   b1 10.2.0.1, b2 10.2.0.2  cloud B: efa over libfabric's tcp provider on
#                             the interface efa0 + tcp; namespaces nsb1, nsb2
#   c  10.3.0.1               tcp only; namespace nsc
# Layout:
#
#   [nsb1 efa0]--pb1-+                                  +--[a1, a2: rxeA on the
#                    [nsgwb] wanB ==netem== wanA [initial ns]   dummy cloudA0]
#   [nsb2 efa0]--pb2-+      (20 ms each way)            +--hc -- c0 [nsc]
#
# Cloud A's two hosts are processes of the guest's INITIAL namespace that
# share one rxe device.  The Debian 12 kernel's rdma_rxe (6.1) opens its UDP
# socket (port 4791) in the initial namespace only and routes there (the
# script prints the sockets it sees); tried in this guest with
# ibv_rc_pingpong: rxe devices on the two ends of a veth pair in two
# namespaces fail the first send (local QP operation error), and two rxe
# devices on dummy netdevs of the initial namespace time out (likely: a
# local address is routed through the loopback device, which has no rxe).
# Only QPs on one rxe device reach each other here.
# The RDMA devices are kept in the initial namespace (`rdma system set
# netns exclusive`), so the hosts in namespaces find none and skip rdma.
# Cloud B's "EFA NIC" is its host's interface named efa0 (the config's
# `iface: efa0`); elsewhere the efa transport finds no device and skips.
# The inter-cloud link (wanA-wanB) is delayed 20 ms each way with netem;
# the tcp-only host sits on cloud A's side.
#
# Checks: ping across the link (>= 40 ms round trip) and inside cloud B
# (< 20 ms); every host's tern-info --peer names the transport of each of
# its four peers; every ordered pair of hosts moves data
# (tern-test-xfabric-peer, rdma_vm_xfabric_peer.c): WRITE, READ back and
# READ of the peer's own data, byte-exact, over the expected transport:
# rdma inside A, efa inside B, tcp otherwise; each engine then checks what
# the others wrote into it and exits 0.  Prints a matrix.  The guest has no
# network card: all traffic stays inside it.
# TERN_XFABRIC_ORDER=parallel: all initiators at once (default: one host
# after the other).  Engine a1 closes each segment it opened after its pair
# (TERN_XFABRIC_CLOSE_EACH=1: every engine does; 0: none), so a2 then opens
# a1 with a stale rdma endpoint in hand (README.md).
# Exit 0 when everything passed, 77 (with the reason) when the guest kernel
# or the build cannot run it, 1 otherwise.
set -eu
B=${1:?usage: rdma_vm_xfabric.sh BUILD_DIR}
here=$(cd "$(dirname "$0")" && pwd)
CFG=$here/xfabric.yaml
W=/tmp/xfabric
rm -rf $W
mkdir -p $W
HOSTS="a1 a2 b1 b2 c"
t0=$(cut -d' ' -f1 /proc/uptime)

skip() { echo "rdma_vm_xfabric: SKIP: $*"; exit 77; }
die() { echo "rdma_vm_xfabric: FAIL: $*"; exit 1; }

PEER=$B/bin/tern-test-xfabric-peer
for f in bin/tern-test-xfabric-peer bin/tern-info lib/tern/libtern-rdma.so lib/tern/libtern-efa.so \
         lib/tern/libtern-tcp.so; do
  [ -e "$B/$f" ] || skip "$B/$f was not built (rdma needs libibverbs-dev, efa libfabric-dev)"
done
for t in ip tc rdma busybox; do
  command -v $t >/dev/null || skip "$t not found in the guest"
done

addr() { case $1 in a1) echo 10.1.0.1 ;; a2) echo 10.1.0.2 ;; b1) echo 10.2.0.1 ;;
                    b2) echo 10.2.0.2 ;; c) echo 10.3.0.1 ;; esac; }
# Each host's handshake port.  a1 and a2 share the initial namespace, and a
# daemon also listens on the host's other addresses, same port
# (core/control/server.c, listen_on_others): on one port, whichever of them
# starts first takes the other's address and the second cannot listen.
port() { case $1 in a2) echo 17002 ;; *) echo 17001 ;; esac; }
ep() { echo "$(addr "$1"):$(port "$1")"; }
# Which engines close each segment after its pair: by default a1 only, so
# one run covers both ways: a2 then opens a1, whose side of their rdma
# endpoints is gone (a2 must connect afresh), while the other engines keep
# their segments open until they are destroyed.  TERN_XFABRIC_CLOSE_EACH=1:
# every engine closes them; 0: none.
close_each() { case ${TERN_XFABRIC_CLOSE_EACH:-} in
                 "") [ "$1" = a1 ] && echo 1 || echo 0 ;; 0) echo 0 ;; *) echo 1 ;; esac; }
cloud() { case $1 in a*) echo A ;; b*) echo B ;; *) echo C ;; esac; }
# Run a command on a host: cloud A in the initial namespace, others in theirs.
on() { h=$1; shift
       case $h in a1|a2) "$@" ;; *) ip netns exec "ns$h" "$@" ;; esac; }
expect() { ca=$(cloud "$1"); cb=$(cloud "$2")
           if [ "$ca$cb" = AA ]; then echo rdma
           elif [ "$ca$cb" = BB ]; then echo efa
           else echo tcp; fi; }

echo "=== 1. network: cloud A (initial ns), cloud B (nsb1, nsb2 behind nsgwb), c (nsc)"
# RDMA devices stay in the namespace they were made in; this works only
# while no other network namespace exists.
rdma link delete rxe0 2>/dev/null || true
ip link delete dev0 2>/dev/null || true
rdma system set netns exclusive || skip "rdma system set netns exclusive failed (kernel?)"
ip link add cloudA0 type dummy
ip link set cloudA0 mtu 9000
ip addr add 10.1.0.1/24 dev cloudA0
ip addr add 10.1.0.2/24 dev cloudA0
ip link set cloudA0 up
rdma link add rxeA type rxe netdev cloudA0 || die "rdma link add rxeA type rxe netdev cloudA0"
sysctl -qw net.ipv4.ip_forward=1

for n in nsgwb nsb1 nsb2 nsc; do
  ip netns add $n
  ip -n $n link set lo up
done
ip link add wanA type veth peer name wanB || skip "cannot make a veth pair (no veth module?)"
ip link set wanB netns nsgwb
ip addr add 10.9.0.1/30 dev wanA
ip link set wanA up
ip -n nsgwb addr add 10.9.0.2/30 dev wanB
ip -n nsgwb link set wanB up
ip netns exec nsgwb sysctl -qw net.ipv4.ip_forward=1
ip -n nsgwb route add default via 10.9.0.1
ip route add 10.2.0.0/24 via 10.9.0.2
# Cloud B's "switch": nsgwb routes between its two ports and answers ARP for
# the other host (proxy_arp; no bridge module needed in the guest).
for h in b1 b2; do
  ip -n nsgwb link add p$h type veth peer name efa0 netns ns$h
  ip -n nsgwb addr add 10.2.0.254/32 dev p$h
  ip netns exec nsgwb sysctl -qw net.ipv4.conf.p$h.proxy_arp=1 \
    net.ipv4.neigh.p$h.proxy_delay=0
  ip -n nsgwb link set p$h up
  ip -n nsgwb route add "$(addr $h)/32" dev p$h
  ip -n ns$h addr add "$(addr $h)/24" dev efa0
  ip -n ns$h link set efa0 up
  ip -n ns$h route add default via 10.2.0.254
done
ip link add hc type veth peer name c0 netns nsc
ip addr add 10.3.0.254/24 dev hc
ip link set hc up
ip -n nsc addr add 10.3.0.1/24 dev c0
ip -n nsc link set c0 up
ip -n nsc route add default via 10.3.0.254
tc qdisc add dev wanA root netem delay 20ms || skip "tc netem failed (no sch_netem module?)"
ip netns exec nsgwb tc qdisc add dev wanB root netem delay 20ms ||
  skip "tc netem failed in a namespace"

echo "rxe: UDP port 4791 bound in the initial namespace: $(ss -Huan 'sport = :4791' | wc -l) socket(s); in nsb1: $(on b1 ss -Huan 'sport = :4791' | wc -l)"
echo "rdma devices: initial namespace: $(ls /sys/class/infiniband | tr '\n' ' ')/ nsb1: $(on b1 ls /sys/class/infiniband | tr '\n' ' ')/ nsc: $(on c ls /sys/class/infiniband | tr '\n' ' ')"
# round-trip min in ms (busybox ping: "round-trip min/avg/max = 40.5/...")
rtt() { on "$1" busybox ping -c 4 -i 0.2 -q "$2" 2>&1 |
        sed -n 's#.*min/avg/max = \([0-9.]*\)/.*#\1#p'; }
ab=$(rtt b1 10.1.0.1); bb=$(rtt b1 10.2.0.2); ca=$(rtt c 10.1.0.2); cb=$(rtt c 10.2.0.1)
echo "ping round trip (min, ms): b1->a1 $ab, b1->b2 $bb, c->a2 $ca, c->b1 $cb"
[ -n "$ab" ] && [ -n "$bb" ] && [ -n "$ca" ] && [ -n "$cb" ] || die "a host cannot reach another"
awk -v ab="$ab" -v bb="$bb" -v cb="$cb" \
  'BEGIN { exit !(ab >= 40 && cb >= 40 && bb < 20) }' ||
  die "netem: expected >= 40 ms across the clouds and < 20 ms inside cloud B"

echo "=== 2. five engines (tern-test-xfabric-peer), one config: $CFG"
all=
for h in $HOSTS; do all="$all $(ep "$h")"; done
i=0
for h in $HOSTS; do
  # shellcheck disable=SC2086
  on "$h" env TERN_XFABRIC_CLOSE_EACH="$(close_each "$h")" \
    "$PEER" "$CFG" "$(ep "$h")" $i "$W/go-$h" $W/check $all \
    > "$W/peer-$h.out" 2> "$W/peer-$h.err" &
  echo $! > "$W/peer-$h.pid"
  i=$((i + 1))
done
stop_peers() {
  for h in $HOSTS; do touch "$W/go-$h"; done
  touch $W/check
  for h in $HOSTS; do
    [ ! -f "$W/peer-$h.pid" ] || kill -TERM "$(cat "$W/peer-$h.pid")" 2>/dev/null || true
  done
  wait 2>/dev/null || true
  # the logs, for the host (run-in-vm.sh keeps OUTDIR when the test failed)
  [ -z "${TERN_VM_OUT:-}" ] || { mkdir -p "$TERN_VM_OUT/xfabric" && cp $W/*.out $W/*.err "$TERN_VM_OUT/xfabric/"; } || true
}
trap stop_peers EXIT
for h in $HOSTS; do
  i=0
  until grep -q '^READY' "$W/peer-$h.out"; do
    kill -0 "$(cat "$W/peer-$h.pid")" 2>/dev/null ||
      die "engine $h exited: $(cat "$W/peer-$h.out" "$W/peer-$h.err")"
    [ $i -lt 900 ] || die "engine $h did not start: $(cat "$W/peer-$h.err")"
    sleep 0.1
    i=$((i + 1))
  done
  echo "$h: $(head -n 1 "$W/peer-$h.out")"
done
# What each host skipped (the optional transports it has no device for).
for h in $HOSTS; do
  sed -n "s/.*transport '\([a-z]*\)': .*no usable device[^:]*: \(.*\); skipped.*/$h skips \1: \2/p" \
    "$W/peer-$h.err"
done

echo "=== 3. tern-info --peer on every host (in parallel)"
fails=0
infos=
for h in $HOSTS; do
  peers=
  for p in $HOSTS; do [ "$p" = "$h" ] || peers="$peers --peer $(ep "$p")"; done
  # shellcheck disable=SC2086
  on "$h" "$B/bin/tern-info" --config "$CFG" --server-name "$(addr "$h"):0" $peers \
    > "$W/info-$h.out" 2> "$W/info-$h.err" &
  infos="$infos $!"
done
for pid in $infos; do wait "$pid" || true; done
for h in $HOSTS; do
  for p in $HOSTS; do
    [ "$p" = "$h" ] && continue
    got=$(sed -n "/^peers:/,\$ s/^  $(ep "$p"): //p" "$W/info-$h.out")
    echo "$got" > "$W/info-$h-$p"
    want=$(expect "$h" "$p")
    if [ "$got" = "$want" ]; then
      echo "tern-info on $h --peer $p: $got"
    else
      echo "tern-info on $h --peer $p: '$got', expected $want"; fails=$((fails + 1))
      tail -n 3 "$W/info-$h.err"
    fi
  done
done

echo "=== 4. every ordered pair: WRITE, READ back, READ the peer's own data (${TERN_XFABRIC_ORDER:-one initiator at a time})"
# wait_pairs HOST: until HOST printed its four PAIR lines (or died, or 180 s)
wait_pairs() {
  i=0
  until [ "$(grep -c '^PAIR' "$W/peer-$1.out")" -ge 4 ]; do
    kill -0 "$(cat "$W/peer-$1.pid")" 2>/dev/null || break
    [ $i -lt 1800 ] || { echo "$1: no result after 180 s"; break; }
    sleep 0.1
    i=$((i + 1))
  done
}
if [ "${TERN_XFABRIC_ORDER:-}" = parallel ]; then
  for h in $HOSTS; do touch "$W/go-$h"; done
  for h in $HOSTS; do wait_pairs "$h"; done
else
  for h in $HOSTS; do touch "$W/go-$h"; wait_pairs "$h"; done
fi
touch $W/check
# Each engine checks what the others wrote into it, then is destroyed: its
# exit status counts too (a crash while tearing down is a failure).
for h in $HOSTS; do
  pid=$(cat "$W/peer-$h.pid")
  i=0
  while kill -0 "$pid" 2>/dev/null && [ $i -lt 600 ]; do
    sleep 0.1
    i=$((i + 1))
  done
  kill -0 "$pid" 2>/dev/null && { echo "$h: still running 60 s after CHECK: killed"; kill -KILL "$pid"; }
  rc=0
  wait "$pid" || rc=$?
  echo $rc > "$W/peer-$h.rc"
done
for h in $HOSTS; do
  for p in $HOSTS; do
    [ "$p" = "$h" ] && continue
    want=$(expect "$h" "$p")
    line=$(grep "^PAIR $(ep "$p") " "$W/peer-$h.out" || true)
    echo "$h -> $p: expected $want: ${line:-no result}"
    cell=$want
    if [ "$line" != "PAIR $(ep "$p") $want ok" ]; then
      fails=$((fails + 1))
      got=$(echo "$line" | cut -d' ' -f3)
      cell="${got:-none}!"
    fi
    [ "$(cat "$W/info-$h-$p")" = "$want" ] || cell="$cell?"
    echo "$cell" > "$W/cell-$h-$p"
  done
  c=$(grep '^CHECK' "$W/peer-$h.out" || true)
  echo "$h: what the other hosts wrote here: ${c:-no CHECK line}"
  [ "$c" = "CHECK ok" ] || { fails=$((fails + 1)); tail -n 5 "$W/peer-$h.err"; }
  rc=$(cat "$W/peer-$h.rc")
  if [ "$rc" != 0 ]; then
    echo "$h: tern-test-xfabric-peer exited with $rc:"; tail -n 12 "$W/peer-$h.err"
    fails=$((fails + 1))
  fi
done

echo "=== matrix: initiator (row) -> target (column): the transport used; ! = not the"
echo "    expected one or data differed, ? = tern-info --peer named another transport"
printf '%-10s' "from\\to"
for p in $HOSTS; do printf '%-8s' "$p"; done
echo
for h in $HOSTS; do
  printf '%-10s' "$h ($(cloud "$h"))"
  for p in $HOSTS; do
    if [ "$p" = "$h" ]; then printf '%-8s' "-"; else printf '%-8s' "$(cat "$W/cell-$h-$p")"; fi
  done
  echo
done
t1=$(cut -d' ' -f1 /proc/uptime)
awk -v a="$t0" -v b="$t1" 'BEGIN { printf "rdma_vm_xfabric: guest time %.1f s\n", b - a }'
if [ $fails -eq 0 ]; then
  echo "rdma_vm_xfabric: ALL PASSED (20 ordered pairs: WRITE + READ byte-exact over the expected transport)"
else
  echo "rdma_vm_xfabric: $fails check(s) FAILED"
  exit 1
fi
