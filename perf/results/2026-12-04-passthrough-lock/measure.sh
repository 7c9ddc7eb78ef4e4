#!/bin/bash
# Where fio's threads wait during randwrite-sync-j4 through a passthrough export vs natively.
set -u
B=/work/main/build-perf
img=$B/bench.img; mnt=$B/bench/export
touch $mnt
$B/cli/bexd --blockdev driver=file,node-name=n0,filename=$img,cache.direct=on,aio=native \
  --export type=fuse,id=e0,node-name=n0,mountpoint=$mnt,writable=on,growable=on,passthrough=on,num-queues=1 > /tmp/pt/bexd.log 2>&1 &
bexd=$!
for i in $(seq 50); do mountpoint -q $mnt 2>/dev/null || grep -q " $mnt " /proc/mounts && break; sleep 0.1; done
sleep 0.5
for target in $mnt $img; do
  for jobs in 1 4; do
    fio --name=c --filename=$target --rw=randwrite --bs=4k --direct=1 --numjobs=$jobs --group_reporting --time_based --runtime=6 --ioengine=pvsync2 --iodepth=1 --norandommap --randrepeat=0 --output-format=json > /tmp/pt/fio-$jobs-$(basename $target).json &
    fio=$!
    sleep 3
    : > /tmp/pt/stacks-$jobs-$(basename $target).txt
    for s in $(seq 20); do
      for t in /proc/[0-9]*/task/*; do
        c=$(cat $t/comm 2>/dev/null); [[ $c == fio ]] || continue
        grep -q "pvsync\|fuse\|ext4\|rwsem\|io_schedule" $t/stack 2>/dev/null && { echo "--- $t"; cat $t/stack; } >> /tmp/pt/stacks-$jobs-$(basename $target).txt
      done
      sleep 0.1
    done
    wait $fio
    python3 -c "import json;d=json.load(open('/tmp/pt/fio-$jobs-$(basename $target).json'));print('$target j$jobs', round(d['jobs'][0]['write']['iops']))"
  done
done
kill $bexd; wait $bexd
