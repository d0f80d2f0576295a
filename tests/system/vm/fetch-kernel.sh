#!/usr/bin/env bash
# tern VM harness: make sure a Debian kernel with Soft-RoCE is unpacked in
# the cache, and print the directory that holds it.
#
#   tests/system/vm/fetch-kernel.sh            -> prints e.g. tests/system/vm/cache/6.1.0-57-amd64
#
# The directory holds `vmlinuz`, `modules/` (the .ko files the guest loads,
# prefixed with their load order) and `VERSION`.  The kernel package is
# whatever the Debian meta package linux-image-amd64 depends on now, fetched
# with `apt-get download` (set TERN_VM_KERNEL_DEB=/path/to/linux-image.deb
# to use a package you already have).  Only the ~20 modules the guest needs
# are kept, so the cache stays around 20 MB.
#
# Cache: $TERN_VM_CACHE, default tests/system/vm/cache next to this script (git
# ignored).  A cached kernel is reused without asking apt, so reruns work
# offline.
#
# Exit codes: 0 ok, 77 the kernel cannot be had here (the reason is printed
# on stderr; the CTest wrapper counts that as skipped), 1 anything else.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
cache=${TERN_VM_CACHE:-$here/cache}

TMPS=()
cleanup() { local t; for t in "${TMPS[@]}"; do rm -rf "$t"; done; }
trap cleanup EXIT

skip() { echo "vm: SKIP: $*" >&2; exit 77; }
die() { echo "vm: error: $*" >&2; exit 1; }

# Modules in load order (see /work/shared/notes/softroce-vm.md): virtio +
# 9p to reach host files, then the verbs stack and rxe, then dummy for a
# netdev.  crc32_generic is needed by rdma_rxe and nothing auto-loads it.
# veth (links between network namespaces) and sch_netem (a delayed link)
# are for rdma_vm_xfabric.sh; neither depends on another module.
MODULES=(
  drivers/virtio/virtio_ring
  drivers/virtio/virtio
  drivers/virtio/virtio_pci_legacy_dev
  drivers/virtio/virtio_pci_modern_dev
  drivers/virtio/virtio_pci
  fs/netfs/netfs
  fs/fscache/fscache
  net/9p/9pnet
  fs/9p/9p
  net/9p/9pnet_virtio
  net/ipv4/udp_tunnel
  net/ipv6/ip6_udp_tunnel
  drivers/infiniband/core/ib_core
  drivers/infiniband/core/ib_uverbs
  crypto/crc32_generic
  drivers/infiniband/sw/rxe/rdma_rxe
  drivers/net/dummy
  drivers/net/veth
  net/sched/sch_netem
)

# The package name linux-image-amd64 points at today.
wanted_package() {
  command -v apt-cache >/dev/null || return 1
  apt-cache depends linux-image-amd64 2>/dev/null |
    awk '/Depends: linux-image-[0-9]/ { print $2; exit }'
}

# A cached kernel is complete when it holds VERSION and every module of
# the list above (an older cache, unpacked when the list was shorter, is
# unpacked again from the package).
complete() {
  local d=$1 m
  [ -f "$d/VERSION" ] || return 1
  for m in "${MODULES[@]}"; do
    ls "$d"/modules/[0-9][0-9]-"$(basename "$m")".ko >/dev/null 2>&1 || return 1
  done
}

# Already unpacked? Prefer the version apt wants; else any complete one.
cached_dir() {
  local want=$1 d
  if [ -n "$want" ] && complete "$cache/${want#linux-image-}"; then
    echo "$cache/${want#linux-image-}"; return 0
  fi
  [ -n "$want" ] && return 1
  for d in "$cache"/*/VERSION; do
    [ -f "$d" ] && complete "$(dirname "$d")" && { dirname "$d"; return 0; }
  done
  return 1
}

# Unpack the .deb into a scratch dir and copy what the guest needs.
unpack() {
  local deb=$1 scratch ver dst i=0 m
  scratch=$(mktemp -d "$cache/.unpack.XXXXXX")
  TMPS+=("$scratch")
  dpkg-deb -x "$deb" "$scratch/k" || die "dpkg-deb -x $deb failed"
  ver=$(ls "$scratch/k/lib/modules" | head -n1)
  [ -n "$ver" ] || die "$deb holds no lib/modules/<version>"
  [ -f "$scratch/k/boot/vmlinuz-$ver" ] || die "$deb holds no boot/vmlinuz-$ver"
  dst=$scratch/out
  mkdir -p "$dst/modules"
  cp "$scratch/k/boot/vmlinuz-$ver" "$dst/vmlinuz"
  for m in "${MODULES[@]}"; do
    local f
    f=$(ls "$scratch/k/lib/modules/$ver/kernel/$m".ko* 2>/dev/null | head -n1 || true)
    [ -n "$f" ] || die "module $m missing from $deb (kernel config changed?)"
    case $f in
      *.ko) ;;
      *.ko.xz) xz -dc "$f" > "${f%.xz}" && f=${f%.xz} ;;
      *.ko.zst) zstd -qdc "$f" > "${f%.zst}" && f=${f%.zst} ;;
      *) die "unknown module format: $f" ;;
    esac
    cp "$f" "$dst/modules/$(printf '%02d' $i)-$(basename "$f")"
    i=$((i + 1))
  done
  echo "$ver" > "$dst/VERSION"
  rm -rf "${cache:?}/$ver"
  mv "$dst" "$cache/$ver"
  rm -rf "$scratch"
  echo "$cache/$ver"
}

main() {
  mkdir -p "$cache" || skip "cannot create the cache directory $cache"
  exec 9>"$cache/.lock"
  flock 9

  local want dir deb
  want=$(wanted_package || true)
  if dir=$(cached_dir "$want"); then echo "$dir"; return 0; fi

  if [ -n "${TERN_VM_KERNEL_DEB:-}" ]; then
    [ -f "$TERN_VM_KERNEL_DEB" ] || skip "TERN_VM_KERNEL_DEB=$TERN_VM_KERNEL_DEB does not exist"
    unpack "$TERN_VM_KERNEL_DEB"; return 0
  fi
  [ -n "$want" ] || skip "apt-cache knows no linux-image-amd64 (not Debian, or apt lists missing: run apt-get update)"
  command -v dpkg-deb >/dev/null || skip "dpkg-deb not installed"

  local dl
  dl=$(mktemp -d "$cache/.dl.XXXXXX")
  TMPS+=("$dl")
  chmod 777 "$dl" # apt's _apt user downloads into it when it can
  if ! (cd "$dl" && apt-get download -q "$want" >"$dl/apt.log" 2>&1); then
    sed 's/^/vm:   /' "$dl/apt.log" >&2
    skip "apt-get download $want failed (no network or no apt source?)"
  fi
  deb=$(ls "$dl"/*.deb 2>/dev/null | head -n1)
  [ -n "$deb" ] || skip "apt-get download $want produced no .deb"
  unpack "$deb"
}

main "$@"
