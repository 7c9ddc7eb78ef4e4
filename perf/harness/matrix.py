# SPDX-License-Identifier: GPL-2.0-or-later
"""What gets measured: fio workloads (the cells) and the systems under test (the targets)."""

from dataclasses import dataclass

RW_KINDS = ("read", "write", "randread", "randwrite")
ENGINES = ("aio", "sync")
NUMJOBS = (1, 4)
# file: the image with O_DIRECT on the host; pagecache: the same image through the host page cache
# (bexd and QSD cache.direct=off, virtiofsd without allow_direct_io); rbd and nbd: remote stores
# the harness starts (a Ceph cluster, an nbdkit server). All but null and file run on request.
# file-io_uring: the file driver with aio=io_uring instead of libaio (bexd and QSD).
DRIVERS = ("null", "file", "file-io_uring", "pagecache", "rbd", "nbd", "raw", "qcow2", "qcow2-empty",
           "qcow2-zlib")
DEFAULT_DRIVERS = ("null", "file")
# Disk image formats (issue 13), on request: the raw image under a `raw` node; a fully allocated
# qcow2 image; an empty qcow2 image, made anew before every cell (writes measure allocation); a
# zlib-compressed qcow2 image (reads only). All over a file node with O_DIRECT, served by bexd and
# QSD.
FORMAT_DRIVERS = ("raw", "qcow2", "qcow2-empty", "qcow2-zlib")
SYSTEMS = ("limit", "qsd", "native", "bexd", "vhost", "virtiofsd", "guest-bexd",
           "guest-virtiofsd", "bexd-passthrough", "bexd-uring")
# The guest systems (fio in a QEMU guest under TCG) are slow; they run on request.
DEFAULT_SYSTEMS = ("limit", "qsd", "native", "bexd", "vhost", "virtiofsd")
# Thread pool sizes of the virtiofsd targets (--thread-pool-size; 0 = the queue thread itself).
VIRTIOFSD_POOLS = (0, 1, 64)
# Systems driven by vhost_bench instead of fio: bexd's vhost-user-fs export and QEMU's virtiofsd.
VHOST_SYSTEMS = ("vhost", "virtiofsd")
# The same two backends under a real guest: fio runs in the guest on its virtio-fs mount.
GUEST_SYSTEMS = ("guest-bexd", "guest-virtiofsd")
# bexd's FUSE export with passthrough=on (issue 14): the kernel does the file driver's reads and
# writes on the image itself. On request; one queue (the queues serve no I/O).
PASSTHROUGH_SYSTEM = "bexd-passthrough"
# bexd's FUSE export over io_uring (issue 15, io-uring=on): one ring per possible CPU, so its
# queue count is that CPU count, compared with bexd over /dev/fuse and the limit responder with
# as many queues. On request, for the null and file drivers; needs the kernel's enable_uring.
URING_SYSTEM = "bexd-uring"
URING_DRIVERS = ("null", "file")
# What serves each vhost-user-fs system (bexd's export or virtiofsd), and the FUSE variants.
BACKEND = {"vhost": "bexd", "guest-bexd": "bexd", "virtiofsd": "virtiofsd",
           "guest-virtiofsd": "virtiofsd", PASSTHROUGH_SYSTEM: "bexd", URING_SYSTEM: "bexd"}


@dataclass(frozen=True)
class Workload:
    rw: str  # fio rw=
    engine: str  # aio: libaio at QD16; sync: pvsync2 at QD1
    numjobs: int

    @property
    def name(self):
        return f"{self.rw}-{self.engine}-j{self.numjobs}"

    @property
    def is_write(self):
        return "write" in self.rw


@dataclass(frozen=True)
class Target:
    system: str  # one of SYSTEMS; vhost is bexd's vhost-user-fs export driven by vhost_bench
    # one of DRIVERS; the limit responder counts as null (it serves zeroes); native is fio on the
    # image file for file and `rbd bench` for rbd
    driver: str
    queues: int  # FUSE queues (vhost: request rings); 1 for systems without multi-queue FUSE
    # bexd, vhost and guest-bexd only: served by the baseline build (--baseline REV) instead of
    # this tree's, to compare two versions of bexd in one run.
    baseline: bool = False
    threads: int = 0  # virtiofsd only: its --thread-pool-size

    @property
    def name(self):
        if self.system == "limit":
            return f"limit-q{self.queues}"
        if self.system in ("bexd", "vhost", "guest-bexd"):
            prefix = "base-" if self.baseline else ""
            return f"{prefix}{self.system}-{self.driver}-q{self.queues}"
        if self.system == PASSTHROUGH_SYSTEM:
            return f"bexd-{self.driver}-passthrough"
        if self.system == URING_SYSTEM:
            return f"bexd-{self.driver}-uring"
        if self.system in ("virtiofsd", "guest-virtiofsd"):
            return f"{self.system}-{self.driver}-t{self.threads}"
        return f"{self.system}-{self.driver}"

    @property
    def current(self):
        """The same target served by this tree's build (itself unless it is a baseline)."""
        return Target(self.system, self.driver, self.queues)

    @property
    def base(self):
        """The same target served by the baseline build."""
        return Target(self.system, self.driver, self.queues, baseline=True)

    def runs(self, workload):
        """Whether `workload` applies: vhost_bench drives each ring from one thread, so it has no
        numjobs; its aio cells keep 16 requests in flight per ring, its sync cells one."""
        if self.driver == "qcow2-zlib" and workload.is_write:
            return False  # a write would allocate: the image would not stay compressed
        if self.driver == "qcow2-empty" and not workload.is_write:
            return False  # reads of an empty image read no clusters
        return self.system not in VHOST_SYSTEMS or workload.numjobs == 1


def all_workloads():
    return [Workload(rw, engine, jobs) for engine in ENGINES for jobs in NUMJOBS for rw in RW_KINDS]


def parse_workload(name):
    """Inverse of Workload.name; raises ValueError naming what is wrong."""
    parts = name.split("-")
    if len(parts) != 3 or parts[0] not in RW_KINDS or parts[1] not in ENGINES:
        raise ValueError(f"workload '{name}' is not RW-ENGINE-jN (e.g. randread-aio-j1)")
    if not parts[2].startswith("j") or not parts[2][1:].isdigit() or int(parts[2][1:]) < 1:
        raise ValueError(f"workload '{name}': numjobs part '{parts[2]}' is not jN with N >= 1")
    return Workload(parts[0], parts[1], int(parts[2][1:]))


def possible_cpus():
    """How many CPUs the kernel has FUSE io_uring queues for (/sys/devices/system/cpu/possible,
    e.g. "0-1" or "0,2-3")."""
    with open("/sys/devices/system/cpu/possible") as possible:
        count = 0
        for part in possible.read().strip().split(","):
            first, _, last = part.partition("-")
            count += int(last or first) - int(first) + 1
        return count


def targets(systems, drivers, queue_counts, baseline=False, virtiofsd_pools=VIRTIOFSD_POOLS):
    """All targets for the chosen systems, drivers and queue counts, in a stable order; with
    `baseline`, every bexd (image formats included), vhost and guest-bexd target is followed by its
    baseline twin. virtiofsd (one request queue) serves the file drivers only (file, pagecache),
    once per thread pool size; so does its guest twin."""
    result = []
    for driver in drivers:
        if driver in FORMAT_DRIVERS:
            # Only the FUSE exports of bexd and QSD serve images.
            if "qsd" in systems:
                result.append(Target("qsd", driver, 1))
            if "bexd" in systems:
                result += [Target("bexd", driver, q) for q in queue_counts]
                if baseline:
                    result += [Target("bexd", driver, q, baseline=True) for q in queue_counts]
            continue
        if "limit" in systems and driver == "null":
            result += [Target("limit", "null", q) for q in queue_counts]
        if "qsd" in systems:
            result.append(Target("qsd", driver, 1))
        if "native" in systems and driver in ("file", "rbd"):
            result.append(Target("native", driver, 1))
        for system in ("bexd", "vhost"):
            if system in systems:
                result += [Target(system, driver, q) for q in queue_counts]
                if baseline:
                    result += [Target(system, driver, q, baseline=True) for q in queue_counts]
        if PASSTHROUGH_SYSTEM in systems and driver == "file":
            result.append(Target(PASSTHROUGH_SYSTEM, driver, 1))
        if URING_SYSTEM in systems and driver in URING_DRIVERS:
            result.append(Target(URING_SYSTEM, driver, possible_cpus()))
        if "virtiofsd" in systems and driver in ("file", "pagecache"):
            result += [Target("virtiofsd", driver, 1, threads=t) for t in virtiofsd_pools]
        if "guest-bexd" in systems:
            result += [Target("guest-bexd", driver, q) for q in queue_counts]
            if baseline:
                result += [Target("guest-bexd", driver, q, baseline=True) for q in queue_counts]
        if "guest-virtiofsd" in systems and driver in ("file", "pagecache"):
            result += [Target("guest-virtiofsd", driver, 1, threads=t) for t in virtiofsd_pools]
    return result
