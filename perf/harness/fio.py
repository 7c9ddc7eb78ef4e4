# SPDX-License-Identifier: GPL-2.0-or-later
"""Running one fio cell and reading its result."""

import json
import subprocess

BLOCK_SIZE = "4k"
AIO_DEPTH = 16


class FioError(Exception):
    """fio failed or printed something that is not a result."""


def fio_command(workload, filename, runtime_s, ramp_s):
    command = ["fio", "--name=cell", f"--filename={filename}", f"--rw={workload.rw}",
               f"--bs={BLOCK_SIZE}", "--direct=1", f"--numjobs={workload.numjobs}",
               "--time_based", f"--runtime={int(runtime_s * 1000)}ms", f"--ramp_time={int(ramp_s * 1000)}ms",
               # No random map and a fresh seed: fio's bookkeeping stays out of the measurement.
               "--norandommap", "--randrepeat=0", "--output-format=json"]
    if workload.engine == "aio":
        command += ["--ioengine=libaio", f"--iodepth={AIO_DEPTH}"]
    else:
        command += ["--ioengine=pvsync2", "--iodepth=1"]
    if workload.numjobs > 1:
        command.append("--group_reporting")
    return command


def run_fio(command, timeout_s):
    """Runs fio; returns a dict with iops, bandwidth, latency and fio's own CPU use."""
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise FioError(f"fio did not finish within {timeout_s:.0f} s") from None
    if done.returncode != 0:
        raise FioError(f"fio exited with status {done.returncode}: {done.stderr.strip()[-2000:]}")
    return parse_report(done.stdout, command)


def parse_report(text, command):
    """The result of fio's JSON report in `text` (what precedes the first '{' is ignored) for the
    job `command` ran."""
    start = text.find("{")
    try:
        report = json.loads(text[start:]) if start >= 0 else None
    except json.JSONDecodeError as error:
        raise FioError(f"fio printed no valid JSON ({error})") from None
    if not report or not report.get("jobs"):
        raise FioError("fio's JSON has no jobs")
    job = report["jobs"][0]
    if job.get("error"):
        raise FioError(f"fio job error {job['error']}")
    write = "write" in next(arg for arg in command if arg.startswith("--rw="))
    side = job["write" if write else "read"]
    clat = side.get("clat_ns", {})
    percentiles = clat.get("percentile", {})
    return {
        "iops": side["iops"],
        "bw_kib": side["bw"],
        "ios": side["total_ios"],
        "lat_mean_us": clat.get("mean", 0.0) / 1000.0,
        "lat_p99_us": percentiles.get("99.000000", 0) / 1000.0,
        "fio_usr_pct": job.get("usr_cpu", 0.0),
        "fio_sys_pct": job.get("sys_cpu", 0.0),
    }
