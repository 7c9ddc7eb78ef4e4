#!/bin/bash
# QD1 and QD16 reads and QD1 writes through bexd with librbd's rbd_non_blocking_aio at its default
# (true) and false, alternated. ceph-nb.conf is ceph.conf plus "[client] rbd_non_blocking_aio = false".
T=$(mktemp -d)
M=/tmp/rbdexp; touch $M; B=build-perf/cli/bexd
for rep in 1 2 3; do for conf in ceph.conf ceph-nb.conf; do
 $B --blockdev driver=rbd,node-name=n0,pool=rbd,image=bench,conf=/tmp/cr/$conf --export type=fuse,id=e0,node-name=n0,mountpoint=$M,writable=on,num-queues=1 > $T/bexd-rbd.log 2>&1 & pid=$!
 for i in $(seq 100); do grep -q " $M " /proc/mounts && break; sleep 0.1; done
 for w in randread:pvsync2:1 randread:libaio:16 randwrite:pvsync2:1; do IFS=: read rw eng qd <<< "$w"
 c0=$(awk '{print $14+$15}' /proc/$pid/stat)
 r=$(fio --name=c --filename=$M --rw=$rw --bs=4k --direct=1 --time_based --runtime=3 --ioengine=$eng --iodepth=$qd --norandommap --randrepeat=0 --output-format=json | python3 -c 'import json,sys; d=json.load(sys.stdin)["jobs"][0]; print(int(d["read"]["iops"]+d["write"]["iops"]), d["read"]["total_ios"]+d["write"]["total_ios"])')
 c1=$(awk '{print $14+$15}' /proc/$pid/stat); set -- $r
 echo "$conf $rw qd$qd iops=$1 cpu_us/req=$(( (c1-c0)*10000/$2 ))"
 done
 kill $pid; wait $pid 2>/dev/null
done; done
