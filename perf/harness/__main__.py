# SPDX-License-Identifier: GPL-2.0-or-later
"""perf/run.sh: builds what it needs, runs the fio matrix against every system in interleaved
repetitions (and the same cells through the vhost-user-fs export with vhost_bench), and writes
raw.tsv, summary.tsv, memory.tsv, summary.md, commands.md and PNG charts."""

import argparse
import datetime
import os
import shlex
import shutil
import subprocess
import sys
import time

from harness import build, ceph, charts, fio, guest, machine, matrix, nbd, report, systems, vhost

QUICK_WORKLOADS = "randread-aio-j1,randwrite-aio-j1,randread-sync-j1,randwrite-sync-j1"
# Seconds per cell beyond runtime + ramp (fio start-up and teardown), and per daemon start/stop.
CELL_OVERHEAD_S = 0.5
DAEMON_OVERHEAD_S = 1.5


def parse_args(repo):
    parser = argparse.ArgumentParser(
        prog="perf/run.sh", description="Side-by-side FUSE export benchmark (see perf/README.md).")
    parser.add_argument("--quick", action="store_true",
                        help=f"development loop: {QUICK_WORKLOADS}, queues 1,2, 1 repetition, "
                             "2 s per cell (explicit options still win)")
    parser.add_argument("--reps", type=int, help="repetitions of every cell (default 3)")
    parser.add_argument("--runtime", type=float, help="measured seconds per cell (default 5)")
    parser.add_argument("--ramp", type=float, help="unmeasured warm-up seconds per cell (default 1)")
    parser.add_argument("--out", help="result directory (default perf/results/<date-time>, or "
                                      "BUILD_DIR/quick/<date-time> in quick mode)")
    parser.add_argument("--build-dir", default=os.path.join(repo, "build-perf"))
    parser.add_argument("--systems", default=",".join(matrix.DEFAULT_SYSTEMS),
                        help="comma list of limit, qsd, native, bexd, vhost, virtiofsd, "
                             "guest-bexd, guest-virtiofsd (default all but the guest ones; "
                             "vhost = bexd's vhost-user-fs export and virtiofsd = QEMU's "
                             "reference daemon, both driven by vhost_bench; guest-* = the same "
                             "two with fio in a QEMU guest); bexd-passthrough = bexd's FUSE "
                             "export with passthrough=on, file driver only; bexd-uring = bexd's FUSE "
                             "export over io_uring (io-uring=on), null and file drivers")
    parser.add_argument("--drivers", default=",".join(matrix.DEFAULT_DRIVERS),
                        help="comma list of null, file (the image with O_DIRECT on the host), "
                             "file-io_uring (the same with aio=io_uring), "
                             "pagecache (the image through the host page cache), raw, qcow2, "
                             "qcow2-empty, qcow2-zlib (disk image formats over the file driver; "
                             "bexd and QSD only) (default null,file)")
    parser.add_argument("--queues", help="queue counts for bexd and the limit responder "
                                         "(default 1,2,4)")
    parser.add_argument("--workloads", help="comma list of RW-ENGINE-jN (default: all 16)")
    parser.add_argument("--size", type=int, default=1 << 30, help="export size in bytes")
    parser.add_argument("--block-size", default=fio.BLOCK_SIZE,
                        help=f"fio block size of every cell, as fio writes it (default {fio.BLOCK_SIZE})")
    parser.add_argument("--image", help="raw image for the file driver, created preallocated "
                                        "(default BUILD_DIR/bench.img; must not be on tmpfs)")
    parser.add_argument("--no-build", action="store_true", help="use the binaries as they are")
    parser.add_argument("--bexd", help="bexd binary (default: built in BUILD_DIR)")
    parser.add_argument("--limit-responder", help="limit_responder binary (default: built)")
    parser.add_argument("--vhost-bench", help="vhost_bench binary (default: built)")
    parser.add_argument("--qsd", default="qemu-storage-daemon", help="qemu-storage-daemon binary")
    parser.add_argument("--virtiofsd", default="/usr/lib/qemu/virtiofsd",
                        help="QEMU's C virtiofsd (package qemu-system-common)")
    parser.add_argument("--virtiofsd-pools", default=",".join(map(str, matrix.VIRTIOFSD_POOLS)),
                        help="virtiofsd --thread-pool-size values, one target each (default "
                             "0,1,64)")
    parser.add_argument("--guest-kernel", default="linux-image-amd64",
                        help="guest systems: the Debian meta package of the guest kernel "
                             "(default linux-image-amd64, Debian 12's 6.1; "
                             "linux-image-6.12-amd64 maps vCPUs to request queues)")
    parser.add_argument("--guest-cpus", type=int, default=1, help="guest systems: vCPUs")
    parser.add_argument("--guest-cache", default=guest.default_cache(),
                        help="guest systems: kernel cache (as tests/guest/run-guest-test.sh's)")
    parser.add_argument("--baseline", metavar="REV",
                        help="also measure bexd built at git revision REV (every bexd and vhost "
                             "target gets a base- twin, and the report compares the two)")
    parser.add_argument("--baseline-bexd", help="baseline bexd binary (instead of building REV)")
    parser.add_argument("--dry-run", action="store_true",
                        help="print the plan, time estimate and commands, run nothing")
    args = parser.parse_args()

    args.reps = args.reps or (1 if args.quick else 3)
    args.runtime = args.runtime or (2 if args.quick else 5)
    args.ramp = args.ramp if args.ramp is not None else (0.5 if args.quick else 1)
    args.queues = args.queues or ("1,2" if args.quick else "1,2,4")
    args.workloads = args.workloads or (QUICK_WORKLOADS if args.quick else None)
    if args.reps < 1 or args.runtime < 1 or args.ramp < 0:
        parser.error("--reps and --runtime must be at least 1, --ramp at least 0")
    if not 1 <= args.guest_cpus <= 8:
        parser.error("--guest-cpus must be 1 to 8")
    try:
        args.system_list = _choices("--systems", args.systems, matrix.SYSTEMS)
        args.driver_list = _choices("--drivers", args.drivers, matrix.DRIVERS)
        args.queue_list = sorted({int(q) for q in args.queues.split(",")})
        if not args.queue_list or args.queue_list[0] < 1:
            raise ValueError("--queues must list counts of at least 1")
        args.pool_list = sorted({int(t) for t in args.virtiofsd_pools.split(",")})
        if not args.pool_list or args.pool_list[0] < 0:
            raise ValueError("--virtiofsd-pools must list sizes of at least 0")
        args.workload_list = (matrix.all_workloads() if args.workloads is None else
                              [matrix.parse_workload(w) for w in args.workloads.split(",")])
    except ValueError as error:
        parser.error(str(error))
    fio.BLOCK_SIZE = args.block_size
    # Daemons, virtiofsd and the mount checks run in other directories: every path is absolute.
    for name in ("build_dir", "out", "image", "bexd", "baseline_bexd", "limit_responder", "vhost_bench"):
        if getattr(args, name):
            setattr(args, name, os.path.abspath(getattr(args, name)))
    stamp = datetime.datetime.now().strftime("%Y-%m-%d_%H%M%S")
    if args.out is None:
        args.out = (os.path.join(args.build_dir, "quick", stamp) if args.quick else
                    os.path.join(repo, "perf", "results", stamp))
    args.image = args.image or os.path.join(args.build_dir, "bench.img")
    if args.baseline_bexd and not args.baseline:
        args.baseline = "given binary"
    return args


def _choices(option, text, allowed):
    chosen = [item for item in text.split(",") if item]
    for item in chosen:
        if item not in allowed:
            raise ValueError(f"{option}: '{item}' is not one of {', '.join(allowed)}")
    return chosen


def _fuse_uring_enabled():
    """The kernel switch for FUSE over io_uring; the harness reads it and never changes it."""
    try:
        with open("/sys/module/fuse/parameters/enable_uring") as switch:
            if switch.read().strip() == "Y":
                return True
    except OSError:
        pass
    print("warning: /sys/module/fuse/parameters/enable_uring is not Y (scripts/setup.sh test "
          "turns it on)", file=sys.stderr)
    return False


def find_binaries(args, repo):
    """Builds what is needed and returns {system: binary}; drops systems that cannot run."""
    binaries = {"qsd": shutil.which(args.qsd) or args.qsd, "virtiofsd": args.virtiofsd}
    wanted = {"bexd": args.bexd, "limit": args.limit_responder, "vhost": args.vhost_bench}
    cmake_targets = {"bexd": "bexd", "limit": "limit_responder", "vhost": "vhost_bench"}
    # The vhost systems run bexd too; vhost_bench (built as "vhost") drives virtiofsd.
    needed = set(args.system_list) | {matrix.BACKEND.get(s, s) for s in args.system_list}
    needed |= {"vhost"} if "virtiofsd" in args.system_list else set()
    to_build = [cmake_targets[s] for s, path in wanted.items() if path is None and s in needed]
    if to_build and not args.no_build and not args.dry_run:
        os.makedirs(args.out, exist_ok=True)
        log = os.path.join(args.out, "build.log")
        print(f"building {', '.join(to_build)} in {args.build_dir} (log: {log})", flush=True)
        try:
            build.build(repo, args.build_dir, to_build, log)
        except build.BuildError as error:
            print(f"warning: {error}", file=sys.stderr)
    for system, path in wanted.items():
        binaries[system] = path or build.target_path(args.build_dir, cmake_targets[system])
    if args.baseline:
        binaries["base-bexd"] = args.baseline_bexd
        if not args.baseline_bexd and not args.dry_run:
            os.makedirs(args.out, exist_ok=True)
            log = os.path.join(args.out, "build.log")
            print(f"building bexd at {args.baseline} (log: {log})", flush=True)
            try:
                binaries["base-bexd"] = build.build_revision(repo, args.baseline, args.build_dir,
                                                             log)
            except build.BuildError as error:
                sys.exit(f"error: {error}")
    usable = {system: bool(path and os.access(path, os.X_OK)) for system, path in binaries.items()}
    usable["guest-virtiofsd"] = usable["virtiofsd"]
    usable["guest-bexd"] = usable["bexd"]
    usable[matrix.PASSTHROUGH_SYSTEM] = usable["bexd"]
    usable[matrix.URING_SYSTEM] = usable["bexd"] and _fuse_uring_enabled()
    usable["virtiofsd"] = usable["virtiofsd"] and usable["vhost"]  # vhost_bench drives it
    usable["vhost"] = usable["vhost"] and usable["bexd"]
    if shutil.which("qemu-system-x86_64") is None:
        usable["guest-bexd"] = usable["guest-virtiofsd"] = False
        binaries["guest-bexd"] = binaries["guest-virtiofsd"] = "qemu-system-x86_64"
    for system in ("bexd", "limit", "qsd", "vhost", "virtiofsd", "guest-bexd", "guest-virtiofsd",
                   matrix.PASSTHROUGH_SYSTEM, matrix.URING_SYSTEM):
        if system in args.system_list and not usable[system]:
            binary = binaries.get(system, binaries.get(matrix.BACKEND.get(system)))
            print(f"warning: no usable {system} binary ({binary or 'not built'}); "
                  f"leaving {system} out of this run", file=sys.stderr)
            args.system_list.remove(system)
    return binaries


def prepare_image(path, size):
    """A fully written raw image: unwritten extents would turn reads into no-ops."""
    if os.path.exists(path) and os.path.getsize(path) == size:
        return
    os.makedirs(os.path.dirname(path), exist_ok=True)
    print(f"creating {path} ({size} bytes, preallocation=full)", flush=True)
    subprocess.run(["qemu-img", "create", "-q", "-f", "raw", "-o", "preallocation=full", path,
                    str(size)], check=True)


def create_qcow2(path, size, *options):
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", *options, path, str(size)],
                   check=True)


def prepare_format_images(raw_image, size, drivers):
    """The qcow2 images beside the raw one: fully allocated (preallocation=full: every cluster
    mapped and written), and zlib-compressed from data that compresses to about half."""
    if "qcow2" in drivers:
        path = systems.image_path(raw_image, "qcow2")
        if not os.path.exists(path):
            print(f"creating {path} (preallocation=full)", flush=True)
            create_qcow2(path, size, "-o", "preallocation=full")
    if "qcow2-zlib" in drivers:
        path = systems.image_path(raw_image, "qcow2-zlib")
        if not os.path.exists(path):
            source = path + ".src"
            print(f"creating {path} (qemu-img convert -c of half-compressible data)", flush=True)
            subprocess.run(["fio", "--name=fill", f"--filename={source}", "--rw=write", "--bs=1M",
                            f"--size={size}", "--buffer_compress_percentage=50",
                            "--refill_buffers", "--output=/dev/null"], check=True)
            subprocess.run(["qemu-img", "convert", "-c", "-O", "qcow2", "-o",
                            "compression_type=zlib", source, path], check=True)
            os.unlink(source)


def check_not_tmpfs(path):
    fs_type = subprocess.run(["stat", "-f", "-c", "%T", path], capture_output=True,
                             text=True).stdout.strip()
    if fs_type in ("tmpfs", "ramfs"):
        sys.exit(f"error: image {path} is on {fs_type}; the file driver needs a real disk")


def warm_page_cache(image):
    """Reads the whole image, so that pagecache cells measure the host page cache rather than
    whatever of the image the cells before (O_DIRECT writes invalidate cached pages) left in it."""
    with open(image, "rb", buffering=0) as source:
        buffer = bytearray(1 << 20)
        while source.readinto(buffer):
            pass


def prepare_share(share_dir, image):
    """virtiofsd shares a directory: it holds the image as n0, a hard link (virtiofsd chroots into
    the directory, so a symbolic link out of it would not resolve)."""
    os.makedirs(share_dir, exist_ok=True)
    for name in os.listdir(share_dir):
        os.unlink(os.path.join(share_dir, name))
    try:
        os.link(image, os.path.join(share_dir, "n0"))
    except OSError as error:
        sys.exit(f"error: cannot link the image {image} into virtiofsd's share {share_dir} "
                 f"({error}); both must be on one filesystem (see --image, --build-dir)")


def prepare_mountpoint(path):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if systems.is_mounted(path):
        print(f"warning: {path} was still mounted from an earlier run; unmounting it",
              file=sys.stderr)
        subprocess.run(["umount", "-l", path], check=False)
    if not os.path.isfile(path):
        open(path, "w").close()


class Run:
    """State of one harness run: the plan, the results so far, the output files."""

    def __init__(self, args, repo, binaries):
        self.args = args
        self.repo = repo
        self.binaries = binaries
        self.mountpoint = os.path.join(args.build_dir, "bench", "export")
        self.socket_path = os.path.join(args.build_dir, "bench", "vhost.sock")
        self.share_dir = os.path.join(args.build_dir, "bench", "virtiofsd-share")
        self.guest_dir = os.path.join(args.build_dir, "bench", "guest")
        self.guest = None  # guest.Setup, made in main() when a guest system runs
        self.targets = matrix.targets(args.system_list, args.driver_list, args.queue_list,
                                      baseline=bool(args.baseline),
                                      virtiofsd_pools=args.pool_list)
        self.cluster = ceph.Cluster(repo, args.size) if "rbd" in args.driver_list else None
        self.nbd_server = nbd.Server(args.size) if "nbd" in args.driver_list else None
        self.workloads = args.workload_list
        self.raw_rows = []
        self.memory_rows = []
        self.errors = []
        self.facts = {}  # machine.describe(), filled in once the run starts
        self.settings = {
            "date": datetime.datetime.now().isoformat(timespec="seconds"),
            "mode": "quick" if args.quick else "full",
            "repetitions": args.reps,
            "runtime per cell": f"{args.runtime:g} s (+{args.ramp:g} s ramp)",
        }
        if args.baseline:
            commit = subprocess.run(["git", "-C", repo, "rev-parse", "--short", args.baseline],
                                    capture_output=True, text=True).stdout.strip()
            self.settings["baseline (base- targets)"] = (f"{args.baseline} ({commit})" if commit
                                                         else args.baseline)

    def daemon_command(self, target):
        return systems.daemon_command(target, self.binaries, self.args.image, self.mountpoint,
                                      self.args.size, self.socket_path, self.share_dir,
                                      systems.Remote(
                                          self.cluster.conf if self.cluster else None,
                                          self.nbd_server.socket if self.nbd_server else None))

    def cell_command(self, target, workload):
        """The fio command of a cell; for vhost-user-fs backends the vhost_bench command, for
        native-rbd `rbd bench`."""
        if target.system == "native" and target.driver == "rbd":
            return ceph.bench_command(self.cluster.conf, workload)
        if target.system in matrix.VHOST_SYSTEMS:
            return vhost.bench_command(self.binaries["vhost"], workload, self.socket_path,
                                       target.queues, self.args.runtime, self.args.ramp,
                                       direct=target.driver in ("file", "file-io_uring"))
        if target.system in matrix.GUEST_SYSTEMS:
            return guest.cell_command(workload, self.args.runtime, self.args.ramp)
        filename = self.args.image if target.system == "native" else self.mountpoint
        return fio.fio_command(workload, filename, self.args.runtime, self.args.ramp)

    def workloads_of(self, target):
        return [w for w in self.workloads if target.runs(w)]

    def cells_per_rep(self):
        return sum(len(self.workloads_of(t)) for t in self.targets)

    def daemon_starts_per_rep(self):
        return sum(len(self.workloads_of(t)) if t.system == "virtiofsd" else 1
                   for t in self.targets)

    def estimate_s(self):
        cells = self.cells_per_rep()
        per_cell = self.args.runtime + self.args.ramp + CELL_OVERHEAD_S
        guests = [t for t in self.targets if t.system in matrix.GUEST_SYSTEMS]
        guest_extra = sum(guest.BOOT_OVERHEAD_S + len(self.workloads_of(t)) *
                          (guest.CELL_OVERHEAD_S - CELL_OVERHEAD_S) for t in guests)
        return self.args.reps * (cells * per_cell + guest_extra +
                                 self.daemon_starts_per_rep() * DAEMON_OVERHEAD_S)

    def guest_timeout_s(self, target):
        cells = len(self.workloads_of(target))
        return 120 + cells * (self.args.runtime + self.args.ramp + 30)

    def console_path(self, target):
        return os.path.join(self.args.out, "logs", f"{target.name}.console")

    def qemu_command(self, target):
        return self.guest.qemu_command(self.socket_path, target.queues, self.console_path(target))

    def write_commands(self):
        lines = ["# Commands of this run", ""]
        if self.cluster:
            lines += ["## Ceph cluster (rbd driver)", "", "```"]
            lines += [" ".join(command) for command in self.cluster.setup_commands()]
            lines += [f"# stopped at the end: {self.cluster.script} stop {self.cluster.directory}",
                      "```", ""]
        if self.nbd_server:
            lines += ["## NBD server (nbd driver)", "", "```",
                      " ".join(self.nbd_server.command()), "```", ""]
        for target in self.targets:
            command = self.daemon_command(target)
            lines += [f"## {target.name}", "", "```",
                      " ".join(command) if command else "# no daemon: fio runs on the image"]
            if target.system in matrix.GUEST_SYSTEMS:
                lines += [shlex.join(self.qemu_command(target)),
                          "# in the guest, one after the other:"]
            lines += [" ".join(self.cell_command(target, w)) for w in self.workloads_of(target)]
            lines += ["```", ""]
        with open(os.path.join(self.args.out, "commands.md"), "w") as out:
            out.write("\n".join(lines))

    def run(self):
        total = self.cells_per_rep() * self.args.reps
        done = 0
        started = time.monotonic()
        for rep in range(1, self.args.reps + 1):
            # Rotate the order each repetition so slow drift of the machine hits every system.
            shift = (rep - 1) % len(self.targets)
            for target in self.targets[shift:] + self.targets[:shift]:
                done = self.run_target(rep, target, done, total, started)
                self.write_outputs(final=False)

    def run_target(self, rep, target, done, total, started):
        """Runs every workload against `target`; returns the new count of cells done."""
        if target.system in matrix.GUEST_SYSTEMS:
            done = self.serve_guest(rep, target, done, total, started)
        elif target.system == "virtiofsd" or target.driver == "qcow2-empty":
            # virtiofsd serves one frontend connection and exits: one daemon per cell, and no
            # memory figures (it is gone when the cell ends). An empty image is made anew for
            # every cell, so that each measures first writes.
            for workload in self.workloads_of(target):
                done = self.serve(rep, target, [workload], done, total, started, memory=False)
        else:
            done = self.serve(rep, target, self.workloads_of(target), done, total, started,
                              memory=True)
        # Cells skipped after a daemon failure still count toward the progress total.
        return max(done, self.cells_before(rep, target))

    def serve(self, rep, target, workloads, done, total, started, memory):
        """Starts `target`'s daemon, runs `workloads` against it and stops it; returns the new
        count of cells done. With `memory`, records the daemon's memory use."""
        command = self.daemon_command(target)
        daemon = None
        if command:
            log_path = os.path.join(self.args.out, "logs", f"{target.name}.log")
            if target.system in matrix.VHOST_SYSTEMS:
                daemon = systems.Daemon(command, log_path, socket_path=self.socket_path)
            else:
                daemon = systems.Daemon(command, log_path, mountpoint=self.mountpoint,
                                        size=self.args.size)
        try:
            if target.driver == "pagecache":
                warm_page_cache(self.args.image)
            if target.driver == "qcow2-empty":
                path = systems.image_path(self.args.image, target.driver)
                if os.path.exists(path):
                    os.unlink(path)
                create_qcow2(path, self.args.size)
            if daemon:
                daemon.start()
                time.sleep(0.5)
                if memory:
                    idle_rss, _ = systems.read_memory_kb(daemon.pid)
            for workload in workloads:
                done += 1
                row = self.run_cell(rep, target, workload, daemon, command)
                self.progress(done, total, started, rep, target, workload, row)
            if daemon and memory:
                after_rss, after_hwm = systems.read_memory_kb(daemon.pid)
                self.memory_rows.append({"rep": rep, "target": target.name,
                                         "idle_rss_kib": idle_rss, "after_rss_kib": after_rss,
                                         "after_hwm_kib": after_hwm})
        except systems.DaemonError as error:
            self.error(f"rep {rep} {target.name}: {error}")
        finally:
            if daemon:
                try:
                    daemon.stop()
                except systems.DaemonError as error:
                    self.error(f"rep {rep} {target.name}: {error}")
        return done

    def serve_guest(self, rep, target, done, total, started):
        """Starts `target`'s backend, boots a guest that runs every workload, stops the backend;
        returns the new count of cells done."""
        command = self.daemon_command(target)
        log_path = os.path.join(self.args.out, "logs", f"{target.name}.log")
        daemon = systems.Daemon(command, log_path, socket_path=self.socket_path)
        loadavg = machine.load_average()
        try:
            if target.driver == "pagecache":
                warm_page_cache(self.args.image)
            daemon.start()
            results = guest.run(self.qemu_command(target), self.console_path(target), daemon,
                                log_path, self.guest_timeout_s(target))
            for workload in self.workloads_of(target):
                done += 1
                row = self.guest_row(rep, target, workload, results.get(workload.name),
                                     command, loadavg)
                self.progress(done, total, started, rep, target, workload, row)
        except (systems.DaemonError, guest.GuestError) as error:
            self.error(f"rep {rep} {target.name}: {error}")
        finally:
            try:
                daemon.stop()
            except systems.DaemonError as error:
                self.error(f"rep {rep} {target.name}: {error}")
        return done

    def guest_row(self, rep, target, workload, result, daemon_command, loadavg):
        """The raw row of one cell run in a guest, or None (error recorded) if it failed. The
        costs per request are what the backend and QEMU spent from the start of fio to its end,
        divided by the requests of runtime and ramp (fio's IOPS × their length): fio's start
        under TCG, seconds of it, does no I/O and costs the backend nothing."""
        cell = f"rep {rep} {target.name} {workload.name}"
        if result is None:
            self.error(f"{cell}: the guest did not run it")
            return None
        text, start, end, syscalls = result
        command = self.cell_command(target, workload)
        try:
            measured = fio.parse_report(text, command)
        except fio.FioError as error:
            self.error(f"{cell}: {error}")
            return None
        row = self.make_row(rep, target, workload, measured, command, daemon_command, loadavg)
        if end is not None and measured["iops"] > 0:
            requests = measured["iops"] * (self.args.runtime + self.args.ramp)
            row["daemon_cpu_pct"] = ((end.daemon_cpu - start.daemon_cpu) /
                                     (end.time - start.time) * 100)
            row["daemon_cpu_us_per_io"] = (end.daemon_cpu - start.daemon_cpu) / requests * 1e6
            row["qemu_cpu_us_per_io"] = (end.qemu_cpu - start.qemu_cpu) / requests * 1e6
            row["daemon_switches_per_io"] = systems.switches_between(
                start.daemon_switches, end.daemon_switches) / requests
            if syscalls is not None:
                row["daemon_syscalls_per_io"] = syscalls / requests
        self.raw_rows.append(row)
        return row

    def make_row(self, rep, target, workload, result, command, daemon_command, loadavg):
        return {"rep": rep, "target": target.name, "system": target.system,
                "driver": target.driver, "queues": target.queues, "workload": workload.name,
                "rw": workload.rw, "engine": workload.engine, "numjobs": workload.numjobs,
                **result, "daemon_cpu_pct": "", "daemon_cpu_us_per_io": "", "loadavg": loadavg,
                "daemon_command": " ".join(daemon_command) if daemon_command else "",
                "fio_command": " ".join(command)}

    def progress(self, done, total, started, rep, target, workload, row):
        elapsed = time.monotonic() - started
        eta = int(elapsed / done * (total - done))
        result = f"{row['iops'] / 1000:8.1f}k IOPS" if row else "  failed"
        print(f"[{done:4}/{total}] rep {rep} {target.name:14} {workload.name:17} {result}"
              f"   (eta {eta // 60}:{eta % 60:02})", flush=True)

    def cells_before(self, rep, target):
        """Cells done once `target` of repetition `rep` is over, for the progress count."""
        shift = (rep - 1) % len(self.targets)
        order = self.targets[shift:] + self.targets[:shift]
        this_rep = order[:order.index(target) + 1]
        return (rep - 1) * self.cells_per_rep() + sum(len(self.workloads_of(t)) for t in this_rep)

    def run_cell(self, rep, target, workload, daemon, daemon_command):
        """Runs one cell; returns its raw row, or None (error recorded) if it failed."""
        command = self.cell_command(target, workload)
        loadavg = machine.load_average()
        cpu_before = systems.read_cpu_seconds(daemon.pid) if daemon else 0.0
        wall_before = time.monotonic()
        timeout = self.args.runtime + self.args.ramp + 120
        try:
            if target.system in matrix.VHOST_SYSTEMS:
                result = vhost.run_bench(command, timeout)
            elif target.system == "native" and target.driver == "rbd":
                result = ceph.run_bench(command, self.args.runtime, self.args.ramp)
            else:
                result = fio.run_fio(command, timeout)
        except (fio.FioError, vhost.VhostBenchError, ceph.CephError) as error:
            self.error(f"rep {rep} {target.name} {workload.name}: {error}")
            return None
        row = self.make_row(rep, target, workload, result, command, daemon_command, loadavg)
        if daemon:
            # fio's whole lifetime, ramp included; the daemon does little outside the cell.
            cpu = systems.read_cpu_seconds(daemon.pid) - cpu_before
            wall = time.monotonic() - wall_before
            row["daemon_cpu_pct"] = cpu / wall * 100
            if result["iops"] > 0:
                row["daemon_cpu_us_per_io"] = cpu / wall / result["iops"] * 1e6
        self.raw_rows.append(row)
        return row

    def error(self, message):
        self.errors.append(message)
        print(f"error: {message}", file=sys.stderr, flush=True)

    def write_outputs(self, final):
        out = self.args.out
        report.write_tsv(os.path.join(out, "raw.tsv"), report.RAW_COLUMNS, self.raw_rows)
        report.write_tsv(os.path.join(out, "memory.tsv"),
                         ["rep", "target", "idle_rss_kib", "after_rss_kib", "after_hwm_kib"],
                         self.memory_rows)
        if not final:
            return None
        summary = report.Summary(self.raw_rows, self.targets, self.workloads)
        report.write_tsv(os.path.join(out, "summary.tsv"), report.SUMMARY_COLUMNS, summary.rows())
        chart_files = []
        try:
            chart_files = charts.draw_all(summary, out)
        except charts.ChartError as error:
            self.error(str(error))
        self.facts["load average at end"] = machine.load_average()
        text = report.markdown(summary, self.facts, self.settings, self.memory_rows, chart_files)
        if self.errors:
            text += "\n## Errors\n\n" + "\n".join(f"- {e}" for e in self.errors) + "\n"
        with open(os.path.join(out, "summary.md"), "w") as md:
            md.write(text)
        return summary


def main():
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    args = parse_args(repo)
    if shutil.which("fio") is None:
        sys.exit("error: fio is not installed (apt-get install fio)")
    binaries = find_binaries(args, repo)
    run = Run(args, repo, binaries)
    if not run.targets or not run.workloads:
        sys.exit("error: nothing to measure (no usable system for the chosen drivers)")
    estimate = run.estimate_s()
    print(f"{len(run.targets)} targets, {run.cells_per_rep()} cells × {args.reps} reps, "
          f"about {int(estimate) // 60} min {int(estimate) % 60} s; results in {args.out}")
    print("targets: " + ", ".join(t.name for t in run.targets), flush=True)
    if args.dry_run:
        for target in run.targets:
            command = run.daemon_command(target)
            native = "rbd bench" if target.driver == "rbd" else f"fio on {args.image}"
            print(" ".join(command) if command else f"{target.name}: {native}")
        for target in run.targets:
            if run.workloads_of(target):
                print(" ".join(run.cell_command(target, run.workloads_of(target)[0])))
        return 0
    os.makedirs(os.path.join(args.out, "logs"), exist_ok=True)
    if {"file", "file-io_uring", "pagecache", *matrix.FORMAT_DRIVERS} & set(args.driver_list):
        prepare_image(args.image, args.size)
        check_not_tmpfs(args.image)
        prepare_format_images(args.image, args.size, args.driver_list)
    prepare_mountpoint(run.mountpoint)
    if "virtiofsd" in args.system_list or "guest-virtiofsd" in args.system_list:
        prepare_share(run.share_dir, args.image)
    if any(system in matrix.GUEST_SYSTEMS for system in args.system_list):
        print(f"preparing the guest ({args.guest_kernel}, initramfs with fio)", flush=True)
        cells = [(w.name, guest.cell_command(w, args.runtime, args.ramp))
                 for w in run.workloads]
        try:
            run.guest = guest.Setup(repo, run.guest_dir, args.guest_kernel, args.guest_cache,
                                    args.guest_cpus, cells)
        except guest.GuestError as error:
            sys.exit(f"error: {error}")
        run.settings["guest"] = (f"kernel {run.guest.release} ({args.guest_kernel}), "
                                 f"{args.guest_cpus} vCPU(s), QEMU TCG")
    os.makedirs(os.path.dirname(run.socket_path), exist_ok=True)
    run.facts = machine.describe(repo, binaries, args.image)
    try:
        if run.cluster:
            print("starting a Ceph cluster and writing the rbd image", flush=True)
            run.cluster.start()
            run.facts["ceph (rbd driver)"] = (f"{run.cluster.version()}; one mon and one memstore "
                                              f"OSD on 127.0.0.1, image {ceph.POOL_IMAGE}")
        if run.nbd_server:
            run.nbd_server.start()
            run.facts["nbd server (nbd driver)"] = (f"{run.nbd_server.version()}, memory plugin, "
                                                    "unix socket")
        run.write_commands()
        run.run()
    except KeyboardInterrupt:
        run.error("interrupted; the results are partial")
    except (ceph.CephError, nbd.NbdError) as error:
        run.error(str(error))
    finally:
        if run.cluster:
            run.cluster.stop()
        if run.nbd_server:
            run.nbd_server.stop()
    run.write_outputs(final=True)
    print(f"\nwrote {os.path.join(args.out, 'summary.md')}")
    for description, verdict, failing in report.check_targets(
            report.Summary(run.raw_rows, run.targets, run.workloads)):
        print(f"  {verdict:12} {description}" + (f": {len(failing)} failing" if failing else ""))
    return 1 if run.errors else 0


if __name__ == "__main__":
    sys.exit(main())
