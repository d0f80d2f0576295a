#!/bin/sh
# tern VM harness: runs inside the guest, chrooted into the host's root.
#
# Brings up a dummy netdev with an address, puts Soft-RoCE (rxe0) on it,
# then runs the command the host wrote to $OUT/cmd.sh.  Its output goes to
# $OUT/output.log and its exit status to $OUT/rc (written last, so the host
# knows the command finished).  Setup failures write rc 125.
OUT=$1
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/tmp TMPDIR=/tmp
export TERN_VM_OUT="$OUT" TERN_VM_GUEST=1

fail() {
  echo "guest: setup failed: $*"
  echo "guest: setup failed: $*" >> "$OUT/output.log"
  echo 125 > "$OUT/rc"
  exit 125
}

ip link set lo up || fail "ip link set lo up"
ip link add dev0 type dummy || fail "ip link add dev0 type dummy"
# 9000-byte netdev MTU: rxe then reports active_mtu 4096.  TERN_VM_NETDEV_MTU
# overrides it (1500 gives active_mtu 1024, to test the MTU clamp).
ip link set dev0 mtu "${TERN_VM_NETDEV_MTU:-9000}" || fail "ip link set dev0 mtu"
ip addr add 10.77.0.1/24 dev dev0 || fail "ip addr add"
ip link set dev0 up || fail "ip link set dev0 up"
rdma link add rxe0 type rxe netdev dev0 || fail "rdma link add rxe0 type rxe netdev dev0"

# The port turns ACTIVE and the IPv4 GID appears shortly after.
i=0
while [ $i -lt 50 ]; do
  if ibv_devinfo -d rxe0 2>/dev/null | grep -q PORT_ACTIVE &&
     [ -n "$(cat /sys/class/infiniband/rxe0/ports/1/gids/1 2>/dev/null | grep -v '^0000:0000:0000:0000:0000:0000:0000:0000$')" ]; then
    break
  fi
  sleep 0.1
  i=$((i + 1))
done
ibv_devinfo -d rxe0 > "$OUT/devinfo.txt" 2>&1 || fail "ibv_devinfo -d rxe0 (see devinfo.txt)"
grep -q PORT_ACTIVE "$OUT/devinfo.txt" || fail "rxe0 port not ACTIVE (see devinfo.txt)"
for g in 0 1 2 3; do
  f=/sys/class/infiniband/rxe0/ports/1/gids/$g
  [ -r "$f" ] || continue
  echo "gid $g $(cat $f) $(cat /sys/class/infiniband/rxe0/ports/1/gid_attrs/types/$g 2>/dev/null) $(cat /sys/class/infiniband/rxe0/ports/1/gid_attrs/ndevs/$g 2>/dev/null)"
done >> "$OUT/devinfo.txt"

echo "guest: rxe0 ready after $i polls; running $OUT/cmd.sh"
sh "$OUT/cmd.sh" > "$OUT/output.log" 2>&1
rc=$?
echo "guest: command exited with $rc"
sync
echo $rc > "$OUT/rc"
sync
