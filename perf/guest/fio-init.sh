#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-or-later
# /init of the benchmark guest (busybox sh, PID 1; perf/harness/guest.py builds the initramfs with
# fio and its libraries). Mounts the virtio-fs tag given as bexd.tag on /mnt, runs the cells listed
# in /cells (one per line: NAME followed by fio's arguments) one after the other, and powers off.
# The host reads the console: "BEXD-CELL-START NAME" and "BEXD-CELL-END NAME STATUS" around each
# fio run (the host samples the daemons' CPU time at these lines), then fio's JSON between
# "BEXD-CELL-JSON-BEGIN NAME" and "BEXD-CELL-JSON-END NAME"; the last line is
# "BEXD-GUEST-RESULT: PASS" (every cell ran; the host checks fio's status in each) or
# "BEXD-GUEST-RESULT: FAIL <why>".

PATH=/bin:/usr/bin
export PATH
/bin/busybox --install -s /bin
. /lib/guest-lib.sh

start_guest
require tag
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
pass
