#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-or-later
# Builds the libFuzzer targets (clang, ASan + UBSan) in their own build directory and runs each for
# the given time: vhost_chain_fuzzer (hostile vhost-user-fs descriptor chains) and
# qcow2_image_fuzzer (hostile qcow2 images). Usage: fuzz/run.sh [seconds per target, default 60]
# [extra libFuzzer flags...]; BEXD_FUZZ_TARGETS picks targets (default: both).
# Each target's corpus grows in build-fuzz/corpus/ (vhost) or build-fuzz/corpus-qcow2/ and is
# reused by later runs; a crash leaves its input in build-fuzz/artifacts/ (re-run it with:
# build-fuzz/fuzz/<target> <file>).
set -eu
seconds=${1:-60}
[ $# -gt 0 ] && shift
source_dir=$(cd "$(dirname "$0")/.." && pwd)
build_dir=${BEXD_FUZZ_BUILD_DIR:-$source_dir/build-fuzz}
targets=${BEXD_FUZZ_TARGETS:-vhost_chain_fuzzer qcow2_image_fuzzer}

CC=clang CXX=clang++ cmake -S "$source_dir" -B "$build_dir" -G Ninja -DBEXD_FUZZ=ON \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
# shellcheck disable=SC2086
cmake --build "$build_dir" --target $targets -j 2

mkdir -p "$build_dir/artifacts"
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
for target in $targets; do
  case $target in
    vhost_chain_fuzzer)
      corpus=$build_dir/corpus
      mkdir -p "$corpus"
      python3 "$source_dir/fuzz/seeds.py" "$corpus"
      flags=-max_len=70000
      ;;
    qcow2_image_fuzzer)
      corpus=$build_dir/corpus-qcow2
      sh "$source_dir/fuzz/qcow2_seeds.sh" "$corpus"
      # The driver logs an error for every damaged image it meets; keep libFuzzer's own output.
      flags="-max_len=400000 -close_fd_mask=2"
      ;;
    *)
      echo "unknown fuzz target '$target'" >&2
      exit 2
      ;;
  esac
  echo "fuzz/run.sh: $target for ${seconds}s"
  # shellcheck disable=SC2086
  "$build_dir/fuzz/$target" -max_total_time="$seconds" -rss_limit_mb=2048 $flags \
    -artifact_prefix="$build_dir/artifacts/" "$@" "$corpus"
done
