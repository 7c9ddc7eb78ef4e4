#!/bin/bash
# Issue 15: where a null QD1 request's time goes, bexd over /dev/fuse (2 queues) against FUSE
# over io_uring (one ring per CPU, pinned): per-thread CPU time and context switches of bexd's
# threads and fio's, per request, with fio pinned to CPU 0. Run as root on an idle machine.
set -eu
# PIN="taskset -c 0" (default) keeps fio on CPU 0; PIN= lets the scheduler place it.
PIN=${PIN-taskset -c 0}
B=${BUILD_DIR:-$(cd "$(dirname "$0")/../../.." && pwd)/build-perf}
mnt=$(mktemp -d)/export; touch "$mnt"
threads() {  # pid -> "tid name utime+stime(ticks) voluntary nonvoluntary" per thread
  for t in /proc/$1/task/*; do
    echo "$(basename $t) $(cat $t/comm) $(awk '{print $14+$15}' $t/stat) $(awk '/^voluntary_ctxt/{v=$2}/^nonvoluntary_ctxt/{n=$2}END{print v, n}' $t/status)"
  done
}
for transport in "num-queues=2" "io-uring=on"; do
  "$B/cli/bexd" --blockdev driver=null,node-name=n0,size=1073741824,read-zeroes=on \
    --export "type=fuse,id=e0,node-name=n0,mountpoint=$mnt,writable=on,$transport" >/dev/null 2>&1 &
  bexd=$!
  until grep -q " $mnt fuse" /proc/mounts; do kill -0 $bexd || { echo "bexd did not start" >&2; exit 1; }; sleep 0.1; done
  for rw in randread; do
    for engine in "pvsync2 --iodepth=1" "libaio --iodepth=16"; do
      threads $bexd > /tmp/before
      perf stat -x, -e cpu-migrations -o /tmp/perfstat -- $PIN fio --name=c --filename="$mnt" --rw=$rw --bs=4k --direct=1 --time_based \
        --runtime=5 --ioengine=$engine --norandommap --randrepeat=0 --output-format=json \
        > /tmp/fio.json
      threads $bexd > /tmp/after
      python3 - "$transport" "$engine" <<'PY'
import json, sys
migrations = int(open("/tmp/perfstat").read().strip().splitlines()[-1].split(",")[0])
d = json.load(open("/tmp/fio.json"))["jobs"][0]
ios = d["read"]["total_ios"] + d["write"]["total_ios"]
print(f"{sys.argv[1]:14} {sys.argv[2]:22} {d['read']['iops'] + d['write']['iops']:9.0f} IOPS, "
      f"fio ctx switches/request {d['ctx'] / ios:.2f}, fio CPU migrations/request "
      f"{migrations / ios:.3f}")
before = {l.split()[0]: l.split() for l in open("/tmp/before")}
for line in open("/tmp/after"):
    tid, name, ticks, vol, nonvol = line.split()
    b = before.get(tid)
    if not b: continue
    cpu_us = (int(ticks) - int(b[2])) * 10000 / ios
    sw = (int(vol) - int(b[3]) + int(nonvol) - int(b[4])) / ios
    if cpu_us > 0.05 or sw > 0.01:
        print(f"    {name:16} CPU {cpu_us:5.1f} us/request, switches {sw:.2f}/request "
              f"(involuntary {(int(nonvol) - int(b[4])) / ios:.2f})")
PY
    done
  done
  kill $bexd; wait $bexd || true
  rmdir "$(dirname "$mnt")" 2>/dev/null || true
done
