#!/bin/bash
# QD1 rbd reads: rbd bench against bexd's FUSE export, alternated; CPU per request of each.
T=$(mktemp -d)
C=/tmp/cr/ceph.conf; B=${B:-build-perf/cli/bexd}; M=/tmp/rbdexp; touch $M
cpu() { awk '{print $14+$15}' /proc/$1/stat; }
for rep in 1 2 3; do
 for pat in rand seq; do
  /usr/bin/time -f "%U %S" -o $T/t.out rbd -c $C bench --io-type read --io-size 4K --io-threads 1 --io-pattern $pat --io-total 24M rbd/bench > $T/rb.out 2>&1
  ops=$(grep -E "elapsed" $T/rb.out)
  echo "rbd-bench $pat: $ops cpu(u s)=$(cat $T/t.out)"
  $B --blockdev driver=rbd,node-name=n0,pool=rbd,image=bench,conf=$C --export type=fuse,id=e0,node-name=n0,mountpoint=$M,writable=on,num-queues=1 > $T/bexd-rbd.log 2>&1 &
  pid=$!
  for i in $(seq 100); do grep -q " $M " /proc/mounts && break; sleep 0.1; done
  fw=read; [ $pat = rand ] && fw=randread
  c0=$(cpu $pid)
  r=$(fio --name=c --filename=$M --rw=$fw --bs=4k --direct=1 --time_based --runtime=4 --ioengine=pvsync2 --iodepth=1 --norandommap --randrepeat=0 --output-format=json | python3 -c 'import json,sys; j=json.load(sys.stdin)["jobs"][0]["read"]; print(int(j["iops"]), j["total_ios"], int(j["clat_ns"]["mean"]/1000))')
  c1=$(cpu $pid)
  set -- $r
  echo "bexd $pat: iops=$1 lat_us=$3 cpu_us_per_req=$(( (c1-c0)*10000 / $2 ))"
  kill $pid; wait $pid 2>/dev/null
 done
done
