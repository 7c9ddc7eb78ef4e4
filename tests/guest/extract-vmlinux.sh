#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-or-later
# Extracts the uncompressed ELF kernel from an x86 bzImage.
#
# Usage: extract-vmlinux.sh BZIMAGE OUTPUT
# The boot protocol header (2.08 or newer) says where the compressed payload sits: it starts
# payload_offset bytes into the protected-mode code, which follows the (setup_sects + 1) 512-byte
# real-mode sectors. The payload's magic tells the compressor. Fails, leaving no OUTPUT, when the
# image is not a bzImage, uses an unsupported compressor, or does not decompress to an ELF file.
set -euo pipefail

die() {
  echo "extract-vmlinux: $*" >&2
  exit 1
}

[[ $# -eq 2 ]] || die "usage: extract-vmlinux.sh BZIMAGE OUTPUT"
image=$1
output=$2
[[ -r $image ]] || die "cannot read $image"

# Unsigned little-endian integer of WIDTH bytes at OFFSET.
read_uint() {
  od -An -tu"$2" -j "$1" -N "$2" "$image" | tr -d ' '
}
read_hex() {
  od -An -tx1 -j "$1" -N "$2" "$image" | tr -d ' \n'
}

[[ $(read_hex 0x202 4) == 48647253 ]] || die "$image has no boot protocol header (not a bzImage)"
version=$(read_uint 0x206 2)
((version >= 0x208)) || die "$image uses boot protocol $(printf '%#x' "$version"); need 2.08+"
setup_sects=$(read_uint 0x1f1 1)
((setup_sects == 0)) && setup_sects=4
payload_start=$(((setup_sects + 1) * 512 + $(read_uint 0x248 4)))
payload_length=$(read_uint 0x24c 4)

magic=$(read_hex "$payload_start" 6)
case $magic in
  fd377a585a00) decompress=(xz -dc --single-stream) ;;
  1f8b*) decompress=(gzip -dc) ;;
  28b52ffd*) decompress=(zstd -dc) ;;
  *) die "$image: payload magic $magic is not xz, gzip or zstd" ;;
esac
command -v "${decompress[0]}" >/dev/null || die "$image needs ${decompress[0]} to decompress"

partial=$output.partial
# The build appends the uncompressed size after the stream; gzip warns about it (status 2) and
# xz --single-stream ignores it, so the ELF check below is what decides success.
tail -c +"$((payload_start + 1))" "$image" | head -c "$payload_length" |
  "${decompress[@]}" >"$partial" 2>/dev/null || true
if [[ $(od -An -tx1 -N4 "$partial" | tr -d ' \n') != 7f454c46 ]]; then
  rm -f "$partial"
  die "$image: the ${decompress[0]} payload did not decompress to an ELF kernel"
fi
mv "$partial" "$output"
