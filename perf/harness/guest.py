# SPDX-License-Identifier: GPL-2.0-or-later
"""Guest mode: fio inside a Linux guest under QEMU (TCG), on a virtio-fs mount served by bexd's
vhost-user-fs export or by virtiofsd. One guest boot runs every cell of a target; the guest marks
the start and end of each fio run on its console, where the host samples the daemon's and QEMU's
CPU time and the daemon's context switches."""

import os
import re
import shlex
import shutil
import signal
import subprocess
import time

from harness import fio, systems

# The guest test's pieces: the kernel fetcher and the initramfs builder.
GUEST_TEST_DIR = os.path.join("tests", "guest")
INIT_SCRIPT = os.path.join("perf", "guest", "fio-init.sh")
FILE_IN_GUEST = "/mnt/n0"  # the export shows node n0; virtiofsd's share holds the image as n0
TAG = "bench"
# Seconds for boot and power-off, and per cell beyond runtime + ramp (fio's start under TCG).
BOOT_OVERHEAD_S = 15.0
CELL_OVERHEAD_S = 3.0
POLL_S = 0.02
EXIT_GRACE_S = 5.0  # for QEMU to exit by itself once the backend has

_START = re.compile(r"^BEXD-CELL-START (\S+)")
_END = re.compile(r"^BEXD-CELL-END (\S+) (\d+)")


class GuestError(Exception):
    """The guest did not boot, failed, or did not finish in time."""


def default_cache():
    """The guest test's kernel cache (tests/guest/run-guest-test.sh picks it the same way)."""
    cache = os.environ.get("BEXD_GUEST_CACHE")
    if cache:
        return cache
    if os.access("/var/cache", os.W_OK):
        return "/var/cache/bexd-guest"
    return os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")),
                        "bexd-guest")


def cell_command(workload, runtime_s, ramp_s):
    """The fio command the guest runs for `workload`."""
    return fio.fio_command(workload, FILE_IN_GUEST, runtime_s, ramp_s)


class Setup:
    """The kernel and the initramfs (busybox, fio with its libraries, the cells) of one run."""

    def __init__(self, repo, work_dir, kernel_meta, cache, cpus, cells):
        """`cells`: [(name, fio command)], run in this order in every guest."""
        self.cpus = cpus
        os.makedirs(work_dir, exist_ok=True)
        fetched = subprocess.run(
            [os.path.join(repo, GUEST_TEST_DIR, "fetch-kernel.sh"), "--meta", kernel_meta, cache],
            capture_output=True, text=True)
        if fetched.returncode != 0:
            raise GuestError(f"cannot fetch the kernel of {kernel_meta}: "
                             f"{fetched.stderr.strip()[-1000:]}")
        kernel_dir = fetched.stdout.strip().splitlines()[-1]
        with open(os.path.join(kernel_dir, "release")) as release:
            self.release = release.read().strip()
        vmlinux = os.path.join(kernel_dir, "vmlinux")
        self.kernel = vmlinux if os.path.exists(vmlinux) else os.path.join(kernel_dir, "vmlinuz")
        cells_path = os.path.join(work_dir, "cells")
        with open(cells_path, "w") as out:
            for name, command in cells:
                out.write(name + " " + " ".join(command[1:]) + "\n")
        self.initramfs = os.path.join(work_dir, "initramfs.cpio")
        built = subprocess.run(
            [os.path.join(repo, GUEST_TEST_DIR, "build-initramfs.sh"),
             "--init", os.path.join(repo, INIT_SCRIPT), "--program", shutil.which("fio"),
             "--add", f"{cells_path}:/cells", kernel_dir, self.initramfs],
            capture_output=True, text=True)
        if built.returncode != 0:
            raise GuestError(f"cannot build the guest's initramfs: {built.stderr.strip()[-1000:]}")

    def qemu_command(self, socket_path, queues, console_path):
        """QEMU as in the guest test: shared memfd RAM (vhost-user), parallel TCG (QEMU 7.2's
        single-threaded TCG loses virtio interrupts), the uncompressed kernel, and with several
        vCPUs tsc=unstable (see run-guest-test.sh: the kernel would otherwise patch running code
        late in the boot, which parallel TCG occasionally gets wrong)."""
        smp_args = " tsc=unstable" if self.cpus > 1 else ""
        return ["qemu-system-x86_64", "-nodefaults", "-no-user-config", "-display", "none",
                "-no-reboot", "-machine", "pc", "-accel", "tcg,thread=multi",
                "-smp", f"{self.cpus},maxcpus={max(2, self.cpus)}", "-m", "1G",
                "-object", "memory-backend-memfd,id=mem,size=1G,share=on",
                "-numa", "node,memdev=mem", "-chardev", f"socket,id=c0,path={socket_path}",
                "-device", f"vhost-user-fs-pci,chardev=c0,tag={TAG},num-request-queues={queues}",
                "-kernel", self.kernel, "-initrd", self.initramfs,
                "-append", f"console=ttyS0 panic=-1 loglevel=4{smp_args} bexd.tag={TAG}",
                "-serial", f"file:{console_path}"]


class _Sample:
    def __init__(self, daemon_pid, qemu_pid):
        self.time = time.monotonic()
        self.daemon_cpu = systems.read_cpu_seconds(daemon_pid)
        self.daemon_switches = systems.read_context_switches(daemon_pid)
        self.qemu_cpu = systems.read_cpu_seconds(qemu_pid)


class SyscallCounter:
    """`perf stat` counting the system calls of a process's threads (those that exist when it
    starts: a thread pool that grows later is undercounted) from start() to stop(). Without perf
    (package linux-perf), or when it cannot attach, stop() returns None."""

    def __init__(self, pid, output_path):
        self.output_path = output_path
        self.process = None
        if shutil.which("perf") is None:
            return
        self.process = subprocess.Popen(
            ["perf", "stat", "-x,", "-e", "raw_syscalls:sys_enter", "-p", str(pid), "-o",
             output_path], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)

    def stop(self):
        if self.process is None:
            return None
        self.process.send_signal(signal.SIGINT)
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            return None
        try:
            with open(self.output_path) as output:
                for line in output:
                    fields = line.split(",")
                    if len(fields) > 2 and fields[2] == "raw_syscalls:sys_enter":
                        return int(fields[0]) if fields[0].isdigit() else None
        except OSError:
            pass
        return None


def run(command, console_path, daemon, log_path, timeout_s):
    """Boots the guest and waits for it to power off. Returns {cell name: (the console text of
    the cell's fio JSON, the sample at its start, the sample at its end, the daemon's system calls
    in between or None)}. Raises GuestError when QEMU fails, the daemon dies, or the guest does
    not finish within `timeout_s`."""
    if os.path.exists(console_path):
        os.unlink(console_path)
    with open(log_path, "ab") as log:
        log.write(("$ " + shlex.join(command) + "\n").encode())
        log.flush()
        qemu = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT)
    starts, ends, syscalls = {}, {}, {}
    counter = None
    lines_done = 0
    deadline = time.monotonic() + timeout_s
    try:
        while qemu.poll() is None:
            if time.monotonic() > deadline:
                raise GuestError(f"the guest did not finish within {timeout_s:.0f} s; "
                                 f"console {console_path}")
            if daemon.process.poll() is not None:
                # virtiofsd exits when the powered-off guest disconnects; anything else would
                # leave the guest waiting forever (QEMU 7.2 does not reconnect).
                try:
                    qemu.wait(EXIT_GRACE_S)
                except subprocess.TimeoutExpired:
                    raise GuestError(f"the backend exited with status "
                                     f"{daemon.process.returncode} while the guest ran; "
                                     f"console {console_path}") from None
            # Complete lines only: the guest may be in the middle of writing the last one.
            lines = _read_console(console_path).split("\n")[:-1]
            for line in lines[lines_done:]:
                if match := _START.match(line.strip()):
                    starts[match.group(1)] = _Sample(daemon.pid, qemu.pid)
                    counter = SyscallCounter(daemon.pid, console_path + ".perf-stat")
                elif match := _END.match(line.strip()):
                    ends[match.group(1)] = _Sample(daemon.pid, qemu.pid)
                    if counter is not None:
                        syscalls[match.group(1)] = counter.stop()
                        counter = None
            lines_done = len(lines)
            time.sleep(POLL_S)
    finally:
        if counter is not None:
            counter.stop()
        if qemu.poll() is None:
            qemu.kill()
        qemu.wait()
    seen = _read_console(console_path)
    if qemu.returncode != 0:
        raise GuestError(f"QEMU exited with status {qemu.returncode}; log {log_path}")
    if "BEXD-GUEST-RESULT: PASS" not in seen:
        failure = re.search(r"BEXD-GUEST-RESULT: FAIL (.*)", seen)
        raise GuestError(f"the guest failed: {failure.group(1).strip() if failure else 'no result'}"
                         f"; console {console_path}")
    results = {}
    for name, start in starts.items():
        match = re.search(rf"BEXD-CELL-JSON-BEGIN {re.escape(name)}\r?\n(.*?)"
                          rf"BEXD-CELL-JSON-END {re.escape(name)}", seen, re.S)
        results[name] = (match.group(1) if match else "", start, ends.get(name),
                         syscalls.get(name))
    return results


def _read_console(path):
    try:
        with open(path, errors="replace") as console:
            return console.read()
    except FileNotFoundError:
        return ""
