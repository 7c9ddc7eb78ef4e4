#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-or-later
# End-to-end test of the vhost-user-fs export with a real guest: QEMU (TCG) boots the Debian
# kernel with a busybox initramfs, guest-init.sh mounts the export over virtio-fs, checks the image
# file, copies a host-written pattern with page-cache and O_DIRECT writes, reads it back, edits an
# ext4 filesystem inside the image through a loop device, with 2 or more vCPUs copies the pattern
# from every vCPU at once, and powers off. The host then checks the backing file and, for bexd,
# which request queues served the guest (QMP x-query-export-stats).
#
# Usage: run-guest-test.sh [options]
#   --backend bexd|virtiofsd  the vhost-user-fs backend (default bexd). virtiofsd is QEMU's
#                             reference daemon (/usr/lib/qemu/virtiofsd) sharing a directory that
#                             holds the image; it validates the guest pieces independently of bexd.
#   --bexd PATH               the bexd executable (default: $BEXD_BINARY)
#   --queues N                virtio-fs request queues (default 2; virtiofsd uses 1)
#   --format raw|qcow2        (bexd) the image format (default raw). With qcow2 the host converts
#                             the prepared image to qcow2, bexd exports a qcow2 node over a file
#                             node, and afterwards `qemu-img check` must find the image clean and
#                             the checks below run on what `qemu-img convert -O raw` reads from it.
#   --cpus N                  guest vCPUs, 1 to 4 (default 1)
#   --kernel PACKAGE          the Debian meta package naming the guest kernel (default
#                             linux-image-amd64, Debian 12's 6.1; linux-image-6.12-amd64 is 6.12
#                             from the security archive, whose virtio-fs driver maps CPUs to
#                             request queues)
#   --every-queue             (bexd, no value) fail unless every request queue served READs and
#                             WRITEs; needs a multi-queue guest kernel and --cpus >= --queues
#   --cache DIR               kernel cache (default: $BEXD_GUEST_CACHE, else /var/cache/bexd-guest,
#                             else ~/.cache/bexd-guest)
#   --work DIR                scratch directory, kept afterwards (default: a temporary directory,
#                             removed on success)
#   --timeout SECONDS         limit for the guest run (default 240)
# Exit status: 0 when the guest and the host checks pass, 77 when the kernel package cannot be
# fetched (nothing ran), 1 otherwise. The last line of output says what passed or what failed.
set -euo pipefail
# mkfs.ext4, e2fsck and debugfs live in sbin, which a non-root PATH may lack.
PATH=$PATH:/usr/sbin:/sbin

here=$(cd "$(dirname "$0")" && pwd)
backend=bexd
bexd=${BEXD_BINARY:-}
queues=2
cpus=1
kernel_meta=linux-image-amd64
every_queue=0
format=raw
cache=${BEXD_GUEST_CACHE:-}
keep_work=0
timeout=240
qemu=${QEMU:-qemu-system-x86_64}
virtiofsd=${VIRTIOFSD:-/usr/lib/qemu/virtiofsd}

work=
die() {
  local kept=
  [[ -n $work && -d $work ]] && kept=" (work directory $work kept)"
  echo "guest test: FAIL: $*$kept" >&2
  exit 1
}

while [[ $# -gt 0 ]]; do
  if [[ $1 == --every-queue ]]; then
    every_queue=1
    shift
    continue
  fi
  [[ $# -ge 2 ]] || die "option $1 needs a value"
  case $1 in
    --backend) backend=$2 ;;
    --bexd) bexd=$2 ;;
    --queues) queues=$2 ;;
    --format) format=$2 ;;
    --cpus) cpus=$2 ;;
    --kernel) kernel_meta=$2 ;;
    --cache) cache=$2 ;;
    --work) work=$2 keep_work=1 ;;
    --timeout) timeout=$2 ;;
    *) die "unknown option $1 (see the comment at the top of $0)" ;;
  esac
  shift 2
done
[[ $queues =~ ^[1-9][0-9]*$ ]] || die "--queues must be a positive number, not '$queues'"
[[ $timeout =~ ^[1-9][0-9]*$ ]] || die "--timeout must be a positive number, not '$timeout'"
[[ $cpus =~ ^[1-4]$ ]] || die "--cpus must be 1 to 4, not '$cpus'"
[[ $format == raw || $format == qcow2 ]] || die "--format must be raw or qcow2, not '$format'"
[[ $format == raw || $backend == bexd ]] || die "--format qcow2 needs --backend bexd"
case $backend in
  bexd) [[ -x $bexd ]] || die "no bexd executable (--bexd or BEXD_BINARY): '$bexd'" ;;
  virtiofsd)
    [[ -x $virtiofsd ]] || die "$virtiofsd is missing (package qemu-system-common)"
    queues=1
    ((every_queue == 0)) || die "--every-queue needs bexd's per-queue counters"
    ;;
  *) die "--backend must be bexd or virtiofsd, not '$backend'" ;;
esac
((every_queue == 0 || cpus >= queues)) ||
  die "--every-queue needs at least as many vCPUs as request queues ($cpus < $queues)"
command -v "$qemu" >/dev/null || die "$qemu is missing (package qemu-system-x86)"

if [[ -z $cache ]]; then
  cache=/var/cache/bexd-guest
  mkdir -p "$cache" 2>/dev/null && [[ -w $cache ]] || cache=${XDG_CACHE_HOME:-$HOME/.cache}/bexd-guest
fi
if [[ -z $work ]]; then
  work=$(mktemp -d "${TMPDIR:-/tmp}/bexd-guest.XXXXXX")
fi
mkdir -p "$work"

backend_pid=
qemu_pid=
cleanup() {
  [[ -n $qemu_pid ]] && kill -KILL "$qemu_pid" 2>/dev/null
  [[ -n $backend_pid ]] && kill -KILL "$backend_pid" 2>/dev/null
  wait 2>/dev/null
  return 0
}
trap cleanup EXIT
interrupted() {
  [[ -f $work/console.log ]] && tail -n 40 "$work/console.log" >&2
  die "interrupted"
}
trap interrupted TERM INT HUP

start=$SECONDS
if ! kernel=$("$here/fetch-kernel.sh" --meta "$kernel_meta" "$cache"); then
  echo "guest test: NO KERNEL: could not fetch the kernel of $kernel_meta (see above)" >&2
  exit 77
fi
"$here/build-initramfs.sh" "$kernel" "$work/initramfs.cpio" || die "could not build the initramfs"
echo "guest test: kernel $(cat "$kernel/release"), work directory $work" >&2
if [[ -f $kernel/vmlinux ]]; then
  kernel_image=$kernel/vmlinux
else
  kernel_image=$kernel/vmlinuz
fi

# The image: a random pattern at 0 that the guest copies to copy_mib (page cache), direct_mib
# (O_DIRECT) and parallel_mib (concurrent O_DIRECT writers); an ext4 filesystem at fs_mib that the
# guest edits through a loop device; with several vCPUs, vCPU c copies the pattern to
# percpu_mib + c * pattern_mib.
file=disk0
size_mib=64
pattern_mib=4
copy_mib=4
direct_mib=8
parallel_mib=12
fs_mib=16
fs_size_mib=32
percpu_mib=48
share=$work/share
image=$share/$file
rm -rf "$share"
mkdir "$share"
head -c $((pattern_mib << 20)) /dev/urandom >"$work/pattern"
pattern_sha256=$(sha256sum "$work/pattern" | cut -d' ' -f1)
cp "$work/pattern" "$image"
truncate -s $((size_mib << 20)) "$image"
mkdir -p "$work/fs-content"
echo "written by the host" >"$work/fs-content/host.txt"
rm -f "$work/fs.img"
truncate -s "${fs_size_mib}M" "$work/fs.img"
mkfs.ext4 -q -F -d "$work/fs-content" "$work/fs.img" "${fs_size_mib}M" ||
  die "mkfs.ext4 failed (package e2fsprogs)"
dd if="$work/fs.img" of="$image" bs=1M seek="$fs_mib" conv=notrunc status=none
# The guest sees the same bytes either way; with qcow2 they live in a qcow2 image beside the share
# (64 KiB clusters, so the guest's 4 KiB and 1 MiB writes allocate and copy partial clusters).
blockdev="driver=file,node-name=$file,filename=$image"
if [[ $format == qcow2 ]]; then
  qcow2_image=$work/$file.qcow2
  qemu-img convert -f raw -O qcow2 "$image" "$qcow2_image" || die "qemu-img convert to qcow2 failed"
  blockdev="driver=qcow2,node-name=$file,file.driver=file,file.filename=$qcow2_image"
fi

socket=$work/vhost-user-fs.sock
# bexd writes its pid file once its exports listen. virtiofsd has no such signal; its socket
# appears at bind(), just before listen(), far less time than QEMU takes to start.
ready=$work/bexd.pid
qmp=$work/qmp.sock
rm -f "$socket" "$ready" "$qmp"
case $backend in
  bexd)
    "$bexd" --pidfile "$ready" --monitor "path=$qmp" \
      --blockdev "$blockdev" \
      --export "type=vhost-user-fs,id=vfs0,node-name=$file,addr.type=unix,addr.path=$socket,tag=images,writable=on,num-request-queues=$queues" \
      >"$work/backend.log" 2>&1 &
    ;;
  virtiofsd)
    # Its seccomp filter kills it when glibc creates a ninth malloc arena.
    MALLOC_ARENA_MAX=8 "$virtiofsd" --socket-path="$socket" -o source="$share" -o cache=none \
      >"$work/backend.log" 2>&1 &
    ready=$socket
    ;;
esac
backend_pid=$!

backend_failed() {
  echo "--- $backend log ($work/backend.log):" >&2
  tail -n 30 "$work/backend.log" >&2
  die "$*"
}

deadline=$((SECONDS + 10))
until [[ -s $ready || -S $ready ]]; do
  kill -0 "$backend_pid" 2>/dev/null || backend_failed "$backend exited before listening on $socket"
  ((SECONDS < deadline)) || backend_failed "$backend did not get ready ($ready) within 10 s"
  sleep 0.1
done

# Parallel TCG even for one vCPU: QEMU before 8.1 drops guest memory barriers in single-threaded
# TCG, and virtio then occasionally loses a completion interrupt. Parallel mode needs maxcpus > 1.
# With several vCPUs under QEMU 7.2's parallel TCG, a guest kernel that patches its running code
# after bringing up the other CPUs occasionally dies of a stale int3 ("Oops: int3" in
# sched_clock_cpu, seen once in the 6.12 guest): 6.12 enables the sched_clock_stable static key
# in a late initcall, 6 s into the boot. tsc=unstable keeps the scheduler clock unstable from the
# start, so there is nothing to patch then (the guest's clocksource becomes the HPET).
kernel_smp_args=
((cpus < 2)) || kernel_smp_args=" tsc=unstable"
qemu_command=(
  "$qemu" -nodefaults -no-user-config -display none -no-reboot
  -machine pc -accel "tcg,thread=multi" -smp "$cpus,maxcpus=$((cpus < 2 ? 2 : cpus))" -m 512M
  -object "memory-backend-memfd,id=mem,size=512M,share=on" -numa "node,memdev=mem"
  -chardev "socket,id=c0,path=$socket"
  -device "vhost-user-fs-pci,chardev=c0,tag=images,num-request-queues=$queues"
  -kernel "$kernel_image" -initrd "$work/initramfs.cpio"
  -append "console=ttyS0 panic=-1 loglevel=4${kernel_smp_args} bexd.tag=images bexd.file=$file bexd.size=$((size_mib << 20)) bexd.pattern_mib=$pattern_mib bexd.pattern_sha256=$pattern_sha256 bexd.copy_mib=$copy_mib bexd.direct_mib=$direct_mib bexd.parallel_mib=$parallel_mib bexd.fs_mib=$fs_mib bexd.percpu_mib=$percpu_mib"
  -serial "file:$work/console.log"
)
printf '%q ' "${qemu_command[@]}" >"$work/qemu-command"
boot_start=$SECONDS
"${qemu_command[@]}" >"$work/qemu.log" 2>&1 &
qemu_pid=$!

guest_failed() {
  echo "--- guest console ($work/console.log):" >&2
  tail -n 40 "$work/console.log" >&2
  if [[ -s $work/qemu.log ]]; then
    echo "--- QEMU ($work/qemu.log):" >&2
    tail -n 20 "$work/qemu.log" >&2
  fi
  backend_failed "$*"
}

# QEMU 7.2's vhost-user-fs does not reconnect: if the backend dies, the guest waits forever. A
# backend may end right after the guest powers off and disconnects (virtiofsd does), so QEMU gets
# a moment to exit by itself before it counts as stuck.
deadline=$((SECONDS + timeout))
while kill -0 "$qemu_pid" 2>/dev/null; do
  if ! kill -0 "$backend_pid" 2>/dev/null; then
    grace=$((SECONDS + 5))
    while kill -0 "$qemu_pid" 2>/dev/null && ((SECONDS < grace)); do
      sleep 0.1
    done
    if kill -0 "$qemu_pid" 2>/dev/null; then
      kill -KILL "$qemu_pid" 2>/dev/null || true
      guest_failed "$backend died while the guest ran"
    fi
    break
  fi
  if ((SECONDS >= deadline)); then
    kill -KILL "$qemu_pid" 2>/dev/null || true
    guest_failed "the guest did not finish within $timeout s"
  fi
  sleep 0.2
done
qemu_status=0
wait "$qemu_pid" || qemu_status=$?
qemu_pid=
guest_seconds=$((SECONDS - boot_start))
((qemu_status == 0)) || guest_failed "QEMU exited with status $qemu_status"
grep -q '^BEXD-GUEST-RESULT: PASS' "$work/console.log" || guest_failed "the guest did not pass"

# bexd is a daemon: it must survive the guest's disconnect and stop cleanly on SIGTERM. virtiofsd
# serves one connection and exits by itself.
queue_summary=
if [[ $backend == bexd ]]; then
  kill -0 "$backend_pid" 2>/dev/null || backend_failed "bexd exited when the guest disconnected"
  # Queue 0 is the hiprio ring (FORGET, INTERRUPT), 1..N the request queues.
  python3 "$here/export-stats.py" "$qmp" vfs0 >"$work/queue-stats" ||
    backend_failed "could not read the export's per-queue counters over QMP"
  stats_lines=$(wc -l <"$work/queue-stats")
  ((stats_lines == queues + 1)) ||
    backend_failed "x-query-export-stats lists $stats_lines queues, expected hiprio + $queues"
  while read -r index _ reads writes _; do
    ((index == 0)) && continue
    queue_summary+=" q$index: $reads reads, $writes writes;"
    if ((every_queue && (reads == 0 || writes == 0))); then
      backend_failed "request queue $index served $reads READs and $writes WRITEs; the guest" \
        "($cpus vCPUs, kernel $(cat "$kernel/release")) did not use every request queue"
    fi
  done <"$work/queue-stats"
  kill -TERM "$backend_pid" 2>/dev/null || true
fi
deadline=$((SECONDS + 10))
while kill -0 "$backend_pid" 2>/dev/null && ((SECONDS < deadline)); do
  sleep 0.1
done
kill -0 "$backend_pid" 2>/dev/null && backend_failed "$backend did not exit within 10 s"
backend_status=0
wait "$backend_pid" || backend_status=$?
backend_pid=
((backend_status == 0)) || backend_failed "$backend exited with status $backend_status"
if [[ $backend == bexd ]] && grep -q '^bexd: error:' "$work/backend.log"; then
  backend_failed "bexd logged errors during a run the guest passed"
fi

# The host's view of what the guest wrote; for qcow2, what QEMU reads from the image.
if [[ $format == qcow2 ]]; then
  qemu-img check "$qcow2_image" >"$work/qemu-img-check.log" 2>&1 ||
    die "qemu-img check finds errors in the qcow2 image (see $work/qemu-img-check.log)"
  qemu-img convert -f qcow2 -O raw "$qcow2_image" "$image" || die "qemu-img convert to raw failed"
fi
copies=("$copy_mib" "$direct_mib" "$parallel_mib")
if ((cpus >= 2)); then
  for ((cpu = 0; cpu < cpus; ++cpu)); do
    copies+=($((percpu_mib + cpu * pattern_mib)))
  done
fi
for offset in "${copies[@]}"; do
  cmp -s -n $((pattern_mib << 20)) -i 0:$((offset << 20)) "$work/pattern" "$image" ||
    die "the backing file at $offset MiB does not hold the pattern the guest wrote"
done
actual_size=$(stat -c %s "$image")
((actual_size == size_mib << 20)) || die "the backing file changed size to $actual_size bytes"
dd if="$image" of="$work/fs.img" bs=1M skip="$fs_mib" count="$fs_size_mib" status=none
e2fsck -fn "$work/fs.img" >"$work/e2fsck.log" 2>&1 ||
  die "e2fsck finds errors in the guest-written ext4 (see $work/e2fsck.log)"
guest_txt=$(debugfs -R 'cat /guest.txt' "$work/fs.img" 2>/dev/null)
[[ $guest_txt == "$pattern_sha256" ]] || die "ext4's guest.txt holds '$guest_txt'"

mounted=$(sed -n 's/^BEXD-GUEST: mounted .* after \([0-9.]*\) s.*/\1/p' "$work/console.log")
((keep_work)) || rm -rf "$work"
echo "guest test: PASS ($backend, $format, $queues queues,${queue_summary} kernel $(cat "$kernel/release")," \
  "$cpus vCPUs; guest mounted the export ${mounted:-?} s after boot; guest run" \
  "${guest_seconds} s; total $((SECONDS - start)) s)"
