#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-or-later
# Issue 16, nbd cells: bexd's nbd node over /dev/fuse (one queue) and over FUSE io_uring
# (io-uring=on: one ring per possible CPU, each with its own NBD connection), against
# qemu-storage-daemon 7.2, alternated in 3 rounds, all on one nbdkit memory server (multi-conn).
# fio: 4 KiB O_DIRECT, QD1 (pvsync2) random reads and writes, QD16 (libaio) random reads, 4 s each.
# Usage: perf/results/2026-12-07-nbd-uring/alternate.sh [BEXD] (default build/cli/bexd); needs the
# kernel's FUSE io_uring switch on (/sys/module/fuse/parameters/enable_uring = Y).
set -u
root=$(cd "$(dirname "$0")/../../.." && pwd)
bexd=${1:-$root/build/cli/bexd}
work=$(mktemp -d)
trap 'kill $server 2>/dev/null; rm -rf "$work"' EXIT
nbdkit -U "$work/nbd.sock" -f memory 1G &
server=$!
for _ in $(seq 50); do [[ -S $work/nbd.sock ]] && break; sleep 0.1; done
qemu-img convert -n -O raw /dev/zero "nbd+unix:///?socket=$work/nbd.sock"
touch "$work/mnt"
node="driver=nbd,node-name=n,server.type=unix,server.path=$work/nbd.sock"
start() {
  case $1 in
    dev) "$bexd" --blockdev "$node" --export "type=fuse,id=e,node-name=n,mountpoint=$work/mnt,writable=on,num-queues=1" & ;;
    uring) "$bexd" --blockdev "$node" --export "type=fuse,id=e,node-name=n,mountpoint=$work/mnt,writable=on,io-uring=on" & ;;
    qsd) qemu-storage-daemon --blockdev "$node" --export "type=fuse,id=e,node-name=n,mountpoint=$work/mnt,writable=on" & ;;
  esac
  daemon=$!
  for _ in $(seq 50); do grep -q " $work/mnt " /proc/mounts && break; sleep 0.1; done
}
for round in 1 2 3; do
  for system in dev uring qsd; do
    start $system
    for workload in "randread pvsync2 1" "randwrite pvsync2 1" "randread libaio 16"; do
      set -- $workload
      iops=$(fio --name=c --filename="$work/mnt" --rw=$1 --bs=4k --direct=1 --time_based \
               --runtime=4 --ramp_time=1 --ioengine=$2 --iodepth=$3 --size=1G --norandommap \
               --randrepeat=0 --output-format=json |
             python3 -c 'import json,sys; j=json.load(sys.stdin)["jobs"][0]; print(int(j["read"]["iops"]+j["write"]["iops"]))')
      echo "$round $system $1-$2-qd$3 $iops"
    done
    kill $daemon; wait $daemon 2>/dev/null
  done
done
