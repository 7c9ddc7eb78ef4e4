#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-or-later
# Issue 16, rbd cells against `rbd bench`: bexd's rbd node over /dev/fuse (one queue) and over FUSE
# io_uring (io-uring=on: one ring per possible CPU), alternated with `rbd bench` in 3 rounds on one
# throwaway cluster (tests/support/ceph-cluster.sh, memstore OSD), on an image written once,
# sequentially. Random 4 KiB reads: QD1 (fio pvsync2; rbd bench --io-threads 1) and QD16 (fio
# libaio iodepth 16; rbd bench --io-threads 16), fio 4 s after 1 s of ramp, O_DIRECT.
# Usage: perf/results/2026-12-07-rbd-uring/alternate.sh [BEXD] (default build/cli/bexd); needs the
# kernel's FUSE io_uring switch on (/sys/module/fuse/parameters/enable_uring = Y).
set -u
root=$(cd "$(dirname "$0")/../../.." && pwd)
bexd=${1:-$root/build/cli/bexd}
cluster=/tmp/rbdu
mount=$(mktemp)
trap '"$root/tests/support/ceph-cluster.sh" stop $cluster >/dev/null 2>&1; rm -f "$mount"' EXIT
"$root/tests/support/ceph-cluster.sh" start $cluster memstore >/dev/null || exit 1
conf=$cluster/ceph.conf
rbd -c $conf create --size 1G rbd/bench
rbd -c $conf bench --io-type write --io-pattern seq --io-size 4M --io-threads 16 --io-total 1G \
  rbd/bench >/dev/null
node="driver=rbd,node-name=n,pool=rbd,image=bench,conf=$conf"
bench() {  # $1: threads; prints IOPS
  rbd -c $conf bench --io-type read --io-pattern rand --io-size 4K --io-threads $1 \
    --io-total $(($1 == 1 ? 24 : 96))M rbd/bench | awk '/elapsed:/ {print int($6)}'
}
for round in 1 2 3; do
  echo "$round bench randread-qd1 $(bench 1)"
  echo "$round bench randread-qd16 $(bench 16)"
  for system in dev uring; do
    queues=num-queues=1
    [[ $system == uring ]] && queues=io-uring=on
    "$bexd" --blockdev "$node" \
      --export "type=fuse,id=e,node-name=n,mountpoint=$mount,writable=on,$queues" &
    daemon=$!
    for _ in $(seq 100); do grep -q " $mount " /proc/mounts && break; sleep 0.1; done
    for workload in "pvsync2 1" "libaio 16"; do
      set -- $workload
      iops=$(fio --name=c --filename="$mount" --rw=randread --bs=4k --direct=1 --time_based \
               --runtime=4 --ramp_time=1 --ioengine=$1 --iodepth=$2 --size=1G --norandommap \
               --randrepeat=0 --output-format=json |
             python3 -c 'import json,sys; print(int(json.load(sys.stdin)["jobs"][0]["read"]["iops"]))')
      echo "$round $system randread-qd$2 $iops"
    done
    kill $daemon; wait $daemon 2>/dev/null
  done
done
