#!/bin/bash
# usage: measure.sh BEXD IMAGE RW [extra]
BEXD=$1; IMG=$2; RW=$3; RO=${4:-on}
D=/work/wt/qcow2-perf/build-measure
qemu-storage-daemon --object iothread,id=io0 --blockdev driver=qcow2,node-name=n0,cache.direct=on,file.driver=file,file.filename=$IMG,file.aio=native,read-only=$RO \
  --export type=fuse,id=e0,node-name=n0,mountpoint=$D/mnt,writable=$([ $RO = on ] && echo off || echo on),iothread=io0 > $D/bexd.log 2>&1 &
PID=$!
for i in $(seq 50); do grep -q "$D/mnt" /proc/mounts && break; sleep 0.1; done
sleep 0.5
echo "bexd pid $PID"
if [ -n "$STRACE" ]; then (strace -c -f -p $PID -o $D/strace.txt & echo $! > $D/strace.pid); sleep 0.5; fi
if [ -n "$PERF" ]; then (perf record -g -p $PID -o $D/perf.data >/dev/null 2>&1 & echo $! > $D/perf.pid); sleep 0.5; fi
fio --name=cell --filename=$D/mnt --rw=$RW --bs=4k --direct=1 --ioengine=libaio --iodepth=16 --time_based --runtime=4 --output-format=terse | awk -F';' '{print "read_iops",$8,"write_iops",$49}'
[ -n "$STRACE" ] && kill -INT $(cat $D/strace.pid)
[ -n "$PERF" ] && kill -INT $(cat $D/perf.pid)
sleep 1
kill $PID; wait $PID
