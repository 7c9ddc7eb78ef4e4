#!/bin/bash
# usage: vqd1-syscalls.sh BEXD VHOST_BENCH IMAGE RW  -> bexd's system calls per request at QD1
BEXD=$1; BENCH=$2; IMG=$3; RW=${4:-randread}
SOCK=/tmp/vqd1-sc.sock; rm -f $SOCK
$BEXD --blockdev driver=file,node-name=n0,filename=$IMG,cache.direct=${DIRECT:-on},aio=native \
  --export type=vhost-user-fs,id=e0,node-name=n0,addr.type=unix,addr.path=$SOCK,tag=bench,writable=on,num-request-queues=1 \
  > /tmp/vqd1-sc-bexd.log 2>&1 &
PID=$!
for i in $(seq 50); do [ -S $SOCK ] && break; sleep 0.1; done
perf stat -x, -e raw_syscalls:sys_enter -p $PID 2> /tmp/vqd1-sc-perf.out &
PERF=$!
sleep 0.5
$BENCH --socket=$SOCK --file=n0 --queues=1 --rw=$RW --iodepth=1 --bs=4k --direct=${BENCH_DIRECT:-1} --runtime=3 --ramp=0 > /tmp/vqd1-sc-bench.out 2>&1
kill -INT $PERF; wait $PERF
kill $PID; wait $PID
SYSCALLS=$(grep raw_syscalls /tmp/vqd1-sc-perf.out | cut -d, -f1)
IOS=$(sed 's/.*"ios": \([0-9]*\).*/\1/' /tmp/vqd1-sc-bench.out)
echo "$(basename $BEXD) $RW syscalls=$SYSCALLS requests=$IOS per_request=$(echo "scale=2; $SYSCALLS/$IOS" | bc) $(cut -c1-60 /tmp/vqd1-sc-bench.out)"
