#!/usr/bin/env bash
# tern VM harness: run one command inside a qemu guest that has Soft-RoCE.
#
#   tests/system/vm/run-in-vm.sh [-o OUTDIR] [-t SECONDS] [--] CMD [ARGS...]
#
# Boots the Debian kernel from the cache (tests/system/vm/fetch-kernel.sh fetches it
# on first use) with a busybox initrd, shares the host's / read-only and
# OUTDIR read-write over virtio-9p, and inside the guest: loads rdma_rxe,
# creates rxe0 on a dummy netdev (10.77.0.1/24, MTU 9000), chroots into the
# host's root and runs CMD in the current directory (if it exists there,
# else OUTDIR).  The guest has no network card (-nic none): all traffic
# stays inside it.  Host binaries run as they are; only OUTDIR, /tmp and
# /dev/shm are writable in the guest ($TERN_VM_OUT names OUTDIR there).
#
# CMD's output is printed; the exit status is CMD's.  Files left in OUTDIR
# (a directory the script made itself is removed when CMD exits 0):
# cmd.sh, output.log, rc, devinfo.txt, guest.log, console.log (and
# kvm-probe.log when KVM was tried).
#
# Accelerator: KVM when a probe guest really boots under it, else TCG (the
# reason is printed either way); TERN_VM_ACCEL=kvm or tcg forces one.
# Environment passed into the guest: TERN_* variables and LD_LIBRARY_PATH.
#
# Exit codes: CMD's status; 77 when the VM cannot run here (no qemu, no
# kernel package; the reason is printed); 124 on timeout; 125 when the
# guest failed before CMD ran (see the logs printed).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../../.." && pwd)
out=
timeout_s=${TERN_VM_TIMEOUT:-170}

while [ $# -gt 0 ]; do
  case $1 in
    -o) out=$2; shift 2 ;;
    -t) timeout_s=$2; shift 2 ;;
    --) shift; break ;;
    -*) echo "usage: $0 [-o OUTDIR] [-t SECONDS] [--] CMD [ARGS...]" >&2; exit 2 ;;
    *) break ;;
  esac
done
[ $# -gt 0 ] || { echo "usage: $0 [-o OUTDIR] [-t SECONDS] [--] CMD [ARGS...]" >&2; exit 2; }

skip() { echo "vm: SKIP: $*"; exit 77; }

qemu=${TERN_VM_QEMU:-qemu-system-x86_64}
command -v "$qemu" >/dev/null || skip "$qemu not found (install qemu-system-x86)"
[ -x /bin/busybox ] || skip "/bin/busybox not found (install busybox-static)"
command -v cpio >/dev/null || skip "cpio not found (install cpio)"
[ -e /usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav34.so ] ||
  skip "the rxe verbs provider is not installed (install ibverbs-providers)"
for t in ip rdma ibv_devinfo; do
  command -v $t >/dev/null || skip "$t not found (install iproute2, ibverbs-utils)"
done

set +e
kdir=$("$here/fetch-kernel.sh")
rc=$?
set -e
[ $rc -eq 77 ] && exit 77
[ $rc -eq 0 ] || { echo "vm: fetch-kernel.sh failed ($rc)"; exit 125; }

made_out=0
if [ -z "$out" ]; then
  out=$(mktemp -d "${TMPDIR:-/tmp}/tern-vm.XXXXXX")
  made_out=1
fi
mkdir -p "$out"
out=$(cd "$out" && pwd)
# The kernel command line splits at blanks: the paths travel on it with
# '%' and ' ' written %25 and %20 (guest-init.sh decodes them).  Other
# blanks (tabs, newlines) in them are not carried.
tab=$(printf '\t')
case $out$src$PWD in *"$tab"*|*"
"*) echo "vm: SKIP: a tab or newline in the source, output or working directory (kernel command line): $src $out $PWD"; exit 77 ;; esac
cmdline_path() { printf '%s' "$1" | sed 's/%/%25/g; s/ /%20/g'; }
rm -f "$out/rc" "$out/output.log" "$out/guest.log" "$out/console.log" "$out/devinfo.txt" \
      "$out/kvm-probe.log"

# The command, run by the guest's /bin/sh: same directory, same arguments.
{
  echo "# written by run-in-vm.sh"
  while IFS= read -r v; do
    printf 'export %s=%q\n' "$v" "${!v}"
  done < <(compgen -e | grep -E '^(TERN_[A-Za-z0-9_]*|LD_LIBRARY_PATH)$' | grep -v '^TERN_VM_OUT$')
  printf 'cd %q 2>/dev/null || cd %q\n' "$PWD" "$out"
  printf 'exec'
  printf ' %q' "$@"
  printf '\n'
} > "$out/cmd.sh"

# The initrd: static busybox, our /init, the modules in load order.
initrd_dir=$(mktemp -d "${TMPDIR:-/tmp}/tern-vm-initrd.XXXXXX")
trap 'rm -rf "$initrd_dir"' EXIT
mkdir -p "$initrd_dir"/{bin,proc,sys,dev,modules}
cp /bin/busybox "$initrd_dir/bin/busybox"
cp "$here/guest-init.sh" "$initrd_dir/init"
chmod 755 "$initrd_dir/init"
cp "$kdir"/modules/*.ko "$initrd_dir/modules/"
(cd "$initrd_dir" && find . | cpio -o -H newc --quiet | gzip -1) > "$initrd_dir.cpio.gz"
mv "$initrd_dir.cpio.gz" "$initrd_dir/initrd.gz"

# The accelerator is chosen by trying it, never by the mere presence of
# /dev/kvm: some hosts have a /dev/kvm that opens but cannot run this guest
# (no vmx/svm exposed; qemu then dies on an MSR assertion).  The probe boots
# the same kernel under KVM with no initrd: it prints its banner and panics
# at once when KVM works.  TERN_VM_ACCEL=kvm|tcg forces one (debugging).
probe_kvm() {
  [ -e /dev/kvm ] || { accel_why="no /dev/kvm"; return 1; }
  [ -w /dev/kvm ] || { accel_why="/dev/kvm is not writable"; return 1; }
  local log="$out/kvm-probe.log"
  # In the background so that bash does not print "Aborted" when qemu dies.
  timeout -k 2 30 "$qemu" -machine q35,accel=kvm -cpu max -m 256 -smp 1 \
    -nographic -no-reboot -nic none -monitor none -serial stdio \
    -kernel "$kdir/vmlinuz" -append "console=ttyS0 panic=-1 loglevel=4" \
    < /dev/null > "$log" 2>&1 &
  wait $! || true
  if grep -q "Linux version" "$log"; then
    accel_why="a probe guest booted under KVM"
    return 0
  fi
  accel_why="/dev/kvm is there but a probe guest did not boot under it: $(grep -m1 -iE 'error|assert|fail' "$log" || tail -n 1 "$log")"
  return 1
}

case ${TERN_VM_ACCEL:-auto} in
  kvm) accel=kvm; accel_why="forced by TERN_VM_ACCEL=kvm" ;;
  tcg) accel=tcg; accel_why="forced by TERN_VM_ACCEL=tcg" ;;
  auto) if probe_kvm; then accel=kvm; else accel=tcg; fi ;;
  *) echo "vm: TERN_VM_ACCEL must be kvm, tcg or auto, not '$TERN_VM_ACCEL'"; exit 2 ;;
esac
echo "vm: accelerator $accel ($accel_why)"
start=$(date +%s.%N)
set +e
timeout --foreground -k 5 "$timeout_s" "$qemu" \
  -machine q35,accel=$accel -cpu max -m 1024 -smp 2 \
  -nographic -no-reboot -nic none -monitor none -serial stdio \
  -kernel "$kdir/vmlinuz" -initrd "$initrd_dir/initrd.gz" \
  -append "console=ttyS0 panic=-1 quiet loglevel=3 tern_out=$(cmdline_path "$out") tern_src=$(cmdline_path "$src") tern_pwd=$(cmdline_path "$PWD")" \
  -virtfs local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap,id=hostroot \
  -virtfs local,path="$out",mount_tag=results,security_model=none,id=results \
  < /dev/null > "$out/console.log" 2>&1
qrc=$?
set -e
end=$(date +%s.%N)
wall=$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1f", b - a }')

[ -f "$out/output.log" ] && cat "$out/output.log"
if [ $qrc -eq 124 ] || [ $qrc -eq 137 ]; then
  echo "vm: TIMEOUT after ${timeout_s}s (accel $accel); last console lines:"
  tail -n 20 "$out/console.log" | sed 's/^/vm:   /'
  exit 124
fi
if [ ! -s "$out/rc" ]; then
  echo "vm: the guest stopped before the command finished (qemu exit $qrc, ${wall}s, accel $accel: $accel_why); logs:"
  for f in guest.log console.log; do
    [ -f "$out/$f" ] && tail -n 30 "$out/$f" | sed "s/^/vm: $f: /"
  done
  exit 125
fi
rc=$(cat "$out/rc")
where="logs in $out"
# A directory this script made is removed when the command passed (-o keeps it).
if [ "$rc" = 0 ] && [ $made_out = 1 ]; then
  rm -rf "$out"
  where="logs removed (-o OUTDIR keeps them)"
fi
echo "vm: command exited with $rc; VM wall time ${wall}s (accel $accel, kernel $(cat "$kdir/VERSION")); $where"
exit "$rc"
