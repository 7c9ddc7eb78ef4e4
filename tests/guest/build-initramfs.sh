#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-or-later
# Builds the guest's initramfs: static busybox, the kernel modules the test needs (with their
# dependencies, in load order), guest-init.sh as /init and the functions it sources,
# guest-lib.sh, as /lib/guest-lib.sh.
#
# Usage: build-initramfs.sh [--init SCRIPT] [--program PATH]... [--add SOURCE:DEST]...
#                           KERNEL_DIR OUTPUT
#   --init SCRIPT   the guest's /init instead of guest-init.sh (perf/guest/fio-init.sh)
#   --program PATH  a dynamically linked program (e.g. /usr/bin/fio) at the same path, with every
#                   shared library ldd lists for it and the dynamic loader, at their paths
#   --add SRC:DEST  a file copied to DEST (an absolute path in the guest)
# KERNEL_DIR is what fetch-kernel.sh prints. OUTPUT is an uncompressed newc cpio archive (no
# decompression in the guest, which costs time under TCG).
set -euo pipefail

die() {
  echo "build-initramfs: $*" >&2
  exit 1
}

here=$(cd "$(dirname "$0")" && pwd)
init=$here/guest-init.sh
programs=()
additions=()
while [[ $# -gt 2 ]]; do
  case $1 in
    --init) init=$2 ;;
    --program) programs+=("$2") ;;
    --add) additions+=("$2") ;;
    *) die "unknown option $1" ;;
  esac
  shift 2
done
[[ $# -eq 2 ]] || die "usage: build-initramfs.sh [--init SCRIPT] [--program PATH]..." \
  "[--add SOURCE:DEST]... KERNEL_DIR OUTPUT"
kernel=$1
output=$2
modules_dir=$kernel/modules
[[ -f $init ]] || die "the init script $init is missing"

# virtio_pci and virtiofs pull in fuse and the virtio core; loop and ext4 let the guest mount a
# filesystem inside the exported image; crc32c_generic is ext4's metadata checksum, which ext4
# requests through the crypto API rather than as a module dependency.
wanted=(virtio_pci virtiofs loop crc32c_generic ext4)

busybox=${BUSYBOX:-/bin/busybox}
[[ -x $busybox ]] || die "$busybox is missing (install busybox-static)"
if ldd "$busybox" >/dev/null 2>&1; then
  die "$busybox is dynamically linked; the initramfs needs busybox-static"
fi
[[ -d $modules_dir/kernel ]] || die "$modules_dir has no kernel modules"

root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
mkdir -p "$root"/{bin,dev,proc,sys,mnt,tmp,lib/modules}
cp "$busybox" "$root/bin/busybox"
# /init installs the other applet links itself; a few hundred ln calls here cost seconds.
ln -s busybox "$root/bin/sh"
install -m 755 "$init" "$root/init"
install -m 644 "$here/guest-lib.sh" "$root/lib/guest-lib.sh"

# A program and what the dynamic loader needs to run it: ldd prints "name => /path (address)"
# for each library and the loader's own path on a line of its own.
for program in "${programs[@]}"; do
  [[ -x $program ]] || die "$program is not an executable"
  libraries=$(ldd "$program" | sed -n 's/.*=> \(\/[^ ]*\) .*/\1/p; s/^[[:space:]]*\(\/[^ ]*\) .*/\1/p') ||
    die "ldd $program failed"
  for file in "$program" $libraries; do
    mkdir -p "$root$(dirname "$file")"
    cp -L "$file" "$root$file"
  done
done
# The loader finds libraries outside its default directories (ceph's) through the host's cache,
# which holds the same paths.
if [[ ${#programs[@]} -gt 0 && -f /etc/ld.so.cache ]]; then
  mkdir -p "$root/etc"
  cp /etc/ld.so.cache "$root/etc/ld.so.cache"
fi
for addition in "${additions[@]}"; do
  source=${addition%%:*}
  dest=${addition#*:}
  [[ -f $source && $dest == /* ]] || die "--add $addition: need an existing SOURCE and an absolute DEST"
  mkdir -p "$root$(dirname "$dest")"
  cp "$source" "$root$dest"
done

# Module names use '_' and '-' interchangeably; index the files by the '_' spelling.
declare -A module_path
while IFS= read -r -d '' file; do
  name=${file##*/}
  name=${name%%.ko*}
  module_path[${name//-/_}]=$file
done < <(find "$modules_dir/kernel" -name '*.ko*' -print0)

# Copies one module, uncompressed, to the initramfs.
copy_module() {
  local source=$1 target=$2
  case $source in
    *.ko) cp "$source" "$target" ;;
    *.ko.xz) xz -dc "$source" >"$target" ;;
    *.ko.zst) zstd -qdc "$source" >"$target" ;;
    *.ko.gz) gzip -dc "$source" >"$target" ;;
    *) die "$source: unknown module compression" ;;
  esac
}

# Modules built into the kernel (virtio_pci, virtiofs and fuse are, in Debian's 6.12) need no
# file; modules.builtin lists them by path.
declare -A builtin
if [[ -f $modules_dir/modules.builtin ]]; then
  while IFS= read -r file; do
    name=${file##*/}
    name=${name%.ko}
    builtin[${name//-/_}]=1
  done <"$modules_dir/modules.builtin"
fi

# Depth-first over "depends=" in each module's .modinfo section, so every module follows the
# modules it needs.
declare -A visited
order=()
add_module() {
  local name=${1//-/_}
  [[ -n ${visited[$name]:-} ]] && return
  visited[$name]=1
  [[ -n ${builtin[$name]:-} ]] && return
  local source=${module_path[$name]:-}
  [[ -n $source ]] || die "kernel module $name is not in $modules_dir"
  local target=$root/lib/modules/$name.ko
  copy_module "$source" "$target"
  local depends dependency
  depends=$(tr '\0' '\n' <"$target" | sed -n 's/^depends=//p')
  for dependency in ${depends//,/ }; do
    add_module "$dependency"
  done
  order+=("$name")
}
for name in "${wanted[@]}"; do
  add_module "$name"
done
printf '%s\n' "${order[@]}" >"$root/lib/modules/order"

(cd "$root" && find . -print0 | LC_ALL=C sort -z |
  cpio --null --create --format=newc --owner=0:0 --quiet) >"$output.partial" ||
  die "cpio failed"
mv "$output.partial" "$output"
