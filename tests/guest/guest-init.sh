#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-or-later
# /init of the test guest (busybox sh, PID 1). Mounts the virtio-fs export, checks the image file
# it shows, writes and reads back data, and powers off. Every step prints a marker on the console;
# the last line is "BEXD-GUEST-RESULT: PASS" or "BEXD-GUEST-RESULT: FAIL <why>". run-guest-test.sh
# passes the parameters on the kernel command line as bexd.<name>=<value> and checks the image
# afterwards.
#
# Image layout (offsets and sizes in MiB, set by the host):
#   [0, pattern_mib)                    random pattern written by the host
#   [copy_mib, copy_mib + pattern_mib)  the guest copies the pattern here, page cache + fsync
#   [direct_mib, ... + pattern_mib)     the guest copies the pattern here with O_DIRECT
#   [parallel_mib, ... + pattern_mib)   ditto, by one O_DIRECT writer per MiB at the same time
#   [fs_mib, fs_mib + fs_size_mib)      an ext4 filesystem made by the host (optional)
#   [percpu_mib + c * pattern_mib, ...) CPU c copies the pattern here with O_DIRECT, pinned to
#                                       itself, all CPUs at once (optional; with 2 or more CPUs,
#                                       a multi-queue virtio-fs driver sends each CPU's requests
#                                       on its own request queue)

PATH=/bin
export PATH
/bin/busybox --install -s /bin
. /lib/guest-lib.sh

step() {
  echo "BEXD-GUEST: $*"
}

# sha256 of COUNT MiB of FILE starting SKIP MiB in, read with the extra dd flags given.
region_sha256() {
  dd if="$1" bs=64k skip=$(($2 * 16)) count=$(($3 * 16)) ${4:+"$4"} 2>/dev/null | sha256sum |
    cut -d' ' -f1
}

drop_caches() {
  sync
  echo 3 >/proc/sys/vm/drop_caches
}

# Waits for the background jobs PIDS...; fails naming WHAT when one of them failed.
wait_all() {
  what=$1
  shift
  for pid in "$@"; do
    wait "$pid" || fail "$what failed"
  done
}

start_guest

for name in tag file size pattern_mib pattern_sha256 copy_mib direct_mib parallel_mib; do
  require "$name"
done

mount -t virtiofs "$tag" /mnt || fail "mount -t virtiofs $tag"
step "mounted $tag after $(cut -d' ' -f1 /proc/uptime) s"

ls -l /mnt
entries=$(ls -A /mnt)
[ "$entries" = "$file" ] || fail "the share holds '$entries', expected only '$file'"
[ -f "/mnt/$file" ] || fail "/mnt/$file is not a regular file"
actual_size=$(stat -c %s "/mnt/$file")
[ "$actual_size" = "$size" ] || fail "/mnt/$file has $actual_size bytes, expected $size"
step "listing ok: $file, $size bytes"

image=/mnt/$file
sha=$(region_sha256 "$image" 0 "$pattern_mib" "")
[ "$sha" = "$pattern_sha256" ] || fail "host pattern reads back as $sha (page cache)"
sha=$(region_sha256 "$image" 0 "$pattern_mib" iflag=direct)
[ "$sha" = "$pattern_sha256" ] || fail "host pattern reads back as $sha (O_DIRECT)"
step "host pattern read ok"

dd if="$image" of="$image" bs=1M count="$pattern_mib" seek="$copy_mib" conv=notrunc,fsync \
  2>/dev/null || fail "buffered copy to $copy_mib MiB"
dd if="$image" of="$image" bs=64k count=$((pattern_mib * 16)) seek=$((direct_mib * 16)) \
  iflag=direct oflag=direct conv=notrunc 2>/dev/null || fail "O_DIRECT copy to $direct_mib MiB"
# Concurrent writers keep several requests in flight, so the backend completes them out of order.
writers=
mib=0
while [ "$mib" -lt "$pattern_mib" ]; do
  dd if="$image" of="$image" bs=4k count=256 skip=$((mib * 256)) \
    seek=$(((parallel_mib + mib) * 256)) iflag=direct oflag=direct conv=notrunc 2>/dev/null &
  writers="$writers $!"
  mib=$((mib + 1))
done
# shellcheck disable=SC2086 # one argument per pid
wait_all "a concurrent O_DIRECT writer to $parallel_mib MiB" $writers
drop_caches
for offset in "$copy_mib" "$direct_mib" "$parallel_mib"; do
  sha=$(region_sha256 "$image" "$offset" "$pattern_mib" iflag=direct)
  [ "$sha" = "$pattern_sha256" ] || fail "copy at $offset MiB reads back as $sha (O_DIRECT)"
  sha=$(region_sha256 "$image" "$offset" "$pattern_mib" "")
  [ "$sha" = "$pattern_sha256" ] || fail "copy at $offset MiB reads back as $sha (page cache)"
done
step "write and read back ok"

# Reads at the end of the file: the last block reads in full, reads past it return nothing.
tail_bytes=$(dd if="$image" bs=4096 skip=$((size / 4096 - 1)) 2>/dev/null | wc -c)
[ "$tail_bytes" = 4096 ] || fail "the last 4 KiB block read $tail_bytes bytes"
past_bytes=$(dd if="$image" bs=4096 skip=$((size / 4096)) count=1 2>/dev/null | wc -c)
[ "$past_bytes" = 0 ] || fail "a read past the end returned $past_bytes bytes"
step "end of file ok"

# One O_DIRECT copier pinned to each CPU, all at once: Linux 6.10 and newer map CPUs to request
# queues (virtio_fs_map_queues), so every queue gets READs and WRITEs; older kernels use the first.
percpu_mib=$(param percpu_mib)
cpus=$(nproc)
if [ -n "$percpu_mib" ] && [ "$cpus" -ge 2 ]; then
  copiers=
  cpu=0
  while [ "$cpu" -lt "$cpus" ]; do
    taskset -c "$cpu" dd if="$image" of="$image" bs=4k count=$((pattern_mib * 256)) \
      seek=$(((percpu_mib + cpu * pattern_mib) * 256)) iflag=direct oflag=direct conv=notrunc \
      2>/dev/null &
    copiers="$copiers $!"
    cpu=$((cpu + 1))
  done
  # shellcheck disable=SC2086 # one argument per pid
  wait_all "a pinned O_DIRECT copier to $percpu_mib MiB" $copiers
  cpu=0
  while [ "$cpu" -lt "$cpus" ]; do
    offset=$((percpu_mib + cpu * pattern_mib))
    sha=$(region_sha256 "$image" "$offset" "$pattern_mib" iflag=direct)
    [ "$sha" = "$pattern_sha256" ] || fail "CPU $cpu's copy at $offset MiB reads back as $sha"
    cpu=$((cpu + 1))
  done
  step "per-CPU copies ok: $cpus CPUs"
fi

fs_mib=$(param fs_mib)
if [ -n "$fs_mib" ]; then
  mkdir -p /fs
  losetup -o $((fs_mib << 20)) /dev/loop0 "$image" || fail "losetup at $fs_mib MiB"
  mount -t ext4 /dev/loop0 /fs || fail "mount ext4 from the image"
  [ "$(cat /fs/host.txt)" = "written by the host" ] || fail "/fs/host.txt has other content"
  echo "$pattern_sha256" >/fs/guest.txt || fail "write /fs/guest.txt"
  umount /fs || fail "umount /fs"
  losetup -d /dev/loop0 || fail "losetup -d"
  step "ext4 in the image ok"
fi

drop_caches
umount /mnt || fail "umount /mnt"
pass
