#!/usr/bin/env bash
# Install the Debian packages tern needs to build and test, if missing.
# Idempotent and quiet when everything is there; runs `apt-get update` only
# when something has to be installed.  Needs root (or sudo) on Debian 12.
set -euo pipefail

PKGS=(
  # build
  gcc make cmake pkg-config clang
  # libraries
  libibverbs-dev libfabric-dev libnuma-dev libjson-c-dev libyaml-dev
  libcriterion-dev libhiredis-dev libcurl4-openssl-dev libssl-dev
  # real services and peers the tests start on loopback
  redis-server etcd-server iperf3 python3
  # charts: tern-bench --plot, bench/charts.sh (gnuplot without X)
  gnuplot-nox
  # a real Prometheus server and promtool (tests/system/test_metrics_prometheus.sh)
  prometheus
  # the Python binding (python/): headers, venv for `pip install`, its tests
  python3-dev python3-venv python3-setuptools python3-wheel python3-pytest python3-numpy
  # the Soft-RoCE VM (tests/system/vm): qemu, a busybox initrd, verbs userland
  qemu-system-x86 busybox-static rdma-core ibverbs-providers ibverbs-utils
  cpio kmod iproute2
  # sanitizers and memcheck
  valgrind libclang-rt-14-dev
)

missing=()
for p in "${PKGS[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

SUDO=
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "install-deps: need root to install: ${missing[*]}" >&2; exit 1; }
  SUDO=sudo
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
# A fresh machine may still be running its own apt job (the dpkg lock is
# waited for, up to 5 minutes) or meet a mirror that fails for a moment (three
# tries, the last error printed).
APT=(apt-get -o DPkg::Lock::Timeout=300 -o Acquire::Retries=3)
log=$(mktemp)
trap 'rm -f "$log"' EXIT
for try in 1 2 3; do
  if $SUDO "${APT[@]}" update -qq >"$log" 2>&1 &&
     $SUDO "${APT[@]}" install -y -qq --no-install-recommends "${missing[@]}" >"$log" 2>&1; then
    echo "install-deps: done"
    exit 0
  fi
  echo "install-deps: try $try of 3 failed:" >&2
  tail -n 5 "$log" >&2
  [ "$try" -lt 3 ] && sleep 10
done
echo "install-deps: could not install ${missing[*]} (see the apt errors above)" >&2
exit 1
