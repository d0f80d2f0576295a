#!/usr/bin/env bash
# The VM harness picks its accelerator by trying it.  A qemu that dies under
# KVM the way it does on hosts whose /dev/kvm cannot run the guest ("failed
# to set MSR", then an assertion) is put in front of the real one:
#  1. forced KVM fails before the command runs and says why (exit 125);
#  2. auto falls back to TCG, prints the reason, and the command runs;
#  3. forced TCG runs without a probe.
# Exit 77 (skip, printed) where the harness itself cannot run.
set -u
here=$(cd "$(dirname "$0")" && pwd)
real=$(command -v qemu-system-x86_64) || { echo "vm_accel: SKIP: qemu-system-x86_64 not found"; exit 77; }
work=$(mktemp -d "${TMPDIR:-/tmp}/tern-vm-accel.XXXXXX")
trap 'rm -rf "$work"' EXIT
cat > "$work/qemu" <<QEMU
#!/bin/sh
case "\$*" in
  *accel=kvm*) echo "qemu-system-x86_64: error: failed to set MSR 0x10a to 0x69" >&2
               echo "kvm.c:3183: kvm_buf_set_msrs: Assertion failed." >&2; exit 134 ;;
esac
exec "$real" "\$@"
QEMU
chmod +x "$work/qemu"
fails=0
check() { # name, expected rc, rc, output file, pattern...
  local name=$1 want=$2 got=$3 f=$4; shift 4
  local ok=1
  [ "$got" = "$want" ] || { echo "vm_accel: $name: exit $got, expected $want"; ok=0; }
  for p in "$@"; do
    grep -qE "$p" "$f" || { echo "vm_accel: $name: output lacks /$p/"; ok=0; }
  done
  if [ $ok = 1 ]; then echo "vm_accel: $name: ok"; else fails=$((fails + 1)); sed 's/^/    /' "$f"; fi
}

TERN_VM_QEMU="$work/qemu" TERN_VM_ACCEL=kvm "$here/run-in-vm.sh" -o "$work/kvm" -t 60 -- true > "$work/kvm.log" 2>&1
rc=$?
[ $rc = 77 ] && { cat "$work/kvm.log"; exit 77; }
check forced_kvm_fails_clearly 125 $rc "$work/kvm.log" \
  'accelerator kvm \(forced by TERN_VM_ACCEL=kvm\)' 'failed to set MSR'

TERN_VM_QEMU="$work/qemu" "$here/run-in-vm.sh" -o "$work/auto" -t 200 -- sh -c 'echo guest-ran-$((6*7))' > "$work/auto.log" 2>&1
check auto_falls_back_to_tcg 0 $? "$work/auto.log" \
  'accelerator tcg \(/dev/kvm is there but a probe guest did not boot under it|accelerator tcg \(no /dev/kvm|accelerator tcg \(/dev/kvm is not writable' \
  'guest-ran-42' 'accel tcg'

TERN_VM_ACCEL=bogus "$here/run-in-vm.sh" -o "$work/bogus" -- true > "$work/bogus.log" 2>&1
check bad_accel_named 2 $? "$work/bogus.log" "TERN_VM_ACCEL must be kvm, tcg or auto, not 'bogus'"

echo "$((3 - fails)) passed, $fails failed"
[ $fails = 0 ]
