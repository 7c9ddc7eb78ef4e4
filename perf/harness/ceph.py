# SPDX-License-Identifier: GPL-2.0-or-later
"""The rbd driver's backend: a throwaway single-node Ceph cluster (tests/support/ceph-cluster.sh,
memstore) holding one fully written image, and `rbd bench`, librbd's own benchmark, as the
ceiling the FUSE exports are held against (the `native-rbd` target)."""

import os
import re
import signal
import subprocess
import tempfile
import time

from harness import fio

POOL_IMAGE = "rbd/bench"
# `rbd bench` prints a line per second: SEC, cumulative OPS, OPS/SEC, BYTES/SEC.
_PROGRESS = re.compile(r"^\s*(\d+)\s+(\d+)\s+[\d.]+\s+")


class CephError(Exception):
    """The cluster did not start, or `rbd bench` failed."""


class Cluster:
    """One monitor and one OSD on 127.0.0.1 under a fresh directory, with image POOL_IMAGE of
    `size` bytes written once from start to end (reads then find data, not holes)."""

    def __init__(self, repo, size):
        self.script = os.path.join(repo, "tests", "support", "ceph-cluster.sh")
        self.size = size
        self.directory = None

    @property
    def conf(self):
        return os.path.join(self.directory or "CLUSTER", "ceph.conf")

    def setup_commands(self):
        """The commands start() runs, for commands.md."""
        return [
            [self.script, "start", self.directory or "CLUSTER", "memstore"],
            ["rbd", "-c", self.conf, "create", "--size", f"{self.size}B", POOL_IMAGE],
            ["rbd", "-c", self.conf, "bench", "--io-type", "write", "--io-pattern", "seq",
             "--io-size", "4M", "--io-threads", "16", "--io-total", str(self.size), POOL_IMAGE],
        ]

    def start(self):
        # Short: the daemons' admin socket paths must stay under about 107 bytes.
        self.directory = tempfile.mkdtemp(prefix="ceph-", dir="/tmp")
        os.rmdir(self.directory)  # the script creates it
        for command in self.setup_commands():
            done = subprocess.run(command, capture_output=True, text=True)
            if done.returncode != 0:
                self.stop()
                raise CephError(f"{' '.join(command)} failed ({done.returncode}): "
                                f"{(done.stdout + done.stderr).strip()[-2000:]}")

    def stop(self):
        if self.directory:
            subprocess.run([self.script, "stop", self.directory], check=False)
            self.directory = None

    def version(self):
        done = subprocess.run(["ceph", "--version"], capture_output=True, text=True)
        return done.stdout.strip()


def bench_command(conf, workload):
    """`rbd bench` for a fio cell at the same number of requests in flight: numjobs × the cell's
    queue depth threads (librbd's "threads" are requests in flight). It runs until stopped."""
    depth = fio.AIO_DEPTH if workload.engine == "aio" else 1
    return ["rbd", "-c", conf, "bench", "--io-type", "write" if workload.is_write else "read",
            "--io-size", fio.BLOCK_SIZE.upper(), "--io-threads", str(workload.numjobs * depth),
            "--io-pattern", "rand" if workload.rw.startswith("rand") else "seq",
            "--io-total", "1T", POOL_IMAGE]


def run_bench(command, runtime_s, ramp_s):
    """Runs `rbd bench` for ramp + runtime seconds, then interrupts it; IOPS over the whole
    seconds after the ramp, from its cumulative operation counts."""
    ramp = int(-(-ramp_s // 1))  # whole seconds: rbd bench reports once a second
    runtime = max(1, int(round(runtime_s)))
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + ramp + runtime + 0.5
    while time.monotonic() < deadline and process.poll() is None:
        time.sleep(0.05)
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
    try:
        out, err = process.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        out, err = process.communicate()
        raise CephError("rbd bench did not stop within 30 s of SIGINT") from None
    progress = {}
    for line in out.splitlines():
        match = _PROGRESS.match(line)
        if match:
            progress[int(match.group(1))] = int(match.group(2))
    end = max(progress, default=0)
    start = ramp if ramp in progress else 0
    if end - start < 1 or (start != 0 and start not in progress):
        raise CephError(f"rbd bench printed too little progress ({len(progress)} lines): "
                        f"{(out + err).strip()[-2000:]}")
    ops = progress[end] - progress.get(start, 0)
    iops = ops / (end - start)
    threads = int(command[command.index("--io-threads") + 1])
    return {
        "iops": iops,
        "bw_kib": iops * 4,
        "ios": ops,
        "lat_mean_us": threads / iops * 1e6 if iops else 0.0,  # Little's law
        "lat_p99_us": 0.0,
        "fio_usr_pct": 0.0,
        "fio_sys_pct": 0.0,
    }
