#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-or-later
# Times how long bexd takes to open (until the FUSE mount appears) and to stop (SIGTERM to exit)
# a qcow2 backing chain of N images exported with one queue, and counts the libaio events it
# holds (/proc/sys/fs/aio-nr, the whole system's, so run it on an otherwise idle machine) and its
# threads after reading the whole export.
#   chain-timing.sh BEXD N...      e.g. chain-timing.sh build/cli/bexd 41 101
set -euo pipefail
bexd=$(realpath "$1"); shift
work=$(mktemp -d /var/tmp/bexd-chain.XXXXXX)
trap 'rm -rf "$work"' EXIT
cd "$work"
max=0
for n in "$@"; do (( n > max )) && max=$n; done
qemu-img create -q -f qcow2 c1.qcow2 64M
for ((i = 2; i <= max; i++)); do
  qemu-img create -q -f qcow2 -b "c$((i - 1)).qcow2" -F qcow2 "c$i.qcow2"
done
touch mnt
now() { date +%s.%N; }
for n in "$@"; do
  "$bexd" --blockdev "driver=qcow2,node-name=q,file.driver=file,file.filename=c$n.qcow2" \
    --export type=fuse,id=e,node-name=q,mountpoint=mnt,num-queues=1 2>"log$n" &
  pid=$!
  start=$(now)
  while ! mountpoint -q mnt; do
    kill -0 "$pid" 2>/dev/null || { echo "$n images: bexd failed: $(tail -1 "log$n")"; continue 2; }
    sleep 0.01
  done
  opened=$(now)
  aio=$(cat /proc/sys/fs/aio-nr)
  cat mnt >/dev/null
  threads=$(ls "/proc/$pid/task" | wc -l)
  kill -TERM "$pid"
  wait "$pid" || true
  stopped=$(now)
  echo "$n images: open $(echo "$opened - $start" | bc) s, stop $(echo "$stopped - $opened" | bc) s," \
    "aio-nr $aio, threads $threads"
done
