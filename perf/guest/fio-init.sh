#!/bin/sh
# /init of the benchmark guest (busybox sh, PID 1; perf/harness/guest.py builds the initramfs with
# fio and its libraries). Mounts the virtio-fs tag given as bexd.tag on /mnt, runs the cells listed
# in /cells (one per line: NAME followed by fio's arguments) one after the other, and powers off.
# The host reads the console: "BEXD-CELL-START NAME" and "BEXD-CELL-END NAME STATUS" around each
# fio run (the host samples the daemons' CPU time at these lines), then fio's JSON between
# "BEXD-CELL-JSON-BEGIN NAME" and "BEXD-CELL-JSON-END NAME"; the last line is
# "BEXD-PERF-RESULT: DONE" or "BEXD-PERF-RESULT: FAIL <why>".

PATH=/bin:/usr/bin
export PATH
/bin/busybox --install -s /bin

power_off() {
  sync
  poweroff -f
  # poweroff -f does not return; if it does, PID 1 must not exit (that panics the guest).
  while :; do sleep 60; done
}

fail() {
  echo "BEXD-PERF-RESULT: FAIL $*"
  power_off
}

mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
exec </dev/console >/dev/console 2>&1

while read -r module; do
  insmod "/lib/modules/$module.ko" || fail "insmod $module"
done </lib/modules/order

tag=$(tr ' ' '\n' </proc/cmdline | sed -n 's/^bexd\.tag=//p')
[ -n "$tag" ] || fail "the kernel command line lacks bexd.tag"
mount -t virtiofs "$tag" /mnt || fail "mount -t virtiofs $tag"
echo "BEXD-PERF: mounted $tag after $(cut -d' ' -f1 /proc/uptime) s, $(nproc) vCPUs"

while read -r name args; do
  [ -n "$name" ] || continue
  echo "BEXD-CELL-START $name"
  # The arguments are fio options without spaces; word splitting is wanted here.
  # shellcheck disable=SC2086
  fio $args --output=/tmp/cell.json >/tmp/cell.log 2>&1
  status=$?
  echo "BEXD-CELL-END $name $status"
  [ "$status" -eq 0 ] || tail -n 5 /tmp/cell.log
  echo "BEXD-CELL-JSON-BEGIN $name"
  cat /tmp/cell.json
  echo "BEXD-CELL-JSON-END $name"
done </cells

umount /mnt || fail "umount /mnt"
echo "BEXD-PERF-RESULT: DONE"
power_off
