#!/bin/sh
# Builds the vhost-user-fs chain fuzzer (clang, libFuzzer, ASan + UBSan) in its own build directory
# and runs it. Usage: fuzz/run.sh [seconds, default 60] [extra libFuzzer flags...]
# The corpus grows in build-fuzz/corpus/ and is reused by later runs; a crash leaves its input in
# build-fuzz/artifacts/ (re-run it with: build-fuzz/fuzz/vhost_chain_fuzzer <file>).
set -eu
seconds=${1:-60}
[ $# -gt 0 ] && shift
source_dir=$(cd "$(dirname "$0")/.." && pwd)
build_dir=${BEXD_FUZZ_BUILD_DIR:-$source_dir/build-fuzz}

CC=clang CXX=clang++ cmake -S "$source_dir" -B "$build_dir" -G Ninja -DBEXD_FUZZ=ON \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build_dir" --target vhost_chain_fuzzer -j 2

mkdir -p "$build_dir/corpus" "$build_dir/artifacts"
python3 "$source_dir/fuzz/seeds.py" "$build_dir/corpus"
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
exec "$build_dir/fuzz/vhost_chain_fuzzer" -max_total_time="$seconds" -max_len=70000 \
  -rss_limit_mb=2048 -artifact_prefix="$build_dir/artifacts/" "$@" "$build_dir/corpus"
