#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-or-later
# QEMU's own iotests with bexd in the place of qemu-storage-daemon. With `-fuse`, QEMU's iotests
# export every test image through `$QSD_PROG --blockdev file,... --export fuse,...,growable=on`
# and run qemu-img, qemu-io and QEMU on the mountpoint, so each test checks the export against
# QEMU's own expectations. The iotests come from the Debian source package of the installed QEMU,
# so they match the binaries they drive.
#
#   tests/qemu-iotests/run.sh [--fmt qcow2|raw|...] [--quick] [--compare-qsd] [--out DIR] [TEST...]
#
# Without TEST, every iotest that supports the fuse protocol (about 20 minutes for qcow2 here).
# --quick: the list below, which `scripts/setup.sh test` (and so CI) runs for both formats.
# --compare-qsd runs the same tests with qemu-storage-daemon too and fails if bexd fails a test
# that QSD passes; without it, any failed test fails. Tests that need what Debian's QEMU lacks
# fail under both, which is why the comparison is the useful mode for a full run.
#
# Set-up it does, and says so: adds deb-src entries for the configured Debian archives (apt-get
# source needs them), downloads QEMU's source package, and, since Debian's qemu-system has no
# qtest accelerator, lets the iotests start QEMU with TCG instead.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
fmt=qcow2
compare=no
quick=no
out=$root/build/qemu-iotests
tests=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --fmt) fmt=$2; shift 2 ;;
    --quick) quick=yes; shift ;;
    --compare-qsd) compare=yes; shift ;;
    --out) out=$2; shift 2 ;;
    -h|--help) sed -n '3,19p' "$0"; exit 0 ;;
    -*) echo "run.sh: unknown option $1" >&2; exit 2 ;;
    *) tests+=("$1"); shift ;;
  esac
done
case $fmt in
  raw|qcow2|qed|vmdk|vpc|vdi|vhdx|luks|parallels) ;;
  *) echo "run.sh: --fmt: one of raw qcow2 qed vmdk vpc vdi vhdx luks parallels" >&2; exit 2 ;;
esac
# Iotests bexd passes that take under about 7 s each, about a minute and a half per format:
# sizes, allocation, discard and `qemu-img map` through the export (175, 221, 250), resize
# (106), backing chains, snapshots, repairs. (095, QEMU itself on the export, passes too, but its
# output depends on timing: a job may report a pause.)
if [[ $quick == yes ]]; then
  case $fmt in
    qcow2) tests+=(001 002 004 005 007 009 010 011 017 021 027 031 032 035 046 047 050 054 062 090
                   103 104 105 107 111 138 162 174 187 209 217 235 250 252 265 268 277 289 292 302
                   303 305) ;;
    raw) tests+=(001 002 003 004 005 008 009 010 011 021 032 077 104 106 162 175 221 277) ;;
    *) echo "run.sh: --quick has lists for qcow2 and raw only" >&2; exit 2 ;;
  esac
fi
bexd=${BEXD_BINARY:-$root/build/cli/bexd}
[[ -x $bexd ]] || { echo "run.sh: $bexd is missing; build first (scripts/setup.sh build)" >&2; exit 2; }

as_root() {
  if [[ $(id -u) -eq 0 ]]; then "$@"; else sudo "$@"; fi
}

# deb-src twins of the configured deb entries, in one file of our own.
add_source_entries() {
  local list=/etc/apt/sources.list.d/bexd-deb-src.sources file
  echo "run.sh: adding deb-src entries for QEMU's source package: $list"
  for file in /etc/apt/sources.list.d/*.sources; do
    [[ -e $file && $file != "$list" ]] || continue
    sed -e 's/^Types:.*\bdeb\b.*$/Types: deb-src/' "$file"
    echo
  done | as_root tee "$list" >/dev/null
  if [[ -e /etc/apt/sources.list ]]; then
    grep -E '^deb\s' /etc/apt/sources.list | sed 's/^deb\s/deb-src /' |
      as_root tee /etc/apt/sources.list.d/bexd-deb-src.list >/dev/null
  fi
  as_root apt-get update -q
}

# The iotests and QEMU's python package from the source of the installed QEMU; prints the tree.
fetch_iotests() {
  local version dir tarball
  version=$(dpkg-query -W -f='${source:Version}' qemu-system-common)
  # No ':' (an epoch) in the path: the iotests put it into PYTHONPATH.
  dir=$out/source/${version//:/_}
  if [[ ! -e $dir/done ]]; then
    rm -rf "$dir"
    mkdir -p "$dir"
    # Not `apt-cache ... | grep -q`: grep leaving early fails the pipe under pipefail.
    if ! grep -qxF "Version: $version" <<<"$(apt-cache showsrc qemu 2>/dev/null)"; then
      add_source_entries >&2
    fi
    # errexit does not hold inside the $(fetch_iotests) that runs this: fail by hand, before
    # `done` marks the tree complete.
    (cd "$dir" && apt-get source --download-only "qemu=$version" >&2) ||
      { echo "run.sh: cannot download QEMU's source package $version" >&2; exit 2; }
    tarball=$(ls "$dir"/qemu_*.orig.tar.*) ||
      { echo "run.sh: no QEMU source tarball in $dir" >&2; exit 2; }
    tar -xf "$tarball" -C "$dir" --strip-components=1 --wildcards '*/tests/qemu-iotests' '*/python' ||
      { echo "run.sh: cannot unpack $tarball" >&2; exit 2; }
    if ! qemu-system-x86_64 -accel help 2>/dev/null | grep -qx qtest; then
      sed -i 's/-accel qtest/-accel tcg/' "$dir/tests/qemu-iotests/testenv.py"
    fi
    touch "$dir/done"
  fi
  wait_for_fuse_mount "$dir/tests/qemu-iotests/common.rc"
  echo "$dir/tests/qemu-iotests"
}

# _make_test_img goes on once the daemon's pid file exists, but the subshell writes it before it
# execs the daemon: a test then sometimes opens the mountpoint before the export is mounted on it
# and sees the empty file under it ("Image is not in qcow2 format"), whichever daemon runs. Make
# it also wait (up to 10 s) for the mount. Idempotent: trees fetched before this get it too.
wait_for_fuse_mount() {
  local common_rc=$1
  grep -q 'bexd run.sh: wait for the mount' "$common_rc" && return
  sed -i '/^        rm -f "\$pidfile"$/a\
        # bexd run.sh: wait for the mount, not only for the pid file written before exec\
        timeout=100\
        while ! mountpoint -q "$export_mp" && [ $timeout -gt 0 ]; do\
            sleep 0.1\
            timeout=$((timeout - 1))\
        done' "$common_rc"
  grep -q 'bexd run.sh: wait for the mount' "$common_rc" ||
    { echo "run.sh: cannot add the wait for the mount to $common_rc" >&2; exit 2; }
}

# Runs the iotests with `daemon` as QSD_PROG; leaves "TEST RESULT" lines in $out/NAME.results.
run_check() {
  local name=$1 daemon=$2 iotests=$3
  local work=$out/$name
  rm -rf "$work"
  mkdir -p "$work/scratch" "$work/sock"
  echo "run.sh: QEMU iotests -fuse -$fmt with QSD_PROG=$daemon (log: $work.log)"
  (cd "$iotests" &&
    QEMU_PROG=$(command -v qemu-system-x86_64) QEMU_IMG_PROG=$(command -v qemu-img) \
    QEMU_IO_PROG=$(command -v qemu-io) QEMU_NBD_PROG=$(command -v qemu-nbd) QSD_PROG=$daemon \
    TEST_DIR=$work/scratch SOCK_DIR=$work/sock \
    python3 ./check -fuse "-$fmt" "${tests[@]}" >"$work.log" 2>&1) || true
  # check redraws each line with \r; keep the final "NAME pass|fail|not run" lines.
  sed 's/\r/\n/g' "$work.log" | grep -aE '^[^ ]+ +(pass|fail|not run) ' |
    awk '{print $1, ($2 == "not" ? "skip" : $2)}' | sort -u >"$out/$name.results"
  echo "run.sh: $(grep -c ' pass$' "$out/$name.results" || true) passed," \
    "$(grep -c ' fail$' "$out/$name.results" || true) failed," \
    "$(grep -c ' skip$' "$out/$name.results" || true) not run"
}

mkdir -p "$out"
iotests=$(fetch_iotests)
run_check "bexd-$fmt" "$bexd" "$iotests"
if [[ $compare == yes ]]; then
  run_check "qsd-$fmt" "$(command -v qemu-storage-daemon)" "$iotests"
  worse=$(join "$out/qsd-$fmt.results" "$out/bexd-$fmt.results" |
    awk '$2 == "pass" && $3 != "pass" {print $1}')
  if [[ -n $worse ]]; then
    echo "run.sh: bexd fails where qemu-storage-daemon passes:" $worse >&2
    echo "run.sh: diffs in $out/bexd-$fmt.log" >&2
    exit 1
  fi
  echo "run.sh: bexd passes every test qemu-storage-daemon passes"
else
  failed=$(awk '$2 == "fail" {print $1}' "$out/bexd-$fmt.results")
  if [[ -n $failed ]]; then
    echo "run.sh: failed:" $failed "(diffs in $out/bexd-$fmt.log)" >&2
    exit 1
  fi
fi
