# SPDX-License-Identifier: GPL-2.0-or-later
"""Benchmark harness for bexd's FUSE export (run through perf/run.sh)."""
