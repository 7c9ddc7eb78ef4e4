# SPDX-License-Identifier: GPL-2.0-or-later
"""Turning raw per-repetition results into medians, ratios, target checks, TSV and markdown."""

import statistics

from harness.matrix import DRIVERS, GUEST_SYSTEMS, URING_SYSTEM, VHOST_SYSTEMS, Target
from harness import fio

RAW_COLUMNS = ["rep", "target", "system", "driver", "queues", "workload", "rw", "engine",
               "numjobs", "iops", "bw_kib", "lat_mean_us", "lat_p99_us", "daemon_cpu_pct",
               "daemon_cpu_us_per_io", "fio_usr_pct", "fio_sys_pct", "loadavg", "daemon_command",
               "fio_command", "qemu_cpu_us_per_io", "daemon_switches_per_io",
               "daemon_syscalls_per_io"]

SUMMARY_COLUMNS = ["target", "system", "driver", "queues", "workload", "reps", "iops_median",
                   "iops_min", "iops_max", "spread_pct", "lat_mean_us_median",
                   "daemon_cpu_us_per_io_median", "vs_qsd", "vs_limit_same_queues", "vs_native",
                   "vs_one_queue", "vs_base", "vs_best_virtiofsd", "vs_dev_fuse_same_queues",
                   "qemu_cpu_us_per_io_median",
                   "daemon_switches_per_io_median", "daemon_syscalls_per_io_median"]

# The systems bexd serves (the ones with baseline twins).
BEXD_SYSTEMS = ("bexd", "vhost", "guest-bexd")

# Issue 15, bexd's vhost-user-fs export against the best virtiofsd thread pool with the same host
# cache: each bexd system, the virtiofsd system it is compared with, and the goal.
VIRTIOFSD_PEERS = {"vhost": ("virtiofsd", 1.5), "guest-bexd": ("guest-virtiofsd", 1.0)}


def write_tsv(path, columns, rows):
    with open(path, "w") as out:
        out.write("\t".join(columns) + "\n")
        for row in rows:
            out.write("\t".join(_cell(row.get(column, "")) for column in columns) + "\n")


def _cell(value):
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value).replace("\t", " ").replace("\n", " ")


class Summary:
    """Medians per (target, workload) and the ratios derived from them."""

    def __init__(self, raw_rows, targets, workloads):
        self.targets = targets
        self.workloads = workloads
        self.cells = {}
        for target in targets:
            for workload in workloads:
                rows = [r for r in raw_rows
                        if r["target"] == target.name and r["workload"] == workload.name]
                if rows:
                    self.cells[(target.name, workload.name)] = _summarize(rows)

    def median(self, target_name, workload_name):
        cell = self.cells.get((target_name, workload_name))
        return cell["iops_median"] if cell else None

    def ratio(self, target, workload, other_name):
        mine = self.median(target.name, workload.name)
        other = self.median(other_name, workload.name)
        if mine is None or not other:
            return None
        return mine / other

    def best_virtiofsd(self, system, driver, workload_name):
        """The target of virtiofsd `system` with the highest median for `driver` in that
        workload, as (name, median), or None when none measured it."""
        measured = [(self.median(t.name, workload_name), t.name) for t in self.targets
                    if t.system == system and t.driver == driver]
        measured = [(median, name) for median, name in measured if median]
        if not measured:
            return None
        median, name = max(measured)
        return name, median

    def vs_best_virtiofsd(self, target, workload):
        best = self.best_virtiofsd(VIRTIOFSD_PEERS[target.system][0], target.driver,
                                   workload.name)
        mine = self.median(target.name, workload.name)
        if best is None or mine is None:
            return None
        return mine / best[1]

    def references(self, target):
        """The targets a bexd FUSE target is compared with: (column label, target name)."""
        if target.system == URING_SYSTEM:
            refs = [("/dev/fuse", f"bexd-{target.driver}-q{target.queues}"),
                    ("QSD", f"qsd-{target.driver}")]
            if target.driver == "null":
                return refs + [("limit", f"limit-q{target.queues}")]
            return refs + [("native", f"native-{target.driver}")]
        refs = [("QSD", f"qsd-{target.driver}")]
        if target.driver == "null":
            refs.append(("limit", f"limit-q{target.queues}"))
        elif target.driver == "file-io_uring":  # fio on the image, and bexd with libaio
            refs += [("native", "native-file"), ("libaio", f"bexd-file-q{target.queues}")]
        elif target.driver != "nbd":  # nbd has no native reference, only QSD on its server
            refs.append(("native", f"native-{target.driver}"))
        refs.append(("base", target.base.name))
        return refs

    def rows(self):
        rows = []
        for target in self.targets:
            for workload in self.workloads:
                cell = self.cells.get((target.name, workload.name))
                if cell is None:
                    continue
                row = {"target": target.name, "system": target.system, "driver": target.driver,
                       "queues": target.queues, "workload": workload.name, **cell}
                if target.system == URING_SYSTEM:
                    row["vs_dev_fuse_same_queues"] = _fmt_ratio(self.ratio(
                        target, workload, f"bexd-{target.driver}-q{target.queues}"))
                if target.system in ("bexd", URING_SYSTEM):
                    row["vs_qsd"] = _fmt_ratio(self.ratio(target, workload, f"qsd-{target.driver}"))
                    if target.driver == "null":
                        row["vs_limit_same_queues"] = _fmt_ratio(
                            self.ratio(target, workload, f"limit-q{target.queues}"))
                    else:
                        row["vs_native"] = _fmt_ratio(
                            self.ratio(target, workload, f"native-{target.driver}"))
                if target.system == "vhost":
                    one_queue = Target("vhost", target.driver, 1, target.baseline)
                    row["vs_one_queue"] = _fmt_ratio(self.ratio(target, workload, one_queue.name))
                if target.system in BEXD_SYSTEMS and not target.baseline:
                    row["vs_base"] = _fmt_ratio(self.ratio(target, workload, target.base.name))
                if target.system in VIRTIOFSD_PEERS and not target.baseline:
                    row["vs_best_virtiofsd"] = _fmt_ratio(self.vs_best_virtiofsd(target, workload))
                rows.append(row)
        return rows


def _summarize(rows):
    iops = [r["iops"] for r in rows]
    median = statistics.median(iops)

    def median_of(key):
        values = [r[key] for r in rows if r.get(key, "") != ""]
        return statistics.median(values) if values else ""

    return {
        "reps": len(rows),
        "iops_median": median,
        "iops_min": min(iops),
        "iops_max": max(iops),
        "spread_pct": (max(iops) - min(iops)) / 2 / median * 100 if median else 0.0,
        "lat_mean_us_median": statistics.median(r["lat_mean_us"] for r in rows),
        "daemon_cpu_us_per_io_median": median_of("daemon_cpu_us_per_io"),
        "qemu_cpu_us_per_io_median": median_of("qemu_cpu_us_per_io"),
        "daemon_switches_per_io_median": median_of("daemon_switches_per_io"),
        "daemon_syscalls_per_io_median": median_of("daemon_syscalls_per_io"),
    }


def _fmt_ratio(value):
    return "" if value is None else round(value, 3)


def _header_rows(header):
    """The first two lines of a markdown table with the column titles `header`."""
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]


def _kiops(cell):
    if cell is None:
        return "–"
    return f"{cell['iops_median'] / 1000:.1f}k ±{cell['spread_pct']:.0f}%"


# --- issue 5 targets ---------------------------------------------------------------------------

def check_targets(summary):
    """[(description, verdict, failing cells)] for the issue 5 goals, over the cells measured."""
    bexd = [t for t in summary.targets if t.system == "bexd" and not t.baseline]
    checks = []

    def check(description, targets, workload_filter, reference, minimum):
        failing, compared = [], 0
        for target in targets:
            for workload in summary.workloads:
                if not workload_filter(workload):
                    continue
                ratio = summary.ratio(target, workload, reference(target))
                if ratio is None:
                    continue
                compared += 1
                if ratio < minimum:
                    failing.append(f"{target.name} {workload.name} ({ratio:.2f}×)")
        verdict = "not measured" if compared == 0 else ("met" if not failing else "NOT met")
        checks.append((f"{description} ({compared} cells)", verdict, failing))

    null_targets = [t for t in bexd if t.driver == "null"]
    file_targets = [t for t in bexd if t.driver in ("file", "file-io_uring")]
    check("null: every cell ≥ 90 % of the limit responder with the same queue count",
          null_targets, lambda w: True, lambda t: f"limit-q{t.queues}", 0.9)
    check("null: every aio cell ≥ 1.3× QSD", null_targets, lambda w: w.engine == "aio",
          lambda t: "qsd-null", 1.3)
    check("null: no cell below QSD", null_targets, lambda w: True, lambda t: "qsd-null", 1.0)
    check("file: every aio cell ≥ 1.5× QSD", file_targets, lambda w: w.engine == "aio",
          lambda t: "qsd-file", 1.5)
    check("file: no sync cell below QSD", file_targets, lambda w: w.engine == "sync",
          lambda t: "qsd-file", 1.0)
    rbd_targets = [t for t in bexd if t.driver == "rbd"]
    check("rbd: every cell ≥ 90 % of `rbd bench` at the same queue depth", rbd_targets,
          lambda w: True, lambda t: "native-rbd", 0.9)
    check("rbd: every cell ≥ 1.3× QSD", rbd_targets, lambda w: True, lambda t: "qsd-rbd", 1.3)
    nbd_targets = [t for t in bexd if t.driver == "nbd"]
    check("nbd: every cell ≥ 1.3× QSD (same nbdkit server)", nbd_targets, lambda w: True,
          lambda t: "qsd-nbd", 1.3)

    # Issue 13: disk image formats against bexd's raw file export and QSD serving the same image.
    def of(driver):
        return [t for t in bexd if t.driver == driver]
    qd16 = lambda w: w.engine == "aio"  # noqa: E731
    check("qcow2 (allocated): every cell ≥ 0.9× bexd's file export with the same queues",
          of("qcow2"), lambda w: True, lambda t: f"bexd-file-q{t.queues}", 0.9)
    check("qcow2 (allocated): every QD16 cell ≥ 1.5× QSD's qcow2", of("qcow2"), qd16,
          lambda t: "qsd-qcow2", 1.5)
    check("qcow2 (empty): first writes ≥ 1.3× QSD's", of("qcow2-empty"), lambda w: True,
          lambda t: "qsd-qcow2-empty", 1.3)
    check("qcow2 (zlib): sequential reads at least QSD's", of("qcow2-zlib"),
          lambda w: w.rw == "read", lambda t: "qsd-qcow2-zlib", 1.0)
    check("raw: every cell ≥ 0.9× bexd's file export with the same queues", of("raw"),
          lambda w: True, lambda t: f"bexd-file-q{t.queues}", 0.9)

    # More queues never lose at QD1: each multi-queue bexd target against its one-queue sibling.
    failing, compared = [], 0
    for target in bexd:
        if target.queues == 1:
            continue
        for workload in summary.workloads:
            if workload.engine != "sync":
                continue
            ratio = summary.ratio(target, workload, f"bexd-{target.driver}-q1")
            if ratio is None:
                continue
            compared += 1
            if ratio < 1.0:
                one = summary.cells[(f"bexd-{target.driver}-q1", workload.name)]
                within = ratio * one["iops_median"] >= one["iops_min"]
                failing.append(f"{target.name} {workload.name} ({ratio:.2f}× of q1"
                               f"{', within q1 spread' if within else ''})")
    verdict = "not measured" if compared == 0 else ("met" if not failing else "NOT met")
    checks.append((f"more queues never lose at QD1 (sync cells, q>1 vs q1; {compared} cells)",
                   verdict, failing))
    # Issue 15: FUSE over io_uring against /dev/fuse with as many queues as it has rings.
    uring = [t for t in summary.targets if t.system == URING_SYSTEM]
    same_queues = lambda t: f"bexd-{t.driver}-q{t.queues}"  # noqa: E731
    null_uring = [t for t in uring if t.driver == "null"]
    check("io_uring null: sync-j1 cells ≥ 1.5× bexd over /dev/fuse with the same queue count",
          null_uring, lambda w: w.engine == "sync" and w.numjobs == 1, same_queues, 1.5)
    check("io_uring null: every cell ≥ 1.2× the /dev/fuse limit responder with the same queue "
          "count", null_uring, lambda w: True, lambda t: f"limit-q{t.queues}", 1.2)
    check("io_uring: no cell below bexd over /dev/fuse with the same queue count", uring,
          lambda w: True, same_queues, 1.0)
    checks.append(_check_against_baseline(summary))
    for system in VIRTIOFSD_PEERS:
        checks.append(_check_against_virtiofsd(summary, system))
    return checks


def _check_against_virtiofsd(summary, system):
    """Every cell of bexd's `system` at least its goal × the best virtiofsd thread pool with the
    same host cache (file: O_DIRECT on both; pagecache: the host page cache on both)."""
    peer, goal = VIRTIOFSD_PEERS[system]
    failing, compared = [], 0
    for target in summary.targets:
        if target.system != system or target.baseline:
            continue
        for workload in summary.workloads:
            ratio = summary.vs_best_virtiofsd(target, workload)
            if ratio is None:
                continue
            compared += 1
            if ratio < goal:
                best = summary.best_virtiofsd(peer, target.driver, workload.name)[0]
                failing.append(f"{target.name} {workload.name} ({ratio:.2f}× {best})")
    verdict = "not measured" if compared == 0 else ("met" if not failing else "NOT met")
    return (f"{system}: every cell ≥ {goal}× the best {peer} thread pool with the same host "
            f"cache ({compared} cells)", verdict, failing)


def _check_against_baseline(summary):
    """No cell of this tree's bexd below its baseline twin beyond both spreads: this tree's best
    repetition below the baseline's worst."""
    failing, compared = [], 0
    for target in summary.targets:
        if target.system not in BEXD_SYSTEMS or target.baseline:
            continue
        for workload in summary.workloads:
            mine = summary.cells.get((target.name, workload.name))
            base = summary.cells.get((target.base.name, workload.name))
            if mine is None or base is None:
                continue
            compared += 1
            if mine["iops_max"] < base["iops_min"]:
                failing.append(f"{target.name} {workload.name} "
                               f"({mine['iops_median'] / base['iops_median']:.2f}× of base)")
    verdict = "not measured" if compared == 0 else ("met" if not failing else "NOT met")
    return (f"no cell below the baseline build beyond the spread of both ({compared} cells)",
            verdict, failing)


# --- markdown ----------------------------------------------------------------------------------

def markdown(summary, facts, settings, memory_rows, chart_files):
    lines = [f"# bexd FUSE export benchmark, {settings['date']} ({settings['mode']} mode)", ""]
    lines += ["| fact | value |", "|---|---|"]
    lines += [f"| {key} | {value} |" for key, value in facts.items()]
    lines += [f"| {key} | {value} |" for key, value in settings.items() if key not in ("date",)]
    lines.append("")
    lines.append("IOPS: median over repetitions, ± half the min–max range as % of the median. "
                 f"Ratios compare medians. bs={fio.BLOCK_SIZE}, direct=1; aio = libaio QD16, sync = pvsync2 QD1; "
                 "jN = numjobs N (group_reporting, all jobs on the one file).")
    lines.append("")
    for driver in DRIVERS:
        lines += _driver_table(summary, driver)
    lines += _vhost_table(summary)
    for system in VIRTIOFSD_PEERS:
        lines += _virtiofsd_table(summary, system)
    lines += _guest_cost_table(summary)
    lines += _cpu_table(summary)
    lines += _memory_table(memory_rows)
    lines += ["## Goals", ""]
    checks = check_targets(summary)
    for description, verdict, failing in checks:
        lines.append(f"- **{verdict}** — {description}")
        for cell in failing:
            lines.append(f"  - {cell}")
    lines.append("")
    if chart_files:
        lines += ["## Charts", ""]
        lines += [f"![{name}]({name})" for name in chart_files]
        lines.append("")
    lines += ["Exact daemon and fio command lines: `commands.md`; every repetition: `raw.tsv`.", ""]
    return "\n".join(lines)


def _driver_table(summary, driver):
    targets = [t for t in summary.targets
               if t.driver == driver and t.system not in VHOST_SYSTEMS + GUEST_SYSTEMS]
    if not targets:
        return []
    bexd = [t for t in targets if t.system in ("bexd", URING_SYSTEM) and not t.baseline]
    ratio_columns = []
    for target in bexd:
        prefix = "uring" if target.system == URING_SYSTEM else f"q{target.queues}"
        for label, reference in summary.references(target):
            if any(t.name == reference for t in summary.targets):
                ratio_columns.append((f"{prefix}/{label}", target, reference))
    header = ["workload"] + [t.name for t in targets] + [c[0] for c in ratio_columns]
    lines = [f"## {driver} driver (IOPS)", ""] + _header_rows(header)
    for workload in summary.workloads:
        cells = [_kiops(summary.cells.get((t.name, workload.name))) for t in targets]
        for _, target, reference in ratio_columns:
            ratio = summary.ratio(target, workload, reference)
            cells.append("–" if ratio is None else f"{ratio:.2f}")
        lines.append(f"| {workload.name} | " + " | ".join(cells) + " |")
    lines.append("")
    return lines


def _vhost_table(summary):
    """The vhost-user-fs cells: requests per second by ring count, and each against one ring."""
    targets = [t for t in summary.targets if t.system == "vhost"]
    if not targets:
        return []
    workloads = [w for w in summary.workloads if targets[0].runs(w)]
    ratio_columns = [(f"{t.driver} q{t.queues}/q1", t, Target("vhost", t.driver, 1).name)
                     for t in targets if t.queues != 1 and not t.baseline]
    ratio_columns += [(f"{t.driver} q{t.queues}/base", t, t.base.name)
                      for t in targets if not t.baseline and t.base in targets]
    header = ["workload"] + [t.name for t in targets] + [c[0] for c in ratio_columns]
    lines = ["## vhost-user-fs export (requests/s through the test frontend)", "",
             "vhost_bench (perf/vhost_bench.cc) plays QEMU and the guest driver: one thread per "
             "request ring, aio = 16 requests in flight per ring, sync = 1; no guest kernel, so "
             "these numbers are the backend's own and are not comparable with the FUSE tables. "
             "The frontend shares the machine's 2 CPUs with bexd.", ""] + _header_rows(header)
    for workload in workloads:
        cells = [_kiops(summary.cells.get((t.name, workload.name))) for t in targets]
        for _, target, reference in ratio_columns:
            ratio = summary.ratio(target, workload, reference)
            cells.append("–" if ratio is None else f"{ratio:.2f}")
        lines.append(f"| {workload.name} | " + " | ".join(cells) + " |")
    lines.append("")
    return lines


def _virtiofsd_table(summary, system):
    """bexd's vhost-user-fs export (`system`: vhost through vhost_bench, or guest-bexd with fio in
    a guest) against QEMU's virtiofsd driven the same way, per host cache mode: every ring count
    of bexd against the best virtiofsd thread pool of the cell."""
    peer, _ = VIRTIOFSD_PEERS[system]
    lines = []
    for driver in DRIVERS:
        theirs = [t for t in summary.targets if t.system == peer and t.driver == driver]
        ours = [t for t in summary.targets if t.system == system and t.driver == driver]
        if not theirs or not ours:
            continue
        cache = ("O_DIRECT on the host: bexd cache.direct=on,aio=native; virtiofsd "
                 "allow_direct_io, and OPEN carries O_DIRECT" if driver == "file" else
                 "the host page cache: bexd cache.direct=off,aio=native; virtiofsd without "
                 "allow_direct_io; the image is read into the cache before each target")
        header = (["workload"] + [t.name for t in ours + theirs] + ["best virtiofsd"] +
                  [f"{'base ' if t.baseline else ''}q{t.queues}/best" for t in ours])
        if system == "vhost":
            how = ("Requests/s through vhost_bench. virtiofsd 7.2 serves one request queue; tN "
                   "is its --thread-pool-size (0: the queue thread does the I/O itself). qN/best: "
                   "bexd with N rings (N × the in-flight requests) against the best virtiofsd "
                   "configuration of the row; q1 is the like-for-like load.")
            title = f"vhost-user-fs: bexd against virtiofsd, {driver}"
        else:
            how = ("IOPS of fio in a QEMU guest (TCG) on its virtio-fs mount; the guest's OPEN "
                   "carries O_DIRECT (fio --direct=1). virtiofsd 7.2 serves one request queue; "
                   "tN is its --thread-pool-size. qN/best: bexd with N request queues against "
                   "the best virtiofsd configuration of the row (the guest's kernel decides "
                   "which queues it uses).")
            title = f"Real guest: bexd against virtiofsd, {driver}"
        lines += [f"## {title} ({cache})", "", how, ""] + _header_rows(header)
        for workload in summary.workloads:
            if not ours[0].runs(workload):
                continue
            cells = [_kiops(summary.cells.get((t.name, workload.name))) for t in ours + theirs]
            best = summary.best_virtiofsd(peer, driver, workload.name)
            cells.append("–" if best is None else best[0].rsplit("-", 1)[1])
            for target in ours:
                ratio = summary.vs_best_virtiofsd(target, workload)
                cells.append("–" if ratio is None else f"{ratio:.2f}")
            lines.append(f"| {workload.name} | " + " | ".join(cells) + " |")
        lines.append("")
    return lines


def _guest_cost_table(summary):
    """Where the time of a guest request goes: per target and cell, the backend's CPU time, its
    context switches and QEMU's CPU time (the guest's vCPUs and QEMU's main loop) per request."""
    targets = [t for t in summary.targets if t.system in GUEST_SYSTEMS]
    if not targets:
        return []
    lines = ["## Real guest: cost per request (median)", "",
             "backend CPU µs / backend context switches / backend system calls / QEMU CPU µs "
             "(the guest's vCPUs and QEMU's main loop), per request: what each spent while fio "
             "ran (sampled when the guest's console marks its start and end) over the requests "
             "of runtime and ramp. System calls: `perf stat -e raw_syscalls:sys_enter -p` on the "
             "backend's threads that exist when fio starts (– without perf).", ""]
    lines += _header_rows(["workload"] + [t.name for t in targets])

    def costs(cell):
        if cell["daemon_cpu_us_per_io_median"] == "":
            return None
        syscalls = cell["daemon_syscalls_per_io_median"]
        return (f"{cell['daemon_cpu_us_per_io_median']:.0f} / "
                f"{cell['daemon_switches_per_io_median']:.2f} / "
                f"{'–' if syscalls == '' else f'{syscalls:.1f}'} / "
                f"{cell['qemu_cpu_us_per_io_median']:.0f}")

    return lines + _workload_rows(summary, targets, costs) + [""]


def _cpu_table(summary):
    daemons = [t for t in summary.targets if t.system != "native"]
    if not daemons:
        return []
    lines = ["## Daemon CPU time per request (µs, median)", "",
             "User plus system time of all daemon threads during the cell, divided by the "
             "requests completed; FUSE work the kernel does in fio's context is not included.", ""]
    lines += _header_rows(["workload"] + [t.name for t in daemons])

    def cpu(cell):
        value = cell["daemon_cpu_us_per_io_median"]
        return None if value == "" else f"{value:.1f}"

    return lines + _workload_rows(summary, daemons, cpu) + [""]


def _workload_rows(summary, targets, show):
    """One table row per workload with a value in it: `show(cell)` of each target's cell, or "–"
    where the cell is missing or `show` returns None."""
    rows = []
    for workload in summary.workloads:
        cells = []
        for target in targets:
            cell = summary.cells.get((target.name, workload.name))
            shown = show(cell) if cell else None
            cells.append("–" if shown is None else shown)
        if any(cell != "–" for cell in cells):
            rows.append(f"| {workload.name} | " + " | ".join(cells) + " |")
    return rows


def _memory_table(memory_rows):
    if not memory_rows:
        return []
    lines = ["## Resident memory (KiB, largest over repetitions)", "",
             "idle: after the mount is ready, before any I/O; after: when all workloads of the pass "
             "have run; peak: VmHWM at that point.", "",
             "| target | idle VmRSS | after VmRSS | peak VmHWM |", "|---|---|---|---|"]
    by_target = {}
    for row in memory_rows:
        agg = by_target.setdefault(row["target"], [0, 0, 0])
        agg[0] = max(agg[0], row["idle_rss_kib"])
        agg[1] = max(agg[1], row["after_rss_kib"])
        agg[2] = max(agg[2], row["after_hwm_kib"])
    for target, (idle, after, hwm) in by_target.items():
        lines.append(f"| {target} | {idle} | {after} | {hwm} |")
    lines.append("")
    return lines
