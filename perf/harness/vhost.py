# SPDX-License-Identifier: GPL-2.0-or-later
"""Running one vhost_bench cell (the vhost-user-fs export, driven by the test frontend)."""

import json
import subprocess

from harness import fio


class VhostBenchError(Exception):
    """vhost_bench failed or printed something that is not a result."""


def bench_command(binary, workload, socket_path, queues, runtime_s, ramp_s, direct):
    """The same cell as fio's: bs 4k, aio = 16 requests in flight per ring, sync = 1. With
    `direct`, OPEN asks for O_DIRECT as fio's --direct=1 in a guest would."""
    depth = fio.AIO_DEPTH if workload.engine == "aio" else 1
    return [binary, f"--socket={socket_path}", "--file=n0", f"--queues={queues}",
            f"--rw={workload.rw}", f"--iodepth={depth}", f"--bs={fio.BLOCK_SIZE}",
            f"--direct={int(direct)}", f"--runtime={runtime_s:g}", f"--ramp={ramp_s:g}"]


def run_bench(command, timeout_s):
    """Runs vhost_bench; returns the same keys as fio.run_fio (the frontend's CPU use in the
    fio_* columns)."""
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise VhostBenchError(f"vhost_bench did not finish within {timeout_s:.0f} s") from None
    if done.returncode != 0:
        raise VhostBenchError(f"vhost_bench exited with status {done.returncode}: "
                              f"{done.stderr.strip()[-2000:]}")
    try:
        report = json.loads(done.stdout)
    except json.JSONDecodeError as error:
        raise VhostBenchError(f"vhost_bench printed no valid JSON ({error})") from None
    return {
        "iops": report["iops"],
        "bw_kib": report["bw_kib"],
        "ios": report["ios"],
        "lat_mean_us": report["lat_mean_us"],
        "lat_p99_us": report["lat_p99_us"],
        "fio_usr_pct": report["client_usr_pct"],
        "fio_sys_pct": report["client_sys_pct"],
    }
