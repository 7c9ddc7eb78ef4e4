#!/bin/bash
# fio's own CPU per 4 KiB O_DIRECT libaio write (QD16, one job) on the image itself and through a
# bexd export with passthrough=on: with passthrough the kernel does the write in fio's context, so
# any extra cost of the passthrough path shows up there. Also the kernel symbols that take fio's
# time in each (perf record, 3 s). JOBS=4 runs four fio jobs (group reporting) and, instead of
# the profiles, samples the kernel stacks of fio's threads during one passthrough run to see
# whether they wait on the FUSE inode lock. Needs build-perf/ (perf/run.sh builds it).
set -eu
B=${B:-/work/main/build-perf}
out=${1:-/tmp/write-cost}
jobs=${JOBS:-1}
mkdir -p "$out"
img=$B/bench.img; mnt=$B/bench/export
touch $mnt
$B/cli/bexd --blockdev driver=file,node-name=n0,filename=$img,cache.direct=on,aio=native \
  --export type=fuse,id=e0,node-name=n0,mountpoint=$mnt,writable=on,growable=on,passthrough=on,num-queues=1 > "$out/bexd.log" 2>&1 &
bexd=$!
for i in $(seq 50); do grep -q " $mnt " /proc/mounts && break; sleep 0.1; done
sleep 0.5
for rw in write randwrite; do
  for rep in 1 2 3; do
    for target in $img $mnt; do
      name=$(basename $target)-$rw-$rep
      perf stat -x, -e task-clock -o "$out/stat-$name.csv" \
        fio --name=c --filename=$target --rw=$rw --bs=4k --direct=1 --numjobs=$jobs --group_reporting --time_based --runtime=3 \
            --ioengine=libaio --iodepth=16 --norandommap --randrepeat=0 --output-format=json > "$out/fio-$name.json"
      python3 - "$out/stat-$name.csv" "$out/fio-$name.json" "$target" "$rw" "$jobs" <<'PY'
import json, sys
ms = next(float(l.split(',')[0]) for l in open(sys.argv[1]) if 'task-clock' in l)
job = json.load(open(sys.argv[2]))['jobs'][0]['write']
ios = job['total_ios']
print(f"{sys.argv[3]:40} {sys.argv[4]:9} j{sys.argv[5]} {job['iops']/1000:7.1f}k IOPS  fio CPU {ms*1000/ios:5.2f} us/write")
PY
    done
  done
done
if [ "$jobs" != 1 ]; then
  fio --name=c --filename=$mnt --rw=write --bs=4k --direct=1 --numjobs=$jobs --time_based --runtime=4 \
      --ioengine=libaio --iodepth=16 --output-format=json > /dev/null &
  fio=$!
  sleep 2
  : > "$out/stacks-j$jobs.txt"
  for s in $(seq 20); do
    for t in /proc/[0-9]*/task/*; do
      [[ $(cat $t/comm 2>/dev/null) == fio ]] || continue
      { echo "--- $t"; cat $t/stack; } >> "$out/stacks-j$jobs.txt" 2>/dev/null
    done
    sleep 0.1
  done
  wait $fio
  kill $bexd; wait $bexd || true
  exit 0
fi
for target in $img $mnt; do
  perf record -q -o "$out/perf-$(basename $target).data" -- \
    fio --name=c --filename=$target --rw=write --bs=4k --direct=1 --numjobs=1 --time_based --runtime=3 \
        --ioengine=libaio --iodepth=16 --output-format=json > /dev/null
  perf report -q -i "$out/perf-$(basename $target).data" --no-children --sort sym --stdio 2>/dev/null \
    | grep -v '^$' | head -25 > "$out/symbols-$(basename $target).txt"
done
kill $bexd; wait $bexd || true
