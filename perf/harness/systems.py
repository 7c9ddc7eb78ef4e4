# SPDX-License-Identifier: GPL-2.0-or-later
"""Starting, watching and stopping the daemons under test (bexd, QSD, the limit responder,
virtiofsd)."""

import os
import signal
import stat
import subprocess
import threading
import time
from dataclasses import dataclass

from harness.matrix import BACKEND, FORMAT_DRIVERS, PASSTHROUGH_SYSTEM, URING_SYSTEM

MOUNT_TIMEOUT_S = 15.0
STOP_TIMEOUT_S = 15.0


class DaemonError(Exception):
    """A daemon did not start, mount, or stop as expected."""


# The host cache setting of the file drivers, as bexd's and QSD's file node options.
FILE_CACHE = {"file": "cache.direct=on", "file-io_uring": "cache.direct=on",
              "pagecache": "cache.direct=off"}


def image_path(raw_image, driver):
    """The image a driver serves: the raw image, or a qcow2 image beside it."""
    if driver.startswith("qcow2"):
        return f"{os.path.splitext(raw_image)[0]}-{driver}.qcow2"
    return raw_image


def format_node(driver, image):
    """The node of a format driver, the same for bexd and QSD: the format over a file node with
    O_DIRECT and libaio; the compressed image read-only (writes would allocate)."""
    node = (f"driver={'raw' if driver == 'raw' else 'qcow2'},node-name=n0,cache.direct=on,"
            f"file.driver=file,file.filename={image_path(image, driver)},file.aio=native")
    return node + (",read-only=on" if driver == "qcow2-zlib" else "")


@dataclass(frozen=True)
class Remote:
    """Where the remote drivers' stores are: the Ceph cluster's client configuration (rbd) and
    the NBD server's socket (nbd); None for a driver not in the run."""
    rbd_conf: str = None
    nbd_socket: str = None


def _node(target, image, size, remote, qsd):
    """The --blockdev of `target`'s driver, in bexd's or QSD's spelling."""
    if target.driver in FORMAT_DRIVERS:
        return format_node(target.driver, image)
    if target.driver == "null":
        return f"driver={'null-co' if qsd else 'null'},node-name=n0,size={size},read-zeroes=on"
    if target.driver == "rbd":
        # Both with QEMU's default cache mode: QSD's librbd then caches (as `rbd bench` runs);
        # bexd's librbd never does (block/rbd/rados_connection.cc).
        return f"driver=rbd,node-name=n0,pool=rbd,image=bench,conf={remote.rbd_conf}"
    if target.driver == "nbd":
        return f"driver=nbd,node-name=n0,server.type=unix,server.path={remote.nbd_socket}"
    # QEMU refuses aio=native without O_DIRECT.
    aio = "threads" if qsd and target.driver == "pagecache" else "native"
    if target.driver == "file-io_uring":
        aio = "io_uring"
    return f"driver=file,node-name=n0,filename={image},{FILE_CACHE[target.driver]},aio={aio}"


def daemon_command(target, binaries, image, mountpoint, size, socket_path, share_dir,
                   remote=Remote()):
    """The command line that serves `target`, or None for native (fio on the image itself, or
    `rbd bench`). FUSE exports mount on `mountpoint`; the vhost-user-fs export and virtiofsd
    listen on `socket_path`; virtiofsd shares `share_dir`, which holds the image as n0 (the file
    name the bexd export shows, so that vhost_bench opens the same name on both); rbd and nbd
    nodes reach their stores as `remote` says."""
    if target.system == "native":
        return None
    if target.system == "limit":
        return [binaries["limit"], f"--mountpoint={mountpoint}", f"--size={size}",
                f"--queues={target.queues}"]
    backend = BACKEND.get(target.system, target.system)
    if backend == "virtiofsd":
        # Its seccomp filter kills it when glibc creates a ninth malloc arena (thread pools above
        # 8). The chroot sandbox keeps it one process, so its CPU time can be read; the namespace
        # sandbox would fork. cache=none: FOPEN_DIRECT_IO, as bexd answers OPEN. O_DIRECT from
        # the frontend reaches the host file only with allow_direct_io (the file driver).
        command = ["env", "MALLOC_ARENA_MAX=8", binaries["virtiofsd"],
                   f"--socket-path={socket_path}", "-o", f"source={share_dir}", "-o",
                   "sandbox=chroot", "-o", "cache=none", f"--thread-pool-size={target.threads}"]
        if target.driver == "file":
            command += ["-o", "allow_direct_io"]
        return command
    writable = "off" if target.driver == "qcow2-zlib" else "on"
    if backend == "bexd":
        node = _node(target, image, size, remote, qsd=False)
        if target.system == PASSTHROUGH_SYSTEM:
            # Passthrough needs a read-only or growable export; fio stays inside the image, so
            # growable changes nothing else.
            export = (f"type=fuse,id=e0,node-name=n0,mountpoint={mountpoint},writable=on,"
                      "growable=on,passthrough=on,num-queues=1")
        elif target.system == URING_SYSTEM:
            # The rings replace the /dev/fuse queues (one per possible CPU); one /dev/fuse
            # queue stays for INIT, FORGET and INTERRUPT.
            export = (f"type=fuse,id=e0,node-name=n0,mountpoint={mountpoint},"
                      f"writable={writable},io-uring=on")
        elif target.system != "bexd":
            export = (f"type=vhost-user-fs,id=e0,node-name=n0,addr.type=unix,"
                      f"addr.path={socket_path},tag=bench,writable=on,"
                      f"num-request-queues={target.queues}")
        else:
            export = (f"type=fuse,id=e0,node-name=n0,mountpoint={mountpoint},"
                      f"writable={writable},num-queues={target.queues}")
        bexd = binaries["base-bexd" if target.baseline else "bexd"]
        return [bexd, "--blockdev", node, "--export", export]
    if target.system == "qsd":
        # QSD 7.2 has one FUSE queue; it does accept an iothread for the export, which moves the
        # request handling off the main loop.
        node = _node(target, image, size, remote, qsd=True)
        return [binaries["qsd"], "--object", "iothread,id=io0", "--blockdev", node, "--export",
                f"type=fuse,id=e0,node-name=n0,mountpoint={mountpoint},writable={writable},"
                "iothread=io0"]
    raise ValueError(f"unknown system '{target.system}'")


def _unescape_mountinfo(field):
    # mountinfo escapes space, tab, newline and backslash as \ooo.
    out, i = [], 0
    while i < len(field):
        code = field[i + 1:i + 4]
        if field[i] == "\\" and len(code) == 3 and code.isdigit():
            out.append(chr(int(code, 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def is_mounted(path):
    with open("/proc/self/mountinfo") as mountinfo:
        for line in mountinfo:
            fields = line.split()
            if len(fields) > 4 and _unescape_mountinfo(fields[4]) == path:
                return True
    return False


def _stat_size(path, timeout):
    """st_size of `path`, or None if stat did not return within `timeout` (a stuck FUSE server)."""
    result = {}

    def run():
        try:
            result["size"] = os.stat(path).st_size
        except OSError as error:
            result["error"] = error

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        return None
    if "error" in result:
        raise DaemonError(f"stat '{path}' failed: {result['error']}")
    return result["size"]


def read_memory_kb(pid):
    """VmRSS and VmHWM of `pid` in KiB, from /proc/PID/status."""
    values = {}
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                key, _, rest = line.partition(":")
                if key in ("VmRSS", "VmHWM"):
                    values[key] = int(rest.split()[0])
    except OSError as error:
        raise DaemonError(f"cannot read the memory use of process {pid}: {error}") from None
    if "VmRSS" not in values:
        raise DaemonError(f"process {pid} has exited (no VmRSS)")
    return values["VmRSS"], values.get("VmHWM", 0)


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def read_cpu_seconds(pid):
    """User plus system CPU time of all threads of `pid`, in seconds."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            text = stat.read()
    except OSError as error:
        raise DaemonError(f"cannot read the CPU time of process {pid}: {error}") from None
    # The command name is in parentheses and may contain spaces; fields follow the last ')'.
    fields = text[text.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def read_context_switches(pid):
    """{thread id: voluntary plus involuntary context switches} of the live threads of `pid`."""
    switches = {}
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{task}/status") as status:
                    for line in status:
                        if line.startswith(("voluntary_ctxt_switches:",
                                            "nonvoluntary_ctxt_switches:")):
                            switches[task] = switches.get(task, 0) + int(line.split()[1])
            except FileNotFoundError:
                pass  # the thread ended meanwhile
    except OSError as error:
        raise DaemonError(f"cannot read the threads of process {pid}: {error}") from None
    return switches


def switches_between(start, end):
    """Context switches between two read_context_switches() samples: of the threads alive at the
    end, counting a thread that started in between from zero. A thread pool that shrinks in
    between is undercounted (its ended threads are gone), never counted negative."""
    return sum(count - start.get(tid, 0) for tid, count in end.items())


def _log_tail(path, lines=15):
    try:
        with open(path, errors="replace") as log:
            return "".join(log.readlines()[-lines:])
    except OSError:
        return ""


class Daemon:
    """One daemon under test: start() waits until it serves (its FUSE mount shows the expected
    size, or its vhost-user socket exists), stop() for the exit."""

    def __init__(self, command, log_path, mountpoint=None, size=None, socket_path=None):
        self.command = command
        self.mountpoint = mountpoint
        self.size = size
        self.socket_path = socket_path
        self.log_path = log_path
        self.process = None

    @property
    def pid(self):
        return self.process.pid

    @property
    def endpoint(self):
        return self.mountpoint or self.socket_path

    def start(self):
        if self.mountpoint and is_mounted(self.mountpoint):
            raise DaemonError(f"'{self.mountpoint}' is already mounted (a stale export?)")
        if self.socket_path and os.path.exists(self.socket_path):
            os.unlink(self.socket_path)  # a stale socket would look ready
        with open(self.log_path, "ab") as log:
            log.write(("$ " + " ".join(self.command) + "\n").encode())
            log.flush()
            self.process = subprocess.Popen(self.command, stdin=subprocess.DEVNULL, stdout=log,
                                            stderr=subprocess.STDOUT)
        deadline = time.monotonic() + MOUNT_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                status = self.process.returncode
                self._kill()
                raise DaemonError(f"'{self.command[0]}' exited with status {status} before "
                                  f"serving '{self.endpoint}'; log "
                                  f"{self.log_path}:\n{_log_tail(self.log_path)}")
            if self.socket_path and os.path.exists(self.socket_path):
                if not stat.S_ISSOCK(os.stat(self.socket_path).st_mode):
                    self._kill()
                    raise DaemonError(f"'{self.socket_path}' is not a socket")
                return
            if self.mountpoint and is_mounted(self.mountpoint):
                size = _stat_size(self.mountpoint, max(0.1, deadline - time.monotonic()))
                if size is None:
                    break
                if size != self.size:
                    self._kill()
                    raise DaemonError(f"'{self.mountpoint}' has size {size}, expected {self.size}")
                return
            time.sleep(0.02)
        self._kill()
        raise DaemonError(f"'{self.command[0]}' did not serve '{self.endpoint}' within "
                          f"{MOUNT_TIMEOUT_S:.0f} s; log {self.log_path}:\n"
                          f"{_log_tail(self.log_path)}")

    def _kill(self):
        """Ends a daemon that failed to start; its own error is the one worth reporting."""
        process, self.process = self.process, None
        if process.poll() is None:
            process.kill()
            process.wait()
        if self.mountpoint and is_mounted(self.mountpoint):
            subprocess.run(["umount", "-l", self.mountpoint], check=False)

    def stop(self):
        """SIGTERM, then wait; SIGKILL and lazy unmount only if that fails (reported as error)."""
        if self.process is None:
            return
        process, self.process = self.process, None
        problems = []
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
                problems.append(f"did not exit within {STOP_TIMEOUT_S:.0f} s of SIGTERM")
        if process.returncode not in (0, -signal.SIGTERM):
            problems.append(f"exited with status {process.returncode}")
        if self.mountpoint and is_mounted(self.mountpoint):
            subprocess.run(["umount", "-l", self.mountpoint], check=False)
            problems.append("left its mount behind")
        if problems:
            raise DaemonError(f"'{self.command[0]}' " + "; ".join(problems) +
                              f"; log {self.log_path}:\n{_log_tail(self.log_path)}")
