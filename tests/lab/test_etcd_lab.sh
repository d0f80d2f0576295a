#!/usr/bin/env bash
# tests/lab/test_etcd_lab.sh BUILD: the three-member etcd cluster test
# (tests/system/test_etcd_cluster.py: leader killed mid-run, no transfer
# fails, a new segment opens after the election, the restarted member lost
# nothing) on lab hosts instead of loopback: five hosts on one switch, an
# etcd member on each of m1, m2, m3, the targets on t, the initiator and
# tern-info on i, every engine's metadata listing the three members'
# addresses.  Skips (77, said) where no lab can run or etcd is missing.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
BUILD=$(cd "${1:?usage: test_etcd_lab.sh BUILD}" && pwd)
. "$HERE/lab.sh"
lab_require
command -v etcd >/dev/null 2>&1 || lab_skip "etcd not installed (Debian package etcd-server)"
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
lab_init "etcd$$"
lab_switch sw
hosts="m1 m2 m3 t i"
map="{"
sep=
for h in $hosts; do
    lab_host "$h"
    lab_plug "$h" sw
    map="$map$sep\"$h\": [\"$(lab_ns "$h")\", \"$(lab_addr "$h" nic0 4)\"]"
    sep=", "
done
map="$map}"
for h in $hosts; do
    [ "$h" = i ] || lab_wait_reach i "$(lab_addr "$h" nic0 4)"
done
echo "test_etcd_lab: hosts $map"
rc=0
TERN_LAB_HOSTS=$map "$PY" "$HERE/../system/test_etcd_cluster.py" "$BUILD" || rc=$?
exit $rc
