#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-or-later
# Writes small, well-formed qcow2 seed inputs for qcow2_image_fuzzer into the directory given as
# argument: version 2 and 3, 512-byte to 64 KiB clusters, zlib and zstd compressed clusters, zero
# clusters, a backing file name, an internal snapshot, extended L2 entries, 8-bit refcounts, lazy
# refcounts left dirty. Each seed is a flags byte (see the fuzzer) followed by the image.
set -eu
out=$1
mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
seed() {  # name flags-byte create-options qemu-io-commands...
  name=$1 flags=$2 options=$3
  shift 3
  qemu-img create -q -f qcow2 -o "$options" "$work/$name" 1M
  for command in "$@"; do qemu-io -f qcow2 -c "$command" "$work/$name" >/dev/null; done
  printf "\\$(printf %o "$flags")" >"$out/$name"
  cat "$work/$name" >>"$out/$name"
}
seed v2-4k 0 compat=0.10,cluster_size=4096 'write -P 1 0 12k' 'write -P 2 600k 5000'
seed v3-512 0 cluster_size=512 'write -P 3 1000 3000' 'write -z 8k 4k'
seed v3-64k-zero 4 cluster_size=65536 'write -P 4 0 64k' 'write -z 64k 64k' 'discard 0 64k'
seed zlib 0 cluster_size=4096,compression_type=zlib 'write -c -P 5 0 4k' 'write -c -P 6 8k 4k'
seed zstd 0 cluster_size=4096,compression_type=zstd 'write -c -P 7 0 4k' 'write -P 8 4k 4k'
qemu-img create -q -f qcow2 "$work/base.qcow2" 1M
seed backed 1 cluster_size=4096,backing_file=base.qcow2,backing_fmt=qcow2 'write -P 9 4096 100'
seed extl2 1 cluster_size=16384,extended_l2=on,backing_file=base.qcow2,backing_fmt=qcow2 'write -P 10 512 1024' 'write -z 4096 2048'
seed refcount8 0 cluster_size=4096,refcount_bits=8 'write -P 11 0 8k'
seed lazy 2 cluster_size=4096,lazy_refcounts=on 'write -P 12 0 8k'
# Dirty (as a lazy-refcounts writer that died leaves it): set bit 0 of the incompatible features.
printf '\001' | dd of="$out/lazy" bs=1 seek=$((1 + 79)) conv=notrunc status=none
qemu-img create -q -f qcow2 -o cluster_size=4096 "$work/snapshot" 1M
qemu-io -f qcow2 -c 'write -P 13 0 8k' "$work/snapshot" >/dev/null
qemu-img snapshot -c first "$work/snapshot"
qemu-io -f qcow2 -c 'write -P 14 4k 4k' "$work/snapshot" >/dev/null
printf '\000' >"$out/snapshot"
cat "$work/snapshot" >>"$out/snapshot"
