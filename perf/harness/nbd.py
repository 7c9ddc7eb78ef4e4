# SPDX-License-Identifier: GPL-2.0-or-later
"""The nbd driver's backend: one nbdkit server (memory plugin, so that no disk sits between the
client and the server) on a unix socket, started once per run and served to bexd and QSD alike.
nbdkit's memory plugin allows multi-conn, so bexd opens a connection per queue; QSD 7.2 has one."""

import os
import subprocess
import tempfile
import time


class NbdError(Exception):
    """nbdkit did not start."""


class Server:
    """`nbdkit memory` of `size` bytes on DIR/nbd.sock, until stop()."""

    def __init__(self, size):
        self.size = size
        self.directory = None
        self.process = None

    @property
    def socket(self):
        return os.path.join(self.directory or "DIR", "nbd.sock")

    def command(self):
        return ["nbdkit", "--foreground", "--unix", self.socket, "--pidfile",
                os.path.join(self.directory or "DIR", "nbdkit.pid"), "memory",
                f"size={self.size}"]

    def start(self):
        self.directory = tempfile.mkdtemp(prefix="bexd-perf-nbd-")
        pid_file = os.path.join(self.directory, "nbdkit.pid")
        log = open(os.path.join(self.directory, "nbdkit.log"), "wb")
        self.process = subprocess.Popen(self.command(), stdin=subprocess.DEVNULL, stdout=log,
                                        stderr=subprocess.STDOUT)
        log.close()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if os.path.exists(pid_file) and os.path.getsize(pid_file) > 0:
                return
            if self.process.poll() is not None:
                break
            time.sleep(0.02)
        self.stop()
        raise NbdError("nbdkit did not serve within 20 s (or exited); is it installed?")

    def stop(self):
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None
        if self.directory:
            subprocess.run(["rm", "-rf", self.directory], check=False)
            self.directory = None

    def version(self):
        done = subprocess.run(["nbdkit", "--version"], capture_output=True, text=True)
        return done.stdout.strip()
