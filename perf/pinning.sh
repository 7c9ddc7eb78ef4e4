#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-or-later
# Measures what the queue-cpus export option buys on this machine: bexd's null export at queue
# depth 1 and 16 with queue threads unpinned or pinned, with fio floating or pinned to CPU 0.
# Configurations are interleaved within each repetition; prints the median IOPS of each cell.
#   perf/pinning.sh [--reps N] [--runtime S] [--bexd PATH]
set -euo pipefail
cd "$(dirname "$0")/.."
reps=3 runtime=3 bexd=build-perf/cli/bexd
while [ $# -gt 0 ]; do
  case "$1" in
    --reps) reps=$2; shift 2 ;;
    --runtime) runtime=$2; shift 2 ;;
    --bexd) bexd=$2; shift 2 ;;
    *) echo "usage: $0 [--reps N] [--runtime S] [--bexd PATH]" >&2; exit 2 ;;
  esac
done
[ -x "$bexd" ] || { echo "$0: no bexd at $bexd (perf/run.sh builds it; or cmake --build build-perf)" >&2; exit 1; }
[ "$(nproc)" -ge 2 ] || { echo "$0: needs at least 2 CPUs" >&2; exit 1; }

mnt=$(mktemp /tmp/bexd-pinning.XXXXXX)
results=$(mktemp /tmp/bexd-pinning-results.XXXXXX)
trap 'umount -l "$mnt" 2>/dev/null || true; rm -f "$mnt" "$results"' EXIT

# name | export options | fio options
configs=(
  "q1|num-queues=1|"
  "q2|num-queues=2|"
  "q2 queue-cpus=0-1|num-queues=2,queue-cpus=0-1|"
  "q1 queue-cpus=1, fio on 0|num-queues=1,queue-cpus=1|--cpus_allowed=0"
  "q2 queue-cpus=0-1, fio on 0|num-queues=2,queue-cpus=0-1|--cpus_allowed=0"
  "q2 queue-cpus=1, fio on 0|num-queues=2,queue-cpus=1|--cpus_allowed=0"
)
workloads=("randread-sync|--ioengine=pvsync2 --iodepth=1" "randread-aio|--ioengine=libaio --iodepth=16")

run_cell() {  # export-options fio-options workload-options -> IOPS
  "$bexd" --blockdev driver=null-co,node-name=n,size=1G,read-zeroes=on \
    --export "type=fuse,id=e,node-name=n,mountpoint=$mnt,$1" >/dev/null 2>&1 &
  local pid=$! i
  for i in $(seq 100); do grep -q " $mnt " /proc/self/mountinfo && break; sleep 0.1; done
  # shellcheck disable=SC2086
  fio --name=pin --filename="$mnt" --rw=randread --bs=4k --direct=1 --size=1G --time_based \
    --ramp_time=0.5 --runtime="$runtime" $2 $3 --output-format=terse --terse-version=3 |
    awk -F';' '{print $8}'
  kill "$pid"; wait "$pid" || true
}

for rep in $(seq "$reps"); do
  for w in "${workloads[@]}"; do
    for c in "${configs[@]}"; do
      IFS='|' read -r name export_options fio_options <<<"$c"
      iops=$(run_cell "$export_options" "$fio_options" "${w#*|}")
      echo "${w%%|*}|$name|$iops" >>"$results"
    done
  done
done

echo "bexd null export, bs=4k direct=1, median IOPS of $reps x ${runtime} s ($(nproc) CPUs, $(uname -r))"
echo
echo "| configuration | randread-sync (QD1) | randread-aio (QD16) |"
echo "|---|---|---|"
for c in "${configs[@]}"; do
  name=${c%%|*}
  row="| $name |"
  for w in "${workloads[@]}"; do
    median=$(awk -F'|' -v w="${w%%|*}" -v n="$name" '$1 == w && $2 == n {print $3}' "$results" |
      sort -n | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}')
    row="$row $median |"
  done
  echo "$row"
done
