#!/bin/bash
# Sequential 4 KiB first writes at QD16 (fio, 4 s) into a fresh 1 GiB qcow2 image: QSD, the old
# bexd and the new bexd in turn, three rounds, with two busy loops competing for the two CPUs.
D=/work/wt/qcow2-perf/build-measure
NEW=/work/wt/qcow2-perf/build-perf/cli/bexd
OLD=/work/main/build-perf/cli/bexd
HOGS=()
if [ "$1" = hogs ]; then
  for i in 1 2; do sh -c 'while :; do :; done' & HOGS+=($!); done
fi
uptime
for round in 1 2 3; do
  for who in qsd old new; do
    qemu-img create -q -f qcow2 $D/empty.qcow2 1G
    case $who in
      qsd) out=$($D/measure-qsd.sh x $D/empty.qcow2 write off) ;;
      old) out=$($D/measure.sh $OLD $D/empty.qcow2 write off) ;;
      new) out=$($D/measure.sh $NEW $D/empty.qcow2 write off) ;;
    esac
    echo "round $round $who $(echo "$out" | grep -o 'write_iops [0-9]*')"
  done
done
[ ${#HOGS[@]} -gt 0 ] && kill "${HOGS[@]}"
uptime
