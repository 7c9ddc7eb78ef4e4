#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-or-later
# Side-by-side FUSE export benchmark: bexd against qemu-storage-daemon, fio without FUSE and the
# limit responder. See perf/README.md; `perf/run.sh --help` lists the options.
here=$(cd "$(dirname "$0")" && pwd)
PYTHONDONTWRITEBYTECODE=1 PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}" exec python3 -m harness "$@"
