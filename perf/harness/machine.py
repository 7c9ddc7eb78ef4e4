# SPDX-License-Identifier: GPL-2.0-or-later
"""What the numbers were measured on: machine, kernel, tool versions, load."""

import os
import platform
import subprocess


def _first_line(command):
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"unavailable ({error})"
    text = (done.stdout or done.stderr).strip()
    return text.splitlines()[0] if text else f"unavailable (exit status {done.returncode})"


def _cpu_model():
    with open("/proc/cpuinfo") as cpuinfo:
        for line in cpuinfo:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return "unknown"


def _mem_total_mib():
    with open("/proc/meminfo") as meminfo:
        for line in meminfo:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) // 1024
    return 0


def load_average():
    with open("/proc/loadavg") as loadavg:
        return " ".join(loadavg.read().split()[:3])


def describe(repo, binaries, image):
    """A flat dict of facts, printed at the top of every report."""
    facts = {
        "nproc": str(os.cpu_count()),
        "memory": f"{_mem_total_mib()} MiB",
        "cpu": _cpu_model(),
        "kernel": platform.release(),
        "fio": _first_line(["fio", "--version"]),
        "qemu-storage-daemon": _first_line([binaries["qsd"], "--version"]),
        "virtiofsd": _first_line([binaries["virtiofsd"], "--version"]),
        "bexd commit": _first_line(["git", "-C", repo, "describe", "--always", "--dirty"]),
        "image": f"{image} on {_first_line(['stat', '-f', '-c', '%T', image])}",
        "load average at start": load_average(),
    }
    return facts
