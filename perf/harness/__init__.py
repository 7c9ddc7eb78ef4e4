"""Benchmark harness for bexd's FUSE export (run through perf/run.sh)."""
