#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-or-later
# Fetches the Debian kernel that a kernel meta package (default linux-image-amd64) currently points
# at into a cache, without installing it on the host, and prepares it for a direct QEMU boot.
#
# Usage: fetch-kernel.sh [--meta PACKAGE] CACHE_DIR
#   --meta   the meta package whose dependency names the kernel: linux-image-amd64 (Debian 12's
#            6.1) or linux-image-6.12-amd64 (6.12 from the bookworm security archive), ...
# Prints the directory that holds the prepared kernel:
#   DIR/vmlinux   the uncompressed ELF kernel (PVH entry: QEMU skips the bzImage decompressor,
#                 which costs seconds under TCG)
#   DIR/vmlinuz   the original bzImage (fallback when the ELF has no PVH note)
#   DIR/modules   the package's lib/modules/<release> tree
#   DIR/release   the kernel release string
#   DIR/meta      the meta package it was resolved from
# A second call with the same package version reuses the cache and downloads nothing; fetching a
# new version removes the older ones of the same meta package (kernels of other meta packages
# stay). When apt cannot resolve the package (no package lists), the newest cached kernel of the
# meta package is used.
set -euo pipefail

die() {
  echo "fetch-kernel: $*" >&2
  exit 1
}

meta=linux-image-amd64
if [[ ${1:-} == --meta ]]; then
  [[ $# -ge 2 ]] || die "--meta needs a package name"
  meta=$2
  shift 2
fi
[[ $# -eq 1 ]] || die "usage: fetch-kernel.sh [--meta PACKAGE] CACHE_DIR"
cache=$1
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$cache" || die "cannot create the cache directory $cache"

# The meta package a cached kernel came from; kernels cached before DIR/meta existed were all
# linux-image-amd64's.
meta_of() {
  if [[ -f $1/meta ]]; then cat "$1/meta"; else echo linux-image-amd64; fi
}

newest_cached() {
  local d newest=
  for d in "$cache"/linux-image-*; do
    [[ -f $d/complete && $(meta_of "$d") == "$meta" ]] || continue
    [[ -z $newest || $d -nt $newest ]] && newest=$d
  done
  [[ -n $newest ]] && echo "$newest"
}

# The meta package's dependency names the versioned kernel package and pins its version, e.g.
# "Depends: linux-image-6.1.0-57-amd64 (= 6.1.192-3)". Each apt-cache call costs about a second
# where apt keeps no binary cache, hence one call when the version is pinned.
resolve_package() {
  local dependency package version
  dependency=$(apt-cache show --no-all-versions "$meta" 2>/dev/null |
    sed -n 's/^Depends: //p' | tr ',' '\n' | grep -m1 '^ *linux-image-[0-9]') || return 1
  read -r package version <<<"$(sed -n 's/^ *\([^ ]*\)\( *(= *\([^)]*\))\)\?.*/\1 \3/p' \
    <<<"$dependency")"
  if [[ -z $version ]]; then
    version=$(apt-cache show --no-all-versions "$package" 2>/dev/null |
      sed -n 's/^Version: //p' | head -n1)
  fi
  [[ -n $package && -n $version ]] || return 1
  echo "$package" "$version"
}

if ! read -r package version < <(resolve_package); then
  if dir=$(newest_cached); then
    echo "fetch-kernel: apt cannot resolve $meta; using the cached $dir" >&2
    echo "$dir"
    exit 0
  fi
  die "apt cannot resolve $meta's kernel package (run apt-get update?) and" \
    "nothing of it is cached in $cache"
fi

dir=$cache/$package-$version
if [[ -f $dir/complete ]]; then
  echo "$dir"
  exit 0
fi

# Several test runs may start at once; one of them prepares the kernel, the others wait for it.
exec 9>"$cache/.lock"
flock -w 600 9 || die "timed out waiting for the lock on $cache"
if [[ -f $dir/complete ]]; then
  echo "$dir"
  exit 0
fi

staging=$(mktemp -d "$cache/.staging.XXXXXX")
chmod 755 "$staging" # apt-get download drops privileges to _apt
trap 'rm -rf "$staging"' EXIT
echo "fetch-kernel: downloading $package $version" >&2
(cd "$staging" && apt-get download -q "$package=$version" >&2) ||
  die "apt-get download $package=$version failed"
debs=("$staging"/*.deb)
deb=${debs[0]}
dpkg-deb -x "$deb" "$staging/root" || die "dpkg-deb -x $deb failed"

kernels=("$staging"/root/boot/vmlinuz-*)
vmlinuz=${kernels[0]}
[[ -f $vmlinuz ]] || die "$deb holds no boot/vmlinuz-*"
release=${vmlinuz##*/vmlinuz-}
[[ -d $staging/root/lib/modules/$release ]] || die "$deb holds no lib/modules/$release"

mkdir "$staging/out"
mv "$vmlinuz" "$staging/out/vmlinuz"
mv "$staging/root/lib/modules/$release" "$staging/out/modules"
echo "$release" >"$staging/out/release"
echo "$meta" >"$staging/out/meta"
if ! "$here/extract-vmlinux.sh" "$staging/out/vmlinuz" "$staging/out/vmlinux"; then
  echo "fetch-kernel: no uncompressed kernel; guests boot the bzImage (slower)" >&2
fi
touch "$staging/out/complete"
rm -rf "$dir"
mv "$staging/out" "$dir"
echo "fetch-kernel: cached $package $version in $dir" >&2
# Each kernel takes about 400 MiB; the ones security updates superseded are not needed again.
for old in "$cache"/linux-image-*; do
  [[ $old == "$dir" || ! -d $old || $(meta_of "$old") != "$meta" ]] || rm -rf "$old"
done
echo "$dir"
