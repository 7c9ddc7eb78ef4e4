#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-or-later
# One command per job, each safe to run again:
#   scripts/setup.sh demo   install dependencies, build, start the demo export (in the background)
#   scripts/setup.sh test   install dependencies, build, run every test through ctest, then a
#                           list of QEMU's iotests against bexd (tests/qemu-iotests/run.sh)
#   scripts/setup.sh build  install dependencies and build only
#   scripts/setup.sh perf [perf/run.sh options]
#                           install dependencies, then run the benchmark (it builds its own
#                           Release tree in build-perf/)
# BUILD_DIR (default: build) and BEXD_DEMO_DIR (default: bexd's own default) may be set.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=${BUILD_DIR:-$root/build}
jobs=$(nproc)

as_root() {
  if [[ $(id -u) -eq 0 ]]; then "$@"; else sudo "$@"; fi
}

install_deps() {
  local packages missing=()
  mapfile -t packages < <(grep -Ev '^\s*(#|$)' "$root/scripts/deps.txt")
  for package in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q 'install ok installed' ||
      missing+=("$package")
  done
  if [[ ${#missing[@]} -eq 0 ]]; then
    echo "setup: all ${#packages[@]} packages are installed"
    return
  fi
  echo "setup: installing ${missing[*]}"
  as_root apt-get update -q
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
    "${packages[@]}"
}

ensure_fuse() {
  if [[ ! -c /dev/fuse ]]; then
    as_root modprobe fuse
  fi
  [[ -c /dev/fuse ]] || { echo "setup: /dev/fuse is missing and modprobe fuse did not help" >&2; exit 1; }
}

# The io_uring runs of the FUSE export tests (ctest *.io_uring) need the kernel to offer FUSE over
# io_uring, which it does only while this switch is on; bexd itself never turns it on.
enable_fuse_uring() {
  local switch=/sys/module/fuse/parameters/enable_uring
  if [[ ! -e $switch ]]; then
    echo "setup: this kernel has no FUSE over io_uring ($switch); the *.io_uring tests are skipped"
    return
  fi
  if [[ $(cat "$switch") != Y ]]; then
    echo "setup: enabling FUSE over io_uring for the *.io_uring tests: echo Y > $switch"
    echo Y | as_root tee "$switch" >/dev/null
  fi
}

build() {
  cmake -S "$root" -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
  cmake --build "$build_dir" -j "$jobs"
}

run_demo() {
  local dir=${BEXD_DEMO_DIR:-${XDG_STATE_HOME:-$HOME/.local/state}/bexd/demo}
  local pidfile=$dir/bexd.pid
  mkdir -p "$dir"
  if [[ -e $pidfile ]] && ! flock -n "$pidfile" true; then
    echo "setup: the demo is already running (pid $(cat "$pidfile")); its files are in $dir"
    echo "setup: stop it with: kill \$(cat $pidfile)"
    return
  fi
  "$build_dir/cli/bexd" --demo-dir "$dir" --daemonize
}

case ${1:-} in
  demo)
    install_deps
    ensure_fuse
    build
    run_demo
    ;;
  test)
    install_deps
    ensure_fuse
    enable_fuse_uring
    build
    # A short libFuzzer run over hostile descriptor chains (clang, ASan + UBSan); a finding fails.
    "$root/fuzz/run.sh" 60
    ctest --test-dir "$build_dir" --output-on-failure -j "$jobs"
    # QEMU's own iotests, with bexd in the place of qemu-storage-daemon (a list that runs quickly).
    for fmt in qcow2 raw; do
      BEXD_BINARY=$build_dir/cli/bexd "$root/tests/qemu-iotests/run.sh" --quick --fmt "$fmt" \
        --out "$build_dir/qemu-iotests"
    done
    ;;
  build)
    install_deps
    build
    ;;
  perf)
    install_deps
    ensure_fuse
    shift
    exec "$root/perf/run.sh" "$@"
    ;;
  *)
    echo "usage: $0 demo|test|build|perf [perf/run.sh options]" >&2
    exit 2
    ;;
esac
