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
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "install-deps: done"
