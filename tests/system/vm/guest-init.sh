#!/bin/busybox sh
# tern VM harness: /init of the guest's initrd (busybox only).
#
# Loads the modules shipped in /modules (in name order), mounts the host's
# `/` read-only (9p tag hostroot) at /host and the writable results folder
# (9p tag results) at the same absolute path inside it, mounts proc, sys,
# dev and a tmpfs /tmp inside, then chroots into the host's root and runs
# tests/system/vm/guest-run.sh from there.  Whatever happens, the VM powers off.
# Kernel command line: tern_out=<results dir> tern_src=<source dir>
# tern_pwd=<the caller's working directory>, each with '%' and ' ' written
# %25 and %20.
/bin/busybox --install -s /bin
export PATH=/bin

mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev

say() { echo "tern-vm: $*" > /dev/console; }
halt() { sync; poweroff -f; echo o > /proc/sysrq-trigger; sleep 5; }

# run-in-vm.sh writes '%' and ' ' of these paths as %25 and %20.
unpath() { echo "$1" | sed 's/%20/ /g; s/%25/%/g'; }
for arg in $(cat /proc/cmdline); do
  case $arg in
    tern_out=*) OUT=$(unpath "${arg#tern_out=}") ;;
    tern_src=*) SRC=$(unpath "${arg#tern_src=}") ;;
    tern_pwd=*) PWD_HOST=$(unpath "${arg#tern_pwd=}") ;;
  esac
done

for m in /modules/*.ko; do
  case $m in
    */*-dummy.ko) insmod "$m" numdummies=0 ;;
    *) insmod "$m" ;;
  esac || say "insmod $m failed"
done

# The host root is mounted once at /hostro and bound at /host, so that a
# host folder the tmpfs mounts below would hide (a clone or build under
# /tmp, as CI may have) can be bound back from /hostro.
mkdir -p /host /hostro
if ! mount -t 9p -o trans=virtio,version=9p2000.L,ro hostroot /hostro; then
  say "cannot mount the host root over 9p"; halt
fi
mount -o bind /hostro /host || { say "cannot bind the host root"; halt; }
mount -t proc proc /host/proc
mount -t sysfs sysfs /host/sys
mount -t devtmpfs devtmpfs /host/dev
mkdir -p /host/dev/pts /host/dev/shm
mount -t devpts devpts /host/dev/pts
mount -t tmpfs tmpfs /host/dev/shm
mount -t tmpfs tmpfs /host/tmp
mount -t tmpfs tmpfs /host/run
mount -t tmpfs tmpfs /host/var/tmp
for d in "$SRC" "$PWD_HOST"; do
  case $d in
    /tmp/*|/run/*|/var/tmp/*)
      mkdir -p "/host$d"
      mount -o bind "/hostro$d" "/host$d" || say "cannot bind $d back over the tmpfs" ;;
  esac
done
# The results folder sits at its host path; if that is under /tmp, the tmpfs
# above hid it, so recreate the mount point first.
mkdir -p "/host$OUT"
if ! mount -t 9p -o trans=virtio,version=9p2000.L,rw results "/host$OUT"; then
  say "cannot mount the results folder over 9p"; halt
fi

chroot /host /bin/sh "$SRC/tests/system/vm/guest-run.sh" "$OUT" \
  > "/host$OUT/guest.log" 2>&1
say "guest-run.sh exited with $?"
umount "/host$OUT"
halt
